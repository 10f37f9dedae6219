/*
 * LMDM denoiser (MotionDecoder, ditto-architecture.md 5.7): lmdm_v0.4_hubert.pth.
 *
 * The network predicts the clean motion x0 from a noisy motion x (B,L,265),
 * the conditioning frame kp_cond (B,265), the per-frame audio conditions
 * (B,L,1103) and the diffusion step t. This module exposes it the way the
 * DDIM sampler (src/pipeline/ddim.h) uses it:
 *
 *   1. ditto_lmdm_cond_init(): once per batch of windows, everything that
 *      depends on the audio but not on x or t: cond_projection, the two
 *      cond_encoder layers, the pooled condition, norm_cond of the condition
 *      tokens and their cross-attention keys/values in every decoder layer.
 *      The unconditioned pass gets the learned null embeddings instead; its
 *      cond_projection/cond_encoder are never run (upstream runs and discards
 *      them, spec 8.3).
 *   2. ditto_lmdm_denoise(): per DDIM step, the guided prediction
 *      G = U + 2 (C - U), with the conditioned (C) and unconditioned (U)
 *      passes batched through the decoder stack as one batch of 2B. Only the
 *      time-dependent parts are computed per step: time embedding, FiLM
 *      parameters, the two time tokens' keys/values, the decoder stack.
 *
 * Sizes (latent width, FFN width, layer counts, feature widths, window
 * length) come from the checkpoint; the number of attention heads is not
 * stored there and comes from DittoLmdmParams (8 for the official file).
 *
 * Memory: weights are owned by the model and immutable after load. Scratch
 * comes from the caller's arena; ditto_lmdm_cond_init() leaves its state in
 * the arena (the caller releases it after the last step), every other call
 * releases what it took before returning (also on error). Outputs are
 * caller-allocated. Calls on one model must not run concurrently.
 */
#ifndef DITTO_MODELS_LMDM_H
#define DITTO_MODELS_LMDM_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/buffer.h"
#include "models/models.h"
#include "weights/catalog.h"

/* Diffusion steps the network was trained with (t = 0..999). */
#define DITTO_LMDM_T 1000
/* Classifier-free guidance weight, hard-coded upstream (guidance_weight). */
#define DITTO_LMDM_GUIDANCE 2.0f

typedef struct DittoLmdm DittoLmdm;

typedef struct DittoLmdmParams {
    int num_heads;         /* attention heads; not in the checkpoint (official: 8 of 64 dims) */
} DittoLmdmParams;

/* num_heads = 8. */
void ditto_lmdm_params_default(DittoLmdmParams *p);

/* Sizes read from the checkpoint (official values in brackets). */
typedef struct DittoLmdmDims {
    int64_t nfeats;        /* motion width F [265] */
    int64_t seq_len;       /* frames per window L [80] */
    int64_t latent;        /* D [512] */
    int64_t ff;            /* FFN width [1024] */
    int64_t cond_dim;      /* condition width [1103] */
    int64_t time_hidden;   /* time MLP width [2048] */
    int layers;            /* decoder layers [8] */
    int enc_layers;        /* cond encoder layers [2] */
    int heads;             /* attention heads [8] (from the params) */
} DittoLmdmDims;

/*
 * Load from the catalog of lmdm_v0.4_hubert.pth ({'model_state_dict': ...}).
 * Strict: a missing, unknown or mis-shaped key (another network's file)
 * fails with DITTO_ERR_KEY and a logged message naming the key; a head count
 * that does not divide the latent width fails with DITTO_ERR_INVAL; rotary
 * buffers that differ from each other give DITTO_ERR_FORMAT.
 * p may be NULL (defaults). Returns 0 or a negative code; *out is NULL on error.
 */
int ditto_lmdm_load(DittoLmdm **out, DittoBackend *be, DittoCatalog *cat, const DittoLmdmParams *p);
/* Accepts NULL and *m == NULL; sets *m to NULL. */
void ditto_lmdm_free(DittoLmdm **m);
const DittoLmdmDims *ditto_lmdm_dims(const DittoLmdm *m);
DittoBackend *ditto_lmdm_backend(const DittoLmdm *m);

/*
 * Audio-dependent state of B windows (step 1 above). The tensors live in the
 * arena given to ditto_lmdm_cond_init(); keep the arena (and kp_cond) alive
 * and unreleased while denoising with it. Index 0 of the pass axis is the
 * conditioned pass, index 1 the unconditioned one.
 */
typedef struct DittoLmdmCond {
    int64_t batch;           /* B */
    DittoTensor cond_frame;  /* (B, F) view of the caller's kp_cond */
    DittoTensor ch;          /* (2, B, D) pooled condition: [0] from the audio, [1] null_cond_hidden */
    DittoTensor mem_k;       /* (layers, 2, B, L+2, D) cross-attention keys; frames L, L+1 (time tokens) rewritten per step */
    DittoTensor mem_v;       /* (layers, 2, B, L+2, D) cross-attention values */
} DittoLmdmCond;

/*
 * kp_cond (B, F), cond (B, L, cond_dim), contiguous, on the model's backend.
 * Taps: "cond_tokens" (B, L, D) encoder output, "cond_hidden" (B, D).
 */
int ditto_lmdm_cond_init(DittoLmdm *m, DittoArena *ws, const DittoTensor *kp_cond, const DittoTensor *cond, DittoLmdmCond *st,
                         const DittoTap *tap);

/*
 * Guided x0 prediction for every window: x_start = U + 2 (C - U).
 * x (B, L, F) and x_start (B, L, F) contiguous; x_start must not alias x.
 * times: ntimes == 1 (every window at the same step) or ntimes == B (one per
 * window), each in [0, DITTO_LMDM_T). Taps: "x_start_cond" and
 * "x_start_uncond" (B, L, F), the two passes.
 */
int ditto_lmdm_denoise(DittoLmdm *m, DittoArena *ws, DittoLmdmCond *st, const DittoTensor *x, const int *times, int ntimes,
                       DittoTensor *x_start, const DittoTap *tap);

#endif
