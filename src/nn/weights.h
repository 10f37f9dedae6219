/*
 * Binding checkpoint tensors to a network, strictly: every key a network asks
 * for must exist with exactly the expected shape, and every key under the
 * network's prefix must be asked for. Errors name the file, the key and both
 * shapes. Errors are sticky (loader->err), so a network's load function can
 * read like its state_dict, one ditto_loader_get() per line, and check once.
 */
#ifndef DITTO_NN_WEIGHTS_H
#define DITTO_NN_WEIGHTS_H

#include "backend/backend.h"
#include "weights/catalog.h"

#if defined(__GNUC__)
#define DITTO_LOADER_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DITTO_LOADER_PRINTF(a, b)
#endif

/* DITTO_SHAPE(64, 3, 3, 3) expands to the (ndim, shape) argument pair. */
#define DITTO_SHAPE(...) (int)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)), (const int64_t[]){ __VA_ARGS__ }

/* Owner of a network's parameter buffers on one backend. */
typedef struct DittoWeights {
    DittoBuffer *bufs;
    int n, cap;
    size_t bytes;
} DittoWeights;

void ditto_weights_free(DittoWeights *w);

typedef struct DittoLoader {
    DittoCatalog *cat;
    DittoBackend *be;
    DittoWeights *dst;
    const char *what;        /* network name for messages, e.g. "warp network" */
    char prefix[96];         /* prepended to every key, e.g. "retarget_shoulder." */
    bool strip_module;       /* ignore "module." substrings in checkpoint keys (DDP) */
    /*
     * Storage dtype of what get / get_sn / get_bn bind: DITTO_F32 (set by
     * ditto_loader_init) or DITTO_F16 (a network loading for be->act_dtype).
     * Checkpoint data is read as float32, spectral norms are folded in fp32,
     * then each tensor is rounded once (nearest even) to this dtype.
     * BatchNorm running_mean / running_var always stay float32 (statistics).
     */
    DittoDType dtype;
    /*
     * 4-D and 5-D tensors are convolution weights (O, C, k...) to store
     * channels-last, (O, k..., C), bound with those strides
     * (ditto_tensor_is_channels_last): what the CUDA backend's f16
     * convolutions read, with no relayout per call. Weights of at most 16
     * outputs stay (O, C, k...), the order of its few-output kernel. Off by
     * default (ditto_nn_conv_channels_last says when to set it).
     */
    bool conv_channels_last;
    int err;                 /* first error; later calls are no-ops */
} DittoLoader;

void ditto_loader_init(DittoLoader *l, DittoCatalog *cat, DittoBackend *be, DittoWeights *dst, const char *what, const char *prefix);

/* Entry for prefix+key, or NULL (no error logged). For deriving sizes from the checkpoint. */
const DittoCatalogEntry *ditto_loader_peek(DittoLoader *l, const char *fmt, ...) DITTO_LOADER_PRINTF(2, 3);
/*
 * Entry for prefix+key, which must exist with ndim dims, each in [1, INT32_MAX];
 * else NULL with a logged DITTO_ERR_KEY ("missing" / "has shape ..., expected
 * a N-d tensor") set in l->err. For deriving sizes from the checkpoint.
 */
const DittoCatalogEntry *ditto_loader_peek_rank(DittoLoader *l, int ndim, const char *fmt, ...) DITTO_LOADER_PRINTF(3, 4);
/* Dimension axis of prefix+key (as ditto_loader_peek_rank); 0 after an error. */
int64_t ditto_loader_dim(DittoLoader *l, int ndim, int axis, const char *fmt, ...) DITTO_LOADER_PRINTF(4, 5);
/* Bind prefix+key with exactly this shape as a tensor of l->dtype on the backend. */
int ditto_loader_get(DittoLoader *l, DittoTensor *out, int ndim, const int64_t *shape, const char *fmt, ...) DITTO_LOADER_PRINTF(5, 6);
/*
 * Bind n keys (prefix + keys[i], each exactly shape) as ONE tensor, concatenated
 * along dim 0 in key order: dim 0 is n * shape[0]. For convolutions that share
 * an input (SPADE's gamma and beta), so they run as one.
 */
int ditto_loader_get_cat(DittoLoader *l, DittoTensor *out, int n, const char *const *keys, int ndim, const int64_t *shape);
/*
 * Bind prefix+key (exactly shape) through a host transform: fn(ctx, in, out)
 * maps its float32 values to those of a tensor of out_shape, which is bound
 * in l->dtype (rounded once). For weights that are rearranged or combined at
 * load (the decoder's sub-pixel SPADE convolutions).
 */
typedef void (*DittoLoaderMap)(void *ctx, const float *in, float *out);
int ditto_loader_get_map(DittoLoader *l, DittoTensor *out, int ndim, const int64_t *shape, int out_ndim, const int64_t *out_shape,
                         DittoLoaderMap fn, void *ctx, const char *fmt, ...) DITTO_LOADER_PRINTF(9, 10);
/*
 * ditto_loader_get_cat of keys mapped one by one: each key (exactly shape)
 * goes through fn(ctx, in, out) to out_shape, and the n results are bound
 * as ONE tensor concatenated along dim 0 in key order (dim 0 is
 * n * out_shape[0]). The decoder's merged sub-pixel SPADE convolutions.
 */
int ditto_loader_get_cat_map(DittoLoader *l, DittoTensor *out, int n, const char *const *keys, int ndim, const int64_t *shape, int out_ndim,
                             const int64_t *out_shape, DittoLoaderMap fn, void *ctx);
/* Mark prefix+key as known without loading it (e.g. num_batches_tracked); missing is an error. */
int ditto_loader_skip(DittoLoader *l, const char *fmt, ...) DITTO_LOADER_PRINTF(2, 3);
/*
 * Spectral-norm weight: reads K.weight_orig (shape), K.weight_u (shape[0]) and
 * K.weight_v (prod shape[1:]) and binds W = weight_orig / sigma with
 * sigma = u . (W_mat v), W_mat = weight_orig as (out, in*k*k) (eval-time
 * torch.nn.utils.spectral_norm: no power iteration).
 */
int ditto_loader_get_sn(DittoLoader *l, DittoTensor *out, int ndim, const int64_t *shape, const char *fmt, ...) DITTO_LOADER_PRINTF(5, 6);
/*
 * A spectral-norm 1x1 convolution K1 (o, m, 1, 1) folded into the
 * convolution before it, K2w (shape2 = (m, ...)) with bias K2b (m), when
 * nothing lies between them: w (o, shape2[1:]...) = W1 W2 and b (o) = W1 b2,
 * summed in double from W1 folded as ditto_loader_get_sn folds it, bound in
 * l->dtype (rounded once). Keys as ditto_loader_get_cat's (the prefix
 * added). The decoder's shortcut: conv_s after mlp_beta.
 */
int ditto_loader_get_sn_product(DittoLoader *l, DittoTensor *w, DittoTensor *b, int64_t o, const char *k1, int ndim2, const int64_t *shape2,
                                const char *k2w, const char *k2b);
/* BatchNorm K.{weight,bias,running_mean,running_var} of size c (+ num_batches_tracked); weight, bias in l->dtype, running stats float32. */
typedef struct DittoBatchNorm {
    DittoTensor weight, bias, mean, var;
} DittoBatchNorm;
int ditto_loader_get_bn(DittoLoader *l, DittoBatchNorm *bn, int64_t c, const char *fmt, ...) DITTO_LOADER_PRINTF(4, 5);
/*
 * A convolution followed by an eval-mode BatchNorm, folded into one
 * convolution: reads conv_w (shape, out = shape[0]), conv_b (out; NULL: the
 * conv has no bias) and bn.{weight,bias,running_mean,running_var} (out; plus
 * num_batches_tracked when present), and binds w = conv_w * s and
 * b = (conv_b - mean) * s + bn.bias with s = bn.weight / sqrt(running_var +
 * eps) per output channel, computed in double from the checkpoint's float32
 * values and rounded once to l->dtype.
 */
int ditto_loader_get_conv_bn(DittoLoader *l, DittoTensor *w, DittoTensor *b, int ndim, const int64_t *shape, double eps, const char *conv_w,
                             const char *conv_b, const char *bn);
/* The same, the folded weight (float32, shape) then mapped by fn(ctx, in, out) to out_shape before it is bound (the warp's sub-pixel up blocks). */
int ditto_loader_get_conv_bn_map(DittoLoader *l, DittoTensor *w, DittoTensor *b, int ndim, const int64_t *shape, double eps,
                                 const char *conv_w, const char *conv_b, const char *bn, int out_ndim, const int64_t *out_shape,
                                 DittoLoaderMap fn, void *ctx);
/* Log "FILE: message (loading the NETWORK)" and make err sticky (first error wins). Returns l->err. */
int ditto_loader_fail(DittoLoader *l, int err, const char *fmt, ...) DITTO_LOADER_PRINTF(3, 4);
/* Every checkpoint key under the prefix must have been bound or skipped. Returns l->err. */
int ditto_loader_finish(DittoLoader *l);

#endif
