/*
 * batch/instance/layer/group norm against two-pass double references.
 * Outputs are O(1) after normalisation and each is one rounded expression of
 * the inputs, so fp32 should land within a few ulps: rel_l2 1e-6 and
 * max_abs/max_ref 1e-5. The "offset 1000" cases (x = 1000 + U(-1,1)) make a
 * float E[x^2] - E[x]^2 variance fail by orders of magnitude.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ditto/ditto_error.h"
#include "ops/ops.h"
#include "op_util.h"
#include "test_ops.h"

#define TOL_L2 1e-6
#define TOL_MAX 1e-5

typedef enum NormKind { NK_BATCH, NK_INSTANCE, NK_LAYER, NK_LAYER_CF, NK_GROUP } NormKind;

static const char *const kind_names[] = { "batch_norm", "instance_norm", "layer_norm", "layer_norm channels_first", "group_norm" };

/*
 * Normalise one statistics set: count elements x[base + k * step]; element k
 * takes affine channel c0 + k / cdiv.
 */
static void ref_set(const float *x, double *y, int64_t base, int64_t count, int64_t step, double eps, const float *w,
                    const float *b, int64_t c0, int64_t cdiv)
{
    double m = 0, v = 0;
    for (int64_t k = 0; k < count; k++)
        m += x[base + k * step];
    m /= (double)count;
    for (int64_t k = 0; k < count; k++) {
        double d = x[base + k * step] - m;
        v += d * d;
    }
    v /= (double)count;
    for (int64_t k = 0; k < count; k++) {
        int64_t ch = c0 + k / cdiv;
        double r = (x[base + k * step] - m) / sqrt(v + eps);
        y[base + k * step] = r * (w ? w[ch] : 1.0) + (b ? b[ch] : 0.0);
    }
}

static void ref_norm(NormKind kind, int nd, const int64_t *sh, int groups, double eps, const float *x, const float *mean,
                     const float *var, const float *w, const float *b, double *y)
{
    int64_t N = sh[0], C = nd > 1 ? sh[1] : 1, R = 1, numel = 1;
    for (int i = 2; i < nd; i++)
        R *= sh[i];
    for (int i = 0; i < nd; i++)
        numel *= sh[i];
    switch (kind) {
    case NK_BATCH:
        for (int64_t i = 0; i < numel; i++) {
            int64_t ch = i / R % C;
            double r = (x[i] - (double)mean[ch]) / sqrt((double)var[ch] + eps);
            y[i] = r * (w ? w[ch] : 1.0) + (b ? b[ch] : 0.0);
        }
        break;
    case NK_INSTANCE:
        for (int64_t n = 0; n < N; n++)
            for (int64_t ch = 0; ch < C; ch++)
                ref_set(x, y, (n * C + ch) * R, R, 1, eps, w, b, ch, R);
        break;
    case NK_GROUP: {
        int64_t Cg = C / groups;
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < groups; g++)
                ref_set(x, y, (n * C + g * Cg) * R, Cg * R, 1, eps, w, b, g * Cg, R);
        break;
    }
    case NK_LAYER: {
        int64_t L = sh[nd - 1];
        for (int64_t row = 0; row < numel / L; row++)
            ref_set(x, y, row * L, L, 1, eps, w, b, 0, 1);
        break;
    }
    case NK_LAYER_CF:
        for (int64_t n = 0; n < N; n++)
            for (int64_t r = 0; r < R; r++)
                ref_set(x, y, n * C * R + r, C, R, eps, w, b, 0, 1);
        break;
    }
}

/* affine: 0 none, 1 weight only, 2 weight and bias, 3 bias only. */
static void norm_case(TestCtx *c, NormKind kind, int nd, const int64_t *sh, int groups, int affine, float offset, float eps)
{
    char name[200], s[DITTO_SHAPE_STR_MAX], gs[32] = "";
    if (kind == NK_GROUP)
        snprintf(gs, sizeof gs, " groups %d", groups);
    static const char *const aff[] = { "", " w", " w+b", " b" };
    snprintf(name, sizeof name, "%s %s%s%s eps %g%s", kind_names[kind], ditto_shape_str(sh, nd, s, sizeof s), gs, aff[affine],
             eps, offset != 0 ? " offset 1000" : "");
    if (!test_selected(c, name))
        return;
    int64_t C = kind == NK_LAYER ? sh[nd - 1] : sh[1];
    TT *x = tt_new(c, DITTO_F32, nd, sh), *y = tt_new(c, DITTO_F32, nd, sh);
    TT *w = affine == 1 || affine == 2 ? tt_new(c, DITTO_F32, 1, &C) : NULL;
    TT *b = affine >= 2 ? tt_new(c, DITTO_F32, 1, &C) : NULL;
    TT *mean = kind == NK_BATCH ? tt_new(c, DITTO_F32, 1, &C) : NULL, *var = kind == NK_BATCH ? tt_new(c, DITTO_F32, 1, &C) : NULL;
    tt_fill_uniform(x, offset - 1, offset + 1);
    tt_to_dev(x);
    tt_to_dev(y);
    if (w) {
        tt_fill_uniform(w, 0.5f, 1.5f);
        tt_to_dev(w);
    }
    if (b) {
        tt_fill_uniform(b, -1, 1);
        tt_to_dev(b);
    }
    if (mean) {
        tt_fill_uniform(mean, offset - 0.5f, offset + 0.5f);
        tt_fill_uniform(var, 0.05f, 2.0f);
        tt_to_dev(mean);
        tt_to_dev(var);
    }
    double *ref = malloc(sizeof(double) * (size_t)ditto_tensor_numel(&x->host));
    ref_norm(kind, nd, sh, groups, eps, tt_f32(x), mean ? tt_f32(mean) : NULL, var ? tt_f32(var) : NULL, w ? tt_f32(w) : NULL,
             b ? tt_f32(b) : NULL, ref);
    const DittoTensor *wd = w ? &w->dev : NULL, *bd = b ? &b->dev : NULL;
    int rc = 0;
    switch (kind) {
    case NK_BATCH: rc = ditto_op_batch_norm(c->be, eps, &x->dev, &mean->dev, &var->dev, wd, bd, &y->dev); break;
    case NK_INSTANCE: rc = ditto_op_instance_norm(c->be, eps, &x->dev, wd, bd, &y->dev); break;
    case NK_LAYER: rc = ditto_op_layer_norm(c->be, eps, false, &x->dev, wd, bd, &y->dev); break;
    case NK_LAYER_CF: rc = ditto_op_layer_norm(c->be, eps, true, &x->dev, wd, bd, &y->dev); break;
    case NK_GROUP: rc = ditto_op_group_norm(c->be, groups, eps, &x->dev, wd, bd, &y->dev); break;
    }
    op_check(c, name, rc, y, ref, TOL_L2, TOL_MAX);
    free(ref);
    tt_free(x);
    tt_free(y);
    tt_free(w);
    tt_free(b);
    tt_free(mean);
    tt_free(var);
}

/*
 * spade_case_opt bias: none, a (2C) bias in the test storage dtype, a
 * float32 one (also in fp16 mode); | SPADE_GAMMA_ONLY: gb and the bias
 * hold gamma alone (C channels), beta 0
 */
enum { SPADE_NO_BIAS, SPADE_BIAS, SPADE_BIAS_F32, SPADE_GAMMA_ONLY = 4 };

/*
 * spade_norm: instance statistics of x modulated by gb = (gamma, beta) planes
 * (plus the bias of gamma and beta when given), optional LeakyReLU. nhwc: sh
 * is (N, spatial..., C) and gb (N, spatial..., 2C); the reference reads the
 * same values channels-last. up > 1 (4-D only): y and gb are up x up times
 * x's spatial size (fh = up, fw = up + 1 when wide, to tell the axes apart)
 * and x is read nearest-upsampled; the reference's statistics are over the
 * explicitly upsampled values.
 */
static void spade_case_up(TestCtx *c, int nd, const int64_t *sh, bool act, float offset, bool in_place, bool nhwc, int bias, int up, bool wide)
{
    const int fh = up, fw = up > 1 && wide ? up + 1 : up;
    const bool gonly = bias & SPADE_GAMMA_ONLY;
    const int K = gonly ? 1 : 2;   /* gb's channels per channel of x */
    bias &= ~SPADE_GAMMA_ONLY;
    char name[200], s[DITTO_SHAPE_STR_MAX], ups[32] = "";
    if (up > 1)
        snprintf(ups, sizeof ups, " up %dx%d", fh, fw);
    snprintf(name, sizeof name, "spade_norm %s%s%s%s%s%s%s", ditto_shape_str(sh, nd, s, sizeof s), act ? " lrelu 0.2" : "",
             offset != 0 ? " offset 1000" : "", in_place ? " in place" : "", nhwc ? " nhwc" : "",
             bias == SPADE_BIAS ? " bias" : bias == SPADE_BIAS_F32 ? " bias f32" : "", ups);
    if (gonly)
        strncat(name, " gamma only", sizeof name - strlen(name) - 1);
    if (!test_selected(c, name))
        return;
    const int cax = nhwc ? nd - 1 : 1, hax = nhwc ? 1 : 2;
    int64_t ysh[6], gsh[6];
    memcpy(ysh, sh, sizeof(int64_t) * (size_t)nd);
    if (up > 1) {
        ysh[hax] *= fh;
        ysh[hax + 1] *= fw;
    }
    memcpy(gsh, ysh, sizeof(int64_t) * (size_t)nd);
    gsh[cax] *= K;
    TT *x = tt_new(c, DITTO_F32, nd, sh), *y = in_place ? x : tt_new(c, DITTO_F32, nd, ysh), *gb = tt_new(c, DITTO_F32, nd, gsh);
    tt_fill_uniform(x, offset - 1, offset + 1);
    tt_fill_uniform(gb, -1.5f, 1.5f);
    tt_to_dev(x);
    tt_to_dev(gb);
    if (!in_place)
        tt_to_dev(y);
    const int64_t N = sh[0], C = sh[cax], ny = ditto_tensor_numel(&y->host), C2 = K * C;
    TT *bt = bias == SPADE_BIAS ? tt_new(c, DITTO_F32, 1, &C2) : bias == SPADE_BIAS_F32 ? tt_new_f32dev(c, 1, &C2) : NULL;
    if (bt) {
        tt_fill_uniform(bt, -0.75f, 0.75f);
        tt_to_dev(bt);
    }
    const float *bh = bt ? tt_f32(bt) : NULL;
    int64_t R = 1, Rx = 1;
    for (int i = 1; i < nd; i++) {
        R *= i == cax ? 1 : ysh[i];
        Rx *= i == cax ? 1 : sh[i];
    }
    const int64_t W = up > 1 ? ysh[hax + 1] : 1, wx = up > 1 ? sh[hax + 1] : 1;
    /*
     * y position k of plane (n, c): y at n*C*R + c*yc + k*yk, gamma at
     * n*KC*R + c*yc + k*gk, beta C*yc further (K 2); it reads x position kx
     * (k, or its source under upsampling) at n*C*Rx + c*xc + kx*yk
     */
    const int64_t yc = nhwc ? 1 : R, xc = nhwc ? 1 : Rx, yk = nhwc ? C : 1, gk = nhwc ? K * C : 1;
    const double eps = 1e-5;
    const float *xh = tt_f32(x), *gh = tt_f32(gb);
    double *ref = malloc(sizeof(double) * (size_t)(ny ? ny : 1));
    for (int64_t n = 0; n < N; n++)
        for (int64_t ch = 0; ch < C; ch++) {
            const int64_t xo = n * C * Rx + ch * xc, yo = n * C * R + ch * yc, go = n * K * C * R + ch * yc;
            double m = 0, v = 0;
            for (int64_t k = 0; k < R; k++) {
                const int64_t kx = up > 1 ? k / W / fh * wx + k % W / fw : k;
                m += xh[xo + kx * yk];
            }
            m /= (double)R;
            for (int64_t k = 0; k < R; k++) {
                const int64_t kx = up > 1 ? k / W / fh * wx + k % W / fw : k;
                v += (xh[xo + kx * yk] - m) * (xh[xo + kx * yk] - m);
            }
            v /= (double)R;
            for (int64_t k = 0; k < R; k++) {
                const int64_t kx = up > 1 ? k / W / fh * wx + k % W / fw : k;
                double g = gh[go + k * gk] + (bh ? (double)bh[ch] : 0.0);
                double b = gonly ? 0.0 : gh[go + k * gk + C * yc] + (bh ? (double)bh[C + ch] : 0.0);
                double o = (xh[xo + kx * yk] - m) / sqrt(v + eps) * (1.0 + g) + b;
                ref[yo + k * yk] = act && o < 0 ? 0.2 * o : o;
            }
        }
    DittoSpadeParams p = { (float)eps, act, 0.2f, nhwc, gonly };
    int rc = ditto_op_spade_norm(c->be, &p, &x->dev, &gb->dev, bt ? &bt->dev : NULL, &y->dev);
    op_check(c, name, rc, y, ref, TOL_L2, TOL_MAX);
    free(ref);
    tt_free(x);
    if (!in_place)
        tt_free(y);
    tt_free(gb);
    tt_free(bt);
}

static void spade_case_opt(TestCtx *c, int nd, const int64_t *sh, bool act, float offset, bool in_place, bool nhwc, int bias)
{
    spade_case_up(c, nd, sh, act, offset, in_place, nhwc, bias, 1, false);
}

static void spade_case(TestCtx *c, int nd, const int64_t *sh, bool act, float offset, bool in_place)
{
    spade_case_opt(c, nd, sh, act, offset, in_place, false, SPADE_NO_BIAS);
}

/*
 * spade_conv (channels-last): gb = conv3x3(a, w) (padding 1, no bias), then
 * spade_norm of x read upsampled by (fh, fw) to y's (N, H, W, C). The
 * reference forms gamma and beta in double from the (stored, possibly
 * fp16-rounded) a and w, the statistics over the upsampled x in double.
 * wlast: w bound channels-last (the KRSC layout the decoder uses on CUDA,
 * which the fused CUDA kernel needs); sizes with W a multiple of 64, H of 4,
 * Ca of 64 and C of 64 (128 gamma only) take that kernel in fp16 mode. The
 * conv tolerances: gamma and beta are sums of 9 Ca products. lda > Ca: a
 * is channels [off, off + Ca) of an (N, H, W, lda) tensor (the decoder's
 * merged mlp_shared output), the other channels NaN, so a read of them shows.
 */
#define TOL_CONV_L2 2e-6
#define TOL_CONV_MAX 2e-5
static void spade_conv_case_at(TestCtx *c, int64_t N, int64_t H, int64_t W, int64_t Ca, int64_t C, int fh, int fw, bool act, int bias,
                               bool wlast, int64_t lda, int64_t off)
{
    const bool gonly = bias & SPADE_GAMMA_ONLY;
    const int64_t K = gonly ? 1 : 2, KC = K * C, Hx = H / fh, Wx = W / fw;
    bias &= ~SPADE_GAMMA_ONLY;
    char name[200];
    snprintf(name, sizeof name, "spade_conv (%lld,%lld,%lld,%lld) -> C %lld up %dx%d%s%s%s%s", (long long)N, (long long)H, (long long)W,
             (long long)Ca, (long long)C, fh, fw, act ? " lrelu 0.2" : "", bias == SPADE_BIAS ? " bias" : bias == SPADE_BIAS_F32 ? " bias f32" : "",
             gonly ? " gamma only" : "", wlast ? " w krsc" : "");
    if (lda != Ca) {
        const size_t k = strlen(name);
        snprintf(name + k, sizeof name - k, " a channels %lld.. of %lld", (long long)off, (long long)lda);
    }
    if (!test_selected(c, name))
        return;
    TT *a = tt_new(c, DITTO_F32, 4, (const int64_t[]){ N, H, W, lda }), *w = tt_new(c, DITTO_F32, 4, (const int64_t[]){ KC, Ca, 3, 3 });
    TT *x = tt_new(c, DITTO_F32, 4, (const int64_t[]){ N, Hx, Wx, C }), *y = tt_new(c, DITTO_F32, 4, (const int64_t[]){ N, H, W, C });
    const float ws = 1.0f / sqrtf((float)(9 * Ca));   /* gamma, beta of order 1 */
    tt_fill_uniform(a, -1.0f, 1.0f);
    tt_fill_uniform(w, -ws, ws);
    tt_fill_uniform(x, -1.0f, 1.0f);
    for (int64_t r = 0; r < N * H * W; r++)
        for (int64_t ci = 0; ci < lda; ci++)
            if (ci < off || ci >= off + Ca)
                tt_f32(a)[r * lda + ci] = NAN;
    tt_to_dev(a);
    DittoTensor av;
    ditto_tensor_slice(&a->dev, 3, off, off + Ca, 1, &av);
    tt_to_dev(w);
    tt_to_dev(x);
    tt_to_dev(y);
    TT *bt = bias == SPADE_BIAS ? tt_new(c, DITTO_F32, 1, &KC) : bias == SPADE_BIAS_F32 ? tt_new_f32dev(c, 1, &KC) : NULL;
    if (bt) {
        tt_fill_uniform(bt, -0.75f, 0.75f);
        tt_to_dev(bt);
    }
    TT *wl = NULL;
    DittoTensor wv = w->dev;
    const float *wh = tt_f32(w), *ah = tt_f32(a), *xh = tt_f32(x), *bh = bt ? tt_f32(bt) : NULL;
    if (wlast) {   /* (KC, Ca, 9) -> (KC, 9, Ca) */
        wl = tt_new(c, DITTO_F32, 3, (const int64_t[]){ KC, 9, Ca });
        for (int64_t o = 0; o < KC; o++)
            for (int64_t ci = 0; ci < Ca; ci++)
                for (int k = 0; k < 9; k++)
                    tt_f32(wl)[(o * 9 + k) * Ca + ci] = wh[(o * Ca + ci) * 9 + k];
        tt_to_dev(wl);
        wv.data = wl->dev.data;
        ditto_tensor_set_channels_last(&wv);
    }
    const int64_t R = H * W, ny = N * R * C;
    double *ref = ref_alloc(ny), *gb = ref_alloc(R * KC);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < R; k++)
            for (int64_t o = 0; o < KC; o++) {
                const int64_t py = k / W, px = k % W;
                double g = 0;
                for (int ky = 0; ky < 3; ky++)
                    for (int kx = 0; kx < 3; kx++) {
                        const int64_t iy = py + ky - 1, ix = px + kx - 1;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                            continue;
                        const float *ap = ah + ((n * H + iy) * W + ix) * lda + off, *wp = wh + o * Ca * 9 + ky * 3 + kx;
                        for (int64_t ci = 0; ci < Ca; ci++)
                            g += (double)ap[ci] * wp[ci * 9];
                    }
                gb[k * KC + o] = g + (bh ? bh[o] : 0.0);
            }
        for (int64_t ch = 0; ch < C; ch++) {
            double m = 0, v = 0;
            for (int64_t k = 0; k < Hx * Wx; k++)
                m += xh[(n * Hx * Wx + k) * C + ch];
            m /= (double)(Hx * Wx);
            for (int64_t k = 0; k < Hx * Wx; k++) {
                const double d = xh[(n * Hx * Wx + k) * C + ch] - m;
                v += d * d;
            }
            v /= (double)(Hx * Wx);
            for (int64_t k = 0; k < R; k++) {
                const double xv = xh[((n * Hx + k / W / fh) * Wx + k % W / fw) * C + ch];
                const double o = (xv - m) / sqrt(v + 1e-5) * (1.0 + gb[k * KC + ch]) + (gonly ? 0.0 : gb[k * KC + C + ch]);
                ref[(n * R + k) * C + ch] = act && o < 0 ? 0.2 * o : o;
            }
        }
    }
    DittoSpadeParams p = { 1e-5f, act, 0.2f, true, gonly };
    int rc = ditto_op_spade_conv(c->be, &p, &av, &wv, bt ? &bt->dev : NULL, &x->dev, &y->dev);
    if (c->verbose)
        printf("  %s: %s\n", name, ditto_op_spade_conv_fused(c->be, &p, &av, &wv, bt ? &bt->dev : NULL, &x->dev, &y->dev) ? "fused" : "not fused");
    op_check(c, name, rc, y, ref, TOL_CONV_L2, TOL_CONV_MAX);
    free(ref);
    free(gb);
    tt_free(a);
    tt_free(w);
    tt_free(wl);
    tt_free(x);
    tt_free(y);
    tt_free(bt);
}

static void spade_conv_case(TestCtx *c, int64_t N, int64_t H, int64_t W, int64_t Ca, int64_t C, int fh, int fw, bool act, int bias, bool wlast)
{
    spade_conv_case_at(c, N, H, W, Ca, C, fh, fw, act, bias, wlast, Ca, 0);
}

static void spade_conv_negative(TestCtx *c)
{
    if (!test_selected(c, "spade_conv negative"))
        return;
    TT *a = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 2, 4, 6, 5 }), *w = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 6, 5, 3, 3 });
    TT *x = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 2, 2, 3, 3 }), *y = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 2, 4, 6, 3 });
    TT *w1 = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 6, 5, 1, 1 }), *xq = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 2, 3, 3, 3 });
    TT *b5 = tt_new(c, DITTO_F32, 1, (const int64_t[]){ 5 }), *b3 = tt_new(c, DITTO_F32, 1, (const int64_t[]){ 3 });
    DittoSpadeParams sp = { 1e-5f, true, 0.2f, true, false }, sn = sp, sg = sp;
    sn.nhwc = false;
    sg.gamma_only = true;
    expect_rc(c, "spade_conv negative: ok", ditto_op_spade_conv(c->be, &sp, &a->dev, &w->dev, NULL, &x->dev, &y->dev), 0);
    expect_rc(c, "spade_conv negative: NCHW", ditto_op_spade_conv(c->be, &sn, &a->dev, &w->dev, NULL, &x->dev, &y->dev), DITTO_ERR_INVAL);
    expect_rc(c, "spade_conv negative: 1x1 w", ditto_op_spade_conv(c->be, &sp, &a->dev, &w1->dev, NULL, &x->dev, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "spade_conv negative: gamma only, w of 2C", ditto_op_spade_conv(c->be, &sg, &a->dev, &w->dev, NULL, &x->dev, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "spade_conv negative: x by 4/3", ditto_op_spade_conv(c->be, &sp, &a->dev, &w->dev, NULL, &xq->dev, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "spade_conv negative: a as x", ditto_op_spade_conv(c->be, &sp, &a->dev, &w->dev, NULL, &a->dev, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "spade_conv negative: bias of 5", ditto_op_spade_conv(c->be, &sp, &a->dev, &w->dev, &b5->dev, &x->dev, &y->dev), DITTO_ERR_SHAPE);
    TT *wg = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 3, 5, 3, 3 });
    expect_rc(c, "spade_conv negative: gamma only, bias of 5", ditto_op_spade_conv(c->be, &sg, &a->dev, &wg->dev, &b5->dev, &x->dev, &y->dev),
              DITTO_ERR_SHAPE);
    expect_rc(c, "spade_conv negative: gamma only ok", ditto_op_spade_conv(c->be, &sg, &a->dev, &wg->dev, &b3->dev, &x->dev, &y->dev), 0);
    /* y over x's bytes (x as y, no upsampling), or over a's */
    TT *x2 = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 2, 2, 3, 3 }), *a2 = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 2, 2, 3, 5 });
    DittoTensor ya = a2->dev;
    ya.shape[3] = 3;
    ditto_tensor_set_contiguous(&ya);
    expect_rc(c, "spade_conv negative: y is x", ditto_op_spade_conv(c->be, &sp, &a2->dev, &w->dev, NULL, &x2->dev, &x2->dev), DITTO_ERR_INVAL);
    expect_rc(c, "spade_conv negative: y over a", ditto_op_spade_conv(c->be, &sp, &a2->dev, &w->dev, NULL, &x2->dev, &ya), DITTO_ERR_INVAL);
    const bool fused = ditto_op_spade_conv_fused(c->be, &sn, &a->dev, &w->dev, NULL, &x->dev, &y->dev);
    test_report(c, "spade_conv negative: NCHW not fused", !fused, "fused query %s", fused ? "true" : "false");
    /*
     * a as channels [2, 7) of a (2,4,6,9) tensor: taken; as the first 6
     * columns of a (2,4,12,5) one, or the first 4 rows of a (2,8,6,5) one
     * (the rows' pitch no multiple of the pixels'): rejected
     */
    TT *aw = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 2, 4, 6, 9 }), *ac = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 2, 4, 12, 5 });
    TT *ah = tt_new(c, DITTO_F32, 4, (const int64_t[]){ 2, 8, 6, 5 });
    tt_fill_uniform(aw, -1.0f, 1.0f);
    tt_fill_uniform(ac, -1.0f, 1.0f);
    tt_fill_uniform(ah, -1.0f, 1.0f);
    tt_to_dev(aw);
    tt_to_dev(ac);
    tt_to_dev(ah);
    DittoTensor as, acol, arow;
    ditto_tensor_slice(&aw->dev, 3, 2, 7, 1, &as);
    ditto_tensor_slice(&ac->dev, 2, 0, 6, 1, &acol);
    ditto_tensor_slice(&ah->dev, 1, 0, 4, 1, &arow);
    expect_rc(c, "spade_conv negative: a a channel slice ok", ditto_op_spade_conv(c->be, &sp, &as, &w->dev, NULL, &x->dev, &y->dev), 0);
    expect_rc(c, "spade_conv negative: a columns of a wider tensor", ditto_op_spade_conv(c->be, &sp, &acol, &w->dev, NULL, &x->dev, &y->dev),
              DITTO_ERR_INVAL);
    expect_rc(c, "spade_conv negative: a rows of a taller tensor", ditto_op_spade_conv(c->be, &sp, &arow, &w->dev, NULL, &x->dev, &y->dev),
              DITTO_ERR_INVAL);
    tt_free(aw);
    tt_free(ac);
    tt_free(ah);
    tt_free(a);
    tt_free(a2);
    tt_free(w);
    tt_free(x);
    tt_free(x2);
    tt_free(y);
    tt_free(w1);
    tt_free(xq);
    tt_free(b5);
    tt_free(b3);
    tt_free(wg);
}

static void norm_negative(TestCtx *c)
{
    if (!test_selected(c, "norm negative"))
        return;
    TT *x = tt_new(c, DITTO_F32, 4, (int64_t[]){ 2, 6, 5, 7 }), *y = tt_new(c, DITTO_F32, 4, (int64_t[]){ 2, 6, 5, 7 });
    TT *y2 = tt_new(c, DITTO_F32, 4, (int64_t[]){ 2, 6, 7, 5 });
    TT *v6 = tt_new(c, DITTO_F32, 1, (int64_t[]){ 6 }), *v7 = tt_new(c, DITTO_F32, 1, (int64_t[]){ 7 });
    TT *x2 = tt_new(c, DITTO_F32, 2, (int64_t[]){ 2, 6 });
    expect_rc(c, "norm negative: batch_norm mean size", ditto_op_batch_norm(c->be, 1e-5f, &x->dev, &v7->dev, &v6->dev, NULL, NULL, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "norm negative: batch_norm without var", ditto_op_batch_norm(c->be, 1e-5f, &x->dev, &v6->dev, NULL, NULL, NULL, &y->dev), DITTO_ERR_INVAL);
    expect_rc(c, "norm negative: instance_norm x/y differ", ditto_op_instance_norm(c->be, 1e-5f, &x->dev, NULL, NULL, &y2->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "norm negative: instance_norm 2-D x", ditto_op_instance_norm(c->be, 1e-5f, &x2->dev, NULL, NULL, &x2->dev), DITTO_ERR_SHAPE);
    {
        TT *gb = tt_new(c, DITTO_F32, 4, (int64_t[]){ 2, 12, 5, 7 }), *gbad = tt_new(c, DITTO_F32, 4, (int64_t[]){ 2, 6, 5, 7 });
        DittoSpadeParams sp = { 1e-5f, true, 0.2f, false, false }, spl = { 1e-5f, true, 0.2f, true, false };
        expect_rc(c, "norm negative: spade_norm gb not 2C", ditto_op_spade_norm(c->be, &sp, &x->dev, &gbad->dev, NULL, &y->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "norm negative: spade_norm x/y differ", ditto_op_spade_norm(c->be, &sp, &x->dev, &gb->dev, NULL, &y2->dev), DITTO_ERR_SHAPE);
        DittoTensor alias = gb->dev;   /* first half of gb as y */
        alias.shape[1] = 6;
        alias.stride[0] = 6 * 5 * 7;
        expect_rc(c, "norm negative: spade_norm y aliases gb", ditto_op_spade_norm(c->be, &sp, &x->dev, &gb->dev, NULL, &alias), DITTO_ERR_INVAL);
        /* the bias has 2C = 12 entries; C (6) or the channels-last 2C (14) do not fit */
        TT *b14 = tt_new(c, DITTO_F32, 1, (int64_t[]){ 14 });
        expect_rc(c, "norm negative: spade_norm bias of C", ditto_op_spade_norm(c->be, &sp, &x->dev, &gb->dev, &v6->dev, &y->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "norm negative: spade_norm bias of 2C+2", ditto_op_spade_norm(c->be, &sp, &x->dev, &gb->dev, &b14->dev, &y->dev), DITTO_ERR_SHAPE);
        /* gamma only: gb and the bias have C channels; the 2C ones do not fit */
        DittoSpadeParams sg = { 1e-5f, true, 0.2f, false, true };
        expect_rc(c, "norm negative: spade_norm gamma only, gb of 2C", ditto_op_spade_norm(c->be, &sg, &x->dev, &gb->dev, NULL, &y->dev), DITTO_ERR_SHAPE);
        TT *b12 = tt_new(c, DITTO_F32, 1, (int64_t[]){ 12 });
        expect_rc(c, "norm negative: spade_norm gamma only, bias of 2C", ditto_op_spade_norm(c->be, &sg, &x->dev, &gbad->dev, &b12->dev, &y->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "norm negative: spade_norm gamma only ok", ditto_op_spade_norm(c->be, &sg, &x->dev, &gbad->dev, &v6->dev, &y->dev), 0);
        tt_free(b12);
        /* channels-last: x (2,6,5,7) has C = 7, so gb needs (2,6,5,14); the NCHW gb does not fit */
        TT *gbl = tt_new(c, DITTO_F32, 4, (int64_t[]){ 2, 6, 5, 14 });
        expect_rc(c, "norm negative: spade_norm nhwc gb in NCHW order", ditto_op_spade_norm(c->be, &spl, &x->dev, &gb->dev, NULL, &y->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "norm negative: spade_norm nhwc ok", ditto_op_spade_norm(c->be, &spl, &x->dev, &gbl->dev, NULL, &y->dev), 0);
        expect_rc(c, "norm negative: spade_norm nhwc bias ok", ditto_op_spade_norm(c->be, &spl, &x->dev, &gbl->dev, &b14->dev, &y->dev), 0);
        /* upsampled x: integer factors of a 2-D x only; gb follows y */
        TT *yu = tt_new(c, DITTO_F32, 4, (int64_t[]){ 2, 6, 10, 14 }), *gbu = tt_new(c, DITTO_F32, 4, (int64_t[]){ 2, 12, 10, 14 });
        TT *yq = tt_new(c, DITTO_F32, 4, (int64_t[]){ 2, 6, 10, 15 }), *gbq = tt_new(c, DITTO_F32, 4, (int64_t[]){ 2, 12, 10, 15 });
        TT *x3 = tt_new(c, DITTO_F32, 3, (int64_t[]){ 2, 6, 5 }), *y3 = tt_new(c, DITTO_F32, 3, (int64_t[]){ 2, 6, 10 });
        TT *g3 = tt_new(c, DITTO_F32, 3, (int64_t[]){ 2, 12, 10 });
        expect_rc(c, "norm negative: spade_norm upsampled ok", ditto_op_spade_norm(c->be, &sp, &x->dev, &gbu->dev, NULL, &yu->dev), 0);
        expect_rc(c, "norm negative: spade_norm upsampled gb of x", ditto_op_spade_norm(c->be, &sp, &x->dev, &gb->dev, NULL, &yu->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "norm negative: spade_norm factor 15/7", ditto_op_spade_norm(c->be, &sp, &x->dev, &gbq->dev, NULL, &yq->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "norm negative: spade_norm upsampled 1-D", ditto_op_spade_norm(c->be, &sp, &x3->dev, &g3->dev, NULL, &y3->dev), DITTO_ERR_SHAPE);
        tt_free(yu);
        tt_free(gbu);
        tt_free(yq);
        tt_free(gbq);
        tt_free(x3);
        tt_free(y3);
        tt_free(g3);
        tt_free(gbl);
        tt_free(b14);
        tt_free(gb);
        tt_free(gbad);
    }
    expect_rc(c, "norm negative: layer_norm weight size", ditto_op_layer_norm(c->be, 1e-5f, false, &x->dev, &v6->dev, NULL, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "norm negative: layer_norm cf bias size", ditto_op_layer_norm(c->be, 1e-5f, true, &x->dev, NULL, &v7->dev, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "norm negative: group_norm groups 4 of 6", ditto_op_group_norm(c->be, 4, 1e-5f, &x->dev, NULL, NULL, &y->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "norm negative: group_norm weight size", ditto_op_group_norm(c->be, 3, 1e-5f, &x->dev, &v7->dev, NULL, &y->dev), DITTO_ERR_SHAPE);
    tt_free(x);
    tt_free(y);
    tt_free(y2);
    tt_free(v6);
    tt_free(v7);
    tt_free(x2);
}

void test_ops_norm(TestCtx *c)
{
    static const int64_t s4a[] = { 1, 7, 5, 9 }, s4b[] = { 3, 13, 4, 5 }, s5[] = { 3, 5, 3, 4, 5 }, s3[] = { 3, 6, 11 };
    static const int64_t s2[] = { 3, 5 }, sbig[] = { 2, 5, 17, 19 }, srow[] = { 1, 3, 768 }, s1[] = { 9 };
    for (int affine = 0; affine < 4; affine++) {
        norm_case(c, NK_BATCH, 4, s4a, 0, affine, 0, 1e-5f);
        norm_case(c, NK_BATCH, 5, s5, 0, affine, 0, 1e-5f);
        norm_case(c, NK_BATCH, 2, s2, 0, affine, 0, 1e-5f);
        norm_case(c, NK_INSTANCE, 4, s4a, 0, affine, 0, 1e-5f);
        norm_case(c, NK_INSTANCE, 4, s4b, 0, affine, 0, 1e-5f);
        norm_case(c, NK_INSTANCE, 3, s3, 0, affine, 0, 1e-5f);
        norm_case(c, NK_LAYER, 3, s3, 0, affine, 0, 1e-5f);
        norm_case(c, NK_LAYER, 4, s4b, 0, affine, 0, 1e-6f);
        norm_case(c, NK_LAYER, 3, srow, 0, affine, 0, 1e-6f);
        norm_case(c, NK_LAYER, 1, s1, 0, affine, 0, 1e-5f);
        norm_case(c, NK_LAYER_CF, 4, s4a, 0, affine, 0, 1e-6f);
        norm_case(c, NK_LAYER_CF, 4, s4b, 0, affine, 0, 1e-6f);
        norm_case(c, NK_LAYER_CF, 4, sbig, 0, affine, 0, 1e-6f);   /* 323 positions: more than one 256 block */
        norm_case(c, NK_LAYER_CF, 2, s2, 0, affine, 0, 1e-6f);
        norm_case(c, NK_GROUP, 4, s4b, 1, affine, 0, 1e-5f);
        norm_case(c, NK_GROUP, 4, s4b, 13, affine, 0, 1e-5f);
        norm_case(c, NK_GROUP, 3, s3, 3, affine, 0, 1e-5f);
        norm_case(c, NK_GROUP, 5, s5, 5, affine, 0, 1e-5f);
        norm_case(c, NK_GROUP, 4, (const int64_t[]){ 3, 12, 5, 7 }, 4, affine, 0, 1e-6f);
    }
    for (int act = 0; act < 2; act++) {
        spade_case(c, 4, s4a, act, 0, false);
        spade_case(c, 4, s4b, act, 0, act);
        spade_case(c, 4, (const int64_t[]){ 2, 3, 24, 40 }, act, 0, false);   /* planes longer than a warp set */
        spade_case(c, 3, s3, act, 0, false);
        spade_case(c, 5, s5, act, 0, false);
    }
    spade_case(c, 4, s4b, true, 1000, false);
    /* planes a multiple of 8 (the vectorised f16 path on CUDA), one longer than a block sweep */
    spade_case(c, 4, (const int64_t[]){ 2, 3, 8, 16 }, true, 0, false);
    spade_case(c, 4, (const int64_t[]){ 3, 2, 64, 40 }, false, 0, true);
    spade_case(c, 4, (const int64_t[]){ 2, 3, 8, 16 }, true, 1000, false);
    /*
     * channels-last: C a multiple of 8 (the vectorised f16 kernels on CUDA:
     * more than one 512-position range, a partial 64-channel tile, in place,
     * offset) and not (the generic kernel); 3-D and 5-D tensors.
     */
    for (int act = 0; act < 2; act++) {
        spade_case_opt(c, 4, (const int64_t[]){ 2, 5, 7, 6 }, act, 0, false, true, SPADE_NO_BIAS);
        spade_case_opt(c, 4, (const int64_t[]){ 3, 4, 5, 16 }, act, 0, act, true, SPADE_NO_BIAS);
        spade_case_opt(c, 4, (const int64_t[]){ 2, 24, 40, 72 }, act, 0, false, true, SPADE_NO_BIAS);
        spade_case_opt(c, 3, (const int64_t[]){ 3, 11, 8 }, act, 0, false, true, SPADE_NO_BIAS);
        spade_case_opt(c, 5, (const int64_t[]){ 2, 3, 4, 5, 8 }, act, 0, false, true, SPADE_NO_BIAS);
    }
    spade_case_opt(c, 4, (const int64_t[]){ 2, 16, 33, 24 }, true, 1000, false, true, SPADE_NO_BIAS);
    spade_case_opt(c, 4, (const int64_t[]){ 2, 5, 7, 6 }, true, 1000, true, true, SPADE_NO_BIAS);
    /*
     * with the gamma / beta bias: every kernel of both layouts (NCHW planes a
     * multiple of 8 or not, channels-last C a multiple of 8 or not), in
     * place, offset, and a float32 bias with fp16 activations
     */
    for (int act = 0; act < 2; act++) {
        for (int nhwc = 0; nhwc < 2; nhwc++) {
            spade_case_opt(c, 4, (const int64_t[]){ 2, 5, 7, 6 }, act, 0, false, nhwc, SPADE_BIAS);
            spade_case_opt(c, 4, (const int64_t[]){ 2, 3, 8, 16 }, act, 0, act, nhwc, SPADE_BIAS);
            spade_case_opt(c, 4, (const int64_t[]){ 2, 24, 40, 72 }, act, 0, false, nhwc, SPADE_BIAS);
            spade_case_opt(c, 3, (const int64_t[]){ 3, 11, 8 }, act, 0, false, nhwc, SPADE_BIAS);
        }
    }
    spade_case_opt(c, 4, (const int64_t[]){ 2, 16, 33, 24 }, true, 1000, false, true, SPADE_BIAS);
    spade_case_opt(c, 4, (const int64_t[]){ 2, 3, 8, 16 }, true, 1000, false, false, SPADE_BIAS);
    spade_case_opt(c, 4, (const int64_t[]){ 2, 3, 8, 16 }, true, 0, false, false, SPADE_BIAS_F32);
    spade_case_opt(c, 4, (const int64_t[]){ 2, 24, 40, 72 }, true, 0, false, true, SPADE_BIAS_F32);
    /*
     * x read nearest-upsampled (2-D): both layouts, the channels-last f16
     * kernels (C a multiple of 8, statistics over more than one 512-position
     * range) and the generic ones, square and unequal factors
     */
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        for (int wide = 0; wide < 2; wide++) {
            spade_case_up(c, 4, (const int64_t[]){ 2, 5, 7, 6 }, true, 0, false, nhwc, SPADE_BIAS, 2, wide);
            spade_case_up(c, 4, (const int64_t[]){ 2, 24, 40, 16 }, wide, 0, false, nhwc, SPADE_BIAS, 2, wide);
            spade_case_up(c, 4, (const int64_t[]){ 3, 4, 5, 8 }, true, 0, false, nhwc, SPADE_NO_BIAS, 3, wide);
        }
        spade_case_up(c, 4, (const int64_t[]){ 2, 16, 12, 24 }, true, 1000, false, nhwc, SPADE_BIAS, 2, false);
    }
    /*
     * channels-last with C / 8 dividing the block (CUDA: a thread keeps its 8
     * channels): more positions than the grid covers in one step (the
     * strided loop), 3 items, upsampled
     */
    spade_case_up(c, 4, (const int64_t[]){ 3, 55, 55, 64 }, true, 0, false, true, SPADE_BIAS, 2, false);
    /*
     * gamma only (gb and bias of C channels, no beta), every kernel: NCHW
     * planes a multiple of 8 or not, channels-last C a multiple of 8 with C / 8
     * dividing the block or not, and not a multiple of 8; upsampled, in place
     */
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        spade_case_opt(c, 4, (const int64_t[]){ 2, 5, 7, 6 }, false, 0, false, nhwc, SPADE_BIAS | SPADE_GAMMA_ONLY);
        spade_case_opt(c, 4, (const int64_t[]){ 2, 3, 8, 16 }, true, 0, true, nhwc, SPADE_BIAS | SPADE_GAMMA_ONLY);
        spade_case_opt(c, 4, (const int64_t[]){ 2, 24, 40, 72 }, false, 0, false, nhwc, SPADE_NO_BIAS | SPADE_GAMMA_ONLY);
        spade_case_up(c, 4, (const int64_t[]){ 2, 24, 40, 16 }, false, 0, false, nhwc, SPADE_BIAS | SPADE_GAMMA_ONLY, 2, true);
    }
    spade_case_up(c, 4, (const int64_t[]){ 3, 55, 55, 64 }, false, 0, false, true, SPADE_BIAS | SPADE_GAMMA_ONLY, 2, false);
    /* large common offset: catches single-pass float variance */
    norm_case(c, NK_BATCH, 4, s4b, 0, 2, 1000, 1e-5f);
    norm_case(c, NK_INSTANCE, 4, s4b, 0, 2, 1000, 1e-5f);
    norm_case(c, NK_INSTANCE, 4, s4a, 0, 0, 1000, 1e-5f);
    norm_case(c, NK_LAYER, 3, srow, 0, 2, 1000, 1e-6f);
    norm_case(c, NK_LAYER, 3, s3, 0, 0, 1000, 1e-5f);
    norm_case(c, NK_LAYER_CF, 4, sbig, 0, 2, 1000, 1e-6f);
    norm_case(c, NK_LAYER_CF, 4, s4b, 0, 0, 1000, 1e-6f);
    norm_case(c, NK_GROUP, 4, (const int64_t[]){ 3, 12, 5, 7 }, 4, 2, 1000, 1e-5f);
    norm_case(c, NK_GROUP, 3, s3, 2, 0, 1000, 1e-5f);
    norm_negative(c);
    /* spade_conv: small odd sizes (CUDA's generic kernel), then the fused kernel's geometry (CUDA fp16, w channels-last) */
    spade_conv_case(c, 2, 5, 7, 6, 4, 1, 1, true, SPADE_BIAS, false);
    spade_conv_case(c, 2, 6, 8, 5, 3, 2, 2, true, SPADE_BIAS | SPADE_GAMMA_ONLY, true);
    spade_conv_case(c, 1, 4, 6, 8, 8, 2, 3, false, SPADE_BIAS_F32, true);
    spade_conv_case(c, 2, 8, 128, 128, 64, 2, 2, true, SPADE_BIAS, true);             /* an up block's norm_1: x at half size */
    spade_conv_case(c, 2, 4, 64, 64, 128, 1, 1, true, SPADE_BIAS | SPADE_GAMMA_ONLY, true);
    spade_conv_case(c, 1, 8, 64, 64, 128, 1, 1, false, SPADE_BIAS_F32, true);          /* two column tiles */
    spade_conv_case(c, 1, 4, 192, 128, 64, 2, 2, true, SPADE_NO_BIAS, true);           /* three 64-pixel segments a row */
    spade_conv_case(c, 1, 8, 128, 64, 128, 2, 2, true, SPADE_BIAS | SPADE_GAMMA_ONLY, true); /* an up block's norm_s: 128 channels of x at half size a tile */
    spade_conv_case(c, 1, 4, 64, 64, 64, 1, 1, true, SPADE_BIAS, false);               /* w not channels-last: not fused */
    /* a a channel slice (the decoder's merged mlp_shared): generic sizes, then the fused kernel's with pitches of 192 and 384 */
    spade_conv_case_at(c, 2, 5, 7, 6, 4, 1, 1, true, SPADE_BIAS, false, 13, 5);
    spade_conv_case_at(c, 2, 4, 64, 64, 64, 1, 1, true, SPADE_BIAS, true, 192, 64);
    spade_conv_case_at(c, 1, 8, 64, 128, 128, 2, 2, true, SPADE_BIAS | SPADE_GAMMA_ONLY, true, 384, 256);
    /* more tiles (4 rows x 64 pixels x 64 channels) than an H200 has SMs: the persistent grid's second round (GPU only: a 2.6 G MAC reference) */
    if (c->be->device != DITTO_DEVICE_CPU) {
        spade_conv_case(c, 1, 68, 128, 64, 256, 1, 2, true, SPADE_BIAS, true);
        spade_conv_case(c, 2, 72, 128, 64, 256, 2, 2, true, SPADE_BIAS | SPADE_GAMMA_ONLY, true);   /* gamma only: 144 tiles of 128 channels */
    }
    spade_conv_negative(c);
}
