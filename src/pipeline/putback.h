/*
 * Paste-back (ditto-architecture.md 3.10): blend the rendered 512x512 face
 * into the full avatar frame.
 *
 *   mask   = get_mask(512, 512, 0.9, 0.9): 1 inside the centred 460x460
 *            box, linear ramps over the 26-pixel border bands, round
 *            corners 1 - min(1, hypot(a, b)); float64 values of NumPy's
 *            linspace, stored float32 (ditto_putback_mask)
 *   mask_w = clip(warpAffine(mask, M_c2o[:2], (W,H), INTER_LINEAR), 0, 1)
 *   img_w  = warpAffine(render, M_c2o[:2], (W,H), INTER_LINEAR)
 *   out    = (uint8) trunc(clamp(mask_w*img_w + (1 - mask_w)*frame, 0, 255)),
 *            evaluated as upstream's -ffast-math build contracts it:
 *            fma(mask_w, img_w, (1 - mask_w)*frame) (see putback.c)
 *
 * Both warps go through ditto_op_warp_affine (OpenCV's fixed-point
 * coordinates, constant-0 border), so mask_w is 0 wherever the crop does
 * not reach and the output equals the frame there. The work is limited to
 * a box that contains every pixel with mask_w > 0 (ditto_putback_box); the
 * frame outside it is copied unchanged (or left alone when out is frame).
 *
 * The warped mask is cached per matrix: an image avatar (one M_c2o for the
 * whole clip) warps it once.
 *
 * Tensors live on the putback's backend: the warps and the blend
 * (ditto_op_mask_blend, core/bt601.h) run there, with the same arithmetic
 * on the CPU and the GPU.
 */
#ifndef DITTO_PIPELINE_PUTBACK_H
#define DITTO_PIPELINE_PUTBACK_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/tensor.h"

#define DITTO_PUTBACK_CROP 512

/* The blend mask, DITTO_PUTBACK_CROP^2 float32 values, row-major. */
void ditto_putback_mask(float *mask);

/*
 * Frame rows [y0, y1) and columns [x0, x1) outside which mask_w is 0 for
 * this M_c2o and a W x H frame (a few pixels larger than the exact
 * bounding box of mask_w > 0; empty (x0 == x1 or y0 == y1) when the crop
 * lies outside the frame).
 */
typedef struct DittoPutbackBox {
    int64_t y0, y1, x0, x1;
} DittoPutbackBox;
void ditto_putback_box(const float M_c2o[9], int64_t W, int64_t H, DittoPutbackBox *box);

typedef struct DittoPutback DittoPutback;

/*
 * Set up for frames of at most max_w x max_h pixels on be: uploads the mask
 * and allocates the warp scratch once (about 16 bytes per frame pixel), so
 * nothing is allocated per frame. log may be NULL. Returns 0,
 * DITTO_ERR_INVAL or DITTO_ERR_NOMEM.
 */
int ditto_putback_open(DittoPutback **out, DittoBackend *be, int64_t max_w, int64_t max_h, const DittoLogger *log);
/* The same for ditto_putback_yuv alone: the mask, no warp scratch. */
int ditto_putback_open_fused(DittoPutback **out, DittoBackend *be, int64_t max_w, int64_t max_h, const DittoLogger *log);
/* Accepts NULL and *pb == NULL; sets *pb to NULL. */
void ditto_putback_close(DittoPutback **pb);

/*
 * Paste B renders into B frames.
 *   frame   (H,W,3) or (B,H,W,3) uint8 RGB, contiguous
 *   render  (512,512,3) or (B,512,512,3) float32 RGB in 0..255 (values
 *           outside are allowed: the blend clamps), contiguous
 *   M_c2o   B 3x3 float32 matrices (crop -> frame), B*9 values
 *   out     same shape as frame, uint8; may be frame itself (in place)
 *   box     B boxes that were blended (ditto_putback_box), or NULL
 * W, H at most the open sizes. Returns 0, DITTO_ERR_SHAPE / DITTO_ERR_INVAL
 * (logged), or an error of the warp or the blend.
 */
int ditto_putback_run(DittoPutback *pb, const DittoTensor *frame, const DittoTensor *render, const float *M_c2o, DittoTensor *out,
                      DittoPutbackBox *box);

/*
 * Paste-back and yuv420p in one pass (the op paste_yuv): the bytes of
 * ditto_putback_run on 255 * render and ditto_op_rgb_to_yuv420 in turn.
 *   frame   (H,W,3) uint8 shared by every render, or (B,H,W,3)
 *   render  (B,3,512,512) float32 or float16 in 0..1, the decoder's output
 *   M_c2o   B 3x3 float32 matrices (crop -> frame)
 *   rgb     (B,H,W,3) uint8 or NULL; y (B,H,W), u, v (B,ceil(H/2),ceil(W/2))
 *           uint8: each contiguous but for its batch stride
 *   box_only  write only the 2x2 blocks that meet each frame's box: the
 *           outputs hold the same frame's bytes elsewhere already (an image
 *           avatar's frames after a first full pass with the same matrix)
 *   box     B boxes that were blended, or NULL
 */
int ditto_putback_yuv(DittoPutback *pb, const DittoTensor *frame, const DittoTensor *render, const float *M_c2o, DittoTensor *rgb, DittoTensor *y,
                      DittoTensor *u, DittoTensor *v, bool box_only, DittoPutbackBox *box);

#endif
