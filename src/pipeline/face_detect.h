/*
 * Face detection for avatar registration (ditto-architecture.md 4.2 step 1):
 * SCRFD (insightface det_10g and the rest of its family) run through the
 * ONNX executor, plus the small host-side pieces around it.
 *
 *   letterbox   the RGB frame is resized (cv2.resize INTER_LINEAR) so that
 *               it fits the model's square input, keeping its aspect, and
 *               pasted at the top-left of a black square; det_scale =
 *               new_h / h maps detections back.
 *   blob        cv2.dnn.blobFromImage(img, 1/128, mean 127.5, swapRB=True)
 *               on an RGB image: the network sees BGR (defect 8.10, kept for
 *               parity), (x - 127.5) / 128, NCHW float32.
 *   decode      strides 8/16/32, two anchors per cell, anchor centre
 *               (col*s, row*s); box = centre -/+ distances*s, 5 keypoints =
 *               centre + offsets*s; scores >= 0.5 kept; all divided by
 *               det_scale.
 *   NMS         sort by score, greedy IoU 0.4 with the "+1" pixel-area
 *               convention (x2-x1+1)(y2-y1+1).
 *   pick        Ditto keeps the box of largest (x2-x1)(y2-y1) (no +1).
 *
 * The model's input size is taken from its input shape when fixed (the
 * 640x640 stand-ins); det_10g has a dynamic H/W and Ditto feeds 512.
 *
 * This header also holds DittoAuxNet, the small adapter every auxiliary
 * ONNX model of registration (detector, landmarks, mesh) runs through.
 */
#ifndef DITTO_PIPELINE_FACE_DETECT_H
#define DITTO_PIPELINE_FACE_DETECT_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/tensor.h"
#include "ditto/ditto_types.h"

/* ---- auxiliary ONNX models -------------------------------------------------- */

typedef struct DittoAuxNet DittoAuxNet;

/*
 * Load an .onnx file for the executor on be (NULL: a private CPU backend).
 * A missing, unreadable or truncated file is a one-line error naming it.
 */
int ditto_aux_net_open(DittoAuxNet **out, const char *path, DittoBackend *be, const DittoLogger *log);
void ditto_aux_net_close(DittoAuxNet **n);
const char *ditto_aux_net_path(const DittoAuxNet *n);

/* Shape and dtype of graph input `name` (NULL: the first non-constant input); -1 marks a dynamic dim. */
int ditto_aux_net_input(const DittoAuxNet *n, const char *name, int *ndim, int64_t shape[DITTO_MAX_DIMS], DittoDType *dtype);
/* Number of graph outputs; name of output i. */
int ditto_aux_net_n_outputs(const DittoAuxNet *n);
const char *ditto_aux_net_output_name(const DittoAuxNet *n, int i);
/* Index of output `name`, or -1. */
int ditto_aux_net_output_index(const DittoAuxNet *n, const char *name);

/*
 * Run the model on one float32 host input (converted to the input's dtype,
 * e.g. fp16 for the FaceMesh stand-in) and copy outputs outs[k] (graph
 * output indices) to host float32. out_numel[k] is the element count each
 * caller buffer expects; a model whose output has another size fails
 * with DITTO_ERR_SHAPE naming the output.
 */
int ditto_aux_net_run(DittoAuxNet *n, const char *input, const float *data, int ndim, const int64_t *shape, int n_out, const int *outs,
                      float *const *dst, const int64_t *out_numel);

/* ---- SCRFD ---------------------------------------------------------------- */

typedef struct DittoFaceBox {
    float x1, y1, x2, y2;   /* original-image pixels */
    float score;
    float kps[10];          /* 5 keypoints (x, y): eyes, nose, mouth corners */
} DittoFaceBox;

/*
 * How to call one detector file: ONNX names and output layout. Output k
 * of the 9 is stride (8,16,32)[k%3] of scores (k<3), boxes (3..5) or
 * keypoints (6..8).
 */
typedef struct DittoDetSpec {
    const char *file;          /* base name the entry applies to */
    const char *input;         /* NULL: the first graph input */
    const char *outputs[9];    /* NULL: positional (outputs in graph order) */
    bool batch_dim;            /* outputs are (1, anchors, C) rather than (anchors, C); recorded for
                                  reference: outputs are checked by element count, so both decode */
    int default_size;          /* input side when the model's H/W are dynamic */
} DittoDetSpec;

/*
 * The entry for a model path (matched on its base name): det_10g.onnx,
 * insightface_det.onnx, scrfd_500m_bnkps.onnx, scrfd_2.5g_bnkps_shape640x640.onnx.
 * Unknown names get a generic entry that is resolved from the graph
 * (score_8.. names when present, else positional; batch axis from the rank).
 */
const DittoDetSpec *ditto_det_spec_find(const char *path);

#define DITTO_DET_THRESH 0.5f
#define DITTO_DET_NMS_IOU 0.4f

/* Letterbox geometry of an h x w frame into a size x size input. */
void ditto_det_letterbox_dims(int h, int w, int size, int *new_h, int *new_w, double *det_scale);

/*
 * Blob of the size x size letterboxed RGB image: channel order swapped to
 * BGR, (x - 127.5) / 128, NCHW float32 (3 * size * size values).
 */
void ditto_det_blob(const uint8_t *rgb, int size, float *blob);

/* Anchors (= output rows) of one stride at input side `size`: (size/s)^2 * 2. */
int64_t ditto_det_anchor_count(int size, int stride);

/*
 * Decode the raw outputs of the three strides (score[k] (anchors), box[k]
 * (anchors x 4), kps[k] (anchors x 10), k = stride 8, 16, 32; kps may be
 * NULL) into at most cap candidates with score >= thresh, in
 * original-image pixels. Returns the number written (candidates past cap
 * are dropped with the lowest scores first), sorted by score descending.
 */
int ditto_det_decode(const float *const score[3], const float *const box[3], const float *const kps[3], int size, float thresh, double det_scale,
                     DittoFaceBox *out, int cap);

/* Greedy NMS in place over score-sorted boxes; returns the number kept (in order). */
int ditto_det_nms(DittoFaceBox *b, int n, float iou);

/* Index of the largest (x2-x1)(y2-y1) box (first on ties), -1 when n == 0. */
int ditto_det_pick_largest(const DittoFaceBox *b, int n);

/* ---- the detector -------------------------------------------------------- */

typedef struct DittoFaceDetector DittoFaceDetector;

/* Load the detector model; its spec comes from ditto_det_spec_find(path). */
int ditto_face_detector_open(DittoFaceDetector **out, const char *path, DittoBackend *be, const DittoLogger *log);
void ditto_face_detector_close(DittoFaceDetector **d);
int ditto_face_detector_input_size(const DittoFaceDetector *d);

/*
 * Detect the face of an RGB uint8 frame (h x w x 3, host memory).
 * *found is set to 0 when no box passes the threshold (not an error here:
 * the caller names the frame); else box holds the largest face after NMS.
 * all/n_all (may be NULL) receive the boxes kept by NMS (at most cap_all).
 */
int ditto_face_detect(DittoFaceDetector *d, const uint8_t *rgb, int h, int w, DittoFaceBox *box, int *found, DittoFaceBox *all, int cap_all,
                      int *n_all);

#endif
