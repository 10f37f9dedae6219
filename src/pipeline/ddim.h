/*
 * DDIM sampler of the LMDM (ditto-architecture.md 3.5): cosine schedule,
 * eta = 1, classifier-free guidance (w = 2), any number of steps 1..1000.
 *
 * Schedule. The cosine schedule (T = 1000, s = 0.008) is computed in double,
 * the betas are cast to float32, alpha = 1 - beta in float32 and
 * alphas_cumprod is their cumulative product accumulated in double and
 * stored as float32 (what torch's CPU cumprod does with float32 input), so
 * alphas_cumprod, A_t = sqrt(1/(1 - abar_t)) and B_t = sqrt(1/abar_t - 1)
 * are the float32 buffers upstream holds. The time grid is upstream's:
 * int(linspace(-1, 999, S+1)) with torch's float32 linspace arithmetic
 * (start + i*step for the first half, end - (S-i)*step for the second),
 * truncated toward zero, reversed and paired; the last pair has t_next = -1.
 *
 * Per-step coefficients, from the float32 alphas_cumprod:
 *   sigma = eta sqrt((1 - a/a_next)(1 - a_next)/(1 - a)),
 *   c     = sqrt(1 - a_next - sigma^2),   alpha_next_sqrt = sqrt(a_next).
 * DITTO_DDIM_COEF_EXACT (default) evaluates them in double and rounds to
 * float32, with c in the cancellation-free form
 * c = (1 - a_next) sqrt(a / (a_next (1 - a))); they then agree with the
 * float64 reference to float32 rounding and are finite for every step
 * count. DITTO_DDIM_COEF_STOCK_F32 repeats upstream's float32 arithmetic
 * operation by operation (bit-identical coefficients), except that the
 * argument of the square root in c is clamped at 0: in float32 it comes out
 * as a small negative rounding residue for 3 steps (pair (999, 665), exact
 * value 5.6e-9), which makes upstream's motion NaN (spec 8, fixture notes).
 * The two modes differ noticeably only where c is tiny (first step of 50:
 * c = 0.0015798 exact vs 0.0015822 stock).
 *
 * Sampling, per window, for each pair (t, t_next):
 *   x0  = G(x, t) = U + 2 (C - U)              (C, U: ditto_lmdm_denoise_step)
 *   eps = A_t x - x0 / B_t
 *   x   = x0                                   if t_next < 0 (no clamping)
 *   x   = alpha_next_sqrt x0 + c eps + sigma z otherwise
 * The time-dependent parts of the network are built once per call for all
 * steps (ditto_lmdm_steps_init); the three lines above are one op
 * (ditto_op_ddim_step) that rounds every operation in float32 as separate
 * element-wise ops would.
 *
 * Noise. Either injected (the caller hands in x_T and every z, for parity
 * with upstream dumps; the same z for every window reproduces upstream's
 * noise reuse, spec 8.4) or drawn from the counter-based RNG (core/rng.h):
 * batch item b of a call is window w = noise->window + b and draws
 *   x_T          from stream ditto_rng_stream(DITTO_RNG_PURPOSE_DDIM, w, 0),
 *   z of step i  from stream ditto_rng_stream(DITTO_RNG_PURPOSE_DDIM, w, i + 1)
 *                (i = 0 .. S-2, the steps with t_next >= 0),
 * each as standard normals with element index = row-major (frame, feature)
 * index in the (L, F) window. A window's motion therefore depends only on
 * (seed, window index, step count, its inputs): not on the batch it runs
 * in, the thread count or the order of calls; every window gets fresh
 * noise, and there is no hidden global seed (spec 8.4-8.5).
 *
 * Threading: calls on one model must not run concurrently.
 */
#ifndef DITTO_PIPELINE_DDIM_H
#define DITTO_PIPELINE_DDIM_H

#include <stdint.h>

#include "models/lmdm.h"

#define DITTO_DDIM_MAX_STEPS DITTO_LMDM_T
#define DITTO_DDIM_DEFAULT_STEPS 50
/* RNG purpose id of the diffusion noise (stream = (purpose, window, step)). */
#define DITTO_RNG_PURPOSE_DDIM 0x4444u

typedef enum DittoDdimCoef {
    DITTO_DDIM_COEF_EXACT = 0,     /* double, cancellation-free c (default) */
    DITTO_DDIM_COEF_STOCK_F32,     /* upstream float32 arithmetic, sqrt argument of c clamped at 0 */
} DittoDdimCoef;

typedef struct DittoDdimStep {
    int t;                         /* model time step */
    int t_next;                    /* next time step; -1 on the last step */
    float alpha_next_sqrt;         /* sqrt(abar[t_next]); 0 on the last step */
    float c;                       /* weight of eps; 0 on the last step */
    float sigma;                   /* weight of the fresh noise; 0 on the last step */
} DittoDdimStep;

typedef struct DittoDdimSchedule {
    float betas[DITTO_LMDM_T];            /* beta_k of the cosine schedule, cast to float32 */
    float alphas_cumprod[DITTO_LMDM_T];   /* abar_t, float32 */
    float sqrt_recip1m[DITTO_LMDM_T];     /* A_t = sqrt(1/(1 - abar_t)), float32 */
    float sqrt_recipm1[DITTO_LMDM_T];     /* B_t = sqrt(1/abar_t - 1), float32 */
    int steps;                            /* S */
    DittoDdimCoef coef;
    DittoDdimStep step[DITTO_DDIM_MAX_STEPS];   /* [0, S) */
} DittoDdimSchedule;

/*
 * Fill s for `steps` sampling steps (1..DITTO_DDIM_MAX_STEPS; the default is
 * DITTO_DDIM_DEFAULT_STEPS). Pure host arithmetic. Returns 0, or
 * DITTO_ERR_RANGE for a step count out of range, DITTO_ERR_INVAL for a bad
 * mode. Every coefficient is finite on success.
 */
int ditto_ddim_schedule_init(DittoDdimSchedule *s, int steps, DittoDdimCoef coef);

/*
 * Noise of one ditto_ddim_sample() call. Injected when x_T is set: x_T is
 * (B, L, F) and z is (S-1, B, L, F) or (S-1, 1, L, F) (one noise shared by
 * every window), contiguous float32 on the model's backend; z may be NULL
 * when S == 1. Seeded otherwise, from (seed, window) as described above.
 */
typedef struct DittoDdimNoise {
    const DittoTensor *x_T;
    const DittoTensor *z;
    uint64_t seed;
    uint32_t window;               /* window index of batch item 0 (< 2^24 - B) */
    /*
     * Or all of it already on the device: (S + 1, B, L, F) contiguous float32,
     * slot 0 = x_T, slot i + 1 = z of step i (the last slot is never read).
     * Takes precedence over x_T and the seed; the call then does no host
     * work and no transfer, so it can be captured as a CUDA graph.
     */
    const DittoTensor *all;
} DittoDdimNoise;

/*
 * The seeded noise of windows window .. window + B - 1 into all (S + 1, B,
 * L, F) float32 contiguous on be (the layout of DittoDdimNoise.all), drawn
 * where it lives (ditto_op_randn). Slots of steps that draw no noise (the
 * last) are zeroed.
 */
int ditto_ddim_draw_noise(DittoBackend *be, const DittoDdimSchedule *s, uint64_t seed, uint32_t window, DittoTensor *all);

/*
 * Sample B windows: kp_cond (B, F), cond (B, L, cond_dim) -> out (B, L, F),
 * all contiguous float32 on the model's backend (out caller-allocated, not
 * aliasing the inputs). Scratch from ws is released before returning. Taps
 * per step, in order: "steps_x_t" (x fed to the denoiser, step 0 = x_T),
 * "steps_x_start", and for every step but the last "steps_pred_noise", all
 * (B, L, F). Returns 0 or a negative code (DITTO_ERR_SHAPE / _INVAL / _RANGE
 * for bad arguments, DITTO_ERR_NOMEM, op errors).
 */
int ditto_ddim_sample(DittoLmdm *m, DittoArena *ws, const DittoDdimSchedule *s, const DittoTensor *kp_cond, const DittoTensor *cond,
                      const DittoDdimNoise *noise, DittoTensor *out, const DittoTap *tap);

/*
 * One guided denoiser step as upstream's LMDM.forward: for each sample b at
 * its own time step times[b] in [0, 1000): x_start = G(x, t) and
 * pred_noise = A_t x - x_start / B_t (may be NULL). x, x_start, pred_noise
 * (B, L, F), kp_cond (B, F), cond (B, L, cond_dim). Only the float32 buffers
 * of s are used (any step count). Taps as ditto_lmdm_denoise().
 */
int ditto_ddim_guided_step(DittoLmdm *m, DittoArena *ws, const DittoDdimSchedule *s, const DittoTensor *x, const DittoTensor *kp_cond,
                           const DittoTensor *cond, const int *times, DittoTensor *pred_noise, DittoTensor *x_start, const DittoTap *tap);

#endif
