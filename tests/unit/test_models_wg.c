/*
 * WarpingNetwork (W) and SPADEDecoder (G) against the golden fixtures
 * (shared/fixtures/ditto: float64 references), plus the warp helpers
 * (coordinate grid, kp2gaussian, grid_sample 3-D), batch independence,
 * strict loading, and an opt-in full-size smoke run on random weights
 * (DITTO_TEST_FULLSIZE=1: official channels at a smaller spatial size;
 * DITTO_TEST_FULLSIZE=official: the official 64x64 input too).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buffer.h"
#include "core/log.h"
#include "core/rng.h"
#include "fixtures.h"
#include "models/models.h"
#include "models/warp_internal.h"
#include "weights/synthetic.h"
#include "nn/blocks.h"
#include "nn/weights.h"
#include "test_util.h"
#include "weights/catalog.h"

static Fixtures g_fx;   /* dir "" without a shared folder; manifest NULL when absent */

/* ---- tap: compare every reported intermediate the io file holds ---- */

typedef struct TapCmp {
    TestCtx *c;
    DittoCatalog *io;
    const char *cname;
    int compared;
} TapCmp;

static void tap_compare(void *ctx, const char *name, const DittoTensor *t)
{
    TapCmp *tc = ctx;
    char label[160];
    snprintf(label, sizeof label, "%s.%s", tc->cname, name);
    if (!ditto_catalog_find(tc->io, name))
        return;
    tc->compared++;
    if (!test_selected(tc->c, label))
        return;
    double *ref = io_ref(tc->io, name, t);
    if (!ref || !ditto_tensor_is_contiguous(t) || t->dtype != DITTO_F32) {
        free(ref);
        char buf[DITTO_SHAPE_STR_MAX];
        test_report(tc->c, label, false, "tap %s: shape differs from the reference or not contiguous f32",
                    ditto_shape_str(t->shape, t->ndim, buf, sizeof buf));
        return;
    }
    size_t n = (size_t)ditto_tensor_numel(t);
    float *h = malloc(n * sizeof *h);
    tc->c->be->download(tc->c->be, h, t->data, n * sizeof *h);
    check_values(tc->c, label, h, ref, n, FIXTURE_NET_TOL_REL_L2, FIXTURE_NET_TOL_MAX);
    free(h);
    free(ref);
}

/* Number of manifest intermediates of a case the io file holds. */
static int expected_taps(const char *cname, DittoCatalog *io)
{
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(fixture_case(&g_fx, cname), "intermediates"), *it;
    int n = 0;
    cJSON_ArrayForEach(it, im)
        n += ditto_catalog_find(io, it->string) != NULL;
    return n;
}

/* "<cname>.<out_name>" against the io file and "<cname>.taps" after a forward that returned rc in `seconds`; false when rc failed. */
static bool report_forward(TestCtx *c, const char *cname, const char *out_name, TT *out, DittoCatalog *io, const TapCmp *tc, int rc,
                           double seconds)
{
    char label[96];
    snprintf(label, sizeof label, "%s.%s", cname, out_name);
    if (rc < 0)
        return test_report(c, label, false, "forward rc %d", rc);
    check_out(c, label, out, io, fixture_case(&g_fx, cname), out_name);
    snprintf(label, sizeof label, "%s.taps", cname);
    int want = expected_taps(cname, io);
    test_report(c, label, tc->compared == want, "%d of %d stored intermediates reported (forward %.3f s)", tc->compared, want, seconds);
    return true;
}

/* "<cname>.batch_items": items of batch (B, ...) vs the outputs of B single-item runs (bitwise; rc: theirs); frees those. */
static void report_items(TestCtx *c, const char *cname, TT *batch, TT **single, int64_t B, int rc)
{
    char label[96];
    snprintf(label, sizeof label, "%s.batch_items", cname);
    if (rc < 0) {
        test_report(c, label, false, "single-item forward failed");
    } else {
        size_t n = (size_t)(ditto_tensor_numel(&batch->host) / B);
        long long diff = 0;
        double max_d = 0;
        for (int64_t b = 0; b < B; b++) {
            tt_to_host(single[b]);
            diff += (long long)item_diff(tt_f32(batch), b, tt_f32(single[b]), n, &max_d);
        }
        test_report(c, label, diff == 0, "%lld of %zu values differ from the single-item runs (max |diff| %.3g)", diff, n * (size_t)B, max_d);
    }
    for (int64_t b = 0; b < B && b < 8; b++)
        tt_free(single[b]);
}

/* A chunked run (got, freed here) against the unchunked one (ref, on the host): every value the same. */
static void report_same(TestCtx *c, const char *cname, const char *what, TT *ref, TT *got, int rc)
{
    char label[96];
    snprintf(label, sizeof label, "%s.%s", cname, what);
    if (rc < 0) {
        test_report(c, label, false, "chunked forward failed");
    } else {
        tt_to_host(got);
        double max_d = 0;
        size_t diff = item_diff(tt_f32(ref), 0, tt_f32(got), (size_t)ditto_tensor_numel(&ref->host), &max_d);
        test_report(c, label, diff == 0, "%zu values differ from the unchunked run (max |diff| %.3g)", diff, max_d);
    }
    tt_free(got);
}

/* ---- pure functions ---- */

static void test_fn_grid(TestCtx *c)
{
    const char *cname = "fn_make_coordinate_grid";
    if (!test_selected(c, cname))
        return;
    DittoCatalog *io = fixture_try_open(&g_fx, "fn_make_coordinate_grid.io.pth");
    if (!io) {
        test_report(c, cname, false, "cannot open the io file");
        return;
    }
    TT *t = tt_new(c, DITTO_F32, 4, (int64_t[]){ 5, 6, 7, 3 });
    int rc = ditto_warp_coordinate_grid(tt_f32(t), 5, 6, 7);
    tt_to_dev(t);   /* check_out downloads; keep host and device in step */
    if (rc < 0)
        test_report(c, cname, false, "rc %d", rc);
    else
        check_out(c, cname, t, io, fixture_case(&g_fx, cname), "out");
    tt_free(t);
    ditto_catalog_close(&io);
}

static void test_fn_kp2gaussian(TestCtx *c, DittoArena *ws)
{
    const char *cname = "fn_kp2gaussian";
    if (!test_selected(c, cname))
        return;
    DittoCatalog *io = fixture_try_open(&g_fx, "fn_kp2gaussian.io.pth");
    TT *kp = io ? io_input(c, io, "kp") : NULL;
    if (!kp) {
        test_report(c, cname, false, "cannot read the io file");
        ditto_catalog_close(&io);
        return;
    }
    const int64_t B = kp->host.shape[0], K = kp->host.shape[1], D = 4, H = 6, W = 8;
    TT *grid = tt_new(c, DITTO_F32, 4, (int64_t[]){ D, H, W, 3 });
    ditto_warp_coordinate_grid(tt_f32(grid), D, H, W);
    tt_to_dev(grid);
    TT *out = tt_new(c, DITTO_F32, 5, (int64_t[]){ B, K, D, H, W });
    int rc = ditto_warp_kp2gaussian(c->be, ws, &grid->dev, &kp->dev, DITTO_WARP_KP_VARIANCE, &out->dev);
    if (rc < 0)
        test_report(c, cname, false, "rc %d", rc);
    else
        check_out(c, cname, out, io, fixture_case(&g_fx, cname), "out");
    tt_free(out);
    tt_free(grid);
    tt_free(kp);
    ditto_catalog_close(&io);
}

static void test_fn_grid_sample(TestCtx *c)
{
    const char *cname = "fn_grid_sample_3d";
    if (!test_selected(c, cname))
        return;
    DittoCatalog *io = fixture_try_open(&g_fx, "fn_grid_sample_3d.io.pth");
    TT *x = io ? io_input(c, io, "input") : NULL, *g = io ? io_input(c, io, "grid") : NULL;
    if (!x || !g) {
        test_report(c, cname, false, "cannot read the io file");
    } else {
        TT *y = tt_new(c, DITTO_F32, 5, (int64_t[]){ x->host.shape[0], x->host.shape[1], g->host.shape[1], g->host.shape[2], g->host.shape[3] });
        int rc = ditto_warp_grid_sample(c->be, &x->dev, &g->dev, &y->dev);
        if (rc < 0)
            test_report(c, cname, false, "rc %d", rc);
        else
            check_out(c, cname, y, io, fixture_case(&g_fx, cname), "out");
        tt_free(y);
    }
    tt_free(x);
    tt_free(g);
    ditto_catalog_close(&io);
}

/* ---- networks ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_warp_case(TestCtx *c, DittoArena *ws, DittoWarp *w, const char *cname)
{
    if (!test_selected(c, cname))
        return;
    char file[64];
    snprintf(file, sizeof file, "%s.io.pth", cname);
    DittoCatalog *io = fixture_try_open(&g_fx, file);
    TT *f_s = io ? io_input(c, io, "feature_3d") : NULL;
    TT *kp_s = io ? io_input(c, io, "kp_source") : NULL, *kp_d = io ? io_input(c, io, "kp_driving") : NULL;
    if (!f_s || !kp_s || !kp_d) {
        test_report(c, cname, false, "cannot read the io file");
        goto done;
    }
    int64_t shape[4];
    if (ditto_warp_out_shape(w, &f_s->dev, shape) < 0) {
        test_report(c, cname, false, "out_shape failed");
        goto done;
    }
    const int64_t B = shape[0];
    TT *out = tt_new(c, DITTO_F32, 4, shape);
    TapCmp tc = { c, io, cname, 0 };
    DittoTap tap = { tap_compare, &tc };
    double t0 = now_s();
    int rc = ditto_warp_forward(w, ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &out->dev, &tap);
    double t1 = now_s();
    if (report_forward(c, cname, "out", out, io, &tc, rc, t1 - t0) && B > 1) {
        TT *single[8] = { 0 };
        for (int64_t b = 0; b < B && b < 8; b++) {
            TT *fb = tt_item(c, f_s, b), *sb = tt_item(c, kp_s, b), *db = tt_item(c, kp_d, b);
            int64_t s1[4] = { 1, shape[1], shape[2], shape[3] };
            single[b] = tt_new(c, DITTO_F32, 4, s1);
            rc |= ditto_warp_forward(w, ws, &fb->dev, &sb->dev, &db->dev, &single[b]->dev, NULL);
            tt_free(fb);
            tt_free(sb);
            tt_free(db);
        }
        report_items(c, cname, out, single, B, rc);
        /* chunks of one item (what the memory budget does at full size): the same bits */
        TT *chunked = tt_new(c, DITTO_F32, 4, shape);
        ditto_warp_set_budget(w, 1);
        rc = ditto_warp_forward(w, ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &chunked->dev, NULL);
        report_same(c, cname, "chunks_of_1", out, chunked, rc);
        /* and the deep levels in groups of two items (the last one short when B is odd) */
        TT *grouped = tt_new(c, DITTO_F32, 4, shape);
        ditto_warp_set_group(w, 2);
        rc = ditto_warp_forward(w, ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &grouped->dev, NULL);
        ditto_warp_set_group(w, 0);
        ditto_warp_set_budget(w, 0);
        report_same(c, cname, "chunks_of_1_groups_of_2", out, grouped, rc);
    }
    tt_free(out);
done:
    tt_free(f_s);
    tt_free(kp_s);
    tt_free(kp_d);
    ditto_catalog_close(&io);
}

/*
 * BatchNorm folding (the default load) against the unfolded network (conv,
 * batch_norm and relu ops) on the warp_b3 inputs: the same function up to
 * float rounding of the folded weights (1e-5, about 100x the float32
 * rounding seen; a fold error would be of the order of the norm's effect).
 */
static void test_warp_folding(TestCtx *c, DittoArena *ws, DittoWarp *folded, DittoCatalog *cat)
{
    const char *label = "warp_b3.bn_folding";
    if (!test_selected(c, label))
        return;
    DittoWarp *plain = NULL;
    DittoCatalog *io = fixture_try_open(&g_fx, "warp_b3.io.pth");
    TT *f_s = io ? io_input(c, io, "feature_3d") : NULL;
    TT *kp_s = io ? io_input(c, io, "kp_source") : NULL, *kp_d = io ? io_input(c, io, "kp_driving") : NULL;
    int64_t shape[4];
    if (!f_s || !kp_s || !kp_d || ditto_warp_load_ex(&plain, c->be, cat, false) < 0 || ditto_warp_out_shape(plain, &f_s->dev, shape) < 0) {
        test_report(c, label, false, "cannot load the unfolded network or read warp_b3.io.pth");
    } else {
        TT *a = tt_new(c, DITTO_F32, 4, shape), *b = tt_new(c, DITTO_F32, 4, shape);
        int rc = ditto_warp_forward(folded, ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &a->dev, NULL);
        if (rc >= 0)
            rc = ditto_warp_forward(plain, ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &b->dev, NULL);
        if (rc < 0 || tt_to_host(a) < 0 || tt_to_host(b) < 0) {
            test_report(c, label, false, "forward failed");
        } else {
            const size_t n = (size_t)ditto_tensor_numel(&a->host);
            double *ref = malloc(n * sizeof *ref);
            const float *bh = tt_f32(b);
            for (size_t i = 0; i < n; i++)
                ref[i] = bh[i];
            check_values(c, label, tt_f32(a), ref, n, 1e-5, 1e-5);
            free(ref);
        }
        tt_free(a);
        tt_free(b);
    }
    ditto_warp_free(&plain);
    tt_free(f_s);
    tt_free(kp_s);
    tt_free(kp_d);
    ditto_catalog_close(&io);
}

static void test_decoder_case(TestCtx *c, DittoArena *ws, DittoDecoder *g, const char *cname)
{
    if (!test_selected(c, cname))
        return;
    char file[64];
    snprintf(file, sizeof file, "%s.io.pth", cname);
    DittoCatalog *io = fixture_try_open(&g_fx, file);
    TT *feat = io ? io_input(c, io, "feature") : NULL;
    if (!feat) {
        test_report(c, cname, false, "cannot read the io file");
        ditto_catalog_close(&io);
        return;
    }
    int64_t shape[4];
    if (ditto_decoder_out_shape(g, &feat->dev, shape) < 0) {
        test_report(c, cname, false, "out_shape failed");
        tt_free(feat);
        ditto_catalog_close(&io);
        return;
    }
    const int64_t B = shape[0];
    TT *img = tt_new(c, DITTO_F32, 4, shape);
    TapCmp tc = { c, io, cname, 0 };
    DittoTap tap = { tap_compare, &tc };
    double t0 = now_s();
    int rc = ditto_decoder_forward(g, ws, &feat->dev, &img->dev, &tap);
    double t1 = now_s();
    if (report_forward(c, cname, "img", img, io, &tc, rc, t1 - t0) && B > 1) {
        TT *single[8] = { 0 };
        for (int64_t b = 0; b < B && b < 8; b++) {
            TT *fb = tt_item(c, feat, b);
            int64_t s1[4] = { 1, shape[1], shape[2], shape[3] };
            single[b] = tt_new(c, DITTO_F32, 4, s1);
            rc |= ditto_decoder_forward(g, ws, &fb->dev, &single[b]->dev, NULL);
            tt_free(fb);
        }
        report_items(c, cname, img, single, B, rc);
        /* the up blocks on chunks of one item (what the memory budget does at full size): the same bits */
        TT *chunked = tt_new(c, DITTO_F32, 4, shape);
        ditto_decoder_set_up_budget(g, 1);
        rc = ditto_decoder_forward(g, ws, &feat->dev, &chunked->dev, NULL);
        ditto_decoder_set_up_budget(g, 0);
        report_same(c, cname, "up_chunks_of_1", img, chunked, rc);
    }
    tt_free(img);
    tt_free(feat);
    ditto_catalog_close(&io);
}

/* ---- activation layouts: the channels-last forward (forced) against the NCHW one ---- */

#define LAYOUT_MAX_TAPS 16

/* Host copies of the reported intermediates (contiguous float32). */
typedef struct TapStore {
    TestCtx *c;
    int n;
    char name[LAYOUT_MAX_TAPS][32];
    float *data[LAYOUT_MAX_TAPS];
    size_t numel[LAYOUT_MAX_TAPS];
} TapStore;

static void tap_store(void *ctx, const char *name, const DittoTensor *t)
{
    TapStore *ts = ctx;
    if (ts->n == LAYOUT_MAX_TAPS || !ditto_tensor_is_contiguous(t) || t->dtype != DITTO_F32)
        return;
    size_t n = (size_t)ditto_tensor_numel(t);
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (!h || ts->c->be->download(ts->c->be, h, t->data, n * sizeof *h) < 0) {
        free(h);
        return;
    }
    snprintf(ts->name[ts->n], sizeof ts->name[0], "%s", name);
    ts->data[ts->n] = h;
    ts->numel[ts->n++] = n;
}

static void tap_store_free(TapStore *ts)
{
    for (int i = 0; i < ts->n; i++)
        free(ts->data[i]);
    ts->n = 0;
}

/*
 * got against ref (n floats): with exact, on the CPU bit for bit (the
 * channels-last ops transpose around the NCHW code); elsewhere, or when the
 * two runs sum in another order, within float32 rounding.
 */
static bool same_values(TestCtx *c, const char *label, const float *got, const float *ref, size_t n, bool exact)
{
    if (exact && c->be->device == DITTO_DEVICE_CPU) {
        double max_d = 0;
        size_t diff = item_diff(ref, 0, got, n, &max_d);
        return test_report(c, label, diff == 0, "%zu of %zu values differ from the channels-first forward (max |diff| %.3g)", diff, n, max_d);
    }
    double *r = malloc((n ? n : 1) * sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = ref[i];
    bool ok = check_values(c, label, got, r, n, 1e-5, 1e-4);
    free(r);
    return ok;
}

/*
 * The three runs of a layout comparison: ref (channels-first, taps t0), got
 * (channels-last, taps t1) and chunked (channels-last in chunks): got and
 * every tap the same values as ref's (exact: see same_values), chunked the
 * same bits as got. Frees the runs and the taps. (merge_compare: ref
 * unmerged, got and chunked merged, all channels-last.)
 */
static void report_layouts(TestCtx *c, const char *cname, const char *out, const char *chunks, bool exact, int rc0, int rc1, int rc2,
                           TT *ref, TT *got, TT *chunked, TapStore *t0, TapStore *t1)
{
    char label[96];
    snprintf(label, sizeof label, "%s.%s", cname, out);
    if (rc0 < 0 || rc1 < 0 || rc2 < 0) {
        test_report(c, label, false, "forward rc: reference %d, under test %d, under test chunked %d", rc0, rc1, rc2);
    } else {
        tt_to_host(ref);
        tt_to_host(got);
        tt_to_host(chunked);
        size_t n = (size_t)ditto_tensor_numel(&ref->host);
        same_values(c, label, tt_f32(got), tt_f32(ref), n, exact);
        snprintf(label, sizeof label, "%s.taps", cname);
        bool names = t0->n == t1->n && t0->n > 0;
        for (int i = 0; names && i < t0->n; i++)
            names = !strcmp(t0->name[i], t1->name[i]) && t0->numel[i] == t1->numel[i];
        test_report(c, label, names, "%d intermediates reported by the reference run, %d by the one under test, same names and sizes", t0->n, t1->n);
        for (int i = 0; names && i < t0->n; i++) {
            snprintf(label, sizeof label, "%s.tap.%s", cname, t0->name[i]);
            same_values(c, label, t1->data[i], t0->data[i], t0->numel[i], exact);
        }
        snprintf(label, sizeof label, "%s.%s", cname, chunks);
        double max_d = 0;
        size_t diff = item_diff(tt_f32(got), 0, tt_f32(chunked), n, &max_d);
        test_report(c, label, diff == 0, "%zu values differ from the unchunked run under test (max |diff| %.3g)", diff, max_d);
    }
    tap_store_free(t0);
    tap_store_free(t1);
    tt_free(ref);
    tt_free(got);
    tt_free(chunked);
}

/*
 * Forward feat through g as ref (layout, merge: ditto_decoder_set_layout /
 * _set_merge) and as got, both with taps, and as got in up chunks of one
 * item; report_layouts compares them (exact or within float32 rounding).
 * count: also report how many values of img differ at all.
 */
static void decoder_runs(TestCtx *c, DittoArena *ws, DittoDecoder *g, TT *feat, const char *cname, int ref_layout, int ref_merge, int got_layout,
                         int got_merge, bool exact, bool count)
{
    int64_t shape[4];
    if (ditto_decoder_out_shape(g, &feat->dev, shape) < 0) {
        test_report(c, cname, false, "out_shape failed");
        return;
    }
    TT *ref = tt_new(c, DITTO_F32, 4, shape), *got = tt_new(c, DITTO_F32, 4, shape), *chunked = tt_new(c, DITTO_F32, 4, shape);
    TapStore t0 = { c, 0, { { 0 } }, { 0 }, { 0 } }, t1 = { c, 0, { { 0 } }, { 0 }, { 0 } };
    DittoTap tap0 = { tap_store, &t0 }, tap1 = { tap_store, &t1 };
    ditto_decoder_set_layout(g, ref_layout);
    ditto_decoder_set_merge(g, ref_merge);
    int rc0 = ditto_decoder_forward(g, ws, &feat->dev, &ref->dev, &tap0);
    ditto_decoder_set_layout(g, got_layout);
    ditto_decoder_set_merge(g, got_merge);
    int rc1 = ditto_decoder_forward(g, ws, &feat->dev, &got->dev, &tap1);
    ditto_decoder_set_up_budget(g, 1);
    int rc2 = ditto_decoder_forward(g, ws, &feat->dev, &chunked->dev, NULL);
    ditto_decoder_set_up_budget(g, 0);
    ditto_decoder_set_layout(g, -1);
    ditto_decoder_set_merge(g, -1);
    if (count && rc0 >= 0 && rc1 >= 0 && tt_to_host(ref) >= 0 && tt_to_host(got) >= 0) {
        char label[96];
        double max_d = 0;
        const size_t n = (size_t)ditto_tensor_numel(&ref->host), diff = item_diff(tt_f32(ref), 0, tt_f32(got), n, &max_d);
        snprintf(label, sizeof label, "%s.bits", cname);
        test_report(c, label, true, "%zu of %zu values of img differ from the reference forward (max |diff| %.3g)", diff, n, max_d);
    }
    report_layouts(c, cname, "img", "up_chunks_of_1", exact, rc0, rc1, rc2, ref, got, chunked, &t0, &t1);
}

/* Forward feat through g in NCHW and NHWC layouts (with taps), and NHWC with up chunks of one item: the same values (merge off: the layouts alone). */
static void layout_compare(TestCtx *c, DittoArena *ws, DittoDecoder *g, TT *feat, const char *cname)
{
    decoder_runs(c, ws, g, feat, cname, 0, 0, 1, 0, true, false);
}

/*
 * The channels-last forward with the SPADEs' mlp_shared merged (forced, any
 * backend) against it unmerged, with taps, and merged in up chunks of one
 * item: the same values within float32 rounding (one wide convolution may
 * sum in another order than several narrow ones; how many values differ at
 * all is reported), chunked the same bits as unchunked. A SPADE reading
 * another's channels, or a parity misplaced, is far outside.
 */
static void merge_compare(TestCtx *c, DittoArena *ws, DittoDecoder *g, TT *feat, const char *cname)
{
    decoder_runs(c, ws, g, feat, cname, 1, 0, 1, 2, false, true);
}

/* The small synthetic decoder (channels multiples of 8) on a non-square input of 3 items. */
static void test_decoder_layout(TestCtx *c, DittoArena *ws)
{
    const char *cname = "decoder_layout_synthetic";
    if (!test_selected(c, cname) && !test_selected(c, "decoder_merge_synthetic"))
        return;
    DittoCatalog *cat = NULL;
    DittoDecoder *g = NULL;
    int rc = ditto_synthetic_catalog_size(&cat, DITTO_NET_DECODER, DITTO_SYNTH_SMALL, 5, &c->be->log);
    if (rc == 0)
        rc = ditto_decoder_load(&g, c->be, cat);
    ditto_catalog_close(&cat);
    if (rc < 0) {
        test_report(c, cname, false, "cannot load the small synthetic decoder: rc %d", rc);
        return;
    }
    TT *feat = tt_new(c, DITTO_F32, 4, (int64_t[]){ 3, 64, 6, 5 });
    tt_fill_normal(feat, 0, 1);
    tt_to_dev(feat);
    if (test_selected(c, cname))
        layout_compare(c, ws, g, feat, cname);
    if (test_selected(c, "decoder_merge_synthetic"))
        merge_compare(c, ws, g, feat, "decoder_merge_synthetic");
    tt_free(feat);
    ditto_decoder_free(&g);
}

/*
 * The warp network with its hourglass channels-last (NDHWC) and NCDHW, with
 * taps: the same values (bit for bit on the CPU when exact); channels-last
 * in chunks of one item and deep groups of two: the same bits as unchunked.
 */
static void warp_layout_compare(TestCtx *c, DittoArena *ws, DittoWarp *w, TT *f_s, TT *kp_s, TT *kp_d, const char *cname, bool exact)
{
    int64_t shape[4];
    if (ditto_warp_out_shape(w, &f_s->dev, shape) < 0) {
        test_report(c, cname, false, "out_shape failed");
        return;
    }
    TT *ref = tt_new(c, DITTO_F32, 4, shape), *got = tt_new(c, DITTO_F32, 4, shape), *chunked = tt_new(c, DITTO_F32, 4, shape);
    TapStore t0 = { c, 0, { { 0 } }, { 0 }, { 0 } }, t1 = { c, 0, { { 0 } }, { 0 }, { 0 } };
    DittoTap tap0 = { tap_store, &t0 }, tap1 = { tap_store, &t1 };
    ditto_warp_set_layout(w, 0);
    int rc0 = ditto_warp_forward(w, ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &ref->dev, &tap0);
    ditto_warp_set_layout(w, 1);
    int rc1 = ditto_warp_forward(w, ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &got->dev, &tap1);
    ditto_warp_set_budget(w, 1);
    ditto_warp_set_group(w, 2);
    int rc2 = ditto_warp_forward(w, ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &chunked->dev, NULL);
    ditto_warp_set_group(w, 0);
    ditto_warp_set_budget(w, 0);
    ditto_warp_set_layout(w, -1);
    report_layouts(c, cname, "out", "chunks_of_1_groups_of_2", exact, rc0, rc1, rc2, ref, got, chunked, &t0, &t1);
}

/* Random inputs of the small synthetic warp, n items at 16 x 8 x 8, on the device: f_s (n,8,16,8,8), kp_s and kp_d (n,21,3). */
static void small_warp_inputs(TestCtx *c, int64_t n, TT **f_s, TT **kp_s, TT **kp_d)
{
    *f_s = tt_new(c, DITTO_F32, 5, (int64_t[]){ n, 8, 16, 8, 8 });
    *kp_s = tt_new(c, DITTO_F32, 3, (int64_t[]){ n, 21, 3 });
    *kp_d = tt_new(c, DITTO_F32, 3, (int64_t[]){ n, 21, 3 });
    tt_fill_normal(*f_s, 0, 1);
    tt_fill_uniform(*kp_s, -0.8f, 0.8f);
    tt_fill_uniform(*kp_d, -0.8f, 0.8f);
    tt_to_dev(*f_s);
    tt_to_dev(*kp_s);
    tt_to_dev(*kp_d);
}

/*
 * The small synthetic warp (hourglass input 66 channels, output 74) on 3
 * items at 16 x 8 x 8: as loaded (its weights are too narrow to be stored
 * channels-last, so nothing is padded), and with the odd channel counts
 * padded as on CUDA f16 (66 -> 72, 74 -> 80; forced, any backend): the
 * padded channels-last forward against the unpadded NCDHW one, to float32
 * rounding (the padded convolutions sum longer rows). Padded, the mask and
 * occlusion heads read the channels-last output as it is (the occlusion as
 * a kernel over the whole depth), as on CUDA f16.
 */
static void test_warp_layout(TestCtx *c, DittoArena *ws)
{
    TT *f_s, *kp_s, *kp_d;
    small_warp_inputs(c, 3, &f_s, &kp_s, &kp_d);
    for (int pad = 0; pad < 2; pad++) {
        const char *cname = pad ? "warp_layout_synthetic_padded" : "warp_layout_synthetic";
        if (!test_selected(c, cname))
            continue;
        DittoCatalog *cat = NULL;
        DittoWarp *w = NULL;
        int rc = ditto_synthetic_catalog_size(&cat, DITTO_NET_WARP, DITTO_SYNTH_SMALL, 7, &c->be->log);
        ditto_warp_force_channel_pad(pad ? 1 : -1);
        if (rc == 0)
            rc = ditto_warp_load(&w, c->be, cat);
        ditto_warp_force_channel_pad(-1);
        ditto_catalog_close(&cat);
        if (rc < 0) {
            test_report(c, cname, false, "cannot load the small synthetic warp network: rc %d", rc);
            continue;
        }
        char label[96];
        snprintf(label, sizeof label, "%s.padded", cname);
        test_report(c, label, ditto_warp_channels_padded(w) == (pad == 1), "hourglass channels padded: %s",
                    ditto_warp_channels_padded(w) ? "yes" : "no");
        warp_layout_compare(c, ws, w, f_s, kp_s, kp_d, cname, !pad);
        ditto_warp_free(&w);
    }
    tt_free(f_s);
    tt_free(kp_s);
    tt_free(kp_d);
}

/*
 * The hourglass's up blocks as sub-pixel convolutions (ditto_warp_force_phase
 * 0: every block, 2: all but the two deepest) against the plain nearest x2
 * and 3x3x3 convolution (99), in both layouts: the same function, within
 * float32 rounding (the sub-pixel weights sum taps in double, then round
 * once).
 */
static void test_warp_phase(TestCtx *c, DittoArena *ws)
{
    const char *cname = "warp_phase_synthetic";
    if (!test_selected(c, cname))
        return;
    TT *f_s, *kp_s, *kp_d;
    small_warp_inputs(c, 2, &f_s, &kp_s, &kp_d);
    DittoWarp *w[3] = { NULL, NULL, NULL };
    int rc = 0;
    for (int mode = 0; mode < 3 && rc == 0; mode++) {
        DittoCatalog *cat = NULL;
        rc = ditto_synthetic_catalog_size(&cat, DITTO_NET_WARP, DITTO_SYNTH_SMALL, 7, &c->be->log);
        ditto_warp_force_phase(mode == 0 ? 99 : mode == 1 ? 0 : 2);
        if (rc == 0)
            rc = ditto_warp_load(&w[mode], c->be, cat);
        ditto_warp_force_phase(-1);
        ditto_catalog_close(&cat);
    }
    int64_t shape[4];
    if (rc < 0 || ditto_warp_out_shape(w[0], &f_s->dev, shape) < 0) {
        test_report(c, cname, false, "cannot load the small synthetic warp network: rc %d", rc);
    } else {
        for (int nhwc = 0; nhwc < 2; nhwc++) {
            TT *out[3];
            int rcs[3];
            for (int mode = 0; mode < 3; mode++) {
                out[mode] = tt_new(c, DITTO_F32, 4, shape);
                ditto_warp_set_layout(w[mode], nhwc);
                rcs[mode] = ditto_warp_forward(w[mode], ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &out[mode]->dev, NULL);
                ditto_warp_set_layout(w[mode], -1);
                tt_to_host(out[mode]);
            }
            for (int mode = 1; mode < 3; mode++) {
                char label[96];
                snprintf(label, sizeof label, "%s.%s.%s", cname, nhwc ? "ndhwc" : "ncdhw", mode == 1 ? "all" : "all_but_2");
                if (rcs[0] < 0 || rcs[mode] < 0)
                    test_report(c, label, false, "forward rc: plain %d, sub-pixel %d", rcs[0], rcs[mode]);
                else
                    same_values(c, label, tt_f32(out[mode]), tt_f32(out[0]), (size_t)ditto_tensor_numel(&out[0]->host), false);
            }
            for (int mode = 0; mode < 3; mode++)
                tt_free(out[mode]);
        }
    }
    for (int mode = 0; mode < 3; mode++)
        ditto_warp_free(&w[mode]);
    tt_free(f_s);
    tt_free(kp_s);
    tt_free(kp_d);
}

/* ---- synthetic catalogs (in memory, random values): strict-load checks and the full-size run ---- */

typedef struct SynKey {
    char name[112];
    DittoDType dtype;
    int ndim;
    int64_t shape[DITTO_MAX_DIMS];
} SynKey;

typedef struct SynList {
    SynKey *k;
    int n, cap;
} SynList;

static void syn_add(SynList *l, DittoDType dt, int ndim, const int64_t *shape, const char *fmt, ...) DITTO_PRINTF(5, 6);
static void syn_add(SynList *l, DittoDType dt, int ndim, const int64_t *shape, const char *fmt, ...)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 128;
        l->k = realloc(l->k, (size_t)l->cap * sizeof *l->k);
        if (!l->k)
            abort();
    }
    SynKey *k = &l->k[l->n++];
    memset(k, 0, sizeof *k);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->name, sizeof k->name, fmt, ap);
    va_end(ap);
    k->dtype = dt;
    k->ndim = ndim;
    if (ndim > 0)
        memcpy(k->shape, shape, (size_t)ndim * sizeof *shape);
}

#define SYN(l, key, ...) syn_add(l, DITTO_F32, DITTO_SHAPE(__VA_ARGS__), "%s", key)

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static int64_t syn_numel(const SynKey *k)
{
    int64_t n = 1;
    for (int i = 0; i < k->ndim; i++)
        n *= k->shape[i];
    return n;
}

/*
 * Catalog over one host blob with the fixture generator's value recipe:
 * weights N(0, 1/fan_in), biases 0.1 N, norm weights 1 + 0.2 N, running_mean
 * 0.1 N, running_var U(0.5, 1.5); spectral-norm u = W v / |W v| (sigma > 0).
 */
static DittoCatalog *syn_catalog(TestCtx *c, const SynList *l, const char *name, void **blob_out)
{
    uint64_t total = 0;
    for (int i = 0; i < l->n; i++)
        total += (uint64_t)syn_numel(&l->k[i]) * ditto_dtype_size(l->k[i].dtype);
    char *blob = calloc(1, total ? total : 1);
    if (!blob)
        return NULL;
    DittoMap map = { (const uint8_t *)blob, total };
    DittoCatalog *cat = NULL;
    if (ditto_catalog_create(&cat, name, &map, false, &c->be->log) < 0) {
        free(blob);
        return NULL;
    }
    uint64_t off = 0;
    for (int i = 0; i < l->n; i++) {
        const SynKey *k = &l->k[i];
        DittoCatalogEntry e;
        memset(&e, 0, sizeof e);
        e.name = (char *)k->name;
        e.dtype = k->dtype;
        e.ndim = k->ndim;
        memcpy(e.shape, k->shape, sizeof e.shape);
        DittoTensor t = ditto_tensor(NULL, k->dtype, k->ndim, k->shape);
        memcpy(e.stride, t.stride, sizeof e.stride);
        e.offset = off;
        e.span = (uint64_t)syn_numel(k) * ditto_dtype_size(k->dtype);
        e.data = blob + off;
        size_t n = (size_t)syn_numel(k);
        if (k->dtype == DITTO_F32) {
            float *p = (float *)(blob + off);
            ditto_rng_fill_normal(c->seed, (uint64_t)i, 0, p, n);
            double fan_in = k->ndim >= 2 ? (double)(syn_numel(k) / k->shape[0]) : 1.0;
            bool norm = strstr(k->name, "norm.") != NULL;
            for (size_t j = 0; j < n; j++) {
                if (k->ndim >= 2)
                    p[j] = (float)(p[j] / sqrt(fan_in));
                else if (norm && ends_with(k->name, ".weight"))
                    p[j] = 1.0f + 0.2f * p[j];
                else if (ends_with(k->name, ".running_var"))
                    p[j] = 0.5f + ditto_rng_uniform(c->seed, (uint64_t)i, j);
                else
                    p[j] = 0.1f * p[j];
            }
        }
        if (ditto_catalog_add(cat, &e) < 0)
            goto fail;
        off += e.span;
    }
    /* spectral norm: v random unit, u = W v / |W v| */
    for (size_t i = 0; i < cat->n; i++) {
        DittoCatalogEntry *eu = &cat->entries[i];
        if (!ends_with(eu->name, ".weight_u"))
            continue;
        char base[112];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(eu->name) - 9), eu->name);
        char kw[128], kv[128];
        snprintf(kw, sizeof kw, "%s.weight_orig", base);
        snprintf(kv, sizeof kv, "%s.weight_v", base);
        const DittoCatalogEntry *ew = NULL, *ev = NULL;
        for (size_t j = 0; j < cat->n; j++) {
            if (!strcmp(cat->entries[j].name, kw))
                ew = &cat->entries[j];
            if (!strcmp(cat->entries[j].name, kv))
                ev = &cat->entries[j];
        }
        if (!ew || !ev)
            continue;
        int64_t rows = ew->shape[0], cols = ditto_catalog_entry_numel(ew) / rows;
        if (eu->shape[0] != rows || ditto_catalog_entry_numel(ev) != cols)
            continue;
        const float *w = ew->data;
        float *u = (float *)eu->data, *v = (float *)ev->data;
        double nv = 0, nu = 0;
        for (int64_t j = 0; j < cols; j++)
            nv += (double)v[j] * v[j];
        for (int64_t j = 0; j < cols; j++)
            v[j] = (float)(v[j] / sqrt(nv));
        for (int64_t r = 0; r < rows; r++) {
            double s = 0;
            for (int64_t j = 0; j < cols; j++)
                s += (double)w[r * cols + j] * v[j];
            u[r] = (float)s;
            nu += s * s;
        }
        for (int64_t r = 0; r < rows; r++)
            u[r] = (float)(u[r] / sqrt(nu));
    }
    if (ditto_catalog_finish(cat) < 0)
        goto fail;
    *blob_out = blob;
    return cat;
fail:
    ditto_catalog_close(&cat);
    free(blob);
    return NULL;
}

/* Key list of an existing catalog (names, dtypes, shapes). */
static void syn_from_catalog(SynList *l, const DittoCatalog *cat)
{
    for (size_t i = 0; i < cat->n; i++)
        syn_add(l, cat->entries[i].dtype, cat->entries[i].ndim, cat->entries[i].shape, "%s", cat->entries[i].name);
}

typedef int (*LoadFn)(TestCtx *c, DittoCatalog *cat);

static int load_warp(TestCtx *c, DittoCatalog *cat)
{
    DittoWarp *w = NULL;
    int rc = ditto_warp_load(&w, c->be, cat);
    if ((rc < 0) != (w == NULL))
        rc = -9999;
    ditto_warp_free(&w);
    return rc;
}

static int load_decoder(TestCtx *c, DittoCatalog *cat)
{
    DittoDecoder *g = NULL;
    int rc = ditto_decoder_load(&g, c->be, cat);
    if ((rc < 0) != (g == NULL))
        rc = -9999;
    ditto_decoder_free(&g);
    return rc;
}

/* Load variants of a real checkpoint's key list: as is, one key missing, one extra, one mis-shaped. */
static void test_strict(TestCtx *c, const char *label, const char *file, LoadFn load)
{
    if (!test_selected(c, label))
        return;
    DittoCatalog *real = fixture_try_open(&g_fx, file);
    if (!real) {
        test_report(c, label, false, "cannot open %s", file);
        return;
    }
    SynList base = { 0 };
    syn_from_catalog(&base, real);
    ditto_catalog_close(&real);
    /* a weight about half-way to drop, a bias about a third of the way to mis-shape */
    int drop = base.n / 2, bend = base.n / 3;
    while (drop < base.n - 1 && !ends_with(base.k[drop].name, ".weight") && !ends_with(base.k[drop].name, ".weight_orig"))
        drop++;
    while (bend < base.n - 1 && !ends_with(base.k[bend].name, ".bias"))
        bend++;
    int rc[4] = { 0 };
    for (int v = 0; v < 4; v++) {
        SynList l = { 0 };
        for (int i = 0; i < base.n; i++) {
            if (v == 1 && i == drop)
                continue;                                   /* missing key */
            syn_add(&l, base.k[i].dtype, base.k[i].ndim, base.k[i].shape, "%s", base.k[i].name);
            if (v == 3 && i == bend)
                l.k[l.n - 1].shape[0] += 1;                 /* mis-shaped key */
        }
        if (v == 2)
            syn_add(&l, DITTO_F32, DITTO_SHAPE(4), "%s", "extra.weight");   /* unknown key */
        void *blob = NULL;
        DittoCatalog *cat = syn_catalog(c, &l, file, &blob);
        rc[v] = cat ? load(c, cat) : -9998;
        ditto_catalog_close(&cat);
        free(blob);
        free(l.k);
    }
    test_report(c, label, rc[0] == 0 && rc[1] == DITTO_ERR_KEY && rc[2] == DITTO_ERR_KEY && rc[3] == DITTO_ERR_KEY,
                "rc as is %d, missing '%s' %d, unknown key %d, wrong shape of '%s' %d", rc[0], base.k[drop].name, rc[1], rc[2],
                base.k[bend].name, rc[3]);
    free(base.k);
}

static void test_wrong_checkpoint(TestCtx *c)
{
    if (!test_selected(c, "strict.wrong_checkpoint"))
        return;
    DittoCatalog *wcat = fixture_try_open(&g_fx, "warp.pth"), *dcat = fixture_try_open(&g_fx, "decoder.pth");
    int rw = dcat ? load_warp(c, dcat) : -9998;       /* decoder.pth as the warp network */
    int rd = wcat ? load_decoder(c, wcat) : -9998;    /* warp.pth as the decoder */
    test_report(c, "strict.wrong_checkpoint", rw == DITTO_ERR_KEY && rd == DITTO_ERR_KEY, "warp(decoder.pth) %d, decoder(warp.pth) %d", rw, rd);
    ditto_catalog_close(&wcat);
    ditto_catalog_close(&dcat);
}

/* ---- full size (random weights, official shapes of 5.4 / 5.5, from src/weights/synthetic) ---- */

/* Finite, and inside [lo, hi]. */
static bool all_in(TT *t, float lo, float hi, double *mean)
{
    tt_to_host(t);
    size_t n = (size_t)ditto_tensor_numel(&t->host);
    const float *p = tt_f32(t);
    double s = 0;
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        ok &= isfinite(p[i]) && p[i] >= lo && p[i] <= hi;
        s += p[i];
    }
    *mean = s / (double)n;
    return ok;
}

static void test_full_size(TestCtx *c)
{
    if (!test_selected(c, "full_size"))
        return;
    const char *env = getenv("DITTO_TEST_FULLSIZE");
    if (!env || !*env || !strcmp(env, "0")) {
        printf("SKIP full_size.* (set DITTO_TEST_FULLSIZE=1: official shapes, random weights, smaller spatial size)\n");
        c->skipped++;
        return;
    }
    const bool official = !strcmp(env, "official");
    DittoCatalog *cw = NULL, *cg = NULL;
    int rw = ditto_synthetic_catalog(&cw, DITTO_NET_WARP, true, 1, &c->be->log);
    int rg = ditto_synthetic_catalog(&cg, DITTO_NET_DECODER, true, 2, &c->be->log);
    DittoWarp *w = NULL;
    DittoDecoder *g = NULL;
    if (rw == 0)
        rw = ditto_warp_load(&w, c->be, cw);
    if (rg == 0)
        rg = ditto_decoder_load(&g, c->be, cg);
    test_report(c, "full_size.load", rw == 0 && rg == 0, "warp rc %d, decoder rc %d", rw, rg);
    ditto_catalog_close(&cw);
    ditto_catalog_close(&cg);
    DittoArena arena;   /* fresh, so that its peak is this network's */
    DittoArena *ws = &arena;
    if (w && ditto_arena_init(ws, &c->be->allocator, 0) == 0) {
        /* (1,32,16,32,32): full channels and depth, half the official H, W (all of it with DITTO_TEST_FULLSIZE=official) */
        const int64_t S = official ? 64 : 32;
        TT *f_s = tt_new(c, DITTO_F32, 5, (int64_t[]){ 1, 32, 16, S, S });
        TT *kp_s = tt_new(c, DITTO_F32, 3, (int64_t[]){ 1, 21, 3 }), *kp_d = tt_new(c, DITTO_F32, 3, (int64_t[]){ 1, 21, 3 });
        tt_fill_normal(f_s, 0, 1);
        tt_fill_uniform(kp_s, -0.6f, 0.6f);
        tt_fill_uniform(kp_d, -0.6f, 0.6f);
        tt_to_dev(f_s);
        tt_to_dev(kp_s);
        tt_to_dev(kp_d);
        int64_t shape[4];
        ditto_warp_out_shape(w, &f_s->dev, shape);
        TT *out = tt_new(c, DITTO_F32, 4, shape);
        double t0 = now_s(), mean;
        int rc = ditto_warp_forward(w, ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &out->dev, NULL);
        double t1 = now_s();
        bool ok = rc == 0 && shape[1] == 256 && shape[2] == S && all_in(out, -1e4f, 1e4f, &mean);
        test_report(c, "full_size.warp", ok, "rc %d out (%lld,%lld,%lld,%lld) mean %.4g, %.2f s, arena peak %.1f MiB", rc, (long long)shape[0],
                    (long long)shape[1], (long long)shape[2], (long long)shape[3], mean, t1 - t0, (double)ws->peak / 1048576.0);
        tt_free(out);
        tt_free(f_s);
        tt_free(kp_s);
        tt_free(kp_d);
        ditto_arena_free(ws);
    }
    if (g && ditto_arena_init(ws, &c->be->allocator, 0) == 0) {
        /* (1,256,16,16) -> (1,3,128,128): full channels, a quarter of the official H, W (or all of it) */
        const int64_t S = official ? 64 : 16;
        TT *feat = tt_new(c, DITTO_F32, 4, (int64_t[]){ 1, 256, S, S });
        tt_fill_normal(feat, 0, 1);
        tt_to_dev(feat);
        int64_t shape[4];
        ditto_decoder_out_shape(g, &feat->dev, shape);
        TT *img = tt_new(c, DITTO_F32, 4, shape);
        double t0 = now_s(), mean;
        int rc = ditto_decoder_forward(g, ws, &feat->dev, &img->dev, NULL);
        double t1 = now_s();
        bool ok = rc == 0 && shape[1] == 3 && shape[2] == 8 * S && shape[3] == 8 * S && all_in(img, 0.0f, 1.0f, &mean);
        test_report(c, "full_size.decoder", ok, "rc %d img (%lld,%lld,%lld,%lld) mean %.4g, %.2f s, arena peak %.1f MiB", rc, (long long)shape[0],
                    (long long)shape[1], (long long)shape[2], (long long)shape[3], mean, t1 - t0, (double)ws->peak / 1048576.0);
        tt_free(img);
        tt_free(feat);
        ditto_arena_free(ws);
    }
    ditto_warp_free(&w);
    ditto_decoder_free(&g);
}

/*
 * Channels-last convolution weights (DittoLoader.conv_channels_last, what
 * the CUDA f16 networks load): the loader binds (O, k..., C) data with the
 * strides of that view, leaves weights of at most 16 outputs and other ranks
 * contiguous; a network loaded that way computes the same bits.
 */
static void test_loader_channels_last(TestCtx *c)
{
    const char *cname = "loader_channels_last";
    if (!test_selected(c, cname))
        return;
    SynList l = { 0 };
    SYN(&l, "a.weight", 24, 5, 3, 3);
    SYN(&l, "b.weight", 20, 3, 2, 3, 4);
    SYN(&l, "c.weight", 16, 5, 3, 3);
    SYN(&l, "d.weight", 24, 5);
    void *blob = NULL;
    DittoCatalog *cat = syn_catalog(c, &l, "channels_last.pth", &blob);
    if (!cat) {
        test_report(c, cname, false, "cannot make the catalog");
        free(l.k);
        return;
    }
    for (int i = 0; i < l.n; i++) {
        DittoWeights wa = { 0 }, wb = { 0 };
        DittoLoader la, lb;
        ditto_loader_init(&la, cat, c->be, &wa, "test", "");
        ditto_loader_init(&lb, cat, c->be, &wb, "test", "");
        lb.conv_channels_last = true;
        DittoTensor ta, tb;
        int ra = ditto_loader_get(&la, &ta, l.k[i].ndim, l.k[i].shape, "%s", l.k[i].name);
        int rb = ditto_loader_get(&lb, &tb, l.k[i].ndim, l.k[i].shape, "%s", l.k[i].name);
        char label[96];
        snprintf(label, sizeof label, "%s.%s", cname, l.k[i].name);
        const bool want_cl = (l.k[i].ndim == 4 || l.k[i].ndim == 5) && l.k[i].shape[0] > 16;
        if (ra < 0 || rb < 0) {   /* no ditto_loader_finish: it refuses the keys each loader leaves unread */
            test_report(c, label, false, "load failed: %d %d", ra, rb);
        } else {
            const int64_t n = ditto_tensor_numel(&ta), O = l.k[i].shape[0], C = l.k[i].shape[1], kvol = n / (O * C);
            float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
            c->be->download(c->be, a, ta.data, sizeof(float) * (size_t)n);
            c->be->download(c->be, b, tb.data, sizeof(float) * (size_t)n);
            int64_t bad = 0;
            for (int64_t o = 0; o < O; o++)
                for (int64_t ci = 0; ci < C; ci++)
                    for (int64_t k = 0; k < kvol; k++) {
                        const float want = a[(o * C + ci) * kvol + k];
                        bad += want != b[want_cl ? (o * kvol + k) * C + ci : (o * C + ci) * kvol + k];
                    }
            const bool layout = want_cl ? ditto_tensor_is_channels_last(&tb) && !ditto_tensor_is_contiguous(&tb)
                                        : ditto_tensor_is_contiguous(&tb);
            test_report(c, label, layout && bad == 0 && ditto_tensor_same_shape(&ta, &tb), "%s strides, %lld values out of place",
                        want_cl ? "channels-last" : "contiguous", (long long)bad);
            free(a);
            free(b);
        }
        ditto_weights_free(&wa);
        ditto_weights_free(&wb);
    }
    ditto_catalog_close(&cat);
    free(blob);
    free(l.k);
}

/*
 * ditto_loader_get_sn_product: a spectral-norm 1x1 convolution (o, m) folded
 * into the convolution before it (m, k, 3, 3) and its bias (m), against the
 * product in double of what ditto_loader_get_sn and ditto_loader_get bind for
 * the same keys (the same sums: equal floats); a bias of the wrong size is
 * refused with the key named.
 */
static void test_loader_sn_product(TestCtx *c)
{
    const char *cname = "loader_sn_product";
    if (!test_selected(c, cname))
        return;
    const int64_t o = 5, m = 7, k = 3, rest = k * 9;
    SynList l = { 0 };
    SYN(&l, "s.weight_orig", o, m, 1, 1);
    SYN(&l, "s.weight_u", o);
    SYN(&l, "s.weight_v", m);
    SYN(&l, "b.weight", m, k, 3, 3);
    SYN(&l, "b.bias", m);
    SYN(&l, "bad.bias", m + 1);
    void *blob = NULL;
    DittoCatalog *cat = syn_catalog(c, &l, "sn_product.pth", &blob);
    if (!cat) {
        test_report(c, cname, false, "cannot make the catalog");
        free(l.k);
        return;
    }
    DittoWeights wt = { 0 }, wbad = { 0 };
    DittoLoader ld, lbad;
    ditto_loader_init(&ld, cat, c->be, &wt, "test", "");
    DittoTensor ws, w2, b2, pw, pb, qw, qb;
    ditto_loader_get_sn(&ld, &ws, DITTO_SHAPE(o, m, 1, 1), "s");
    ditto_loader_get(&ld, &w2, DITTO_SHAPE(m, k, 3, 3), "b.weight");
    ditto_loader_get(&ld, &b2, DITTO_SHAPE(m), "b.bias");
    int rc = ditto_loader_get_sn_product(&ld, &pw, &pb, o, "s", DITTO_SHAPE(m, k, 3, 3), "b.weight", "b.bias");
    if (rc < 0) {
        test_report(c, cname, false, "load failed: %d", rc);
    } else {
        float hs[5 * 7], h2[7 * 27], hb2[7], hp[5 * 27], hpb[5];
        c->be->download(c->be, hs, ws.data, sizeof hs);
        c->be->download(c->be, h2, w2.data, sizeof h2);
        c->be->download(c->be, hb2, b2.data, sizeof hb2);
        c->be->download(c->be, hp, pw.data, sizeof hp);
        c->be->download(c->be, hpb, pb.data, sizeof hpb);
        int64_t bad = 0;
        for (int64_t r = 0; r < o; r++) {
            for (int64_t j = 0; j < rest; j++) {
                double v = 0;
                for (int64_t q = 0; q < m; q++)
                    v += (double)hs[r * m + q] * h2[q * rest + j];
                bad += (float)v != hp[r * rest + j];
            }
            double v = 0;
            for (int64_t q = 0; q < m; q++)
                v += (double)hs[r * m + q] * hb2[q];
            bad += (float)v != hpb[r];
        }
        const bool shapes = pw.ndim == 4 && pw.shape[0] == o && pw.shape[1] == k && pb.ndim == 1 && pb.shape[0] == o;
        test_report(c, cname, shapes && bad == 0, "%lld of %lld values differ", (long long)bad, (long long)(o * rest + o));
    }
    ditto_loader_init(&lbad, cat, c->be, &wbad, "test", "");
    rc = ditto_loader_get_sn_product(&lbad, &qw, &qb, o, "s", DITTO_SHAPE(m, k, 3, 3), "b.weight", "bad.bias");
    test_report(c, "loader_sn_product.bad_bias", rc == DITTO_ERR_KEY && !qw.data && !qb.data, "rc %d", rc);
    ditto_weights_free(&wt);
    ditto_weights_free(&wbad);
    ditto_catalog_close(&cat);
    free(blob);
    free(l.k);
}

/* The warp and the decoder of the fixtures loaded with channels-last weights: the same outputs, bit for bit. */
static void test_networks_channels_last(TestCtx *c, DittoArena *ws)
{
    const char *cname = "networks_channels_last";
    if (!test_selected(c, cname))
        return;
    DittoCatalog *wcat = fixture_try_open(&g_fx, "warp.pth"), *gcat = fixture_try_open(&g_fx, "decoder.pth");
    DittoCatalog *wio = fixture_try_open(&g_fx, "warp_b3.io.pth"), *gio = fixture_try_open(&g_fx, "decoder_b3.io.pth");
    DittoWarp *w[2] = { NULL, NULL };
    DittoDecoder *g[2] = { NULL, NULL };
    int rc = wcat && gcat && wio && gio ? 0 : -1;
    for (int k = 0; k < 2 && rc == 0; k++) {
        ditto_nn_force_conv_channels_last(k);
        rc = ditto_warp_load(&w[k], c->be, wcat);
        if (rc == 0)
            rc = ditto_decoder_load(&g[k], c->be, gcat);
    }
    ditto_nn_force_conv_channels_last(-1);
    TT *f_s = rc == 0 ? io_input(c, wio, "feature_3d") : NULL;
    TT *kp_s = rc == 0 ? io_input(c, wio, "kp_source") : NULL, *kp_d = rc == 0 ? io_input(c, wio, "kp_driving") : NULL;
    TT *feat = rc == 0 ? io_input(c, gio, "feature") : NULL;
    if (rc < 0 || !f_s || !kp_s || !kp_d || !feat) {
        test_report(c, cname, false, "cannot load the fixture networks or inputs");
    } else {
        int64_t ws_shape[4], gs_shape[4];
        TT *wo[2] = { NULL, NULL }, *go[2] = { NULL, NULL };
        int frc = ditto_warp_out_shape(w[0], &f_s->dev, ws_shape) | ditto_decoder_out_shape(g[0], &feat->dev, gs_shape);
        for (int k = 0; k < 2 && frc == 0; k++) {
            wo[k] = tt_new(c, DITTO_F32, 4, ws_shape);
            go[k] = tt_new(c, DITTO_F32, 4, gs_shape);
            frc |= ditto_warp_forward(w[k], ws, &f_s->dev, &kp_s->dev, &kp_d->dev, &wo[k]->dev, NULL);
            frc |= ditto_decoder_forward(g[k], ws, &feat->dev, &go[k]->dev, NULL);
        }
        if (frc < 0) {
            test_report(c, cname, false, "forward failed");
        } else {
            TT *pairs[2][2] = { { wo[0], wo[1] }, { go[0], go[1] } };
            for (int k = 0; k < 2; k++) {
                char label[96];
                snprintf(label, sizeof label, "%s.%s", cname, k ? "decoder" : "warp");
                tt_to_host(pairs[k][0]);
                tt_to_host(pairs[k][1]);
                double max_d = 0;
                size_t diff = item_diff(tt_f32(pairs[k][0]), 0, tt_f32(pairs[k][1]), (size_t)ditto_tensor_numel(&pairs[k][0]->host), &max_d);
                test_report(c, label, diff == 0, "%zu values differ from the network with contiguous weights (max |diff| %.3g)", diff, max_d);
            }
        }
        for (int k = 0; k < 2; k++) {
            tt_free(wo[k]);
            tt_free(go[k]);
        }
    }
    tt_free(f_s);
    tt_free(kp_s);
    tt_free(kp_d);
    tt_free(feat);
    for (int k = 0; k < 2; k++) {
        ditto_warp_free(&w[k]);
        ditto_decoder_free(&g[k]);
    }
    ditto_catalog_close(&wcat);
    ditto_catalog_close(&gcat);
    ditto_catalog_close(&wio);
    ditto_catalog_close(&gio);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    DittoArena ws;
    if (ditto_arena_init(&ws, &c.be->allocator, 0) < 0)
        return 1;
    fixtures_load(&g_fx, c.be->log);
    if (!g_fx.dir[0]) {
        printf("SKIP fixture cases (no shared/fixtures/ditto)\n");
        c.skipped++;
    } else {
        test_fn_grid(&c);
        test_fn_kp2gaussian(&c, &ws);
        test_fn_grid_sample(&c);

        DittoCatalog *cat = fixture_try_open(&g_fx, "warp.pth");
        DittoWarp *w = NULL;
        if (!cat || ditto_warp_load(&w, c.be, cat) < 0) {
            test_report(&c, "warp.load", false, "cannot load warp.pth");
        } else {
            test_warp_case(&c, &ws, w, "warp_b1");
            test_warp_case(&c, &ws, w, "warp_b3");
            test_warp_folding(&c, &ws, w, cat);
            /* the fixture network's channel counts: the channels-last ops on their general paths */
            DittoCatalog *io = test_selected(&c, "warp_layout_fixture") ? fixture_try_open(&g_fx, "warp_b3.io.pth") : NULL;
            TT *f_s = io ? io_input(&c, io, "feature_3d") : NULL;
            TT *kp_s = io ? io_input(&c, io, "kp_source") : NULL, *kp_d = io ? io_input(&c, io, "kp_driving") : NULL;
            if (f_s && kp_s && kp_d)
                warp_layout_compare(&c, &ws, w, f_s, kp_s, kp_d, "warp_layout_fixture", true);
            else if (test_selected(&c, "warp_layout_fixture"))
                test_report(&c, "warp_layout_fixture", false, "cannot read warp_b3.io.pth");
            tt_free(f_s);
            tt_free(kp_s);
            tt_free(kp_d);
            ditto_catalog_close(&io);
        }
        ditto_warp_free(&w);
        ditto_catalog_close(&cat);

        cat = fixture_try_open(&g_fx, "decoder.pth");
        DittoDecoder *g = NULL;
        if (!cat || ditto_decoder_load(&g, c.be, cat) < 0) {
            test_report(&c, "decoder.load", false, "cannot load decoder.pth");
        } else {
            test_decoder_case(&c, &ws, g, "decoder_b1");
            test_decoder_case(&c, &ws, g, "decoder_b3");
            /* the fixture decoder's odd channel counts: every channels-last op on its general path */
            const bool want = test_selected(&c, "decoder_layout_fixture") || test_selected(&c, "decoder_merge_fixture");
            DittoCatalog *io = want ? fixture_try_open(&g_fx, "decoder_b3.io.pth") : NULL;
            TT *feat = io ? io_input(&c, io, "feature") : NULL;
            if (feat && test_selected(&c, "decoder_layout_fixture"))
                layout_compare(&c, &ws, g, feat, "decoder_layout_fixture");
            else if (test_selected(&c, "decoder_layout_fixture"))
                test_report(&c, "decoder_layout_fixture", false, "cannot read decoder_b3.io.pth");
            if (feat && test_selected(&c, "decoder_merge_fixture"))
                merge_compare(&c, &ws, g, feat, "decoder_merge_fixture");
            tt_free(feat);
            ditto_catalog_close(&io);
        }
        ditto_decoder_free(&g);
        ditto_catalog_close(&cat);

        test_networks_channels_last(&c, &ws);
        test_wrong_checkpoint(&c);
        test_strict(&c, "strict.warp", "warp.pth", load_warp);
        test_strict(&c, "strict.decoder", "decoder.pth", load_decoder);
        fixtures_free(&g_fx);
    }
    test_decoder_layout(&c, &ws);
    test_warp_layout(&c, &ws);
    test_warp_phase(&c, &ws);
    test_loader_channels_last(&c);
    test_loader_sn_product(&c);
    test_full_size(&c);
    ditto_arena_free(&ws);
    test_close(&c);
    return test_summary(&c);
}
