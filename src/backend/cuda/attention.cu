/*
 * CUDA attention and rotary embedding (float32 or float16 storage, fp32 math).
 *
 * Attention, short key rows (K and V of a head fit in shared memory, e.g. the
 * LMDM's 80/82 keys of 64 dims): one block per (batch, head, tile of query
 * rows) stages the head's K and V in shared memory once (K rows padded by one
 * float: no bank conflicts when lanes walk different keys; many loads in
 * flight per thread, as staging is latency-bound), then each warp takes one
 * query row at a time: lanes split the keys for the scores (fp32 dot
 * products in four partial sums), softmax over the row with warp max/sum
 * (max subtracted, p = e * (1/sum) as the CPU does), lanes split the output
 * columns for y = sum_j p_j v_j (two partial sums).
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
 */
#include <math.h>
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
                ditto_st(a.y, b * a.ys[0] + h * a.ys[1] + i * a.ys[2] + dc * a.ys[3], t, a.yh);
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
            ditto_st(a.y, yb + d * a.ys[3], y0 + y1, a.yh);
        }
        __syncwarp();   /* qrow and p are reused by the warp's next row */
    }
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

void ditto_cuda_init_attention(DittoOps *ops)
{
    ops->attention = cuda_attention;
    ops->rotary = cuda_rotary;
}
