/*
 * CPU matmul and linear on OpenBLAS (row-major cblas_sgemm). OpenBLAS threads
 * each GEMM itself, so these loops stay on the calling thread.
 *
 * Linear with tf32 (DittoLinearParams): x and w are rounded to TF32 (10
 * explicit mantissa bits, nearest even) into scratch copies, then the same
 * float32 GEMM runs on them: the product a TF32 tensor core forms, summed in
 * float32. gelu runs the unary op's GELU on y, tf32_out rounds y last.
 */
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "core/log.h"
#include "core/mem.h"

static bool fits_int(int64_t v)
{
    return v >= 0 && v <= INT_MAX;
}

/* c (M,N) = alpha op(a) op(b) (+ c when accumulate); lda/ldb are the row lengths of a and b as stored. */
static void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *a, int64_t lda,
                  const float *b, int64_t ldb, bool accumulate, float *c, int64_t ldc)
{
    if (M == 0 || N == 0)
        return;
    if (K == 0) {
        /* sgemm with K == 0 is legal but leave nothing to chance: c = 0 (or unchanged) */
        if (!accumulate)
            for (int64_t i = 0; i < M; i++)
                memset(c + i * ldc, 0, sizeof(float) * (size_t)N);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, a, (int)lda, b, (int)ldb, accumulate ? 1.0f : 0.0f, c, (int)ldc);
}

static int cpu_matmul(DittoBackend *be, const DittoMatmulParams *p, const DittoTensor *a, const DittoTensor *b,
                      DittoTensor *c)
{
    int n = c->ndim;
    int64_t M = c->shape[n - 2], N = c->shape[n - 1];
    int64_t K = p->trans_a ? a->shape[n - 2] : a->shape[n - 1];
    int64_t lda = a->shape[n - 1], ldb = b->shape[n - 1];
    if (!fits_int(M) || !fits_int(N) || !fits_int(K) || !fits_int(lda) || !fits_int(ldb))
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "op matmul: a dimension exceeds the BLAS int range");
    float alpha = p->alpha != 0.0f ? p->alpha : 1.0f;
    const float *A = a->data, *B = b->data;
    float *C = c->data;
    int64_t batch = 1;
    bool a_full = true, b_bcast = true;
    for (int i = 0; i < n - 2; i++) {
        batch *= c->shape[i];
        a_full = a_full && a->shape[i] == c->shape[i];
        b_bcast = b_bcast && b->shape[i] == 1;
    }
    if (batch == 0)
        return 0;
    /* b shared by every batch and a stacked row-major: one GEMM over all rows */
    if (b_bcast && a_full && !p->trans_a && fits_int(batch * M)) {
        sgemm(false, p->trans_b, batch * M, N, K, alpha, A, lda, B, ldb, false, C, N);
        return 0;
    }
    int64_t a_mat = a->shape[n - 2] * a->shape[n - 1], b_mat = b->shape[n - 2] * b->shape[n - 1];
    for (int64_t bi = 0; bi < batch; bi++) {
        /* unravel bi over c's batch dims; a dim of size 1 in a or b contributes nothing */
        int64_t rem = bi, ao = 0, bo = 0, as = a_mat, bs = b_mat;
        for (int i = n - 3; i >= 0; i--) {
            int64_t idx = rem % c->shape[i];
            rem /= c->shape[i];
            if (a->shape[i] != 1)
                ao += idx * as;
            if (b->shape[i] != 1)
                bo += idx * bs;
            as *= a->shape[i];
            bs *= b->shape[i];
        }
        sgemm(p->trans_a, p->trans_b, M, N, K, alpha, A + ao, lda, B + bo, ldb, false, C + bi * M * N, N);
    }
    return 0;
}

/* dst[i] = the nearest TF32 value of src[i], for n values (dst may be src). */
static void tf32_copy(float *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = ditto_tf32_round(src[i]);
}

static int cpu_linear(DittoBackend *be, const DittoLinearParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias,
                      DittoTensor *y)
{
    int64_t out = w->shape[0], in = w->shape[1];
    int64_t rows = out ? ditto_tensor_numel(y) / out : 0;
    if (!fits_int(rows) || !fits_int(out) || !fits_int(in))
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "op linear: a dimension exceeds the BLAS int range");
    const float *X = x->data, *W = w->data;
    float *rounded = NULL;
    if (p->tf32 && rows > 0 && out > 0 && in > 0) {
        size_t nx = (size_t)(rows * in), nw = (size_t)(out * in);
        rounded = ditto_malloc(sizeof(float) * (nx + nw));
        if (!rounded)
            return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op linear: no memory for the TF32 operands (%zu floats)", nx + nw);
        tf32_copy(rounded, X, (int64_t)nx);
        tf32_copy(rounded + nx, W, (int64_t)nw);
        X = rounded;
        W = rounded + nx;
    }
    float *Y = y->data;
    if (bias) {
        /* y starts as the bias rows and the GEMM accumulates onto it */
        const float *B = bias->data;
        for (int64_t r = 0; r < rows; r++)
            memcpy(Y + r * out, B, sizeof(float) * (size_t)out);
    }
    /*
     * One GEMM per item of the leading (batch) dim: OpenBLAS rounds a row
     * differently depending on M (its tiling and thread split), and every
     * network must give an item the same result alone as in a batch.
     */
    int64_t items = x->ndim >= 2 ? x->shape[0] : 1, per = items ? rows / items : 0;
    for (int64_t i = 0; i < items; i++)
        sgemm(false, true, per, out, in, 1.0f, X + i * per * in, in, W, in, bias != NULL, Y + i * per * out, out);
    ditto_free(rounded);
    if (p->gelu) {
        /* the unary op's GELU: the same bits as linear, then the act op */
        const DittoUnaryParams gp = { DITTO_UNARY_GELU, 0.0f, 0.0f };
        DITTO_TRY(be->ops.unary(be, &gp, y, y));
    }
    if (p->tf32_out)
        tf32_copy(Y, Y, rows * out);
    return 0;
}

void ditto_cpu_init_gemm(DittoOps *ops)
{
    ops->matmul = cpu_matmul;
    ops->linear = cpu_linear;
}
