/*
 * The renderer networks (ditto-architecture.md 5.2-5.6). One file per
 * network in src/models/. Each network:
 *   - loads strictly from its official .pth catalog (channel counts and depths
 *     come from the checkpoint shapes, so reduced test checkpoints and the
 *     full-size official ones load through the same code),
 *   - runs on any backend through the op table, batch B >= 1, each item
 *     giving the same result it would alone,
 *   - takes scratch memory from a caller's arena (released before return)
 *     and writes into caller-allocated outputs (shape from *_out_shape),
 *   - can report named intermediates to a tap (for parity debugging; names
 *     follow the fixture manifest's "intermediates").
 * Weights are immutable after load; forward calls on one network object
 * must not run concurrently (they share the backend's thread pool).
 *
 * Precision: a network loaded on a backend with act_dtype F16 (CUDA,
 * DittoBackendParams.fp16) stores its conv/linear weights, biases and norm
 * affines in float16 and its activations in float16, with fp32 math inside
 * every op; BatchNorm running statistics, keypoints, coordinate grids,
 * sparse motions, the softmax mask and the deformation stay float32. Per
 * network:
 *   appearance: image float32 or act; f_s float32 or act (act for the warp).
 *   motion:     image float32 or act; outputs float32 (the final norm and the
 *               heads run in float32).
 *   warp:       f_s act, kp float32, out act.
 *   decoder:    feature act, img float32 or act.
 *   stitch:     float32 throughout.
 * With act_dtype F32 (always on the CPU) everything is float32, as before.
 */
#ifndef DITTO_MODELS_MODELS_H
#define DITTO_MODELS_MODELS_H

#include "backend/backend.h"
#include "core/buffer.h"
#include "weights/catalog.h"

typedef struct DittoTap {
    void (*fn)(void *ctx, const char *name, const DittoTensor *t);
    void *ctx;
} DittoTap;

/* Report an intermediate if a tap is set (no-op otherwise). */
static inline void ditto_tap(const DittoTap *tap, const char *name, const DittoTensor *t)
{
    if (tap && tap->fn)
        tap->fn(tap->ctx, name, t);
}

/* ---- AppearanceFeatureExtractor (F): appearance_extractor.pth ---- */
typedef struct DittoAppearance DittoAppearance;
int ditto_appearance_load(DittoAppearance **out, DittoBackend *be, DittoCatalog *cat);
void ditto_appearance_free(DittoAppearance **m);
/* image (B,3,H,W) in [0,1] -> f_s (B, C, D, H/4, W/4) (full size: (B,32,16,64,64)) */
int ditto_appearance_out_shape(const DittoAppearance *m, const DittoTensor *image, int64_t shape[5]);
int ditto_appearance_forward(DittoAppearance *m, DittoArena *ws, const DittoTensor *image, DittoTensor *f_s, const DittoTap *tap);

/* ---- MotionExtractor (M): motion_extractor.pth ---- */
typedef struct DittoMotionExtractor DittoMotionExtractor;
typedef struct DittoMotionInfo {
    DittoTensor pitch, yaw, roll;   /* (B,66) bin logits */
    DittoTensor t;                  /* (B,3) */
    DittoTensor exp;                /* (B,63) */
    DittoTensor scale;              /* (B,1) */
    DittoTensor kp;                 /* (B,63) */
} DittoMotionInfo;
int ditto_motion_extractor_load(DittoMotionExtractor **out, DittoBackend *be, DittoCatalog *cat);
void ditto_motion_extractor_free(DittoMotionExtractor **m);
/* Output widths (66, 66, 66, 3, 63, 1, 63 at full size) as read from the checkpoint, in DittoMotionInfo order. */
void ditto_motion_extractor_dims(const DittoMotionExtractor *m, int64_t dims[7]);
/* image (B,3,H,W) in [0,1] -> info (each tensor caller-allocated (B, dim)) */
int ditto_motion_extractor_forward(DittoMotionExtractor *m, DittoArena *ws, const DittoTensor *image, DittoMotionInfo *info, const DittoTap *tap);

/* ---- WarpingNetwork (W): warp_network.pth ---- */
typedef struct DittoWarp DittoWarp;
int ditto_warp_load(DittoWarp **out, DittoBackend *be, DittoCatalog *cat);
void ditto_warp_free(DittoWarp **m);
/* f_s (B,C,D,H,W), kp (B,21,3) -> (B, C_out, H, W) (full size: (B,256,64,64)) */
int ditto_warp_out_shape(const DittoWarp *m, const DittoTensor *f_s, int64_t shape[4]);
int ditto_warp_forward(DittoWarp *m, DittoArena *ws, const DittoTensor *f_s, const DittoTensor *kp_source, const DittoTensor *kp_driving,
                       DittoTensor *out, const DittoTap *tap);
/*
 * Without taps, items run in chunks whose activations fit in bytes (0: the
 * default, 320 MiB); results do not depend on it. For tests.
 */
void ditto_warp_set_budget(DittoWarp *m, size_t bytes);

/* ---- SPADEDecoder (G): decoder.pth ---- */
typedef struct DittoDecoder DittoDecoder;
int ditto_decoder_load(DittoDecoder **out, DittoBackend *be, DittoCatalog *cat);
void ditto_decoder_free(DittoDecoder **m);
/* feature (B,C,H,W) -> img (B,3,H*8,W*8) in [0,1] (full size: (B,256,64,64) -> (B,3,512,512)) */
int ditto_decoder_out_shape(const DittoDecoder *m, const DittoTensor *feature, int64_t shape[4]);
int ditto_decoder_forward(DittoDecoder *m, DittoArena *ws, const DittoTensor *feature, DittoTensor *img, const DittoTap *tap);
/*
 * Without taps, the up blocks run on chunks of items whose activations fit in
 * bytes (0: the default, 256 MiB, or DITTO_DECODER_BUDGET_MB at load);
 * results do not depend on it. For tests.
 */
void ditto_decoder_set_up_budget(DittoDecoder *m, size_t bytes);
/*
 * Activation layout of the forward: -1 automatic (channels-last on CUDA with
 * f16 activations, else NCHW; DITTO_DECODER_LAYOUT=nchw|nhwc, read once,
 * overrides the automatic choice for measurements), 0 NCHW, 1 channels-last
 * (NHWC). Outputs agree within rounding (bit for bit on the CPU). For tests.
 */
void ditto_decoder_set_layout(DittoDecoder *m, int nhwc);
/*
 * The SPADEs' mlp_shared convolutions that read the same map, merged into
 * one per map (G_middle's twelve, each up block's three) in the channels-last
 * forward: -1 DITTO_DECODER_MERGE (read once; unset: 1), 0 never, 1 where
 * the backend runs spade_conv fused (CUDA f16 on Hopper), 2 always (any
 * backend, channels-last only). Outputs agree within rounding. For tests.
 */
void ditto_decoder_set_merge(DittoDecoder *m, int mode);

/*
 * Warp then decoder of items [a, a + n) of the batch tensors f_s, kp_source,
 * kp_driving -> feature -> img (each (B, ...)), scratch from ws: one half of
 * a batch on a backend lane (ditto_backend_halves).
 */
int ditto_warp_decode_items(DittoWarp *w, DittoDecoder *d, DittoArena *ws, const DittoTensor *f_s, const DittoTensor *kp_source,
                            const DittoTensor *kp_driving, DittoTensor *feature, DittoTensor *img, int64_t a, int64_t n);

/* ---- StitchingNetwork (S): stitch_network.pth ('retarget_shoulder' MLP) ---- */
typedef struct DittoStitch DittoStitch;
int ditto_stitch_load(DittoStitch **out, DittoBackend *be, DittoCatalog *cat);
void ditto_stitch_free(DittoStitch **m);
/* kp_source, kp_driving (B,21,3) -> kp_driving_new (B,21,3) */
int ditto_stitch_forward(DittoStitch *m, DittoArena *ws, const DittoTensor *kp_source, const DittoTensor *kp_driving, DittoTensor *kp_new,
                         const DittoTap *tap);

#endif
