/*
 * ONNX executor: small graphs built in memory (DittoOnnxModel structs, no
 * reader) for each op family and attribute mode, the opset differences
 * (attributes that became inputs), constant folding, the memory plan, fp16
 * graphs, error reporting (unsupported op, malformed graphs, bad inputs),
 * and, when ../shared is present, the real models against ONNX Runtime's
 * outputs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/dtype.h"
#include "core/log.h"
#include "core/mem.h"
#include "onnx/onnx_exec.h"
#include "ops/ops.h"
#include "test_util.h"
#include "weights/onnx.h"

/* ---- log capture ---- */

typedef struct LogCap {
    int errors;
    char first[1024];
} LogCap;

static void cap_cb(void *cookie, DittoLogLevel level, const char *msg)
{
    LogCap *lc = cookie;
    if (level == DITTO_LOG_ERROR && !lc->errors++)
        snprintf(lc->first, sizeof lc->first, "%s", msg);
}

static DittoLogger cap_begin(TestCtx *c, LogCap *lc)
{
    memset(lc, 0, sizeof *lc);
    DittoLogger keep = c->be->log;
    c->be->log = (DittoLogger){ cap_cb, lc, DITTO_LOG_DEBUG };
    return keep;
}

/* ---- graph builder ---- */

#define GB_NODES 96
#define GB_ATTRS 8
#define GB_INITS 48
#define GB_BLOB (1 << 22)

typedef struct GB {
    DittoOnnxModel m;
    DittoOnnxNode nodes[GB_NODES];
    DittoOnnxAttr attrs[GB_NODES][GB_ATTRS];
    DittoOnnxValueInfo ins[8], outs[16];
    struct { char *name; DittoDType dt; int nd; int64_t shape[DITTO_MAX_DIMS]; size_t off, bytes; } init[GB_INITS];
    int ninit;
    struct { DittoOnnxAttr *a; char *entry; } fix[16];
    int nfix;
    uint8_t *blob;
    size_t used;
    char *strs[1024];
    int nstrs;
} GB;

static char *gb_str(GB *g, const char *s)
{
    char *p = ditto_strdup(s);
    if (!p || g->nstrs == 1024)
        abort();
    return g->strs[g->nstrs++] = p;
}

static void gb_init(GB *g, int64_t opset)
{
    memset(g, 0, sizeof *g);
    g->m.path = "test.onnx";
    g->m.opset = opset;
    g->m.nodes = g->nodes;
    g->m.inputs = g->ins;
    g->m.outputs = g->outs;
    g->blob = ditto_malloc_aligned(GB_BLOB);
    if (!g->blob)
        abort();
}

static void gb_input(GB *g, const char *name, DittoDType dt, int nd, const int64_t *shape)
{
    DittoOnnxValueInfo *v = &g->ins[g->m.n_inputs++];
    v->name = gb_str(g, name);
    v->dtype = dt;
    v->ndim = nd;
    for (int i = 0; i < nd; i++)
        v->shape[i] = shape[i];
}

static void gb_output(GB *g, const char *name, DittoDType dt)
{
    DittoOnnxValueInfo *v = &g->outs[g->m.n_outputs++];
    v->name = gb_str(g, name);
    v->dtype = dt;
    v->ndim = -1;
}

static void gb_tensor(GB *g, const char *name, DittoDType dt, int nd, const int64_t *shape, const void *data)
{
    int k = g->ninit++;
    g->init[k].name = gb_str(g, name);
    g->init[k].dt = dt;
    g->init[k].nd = nd;
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= g->init[k].shape[i] = shape[i];
    g->init[k].off = g->used;
    g->init[k].bytes = (size_t)n * ditto_dtype_size(dt);
    memcpy(g->blob + g->used, data, g->init[k].bytes);
    g->used += (g->init[k].bytes + 63) & ~(size_t)63;
}

static void gb_f32(GB *g, const char *name, int nd, const int64_t *shape, const float *data)
{
    gb_tensor(g, name, DITTO_F32, nd, shape, data);
}

static void gb_i64(GB *g, const char *name, int n, const int64_t *data)
{
    int64_t s = n;
    gb_tensor(g, name, DITTO_I64, 1, &s, data);
}

/* "a,b,,c" -> array (empty entries stay empty: omitted optional inputs) */
static int gb_split(GB *g, const char *list, char ***out)
{
    char *tmp[16];
    int n = 0;
    if (list && *list) {
        const char *s = list;
        for (;;) {
            const char *e = strchr(s, ',');
            size_t len = e ? (size_t)(e - s) : strlen(s);
            char buf[128];
            snprintf(buf, sizeof buf, "%.*s", (int)len, s);
            tmp[n++] = gb_str(g, buf);
            if (!e)
                break;
            s = e + 1;
        }
    }
    char **arr = ditto_calloc((size_t)(n ? n : 1), sizeof *arr);
    if (!arr || g->nstrs == 1024)
        abort();
    g->strs[g->nstrs++] = (char *)arr;
    memcpy(arr, tmp, sizeof(char *) * (size_t)n);
    *out = arr;
    return n;
}

static DittoOnnxNode *gb_node(GB *g, const char *op, const char *name, const char *ins, const char *outs)
{
    int k = (int)g->m.n_nodes++;
    DittoOnnxNode *n = &g->nodes[k];
    n->name = gb_str(g, name);
    n->op_type = gb_str(g, op);
    n->domain = gb_str(g, "");
    n->n_inputs = gb_split(g, ins, &n->inputs);
    n->n_outputs = gb_split(g, outs, &n->outputs);
    n->attrs = g->attrs[k];
    return n;
}

static DittoOnnxAttr *gb_attr(GB *g, DittoOnnxNode *n, const char *name, DittoOnnxAttrType t)
{
    DittoOnnxAttr *a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof *a);
    a->name = gb_str(g, name);
    a->type = t;
    return a;
}

static void gb_ai(GB *g, DittoOnnxNode *n, const char *name, int64_t v)
{
    gb_attr(g, n, name, DITTO_ATTR_INT)->i = v;
}

static void gb_af(GB *g, DittoOnnxNode *n, const char *name, float v)
{
    gb_attr(g, n, name, DITTO_ATTR_FLOAT)->f = v;
}

static void gb_as(GB *g, DittoOnnxNode *n, const char *name, const char *v)
{
    gb_attr(g, n, name, DITTO_ATTR_STRING)->s = gb_str(g, v);
}

static void gb_aints(GB *g, DittoOnnxNode *n, const char *name, int cnt, const int64_t *v)
{
    DittoOnnxAttr *a = gb_attr(g, n, name, DITTO_ATTR_INTS);
    a->n = (size_t)cnt;
    a->ints = (int64_t *)(uintptr_t)v;   /* static test data */
}

/* Tensor attribute: the catalog entry `entry` (added with gb_tensor). */
static void gb_at(GB *g, DittoOnnxNode *n, const char *name, const char *entry)
{
    DittoOnnxAttr *a = gb_attr(g, n, name, DITTO_ATTR_TENSOR);
    g->fix[g->nfix].a = a;
    g->fix[g->nfix++].entry = gb_str(g, entry);
}

static void gb_finish(GB *g)
{
    DittoLogger lg = ditto_logger_stderr(DITTO_LOG_WARN);
    if (ditto_catalog_create_heap(&g->m.init, "test.onnx", g->blob, GB_BLOB, &lg) < 0)
        abort();
    g->blob = NULL;   /* owned by the catalog */
    for (int i = 0; i < g->ninit; i++) {
        DittoCatalogEntry e;
        memset(&e, 0, sizeof e);
        e.name = g->init[i].name;
        e.dtype = g->init[i].dt;
        DittoTensor t = ditto_tensor(NULL, e.dtype, g->init[i].nd, g->init[i].shape);
        e.ndim = g->init[i].nd;
        for (int d = 0; d < e.ndim; d++) {
            e.shape[d] = t.shape[d];
            e.stride[d] = t.stride[d];
        }
        e.offset = g->init[i].off;
        e.span = g->init[i].bytes;
        e.data = (const uint8_t *)g->m.init->map.data + g->init[i].off;
        if (ditto_catalog_add(g->m.init, &e) < 0)
            abort();
    }
    if (ditto_catalog_finish(g->m.init) < 0)
        abort();
    for (int i = 0; i < g->nfix; i++)
        g->fix[i].a->tensor = ditto_catalog_find(g->m.init, g->fix[i].entry);
}

static void gb_free(GB *g)
{
    ditto_catalog_close(&g->m.init);
    ditto_free_aligned(g->blob);
    for (int i = 0; i < g->nstrs; i++)
        ditto_free(g->strs[i]);
}

/* ---- running ---- */

typedef struct Run {
    DittoOnnxRunner *r;
    DittoArena ws;
    DittoOnnxIO out[16];
    int nout;
    int rc_open, rc_run;
    DittoOnnxRunnerInfo info;
} Run;

/* Open and run g with float32 inputs (names/shapes/data), fetching every graph output. */
static void run_graph(TestCtx *c, GB *g, Run *R, int nin, const char *const *names, const int *nds, const int64_t *const *shapes,
                      const void *const *data, const DittoDType *dts)
{
    memset(R, 0, sizeof *R);
    ditto_arena_init(&R->ws, &c->be->allocator, 0);
    R->rc_open = ditto_onnx_runner_open(&R->r, &g->m, c->be, NULL);
    if (R->rc_open < 0)
        return;
    DittoOnnxIO in[8];
    for (int i = 0; i < nin; i++) {
        in[i].name = names[i];
        in[i].t = ditto_tensor((void *)(uintptr_t)data[i], dts ? dts[i] : DITTO_F32, nds[i], shapes[i]);
    }
    R->nout = (int)g->m.n_outputs;
    for (int i = 0; i < R->nout; i++)
        R->out[i].name = g->outs[i].name;
    R->rc_run = ditto_onnx_runner_run(R->r, &R->ws, in, nin, R->out, R->nout);
    ditto_onnx_runner_info(R->r, &R->info);
}

static void run_free(Run *R)
{
    ditto_onnx_runner_close(&R->r);
    ditto_arena_free(&R->ws);
}

/* Output i equals want (n values, shape given), float32 within tol (absolute), or int64 exactly. */
static bool out_is(TestCtx *c, const char *name, const Run *R, int i, int nd, const int64_t *shape, const double *want, double tol)
{
    if (R->rc_open < 0 || R->rc_run < 0)
        return test_report(c, name, false, "open %d, run %d (%s)", R->rc_open, R->rc_run, ditto_strerror(R->rc_open < 0 ? R->rc_open : R->rc_run));
    const DittoTensor *t = &R->out[i].t;
    char a[DITTO_SHAPE_STR_MAX], b[DITTO_SHAPE_STR_MAX];
    bool ok = t->ndim == nd;
    for (int d = 0; ok && d < nd; d++)
        ok = t->shape[d] == shape[d];
    if (!ok)
        return test_report(c, name, false, "shape %s, want %s", ditto_shape_str(t->shape, t->ndim, a, sizeof a), ditto_shape_str(shape, nd, b, sizeof b));
    int64_t n = ditto_tensor_numel(t);
    double worst = 0;
    int64_t at = -1;
    for (int64_t k = 0; k < n; k++) {
        double v;
        ditto_convert(&v, DITTO_F64, (const char *)t->data + (size_t)k * ditto_dtype_size(t->dtype), t->dtype, 1);
        double d = fabs(v - want[k]);
        if (!(d <= worst) || (isnan(v) != isnan(want[k]))) {
            worst = isnan(d) ? INFINITY : d;
            at = k;
        }
    }
    return test_report(c, name, worst <= tol, "max |out - want| %.3g at %lld (tol %.1g)", worst, (long long)at, tol);
}

#define ARR(...) ((const double[]){ __VA_ARGS__ })
#define SH(...) ((const int64_t[]){ __VA_ARGS__ })

static void one_input(TestCtx *c, GB *g, Run *R, const char *name, int nd, const int64_t *shape, const float *data)
{
    const char *names[1] = { name };
    const int nds[1] = { nd };
    const int64_t *shapes[1] = { shape };
    const void *datas[1] = { data };
    run_graph(c, g, R, 1, names, nds, shapes, datas, NULL);
}

/* ---- errors ---- */

static void test_errors(TestCtx *c)
{
    LogCap lc;
    GB g;
    Run R;
    /* unsupported op: the error names the op and the node */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 1, SH(4));
    gb_output(&g, "y", DITTO_F32);
    gb_node(&g, "Relu", "r0", "x", "t");
    gb_node(&g, "FancyOp", "fancy_node_7", "t", "y");
    gb_finish(&g);
    DittoLogger keep = cap_begin(c, &lc);
    DittoOnnxRunner *r = NULL;
    int rc = ditto_onnx_runner_open(&r, &g.m, c->be, NULL);
    c->be->log = keep;
    test_report(c, "onnx_exec.error.unsupported_op", rc == DITTO_ERR_UNSUPPORTED && strstr(lc.first, "FancyOp") &&
                strstr(lc.first, "fancy_node_7") && lc.errors == 1, "rc %d, log: %s", rc, lc.first);
    ditto_onnx_runner_close(&r);
    gb_free(&g);

    /* unnamed node of another domain */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 1, SH(4));
    gb_output(&g, "y", DITTO_F32);
    DittoOnnxNode *n = gb_node(&g, "FusedConv", "", "x", "y");
    n->domain = gb_str(&g, "com.microsoft");
    gb_finish(&g);
    keep = cap_begin(c, &lc);
    rc = ditto_onnx_runner_open(&r, &g.m, c->be, NULL);
    c->be->log = keep;
    test_report(c, "onnx_exec.error.foreign_domain", rc == DITTO_ERR_UNSUPPORTED && strstr(lc.first, "FusedConv") &&
                strstr(lc.first, "#0") && strstr(lc.first, "com.microsoft"), "rc %d, log: %s", rc, lc.first);
    gb_free(&g);

    /* an unsupported op feeding nothing (layer-drop's RandomUniform) is only a warning */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 1, SH(4));
    gb_output(&g, "y", DITTO_F32);
    gb_node(&g, "RandomUniform", "layerdrop_rand", "", "unused");
    gb_node(&g, "Relu", "r", "x", "y");
    gb_finish(&g);
    keep = cap_begin(c, &lc);
    rc = ditto_onnx_runner_open(&r, &g.m, c->be, NULL);
    c->be->log = keep;
    test_report(c, "onnx_exec.error.dead_unsupported_is_warning", rc == 0 && lc.errors == 0, "rc %d, %d errors", rc, lc.errors);
    ditto_onnx_runner_close(&r);
    gb_free(&g);

    /* a backend without an op the graph needs fails at open, not mid-run */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 4, SH(1, 1, 4, 4));
    gb_output(&g, "y", DITTO_F32);
    static const int64_t k2[2] = { 2, 2 };
    gb_aints(&g, gb_node(&g, "MaxPool", "pool1", "x", "y"), "kernel_shape", 2, k2);
    gb_finish(&g);
    keep = cap_begin(c, &lc);
    int (*pool)(struct DittoBackend *, const DittoPoolParams *, const DittoTensor *, DittoTensor *) = c->be->ops.pool;
    c->be->ops.pool = NULL;
    rc = ditto_onnx_runner_open(&r, &g.m, c->be, NULL);
    c->be->ops.pool = pool;
    c->be->log = keep;
    test_report(c, "onnx_exec.error.backend_lacks_op", rc == DITTO_ERR_UNSUPPORTED && strstr(lc.first, "pool1") && strstr(lc.first, "lacks op pool"),
                "rc %d, log: %s", rc, lc.first);
    ditto_onnx_runner_close(&r);
    gb_free(&g);

    /* an input nobody produces */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 1, SH(4));
    gb_output(&g, "y", DITTO_F32);
    gb_node(&g, "Add", "add", "x,ghost", "y");
    gb_finish(&g);
    keep = cap_begin(c, &lc);
    rc = ditto_onnx_runner_open(&r, &g.m, c->be, NULL);
    c->be->log = keep;
    test_report(c, "onnx_exec.error.undefined_input", rc == DITTO_ERR_FORMAT && strstr(lc.first, "ghost") && strstr(lc.first, "add"),
                "rc %d, log: %s", rc, lc.first);
    gb_free(&g);

    /* a cycle, and a value produced twice */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 1, SH(4));
    gb_output(&g, "y", DITTO_F32);
    gb_node(&g, "Add", "a", "x,b_out", "a_out");
    gb_node(&g, "Relu", "b", "a_out", "b_out");
    gb_node(&g, "Relu", "c", "a_out", "y");
    gb_finish(&g);
    keep = cap_begin(c, &lc);
    rc = ditto_onnx_runner_open(&r, &g.m, c->be, NULL);
    c->be->log = keep;
    test_report(c, "onnx_exec.error.cycle", rc == DITTO_ERR_FORMAT && strstr(lc.first, "cycle"), "rc %d, log: %s", rc, lc.first);
    gb_free(&g);
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 1, SH(4));
    gb_output(&g, "y", DITTO_F32);
    gb_node(&g, "Relu", "a", "x", "y");
    gb_node(&g, "Relu", "b", "x", "y");
    gb_finish(&g);
    keep = cap_begin(c, &lc);
    rc = ditto_onnx_runner_open(&r, &g.m, c->be, NULL);
    c->be->log = keep;
    test_report(c, "onnx_exec.error.duplicate_output", rc == DITTO_ERR_FORMAT && strstr(lc.first, "'y'"), "rc %d, log: %s", rc, lc.first);
    gb_free(&g);

    /* run-time errors: missing input, static dim mismatch, unknown name, a bad index naming its node */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 2, SH(2, -1));
    gb_input(&g, "i", DITTO_I64, 1, SH(1));
    gb_output(&g, "y", DITTO_F32);
    n = gb_node(&g, "Gather", "pick_rows", "x,i", "y");
    gb_ai(&g, n, "axis", 0);
    gb_finish(&g);
    float xd[6] = { 1, 2, 3, 4, 5, 6 };
    int64_t bad_idx[1] = { 5 };
    DittoArena ws;
    ditto_arena_init(&ws, &c->be->allocator, 0);
    rc = ditto_onnx_runner_open(&r, &g.m, c->be, NULL);
    DittoOnnxIO in[2] = { { "x", ditto_tensor(xd, DITTO_F32, 2, SH(2, 3)) }, { "i", ditto_tensor(bad_idx, DITTO_I64, 1, SH(1)) } };
    DittoOnnxIO out[1] = { { "y", { 0 } } };
    keep = cap_begin(c, &lc);
    int rc1 = ditto_onnx_runner_run(r, &ws, in, 1, out, 1);
    char m1[1024];
    snprintf(m1, sizeof m1, "%s", lc.first);
    in[0].t = ditto_tensor(xd, DITTO_F32, 2, SH(3, 2));
    cap_begin(c, &lc);
    int rc2 = ditto_onnx_runner_run(r, &ws, in, 2, out, 1);
    char m2[1024];
    snprintf(m2, sizeof m2, "%s", lc.first);
    in[0].t = ditto_tensor(xd, DITTO_F32, 2, SH(2, 3));
    in[1].name = "j";
    cap_begin(c, &lc);
    int rc3 = ditto_onnx_runner_run(r, &ws, in, 2, out, 1);
    in[1].name = "i";
    cap_begin(c, &lc);
    int rc4 = ditto_onnx_runner_run(r, &ws, in, 2, out, 1);
    c->be->log = keep;
    test_report(c, "onnx_exec.error.missing_input", rc == 0 && rc1 < 0 && strstr(m1, "'i'") && strstr(m1, "missing"), "rc %d: %s", rc1, m1);
    test_report(c, "onnx_exec.error.static_dim", rc2 == DITTO_ERR_SHAPE && strstr(m2, "(3,2)"), "rc %d: %s", rc2, m2);
    test_report(c, "onnx_exec.error.unknown_input", rc3 == DITTO_ERR_NOENT, "rc %d", rc3);
    test_report(c, "onnx_exec.error.node_named_at_run", rc4 == DITTO_ERR_RANGE && strstr(lc.first, "pick_rows") && strstr(lc.first, "Gather"),
                "rc %d: %s", rc4, lc.first);
    /* and a good run after the failures */
    bad_idx[0] = -1;
    int rc5 = ditto_onnx_runner_run(r, &ws, in, 2, out, 1);
    test_report(c, "onnx_exec.error.recovers", rc5 == 0 && out[0].t.ndim == 2 && ((float *)out[0].t.data)[2] == 6.0f, "rc %d", rc5);
    ditto_onnx_runner_close(&r);
    ditto_arena_free(&ws);
    gb_free(&g);
    (void)R;
}

/* ---- shape subgraphs, folding, dynamic dims ---- */

static void test_shapes(TestCtx *c)
{
    GB g;
    Run R;
    /* x (1, T, 4) -> reshape to (T*2, 2) through Shape/Gather/Mul/Unsqueeze/Concat, as exporters write view(-1, 2) with a computed dim */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 3, SH(1, -1, 4));
    gb_output(&g, "y", DITTO_F32);
    gb_output(&g, "shape_out", DITTO_I64);
    gb_i64(&g, "one", 1, (int64_t[]){ 1 });
    gb_i64(&g, "two", 1, (int64_t[]){ 2 });
    gb_tensor(&g, "idx1", DITTO_I64, 0, NULL, (int64_t[]){ 1 });
    gb_tensor(&g, "c2", DITTO_I64, 0, NULL, (int64_t[]){ 2 });
    gb_i64(&g, "ax0", 1, (int64_t[]){ 0 });
    gb_node(&g, "Shape", "shape", "x", "s");
    gb_node(&g, "Gather", "g", "s,idx1", "t");          /* scalar T */
    gb_node(&g, "Mul", "m", "t,c2", "t2");
    gb_node(&g, "Unsqueeze", "u", "t2,ax0", "t2v");
    DittoOnnxNode *n = gb_node(&g, "Concat", "cat", "t2v,two", "newshape");
    gb_ai(&g, n, "axis", 0);
    gb_node(&g, "Reshape", "rs", "x,newshape", "y");
    gb_node(&g, "Identity", "id", "newshape", "shape_out");
    /* a constant-only chain: folded at open */
    gb_node(&g, "ConstantOfShape", "cos", "two", "zeros2");
    gb_node(&g, "Shape", "shape2", "zeros2", "s2");
    gb_node(&g, "Add", "dead_add", "s2,one", "never_used");
    gb_finish(&g);
    float x[12];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i;
    one_input(c, &g, &R, "x", 3, SH(1, 3, 4), x);
    out_is(c, "onnx_exec.shape.reshape_computed", &R, 0, 2, SH(6, 2), ARR(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 0);
    out_is(c, "onnx_exec.shape.int_output", &R, 1, 1, SH(2), ARR(6, 2), 0);
    test_report(c, "onnx_exec.shape.fold_and_dead", R.info.n_run == 7 && R.info.n_dead == 3 && R.info.n_folded == 0,
                "run %zu, folded %zu, dead %zu", R.info.n_run, R.info.n_folded, R.info.n_dead);
    /* the same runner at another T */
    float x2[20];
    for (int i = 0; i < 20; i++)
        x2[i] = (float)(100 + i);
    DittoOnnxIO in[1] = { { "x", ditto_tensor(x2, DITTO_F32, 3, SH(1, 5, 4)) } };
    int rc = ditto_onnx_runner_run(R.r, &R.ws, in, 1, R.out, 2);
    test_report(c, "onnx_exec.shape.symbolic_dim_rerun", rc == 0 && R.out[0].t.shape[0] == 10 && ((float *)R.out[0].t.data)[19] == 119.0f,
                "rc %d, rows %lld", rc, (long long)R.out[0].t.shape[0]);
    run_free(&R);
    gb_free(&g);

    /* folding: Shape of a constant feeds the shape input of a run-time Reshape */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 2, SH(2, 3));
    gb_output(&g, "y", DITTO_F32);
    gb_f32(&g, "w", 2, SH(3, 2), (float[]){ 1, 2, 3, 4, 5, 6 });
    gb_node(&g, "Shape", "sw", "w", "ws");
    gb_node(&g, "Reshape", "r", "x,ws", "y");
    gb_finish(&g);
    one_input(c, &g, &R, "x", 2, SH(2, 3), (float[]){ 1, 2, 3, 4, 5, 6 });
    out_is(c, "onnx_exec.fold.shape_of_constant", &R, 0, 2, SH(3, 2), ARR(1, 2, 3, 4, 5, 6), 0);
    test_report(c, "onnx_exec.fold.counts", R.info.n_folded == 1 && R.info.n_run == 1, "folded %zu run %zu", R.info.n_folded, R.info.n_run);
    run_free(&R);
    gb_free(&g);
}

/* ---- element-wise, casts, where, clip ---- */

static void test_elementwise(TestCtx *c)
{
    GB g;
    Run R;
    gb_init(&g, 13);
    gb_input(&g, "a", DITTO_F32, 2, SH(2, 3));
    gb_output(&g, "add", DITTO_F32);
    gb_output(&g, "pow", DITTO_F32);
    gb_output(&g, "where", DITTO_F32);
    gb_output(&g, "idiv", DITTO_I64);
    gb_output(&g, "imod", DITTO_I64);
    gb_output(&g, "fmod", DITTO_I64);
    gb_output(&g, "cast", DITTO_I32);
    gb_output(&g, "mean", DITTO_F32);
    gb_output(&g, "hsig", DITTO_F32);
    gb_output(&g, "floor", DITTO_F32);
    gb_f32(&g, "row", 1, SH(3), (float[]){ 10, 20, 30 });
    gb_tensor(&g, "two", DITTO_I64, 0, NULL, (int64_t[]){ 2 });
    gb_i64(&g, "iv", 4, (int64_t[]){ 7, -7, 7, -7 });
    gb_i64(&g, "id", 4, (int64_t[]){ 2, 2, -2, -2 });
    gb_f32(&g, "zero", 0, NULL, (float[]){ 0 });
    gb_node(&g, "Add", "add", "a,row", "add");
    gb_node(&g, "Pow", "pow", "a,two", "pow");                 /* float base, int exponent */
    gb_node(&g, "Greater", "gt", "a,zero", "pos");
    gb_node(&g, "Where", "where", "pos,a,row", "where");
    gb_node(&g, "Div", "idiv", "iv,id", "idiv");
    gb_node(&g, "Mod", "imod", "iv,id", "imod");
    DittoOnnxNode *n = gb_node(&g, "Mod", "fmod", "iv,id", "fmod");
    gb_ai(&g, n, "fmod", 1);
    n = gb_node(&g, "Cast", "cast", "a", "cast");
    gb_ai(&g, n, "to", 6);
    gb_node(&g, "Mean", "mean", "a,row,a", "mean");
    n = gb_node(&g, "HardSigmoid", "hs", "a", "hsig");
    gb_af(&g, n, "alpha", 0.25f);
    gb_node(&g, "Floor", "floor", "a", "floor");
    gb_finish(&g);
    float a[6] = { -1.5f, 2.0f, 0.25f, -3.75f, 4.5f, -0.5f };
    one_input(c, &g, &R, "a", 2, SH(2, 3), a);
    out_is(c, "onnx_exec.ew.add_broadcast", &R, 0, 2, SH(2, 3), ARR(8.5, 22, 30.25, 6.25, 24.5, 29.5), 0);
    out_is(c, "onnx_exec.ew.pow_int_exponent", &R, 1, 2, SH(2, 3), ARR(2.25, 4, 0.0625, 14.0625, 20.25, 0.25), 0);
    out_is(c, "onnx_exec.ew.greater_where", &R, 2, 2, SH(2, 3), ARR(10, 2, 0.25, 10, 4.5, 30), 0);
    out_is(c, "onnx_exec.ew.int_div_truncates", &R, 3, 1, SH(4), ARR(3, -3, -3, 3), 0);
    out_is(c, "onnx_exec.ew.int_mod_python", &R, 4, 1, SH(4), ARR(1, 1, -1, -1), 0);
    out_is(c, "onnx_exec.ew.int_fmod_c", &R, 5, 1, SH(4), ARR(1, -1, 1, -1), 0);
    out_is(c, "onnx_exec.ew.cast_float_int32", &R, 6, 2, SH(2, 3), ARR(-1, 2, 0, -3, 4, 0), 0);
    out_is(c, "onnx_exec.ew.mean_variadic", &R, 7, 2, SH(2, 3), ARR((-3 + 10) / 3.0, 24 / 3.0, 30.5 / 3, (-7.5 + 10) / 3, 29 / 3.0, 29 / 3.0), 1e-6);
    out_is(c, "onnx_exec.ew.hardsigmoid", &R, 8, 2, SH(2, 3), ARR(0.125, 1, 0.5625, 0, 1, 0.375), 1e-7);
    out_is(c, "onnx_exec.ew.floor", &R, 9, 2, SH(2, 3), ARR(-2, 2, 0, -4, 4, -1), 0);
    run_free(&R);
    gb_free(&g);

    /* Clip: attributes (opset 6) and inputs (opset 13), min > max */
    for (int v = 0; v < 3; v++) {
        gb_init(&g, v == 0 ? 6 : 13);
        gb_input(&g, "x", DITTO_F32, 1, SH(5));
        gb_output(&g, "y", DITTO_F32);
        gb_f32(&g, "lo", 0, NULL, (float[]){ v == 2 ? 3.0f : -1.0f });
        gb_f32(&g, "hi", 0, NULL, (float[]){ 2.0f });
        if (v == 0) {
            n = gb_node(&g, "Clip", "clip", "x", "y");
            gb_af(&g, n, "min", -1.0f);
            gb_af(&g, n, "max", 2.0f);
        } else {
            gb_node(&g, "Clip", "clip", "x,lo,hi", "y");
        }
        gb_finish(&g);
        one_input(c, &g, &R, "x", 1, SH(5), (float[]){ -3, -0.5f, 0.5f, 2.5f, 9 });
        out_is(c, v == 0 ? "onnx_exec.clip.opset6_attrs" : v == 1 ? "onnx_exec.clip.opset13_inputs" : "onnx_exec.clip.min_above_max", &R, 0, 1,
               SH(5), v == 2 ? ARR(2, 2, 2, 2, 2) : ARR(-1, -0.5, 0.5, 2, 2), 0);
        run_free(&R);
        gb_free(&g);
    }
    /* Clip with only max (min omitted as "") */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 1, SH(3));
    gb_output(&g, "y", DITTO_F32);
    gb_f32(&g, "hi", 0, NULL, (float[]){ 0.0f });
    gb_node(&g, "Clip", "clip", "x,,hi", "y");
    gb_finish(&g);
    one_input(c, &g, &R, "x", 1, SH(3), (float[]){ -7, 1, 3 });
    out_is(c, "onnx_exec.clip.omitted_min", &R, 0, 1, SH(3), ARR(-7, 0, 0), 0);
    run_free(&R);
    gb_free(&g);
}

/* ---- data movement ---- */

static void test_movement(TestCtx *c)
{
    GB g;
    Run R;
    /* Slice: opset 9 attributes vs opset 13 inputs, negative steps and INT64_MAX ends */
    for (int v = 0; v < 2; v++) {
        gb_init(&g, v ? 13 : 9);
        gb_input(&g, "x", DITTO_F32, 2, SH(3, 5));
        gb_output(&g, "y", DITTO_F32);
        gb_output(&g, "z", DITTO_F32);
        if (v) {
            gb_i64(&g, "st", 2, (int64_t[]){ 1, -1 });
            gb_i64(&g, "en", 2, (int64_t[]){ INT64_MAX, INT64_MIN });
            gb_i64(&g, "ax", 2, (int64_t[]){ 0, 1 });
            gb_i64(&g, "sp", 2, (int64_t[]){ 1, -2 });
            gb_node(&g, "Slice", "s", "x,st,en,ax,sp", "y");
            gb_i64(&g, "st2", 1, (int64_t[]){ 0 });
            gb_i64(&g, "en2", 1, (int64_t[]){ -1 });
            gb_i64(&g, "ax2", 1, (int64_t[]){ -1 });
            gb_node(&g, "Slice", "s2", "x,st2,en2,ax2", "z");
        } else {
            DittoOnnxNode *n = gb_node(&g, "Slice", "s", "x", "y");
            static const int64_t st[2] = { 1, 4 }, en[2] = { 100, 5 };
            gb_aints(&g, n, "starts", 2, st);
            gb_aints(&g, n, "ends", 2, en);
            n = gb_node(&g, "Slice", "s2", "x", "z");
            static const int64_t st2[1] = { 0 }, en2[1] = { -1 }, ax2[1] = { 1 };
            gb_aints(&g, n, "starts", 1, st2);
            gb_aints(&g, n, "ends", 1, en2);
            gb_aints(&g, n, "axes", 1, ax2);
        }
        gb_finish(&g);
        float x[15];
        for (int i = 0; i < 15; i++)
            x[i] = (float)i;
        one_input(c, &g, &R, "x", 2, SH(3, 5), x);
        if (v)
            out_is(c, "onnx_exec.slice.opset13_neg_step", &R, 0, 2, SH(2, 3), ARR(9, 7, 5, 14, 12, 10), 0);
        else
            out_is(c, "onnx_exec.slice.opset9_attrs", &R, 0, 2, SH(2, 1), ARR(9, 14), 0);
        out_is(c, v ? "onnx_exec.slice.drop_last_opset13" : "onnx_exec.slice.drop_last_opset9", &R, 1, 2, SH(3, 4),
               ARR(0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13), 0);
        run_free(&R);
        gb_free(&g);
    }
    /* Squeeze / Unsqueeze: axes attribute (opset 11) vs input (opset 13) */
    for (int v = 0; v < 2; v++) {
        gb_init(&g, v ? 13 : 11);
        gb_input(&g, "x", DITTO_F32, 3, SH(1, 3, 1));
        gb_output(&g, "y", DITTO_F32);
        gb_output(&g, "z", DITTO_F32);
        static const int64_t a2[1] = { 2 }, am1[2] = { -1, 0 };
        if (v) {
            gb_i64(&g, "a2", 1, a2);
            gb_i64(&g, "am1", 2, am1);
            gb_node(&g, "Squeeze", "sq", "x,a2", "y");
            gb_node(&g, "Unsqueeze", "us", "y,am1", "z");
        } else {
            gb_aints(&g, gb_node(&g, "Squeeze", "sq", "x", "y"), "axes", 1, a2);
            gb_aints(&g, gb_node(&g, "Unsqueeze", "us", "y", "z"), "axes", 2, am1);
        }
        gb_finish(&g);
        one_input(c, &g, &R, "x", 3, SH(1, 3, 1), (float[]){ 1, 2, 3 });
        out_is(c, v ? "onnx_exec.squeeze.opset13" : "onnx_exec.squeeze.opset11", &R, 0, 2, SH(1, 3), ARR(1, 2, 3), 0);
        out_is(c, v ? "onnx_exec.unsqueeze.opset13" : "onnx_exec.unsqueeze.opset11", &R, 1, 4, SH(1, 1, 3, 1), ARR(1, 2, 3), 0);
        run_free(&R);
        gb_free(&g);
    }
    /* Split: attribute (11), input (13), num_outputs (18); Transpose; Expand; Tile; Gather; Concat; Range */
    for (int v = 0; v < 3; v++) {
        gb_init(&g, v == 0 ? 11 : v == 1 ? 13 : 18);
        gb_input(&g, "x", DITTO_F32, 2, SH(2, 5));
        gb_output(&g, "p0", DITTO_F32);
        gb_output(&g, "p1", DITTO_F32);
        static const int64_t sp[2] = { 3, 2 };
        DittoOnnxNode *n;
        if (v == 1) {
            gb_i64(&g, "sp", 2, sp);
            n = gb_node(&g, "Split", "split", "x,sp", "p0,p1");
        } else {
            n = gb_node(&g, "Split", "split", "x", "p0,p1");
            if (v == 0)
                gb_aints(&g, n, "split", 2, sp);
            else
                gb_ai(&g, n, "num_outputs", 2);
        }
        gb_ai(&g, n, "axis", 1);
        gb_finish(&g);
        float x[10] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 };
        one_input(c, &g, &R, "x", 2, SH(2, 5), x);
        const char *nm = v == 0 ? "onnx_exec.split.attr" : v == 1 ? "onnx_exec.split.input" : "onnx_exec.split.num_outputs";
        out_is(c, nm, &R, 0, 2, SH(2, 3), ARR(0, 1, 2, 5, 6, 7), 0);
        out_is(c, nm, &R, 1, 2, SH(2, 2), ARR(3, 4, 8, 9), 0);
        run_free(&R);
        gb_free(&g);
    }
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 2, SH(2, 3));
    gb_output(&g, "tr", DITTO_F32);
    gb_output(&g, "ex", DITTO_F32);
    gb_output(&g, "ti", DITTO_F32);
    gb_output(&g, "ga", DITTO_F32);
    gb_output(&g, "ca", DITTO_F32);
    gb_output(&g, "ra", DITTO_F32);
    gb_output(&g, "ir", DITTO_I64);
    gb_output(&g, "d2s", DITTO_F32);
    gb_i64(&g, "es", 3, (int64_t[]){ 2, 1, 1 });
    gb_i64(&g, "rep", 2, (int64_t[]){ 2, 1 });
    gb_i64(&g, "gi", 2, (int64_t[]){ 2, -3 });
    gb_f32(&g, "r0", 0, NULL, (float[]){ 1.0f });
    gb_f32(&g, "r1", 0, NULL, (float[]){ 2.0f });
    gb_f32(&g, "rd", 0, NULL, (float[]){ 0.25f });
    gb_tensor(&g, "i0", DITTO_I64, 0, NULL, (int64_t[]){ 10 });
    gb_tensor(&g, "i1", DITTO_I64, 0, NULL, (int64_t[]){ 3 });
    gb_tensor(&g, "id", DITTO_I64, 0, NULL, (int64_t[]){ -3 });
    gb_i64(&g, "s124", 4, (int64_t[]){ 1, 4, 1, 1 });
    gb_node(&g, "Transpose", "tr", "x", "tr");
    gb_node(&g, "Expand", "ex", "x,es", "ex");
    gb_node(&g, "Tile", "ti", "x,rep", "ti");
    gb_ai(&g, gb_node(&g, "Gather", "ga", "x,gi", "ga"), "axis", 1);
    gb_ai(&g, gb_node(&g, "Concat", "ca", "x,tr_back,x", "ca"), "axis", 0);
    static const int64_t perm10[2] = { 1, 0 };
    gb_aints(&g, gb_node(&g, "Transpose", "tr2", "tr", "tr_back"), "perm", 2, perm10);
    gb_node(&g, "Range", "ra", "r0,r1,rd", "ra");
    gb_node(&g, "Range", "ir", "i0,i1,id", "ir");
    gb_node(&g, "Reshape", "rs4", "ra,s124", "ra4");
    gb_ai(&g, gb_node(&g, "DepthToSpace", "d2s", "ra4", "d2s"), "blocksize", 2);
    gb_finish(&g);
    float x[6] = { 1, 2, 3, 4, 5, 6 };
    one_input(c, &g, &R, "x", 2, SH(2, 3), x);
    out_is(c, "onnx_exec.move.transpose", &R, 0, 2, SH(3, 2), ARR(1, 4, 2, 5, 3, 6), 0);
    out_is(c, "onnx_exec.move.expand", &R, 1, 3, SH(2, 2, 3), ARR(1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6), 0);
    out_is(c, "onnx_exec.move.tile", &R, 2, 2, SH(4, 3), ARR(1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6), 0);
    out_is(c, "onnx_exec.move.gather_neg", &R, 3, 2, SH(2, 2), ARR(3, 1, 6, 4), 0);
    out_is(c, "onnx_exec.move.concat", &R, 4, 2, SH(6, 3), ARR(1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6), 0);
    out_is(c, "onnx_exec.move.range_float", &R, 5, 1, SH(4), ARR(1, 1.25, 1.5, 1.75), 0);
    out_is(c, "onnx_exec.move.range_int_down", &R, 6, 1, SH(3), ARR(10, 7, 4), 0);
    out_is(c, "onnx_exec.move.depth_to_space_dcr", &R, 7, 4, SH(1, 1, 2, 2), ARR(1, 1.25, 1.5, 1.75), 0);
    run_free(&R);
    gb_free(&g);

    /* Pad: channel axis by attribute (opset 9), by inputs (opset 13), reflect, axes input (opset 18) */
    for (int v = 0; v < 3; v++) {
        gb_init(&g, v == 0 ? 9 : v == 1 ? 13 : 18);
        gb_input(&g, "x", DITTO_F32, 4, SH(1, 2, 1, 3));
        gb_output(&g, "y", DITTO_F32);
        static const int64_t pads9[8] = { 0, 0, 0, 0, 0, 1, 0, 0 };
        if (v == 0) {
            DittoOnnxNode *n = gb_node(&g, "Pad", "pad", "x", "y");
            gb_aints(&g, n, "pads", 8, pads9);
            gb_af(&g, n, "value", 9.0f);
        } else if (v == 1) {
            gb_i64(&g, "pads", 8, (int64_t[]){ 0, 0, 0, 2, 0, 0, 0, 1 });
            gb_as(&g, gb_node(&g, "Pad", "pad", "x,pads", "y"), "mode", "reflect");
        } else {
            gb_i64(&g, "pads", 2, (int64_t[]){ 1, 1 });
            gb_f32(&g, "cv", 0, NULL, (float[]){ -1.0f });
            gb_i64(&g, "axes", 1, (int64_t[]){ -1 });
            gb_node(&g, "Pad", "pad", "x,pads,cv,axes", "y");
        }
        gb_finish(&g);
        one_input(c, &g, &R, "x", 4, SH(1, 2, 1, 3), (float[]){ 1, 2, 3, 4, 5, 6 });
        if (v == 0)
            out_is(c, "onnx_exec.pad.opset9_channels", &R, 0, 4, SH(1, 3, 1, 3), ARR(1, 2, 3, 4, 5, 6, 9, 9, 9), 0);
        else if (v == 1)
            out_is(c, "onnx_exec.pad.opset13_reflect", &R, 0, 4, SH(1, 2, 1, 6), ARR(3, 2, 1, 2, 3, 2, 6, 5, 4, 5, 6, 5), 0);
        else
            out_is(c, "onnx_exec.pad.opset18_axes", &R, 0, 4, SH(1, 2, 1, 5), ARR(-1, 1, 2, 3, -1, -1, 4, 5, 6, -1), 0);
        run_free(&R);
        gb_free(&g);
    }
}

/* ---- reductions, norms, softmax ---- */

static void test_reduce_norm(TestCtx *c)
{
    GB g;
    Run R;
    /* ReduceMean: axes attribute (opset 13) vs input (opset 18); keepdims 0; two axes */
    for (int v = 0; v < 2; v++) {
        gb_init(&g, v ? 18 : 13);
        gb_input(&g, "x", DITTO_F32, 3, SH(2, 2, 3));
        gb_output(&g, "m", DITTO_F32);
        gb_output(&g, "l2", DITTO_F32);
        gb_output(&g, "lse", DITTO_F32);
        gb_output(&g, "all", DITTO_F32);
        static const int64_t ax[2] = { 0, 2 }, ax1[1] = { 1 };
        DittoOnnxNode *n;
        if (v) {
            gb_i64(&g, "ax", 2, ax);
            gb_i64(&g, "ax1", 1, ax1);
            n = gb_node(&g, "ReduceMean", "rm", "x,ax", "m");
            gb_node(&g, "ReduceL2", "rl2", "x,ax1", "l2");
            gb_ai(&g, gb_node(&g, "ReduceLogSumExp", "lse", "x,ax1", "lse"), "keepdims", 0);
        } else {
            n = gb_node(&g, "ReduceMean", "rm", "x", "m");
            gb_aints(&g, n, "axes", 2, ax);
            gb_aints(&g, gb_node(&g, "ReduceL2", "rl2", "x", "l2"), "axes", 1, ax1);
            DittoOnnxNode *k = gb_node(&g, "ReduceLogSumExp", "lse", "x", "lse");
            gb_aints(&g, k, "axes", 1, ax1);
            gb_ai(&g, k, "keepdims", 0);
        }
        gb_ai(&g, n, "keepdims", 0);
        gb_node(&g, "ReduceSum", "rs", "x", "all");   /* no axes: everything, keepdims */
        gb_finish(&g);
        float x[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
        one_input(c, &g, &R, "x", 3, SH(2, 2, 3), x);
        out_is(c, v ? "onnx_exec.reduce.mean_axes_input" : "onnx_exec.reduce.mean_axes_attr", &R, 0, 1, SH(2), ARR(5, 8), 1e-6);
        out_is(c, "onnx_exec.reduce.l2", &R, 1, 3, SH(2, 1, 3), ARR(sqrt(17), sqrt(29), sqrt(45), sqrt(149), sqrt(185), sqrt(225)), 1e-5);
        double lse[6];
        for (int i = 0; i < 6; i++) {
            double a = x[(i / 3) * 6 + i % 3], b = x[(i / 3) * 6 + 3 + i % 3];
            lse[i] = log(exp(a) + exp(b));
        }
        out_is(c, "onnx_exec.reduce.logsumexp", &R, 2, 2, SH(2, 3), lse, 1e-5);
        out_is(c, "onnx_exec.reduce.sum_all_keepdims", &R, 3, 3, SH(1, 1, 1), ARR(78), 1e-5);
        run_free(&R);
        gb_free(&g);
    }
    /* LayerNormalization over the last axis equals its opset-11 decomposition; over the last two axes */
    gb_init(&g, 17);
    gb_input(&g, "x", DITTO_F32, 3, SH(2, 3, 4));
    gb_output(&g, "ln", DITTO_F32);
    gb_output(&g, "dec", DITTO_F32);
    gb_output(&g, "ln2", DITTO_F32);
    gb_f32(&g, "w", 1, SH(4), (float[]){ 0.5f, 1, 1.5f, 2 });
    gb_f32(&g, "b", 1, SH(4), (float[]){ 0.1f, -0.2f, 0.3f, 0 });
    gb_f32(&g, "w2", 2, SH(3, 4), (float[]){ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 });
    gb_f32(&g, "two", 0, NULL, (float[]){ 2 });
    gb_f32(&g, "eps", 0, NULL, (float[]){ 1e-5f });
    gb_i64(&g, "axm1", 1, (int64_t[]){ -1 });
    gb_node(&g, "LayerNormalization", "ln", "x,w,b", "ln");
    DittoOnnxNode *n = gb_node(&g, "LayerNormalization", "ln2", "x,w2", "ln2");
    gb_ai(&g, n, "axis", -2);
    static const int64_t axl[1] = { -1 };
    gb_aints(&g, gb_node(&g, "ReduceMean", "mu", "x", "mu"), "axes", 1, axl);
    gb_node(&g, "Sub", "d", "x,mu", "d");
    gb_node(&g, "Pow", "sq", "d,two", "sq");
    gb_aints(&g, gb_node(&g, "ReduceMean", "var", "sq", "var"), "axes", 1, axl);
    gb_node(&g, "Add", "ve", "var,eps", "ve");
    gb_node(&g, "Sqrt", "sd", "ve", "sd");
    gb_node(&g, "Div", "nrm", "d,sd", "nrm");
    gb_node(&g, "Mul", "sc", "nrm,w", "sc");
    gb_node(&g, "Add", "dec", "sc,b", "dec");
    gb_finish(&g);
    float x[24];
    for (int i = 0; i < 24; i++)
        x[i] = sinf((float)i * 1.3f) * 3.0f + (float)(i % 5);
    one_input(c, &g, &R, "x", 3, SH(2, 3, 4), x);
    double want[24], want2[24];
    for (int r = 0; r < 6; r++) {
        double mu = 0, var = 0;
        for (int k = 0; k < 4; k++)
            mu += x[r * 4 + k] / 4.0;
        for (int k = 0; k < 4; k++)
            var += (x[r * 4 + k] - mu) * (x[r * 4 + k] - mu) / 4.0;
        const double w[4] = { 0.5, 1, 1.5, 2 }, b[4] = { 0.1, -0.2, 0.3, 0 };
        for (int k = 0; k < 4; k++)
            want[r * 4 + k] = (x[r * 4 + k] - mu) / sqrt(var + 1e-5) * w[k] + b[k];
    }
    for (int s = 0; s < 2; s++) {
        double mu = 0, var = 0;
        for (int k = 0; k < 12; k++)
            mu += x[s * 12 + k] / 12.0;
        for (int k = 0; k < 12; k++)
            var += (x[s * 12 + k] - mu) * (x[s * 12 + k] - mu) / 12.0;
        for (int k = 0; k < 12; k++)
            want2[s * 12 + k] = (x[s * 12 + k] - mu) / sqrt(var + 1e-5) * (k + 1);
    }
    out_is(c, "onnx_exec.norm.layernorm_last", &R, 0, 3, SH(2, 3, 4), want, 1e-5);
    out_is(c, "onnx_exec.norm.layernorm_decomposed", &R, 1, 3, SH(2, 3, 4), want, 1e-5);
    out_is(c, "onnx_exec.norm.layernorm_two_axes", &R, 2, 3, SH(2, 3, 4), want2, 1e-4);
    run_free(&R);
    gb_free(&g);

    /* Softmax: opset 11 coerces to 2-D at axis 1, opset 13 uses one axis */
    for (int v = 0; v < 2; v++) {
        gb_init(&g, v ? 13 : 11);
        gb_input(&g, "x", DITTO_F32, 3, SH(1, 2, 2));
        gb_output(&g, "y", DITTO_F32);
        gb_node(&g, "Softmax", "sm", "x", "y");
        gb_finish(&g);
        one_input(c, &g, &R, "x", 3, SH(1, 2, 2), (float[]){ 0, 1, 2, 3 });
        double e[4] = { 1, exp(1.0), exp(2.0), exp(3.0) }, s4 = e[0] + e[1] + e[2] + e[3];
        if (v)
            out_is(c, "onnx_exec.softmax.opset13_last_axis", &R, 0, 3, SH(1, 2, 2),
                   ARR(e[0] / (e[0] + e[1]), e[1] / (e[0] + e[1]), e[2] / (e[2] + e[3]), e[3] / (e[2] + e[3])), 1e-6);
        else
            out_is(c, "onnx_exec.softmax.opset11_coerced", &R, 0, 3, SH(1, 2, 2), ARR(e[0] / s4, e[1] / s4, e[2] / s4, e[3] / s4), 1e-6);
        run_free(&R);
        gb_free(&g);
    }
}

/* ---- MatMul, Gemm, Conv, pools, Resize ---- */

static void test_nn(TestCtx *c)
{
    GB g;
    Run R;
    /* MatMul: (2,1,2,3) x (3,3,2) broadcast to (2,3,2,2); 1-D x 2-D */
    gb_init(&g, 13);
    gb_input(&g, "a", DITTO_F32, 4, SH(2, 1, 2, 3));
    gb_output(&g, "y", DITTO_F32);
    gb_output(&g, "v", DITTO_F32);
    float bw[18];
    for (int i = 0; i < 18; i++)
        bw[i] = (float)(i % 7) - 3.0f;
    gb_f32(&g, "b", 3, SH(3, 3, 2), bw);
    gb_f32(&g, "vec", 1, SH(3), (float[]){ 1, -1, 2 });
    gb_f32(&g, "m2", 2, SH(3, 2), (float[]){ 1, 2, 3, 4, 5, 6 });
    gb_node(&g, "MatMul", "mm", "a,b", "y");
    gb_node(&g, "MatMul", "mv", "vec,m2", "v");
    gb_finish(&g);
    float a[12];
    for (int i = 0; i < 12; i++)
        a[i] = (float)i * 0.5f - 2.0f;
    one_input(c, &g, &R, "a", 4, SH(2, 1, 2, 3), a);
    double want[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int m = 0; m < 2; m++)
                for (int n = 0; n < 2; n++) {
                    double s = 0;
                    for (int k = 0; k < 3; k++)
                        s += (double)a[(i * 2 + m) * 3 + k] * bw[(j * 3 + k) * 2 + n];
                    want[((i * 3 + j) * 2 + m) * 2 + n] = s;
                }
    out_is(c, "onnx_exec.matmul.broadcast_batch", &R, 0, 4, SH(2, 3, 2, 2), want, 1e-5);
    out_is(c, "onnx_exec.matmul.vector", &R, 1, 1, SH(2), ARR(1 - 3 + 10, 2 - 4 + 12), 1e-6);
    run_free(&R);
    gb_free(&g);

    /* Gemm: transB as the linear op; transA + alpha + beta + a broadcast C */
    gb_init(&g, 11);
    gb_input(&g, "a", DITTO_F32, 2, SH(2, 3));
    gb_output(&g, "lin", DITTO_F32);
    gb_output(&g, "gen", DITTO_F32);
    gb_f32(&g, "w", 2, SH(2, 3), (float[]){ 1, 0, -1, 2, 1, 0 });
    gb_f32(&g, "bias", 1, SH(2), (float[]){ 0.5f, -0.5f });
    gb_f32(&g, "b2", 2, SH(2, 2), (float[]){ 1, 2, 3, 4 });
    gb_f32(&g, "c2", 2, SH(3, 1), (float[]){ 1, 2, 3 });
    gb_ai(&g, gb_node(&g, "Gemm", "lin", "a,w,bias", "lin"), "transB", 1);
    DittoOnnxNode *n = gb_node(&g, "Gemm", "gen", "a,b2,c2", "gen");
    gb_ai(&g, n, "transA", 1);
    gb_af(&g, n, "alpha", 2.0f);
    gb_af(&g, n, "beta", -1.0f);
    gb_finish(&g);
    one_input(c, &g, &R, "a", 2, SH(2, 3), (float[]){ 1, 2, 3, 4, 5, 6 });
    out_is(c, "onnx_exec.gemm.linear", &R, 0, 2, SH(2, 2), ARR(-2 + 0.5, 4 - 0.5, -2 + 0.5, 13 - 0.5), 1e-6);
    /* A^T (3,2) = [[1,4],[2,5],[3,6]]; A^T B2 = [[13,18],[17,24],[21,30]] */
    out_is(c, "onnx_exec.gemm.transA_alpha_beta", &R, 1, 2, SH(3, 2), ARR(26 - 1, 36 - 1, 34 - 2, 48 - 2, 42 - 3, 60 - 3), 1e-5);
    run_free(&R);
    gb_free(&g);

    /* Conv SAME_UPPER stride 2, MaxPool ceil_mode, AveragePool count_include_pad, GlobalAveragePool */
    gb_init(&g, 11);
    gb_input(&g, "x", DITTO_F32, 4, SH(1, 1, 4, 4));
    gb_output(&g, "conv", DITTO_F32);
    gb_output(&g, "maxp", DITTO_F32);
    gb_output(&g, "avgp", DITTO_F32);
    gb_output(&g, "gap", DITTO_F32);
    gb_f32(&g, "w", 4, SH(1, 1, 2, 2), (float[]){ 1, 1, 1, 1 });
    n = gb_node(&g, "Conv", "conv", "x,w", "conv");
    gb_as(&g, n, "auto_pad", "SAME_UPPER");
    static const int64_t s2[2] = { 2, 2 }, k3[2] = { 3, 3 }, k2[2] = { 2, 2 }, p1[4] = { 1, 1, 1, 1 };
    gb_aints(&g, n, "strides", 2, s2);
    n = gb_node(&g, "MaxPool", "mp", "x", "maxp");
    gb_aints(&g, n, "kernel_shape", 2, k3);
    gb_aints(&g, n, "strides", 2, s2);
    gb_ai(&g, n, "ceil_mode", 1);
    n = gb_node(&g, "AveragePool", "ap", "x", "avgp");
    gb_aints(&g, n, "kernel_shape", 2, k2);
    gb_aints(&g, n, "strides", 2, s2);
    gb_aints(&g, n, "pads", 4, p1);
    gb_ai(&g, n, "count_include_pad", 1);
    gb_node(&g, "GlobalAveragePool", "gap", "x", "gap");
    gb_finish(&g);
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (float)(i + 1);
    one_input(c, &g, &R, "x", 4, SH(1, 1, 4, 4), x);
    out_is(c, "onnx_exec.conv.same_upper_s2", &R, 0, 4, SH(1, 1, 2, 2), ARR(14, 22, 46, 54), 1e-5);
    out_is(c, "onnx_exec.pool.max_ceil", &R, 1, 4, SH(1, 1, 2, 2), ARR(11, 12, 15, 16), 0);
    out_is(c, "onnx_exec.pool.avg_include_pad", &R, 2, 4, SH(1, 1, 3, 3), ARR(0.25, 1.25, 1.0, 3.5, 8.5, 5.0, 3.25, 7.25, 4.0), 1e-6);
    out_is(c, "onnx_exec.pool.global_avg", &R, 3, 4, SH(1, 1, 1, 1), ARR(8.5), 1e-6);
    run_free(&R);
    gb_free(&g);

    /* Resize: opset 11 with roi and empty scales + sizes (nearest/asymmetric/floor), opset 13 scales (linear), Upsample opset 9 */
    for (int v = 0; v < 3; v++) {
        gb_init(&g, v == 0 ? 11 : v == 1 ? 13 : 9);
        gb_input(&g, "x", DITTO_F32, 4, SH(1, 1, 2, 2));
        gb_output(&g, "y", DITTO_F32);
        if (v == 0) {
            gb_tensor(&g, "roi", DITTO_F32, 1, SH(0), (float[]){ 0 });
            gb_tensor(&g, "scales", DITTO_F32, 1, SH(0), (float[]){ 0 });
            gb_i64(&g, "sizes", 4, (int64_t[]){ 1, 1, 4, 3 });
            n = gb_node(&g, "Resize", "rz", "x,roi,scales,sizes", "y");
            gb_as(&g, n, "coordinate_transformation_mode", "asymmetric");
            gb_as(&g, n, "nearest_mode", "floor");
        } else if (v == 1) {
            gb_f32(&g, "scales", 1, SH(4), (float[]){ 1, 1, 2, 2 });
            n = gb_node(&g, "Resize", "rz", "x,,scales", "y");
            gb_as(&g, n, "mode", "linear");
        } else {
            gb_f32(&g, "scales", 1, SH(4), (float[]){ 1, 1, 2, 2 });
            gb_node(&g, "Upsample", "up", "x,scales", "y");
        }
        gb_finish(&g);
        one_input(c, &g, &R, "x", 4, SH(1, 1, 2, 2), (float[]){ 1, 2, 3, 4 });
        if (v == 0)
            out_is(c, "onnx_exec.resize.opset11_sizes_nearest", &R, 0, 4, SH(1, 1, 4, 3), ARR(1, 1, 2, 1, 1, 2, 3, 3, 4, 3, 3, 4), 0);
        else if (v == 1)
            out_is(c, "onnx_exec.resize.opset13_scales_linear", &R, 0, 4, SH(1, 1, 4, 4),
                   ARR(1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4), 1e-6);
        else
            out_is(c, "onnx_exec.resize.upsample_opset9", &R, 0, 4, SH(1, 1, 4, 4), ARR(1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4), 0);
        run_free(&R);
        gb_free(&g);
    }
}

/* ---- the rest of the op set, one graph each for activations, logic and norms ---- */

static void test_misc(TestCtx *c)
{
    GB g;
    Run R;
    const float xv[6] = { -2, -0.5f, 0, 0.5f, 1.5f, 3 };
    double want[16][6];
    /* activations without a table kind (composed on the device) and host-only ones */
    gb_init(&g, 20);
    gb_input(&g, "x", DITTO_F32, 2, SH(2, 3));
    static const char *const acts[] = { "Elu", "Selu", "Softsign", "HardSwish", "Celu", "Gelu", "Round", "Sign", "Mish", "Softplus",
                                        "ThresholdedRelu", "Atan" };
    for (int i = 0; i < 12; i++) {
        char out[32];
        snprintf(out, sizeof out, "o%d", i);
        gb_output(&g, out, DITTO_F32);
        DittoOnnxNode *n = gb_node(&g, acts[i], acts[i], "x", out);
        if (i == 4)
            gb_af(&g, n, "alpha", 2.0f);
        if (i == 5)
            gb_as(&g, n, "approximate", "tanh");
        if (i == 10)
            gb_af(&g, n, "alpha", 0.4f);
    }
    gb_finish(&g);
    one_input(c, &g, &R, "x", 2, SH(2, 3), xv);
    for (int k = 0; k < 6; k++) {
        double v = xv[k], al = 1.6732632423543772, ga = 1.0507009873554805, sp = log1p(exp(v));
        want[0][k] = v > 0 ? v : exp(v) - 1;
        want[1][k] = ga * (v > 0 ? v : al * (exp(v) - 1));
        want[2][k] = v / (1 + fabs(v));
        want[3][k] = v * fmin(fmax(v / 6 + 0.5, 0), 1);
        want[4][k] = fmax(0, v) + fmin(0, 2 * (exp(v / 2) - 1));
        want[5][k] = 0.5 * v * (1 + tanh(sqrt(2 / 3.141592653589793) * (v + 0.044715 * v * v * v)));
        want[6][k] = nearbyint(v);
        want[7][k] = v > 0 ? 1 : v < 0 ? -1 : 0;
        want[8][k] = v * tanh(sp);
        want[9][k] = sp;
        want[10][k] = v > 0.4 ? v : 0;
        want[11][k] = atan(v);
    }
    for (int i = 0; i < 12; i++) {
        char name[64];
        snprintf(name, sizeof name, "onnx_exec.act.%s", acts[i]);
        out_is(c, name, &R, i, 2, SH(2, 3), want[i], 2e-6);
    }
    run_free(&R);
    gb_free(&g);

    /* logic, casts and host-side indexing ops */
    gb_init(&g, 14);
    gb_input(&g, "x", DITTO_F32, 2, SH(2, 3));
    const char *outs[] = { "not", "and", "xor", "isnan", "castlike", "flat", "size", "argmax", "argmin", "cumsum", "trilu", "nonzero",
                           "gathere", "scatter", "s2d", "mask" };
    for (int i = 0; i < 16; i++)
        gb_output(&g, outs[i], DITTO_DTYPE_COUNT);
    gb_f32(&g, "zero", 0, NULL, (float[]){ 0 });
    gb_f32(&g, "one", 0, NULL, (float[]){ 1 });
    gb_tensor(&g, "ilike", DITTO_I64, 0, NULL, (int64_t[]){ 0 });
    gb_tensor(&g, "ax1", DITTO_I64, 0, NULL, (int64_t[]){ 1 });
    gb_tensor(&g, "gei", DITTO_I64, 2, SH(2, 2), (int64_t[]){ 2, 0, -1, 1 });
    gb_tensor(&g, "sidx", DITTO_I64, 2, SH(1, 1), (int64_t[]){ 1 });
    gb_f32(&g, "supd", 2, SH(1, 3), (float[]){ 7, 8, 9 });
    gb_node(&g, "Greater", "gt", "x,zero", "pos");
    gb_node(&g, "Less", "lt", "x,one", "small");
    gb_node(&g, "Not", "not", "pos", "not");
    gb_node(&g, "And", "and", "pos,small", "and");
    gb_node(&g, "Xor", "xor", "pos,small", "xor");
    gb_node(&g, "IsNaN", "isnan", "x", "isnan");
    gb_node(&g, "CastLike", "castlike", "x,ilike", "castlike");
    gb_ai(&g, gb_node(&g, "Flatten", "flat", "x", "flat"), "axis", 0);
    gb_node(&g, "Size", "size", "x", "size");
    DittoOnnxNode *n = gb_node(&g, "ArgMax", "argmax", "x", "argmax");
    gb_ai(&g, n, "axis", 1);
    gb_ai(&g, n, "keepdims", 0);
    gb_node(&g, "ArgMin", "argmin", "x", "argmin");
    n = gb_node(&g, "CumSum", "cumsum", "x,ax1", "cumsum");
    gb_ai(&g, n, "exclusive", 1);
    gb_ai(&g, n, "reverse", 1);
    gb_ai(&g, gb_node(&g, "Trilu", "trilu", "x", "trilu"), "upper", 0);
    gb_node(&g, "NonZero", "nonzero", "pos", "nonzero");
    gb_ai(&g, gb_node(&g, "GatherElements", "gathere", "x,gei", "gathere"), "axis", 1);
    gb_node(&g, "ScatterND", "scatter", "x,sidx,supd", "scatter");
    gb_i64(&g, "s1122", 4, (int64_t[]){ 1, 1, 2, 2 });
    gb_node(&g, "Slice", "first4", "flat_all,st0,en4", "four");
    gb_i64(&g, "st0", 1, (int64_t[]){ 0 });
    gb_i64(&g, "en4", 1, (int64_t[]){ 4 });
    gb_i64(&g, "m1", 1, (int64_t[]){ -1 });
    gb_node(&g, "Reshape", "flat_all", "x,m1", "flat_all");
    gb_node(&g, "Reshape", "r1122", "four,s1122", "four4");
    gb_ai(&g, gb_node(&g, "SpaceToDepth", "s2d", "four4", "s2d"), "blocksize", 2);
    gb_node(&g, "Dropout", "drop", "x", "dropped,mask");
    gb_finish(&g);
    one_input(c, &g, &R, "x", 2, SH(2, 3), xv);
    out_is(c, "onnx_exec.logic.not", &R, 0, 2, SH(2, 3), ARR(1, 1, 1, 0, 0, 0), 0);
    out_is(c, "onnx_exec.logic.and", &R, 1, 2, SH(2, 3), ARR(0, 0, 0, 1, 0, 0), 0);
    out_is(c, "onnx_exec.logic.xor", &R, 2, 2, SH(2, 3), ARR(1, 1, 1, 0, 1, 1), 0);
    out_is(c, "onnx_exec.logic.isnan", &R, 3, 2, SH(2, 3), ARR(0, 0, 0, 0, 0, 0), 0);
    out_is(c, "onnx_exec.cast.castlike_int", &R, 4, 2, SH(2, 3), ARR(-2, 0, 0, 0, 1, 3), 0);
    out_is(c, "onnx_exec.move.flatten_axis0", &R, 5, 2, SH(1, 6), ARR(-2, -0.5, 0, 0.5, 1.5, 3), 0);
    out_is(c, "onnx_exec.shape.size", &R, 6, 0, NULL, ARR(6), 0);
    out_is(c, "onnx_exec.index.argmax", &R, 7, 1, SH(2), ARR(2, 2), 0);
    out_is(c, "onnx_exec.index.argmin_keepdims", &R, 8, 2, SH(1, 3), ARR(0, 0, 0), 0);
    out_is(c, "onnx_exec.index.cumsum_excl_rev", &R, 9, 2, SH(2, 3), ARR(-0.5, 0, 0, 4.5, 3, 0), 0);
    out_is(c, "onnx_exec.index.trilu_lower", &R, 10, 2, SH(2, 3), ARR(-2, 0, 0, 0.5, 1.5, 0), 0);
    out_is(c, "onnx_exec.index.nonzero", &R, 11, 2, SH(2, 3), ARR(1, 1, 1, 0, 1, 2), 0);
    out_is(c, "onnx_exec.index.gather_elements", &R, 12, 2, SH(2, 2), ARR(0, -2, 3, 1.5), 0);
    out_is(c, "onnx_exec.index.scatter_nd", &R, 13, 2, SH(2, 3), ARR(-2, -0.5, 0, 7, 8, 9), 0);
    out_is(c, "onnx_exec.move.space_to_depth", &R, 14, 4, SH(1, 4, 1, 1), ARR(-2, -0.5, 0, 0.5), 0);
    out_is(c, "onnx_exec.move.dropout_mask", &R, 15, 2, SH(2, 3), ARR(1, 1, 1, 1, 1, 1), 0);
    run_free(&R);
    gb_free(&g);

    /* norms and the rest of the nn ops */
    gb_init(&g, 18);
    gb_input(&g, "x", DITTO_F32, 3, SH(1, 2, 3));
    const char *nouts[] = { "inorm", "bnorm", "gnorm", "lp", "prod", "convt", "logsm", "rmax" };
    for (int i = 0; i < 8; i++)
        gb_output(&g, nouts[i], DITTO_F32);
    gb_f32(&g, "s2", 1, SH(2), (float[]){ 2, -1 });
    gb_f32(&g, "b2", 1, SH(2), (float[]){ 0.5f, 1 });
    gb_f32(&g, "mean", 1, SH(2), (float[]){ 1, -1 });
    gb_f32(&g, "var", 1, SH(2), (float[]){ 4, 0.25f });
    gb_f32(&g, "g1", 1, SH(1), (float[]){ 3 });
    gb_f32(&g, "gb1", 1, SH(1), (float[]){ -2 });
    gb_f32(&g, "wt", 3, SH(2, 1, 2), (float[]){ 1, 2, 3, 4 });
    gb_i64(&g, "axes2", 1, (int64_t[]){ 2 });
    gb_af(&g, gb_node(&g, "InstanceNormalization", "in", "x,s2,b2", "inorm"), "epsilon", 0.0f);
    gb_af(&g, gb_node(&g, "BatchNormalization", "bn", "x,s2,b2,mean,var", "bnorm"), "epsilon", 0.0f);
    n = gb_node(&g, "GroupNormalization", "gn", "x,g1,gb1", "gnorm");
    gb_ai(&g, n, "num_groups", 1);
    gb_af(&g, n, "epsilon", 0.0f);
    gb_ai(&g, gb_node(&g, "LpNormalization", "lp", "x", "lp"), "axis", 1);
    gb_ai(&g, gb_node(&g, "ReduceProd", "prod", "x,axes2", "prod"), "keepdims", 0);
    static const int64_t st2[1] = { 2 };
    gb_aints(&g, gb_node(&g, "ConvTranspose", "ct", "x,wt", "convt"), "strides", 1, st2);
    gb_ai(&g, gb_node(&g, "LogSoftmax", "lsm", "x", "logsm"), "axis", 1);
    gb_node(&g, "ReduceMax", "rmax", "x,axes2", "rmax");
    gb_finish(&g);
    const float x3[6] = { 1, 2, 4, -1, 0, 5 };
    one_input(c, &g, &R, "x", 3, SH(1, 2, 3), x3);
    double in[6], bn[6], gn[6], lp[6], lsm[6];
    double all_mu = 11.0 / 6, all_var = 0;
    for (int k = 0; k < 6; k++)
        all_var += (x3[k] - all_mu) * (x3[k] - all_mu) / 6;
    for (int ch = 0; ch < 2; ch++) {
        const float *r = x3 + ch * 3;
        double mu = (r[0] + r[1] + r[2]) / 3, var = 0, s = ch ? -1 : 2, b = ch ? 1 : 0.5, m = ch ? -1 : 1, v = ch ? 0.25 : 4;
        for (int k = 0; k < 3; k++)
            var += (r[k] - mu) * (r[k] - mu) / 3;
        for (int k = 0; k < 3; k++) {
            in[ch * 3 + k] = (r[k] - mu) / sqrt(var) * s + b;
            bn[ch * 3 + k] = (r[k] - m) / sqrt(v) * s + b;
            gn[ch * 3 + k] = (r[k] - all_mu) / sqrt(all_var) * 3 - 2;
            double nrm = sqrt((double)x3[k] * x3[k] + (double)x3[3 + k] * x3[3 + k]);
            lp[ch * 3 + k] = r[k] / nrm;
            double mx = fmax(x3[k], x3[3 + k]);
            lsm[ch * 3 + k] = r[k] - mx - log(exp(x3[k] - mx) + exp(x3[3 + k] - mx));
        }
    }
    out_is(c, "onnx_exec.norm.instance", &R, 0, 3, SH(1, 2, 3), in, 1e-5);
    out_is(c, "onnx_exec.norm.batch", &R, 1, 3, SH(1, 2, 3), bn, 1e-6);
    out_is(c, "onnx_exec.norm.group_opset18", &R, 2, 3, SH(1, 2, 3), gn, 1e-5);
    out_is(c, "onnx_exec.norm.lp", &R, 3, 3, SH(1, 2, 3), lp, 1e-6);
    out_is(c, "onnx_exec.reduce.prod", &R, 4, 2, SH(1, 2), ARR(8, 0), 0);
    /* y[o] += x[i] w[i][k] at o = 2 i + k: channel 0 taps (1,2), channel 1 taps (3,4) */
    out_is(c, "onnx_exec.conv_transpose.1d", &R, 5, 3, SH(1, 1, 6), ARR(1 - 3, 2 - 4, 2, 4, 4 + 15, 8 + 20), 1e-6);
    out_is(c, "onnx_exec.softmax.log", &R, 6, 3, SH(1, 2, 3), lsm, 1e-5);
    out_is(c, "onnx_exec.reduce.max_keepdims", &R, 7, 3, SH(1, 2, 1), ARR(4, 5), 0);
    run_free(&R);
    gb_free(&g);
}

static void test_grid_sample(TestCtx *c)
{
    GB g;
    Run R;
    gb_init(&g, 16);
    gb_input(&g, "x", DITTO_F32, 4, SH(1, 1, 2, 2));
    gb_output(&g, "y", DITTO_F32);
    gb_f32(&g, "grid", 4, SH(1, 1, 3, 2), (float[]){ 0, 0, -1, -1, 1, -1 });
    gb_ai(&g, gb_node(&g, "GridSample", "gs", "x,grid", "y"), "align_corners", 1);
    gb_finish(&g);
    one_input(c, &g, &R, "x", 4, SH(1, 1, 2, 2), (float[]){ 1, 2, 3, 4 });
    out_is(c, "onnx_exec.grid_sample.align_corners", &R, 0, 4, SH(1, 1, 1, 3), ARR(2.5, 1, 2), 1e-6);
    run_free(&R);
    gb_free(&g);
}

/* ---- fp16 graph, memory plan ---- */

static void test_fp16_and_memory(TestCtx *c)
{
    GB g;
    Run R;
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F16, 2, SH(2, 2));
    gb_output(&g, "y", DITTO_F16);
    uint16_t w[2] = { ditto_f32_to_f16(0.5f), ditto_f32_to_f16(-2.0f) };
    gb_tensor(&g, "w", DITTO_F16, 1, SH(2), w);
    gb_node(&g, "Mul", "mul", "x,w", "y");
    gb_finish(&g);
    uint16_t x[4];
    const float xv[4] = { 1, 2, 3, -4 };
    for (int i = 0; i < 4; i++)
        x[i] = ditto_f32_to_f16(xv[i]);
    const char *names[1] = { "x" };
    const int nds[1] = { 2 };
    const int64_t *shapes[1] = { SH(2, 2) };
    const void *datas[1] = { x };
    const DittoDType dts[1] = { DITTO_F16 };
    run_graph(c, &g, &R, 1, names, nds, shapes, datas, dts);
    bool f16 = R.rc_run == 0 && R.out[0].t.dtype == DITTO_F16;
    test_report(c, "onnx_exec.fp16.output_dtype", f16, "rc %d dtype %s", R.rc_run, R.rc_run == 0 ? ditto_dtype_name(R.out[0].t.dtype) : "-");
    out_is(c, "onnx_exec.fp16.values", &R, 0, 2, SH(2, 2), ARR(0.5, -4, 1.5, 8), 0);
    run_free(&R);
    gb_free(&g);

    /* a chain of 24 element-wise ops on 1 MiB tensors: the free list keeps the arena near two buffers */
    gb_init(&g, 13);
    gb_input(&g, "x", DITTO_F32, 1, SH(262144));
    gb_output(&g, "y", DITTO_F32);
    gb_f32(&g, "k", 0, NULL, (float[]){ 0.5f });
    char in[16] = "x", out[16];
    for (int i = 0; i < 24; i++) {
        snprintf(out, sizeof out, i == 23 ? "y" : "t%d", i);
        char ins[40];
        snprintf(ins, sizeof ins, i % 2 ? "%s" : "%s,k", in);
        gb_node(&g, i % 2 ? "Relu" : "Add", out, ins, out);
        snprintf(in, sizeof in, "%s", out);
    }
    gb_finish(&g);
    float *big = ditto_malloc(262144 * sizeof *big);
    for (int i = 0; i < 262144; i++)
        big[i] = (float)(i % 17) - 8.0f;
    one_input(c, &g, &R, "x", 1, SH(262144), big);
    bool ok = R.rc_run == 0;
    for (int i = 0; ok && i < 262144; i++) {
        float v = big[i];
        for (int k = 0; k < 12; k++)
            v = fmaxf(v + 0.5f, 0.0f);
        ok = ((float *)R.out[0].t.data)[i] == v;
    }
    test_report(c, "onnx_exec.memory.values", ok, "24-op chain");
    test_report(c, "onnx_exec.memory.reuse", R.info.last_run_bytes <= 3u * 262144 * 4, "%zu bytes carved for 24 tensors of 1 MiB",
                R.info.last_run_bytes);
    run_free(&R);
    ditto_free(big);
    gb_free(&g);
}

/* ---- a HuBERT-shaped graph: conv front end, grouped positional conv, attention, GELU, masks ---- */

static void test_hubert_like(TestCtx *c)
{
    GB g;
    Run R;
    gb_init(&g, 17);
    gb_input(&g, "input_values", DITTO_F32, 2, SH(1, -1));
    gb_output(&g, "encoding_out", DITTO_F32);
    /* weights */
    float buf[8 * 8 * 4];
    for (int i = 0; i < 8 * 8 * 4; i++)
        buf[i] = sinf((float)i * 0.37f) * 0.3f;
    gb_f32(&g, "conv0.w", 3, SH(8, 1, 10), buf);
    gb_f32(&g, "conv0.b", 1, SH(8), buf + 10);
    gb_f32(&g, "ln0.w", 1, SH(8), buf + 20);
    gb_f32(&g, "ln0.b", 1, SH(8), buf + 30);
    gb_f32(&g, "pos.w", 3, SH(8, 2, 4), buf + 40);      /* groups 4: 8/4 = 2 in per group, kernel 4, pad 2 */
    gb_f32(&g, "pos.b", 1, SH(8), buf + 100);
    gb_f32(&g, "q.w", 2, SH(8, 8), buf + 110);
    gb_f32(&g, "k.w", 2, SH(8, 8), buf + 120);
    gb_f32(&g, "v.w", 2, SH(8, 8), buf + 130);
    gb_f32(&g, "sqrt2", 0, NULL, (float[]){ 1.4142135f });
    gb_f32(&g, "one", 0, NULL, (float[]){ 1.0f });
    gb_f32(&g, "half", 0, NULL, (float[]){ 0.5f });
    gb_f32(&g, "scale", 0, NULL, (float[]){ 0.5f });    /* 1/sqrt(head_dim 4) */
    gb_f32(&g, "neg", 0, NULL, (float[]){ -3.4e38f });
    gb_i64(&g, "ax1", 1, (int64_t[]){ 1 });
    gb_i64(&g, "ax0", 1, (int64_t[]){ 0 });
    gb_i64(&g, "st0", 1, (int64_t[]){ 0 });
    gb_i64(&g, "en_m1", 1, (int64_t[]){ -1 });
    gb_i64(&g, "ax2", 1, (int64_t[]){ 2 });
    gb_i64(&g, "heads", 2, (int64_t[]){ 2, 4 });
    gb_i64(&g, "minus1", 1, (int64_t[]){ -1 });
    gb_tensor(&g, "i1", DITTO_I64, 0, NULL, (int64_t[]){ 1 });
    gb_tensor(&g, "izero", DITTO_I64, 0, NULL, (int64_t[]){ 0 });
    gb_tensor(&g, "cos_one", DITTO_I64, 1, SH(1), (int64_t[]){ 1 });
    /* feature encoder: Unsqueeze, Conv1d k10 s5, Transpose, LayerNormalization, Transpose, Erf GELU */
    gb_node(&g, "Unsqueeze", "unsq", "input_values,ax1", "x3");
    DittoOnnxNode *n = gb_node(&g, "Conv", "conv0", "x3,conv0.w,conv0.b", "c0");
    static const int64_t s5[1] = { 5 }, k10[1] = { 10 }, p22[2] = { 2, 2 }, k4[1] = { 4 }, perm021[3] = { 0, 2, 1 }, perm0213[4] = { 0, 2, 1, 3 },
                         perm0231[4] = { 0, 2, 3, 1 };
    gb_aints(&g, n, "strides", 1, s5);
    gb_aints(&g, n, "kernel_shape", 1, k10);
    gb_aints(&g, gb_node(&g, "Transpose", "t0", "c0", "c0t"), "perm", 3, perm021);
    gb_node(&g, "LayerNormalization", "ln0", "c0t,ln0.w,ln0.b", "h0");
    gb_node(&g, "Div", "g_div", "h0,sqrt2", "g1");
    gb_node(&g, "Erf", "g_erf", "g1", "g2");
    gb_node(&g, "Add", "g_add", "g2,one", "g3");
    gb_node(&g, "Mul", "g_mul", "h0,g3", "g4");
    gb_node(&g, "Mul", "g_half", "g4,half", "h1");             /* (1, T, 8) */
    /* positional conv: Transpose, grouped Conv (pad 2), drop the last frame with Slice, GELU-free Add */
    gb_aints(&g, gb_node(&g, "Transpose", "t1", "h1", "h1t"), "perm", 3, perm021);
    n = gb_node(&g, "Conv", "pos", "h1t,pos.w,pos.b", "pc");
    gb_ai(&g, n, "group", 4);
    gb_aints(&g, n, "pads", 2, p22);
    gb_aints(&g, n, "kernel_shape", 1, k4);
    gb_node(&g, "Slice", "drop_last", "pc,st0,en_m1,ax2", "pcs");
    gb_aints(&g, gb_node(&g, "Transpose", "t2", "pcs", "pct"), "perm", 3, perm021);
    gb_node(&g, "Add", "res", "h1,pct", "h2");
    /* attention, 2 heads of 4: shapes from Shape/Gather/Concat as exporters write them */
    gb_node(&g, "MatMul", "q", "h2,q.w", "q");
    gb_node(&g, "MatMul", "k", "h2,k.w", "k");
    gb_node(&g, "MatMul", "v", "h2,v.w", "v");
    gb_node(&g, "Shape", "shp", "h2", "hs");
    gb_node(&g, "Gather", "getT", "hs,i1", "T");
    gb_node(&g, "Unsqueeze", "uT", "T,ax0", "Tv");
    n = gb_node(&g, "Concat", "mkshape", "cos_one,Tv,heads", "qshape");
    gb_ai(&g, n, "axis", 0);
    gb_node(&g, "Reshape", "rq", "q,qshape", "q4");
    gb_node(&g, "Reshape", "rk", "k,qshape", "k4");
    gb_node(&g, "Reshape", "rv", "v,qshape", "v4");
    gb_aints(&g, gb_node(&g, "Transpose", "tq", "q4", "qh"), "perm", 4, perm0213);
    gb_aints(&g, gb_node(&g, "Transpose", "tk", "k4", "kh"), "perm", 4, perm0231);
    gb_aints(&g, gb_node(&g, "Transpose", "tv", "v4", "vh"), "perm", 4, perm0213);
    gb_node(&g, "MatMul", "qk", "qh,kh", "s0");
    gb_node(&g, "Mul", "qk_scale", "s0,scale", "s1");
    /* an all-true mask built from the shape, as exporters emit even without a mask input */
    gb_node(&g, "Unsqueeze", "uT2", "T,ax0", "Tv2");
    n = gb_node(&g, "Concat", "mshape", "cos_one,cos_one,Tv,Tv2", "mshape4");
    gb_ai(&g, n, "axis", 0);
    n = gb_node(&g, "ConstantOfShape", "ones", "mshape4", "m0");
    gb_tensor(&g, "one_i64", DITTO_I64, 1, SH(1), (int64_t[]){ 1 });
    gb_at(&g, n, "value", "one_i64");
    gb_node(&g, "Equal", "meq", "m0,izero", "masked");      /* all false */
    gb_node(&g, "Where", "mwhere", "masked,neg,s1", "s2");
    n = gb_node(&g, "Softmax", "sm", "s2", "p");
    gb_ai(&g, n, "axis", -1);
    gb_node(&g, "MatMul", "pv", "p,vh", "o4");
    gb_aints(&g, gb_node(&g, "Transpose", "to", "o4", "o4t"), "perm", 4, perm0213);
    gb_i64(&g, "oshape", 3, (int64_t[]){ 0, 0, -1 });
    gb_node(&g, "Reshape", "ro", "o4t,oshape", "o3");
    gb_node(&g, "Add", "res2", "h2,o3", "h3");
    gb_node(&g, "Squeeze", "sq", "h3,ax0", "encoding_out");
    gb_finish(&g);

    int L = 80;
    float *x = ditto_malloc((size_t)L * sizeof *x);
    for (int i = 0; i < L; i++)
        x[i] = 0.3f * sinf((float)i * 0.21f) + 0.05f * cosf((float)i * 1.7f);
    one_input(c, &g, &R, "input_values", 2, SH(1, L), x);

    /* reference with plain loops in double */
    int T = (L - 10) / 5 + 1, C = 8;
    double h1[15][8], h2[15][8], out[15][8];
    for (int t = 0; t < T; t++) {
        double row[8], mu = 0, var = 0;
        for (int o = 0; o < C; o++) {
            double s = buf[10 + o];
            for (int k = 0; k < 10; k++)
                s += (double)buf[o * 10 + k] * x[t * 5 + k];
            row[o] = s;
            mu += s / C;
        }
        for (int o = 0; o < C; o++)
            var += (row[o] - mu) * (row[o] - mu) / C;
        for (int o = 0; o < C; o++) {
            double h = (row[o] - mu) / sqrt(var + 1e-5) * buf[20 + o] + buf[30 + o];
            h1[t][o] = 0.5 * h * (1 + erf(h / 1.4142135));
        }
    }
    for (int t = 0; t < T; t++)
        for (int o = 0; o < C; o++) {
            int grp = o / 2;
            double s = buf[100 + o];
            for (int ci = 0; ci < 2; ci++)
                for (int k = 0; k < 4; k++) {
                    int ti = t - 2 + k;
                    if (ti >= 0 && ti < T)
                        s += (double)buf[40 + (o * 2 + ci) * 4 + k] * h1[ti][grp * 2 + ci];
                }
            h2[t][o] = h1[t][o] + s;
        }
    double q[15][8], k[15][8], v[15][8];
    for (int t = 0; t < T; t++)
        for (int o = 0; o < C; o++) {
            q[t][o] = k[t][o] = v[t][o] = 0;
            for (int i = 0; i < C; i++) {
                q[t][o] += h2[t][i] * buf[110 + i * 8 + o];
                k[t][o] += h2[t][i] * buf[120 + i * 8 + o];
                v[t][o] += h2[t][i] * buf[130 + i * 8 + o];
            }
        }
    for (int hd = 0; hd < 2; hd++)
        for (int t = 0; t < T; t++) {
            double sc[15], mx = -1e300, sum = 0;
            for (int u = 0; u < T; u++) {
                sc[u] = 0;
                for (int d = 0; d < 4; d++)
                    sc[u] += q[t][hd * 4 + d] * k[u][hd * 4 + d];
                sc[u] *= 0.5;
                mx = sc[u] > mx ? sc[u] : mx;
            }
            for (int u = 0; u < T; u++)
                sum += sc[u] = exp(sc[u] - mx);
            for (int d = 0; d < 4; d++) {
                double acc = 0;
                for (int u = 0; u < T; u++)
                    acc += sc[u] / sum * v[u][hd * 4 + d];
                out[t][hd * 4 + d] = h2[t][hd * 4 + d] + acc;
            }
        }
    out_is(c, "onnx_exec.hubert_like.encoding_out", &R, 0, 2, SH(T, C), &out[0][0], 2e-5);
    test_report(c, "onnx_exec.hubert_like.folded_nothing_dynamic", R.info.n_folded == 0 && R.info.n_run == g.m.n_nodes,
                "run %zu of %zu", R.info.n_run, g.m.n_nodes);
    run_free(&R);
    ditto_free(x);
    gb_free(&g);
}

/* ---- the real models against ONNX Runtime (when ../shared is present) ---- */

static void test_real_models(TestCtx *c)
{
    const char *shared = test_shared_dir();
    char path[4096];
    if (!shared) {
        c->skipped++;
        return;
    }
    snprintf(path, sizeof path, "%s/fixtures/onnx/manifest.json", shared);
    FILE *f = fopen(path, "rb");
    if (!f) {
        c->skipped++;
        return;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = ditto_malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size)
        abort();
    fclose(f);
    text[size] = '\0';
    cJSON *root = cJSON_Parse(text);
    ditto_free(text);
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(cs, "name")->valuestring;
        if (!strstr(name, "_real"))
            continue;   /* ditto verify runs all of them; one input per model here */
        char tname[160], mpath[4096], iopath[4096];
        snprintf(tname, sizeof tname, "onnx_exec.real.%s", name);
        snprintf(mpath, sizeof mpath, "%s/fixtures/onnx/%s", shared, cJSON_GetObjectItemCaseSensitive(cs, "model_file")->valuestring);
        snprintf(iopath, sizeof iopath, "%s/fixtures/onnx/%s", shared, cJSON_GetObjectItemCaseSensitive(cs, "io_file")->valuestring);
        DittoOnnxModel *m = NULL;
        DittoCatalog *io = NULL;
        DittoOnnxRunner *r = NULL;
        DittoArena ws;
        ditto_arena_init(&ws, &c->be->allocator, 0);
        int rc = ditto_onnx_open(&m, mpath, &c->be->log);
        if (rc >= 0)
            rc = ditto_catalog_open_pth(&io, iopath, &c->be->log);
        if (rc >= 0)
            rc = ditto_onnx_runner_open(&r, m, c->be, NULL);
        DittoOnnxIO in[4], out[16];
        float *bufs[4] = { NULL };
        int nin = 0, nout = 0;
        for (size_t i = 0; rc >= 0 && i < m->n_inputs && nin < 4; i++) {
            const DittoCatalogEntry *e = ditto_catalog_find(io, m->inputs[i].name);
            if (!e) {
                rc = DITTO_ERR_NOENT;
                break;
            }
            bufs[nin] = ditto_malloc((size_t)ditto_catalog_entry_numel(e) * sizeof(float));
            ditto_catalog_read_f32(io, e, bufs[nin]);
            in[nin].name = m->inputs[i].name;
            in[nin].t = ditto_tensor(bufs[nin], DITTO_F32, e->ndim, e->shape);
            nin++;
        }
        for (size_t i = 0; rc >= 0 && i < m->n_outputs && nout < 16; i++)
            out[nout++].name = m->outputs[i].name;
        if (rc >= 0)
            rc = ditto_onnx_runner_run(r, &ws, in, nin, out, nout);
        double worst = 0;
        for (int i = 0; rc >= 0 && i < nout; i++) {
            const DittoCatalogEntry *e = ditto_catalog_find(io, out[i].name);
            int64_t n = e ? ditto_catalog_entry_numel(e) : -1;
            if (n != ditto_tensor_numel(&out[i].t)) {
                rc = DITTO_ERR_SHAPE;
                break;
            }
            float *ref = ditto_malloc((size_t)n * sizeof *ref);
            ditto_catalog_read_f32(io, e, ref);
            double d2 = 0, r2 = 0;
            for (int64_t k = 0; k < n; k++) {
                double o;
                ditto_convert(&o, DITTO_F64, (const char *)out[i].t.data + (size_t)k * ditto_dtype_size(out[i].t.dtype), out[i].t.dtype, 1);
                d2 += (o - ref[k]) * (o - ref[k]);
                r2 += (double)ref[k] * ref[k];
            }
            double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
            worst = rel > worst ? rel : worst;
            ditto_free(ref);
        }
        double tol = strstr(name, "fp16") ? 1e-2 : 1e-4;
        test_report(c, tname, rc >= 0 && worst <= tol, "rc %d, worst rel_l2 %.2e (tol %.0e)", rc, worst, tol);
        for (int i = 0; i < nin; i++)
            ditto_free(bufs[i]);
        ditto_onnx_runner_close(&r);
        ditto_catalog_close(&io);
        ditto_onnx_close(&m);
        ditto_arena_free(&ws);
    }
    cJSON_Delete(root);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    test_errors(&c);
    test_shapes(&c);
    test_elementwise(&c);
    test_movement(&c);
    test_reduce_norm(&c);
    test_nn(&c);
    test_misc(&c);
    test_grid_sample(&c);
    test_fp16_and_memory(&c);
    test_hubert_like(&c);
    test_real_models(&c);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
