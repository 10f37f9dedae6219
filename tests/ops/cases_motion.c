/*
 * The dense motion network's fused keypoint fields: motion_input (Gaussian
 * heatmap differences and the feature volume sampled at each sparse motion,
 * the hourglass input) and motion_deform (softmax mask over the K+1 motions
 * and the deformation sum_m mask_m S_m).
 *
 * References are double loops over the definitions in ops/ops.h: keypoint 0
 * is zero in both sets, t = G - kp_d, u = G - kp_s, S = t + kp_s,
 * heat = exp(a |t|^2) - exp(a |u|^2) with a = -0.5 / variance, PyTorch's
 * trilinear grid_sample (zeros padding, align_corners false) at S, and a
 * max-shifted softmax. Keypoints are uniform in [-1, 1], so many S fall
 * partly or wholly outside the volume.
 *
 * Tolerances (rel_l2, max_abs / max_ref):
 *   y: grid_sample's 5e-6, 2e-5. Where a tap can be inside (|S| <= 1.1), the
 *     two float roundings of S move it by <= 2.4e-7, i.e. <= 2e-6 px at a
 *     size of 16, times a neighbour difference up to 2 of features in
 *     [-1, 1]. The heat channels are within ~1e-7 absolute (the exponent
 *     a |t|^2 carries a few 2^-24 relative, times max x e^-x); the features'
 *     max |ref| ~1 is their absolute floor.
 *   motion: two float roundings of O(1) values, 1e-6, 1e-6.
 *   mask: softmax's 1e-6, 1e-6.
 *   deformation: float exp, the mask's rounding, S's two and the product's
 *     one, summed in double: a chain of roundings of O(1) operands as film's,
 *     2e-6, 4e-6.
 * fp16 storage mode: feat, logits and y are float16 on the device (y at the
 * fp16 floor; the reference reads the rounded inputs); grid, keypoints,
 * motion, deformation and mask are float32 by contract and held to the
 * float32 tolerances.
 *
 * The contract is stronger than the tolerances: the ops are the float32
 * operations of the unfused chain the warp network ran before the fusion.
 * The "seq_exact" cases run that chain of ops (fill, concat, binary, reduce,
 * unary, act, grid_sample, softmax) on the backend under test and compare:
 * on the CPU bit for bit (0 differing elements in y, motion, mask and
 * deformation), elsewhere at the float32 tolerances above, reporting the
 * count of differing elements and the largest difference. They run with
 * fp16 storage mode paused (the chain would round its intermediates to
 * float16).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ditto/ditto_error.h"
#include "ops/ops.h"
#include "op_util.h"
#include "test_ops.h"

typedef struct MotionCase {
    int64_t N, K, dhw[3];
    TT *grid;            /* (D,H,W,3) */
    TT *kp_d, *kp_s;     /* (N,K,3) */
} MotionCase;

/* make_coordinate_grid (ditto_warp_coordinate_grid): g = (x, y, z), each 2 i / (n - 1) - 1. */
static void coord_grid(float *g, const int64_t *dhw)
{
    for (int64_t z = 0; z < dhw[0]; z++)
        for (int64_t y = 0; y < dhw[1]; y++)
            for (int64_t x = 0; x < dhw[2]; x++, g += 3) {
                g[0] = (float)(2.0 * ((double)x / (double)(dhw[2] - 1)) - 1.0);
                g[1] = (float)(2.0 * ((double)y / (double)(dhw[1] - 1)) - 1.0);
                g[2] = (float)(2.0 * ((double)z / (double)(dhw[0] - 1)) - 1.0);
            }
}

/* grid: the coordinate grid (every size >= 2) or uniform in [-1.2, 1.2]; keypoints uniform in [-1, 1]. All float32 on the device. */
static void motion_setup(TestCtx *c, MotionCase *k, int64_t N, int64_t K, const int64_t *dhw, bool coord)
{
    k->N = N;
    k->K = K;
    for (int i = 0; i < 3; i++)
        k->dhw[i] = dhw[i];
    k->grid = tt_new_f32dev(c, 4, (const int64_t[]){ dhw[0], dhw[1], dhw[2], 3 });
    if (coord)
        coord_grid(tt_f32(k->grid), dhw);
    else
        tt_fill_uniform(k->grid, -1.2f, 1.2f);
    tt_to_dev(k->grid);
    k->kp_d = tt_new_f32dev(c, 3, (const int64_t[]){ N, K, 3 });
    k->kp_s = tt_new_f32dev(c, 3, (const int64_t[]){ N, K, 3 });
    tt_fill_uniform(k->kp_d, -1, 1);
    tt_fill_uniform(k->kp_s, -1, 1);
    tt_to_dev(k->kp_d);
    tt_to_dev(k->kp_s);
}

static void motion_free(MotionCase *k)
{
    tt_free(k->grid);
    tt_free(k->kp_d);
    tt_free(k->kp_s);
}

/* Motion m (0: the zero keypoint) at grid point p of item n: S, |t|^2, |u|^2 in double. */
static void ref_motion(MotionCase *k, int64_t n, int64_t m, int64_t p, double *S, double *t2, double *u2)
{
    const float *g = tt_f32(k->grid) + p * 3;
    const float *kd = m ? tt_f32(k->kp_d) + (n * k->K + m - 1) * 3 : NULL, *ks = m ? tt_f32(k->kp_s) + (n * k->K + m - 1) * 3 : NULL;
    *t2 = *u2 = 0;
    for (int i = 0; i < 3; i++) {
        double t = (double)g[i] - (kd ? kd[i] : 0.0), u = (double)g[i] - (ks ? ks[i] : 0.0);
        S[i] = t + (ks ? ks[i] : 0.0);
        *t2 += t * t;
        *u2 += u * u;
    }
}

/* grid_sample of plane f (D,H,W) at s = (x, y, z): trilinear, zeros padding, align_corners false; s[i] addresses dim 2 - i. */
static double ref_sample(const float *f, const int64_t *dhw, const double *s)
{
    double fr[3];
    int64_t b[3];
    for (int i = 0; i < 3; i++) {
        double pos = ((s[i] + 1) * (double)dhw[2 - i] - 1) / 2;
        b[i] = (int64_t)floor(pos);
        fr[i] = pos - (double)b[i];
    }
    double acc = 0;
    for (int corner = 0; corner < 8; corner++) {
        double w = 1;
        int64_t q[3];
        bool inside = true;
        for (int i = 0; i < 3; i++) {
            int bit = corner >> i & 1;
            q[i] = b[i] + bit;
            w *= bit ? fr[i] : 1 - fr[i];
            inside = inside && q[i] >= 0 && q[i] < dhw[2 - i];
        }
        if (inside)
            acc += w * f[(q[2] * dhw[1] + q[1]) * dhw[2] + q[0]];
    }
    return acc;
}

/* Check a float32-by-contract output at float32 tolerances, also in fp16 storage mode. */
static bool check_f32_out(TestCtx *c, const char *name, int rc, TT *t, const double *ref, double tol, double tol_max)
{
    test_fp16_suspend(c);
    bool ok = op_check(c, name, rc, t, ref, tol, tol_max);
    test_fp16_resume(c);
    return ok;
}

/* ---- motion_input ---- */

/*
 * last: y is the channels-last view of channels 0.. of a zeroed (N,D,H,W,
 * (K+1)(C+1)+3) tensor (the warp's hourglass input), checked whole: the
 * three channels past y stay 0.
 */
static void input_case_y(TestCtx *c, int64_t N, int64_t K, int64_t C, const int64_t *dhw, bool coord, double variance, bool want_motion,
                         bool last)
{
    char name[160];
    snprintf(name, sizeof name, "motion_input n%lld k%lld c%lld (%lld,%lld,%lld) %s grid var %g%s%s", (long long)N, (long long)K,
             (long long)C, (long long)dhw[0], (long long)dhw[1], (long long)dhw[2], coord ? "coord" : "random", variance,
             want_motion ? "" : " no motion", last ? " y channels-last" : "");
    if (!test_selected(c, name))
        return;
    MotionCase k;
    motion_setup(c, &k, N, K, dhw, coord);
    const int64_t M = K + 1, P = dhw[0] * dhw[1] * dhw[2];
    TT *feat = new_rand(c, 5, (const int64_t[]){ N, C, dhw[0], dhw[1], dhw[2] }, -1, 1);
    const int64_t MC = M * (C + 1), CL = MC + 3;
    TT *y = new_out(c, DITTO_F32, 5, (const int64_t[]){ N, MC, dhw[0], dhw[1], dhw[2] });
    TT *yl = last ? new_out(c, DITTO_F32, 5, (const int64_t[]){ N, dhw[0], dhw[1], dhw[2], CL }) : NULL;
    View yv = view_of(y);
    if (yl) {
        yv = view_permute(view_slice(view_of(yl), 4, 0, MC, 1), (const int[]){ 0, 4, 1, 2, 3 });
        if (ditto_op_fill(c->be, 0.0f, &yl->dev) < 0)
            test_report(c, name, false, "cannot zero the channels-last tensor");
    }
    TT *motion = NULL;
    if (want_motion) {
        motion = tt_new_f32dev(c, 6, (const int64_t[]){ N, M, dhw[0], dhw[1], dhw[2], 3 });
        tt_to_dev(motion);
    }
    const DittoMotionParams p = { variance };
    int rc = ditto_op_motion_input(c->be, &p, &k.grid->dev, &k.kp_d->dev, &k.kp_s->dev, &feat->dev, &yv.d, motion ? &motion->dev : NULL);

    double *yref = ref_new(y), *mref = motion ? ref_new(motion) : NULL;
    const double a = -0.5 / variance;
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t q = 0; q < P; q++) {
                double S[3], t2, u2;
                ref_motion(&k, n, m, q, S, &t2, &u2);
                double *yo = yref + (n * M * (C + 1) + m * (C + 1)) * P + q;
                yo[0] = exp(a * t2) - exp(a * u2);
                for (int64_t j = 0; j < C; j++)
                    yo[(1 + j) * P] = ref_sample(tt_f32(feat) + (n * C + j) * P, dhw, S);
                if (mref)
                    for (int i = 0; i < 3; i++)
                        mref[((n * M + m) * P + q) * 3 + i] = S[i];
            }
    char label[200];
    snprintf(label, sizeof label, "%s.y", name);
    if (yl) {   /* the reference in yl's layout, 0 past y's channels */
        double *lref = ref_new(yl);
        for (int64_t i = 0; i < N * P * CL; i++)
            lref[i] = 0.0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t ch = 0; ch < MC; ch++)
                for (int64_t q = 0; q < P; q++)
                    lref[(n * P + q) * CL + ch] = yref[(n * MC + ch) * P + q];
        op_check(c, label, rc, yl, lref, 5e-6, 2e-5);
        free(lref);
    } else {
        op_check(c, label, rc, y, yref, 5e-6, 2e-5);
    }
    if (motion) {
        snprintf(label, sizeof label, "%s.motion", name);
        check_f32_out(c, label, rc, motion, mref, 1e-6, 1e-6);
    }
    free(yref);
    free(mref);
    tt_free(feat);
    tt_free(y);
    tt_free(yl);
    tt_free(motion);
    motion_free(&k);
}

static void input_case(TestCtx *c, int64_t N, int64_t K, int64_t C, const int64_t *dhw, bool coord, double variance, bool want_motion)
{
    input_case_y(c, N, K, C, dhw, coord, variance, want_motion, false);
}

/* ---- motion_deform ---- */

static void deform_case(TestCtx *c, int64_t N, int64_t K, const int64_t *dhw, bool coord, float offset, bool want_mask)
{
    char name[160];
    snprintf(name, sizeof name, "motion_deform n%lld k%lld (%lld,%lld,%lld) %s grid%s%s", (long long)N, (long long)K, (long long)dhw[0],
             (long long)dhw[1], (long long)dhw[2], coord ? "coord" : "random", offset != 0 ? " offset 1000" : "", want_mask ? "" : " no mask");
    if (!test_selected(c, name))
        return;
    MotionCase k;
    motion_setup(c, &k, N, K, dhw, coord);
    const int64_t M = K + 1, P = dhw[0] * dhw[1] * dhw[2];
    /* offset: l + 1000, where an exp without the max shift overflows */
    TT *logits = new_rand(c, 5, (const int64_t[]){ N, M, dhw[0], dhw[1], dhw[2] }, offset - 4, offset + 4);
    TT *def = tt_new_f32dev(c, 5, (const int64_t[]){ N, dhw[0], dhw[1], dhw[2], 3 });
    TT *mask = want_mask ? tt_new_f32dev(c, 5, (const int64_t[]){ N, M, dhw[0], dhw[1], dhw[2] }) : NULL;
    tt_to_dev(def);
    if (mask)
        tt_to_dev(mask);
    const DittoMotionParams p = { 0.01 };
    int rc = ditto_op_motion_deform(c->be, &p, &k.grid->dev, &k.kp_d->dev, &k.kp_s->dev, &logits->dev, &def->dev, mask ? &mask->dev : NULL);

    double *dref = ref_new(def), *mref = ref_alloc(N * M * P);
    double *e = ref_alloc(M);
    const float *l = tt_f32(logits);
    for (int64_t n = 0; n < N; n++)
        for (int64_t q = 0; q < P; q++) {
            double mx = -INFINITY, sum = 0, d[3] = { 0, 0, 0 };
            for (int64_t m = 0; m < M; m++)
                mx = fmax(mx, l[(n * M + m) * P + q]);
            for (int64_t m = 0; m < M; m++)
                sum += e[m] = exp(l[(n * M + m) * P + q] - mx);
            for (int64_t m = 0; m < M; m++) {
                double S[3], t2, u2, w = e[m] / sum;
                ref_motion(&k, n, m, q, S, &t2, &u2);
                mref[(n * M + m) * P + q] = w;
                for (int i = 0; i < 3; i++)
                    d[i] += w * S[i];
            }
            for (int i = 0; i < 3; i++)
                dref[(n * P + q) * 3 + i] = d[i];
        }
    char label[200];
    snprintf(label, sizeof label, "%s.deformation", name);
    check_f32_out(c, label, rc, def, dref, 2e-6, 4e-6);
    if (mask) {
        snprintf(label, sizeof label, "%s.mask", name);
        check_f32_out(c, label, rc, mask, mref, 1e-6, 1e-6);
    }
    free(dref);
    free(mref);
    free(e);
    tt_free(logits);
    tt_free(def);
    tt_free(mask);
    motion_free(&k);
}

/* ---- negative cases: the front ends must reject these (ops.c check_motion and the two ops) ---- */

static void motion_negative(TestCtx *c)
{
    if (!test_selected(c, "motion negative"))
        return;
    /* N 2, K 3, c 2, (D,H,W) (3,4,5): y (2,12,...), motion (2,4,...,3), logits and mask (2,4,...), deformation (2,3,4,5,3) */
    static const int64_t dhw[3] = { 3, 4, 5 };
    MotionCase k;
    motion_setup(c, &k, 2, 3, dhw, true);
    DittoBackend *be = c->be;
    const bool gpu = be->device != DITTO_DEVICE_CPU;
    const DittoTensor *g = &k.grid->dev, *kd = &k.kp_d->dev, *ks = &k.kp_s->dev;
    TT *feat = new_rand(c, 5, (const int64_t[]){ 2, 2, 3, 4, 5 }, -1, 1);
    TT *y = new_out(c, DITTO_F32, 5, (const int64_t[]){ 2, 12, 3, 4, 5 });
    TT *motion = tt_new_f32dev(c, 6, (const int64_t[]){ 2, 4, 3, 4, 5, 3 });
    TT *logits = new_rand(c, 5, (const int64_t[]){ 2, 4, 3, 4, 5 }, -4, 4);
    TT *def = tt_new_f32dev(c, 5, (const int64_t[]){ 2, 3, 4, 5, 3 });
    TT *mask = tt_new_f32dev(c, 5, (const int64_t[]){ 2, 4, 3, 4, 5 });
    const DittoMotionParams p = { 0.01 }, p0 = { 0.0 }, pneg = { -0.01 }, pnan = { NAN }, pinf = { INFINITY };

    /* controls: the valid arguments pass, so each rejection below is for its one change */
    expect_rc(c, "motion negative: input ok", ditto_op_motion_input(be, &p, g, kd, ks, &feat->dev, &y->dev, &motion->dev), 0);
    expect_rc(c, "motion negative: deform ok", ditto_op_motion_deform(be, &p, g, kd, ks, &logits->dev, &def->dev, &mask->dev), 0);

    expect_rc(c, "motion negative: input variance 0", ditto_op_motion_input(be, &p0, g, kd, ks, &feat->dev, &y->dev, NULL), DITTO_ERR_INVAL);
    expect_rc(c, "motion negative: input variance < 0", ditto_op_motion_input(be, &pneg, g, kd, ks, &feat->dev, &y->dev, NULL), DITTO_ERR_INVAL);
    expect_rc(c, "motion negative: input variance NaN", ditto_op_motion_input(be, &pnan, g, kd, ks, &feat->dev, &y->dev, NULL), DITTO_ERR_INVAL);
    expect_rc(c, "motion negative: deform variance 0", ditto_op_motion_deform(be, &p0, g, kd, ks, &logits->dev, &def->dev, NULL), DITTO_ERR_INVAL);
    expect_rc(c, "motion negative: deform variance inf", ditto_op_motion_deform(be, &pinf, g, kd, ks, &logits->dev, &def->dev, NULL), DITTO_ERR_INVAL);
    expect_rc(c, "motion negative: input no params", ditto_op_motion_input(be, NULL, g, kd, ks, &feat->dev, &y->dev, NULL), DITTO_ERR_INVAL);

    {   /* grid and keypoints */
        TT *g2 = tt_new_f32dev(c, 4, (const int64_t[]){ 3, 4, 5, 2 }), *g5 = tt_new_f32dev(c, 5, (const int64_t[]){ 1, 3, 4, 5, 3 });
        TT *gu8 = tt_new(c, DITTO_U8, 4, (const int64_t[]){ 3, 4, 5, 3 });
        TT *kp4 = tt_new_f32dev(c, 3, (const int64_t[]){ 2, 4, 3 }), *kp2 = tt_new_f32dev(c, 3, (const int64_t[]){ 2, 3, 2 });
        TT *kpb = tt_new_f32dev(c, 3, (const int64_t[]){ 1, 3, 3 });
        expect_rc(c, "motion negative: input grid last dim 2", ditto_op_motion_input(be, &p, &g2->dev, kd, ks, &feat->dev, &y->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: deform grid last dim 2", ditto_op_motion_deform(be, &p, &g2->dev, kd, ks, &logits->dev, &def->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: input grid 5-D", ditto_op_motion_input(be, &p, &g5->dev, kd, ks, &feat->dev, &y->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: input grid uint8", ditto_op_motion_input(be, &p, &gu8->dev, kd, ks, &feat->dev, &y->dev, NULL), DITTO_ERR_INVAL);
        expect_rc(c, "motion negative: input kp_s K+1 vs kp_d K", ditto_op_motion_input(be, &p, g, kd, &kp4->dev, &feat->dev, &y->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: deform kp_s batch 1 vs 2", ditto_op_motion_deform(be, &p, g, kd, &kpb->dev, &logits->dev, &def->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: input kp_d last dim 2", ditto_op_motion_input(be, &p, g, &kp2->dev, ks, &feat->dev, &y->dev, NULL), DITTO_ERR_SHAPE);
        tt_free(g2);
        tt_free(g5);
        tt_free(gu8);
        tt_free(kp4);
        tt_free(kp2);
        tt_free(kpb);
    }
    {   /* motion_input: feat, y, motion */
        TT *fsp = tt_new(c, DITTO_F32, 5, (const int64_t[]){ 2, 2, 3, 4, 6 }), *fb = tt_new(c, DITTO_F32, 5, (const int64_t[]){ 1, 2, 3, 4, 5 });
        TT *y11 = tt_new(c, DITTO_F32, 5, (const int64_t[]){ 2, 11, 3, 4, 5 }), *y9 = tt_new(c, DITTO_F32, 5, (const int64_t[]){ 2, 9, 3, 4, 5 });
        TT *mk = tt_new_f32dev(c, 6, (const int64_t[]){ 2, 3, 3, 4, 5, 3 });
        expect_rc(c, "motion negative: input feat W 6 vs grid 5", ditto_op_motion_input(be, &p, g, kd, ks, &fsp->dev, &y->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: input feat batch 1 vs 2", ditto_op_motion_input(be, &p, g, kd, ks, &fb->dev, &y->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: input y 11 channels", ditto_op_motion_input(be, &p, g, kd, ks, &feat->dev, &y11->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: input y K(c+1) channels", ditto_op_motion_input(be, &p, g, kd, ks, &feat->dev, &y9->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: input motion without keypoint 0", ditto_op_motion_input(be, &p, g, kd, ks, &feat->dev, &y->dev, &mk->dev), DITTO_ERR_SHAPE);
        TT *yt = tt_new(c, DITTO_F32, 5, (const int64_t[]){ 2, 12, 3, 5, 4 });   /* y with H and W swapped in memory: neither layout */
        View ytv = view_permute(view_of(yt), (const int[]){ 0, 1, 2, 4, 3 });
        expect_rc(c, "motion negative: input y neither contiguous nor channels-last", ditto_op_motion_input(be, &p, g, kd, ks, &feat->dev, &ytv.d, NULL),
                  DITTO_ERR_INVAL);
        tt_free(yt);
        if (gpu) {   /* float16 tensors exist only off the CPU (there the dtype check comes first) */
            TT *m16 = tt_new_f16dev(c, 6, (const int64_t[]){ 2, 4, 3, 4, 5, 3 });
            expect_rc(c, "motion negative: input motion float16", ditto_op_motion_input(be, &p, g, kd, ks, &feat->dev, &y->dev, &m16->dev), DITTO_ERR_INVAL);
            tt_free(m16);
        }
        tt_free(fsp);
        tt_free(fb);
        tt_free(y11);
        tt_free(y9);
        tt_free(mk);
    }
    {   /* motion_deform: logits, deformation, mask */
        TT *lk = tt_new(c, DITTO_F32, 5, (const int64_t[]){ 2, 3, 3, 4, 5 });
        TT *d2 = tt_new_f32dev(c, 5, (const int64_t[]){ 2, 3, 4, 5, 2 }), *mk = tt_new_f32dev(c, 5, (const int64_t[]){ 2, 3, 3, 4, 5 });
        expect_rc(c, "motion negative: deform logits K channels", ditto_op_motion_deform(be, &p, g, kd, ks, &lk->dev, &def->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: deform deformation last dim 2", ditto_op_motion_deform(be, &p, g, kd, ks, &logits->dev, &d2->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "motion negative: deform no deformation", ditto_op_motion_deform(be, &p, g, kd, ks, &logits->dev, NULL, &mask->dev), DITTO_ERR_INVAL);
        expect_rc(c, "motion negative: deform mask without keypoint 0", ditto_op_motion_deform(be, &p, g, kd, ks, &logits->dev, &def->dev, &mk->dev), DITTO_ERR_SHAPE);
        if (gpu) {
            TT *d16 = tt_new_f16dev(c, 5, (const int64_t[]){ 2, 3, 4, 5, 3 }), *m16 = tt_new_f16dev(c, 5, (const int64_t[]){ 2, 4, 3, 4, 5 });
            expect_rc(c, "motion negative: deform deformation float16", ditto_op_motion_deform(be, &p, g, kd, ks, &logits->dev, &d16->dev, NULL), DITTO_ERR_INVAL);
            expect_rc(c, "motion negative: deform mask float16", ditto_op_motion_deform(be, &p, g, kd, ks, &logits->dev, &def->dev, &m16->dev), DITTO_ERR_INVAL);
            tt_free(d16);
            tt_free(m16);
        }
        tt_free(lk);
        tt_free(d2);
        tt_free(mk);
    }
    tt_free(feat);
    tt_free(y);
    tt_free(motion);
    tt_free(logits);
    tt_free(def);
    tt_free(mask);
    motion_free(&k);
}

/* ---- seq_exact: the fused ops against the unfused op chain they replace ---- */

/*
 * Fused output x against the chain's y (both downloaded): the number of
 * elements whose bits differ and the largest |x - y|; CPU requires none to
 * differ, other backends the float32 tolerance (rel_l2, max_abs/max_ref) of
 * the output's reference check above. Reports name and returns ok.
 */
static bool seq_cmp(TestCtx *c, const char *name, TT *x, TT *y, bool exact, double tol, double tol_max)
{
    if (tt_to_host(x) < 0 || tt_to_host(y) < 0)
        return test_report(c, name, false, "download failed");
    const int64_t n = ditto_tensor_numel(&x->host);
    const float *a = tt_f32(x), *b = tt_f32(y);
    int64_t ndiff = 0, first = -1, worst = -1;
    double max_abs = 0;
    double *ref = ref_alloc(n);
    for (int64_t i = 0; i < n; i++) {
        ref[i] = b[i];
        if (memcmp(&a[i], &b[i], sizeof(float))) {
            double d = fabs((double)a[i] - (double)b[i]);
            if (first < 0)
                first = i;
            if (worst < 0 || !(d <= max_abs))
                max_abs = d, worst = i;
            ndiff++;
        }
    }
    TestErr e = test_compare(a, ref, (size_t)n);
    free(ref);
    double rmax = e.max_ref > 0 ? e.max_abs / e.max_ref : e.max_abs;
    bool guards = tt_guards_ok(x) && tt_guards_ok(y);
    bool ok = guards && e.nonfinite == 0 && (exact ? ndiff == 0 : e.rel_l2 <= tol && rmax <= tol_max);
    if (ndiff == 0)
        return test_report(c, name, ok, "0 of %lld differ vs the unfused chain%s%s", (long long)n, exact ? " (bits required)" : "",
                           guards ? "" : " GUARDS-OVERWRITTEN");
    return test_report(c, name, ok,
                       "%lld of %lld differ vs the unfused chain, max |diff| %.3g at [%lld] (fused %.9g %a, chain %.9g %a), first at [%lld] "
                       "(fused %a, chain %a), rel_l2 %.3g max_abs/max_ref %.3g%s%s%s",
                       (long long)ndiff, (long long)n, max_abs, (long long)worst, a[worst], a[worst], b[worst], b[worst], (long long)first,
                       a[first], b[first], e.rel_l2, rmax, exact ? " (bits required)" : "", e.nonfinite ? " NON-FINITE" : "",
                       guards ? "" : " GUARDS-OVERWRITTEN");
}

/*
 * The warp network's dense motion before the fusion (git history,
 * src/models/warp.c dense_motion and gaussian), on this backend: a zero
 * keypoint row concatenated in front of kp_d and kp_s (fill, concat);
 * motion = grid - kp_d (binary SUB); gd = exp(affine(sumsq(motion), a, 0))
 * with a = (float)(-0.5 / variance) (reduce SUMSQ over the last axis, unary
 * AFFINE, act EXP), gs likewise from grid - kp_s; heat = gd - gs in place;
 * motion += kp_s; grid_sample of feat at motion viewed (N, (K+1) D, H, W, 3);
 * y = concat along axis 2 of heat (N,K+1,1,D,H,W) and the deformed volume
 * (N,c,K+1,D,H,W) permuted to (N,K+1,c,D,H,W). Then mask = softmax over
 * axis 1 of the logits, motion * mask (binary MUL, mask broadcast over the
 * last axis of 3) and its reduce SUM over axis 1 into (N,1,D,H,W,3). The
 * model ran the softmax and the product in place; here they write fresh
 * tensors so the logits and the motion stay for the comparison (the ops
 * compute the same values either way).
 *
 * The fused ops must give the same bits on the CPU (0 differing elements in
 * y, motion, mask, deformation); other backends are held to the float32
 * tolerances of the reference checks above. fp16 storage mode is paused for
 * the whole case: the chain with float16 storage rounds its intermediates
 * (gd, gs, the deformed volume) differently, so only float32 is meaningful.
 */
static void seq_exact_case(TestCtx *c, int64_t N, int64_t K, int64_t C, const int64_t *dhw, bool coord, bool want_extra)
{
    char name[160];
    snprintf(name, sizeof name, "motion seq_exact n%lld k%lld c%lld (%lld,%lld,%lld) %s grid%s", (long long)N, (long long)K, (long long)C,
             (long long)dhw[0], (long long)dhw[1], (long long)dhw[2], coord ? "coord" : "random", want_extra ? "" : " no motion/mask");
    if (!test_selected(c, name))
        return;
    test_fp16_suspend(c);
    DittoBackend *be = c->be;
    const bool exact = be->device == DITTO_DEVICE_CPU;
    const int64_t M = K + 1, D = dhw[0], H = dhw[1], W = dhw[2];
    const double variance = 0.01;
    MotionCase k;
    motion_setup(c, &k, N, K, dhw, coord);
    TT *feat = new_rand(c, 5, (const int64_t[]){ N, C, D, H, W }, -1, 1);
    TT *logits = new_rand(c, 5, (const int64_t[]){ N, M, D, H, W }, -4, 4);
    /* fused outputs */
    TT *y = new_out(c, DITTO_F32, 5, (const int64_t[]){ N, M * (C + 1), D, H, W });
    TT *motion = want_extra ? new_out(c, DITTO_F32, 6, (const int64_t[]){ N, M, D, H, W, 3 }) : NULL;
    TT *def = new_out(c, DITTO_F32, 5, (const int64_t[]){ N, D, H, W, 3 });
    TT *mask = want_extra ? new_out(c, DITTO_F32, 5, (const int64_t[]){ N, M, D, H, W }) : NULL;
    /* the chain's tensors */
    TT *zero = new_out(c, DITTO_F32, 3, (const int64_t[]){ N, 1, 3 });
    TT *kpd = new_out(c, DITTO_F32, 3, (const int64_t[]){ N, M, 3 }), *kps = new_out(c, DITTO_F32, 3, (const int64_t[]){ N, M, 3 });
    TT *smotion = new_out(c, DITTO_F32, 6, (const int64_t[]){ N, M, D, H, W, 3 }), *tmp = new_out(c, DITTO_F32, 6, (const int64_t[]){ N, M, D, H, W, 3 });
    TT *gd = new_out(c, DITTO_F32, 6, (const int64_t[]){ N, M, D, H, W, 1 }), *gs = new_out(c, DITTO_F32, 6, (const int64_t[]){ N, M, D, H, W, 1 });
    TT *deformed = new_out(c, DITTO_F32, 5, (const int64_t[]){ N, C, M * D, H, W });
    TT *sy = new_out(c, DITTO_F32, 5, (const int64_t[]){ N, M * (C + 1), D, H, W });
    TT *smask = new_out(c, DITTO_F32, 5, (const int64_t[]){ N, M, D, H, W });
    TT *prod = new_out(c, DITTO_F32, 6, (const int64_t[]){ N, M, D, H, W, 3 });
    TT *sdef = new_out(c, DITTO_F32, 5, (const int64_t[]){ N, D, H, W, 3 });

    const DittoMotionParams p = { variance };
    const DittoTensor *g = &k.grid->dev, *kd = &k.kp_d->dev, *ks = &k.kp_s->dev;
    int rc = ditto_op_motion_input(be, &p, g, kd, ks, &feat->dev, &y->dev, motion ? &motion->dev : NULL);
    if (rc >= 0)
        rc = ditto_op_motion_deform(be, &p, g, kd, ks, &logits->dev, &def->dev, mask ? &mask->dev : NULL);

    DittoTensor kpd6, kps6, grid6, motion_v, deformed6, deformed_p, heat6, y6, mask6, def6;
    const DittoUnaryParams scale = { DITTO_UNARY_AFFINE, (float)(-0.5 / variance), 0.0f };
    if (rc >= 0) rc = ditto_op_fill(be, 0.0f, &zero->dev);
    if (rc >= 0) rc = ditto_op_concat(be, 1, 2, (const DittoTensor *const[]){ &zero->dev, kd }, &kpd->dev);
    if (rc >= 0) rc = ditto_op_concat(be, 1, 2, (const DittoTensor *const[]){ &zero->dev, ks }, &kps->dev);
    if (rc >= 0) rc = ditto_tensor_reshape(&kpd->dev, 6, (const int64_t[]){ N, M, 1, 1, 1, 3 }, &kpd6);
    if (rc >= 0) rc = ditto_tensor_reshape(&kps->dev, 6, (const int64_t[]){ N, M, 1, 1, 1, 3 }, &kps6);
    if (rc >= 0) rc = ditto_tensor_reshape(g, 6, (const int64_t[]){ 1, 1, D, H, W, 3 }, &grid6);
    /* motion = G - kp_d; gd = gaussian(motion) */
    if (rc >= 0) rc = ditto_op_binary(be, DITTO_BINARY_SUB, &grid6, &kpd6, &smotion->dev);
    if (rc >= 0) rc = ditto_op_reduce(be, DITTO_REDUCE_SUMSQ, -1, &smotion->dev, &gd->dev);
    if (rc >= 0) rc = ditto_op_unary(be, &scale, &gd->dev, &gd->dev);
    if (rc >= 0) rc = ditto_op_act(be, DITTO_UNARY_EXP, 0.0f, &gd->dev, &gd->dev);
    /* gs = gaussian(G - kp_s) */
    if (rc >= 0) rc = ditto_op_binary(be, DITTO_BINARY_SUB, &grid6, &kps6, &tmp->dev);
    if (rc >= 0) rc = ditto_op_reduce(be, DITTO_REDUCE_SUMSQ, -1, &tmp->dev, &gs->dev);
    if (rc >= 0) rc = ditto_op_unary(be, &scale, &gs->dev, &gs->dev);
    if (rc >= 0) rc = ditto_op_act(be, DITTO_UNARY_EXP, 0.0f, &gs->dev, &gs->dev);
    /* heat = gd - gs (in gd, as the float32 model did); motion += kp_s */
    if (rc >= 0) rc = ditto_op_binary(be, DITTO_BINARY_SUB, &gd->dev, &gs->dev, &gd->dev);
    if (rc >= 0) rc = ditto_op_binary(be, DITTO_BINARY_ADD, &smotion->dev, &kps6, &smotion->dev);
    /* deformed features: the K+1 grids stacked along the output depth */
    if (rc >= 0) rc = ditto_tensor_reshape(&smotion->dev, 5, (const int64_t[]){ N, M * D, H, W, 3 }, &motion_v);
    if (rc >= 0) rc = ditto_op_grid_sample(be, false, &feat->dev, &motion_v, &deformed->dev);
    if (rc >= 0) rc = ditto_tensor_reshape(&deformed->dev, 6, (const int64_t[]){ N, C, M, D, H, W }, &deformed6);
    if (rc >= 0) rc = ditto_tensor_permute(&deformed6, (const int[]){ 0, 2, 1, 3, 4, 5 }, &deformed_p);
    if (rc >= 0) rc = ditto_tensor_reshape(&gd->dev, 6, (const int64_t[]){ N, M, 1, D, H, W }, &heat6);
    if (rc >= 0) rc = ditto_tensor_reshape(&sy->dev, 6, (const int64_t[]){ N, M, C + 1, D, H, W }, &y6);
    if (rc >= 0) rc = ditto_op_concat(be, 2, 2, (const DittoTensor *const[]){ &heat6, &deformed_p }, &y6);
    /* mask = softmax(logits, 1); deformation = sum over axis 1 of motion * mask */
    if (rc >= 0) rc = ditto_op_softmax(be, 1, &logits->dev, &smask->dev);
    if (rc >= 0) rc = ditto_tensor_reshape(&smask->dev, 6, (const int64_t[]){ N, M, D, H, W, 1 }, &mask6);
    if (rc >= 0) rc = ditto_tensor_reshape(&sdef->dev, 6, (const int64_t[]){ N, 1, D, H, W, 3 }, &def6);
    if (rc >= 0) rc = ditto_op_binary(be, DITTO_BINARY_MUL, &smotion->dev, &mask6, &prod->dev);
    if (rc >= 0) rc = ditto_op_reduce(be, DITTO_REDUCE_SUM, 1, &prod->dev, &def6);

    if (op_ok(c, name, rc)) {
        char label[200];
        snprintf(label, sizeof label, "%s.y", name);
        seq_cmp(c, label, y, sy, exact, 5e-6, 2e-5);
        if (motion) {
            snprintf(label, sizeof label, "%s.motion", name);
            seq_cmp(c, label, motion, smotion, exact, 1e-6, 1e-6);
        }
        if (mask) {
            snprintf(label, sizeof label, "%s.mask", name);
            seq_cmp(c, label, mask, smask, exact, 1e-6, 1e-6);
        }
        snprintf(label, sizeof label, "%s.deformation", name);
        seq_cmp(c, label, def, sdef, exact, 2e-6, 4e-6);
    }
    TT *all[] = { feat, logits, y, motion, def, mask, zero, kpd, kps, smotion, tmp, gd, gs, deformed, sy, smask, prod, sdef };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tt_free(all[i]);
    motion_free(&k);
    test_fp16_resume(c);
}

void test_ops_motion(TestCtx *c)
{
    static const int64_t s356[3] = { 3, 5, 6 }, s475[3] = { 4, 7, 5 }, s1688[3] = { 16, 8, 8 }, s114[3] = { 1, 1, 4 }, s488[3] = { 4, 8, 8 };
    /* motion_input: the model's variance 0.01 (heat mostly ~0) and 0.3 (broad heatmaps); K 21 and c 4 as in the warp network */
    input_case(c, 1, 1, 1, s356, true, 0.01, true);
    input_case(c, 2, 3, 4, s475, true, 0.3, true);
    input_case(c, 3, 3, 1, s356, false, 0.3, true);
    input_case(c, 1, 21, 4, s1688, true, 0.01, true);
    input_case(c, 2, 21, 4, s475, false, 0.01, false);
    input_case(c, 3, 1, 4, s475, true, 0.3, false);
    input_case(c, 1, 21, 1, s1688, false, 0.3, true);
    input_case(c, 2, 3, 1, s114, false, 0.3, true);       /* sizes of 1: the unnormalised coordinate is g / 2 */
    input_case(c, 2, 0, 4, s356, false, 0.3, true);       /* only the zero keypoint: heat 0, S = G */
    /* y channels-last (CUDA: a thread per (position, motion)), with the general kernel (c 1, 3) and the 4-channel one */
    input_case_y(c, 2, 3, 4, s475, true, 0.3, true, true);
    input_case_y(c, 3, 21, 4, s356, false, 0.01, false, true);
    input_case_y(c, 2, 3, 1, s475, false, 0.3, true, true);
    input_case_y(c, 1, 2, 3, s356, true, 0.3, false, true);
    /* motion_deform: logits in [-4, 4], and offset by 1000 */
    deform_case(c, 1, 1, s356, true, 0, true);
    deform_case(c, 2, 3, s475, false, 0, true);
    deform_case(c, 3, 21, s1688, true, 0, true);
    deform_case(c, 2, 21, s475, false, 1000, true);
    deform_case(c, 1, 3, s356, true, 0, false);
    deform_case(c, 3, 1, s1688, false, 1000, false);
    deform_case(c, 2, 3, s114, false, 0, true);
    deform_case(c, 2, 0, s356, false, 0, true);           /* only the zero keypoint: mask 1, deformation G */
    /* seq_exact: bit for bit (CPU) against the unfused chain, the model's K 21, c 4, variance 0.01 */
    seq_exact_case(c, 1, 21, 4, s488, true, true);
    seq_exact_case(c, 2, 21, 4, s488, false, true);
    seq_exact_case(c, 2, 21, 4, s488, true, false);
    seq_exact_case(c, 2, 3, 2, s356, false, true);
    motion_negative(c);
}
