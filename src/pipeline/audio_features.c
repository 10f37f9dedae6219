/*
 * Audio front end: HuBERT through the ONNX executor, offline and online
 * chunking (audio_features.h), and the synthetic stand-in graph.
 */
#include "pipeline/audio_features.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "onnx/onnx_exec.h"
#include "weights/onnx.h"

/* ---- the synthetic HuBERT-shaped graph ---- */

#define SG_CONVS 7
#define SG_CH 8                        /* conv front-end channels (512 in HuBERT) */
#define SG_NODES (1 + 2 * SG_CONVS + 5)
#define SG_INITS (2 * SG_CONVS + 6)
#define SG_NAME 24

static const int sg_kernel[SG_CONVS] = { 10, 3, 3, 3, 3, 2, 2 };
static const int sg_stride[SG_CONVS] = { 5, 2, 2, 2, 2, 2, 2 };

/* Everything the DittoOnnxModel points to, in one allocation. */
typedef struct SynthGraph {
    DittoOnnxModel model;
    DittoOnnxNode nodes[SG_NODES];
    char *io[SG_NODES][4];                      /* node inputs then outputs */
    char names[6 * SG_NODES + SG_INITS + 16][SG_NAME];
    int n_names;
    DittoOnnxAttr attrs[SG_NODES][2];
    int64_t ints[SG_NODES][2][3];
    DittoOnnxValueInfo input, output;
} SynthGraph;

/* A name "<prefix><i>" (i < 0: the prefix alone) in the graph's string storage. */
static char *sg_name(SynthGraph *g, const char *prefix, int i)
{
    DITTO_ASSERT(g->n_names < (int)(sizeof g->names / sizeof *g->names));
    char *s = g->names[g->n_names++];
    if (i < 0)
        snprintf(s, SG_NAME, "%s", prefix);
    else
        snprintf(s, SG_NAME, "%s%d", prefix, i);
    return s;
}

static DittoOnnxNode *sg_node(SynthGraph *g, int *n, const char *op, char *in0, char *in1, char *in2, char *out)
{
    DittoOnnxNode *nd = &g->nodes[*n];
    char **io = g->io[*n];
    nd->name = sg_name(g, "n", *n);
    nd->op_type = sg_name(g, op, -1);
    nd->domain = sg_name(g, "", -1);
    int k = 0;
    io[k++] = in0;
    if (in1)
        io[k++] = in1;
    if (in2)
        io[k++] = in2;
    nd->n_inputs = k;
    nd->inputs = io;
    io[k] = out;
    nd->outputs = io + k;
    nd->n_outputs = 1;
    nd->attrs = g->attrs[*n];
    nd->n_attrs = 0;
    (*n)++;
    return nd;
}

static void sg_attr_ints(SynthGraph *g, DittoOnnxNode *nd, const char *name, const int64_t *v, size_t n)
{
    int idx = (int)(nd - g->nodes);
    DittoOnnxAttr *a = &nd->attrs[nd->n_attrs];
    a->name = sg_name(g, name, -1);
    a->type = DITTO_ATTR_INTS;
    a->n = n;
    a->ints = g->ints[idx][nd->n_attrs];
    memcpy(a->ints, v, n * sizeof *v);
    nd->n_attrs++;
}

static void sg_attr_int(SynthGraph *g, DittoOnnxNode *nd, const char *name, int64_t v)
{
    DittoOnnxAttr *a = &nd->attrs[nd->n_attrs++];
    a->name = sg_name(g, name, -1);
    a->type = DITTO_ATTR_INT;
    a->i = v;
}

static void sg_attr_float(SynthGraph *g, DittoOnnxNode *nd, const char *name, float v)
{
    DittoOnnxAttr *a = &nd->attrs[nd->n_attrs++];
    a->name = sg_name(g, name, -1);
    a->type = DITTO_ATTR_FLOAT;
    a->f = v;
}

typedef struct InitSpec {
    char *name;
    DittoDType dtype;
    int ndim;
    int64_t shape[3];
    float scale;          /* N(0, scale^2) for floats; 1 + N(0,0.04) when < 0 (norm weight) */
} InitSpec;

/* The initializers: conv weights/biases, the LayerNorm, the projection, two shape constants. */
static int sg_catalog(SynthGraph *g, InitSpec *spec, int n, uint64_t seed, const DittoLogger *log)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        DittoTensor t = ditto_tensor(NULL, spec[i].dtype, spec[i].ndim, spec[i].shape);
        total += (ditto_tensor_nbytes(&t) + 63) & ~(size_t)63;
    }
    uint8_t *block = ditto_malloc_aligned(total);
    if (!block)
        return DITTO_ERR_NOMEM;
    DittoCatalog *c = NULL;
    int rc = ditto_catalog_create_heap(&c, "synthetic HuBERT graph", block, total, log);
    size_t off = 0;
    for (int i = 0; rc >= 0 && i < n; i++) {
        DittoTensor t = ditto_tensor(NULL, spec[i].dtype, spec[i].ndim, spec[i].shape);
        DittoCatalogEntry e;
        memset(&e, 0, sizeof e);
        e.name = spec[i].name;
        e.dtype = spec[i].dtype;
        e.ndim = spec[i].ndim;
        for (int d = 0; d < e.ndim; d++) {
            e.shape[d] = t.shape[d];
            e.stride[d] = t.stride[d];
        }
        e.offset = off;
        e.span = ditto_tensor_nbytes(&t);
        e.data = block + off;
        if (spec[i].dtype == DITTO_I64) {
            memset(block + off, 0, (size_t)e.span);   /* shape constants: set by the caller */
        } else {
            float *f = (float *)(block + off);
            size_t cnt = (size_t)ditto_tensor_numel(&t);
            ditto_rng_fill_normal(seed, ditto_rng_stream(0x4855, (uint32_t)i, 0), 0, f, cnt);
            for (size_t k = 0; k < cnt; k++)
                f[k] = spec[i].scale < 0 ? 1.0f + 0.2f * f[k] : f[k] * spec[i].scale;
        }
        off += ((size_t)e.span + 63) & ~(size_t)63;
        rc = ditto_catalog_add(c, &e);
    }
    if (rc >= 0)
        rc = ditto_catalog_finish(c);
    if (rc < 0) {
        ditto_catalog_close(&c);
        return rc;
    }
    g->model.init = c;
    g->model.n_initializers = (size_t)n;
    return 0;
}

static void sg_set_i64(DittoCatalog *c, const char *name, const int64_t *v, int n)
{
    DittoCatalogEntry *e = ditto_catalog_get(c, name);
    DITTO_ASSERT(e && e->dtype == DITTO_I64 && ditto_catalog_entry_numel(e) == n);
    memcpy((void *)(uintptr_t)e->data, v, (size_t)n * sizeof *v);
}

static int sg_build(SynthGraph **out, uint64_t seed, const DittoLogger *log)
{
    *out = NULL;
    SynthGraph *g = ditto_calloc(1, sizeof *g);
    if (!g)
        return DITTO_ERR_NOMEM;
    InitSpec spec[SG_INITS];
    int ni = 0, nn = 0;
    char *x = sg_name(g, "input_values", -1);
    char *shape_in = sg_name(g, "shape_in", -1), *shape_out = sg_name(g, "shape_out", -1);
    spec[ni++] = (InitSpec){ shape_in, DITTO_I64, 1, { 3 }, 0 };
    spec[ni++] = (InitSpec){ shape_out, DITTO_I64, 1, { 2 }, 0 };

    DittoOnnxNode *nd = sg_node(g, &nn, "Reshape", x, shape_in, NULL, sg_name(g, "x", 0));
    char *cur = nd->outputs[0];
    int64_t cin = 1;
    for (int k = 0; k < SG_CONVS; k++) {
        char *w = sg_name(g, "conv.weight.", k), *b = sg_name(g, "conv.bias.", k);
        /* He-style gain keeps the activations O(1) through the GELUs */
        spec[ni++] = (InitSpec){ w, DITTO_F32, 3, { SG_CH, cin, sg_kernel[k] }, (float)sqrt(2.0 / (double)(cin * sg_kernel[k])) };
        spec[ni++] = (InitSpec){ b, DITTO_F32, 1, { SG_CH }, 0.1f };
        nd = sg_node(g, &nn, "Conv", cur, w, b, sg_name(g, "c", k));
        sg_attr_ints(g, nd, "kernel_shape", (const int64_t[]){ sg_kernel[k] }, 1);
        sg_attr_ints(g, nd, "strides", (const int64_t[]){ sg_stride[k] }, 1);
        nd = sg_node(g, &nn, "Gelu", nd->outputs[0], NULL, NULL, sg_name(g, "x", k + 1));
        cur = nd->outputs[0];
        cin = SG_CH;
    }
    nd = sg_node(g, &nn, "Transpose", cur, NULL, NULL, sg_name(g, "t", -1));          /* (1, T, C) */
    sg_attr_ints(g, nd, "perm", (const int64_t[]){ 0, 2, 1 }, 3);
    char *lnw = sg_name(g, "ln.weight", -1), *lnb = sg_name(g, "ln.bias", -1);
    spec[ni++] = (InitSpec){ lnw, DITTO_F32, 1, { SG_CH }, -1.0f };
    spec[ni++] = (InitSpec){ lnb, DITTO_F32, 1, { SG_CH }, 0.1f };
    nd = sg_node(g, &nn, "LayerNormalization", nd->outputs[0], lnw, lnb, sg_name(g, "ln", -1));
    sg_attr_int(g, nd, "axis", -1);
    sg_attr_float(g, nd, "epsilon", 1e-5f);
    char *pw = sg_name(g, "proj.weight", -1), *pb = sg_name(g, "proj.bias", -1);
    spec[ni++] = (InitSpec){ pw, DITTO_F32, 2, { SG_CH, DITTO_HUBERT_DIM }, (float)(1.0 / sqrt((double)SG_CH)) };
    spec[ni++] = (InitSpec){ pb, DITTO_F32, 1, { DITTO_HUBERT_DIM }, 0.1f };
    nd = sg_node(g, &nn, "MatMul", nd->outputs[0], pw, NULL, sg_name(g, "mm", -1));   /* (1, T, 1024) */
    nd = sg_node(g, &nn, "Add", nd->outputs[0], pb, NULL, sg_name(g, "proj", -1));
    char *y = sg_name(g, "encoding_out", -1);
    sg_node(g, &nn, "Reshape", nd->outputs[0], shape_out, NULL, y);                  /* (T, 1024) */
    DITTO_ASSERT(nn == SG_NODES && ni == SG_INITS);

    int rc = sg_catalog(g, spec, ni, seed, log);
    if (rc < 0) {
        ditto_free(g);
        return ditto_fail(log, rc, "synthetic HuBERT graph: %s", ditto_strerror(rc));
    }
    sg_set_i64(g->model.init, shape_in, (const int64_t[]){ 1, 1, -1 }, 3);
    sg_set_i64(g->model.init, shape_out, (const int64_t[]){ -1, DITTO_HUBERT_DIM }, 2);

    g->input = (DittoOnnxValueInfo){ .name = x, .dtype = DITTO_F32, .ndim = 2, .shape = { 1, -1 } };
    g->output = (DittoOnnxValueInfo){ .name = y, .dtype = DITTO_F32, .ndim = 2, .shape = { -1, DITTO_HUBERT_DIM } };
    DittoOnnxModel *m = &g->model;
    m->path = sg_name(g, "synthetic HuBERT", -1);
    m->ir_version = 9;
    m->opset = 20;
    m->producer = sg_name(g, "ditto.c", -1);
    m->nodes = g->nodes;
    m->n_nodes = (size_t)nn;
    m->inputs = &g->input;
    m->n_inputs = 1;
    m->outputs = &g->output;
    m->n_outputs = 1;
    *out = g;
    return 0;
}

static void sg_free(SynthGraph **g)
{
    if (!g || !*g)
        return;
    ditto_catalog_close(&(*g)->model.init);
    ditto_free(*g);
    *g = NULL;
}

/* ---- the encoder ---- */

struct DittoHubert {
    DittoBackend *be;
    DittoLogger log;
    DittoOnnxModel *file;     /* a real model file, or */
    SynthGraph *synth;        /* the synthetic graph */
    DittoOnnxRunner *runner;
    DittoArena ws;
    char what[256];
    void (*enter)(void *ctx), (*leave)(void *ctx);
    void *gate_ctx;
};

void ditto_hubert_set_gate(DittoHubert *h, void (*enter)(void *ctx), void (*leave)(void *ctx), void *ctx)
{
    h->enter = enter;
    h->leave = leave;
    h->gate_ctx = ctx;
}

static int hubert_run_graph(DittoHubert *h, const float *chunk, float *frames);

int ditto_hubert_run(DittoHubert *h, const float *chunk, float *frames)
{
    if (h->enter)
        h->enter(h->gate_ctx);
    int rc = hubert_run_graph(h, chunk, frames);
    if (h->leave)
        h->leave(h->gate_ctx);
    return rc;
}

static bool has_io(const DittoOnnxModel *m)
{
    bool in = false, out = false;
    for (size_t i = 0; i < m->n_inputs; i++)
        in |= !strcmp(m->inputs[i].name, "input_values");
    for (size_t i = 0; i < m->n_outputs; i++)
        out |= !strcmp(m->outputs[i].name, "encoding_out");
    return in && out && m->n_inputs == 1;
}

int ditto_hubert_open(DittoHubert **out, DittoBackend *be, const char *onnx_path, uint64_t seed, const DittoLogger *log)
{
    if (!out || !be)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DittoHubert *h = ditto_calloc(1, sizeof *h);
    if (!h)
        return DITTO_ERR_NOMEM;
    h->be = be;
    if (log)
        h->log = *log;
    int rc = ditto_arena_init(&h->ws, &be->allocator, 0);
    const DittoOnnxModel *model = NULL;
    if (rc >= 0 && onnx_path) {
        snprintf(h->what, sizeof h->what, "%s", onnx_path);
        rc = ditto_onnx_open(&h->file, onnx_path, log);
        model = h->file;
    } else if (rc >= 0) {
        snprintf(h->what, sizeof h->what, "synthetic HuBERT");
        rc = sg_build(&h->synth, seed, log);
        model = h->synth ? &h->synth->model : NULL;
    }
    if (rc >= 0) {
        DittoOnnxRunnerParams rp;
        ditto_onnx_runner_params_default(&rp);
        rp.outputs_f32 = true;
        rc = ditto_onnx_runner_open(&h->runner, model, be, &rp);
    }
    if (rc >= 0 && !has_io(model)) {
        rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: not a HuBERT encoder (needs input 'input_values' and output 'encoding_out')", h->what);
    }
    if (rc < 0) {
        ditto_hubert_close(&h);
        return rc;
    }
    *out = h;
    return 0;
}

void ditto_hubert_close(DittoHubert **ph)
{
    if (!ph || !*ph)
        return;
    DittoHubert *h = *ph;
    ditto_onnx_runner_close(&h->runner);
    ditto_onnx_close(&h->file);
    sg_free(&h->synth);
    ditto_arena_free(&h->ws);
    ditto_free(h);
    *ph = NULL;
}

bool ditto_hubert_is_synthetic(const DittoHubert *h)
{
    return h && h->synth;
}

static int hubert_run_graph(DittoHubert *h, const float *chunk, float *frames)
{
    DittoBackend *be = h->be;
    DittoTensor in;
    int rc = ditto_arena_reset(&h->ws);
    if (rc >= 0)
        rc = ditto_arena_tensor(&h->ws, DITTO_F32, 2, (const int64_t[]){ 1, DITTO_HUBERT_CHUNK }, &in);
    if (rc >= 0)
        rc = be->upload(be, in.data, chunk, DITTO_HUBERT_CHUNK * sizeof(float));
    if (rc < 0)
        return ditto_fail(&h->log, rc, "%s: cannot place the input: %s", h->what, ditto_strerror(rc));
    DittoOnnxIO io_in = { "input_values", in }, io_out = { "encoding_out", { 0 } };
    rc = ditto_onnx_runner_run(h->runner, &h->ws, &io_in, 1, &io_out, 1);
    if (rc < 0)
        return rc;
    const DittoTensor *y = &io_out.t;
    int o = y->ndim == 3 ? 1 : 0;
    if ((y->ndim != 2 && !(y->ndim == 3 && y->shape[0] == 1)) || y->shape[o] != DITTO_HUBERT_ROWS || y->shape[o + 1] != DITTO_HUBERT_DIM ||
        y->dtype != DITTO_F32) {
        char have[DITTO_SHAPE_STR_MAX];
        return ditto_fail(&h->log, DITTO_ERR_SHAPE, "%s: encoding_out has shape %s for %d samples, expected (%d, %d)", h->what,
                          ditto_shape_str(y->shape, y->ndim, have, sizeof have), DITTO_HUBERT_CHUNK, DITTO_HUBERT_ROWS, DITTO_HUBERT_DIM);
    }
    /* rows [-14, -4): 10 rows starting at row 6, pair-averaged */
    float rows[2 * DITTO_HUBERT_FRAMES * DITTO_HUBERT_DIM];
    rc = be->download(be, rows, (const float *)y->data + DITTO_HUBERT_KEEP * DITTO_HUBERT_DIM, sizeof rows);
    if (rc < 0)
        return ditto_fail(&h->log, rc, "%s: cannot read the output: %s", h->what, ditto_strerror(rc));
    for (int j = 0; j < DITTO_HUBERT_FRAMES; j++) {
        const float *a = rows + (2 * j) * DITTO_HUBERT_DIM, *b = a + DITTO_HUBERT_DIM;
        for (int k = 0; k < DITTO_HUBERT_DIM; k++)
            frames[j * DITTO_HUBERT_DIM + k] = (a[k] + b[k]) / 2.0f;   /* np.mean of two float32 rows */
    }
    return 0;
}

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int ditto_hubert_find(const char *dir, char *path, size_t cap)
{
    static const char *const rel[] = {
        "aux_models/hubert_streaming_fix_kv.onnx", "hubert_streaming_fix_kv.onnx", "../ditto_onnx/hubert.onnx",
        "ditto_onnx/hubert.onnx", "hubert.onnx", "aux_models/hubert.onnx",
    };
    if (!dir)
        return 0;
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        int n = snprintf(path, cap, "%s/%s", dir, rel[i]);
        if (n > 0 && (size_t)n < cap && file_exists(path))
            return 1;
    }
    return 0;
}

/* ---- chunking arithmetic ---- */

int64_t ditto_audio_num_frames(int64_t n)
{
    return n <= 0 ? 0 : (int64_t)ceil((double)n / 16000.0 * 25.0);
}

int64_t ditto_audio_offline_start(int64_t i)
{
    return (int64_t)((double)i * 0.04 * 16000.0);
}

int64_t ditto_audio_online_frames(int64_t n)
{
    return n < 0 ? 0 : DITTO_HUBERT_FRAMES * ((n + DITTO_AUDIO_PAD_ONLINE + DITTO_AUDIO_HOP_ONLINE - 1) / DITTO_AUDIO_HOP_ONLINE);
}

/* ---- incremental extraction ---- */

struct DittoAudioFeatures {
    DittoHubert *h;
    bool online;
    DittoFeatEmitFn emit;
    void *emit_ctx;
    DittoLogger log;
    int64_t pad;              /* leading zeros of the padded stream */
    float *buf;               /* padded-stream samples [base, base + len) */
    int64_t cap, len, base;
    int64_t pushed;           /* audio samples (without the padding) */
    int64_t next;             /* offline: next frame index i (multiple of 5); online: next call c */
    int64_t emitted;
    bool finished;
    int err;
    float chunk[DITTO_HUBERT_CHUNK];
    float frames[DITTO_HUBERT_FRAMES * DITTO_HUBERT_DIM];
};

static int af_reserve(DittoAudioFeatures *af, int64_t extra)
{
    /* drop samples before the next call's start (they are never read again) */
    int64_t keep_from = af->online ? af->next * DITTO_AUDIO_HOP_ONLINE : ditto_audio_offline_start(af->next);
    int64_t drop = keep_from - af->base;
    if (drop > 0 && drop <= af->len && (drop >= 65536 || af->len + extra > af->cap)) {
        memmove(af->buf, af->buf + drop, (size_t)(af->len - drop) * sizeof *af->buf);
        af->len -= drop;
        af->base += drop;
    }
    if (af->len + extra <= af->cap)
        return 0;
    int64_t cap = af->cap ? af->cap : 4 * DITTO_HUBERT_CHUNK;
    while (cap < af->len + extra)
        cap *= 2;
    float *b = ditto_realloc(af->buf, (size_t)cap * sizeof *b);
    if (!b)
        return DITTO_ERR_NOMEM;
    af->buf = b;
    af->cap = cap;
    return 0;
}

int ditto_audio_features_open(DittoAudioFeatures **out, DittoHubert *h, bool online, DittoFeatEmitFn emit, void *emit_ctx,
                              const DittoLogger *log)
{
    if (!out || !h)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DittoAudioFeatures *af = ditto_calloc(1, sizeof *af);
    if (!af)
        return DITTO_ERR_NOMEM;
    af->h = h;
    af->online = online;
    af->emit = emit;
    af->emit_ctx = emit_ctx;
    if (log)
        af->log = *log;
    af->pad = online ? DITTO_AUDIO_PAD_ONLINE : DITTO_AUDIO_PAD_OFFLINE;
    if (af_reserve(af, af->pad) < 0) {
        ditto_audio_features_close(&af);
        return DITTO_ERR_NOMEM;
    }
    memset(af->buf, 0, (size_t)af->pad * sizeof *af->buf);
    af->len = af->pad;
    *out = af;
    return 0;
}

void ditto_audio_features_close(DittoAudioFeatures **af)
{
    if (!af || !*af)
        return;
    ditto_free((*af)->buf);
    ditto_free(*af);
    *af = NULL;
}

/* Copy padded-stream samples [start, start + 6480) into chunk, zeros past the end of what is buffered. */
static void af_fill(DittoAudioFeatures *af, int64_t start)
{
    int64_t off = start - af->base;
    DITTO_ASSERT(off >= 0);
    int64_t have = af->len - off;
    if (have < 0)
        have = 0;
    if (have > DITTO_HUBERT_CHUNK)
        have = DITTO_HUBERT_CHUNK;
    if (have)
        memcpy(af->chunk, af->buf + off, (size_t)have * sizeof *af->chunk);
    memset(af->chunk + have, 0, (size_t)(DITTO_HUBERT_CHUNK - have) * sizeof *af->chunk);
}

/* Run every call that is ready; at the end of the stream, every call that is left. */
static int af_run(DittoAudioFeatures *af)
{
    const int64_t avail = af->pad + af->pushed;   /* padded-stream samples known */
    for (;;) {
        int64_t start, first, n = DITTO_HUBERT_FRAMES;
        if (af->online) {
            start = af->next * DITTO_AUDIO_HOP_ONLINE;
            if (af->finished ? start >= avail : start + DITTO_HUBERT_CHUNK > avail)
                return 0;
            first = af->next * DITTO_HUBERT_FRAMES;
        } else {
            first = af->next;
            start = ditto_audio_offline_start(first);
            int64_t limit = ditto_audio_num_frames(af->pushed);   /* final num_f once finished, a lower bound before */
            if (af->finished) {
                if (first >= limit)
                    return 0;
                if (limit - first < n)
                    n = limit - first;
            } else if (start + DITTO_HUBERT_CHUNK > avail || first + n > limit) {
                return 0;
            }
        }
        af_fill(af, start);
        int rc = ditto_hubert_run(af->h, af->chunk, af->frames);
        if (rc >= 0 && af->emit)
            rc = af->emit(af->emit_ctx, first, af->frames, n);
        if (rc < 0)
            return rc;
        af->emitted = first + n;
        af->next += af->online ? 1 : DITTO_HUBERT_FRAMES;
    }
}

int ditto_audio_features_push(DittoAudioFeatures *af, const float *pcm, int64_t n)
{
    if (!af || (n > 0 && !pcm) || n < 0)
        return DITTO_ERR_INVAL;
    if (af->err)
        return DITTO_ERR_BADSTATE;
    if (af->finished)
        return DITTO_ERR_AGAIN;
    /* feed in pieces so the buffer stays small whatever the caller pushes */
    while (n > 0) {
        int64_t piece = n < 16 * DITTO_HUBERT_CHUNK ? n : 16 * DITTO_HUBERT_CHUNK;
        int rc = af_reserve(af, piece);
        if (rc < 0)
            return af->err = ditto_fail(&af->log, rc, "audio features: out of memory");
        memcpy(af->buf + af->len, pcm, (size_t)piece * sizeof *pcm);
        af->len += piece;
        af->pushed += piece;
        pcm += piece;
        n -= piece;
        rc = af_run(af);
        if (rc < 0)
            return af->err = rc;
    }
    return 0;
}

int ditto_audio_features_finish(DittoAudioFeatures *af)
{
    if (!af)
        return DITTO_ERR_INVAL;
    if (af->err)
        return DITTO_ERR_BADSTATE;
    if (af->finished)
        return DITTO_ERR_AGAIN;
    if (af->pushed == 0)
        return ditto_fail(&af->log, DITTO_ERR_INVAL, "audio features: the audio is empty");
    af->finished = true;
    int rc = af_run(af);
    if (rc < 0)
        af->err = rc;
    return rc;
}

int64_t ditto_audio_features_samples(const DittoAudioFeatures *af)
{
    return af ? af->pushed : 0;
}

int64_t ditto_audio_features_frames(const DittoAudioFeatures *af)
{
    return af ? af->emitted : 0;
}

typedef struct CollectCtx {
    float *feat;
    int64_t cap;
} CollectCtx;

static int collect(void *ctx, int64_t first, const float *feat, int64_t n)
{
    CollectCtx *c = ctx;
    if (first + n > c->cap)
        return DITTO_ERR_RANGE;
    memcpy(c->feat + first * DITTO_HUBERT_DIM, feat, (size_t)(n * DITTO_HUBERT_DIM) * sizeof *feat);
    return 0;
}

int ditto_audio_features_offline(DittoHubert *h, const float *pcm, int64_t n, float *feat)
{
    CollectCtx c = { feat, ditto_audio_num_frames(n) };
    DittoAudioFeatures *af = NULL;
    int rc = ditto_audio_features_open(&af, h, false, collect, &c, &h->log);
    if (rc >= 0)
        rc = ditto_audio_features_push(af, pcm, n);
    if (rc >= 0)
        rc = ditto_audio_features_finish(af);
    ditto_audio_features_close(&af);
    return rc;
}
