/* DDIM sampler of the LMDM (ditto-architecture.md 3.5); see ddim.h for the numerics and the noise layout. */
#include "pipeline/ddim.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "nn/blocks.h"
#include "nn/weights.h"   /* DITTO_SHAPE */

#define DDIM_COS_S 0.008
#define DDIM_MAX_BETA 0.999
#define DDIM_ETA 1.0
#define DDIM_PI 3.14159265358979323846

/* f(k) = cos^2(((k/T) + s)/(1 + s) * pi/2), in double as upstream */
static double cosine_f(int k)
{
    double v = cos(((double)k / DITTO_LMDM_T + DDIM_COS_S) / (1.0 + DDIM_COS_S) * DDIM_PI * 0.5);
    return v * v;
}

/* Upstream's float32 time grid: int(linspace(-1, 999, S+1)), torch's two-sided float32 formula, truncated. */
static int grid_time(int steps, int i)
{
    const int n = steps + 1;
    const float start = -1.0f, end = (float)(DITTO_LMDM_T - 1);
    const float step = (end - start) / (float)steps;
    float v;
    if (i < n / 2) {
        float di = step * (float)i;
        v = start + di;
    } else {
        float di = step * (float)(n - 1 - i);
        v = end - di;
    }
    return (int)v;   /* toward zero, as .int() */
}

static void coef_stock_f32(float a, float an, DittoDdimStep *st)
{
    /* operation by operation as upstream's float32 tensors: eta * ((1 - a/an) * (1 - an) / (1 - a)).sqrt() */
    float r = a / an;
    float u = 1.0f - r;
    float v = 1.0f - an;
    float w = u * v;
    float q = w / (1.0f - a);
    float sigma = (float)DDIM_ETA * sqrtf(q);
    /* (1 - an - sigma ** 2).sqrt(), clamped: the float32 residue is negative for S = 3 (upstream NaN) */
    float c2 = v - sigma * sigma;
    st->sigma = sigma;
    st->c = sqrtf(c2 > 0.0f ? c2 : 0.0f);
    st->alpha_next_sqrt = sqrtf(an);
}

static void coef_exact(float af, float anf, DittoDdimStep *st)
{
    double a = af, an = anf;
    double sigma = DDIM_ETA * sqrt((1.0 - a / an) * (1.0 - an) / (1.0 - a));
    /* 1 - an - sigma^2 = a (1 - an)^2 / (an (1 - a)) for eta = 1: no cancellation */
    double c = (1.0 - an) * sqrt(a / (an * (1.0 - a)));
    st->sigma = (float)sigma;
    st->c = (float)c;
    st->alpha_next_sqrt = (float)sqrt(an);
}

int ditto_ddim_schedule_init(DittoDdimSchedule *s, int steps, DittoDdimCoef coef)
{
    if (!s || (coef != DITTO_DDIM_COEF_EXACT && coef != DITTO_DDIM_COEF_STOCK_F32))
        return DITTO_ERR_INVAL;
    if (steps < 1 || steps > DITTO_DDIM_MAX_STEPS)
        return DITTO_ERR_RANGE;
    memset(s, 0, sizeof *s);
    s->steps = steps;
    s->coef = coef;

    /* cosine schedule: double betas -> float32 alphas -> cumprod accumulated in double, stored float32 */
    const double f0 = cosine_f(0);
    double acc = 1.0;
    for (int k = 0; k < DITTO_LMDM_T; k++) {
        double ab_k = cosine_f(k) / f0, ab_k1 = cosine_f(k + 1) / f0;
        double beta = 1.0 - ab_k1 / ab_k;
        beta = beta < 0.0 ? 0.0 : beta > DDIM_MAX_BETA ? DDIM_MAX_BETA : beta;
        s->betas[k] = (float)beta;
        float alpha = 1.0f - s->betas[k];
        acc *= alpha;
        float ab = (float)acc;
        s->alphas_cumprod[k] = ab;
        s->sqrt_recip1m[k] = sqrtf(1.0f / (1.0f - ab));
        s->sqrt_recipm1[k] = sqrtf(1.0f / ab - 1.0f);
    }

    /* time pairs, from the reversed grid */
    for (int j = 0; j < steps; j++) {
        DittoDdimStep *st = &s->step[j];
        st->t = grid_time(steps, steps - j);
        st->t_next = grid_time(steps, steps - j - 1);
        if (st->t_next < 0) {
            st->t_next = -1;
            continue;
        }
        float a = s->alphas_cumprod[st->t], an = s->alphas_cumprod[st->t_next];
        if (coef == DITTO_DDIM_COEF_STOCK_F32)
            coef_stock_f32(a, an, st);
        else
            coef_exact(a, an, st);
        DITTO_ASSERT(isfinite(st->c) && isfinite(st->sigma) && isfinite(st->alpha_next_sqrt));
    }
    return 0;
}

/* ---- sampling ---- */

#define CK(expr) do { rc = (expr); if (rc < 0) goto done; } while (0)
#define NEW(t, ...) CK(ditto_arena_tensor(ws, DITTO_F32, DITTO_SHAPE(__VA_ARGS__), &(t)))

static int check_tensor(DittoBackend *be, const char *name, const DittoTensor *t, int ndim, const int64_t *shape)
{
    return ditto_nn_check_tensor(be, "ddim", name, t, ndim, shape);
}

static int mul_scalar(DittoBackend *be, float alpha, const DittoTensor *x, DittoTensor *y)
{
    DittoUnaryParams p = { DITTO_UNARY_AFFINE, alpha, 0.0f };
    return ditto_op_unary(be, &p, x, y);
}

/* eps = A_t x - x0 / B_t, for one time step. */
static int pred_noise(DittoBackend *be, const DittoDdimSchedule *s, int t, const DittoTensor *x, const DittoTensor *x0, DittoTensor *tmp, DittoTensor *eps)
{
    DITTO_TRY(mul_scalar(be, s->sqrt_recip1m[t], x, eps));                        /* A_t x */
    DITTO_TRY(mul_scalar(be, (float)(1.0 / (double)s->sqrt_recipm1[t]), x0, tmp)); /* x0 / B_t */
    return ditto_op_binary(be, DITTO_BINARY_SUB, eps, tmp, eps);
}

int ditto_ddim_draw_noise(DittoBackend *be, const DittoDdimSchedule *s, uint64_t seed, uint32_t window, DittoTensor *all)
{
    const int S = s->steps;
    if (all->ndim != 4 || all->shape[0] != S + 1)
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "ddim: the noise needs (%d, B, L, F)", S + 1);
    const int64_t B = all->shape[1];
    if ((uint64_t)window + (uint64_t)B > (1u << 24))
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "ddim: window index %u + batch %lld exceeds the RNG stream layout (2^24 windows)", window,
                          (long long)B);
    /*
     * Slot i of window w + b is stream (DDIM, w + b, i): the stream id's
     * fields do not overlap (window and step < 2^24), so it is the sum
     * stream(DDIM, w, 0) + i + b 2^24.
     */
    const DittoRandnParams rp = { seed, ditto_rng_stream(DITTO_RNG_PURPOSE_DDIM, window, 0), 1, (uint64_t)1 << 24 };
    DittoTensor flat;
    DITTO_TRY(ditto_tensor_reshape(all, 3, (const int64_t[]){ S + 1, B, all->shape[2] * all->shape[3] }, &flat));
    DITTO_TRY(ditto_op_randn(be, &rp, &flat));
    for (int i = 0; i < S; i++) {
        if (s->step[i].t_next >= 0)
            continue;
        DittoTensor z;
        DITTO_TRY(ditto_tensor_select(all, 0, i + 1, &z));
        DITTO_TRY(ditto_op_fill(be, 0.0f, &z));
    }
    return 0;
}

int ditto_ddim_sample(DittoLmdm *m, DittoArena *ws, const DittoDdimSchedule *s, const DittoTensor *kp_cond, const DittoTensor *cond,
                      const DittoDdimNoise *noise, DittoTensor *out, const DittoTap *tap)
{
    if (!m || !ws || !s || !kp_cond || !cond || !noise || !out)
        return DITTO_ERR_INVAL;
    DittoBackend *be = ditto_lmdm_backend(m);
    const DittoLmdmDims *d = ditto_lmdm_dims(m);
    const int S = s->steps;
    const int64_t B = kp_cond->ndim == 2 ? kp_cond->shape[0] : 0, L = d->seq_len, F = d->nfeats;
    if (S < 1 || S > DITTO_DDIM_MAX_STEPS)
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "ddim: schedule of %d steps (not initialised?)", S);
    DITTO_TRY(check_tensor(be, "out", out, DITTO_SHAPE(B, L, F)));
    const bool all = noise->all != NULL;
    const bool injected = !all && noise->x_T != NULL;
    if (all) {
        DITTO_TRY(check_tensor(be, "noise", noise->all, DITTO_SHAPE(S + 1, B, L, F)));
    } else if (injected) {
        DITTO_TRY(check_tensor(be, "x_T", noise->x_T, DITTO_SHAPE(B, L, F)));
        if (S > 1) {
            int64_t zb = noise->z && noise->z->ndim == 4 && noise->z->shape[1] == 1 ? 1 : B;
            DITTO_TRY(check_tensor(be, "z", noise->z, DITTO_SHAPE(S - 1, zb, L, F)));
        }
    }
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoLmdmCond st;
    DittoTensor x, x0, eps, zall, pred;
    int times[DITTO_DDIM_MAX_STEPS];
    int rc;
    for (int i = 0; i < S; i++)
        times[i] = s->step[i].t;
    CK(ditto_lmdm_cond_init(m, ws, kp_cond, cond, &st, tap));             /* audio-dependent work, once */
    CK(ditto_lmdm_steps_init(m, ws, &st, times, S));                      /* time-dependent work of every step, once */
    NEW(pred, B, 2, L, F);
    NEW(x, B, L, F);
    NEW(x0, B, L, F);
    NEW(eps, B, L, F);
    if (injected) {
        CK(ditto_op_copy(be, noise->x_T, &x));
    } else {
        if (all) {
            zall = *noise->all;
        } else {
            /* every step's noise drawn at once on the device, before the step loop */
            NEW(zall, S + 1, B, L, F);
            CK(ditto_ddim_draw_noise(be, s, noise->seed, noise->window, &zall));
        }
        DittoTensor z0;
        CK(ditto_tensor_select(&zall, 0, 0, &z0));
        CK(ditto_op_copy(be, &z0, &x));                                   /* x_T */
    }
    for (int i = 0; i < S; i++) {
        const DittoDdimStep *sp = &s->step[i];
        ditto_tap(tap, "steps_x_t", &x);
        CK(ditto_lmdm_denoise_step(m, ws, &st, &x, i, &pred, tap));      /* C and U at t: pred (B,2,L,F) */
        DittoTensor xc, xu;
        CK(ditto_tensor_select(&pred, 1, 0, &xc));
        CK(ditto_tensor_select(&pred, 1, 1, &xu));
        const DittoDdimStepParams p = { DITTO_LMDM_GUIDANCE, s->sqrt_recip1m[sp->t], (float)(1.0 / (double)s->sqrt_recipm1[sp->t]),
                                        sp->alpha_next_sqrt, sp->c, sp->sigma };
        if (sp->t_next < 0) {
            CK(ditto_op_ddim_step(be, &p, &xc, &xu, NULL, NULL, out, NULL, NULL));   /* last step: x = x0 = U + w (C - U) */
            ditto_tap(tap, "steps_x_start", out);
            break;
        }
        DittoTensor z;
        if (injected) {
            DittoTensor zi;
            CK(ditto_tensor_select(noise->z, 0, i, &zi));                /* (B or 1, L, F) */
            z = zi;
            if (zi.shape[0] != B) {
                z.shape[0] = B;                                          /* one noise for every window */
                z.stride[0] = 0;
            }
        } else {
            CK(ditto_tensor_select(&zall, 0, i + 1, &z));                 /* z_i */
        }
        /*
         * x0 = U + w (C - U), eps = A_t x - x0 / B_t, x = sqrt(abar_next) x0 + c eps + sigma z in one op,
         * each operation rounded as by separate ops (as pred_noise() does it); x0 and eps are stored for the taps only
         */
        CK(ditto_op_ddim_step(be, &p, &xc, &xu, &x, &z, tap ? &x0 : NULL, tap ? &eps : NULL, &x));
        ditto_tap(tap, "steps_x_start", &x0);
        ditto_tap(tap, "steps_pred_noise", &eps);
    }
done:
    ditto_arena_release(ws, mark);
    return rc;
}

int ditto_ddim_guided_step(DittoLmdm *m, DittoArena *ws, const DittoDdimSchedule *s, const DittoTensor *x, const DittoTensor *kp_cond,
                           const DittoTensor *cond, const int *times, DittoTensor *pred, DittoTensor *x_start, const DittoTap *tap)
{
    if (!m || !ws || !s || !x || !kp_cond || !cond || !times || !x_start)
        return DITTO_ERR_INVAL;
    DittoBackend *be = ditto_lmdm_backend(m);
    const DittoLmdmDims *d = ditto_lmdm_dims(m);
    const int64_t B = kp_cond->ndim == 2 ? kp_cond->shape[0] : 0, L = d->seq_len, F = d->nfeats;
    if (pred)
        DITTO_TRY(check_tensor(be, "pred_noise", pred, DITTO_SHAPE(B, L, F)));
    if (B > INT_MAX)
        return DITTO_ERR_RANGE;
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoLmdmCond st;
    DittoTensor tmp;
    int rc;
    CK(ditto_lmdm_cond_init(m, ws, kp_cond, cond, &st, tap));
    CK(ditto_lmdm_denoise(m, ws, &st, x, times, (int)B, x_start, tap));
    if (pred) {
        NEW(tmp, L, F);
        for (int64_t b = 0; b < B; b++) {
            DittoTensor xb, x0b, pb;
            CK(ditto_tensor_select(x, 0, b, &xb));
            CK(ditto_tensor_select(x_start, 0, b, &x0b));
            CK(ditto_tensor_select(pred, 0, b, &pb));
            CK(pred_noise(be, s, times[b], &xb, &x0b, &tmp, &pb));
        }
    }
done:
    ditto_arena_release(ws, mark);
    return rc;
}
