/*
 * Model parity for the appearance extractor (F), the motion extractor (M) and
 * the stitching network (S) against the PyTorch fixtures in
 * shared/fixtures/ditto: outputs and named intermediates against the float64
 * reference at the manifest's fp32 tolerance, B=1 and B=3, B=3 equal to three
 * B=1 runs item by item, and strict loading (another network's checkpoint
 * fails with DITTO_ERR_KEY and a message naming the file and the key).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "core/log.h"
#include "models/models.h"
#include "test_util.h"
#include "weights/catalog.h"

/* fixed values of the fixture README for networks (intermediates carry no tolerance of their own) */
#define NET_TOL_REL_L2 1e-4
#define NET_TOL_MAX 1e-3

typedef struct Fixtures {
    char dir[4096];
    cJSON *manifest;
    DittoLogger log;
} Fixtures;

/* ---- fixture access ---- */

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

static const cJSON *find_case(const Fixtures *fx, const char *name)
{
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(fx->manifest, "cases");
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cases)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cs, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
            return cs;
    }
    return NULL;
}

/* tolerance.<out>.fp32 of a case, or the fixed network values for intermediates */
static void case_tol(const cJSON *cs, const char *out, double *rel, double *mx)
{
    *rel = NET_TOL_REL_L2;
    *mx = NET_TOL_MAX;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cs, "tolerance"), out), "fp32");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(t, "rel_l2");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(t, "max_abs_over_max_ref");
    if (cJSON_IsNumber(r))
        *rel = r->valuedouble;
    if (cJSON_IsNumber(m))
        *mx = m->valuedouble;
}

static DittoCatalog *open_fixture(TestCtx *c, const Fixtures *fx, const char *file)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", fx->dir, file);
    DittoCatalog *cat = NULL;
    int rc = ditto_catalog_open_pth(&cat, path, &fx->log);
    if (rc < 0) {
        test_report(c, file, false, "cannot open %s: %s", path, ditto_strerror(rc));
        return NULL;
    }
    return cat;
}

/* Input tensor `name` of an io file, on the backend. */
static TT *io_input(TestCtx *c, DittoCatalog *io, const char *name)
{
    const DittoCatalogEntry *e = ditto_catalog_find(io, name);
    if (!e)
        return NULL;
    TT *t = tt_new(c, DITTO_F32, e->ndim, e->shape);
    if (ditto_catalog_read_f32(io, e, tt_f32(t)) < 0 || tt_to_dev(t) < 0) {
        tt_free(t);
        return NULL;
    }
    return t;
}

/* Item i of a batched host tensor as a new B=1 tensor on the backend. */
static TT *tt_item(TestCtx *c, TT *src, int64_t i)
{
    int64_t shape[DITTO_MAX_DIMS];
    memcpy(shape, src->host.shape, sizeof shape);
    shape[0] = 1;
    TT *t = tt_new(c, DITTO_F32, src->host.ndim, shape);
    size_t n = (size_t)ditto_tensor_numel(&t->host);
    memcpy(tt_f32(t), tt_f32(src) + (size_t)i * n, n * sizeof(float));
    tt_to_dev(t);
    return t;
}

/* Compare host floats with the io reference `ref_name` (shape must match). */
static bool check_ref(TestCtx *c, const char *label, const float *out, int ndim, const int64_t *shape, DittoCatalog *io, const char *ref_name,
                      double tol, double tol_max)
{
    const DittoCatalogEntry *e = ditto_catalog_find(io, ref_name);
    if (!e)
        return test_report(c, label, false, "reference '%s' missing from the io file", ref_name);
    char have[DITTO_SHAPE_STR_MAX], want[DITTO_SHAPE_STR_MAX];
    if (e->ndim != ndim || memcmp(e->shape, shape, (size_t)ndim * sizeof(int64_t)))
        return test_report(c, label, false, "shape %s, reference %s", ditto_shape_str(shape, ndim, have, sizeof have),
                           ditto_shape_str(e->shape, e->ndim, want, sizeof want));
    size_t n = (size_t)ditto_catalog_entry_numel(e);
    float *rf = malloc(n * sizeof *rf);
    double *rd = malloc(n * sizeof *rd);
    bool ok = rf && rd && ditto_catalog_read_f32(io, e, rf) == 0;
    if (ok) {
        for (size_t i = 0; i < n; i++)
            rd[i] = rf[i];
        TestErr err = test_compare(out, rd, n);
        double rmax = err.max_ref > 0 ? err.max_abs / err.max_ref : err.max_abs;
        ok = err.nonfinite == 0 && err.rel_l2 <= tol && rmax <= tol_max;
        test_report(c, label, ok, "rel_l2 %.3g (tol %.1g) max_abs/max_ref %.3g (tol %.1g)%s", err.rel_l2, tol, rmax, tol_max,
                    err.nonfinite ? " NON-FINITE" : "");
    } else {
        test_report(c, label, false, "cannot read reference '%s'", ref_name);
    }
    free(rf);
    free(rd);
    return ok;
}

static bool check_out(TestCtx *c, const cJSON *cs, const char *case_name, const char *out_name, TT *t, DittoCatalog *io)
{
    char label[128];
    snprintf(label, sizeof label, "%s.%s", case_name, out_name);
    double tol, tol_max;
    case_tol(cs, out_name, &tol, &tol_max);
    if (tt_to_host(t) < 0)
        return test_report(c, label, false, "download failed");
    if (!tt_guards_ok(t))
        return test_report(c, label, false, "guard bytes overwritten");
    return check_ref(c, label, tt_f32(t), t->host.ndim, t->host.shape, io, out_name, tol, tol_max);
}

/* ---- tap: host copies of the intermediates ---- */

#define CAP_MAX 8

typedef struct Captured {
    char name[48];
    int ndim;
    int64_t shape[DITTO_MAX_DIMS];
    float *data;
} Captured;

typedef struct Capture {
    DittoBackend *be;
    int n;
    int errors;
    Captured items[CAP_MAX];
} Capture;

static void capture_fn(void *ctx, const char *name, const DittoTensor *t)
{
    Capture *cap = ctx;
    if (cap->n == CAP_MAX || t->dtype != DITTO_F32 || !ditto_tensor_is_contiguous(t)) {
        cap->errors++;
        return;
    }
    Captured *it = &cap->items[cap->n];
    snprintf(it->name, sizeof it->name, "%s", name);
    it->ndim = t->ndim;
    memcpy(it->shape, t->shape, sizeof it->shape);
    size_t bytes = ditto_tensor_nbytes(t);
    it->data = malloc(bytes ? bytes : 1);
    if (!it->data || cap->be->sync(cap->be) < 0 || cap->be->download(cap->be, it->data, t->data, bytes) < 0) {
        free(it->data);
        cap->errors++;
        return;
    }
    cap->n++;
}

static void capture_free(Capture *cap)
{
    for (int i = 0; i < cap->n; i++)
        free(cap->items[i].data);
    cap->n = 0;
}

static void check_intermediates(TestCtx *c, const cJSON *cs, const char *case_name, const Capture *cap, DittoCatalog *io)
{
    const cJSON *inter = cJSON_GetObjectItemCaseSensitive(cs, "intermediates");
    const cJSON *it;
    char label[128];
    if (cap->errors) {
        snprintf(label, sizeof label, "%s.tap", case_name);
        test_report(c, label, false, "%d tapped tensors could not be captured", cap->errors);
    }
    cJSON_ArrayForEach(it, inter)
    {
        snprintf(label, sizeof label, "%s.%s", case_name, it->string);
        const Captured *got = NULL;
        for (int i = 0; i < cap->n; i++)
            if (!strcmp(cap->items[i].name, it->string))
                got = &cap->items[i];
        if (!got) {
            test_report(c, label, false, "intermediate not reported to the tap");
            continue;
        }
        double tol, tol_max;
        case_tol(cs, it->string, &tol, &tol_max);
        check_ref(c, label, got->data, got->ndim, got->shape, io, it->string, tol, tol_max);
    }
}

/* Bitwise comparison of item i of a batched result with a B=1 result. */
static bool same_item(const float *batched, int64_t i, const float *single, size_t n, double *max_diff)
{
    bool same = true;
    *max_diff = 0;
    for (size_t k = 0; k < n; k++) {
        float a = batched[(size_t)i * n + k], b = single[k];
        if (memcmp(&a, &b, sizeof a)) {
            same = false;
            double d = fabs((double)a - (double)b);
            if (!(d <= *max_diff))
                *max_diff = d;
        }
    }
    return same;
}

static bool arena_check(TestCtx *c, const char *label, const DittoArena *ws, size_t live_before)
{
    if (ws->live == live_before)
        return true;
    return test_report(c, label, false, "arena not released: %zu bytes live, %zu before", ws->live, live_before);
}

/* ---- appearance feature extractor ---- */

/* Run F on `image`; returns the output TT (caller frees) or NULL after a FAIL. */
static TT *run_appearance(TestCtx *c, const char *label, DittoAppearance *net, DittoArena *ws, TT *image, Capture *cap)
{
    int64_t shape[5];
    int rc = ditto_appearance_out_shape(net, &image->dev, shape);
    if (rc < 0) {
        test_report(c, label, false, "out_shape: %s", ditto_strerror(rc));
        return NULL;
    }
    TT *f_s = tt_new(c, DITTO_F32, 5, shape);
    DittoTap tap = { capture_fn, cap };
    size_t live = ws->live;
    rc = ditto_appearance_forward(net, ws, &image->dev, &f_s->dev, cap ? &tap : NULL);
    if (rc < 0 || !arena_check(c, label, ws, live)) {
        if (rc < 0)
            test_report(c, label, false, "forward: %s", ditto_strerror(rc));
        tt_free(f_s);
        return NULL;
    }
    tt_to_host(f_s);
    return f_s;
}

static void test_appearance(TestCtx *c, const Fixtures *fx, DittoArena *ws)
{
    DittoCatalog *wcat = open_fixture(c, fx, "appearance.pth");
    if (!wcat)
        return;
    DittoAppearance *net = NULL;
    int rc = ditto_appearance_load(&net, c->be, wcat);
    test_report(c, "appearance.load", rc == 0, "%s", rc < 0 ? ditto_strerror(rc) : "");
    if (rc < 0) {
        ditto_catalog_close(&wcat);
        return;
    }
    const char *cases[2] = { "appearance_b1", "appearance_b3" };
    for (int k = 0; k < 2; k++) {
        const cJSON *cs = find_case(fx, cases[k]);
        char io_name[64];
        snprintf(io_name, sizeof io_name, "%s.io.pth", cases[k]);
        DittoCatalog *io = cs ? open_fixture(c, fx, io_name) : NULL;
        if (!io) {
            test_report(c, cases[k], false, "case or io file missing");
            continue;
        }
        TT *image = io_input(c, io, "image");
        Capture cap = { .be = c->be };
        TT *f_s = image ? run_appearance(c, cases[k], net, ws, image, &cap) : NULL;
        if (f_s) {
            check_out(c, cs, cases[k], "f_s", f_s, io);
            check_intermediates(c, cs, cases[k], &cap, io);
        } else if (!image) {
            test_report(c, cases[k], false, "input 'image' missing");
        }
        /* B=3: each item equals its B=1 run */
        if (f_s && image->host.shape[0] > 1) {
            bool all = true;
            double worst = 0;
            size_t n = (size_t)(ditto_tensor_numel(&f_s->host) / f_s->host.shape[0]);
            for (int64_t i = 0; i < image->host.shape[0]; i++) {
                TT *one = tt_item(c, image, i);
                TT *out1 = run_appearance(c, "appearance.batch_item", net, ws, one, NULL);
                double d = 0;
                all &= out1 && same_item(tt_f32(f_s), i, tt_f32(out1), n, &d);
                worst = d > worst ? d : worst;
                tt_free(out1);
                tt_free(one);
            }
            test_report(c, "appearance_b3.items_equal_b1", all, "max |diff| %.3g", worst);
        }
        capture_free(&cap);
        tt_free(f_s);
        tt_free(image);
        ditto_catalog_close(&io);
    }
    ditto_appearance_free(&net);
    test_report(c, "appearance.free_nulls", net == NULL, "");
    ditto_catalog_close(&wcat);
}

/* ---- motion extractor ---- */

static const char *const motion_names[7] = { "pitch", "yaw", "roll", "t", "exp", "scale", "kp" };

typedef struct MotionOut {
    TT *t[7];
} MotionOut;

static void motion_out_free(MotionOut *o)
{
    for (int k = 0; k < 7; k++)
        tt_free(o->t[k]);
    memset(o, 0, sizeof *o);
}

static bool run_motion(TestCtx *c, const char *label, DittoMotionExtractor *net, DittoArena *ws, TT *image, Capture *cap, MotionOut *o)
{
    int64_t dims[7];
    ditto_motion_extractor_dims(net, dims);
    for (int k = 0; k < 7; k++)
        o->t[k] = tt_new(c, DITTO_F32, 2, (int64_t[]){ image->host.shape[0], dims[k] });
    DittoMotionInfo info = { o->t[0]->dev, o->t[1]->dev, o->t[2]->dev, o->t[3]->dev, o->t[4]->dev, o->t[5]->dev, o->t[6]->dev };
    DittoTap tap = { capture_fn, cap };
    size_t live = ws->live;
    int rc = ditto_motion_extractor_forward(net, ws, &image->dev, &info, cap ? &tap : NULL);
    if (rc < 0 || !arena_check(c, label, ws, live)) {
        if (rc < 0)
            test_report(c, label, false, "forward: %s", ditto_strerror(rc));
        motion_out_free(o);
        return false;
    }
    for (int k = 0; k < 7; k++)
        tt_to_host(o->t[k]);
    return true;
}

static void test_motion(TestCtx *c, const Fixtures *fx, DittoArena *ws)
{
    DittoCatalog *wcat = open_fixture(c, fx, "motion.pth");
    if (!wcat)
        return;
    DittoMotionExtractor *net = NULL;
    int rc = ditto_motion_extractor_load(&net, c->be, wcat);
    test_report(c, "motion.load", rc == 0, "%s", rc < 0 ? ditto_strerror(rc) : "");
    if (rc < 0) {
        ditto_catalog_close(&wcat);
        return;
    }
    int64_t dims[7];
    ditto_motion_extractor_dims(net, dims);
    test_report(c, "motion.dims", dims[0] == 66 && dims[1] == 66 && dims[2] == 66 && dims[3] == 3 && dims[4] == 63 && dims[5] == 1 && dims[6] == 63,
                "%lld %lld %lld %lld %lld %lld %lld", (long long)dims[0], (long long)dims[1], (long long)dims[2], (long long)dims[3],
                (long long)dims[4], (long long)dims[5], (long long)dims[6]);
    const char *cases[2] = { "motion_b1", "motion_b3" };
    for (int k = 0; k < 2; k++) {
        const cJSON *cs = find_case(fx, cases[k]);
        char io_name[64];
        snprintf(io_name, sizeof io_name, "%s.io.pth", cases[k]);
        DittoCatalog *io = cs ? open_fixture(c, fx, io_name) : NULL;
        if (!io) {
            test_report(c, cases[k], false, "case or io file missing");
            continue;
        }
        TT *image = io_input(c, io, "image");
        Capture cap = { .be = c->be };
        MotionOut o = { { 0 } };
        bool ran = image && run_motion(c, cases[k], net, ws, image, &cap, &o);
        if (ran) {
            for (int j = 0; j < 7; j++)
                check_out(c, cs, cases[k], motion_names[j], o.t[j], io);
            check_intermediates(c, cs, cases[k], &cap, io);
        } else if (!image) {
            test_report(c, cases[k], false, "input 'image' missing");
        }
        if (ran && image->host.shape[0] > 1) {
            bool all = true;
            double worst = 0;
            for (int64_t i = 0; i < image->host.shape[0]; i++) {
                TT *one = tt_item(c, image, i);
                MotionOut o1 = { { 0 } };
                bool ok1 = run_motion(c, "motion.batch_item", net, ws, one, NULL, &o1);
                all &= ok1;
                for (int j = 0; ok1 && j < 7; j++) {
                    double d = 0;
                    all &= same_item(tt_f32(o.t[j]), i, tt_f32(o1.t[j]), (size_t)dims[j], &d);
                    worst = d > worst ? d : worst;
                }
                motion_out_free(&o1);
                tt_free(one);
            }
            test_report(c, "motion_b3.items_equal_b1", all, "max |diff| %.3g", worst);
        }
        motion_out_free(&o);
        capture_free(&cap);
        tt_free(image);
        ditto_catalog_close(&io);
    }
    ditto_motion_extractor_free(&net);
    ditto_catalog_close(&wcat);
}

/* ---- stitching network ---- */

static TT *run_stitch(TestCtx *c, const char *label, DittoStitch *net, DittoArena *ws, TT *kp_s, TT *kp_d, Capture *cap)
{
    TT *out = tt_new(c, DITTO_F32, 3, kp_d->host.shape);
    DittoTap tap = { capture_fn, cap };
    size_t live = ws->live;
    int rc = ditto_stitch_forward(net, ws, &kp_s->dev, &kp_d->dev, &out->dev, cap ? &tap : NULL);
    if (rc < 0 || !arena_check(c, label, ws, live)) {
        if (rc < 0)
            test_report(c, label, false, "forward: %s", ditto_strerror(rc));
        tt_free(out);
        return NULL;
    }
    tt_to_host(out);
    return out;
}

static void test_stitch_cases(TestCtx *c, const Fixtures *fx, DittoArena *ws, DittoStitch *net, const char *tag)
{
    const char *cases[2] = { "stitching_b1", "stitching_b3" };
    for (int k = 0; k < 2; k++) {
        char label[96];
        snprintf(label, sizeof label, "%s%s", cases[k], tag);
        const cJSON *cs = find_case(fx, cases[k]);
        char io_name[64];
        snprintf(io_name, sizeof io_name, "%s.io.pth", cases[k]);
        DittoCatalog *io = cs ? open_fixture(c, fx, io_name) : NULL;
        if (!io) {
            test_report(c, label, false, "case or io file missing");
            continue;
        }
        TT *kp_s = io_input(c, io, "kp_source");
        TT *kp_d = io_input(c, io, "kp_driving");
        Capture cap = { .be = c->be };
        TT *out = kp_s && kp_d ? run_stitch(c, label, net, ws, kp_s, kp_d, &cap) : NULL;
        if (out) {
            check_out(c, cs, label, "kp_driving_new", out, io);
            check_intermediates(c, cs, label, &cap, io);
        } else if (!kp_s || !kp_d) {
            test_report(c, label, false, "inputs missing");
        }
        if (out && kp_s->host.shape[0] > 1) {
            bool all = true;
            double worst = 0;
            for (int64_t i = 0; i < kp_s->host.shape[0]; i++) {
                TT *s1 = tt_item(c, kp_s, i), *d1 = tt_item(c, kp_d, i);
                TT *o1 = run_stitch(c, "stitching.batch_item", net, ws, s1, d1, NULL);
                double d = 0;
                all &= o1 && same_item(tt_f32(out), i, tt_f32(o1), 63, &d);
                worst = d > worst ? d : worst;
                tt_free(o1);
                tt_free(s1);
                tt_free(d1);
            }
            snprintf(label, sizeof label, "%s%s.items_equal_b1", cases[k], tag);
            test_report(c, label, all, "max |diff| %.3g", worst);
        }
        capture_free(&cap);
        tt_free(out);
        tt_free(kp_s);
        tt_free(kp_d);
        ditto_catalog_close(&io);
    }
}

static void test_stitch(TestCtx *c, const Fixtures *fx, DittoArena *ws)
{
    DittoCatalog *wcat = open_fixture(c, fx, "stitching.pth");
    if (!wcat)
        return;
    DittoStitch *net = NULL;
    int rc = ditto_stitch_load(&net, c->be, wcat);
    test_report(c, "stitching.load", rc == 0, "%s", rc < 0 ? ditto_strerror(rc) : "");
    if (rc == 0)
        test_stitch_cases(c, fx, ws, net, "");
    ditto_stitch_free(&net);

    /* DDP checkpoints: every "module." substring is deleted from the keys */
    char **saved = calloc(wcat->n, sizeof *saved);
    for (size_t i = 0; saved && i < wcat->n; i++) {
        const char *name = wcat->entries[i].name;
        const char *dot = strchr(name, '.');
        char *renamed = malloc(strlen(name) + 16);
        if (!dot || !renamed) {
            free(renamed);
            continue;
        }
        /* "retarget_shoulder.mlp.0.weight" -> "retarget_shoulder.module.mlp.0.weight" (a DDP-wrapped state_dict) */
        sprintf(renamed, "%.*smodule.%s", (int)(dot - name + 1), name, dot + 1);
        saved[i] = wcat->entries[i].name;
        wcat->entries[i].name = renamed;
        wcat->entries[i].used = false;
    }
    rc = ditto_stitch_load(&net, c->be, wcat);
    test_report(c, "stitching.load_module_prefixed", rc == 0, "%s", rc < 0 ? ditto_strerror(rc) : "");
    if (rc == 0)
        test_stitch_cases(c, fx, ws, net, ".module_prefixed");
    ditto_stitch_free(&net);
    for (size_t i = 0; saved && i < wcat->n; i++) {
        if (saved[i]) {
            free(wcat->entries[i].name);
            wcat->entries[i].name = saved[i];
        }
    }
    free(saved);
    ditto_catalog_close(&wcat);
}

/* ---- strict loading: another network's checkpoint ---- */

typedef struct LogBuf {
    char text[2048];
} LogBuf;

static void log_capture(void *cookie, DittoLogLevel level, const char *msg)
{
    LogBuf *b = cookie;
    if (level == DITTO_LOG_ERROR && !b->text[0])
        snprintf(b->text, sizeof b->text, "%s", msg);
}

static void test_wrong_checkpoint(TestCtx *c, const Fixtures *fx, const char *net_name, const char *file)
{
    char label[96];
    snprintf(label, sizeof label, "%s.rejects_%s", net_name, file);
    DittoCatalog *cat = open_fixture(c, fx, file);
    if (!cat)
        return;
    LogBuf buf = { { 0 } };
    DittoLogger saved = c->be->log;
    c->be->log = (DittoLogger){ log_capture, &buf, DITTO_LOG_DEBUG };
    int rc;
    void *net = NULL;
    if (!strcmp(net_name, "appearance")) {
        DittoAppearance *m = NULL;
        rc = ditto_appearance_load(&m, c->be, cat);
        net = m;
        ditto_appearance_free(&m);
    } else if (!strcmp(net_name, "motion")) {
        DittoMotionExtractor *m = NULL;
        rc = ditto_motion_extractor_load(&m, c->be, cat);
        net = m;
        ditto_motion_extractor_free(&m);
    } else {
        DittoStitch *m = NULL;
        rc = ditto_stitch_load(&m, c->be, cat);
        net = m;
        ditto_stitch_free(&m);
    }
    c->be->log = saved;
    bool ok = rc == DITTO_ERR_KEY && !net && strstr(buf.text, file) && strstr(buf.text, "key '");
    test_report(c, label, ok, "rc %d (%s), message: %s", rc, ditto_strerror(rc), buf.text);
    if (c->verbose)
        printf("     %s\n", buf.text);
    ditto_catalog_close(&cat);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    const char *shared = test_shared_dir();
    Fixtures fx = { .log = ditto_logger_stderr(DITTO_LOG_WARN) };
    char *text = NULL;
    if (shared) {
        snprintf(fx.dir, sizeof fx.dir, "%s/fixtures/ditto", shared);
        char path[4200];
        snprintf(path, sizeof path, "%s/manifest.json", fx.dir);
        text = read_text(path);
        fx.manifest = text ? cJSON_Parse(text) : NULL;
    }
    if (!fx.manifest) {
        printf("SKIP fixtures not found (shared dir %s)\n", shared ? shared : "absent");
        c.skipped++;
    } else {
        DittoArena ws;
        if (ditto_arena_init(&ws, &c.be->allocator, 0) < 0)
            return 1;
        if (test_selected(&c, "appearance"))
            test_appearance(&c, &fx, &ws);
        if (test_selected(&c, "motion"))
            test_motion(&c, &fx, &ws);
        if (test_selected(&c, "stitching"))
            test_stitch(&c, &fx, &ws);
        if (test_selected(&c, "rejects")) {
            test_wrong_checkpoint(&c, &fx, "appearance", "decoder.pth");
            test_wrong_checkpoint(&c, &fx, "appearance", "motion.pth");
            test_wrong_checkpoint(&c, &fx, "appearance", "stitching.pth");
            test_wrong_checkpoint(&c, &fx, "motion", "appearance.pth");
            test_wrong_checkpoint(&c, &fx, "motion", "warp.pth");
            test_wrong_checkpoint(&c, &fx, "stitching", "motion.pth");
            test_wrong_checkpoint(&c, &fx, "stitching", "lmdm.pth");
        }
        ditto_arena_free(&ws);
    }
    cJSON_Delete(fx.manifest);
    free(text);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
