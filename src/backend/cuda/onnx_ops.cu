/*
 * CUDA versions of the ops the ONNX executor needs beyond the native
 * networks: gather, where, pad, resize, prelu, conv_transpose. Semantics are
 * those of src/backend/cpu/onnx_ops.c (the oracle), shape checks are the
 * front ends' in ops/ops.c.
 *
 * Dtypes: gather, where and pad move bytes, so they take any dtype (elements
 * of 1, 2, 4 or 8 bytes), like the CPU. resize, prelu and conv_transpose take
 * float32 or float16 storage per operand with fp32 math (bfloat16, which the
 * front end lets through on non-CPU backends, is refused as unsupported).
 *
 * Numerics: every float operation the CPU rounds separately goes through the
 * rn_* helpers below, which are the unfused _rn intrinsics on the device (nvcc
 * would otherwise contract a*b+c into one FMA) and the plain operators on the
 * host. Loops visit taps / contributions in the CPU's order, so float32
 * results match the CPU bit for bit:
 *   - resize: the per-axis taps (source indices and weights, or "outside" for
 *     tf_crop_and_resize) are computed ONCE per (axis, output index) by a
 *     table kernel into the backend workspace, with the CPU's rz_coord /
 *     rz_taps / cubic_coeffs float arithmetic operation for operation; the
 *     main kernel sums the product of every axis' taps in the CPU's order
 *     (last axis fastest, weights multiplied from axis 0, acc += w * x).
 *     Nothing is uploaded from the host, so no host buffer has to outlive the
 *     call and no synchronisation is needed.
 *   - conv_transpose: a direct gather kernel, one thread per output element.
 *     The CPU scatters input (id, ih, iw) in lexicographic order, so for a
 *     fixed output the contributions arrive in increasing input position,
 *     i.e. decreasing kernel position; the kernel walks (kd, kh, kw) from the
 *     top down, icg outermost, starting from the bias, which reproduces the
 *     CPU's sum exactly (not cuDNN: its summation order is its own).
 *   - prelu: one rounded product.
 *
 * gather validates the indices like the CPU (DITTO_ERR_RANGE with the first
 * bad one) before moving data: a small kernel finds the first index out of
 * [-n, n) into the workspace and the host reads it back, which synchronises
 * the stream. While the stream is being captured into a graph the check is
 * skipped (it cannot synchronise); the copy kernel never reads out of range
 * in any case (a bad index yields zero bytes).
 *
 * The element functions are __host__ __device__ so the kernels' arithmetic
 * can be exercised on the host against the CPU oracle.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "ops/pad_map.h"

#define OX_THREADS 256

#define GRID_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ---- float helpers: one IEEE rounding per operation, never contracted ---- */

static __host__ __device__ __forceinline__ float rn_add(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

static __host__ __device__ __forceinline__ float rn_sub(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

static __host__ __device__ __forceinline__ float rn_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

static __host__ __device__ __forceinline__ float rn_div(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

/* float32 / float16 storage, fp32 math (host-callable twins of ditto_ld / ditto_st) */
static __host__ __device__ __forceinline__ float ld_f(const void *p, int64_t i, bool f16)
{
    return f16 ? __half2float(((const __half *)p)[i]) : ((const float *)p)[i];
}

static __host__ __device__ __forceinline__ void st_f(void *p, int64_t i, float v, bool f16)
{
    if (f16)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((float *)p)[i] = v;
}

/* y[oy] = x[ox] for elements of size bytes (1, 2, 4, 8 or 16) */
static __host__ __device__ __forceinline__ void copy_elem(void *y, int64_t oy, const void *x, int64_t ox, int size)
{
    switch (size) {
    case 1: ((uint8_t *)y)[oy] = ((const uint8_t *)x)[ox]; break;
    case 2: ((uint16_t *)y)[oy] = ((const uint16_t *)x)[ox]; break;
    case 4: ((uint32_t *)y)[oy] = ((const uint32_t *)x)[ox]; break;
    case 8: ((uint64_t *)y)[oy] = ((const uint64_t *)x)[ox]; break;
    default: ((uint4 *)y)[oy] = ((const uint4 *)x)[ox]; break;
    }
}

static __host__ __device__ __forceinline__ void store_bits(void *y, int64_t oy, uint64_t bits, int size)
{
    switch (size) {
    case 1: ((uint8_t *)y)[oy] = (uint8_t)bits; break;
    case 2: ((uint16_t *)y)[oy] = (uint16_t)bits; break;
    case 4: ((uint32_t *)y)[oy] = (uint32_t)bits; break;
    default: ((uint64_t *)y)[oy] = bits; break;
    }
}

static bool elem_size_ok(size_t es)
{
    return es == 1 || es == 2 || es == 4 || es == 8;
}

static int bytes_dtype(DittoBackend *be, const char *op, const DittoTensor *t)
{
    if (!elem_size_ok(ditto_dtype_size(t->dtype)))
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: dtype %s", op, ditto_dtype_name(t->dtype));
    return 0;
}

static int float_dtype(DittoBackend *be, const char *op, const char *name, const DittoTensor *t, bool *f16)
{
    if (t->dtype == DITTO_F32 || t->dtype == DITTO_F16) {
        *f16 = t->dtype == DITTO_F16;
        return 0;
    }
    return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op %s: %s has dtype %s, not supported by the cuda backend (float32, float16)",
                      op, name, ditto_dtype_name(t->dtype));
}

/* Element strides of t read as a tensor of y's rank and shape (right-aligned; 0 where t broadcasts). */
static void bcast_strides(const DittoTensor *t, int ndim, int64_t *st)
{
    int off = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int j = i - off;
        st[i] = (j >= 0 && t->shape[j] != 1) ? t->stride[j] : 0;
    }
}

/* ---- gather: y (outer, m, inner) = x (outer, n, inner) at idx (m) ---- */

typedef struct GatherArgs {
    const void *x;
    void *y;
    const int64_t *idx;
    int64_t n, m;
    int64_t inner_u;         /* units per inner block */
    int unit;                /* bytes per unit: 1, 2, 4, 8 or 16 */
    int64_t total;           /* outer * m * inner_u */
} GatherArgs;

static __host__ __device__ __forceinline__ void gather_elem(const GatherArgs &a, int64_t i)
{
    int64_t j = i % a.inner_u, r = i / a.inner_u;
    int64_t o = r / a.m, k = a.idx[r - o * a.m];
    if (k < 0)
        k += a.n;
    if (k < 0 || k >= a.n) {
        /* checked on the host before the launch (except during graph capture): never read out of range */
        if (a.unit == 16)
            ((uint4 *)a.y)[i] = make_uint4(0, 0, 0, 0);
        else
            store_bits(a.y, i, 0, a.unit);
        return;
    }
    copy_elem(a.y, i, a.x, (o * a.n + k) * a.inner_u + j, a.unit);
}

static __global__ void gather_kernel(const __grid_constant__ GatherArgs a)
{
    GRID_LOOP(i, a.total)
        gather_elem(a, i);
}

/* *first = the smallest j with idx[j] outside [-n, n) (left alone when there is none) */
static __global__ void gather_check_kernel(const int64_t *idx, int64_t m, int64_t n, unsigned long long *first)
{
    GRID_LOOP(j, m) {
        int64_t k = idx[j];
        if (k < -n || k >= n)
            atomicMin(first, (unsigned long long)j);
    }
}

static int gather_check(DittoBackend *be, const int64_t *idx, int64_t m, int64_t n)
{
    cudaStream_t st = ditto_cuda(be)->stream;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    DITTO_CUDA_CHECK(be, cudaStreamIsCapturing(st, &cs));
    if (cs != cudaStreamCaptureStatusNone)
        return 0;   /* cannot read back while capturing; the copy kernel stays in bounds */
    void *ws = NULL;
    DITTO_TRY(ditto_cuda_workspace(be, sizeof(unsigned long long), &ws));
    unsigned long long *first = (unsigned long long *)ws;
    DITTO_CUDA_CHECK(be, cudaMemsetAsync(first, 0xff, sizeof *first, st));
    gather_check_kernel<<<ditto_cuda_blocks(m, OX_THREADS), OX_THREADS, 0, st>>>(idx, m, n, first);
    DITTO_CUDA_LAUNCHED(be);
    unsigned long long bad = 0;
    DITTO_CUDA_CHECK(be, cudaMemcpyAsync(&bad, first, sizeof bad, cudaMemcpyDeviceToHost, st));
    DITTO_CUDA_CHECK(be, cudaStreamSynchronize(st));
    if (bad == ULLONG_MAX)
        return 0;
    int64_t v = 0;
    DITTO_CUDA_CHECK(be, cudaMemcpyAsync(&v, idx + bad, sizeof v, cudaMemcpyDeviceToHost, st));
    DITTO_CUDA_CHECK(be, cudaStreamSynchronize(st));
    return ditto_fail(&be->log, DITTO_ERR_RANGE, "op gather: index %lld out of range for an axis of %lld", (long long)v,
                      (long long)n);
}

/* Launch geometry of a gather (shared with host-side tests); false when there is nothing to move. */
static bool gather_args(int axis, const DittoTensor *x, const DittoTensor *idx, DittoTensor *y, GatherArgs *a)
{
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++)
        outer *= x->shape[i];
    for (int i = axis + 1; i < x->ndim; i++)
        inner *= x->shape[i];
    memset(a, 0, sizeof *a);
    a->x = x->data;
    a->y = y->data;
    a->idx = (const int64_t *)idx->data;
    a->n = x->shape[axis];
    a->m = ditto_tensor_numel(idx);
    size_t inner_bytes = (size_t)inner * ditto_dtype_size(x->dtype);
    if (outer * a->m == 0 || inner_bytes == 0)
        return false;
    /* widest unit dividing a row that both base addresses are aligned to */
    uintptr_t align = (uintptr_t)x->data | (uintptr_t)y->data;
    int unit = 16;
    while (unit > 1 && (inner_bytes % (size_t)unit || align % (uintptr_t)unit))
        unit >>= 1;
    a->unit = unit;
    a->inner_u = (int64_t)(inner_bytes / (size_t)unit);
    a->total = outer * a->m * a->inner_u;
    return true;
}

static int cuda_gather(DittoBackend *be, int axis, const DittoTensor *x, const DittoTensor *idx, DittoTensor *y)
{
    DITTO_TRY(bytes_dtype(be, "gather", x));
    int64_t m = ditto_tensor_numel(idx);
    /* indices come from data: check them all before touching memory */
    if (m > 0)
        DITTO_TRY(gather_check(be, (const int64_t *)idx->data, m, x->shape[axis]));
    GatherArgs a;
    if (!gather_args(axis, x, idx, y, &a))
        return 0;
    gather_kernel<<<ditto_cuda_blocks(a.total, OX_THREADS), OX_THREADS, 0, ditto_cuda(be)->stream>>>(a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- where: y = cond ? a : b, all broadcast to y ---- */

typedef struct WhereArgs {
    const uint8_t *c;
    const void *a, *b;
    void *y;
    int ndim, es;
    int64_t shape[DITTO_MAX_DIMS];
    int64_t sc[DITTO_MAX_DIMS], sa[DITTO_MAX_DIMS], sb[DITTO_MAX_DIMS];
    int64_t total;
} WhereArgs;

static __host__ __device__ __forceinline__ void where_elem(const WhereArgs &w, int64_t i)
{
    int64_t rem = i, oc = 0, oa = 0, ob = 0;
    for (int d = w.ndim - 1; d >= 0; d--) {
        int64_t q = rem / w.shape[d], k = rem - q * w.shape[d];
        rem = q;
        oc += k * w.sc[d];
        oa += k * w.sa[d];
        ob += k * w.sb[d];
    }
    if (w.c[oc])
        copy_elem(w.y, i, w.a, oa, w.es);
    else
        copy_elem(w.y, i, w.b, ob, w.es);
}

static __global__ void where_kernel(const __grid_constant__ WhereArgs w)
{
    GRID_LOOP(i, w.total)
        where_elem(w, i);
}

static bool where_args(const DittoTensor *cond, const DittoTensor *a, const DittoTensor *b, DittoTensor *y, WhereArgs *w)
{
    memset(w, 0, sizeof *w);
    w->total = ditto_tensor_numel(y);
    if (w->total == 0)
        return false;
    w->c = (const uint8_t *)cond->data;
    w->a = a->data;
    w->b = b->data;
    w->y = y->data;
    w->es = (int)ditto_dtype_size(y->dtype);
    w->ndim = y->ndim;   /* rank 0: one element at offset 0 everywhere */
    for (int d = 0; d < y->ndim; d++)
        w->shape[d] = y->shape[d];
    bcast_strides(cond, y->ndim, w->sc);
    bcast_strides(a, y->ndim, w->sa);
    bcast_strides(b, y->ndim, w->sb);
    return true;
}

static int cuda_where(DittoBackend *be, const DittoTensor *cond, const DittoTensor *a, const DittoTensor *b, DittoTensor *y)
{
    DITTO_TRY(bytes_dtype(be, "where", y));
    WhereArgs w;
    if (!where_args(cond, a, b, y, &w))
        return 0;
    where_kernel<<<ditto_cuda_blocks(w.total, OX_THREADS), OX_THREADS, 0, ditto_cuda(be)->stream>>>(w);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- pad ---- */

typedef struct PadArgs {
    const void *x;
    void *y;
    int ndim, mode, es;
    int64_t xs[DITTO_MAX_DIMS], ys[DITTO_MAX_DIMS], begin[DITTO_MAX_DIMS], xst[DITTO_MAX_DIMS];
    uint64_t value;          /* the constant's bytes in x's dtype */
    int64_t total;
} PadArgs;

static __host__ __device__ __forceinline__ void pad_elem(const PadArgs &p, int64_t i)
{
    int64_t rem = i, off = 0;
    bool outside = false;
    for (int d = p.ndim - 1; d >= 0; d--) {
        int64_t q = rem / p.ys[d], o = rem - q * p.ys[d];
        rem = q;
        int64_t s = ditto_pad_map(p.mode, o, p.begin[d], p.xs[d]);
        if (s < 0)
            outside = true;
        else
            off += s * p.xst[d];
    }
    if (outside)
        store_bits(p.y, i, p.value, p.es);
    else
        copy_elem(p.y, i, p.x, off, p.es);
}

static __global__ void pad_kernel(const __grid_constant__ PadArgs p)
{
    GRID_LOOP(i, p.total)
        pad_elem(p, i);
}

static bool pad_args(const DittoPadParams *prm, const DittoTensor *x, DittoTensor *y, PadArgs *p)
{
    memset(p, 0, sizeof *p);
    p->total = ditto_tensor_numel(y);
    if (p->total == 0)
        return false;
    p->x = x->data;
    p->y = y->data;
    p->ndim = x->ndim;   /* rank 0: y = x */
    p->mode = (int)prm->mode;
    p->es = (int)ditto_dtype_size(x->dtype);
    unsigned char value[8];
    memset(value, 0, sizeof value);
    ditto_convert(value, x->dtype, &prm->value, DITTO_F32, 1);   /* the CPU's exact bytes */
    memcpy(&p->value, value, sizeof p->value);   /* little-endian: the low es bytes are the element */
    int64_t s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        p->xs[d] = x->shape[d];
        p->ys[d] = y->shape[d];
        p->begin[d] = prm->begin[d];
        p->xst[d] = s;
        s *= x->shape[d];
    }
    return true;
}

static int cuda_pad(DittoBackend *be, const DittoPadParams *prm, const DittoTensor *x, DittoTensor *y)
{
    DITTO_TRY(bytes_dtype(be, "pad", x));
    PadArgs p;
    if (!pad_args(prm, x, y, &p))
        return 0;
    pad_kernel<<<ditto_cuda_blocks(p.total, OX_THREADS), OX_THREADS, 0, ditto_cuda(be)->stream>>>(p);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- resize ---- */

typedef struct RzCfg {
    int mode, coord, nearest;
    float cubic_a;
    bool exclude_outside;
} RzCfg;

typedef struct RzAxis {
    int64_t in, out;
    float scale;
    float roi0, roi1;
} RzAxis;

/* Taps of one output index along one axis; n == 0: outside (tf_crop_and_resize). */
typedef struct RzTaps {
    int64_t idx[4];
    float w[4];
    int n;
} RzTaps;

/* ONNX coordinate transform in float32, the CPU's rz_coord operation for operation. */
static __host__ __device__ float rz_coord(const RzCfg &p, const RzAxis &a, int64_t o)
{
    float x = (float)o, s = a.scale, in = (float)a.in, out = (float)a.out;
    switch (p.coord) {
    case DITTO_RESIZE_HALF_PIXEL_SYMMETRIC: {
        float adj = rn_div(out, rn_mul(s, in));
        /* in * 0.5f * (1.0f - adj) + (x + 0.5f) / s - 0.5f */
        return rn_sub(rn_add(rn_mul(rn_mul(in, 0.5f), rn_sub(1.0f, adj)), rn_div(rn_add(x, 0.5f), s)), 0.5f);
    }
    case DITTO_RESIZE_PYTORCH_HALF_PIXEL:
        return a.out > 1 ? rn_sub(rn_div(rn_add(x, 0.5f), s), 0.5f) : 0.0f;
    case DITTO_RESIZE_ALIGN_CORNERS:
        return a.out == 1 ? 0.0f : rn_div(rn_mul(x, rn_sub(in, 1.0f)), rn_sub(out, 1.0f));
    case DITTO_RESIZE_ASYMMETRIC:
        return rn_div(x, s);
    case DITTO_RESIZE_TF_HALF_PIXEL_FOR_NN:
        return rn_div(rn_add(x, 0.5f), s);
    case DITTO_RESIZE_TF_CROP_AND_RESIZE:
        /* roi0 * (in - 1.0f) + x * (roi1 - roi0) * (in - 1.0f) / (out - 1.0f) */
        if (a.out > 1)
            return rn_add(rn_mul(a.roi0, rn_sub(in, 1.0f)),
                          rn_div(rn_mul(rn_mul(x, rn_sub(a.roi1, a.roi0)), rn_sub(in, 1.0f)), rn_sub(out, 1.0f)));
        /* 0.5f * (roi0 + roi1) * (in - 1.0f) */
        return rn_mul(rn_mul(0.5f, rn_add(a.roi0, a.roi1)), rn_sub(in, 1.0f));
    case DITTO_RESIZE_HALF_PIXEL:
    default:
        return rn_sub(rn_div(rn_add(x, 0.5f), s), 0.5f);
    }
}

static __host__ __device__ __forceinline__ int64_t clampi(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ((A t1 - 5A) t1 + 8A) t1 - 4A */
static __host__ __device__ __forceinline__ float cubic_outer(float A, float t1)
{
    return rn_sub(rn_mul(rn_add(rn_mul(rn_sub(rn_mul(A, t1), rn_mul(5.0f, A)), t1), rn_mul(8.0f, A)), t1), rn_mul(4.0f, A));
}

/* ((A + 2) t - (A + 3)) t t + 1 */
static __host__ __device__ __forceinline__ float cubic_inner(float A, float t)
{
    return rn_add(rn_mul(rn_mul(rn_sub(rn_mul(rn_add(A, 2.0f), t), rn_add(A, 3.0f)), t), t), 1.0f);
}

static __host__ __device__ void cubic_coeffs(float t, float A, float *c)
{
    float t1 = rn_add(t, 1.0f), u = rn_sub(1.0f, t), u1 = rn_add(u, 1.0f);
    c[0] = cubic_outer(A, t1);
    c[1] = cubic_inner(A, t);
    c[2] = cubic_inner(A, u);
    c[3] = cubic_outer(A, u1);
}

/* The CPU's rz_taps; t->n = 0 when the point lies outside (tf_crop_and_resize). */
static __host__ __device__ void rz_taps(const RzCfg &p, const RzAxis &a, int64_t o, RzTaps *t)
{
    for (int k = 0; k < 4; k++) {
        t->idx[k] = 0;
        t->w[k] = 0.0f;
    }
    if (a.in == a.out && a.scale == 1.0f && p.coord != DITTO_RESIZE_TF_CROP_AND_RESIZE &&
        p.coord != DITTO_RESIZE_TF_HALF_PIXEL_FOR_NN) {
        /* every other transform maps o to itself at scale 1 */
        t->n = 1;
        t->idx[0] = o;
        t->w[0] = 1.0f;
        return;
    }
    float x = rz_coord(p, a, o);
    int64_t last = a.in - 1;
    if (p.coord == DITTO_RESIZE_TF_CROP_AND_RESIZE && (x < 0.0f || x > (float)last)) {
        t->n = 0;
        return;
    }
    if (p.mode == DITTO_RESIZE_NEAREST) {
        float f = floorf(x);
        int64_t i;
        switch (p.nearest) {
        case DITTO_NEAREST_FLOOR: i = (int64_t)f; break;
        case DITTO_NEAREST_CEIL: i = (int64_t)ceilf(x); break;
        case DITTO_NEAREST_SIMPLE: i = a.scale < 1.0f ? (int64_t)ceilf(x) : (int64_t)f; break;
        case DITTO_NEAREST_ROUND_PREFER_CEIL: i = x == rn_add(f, 0.5f) ? (int64_t)f + 1 : (int64_t)roundf(x); break;
        case DITTO_NEAREST_ROUND_PREFER_FLOOR:
        default: i = x == rn_add(f, 0.5f) ? (int64_t)f : (int64_t)roundf(x); break;
        }
        t->n = 1;
        t->idx[0] = clampi(i, 0, last);
        t->w[0] = 1.0f;
        return;
    }
    if (p.mode == DITTO_RESIZE_LINEAR) {
        x = x < 0.0f ? 0.0f : x > (float)last ? (float)last : x;
        int64_t i0 = (int64_t)x;
        float f = rn_sub(x, (float)i0);
        t->idx[0] = i0;
        t->w[0] = rn_sub(1.0f, f);
        t->n = 1;
        if (f > 0.0f && i0 < last) {
            t->idx[1] = i0 + 1;
            t->w[1] = f;
            t->n = 2;
        } else {
            t->w[0] = 1.0f;
        }
        return;
    }
    /* cubic: 4 taps around floor(x), edge-clamped, or dropped and renormalised with exclude_outside */
    float f = floorf(x);
    int64_t i0 = (int64_t)f;
    cubic_coeffs(rn_sub(x, f), p.cubic_a, t->w);
    float sum = 0.0f;
    for (int k = 0; k < 4; k++) {
        int64_t i = i0 - 1 + k;
        if (p.exclude_outside && (i < 0 || i > last))
            t->w[k] = 0.0f;
        sum = rn_add(sum, t->w[k]);
        t->idx[k] = clampi(i, 0, last);
    }
    if (p.exclude_outside && sum != 0.0f)
        for (int k = 0; k < 4; k++)
            t->w[k] = rn_div(t->w[k], sum);
    t->n = 4;
}

/* Table of every axis' taps: entry base[d] + o for output index o of axis d. */
typedef struct RzTableArgs {
    RzCfg cfg;
    int ndim;
    RzAxis ax[DITTO_MAX_DIMS];
    int64_t base[DITTO_MAX_DIMS + 1];
    RzTaps *tab;
} RzTableArgs;

static __host__ __device__ __forceinline__ void rz_table_elem(const RzTableArgs &a, int64_t e)
{
    int d = 0;
    while (d + 1 < a.ndim && e >= a.base[d + 1])
        d++;
    rz_taps(a.cfg, a.ax[d], e - a.base[d], &a.tab[e]);
}

static __global__ void rz_table_kernel(const __grid_constant__ RzTableArgs a)
{
    GRID_LOOP(e, a.base[a.ndim])
        rz_table_elem(a, e);
}

typedef struct RzArgs {
    const void *x;
    void *y;
    bool xh, yh;
    int ndim;
    int64_t out[DITTO_MAX_DIMS], xst[DITTO_MAX_DIMS], base[DITTO_MAX_DIMS];
    const RzTaps *tab;
    float extrapolation;
    int64_t total;
} RzArgs;

/* Sum over the product of every axis' taps, in the CPU's order: acc += (w0 w1 ... wn) * x. */
static __host__ __device__ __forceinline__ void rz_elem(const RzArgs &a, int64_t i)
{
    const RzTaps *t[DITTO_MAX_DIMS];
    int64_t rem = i;
    bool inside = true;
    for (int d = a.ndim - 1; d >= 0; d--) {
        int64_t q = rem / a.out[d], o = rem - q * a.out[d];
        rem = q;
        t[d] = a.tab + a.base[d] + o;
        inside = inside && t[d]->n > 0;
    }
    if (!inside) {
        st_f(a.y, i, a.extrapolation, a.yh);
        return;
    }
    int k[DITTO_MAX_DIMS] = { 0 };
    float acc = 0.0f;
    for (;;) {
        int64_t off = 0;
        float w = 1.0f;
        for (int d = 0; d < a.ndim; d++) {
            off += t[d]->idx[k[d]] * a.xst[d];
            w = rn_mul(w, t[d]->w[k[d]]);
        }
        acc = rn_add(acc, rn_mul(w, ld_f(a.x, off, a.xh)));
        int d = a.ndim - 1;
        while (d >= 0 && ++k[d] == t[d]->n)
            k[d--] = 0;
        if (d < 0)
            break;
    }
    st_f(a.y, i, acc, a.yh);
}

static __global__ void rz_kernel(const __grid_constant__ RzArgs a)
{
    GRID_LOOP(i, a.total)
        rz_elem(a, i);
}

/* Host-side set-up shared with tests: the table geometry (tab left NULL) and the main kernel's arguments. */
static bool rz_args(const DittoResizeParams *p, const DittoTensor *x, DittoTensor *y, bool xh, bool yh, RzTableArgs *ta, RzArgs *ra)
{
    memset(ta, 0, sizeof *ta);
    memset(ra, 0, sizeof *ra);
    ra->total = ditto_tensor_numel(y);
    if (ra->total == 0)
        return false;
    ta->cfg.mode = (int)p->mode;
    ta->cfg.coord = (int)p->coord;
    ta->cfg.nearest = (int)p->nearest;
    ta->cfg.cubic_a = p->cubic_a;
    ta->cfg.exclude_outside = p->exclude_outside;
    ta->ndim = ra->ndim = x->ndim;
    int64_t s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        RzAxis *a = &ta->ax[d];
        a->in = x->shape[d];
        a->out = y->shape[d];
        a->scale = p->scale[d] > 0.0f ? p->scale[d] : (float)a->out / (float)a->in;
        a->roi0 = p->roi_start[d];
        a->roi1 = p->roi_end[d];
        ra->out[d] = a->out;
        ra->xst[d] = s;
        s *= x->shape[d];
    }
    for (int d = 0; d < x->ndim; d++) {
        ta->base[d + 1] = ta->base[d] + ta->ax[d].out;
        ra->base[d] = ta->base[d];
    }
    ra->x = x->data;
    ra->y = y->data;
    ra->xh = xh;
    ra->yh = yh;
    ra->extrapolation = p->extrapolation_value;
    return true;
}

static int cuda_resize(DittoBackend *be, const DittoResizeParams *p, const DittoTensor *x, DittoTensor *y)
{
    bool xh = false, yh = false;
    DITTO_TRY(float_dtype(be, "resize", "x", x, &xh));
    DITTO_TRY(float_dtype(be, "resize", "y", y, &yh));
    RzTableArgs ta;
    RzArgs ra;
    if (!rz_args(p, x, y, xh, yh, &ta, &ra))
        return 0;
    int64_t entries = ta.base[ta.ndim];
    void *ws = NULL;
    DITTO_TRY(ditto_cuda_workspace(be, sizeof(RzTaps) * (size_t)entries, &ws));
    ta.tab = (RzTaps *)ws;
    ra.tab = ta.tab;
    cudaStream_t st = ditto_cuda(be)->stream;
    rz_table_kernel<<<ditto_cuda_blocks(entries, OX_THREADS), OX_THREADS, 0, st>>>(ta);
    DITTO_CUDA_LAUNCHED(be);
    rz_kernel<<<ditto_cuda_blocks(ra.total, OX_THREADS), OX_THREADS, 0, st>>>(ra);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- prelu: y = x >= 0 ? x : x * slope; y may be x ---- */

typedef struct PreluArgs {
    const void *x, *s;
    void *y;
    bool xh, sh, yh;
    int ndim;
    int64_t shape[DITTO_MAX_DIMS], ss[DITTO_MAX_DIMS];
    int64_t total;
} PreluArgs;

static __host__ __device__ __forceinline__ void prelu_elem(const PreluArgs &a, int64_t i)
{
    int64_t rem = i, so = 0;
    for (int d = a.ndim - 1; d >= 0; d--) {
        int64_t q = rem / a.shape[d], k = rem - q * a.shape[d];
        rem = q;
        so += k * a.ss[d];
    }
    float v = ld_f(a.x, i, a.xh);
    st_f(a.y, i, v >= 0.0f ? v : rn_mul(v, ld_f(a.s, so, a.sh)), a.yh);
}

static __global__ void prelu_kernel(const __grid_constant__ PreluArgs a)
{
    GRID_LOOP(i, a.total)
        prelu_elem(a, i);
}

static bool prelu_args(const DittoTensor *x, const DittoTensor *slope, DittoTensor *y, bool xh, bool sh, bool yh, PreluArgs *a)
{
    memset(a, 0, sizeof *a);
    a->total = ditto_tensor_numel(x);
    if (a->total == 0)
        return false;
    a->x = x->data;
    a->s = slope->data;
    a->y = y->data;
    a->xh = xh;
    a->sh = sh;
    a->yh = yh;
    a->ndim = x->ndim;   /* rank 0: slope is rank 0 too, offset 0 */
    for (int d = 0; d < x->ndim; d++)
        a->shape[d] = x->shape[d];
    bcast_strides(slope, x->ndim, a->ss);
    return true;
}

static int cuda_prelu(DittoBackend *be, const DittoTensor *x, const DittoTensor *slope, DittoTensor *y)
{
    bool xh = false, sh = false, yh = false;
    DITTO_TRY(float_dtype(be, "prelu", "x", x, &xh));
    DITTO_TRY(float_dtype(be, "prelu", "slope", slope, &sh));
    DITTO_TRY(float_dtype(be, "prelu", "y", y, &yh));
    PreluArgs a;
    if (!prelu_args(x, slope, y, xh, sh, yh, &a))
        return 0;
    prelu_kernel<<<ditto_cuda_blocks(a.total, OX_THREADS), OX_THREADS, 0, ditto_cuda(be)->stream>>>(a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- conv_transpose: one thread per output element, gathering the CPU's scattered sum in its order ---- */

typedef struct ConvTArgs {
    const void *x, *w, *b;
    void *y;
    bool xh, wh, bh, yh;
    int64_t cin, cout, cin_g, cout_g;
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3];
    int64_t total;           /* N * cout * out volume */
} ConvTArgs;

static __host__ __device__ __forceinline__ void convt_elem(const ConvTArgs &c, int64_t i)
{
    int64_t ow = i % c.out[2], r = i / c.out[2];
    int64_t oh = r % c.out[1];
    r /= c.out[1];
    int64_t od = r % c.out[0];
    r /= c.out[0];
    int64_t oc = r % c.cout, n = r / c.cout;
    int64_t g = oc / c.cout_g, ocg = oc - g * c.cout_g;
    int64_t in_plane = c.in[0] * c.in[1] * c.in[2], kvol = c.k[0] * c.k[1] * c.k[2];
    float acc = c.b ? ld_f(c.b, oc, c.bh) : 0.0f;
    for (int64_t icg = 0; icg < c.cin_g; icg++) {
        int64_t ic = g * c.cin_g + icg;
        int64_t xb = (n * c.cin + ic) * in_plane, wb = (ic * c.cout_g + ocg) * kvol;
        /* the CPU visits inputs in increasing (id, ih, iw): kernel positions from the top down */
        for (int64_t kd = c.k[0] - 1; kd >= 0; kd--) {
            int64_t td = od + c.pb[0] - kd * c.d[0];
            if (td < 0 || td % c.s[0])
                continue;
            int64_t id = td / c.s[0];
            if (id >= c.in[0])
                continue;
            for (int64_t kh = c.k[1] - 1; kh >= 0; kh--) {
                int64_t th = oh + c.pb[1] - kh * c.d[1];
                if (th < 0 || th % c.s[1])
                    continue;
                int64_t ih = th / c.s[1];
                if (ih >= c.in[1])
                    continue;
                int64_t xr = xb + (id * c.in[1] + ih) * c.in[2], wr = wb + (kd * c.k[1] + kh) * c.k[2];
                for (int64_t kw = c.k[2] - 1; kw >= 0; kw--) {
                    int64_t tw = ow + c.pb[2] - kw * c.d[2];
                    if (tw < 0 || tw % c.s[2])
                        continue;
                    int64_t iw = tw / c.s[2];
                    if (iw >= c.in[2])
                        continue;
                    acc = rn_add(acc, rn_mul(ld_f(c.x, xr + iw, c.xh), ld_f(c.w, wr + kw, c.wh)));
                }
            }
        }
    }
    st_f(c.y, i, acc, c.yh);
}

static __global__ void convt_kernel(const __grid_constant__ ConvTArgs c)
{
    GRID_LOOP(i, c.total)
        convt_elem(c, i);
}

static bool convt_args(const DittoConvTransposeParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias,
                       DittoTensor *y, bool xh, bool wh, bool bh, bool yh, ConvTArgs *c)
{
    memset(c, 0, sizeof *c);
    c->total = ditto_tensor_numel(y);
    if (c->total == 0)
        return false;
    int64_t groups = p->conv.groups ? p->conv.groups : 1;
    c->x = x->data;
    c->w = w->data;
    c->b = bias ? bias->data : NULL;
    c->y = y->data;
    c->xh = xh;
    c->wh = wh;
    c->bh = bh;
    c->yh = yh;
    c->cin = x->shape[1];
    c->cout = y->shape[1];
    c->cin_g = c->cin / groups;
    c->cout_g = c->cout / groups;
    int ns = x->ndim - 2;
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - ns);   /* params index, < 0 for the padded leading slots */
        c->in[i] = j < 0 ? 1 : x->shape[2 + j];
        c->out[i] = j < 0 ? 1 : y->shape[2 + j];
        c->k[i] = j < 0 ? 1 : w->shape[2 + j];
        c->s[i] = j < 0 || !p->conv.stride[j] ? 1 : p->conv.stride[j];
        c->d[i] = j < 0 || !p->conv.dilation[j] ? 1 : p->conv.dilation[j];
        c->pb[i] = j < 0 ? 0 : p->conv.pad_begin[j];
    }
    return true;
}

static int cuda_conv_transpose(DittoBackend *be, const DittoConvTransposeParams *p, const DittoTensor *x, const DittoTensor *w,
                               const DittoTensor *bias, DittoTensor *y)
{
    bool xh = false, wh = false, bh = false, yh = false;
    DITTO_TRY(float_dtype(be, "conv_transpose", "x", x, &xh));
    DITTO_TRY(float_dtype(be, "conv_transpose", "w", w, &wh));
    DITTO_TRY(float_dtype(be, "conv_transpose", "y", y, &yh));
    if (bias)
        DITTO_TRY(float_dtype(be, "conv_transpose", "bias", bias, &bh));
    ConvTArgs c;
    if (!convt_args(p, x, w, bias, y, xh, wh, bh, yh, &c))
        return 0;
    convt_kernel<<<ditto_cuda_blocks(c.total, OX_THREADS), OX_THREADS, 0, ditto_cuda(be)->stream>>>(c);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

void ditto_cuda_init_onnx_ops(DittoOps *ops)
{
    ops->gather = cuda_gather;
    ops->where = cuda_where;
    ops->pad = cuda_pad;
    ops->resize = cuda_resize;
    ops->prelu = cuda_prelu;
    ops->conv_transpose = cuda_conv_transpose;
}
