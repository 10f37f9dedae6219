/*
 * Landmark models and eye attributes (ditto-architecture.md 4.2, 4.4).
 * Geometry is double where upstream uses float64 (skimage/cv2 matrices)
 * and float where upstream keeps float32 arrays.
 */
#include "pipeline/landmarks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "ops/ops.h"
#include "pipeline/crop.h"

/* ---- 106 points ----------------------------------------------------------------- */

static const DittoLmk106Spec lmk106_specs[] = {
    { "2d106det.onnx", NULL, NULL, 192, 1.5, DITTO_LMK_IN_BGR_RAW, DITTO_LMK_OUT_PM1 },
    { "landmark106.onnx", "data", "fc1", 192, 1.5, DITTO_LMK_IN_BGR_RAW, DITTO_LMK_OUT_PM1 },
    { "pfld106_lite.onnx", "input", "output", 112, 1.2, DITTO_LMK_IN_BGR_UNIT, DITTO_LMK_OUT_UNIT },
};

static const DittoLmk106Spec lmk106_generic = { NULL, NULL, NULL, 192, 1.5, DITTO_LMK_IN_BGR_RAW, DITTO_LMK_OUT_PM1 };

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

const DittoLmk106Spec *ditto_lmk106_spec_find(const char *path)
{
    const char *b = path ? base_name(path) : "";
    for (size_t i = 0; i < sizeof lmk106_specs / sizeof *lmk106_specs; i++)
        if (!strcmp(b, lmk106_specs[i].file))
            return &lmk106_specs[i];
    return &lmk106_generic;
}

void ditto_lmk106_matrix(const DittoFaceBox *box, int size, double box_scale, double M[6])
{
    /* insightface Landmark.get: centre and size of the box, no rotation */
    double w = (double)box->x2 - (double)box->x1, h = (double)box->y2 - (double)box->y1;
    double cx = ((double)box->x2 + (double)box->x1) / 2, cy = ((double)box->y2 + (double)box->y1) / 2;
    double s = (double)size / (fmax(w, h) * box_scale);
    double t = (double)(size / 2);
    M[0] = s, M[1] = 0, M[2] = t - s * cx;
    M[3] = 0, M[4] = s, M[5] = t - s * cy;
}

void ditto_lmk_blob(const uint8_t *rgb, int size, DittoLmkInput kind, float *blob)
{
    size_t plane = (size_t)size * (size_t)size;
    bool swap = kind != DITTO_LMK_IN_RGB_UNIT;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            int src = swap ? 2 - c : c;
            float v = (float)rgb[i * 3 + (size_t)src];
            /* ToTensor-style x/255 is a division, not a multiplication by 1/255 */
            blob[(size_t)c * plane + i] = kind == DITTO_LMK_IN_BGR_RAW ? v : v / 255.0f;
        }
}

/* cv2.invertAffineTransform in double. */
static void invert_affine(const double M[6], double I[6])
{
    double D = M[0] * M[4] - M[1] * M[3];
    D = D != 0.0 ? 1.0 / D : 0.0;
    double a11 = M[4] * D, a22 = M[0] * D, a12 = -M[1] * D, a21 = -M[3] * D;
    I[0] = a11, I[1] = a12, I[2] = -a11 * M[2] - a12 * M[5];
    I[3] = a21, I[4] = a22, I[5] = -a21 * M[2] - a22 * M[5];
}

void ditto_lmk106_decode(const DittoLmk106Spec *sp, const float *raw, const double M[6], float pts[2 * DITTO_LMK106_N])
{
    double I[6];
    invert_affine(M, I);
    const float half = (float)(sp->size / 2), full = (float)sp->size;
    for (int i = 0; i < DITTO_LMK106_N; i++) {
        float x = raw[2 * i], y = raw[2 * i + 1];
        if (sp->out == DITTO_LMK_OUT_PM1) {
            x = (x + 1.0f) * half;
            y = (y + 1.0f) * half;
        } else {
            x *= full;
            y *= full;
        }
        /* trans_points2d: float64 matrix times float32 point, stored back as float32 */
        pts[2 * i] = (float)(I[0] * x + I[1] * y + I[2]);
        pts[2 * i + 1] = (float)(I[3] * x + I[4] * y + I[5]);
    }
}

void ditto_lmk203_decode(const float *raw, int size, const float M_c2o[9], float pts[2 * DITTO_LMK203_N])
{
    for (int i = 0; i < 2 * DITTO_LMK203_N; i++)
        pts[i] = raw[i] * (float)size;
    ditto_crop_transform_pts(pts, DITTO_LMK203_N, M_c2o, pts);
}

void ditto_lmk_bbox(const float *pts, int n, DittoFaceBox *box)
{
    memset(box, 0, sizeof *box);
    if (n < 1)
        return;
    box->x1 = box->x2 = pts[0];
    box->y1 = box->y2 = pts[1];
    for (int i = 1; i < n; i++) {
        box->x1 = fminf(box->x1, pts[2 * i]);
        box->x2 = fmaxf(box->x2, pts[2 * i]);
        box->y1 = fminf(box->y1, pts[2 * i + 1]);
        box->y2 = fmaxf(box->y2, pts[2 * i + 1]);
    }
    box->score = 1.0f;
}

/* ---- BlazeFace --------------------------------------------------------------------- */

void ditto_blaze_anchors(float anchors[2 * DITTO_BLAZE_ANCHORS])
{
    /* SSD anchors of the short-range model: strides 8,16,16,16 with fixed size 1 and two anchors per
     * layer (aspect 1 plus the interpolated scale); layers of equal stride share one grid, so stride 16
     * has 3 x 2 = 6 anchors per cell. Centres at (x + 0.5) / grid. */
    static const int grid[2] = { 16, 8 }, per_cell[2] = { 2, 6 };
    int k = 0;
    for (int l = 0; l < 2; l++)
        for (int y = 0; y < grid[l]; y++)
            for (int x = 0; x < grid[l]; x++)
                for (int a = 0; a < per_cell[l]; a++) {
                    anchors[2 * k] = ((float)x + 0.5f) / (float)grid[l];
                    anchors[2 * k + 1] = ((float)y + 0.5f) / (float)grid[l];
                    k++;
                }
}

static int cmp_blaze_desc(const void *a, const void *b)
{
    float sa = ((const DittoBlazeDet *)a)->score, sb = ((const DittoBlazeDet *)b)->score;
    return sa < sb ? 1 : sa > sb ? -1 : 0;
}

int ditto_blaze_decode(const float *reg, const float *cls, const float anchors[2 * DITTO_BLAZE_ANCHORS], float thresh, DittoBlazeDet *out)
{
    const float S = (float)DITTO_BLAZE_SIZE;
    int n = 0;
    for (int i = 0; i < DITTO_BLAZE_ANCHORS; i++) {
        float raw = cls[i];
        if (raw != raw)
            continue;
        raw = raw < -50.0f ? -50.0f : raw > 100.0f ? 100.0f : raw;
        float score = 1.0f / (1.0f + expf(-raw));
        if (!(score >= thresh))
            continue;
        const float *r = reg + (size_t)i * 16;
        float ax = anchors[2 * i], ay = anchors[2 * i + 1];
        float xc = r[0] / S + ax, yc = r[1] / S + ay, w = r[2] / S, h = r[3] / S;
        DittoBlazeDet d;
        d.x1 = xc - w / 2;
        d.y1 = yc - h / 2;
        d.x2 = xc + w / 2;
        d.y2 = yc + h / 2;
        for (int k = 0; k < 6; k++) {
            d.kps[2 * k] = r[4 + 2 * k] / S + ax;
            d.kps[2 * k + 1] = r[5 + 2 * k] / S + ay;
        }
        d.score = score;
        out[n++] = d;
    }
    qsort(out, (size_t)n, sizeof *out, cmp_blaze_desc);
    return n;
}

static float blaze_iou(const DittoBlazeDet *a, const DittoBlazeDet *b)
{
    float ix = fminf(a->x2, b->x2) - fmaxf(a->x1, b->x1), iy = fminf(a->y2, b->y2) - fmaxf(a->y1, b->y1);
    if (ix <= 0 || iy <= 0)
        return 0.0f;
    float inter = ix * iy;
    float uni = (a->x2 - a->x1) * (a->y2 - a->y1) + (b->x2 - b->x1) * (b->y2 - b->y1) - inter;
    return uni > 0 ? inter / uni : 0.0f;
}

int ditto_blaze_wnms(DittoBlazeDet *d, int n, float iou)
{
    unsigned char used[DITTO_BLAZE_ANCHORS] = { 0 };
    if (n > DITTO_BLAZE_ANCHORS)
        n = DITTO_BLAZE_ANCHORS;
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (used[i])
            continue;
        /* the top remaining detection and every remaining one overlapping it: score-weighted mean of
         * the coordinates, mean of the scores */
        const DittoBlazeDet top = d[i];
        double acc[16] = { 0 }, wsum = 0, ssum = 0;
        int cnt = 0;
        for (int j = i; j < n; j++) {
            if (used[j] || (j != i && !(blaze_iou(&top, &d[j]) > iou)))
                continue;
            used[j] = 1;
            const float v[16] = { d[j].x1, d[j].y1, d[j].x2, d[j].y2, d[j].kps[0], d[j].kps[1], d[j].kps[2], d[j].kps[3],
                                  d[j].kps[4], d[j].kps[5], d[j].kps[6], d[j].kps[7], d[j].kps[8], d[j].kps[9], d[j].kps[10], d[j].kps[11] };
            for (int k = 0; k < 16; k++)
                acc[k] += (double)d[j].score * v[k];
            wsum += d[j].score;
            ssum += d[j].score;
            cnt++;
        }
        DittoBlazeDet m;
        m.x1 = (float)(acc[0] / wsum), m.y1 = (float)(acc[1] / wsum), m.x2 = (float)(acc[2] / wsum), m.y2 = (float)(acc[3] / wsum);
        for (int k = 0; k < 12; k++)
            m.kps[k] = (float)(acc[4 + k] / wsum);
        m.score = (float)(ssum / cnt);
        d[kept++] = m;
    }
    return kept;
}

void ditto_mesh_roi(const DittoBlazeDet *d, int W, int H, DittoMeshRoi *roi)
{
    double x1 = (double)d->x1 * W, x2 = (double)d->x2 * W, y1 = (double)d->y1 * H, y2 = (double)d->y2 * H;
    double side = fmax(x2 - x1, y2 - y1);
    roi->cx = (x1 + x2) / 2;
    roi->cy = (y1 + y2) / 2;
    roi->w = roi->h = side * 1.5;
    /* eye line from keypoint 0 to keypoint 1, made level */
    double r = -atan2((double)d->kps[1] - (double)d->kps[3], (double)d->kps[2] - (double)d->kps[0]);
    const double pi = 3.14159265358979323846;
    r = r - 2 * pi * floor((r + pi) / (2 * pi));
    roi->rot = r;
}

void ditto_mesh_roi_matrix(const DittoMeshRoi *roi, int size, double M[6])
{
    /* crop (u,v) <-> image c + R(rot) ((u/size - 1/2) w, (v/size - 1/2) h): invert that map */
    double c = cos(roi->rot), s = sin(roi->rot);
    double sx = size / roi->w, sy = size / roi->h, t = size / 2.0;
    M[0] = sx * c, M[1] = sx * s, M[2] = t - sx * (c * roi->cx + s * roi->cy);
    M[3] = -sy * s, M[4] = sy * c, M[5] = t - sy * (-s * roi->cx + c * roi->cy);
}

void ditto_mesh_project(const float *raw, const DittoMeshRoi *roi, int size, int W, int H, float out[3 * DITTO_MESH_N])
{
    double c = cos(roi->rot), s = sin(roi->rot);
    for (int i = 0; i < DITTO_MESH_N; i++) {
        double x = raw[3 * i] / (double)size - 0.5, y = raw[3 * i + 1] / (double)size - 0.5, z = raw[3 * i + 2] / (double)size;
        double rx = x * c - y * s, ry = x * s + y * c;
        out[3 * i] = (float)((rx * roi->w + roi->cx) / W);
        out[3 * i + 1] = (float)((ry * roi->h + roi->cy) / H);
        out[3 * i + 2] = (float)(z * roi->w / W);
    }
}

/* ---- eye attributes ------------------------------------------------------------------ */

static double dist3(const float *p, int a, int b)
{
    double dx = (double)p[3 * a] - p[3 * b], dy = (double)p[3 * a + 1] - p[3 * b + 1], dz = (double)p[3 * a + 2] - p[3 * b + 2];
    return sqrt(dx * dx + dy * dy + dz * dz);
}

static void ball_move(const float *p, int outer, int inner, int iris, double mv[3])
{
    const double eps = 1e-8;
    double span = dist3(p, outer, inner) + eps;
    double c[3], b[3], dir[3], bc2 = 0;
    for (int k = 0; k < 3; k++) {
        c[k] = ((double)p[3 * outer + k] + p[3 * inner + k]) / 2;
        b[k] = p[3 * iris + k];
        dir[k] = ((double)p[3 * outer + k] - p[3 * inner + k]) / span;
        bc2 += (b[k] - c[k]) * (b[k] - c[k]);
    }
    double bc = sqrt(bc2);
    for (int k = 0; k < 3; k++)
        mv[k] = ((b[k] - c[k]) / (bc + eps) - dir[k]) * bc;
}

void ditto_eye_attrs(const float lmk[3 * DITTO_MESH_N], float eye_open[2], float eye_ball[6])
{
    const double eps = 1e-8;
    double l = (dist3(lmk, 145, 159) + dist3(lmk, 144, 160) + dist3(lmk, 153, 158)) / (dist3(lmk, 33, 133) + eps);
    double r = (dist3(lmk, 374, 386) + dist3(lmk, 373, 387) + dist3(lmk, 380, 385)) / (dist3(lmk, 263, 362) + eps);
    eye_open[0] = (float)l;
    eye_open[1] = (float)r;
    double ml[3], mr[3];
    ball_move(lmk, 33, 133, 468, ml);
    ball_move(lmk, 263, 362, 473, mr);
    for (int k = 0; k < 3; k++) {
        eye_ball[2 * k] = (float)ml[k];
        eye_ball[2 * k + 1] = (float)mr[k];
    }
}

/* ---- runner ---------------------------------------------------------------------------- */

/* An image-input model: where its channels go and what dtype it takes. */
typedef struct ImgNet {
    DittoAuxNet *net;
    const char *input;       /* resolved name */
    int size;                /* square side */
    bool nhwc;
    int out[3];              /* output indices used */
} ImgNet;

struct DittoLandmarker {
    DittoBackend *cpu;
    DittoLogger log;
    const DittoLmk106Spec *spec106;
    ImgNet n106, n203, blaze, mesh;
    float anchors[2 * DITTO_BLAZE_ANCHORS];
    uint8_t *crop;           /* scratch image, up to 256 x 256 x 3 */
    float *blob;             /* scratch input, 3 x 256 x 256 */
    float *out;              /* scratch output, 896 x 16 */
    float *out2;             /* scratch output, 896 */
    DittoBlazeDet *dets;     /* 896 */
};

/* Open one image model; its side is read from the input shape (want_size when dynamic). */
static int img_net_open(DittoLandmarker *l, ImgNet *m, const char *path, const char *input, int want_size, const char *what)
{
    int rc = ditto_aux_net_open(&m->net, path, l->cpu, &l->log);
    if (rc < 0)
        return rc;
    int ndim;
    int64_t sh[DITTO_MAX_DIMS];
    DittoDType dt;
    if ((rc = ditto_aux_net_input(m->net, input, &ndim, sh, &dt)) < 0)
        return rc;
    m->input = input;
    if (ndim != 4 || !(sh[1] == 3 || sh[3] == 3))
        return ditto_fail(&l->log, DITTO_ERR_SHAPE, "%s: %s input must be an image (1,3,H,W) or (1,H,W,3), got rank %d", path, what, ndim);
    m->nhwc = sh[3] == 3 && sh[1] != 3;
    int64_t side = m->nhwc ? sh[1] : sh[2], side2 = m->nhwc ? sh[2] : sh[3];
    m->size = side > 0 ? (int)side : want_size;
    if ((side2 > 0 && side2 != m->size) || m->size < 16 || m->size > DITTO_MESH_SIZE)
        return ditto_fail(&l->log, DITTO_ERR_SHAPE, "%s: %s input must be square, at most %d pixels, got %lldx%lld", path, what, DITTO_MESH_SIZE,
                          (long long)side, (long long)side2);
    return 0;
}

/* Output index of `name`, else fallback index, checked against the output count. */
static int pick_output(DittoLandmarker *l, const ImgNet *m, const char *name, int fallback, const char *what, int *idx)
{
    int i = name ? ditto_aux_net_output_index(m->net, name) : -1;
    if (i < 0)
        i = fallback;
    if (i < 0 || i >= ditto_aux_net_n_outputs(m->net))
        return ditto_fail(&l->log, DITTO_ERR_FORMAT, "%s: %s output %s not found (the model has %d outputs)", ditto_aux_net_path(m->net), what,
                          name ? name : "", ditto_aux_net_n_outputs(m->net));
    *idx = i;
    return 0;
}

int ditto_landmarker_open(DittoLandmarker **out, const DittoLandmarkerPaths *p, DittoBackend *cpu, const DittoLogger *log)
{
    *out = NULL;
    if (!p || !p->lmk106)
        return ditto_fail(log, DITTO_ERR_INVAL, "landmarks: no 106-point landmark model given");
    if (!cpu || cpu->device != DITTO_DEVICE_CPU)
        return ditto_fail(log, DITTO_ERR_INVAL, "landmarks: a CPU backend is needed for the image ops");
    DittoLandmarker *l = ditto_calloc(1, sizeof *l);
    if (!l)
        return DITTO_ERR_NOMEM;
    l->cpu = cpu;
    l->log = log ? *log : (DittoLogger){ 0 };
    l->spec106 = ditto_lmk106_spec_find(p->lmk106);
    int rc = img_net_open(l, &l->n106, p->lmk106, l->spec106->input, l->spec106->size, "106-point landmark");
    if (!rc && l->n106.size != l->spec106->size)
        rc = ditto_fail(log, DITTO_ERR_SHAPE, "%s: 106-point model input is %d pixels, its table entry says %d", p->lmk106, l->n106.size,
                        l->spec106->size);
    if (!rc)
        rc = pick_output(l, &l->n106, l->spec106->output, 0, "106-point landmark", &l->n106.out[0]);
    if (!rc && p->lmk203) {
        rc = img_net_open(l, &l->n203, p->lmk203, NULL, 224, "203-point landmark");
        /* 'landmarks' by name; else index 2 of LivePortrait's three outputs (defect 8.9); else the only one */
        int fallback = ditto_aux_net_n_outputs(l->n203.net) >= 3 ? 2 : 0;
        if (!rc)
            rc = pick_output(l, &l->n203, "landmarks", fallback, "203-point landmark", &l->n203.out[0]);
    }
    if (!rc && p->mesh) {
        rc = img_net_open(l, &l->mesh, p->mesh, NULL, DITTO_MESH_SIZE, "face mesh");
        if (!rc)
            rc = pick_output(l, &l->mesh, "Identity", 0, "face mesh", &l->mesh.out[0]);
    }
    if (!rc && p->blaze) {
        if (!p->mesh)
            rc = ditto_fail(log, DITTO_ERR_INVAL, "%s: a BlazeFace model needs a face mesh model too", p->blaze);
        if (!rc)
            rc = img_net_open(l, &l->blaze, p->blaze, NULL, DITTO_BLAZE_SIZE, "BlazeFace");
        if (!rc && l->blaze.size != DITTO_BLAZE_SIZE)
            rc = ditto_fail(log, DITTO_ERR_SHAPE, "%s: BlazeFace input must be %dx%d (short-range model)", p->blaze, DITTO_BLAZE_SIZE,
                            DITTO_BLAZE_SIZE);
        if (!rc)
            rc = pick_output(l, &l->blaze, "regressors", 0, "BlazeFace", &l->blaze.out[0]);
        if (!rc)
            rc = pick_output(l, &l->blaze, "classificators", 1, "BlazeFace", &l->blaze.out[1]);
        ditto_blaze_anchors(l->anchors);
    }
    if (!rc) {
        l->crop = ditto_malloc((size_t)DITTO_MESH_SIZE * DITTO_MESH_SIZE * 3);
        l->blob = ditto_malloc((size_t)DITTO_MESH_SIZE * DITTO_MESH_SIZE * 3 * sizeof(float));
        l->out = ditto_malloc((size_t)DITTO_BLAZE_ANCHORS * 16 * sizeof(float));
        l->out2 = ditto_malloc((size_t)DITTO_BLAZE_ANCHORS * sizeof(float));
        l->dets = ditto_malloc((size_t)DITTO_BLAZE_ANCHORS * sizeof *l->dets);
        if (!l->crop || !l->blob || !l->out || !l->out2 || !l->dets)
            rc = DITTO_ERR_NOMEM;
    }
    if (rc < 0) {
        ditto_landmarker_close(&l);
        return rc;
    }
    *out = l;
    return 0;
}

void ditto_landmarker_close(DittoLandmarker **pl)
{
    DittoLandmarker *l = pl ? *pl : NULL;
    if (!l)
        return;
    ditto_aux_net_close(&l->n106.net);
    ditto_aux_net_close(&l->n203.net);
    ditto_aux_net_close(&l->blaze.net);
    ditto_aux_net_close(&l->mesh.net);
    ditto_free(l->crop);
    ditto_free(l->blob);
    ditto_free(l->out);
    ditto_free(l->out2);
    ditto_free(l->dets);
    ditto_free(l);
    *pl = NULL;
}

bool ditto_landmarker_has_203(const DittoLandmarker *l)
{
    return l->n203.net != NULL;
}

bool ditto_landmarker_has_mesh(const DittoLandmarker *l)
{
    return l->mesh.net != NULL;
}

bool ditto_landmarker_has_blaze(const DittoLandmarker *l)
{
    return l->blaze.net != NULL;
}

/* cv2.warpAffine of the RGB frame into l->crop (size x size). */
static int warp_to_crop(DittoLandmarker *l, const uint8_t *rgb, int h, int w, const double M[6], int size)
{
    DittoWarpAffineParams wp = { { M[0], M[1], M[2], M[3], M[4], M[5] }, 0.0f };
    DittoTensor x = ditto_tensor((void *)rgb, DITTO_U8, 3, (int64_t[]){ h, w, 3 });
    DittoTensor y = ditto_tensor(l->crop, DITTO_U8, 3, (int64_t[]){ size, size, 3 });
    return ditto_op_warp_affine(l->cpu, &wp, &x, &y);
}

/* Run m on l->blob (already in m's layout), one or two outputs. */
static int run_img(DittoLandmarker *l, ImgNet *m, int n_out, float *const *dst, const int64_t *numel)
{
    int64_t shape[4] = { 1, 3, m->size, m->size };
    if (m->nhwc)
        shape[1] = m->size, shape[3] = 3;
    return ditto_aux_net_run(m->net, m->input, l->blob, 4, shape, n_out, m->out, dst, numel);
}

/* l->crop (size x size RGB) -> l->blob as x / div - sub, RGB order, in m's layout. */
static void blob_rgb(DittoLandmarker *l, const ImgNet *m, float div, float sub)
{
    size_t plane = (size_t)m->size * (size_t)m->size;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            float v = (float)l->crop[i * 3 + (size_t)c] / div - sub;
            if (m->nhwc)
                l->blob[i * 3 + (size_t)c] = v;
            else
                l->blob[(size_t)c * plane + i] = v;
        }
}

int ditto_landmarker_106(DittoLandmarker *l, const uint8_t *rgb, int h, int w, const DittoFaceBox *box, float pts[2 * DITTO_LMK106_N])
{
    const DittoLmk106Spec *sp = l->spec106;
    double M[6];
    ditto_lmk106_matrix(box, sp->size, sp->box_scale, M);
    DITTO_TRY(warp_to_crop(l, rgb, h, w, M, sp->size));
    if (l->n106.nhwc) {
        /* same values as the planar blob, pixel-interleaved */
        for (size_t i = 0; i < (size_t)sp->size * (size_t)sp->size; i++)
            for (int c = 0; c < 3; c++) {
                float v = (float)l->crop[i * 3 + (size_t)(sp->in == DITTO_LMK_IN_RGB_UNIT ? c : 2 - c)];
                l->blob[i * 3 + (size_t)c] = sp->in == DITTO_LMK_IN_BGR_RAW ? v : v / 255.0f;
            }
    } else {
        ditto_lmk_blob(l->crop, sp->size, sp->in, l->blob);
    }
    float raw[2 * DITTO_LMK106_N];
    float *dst[1] = { raw };
    DITTO_TRY(run_img(l, &l->n106, 1, dst, (int64_t[]){ 2 * DITTO_LMK106_N }));
    ditto_lmk106_decode(sp, raw, M, pts);
    return 0;
}

int ditto_landmarker_203(DittoLandmarker *l, const uint8_t *rgb, int h, int w, const float *seed, int n_seed, float pts[2 * DITTO_LMK203_N])
{
    if (!l->n203.net)
        return ditto_fail(&l->log, DITTO_ERR_INVAL, "landmarks: no 203-point model loaded");
    DittoCropParams cp;
    ditto_crop_params_lmk224(&cp);
    cp.dsize = l->n203.size;
    float M_o2c[9], M_c2o[9];
    DITTO_TRY(ditto_crop_matrix(seed, n_seed, &cp, M_o2c, M_c2o, &l->log));
    double M[6] = { M_o2c[0], M_o2c[1], M_o2c[2], M_o2c[3], M_o2c[4], M_o2c[5] };
    DITTO_TRY(warp_to_crop(l, rgb, h, w, M, cp.dsize));
    blob_rgb(l, &l->n203, 255.0f, 0.0f);
    float raw[2 * DITTO_LMK203_N];
    float *dst[1] = { raw };
    DITTO_TRY(run_img(l, &l->n203, 1, dst, (int64_t[]){ 2 * DITTO_LMK203_N }));
    ditto_lmk203_decode(raw, cp.dsize, M_c2o, pts);
    return 0;
}

int ditto_landmarker_mesh(DittoLandmarker *l, const uint8_t *crop, int dsize, float lmk[3 * DITTO_MESH_N], int *found)
{
    *found = 0;
    if (!l->mesh.net)
        return ditto_fail(&l->log, DITTO_ERR_INVAL, "landmarks: no face mesh model loaded");
    DittoTensor x = ditto_tensor((void *)crop, DITTO_U8, 3, (int64_t[]){ dsize, dsize, 3 });
    DittoMeshRoi roi = { dsize / 2.0, dsize / 2.0, dsize, dsize, 0.0 };
    const int S = l->mesh.size;
    if (l->blaze.net) {
        /* BlazeFace on the crop resized to 128 (cv2.resize INTER_LINEAR), x/127.5 - 1 */
        DittoTensor y = ditto_tensor(l->crop, DITTO_U8, 3, (int64_t[]){ DITTO_BLAZE_SIZE, DITTO_BLAZE_SIZE, 3 });
        DITTO_TRY(ditto_op_resize_bilinear(l->cpu, &x, &y));
        blob_rgb(l, &l->blaze, 127.5f, 1.0f);
        float *dst[2] = { l->out, l->out2 };
        DITTO_TRY(run_img(l, &l->blaze, 2, dst, (int64_t[]){ DITTO_BLAZE_ANCHORS * 16, DITTO_BLAZE_ANCHORS }));
        int n = ditto_blaze_decode(l->out, l->out2, l->anchors, 0.5f, l->dets);
        n = ditto_blaze_wnms(l->dets, n, 0.3f);
        if (n < 1)
            return 0;
        ditto_mesh_roi(&l->dets[0], dsize, dsize, &roi);
        double M[6];
        ditto_mesh_roi_matrix(&roi, S, M);
        DittoWarpAffineParams wp = { { M[0], M[1], M[2], M[3], M[4], M[5] }, 0.0f };
        DittoTensor z = ditto_tensor(l->crop, DITTO_U8, 3, (int64_t[]){ S, S, 3 });
        DITTO_TRY(ditto_op_warp_affine(l->cpu, &wp, &x, &z));
    } else {
        /* no BlazeFace: the whole crop, resized to the mesh input */
        DittoTensor z = ditto_tensor(l->crop, DITTO_U8, 3, (int64_t[]){ S, S, 3 });
        DITTO_TRY(ditto_op_resize_bilinear(l->cpu, &x, &z));
    }
    blob_rgb(l, &l->mesh, 255.0f, 0.0f);
    float *dst[1] = { l->out };
    DITTO_TRY(run_img(l, &l->mesh, 1, dst, (int64_t[]){ 3 * DITTO_MESH_N }));
    ditto_mesh_project(l->out, &roi, S, dsize, dsize, lmk);
    for (int i = 0; i < 3 * DITTO_MESH_N; i++)
        if (!isfinite(lmk[i]))
            return ditto_fail(&l->log, DITTO_ERR_RANGE, "%s: face mesh produced non-finite landmarks", ditto_aux_net_path(l->mesh.net));
    *found = 1;
    return 0;
}
