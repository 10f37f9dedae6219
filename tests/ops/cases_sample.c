/*
 * Resampling family: upsample_nearest, pool, pixel_shuffle, grid_sample.
 * Each case runs the op through its front end on the backend under test and
 * compares with a naive double-precision reference written here.
 *
 * Tolerances (rel_l2, max_abs/max_ref):
 *   upsample_nearest, max pool, pixel_shuffle: exact (pure data movement).
 *   avg pool: 1e-6, 4e-6. A float sum of <= 18 values in [-1,1] then one
 *     division: a few ulps of the window sum.
 *   grid_sample: 5e-6, 2e-5. The op unnormalises coordinates in fp32 as
 *     PyTorch does: ((g+1)*W-1)/2 carries an absolute error up to about
 *     (|g|+1)*W*2^-24 pixel (8e-6 px at W = 64), times a neighbour
 *     difference up to 2 for white noise in [-1,1]. Weights and the <= 8
 *     products add a few ulps.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ditto/ditto_error.h"
#include "ops/ops.h"
#include "op_util.h"
#include "test_ops.h"

/* Row-major index i of shape -> multi-index idx. */
static void unravel(int64_t i, int ndim, const int64_t *shape, int64_t *idx)
{
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

static int64_t ravel(int ndim, const int64_t *shape, const int64_t *idx)
{
    int64_t o = 0;
    for (int d = 0; d < ndim; d++)
        o = o * shape[d] + idx[d];
    return o;
}

/* ---- upsample_nearest ---- */

static void case_upsample(TestCtx *c, const char *name, int ndim, const int64_t *xs, const int64_t *ys)
{
    if (!test_selected(c, name))
        return;
    TT *x = tt_new(c, DITTO_F32, ndim, xs), *y = tt_new(c, DITTO_F32, ndim, ys);
    tt_fill_uniform(x, -1, 1);
    tt_to_dev(x);
    if (op_ok(c, name, ditto_op_upsample_nearest(c->be, &x->dev, &y->dev))) {
        double *ref = ref_new(y);
        int64_t n = ditto_tensor_numel(&y->host), idx[DITTO_MAX_DIMS];
        for (int64_t i = 0; i < n; i++) {
            unravel(i, ndim, ys, idx);
            for (int d = 2; d < ndim; d++)   /* floor(o * in / out); exact in double at these sizes */
                idx[d] = (int64_t)floor((double)idx[d] * (double)xs[d] / (double)ys[d]);
            ref[i] = tt_f32(x)[ravel(ndim, xs, idx)];
        }
        test_check(c, name, y, ref, 0, 0);
        free(ref);
    }
    tt_free(x);
    tt_free(y);
}

/* ---- pool ---- */

/* Enumerates every kernel tap; a tap counts towards count_include_pad when it
 * lies in the padded extent [-pad_begin, in + pad_end). */
static void ref_pool(const DittoPoolParams *p, const TT *x, const TT *y, double *ref)
{
    int nd = x->host.ndim, ns = nd - 2;
    const int64_t *xs = x->host.shape, *ys = y->host.shape;
    int64_t n = ditto_tensor_numel(&y->host), oi[DITTO_MAX_DIMS], xi[DITTO_MAX_DIMS], ki[3];
    int64_t ktotal = 1;
    for (int d = 0; d < ns; d++)
        ktotal *= p->kernel[d];
    const float *xd = (const float *)x->host.data;
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, ys, oi);
        double sum = 0, mx = -INFINITY;
        bool nan = false;
        int64_t padded = 0, real = 0;
        for (int64_t k = 0; k < ktotal; k++) {
            unravel(k, ns, (const int64_t[]){ p->kernel[0], p->kernel[1], p->kernel[2] }, ki);
            bool inside = true, in_padded = true;
            xi[0] = oi[0];
            xi[1] = oi[1];
            for (int d = 0; d < ns; d++) {
                int s = p->stride[d] ? p->stride[d] : p->kernel[d];
                int64_t pos = oi[2 + d] * s - p->pad_begin[d] + ki[d];
                xi[2 + d] = pos;
                inside = inside && pos >= 0 && pos < xs[2 + d];
                in_padded = in_padded && pos >= -p->pad_begin[d] && pos < xs[2 + d] + p->pad_end[d];
            }
            padded += in_padded;
            if (!inside)
                continue;
            real++;
            double v = xd[ravel(nd, xs, xi)];
            sum += v;
            mx = v > mx ? v : mx;
            nan = nan || isnan(v);
        }
        if (p->kind == DITTO_POOL_MAX)
            ref[i] = nan ? NAN : mx;   /* max propagates NaN, as in PyTorch */
        else
            ref[i] = sum / (double)(p->count_include_pad ? padded : real);
    }
}

/* nan_at >= 0 plants a NaN at that input element. */
static void case_pool(TestCtx *c, const char *name, const DittoPoolParams *p, int ndim, const int64_t *xs,
                      const int64_t *want_spatial, int64_t nan_at)
{
    if (!test_selected(c, name))
        return;
    TT *x = tt_new(c, DITTO_F32, ndim, xs);
    int64_t ys[DITTO_MAX_DIMS];
    if (ditto_pool_out_shape(p, &x->host, ys) < 0) {
        test_report(c, name, false, "ditto_pool_out_shape rejected the case");
        tt_free(x);
        return;
    }
    /* the case must have the output size it was designed for (e.g. a ceil_mode window hanging off) */
    for (int d = 2; d < ndim; d++) {
        if (want_spatial && ys[d] != want_spatial[d - 2]) {
            test_report(c, name, false, "output dim %d is %lld, expected %lld", d, (long long)ys[d],
                        (long long)want_spatial[d - 2]);
            tt_free(x);
            return;
        }
    }
    TT *y = tt_new(c, DITTO_F32, ndim, ys);
    tt_fill_uniform(x, -1, 1);
    if (nan_at >= 0)
        tt_f32(x)[nan_at] = NAN;
    tt_to_dev(x);
    if (op_ok(c, name, ditto_op_pool(c->be, p, &x->dev, &y->dev))) {
        double *ref = ref_new(y);
        ref_pool(p, x, y, ref);
        if (p->kind == DITTO_POOL_MAX)
            test_check(c, name, y, ref, 0, 0);
        else
            test_check(c, name, y, ref, 1e-6, 4e-6);
        free(ref);
    }
    tt_free(x);
    tt_free(y);
}

/* ---- pixel_shuffle ---- */

static void case_shuffle(TestCtx *c, const char *name, int r, const int64_t *xs)
{
    if (!test_selected(c, name))
        return;
    int64_t ys[4] = { xs[0], xs[1] / (r * r), xs[2] * r, xs[3] * r };
    TT *x = tt_new(c, DITTO_F32, 4, xs), *y = tt_new(c, DITTO_F32, 4, ys);
    tt_fill_uniform(x, -1, 1);
    tt_to_dev(x);
    if (op_ok(c, name, ditto_op_pixel_shuffle(c->be, r, &x->dev, &y->dev))) {
        double *ref = ref_new(y);
        /* walk the input: x[n, c r^2 + i r + j, h, w] lands at y[n, c, h r + i, w r + j] */
        int64_t n = ditto_tensor_numel(&x->host), xi[4];
        for (int64_t k = 0; k < n; k++) {
            unravel(k, 4, xs, xi);
            int64_t ch = xi[1] / (r * r), i = xi[1] % (r * r) / r, j = xi[1] % r;
            int64_t yi[4] = { xi[0], ch, xi[2] * r + i, xi[3] * r + j };
            ref[ravel(4, ys, yi)] = tt_f32(x)[k];
        }
        test_check(c, name, y, ref, 0, 0);
        free(ref);
    }
    tt_free(x);
    tt_free(y);
}

/*
 * pixel_shuffle_act from a channels-last (N,H,W,cp) tensor's first C r^2
 * channels, permuted to (N,C r^2,H,W), with an activation: the same bytes as
 * a copy to NCHW, pixel_shuffle and the unary op in turn on this backend.
 */
static void case_shuffle_act(TestCtx *c, const char *name, int r, int64_t n, int64_t cout, int64_t h, int64_t w, int64_t cp, DittoUnaryKind act)
{
    if (!test_selected(c, name))
        return;
    const int64_t ci = cout * r * r;
    TT *x = tt_new(c, DITTO_F32, 4, (const int64_t[]){ n, h, w, cp });
    TT *tmp = new_out(c, DITTO_F32, 4, (const int64_t[]){ n, ci, h, w });
    TT *y = new_out(c, DITTO_F32, 4, (const int64_t[]){ n, cout, h * r, w * r }), *y2 = new_out(c, DITTO_F32, 4, (const int64_t[]){ n, cout, h * r, w * r });
    tt_fill_uniform(x, -6, 6);
    tt_to_dev(x);
    DittoTensor sl, cf;
    const DittoShuffleParams p = { r, { act, 0.1f, 0.0f } };
    int rc = ditto_tensor_slice(&x->dev, 3, 0, ci, 1, &sl);
    if (!rc) rc = ditto_tensor_permute(&sl, (const int[]){ 0, 3, 1, 2 }, &cf);
    if (!rc) rc = ditto_op_copy(c->be, &cf, &tmp->dev);
    if (!rc) rc = ditto_op_pixel_shuffle(c->be, r, &tmp->dev, &y2->dev);
    if (!rc) rc = ditto_op_unary(c->be, &p.act, &y2->dev, &y2->dev);
    if (rc < 0) {
        test_report(c, name, false, "the unfused ops failed: %d", rc);
    } else if (op_ok(c, name, ditto_op_pixel_shuffle_act(c->be, &p, &cf, &y->dev)) && tt_to_host(y) >= 0 && tt_to_host(y2) >= 0) {
        size_t nb = ditto_tensor_nbytes(&y->host), diff = 0;
        for (size_t i = 0; i < nb; i++)
            diff += ((const unsigned char *)y->host.data)[i] != ((const unsigned char *)y2->host.data)[i];
        test_report(c, name, diff == 0 && tt_guards_ok(y), "%zu of %zu bytes differ from copy + shuffle + unary", diff, nb);
    }
    tt_free(x);
    tt_free(tmp);
    tt_free(y);
    tt_free(y2);
}

/* ---- grid_sample ---- */

typedef enum GridFill {
    GRID_UNIFORM,    /* uniform in [-1.15, 1.15]: some points outside, zero padding */
    GRID_EDGES,      /* k/4 - 1.25, k = 0..10: exact pixel edges, +-1 and just outside */
    GRID_IDENTITY,   /* make_coordinate_grid: 2i/(n-1) - 1 */
} GridFill;

static double ref_unnormalize(double g, int64_t size, bool align_corners)
{
    return align_corners ? (g + 1) / 2 * (double)(size - 1) : ((g + 1) * (double)size - 1) / 2;
}

/* Direct (tri)linear interpolation: each of the 2^ns corners with its product weight if inside. */
static void ref_grid_sample(bool ac, const TT *x, const TT *grid, const TT *y, double *ref)
{
    int nd = x->host.ndim, ns = nd - 2;
    const int64_t *xs = x->host.shape, *ys = y->host.shape;
    const float *xd = (const float *)x->host.data, *gd = (const float *)grid->host.data;
    int64_t npts = ditto_tensor_numel(&grid->host) / ns, oi[DITTO_MAX_DIMS], xi[DITTO_MAX_DIMS];
    int64_t per_n = npts / xs[0];
    for (int64_t p = 0; p < npts; p++) {
        /* grid axis k (x, y, z) addresses spatial dim nd-1-k */
        double pos[3], frac[3];
        int64_t base[3];
        for (int k = 0; k < ns; k++) {
            pos[k] = ref_unnormalize(gd[p * ns + k], xs[nd - 1 - k], ac);
            base[k] = (int64_t)floor(pos[k]);
            frac[k] = pos[k] - (double)base[k];
        }
        for (int64_t ch = 0; ch < xs[1]; ch++) {
            double acc = 0;
            for (int corner = 0; corner < (1 << ns); corner++) {
                double w = 1;
                bool inside = true;
                xi[0] = p / per_n;
                xi[1] = ch;
                for (int k = 0; k < ns; k++) {
                    int bit = corner >> k & 1;
                    int64_t q = base[k] + bit;
                    w *= bit ? frac[k] : 1 - frac[k];
                    inside = inside && q >= 0 && q < xs[nd - 1 - k];
                    xi[nd - 1 - k] = q;
                }
                if (inside)
                    acc += w * xd[ravel(nd, xs, xi)];
            }
            /* output (n, ch, spatial of point p) */
            unravel(p % per_n, ns, ys + 2, oi + 2);
            oi[0] = p / per_n;
            oi[1] = ch;
            ref[ravel(nd, ys, oi)] = acc;
        }
    }
}

static void case_grid(TestCtx *c, const char *name, bool ac, GridFill fill, int ndim, const int64_t *xs,
                      const int64_t *out_spatial)
{
    if (!test_selected(c, name))
        return;
    int ns = ndim - 2;
    int64_t gs[DITTO_MAX_DIMS], ys[DITTO_MAX_DIMS];
    gs[0] = ys[0] = xs[0];
    ys[1] = xs[1];
    for (int d = 0; d < ns; d++)
        gs[1 + d] = ys[2 + d] = out_spatial[d];
    gs[ndim - 1] = ns;
    /* the grid is float32 by contract (also in fp16 storage mode) */
    TT *x = tt_new(c, DITTO_F32, ndim, xs), *g = tt_new_f32dev(c, ndim, gs), *y = tt_new(c, DITTO_F32, ndim, ys);
    tt_fill_uniform(x, -1, 1);
    tt_fill_uniform(g, -1.15f, 1.15f);
    float *gd = tt_f32(g);
    int64_t npts = ditto_tensor_numel(&g->host) / ns, oi[DITTO_MAX_DIMS];
    for (int64_t p = 0; p < npts; p++) {
        for (int k = 0; k < ns; k++) {
            float *v = &gd[p * ns + k];
            if (fill == GRID_EDGES) {
                *v = floorf((*v + 1.15f) / 2.3f * 11.0f);          /* 0..10 */
                *v = (*v > 10 ? 10 : *v) / 4.0f - 1.25f;
            } else if (fill == GRID_IDENTITY) {
                unravel(p % (npts / xs[0]), ns, out_spatial, oi);
                int64_t i = oi[ns - 1 - k], n = out_spatial[ns - 1 - k];
                *v = (float)(2.0 * (double)i / (double)(n - 1) - 1.0);
            }
        }
    }
    tt_to_dev(x);
    tt_to_dev(g);
    if (op_ok(c, name, ditto_op_grid_sample(c->be, ac, &x->dev, &g->dev, &y->dev))) {
        double *ref = ref_new(y);
        if (fill == GRID_IDENTITY) {
            /* sampled with align_corners on the input's own size, the grid reproduces x */
            for (int64_t i = 0; i < ditto_tensor_numel(&y->host); i++)
                ref[i] = tt_f32(x)[i];
        } else {
            ref_grid_sample(ac, x, g, y, ref);
        }
        test_check(c, name, y, ref, 5e-6, 2e-5);
        free(ref);
    }
    tt_free(x);
    tt_free(g);
    tt_free(y);
}

/* ---- negative cases: the front end must reject these ---- */

static void case_negative(TestCtx *c)
{
    if (!test_selected(c, "sample_reject"))
        return;
    TT *x4 = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 1, 6, 4, 5 });
    TT *up_bad = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 1, 5, 8, 10 });
    expect_rc(c, "sample_reject_upsample_channels", ditto_op_upsample_nearest(c->be, &x4->dev, &up_bad->dev), DITTO_ERR_SHAPE);

    DittoPoolParams pp = { .kind = DITTO_POOL_AVG, .kernel = { 2, 2 } };
    TT *pool_bad = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 1, 6, 2, 3 });   /* needs (1,6,2,2) */
    expect_rc(c, "sample_reject_pool_out_shape", ditto_op_pool(c->be, &pp, &x4->dev, &pool_bad->dev), DITTO_ERR_SHAPE);
    DittoPoolParams pad_big = { .kind = DITTO_POOL_MAX, .kernel = { 2, 2 }, .pad_begin = { 2, 0 } };
    expect_rc(c, "sample_reject_pool_pad_ge_kernel", ditto_op_pool(c->be, &pad_big, &x4->dev, &pool_bad->dev), DITTO_ERR_SHAPE);

    TT *ps = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 1, 1, 8, 10 });       /* 6 channels, r = 2: not divisible */
    expect_rc(c, "sample_reject_pixel_shuffle", ditto_op_pixel_shuffle(c->be, 2, &x4->dev, &ps->dev), DITTO_ERR_SHAPE);
    const DittoShuffleParams bad_act = { 2, { DITTO_UNARY_COUNT, 0.0f, 0.0f } }, bad_r = { 2, { DITTO_UNARY_SIGMOID, 0.0f, 0.0f } };
    expect_rc(c, "sample_reject_pixel_shuffle_act_r", ditto_op_pixel_shuffle_act(c->be, &bad_r, &x4->dev, &ps->dev), DITTO_ERR_SHAPE);
    TT *ps4 = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 1, 1, 4, 6 }), *x4c = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 1, 4, 2, 3 });
    expect_rc(c, "sample_reject_pixel_shuffle_act_kind", ditto_op_pixel_shuffle_act(c->be, &bad_act, &x4c->dev, &ps4->dev), DITTO_ERR_INVAL);
    tt_free(ps4);
    tt_free(x4c);

    TT *g3 = tt_new_f32dev(c, 4, (const int64_t[]){ 1, 3, 3, 3 });           /* 2-D grid with 3 coords */
    TT *gy = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 1, 6, 3, 3 });
    expect_rc(c, "sample_reject_grid_lastdim", ditto_op_grid_sample(c->be, false, &x4->dev, &g3->dev, &gy->dev), DITTO_ERR_SHAPE);
    TT *g2b = tt_new_f32dev(c, 4, (const int64_t[]){ 2, 3, 3, 2 });          /* batch 2 vs 1 */
    expect_rc(c, "sample_reject_grid_batch", ditto_op_grid_sample(c->be, false, &x4->dev, &g2b->dev, &gy->dev), DITTO_ERR_SHAPE);
    TT *gu8 = tt_new(c, DITTO_U8, 4, (const int64_t[]){ 1, 3, 3, 2 });
    expect_rc(c, "sample_reject_grid_dtype", ditto_op_grid_sample(c->be, false, &x4->dev, &gu8->dev, &gy->dev), DITTO_ERR_INVAL);

    tt_free(x4);
    tt_free(up_bad);
    tt_free(pool_bad);
    tt_free(ps);
    tt_free(g3);
    tt_free(gy);
    tt_free(g2b);
    tt_free(gu8);
}

void test_ops_sample(TestCtx *c)
{
    /* upsample_nearest: integer factors (Ditto) and non-integer sizes, 1-3 spatial dims */
    case_upsample(c, "upsample_nearest_1d_x2", 3, (const int64_t[]){ 1, 3, 5 }, (const int64_t[]){ 1, 3, 10 });
    case_upsample(c, "upsample_nearest_1d_7to3", 3, (const int64_t[]){ 3, 2, 7 }, (const int64_t[]){ 3, 2, 3 });
    case_upsample(c, "upsample_nearest_2d_x2x3", 4, (const int64_t[]){ 3, 2, 5, 7 }, (const int64_t[]){ 3, 2, 10, 21 });
    case_upsample(c, "upsample_nearest_2d_5to7", 4, (const int64_t[]){ 1, 3, 5, 6 }, (const int64_t[]){ 1, 3, 7, 11 });
    case_upsample(c, "upsample_nearest_3d_x122", 5, (const int64_t[]){ 1, 3, 3, 4, 5 }, (const int64_t[]){ 1, 3, 3, 8, 10 });
    /* rows a multiple of 8 (the vectorised f16 path on CUDA): x2 and x4 maps, 2-D and 3-D */
    case_upsample(c, "upsample_nearest_2d_x2_w16", 4, (const int64_t[]){ 2, 3, 5, 8 }, (const int64_t[]){ 2, 3, 10, 16 });
    case_upsample(c, "upsample_nearest_2d_x4_w32", 4, (const int64_t[]){ 2, 3, 4, 8 }, (const int64_t[]){ 2, 3, 16, 32 });
    case_upsample(c, "upsample_nearest_3d_x122_w16", 5, (const int64_t[]){ 2, 3, 3, 4, 8 }, (const int64_t[]){ 2, 3, 3, 8, 16 });
    case_upsample(c, "upsample_nearest_2d_x8_w8", 4, (const int64_t[]){ 1, 2, 3, 1 }, (const int64_t[]){ 1, 2, 3, 8 });
    case_upsample(c, "upsample_nearest_3d_b3_odd", 5, (const int64_t[]){ 3, 2, 2, 3, 5 }, (const int64_t[]){ 3, 2, 5, 7, 9 });

    /* pool: Ditto's AvgPool2d(2) / AvgPool3d((1,2,2)), then padding, ceil_mode and count_include_pad */
    DittoPoolParams avg2 = { .kind = DITTO_POOL_AVG, .kernel = { 2, 2 } };
    case_pool(c, "pool_avg2d_k2", &avg2, 4, (const int64_t[]){ 1, 3, 6, 8 }, (const int64_t[]){ 3, 4 }, -1);
    DittoPoolParams avg122 = { .kind = DITTO_POOL_AVG, .kernel = { 1, 2, 2 } };
    case_pool(c, "pool_avg3d_k122_b3", &avg122, 5, (const int64_t[]){ 3, 2, 3, 6, 4 }, (const int64_t[]){ 3, 3, 2 }, -1);
    /* CUDA f16 takes a vectorised kernel for 2x2 windows when W is a multiple of 4: also W = 6, an odd H, and 16 planes */
    case_pool(c, "pool_avg2d_k2_w6", &avg2, 4, (const int64_t[]){ 2, 3, 4, 6 }, (const int64_t[]){ 2, 3 }, -1);
    case_pool(c, "pool_avg3d_k122_h5", &avg122, 5, (const int64_t[]){ 1, 2, 2, 5, 8 }, (const int64_t[]){ 2, 2, 4 }, -1);
    case_pool(c, "pool_avg3d_k122_wide", &avg122, 5, (const int64_t[]){ 2, 4, 2, 8, 16 }, (const int64_t[]){ 2, 4, 8 }, -1);
    /* channels-last (the warp's NDHWC hourglass viewed (B*D, 1, H, W, C)): kernel (2,2,1); CUDA f16 vectorises C % 8 == 0 */
    DittoPoolParams avg221 = { .kind = DITTO_POOL_AVG, .kernel = { 2, 2, 1 } };
    case_pool(c, "pool_avg3d_k221_c16", &avg221, 5, (const int64_t[]){ 6, 1, 4, 6, 16 }, (const int64_t[]){ 2, 3, 16 }, -1);
    case_pool(c, "pool_avg3d_k221_c8_h5", &avg221, 5, (const int64_t[]){ 2, 1, 5, 4, 8 }, (const int64_t[]){ 2, 2, 8 }, -1);
    case_pool(c, "pool_avg3d_k221_c12", &avg221, 5, (const int64_t[]){ 3, 1, 4, 4, 12 }, (const int64_t[]){ 2, 2, 12 }, -1);
    /* in 7, k 3, s 2, pad (1, 0), ceil: 4 windows; the last covers 5, 6 and hangs past the input */
    DittoPoolParams hang = { .kernel = { 3, 3 }, .stride = { 2, 2 }, .pad_begin = { 1, 1 }, .pad_end = { 0, 1 }, .ceil_mode = true };
    hang.kind = DITTO_POOL_AVG;
    hang.count_include_pad = true;
    case_pool(c, "pool_avg2d_k3s2_ceil_incl_pad", &hang, 4, (const int64_t[]){ 3, 2, 7, 9 }, (const int64_t[]){ 4, 5 }, -1);
    hang.count_include_pad = false;
    case_pool(c, "pool_avg2d_k3s2_ceil_excl_pad", &hang, 4, (const int64_t[]){ 3, 2, 7, 9 }, (const int64_t[]){ 4, 5 }, -1);
    hang.kind = DITTO_POOL_MAX;
    case_pool(c, "pool_max2d_k3s2_ceil_pad", &hang, 4, (const int64_t[]){ 1, 3, 7, 9 }, (const int64_t[]){ 4, 5 }, -1);
    hang.ceil_mode = false;
    case_pool(c, "pool_max2d_k3s2_floor_pad", &hang, 4, (const int64_t[]){ 1, 3, 7, 9 }, (const int64_t[]){ 3, 5 }, -1);
    case_pool(c, "pool_max2d_k3s2_nan", &hang, 4, (const int64_t[]){ 1, 3, 7, 9 }, (const int64_t[]){ 3, 5 },
              (1 * 7 + 2) * 9 + 4);   /* NaN at (n 0, c 1, h 2, w 4) */
    DittoPoolParams p1 = { .kind = DITTO_POOL_AVG, .kernel = { 3 }, .stride = { 2 }, .pad_begin = { 1 }, .ceil_mode = true,
                           .count_include_pad = true };
    case_pool(c, "pool_avg1d_k3s2_ceil_incl_pad", &p1, 3, (const int64_t[]){ 1, 4, 7 }, (const int64_t[]){ 4 }, -1);
    DittoPoolParams m1 = { .kind = DITTO_POOL_MAX, .kernel = { 4 }, .stride = { 3 }, .pad_begin = { 2 }, .pad_end = { 1 } };
    case_pool(c, "pool_max1d_k4s3_pad", &m1, 3, (const int64_t[]){ 3, 2, 11 }, (const int64_t[]){ 4 }, -1);
    DittoPoolParams p3 = { .kernel = { 2, 3, 3 }, .stride = { 2, 2, 1 }, .pad_begin = { 1, 1, 1 }, .pad_end = { 0, 1, 1 },
                           .ceil_mode = true };
    p3.kind = DITTO_POOL_MAX;
    case_pool(c, "pool_max3d_ceil_pad", &p3, 5, (const int64_t[]){ 1, 2, 5, 6, 7 }, (const int64_t[]){ 3, 4, 7 }, -1);
    p3.kind = DITTO_POOL_AVG;
    case_pool(c, "pool_avg3d_ceil_excl_pad_b3", &p3, 5, (const int64_t[]){ 3, 2, 5, 6, 7 }, (const int64_t[]){ 3, 4, 7 }, -1);
    p3.count_include_pad = true;
    case_pool(c, "pool_avg3d_ceil_incl_pad", &p3, 5, (const int64_t[]){ 1, 2, 5, 6, 7 }, (const int64_t[]){ 3, 4, 7 }, -1);

    /* pixel_shuffle */
    case_shuffle(c, "pixel_shuffle_r2", 2, (const int64_t[]){ 1, 8, 3, 5 });
    case_shuffle(c, "pixel_shuffle_r3_b3", 3, (const int64_t[]){ 3, 18, 2, 3 });
    case_shuffle(c, "pixel_shuffle_r1", 1, (const int64_t[]){ 1, 3, 4, 5 });
    case_shuffle_act(c, "pixel_shuffle_act_r2_sigmoid_nhwc", 2, 2, 3, 7, 10, 16, DITTO_UNARY_SIGMOID);   /* the decoder's conv_img: 12 of 16 */
    case_shuffle_act(c, "pixel_shuffle_act_r2_sigmoid_odd_w", 2, 1, 3, 4, 5, 12, DITTO_UNARY_SIGMOID);
    case_shuffle_act(c, "pixel_shuffle_act_r3_leaky", 3, 2, 2, 3, 4, 20, DITTO_UNARY_LEAKY_RELU);
    case_shuffle_act(c, "pixel_shuffle_act_r2_identity", 2, 1, 2, 6, 6, 8, DITTO_UNARY_IDENTITY);

    /* grid_sample 2-D and 3-D, both corner conventions, odd sizes, batch 1 and 3 */
    for (int ac = 0; ac < 2; ac++) {
        char name[64];
#define GRID(suffix, ...) (snprintf(name, sizeof name, "grid_sample_%s_ac%d", suffix, ac), case_grid(c, name, ac, __VA_ARGS__))
        GRID("2d_b1", GRID_UNIFORM, 4, (const int64_t[]){ 1, 3, 5, 7 }, (const int64_t[]){ 4, 6 });
        GRID("2d_b3", GRID_UNIFORM, 4, (const int64_t[]){ 3, 2, 6, 4 }, (const int64_t[]){ 5, 3 });
        GRID("2d_edges", GRID_EDGES, 4, (const int64_t[]){ 3, 3, 4, 5 }, (const int64_t[]){ 9, 11 });
        GRID("3d_b1", GRID_UNIFORM, 5, (const int64_t[]){ 1, 3, 4, 5, 6 }, (const int64_t[]){ 3, 4, 5 });
        GRID("3d_b3", GRID_UNIFORM, 5, (const int64_t[]){ 3, 2, 3, 5, 4 }, (const int64_t[]){ 2, 3, 7 });
        GRID("3d_edges", GRID_EDGES, 5, (const int64_t[]){ 1, 2, 3, 4, 5 }, (const int64_t[]){ 5, 6, 7 });
#undef GRID
    }
    case_grid(c, "grid_sample_2d_identity_ac1", true, GRID_IDENTITY, 4, (const int64_t[]){ 3, 2, 6, 9 }, (const int64_t[]){ 6, 9 });
    case_grid(c, "grid_sample_3d_identity_ac1", true, GRID_IDENTITY, 5, (const int64_t[]){ 1, 3, 4, 5, 7 }, (const int64_t[]){ 4, 5, 7 });
    /* the warp network's sizes: f_s (1,32,16,64,64) and the 4-channel per-keypoint volumes */
    case_grid(c, "grid_sample_3d_warp_c32", false, GRID_UNIFORM, 5, (const int64_t[]){ 1, 32, 16, 64, 64 }, (const int64_t[]){ 16, 64, 64 });
    case_grid(c, "grid_sample_3d_warp_b3_c4", false, GRID_UNIFORM, 5, (const int64_t[]){ 3, 4, 16, 64, 64 }, (const int64_t[]){ 16, 64, 64 });

    case_negative(c);
}
