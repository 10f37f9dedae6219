/*
 * CUDA image ops with OpenCV semantics (ditto-architecture.md section 6.3):
 * cv2.warpAffine INTER_LINEAR + BORDER_CONSTANT, cv2.resize INTER_AREA and
 * INTER_LINEAR. Images are (H,W,C) or (N,H,W,C), uint8 or float32, any
 * channel count; one thread per destination pixel, looping over channels.
 *
 * Bit-identical to src/backend/cpu/image.c: every per-row/per-column
 * coefficient is computed on the device with the CPU's double and float
 * operations in the CPU's order, using the unfused _rn intrinsics (nvcc
 * would otherwise contract a*b+c into an FMA, which rounds once), rint for
 * nearbyint, and the same integer fixed-point sums. The 2x3 inverse and the
 * scale factors are computed on the host exactly as the CPU does. Nothing is
 * uploaded per call, so the ops can be captured in a CUDA graph.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

extern "C" {
#include "core/bt601.h"
}

#define IMG_THREADS 256

#define GRID_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

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

static int image_device(DittoBackend *be, const char *op, const DittoTensor *x, const DittoTensor *y)
{
    if (x->device != DITTO_DEVICE_CUDA || y->device != DITTO_DEVICE_CUDA)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: images must be on the cuda device", op);
    return 0;
}

/* cvRound: nearest, ties to even, saturated to int (host and device). */
static __host__ __device__ __forceinline__ int64_t round_sat(double v)
{
    if (v != v)
        return 0;
    if (v <= (double)INT32_MIN)
        return INT32_MIN;
    if (v >= (double)INT32_MAX)
        return INT32_MAX;
    return (int64_t)rint(v);
}

static __host__ __device__ __forceinline__ uint8_t sat_u8(int64_t v)
{
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* floor(v / 2^s) without relying on the sign behaviour of >> */
static __device__ __forceinline__ int64_t floor_shift(int64_t v, int s)
{
    int64_t d = (int64_t)1 << s;
    return v >= 0 ? v / d : -((-v + d - 1) / d);
}

/* ---- warp_affine ---- */

/* The inverse map destination -> source of a 2x3 M (host), as cv::invertAffineTransform and the CPU: a11 a12 a21 a22 b1 b2. */
typedef struct Inv {
    double a[6];
} Inv;

static Inv affine_inverse(const double m[6])
{
    Inv v;
    double D = 1.0 / (m[0] * m[4] - m[1] * m[3]);
    v.a[0] = m[4] * D;
    v.a[1] = -m[1] * D;
    v.a[2] = -m[3] * D;
    v.a[3] = m[0] * D;
    v.a[4] = -v.a[0] * m[2] - v.a[1] * m[5];
    v.a[5] = -v.a[2] * m[2] - v.a[3] * m[5];
    return v;
}

/* Source position of destination pixel (dx, dy): pixel (sx, sy) plus (ax, ay) / 32, in the CPU's fixed point. */
static __device__ __forceinline__ void warp_pos(const Inv &v, int64_t dy, int64_t dx, int64_t &sx, int64_t &sy, int &ax, int &ay)
{
    /* 1/1024-pixel row origin, +16 rounds the later >> 5 to 1/32 pixel */
    int64_t X0 = round_sat(__dmul_rn(__dadd_rn(__dmul_rn(v.a[1], (double)dy), v.a[4]), 1024.0)) + 16;
    int64_t Y0 = round_sat(__dmul_rn(__dadd_rn(__dmul_rn(v.a[3], (double)dy), v.a[5]), 1024.0)) + 16;
    int64_t X = floor_shift(X0 + round_sat(__dmul_rn(__dmul_rn(v.a[0], (double)dx), 1024.0)), 5);
    int64_t Y = floor_shift(Y0 + round_sat(__dmul_rn(__dmul_rn(v.a[2], (double)dx), 1024.0)), 5);
    sx = floor_shift(X, 5);
    sy = floor_shift(Y, 5);
    ax = (int)(X - sx * 32);
    ay = (int)(Y - sy * 32);
}

/* OpenCV's float table: products of (1 - f) and f with f = a/32, exact in float */
static __device__ __forceinline__ void lerp_weights(int ax, int ay, float w[4])
{
    float fx = (float)ax * (1.0f / 32), fy = (float)ay * (1.0f / 32);
    w[0] = __fmul_rn(1.0f - fy, 1.0f - fx);
    w[1] = __fmul_rn(1.0f - fy, fx);
    w[2] = __fmul_rn(fy, 1.0f - fx);
    w[3] = __fmul_rn(fy, fx);
}

/* taps in the order (y0,x0), (y0,x1), (y1,x0), (y1,x1), added left to right */
static __device__ __forceinline__ float lerp_sum(const float v[4], const float w[4])
{
    float acc = __fadd_rn(__fmul_rn(v[0], w[0]), __fmul_rn(v[1], w[1]));
    acc = __fadd_rn(acc, __fmul_rn(v[2], w[2]));
    return __fadd_rn(acc, __fmul_rn(v[3], w[3]));
}

typedef struct WarpArgs {
    const void *x;
    void *y;
    ImgDims in, out;
    bool u8;
    Inv inv;
    float cval_f;
    uint8_t cval_u8;
    int64_t total;                       /* N * out H * out W */
} WarpArgs;

/* Destination pixel (dx, dy) of item n, flat index t = (n * out H + dy) * out W + dx. */
static __device__ __forceinline__ void warp_px(const WarpArgs &g, int64_t n, int64_t dy, int64_t dx, int64_t t)
{
    const int64_t W = g.in.w, H = g.in.h, C = g.in.c;
    int64_t sx, sy;
    int ax, ay;
    warp_pos(g.inv, dy, dx, sx, sy, ax, ay);
    int64_t src = n * H * W * C, dst = t * C;
    /* a pixel whose four taps are all outside is the border value itself */
    bool all_out = sx >= W || sx + 1 < 0 || sy >= H || sy + 1 < 0;
    int64_t tap[4];
    for (int k = 0; k < 4; k++) {
        int64_t tx = sx + (k & 1), ty = sy + (k >> 1);
        tap[k] = tx >= 0 && tx < W && ty >= 0 && ty < H ? src + (ty * W + tx) * C : -1;
    }
    if (g.u8) {
        const uint8_t *x = (const uint8_t *)g.x;
        uint8_t *y = (uint8_t *)g.y;
        if (all_out) {
            for (int64_t ch = 0; ch < C; ch++)
                y[dst + ch] = g.cval_u8;
            return;
        }
        /* round(w * 32768) of the bilinear weights: exact integers summing to 32768 */
        const int32_t w[4] = { (32 - ax) * (32 - ay) * 32, ax * (32 - ay) * 32, (32 - ax) * ay * 32, ax * ay * 32 };
        for (int64_t ch = 0; ch < C; ch++) {
            int32_t s = 0;
            for (int k = 0; k < 4; k++)
                s += w[k] * (tap[k] >= 0 ? (int32_t)x[tap[k] + ch] : (int32_t)g.cval_u8);
            y[dst + ch] = sat_u8((s + (1 << 14)) >> 15);
        }
    } else {
        const float *x = (const float *)g.x;
        float *y = (float *)g.y;
        if (all_out) {
            for (int64_t ch = 0; ch < C; ch++)
                y[dst + ch] = g.cval_f;
            return;
        }
        float w[4];
        lerp_weights(ax, ay, w);
        for (int64_t ch = 0; ch < C; ch++) {
            float v[4];
            for (int k = 0; k < 4; k++)
                v[k] = tap[k] >= 0 ? x[tap[k] + ch] : g.cval_f;
            y[dst + ch] = lerp_sum(v, w);
        }
    }
}

static __global__ void warp_affine_kernel(const __grid_constant__ WarpArgs g)
{
    GRID_LOOP(t, g.total) {
        int64_t dx = t % g.out.w, r = t / g.out.w;   /* r = n * out H + dy */
        int64_t n = r / g.out.h;
        warp_px(g, n, r - n * g.out.h, dx, t);
    }
}

/* Grid (x tiles, n * out H rows): the same pixels without 64-bit divisions per pixel (paste-back: 2 Mpixel a frame). */
static __global__ void warp_affine_rows(const __grid_constant__ WarpArgs g)
{
    const int64_t r = blockIdx.y, n = r / g.out.h;
    for (int64_t dx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; dx < g.out.w; dx += (int64_t)gridDim.x * blockDim.x)
        warp_px(g, n, r - n * g.out.h, dx, r * g.out.w + dx);
}

static int cuda_warp_affine(DittoBackend *be, const DittoWarpAffineParams *p, const DittoTensor *x, DittoTensor *y)
{
    DITTO_TRY(image_device(be, "warp_affine", x, y));
    WarpArgs g;
    memset(&g, 0, sizeof g);
    g.x = x->data;
    g.y = y->data;
    g.in = img_dims(x);
    g.out = img_dims(y);
    g.u8 = x->dtype == DITTO_U8;
    g.inv = affine_inverse(p->m);
    g.cval_f = p->border_value;
    g.cval_u8 = sat_u8(round_sat(p->border_value));
    g.total = g.out.n * g.out.h * g.out.w;
    if (g.total == 0 || g.out.c == 0)
        return 0;
    const int64_t rows = g.out.n * g.out.h;
    if (rows <= 65535)
        warp_affine_rows<<<dim3((unsigned)((g.out.w + IMG_THREADS - 1) / IMG_THREADS), (unsigned)rows), IMG_THREADS, 0,
                           ditto_cuda(be)->stream>>>(g);
    else
        warp_affine_kernel<<<ditto_cuda_blocks(g.total, IMG_THREADS), IMG_THREADS, 0, ditto_cuda(be)->stream>>>(g);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- resize: INTER_LINEAR and the linear emulation of INTER_AREA upscaling ---- */

/*
 * Coefficients of destination index d along one axis, as cv::resize computes
 * them (see lin_tap in the CPU file): linear mode uses half-pixel centres
 * rounded to float; area mode floor(d in/out) and the cell-overlap fraction.
 * clamp_edges is the horizontal-pass rule.
 */
typedef struct LinTap {
    int64_t i0, i1;
    float f;                 /* weight of i1; i0 gets 1 - f */
} LinTap;

static __device__ LinTap lin_tap(int64_t d, int64_t in, double scale, double inv_scale, bool area_mode, bool clamp_edges)
{
    int64_t s;
    float f;
    if (!area_mode) {
        f = __double2float_rn(__dsub_rn(__dmul_rn(__dadd_rn((double)d, 0.5), scale), 0.5));
        s = (int64_t)floorf(f);
        f = __fsub_rn(f, (float)s);
    } else {
        s = (int64_t)floor(__dmul_rn((double)d, scale));
        f = __double2float_rn(__dsub_rn((double)(d + 1), __dmul_rn((double)(s + 1), inv_scale)));
        f = f <= 0 ? 0.0f : __fsub_rn(f, floorf(f));
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
static __device__ __forceinline__ void fixed_weights(float f, int32_t *w0, int32_t *w1)
{
    *w0 = (int32_t)rintf(__fmul_rn(__fsub_rn(1.0f, f), 2048.0f));
    *w1 = (int32_t)rintf(__fmul_rn(f, 2048.0f));
}

typedef struct ResizeArgs {
    const void *x;
    void *y;
    ImgDims in, out;
    bool u8, area_mode;
    double sx, sy, inv_sx, inv_sy;       /* in/out and out/in per axis */
    int64_t total;                       /* N * out H * out W */
} ResizeArgs;

static __global__ void resize_linear_kernel(const __grid_constant__ ResizeArgs a)
{
    const int64_t C = a.in.c, in_row = a.in.w * C, in_img = a.in.h * in_row;
    GRID_LOOP(t, a.total) {
        int64_t dx = t % a.out.w, row = t / a.out.w;
        int64_t n = row / a.out.h, dy = row - n * a.out.h;
        LinTap ty = lin_tap(dy, a.in.h, a.sy, a.inv_sy, a.area_mode, false);
        LinTap tx = lin_tap(dx, a.in.w, a.sx, a.inv_sx, a.area_mode, true);
        int64_t o0 = n * in_img + ty.i0 * in_row, o1 = n * in_img + ty.i1 * in_row;
        int64_t c0 = tx.i0 * C, c1 = tx.i1 * C;
        /* at the right edge both taps are the last pixel: one tap, as OpenCV's xmax */
        bool one = tx.i0 == tx.i1;
        int64_t dst = t * C;
        if (a.u8) {
            const uint8_t *s0 = (const uint8_t *)a.x + o0, *s1 = (const uint8_t *)a.x + o1;
            uint8_t *d = (uint8_t *)a.y + dst;
            int32_t a0, a1, b0, b1;
            fixed_weights(tx.f, &a0, &a1);
            fixed_weights(ty.f, &b0, &b1);
            for (int64_t ch = 0; ch < C; ch++) {
                int32_t h0 = one ? s0[c0 + ch] * 2048 : s0[c0 + ch] * a0 + s0[c1 + ch] * a1;
                int32_t h1 = one ? s1[c0 + ch] * 2048 : s1[c0 + ch] * a0 + s1[c1 + ch] * a1;
                /* OpenCV's SIMD vertical pass, as src/backend/cpu/image.c */
                d[ch] = sat_u8(((((h0 >> 4) * b0) >> 16) + (((h1 >> 4) * b1) >> 16) + 2) >> 2);
            }
        } else {
            const float *s0 = (const float *)a.x + o0, *s1 = (const float *)a.x + o1;
            float *d = (float *)a.y + dst;
            float a0 = __fsub_rn(1.0f, tx.f), a1 = tx.f, b0 = __fsub_rn(1.0f, ty.f), b1 = ty.f;
            for (int64_t ch = 0; ch < C; ch++) {
                float h0 = one ? s0[c0 + ch] : __fadd_rn(__fmul_rn(s0[c0 + ch], a0), __fmul_rn(s0[c1 + ch], a1));
                float h1 = one ? s1[c0 + ch] : __fadd_rn(__fmul_rn(s1[c0 + ch], a0), __fmul_rn(s1[c1 + ch], a1));
                d[ch] = __fadd_rn(__fmul_rn(h0, b0), __fmul_rn(h1, b1));
            }
        }
    }
}

/* ---- resize: INTER_AREA decimation ---- */

typedef struct AreaArgs {
    const void *x;
    void *y;
    ImgDims in, out;
    bool u8;
    int fx, fy;              /* integer factors, 0 for the general path */
    float scale;             /* 1 / (fx fy), fast path */
    double sx, sy;           /* in/out per axis */
    int64_t total;           /* N * out H * out W */
} AreaArgs;

/*
 * Integer factors: the plain box mean. uint8 2x2 with 1, 3 or 4 channels is
 * (a+b+c+d+2)>>2; other uint8 cases round sum * (1/area) in float to nearest
 * even; float sums in window order, four at a time, times 1/area.
 */
static __global__ void area_fast_kernel(const __grid_constant__ AreaArgs a)
{
    const int64_t C = a.in.c, in_row = a.in.w * C, in_img = a.in.h * in_row;
    const bool half_up = a.u8 && a.fx == 2 && a.fy == 2 && (C == 1 || C == 3 || C == 4);
    const int area = a.fx * a.fy;
    GRID_LOOP(t, a.total) {
        int64_t dx = t % a.out.w, row = t / a.out.w;
        int64_t n = row / a.out.h, dy = row - n * a.out.h;
        int64_t base = n * in_img + dy * a.fy * in_row + dx * a.fx * C;
        for (int64_t ch = 0; ch < C; ch++) {
            int64_t o = base + ch;
            if (a.u8) {
                const uint8_t *s = (const uint8_t *)a.x + o;
                int32_t sum = 0;
                for (int i = 0; i < a.fy; i++)
                    for (int j = 0; j < a.fx; j++)
                        sum += s[i * in_row + j * C];
                ((uint8_t *)a.y)[t * C + ch] = half_up ? (uint8_t)((sum + 2) >> 2) : sat_u8((int64_t)rintf(__fmul_rn((float)sum, a.scale)));
            } else {
                const float *s = (const float *)a.x + o;
                int k = 0;
                float sum = 0;
#define TAP(k) s[(int64_t)((k) / a.fx) * in_row + (int64_t)((k) % a.fx) * C]
                for (; k + 4 <= area; k += 4)
                    sum += TAP(k) + TAP(k + 1) + TAP(k + 2) + TAP(k + 3);
                for (; k < area; k++)
                    sum += TAP(k);
#undef TAP
                ((float *)a.y)[t * C + ch] = __fmul_rn(sum, a.scale);
            }
        }
    }
}

/*
 * General decimation: destination cell [d s, (d+1) s) covers a partial first
 * pixel, whole pixels and a partial last one; weights are overlap / cell
 * width (slivers under 1e-3 dropped). Rows are weighted sums of the
 * horizontally weighted source rows, in float, like OpenCV.
 */
typedef struct AreaSpan {
    int64_t first, last;     /* source range, inclusive */
    float w_first, w_mid, w_last;
    bool has_first, has_last;
} AreaSpan;

static __device__ AreaSpan area_span(int64_t d, int64_t in, double scale)
{
    double f1 = __dmul_rn((double)d, scale), f2 = __dadd_rn(f1, scale);
    double cell = fmin(scale, __dsub_rn((double)in, f1));
    int64_t s1 = (int64_t)ceil(f1), s2 = (int64_t)floor(f2);
    if (s2 > in - 1)
        s2 = in - 1;
    if (s1 > s2)
        s1 = s2;
    AreaSpan a;
    double lead = __dsub_rn((double)s1, f1), tail = __dsub_rn(f2, (double)s2);
    a.has_first = lead > 1e-3;
    a.w_first = __double2float_rn(__ddiv_rn(lead, cell));
    a.w_mid = __double2float_rn(__ddiv_rn(1.0, cell));
    a.has_last = tail > 1e-3;
    a.w_last = __double2float_rn(__ddiv_rn(fmin(fmin(tail, 1.0), cell), cell));
    a.first = a.has_first ? s1 - 1 : s1;
    a.last = a.has_last ? s2 : s2 - 1;
    return a;
}

static __device__ __forceinline__ float span_weight(const AreaSpan *a, int64_t s)
{
    if (a->has_first && s == a->first)
        return a->w_first;
    if (a->has_last && s == a->last)
        return a->w_last;
    return a->w_mid;
}

static __global__ void area_kernel(const __grid_constant__ AreaArgs a)
{
    const int64_t C = a.in.c, in_row = a.in.w * C, in_img = a.in.h * in_row;
    GRID_LOOP(t, a.total) {
        int64_t dx = t % a.out.w, row = t / a.out.w;
        int64_t n = row / a.out.h, dy = row - n * a.out.h;
        AreaSpan ys = area_span(dy, a.in.h, a.sy);
        AreaSpan xs = area_span(dx, a.in.w, a.sx);
        for (int64_t ch = 0; ch < C; ch++) {
            float sum = 0;
            for (int64_t sy = ys.first; sy <= ys.last; sy++) {
                int64_t o = n * in_img + sy * in_row + ch;
                float buf = 0;
                for (int64_t sx = xs.first; sx <= xs.last; sx++) {
                    float v = a.u8 ? (float)((const uint8_t *)a.x)[o + sx * C] : ((const float *)a.x)[o + sx * C];
                    buf = __fadd_rn(buf, __fmul_rn(v, span_weight(&xs, sx)));
                }
                sum = __fadd_rn(sum, __fmul_rn(span_weight(&ys, sy), buf));
            }
            if (a.u8)
                ((uint8_t *)a.y)[t * C + ch] = sat_u8((int64_t)rintf(sum));
            else
                ((float *)a.y)[t * C + ch] = sum;
        }
    }
}

/* Integer factor per axis as OpenCV detects it (|scale - round| < DBL_EPSILON), else 0. */
static int int_factor(double scale)
{
    double r = nearbyint(scale);
    return fabs(scale - r) < DBL_EPSILON && r >= 1 && r <= INT32_MAX ? (int)r : 0;
}

static int run_linear(DittoBackend *be, const DittoTensor *x, DittoTensor *y, bool area_mode)
{
    ResizeArgs r;
    memset(&r, 0, sizeof r);
    r.x = x->data;
    r.y = y->data;
    r.in = img_dims(x);
    r.out = img_dims(y);
    r.u8 = x->dtype == DITTO_U8;
    r.area_mode = area_mode;
    /* cv::resize: inv_scale = out/in, scale = 1/inv_scale (not in/out) */
    r.inv_sx = (double)r.out.w / (double)r.in.w;
    r.inv_sy = (double)r.out.h / (double)r.in.h;
    r.sx = 1.0 / r.inv_sx;
    r.sy = 1.0 / r.inv_sy;
    r.total = r.out.n * r.out.h * r.out.w;
    if (r.total == 0 || r.out.c == 0)
        return 0;
    resize_linear_kernel<<<ditto_cuda_blocks(r.total, IMG_THREADS), IMG_THREADS, 0, ditto_cuda(be)->stream>>>(r);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

static int run_area(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    AreaArgs a;
    memset(&a, 0, sizeof a);
    a.x = x->data;
    a.y = y->data;
    a.in = img_dims(x);
    a.out = img_dims(y);
    a.u8 = x->dtype == DITTO_U8;
    a.sx = 1.0 / ((double)a.out.w / (double)a.in.w);
    a.sy = 1.0 / ((double)a.out.h / (double)a.in.h);
    a.fx = int_factor(a.sx);
    a.fy = int_factor(a.sy);
    a.total = a.out.n * a.out.h * a.out.w;
    if (a.total == 0 || a.out.c == 0)
        return 0;
    cudaStream_t st = ditto_cuda(be)->stream;
    if (a.fx && a.fy) {
        a.scale = 1.0f / (float)(a.fx * a.fy);
        area_fast_kernel<<<ditto_cuda_blocks(a.total, IMG_THREADS), IMG_THREADS, 0, st>>>(a);
    } else {
        area_kernel<<<ditto_cuda_blocks(a.total, IMG_THREADS), IMG_THREADS, 0, st>>>(a);
    }
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/*
 * INTER_AREA: true area averaging only when both axes shrink (or keep) their
 * size; otherwise OpenCV's bilinear emulation (lin_tap's area mode).
 */
static int cuda_resize_area(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    DITTO_TRY(image_device(be, "resize_area", x, y));
    ImgDims in = img_dims(x), out = img_dims(y);
    if (in.w >= out.w && in.h >= out.h)
        return run_area(be, x, y);
    return run_linear(be, x, y, true);
}

/* INTER_LINEAR; an exact 2x decimation on both axes takes the integer area path, as cv::resize does. */
static int cuda_resize_bilinear(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    DITTO_TRY(image_device(be, "resize_bilinear", x, y));
    ImgDims in = img_dims(x), out = img_dims(y);
    double sx = 1.0 / ((double)out.w / (double)in.w), sy = 1.0 / ((double)out.h / (double)in.h);
    if (int_factor(sx) == 2 && int_factor(sy) == 2)
        return run_area(be, x, y);
    return run_linear(be, x, y, false);
}

/* ---- output path: paste-back blend, yuv420p (core/bt601.h: the CPU's arithmetic) ---- */

static __device__ __forceinline__ void blend_px(const float *mask, const float *img, int64_t w, const uint8_t *src, uint8_t *dst, int64_t W,
                                                int64_t r, int64_t x)
{
    float m = mask[r * w + x];
    const float *pi = img + (r * w + x) * 3;
    const uint8_t *ps = src + (r * W + x) * 3;
    uint8_t *pd = dst + (r * W + x) * 3;
    for (int c = 0; c < 3; c++)
        pd[c] = ditto_blend_px(m, pi[c], ps[c]);
}

static __global__ void k_mask_blend(const float *mask, const float *img, int64_t w, const uint8_t *src, uint8_t *dst, int64_t W, int64_t y0,
                                    int64_t x0, int64_t bw, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        blend_px(mask, img, w, src, dst, W, y0 + i / bw, x0 + i % bw);
}

/* Grid (x tiles, box rows): no 64-bit division per pixel. */
static __global__ void k_mask_blend_rows(const float *mask, const float *img, int64_t w, const uint8_t *src, uint8_t *dst, int64_t W,
                                         int64_t y0, int64_t x0, int64_t bw)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < bw; i += (int64_t)gridDim.x * blockDim.x)
        blend_px(mask, img, w, src, dst, W, y0 + blockIdx.y, x0 + i);
}

static int cuda_mask_blend(DittoBackend *be, const DittoBlendParams *p, const DittoTensor *mask, const DittoTensor *img, const DittoTensor *src,
                           DittoTensor *dst)
{
    const int64_t bw = p->x1 - p->x0, bh = p->y1 - p->y0, n = bh * bw;
    if (n <= 0)
        return 0;
    if (bh <= 65535)
        k_mask_blend_rows<<<dim3((unsigned)((bw + 255) / 256), (unsigned)bh), 256, 0, ditto_cuda(be)->stream>>>(
            (const float *)mask->data, (const float *)img->data, mask->shape[1], (const uint8_t *)src->data, (uint8_t *)dst->data,
            src->shape[1], p->y0, p->x0, bw);
    else
        k_mask_blend<<<ditto_cuda_blocks(n, 256), 256, 0, ditto_cuda(be)->stream>>>((const float *)mask->data, (const float *)img->data,
                                                                                  mask->shape[1], (const uint8_t *)src->data,
                                                                                  (uint8_t *)dst->data, src->shape[1], p->y0, p->x0, bw, n);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* One thread per 2x2 block: its (up to) four luma values and one chroma pair; grid (x tiles, chroma rows). */
static __global__ void k_yuv420(const uint8_t *rgb, int w, int h, uint8_t *py, uint8_t *pu, uint8_t *pv, int cw, int ch)
{
    for (int cy = blockIdx.y; cy < ch; cy += gridDim.y) {
        const int y0 = 2 * cy, y1 = y0 + 1 < h ? y0 + 1 : y0;
        for (int cx = blockIdx.x * blockDim.x + threadIdx.x; cx < cw; cx += gridDim.x * blockDim.x) {
            const int64_t i = (int64_t)cy * cw + cx;
            const int x0 = 2 * cx, x1 = x0 + 1 < w ? x0 + 1 : x0;
            const uint8_t *a = rgb + ((int64_t)y0 * w + x0) * 3, *b = rgb + ((int64_t)y0 * w + x1) * 3;
            const uint8_t *c = rgb + ((int64_t)y1 * w + x0) * 3, *d = rgb + ((int64_t)y1 * w + x1) * 3;
            py[(int64_t)y0 * w + x0] = ditto_bt601_y(a[0], a[1], a[2]);
            if (x1 != x0)
                py[(int64_t)y0 * w + x1] = ditto_bt601_y(b[0], b[1], b[2]);
            if (y1 != y0) {
                py[(int64_t)y1 * w + x0] = ditto_bt601_y(c[0], c[1], c[2]);
                if (x1 != x0)
                    py[(int64_t)y1 * w + x1] = ditto_bt601_y(d[0], d[1], d[2]);
            }
            int32_t rs = a[0] + b[0] + c[0] + d[0], gs = a[1] + b[1] + c[1] + d[1], bs = a[2] + b[2] + c[2] + d[2];
            pu[i] = ditto_bt601_cb(rs, gs, bs);
            pv[i] = ditto_bt601_cr(rs, gs, bs);
        }
    }
}

static int cuda_rgb_to_yuv420(DittoBackend *be, const DittoTensor *x, DittoTensor *y, DittoTensor *u, DittoTensor *v)
{
    const int h = (int)x->shape[0], w = (int)x->shape[1], cw = (w + 1) / 2, ch = (h + 1) / 2;
    if (cw < 1 || ch < 1)
        return 0;
    const dim3 grid((unsigned)((cw + 255) / 256), (unsigned)(ch < 65535 ? ch : 65535));
    k_yuv420<<<grid, 256, 0, ditto_cuda(be)->stream>>>((const uint8_t *)x->data, w, h, (uint8_t *)y->data, (uint8_t *)u->data,
                                                     (uint8_t *)v->data, cw, ch);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- paste_yuv: paste-back and yuv420p in one pass ---- */

#define PASTE_MAX 16   /* items a launch: their maps, boxes and block ranges travel as kernel parameters (1.3 KB of the 4 KB) */

typedef struct PasteArgs {
    const float *mask;
    const void *render;
    bool f16;
    int h, w, H, W, ch, cw;
    float scale;
    const uint8_t *src;
    int64_t src_item;                    /* bytes from one item's frame to the next: 0 when shared */
    uint8_t *rgb, *y, *u, *v;            /* item 0 of this launch */
    int64_t rgb_s, y_s, u_s, v_s;        /* batch strides in bytes */
    Inv inv[PASTE_MAX];
    int box[PASTE_MAX][4];               /* y0, y1, x0, x1 */
    int blk[PASTE_MAX][4];               /* the chroma blocks written: rows [0], [1), columns [2], [3) */
} PasteArgs;

/* Frame pixel (r, x) of item n: the frame, and inside the box the blend of the warped render and mask, as the ops in turn. */
static __device__ __forceinline__ void paste_px(const PasteArgs &g, int n, int r, int x, const uint8_t *src, uint8_t out[3])
{
    const uint8_t *s = src + ((int64_t)r * g.W + x) * 3;
    const int *b = g.box[n];
    if (r < b[0] || r >= b[1] || x < b[2] || x >= b[3]) {
        out[0] = s[0];
        out[1] = s[1];
        out[2] = s[2];
        return;
    }
    int64_t sx, sy;
    int ax, ay;
    warp_pos(g.inv[n], r, x, sx, sy, ax, ay);
    float m = 0.0f, img[3] = { 0.0f, 0.0f, 0.0f };   /* the border value where every tap is outside */
    if (!(sx >= g.w || sx + 1 < 0 || sy >= g.h || sy + 1 < 0)) {
        float w[4], v[4];
        int64_t tap[4];
        lerp_weights(ax, ay, w);
        for (int k = 0; k < 4; k++) {
            int64_t tx = sx + (k & 1), ty = sy + (k >> 1);
            tap[k] = tx >= 0 && tx < g.w && ty >= 0 && ty < g.h ? ty * g.w + tx : -1;
        }
        for (int k = 0; k < 4; k++)
            v[k] = tap[k] >= 0 ? g.mask[tap[k]] : 0.0f;
        m = lerp_sum(v, w);
        const int64_t plane = (int64_t)g.h * g.w, item = (int64_t)n * 3 * plane;
        for (int c = 0; c < 3; c++) {
            for (int k = 0; k < 4; k++) {   /* the scaled render, as an affine unary op writes it */
                int64_t at = item + c * plane + tap[k];
                float t = tap[k] < 0 ? 0.0f : g.f16 ? __half2float(((const __half *)g.render)[at]) : ((const float *)g.render)[at];
                v[k] = tap[k] >= 0 ? __fmul_rn(g.scale, t) : 0.0f;
            }
            img[c] = lerp_sum(v, w);
        }
    }
    for (int c = 0; c < 3; c++)
        out[c] = ditto_blend_px(m, img[c], s[c]);
}

/* One thread per 2x2 block of one item (grid: x tiles, chroma rows, items) in its block range: its pixels, their luma, one chroma pair. */
static __global__ void k_paste_yuv(const __grid_constant__ PasteArgs g)
{
    const int n = blockIdx.z;
    const int *blk = g.blk[n];
    const uint8_t *src = g.src + n * g.src_item;
    uint8_t *rgb = g.rgb ? g.rgb + n * g.rgb_s : NULL, *py = g.y + n * g.y_s;
    for (int cy = blk[0] + blockIdx.y; cy < blk[1]; cy += gridDim.y) {
        const int y0 = 2 * cy, y1 = y0 + 1 < g.H ? y0 + 1 : y0;
        for (int cx = blk[2] + blockIdx.x * blockDim.x + threadIdx.x; cx < blk[3]; cx += gridDim.x * blockDim.x) {
            const int x0 = 2 * cx, x1 = x0 + 1 < g.W ? x0 + 1 : x0;
            uint8_t p[4][3];   /* (y0,x0), (y0,x1), (y1,x0), (y1,x1); an odd edge repeats its pixel */
            const int rr[4] = { y0, y0, y1, y1 }, xx[4] = { x0, x1, x0, x1 };
            int32_t rs = 0, gs = 0, bs = 0;
            for (int k = 0; k < 4; k++) {
                const int from = (k & 1) && x1 == x0 ? k - 1 : (k >> 1) && y1 == y0 ? k - 2 : -1;
                if (from >= 0) {
                    p[k][0] = p[from][0];
                    p[k][1] = p[from][1];
                    p[k][2] = p[from][2];
                } else {
                    paste_px(g, n, rr[k], xx[k], src, p[k]);
                    const int64_t at = (int64_t)rr[k] * g.W + xx[k];
                    py[at] = ditto_bt601_y(p[k][0], p[k][1], p[k][2]);
                    if (rgb) {
                        rgb[at * 3] = p[k][0];
                        rgb[at * 3 + 1] = p[k][1];
                        rgb[at * 3 + 2] = p[k][2];
                    }
                }
                rs += p[k][0];
                gs += p[k][1];
                bs += p[k][2];
            }
            const int64_t i = (int64_t)cy * g.cw + cx;
            g.u[n * g.u_s + i] = ditto_bt601_cb(rs, gs, bs);
            g.v[n * g.v_s + i] = ditto_bt601_cr(rs, gs, bs);
        }
    }
}

static int cuda_paste_yuv(DittoBackend *be, const DittoPasteParams *p, const DittoTensor *mask, const DittoTensor *render, const DittoTensor *src,
                          DittoTensor *rgb, DittoTensor *y, DittoTensor *u, DittoTensor *v)
{
    const int o = src->ndim - 3;
    const int64_t N = render->shape[0];
    PasteArgs g;
    memset(&g, 0, sizeof g);
    g.mask = (const float *)mask->data;
    g.f16 = render->dtype == DITTO_F16;
    g.h = (int)render->shape[2];
    g.w = (int)render->shape[3];
    g.H = (int)src->shape[o];
    g.W = (int)src->shape[o + 1];
    g.ch = (g.H + 1) / 2;
    g.cw = (g.W + 1) / 2;
    g.scale = p->scale;
    g.src_item = o ? (int64_t)g.H * g.W * 3 : 0;
    g.rgb_s = rgb ? rgb->stride[0] : 0;
    g.y_s = y->stride[0];
    g.u_s = u->stride[0];
    g.v_s = v->stride[0];
    const size_t esz = g.f16 ? 2 : 4;
    for (int64_t n0 = 0; n0 < N; n0 += PASTE_MAX) {
        const int64_t k = N - n0 < PASTE_MAX ? N - n0 : PASTE_MAX;
        g.render = (const char *)render->data + (size_t)(n0 * 3 * g.h * g.w) * esz;
        g.src = (const uint8_t *)src->data + n0 * g.src_item;
        g.rgb = rgb ? (uint8_t *)rgb->data + n0 * g.rgb_s : NULL;
        g.y = (uint8_t *)y->data + n0 * g.y_s;
        g.u = (uint8_t *)u->data + n0 * g.u_s;
        g.v = (uint8_t *)v->data + n0 * g.v_s;
        int rows = 0, cols = 0;   /* the largest block range */
        for (int64_t i = 0; i < k; i++) {
            const DittoPasteItem *it = &p->items[n0 + i];
            int *b = g.blk[i];
            int64_t blk[4];
            g.inv[i] = affine_inverse(it->m);
            g.box[i][0] = (int)it->y0;
            g.box[i][1] = (int)it->y1;
            g.box[i][2] = (int)it->x0;
            g.box[i][3] = (int)it->x1;
            ditto_paste_blocks(it, p->box_only, g.ch, g.cw, blk);
            for (int q = 0; q < 4; q++)
                b[q] = (int)blk[q];
            rows = b[1] - b[0] > rows ? b[1] - b[0] : rows;
            cols = b[3] - b[2] > cols ? b[3] - b[2] : cols;
        }
        if (rows == 0 || cols == 0)
            continue;
        const dim3 grid((unsigned)((cols + 127) / 128), (unsigned)(rows < 65535 ? rows : 65535), (unsigned)k);
        k_paste_yuv<<<grid, 128, 0, ditto_cuda(be)->stream>>>(g);
        DITTO_CUDA_LAUNCHED(be);
    }
    return 0;
}

void ditto_cuda_init_image(DittoOps *ops)
{
    ops->warp_affine = cuda_warp_affine;
    ops->resize_area = cuda_resize_area;
    ops->resize_bilinear = cuda_resize_bilinear;
    ops->mask_blend = cuda_mask_blend;
    ops->rgb_to_yuv420 = cuda_rgb_to_yuv420;
    ops->paste_yuv = cuda_paste_yuv;
}
