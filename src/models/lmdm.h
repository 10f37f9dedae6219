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
 *   2. ditto_lmdm_steps_init(): once per batch of windows and schedule,
 *      everything that depends on the time steps (and the pooled condition)
 *      but not on x: the time MLP, the FiLM scales/shifts of every layer and
 *      step, the time tokens' cross-attention keys/values.
 *   3. ditto_lmdm_denoise_step(): per DDIM step, the x0 predictions of the
 *      conditioned (C) and unconditioned (U) passes, batched through the
 *      decoder stack window-major (each window's two passes are one GEMM
 *      item of 2L rows); the caller applies the guidance G = U + 2 (C - U)
 *      (ditto_op_ddim_step does it with the DDIM update).
 *   ditto_lmdm_denoise() is the one-call form for arbitrary times (one per
 *   window): it builds the time tables of those times and returns G.
 *
 * Sizes (latent width, FFN width, layer counts, feature widths, window
 * length) come from the checkpoint; the number of attention heads is not
 * stored there and comes from DittoLmdmParams (8 for the official file).
 *
 * Memory: weights are owned by the model and immutable after load. Scratch
 * comes from the caller's arena; ditto_lmdm_cond_init() and
 * ditto_lmdm_steps_init() leave their state in the arena (the caller
 * releases it after the last step; a failing init releases its own part),
 * every other call releases what it took before returning (also on error).
 * Outputs are caller-allocated. Calls on one model must not run
 * concurrently.
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
    /*
     * The decoder stack's linears with TF32 products (DittoLinearParams.tf32:
     * tensor cores on the GPU) on TF32 operands: their weights are rounded
     * to TF32 at load and their inputs where they are made (tf32_out), so
     * every backend forms the CPU oracle's products. The input projection,
     * the final layer and the once-per-window work (conditions, time
     * tables) stay float32. Off: float32 throughout (fixtures, parity).
     * Off the CPU these TF32 operands are held as float16 (weights copied
     * at load, activations written so): the same values in float16's
     * normal range, which load-time bounds from the weights guarantee
     * (else float32 storage); values under 2^-14 keep fewer bits.
     */
    bool tf32;
} DittoLmdmParams;

/* num_heads = 8, tf32 off. */
void ditto_lmdm_params_default(DittoLmdmParams *p);

/* Whether the decoder's TF32 operands are held as float16 (DittoLmdmParams.tf32 off the CPU, within bounds). */
bool ditto_lmdm_f16_operands(const DittoLmdm *m);

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
 * State of B windows: what depends on the audio (ditto_lmdm_cond_init) and
 * on the time steps (ditto_lmdm_steps_init). The tensors live in the arena
 * given to those calls; keep the arena (and kp_cond) alive and unreleased
 * while denoising with it. Layouts are window-major: index b of the window
 * axis, then the pass axis, whose index 0 is the conditioned pass and 1 the
 * unconditioned one.
 */
typedef struct DittoLmdmCond {
    int64_t batch;           /* B */
    DittoTensor cond_frame;  /* (B, F) view of the caller's kp_cond */
    DittoTensor ch;          /* (B, 2, D) pooled condition: [b,0] from the audio, [b,1] null_cond_hidden */
    DittoTensor mem;         /* (2, layers, B, 2, L+2, D) cross-attention keys [0] and values [1] of norm_cond(concat(c, tt)) */
    DittoTensor mem_k;       /* (layers, B, 2, L+2, D) = mem[0]; rows L, L+1 (time tokens) are rewritten per step */
    DittoTensor mem_v;       /* (layers, B, 2, L+2, D) = mem[1] */
    /* ditto_lmdm_steps_init(); nsteps is 0 before */
    int nsteps;              /* S */
    DittoTensor film;        /* (B, S, 2, layers, 3, 2D): FiLM j of each layer per window, step and pass: [1 + scale_j | shift_j] */
    DittoTensor time_kv;     /* (2, layers, S, 2, D): keys [0] and values [1] of the two time tokens per layer and step */
} DittoLmdmCond;

/*
 * kp_cond (B, F), cond (B, L, cond_dim), contiguous, on the model's backend.
 * Taps: "cond_tokens" (B, L, D) encoder output, "cond_hidden" (B, D).
 */
int ditto_lmdm_cond_init(DittoLmdm *m, DittoArena *ws, const DittoTensor *kp_cond, const DittoTensor *cond, DittoLmdmCond *st,
                         const DittoTap *tap);

/*
 * Time tables of a schedule for the windows of st (after
 * ditto_lmdm_cond_init): step i of ditto_lmdm_denoise_step() runs at
 * times[i], i in [0, nsteps), each in [0, DITTO_LMDM_T). Device work only
 * (no transfer), so it can be captured with the steps. Memory: about
 * B * nsteps * layers * 48 D bytes (9.8 MB for the official size, 50 steps,
 * one window). Returns 0, DITTO_ERR_RANGE for a bad step (st unchanged),
 * op errors (st then has no tables: nsteps 0).
 */
int ditto_lmdm_steps_init(DittoLmdm *m, DittoArena *ws, DittoLmdmCond *st, const int *times, int nsteps);

/*
 * Both passes' x0 predictions of every window at step `step` of
 * ditto_lmdm_steps_init(): x (B, L, F) -> out (B, 2, L, F) contiguous, out[b,0]
 * conditioned, out[b,1] unconditioned (unguided; out must not alias x).
 * Taps: "x_start_cond" and "x_start_uncond" (B, L, F).
 */
int ditto_lmdm_denoise_step(DittoLmdm *m, DittoArena *ws, DittoLmdmCond *st, const DittoTensor *x, int step, DittoTensor *out,
                            const DittoTap *tap);

/*
 * Guided x0 prediction for every window: x_start = U + 2 (C - U), at any
 * times (the time tables are built per call; ditto_lmdm_steps_init is not
 * needed). x (B, L, F) and x_start (B, L, F) contiguous; x_start must not
 * alias x. times: ntimes == 1 (every window at the same step) or ntimes == B
 * (one per window), each in [0, DITTO_LMDM_T). Taps: "x_start_cond" and
 * "x_start_uncond" (B, L, F), the two passes.
 */
int ditto_lmdm_denoise(DittoLmdm *m, DittoArena *ws, DittoLmdmCond *st, const DittoTensor *x, const int *times, int ntimes,
                       DittoTensor *x_start, const DittoTap *tap);

#endif
