/*
 * `ditto verify` runners for the motion pipeline: the keypoint functions
 * (bin66_to_degree, get_rotation_matrix, transform_keypoint) and the
 * pipeline stages condition_handler, motion_stitch and smooth_x_s_info.
 * The math runs on the host (src/pipeline/motion.h, conditions.h,
 * motion_stitch.h); the stitching network on the verify backend. The
 * manifest case (setup, ctrl_info, calls, random_draws) says how upstream
 * was driven; "io:NAME" and "io:NAME[i]" in it refer to io tensors.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "pipeline/conditions.h"
#include "pipeline/motion.h"
#include "pipeline/motion_stitch.h"
#include "tools/verify.h"

/* Frames per ditto_motion_stitch_run call (the render batch size). */
#define MS_BATCH 8

/* ---- io and manifest helpers ---- */

/* Host float32 copy of io tensor `name` (free with ditto_free); shape and numel optional. */
static int io_read(DittoVerifyRun *r, const char *name, float **data, int *ndim, int64_t shape[DITTO_MAX_DIMS], int64_t *numel)
{
    const DittoCatalogEntry *e = NULL;
    int rc = ditto_verify_read_io(r, name, &e, data);
    if (!e)
        return ditto_fail(&r->log, DITTO_ERR_NOENT, "%s: no tensor '%s' in the io file", r->name, name);
    if (rc < 0)
        return ditto_fail(&r->log, rc, "%s: cannot read '%s' of the io file: %s", r->name, name, ditto_strerror(rc));
    if (ndim)
        *ndim = e->ndim;
    if (shape)
        for (int i = 0; i < e->ndim; i++)
            shape[i] = e->shape[i];
    if (numel)
        *numel = ditto_catalog_entry_numel(e);
    return 0;
}

/* io tensor `name`, which must hold rows x cols values (any shape). */
static int io_read_rows(DittoVerifyRun *r, const char *name, int64_t cols, float **data, int64_t *rows)
{
    int64_t n = 0;
    DITTO_TRY(io_read(r, name, data, NULL, NULL, &n));
    if (n % cols || n == 0) {
        ditto_free(*data);
        *data = NULL;
        return ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: io '%s' has %lld values, expected rows of %lld", r->name, name, (long long)n,
                          (long long)cols);
    }
    *rows = n / cols;
    return 0;
}

/* Place host values in a new backend tensor of the given shape. */
static int host_tensor(DittoVerifyRun *r, int ndim, const int64_t *shape, const float *host, DittoTensor *t)
{
    DITTO_TRY(ditto_verify_output(r, ndim, shape, t));
    return r->be->upload(r->be, t->data, host, ditto_tensor_nbytes(t));
}

static int submit_host(DittoVerifyRun *r, const char *name, int ndim, const int64_t *shape, const float *host)
{
    DittoTensor t;
    DITTO_TRY(host_tensor(r, ndim, shape, host, &t));
    return ditto_verify_submit(r, name, &t);
}

static int tap_host(DittoVerifyRun *r, const char *name, int ndim, const int64_t *shape, const float *host)
{
    if (!r->tap)
        return 0;
    DittoTensor t;
    DITTO_TRY(host_tensor(r, ndim, shape, host, &t));
    ditto_tap(r->tap, name, &t);
    return 0;
}

static const cJSON *jget(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* "io:NAME" or "io:NAME[i]" -> name (copied into buf) and row (-1 without [i]). NULL when s is no io reference. */
static const char *io_ref(const char *s, char *buf, size_t n, int64_t *row)
{
    const char *p = s ? strstr(s, "io:") : NULL;
    if (!p)
        return NULL;
    p += 3;
    size_t len = 0;
    while (p[len] && (isalnum((unsigned char)p[len]) || p[len] == '_'))
        len++;
    if (len == 0 || len >= n)
        return NULL;
    memcpy(buf, p, len);
    buf[len] = '\0';
    *row = -1;
    if (p[len] == '[')
        *row = strtoll(p + len + 1, NULL, 10);
    return buf;
}

static const char *const xkey_names[DITTO_XK_COUNT] = { "scale", "pitch", "yaw", "roll", "t", "exp", "kp" };
static const int xkey_dims[DITTO_XK_COUNT] = { 1, DITTO_POSE_BINS, DITTO_POSE_BINS, DITTO_POSE_BINS, 3, DITTO_KP_DIM, DITTO_KP_DIM };

static int xkey_from_name(const char *s)
{
    for (int k = 0; k < DITTO_XK_COUNT; k++)
        if (!strcmp(s, xkey_names[k]))
            return k;
    return -1;
}

/* A JSON list of key names -> DITTO_XK_BIT set. */
static int parse_key_list(DittoVerifyRun *r, const cJSON *a, const char *what, unsigned *bits)
{
    *bits = 0;
    const cJSON *it;
    if (!cJSON_IsArray(a))
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: %s is not a list of keys", r->name, what);
    cJSON_ArrayForEach(it, a)
    {
        int k = cJSON_IsString(it) ? xkey_from_name(it->valuestring) : -1;
        if (k < 0)
            return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: %s names an unknown key", r->name, what);
        *bits |= DITTO_XK_BIT(k);
    }
    return 0;
}

/* Store values row by row into infos (n frames) for one key. */
static void xinfo_set_key(DittoXInfo *x, int k, const float *v)
{
    DittoPose *p = ditto_xinfo_pose(x, (DittoXKey)k);
    if (p) {
        memcpy(p->v, v, sizeof p->v);
        p->deg = false;
        return;
    }
    switch ((DittoXKey)k) {
    case DITTO_XK_SCALE: x->scale = v[0]; break;
    case DITTO_XK_T: memcpy(x->t, v, sizeof x->t); break;
    case DITTO_XK_EXP: memcpy(x->exp, v, sizeof x->exp); break;
    case DITTO_XK_KP: memcpy(x->kp, v, sizeof x->kp); break;
    default: break;
    }
}

static void xinfo_get_key(const DittoXInfo *x, int k, float *v)
{
    const DittoPose *p = ditto_xinfo_pose_c(x, (DittoXKey)k);
    if (p) {
        memcpy(v, p->v, sizeof p->v);
        return;
    }
    switch ((DittoXKey)k) {
    case DITTO_XK_SCALE: v[0] = x->scale; break;
    case DITTO_XK_T: memcpy(v, x->t, sizeof x->t); break;
    case DITTO_XK_EXP: memcpy(v, x->exp, sizeof x->exp); break;
    case DITTO_XK_KP: memcpy(v, x->kp, sizeof x->kp); break;
    default: break;
    }
}

/*
 * Infos from io tensors <prefix><key> (rows, dim) for the keys in `keys`;
 * *n = rows (all keys must agree). *out is allocated (ditto_free).
 */
static int read_xinfos(DittoVerifyRun *r, const char *prefix, unsigned keys, DittoXInfo **out, int64_t *n)
{
    *out = NULL;
    *n = -1;
    DittoXInfo *x = NULL;
    for (int k = 0; k < DITTO_XK_COUNT; k++) {
        if (!(keys & DITTO_XK_BIT(k)))
            continue;
        char name[64];
        snprintf(name, sizeof name, "%s%s", prefix, xkey_names[k]);
        float *v;
        int64_t rows;
        int rc = io_read_rows(r, name, xkey_dims[k], &v, &rows);
        if (rc < 0) {
            ditto_free(x);
            return rc;
        }
        if (!x) {
            *n = rows;
            x = ditto_calloc((size_t)rows, sizeof *x);
            if (!x) {
                ditto_free(v);
                return DITTO_ERR_NOMEM;
            }
        } else if (rows != *n) {
            ditto_free(v);
            ditto_free(x);
            return ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: io '%s' has %lld frames, the other keys %lld", r->name, name, (long long)rows,
                              (long long)*n);
        }
        for (int64_t i = 0; i < rows; i++)
            xinfo_set_key(&x[i], k, v + i * xkey_dims[k]);
        ditto_free(v);
    }
    *out = x;
    return 0;
}

/* ---- functions ---- */

static int bin66_forward(DittoVerifyRun *r, void *model)
{
    (void)model;
    float *pred;
    int64_t n = 0;
    DITTO_TRY(io_read_rows(r, "pred", DITTO_POSE_BINS, &pred, &n));
    float *deg = ditto_malloc((size_t)n * sizeof *deg);
    int rc = deg ? 0 : DITTO_ERR_NOMEM;
    if (rc >= 0) {
        ditto_bin66_to_degree_n(pred, n, deg);   /* (n,66) -> (n) */
        rc = submit_host(r, "degree", 1, (int64_t[]){ n }, deg);
    }
    ditto_free(deg);
    ditto_free(pred);
    return rc;
}

static int rotation_forward(DittoVerifyRun *r, void *model)
{
    (void)model;
    float *ang[3] = { NULL, NULL, NULL };
    const char *names[3] = { "pitch", "yaw", "roll" };
    int64_t n = 0, m;
    int rc = 0;
    for (int i = 0; i < 3 && rc >= 0; i++) {
        rc = io_read_rows(r, names[i], 1, &ang[i], &m);
        if (rc >= 0 && i > 0 && m != n)
            rc = ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: pitch, yaw and roll differ in length", r->name);
        n = m;
    }
    float *rot = rc >= 0 ? ditto_malloc((size_t)n * 9 * sizeof *rot) : NULL;
    if (rc >= 0 && !rot)
        rc = DITTO_ERR_NOMEM;
    if (rc >= 0) {
        for (int64_t b = 0; b < n; b++)
            ditto_rotation_matrix(ang[0][b], ang[1][b], ang[2][b], rot + 9 * b);   /* (n,3,3) = (Rz Ry Rx)^T */
        rc = submit_host(r, "rot", 3, (int64_t[]){ n, 3, 3 }, rot);
    }
    ditto_free(rot);
    for (int i = 0; i < 3; i++)
        ditto_free(ang[i]);
    return rc;
}

static int transform_forward(DittoVerifyRun *r, void *model)
{
    (void)model;
    DittoXInfo *x;
    int64_t n;
    DITTO_TRY(read_xinfos(r, "", DITTO_XK_ALL, &x, &n));
    float *kp = ditto_malloc((size_t)n * DITTO_KP_DIM * sizeof *kp);
    int rc = kp ? 0 : DITTO_ERR_NOMEM;
    if (rc >= 0) {
        ditto_transform_keypoint(x, n, kp);   /* (n,21,3) */
        rc = submit_host(r, "kp_transformed", 3, (int64_t[]){ n, DITTO_NUM_KP, 3 }, kp);
    }
    ditto_free(kp);
    ditto_free(x);
    return rc;
}

/* ---- condition_handler ---- */

static int parse_emo(DittoVerifyRun *r, const cJSON *emo, DittoEmo *e, int **labels, int64_t **offsets, float **array)
{
    ditto_emo_default(e);
    *labels = NULL;
    *offsets = NULL;
    *array = NULL;
    if (cJSON_IsNumber(emo)) {
        e->kind = DITTO_EMO_LABEL;
        e->label = emo->valueint;
        return 0;
    }
    if (cJSON_IsString(emo)) {
        char name[64];
        int64_t row, m;
        if (!io_ref(emo->valuestring, name, sizeof name, &row))
            return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: setup.emo '%s' is no io reference", r->name, emo->valuestring);
        DITTO_TRY(io_read_rows(r, name, DITTO_EMO_DIM, array, &m));
        e->kind = DITTO_EMO_ARRAY;
        e->array = *array;
        e->m = m;
        return 0;
    }
    if (!cJSON_IsArray(emo) || cJSON_GetArraySize(emo) < 1)
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: setup.emo is neither a label, a list nor an io array", r->name);
    /* labels flattened; offsets per inner list */
    int n = cJSON_GetArraySize(emo), total = 0;
    bool nested = cJSON_IsArray(cJSON_GetArrayItem(emo, 0));
    const cJSON *it, *jt;
    cJSON_ArrayForEach(it, emo) {
        total += nested ? cJSON_GetArraySize(it) : 1;
    }
    *labels = ditto_malloc((size_t)(total > 0 ? total : 1) * sizeof **labels);
    *offsets = ditto_malloc((size_t)(n + 1) * sizeof **offsets);
    if (!*labels || !*offsets)
        return DITTO_ERR_NOMEM;
    int at = 0, j = 0;
    cJSON_ArrayForEach(it, emo)
    {
        (*offsets)[j++] = at;
        if (nested) {
            cJSON_ArrayForEach(jt, it) {
                (*labels)[at++] = jt->valueint;
            }
        } else {
            (*labels)[at++] = it->valueint;
        }
    }
    (*offsets)[j] = at;
    e->kind = nested ? DITTO_EMO_PER_FRAME : DITTO_EMO_LABELS;
    e->labels = *labels;
    e->n_labels = at;
    e->offsets = *offsets;
    e->m = n;
    return 0;
}

static int cond_forward(DittoVerifyRun *r, void *model)
{
    (void)model;
    const cJSON *setup = jget(r->json, "setup"), *calls = jget(r->json, "calls");
    if (!cJSON_IsObject(setup) || !cJSON_IsArray(calls))
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: the case needs \"setup\" and \"calls\"", r->name);
    float *aud = NULL, *eye_open = NULL, *eye_ball = NULL, *sc = NULL, *emo_array = NULL, *cond = NULL;
    int *labels = NULL;
    int64_t *offsets = NULL;
    int64_t frames = 0, n_src = 0, nb = 0, nsc = 0;
    DittoConditions c = { 0 };
    DittoConditionsParams p;
    memset(&p, 0, sizeof p);
    int rc = io_read_rows(r, "aud_feat", DITTO_AUD_DIM, &aud, &frames);
    if (rc >= 0)
        rc = io_read_rows(r, "eye_open", DITTO_EYE_OPEN_DIM, &eye_open, &n_src);
    if (rc >= 0)
        rc = io_read_rows(r, "eye_ball", DITTO_EYE_BALL_DIM, &eye_ball, &nb);
    if (rc >= 0)
        rc = io_read_rows(r, "sc", DITTO_KP_DIM, &sc, &nsc);
    if (rc >= 0 && (nb != n_src || nsc != 1))
        rc = ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: eye_open/eye_ball frame counts differ or sc is not (63,)", r->name);
    if (rc >= 0)
        rc = parse_emo(r, jget(setup, "emo"), &p.emo, &labels, &offsets, &emo_array);
    if (rc >= 0) {
        p.eye_open = eye_open;
        p.eye_ball = eye_ball;
        p.n_src = n_src;
        p.sc = sc;
        p.eye_f0_mode = cJSON_IsTrue(jget(setup, "eye_f0_mode"));
        rc = ditto_conditions_init(&c, &p, &r->log);
    }
    if (rc >= 0 && !(cond = ditto_malloc((size_t)frames * DITTO_COND_DIM * sizeof *cond)))
        rc = DITTO_ERR_NOMEM;
    const cJSON *call;
    cJSON_ArrayForEach(call, calls)
    {
        if (rc < 0)
            break;
        const cJSON *idx = jget(call, "idx"), *out = jget(call, "output");
        if (!cJSON_IsNumber(idx) || !cJSON_IsString(out)) {
            rc = ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: a call lacks idx or output", r->name);
            break;
        }
        rc = ditto_conditions_build(&c, aud, frames, (int64_t)idx->valuedouble, cond);   /* (frames,1103) */
        if (rc >= 0)
            rc = submit_host(r, out->valuestring, 2, (int64_t[]){ frames, DITTO_COND_DIM }, cond);
    }
    ditto_conditions_free(&c);
    ditto_free(cond);
    ditto_free(aud);
    ditto_free(eye_open);
    ditto_free(eye_ball);
    ditto_free(sc);
    ditto_free(emo_array);
    ditto_free(labels);
    ditto_free(offsets);
    return rc;
}

/* ---- smooth_x_s_info ---- */

static int smooth_forward(DittoVerifyRun *r, void *model)
{
    (void)model;
    int64_t k = 13, n;
    const cJSON *smo_k = jget(jget(r->json, "setup"), "smo_k");
    if (cJSON_IsNumber(smo_k))
        k = (int64_t)smo_k->valuedouble;
    const cJSON *ignore = jget(jget(r->json, "setup"), "ignore_keys");
    if (cJSON_IsArray(ignore) && cJSON_GetArraySize(ignore) > 0)
        return ditto_fail(&r->log, DITTO_ERR_UNSUPPORTED, "%s: ignore_keys is not supported", r->name);
    if (k < 1 || k > 1 << 20)
        return ditto_fail(&r->log, DITTO_ERR_RANGE, "%s: smo_k %lld out of range", r->name, (long long)k);
    DittoXInfo *in, *out = NULL;
    DITTO_TRY(read_xinfos(r, "x_s_", DITTO_XK_ALL, &in, &n));
    float *buf = NULL;
    int rc = 0;
    if (!(out = ditto_malloc((size_t)n * sizeof *out)) || !(buf = ditto_malloc((size_t)n * DITTO_POSE_BINS * sizeof *buf)))
        rc = DITTO_ERR_NOMEM;
    if (rc >= 0)
        rc = ditto_xinfo_smooth(in, n, (int)k, out);
    for (int key = 0; key < DITTO_XK_COUNT && rc >= 0; key++) {
        char name[32];
        snprintf(name, sizeof name, "smo_%s", xkey_names[key]);
        for (int64_t i = 0; i < n; i++)
            xinfo_get_key(&out[i], key, buf + i * xkey_dims[key]);
        rc = submit_host(r, name, 2, (int64_t[]){ n, xkey_dims[key] }, buf);   /* (n, dim) */
    }
    ditto_free(buf);
    ditto_free(out);
    ditto_free(in);
    return rc;
}

/* ---- motion_stitch ---- */

typedef struct MsModel {
    DittoStitch *net;
} MsModel;

static int ms_load(DittoVerifyRun *r, void **model)
{
    if (!r->weights)
        return ditto_fail(&r->log, DITTO_ERR_INVAL, "%s: the manifest gives no weights_file", r->name);
    MsModel *m = ditto_calloc(1, sizeof *m);
    if (!m)
        return DITTO_ERR_NOMEM;
    int rc = ditto_stitch_load(&m->net, r->be, r->weights);
    if (rc < 0) {
        ditto_free(m);
        return rc;
    }
    *model = m;
    return 0;
}

static void ms_release(void *model)
{
    MsModel *m = model;
    if (!m)
        return;
    ditto_stitch_free(&m->net);
    ditto_free(m);
}

/* The draws listed in the manifest's random_draws.values, in order. */
typedef struct Draws {
    const cJSON *values;
    int64_t used;
    bool short_list;
} Draws;

static int listed_draw(void *ctx, int64_t k)
{
    Draws *d = ctx;
    const cJSON *v = cJSON_GetArrayItem(d->values, (int)k);
    if (k + 1 > d->used)
        d->used = k + 1;
    if (!cJSON_IsNumber(v)) {
        d->short_list = true;
        return DITTO_BLINK_OPEN_MIN;
    }
    return v->valueint;
}

/* A 63-value row from "io:NAME[i]" (or the whole of "io:NAME"). */
static int io_row63(DittoVerifyRun *r, const char *ref, float out[DITTO_KP_DIM])
{
    char name[64];
    int64_t row, rows;
    float *v;
    if (!io_ref(ref, name, sizeof name, &row))
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: '%s' is no io reference", r->name, ref);
    DITTO_TRY(io_read_rows(r, name, DITTO_KP_DIM, &v, &rows));
    if (row < 0 && rows != 1)
        row = -2;
    if (row < -1 || row >= rows) {
        ditto_free(v);
        return ditto_fail(&r->log, DITTO_ERR_RANGE, "%s: '%s' does not name one row of %lld", r->name, ref, (long long)rows);
    }
    memcpy(out, v + (row < 0 ? 0 : row) * DITTO_KP_DIM, DITTO_KP_DIM * sizeof *out);
    ditto_free(v);
    return 0;
}

/* ctrl_info entry / overall_ctrl_info -> DittoCtrl. */
static int parse_ctrl(DittoVerifyRun *r, const cJSON *o, DittoCtrl *c)
{
    static const char *const angles[3] = { "pitch", "yaw", "roll" };
    memset(c, 0, sizeof *c);
    const cJSON *it;
    cJSON_ArrayForEach(it, o)
    {
        const char *k = it->string;
        bool done = false;
        for (int a = 0; a < 3 && !done; a++) {
            char dn[16], an[16];
            snprintf(dn, sizeof dn, "delta_%s", angles[a]);
            snprintf(an, sizeof an, "alpha_%s", angles[a]);
            if (!strcmp(k, dn) && cJSON_IsNumber(it)) {
                c->delta[a] = it->valuedouble;
                c->has |= DITTO_CTRL_DELTA_PITCH << a;
                done = true;
            } else if (!strcmp(k, an) && cJSON_IsNumber(it)) {
                c->alpha[a] = it->valuedouble;
                c->has |= DITTO_CTRL_ALPHA_PITCH << a;
                done = true;
            }
        }
        if (done)
            continue;
        if (!strcmp(k, "delta_exp") && cJSON_IsString(it)) {
            DITTO_TRY(io_row63(r, it->valuestring, c->delta_exp));
            c->has |= DITTO_CTRL_DELTA_EXP;
        } else if (!strcmp(k, "fade_alpha") && cJSON_IsNumber(it)) {
            c->fade_alpha = it->valuedouble;
            c->has |= DITTO_CTRL_FADE_ALPHA;
        } else if (!strcmp(k, "vad_alpha") && cJSON_IsNumber(it)) {
            c->vad_alpha = it->valuedouble;
            c->has |= DITTO_CTRL_VAD_ALPHA;
        } else if (!strcmp(k, "fade_out_keys")) {
            DITTO_TRY(parse_key_list(r, it, "fade_out_keys", &c->fade_out_keys));
            c->has |= DITTO_CTRL_FADE_OUT_KEYS;
        } else {
            return ditto_fail(&r->log, DITTO_ERR_UNSUPPORTED, "%s: unsupported control '%s'", r->name, k);
        }
    }
    return 0;
}

typedef struct MsSetup {
    DittoMotionStitchParams p;
    float *delta_eye;
    int *open;
    DittoCtrl overall;
    DittoXInfo d0;
    Draws draws;
} MsSetup;

static int parse_ms_setup(DittoVerifyRun *r, const cJSON *s, MsSetup *ms)
{
    const cJSON *v;
    bool is_image = cJSON_IsTrue(jget(s, "is_image_flag"));
    ditto_motion_stitch_params_default(&ms->p, is_image);
    DittoMotionStitchParams *p = &ms->p;
    if (cJSON_IsNumber(v = jget(s, "N_d")))
        p->n_d = (int64_t)v->valuedouble;
    if (cJSON_IsArray(v = jget(s, "use_d_keys"))) {
        DITTO_TRY(parse_key_list(r, v, "use_d_keys", &p->use_d_keys));
    } else if (cJSON_IsObject(v)) {
        const cJSON *it;
        p->use_d_dict = true;
        cJSON_ArrayForEach(it, v)
        {
            int k = xkey_from_name(it->string);
            if (k < 0 || !cJSON_IsNumber(it))
                return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: bad use_d_keys entry '%s'", r->name, it->string);
            p->use_d_keys |= DITTO_XK_BIT(k);
            p->use_d_factor[k] = (float)it->valuedouble;
        }
    }
    if (cJSON_IsBool(v = jget(s, "relative_d")))
        p->relative_d = cJSON_IsTrue(v);
    if (cJSON_IsBool(v = jget(s, "drive_eye")))
        p->drive_eye = cJSON_IsTrue(v);
    if (cJSON_IsBool(v = jget(s, "flag_stitching")))
        p->flag_stitching = cJSON_IsTrue(v);
    if (cJSON_IsString(v = jget(s, "fade_type"))) {
        if (!strcmp(v->valuestring, "d0"))
            p->fade_type = DITTO_FADE_D0;
        else if (!strcmp(v->valuestring, "s"))
            p->fade_type = DITTO_FADE_S;
        else if (v->valuestring[0])
            return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: unknown fade_type '%s'", r->name, v->valuestring);
    }
    if ((v = jget(s, "fade_out_keys")) && !cJSON_IsNull(v))
        DITTO_TRY(parse_key_list(r, v, "fade_out_keys", &p->fade_out_keys));
    if (cJSON_IsString(v = jget(s, "delta_eye_arr"))) {
        char name[64];
        int64_t row, rows;
        if (!io_ref(v->valuestring, name, sizeof name, &row))
            return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: delta_eye_arr '%s' is no io reference", r->name, v->valuestring);
        DITTO_TRY(io_read_rows(r, name, DITTO_KP_DIM, &ms->delta_eye, &rows));
        p->delta_eye_arr = ms->delta_eye;
        p->n_delta_eye = (int)rows;
    }
    v = jget(s, "delta_eye_open_n");
    if (cJSON_IsNumber(v) || cJSON_IsArray(v)) {
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
        if (n < 1 || !(ms->open = ditto_malloc((size_t)n * sizeof *ms->open)))
            return n < 1 ? DITTO_ERR_FORMAT : DITTO_ERR_NOMEM;
        if (cJSON_IsArray(v))
            for (int i = 0; i < n; i++)
                ms->open[i] = cJSON_GetArrayItem(v, i)->valueint;
        else
            ms->open[0] = v->valueint;
        p->delta_eye_open_n = ms->open;
        p->n_delta_eye_open_n = n;
    }
    if (cJSON_IsString(v = jget(s, "ch_info"))) {
        char name[64];
        int64_t row, rows;
        float *scale;
        if (!io_ref(v->valuestring, name, sizeof name, &row))
            return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: ch_info names no io scale", r->name);
        DITTO_TRY(io_read_rows(r, name, 1, &scale, &rows));
        p->has_ch_scale = true;
        p->ch_scale = scale[0];
        ditto_free(scale);
    }
    if (cJSON_IsObject(v = jget(s, "overall_ctrl_info")) && cJSON_GetArraySize(v) > 0) {
        DITTO_TRY(parse_ctrl(r, v, &ms->overall));
        p->overall = &ms->overall;
    }
    if (cJSON_IsString(v = jget(s, "d0"))) {
        DittoXInfo *d0;
        int64_t n;
        unsigned keys = DITTO_XK_ALL & ~DITTO_XK_BIT(DITTO_XK_KP);
        DITTO_TRY(read_xinfos(r, "d0_", keys, &d0, &n));
        ms->d0 = d0[0];
        ditto_free(d0);
        p->d0 = &ms->d0;
    }
    const cJSON *draws = jget(jget(r->json, "random_draws"), "values");
    if (cJSON_IsArray(draws)) {
        ms->draws.values = draws;
        p->blink_draw = listed_draw;
        p->blink_draw_ctx = &ms->draws;
    }
    return 0;
}

/* The manifest's effective_use_d_keys against what the stitch derived from the defaults. */
static int check_effective_keys(DittoVerifyRun *r, const DittoMotionStitch *ms)
{
    const cJSON *eff = jget(r->json, "effective_use_d_keys");
    unsigned want = 0;
    if (cJSON_IsArray(eff)) {
        DITTO_TRY(parse_key_list(r, eff, "effective_use_d_keys", &want));
    } else if (cJSON_IsObject(eff)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, eff) {
            int k = xkey_from_name(it->string);
            if (k < 0)
                return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: effective_use_d_keys names an unknown key", r->name);
            want |= DITTO_XK_BIT(k);
        }
    } else {
        return 0;
    }
    if (want != ditto_motion_stitch_use_d_keys(ms))
        return ditto_fail(&r->log, DITTO_ERR_MISMATCH, "%s: use_d_keys 0x%x, the manifest's effective_use_d_keys 0x%x", r->name,
                          ditto_motion_stitch_use_d_keys(ms), want);
    return 0;
}

/* Tap of ditto_motion_stitch_run: gathers each batch's x_d_pre_stitch into the whole sequence. */
typedef struct PreTap {
    DittoBackend *be;
    float *all;       /* (N,21,3) host */
    int64_t g0;
    int rc;
} PreTap;

static void pre_tap_fn(void *ctx, const char *name, const DittoTensor *t)
{
    PreTap *pt = ctx;
    if (strcmp(name, "x_d_pre_stitch") || pt->rc < 0)
        return;
    int rc = pt->be->sync ? pt->be->sync(pt->be) : 0;
    if (rc >= 0)
        rc = pt->be->download(pt->be, pt->all + pt->g0 * DITTO_KP_DIM, t->data, ditto_tensor_nbytes(t));
    pt->rc = rc;
}

static int ms_forward(DittoVerifyRun *r, void *model)
{
    MsModel *m = model;
    const cJSON *setup = jget(r->json, "setup");
    if (!cJSON_IsObject(setup))
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: the case has no \"setup\"", r->name);
    MsSetup su;
    memset(&su, 0, sizeof su);
    DittoXInfo *xs = NULL, *xd = NULL;
    const DittoXInfo **xs_ptr = NULL;
    DittoCtrl *ctrls = NULL;
    const DittoCtrl **ctrl_ptr = NULL;
    float *pre = NULL, *idx = NULL, *blink = NULL;
    DittoMotionStitch *ms = NULL;
    int64_t n_src = 0, N = 0;
    unsigned dkeys = DITTO_XK_ALL & ~DITTO_XK_BIT(DITTO_XK_KP);

    int rc = parse_ms_setup(r, setup, &su);
    if (rc >= 0)
        rc = read_xinfos(r, "x_s_", DITTO_XK_ALL, &xs, &n_src);
    if (rc >= 0)
        rc = read_xinfos(r, "x_d_", dkeys, &xd, &N);
    if (rc >= 0 && (!(xs_ptr = ditto_calloc((size_t)N, sizeof *xs_ptr)) || !(ctrls = ditto_calloc((size_t)N, sizeof *ctrls)) ||
                    !(ctrl_ptr = ditto_calloc((size_t)N, sizeof *ctrl_ptr)) || !(pre = ditto_calloc((size_t)N * DITTO_KP_DIM, sizeof *pre)) ||
                    !(idx = ditto_calloc((size_t)N, sizeof *idx)) || !(blink = ditto_calloc((size_t)N, sizeof *blink))))
        rc = DITTO_ERR_NOMEM;
    /* per-frame controls, keyed by the generated frame index */
    const cJSON *ci = jget(r->json, "ctrl_info"), *it;
    if (rc >= 0 && cJSON_IsObject(ci))
        cJSON_ArrayForEach(it, ci)
        {
            char *end;
            long g = strtol(it->string, &end, 10);
            if (*end || g < 0 || g >= N) {
                rc = ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: ctrl_info key '%s' is not a frame index", r->name, it->string);
                break;
            }
            if ((rc = parse_ctrl(r, it, &ctrls[g])) < 0)
                break;
            ctrl_ptr[g] = &ctrls[g];
        }
    if (rc >= 0)
        rc = ditto_motion_stitch_open(&ms, &su.p, &xs[0], m->net, &r->log);
    if (rc >= 0 && su.draws.short_list)
        rc = ditto_fail(&r->log, DITTO_ERR_RANGE, "%s: the blink schedule needs more random draws than the manifest lists", r->name);
    if (rc >= 0 && su.draws.values && su.draws.used != cJSON_GetArraySize(su.draws.values))
        rc = ditto_fail(&r->log, DITTO_ERR_MISMATCH, "%s: the blink schedule used %lld random draws, the manifest lists %d", r->name,
                        (long long)su.draws.used, cJSON_GetArraySize(su.draws.values));
    if (rc >= 0)
        rc = check_effective_keys(r, ms);

    /* outputs (N,21,3) on the backend, filled batch by batch */
    DittoTensor x_s = { 0 }, x_d = { 0 };
    int64_t kshape[3] = { N, DITTO_NUM_KP, 3 };
    if (rc >= 0)
        rc = ditto_verify_output(r, 3, kshape, &x_s);
    if (rc >= 0)
        rc = ditto_verify_output(r, 3, kshape, &x_d);
    for (int64_t g = 0; g < N && rc >= 0; g++) {
        int64_t f = ditto_mirror_index(g, n_src);
        xs_ptr[g] = &xs[f];
        idx[g] = (float)f;
    }
    PreTap pt = { r->be, pre, 0, 0 };
    DittoTap tap = { pre_tap_fn, &pt };
    for (int64_t g0 = 0; g0 < N && rc >= 0; g0 += MS_BATCH) {
        int64_t B = N - g0 < MS_BATCH ? N - g0 : MS_BATCH;
        DittoTensor bs, bd;
        rc = ditto_tensor_slice(&x_s, 0, g0, g0 + B, 1, &bs);
        if (rc >= 0)
            rc = ditto_tensor_slice(&x_d, 0, g0, g0 + B, 1, &bd);
        pt.g0 = g0;
        if (rc >= 0)
            rc = ditto_motion_stitch_run(ms, r->be, r->ws, g0, B, xs_ptr + g0, xd + g0, ctrl_ptr + g0, &bs, &bd, &tap);
        if (rc >= 0)
            rc = pt.rc;
    }
    if (rc >= 0)
        rc = ditto_verify_submit(r, "x_s", &x_s);
    if (rc >= 0)
        rc = ditto_verify_submit(r, "x_d", &x_d);
    if (rc >= 0)
        rc = tap_host(r, "x_d_pre_stitch", 3, kshape, pre);
    if (rc >= 0)
        rc = tap_host(r, "frame_idx", 1, (int64_t[]){ N }, idx);
    if (rc >= 0 && su.p.delta_eye_arr) {
        for (int64_t g = 0; g < N; g++)
            blink[g] = (float)ditto_motion_stitch_blink_row(ms, g);
        rc = tap_host(r, "blink_idx", 1, (int64_t[]){ N }, blink);
    }
    ditto_motion_stitch_close(&ms);
    ditto_free(su.delta_eye);
    ditto_free(su.open);
    ditto_free(xs);
    ditto_free(xd);
    ditto_free(xs_ptr);
    ditto_free(ctrls);
    ditto_free(ctrl_ptr);
    ditto_free(pre);
    ditto_free(idx);
    ditto_free(blink);
    return rc;
}

/*
 * kind, target (last component of the manifest's function / stage), load,
 * forward, release.
 */
const DittoVerifyRunner ditto_verify_runners_motion[] = {
    { "function", "bin66_to_degree", NULL, bin66_forward, NULL },
    { "function", "get_rotation_matrix", NULL, rotation_forward, NULL },
    { "function", "transform_keypoint", NULL, transform_forward, NULL },
    { "pipeline", "condition_handler", NULL, cond_forward, NULL },
    { "pipeline", "smooth_x_s_info", NULL, smooth_forward, NULL },
    { "pipeline", "motion_stitch", ms_load, ms_forward, ms_release },
    { NULL, NULL, NULL, NULL, NULL },
};
