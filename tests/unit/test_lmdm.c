/*
 * LMDM denoiser (src/models/lmdm.c) and DDIM sampler (src/pipeline/ddim.c).
 *
 * Without fixtures: the cosine schedule and time grid against the values of
 * ditto-architecture.md 3.5, and every step count 1..1000 in both
 * coefficient modes (finite, consistent pairs).
 * With shared/fixtures/ditto: the guided step (lmdm_step_b1, _b3: outputs
 * and both passes), the 6-step sampler with injected noise (lmdm_ddim_s6:
 * output, per-step intermediates, schedule intermediates), sampling for a
 * handful of step counts incl. 3 (upstream NaN), seeded noise (same seed ->
 * bit-identical, other seed or window -> different, a batch of windows ->
 * each window alone), the unconditioned pass not depending on the audio,
 * the per-schedule path (ditto_lmdm_steps_init + ditto_lmdm_denoise_step)
 * against ditto_lmdm_denoise at the same times, and strict loading.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "core/log.h"
#include "fixtures.h"
#include "models/lmdm.h"
#include "pipeline/ddim.h"
#include "test_util.h"
#include "weights/catalog.h"

/* pure functions (fixture README): schedule and coefficient intermediates */
#define FN_TOL_REL_L2 1e-6
#define FN_TOL_MAX 1e-5

/* ---- schedule (no fixtures) ---- */

static bool near(double v, double want, double tol)
{
    return fabs(v - want) <= tol;
}

static void test_schedule_values(TestCtx *c)
{
    DittoDdimSchedule *s = malloc(sizeof *s);
    if (!s)
        abort();
    /* 3.5 reference values */
    int rc = ditto_ddim_schedule_init(s, 50, DITTO_DDIM_COEF_STOCK_F32);
    const float *ab = s->alphas_cumprod;
    test_report(c, "ddim.schedule.betas", rc == 0 && near(s->betas[0], 4.1284e-5, 5e-10) && s->betas[999] == 0.999f, "beta[0] %.5g beta[999] %.6g",
                s->betas[0], s->betas[999]);
    test_report(c, "ddim.schedule.alphas_cumprod", near(ab[0], 0.99995869, 5e-9) && near(ab[19], 0.99825245, 5e-9) && near(ab[999], 2.4287e-9, 5e-14),
                "abar[0] %.8f abar[19] %.8f abar[999] %.5g", ab[0], ab[19], ab[999]);

    /* 50 steps: (999,979), (979,959), ..., (19,-1) */
    int bad = 0;
    for (int j = 0; j < 50; j++) {
        int t = 999 - 20 * j, tn = j == 49 ? -1 : t - 20;
        bad += s->step[j].t != t || s->step[j].t_next != tn;
    }
    test_report(c, "ddim.grid.50", rc == 0 && s->steps == 50 && bad == 0, "%d wrong pairs", bad);

    /* first step and last noisy step (39 -> 19), upstream float32 values */
    const DittoDdimStep *f = &s->step[0], *l = &s->step[48];
    bool ok = near(f->alpha_next_sqrt, 0.0311640, 6e-8) && near(f->c, 0.0015822, 6e-8) && near(f->sigma, 0.9995130, 6e-8);
    ok &= l->t == 39 && l->t_next == 19 && near(l->alpha_next_sqrt, 0.9991258, 6e-8) && near(l->c, 0.0236715, 6e-8) && near(l->sigma, 0.0344559, 6e-8);
    test_report(c, "ddim.coef.stock_f32.50", ok, "first %.7f %.7f %.7f last %.7f %.7f %.7f", f->alpha_next_sqrt, f->c, f->sigma, l->alpha_next_sqrt,
                l->c, l->sigma);

    /* exact mode: the same up to float32 rounding, except c where float32 cancels (0.0015798 exact) */
    rc = ditto_ddim_schedule_init(s, 50, DITTO_DDIM_COEF_EXACT);
    ok = rc == 0 && near(f->alpha_next_sqrt, 0.0311640, 6e-8) && near(f->c, 0.0015798, 6e-8) && near(f->sigma, 0.9995130, 6e-8);
    ok &= near(l->alpha_next_sqrt, 0.9991258, 6e-8) && near(l->c, 0.0236715, 6e-8) && near(l->sigma, 0.0344559, 6e-8);
    test_report(c, "ddim.coef.exact.50", ok, "first %.7f %.7f %.7f last %.7f %.7f %.7f", f->alpha_next_sqrt, f->c, f->sigma, l->alpha_next_sqrt, l->c,
                l->sigma);

    /* 25 steps: 999, 959, ..., 39, -1 */
    rc = ditto_ddim_schedule_init(s, 25, DITTO_DDIM_COEF_EXACT);
    bad = 0;
    for (int j = 0; j < 25; j++)
        bad += s->step[j].t != 999 - 40 * j || s->step[j].t_next != (j == 24 ? -1 : 959 - 40 * j);
    test_report(c, "ddim.grid.25", rc == 0 && bad == 0, "%d wrong pairs", bad);

    /* 3 steps: pairs (999,665), (665,332), (332,-1); upstream's float32 c of the first pair is NaN */
    rc = ditto_ddim_schedule_init(s, 3, DITTO_DDIM_COEF_STOCK_F32);
    ok = rc == 0 && s->step[0].t == 999 && s->step[0].t_next == 665 && s->step[1].t_next == 332 && s->step[2].t_next == -1 && s->step[0].c == 0.0f;
    float c_stock = s->step[0].c;
    rc = ditto_ddim_schedule_init(s, 3, DITTO_DDIM_COEF_EXACT);
    ok &= rc == 0 && near(s->step[0].c, 7.458e-5, 5e-8);
    test_report(c, "ddim.coef.3steps", ok, "c[0] stock %g (clamped), exact %g", c_stock, s->step[0].c);

    test_report(c, "ddim.schedule.range",
                ditto_ddim_schedule_init(s, 0, DITTO_DDIM_COEF_EXACT) == DITTO_ERR_RANGE && ditto_ddim_schedule_init(s, 1001, DITTO_DDIM_COEF_EXACT) == DITTO_ERR_RANGE &&
                    ditto_ddim_schedule_init(s, 5, (DittoDdimCoef)7) == DITTO_ERR_INVAL,
                "");
    free(s);
}

/* Every step count in both modes: finite coefficients, a consistent chain of pairs 999 -> ... -> -1. */
static void test_schedule_all_counts(TestCtx *c)
{
    DittoDdimSchedule *s = malloc(sizeof *s);
    if (!s)
        abort();
    for (int mode = 0; mode < 2; mode++) {
        DittoDdimCoef coef = mode ? DITTO_DDIM_COEF_STOCK_F32 : DITTO_DDIM_COEF_EXACT;
        int bad = 0, first_bad = 0, zero_c = 0;
        double worst = 0;   /* exact mode: |a_next + c^2 + sigma^2 - 1| (DDIM's variance identity) */
        for (int S = 1; S <= DITTO_DDIM_MAX_STEPS; S++) {
            int rc = ditto_ddim_schedule_init(s, S, coef);
            bool ok = rc == 0 && s->steps == S && s->step[0].t == 999 && s->step[S - 1].t_next == -1;
            for (int j = 0; ok && j < S; j++) {
                const DittoDdimStep *st = &s->step[j];
                ok = st->t > st->t_next && st->t < DITTO_LMDM_T && (j == S - 1 || (st->t_next >= 0 && s->step[j + 1].t == st->t_next));
                ok &= isfinite(st->c) && isfinite(st->sigma) && isfinite(st->alpha_next_sqrt) && st->c >= 0 && st->sigma >= 0 && st->sigma <= 1;
                if (ok && j < S - 1) {
                    double an = s->alphas_cumprod[st->t_next];
                    double id = an + (double)st->c * st->c + (double)st->sigma * st->sigma - 1.0;
                    if (mode == 0 && fabs(id) > worst)
                        worst = fabs(id);
                    zero_c += st->c == 0.0f;
                }
            }
            if (!ok && !bad++)
                first_bad = S;
        }
        char name[64];
        snprintf(name, sizeof name, "ddim.all_counts.%s", mode ? "stock_f32" : "exact");
        /* float32 cancels c of the first pair to 0 for 2, 3 (negative residue, clamped) and 4 steps */
        test_report(c, name, bad == 0 && (mode || worst < 1e-6) && zero_c == (mode ? 3 : 0), "%d bad step counts (first %d), %d zero c, identity error %.2g",
                    bad, first_bad, zero_c, worst);
    }
    free(s);
}

/* ---- taps: copy named intermediates to host, appended per call ---- */

typedef struct Capture {
    const char *name;
    float *buf;
    size_t cap, used;
    int calls;
} Capture;

typedef struct Captures {
    DittoBackend *be;
    Capture *c;
    int n;
    bool bad;      /* overflow or a strided tap */
} Captures;

static void capture_fn(void *ctx, const char *name, const DittoTensor *t)
{
    Captures *cs = ctx;
    for (int i = 0; i < cs->n; i++) {
        Capture *cp = &cs->c[i];
        if (strcmp(cp->name, name))
            continue;
        size_t n = (size_t)ditto_tensor_numel(t);
        if (cp->used + n > cp->cap || !ditto_tensor_is_contiguous(t) || cs->be->sync(cs->be) < 0 ||
            cs->be->download(cs->be, cp->buf + cp->used, t->data, n * sizeof(float)) < 0) {
            cs->bad = true;
            return;
        }
        cp->used += n;
        cp->calls++;
    }
}

static void capture_init(Capture *cp, const char *name, size_t cap)
{
    memset(cp, 0, sizeof *cp);
    cp->name = name;
    cp->cap = cap;
    cp->buf = malloc(cap * sizeof(float) + 1);
    if (!cp->buf)
        abort();
}

/* ---- models ---- */

/* num_heads of a case's MotionDecoder (submodule_overrides.model.kwargs.num_heads) */
static int case_heads(const cJSON *cs)
{
    const char *const k[4] = { "submodule_overrides", "model", "kwargs", "num_heads" };
    const cJSON *h = json_path(cs, k, 4);
    return cJSON_IsNumber(h) ? h->valueint : 8;
}

/* lmdm_step_b1 / _b3: one guided step, per-sample time steps */
static void test_step_case(TestCtx *c, const Fixtures *fx, DittoLmdm *m, const DittoDdimSchedule *s, const char *name)
{
    const cJSON *cs = fixture_case(fx, name);
    const cJSON *iof = cJSON_GetObjectItemCaseSensitive(cs, "io_file");
    if (!cs || !cJSON_IsString(iof)) {
        test_report(c, name, false, "case missing from the manifest");
        return;
    }
    DittoCatalog *io = fixture_open(c, fx, iof->valuestring);
    if (!io)
        return;
    TT *x = io_input_required(c, io, "x"), *kp = io_input_required(c, io, "cond_frame"), *cond = io_input_required(c, io, "cond");
    size_t nt = 0;
    float *tf = io_read(io, "time_cond", &nt);
    if (!x || !kp || !cond || !tf) {
        test_report(c, name, false, "inputs missing");
        goto out;
    }
    int64_t B = x->host.shape[0];
    int times[64];
    for (size_t i = 0; i < nt && i < 64; i++)
        times[i] = (int)tf[i];
    TT *pred = tt_new(c, DITTO_F32, 3, x->host.shape), *xs = tt_new(c, DITTO_F32, 3, x->host.shape);
    size_t n = (size_t)ditto_tensor_numel(&x->host);
    Capture cp[2];
    capture_init(&cp[0], "x_start_uncond", n);
    capture_init(&cp[1], "x_start_cond", n);
    Captures caps = { c->be, cp, 2, false };
    DittoTap tap = { capture_fn, &caps };
    DittoArena ws;
    ditto_arena_init(&ws, &c->be->allocator, 0);
    int rc = (int64_t)nt == B ? ditto_ddim_guided_step(m, &ws, s, &x->dev, &kp->dev, &cond->dev, times, &pred->dev, &xs->dev, &tap) : DITTO_ERR_SHAPE;
    char label[96];
    snprintf(label, sizeof label, "%s.run", name);
    if (test_report(c, label, rc == 0 && !caps.bad && cp[0].calls == 1 && cp[1].calls == 1 && ws.live == 0, "rc %d (%s), arena live %zu", rc,
                    ditto_strerror(rc), ws.live)) {
        double tol, tmax;
        tt_to_host(pred);
        tt_to_host(xs);
        fixture_tol(cs, "pred_noise", &tol, &tmax);
        snprintf(label, sizeof label, "%s.pred_noise", name);
        check_ref(c, label, tt_f32(pred), n, io, "pred_noise", tol, tmax);
        fixture_tol(cs, "x_start", &tol, &tmax);
        snprintf(label, sizeof label, "%s.x_start", name);
        check_ref(c, label, tt_f32(xs), n, io, "x_start", tol, tmax);
        snprintf(label, sizeof label, "%s.x_start_uncond", name);
        check_ref(c, label, cp[0].buf, n, io, "x_start_uncond", tol, tmax);
        snprintf(label, sizeof label, "%s.x_start_cond", name);
        check_ref(c, label, cp[1].buf, n, io, "x_start_cond", tol, tmax);
    }

    /* the unconditioned pass must not see the audio: another condition, the same U bit for bit */
    if (rc == 0) {
        TT *cond2 = tt_new(c, DITTO_F32, cond->host.ndim, cond->host.shape);
        tt_fill_normal(cond2, 0.0f, 1.0f);
        tt_to_dev(cond2);
        float *u1 = cp[0].buf, *c1 = cp[1].buf;
        capture_init(&cp[0], "x_start_uncond", n);
        capture_init(&cp[1], "x_start_cond", n);
        rc = ditto_ddim_guided_step(m, &ws, s, &x->dev, &kp->dev, &cond2->dev, times, NULL, &xs->dev, &tap);
        bool ok = rc == 0 && cp[0].used == n && !memcmp(u1, cp[0].buf, n * sizeof(float)) && memcmp(c1, cp[1].buf, n * sizeof(float));
        snprintf(label, sizeof label, "%s.uncond_ignores_audio", name);
        test_report(c, label, ok, "rc %d", rc);
        free(u1);
        free(c1);
        tt_free(cond2);
    }
    ditto_arena_free(&ws);
    free(cp[0].buf);
    free(cp[1].buf);
    tt_free(pred);
    tt_free(xs);
out:
    free(tf);
    tt_free(x);
    tt_free(kp);
    tt_free(cond);
    ditto_catalog_close(&io);
}

/* Compare a schedule vector with an io reference. */
static void check_sched(TestCtx *c, const char *label, const float *v, size_t n, DittoCatalog *io, const char *ref)
{
    check_ref(c, label, v, n, io, ref, FN_TOL_REL_L2, FN_TOL_MAX);
}

/* lmdm_ddim_s6: the sampler with injected noise */
static void test_ddim_case(TestCtx *c, const Fixtures *fx, DittoLmdm *m)
{
    const cJSON *cs = fixture_case(fx, "lmdm_ddim_s6");
    const cJSON *iof = cJSON_GetObjectItemCaseSensitive(cs, "io_file");
    const cJSON *sj = cJSON_GetObjectItemCaseSensitive(cs, "sampling_timesteps");
    if (!cs || !cJSON_IsString(iof) || !cJSON_IsNumber(sj)) {
        test_report(c, "lmdm_ddim_s6", false, "case missing from the manifest");
        return;
    }
    const int S = sj->valueint;
    DittoCatalog *io = fixture_open(c, fx, iof->valuestring);
    if (!io)
        return;
    DittoDdimSchedule *s = malloc(sizeof *s);
    if (!s)
        abort();
    TT *kp = io_input_required(c, io, "kp_cond"), *cond = io_input_required(c, io, "aud_cond");
    TT *xT = io_input_required(c, io, "x_T"), *z = io_input_required(c, io, "noise");
    TT *out = NULL;
    Capture cp[3] = { 0 };
    if (!kp || !cond || !xT || !z || S < 1 || S > 64)
        goto done;

    /* schedule intermediates (float64 reference) */
    int rc = ditto_ddim_schedule_init(s, S, DITTO_DDIM_COEF_EXACT);
    check_sched(c, "lmdm_ddim_s6.alphas_cumprod", s->alphas_cumprod, DITTO_LMDM_T, io, "alphas_cumprod");
    float pairs[2 * 64], ans[64], cc[64], sig[64], tcond[64];
    for (int i = 0; i < S; i++) {
        pairs[2 * i] = (float)s->step[i].t;
        pairs[2 * i + 1] = (float)s->step[i].t_next;
        tcond[i] = (float)s->step[i].t;
        ans[i] = s->step[i].alpha_next_sqrt;
        cc[i] = s->step[i].c;
        sig[i] = s->step[i].sigma;
    }
    size_t np = 0, ntc = 0;
    float *rp = io_read(io, "ddim_time_pairs", &np), *rtc = io_read(io, "steps_time_cond", &ntc);
    test_report(c, "lmdm_ddim_s6.ddim_time_pairs", rc == 0 && rp && rtc && np == (size_t)(2 * S) && ntc == (size_t)S &&
                !memcmp(rp, pairs, np * sizeof(float)) && !memcmp(rtc, tcond, ntc * sizeof(float)), "");
    free(rp);
    free(rtc);
    check_sched(c, "lmdm_ddim_s6.ddim_alpha_next_sqrt", ans, (size_t)(S - 1), io, "ddim_alpha_next_sqrt");
    check_sched(c, "lmdm_ddim_s6.ddim_c", cc, (size_t)(S - 1), io, "ddim_c");
    check_sched(c, "lmdm_ddim_s6.ddim_sigma", sig, (size_t)(S - 1), io, "ddim_sigma");

    /* sampling, both coefficient modes */
    out = tt_new(c, DITTO_F32, 3, xT->host.shape);
    size_t n = (size_t)ditto_tensor_numel(&xT->host);
    double tol, tmax;
    fixture_tol(cs, "out", &tol, &tmax);
    for (int mode = 0; mode < 2; mode++) {
        DittoDdimCoef coef = mode ? DITTO_DDIM_COEF_STOCK_F32 : DITTO_DDIM_COEF_EXACT;
        const char *mn = mode ? "stock_f32" : "exact";
        ditto_ddim_schedule_init(s, S, coef);
        for (int k = 0; k < 3; k++)
            free(cp[k].buf);
        capture_init(&cp[0], "steps_x_t", n * (size_t)S);
        capture_init(&cp[1], "steps_x_start", n * (size_t)S);
        capture_init(&cp[2], "steps_pred_noise", n * (size_t)S);
        Captures caps = { c->be, cp, 3, false };
        DittoTap tap = { capture_fn, &caps };
        DittoDdimNoise nz = { .x_T = &xT->dev, .z = &z->dev };
        DittoArena ws;
        ditto_arena_init(&ws, &c->be->allocator, 0);
        rc = ditto_ddim_sample(m, &ws, s, &kp->dev, &cond->dev, &nz, &out->dev, &tap);
        char label[96];
        snprintf(label, sizeof label, "lmdm_ddim_s6.%s.run", mn);
        bool ran = test_report(c, label, rc == 0 && !caps.bad && cp[0].calls == S && cp[1].calls == S && cp[2].calls == S - 1 && ws.live == 0,
                               "rc %d (%s), taps %d %d %d", rc, ditto_strerror(rc), cp[0].calls, cp[1].calls, cp[2].calls);
        ditto_arena_free(&ws);
        if (!ran)
            continue;
        tt_to_host(out);
        snprintf(label, sizeof label, "lmdm_ddim_s6.%s.out", mn);
        check_ref(c, label, tt_f32(out), n, io, "out", tol, tmax);
        if (mode == 0) {
            check_ref(c, "lmdm_ddim_s6.steps_x_t", cp[0].buf, n * (size_t)S, io, "steps_x_t", tol, tmax);
            check_ref(c, "lmdm_ddim_s6.steps_x_start", cp[1].buf, n * (size_t)S, io, "steps_x_start", tol, tmax);
            /* the reference also has the last step's (unused) pred_noise */
            check_ref_prefix(c, "lmdm_ddim_s6.steps_pred_noise", cp[2].buf, n * (size_t)(S - 1), io, "steps_pred_noise", tol, tmax);
        }
    }
done:
    for (int k = 0; k < 3; k++)
        free(cp[k].buf);
    free(s);
    tt_free(out);
    tt_free(kp);
    tt_free(cond);
    tt_free(xT);
    tt_free(z);
    ditto_catalog_close(&io);
}

/* ---- seeded sampling ---- */

typedef struct Inputs {
    TT *kp, *cond;      /* (B, F), (B, L, Cc) */
} Inputs;

static Inputs make_inputs(TestCtx *c, const DittoLmdmDims *d, int64_t B)
{
    Inputs in;
    in.kp = tt_new(c, DITTO_F32, 2, (const int64_t[]){ B, d->nfeats });
    in.cond = tt_new(c, DITTO_F32, 3, (const int64_t[]){ B, d->seq_len, d->cond_dim });
    tt_fill_normal(in.kp, 0.0f, 0.5f);
    tt_fill_normal(in.cond, 0.0f, 1.0f);
    tt_to_dev(in.kp);
    tt_to_dev(in.cond);
    return in;
}

static void free_inputs(Inputs *in)
{
    tt_free(in->kp);
    tt_free(in->cond);
}

/* Sample with seeded noise into a new host buffer (NULL on failure). */
static float *sample_seeded(TestCtx *c, DittoLmdm *m, DittoArena *ws, const DittoDdimSchedule *s, const Inputs *in, uint64_t seed, uint32_t window,
                            int *rc_out)
{
    TT *out = tt_new(c, DITTO_F32, 3, (const int64_t[]){ in->cond->host.shape[0], ditto_lmdm_dims(m)->seq_len, ditto_lmdm_dims(m)->nfeats });
    DittoDdimNoise nz = { .seed = seed, .window = window };
    int rc = ditto_ddim_sample(m, ws, s, &in->kp->dev, &in->cond->dev, &nz, &out->dev, NULL);
    *rc_out = rc;
    float *h = NULL;
    if (rc == 0 && tt_to_host(out) == 0) {
        size_t n = (size_t)ditto_tensor_numel(&out->host);
        h = malloc(n * sizeof *h);
        if (h)
            memcpy(h, tt_f32(out), n * sizeof *h);
    }
    tt_free(out);
    return h;
}

static bool all_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return false;
    return true;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs((double)a[i] - b[i]));
    return mx;
}

static void test_seeded(TestCtx *c, DittoLmdm *m)
{
    const DittoLmdmDims *d = ditto_lmdm_dims(m);
    const size_t n = (size_t)(d->seq_len * d->nfeats);
    DittoDdimSchedule *s = malloc(sizeof *s);
    if (!s)
        abort();
    DittoArena ws;
    ditto_arena_init(&ws, &c->be->allocator, 0);
    Inputs one = make_inputs(c, d, 1);
    int rc1, rc2, rc3, rc4;

    /* determinism: same seed twice -> bit-identical; other seed, other window -> different */
    ditto_ddim_schedule_init(s, 4, DITTO_DDIM_COEF_EXACT);
    float *o1 = sample_seeded(c, m, &ws, s, &one, 7, 0, &rc1);
    float *o2 = sample_seeded(c, m, &ws, s, &one, 7, 0, &rc2);
    float *o3 = sample_seeded(c, m, &ws, s, &one, 8, 0, &rc3);
    float *o4 = sample_seeded(c, m, &ws, s, &one, 7, 1, &rc4);
    bool ran = o1 && o2 && o3 && o4;
    test_report(c, "ddim.seeded.run", ran && ws.live == 0, "rc %d %d %d %d", rc1, rc2, rc3, rc4);
    if (ran) {
        test_report(c, "ddim.seeded.same_seed_identical", !memcmp(o1, o2, n * sizeof(float)) && all_finite(o1, n), "");
        double d13 = max_abs_diff(o1, o3, n), d14 = max_abs_diff(o1, o4, n);
        test_report(c, "ddim.seeded.other_seed_differs", d13 > 1e-2, "max |diff| %.3g", d13);
        test_report(c, "ddim.seeded.other_window_differs", d14 > 1e-2, "max |diff| %.3g", d14);
    }

    /* a batch of two windows equals each window alone (windows 5 and 6) */
    Inputs two = make_inputs(c, d, 2);
    Inputs w0 = { tt_new(c, DITTO_F32, 2, (const int64_t[]){ 1, d->nfeats }), tt_new(c, DITTO_F32, 3, (const int64_t[]){ 1, d->seq_len, d->cond_dim }) };
    Inputs w1 = { tt_new(c, DITTO_F32, 2, (const int64_t[]){ 1, d->nfeats }), tt_new(c, DITTO_F32, 3, (const int64_t[]){ 1, d->seq_len, d->cond_dim }) };
    size_t nk = (size_t)d->nfeats, nc = (size_t)(d->seq_len * d->cond_dim);
    memcpy(tt_f32(w0.kp), tt_f32(two.kp), nk * sizeof(float));
    memcpy(tt_f32(w1.kp), tt_f32(two.kp) + nk, nk * sizeof(float));
    memcpy(tt_f32(w0.cond), tt_f32(two.cond), nc * sizeof(float));
    memcpy(tt_f32(w1.cond), tt_f32(two.cond) + nc, nc * sizeof(float));
    tt_to_dev(w0.kp);
    tt_to_dev(w1.kp);
    tt_to_dev(w0.cond);
    tt_to_dev(w1.cond);
    float *ob = sample_seeded(c, m, &ws, s, &two, 7, 5, &rc1);
    float *a0 = sample_seeded(c, m, &ws, s, &w0, 7, 5, &rc2);
    float *a1 = sample_seeded(c, m, &ws, s, &w1, 7, 6, &rc3);
    if (ob && a0 && a1) {
        /*
         * Equal within float32 rounding (DESIGN: reproducible across batch sizes within the precision
         * tolerance): the CPU linear op (OpenBLAS sgemm) rounds a row differently depending on the
         * number of rows, so bit equality is not required here.
         */
        double *ref = malloc(2 * n * sizeof *ref);
        if (!ref)
            abort();
        for (size_t i = 0; i < n; i++) {
            ref[i] = a0[i];
            ref[n + i] = a1[i];
        }
        TestErr e = test_compare(ob, ref, 2 * n);
        bool bitwise = !memcmp(ob, a0, n * sizeof(float)) && !memcmp(ob + n, a1, n * sizeof(float));
        test_report(c, "ddim.seeded.batch_equals_alone", e.nonfinite == 0 && e.rel_l2 <= 1e-5 && e.max_abs <= 1e-5 * e.max_ref + 1e-6,
                    "rel_l2 %.3g max |diff| %.3g (%s)", e.rel_l2, e.max_abs, bitwise ? "bit-identical" : "not bit-identical");
        free(ref);
    } else {
        test_report(c, "ddim.seeded.batch_equals_alone", false, "rc %d %d %d", rc1, rc2, rc3);
    }

    /* finite motion for a handful of step counts (every count's coefficients: ddim.all_counts) */
    const int counts[] = { 1, 2, 3, 4, 5, 10, 25, 50, 100 };
    for (int mode = 0; mode < 2; mode++) {
        int bad = 0, first = 0;
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
            ditto_ddim_schedule_init(s, counts[k], mode ? DITTO_DDIM_COEF_STOCK_F32 : DITTO_DDIM_COEF_EXACT);
            float *o = sample_seeded(c, m, &ws, s, &one, 11, 3, &rc1);
            if (!o || !all_finite(o, n)) {
                if (!bad++)
                    first = counts[k];
            }
            free(o);
        }
        test_report(c, mode ? "ddim.finite.stock_f32" : "ddim.finite.exact", bad == 0, "%d step counts not finite (first %d)", bad, first);
    }

    free(o1);
    free(o2);
    free(o3);
    free(o4);
    free(ob);
    free(a0);
    free(a1);
    free_inputs(&one);
    free_inputs(&two);
    free_inputs(&w0);
    free_inputs(&w1);
    ditto_arena_free(&ws);
    free(s);
}

/* ---- the per-schedule path: steps_init + denoise_step against denoise at the same times ---- */

static void test_steps_api(TestCtx *c, DittoLmdm *m)
{
    const DittoLmdmDims *d = ditto_lmdm_dims(m);
    const int64_t B = 2, L = d->seq_len, F = d->nfeats;
    const size_t n = (size_t)(B * L * F);
    /* runs of equal spacing, a repeat, a rising pair: every case of the time-table gather */
    const int times[] = { 999, 979, 959, 500, 500, 17, 430, 0 };
    const int S = (int)(sizeof times / sizeof *times);
    DittoArena ws;
    ditto_arena_init(&ws, &c->be->allocator, 0);
    Inputs in = make_inputs(c, d, B);
    TT *x = tt_new(c, DITTO_F32, 3, (const int64_t[]){ B, L, F }), *xs = tt_new(c, DITTO_F32, 3, (const int64_t[]){ B, L, F });
    TT *pred = tt_new(c, DITTO_F32, 4, (const int64_t[]){ B, 2, L, F });
    tt_fill_normal(x, 0.0f, 1.0f);
    tt_to_dev(x);
    double *ref = malloc(n * sizeof *ref);
    if (!ref)
        abort();
    DittoLmdmCond st;
    DittoArenaMark mark = ditto_arena_mark(&ws);
    int rc = ditto_lmdm_cond_init(m, &ws, &in.kp->dev, &in.cond->dev, &st, NULL);
    if (rc == 0)
        rc = ditto_lmdm_steps_init(m, &ws, &st, times, S);
    double worst = 0;
    for (int i = 0; i < S && rc == 0; i++) {
        rc = ditto_lmdm_denoise_step(m, &ws, &st, &x->dev, i, &pred->dev, NULL);
        if (rc == 0)
            rc = ditto_lmdm_denoise(m, &ws, &st, &x->dev, &times[i], 1, &xs->dev, NULL);
        if (rc == 0 && tt_to_host(pred) == 0 && tt_to_host(xs) == 0) {
            const float *p = tt_f32(pred);
            for (int64_t b = 0; b < B; b++)
                for (int64_t k = 0; k < L * F; k++) {
                    double cv = p[(b * 2) * L * F + k], uv = p[(b * 2 + 1) * L * F + k];
                    ref[b * L * F + k] = uv + DITTO_LMDM_GUIDANCE * (cv - uv);
                }
            TestErr e = test_compare(tt_f32(xs), ref, n);
            worst = fmax(worst, e.nonfinite ? INFINITY : e.rel_l2);
        }
    }
    test_report(c, "lmdm.steps.matches_denoise", rc == 0 && worst <= 1e-5, "rc %d (%s), worst rel_l2 %.3g over %d steps", rc, ditto_strerror(rc), worst, S);
    DittoLogger keep = c->be->log;
    c->be->log = (DittoLogger){ 0 };
    int r1 = ditto_lmdm_denoise_step(m, &ws, &st, &x->dev, S, &pred->dev, NULL);
    int r2 = ditto_lmdm_steps_init(m, &ws, &st, (const int[]){ 5, DITTO_LMDM_T }, 2);
    int r3 = ditto_lmdm_denoise_step(m, &ws, &st, &x->dev, 0, &pred->dev, NULL);   /* a rejected init keeps the tables it had */
    c->be->log = keep;
    test_report(c, "lmdm.steps.errors", r1 == DITTO_ERR_RANGE && r2 == DITTO_ERR_RANGE && r3 == 0, "rc %d %d %d", r1, r2, r3);
    ditto_arena_release(&ws, mark);
    test_report(c, "lmdm.steps.arena", ws.live == 0, "arena live %zu", ws.live);
    free(ref);
    tt_free(x);
    tt_free(xs);
    tt_free(pred);
    free_inputs(&in);
    ditto_arena_free(&ws);
}

/* ---- strict loading ---- */

static void test_strict(TestCtx *c, const Fixtures *fx)
{
    DittoLogger quiet = { 0 };
    DittoLogger keep = c->be->log;
    c->be->log = quiet;
    DittoCatalog *cat = fixture_open(c, fx, "stitching.pth");
    if (cat) {
        DittoLmdm *m = NULL;
        int rc = ditto_lmdm_load(&m, c->be, cat, NULL);
        test_report(c, "lmdm.strict.other_network", rc == DITTO_ERR_KEY && !m, "rc %d (%s)", rc, ditto_strerror(rc));
        ditto_lmdm_free(&m);
        ditto_catalog_close(&cat);
    }
    cat = fixture_open(c, fx, "lmdm.pth");
    if (cat) {
        DittoLmdmParams p;
        ditto_lmdm_params_default(&p);
        p.num_heads = 5;   /* does not divide the latent width 32 */
        DittoLmdm *m = NULL;
        int rc = ditto_lmdm_load(&m, c->be, cat, &p);
        test_report(c, "lmdm.strict.heads", rc == DITTO_ERR_INVAL && !m, "rc %d (%s)", rc, ditto_strerror(rc));
        ditto_lmdm_free(&m);
        ditto_catalog_close(&cat);
    }
    c->be->log = keep;
}

/* The audio2motion configuration (80 frames, 1103-d conditions): loads, samples, finite. */
static void test_a2m_model(TestCtx *c, const Fixtures *fx)
{
    DittoLmdm *m = fixture_load_lmdm(c, fx, "lmdm_a2m.pth", 4);
    if (!m)
        return;
    const DittoLmdmDims *d = ditto_lmdm_dims(m);
    DittoDdimSchedule *s = malloc(sizeof *s);
    if (!s)
        abort();
    DittoArena ws;
    ditto_arena_init(&ws, &c->be->allocator, 0);
    Inputs in = make_inputs(c, d, 2);
    ditto_ddim_schedule_init(s, 3, DITTO_DDIM_COEF_STOCK_F32);
    int rc;
    float *o = sample_seeded(c, m, &ws, s, &in, 1, 0, &rc);
    test_report(c, "lmdm_a2m.sample", o && d->seq_len == 80 && d->cond_dim == 1103 && all_finite(o, (size_t)(2 * d->seq_len * d->nfeats)), "rc %d, L %lld, Cc %lld",
                rc, (long long)d->seq_len, (long long)d->cond_dim);
    free(o);
    free_inputs(&in);
    ditto_arena_free(&ws);
    free(s);
    ditto_lmdm_free(&m);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    if (test_selected(&c, "ddim.schedule")) {
        test_schedule_values(&c);
        test_schedule_all_counts(&c);
    }

    Fixtures fx;
    if (!fixtures_load(&fx, ditto_logger_stderr(DITTO_LOG_WARN))) {
        printf("SKIP lmdm fixture tests: no shared/fixtures/ditto/manifest.json\n");
        c.skipped++;
    } else {
        const cJSON *cs = fixture_case(&fx, "lmdm_step_b1");
        DittoLmdm *m = fixture_load_lmdm(&c, &fx, "lmdm.pth", case_heads(cs));
        if (m) {
            DittoDdimSchedule *s = malloc(sizeof *s);
            if (!s)
                abort();
            ditto_ddim_schedule_init(s, DITTO_DDIM_DEFAULT_STEPS, DITTO_DDIM_COEF_EXACT);
            if (test_selected(&c, "lmdm_step_b1"))
                test_step_case(&c, &fx, m, s, "lmdm_step_b1");
            if (test_selected(&c, "lmdm_step_b3"))
                test_step_case(&c, &fx, m, s, "lmdm_step_b3");
            if (test_selected(&c, "lmdm_ddim_s6"))
                test_ddim_case(&c, &fx, m);
            if (test_selected(&c, "ddim.seeded"))
                test_seeded(&c, m);
            if (test_selected(&c, "lmdm.steps"))
                test_steps_api(&c, m);
            free(s);
            ditto_lmdm_free(&m);
        }
        if (test_selected(&c, "lmdm.strict"))
            test_strict(&c, &fx);
        if (test_selected(&c, "lmdm_a2m"))
            test_a2m_model(&c, &fx);
    }
    fixtures_free(&fx);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
