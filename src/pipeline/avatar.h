/*
 * Avatar registration (ditto-architecture.md 4.1, 4.2, 4.4): a portrait
 * image or a video loop -> DittoAvatar (avatar_file.h), which `ditto bake`
 * writes as a .avatar file.
 *
 * Per frame:
 *   1. face box: SCRFD (face_detect.h) on the first frame (every frame of
 *      an image); no face is DITTO_ERR_NOFACE naming the file and frame
 *      (upstream crashes: defect 8.11);
 *   2. 106 landmarks from the box (landmarks.h);
 *   3. 203 landmarks from a 224 crop around the 106 points (first frame)
 *      or the previous frame's 203 points (later video frames: tracking,
 *      4.2 step 3), when a 203-point model is given;
 *   4. the 512 crop (crop.h: crop_scale 2.3, vy -0.125, rotation; vx is
 *      honoured, unlike upstream: defect 8.6) around the 203 points, or
 *      the 106 points without a 203-point model;
 *   5. eye_open / eye_ball from the 478-point mesh of the crop;
 *   6. the crop resized to 256 (INTER_AREA), /255, through the motion
 *      extractor (x_s_info) and the appearance extractor (f_s).
 * After all frames: sc = kp of frame 0, then x_s_info is smoothed over the
 * frames (k = 13, ditto_xinfo_smooth) when there is more than one.
 *
 * Tracking without a 203-point model: later video frames are not
 * detected again; their 106-point crop box is derived from the previous
 * frame's 106 points, calibrated on frame 0 (the offset and size of the
 * detector box relative to the points' bounding box), so frame 1 sees the
 * crop frame 0 saw.
 *
 * Synthetic mode (no detector): the crop is the largest centred square of
 * the frame, eye attributes are zero. It exists so that `ditto bake
 * --weights synthetic` runs without any model file; it is not a real
 * registration and the KV "synthetic" says so.
 *
 * The auxiliary ONNX models and every image op run on a CPU backend (they
 * are small and their inputs live in host memory); the two extractors run
 * on the backend given for the networks.
 */
#ifndef DITTO_PIPELINE_AVATAR_H
#define DITTO_PIPELINE_AVATAR_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "pipeline/avatar_file.h"
#include "pipeline/face_detect.h"
#include "pipeline/landmarks.h"

/* ---- options --------------------------------------------------------------------- */

typedef struct DittoRegisterParams {
    int max_size;           /* 1920: longer side limit of source frames (4.1) */
    int n_frames;           /* video frames to register; <= 0: all */
    double crop_scale;      /* 2.3 */
    double crop_vx;         /* 0 */
    double crop_vy;         /* -0.125 */
    bool crop_rot;          /* true */
    int smooth_k;           /* 13: x_s_info smoothing width for videos; <= 1: off */
} DittoRegisterParams;

void ditto_register_params_default(DittoRegisterParams *p);

/*
 * The max_size rule (4.1, check_resize): a longer side above max_size is
 * scaled to max_size and the other to round-half-even(short * max / long);
 * then both sides are floored to even numbers. Returns whether anything
 * changed (the frame is then resized with INTER_LINEAR).
 */
bool ditto_source_dims(int h, int w, int max_size, int *new_h, int *new_w);

/* ---- model files ------------------------------------------------------------------- */

typedef enum DittoAuxRole {
    DITTO_AUX_DETECTOR = 0,  /* det_10g.onnx (SCRFD) */
    DITTO_AUX_LMK106,        /* 2d106det.onnx */
    DITTO_AUX_LMK203,        /* landmark203.onnx */
    DITTO_AUX_BLAZE,         /* blaze_face.onnx */
    DITTO_AUX_MESH,          /* face_mesh.onnx */
    DITTO_AUX_COUNT
} DittoAuxRole;

const char *ditto_aux_role_name(DittoAuxRole role);   /* "detector", "landmark106", ... */

/*
 * Look for a role's file in a weights folder: the official ditto_pytorch
 * layout (aux_models/<name>), the ditto_onnx layout beside it
 * (../ditto_onnx/<name>: blaze_face.onnx and face_mesh.onnx exist only
 * there), the folder itself, and the stand-in layout of
 * ../shared/models (scrfd/, landmark106/, blazeface/, facemesh/).
 * Returns 1 and the path when found, 0 when not.
 */
int ditto_aux_find(const char *dir, DittoAuxRole role, char *path, size_t cap);

/* models/<official name>.pth, or <name>.pth in dir itself. */
int ditto_net_find(const char *dir, const char *file_name, char *path, size_t cap);

/* ---- registrar ------------------------------------------------------------------------- */

typedef struct DittoRegistrarConfig {
    const char *paths[DITTO_AUX_COUNT];   /* ONNX files; NULL: absent (detector and lmk106 required unless synthetic) */
    const char *appearance;               /* appearance_extractor.pth (NULL when synthetic) */
    const char *motion;                   /* motion_extractor.pth (NULL when synthetic) */
    int synthetic;                        /* 0: checkpoints; else a DittoSyntheticSize (1 official size, 2 small, 3 tiny) */
    DittoBackend *be;                     /* networks; NULL: the registrar's CPU backend */
    int threads;                          /* CPU threads; <= 0: all */
    DittoLogger log;
} DittoRegistrarConfig;

typedef struct DittoRegistrar DittoRegistrar;

int ditto_registrar_open(DittoRegistrar **out, const DittoRegistrarConfig *cfg);
void ditto_registrar_close(DittoRegistrar **r);
/* Whether registration has a detector (false: synthetic centred crops). */
bool ditto_registrar_has_detector(const DittoRegistrar *r);
/* Shape (C, D, H, W) of one frame's appearance features f_s, as registration makes them. */
int ditto_registrar_fs_shape(const DittoRegistrar *r, int64_t fs[4]);

/*
 * Run the appearance and motion extractors once on a blank crop, so that a
 * GPU backend makes their plans before the first avatar (0.1 s on the H200).
 */
int ditto_registrar_warmup(DittoRegistrar *r);

/* What registration found in one frame (for tests and diagnostics). */
typedef struct DittoFrameReg {
    DittoFaceBox box;                 /* detector box (frame 0, images) or the tracked box */
    bool detected;                    /* box came from the detector in this frame */
    float lmk106[2 * DITTO_LMK106_N];
    float lmk203[2 * DITTO_LMK203_N];
    bool has_106, has_203;
    float M_o2c[9], M_c2o[9];         /* the 512 crop */
    float lmk478[3 * DITTO_MESH_N];   /* normalised to the crop */
    bool has_mesh;
    float eye_open[2], eye_ball[6];
} DittoFrameReg;

/*
 * Steps 1-5 for frame `index` of a source (rgb h x w x 3): fills st and,
 * when crop512 is not NULL, the 512 x 512 x 3 crop. Frame 0 resets the
 * tracking state. `what` names the source in messages.
 */
int ditto_registrar_frame(DittoRegistrar *r, const DittoRegisterParams *p, const char *what, const uint8_t *rgb, int h, int w, int index,
                          DittoFrameReg *st, uint8_t *crop512);

/*
 * Register n decoded frames (n x h x w x 3, already through the max_size
 * rule) into a new avatar. `what` names the source in messages.
 */
int ditto_registrar_run(DittoRegistrar *r, const DittoRegisterParams *p, const char *what, const uint8_t *frames, int n, int h, int w,
                        bool is_video, DittoAvatar **out);

/*
 * Load an image or a video (sniffed by content: an image format by its
 * first bytes, else FFmpeg's video probe), apply the max_size rule and
 * register it. Records source.* and options.* metadata.
 */
int ditto_registrar_run_file(DittoRegistrar *r, const DittoRegisterParams *p, const char *path, DittoAvatar **out);

/*
 * Record the model files in a's metadata: model.<role> and
 * model.<role>.sha256 for every file the registrar loaded.
 */
int ditto_registrar_describe(DittoRegistrar *r, DittoAvatar *a);

#endif
