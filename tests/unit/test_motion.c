/*
 * Motion pipeline math against values derived by hand from
 * ditto-architecture.md 3.3, 3.6-3.8, 4.2: emotion vectors, condition rows,
 * mirror indexing, bin66 decoding, rotation matrices, transform_keypoint,
 * source smoothing, the blink schedule and every motion stitch option on
 * small hand-made inputs; plus the batched stitching-network path (fixture
 * weights, when ../shared is present).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/buffer.h"
#include "core/log.h"
#include "core/mem.h"
#include "pipeline/conditions.h"
#include "pipeline/motion.h"
#include "pipeline/motion_stitch.h"
#include "test_util.h"
#include "weights/catalog.h"

static bool near(double a, double b, double tol)
{
    return fabs(a - b) <= tol * (1.0 + fabs(b));
}

/* 66 logits peaked at bin b: decodes to 3b - 97.5 degrees (the other bins weigh e^-60). */
static void peak(DittoPose *p, int b)
{
    for (int i = 0; i < DITTO_POSE_BINS; i++)
        p->v[i] = i == b ? 60.0f : 0.0f;
    p->deg = false;
}

/* ---- conditions ---- */

static void test_emotion(TestCtx *c)
{
    float p[8];
    int four = 4;
    int rc = ditto_emo_from_labels(&four, 1, p);
    bool ok = rc == 0 && near(p[4], 0.9976571, 1e-6);
    for (int i = 0; i < 8; i++)
        if (i != 4)
            ok &= near(p[i], 3.34677e-4, 1e-5);
    /* exact: e^8 / (e^8 + 7) */
    ok &= near(p[4], exp(8.0) / (exp(8.0) + 7.0), 1e-7);
    test_report(c, "motion.emo_label4", ok, "p4 %.7f p0 %.6e", p[4], p[0]);

    int two[2] = { 3, 6 };
    rc = ditto_emo_from_labels(two, 2, p);
    double hi = exp(8.0) / (2 * exp(8.0) + 6), lo = 1.0 / (2 * exp(8.0) + 6);
    ok = rc == 0;
    for (int i = 0; i < 8; i++)
        ok &= near(p[i], (i == 3 || i == 6) ? hi : lo, 1e-6);
    test_report(c, "motion.emo_list", ok, "p3 %.7f", p[3]);

    int bad = 8;
    test_report(c, "motion.emo_range", ditto_emo_from_labels(&bad, 1, p) == DITTO_ERR_RANGE, "");
}

static void test_mirror(TestCtx *c)
{
    bool ok = true;
    for (int i = 0; i <= 20; i++)
        ok &= ditto_mirror_index(i, 1) == 0;
    static const int64_t want5[21] = { 0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 0 };
    for (int i = 0; i <= 20; i++)
        ok &= ditto_mirror_index(i, 5) == want5[i];
    ok &= ditto_mirror_index(-3, 5) == 0;
    test_report(c, "motion.mirror", ok, "");
}

static void test_conditions(TestCtx *c)
{
    /* 3 source frames; eye_open row r = (r, r+0.5), eye_ball row r = 10r + j, sc[i] = -i */
    float eye_open[6], eye_ball[18], sc[63], aud[5 * 1024], cond[5 * 1103];
    for (int r = 0; r < 3; r++) {
        eye_open[2 * r] = (float)r;
        eye_open[2 * r + 1] = (float)r + 0.5f;
        for (int j = 0; j < 6; j++)
            eye_ball[6 * r + j] = (float)(10 * r + j);
    }
    for (int i = 0; i < 63; i++)
        sc[i] = (float)-i;
    for (int i = 0; i < 5 * 1024; i++)
        aud[i] = (float)i * 0.001f;
    /* per-frame lists [[4], [3, 4]]: rows alternate with the (clamped) global frame */
    int labels[3] = { 4, 3, 4 };
    int64_t offsets[3] = { 0, 1, 3 };
    DittoConditionsParams p = { .eye_open = eye_open, .eye_ball = eye_ball, .n_src = 3, .sc = sc };
    p.emo = (DittoEmo){ .kind = DITTO_EMO_PER_FRAME, .labels = labels, .n_labels = 3, .offsets = offsets, .m = 2 };
    DittoConditions cd;
    int rc = ditto_conditions_init(&cd, &p, NULL);
    float e4[8], e34[8];
    ditto_emo_from_labels(labels, 1, e4);
    ditto_emo_from_labels(labels + 1, 2, e34);
    bool ok = rc == 0 && ditto_conditions_build(&cd, aud, 5, -2, cond) == 0;
    /* global frames -2..2 -> clamped 0,0,0,1,2: emo rows 0,0,0,1,0; eye rows mirror(i,3) = 0,0,0,1,2 */
    static const int gi[5] = { 0, 0, 0, 1, 2 };
    for (int j = 0; j < 5 && ok; j++) {
        const float *row = cond + j * 1103;
        ok &= row[0] == aud[j * 1024] && row[1023] == aud[j * 1024 + 1023];
        ok &= !memcmp(row + 1024, gi[j] % 2 ? e34 : e4, sizeof e4);
        ok &= row[1032] == (float)gi[j] && row[1033] == (float)gi[j] + 0.5f;
        ok &= row[1034] == (float)(10 * gi[j]) && row[1039] == (float)(10 * gi[j] + 5);
        ok &= row[1040] == 0.0f && row[1102] == -62.0f;
    }
    /* idx 4: frames 4..8 -> eye rows mirror = 1,0,0,1,2 */
    static const int mi[5] = { 1, 0, 0, 1, 2 };
    ok &= ditto_conditions_build(&cd, aud, 5, 4, cond) == 0;
    for (int j = 0; j < 5 && ok; j++)
        ok &= cond[j * 1103 + 1032] == (float)mi[j] && !memcmp(cond + j * 1103 + 1024, (4 + j) % 2 ? e34 : e4, sizeof e4);
    ditto_conditions_free(&cd);
    test_report(c, "motion.cond_per_frame_mirror", ok, "");

    /* eye_f0_mode and an (m,8) array */
    float arr[16];
    for (int i = 0; i < 16; i++)
        arr[i] = (float)i / 16.0f;
    p.eye_f0_mode = true;
    p.emo = (DittoEmo){ .kind = DITTO_EMO_ARRAY, .array = arr, .m = 2 };
    rc = ditto_conditions_init(&cd, &p, NULL);
    ok = rc == 0 && ditto_conditions_build(&cd, aud, 5, 7, cond) == 0;
    for (int j = 0; j < 5 && ok; j++)
        ok &= cond[j * 1103 + 1032] == 0.0f && cond[j * 1103 + 1039] == 5.0f && !memcmp(cond + j * 1103 + 1024, arr + ((7 + j) % 2) * 8, 8 * sizeof(float));
    ditto_conditions_free(&cd);
    /* the default (label 4) and a single list */
    ditto_emo_default(&p.emo);
    rc = ditto_conditions_init(&cd, &p, NULL);
    ok &= rc == 0 && ditto_conditions_build(&cd, aud, 1, 0, cond) == 0 && !memcmp(cond + 1024, e4, sizeof e4);
    ditto_conditions_free(&cd);
    test_report(c, "motion.cond_eyef0_array_default", ok, "");
}

/* ---- keypoint math ---- */

static void test_bin66(TestCtx *c)
{
    bool ok = true;
    double worst = 0;
    for (int i = 0; i < DITTO_POSE_BINS; i++) {
        float l[66];
        for (int k = 0; k < 66; k++)
            l[k] = k == i ? 100.0f : 0.0f;
        double d = ditto_bin66_to_degree(l) - (3.0 * i - 97.5);
        worst = fabs(d) > worst ? fabs(d) : worst;
    }
    ok &= worst < 1e-5;
    /* uniform logits: mean bin 32.5 -> 0 degrees */
    float u[66] = { 0 };
    ok &= fabs(ditto_bin66_to_degree(u)) < 1e-5;
    /* degrees pass through */
    DittoPose p = { .deg = true };
    p.v[0] = 12.25f;
    ok &= ditto_pose_degree(&p) == 12.25f;
    test_report(c, "motion.bin66_onehot", ok, "worst %.2e", worst);
}

static bool mat_eq(const float *a, const float *b, double tol)
{
    for (int i = 0; i < 9; i++)
        if (fabs(a[i] - b[i]) > tol)
            return false;
    return true;
}

static void test_rotation(TestCtx *c)
{
    float r[9];
    bool ok = true;
    ditto_rotation_matrix(0, 0, 0, r);
    ok &= mat_eq(r, (float[]){ 1, 0, 0, 0, 1, 0, 0, 0, 1 }, 1e-7);
    /* each returned matrix is R^T */
    ditto_rotation_matrix(90, 0, 0, r);   /* Rx = [[1,0,0],[0,0,-1],[0,1,0]] */
    ok &= mat_eq(r, (float[]){ 1, 0, 0, 0, 0, 1, 0, -1, 0 }, 1e-7);
    ditto_rotation_matrix(0, 90, 0, r);   /* Ry = [[0,0,1],[0,1,0],[-1,0,0]] */
    ok &= mat_eq(r, (float[]){ 0, 0, -1, 0, 1, 0, 1, 0, 0 }, 1e-7);
    ditto_rotation_matrix(0, 0, 90, r);   /* Rz = [[0,-1,0],[1,0,0],[0,0,1]] */
    ok &= mat_eq(r, (float[]){ 0, 1, 0, -1, 0, 0, 0, 0, 1 }, 1e-7);
    /* order: R = Rz Rx = [[0,0,1],[1,0,0],[0,1,0]] for pitch 90, roll 90 */
    ditto_rotation_matrix(90, 0, 90, r);
    ok &= mat_eq(r, (float[]){ 0, 1, 0, 0, 0, 1, 1, 0, 0 }, 1e-7);
    /* pitch 30: Rx^T = [[1,0,0],[0,c,s],[0,-s,c]] */
    double cs = cos(3.14159265358979323846 / 6), sn = sin(3.14159265358979323846 / 6);
    ditto_rotation_matrix(30, 0, 0, r);
    ok &= mat_eq(r, (float[]){ 1, 0, 0, 0, (float)cs, (float)sn, 0, (float)-sn, (float)cs }, 1e-7);
    test_report(c, "motion.rotation", ok, "");
}

static void test_transform(TestCtx *c)
{
    DittoXInfo x;
    memset(&x, 0, sizeof x);
    x.scale = 2.0f;
    x.pitch.deg = x.yaw.deg = x.roll.deg = true;
    x.yaw.v[0] = 90.0f;
    x.kp[0] = 1.0f;                      /* keypoint 0 = (1,0,0) */
    x.exp[0] = 0.1f;
    x.kp[3 * 5 + 1] = 0.5f;              /* keypoint 5 = (0,0.5,0) */
    x.t[0] = 1.0f, x.t[1] = 2.0f, x.t[2] = 3.0f;   /* tz is ignored */
    float out[2 * 63];
    DittoXInfo two[2] = { x, x };
    peak(&two[1].yaw, 32);               /* -1.5 degrees from logits */
    two[1].yaw.v[33] = 60.0f;            /* bins 32 and 33 equal: 0 degrees */
    ditto_transform_keypoint(two, 2, out);
    /* (1,0,0) @ Ry(90)^T = (0,0,-1); 2 * ((0,0,-1) + (0.1,0,0)) + (1,2,0) = (1.2, 2, -2) */
    bool ok = fabs(out[0] - 1.2f) < 1e-6 && fabs(out[1] - 2.0f) < 1e-6 && fabs(out[2] + 2.0f) < 1e-6;
    /* keypoint 5: (0,0.5,0) -> 2 * (0,0.5,0) + (1,2,0) = (1,3,0) */
    ok &= fabs(out[15] - 1.0f) < 1e-6 && fabs(out[16] - 3.0f) < 1e-6 && fabs(out[17]) < 1e-6;
    /* frame 1, no rotation: 2 * ((1,0,0) + (0.1,0,0)) + (1,2,0) = (3.2, 2, 0) */
    ok &= fabs(out[63] - 3.2f) < 1e-5 && fabs(out[64] - 2.0f) < 1e-5 && fabs(out[65]) < 1e-5;
    /* unused keypoints: 2 * 0 + (1,2,0) */
    ok &= out[3 * 20] == 1.0f && out[3 * 20 + 1] == 2.0f && out[3 * 20 + 2] == 0.0f;
    test_report(c, "motion.transform_keypoint", ok, "(%g,%g,%g) (%g,%g,%g)", out[0], out[1], out[2], out[63], out[64], out[65]);
}

static void test_layout(TestCtx *c)
{
    float m[2 * 265], back[2 * 265], clip[2 * 265];
    for (int i = 0; i < 2 * 265; i++)
        m[i] = (float)(i % 265) * 0.01f - 1.0f;
    DittoXInfo x[2];
    ditto_motion_to_xinfo(m, 2, NULL, x);
    bool ok = x[0].scale == m[0] + 1.0f && x[0].pitch.v[0] == m[1] && x[0].yaw.v[0] == m[67] && x[0].roll.v[65] == m[198];
    ok &= x[1].t[0] == m[265 + 199] && x[1].exp[62] == m[265 + 264] && x[1].kp[0] == 0.0f && !x[1].pitch.deg;
    ok &= ditto_xinfo_to_motion(x, 2, back) == 0;
    for (int i = 0; i < 2 * 265; i++)
        ok &= fabs(back[i] - m[i]) <= 1e-6f;
    /* clip to [-0.5, 0.5] per dim */
    for (int i = 0; i < 265; i++) {
        clip[i] = -0.5f;
        clip[265 + i] = 0.5f;
    }
    ditto_motion_to_xinfo(m, 1, clip, x);
    ok &= x[0].scale == 0.5f && x[0].pitch.v[0] == -0.5f && x[0].exp[62] == 0.5f && x[0].yaw.v[0] == m[67];
    x[0].yaw.deg = true;
    ok &= ditto_xinfo_to_motion(x, 1, back) == DITTO_ERR_INVAL;
    test_report(c, "motion.layout_cvt_fmt", ok, "");
}

static void test_smooth(TestCtx *c)
{
    /* a ramp: every value of frame i is i */
    enum { N = 40 };
    DittoXInfo *in = ditto_calloc(N, sizeof *in), *out = ditto_calloc(N, sizeof *out);
    bool ok = in && out;
    for (int i = 0; i < N && ok; i++) {
        in[i].scale = (float)i;
        for (int k = 0; k < 66; k++)
            in[i].pitch.v[k] = in[i].yaw.v[k] = in[i].roll.v[k] = (float)i;
        for (int k = 0; k < 3; k++)
            in[i].t[k] = (float)i;
        for (int k = 0; k < 63; k++)
            in[i].exp[k] = in[i].kp[k] = (float)i;
    }
    ok = ok && ditto_xinfo_smooth(in, N, 13, out) == 0;
    for (int i = 0; i < N && ok; i++) {
        /* interior frames 6..33 keep their value; the ends average the frames that exist */
        int lo = i - 6 < 0 ? 0 : i - 6, hi = i + 6 > N - 1 ? N - 1 : i + 6;
        float want = (float)(lo + hi) / 2.0f;
        if (i >= 6 && i <= N - 7)
            ok &= want == (float)i;
        ok &= out[i].scale == want && out[i].pitch.v[65] == want && out[i].roll.v[0] == want && out[i].t[2] == want && out[i].exp[7] == want &&
              out[i].kp[62] == want;
    }
    ok &= out && out[0].scale == 3.0f && out[N - 1].scale == 36.0f;
    /* 7 frames: every window truncated; frame 3 averages all */
    ok = ok && ditto_xinfo_smooth(in, 7, 13, out) == 0 && out[0].exp[0] == 3.0f && out[3].exp[0] == 3.0f && out[6].exp[0] == 3.0f;
    ok &= ditto_xinfo_smooth(in, 1, 13, out) == 0 && out[0].scale == 0.0f;
    test_report(c, "motion.smooth_ramp", ok, "");
    ditto_free(in);
    ditto_free(out);
}

/* ---- blink schedule ---- */

typedef struct List {
    const int *v;
    int n, used;
} List;

static int list_draw(void *ctx, int64_t k)
{
    List *l = ctx;
    l->used = (int)k + 1;
    return k < l->n ? l->v[k] : 60;
}

static bool only_blinks(const int32_t *idx, int64_t n, const int64_t *starts, int nstarts, int blink_n)
{
    for (int64_t i = 0; i < n; i++) {
        int32_t want = 0;
        for (int s = 0; s < nstarts; s++)
            if (i >= starts[s] && i < starts[s] + blink_n)
                want = (int32_t)(i - starts[s]);
        if (idx[i] != want)
            return false;
    }
    return true;
}

static void test_blink(TestCtx *c)
{
    int32_t idx[200];
    /* -1: never */
    int never = -1;
    bool ok = ditto_blink_schedule(150, 9, &never, 1, NULL, NULL, idx) == 0 && only_blinks(idx, 150, NULL, 0, 9);
    test_report(c, "motion.blink_never", ok, "");

    /* fixed 10, N 40, 3 rows: start 10, stop before 40 - 10 = 30: blinks at 10 and 10+3+10 = 23 */
    int ten = 10;
    ok = ditto_blink_schedule(40, 3, &ten, 1, NULL, NULL, idx) == 0 && only_blinks(idx, 40, (int64_t[]){ 10, 23 }, 2, 3);
    test_report(c, "motion.blink_fixed", ok, "");

    /* list [4, 7], N 24, 5 rows: start 4, end 7 (stop before 17): blinks at 4 and 4+5+7 = 16 */
    int lst[2] = { 4, 7 };
    ok = ditto_blink_schedule(24, 5, lst, 2, NULL, NULL, idx) == 0 && only_blinks(idx, 24, (int64_t[]){ 4, 16 }, 2, 5);
    test_report(c, "motion.blink_list", ok, "");

    /* random (0) with injected draws 75 (start), 64 (end: stop before 86), 85: one blink at 75 */
    int zero = 0;
    List l = { (int[]){ 75, 64, 85 }, 3, 0 };
    ok = ditto_blink_schedule(150, 9, &zero, 1, list_draw, &l, idx) == 0 && l.used == 3 && only_blinks(idx, 150, (int64_t[]){ 75 }, 1, 9);
    test_report(c, "motion.blink_injected", ok, "draws %d", l.used);

    /* random (0), seeded: the draws are ditto_blink_draw_rng(seed, 0, 1, ...) in [60, 100] */
    const uint64_t seed = 1234;
    int64_t starts[8];
    int ns = 0;
    int d0 = ditto_blink_draw_rng(seed, 0), d1 = ditto_blink_draw_rng(seed, 1);
    int64_t stop = 200 - (d1 > 4 ? d1 : 4);
    int64_t pos = d0;
    for (int k = 2; pos < stop; k++) {
        starts[ns++] = pos;
        pos += 4 + ditto_blink_draw_rng(seed, k);
    }
    ok = true;
    for (int k = 0; k < 100; k++) {
        int v = ditto_blink_draw_rng(seed, k);
        ok &= v >= 60 && v <= 100;
    }
    ok &= ditto_blink_schedule(200, 4, &zero, 1, NULL, NULL, idx) == DITTO_ERR_INVAL;   /* random needs a source */
    int32_t idx2[200];
    ok &= ns >= 1;
    /* the stitch's default draw uses the seed: same schedule as computed above */
    DittoXInfo xs;
    memset(&xs, 0, sizeof xs);
    xs.scale = 1.0f;
    float de[4 * 63] = { 0 };
    DittoMotionStitchParams p;
    ditto_motion_stitch_params_default(&p, true);
    p.flag_stitching = false;
    p.delta_eye_arr = de;
    p.n_delta_eye = 4;
    p.n_d = 200;
    p.seed = seed;
    DittoMotionStitch *ms = NULL;
    ok &= ditto_motion_stitch_open(&ms, &p, &xs, NULL, NULL) == 0;
    for (int g = 0; g < 200 && ms; g++)
        idx2[g] = ditto_motion_stitch_blink_row(ms, g);
    ok &= ms && only_blinks(idx2, 200, starts, ns, 4) && ditto_motion_stitch_blink_row(ms, 203) == idx2[3];
    ditto_motion_stitch_close(&ms);
    test_report(c, "motion.blink_seeded", ok, "%d blinks, first at %lld", ns, ns ? (long long)starts[0] : -1LL);
}

/* ---- motion stitch options ---- */

/* Source: scale 1.5, poses at bin 32 (-1.5 deg), t (0.1,0.2,0.3), exp[i] = 0.01 i, kp[i] = 0.02 (i % 7) - 0.05. */
static void make_source(DittoXInfo *x, float shift)
{
    memset(x, 0, sizeof *x);
    x->scale = 1.5f + shift;
    peak(&x->pitch, 32);
    peak(&x->yaw, 32);
    peak(&x->roll, 32);
    for (int k = 0; k < 3; k++)
        x->t[k] = 0.1f * (float)(k + 1) + shift;
    for (int i = 0; i < 63; i++) {
        x->exp[i] = 0.01f * (float)i + shift;
        x->kp[i] = 0.02f * (float)(i % 7) - 0.05f + shift;
    }
}

/* Driving frame g: scale 1.2 + 0.1 g, t = 0.01 g (1,2,3), exp[i] = 0.5 + 0.1 g - 0.003 i, poses: logits w(i) + 0.05 g. */
static void make_driving(DittoXInfo *x, int g, bool moving_pose)
{
    memset(x, 0, sizeof *x);
    x->scale = 1.2f + 0.1f * (float)g;
    for (int i = 0; i < 66; i++) {
        float w = (float)sin(0.3 * i) + (moving_pose ? 0.05f * (float)g * (float)(i % 5) : 0.0f);
        x->pitch.v[i] = w;
        x->yaw.v[i] = 0.5f * w;
        x->roll.v[i] = -w;
    }
    for (int k = 0; k < 3; k++)
        x->t[k] = 0.01f * (float)g * (float)(k + 1);
    for (int i = 0; i < 63; i++)
        x->exp[i] = 0.5f + 0.1f * (float)g - 0.003f * (float)i;
}

/* Run frames 0..n-1 through a stitch with flag_stitching off; final x_d infos into out. */
static bool run_ms(DittoMotionStitchParams *p, const DittoXInfo *src, int n_src, const DittoXInfo *drv, int n, const DittoCtrl *const *ctrl,
                   DittoXInfo *out, float *x_s)
{
    p->flag_stitching = false;
    DittoMotionStitch *ms = NULL;
    if (ditto_motion_stitch_open(&ms, p, &src[0], NULL, NULL) < 0)
        return false;
    const DittoXInfo *sp[16];
    for (int g = 0; g < n; g++)
        sp[g] = &src[ditto_mirror_index(g, n_src)];
    /* two calls, to carry state across batches */
    int h = n / 2;
    int rc = ditto_motion_stitch_frames(ms, 0, h, sp, drv, ctrl, out, x_s, NULL);
    if (rc >= 0)
        rc = ditto_motion_stitch_frames(ms, h, n - h, sp + h, drv + h, ctrl ? ctrl + h : NULL, out + h, x_s ? x_s + h * 63 : NULL, NULL);
    ditto_motion_stitch_close(&ms);
    return rc >= 0;
}

static bool pose_eq_logits(const DittoPose *p, const float *want)
{
    if (p->deg)
        return false;
    for (int i = 0; i < 66; i++)
        if (p->v[i] != want[i])
            return false;
    return true;
}

static void test_exp_masks(TestCtx *c)
{
    DittoXInfo s, d[2], out[2];
    make_source(&s, 0);
    make_driving(&d[0], 0, false);
    make_driving(&d[1], 1, false);
    /* image default, absolute driving, same pose as the source so the gaze fix adds 0:
     * driven exp on lips and eyes, source exp elsewhere */
    d[0].pitch = d[1].pitch = s.pitch;
    d[0].yaw = d[1].yaw = s.yaw;
    DittoMotionStitchParams p;
    ditto_motion_stitch_params_default(&p, true);
    p.relative_d = false;
    bool ok = run_ms(&p, &s, 1, d, 2, NULL, out, NULL);
    int driven = 0;
    for (int k = 0; k < 21 && ok; k++) {
        bool drv = ditto_kp_is_lip(k) || ditto_kp_is_eye(k);
        driven += drv;
        for (int j = 0; j < 3; j++)
            ok &= out[1].exp[3 * k + j] == (drv ? d[1].exp[3 * k + j] : s.exp[3 * k + j]);
    }
    ok &= driven == 11;
    test_report(c, "motion.exp_mask_image", ok, "%d driven keypoints", driven);

    /* video default: only lips; pose, t and scale from the source frame, exp relative to d0 */
    DittoXInfo src2[2];
    make_source(&src2[0], 0);
    make_source(&src2[1], 0.25f);
    make_driving(&d[0], 0, true);
    make_driving(&d[1], 1, true);
    ditto_motion_stitch_params_default(&p, false);
    ok = run_ms(&p, src2, 2, d, 2, NULL, out, NULL);
    for (int k = 0; k < 21 && ok; k++)
        for (int j = 0; j < 3; j++) {
            int i = 3 * k + j;
            float want = ditto_kp_is_lip(k) ? src2[1].exp[i] + (d[1].exp[i] - d[0].exp[i]) : src2[1].exp[i];
            ok &= out[1].exp[i] == want;
        }
    ok &= out[1].scale == src2[1].scale && out[1].t[0] == src2[1].t[0] && pose_eq_logits(&out[1].yaw, src2[1].yaw.v) &&
          !memcmp(out[1].kp, src2[1].kp, sizeof out[1].kp);
    test_report(c, "motion.exp_mask_video", ok, "");
}

static void test_relative(TestCtx *c)
{
    DittoXInfo s, d[3], out[3];
    make_source(&s, 0);
    for (int g = 0; g < 3; g++)
        make_driving(&d[g], g, true);
    DittoMotionStitchParams p;

    /* relative_d: d0 = frame 0; x_d = x_s + (d - d0) for the driven keys (pose on logits), scale and kp from x_s */
    ditto_motion_stitch_params_default(&p, true);
    bool ok = run_ms(&p, &s, 1, d, 3, NULL, out, NULL);
    float want[66];
    for (int i = 0; i < 66; i++)
        want[i] = s.pitch.v[i] + (d[2].pitch.v[i] - d[0].pitch.v[i]);
    ok &= pose_eq_logits(&out[2].pitch, want) && pose_eq_logits(&out[0].roll, s.roll.v);
    for (int k = 0; k < 3; k++)
        ok &= out[2].t[k] == s.t[k] + (d[2].t[k] - d[0].t[k]) && out[0].t[k] == s.t[k];
    ok &= out[2].scale == s.scale && out[2].exp[18] == s.exp[18] + (d[2].exp[18] - d[0].exp[18]) && !memcmp(out[2].kp, s.kp, sizeof s.kp);
    test_report(c, "motion.relative_d", ok, "");

    /* relative_d off: driven keys absolute */
    ditto_motion_stitch_params_default(&p, true);
    p.relative_d = false;
    ok = run_ms(&p, &s, 1, d, 3, NULL, out, NULL);
    ok &= pose_eq_logits(&out[2].pitch, d[2].pitch.v) && out[2].t[1] == d[2].t[1] && out[2].scale == s.scale && out[2].exp[18] == d[2].exp[18];
    test_report(c, "motion.absolute_d", ok, "");

    /* preset d0 */
    DittoXInfo d0;
    make_driving(&d0, 5, true);
    ditto_motion_stitch_params_default(&p, true);
    p.d0 = &d0;
    ok = run_ms(&p, &s, 1, d, 3, NULL, out, NULL);
    ok &= out[0].t[2] == s.t[2] + (d[0].t[2] - d0.t[2]) && out[1].exp[36] == s.exp[36] + (d[1].exp[36] - d0.exp[36]);
    for (int i = 0; i < 66; i++)
        want[i] = s.yaw.v[i] + (d[1].yaw.v[i] - d0.yaw.v[i]);
    ok &= pose_eq_logits(&out[1].yaw, want);
    test_report(c, "motion.d0_preset", ok, "");

    /* ch_info: ratio ch_scale / scale = 2 on exp and pose differences, 1 on t */
    ditto_motion_stitch_params_default(&p, true);
    p.has_ch_scale = true;
    p.ch_scale = 3.0f;
    ok = run_ms(&p, &s, 1, d, 3, NULL, out, NULL);
    for (int i = 0; i < 66; i++)
        want[i] = s.roll.v[i] + (d[2].roll.v[i] - d[0].roll.v[i]) * 2.0f;
    ok &= pose_eq_logits(&out[2].roll, want) && out[2].t[0] == s.t[0] + (d[2].t[0] - d[0].t[0]);
    ok &= out[2].exp[18] == s.exp[18] + (d[2].exp[18] - d[0].exp[18]) * 2.0f && out[2].scale == s.scale;
    test_report(c, "motion.ch_info_ratio", ok, "");

    /* use_d_keys dict without d0: the listed keys scaled */
    ditto_motion_stitch_params_default(&p, true);
    p.relative_d = false;
    p.use_d_dict = true;
    p.use_d_keys = DITTO_XK_BIT(DITTO_XK_T) | DITTO_XK_BIT(DITTO_XK_EXP);
    p.use_d_factor[DITTO_XK_T] = 0.5f;
    ok = run_ms(&p, &s, 1, d, 3, NULL, out, NULL);
    ok &= out[2].t[2] == d[2].t[2] * 0.5f && pose_eq_logits(&out[2].pitch, s.pitch.v) && out[2].exp[18] == d[2].exp[18];
    test_report(c, "motion.use_d_keys_dict", ok, "");
}

static void test_controls(TestCtx *c)
{
    DittoXInfo s, d[4], out[4];
    make_source(&s, 0);
    for (int g = 0; g < 4; g++)
        make_driving(&d[g], g, true);
    DittoMotionStitchParams p;
    ditto_motion_stitch_params_default(&p, true);
    p.relative_d = false;

    DittoCtrl c1 = { .has = DITTO_CTRL_DELTA_YAW | DITTO_CTRL_ALPHA_PITCH | DITTO_CTRL_DELTA_ROLL | DITTO_CTRL_ALPHA_ROLL };
    c1.delta[1] = 5.0;
    c1.alpha[0] = 2.0;
    c1.delta[2] = 3.0;
    c1.alpha[2] = 0.5;
    DittoCtrl c2 = { .has = DITTO_CTRL_DELTA_EXP | DITTO_CTRL_VAD_ALPHA };
    for (int i = 0; i < 63; i++)
        c2.delta_exp[i] = 0.001f * (float)i;
    c2.vad_alpha = 0.25;
    const DittoCtrl *ctrl[4] = { NULL, &c1, &c2, NULL };
    bool ok = run_ms(&p, &s, 1, d, 4, ctrl, out, NULL);
    /* delta: degrees + offset; alpha without delta scales logits; alpha after delta scales degrees */
    float yaw = ditto_bin66_to_degree(d[1].yaw.v) + 5.0f;
    float roll = (ditto_bin66_to_degree(d[1].roll.v) + 3.0f) * 0.5f;
    float pitch[66];
    for (int i = 0; i < 66; i++)
        pitch[i] = d[1].pitch.v[i] * 2.0f;
    ok &= out[1].yaw.deg && out[1].yaw.v[0] == yaw && out[1].roll.deg && out[1].roll.v[0] == roll && pose_eq_logits(&out[1].pitch, pitch);
    /* vad_alpha then delta_exp: lips (driven) and a source-only keypoint (0) */
    int lip = 3 * 6, src = 0;
    float lipw = d[2].exp[lip] * 0.25f + s.exp[lip] * 0.75f + c2.delta_exp[lip];
    float srcw = s.exp[src] * 0.25f + s.exp[src] * 0.75f + c2.delta_exp[src];
    ok &= out[2].exp[lip] == lipw && out[2].exp[src] == srcw && !out[2].yaw.deg && !out[3].yaw.deg;
    test_report(c, "motion.ctrl_pose_exp_vad", ok, "yaw %.4f roll %.4f", out[1].yaw.v[0], out[1].roll.v[0]);

    /* overall controls merge under the frame's: frame alpha_yaw wins, overall delta_exp applies elsewhere */
    DittoCtrl ov = { .has = DITTO_CTRL_ALPHA_YAW | DITTO_CTRL_DELTA_EXP };
    ov.alpha[1] = 0.8;
    for (int i = 0; i < 63; i++)
        ov.delta_exp[i] = 0.01f;
    DittoCtrl c3 = { .has = DITTO_CTRL_ALPHA_YAW };
    c3.alpha[1] = 1.5;
    const DittoCtrl *ctrl2[4] = { NULL, &c3, NULL, NULL };
    p.overall = &ov;
    ok = run_ms(&p, &s, 1, d, 4, ctrl2, out, NULL);
    float y0[66], y1[66];
    for (int i = 0; i < 66; i++) {
        y0[i] = d[0].yaw.v[i] * 0.8f;
        y1[i] = d[1].yaw.v[i] * 1.5f;
    }
    ok &= pose_eq_logits(&out[0].yaw, y0) && pose_eq_logits(&out[1].yaw, y1) && out[1].exp[0] == s.exp[0] + 0.01f;
    DittoCtrl m;
    ditto_ctrl_merge(&ov, &c3, &m);
    ok &= m.alpha[1] == 1.5 && (m.has & DITTO_CTRL_DELTA_EXP) && m.delta_exp[5] == 0.01f;
    test_report(c, "motion.ctrl_overall_merge", ok, "");
}

static void test_fades(TestCtx *c)
{
    DittoXInfo s[2], d[4], out[4];
    make_source(&s[0], 0);
    make_source(&s[1], 0.5f);
    for (int g = 0; g < 4; g++)
        make_driving(&d[g], g, true);
    DittoMotionStitchParams p;
    DittoCtrl f2 = { .has = DITTO_CTRL_FADE_ALPHA, .fade_alpha = 0.25 };
    DittoCtrl f3 = { .has = DITTO_CTRL_FADE_ALPHA | DITTO_CTRL_FADE_OUT_KEYS, .fade_alpha = 0.4,
                     .fade_out_keys = DITTO_XK_BIT(DITTO_XK_T) | DITTO_XK_BIT(DITTO_XK_PITCH) };
    /* frame 0 also carries a control: the "d0" destination is its post-control motion */
    DittoCtrl c0 = { .has = DITTO_CTRL_DELTA_EXP };
    for (int i = 0; i < 63; i++)
        c0.delta_exp[i] = 0.05f;
    const DittoCtrl *ctrl[4] = { &c0, NULL, &f2, &f3 };
    const DittoCtrl *ctrl_ref[4] = { &c0, NULL, NULL, NULL };

    /* "d0": toward frame 0's post-control motion */
    DittoXInfo ref[4];
    ditto_motion_stitch_params_default(&p, true);
    p.relative_d = false;
    p.drive_eye = 0;   /* no gaze shift after the fade */
    bool ok = run_ms(&p, s, 1, d, 4, ctrl_ref, ref, NULL);   /* no fade */
    p.fade_type = DITTO_FADE_D0;
    ok &= run_ms(&p, s, 1, d, 4, ctrl, out, NULL);
    int lip = 3 * 12 + 1;
    ok &= out[2].exp[lip] == ref[2].exp[lip] * 0.25f + ref[0].exp[lip] * 0.75f;
    ok &= out[2].exp[0] == ref[2].exp[0] * 0.25f + (s[0].exp[0] + 0.05f) * 0.75f;
    ok &= out[3].exp[lip] == ref[3].exp[lip] && out[3].t[1] == ref[3].t[1] * 0.4f + ref[0].t[1] * 0.6f;
    ok &= out[3].pitch.v[10] == ref[3].pitch.v[10] * 0.4f + ref[0].pitch.v[10] * 0.6f;
    test_report(c, "motion.fade_d0", ok, "");

    /* "s": toward the frame's own source (video: frame 2 uses source 1 of 2 after the turn) */
    ditto_motion_stitch_params_default(&p, false);
    p.relative_d = false;
    ok = run_ms(&p, s, 2, d, 4, ctrl_ref, ref, NULL);
    p.fade_type = DITTO_FADE_S;
    ok &= run_ms(&p, s, 2, d, 4, ctrl, out, NULL);
    const DittoXInfo *s2 = &s[ditto_mirror_index(2, 2)];
    ok &= ditto_mirror_index(2, 2) == 1 && out[2].exp[lip] == ref[2].exp[lip] * 0.25f + s2->exp[lip] * 0.75f;
    ok &= out[3].t[0] == ref[3].t[0] * 0.4f + s[0].t[0] * 0.6f;
    test_report(c, "motion.fade_s", ok, "");

    /* default "": fade_alpha has no effect */
    ditto_motion_stitch_params_default(&p, true);
    p.relative_d = false;
    ok = run_ms(&p, s, 1, d, 4, ctrl, out, NULL) && run_ms(&p, s, 1, d, 4, ctrl_ref, ref, NULL);
    ok &= !memcmp(out[2].exp, ref[2].exp, sizeof ref[2].exp) && out[3].t[1] == ref[3].t[1];
    test_report(c, "motion.fade_none", ok, "");
}

static void test_gaze(TestCtx *c)
{
    DittoXInfo s, d[2], out[2];
    make_source(&s, 0);   /* yaw, pitch -1.5 deg */
    make_driving(&d[0], 0, false);
    make_driving(&d[1], 1, false);
    DittoMotionStitchParams p;
    ditto_motion_stitch_params_default(&p, true);
    p.relative_d = false;
    /* yaw +7.5 (bin 35) -> dx = 0.26 * 9 > 0; pitch -7.5 (bin 30) -> dy = 0.28 * -6 */
    peak(&d[1].yaw, 35);
    peak(&d[1].pitch, 30);
    bool ok = run_ms(&p, &s, 1, d, 2, NULL, out, NULL);
    double dx = 0.26 * 9, dy = 0.28 * -6;
    ok &= near(out[1].exp[33], d[1].exp[33] + 0.0007 * dx, 1e-6) && near(out[1].exp[45], d[1].exp[45] + 0.001 * dx, 1e-6);
    ok &= near(out[1].exp[34], d[1].exp[34] - 0.001 * dy, 1e-6) && near(out[1].exp[46], d[1].exp[46] - 0.001 * dy, 1e-6);
    ok &= out[1].exp[35] == d[1].exp[35] && out[1].exp[47] == d[1].exp[47];
    test_report(c, "motion.gaze_dx_positive", ok, "%.6f %.6f", out[1].exp[33] - d[1].exp[33], out[1].exp[45] - d[1].exp[45]);

    /* yaw -10.5 (bin 29) -> dx = 0.26 * -9 <= 0: the gains swap */
    peak(&d[1].yaw, 29);
    peak(&d[1].pitch, 32);
    ok = run_ms(&p, &s, 1, d, 2, NULL, out, NULL);
    dx = 0.26 * -9;
    ok &= near(out[1].exp[33], d[1].exp[33] + 0.001 * dx, 1e-6) && near(out[1].exp[45], d[1].exp[45] + 0.0007 * dx, 1e-6);
    ok &= near(out[1].exp[34], d[1].exp[34], 1e-6) && near(out[1].exp[46], d[1].exp[46], 1e-6);
    test_report(c, "motion.gaze_dx_negative", ok, "");

    /* drive_eye off: no gaze shift, eyes from the source */
    p.drive_eye = 0;
    ok = run_ms(&p, &s, 1, d, 2, NULL, out, NULL) && out[1].exp[33] == s.exp[33] && out[1].exp[45] == s.exp[45];
    test_report(c, "motion.gaze_off", ok, "");
}

static void test_delta_eye(TestCtx *c)
{
    enum { N = 12 };
    DittoXInfo s, d[N], out[N];
    make_source(&s, 0);
    for (int g = 0; g < N; g++) {
        make_driving(&d[g], g, false);
        d[g].pitch = s.pitch;   /* source pose: no gaze shift */
        d[g].yaw = s.yaw;
    }
    float de[3 * 63];
    for (int i = 0; i < 3 * 63; i++)
        de[i] = 0.1f * (float)(i / 63 + 1);   /* row r holds 0.1 (r+1) */
    int open = 2;
    DittoMotionStitchParams p;
    ditto_motion_stitch_params_default(&p, true);
    p.relative_d = false;
    p.delta_eye_arr = de;
    p.n_delta_eye = 3;
    p.delta_eye_open_n = &open;
    p.n_delta_eye_open_n = 1;
    p.n_d = N;
    bool ok = run_ms(&p, &s, 1, d, N, NULL, out, NULL);
    /* fixed 2: blinks at 2 and 2+3+2 = 7 (stop before 12 - 3 = 9); eyes = source + row, lips driven */
    static const int rows[N] = { 0, 0, 0, 1, 2, 0, 0, 0, 1, 2, 0, 0 };
    for (int g = 0; g < N && ok; g++) {
        int eye = 3 * 13, lipk = 3 * 14;
        ok &= out[g].exp[eye] == s.exp[eye] + de[rows[g] * 63 + eye] && out[g].exp[lipk] == d[g].exp[lipk] && out[g].exp[0] == s.exp[0];
    }
    test_report(c, "motion.delta_eye", ok, "");
}

/* ---- batched stitching network ---- */

static void test_network(TestCtx *c)
{
    const char *shared = test_shared_dir();
    char path[4200];
    snprintf(path, sizeof path, "%s/fixtures/ditto/stitching.pth", shared ? shared : ".");
    DittoCatalog *cat = NULL;
    DittoLogger lg = ditto_logger_stderr(DITTO_LOG_ERROR);
    if (!shared || ditto_catalog_open_pth(&cat, path, NULL) < 0) {
        c->skipped++;
        printf("SKIP motion.stitch_batched (no %s)\n", path);
        return;
    }
    DittoStitch *net = NULL;
    DittoArena ws;
    memset(&ws, 0, sizeof ws);
    bool ok = ditto_stitch_load(&net, c->be, cat) == 0 && ditto_arena_init(&ws, &c->be->allocator, 0) == 0;
    enum { N = 6 };
    DittoXInfo src[2], d[N];
    make_source(&src[0], 0);
    make_source(&src[1], 0.1f);
    for (int g = 0; g < N; g++)
        make_driving(&d[g], g, true);
    const DittoXInfo *sp[N];
    for (int g = 0; g < N; g++)
        sp[g] = &src[ditto_mirror_index(g, 2)];
    /* all N frames in one call vs one frame per call: same keypoints */
    TT *xs = tt_new(c, DITTO_F32, 3, (int64_t[]){ N, 21, 3 }), *xd = tt_new(c, DITTO_F32, 3, (int64_t[]){ N, 21, 3 });
    TT *ys = tt_new(c, DITTO_F32, 3, (int64_t[]){ N, 21, 3 }), *yd = tt_new(c, DITTO_F32, 3, (int64_t[]){ N, 21, 3 });
    DittoMotionStitchParams p;
    ditto_motion_stitch_params_default(&p, false);
    DittoMotionStitch *ms = NULL;
    ok = ok && ditto_motion_stitch_open(&ms, &p, &src[0], net, &lg) == 0;
    ok = ok && ditto_motion_stitch_run(ms, c->be, &ws, 0, N, sp, d, NULL, &xs->dev, &xd->dev, NULL) == 0;
    ditto_motion_stitch_close(&ms);
    ok = ok && ditto_motion_stitch_open(&ms, &p, &src[0], net, NULL) == 0;   /* quiet: expects an error below */
    for (int g = 0; g < N && ok; g++) {
        DittoTensor bs, bd;
        ok = ditto_tensor_slice(&ys->dev, 0, g, g + 1, 1, &bs) == 0 && ditto_tensor_slice(&yd->dev, 0, g, g + 1, 1, &bd) == 0 &&
             ditto_motion_stitch_run(ms, c->be, &ws, g, 1, sp + g, d + g, NULL, &bs, &bd, NULL) == 0;
    }
    /* out of order is an error */
    DittoTensor b0;
    ok = ok && ditto_tensor_slice(&ys->dev, 0, 0, 1, 1, &b0) == 0 && ditto_motion_stitch_run(ms, c->be, &ws, 2, 1, sp, d, NULL, &b0, &b0, NULL) < 0;
    ditto_motion_stitch_close(&ms);
    ok = ok && tt_to_host(xs) == 0 && tt_to_host(xd) == 0 && tt_to_host(ys) == 0 && tt_to_host(yd) == 0;
    double ref[N * 63];
    if (ok) {
        for (int i = 0; i < N * 63; i++)
            ref[i] = tt_f32(yd)[i];
        TestErr e = test_compare(tt_f32(xd), ref, N * 63);
        ok &= !memcmp(tt_f32(xs), tt_f32(ys), N * 63 * sizeof(float)) && e.rel_l2 <= 1e-6 && e.nonfinite == 0;
        /* the network moved the keypoints */
        float pre[N * 63];
        DittoXInfo fin[N];
        ok = ok && ditto_motion_stitch_open(&ms, &p, &src[0], net, &lg) == 0 &&
             ditto_motion_stitch_frames(ms, 0, N, sp, d, NULL, fin, NULL, pre) == 0;
        ditto_motion_stitch_close(&ms);
        double diff = 0;
        for (int i = 0; i < N * 63; i++)
            diff += fabs(pre[i] - tt_f32(xd)[i]);
        ok &= diff > 1e-3;
    }
    test_report(c, "motion.stitch_batched", ok, "");
    tt_free(xs);
    tt_free(xd);
    tt_free(ys);
    tt_free(yd);
    ditto_arena_free(&ws);
    ditto_stitch_free(&net);
    ditto_catalog_close(&cat);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    test_emotion(&c);
    test_mirror(&c);
    test_conditions(&c);
    test_bin66(&c);
    test_rotation(&c);
    test_transform(&c);
    test_layout(&c);
    test_smooth(&c);
    test_blink(&c);
    test_exp_masks(&c);
    test_relative(&c);
    test_controls(&c);
    test_fades(&c);
    test_gaze(&c);
    test_delta_eye(&c);
    test_network(&c);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
