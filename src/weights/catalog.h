/*
 * Checkpoint catalog: every tensor of a file as {name, dtype, shape, strides,
 * byte offset} over a read-only memory mapping, without copying. Nested
 * dicts are flattened with '.' ("retarget_shoulder.mlp.0.weight",
 * "model_state_dict.input_projection.weight"). Readers (.pth today, .onnx
 * later) fill it; models bind entries by PyTorch key through src/nn/weights.h.
 */
#ifndef DITTO_WEIGHTS_CATALOG_H
#define DITTO_WEIGHTS_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "ditto/ditto_types.h"

typedef struct DittoMap {
    const uint8_t *data;   /* whole file, read-only */
    size_t size;
} DittoMap;

/* Map a file read-only; errors name the file. An empty file maps to size 0. */
int ditto_map_open(DittoMap *m, const char *path, const DittoLogger *log);
void ditto_map_close(DittoMap *m);

typedef struct DittoCatalogEntry {
    char *name;
    DittoDType dtype;
    int ndim;
    int64_t shape[DITTO_MAX_DIMS];
    int64_t stride[DITTO_MAX_DIMS];  /* elements; PyTorch strides, may be non-contiguous */
    uint64_t offset;                 /* file byte offset of element (0,...,0) */
    uint64_t span;                   /* bytes from offset covering every element (bounds-checked) */
    const void *data;                /* map.data + offset */
    bool used;                       /* bound by a model; strict loading checks the rest */
} DittoCatalogEntry;

typedef struct DittoCatalog {
    char *path;
    DittoMap map;
    DittoCatalogEntry *entries;
    size_t n;
    DittoLogger log;
} DittoCatalog;

/* Open a PyTorch .pth (zip + data.pkl). Errors are logged with the path and the problem. */
int ditto_catalog_open_pth(DittoCatalog **out, const char *path, const DittoLogger *log);
void ditto_catalog_close(DittoCatalog **c);

const DittoCatalogEntry *ditto_catalog_find(const DittoCatalog *c, const char *name);
/* Non-const variant for marking entries used. */
DittoCatalogEntry *ditto_catalog_get(DittoCatalog *c, const char *name);

/* Copy an entry (any dtype, any strides) to contiguous float32. */
int ditto_catalog_read_f32(const DittoCatalog *c, const DittoCatalogEntry *e, float *dst);

/* Total element count / bytes of an entry. */
int64_t ditto_catalog_entry_numel(const DittoCatalogEntry *e);
uint64_t ditto_catalog_entry_nbytes(const DittoCatalogEntry *e);

/*
 * Open a .pth held in memory, not copied (data must outlive the catalog);
 * `name` stands for the file in messages. For tests and fuzzing.
 */
int ditto_catalog_open_pth_memory(DittoCatalog **out, const void *data, size_t size, const char *name, const DittoLogger *log);

/* ---- reader side: pth.c (and later onnx.c) fill a catalog through these ---- */

/* Empty catalog over *map; with owns_map it unmaps on close (also when this call fails). */
int ditto_catalog_create(DittoCatalog **out, const char *path, const DittoMap *map, bool owns_map, const DittoLogger *log);
/* Empty catalog over a heap block (ditto_malloc_aligned), which it frees on close (also when this call fails). */
int ditto_catalog_create_heap(DittoCatalog **out, const char *path, void *block, size_t size, const DittoLogger *log);
/* Append a copy of *e (the name is copied); e->data must point into the map and be bounds-checked. */
int ditto_catalog_add(DittoCatalog *c, const DittoCatalogEntry *e);
/* Hand an extra heap block (ditto_malloc_aligned) to c, freed at close (also when this call fails); entries may point into it. */
int ditto_catalog_adopt_block(DittoCatalog *c, void *block);
/* Hand an extra read-only mapping (an ONNX external data file) to c, unmapped at close (also when this call fails). */
int ditto_catalog_adopt_map(DittoCatalog *c, const DittoMap *m);
/* After the last add: index names for lookup; a duplicate name is an error naming the file and the key. */
int ditto_catalog_finish(DittoCatalog *c);

#endif
