/*
 * Audio2Motion (ditto-architecture.md 3.4, 3.11): the LMDM run over sliding
 * windows of S = 80 condition frames, fused into one 265-d motion track.
 *
 * Windows. Window w covers condition rows [w V, w V + S) of the stream
 * pushed so far (V = S - O, O = overlap_v2). A window shorter than S (only
 * at the end of the stream) is padded by repeating its last row. Offline:
 * windows start at 0, V, 2V, ... while the start is < N, so there are
 * ceil(N / V) of them. Online (3.11): the first O rows pushed are the
 * warm-up rows (silence features, global frames -O..-1); full windows run
 * as soon as their rows are there, and ditto_a2m_finish() runs one final
 * padded window holding whatever rows are left.
 *
 * One window, with pred = sampler(kp_cond, window) (S, 265):
 *   first window:  res = pred; smooth(res, 0, S)
 *   later windows: L = len(res); for k < F, a = float32(k / F):
 *                    res[L-F+k] = res[L-F+k] (1 - a) + pred[S-V-F+k] a
 *                  append pred[S-V .. S)                (len(res) = L + V)
 *                  smooth(res, L-F, L+1)                (the join, again)
 *   kp_cond of the next window = res[len(res) - O - 1]; with fix_kp_cond
 *   K > 0, after every K-th window (counting from 1) it is reset to the
 *   source motion s_kp_cond instead, optionally keeping dims [ds, de) of
 *   res[len(res) - O - 1].
 * F = O offline, min(O, V) online. smooth(res, s, e) replaces dims [0, 202)
 * (scale, pose logits, t; never exp) of frames s..e-1 by the mean of the
 * frames [i - k/2, i + k/2] (k = smo_k_d = 3) of a copy taken before the
 * loop, truncated at both ends of res; k <= 1 disables it.
 *
 * Output. Offline: res truncated to N frames, then smooth(res, 0, N) once
 * more over the whole track (join frames are smoothed twice, first-window
 * frames twice, spec 8.16). Online: no final smoothing; frame a of the audio
 * is res[O + a].
 *
 * Incremental use. Push condition rows as they come (any count per call);
 * every window whose rows are complete runs at once, and every frame that
 * no later window can change is handed to the emit callback, in order:
 * offline frames i < len(res) - F - k/2 (their final smoothing reads only
 * frames that no later fusion touches), online frames < len(res) - F. After
 * ditto_a2m_finish() every frame has been emitted: N offline, the number of
 * non-warm-up rows online.
 *
 * Departures from upstream, all online and deliberate:
 *  - upstream emits from res index S - F, which is frame 0 of the audio
 *    only when O >= S/2; for O < S/2 it silently drops the first S - 2O
 *    audio frames. Here emission starts at audio frame 0 for every O (for
 *    O >= S/2 the frames and the schedule are upstream's).
 *  - upstream's final window emits up to V frames generated from padding,
 *    past the end of the audio (spec 8.15); here exactly one frame per
 *    audio frame is emitted.
 *  - upstream pads a short final window by repeating the last audio feature
 *    and builds conditions for the padded frames with their own frame
 *    indices; here the last condition row is repeated (identical for image
 *    sources; those frames are never emitted).
 *
 * Noise is the sampler's business: ditto_a2m_lmdm_*() below draws it from
 * the counter-based RNG keyed by (seed, window, step), or takes it injected.
 *
 * Memory: all buffers are allocated by ditto_a2m_open() (a few windows of
 * motion and one window of conditions); nothing is allocated per window.
 * Threading: one DittoA2m must not be used from two threads at once; the
 * callbacks run on the caller's thread, inside push/finish.
 */
#ifndef DITTO_PIPELINE_AUDIO2MOTION_H
#define DITTO_PIPELINE_AUDIO2MOTION_H

#include <stdbool.h>
#include <stdint.h>

#include "ditto/ditto_types.h"
#include "models/lmdm.h"
#include "pipeline/ddim.h"
#include "pipeline/motion.h"

#define DITTO_A2M_SEQ_FRAMES 80        /* S, the LMDM window */
#define DITTO_A2M_OVERLAP 10           /* O, upstream's overlap_v2 default */
#define DITTO_A2M_SMOOTH_K 3           /* smo_k_d */
#define DITTO_A2M_SMOOTH_DIMS 202      /* smoothing covers [0, 202): scale, pitch, yaw, roll, t */

/*
 * Produce one window: pred (S, 265) from kp_cond (265) and cond (S,
 * cond_dim), both row-major host arrays. window = w (0-based, the warm-up
 * window online counts as 0). Returns 0 or a negative code, which aborts
 * the driver (it then stays in a failed state).
 */
typedef int (*DittoA2mSampleFn)(void *ctx, int64_t window, const float *kp_cond, const float *cond, float *pred);

typedef struct DittoA2mSampler {
    DittoA2mSampleFn fn;
    void *ctx;
    int64_t seq_frames;   /* window length the sampler produces (0: not checked) */
    int64_t cond_dim;     /* condition width it expects (0: not checked) */
} DittoA2mSampler;

/*
 * Receive n finished frames motion (n, 265), output frames first ..
 * first+n-1 (offline: frame index; online: audio frame index). The array
 * is only valid during the call. Return 0 or a negative code (aborts).
 */
typedef int (*DittoA2mEmitFn)(void *ctx, int64_t first, const float *motion, int64_t n);

typedef struct DittoA2mEmit {
    DittoA2mEmitFn fn;
    void *ctx;
} DittoA2mEmit;

typedef struct DittoA2mParams {
    int seq_frames;           /* S [80] */
    int overlap;              /* O, 0 <= O < S [10; online upstream uses 70..75] */
    bool online;              /* F = min(O, V), warm-up rows, no final smoothing */
    int smooth_k;             /* smo_k_d, 0 <= k <= S [3]; k <= 1: off */
    int fix_kp_cond;          /* K >= 0 [0]: reset kp_cond to s_kp_cond after every K-th window */
    int fix_kp_cond_dim[2];   /* [ds, de) kept from res on a reset; ds >= de: none [0, 0] */
    int64_t cond_dim;         /* condition width [1103] */
    const float *v_min_max;   /* (2, 265) per-dim [min; max] for cvt_fmt, or NULL; copied at open */
} DittoA2mParams;

/* S 80, O 10, offline, k 3, no kp_cond reset, cond_dim 1103, no clip. */
void ditto_a2m_params_default(DittoA2mParams *p);

/*
 * Windows a stream of n frames needs (n audio frames online, not counting
 * the warm-up rows): offline ceil(n / V); online the full windows of the
 * O + n rows plus the final one. Negative code for bad params.
 */
int64_t ditto_a2m_num_windows(const DittoA2mParams *p, int64_t n);

typedef struct DittoA2m DittoA2m;

/*
 * s_kp_cond (265): the source frame-0 motion (dic2arr of x_s_info without
 * kp, scale - 1), the kp_cond of window 0; copied. emit.fn may be NULL
 * (frames are then dropped; tests of the bookkeeping). Errors:
 * DITTO_ERR_INVAL for bad params or a missing sampler, DITTO_ERR_SHAPE when
 * the sampler's window or condition width differs, DITTO_ERR_NOMEM.
 */
int ditto_a2m_open(DittoA2m **out, const DittoA2mParams *p, const float *s_kp_cond, DittoA2mSampler sampler, DittoA2mEmit emit,
                   const DittoLogger *log);
/* Accepts NULL and *a == NULL; sets *a to NULL. */
void ditto_a2m_close(DittoA2m **a);

/*
 * Append n condition rows cond (n, cond_dim) to the stream (online: the
 * first O rows of the stream are the warm-up rows) and run every window
 * they complete. Returns 0, DITTO_ERR_AGAIN after finish, DITTO_ERR_BADSTATE
 * after an earlier failure, or the sampler's / emitter's error.
 */
int ditto_a2m_push(DittoA2m *a, const float *cond, int64_t n);
/*
 * End of stream: run the padded tail window(s) and emit every remaining
 * frame. Offline with no rows: DITTO_ERR_INVAL. Calling it twice: AGAIN.
 */
int ditto_a2m_finish(DittoA2m *a);

typedef struct DittoA2mStatus {
    int64_t rows;          /* condition rows pushed (online: warm-up included) */
    int64_t windows;       /* windows sampled */
    int64_t emitted;       /* frames handed to emit */
    int64_t res_len;       /* len(res) (upstream's untrimmed length) */
    bool finished;
} DittoA2mStatus;

void ditto_a2m_status(const DittoA2m *a, DittoA2mStatus *st);
/* kp_cond (265) the next window will get. */
const float *ditto_a2m_kp_cond(const DittoA2m *a);
/* res[0] after the first window (online: upstream's stitch reference d0, before cvt_fmt); NULL before it. */
const float *ditto_a2m_d0(const DittoA2m *a);

/* cvt_fmt (3.6): motion (n, 265) -> n x_d_info, clipped with the params' v_min_max when set. */
void ditto_a2m_cvt_fmt(const DittoA2m *a, const float *motion, int64_t n, DittoXInfo *out);

/*
 * The whole offline driver (upstream _audio2motion_offline without cvt_fmt):
 * cond (n, cond_dim) -> motion (n, 265), res_kp_seq after truncation and
 * the final smoothing, not clipped. p->online must be false.
 */
int ditto_a2m_offline(const DittoA2mParams *p, const float *s_kp_cond, DittoA2mSampler sampler, const float *cond, int64_t n, float *motion,
                      const DittoLogger *log);

/* ---- the LMDM sampler: one DDIM run (3.5) per window ---- */

typedef struct DittoA2mLmdmParams {
    int steps;                 /* DDIM steps [50] */
    DittoDdimCoef coef;        /* [DITTO_DDIM_COEF_EXACT] */
    uint64_t seed;             /* seeded noise: window w draws from (seed, w, step) [0] */
    /*
     * Injected noise, in upstream's order (spec 3.5, 8.4), on the model's
     * backend: x_T (W, L, F) or (W, 1, L, F), row w = the initial x of
     * window w; z (steps-1, 1, L, F), the step noises shared by every
     * window. NULL x_T: seeded.
     */
    const DittoTensor *x_T;
    const DittoTensor *z;
    /*
     * Replay windows as one CUDA graph on backends that capture [true]: the
     * first window runs op by op (sizes settle), the second is captured
     * (cond_init, steps_init and every DDIM step) and replayed from then on; the frames
     * are the ones op-by-op execution gives. false: always op by op.
     */
    bool graph;
} DittoA2mLmdmParams;

/* 50 steps, exact coefficients, seed 0, seeded noise, graphs on. */
void ditto_a2m_lmdm_params_default(DittoA2mLmdmParams *p);

typedef struct DittoA2mLmdm DittoA2mLmdm;

/*
 * A sampler over model m (borrowed: it must outlive the sampler): its own
 * scratch arena and device buffers for one window (inputs, output and the
 * noise of every step, so a window's device work reads and writes fixed
 * addresses). Injected tensors are borrowed too. Errors: DITTO_ERR_INVAL / _RANGE / _SHAPE for bad params,
 * DITTO_ERR_NOMEM.
 */
int ditto_a2m_lmdm_open(DittoA2mLmdm **out, DittoLmdm *m, const DittoA2mLmdmParams *p);
void ditto_a2m_lmdm_close(DittoA2mLmdm **s);
DittoA2mSampler ditto_a2m_lmdm_sampler(DittoA2mLmdm *s);
/* Seeded noise from now on comes from `seed` (a warm sampler reused by a new session); the graph is kept. */
void ditto_a2m_lmdm_set_seed(DittoA2mLmdm *s, uint64_t seed);
/* The DDIM step count the sampler was opened for. */
int ditto_a2m_lmdm_steps(const DittoA2mLmdm *s);

#endif
