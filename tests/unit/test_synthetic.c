/*
 * Synthetic checkpoints: the full-size key sets must match the official
 * state_dicts of ditto-architecture.md 5.2-5.6 (entry counts, parameter and
 * buffer totals), load strictly into their networks, and run (official
 * channels, smaller spatial sizes to stay quick). Values are deterministic.
 */
#include <math.h>
#include <string.h>

#include "models/models.h"
#include "test_util.h"
#include "weights/synthetic.h"

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Buffers as the spec counts them: BN running stats + num_batches_tracked, spectral-norm u and v. */
static void count(const DittoCatalog *cat, int64_t *params, int64_t *buffers)
{
    *params = *buffers = 0;
    for (size_t i = 0; i < cat->n; i++) {
        const DittoCatalogEntry *e = &cat->entries[i];
        bool buf = strstr(e->name, ".running_") || ends_with(e->name, ".num_batches_tracked") || ends_with(e->name, ".weight_u") ||
                   ends_with(e->name, ".weight_v");
        *(buf ? buffers : params) += ditto_catalog_entry_numel(e);
    }
}

static void test_counts(TestCtx *c)
{
    static const struct { DittoNetKind net; size_t n; int64_t params, buffers; } want[] = {
        { DITTO_NET_APPEARANCE, 107, 836224, 1679 },
        { DITTO_NET_MOTION, 212, 28118728, 0 },
        { DITTO_NET_WARP, 97, 45529829, 6769 },
        { DITTO_NET_DECODER, 182, 55365388, 72960 },
        { DITTO_NET_STITCH, 8, 45249, 0 },
    };
    for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
        DittoCatalog *cat = NULL;
        int rc = ditto_synthetic_catalog(&cat, want[k].net, true, 7, &c->be->log);
        int64_t p = 0, b = 0;
        if (rc == 0)
            count(cat, &p, &b);
        char name[64];
        snprintf(name, sizeof name, "synthetic.counts.%s", ditto_net_file_name(want[k].net));
        test_report(c, name, rc == 0 && cat->n == want[k].n && p == want[k].params && b == want[k].buffers,
                    "%zu keys (want %zu), %lld params (want %lld), %lld buffers (want %lld)", rc == 0 ? cat->n : 0, want[k].n,
                    (long long)p, (long long)want[k].params, (long long)b, (long long)want[k].buffers);
        ditto_catalog_close(&cat);
    }
}

static void test_deterministic(TestCtx *c)
{
    DittoCatalog *a = NULL, *b = NULL, *d = NULL;
    ditto_synthetic_catalog(&a, DITTO_NET_STITCH, true, 5, &c->be->log);
    ditto_synthetic_catalog(&b, DITTO_NET_STITCH, true, 5, &c->be->log);
    ditto_synthetic_catalog(&d, DITTO_NET_STITCH, true, 6, &c->be->log);
    bool same = a && b && d && a->n == b->n, differ = false;
    for (size_t i = 0; same && i < a->n; i++) {
        same = !strcmp(a->entries[i].name, b->entries[i].name) && !memcmp(a->entries[i].data, b->entries[i].data, a->entries[i].span);
        differ |= memcmp(a->entries[i].data, d->entries[i].data, a->entries[i].span) != 0;
    }
    test_report(c, "synthetic.deterministic", same && differ, "same seed identical: %d, other seed differs: %d", same, differ);
    ditto_catalog_close(&a);
    ditto_catalog_close(&b);
    ditto_catalog_close(&d);
}

static bool finite_in(TT *t, float lo, float hi)
{
    tt_to_host(t);
    const float *p = tt_f32(t);
    for (int64_t i = 0; i < ditto_tensor_numel(&t->host); i++)
        if (!isfinite(p[i]) || p[i] < lo || p[i] > hi)
            return false;
    return true;
}

/* Full-size channels at small spatial sizes, and the small configuration end to end (F -> W -> G). */
static void test_forward(TestCtx *c, bool full)
{
    const char *tag = full ? "full" : "small";
    DittoCatalog *cf = NULL, *cm = NULL, *cw = NULL, *cg = NULL;
    DittoAppearance *f = NULL;
    DittoMotionExtractor *m = NULL;
    DittoWarp *w = NULL;
    DittoDecoder *g = NULL;
    int rc = ditto_synthetic_catalog(&cf, DITTO_NET_APPEARANCE, full, 1, &c->be->log);
    if (!rc) rc = ditto_synthetic_catalog(&cm, DITTO_NET_MOTION, full, 2, &c->be->log);
    if (!rc) rc = ditto_synthetic_catalog(&cw, DITTO_NET_WARP, full, 3, &c->be->log);
    if (!rc) rc = ditto_synthetic_catalog(&cg, DITTO_NET_DECODER, full, 4, &c->be->log);
    if (!rc) rc = ditto_appearance_load(&f, c->be, cf);
    if (!rc) rc = ditto_motion_extractor_load(&m, c->be, cm);
    if (!rc) rc = ditto_warp_load(&w, c->be, cw);
    if (!rc) rc = ditto_decoder_load(&g, c->be, cg);
    char name[64];
    snprintf(name, sizeof name, "synthetic.load.%s", tag);
    test_report(c, name, rc == 0, "rc %d", rc);
    ditto_catalog_close(&cf);
    ditto_catalog_close(&cm);
    ditto_catalog_close(&cw);
    ditto_catalog_close(&cg);
    if (rc == 0) {
        DittoArena ws;
        ditto_arena_init(&ws, &c->be->allocator, 0);
        /* image (1,3,S,S): S = 128 (f_s 32x32, the smallest the 5-level hourglass takes) keeps the full-size nets quick */
        const int64_t S = full ? 128 : 256;
        TT *img = tt_new(c, DITTO_F32, 4, (int64_t[]){ 1, 3, S, S });
        tt_fill_uniform(img, 0, 1);
        tt_to_dev(img);
        int64_t fs_shape[5], w_shape[4], g_shape[4], dims[7];
        ditto_appearance_out_shape(f, &img->dev, fs_shape);
        TT *fs = tt_new(c, DITTO_F32, 5, fs_shape);
        int r1 = ditto_appearance_forward(f, &ws, &img->dev, &fs->dev, NULL);
        ditto_motion_extractor_dims(m, dims);
        TT *mo[7];
        DittoMotionInfo info;
        DittoTensor *slots[7] = { &info.pitch, &info.yaw, &info.roll, &info.t, &info.exp, &info.scale, &info.kp };
        for (int k = 0; k < 7; k++) {
            mo[k] = tt_new(c, DITTO_F32, 2, (int64_t[]){ 1, dims[k] });
            *slots[k] = mo[k]->dev;
        }
        int r2 = ditto_motion_extractor_forward(m, &ws, &img->dev, &info, NULL);
        TT *kp_s = tt_new(c, DITTO_F32, 3, (int64_t[]){ 1, 21, 3 }), *kp_d = tt_new(c, DITTO_F32, 3, (int64_t[]){ 1, 21, 3 });
        tt_fill_uniform(kp_s, -0.5f, 0.5f);
        tt_fill_uniform(kp_d, -0.5f, 0.5f);
        tt_to_dev(kp_s);
        tt_to_dev(kp_d);
        int r3 = ditto_warp_out_shape(w, &fs->dev, w_shape);
        if (r3 < 0)
            memcpy(w_shape, (int64_t[]){ 1, 1, 1, 1 }, sizeof w_shape);
        TT *wo = tt_new(c, DITTO_F32, 4, w_shape);
        if (r3 == 0)
            r3 = ditto_warp_forward(w, &ws, &fs->dev, &kp_s->dev, &kp_d->dev, &wo->dev, NULL);
        int r4 = r3 == 0 ? ditto_decoder_out_shape(g, &wo->dev, g_shape) : -1;
        if (r4 < 0)
            memcpy(g_shape, (int64_t[]){ 1, 1, 1, 1 }, sizeof g_shape);
        TT *out = tt_new(c, DITTO_F32, 4, g_shape);
        if (r4 == 0)
            r4 = ditto_decoder_forward(g, &ws, &wo->dev, &out->dev, NULL);
        bool ok = !r1 && !r2 && !r3 && !r4 && finite_in(fs, -1e6f, 1e6f) && finite_in(wo, -1e6f, 1e6f) && finite_in(out, 0, 1) &&
                  g_shape[2] == 8 * w_shape[2] && finite_in(mo[6], -1e6f, 1e6f);
        snprintf(name, sizeof name, "synthetic.forward.%s", tag);
        test_report(c, name, ok, "rc %d %d %d %d, f_s (%lld,%lld,%lld,%lld,%lld) -> img %lldx%lld", r1, r2, r3, r4, (long long)fs_shape[0],
                    (long long)fs_shape[1], (long long)fs_shape[2], (long long)fs_shape[3], (long long)fs_shape[4], (long long)g_shape[2],
                    (long long)g_shape[3]);
        for (int k = 0; k < 7; k++)
            tt_free(mo[k]);
        tt_free(img);
        tt_free(fs);
        tt_free(kp_s);
        tt_free(kp_d);
        tt_free(wo);
        tt_free(out);
        ditto_arena_free(&ws);
    }
    ditto_appearance_free(&f);
    ditto_motion_extractor_free(&m);
    ditto_warp_free(&w);
    ditto_decoder_free(&g);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    test_counts(&c);
    test_deterministic(&c);
    test_forward(&c, true);
    test_forward(&c, false);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
