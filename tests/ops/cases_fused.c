/*
 * Fused model steps: film (FiLM residual) and ddim_step (guided DDIM update).
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
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

void test_ops_fused(TestCtx *c)
{
    test_film(c);
    test_ddim_step(c);
}
