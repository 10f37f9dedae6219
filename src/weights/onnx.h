/*
 * ONNX models: a strict protobuf reader for ModelProto (our own wire-format
 * decoder, no libprotobuf) that yields the graph (nodes, attributes, graph
 * inputs/outputs, value infos) and a catalog of initializers (raw_data and
 * typed fields, external data files), without copying raw tensor bytes.
 * Graph inputs that have an initializer are constants (old exporters list
 * weights as inputs). The executor in src/onnx/ runs the graph.
 *
 * Catalog entries (contiguous strides, dtype, shape) point to:
 *  - raw_data: straight into the mapped .onnx file (offset = file position). Protobuf does not
 *    align these bytes, so `data` may be unaligned for its dtype: read through
 *    ditto_catalog_read_f32() or memcpy, never through a typed pointer;
 *  - external data: into a mapping of the referenced file (offset = position in that file),
 *    which the catalog owns. Locations are relative to the model's folder; absolute paths and
 *    ".." components are rejected (a symlink inside the folder is followed);
 *  - typed fields (float_data, int32_data, int64_data, double_data): a heap copy owned by the
 *    catalog (offset = 0), aligned.
 * Constant nodes' tensors are entries named after the node's output (value, value_float(s),
 * value_int(s)); other tensor attributes are named "<node name or #index>.<attribute>".
 * Subgraph attributes (If/Loop/Scan), sparse tensors, segments and dtypes outside
 * DittoDType fail with DITTO_ERR_UNSUPPORTED naming the node or tensor; malformed or
 * truncated files with DITTO_ERR_FORMAT. Every error is one log line starting with the file.
 */
#ifndef DITTO_WEIGHTS_ONNX_H
#define DITTO_WEIGHTS_ONNX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "weights/catalog.h"

typedef enum DittoOnnxAttrType {
    DITTO_ATTR_UNDEFINED = 0,
    DITTO_ATTR_FLOAT,
    DITTO_ATTR_INT,
    DITTO_ATTR_STRING,
    DITTO_ATTR_TENSOR,     /* value in `tensor` (an entry owned by the model's const catalog) */
    DITTO_ATTR_FLOATS,
    DITTO_ATTR_INTS,
    DITTO_ATTR_STRINGS,
} DittoOnnxAttrType;

typedef struct DittoOnnxAttr {
    char *name;
    DittoOnnxAttrType type;
    float f;
    int64_t i;
    char *s;                         /* STRING (NUL-terminated copy; may contain no NUL) */
    size_t n;                        /* FLOATS / INTS / STRINGS count */
    float *floats;
    int64_t *ints;
    char **strings;
    const DittoCatalogEntry *tensor; /* TENSOR */
} DittoOnnxAttr;

typedef struct DittoOnnxNode {
    char *name;                      /* may be empty: messages then use "#index (op_type)" */
    char *op_type;
    char *domain;                    /* "" or "ai.onnx" for the default domain */
    int n_inputs, n_outputs, n_attrs;
    char **inputs;                   /* "" marks an omitted optional input */
    char **outputs;
    DittoOnnxAttr *attrs;
} DittoOnnxNode;

typedef struct DittoOnnxValueInfo {
    char *name;
    DittoDType dtype;                /* DITTO_DTYPE_COUNT when unknown/unsupported */
    int ndim;                        /* -1: unknown rank */
    int64_t shape[DITTO_MAX_DIMS];   /* -1: symbolic or unknown dim */
} DittoOnnxValueInfo;

typedef struct DittoOnnxModel {
    char *path;
    int64_t ir_version;
    int64_t opset;                   /* default-domain opset version */
    char *producer;
    DittoCatalog *init;              /* initializers (and Constant/attribute tensors), by name */
    DittoOnnxNode *nodes;
    size_t n_nodes;
    DittoOnnxValueInfo *inputs;      /* graph inputs that are NOT initializers, in order */
    size_t n_inputs;
    DittoOnnxValueInfo *outputs;
    size_t n_outputs;
    DittoOnnxValueInfo *value_info;
    size_t n_value_info;
    size_t n_initializers;           /* init->entries[0, n_initializers) are the graph's initializers; the
                                        rest come from Constant nodes and tensor attributes */
} DittoOnnxModel;

/* Read an .onnx file (external data resolved relative to its folder). Errors name the file and the problem. */
int ditto_onnx_open(DittoOnnxModel **out, const char *path, const DittoLogger *log);
/* Parse from memory (no external data); `name` stands for the file in messages. For tests and fuzzing. */
int ditto_onnx_open_memory(DittoOnnxModel **out, const void *data, size_t size, const char *name, const DittoLogger *log);
void ditto_onnx_close(DittoOnnxModel **m);

const DittoOnnxAttr *ditto_onnx_attr(const DittoOnnxNode *n, const char *name);

#endif
