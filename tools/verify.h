/*
 * `ditto verify`: runs the cases of a fixture manifest (see
 * ../shared/fixtures/ditto/README.md) and compares each output with its
 * reference. cmd_verify.c owns the manifest, the files, the metrics and the
 * report; verify_models.c holds the case runners, one per (kind, target).
 *
 * A runner sees one DittoVerifyRun: it loads its network from r->weights,
 * asks for inputs by io name (ditto_verify_input: a float32 tensor on the
 * backend; ditto_verify_input_act: in the backend's act_dtype, for network
 * activations), allocates outputs (ditto_verify_output[_act]), runs, and hands each
 * output back by io name (ditto_verify_submit), which downloads and compares
 * it. The same forward function is called once on the whole batch and, for
 * module cases with batch > 1, once per item (r->item >= 0: inputs are that
 * item alone, outputs are compared with the batched result).
 */
#ifndef DITTO_TOOLS_VERIFY_H
#define DITTO_TOOLS_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "backend/backend.h"
#include "core/buffer.h"
#include "models/models.h"
#include "weights/catalog.h"

typedef struct DittoVerifyRun DittoVerifyRun;

typedef struct DittoVerifyRunner {
    const char *kind;     /* manifest "kind": module, function, sampler, pipeline, onnx */
    const char *target;   /* last component of module / function / stage; NULL: any */
    /* Build the network (may be NULL: nothing to load). *model is passed to forward and release. */
    int (*load)(DittoVerifyRun *r, void **model);
    /* Fetch inputs, run, submit every output. Returns 0 or a negative code. */
    int (*forward)(DittoVerifyRun *r, void *model);
    void (*release)(void *model);
} DittoVerifyRunner;

/*
 * Runner tables, one per file (verify_<area>.c), each ending with an entry
 * whose kind is NULL, gathered in verify_tables.c.
 */
extern const DittoVerifyRunner ditto_verify_runners_models[];   /* verify_models.c: renderer networks */
extern const DittoVerifyRunner ditto_verify_runners_motion[];
extern const DittoVerifyRunner ditto_verify_runners_lmdm[];
extern const DittoVerifyRunner ditto_verify_runners_media[];    /* verify_media.c: crop_image, putback */
extern const DittoVerifyRunner ditto_verify_runners_onnx[];     /* verify_onnx.c: any ONNX model on the executor */

extern const DittoVerifyRunner *const ditto_verify_tables[];   /* NULL-terminated */

struct DittoVerifyRun {
    DittoBackend *be;
    DittoArena *ws;              /* scratch for the network, reset before each forward */
    DittoCatalog *weights;       /* the case's weights_file, or NULL */
    DittoCatalog *io;            /* the case's io_file */
    const cJSON *json;           /* the manifest case */
    const cJSON *params;         /* its "params" object, or NULL */
    const char *dir;             /* fixtures folder */
    const char *name;            /* case name */
    int64_t batch;               /* manifest "batch" (0 when absent) */
    int64_t item;                /* -1: whole batch; else the item run alone */
    const DittoTap *tap;         /* intermediates, or NULL */
    DittoLogger log;             /* for load errors (captured into the report) */
    void *priv;                  /* cmd_verify.c state */
};

/* Input `name` of the io file as a float32 tensor on the backend (item-sliced when r->item >= 0). */
int ditto_verify_input(DittoVerifyRun *r, const char *name, DittoTensor *t);
/* The same in dtype dt (float32 or float16: rounded once on the host) / in the backend's act_dtype (network activations). */
int ditto_verify_input_as(DittoVerifyRun *r, const char *name, DittoDType dt, DittoTensor *t);
int ditto_verify_input_act(DittoVerifyRun *r, const char *name, DittoTensor *t);
/* Host float32 copy of io tensor `name` (ditto_free) and its entry; DITTO_ERR_NOENT (*entry NULL) when missing. Logs nothing. */
int ditto_verify_read_io(DittoVerifyRun *r, const char *name, const DittoCatalogEntry **entry, float **data);
/* Allocate a float32 output on the backend (NaN-poisoned). */
int ditto_verify_output(DittoVerifyRun *r, int ndim, const int64_t *shape, DittoTensor *t);
/* The same in dtype dt (float32 or float16) / in the backend's act_dtype; ditto_verify_submit reads any of them back as float32. */
int ditto_verify_output_as(DittoVerifyRun *r, DittoDType dt, int ndim, const int64_t *shape, DittoTensor *t);
int ditto_verify_output_act(DittoVerifyRun *r, int ndim, const int64_t *shape, DittoTensor *t);
/* Download t and compare it with io tensor `name`. Returns 0 (also when it does not match) or a negative code. */
int ditto_verify_submit(DittoVerifyRun *r, const char *name, const DittoTensor *t);
/* Integer i of the array params[key] (or params[key] itself when i == 0 and it is a number). */
int ditto_verify_param_int(const DittoVerifyRun *r, const char *key, int i, int64_t *v);

#endif
