/*
 * Fused model steps: film (FiLM residual), ddim_step (guided DDIM update)
 * and layer_norm_rotary (FiLM residual + layer norm + rotary).
 *
 * References are double loops over the definitions, read through host views
 * built like the device views (strided, broadcast, stride-0 noise).
 * Tolerances (rel_l2, max_abs / max_ref): film rounds three times, ddim_step
 * up to eleven times along a chain, each operand of order 1: 2e-6 and 4e-6.
 *
 * The contract is stronger than the tolerance: each op must round exactly as
 * the unfused op sequence it replaces (binary MUL/ADD/SUB, affine unary
 * alpha v + beta with beta = 0), so the LMDM sampler gives the same bits
 * fused or not. The "seq_exact" cases run that sequence on the backend under
 * test and compare bit for bit, with signed zeros among the inputs (the
 * affine's + 0 turns -0 into +0). Skipped in fp16 storage mode, where the
 * sequence rounds its intermediates to float16.
 *
 * layer_norm_rotary: the reference rounds the FiLM residual in float as the
 * film op does, then forms the norm in double (two-pass statistics) and the
 * rotary from the double norm with theta = (float)p * freq rounded to float,
 * as the rotary test does. Tolerances are those of the parts: h 2e-6 (film),
 * a and ra rel_l2 1e-6 and max_abs/max_ref 1e-5 (layer norm: a float
 * rounding of values of order 1 plus float statistics on the GPU; rotary: a
 * few ulp). "seq" runs film, layer_norm and rotary on the backend under test
 * on a copy: the CPU oracle must give the same bits (it is defined as that
 * sequence); other backends fuse with their own reduction order for the
 * double statistics, which can move the float mean or rstd by an ulp, so they
 * are held to rel_l2 and max_abs/max_ref 1e-6 against the sequence instead.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ditto/ditto_error.h"
#include "ops/ops.h"
#include "op_util.h"
#include "test_ops.h"

static bool same_bits(TT *a, TT *b)
{
    if (tt_to_host(a) < 0 || tt_to_host(b) < 0)
        return false;
    return !memcmp(a->host.data, b->host.data, ditto_tensor_nbytes(&a->host));
}

/* Scatter signed zeros into a float input (every 7th element -0, every 11th +0) and upload. */
static void add_zeros(TT *t)
{
    int64_t n = ditto_tensor_numel(&t->host);
    for (int64_t i = 0; i < n; i++) {
        if (i % 7 == 3)
            tt_f32(t)[i] = -0.0f;
        else if (i % 11 == 5)
            tt_f32(t)[i] = 0.0f;
    }
    tt_to_dev(t);
}

/* ---------------- film ---------------- */

/* out (contiguous, h's shape; or h itself when inplace) = h + (scale y + shift) */
static void film_run(TestCtx *c, const char *name, View h, TT *htt, View y, View scale, View shift, bool inplace)
{
    int nd = h.h.ndim;
    int64_t n = ditto_tensor_numel(&h.h), idx[DITTO_MAX_DIMS] = { 0 };
    double *ref = ref_alloc(n);
    for (int64_t i = 0; i < n; i++) {
        ref[i] = op_at_bcast(&h.h, idx, nd) + (op_at_bcast(&scale.h, idx, nd) * op_at_bcast(&y.h, idx, nd) + op_at_bcast(&shift.h, idx, nd));
        op_next_idx(idx, h.h.shape, nd);
    }
    TT *out = inplace ? htt : new_out(c, DITTO_F32, nd, h.h.shape);
    int rc = ditto_op_film(c->be, &h.d, &y.d, &scale.d, &shift.d, &out->dev);
    op_check(c, name, rc, out, ref, 2e-6, 2e-6);
    free(ref);
    if (!inplace)
        tt_free(out);
}

/* The LMDM layout: h, y (B,2,L,D); scale, shift (B,2,1,D) slices of one packed (B,2,2D) FiLM row. */
static void film_lmdm(TestCtx *c, const char *name, int64_t B, int64_t L, int64_t D, bool inplace, bool strided_y)
{
    if (!test_selected(c, name))
        return;
    TT *h = new_normal(c, 4, (int64_t[]){ B, 2, L, D });
    TT *yt = strided_y ? new_normal(c, 4, (int64_t[]){ B, 2, D, L }) : new_normal(c, 4, (int64_t[]){ B, 2, L, D });
    TT *fs = new_rand(c, 4, (int64_t[]){ B, 2, 1, 2 * D }, 0.5f, 1.5f);
    View y = strided_y ? view_permute(view_of(yt), (int[]){ 0, 1, 3, 2 }) : view_of(yt);
    View sc = view_slice(view_of(fs), 3, 0, D, 1), sh = view_slice(view_of(fs), 3, D, 2 * D, 1);
    film_run(c, name, view_of(h), h, y, sc, sh, inplace);
    tt_free(h);
    tt_free(yt);
    tt_free(fs);
}

static void film_shapes(TestCtx *c, const char *name, int nd, const int64_t *shape, int ns, const int64_t *ss, int nb, const int64_t *sb)
{
    if (!test_selected(c, name))
        return;
    TT *h = new_normal(c, nd, shape), *y = new_normal(c, nd, shape);
    TT *sc = new_rand(c, ns, ss, -2, 2), *sh = new_rand(c, nb, sb, -2, 2);
    film_run(c, name, view_of(h), h, view_of(y), view_of(sc), view_of(sh), false);
    tt_free(h);
    tt_free(y);
    tt_free(sc);
    tt_free(sh);
}

/* The fused op against MUL, ADD, ADD binary ops on this backend: the same bits. */
static void film_seq_exact(TestCtx *c, const char *name)
{
    if (!test_selected(c, name) || test_fp16(c))
        return;
    const int64_t B = 3, L = 9, D = 24;
    TT *h = new_normal(c, 4, (int64_t[]){ B, 2, L, D }), *y = new_normal(c, 4, (int64_t[]){ B, 2, L, D });
    TT *sc = new_rand(c, 4, (int64_t[]){ B, 2, 1, D }, -1.5f, 1.5f), *sh = new_rand(c, 4, (int64_t[]){ B, 2, 1, D }, -1.5f, 1.5f);
    add_zeros(h);
    add_zeros(y);
    add_zeros(sh);
    TT *out = new_out(c, DITTO_F32, 4, h->host.shape), *t = new_out(c, DITTO_F32, 4, h->host.shape), *seq = new_out(c, DITTO_F32, 4, h->host.shape);
    int rc = ditto_op_film(c->be, &h->dev, &y->dev, &sc->dev, &sh->dev, &out->dev);
    if (rc >= 0)
        rc = ditto_op_binary(c->be, DITTO_BINARY_MUL, &sc->dev, &y->dev, &t->dev);
    if (rc >= 0)
        rc = ditto_op_binary(c->be, DITTO_BINARY_ADD, &t->dev, &sh->dev, &t->dev);
    if (rc >= 0)
        rc = ditto_op_binary(c->be, DITTO_BINARY_ADD, &h->dev, &t->dev, &seq->dev);
    if (op_ok(c, name, rc))
        test_report(c, name, same_bits(out, seq), "fused vs MUL, ADD, ADD");
    tt_free(h);
    tt_free(y);
    tt_free(sc);
    tt_free(sh);
    tt_free(out);
    tt_free(t);
    tt_free(seq);
}

static void test_film(TestCtx *c)
{
    film_lmdm(c, "film/lmdm", 1, 80, 512, false, false);
    film_lmdm(c, "film/lmdm_b3_inplace", 3, 7, 16, true, false);
    film_lmdm(c, "film/strided_y", 2, 5, 12, false, true);
    film_shapes(c, "film/same_shape", 3, (int64_t[]){ 3, 5, 7 }, 3, (int64_t[]){ 3, 5, 7 }, 3, (int64_t[]){ 3, 5, 7 });
    film_shapes(c, "film/rank1_vec", 3, (int64_t[]){ 3, 5, 7 }, 1, (int64_t[]){ 7 }, 2, (int64_t[]){ 5, 1 });
    film_shapes(c, "film/scalar", 2, (int64_t[]){ 4, 6 }, 0, NULL, 1, (int64_t[]){ 1 });
    film_seq_exact(c, "film/seq_exact");
    if (test_selected(c, "film/err")) {
        TT *h = new_normal(c, 3, (int64_t[]){ 2, 4, 6 }), *y = new_normal(c, 3, (int64_t[]){ 2, 4, 6 }), *y5 = new_normal(c, 3, (int64_t[]){ 2, 4, 5 });
        TT *s = new_normal(c, 3, (int64_t[]){ 2, 1, 6 }), *s5 = new_normal(c, 3, (int64_t[]){ 2, 1, 5 });
        TT *o = new_out(c, DITTO_F32, 3, (int64_t[]){ 2, 4, 6 }), *ot = new_out(c, DITTO_F32, 3, (int64_t[]){ 2, 6, 4 });
        View otv = view_permute(view_of(ot), (int[]){ 0, 2, 1 });
        expect_rc(c, "film/err_y_shape", ditto_op_film(c->be, &h->dev, &y5->dev, &s->dev, &s->dev, &o->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "film/err_scale", ditto_op_film(c->be, &h->dev, &y->dev, &s5->dev, &s->dev, &o->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "film/err_shift", ditto_op_film(c->be, &h->dev, &y->dev, &s->dev, &s5->dev, &o->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "film/err_out_strided", ditto_op_film(c->be, &h->dev, &y->dev, &s->dev, &s->dev, &otv.d), DITTO_ERR_INVAL);
        tt_free(h);
        tt_free(y);
        tt_free(y5);
        tt_free(s);
        tt_free(s5);
        tt_free(o);
        tt_free(ot);
    }
}

/* ---------------- ddim_step ---------------- */

/* Coefficients of a mid-schedule step (t = 499 -> 479 of 50 steps, rounded). */
static DittoDdimStepParams ddim_params(void)
{
    DittoDdimStepParams p = { 2.0f, 1.3937f, 1.0305f, 0.7266f, 0.6794f, 0.1041f };
    return p;
}

/* Double references of x0, eps, x_next at one element. */
static void ddim_ref(const DittoDdimStepParams *p, double cv, double uv, double xv, double zv, double *x0, double *eps, double *xn)
{
    *x0 = uv + p->guidance * (cv - uv);
    *eps = (double)p->a * xv - (double)p->rb * *x0;
    *xn = (double)p->alpha_next_sqrt * *x0 + (double)p->c * *eps + (double)p->sigma * zv;
}

/*
 * pred (B,2,L,F) as the sampler holds it: cond = pred[:,0], uncond = pred[:,1]
 * (strided); x (B,L,F); z (1,L,F) seen as (B,L,F) with stride 0 when shared_z.
 * want: bit 0 x0, bit 1 eps, bit 2 x_next; inplace: x_next is x.
 */
static void ddim_case(TestCtx *c, const char *name, int64_t B, int64_t L, int64_t F, unsigned want, bool inplace, bool shared_z)
{
    if (!test_selected(c, name))
        return;
    const DittoDdimStepParams p = ddim_params();
    TT *pred = new_normal(c, 4, (int64_t[]){ B, 2, L, F }), *x = new_normal(c, 3, (int64_t[]){ B, L, F });
    TT *z = new_normal(c, 3, (int64_t[]){ shared_z ? 1 : B, L, F });
    View cv = view_select(view_of(pred), 1, 0), uv = view_select(view_of(pred), 1, 1), zv = view_of(z);
    if (shared_z) {
        zv.h.shape[0] = zv.d.shape[0] = B;
        zv.h.stride[0] = zv.d.stride[0] = 0;
    }
    int64_t n = B * L * F, idx[3] = { 0 };
    double *r0 = ref_alloc(n), *r1 = ref_alloc(n), *r2 = ref_alloc(n);
    for (int64_t i = 0; i < n; i++) {
        ddim_ref(&p, op_at_bcast(&cv.h, idx, 3), op_at_bcast(&uv.h, idx, 3), op_at_bcast(&x->host, idx, 3), op_at_bcast(&zv.h, idx, 3), &r0[i], &r1[i], &r2[i]);
        op_next_idx(idx, cv.h.shape, 3);
    }
    TT *o0 = want & 1 ? new_out(c, DITTO_F32, 3, x->host.shape) : NULL;
    TT *o1 = want & 2 ? new_out(c, DITTO_F32, 3, x->host.shape) : NULL;
    TT *o2 = want & 4 ? (inplace ? x : new_out(c, DITTO_F32, 3, x->host.shape)) : NULL;
    bool need_x = want & 6;
    int rc = ditto_op_ddim_step(c->be, &p, &cv.d, &uv.d, need_x ? &x->dev : NULL, want & 4 ? &zv.d : NULL, o0 ? &o0->dev : NULL,
                                o1 ? &o1->dev : NULL, o2 ? &o2->dev : NULL);
    char label[96];
    TT *outs[3] = { o0, o1, o2 };
    double *refs[3] = { r0, r1, r2 };
    static const char *const names[3] = { "x0", "eps", "x_next" };
    for (int k = 0; k < 3; k++) {
        if (!outs[k])
            continue;
        snprintf(label, sizeof label, "%s.%s", name, names[k]);
        op_check(c, label, rc, outs[k], refs[k], 4e-6, 4e-6);
    }
    free(r0);
    free(r1);
    free(r2);
    tt_free(o0);
    tt_free(o1);
    if (o2 != x)
        tt_free(o2);
    tt_free(pred);
    tt_free(x);
    tt_free(z);
}

static int affine(TestCtx *c, float alpha, const DittoTensor *x, DittoTensor *y)
{
    DittoUnaryParams p = { DITTO_UNARY_AFFINE, alpha, 0.0f };
    return ditto_op_unary(c->be, &p, x, y);
}

/* The fused op against the sampler's former op sequence on this backend: the same bits. */
static void ddim_seq_exact(TestCtx *c, const char *name)
{
    if (!test_selected(c, name) || test_fp16(c))
        return;
    const DittoDdimStepParams p = ddim_params();
    const int64_t B = 2, L = 11, F = 13;
    const int64_t *sh = (const int64_t[]){ B, L, F };
    TT *cv = new_normal(c, 3, sh), *uv = new_normal(c, 3, sh), *x = new_normal(c, 3, sh), *z = new_normal(c, 3, sh);
    /* some cond == uncond (C - U = +0), and signed zeros everywhere */
    for (int64_t i = 0; i < B * L * F; i += 5)
        tt_f32(cv)[i] = tt_f32(uv)[i];
    add_zeros(cv);
    add_zeros(uv);
    add_zeros(x);
    add_zeros(z);
    TT *x0 = new_out(c, DITTO_F32, 3, sh), *eps = new_out(c, DITTO_F32, 3, sh), *xn = new_out(c, DITTO_F32, 3, sh);
    TT *s0 = new_out(c, DITTO_F32, 3, sh), *s1 = new_out(c, DITTO_F32, 3, sh), *s2 = new_out(c, DITTO_F32, 3, sh), *t = new_out(c, DITTO_F32, 3, sh);
    DittoBackend *be = c->be;
    int rc = ditto_op_ddim_step(be, &p, &cv->dev, &uv->dev, &x->dev, &z->dev, &x0->dev, &eps->dev, &xn->dev);
    /* guidance as lmdm.c did it, then pred_noise and the update as ddim.c did */
    if (rc >= 0) rc = ditto_op_binary(be, DITTO_BINARY_SUB, &cv->dev, &uv->dev, &s0->dev);
    if (rc >= 0) rc = affine(c, p.guidance, &s0->dev, &s0->dev);
    if (rc >= 0) rc = ditto_op_binary(be, DITTO_BINARY_ADD, &uv->dev, &s0->dev, &s0->dev);
    if (rc >= 0) rc = affine(c, p.a, &x->dev, &s1->dev);
    if (rc >= 0) rc = affine(c, p.rb, &s0->dev, &t->dev);
    if (rc >= 0) rc = ditto_op_binary(be, DITTO_BINARY_SUB, &s1->dev, &t->dev, &s1->dev);
    if (rc >= 0) rc = affine(c, p.alpha_next_sqrt, &s0->dev, &s2->dev);
    if (rc >= 0) rc = affine(c, p.c, &s1->dev, &t->dev);
    if (rc >= 0) rc = ditto_op_binary(be, DITTO_BINARY_ADD, &s2->dev, &t->dev, &s2->dev);
    if (rc >= 0) rc = affine(c, p.sigma, &z->dev, &t->dev);
    if (rc >= 0) rc = ditto_op_binary(be, DITTO_BINARY_ADD, &s2->dev, &t->dev, &s2->dev);
    if (op_ok(c, name, rc)) {
        bool b0 = same_bits(x0, s0), b1 = same_bits(eps, s1), b2 = same_bits(xn, s2);
        test_report(c, name, b0 && b1 && b2, "x0 %s, eps %s, x_next %s", b0 ? "same" : "DIFFER", b1 ? "same" : "DIFFER", b2 ? "same" : "DIFFER");
    }
    TT *all[11] = { cv, uv, x, z, x0, eps, xn, s0, s1, s2, t };
    for (int i = 0; i < 11; i++)
        tt_free(all[i]);
}

static void test_ddim_step(TestCtx *c)
{
    ddim_case(c, "ddim_step/all", 3, 80, 265, 7, false, true);
    ddim_case(c, "ddim_step/all_own_z", 2, 5, 7, 7, false, false);
    ddim_case(c, "ddim_step/inplace", 1, 80, 265, 4, true, false);
    ddim_case(c, "ddim_step/guidance_only", 3, 6, 9, 1, false, false);
    ddim_case(c, "ddim_step/x0_eps", 2, 4, 5, 3, false, false);
    ddim_seq_exact(c, "ddim_step/seq_exact");
    if (test_selected(c, "ddim_step/err")) {
        const DittoDdimStepParams p = ddim_params();
        TT *a = new_normal(c, 3, (int64_t[]){ 2, 4, 5 }), *b = new_normal(c, 3, (int64_t[]){ 2, 4, 6 });
        TT *o = new_out(c, DITTO_F32, 3, (int64_t[]){ 2, 4, 5 }), *ob = new_out(c, DITTO_F32, 3, (int64_t[]){ 2, 4, 6 });
        DittoBackend *be = c->be;
        expect_rc(c, "ddim_step/err_no_output", ditto_op_ddim_step(be, &p, &a->dev, &a->dev, &a->dev, &a->dev, NULL, NULL, NULL), DITTO_ERR_INVAL);
        expect_rc(c, "ddim_step/err_no_x", ditto_op_ddim_step(be, &p, &a->dev, &a->dev, NULL, NULL, NULL, &o->dev, NULL), DITTO_ERR_INVAL);
        expect_rc(c, "ddim_step/err_no_z", ditto_op_ddim_step(be, &p, &a->dev, &a->dev, &a->dev, NULL, NULL, NULL, &o->dev), DITTO_ERR_INVAL);
        expect_rc(c, "ddim_step/err_in_shape", ditto_op_ddim_step(be, &p, &a->dev, &b->dev, NULL, NULL, &o->dev, NULL, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "ddim_step/err_out_shape", ditto_op_ddim_step(be, &p, &a->dev, &a->dev, NULL, NULL, &ob->dev, NULL, NULL), DITTO_ERR_SHAPE);
        tt_free(a);
        tt_free(b);
        tt_free(o);
        tt_free(ob);
    }
}

/* ---------------- layer_norm_rotary ---------------- */

#define LNR_EPS 1e-5f

/* The LMDM's rotary frequencies 1 / 10000^(2k / C), float32 on the device by contract. */
static TT *lnr_freqs(TestCtx *c, int64_t C)
{
    TT *f = tt_new_f32dev(c, 1, (int64_t[]){ C / 2 });
    for (int64_t k = 0; k < C / 2; k++)
        tt_f32(f)[k] = (float)(1.0 / pow(10000.0, 2.0 * (double)k / (double)C));
    tt_to_dev(f);
    return f;
}

typedef struct LnrCase {
    View h;              /* (..., L, C) contiguous, of ht */
    TT *ht;
    View y, sc, sh;      /* FiLM operands (y.h.data NULL: none) */
    TT *yt, *ft;
    TT *w, *b;           /* affine (NULL: none) */
    TT *freqs;
    int64_t pos;
} LnrCase;

/* References: hf (the FiLM'd h, with the film op's float roundings), a and ra (double). */
static void lnr_ref(const LnrCase *k, double *hf, double *a, double *ra)
{
    const DittoTensor *h = &k->h.h;
    const int nd = h->ndim;
    const int64_t L = h->shape[nd - 2], C = h->shape[nd - 1], n = ditto_tensor_numel(h), rows = n / C;
    int64_t idx[DITTO_MAX_DIMS] = { 0 };
    for (int64_t i = 0; i < n; i++) {
        float v = (float)op_at_bcast(h, idx, nd);
        if (k->y.h.data) {
            float t = (float)op_at_bcast(&k->sc.h, idx, nd) * (float)op_at_bcast(&k->y.h, idx, nd);   /* MUL */
            t = t + (float)op_at_bcast(&k->sh.h, idx, nd);                                              /* ADD shift */
            v = v + t;                                                                                  /* ADD residual */
        }
        hf[i] = v;
        op_next_idx(idx, h->shape, nd);
    }
    const float *w = k->w ? tt_f32(k->w) : NULL, *b = k->b ? tt_f32(k->b) : NULL, *f = tt_f32(k->freqs);
    for (int64_t r = 0; r < rows; r++) {
        const double *x = hf + r * C;
        double m = 0, v = 0;
        for (int64_t e = 0; e < C; e++)
            m += x[e];
        m /= (double)C;
        for (int64_t e = 0; e < C; e++)
            v += (x[e] - m) * (x[e] - m);
        double rstd = 1.0 / sqrt(v / (double)C + (double)LNR_EPS);
        double *o = a + r * C, *ro = ra + r * C;
        for (int64_t e = 0; e < C; e++)
            o[e] = (x[e] - m) * rstd * (w ? w[e] : 1.0) + (b ? b[e] : 0.0);
        const float pos = (float)(k->pos + r % L);
        for (int64_t q = 0; q < C / 2; q++) {
            float th = pos * f[q];
            ro[2 * q] = o[2 * q] * cos(th) - o[2 * q + 1] * sin(th);
            ro[2 * q + 1] = o[2 * q + 1] * cos(th) + o[2 * q] * sin(th);
        }
    }
}

/* TF32 values only (low 13 mantissa bits zero) in t after download: reported as name. */
static void lnr_tf32_values(TestCtx *c, const char *name, TT *t)
{
    if (test_fp16(c) || tt_to_host(t) < 0)
        return;
    int64_t n = ditto_tensor_numel(&t->host), bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &tt_f32(t)[i], sizeof u);
        bad += (u & 0x1fffu) != 0;
    }
    test_report(c, name, bad == 0, "%lld of %lld outputs with low mantissa bits", (long long)bad, (long long)n);
}

/*
 * Run the op on k with outputs a and/or ra; checks h (FiLM), a, ra against
 * the references. tf32_out: the references rounded to TF32 too (one TF32 ulp
 * apart at most where the float result sits at a rounding boundary: 2e-3),
 * and the outputs must be TF32 values.
 */
static void lnr_run_opts(TestCtx *c, const char *name, LnrCase *k, bool want_a, bool want_ra, bool tf32_out, bool out16)
{
    const DittoTensor *h = &k->h.h;
    const int64_t n = ditto_tensor_numel(h);
    double *hf = ref_alloc(n), *ra_ref = ref_alloc(n), *a_ref = ref_alloc(n);
    lnr_ref(k, hf, a_ref, ra_ref);
    if (tf32_out) {
        for (int64_t i = 0; i < n; i++) {
            a_ref[i] = ditto_tf32_round((float)a_ref[i]);
            ra_ref[i] = ditto_tf32_round((float)ra_ref[i]);
        }
    }
    if (out16) {
        /* float16 outputs: one rounding of the float result; ra rotates the stored (rounded) a: within 2 float16 ulps */
        for (int64_t i = 0; i < n; i++) {
            a_ref[i] = ditto_half_to_f32(ditto_half_from_f32((float)a_ref[i]));
            ra_ref[i] = ditto_half_to_f32(ditto_half_from_f32((float)ra_ref[i]));
        }
    }
    const double tol = tf32_out || out16 ? 2e-3 : 1e-6, tol_max = tf32_out || out16 ? 2e-3 : 1e-5;
    TT *a = NULL, *ra = NULL;
    if (out16) {
        a = want_a ? tt_new_f16dev(c, h->ndim, h->shape) : NULL;
        ra = want_ra ? tt_new_f16dev(c, h->ndim, h->shape) : NULL;
        if (a)
            tt_to_dev(a);
        if (ra)
            tt_to_dev(ra);
    } else {
        a = want_a ? new_out(c, DITTO_F32, h->ndim, h->shape) : NULL;
        ra = want_ra ? new_out(c, DITTO_F32, h->ndim, h->shape) : NULL;
    }
    const DittoLnRotaryParams p = { .eps = LNR_EPS, .pos_offset = k->pos, .tf32_out = tf32_out };
    const bool film = k->y.h.data != NULL;
    int rc = ditto_op_layer_norm_rotary(c->be, &p, &k->h.d, film ? &k->y.d : NULL, film ? &k->sc.d : NULL, film ? &k->sh.d : NULL,
                                        k->w ? &k->w->dev : NULL, k->b ? &k->b->dev : NULL, &k->freqs->dev, a ? &a->dev : NULL,
                                        ra ? &ra->dev : NULL);
    char label[160];
    if (film) {
        snprintf(label, sizeof label, "%s.h", name);
        op_check(c, label, rc, k->ht, hf, 2e-6, 2e-6);
    }
    if (a) {
        snprintf(label, sizeof label, "%s.a", name);
        if (op_check(c, label, rc, a, a_ref, tol, tol_max) && tf32_out) {
            snprintf(label, sizeof label, "%s.a: TF32 values", name);
            lnr_tf32_values(c, label, a);
        }
    }
    if (ra) {
        snprintf(label, sizeof label, "%s.ra", name);
        if (op_check(c, label, rc, ra, ra_ref, tol, tol_max) && tf32_out) {
            snprintf(label, sizeof label, "%s.ra: TF32 values", name);
            lnr_tf32_values(c, label, ra);
        }
    }
    free(hf);
    free(a_ref);
    free(ra_ref);
    tt_free(a);
    tt_free(ra);
}

static void lnr_run(TestCtx *c, const char *name, LnrCase *k, bool want_a, bool want_ra)
{
    lnr_run_opts(c, name, k, want_a, want_ra, false, false);
}

static void lnr_free(LnrCase *k)
{
    tt_free(k->ht);
    tt_free(k->yt);
    tt_free(k->ft);
    tt_free(k->w);
    tt_free(k->b);
    tt_free(k->freqs);
}

/* h, y (..., L, C) normal; FiLM scale/shift broadcast over dim -2, sliced from a packed buffer as lmdm.c does. */
static void lnr_make(TestCtx *c, LnrCase *k, int nd, const int64_t *shape, bool film, bool affine, int64_t pos)
{
    memset(k, 0, sizeof *k);
    const int64_t C = shape[nd - 1];
    k->ht = new_normal(c, nd, shape);
    k->h = view_of(k->ht);
    k->pos = pos;
    if (film) {
        k->yt = new_normal(c, nd, shape);
        k->y = view_of(k->yt);
        /* packed (..., 3 steps, 1, 2C) rows [1 + scale | shift]; step 1, size 1 over L: (..., 1, C) strided */
        int64_t fs[DITTO_MAX_DIMS + 1];
        for (int i = 0; i < nd - 2; i++)
            fs[i] = shape[i];
        fs[nd - 2] = 3;
        fs[nd - 1] = 1;
        fs[nd] = 2 * C;
        k->ft = new_rand(c, nd + 1, fs, 0.5f, 1.5f);                         /* nd < DITTO_MAX_DIMS in these cases */
        View st = view_select(view_of(k->ft), nd - 2, 1);                       /* (..., 1, 2C) */
        k->sc = view_slice(st, nd - 1, 0, C, 1);
        k->sh = view_slice(st, nd - 1, C, 2 * C, 1);
    }
    if (affine) {
        k->w = new_rand(c, 1, &C, 0.5f, 1.5f);
        k->b = new_rand(c, 1, &C, -0.5f, 0.5f);
    }
    k->freqs = lnr_freqs(c, C);
}

static void lnr_case(TestCtx *c, const char *name, int nd, const int64_t *shape, bool film, bool affine, int64_t pos, bool want_a, bool want_ra)
{
    if (!test_selected(c, name))
        return;
    LnrCase k;
    lnr_make(c, &k, nd, shape, film, affine, pos);
    lnr_run(c, name, &k, want_a, want_ra);
    lnr_free(&k);
}

/* Same bits (after download); *err = max(rel_l2, max_abs/max_ref) of x against y. */
static bool lnr_same(TT *x, TT *y, double *err)
{
    if (tt_to_host(x) < 0 || tt_to_host(y) < 0)
        return false;
    size_t n = (size_t)ditto_tensor_numel(&x->host);
    double *ref = ref_alloc((int64_t)n);
    for (size_t i = 0; i < n; i++)
        ref[i] = tt_f32(y)[i];
    TestErr e = test_compare(tt_f32(x), ref, n);
    free(ref);
    double rmax = e.max_ref > 0 ? e.max_abs / e.max_ref : e.max_abs;
    *err = e.nonfinite ? INFINITY : e.rel_l2 > rmax ? e.rel_l2 : rmax;
    return e.nonfinite == 0 && !memcmp(x->host.data, y->host.data, ditto_tensor_nbytes(&x->host));
}

/* The fused op against film, layer_norm, rotary on this backend (CPU: the same bits; others 1e-6). */
static void lnr_seq(TestCtx *c, const char *name, int nd, const int64_t *shape, int64_t pos)
{
    if (!test_selected(c, name) || test_fp16(c))
        return;
    LnrCase k;
    lnr_make(c, &k, nd, shape, true, true, pos);
    add_zeros(k.yt);
    TT *h2 = tt_new(c, DITTO_F32, nd, shape);
    memcpy(tt_f32(h2), tt_f32(k.ht), ditto_tensor_nbytes(&h2->host));
    tt_to_dev(h2);
    TT *a = new_out(c, DITTO_F32, nd, shape), *ra = new_out(c, DITTO_F32, nd, shape);
    TT *a2 = new_out(c, DITTO_F32, nd, shape), *ra2 = new_out(c, DITTO_F32, nd, shape);
    const DittoLnRotaryParams p = { .eps = LNR_EPS, .pos_offset = pos };
    DittoBackend *be = c->be;
    int rc = ditto_op_layer_norm_rotary(be, &p, &k.h.d, &k.y.d, &k.sc.d, &k.sh.d, &k.w->dev, &k.b->dev, &k.freqs->dev, &a->dev, &ra->dev);
    if (rc >= 0)
        rc = ditto_op_film(be, &h2->dev, &k.y.d, &k.sc.d, &k.sh.d, &h2->dev);
    if (rc >= 0)
        rc = ditto_op_layer_norm(be, LNR_EPS, false, &h2->dev, &k.w->dev, &k.b->dev, &a2->dev);
    const int64_t L = shape[nd - 2], C = shape[nd - 1], N = ditto_tensor_numel(&k.h.h) / (L * C);
    View a3 = view_reshape(view_of(a2), 3, (int64_t[]){ N, L, C }), r3 = view_reshape(view_of(ra2), 3, (int64_t[]){ N, L, C });
    if (rc >= 0)
        rc = ditto_op_rotary(be, pos, &a3.d, &k.freqs->dev, &r3.d);
    if (op_ok(c, name, rc)) {
        double eh = 0, ea = 0, er = 0;
        bool bh = lnr_same(k.ht, h2, &eh), ba = lnr_same(a, a2, &ea), br = lnr_same(ra, ra2, &er);
        bool exact = be->device == DITTO_DEVICE_CPU;
        bool ok = exact ? bh && ba && br : bh && ea <= 1e-6 && er <= 1e-6;
        test_report(c, name, ok, "h %s, a %s (%.2g), ra %s (%.2g) vs film, layer_norm, rotary%s", bh ? "same" : "DIFFER", ba ? "same" : "differ",
                    ea, br ? "same" : "differ", er, exact ? " (bits required)" : " (1e-6)");
    }
    lnr_free(&k);
    tt_free(h2);
    tt_free(a);
    tt_free(ra);
    tt_free(a2);
    tt_free(ra2);
}

static void test_layer_norm_rotary(TestCtx *c)
{
    /* the LMDM decoder: h (B, 2 passes, 80, 512), FiLM (B, 2, 1, 512) of a packed row; a and ra, ra only, a only */
    lnr_case(c, "layer_norm_rotary/lmdm_both", 4, (int64_t[]){ 2, 2, 80, 512 }, true, true, 0, true, true);
    lnr_case(c, "layer_norm_rotary/lmdm_ra", 4, (int64_t[]){ 1, 2, 80, 512 }, true, true, 0, false, true);
    lnr_case(c, "layer_norm_rotary/lmdm_a", 4, (int64_t[]){ 1, 2, 80, 512 }, true, true, 0, true, false);
    /* the encoder: no FiLM, (B, L, D) */
    lnr_case(c, "layer_norm_rotary/no_film", 3, (int64_t[]){ 2, 80, 512 }, false, true, 0, true, true);
    /* odd sizes, positions offset, no affine, rank 2 and 5, row widths of every register tile and the wide fallback */
    lnr_case(c, "layer_norm_rotary/c6_pos80", 3, (int64_t[]){ 3, 5, 6 }, true, false, 80, true, true);
    lnr_case(c, "layer_norm_rotary/rank2", 2, (int64_t[]){ 7, 96 }, true, true, 3, true, true);
    lnr_case(c, "layer_norm_rotary/rank5", 5, (int64_t[]){ 2, 1, 3, 4, 10 }, true, true, 0, true, true);
    lnr_case(c, "layer_norm_rotary/c200", 3, (int64_t[]){ 2, 9, 200 }, true, true, 1, true, true);
    lnr_case(c, "layer_norm_rotary/c768", 3, (int64_t[]){ 2, 5, 768 }, true, true, 2, true, true);
    lnr_case(c, "layer_norm_rotary/c1030", 3, (int64_t[]){ 1, 6, 1030 }, true, true, 0, true, true);
    lnr_case(c, "layer_norm_rotary/c2050_wide", 3, (int64_t[]){ 1, 3, 2050 }, true, true, 0, true, true);
    if (test_selected(c, "layer_norm_rotary/lmdm_tf32_out")) {
        LnrCase k;
        lnr_make(c, &k, 4, (int64_t[]){ 1, 2, 80, 512 }, true, true, 0);
        lnr_run_opts(c, "layer_norm_rotary/lmdm_tf32_out", &k, true, true, true, false);
        lnr_free(&k);
    }
    /* float16 outputs from float32 h (the LMDM's float16 operands off the CPU): both, ra only, a only */
    const char *const o16[3] = { "layer_norm_rotary/lmdm_out16", "layer_norm_rotary/lmdm_ra16", "layer_norm_rotary/lmdm_a16" };
    for (int i = 0; i < 3; i++) {
        if (c->be->device == DITTO_DEVICE_CPU || !test_selected(c, o16[i]))
            continue;
        LnrCase k;
        lnr_make(c, &k, 4, (int64_t[]){ 1, 2, 80, 512 }, true, true, 0);
        lnr_run_opts(c, o16[i], &k, i != 1, i != 2, false, true);
        lnr_free(&k);
    }
    if (test_selected(c, "layer_norm_rotary/wide_tf32_out")) {
        LnrCase k;
        lnr_make(c, &k, 3, (int64_t[]){ 1, 3, 2050 }, false, true, 2);
        lnr_run_opts(c, "layer_norm_rotary/wide_tf32_out", &k, true, true, true, false);
        lnr_free(&k);
    }
    lnr_seq(c, "layer_norm_rotary/seq_lmdm", 4, (int64_t[]){ 2, 2, 80, 512 }, 0);
    lnr_seq(c, "layer_norm_rotary/seq_odd", 3, (int64_t[]){ 3, 7, 34 }, 5);
    if (test_selected(c, "layer_norm_rotary/err")) {
        LnrCase k;
        lnr_make(c, &k, 3, (int64_t[]){ 2, 4, 6 }, true, true, 0);
        TT *o = new_out(c, DITTO_F32, 3, (int64_t[]){ 2, 4, 6 }), *o5 = new_out(c, DITTO_F32, 3, (int64_t[]){ 2, 4, 5 });
        TT *h5 = new_normal(c, 3, (int64_t[]){ 2, 4, 5 }), *s2 = new_normal(c, 2, (int64_t[]){ 1, 6 });
        DittoBackend *be = c->be;
        const DittoLnRotaryParams p = { .eps = LNR_EPS };
        DittoTensor *w = &k.w->dev, *b = &k.b->dev, *f = &k.freqs->dev;
        expect_rc(c, "layer_norm_rotary/err_no_output", ditto_op_layer_norm_rotary(be, &p, &k.h.d, NULL, NULL, NULL, w, b, f, NULL, NULL),
                  DITTO_ERR_INVAL);
        expect_rc(c, "layer_norm_rotary/err_film_partial",
                  ditto_op_layer_norm_rotary(be, &p, &k.h.d, &k.y.d, NULL, &k.sh.d, w, b, f, &o->dev, NULL), DITTO_ERR_INVAL);
        expect_rc(c, "layer_norm_rotary/err_odd_c", ditto_op_layer_norm_rotary(be, &p, &h5->dev, NULL, NULL, NULL, NULL, NULL, NULL, &o5->dev, NULL),
                  DITTO_ERR_SHAPE);
        expect_rc(c, "layer_norm_rotary/err_scale_rank",
                  ditto_op_layer_norm_rotary(be, &p, &k.h.d, &k.y.d, &s2->dev, &k.sh.d, w, b, f, &o->dev, NULL), DITTO_ERR_SHAPE);
        expect_rc(c, "layer_norm_rotary/err_no_freqs", ditto_op_layer_norm_rotary(be, &p, &k.h.d, NULL, NULL, NULL, w, b, NULL, NULL, &o->dev),
                  DITTO_ERR_SHAPE);
        expect_rc(c, "layer_norm_rotary/err_y_is_h",
                  ditto_op_layer_norm_rotary(be, &p, &k.h.d, &k.h.d, &k.sc.d, &k.sh.d, w, b, f, &o->dev, NULL), DITTO_ERR_INVAL);
        expect_rc(c, "layer_norm_rotary/err_a_is_h", ditto_op_layer_norm_rotary(be, &p, &k.h.d, NULL, NULL, NULL, w, b, f, &k.h.d, NULL),
                  DITTO_ERR_INVAL);
        expect_rc(c, "layer_norm_rotary/err_a_shape", ditto_op_layer_norm_rotary(be, &p, &k.h.d, NULL, NULL, NULL, w, b, f, &o5->dev, NULL),
                  DITTO_ERR_SHAPE);
        lnr_free(&k);
        tt_free(o);
        tt_free(o5);
        tt_free(h5);
        tt_free(s2);
    }
}

/* ---------------- randn ---------------- */

/*
 * y (A, B, n) against core/rng.h's host draws of the same streams. The CPU
 * backend must give the same bits; a device's double log / sin / cos may
 * move a value by a float ulp where the exact result lies within the last
 * double bit of a float rounding boundary (about 1 in 10^8): at most 1 in
 * 10^5 values may differ, by at most 2 float ulps, every other bit equal. A
 * wrong stream, index, pair or sign changes nearly every value by O(1).
 */
static void randn_case(TestCtx *c, const char *name, int64_t A, int64_t B, int64_t n, uint64_t seed, uint64_t s0, uint64_t sa, uint64_t sb)
{
    if (!test_selected(c, name))
        return;
    TT *y = tt_new_f32dev(c, 3, (int64_t[]){ A, B, n });
    tt_to_dev(y);
    const DittoRandnParams p = { seed, s0, sa, sb };
    int rc = ditto_op_randn(c->be, &p, &y->dev);
    if (!op_ok(c, name, rc) || tt_to_host(y) < 0) {
        tt_free(y);
        return;
    }
    float *ref = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    int64_t differ = 0, far = 0;
    for (int64_t a = 0; a < A; a++) {
        for (int64_t b = 0; b < B; b++) {
            ditto_rng_fill_normal(seed, s0 + (uint64_t)a * sa + (uint64_t)b * sb, 0, ref, (size_t)n);
            const float *got = tt_f32(y) + (a * B + b) * n;
            for (int64_t k = 0; k < n; k++) {
                if (!memcmp(&got[k], &ref[k], sizeof(float)))
                    continue;
                differ++;
                far += !(fabsf(got[k] - ref[k]) <= 2.0f * (nextafterf(fabsf(ref[k]), INFINITY) - fabsf(ref[k])));
            }
        }
    }
    const bool exact = c->be->device == DITTO_DEVICE_CPU;
    const int64_t total = A * B * n;
    const bool ok = tt_guards_ok(y) && far == 0 && (exact ? differ == 0 : differ * 100000 <= total);
    test_report(c, name, ok, "%lld of %lld values differ from the host draws (%lld by more than 2 ulps)", (long long)differ, (long long)total,
                (long long)far);
    free(ref);
    tt_free(y);
}

static void test_randn(TestCtx *c)
{
    /* the sampler's layout: (steps + 1, windows, L F), streams (purpose, window + b, step) */
    const uint64_t ddim0 = ditto_rng_stream(0x44, 3, 0);
    randn_case(c, "randn ddim (51,1,21200)", 51, 1, 21200, 7, ddim0, 1, (uint64_t)1 << 24);
    randn_case(c, "randn ddim (11,3,2120)", 11, 3, 2120, 0x123456789abcdefull, ddim0, 1, (uint64_t)1 << 24);
    /* rows not a multiple of 4 long, single values, zero strides, a 64-bit seed */
    randn_case(c, "randn (2,3,7)", 2, 3, 7, 1, 5, 2, 3);
    randn_case(c, "randn (1,1,1)", 1, 1, 1, 0, 0, 0, 0);
    randn_case(c, "randn (4,2,1030) same stream", 4, 2, 1030, ~0ull, 99, 0, 0);
    randn_case(c, "randn empty", 0, 2, 5, 1, 0, 1, 1);
    {
        const char *name = "randn rejects a 2-D y";
        if (test_selected(c, name)) {
            TT *y2 = tt_new_f32dev(c, 2, (int64_t[]){ 3, 4 });
            const DittoRandnParams p = { 1, 0, 1, 1 };
            bool ok = ditto_op_randn(c->be, &p, &y2->dev) == DITTO_ERR_INVAL;
            tt_free(y2);
            test_report(c, name, ok, "a 2-D y must be refused");
        }
    }
}

void test_ops_fused(TestCtx *c)
{
    test_film(c);
    test_ddim_step(c);
    test_layer_norm_rotary(c);
    test_randn(c);
}
