/*
 * crop_image math (ditto-architecture.md 4.3) in NumPy-2 float32 order; see
 * crop.h. Every intermediate is a float variable, so nothing is evaluated
 * in a wider type (FLT_EVAL_METHOD 0 on x86-64/aarch64; ISO C mode keeps
 * GCC from contracting a*b+c into an FMA).
 */
#include "pipeline/crop.h"

#include <math.h>
#include <string.h>

#include "core/log.h"

void ditto_crop_params_default(DittoCropParams *p)
{
    p->dsize = 512;
    p->scale = 2.3;
    p->vx_ratio = 0.0;
    p->vy_ratio = -0.125;
    p->do_rot = true;
}

void ditto_crop_params_lmk224(DittoCropParams *p)
{
    p->dsize = 224;
    p->scale = 1.5;
    p->vx_ratio = 0.0;
    p->vy_ratio = -0.1;
    p->do_rot = true;
}

/* np.mean(P[idx], axis=0) of four points: sequential float32 sum, then / 4 */
static void mean4(const float *P, const int idx[4], float out[2])
{
    for (int k = 0; k < 2; k++) {
        float s = P[2 * idx[0] + k];
        for (int i = 1; i < 4; i++)
            s += P[2 * idx[i] + k];
        out[k] = s / 4.0f;
    }
}

/* The two anchor points: eye midpoint and lip centre (parse_pt2_from_pt203 / _pt106, use_lip). */
static int anchor_points(const float *P, int npts, float eye[2], float lip[2])
{
    static const int eyes203[2][4] = { { 0, 6, 12, 18 }, { 24, 30, 36, 42 } }, lip203[2] = { 48, 66 };
    static const int eyes106[2][4] = { { 33, 35, 40, 39 }, { 87, 89, 94, 93 } }, lip106[2] = { 52, 61 };
    const int (*eyes)[4];
    const int *lp;
    if (npts == 203) {
        eyes = eyes203;
        lp = lip203;
    } else if (npts == 106) {
        eyes = eyes106;
        lp = lip106;
    } else {
        return DITTO_ERR_INVAL;
    }
    float l[2], r[2];
    mean4(P, eyes[0], l);
    mean4(P, eyes[1], r);
    for (int k = 0; k < 2; k++) {
        eye[k] = (l[k] + r[k]) / 2.0f;
        lip[k] = (P[2 * lp[0] + k] + P[2 * lp[1] + k]) / 2.0f;
    }
    return 0;
}

int ditto_crop_matrix(const float *pts, int npts, const DittoCropParams *p, float M_o2c[9], float M_c2o[9], const DittoLogger *log)
{
    if (!pts || !p)
        return DITTO_ERR_INVAL;
    if (p->dsize < 1 || !(p->scale > 0))
        return ditto_fail(log, DITTO_ERR_INVAL, "crop: dsize %d and scale %g must be positive", p->dsize, p->scale);
    for (int i = 0; i < 2 * npts; i++)
        if (!isfinite(pts[i]))
            return ditto_fail(log, DITTO_ERR_RANGE, "crop: landmark %d is not finite", i / 2);
    float eye[2], lip[2];
    if (anchor_points(pts, npts, eye, lip) < 0)
        return ditto_fail(log, DITTO_ERR_INVAL, "crop: %d landmarks; expected the 203- or 106-point set", npts);

    /* axes: uy from the eyes to the lip, ux = uy turned by -90 degrees */
    float uy[2] = { lip[0] - eye[0], lip[1] - eye[1] };
    float sq = uy[0] * uy[0];
    sq = sq + uy[1] * uy[1];
    float len = sqrtf(sq);
    if (len <= 1e-3f) {
        uy[0] = 0.0f;
        uy[1] = 1.0f;
    } else {
        uy[0] /= len;
        uy[1] /= len;
    }
    float ux[2] = { uy[1], -uy[0] };
    /* math.acos on the float32 value; clamped because a rounding excess over 1 would be NaN */
    double cx0 = ux[0] > 1.0f ? 1.0 : ux[0] < -1.0f ? -1.0 : (double)ux[0];
    double angle = acos(cx0);
    if (ux[1] < 0)
        angle = -angle;

    /* box in the rotated frame around the landmark mean */
    float c0[2];
    for (int k = 0; k < 2; k++) {
        float s = pts[k];
        for (int i = 1; i < npts; i++)
            s += pts[2 * i + k];
        c0[k] = s / (float)npts;
    }
    float lt[2] = { INFINITY, INFINITY }, rb[2] = { -INFINITY, -INFINITY };
    for (int i = 0; i < npts; i++) {
        float dx = pts[2 * i] - c0[0], dy = pts[2 * i + 1] - c0[1];
        float a = dx * ux[0], b = dy * ux[1];
        float r[2];
        r[0] = a + b;
        a = dx * uy[0];
        b = dy * uy[1];
        r[1] = a + b;
        for (int k = 0; k < 2; k++) {
            lt[k] = r[k] < lt[k] ? r[k] : lt[k];
            rb[k] = r[k] > rb[k] ? r[k] : rb[k];
        }
    }
    float c1[2] = { (lt[0] + rb[0]) / 2.0f, (lt[1] + rb[1]) / 2.0f };
    float w = rb[0] - lt[0], h = rb[1] - lt[1];
    float m = h > w ? h : w;               /* Python max(size[0], size[1]) */
    float S = m * (float)p->scale;
    if (!(S > 0) || !isfinite(S))
        return ditto_fail(log, DITTO_ERR_RANGE, "crop: degenerate landmark box (side %g)", (double)S);

    float vx = (float)p->vx_ratio * S, vy = (float)p->vy_ratio * S;
    float center[2];
    for (int k = 0; k < 2; k++) {
        float t = c0[k] + ux[k] * c1[0];
        t = t + uy[k] * c1[1];
        t = t + ux[k] * vx;                 /* defect 8.6: upstream never passes vx_ratio */
        center[k] = t + uy[k] * vy;
    }

    float s = (float)p->dsize / S;
    float tc = (float)((double)p->dsize / 2.0);
    float M[9];
    if (p->do_rot) {
        float cs = (float)cos(angle), sn = (float)sin(angle);
        float nsn = (float)-sin(angle);
        float a = cs * center[0], b = sn * center[1];
        float t0 = tc - s * (a + b);
        a = nsn * center[0];
        b = cs * center[1];
        float t1 = tc - s * (a + b);
        M[0] = s * cs;
        M[1] = s * sn;
        M[2] = t0;
        M[3] = -s * sn;
        M[4] = s * cs;
        M[5] = t1;
    } else {
        M[0] = s;
        M[1] = 0.0f;
        M[2] = tc - s * center[0];
        M[3] = 0.0f;
        M[4] = s;
        M[5] = tc - s * center[1];
    }
    M[6] = 0.0f;
    M[7] = 0.0f;
    M[8] = 1.0f;
    if (M_c2o && ditto_mat3_inverse_f32(M, M_c2o) < 0)
        return ditto_fail(log, DITTO_ERR_RANGE, "crop: the crop transform is singular");
    if (M_o2c)
        memcpy(M_o2c, M, sizeof M);
    return 0;
}

void ditto_crop_transform_pts(const float *pts, int n, const float M[9], float *out)
{
    for (int i = 0; i < n; i++) {
        float x = pts[2 * i], y = pts[2 * i + 1];
        float a = x * M[0], b = y * M[1];
        float ox = a + b;
        a = x * M[3];
        b = y * M[4];
        float oy = a + b;
        out[2 * i] = ox + M[2];
        out[2 * i + 1] = oy + M[5];
    }
}

int ditto_mat3_inverse_f32(const float M[9], float out[9])
{
    /* LU with partial pivoting (getrf), then solve against the identity (getrs) */
    float a[9];
    int piv[3];
    memcpy(a, M, sizeof a);
    for (int j = 0; j < 3; j++) {
        int p = j;
        for (int i = j + 1; i < 3; i++)
            if (fabsf(a[3 * i + j]) > fabsf(a[3 * p + j]))
                p = i;
        piv[j] = p;
        if (a[3 * p + j] == 0.0f || !isfinite(a[3 * p + j]))
            return DITTO_ERR_RANGE;
        if (p != j)
            for (int k = 0; k < 3; k++) {
                float t = a[3 * j + k];
                a[3 * j + k] = a[3 * p + k];
                a[3 * p + k] = t;
            }
        float r = 1.0f / a[3 * j + j];
        for (int i = j + 1; i < 3; i++) {
            a[3 * i + j] *= r;
            for (int k = j + 1; k < 3; k++)
                a[3 * i + k] -= a[3 * i + j] * a[3 * j + k];
        }
    }
    float b[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
    for (int j = 0; j < 3; j++)
        if (piv[j] != j)
            for (int k = 0; k < 3; k++) {
                float t = b[3 * j + k];
                b[3 * j + k] = b[3 * piv[j] + k];
                b[3 * piv[j] + k] = t;
            }
    for (int c = 0; c < 3; c++) {
        for (int i = 1; i < 3; i++)          /* L y = b (unit diagonal) */
            for (int k = 0; k < i; k++)
                b[3 * i + c] -= a[3 * i + k] * b[3 * k + c];
        for (int i = 2; i >= 0; i--) {       /* U x = y */
            for (int k = i + 1; k < 3; k++)
                b[3 * i + c] -= a[3 * i + k] * b[3 * k + c];
            b[3 * i + c] /= a[3 * i + i];
        }
    }
    memcpy(out, b, sizeof b);
    return 0;
}

int ditto_crop_image(DittoBackend *be, const DittoTensor *img, const float M_o2c[9], DittoTensor *crop)
{
    DittoWarpAffineParams wp = { .border_value = 0.0f };
    for (int i = 0; i < 6; i++)
        wp.m[i] = (double)M_o2c[i];   /* cv2 converts the float32 matrix to double */
    return ditto_op_warp_affine(be, &wp, img, crop);
}
