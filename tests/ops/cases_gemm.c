/*
 * matmul and linear against plain double loops.
 * Tolerances: fp32 products summed over K <= 300 terms of O(1) values give a
 * relative error of a few 1e-7 (rounding grows ~sqrt(K) * 2^-24 for random
 * signs); rel_l2 1e-6 and max_abs/max_ref 1e-5 leave margin for blocked
 * summation orders while still catching any wrong element or index.
 */
#include <stdlib.h>
#include <string.h>

#include "ditto/ditto_error.h"
#include "ops/ops.h"
#include "op_util.h"
#include "test_ops.h"

#define TOL_L2 1e-6
#define TOL_MAX 1e-5

static char *shape_name(char *buf, size_t n, int nd, const int64_t *s)
{
    return ditto_shape_str(s, nd, buf, n);
}

/* Offset of batch index bi of c in a tensor whose batch dims broadcast to c's. */
static int64_t bcast_offset(int nd, const int64_t *tsh, const int64_t *csh, int64_t bi)
{
    int64_t off = 0, mat = tsh[nd - 2] * tsh[nd - 1], stride = mat;
    for (int i = nd - 3; i >= 0; i--) {
        int64_t idx = bi % csh[i];
        bi /= csh[i];
        if (tsh[i] != 1)
            off += idx * stride;
        stride *= tsh[i];
    }
    return off;
}

static void ref_matmul(int nd, const int64_t *ash, const int64_t *bsh, const int64_t *csh, bool ta, bool tb, float alpha,
                       const float *a, const float *b, double *c)
{
    int64_t M = csh[nd - 2], N = csh[nd - 1], K = ta ? ash[nd - 2] : ash[nd - 1];
    int64_t batch = 1;
    for (int i = 0; i < nd - 2; i++)
        batch *= csh[i];
    double al = alpha != 0.0f ? alpha : 1.0;
    for (int64_t bi = 0; bi < batch; bi++) {
        const float *A = a + bcast_offset(nd, ash, csh, bi), *B = b + bcast_offset(nd, bsh, csh, bi);
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = ta ? A[k * M + i] : A[i * K + k];
                    double bv = tb ? B[j * K + k] : B[k * N + j];
                    s += av * bv;
                }
                c[(bi * M + i) * N + j] = al * s;
            }
        }
    }
}

/* a, b given as stored (already transposed where ta/tb); c's shape follows. */
static void matmul_case(TestCtx *c, int nd, const int64_t *ash, const int64_t *bsh, bool ta, bool tb, float alpha)
{
    int64_t csh[DITTO_MAX_DIMS];
    for (int i = 0; i < nd - 2; i++)
        csh[i] = ash[i] > bsh[i] ? ash[i] : bsh[i];
    csh[nd - 2] = ta ? ash[nd - 1] : ash[nd - 2];
    csh[nd - 1] = tb ? bsh[nd - 2] : bsh[nd - 1];
    char name[160], s1[DITTO_SHAPE_STR_MAX], s2[DITTO_SHAPE_STR_MAX];
    snprintf(name, sizeof name, "matmul %s%s x %s%s alpha %g", shape_name(s1, sizeof s1, nd, ash), ta ? "^T" : "",
             shape_name(s2, sizeof s2, nd, bsh), tb ? "^T" : "", alpha);
    if (!test_selected(c, name))
        return;
    TT *a = tt_new(c, DITTO_F32, nd, ash), *b = tt_new(c, DITTO_F32, nd, bsh), *y = tt_new(c, DITTO_F32, nd, csh);
    tt_fill_uniform(a, -1, 1);
    tt_fill_uniform(b, -1, 1);
    tt_to_dev(a);
    tt_to_dev(b);
    tt_to_dev(y);
    size_t n = (size_t)ditto_tensor_numel(&y->host);
    double *ref = malloc(sizeof(double) * (n ? n : 1));
    ref_matmul(nd, ash, bsh, csh, ta, tb, alpha, tt_f32(a), tt_f32(b), ref);
    DittoMatmulParams p = { ta, tb, alpha };
    int rc = ditto_op_matmul(c->be, &p, &a->dev, &b->dev, &y->dev);
    op_check(c, name, rc, y, ref, TOL_L2, TOL_MAX);
    free(ref);
    tt_free(a);
    tt_free(b);
    tt_free(y);
}

/* Shapes of op(a) (M,K) and op(b) (K,N) with batch dims; stores a and b transposed when asked. */
static void matmul_mkn(TestCtx *c, int nd, const int64_t *abatch, const int64_t *bbatch, int64_t M, int64_t K, int64_t N,
                       bool ta, bool tb, float alpha)
{
    int64_t ash[DITTO_MAX_DIMS], bsh[DITTO_MAX_DIMS];
    for (int i = 0; i < nd - 2; i++) {
        ash[i] = abatch[i];
        bsh[i] = bbatch[i];
    }
    ash[nd - 2] = ta ? K : M;
    ash[nd - 1] = ta ? M : K;
    bsh[nd - 2] = tb ? N : K;
    bsh[nd - 1] = tb ? K : N;
    matmul_case(c, nd, ash, bsh, ta, tb, alpha);
}

static void matmul_negative(TestCtx *c)
{
    const char *name = "matmul negative";
    if (!test_selected(c, name))
        return;
    TT *a = tt_new(c, DITTO_F32, 3, (int64_t[]){ 3, 7, 13 });
    TT *b = tt_new(c, DITTO_F32, 3, (int64_t[]){ 3, 12, 5 });
    TT *b2 = tt_new(c, DITTO_F32, 3, (int64_t[]){ 2, 13, 5 });
    TT *y = tt_new(c, DITTO_F32, 3, (int64_t[]){ 3, 7, 5 });
    TT *y2 = tt_new(c, DITTO_F32, 3, (int64_t[]){ 3, 7, 6 });
    TT *y2d = tt_new(c, DITTO_F32, 2, (int64_t[]){ 7, 5 });
    DittoMatmulParams p = { false, false, 0 };
    expect_rc(c, "matmul negative: inner dims differ", ditto_op_matmul(c->be, &p, &a->dev, &b->dev, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "matmul negative: batch 2 vs 3", ditto_op_matmul(c->be, &p, &a->dev, &b2->dev, &y->dev), DITTO_ERR_SHAPE);
    TT *bok = tt_new(c, DITTO_F32, 3, (int64_t[]){ 3, 13, 5 });
    expect_rc(c, "matmul negative: wrong c", ditto_op_matmul(c->be, &p, &a->dev, &bok->dev, &y2->dev), DITTO_ERR_SHAPE);
    DittoMatmulParams pt = { true, false, 0 };
    expect_rc(c, "matmul negative: trans_a makes K 7", ditto_op_matmul(c->be, &pt, &a->dev, &bok->dev, &y->dev), DITTO_ERR_SHAPE);
    tt_free(bok);
    expect_rc(c, "matmul negative: rank", ditto_op_matmul(c->be, &p, &a->dev, &b->dev, &y2d->dev), DITTO_ERR_SHAPE);
    tt_free(a);
    tt_free(b);
    tt_free(b2);
    tt_free(y);
    tt_free(y2);
    tt_free(y2d);
}

static void test_matmul(TestCtx *c)
{
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t >> 1;
        matmul_mkn(c, 2, NULL, NULL, 7, 13, 5, ta, tb, 0);
        matmul_mkn(c, 2, NULL, NULL, 7, 13, 5, ta, tb, 0.5f);
        matmul_mkn(c, 3, (int64_t[]){ 1 }, (int64_t[]){ 1 }, 1, 9, 11, ta, tb, 0);
        matmul_mkn(c, 3, (int64_t[]){ 3 }, (int64_t[]){ 3 }, 7, 13, 5, ta, tb, -2.0f);
        /* broadcasting of b (folds into one GEMM when a is not transposed) and of a */
        matmul_mkn(c, 3, (int64_t[]){ 3 }, (int64_t[]){ 1 }, 7, 13, 5, ta, tb, 0);
        matmul_mkn(c, 3, (int64_t[]){ 1 }, (int64_t[]){ 3 }, 7, 13, 5, ta, tb, 0);
        /* two batch dims, each broadcast from a different side */
        matmul_mkn(c, 4, (int64_t[]){ 2, 1 }, (int64_t[]){ 1, 3 }, 5, 9, 6, ta, tb, 0);
        matmul_mkn(c, 4, (int64_t[]){ 2, 3 }, (int64_t[]){ 2, 1 }, 5, 9, 6, ta, tb, 1.5f);
        /* large enough for OpenBLAS's blocked kernels and threading */
        matmul_mkn(c, 2, NULL, NULL, 67, 300, 129, ta, tb, 0);
    }
    /* K = 1 and N = 1 edges */
    matmul_mkn(c, 2, NULL, NULL, 7, 1, 5, false, false, 0);
    matmul_mkn(c, 3, (int64_t[]){ 3 }, (int64_t[]){ 1 }, 7, 13, 1, false, true, 0);
    /* attention-like: (B*H, L, D) x (B*H, L, D)^T */
    matmul_mkn(c, 4, (int64_t[]){ 3, 4 }, (int64_t[]){ 3, 4 }, 17, 32, 17, false, true, 0.125f);
    matmul_negative(c);
}

static void ref_linear(int64_t rows, int64_t in, int64_t out, const float *x, const float *w, const float *b, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t i = 0; i < in; i++)
                s += (double)x[r * in + i] * w[o * in + i];
            y[r * out + o] = s;
        }
    }
}

static void linear_case(TestCtx *c, int nd, const int64_t *xsh, int64_t out, bool bias)
{
    int64_t ysh[DITTO_MAX_DIMS], in = xsh[nd - 1], rows = 1;
    for (int i = 0; i < nd; i++)
        ysh[i] = xsh[i];
    ysh[nd - 1] = out;
    for (int i = 0; i < nd - 1; i++)
        rows *= xsh[i];
    char name[160], s1[DITTO_SHAPE_STR_MAX];
    snprintf(name, sizeof name, "linear %s -> %lld%s", shape_name(s1, sizeof s1, nd, xsh), (long long)out, bias ? " bias" : "");
    if (!test_selected(c, name))
        return;
    TT *x = tt_new(c, DITTO_F32, nd, xsh), *w = tt_new(c, DITTO_F32, 2, (int64_t[]){ out, in });
    TT *b = bias ? tt_new(c, DITTO_F32, 1, &out) : NULL, *y = tt_new(c, DITTO_F32, nd, ysh);
    tt_fill_uniform(x, -1, 1);
    tt_fill_uniform(w, -1, 1);
    tt_to_dev(x);
    tt_to_dev(w);
    if (b) {
        tt_fill_uniform(b, -1, 1);
        tt_to_dev(b);
    }
    tt_to_dev(y);
    double *ref = malloc(sizeof(double) * (size_t)(rows * out));
    ref_linear(rows, in, out, tt_f32(x), tt_f32(w), b ? tt_f32(b) : NULL, ref);
    int rc = ditto_op_linear(c->be, &x->dev, &w->dev, b ? &b->dev : NULL, &y->dev);
    op_check(c, name, rc, y, ref, TOL_L2, TOL_MAX);
    free(ref);
    tt_free(x);
    tt_free(w);
    tt_free(b);
    tt_free(y);
}

static void linear_negative(TestCtx *c)
{
    if (!test_selected(c, "linear negative shapes"))
        return;
    TT *x = tt_new(c, DITTO_F32, 2, (int64_t[]){ 7, 13 });
    TT *w = tt_new(c, DITTO_F32, 2, (int64_t[]){ 5, 12 });
    TT *w2 = tt_new(c, DITTO_F32, 2, (int64_t[]){ 5, 13 });
    TT *b = tt_new(c, DITTO_F32, 1, (int64_t[]){ 6 });
    TT *y = tt_new(c, DITTO_F32, 2, (int64_t[]){ 7, 5 });
    TT *y2 = tt_new(c, DITTO_F32, 2, (int64_t[]){ 6, 5 });
    expect_rc(c, "linear negative shapes: in differs", ditto_op_linear(c->be, &x->dev, &w->dev, NULL, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "linear negative shapes: bias size", ditto_op_linear(c->be, &x->dev, &w2->dev, &b->dev, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "linear negative shapes: rows", ditto_op_linear(c->be, &x->dev, &w2->dev, NULL, &y2->dev), DITTO_ERR_SHAPE);
    tt_free(x);
    tt_free(w);
    tt_free(w2);
    tt_free(b);
    tt_free(y);
    tt_free(y2);
}

static void test_linear(TestCtx *c)
{
    for (int bias = 0; bias < 2; bias++) {
        linear_case(c, 1, (int64_t[]){ 13 }, 5, bias);
        linear_case(c, 2, (int64_t[]){ 7, 13 }, 5, bias);
        linear_case(c, 2, (int64_t[]){ 1, 13 }, 9, bias);
        linear_case(c, 3, (int64_t[]){ 3, 11, 13 }, 7, bias);
        linear_case(c, 4, (int64_t[]){ 3, 2, 5, 31 }, 17, bias);
        /* ConvNeXt pwconv-like (rows, 96) -> 384 */
        linear_case(c, 3, (int64_t[]){ 1, 77, 96 }, 384, bias);
    }
    linear_negative(c);
}

void test_ops_gemm(TestCtx *c)
{
    test_matmul(c);
    test_linear(c);
}
