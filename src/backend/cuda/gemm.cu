/*
 * CUDA matmul and linear on cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx).
 *
 * Tensors are row-major and cuBLAS is column-major: a row-major (M, N) matrix
 * with row length N is the column-major (N, M) matrix of its transpose, so
 * C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T with the operands
 * swapped and each leading dimension the row length as stored.
 *
 * Types: a and b share a dtype (f32 or f16); c is that dtype or f32. The
 * compute type is always CUBLAS_COMPUTE_32F (fp32 accumulation, float alpha
 * and beta). The backend keeps the handle in CUBLAS_DEFAULT_MATH, so f32 GEMMs
 * never use TF32 and match the CPU oracle; f16 GEMMs run on tensor cores.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

/* cuBLAS batch counts beyond a grid's y/z limit are split into calls of at most this many. */
#define GEMM_MAX_BATCH 65535

static bool fits_int(int64_t v)
{
    return v >= 0 && v <= INT_MAX;
}

static bool storage_ok(DittoDType t)
{
    return t == DITTO_F32 || t == DITTO_F16;
}

static cudaDataType_t cuda_dtype(DittoDType t)
{
    return t == DITTO_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* a and b alike (f32 or f16); c alike or f32 (the cublasGemmEx combinations with COMPUTE_32F). */
static int check_types(DittoBackend *be, const char *op, DittoDType ab, DittoDType b, DittoDType c)
{
    if (!storage_ok(ab) || b != ab || (c != ab && c != DITTO_F32))
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op %s: dtypes %s x %s -> %s not supported by the cuda backend"
                          " (f32 or f16 operands alike, output alike or f32)", op, ditto_dtype_name(ab),
                          ditto_dtype_name(b), ditto_dtype_name(c));
    return 0;
}

/*
 * Row-major c (M, N) = alpha op(a) op(b) + beta c for count matrices spaced
 * sa, sb, sc elements apart (0: shared). lda, ldb are the row lengths of a
 * and b as stored, ldc = N.
 */
static int gemm_rm(DittoBackend *be, bool ta, bool tb, int M, int N, int K, float alpha, const void *A, int lda,
                   long long sa, const void *B, int ldb, long long sb, float beta, void *C, long long sc, int64_t count,
                   DittoDType tab, DittoDType tc)
{
    DittoCuda *cu = ditto_cuda(be);
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t dab = cuda_dtype(tab), dc = cuda_dtype(tc);
    size_t eab = ditto_dtype_size(tab), ec = ditto_dtype_size(tc);
    if (count == 1) {
        DITTO_CUBLAS_CHECK(be, cublasGemmEx(cu->cublas, opb, opa, N, M, K, &alpha, B, dab, ldb, A, dab, lda, &beta, C, dc, N,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return 0;
    }
    for (int64_t i0 = 0; i0 < count; i0 += GEMM_MAX_BATCH) {
        int64_t n = count - i0 < GEMM_MAX_BATCH ? count - i0 : GEMM_MAX_BATCH;
        const char *Ai = (const char *)A + (size_t)(i0 * sa) * eab;
        const char *Bi = (const char *)B + (size_t)(i0 * sb) * eab;
        char *Ci = (char *)C + (size_t)(i0 * sc) * ec;
        DITTO_CUBLAS_CHECK(be, cublasGemmStridedBatchedEx(cu->cublas, opb, opa, N, M, K, &alpha, Bi, dab, ldb, sb, Ai, dab,
                                                          lda, sa, &beta, Ci, dc, N, sc, (int)n, CUBLAS_COMPUTE_32F,
                                                          CUBLAS_GEMM_DEFAULT));
    }
    return 0;
}

/* Element strides of t's batch dims (dims [0, nb)), its matrices being mat elements. */
static void batch_strides(const DittoTensor *t, int nb, int64_t mat, int64_t *st)
{
    int64_t s = mat;
    for (int i = nb - 1; i >= 0; i--) {
        st[i] = s;
        s *= t->shape[i];
    }
}

/* Dims [s, nb) of t either all equal c's (full) or all 1 (shared). */
static bool block_uniform(const DittoTensor *t, const DittoTensor *c, int s, int nb, bool *full)
{
    bool all_eq = true, all_one = true;
    for (int i = s; i < nb; i++) {
        all_eq = all_eq && t->shape[i] == c->shape[i];
        all_one = all_one && t->shape[i] == 1;
    }
    *full = all_eq;
    return all_eq || all_one;
}

/*
 * Batch dims split at s: the inner dims [s, nb) run as one strided-batched
 * GEMM (a and b each full there, stride one matrix, or shared, stride 0); the
 * outer dims are a host loop. s is the smallest split that works, so plain
 * and fully broadcast batches are a single call.
 */
static int cuda_matmul(DittoBackend *be, const DittoMatmulParams *p, const DittoTensor *a, const DittoTensor *b,
                       DittoTensor *c)
{
    DITTO_TRY(check_types(be, "matmul", a->dtype, b->dtype, c->dtype));
    int n = c->ndim, nb = n - 2;
    int64_t M = c->shape[n - 2], N = c->shape[n - 1];
    int64_t K = p->trans_a ? a->shape[n - 2] : a->shape[n - 1];
    int64_t lda = a->shape[n - 1], ldb = b->shape[n - 1];
    int64_t batch = 1;
    for (int i = 0; i < nb; i++)
        batch *= c->shape[i];
    if (batch == 0 || M == 0 || N == 0)
        return 0;
    DittoCuda *cu = ditto_cuda(be);
    if (K == 0) {
        /* empty reduction: c = 0 (all-zero bits are 0.0 in f32 and f16) */
        DITTO_CUDA_CHECK(be, cudaMemsetAsync(c->data, 0, ditto_tensor_nbytes(c), cu->stream));
        return 0;
    }
    if (!fits_int(M) || !fits_int(N) || !fits_int(K) || !fits_int(lda) || !fits_int(ldb))
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "op matmul: a dimension exceeds the cuBLAS int range");
    float alpha = p->alpha != 0.0f ? p->alpha : 1.0f;
    int64_t a_mat = a->shape[n - 2] * a->shape[n - 1], b_mat = b->shape[n - 2] * b->shape[n - 1], c_mat = M * N;
    int s = 0;
    bool a_full = true, b_full = true;
    for (;; s++) {
        bool af, bf;
        if (block_uniform(a, c, s, nb, &af) && block_uniform(b, c, s, nb, &bf)) {
            a_full = af;
            b_full = bf;
            break;
        }
    }
    int64_t inner = 1, ast[DITTO_MAX_DIMS], bst[DITTO_MAX_DIMS];
    for (int i = s; i < nb; i++)
        inner *= c->shape[i];
    batch_strides(a, nb, a_mat, ast);
    batch_strides(b, nb, b_mat, bst);
    size_t ea = ditto_dtype_size(a->dtype), ec = ditto_dtype_size(c->dtype);
    int64_t outer = batch / inner;
    for (int64_t o = 0; o < outer; o++) {
        int64_t rem = o, ao = 0, bo = 0;
        for (int i = s - 1; i >= 0; i--) {
            int64_t idx = rem % c->shape[i];
            rem /= c->shape[i];
            if (a->shape[i] != 1)
                ao += idx * ast[i];
            if (b->shape[i] != 1)
                bo += idx * bst[i];
        }
        const char *A = (const char *)a->data + (size_t)ao * ea;
        const char *B = (const char *)b->data + (size_t)bo * ea;
        char *C = (char *)c->data + (size_t)(o * inner * c_mat) * ec;
        DITTO_TRY(gemm_rm(be, p->trans_a, p->trans_b, (int)M, (int)N, (int)K, alpha, A, (int)lda, a_full ? a_mat : 0, B,
                          (int)ldb, b_full ? b_mat : 0, 0.0f, C, c_mat, inner, a->dtype, c->dtype));
    }
    return 0;
}

/* y (rows, out) = bias broadcast over rows; fp32 through ditto_ld/ditto_st. */
static __global__ void k_bias_rows(const void *bias, bool bf16, void *y, bool yf16, int64_t out, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        ditto_st(y, i, ditto_ld(bias, i % out, bf16), yf16);
}

/*
 * y = x w^T + bias. The bias is written into y first and the GEMM adds onto it
 * (beta = 1): one rounding of the fp32 sum, also for f16 outputs.
 *
 * Batch consistency: one cublasGemmEx per item of dim 0, each with the same
 * (M, N, K) whatever the batch size. cuBLAS picks its kernel (tiling, split-K)
 * from the problem shape, and is deterministic for a given shape on one
 * handle and stream, so an item's rows get the same bits alone or in a batch.
 * A single GEMM over all rows, or a batched GEMM whose count is the batch
 * size, would let that choice depend on the batch size.
 */
static int cuda_linear(DittoBackend *be, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y)
{
    DITTO_TRY(check_types(be, "linear", x->dtype, w->dtype, y->dtype));
    if (bias && !storage_ok(bias->dtype))
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op linear: bias dtype %s not supported by the cuda backend",
                          ditto_dtype_name(bias->dtype));
    int64_t out = w->shape[0], in = w->shape[1];
    int64_t rows = out ? ditto_tensor_numel(y) / out : 0;
    if (rows == 0 || out == 0)
        return 0;
    /* DITTO_CUDA_LINEAR=flat: one GEMM over all rows (measurement only: gives up the per-item invariance) */
    static int flat = -1;
    if (flat < 0) {
        const char *e = getenv("DITTO_CUDA_LINEAR");
        flat = e && !strcmp(e, "flat");
    }
    int64_t items = x->ndim >= 2 && !flat ? x->shape[0] : 1, per = rows / items;
    if (!fits_int(per) || !fits_int(out) || !fits_int(in))
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "op linear: a dimension exceeds the cuBLAS int range");
    DittoCuda *cu = ditto_cuda(be);
    if (bias) {
        int64_t n = rows * out;
        k_bias_rows<<<ditto_cuda_blocks(n, 256), 256, 0, cu->stream>>>(bias->data, bias->dtype == DITTO_F16, y->data,
                                                                       y->dtype == DITTO_F16, out, n);
        DITTO_CUDA_LAUNCHED(be);
    }
    if (in == 0) {
        if (!bias)
            DITTO_CUDA_CHECK(be, cudaMemsetAsync(y->data, 0, ditto_tensor_nbytes(y), cu->stream));
        return 0;
    }
    size_t ex = ditto_dtype_size(x->dtype), ey = ditto_dtype_size(y->dtype);
    for (int64_t i = 0; i < items; i++) {
        const char *X = (const char *)x->data + (size_t)(i * per * in) * ex;
        char *Y = (char *)y->data + (size_t)(i * per * out) * ey;
        DITTO_TRY(gemm_rm(be, false, true, (int)per, (int)out, (int)in, 1.0f, X, (int)in, 0, w->data, (int)in, 0,
                          bias ? 1.0f : 0.0f, Y, 0, 1, x->dtype, y->dtype));
    }
    return 0;
}

void ditto_cuda_init_gemm(DittoOps *ops)
{
    ops->matmul = cuda_matmul;
    ops->linear = cuda_linear;
}
