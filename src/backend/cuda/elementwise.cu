/*
 * CUDA element-wise family: copy (strided, casting), fill, unary, binary with
 * broadcasting, softmax, reduce, concat, and the fused model steps film and
 * ddim_step. Float ops take float32 or float16 storage per operand with fp32
 * math; copy, fill and concat take any dtype.
 *
 * Strided work goes through one iterator, as on the CPU: the operands share
 * a logical shape; size-1 dims are dropped and adjacent dims merged where
 * every operand is linear across them (a contiguous tensor becomes one row).
 * Kernels walk the flat index with a grid-stride loop and split it into
 * per-operand element offsets (32-bit division when the count allows).
 *
 * Numerics follow src/backend/cpu/elementwise.c: casts reproduce
 * core/dtype.c bit for bit (f16/bf16 round to nearest even through the same
 * bit routines, integers truncate after clamping); softmax takes float exp
 * and a double sum; reduce accumulates in double. Unfused _rn intrinsics
 * keep a*x+b from contracting into an FMA where the CPU rounds twice.
 */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "core/dtype_elem.h"
#include "core/half.h"
#include "core/rng_block.h"

#define EW_MAX_OPS 7            /* ddim_step: 3 outputs, 4 inputs */
#define EW_THREADS 256

typedef struct EwDims {
    int ndim;
    bool small;              /* numel and every extent fit in 32 bits */
    int64_t numel;
    int64_t shape[DITTO_MAX_DIMS];
    int64_t stride[EW_MAX_OPS][DITTO_MAX_DIMS];   /* elements */
} EwDims;

/* Every t[k] has t[0]'s shape (broadcast operands carry stride 0). */
static void ew_init(EwDims *it, int nop, const DittoTensor *const *t)
{
    const DittoTensor *t0 = t[0];
    memset(it, 0, sizeof *it);
    it->numel = ditto_tensor_numel(t0);
    int nd = 0;
    for (int d = 0; d < t0->ndim; d++) {
        int64_t n = t0->shape[d];
        if (n == 1)
            continue;
        bool merge = nd > 0;
        for (int k = 0; k < nop && merge; k++)
            merge = it->stride[k][nd - 1] == t[k]->stride[d] * n;
        if (merge) {
            it->shape[nd - 1] *= n;
        } else {
            it->shape[nd] = n;
            nd++;
        }
        for (int k = 0; k < nop; k++)
            it->stride[k][nd - 1] = t[k]->stride[d];
    }
    if (nd == 0) {
        it->shape[0] = 1;
        nd = 1;
    }
    it->ndim = nd;
    it->small = it->numel <= INT32_MAX;
}

/* Element offsets of flat index i for the first nop operands. */
static __device__ __forceinline__ void ew_offsets(const EwDims *d, int nop, int64_t i, int64_t *off)
{
    for (int k = 0; k < nop; k++)
        off[k] = 0;
    if (d->small) {
        uint32_t r = (uint32_t)i;
#pragma unroll
        for (int dim = DITTO_MAX_DIMS - 1; dim >= 0; dim--) {
            if (dim < d->ndim) {
                uint32_t n = (uint32_t)d->shape[dim];
                uint32_t q = dim > 0 ? r / n : 0;
                int64_t c = (int64_t)(r - q * n);
                for (int k = 0; k < nop; k++)
                    off[k] += c * d->stride[k][dim];
                r = q;
            }
        }
    } else {
        int64_t r = i;
#pragma unroll
        for (int dim = DITTO_MAX_DIMS - 1; dim >= 0; dim--) {
            if (dim < d->ndim) {
                int64_t n = d->shape[dim];
                int64_t q = dim > 0 ? r / n : 0;
                int64_t c = r - q * n;
                for (int k = 0; k < nop; k++)
                    off[k] += c * d->stride[k][dim];
                r = q;
            }
        }
    }
}

#define EW_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

static int ew_blocks(int64_t n)
{
    return ditto_cuda_blocks(n, EW_THREADS);
}

/* float32 / float16 storage of a float operand */
static int float_dtype(DittoBackend *be, const char *op, const DittoTensor *t, bool *f16)
{
    if (t->dtype == DITTO_F32 || t->dtype == DITTO_F16) {
        *f16 = t->dtype == DITTO_F16;
        return 0;
    }
    return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op %s: dtype %s is not supported by the cuda backend (float32, float16)",
                      op, ditto_dtype_name(t->dtype));
}

static int on_device(DittoBackend *be, const char *op, const DittoTensor *t)
{
    if (t->device != DITTO_DEVICE_CUDA)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: tensor is not on the cuda device", op);
    size_t es = ditto_dtype_size(t->dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: dtype %s", op, ditto_dtype_name(t->dtype));
    return 0;
}

/* ---- dtype conversion: core/dtype_elem.h, as ditto_convert on the host ---- */

static __device__ __forceinline__ void copy_bytes(void *y, int64_t oy, const void *x, int64_t ox, int size)
{
    switch (size) {
    case 1: ((uint8_t *)y)[oy] = ((const uint8_t *)x)[ox]; break;
    case 2: ((uint16_t *)y)[oy] = ((const uint16_t *)x)[ox]; break;
    case 4: ((uint32_t *)y)[oy] = ((const uint32_t *)x)[ox]; break;
    case 8: ((uint64_t *)y)[oy] = ((const uint64_t *)x)[ox]; break;
    default: ((uint4 *)y)[oy] = ((const uint4 *)x)[ox]; break;   /* 16 (copy_same_shape's vector path) */
    }
}

/* ---- copy / fill / concat ---- */

/* Operand 0 is y, operand 1 is x. mode: 0 raw copy of size bytes, 1 int <-> int, 2 through double. */
static __global__ void copy_kernel(const __grid_constant__ EwDims d, void *y, int dt, const void *x, int st, int mode, int size)
{
    EW_LOOP(i, d.numel) {
        int64_t off[2];
        ew_offsets(&d, 2, i, off);
        if (mode == 0) {
            copy_bytes(y, off[0], x, off[1], size);
        } else if (mode == 1) {
            int64_t v = st == DITTO_I64 ? ((const int64_t *)x)[off[1]] : ((const int32_t *)x)[off[1]];
            if (dt == DITTO_I64)
                ((int64_t *)y)[off[0]] = v;
            else
                ((int32_t *)y)[off[0]] = (int32_t)v;
        } else {
            ditto_elem_store(y, dt, off[0], ditto_elem_load(x, st, off[1]));
        }
    }
}

/*
 * v = t as 16-byte elements when its innermost axis is contiguous, that
 * row's bytes and every other stride's are multiples of 16 and the data is
 * 16-byte aligned; false otherwise.
 */
static bool vec16_view(const DittoTensor *t, DittoTensor *v)
{
    const int nd = t->ndim;
    const int64_t size = (int64_t)ditto_dtype_size(t->dtype);
    if (nd < 1 || t->stride[nd - 1] != 1 || (t->shape[nd - 1] * size) % 16 || (uintptr_t)t->data % 16)
        return false;
    *v = *t;
    for (int i = 0; i < nd - 1; i++) {
        if ((t->stride[i] * size) % 16)
            return false;
        v->stride[i] = t->stride[i] * size / 16;
    }
    v->shape[nd - 1] = t->shape[nd - 1] * size / 16;
    return true;
}

/* ---- tiled transposes ---- */

#define TP_TILE 32

/*
 * y (n, cols, rows) = x (n, rows, cols) per item, rows of x ldx apart and
 * rows of y ldy apart (items rows * ldx and cols * ldy); T a 2- or 4-byte
 * element. Tiles flattened on grid x, items on z.
 */
template <typename T>
static __global__ void k_transpose(const T *x, T *y, int64_t n, int64_t rows, int64_t cols, int64_t ldx, int64_t ldy, int64_t tiles_c)
{
    __shared__ T tile[TP_TILE][TP_TILE + 1];
    const int64_t r0 = (int64_t)(blockIdx.x / tiles_c) * TP_TILE, c0 = (int64_t)(blockIdx.x % tiles_c) * TP_TILE;
    for (int64_t b = blockIdx.z; b < n; b += gridDim.z) {
        const T *xb = x + b * rows * ldx;
        T *yb = y + b * cols * ldy;
        for (int j = threadIdx.y; j < TP_TILE; j += blockDim.y) {
            int64_t r = r0 + j, c = c0 + threadIdx.x;
            if (r < rows && c < cols)
                tile[j][threadIdx.x] = xb[r * ldx + c];
        }
        __syncthreads();
        for (int j = threadIdx.y; j < TP_TILE; j += blockDim.y) {
            int64_t c = c0 + j, r = r0 + threadIdx.x;
            if (r < rows && c < cols)
                yb[c * ldy + r] = tile[threadIdx.x][j];
        }
        __syncthreads();
    }
}

/*
 * k_transpose for 2-byte elements with rows, cols and both pitches even
 * (4-byte aligned): 64 x 64 tiles moved as half2 pairs both ways, about
 * twice k_transpose's bandwidth on the warp's (110, 16x64x64) inputs.
 * Grid (column tiles, row tiles, items), block (32, 8).
 */
#define TP_V 64
static __global__ void k_transpose_h2(const uint32_t *x, uint32_t *y, int64_t n, int64_t rows, int64_t cols, int64_t ldx, int64_t ldy)
{
    __shared__ uint16_t tile[TP_V][TP_V + 2];   /* [row][column] */
    const int64_t c0 = (int64_t)blockIdx.x * TP_V, r0 = (int64_t)blockIdx.y * TP_V;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t b = blockIdx.z; b < n; b += gridDim.z) {
        const uint16_t *xb = (const uint16_t *)x + b * rows * ldx;
        uint16_t *yb = (uint16_t *)y + b * cols * ldy;
        const int64_t c = c0 + 2 * tx;
        for (int j = ty; j < TP_V; j += 8) {
            const int64_t r = r0 + j;
            if (r < rows && c < cols) {
                const uint32_t v = *(const uint32_t *)(xb + r * ldx + c);
                tile[j][2 * tx] = (uint16_t)v;
                tile[j][2 * tx + 1] = (uint16_t)(v >> 16);
            }
        }
        __syncthreads();
        const int64_t r = r0 + 2 * tx;
        for (int j = ty; j < TP_V; j += 8) {
            const int64_t cc = c0 + j;
            if (cc < cols && r < rows)
                *(uint32_t *)(yb + cc * ldy + r) = (uint32_t)tile[2 * tx][j] | (uint32_t)tile[2 * tx + 1][j] << 16;
        }
        __syncthreads();
    }
}

static int transpose_ld(DittoBackend *be, const void *x, void *y, size_t esz, int64_t n, int64_t rows, int64_t cols, int64_t ldx,
                        int64_t ldy)
{
    if (n * rows * cols == 0)
        return 0;
    cudaStream_t st = ditto_cuda(be)->stream;
    const int64_t vc = (cols + TP_V - 1) / TP_V, vr = (rows + TP_V - 1) / TP_V;
    if (esz == 2 && (rows | cols | ldx | ldy) % 2 == 0 && ((uintptr_t)x | (uintptr_t)y) % 4 == 0 && vc <= INT_MAX && vr <= 65535) {
        dim3 grid((unsigned)vc, (unsigned)vr, (unsigned)(n < 65535 ? n : 65535));
        k_transpose_h2<<<grid, dim3(32, 8), 0, st>>>((const uint32_t *)x, (uint32_t *)y, n, rows, cols, ldx, ldy);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    if (n * rows * cols == 0)
        return 0;
    const int64_t tr = (rows + TP_TILE - 1) / TP_TILE, tc = (cols + TP_TILE - 1) / TP_TILE;
    if (tr * tc > INT_MAX)
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "a layout transpose of %lld x %lld is too large", (long long)rows, (long long)cols);
    dim3 grid((unsigned)(tr * tc), 1, (unsigned)(n < 65535 ? n : 65535));
    if (esz == 2)
        k_transpose<uint16_t><<<grid, dim3(TP_TILE, 8), 0, st>>>((const uint16_t *)x, (uint16_t *)y, n, rows, cols, ldx, ldy, tc);
    else
        k_transpose<uint32_t><<<grid, dim3(TP_TILE, 8), 0, st>>>((const uint32_t *)x, (uint32_t *)y, n, rows, cols, ldx, ldy, tc);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

int ditto_cuda_transpose(DittoBackend *be, const void *x, void *y, size_t esz, int64_t n, int64_t rows, int64_t cols)
{
    return transpose_ld(be, x, y, esz, n, rows, cols, cols, rows);
}

/*
 * Dims [d0, d1) of t row-major with the innermost at stride inner (dims of
 * size 1 take any stride): their element count in *size. inner < 0: the
 * stride of the innermost dim of size > 1 (1 if none), returned in *inner.
 */
static bool block_rows(const DittoTensor *t, int d0, int d1, int64_t *inner, int64_t *size)
{
    if (*inner < 0) {
        *inner = 1;
        for (int d = d1 - 1; d >= d0; d--)
            if (t->shape[d] != 1) {
                *inner = t->stride[d];
                break;
            }
    }
    int64_t e = *inner, n = 1;
    for (int d = d1 - 1; d >= d0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != e)
            return false;
        e *= t->shape[d];
        n *= t->shape[d];
    }
    *size = n;
    return true;
}

/*
 * x and y of one shape that read as (n, B, A) in y's dim order (outer dims
 * [0, p), B = dims [p, q), A = dims [q, nd)), where x's memory is (n, A, B)
 * with B contiguous and A's rows ldx apart, and y's is (n, B, A) with A
 * contiguous and B's rows ldy apart: a channels-first <-> channels-last move
 * (ditto_tensor_permute, then copy), also into or out of channel-padded
 * tensors (a slice of the channel dim). Finds p, q and the pitches.
 */
typedef struct TransposeDims {
    int64_t n, rows, cols, ldx, ldy;   /* transpose_ld's */
} TransposeDims;

static bool as_transpose(const DittoTensor *x, const DittoTensor *y, TransposeDims *t)
{
    const int nd = x->ndim;
    const size_t esz = ditto_dtype_size(x->dtype);
    if (x->dtype != y->dtype || y->ndim != nd || (esz != 2 && esz != 4))
        return false;
    for (int p = 0; p < nd; p++) {
        for (int q = p + 1; q < nd; q++) {
            /* x: B contiguous, A's rows ldx apart; y: A contiguous, B's rows ldy apart (the sizes match: same shape) */
            int64_t one = 1, ldx = -1, ldy = -1, bsz, asz, nx, ny, sz, ox, oy;
            if (!block_rows(x, p, q, &one, &bsz) || bsz < 2 || !block_rows(x, q, nd, &ldx, &asz) || asz < 2 || ldx < bsz)
                continue;
            one = 1;
            if (!block_rows(y, q, nd, &one, &sz) || !block_rows(y, p, q, &ldy, &sz) || ldy < asz)
                continue;
            ox = asz * ldx;
            oy = bsz * ldy;
            if (!block_rows(x, 0, p, &ox, &nx) || !block_rows(y, 0, p, &oy, &ny))
                continue;
            *t = (TransposeDims){ nx, asz, bsz, ldx, ldy };
            return true;
        }
    }
    return false;
}

/* x and y of the same shape, any strides and dtypes. */
static int copy_same_shape(DittoBackend *be, const DittoTensor *x, const DittoTensor *y)
{
    bool ints = (x->dtype == DITTO_I64 || x->dtype == DITTO_I32) && (y->dtype == DITTO_I64 || y->dtype == DITTO_I32);
    int mode = x->dtype == y->dtype ? 0 : ints ? 1 : 2;
    int size = (int)ditto_dtype_size(y->dtype);
    /* raw copies of whole 16-byte runs (channels-last rows moved by upsampling, interleaving, concat): a 16-byte element a thread */
    DittoTensor xv, yv;
    if (mode == 0 && vec16_view(x, &xv) && vec16_view(y, &yv)) {
        x = &xv;
        y = &yv;
        size = 16;
    }
    const DittoTensor *t[2] = { y, x };
    EwDims d;
    ew_init(&d, 2, t);
    if (d.numel <= 0)
        return 0;
    copy_kernel<<<ew_blocks(d.numel), EW_THREADS, 0, ditto_cuda(be)->stream>>>(
        d, y->data, (int)y->dtype, x->data, (int)x->dtype, mode, size);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

static int cuda_copy(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    DITTO_TRY(on_device(be, "copy", x));
    DITTO_TRY(on_device(be, "copy", y));
    if (x->dtype == y->dtype && ditto_tensor_numel(x) == ditto_tensor_numel(y) && ditto_tensor_is_contiguous(x) &&
        ditto_tensor_is_contiguous(y)) {
        /* the same bytes in the same order: the copy engine's path, not an indexing kernel */
        const size_t n = (size_t)ditto_tensor_numel(x) * ditto_dtype_size(x->dtype);
        if (n && x->data != y->data)
            DITTO_CUDA_CHECK(be, cudaMemcpyAsync(y->data, x->data, n, cudaMemcpyDeviceToDevice, ditto_cuda(be)->stream));
        return 0;
    }
    TransposeDims td;
    if (x->ndim == y->ndim && ditto_tensor_same_shape(x, y) && as_transpose(x, y, &td))
        return transpose_ld(be, x->data, y->data, ditto_dtype_size(x->dtype), td.n, td.rows, td.cols, td.ldx, td.ldy);
    if (x->ndim == y->ndim)
        return copy_same_shape(be, x, y);
    /* reshape copy: y is contiguous, so it reads as x's shape in row-major order */
    DittoTensor yv = ditto_tensor(y->data, y->dtype, x->ndim, x->shape);
    yv.device = y->device;
    return copy_same_shape(be, x, &yv);
}

static __global__ void fill_kernel(const __grid_constant__ EwDims d, void *y, uint64_t bits, int size)
{
    EW_LOOP(i, d.numel) {
        int64_t off[1];
        ew_offsets(&d, 1, i, off);
        switch (size) {
        case 1: ((uint8_t *)y)[off[0]] = (uint8_t)bits; break;
        case 2: ((uint16_t *)y)[off[0]] = (uint16_t)bits; break;
        case 4: ((uint32_t *)y)[off[0]] = (uint32_t)bits; break;
        default: ((uint64_t *)y)[off[0]] = bits; break;
        }
    }
}

static int cuda_fill(DittoBackend *be, float value, DittoTensor *y)
{
    DITTO_TRY(on_device(be, "fill", y));
    size_t size = ditto_dtype_size(y->dtype);
    unsigned char bytes[8];
    memset(bytes, 0, sizeof bytes);
    ditto_convert(bytes, y->dtype, &value, DITTO_F32, 1);   /* host conversion: the CPU's exact bytes */
    uint64_t bits = 0;
    switch (size) {
    case 1: bits = bytes[0]; break;
    case 2: { uint16_t v; memcpy(&v, bytes, 2); bits = v; break; }
    case 4: { uint32_t v; memcpy(&v, bytes, 4); bits = v; break; }
    default: memcpy(&bits, bytes, 8); break;
    }
    const DittoTensor *t[1] = { y };
    EwDims d;
    ew_init(&d, 1, t);
    if (d.numel <= 0)
        return 0;
    fill_kernel<<<ew_blocks(d.numel), EW_THREADS, 0, ditto_cuda(be)->stream>>>(d, y->data, bits, (int)size);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

static int cuda_concat(DittoBackend *be, int axis, int n, const DittoTensor *const *xs, DittoTensor *y)
{
    DITTO_TRY(on_device(be, "concat", y));
    int64_t off = 0;
    size_t es = ditto_dtype_size(y->dtype);
    for (int i = 0; i < n; i++) {
        DITTO_TRY(on_device(be, "concat", xs[i]));
        DittoTensor slab = *y;
        slab.shape[axis] = xs[i]->shape[axis];
        slab.data = (char *)y->data + (size_t)(off * y->stride[axis]) * es;
        if (ditto_tensor_numel(&slab) > 0)
            DITTO_TRY(copy_same_shape(be, xs[i], &slab));
        off += xs[i]->shape[axis];
    }
    return 0;
}

/* ---- unary ---- */


/* Operand 0 is y, 1 is x; y may be x (same view). */
static __global__ void unary_kernel(const __grid_constant__ EwDims d, int kind, float a, float b, void *y, bool yh, const void *x, bool xh)
{
    EW_LOOP(i, d.numel) {
        int64_t off[2];
        ew_offsets(&d, 2, i, off);
        ditto_st(y, off[0], ditto_unary_f(kind, a, b, ditto_ld(x, off[1], xh)), yh);
    }
}

/*
 * Contiguous f16 x (16-byte aligned, numel % 8 == 0) into contiguous y, f16
 * or f32, the same place or apart: 8 elements a thread through 16-byte
 * accesses, the same unary_f and rounding as unary_kernel (the generic
 * kernel's offset arithmetic made it run at ~1 TB/s on the decoder's
 * channels-last LeakyReLU).
 */
static __global__ void unary_h8_kernel(int64_t n8, int kind, float a, float b, void *y, bool yh, const uint4 *x)
{
    EW_LOOP(v, n8) {
        uint4 u = x[v];
        const __half *h = (const __half *)&u;
        float r[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            r[k] = ditto_unary_f(kind, a, b, __half2float(h[k]));
        if (yh) {
            uint4 o;
            __half *oh = (__half *)&o;
#pragma unroll
            for (int k = 0; k < 8; k++)
                oh[k] = __float2half_rn(r[k]);
            ((uint4 *)y)[v] = o;
        } else {
            ((float4 *)y)[2 * v] = make_float4(r[0], r[1], r[2], r[3]);
            ((float4 *)y)[2 * v + 1] = make_float4(r[4], r[5], r[6], r[7]);
        }
    }
}

static int cuda_unary(DittoBackend *be, const DittoUnaryParams *p, const DittoTensor *x, DittoTensor *y)
{
    bool xh = false, yh = false;
    DITTO_TRY(float_dtype(be, "unary", x, &xh));
    DITTO_TRY(float_dtype(be, "unary", y, &yh));
    const int64_t n = ditto_tensor_numel(y);
    const bool same = x->data == y->data && xh == yh;
    const bool apart = (const char *)x->data + ditto_tensor_nbytes(x) <= (const char *)y->data ||
                       (const char *)y->data + ditto_tensor_nbytes(y) <= (const char *)x->data;
    if (xh && n > 0 && n % 8 == 0 && ditto_tensor_is_contiguous(x) && ditto_tensor_is_contiguous(y) && (same || apart) &&
        ((uintptr_t)x->data | (uintptr_t)y->data) % 16 == 0) {
        unary_h8_kernel<<<ew_blocks(n / 8), EW_THREADS, 0, ditto_cuda(be)->stream>>>(n / 8, (int)p->kind, p->alpha, p->beta, y->data, yh,
                                                                                   (const uint4 *)x->data);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    const DittoTensor *t[2] = { y, x };
    EwDims d;
    ew_init(&d, 2, t);
    if (d.numel <= 0)
        return 0;
    unary_kernel<<<ew_blocks(d.numel), EW_THREADS, 0, ditto_cuda(be)->stream>>>(d, (int)p->kind, p->alpha, p->beta, y->data, yh,
                                                                                 x->data, xh);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- bias_unary ---- */

/*
 * y = f(x + bias[i_axis]) over y's logical shape (row-major), an element a
 * thread: fp32 math, one rounding (what conv's bias pass did before the
 * move). The channels-last f16 case has the kernel below.
 */
typedef struct BuDims {
    int nd, axis;
    int64_t shape[DITTO_MAX_DIMS], xs[DITTO_MAX_DIMS], ys[DITTO_MAX_DIMS];
} BuDims;

static __global__ void bias_unary_kernel(const __grid_constant__ BuDims d, int64_t n, int kind, float a, float b, void *y, bool yh,
                                         const void *x, bool xh, const void *bias, bool bh)
{
    EW_LOOP(i, n) {
        int64_t t = i, xo = 0, yo = 0, c = 0;
        for (int k = d.nd - 1; k >= 0; k--) {
            const int64_t idx = t % d.shape[k];
            t /= d.shape[k];
            xo += idx * d.xs[k];
            yo += idx * d.ys[k];
            if (k == d.axis)
                c = idx;
        }
        ditto_st(y, yo, ditto_unary_f(kind, a, b, ditto_ld(x, xo, xh) + ditto_ld(bias, c, bh)), yh);
    }
}

/*
 * The channels-last case (the decoder's sub-pixel interleave): f16 x whose
 * last axis is the bias axis, contiguous, its extent a multiple of 8 and
 * every other stride too; y contiguous f16; fewer than 2^31 vectors. A
 * thread per 8 channels (16-byte loads and stores); the position comes
 * from 32-bit divisions over y's outer extents (shape[], innermost last;
 * xs[] x's strides in 8-element units); an f16 bias, 16-byte aligned, its
 * 8 values in one load. The same math and rounding as bias_unary_kernel.
 */
typedef struct Bu8Dims {
    int nd;                              /* outer dims, then the channel vectors */
    unsigned shape[DITTO_MAX_DIMS];      /* outer extents; shape[nd] = channels / 8 */
    int64_t xs[DITTO_MAX_DIMS];
} Bu8Dims;

template <int KIND>   /* a DittoUnaryKind fixed at compile time (the switch folds away), or -1: kind */
static __global__ void bias_unary_h8_kernel(const __grid_constant__ Bu8Dims d, unsigned n8, int kind, float a, float b, uint4 *y,
                                            const uint4 *x, const __half *bias)
{
    const int kd = KIND >= 0 ? KIND : kind;
    for (unsigned v = blockIdx.x * blockDim.x + threadIdx.x; v < n8; v += gridDim.x * blockDim.x) {
        unsigned t = v / d.shape[d.nd];
        const unsigned c8 = v - t * d.shape[d.nd];
        int64_t xo = c8;
        for (int k = d.nd - 1; k >= 0; k--) {
            const unsigned q = t / d.shape[k];
            xo += (int64_t)(t - q * d.shape[k]) * d.xs[k];
            t = q;
        }
        const uint4 bu = ((const uint4 *)bias)[c8];   /* the 8 biases in one 16-byte load */
        const __half *bv = (const __half *)&bu;
        uint4 u = x[xo], o;
        const __half *h = (const __half *)&u;
        __half *oh = (__half *)&o;
#pragma unroll
        for (int j = 0; j < 8; j++)
            oh[j] = __float2half_rn(ditto_unary_f(kd, a, b, __half2float(h[j]) + __half2float(bv[j])));
        y[v] = o;
    }
}

static int cuda_bias_unary(DittoBackend *be, const DittoUnaryParams *p, int axis, const DittoTensor *x, const DittoTensor *bias,
                           DittoTensor *y)
{
    bool xh = false, yh = false, bh = false;
    DITTO_TRY(float_dtype(be, "bias_unary", x, &xh));
    DITTO_TRY(float_dtype(be, "bias_unary", y, &yh));
    DITTO_TRY(float_dtype(be, "bias_unary", bias, &bh));
    const int64_t n = ditto_tensor_numel(y);
    if (n == 0)
        return 0;
    const int last = y->ndim - 1;
    bool v8 = xh && yh && bh && axis == last && x->stride[last] == 1 && ditto_tensor_is_contiguous(y) && y->shape[last] % 8 == 0 &&
              n / 8 < INT32_MAX && ((uintptr_t)x->data | (uintptr_t)y->data | (uintptr_t)bias->data) % 16 == 0;
    for (int k = 0; k < last && v8; k++)
        v8 = x->stride[k] % 8 == 0 && y->shape[k] <= UINT32_MAX;
    if (v8) {
        Bu8Dims d8;
        d8.nd = last;
        for (int k = 0; k < last; k++) {
            d8.shape[k] = (unsigned)y->shape[k];
            d8.xs[k] = x->stride[k] / 8;
        }
        d8.shape[last] = (unsigned)(y->shape[last] / 8);
        const unsigned n8 = (unsigned)(n / 8);
        if (p->kind == DITTO_UNARY_RELU)
            bias_unary_h8_kernel<DITTO_UNARY_RELU><<<ew_blocks(n8), EW_THREADS, 0, ditto_cuda(be)->stream>>>(
                d8, n8, (int)p->kind, p->alpha, p->beta, (uint4 *)y->data, (const uint4 *)x->data, (const __half *)bias->data);
        else
            bias_unary_h8_kernel<-1><<<ew_blocks(n8), EW_THREADS, 0, ditto_cuda(be)->stream>>>(
                d8, n8, (int)p->kind, p->alpha, p->beta, (uint4 *)y->data, (const uint4 *)x->data, (const __half *)bias->data);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    BuDims d;
    d.nd = y->ndim;
    d.axis = axis;
    for (int k = 0; k < y->ndim; k++) {
        d.shape[k] = y->shape[k];
        d.xs[k] = x->stride[k];
        d.ys[k] = y->stride[k];
    }
    bias_unary_kernel<<<ew_blocks(n), EW_THREADS, 0, ditto_cuda(be)->stream>>>(d, n, (int)p->kind, p->alpha, p->beta, y->data, yh, x->data,
                                                                               xh, bias->data, bh);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- binary ---- */

static __device__ __forceinline__ float binary_f(int kind, float u, float v)
{
    switch (kind) {
    case DITTO_BINARY_ADD: return u + v;
    case DITTO_BINARY_SUB: return u - v;
    case DITTO_BINARY_MUL: return u * v;
    case DITTO_BINARY_DIV: return u / v;
    case DITTO_BINARY_POW: return powf(u, v);
    case DITTO_BINARY_MAX: return (u != u || u > v) ? u : v;   /* NaN from either side */
    case DITTO_BINARY_MIN: return (u != u || u < v) ? u : v;
    default: return u;
    }
}

/* Operands y, a, b; y may alias a or b of the same shape (each element read before its write). */
static __global__ void binary_kernel(const __grid_constant__ EwDims d, int kind, void *y, bool yh, const void *a, bool ah,
                                     const void *b, bool bh)
{
    EW_LOOP(i, d.numel) {
        int64_t off[3];
        ew_offsets(&d, 3, i, off);
        float u = ditto_ld(a, off[1], ah), v = ditto_ld(b, off[2], bh);
        ditto_st(y, off[0], binary_f(kind, u, v), yh);
    }
}

/*
 * f16 operands, 8 elements a thread (binary_h8_fits: every operand's
 * innermost dim contiguous, the others broadcast or strided by multiples of
 * 8, e.g. the warp's occlusion multiply (B,256,64,64) * (B,1,64,64)): the
 * same float expression as binary_kernel, so the same bits.
 */
static __global__ void binary_h8_kernel(const __grid_constant__ EwDims d, int kind, uint4 *y, const uint4 *a, const __half *b)
{
    const int64_t n8 = d.numel / 8;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < n8; v += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        ew_offsets(&d, 3, v * 8, off);
        uint4 u = a[off[1] / 8], w = *(const uint4 *)(b + off[2]), o;
        const __half *hu = (const __half *)&u, *hw = (const __half *)&w;
        __half *ho = (__half *)&o;
#pragma unroll
        for (int j = 0; j < 8; j++)
            ho[j] = __float2half_rn(binary_f(kind, __half2float(hu[j]), __half2float(hw[j])));
        y[off[0] / 8] = o;
    }
}

/* Whether binary_h8_kernel runs d (after ew_init): every dim's strides multiples of 8, the innermost contiguous and a multiple of 8 long. */
static bool binary_h8_fits(const EwDims *d, bool ah, bool bh, bool yh, const void *a, const void *b, const void *y)
{
    const int last = d->ndim - 1;
    if (!ah || !bh || !yh || d->shape[last] % 8 || ((uintptr_t)a | (uintptr_t)b | (uintptr_t)y) % 16)
        return false;
    for (int k = 0; k < 3; k++) {
        if (d->stride[k][last] != 1)
            return false;
        for (int i = 0; i < last; i++)
            if (d->stride[k][i] % 8)
                return false;
    }
    return true;
}

/* View of t with y's rank and shape: missing leading dims and size-1 dims get stride 0. */
static DittoTensor broadcast_view(const DittoTensor *t, const DittoTensor *y)
{
    DittoTensor r = *y;
    r.data = t->data;
    r.dtype = t->dtype;
    int off = y->ndim - t->ndim;
    for (int i = 0; i < y->ndim; i++) {
        int j = i - off;
        r.stride[i] = (j >= 0 && t->shape[j] != 1) ? t->stride[j] : 0;
    }
    return r;
}

static int cuda_binary(DittoBackend *be, const DittoBinaryParams *p, const DittoTensor *a, const DittoTensor *b, DittoTensor *y)
{
    bool ah = false, bh = false, yh = false;
    DITTO_TRY(float_dtype(be, "binary", a, &ah));
    DITTO_TRY(float_dtype(be, "binary", b, &bh));
    DITTO_TRY(float_dtype(be, "binary", y, &yh));
    DittoTensor av = broadcast_view(a, y), bv = broadcast_view(b, y);
    const DittoTensor *t[3] = { y, &av, &bv };
    EwDims d;
    ew_init(&d, 3, t);
    if (d.numel <= 0)
        return 0;
    if (binary_h8_fits(&d, ah, bh, yh, a->data, b->data, y->data)) {
        binary_h8_kernel<<<ew_blocks(d.numel / 8), EW_THREADS, 0, ditto_cuda(be)->stream>>>(d, (int)p->kind, (uint4 *)y->data,
                                                                                          (const uint4 *)a->data, (const __half *)b->data);
        DITTO_CUDA_LAUNCHED(be);
        return 0;
    }
    binary_kernel<<<ew_blocks(d.numel), EW_THREADS, 0, ditto_cuda(be)->stream>>>(d, (int)p->kind, y->data, yh, a->data, ah,
                                                                                  b->data, bh);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- block reductions (blockDim a multiple of 32, at most 1024; every thread calls them) ---- */

static __device__ __forceinline__ float max_keep_nan(float acc, float r)
{
    return (r > acc || r != r) ? r : acc;
}

static __device__ __forceinline__ float min_keep_nan(float acc, float r)
{
    return (r < acc || r != r) ? r : acc;
}

static __device__ double block_sum_d(double v, double *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();   /* sh may still be read by a previous call */
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* kind 0: max ignoring NaN (softmax), 1: max keeping NaN, 2: min keeping NaN */
static __device__ float block_ext_f(float v, int kind, float *sh)
{
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = kind == 0 ? (u > v ? u : v) : kind == 1 ? max_keep_nan(v, u) : min_keep_nan(v, u);
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (kind == 2 ? INFINITY : -INFINITY);
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = kind == 0 ? (u > v ? u : v) : kind == 1 ? max_keep_nan(v, u) : min_keep_nan(v, u);
    }
    return v;
}

static int row_threads(int64_t n)
{
    return n >= 256 ? 256 : n >= 128 ? 128 : n >= 64 ? 64 : 32;
}

static int row_blocks(int64_t rows)
{
    return (int)(rows < (1 << 20) ? rows : (1 << 20));
}

/* x viewed as (outer, n, inner), contiguous */
static void axis_split(const DittoTensor *x, int axis, int64_t *outer, int64_t *n, int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < axis; i++)
        *outer *= x->shape[i];
    for (int i = axis + 1; i < x->ndim; i++)
        *inner *= x->shape[i];
    *n = x->shape[axis];
}

/* ---- softmax: max, float exp with a double sum, y = (float)(e * (1/sum)); y may be x ---- */

/* last axis: one block per row; pass 3 recomputes exp so an in-place y is written only once */
static __global__ void softmax_rows_kernel(const void *x, bool xh, void *y, bool yh, int64_t rows, int64_t n)
{
    __shared__ float shf[32];
    __shared__ double shd[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = r * n;
        float mx = -INFINITY;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
            float v = ditto_ld(x, base + k, xh);
            mx = v > mx ? v : mx;
        }
        mx = block_ext_f(mx, 0, shf);
        double sum = 0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
            sum += expf(ditto_ld(x, base + k, xh) - mx);
        sum = block_sum_d(sum, shd);
        double inv = 1.0 / sum;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
            float e = expf(ditto_ld(x, base + k, xh) - mx);
            ditto_st(y, base + k, (float)((double)e * inv), yh);
        }
    }
}

/* inner > 1: one thread per (outer, inner) column, the CPU's loop order */
static __global__ void softmax_cols_kernel(const void *x, bool xh, void *y, bool yh, int64_t outer, int64_t n, int64_t inner)
{
    EW_LOOP(c, outer * inner) {
        int64_t o = c / inner, i = c - o * inner;
        int64_t base = o * n * inner + i;
        float mx = -INFINITY;
        for (int64_t k = 0; k < n; k++) {
            float v = ditto_ld(x, base + k * inner, xh);
            mx = v > mx ? v : mx;
        }
        double sum = 0;
        for (int64_t k = 0; k < n; k++)
            sum += expf(ditto_ld(x, base + k * inner, xh) - mx);
        double inv = 1.0 / sum;
        for (int64_t k = 0; k < n; k++) {
            float e = expf(ditto_ld(x, base + k * inner, xh) - mx);
            ditto_st(y, base + k * inner, (float)((double)e * inv), yh);
        }
    }
}

static int cuda_softmax(DittoBackend *be, const DittoSoftmaxParams *p, const DittoTensor *x, DittoTensor *y)
{
    bool xh = false, yh = false;
    DITTO_TRY(float_dtype(be, "softmax", x, &xh));
    DITTO_TRY(float_dtype(be, "softmax", y, &yh));
    int64_t outer, n, inner;
    axis_split(x, p->axis, &outer, &n, &inner);
    if (outer * inner == 0 || n == 0)
        return 0;
    cudaStream_t st = ditto_cuda(be)->stream;
    if (inner == 1)
        softmax_rows_kernel<<<row_blocks(outer), row_threads(n), 0, st>>>(x->data, xh, y->data, yh, outer, n);
    else
        softmax_cols_kernel<<<ew_blocks(outer * inner), EW_THREADS, 0, st>>>(x->data, xh, y->data, yh, outer, n, inner);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- reduce: double accumulation, one rounding at the end ---- */

static __device__ __forceinline__ float reduce_finish(int kind, double v, int64_t n)
{
    if (kind == DITTO_REDUCE_MEAN)
        v /= (double)n;
    else if (kind == DITTO_REDUCE_L2)
        v = sqrt(v);
    return (float)v;
}

static __global__ void reduce_rows_kernel(const void *x, bool xh, void *y, bool yh, int kind, int64_t rows, int64_t n)
{
    __shared__ float shf[32];
    __shared__ double shd[32];
    bool ext = kind == DITTO_REDUCE_MAX || kind == DITTO_REDUCE_MIN;
    bool sq = kind == DITTO_REDUCE_SUMSQ || kind == DITTO_REDUCE_L2;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = r * n;
        float res;
        if (ext) {
            bool mx = kind == DITTO_REDUCE_MAX;
            float acc = mx ? -INFINITY : INFINITY;
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
                float v = ditto_ld(x, base + k, xh);
                acc = mx ? max_keep_nan(acc, v) : min_keep_nan(acc, v);
            }
            res = block_ext_f(acc, mx ? 1 : 2, shf);
        } else {
            double acc = 0;
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
                double v = ditto_ld(x, base + k, xh);
                acc += sq ? v * v : v;
            }
            res = reduce_finish(kind, block_sum_d(acc, shd), n);
        }
        if (threadIdx.x == 0)
            ditto_st(y, r, res, yh);
    }
}

static __global__ void reduce_cols_kernel(const void *x, bool xh, void *y, bool yh, int kind, int64_t outer, int64_t n, int64_t inner)
{
    bool ext = kind == DITTO_REDUCE_MAX || kind == DITTO_REDUCE_MIN;
    bool sq = kind == DITTO_REDUCE_SUMSQ || kind == DITTO_REDUCE_L2;
    EW_LOOP(c, outer * inner) {
        int64_t o = c / inner, i = c - o * inner;
        int64_t base = o * n * inner + i;
        float res;
        if (ext) {
            float acc = ditto_ld(x, base, xh);
            for (int64_t k = 1; k < n; k++) {
                float v = ditto_ld(x, base + k * inner, xh);
                acc = kind == DITTO_REDUCE_MAX ? max_keep_nan(acc, v) : min_keep_nan(acc, v);
            }
            res = acc;
        } else {
            double acc = 0;
            for (int64_t k = 0; k < n; k++) {
                double v = ditto_ld(x, base + k * inner, xh);
                acc += sq ? v * v : v;
            }
            res = reduce_finish(kind, acc, n);
        }
        ditto_st(y, c, res, yh);
    }
}

static int cuda_reduce(DittoBackend *be, const DittoReduceParams *p, const DittoTensor *x, DittoTensor *y)
{
    bool xh = false, yh = false;
    DITTO_TRY(float_dtype(be, "reduce", x, &xh));
    DITTO_TRY(float_dtype(be, "reduce", y, &yh));
    int64_t outer, n, inner;
    axis_split(x, p->axis, &outer, &n, &inner);
    if (outer * inner == 0)
        return 0;
    if (n == 0 && (p->kind == DITTO_REDUCE_MAX || p->kind == DITTO_REDUCE_MIN))
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "op reduce: max/min over an empty axis");
    cudaStream_t st = ditto_cuda(be)->stream;
    /* a block per row pays off for long rows only; short ones (the 3 coordinates of a motion vector) go one thread per output */
    if (inner == 1 && n > 32)
        reduce_rows_kernel<<<row_blocks(outer), row_threads(n), 0, st>>>(x->data, xh, y->data, yh, (int)p->kind, outer, n);
    else
        reduce_cols_kernel<<<ew_blocks(outer * inner), EW_THREADS, 0, st>>>(x->data, xh, y->data, yh, (int)p->kind, outer, n, inner);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- fused model steps: _rn intrinsics round each operation as the unfused op sequence does (no FMA) ---- */

/* operands: out, h, y, scale, shift; out may be h or y (same view) */
static __global__ void film_kernel(const __grid_constant__ EwDims d, void *o, bool oh, const void *h, bool hh, const void *y, bool yh,
                                   const void *sc, bool sch, const void *sh, bool shh)
{
    EW_LOOP(i, d.numel) {
        int64_t off[5];
        ew_offsets(&d, 5, i, off);
        float t = __fmul_rn(ditto_ld(sc, off[3], sch), ditto_ld(y, off[2], yh));   /* MUL */
        t = __fadd_rn(t, ditto_ld(sh, off[4], shh));                               /* ADD shift */
        ditto_st(o, off[0], __fadd_rn(ditto_ld(h, off[1], hh), t), oh);           /* ADD residual */
    }
}

static int cuda_film(DittoBackend *be, const DittoTensor *h, const DittoTensor *y, const DittoTensor *scale, const DittoTensor *shift, DittoTensor *out)
{
    bool oh = false, hh = false, yh = false, sch = false, shh = false;
    DITTO_TRY(float_dtype(be, "film", out, &oh));
    DITTO_TRY(float_dtype(be, "film", h, &hh));
    DITTO_TRY(float_dtype(be, "film", y, &yh));
    DITTO_TRY(float_dtype(be, "film", scale, &sch));
    DITTO_TRY(float_dtype(be, "film", shift, &shh));
    DittoTensor scv = broadcast_view(scale, out), shv = broadcast_view(shift, out);
    const DittoTensor *t[5] = { out, h, y, &scv, &shv };
    EwDims d;
    ew_init(&d, 5, t);
    if (d.numel <= 0)
        return 0;
    film_kernel<<<ew_blocks(d.numel), EW_THREADS, 0, ditto_cuda(be)->stream>>>(d, out->data, oh, h->data, hh, y->data, yh, scale->data, sch,
                                                                                shift->data, shh);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

typedef struct DdimArgs {
    DittoDdimStepParams p;
    void *x0, *eps, *xn;          /* NULL: not wanted */
    const void *c, *u, *x, *z;    /* x, z NULL when not needed */
    bool x0h, epsh, xnh, ch, uh, xh, zh;
} DdimArgs;

/* operands: x0, eps, x_next, cond, uncond, x, z (placeholder views where NULL) */
static __global__ void ddim_step_kernel(const __grid_constant__ EwDims d, const __grid_constant__ DdimArgs a)
{
    EW_LOOP(i, d.numel) {
        int64_t off[7];
        ew_offsets(&d, 7, i, off);
        float u = ditto_ld(a.u, off[4], a.uh);
        float dv = __fsub_rn(ditto_ld(a.c, off[3], a.ch), u);                   /* C - U */
        dv = __fadd_rn(__fmul_rn(a.p.guidance, dv), 0.0f);                      /* affine w, 0 */
        float x0 = __fadd_rn(u, dv);                                            /* U + w (C - U) */
        if (a.x0)
            ditto_st(a.x0, off[0], x0, a.x0h);
        if (!a.eps && !a.xn)
            continue;
        float xi = ditto_ld(a.x, off[5], a.xh);                                 /* read before x_next (may be x) is written */
        float e = __fadd_rn(__fmul_rn(a.p.a, xi), 0.0f);                         /* A_t x */
        float q = __fadd_rn(__fmul_rn(a.p.rb, x0), 0.0f);                        /* x0 / B_t */
        e = __fsub_rn(e, q);
        if (a.eps)
            ditto_st(a.eps, off[1], e, a.epsh);
        if (a.xn) {
            float v = __fadd_rn(__fmul_rn(a.p.alpha_next_sqrt, x0), 0.0f);
            float t = __fadd_rn(__fmul_rn(a.p.c, e), 0.0f);
            v = __fadd_rn(v, t);                                                 /* + c eps */
            t = __fadd_rn(__fmul_rn(a.p.sigma, ditto_ld(a.z, off[6], a.zh)), 0.0f);
            ditto_st(a.xn, off[2], __fadd_rn(v, t), a.xnh);                      /* + sigma z */
        }
    }
}

static int cuda_ddim_step(DittoBackend *be, const DittoDdimStepParams *p, const DittoTensor *cond, const DittoTensor *uncond, const DittoTensor *x,
                          const DittoTensor *z, DittoTensor *x0, DittoTensor *eps, DittoTensor *x_next)
{
    DdimArgs a;
    memset(&a, 0, sizeof a);
    a.p = *p;
    DITTO_TRY(float_dtype(be, "ddim_step", cond, &a.ch));
    DITTO_TRY(float_dtype(be, "ddim_step", uncond, &a.uh));
    if (x)
        DITTO_TRY(float_dtype(be, "ddim_step", x, &a.xh));
    if (z)
        DITTO_TRY(float_dtype(be, "ddim_step", z, &a.zh));
    if (x0)
        DITTO_TRY(float_dtype(be, "ddim_step", x0, &a.x0h));
    if (eps)
        DITTO_TRY(float_dtype(be, "ddim_step", eps, &a.epsh));
    if (x_next)
        DITTO_TRY(float_dtype(be, "ddim_step", x_next, &a.xnh));
    a.c = cond->data;
    a.u = uncond->data;
    a.x = x ? x->data : NULL;
    a.z = z ? z->data : NULL;
    a.x0 = x0 ? x0->data : NULL;
    a.eps = eps ? eps->data : NULL;
    a.xn = x_next ? x_next->data : NULL;
    const DittoTensor *any = x0 ? x0 : eps ? eps : x_next;
    const DittoTensor *t[7] = { x0 ? x0 : any, eps ? eps : any, x_next ? x_next : any, cond, uncond, x ? x : cond, z ? z : cond };
    EwDims d;
    ew_init(&d, 7, t);
    if (d.numel <= 0)
        return 0;
    ddim_step_kernel<<<ew_blocks(d.numel), EW_THREADS, 0, ditto_cuda(be)->stream>>>(d, a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* ---- randn: a thread per Philox block (4 values) of a row ---- */

static __global__ void k_randn(uint64_t seed, uint64_t s0, uint64_t sa, uint64_t sb, int64_t B, int64_t n, int64_t nblk, int64_t total,
                               float *y)
{
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = t / nblk, blk = t - row * nblk, a = row / B, b = row - a * B;
        uint32_t o[4];
        ditto_philox_block(seed, s0 + (uint64_t)a * sa + (uint64_t)b * sb, (uint64_t)blk, o);
        float z[4];
        ditto_box_muller(o[0], o[1], &z[0], &z[1]);
        ditto_box_muller(o[2], o[3], &z[2], &z[3]);
        float *yr = y + row * n;
        for (int k = 0; k < 4 && 4 * blk + k < n; k++)
            yr[4 * blk + k] = z[k];
    }
}

static int cuda_randn(DittoBackend *be, const DittoRandnParams *p, DittoTensor *y)
{
    DITTO_TRY(on_device(be, "randn", y));
    const int64_t B = y->shape[1], n = y->shape[2], nblk = (n + 3) / 4, total = y->shape[0] * B * nblk;
    if (total == 0)
        return 0;
    k_randn<<<ditto_cuda_blocks(total, 256), 256, 0, ditto_cuda(be)->stream>>>(p->seed, p->stream0, p->stream_a, p->stream_b, B, n, nblk,
                                                                              total, (float *)y->data);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

void ditto_cuda_init_elementwise(DittoOps *ops)
{
    ops->copy = cuda_copy;
    ops->fill = cuda_fill;
    ops->randn = cuda_randn;
    ops->unary = cuda_unary;
    ops->bias_unary = cuda_bias_unary;
    ops->binary = cuda_binary;
    ops->softmax = cuda_softmax;
    ops->reduce = cuda_reduce;
    ops->concat = cuda_concat;
    ops->film = cuda_film;
    ops->ddim_step = cuda_ddim_step;
}
