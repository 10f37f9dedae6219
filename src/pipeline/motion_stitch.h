/*
 * Motion stitch (ditto-architecture.md 3.7): driving motion x_d_info from
 * the LMDM plus the source frame's x_s_info -> source and driving keypoints
 * x_s, x_d (21 x 3) for the warp network.
 *
 * Per generated frame g (in order; d0, the fade destination and the source
 * pose carry over from frame to frame):
 *   1. d0: with relative_d, the first frame's x_d_info (unless preset)
 *   2. mix: x_d[k] = x_s[k] + (x_d[k] - d0[k]) * factor[k] for k in
 *      use_d_keys, x_s[k] for the others (pose mixed on the 66 bin logits)
 *   3. exp fix v2: exp = exp_d*a1 + exp_s*a2 + delta_eye*a3 (keypoint masks)
 *   4. vad_alpha < 1: exp = exp*vad + exp_s*(1 - vad)
 *   5. controls: delta_pitch/yaw/roll (to degrees + offset), alpha_* (scale
 *      the current form: logits or degrees), delta_exp
 *   6. fade (fade_type "d0": toward the first frame's post-control x_d_info;
 *      "s": toward the frame's x_s_info; only frames that carry fade_alpha)
 *   7. gaze fix (drive_eye; the reference pose is the setup source's for an
 *      image, the first processed frame's source for a video)
 *   8. transform_keypoint of x_s_info and x_d_info
 *   9. the stitching network on (x_s, x_d) (flag_stitching)
 * Steps 1-8 are host float32 math, frame by frame; step 9 runs on the
 * backend, B frames in one forward. A DittoMotionStitch is the state of one
 * clip; calls on one object must not run concurrently.
 */
#ifndef DITTO_PIPELINE_MOTION_STITCH_H
#define DITTO_PIPELINE_MOTION_STITCH_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/buffer.h"
#include "models/models.h"
#include "pipeline/motion.h"

/* RNG purpose of the blink schedule's open periods (src/core/rng.h streams). */
#define DITTO_RNG_PURPOSE_BLINK 0x424Cu
/* Frames of the blink schedule when N_d is unknown (-1). */
#define DITTO_BLINK_DEFAULT_N 3000
/* Random open periods: randint(60, 100), both ends included. */
#define DITTO_BLINK_OPEN_MIN 60
#define DITTO_BLINK_OPEN_MAX 100

/* Keypoint masks of the exp fix: the lips {6,12,14,17,19,20} and eyes {11,13,15,16,18}. */
bool ditto_kp_is_lip(int k);
bool ditto_kp_is_eye(int k);

/*
 * Draw k (0, 1, 2, ...) of the random open periods, in [60, 100]. Draw order
 * (upstream's random.randint calls): start, end, then one per blink written.
 */
typedef int (*DittoBlinkDraw)(void *ctx, int64_t k);

/* The default draw: 60 + floor(41 u), u = ditto_rng_uniform(seed, BLINK stream, k). */
int ditto_blink_draw_rng(uint64_t seed, int64_t k);

/*
 * The blink schedule (_set_eye_blink_idx): idx[0..N) gets the row of
 * delta_eye_arr used by each frame (0 when the eyes are open).
 *   open_n: n_open == 1 with open[0] == -1: never blink; open[0] == 0:
 *     random open periods from draw(); > 0: fixed; n_open > 1: a list,
 *     open period j is open[j mod n_open].
 *   start = first open period (draw 0, or open[0]), end = the last (draw 1,
 *   or open[n_open-1]); blinks (rows 0..blink_n-1) are written at start,
 *   then after every blink plus the next open period, while the position is
 *   < N - max(end, blink_n).
 * draw may be NULL when no random period is needed. DITTO_ERR_INVAL for
 * N < 0, blink_n < 1, n_open < 1, a negative list entry or a missing draw;
 * DITTO_ERR_RANGE when draw returns a negative period.
 */
int ditto_blink_schedule(int64_t N, int blink_n, const int *open, int n_open, DittoBlinkDraw draw, void *draw_ctx, int32_t *idx);

typedef enum DittoFadeType {
    DITTO_FADE_NONE,   /* "" (default): fade_alpha has no effect */
    DITTO_FADE_D0,     /* toward the first frame's post-control x_d_info */
    DITTO_FADE_S,      /* toward the frame's own source x_s_info */
} DittoFadeType;

/* Per-frame controls (upstream ctrl_info[g] and overall_ctrl_info). */
enum {
    DITTO_CTRL_DELTA_PITCH = 1u << 0,
    DITTO_CTRL_DELTA_YAW = 1u << 1,
    DITTO_CTRL_DELTA_ROLL = 1u << 2,
    DITTO_CTRL_ALPHA_PITCH = 1u << 3,
    DITTO_CTRL_ALPHA_YAW = 1u << 4,
    DITTO_CTRL_ALPHA_ROLL = 1u << 5,
    DITTO_CTRL_DELTA_EXP = 1u << 6,
    DITTO_CTRL_FADE_ALPHA = 1u << 7,
    DITTO_CTRL_FADE_OUT_KEYS = 1u << 8,
    DITTO_CTRL_VAD_ALPHA = 1u << 9,
};

typedef struct DittoCtrl {
    unsigned has;                    /* DITTO_CTRL_* bits of the fields that are set */
    double delta[3];                 /* pitch, yaw, roll offsets in degrees */
    double alpha[3];                 /* pitch, yaw, roll factors */
    float delta_exp[DITTO_KP_DIM];   /* added to exp */
    double fade_alpha;               /* weight of the frame's own motion */
    unsigned fade_out_keys;          /* DITTO_XK_BIT set; overrides the setup's */
    double vad_alpha;                /* exp = exp*vad + exp_s*(1 - vad) when < 1 */
} DittoCtrl;

/*
 * Merge the frame's controls over the overall ones (a frame's value wins
 * where both set the same control). Either may be NULL.
 */
void ditto_ctrl_merge(const DittoCtrl *overall, const DittoCtrl *frame, DittoCtrl *out);

typedef struct DittoMotionStitchParams {
    bool is_image;               /* image source (else video); picks the defaults */
    /* use_d_keys: DITTO_XK_BIT set, or 0 for the default ((exp,pitch,yaw,roll,t) image, (exp,) video) */
    unsigned use_d_keys;
    /* use_d_keys as a dict {key: factor}: factors of the keys in use_d_keys (others unused) */
    bool use_d_dict;
    float use_d_factor[DITTO_XK_COUNT];
    bool relative_d;             /* true */
    int drive_eye;               /* -1: default (is_image), 0, 1 */
    const float *delta_eye_arr;  /* (n_delta_eye, 63) or NULL; copied */
    int n_delta_eye;
    const int *delta_eye_open_n; /* open periods (see ditto_blink_schedule); NULL: {0} */
    int n_delta_eye_open_n;
    int64_t n_d;                 /* N_d: frames of the blink schedule; -1: 3000 */
    DittoFadeType fade_type;     /* DITTO_FADE_NONE */
    unsigned fade_out_keys;      /* 0: (exp,) */
    bool flag_stitching;         /* true */
    const DittoXInfo *d0;        /* preset d0 (online warm-up frame) or NULL; copied */
    bool has_ch_scale;           /* ch_info given: use_d_keys becomes {exp,pitch,yaw,roll: ratio, t: 1} */
    float ch_scale;              /*   ratio = ch_scale / x_s_info.scale */
    const DittoCtrl *overall;    /* overall_ctrl_info or NULL; copied */
    uint64_t seed;               /* random blink open periods */
    DittoBlinkDraw blink_draw;   /* NULL: ditto_blink_draw_rng(seed, k) */
    void *blink_draw_ctx;
} DittoMotionStitchParams;

/* The upstream defaults for an image (is_image true) or a video source. */
void ditto_motion_stitch_params_default(DittoMotionStitchParams *p, bool is_image);

typedef struct DittoMotionStitch DittoMotionStitch;

/*
 * Set up for one clip. x_s_info: the setup source info (frame 0 of the
 * source; copied). net: the stitching network, or NULL when flag_stitching
 * is false (also allowed with only ditto_motion_stitch_frames). log may be
 * NULL. Returns 0 or a negative code (DITTO_ERR_INVAL for bad options,
 * DITTO_ERR_NOMEM).
 */
int ditto_motion_stitch_open(DittoMotionStitch **out, const DittoMotionStitchParams *p, const DittoXInfo *x_s_info, DittoStitch *net,
                             const DittoLogger *log);
/* Accepts NULL and *ms == NULL; sets *ms to NULL. */
void ditto_motion_stitch_close(DittoMotionStitch **ms);

/* Set (or replace) d0, e.g. the online warm-up frame. */
void ditto_motion_stitch_set_d0(DittoMotionStitch *ms, const DittoXInfo *d0);
/* Row of delta_eye_arr used by frame g (0 without delta_eye_arr). */
int32_t ditto_motion_stitch_blink_row(const DittoMotionStitch *ms, int64_t g);
/* Effective options after the defaults: use_d_keys bits, drive_eye. */
unsigned ditto_motion_stitch_use_d_keys(const DittoMotionStitch *ms);
bool ditto_motion_stitch_drive_eye(const DittoMotionStitch *ms);

/*
 * Steps 1-8 for B consecutive frames g0 .. g0+B-1 (each call continues
 * where the previous one ended; frames must come in order).
 *   x_s_info[b]  source info of frame g0+b (mirror-indexed by the caller)
 *   x_d_info     B driving infos (from cvt_fmt)
 *   ctrl         B per-frame controls (entries may be NULL), or NULL
 *   x_d_out      B final driving infos, or NULL
 *   x_s, x_d     (B,21,3) source keypoints and driving keypoints before the
 *                stitching network; either may be NULL
 */
int ditto_motion_stitch_frames(DittoMotionStitch *ms, int64_t g0, int64_t B, const DittoXInfo *const *x_s_info, const DittoXInfo *x_d_info,
                               const DittoCtrl *const *ctrl, DittoXInfo *x_d_out, float *x_s, float *x_d);

/*
 * All steps for B frames: x_s and x_d are caller-allocated float32 (B,21,3)
 * tensors on the backend of the stitching network; the network (when
 * flag_stitching) runs once on all B frames with scratch from ws. The
 * pre-network driving keypoints go to tap as "x_d_pre_stitch".
 */
int ditto_motion_stitch_run(DittoMotionStitch *ms, DittoBackend *be, DittoArena *ws, int64_t g0, int64_t B, const DittoXInfo *const *x_s_info,
                            const DittoXInfo *x_d_info, const DittoCtrl *const *ctrl, DittoTensor *x_s, DittoTensor *x_d, const DittoTap *tap);

#endif
