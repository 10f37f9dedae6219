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
#include "fixtures.h"
#include "models/models.h"
#include "test_util.h"
#include "weights/catalog.h"

/* Output `out_name` of a case, labelled "<case_name>.<out_name>", at the case's tolerance. */
static bool check_case_out(TestCtx *c, const cJSON *cs, const char *case_name, const char *out_name, TT *t, DittoCatalog *io)
{
    char label[128];
    snprintf(label, sizeof label, "%s.%s", case_name, out_name);
    return check_out(c, label, t, io, cs, out_name);
}

/* Manifest case `name` and its io file "<name>.io.pth"; NULL after reporting FAIL `label` when either is missing. */
static DittoCatalog *open_case(TestCtx *c, const Fixtures *fx, const char *name, const char *label, const cJSON **cs)
{
    *cs = fixture_case(fx, name);
    char io_name[64];
    snprintf(io_name, sizeof io_name, "%s.io.pth", name);
    DittoCatalog *io = *cs ? fixture_open(c, fx, io_name) : NULL;
    if (!io)
        test_report(c, label, false, "case or io file missing");
    return io;
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
        fixture_tol(cs, it->string, &tol, &tol_max);
        check_ref_shape(c, label, got->data, got->ndim, got->shape, io, it->string, tol, tol_max);
    }
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
    DittoCatalog *wcat = fixture_open(c, fx, "appearance.pth");
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
        const cJSON *cs;
        DittoCatalog *io = open_case(c, fx, cases[k], cases[k], &cs);
        if (!io)
            continue;
        TT *image = io_input(c, io, "image");
        Capture cap = { .be = c->be };
        TT *f_s = image ? run_appearance(c, cases[k], net, ws, image, &cap) : NULL;
        if (f_s) {
            check_case_out(c, cs, cases[k], "f_s", f_s, io);
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
                all &= out1 && item_diff(tt_f32(f_s), i, tt_f32(out1), n, &worst) == 0;
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
    DittoCatalog *wcat = fixture_open(c, fx, "motion.pth");
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
        const cJSON *cs;
        DittoCatalog *io = open_case(c, fx, cases[k], cases[k], &cs);
        if (!io)
            continue;
        TT *image = io_input(c, io, "image");
        Capture cap = { .be = c->be };
        MotionOut o = { { 0 } };
        bool ran = image && run_motion(c, cases[k], net, ws, image, &cap, &o);
        if (ran) {
            for (int j = 0; j < 7; j++)
                check_case_out(c, cs, cases[k], motion_names[j], o.t[j], io);
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
                for (int j = 0; ok1 && j < 7; j++)
                    all &= item_diff(tt_f32(o.t[j]), i, tt_f32(o1.t[j]), (size_t)dims[j], &worst) == 0;
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
        const cJSON *cs;
        DittoCatalog *io = open_case(c, fx, cases[k], label, &cs);
        if (!io)
            continue;
        TT *kp_s = io_input(c, io, "kp_source");
        TT *kp_d = io_input(c, io, "kp_driving");
        Capture cap = { .be = c->be };
        TT *out = kp_s && kp_d ? run_stitch(c, label, net, ws, kp_s, kp_d, &cap) : NULL;
        if (out) {
            check_case_out(c, cs, label, "kp_driving_new", out, io);
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
                all &= o1 && item_diff(tt_f32(out), i, tt_f32(o1), 63, &worst) == 0;
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
    DittoCatalog *wcat = fixture_open(c, fx, "stitching.pth");
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
    DittoCatalog *cat = fixture_open(c, fx, file);
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
    Fixtures fx;
    if (!fixtures_load(&fx, ditto_logger_stderr(DITTO_LOG_WARN))) {
        const char *shared = test_shared_dir();
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
    fixtures_free(&fx);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
