/*
 * Image family (OpenCV semantics): warp_affine, resize_area, resize_bilinear,
 * uint8 and float32, 1 and 3 channels, (H,W,C) and (N,H,W,C).
 *
 * References are written here in double precision:
 *   warp_affine: a model of OpenCV's algorithm (double inverse, 1/32-pixel
 *     fixed-point source positions, bilinear weights in double). uint8: within
 *     1 level of the model rounded half up (the model is in fact exact: the
 *     weights are multiples of 2^-10); identity and integer shifts exact.
 *     float: rel_l2 1e-6, max_abs/max_ref 1e-6 (four products and three adds
 *     in fp32; the weights are exact multiples of 1/1024).
 *   resize_area: exact area averaging over the covered cells. Integer-factor
 *     uint8 exact ((a+b+c+d+2)>>2 at 2x, nearest-even box mean otherwise);
 *     non-integer uint8 within 1 level (OpenCV rounds a float sum); float
 *     rel_l2 1e-6, max 2e-6 (float weights and sums of <= 9 terms).
 *     Upscaling (OpenCV's bilinear emulation) at integer factors replicates
 *     pixels: exact.
 *   resize_bilinear: half-pixel centres, edge clamp, double weights. uint8:
 *     a model of OpenCV's fixed-point path (11-bit weights, its SIMD vertical
 *     rounding), which is biased ~0.12 level low: checked within 1 level;
 *     float rel_l2 1e-6, max 2e-6 (the source position is rounded to float,
 *     as OpenCV does: about 2^-24 * in pixels at these sizes).
 *   Wherever uint8 may be 1 level off, the mean signed difference must also
 *   stay within 0.05 levels (no systematic rounding bias); see check_u8.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ditto/ditto_error.h"
#include "ops/ops.h"
#include "op_util.h"
#include "test_ops.h"

typedef struct Img {
    int64_t n, h, w, c;
} Img;

static Img img_of(const TT *t)
{
    int o = t->host.ndim - 3;
    Img d = { o ? t->host.shape[0] : 1, t->host.shape[o], t->host.shape[o + 1], t->host.shape[o + 2] };
    return d;
}

static TT *img_new(TestCtx *c, DittoDType dt, bool batched, int64_t n, int64_t h, int64_t w, int64_t ch)
{
    if (batched)
        return tt_new(c, dt, 4, (const int64_t[]){ n, h, w, ch });
    return tt_new(c, dt, 3, (const int64_t[]){ h, w, ch });
}

static double px(const TT *t, int64_t i)
{
    return t->host.dtype == DITTO_U8 ? (double)((const uint8_t *)t->host.data)[i] : (double)((const float *)t->host.data)[i];
}

/*
 * uint8 output against integer reference levels: max |diff| <= tol. Where a
 * level of slack is allowed, the mean signed difference must stay within
 * 0.05 levels: fixed-point weights move values both ways, a wrong rounding
 * offset (truncation, half a level too much) shifts them all one way.
 */
static bool check_u8(TestCtx *c, const char *name, TT *y, const double *ref, int tol)
{
    if (tt_to_host(y) < 0)
        return test_report(c, name, false, "download failed");
    int64_t n = ditto_tensor_numel(&y->host), differ = 0;
    double worst = 0, bias = 0;
    const uint8_t *o = y->host.data;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)o[i] - ref[i];
        differ += d != 0;
        bias += d;
        worst = fabs(d) > worst ? fabs(d) : worst;
    }
    bias /= (double)(n ? n : 1);
    bool guards = tt_guards_ok(y);
    return test_report(c, name, worst <= tol && fabs(bias) <= 0.05 && guards,
                       "max level diff %g (tol %d), %lld of %lld differ, mean diff %.3f (tol 0.05)%s", worst, tol,
                       (long long)differ, (long long)n, bias, guards ? "" : " GUARDS-OVERWRITTEN");
}

static bool check_out(TestCtx *c, const char *name, TT *y, const double *ref, int tol_u8, double tol, double tol_max)
{
    if (y->host.dtype == DITTO_U8)
        return check_u8(c, name, y, ref, tol_u8);
    return test_check(c, name, y, ref, tol, tol_max);
}

static double round_half_up(double v)
{
    return floor(v + 0.5);
}

static double clamp255(double v)
{
    return v < 0 ? 0 : v > 255 ? 255 : v;
}

/* ---- warp_affine ---- */

/*
 * OpenCV model: invert M in double; per destination pixel, the source
 * position in 1/1024 units (row part and column part rounded separately to
 * nearest-even), +16, floored to 1/32 units; integer part and 1/32 fraction.
 */
static void ref_warp(const double *m, double border, const TT *x, const TT *y, double *ref)
{
    Img in = img_of(x), out = img_of(y);
    bool u8 = x->host.dtype == DITTO_U8;
    double det = m[0] * m[4] - m[1] * m[3], inv = 1.0 / det;
    double a11 = m[4] * inv, a12 = -m[1] * inv, a21 = -m[3] * inv, a22 = m[0] * inv;
    double b1 = -a11 * m[2] - a12 * m[5], b2 = -a21 * m[2] - a22 * m[5];
    double cval = u8 ? clamp255(nearbyint(border)) : (double)(float)border;
    for (int64_t n = 0; n < out.n; n++)
    for (int64_t dy = 0; dy < out.h; dy++)
    for (int64_t dx = 0; dx < out.w; dx++) {
        double X = floor((nearbyint((a12 * (double)dy + b1) * 1024) + nearbyint(a11 * (double)dx * 1024) + 16) / 32);
        double Y = floor((nearbyint((a22 * (double)dy + b2) * 1024) + nearbyint(a21 * (double)dx * 1024) + 16) / 32);
        double sx = floor(X / 32), sy = floor(Y / 32);
        double fx = (X - 32 * sx) / 32, fy = (Y - 32 * sy) / 32;
        bool all_out = sx >= (double)in.w || sx + 1 < 0 || sy >= (double)in.h || sy + 1 < 0;
        for (int64_t ch = 0; ch < out.c; ch++) {
            double v = 0;
            if (all_out) {
                v = cval;
            } else {
                for (int k = 0; k < 4; k++) {
                    double tx = sx + (k & 1), ty = sy + (k >> 1);
                    double w = ((k & 1) ? fx : 1 - fx) * ((k >> 1) ? fy : 1 - fy);
                    double p = cval;
                    if (tx >= 0 && tx < (double)in.w && ty >= 0 && ty < (double)in.h)
                        p = px(x, ((n * in.h + (int64_t)ty) * in.w + (int64_t)tx) * in.c + ch);
                    v += w * p;
                }
            }
            ref[((n * out.h + dy) * out.w + dx) * out.c + ch] = u8 ? clamp255(round_half_up(v)) : v;
        }
    }
}

/* M = s R(theta) + t, mapping source to destination (the crop matrix form). */
static void similarity(double s, double theta, double tx, double ty, double *m)
{
    m[0] = s * cos(theta);
    m[1] = s * sin(theta);
    m[2] = tx;
    m[3] = -s * sin(theta);
    m[4] = s * cos(theta);
    m[5] = ty;
}

typedef enum WarpRef { WARP_MODEL, WARP_SAME, WARP_SHIFT } WarpRef;

static void case_warp(TestCtx *c, const char *name, DittoDType dt, bool batched, Img in, Img out, const double *m,
                      float border, WarpRef kind, int tol_u8)
{
    if (!test_selected(c, name))
        return;
    TT *x = img_new(c, dt, batched, in.n, in.h, in.w, in.c), *y = img_new(c, dt, batched, out.n, out.h, out.w, out.c);
    tt_fill_uniform(x, 0, 1);
    tt_to_dev(x);
    DittoWarpAffineParams p = { .border_value = border };
    memcpy(p.m, m, sizeof p.m);
    if (op_ok(c, name, ditto_op_warp_affine(c->be, &p, &x->dev, &y->dev))) {
        double *ref = ref_new(y);
        if (kind == WARP_MODEL) {
            ref_warp(m, border, x, y, ref);
        } else {
            /* identity / integer shift by (m[2], m[5]): y(r, col) = x(r - ty, col - tx) or the border */
            int64_t tx = (int64_t)m[2], ty = (int64_t)m[5];
            double cval = dt == DITTO_U8 ? clamp255(nearbyint(border)) : border;
            for (int64_t n = 0; n < out.n; n++)
            for (int64_t r = 0; r < out.h; r++)
            for (int64_t col = 0; col < out.w; col++)
            for (int64_t ch = 0; ch < out.c; ch++) {
                int64_t sr = r - ty, sc = col - tx;
                bool inside = sr >= 0 && sr < in.h && sc >= 0 && sc < in.w;
                ref[((n * out.h + r) * out.w + col) * out.c + ch] =
                    inside ? px(x, ((n * in.h + sr) * in.w + sc) * in.c + ch) : cval;
            }
        }
        if (kind == WARP_MODEL)
            check_out(c, name, y, ref, tol_u8, 1e-6, 1e-6);
        else
            check_out(c, name, y, ref, 0, 0, 0);
        free(ref);
    }
    tt_free(x);
    tt_free(y);
}

/* ---- resize_area ---- */

/* Exact area average: destination cell [d s, (d+1) s) against source pixels [i, i+1). */
static double overlap(int64_t d, double s, int64_t i)
{
    double a = (double)d * s, b = a + s;
    double lo = a > (double)i ? a : (double)i, hi = b < (double)(i + 1) ? b : (double)(i + 1);
    return hi > lo ? hi - lo : 0;
}

typedef enum AreaRound { AREA_HALF_UP, AREA_HALF_EVEN } AreaRound;

static void ref_area(const TT *x, const TT *y, AreaRound rnd, double *ref)
{
    Img in = img_of(x), out = img_of(y);
    double sx = (double)in.w / (double)out.w, sy = (double)in.h / (double)out.h;
    for (int64_t n = 0; n < out.n; n++)
    for (int64_t dy = 0; dy < out.h; dy++)
    for (int64_t dx = 0; dx < out.w; dx++)
    for (int64_t ch = 0; ch < out.c; ch++) {
        double acc = 0;
        for (int64_t iy = 0; iy < in.h; iy++) {
            double wy = overlap(dy, sy, iy);
            if (wy == 0)
                continue;
            for (int64_t ix = 0; ix < in.w; ix++) {
                double wx = overlap(dx, sx, ix);
                if (wx != 0)
                    acc += wy * wx * px(x, ((n * in.h + iy) * in.w + ix) * in.c + ch);
            }
        }
        acc /= sx * sy;
        if (x->host.dtype == DITTO_U8)
            acc = rnd == AREA_HALF_UP ? round_half_up(acc) : nearbyint(acc);
        ref[((n * out.h + dy) * out.w + dx) * out.c + ch] = acc;
    }
}

/* Integer upscaling: y(r, c) = x(r / f, c / f). */
static void ref_replicate(const TT *x, const TT *y, double *ref)
{
    Img in = img_of(x), out = img_of(y);
    for (int64_t n = 0; n < out.n; n++)
    for (int64_t r = 0; r < out.h; r++)
    for (int64_t col = 0; col < out.w; col++)
    for (int64_t ch = 0; ch < out.c; ch++)
        ref[((n * out.h + r) * out.w + col) * out.c + ch] =
            px(x, ((n * in.h + r * in.h / out.h) * in.w + col * in.w / out.w) * in.c + ch);
}

typedef enum AreaRef { AREA_EXACT_UP, AREA_EXACT_EVEN, AREA_WITHIN_1, AREA_REPLICATE } AreaRef;

static void case_area(TestCtx *c, const char *name, DittoDType dt, bool batched, Img in, Img out, AreaRef kind)
{
    if (!test_selected(c, name))
        return;
    TT *x = img_new(c, dt, batched, in.n, in.h, in.w, in.c), *y = img_new(c, dt, batched, out.n, out.h, out.w, out.c);
    tt_fill_uniform(x, 0, 1);
    tt_to_dev(x);
    if (op_ok(c, name, ditto_op_resize_area(c->be, &x->dev, &y->dev))) {
        double *ref = ref_new(y);
        if (kind == AREA_REPLICATE)
            ref_replicate(x, y, ref);
        else
            ref_area(x, y, kind == AREA_EXACT_UP ? AREA_HALF_UP : AREA_HALF_EVEN, ref);
        if (kind == AREA_REPLICATE)
            check_out(c, name, y, ref, 0, 0, 0);
        else
            check_out(c, name, y, ref, kind == AREA_WITHIN_1 ? 1 : 0, 1e-6, 2e-6);
        free(ref);
    }
    tt_free(x);
    tt_free(y);
}

/* ---- resize_bilinear ---- */

/* Source taps and fraction along one axis: half-pixel centres, clamped at both edges. */
static void lin_axis(int64_t d, int64_t in, int64_t out, int64_t *i0, int64_t *i1, double *f)
{
    double s = ((double)d + 0.5) * (double)in / (double)out - 0.5;
    if (s < 0)
        s = 0;
    double fl = floor(s);
    *i0 = (int64_t)fl;
    *f = s - fl;
    if (*i0 >= in - 1) {
        *i0 = in - 1;
        *f = 0;
    }
    *i1 = *i0 + 1 < in ? *i0 + 1 : in - 1;
}

static void ref_bilinear(const TT *x, const TT *y, double *ref)
{
    Img in = img_of(x), out = img_of(y);
    for (int64_t n = 0; n < out.n; n++)
    for (int64_t dy = 0; dy < out.h; dy++)
    for (int64_t dx = 0; dx < out.w; dx++) {
        int64_t y0, y1, x0, x1;
        double fy, fx;
        lin_axis(dy, in.h, out.h, &y0, &y1, &fy);
        lin_axis(dx, in.w, out.w, &x0, &x1, &fx);
        for (int64_t ch = 0; ch < out.c; ch++) {
#define P(r, col) px(x, ((n * in.h + (r)) * in.w + (col)) * in.c + ch)
            double v = (1 - fy) * ((1 - fx) * P(y0, x0) + fx * P(y0, x1)) + fy * ((1 - fx) * P(y1, x0) + fx * P(y1, x1));
            if (x->host.dtype == DITTO_U8) {
                /*
                 * OpenCV's 8-bit path: 11-bit weights from the float fraction,
                 * a horizontal pass in integers, and the vertical pass of its
                 * SIMD kernel (multiply-high of h >> 4, then (a + b + 2) >> 2),
                 * verified against cv2.resize (OpenCV 4.6) to give identical
                 * pixels. It truncates twice, so it is biased low by ~0.12 level
                 * against exact rounding: matching OpenCV matters more here.
                 */
                int64_t a0 = (int64_t)nearbyintf((1.0f - (float)fx) * 2048.0f), a1 = (int64_t)nearbyintf((float)fx * 2048.0f);
                int64_t b0 = (int64_t)nearbyintf((1.0f - (float)fy) * 2048.0f), b1 = (int64_t)nearbyintf((float)fy * 2048.0f);
                int64_t h0 = x0 == x1 ? (int64_t)P(y0, x0) * 2048 : (int64_t)P(y0, x0) * a0 + (int64_t)P(y0, x1) * a1;
                int64_t h1 = x0 == x1 ? (int64_t)P(y1, x0) * 2048 : (int64_t)P(y1, x0) * a0 + (int64_t)P(y1, x1) * a1;
                v = (double)(((((h0 >> 4) * b0) >> 16) + (((h1 >> 4) * b1) >> 16) + 2) >> 2);
                v = v < 0 ? 0 : v > 255 ? 255 : v;
            }
#undef P
            ref[((n * out.h + dy) * out.w + dx) * out.c + ch] = v;
        }
    }
}

static void case_bilinear(TestCtx *c, const char *name, DittoDType dt, bool batched, Img in, Img out)
{
    if (!test_selected(c, name))
        return;
    TT *x = img_new(c, dt, batched, in.n, in.h, in.w, in.c), *y = img_new(c, dt, batched, out.n, out.h, out.w, out.c);
    tt_fill_uniform(x, 0, 1);
    tt_to_dev(x);
    if (op_ok(c, name, ditto_op_resize_bilinear(c->be, &x->dev, &y->dev))) {
        double *ref = ref_new(y);
        ref_bilinear(x, y, ref);
        check_out(c, name, y, ref, 1, 1e-6, 2e-6);
        free(ref);
    }
    tt_free(x);
    tt_free(y);
}

/* ---- negative cases ---- */

static void case_negative(TestCtx *c)
{
    if (!test_selected(c, "image_reject"))
        return;
    TT *xu = tt_new(c, DITTO_U8, 3, (const int64_t[]){ 8, 9, 3 });
    TT *yf = tt_new(c, DITTO_F32, 3, (const int64_t[]){ 8, 9, 3 });
    TT *yu1 = tt_new(c, DITTO_U8, 3, (const int64_t[]){ 8, 9, 1 });
    TT *yu = tt_new(c, DITTO_U8, 3, (const int64_t[]){ 4, 5, 3 });
    TT *x2 = tt_new(c, DITTO_U8, 2, (const int64_t[]){ 8, 9 });
    TT *yb = tt_new(c, DITTO_U8, 4, (const int64_t[]){ 2, 4, 5, 3 });
    TT *xb = tt_new(c, DITTO_U8, 4, (const int64_t[]){ 3, 8, 9, 3 });
    DittoWarpAffineParams id = { .m = { 1, 0, 0, 0, 1, 0 } };
    DittoWarpAffineParams sing = { .m = { 1, 2, 0, 2, 4, 0 } };
    expect_rc(c, "image_reject_warp_dtype", ditto_op_warp_affine(c->be, &id, &xu->dev, &yf->dev), DITTO_ERR_INVAL);
    expect_rc(c, "image_reject_warp_channels", ditto_op_warp_affine(c->be, &id, &xu->dev, &yu1->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "image_reject_warp_singular", ditto_op_warp_affine(c->be, &sing, &xu->dev, &yu->dev), DITTO_ERR_INVAL);
    expect_rc(c, "image_reject_area_rank", ditto_op_resize_area(c->be, &x2->dev, &yu->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "image_reject_bilinear_batch", ditto_op_resize_bilinear(c->be, &xb->dev, &yb->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "image_reject_bilinear_dtype", ditto_op_resize_bilinear(c->be, &xu->dev, &yf->dev), DITTO_ERR_INVAL);
    tt_free(xu);
    tt_free(yf);
    tt_free(yu1);
    tt_free(yu);
    tt_free(x2);
    tt_free(yb);
    tt_free(xb);
}

#define IMG(n, h, w, c) ((Img){ n, h, w, c })

/* ---- output path: mask_blend, rgb_to_yuv420 ---- */

/*
 * Blend over a box of an H x W frame from an h x w mask / render; the mask
 * strays outside [0, 1] and the render outside [0, 255] so both clamps run.
 * Outside the box dst must keep its poison (0xA5) or, in place, the frame.
 */
static void case_blend(TestCtx *c, const char *name, int64_t H, int64_t W, int64_t h, int64_t w, DittoBlendParams box, bool in_place)
{
    if (!test_selected(c, name))
        return;
    TT *mask = tt_new(c, DITTO_F32, 3, (const int64_t[]){ h, w, 1 }), *img = tt_new(c, DITTO_F32, 3, (const int64_t[]){ h, w, 3 });
    TT *src = tt_new(c, DITTO_U8, 3, (const int64_t[]){ H, W, 3 });
    TT *dst = in_place ? src : new_out(c, DITTO_U8, 3, (const int64_t[]){ H, W, 3 });
    tt_fill_uniform(mask, -0.2f, 1.2f);
    tt_fill_uniform(img, -10.0f, 265.0f);
    tt_fill_uniform(src, 0, 255);
    tt_to_dev(mask);
    tt_to_dev(img);
    tt_to_dev(src);
    double *ref = ref_new(dst);
    const float *m = mask->host.data, *im = img->host.data;
    const uint8_t *s = src->host.data;
    for (int64_t r = 0; r < H; r++)
        for (int64_t x = 0; x < W; x++)
            for (int ch = 0; ch < 3; ch++) {
                int64_t i = (r * W + x) * 3 + ch;
                bool in = r >= box.y0 && r < box.y1 && x >= box.x0 && x < box.x1;
                if (!in) {
                    ref[i] = in_place ? s[i] : 0xA5;
                    continue;
                }
                /* a = clip(mask); fma(a, img, (1 - a) * src) with the product (1 - a) * src in float32; clamp; truncate */
                float a = fminf(fmaxf(m[r * w + x], 0.0f), 1.0f);
                double v = fma((double)a, (double)im[(r * w + x) * 3 + ch], (double)((1.0f - a) * (float)s[i]));
                v = (double)(float)v;
                ref[i] = floor(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    DittoTensor *sd = &src->dev;
    if (op_ok(c, name, ditto_op_mask_blend(c->be, &box, &mask->dev, &img->dev, sd, &dst->dev)))
        check_u8(c, name, dst, ref, 0);
    free(ref);
    tt_free(mask);
    tt_free(img);
    tt_free(src);
    if (!in_place)
        tt_free(dst);
}

/* yuv420p against the integer formula of io/color.h, written out here; odd sizes repeat the last row / column. */
static void case_yuv(TestCtx *c, const char *name, int64_t H, int64_t W, int kind)
{
    if (!test_selected(c, name))
        return;
    const int64_t ch = (H + 1) / 2, cw = (W + 1) / 2;
    TT *x = tt_new(c, DITTO_U8, 3, (const int64_t[]){ H, W, 3 });
    TT *y = new_out(c, DITTO_U8, 2, (const int64_t[]){ H, W });
    TT *u = new_out(c, DITTO_U8, 2, (const int64_t[]){ ch, cw }), *v = new_out(c, DITTO_U8, 2, (const int64_t[]){ ch, cw });
    uint8_t *px8 = x->host.data;
    tt_fill_uniform(x, 0, 255);
    if (kind == 1)   /* extremes: black, white, pure primaries */
        for (int64_t i = 0; i < H * W * 3; i++)
            px8[i] = (uint8_t)(((i / 3) % 5 == 0) ? 0 : ((i / 3) % 5 == 1) ? 255 : (i % 3 == (i / 3) % 5 - 2) ? 255 : 0);
    tt_to_dev(x);
    double *ry = ref_new(y), *ru = ref_new(u), *rv = ref_new(v);
    for (int64_t r = 0; r < H; r++)
        for (int64_t col = 0; col < W; col++) {
            const uint8_t *p = px8 + (r * W + col) * 3;
            ry[r * W + col] = (double)((16829 * p[0] + 33039 * p[1] + 6416 * p[2] + (16 << 16) + (1 << 15)) >> 16);
        }
    for (int64_t cy = 0; cy < ch; cy++)
        for (int64_t cx = 0; cx < cw; cx++) {
            int64_t rs = 0, gs = 0, bs = 0;
            for (int k = 0; k < 4; k++) {
                int64_t r = 2 * cy + (k >> 1), col = 2 * cx + (k & 1);
                r = r < H ? r : H - 1;
                col = col < W ? col : W - 1;
                const uint8_t *p = px8 + (r * W + col) * 3;
                rs += p[0];
                gs += p[1];
                bs += p[2];
            }
            ru[cy * cw + cx] = (double)((-9714 * rs - 19070 * gs + 28784 * bs + (128 << 18) + (1 << 17)) >> 18);
            rv[cy * cw + cx] = (double)((28784 * rs - 24103 * gs - 4681 * bs + (128 << 18) + (1 << 17)) >> 18);
        }
    if (op_ok(c, name, ditto_op_rgb_to_yuv420(c->be, &x->dev, &y->dev, &u->dev, &v->dev))) {
        char sub[160];
        snprintf(sub, sizeof sub, "%s y", name);
        check_u8(c, sub, y, ry, 0);
        snprintf(sub, sizeof sub, "%s u", name);
        check_u8(c, sub, u, ru, 0);
        snprintf(sub, sizeof sub, "%s v", name);
        check_u8(c, sub, v, rv, 0);
    }
    free(ry);
    free(ru);
    free(rv);
    tt_free(x);
    tt_free(y);
    tt_free(u);
    tt_free(v);
}

/*
 * paste_yuv against the ops it fuses, run in turn on the CPU oracle: per
 * item, 255 * render as (h,w,3) float32, warp_affine of it and of the mask
 * over the frame from its origin to the box's far corner, mask_blend over the
 * box into a copy of the frame, rgb_to_yuv420. The bytes must be equal. The
 * frames are packed (rgb | y | u | v | gap) as a session's output buffer;
 * gap bytes keep their poison, and with box_only so does every byte outside
 * the 2x2 blocks that meet the item's box.
 */
typedef struct PasteCase {
    int64_t n, h, w, H, W, gap;
    bool f16, shared_src, rgb, box_only;
} PasteCase;

/* Chroma block (cy, cx) meets box b. */
static bool block_in(const DittoPasteItem *b, int64_t cy, int64_t cx)
{
    return b->y1 > b->y0 && b->x1 > b->x0 && cy >= b->y0 / 2 && cy < (b->y1 + 1) / 2 && cx >= b->x0 / 2 && cx < (b->x1 + 1) / 2;
}

static void paste_ref_item(TestCtx *c, const PasteCase *k, const DittoPasteItem *it, const float *hwc, const float *mask, const uint8_t *src,
                           uint8_t *rgb, uint8_t *y, uint8_t *u, uint8_t *v)
{
    const int64_t H = k->H, W = k->W, ch = (H + 1) / 2, cw = (W + 1) / 2;
    memcpy(rgb, src, (size_t)(H * W * 3));
    if (it->y1 > it->y0 && it->x1 > it->x0) {
        float *img_w = malloc((size_t)(it->y1 * it->x1 * 3) * sizeof(float)), *mask_w = malloc((size_t)(it->y1 * it->x1) * sizeof(float));
        DittoWarpAffineParams wp = { .border_value = 0.0f };
        memcpy(wp.m, it->m, sizeof wp.m);
        DittoTensor ti = ditto_tensor((void *)hwc, DITTO_F32, 3, (const int64_t[]){ k->h, k->w, 3 });
        DittoTensor tm = ditto_tensor((void *)mask, DITTO_F32, 3, (const int64_t[]){ k->h, k->w, 1 });
        DittoTensor oi = ditto_tensor(img_w, DITTO_F32, 3, (const int64_t[]){ it->y1, it->x1, 3 });
        DittoTensor om = ditto_tensor(mask_w, DITTO_F32, 3, (const int64_t[]){ it->y1, it->x1, 1 });
        DittoTensor fr = ditto_tensor(rgb, DITTO_U8, 3, (const int64_t[]){ H, W, 3 });
        DittoBlendParams box = { it->y0, it->y1, it->x0, it->x1 };
        if (ditto_op_warp_affine(c->cpu, &wp, &ti, &oi) < 0 || ditto_op_warp_affine(c->cpu, &wp, &tm, &om) < 0 ||
            ditto_op_mask_blend(c->cpu, &box, &om, &oi, &fr, &fr) < 0)
            abort();
        free(img_w);
        free(mask_w);
    }
    DittoTensor fr = ditto_tensor(rgb, DITTO_U8, 3, (const int64_t[]){ H, W, 3 });
    DittoTensor ty = ditto_tensor(y, DITTO_U8, 2, (const int64_t[]){ H, W });
    DittoTensor tu = ditto_tensor(u, DITTO_U8, 2, (const int64_t[]){ ch, cw }), tv = ditto_tensor(v, DITTO_U8, 2, (const int64_t[]){ ch, cw });
    if (ditto_op_rgb_to_yuv420(c->cpu, &fr, &ty, &tu, &tv) < 0)
        abort();
}

static void case_paste(TestCtx *c, const char *name, const PasteCase *k, const DittoPasteItem *items)
{
    if (!test_selected(c, name))
        return;
    const int64_t N = k->n, h = k->h, w = k->w, H = k->H, W = k->W, ch = (H + 1) / 2, cw = (W + 1) / 2;
    const int64_t rgb_b = k->rgb ? H * W * 3 : 0, fb = rgb_b + H * W + 2 * ch * cw + k->gap;
    /* the render: float16 as stored (host and device alike), or float32 */
    TT *r32 = tt_new_f32dev(c, 4, (const int64_t[]){ N, 3, h, w });
    tt_fill_uniform(r32, -0.05f, 1.05f);   /* past [0, 1]: the blend's clamps run */
    TT *render = r32;
    if (k->f16) {
        render = tt_new(c, DITTO_F16, 4, (const int64_t[]){ N, 3, h, w });
        ditto_convert(render->host.data, DITTO_F16, r32->host.data, DITTO_F32, (size_t)(N * 3 * h * w));
        ditto_convert(r32->host.data, DITTO_F32, render->host.data, DITTO_F16, (size_t)(N * 3 * h * w));
    }
    TT *mask = tt_new_f32dev(c, 3, (const int64_t[]){ h, w, 1 });
    tt_fill_uniform(mask, -0.2f, 1.2f);
    TT *src = k->shared_src ? tt_new(c, DITTO_U8, 3, (const int64_t[]){ H, W, 3 }) : tt_new(c, DITTO_U8, 4, (const int64_t[]){ N, H, W, 3 });
    tt_fill_uniform(src, 0, 255);
    TT *out = new_out(c, DITTO_U8, 1, (const int64_t[]){ N * fb });
    tt_to_dev(render);
    tt_to_dev(mask);
    tt_to_dev(src);

    /* the reference, frame by frame */
    double *ref = ref_new(out);
    float *hwc = malloc((size_t)(h * w * 3) * sizeof(float));
    uint8_t *fr = malloc((size_t)(H * W * 4 + 2 * ch * cw));
    const float *rv = r32->host.data;
    for (int64_t i = 0; i < N * fb; i++)
        ref[i] = 0xA5;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t p = 0; p < h * w; p++)
            for (int ci = 0; ci < 3; ci++)
                hwc[p * 3 + ci] = 255.0f * rv[(n * 3 + ci) * h * w + p];
        const uint8_t *sn = (const uint8_t *)src->host.data + (k->shared_src ? 0 : n * H * W * 3);
        paste_ref_item(c, k, &items[n], hwc, mask->host.data, sn, fr, fr + H * W * 3, fr + H * W * 4, fr + H * W * 4 + ch * cw);
        const int64_t o = n * fb;
        const DittoPasteItem *b = &items[n];
        for (int64_t i = 0; i < H * W; i++) {   /* rgb and y of pixel i */
            if (k->box_only && !block_in(b, i / W / 2, i % W / 2))
                continue;
            for (int ci = 0; k->rgb && ci < 3; ci++)
                ref[o + 3 * i + ci] = fr[3 * i + ci];
            ref[o + rgb_b + i] = fr[H * W * 3 + i];
        }
        for (int64_t i = 0; i < ch * cw; i++) {   /* u, v of block i */
            if (k->box_only && !block_in(b, i / cw, i % cw))
                continue;
            ref[o + rgb_b + H * W + i] = fr[H * W * 4 + i];
            ref[o + rgb_b + H * W + ch * cw + i] = fr[H * W * 4 + ch * cw + i];
        }
    }

    /* views of the packed buffer */
    uint8_t *base = out->dev.data;
    DittoTensor trgb = ditto_tensor(base, DITTO_U8, 4, (const int64_t[]){ N, H, W, 3 });
    DittoTensor ty = ditto_tensor(base + rgb_b, DITTO_U8, 3, (const int64_t[]){ N, H, W });
    DittoTensor tu = ditto_tensor(base + rgb_b + H * W, DITTO_U8, 3, (const int64_t[]){ N, ch, cw });
    DittoTensor tv = ditto_tensor(base + rgb_b + H * W + ch * cw, DITTO_U8, 3, (const int64_t[]){ N, ch, cw });
    trgb.stride[0] = ty.stride[0] = tu.stride[0] = tv.stride[0] = fb;
    trgb.device = ty.device = tu.device = tv.device = c->be->device;
    const DittoPasteParams pp = { items, 255.0f, k->box_only };
    if (op_ok(c, name, ditto_op_paste_yuv(c->be, &pp, &mask->dev, &render->dev, &src->dev, k->rgb ? &trgb : NULL, &ty, &tu, &tv)))
        check_u8(c, name, out, ref, 0);
    free(ref);
    free(hwc);
    free(fr);
    if (render != r32)
        tt_free(render);
    tt_free(r32);
    tt_free(mask);
    tt_free(src);
    tt_free(out);
}

/* n items: render (h,w) scaled by about s and turned, placed around the frame's centre; boxes from full to empty. */
static void paste_items(DittoPasteItem *it, int64_t n, int64_t h, int64_t w, int64_t H, int64_t W, double s)
{
    for (int64_t i = 0; i < n; i++) {
        double m[6], sc = s * (1.0 + 0.07 * (double)(i % 5)), th = 0.3 * (double)(i % 7) - 0.8;
        similarity(sc, th, (double)W * 0.5 - sc * (double)w * 0.5 + (double)(i % 3) * 3.3 - 3.1, (double)H * 0.5 - sc * (double)h * 0.5 - (double)(i % 4) * 2.7,
                   m);
        for (int k = 0; k < 6; k++)
            it[i].m[k] = (float)m[k];   /* Ditto keeps M in float32 */
        switch (i % 4) {
        case 0: it[i].y0 = 0, it[i].y1 = H, it[i].x0 = 0, it[i].x1 = W; break;                       /* the whole frame */
        case 1: it[i].y0 = H / 5, it[i].y1 = H - 3, it[i].x0 = 2, it[i].x1 = W * 3 / 4 + 1; break;  /* odd edges */
        case 2: it[i].y0 = it[i].y1 = H / 2, it[i].x0 = 0, it[i].x1 = W; break;                      /* empty */
        default: it[i].y0 = 1, it[i].y1 = H / 2 + 1, it[i].x0 = W / 3, it[i].x1 = W; break;
        }
    }
}

static void cases_paste(TestCtx *c)
{
    DittoPasteItem it[17];
    const PasteCase a = { 3, 40, 40, 61, 57, 7, true, true, true, false };
    paste_items(it, 3, 40, 40, 61, 57, 1.1);
    case_paste(c, "paste_yuv_f16_b3_odd_frame", &a, it);
    const PasteCase a2 = { 3, 40, 40, 61, 57, 7, true, true, true, true };
    case_paste(c, "paste_yuv_f16_b3_odd_frame_box_only", &a2, it);
    const PasteCase b = { 4, 36, 44, 50, 64, 0, false, false, false, false };
    paste_items(it, 4, 36, 44, 50, 64, 0.9);
    case_paste(c, "paste_yuv_f32_b4_own_frames_no_rgb", &b, it);
    const PasteCase b2 = { 4, 36, 44, 50, 64, 0, false, false, false, true };
    case_paste(c, "paste_yuv_f32_b4_no_rgb_box_only", &b2, it);
    const PasteCase d = { 17, 12, 12, 20, 19, 3, true, false, true, true };   /* past one launch's 16 items */
    paste_items(it, 17, 12, 12, 20, 19, 1.2);
    case_paste(c, "paste_yuv_f16_b17_box_only", &d, it);
    const PasteCase e = { 1, 512, 512, 643, 701, 0, true, true, true, false };   /* the renderer's crop into a portrait */
    paste_items(it, 1, 512, 512, 643, 701, 1.05);
    it[0].y0 = 40, it[0].y1 = 600, it[0].x0 = 50, it[0].x1 = 660;
    case_paste(c, "paste_yuv_f16_512_portrait", &e, it);
}

static void output_negative(TestCtx *c)
{
    if (!test_selected(c, "output negative"))
        return;
    TT *mask = tt_new(c, DITTO_F32, 3, (const int64_t[]){ 8, 9, 1 }), *img = tt_new(c, DITTO_F32, 3, (const int64_t[]){ 8, 9, 3 });
    TT *img2 = tt_new(c, DITTO_F32, 3, (const int64_t[]){ 8, 8, 3 }), *src = tt_new(c, DITTO_U8, 3, (const int64_t[]){ 10, 12, 3 });
    TT *y = tt_new(c, DITTO_U8, 2, (const int64_t[]){ 10, 12 }), *uv = tt_new(c, DITTO_U8, 2, (const int64_t[]){ 5, 6 });
    TT *uv_bad = tt_new(c, DITTO_U8, 2, (const int64_t[]){ 5, 5 });
    DittoBlendParams ok = { 1, 7, 2, 8 }, wide = { 1, 7, 2, 10 };
    expect_rc(c, "output negative: blend box past the mask", ditto_op_mask_blend(c->be, &wide, &mask->dev, &img->dev, &src->dev, &src->dev), DITTO_ERR_INVAL);
    expect_rc(c, "output negative: blend img size", ditto_op_mask_blend(c->be, &ok, &mask->dev, &img2->dev, &src->dev, &src->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "output negative: blend f32 frame", ditto_op_mask_blend(c->be, &ok, &mask->dev, &img->dev, &img->dev, &src->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "output negative: yuv chroma size", ditto_op_rgb_to_yuv420(c->be, &src->dev, &y->dev, &uv->dev, &uv_bad->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "output negative: yuv float input", ditto_op_rgb_to_yuv420(c->be, &img->dev, &y->dev, &uv->dev, &uv->dev), DITTO_ERR_SHAPE);
    /* paste_yuv: render (1,3,8,9) into a 10x12 frame */
    TT *r = tt_new_f32dev(c, 4, (const int64_t[]){ 1, 3, 8, 9 }), *r4 = tt_new_f32dev(c, 4, (const int64_t[]){ 1, 4, 8, 9 });
    TT *y3 = tt_new(c, DITTO_U8, 3, (const int64_t[]){ 1, 10, 12 }), *uv3 = tt_new(c, DITTO_U8, 3, (const int64_t[]){ 1, 5, 6 });
    DittoPasteItem good = { { 1, 0, 1, 0, 1, 1 }, 0, 10, 0, 12 }, sing = { { 1, 2, 0, 2, 4, 0 }, 0, 10, 0, 12 }, off = { { 1, 0, 1, 0, 1, 1 }, 0, 11, 0, 12 };
    DittoPasteParams pg = { &good, 255.0f, false }, ps = { &sing, 255.0f, false }, po = { &off, 255.0f, true };
    expect_rc(c, "output negative: paste singular matrix", ditto_op_paste_yuv(c->be, &ps, &mask->dev, &r->dev, &src->dev, NULL, &y3->dev, &uv3->dev, &uv3->dev), DITTO_ERR_INVAL);
    expect_rc(c, "output negative: paste box past the frame", ditto_op_paste_yuv(c->be, &po, &mask->dev, &r->dev, &src->dev, NULL, &y3->dev, &uv3->dev, &uv3->dev), DITTO_ERR_INVAL);
    expect_rc(c, "output negative: paste 4-channel render", ditto_op_paste_yuv(c->be, &pg, &mask->dev, &r4->dev, &src->dev, NULL, &y3->dev, &uv3->dev, &uv3->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "output negative: paste mask size", ditto_op_paste_yuv(c->be, &pg, &img2->dev, &r->dev, &src->dev, NULL, &y3->dev, &uv3->dev, &uv3->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "output negative: paste chroma size", ditto_op_paste_yuv(c->be, &pg, &mask->dev, &r->dev, &src->dev, NULL, &y3->dev, &uv3->dev, &y3->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "output negative: paste unbatched luma", ditto_op_paste_yuv(c->be, &pg, &mask->dev, &r->dev, &src->dev, NULL, &y->dev, &uv3->dev, &uv3->dev), DITTO_ERR_SHAPE);
    tt_free(r);
    tt_free(r4);
    tt_free(y3);
    tt_free(uv3);
    tt_free(mask);
    tt_free(img);
    tt_free(img2);
    tt_free(src);
    tt_free(y);
    tt_free(uv);
    tt_free(uv_bad);
}

void test_ops_image(TestCtx *c)
{
    double m[6];

    /* warp_affine: rotation + scale + translation, part of the output off the source */
    similarity(1.3, 0.3, -5.3, 7.9, m);
    case_warp(c, "warp_affine_u8_rot_c3", DITTO_U8, false, IMG(1, 37, 45, 3), IMG(1, 40, 33, 3), m, 0, WARP_MODEL, 1);
    case_warp(c, "warp_affine_f32_rot_c3", DITTO_F32, false, IMG(1, 37, 45, 3), IMG(1, 40, 33, 3), m, 0, WARP_MODEL, 0);
    similarity(0.8, -0.7, 10.2, 3.1, m);
    case_warp(c, "warp_affine_f32_rot_b3_c1", DITTO_F32, true, IMG(3, 29, 31, 1), IMG(3, 26, 35, 1), m, 0, WARP_MODEL, 0);
    case_warp(c, "warp_affine_u8_rot_b3_c1_border", DITTO_U8, true, IMG(3, 29, 31, 1), IMG(3, 26, 35, 1), m, 37.6f, WARP_MODEL, 1);
    case_warp(c, "warp_affine_f32_rot_c3_border", DITTO_F32, false, IMG(1, 23, 19, 3), IMG(1, 21, 24, 3), m, 0.5f, WARP_MODEL, 0);
    /* a crop-like downscale (the 512 crop shrinks a larger portrait), M rounded to float32 as Ditto stores it */
    similarity(0.45, 0.12, -3.7, 2.4, m);
    for (int i = 0; i < 6; i++)
        m[i] = (float)m[i];
    case_warp(c, "warp_affine_u8_crop_like_c3", DITTO_U8, false, IMG(1, 71, 64, 3), IMG(1, 32, 32, 3), m, 0, WARP_MODEL, 1);
    /* identity and integer translation: exact copies with a constant border */
    const double ident[6] = { 1, 0, 0, 0, 1, 0 }, shift[6] = { 1, 0, 5, 0, 1, -3 };
    case_warp(c, "warp_affine_u8_identity_b3_c3", DITTO_U8, true, IMG(3, 31, 27, 3), IMG(3, 31, 27, 3), ident, 0, WARP_SAME, 0);
    case_warp(c, "warp_affine_f32_identity_c1", DITTO_F32, false, IMG(1, 13, 17, 1), IMG(1, 13, 17, 1), ident, 0, WARP_SAME, 0);
    case_warp(c, "warp_affine_u8_shift_c3", DITTO_U8, false, IMG(1, 19, 23, 3), IMG(1, 21, 20, 3), shift, 0, WARP_SHIFT, 0);
    case_warp(c, "warp_affine_u8_shift_border_c1", DITTO_U8, false, IMG(1, 19, 23, 1), IMG(1, 19, 23, 1), shift, 200, WARP_SHIFT, 0);
    case_warp(c, "warp_affine_f32_shift_b3_c3", DITTO_F32, true, IMG(3, 11, 14, 3), IMG(3, 12, 12, 3), shift, 0, WARP_SHIFT, 0);

    /* resize_area */
    case_area(c, "resize_area_u8_2x_b3_c3", DITTO_U8, true, IMG(3, 10, 14, 3), IMG(3, 5, 7, 3), AREA_EXACT_UP);
    case_area(c, "resize_area_u8_2x_c1", DITTO_U8, false, IMG(1, 12, 18, 1), IMG(1, 6, 9, 1), AREA_EXACT_UP);
    case_area(c, "resize_area_u8_3x_c3", DITTO_U8, false, IMG(1, 9, 12, 3), IMG(1, 3, 4, 3), AREA_EXACT_EVEN);
    case_area(c, "resize_area_u8_4x2x_c3", DITTO_U8, false, IMG(1, 8, 12, 3), IMG(1, 2, 6, 3), AREA_EXACT_EVEN);
    case_area(c, "resize_area_f32_2x_c3", DITTO_F32, false, IMG(1, 10, 14, 3), IMG(1, 5, 7, 3), AREA_EXACT_EVEN);
    case_area(c, "resize_area_f32_7to3_b3_c3", DITTO_F32, true, IMG(3, 7, 11, 3), IMG(3, 3, 4, 3), AREA_EXACT_EVEN);
    case_area(c, "resize_area_f32_7to3_c1", DITTO_F32, false, IMG(1, 7, 7, 1), IMG(1, 3, 3, 1), AREA_EXACT_EVEN);
    case_area(c, "resize_area_u8_7to3_b3_c3", DITTO_U8, true, IMG(3, 21, 33, 3), IMG(3, 9, 14, 3), AREA_WITHIN_1);
    case_area(c, "resize_area_f32_up2x_c3", DITTO_F32, false, IMG(1, 4, 5, 3), IMG(1, 8, 10, 3), AREA_REPLICATE);
    case_area(c, "resize_area_u8_up3x_b3_c1", DITTO_U8, true, IMG(3, 3, 4, 1), IMG(3, 9, 12, 1), AREA_REPLICATE);

    /* resize_bilinear */
    case_bilinear(c, "resize_bilinear_f32_up_c3", DITTO_F32, false, IMG(1, 5, 7, 3), IMG(1, 11, 16, 3));
    case_bilinear(c, "resize_bilinear_f32_down_b3_c1", DITTO_F32, true, IMG(3, 17, 13, 1), IMG(3, 6, 5, 1));
    case_bilinear(c, "resize_bilinear_f32_mixed_c3", DITTO_F32, false, IMG(1, 9, 31, 3), IMG(1, 20, 12, 3));
    case_bilinear(c, "resize_bilinear_u8_up_c3", DITTO_U8, false, IMG(1, 5, 7, 3), IMG(1, 12, 15, 3));
    case_bilinear(c, "resize_bilinear_u8_down_b3_c1", DITTO_U8, true, IMG(3, 34, 26, 1), IMG(3, 12, 10, 1));
    case_bilinear(c, "resize_bilinear_u8_2x_b3_c3", DITTO_U8, true, IMG(3, 8, 10, 3), IMG(3, 4, 5, 3));
    case_bilinear(c, "resize_bilinear_u8_mixed_b3_c3", DITTO_U8, true, IMG(3, 9, 31, 3), IMG(3, 20, 12, 3));

    case_negative(c);

    /* output path */
    case_blend(c, "mask_blend_box", 37, 45, 30, 41, (DittoBlendParams){ 3, 29, 5, 40 }, false);
    case_blend(c, "mask_blend_box_in_place", 37, 45, 37, 45, (DittoBlendParams){ 0, 37, 0, 45 }, true);
    case_blend(c, "mask_blend_corner_rect", 64, 50, 20, 17, (DittoBlendParams){ 11, 20, 4, 17 }, true);
    case_yuv(c, "rgb_to_yuv420_even", 34, 48, 0);
    case_yuv(c, "rgb_to_yuv420_odd", 33, 45, 0);
    case_yuv(c, "rgb_to_yuv420_1x1", 1, 1, 0);
    case_yuv(c, "rgb_to_yuv420_extremes_odd", 17, 23, 1);
    cases_paste(c);
    output_negative(c);
}
