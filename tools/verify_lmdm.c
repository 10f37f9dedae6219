/*
 * `ditto verify` runners of the motion generator (see tools/verify.h):
 *   module   LMDM                   one guided denoiser step: x, cond_frame, cond, time_cond -> pred_noise, x_start
 *   sampler  LMDM                   DDIM with injected x_T and step noise: kp_cond, aud_cond, x_T, noise -> out
 *   pipeline audio2motion_offline   conditions + the offline window driver with injected noise in upstream's
 *                                   order -> res_kp_seq, x_d_<key> (cvt_fmt), frame_idx
 * The MotionDecoder's head count is not in the checkpoint: it comes from the
 * case's submodule_overrides, else from the manifest's weights section.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "models/lmdm.h"
#include "pipeline/audio2motion.h"
#include "pipeline/conditions.h"
#include "pipeline/ddim.h"
#include "pipeline/motion.h"
#include "tools/verify.h"

#define MANIFEST_MAX (256L << 20)

static const cJSON *json_path(const cJSON *o, const char *const *keys, int n)
{
    for (int i = 0; i < n && o; i++)
        o = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
    return o;
}

static const cJSON *heads_of(const cJSON *overrides_owner)
{
    static const char *const k[4] = { "submodule_overrides", "model", "kwargs", "num_heads" };
    const cJSON *h = json_path(overrides_owner, k, 4);
    return cJSON_IsNumber(h) ? h : NULL;
}

/* manifest weights[file].submodule_overrides...num_heads, read from r->dir; 0 when absent. */
static int manifest_heads(DittoVerifyRun *r, const char *file)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", r->dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    char *text = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && n < MANIFEST_MAX && fseek(f, 0, SEEK_SET) == 0 && (text = ditto_malloc((size_t)n + 1))) {
        if (fread(text, 1, (size_t)n, f) == (size_t)n)
            text[n] = '\0';
        else
            n = -1;
    }
    fclose(f);
    int heads = 0;
    cJSON *root = text && n > 0 ? cJSON_Parse(text) : NULL;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "weights"), file);
    const cJSON *h = heads_of(w);
    if (h)
        heads = h->valueint;
    cJSON_Delete(root);
    ditto_free(text);
    return heads;
}

static int lmdm_load(DittoVerifyRun *r, void **model)
{
    if (!r->weights)
        return ditto_fail(&r->log, DITTO_ERR_INVAL, "%s: the manifest gives no weights_file", r->name);
    DittoLmdmParams p;
    ditto_lmdm_params_default(&p);
    const cJSON *h = heads_of(r->json);
    const cJSON *wf = cJSON_GetObjectItemCaseSensitive(r->json, "weights_file");
    int heads = h ? h->valueint : cJSON_IsString(wf) ? manifest_heads(r, wf->valuestring) : 0;
    if (heads > 0)
        p.num_heads = heads;
    DittoLmdm *m = NULL;
    int rc = ditto_lmdm_load(&m, r->be, r->weights, &p);
    *model = m;
    return rc;
}

static void lmdm_release(void *model)
{
    DittoLmdm *m = model;
    ditto_lmdm_free(&m);
}

/* ---- host <-> backend helpers ---- */

/* Input `name` downloaded to a new host array (ditto_free), with its tensor. */
static int host_input(DittoVerifyRun *r, const char *name, DittoTensor *t, float **host)
{
    *host = NULL;
    DITTO_TRY(ditto_verify_input(r, name, t));
    size_t bytes = ditto_tensor_nbytes(t);
    float *h = ditto_malloc(bytes ? bytes : 1);
    if (!h)
        return DITTO_ERR_NOMEM;
    int rc = r->be->sync(r->be);
    if (rc >= 0)
        rc = r->be->download(r->be, h, t->data, bytes);
    if (rc < 0) {
        ditto_free(h);
        return rc;
    }
    *host = h;
    return 0;
}

/* A host array as a backend tensor of the given shape. */
static int upload_tensor(DittoVerifyRun *r, const float *host, int ndim, const int64_t *shape, DittoTensor *t)
{
    DITTO_TRY(ditto_verify_output(r, ndim, shape, t));
    return r->be->upload(r->be, t->data, host, ditto_tensor_nbytes(t));
}

static int submit_host(DittoVerifyRun *r, const char *name, const float *host, int ndim, const int64_t *shape)
{
    DittoTensor t;
    DITTO_TRY(upload_tensor(r, host, ndim, shape, &t));
    return ditto_verify_submit(r, name, &t);
}

/* Report a host intermediate when intermediates are wanted. */
static int tap_host(DittoVerifyRun *r, const char *name, const float *host, int ndim, const int64_t *shape)
{
    if (!r->tap)
        return 0;
    DittoTensor t;
    DITTO_TRY(upload_tensor(r, host, ndim, shape, &t));
    ditto_tap(r->tap, name, &t);
    return 0;
}

static int case_int(const DittoVerifyRun *r, const char *key, int *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(r->json, key);
    if (!cJSON_IsNumber(j))
        return ditto_fail(&r->log, DITTO_ERR_INVAL, "%s: the manifest case has no \"%s\"", r->name, key);
    *v = j->valueint;
    return 0;
}

/* ---- module LMDM: one guided step ---- */

static int step_forward(DittoVerifyRun *r, void *model)
{
    DittoLmdm *m = model;
    DittoTensor x, kp, cond, tc, pred, xs;
    float *tf = NULL;
    int *times = NULL;
    DittoDdimSchedule *s = NULL;
    DITTO_TRY(ditto_verify_input(r, "x", &x));
    DITTO_TRY(ditto_verify_input(r, "cond_frame", &kp));
    DITTO_TRY(ditto_verify_input(r, "cond", &cond));
    int rc = host_input(r, "time_cond", &tc, &tf);
    const int64_t B = x.ndim == 3 ? x.shape[0] : 0;
    if (rc >= 0 && (B < 1 || ditto_tensor_numel(&tc) != B))
        rc = ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: x must be (B, L, F) with one time_cond per item", r->name);
    if (rc >= 0 && (!(times = ditto_malloc((size_t)B * sizeof *times)) || !(s = ditto_malloc(sizeof *s))))
        rc = DITTO_ERR_NOMEM;
    for (int64_t b = 0; rc >= 0 && b < B; b++) {
        times[b] = (int)tf[b];   /* exact integers stored as float32 */
        if (times[b] < 0 || times[b] >= DITTO_LMDM_T || (float)times[b] != tf[b])
            rc = ditto_fail(&r->log, DITTO_ERR_RANGE, "%s: time_cond[%lld] = %g is not a step in [0, %d)", r->name, (long long)b, tf[b], DITTO_LMDM_T);
    }
    /* only the float32 schedule buffers are used: any step count */
    if (rc >= 0)
        rc = ditto_ddim_schedule_init(s, DITTO_DDIM_DEFAULT_STEPS, DITTO_DDIM_COEF_EXACT);
    if (rc >= 0)
        rc = ditto_verify_output(r, x.ndim, x.shape, &pred);
    if (rc >= 0)
        rc = ditto_verify_output(r, x.ndim, x.shape, &xs);
    if (rc >= 0)
        rc = ditto_ddim_guided_step(m, r->ws, s, &x, &kp, &cond, times, &pred, &xs, r->tap);
    if (rc >= 0)
        rc = ditto_verify_submit(r, "pred_noise", &pred);
    if (rc >= 0)
        rc = ditto_verify_submit(r, "x_start", &xs);
    ditto_free(tf);
    ditto_free(times);
    ditto_free(s);
    return rc;
}

/* ---- sampler LMDM: DDIM with injected noise ---- */

/* Collects the per-step taps of ditto_ddim_sample() into (S, B, L, F) host arrays. */
typedef struct StepTaps {
    DittoBackend *be;
    const char *names[2];
    float *buf[2];
    size_t cap, used[2];
    bool bad;
} StepTaps;

static void step_tap(void *ctx, const char *name, const DittoTensor *t)
{
    StepTaps *st = ctx;
    for (int i = 0; i < 2; i++) {
        if (strcmp(name, st->names[i]))
            continue;
        size_t n = (size_t)ditto_tensor_numel(t);
        if (st->used[i] + n > st->cap || !ditto_tensor_is_contiguous(t) || st->be->sync(st->be) < 0 ||
            st->be->download(st->be, st->buf[i] + st->used[i], t->data, n * sizeof(float)) < 0) {
            st->bad = true;
            return;
        }
        st->used[i] += n;
    }
}

/* Schedule intermediates of the case: alphas_cumprod, time pairs, per-step coefficients. */
static int tap_schedule(DittoVerifyRun *r, const DittoDdimSchedule *s)
{
    const int S = s->steps;
    float *v = ditto_malloc((size_t)(2 * S + 4) * sizeof *v);
    if (!v)
        return DITTO_ERR_NOMEM;
    int rc = tap_host(r, "alphas_cumprod", s->alphas_cumprod, 1, (const int64_t[]){ DITTO_LMDM_T });
    for (int i = 0; i < S; i++) {
        v[2 * i] = (float)s->step[i].t;
        v[2 * i + 1] = (float)s->step[i].t_next;
    }
    if (rc >= 0)
        rc = tap_host(r, "ddim_time_pairs", v, 2, (const int64_t[]){ S, 2 });
    for (int i = 0; i < S; i++)
        v[i] = (float)s->step[i].t;
    if (rc >= 0)
        rc = tap_host(r, "steps_time_cond", v, 1, (const int64_t[]){ S });
    for (int k = 0; rc >= 0 && k < 3 && S > 1; k++) {
        for (int i = 0; i < S - 1; i++)
            v[i] = k == 0 ? s->step[i].alpha_next_sqrt : k == 1 ? s->step[i].c : s->step[i].sigma;
        rc = tap_host(r, k == 0 ? "ddim_alpha_next_sqrt" : k == 1 ? "ddim_c" : "ddim_sigma", v, 1, (const int64_t[]){ S - 1 });
    }
    ditto_free(v);
    return rc;
}

static int ddim_forward(DittoVerifyRun *r, void *model)
{
    DittoLmdm *m = model;
    DittoTensor kp, cond, xT, z, out;
    int S = 0;
    DITTO_TRY(case_int(r, "sampling_timesteps", &S));
    DITTO_TRY(ditto_verify_input(r, "kp_cond", &kp));
    DITTO_TRY(ditto_verify_input(r, "aud_cond", &cond));
    DITTO_TRY(ditto_verify_input(r, "x_T", &xT));
    DITTO_TRY(ditto_verify_input(r, "noise", &z));
    DittoDdimSchedule *s = ditto_malloc(sizeof *s);
    if (!s)
        return DITTO_ERR_NOMEM;
    StepTaps st = { .be = r->be, .names = { "steps_x_t", "steps_x_start" } };
    int rc = ditto_ddim_schedule_init(s, S, DITTO_DDIM_COEF_EXACT);
    if (rc < 0)
        ditto_fail(&r->log, rc, "%s: sampling_timesteps %d", r->name, S);
    if (rc >= 0)
        rc = ditto_verify_output(r, xT.ndim, xT.shape, &out);
    DittoTap tap = { step_tap, &st };
    if (rc >= 0 && r->tap) {
        st.cap = (size_t)S * (size_t)ditto_tensor_numel(&xT);
        st.buf[0] = ditto_malloc(st.cap * sizeof(float));
        st.buf[1] = ditto_malloc(st.cap * sizeof(float));
        if (!st.buf[0] || !st.buf[1])
            rc = DITTO_ERR_NOMEM;
    }
    DittoDdimNoise nz = { .x_T = &xT, .z = &z };
    if (rc >= 0)
        rc = ditto_ddim_sample(m, r->ws, s, &kp, &cond, &nz, &out, r->tap ? &tap : NULL);
    if (rc >= 0)
        rc = ditto_verify_submit(r, "out", &out);
    if (rc >= 0 && r->tap) {
        rc = tap_schedule(r, s);
        /* (S, B, L, F), step 0 = x_T */
        int64_t shape[4] = { S, xT.shape[0], xT.shape[1], xT.shape[2] };
        for (int i = 0; rc >= 0 && i < 2 && !st.bad; i++)
            if (st.used[i] == st.cap)
                rc = tap_host(r, st.names[i], st.buf[i], 4, shape);
    }
    ditto_free(st.buf[0]);
    ditto_free(st.buf[1]);
    ditto_free(s);
    return rc;
}

/* ---- pipeline audio2motion_offline ---- */

/* Records what every window got and gave (for the intermediates). */
typedef struct WinRec {
    DittoA2mSampler inner;
    int64_t S, max, calls;
    float *kp;       /* (max, 265) */
    float *pred;     /* (max, S, 265) */
} WinRec;

static int rec_sample(void *ctx, int64_t w, const float *kp, const float *cond, float *pred)
{
    WinRec *wr = ctx;
    int rc = wr->inner.fn(wr->inner.ctx, w, kp, cond, pred);
    if (rc >= 0 && w == wr->calls && w < wr->max) {
        memcpy(wr->kp + w * DITTO_MOTION_DIM, kp, DITTO_MOTION_DIM * sizeof(float));
        memcpy(wr->pred + w * wr->S * DITTO_MOTION_DIM, pred, (size_t)(wr->S * DITTO_MOTION_DIM) * sizeof(float));
        wr->calls++;
    }
    return rc;
}

/* The source: x_s_<key> (n_src, dim) -> infos; eye_open, eye_ball. */
typedef struct Source {
    int64_t n_src;
    DittoXInfo *x;
    float *eye_open, *eye_ball;
} Source;

static int read_source(DittoVerifyRun *r, Source *src)
{
    static const char *const keys[7] = { "x_s_scale", "x_s_pitch", "x_s_yaw", "x_s_roll", "x_s_t", "x_s_exp", "x_s_kp" };
    static const int64_t dims[7] = { 1, DITTO_POSE_BINS, DITTO_POSE_BINS, DITTO_POSE_BINS, 3, DITTO_KP_DIM, DITTO_KP_DIM };
    float *v[7] = { 0 };
    DittoTensor t;
    int rc = 0;
    memset(src, 0, sizeof *src);
    for (int k = 0; k < 7 && rc >= 0; k++) {
        rc = host_input(r, keys[k], &t, &v[k]);
        if (rc >= 0 && (t.ndim != 2 || t.shape[1] != dims[k] || (k && t.shape[0] != src->n_src) || t.shape[0] < 1))
            rc = ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: %s must be (n_src, %lld)", r->name, keys[k], (long long)dims[k]);
        if (k == 0 && rc >= 0)
            src->n_src = t.shape[0];
    }
    if (rc >= 0)
        rc = host_input(r, "eye_open", &t, &src->eye_open);
    if (rc >= 0 && (t.ndim != 2 || t.shape[0] != src->n_src || t.shape[1] != DITTO_EYE_OPEN_DIM))
        rc = ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: eye_open must be (n_src, 2)", r->name);
    if (rc >= 0)
        rc = host_input(r, "eye_ball", &t, &src->eye_ball);
    if (rc >= 0 && (t.ndim != 2 || t.shape[0] != src->n_src || t.shape[1] != DITTO_EYE_BALL_DIM))
        rc = ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: eye_ball must be (n_src, 6)", r->name);
    if (rc >= 0 && !(src->x = ditto_calloc((size_t)src->n_src, sizeof *src->x)))
        rc = DITTO_ERR_NOMEM;
    for (int64_t i = 0; rc >= 0 && i < src->n_src; i++) {
        DittoXInfo *x = &src->x[i];
        x->scale = v[0][i];
        memcpy(x->pitch.v, v[1] + i * DITTO_POSE_BINS, sizeof x->pitch.v);
        memcpy(x->yaw.v, v[2] + i * DITTO_POSE_BINS, sizeof x->yaw.v);
        memcpy(x->roll.v, v[3] + i * DITTO_POSE_BINS, sizeof x->roll.v);
        memcpy(x->t, v[4] + i * 3, sizeof x->t);
        memcpy(x->exp, v[5] + i * DITTO_KP_DIM, sizeof x->exp);
        memcpy(x->kp, v[6] + i * DITTO_KP_DIM, sizeof x->kp);
    }
    for (int k = 0; k < 7; k++)
        ditto_free(v[k]);
    return rc;
}

static void free_source(Source *src)
{
    ditto_free(src->x);
    ditto_free(src->eye_open);
    ditto_free(src->eye_ball);
}

/* Audio2Motion settings from the case's "setup" (upstream names). */
static int a2m_setup(DittoVerifyRun *r, DittoA2mParams *p, DittoEmo *emo, bool *eye_f0, bool *clip)
{
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(r->json, "setup");
    const cJSON *v;
    ditto_a2m_params_default(p);
    ditto_emo_default(emo);
    p->cond_dim = DITTO_COND_DIM;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(st, "seq_frames")))
        p->seq_frames = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(st, "overlap_v2")))
        p->overlap = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(st, "smo_k_d")))
        p->smooth_k = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(st, "fix_kp_cond")))
        p->fix_kp_cond = v->valueint;
    v = cJSON_GetObjectItemCaseSensitive(st, "fix_kp_cond_dim");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2) {
        p->fix_kp_cond_dim[0] = cJSON_GetArrayItem(v, 0)->valueint;
        p->fix_kp_cond_dim[1] = cJSON_GetArrayItem(v, 1)->valueint;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "online_mode")))
        return ditto_fail(&r->log, DITTO_ERR_UNSUPPORTED, "%s: online_mode in an audio2motion_offline case", r->name);
    if ((v = cJSON_GetObjectItemCaseSensitive(st, "emo")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v))
            return ditto_fail(&r->log, DITTO_ERR_UNSUPPORTED, "%s: only an integer emo label is supported here", r->name);
        emo->kind = DITTO_EMO_LABEL;
        emo->label = v->valueint;
    }
    *eye_f0 = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "eye_f0_mode"));
    v = cJSON_GetObjectItemCaseSensitive(st, "v_min_max_for_clip");
    *clip = cJSON_IsString(v) && !strcmp(v->valuestring, "io:v_min_max_for_clip");
    if (v && !cJSON_IsNull(v) && !*clip)
        return ditto_fail(&r->log, DITTO_ERR_UNSUPPORTED, "%s: v_min_max_for_clip must be null or \"io:v_min_max_for_clip\"", r->name);
    return 0;
}

/* cvt_fmt outputs, per key: x_d_<key> (N, dim). */
static int submit_xinfo(DittoVerifyRun *r, const DittoXInfo *xi, int64_t N)
{
    static const char *const names[6] = { "x_d_scale", "x_d_pitch", "x_d_yaw", "x_d_roll", "x_d_t", "x_d_exp" };
    static const int dims[6] = { 1, DITTO_POSE_BINS, DITTO_POSE_BINS, DITTO_POSE_BINS, 3, DITTO_KP_DIM };
    float *o = ditto_malloc((size_t)N * DITTO_POSE_BINS * sizeof *o);
    if (!o)
        return DITTO_ERR_NOMEM;
    int rc = 0;
    for (int k = 0; k < 6 && rc >= 0; k++) {
        for (int64_t g = 0; g < N; g++) {
            const DittoXInfo *x = &xi[g];
            const float *src = k == 0 ? &x->scale : k == 1 ? x->pitch.v : k == 2 ? x->yaw.v : k == 3 ? x->roll.v : k == 4 ? x->t : x->exp;
            memcpy(o + g * dims[k], src, (size_t)dims[k] * sizeof(float));
        }
        rc = submit_host(r, names[k], o, 2, (const int64_t[]){ N, dims[k] });
    }
    ditto_free(o);
    return rc;
}

static int a2m_forward(DittoVerifyRun *r, void *model)
{
    DittoLmdm *m = model;
    const DittoLmdmDims *d = ditto_lmdm_dims(m);
    DittoA2mParams p;
    DittoEmo emo;
    bool eye_f0 = false, clip = false;
    int steps = 0;
    DITTO_TRY(case_int(r, "sampling_timesteps", &steps));
    DITTO_TRY(a2m_setup(r, &p, &emo, &eye_f0, &clip));

    Source src;
    DittoTensor aud_t, xT, z, vt;
    float *aud = NULL, *vmm = NULL, *cond = NULL, *motion = NULL;
    DittoXInfo *smo = NULL, *xi = NULL;
    DittoConditions cd;
    memset(&cd, 0, sizeof cd);
    DittoA2mLmdm *smp = NULL;
    WinRec wr = { 0 };
    int rc = read_source(r, &src);
    if (rc >= 0)
        rc = host_input(r, "aud_feat", &aud_t, &aud);
    if (rc >= 0 && (aud_t.ndim != 2 || aud_t.shape[1] != DITTO_AUD_DIM || aud_t.shape[0] < 1))
        rc = ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: aud_feat must be (N, %d)", r->name, DITTO_AUD_DIM);
    if (rc >= 0 && clip) {
        rc = host_input(r, "v_min_max_for_clip", &vt, &vmm);
        if (rc >= 0 && ditto_tensor_numel(&vt) != 2 * DITTO_MOTION_DIM)
            rc = ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: v_min_max_for_clip must be (2, %d)", r->name, DITTO_MOTION_DIM);
    }
    if (rc >= 0)
        rc = ditto_verify_input(r, "x_T", &xT);
    if (rc >= 0)
        rc = ditto_verify_input(r, "noise", &z);
    const int64_t N = rc >= 0 ? aud_t.shape[0] : 0, n_src = src.n_src, S = p.seq_frames;

    /* x_s_info_0: frame 0 of the k=13-smoothed source for a video (StreamSDK.setup); sc from the raw frame 0 */
    float s_kp[DITTO_MOTION_DIM];
    if (rc >= 0 && !(smo = ditto_malloc((size_t)n_src * sizeof *smo)))
        rc = DITTO_ERR_NOMEM;
    if (rc >= 0 && n_src > 1)
        rc = ditto_xinfo_smooth(src.x, n_src, 13, smo);
    else if (rc >= 0)
        smo[0] = src.x[0];
    if (rc >= 0)
        rc = ditto_xinfo_to_motion(&smo[0], 1, s_kp);
    if (rc >= 0)
        rc = tap_host(r, "s_kp_cond", s_kp, 1, (const int64_t[]){ DITTO_MOTION_DIM });

    /* conditions of every frame: cond_all = CH(aud_feat, 0) */
    if (rc >= 0) {
        DittoConditionsParams cp = { .emo = emo, .eye_open = src.eye_open, .eye_ball = src.eye_ball, .n_src = n_src, .sc = src.x[0].kp,
                                     .eye_f0_mode = eye_f0 };
        rc = ditto_conditions_init(&cd, &cp, &r->log);
    }
    if (rc >= 0 && !(cond = ditto_malloc((size_t)N * DITTO_COND_DIM * sizeof *cond)))
        rc = DITTO_ERR_NOMEM;
    if (rc >= 0)
        rc = ditto_conditions_build(&cd, aud, N, 0, cond);

    /* the LMDM with upstream's draws: x_T[w] per window, the same step noises for every window */
    if (rc >= 0) {
        DittoA2mLmdmParams lp;
        ditto_a2m_lmdm_params_default(&lp);
        lp.steps = steps;
        lp.x_T = &xT;
        lp.z = &z;
        rc = ditto_a2m_lmdm_open(&smp, m, &lp);
    }
    if (rc >= 0) {
        wr.inner = ditto_a2m_lmdm_sampler(smp);
        wr.S = S;
        wr.max = ditto_a2m_num_windows(&p, N);
        if (wr.max < 0)
            rc = (int)wr.max;
        else if (!(wr.kp = ditto_malloc((size_t)(wr.max * DITTO_MOTION_DIM + 1) * sizeof(float))) ||
                 !(wr.pred = ditto_malloc((size_t)(wr.max * S * DITTO_MOTION_DIM + 1) * sizeof(float))))
            rc = DITTO_ERR_NOMEM;
    }
    if (rc >= 0 && S != d->seq_len)
        rc = ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: seq_frames %lld, the LMDM's window is %lld", r->name, (long long)S, (long long)d->seq_len);
    if (rc >= 0 && !(motion = ditto_malloc((size_t)N * DITTO_MOTION_DIM * sizeof *motion)))
        rc = DITTO_ERR_NOMEM;
    if (rc >= 0) {
        p.v_min_max = vmm;
        rc = ditto_a2m_offline(&p, s_kp, (DittoA2mSampler){ rec_sample, &wr, wr.inner.seq_frames, wr.inner.cond_dim }, cond, N, motion, &r->log);
    }
    if (rc >= 0)
        rc = tap_host(r, "windows_kp_cond", wr.kp, 2, (const int64_t[]){ wr.calls, DITTO_MOTION_DIM });
    if (rc >= 0)
        rc = tap_host(r, "windows_pred", wr.pred, 3, (const int64_t[]){ wr.calls, S, DITTO_MOTION_DIM });

    /* res_kp_seq (not clipped), cvt_fmt (clipped), the source frame of every generated frame */
    if (rc >= 0)
        rc = submit_host(r, "res_kp_seq", motion, 2, (const int64_t[]){ N, DITTO_MOTION_DIM });
    if (rc >= 0 && !(xi = ditto_malloc((size_t)N * sizeof *xi)))
        rc = DITTO_ERR_NOMEM;
    if (rc >= 0) {
        ditto_motion_to_xinfo(motion, N, vmm, xi);
        rc = submit_xinfo(r, xi, N);
    }
    if (rc >= 0) {
        for (int64_t g = 0; g < N; g++)
            motion[g] = (float)ditto_mirror_index(g, n_src);
        rc = submit_host(r, "frame_idx", motion, 1, (const int64_t[]){ N });
    }

    ditto_a2m_lmdm_close(&smp);
    ditto_conditions_free(&cd);
    ditto_free(wr.kp);
    ditto_free(wr.pred);
    ditto_free(xi);
    ditto_free(motion);
    ditto_free(cond);
    ditto_free(smo);
    ditto_free(vmm);
    ditto_free(aud);
    free_source(&src);
    return rc;
}

const DittoVerifyRunner ditto_verify_runners_lmdm[] = {
    { "module", "LMDM", lmdm_load, step_forward, lmdm_release },
    { "sampler", "LMDM", lmdm_load, ddim_forward, lmdm_release },
    { "pipeline", "audio2motion_offline", lmdm_load, a2m_forward, lmdm_release },
    { NULL, NULL, NULL, NULL, NULL },
};
