/*
 * The op contract shared by every backend: one entry per operation, a params
 * struct per op, and front-end functions ditto_op_*() that check shapes and
 * dtypes (logging a clear error through the backend's logger) before calling
 * the backend's function pointer. A NULL pointer means "not supported by this
 * backend" and the front end returns DITTO_ERR_UNSUPPORTED; there is no
 * silent fallback.
 *
 * Conventions: shapes are PyTorch order (N,C,H,W / N,C,D,H,W); the caller
 * allocates every output with the shape the op defines (helpers below compute
 * it). Float ops take float32 on the CPU backend; other backends may accept
 * f16 storage as documented by the backend. Unless stated, inputs and outputs
 * must be contiguous. Outputs never alias inputs unless stated.
 */
#ifndef DITTO_OPS_OPS_H
#define DITTO_OPS_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/half.h"   /* ditto_tf32_round */
#include "core/tensor.h"

struct DittoBackend;

typedef enum DittoOp {
#define X(E, f) DITTO_OP_##E,
#include "ops/ops.def"
#undef X
    DITTO_OP_COUNT
} DittoOp;

const char *ditto_op_name(DittoOp op);

/* ---- element-wise ---- */

typedef enum DittoUnaryKind {
    DITTO_UNARY_IDENTITY = 0,
    DITTO_UNARY_RELU,
    DITTO_UNARY_LEAKY_RELU,  /* alpha = negative slope */
    DITTO_UNARY_GELU,        /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    DITTO_UNARY_SILU,
    DITTO_UNARY_SIGMOID,
    DITTO_UNARY_TANH,
    DITTO_UNARY_MISH,        /* x tanh(softplus(x)) */
    DITTO_UNARY_SOFTPLUS,
    DITTO_UNARY_EXP,
    DITTO_UNARY_LOG,
    DITTO_UNARY_SQRT,
    DITTO_UNARY_RSQRT,
    DITTO_UNARY_RECIP,
    DITTO_UNARY_NEG,
    DITTO_UNARY_ABS,
    DITTO_UNARY_ERF,
    DITTO_UNARY_SIN,
    DITTO_UNARY_COS,
    DITTO_UNARY_CLIP,        /* clamp to [alpha, beta] */
    DITTO_UNARY_AFFINE,      /* alpha * x + beta */
    DITTO_UNARY_COUNT
} DittoUnaryKind;

typedef struct DittoUnaryParams {
    DittoUnaryKind kind;
    float alpha, beta;
} DittoUnaryParams;

/* pixel_shuffle: the factor, and act applied to every value as ditto_op_unary would (IDENTITY: none). */
typedef struct DittoShuffleParams {
    int factor;
    DittoUnaryParams act;
} DittoShuffleParams;

typedef enum DittoBinaryKind {
    DITTO_BINARY_ADD = 0,
    DITTO_BINARY_SUB,
    DITTO_BINARY_MUL,
    DITTO_BINARY_DIV,
    DITTO_BINARY_POW,
    DITTO_BINARY_MAX,
    DITTO_BINARY_MIN,
    DITTO_BINARY_COUNT
} DittoBinaryKind;

typedef struct DittoBinaryParams {
    DittoBinaryKind kind;
} DittoBinaryParams;

typedef enum DittoReduceKind {
    DITTO_REDUCE_SUM = 0,
    DITTO_REDUCE_MEAN,
    DITTO_REDUCE_MAX,
    DITTO_REDUCE_MIN,
    DITTO_REDUCE_SUMSQ,
    DITTO_REDUCE_L2,         /* sqrt(sum x^2) */
    DITTO_REDUCE_COUNT
} DittoReduceKind;

typedef struct DittoReduceParams {
    DittoReduceKind kind;
    int axis;                /* negative counts from the end; y keeps the axis with size 1 */
} DittoReduceParams;

typedef struct DittoSoftmaxParams {
    int axis;                /* negative counts from the end */
} DittoSoftmaxParams;

/* ---- linear algebra ---- */

typedef struct DittoMatmulParams {
    bool trans_a, trans_b;   /* use the last two dims transposed */
    float alpha;             /* c = alpha * op(a) op(b); 0 means 1 */
} DittoMatmulParams;

/*
 * Options of ditto_op_linear_ex; all false (or NULL params) is ditto_op_linear.
 * tf32: float32 x and w may enter the product rounded to TF32 (8-bit
 * exponent, 10 explicit mantissa bits), products summed in float32. The CPU
 * oracle rounds both to nearest even; GPU tensor cores convert as their
 * library does (cuBLAS does not document it; the hardware reads the top 10
 * mantissa bits: truncation), so backends agree to the TF32 bound, not bit
 * for bit, unless x and w already are TF32 values (ditto_tf32_round; see
 * tf32_out): then every backend forms the same products. float16 operands
 * ignore it.
 * gelu: y = GELU(x w^T + b), the exact (erf) GELU of DITTO_UNARY_GELU.
 * tf32_out: float32 y rounded to the nearest TF32 value (ditto_tf32_round),
 * last, so that a tf32 linear reading it gets exact TF32 operands.
 */
typedef struct DittoLinearParams {
    bool tf32;
    bool gelu;
    bool tf32_out;
} DittoLinearParams;

/* ---- convolution, norms, resampling ---- */

typedef struct DittoConvParams {
    int stride[3];           /* per spatial dim (1, 2 or 3 used); 0 means 1 */
    int pad_begin[3];
    int pad_end[3];
    int dilation[3];         /* 0 means 1 */
    int groups;              /* 0 means 1 */
    bool nhwc;               /* 2-D or 3-D: x (N,[D,]H,W,C), y (N,[OD,]OH,OW,O) channels-last; w stays (O,C/groups,k...) */
    bool relu;               /* y = max(0, conv + bias) */
    bool accumulate;         /* y = conv + bias + y (y holds a residual on entry; relu after the sum) */
    bool y_first;            /* with nhwc, not accumulate: y stays channels-first (N,O,out...) (the warp's heads) */
} DittoConvParams;

typedef struct DittoNormParams {
    float eps;
    int groups;              /* group norm only */
    bool channels_first;     /* layer norm: normalise over dim 1 instead of the last dim */
} DittoNormParams;

/* SPADE modulation (spade_norm): instance norm, * (1 + gamma) + beta, then LeakyReLU(slope) when act. */
typedef struct DittoSpadeParams {
    float eps;
    bool act;
    float slope;
    bool nhwc;               /* channels-last: x, y (N, spatial..., C), gb (N, spatial..., 2C) */
    bool gamma_only;         /* gb holds gamma alone (C channels, bias C): no beta */
} DittoSpadeParams;

/* mask_blend: frame rows [y0, y1) and columns [x0, x1). */
typedef struct DittoBlendParams {
    int64_t y0, y1, x0, x1;
} DittoBlendParams;

/* paste_yuv, one item: cv2's crop -> frame map M (rows 0-1, the warps' matrix) and the frame box the blend covers. */
typedef struct DittoPasteItem {
    double m[6];
    int64_t y0, y1, x0, x1;
} DittoPasteItem;

typedef struct DittoPasteParams {
    const DittoPasteItem *items;   /* one per item (host memory, read at the call) */
    float scale;                   /* render values times scale first (255: [0, 1] to levels) */
    bool box_only;                 /* write only the 2x2 blocks that meet each box: the rest already holds this frame's bytes */
} DittoPasteParams;

typedef enum DittoPoolKind { DITTO_POOL_AVG = 0, DITTO_POOL_MAX } DittoPoolKind;

typedef struct DittoPoolParams {
    DittoPoolKind kind;
    int kernel[3];
    int stride[3];           /* 0 means kernel */
    int pad_begin[3];
    int pad_end[3];
    bool ceil_mode;
    bool count_include_pad;  /* avg only */
} DittoPoolParams;

typedef struct DittoGridSampleParams {
    bool align_corners;      /* padding is zeros, interpolation (tri)linear */
} DittoGridSampleParams;

/* The dense motion network's keypoint fields (motion_input, motion_deform). */
typedef struct DittoMotionParams {
    double variance;         /* of the keypoint Gaussians (0.01) */
} DittoMotionParams;

typedef struct DittoAttentionParams {
    float scale;             /* 0 means 1/sqrt(head_dim) */
    bool tf32_out;           /* float32 y rounded to the nearest TF32 value (ditto_tf32_round): input of a tf32 linear */
} DittoAttentionParams;

typedef struct DittoRotaryParams {
    int64_t pos_offset;      /* position of the first row */
} DittoRotaryParams;

/* ---- fused model steps ---- */

/* One DDIM step with classifier-free guidance (ditto_op_ddim_step). */
typedef struct DittoDdimStepParams {
    float guidance;          /* w: x0 = U + w (C - U) */
    float a;                 /* A_t = sqrt(1 / (1 - abar_t)) */
    float rb;                /* 1 / B_t, B_t = sqrt(1 / abar_t - 1) */
    float alpha_next_sqrt;   /* sqrt(abar_next) */
    float c;                 /* weight of eps */
    float sigma;             /* weight of the fresh noise z */
} DittoDdimStepParams;

/* Streams of ditto_op_randn: row (a, b) draws from stream0 + a stream_a + b stream_b. */
typedef struct DittoRandnParams {
    uint64_t seed;
    uint64_t stream0, stream_a, stream_b;
} DittoRandnParams;

/* Pre-norm of a rotary (FiLM) transformer layer (ditto_op_layer_norm_rotary). */
typedef struct DittoLnRotaryParams {
    float eps;               /* layer norm epsilon */
    int64_t pos_offset;      /* rotary position of row 0 of every sequence */
    bool tf32_out;           /* float32 a and ra rounded to the nearest TF32 value (ditto_tf32_round) last: inputs of tf32 linears */
} DittoLnRotaryParams;

/* ---- image ops (OpenCV semantics, images N,H,W,C or H,W,C; u8 or f32) ---- */

typedef struct DittoWarpAffineParams {
    double m[6];             /* 2x3 matrix mapping source -> destination (cv2.warpAffine M) */
    float border_value;      /* constant border */
} DittoWarpAffineParams;

/* ---- ONNX-style ops: gather, where, pad, resize, prelu, conv_transpose ---- */

typedef enum DittoPadMode {
    DITTO_PAD_CONSTANT = 0,  /* value outside */
    DITTO_PAD_REFLECT,       /* mirror without repeating the edge (numpy 'reflect') */
    DITTO_PAD_EDGE,          /* repeat the edge */
    DITTO_PAD_WRAP,          /* circular */
} DittoPadMode;

typedef struct DittoPadParams {
    DittoPadMode mode;
    int64_t begin[DITTO_MAX_DIMS];  /* per axis of x; negative crops */
    int64_t end[DITTO_MAX_DIMS];
    float value;                    /* constant mode */
} DittoPadParams;

typedef enum DittoResizeMode { DITTO_RESIZE_NEAREST = 0, DITTO_RESIZE_LINEAR, DITTO_RESIZE_CUBIC } DittoResizeMode;

/* ONNX coordinate_transformation_mode: output coordinate -> input coordinate. */
typedef enum DittoResizeCoord {
    DITTO_RESIZE_HALF_PIXEL = 0,        /* (o + 0.5) / s - 0.5 */
    DITTO_RESIZE_HALF_PIXEL_SYMMETRIC,  /* half_pixel re-centred when out != in * s */
    DITTO_RESIZE_PYTORCH_HALF_PIXEL,    /* half_pixel, 0 when out == 1 */
    DITTO_RESIZE_ALIGN_CORNERS,         /* o (in - 1) / (out - 1), 0 when out == 1 */
    DITTO_RESIZE_ASYMMETRIC,            /* o / s */
    DITTO_RESIZE_TF_HALF_PIXEL_FOR_NN,  /* (o + 0.5) / s */
    DITTO_RESIZE_TF_CROP_AND_RESIZE,    /* roi-relative; outside -> extrapolation_value */
} DittoResizeCoord;

typedef enum DittoResizeNearest {
    DITTO_NEAREST_ROUND_PREFER_FLOOR = 0,
    DITTO_NEAREST_ROUND_PREFER_CEIL,
    DITTO_NEAREST_FLOOR,
    DITTO_NEAREST_CEIL,
    DITTO_NEAREST_SIMPLE,    /* opset <= 10 Resize / Upsample: floor when upsampling an axis, ceil when downsampling */
} DittoResizeNearest;

/* ONNX Resize (opset 11-19 semantics, no antialias). Coordinates in float32 as ONNX Runtime computes them. */
typedef struct DittoResizeParams {
    DittoResizeMode mode;
    DittoResizeCoord coord;
    DittoResizeNearest nearest;
    float scale[DITTO_MAX_DIMS];    /* per axis of x, out/in; <= 0: y.shape / x.shape in float */
    float roi_start[DITTO_MAX_DIMS];/* tf_crop_and_resize: normalised roi per axis */
    float roi_end[DITTO_MAX_DIMS];
    float cubic_a;                  /* -0.75 in ONNX */
    bool exclude_outside;           /* cubic: drop taps outside and renormalise */
    float extrapolation_value;      /* tf_crop_and_resize */
} DittoResizeParams;

/* Transposed convolution: conv params plus output_padding per spatial dim. */
typedef struct DittoConvTransposeParams {
    DittoConvParams conv;
    int output_padding[3];
} DittoConvTransposeParams;

/* Function table. Each entry is NULL when the backend lacks the op. */
typedef struct DittoOps {
    int (*copy)(struct DittoBackend *be, const DittoTensor *x, DittoTensor *y);  /* strided, casts dtype */
    int (*fill)(struct DittoBackend *be, float value, DittoTensor *y);
    int (*unary)(struct DittoBackend *be, const DittoUnaryParams *p, const DittoTensor *x, DittoTensor *y);
    int (*bias_unary)(struct DittoBackend *be, const DittoUnaryParams *p, int axis, const DittoTensor *x, const DittoTensor *bias, DittoTensor *y);
    int (*binary)(struct DittoBackend *be, const DittoBinaryParams *p, const DittoTensor *a, const DittoTensor *b, DittoTensor *y);
    int (*softmax)(struct DittoBackend *be, const DittoSoftmaxParams *p, const DittoTensor *x, DittoTensor *y);
    int (*reduce)(struct DittoBackend *be, const DittoReduceParams *p, const DittoTensor *x, DittoTensor *y);
    int (*matmul)(struct DittoBackend *be, const DittoMatmulParams *p, const DittoTensor *a, const DittoTensor *b, DittoTensor *c);
    int (*linear)(struct DittoBackend *be, const DittoLinearParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y);
    int (*conv)(struct DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y);
    int (*batch_norm)(struct DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *mean, const DittoTensor *var, const DittoTensor *w, const DittoTensor *b, DittoTensor *y);
    int (*instance_norm)(struct DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b, DittoTensor *y);
    int (*spade_norm)(struct DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *x, const DittoTensor *gb, const DittoTensor *bias, DittoTensor *y);
    int (*spade_conv)(struct DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w, const DittoTensor *bias,
                      const DittoTensor *x, DittoTensor *y);
    int (*layer_norm)(struct DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b, DittoTensor *y);
    int (*group_norm)(struct DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b, DittoTensor *y);
    int (*upsample_nearest)(struct DittoBackend *be, const DittoTensor *x, DittoTensor *y);
    int (*pool)(struct DittoBackend *be, const DittoPoolParams *p, const DittoTensor *x, DittoTensor *y);
    int (*pixel_shuffle)(struct DittoBackend *be, const DittoShuffleParams *p, const DittoTensor *x, DittoTensor *y);
    int (*grid_sample)(struct DittoBackend *be, const DittoGridSampleParams *p, const DittoTensor *x, const DittoTensor *grid, DittoTensor *y);
    int (*concat)(struct DittoBackend *be, int axis, int n, const DittoTensor *const *xs, DittoTensor *y);
    int (*attention)(struct DittoBackend *be, const DittoAttentionParams *p, const DittoTensor *q, const DittoTensor *k, const DittoTensor *v, const DittoTensor *mask, DittoTensor *y);
    int (*rotary)(struct DittoBackend *be, const DittoRotaryParams *p, const DittoTensor *x, const DittoTensor *freqs, DittoTensor *y);
    int (*warp_affine)(struct DittoBackend *be, const DittoWarpAffineParams *p, const DittoTensor *x, DittoTensor *y);
    int (*mask_blend)(struct DittoBackend *be, const DittoBlendParams *p, const DittoTensor *mask, const DittoTensor *img, const DittoTensor *src, DittoTensor *dst);
    int (*rgb_to_yuv420)(struct DittoBackend *be, const DittoTensor *x, DittoTensor *y, DittoTensor *u, DittoTensor *v);
    int (*paste_yuv)(struct DittoBackend *be, const DittoPasteParams *p, const DittoTensor *mask, const DittoTensor *render, const DittoTensor *src,
                     DittoTensor *rgb, DittoTensor *y, DittoTensor *u, DittoTensor *v);
    int (*resize_area)(struct DittoBackend *be, const DittoTensor *x, DittoTensor *y);
    int (*resize_bilinear)(struct DittoBackend *be, const DittoTensor *x, DittoTensor *y);
    int (*gather)(struct DittoBackend *be, int axis, const DittoTensor *x, const DittoTensor *idx, DittoTensor *y);
    int (*where)(struct DittoBackend *be, const DittoTensor *cond, const DittoTensor *a, const DittoTensor *b, DittoTensor *y);
    int (*pad)(struct DittoBackend *be, const DittoPadParams *p, const DittoTensor *x, DittoTensor *y);
    int (*resize)(struct DittoBackend *be, const DittoResizeParams *p, const DittoTensor *x, DittoTensor *y);
    int (*prelu)(struct DittoBackend *be, const DittoTensor *x, const DittoTensor *slope, DittoTensor *y);
    int (*conv_transpose)(struct DittoBackend *be, const DittoConvTransposeParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y);
    int (*film)(struct DittoBackend *be, const DittoTensor *h, const DittoTensor *y, const DittoTensor *scale, const DittoTensor *shift, DittoTensor *out);
    int (*randn)(struct DittoBackend *be, const DittoRandnParams *p, DittoTensor *y);
    int (*ddim_step)(struct DittoBackend *be, const DittoDdimStepParams *p, const DittoTensor *cond, const DittoTensor *uncond, const DittoTensor *x, const DittoTensor *z, DittoTensor *x0, DittoTensor *eps, DittoTensor *x_next);
    int (*layer_norm_rotary)(struct DittoBackend *be, const DittoLnRotaryParams *p, DittoTensor *h, const DittoTensor *y, const DittoTensor *scale, const DittoTensor *shift,
                             const DittoTensor *w, const DittoTensor *b, const DittoTensor *freqs, DittoTensor *a, DittoTensor *ra);
    int (*motion_input)(struct DittoBackend *be, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s,
                        const DittoTensor *feat, DittoTensor *y, DittoTensor *motion);
    int (*motion_deform)(struct DittoBackend *be, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s,
                         const DittoTensor *logits, DittoTensor *deformation, DittoTensor *mask);
    /* Not an op: whether spade_conv runs this call without storing gb and is the faster form there (arguments checked by the front end). */
    bool (*spade_conv_fused)(struct DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w, const DittoTensor *bias,
                             const DittoTensor *x, const DittoTensor *y);
} DittoOps;

bool ditto_ops_has(const DittoOps *ops, DittoOp op);

/*
 * Front ends. Each validates its arguments against the op's shape rule (the
 * comment) and dispatches. Errors: DITTO_ERR_SHAPE / DITTO_ERR_INVAL with a
 * logged message naming the op and both shapes, DITTO_ERR_UNSUPPORTED.
 */

/* y = x (same shape, any strides, any dtypes: converts). */
int ditto_op_copy(struct DittoBackend *be, const DittoTensor *x, DittoTensor *y);
int ditto_op_fill(struct DittoBackend *be, float value, DittoTensor *y);
/* y = f(x); same shape; x and y may be strided; y may be x (in place). */
int ditto_op_unary(struct DittoBackend *be, const DittoUnaryParams *p, const DittoTensor *x, DittoTensor *y);
int ditto_op_act(struct DittoBackend *be, DittoUnaryKind kind, float alpha, const DittoTensor *x, DittoTensor *y);
/*
 * y = f(x + bias[i_axis]): bias (x.shape[axis]) contiguous, added along axis;
 * same shape; x and y may be strided; y may be x (in place). A bias and
 * activation applied in the pass that moves x (the decoder's sub-pixel
 * interleave).
 */
int ditto_op_bias_unary(struct DittoBackend *be, const DittoUnaryParams *p, int axis, const DittoTensor *x, const DittoTensor *bias,
                        DittoTensor *y);
/* y = a (op) b with NumPy broadcasting; a, b strided; y contiguous with the broadcast shape; y may alias a or b of the same shape. */
int ditto_op_binary(struct DittoBackend *be, DittoBinaryKind kind, const DittoTensor *a, const DittoTensor *b, DittoTensor *y);
/* softmax along axis; y same shape; y may be x. */
int ditto_op_softmax(struct DittoBackend *be, int axis, const DittoTensor *x, DittoTensor *y);
/* y = reduce over axis, keeping it with size 1. */
int ditto_op_reduce(struct DittoBackend *be, DittoReduceKind kind, int axis, const DittoTensor *x, DittoTensor *y);
/* c (..., M, N) = alpha op(a) (..., M, K) op(b) (..., K, N); batch dims of a, b broadcast (each equal to c's or 1). */
int ditto_op_matmul(struct DittoBackend *be, const DittoMatmulParams *p, const DittoTensor *a, const DittoTensor *b, DittoTensor *c);
/*
 * y (..., out) = x (..., in) w(out, in)^T + bias(out); bias may be NULL.
 * Each item of dim 0 (when x.ndim >= 2) must get bit-identical results
 * whatever the size of dim 0 (batch consistency).
 */
int ditto_op_linear(struct DittoBackend *be, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y);
/* ditto_op_linear with options (DittoLinearParams); p NULL: the defaults. */
int ditto_op_linear_ex(struct DittoBackend *be, const DittoLinearParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y);
/*
 * Cross-correlation, 1-D/2-D/3-D by x.ndim - 2: x (N,C,*in), w (O, C/groups, *k), bias (O) or NULL, y (N,O,*out).
 * p->nhwc (2-D or 3-D): x (N,*in,C), y (N,*out,O), the same w. p->relu: y = max(0, conv + bias).
 * p->accumulate: y = conv + bias + y_old (a residual already in y; relu, if any, after the sum).
 * ditto_conv_out_shape gives y's shape in the layout of p.
 * w is contiguous, or channels-last (ditto_tensor_is_channels_last: stored
 * (O, *k, C/groups), as the CUDA backend's f16 kernels read it).
 */
int ditto_op_conv(struct DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y);
int ditto_conv_out_shape(const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w, int64_t *shape);
/* Eval batch norm over dim 1: y = (x - mean) / sqrt(var + eps) * w + b; w, b may be NULL. */
int ditto_op_batch_norm(struct DittoBackend *be, float eps, const DittoTensor *x, const DittoTensor *mean, const DittoTensor *var, const DittoTensor *w, const DittoTensor *b, DittoTensor *y);
/* Per (n, c) over the remaining dims, biased variance; w, b (C) optional. */
int ditto_op_instance_norm(struct DittoBackend *be, float eps, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b, DittoTensor *y);
/*
 * SPADE: per (n, c) instance statistics of x (biased variance), then
 * v = (x - mean) / sqrt(var + eps) * (1 + gb[n, c]) + gb[n, C + c] element-wise,
 * y = act ? LeakyReLU(v, slope) : v. x, y (N, C, spatial...); gb (N, 2C,
 * spatial...): gamma then beta (one convolution makes both). y may be x, not gb.
 * bias (2C) or NULL: the gamma / beta convolution's bias, added here
 * (gamma = gb[n, c] + bias[c], beta = gb[n, C + c] + bias[C + c]) so the
 * convolution need not write gb twice.
 * p->nhwc: channels last, x, y (N, spatial..., C), gb (N, spatial..., 2C)
 * with gamma in channels [0, C) and beta in [C, 2C).
 * 2-D only: x (N, C, h, w) may be smaller than y and gb (N, C|2C, H, W) by
 * integer factors H / h, W / w: x is read nearest-upsampled to (H, W) (its
 * statistics are those of the upsampled x), so no upsampled copy is needed;
 * y is then not x.
 * p->gamma_only: gb (and bias) have C channels, gamma alone, and beta is 0
 * (the decoder's shortcut SPADE, whose beta goes through conv_s folded).
 */
int ditto_op_spade_norm(struct DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *x, const DittoTensor *gb, const DittoTensor *bias,
                        DittoTensor *y);
/*
 * SPADE with its gamma / beta convolution: y = spade_norm(p, x, gb, bias)
 * with gb = conv(a, w), a 3x3 convolution with padding 1 and no bias (the
 * decoder's mlp_gamma ; mlp_beta). Channels-last only (p->nhwc): a (N, H,
 * W, Ca) contiguous or a slice of channels of a contiguous (N, H, W, lda),
 * strides (H W lda, W lda, lda, 1) with lda >= Ca (the decoder's merged
 * mlp_shared output), w (K C, Ca, 3, 3) contiguous or channels-last (K = 2: gamma rows
 * then beta rows; 1 with p->gamma_only), bias (K C) or NULL, x (N, H / fh,
 * W / fw, C) for integer fh, fw (read nearest-upsampled), y (N, H, W, C),
 * not aliasing a or x. A backend may run it without storing gb
 * (ditto_op_spade_conv_fused says where); gamma and beta are then not
 * rounded to the storage dtype, so results differ from the two-op form by
 * that rounding.
 */
int ditto_op_spade_conv(struct DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w, const DittoTensor *bias,
                        const DittoTensor *x, DittoTensor *y);
/*
 * Whether ditto_op_spade_conv takes these arguments, runs them without
 * storing gb on this backend and is faster there than conv + spade_norm
 * (the decoder's choice; false on bad arguments, silently).
 */
bool ditto_op_spade_conv_fused(struct DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w, const DittoTensor *bias,
                               const DittoTensor *x, const DittoTensor *y);
/* Over the last dim, or over dim 1 when channels_first; w, b of that size, optional. */
int ditto_op_layer_norm(struct DittoBackend *be, float eps, bool channels_first, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b, DittoTensor *y);
/* x (N, C, ...): C split into groups; w, b (C) optional. */
int ditto_op_group_norm(struct DittoBackend *be, int groups, float eps, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b, DittoTensor *y);
/* Nearest (PyTorch 'nearest'): y[i] = x[floor(i * in / out)] per spatial dim; x (N,C,*), y (N,C,*) of 1-3 spatial dims. */
int ditto_op_upsample_nearest(struct DittoBackend *be, const DittoTensor *x, DittoTensor *y);
/* Average / max pooling over x.ndim - 2 spatial dims. */
int ditto_op_pool(struct DittoBackend *be, const DittoPoolParams *p, const DittoTensor *x, DittoTensor *y);
int ditto_pool_out_shape(const DittoPoolParams *p, const DittoTensor *x, int64_t *shape);
/* x (N, C r^2, H, W) -> y (N, C, H r, W r), y[c, h r + i, w r + j] = x[c r^2 + i r + j, h, w]. */
int ditto_op_pixel_shuffle(struct DittoBackend *be, int factor, const DittoTensor *x, DittoTensor *y);
/*
 * The same with an activation applied as it writes, and x any strided view
 * (e.g. a channels-last (N,H,W,C') tensor's first C r^2 channels, permuted):
 * the bytes of a copy of x, ditto_op_pixel_shuffle and ditto_op_unary in turn.
 */
int ditto_op_pixel_shuffle_act(struct DittoBackend *be, const DittoShuffleParams *p, const DittoTensor *x, DittoTensor *y);
/* PyTorch grid_sample, zeros padding: 2-D x (N,C,H,W) grid (N,Ho,Wo,2) -> (N,C,Ho,Wo); 3-D x (N,C,D,H,W) grid (N,Do,Ho,Wo,3) -> (N,C,Do,Ho,Wo). grid last axis is (x, y[, z]). */
int ditto_op_grid_sample(struct DittoBackend *be, bool align_corners, const DittoTensor *x, const DittoTensor *grid, DittoTensor *y);
/*
 * The dense motion network's hourglass input in one pass (WarpingNetwork,
 * ditto-architecture.md 5.4 steps 2-4). grid (D,H,W,3) float32, the (x,y,z)
 * of each point of the volume; kp_d, kp_s (N,K,3) float32; feat (N,c,D,H,W).
 * Motion m in 0..K (m = 0: a zero keypoint in both sets) at grid point G:
 *   t = G - kp_d[m], u = G - kp_s[m], S_m = t + kp_s[m]      (float32)
 *   heat_m = e(t) - e(u), e(v) = expf(a * |v|^2), a = (float)(-0.5 / variance),
 *            |v|^2 summed in double over (x, y, z) and rounded to float32
 *   y[n, m(c+1)] = heat_m, y[n, m(c+1) + 1 + j] = grid_sample(feat[n, j], S_m)
 *            (trilinear, zeros padding, align_corners false)
 * y (N,(K+1)(c+1),D,H,W), contiguous or a channels-last view (channel
 * stride 1, the positions of an item evenly apart: a channel slice of an
 * (N,D,H,W,C') tensor, which the warp's channels-last hourglass reads);
 * motion (N,K+1,D,H,W,3) float32, or NULL, gets S.
 * These are the float32 operations of the unfused chain (sub, sum of
 * squares, scale, exp, sub, add, grid_sample), element for element.
 */
int ditto_op_motion_input(struct DittoBackend *be, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s,
                          const DittoTensor *feat, DittoTensor *y, DittoTensor *motion);
/*
 * deformation[n,d,h,w] = sum over m of mask_m * S_m with mask = softmax over
 * m of logits[n,:,d,h,w] and S_m as motion_input defines it (recomputed from
 * grid and keypoints). logits (N,K+1,D,H,W); deformation (N,D,H,W,3) float32;
 * mask (N,K+1,D,H,W) float32, or NULL, gets the softmax. As the unfused
 * chain: max, expf(l - max), their sum in double, mask = (float)(e * (1 / sum))
 * in double; each float32 product mask_m * S_m summed over m in double.
 */
int ditto_op_motion_deform(struct DittoBackend *be, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s,
                           const DittoTensor *logits, DittoTensor *deformation, DittoTensor *mask);
/* y = concat(xs, axis); inputs may be strided. */
int ditto_op_concat(struct DittoBackend *be, int axis, int n, const DittoTensor *const *xs, DittoTensor *y);
/*
 * q (B,H,Lq,D), k (B,H,Lk,D), v (B,H,Lk,Dv), mask additive, broadcastable to
 * (B,H,Lq,Lk), or NULL; y (B,H,Lq,Dv). q, k, v and y may be strided (y e.g. a
 * permuted view of a (B,Lq,H,Dv) buffer: heads concatenated per row); y's
 * elements must be distinct (no stride 0) and not overlap the inputs.
 */
int ditto_op_attention(struct DittoBackend *be, float scale, const DittoTensor *q, const DittoTensor *k, const DittoTensor *v, const DittoTensor *mask, DittoTensor *y);
/* ditto_op_attention with all options (DittoAttentionParams; NULL: scale 0, no tf32_out). */
int ditto_op_attention_ex(struct DittoBackend *be, const DittoAttentionParams *p, const DittoTensor *q, const DittoTensor *k, const DittoTensor *v,
                          const DittoTensor *mask, DittoTensor *y);
/* Interleaved-pair rotary on x (B, L, C): theta = (pos_offset + l) * freqs[k], pairs (2k, 2k+1); freqs (C/2). y may be x. */
int ditto_op_rotary(struct DittoBackend *be, int64_t pos_offset, const DittoTensor *x, const DittoTensor *freqs, DittoTensor *y);
/* cv2.warpAffine(INTER_LINEAR, BORDER_CONSTANT): x (H,W,C) or (N,H,W,C), u8 or f32 -> y of the same dtype and channels. */
int ditto_op_warp_affine(struct DittoBackend *be, const DittoWarpAffineParams *p, const DittoTensor *x, DittoTensor *y);
/*
 * Paste-back blend (core/bt601.h ditto_blend_px) over the box p of the frame:
 * dst[r,c,:] = blend(mask[r,c], img[r,c,:], src[r,c,:]) for r in [y0, y1),
 * c in [x0, x1); dst is not written outside the box. mask (h,w,1) and img
 * (h,w,3) float32 cover at least the box (h >= y1, w >= x1; rows w apart);
 * src, dst (H,W,3) uint8, dst may be src.
 */
int ditto_op_mask_blend(struct DittoBackend *be, const DittoBlendParams *p, const DittoTensor *mask, const DittoTensor *img, const DittoTensor *src, DittoTensor *dst);
/* BT.601 limited-range yuv420p (io/color.h): x (H,W,3) uint8 RGB -> y (H,W), u, v (ceil(H/2), ceil(W/2)) uint8. */
int ditto_op_rgb_to_yuv420(struct DittoBackend *be, const DittoTensor *x, DittoTensor *y, DittoTensor *u, DittoTensor *v);
/*
 * The output path in one pass (pipeline/putback.h), for each item i of N:
 *   img = scale * render[i] as (h,w,3) float32 (render (N,3,h,w) float32 or float16);
 *   a = warp_affine(mask, M_i), p = warp_affine(img, M_i), border 0;
 *   rgb = src (src[i] when src is (N,H,W,3)), and inside box_i mask_blend(a, p, rgb);
 *   y, u, v = rgb_to_yuv420(rgb); rgb is stored too unless NULL.
 * box_only: only the 2x2 blocks (chroma samples) that meet box_i are written,
 * for outputs that hold the same frame's bytes elsewhere already (an image
 * avatar's background under the same map).
 * Bytes are those of those ops in turn. mask (h,w,1) float32; src (H,W,3) or
 * (N,H,W,3) uint8; rgb (N,H,W,3), y (N,H,W), u, v (N,ceil(H/2),ceil(W/2))
 * uint8, each contiguous but for its batch stride (frames packed in one buffer).
 */
int ditto_op_paste_yuv(struct DittoBackend *be, const DittoPasteParams *p, const DittoTensor *mask, const DittoTensor *render, const DittoTensor *src,
                       DittoTensor *rgb, DittoTensor *y, DittoTensor *u, DittoTensor *v);
/* The 2x2 blocks paste_yuv writes for item it: chroma rows [b[0], b[1]) and columns [b[2], b[3]) of a (ch, cw) grid (the backends' rule). */
void ditto_paste_blocks(const DittoPasteItem *it, bool box_only, int64_t ch, int64_t cw, int64_t b[4]);
/* cv2.resize INTER_AREA / INTER_LINEAR to y's spatial size; (H,W,C) or (N,H,W,C), u8 or f32. */
int ditto_op_resize_area(struct DittoBackend *be, const DittoTensor *x, DittoTensor *y);
int ditto_op_resize_bilinear(struct DittoBackend *be, const DittoTensor *x, DittoTensor *y);

/*
 * y = take(x, idx, axis): y.shape = x.shape[:axis] + idx.shape + x.shape[axis+1:].
 * idx int64 on the device, values in [-n, n) (negative counts from the end;
 * others fail with DITTO_ERR_RANGE); x, y any dtype, the same, contiguous.
 */
int ditto_op_gather(struct DittoBackend *be, int axis, const DittoTensor *x, const DittoTensor *idx, DittoTensor *y);
/* y = cond ? a : b with NumPy broadcasting of all three to y; cond bool (or uint8), a, b, y one dtype; y contiguous. */
int ditto_op_where(struct DittoBackend *be, const DittoTensor *cond, const DittoTensor *a, const DittoTensor *b, DittoTensor *y);
/* y.shape[i] = begin[i] + x.shape[i] + end[i] on any axis; x, y contiguous, one dtype. */
int ditto_op_pad(struct DittoBackend *be, const DittoPadParams *p, const DittoTensor *x, DittoTensor *y);
/* ONNX Resize of any axes of x (rank 1-6) to y's shape (see DittoResizeParams). */
int ditto_op_resize(struct DittoBackend *be, const DittoResizeParams *p, const DittoTensor *x, DittoTensor *y);
void ditto_resize_params_default(DittoResizeParams *p);
/* y = x >= 0 ? x : slope * x; slope broadcasts to x (right-aligned, e.g. (C,1,1) for (N,C,H,W)). y may be x. */
int ditto_op_prelu(struct DittoBackend *be, const DittoTensor *x, const DittoTensor *slope, DittoTensor *y);
/*
 * Transposed convolution, 1-D/2-D/3-D: x (N, C, *in), w (C, O/groups, *k),
 * bias (O) or NULL, y (N, O, *out) with out = (in - 1) s - pad_begin - pad_end
 * + d (k - 1) + output_padding + 1.
 */
int ditto_op_conv_transpose(struct DittoBackend *be, const DittoConvTransposeParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y);
int ditto_conv_transpose_out_shape(const DittoConvTransposeParams *p, const DittoTensor *x, const DittoTensor *w, int64_t *shape);

/*
 * FiLM residual: out = h + (scale y + shift), each operation rounded to
 * float32 as the MUL, ADD, ADD binary ops it replaces (no fused multiply-add).
 * h, y (any strides) and out (contiguous) have one shape; scale and shift
 * broadcast to it (NumPy rules, e.g. (N,1,D) against (N,L,D)). out may be h
 * or y (the same tensor, in place).
 */
int ditto_op_film(struct DittoBackend *be, const DittoTensor *h, const DittoTensor *y, const DittoTensor *scale, const DittoTensor *shift, DittoTensor *out);
/*
 * One step of guided DDIM sampling, element-wise, every operation rounded to
 * float32 in the order of the unfused op sequence it replaces (binary ops
 * and affine unary ops alpha v + beta with beta = 0, which turns -0 into +0;
 * no fused multiply-add):
 *   x0     = uncond + (w (cond - uncond) + 0)
 *   eps    = (a x + 0) - (rb x0 + 0)
 *   x_next = ((alpha_next_sqrt x0 + 0) + (c eps + 0)) + (sigma z + 0)
 * Inputs cond, uncond, x, z share one shape, any strides (z may broadcast
 * with stride 0); x is only needed for eps or x_next, z only for x_next (else
 * NULL allowed). Outputs x0, eps, x_next: each optional (NULL), at least one,
 * contiguous, the same shape; x_next may be x (in place), no other aliasing.
 */
int ditto_op_ddim_step(struct DittoBackend *be, const DittoDdimStepParams *p, const DittoTensor *cond, const DittoTensor *uncond, const DittoTensor *x,
                       const DittoTensor *z, DittoTensor *x0, DittoTensor *eps, DittoTensor *x_next);
/*
 * Standard normals of core/rng.h where they are used: y (A, B, n) float32
 * contiguous, y[a, b, k] = ditto_rng_normal(p->seed, p->stream0 + a
 * p->stream_a + b p->stream_b, k). Every backend draws the same values (the
 * device's double log / sin / cos may move one in about 10^8 by a float ulp).
 */
int ditto_op_randn(struct DittoBackend *be, const DittoRandnParams *p, DittoTensor *y);
/*
 * Pre-norm of a rotary (FiLM) transformer layer, one pass over the rows:
 *   h  = h + (scale y + shift)    FiLM residual of the previous block, when y is
 *                                 given: as ditto_op_film, in place on h
 *   a  = layer_norm(h)            over the last dim, affine w, b (C) optional:
 *                                 as ditto_op_layer_norm
 *   ra = rotary(a)                positions along dim -2 (L), theta =
 *                                 (pos_offset + l) freqs[k]: as ditto_op_rotary
 *                                 on a seen as (rows / L, L, C)
 * h (..., L, C) contiguous, rank >= 2, C even. y h's shape, any strides,
 * not h; scale, shift h's rank, each dim 1 or h's, any strides (broadcast);
 * y, scale and shift all given or all NULL. a, ra h's shape, contiguous,
 * each optional but not both, and not overlapping each other or the inputs.
 * freqs float32 (C/2), any strides, for ra (else may be NULL). tf32_out
 * rounds a and ra last (ra is the rotary of the unrounded norm). The CPU
 * oracle runs film, layer_norm and rotary in sequence (their bits); other
 * backends fuse them within a documented tolerance (tests/ops/cases_fused.c).
 */
int ditto_op_layer_norm_rotary(struct DittoBackend *be, const DittoLnRotaryParams *p, DittoTensor *h, const DittoTensor *y, const DittoTensor *scale,
                               const DittoTensor *shift, const DittoTensor *w, const DittoTensor *b, const DittoTensor *freqs, DittoTensor *a, DittoTensor *ra);

#endif
