/*
 * matmul and linear against plain double loops.
 * Tolerances: fp32 products summed over K <= 300 terms of O(1) values give a
 * relative error of a few 1e-7 (rounding grows ~sqrt(K) * 2^-24 for random
 * signs); rel_l2 1e-6 and max_abs/max_ref 1e-5 leave margin for blocked
 * summation orders while still catching any wrong element or index.
 *
 * linear with tf32: the reference rounds x and w to TF32 (nearest even, as
 * the CPU oracle does) and sums in double, so the CPU backend must match at
 * the float32 tolerance above (a backend that skips the rounding is off by
 * ~2^-12 relative and fails). A GPU's tensor cores may truncate to TF32
 * instead (cuBLAS does not document its conversion; Hopper's wgmma reads the
 * float32 bits and ignores the low 13): each operand is then up to one TF32
 * ulp (<= 2^-10 relative) from the reference's, a product up to 2^-9, and
 * the truncation is biased towards zero, so the sums shrink by ~2^-10.5
 * relative on average: truncation against this reference measures rel_l2
 * 7.7e-4 and max_abs/max_ref 8e-4 on these shapes (K 13 to 1024). Other
 * backends get rel_l2 2e-3 (~2^-9, the largest relative change of one
 * product) and max_abs/max_ref 3e-3: below what a wrong element, index or a
 * missing bias or product term gives (1e-2 and up).
 *
 * Batch consistency (linear): item i of a batch must have the same bits as
 * the same rows run alone, on every path of the backend (CUDA: the cuBLASLt
 * plans on aligned shapes, cublasGemmEx otherwise), with and without tf32.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ditto/ditto_error.h"
#include "ops/ops.h"
#include "op_util.h"
#include "test_ops.h"

#define TOL_L2 1e-6
#define TOL_MAX 1e-5
#define TOL_TF32_L2 2e-3
#define TOL_TF32_MAX 3e-3

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

/* Nearest TF32 value of v (ties to even), written out independently of the CPU backend's. */
static double tf32_ref(float v)
{
    if (!isfinite(v))
        return v;
    int e;
    double m = frexp((double)v, &e);          /* v = m 2^e, 0.5 <= |m| < 1: 11 significant bits are m scaled by 2^11 */
    double r = m * 2048.0, f = floor(r), d = r - f;
    if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0.0))
        f += 1.0;
    return ldexp(f / 2048.0, e);
}

static void ref_linear(int64_t rows, int64_t in, int64_t out, const float *x, const float *w, const float *b, bool tf32, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t i = 0; i < in; i++)
                s += tf32 ? tf32_ref(x[r * in + i]) * tf32_ref(w[o * in + i]) : (double)x[r * in + i] * w[o * in + i];
            y[r * out + o] = s;
        }
    }
}

static void linear_case_tf(TestCtx *c, int nd, const int64_t *xsh, int64_t out, bool bias, bool tf32)
{
    int64_t ysh[DITTO_MAX_DIMS], in = xsh[nd - 1], rows = 1;
    for (int i = 0; i < nd; i++)
        ysh[i] = xsh[i];
    ysh[nd - 1] = out;
    for (int i = 0; i < nd - 1; i++)
        rows *= xsh[i];
    char name[160], s1[DITTO_SHAPE_STR_MAX];
    snprintf(name, sizeof name, "linear %s -> %lld%s%s", shape_name(s1, sizeof s1, nd, xsh), (long long)out, bias ? " bias" : "",
             tf32 ? " tf32" : "");
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
    double *ref = ref_alloc(rows * out);
    ref_linear(rows, in, out, tt_f32(x), tt_f32(w), b ? tt_f32(b) : NULL, tf32, ref);
    const DittoLinearParams lp = { .tf32 = tf32 };
    int rc = tf32 ? ditto_op_linear_ex(c->be, &lp, &x->dev, &w->dev, b ? &b->dev : NULL, &y->dev)
                  : ditto_op_linear(c->be, &x->dev, &w->dev, b ? &b->dev : NULL, &y->dev);
    bool exact = !tf32 || c->be->device == DITTO_DEVICE_CPU;
    op_check(c, name, rc, y, ref, exact ? TOL_L2 : TOL_TF32_L2, exact ? TOL_MAX : TOL_TF32_MAX);
    free(ref);
    tt_free(x);
    tt_free(w);
    tt_free(b);
    tt_free(y);
}

static void linear_case(TestCtx *c, int nd, const int64_t *xsh, int64_t out, bool bias)
{
    linear_case_tf(c, nd, xsh, out, bias, false);
}

/*
 * gelu and tf32_out: y = GELU(x w^T + b) in double from the operands (TF32
 * values when tf32: the inputs are rounded first, as a producer with tf32_out
 * makes them, so every backend forms the same products whether its tensor
 * cores round or truncate, and must match at the float32 tolerances), then
 * rounded to TF32 when tf32_out. GELU adds a few float ulps: the float32
 * tolerances hold. With tf32_out the output itself must be TF32 values: checked bit by
 * bit (low 13 mantissa bits zero) besides the tolerance against the rounded
 * reference (two roundings apart at most: one TF32 ulp, 2^-10 relative).
 */
static void linear_opts_case(TestCtx *c, const int64_t *xsh, int64_t out, bool tf32, bool gelu, bool tf32_out)
{
    char name[160], s1[DITTO_SHAPE_STR_MAX];
    snprintf(name, sizeof name, "linear opts %s -> %lld bias%s%s%s", shape_name(s1, sizeof s1, 3, xsh), (long long)out, tf32 ? " tf32" : "",
             gelu ? " gelu" : "", tf32_out ? " tf32_out" : "");
    if (!test_selected(c, name))
        return;
    const int64_t in = xsh[2], rows = xsh[0] * xsh[1];
    TT *x = tt_new(c, DITTO_F32, 3, xsh), *w = tt_new(c, DITTO_F32, 2, (int64_t[]){ out, in }), *b = tt_new(c, DITTO_F32, 1, &out);
    TT *y = tt_new(c, DITTO_F32, 3, (int64_t[]){ xsh[0], xsh[1], out });
    tt_fill_uniform(x, -1, 1);
    tt_fill_uniform(w, -1, 1);
    tt_fill_uniform(b, -1, 1);
    if (tf32) {
        for (int64_t i = 0; i < rows * in; i++)
            tt_f32(x)[i] = ditto_tf32_round(tt_f32(x)[i]);
        for (int64_t i = 0; i < out * in; i++)
            tt_f32(w)[i] = ditto_tf32_round(tt_f32(w)[i]);
    }
    tt_to_dev(x);
    tt_to_dev(w);
    tt_to_dev(b);
    tt_to_dev(y);
    double *ref = ref_alloc(rows * out);
    ref_linear(rows, in, out, tt_f32(x), tt_f32(w), tt_f32(b), false, ref);
    for (int64_t i = 0; i < rows * out; i++) {
        if (gelu)
            ref[i] = 0.5 * ref[i] * (1.0 + erf(ref[i] / sqrt(2.0)));
        if (tf32_out)
            ref[i] = ditto_tf32_round((float)ref[i]);
    }
    const DittoLinearParams lp = { .tf32 = tf32, .gelu = gelu, .tf32_out = tf32_out };
    int rc = ditto_op_linear_ex(c->be, &lp, &x->dev, &w->dev, &b->dev, &y->dev);
    /*
     * Tensor cores (tf32 on a GPU) add the exact products in float32 but do
     * not round every addition to nearest, and a K of 512 is past the K <= 300
     * the float32 tolerance was sized for: a sum's error grows to about
     * sqrt(K) 2^-23, 2.7e-6 at K = 512 (measured on the H200: 1.2e-6). Such
     * backends get rel_l2 4e-6; the CPU keeps 1e-6. A wrong element, index or
     * missing term is still off by 1e-2 and more.
     */
    const bool tc = tf32 && c->be->device != DITTO_DEVICE_CPU;
    double tol = tf32_out ? 2e-3 : tc ? 4e-6 : TOL_L2, tol_max = tf32_out ? 2e-3 : TOL_MAX;
    if (op_check(c, name, rc, y, ref, tol, tol_max) && tf32_out && !test_fp16(c)) {
        int64_t bad = 0;
        for (int64_t i = 0; i < rows * out; i++) {
            uint32_t u;
            memcpy(&u, &tt_f32(y)[i], sizeof u);
            bad += (u & 0x1fffu) != 0;
        }
        char n2[200];
        snprintf(n2, sizeof n2, "%s: TF32 values", name);
        test_report(c, n2, bad == 0, "%lld of %lld outputs with low mantissa bits", (long long)bad, (long long)(rows * out));
    }
    free(ref);
    tt_free(x);
    tt_free(w);
    tt_free(b);
    tt_free(y);
}

/*
 * Float16 operands, float32 output (the LMDM's TF32 operands held as
 * float16 off the CPU): x and w float16 on the device, bias and y float32;
 * the reference sums the exact products of the float16 values in double.
 * Tensor cores add exact products in float32: the tf32 tolerance of
 * linear_opts_case (rel_l2 4e-6). Devices only (the CPU stores float32).
 */
static void linear_f16_operands_case(TestCtx *c, const int64_t *xsh, int64_t out)
{
    char name[160], s1[DITTO_SHAPE_STR_MAX];
    snprintf(name, sizeof name, "linear f16 operands %s -> %lld bias f32", shape_name(s1, sizeof s1, 3, xsh), (long long)out);
    if (c->be->device == DITTO_DEVICE_CPU || !test_selected(c, name))
        return;
    const int64_t in = xsh[2], rows = xsh[0] * xsh[1];
    TT *x = tt_new_f16dev(c, 3, xsh), *w = tt_new_f16dev(c, 2, (int64_t[]){ out, in }), *b = tt_new_f32dev(c, 1, &out);
    TT *y = tt_new_f32dev(c, 3, (int64_t[]){ xsh[0], xsh[1], out });
    tt_fill_uniform(x, -1, 1);
    tt_fill_uniform(w, -1, 1);
    tt_fill_uniform(b, -1, 1);
    tt_to_dev(x);   /* rounds the host values to float16 too */
    tt_to_dev(w);
    tt_to_dev(b);
    tt_to_dev(y);
    double *ref = ref_alloc(rows * out);
    ref_linear(rows, in, out, tt_f32(x), tt_f32(w), tt_f32(b), false, ref);
    const DittoLinearParams lp = { .tf32 = true };
    int rc = ditto_op_linear_ex(c->be, &lp, &x->dev, &w->dev, &b->dev, &y->dev);
    op_check(c, name, rc, y, ref, 4e-6, TOL_MAX);
    free(ref);
    tt_free(x);
    tt_free(w);
    tt_free(b);
    tt_free(y);
}

static bool same_host_bits(const void *a, const void *b, size_t n)
{
    return !memcmp(a, b, n);
}

/*
 * Batch consistency: x (B, R, in) in one call vs each item copied into its
 * own (1, R, in) tensor and run alone: every item's rows bit for bit.
 */
static void linear_batch_case(TestCtx *c, int64_t B, int64_t R, int64_t in, int64_t out, bool tf32)
{
    char name[160];
    snprintf(name, sizeof name, "linear batch consistency (%lld,%lld,%lld) -> %lld%s", (long long)B, (long long)R, (long long)in,
             (long long)out, tf32 ? " tf32" : "");
    if (!test_selected(c, name))
        return;
    TT *x = tt_new(c, DITTO_F32, 3, (int64_t[]){ B, R, in }), *w = tt_new(c, DITTO_F32, 2, (int64_t[]){ out, in });
    TT *b = tt_new(c, DITTO_F32, 1, &out), *y = tt_new(c, DITTO_F32, 3, (int64_t[]){ B, R, out });
    TT *x1 = tt_new(c, DITTO_F32, 3, (int64_t[]){ 1, R, in }), *y1 = tt_new(c, DITTO_F32, 3, (int64_t[]){ 1, R, out });
    tt_fill_uniform(x, -1, 1);
    tt_fill_uniform(w, -1, 1);
    tt_fill_uniform(b, -1, 1);
    tt_to_dev(x);
    tt_to_dev(w);
    tt_to_dev(b);
    tt_to_dev(y);
    const DittoLinearParams lp = { .tf32 = tf32 };
    int rc = ditto_op_linear_ex(c->be, &lp, &x->dev, &w->dev, &b->dev, &y->dev);
    bool ok = rc >= 0 && tt_to_host(y) >= 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < B && ok; i++) {
        memcpy(tt_f32(x1), tt_f32(x) + i * R * in, sizeof(float) * (size_t)(R * in));
        tt_to_dev(x1);
        tt_to_dev(y1);
        rc = ditto_op_linear_ex(c->be, &lp, &x1->dev, &w->dev, &b->dev, &y1->dev);
        ok = rc >= 0 && tt_to_host(y1) >= 0;
        if (ok && !same_host_bits(tt_f32(y1), tt_f32(y) + i * R * out, sizeof(float) * (size_t)(R * out)))
            bad = i;
    }
    if (op_ok(c, name, rc))
        test_report(c, name, ok && bad < 0, bad < 0 ? "every item alone = in the batch" : "item %lld differs alone", (long long)bad);
    tt_free(x);
    tt_free(w);
    tt_free(b);
    tt_free(y);
    tt_free(x1);
    tt_free(y1);
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
        /* LMDM decoder linears: window-major (B, 2 passes x 80 frames, D) items */
        linear_case(c, 3, (int64_t[]){ 2, 160, 512 }, 1024, bias);
        linear_case(c, 3, (int64_t[]){ 1, 160, 1024 }, 512, bias);
        /* TF32 products: aligned shapes (CUDA: cuBLASLt plans) and odd ones (cublasGemmEx) */
        linear_case_tf(c, 2, (int64_t[]){ 7, 13 }, 5, bias, true);
        linear_case_tf(c, 3, (int64_t[]){ 3, 11, 13 }, 7, bias, true);
        linear_case_tf(c, 3, (int64_t[]){ 1, 77, 96 }, 384, bias, true);
        linear_case_tf(c, 3, (int64_t[]){ 2, 160, 512 }, 1024, bias, true);
        linear_case_tf(c, 3, (int64_t[]){ 2, 160, 512 }, 265, bias, true);
        linear_case_tf(c, 3, (int64_t[]){ 1, 160, 1024 }, 512, bias, true);
        /* rows, outputs and K that fill no tile of 32 (K % 4 == 0: 16-byte rows) */
        linear_case_tf(c, 3, (int64_t[]){ 2, 25, 36 }, 70, bias, true);
    }
    /* options: GELU after the bias, TF32 outputs (aligned shape: the cuBLASLt plan; odd: cublasGemmEx) */
    linear_opts_case(c, (int64_t[]){ 2, 160, 512 }, 1024, false, true, false);
    /* TF32 operands (as the LMDM feeds its tf32 linears): every backend at the float32 tolerance */
    linear_opts_case(c, (int64_t[]){ 2, 160, 512 }, 1024, true, false, false);
    linear_opts_case(c, (int64_t[]){ 1, 160, 1024 }, 512, true, true, false);
    /* float16 operands, float32 output: the LMDM step's shapes (QK, V / out_proj, linear1, linear2) and an odd one */
    linear_f16_operands_case(c, (int64_t[]){ 1, 160, 512 }, 1024);
    linear_f16_operands_case(c, (int64_t[]){ 1, 160, 512 }, 512);
    linear_f16_operands_case(c, (int64_t[]){ 2, 160, 1024 }, 512);
    linear_f16_operands_case(c, (int64_t[]){ 2, 25, 36 }, 70);
    linear_opts_case(c, (int64_t[]){ 3, 7, 13 }, 5, true, false, false);
    linear_opts_case(c, (int64_t[]){ 2, 160, 512 }, 1024, true, true, true);
    linear_opts_case(c, (int64_t[]){ 1, 160, 1024 }, 512, true, false, true);
    linear_opts_case(c, (int64_t[]){ 3, 7, 13 }, 5, true, true, true);
    linear_opts_case(c, (int64_t[]){ 3, 7, 13 }, 5, false, false, true);
    linear_opts_case(c, (int64_t[]){ 2, 25, 36 }, 70, true, true, true);
    for (int tf32 = 0; tf32 < 2; tf32++) {
        linear_batch_case(c, 3, 160, 512, 512, tf32);
        linear_batch_case(c, 3, 7, 13, 5, tf32);
        linear_batch_case(c, 4, 2, 512, 1024, tf32);
        linear_batch_case(c, 3, 33, 36, 70, tf32);
    }
    linear_negative(c);
}

void test_ops_gemm(TestCtx *c)
{
    test_matmul(c);
    test_linear(c);
}
