/*
 * Pieces of the WarpingNetwork (ditto-architecture.md 5.1, 5.4) exposed for
 * the function-level fixture cases (fn_make_coordinate_grid, fn_kp2gaussian,
 * fn_grid_sample_3d) and for tests. Not part of the public API.
 */
#ifndef DITTO_MODELS_WARP_INTERNAL_H
#define DITTO_MODELS_WARP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/buffer.h"
#include "core/tensor.h"
#include "models/models.h"

/* Variance of the keypoint Gaussians (kp2gaussian's kp_variance). */
#define DITTO_WARP_KP_VARIANCE 0.01

/*
 * make_coordinate_grid((d, h, w)) on the host, float32 (d, h, w, 3):
 * out[z][y][x] = (2x/(w-1) - 1, 2y/(h-1) - 1, 2z/(d-1) - 1), computed in
 * double and rounded once. Every size must be >= 2 (upstream divides by
 * size - 1); returns DITTO_ERR_SHAPE otherwise.
 */
int ditto_warp_coordinate_grid(float *out, int64_t d, int64_t h, int64_t w);

/*
 * kp2gaussian: kp (B,K,3), grid (D,H,W,3) on the backend ->
 * out (B,K,D,H,W) = exp(-0.5 * sum_xyz (grid - kp)^2 / variance).
 * Scratch from ws (released before return); out contiguous, caller-allocated.
 */
int ditto_warp_kp2gaussian(DittoBackend *be, DittoArena *ws, const DittoTensor *grid, const DittoTensor *kp, double variance,
                           DittoTensor *out);

/*
 * F.grid_sample(x, grid, align_corners=False) as the warp network calls it:
 * x (N,C,D,H,W), grid (N,Do,Ho,Wo,3) with (x->W, y->H, z->D), trilinear, zero
 * padding -> y (N,C,Do,Ho,Wo).
 */
int ditto_warp_grid_sample(DittoBackend *be, const DittoTensor *x, const DittoTensor *grid, DittoTensor *y);

/*
 * ditto_warp_load with the BatchNorm folding chosen: fold_bn true is
 * ditto_warp_load; false keeps each norm (and the ReLU after it) as ops of
 * their own, for the test that folding changes results by rounding only.
 */
int ditto_warp_load_ex(DittoWarp **out, DittoBackend *be, DittoCatalog *cat, bool fold_bn);

/*
 * At most items items per run of the hourglass's deep levels when the
 * forward goes in chunks (0: the default, 8), for the test that grouping
 * changes no bits.
 */
void ditto_warp_set_group(DittoWarp *m, int64_t items);

/*
 * The hourglass's activation layout: 1 channels-last (NDHWC), 0 NCDHW, -1
 * the default (channels-last on CUDA with f16 activations; DITTO_WARP_LAYOUT
 * = ncdhw|ndhwc overrides it). Channels-last needs the folded norms
 * (ditto_warp_load); unfolded ones keep NCDHW. For the test that both
 * layouts give the same results.
 */
void ditto_warp_set_layout(DittoWarp *m, int nhwc);

/*
 * Whether networks loaded from now on pad the hourglass's odd channel
 * counts for the channels-last layout: 1 always (any backend, dtype and
 * weight layout), 0 never, -1 the default (CUDA with f16 activations and
 * channels-last weights). For the test of the padding on the CPU.
 */
void ditto_warp_force_channel_pad(int on);

/*
 * Hourglass up blocks that networks loaded from now on run plain (nearest
 * x2, then the 3x3x3 convolution), the deepest first; the rest run as
 * sub-pixel convolutions (folded norms only). 0: none plain, 99: all, -1:
 * the default (DITTO_WARP_PHASE, else 2). For the test that the sub-pixel
 * form computes the plain one's function.
 */
void ditto_warp_force_phase(int plain);

/* Whether m was loaded with the hourglass's odd channel counts padded. */
bool ditto_warp_channels_padded(const DittoWarp *m);

#endif
