/*
 * ONNX-style ops: gather, where, pad, resize, prelu, conv_transpose. Each
 * case runs the op through its front end on the backend under test and
 * compares with a naive double-precision reference written from the ONNX
 * operator definitions.
 *
 * Tolerances (rel_l2, max_abs/max_ref):
 *   gather, where, pad, prelu, nearest resize: exact (data movement, or one
 *     float product that the reference rounds the same way).
 *   linear resize: 1e-6, 4e-6; cubic: 3e-6, 1e-5. Weights come from float32
 *     coordinates (as ONNX Runtime computes them; the reference uses the same
 *     float coordinate formula, then double weights and sums); the op forms
 *     cubic coefficients in float (a few ulps each, up to 16 of them per
 *     output), products of up to 3 weights and sums of up to 16 taps.
 *   conv_transpose: 1e-6, 4e-6: float sums of at most 2*3*3*3 = 54 products.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ditto/ditto_error.h"
#include "ops/ops.h"
#include "test_ops.h"

static double *ref_new(const TT *t)
{
    size_t n = (size_t)ditto_tensor_numel(&t->host);
    double *r = malloc((n ? n : 1) * sizeof *r);
    if (!r)
        abort();
    return r;
}

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

static bool op_ok(TestCtx *c, const char *name, int rc)
{
    if (rc < 0)
        return test_report(c, name, false, "op returned %d (%s)", rc, ditto_strerror(rc));
    return true;
}

/* ---- gather ---- */

static void case_gather(TestCtx *c, const char *name, int axis, int nd, const int64_t *xs, int ni, const int64_t *is, const int64_t *idx)
{
    if (!test_selected(c, name))
        return;
    int a = axis < 0 ? axis + nd : axis;
    int ny = nd - 1 + ni;
    int64_t ys[DITTO_MAX_DIMS];
    for (int i = 0; i < ny; i++)
        ys[i] = i < a ? xs[i] : i < a + ni ? is[i - a] : xs[i - ni + 1];
    TT *x = tt_new(c, DITTO_F32, nd, xs), *ix = tt_new(c, DITTO_I64, ni, is), *y = tt_new(c, DITTO_F32, ny, ys);
    tt_fill_uniform(x, -1, 1);
    int64_t m = ditto_tensor_numel(&ix->host);
    memcpy(ix->host.data, idx, (size_t)m * sizeof *idx);
    tt_to_dev(x);
    tt_to_dev(ix);
    if (op_ok(c, name, ditto_op_gather(c->be, axis, &x->dev, &ix->dev, &y->dev))) {
        tt_to_host(y);
        double *ref = ref_new(y);
        int64_t n = ditto_tensor_numel(&y->host), yi[DITTO_MAX_DIMS], xi[DITTO_MAX_DIMS], ii[DITTO_MAX_DIMS];
        for (int64_t e = 0; e < n; e++) {
            unravel(e, ny, ys, yi);
            for (int d = 0; d < ni; d++)
                ii[d] = yi[a + d];
            int64_t k = idx[ravel(ni, is, ii)];
            for (int d = 0; d < nd; d++)
                xi[d] = d < a ? yi[d] : d == a ? (k < 0 ? k + xs[a] : k) : yi[d + ni - 1];
            ref[e] = tt_f32(x)[ravel(nd, xs, xi)];
        }
        test_check(c, name, y, ref, 0, 0);
        free(ref);
    }
    tt_free(x);
    tt_free(ix);
    tt_free(y);
}

static void test_gather(TestCtx *c)
{
    case_gather(c, "gather/axis0_rows", 0, 2, (int64_t[]){ 7, 5 }, 1, (int64_t[]){ 4 }, (int64_t[]){ 6, 0, 3, 3 });
    case_gather(c, "gather/axis1_2d_idx_neg", 1, 3, (int64_t[]){ 2, 6, 3 }, 2, (int64_t[]){ 2, 3 }, (int64_t[]){ -1, 0, 2, 5, -6, 1 });
    case_gather(c, "gather/axis_last_scalar_idx", -1, 3, (int64_t[]){ 3, 2, 9 }, 0, NULL, (int64_t[]){ -2 });
    case_gather(c, "gather/axis2_of_4d", 2, 4, (int64_t[]){ 2, 3, 5, 4 }, 1, (int64_t[]){ 2 }, (int64_t[]){ 4, 1 });
    const char *name = "gather/int64_data";
    if (test_selected(c, name)) {
        TT *x = tt_new(c, DITTO_I64, 1, (int64_t[]){ 5 }), *ix = tt_new(c, DITTO_I64, 1, (int64_t[]){ 3 });
        TT *y = tt_new(c, DITTO_I64, 1, (int64_t[]){ 3 });
        const int64_t xv[5] = { 10, -20, 30, 1LL << 40, 50 }, iv[3] = { 3, -1, 1 }, want[3] = { 1LL << 40, 50, -20 };
        memcpy(x->host.data, xv, sizeof xv);
        memcpy(ix->host.data, iv, sizeof iv);
        tt_to_dev(x);
        tt_to_dev(ix);
        if (op_ok(c, name, ditto_op_gather(c->be, 0, &x->dev, &ix->dev, &y->dev))) {
            tt_to_host(y);
            test_report(c, name, !memcmp(y->host.data, want, sizeof want) && tt_guards_ok(y), "int64 values moved exactly");
        }
        tt_free(x);
        tt_free(ix);
        tt_free(y);
    }
    name = "gather/out_of_range";
    if (test_selected(c, name)) {
        TT *x = tt_new(c, DITTO_F32, 2, (int64_t[]){ 4, 2 }), *ix = tt_new(c, DITTO_I64, 1, (int64_t[]){ 2 });
        TT *y = tt_new(c, DITTO_F32, 2, (int64_t[]){ 2, 2 });
        tt_fill_uniform(x, -1, 1);
        ((int64_t *)ix->host.data)[0] = 1;
        ((int64_t *)ix->host.data)[1] = 4;
        tt_to_dev(x);
        tt_to_dev(ix);
        DittoLogger keep = c->be->log;
        c->be->log.cb = NULL;   /* the error line is expected */
        int rc = ditto_op_gather(c->be, 0, &x->dev, &ix->dev, &y->dev);
        c->be->log = keep;
        test_report(c, name, rc == DITTO_ERR_RANGE, "index 4 of 4 rows: rc %d, expected DITTO_ERR_RANGE", rc);
        tt_free(x);
        tt_free(ix);
        tt_free(y);
    }
}

/* ---- where ---- */

static void case_where(TestCtx *c, const char *name, int ny, const int64_t *ys, int nc, const int64_t *cs, int na, const int64_t *as,
                       int nb, const int64_t *bs)
{
    if (!test_selected(c, name))
        return;
    TT *cond = tt_new(c, DITTO_BOOL, nc, cs), *a = tt_new(c, DITTO_F32, na, as), *b = tt_new(c, DITTO_F32, nb, bs);
    TT *y = tt_new(c, DITTO_F32, ny, ys);
    tt_fill_uniform(a, -1, 1);
    tt_fill_uniform(b, 2, 3);
    int64_t ncond = ditto_tensor_numel(&cond->host);
    for (int64_t i = 0; i < ncond; i++)
        ((uint8_t *)cond->host.data)[i] = (uint8_t)((i * 7 + 3) % 5 < 2);
    tt_to_dev(cond);
    tt_to_dev(a);
    tt_to_dev(b);
    if (op_ok(c, name, ditto_op_where(c->be, &cond->dev, &a->dev, &b->dev, &y->dev))) {
        tt_to_host(y);
        double *ref = ref_new(y);
        int64_t n = ditto_tensor_numel(&y->host), yi[DITTO_MAX_DIMS], ti[DITTO_MAX_DIMS];
        for (int64_t e = 0; e < n; e++) {
            unravel(e, ny, ys, yi);
            const TT *t3[3] = { cond, a, b };
            int64_t off[3];
            for (int k = 0; k < 3; k++) {
                const DittoTensor *h = &t3[k]->host;
                for (int d = 0; d < h->ndim; d++) {
                    int64_t v = yi[ny - h->ndim + d];
                    ti[d] = h->shape[d] == 1 ? 0 : v;
                }
                off[k] = ravel(h->ndim, h->shape, ti);
            }
            ref[e] = ((uint8_t *)cond->host.data)[off[0]] ? tt_f32(a)[off[1]] : tt_f32(b)[off[2]];
        }
        test_check(c, name, y, ref, 0, 0);
        free(ref);
    }
    tt_free(cond);
    tt_free(a);
    tt_free(b);
    tt_free(y);
}

static void test_where(TestCtx *c)
{
    case_where(c, "where/same_shape", 2, (int64_t[]){ 5, 7 }, 2, (int64_t[]){ 5, 7 }, 2, (int64_t[]){ 5, 7 }, 2, (int64_t[]){ 5, 7 });
    /* attention-mask pattern: cond (1,1,T,T), scores (B,H,T,T), fill value scalar */
    case_where(c, "where/mask_bcast_scalar", 4, (int64_t[]){ 2, 3, 9, 9 }, 4, (int64_t[]){ 1, 1, 9, 9 }, 4, (int64_t[]){ 2, 3, 9, 9 },
               0, NULL);
    case_where(c, "where/all_bcast", 3, (int64_t[]){ 4, 3, 6 }, 2, (int64_t[]){ 3, 1 }, 1, (int64_t[]){ 6 }, 3, (int64_t[]){ 4, 1, 1 });
}

/* ---- pad ---- */

static int64_t ref_pad_map(DittoPadMode m, int64_t o, int64_t b, int64_t n)
{
    int64_t i = o - b;
    if (i >= 0 && i < n)
        return i;
    if (m == DITTO_PAD_CONSTANT)
        return -1;
    if (m == DITTO_PAD_EDGE)
        return i < 0 ? 0 : n - 1;
    if (m == DITTO_PAD_WRAP) {
        while (i < 0)
            i += n;
        return i % n;
    }
    /* reflect: walk back and forth between 0 and n - 1 */
    while (i < 0 || i >= n) {
        if (n == 1)
            return 0;
        i = i < 0 ? -i : 2 * (n - 1) - i;
    }
    return i;
}

static void case_pad(TestCtx *c, const char *name, DittoPadMode mode, int nd, const int64_t *xs, const int64_t *b, const int64_t *e)
{
    if (!test_selected(c, name))
        return;
    DittoPadParams p;
    memset(&p, 0, sizeof p);
    p.mode = mode;
    p.value = 0.75f;
    int64_t ys[DITTO_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        p.begin[i] = b[i];
        p.end[i] = e[i];
        ys[i] = xs[i] + b[i] + e[i];
    }
    TT *x = tt_new(c, DITTO_F32, nd, xs), *y = tt_new(c, DITTO_F32, nd, ys);
    tt_fill_uniform(x, -1, 1);
    tt_to_dev(x);
    if (op_ok(c, name, ditto_op_pad(c->be, &p, &x->dev, &y->dev))) {
        tt_to_host(y);
        double *ref = ref_new(y);
        int64_t n = ditto_tensor_numel(&y->host), yi[DITTO_MAX_DIMS], xi[DITTO_MAX_DIMS];
        for (int64_t k = 0; k < n; k++) {
            unravel(k, nd, ys, yi);
            bool out = false;
            for (int d = 0; d < nd; d++) {
                xi[d] = ref_pad_map(mode, yi[d], b[d], xs[d]);
                out = out || xi[d] < 0;
            }
            ref[k] = out ? 0.75 : tt_f32(x)[ravel(nd, xs, xi)];
        }
        test_check(c, name, y, ref, 0, 0);
        free(ref);
    }
    tt_free(x);
    tt_free(y);
}

static void test_pad(TestCtx *c)
{
    /* BlazeFace's shortcut: zero channels appended */
    case_pad(c, "pad/constant_channels", DITTO_PAD_CONSTANT, 4, (int64_t[]){ 1, 5, 4, 6 }, (int64_t[]){ 0, 0, 0, 0 }, (int64_t[]){ 0, 3, 0, 0 });
    case_pad(c, "pad/constant_spatial_asym", DITTO_PAD_CONSTANT, 4, (int64_t[]){ 2, 3, 5, 4 }, (int64_t[]){ 0, 0, 1, 2 }, (int64_t[]){ 0, 0, 2, 0 });
    case_pad(c, "pad/reflect_2d", DITTO_PAD_REFLECT, 4, (int64_t[]){ 1, 2, 5, 6 }, (int64_t[]){ 0, 0, 2, 3 }, (int64_t[]){ 0, 0, 4, 1 });
    case_pad(c, "pad/reflect_wider_than_input", DITTO_PAD_REFLECT, 2, (int64_t[]){ 3, 3 }, (int64_t[]){ 5, 0 }, (int64_t[]){ 6, 2 });
    case_pad(c, "pad/edge_all_axes", DITTO_PAD_EDGE, 3, (int64_t[]){ 2, 3, 4 }, (int64_t[]){ 1, 2, 0 }, (int64_t[]){ 2, 0, 3 });
    case_pad(c, "pad/wrap", DITTO_PAD_WRAP, 3, (int64_t[]){ 2, 4, 3 }, (int64_t[]){ 0, 5, 1 }, (int64_t[]){ 1, 2, 4 });
    case_pad(c, "pad/negative_crop", DITTO_PAD_CONSTANT, 3, (int64_t[]){ 3, 6, 7 }, (int64_t[]){ -1, 2, -2 }, (int64_t[]){ 0, -3, 1 });
    case_pad(c, "pad/rank1", DITTO_PAD_EDGE, 1, (int64_t[]){ 5 }, (int64_t[]){ 3 }, (int64_t[]){ 2 });
    case_pad(c, "pad/rank5_reflect", DITTO_PAD_REFLECT, 5, (int64_t[]){ 1, 2, 3, 4, 5 }, (int64_t[]){ 0, 1, 2, 0, 1 }, (int64_t[]){ 0, 0, 1, 3, 2 });
    const char *name = "pad/int64_constant";
    if (test_selected(c, name)) {
        TT *x = tt_new(c, DITTO_I64, 1, (int64_t[]){ 3 }), *y = tt_new(c, DITTO_I64, 1, (int64_t[]){ 6 });
        const int64_t xv[3] = { 7, 1LL << 50, -9 }, want[6] = { 4, 7, 1LL << 50, -9, 4, 4 };
        memcpy(x->host.data, xv, sizeof xv);
        tt_to_dev(x);
        DittoPadParams p = { .mode = DITTO_PAD_CONSTANT, .begin = { 1 }, .end = { 2 }, .value = 4.0f };
        if (op_ok(c, name, ditto_op_pad(c->be, &p, &x->dev, &y->dev))) {
            tt_to_host(y);
            test_report(c, name, !memcmp(y->host.data, want, sizeof want) && tt_guards_ok(y), "int64 values and fill exact");
        }
        tt_free(x);
        tt_free(y);
    }
}

/* ---- resize ---- */

/* The ONNX coordinate transform, in float32 as ONNX Runtime evaluates it. */
static float ref_coord(const DittoResizeParams *p, int64_t o, int64_t in, int64_t out, float s, float r0, float r1)
{
    float x = (float)o, fi = (float)in, fo = (float)out;
    switch (p->coord) {
    case DITTO_RESIZE_HALF_PIXEL: return (x + 0.5f) / s - 0.5f;
    case DITTO_RESIZE_HALF_PIXEL_SYMMETRIC: return fi / 2.0f * (1.0f - fo / (s * fi)) + (x + 0.5f) / s - 0.5f;
    case DITTO_RESIZE_PYTORCH_HALF_PIXEL: return out > 1 ? (x + 0.5f) / s - 0.5f : 0.0f;
    case DITTO_RESIZE_ALIGN_CORNERS: return out == 1 ? 0.0f : x * (fi - 1.0f) / (fo - 1.0f);
    case DITTO_RESIZE_ASYMMETRIC: return x / s;
    case DITTO_RESIZE_TF_HALF_PIXEL_FOR_NN: return (x + 0.5f) / s;
    case DITTO_RESIZE_TF_CROP_AND_RESIZE:
        return out > 1 ? r0 * (fi - 1.0f) + x * (r1 - r0) * (fi - 1.0f) / (fo - 1.0f) : 0.5f * (r0 + r1) * (fi - 1.0f);
    }
    return 0;
}

/* 1-D taps of output index o (ONNX reference: neighbours of an edge-padded axis). Returns the tap count, 0 = outside. */
static int ref_taps(const DittoResizeParams *p, int64_t o, int64_t in, int64_t out, float s, float r0, float r1, int64_t *idx, double *w)
{
    float xf = ref_coord(p, o, in, out, s, r0, r1);
    double x = xf;
    if (p->coord == DITTO_RESIZE_TF_CROP_AND_RESIZE && (x < 0 || x > (double)(in - 1)))
        return 0;
    double f = floor(x), ratio = x - f;
    int64_t base = (int64_t)f;
    if (p->mode == DITTO_RESIZE_NEAREST) {
        bool up;
        switch (p->nearest) {
        case DITTO_NEAREST_ROUND_PREFER_FLOOR: up = ratio > 0.5; break;
        case DITTO_NEAREST_ROUND_PREFER_CEIL: up = ratio >= 0.5; break;
        case DITTO_NEAREST_FLOOR: up = false; break;
        case DITTO_NEAREST_CEIL: up = ratio > 0; break;
        default: up = s < 1.0f && ratio > 0; break;   /* SIMPLE */
        }
        int64_t i = base + (up ? 1 : 0);
        idx[0] = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
        w[0] = 1;
        return 1;
    }
    if (p->mode == DITTO_RESIZE_LINEAR) {
        for (int k = 0; k < 2; k++) {
            int64_t i = base + k;
            idx[k] = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
        }
        w[0] = 1 - ratio;
        w[1] = ratio;
        return 2;
    }
    double A = p->cubic_a, t[4] = { ratio + 1, ratio, 1 - ratio, 2 - ratio }, sum = 0;
    for (int k = 0; k < 4; k++) {
        double a = fabs(t[k]);
        w[k] = a <= 1 ? ((A + 2) * a - (A + 3)) * a * a + 1 : a < 2 ? ((A * a - 5 * A) * a + 8 * A) * a - 4 * A : 0;
        int64_t i = base - 1 + k;
        if (p->exclude_outside && (i < 0 || i > in - 1))
            w[k] = 0;
        sum += w[k];
        idx[k] = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
    }
    if (p->exclude_outside)
        for (int k = 0; k < 4; k++)
            w[k] /= sum;
    return 4;
}

typedef struct RefRz {
    const DittoResizeParams *p;
    const float *x;
    int nd;
    const int64_t *xs, *ys;
    float s[DITTO_MAX_DIMS];
    const int64_t *o;
} RefRz;

/* Separable interpolation, axis by axis from the first (as the ONNX reference's recursion). */
static double ref_interp(const RefRz *z, int axis, int64_t off, bool *outside)
{
    if (axis == z->nd)
        return z->x[off];
    int64_t idx[4];
    double w[4], acc = 0;
    int n = ref_taps(z->p, z->o[axis], z->xs[axis], z->ys[axis], z->s[axis], z->p->roi_start[axis], z->p->roi_end[axis], idx, w);
    if (n == 0) {
        *outside = true;
        return 0;
    }
    int64_t stride = 1;
    for (int d = axis + 1; d < z->nd; d++)
        stride *= z->xs[d];
    for (int k = 0; k < n; k++)
        if (w[k] != 0)
            acc += w[k] * ref_interp(z, axis + 1, off + idx[k] * stride, outside);
    return acc;
}

static void case_resize(TestCtx *c, const char *name, const DittoResizeParams *p, int nd, const int64_t *xs, const int64_t *ys)
{
    if (!test_selected(c, name))
        return;
    TT *x = tt_new(c, DITTO_F32, nd, xs), *y = tt_new(c, DITTO_F32, nd, ys);
    tt_fill_uniform(x, -1, 1);
    tt_to_dev(x);
    if (op_ok(c, name, ditto_op_resize(c->be, p, &x->dev, &y->dev))) {
        tt_to_host(y);
        double *ref = ref_new(y);
        RefRz z = { .p = p, .x = tt_f32(x), .nd = nd, .xs = xs, .ys = ys };
        for (int d = 0; d < nd; d++)
            z.s[d] = p->scale[d] > 0 ? p->scale[d] : (float)ys[d] / (float)xs[d];
        int64_t n = ditto_tensor_numel(&y->host), yi[DITTO_MAX_DIMS];
        z.o = yi;
        for (int64_t k = 0; k < n; k++) {
            unravel(k, nd, ys, yi);
            bool outside = false;
            double v = ref_interp(&z, 0, 0, &outside);
            ref[k] = outside ? p->extrapolation_value : v;
        }
        if (p->mode == DITTO_RESIZE_NEAREST)
            test_check(c, name, y, ref, 0, 0);
        else if (p->mode == DITTO_RESIZE_LINEAR)
            test_check(c, name, y, ref, 1e-6, 4e-6);
        else
            test_check(c, name, y, ref, 3e-6, 1e-5);
        free(ref);
    }
    tt_free(x);
    tt_free(y);
}

static DittoResizeParams rz(DittoResizeMode mode, DittoResizeCoord coord, DittoResizeNearest nearest)
{
    DittoResizeParams p;
    ditto_resize_params_default(&p);
    p.mode = mode;
    p.coord = coord;
    p.nearest = nearest;
    return p;
}

static void test_resize(TestCtx *c)
{
    DittoResizeParams p;
    /* SCRFD: nearest / asymmetric / floor with sizes */
    p = rz(DITTO_RESIZE_NEAREST, DITTO_RESIZE_ASYMMETRIC, DITTO_NEAREST_FLOOR);
    case_resize(c, "resize/nearest_asym_floor_2x", &p, 4, (int64_t[]){ 1, 3, 5, 7 }, (int64_t[]){ 1, 3, 10, 14 });
    p = rz(DITTO_RESIZE_NEAREST, DITTO_RESIZE_HALF_PIXEL, DITTO_NEAREST_ROUND_PREFER_FLOOR);
    case_resize(c, "resize/nearest_half_pixel_down", &p, 4, (int64_t[]){ 1, 2, 9, 11 }, (int64_t[]){ 1, 2, 4, 5 });
    /* 4 -> 8: half_pixel coordinates land on .25/.75, 3 -> 6 on exact halves for round_prefer_* */
    case_resize(c, "resize/nearest_prefer_floor_halves", &p, 4, (int64_t[]){ 1, 1, 3, 4 }, (int64_t[]){ 1, 1, 6, 8 });
    p = rz(DITTO_RESIZE_NEAREST, DITTO_RESIZE_ASYMMETRIC, DITTO_NEAREST_ROUND_PREFER_CEIL);
    case_resize(c, "resize/nearest_prefer_ceil_halves", &p, 4, (int64_t[]){ 1, 1, 3, 4 }, (int64_t[]){ 1, 1, 6, 8 });
    p = rz(DITTO_RESIZE_NEAREST, DITTO_RESIZE_ALIGN_CORNERS, DITTO_NEAREST_ROUND_PREFER_CEIL);
    case_resize(c, "resize/nearest_align_corners", &p, 4, (int64_t[]){ 2, 3, 4, 6 }, (int64_t[]){ 2, 3, 7, 5 });
    p = rz(DITTO_RESIZE_NEAREST, DITTO_RESIZE_TF_HALF_PIXEL_FOR_NN, DITTO_NEAREST_CEIL);
    case_resize(c, "resize/nearest_tf_half_pixel_ceil", &p, 4, (int64_t[]){ 1, 1, 5, 5 }, (int64_t[]){ 1, 1, 8, 3 });
    p = rz(DITTO_RESIZE_NEAREST, DITTO_RESIZE_PYTORCH_HALF_PIXEL, DITTO_NEAREST_FLOOR);
    case_resize(c, "resize/nearest_pytorch_half_pixel_out1", &p, 4, (int64_t[]){ 1, 2, 6, 4 }, (int64_t[]){ 1, 2, 1, 9 });
    p = rz(DITTO_RESIZE_NEAREST, DITTO_RESIZE_ASYMMETRIC, DITTO_NEAREST_SIMPLE);
    case_resize(c, "resize/nearest_legacy_up", &p, 4, (int64_t[]){ 1, 2, 3, 3 }, (int64_t[]){ 1, 2, 6, 9 });
    case_resize(c, "resize/nearest_legacy_down", &p, 4, (int64_t[]){ 1, 1, 8, 9 }, (int64_t[]){ 1, 1, 4, 3 });
    /* BlazeFace full range: linear / half_pixel with sizes */
    p = rz(DITTO_RESIZE_LINEAR, DITTO_RESIZE_HALF_PIXEL, DITTO_NEAREST_ROUND_PREFER_FLOOR);
    case_resize(c, "resize/linear_half_pixel_up", &p, 4, (int64_t[]){ 1, 3, 6, 5 }, (int64_t[]){ 1, 3, 12, 9 });
    case_resize(c, "resize/linear_half_pixel_channels_too", &p, 4, (int64_t[]){ 2, 4, 3, 3 }, (int64_t[]){ 2, 6, 3, 5 });
    p = rz(DITTO_RESIZE_LINEAR, DITTO_RESIZE_ALIGN_CORNERS, DITTO_NEAREST_ROUND_PREFER_FLOOR);
    case_resize(c, "resize/linear_align_corners", &p, 4, (int64_t[]){ 1, 2, 5, 7 }, (int64_t[]){ 1, 2, 9, 3 });
    p = rz(DITTO_RESIZE_LINEAR, DITTO_RESIZE_ASYMMETRIC, DITTO_NEAREST_ROUND_PREFER_FLOOR);
    p.scale[0] = p.scale[1] = 1.0f;
    p.scale[2] = p.scale[3] = 1.5f;
    case_resize(c, "resize/linear_asym_scales", &p, 4, (int64_t[]){ 1, 2, 4, 6 }, (int64_t[]){ 1, 2, 6, 9 });
    p = rz(DITTO_RESIZE_LINEAR, DITTO_RESIZE_PYTORCH_HALF_PIXEL, DITTO_NEAREST_ROUND_PREFER_FLOOR);
    case_resize(c, "resize/linear_1d_pytorch_half_pixel", &p, 3, (int64_t[]){ 2, 3, 10 }, (int64_t[]){ 2, 3, 25 });
    p = rz(DITTO_RESIZE_LINEAR, DITTO_RESIZE_HALF_PIXEL_SYMMETRIC, DITTO_NEAREST_ROUND_PREFER_FLOOR);
    p.scale[0] = p.scale[1] = 1.0f;
    p.scale[2] = p.scale[3] = 0.65f;
    case_resize(c, "resize/linear_half_pixel_symmetric", &p, 4, (int64_t[]){ 1, 1, 10, 10 }, (int64_t[]){ 1, 1, 6, 6 });
    p = rz(DITTO_RESIZE_LINEAR, DITTO_RESIZE_HALF_PIXEL, DITTO_NEAREST_ROUND_PREFER_FLOOR);
    case_resize(c, "resize/trilinear_3d", &p, 5, (int64_t[]){ 1, 2, 3, 4, 5 }, (int64_t[]){ 1, 2, 5, 6, 4 });
    p = rz(DITTO_RESIZE_CUBIC, DITTO_RESIZE_HALF_PIXEL, DITTO_NEAREST_ROUND_PREFER_FLOOR);
    case_resize(c, "resize/cubic_half_pixel", &p, 4, (int64_t[]){ 1, 2, 6, 6 }, (int64_t[]){ 1, 2, 11, 9 });
    p = rz(DITTO_RESIZE_CUBIC, DITTO_RESIZE_ASYMMETRIC, DITTO_NEAREST_ROUND_PREFER_FLOOR);
    p.cubic_a = -0.5f;
    p.exclude_outside = true;
    case_resize(c, "resize/cubic_exclude_outside", &p, 4, (int64_t[]){ 1, 1, 5, 7 }, (int64_t[]){ 1, 1, 9, 4 });
    p = rz(DITTO_RESIZE_LINEAR, DITTO_RESIZE_TF_CROP_AND_RESIZE, DITTO_NEAREST_ROUND_PREFER_FLOOR);
    p.roi_start[2] = 0.2f;
    p.roi_start[3] = 0.1f;
    p.roi_end[2] = 0.9f;
    p.roi_end[3] = 1.2f;
    p.extrapolation_value = 7.0f;
    case_resize(c, "resize/tf_crop_and_resize", &p, 4, (int64_t[]){ 1, 1, 8, 8 }, (int64_t[]){ 1, 1, 5, 6 });
}

/* ---- prelu ---- */

static void case_prelu(TestCtx *c, const char *name, int nd, const int64_t *xs, int ns, const int64_t *ss, bool inplace)
{
    if (!test_selected(c, name))
        return;
    TT *x = tt_new(c, DITTO_F32, nd, xs), *s = tt_new(c, DITTO_F32, ns, ss), *y = inplace ? x : tt_new(c, DITTO_F32, nd, xs);
    tt_fill_uniform(x, -1, 1);
    tt_fill_uniform(s, -0.5f, 0.5f);
    int64_t n = ditto_tensor_numel(&x->host), xi[DITTO_MAX_DIMS], si[DITTO_MAX_DIMS];
    double *ref = ref_new(x);
    for (int64_t k = 0; k < n; k++) {
        unravel(k, nd, xs, xi);
        for (int d = 0; d < ns; d++)
            si[d] = ss[d] == 1 ? 0 : xi[nd - ns + d];
        float v = tt_f32(x)[k], sl = tt_f32(s)[ravel(ns, ss, si)];
        ref[k] = v >= 0 ? v : (double)(v * sl);   /* one float product, as the op */
    }
    tt_to_dev(x);
    tt_to_dev(s);
    if (op_ok(c, name, ditto_op_prelu(c->be, &x->dev, &s->dev, &y->dev))) {
        tt_to_host(y);
        test_check(c, name, y, ref, 0, 0);
    }
    free(ref);
    tt_free(x);
    tt_free(s);
    if (!inplace)
        tt_free(y);
}

static void test_prelu(TestCtx *c)
{
    case_prelu(c, "prelu/per_channel", 4, (int64_t[]){ 2, 5, 7, 6 }, 3, (int64_t[]){ 5, 1, 1 }, false);
    case_prelu(c, "prelu/scalar_slope", 3, (int64_t[]){ 3, 4, 5 }, 1, (int64_t[]){ 1 }, false);
    case_prelu(c, "prelu/full_slope_inplace", 2, (int64_t[]){ 6, 9 }, 2, (int64_t[]){ 6, 9 }, true);
    case_prelu(c, "prelu/last_axis_slope", 4, (int64_t[]){ 1, 2, 3, 8 }, 1, (int64_t[]){ 8 }, false);
}

/* ---- conv_transpose ---- */

static void case_convt(TestCtx *c, const char *name, const DittoConvTransposeParams *p, int nd, const int64_t *xs, const int64_t *ws,
                       bool bias)
{
    if (!test_selected(c, name))
        return;
    TT *x = tt_new(c, DITTO_F32, nd, xs), *w = tt_new(c, DITTO_F32, nd, ws);
    int64_t ys[DITTO_MAX_DIMS];
    if (ditto_conv_transpose_out_shape(p, &x->host, &w->host, ys) < 0) {
        test_report(c, name, false, "ditto_conv_transpose_out_shape rejected the case");
        tt_free(x);
        tt_free(w);
        return;
    }
    int g = p->conv.groups ? p->conv.groups : 1;
    TT *b = bias ? tt_new(c, DITTO_F32, 1, &ys[1]) : NULL, *y = tt_new(c, DITTO_F32, nd, ys);
    tt_fill_uniform(x, -1, 1);
    tt_fill_uniform(w, -1, 1);
    if (b)
        tt_fill_uniform(b, -1, 1);
    tt_to_dev(x);
    tt_to_dev(w);
    if (b)
        tt_to_dev(b);
    if (op_ok(c, name, ditto_op_conv_transpose(c->be, p, &x->dev, &w->dev, b ? &b->dev : NULL, &y->dev))) {
        tt_to_host(y);
        double *ref = ref_new(y);
        int64_t ny = ditto_tensor_numel(&y->host), nx = ditto_tensor_numel(&x->host), nk = 1;
        int ns = nd - 2;
        for (int d = 2; d < nd; d++)
            nk *= ws[d];
        for (int64_t k = 0; k < ny; k++) {
            int64_t yi[DITTO_MAX_DIMS];
            unravel(k, nd, ys, yi);
            ref[k] = b ? tt_f32(b)[yi[1]] : 0;
        }
        int64_t cout_g = ws[1], cin_g = xs[1] / g;
        for (int64_t e = 0; e < nx; e++) {
            int64_t xi[DITTO_MAX_DIMS];
            unravel(e, nd, xs, xi);
            int64_t ic = xi[1], grp = ic / cin_g;
            for (int64_t ocg = 0; ocg < cout_g; ocg++)
                for (int64_t t = 0; t < nk; t++) {
                    int64_t ki[3], yi[DITTO_MAX_DIMS] = { xi[0], grp * cout_g + ocg };
                    unravel(t, ns, ws + 2, ki);
                    bool in = true;
                    for (int d = 0; d < ns; d++) {
                        int s = p->conv.stride[d] ? p->conv.stride[d] : 1, dl = p->conv.dilation[d] ? p->conv.dilation[d] : 1;
                        yi[2 + d] = xi[2 + d] * s - p->conv.pad_begin[d] + ki[d] * dl;
                        in = in && yi[2 + d] >= 0 && yi[2 + d] < ys[2 + d];
                    }
                    if (!in)
                        continue;
                    int64_t wi[DITTO_MAX_DIMS] = { ic, ocg, ki[0], ki[1], ki[2] };
                    ref[ravel(nd, ys, yi)] += (double)tt_f32(x)[e] * tt_f32(w)[ravel(nd, ws, wi)];
                }
        }
        test_check(c, name, y, ref, 1e-6, 4e-6);
        free(ref);
    }
    tt_free(x);
    tt_free(w);
    tt_free(b);
    tt_free(y);
}

static void test_conv_transpose(TestCtx *c)
{
    DittoConvTransposeParams p;
    memset(&p, 0, sizeof p);
    p.conv.stride[0] = 2;
    case_convt(c, "conv_transpose/1d_s2", &p, 3, (int64_t[]){ 2, 3, 7 }, (int64_t[]){ 3, 4, 4 }, true);
    memset(&p, 0, sizeof p);
    p.conv.stride[0] = p.conv.stride[1] = 2;
    p.conv.pad_begin[0] = p.conv.pad_begin[1] = 1;
    p.conv.pad_end[0] = p.conv.pad_end[1] = 1;
    p.output_padding[0] = p.output_padding[1] = 1;
    case_convt(c, "conv_transpose/2d_s2_pad_outpad", &p, 4, (int64_t[]){ 1, 4, 5, 6 }, (int64_t[]){ 4, 3, 3, 3 }, true);
    memset(&p, 0, sizeof p);
    p.conv.groups = 2;
    p.conv.dilation[0] = 2;
    p.conv.dilation[1] = 1;
    p.conv.stride[0] = 1;
    p.conv.stride[1] = 3;
    p.conv.pad_begin[1] = 2;
    case_convt(c, "conv_transpose/2d_groups_dilation", &p, 4, (int64_t[]){ 2, 6, 4, 5 }, (int64_t[]){ 6, 2, 3, 2 }, false);
    memset(&p, 0, sizeof p);
    p.conv.stride[0] = p.conv.stride[1] = p.conv.stride[2] = 2;
    case_convt(c, "conv_transpose/3d", &p, 5, (int64_t[]){ 1, 2, 3, 3, 4 }, (int64_t[]){ 2, 3, 2, 3, 3 }, true);
}

void test_ops_onnx(TestCtx *c)
{
    test_gather(c);
    test_where(c);
    test_pad(c);
    test_resize(c);
    test_prelu(c);
    test_conv_transpose(c);
}
