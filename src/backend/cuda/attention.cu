/*
 * CUDA attention, rotary embedding and the fused pre-norm of rotary layers
 * (float32 or float16 storage, fp32 math).
 *
 * Attention, the LMDM shapes (float32 q/k/v, head dim 64, up to 128 keys, no
 * mask, rows of q/k/v with unit stride and 16-byte alignment; y float32 or
 * float16): one block per (batch, head, tile of QT query rows), QT/2 warps.
 * The tile's Q, the head's K and V go to shared memory with cp.async (K
 * first, in its own group, so the scores start while V is in flight). Each
 * warp owns 2 query rows and its lanes the keys lane, lane+32, ...: the 2 x 4
 * scores of a thread come from float4 shared loads (q broadcast, K rows
 * padded to 68 floats: no bank conflicts), fp32 products summed in order over
 * the 64 dims. Softmax per row stays in registers (warp max and sum; p = e *
 * (1/sum) as the CPU does); the probabilities go to shared memory transposed
 * (2 rows of a key in one float2), then each lane accumulates 2 output
 * columns of the 2 rows over the keys in order. The kernel is bound by the
 * issue rate of its few warps per SM: 2 rows per warp (not 4) halve each
 * warp's serial work and double the warps. QT is 16, or 8 when 16-row tiles
 * would leave more than half the SMs idle.
 *
 * Attention, short key rows otherwise (K and V of a head fit in shared
 * memory): one block per (batch, head, tile of query rows) stages the head's
 * K and V in shared memory once (K rows padded by one float: no bank
 * conflicts when lanes walk different keys; many loads in flight per thread,
 * as staging is latency-bound), then each warp takes one query row at a time:
 * lanes split the keys for the scores (fp32 dot products in four partial
 * sums), softmax over the row with warp max/sum (max subtracted, p = e *
 * (1/sum) as the CPU does), lanes split the output columns for
 * y = sum_j p_j v_j (two partial sums).
 *
 * Attention, other shapes: one block per (batch, head, query row), grid-stride over rows.
 *   q row -> shared memory; scores s_j = scale (q . k_j) + mask, one warp per
 *   key (lanes split D, shuffle sum); softmax over the row in fp32 (max,
 *   exp, sum, p = e * (1/sum) as the CPU does); y = sum_j p_j v_j with the
 *   lanes on output columns and the warps splitting the keys.
 * The score row lives in shared memory when it fits (Lk up to ~10k), else in
 * a global scratch slice per block (the backend workspace). q, k, v and the
 * mask are read through their strides, so head splits and transposed views
 * need no packing.
 *
 * Rotary: one thread per (row, pair), theta = (float)(pos_offset + l) * freq
 * in fp32, cosf/sinf, products rounded separately as on the CPU.
 *
 * layer_norm_rotary (lives here with the rotary; norm.cu has the plain
 * norms): one warp per row, the row in registers (pairs (2k, 2k+1) per lane):
 * FiLM residual h + (scale y + shift) rounded as the film op, statistics
 * two-pass in double, mean split hi + lo and fmaf((x - hi) - lo, rstd w, b)
 * as norm.cu's layer norm, then the rotary as above on the normalised value
 * as stored. Rows wider than 2048 run the three ops in sequence.
 *
 * tf32_out (attention, layer_norm_rotary): float32 outputs rounded to the
 * nearest TF32 value (ties to even, integer arithmetic on the bits) as they
 * are stored, so the tf32 linears that read them see exact TF32 operands.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_SMEM_MAX (46 * 1024)        /* under the 48 KiB default limit, with the static part */
#define ATT_MAX_D 4096                   /* q row cached in shared memory */
#define ATT_SCRATCH_FLOATS ((int64_t)16 << 20)   /* global score scratch bound: 64 MiB */
/* short-key kernel */
#define ATT_SMALL_THREADS 256
#define ATT_SMALL_WARPS (ATT_SMALL_THREADS / 32)
#define ATT_SMALL_ROWS 8                 /* query rows per block (1 per warp: more blocks, as staging is latency-bound) */
#define ATT_SMALL_MAX_D 128              /* head dims up to this */
#define ATT_SMALL_SMEM (48 * 1024)       /* the default dynamic shared memory limit (no static part) */
#define ATT_STAGE_UNROLL 16              /* K/V loads in flight per thread while staging (scalar) */
#define ATT_STAGE_UNROLL4 12             /* the same, float4 loads */

static int float_dtype(DittoBackend *be, const char *op, const char *name, const DittoTensor *t, bool *f16)
{
    if (t->device != DITTO_DEVICE_CUDA)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: %s is not on the cuda device", op, name);
    if (t->dtype == DITTO_F32 || t->dtype == DITTO_F16) {
        *f16 = t->dtype == DITTO_F16;
        return 0;
    }
    return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op %s: %s has dtype %s, not supported by the cuda backend (float32, float16)",
                      op, name, ditto_dtype_name(t->dtype));
}

/* ---- attention ---- */

typedef struct AttnArgs {
    const void *q, *k, *v, *mask;
    void *y;
    bool qh, kh, vh, mh, yh;
    int64_t H, Lq, Lk, D, Dv, rows;
    int64_t qs[4], ks[4], vs[4], ms[4];  /* element strides; mask strides 0 where broadcast */
    int64_t ys[4];                       /* y element strides */
    bool kv4;                            /* short-key kernel: K and V float32, rows of float4 (unit column stride, 16-byte aligned) */
    bool r32;                            /* float32 y rounded to the nearest TF32 value (tf32_out) */
    float scale;
    float *scratch;                      /* global score rows (Lk per block) or NULL: shared memory */
} AttnArgs;

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    return v;
}

/* every thread of the block calls these; sh holds ATT_WARPS floats */
static __device__ float block_sum(float v, float *sh)
{
    v = warp_sum(v);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < ATT_WARPS ? sh[lane] : 0.0f;
    return warp_sum(v);
}

static __device__ float block_max(float v, float *sh)
{
    v = warp_max(v);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < ATT_WARPS ? sh[lane] : -INFINITY;
    return warp_max(v);
}

/* dynamic shared memory: q row (D) | partial sums (ATT_WARPS x 32) | scores (Lk, when not in scratch) */
static __global__ void __launch_bounds__(ATT_THREADS) attention_kernel(const __grid_constant__ AttnArgs a)
{
    extern __shared__ float sm[];
    __shared__ float red[ATT_WARPS];
    float *qrow = sm;
    float *part = sm + a.D;
    float *s = a.scratch ? a.scratch + (int64_t)blockIdx.x * a.Lk : part + ATT_WARPS * 32;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        int64_t i = r % a.Lq, bh = r / a.Lq;
        int64_t h = bh % a.H, b = bh / a.H;
        int64_t qb = b * a.qs[0] + h * a.qs[1] + i * a.qs[2];
        int64_t kb = b * a.ks[0] + h * a.ks[1];
        int64_t vb = b * a.vs[0] + h * a.vs[1];
        int64_t mb = b * a.ms[0] + h * a.ms[1] + i * a.ms[2];
        __syncthreads();   /* the previous row is done with qrow, s and part */
        for (int64_t d = threadIdx.x; d < a.D; d += ATT_THREADS)
            qrow[d] = ditto_ld(a.q, qb + d * a.qs[3], a.qh);
        __syncthreads();
        for (int64_t j = w; j < a.Lk; j += ATT_WARPS) {
            const int64_t kj = kb + j * a.ks[2];
            float acc = 0.0f;
            for (int64_t d = lane; d < a.D; d += 32)
                acc += qrow[d] * ditto_ld(a.k, kj + d * a.ks[3], a.kh);
            acc = warp_sum(acc);
            if (lane == 0) {
                float sc = acc * a.scale;
                if (a.mask)
                    sc += ditto_ld(a.mask, mb + j * a.ms[3], a.mh);
                s[j] = sc;
            }
        }
        __syncthreads();
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < a.Lk; j += ATT_THREADS)
            mx = s[j] > mx ? s[j] : mx;
        mx = block_max(mx, red);
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < a.Lk; j += ATT_THREADS) {
            float e = expf(s[j] - mx);
            s[j] = e;
            sum += e;
        }
        /* a fully masked row (all -inf) gives NaN, as PyTorch's math path does */
        float inv = 1.0f / block_sum(sum, red);
        for (int64_t j = threadIdx.x; j < a.Lk; j += ATT_THREADS)
            s[j] *= inv;
        __syncthreads();
        for (int64_t d0 = 0; d0 < a.Dv; d0 += 32) {
            int64_t dc = d0 + lane;
            float acc = 0.0f;
            if (dc < a.Dv) {
                const int64_t vc = vb + dc * a.vs[3];
                for (int64_t j = w; j < a.Lk; j += ATT_WARPS)
                    acc += s[j] * ditto_ld(a.v, vc + j * a.vs[2], a.vh);
            }
            part[w * 32 + lane] = acc;
            __syncthreads();
            if (w == 0 && dc < a.Dv) {
                float t = 0.0f;
                for (int k = 0; k < ATT_WARPS; k++)
                    t += part[k * 32 + lane];
                ditto_st(a.y, b * a.ys[0] + h * a.ys[1] + i * a.ys[2] + dc * a.ys[3], a.r32 ? ditto_tf32_round(t) : t, a.yh);
            }
            __syncthreads();
        }
    }
}

/*
 * Short key rows. Dynamic shared memory: K (Lk x (D+1)) | V (Lk x Dv) |
 * per warp a query row (D) and a probability row (Lk). Grid: (batch*heads,
 * query tiles of ATT_SMALL_ROWS).
 */

static __device__ __forceinline__ float to_f32(float v)
{
    return v;
}

static __device__ __forceinline__ float to_f32(__half v)
{
    return __half2float(v);
}

/*
 * dst (rows x cols, row pitch ld) = the strided block at src + base. Staging
 * is latency-bound: each thread issues ATT_STAGE_UNROLL loads before its first
 * store, branch-free (the tail re-reads the last element instead of testing),
 * so they are in flight together.
 */
template <typename T>
static __device__ __forceinline__ void stage_rows(float *dst, int ld, const T *src, int64_t base, int64_t rs, int64_t cs, int rows, int cols)
{
    const int n = rows * cols;
    for (int e0 = threadIdx.x; e0 < n; e0 += ATT_SMALL_THREADS * ATT_STAGE_UNROLL) {
        float r[ATT_STAGE_UNROLL];
#pragma unroll
        for (int u = 0; u < ATT_STAGE_UNROLL; u++) {
            int e = min(e0 + u * ATT_SMALL_THREADS, n - 1), j = e / cols, d = e - j * cols;
            r[u] = to_f32(src[base + j * rs + d * cs]);
        }
#pragma unroll
        for (int u = 0; u < ATT_STAGE_UNROLL; u++) {
            int e = e0 + u * ATT_SMALL_THREADS, j = e / cols, d = e - j * cols;
            if (e < n)
                dst[j * ld + d] = r[u];
        }
    }
}

/* K and V together as float4 (a.kv4): one round of loads per thread for the LMDM shapes (about 10 float4 each). */
static __device__ __forceinline__ void stage_kv4(const AttnArgs &a, float *ks, int kp, float *vs, int64_t kb, int64_t vb, int Lk, int D, int Dv)
{
    const int kq = D / 4, vq = Dv / 4, nk = Lk * kq, n = nk + Lk * vq;
    for (int e0 = threadIdx.x; e0 < n; e0 += ATT_SMALL_THREADS * ATT_STAGE_UNROLL4) {
        float4 r[ATT_STAGE_UNROLL4];
#pragma unroll
        for (int u = 0; u < ATT_STAGE_UNROLL4; u++) {
            int e = min(e0 + u * ATT_SMALL_THREADS, n - 1);
            bool isk = e < nk;
            int f = isk ? e : e - nk, q = isk ? kq : vq, j = f / q, c = f - j * q;
            const float *src = isk ? (const float *)a.k + kb + j * a.ks[2] : (const float *)a.v + vb + j * a.vs[2];
            r[u] = *(const float4 *)(src + 4 * c);
        }
#pragma unroll
        for (int u = 0; u < ATT_STAGE_UNROLL4; u++) {
            int e = e0 + u * ATT_SMALL_THREADS;
            if (e < n) {
                bool isk = e < nk;
                int f = isk ? e : e - nk, q = isk ? kq : vq, j = f / q, c = f - j * q;
                float *dst = isk ? ks + j * kp + 4 * c : vs + j * Dv + 4 * c;
                dst[0] = r[u].x;
                dst[1] = r[u].y;
                dst[2] = r[u].z;
                dst[3] = r[u].w;
            }
        }
    }
}

static __global__ void __launch_bounds__(ATT_SMALL_THREADS) attention_small_kernel(const __grid_constant__ AttnArgs a)
{
    extern __shared__ float sm[];
    const int D = (int)a.D, Dv = (int)a.Dv, Lk = (int)a.Lk, kp = D + 1;
    float *ks = sm;
    float *vs = ks + Lk * kp;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float *qrow = vs + Lk * Dv + w * (D + Lk);
    float *p = qrow + D;
    const int64_t bh = blockIdx.x, h = bh % a.H, b = bh / a.H;
    const int64_t kb = b * a.ks[0] + h * a.ks[1], vb = b * a.vs[0] + h * a.vs[1];
    if (a.kv4) {
        stage_kv4(a, ks, kp, vs, kb, vb, Lk, D, Dv);
    } else {
        if (a.kh)
            stage_rows(ks, kp, (const __half *)a.k, kb, a.ks[2], a.ks[3], Lk, D);
        else
            stage_rows(ks, kp, (const float *)a.k, kb, a.ks[2], a.ks[3], Lk, D);
        if (a.vh)
            stage_rows(vs, Dv, (const __half *)a.v, vb, a.vs[2], a.vs[3], Lk, Dv);
        else
            stage_rows(vs, Dv, (const float *)a.v, vb, a.vs[2], a.vs[3], Lk, Dv);
    }
    __syncthreads();
    const int64_t i0 = (int64_t)blockIdx.y * ATT_SMALL_ROWS;
    for (int64_t i = i0 + w; i < i0 + ATT_SMALL_ROWS && i < a.Lq; i += ATT_SMALL_WARPS) {
        const int64_t qb = b * a.qs[0] + h * a.qs[1] + i * a.qs[2];
        const int64_t mb = b * a.ms[0] + h * a.ms[1] + i * a.ms[2];
        for (int d = lane; d < D; d += 32)
            qrow[d] = ditto_ld(a.q, qb + d * a.qs[3], a.qh);
        __syncwarp();
        /* scores: a lane per key, four partial sums (independent FMA chains) */
        float mx = -INFINITY;
        for (int j = lane; j < Lk; j += 32) {
            const float *kr = ks + j * kp;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
            int d = 0;
#pragma unroll 4
            for (; d + 4 <= D; d += 4) {
                s0 += qrow[d] * kr[d];
                s1 += qrow[d + 1] * kr[d + 1];
                s2 += qrow[d + 2] * kr[d + 2];
                s3 += qrow[d + 3] * kr[d + 3];
            }
            for (; d < D; d++)
                s0 += qrow[d] * kr[d];
            float sc = ((s0 + s1) + (s2 + s3)) * a.scale;
            if (a.mask)
                sc += ditto_ld(a.mask, mb + j * a.ms[3], a.mh);
            p[j] = sc;
            mx = sc > mx ? sc : mx;
        }
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int j = lane; j < Lk; j += 32) {
            float e = expf(p[j] - mx);
            p[j] = e;
            sum += e;
        }
        /* a fully masked row (all -inf) gives NaN, as PyTorch's math path does */
        float inv = 1.0f / warp_sum(sum);
        for (int j = lane; j < Lk; j += 32)
            p[j] *= inv;
        __syncwarp();
        /* y: a lane per output column, two partial sums over the keys */
        const int64_t yb = b * a.ys[0] + h * a.ys[1] + i * a.ys[2];
        for (int d = lane; d < Dv; d += 32) {
            float y0 = 0.0f, y1 = 0.0f;
            int j = 0;
#pragma unroll 4
            for (; j + 2 <= Lk; j += 2) {
                y0 += p[j] * vs[j * Dv + d];
                y1 += p[j + 1] * vs[(j + 1) * Dv + d];
            }
            if (j < Lk)
                y0 += p[j] * vs[j * Dv + d];
            const float yv = y0 + y1;
            ditto_st(a.y, yb + d * a.ys[3], a.r32 ? ditto_tf32_round(yv) : yv, a.yh);
        }
        __syncwarp();   /* qrow and p are reused by the warp's next row */
    }
}

/*
 * Tiled kernel for the LMDM shapes (see the top). Dynamic shared memory:
 * Q (QT x 64) | K (Lk x 68) | V (Lk x 64) | P^T (Lk x (QT + 4)).
 */
#define ATT_T_D 64                       /* head dim (q, k and v) */
#define ATT_T_KP (ATT_T_D + 4)           /* K row pitch: float4 reads of different rows hit different banks */
#define ATT_T_MAXK 128                   /* keys: 4 per lane */
#define ATT_T_R 2                        /* query rows per warp (the P^T and y code is written for 2) */

static size_t att_tile_smem(int qt, int64_t lk)
{
    return sizeof(float) * (size_t)(qt * ATT_T_D + lk * ATT_T_KP + lk * ATT_T_D + lk * (qt + 4));
}

/* 16 bytes global -> shared, asynchronously where the GPU can (sm_80+). */
static __device__ __forceinline__ void cp16(float *dst, const float *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
#else
    *(float4 *)dst = *(const float4 *)src;
#endif
}

static __device__ __forceinline__ void cp_commit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
static __device__ __forceinline__ void cp_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* QT query rows per block, ATT_T_R per warp */
template <int QT>
static __global__ void __launch_bounds__(QT / ATT_T_R * 32) attention_tile_kernel(const __grid_constant__ AttnArgs a)
{
    constexpr int R = ATT_T_R, NT = QT / R * 32, PP = QT + 4, D4 = ATT_T_D / 4;
    extern __shared__ __align__(16) float sm[];
    const int Lk = (int)a.Lk, nkc = (Lk + 31) / 32;
    float *qs = sm, *ks = qs + QT * ATT_T_D, *vs = ks + Lk * ATT_T_KP, *pt = vs + Lk * ATT_T_D;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int64_t bh = blockIdx.x, h = bh % a.H, b = bh / a.H, i0 = (int64_t)blockIdx.y * QT;
    const float *qg = (const float *)a.q + b * a.qs[0] + h * a.qs[1];
    const float *kg = (const float *)a.k + b * a.ks[0] + h * a.ks[1];
    const float *vg = (const float *)a.v + b * a.vs[0] + h * a.vs[1];
    /* group 0: the Q tile (rows past Lq zero) and K; group 1: V */
    for (int e = threadIdx.x; e < QT * D4; e += NT) {
        int r = e / D4, c = e - r * D4;
        if (i0 + r < a.Lq)
            cp16(qs + r * ATT_T_D + 4 * c, qg + (i0 + r) * a.qs[2] + 4 * c);
        else
            *(float4 *)(qs + r * ATT_T_D + 4 * c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int e = threadIdx.x; e < Lk * D4; e += NT) {
        int j = e / D4, c = e - j * D4;
        cp16(ks + j * ATT_T_KP + 4 * c, kg + j * a.ks[2] + 4 * c);
    }
    cp_commit();
    for (int e = threadIdx.x; e < Lk * D4; e += NT) {
        int j = e / D4, c = e - j * D4;
        cp16(vs + j * ATT_T_D + 4 * c, vg + j * a.vs[2] + 4 * c);
    }
    cp_commit();
    cp_wait<1>();
    __syncthreads();

    /* scores of rows R w .. R w + R-1 against keys lane + 32 c: s[r][c] = sum_d q[r][d] k[j][d], d in order */
    float s[R][4];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            s[r][c] = 0.0f;
    const float *q0 = qs + (R * w) * ATT_T_D;
    const float *kr[4];
#pragma unroll
    for (int c = 0; c < 4; c++)
        kr[c] = ks + min(lane + 32 * c, Lk - 1) * ATT_T_KP;   /* keys past Lk read the last one, masked below */
#pragma unroll 4
    for (int d = 0; d < ATT_T_D; d += 4) {
        float4 qv[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            qv[r] = *(const float4 *)(q0 + r * ATT_T_D + d);
#pragma unroll
        for (int c = 0; c < 4; c++) {
            if (c < nkc) {
                const float4 kv = *(const float4 *)(kr[c] + d);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    s[r][c] = fmaf(qv[r].x, kv.x, s[r][c]);
                    s[r][c] = fmaf(qv[r].y, kv.y, s[r][c]);
                    s[r][c] = fmaf(qv[r].z, kv.z, s[r][c]);
                    s[r][c] = fmaf(qv[r].w, kv.w, s[r][c]);
                }
            }
        }
    }
    /* softmax per row over the warp: max subtracted, float sum, p = e * (1/sum) */
#pragma unroll
    for (int r = 0; r < R; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            bool valid = c < nkc && lane + 32 * c < Lk;
            s[r][c] = valid ? s[r][c] * a.scale : -INFINITY;
            mx = s[r][c] > mx ? s[r][c] : mx;
        }
        mx = warp_max(mx);
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float e = c < nkc && lane + 32 * c < Lk ? expf(s[r][c] - mx) : 0.0f;
            s[r][c] = e;
            sum += e;
        }
        float inv = 1.0f / warp_sum(sum);
#pragma unroll
        for (int c = 0; c < 4; c++)
            s[r][c] *= inv;
    }
#pragma unroll
    for (int c = 0; c < 4; c++) {
        int j = lane + 32 * c;
        if (c < nkc && j < Lk)
            *(float2 *)(pt + j * PP + R * w) = make_float2(s[0][c], s[1][c]);
    }
    cp_wait<0>();
    __syncthreads();   /* V in shared memory (P^T rows are the warp's own: ordered by the same barrier) */

    /* y[r][2 lane + t] = sum_j p[r][j] v[j][2 lane + t], j in order */
    float y[R][2];
#pragma unroll
    for (int r = 0; r < R; r++)
        y[r][0] = y[r][1] = 0.0f;
    const float *pw = pt + R * w;
    const float *vc = vs + 2 * lane;
#pragma unroll 4
    for (int j = 0; j < Lk; j++) {
        const float2 p2 = *(const float2 *)(pw + j * PP);
        const float p[R] = { p2.x, p2.y };
        const float2 v = *(const float2 *)(vc + j * ATT_T_D);
#pragma unroll
        for (int r = 0; r < R; r++) {
            y[r][0] = fmaf(p[r], v.x, y[r][0]);
            y[r][1] = fmaf(p[r], v.y, y[r][1]);
        }
    }
    const int64_t yb = b * a.ys[0] + h * a.ys[1];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t i = i0 + R * w + r;
        if (i < a.Lq) {
            const int64_t yo = yb + i * a.ys[2] + (int64_t)(2 * lane) * a.ys[3];
            ditto_st(a.y, yo, a.r32 ? ditto_tf32_round(y[r][0]) : y[r][0], a.yh);
            ditto_st(a.y, yo + a.ys[3], a.r32 ? ditto_tf32_round(y[r][1]) : y[r][1], a.yh);
        }
    }
}

/* The SMs of the current device (cached per device). */
static int sm_count(DittoBackend *be)
{
    static int counts[64];
    int dev = ditto_cuda(be)->device;
    if (dev < 0 || dev >= 64)
        return 1;
    if (!counts[dev]) {
        int n = 0;
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1) {
            cudaGetLastError();
            n = 1;
        }
        counts[dev] = n;
    }
    return counts[dev];
}

/* Launch the tiled kernel when the shapes and layouts are its own; returns 1 if launched, 0 if not, or an error. */
static int attention_tile(DittoBackend *be, const AttnArgs &a, int64_t B, cudaStream_t st)
{
    if (a.mask || a.qh || a.kh || a.vh || a.D != ATT_T_D || a.Dv != ATT_T_D || a.Lk < 1 || a.Lk > ATT_T_MAXK)
        return 0;
    if (a.qs[3] != 1 || a.ks[3] != 1 || a.vs[3] != 1 || (uintptr_t)a.q % 16 || (uintptr_t)a.k % 16 || (uintptr_t)a.v % 16)
        return 0;
    for (int i = 0; i < 3; i++)
        if (a.qs[i] % 4 || a.ks[i] % 4 || a.vs[i] % 4)
            return 0;
    /*
     * 16-row tiles: 4 warps, one per SM sub-partition, each with 4 rows; the
     * staging of K and V is shared by twice the rows of 8-row tiles. 8-row
     * tiles only when 16-row ones would leave more than half the SMs idle.
     */
    const int64_t bhs = B * a.H, t16 = (a.Lq + 15) / 16;
    const bool big = 2 * bhs * t16 >= sm_count(be);
    const int qt = big ? 16 : 8;
    const int64_t tiles = (a.Lq + qt - 1) / qt;
    if (bhs > INT32_MAX || tiles > 65535)
        return 0;
    const size_t smem = att_tile_smem(qt, a.Lk);
    static bool attr[2];
    if (!attr[big]) {
        /* above the 48 KiB default: opt in once, for the largest tile */
        cudaError_t e = big ? cudaFuncSetAttribute(attention_tile_kernel<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)att_tile_smem(16, ATT_T_MAXK))
                            : cudaFuncSetAttribute(attention_tile_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)att_tile_smem(8, ATT_T_MAXK));
        if (e != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        attr[big] = true;
    }
    dim3 grid((unsigned)bhs, (unsigned)tiles);
    if (big)
        attention_tile_kernel<16><<<grid, 16 / ATT_T_R * 32, smem, st>>>(a);
    else
        attention_tile_kernel<8><<<grid, 8 / ATT_T_R * 32, smem, st>>>(a);
    DITTO_CUDA_LAUNCHED(be);
    return 1;
}

static int cuda_attention(DittoBackend *be, const DittoAttentionParams *p, const DittoTensor *q, const DittoTensor *k,
                          const DittoTensor *v, const DittoTensor *mask, DittoTensor *y)
{
    AttnArgs a;
    memset(&a, 0, sizeof a);
    DITTO_TRY(float_dtype(be, "attention", "q", q, &a.qh));
    DITTO_TRY(float_dtype(be, "attention", "k", k, &a.kh));
    DITTO_TRY(float_dtype(be, "attention", "v", v, &a.vh));
    DITTO_TRY(float_dtype(be, "attention", "y", y, &a.yh));
    if (mask)
        DITTO_TRY(float_dtype(be, "attention", "mask", mask, &a.mh));
    int64_t B = q->shape[0];
    a.H = q->shape[1];
    a.Lq = q->shape[2];
    a.D = q->shape[3];
    a.Lk = k->shape[2];
    a.Dv = v->shape[3];
    a.scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)(a.D > 0 ? a.D : 1)));
    a.r32 = p->tf32_out && !a.yh;
    cudaStream_t st = ditto_cuda(be)->stream;
    if (B * a.H * a.Lq * a.Dv == 0)
        return 0;
    if (a.Lk == 0) {
        /* softmax over no keys, then an empty sum: zeros (PyTorch's math path); y may be strided */
        return be->ops.fill(be, 0.0f, y);
    }
    if (a.D > ATT_MAX_D)
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op attention: head dim %lld > %d on the cuda backend",
                          (long long)a.D, ATT_MAX_D);
    a.q = q->data;
    a.k = k->data;
    a.v = v->data;
    a.y = y->data;
    a.mask = mask ? mask->data : NULL;
    for (int i = 0; i < 4; i++) {
        a.qs[i] = q->stride[i];
        a.ks[i] = k->stride[i];
        a.vs[i] = v->stride[i];
        a.ys[i] = y->stride[i];
    }
    if (mask) {
        int off = 4 - mask->ndim;
        for (int i = 0; i < 4; i++) {
            int mi = i - off;
            a.ms[i] = (mi >= 0 && mask->shape[mi] != 1) ? mask->stride[mi] : 0;
        }
    }
    a.rows = B * a.H * a.Lq;
    int trc = attention_tile(be, a, B, st);
    if (trc != 0)
        return trc < 0 ? trc : 0;
    /* short key rows: the head's K and V staged in shared memory */
    size_t small = sizeof(float) * (size_t)(a.Lk * (a.D + 1 + a.Dv) + ATT_SMALL_WARPS * (a.D + a.Lk));
    if (a.D <= ATT_SMALL_MAX_D && a.Dv <= ATT_SMALL_MAX_D && small <= ATT_SMALL_SMEM && B * a.H <= INT32_MAX) {
        dim3 grid((unsigned)(B * a.H), (unsigned)((a.Lq + ATT_SMALL_ROWS - 1) / ATT_SMALL_ROWS));
        if (grid.y <= 65535) {
            /* float4 staging: float32 K and V, unit column stride, every row start 16-byte aligned */
            bool al = ((uintptr_t)a.k % 16) == 0 && ((uintptr_t)a.v % 16) == 0 && a.D % 4 == 0 && a.Dv % 4 == 0;
            for (int i = 0; i < 3 && al; i++)
                al = a.ks[i] % 4 == 0 && a.vs[i] % 4 == 0;
            a.kv4 = al && !a.kh && !a.vh && a.ks[3] == 1 && a.vs[3] == 1;
            /* as much shared memory as the SM has: several 47 KB blocks per SM, the grid in one wave */
            static bool carveout;
            if (!carveout) {
                cudaFuncSetAttribute(attention_small_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
                cudaGetLastError();   /* a hint only */
                carveout = true;
            }
            attention_small_kernel<<<grid, ATT_SMALL_THREADS, small, st>>>(a);
            DITTO_CUDA_LAUNCHED(be);
            return 0;
        }
    }
    size_t fixed = sizeof(float) * (size_t)(a.D + ATT_WARPS * 32);
    size_t smem = fixed + sizeof(float) * (size_t)a.Lk;
    int64_t blocks = a.rows < ((int64_t)1 << 20) ? a.rows : ((int64_t)1 << 20);
    if (smem > ATT_SMEM_MAX) {
        /* long key rows: scores in a global slice per block */
        smem = fixed;
        int64_t cap = ATT_SCRATCH_FLOATS / a.Lk;
        if (cap < 1)
            cap = 1;
        if (blocks > cap)
            blocks = cap;
        void *ws = NULL;
        DITTO_TRY(ditto_cuda_workspace(be, sizeof(float) * (size_t)(blocks * a.Lk), &ws));
        a.scratch = (float *)ws;
    }
    attention_kernel<<<(unsigned)blocks, ATT_THREADS, smem, st>>>(a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- rotary ---- */

typedef struct FreqDims {
    int ndim;
    int64_t shape[DITTO_MAX_DIMS], stride[DITTO_MAX_DIMS];
} FreqDims;

/* element offset of row-major index i of a strided freqs tensor */
static __device__ __forceinline__ int64_t freq_offset(const FreqDims *f, int64_t i)
{
    int64_t off = 0;
#pragma unroll
    for (int d = DITTO_MAX_DIMS - 1; d >= 0; d--) {
        if (d < f->ndim) {
            int64_t n = f->shape[d];
            int64_t q = i / n;
            off += (i - q * n) * f->stride[d];
            i = q;
        }
    }
    return off;
}

static __global__ void rotary_kernel(const __grid_constant__ FreqDims fd, const float *freqs, const void *x, bool xh, void *y, bool yh,
                                     int64_t pairs, int64_t half, int64_t L, int64_t pos_offset)
{
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < pairs; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / half, k = t - r * half;
        /* theta in float32 as PyTorch forms it: (float)position * freq */
        float pos = (float)(pos_offset + r % L);
        float th = pos * freqs[freq_offset(&fd, k)];
        float c = cosf(th), s = sinf(th);
        float x0 = ditto_ld(x, 2 * t, xh), x1 = ditto_ld(x, 2 * t + 1, xh);   /* both read before writing: y may be x */
        ditto_st(y, 2 * t, __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)), yh);
        ditto_st(y, 2 * t + 1, __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)), yh);
    }
}

static int cuda_rotary(DittoBackend *be, const DittoRotaryParams *p, const DittoTensor *x, const DittoTensor *freqs, DittoTensor *y)
{
    bool xh = false, yh = false;
    DITTO_TRY(float_dtype(be, "rotary", "x", x, &xh));
    DITTO_TRY(float_dtype(be, "rotary", "y", y, &yh));
    if (freqs->device != DITTO_DEVICE_CUDA)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op rotary: freqs is not on the cuda device");
    int64_t L = x->shape[1], half = x->shape[2] / 2;
    int64_t pairs = x->shape[0] * L * half;
    if (pairs == 0)
        return 0;
    FreqDims fd;
    memset(&fd, 0, sizeof fd);
    fd.ndim = freqs->ndim;
    for (int d = 0; d < freqs->ndim; d++) {
        fd.shape[d] = freqs->shape[d];
        fd.stride[d] = freqs->stride[d];
    }
    rotary_kernel<<<ditto_cuda_blocks(pairs, 256), 256, 0, ditto_cuda(be)->stream>>>(
        fd, (const float *)freqs->data, x->data, xh, y->data, yh, pairs, half, L, p->pos_offset);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- layer_norm_rotary ---- */

#define LNR_THREADS 128
#define LNR_MAX_PAIRS 1024               /* C up to 2048 in registers (NP <= 8 pairs a thread) */

typedef struct LnRotArgs {
    void *h;                             /* FiLM: updated in place */
    const void *y, *sc, *sh, *w, *b;
    const float *freqs;
    void *a, *ra;
    bool hh, yh, sch, shh, wh, bh, ah, rah;
    bool r32;                            /* float32 a and ra rounded to TF32 (tf32_out) */
    int nd;                              /* rank of h: rows over dims [0, nd-1), positions along nd-2 */
    int64_t rows, L, C;
    int64_t shape[DITTO_MAX_DIMS];
    int64_t ys[DITTO_MAX_DIMS], scs[DITTO_MAX_DIMS], shs[DITTO_MAX_DIMS];   /* element strides; 0 where scale/shift broadcast */
    double eps;
    int64_t pos_offset;
    FreqDims fd;
} LnRotArgs;

static __device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Rounded to the storage dtype and back (what the next op would read from it). */
static __device__ __forceinline__ float as_stored(float v, bool f16)
{
    return f16 ? __half2float(__float2half_rn(v)) : v;
}

/* Sum over the block (LNR_THREADS threads) in double; sh holds LNR_THREADS / 32 doubles. */
static __device__ __forceinline__ double lnr_block_sum(double v, double *sh)
{
    v = warp_sum_d(v);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();   /* sh may still be read from the previous sum */
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    double t = 0.0;
    for (int i = 0; i < LNR_THREADS / 32; i++)
        t += sh[i];
    return t;
}

/* FiLM as the film op: MUL, ADD shift, ADD residual, each rounded */
static __device__ __forceinline__ float lnr_film(float x, float sc, float y, float sh)
{
    return __fadd_rn(x, __fadd_rn(__fmul_rn(sc, y), sh));
}

/*
 * The row's statistics from every thread's pairs v (pairs k = tid +
 * LNR_THREADS j below half) and their sum: two-pass in double; the mean
 * split into two floats for fmaf((x - hi) - lo, rstd w, b) as norm.cu's
 * layer norm.
 */
template <int NP>
static __device__ __forceinline__ void lnr_stats(const float (&v)[NP][2], int64_t half, double sum, double *sh, const LnRotArgs &a, float *m_hi,
                                                 float *m_lo, float *rstd)
{
    const double mean = lnr_block_sum(sum, sh) / (double)a.C;
    double acc = 0.0;
#pragma unroll
    for (int j = 0; j < NP; j++) {
        if (threadIdx.x + (int64_t)LNR_THREADS * j < half) {
            double d0 = (double)v[j][0] - mean, d1 = (double)v[j][1] - mean;
            acc += d0 * d0;
            acc += d1 * d1;
        }
    }
    const double var = lnr_block_sum(acc, sh) / (double)a.C;
    *m_hi = (float)mean;
    *m_lo = (float)(mean - (double)*m_hi);
    *rstd = (float)(1.0 / sqrt(var + a.eps));
}

/* The rotary of one normalised pair (each product rounded, as the CPU does). */
static __device__ __forceinline__ void lnr_rotate(float o0, float o1, float cs, float sn, float *r0, float *r1)
{
    *r0 = __fsub_rn(__fmul_rn(o0, cs), __fmul_rn(o1, sn));
    *r1 = __fadd_rn(__fmul_rn(o1, cs), __fmul_rn(o0, sn));
}

/*
 * A block per row (rows are short: 160 of 512 in the LMDM, so a warp per
 * row left most SMs idle and each lane 16 values to do in sequence);
 * thread t holds pairs k = t + LNR_THREADS j (elements 2k, 2k+1), j < NP.
 */
template <int NP>
static __global__ void __launch_bounds__(LNR_THREADS) k_layer_norm_rotary(const __grid_constant__ LnRotArgs a)
{
    __shared__ double sh[LNR_THREADS / 32];
    const int64_t row = blockIdx.x;
    const int tid = threadIdx.x;
    const int64_t half = a.C / 2, l = row % a.L;
    void *hrow = (char *)a.h + (size_t)(row * a.C) * (a.hh ? 2 : 4);
    /* the row's offsets in y, scale and shift (the FiLM operands) */
    int64_t yo = 0, sco = 0, sho = 0;
    if (a.y) {
        int64_t r = row;
        for (int d = a.nd - 2; d >= 0; d--) {
            const int64_t i = r % a.shape[d];
            r /= a.shape[d];
            yo += i * a.ys[d];
            sco += i * a.scs[d];
            sho += i * a.shs[d];
        }
    }
    const int64_t yc = a.ys[a.nd - 1], scc = a.scs[a.nd - 1], shc = a.shs[a.nd - 1];
    float v[NP][2];
    double acc = 0.0;
#pragma unroll
    for (int j = 0; j < NP; j++) {
        const int64_t k = tid + (int64_t)LNR_THREADS * j;
        v[j][0] = v[j][1] = 0.0f;
        if (k < half) {
#pragma unroll
            for (int t = 0; t < 2; t++) {
                const int64_t c = 2 * k + t;
                float x = ditto_ld(hrow, c, a.hh);
                if (a.y) {
                    x = lnr_film(x, ditto_ld(a.sc, sco + c * scc, a.sch), ditto_ld(a.y, yo + c * yc, a.yh), ditto_ld(a.sh, sho + c * shc, a.shh));
                    ditto_st(hrow, c, x, a.hh);
                    x = as_stored(x, a.hh);
                }
                v[j][t] = x;
                acc += (double)x;
            }
        }
    }
    float m_hi, m_lo, rstd;
    lnr_stats<NP>(v, half, acc, sh, a, &m_hi, &m_lo, &rstd);
    const bool nh = a.a ? a.ah : a.rah;   /* dtype the rotary reads the norm from */
    const float pos = (float)(a.pos_offset + l);
#pragma unroll
    for (int j = 0; j < NP; j++) {
        const int64_t k = tid + (int64_t)LNR_THREADS * j;
        if (k < half) {
            float o[2];
#pragma unroll
            for (int t = 0; t < 2; t++) {
                const int64_t c = 2 * k + t;
                float sc = a.w ? rstd * ditto_ld(a.w, c, a.wh) : rstd;
                float bv = a.b ? ditto_ld(a.b, c, a.bh) : 0.0f;
                o[t] = fmaf((v[j][t] - m_hi) - m_lo, sc, bv);
                if (a.a)
                    ditto_st(a.a, row * a.C + c, a.r32 && !a.ah ? ditto_tf32_round(o[t]) : o[t], a.ah);
                o[t] = as_stored(o[t], nh);
            }
            if (a.ra) {
                float th = pos * a.freqs[freq_offset(&a.fd, k)];
                float r0, r1;
                lnr_rotate(o[0], o[1], cosf(th), sinf(th), &r0, &r1);
                if (a.r32 && !a.rah) {
                    r0 = ditto_tf32_round(r0);
                    r1 = ditto_tf32_round(r1);
                }
                ditto_st(a.ra, row * a.C + 2 * k, r0, a.rah);
                ditto_st(a.ra, row * a.C + 2 * k + 1, r1, a.rah);
            }
        }
    }
}

/* Store the pair (v0, v1) at element 2k of a float32 or float16 row (8- or 4-byte aligned). */
static __device__ __forceinline__ void st_pair(void *row, int k, float v0, float v1, bool f16)
{
    if (f16)
        ((__half2 *)row)[k] = __floats2half2_rn(v0, v1);
    else
        ((float2 *)row)[k] = make_float2(v0, v1);
}

/*
 * The same arithmetic as k_layer_norm_rotary, in the same order (so the
 * same bits), for the LMDM's layouts: float32 h, y, scale, shift, weight,
 * bias and freqs whose pairs are float2-aligned, contiguous outputs. The
 * generic kernel loads and stores element by element through void pointers,
 * so each FiLM element (and each output's weight, bias, frequency) waited
 * for the store before it: about eight dependent memory round trips per
 * thread. Here every load is issued first, the rotary's cos/sin are taken
 * while the statistics reduce, and stores come last.
 */
template <int NP>
static __global__ void __launch_bounds__(LNR_THREADS) k_lnr_vec(const __grid_constant__ LnRotArgs a)
{
    __shared__ double sh[LNR_THREADS / 32];
    const int64_t row = blockIdx.x;
    const int tid = threadIdx.x, half = (int)(a.C / 2);
    float2 *hrow = (float2 *)((float *)a.h + row * a.C);
    /* 32-bit index arithmetic (lnr_vec_ok: rows and dims fit): a 64-bit division is a long instruction sequence */
    int64_t yo = 0, sco = 0, sho = 0;
    if (a.y) {
        uint32_t r = (uint32_t)row;
        for (int d = a.nd - 2; d >= 0; d--) {
            const uint32_t n = (uint32_t)a.shape[d], q = r / n, i = r - q * n;
            r = q;
            yo += i * a.ys[d];
            sco += i * a.scs[d];
            sho += i * a.shs[d];
        }
    }
    const float2 *yr = (const float2 *)((const float *)a.y + yo), *scr = (const float2 *)((const float *)a.sc + sco);
    const float2 *shr = (const float2 *)((const float *)a.sh + sho);
    float2 x[NP], yv[NP], sv[NP], tv[NP], wv[NP], bv[NP];
    float fq[NP], v[NP][2];
#pragma unroll
    for (int j = 0; j < NP; j++) {
        const int k = tid + LNR_THREADS * j;
        if (k < half) {
            x[j] = hrow[k];
            if (a.y) {
                yv[j] = yr[k];
                sv[j] = scr[k];
                tv[j] = shr[k];
            }
            if (a.w)
                wv[j] = ((const float2 *)a.w)[k];
            if (a.b)
                bv[j] = ((const float2 *)a.b)[k];
            if (a.ra)
                fq[j] = a.freqs[k];
        }
    }
    double acc = 0.0;
#pragma unroll
    for (int j = 0; j < NP; j++) {
        if (tid + LNR_THREADS * j < half) {
            if (a.y) {
                x[j].x = lnr_film(x[j].x, sv[j].x, yv[j].x, tv[j].x);
                x[j].y = lnr_film(x[j].y, sv[j].y, yv[j].y, tv[j].y);
                hrow[tid + LNR_THREADS * j] = x[j];
            }
            v[j][0] = x[j].x;
            v[j][1] = x[j].y;
            acc += (double)x[j].x;
            acc += (double)x[j].y;
        }
    }
    const float pos = (float)(a.pos_offset + (int64_t)((uint32_t)row % (uint32_t)a.L));
    float cs[NP], sn[NP];
#pragma unroll
    for (int j = 0; j < NP; j++) {
        cs[j] = 1.0f;
        sn[j] = 0.0f;
        if (a.ra && tid + LNR_THREADS * j < half) {
            const float th = pos * fq[j];
            cs[j] = cosf(th);
            sn[j] = sinf(th);
        }
    }
    float m_hi, m_lo, rstd;
    lnr_stats<NP>(v, half, acc, sh, a, &m_hi, &m_lo, &rstd);
    const bool nh = a.a ? a.ah : a.rah;
    void *arow = a.a ? (char *)a.a + (size_t)(row * a.C) * (a.ah ? 2 : 4) : NULL;
    void *rrow = a.ra ? (char *)a.ra + (size_t)(row * a.C) * (a.rah ? 2 : 4) : NULL;
#pragma unroll
    for (int j = 0; j < NP; j++) {
        const int k = tid + LNR_THREADS * j;
        if (k < half) {
            const float s0 = a.w ? rstd * wv[j].x : rstd, s1 = a.w ? rstd * wv[j].y : rstd;
            float o0 = fmaf((x[j].x - m_hi) - m_lo, s0, a.b ? bv[j].x : 0.0f);
            float o1 = fmaf((x[j].y - m_hi) - m_lo, s1, a.b ? bv[j].y : 0.0f);
            if (arow) {
                const bool r = a.r32 && !a.ah;
                st_pair(arow, k, r ? ditto_tf32_round(o0) : o0, r ? ditto_tf32_round(o1) : o1, a.ah);
            }
            o0 = as_stored(o0, nh);
            o1 = as_stored(o1, nh);
            if (rrow) {
                float r0, r1;
                lnr_rotate(o0, o1, cs[j], sn[j], &r0, &r1);
                if (a.r32 && !a.rah) {
                    r0 = ditto_tf32_round(r0);
                    r1 = ditto_tf32_round(r1);
                }
                st_pair(rrow, k, r0, r1, a.rah);
            }
        }
    }
}

/* x[i] = the nearest TF32 value of x[i]. */
static __global__ void k_round_tf32(float *x, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = ditto_tf32_round(x[i]);
}

template <int NP>
static void launch_lnr(const LnRotArgs &a, bool vec, cudaStream_t st)
{
    if (vec)
        k_lnr_vec<NP><<<(unsigned)a.rows, LNR_THREADS, 0, st>>>(a);
    else
        k_layer_norm_rotary<NP><<<(unsigned)a.rows, LNR_THREADS, 0, st>>>(a);
}

static bool al8(const void *p)
{
    return (uintptr_t)p % 8 == 0;
}

/* k_lnr_vec's layouts: float32 inputs whose pairs are float2-aligned (even strides, unit last stride), contiguous freqs. */
static bool lnr_vec_ok(const LnRotArgs &k)
{
    if (k.rows > INT32_MAX || k.L > INT32_MAX)
        return false;
    for (int i = 0; i < k.nd; i++)
        if (k.shape[i] > INT32_MAX)
            return false;
    if (k.hh || !al8(k.h) || (k.w && (k.wh || !al8(k.w))) || (k.b && (k.bh || !al8(k.b))) || (k.a && !al8(k.a)) || (k.ra && !al8(k.ra)))
        return false;
    if (k.ra && (k.fd.ndim != 1 || k.fd.stride[0] != 1))
        return false;
    if (k.y) {
        if (k.yh || k.sch || k.shh || !al8(k.y) || !al8(k.sc) || !al8(k.sh))
            return false;
        if (k.ys[k.nd - 1] != 1 || k.scs[k.nd - 1] != 1 || k.shs[k.nd - 1] != 1)
            return false;
        for (int i = 0; i < k.nd - 1; i++)
            if (k.ys[i] % 2 || k.scs[i] % 2 || k.shs[i] % 2)
                return false;
    }
    return true;
}

/* Element strides of t broadcast to h's shape (same rank): 0 on its size-1 dims. */
static void bcast_strides(const DittoTensor *t, int64_t *s)
{
    for (int i = 0; i < t->ndim; i++)
        s[i] = t->shape[i] == 1 ? 0 : t->stride[i];
}

static int cuda_layer_norm_rotary(DittoBackend *be, const DittoLnRotaryParams *p, DittoTensor *h, const DittoTensor *y, const DittoTensor *scale,
                                  const DittoTensor *shift, const DittoTensor *w, const DittoTensor *b, const DittoTensor *freqs, DittoTensor *a,
                                  DittoTensor *ra)
{
    const char *op = "layer_norm_rotary";
    LnRotArgs k;
    memset(&k, 0, sizeof k);
    DITTO_TRY(float_dtype(be, op, "h", h, &k.hh));
    if (y) {
        DITTO_TRY(float_dtype(be, op, "y", y, &k.yh));
        DITTO_TRY(float_dtype(be, op, "scale", scale, &k.sch));
        DITTO_TRY(float_dtype(be, op, "shift", shift, &k.shh));
    }
    if (w)
        DITTO_TRY(float_dtype(be, op, "weight", w, &k.wh));
    if (b)
        DITTO_TRY(float_dtype(be, op, "bias", b, &k.bh));
    if (a)
        DITTO_TRY(float_dtype(be, op, "a", a, &k.ah));
    if (ra)
        DITTO_TRY(float_dtype(be, op, "ra", ra, &k.rah));
    k.nd = h->ndim;
    k.L = h->shape[k.nd - 2];
    k.C = h->shape[k.nd - 1];
    for (int i = 0; i < k.nd; i++)
        k.shape[i] = h->shape[i];
    k.rows = k.C ? ditto_tensor_numel(h) / k.C : 0;
    if (k.rows == 0 || k.C == 0)
        return 0;
    const int64_t half = k.C / 2;
    if (half > LNR_MAX_PAIRS) {
        /* wide rows: the three ops (the same roundings) */
        if (y)
            DITTO_TRY(be->ops.film(be, h, y, scale, shift, h));
        DittoTensor *nt = a ? a : ra;
        const DittoNormParams np = { .eps = p->eps };
        DITTO_TRY(be->ops.layer_norm(be, &np, h, w, b, nt));
        if (ra) {
            DittoTensor n3, r3;
            const int64_t sh3[3] = { k.rows / k.L, k.L, k.C };
            DITTO_TRY(ditto_tensor_reshape(nt, 3, sh3, &n3));
            DITTO_TRY(ditto_tensor_reshape(ra, 3, sh3, &r3));
            const DittoRotaryParams rp = { p->pos_offset };
            DITTO_TRY(be->ops.rotary(be, &rp, &n3, freqs, &r3));
        }
        DittoTensor *outs[2] = { a, ra };
        for (int o = 0; o < 2 && p->tf32_out; o++) {
            if (outs[o] && outs[o]->dtype == DITTO_F32) {
                const int64_t n = ditto_tensor_numel(outs[o]);
                k_round_tf32<<<ditto_cuda_blocks(n, 256), 256, 0, ditto_cuda(be)->stream>>>((float *)outs[o]->data, n);
                DITTO_CUDA_LAUNCHED(be);
            }
        }
        return 0;
    }
    k.h = h->data;
    if (y) {
        k.y = y->data;
        k.sc = scale->data;
        k.sh = shift->data;
        for (int i = 0; i < k.nd; i++)
            k.ys[i] = y->stride[i];
        bcast_strides(scale, k.scs);
        bcast_strides(shift, k.shs);
    }
    k.w = w ? w->data : NULL;
    k.b = b ? b->data : NULL;
    k.a = a ? a->data : NULL;
    k.ra = ra ? ra->data : NULL;
    k.eps = (double)p->eps;
    k.pos_offset = p->pos_offset;
    k.r32 = p->tf32_out;
    if (ra) {
        if (freqs->device != DITTO_DEVICE_CUDA)
            return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: freqs is not on the cuda device", op);
        k.freqs = (const float *)freqs->data;
        k.fd.ndim = freqs->ndim;
        for (int d = 0; d < freqs->ndim; d++) {
            k.fd.shape[d] = freqs->shape[d];
            k.fd.stride[d] = freqs->stride[d];
        }
    }
    cudaStream_t st = ditto_cuda(be)->stream;
    const bool vec = lnr_vec_ok(k);
    if (half <= LNR_THREADS)
        launch_lnr<1>(k, vec, st);
    else if (half <= 2 * LNR_THREADS)
        launch_lnr<2>(k, vec, st);
    else if (half <= 4 * LNR_THREADS)
        launch_lnr<4>(k, vec, st);
    else
        launch_lnr<8>(k, vec, st);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

void ditto_cuda_init_attention(DittoOps *ops)
{
    ops->attention = cuda_attention;
    ops->rotary = cuda_rotary;
    ops->layer_norm_rotary = cuda_layer_norm_rotary;
}
