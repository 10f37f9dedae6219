/*
 * ONNX graph executor: runs a DittoOnnxModel (src/weights/onnx.h) on a
 * backend through the same op table as the native networks.
 *
 * Open validates the graph (every op supported, every value defined once,
 * no cycles), converts the initializers (float16/float64 weights become
 * float32, integer tensors int64), and folds every node whose inputs are all
 * constants (weight-norm arithmetic, shape subgraphs of static tensors,
 * Constant nodes) once. A run binds the named inputs, evaluates the remaining
 * nodes in topological order with shapes inferred from the actual inputs
 * (symbolic dims take any size), and hands out the named outputs.
 *
 * Numerics: every float tensor is computed in float32, whatever the graph
 * declares (float16 graphs included); integer and bool tensors are int64 on
 * the host, where shape arithmetic (Shape, Gather, Concat, Range, ...) runs
 * in plain C. Small float tensors derived only from such host values stay on
 * the host as well.
 *
 * Memory: scratch and outputs come from the caller's arena. Inside a run a
 * value's buffer returns to a free list after its last consumer and is reused
 * by later values of a size that fits (best fit), so the arena grows to
 * about the peak of live activations, not their sum.
 *
 * Threading: a runner is one session; one run at a time. The model must
 * outlive the runner (initializers may be read in place from its mapping).
 */
#ifndef DITTO_ONNX_EXEC_H
#define DITTO_ONNX_EXEC_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "core/buffer.h"
#include "weights/onnx.h"

typedef struct DittoOnnxRunner DittoOnnxRunner;

typedef struct DittoOnnxRunnerParams {
    bool outputs_f32;        /* float outputs as float32 (default false: the dtype the graph declares) */
    bool fold_constants;     /* fold constant subgraphs at open (default true; off for tests) */
} DittoOnnxRunnerParams;

void ditto_onnx_runner_params_default(DittoOnnxRunnerParams *p);

/*
 * Build a runner. Errors (logged through be->log, naming the model file and
 * the node): DITTO_ERR_UNSUPPORTED for an op this executor lacks ("node 'x'
 * (#3): unsupported op 'Foo'"), DITTO_ERR_FORMAT for a malformed graph, and
 * any error of a folded node. p may be NULL (defaults).
 */
int ditto_onnx_runner_open(DittoOnnxRunner **out, const DittoOnnxModel *model, DittoBackend *be, const DittoOnnxRunnerParams *p);
void ditto_onnx_runner_close(DittoOnnxRunner **r);

/* A named tensor: graph input or output. */
typedef struct DittoOnnxIO {
    const char *name;
    DittoTensor t;
} DittoOnnxIO;

/*
 * Run the graph. inputs: every graph input (model->inputs) by name, on the
 * backend's device, any strides; float inputs in any float dtype (converted
 * to float32), integer inputs in any integer dtype. Static dims must match
 * the declaration; symbolic dims take any size.
 *
 * outputs: the caller fills the names (any subset of the graph outputs); the
 * runner fills each .t with a contiguous tensor on the backend, allocated in
 * ws, in the dtype the graph declares (float32 for floats when
 * params.outputs_f32). Outputs stay valid until the caller resets or releases
 * ws. ws also holds the run's scratch; the runner never resets it.
 */
int ditto_onnx_runner_run(DittoOnnxRunner *r, DittoArena *ws, const DittoOnnxIO *inputs, int n_inputs, DittoOnnxIO *outputs,
                          int n_outputs);

typedef struct DittoOnnxRunnerInfo {
    size_t n_nodes;          /* nodes in the graph */
    size_t n_folded;         /* evaluated once at open */
    size_t n_run;            /* evaluated per run */
    size_t n_dead;           /* feeding no graph output: never evaluated */
    size_t const_bytes;      /* constants the runner holds (converted or folded; in-place reads not counted) */
    size_t last_run_bytes;   /* arena bytes the last run carved (free-list reuse included) */
} DittoOnnxRunnerInfo;

void ditto_onnx_runner_info(const DittoOnnxRunner *r, DittoOnnxRunnerInfo *info);

/* Whether the executor implements op_type of the default ONNX domain. */
bool ditto_onnx_op_supported(const char *op_type);

#endif
