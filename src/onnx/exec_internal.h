/*
 * Executor internals shared by exec.c (graph, values, memory plan) and the
 * op files (ox_elementwise.c, ox_shape.c, ox_nn.c).
 *
 * Values: every tensor of the graph. Storage is float32 for float types and
 * int64 for integer and bool types, always contiguous. `host` marks values
 * computed by the executor's own C loops (integers, shape arithmetic, small
 * float tensors derived from them) and constants; the others live on the
 * backend's device. On the CPU backend both are the same memory, so ox_dev()
 * and ox_host() are plain views; on a device backend they transfer.
 */
#ifndef DITTO_ONNX_EXEC_INTERNAL_H
#define DITTO_ONNX_EXEC_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/log.h"
#include "onnx/onnx_exec.h"
#include "ops/ops.h"

typedef struct OxValue {
    const char *name;
    int producer;              /* node index, -1 for initializers and graph inputs */
    int graph_input;           /* index in model->inputs, or -1 */
    const DittoCatalogEntry *init;  /* initializer, or NULL */
    bool is_const;             /* initializer, Constant, or folded at open */
    bool is_output;            /* graph output: never released within a run */
    int nuses;                 /* input slots of per-run nodes reading it */
    int nreaders;              /* input slots of every needed node (folded ones too) */
    /* contents */
    bool set;
    DittoDType type;           /* ONNX element type */
    DittoTensor t;             /* storage: F32 or I64, contiguous */
    bool host;                 /* host value (see above) */
    int block;                 /* memory-plan block, -1 when none (constants, caller inputs) */
    int uses_left;
    /* constant storage (owned) */
    DittoBuffer cbuf;          /* host copy */
    DittoBuffer cdev;          /* device copy (device backends, float constants) */
    DittoTensor dev;           /* device view of a constant (== t on the CPU) */
} OxValue;

typedef struct OxNode OxNode;
typedef int (*OxRunFn)(DittoOnnxRunner *r, const OxNode *n);

typedef struct OxOpDef {
    const char *name;
    OxRunFn run;
} OxOpDef;

struct OxNode {
    const DittoOnnxNode *src;
    int index;                 /* in model->nodes */
    const OxOpDef *def;
    int nin, nout;
    int *in;                   /* value index, -1 for an omitted input */
    int *out;                  /* value index, -1 for an omitted output */
    bool needed, folded;
};

typedef struct OxBlock {
    void *ptr;
    size_t size;
    int refs;                  /* values (and temporaries) holding it; 0 = on the free list */
} OxBlock;

struct DittoOnnxRunner {
    const DittoOnnxModel *model;
    DittoBackend *be;
    const DittoLogger *log;
    DittoOnnxRunnerParams params;
    int64_t opset;
    OxValue *vals;
    int nvals;
    int *hash;                 /* open addressing over vals by name, -1 empty */
    size_t hash_cap;
    OxNode *nodes;
    int nnodes;
    int *order;                /* evaluation order (topological), all nodes */
    int *run;                  /* per-run nodes, in order */
    int nrun, nfolded, ndead;
    size_t const_bytes;
    /* per run */
    bool folding;              /* open: node outputs become constants */
    DittoArena *ws;
    DittoArena host_arena;     /* host scratch on device backends */
    bool host_arena_init;
    OxBlock *blocks;
    int nblocks, capblocks;
    int *temps;                /* blocks of the current node's temporaries */
    int ntemps, captemps;
    size_t run_bytes;
};

/* ---- helpers for op implementations (exec.c) ---- */

static inline bool ox_is_float(DittoDType t)
{
    return t == DITTO_F32 || t == DITTO_F16 || t == DITTO_BF16 || t == DITTO_F64;
}

static inline DittoDType ox_storage(DittoDType t)
{
    return ox_is_float(t) ? DITTO_F32 : DITTO_I64;
}

/* Log "model: node 'name' (#i Op): msg" and return err. */
int ox_fail(DittoOnnxRunner *r, const OxNode *n, int err, const char *fmt, ...) DITTO_PRINTF(4, 5);

/* Input i of n, NULL when omitted or beyond the node's inputs (an empty tensor counts as present). */
OxValue *ox_in(DittoOnnxRunner *r, const OxNode *n, int i);
/* Input i, required: NULL after logging an error. */
OxValue *ox_need(DittoOnnxRunner *r, const OxNode *n, int i);
/* Whether output k is wanted (named and consumed or a graph output). */
bool ox_out_used(DittoOnnxRunner *r, const OxNode *n, int k);

/* Allocate output k: type (ONNX), shape, host or device. *t receives the storage view. */
int ox_alloc(DittoOnnxRunner *r, const OxNode *n, int k, DittoDType type, int ndim, const int64_t *shape, bool host, DittoTensor *t);
/* Output k as a view of src's storage with another shape (same element count) and type of the same storage. */
int ox_alias(DittoOnnxRunner *r, const OxNode *n, int k, const OxValue *src, int ndim, const int64_t *shape, DittoDType type);
/* Output k as a view of src's storage starting `offset` elements in (contiguous sub-block). */
int ox_alias_at(DittoOnnxRunner *r, const OxNode *n, int k, const OxValue *src, int64_t offset, int ndim, const int64_t *shape);
/*
 * Output k reusing input src's buffer when src dies at this node and has
 * exactly this shape and storage (element-wise ops). Returns 1 and fills *t,
 * or 0 (then allocate).
 */
int ox_try_inplace(DittoOnnxRunner *r, const OxNode *n, int k, const OxValue *src, DittoDType type, int ndim, const int64_t *shape, DittoTensor *t);
/* Scratch tensor released after the node (device, or host when host is set). */
int ox_temp(DittoOnnxRunner *r, DittoDType storage, int ndim, const int64_t *shape, bool host, DittoTensor *t);

/* v's storage as a tensor on the backend device (uploads host values on device backends). */
int ox_dev(DittoOnnxRunner *r, const OxValue *v, DittoTensor *t);
/* v's storage in host memory (downloads device values on device backends). */
int ox_host(DittoOnnxRunner *r, const OxValue *v, DittoTensor *t);

/* Integer tensor (of at most max elements) read on the host. */
int ox_read_ints(DittoOnnxRunner *r, const OxNode *n, const OxValue *v, int64_t *out, int max, int *count);
/* Scalar (one element) as double, any type. */
int ox_read_scalar(DittoOnnxRunner *r, const OxNode *n, const OxValue *v, double *out);

/* Output k = constant tensor e (Constant nodes, attribute tensors), converted to storage on the host. */
int ox_const_entry(DittoOnnxRunner *r, const OxNode *n, int k, const DittoCatalogEntry *e);

/* Attributes with defaults. */
int64_t ox_attr_int(const OxNode *n, const char *name, int64_t def);
float ox_attr_float(const OxNode *n, const char *name, float def);
const char *ox_attr_str(const OxNode *n, const char *name, const char *def);
/* INTS attribute: count (or -1 when absent) and pointer. */
int ox_attr_ints(const OxNode *n, const char *name, const int64_t **v);
bool ox_has_attr(const OxNode *n, const char *name);

/* NumPy broadcast of two shapes into out (rank = max). DITTO_ERR_SHAPE when they do not broadcast. */
int ox_broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out);
/* Normalise axis into [0, ndim); false when out of range. */
bool ox_axis(int64_t axis, int ndim, int *out);

/* Copy a strided view src (on the host, any 4- or 8-byte storage) into contiguous host dst of the same shape. */
void ox_host_copy(const DittoTensor *src, DittoTensor *dst);
/*
 * Output k = contiguous copy of `view` (a strided view of src's storage, same
 * storage dtype): host loop for host values, the backend's copy otherwise.
 */
int ox_materialize(DittoOnnxRunner *r, const OxNode *n, int k, const OxValue *src, const DittoTensor *view, DittoDType type);

/* Give output k (already set, contiguous) another shape of the same element count. */
int ox_reshape_output(DittoOnnxRunner *r, const OxNode *n, int k, int ndim, const int64_t *shape);

/* Op tables of the op files (NULL-terminated). */
extern const OxOpDef ditto_ox_ops_elementwise[];
extern const OxOpDef ditto_ox_ops_shape[];
extern const OxOpDef ditto_ox_ops_nn[];

#endif
