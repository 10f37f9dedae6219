/*
 * Allow-listed pickle interpreter for the data.pkl of torch.save(state_dict):
 * protocols 2..5, containers, numbers, strings, memo, persistent storage ids,
 * and REDUCE only on collections.OrderedDict and torch._utils rebuild
 * functions. Any other global or opcode is an error; nothing is ever
 * imported or called. The resulting tree (dict -> dict -> tensor) is
 * flattened with '.' and every tensor handed to a callback.
 */
#ifndef DITTO_WEIGHTS_PICKLE_H
#define DITTO_WEIGHTS_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "ditto/ditto_types.h"

typedef struct DittoPickleTensor {
    const char *name;          /* flattened key ("retarget_shoulder.mlp.0.weight"), NUL-terminated */
    DittoDType dtype;          /* from the storage class */
    const char *storage_type;  /* "FloatStorage", for messages */
    const char *storage_key;   /* persistent id key: the archive holds "<prefix>/data/<key>" */
    uint64_t storage_numel;    /* elements of the storage, as the persistent id states */
    uint64_t storage_offset;   /* elements */
    int ndim;
    int64_t shape[DITTO_MAX_DIMS];
    int64_t stride[DITTO_MAX_DIMS];  /* elements, >= 0 */
} DittoPickleTensor;

/* Return 0 to go on, or a negative code (already logged) to stop. Pointers are valid during the call only. */
typedef int (*DittoPickleTensorFn)(void *ctx, const DittoPickleTensor *t);

/*
 * Run data.pkl and call fn for every tensor reachable from the top-level dict,
 * in file order; non-tensor leaves are skipped. Errors are logged as one line
 * "<file>: data.pkl: <problem>" (DITTO_ERR_FORMAT, DITTO_ERR_UNSUPPORTED,
 * DITTO_ERR_NOMEM), or returned unchanged from fn.
 */
int ditto_pickle_tensors(const uint8_t *data, size_t size, const char *file, const DittoLogger *log, DittoPickleTensorFn fn, void *ctx);

#endif
