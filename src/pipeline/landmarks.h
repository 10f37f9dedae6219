/*
 * Face landmarks for avatar registration (ditto-architecture.md 4.2 steps
 * 2-4 and 6, 4.4, 7.2, defects 8.9-8.11).
 *
 * 106 points (insightface 2d106det and stand-ins with the same point
 * layout): a square crop of side box_scale * max(box w, h) around the
 * detector box centre, M = [[s,0,size/2-s*cx],[0,s,size/2-s*cy]],
 * cv2.warpAffine (INTER_LINEAR, border 0), the model, then the points are
 * mapped back through invertAffineTransform(M) in double precision.
 *   2d106det / landmark106.onnx: 192x192, box_scale 1.5, raw BGR 0..255
 *     (the RGB crop is channel-swapped: defect 8.10), output fc1 (1,212)
 *     in [-1,1]: (p+1)*96.
 *   pfld106_lite.onnx (the stand-in in ../shared/models/landmark106):
 *     112x112, BGR/255 as its author's script feeds it, output (1,212) in
 *     [0,1] of the crop: p*112. Its points follow the insightface 106
 *     layout (checked on ../shared/media/image.png: 33..42 left eye, 87..96
 *     right eye, 52/61 mouth corners), so the 106-point anchors of
 *     crop_image apply unchanged. It was trained on tighter crops than
 *     2d106det: with box_scale 1.5 its points collapse, with 1.2 they sit
 *     on the face, so its entry uses 1.2.
 *
 * 203 points (LivePortrait landmark203.onnx): crop_image(224, scale 1.5,
 * vy -0.1, rotation), input RGB/255 (1,3,224,224); the points are output
 * 'landmarks' when the graph has that name, else output index 2 of the
 * three-output original (the ONNX wrapper's index 0 is the wrong tensor:
 * defect 8.9), times 224, mapped through the crop's M_c2o.
 *
 * When no 203-point model is available the final 512 crop is computed from
 * the 106 points: crop_image takes either set (src/pipeline/crop.h picks
 * the eye and lip anchors by the point count). The crop then differs from
 * a 203-point one by the landmark sets' different extents; Ditto itself
 * always uses 203 points.
 *
 * 478-point mesh (4.4, ONNX path): BlazeFace short-range on the 512 crop
 * resized to 128 (x/127.5-1), 896 SSD anchors, sigmoid scores >= 0.5,
 * weighted NMS at IoU 0.3; the best face gives a rotated ROI (1.5 x the
 * box side, angle from the two eye keypoints) that is warped to 256x256
 * (an affine warp: the ROI is a rotated square, which is what the
 * upstream perspective warp amounts to) and fed to FaceMesh (RGB/255);
 * its 478 x (x,y,z) points in 256-px units are projected back and
 * normalised by the crop size. Both NHWC (Ditto's files) and NCHW (the
 * stand-ins) inputs are accepted, and fp16 inputs (the FaceMesh stand-in)
 * are fed as fp16. With a FaceMesh model but no BlazeFace model, FaceMesh
 * runs directly on the 512 crop resized to 256 (ROI = the whole crop);
 * the face then fills less of its input than it was trained on, so the
 * eye attributes are rougher.
 *
 * Eye attributes (4.4) from the 478 normalised points: eye_open (2) and
 * eye_ball (6, [Lx, Rx, Ly, Ry, Lz, Rz]).
 */
#ifndef DITTO_PIPELINE_LANDMARKS_H
#define DITTO_PIPELINE_LANDMARKS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "pipeline/face_detect.h"

#define DITTO_LMK106_N 106
#define DITTO_LMK203_N 203
#define DITTO_MESH_N 478

/* ---- 106 points -------------------------------------------------------------- */

typedef enum DittoLmkInput {
    DITTO_LMK_IN_BGR_RAW = 0,   /* B,G,R planes, 0..255 */
    DITTO_LMK_IN_BGR_UNIT,      /* B,G,R planes, /255 */
    DITTO_LMK_IN_RGB_UNIT,      /* R,G,B planes, /255 */
} DittoLmkInput;

typedef enum DittoLmkOutput {
    DITTO_LMK_OUT_PM1 = 0,      /* [-1,1]: (p + 1) * size/2 */
    DITTO_LMK_OUT_UNIT,         /* [0,1]: p * size */
} DittoLmkOutput;

typedef struct DittoLmk106Spec {
    const char *file;           /* base name the entry applies to */
    const char *input;          /* NULL: the first input */
    const char *output;         /* NULL: the first output */
    int size;                   /* crop side */
    double box_scale;           /* crop side = box_scale * max(box w, h) */
    DittoLmkInput in;
    DittoLmkOutput out;
} DittoLmk106Spec;

/* Entry for a model path (base name); unknown names get the 2d106det conventions. */
const DittoLmk106Spec *ditto_lmk106_spec_find(const char *path);

/* M (2x3, double) of the 106-point crop around a detector box. */
void ditto_lmk106_matrix(const DittoFaceBox *box, int size, double box_scale, double M[6]);

/* NCHW float blob (3 * size * size) of a size x size RGB crop. */
void ditto_lmk_blob(const uint8_t *rgb, int size, DittoLmkInput kind, float *blob);

/* Raw output (212) -> 106 (x,y) original-image points through invertAffineTransform(M). */
void ditto_lmk106_decode(const DittoLmk106Spec *sp, const float *raw, const double M[6], float pts[2 * DITTO_LMK106_N]);

/* Raw output (406, [0,1] of the 224 crop) -> 203 original-image points through M_c2o. */
void ditto_lmk203_decode(const float *raw, int size, const float M_c2o[9], float pts[2 * DITTO_LMK203_N]);

/* Axis-aligned bounding box of n points (score set to 1, keypoints 0). */
void ditto_lmk_bbox(const float *pts, int n, DittoFaceBox *box);

/* ---- BlazeFace + FaceMesh ------------------------------------------------------ */

#define DITTO_BLAZE_SIZE 128
#define DITTO_BLAZE_ANCHORS 896
#define DITTO_MESH_SIZE 256

/* The 896 anchor centres (x, y), normalised: 16x16x2 (stride 8), then 8x8x6 (stride 16). */
void ditto_blaze_anchors(float anchors[2 * DITTO_BLAZE_ANCHORS]);

typedef struct DittoBlazeDet {
    float x1, y1, x2, y2;       /* normalised to the detector input */
    float kps[12];              /* 6 keypoints (x, y), normalised; 0/1 are the eyes */
    float score;
} DittoBlazeDet;

/*
 * Decode raw outputs (regressors 896x16, classificators 896) into the
 * detections with sigmoid(clip(raw,-50,100)) >= thresh; returns their count
 * (at most 896), sorted by score descending.
 */
int ditto_blaze_decode(const float *regressors, const float *classificators, const float anchors[2 * DITTO_BLAZE_ANCHORS], float thresh,
                       DittoBlazeDet *out);
/* Weighted NMS at IoU > iou over score-sorted detections, in place; returns the count. */
int ditto_blaze_wnms(DittoBlazeDet *d, int n, float iou);

typedef struct DittoMeshRoi {
    double cx, cy, w, h;        /* pixels of the image BlazeFace ran on */
    double rot;                 /* radians, in [-pi, pi) */
} DittoMeshRoi;

/* ROI of a detection on a W x H image (1.5 x the larger box side, eye-line angle). */
void ditto_mesh_roi(const DittoBlazeDet *d, int W, int H, DittoMeshRoi *roi);
/* 2x3 matrix mapping the image onto the size x size ROI crop. */
void ditto_mesh_roi_matrix(const DittoMeshRoi *roi, int size, double M[6]);
/* FaceMesh output (478 x 3 in size-px units of the ROI crop) -> points normalised by (W, H, W). */
void ditto_mesh_project(const float *raw, const DittoMeshRoi *roi, int size, int W, int H, float out[3 * DITTO_MESH_N]);

/* ---- eye attributes ---------------------------------------------------------- */

/* eye_open (L, R) and eye_ball (Lx, Rx, Ly, Ry, Lz, Rz) from 478 normalised (x,y,z) points. */
void ditto_eye_attrs(const float lmk[3 * DITTO_MESH_N], float eye_open[2], float eye_ball[6]);

/* ---- runner -------------------------------------------------------------------- */

typedef struct DittoLandmarkerPaths {
    const char *lmk106;         /* required */
    const char *lmk203;         /* optional */
    const char *blaze;          /* optional (needs mesh) */
    const char *mesh;           /* optional */
} DittoLandmarkerPaths;

typedef struct DittoLandmarker DittoLandmarker;

/* Load the models (cpu: a CPU backend for the image ops and the executor). */
int ditto_landmarker_open(DittoLandmarker **out, const DittoLandmarkerPaths *paths, DittoBackend *cpu, const DittoLogger *log);
void ditto_landmarker_close(DittoLandmarker **l);
bool ditto_landmarker_has_203(const DittoLandmarker *l);
bool ditto_landmarker_has_mesh(const DittoLandmarker *l);
bool ditto_landmarker_has_blaze(const DittoLandmarker *l);

/* 106 points of an RGB frame (h x w x 3) from a detector box. */
int ditto_landmarker_106(DittoLandmarker *l, const uint8_t *rgb, int h, int w, const DittoFaceBox *box, float pts[2 * DITTO_LMK106_N]);

/* 203 points from a 224 crop_image around seed points (106 or 203 of them). */
int ditto_landmarker_203(DittoLandmarker *l, const uint8_t *rgb, int h, int w, const float *seed, int n_seed, float pts[2 * DITTO_LMK203_N]);

/*
 * 478 normalised points of a face crop (dsize x dsize x 3 RGB). *found = 0
 * when BlazeFace finds no face in the crop (the caller names the frame).
 */
int ditto_landmarker_mesh(DittoLandmarker *l, const uint8_t *crop, int dsize, float lmk[3 * DITTO_MESH_N], int *found);

#endif
