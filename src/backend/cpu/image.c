/*
 * CPU image ops with OpenCV semantics (ditto-architecture.md section 6.3):
 * cv2.warpAffine INTER_LINEAR + BORDER_CONSTANT, cv2.resize INTER_AREA and
 * INTER_LINEAR. Images are (H,W,C) or (N,H,W,C), uint8 or float32, any
 * channel count; every image of a batch gets the same transform.
 *
 * uint8 paths use OpenCV's fixed-point arithmetic; float paths use float
 * weights in OpenCV's accumulation order. Per-axis coefficients are computed
 * on the fly (cheap next to the pixel work), so nothing is allocated.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "core/bt601.h"
#include "core/log.h"
#include "core/mem.h"

#define MAX_TASKS 1024

static int task_count(int64_t n)
{
    return n < MAX_TASKS ? (int)n : MAX_TASKS;
}

static void task_range(int64_t n, int ntasks, int t, int64_t *lo, int64_t *hi)
{
    *lo = n * t / ntasks;
    *hi = n * (t + 1) / ntasks;
}

/* Batch, height, width, channels of an (H,W,C) or (N,H,W,C) image. */
typedef struct ImgDims {
    int64_t n, h, w, c;
} ImgDims;

static ImgDims img_dims(const DittoTensor *t)
{
    int o = t->ndim - 3;
    ImgDims d = { o ? t->shape[0] : 1, t->shape[o], t->shape[o + 1], t->shape[o + 2] };
    return d;
}

/* cvRound: nearest, ties to even (the default FP rounding mode), saturated to int. */
static int64_t round_sat(double v)
{
    if (v != v)
        return 0;
    if (v <= (double)INT32_MIN)
        return INT32_MIN;
    if (v >= (double)INT32_MAX)
        return INT32_MAX;
    return (int64_t)nearbyint(v);
}

static uint8_t sat_u8(int64_t v)
{
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* floor(v / 2^s) without relying on the sign behaviour of >> */
static int64_t floor_shift(int64_t v, int s)
{
    int64_t d = (int64_t)1 << s;
    return v >= 0 ? v / d : -((-v + d - 1) / d);
}

/* ---- warp_affine ---- */

/* The inverse map destination -> source of a 2x3 M, in double, as cv::invertAffineTransform: a11 a12 a21 a22 b1 b2. */
static void affine_inverse(const double m[6], double inv[6])
{
    double D = 1.0 / (m[0] * m[4] - m[1] * m[3]);
    inv[0] = m[4] * D;
    inv[1] = -m[1] * D;
    inv[2] = -m[3] * D;
    inv[3] = m[0] * D;
    inv[4] = -inv[0] * m[2] - inv[1] * m[5];
    inv[5] = -inv[2] * m[2] - inv[3] * m[5];
}

/* 1/1024-pixel origin of destination row dy; +16 rounds the later >> 5 to 1/32 pixel. */
static void warp_row(const double inv[6], int64_t dy, int64_t *X0, int64_t *Y0)
{
    *X0 = round_sat((inv[1] * (double)dy + inv[4]) * 1024) + 16;
    *Y0 = round_sat((inv[3] * (double)dy + inv[5]) * 1024) + 16;
}

/* Source position of destination column dx of that row: pixel (sx, sy) plus (ax, ay) / 32. */
static void warp_pos(const double inv[6], int64_t X0, int64_t Y0, int64_t dx, int64_t *sx, int64_t *sy, int *ax, int *ay)
{
    int64_t X = floor_shift(X0 + round_sat(inv[0] * (double)dx * 1024), 5);
    int64_t Y = floor_shift(Y0 + round_sat(inv[2] * (double)dx * 1024), 5);
    *sx = floor_shift(X, 5);
    *sy = floor_shift(Y, 5);
    *ax = (int)(X - *sx * 32);
    *ay = (int)(Y - *sy * 32);
}

typedef struct WarpCtx {
    const void *x;
    void *y;
    ImgDims in, out;
    bool u8;
    double inv[6];                       /* inverse map: destination -> source (affine_inverse) */
    float cval_f;
    uint8_t cval_u8;
    int64_t rows;                        /* N * out H */
    int ntasks;
} WarpCtx;

/*
 * One destination pixel from source position (sx + ax/32, sy + ay/32).
 * Taps outside the source read the border value; a pixel whose four taps
 * are all outside is the border value itself (as OpenCV's remap does).
 */
static void warp_pixel_u8(const WarpCtx *g, const uint8_t *src, int64_t sx, int64_t sy, int ax, int ay, uint8_t *dst)
{
    int64_t W = g->in.w, H = g->in.h, C = g->in.c;
    if (sx >= W || sx + 1 < 0 || sy >= H || sy + 1 < 0) {
        for (int64_t k = 0; k < C; k++)
            dst[k] = g->cval_u8;
        return;
    }
    /* round(w * 32768) of the bilinear weights: with 1/32 steps every
     * product is a multiple of 1/1024, so they are exact integers that sum to
     * 32768 and OpenCV's rounding fix-up never applies. */
    const int32_t w[4] = { (32 - ax) * (32 - ay) * 32, ax * (32 - ay) * 32, (32 - ax) * ay * 32, ax * ay * 32 };
    const uint8_t *tap[4];
    for (int k = 0; k < 4; k++) {
        int64_t tx = sx + (k & 1), ty = sy + (k >> 1);
        tap[k] = tx >= 0 && tx < W && ty >= 0 && ty < H ? src + (ty * W + tx) * C : NULL;
    }
    for (int64_t ch = 0; ch < C; ch++) {
        int32_t s = 0;
        for (int k = 0; k < 4; k++)
            s += w[k] * (tap[k] ? tap[k][ch] : g->cval_u8);
        dst[ch] = sat_u8((s + (1 << 14)) >> 15);
    }
}

/* OpenCV's float table: products of (1 - f) and f with f = a/32, exact in float */
static void lerp_weights(int ax, int ay, float w[4])
{
    float fx = (float)ax * (1.0f / 32), fy = (float)ay * (1.0f / 32);
    w[0] = (1.0f - fy) * (1.0f - fx);
    w[1] = (1.0f - fy) * fx;
    w[2] = fy * (1.0f - fx);
    w[3] = fy * fx;
}

/* taps in the order (y0,x0), (y0,x1), (y1,x0), (y1,x1), added left to right */
static float lerp_sum(const float v[4], const float w[4])
{
    return v[0] * w[0] + v[1] * w[1] + v[2] * w[2] + v[3] * w[3];
}

static void warp_pixel_f32(const WarpCtx *g, const float *src, int64_t sx, int64_t sy, int ax, int ay, float *dst)
{
    int64_t W = g->in.w, H = g->in.h, C = g->in.c;
    if (sx >= W || sx + 1 < 0 || sy >= H || sy + 1 < 0) {
        for (int64_t k = 0; k < C; k++)
            dst[k] = g->cval_f;
        return;
    }
    float w[4];
    lerp_weights(ax, ay, w);
    const float *tap[4];
    for (int k = 0; k < 4; k++) {
        int64_t tx = sx + (k & 1), ty = sy + (k >> 1);
        tap[k] = tx >= 0 && tx < W && ty >= 0 && ty < H ? src + (ty * W + tx) * C : NULL;
    }
    for (int64_t ch = 0; ch < C; ch++) {
        float v[4];
        for (int k = 0; k < 4; k++)
            v[k] = tap[k] ? tap[k][ch] : g->cval_f;
        dst[ch] = lerp_sum(v, w);
    }
}

static void warp_task(void *arg, int t)
{
    const WarpCtx *g = arg;
    int64_t lo, hi;
    task_range(g->rows, g->ntasks, t, &lo, &hi);
    size_t esz = g->u8 ? 1 : 4;
    int64_t in_img = g->in.h * g->in.w * g->in.c, out_row = g->out.w * g->out.c;
    for (int64_t r = lo; r < hi; r++) {
        int64_t n = r / g->out.h, dy = r % g->out.h;
        const char *src = (const char *)g->x + (size_t)(n * in_img) * esz;
        char *dst = (char *)g->y + (size_t)(r * out_row) * esz;
        int64_t X0, Y0;
        warp_row(g->inv, dy, &X0, &Y0);
        for (int64_t dx = 0; dx < g->out.w; dx++) {
            int64_t sx, sy;
            int ax, ay;
            warp_pos(g->inv, X0, Y0, dx, &sx, &sy, &ax, &ay);
            if (g->u8)
                warp_pixel_u8(g, (const uint8_t *)src, sx, sy, ax, ay, (uint8_t *)dst + dx * g->out.c);
            else
                warp_pixel_f32(g, (const float *)src, sx, sy, ax, ay, (float *)dst + dx * g->out.c);
        }
    }
}

static int cpu_warp_affine(DittoBackend *be, const DittoWarpAffineParams *p, const DittoTensor *x, DittoTensor *y)
{
    WarpCtx g = { .x = x->data, .y = y->data, .in = img_dims(x), .out = img_dims(y), .u8 = x->dtype == DITTO_U8 };
    affine_inverse(p->m, g.inv);
    g.cval_f = p->border_value;
    g.cval_u8 = sat_u8(round_sat(p->border_value));
    g.rows = g.out.n * g.out.h;
    g.ntasks = task_count(g.rows);
    ditto_pool_run(be->pool, g.ntasks, warp_task, &g);
    return 0;
}

/* ---- resize: INTER_LINEAR and the linear emulation of INTER_AREA upscaling ---- */

/*
 * Coefficients of destination index d along one axis, as cv::resize computes
 * them. Linear: half-pixel centres s = (d + 0.5) in/out - 0.5 rounded to
 * float. Area mode (INTER_AREA when it cannot decimate): s = floor(d in/out)
 * and a fraction that is nonzero only where a destination cell straddles two
 * source pixels, i.e. pure replication for integer factors.
 * clamp_edges applies the horizontal-pass rule (fraction 0 at both edges);
 * the vertical pass keeps the raw fraction and clamps the row indices, which
 * gives the same value in fixed point and OpenCV's rounding in float.
 */
typedef struct LinTap {
    int64_t i0, i1;
    float f;                 /* weight of i1; i0 gets 1 - f */
} LinTap;

static LinTap lin_tap(int64_t d, int64_t in, double scale, double inv_scale, bool area_mode, bool clamp_edges)
{
    int64_t s;
    float f;
    if (!area_mode) {
        f = (float)(((double)d + 0.5) * scale - 0.5);
        s = (int64_t)floorf(f);
        f -= (float)s;
    } else {
        s = (int64_t)floor((double)d * scale);
        f = (float)((double)(d + 1) - (double)(s + 1) * inv_scale);
        f = f <= 0 ? 0.0f : f - floorf(f);
    }
    if (clamp_edges) {
        if (s < 0)
            f = 0, s = 0;
        if (s >= in - 1)
            f = 0, s = in - 1;
    }
    LinTap t;
    t.i0 = s < 0 ? 0 : s > in - 1 ? in - 1 : s;
    t.i1 = s + 1 < 0 ? 0 : s + 1 > in - 1 ? in - 1 : s + 1;
    t.f = f;
    return t;
}

/* 11-bit fixed-point weights, each rounded on its own as OpenCV does */
static void fixed_weights(float f, int32_t *w0, int32_t *w1)
{
    *w0 = (int32_t)nearbyintf((1.0f - f) * 2048.0f);
    *w1 = (int32_t)nearbyintf(f * 2048.0f);
}

typedef struct ResizeCtx {
    const void *x;
    void *y;
    ImgDims in, out;
    bool u8, area_mode;
    double sx, sy, inv_sx, inv_sy;       /* in/out and out/in per axis */
    int64_t rows;
    int ntasks;
} ResizeCtx;

static void linear_task(void *arg, int t)
{
    const ResizeCtx *r = arg;
    int64_t lo, hi;
    task_range(r->rows, r->ntasks, t, &lo, &hi);
    int64_t C = r->in.c, in_row = r->in.w * C, in_img = r->in.h * in_row, out_row = r->out.w * C;
    for (int64_t row = lo; row < hi; row++) {
        int64_t n = row / r->out.h, dy = row % r->out.h;
        LinTap ty = lin_tap(dy, r->in.h, r->sy, r->inv_sy, r->area_mode, false);
        for (int64_t dx = 0; dx < r->out.w; dx++) {
            LinTap tx = lin_tap(dx, r->in.w, r->sx, r->inv_sx, r->area_mode, true);
            int64_t o0 = n * in_img + ty.i0 * in_row, o1 = n * in_img + ty.i1 * in_row;
            int64_t c0 = tx.i0 * C, c1 = tx.i1 * C;
            /* at the right edge both taps are the last pixel: one tap, as OpenCV's xmax */
            bool one = tx.i0 == tx.i1;
            if (r->u8) {
                const uint8_t *s0 = (const uint8_t *)r->x + o0, *s1 = (const uint8_t *)r->x + o1;
                uint8_t *d = (uint8_t *)r->y + row * out_row + dx * C;
                int32_t a0, a1, b0, b1;
                fixed_weights(tx.f, &a0, &a1);
                fixed_weights(ty.f, &b0, &b1);
                for (int64_t ch = 0; ch < C; ch++) {
                    int32_t h0 = one ? s0[c0 + ch] * 2048 : s0[c0 + ch] * a0 + s0[c1 + ch] * a1;
                    int32_t h1 = one ? s1[c0 + ch] * 2048 : s1[c0 + ch] * a0 + s1[c1 + ch] * a1;
                    /*
                     * The vertical pass as OpenCV's SIMD kernel computes it
                     * (16-bit multiply-high of h >> 4 by the weight, then
                     * (a + b + 2) >> 2), which is what cv2 returns for all but a
                     * few tail pixels: not the plain (h0 b0 + h1 b1 + 2^21) >> 22.
                     */
                    d[ch] = sat_u8(((((h0 >> 4) * b0) >> 16) + (((h1 >> 4) * b1) >> 16) + 2) >> 2);
                }
            } else {
                const float *s0 = (const float *)r->x + o0, *s1 = (const float *)r->x + o1;
                float *d = (float *)r->y + row * out_row + dx * C;
                float a0 = 1.0f - tx.f, a1 = tx.f, b0 = 1.0f - ty.f, b1 = ty.f;
                for (int64_t ch = 0; ch < C; ch++) {
                    float h0 = one ? s0[c0 + ch] : s0[c0 + ch] * a0 + s0[c1 + ch] * a1;
                    float h1 = one ? s1[c0 + ch] : s1[c0 + ch] * a0 + s1[c1 + ch] * a1;
                    d[ch] = h0 * b0 + h1 * b1;
                }
            }
        }
    }
}

/* ---- resize: INTER_AREA decimation ---- */

/*
 * Integer factors (OpenCV's "fast" area path): the plain box mean. uint8
 * 2x2 with 1, 3 or 4 channels is (a+b+c+d+2)>>2 (round half up); other uint8
 * cases round sum * (1/area) in float to nearest even; float sums in window
 * order and multiplies by 1/area.
 */
typedef struct AreaCtx {
    const void *x;
    void *y;
    ImgDims in, out;
    bool u8;
    int fx, fy;              /* integer factors, 0 for the general path */
    double sx, sy;           /* in/out per axis */
    int64_t rows;
    int ntasks;
} AreaCtx;

static void area_fast_task(void *arg, int t)
{
    const AreaCtx *a = arg;
    int64_t lo, hi;
    task_range(a->rows, a->ntasks, t, &lo, &hi);
    int64_t C = a->in.c, in_row = a->in.w * C, in_img = a->in.h * in_row, out_row = a->out.w * C;
    float scale = 1.0f / (float)(a->fx * a->fy);
    bool half_up = a->u8 && a->fx == 2 && a->fy == 2 && (C == 1 || C == 3 || C == 4);
    for (int64_t row = lo; row < hi; row++) {
        int64_t n = row / a->out.h, dy = row % a->out.h;
        int64_t base = n * in_img + dy * a->fy * in_row;
        for (int64_t dx = 0; dx < a->out.w; dx++)
        for (int64_t ch = 0; ch < C; ch++) {
            int64_t o = base + dx * a->fx * C + ch;
            if (a->u8) {
                const uint8_t *s = (const uint8_t *)a->x + o;
                int32_t sum = 0;
                for (int i = 0; i < a->fy; i++)
                    for (int j = 0; j < a->fx; j++)
                        sum += s[i * in_row + j * C];
                ((uint8_t *)a->y)[row * out_row + dx * C + ch] =
                    half_up ? (uint8_t)((sum + 2) >> 2) : sat_u8((int64_t)nearbyintf((float)sum * scale));
            } else {
                /* window in row-major order, added four at a time like OpenCV's unrolled loop */
                const float *s = (const float *)a->x + o;
                int area = a->fx * a->fy, k = 0;
                float sum = 0;
#define TAP(k) s[(k) / a->fx * in_row + (k) % a->fx * C]
                for (; k + 4 <= area; k += 4)
                    sum += TAP(k) + TAP(k + 1) + TAP(k + 2) + TAP(k + 3);
                for (; k < area; k++)
                    sum += TAP(k);
#undef TAP
                ((float *)a->y)[row * out_row + dx * C + ch] = sum * scale;
            }
        }
    }
}

/*
 * General decimation: destination cell [d s, (d+1) s) in source units covers
 * a partial first pixel, whole pixels and a partial last one; weights are
 * overlap / cell width (cell clipped at the image end; slivers under 1e-3
 * dropped, as OpenCV's table does). Rows are weighted sums of the
 * horizontally weighted source rows, in float, like OpenCV.
 */
typedef struct AreaSpan {
    int64_t first, last;     /* source range, inclusive */
    float w_first, w_mid, w_last;
    bool has_first, has_last;
} AreaSpan;

static AreaSpan area_span(int64_t d, int64_t in, double scale)
{
    double f1 = (double)d * scale, f2 = f1 + scale;
    double cell = fmin(scale, (double)in - f1);
    int64_t s1 = (int64_t)ceil(f1), s2 = (int64_t)floor(f2);
    if (s2 > in - 1)
        s2 = in - 1;
    if (s1 > s2)
        s1 = s2;
    AreaSpan a;
    a.has_first = (double)s1 - f1 > 1e-3;
    a.w_first = (float)(((double)s1 - f1) / cell);
    a.w_mid = (float)(1.0 / cell);
    a.has_last = f2 - (double)s2 > 1e-3;
    a.w_last = (float)(fmin(fmin(f2 - (double)s2, 1.0), cell) / cell);
    a.first = a.has_first ? s1 - 1 : s1;
    a.last = a.has_last ? s2 : s2 - 1;
    return a;
}

/* weight of source index s within span a (first partial, middle, last partial) */
static float span_weight(const AreaSpan *a, int64_t s)
{
    if (a->has_first && s == a->first)
        return a->w_first;
    if (a->has_last && s == a->last)
        return a->w_last;
    return a->w_mid;
}

static void area_task(void *arg, int t)
{
    const AreaCtx *a = arg;
    int64_t lo, hi;
    task_range(a->rows, a->ntasks, t, &lo, &hi);
    int64_t C = a->in.c, in_row = a->in.w * C, in_img = a->in.h * in_row, out_row = a->out.w * C;
    for (int64_t row = lo; row < hi; row++) {
        int64_t n = row / a->out.h, dy = row % a->out.h;
        AreaSpan ys = area_span(dy, a->in.h, a->sy);
        for (int64_t dx = 0; dx < a->out.w; dx++) {
            AreaSpan xs = area_span(dx, a->in.w, a->sx);
            for (int64_t ch = 0; ch < C; ch++) {
                float sum = 0;
                for (int64_t sy = ys.first; sy <= ys.last; sy++) {
                    int64_t o = n * in_img + sy * in_row + ch;
                    float buf = 0;
                    for (int64_t sx = xs.first; sx <= xs.last; sx++) {
                        float v = a->u8 ? (float)((const uint8_t *)a->x)[o + sx * C] : ((const float *)a->x)[o + sx * C];
                        buf += v * span_weight(&xs, sx);
                    }
                    sum += span_weight(&ys, sy) * buf;
                }
                if (a->u8)
                    ((uint8_t *)a->y)[row * out_row + dx * C + ch] = sat_u8((int64_t)nearbyintf(sum));
                else
                    ((float *)a->y)[row * out_row + dx * C + ch] = sum;
            }
        }
    }
}

/* Integer factor per axis as OpenCV detects it (|scale - round| < DBL_EPSILON), else 0. */
static int int_factor(double scale)
{
    double r = nearbyint(scale);
    return fabs(scale - r) < DBL_EPSILON && r >= 1 && r <= INT32_MAX ? (int)r : 0;
}

static void run_linear(DittoBackend *be, const DittoTensor *x, DittoTensor *y, bool area_mode)
{
    ResizeCtx r = { .x = x->data, .y = y->data, .in = img_dims(x), .out = img_dims(y),
                    .u8 = x->dtype == DITTO_U8, .area_mode = area_mode };
    /* cv::resize: inv_scale = out/in, scale = 1/inv_scale (not in/out) */
    r.inv_sx = (double)r.out.w / (double)r.in.w;
    r.inv_sy = (double)r.out.h / (double)r.in.h;
    r.sx = 1.0 / r.inv_sx;
    r.sy = 1.0 / r.inv_sy;
    r.rows = r.out.n * r.out.h;
    r.ntasks = task_count(r.rows);
    ditto_pool_run(be->pool, r.ntasks, linear_task, &r);
}

static void run_area(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    AreaCtx a = { .x = x->data, .y = y->data, .in = img_dims(x), .out = img_dims(y), .u8 = x->dtype == DITTO_U8 };
    a.sx = 1.0 / ((double)a.out.w / (double)a.in.w);
    a.sy = 1.0 / ((double)a.out.h / (double)a.in.h);
    a.fx = int_factor(a.sx);
    a.fy = int_factor(a.sy);
    a.rows = a.out.n * a.out.h;
    a.ntasks = task_count(a.rows);
    bool fast = a.fx && a.fy;
    ditto_pool_run(be->pool, a.ntasks, fast ? area_fast_task : area_task, &a);
}

/*
 * INTER_AREA: true area averaging only when both axes shrink (or keep) their
 * size. Otherwise OpenCV emulates it with bilinear taps whose fraction comes
 * from the cell overlap (see lin_tap's area mode): integer upscaling
 * replicates pixels, non-integer upscaling blends only across cell borders.
 */
static int cpu_resize_area(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    ImgDims in = img_dims(x), out = img_dims(y);
    if (in.w >= out.w && in.h >= out.h)
        run_area(be, x, y);
    else
        run_linear(be, x, y, true);
    return 0;
}

/*
 * INTER_LINEAR. An exact 2x decimation on both axes takes the integer area
 * path, as cv::resize does (the same value: each output is the mean of a
 * 2x2 block).
 */
/* ---- output path: paste-back blend, yuv420p ---- */

typedef struct BlendTask {
    const DittoBlendParams *p;
    const float *mask, *img;
    int64_t w;                  /* mask / img row length */
    const uint8_t *src;
    uint8_t *dst;
    int64_t W;                  /* frame row length */
} BlendTask;

static void blend_row(void *arg, int t)
{
    const BlendTask *b = arg;
    const int64_t r = b->p->y0 + t;
    const float *m = b->mask + r * b->w, *img = b->img + r * b->w * 3;
    const uint8_t *src = b->src + r * b->W * 3;
    uint8_t *dst = b->dst + r * b->W * 3;
    for (int64_t x = b->p->x0; x < b->p->x1; x++)
        for (int c = 0; c < 3; c++)
            dst[3 * x + c] = ditto_blend_px(m[x], img[3 * x + c], src[3 * x + c]);
}

static int cpu_mask_blend(DittoBackend *be, const DittoBlendParams *p, const DittoTensor *mask, const DittoTensor *img, const DittoTensor *src,
                          DittoTensor *dst)
{
    BlendTask b = { p, mask->data, img->data, mask->shape[1], src->data, dst->data, src->shape[1] };
    ditto_pool_run(be->pool, (int)(p->y1 - p->y0), blend_row, &b);
    return 0;
}

typedef struct YuvTask {
    const uint8_t *rgb;
    int w, h, ch;
    uint8_t *y, *u, *v;
} YuvTask;

#define YUV_ROWS 8   /* chroma rows per task */

static void yuv_task(void *arg, int t)
{
    const YuvTask *k = arg;
    int r0 = t * YUV_ROWS, r1 = r0 + YUV_ROWS < k->ch ? r0 + YUV_ROWS : k->ch;
    ditto_bt601_yuv420_rows(k->rgb, (ptrdiff_t)k->w * 3, k->w, k->h, r0, r1, k->y, k->w, k->u, k->v, (k->w + 1) / 2);
}

static int cpu_rgb_to_yuv420(DittoBackend *be, const DittoTensor *x, DittoTensor *y, DittoTensor *u, DittoTensor *v)
{
    YuvTask k = { x->data, (int)x->shape[1], (int)x->shape[0], (int)((x->shape[0] + 1) / 2), y->data, u->data, v->data };
    ditto_pool_run(be->pool, (k.ch + YUV_ROWS - 1) / YUV_ROWS, yuv_task, &k);
    return 0;
}

/* paste_yuv: work item j is YUV_ROWS chroma rows of one item; task t takes items t, t + ntasks, ... and its own two-row scratch (no rgb). */
typedef struct PasteTask {
    const DittoPasteParams *p;
    const float *mask;
    const void *render;
    bool f16;
    int64_t h, w, H, W, ch, cw, row_groups, nwork;
    int ntasks;
    const uint8_t *src;
    int64_t src_item;                   /* bytes from one item's frame to the next: 0 when shared */
    uint8_t *rgb, *y, *u, *v, *scratch;
    int64_t rgb_s, y_s, u_s, v_s;       /* batch strides in bytes */
    size_t scratch_task;                /* scratch bytes a task: two rgb rows; box_only: and their y, u, v */
} PasteTask;

static float render_at(const PasteTask *k, int64_t n, int c, int64_t i)
{
    int64_t at = (n * 3 + c) * k->h * k->w + i;
    return k->f16 ? ditto_half_to_f32(((const uint16_t *)k->render)[at]) : ((const float *)k->render)[at];
}

/* Frame row r of item n: the frame, and inside the box the blend of the warped render and mask (ops warp_affine, mask_blend). */
static void paste_row(const PasteTask *k, int64_t n, const double inv[6], int64_t r, uint8_t *out)
{
    const DittoPasteItem *it = &k->p->items[n];
    const uint8_t *src = k->src + n * k->src_item + r * k->W * 3;
    memcpy(out, src, (size_t)k->W * 3);
    if (r < it->y0 || r >= it->y1)
        return;
    int64_t X0, Y0;
    warp_row(inv, r, &X0, &Y0);
    for (int64_t x = it->x0; x < it->x1; x++) {
        int64_t sx, sy;
        int ax, ay;
        warp_pos(inv, X0, Y0, x, &sx, &sy, &ax, &ay);
        float m = 0.0f, img[3] = { 0.0f, 0.0f, 0.0f };   /* the border value where every tap is outside */
        if (!(sx >= k->w || sx + 1 < 0 || sy >= k->h || sy + 1 < 0)) {
            float w[4], v[4];
            int64_t tap[4];
            lerp_weights(ax, ay, w);
            for (int t = 0; t < 4; t++) {
                int64_t tx = sx + (t & 1), ty = sy + (t >> 1);
                tap[t] = tx >= 0 && tx < k->w && ty >= 0 && ty < k->h ? ty * k->w + tx : -1;
            }
            for (int t = 0; t < 4; t++)
                v[t] = tap[t] >= 0 ? k->mask[tap[t]] : 0.0f;
            m = lerp_sum(v, w);
            for (int c = 0; c < 3; c++) {
                for (int t = 0; t < 4; t++)   /* the scaled render, as an affine unary op writes it */
                    v[t] = tap[t] >= 0 ? k->p->scale * render_at(k, n, c, tap[t]) : 0.0f;
                img[c] = lerp_sum(v, w);
            }
        }
        for (int c = 0; c < 3; c++)
            out[3 * x + c] = ditto_blend_px(m, img[c], src[3 * x + c]);
    }
}

static void paste_task(void *arg, int t)
{
    const PasteTask *k = arg;
    uint8_t *scr = k->scratch ? k->scratch + (size_t)t * k->scratch_task : NULL;
    for (int64_t j = t; j < k->nwork; j += k->ntasks) {
        const int64_t n = j / k->row_groups;
        int64_t blk[4];
        ditto_paste_blocks(&k->p->items[n], k->p->box_only, k->ch, k->cw, blk);
        const int64_t bx0 = blk[2], bx1 = blk[3];
        int64_t c0 = (j % k->row_groups) * YUV_ROWS, c1 = c0 + YUV_ROWS < k->ch ? c0 + YUV_ROWS : k->ch;
        c0 = c0 > blk[0] ? c0 : blk[0];
        c1 = c1 < blk[1] ? c1 : blk[1];
        double inv[6];
        affine_inverse(k->p->items[n].m, inv);
        const int64_t W = k->W, px0 = 2 * bx0, px1 = 2 * bx1 < W ? 2 * bx1 : W;   /* the blocks' frame columns */
        for (int64_t cy = c0; cy < c1; cy++) {
            const int64_t r0 = 2 * cy, rows = r0 + 1 < k->H ? 2 : 1;
            uint8_t *yr = k->y + n * k->y_s + r0 * W, *ur = k->u + n * k->u_s + cy * k->cw, *vr = k->v + n * k->v_s + cy * k->cw;
            if (!k->p->box_only) {   /* whole rows, into the outputs */
                uint8_t *px = k->rgb ? k->rgb + n * k->rgb_s + r0 * W * 3 : scr;
                for (int64_t i = 0; i < rows; i++)
                    paste_row(k, n, inv, r0 + i, px + i * W * 3);
                /* the one or two rows as a frame of their own: its chroma row 0 is chroma row cy */
                ditto_bt601_yuv420_rows(px, (ptrdiff_t)W * 3, (int)W, (int)rows, 0, 1, yr, (ptrdiff_t)W, ur, vr, (ptrdiff_t)k->cw);
                continue;
            }
            /* the rows in scratch, then the blocks' columns out */
            uint8_t *px = scr, *sy = scr + W * 6, *su = sy + W * 2, *sv = su + k->cw;
            for (int64_t i = 0; i < rows; i++)
                paste_row(k, n, inv, r0 + i, px + i * W * 3);
            ditto_bt601_yuv420_rows(px, (ptrdiff_t)W * 3, (int)W, (int)rows, 0, 1, sy, (ptrdiff_t)W, su, sv, (ptrdiff_t)k->cw);
            for (int64_t i = 0; i < rows; i++) {
                memcpy(yr + i * W + px0, sy + i * W + px0, (size_t)(px1 - px0));
                if (k->rgb)
                    memcpy(k->rgb + n * k->rgb_s + (r0 + i) * W * 3 + px0 * 3, px + i * W * 3 + px0 * 3, (size_t)(px1 - px0) * 3);
            }
            memcpy(ur + bx0, su + bx0, (size_t)(bx1 - bx0));
            memcpy(vr + bx0, sv + bx0, (size_t)(bx1 - bx0));
        }
    }
}

static int cpu_paste_yuv(DittoBackend *be, const DittoPasteParams *p, const DittoTensor *mask, const DittoTensor *render, const DittoTensor *src,
                         DittoTensor *rgb, DittoTensor *y, DittoTensor *u, DittoTensor *v)
{
    const int o = src->ndim - 3;
    PasteTask k = { .p = p, .mask = mask->data, .render = render->data, .f16 = render->dtype == DITTO_F16, .h = render->shape[2],
                    .w = render->shape[3], .H = src->shape[o], .W = src->shape[o + 1], .src = src->data,
                    .rgb = rgb ? rgb->data : NULL, .y = y->data, .u = u->data, .v = v->data };
    k.ch = (k.H + 1) / 2;
    k.cw = (k.W + 1) / 2;
    k.row_groups = (k.ch + YUV_ROWS - 1) / YUV_ROWS;
    k.nwork = render->shape[0] * k.row_groups;
    k.ntasks = ditto_pool_size(be->pool);
    if (k.ntasks < 1 || k.ntasks > k.nwork)
        k.ntasks = k.ntasks < 1 ? 1 : (int)k.nwork;
    k.src_item = o ? k.H * k.W * 3 : 0;
    k.rgb_s = rgb ? rgb->stride[0] : 0;
    k.y_s = y->stride[0];
    k.u_s = u->stride[0];
    k.v_s = v->stride[0];
    k.scratch_task = (size_t)k.W * (p->box_only ? 8 : 6) + (p->box_only ? 2 * (size_t)k.cw : 0);
    if ((!rgb || p->box_only) && !(k.scratch = ditto_malloc((size_t)k.ntasks * k.scratch_task)))
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op paste_yuv: out of memory for row buffers");
    ditto_pool_run(be->pool, k.ntasks, paste_task, &k);
    ditto_free(k.scratch);
    return 0;
}

static int cpu_resize_bilinear(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    ImgDims in = img_dims(x), out = img_dims(y);
    double sx = 1.0 / ((double)out.w / (double)in.w), sy = 1.0 / ((double)out.h / (double)in.h);
    if (int_factor(sx) == 2 && int_factor(sy) == 2)
        run_area(be, x, y);
    else
        run_linear(be, x, y, false);
    return 0;
}

void ditto_cpu_init_image(DittoOps *ops)
{
    ops->warp_affine = cpu_warp_affine;
    ops->resize_area = cpu_resize_area;
    ops->resize_bilinear = cpu_resize_bilinear;
    ops->mask_blend = cpu_mask_blend;
    ops->rgb_to_yuv420 = cpu_rgb_to_yuv420;
    ops->paste_yuv = cpu_paste_yuv;
}
