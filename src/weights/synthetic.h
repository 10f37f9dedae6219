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

/* Build an in-memory catalog for net (full: official shapes; else small). */
int ditto_synthetic_catalog(DittoCatalog **out, DittoNetKind net, bool full_size, uint64_t seed, const DittoLogger *log);

#endif
