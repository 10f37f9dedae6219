/*
 * CUDA matmul and linear on cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx)
 * and cuBLASLt (linear: bias in the epilogue).
 *
 * Tensors are row-major and cuBLAS is column-major: a row-major (M, N) matrix
 * with row length N is the column-major (N, M) matrix of its transpose, so
 * C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T with the operands
 * swapped and each leading dimension the row length as stored.
 *
 * Types: a and b share a dtype (f32 or f16); c is that dtype or f32. The
 * compute type is CUBLAS_COMPUTE_32F (fp32 accumulation, float alpha and
 * beta). The backend keeps the handle in CUBLAS_DEFAULT_MATH, so f32 GEMMs
 * never use TF32 and match the CPU oracle unless a linear asks for it
 * (DittoLinearParams.tf32: CUBLAS_COMPUTE_32F_FAST_TF32, tensor cores); f16
 * GEMMs run on tensor cores.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

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
                   DittoDType tab, DittoDType tc, cublasComputeType_t ct)
{
    DittoCuda *cu = ditto_cuda(be);
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t dab = cuda_dtype(tab), dc = cuda_dtype(tc);
    size_t eab = ditto_dtype_size(tab), ec = ditto_dtype_size(tc);
    if (count == 1) {
        DITTO_CUBLAS_CHECK(be, cublasGemmEx(cu->cublas, opb, opa, N, M, K, &alpha, B, dab, ldb, A, dab, lda, &beta, C, dc, N,
                                            ct, CUBLAS_GEMM_DEFAULT));
        return 0;
    }
    for (int64_t i0 = 0; i0 < count; i0 += GEMM_MAX_BATCH) {
        int64_t n = count - i0 < GEMM_MAX_BATCH ? count - i0 : GEMM_MAX_BATCH;
        const char *Ai = (const char *)A + (size_t)(i0 * sa) * eab;
        const char *Bi = (const char *)B + (size_t)(i0 * sb) * eab;
        char *Ci = (char *)C + (size_t)(i0 * sc) * ec;
        DITTO_CUBLAS_CHECK(be, cublasGemmStridedBatchedEx(cu->cublas, opb, opa, N, M, K, &alpha, Bi, dab, ldb, sb, Ai, dab,
                                                          lda, sa, &beta, Ci, dc, N, sc, (int)n, ct,
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
                          (int)ldb, b_full ? b_mat : 0, 0.0f, C, c_mat, inner, a->dtype, c->dtype, CUBLAS_COMPUTE_32F));
    }
    return 0;
}

/* y (rows, out) = bias broadcast over rows; fp32 through ditto_ld/ditto_st. */
static __global__ void k_bias_rows(const void *bias, bool bf16, void *y, bool yf16, int64_t out, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        ditto_st(y, i, ditto_ld(bias, i % out, bf16), yf16);
}

/* y = GELU(y) (the unary op's exact erf form) and/or y rounded to TF32, in place over n elements. */
static __global__ void k_gelu_round(void *y, bool yh, int64_t n, bool gelu, bool r32)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = ditto_ld(y, i, yh);
        if (gelu)
            v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        if (r32)
            v = ditto_tf32_round(v);
        ditto_st(y, i, v, yh);
    }
}

/*
 * cuBLASLt plans of the linear op: y (per, out) = x (per, in) w^T (+ bias in
 * the epilogue: one rounding of acc + bias, as the bias-fill + beta = 1 path
 * gives), one plan per (device, shape, dtypes, bias, tf32), the algorithm
 * from one heuristic query and then fixed: a shape always runs the same
 * kernel, in every call and every graph, whatever the pointers.
 *
 * The query asks for algorithms that work on 16-byte aligned operands
 * (MIN_ALIGNMENT 16; the bias pointer's alignment is read from the
 * descriptor, so the query sees a dummy 16-byte aligned one), and the plan
 * is used only when x, w, y and bias are 16-byte aligned and one item's rows
 * span a multiple of 16 bytes in x and y, so every item of a batch is as
 * aligned as the first. Split-K may reduce in the workspace in fp32 or in
 * place through the output, never through float16 partial sums.
 *
 * The plans are process-wide (descriptors are host objects, not tied to a
 * handle or stream; cublasHandle_t doubles as the cublasLtHandle_t) and live
 * until exit; the lock covers the lookup, the descriptor's bias pointer and
 * the enqueue. Queries are host-only calls: a plan first needed inside a
 * graph capture is still made there. The workspace is the backend's (at
 * least 32 MiB once allocated; plans ask for no more): stream-ordered, and a
 * plan that would grow it inside a capture fails instead (the eager run
 * before a capture sizes it).
 */
#define LT_ALIGN 16
#define LT_WORKSPACE_MAX ((size_t)32 << 20)
#define LT_MAX_PLANS 256

typedef struct LtKey {
    int device;
    int per, out, in;
    DittoDType tab, tc;
    bool bias, tf32;
} LtKey;

typedef struct LtPlan {
    LtKey key;
    bool ok;                          /* false: no algorithm for this shape (the cublasGemmEx path runs) */
    bool used;                        /* has run: ok stays as it is */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lw, lx, ly;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} LtPlan;

static pthread_mutex_t lt_lock = PTHREAD_MUTEX_INITIALIZER;
static LtPlan *lt_plans[LT_MAX_PLANS];
static int lt_nplans;

static bool lt_same(const LtKey *a, const LtKey *b)
{
    return a->device == b->device && a->per == b->per && a->out == b->out && a->in == b->in && a->tab == b->tab && a->tc == b->tc &&
           a->bias == b->bias && a->tf32 == b->tf32;
}

/* Descriptors and the heuristic's first algorithm for k; p->ok false when there is none. Host calls only. */
static void lt_make(DittoCuda *cu, LtPlan *p)
{
    const LtKey *k = &p->key;
    cublasLtHandle_t lt = (cublasLtHandle_t)cu->cublas;
    cudaDataType_t dab = cuda_dtype(k->tab), dc = cuda_dtype(k->tc);
    cublasComputeType_t ct = k->tf32 && k->tab == DITTO_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t opt = CUBLAS_OP_T, opn = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = k->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    int32_t bt = (int32_t)dc;
    const void *dummy_bias = (const void *)(uintptr_t)LT_ALIGN;
    uint64_t wsmax = LT_WORKSPACE_MAX;
    uint32_t align = LT_ALIGN;
    /* float16 outputs: no split-K partial sums in float16 (in place or in the output type) */
    uint32_t schemes = k->tc == DITTO_F16 ? (CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
                                          : (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    bool ok = cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opt, sizeof opt) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opn, sizeof opn) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS;
    if (ok && k->bias)
        ok = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dummy_bias, sizeof dummy_bias) == CUBLAS_STATUS_SUCCESS;
    /* column-major: w is (in, out) ld in, taken transposed; x (in, per) ld in; y (out, per) ld out */
    ok = ok && cublasLtMatrixLayoutCreate(&p->lw, dab, (uint64_t)k->in, (uint64_t)k->out, k->in) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&p->lx, dab, (uint64_t)k->in, (uint64_t)k->per, k->in) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&p->ly, dc, (uint64_t)k->out, (uint64_t)k->per, k->out) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax, sizeof wsmax) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes) == CUBLAS_STATUS_SUCCESS;
    const cublasLtMatmulPreferenceAttributes_t aligns[4] = { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                             CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES };
    for (int i = 0; i < 4 && ok; i++)
        ok = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->lw, p->lx, p->ly, p->ly, pref, 1, &res, &found) == CUBLAS_STATUS_SUCCESS &&
         found > 0 && res.state == CUBLAS_STATUS_SUCCESS && res.workspaceSize <= LT_WORKSPACE_MAX;
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    p->ok = ok;
    if (ok) {
        p->algo = res.algo;
        p->ws = res.workspaceSize;
    }
}

/* The plan of k, made on first use; NULL when the table is full or out of memory. Called with lt_lock held. */
static LtPlan *lt_plan(DittoCuda *cu, const LtKey *k)
{
    for (int i = 0; i < lt_nplans; i++)
        if (lt_same(&lt_plans[i]->key, k))
            return lt_plans[i];
    if (lt_nplans == LT_MAX_PLANS)
        return NULL;
    LtPlan *p = (LtPlan *)calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->key = *k;
    lt_make(cu, p);
    lt_plans[lt_nplans++] = p;
    return p;
}

static bool aligned(const void *p, size_t a)
{
    return (uintptr_t)p % a == 0;
}

/*
 * The linear of every item on the cuBLASLt plan of its shape. Returns 1 when
 * done, 0 when the plan does not apply (alignment, no algorithm): the caller
 * runs the cublasGemmEx path instead, for all items alike.
 */
static int lt_linear(DittoBackend *be, bool tf32, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y,
                     int64_t items, int64_t per, int64_t out, int64_t in)
{
    size_t ex = ditto_dtype_size(x->dtype), ey = ditto_dtype_size(y->dtype);
    if ((bias && bias->dtype != y->dtype) || !aligned(x->data, LT_ALIGN) || !aligned(w->data, LT_ALIGN) ||
        !aligned(y->data, LT_ALIGN) || (bias && !aligned(bias->data, LT_ALIGN)) || (size_t)(per * in) * ex % LT_ALIGN ||
        (size_t)(per * out) * ey % LT_ALIGN)
        return 0;
    DittoCuda *cu = ditto_cuda(be);
    LtKey k;
    memset(&k, 0, sizeof k);
    k.device = cu->device;
    k.per = (int)per;
    k.out = (int)out;
    k.in = (int)in;
    k.tab = x->dtype;
    k.tc = y->dtype;
    k.bias = bias != NULL;
    k.tf32 = tf32 && x->dtype == DITTO_F32;
    pthread_mutex_lock(&lt_lock);
    LtPlan *p = lt_plan(cu, &k);
    int rc = p && p->ok;
    void *ws = NULL;
    if (rc && p->ws > 0) {
        /* growing the workspace allocates and syncs: never inside a capture */
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        int wrc = 0;
        if (p->ws > cu->workspace_size && (cudaStreamIsCapturing(cu->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone))
            wrc = ditto_fail(&be->log, DITTO_ERR_BACKEND, "op linear: cuBLASLt workspace of %zu bytes first needed while capturing a graph"
                             " (run the step once before capturing)", p->ws);
        else
            wrc = ditto_cuda_workspace(be, p->ws, &ws);
        if (wrc < 0)
            rc = wrc;
    }
    if (rc == 1 && bias) {
        const void *bp = bias->data;
        if (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp) != CUBLAS_STATUS_SUCCESS)
            rc = 0;
    }
    const float one = 1.0f, zero = 0.0f;
    for (int64_t i = 0; i < items && rc == 1; i++) {
        const char *X = (const char *)x->data + (size_t)(i * per * in) * ex;
        char *Y = (char *)y->data + (size_t)(i * per * out) * ey;
        cublasStatus_t st = cublasLtMatmul((cublasLtHandle_t)cu->cublas, p->desc, &one, w->data, p->lw, X, p->lx, &zero, Y, p->ly, Y, p->ly,
                                           &p->algo, ws, p->ws, cu->stream);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED && !p->used) {
            p->ok = false;   /* refused at its first use: this shape takes the cublasGemmEx path from now on */
            rc = 0;
        } else if (st == CUBLAS_STATUS_SUCCESS) {
            p->used = true;
        } else {
            rc = ditto_cublas_fail(be, st, "cublasLtMatmul", __FILE__, __LINE__);
        }
    }
    pthread_mutex_unlock(&lt_lock);
    return rc;
}

static int linear_gemm(DittoBackend *be, bool tf32, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y,
                       int64_t items, int64_t per, int64_t out, int64_t in);

/*
 * y = x w^T + bias, then (options) GELU and the TF32 rounding of y in one
 * elementwise pass. On the cuBLASLt plan of the shape when it applies (bias
 * in the epilogue); else the bias is written into y first and cublasGemmEx
 * adds onto it (beta = 1): one rounding of the fp32 sum either way, also for
 * f16 outputs.
 *
 * Batch consistency: one GEMM per item of dim 0, each with the same
 * (M, N, K) whatever the batch size. A plan's algorithm is fixed per shape;
 * cublasGemmEx picks its kernel (tiling, split-K) from the problem shape,
 * and is deterministic for a given shape on one handle and stream. Which of
 * the two runs depends only on the shape, dtypes and the alignment of the
 * base pointers (every item is as aligned as the first), so an item's rows
 * get the same bits alone or in a batch. A single GEMM over all rows, or a
 * batched GEMM whose count is the batch size, would let the kernel choice
 * depend on the batch size.
 */
static int cuda_linear(DittoBackend *be, const DittoLinearParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias,
                       DittoTensor *y)
{
    DITTO_TRY(check_types(be, "linear", x->dtype, w->dtype, y->dtype));
    if (bias && !storage_ok(bias->dtype))
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op linear: bias dtype %s not supported by the cuda backend",
                          ditto_dtype_name(bias->dtype));
    int64_t out = w->shape[0], in = w->shape[1];
    int64_t rows = out ? ditto_tensor_numel(y) / out : 0;
    if (rows == 0 || out == 0)
        return 0;
    const int64_t items = x->ndim >= 2 ? x->shape[0] : 1, per = rows / items;
    if (!fits_int(per) || !fits_int(out) || !fits_int(in))
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "op linear: a dimension exceeds the cuBLAS int range");
    const bool tf32 = p->tf32 && x->dtype == DITTO_F32;
    DITTO_TRY(linear_gemm(be, tf32, x, w, bias, y, items, per, out, in));
    const bool r32 = p->tf32_out && y->dtype == DITTO_F32;
    if (p->gelu || r32) {
        int64_t n = rows * out;
        k_gelu_round<<<ditto_cuda_blocks(n, 256), 256, 0, ditto_cuda(be)->stream>>>(y->data, y->dtype == DITTO_F16, n, p->gelu, r32);
        DITTO_CUDA_LAUNCHED(be);
    }
    return 0;
}

/* The GEMM and bias of cuda_linear: the cuBLASLt plan, or the bias rows and cublasGemmEx. */
static int linear_gemm(DittoBackend *be, bool tf32, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y,
                       int64_t items, int64_t per, int64_t out, int64_t in)
{
    const int64_t rows = items * per;
    if (in > 0) {
        int rc = lt_linear(be, tf32, x, w, bias, y, items, per, out, in);
        if (rc != 0)
            return rc < 0 ? rc : 0;
    }
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
                          bias ? 1.0f : 0.0f, Y, 0, 1, x->dtype, y->dtype, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F));
    }
    return 0;
}

void ditto_cuda_init_gemm(DittoOps *ops)
{
    ops->matmul = cuda_matmul;
    ops->linear = cuda_linear;
}
