/*
 * Motion stitch (ditto-architecture.md 3.7). The per-frame math mirrors
 * upstream's NumPy float32 arithmetic: every array operation rounds to
 * float32, Python scalars (alphas, deltas) are rounded to float32 before
 * they meet an array (NEP 50), and poses stay 66-bin logits until a delta
 * control turns them into degrees (after which both forms meet with NumPy
 * broadcasting: a degree value against logits acts on every bin).
 */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "pipeline/motion_stitch.h"

/* Gaze fix gains (3.7 step 7): exp of keypoints 11 and 15, x then y. */
#define GAZE_DX_GAIN 0.26
#define GAZE_DY_GAIN 0.28
#define GAZE_EXP_X_A 33   /* keypoint 11, x */
#define GAZE_EXP_Y_A 34   /* keypoint 11, y */
#define GAZE_EXP_X_B 45   /* keypoint 15, x */
#define GAZE_EXP_Y_B 46   /* keypoint 15, y */

struct DittoMotionStitch {
    DittoStitch *net;
    DittoLogger log;
    bool is_image, relative_d, drive_eye, flag_stitching;
    unsigned use_d_keys;
    bool use_d_dict;
    float factor[DITTO_XK_COUNT];
    DittoFadeType fade_type;
    unsigned fade_out_keys;
    DittoCtrl overall;
    bool has_overall;

    /* exp fix masks (1,63): exp = exp_d*a1 + exp_s*a2 + delta_eye*a3 */
    float a1[DITTO_KP_DIM], a2[DITTO_KP_DIM], a3[DITTO_KP_DIM];
    float *delta_eye;          /* (n_delta_eye,63) or NULL */
    int n_delta_eye;
    int32_t *blink_idx;        /* (n_blink) rows of delta_eye per frame (mod n_blink) */
    int64_t n_blink;

    DittoXInfo x_s0;           /* setup source info */
    float x_s0_kp[DITTO_KP_DIM];  /* transform_keypoint(x_s0), the image case's x_s */

    bool has_d0, has_fade_dst, has_pose_s;
    DittoXInfo d0, fade_dst;
    double pose_s_yaw, pose_s_pitch;   /* degrees, gaze fix reference */
    int64_t next_g;            /* the frame the next call must start at */

    float *host;               /* (2,B,21,3) scratch of ditto_motion_stitch_run */
    int64_t host_frames;
};

bool ditto_kp_is_lip(int k)
{
    return k == 6 || k == 12 || k == 14 || k == 17 || k == 19 || k == 20;
}

bool ditto_kp_is_eye(int k)
{
    return k == 11 || k == 13 || k == 15 || k == 16 || k == 18;
}

/* ---- blink schedule ---- */

int ditto_blink_draw_rng(uint64_t seed, int64_t k)
{
    float u = ditto_rng_uniform(seed, ditto_rng_stream(DITTO_RNG_PURPOSE_BLINK, 0, 0), (uint64_t)k);
    int v = DITTO_BLINK_OPEN_MIN + (int)(u * (float)(DITTO_BLINK_OPEN_MAX - DITTO_BLINK_OPEN_MIN + 1));
    return v > DITTO_BLINK_OPEN_MAX ? DITTO_BLINK_OPEN_MAX : v;
}

typedef struct OpenPeriods {
    const int *open;     /* NULL: random */
    int n;
    DittoBlinkDraw draw;
    void *ctx;
    int64_t ndraws;
} OpenPeriods;

/* Open period j of the list, or the next random draw. */
static int open_period(OpenPeriods *o, int64_t j, int *v)
{
    if (o->open) {
        int64_t i = j % o->n;
        *v = o->open[i < 0 ? i + o->n : i];
        return 0;
    }
    if (!o->draw)
        return DITTO_ERR_INVAL;
    *v = o->draw(o->ctx, o->ndraws++);
    return *v < 0 ? DITTO_ERR_RANGE : 0;
}

int ditto_blink_schedule(int64_t N, int blink_n, const int *open, int n_open, DittoBlinkDraw draw, void *draw_ctx, int32_t *idx)
{
    if (N < 0 || blink_n < 1 || n_open < 1 || !open || (N > 0 && !idx))
        return DITTO_ERR_INVAL;
    for (int64_t i = 0; i < N; i++)
        idx[i] = 0;
    if (n_open == 1 && open[0] < 0)
        return 0;   /* -1: never blink */
    for (int i = 0; i < n_open; i++)
        if (open[i] < 0 && n_open > 1)
            return DITTO_ERR_INVAL;
    OpenPeriods o = { open, n_open, draw, draw_ctx, 0 };
    if (n_open == 1 && open[0] == 0)
        o.open = NULL;   /* random periods */
    /* first open period, then the last one (which bounds where blinks may start) */
    int start, end;
    DITTO_TRY(open_period(&o, 0, &start));
    DITTO_TRY(open_period(&o, -1, &end));
    int64_t stop = N - (end > blink_n ? end : blink_n);
    int64_t pos = start;
    for (int64_t j = 1; pos < stop; j++) {
        for (int b = 0; b < blink_n; b++)
            idx[pos + b] = b;   /* pos + blink_n <= stop + blink_n - 1 < N */
        int gap;
        DITTO_TRY(open_period(&o, j, &gap));
        pos += blink_n + gap;
    }
    return 0;
}

/* ---- controls ---- */

void ditto_ctrl_merge(const DittoCtrl *overall, const DittoCtrl *frame, DittoCtrl *out)
{
    DittoCtrl m;
    memset(&m, 0, sizeof m);
    const DittoCtrl *src[2] = { overall, frame };   /* the frame's values win */
    for (int s = 0; s < 2; s++) {
        const DittoCtrl *c = src[s];
        if (!c)
            continue;
        for (int a = 0; a < 3; a++) {
            if (c->has & (DITTO_CTRL_DELTA_PITCH << a))
                m.delta[a] = c->delta[a];
            if (c->has & (DITTO_CTRL_ALPHA_PITCH << a))
                m.alpha[a] = c->alpha[a];
        }
        if (c->has & DITTO_CTRL_DELTA_EXP)
            memcpy(m.delta_exp, c->delta_exp, sizeof m.delta_exp);
        if (c->has & DITTO_CTRL_FADE_ALPHA)
            m.fade_alpha = c->fade_alpha;
        if (c->has & DITTO_CTRL_FADE_OUT_KEYS)
            m.fade_out_keys = c->fade_out_keys;
        if (c->has & DITTO_CTRL_VAD_ALPHA)
            m.vad_alpha = c->vad_alpha;
        m.has |= c->has;
    }
    *out = m;
}

/* ---- setup ---- */

void ditto_motion_stitch_params_default(DittoMotionStitchParams *p, bool is_image)
{
    memset(p, 0, sizeof *p);
    p->is_image = is_image;
    p->relative_d = true;
    p->drive_eye = -1;
    p->n_d = -1;
    p->fade_type = DITTO_FADE_NONE;
    p->flag_stitching = true;
    for (int k = 0; k < DITTO_XK_COUNT; k++)
        p->use_d_factor[k] = 1.0f;
}

static const int open_random = 0;

static int blink_draw_default(void *ctx, int64_t k)
{
    return ditto_blink_draw_rng(*(const uint64_t *)ctx, k);
}

int ditto_motion_stitch_open(DittoMotionStitch **out, const DittoMotionStitchParams *p, const DittoXInfo *x_s_info, DittoStitch *net,
                             const DittoLogger *log)
{
    if (!out || !p || !x_s_info)
        return DITTO_ERR_INVAL;
    *out = NULL;
    if (p->flag_stitching && !net)
        return ditto_fail(log, DITTO_ERR_INVAL, "motion stitch: flag_stitching needs the stitching network");
    if (p->delta_eye_arr && p->n_delta_eye < 1)
        return ditto_fail(log, DITTO_ERR_INVAL, "motion stitch: delta_eye_arr with %d rows", p->n_delta_eye);
    if (p->fade_type != DITTO_FADE_NONE && p->fade_type != DITTO_FADE_D0 && p->fade_type != DITTO_FADE_S)
        return ditto_fail(log, DITTO_ERR_INVAL, "motion stitch: unknown fade_type %d", (int)p->fade_type);
    if (x_s_info->pitch.deg || x_s_info->yaw.deg || x_s_info->roll.deg)
        return ditto_fail(log, DITTO_ERR_INVAL, "motion stitch: the source info must hold pose logits");

    DittoMotionStitch *ms = ditto_calloc(1, sizeof *ms);
    if (!ms)
        return DITTO_ERR_NOMEM;
    ms->net = net;
    ms->log = log ? *log : (DittoLogger){ 0 };
    ms->is_image = p->is_image;
    ms->relative_d = p->relative_d;
    ms->drive_eye = p->drive_eye < 0 ? p->is_image : p->drive_eye != 0;
    ms->flag_stitching = p->flag_stitching;
    ms->fade_type = p->fade_type;
    ms->fade_out_keys = p->fade_out_keys ? p->fade_out_keys : DITTO_XK_BIT(DITTO_XK_EXP);
    ms->x_s0 = *x_s_info;

    /* use_d_keys: image (exp, pitch, yaw, roll, t), video (exp,); ch_info turns it into a dict */
    const unsigned image_keys = DITTO_XK_BIT(DITTO_XK_EXP) | DITTO_XK_BIT(DITTO_XK_PITCH) | DITTO_XK_BIT(DITTO_XK_YAW) |
                                DITTO_XK_BIT(DITTO_XK_ROLL) | DITTO_XK_BIT(DITTO_XK_T);
    ms->use_d_keys = p->use_d_keys ? p->use_d_keys : p->is_image ? image_keys : DITTO_XK_BIT(DITTO_XK_EXP);
    ms->use_d_dict = p->use_d_dict;
    for (int k = 0; k < DITTO_XK_COUNT; k++)
        ms->factor[k] = p->use_d_dict ? p->use_d_factor[k] : 1.0f;
    if (p->has_ch_scale) {
        float ratio = p->ch_scale / x_s_info->scale;
        ms->use_d_keys = image_keys;
        ms->use_d_dict = true;
        for (int k = 0; k < DITTO_XK_COUNT; k++)
            ms->factor[k] = 1.0f;
        ms->factor[DITTO_XK_EXP] = ms->factor[DITTO_XK_PITCH] = ms->factor[DITTO_XK_YAW] = ms->factor[DITTO_XK_ROLL] = ratio;
    }
    if (p->overall) {
        ms->overall = *p->overall;
        ms->has_overall = true;
    }
    if (p->d0)
        ditto_motion_stitch_set_d0(ms, p->d0);

    /* exp masks: _a1 lips (+ eyes when the driven eyes are used), _a2 eyes when delta_eye_arr replaces them */
    for (int k = 0; k < DITTO_NUM_KP; k++) {
        float m1 = ditto_kp_is_lip(k) || (ms->drive_eye && !p->delta_eye_arr && ditto_kp_is_eye(k)) ? 1.0f : 0.0f;
        float m2 = ms->drive_eye && p->delta_eye_arr && ditto_kp_is_eye(k) ? 1.0f : 0.0f;
        for (int c = 0; c < 3; c++) {
            ms->a1[3 * k + c] = m1 * (1.0f - m2);
            ms->a2[3 * k + c] = (1.0f - m1) + m1 * m2;
            ms->a3[3 * k + c] = m2;
        }
    }

    int rc = 0;
    if (p->delta_eye_arr) {
        ms->n_delta_eye = p->n_delta_eye;
        ms->n_blink = p->n_d > 0 ? p->n_d : DITTO_BLINK_DEFAULT_N;
        ms->delta_eye = ditto_malloc((size_t)p->n_delta_eye * DITTO_KP_DIM * sizeof *ms->delta_eye);
        ms->blink_idx = ditto_malloc((size_t)ms->n_blink * sizeof *ms->blink_idx);
        if (!ms->delta_eye || !ms->blink_idx) {
            ditto_motion_stitch_close(&ms);
            return DITTO_ERR_NOMEM;
        }
        memcpy(ms->delta_eye, p->delta_eye_arr, (size_t)p->n_delta_eye * DITTO_KP_DIM * sizeof *ms->delta_eye);
        const int *open = p->delta_eye_open_n ? p->delta_eye_open_n : &open_random;
        int n_open = p->delta_eye_open_n ? p->n_delta_eye_open_n : 1;
        uint64_t seed = p->seed;
        rc = ditto_blink_schedule(ms->n_blink, p->n_delta_eye, open, n_open, p->blink_draw ? p->blink_draw : blink_draw_default,
                                  p->blink_draw ? p->blink_draw_ctx : &seed, ms->blink_idx);
        if (rc < 0) {
            ditto_motion_stitch_close(&ms);
            return ditto_fail(log, rc, "motion stitch: bad delta_eye_open_n (a list of periods >= 0, or -1, 0, or a period > 0)");
        }
        for (int64_t i = 0; i < ms->n_blink; i++)
            DITTO_ASSERT(ms->blink_idx[i] >= 0 && ms->blink_idx[i] < ms->n_delta_eye);
    }

    /* the image case's x_s and gaze reference are fixed at setup; a video's come from its frames */
    ditto_transform_keypoint(&ms->x_s0, 1, ms->x_s0_kp);
    if (ms->is_image) {
        ms->pose_s_yaw = ditto_pose_degree(&ms->x_s0.yaw);
        ms->pose_s_pitch = ditto_pose_degree(&ms->x_s0.pitch);
        ms->has_pose_s = true;
    }
    *out = ms;
    return 0;
}

void ditto_motion_stitch_close(DittoMotionStitch **ms)
{
    if (!ms || !*ms)
        return;
    ditto_free((*ms)->delta_eye);
    ditto_free((*ms)->blink_idx);
    ditto_free((*ms)->host);
    ditto_free(*ms);
    *ms = NULL;
}

void ditto_motion_stitch_set_d0(DittoMotionStitch *ms, const DittoXInfo *d0)
{
    ms->d0 = *d0;
    ms->has_d0 = true;
}

int32_t ditto_motion_stitch_blink_row(const DittoMotionStitch *ms, int64_t g)
{
    if (!ms->blink_idx || g < 0)
        return 0;
    return ms->blink_idx[g % ms->n_blink];
}

unsigned ditto_motion_stitch_use_d_keys(const DittoMotionStitch *ms)
{
    return ms->use_d_keys;
}

bool ditto_motion_stitch_drive_eye(const DittoMotionStitch *ms)
{
    return ms->drive_eye;
}

/* ---- per-frame math ---- */

static inline float pose_at(const DittoPose *p, int i)
{
    return p->deg ? p->v[0] : p->v[i];
}

/* out = s + (d - d0) * f (f applied when dict); degrees only when all three are degrees. */
static void pose_mix(const DittoPose *s, const DittoPose *d, const DittoPose *d0, bool dict, float f, DittoPose *out)
{
    DittoPose r;
    r.deg = s->deg && d->deg && d0->deg;
    int n = r.deg ? 1 : DITTO_POSE_BINS;
    for (int i = 0; i < n; i++) {
        float diff = pose_at(d, i) - pose_at(d0, i);
        if (dict)
            diff = diff * f;
        r.v[i] = pose_at(s, i) + diff;
    }
    *out = r;
}

static void floats_mix(const float *s, const float *d, const float *d0, bool dict, float f, float *out, int n)
{
    for (int i = 0; i < n; i++) {
        float diff = d[i] - d0[i];
        if (dict)
            diff = diff * f;
        out[i] = s[i] + diff;
    }
}

/* out = a*fa + b*fb (each product rounded to float32, as NumPy does). */
static void pose_blend(const DittoPose *a, float fa, const DittoPose *b, float fb, DittoPose *out)
{
    DittoPose r;
    r.deg = a->deg && b->deg;
    int n = r.deg ? 1 : DITTO_POSE_BINS;
    for (int i = 0; i < n; i++) {
        float x = pose_at(a, i) * fa, y = pose_at(b, i) * fb;
        r.v[i] = x + y;
    }
    *out = r;
}

static void floats_blend(float *a, float fa, const float *b, float fb, int n)
{
    for (int i = 0; i < n; i++) {
        float x = a[i] * fa, y = b[i] * fb;
        a[i] = x + y;
    }
}

/* Pointer and length of a non-pose key's floats. */
static float *key_floats(DittoXInfo *x, DittoXKey k, int *n)
{
    switch (k) {
    case DITTO_XK_SCALE: *n = 1; return &x->scale;
    case DITTO_XK_T: *n = 3; return x->t;
    case DITTO_XK_EXP: *n = DITTO_KP_DIM; return x->exp;
    case DITTO_XK_KP: *n = DITTO_KP_DIM; return x->kp;
    default: *n = 0; return NULL;
    }
}

static const float *key_floats_c(const DittoXInfo *x, DittoXKey k, int *n)
{
    return key_floats((DittoXInfo *)x, k, n);
}

static bool is_pose_key(DittoXKey k)
{
    return k == DITTO_XK_PITCH || k == DITTO_XK_YAW || k == DITTO_XK_ROLL;
}

/*
 * _mix_s_d_info: with d0, every driving key becomes x_s + (x_d - d0) (times
 * its dict factor); without d0 a dict scales the driving values. Keys not in
 * use_d_keys (and kp, which driving infos lack) come from x_s.
 */
static void mix(const DittoMotionStitch *ms, const DittoXInfo *xs, DittoXInfo *xd)
{
    for (int k = 0; k < DITTO_XK_KP; k++) {
        DittoXKey key = (DittoXKey)k;
        float f = ms->factor[k];
        if (ms->has_d0) {
            if (is_pose_key(key)) {
                pose_mix(ditto_xinfo_pose_c(xs, key), ditto_xinfo_pose(xd, key), ditto_xinfo_pose_c(&ms->d0, key), ms->use_d_dict, f,
                         ditto_xinfo_pose(xd, key));
            } else {
                int n;
                float *d = key_floats(xd, key, &n);
                floats_mix(key_floats_c(xs, key, &n), d, key_floats_c(&ms->d0, key, &n), ms->use_d_dict, f, d, n);
            }
        } else if (ms->use_d_dict && (ms->use_d_keys & DITTO_XK_BIT(k))) {
            if (is_pose_key(key)) {
                DittoPose *p = ditto_xinfo_pose(xd, key);
                for (int i = 0; i < (p->deg ? 1 : DITTO_POSE_BINS); i++)
                    p->v[i] = p->v[i] * f;
            } else {
                int n;
                float *d = key_floats(xd, key, &n);
                for (int i = 0; i < n; i++)
                    d[i] = d[i] * f;
            }
        }
    }
    for (int k = 0; k < DITTO_XK_COUNT; k++) {
        DittoXKey key = (DittoXKey)k;
        if (key != DITTO_XK_KP && (ms->use_d_keys & DITTO_XK_BIT(k)))
            continue;
        if (is_pose_key(key)) {
            *ditto_xinfo_pose(xd, key) = *ditto_xinfo_pose_c(xs, key);
        } else {
            int n;
            float *d = key_floats(xd, key, &n);
            memcpy(d, key_floats_c(xs, key, &n), (size_t)n * sizeof *d);
        }
    }
}

/* ctrl_motion: per angle, delta (to degrees, plus the offset) then alpha; then delta_exp. */
static void ctrl_motion(DittoXInfo *xd, const DittoCtrl *c)
{
    static const DittoXKey angle[3] = { DITTO_XK_PITCH, DITTO_XK_YAW, DITTO_XK_ROLL };
    for (int a = 0; a < 3; a++) {
        DittoPose *p = ditto_xinfo_pose(xd, angle[a]);
        if (c->has & (DITTO_CTRL_DELTA_PITCH << a)) {
            float deg = ditto_pose_degree(p);
            p->v[0] = deg + (float)c->delta[a];
            p->deg = true;
        }
        if (c->has & (DITTO_CTRL_ALPHA_PITCH << a)) {
            float f = (float)c->alpha[a];
            for (int i = 0; i < (p->deg ? 1 : DITTO_POSE_BINS); i++)
                p->v[i] = p->v[i] * f;
        }
    }
    if (c->has & DITTO_CTRL_DELTA_EXP)
        for (int i = 0; i < DITTO_KP_DIM; i++)
            xd->exp[i] = xd->exp[i] + c->delta_exp[i];
}

/* x_d[k] = x_d[k]*alpha + dst[k]*(1 - alpha) for the fade keys (kp skipped). */
static void fade(DittoXInfo *xd, const DittoXInfo *dst, unsigned keys, double alpha)
{
    float fa = (float)alpha, fb = (float)(1.0 - alpha);
    for (int k = 0; k < DITTO_XK_KP; k++) {
        DittoXKey key = (DittoXKey)k;
        if (!(keys & DITTO_XK_BIT(k)))
            continue;
        if (is_pose_key(key)) {
            pose_blend(ditto_xinfo_pose(xd, key), fa, ditto_xinfo_pose_c(dst, key), fb, ditto_xinfo_pose(xd, key));
        } else {
            int n;
            float *d = key_floats(xd, key, &n);
            floats_blend(d, fa, key_floats_c(dst, key, &n), fb, n);
        }
    }
}

/* Eyes follow the head: shift keypoints 11 and 15 by the yaw/pitch change from the source. */
static void gaze_fix(const DittoMotionStitch *ms, DittoXInfo *xd)
{
    double dx = GAZE_DX_GAIN * ((double)ditto_pose_degree(&xd->yaw) - ms->pose_s_yaw);
    double dy = GAZE_DY_GAIN * ((double)ditto_pose_degree(&xd->pitch) - ms->pose_s_pitch);
    float *e = xd->exp;
    if (dx > 0) {
        e[GAZE_EXP_X_A] = e[GAZE_EXP_X_A] + (float)(0.0007 * dx);
        e[GAZE_EXP_X_B] = e[GAZE_EXP_X_B] + (float)(0.001 * dx);
    } else {
        e[GAZE_EXP_X_A] = e[GAZE_EXP_X_A] + (float)(0.001 * dx);
        e[GAZE_EXP_X_B] = e[GAZE_EXP_X_B] + (float)(0.0007 * dx);
    }
    e[GAZE_EXP_Y_A] = e[GAZE_EXP_Y_A] - (float)(0.001 * dy);
    e[GAZE_EXP_Y_B] = e[GAZE_EXP_Y_B] - (float)(0.001 * dy);
}

static int frame(DittoMotionStitch *ms, int64_t g, const DittoXInfo *xs, const DittoXInfo *xd_in, const DittoCtrl *ctrl, DittoXInfo *xd,
                 float *x_s, float *x_d)
{
    if (xs->pitch.deg || xs->yaw.deg || xs->roll.deg)
        return ditto_fail(&ms->log, DITTO_ERR_INVAL, "motion stitch: frame %lld: the source info must hold pose logits", (long long)g);
    DittoCtrl kw;
    ditto_ctrl_merge(ms->has_overall ? &ms->overall : NULL, ctrl, &kw);
    *xd = *xd_in;
    memset(xd->kp, 0, sizeof xd->kp);

    /* 1. d0 */
    if (ms->relative_d && !ms->has_d0)
        ditto_motion_stitch_set_d0(ms, xd);
    /* 2. mix */
    mix(ms, xs, xd);
    /* 3. exp fix v2 */
    const float *de = ms->delta_eye ? ms->delta_eye + (int64_t)ditto_motion_stitch_blink_row(ms, g) * DITTO_KP_DIM : NULL;
    for (int i = 0; i < DITTO_KP_DIM; i++) {
        float v = xd->exp[i] * ms->a1[i] + xs->exp[i] * ms->a2[i];
        xd->exp[i] = v + (de ? de[i] * ms->a3[i] : 0.0f);
    }
    /* 4. vad_alpha */
    if ((kw.has & DITTO_CTRL_VAD_ALPHA) && kw.vad_alpha < 1.0) {
        float fa = (float)kw.vad_alpha, fb = (float)(1.0 - kw.vad_alpha);
        floats_blend(xd->exp, fa, xs->exp, fb, DITTO_KP_DIM);
    }
    /* 5. controls */
    ctrl_motion(xd, &kw);
    /* 6. fade */
    if (ms->fade_type == DITTO_FADE_D0 && !ms->has_fade_dst) {
        ms->fade_dst = *xd;
        ms->has_fade_dst = true;
    }
    if ((kw.has & DITTO_CTRL_FADE_ALPHA) && ms->fade_type != DITTO_FADE_NONE) {
        unsigned keys = (kw.has & DITTO_CTRL_FADE_OUT_KEYS) ? kw.fade_out_keys : ms->fade_out_keys;
        fade(xd, ms->fade_type == DITTO_FADE_D0 ? &ms->fade_dst : xs, keys, kw.fade_alpha);
    }
    /* 7. gaze */
    if (ms->drive_eye) {
        if (!ms->has_pose_s) {
            ms->pose_s_yaw = ditto_pose_degree(&xs->yaw);
            ms->pose_s_pitch = ditto_pose_degree(&xs->pitch);
            ms->has_pose_s = true;
        }
        gaze_fix(ms, xd);
    }
    /* 8. keypoints */
    if (x_s) {
        if (ms->is_image)
            memcpy(x_s, ms->x_s0_kp, sizeof ms->x_s0_kp);
        else
            ditto_transform_keypoint(xs, 1, x_s);
    }
    if (x_d)
        ditto_transform_keypoint(xd, 1, x_d);
    return 0;
}

int ditto_motion_stitch_frames(DittoMotionStitch *ms, int64_t g0, int64_t B, const DittoXInfo *const *x_s_info, const DittoXInfo *x_d_info,
                               const DittoCtrl *const *ctrl, DittoXInfo *x_d_out, float *x_s, float *x_d)
{
    if (!ms || B < 0 || (B > 0 && (!x_s_info || !x_d_info)))
        return DITTO_ERR_INVAL;
    if (g0 != ms->next_g)
        return ditto_fail(&ms->log, DITTO_ERR_INVAL, "motion stitch: frames must come in order (got frame %lld, expected %lld)", (long long)g0,
                          (long long)ms->next_g);
    for (int64_t b = 0; b < B; b++) {
        if (!x_s_info[b])
            return DITTO_ERR_INVAL;
        DittoXInfo xd;
        DITTO_TRY(frame(ms, g0 + b, x_s_info[b], &x_d_info[b], ctrl ? ctrl[b] : NULL, &xd, x_s ? x_s + b * DITTO_KP_DIM : NULL,
                        x_d ? x_d + b * DITTO_KP_DIM : NULL));
        if (x_d_out)
            x_d_out[b] = xd;
        ms->next_g = g0 + b + 1;
    }
    return 0;
}

static bool kp_tensor_ok(const DittoTensor *t, int64_t B)
{
    return t && t->dtype == DITTO_F32 && t->ndim == 3 && t->shape[0] == B && t->shape[1] == DITTO_NUM_KP && t->shape[2] == 3 &&
           ditto_tensor_is_contiguous(t);
}

int ditto_motion_stitch_run(DittoMotionStitch *ms, DittoBackend *be, DittoArena *ws, int64_t g0, int64_t B, const DittoXInfo *const *x_s_info,
                            const DittoXInfo *x_d_info, const DittoCtrl *const *ctrl, DittoTensor *x_s, DittoTensor *x_d, const DittoTap *tap)
{
    if (!ms || !be || !ws || B < 1)
        return DITTO_ERR_INVAL;
    if (!kp_tensor_ok(x_s, B) || !kp_tensor_ok(x_d, B))
        return ditto_fail(&ms->log, DITTO_ERR_SHAPE, "motion stitch: x_s and x_d must be contiguous float32 (%lld,21,3) tensors", (long long)B);
    if (B > ms->host_frames) {
        /* grows only when a larger batch arrives; steady state allocates nothing */
        float *h = ditto_realloc(ms->host, (size_t)B * 2 * DITTO_KP_DIM * sizeof *h);
        if (!h)
            return DITTO_ERR_NOMEM;
        ms->host = h;
        ms->host_frames = B;
    }
    float *hs = ms->host, *hd = ms->host + B * DITTO_KP_DIM;
    DITTO_TRY(ditto_motion_stitch_frames(ms, g0, B, x_s_info, x_d_info, ctrl, NULL, hs, hd));

    /* staged: the device may still be busy with the previous batch */
    size_t bytes = (size_t)B * DITTO_KP_DIM * sizeof(float);
    DITTO_TRY(be->upload_async(be, x_s->data, hs, bytes));
    if (!ms->flag_stitching) {
        DITTO_TRY(be->upload_async(be, x_d->data, hd, bytes));
        ditto_tap(tap, "x_d_pre_stitch", x_d);
        return 0;
    }
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor pre;
    int rc = ditto_arena_tensor(ws, DITTO_F32, 3, (int64_t[]){ B, DITTO_NUM_KP, 3 }, &pre);
    if (rc >= 0)
        rc = be->upload_async(be, pre.data, hd, bytes);
    if (rc >= 0) {
        ditto_tap(tap, "x_d_pre_stitch", &pre);
        rc = ditto_stitch_forward(ms->net, ws, x_s, &pre, x_d, NULL);   /* (B,21,3) x 2 -> (B,21,3) */
    }
    ditto_arena_release(ws, mark);
    return rc;
}
