/*
 * cuDNN graph-API (backend descriptor) convolutions for conv.cu: f16
 * channels-last x (N, Cp, spatial...), w KRSC (Op, kernel..., Cp), y (N, Op,
 * spatial...), fp32 accumulation. The legacy cudnnConvolutionForward
 * algorithms reach only part of cuDNN's kernels on Hopper; the heuristics of
 * the graph API offer all of them (ditto_cg_engines), and an engine with its
 * knob settings (CgEngine) rebuilds the same kernels for any item count, so
 * a batched plan and the one-item plan can share their arithmetic.
 */
#ifndef DITTO_BACKEND_CUDA_CONV_GRAPH_H
#define DITTO_BACKEND_CUDA_CONV_GRAPH_H

#include "backend/cuda/cuda_backend.h"

/*
 * Epilogues in the convolution's graph: y = relu(conv + bias) or
 * relu(conv + z + bias), in fp32 before y's one rounding, z of y's shape.
 * cuDNN 9 runs these with kernels compiled ahead of time (the plain bias
 * and identity forms only by runtime compilation, which notes_ok refuses).
 */
enum { CG_EPI_NONE, CG_EPI_RELU, CG_EPI_ZRELU };

/* One convolution; spatial extents use the last nsd of the 3 entries. */
typedef struct CgConv {
    int nsd;                            /* 2 or 3 */
    int64_t n, c, o;                    /* items, input channels, outputs (both padded to multiples of 8) */
    int64_t in[3], k[3], out[3], s[3], d[3], pad[3];
    int epi;                            /* CG_EPI_*; 0 for a plain convolution */
    bool bias_f16;                      /* the epilogue's bias (o,) is f16, else f32 */
} CgConv;

#define CG_MAX_KNOBS 24
#define CG_GRAPH_REFS 20                /* descriptors of the largest graph (conv, z add, bias add, relu) */

/* An engine and its knob settings: what heuristics chose, reusable for another item count. */
typedef struct CgEngine {
    int64_t index;                      /* CUDNN_ATTR_ENGINE_GLOBAL_INDEX */
    int nknobs;
    int64_t knob_type[CG_MAX_KNOBS];    /* cudnnBackendKnobType_t */
    int64_t knob_value[CG_MAX_KNOBS];
} CgEngine;

/* A finalized execution plan and every descriptor it refers to. */
typedef struct CgPlan {
    cudnnBackendDescriptor_t exec;
    cudnnBackendDescriptor_t refs[CG_GRAPH_REFS + 4 + CG_MAX_KNOBS];
    int nrefs;
    size_t ws;                          /* workspace bytes */
    int64_t index;                      /* the engine's global index */
    int epi;                            /* the graph's epilogue (CG_EPI_*) */
} CgPlan;

/*
 * The engines cuDNN's heuristics (mode A, or B when mode_b: slower to ask,
 * more candidates) offer for cv, best first, at most max in out (*n of
 * them): deterministic, tensor-core, full-precision reductions, no FFT /
 * Winograd transforms, compiled ahead of time (runtime compilation would
 * cost model-load time).
 */
int ditto_cg_engines(DittoBackend *be, const CgConv *cv, bool mode_b, CgEngine *out, int max, int *n);

/* Plan engine e for cv within ws_limit workspace bytes; *pl (allocated) stays NULL when e cannot run cv. */
int ditto_cg_plan(DittoBackend *be, const CgConv *cv, const CgEngine *e, size_t ws_limit, CgPlan **pl);

/*
 * y = conv(x, w) on the backend's stream, with the plan's epilogue (bias,
 * and z for CG_EPI_ZRELU; z may be y); ws: pl->ws bytes (NULL when 0).
 * Returns cuDNN's status.
 */
cudnnStatus_t ditto_cg_exec(DittoBackend *be, const CgPlan *pl, const void *x, const void *w, const void *bias, const void *z, void *y,
                            void *ws);

void ditto_cg_plan_free(CgPlan **pl);

#endif
