/*
 * cuDNN graph-API convolutions (conv_graph.h): one forward-convolution
 * operation per graph (then its pointwise epilogue, if any), f16 tensors in
 * channels-last strides, float compute. Every descriptor a plan refers to
 * lives as long as the plan.
 */
#include <string.h>

#include "backend/cuda/conv_graph.h"

extern "C" {
#include "core/mem.h"
}

enum { UID_X = 1, UID_W = 2, UID_Y = 3, UID_B = 4, UID_Z = 5, UID_T0 = 100, UID_T1 = 101, UID_T2 = 102 };

typedef cudnnBackendDescriptor_t Desc;

#define ST_TRY(call) do { st = (call); if (st != CUDNN_STATUS_SUCCESS) return st; } while (0)

static cudnnStatus_t set_i64(Desc d, cudnnBackendAttributeName_t a, int64_t n, const int64_t *v)
{
    return cudnnBackendSetAttribute(d, a, CUDNN_TYPE_INT64, n, v);
}

static cudnnStatus_t set_desc(Desc d, cudnnBackendAttributeName_t a, int64_t n, const Desc *v)
{
    return cudnnBackendSetAttribute(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, v);
}

/* Create a descriptor and remember it in refs (destroyed with the plan or the caller's list). */
static cudnnStatus_t make(cudnnBackendDescriptorType_t type, Desc *refs, int *nrefs, int cap, Desc *d)
{
    if (*nrefs >= cap)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(type, d);
    if (st == CUDNN_STATUS_SUCCESS)
        refs[(*nrefs)++] = *d;
    return st;
}

static void destroy_all(Desc *refs, int n)
{
    for (int i = n - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(refs[i]);
}

/*
 * A tensor (n, c, spatial...) with the channels innermost: strides (vol*c,
 * 1, ..., c); f16, or f32 for a virtual one (an epilogue's intermediate,
 * never in memory) and an f32 bias.
 */
static cudnnStatus_t make_tensor(Desc *refs, int *nrefs, int cap, int64_t uid, int nsd, int64_t n, int64_t c, const int64_t *sp, bool f32,
                                 bool virt, Desc *t)
{
    int64_t dims[5], str[5], s = c;
    dims[0] = n;
    dims[1] = c;
    str[1] = 1;
    for (int i = nsd - 1; i >= 0; i--) {
        dims[2 + i] = sp[i];
        str[2 + i] = s;
        s *= sp[i];
    }
    str[0] = s;
    const cudnnDataType_t dt = f32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_HALF;
    const int64_t align = 16;
    cudnnStatus_t st;
    ST_TRY(make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, refs, nrefs, cap, t));
    ST_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    ST_TRY(set_i64(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, nsd + 2, dims));
    ST_TRY(set_i64(*t, CUDNN_ATTR_TENSOR_STRIDES, nsd + 2, str));
    ST_TRY(set_i64(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, 1, &uid));
    ST_TRY(set_i64(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 1, &align));
    if (virt)
        ST_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
    return cudnnBackendFinalize(*t);
}

/* The operation y = mode(x, b) (b NULL for a unary mode), fp32 math. */
static cudnnStatus_t make_pointwise(Desc *refs, int *nrefs, int cap, cudnnPointwiseMode_t mode, Desc x, Desc b, Desc y, Desc *op)
{
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    Desc pw;
    cudnnStatus_t st;
    ST_TRY(make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, refs, nrefs, cap, &pw));
    ST_TRY(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    ST_TRY(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    ST_TRY(cudnnBackendFinalize(pw));
    ST_TRY(make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, refs, nrefs, cap, op));
    ST_TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 1, &pw));
    ST_TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, 1, &x));
    if (b)
        ST_TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, 1, &b));
    ST_TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, 1, &y));
    return cudnnBackendFinalize(*op);
}

/* The operation graph of cv: y = conv(x, w) (alpha 1, beta 0), then cv->epi's epilogue through fp32 virtual tensors. */
static cudnnStatus_t make_graph(cudnnHandle_t h, const CgConv *cv, Desc *refs, int *nrefs, int cap, Desc *graph)
{
    const int nsd = cv->nsd, off = 3 - nsd;
    const bool epi = cv->epi != CG_EPI_NONE;
    Desc x, w, y, conv, ops[4];
    int nops = 0;
    cudnnStatus_t st;
    ST_TRY(make_tensor(refs, nrefs, cap, UID_X, nsd, cv->n, cv->c, cv->in + off, false, false, &x));
    ST_TRY(make_tensor(refs, nrefs, cap, UID_W, nsd, cv->o, cv->c, cv->k + off, false, false, &w));
    ST_TRY(make_tensor(refs, nrefs, cap, UID_Y, nsd, cv->n, cv->o, cv->out + off, false, false, &y));

    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t nsd64 = nsd;
    ST_TRY(make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, refs, nrefs, cap, &conv));
    ST_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    ST_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    ST_TRY(set_i64(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 1, &nsd64));
    ST_TRY(set_i64(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, nsd, cv->d + off));
    ST_TRY(set_i64(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, nsd, cv->s + off));
    ST_TRY(set_i64(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, nsd, cv->pad + off));
    ST_TRY(set_i64(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, nsd, cv->pad + off));
    ST_TRY(cudnnBackendFinalize(conv));

    Desc acc = y;   /* the convolution's output: y, or an fp32 virtual tensor feeding the epilogue */
    if (epi)
        ST_TRY(make_tensor(refs, nrefs, cap, UID_T0, nsd, cv->n, cv->o, cv->out + off, true, true, &acc));
    const float alpha = 1.0f, beta = 0.0f;
    Desc op;
    ST_TRY(make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, refs, nrefs, cap, &op));
    ST_TRY(set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, 1, &x));
    ST_TRY(set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, 1, &w));
    ST_TRY(set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, 1, &acc));
    ST_TRY(set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, 1, &conv));
    ST_TRY(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    ST_TRY(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    ST_TRY(cudnnBackendFinalize(op));
    ops[nops++] = op;

    if (epi) {
        static const int64_t one[3] = { 1, 1, 1 };
        Desc b, t;
        if (cv->epi == CG_EPI_ZRELU) {   /* acc + z */
            Desc z;
            ST_TRY(make_tensor(refs, nrefs, cap, UID_Z, nsd, cv->n, cv->o, cv->out + off, false, false, &z));
            ST_TRY(make_tensor(refs, nrefs, cap, UID_T1, nsd, cv->n, cv->o, cv->out + off, true, true, &t));
            ST_TRY(make_pointwise(refs, nrefs, cap, CUDNN_POINTWISE_ADD, acc, z, t, &ops[nops++]));
            acc = t;
        }
        ST_TRY(make_tensor(refs, nrefs, cap, UID_B, nsd, 1, cv->o, one, !cv->bias_f16, false, &b));
        ST_TRY(make_tensor(refs, nrefs, cap, UID_T2, nsd, cv->n, cv->o, cv->out + off, true, true, &t));
        ST_TRY(make_pointwise(refs, nrefs, cap, CUDNN_POINTWISE_ADD, acc, b, t, &ops[nops++]));
        ST_TRY(make_pointwise(refs, nrefs, cap, CUDNN_POINTWISE_RELU_FWD, t, NULL, y, &ops[nops++]));
    }

    ST_TRY(make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, refs, nrefs, cap, graph));
    ST_TRY(cudnnBackendSetAttribute(*graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    ST_TRY(set_desc(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, nops, ops));
    return cudnnBackendFinalize(*graph);
}

/* Numerics we accept: deterministic, fp32 reductions, no FFT / Winograd transforms, no input conversion; compiled ahead of time. */
static bool notes_ok(Desc eng)
{
    cudnnBackendNumericalNote_t num[32];
    cudnnBackendBehaviorNote_t beh[32];
    int64_t nn = 0, nb = 0;
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 32, &nn, num) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 32, &nb, beh) != CUDNN_STATUS_SUCCESS)
        return false;
    for (int64_t i = 0; i < nn && i < 32; i++)
        if (num[i] != CUDNN_NUMERICAL_NOTE_TENSOR_CORE && num[i] != CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP)
            return false;
    for (int64_t i = 0; i < nb && i < 32; i++)
        if (beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION)   /* would cost model-load time */
            return false;
    return true;
}

/* e = the engine and knobs of cfg; false when its numerics are not acceptable or it cannot be read. */
static bool read_cfg(Desc cfg, CgEngine *e)
{
    Desc eng = NULL, knobs[CG_MAX_KNOBS] = { 0 };
    int nk = 0;
    int64_t got = 0;
    bool ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) == CUDNN_STATUS_SUCCESS &&
              cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &eng) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &e->index) == CUDNN_STATUS_SUCCESS &&
              notes_ok(eng);
    for (; ok && nk < CG_MAX_KNOBS; nk++)
        ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[nk]) == CUDNN_STATUS_SUCCESS;
    got = 0;
    ok = ok && cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, CG_MAX_KNOBS, &got, knobs) ==
                   CUDNN_STATUS_SUCCESS &&
         got <= CG_MAX_KNOBS;
    e->nknobs = ok ? (int)got : 0;
    for (int i = 0; ok && i < e->nknobs; i++) {
        cudnnBackendKnobType_t type;
        int64_t one = 0;
        ok = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &one, &type) ==
                 CUDNN_STATUS_SUCCESS &&
             cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &one, &e->knob_value[i]) ==
                 CUDNN_STATUS_SUCCESS;
        e->knob_type[i] = type;
    }
    for (int i = 0; i < nk; i++)
        cudnnBackendDestroyDescriptor(knobs[i]);
    if (eng)
        cudnnBackendDestroyDescriptor(eng);
    return ok;
}

#define CG_MAX_HEUR 32

int ditto_cg_engines(DittoBackend *be, const CgConv *cv, bool mode_b, CgEngine *out, int max, int *n)
{
    DittoCuda *cu = ditto_cuda(be);
    Desc refs[CG_GRAPH_REFS + 1 + CG_MAX_HEUR], graph, heur;
    int nrefs = 0;
    *n = 0;
    const cudnnBackendHeurMode_t mode = mode_b ? CUDNN_HEUR_MODE_B : CUDNN_HEUR_MODE_A;
    int64_t count = 0, got = 0;
    cudnnStatus_t st = make_graph(cu->cudnn, cv, refs, &nrefs, CG_GRAPH_REFS, &graph);
    if (st == CUDNN_STATUS_SUCCESS)
        st = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, refs, &nrefs, CG_GRAPH_REFS + 1, &heur);
    if (st == CUDNN_STATUS_SUCCESS)
        st = set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, 1, &graph);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendFinalize(heur);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
    if (count > CG_MAX_HEUR)
        count = CG_MAX_HEUR;
    Desc *cfgs = refs + nrefs;
    int ncfg = 0;
    for (; st == CUDNN_STATUS_SUCCESS && ncfg < count; ncfg++)
        st = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, refs, &nrefs, CG_GRAPH_REFS + 1 + CG_MAX_HEUR, &cfgs[ncfg]);
    if (st == CUDNN_STATUS_SUCCESS && count > 0)
        st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs);
    for (int64_t i = 0; st == CUDNN_STATUS_SUCCESS && i < got && i < count && *n < max; i++)
        if (read_cfg(cfgs[i], &out[*n]))
            (*n)++;
    destroy_all(refs, nrefs);
    if (st != CUDNN_STATUS_SUCCESS)
        ditto_log(&be->log, DITTO_LOG_DEBUG, "conv: cuDNN graph heuristics unavailable (%s)", cudnnGetErrorString(st));
    return 0;
}

int ditto_cg_plan(DittoBackend *be, const CgConv *cv, const CgEngine *e, size_t ws_limit, CgPlan **out)
{
    DittoCuda *cu = ditto_cuda(be);
    *out = NULL;
    CgPlan *pl = (CgPlan *)ditto_calloc(1, sizeof *pl);
    if (!pl)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op conv: out of memory for a cuDNN plan");
    const int cap = (int)(sizeof pl->refs / sizeof *pl->refs);
    Desc graph, eng, cfg, knobs[CG_MAX_KNOBS];
    int64_t ws = 0, got = 0;
    cudnnStatus_t st = make_graph(cu->cudnn, cv, pl->refs, &pl->nrefs, cap, &graph);
    if (st == CUDNN_STATUS_SUCCESS)
        st = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, pl->refs, &pl->nrefs, cap, &eng);
    if (st == CUDNN_STATUS_SUCCESS)
        st = set_desc(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, 1, &graph);
    if (st == CUDNN_STATUS_SUCCESS)
        st = set_i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, 1, &e->index);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendFinalize(eng);
    for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < e->nknobs; i++) {
        const cudnnBackendKnobType_t type = (cudnnBackendKnobType_t)e->knob_type[i];
        st = make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, pl->refs, &pl->nrefs, cap, &knobs[i]);
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendSetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type);
        if (st == CUDNN_STATUS_SUCCESS)
            st = set_i64(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, 1, &e->knob_value[i]);
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendFinalize(knobs[i]);
    }
    if (st == CUDNN_STATUS_SUCCESS)
        st = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, pl->refs, &pl->nrefs, cap, &cfg);
    if (st == CUDNN_STATUS_SUCCESS)
        st = set_desc(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, 1, &eng);
    if (st == CUDNN_STATUS_SUCCESS && e->nknobs)
        st = set_desc(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, e->nknobs, knobs);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendFinalize(cfg);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &pl->exec);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(pl->exec, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &cu->cudnn);
    if (st == CUDNN_STATUS_SUCCESS)
        st = set_desc(pl->exec, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, 1, &cfg);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendFinalize(pl->exec);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(pl->exec, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws);
    if (st != CUDNN_STATUS_SUCCESS || ws < 0 || (size_t)ws > ws_limit) {   /* this engine does not run cv here */
        ditto_cg_plan_free(&pl);
        return 0;
    }
    pl->ws = (size_t)ws;
    pl->index = e->index;
    pl->epi = cv->epi;
    *out = pl;
    return 0;
}

cudnnStatus_t ditto_cg_exec(DittoBackend *be, const CgPlan *pl, const void *x, const void *w, const void *bias, const void *z, void *y,
                            void *ws)
{
    const int64_t uids[5] = { UID_X, UID_W, UID_Y, UID_B, UID_Z };
    void *ptrs[5] = { (void *)x, (void *)w, y, (void *)bias, (void *)z };
    const int64_t n = pl->epi == CG_EPI_ZRELU ? 5 : pl->epi == CG_EPI_RELU ? 4 : 3;
    Desc vp = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = set_i64(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, n, uids);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendExecute(ditto_cuda(be)->cudnn, pl->exec, vp);
    if (vp)
        cudnnBackendDestroyDescriptor(vp);
    return st;
}

void ditto_cg_plan_free(CgPlan **pl)
{
    if (!pl || !*pl)
        return;
    if ((*pl)->exec)
        cudnnBackendDestroyDescriptor((*pl)->exec);
    destroy_all((*pl)->refs, (*pl)->nrefs);
    ditto_free(*pl);
    *pl = NULL;
}
