/*
 * CUDA resampling family: nearest upsampling, avg/max pooling, pixel shuffle,
 * grid_sample (2-D bilinear, 3-D trilinear, zeros padding) and the warp
 * network's fused keypoint fields (motion_input, motion_deform). float32 or
 * float16 storage (x and y independently), fp32 math; grid_sample's grid is
 * always float32. One thread per output element (per output point for
 * grid_sample, looping over channels), grid-stride loops, int64 indices.
 *
 * Arithmetic mirrors src/backend/cpu/sample.c operation for operation
 * (window order of the pool sums, PyTorch's fp32 unnormalisation and tap
 * order for grid_sample), with unfused _rn intrinsics where the CPU rounds a
 * product before an add, so float32 results match the CPU bit for bit.
 * 1-D and 2-D spatial layouts are handled as 3-D ones with leading extents 1.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

#define SAMPLE_THREADS 256

#define GRID_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

static int float_dtype(DittoBackend *be, const char *op, const char *name, const DittoTensor *t, bool *f16)
{
    if (t->dtype == DITTO_F32 || t->dtype == DITTO_F16) {
        *f16 = t->dtype == DITTO_F16;
        return 0;
    }
    return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op %s: %s has dtype %s, not supported by the cuda backend (float32, float16)",
                      op, name, ditto_dtype_name(t->dtype));
}

/* Spatial extents of t (N, C, *s) right-aligned into (D, H, W). */
static void spatial3(const DittoTensor *t, int64_t *s)
{
    int ns = t->ndim - 2;
    for (int i = 0; i < 3; i++)
        s[i] = i < 3 - ns ? 1 : t->shape[2 + i - (3 - ns)];
}

/* ---- upsample_nearest: y[o] = x[floor(o * in / out)] per dim, exact integers ---- */

typedef struct Extents {
    int64_t in[3], out[3];
} Extents;

static __global__ void upsample_kernel(Extents e, const void *x, bool xh, void *y, bool yh, int64_t total)
{
    GRID_LOOP(t, total) {
        int64_t ow = t % e.out[2], r = t / e.out[2];
        int64_t oh = r % e.out[1];
        r /= e.out[1];
        int64_t od = r % e.out[0], nc = r / e.out[0];
        int64_t id = od * e.in[0] / e.out[0], ih = oh * e.in[1] / e.out[1], iw = ow * e.in[2] / e.out[2];
        ditto_st(y, t, ditto_ld(x, ((nc * e.in[0] + id) * e.in[1] + ih) * e.in[2] + iw, xh), yh);
    }
}

/* Same with 32-bit index arithmetic (64-bit division is slow): every index < 2^31. */
static __global__ void upsample_kernel32(int ind, int inh, int inw, int outd, int outh, int outw, const void *x, bool xh, void *y, bool yh,
                                         int total)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
        int ow = t % outw, r = t / outw;
        int oh = r % outh;
        r /= outh;
        int od = r % outd, nc = r / outd;
        /* floor(o * in / out) in 64 bits: the product may pass 2^31 */
        int id = (int)((int64_t)od * ind / outd), ih = (int)((int64_t)oh * inh / outh), iw = (int)((int64_t)ow * inw / outw);
        ditto_st(y, t, ditto_ld(x, ((int64_t)(nc * ind + id) * inh + ih) * inw + iw, xh), yh);
    }
}

/*
 * f16, integer factors, output rows a multiple of 8: a thread writes 8
 * consecutive outputs with one 16-byte store (the decoder's x2 / x4 maps).
 */
static __global__ void upsample_int_h8(int ind, int inh, int inw, int fd, int fh, int fw, int outd, int outh, int outw,
                                       const __half *x, __half *y, int total8)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total8; t += gridDim.x * blockDim.x) {
        int base = t * 8, ow0 = base % outw, r = base / outw;
        int oh = r % outh;
        r /= outh;
        int od = r % outd, nc = r / outd;
        const __half *src = x + ((int64_t)(nc * ind + od / fd) * inh + oh / fh) * inw;
        __align__(16) __half v[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = src[(ow0 + j) / fw];
        ((uint4 *)y)[t] = *(const uint4 *)v;
    }
}

static int cuda_upsample_nearest(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    bool xh = false, yh = false;
    DITTO_TRY(float_dtype(be, "upsample_nearest", "x", x, &xh));
    DITTO_TRY(float_dtype(be, "upsample_nearest", "y", y, &yh));
    Extents e;
    spatial3(x, e.in);
    spatial3(y, e.out);
    int64_t total = ditto_tensor_numel(y);
    if (total == 0)
        return 0;
    bool integer = e.out[0] % e.in[0] == 0 && e.out[1] % e.in[1] == 0 && e.out[2] % e.in[2] == 0;
    if (xh && yh && integer && e.out[2] % 8 == 0 && total < INT32_MAX && (uintptr_t)y->data % 16 == 0)
        upsample_int_h8<<<ditto_cuda_blocks(total / 8, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(
            (int)e.in[0], (int)e.in[1], (int)e.in[2], (int)(e.out[0] / e.in[0]), (int)(e.out[1] / e.in[1]), (int)(e.out[2] / e.in[2]),
            (int)e.out[0], (int)e.out[1], (int)e.out[2], (const __half *)x->data, (__half *)y->data, (int)(total / 8));
    else if (total < INT32_MAX && ditto_tensor_numel(x) < INT32_MAX)
        upsample_kernel32<<<ditto_cuda_blocks(total, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(
            (int)e.in[0], (int)e.in[1], (int)e.in[2], (int)e.out[0], (int)e.out[1], (int)e.out[2], x->data, xh, y->data, yh, (int)total);
    else
        upsample_kernel<<<ditto_cuda_blocks(total, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(e, x->data, xh, y->data,
                                                                                                             yh, total);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- pool ---- */

typedef struct PoolArgs {
    int64_t in[3], out[3];
    int k[3], s[3], pb[3], pe[3];
    bool is_max, include_pad;
} PoolArgs;

static __global__ void pool_kernel(const __grid_constant__ PoolArgs p, const void *x, bool xh, void *y, bool yh, int64_t total)
{
    GRID_LOOP(t, total) {
        int64_t o[3], r = t;
        o[2] = r % p.out[2];
        r /= p.out[2];
        o[1] = r % p.out[1];
        r /= p.out[1];
        o[0] = r % p.out[0];
        int64_t nc = r / p.out[0];
        /* Window [b, e) clipped to the padded input gives the count_include_pad
         * divisor (a ceil_mode window hanging past the padding is not
         * counted); clipped to the input, the real one. */
        int64_t b[3], e[3], padded = 1, real = 1;
        for (int i = 0; i < 3; i++) {
            int64_t wb = o[i] * p.s[i] - p.pb[i];
            int64_t we = wb + p.k[i];
            if (we > p.in[i] + p.pe[i])
                we = p.in[i] + p.pe[i];
            padded *= we - wb;
            b[i] = wb < 0 ? 0 : wb;
            e[i] = we > p.in[i] ? p.in[i] : we;
            real *= e[i] > b[i] ? e[i] - b[i] : 0;
        }
        int64_t xp = nc * p.in[0] * p.in[1] * p.in[2];
        float acc = p.is_max ? -INFINITY : 0.0f;
        for (int64_t d = b[0]; d < e[0]; d++)
            for (int64_t h = b[1]; h < e[1]; h++) {
                int64_t row = xp + (d * p.in[1] + h) * p.in[2];
                for (int64_t w = b[2]; w < e[2]; w++) {
                    float v = ditto_ld(x, row + w, xh);
                    if (!p.is_max)
                        acc += v;
                    else if (v > acc || v != v)   /* NaN propagates, as in PyTorch */
                        acc = v;
                }
            }
        if (!p.is_max) {
            int64_t div = p.include_pad ? padded : real;
            acc = div > 0 ? acc / (float)div : 0.0f;
        }
        ditto_st(y, t, acc, yh);
    }
}

/*
 * f16 average pool over 2x2 windows of (H, W) (kernel (1,2,2) or (2,2),
 * stride = kernel, no padding), W a multiple of 4: a thread per two
 * neighbouring outputs, one 8-byte load per input row, one half2 store; the
 * same sums in the same order as pool_kernel (bit-identical). The warp's
 * down blocks: pool_kernel's 2-byte loads ran 53 us per 3-item chunk at
 * 16x64x64 (about 0.6 TB/s, ncu on the H200).
 */
static __global__ void pool_avg2x2_h(const __half *x, __half *y, int64_t W, int64_t oh, int64_t total2)
{
    GRID_LOOP(t, total2) {
        const int64_t ow2 = W / 4, q = t % ow2, r = t / ow2;   /* r: (plane, output row) */
        const int64_t oy = r % oh, plane = r / oh;
        const __half *row0 = x + (plane * 2 * oh + 2 * oy) * W + 4 * q;
        const uint2 a = *(const uint2 *)row0, b = *(const uint2 *)(row0 + W);
        const __half2 *ha = (const __half2 *)&a, *hb = (const __half2 *)&b;
        float r0 = 0.0f, r1 = 0.0f;
        r0 += __low2float(ha[0]);
        r0 += __high2float(ha[0]);
        r0 += __low2float(hb[0]);
        r0 += __high2float(hb[0]);
        r1 += __low2float(ha[1]);
        r1 += __high2float(ha[1]);
        r1 += __low2float(hb[1]);
        r1 += __high2float(hb[1]);
        ((__half2 *)y)[t] = __floats2half2_rn(r0 / 4.0f, r1 / 4.0f);
    }
}

/*
 * f16 average pool of channels-last x (planes, H, W, C) over 2x2 windows of
 * (H, W), as pool_kernel sees it with kernel (2,2,1) over (H, W, C): a
 * thread per output position and 8 channels, 16-byte loads and store; the
 * window summed in pool_kernel's order (bit-identical to it, and to
 * pool_avg2x2_h on the same values channels-first).
 */
static __global__ void pool_avg2x2_last_h(const uint4 *x, uint4 *y, int64_t W, int64_t C8, int64_t oh, int64_t total)
{
    GRID_LOOP(t, total) {
        const int64_t c = t % C8, r = t / C8, ow = W / 2, ox = r % ow, r2 = r / ow, oy = r2 % oh, plane = r2 / oh;
        const int64_t i00 = ((plane * 2 * oh + 2 * oy) * W + 2 * ox) * C8 + c;
        const uint4 v[4] = { x[i00], x[i00 + C8], x[i00 + W * C8], x[i00 + W * C8 + C8] };
        uint4 out;
        __half2 *o = (__half2 *)&out;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float lo = 0.0f, hi = 0.0f;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const __half2 h = ((const __half2 *)&v[k])[j];
                lo += __low2float(h);
                hi += __high2float(h);
            }
            o[j] = __floats2half2_rn(lo / 4.0f, hi / 4.0f);
        }
        y[t] = out;
    }
}

static int cuda_pool(DittoBackend *be, const DittoPoolParams *prm, const DittoTensor *x, DittoTensor *y)
{
    bool xh = false, yh = false;
    DITTO_TRY(float_dtype(be, "pool", "x", x, &xh));
    DITTO_TRY(float_dtype(be, "pool", "y", y, &yh));
    PoolArgs p;
    memset(&p, 0, sizeof p);
    p.is_max = prm->kind == DITTO_POOL_MAX;
    p.include_pad = prm->count_include_pad;
    int ns = x->ndim - 2;
    spatial3(x, p.in);
    spatial3(y, p.out);
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - ns);   /* params index of this slot, < 0 for padded slots */
        p.k[i] = j < 0 ? 1 : prm->kernel[j];
        p.s[i] = j < 0 ? 1 : (prm->stride[j] ? prm->stride[j] : prm->kernel[j]);
        p.pb[i] = j < 0 ? 0 : prm->pad_begin[j];
        p.pe[i] = j < 0 ? 0 : prm->pad_end[j];
    }
    int64_t total = ditto_tensor_numel(y);
    if (total == 0)
        return 0;
    bool win2 = !p.is_max && xh && yh && p.k[0] == 1 && p.s[0] == 1 && p.in[0] == p.out[0];
    for (int i = 0; i < 3; i++)
        win2 = win2 && p.pb[i] == 0 && p.pe[i] == 0 && (i == 0 || (p.k[i] == 2 && p.s[i] == 2 && p.in[i] == 2 * p.out[i]));
    if (win2 && p.in[2] % 4 == 0 && ((uintptr_t)x->data | (uintptr_t)y->data) % 8 == 0) {
        const int64_t total2 = total / 2;
        pool_avg2x2_h<<<ditto_cuda_blocks(total2, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(
            (const __half *)x->data, (__half *)y->data, p.in[2], p.out[1], total2);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    /* channels-last (the warp's NDHWC hourglass, viewed (B*D, 1, H, W, C)): kernel (2,2,1) */
    bool last2 = !p.is_max && xh && yh && p.k[2] == 1 && p.s[2] == 1 && p.in[2] == p.out[2] && p.in[2] % 8 == 0;
    for (int i = 0; i < 3; i++)
        last2 = last2 && p.pb[i] == 0 && p.pe[i] == 0 && (i == 2 || (p.k[i] == 2 && p.s[i] == 2 && p.in[i] == 2 * p.out[i]));
    if (last2 && ((uintptr_t)x->data | (uintptr_t)y->data) % 16 == 0) {
        const int64_t total8 = total / 8;
        pool_avg2x2_last_h<<<ditto_cuda_blocks(total8, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(
            (const uint4 *)x->data, (uint4 *)y->data, p.in[1], p.in[2] / 8, p.out[0], total8);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    pool_kernel<<<ditto_cuda_blocks(total, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(p, x->data, xh, y->data, yh,
                                                                                                     total);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- pixel_shuffle: y[n, c, h r + i, w r + j] = x[n, c r^2 + i r + j, h, w] ---- */

typedef struct ShuffleArgs {
    const void *x;
    void *y;
    bool xh, yh;
    int64_t h, w, r, cout, total;
    int64_t sn, sc, sh, sw;          /* x's strides (any view) */
    DittoUnaryParams act;
} ShuffleArgs;

static __global__ void shuffle_kernel(const __grid_constant__ ShuffleArgs g)
{
    const int64_t r = g.r, ho = g.h * r, wo = g.w * r;
    GRID_LOOP(t, g.total) {
        int64_t ow = t % wo, q = t / wo;
        int64_t oh = q % ho, nc = q / ho;     /* nc = n * C_out + c */
        int64_t n = nc / g.cout, ci = (nc % g.cout) * r * r + (oh % r) * r + ow % r;
        float v = ditto_ld(g.x, n * g.sn + ci * g.sc + (oh / r) * g.sh + (ow / r) * g.sw, g.xh);
        ditto_st(g.y, t, g.act.kind == DITTO_UNARY_IDENTITY ? v : ditto_unary_f(g.act.kind, g.act.alpha, g.act.beta, v), g.yh);
    }
}

/*
 * Factor 2, float16, x channels-last (unit channel stride): a thread per
 * input pixel and output channel writes its 2x2 outputs, 32-bit index maths.
 */
static __global__ void shuffle2_nhwc_h(const __grid_constant__ ShuffleArgs g)
{
    const unsigned h = (unsigned)g.h, w = (unsigned)g.w, cout = (unsigned)g.cout, total = (unsigned)(g.total / 4);
    const __half *x = (const __half *)g.x;
    __half *y = (__half *)g.y;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
        const unsigned iw = t % w, q = t / w, ih = q % h, nc = q / h, n = nc / cout, c = nc % cout;
        const __half *px = x + (size_t)n * (size_t)g.sn + (size_t)ih * (size_t)g.sh + (size_t)iw * (size_t)g.sw + 4 * c;
        float v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[k] = __half2float(px[k]);
            if (g.act.kind != DITTO_UNARY_IDENTITY)
                v[k] = ditto_unary_f(g.act.kind, g.act.alpha, g.act.beta, v[k]);
        }
        /* channel 4c + 2i + j -> row 2ih + i, column 2iw + j */
        __half *py = y + ((size_t)nc * 2 * h + 2 * ih) * 2 * w + 2 * iw;
        *(__half2 *)py = __floats2half2_rn(v[0], v[1]);
        *(__half2 *)(py + 2 * w) = __floats2half2_rn(v[2], v[3]);
    }
}

static int cuda_pixel_shuffle(DittoBackend *be, const DittoShuffleParams *p, const DittoTensor *x, DittoTensor *y)
{
    ShuffleArgs g;
    memset(&g, 0, sizeof g);
    DITTO_TRY(float_dtype(be, "pixel_shuffle", "x", x, &g.xh));
    DITTO_TRY(float_dtype(be, "pixel_shuffle", "y", y, &g.yh));
    g.x = x->data;
    g.y = y->data;
    g.h = x->shape[2];
    g.w = x->shape[3];
    g.r = p->factor;
    g.cout = y->shape[1];
    g.total = ditto_tensor_numel(y);
    g.sn = x->stride[0];
    g.sc = x->stride[1];
    g.sh = x->stride[2];
    g.sw = x->stride[3];
    g.act = p->act;
    if (g.total == 0)
        return 0;
    if (g.r == 2 && g.xh && g.yh && g.sc == 1 && g.total < (int64_t)UINT32_MAX && ((uintptr_t)y->data % 4) == 0)
        shuffle2_nhwc_h<<<ditto_cuda_blocks(g.total / 4, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(g);
    else
        shuffle_kernel<<<ditto_cuda_blocks(g.total, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(g);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- grid_sample ---- */

/* PyTorch's unnormalisation in fp32: align_corners maps -1/+1 to the centres
 * of the first/last pixel, otherwise to their outer edges. */
static __device__ __forceinline__ float unnormalize(float g, int64_t size, bool align_corners)
{
    if (align_corners)
        return __fmul_rn(__fdiv_rn(__fadd_rn(g, 1.0f), 2.0f), (float)(size - 1));
    return __fdiv_rn(__fsub_rn(__fmul_rn(__fadd_rn(g, 1.0f), (float)size), 1.0f), 2.0f);
}

typedef struct Axis {
    int64_t i0;
    float w0, w1;
    bool ok0, ok1;           /* corner inside [0, size) */
} Axis;

/* Corners floor(c) and floor(c)+1, weights (i0+1) - c and c - i0 as PyTorch
 * writes them. Coordinates outside (-2, size+1), and NaN, touch no pixel. */
static __device__ __forceinline__ bool axis_taps(float c, int64_t size, Axis *a)
{
    if (!(c > -2.0f && c < __fadd_rn((float)size, 1.0f)))
        return false;
    float f0 = floorf(c);
    a->i0 = (int64_t)f0;
    a->w0 = __fsub_rn(__fadd_rn(f0, 1.0f), c);
    a->w1 = __fsub_rn(c, f0);
    a->ok0 = a->i0 >= 0 && a->i0 < size;
    a->ok1 = a->i0 + 1 >= 0 && a->i0 + 1 < size;
    return a->ok0 || a->ok1;
}

typedef struct GridArgs {
    const void *x;
    const float *grid;
    void *y;
    bool xh, yh, three_d, align_corners;
    int64_t C, D, H, W;      /* input; D = 1 for 2-D */
    int64_t P;               /* output points per sample: Do * Ho * Wo */
    int64_t total;           /* N * P */
} GridArgs;

/*
 * Taps of one point gp (x, y[, z]) of an input (D, H, W): the offset of its
 * first corner, the 8 weights and a bit per corner inside. Tap order is
 * PyTorch's (and the CPU's): z0 before z1, then (y0,x0), (y0,x1), (y1,x0),
 * (y1,x1); weights wx*wy*wz left to right; corners outside are left out.
 */
static __device__ __forceinline__ unsigned point_taps(const float *gp, bool three_d, bool align_corners, int64_t D, int64_t H, int64_t W,
                                                      int64_t *base, float w[8])
{
    Axis ax, ay, az;
    az.i0 = 0;
    az.w0 = 1.0f;
    az.w1 = 0.0f;
    az.ok0 = true;
    az.ok1 = false;
    *base = 0;
    bool any = axis_taps(unnormalize(gp[0], W, align_corners), W, &ax) && axis_taps(unnormalize(gp[1], H, align_corners), H, &ay) &&
               (!three_d || axis_taps(unnormalize(gp[2], D, align_corners), D, &az));
    unsigned valid = 0;
    if (any) {
        *base = (az.i0 * H + ay.i0) * W + ax.i0;
        const float wyx[4] = { __fmul_rn(ax.w0, ay.w0), __fmul_rn(ax.w1, ay.w0), __fmul_rn(ax.w0, ay.w1), __fmul_rn(ax.w1, ay.w1) };
        const bool okx[2] = { ax.ok0, ax.ok1 }, oky[2] = { ay.ok0, ay.ok1 }, okz[2] = { az.ok0, az.ok1 };
        const float wz[2] = { az.w0, az.w1 };
#pragma unroll
        for (int kz = 0; kz < 2; kz++) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                int q = kz * 4 + k;
                w[q] = three_d ? __fmul_rn(wyx[k], wz[kz]) : wyx[k];
                if (okz[kz] && oky[k >> 1] && okx[k & 1] && (kz == 0 || three_d))
                    valid |= 1u << q;
            }
        }
    }
    return valid;
}

/* sum over the valid taps of x[xc + tap offset] * w, in tap order (tap (kz, k) at xc + kz HW + (k >> 1) W + (k & 1)) */
static __device__ __forceinline__ float tap_sum(const void *x, bool xh, int64_t xc, int64_t HW, int64_t W, unsigned valid, const float w[8])
{
    float acc = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; q++)
        if (valid >> q & 1u)
            acc = __fadd_rn(acc, __fmul_rn(ditto_ld(x, xc + (q >> 2) * HW + (q >> 1 & 1) * W + (q & 1), xh), w[q]));
    return acc;
}

/* One thread per output point: its taps once, then every channel. */
static __global__ void grid_sample_kernel(const __grid_constant__ GridArgs g)
{
    const int nsd = g.three_d ? 3 : 2;
    const int64_t HW = g.H * g.W, in_plane = g.D * HW;
    GRID_LOOP(t, g.total) {
        int64_t n = t / g.P, p = t - n * g.P, base;
        float w[8];
        const unsigned valid = point_taps(g.grid + t * nsd, g.three_d, g.align_corners, g.D, g.H, g.W, &base, w);
        const int64_t xn = n * g.C * in_plane + base, yn = n * g.C * g.P + p;
        for (int64_t c = 0; c < g.C; c++)
            ditto_st(g.y, yn + c * g.P, tap_sum(g.x, g.xh, xn + c * in_plane, HW, g.W, valid, w), g.yh);
    }
}

static int cuda_grid_sample(DittoBackend *be, const DittoGridSampleParams *p, const DittoTensor *x, const DittoTensor *grid,
                            DittoTensor *y)
{
    GridArgs g;
    memset(&g, 0, sizeof g);
    DITTO_TRY(float_dtype(be, "grid_sample", "x", x, &g.xh));
    DITTO_TRY(float_dtype(be, "grid_sample", "y", y, &g.yh));
    g.x = x->data;
    g.grid = (const float *)grid->data;
    g.y = y->data;
    g.three_d = x->ndim == 5;
    g.align_corners = p->align_corners;
    int64_t in[3], out[3];
    spatial3(x, in);
    spatial3(y, out);
    g.C = x->shape[1];
    g.D = in[0];
    g.H = in[1];
    g.W = in[2];
    g.P = out[0] * out[1] * out[2];
    g.total = x->shape[0] * g.P;
    if (g.total == 0 || g.C == 0)
        return 0;
    grid_sample_kernel<<<ditto_cuda_blocks(g.total, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(g);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- motion_input, motion_deform: the dense motion network's keypoint fields ---- */

/*
 * Sparse motion S = (G - kd) + ks and the Gaussians' exponent arguments of
 * one motion at grid point g: the CPU's float32 and double operations, each
 * rounded as there (no contractions).
 */
static __device__ __forceinline__ void motion_point(const float *g, const float *kd, const float *ks, float a, float S[3], float *ad, float *as)
{
    double qd = 0.0, qs = 0.0;
#pragma unroll
    for (int i = 0; i < 3; i++) {
        const float t = __fsub_rn(g[i], kd[i]), u = __fsub_rn(g[i], ks[i]);
        qd = __dadd_rn(qd, __dmul_rn((double)t, (double)t));
        qs = __dadd_rn(qs, __dmul_rn((double)u, (double)u));
        S[i] = __fadd_rn(t, ks[i]);
    }
    *ad = __fmul_rn(a, __double2float_rn(qd));
    *as = __fmul_rn(a, __double2float_rn(qs));
}

/* The sparse motion alone, S = (G - kd) + ks (motion_deform: no Gaussians). */
static __device__ __forceinline__ void sparse_motion(const float *g, const float *kd, const float *ks, float S[3])
{
#pragma unroll
    for (int i = 0; i < 3; i++)
        S[i] = __fadd_rn(__fsub_rn(g[i], kd[i]), ks[i]);
}

typedef struct MotionArgs {
    const float *grid, *kd, *ks;      /* grid (D,H,W,3), kd / ks (N,K,3) */
    const void *x;                    /* motion_input: feat (N,c,D,H,W); motion_deform: logits (N,K+1,D,H,W) */
    void *y;                          /* motion_input: (N,(K+1)(c+1),D,H,W) */
    int64_t ysn, ysc, ysp;            /* motion_input: y's strides of item, channel, position */
    bool mfast;                       /* motion_input: points t = ((n, position), m), m fastest (channels-last y) */
    float *motion, *deform, *mask;    /* (N,K+1,D,H,W,3) or NULL; (N,D,H,W,3); (N,K+1,D,H,W) or NULL */
    bool xh, yh;
    float a;                          /* (float)(-0.5 / variance) */
    int64_t K, c, D, H, W;
    int64_t total;                    /* points: N (K+1) D H W, or N D H W */
} MotionArgs;

/* The fields both ops share: grid, keypoints, x, a, K and the volume. */
static MotionArgs motion_args(const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s, const DittoTensor *x)
{
    MotionArgs a;
    memset(&a, 0, sizeof a);
    a.grid = (const float *)grid->data;
    a.kd = (const float *)kp_d->data;
    a.ks = (const float *)kp_s->data;
    a.x = x->data;
    a.a = (float)(-0.5 / p->variance);
    a.K = kp_d->shape[1];
    a.D = grid->shape[0];
    a.H = grid->shape[1];
    a.W = grid->shape[2];
    return a;
}

/* a zero keypoint for m = 0 */
static __device__ __forceinline__ void motion_kps(const MotionArgs &a, int64_t n, int64_t m, float kd[3], float ks[3])
{
#pragma unroll
    for (int i = 0; i < 3; i++) {
        kd[i] = m == 0 ? 0.0f : a.kd[(n * a.K + m - 1) * 3 + i];
        ks[i] = m == 0 ? 0.0f : a.ks[(n * a.K + m - 1) * 3 + i];
    }
}

/*
 * Both motion_input kernels' head for point t, ((n, m), position), or ((n,
 * position), m) with a.mfast (a warp's channels-last writes then land in a
 * few rows): its motion S, the heatmap difference written to channel m (c +
 * 1) of item n (c1 = c + 1), the motion when asked; returns that channel's
 * element offset (the next channels are a.ysc apart). The same values
 * either way.
 */
template <typename I>
static __device__ __forceinline__ int64_t motion_head(const MotionArgs &a, I t, I vol, int64_t c1, float S[3], int64_t *n)
{
    const I K1 = (I)(a.K + 1);
    const I q = a.mfast ? t / K1 : t / vol;   /* the index divisions in I: 32-bit ones cost a fraction of 64-bit ones */
    const int64_t m = a.mfast ? t - q * K1 : q % K1, p = a.mfast ? q % vol : t - q * vol;
    float kd[3], ks[3], ad, as;
    *n = a.mfast ? q / vol : q / K1;
    motion_kps(a, *n, m, kd, ks);
    motion_point(a.grid + p * 3, kd, ks, a.a, S, &ad, &as);
    const int64_t yb = *n * a.ysn + m * c1 * a.ysc + p * a.ysp;
    ditto_st(a.y, yb, __fsub_rn(expf(ad), expf(as)), a.yh);
    if (a.motion)
        for (int i = 0; i < 3; i++)
            a.motion[((*n * K1 + m) * vol + p) * 3 + i] = S[i];
    return yb;
}

/* A thread per (n, m, position): the heatmap and the c deformed feature channels of motion m. */
static __global__ void motion_input_kernel(const __grid_constant__ MotionArgs a)
{
    const int64_t HW = a.H * a.W, vol = a.D * HW, c1 = a.c + 1;
    GRID_LOOP(t, a.total) {
        float S[3], w[8];
        int64_t n, base;
        const int64_t yb = motion_head<int64_t>(a, t, vol, c1, S, &n);
        const unsigned valid = point_taps(S, true, false, a.D, a.H, a.W, &base, w);
        const int64_t xn = n * a.c * vol + base;
        for (int64_t j = 0; j < a.c; j++)
            ditto_st(a.y, yb + (1 + j) * a.ysc, tap_sum(a.x, a.xh, xn + j * vol, HW, a.W, valid, w), a.yh);
    }
}

/*
 * The model's case, f16 feat of 4 channels: feat moved to (N, vol, 4) first
 * (k_feat_c4), so a tap's 4 channels are one 8-byte load instead of four
 * 2-byte gathers; each channel's sum is tap_sum's, term by term in the same
 * order (bit-identical).
 */
static __global__ void k_feat_c4(const __half *x, __half *xt, int64_t vol, int64_t total)
{
    GRID_LOOP(t, total) {
        const int64_t n = t / vol, p = t - n * vol;
        const __half *xs = x + n * 4 * vol + p;
        ((__half2 *)xt)[2 * t] = __halves2half2(xs[0], xs[vol]);
        ((__half2 *)xt)[2 * t + 1] = __halves2half2(xs[2 * vol], xs[3 * vol]);
    }
}

/* I: the point index type, uint32_t whenever a.total fits (launch side) */
template <typename I>
static __global__ void motion_input_c4_kernel(const __grid_constant__ MotionArgs a, const __half *xt)
{
    const int64_t HW = a.H * a.W, vol = a.D * HW;
    for (I t = (I)(blockIdx.x * blockDim.x + threadIdx.x); t < (I)a.total; t += (I)(gridDim.x * blockDim.x)) {
        float S[3], w[8];
        int64_t n, base;
        const int64_t yb = motion_head<I>(a, t, (I)vol, 5, S, &n);
        const unsigned valid = point_taps(S, true, false, a.D, a.H, a.W, &base, w);
        const int64_t xn = n * vol + base;
        float acc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
        for (int q = 0; q < 8; q++) {
            if (valid >> q & 1u) {
                const uint2 u = ((const uint2 *)xt)[xn + (q >> 2) * HW + (q >> 1 & 1) * a.W + (q & 1)];
                const float2 f01 = __half22float2(*(const __half2 *)&u.x), f23 = __half22float2(*(const __half2 *)&u.y);
                acc[0] = __fadd_rn(acc[0], __fmul_rn(f01.x, w[q]));
                acc[1] = __fadd_rn(acc[1], __fmul_rn(f01.y, w[q]));
                acc[2] = __fadd_rn(acc[2], __fmul_rn(f23.x, w[q]));
                acc[3] = __fadd_rn(acc[3], __fmul_rn(f23.y, w[q]));
            }
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
            ditto_st(a.y, yb + (1 + j) * a.ysc, acc[j], a.yh);
    }
}

static int cuda_motion_input(DittoBackend *be, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s,
                             const DittoTensor *feat, DittoTensor *y, DittoTensor *motion)
{
    MotionArgs a = motion_args(p, grid, kp_d, kp_s, feat);
    DITTO_TRY(float_dtype(be, "motion_input", "feat", feat, &a.xh));
    DITTO_TRY(float_dtype(be, "motion_input", "y", y, &a.yh));
    a.y = y->data;
    a.ysn = y->stride[0];
    a.ysc = y->stride[1];
    a.ysp = y->stride[4];
    a.mfast = a.ysc < a.ysp;
    a.motion = motion ? (float *)motion->data : NULL;
    a.c = feat->shape[1];
    a.total = kp_d->shape[0] * (a.K + 1) * a.D * a.H * a.W;
    if (a.c == 4 && a.xh && a.total > 0) {
        const int64_t vol = a.D * a.H * a.W, nt = kp_d->shape[0] * vol;
        void *ws;
        DITTO_TRY(ditto_cuda_workspace(be, (size_t)nt * 4 * sizeof(__half), &ws));
        k_feat_c4<<<ditto_cuda_blocks(nt, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>((const __half *)a.x, (__half *)ws, vol,
                                                                                                         nt);
        DITTO_CUDA_LAUNCHED(be);
        const unsigned blocks = ditto_cuda_blocks(a.total, SAMPLE_THREADS);
        if (a.total + (int64_t)blocks * SAMPLE_THREADS < ((int64_t)1 << 32))   /* t and t + the grid's stride fit in 32 bits */
            motion_input_c4_kernel<uint32_t><<<blocks, SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(a, (const __half *)ws);
        else
            motion_input_c4_kernel<int64_t><<<blocks, SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(a, (const __half *)ws);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    motion_input_kernel<<<ditto_cuda_blocks(a.total, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/*
 * A thread per (n, position): the softmax over the K+1 logits (max, expf of
 * the differences summed in double, e * (1 / sum) in double), then the
 * mask-weighted sum of the recomputed motions in double, as the CPU.
 */
static __global__ void motion_deform_kernel(const __grid_constant__ MotionArgs a)
{
    const int64_t vol = a.D * a.H * a.W, K1 = a.K + 1;
    GRID_LOOP(t, a.total) {
        const int64_t p = t % vol, n = t / vol, l0 = n * K1 * vol + p;   /* logit m at l0 + m vol */
        float mx = -INFINITY;
        for (int64_t m = 0; m < K1; m++) {
            const float l = ditto_ld(a.x, l0 + m * vol, a.xh);
            mx = l > mx ? l : mx;
        }
        double sum = 0.0, acc[3] = { 0.0, 0.0, 0.0 };
        for (int64_t m = 0; m < K1; m++)
            sum = __dadd_rn(sum, (double)expf(__fsub_rn(ditto_ld(a.x, l0 + m * vol, a.xh), mx)));
        const double inv = __ddiv_rn(1.0, sum);
        for (int64_t m = 0; m < K1; m++) {
            const float mk = __double2float_rn(__dmul_rn((double)expf(__fsub_rn(ditto_ld(a.x, l0 + m * vol, a.xh), mx)), inv));
            float kd[3], ks[3], S[3];
            motion_kps(a, n, m, kd, ks);
            sparse_motion(a.grid + p * 3, kd, ks, S);
#pragma unroll
            for (int i = 0; i < 3; i++)
                acc[i] = __dadd_rn(acc[i], (double)__fmul_rn(S[i], mk));
            if (a.mask)
                a.mask[l0 + m * vol] = mk;
        }
#pragma unroll
        for (int i = 0; i < 3; i++)
            a.deform[t * 3 + i] = __double2float_rn(acc[i]);
    }
}

static int cuda_motion_deform(DittoBackend *be, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s,
                              const DittoTensor *logits, DittoTensor *deformation, DittoTensor *mask)
{
    MotionArgs a = motion_args(p, grid, kp_d, kp_s, logits);
    DITTO_TRY(float_dtype(be, "motion_deform", "logits", logits, &a.xh));
    a.deform = (float *)deformation->data;
    a.mask = mask ? (float *)mask->data : NULL;
    a.total = kp_d->shape[0] * a.D * a.H * a.W;
    motion_deform_kernel<<<ditto_cuda_blocks(a.total, SAMPLE_THREADS), SAMPLE_THREADS, 0, ditto_cuda(be)->stream>>>(a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

void ditto_cuda_init_sample(DittoOps *ops)
{
    ops->motion_input = cuda_motion_input;
    ops->motion_deform = cuda_motion_deform;
    ops->upsample_nearest = cuda_upsample_nearest;
    ops->pool = cuda_pool;
    ops->pixel_shuffle = cuda_pixel_shuffle;
    ops->grid_sample = cuda_grid_sample;
}
