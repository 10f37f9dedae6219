/* Condition handler (ditto-architecture.md 3.3): per-frame 1103-d LMDM conditions. */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "pipeline/conditions.h"
#include "pipeline/motion.h"

void ditto_emo_default(DittoEmo *e)
{
    memset(e, 0, sizeof *e);
    e->kind = DITTO_EMO_LABEL;
    e->label = DITTO_EMO_NEUTRAL;
}

int ditto_emo_from_labels(const int *labels, int64_t n, float out[DITTO_EMO_DIM])
{
    double v[DITTO_EMO_DIM] = { 0 };
    for (int64_t i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] >= DITTO_EMO_DIM)
            return DITTO_ERR_RANGE;
        v[labels[i]] = DITTO_EMO_LOGIT;
    }
    /* softmax(v) = exp(v - max) / sum; the float64 result rounds to what SciPy's float32 one gives */
    double mx = v[0], sum = 0;
    for (int i = 1; i < DITTO_EMO_DIM; i++)
        mx = v[i] > mx ? v[i] : mx;
    double e[DITTO_EMO_DIM];
    for (int i = 0; i < DITTO_EMO_DIM; i++) {
        e[i] = exp(v[i] - mx);
        sum += e[i];
    }
    for (int i = 0; i < DITTO_EMO_DIM; i++)
        out[i] = (float)(e[i] / sum);
    return 0;
}

/* The (m,8) emotion rows of an emo option. */
static int emo_rows(const DittoEmo *e, float **rows, int64_t *m, const DittoLogger *log)
{
    int64_t n = 1;
    if (e->kind == DITTO_EMO_PER_FRAME || e->kind == DITTO_EMO_ARRAY) {
        n = e->m;
        if (n < 1)
            return ditto_fail(log, DITTO_ERR_INVAL, "conditions: emotion option with %lld rows", (long long)n);
    } else if (e->kind != DITTO_EMO_LABEL && e->kind != DITTO_EMO_LABELS) {
        return ditto_fail(log, DITTO_ERR_INVAL, "conditions: unknown emotion option kind %d", (int)e->kind);
    }
    float *r = ditto_malloc((size_t)n * DITTO_EMO_DIM * sizeof *r);
    if (!r)
        return DITTO_ERR_NOMEM;
    int rc = 0;
    switch (e->kind) {
    case DITTO_EMO_LABEL:
        rc = ditto_emo_from_labels(&e->label, 1, r);
        break;
    case DITTO_EMO_LABELS:
        rc = e->n_labels < 1 || !e->labels ? DITTO_ERR_INVAL : ditto_emo_from_labels(e->labels, e->n_labels, r);
        break;
    case DITTO_EMO_PER_FRAME:
        if (!e->labels || !e->offsets) {
            rc = DITTO_ERR_INVAL;
            break;
        }
        for (int64_t j = 0; j < n && rc >= 0; j++) {
            int64_t a = e->offsets[j], b = e->offsets[j + 1];
            if (a < 0 || b < a || b > e->n_labels)
                rc = DITTO_ERR_INVAL;
            else
                rc = ditto_emo_from_labels(e->labels + a, b - a, r + j * DITTO_EMO_DIM);
        }
        break;
    case DITTO_EMO_ARRAY:
        if (!e->array)
            rc = DITTO_ERR_INVAL;
        else
            memcpy(r, e->array, (size_t)n * DITTO_EMO_DIM * sizeof *r);
        break;
    }
    if (rc < 0) {
        ditto_free(r);
        return ditto_fail(log, rc, "conditions: %s", rc == DITTO_ERR_RANGE ? "emotion label outside 0..7" : "malformed emotion option");
    }
    *rows = r;
    *m = n;
    return 0;
}

static float *copy_floats(const float *src, int64_t n)
{
    float *d = ditto_malloc((size_t)n * sizeof *d);
    if (d)
        memcpy(d, src, (size_t)n * sizeof *d);
    return d;
}

int ditto_conditions_init(DittoConditions *c, const DittoConditionsParams *p, const DittoLogger *log)
{
    if (!c || !p)
        return DITTO_ERR_INVAL;
    memset(c, 0, sizeof *c);
    if (!p->eye_open || !p->eye_ball || !p->sc || p->n_src < 1)
        return ditto_fail(log, DITTO_ERR_INVAL, "conditions: source eye data, sc and a frame count >= 1 are required");
    DITTO_TRY(emo_rows(&p->emo, &c->emo, &c->n_emo, log));
    c->n_src = p->n_src;
    c->eye_f0_mode = p->eye_f0_mode;
    c->eye_open = copy_floats(p->eye_open, p->n_src * DITTO_EYE_OPEN_DIM);
    c->eye_ball = copy_floats(p->eye_ball, p->n_src * DITTO_EYE_BALL_DIM);
    if (!c->eye_open || !c->eye_ball) {
        ditto_conditions_free(c);
        return DITTO_ERR_NOMEM;
    }
    memcpy(c->sc, p->sc, sizeof c->sc);
    return 0;
}

void ditto_conditions_free(DittoConditions *c)
{
    if (!c)
        return;
    ditto_free(c->emo);
    ditto_free(c->eye_open);
    ditto_free(c->eye_ball);
    memset(c, 0, sizeof *c);
}

int ditto_conditions_build(const DittoConditions *c, const float *aud, int64_t n, int64_t idx, float *cond)
{
    if (!c || !c->emo || n < 0 || (n > 0 && (!aud || !cond)))
        return DITTO_ERR_INVAL;
    for (int64_t j = 0; j < n; j++) {
        int64_t i = idx + j < 0 ? 0 : idx + j;
        int64_t eye = c->eye_f0_mode ? 0 : ditto_mirror_index(i, c->n_src);
        float *row = cond + j * DITTO_COND_DIM;
        memcpy(row + DITTO_COND_OFF_AUD, aud + j * DITTO_AUD_DIM, DITTO_AUD_DIM * sizeof *row);
        memcpy(row + DITTO_COND_OFF_EMO, c->emo + (i % c->n_emo) * DITTO_EMO_DIM, DITTO_EMO_DIM * sizeof *row);
        memcpy(row + DITTO_COND_OFF_EYE_OPEN, c->eye_open + eye * DITTO_EYE_OPEN_DIM, DITTO_EYE_OPEN_DIM * sizeof *row);
        memcpy(row + DITTO_COND_OFF_EYE_BALL, c->eye_ball + eye * DITTO_EYE_BALL_DIM, DITTO_EYE_BALL_DIM * sizeof *row);
        memcpy(row + DITTO_COND_OFF_SC, c->sc, sizeof c->sc);
    }
    return 0;
}
