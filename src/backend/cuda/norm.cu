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
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/conv_wg.h"   /* after: its C headers come extern "C" through cuda_backend.h */

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
    /*
     * SPADE (spade_norm): per-element gamma = gb[(n*gk*C + c)*len + k], beta C
     * planes later (gk 2; gk 1: gamma only, beta 0), plus gbias[c] / gbias[C + c]
     * when given; LeakyReLU(slope) when act
     */
    const void *gb, *gbias;
    bool gbh, gbiash, act;
    int gk;
    float slope;
} NormArgs;

/* Bias of the SPADE gamma (channel c) and beta (C + c), 0 without one; gk 1 (gamma only): no beta bias. */
static __device__ __forceinline__ void spade_bias(const void *bias, bool bh, int64_t C, int64_t c, int gk, float *bg, float *bb)
{
    *bg = bias ? ditto_ld(bias, c, bh) : 0.0f;
    *bb = bias && gk == 2 ? ditto_ld(bias, C + c, bh) : 0.0f;
}

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
        int64_t gi = ((s / a.G) * a.gk * a.G + s % a.G) * a.len + k;
        float bg, bb;
        spade_bias(a.gbias, a.gbiash, a.G, s % a.G, a.gk, &bg, &bb);
        float g = ditto_ld(a.gb, gi, a.gbh) + bg, bt = a.gk == 2 ? ditto_ld(a.gb, gi + a.G * a.len, a.gbh) + bb : 0.0f;
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

/* Two-pass double statistics of the n values x[base + k * step] over the block, split as split_stats gives them (every thread). */
static __device__ __forceinline__ void block_stats(const void *x, bool xh, int64_t base, int64_t step, int64_t n, double eps, double *sh,
                                                   float *m_hi, float *m_lo, float *rstd)
{
    double acc = 0.0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
        acc += ditto_ld(x, base + k * step, xh);
    const double mean = block_sum(acc, sh) / (double)n;
    acc = 0.0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        const double d = ditto_ld(x, base + k * step, xh) - mean;
        acc += d * d;
    }
    const double var = block_sum(acc, sh) / (double)n;
    split_stats(mean, var, eps, m_hi, m_lo, rstd);
}

/* One block per set. */
static __global__ void k_norm_sets_block(NormArgs a)
{
    __shared__ double sh[32];
    for (int64_t s = blockIdx.x; s < a.sets; s += gridDim.x) {
        float m_hi, m_lo, rstd;
        block_stats(a.x, a.xh, s * a.len, 1, a.len, a.eps, sh, &m_hi, &m_lo, &rstd);
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
    a.gb = a.gbias = NULL;
    a.gbh = a.gbiash = a.act = false;
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
 * (fp16 inputs: exact), then one pass that writes y. bias (2C, f32 or f16)
 * or NULL: added to gamma and beta in fp32.
 */
static __global__ void k_spade_h8(const __half *x, const __half *gb, const void *bias, bool bh, __half *y, int64_t C, int64_t R, int gk,
                                  float eps, bool act, float slope)
{
    __shared__ double sh[32];
    const int64_t s = blockIdx.x, n = s / C, c = s % C;
    const uint4 *xv = (const uint4 *)(x + s * R);
    const uint4 *gv = (const uint4 *)(gb + (n * gk * C + c) * R), *bv = (const uint4 *)(gb + (n * gk * C + C + c) * R);   /* bv: gk 2 */
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
    float bg, bb;
    spade_bias(bias, bh, C, c, gk, &bg, &bb);
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        uint4 u = xv[i], g = gv[i], b = gk == 2 ? bv[i] : make_uint4(0u, 0u, 0u, 0u), o;
        const __half2 *hx = (const __half2 *)&u, *hg = (const __half2 *)&g, *hb = (const __half2 *)&b;
        __half2 *ho = (__half2 *)&o;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 fx = __half22float2(hx[j]), fg = __half22float2(hg[j]), fb = __half22float2(hb[j]);
            float v0 = fmaf((fx.x - m) * rstd, 1.0f + (fg.x + bg), fb.x + bb);
            float v1 = fmaf((fx.y - m) * rstd, 1.0f + (fg.y + bg), fb.y + bb);
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
 * aligned: x (N, R, C), gb (N, R, 2C). The statistics as k_spade_h8 forms
 * them (sums of deviations from the plane's first value x[n, 0, c] and of
 * their squares, in double; here a thread's 16 positions first in float) in
 * three kernels:
 *  - k_spade_nhwc_stats: a block per (SPN_ROWS positions, SPN_TILE
 *    channels, item); 8 lanes of 8 channels by 32 rows, coalesced rows;
 *    writes the block's two sums per channel;
 *  - k_spade_nhwc_final: 8 threads per (n, c) add the position ranges in
 *    a fixed order, then mean and rstd as k_spade_h8 rounds them (the
 *    ranges depend on R only: an item's result does not depend on N);
 *  - k_spade_nhwc_apply: 8 channels a thread, k_spade_h8's expression.
 * Partial sums and statistics live in the workspace. A smaller (upsampled)
 * x: the statistics over its own positions, the apply through the index map.
 */
#define SPN_ROWS 512
#define SPN_TILE 64

/*
 * part (2, splits, N*C): sum of d and of d^2, d = x - x[n, 0, c], over the
 * split's positions (set-minor, so k_spade_nhwc_final's reads of one split
 * are coalesced). grid (splits, C/64, N), 256 threads. Acc: a thread's 16
 * positions summed in float (d of two f16 values, and d^2, lose at most a
 * float rounding each), then in double; double throughout was bound by the
 * float -> double conversions (18.7 us for G_middle's 8 x 64 x 64 x 512,
 * 1.8 TB/s; ncu, PERF.md session 30).
 */
template <typename Acc>
static __global__ void k_spade_nhwc_stats(const __half *x, double *part, int64_t R, int64_t C, int splits)
{
    __shared__ double sh[2][32][SPN_TILE + 1];
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int64_t n = blockIdx.z, cv = (int64_t)blockIdx.y * 8 + tx;   /* this lane's 8-channel vector */
    Acc s1[8], s2[8];
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
                Acc d0 = (Acc)f.x - (Acc)piv[2 * j], d1 = (Acc)f.y - (Acc)piv[2 * j + 1];
                s1[2 * j] += d0;
                s1[2 * j + 1] += d1;
                s2[2 * j] = fma(d0, d0, s2[2 * j]);
                s2[2 * j + 1] = fma(d1, d1, s2[2 * j + 1]);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        sh[0][ty][tx * 8 + k] = (double)s1[k];
        sh[1][ty][tx * 8 + k] = (double)s2[k];
    }
    __syncthreads();
    if (threadIdx.x < 2 * SPN_TILE) {
        const int which = threadIdx.x / SPN_TILE, cl = threadIdx.x % SPN_TILE;
        const int64_t c = (int64_t)blockIdx.y * SPN_TILE + cl;
        if (c < C) {
            double acc = 0.0;
            for (int r = 0; r < 32; r++)
                acc += sh[which][r][cl];
            part[((int64_t)which * splits + blockIdx.x) * gridDim.z * C + n * C + c] = acc;
        }
    }
}

/*
 * stat[s] = mean, stat[NC + s] = rstd of set s = n * C + c, from the partial
 * sums: block (32, SPF_GROUPS), 32 sets a block; group g adds splits g,
 * g + SPF_GROUPS, ... in order, then the groups' sums are added in group
 * order (a fixed order that depends on R only). A thread per set adding all
 * splits was latency-bound: 13.6 us a call at 128 splits (ncu, H200).
 */
#define SPF_GROUPS 8
static __global__ void k_spade_nhwc_final(const __half *x, const double *part, float *stat, int64_t R, int64_t C, int64_t NC, int splits,
                                          float eps)
{
    __shared__ double sh[2][SPF_GROUPS][32];
    const int tx = threadIdx.x, g = threadIdx.y;
    const int64_t s = (int64_t)blockIdx.x * 32 + tx;
    double s1 = 0.0, s2 = 0.0;
    if (s < NC) {
        const double *p1 = part + s, *p2 = part + (int64_t)splits * NC + s;
        for (int k = g; k < splits; k += SPF_GROUPS) {
            s1 += p1[(int64_t)k * NC];
            s2 += p2[(int64_t)k * NC];
        }
    }
    sh[0][g][tx] = s1;
    sh[1][g][tx] = s2;
    __syncthreads();
    if (g != 0 || s >= NC)
        return;
    s1 = s2 = 0.0;
    for (int k = 0; k < SPF_GROUPS; k++) {
        s1 += sh[0][k][tx];
        s2 += sh[1][k][tx];
    }
    const float pivot = __half2float(x[s / C * R * C + s % C]);
    const double dm = s1 / (double)R, msq = s2 / (double)R;
    const double mean = (double)pivot + dm;
    double var = msq - dm * dm;
    var = var > 0.0 ? var : 0.0;
    stat[s] = (float)mean;
    stat[NC + s] = (float)(1.0 / sqrt(var + (double)eps));
}

/*
 * Nearest upsampling of a 2-D x (SpadeUp, up): y position k of a (H, W)
 * plane reads x position (k / W / fh) * wx + k % W / fw of its (H / fh, wx)
 * plane; without it position k reads k.
 */
typedef struct SpadeUp {
    bool up;
    int64_t W, wx, fh, fw;
} SpadeUp;

static __device__ __forceinline__ int64_t spade_xpos(const SpadeUp &u, int64_t k)
{
    return u.up ? k / u.W / u.fh * u.wx + k % u.W / u.fw : k;
}

/*
 * y = LeakyReLU?((x - mean) rstd (1 + gamma) + beta), gamma, beta with their
 * bias (or NULL), 8 channels a thread; y (N, R, C) may be x; a smaller x
 * (N, Rx, C) through the upsampling map. I: the index type, 32-bit whenever
 * every index fits (integer division by a run-time value is several times
 * cheaper than in 64 bits, and the upsampling map adds four).
 */
template <typename I>
static __global__ void k_spade_nhwc_apply(const __half *x, const __half *gb, const void *bias, bool bh, __half *y, const float *stat, int64_t R,
                                          int64_t Rx, SpadeUp up, int64_t C, int64_t NC, int64_t nvec, int gk, bool act, float slope)
{
    const I CV = (I)(C / 8), Ri = (I)R, Rxi = (I)Rx, Ci = (I)C, nv = (I)nvec;
    const I W = (I)up.W, wx = (I)up.wx, fh = (I)up.fh, fw = (I)up.fw;
    for (I v = (I)blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += (I)gridDim.x * blockDim.x) {
        const I cv = v % CV, t = v / CV, n = t / Ri;   /* t = n * R + position */
        I tx = t;
        if (up.up) {
            const I k = t - n * Ri;
            tx = n * Rxi + k / W / fh * wx + k % W / fw;
        }
        uint4 u = *(const uint4 *)(x + tx * Ci + cv * 8);
        const __half *gp = gb + t * (I)gk * Ci + cv * 8;
        uint4 g = *(const uint4 *)gp, b = gk == 2 ? *(const uint4 *)(gp + Ci) : make_uint4(0u, 0u, 0u, 0u), o;
        const float *ms = stat + n * Ci + cv * 8, *rs = ms + NC;
        const __half2 *hx = (const __half2 *)&u, *hg = (const __half2 *)&g, *hb = (const __half2 *)&b;
        __half2 *ho = (__half2 *)&o;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 fx = __half22float2(hx[j]), fg = __half22float2(hg[j]), fb = __half22float2(hb[j]);
            float bg0, bb0, bg1, bb1;
            spade_bias(bias, bh, C, (int64_t)(cv * 8) + 2 * j, gk, &bg0, &bb0);
            spade_bias(bias, bh, C, (int64_t)(cv * 8) + 2 * j + 1, gk, &bg1, &bb1);
            float v0 = fmaf((fx.x - ms[2 * j]) * rs[2 * j], 1.0f + (fg.x + bg0), fb.x + bb0);
            float v1 = fmaf((fx.y - ms[2 * j + 1]) * rs[2 * j + 1], 1.0f + (fg.y + bg1), fb.y + bb1);
            if (act) {
                v0 = v0 < 0.0f ? v0 * slope : v0;
                v1 = v1 < 0.0f ? v1 * slope : v1;
            }
            ho[j] = __floats2half2_rn(v0, v1);
        }
        *(uint4 *)(y + t * Ci + cv * 8) = o;
    }
}

/*
 * k_spade_nhwc_apply with each thread's channels fixed, for C / 8 = CV
 * dividing the block: thread j keeps channel vector j % CV, loads its 8
 * channels' statistics and biases once (k_spade_nhwc_apply reloads these 32
 * values per position, which bound it by load instructions, not by DRAM) and
 * walks positions j / CV + i * (block / CV) of item blockIdx.y over the
 * grid's blocks. The same expression, so the same bits.
 */
#define SPN_APPLY_BLOCKS 1024   /* about 8 resident blocks of 256 threads per SM on the H200's 132 */

template <typename I>
static __global__ void k_spade_nhwc_rows(const __half *x, const __half *gb, const void *bias, bool bh, __half *y, const float *stat, int64_t R,
                                         int64_t Rx, SpadeUp up, int64_t C, int64_t NC, int gk, bool act, float slope)
{
    const I Ci = (I)C, CV = Ci / 8, cv = (I)threadIdx.x % CV, n = (I)blockIdx.y, Ri = (I)R, Rxi = (I)Rx;
    const I W = (I)up.W, wx = (I)up.wx, fh = (I)up.fh, fw = (I)up.fw;
    const I per = (I)blockDim.x / CV;   /* positions a block covers per step */
    float ms[8], rs[8], bg[8], bb[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        ms[j] = stat[n * Ci + cv * 8 + j];
        rs[j] = stat[NC + n * Ci + cv * 8 + j];
        spade_bias(bias, bh, C, (int64_t)(cv * 8 + j), gk, &bg[j], &bb[j]);
    }
    for (I k = (I)blockIdx.x * per + (I)threadIdx.x / CV; k < Ri; k += per * (I)gridDim.x) {
        const I t = n * Ri + k, tx = up.up ? n * Rxi + k / W / fh * wx + k % W / fw : t;
        uint4 u = *(const uint4 *)(x + tx * Ci + cv * 8);
        const __half *gp = gb + t * (I)gk * Ci + cv * 8;
        uint4 g = *(const uint4 *)gp, b = gk == 2 ? *(const uint4 *)(gp + Ci) : make_uint4(0u, 0u, 0u, 0u), o;
        const __half2 *hx = (const __half2 *)&u, *hg = (const __half2 *)&g, *hb = (const __half2 *)&b;
        __half2 *ho = (__half2 *)&o;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 fx = __half22float2(hx[j]), fg = __half22float2(hg[j]), fb = __half22float2(hb[j]);
            float v0 = fmaf((fx.x - ms[2 * j]) * rs[2 * j], 1.0f + (fg.x + bg[2 * j]), fb.x + bb[2 * j]);
            float v1 = fmaf((fx.y - ms[2 * j + 1]) * rs[2 * j + 1], 1.0f + (fg.y + bg[2 * j + 1]), fb.y + bb[2 * j + 1]);
            if (act) {
                v0 = v0 < 0.0f ? v0 * slope : v0;
                v1 = v1 < 0.0f ? v1 * slope : v1;
            }
            ho[j] = __floats2half2_rn(v0, v1);
        }
        *(uint4 *)(y + t * Ci + cv * 8) = o;
    }
}

/*
 * spade_norm, any f32/f16 mix, either layout, x possibly upsampled: a block
 * per (n, c), two-pass double statistics over x's Rx positions (channels-last:
 * C apart, uncoalesced; the op tests and small models), then the modulation
 * of y's R positions as norm_store does it.
 */
static __global__ void k_spade_generic(NormArgs a, int64_t C, int64_t R, int64_t Rx, bool nhwc, SpadeUp up)
{
    __shared__ double sh[32];
    const int64_t step = nhwc ? C : 1, gstep = nhwc ? a.gk * C : 1, boff = nhwc ? C : C * R;
    for (int64_t s = blockIdx.x; s < a.sets; s += gridDim.x) {
        const int64_t n = s / C, c = s % C;
        const int64_t xb = nhwc ? n * Rx * C + c : s * Rx, yb = nhwc ? n * R * C + c : s * R;
        const int64_t gbase = nhwc ? n * R * a.gk * C + c : (n * a.gk * C + c) * R;
        float m_hi, m_lo, rstd;
        block_stats(a.x, a.xh, xb, step, Rx, a.eps, sh, &m_hi, &m_lo, &rstd);
        float bg, bb;
        spade_bias(a.gbias, a.gbiash, C, c, a.gk, &bg, &bb);
        for (int64_t k = threadIdx.x; k < R; k += blockDim.x) {
            const int64_t gi = gbase + k * gstep;
            float d = (ditto_ld(a.x, xb + spade_xpos(up, k) * step, a.xh) - m_hi) - m_lo;
            float g = ditto_ld(a.gb, gi, a.gbh) + bg, bt = a.gk == 2 ? ditto_ld(a.gb, gi + boff, a.gbh) + bb : 0.0f;
            float v = fmaf(d * rstd, 1.0f + g, bt);
            ditto_st(a.y, yb + k * step, a.act && v < 0.0f ? v * a.slope : v, a.yh);
        }
    }
}

/* The upsampling of a 4-D x to y (the front end allows it for 2-D only); hax the H axis. */
static SpadeUp spade_up(const DittoTensor *x, const DittoTensor *y, int hax)
{
    SpadeUp u = { false, 1, 1, 1, 1 };
    if (ditto_tensor_numel(x) != ditto_tensor_numel(y)) {
        u.up = true;
        u.W = y->shape[hax + 1];
        u.wx = x->shape[hax + 1];
        u.fh = y->shape[hax] / x->shape[hax];
        u.fw = u.W / u.wx;
    }
    return u;
}

/* The norm arguments of a spade_norm: x, y, gb and its bias, the activation; sets and layout by the caller. */
static NormArgs spade_args(const DittoSpadeParams *p, const DittoTensor *x, const DittoTensor *gb, const DittoTensor *bias, DittoTensor *y)
{
    DittoNormParams np = { p->eps, 0, false };
    NormArgs a = norm_args(&np, x, NULL, NULL, y);
    a.gb = gb->data;
    a.gbh = is_h(gb);
    a.gbias = bias ? bias->data : NULL;
    a.gbiash = is_h(bias);
    a.act = p->act;
    a.slope = p->slope;
    a.gk = p->gamma_only ? 1 : 2;
    return a;
}

static int spade_generic(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *x, const DittoTensor *gb, const DittoTensor *bias,
                         DittoTensor *y, int64_t C, int64_t R, int64_t Rx, SpadeUp up)
{
    NormArgs a = spade_args(p, x, gb, bias, y);
    a.sets = x->shape[0] * C;
    k_spade_generic<<<ditto_cuda_blocks(a.sets * NORM_THREADS, NORM_THREADS), NORM_THREADS, 0, ditto_cuda(be)->stream>>>(a, C, R, Rx, p->nhwc,
                                                                                                                        up);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/*
 * The channels-last statistics of f16 x (N, Rx, C), C a multiple of 8, x
 * 16-byte aligned, N <= 65535: *stat (2, N, C) = mean, then rstd, in the
 * workspace (after the partial sums), valid until the workspace's next use;
 * *more (when given): extra bytes after them, 256-byte aligned.
 */
static int nhwc_stats(DittoBackend *be, const __half *x, int64_t N, int64_t Rx, int64_t C, float eps, float **stat, size_t extra, void **more)
{
    const int64_t NC = N * C, splits = (Rx + SPN_ROWS - 1) / SPN_ROWS;
    const size_t part_bytes = (size_t)(NC * 2 * splits) * sizeof(double), stat_bytes = ((size_t)(2 * NC) * sizeof(float) + 255) / 256 * 256;
    cudaStream_t st = ditto_cuda(be)->stream;
    char *ws;
    DITTO_TRY(ditto_cuda_workspace(be, part_bytes + stat_bytes + extra, (void **)&ws));
    if (more)
        *more = ws + part_bytes + stat_bytes;
    double *part = (double *)ws;
    *stat = (float *)(ws + part_bytes);
    dim3 grid((unsigned)splits, (unsigned)((C + SPN_TILE - 1) / SPN_TILE), (unsigned)N);
    static int f32 = -1;   /* DITTO_CUDA_SPSTAT32=0: every position's deviation in double (A/B) */
    if (f32 < 0) {
        const char *e = getenv("DITTO_CUDA_SPSTAT32");
        f32 = !(e && !strcmp(e, "0"));
    }
    if (f32)
        k_spade_nhwc_stats<float><<<grid, 256, 0, st>>>(x, part, Rx, C, (int)splits);
    else
        k_spade_nhwc_stats<double><<<grid, 256, 0, st>>>(x, part, Rx, C, (int)splits);
    DITTO_CUDA_LAUNCHED(be);
    k_spade_nhwc_final<<<(unsigned)((NC + 31) / 32), dim3(32, SPF_GROUPS), 0, st>>>(x, part, *stat, Rx, C, NC, (int)splits, eps);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

static int spade_nhwc(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *x, const DittoTensor *gb, const DittoTensor *bias,
                      DittoTensor *y)
{
    const int64_t N = x->shape[0], C = x->shape[x->ndim - 1], NC = N * C, R = ditto_tensor_numel(y) / NC, Rx = ditto_tensor_numel(x) / NC;
    const SpadeUp up = spade_up(x, y, 1);
    cudaStream_t st = ditto_cuda(be)->stream;
    const int64_t splits = (Rx + SPN_ROWS - 1) / SPN_ROWS;   /* statistics over x's positions */
    if (is_h(x) && is_h(gb) && is_h(y) && C % 8 == 0 && N <= 65535 && splits <= INT_MAX &&
        ((uintptr_t)x->data | (uintptr_t)gb->data | (uintptr_t)y->data) % 16 == 0) {
        float *stat;
        const __half *xh = (const __half *)x->data;
        DITTO_TRY(nhwc_stats(be, xh, N, Rx, C, p->eps, &stat, 0, NULL));
        const int64_t nvec = NC * R / 8;
        const int blocks = ditto_cuda_blocks(nvec, NORM_THREADS);
        const void *bp = bias ? bias->data : NULL;
        __half *yh = (__half *)y->data;
        const __half *gh = (const __half *)gb->data;
        const int64_t CV = C / 8;
        const int gk = p->gamma_only ? 1 : 2;
        if (CV <= NORM_THREADS && NORM_THREADS % CV == 0) {
            /* fixed channels a thread: blocks of an item cover its positions, SPN_APPLY_BLOCKS in all */
            const int64_t per = NORM_THREADS / CV, need = (R + per - 1) / per, share = SPN_APPLY_BLOCKS / N > 0 ? SPN_APPLY_BLOCKS / N : 1;
            const dim3 grid_r((unsigned)(need < share ? need : share), (unsigned)N);
            if (2 * NC * R + (int64_t)NORM_THREADS * SPN_APPLY_BLOCKS * 2 < (int64_t)UINT32_MAX)
                k_spade_nhwc_rows<uint32_t><<<grid_r, NORM_THREADS, 0, st>>>(xh, gh, bp, is_h(bias), yh, stat, R, Rx, up, C, NC, gk, p->act,
                                                                              p->slope);
            else
                k_spade_nhwc_rows<int64_t><<<grid_r, NORM_THREADS, 0, st>>>(xh, gh, bp, is_h(bias), yh, stat, R, Rx, up, C, NC, gk, p->act,
                                                                             p->slope);
        } else if (2 * NC * R + (int64_t)blocks * NORM_THREADS < (int64_t)UINT32_MAX)   /* every element index and the loop's last step */
            k_spade_nhwc_apply<uint32_t><<<blocks, NORM_THREADS, 0, st>>>(xh, gh, bp, is_h(bias), yh, stat, R, Rx, up, C, NC, nvec, gk,
                                                                           p->act, p->slope);
        else
            k_spade_nhwc_apply<int64_t><<<blocks, NORM_THREADS, 0, st>>>(xh, gh, bp, is_h(bias), yh, stat, R, Rx, up, C, NC, nvec, gk,
                                                                          p->act, p->slope);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    return spade_generic(be, p, x, gb, bias, y, C, R, Rx, up);
}

static int cuda_spade_norm(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *x, const DittoTensor *gb,
                           const DittoTensor *bias, DittoTensor *y)
{
    const DittoTensor *ts[] = { x, gb, bias, y };
    DITTO_TRY(check_dtypes(be, "spade_norm", ts, 4));
    if (ditto_tensor_numel(x) == 0)
        return 0;
    if (p->nhwc)
        return spade_nhwc(be, p, x, gb, bias, y);
    const int64_t R = inner_size(y), Rx = inner_size(x);
    const int64_t sets = x->shape[0] * x->shape[1];
    if (R != Rx)   /* x read upsampled */
        return spade_generic(be, p, x, gb, bias, y, x->shape[1], R, Rx, spade_up(x, y, 2));
    if (is_h(x) && is_h(gb) && is_h(y) && R % 8 == 0 && sets <= INT_MAX &&
        ((uintptr_t)x->data | (uintptr_t)gb->data | (uintptr_t)y->data) % 16 == 0) {
        k_spade_h8<<<(unsigned)sets, NORM_THREADS, 0, ditto_cuda(be)->stream>>>((const __half *)x->data, (const __half *)gb->data,
                                                                                bias ? bias->data : NULL, is_h(bias), (__half *)y->data,
                                                                                x->shape[1], R, p->gamma_only ? 1 : 2, p->eps, p->act,
                                                                                p->slope);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    NormArgs a = spade_args(p, x, gb, bias, y);
    a.G = x->shape[1];
    a.Cg = 1;
    a.R = inner_size(x);
    a.sets = x->shape[0] * a.G;
    a.len = a.R;
    return run_sets(be, &a);
}

/*
 * spade_conv, any f32/f16 mix, any geometry (channels-last): a block per
 * (n, c), x's statistics as k_spade_generic forms them, then at each of y's
 * R positions gamma (and beta) as a direct 3x3 sum over a and w in fp32
 * (w element (o, ca, ky, kx) at o ws[0] + ca ws[1] + ky ws[2] + kx ws[3]):
 * the op tests' path and a fallback, not a fast one.
 */
typedef struct SpcArgs {
    const void *a, *w, *bias, *x;
    void *y;
    bool ah, wh, bh, xh, yh, gamma_only, act;
    float slope;
    double eps;
    int64_t N, H, W, Ca, lda, C, Rx, ws[4];   /* lda: a's row pitch (>= Ca: a channel slice) */
    SpadeUp up;               /* x's positions from y's */
} SpcArgs;

static __global__ void k_spade_conv_generic(SpcArgs a)
{
    __shared__ double sh[32];
    const int64_t R = a.H * a.W;
    for (int64_t s = blockIdx.x; s < a.N * a.C; s += gridDim.x) {
        const int64_t n = s / a.C, c = s % a.C, xb = n * a.Rx * a.C + c;
        float m_hi, m_lo, rstd, bg, bb;
        block_stats(a.x, a.xh, xb, a.C, a.Rx, a.eps, sh, &m_hi, &m_lo, &rstd);
        spade_bias(a.bias, a.bh, a.C, c, a.gamma_only ? 1 : 2, &bg, &bb);
        for (int64_t k = threadIdx.x; k < R; k += blockDim.x) {
            const int64_t py = k / a.W, px = k % a.W;
            float g = bg, b = bb;
            for (int ky = 0; ky < 3; ky++)
                for (int kx = 0; kx < 3; kx++) {
                    const int64_t iy = py + ky - 1, ix = px + kx - 1;
                    if (iy < 0 || iy >= a.H || ix < 0 || ix >= a.W)
                        continue;
                    const int64_t ab = ((n * a.H + iy) * a.W + ix) * a.lda, wb = c * a.ws[0] + ky * a.ws[2] + kx * a.ws[3];
                    for (int64_t ca = 0; ca < a.Ca; ca++) {
                        const float av = ditto_ld(a.a, ab + ca, a.ah);
                        g = fmaf(av, ditto_ld(a.w, wb + ca * a.ws[1], a.wh), g);
                        if (!a.gamma_only)
                            b = fmaf(av, ditto_ld(a.w, wb + a.C * a.ws[0] + ca * a.ws[1], a.wh), b);
                    }
                }
            const float d = (ditto_ld(a.x, xb + spade_xpos(a.up, k) * a.C, a.xh) - m_hi) - m_lo;
            const float v = fmaf(d * rstd, 1.0f + g, b);
            ditto_st(a.y, (n * R + k) * a.C + c, a.act && v < 0.0f ? v * a.slope : v, a.yh);
        }
    }
}

/* The fused kernel's description of a spade_conv call (true when it takes it). */
static bool spade_conv_wg(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w, const DittoTensor *bias,
                          const DittoTensor *x, const DittoTensor *y, DittoWgSpade *s)
{
    /* f16 a, x, y; w KRSC f16 (the layout the decoder binds on CUDA) */
    if (!is_h(a) || !is_h(w) || !is_h(x) || !is_h(y) || ditto_tensor_is_contiguous(w) || !ditto_tensor_is_channels_last(w) ||
        x->shape[0] > 65535 || x->shape[3] % 8 || (uintptr_t)x->data % 16)
        return false;
    memset(s, 0, sizeof *s);
    s->a = a->data, s->w = w->data, s->x = x->data, s->y = y->data;
    s->bias = bias ? bias->data : NULL;
    s->bias_f16 = is_h(bias);
    s->gamma_only = p->gamma_only, s->act = p->act, s->slope = p->slope;
    s->N = y->shape[0], s->H = y->shape[1], s->W = y->shape[2], s->C = y->shape[3], s->Ca = a->shape[3], s->lda = a->stride[2];
    s->fh = y->shape[1] / x->shape[1], s->fw = y->shape[2] / x->shape[2];
    return ditto_cuda_wg_spade_fits(be, s);
}

/*
 * The decoder takes the fused form wherever it fits (with scale-d 0 on each
 * tile's first wgmma it beats cuDNN plus spade_norm at every decoder size, in
 * the render step too). DITTO_CUDA_SPADECONV=0 keeps the two-op form (A/B).
 */
static bool cuda_spade_conv_fused(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w,
                                  const DittoTensor *bias, const DittoTensor *x, const DittoTensor *y)
{
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("DITTO_CUDA_SPADECONV");
        off = e && !strcmp(e, "0");
    }
    DittoWgSpade s;
    return !off && spade_conv_wg(be, p, a, w, bias, x, y, &s);
}

static int cuda_spade_conv(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w, const DittoTensor *bias,
                           const DittoTensor *x, DittoTensor *y)
{
    const DittoTensor *ts[] = { a, w, bias, x, y };
    DITTO_TRY(check_dtypes(be, "spade_conv", ts, 5));
    if (ditto_tensor_numel(y) == 0)
        return 0;
    DittoWgSpade s;
    if (spade_conv_wg(be, p, a, w, bias, x, y, &s)) {
        float *stat;
        DITTO_TRY(nhwc_stats(be, (const __half *)x->data, x->shape[0], x->shape[1] * x->shape[2], x->shape[3], p->eps, &stat,
                             ditto_cuda_wg_spade_wbytes(&s), &s.wt));
        s.stat = stat;
        return ditto_cuda_wg_spade(be, &s);
    }
    SpcArgs k;
    memset(&k, 0, sizeof k);
    k.a = a->data, k.w = w->data, k.bias = bias ? bias->data : NULL, k.x = x->data, k.y = y->data;
    k.ah = is_h(a), k.wh = is_h(w), k.bh = is_h(bias), k.xh = is_h(x), k.yh = is_h(y);
    k.gamma_only = p->gamma_only, k.act = p->act, k.slope = p->slope, k.eps = p->eps;
    k.N = y->shape[0], k.H = y->shape[1], k.W = y->shape[2], k.C = y->shape[3], k.Ca = a->shape[3], k.lda = a->stride[2];
    k.Rx = x->shape[1] * x->shape[2];
    k.up = spade_up(x, y, 1);
    for (int i = 0; i < 4; i++)
        k.ws[i] = w->stride[i];
    k_spade_conv_generic<<<ditto_cuda_blocks(k.N * k.C * NORM_THREADS, NORM_THREADS), NORM_THREADS, 0, ditto_cuda(be)->stream>>>(k);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
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
    ops->spade_conv = cuda_spade_conv;
    ops->spade_conv_fused = cuda_spade_conv_fused;
    ops->layer_norm = cuda_layer_norm;
    ops->group_norm = cuda_group_norm;
}
