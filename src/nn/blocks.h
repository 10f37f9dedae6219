/*
 * Pieces shared by the networks of src/models: activations from the forward
 * arena, stride-1 convolution padding, eval-mode BatchNorm, the conv +
 * BatchNorm (+ activation) block (SameBlock2d, DownBlock2d/3d, UpBlock3d, the
 * hourglass output, the warping head's third), and the check of a forward's
 * input tensors.
 */
#ifndef DITTO_NN_BLOCKS_H
#define DITTO_NN_BLOCKS_H

#include "core/buffer.h"
#include "nn/weights.h"
#include "ops/ops.h"

/* eps of every torch.nn.BatchNorm in the networks (PyTorch's default) */
#define DITTO_BN_EPS 1e-5f

/* A contiguous tensor of dtype dt and (ndim, shape) from the arena (activations: the network's act dtype). */
int ditto_nn_new(DittoArena *ws, DittoDType dt, DittoTensor *t, int ndim, const int64_t *shape);
/* A float32 tensor of (ndim, shape) from the arena (coordinates, grids, keypoints, statistics). */
int ditto_nn_new_f32(DittoArena *ws, DittoTensor *t, int ndim, const int64_t *shape);
/*
 * x in dtype dt: *out = *x when it already is, else a converted contiguous
 * copy from ws (one cast; for network inputs that arrive in another float
 * dtype, e.g. a float32 image into an fp16 network).
 */
int ditto_nn_as_dtype(DittoBackend *be, DittoArena *ws, const DittoTensor *x, DittoDType dt, DittoTensor *out);
/*
 * 0 when t is a float32 tensor or one of dtype act, on be's device; else
 * DITTO_ERR_INVAL, logged as "<what>: <name> has dtype D, expected ...".
 */
int ditto_nn_check_float(DittoBackend *be, const char *what, const char *name, const DittoTensor *t, DittoDType act);
/* Stride 1, symmetric zero padding `pad` in every spatial dim. */
DittoConvParams ditto_nn_conv_pad(int pad);
/* y = BatchNorm(x) with the running statistics, eps DITTO_BN_EPS. */
int ditto_nn_batch_norm(DittoBackend *be, const DittoBatchNorm *bn, const DittoTensor *x, DittoTensor *y);

/* Conv + BatchNorm pair: <key>.conv.{weight,bias} and <key>.norm.* */
typedef struct DittoConvBn {
    DittoTensor weight;     /* <key>.conv.weight (out, in, 3, 3[, 3]) */
    DittoTensor bias;       /* <key>.conv.bias (out) */
    DittoBatchNorm norm;    /* <key>.norm.{weight,bias,running_mean,running_var} (out); unset when folded */
    bool folded;            /* the norm folded into weight and bias at load (ditto_loader_get_conv_bn) */
} DittoConvBn;

/*
 * Whether a network's convolution weights load channels-last
 * (DittoLoader.conv_channels_last): on CUDA with f16 activations, unless
 * DITTO_CONV_WEIGHTS=oihw (a measurement switch, read once).
 */
bool ditto_nn_conv_channels_last(const DittoBackend *be, DittoDType act);
/* Tests: force the answer (1 on, 0 off) for networks loaded next; -1 restores the rule above. */
void ditto_nn_force_conv_channels_last(int on);
/* Bind <key>.conv.weight (out, in, 3 in each of ns = 2 or 3 spatial dims), <key>.conv.bias and <key>.norm.* (out). */
void ditto_nn_load_conv_bn(DittoLoader *l, DittoConvBn *b, int ns, int64_t out, int64_t in, const char *key);
/* The same keys, the eval-mode norm folded into the convolution's weight and bias (b->folded). */
void ditto_nn_load_conv_bn_folded(DittoLoader *l, DittoConvBn *b, int ns, int64_t out, int64_t in, const char *key);
/*
 * y = act(BatchNorm(conv(x))), act = ditto_op_act(act, alpha); the conv output
 * is a scratch tensor of y's shape and dtype from ws, released before return.
 * Folded: one convolution into y, a ReLU in its epilogue (DittoConvParams.relu),
 * any other act one pass over y.
 */
int ditto_nn_conv_bn_act(DittoBackend *be, DittoArena *ws, const DittoConvParams *p, const DittoConvBn *b, DittoUnaryKind act, float alpha,
                         const DittoTensor *x, DittoTensor *y);

/*
 * y = x with the channel axis moved last (to_last: (N,C,*sp) -> (N,*sp,C))
 * or back to dim 1, for 4-D and 5-D x: a copy from a permuted view.
 */
int ditto_nn_relayout(DittoBackend *be, const DittoTensor *x, bool to_last, DittoTensor *y);

/*
 * F.interpolate(mode='nearest') by integer factors over the two dims before
 * the last of channels-last x (*lead, h, w, C) into y (*lead, H, W, C): the
 * decoder's (B,h,w,C) and the warp's (B,D,h,w,C).
 */
int ditto_nn_upsample_last(DittoBackend *be, const DittoTensor *x, DittoTensor *y);

/*
 * Sub-pixel convolutions: a 3x3 convolution (with kd leading depth taps)
 * after a nearest x2 upsampling of the last two spatial dims equals, for
 * each output parity (ry, rx), a 2x2 window of the input before the
 * upsampling with the 3x3 taps that land on the same source pixel summed.
 * The four parities run as one convolution of 4 O outputs, kernel
 * ([kd,] 2, 2), padding 1, at (h + 1, w + 1); ditto_nn_phase_interleave
 * makes the upsampled-size output from it. 4/9 of the multiply-adds on
 * large maps, and the outputs 4x wider (the decoder's SPADE mlp_shared,
 * the warp's hourglass up blocks).
 */
typedef struct DittoPhaseDims {
    int64_t o, c, kd;        /* outputs, inputs, depth taps (1 for 2-D) */
} DittoPhaseDims;
/* DittoLoaderMap (ctx a DittoPhaseDims): (O, C, [kd,] 3, 3) -> (4O, C, [kd,] 2, 2), parity (ry, rx) in rows (2ry + rx)O.., sums in double. */
void ditto_nn_phase_weights(void *ctx, const float *w, float *pw);
/*
 * y = relu(interleave(p) + bias): p the phase convolution's output (without
 * bias), (B,[D,]h+1,w+1,4C) channels-last (nhwc) or (B,4C,[D,]h+1,w+1); y
 * (B,[D,]2h,2w,C) or (B,C,[D,]2h,2w), contiguous. Parity (ry, rx) sits in
 * p's channels (2ry + rx)C.. at window offset (ry, rx):
 * y[.., 2qy+ry, 2qx+rx, c] = relu(p[.., qy+ry, qx+rx, (2ry+rx)C + c] + bias[c]),
 * one strided pass (bias_unary over an affine view of p). Channels-last 4-D
 * p may be a channel slice of a wider tensor (pixels more than 4C apart).
 */
int ditto_nn_phase_interleave(DittoBackend *be, bool nhwc, const DittoTensor *p, const DittoTensor *bias, DittoTensor *y);

/*
 * A model's activation layout when it is forced: set (0 channels-first, 1
 * channels-last) when >= 0, else the environment variable env reading
 * first or last (read once into *cache, which starts at -2), else -1 (the
 * model's own default).
 */
int ditto_nn_layout_forced(int set, const char *env, const char *first, const char *last, int *cache);

/*
 * 0 when t is a contiguous float32 tensor of exactly (ndim, shape) on be's
 * device; else DITTO_ERR_SHAPE, logged as "<what>: <name> is <shape>,
 * expected a contiguous float32 <shape> on the <backend> backend".
 */
int ditto_nn_check_tensor(DittoBackend *be, const char *what, const char *name, const DittoTensor *t, int ndim, const int64_t *shape);

#endif
