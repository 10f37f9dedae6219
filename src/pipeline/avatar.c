/*
 * Avatar registration orchestration (avatar.h; ditto-architecture.md 4).
 */
#include "pipeline/avatar.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "core/mem.h"
#include "io/image.h"
#include "io/video_in.h"
#include "models/models.h"
#include "ops/ops.h"
#include "pipeline/crop.h"
#include "pipeline/motion.h"
#include "weights/catalog.h"
#include "weights/synthetic.h"

#define CROP 512
#define NET_IN 256

/* ---- options and source geometry ----------------------------------------------------- */

void ditto_register_params_default(DittoRegisterParams *p)
{
    p->max_size = 1920;
    p->n_frames = -1;
    p->crop_scale = 2.3;
    p->crop_vx = 0.0;
    p->crop_vy = -0.125;
    p->crop_rot = true;
    p->smooth_k = 13;
}

bool ditto_source_dims(int h, int w, int max_size, int *new_h, int *new_w)
{
    int nh = h, nw = w;
    if (max_size > 0 && (h > max_size || w > max_size)) {
        /* Python round(): half to even, which nearbyint does in the default rounding mode */
        if (h > w) {
            nh = max_size;
            nw = (int)nearbyint((double)max_size * w / h);
        } else {
            nw = max_size;
            nh = (int)nearbyint((double)max_size * h / w);
        }
    }
    nh -= nh % 2;
    nw -= nw % 2;
    *new_h = nh;
    *new_w = nw;
    return nh != h || nw != w;
}

/* ---- model files ------------------------------------------------------------------------ */

static const char *const role_names[DITTO_AUX_COUNT] = { "detector", "landmark106", "landmark203", "blaze_face", "face_mesh" };

const char *ditto_aux_role_name(DittoAuxRole role)
{
    return role >= 0 && role < DITTO_AUX_COUNT ? role_names[role] : "?";
}

/* Candidate paths per role, relative to the weights folder, in order of preference. */
static const char *const aux_candidates[DITTO_AUX_COUNT][8] = {
    [DITTO_AUX_DETECTOR] = { "aux_models/det_10g.onnx", "../ditto_onnx/insightface_det.onnx", "det_10g.onnx", "insightface_det.onnx",
                             "scrfd/scrfd_500m_bnkps.onnx", "scrfd/scrfd_2.5g_bnkps_shape640x640.onnx", NULL },
    [DITTO_AUX_LMK106] = { "aux_models/2d106det.onnx", "../ditto_onnx/landmark106.onnx", "2d106det.onnx", "landmark106.onnx",
                           "landmark106/pfld106_lite.onnx", NULL },
    [DITTO_AUX_LMK203] = { "aux_models/landmark203.onnx", "../ditto_onnx/landmark203.onnx", "landmark203.onnx", NULL },
    [DITTO_AUX_BLAZE] = { "aux_models/blaze_face.onnx", "../ditto_onnx/blaze_face.onnx", "blaze_face.onnx",
                          "blazeface/face_detection_short_range_nhwc.onnx", "blazeface/face_detection_short_range_nchw.onnx", NULL },
    [DITTO_AUX_MESH] = { "aux_models/face_mesh.onnx", "../ditto_onnx/face_mesh.onnx", "face_mesh.onnx",
                         "facemesh/face_landmarks_detector_478_fp16.onnx", NULL },
};

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int ditto_aux_find(const char *dir, DittoAuxRole role, char *path, size_t cap)
{
    if (!dir || role < 0 || role >= DITTO_AUX_COUNT)
        return 0;
    for (int i = 0; aux_candidates[role][i]; i++) {
        int n = snprintf(path, cap, "%s/%s", dir, aux_candidates[role][i]);
        if (n > 0 && (size_t)n < cap && is_file(path))
            return 1;
    }
    return 0;
}

int ditto_net_find(const char *dir, const char *file_name, char *path, size_t cap)
{
    static const char *const sub[] = { "models/", "" };
    for (int i = 0; i < 2; i++) {
        int n = snprintf(path, cap, "%s/%s%s", dir, sub[i], file_name);
        if (n > 0 && (size_t)n < cap && is_file(path))
            return 1;
    }
    return 0;
}

/* ---- registrar ------------------------------------------------------------------------------- */

struct DittoRegistrar {
    DittoLogger log;
    DittoBackend *cpu;        /* owned: image ops and the aux models */
    DittoBackend *be;         /* networks (borrowed, or cpu) */
    DittoFaceDetector *det;
    DittoLandmarker *lmk;
    DittoAppearance *app;
    DittoMotionExtractor *mot;
    int synthetic;
    char *paths[DITTO_AUX_COUNT];
    char *app_path, *mot_path;

    /* tracking state of the frame sequence being registered */
    bool have_prev;
    float prev106[2 * DITTO_LMK106_N], prev203[2 * DITTO_LMK203_N];
    double calib[4];          /* detector box vs 106-point bbox on frame 0: centre offset / size (x, y), size ratios (w, h) */
};

static char *dup_or_null(const char *s)
{
    return s ? ditto_strdup(s) : NULL;
}

static int load_net_catalog(DittoRegistrar *r, DittoNetKind kind, const char *path, DittoCatalog **cat)
{
    if (r->synthetic)
        return ditto_synthetic_catalog_size(cat, kind, (DittoSyntheticSize)r->synthetic, kind == DITTO_NET_APPEARANCE ? 101 : 102, &r->log);
    if (!path)
        return ditto_fail(&r->log, DITTO_ERR_INVAL, "registration: no %s checkpoint given", ditto_net_file_name(kind));
    return ditto_catalog_open_pth(cat, path, &r->log);
}

int ditto_registrar_open(DittoRegistrar **out, const DittoRegistrarConfig *cfg)
{
    *out = NULL;
    DittoRegistrar *r = ditto_calloc(1, sizeof *r);
    if (!r)
        return DITTO_ERR_NOMEM;
    r->log = cfg->log;
    r->synthetic = cfg->synthetic;
    int rc = 0;
    for (int i = 0; i < DITTO_AUX_COUNT; i++)
        if (cfg->paths[i] && !(r->paths[i] = ditto_strdup(cfg->paths[i])))
            rc = DITTO_ERR_NOMEM;
    r->app_path = dup_or_null(cfg->appearance);
    r->mot_path = dup_or_null(cfg->motion);
    if (rc < 0)
        goto fail;

    DittoBackendParams bp;
    ditto_backend_params_default(&bp);
    bp.nthreads = cfg->threads;
    bp.log = cfg->log;
    if ((rc = ditto_backend_cpu_open(&r->cpu, &bp)) < 0)
        goto fail;
    r->be = cfg->be ? cfg->be : r->cpu;

    const char *det = cfg->paths[DITTO_AUX_DETECTOR], *l106 = cfg->paths[DITTO_AUX_LMK106];
    if (!r->synthetic && (!det || !l106)) {
        rc = ditto_fail(&r->log, DITTO_ERR_NOENT, "registration: no %s model found (needed for real weights)", !det ? "face detector (det_10g.onnx)"
                                                                                                                   : "106-point landmark (2d106det.onnx)");
        goto fail;
    }
    if (det && !l106) {
        rc = ditto_fail(&r->log, DITTO_ERR_NOENT, "registration: a face detector without a 106-point landmark model cannot crop");
        goto fail;
    }
    if (!r->synthetic && !cfg->paths[DITTO_AUX_MESH]) {
        rc = ditto_fail(&r->log, DITTO_ERR_NOENT, "registration: no face mesh model (face_mesh.onnx) found for the eye attributes");
        goto fail;
    }
    if (det && (rc = ditto_face_detector_open(&r->det, det, r->cpu, &r->log)) < 0)
        goto fail;
    if (det) {
        DittoLandmarkerPaths lp = { l106, cfg->paths[DITTO_AUX_LMK203], cfg->paths[DITTO_AUX_BLAZE], cfg->paths[DITTO_AUX_MESH] };
        if ((rc = ditto_landmarker_open(&r->lmk, &lp, r->cpu, &r->log)) < 0)
            goto fail;
    }

    DittoCatalog *cat = NULL;
    if ((rc = load_net_catalog(r, DITTO_NET_APPEARANCE, r->app_path, &cat)) < 0)
        goto fail;
    rc = ditto_appearance_load(&r->app, r->be, cat);
    ditto_catalog_close(&cat);
    if (rc < 0)
        goto fail;
    if ((rc = load_net_catalog(r, DITTO_NET_MOTION, r->mot_path, &cat)) < 0)
        goto fail;
    rc = ditto_motion_extractor_load(&r->mot, r->be, cat);
    ditto_catalog_close(&cat);
    if (rc < 0)
        goto fail;
    int64_t dims[7];
    static const int64_t want[7] = { DITTO_POSE_BINS, DITTO_POSE_BINS, DITTO_POSE_BINS, 3, DITTO_KP_DIM, 1, DITTO_KP_DIM };
    ditto_motion_extractor_dims(r->mot, dims);
    if (memcmp(dims, want, sizeof dims)) {
        rc = ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: motion extractor heads must be 66/66/66/3/63/1/63 wide",
                        r->mot_path ? r->mot_path : "synthetic motion extractor");
        goto fail;
    }
    *out = r;
    return 0;
fail:
    ditto_registrar_close(&r);
    return rc;
}

void ditto_registrar_close(DittoRegistrar **pr)
{
    DittoRegistrar *r = pr ? *pr : NULL;
    if (!r)
        return;
    ditto_face_detector_close(&r->det);
    ditto_landmarker_close(&r->lmk);
    ditto_appearance_free(&r->app);
    ditto_motion_extractor_free(&r->mot);
    ditto_backend_close(&r->cpu);
    for (int i = 0; i < DITTO_AUX_COUNT; i++)
        ditto_free(r->paths[i]);
    ditto_free(r->app_path);
    ditto_free(r->mot_path);
    ditto_free(r);
    *pr = NULL;
}

bool ditto_registrar_has_detector(const DittoRegistrar *r)
{
    return r->det != NULL;
}

/* ---- one frame: steps 1-5 ------------------------------------------------------------------------ */

/* Box for the 106-point crop from the previous frame's points, calibrated on frame 0. */
static void tracked_box(const DittoRegistrar *r, DittoFaceBox *box)
{
    DittoFaceBox lb;
    ditto_lmk_bbox(r->prev106, DITTO_LMK106_N, &lb);
    double w = (double)lb.x2 - lb.x1, h = (double)lb.y2 - lb.y1;
    double cx = ((double)lb.x1 + lb.x2) / 2 + r->calib[0] * w, cy = ((double)lb.y1 + lb.y2) / 2 + r->calib[1] * h;
    double bw = w * r->calib[2], bh = h * r->calib[3];
    memset(box, 0, sizeof *box);
    box->x1 = (float)(cx - bw / 2);
    box->x2 = (float)(cx + bw / 2);
    box->y1 = (float)(cy - bh / 2);
    box->y2 = (float)(cy + bh / 2);
    box->score = 1.0f;
}

static void calibrate(DittoRegistrar *r, const DittoFaceBox *det, const float *pts)
{
    DittoFaceBox lb;
    ditto_lmk_bbox(pts, DITTO_LMK106_N, &lb);
    double w = fmax((double)lb.x2 - lb.x1, 1e-3), h = fmax((double)lb.y2 - lb.y1, 1e-3);
    r->calib[0] = (((double)det->x1 + det->x2) / 2 - ((double)lb.x1 + lb.x2) / 2) / w;
    r->calib[1] = (((double)det->y1 + det->y2) / 2 - ((double)lb.y1 + lb.y2) / 2) / h;
    r->calib[2] = ((double)det->x2 - det->x1) / w;
    r->calib[3] = ((double)det->y2 - det->y1) / h;
}

/* The largest centred square, for synthetic registration without a detector. */
static void centred_crop(int h, int w, float M_o2c[9], float M_c2o[9])
{
    double side = h < w ? h : w, s = CROP / side;
    double cx = w / 2.0, cy = h / 2.0;
    const float o2c[9] = { (float)s, 0, (float)(CROP / 2.0 - s * cx), 0, (float)s, (float)(CROP / 2.0 - s * cy), 0, 0, 1 };
    memcpy(M_o2c, o2c, sizeof o2c);
    ditto_mat3_inverse_f32(M_o2c, M_c2o);
}

int ditto_registrar_frame(DittoRegistrar *r, const DittoRegisterParams *p, const char *what, const uint8_t *rgb, int h, int w, int index,
                          DittoFrameReg *st, uint8_t *crop512)
{
    memset(st, 0, sizeof *st);
    if (index == 0)
        r->have_prev = false;
    DittoCropParams cp;
    ditto_crop_params_default(&cp);
    cp.dsize = CROP;
    cp.scale = p->crop_scale;
    cp.vx_ratio = p->crop_vx;
    cp.vy_ratio = p->crop_vy;
    cp.do_rot = p->crop_rot;

    if (!r->det) {
        centred_crop(h, w, st->M_o2c, st->M_c2o);
    } else {
        bool has203 = ditto_landmarker_has_203(r->lmk);
        /* 1-2: the detector on the first frame; later frames track the previous landmarks */
        if (!r->have_prev) {
            int found = 0;
            DITTO_TRY(ditto_face_detect(r->det, rgb, h, w, &st->box, &found, NULL, 0, NULL));
            if (!found)
                return ditto_fail(&r->log, DITTO_ERR_NOFACE, "%s: frame %d: no face found (no detection scored >= %.2f)", what, index,
                                  (double)DITTO_DET_THRESH);
            st->detected = true;
            DITTO_TRY(ditto_landmarker_106(r->lmk, rgb, h, w, &st->box, st->lmk106));
            st->has_106 = true;
            calibrate(r, &st->box, st->lmk106);
        } else if (!has203) {
            tracked_box(r, &st->box);
            DITTO_TRY(ditto_landmarker_106(r->lmk, rgb, h, w, &st->box, st->lmk106));
            st->has_106 = true;
        }
        /* 3-4: 203 points from the 224 crop around the 106 points or the previous 203 points */
        if (has203) {
            const float *seed = st->has_106 ? st->lmk106 : r->prev203;
            DITTO_TRY(ditto_landmarker_203(r->lmk, rgb, h, w, seed, st->has_106 ? DITTO_LMK106_N : DITTO_LMK203_N, st->lmk203));
            st->has_203 = true;
            memcpy(r->prev203, st->lmk203, sizeof r->prev203);
        } else {
            memcpy(r->prev106, st->lmk106, sizeof r->prev106);
        }
        r->have_prev = true;
        const float *pts = st->has_203 ? st->lmk203 : st->lmk106;
        int rc = ditto_crop_matrix(pts, st->has_203 ? DITTO_LMK203_N : DITTO_LMK106_N, &cp, st->M_o2c, st->M_c2o, &r->log);
        if (rc < 0)
            return ditto_fail(&r->log, rc, "%s: frame %d: the landmarks give no usable crop", what, index);
    }

    /* 5: the 512 crop and its mesh */
    uint8_t *crop = crop512 ? crop512 : ditto_malloc((size_t)CROP * CROP * 3);
    if (!crop)
        return DITTO_ERR_NOMEM;
    DittoTensor x = ditto_tensor((void *)rgb, DITTO_U8, 3, (int64_t[]){ h, w, 3 });
    DittoTensor y = ditto_tensor(crop, DITTO_U8, 3, (int64_t[]){ CROP, CROP, 3 });
    int rc = ditto_crop_image(r->cpu, &x, st->M_o2c, &y);
    if (rc == 0 && r->lmk && ditto_landmarker_has_mesh(r->lmk)) {
        int found = 0;
        rc = ditto_landmarker_mesh(r->lmk, crop, CROP, st->lmk478, &found);
        if (rc == 0 && !found)
            rc = ditto_fail(&r->log, DITTO_ERR_NOFACE, "%s: frame %d: no face found in the %dx%d crop for the eye landmarks", what, index,
                            CROP, CROP);
        if (rc == 0) {
            st->has_mesh = true;
            ditto_eye_attrs(st->lmk478, st->eye_open, st->eye_ball);
        }
    }
    if (crop != crop512)
        ditto_free(crop);
    return rc;
}

/* ---- networks: steps 6-9 ----------------------------------------------------------------------------- */

typedef struct NetIO {
    DittoBuffer buf[9];
    DittoTensor img, f_s, mo[7];
    float *host_in;
    DittoArena ws;
    bool ws_ready;
} NetIO;

static void netio_free(NetIO *io)
{
    for (int i = 0; i < 9; i++)
        ditto_buffer_free(&io->buf[i]);
    ditto_free(io->host_in);
    if (io->ws_ready)
        ditto_arena_free(&io->ws);
}

static int netio_alloc_t(DittoBackend *be, DittoBuffer *b, DittoTensor *t, int ndim, const int64_t *shape)
{
    *t = ditto_tensor(NULL, DITTO_F32, ndim, shape);
    int rc = ditto_buffer_alloc(b, &be->allocator, ditto_tensor_nbytes(t));
    t->data = b->ptr;
    t->device = be->device;
    return rc;
}

int ditto_registrar_fs_shape(const DittoRegistrar *r, int64_t fs[4])
{
    DittoTensor img = ditto_tensor(NULL, DITTO_F32, 4, (const int64_t[]){ 1, 3, NET_IN, NET_IN });
    int64_t s[5];
    DITTO_TRY(ditto_appearance_out_shape(r->app, &img, s));
    memcpy(fs, s + 1, 4 * sizeof(int64_t));
    return 0;
}

static int netio_init(DittoRegistrar *r, NetIO *io, int64_t fs_shape[4])
{
    memset(io, 0, sizeof *io);
    DittoBackend *be = r->be;
    int rc = netio_alloc_t(be, &io->buf[0], &io->img, 4, (int64_t[]){ 1, 3, NET_IN, NET_IN });
    int64_t fs[5];
    if (!rc)
        rc = ditto_appearance_out_shape(r->app, &io->img, fs);
    if (!rc)
        rc = netio_alloc_t(be, &io->buf[1], &io->f_s, 5, fs);
    int64_t dims[7];
    ditto_motion_extractor_dims(r->mot, dims);
    for (int k = 0; k < 7 && !rc; k++)
        rc = netio_alloc_t(be, &io->buf[2 + k], &io->mo[k], 2, (int64_t[]){ 1, dims[k] });
    if (!rc && !(io->host_in = ditto_malloc((size_t)3 * NET_IN * NET_IN * sizeof(float))))
        rc = DITTO_ERR_NOMEM;
    if (!rc && (rc = ditto_arena_init(&io->ws, &be->allocator, 0)) == 0)
        io->ws_ready = true;
    if (!rc)
        memcpy(fs_shape, fs + 1, 4 * sizeof(int64_t));
    return rc;
}

/* crop (512x512x3) -> f_s row and x_s_info of one frame. */
static int run_nets(DittoRegistrar *r, NetIO *io, const uint8_t *crop, float *f_s, DittoXInfo *xi)
{
    DittoBackend *be = r->be;
    uint8_t *small = ditto_malloc((size_t)NET_IN * NET_IN * 3);
    if (!small)
        return DITTO_ERR_NOMEM;
    /* cv2.resize INTER_AREA 512 -> 256, then /255 as float32, HWC RGB -> NCHW */
    DittoTensor x = ditto_tensor((void *)crop, DITTO_U8, 3, (int64_t[]){ CROP, CROP, 3 });
    DittoTensor y = ditto_tensor(small, DITTO_U8, 3, (int64_t[]){ NET_IN, NET_IN, 3 });
    int rc = ditto_op_resize_area(r->cpu, &x, &y);
    const size_t plane = (size_t)NET_IN * NET_IN;
    for (size_t i = 0; rc == 0 && i < plane; i++)
        for (int c = 0; c < 3; c++)
            io->host_in[(size_t)c * plane + i] = (float)small[i * 3 + (size_t)c] / 255.0f;
    ditto_free(small);
    if (rc < 0)
        return rc;
    DITTO_TRY(be->upload(be, io->img.data, io->host_in, 3 * plane * sizeof(float)));
    DITTO_TRY(ditto_appearance_forward(r->app, &io->ws, &io->img, &io->f_s, NULL));
    DittoMotionInfo info = { io->mo[0], io->mo[1], io->mo[2], io->mo[3], io->mo[4], io->mo[5], io->mo[6] };
    DITTO_TRY(ditto_motion_extractor_forward(r->mot, &io->ws, &io->img, &info, NULL));
    DITTO_TRY(ditto_arena_reset(&io->ws));
    DITTO_TRY(be->download(be, f_s, io->f_s.data, ditto_tensor_nbytes(&io->f_s)));
    float *dst[7] = { xi->pitch.v, xi->yaw.v, xi->roll.v, xi->t, xi->exp, &xi->scale, xi->kp };
    for (int k = 0; k < 7; k++)
        DITTO_TRY(be->download(be, dst[k], io->mo[k].data, ditto_tensor_nbytes(&io->mo[k])));
    xi->pitch.deg = xi->yaw.deg = xi->roll.deg = false;
    if (be->sync)
        DITTO_TRY(be->sync(be));
    return 0;
}

int ditto_registrar_warmup(DittoRegistrar *r)
{
    NetIO io;
    int64_t fs_shape[4];
    int rc = netio_init(r, &io, fs_shape);
    uint8_t *crop = rc < 0 ? NULL : ditto_calloc((size_t)CROP * CROP * 3, 1);
    float *f_s = crop ? ditto_malloc((size_t)(fs_shape[0] * fs_shape[1] * fs_shape[2] * fs_shape[3]) * sizeof(float)) : NULL;
    DittoXInfo xi;
    if (rc >= 0)
        rc = f_s ? run_nets(r, &io, crop, f_s, &xi) : DITTO_ERR_NOMEM;
    ditto_free(f_s);
    ditto_free(crop);
    netio_free(&io);
    return rc < 0 ? ditto_fail(&r->log, rc, "warm-up of the appearance and motion extractors: %s", ditto_strerror(rc)) : 0;
}

int ditto_registrar_run(DittoRegistrar *r, const DittoRegisterParams *p, const char *what, const uint8_t *frames, int n, int h, int w,
                        bool is_video, DittoAvatar **out)
{
    *out = NULL;
    if (!frames || n < 1 || h < 2 || w < 2)
        return ditto_fail(&r->log, DITTO_ERR_INVAL, "%s: no frames to register", what);
    NetIO io;
    int64_t fs_shape[4];
    int rc = netio_init(r, &io, fs_shape);
    if (rc < 0) {
        netio_free(&io);
        return ditto_fail(&r->log, rc, "%s: cannot allocate the extractor buffers", what);
    }
    int n_lmk = !r->det ? 0 : ditto_landmarker_has_203(r->lmk) ? DITTO_LMK203_N : DITTO_LMK106_N;
    DittoAvatar *a = NULL;
    DittoFrameReg *st = ditto_malloc(sizeof *st);
    uint8_t *crop = ditto_malloc((size_t)CROP * CROP * 3);
    if (!st || !crop || (rc = ditto_avatar_alloc(&a, n, h, w, fs_shape, n_lmk)) < 0) {
        rc = ditto_fail(&r->log, rc < 0 ? rc : DITTO_ERR_NOMEM, "%s: out of memory for %d frames", what, n);
        goto done;
    }
    const size_t frame_bytes = (size_t)h * (size_t)w * 3;
    memcpy(a->img_rgb, frames, frame_bytes * (size_t)n);
    const int64_t fs_numel = ditto_avatar_fs_numel(a);
    for (int i = 0; i < n; i++) {
        if ((rc = ditto_registrar_frame(r, p, what, frames + frame_bytes * (size_t)i, h, w, i, st, crop)) < 0)
            goto done;
        if ((rc = run_nets(r, &io, crop, a->f_s + fs_numel * i, &a->x_s_info[i])) < 0) {
            ditto_fail(&r->log, rc, "%s: frame %d: the extractors failed", what, i);
            goto done;
        }
        memcpy(a->m_c2o + 9 * i, st->M_c2o, sizeof st->M_c2o);
        memcpy(a->eye_open + 2 * i, st->eye_open, sizeof st->eye_open);
        memcpy(a->eye_ball + 6 * i, st->eye_ball, sizeof st->eye_ball);
        if (n_lmk)
            memcpy(a->lmk + (size_t)2 * n_lmk * i, n_lmk == DITTO_LMK203_N ? st->lmk203 : st->lmk106, sizeof(float) * 2 * (size_t)n_lmk);
        if (i == 0 && st->detected) {
            a->has_box = true;
            const float b[5] = { st->box.x1, st->box.y1, st->box.x2, st->box.y2, st->box.score };
            memcpy(a->face_box, b, sizeof b);
        }
    }
    /* sc from raw frame 0; kp_cond later takes the smoothed frame 0 (defect 8.17) */
    memcpy(a->sc, a->x_s_info[0].kp, sizeof a->sc);
    if (n > 1 && p->smooth_k > 1) {
        DittoXInfo *sm = ditto_malloc((size_t)n * sizeof *sm);
        if (!sm) {
            rc = DITTO_ERR_NOMEM;
            goto done;
        }
        rc = ditto_xinfo_smooth(a->x_s_info, n, p->smooth_k, sm);
        if (rc == 0)
            memcpy(a->x_s_info, sm, (size_t)n * sizeof *sm);
        ditto_free(sm);
        if (rc < 0) {
            ditto_fail(&r->log, rc, "%s: smoothing x_s_info failed", what);
            goto done;
        }
    }
    if ((rc = ditto_avatar_kv_set_str(a, "format", "ditto.avatar")) < 0 || (rc = ditto_avatar_kv_set_str(a, "source.type", is_video ? "video" : "image")) < 0 ||
        (rc = ditto_avatar_kv_set_str(a, "landmarks", n_lmk == DITTO_LMK203_N ? "203" : n_lmk ? "106" : "none")) < 0 ||
        (rc = ditto_avatar_kv_set_str(a, "mesh", !r->lmk || !ditto_landmarker_has_mesh(r->lmk) ? "none"
                                                 : ditto_landmarker_has_blaze(r->lmk)           ? "blazeface+facemesh"
                                                                                                : "facemesh on the whole crop")) < 0 ||
        (rc = ditto_avatar_kv_set_int(a, "synthetic", r->synthetic ? 1 : 0)) < 0 || (rc = ditto_avatar_kv_set_int(a, "options.max_size", p->max_size)) < 0 ||
        (rc = ditto_avatar_kv_set_int(a, "options.n_frames", p->n_frames)) < 0 || (rc = ditto_avatar_kv_set_float(a, "options.crop_scale", p->crop_scale)) < 0 ||
        (rc = ditto_avatar_kv_set_float(a, "options.crop_vx", p->crop_vx)) < 0 || (rc = ditto_avatar_kv_set_float(a, "options.crop_vy", p->crop_vy)) < 0 ||
        (rc = ditto_avatar_kv_set_int(a, "options.rotation", p->crop_rot)) < 0 || (rc = ditto_avatar_kv_set_int(a, "options.smooth_k", p->smooth_k)) < 0) {
        ditto_fail(&r->log, rc, "%s: cannot record the metadata", what);
        goto done;
    }
    *out = a;
    a = NULL;
done:
    ditto_avatar_free(&a);
    ditto_free(st);
    ditto_free(crop);
    netio_free(&io);
    return rc;
}

/* ---- files ----------------------------------------------------------------------------------------------- */

/* Apply the max_size rule to n frames (INTER_LINEAR); *out is frames itself when nothing changes. */
static int source_resize(DittoRegistrar *r, const char *path, const uint8_t *frames, int n, int h, int w, int max_size, uint8_t **out, int *oh,
                         int *ow)
{
    *out = (uint8_t *)frames;
    if (!ditto_source_dims(h, w, max_size, oh, ow))
        return 0;
    if (*oh < 2 || *ow < 2)
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: the frame (%dx%d) is too small", path, w, h);
    uint8_t *dst = ditto_malloc((size_t)n * (size_t)*oh * (size_t)*ow * 3);
    if (!dst)
        return ditto_fail(&r->log, DITTO_ERR_NOMEM, "%s: out of memory resizing %d frames", path, n);
    for (int i = 0; i < n; i++) {
        DittoTensor x = ditto_tensor((void *)(frames + (size_t)i * h * w * 3), DITTO_U8, 3, (int64_t[]){ h, w, 3 });
        DittoTensor y = ditto_tensor(dst + (size_t)i * *oh * *ow * 3, DITTO_U8, 3, (int64_t[]){ *oh, *ow, 3 });
        int rc = ditto_op_resize_bilinear(r->cpu, &x, &y);
        if (rc < 0) {
            ditto_free(dst);
            return rc;
        }
    }
    *out = dst;
    return 0;
}

int ditto_registrar_run_file(DittoRegistrar *r, const DittoRegisterParams *p, const char *path, DittoAvatar **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ditto_fail(&r->log, DITTO_ERR_NOENT, "%s: cannot open the avatar source: %s", path, strerror(errno));
    uint8_t head[16] = { 0 };
    size_t nh = fread(head, 1, sizeof head, f);
    fclose(f);
    bool is_image = ditto_image_sniff(head, nh) != DITTO_IMAGE_UNKNOWN;

    DittoImage img = { 0 };
    DittoVideo vid = { 0 };
    const uint8_t *frames;
    int n, h, w;
    double fps = 0;
    int rc;
    if (is_image) {
        if ((rc = ditto_image_load(path, &img, &r->log)) < 0)
            return rc;
        frames = img.data, n = 1, h = img.height, w = img.width;
    } else {
        if ((rc = ditto_video_load(path, p->n_frames > 0 ? p->n_frames : 0, &vid, &r->log)) < 0)
            return rc;
        if (vid.n > (1 << 20)) {
            ditto_video_free(&vid);
            return ditto_fail(&r->log, DITTO_ERR_RANGE, "%s: too many frames (%lld); limit them with --n-frames", path, (long long)vid.n);
        }
        frames = vid.frames, n = (int)vid.n, h = vid.height, w = vid.width, fps = vid.fps;
    }
    uint8_t *rs = NULL;
    int rh = h, rw = w;
    rc = source_resize(r, path, frames, n, h, w, p->max_size, &rs, &rh, &rw);
    if (rc == 0)
        rc = ditto_registrar_run(r, p, path, rs, n, rh, rw, !is_image, out);
    if (rs != frames)
        ditto_free(rs);
    ditto_image_free(&img);
    ditto_video_free(&vid);
    if (rc < 0)
        return rc;
    DittoAvatar *a = *out;
    char hex[65];
    if ((rc = ditto_file_sha256(path, hex, &r->log)) < 0 || (rc = ditto_avatar_kv_set_str(a, "source.path", path)) < 0 ||
        (rc = ditto_avatar_kv_set_str(a, "source.sha256", hex)) < 0 || (rc = ditto_avatar_kv_set_int(a, "source.width", w)) < 0 ||
        (rc = ditto_avatar_kv_set_int(a, "source.height", h)) < 0 || (!is_image && (rc = ditto_avatar_kv_set_float(a, "fps", fps)) < 0)) {
        ditto_avatar_free(out);
        return rc;
    }
    return 0;
}

int ditto_registrar_describe(DittoRegistrar *r, DittoAvatar *a)
{
    char key[64], hex[65];
    int rc;
    for (int i = 0; i < DITTO_AUX_COUNT; i++) {
        if (!r->paths[i])
            continue;
        const char *b = strrchr(r->paths[i], '/');
        snprintf(key, sizeof key, "model.%s", role_names[i]);
        DITTO_TRY(ditto_avatar_kv_set_str(a, key, b ? b + 1 : r->paths[i]));
        DITTO_TRY(ditto_file_sha256(r->paths[i], hex, &r->log));
        snprintf(key, sizeof key, "model.%s.sha256", role_names[i]);
        DITTO_TRY(ditto_avatar_kv_set_str(a, key, hex));
    }
    const char *nets[2][2] = { { "appearance_extractor", r->app_path }, { "motion_extractor", r->mot_path } };
    for (int i = 0; i < 2; i++) {
        snprintf(key, sizeof key, "model.%s", nets[i][0]);
        if (!nets[i][1]) {
            DITTO_TRY(ditto_avatar_kv_set_str(a, key, r->synthetic == 1 ? "synthetic (official size)" : r->synthetic == 3 ? "synthetic (tiny)" : "synthetic (small)"));
            continue;
        }
        const char *b = strrchr(nets[i][1], '/');
        DITTO_TRY(ditto_avatar_kv_set_str(a, key, b ? b + 1 : nets[i][1]));
        if ((rc = ditto_file_sha256(nets[i][1], hex, &r->log)) < 0)
            return rc;
        snprintf(key, sizeof key, "model.%s.sha256", nets[i][0]);
        DITTO_TRY(ditto_avatar_kv_set_str(a, key, hex));
    }
    return 0;
}
