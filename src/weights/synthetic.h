/*
 * Synthetic checkpoints: deterministic random weights generated in C, with
 * the official state_dict keys and shapes (full size) or the same structure
 * at reduced widths (small), so every network and the whole pipeline run
 * without downloads (CI, demos, benchmarks). The values follow the fixture
 * generator's scheme (conv/linear N(0, 1/fan_in), biases 0.1 N(0,1), norm
 * weights 1 + 0.2 N(0,1), BN running_var U(0.5, 1.5), ...), so activations
 * stay in a sane range; the output of a synthetic model is noise, not a face.
 */
#ifndef DITTO_WEIGHTS_SYNTHETIC_H
#define DITTO_WEIGHTS_SYNTHETIC_H

#include <stdbool.h>
#include <stdint.h>

#include "weights/catalog.h"

typedef enum DittoNetKind {
    DITTO_NET_APPEARANCE = 0,  /* appearance_extractor.pth */
    DITTO_NET_MOTION,          /* motion_extractor.pth */
    DITTO_NET_WARP,            /* warp_network.pth */
    DITTO_NET_DECODER,         /* decoder.pth */
    DITTO_NET_STITCH,          /* stitch_network.pth */
    DITTO_NET_COUNT
} DittoNetKind;

const char *ditto_net_file_name(DittoNetKind net);   /* official file name */

/*
 * Sizes. The values match DittoRegistrarConfig.synthetic (avatar.h).
 *   FULL   the official key sets and shapes
 *   SMALL  the same structure at reduced widths (quick model tests)
 *   TINY   the cheapest configuration that keeps the official spatial
 *          pipeline (256 crop -> f_s (4, 2, 64, 64) -> warp (8, 64, 64) ->
 *          decoder -> 512 x 512) and the LMDM's real window (80 frames x
 *          265) and condition width (1103), at a few channels: a whole
 *          clip renders on two CPU cores in about real time. For CI, demos
 *          without checkpoints and end-to-end tests; the output is noise.
 */
typedef enum DittoSyntheticSize {
    DITTO_SYNTH_FULL = 1,
    DITTO_SYNTH_SMALL = 2,
    DITTO_SYNTH_TINY = 3,
} DittoSyntheticSize;

/* Build an in-memory catalog for net (full: official shapes; else small). */
int ditto_synthetic_catalog(DittoCatalog **out, DittoNetKind net, bool full_size, uint64_t seed, const DittoLogger *log);
/* The same at any size. DITTO_ERR_INVAL for an unknown net or size. */
int ditto_synthetic_catalog_size(DittoCatalog **out, DittoNetKind net, DittoSyntheticSize size, uint64_t seed, const DittoLogger *log);

/*
 * The LMDM denoiser (lmdm_v0.4_hubert.pth, keys under "model_state_dict.",
 * 2 cond_encoder layers): full (D 512, 8 layers), small (D 128, 4 layers),
 * tiny (D 64, FFN 128, time MLP 256, 2 layers). Load it with
 * ditto_synthetic_lmdm_heads(size) attention heads (not in the checkpoint).
 */
int ditto_synthetic_lmdm_catalog(DittoCatalog **out, DittoSyntheticSize size, uint64_t seed, const DittoLogger *log);
int ditto_synthetic_lmdm_heads(DittoSyntheticSize size);

#endif
