/*
 * CUDA normalisations: batch (eval), instance, layer (last dim or channels
 * first) and group norm. Tensors are f32 or f16, each on its own (mixing is
 * allowed); all maths is fp32 or wider.
 *
 * Statistics are two-pass and accumulated in double (mean, then the mean of
 * squared deviations), as in the CPU oracle, so inputs with a large common
 * offset keep their precision. The mean is then split into two floats
 * (hi + lo) and an output is fma((x - hi) - lo, rstd * w, b): x - hi is exact
 * for x near the mean, so the result is within a few ulps of the oracle's
 * double expression. Every kernel reads an element before writing the same
 * index, so y may be x.
 */
#include <limits.h>
#include <stdint.h>

#include "backend/cuda/cuda_backend.h"

#define NORM_THREADS 256
/* Sets up to this long go one per warp (8 elements a lane); longer ones one per block. */
#define WARP_SET_MAX 256

/*
 * Statistics sets of len contiguous elements (set s at s * len); element k of
 * set s takes affine channel (s % G) * Cg + k / R. Instance norm: G = C,
 * Cg = 1; group norm: Cg = C / G, R = spatial size; layer norm over the last
 * dim: G = 1, Cg = len, R = 1.
 */
typedef struct NormArgs {
    const void *x, *w, *b;
    void *y;
    bool xh, wh, bh, yh;      /* f16 storage flags */
    int64_t sets, len, G, Cg, R;
    double eps;
    /* SPADE (spade_norm): per-element gamma = gb[(n*2C + c)*len + k], beta C planes later; LeakyReLU(slope) when act */
    const void *gb;
    bool gbh, act;
    float slope;
} NormArgs;

static __device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32); every thread gets the total. */
static __device__ double block_sum(double v, double *sh)
{
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  /* sh may still be read from the previous call */
    if (lane == 0)
        sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return warp_sum(v);
}

/* Normalise element k of set s (stats mean, rstd) from x into y. */
static __device__ __forceinline__ void norm_store(const NormArgs &a, int64_t s, int64_t k, float m_hi, float m_lo,
                                                  float rstd)
{
    int64_t c = (s % a.G) * a.Cg + (a.R == 1 ? k : a.Cg == 1 ? 0 : k / a.R);
    float sc = a.w ? rstd * ditto_ld(a.w, c, a.wh) : rstd;
    float bv = a.b ? ditto_ld(a.b, c, a.bh) : 0.0f;
    int64_t i = s * a.len + k;
    float d = (ditto_ld(a.x, i, a.xh) - m_hi) - m_lo;
    if (a.gb) {   /* instance sets: s = n * G + c, G = C */
        int64_t gi = ((s / a.G) * 2 * a.G + s % a.G) * a.len + k;
        float g = ditto_ld(a.gb, gi, a.gbh), bt = ditto_ld(a.gb, gi + a.G * a.len, a.gbh);
        float v = fmaf(d * rstd, 1.0f + g, bt);
        ditto_st(a.y, i, a.act && v < 0.0f ? v * a.slope : v, a.yh);
        return;
    }
    ditto_st(a.y, i, fmaf(d, sc, bv), a.yh);
}

static __device__ __forceinline__ void split_stats(double mean, double var, double eps, float *m_hi, float *m_lo, float *rstd)
{
    *m_hi = (float)mean;
    *m_lo = (float)(mean - (double)*m_hi);
    *rstd = (float)(1.0 / sqrt(var + eps));
}

/* One block per set. */
static __global__ void k_norm_sets_block(NormArgs a)
{
    __shared__ double sh[32];
    for (int64_t s = blockIdx.x; s < a.sets; s += gridDim.x) {
        const int64_t base = s * a.len;
        double acc = 0.0;
        for (int64_t k = threadIdx.x; k < a.len; k += blockDim.x)
            acc += ditto_ld(a.x, base + k, a.xh);
        double mean = block_sum(acc, sh) / (double)a.len;
        acc = 0.0;
        for (int64_t k = threadIdx.x; k < a.len; k += blockDim.x) {
            double d = ditto_ld(a.x, base + k, a.xh) - mean;
            acc += d * d;
        }
        double var = block_sum(acc, sh) / (double)a.len;
        float m_hi, m_lo, rstd;
        split_stats(mean, var, a.eps, &m_hi, &m_lo, &rstd);
        for (int64_t k = threadIdx.x; k < a.len; k += blockDim.x)
            norm_store(a, s, k, m_hi, m_lo, rstd);
    }
}

/* One warp per set (short sets: layer norm rows, small planes). */
static __global__ void k_norm_sets_warp(NormArgs a)
{
    int lane = threadIdx.x & 31;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t s = warp; s < a.sets; s += nwarps) {
        const int64_t base = s * a.len;
        double acc = 0.0;
        for (int64_t k = lane; k < a.len; k += 32)
            acc += ditto_ld(a.x, base + k, a.xh);
        double mean = warp_sum(acc) / (double)a.len;
        acc = 0.0;
        for (int64_t k = lane; k < a.len; k += 32) {
            double d = ditto_ld(a.x, base + k, a.xh) - mean;
            acc += d * d;
        }
        double var = warp_sum(acc) / (double)a.len;
        float m_hi, m_lo, rstd;
        split_stats(mean, var, a.eps, &m_hi, &m_lo, &rstd);
        for (int64_t k = lane; k < a.len; k += 32)
            norm_store(a, s, k, m_hi, m_lo, rstd);
    }
}

/* Layer norm over dim 1 of (N, C, R): one thread per position (n, r), reading C values R apart (coalesced over r). */
static __global__ void k_layer_norm_cf(NormArgs a, int64_t N, int64_t C)
{
    const int64_t R = a.R, total = N * R;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t base = t / R * C * R + t % R;
        double acc = 0.0;
        for (int64_t c = 0; c < C; c++)
            acc += ditto_ld(a.x, base + c * R, a.xh);
        double mean = acc / (double)C;
        acc = 0.0;
        for (int64_t c = 0; c < C; c++) {
            double d = ditto_ld(a.x, base + c * R, a.xh) - mean;
            acc += d * d;
        }
        float m_hi, m_lo, rstd;
        split_stats(mean, acc / (double)C, a.eps, &m_hi, &m_lo, &rstd);
        for (int64_t c = 0; c < C; c++) {
            float sc = a.w ? rstd * ditto_ld(a.w, c, a.wh) : rstd;
            float bv = a.b ? ditto_ld(a.b, c, a.bh) : 0.0f;
            int64_t i = base + c * R;
            float d = (ditto_ld(a.x, i, a.xh) - m_hi) - m_lo;
            ditto_st(a.y, i, fmaf(d, sc, bv), a.yh);
        }
    }
}

/* Eval batch norm: y = (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c], c = i / R % C; IEEE-rounded fp32. */
static __global__ void k_batch_norm(NormArgs a, const void *mean, bool mh, const void *var, bool vh, int64_t C, int64_t n)
{
    const float eps = (float)a.eps;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i / a.R % C;
        float sc = __fdiv_rn(1.0f, __fsqrt_rn(ditto_ld(var, c, vh) + eps));
        if (a.w)
            sc *= ditto_ld(a.w, c, a.wh);
        float bv = a.b ? ditto_ld(a.b, c, a.bh) : 0.0f;
        float d = ditto_ld(a.x, i, a.xh) - ditto_ld(mean, c, mh);
        ditto_st(a.y, i, fmaf(d, sc, bv), a.yh);
    }
}

/* ---- launchers ---- */

static bool storage_ok(const DittoTensor *t)
{
    return !t || t->dtype == DITTO_F32 || t->dtype == DITTO_F16;
}

static bool is_h(const DittoTensor *t)
{
    return t && t->dtype == DITTO_F16;
}

static int check_dtypes(DittoBackend *be, const char *op, const DittoTensor *const *ts, int n)
{
    for (int i = 0; i < n; i++)
        if (!storage_ok(ts[i]))
            return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op %s: dtype %s not supported by the cuda backend (f32 or f16)",
                              op, ditto_dtype_name(ts[i]->dtype));
    return 0;
}

static NormArgs norm_args(const DittoNormParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b,
                          DittoTensor *y)
{
    NormArgs a;
    a.x = x->data;
    a.w = w ? w->data : NULL;
    a.b = b ? b->data : NULL;
    a.y = y->data;
    a.xh = is_h(x);
    a.wh = is_h(w);
    a.bh = is_h(b);
    a.yh = is_h(y);
    a.sets = a.len = a.G = a.Cg = a.R = 1;
    a.eps = (double)p->eps;
    a.gb = NULL;
    a.gbh = a.act = false;
    a.slope = 0.0f;
    return a;
}

/* Size of dims 2.. (1 for a 2-D tensor). */
static int64_t inner_size(const DittoTensor *x)
{
    int64_t r = 1;
    for (int i = 2; i < x->ndim; i++)
        r *= x->shape[i];
    return r;
}

static int run_sets(DittoBackend *be, const NormArgs *a)
{
    cudaStream_t st = ditto_cuda(be)->stream;
    if (a->len <= WARP_SET_MAX)
        k_norm_sets_warp<<<ditto_cuda_blocks(a->sets * 32, NORM_THREADS), NORM_THREADS, 0, st>>>(*a);
    else
        k_norm_sets_block<<<ditto_cuda_blocks(a->sets * NORM_THREADS, NORM_THREADS), NORM_THREADS, 0, st>>>(*a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

static int cuda_batch_norm(DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *mean,
                           const DittoTensor *var, const DittoTensor *w, const DittoTensor *b, DittoTensor *y)
{
    const DittoTensor *ts[] = { x, mean, var, w, b, y };
    DITTO_TRY(check_dtypes(be, "batch_norm", ts, 6));
    int64_t n = ditto_tensor_numel(x);
    if (n == 0)
        return 0;
    NormArgs a = norm_args(p, x, w, b, y);
    a.R = inner_size(x);
    k_batch_norm<<<ditto_cuda_blocks(n, NORM_THREADS), NORM_THREADS, 0, ditto_cuda(be)->stream>>>(
        a, mean->data, is_h(mean), var->data, is_h(var), x->shape[1], n);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

static int run_groups(DittoBackend *be, const DittoNormParams *p, const char *op, int64_t G, const DittoTensor *x,
                      const DittoTensor *w, const DittoTensor *b, DittoTensor *y)
{
    const DittoTensor *ts[] = { x, w, b, y };
    DITTO_TRY(check_dtypes(be, op, ts, 4));
    if (ditto_tensor_numel(x) == 0)
        return 0;
    NormArgs a = norm_args(p, x, w, b, y);
    a.G = G;
    a.Cg = x->shape[1] / G;
    a.R = inner_size(x);
    a.sets = x->shape[0] * G;
    a.len = a.Cg * a.R;
    return run_sets(be, &a);
}

static int cuda_instance_norm(DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *w,
                              const DittoTensor *b, DittoTensor *y)
{
    return run_groups(be, p, "instance_norm", x->shape[1], x, w, b, y);
}

/*
 * spade_norm fast path: f16 x, gb, y, planes a multiple of 8 long, 16-byte
 * aligned. A block per plane; 8 halves per load; one pass of sums of the
 * deviations from the plane's first value and of their squares, in double
 * (fp16 inputs: exact), then one pass that writes y.
 */
static __global__ void k_spade_h8(const __half *x, const __half *gb, __half *y, int64_t C, int64_t R, float eps, bool act, float slope)
{
    __shared__ double sh[32];
    const int64_t s = blockIdx.x, n = s / C, c = s % C;
    const uint4 *xv = (const uint4 *)(x + s * R);
    const uint4 *gv = (const uint4 *)(gb + (n * 2 * C + c) * R), *bv = (const uint4 *)(gb + (n * 2 * C + C + c) * R);
    uint4 *yv = (uint4 *)(y + s * R);
    const int64_t nv = R / 8;
    /* deviations from the plane's first value: a common offset (x = 1000 +- 1) cancels before squaring */
    const float pivot = __half2float(x[s * R]);
    double s1 = 0.0, s2 = 0.0;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        uint4 u = xv[i];
        const __half2 *h = (const __half2 *)&u;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __half22float2(h[j]);
            double d0 = (double)f.x - pivot, d1 = (double)f.y - pivot;
            s1 += d0 + d1;
            s2 = fma(d0, d0, fma(d1, d1, s2));
        }
    }
    const double dm = block_sum(s1, sh) / (double)R;
    const double msq = block_sum(s2, sh) / (double)R;
    const double mean = (double)pivot + dm;
    double var = msq - dm * dm;
    var = var > 0.0 ? var : 0.0;
    const float m = (float)mean, rstd = (float)(1.0 / sqrt(var + (double)eps));
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        uint4 u = xv[i], g = gv[i], b = bv[i], o;
        const __half2 *hx = (const __half2 *)&u, *hg = (const __half2 *)&g, *hb = (const __half2 *)&b;
        __half2 *ho = (__half2 *)&o;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 fx = __half22float2(hx[j]), fg = __half22float2(hg[j]), fb = __half22float2(hb[j]);
            float v0 = fmaf((fx.x - m) * rstd, 1.0f + fg.x, fb.x), v1 = fmaf((fx.y - m) * rstd, 1.0f + fg.y, fb.y);
            if (act) {
                v0 = v0 < 0.0f ? v0 * slope : v0;
                v1 = v1 < 0.0f ? v1 * slope : v1;
            }
            ho[j] = __floats2half2_rn(v0, v1);
        }
        yv[i] = o;
    }
}

/*
 * spade_norm channels-last, f16 x, gb, y, C a multiple of 8, 16-byte
 * aligned: x (N, R, C), gb (N, R, 2C). The statistics of k_spade_h8 (sums of
 * deviations from the plane's first value x[n, 0, c] and of their squares,
 * in double) in three kernels:
 *  - k_spade_nhwc_stats: a block per (SPN_ROWS positions, SPN_TILE
 *    channels, item); 8 lanes of 8 channels by 32 rows, coalesced rows;
 *    writes the block's two sums per channel;
 *  - k_spade_nhwc_final: a thread per (n, c) adds the position ranges in
 *    order, then mean and rstd as k_spade_h8 rounds them (the ranges depend
 *    on R only: an item's result does not depend on N);
 *  - k_spade_nhwc_apply: 8 channels a thread, k_spade_h8's expression.
 * Partial sums and statistics live in the workspace.
 */
#define SPN_ROWS 512
#define SPN_TILE 64

/* part (N*C, 2, splits): sum of d and of d^2, d = x - x[n, 0, c], over the split's positions. grid (splits, C/64, N), 256 threads. */
static __global__ void k_spade_nhwc_stats(const __half *x, double *part, int64_t R, int64_t C, int splits)
{
    __shared__ double sh[2][32][SPN_TILE + 1];
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int64_t n = blockIdx.z, cv = (int64_t)blockIdx.y * 8 + tx;   /* this lane's 8-channel vector */
    double s1[8], s2[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        s1[k] = s2[k] = 0.0;
    if (cv < C / 8) {
        const __half *xn = x + n * R * C + cv * 8;
        uint4 pu = *(const uint4 *)xn;
        const __half2 *ph = (const __half2 *)&pu;
        float piv[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __half22float2(ph[j]);
            piv[2 * j] = f.x;
            piv[2 * j + 1] = f.y;
        }
        const int64_t r_end = (int64_t)(blockIdx.x + 1) * SPN_ROWS < R ? (int64_t)(blockIdx.x + 1) * SPN_ROWS : R;
        for (int64_t r = (int64_t)blockIdx.x * SPN_ROWS + ty; r < r_end; r += 32) {
            uint4 u = *(const uint4 *)(xn + r * C);
            const __half2 *h = (const __half2 *)&u;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 f = __half22float2(h[j]);
                double d0 = (double)f.x - piv[2 * j], d1 = (double)f.y - piv[2 * j + 1];
                s1[2 * j] += d0;
                s1[2 * j + 1] += d1;
                s2[2 * j] = fma(d0, d0, s2[2 * j]);
                s2[2 * j + 1] = fma(d1, d1, s2[2 * j + 1]);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        sh[0][ty][tx * 8 + k] = s1[k];
        sh[1][ty][tx * 8 + k] = s2[k];
    }
    __syncthreads();
    if (threadIdx.x < 2 * SPN_TILE) {
        const int which = threadIdx.x / SPN_TILE, cl = threadIdx.x % SPN_TILE;
        const int64_t c = (int64_t)blockIdx.y * SPN_TILE + cl;
        if (c < C) {
            double acc = 0.0;
            for (int r = 0; r < 32; r++)
                acc += sh[which][r][cl];
            part[((n * C + c) * 2 + which) * splits + blockIdx.x] = acc;
        }
    }
}

/* stat[s] = mean, stat[NC + s] = rstd of set s = n * C + c, from the partial sums in split order. */
static __global__ void k_spade_nhwc_final(const __half *x, const double *part, float *stat, int64_t R, int64_t C, int64_t NC, int splits,
                                          float eps)
{
    for (int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; s < NC; s += (int64_t)gridDim.x * blockDim.x) {
        const double *p1 = part + s * 2 * splits, *p2 = p1 + splits;
        double s1 = 0.0, s2 = 0.0;
        for (int k = 0; k < splits; k++) {
            s1 += p1[k];
            s2 += p2[k];
        }
        const float pivot = __half2float(x[s / C * R * C + s % C]);
        const double dm = s1 / (double)R, msq = s2 / (double)R;
        const double mean = (double)pivot + dm;
        double var = msq - dm * dm;
        var = var > 0.0 ? var : 0.0;
        stat[s] = (float)mean;
        stat[NC + s] = (float)(1.0 / sqrt(var + (double)eps));
    }
}

/* y = LeakyReLU?((x - mean) rstd (1 + gamma) + beta), 8 channels a thread; y may be x. */
static __global__ void k_spade_nhwc_apply(const __half *x, const __half *gb, __half *y, const float *stat, int64_t R, int64_t C, int64_t NC,
                                          int64_t nvec, bool act, float slope)
{
    const int64_t CV = C / 8;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * blockDim.x) {
        const int64_t cv = v % CV, t = v / CV, n = t / R;   /* t = n * R + position */
        uint4 u = *(const uint4 *)(x + t * C + cv * 8);
        uint4 g = *(const uint4 *)(gb + t * 2 * C + cv * 8), b = *(const uint4 *)(gb + t * 2 * C + C + cv * 8), o;
        const float *ms = stat + n * C + cv * 8, *rs = ms + NC;
        const __half2 *hx = (const __half2 *)&u, *hg = (const __half2 *)&g, *hb = (const __half2 *)&b;
        __half2 *ho = (__half2 *)&o;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 fx = __half22float2(hx[j]), fg = __half22float2(hg[j]), fb = __half22float2(hb[j]);
            float v0 = fmaf((fx.x - ms[2 * j]) * rs[2 * j], 1.0f + fg.x, fb.x);
            float v1 = fmaf((fx.y - ms[2 * j + 1]) * rs[2 * j + 1], 1.0f + fg.y, fb.y);
            if (act) {
                v0 = v0 < 0.0f ? v0 * slope : v0;
                v1 = v1 < 0.0f ? v1 * slope : v1;
            }
            ho[j] = __floats2half2_rn(v0, v1);
        }
        *(uint4 *)(y + t * C + cv * 8) = o;
    }
}

/*
 * spade_norm channels-last, any f32/f16 mix: a block per (n, c), two-pass
 * double statistics over the R positions C apart (uncoalesced; the op tests
 * and small models), then the modulation as norm_store does it.
 */
static __global__ void k_spade_nhwc_generic(NormArgs a, int64_t R, int64_t C)
{
    __shared__ double sh[32];
    for (int64_t s = blockIdx.x; s < a.sets; s += gridDim.x) {
        const int64_t n = s / C, c = s % C, base = n * R * C + c;
        double acc = 0.0;
        for (int64_t k = threadIdx.x; k < R; k += blockDim.x)
            acc += ditto_ld(a.x, base + k * C, a.xh);
        double mean = block_sum(acc, sh) / (double)R;
        acc = 0.0;
        for (int64_t k = threadIdx.x; k < R; k += blockDim.x) {
            double d = ditto_ld(a.x, base + k * C, a.xh) - mean;
            acc += d * d;
        }
        double var = block_sum(acc, sh) / (double)R;
        float m_hi, m_lo, rstd;
        split_stats(mean, var, a.eps, &m_hi, &m_lo, &rstd);
        for (int64_t k = threadIdx.x; k < R; k += blockDim.x) {
            const int64_t i = base + k * C, gi = (n * R + k) * 2 * C + c;
            float d = (ditto_ld(a.x, i, a.xh) - m_hi) - m_lo;
            float g = ditto_ld(a.gb, gi, a.gbh), bt = ditto_ld(a.gb, gi + C, a.gbh);
            float v = fmaf(d * rstd, 1.0f + g, bt);
            ditto_st(a.y, i, a.act && v < 0.0f ? v * a.slope : v, a.yh);
        }
    }
}

static int spade_nhwc(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *x, const DittoTensor *gb, DittoTensor *y)
{
    const int64_t N = x->shape[0], C = x->shape[x->ndim - 1], NC = N * C, R = ditto_tensor_numel(x) / NC;
    cudaStream_t st = ditto_cuda(be)->stream;
    const int64_t splits = (R + SPN_ROWS - 1) / SPN_ROWS;
    if (is_h(x) && is_h(gb) && is_h(y) && C % 8 == 0 && N <= 65535 && splits <= INT_MAX &&
        ((uintptr_t)x->data | (uintptr_t)gb->data | (uintptr_t)y->data) % 16 == 0) {
        const size_t part_bytes = (size_t)(NC * 2 * splits) * sizeof(double);
        char *ws;
        DITTO_TRY(ditto_cuda_workspace(be, part_bytes + (size_t)(2 * NC) * sizeof(float), (void **)&ws));
        double *part = (double *)ws;
        float *stat = (float *)(ws + part_bytes);
        const __half *xh = (const __half *)x->data;
        dim3 grid((unsigned)splits, (unsigned)((C + SPN_TILE - 1) / SPN_TILE), (unsigned)N);
        k_spade_nhwc_stats<<<grid, 256, 0, st>>>(xh, part, R, C, (int)splits);
        DITTO_CUDA_LAUNCHED(be);
        k_spade_nhwc_final<<<ditto_cuda_blocks(NC, NORM_THREADS), NORM_THREADS, 0, st>>>(xh, part, stat, R, C, NC, (int)splits, p->eps);
        DITTO_CUDA_LAUNCHED(be);
        const int64_t nvec = NC * R / 8;
        k_spade_nhwc_apply<<<ditto_cuda_blocks(nvec, NORM_THREADS), NORM_THREADS, 0, st>>>(
            xh, (const __half *)gb->data, (__half *)y->data, stat, R, C, NC, nvec, p->act, p->slope);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    DittoNormParams np = { p->eps, 0, false };
    NormArgs a = norm_args(&np, x, NULL, NULL, y);
    a.sets = NC;
    a.gb = gb->data;
    a.gbh = is_h(gb);
    a.act = p->act;
    a.slope = p->slope;
    k_spade_nhwc_generic<<<ditto_cuda_blocks(NC * NORM_THREADS, NORM_THREADS), NORM_THREADS, 0, st>>>(a, R, C);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

static int cuda_spade_norm(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *x, const DittoTensor *gb,
                           DittoTensor *y)
{
    const DittoTensor *ts[] = { x, gb, y };
    DITTO_TRY(check_dtypes(be, "spade_norm", ts, 3));
    if (ditto_tensor_numel(x) == 0)
        return 0;
    if (p->nhwc)
        return spade_nhwc(be, p, x, gb, y);
    const int64_t R = inner_size(x);
    const int64_t sets = x->shape[0] * x->shape[1];
    if (is_h(x) && is_h(gb) && is_h(y) && R % 8 == 0 && sets <= INT_MAX &&
        ((uintptr_t)x->data | (uintptr_t)gb->data | (uintptr_t)y->data) % 16 == 0) {
        k_spade_h8<<<(unsigned)sets, NORM_THREADS, 0, ditto_cuda(be)->stream>>>(
            (const __half *)x->data, (const __half *)gb->data, (__half *)y->data, x->shape[1], R, p->eps, p->act, p->slope);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    DittoNormParams np = { p->eps, 0, false };
    NormArgs a = norm_args(&np, x, NULL, NULL, y);
    a.G = x->shape[1];
    a.Cg = 1;
    a.R = inner_size(x);
    a.sets = x->shape[0] * a.G;
    a.len = a.R;
    a.gb = gb->data;
    a.gbh = is_h(gb);
    a.act = p->act;
    a.slope = p->slope;
    return run_sets(be, &a);
}

static int cuda_group_norm(DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *w,
                           const DittoTensor *b, DittoTensor *y)
{
    return run_groups(be, p, "group_norm", p->groups, x, w, b, y);
}

static int cuda_layer_norm(DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *w,
                           const DittoTensor *b, DittoTensor *y)
{
    const DittoTensor *ts[] = { x, w, b, y };
    DITTO_TRY(check_dtypes(be, "layer_norm", ts, 4));
    int64_t numel = ditto_tensor_numel(x);
    if (numel == 0)
        return 0;
    NormArgs a = norm_args(p, x, w, b, y);
    if (p->channels_first) {
        int64_t N = x->shape[0], C = x->shape[1];
        a.R = inner_size(x);
        k_layer_norm_cf<<<ditto_cuda_blocks(N * a.R, NORM_THREADS), NORM_THREADS, 0, ditto_cuda(be)->stream>>>(a, N, C);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    a.len = x->shape[x->ndim - 1];
    a.sets = numel / a.len;
    a.G = 1;
    a.Cg = a.len;
    a.R = 1;
    return run_sets(be, &a);
}

void ditto_cuda_init_norm(DittoOps *ops)
{
    ops->batch_norm = cuda_batch_norm;
    ops->instance_norm = cuda_instance_norm;
    ops->spade_norm = cuda_spade_norm;
    ops->layer_norm = cuda_layer_norm;
    ops->group_norm = cuda_group_norm;
}
