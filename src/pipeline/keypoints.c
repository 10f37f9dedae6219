/*
 * Motion layout, pose decoding, rotation, transform_keypoint and source
 * smoothing (ditto-architecture.md 3.6, 3.8, 4.2 step 10). Host float32
 * values; sums and products are formed in double and rounded once.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/log.h"
#include "pipeline/motion.h"

#define DEG2RAD (3.14159265358979323846 / 180.0)

DittoPose *ditto_xinfo_pose(DittoXInfo *x, DittoXKey key)
{
    switch (key) {
    case DITTO_XK_PITCH: return &x->pitch;
    case DITTO_XK_YAW: return &x->yaw;
    case DITTO_XK_ROLL: return &x->roll;
    default: return NULL;
    }
}

const DittoPose *ditto_xinfo_pose_c(const DittoXInfo *x, DittoXKey key)
{
    return ditto_xinfo_pose((DittoXInfo *)x, key);
}

/* ---- 265-d layout ---- */

static void pose_from(DittoPose *p, const float *v)
{
    memcpy(p->v, v, sizeof p->v);
    p->deg = false;
}

void ditto_motion_to_xinfo(const float *motion, int64_t n, const float *v_min_max, DittoXInfo *out)
{
    float row[DITTO_MOTION_DIM];
    for (int64_t f = 0; f < n; f++) {
        const float *m = motion + f * DITTO_MOTION_DIM;
        if (v_min_max) {
            /* np.clip(x, min, max): max(x, min) first, then min(., max) */
            for (int i = 0; i < DITTO_MOTION_DIM; i++) {
                float v = m[i], lo = v_min_max[i], hi = v_min_max[DITTO_MOTION_DIM + i];
                v = v < lo ? lo : v;
                row[i] = v > hi ? hi : v;
            }
            m = row;
        }
        DittoXInfo *x = &out[f];
        memset(x, 0, sizeof *x);
        x->scale = m[DITTO_MOTION_OFF_SCALE] + 1.0f;
        pose_from(&x->pitch, m + DITTO_MOTION_OFF_PITCH);
        pose_from(&x->yaw, m + DITTO_MOTION_OFF_YAW);
        pose_from(&x->roll, m + DITTO_MOTION_OFF_ROLL);
        memcpy(x->t, m + DITTO_MOTION_OFF_T, sizeof x->t);
        memcpy(x->exp, m + DITTO_MOTION_OFF_EXP, sizeof x->exp);
    }
}

int ditto_xinfo_to_motion(const DittoXInfo *x, int64_t n, float *motion)
{
    for (int64_t f = 0; f < n; f++) {
        const DittoXInfo *s = &x[f];
        float *m = motion + f * DITTO_MOTION_DIM;
        if (s->pitch.deg || s->yaw.deg || s->roll.deg)
            return DITTO_ERR_INVAL;
        m[DITTO_MOTION_OFF_SCALE] = s->scale - 1.0f;
        memcpy(m + DITTO_MOTION_OFF_PITCH, s->pitch.v, sizeof s->pitch.v);
        memcpy(m + DITTO_MOTION_OFF_YAW, s->yaw.v, sizeof s->yaw.v);
        memcpy(m + DITTO_MOTION_OFF_ROLL, s->roll.v, sizeof s->roll.v);
        memcpy(m + DITTO_MOTION_OFF_T, s->t, sizeof s->t);
        memcpy(m + DITTO_MOTION_OFF_EXP, s->exp, sizeof s->exp);
    }
    return 0;
}

/* ---- pose decoding ---- */

float ditto_bin66_to_degree(const float logits[DITTO_POSE_BINS])
{
    /* softmax with the max subtracted (SciPy), then the expected bin index */
    double mx = logits[0];
    for (int i = 1; i < DITTO_POSE_BINS; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0, wsum = 0;
    for (int i = 0; i < DITTO_POSE_BINS; i++) {
        double e = exp((double)logits[i] - mx);
        sum += e;
        wsum += e * i;
    }
    return (float)(wsum / sum * 3.0 - 97.5);
}

void ditto_bin66_to_degree_n(const float *pred, int64_t n, float *deg)
{
    for (int64_t i = 0; i < n; i++)
        deg[i] = ditto_bin66_to_degree(pred + i * DITTO_POSE_BINS);
}

float ditto_pose_degree(const DittoPose *p)
{
    return p->deg ? p->v[0] : ditto_bin66_to_degree(p->v);
}

/* R^T of R = Rz(roll) Ry(yaw) Rx(pitch), row-major, angles in degrees. */
static void rotation_t(double pitch, double yaw, double roll, double rt[9])
{
    double x = pitch * DEG2RAD, y = yaw * DEG2RAD, z = roll * DEG2RAD;
    double cx = cos(x), sx = sin(x), cy = cos(y), sy = sin(y), cz = cos(z), sz = sin(z);
    const double rx[9] = { 1, 0, 0, 0, cx, -sx, 0, sx, cx };
    const double ry[9] = { cy, 0, sy, 0, 1, 0, -sy, 0, cy };
    const double rz[9] = { cz, -sz, 0, sz, cz, 0, 0, 0, 1 };
    double ryx[9], r[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            ryx[i * 3 + j] = ry[i * 3 + 0] * rx[0 * 3 + j] + ry[i * 3 + 1] * rx[1 * 3 + j] + ry[i * 3 + 2] * rx[2 * 3 + j];
        }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            r[i * 3 + j] = rz[i * 3 + 0] * ryx[0 * 3 + j] + rz[i * 3 + 1] * ryx[1 * 3 + j] + rz[i * 3 + 2] * ryx[2 * 3 + j];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            rt[i * 3 + j] = r[j * 3 + i];
}

void ditto_rotation_matrix(float pitch, float yaw, float roll, float rot[9])
{
    double rt[9];
    rotation_t(pitch, yaw, roll, rt);
    for (int i = 0; i < 9; i++)
        rot[i] = (float)rt[i];
}

void ditto_transform_keypoint(const DittoXInfo *x, int64_t n, float *out)
{
    for (int64_t b = 0; b < n; b++) {
        const DittoXInfo *s = &x[b];
        double rt[9];
        rotation_t(ditto_pose_degree(&s->pitch), ditto_pose_degree(&s->yaw), ditto_pose_degree(&s->roll), rt);
        float *o = out + b * DITTO_KP_DIM;
        for (int k = 0; k < DITTO_NUM_KP; k++) {
            const float *kp = s->kp + 3 * k, *e = s->exp + 3 * k;
            for (int c = 0; c < 3; c++) {
                /* (kp @ rot + exp) * scale + [tx, ty, 0] */
                double v = kp[0] * rt[0 * 3 + c] + kp[1] * rt[1 * 3 + c] + kp[2] * rt[2 * 3 + c];
                v = (v + e[c]) * s->scale;
                if (c < 2)
                    v += s->t[c];
                o[3 * k + c] = (float)v;
            }
        }
    }
}

/* ---- source smoothing ---- */

/* The float runs of an info that smoothing averages: every key. */
static const struct {
    size_t off;
    int len;
} xinfo_runs[] = {
    { offsetof(DittoXInfo, scale), 1 },
    { offsetof(DittoXInfo, pitch.v), DITTO_POSE_BINS },
    { offsetof(DittoXInfo, yaw.v), DITTO_POSE_BINS },
    { offsetof(DittoXInfo, roll.v), DITTO_POSE_BINS },
    { offsetof(DittoXInfo, t), 3 },
    { offsetof(DittoXInfo, exp), DITTO_KP_DIM },
    { offsetof(DittoXInfo, kp), DITTO_KP_DIM },
};

static const float *run_c(const DittoXInfo *x, int r)
{
    return (const float *)(const void *)((const char *)x + xinfo_runs[r].off);
}

int ditto_xinfo_smooth(const DittoXInfo *in, int64_t n, int k, DittoXInfo *out)
{
    if (k < 1 || n < 0 || (n > 0 && (!in || !out)))
        return DITTO_ERR_INVAL;
    for (int64_t i = 0; i < n; i++)
        if (in[i].pitch.deg || in[i].yaw.deg || in[i].roll.deg)
            return DITTO_ERR_INVAL;
    const int64_t half = k / 2;
    const int nruns = (int)(sizeof xinfo_runs / sizeof xinfo_runs[0]);
    for (int64_t i = 0; i < n; i++) {
        /* frames [lo, hi): the window truncated at both ends */
        int64_t lo = i - half < 0 ? 0 : i - half;
        int64_t hi = i + half + 1 > n ? n : i + half + 1;
        DittoXInfo *o = &out[i];
        memset(o, 0, sizeof *o);
        for (int r = 0; r < nruns; r++) {
            float *dst = (float *)(void *)((char *)o + xinfo_runs[r].off);
            for (int d = 0; d < xinfo_runs[r].len; d++) {
                double s = 0;
                for (int64_t j = lo; j < hi; j++)
                    s += run_c(&in[j], r)[d];
                dst[d] = (float)(s / (double)(hi - lo));
            }
        }
    }
    return 0;
}

int64_t ditto_mirror_index(int64_t i, int64_t n)
{
    if (n < 1)
        return 0;
    if (i < 0)
        i = 0;
    int64_t turn = i / n, r = i % n;
    return (turn % 2 == 0) ? r : n - 1 - r;
}
