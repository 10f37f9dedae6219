/*
 * crop_image (ditto-architecture.md 4.3): from face landmarks to the
 * similarity transform of the square face crop, M_o2c (original -> crop)
 * and its inverse M_c2o, both 3x3 float32 row-major with last row (0,0,1),
 * and the crop itself through ditto_op_warp_affine (cv2.warpAffine,
 * INTER_LINEAR, constant-0 border).
 *
 * Numerics follow the stock NumPy 2 code (NEP 50, section 4.3 item 6):
 * landmarks are float32 and every array / scalar step stays float32; the
 * Python-float parameters (scale, vx_ratio, vy_ratio, cos and sin of the
 * angle) are rounded to float32 where they meet a float32 value; only the
 * angle itself (math.acos) is double. Reductions (means, the 2x2 matmul,
 * the vector norm) use plain sequential float32 sums, so a result can
 * differ from NumPy's BLAS-backed ones in the last bit; the fixture
 * tolerances (rel_l2 ~1e-6) cover that.
 *
 * Difference from upstream (defect 8.6): vx_ratio is applied (upstream
 * drops it, so it is always 0 there); with vx_ratio = 0 the result is the
 * stock one.
 */
#ifndef DITTO_PIPELINE_CROP_H
#define DITTO_PIPELINE_CROP_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/tensor.h"

typedef struct DittoCropParams {
    int dsize;          /* crop side in pixels */
    double scale;       /* box side = scale * landmark extent */
    double vx_ratio;    /* centre shift along the eye axis, in box sides */
    double vy_ratio;    /* centre shift along the eyes->lip axis, in box sides (negative: up) */
    bool do_rot;        /* rotate so that the eyes are level (flag_do_rot) */
} DittoCropParams;

/* The final avatar crop: dsize 512, scale 2.3 (crop_scale), vx 0, vy -0.125, rotation on. */
void ditto_crop_params_default(DittoCropParams *p);
/* The 224 crop fed to the 203-point landmark model: 224, 1.5, vx 0, vy -0.1, rotation on. */
void ditto_crop_params_lmk224(DittoCropParams *p);

/*
 * M_o2c and M_c2o (3x3 float32 each; either may be NULL) of the crop
 * around pts (npts x 2 float32 (x, y) pixels). npts must be 203 (the
 * LivePortrait set: eyes mean(P[0,6,12,18]) and mean(P[24,30,36,42]), lip
 * (P[48]+P[66])/2) or 106 (insightface 2d106: eyes mean(P[33,35,40,39]) and
 * mean(P[87,89,94,93]), lip (P[52]+P[61])/2). Returns 0, DITTO_ERR_INVAL
 * (NULL pts, dsize < 1, scale <= 0, or a point set of another size; logged
 * to log, which may be NULL) or DITTO_ERR_RANGE (non-finite landmarks, or a
 * degenerate box of size 0).
 */
int ditto_crop_matrix(const float *pts, int npts, const DittoCropParams *p, float M_o2c[9], float M_c2o[9], const DittoLogger *log);

/*
 * Map n points through the affine part of a 3x3 matrix, in float32 as
 * _transform_pts: out = pts @ M[:2,:2].T + M[:2,2]. out may be pts.
 */
void ditto_crop_transform_pts(const float *pts, int n, const float M[9], float *out);

/*
 * inv(M) of a 3x3 float32 matrix in float32 (LU with partial pivoting,
 * as np.linalg.inv). DITTO_ERR_RANGE when M is singular.
 */
int ditto_mat3_inverse_f32(const float M[9], float out[9]);

/*
 * img_crop = warpAffine(img, M_o2c[:2], (dsize, dsize), INTER_LINEAR),
 * constant-0 border. img (H,W,C) or (N,H,W,C) u8 or f32 on be; crop
 * (dsize,dsize,C) / (N,dsize,dsize,C) of the same dtype, allocated by the
 * caller. Errors from ditto_op_warp_affine.
 */
int ditto_crop_image(DittoBackend *be, const DittoTensor *img, const float M_o2c[9], DittoTensor *crop);

#endif
