/*
 * ONNX reader: protobuf wire format, ModelProto -> graph + initializer catalog.
 * A small protobuf writer below builds models field by field, so everything
 * except the real-model checks runs without ../shared: typed fields (packed
 * and not), raw data, external data files, attributes of every kind, Constant
 * nodes, value infos with symbolic dims, init-as-input graphs; hostile files
 * (each must fail with exactly one error line naming the file), truncation
 * and bit-flip sweeps, allocation failures. The real models in
 * ../shared/models are checked against their README and the ONNX fixtures'
 * manifest.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/dtype.h"
#include "core/log.h"
#include "core/mem.h"
#include "weights/onnx.h"
#include "weights/protobuf.h"
#include "test_util.h"

/* ---- protobuf writer ------------------------------------------------------------- */

static void pb_varint(TestBuf *b, uint64_t v)
{
    while (v >= 0x80) {
        test_buf_put8(b, (unsigned)(v & 0x7f) | 0x80);
        v >>= 7;
    }
    test_buf_put8(b, (unsigned)v);
}

enum { VARINT = 0, I64 = 1, LEN = 2, I32 = 5 };

static void pb_tag(TestBuf *b, unsigned field, unsigned wire) { pb_varint(b, (uint64_t)field << 3 | wire); }
static void pb_int(TestBuf *b, unsigned field, int64_t v) { pb_tag(b, field, VARINT); pb_varint(b, (uint64_t)v); }

static void pb_bytes(TestBuf *b, unsigned field, const void *d, size_t n)
{
    pb_tag(b, field, LEN);
    pb_varint(b, n);
    test_buf_put(b, d, n);
}

static void pb_str(TestBuf *b, unsigned field, const char *s) { pb_bytes(b, field, s, strlen(s)); }

/* sub-message; consumes *sub */
static void pb_msg(TestBuf *b, unsigned field, TestBuf *sub)
{
    pb_bytes(b, field, sub->p, sub->n);
    test_buf_free(sub);
}

static void pb_fixed32(TestBuf *b, uint32_t u)
{
    for (int i = 0; i < 4; i++)
        test_buf_put8(b, (u >> (8 * i)) & 0xff);
}

static void pb_fixed64(TestBuf *b, uint64_t u)
{
    pb_fixed32(b, (uint32_t)u);
    pb_fixed32(b, (uint32_t)(u >> 32));
}

static void pb_f32(TestBuf *b, unsigned field, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    pb_tag(b, field, I32);
    pb_fixed32(b, u);
}

static void pb_ints(TestBuf *b, unsigned field, const int64_t *v, size_t n, bool packed)
{
    if (!packed) {
        for (size_t i = 0; i < n; i++)
            pb_int(b, field, v[i]);
        return;
    }
    TestBuf t = { 0 };
    for (size_t i = 0; i < n; i++)
        pb_varint(&t, (uint64_t)v[i]);
    pb_msg(b, field, &t);
}

static void pb_floats(TestBuf *b, unsigned field, const float *v, size_t n, bool packed)
{
    if (!packed) {
        for (size_t i = 0; i < n; i++)
            pb_f32(b, field, v[i]);
        return;
    }
    TestBuf t = { 0 };
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        pb_fixed32(&t, u);
    }
    pb_msg(b, field, &t);
}

static void pb_doubles(TestBuf *b, unsigned field, const double *v, size_t n, bool packed)
{
    TestBuf t = { 0 };
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, &v[i], 8);
        if (packed) {
            pb_fixed64(&t, u);
        } else {
            pb_tag(b, field, I64);
            pb_fixed64(b, u);
        }
    }
    if (packed)
        pb_msg(b, field, &t);
}

/* ---- ONNX builders (field numbers of onnx.proto) ----------------------------------- */

enum { T_FLOAT = 1, T_UINT8 = 2, T_INT8 = 3, T_UINT16 = 4, T_INT32 = 6, T_INT64 = 7, T_STRING = 8, T_BOOL = 9, T_FLOAT16 = 10,
       T_DOUBLE = 11, T_COMPLEX64 = 14, T_BFLOAT16 = 16 };

/* TensorProto header: name (8), dims (1), data_type (2) */
static void t_head(TestBuf *t, const char *name, int dtype, int nd, const int64_t *dims, bool packed_dims)
{
    if (name)
        pb_str(t, 8, name);
    pb_ints(t, 1, dims, (size_t)nd, packed_dims);
    pb_int(t, 2, dtype);
}

static void t_raw(TestBuf *t, const char *name, int dtype, int nd, const int64_t *dims, const void *raw, size_t n)
{
    t_head(t, name, dtype, nd, dims, true);
    pb_bytes(t, 9, raw, n);
}

/* ValueInfoProto: dims < 0 become dim_param "N"; nd < 0: no shape */
static void vinfo(TestBuf *g, unsigned field, const char *name, int elem, int nd, const int64_t *dims)
{
    TestBuf v = { 0 }, type = { 0 }, tt = { 0 }, shape = { 0 };
    pb_str(&v, 1, name);
    pb_int(&tt, 1, elem);
    for (int i = 0; i < nd; i++) {
        TestBuf d = { 0 };
        if (dims[i] < 0)
            pb_str(&d, 2, "N");
        else
            pb_int(&d, 1, dims[i]);
        pb_msg(&shape, 1, &d);
    }
    if (nd >= 0)
        pb_msg(&tt, 2, &shape);
    else
        test_buf_free(&shape);
    pb_msg(&type, 1, &tt);
    pb_msg(&v, 2, &type);
    pb_msg(g, field, &v);
}

/* NodeProto with attributes (already serialized AttributeProto bodies, each consumed) */
static void node(TestBuf *g, const char *op, const char *name, const char *in, const char *out, TestBuf *attrs, int nattrs)
{
    TestBuf n = { 0 };
    char tmp[256];
    /* in / out: comma-separated lists, "" items kept (omitted optional inputs) */
    for (int pass = 0; pass < 2; pass++) {
        const char *s = pass ? out : in;
        if (!s)
            continue;
        for (;;) {
            const char *c = strchr(s, ',');
            size_t l = c ? (size_t)(c - s) : strlen(s);
            memcpy(tmp, s, l);
            tmp[l] = 0;
            pb_str(&n, pass ? 2 : 1, tmp);
            if (!c)
                break;
            s = c + 1;
        }
    }
    if (name)
        pb_str(&n, 3, name);
    pb_str(&n, 4, op);
    for (int i = 0; i < nattrs; i++)
        pb_msg(&n, 5, &attrs[i]);
    pb_msg(g, 1, &n);
}

static void a_int(TestBuf *a, const char *name, int64_t v) { pb_str(a, 1, name); pb_int(a, 3, v); pb_int(a, 20, 2); }
static void a_float(TestBuf *a, const char *name, float v) { pb_str(a, 1, name); pb_f32(a, 2, v); pb_int(a, 20, 1); }
static void a_str(TestBuf *a, const char *name, const char *v) { pb_str(a, 1, name); pb_str(a, 4, v); pb_int(a, 20, 3); }

static void model(TestBuf *m, int64_t ir, int64_t opset, TestBuf *graph)
{
    pb_int(m, 1, ir);
    pb_str(m, 2, "ditto-test");
    pb_msg(m, 7, graph);
    TestBuf o = { 0 };
    pb_str(&o, 1, "");
    pb_int(&o, 2, opset);
    pb_msg(m, 8, &o);
}

/* ---- the reference model --------------------------------------------------------------- */

static const float w_vals[18] = { 1, -2, 3.5f, 0.25f, -1e-3f, 1e6f, 7, 8, 9, -10, 11, 12, 13, 14, 15, 16, 17, -18 };
static const float b_vals[2] = { 0.5f, -0.5f };
static const int64_t i64_vals[3] = { -1, 0, (int64_t)1 << 40 };
static const int64_t i32_vals[3] = { -7, 0, 2147483647 };
static const int64_t u8_vals[4] = { 0, 1, 200, 255 };
static const int64_t i8_vals[3] = { -128, 0, 127 };
static const int64_t bool_vals[2] = { 1, 0 };
static const double f64_vals[2] = { 1.0 / 3.0, -1e300 };
static const float f16_src[3] = { 1.5f, -2.0f, 65504.0f };
static const float bf16_src[2] = { 1.0f, -3.5f };

/*
 * Exercises every typed field, packed and unpacked, a raw-data initializer that is also
 * listed as a graph input, attributes of every supported kind, Constant nodes (value,
 * value_float, value_ints), an attribute tensor, symbolic dims and unknown fields.
 */
static void make_ref(TestBuf *m)
{
    TestBuf g = { 0 }, t = { 0 }, a[8];
    memset(a, 0, sizeof a);

    /* nodes: Constant(value) -> shape; Reshape; Conv with attributes; ConstantOfShape with a tensor attribute */
    TestBuf ct = { 0 };
    t_raw(&ct, NULL, T_INT64, 1, (int64_t[]){ 2 }, (int64_t[]){ 1, -1 }, 16);
    pb_str(&a[0], 1, "value");
    pb_msg(&a[0], 5, &ct);
    pb_int(&a[0], 20, 4);
    node(&g, "Constant", "c0", NULL, "shape", a, 1);
    node(&g, "Reshape", NULL, "x,shape", "y", NULL, 0);

    pb_str(&a[0], 1, "kernel_shape");
    pb_ints(&a[0], 8, (int64_t[]){ 3, 3 }, 2, true);
    pb_int(&a[0], 20, 7);
    pb_str(&a[1], 1, "pads");
    pb_ints(&a[1], 8, (int64_t[]){ 1, 1, -1, 1 }, 4, false);
    pb_int(&a[1], 20, 7);
    a_int(&a[2], "group", -3);
    a_float(&a[3], "alpha", 0.125f);
    a_str(&a[4], "auto_pad", "NOT\tSET\n");   /* attribute strings are text, not names: control characters kept */
    pb_str(&a[5], 1, "scales");
    pb_floats(&a[5], 7, (float[]){ 1.5f, 2.5f }, 2, true);
    pb_floats(&a[5], 7, (float[]){ 3.5f }, 1, false);   /* packed and unpacked records of one field concatenate */
    pb_int(&a[5], 20, 6);
    pb_str(&a[6], 1, "names");
    pb_str(&a[6], 9, "alpha");
    pb_str(&a[6], 9, "");
    pb_int(&a[6], 20, 8);
    pb_str(&a[7], 1, "legacy_i");   /* IR 1 style: no type field */
    pb_int(&a[7], 3, 42);
    pb_str(&a[7], 13, "doc string: skipped");
    node(&g, "Conv", "conv1", "y,w,", "z", a, 8);

    TestBuf vt = { 0 };
    t_head(&vt, NULL, T_FLOAT, 1, (int64_t[]){ 1 }, false);
    pb_floats(&vt, 4, (float[]){ 0.75f }, 1, false);
    pb_str(&a[0], 1, "value");
    pb_msg(&a[0], 5, &vt);
    pb_int(&a[0], 20, 4);
    node(&g, "ConstantOfShape", "fill", "shape", "filled", a, 1);
    a_float(&a[0], "value_float", -4.0f);
    node(&g, "Constant", NULL, NULL, "cf", a, 1);
    pb_str(&a[0], 1, "value_ints");
    pb_ints(&a[0], 8, (int64_t[]){ 5, -6, 7 }, 3, true);
    pb_int(&a[0], 20, 7);
    node(&g, "Constant", NULL, NULL, "ci", a, 1);

    pb_str(&g, 2, "ref_graph");
    pb_str(&g, 10, "graph doc");

    /* initializers */
    t_raw(&t, "w", T_FLOAT, 4, (int64_t[]){ 2, 1, 3, 3 }, w_vals, sizeof w_vals);
    pb_msg(&g, 5, &t);
    t_head(&t, "b", T_FLOAT, 1, (int64_t[]){ 2 }, false);
    pb_floats(&t, 4, b_vals, 2, true);
    pb_msg(&g, 5, &t);
    t_head(&t, "i64", T_INT64, 1, (int64_t[]){ 3 }, true);
    pb_ints(&t, 7, i64_vals, 3, false);
    pb_msg(&g, 5, &t);
    t_head(&t, "i32", T_INT32, 2, (int64_t[]){ 1, 3 }, false);
    pb_ints(&t, 5, i32_vals, 3, true);
    pb_msg(&g, 5, &t);
    t_head(&t, "u8", T_UINT8, 1, (int64_t[]){ 4 }, true);
    pb_ints(&t, 5, u8_vals, 4, false);
    pb_msg(&g, 5, &t);
    t_head(&t, "i8", T_INT8, 1, (int64_t[]){ 3 }, true);
    pb_ints(&t, 5, i8_vals, 3, true);
    pb_msg(&g, 5, &t);
    t_head(&t, "flag", T_BOOL, 1, (int64_t[]){ 2 }, true);
    pb_ints(&t, 5, bool_vals, 2, true);
    pb_msg(&g, 5, &t);
    t_head(&t, "f64", T_DOUBLE, 1, (int64_t[]){ 2 }, true);
    pb_doubles(&t, 10, f64_vals, 2, false);
    pb_msg(&g, 5, &t);
    int64_t h[3], bh[2];
    for (int i = 0; i < 3; i++)
        h[i] = ditto_f32_to_f16(f16_src[i]);
    for (int i = 0; i < 2; i++)
        bh[i] = ditto_f32_to_bf16(bf16_src[i]);
    t_head(&t, "f16", T_FLOAT16, 1, (int64_t[]){ 3 }, true);
    pb_ints(&t, 5, h, 3, true);
    pb_msg(&g, 5, &t);
    t_head(&t, "bf16", T_BFLOAT16, 1, (int64_t[]){ 2 }, true);
    pb_ints(&t, 5, bh, 2, false);
    pb_msg(&g, 5, &t);
    t_raw(&t, "scalar", T_FLOAT, 0, NULL, (float[]){ 2.5f }, 4);
    pb_msg(&g, 5, &t);
    t_head(&t, "empty", T_FLOAT, 2, (int64_t[]){ 0, 5 }, true);   /* zero-size: no data at all */
    pb_msg(&g, 5, &t);

    /* inputs (w is an initializer: a constant), outputs, value infos; unknown fields of every wire type */
    vinfo(&g, 11, "x", T_FLOAT, 2, (int64_t[]){ -1, 2 });
    vinfo(&g, 11, "w", T_FLOAT, 4, (int64_t[]){ 2, 1, 3, 3 });
    vinfo(&g, 11, "extra", T_FLOAT16, -1, NULL);
    vinfo(&g, 12, "z", T_FLOAT, 4, (int64_t[]){ -1, 2, 3, 3 });
    vinfo(&g, 13, "y", T_COMPLEX64, 3, (int64_t[]){ 1, 1, 0 });
    vinfo(&g, 13, "big", T_FLOAT, 7, (int64_t[]){ 1, 2, 3, 4, 5, 6, 7 });
    pb_int(&g, 99, 12345);
    pb_tag(&g, 98, I64);
    pb_fixed64(&g, 0x0123456789abcdefull);
    pb_tag(&g, 97, I32);
    pb_fixed32(&g, 7);

    pb_int(m, 1, 8);
    pb_str(m, 2, "ditto-test");
    pb_str(m, 3, "1.0");
    TestBuf md = { 0 };
    pb_str(&md, 1, "key");
    pb_str(&md, 2, "value");
    pb_msg(m, 14, &md);   /* metadata_props: skipped */
    pb_msg(m, 7, &g);
    TestBuf o = { 0 };
    pb_str(&o, 1, "com.microsoft");
    pb_int(&o, 2, 1);
    pb_msg(m, 8, &o);
    /* last: every prefix of the file lacks it, so every truncation must fail */
    pb_str(&o, 1, "ai.onnx");
    pb_int(&o, 2, 17);
    pb_msg(m, 8, &o);
}

static bool shape_is(const int64_t *s, int nd, int want_nd, const int64_t *want)
{
    if (nd != want_nd)
        return false;
    for (int i = 0; i < nd; i++)
        if (s[i] != want[i])
            return false;
    return true;
}

static bool entry_is(const DittoOnnxModel *m, const char *name, DittoDType dt, int nd, const int64_t *shape, const double *want)
{
    const DittoCatalogEntry *e = ditto_catalog_find(m->init, name);
    if (!e || e->dtype != dt || !shape_is(e->shape, e->ndim, nd, shape))
        return false;
    int64_t n = ditto_catalog_entry_numel(e);
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    bool ok = ditto_catalog_read_f32(m->init, e, f) == 0;
    for (int64_t i = 0; ok && i < n; i++)
        ok = f[i] == (float)want[i];
    free(f);
    /* contiguous strides */
    int64_t s = 1;
    for (int i = nd - 1; ok && i >= 0; i--) {
        ok = e->stride[i] == s;
        s *= shape[i] ? shape[i] : 1;
    }
    return ok;
}

static const DittoOnnxNode *find_node(const DittoOnnxModel *m, const char *out0)
{
    for (size_t i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].n_outputs > 0 && !strcmp(m->nodes[i].outputs[0], out0))
            return &m->nodes[i];
    return NULL;
}

static int check_ref(const DittoOnnxModel *m, const uint8_t *file, char *why, size_t nwhy)
{
#define REQ(cond)                                               \
    do {                                                        \
        if (!(cond)) {                                          \
            snprintf(why, nwhy, "line %d: %s", __LINE__, #cond); \
            return 0;                                           \
        }                                                       \
    } while (0)
    REQ(m->ir_version == 8 && m->opset == 17 && !strcmp(m->producer, "ditto-test"));
    REQ(m->n_nodes == 6 && m->n_initializers == 12 && m->init->n == 12 + 4);
    /* inputs: w dropped (initializer), order kept */
    REQ(m->n_inputs == 2 && !strcmp(m->inputs[0].name, "x") && !strcmp(m->inputs[1].name, "extra"));
    REQ(m->inputs[0].dtype == DITTO_F32 && shape_is(m->inputs[0].shape, m->inputs[0].ndim, 2, (int64_t[]){ -1, 2 }));
    REQ(m->inputs[1].dtype == DITTO_F16 && m->inputs[1].ndim == -1);
    REQ(m->n_outputs == 1 && !strcmp(m->outputs[0].name, "z") && shape_is(m->outputs[0].shape, m->outputs[0].ndim, 4, (int64_t[]){ -1, 2, 3, 3 }));
    REQ(m->n_value_info == 2 && m->value_info[0].dtype == DITTO_DTYPE_COUNT && m->value_info[0].ndim == 3 && m->value_info[0].shape[2] == 0);
    REQ(m->value_info[1].ndim == -1);   /* rank 7: kept as unknown */

    /* initializers */
    double w[18];
    for (int i = 0; i < 18; i++)
        w[i] = w_vals[i];
    REQ(entry_is(m, "w", DITTO_F32, 4, (int64_t[]){ 2, 1, 3, 3 }, w));
    const DittoCatalogEntry *we = ditto_catalog_find(m->init, "w");
    REQ(we->data >= (const void *)file && !memcmp(we->data, w_vals, sizeof w_vals));   /* raw: not copied */
    REQ(entry_is(m, "b", DITTO_F32, 1, (int64_t[]){ 2 }, (double[]){ 0.5, -0.5 }));
    REQ(entry_is(m, "i32", DITTO_I32, 2, (int64_t[]){ 1, 3 }, (double[]){ -7, 0, 2147483647.0 }));
    REQ(entry_is(m, "u8", DITTO_U8, 1, (int64_t[]){ 4 }, (double[]){ 0, 1, 200, 255 }));
    REQ(entry_is(m, "i8", DITTO_I8, 1, (int64_t[]){ 3 }, (double[]){ -128, 0, 127 }));
    REQ(entry_is(m, "flag", DITTO_BOOL, 1, (int64_t[]){ 2 }, (double[]){ 1, 0 }));
    REQ(entry_is(m, "f16", DITTO_F16, 1, (int64_t[]){ 3 }, (double[]){ 1.5, -2, 65504 }));
    REQ(entry_is(m, "bf16", DITTO_BF16, 1, (int64_t[]){ 2 }, (double[]){ 1, -3.5 }));
    REQ(entry_is(m, "scalar", DITTO_F32, 0, NULL, (double[]){ 2.5 }));
    REQ(entry_is(m, "empty", DITTO_F32, 2, (int64_t[]){ 0, 5 }, NULL));
    const DittoCatalogEntry *e = ditto_catalog_find(m->init, "i64");
    REQ(e && e->dtype == DITTO_I64 && e->ndim == 1 && e->shape[0] == 3);
    int64_t iv[3];
    memcpy(iv, e->data, sizeof iv);
    REQ(iv[0] == -1 && iv[1] == 0 && iv[2] == (int64_t)1 << 40);
    e = ditto_catalog_find(m->init, "f64");
    double dv[2];
    REQ(e && e->dtype == DITTO_F64);
    memcpy(dv, e->data, sizeof dv);
    REQ(dv[0] == 1.0 / 3.0 && dv[1] == -1e300);

    /* Constant nodes and the attribute tensor */
    REQ(ditto_catalog_find(m->init, "shape") == m->init->entries + 12);
    e = ditto_catalog_find(m->init, "shape");
    REQ(e->dtype == DITTO_I64 && e->ndim == 1 && e->shape[0] == 2);
    memcpy(iv, e->data, 16);
    REQ(iv[0] == 1 && iv[1] == -1);
    REQ(entry_is(m, "fill.value", DITTO_F32, 1, (int64_t[]){ 1 }, (double[]){ 0.75 }));
    REQ(entry_is(m, "cf", DITTO_F32, 0, NULL, (double[]){ -4 }));
    e = ditto_catalog_find(m->init, "ci");
    REQ(e && e->dtype == DITTO_I64 && e->ndim == 1 && e->shape[0] == 3);
    memcpy(iv, e->data, sizeof iv);
    REQ(iv[0] == 5 && iv[1] == -6 && iv[2] == 7);

    /* nodes and attributes */
    const DittoOnnxNode *c0 = find_node(m, "shape"), *rs = find_node(m, "y"), *cv = find_node(m, "z"), *fl = find_node(m, "filled");
    REQ(c0 && !strcmp(c0->op_type, "Constant") && !strcmp(c0->name, "c0") && c0->n_inputs == 0 && c0->n_attrs == 1);
    REQ(c0->attrs[0].type == DITTO_ATTR_TENSOR && c0->attrs[0].tensor == ditto_catalog_find(m->init, "shape"));
    REQ(rs && !strcmp(rs->name, "") && !strcmp(rs->domain, "") && rs->n_inputs == 2 && !strcmp(rs->inputs[1], "shape") && rs->n_attrs == 0);
    REQ(cv && cv->n_inputs == 3 && !strcmp(cv->inputs[2], "") && cv->n_attrs == 8);
    const DittoOnnxAttr *a = ditto_onnx_attr(cv, "kernel_shape");
    REQ(a && a->type == DITTO_ATTR_INTS && a->n == 2 && a->ints[0] == 3 && a->ints[1] == 3);
    a = ditto_onnx_attr(cv, "pads");
    REQ(a && a->type == DITTO_ATTR_INTS && a->n == 4 && a->ints[2] == -1 && a->ints[3] == 1);
    a = ditto_onnx_attr(cv, "group");
    REQ(a && a->type == DITTO_ATTR_INT && a->i == -3);
    a = ditto_onnx_attr(cv, "alpha");
    REQ(a && a->type == DITTO_ATTR_FLOAT && a->f == 0.125f);
    a = ditto_onnx_attr(cv, "auto_pad");
    REQ(a && a->type == DITTO_ATTR_STRING && !strcmp(a->s, "NOT\tSET\n"));
    a = ditto_onnx_attr(cv, "scales");
    REQ(a && a->type == DITTO_ATTR_FLOATS && a->n == 3 && a->floats[0] == 1.5f && a->floats[2] == 3.5f);
    a = ditto_onnx_attr(cv, "names");
    REQ(a && a->type == DITTO_ATTR_STRINGS && a->n == 2 && !strcmp(a->strings[0], "alpha") && !strcmp(a->strings[1], ""));
    a = ditto_onnx_attr(cv, "legacy_i");
    REQ(a && a->type == DITTO_ATTR_INT && a->i == 42);
    REQ(!ditto_onnx_attr(cv, "missing"));
    a = fl ? ditto_onnx_attr(fl, "value") : NULL;
    REQ(a && a->type == DITTO_ATTR_TENSOR && a->tensor == ditto_catalog_find(m->init, "fill.value"));
    return 1;
#undef REQ
}

/* ---- positive cases ------------------------------------------------------------------ */

static void test_positive(TestCtx *tc)
{
    TestBuf f = { 0 };
    make_ref(&f);
    TestLogCapture lc;
    DittoLogger lg = test_log_capture(&lc);
    DittoOnnxModel *m = NULL;
    int rc = ditto_onnx_open_memory(&m, f.p, f.n, "ref.onnx", &lg);
    char why[256] = "";
    bool ok = rc == 0 && lc.lines == 0 && check_ref(m, f.p, why, sizeof why);
    test_report(tc, "onnx.ref_model", ok, "rc %d, %zu bytes, %s %s", rc, f.n, why, lc.first);
    ditto_onnx_close(&m);
    ditto_onnx_close(&m);   /* NULL is fine */
    test_report(tc, "onnx.close_null", m == NULL, "");

    /* IR 1-2 models have no opset_import: opset 1 */
    TestBuf g = { 0 }, mm = { 0 };
    node(&g, "Relu", NULL, "x", "y", NULL, 0);
    vinfo(&g, 11, "x", T_FLOAT, 1, (int64_t[]){ 4 });
    vinfo(&g, 12, "y", T_FLOAT, 1, (int64_t[]){ 4 });
    pb_int(&mm, 1, 2);
    pb_msg(&mm, 7, &g);
    rc = ditto_onnx_open_memory(&m, mm.p, mm.n, "ir2.onnx", &lg);
    test_report(tc, "onnx.ir2_no_opset", rc == 0 && m->opset == 1 && m->n_nodes == 1 && !strcmp(m->producer, ""), "rc %d %s", rc, lc.first);
    ditto_onnx_close(&m);
    test_buf_free(&mm);

    /* arguments */
    rc = ditto_onnx_open_memory(NULL, f.p, f.n, "x", &lg);
    bool args = rc == DITTO_ERR_INVAL;
    rc = ditto_onnx_open_memory(&m, NULL, 5, "x", &lg);
    args &= rc == DITTO_ERR_INVAL && !m;
    rc = ditto_onnx_open(&m, NULL, &lg);
    args &= rc == DITTO_ERR_INVAL && !m;
    args &= !ditto_onnx_attr(NULL, "x");
    test_report(tc, "onnx.invalid_arguments", args, "");
    test_buf_free(&f);
}

/* ---- hostile inputs ------------------------------------------------------------------ */

/* rc < 0 (== want unless want is 0), exactly one error line, starting with the file name, containing `has`. */
static bool expect_fail(TestCtx *tc, const char *label, const void *data, size_t size, int want, const char *has)
{
    TestLogCapture lc;
    DittoLogger lg = test_log_capture(&lc);
    DittoOnnxModel *m = NULL;
    int rc = ditto_onnx_open_memory(&m, data, size, "hostile.onnx", &lg);
    bool ok = rc < 0 && (!want || rc == want) && m == NULL && lc.errors == 1 && lc.lines == 1 &&
              !strncmp(lc.first, "hostile.onnx: ", 14) && (!has || strstr(lc.first, has));
    ditto_onnx_close(&m);
    return test_report(tc, label, ok, "rc %d (%s), %d line(s): %s", rc, ditto_strerror(rc), lc.lines, lc.first);
}

/* A model whose graph holds `graph_extra` (consumed) after a Relu node, with opset 13. */
static void wrap_graph(TestBuf *out, TestBuf *graph_extra)
{
    TestBuf g = { 0 };
    node(&g, "Relu", NULL, "x", "y", NULL, 0);
    vinfo(&g, 11, "x", T_FLOAT, 1, (int64_t[]){ 4 });
    vinfo(&g, 12, "y", T_FLOAT, 1, (int64_t[]){ 4 });
    test_buf_put(&g, graph_extra->p, graph_extra->n);
    test_buf_free(graph_extra);
    model(out, 8, 13, &g);
}

static void fail_graph(TestCtx *tc, const char *label, TestBuf *graph_extra, int want, const char *has)
{
    TestBuf f = { 0 };
    wrap_graph(&f, graph_extra);
    expect_fail(tc, label, f.p, f.n, want, has);
    test_buf_free(&f);
}

/* One initializer (TensorProto body consumed). */
static void fail_tensor(TestCtx *tc, const char *label, TestBuf *tensor, int want, const char *has)
{
    TestBuf g = { 0 };
    pb_msg(&g, 5, tensor);
    fail_graph(tc, label, &g, want, has);
}

/* One extra node with the given attribute bodies (consumed). */
static void fail_node(TestCtx *tc, const char *label, const char *op, const char *in, const char *out, TestBuf *attrs, int n, int want,
                      const char *has)
{
    TestBuf g = { 0 };
    node(&g, op, "n1", in, out, attrs, n);
    fail_graph(tc, label, &g, want, has);
}

static void test_hostile_tensors(TestCtx *tc)
{
    const int F = DITTO_ERR_FORMAT, U = DITTO_ERR_UNSUPPORTED;
    TestBuf t = { 0 };
    float four[4] = { 1, 2, 3, 4 };

    t_raw(&t, "w", T_FLOAT, 1, (int64_t[]){ 3 }, four, 16);
    fail_tensor(tc, "hostile.raw_size_mismatch", &t, F, "raw_data has 16 bytes");
    t_raw(&t, "w", T_FLOAT, 2, (int64_t[]){ 2, -2 }, four, 16);
    fail_tensor(tc, "hostile.negative_dim", &t, F, "negative dimension");
    t_raw(&t, "w", T_FLOAT, 3, (int64_t[]){ (int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40 }, four, 16);
    fail_tensor(tc, "hostile.dims_overflow", &t, F, "too large");
    t_raw(&t, "w", T_FLOAT, 2, (int64_t[]){ (int64_t)1 << 31, (int64_t)1 << 31 }, four, 16);
    fail_tensor(tc, "hostile.bytes_overflow", &t, F, "too large");   /* 2^62 elements * 4 bytes */
    t_raw(&t, "w", T_FLOAT, 3, (int64_t[]){ INT64_MAX, INT64_MAX, 0 }, four, 0);
    fail_tensor(tc, "hostile.zero_size_overflow", &t, F, "too large");
    t_raw(&t, "w", T_FLOAT, 7, (int64_t[]){ 1, 1, 1, 1, 1, 1, 4 }, four, 16);
    fail_tensor(tc, "hostile.rank_7", &t, U, "rank 7");
    t_raw(&t, "w", T_STRING, 1, (int64_t[]){ 4 }, four, 16);
    fail_tensor(tc, "hostile.dtype_string", &t, U, "STRING");
    t_raw(&t, "w", T_UINT16, 1, (int64_t[]){ 8 }, four, 16);
    fail_tensor(tc, "hostile.dtype_uint16", &t, U, "tensor 'w': data type UINT16");
    t_raw(&t, "w", T_COMPLEX64, 1, (int64_t[]){ 2 }, four, 16);
    fail_tensor(tc, "hostile.dtype_complex64", &t, U, "COMPLEX64");
    t_raw(&t, "w", 99, 1, (int64_t[]){ 2 }, four, 16);
    fail_tensor(tc, "hostile.dtype_99", &t, U, "(99)");
    t_raw(&t, "w", 0, 1, (int64_t[]){ 2 }, four, 16);
    fail_tensor(tc, "hostile.dtype_undefined", &t, U, "UNDEFINED");
    t_raw(&t, NULL, T_FLOAT, 1, (int64_t[]){ 4 }, four, 16);
    fail_tensor(tc, "hostile.initializer_no_name", &t, F, "initializer #0");
    t_raw(&t, "w\0x", T_FLOAT, 1, (int64_t[]){ 4 }, four, 16);
    pb_bytes(&t, 8, "a\0b", 3);
    fail_tensor(tc, "hostile.name_with_nul", &t, F, "control character 0x00");
    t_raw(&t, "w\nerror: forged line", T_FLOAT, 1, (int64_t[]){ 4 }, four, 16);
    fail_tensor(tc, "hostile.name_with_newline", &t, F, "control character 0x0a");

    t_head(&t, "w", T_FLOAT, 1, (int64_t[]){ 4 }, true);
    pb_floats(&t, 4, four, 3, true);
    fail_tensor(tc, "hostile.typed_count_short", &t, F, "3 values, but shape (4) has 4");
    t_head(&t, "w", T_FLOAT, 1, (int64_t[]){ 4 }, true);
    fail_tensor(tc, "hostile.no_data", &t, F, "0 values");
    t_head(&t, "w", T_FLOAT, 1, (int64_t[]){ 4 }, true);
    pb_ints(&t, 7, (int64_t[]){ 1, 2, 3, 4 }, 4, true);
    fail_tensor(tc, "hostile.typed_wrong_field", &t, F, "field of another type");
    t_raw(&t, "w", T_FLOAT, 1, (int64_t[]){ 4 }, four, 16);
    pb_floats(&t, 4, four, 4, true);
    fail_tensor(tc, "hostile.raw_and_typed", &t, F, "more than one");
    t_head(&t, "w", T_FLOAT, 1, (int64_t[]){ 1 }, true);
    pb_bytes(&t, 4, four, 3);
    fail_tensor(tc, "hostile.packed_float_ragged", &t, F, "not a multiple of 4");
    t_head(&t, "w", T_BOOL, 1, (int64_t[]){ 2 }, true);
    pb_ints(&t, 5, (int64_t[]){ 1, 2 }, 2, true);
    fail_tensor(tc, "hostile.bool_value_2", &t, F, "value 2 at index 1");
    t_head(&t, "w", T_UINT8, 1, (int64_t[]){ 1 }, true);
    pb_ints(&t, 5, (int64_t[]){ 300 }, 1, true);
    fail_tensor(tc, "hostile.uint8_value_300", &t, F, "does not fit uint8");
    t_head(&t, "w", T_INT32, 1, (int64_t[]){ 1 }, true);
    pb_ints(&t, 5, (int64_t[]){ (int64_t)1 << 33 }, 1, true);
    fail_tensor(tc, "hostile.int32_overflow", &t, F, "does not fit");
    t_head(&t, "w", T_FLOAT16, 1, (int64_t[]){ 1 }, true);
    pb_ints(&t, 5, (int64_t[]){ -1 }, 1, true);
    fail_tensor(tc, "hostile.float16_negative_bits", &t, F, "does not fit");
    t_head(&t, "w", T_INT64, 1, (int64_t[]){ 1 }, true);
    pb_bytes(&t, 7, "\x80\x80", 2);
    fail_tensor(tc, "hostile.packed_varint_cut", &t, F, "truncated varint in a packed field");
    t_raw(&t, "w", T_FLOAT, 1, (int64_t[]){ 4 }, four, 16);
    TestBuf seg = { 0 };
    pb_int(&seg, 1, 0);
    pb_msg(&t, 3, &seg);
    fail_tensor(tc, "hostile.segment", &t, U, "segment");
    t_raw(&t, "w", T_FLOAT, 1, (int64_t[]){ 4 }, four, 16);
    pb_int(&t, 14, 2);
    fail_tensor(tc, "hostile.data_location_2", &t, F, "data_location 2");
    t_head(&t, "w", T_FLOAT, 1, (int64_t[]){ 4 }, true);
    pb_int(&t, 2, T_FLOAT);
    pb_tag(&t, 1, I32);   /* dims as fixed32 */
    pb_fixed32(&t, 4);
    fail_tensor(tc, "hostile.dims_wire_type", &t, F, "wire type fixed32");

    /* duplicate initializer names */
    TestBuf g = { 0 };
    t_raw(&t, "w", T_FLOAT, 1, (int64_t[]){ 4 }, four, 16);
    pb_msg(&g, 5, &t);
    t_raw(&t, "w", T_FLOAT, 1, (int64_t[]){ 4 }, four, 16);
    pb_msg(&g, 5, &t);
    fail_graph(tc, "hostile.duplicate_initializer", &g, F, "duplicate key 'w'");
    /* sparse initializer */
    TestBuf sp = { 0 };
    pb_int(&sp, 3, 4);
    pb_msg(&g, 15, &sp);
    fail_graph(tc, "hostile.sparse_initializer", &g, U, "sparse initializers");
}

/* External data through memory: locations are checked first, then refused (no folder). */
static void ext_tensor(TestBuf *t, const char *name, const char *loc, const char *offset, const char *length, int nd, const int64_t *dims)
{
    t_head(t, name, T_FLOAT, nd, dims, true);
    const char *kv[3][2] = { { "location", loc }, { "offset", offset }, { "length", length } };
    for (int i = 0; i < 3; i++) {
        if (!kv[i][1])
            continue;
        TestBuf e = { 0 };
        pb_str(&e, 1, kv[i][0]);
        pb_str(&e, 2, kv[i][1]);
        pb_msg(t, 13, &e);
    }
    pb_int(t, 14, 1);
}

static void test_hostile_external_memory(TestCtx *tc)
{
    const int F = DITTO_ERR_FORMAT, U = DITTO_ERR_UNSUPPORTED;
    TestBuf t = { 0 };
    static const struct {
        const char *label, *loc, *has;
        int want;
    } locs[] = {
        { "hostile.ext_dotdot", "../w.bin", "leaves the model's folder", F },
        { "hostile.ext_dotdot_inner", "sub/../../w.bin", "leaves the model's folder", F },
        { "hostile.ext_dotdot_last", "sub/..", "leaves the model's folder", F },
        { "hostile.ext_absolute", "/etc/passwd", "absolute path", F },
        { "hostile.ext_backslash", "..\\w.bin", "backslash", F },
        { "hostile.ext_empty", "", "is empty", F },
        { "hostile.ext_from_memory", "w.bin", "needs the model's folder", U },
        { "hostile.ext_dots_ok_name", "..w.bin", "needs the model's folder", U },   /* "..w.bin" is a file name, not '..' */
    };
    for (size_t i = 0; i < sizeof locs / sizeof *locs; i++) {
        ext_tensor(&t, "w", locs[i].loc, NULL, NULL, 1, (int64_t[]){ 4 });
        fail_tensor(tc, locs[i].label, &t, locs[i].want, locs[i].has);
    }
    ext_tensor(&t, "w", NULL, "0", NULL, 1, (int64_t[]){ 4 });
    fail_tensor(tc, "hostile.ext_no_location", &t, F, "without a location");
    ext_tensor(&t, "w", "w.bin", "-4", NULL, 1, (int64_t[]){ 4 });
    fail_tensor(tc, "hostile.ext_negative_offset", &t, F, "not a decimal number");
    ext_tensor(&t, "w", "w.bin", "99999999999999999999999", NULL, 1, (int64_t[]){ 4 });
    fail_tensor(tc, "hostile.ext_offset_overflow", &t, F, "not a decimal number");
    ext_tensor(&t, "w", "w.bin", "0", "12", 1, (int64_t[]){ 4 });
    fail_tensor(tc, "hostile.ext_length_mismatch_memory", &t, U, "needs the model's folder");
    ext_tensor(&t, "w", "w.bin", NULL, NULL, 1, (int64_t[]){ 4 });
    pb_floats(&t, 4, (float[]){ 1, 2, 3, 4 }, 4, true);
    fail_tensor(tc, "hostile.ext_and_typed", &t, F, "more than one");
    t_raw(&t, "w", T_FLOAT, 1, (int64_t[]){ 1 }, "abcd", 4);
    TestBuf e = { 0 };
    pb_str(&e, 1, "location");
    pb_str(&e, 2, "w.bin");
    pb_msg(&t, 13, &e);
    fail_tensor(tc, "hostile.ext_entries_not_external", &t, F, "data_location is not EXTERNAL");
}

static void test_hostile_graph(TestCtx *tc)
{
    const int F = DITTO_ERR_FORMAT, U = DITTO_ERR_UNSUPPORTED;
    TestBuf a[3], sub = { 0 };
    memset(a, 0, sizeof a);

    /* subgraphs: If with then_branch (g), Loop body by type only, Scan with graphs */
    node(&sub, "Relu", NULL, "x", "y", NULL, 0);
    pb_str(&a[0], 1, "then_branch");
    pb_msg(&a[0], 6, &sub);
    pb_int(&a[0], 20, 5);
    fail_node(tc, "hostile.subgraph_if", "If", "cond", "out", a, 1, U, "node 'n1' (If): attribute 'then_branch' is a subgraph");
    pb_str(&a[0], 1, "body");
    pb_int(&a[0], 20, 5);
    fail_node(tc, "hostile.subgraph_type_only", "Loop", "m,cond", "out", a, 1, U, "'body' is a subgraph");
    node(&sub, "Relu", NULL, "x", "y", NULL, 0);
    pb_str(&a[0], 1, "bodies");
    pb_msg(&a[0], 11, &sub);
    pb_int(&a[0], 20, 10);
    fail_node(tc, "hostile.subgraph_list", "Scan", "x", "out", a, 1, U, "subgraph");
    /* other unsupported attribute kinds */
    TestBuf tt = { 0 };
    t_raw(&tt, NULL, T_FLOAT, 1, (int64_t[]){ 1 }, "abcd", 4);
    pb_str(&a[0], 1, "ts");
    pb_msg(&a[0], 10, &tt);
    pb_int(&a[0], 20, 9);
    fail_node(tc, "hostile.attr_tensors", "Foo", "x", "out", a, 1, U, "TENSORS");
    TestBuf st = { 0 };
    pb_str(&a[0], 1, "sp");
    pb_msg(&a[0], 22, &st);
    pb_int(&a[0], 20, 11);
    fail_node(tc, "hostile.attr_sparse", "Foo", "x", "out", a, 1, U, "SPARSE_TENSOR");
    pb_str(&a[0], 1, "r");
    pb_str(&a[0], 21, "outer");
    pb_int(&a[0], 20, 2);
    fail_node(tc, "hostile.attr_ref", "Foo", "x", "out", a, 1, U, "ref_attr_name");
    pb_str(&a[0], 1, "q");
    pb_int(&a[0], 20, 77);
    fail_node(tc, "hostile.attr_type_77", "Foo", "x", "out", a, 1, U, "(77)");

    /* malformed attributes */
    pb_str(&a[0], 1, "k");
    pb_int(&a[0], 3, 1);
    pb_f32(&a[0], 2, 1.0f);
    fail_node(tc, "hostile.attr_two_kinds", "Foo", "x", "out", a, 1, F, "several types");
    pb_str(&a[0], 1, "k");
    pb_int(&a[0], 3, 1);
    pb_int(&a[0], 20, 1);
    fail_node(tc, "hostile.attr_type_mismatch", "Foo", "x", "out", a, 1, F, "has type FLOAT but holds a INT value");
    pb_str(&a[0], 1, "k");
    fail_node(tc, "hostile.attr_no_value", "Foo", "x", "out", a, 1, F, "'k' has no value");
    pb_int(&a[0], 3, 1);
    pb_int(&a[0], 20, 2);
    fail_node(tc, "hostile.attr_no_name", "Foo", "x", "out", a, 1, F, "has no name");
    a_int(&a[0], "k", 1);
    a_int(&a[1], "k", 2);
    fail_node(tc, "hostile.attr_twice", "Foo", "x", "out", a, 2, F, "'k' given twice");
    pb_str(&a[0], 1, "t");
    pb_int(&a[0], 20, 4);
    fail_node(tc, "hostile.attr_tensor_missing", "Foo", "x", "out", a, 1, F, "has no tensor");
    pb_str(&a[0], 1, "f");
    pb_tag(&a[0], 2, VARINT);
    pb_varint(&a[0], 1);
    fail_node(tc, "hostile.attr_float_as_varint", "Foo", "x", "out", a, 1, F, "wire type varint");
    pb_str(&a[0], 1, "t");
    t_raw(&tt, NULL, T_FLOAT, 1, (int64_t[]){ 2 }, "abcd", 4);
    pb_msg(&a[0], 5, &tt);
    pb_int(&a[0], 20, 4);
    fail_node(tc, "hostile.attr_tensor_bad", "Foo", "x", "out", a, 1, F, "tensor 'n1.t': raw_data has 4 bytes");

    /* Constant nodes */
    t_raw(&tt, NULL, T_FLOAT, 1, (int64_t[]){ 1 }, "abcd", 4);
    pb_str(&a[0], 1, "value");
    pb_msg(&a[0], 5, &tt);
    pb_int(&a[0], 20, 4);
    fail_node(tc, "hostile.constant_two_outputs", "Constant", NULL, "c1,c2", a, 1, F, "one named output");
    a_float(&a[0], "value_float", 1);
    fail_node(tc, "hostile.constant_unnamed_output", "Constant", NULL, "", a, 1, F, "one named output");
    a_float(&a[0], "value_float", 1);
    a_int(&a[1], "value_int", 1);
    fail_node(tc, "hostile.constant_two_values", "Constant", NULL, "c1", a, 2, F, "one value attribute");
    a_int(&a[0], "value_float", 1);
    fail_node(tc, "hostile.constant_wrong_type", "Constant", NULL, "c1", a, 1, F, "wrong type");
    TestBuf g = { 0 }, t = { 0 };
    t_raw(&t, "c1", T_FLOAT, 1, (int64_t[]){ 1 }, "abcd", 4);
    pb_msg(&g, 5, &t);
    a_float(&a[0], "value_float", 1);
    node(&g, "Constant", NULL, NULL, "c1", a, 1);
    fail_graph(tc, "hostile.constant_initializer_clash", &g, F, "duplicate key 'c1'");

    /* nodes */
    TestBuf n = { 0 };
    pb_str(&n, 1, "x");
    pb_str(&n, 2, "y");
    pb_msg(&g, 1, &n);
    fail_graph(tc, "hostile.node_no_op_type", &g, F, "node #1 has no op_type");

    /* value infos */
    TestBuf v = { 0 };
    pb_int(&v, 3, 0);
    pb_msg(&g, 11, &v);
    fail_graph(tc, "hostile.input_no_name", &g, F, "graph input #1");
    vinfo(&g, 11, "in7", T_FLOAT, 7, (int64_t[]){ 1, 1, 1, 1, 1, 1, 1 });
    fail_graph(tc, "hostile.input_rank_7", &g, U, "'in7': rank over 6");
    TestBuf d = { 0 }, sh = { 0 }, tt2 = { 0 }, ty = { 0 }, vi = { 0 };
    pb_int(&d, 1, -5);
    pb_msg(&sh, 1, &d);
    pb_int(&tt2, 1, T_FLOAT);
    pb_msg(&tt2, 2, &sh);
    pb_msg(&ty, 1, &tt2);
    pb_str(&vi, 1, "neg");
    pb_msg(&vi, 2, &ty);
    pb_msg(&g, 13, &vi);
    fail_graph(tc, "hostile.value_info_negative_dim", &g, F, "value 'neg': negative dimension -5");
}

static void test_hostile_wire(TestCtx *tc)
{
    const int F = DITTO_ERR_FORMAT;
    expect_fail(tc, "hostile.empty_file", "", 0, F, "empty file");
    expect_fail(tc, "hostile.zip_file", "PK\x03\x04\x14\0\0\0\0\0", 10, F, "a zip archive");
    expect_fail(tc, "hostile.huge_varint", "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12, F,
                "malformed protobuf: varint longer than 10 bytes");
    expect_fail(tc, "hostile.varint_overflow", "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 11, F, "malformed protobuf: varint overflows 64 bits");
    expect_fail(tc, "hostile.varint_cut", "\x08\xff\xff", 3, F, "truncated file (3 bytes): truncated varint");
    expect_fail(tc, "hostile.tag_over_32_bits", "\x80\x80\x80\x80\x80\x01", 6, F, "tag over 32 bits");
    expect_fail(tc, "hostile.field_number_0", "\x00\x01", 2, F, "field number 0");
    expect_fail(tc, "hostile.group_start", "\x0b\x0c", 2, F, "group wire type");
    expect_fail(tc, "hostile.wire_type_6", "\x0e", 1, F, "invalid wire type");
    expect_fail(tc, "hostile.length_past_end", "\x08\x07\x3a\x80\x80\x80\x80\x80\x20", 9, F, "truncated file (9 bytes): length-delimited");
    expect_fail(tc, "hostile.fixed64_cut", "\x08\x07\x09\x01\x02", 5, F, "fixed64 value runs past the end");
    expect_fail(tc, "hostile.graph_as_varint", "\x08\x07\x38\x01", 4, F, "field 7 of ModelProto has wire type varint");
    expect_fail(tc, "hostile.no_graph", "\x08\x07\x42\x02\x10\x0d", 6, F, "no graph");
    expect_fail(tc, "hostile.no_ir_version", "\x3a\x00\x42\x02\x10\x0d", 6, F, "ir_version");
    expect_fail(tc, "hostile.no_opset", "\x08\x07\x3a\x00", 4, F, "no opset_import");
    expect_fail(tc, "hostile.opset_0", "\x08\x07\x3a\x00\x42\x02\x10\x00", 8, F, "opset version 0");
    expect_fail(tc, "hostile.two_graphs", "\x08\x07\x3a\x00\x3a\x00\x42\x02\x10\x0d", 10, F, "two graphs");
    /* a sub-message whose length is shorter than its content: the inner field runs past its message, not the file */
    expect_fail(tc, "hostile.inner_length", "\x08\x07\x42\x02\x10\x0d\x3a\x03\x0a\x05\x22\x12\x08" "ABCDEFGH", 21, F,
                "malformed protobuf: length-delimited value runs past the end at byte 8 (in GraphProto)");

    /* a .pth-looking file and random bytes */
    uint8_t junk[4096];
    uint64_t s = 12345;
    for (size_t i = 0; i < sizeof junk; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        junk[i] = (uint8_t)(s >> 56);
    }
    expect_fail(tc, "hostile.random_bytes", junk, sizeof junk, 0, NULL);
}

/* Truncation at every length and every single-bit flip of the reference model. */
static void test_sweeps(TestCtx *tc)
{
    TestBuf f = { 0 };
    make_ref(&f);
    long bad = 0, truncated_msgs = 0, loaded = 0, runs = 0;
    char first_bad[1200] = "";
    for (size_t n = 0; n < f.n; n++) {
        uint8_t *copy = malloc(n ? n : 1);   /* exact size: ASan sees any read past the end */
        memcpy(copy, f.p, n);
        TestLogCapture lc;
        DittoLogger lg = test_log_capture(&lc);
        DittoOnnxModel *m = NULL;
        int rc = ditto_onnx_open_memory(&m, copy, n, "cut.onnx", &lg);
        bool ok = rc < 0 && !m && lc.errors == 1 && lc.lines == 1 && !strncmp(lc.first, "cut.onnx: ", 10);
        truncated_msgs += strstr(lc.first, "truncated") != NULL;
        if (!ok && !bad++)
            snprintf(first_bad, sizeof first_bad, "length %zu: rc %d: %s", n, rc, lc.first);
        ditto_onnx_close(&m);
        free(copy);
    }
    /* every prefix fails; most cut a field in half and say so (the rest end at a field boundary: "no graph", ...) */
    test_report(tc, "sweep.truncations", bad == 0 && truncated_msgs > (long)f.n * 9 / 10, "%zu lengths, %ld bad, %ld say 'truncated' %s", f.n,
                bad, truncated_msgs, first_bad);

    bad = 0;
    uint8_t *m8 = malloc(f.n);
    memcpy(m8, f.p, f.n);
    for (size_t i = 0; i < f.n; i++) {
        for (int bit = 0; bit < 8; bit++, runs++) {
            m8[i] ^= (uint8_t)(1u << bit);
            TestLogCapture lc;
            DittoLogger lg = test_log_capture(&lc);
            DittoOnnxModel *m = NULL;
            int rc = ditto_onnx_open_memory(&m, m8, f.n, "flip.onnx", &lg);
            bool ok;
            if (rc == 0) {
                loaded++;
                ok = m && lc.errors == 0;
                /* every entry readable, every raw entry inside the input */
                float tmp[64];
                for (size_t k = 0; ok && k < m->init->n; k++) {
                    const DittoCatalogEntry *e = &m->init->entries[k];
                    const uint8_t *p = e->data;
                    if (p >= m8 && p < m8 + f.n)
                        ok = e->span <= (uint64_t)(m8 + f.n - p);
                    if (ok && ditto_catalog_entry_numel(e) <= 64)
                        ok = ditto_catalog_read_f32(m->init, e, tmp) == 0;
                }
            } else {
                ok = !m && lc.errors == 1 && lc.lines == 1 && !strncmp(lc.first, "flip.onnx: ", 11);
            }
            if (!ok && !bad++)
                snprintf(first_bad, sizeof first_bad, "byte %zu bit %d: rc %d: %s", i, bit, rc, lc.first);
            ditto_onnx_close(&m);
            m8[i] ^= (uint8_t)(1u << bit);
        }
    }
    free(m8);
    test_report(tc, "sweep.bit_flips", bad == 0, "%ld flips, %ld still load, %ld bad %s", runs, loaded, bad, first_bad);
    test_buf_free(&f);
}

/* Fail the i-th allocation for every i: NOMEM with one error line, or success; no leaks (ASan). */
static void test_alloc_failures(TestCtx *tc)
{
    TestBuf f = { 0 };
    make_ref(&f);
    int bad = 0, i;
    for (i = 0; i < 10000; i++) {
        TestLogCapture lc;
        DittoLogger lg = test_log_capture(&lc);
        DittoOnnxModel *m = NULL;
        ditto_mem_fail_after(i);
        int rc = ditto_onnx_open_memory(&m, f.p, f.n, "oom.onnx", &lg);
        ditto_mem_fail_after(-1);
        if (rc == 0) {
            char why[256] = "";
            bad += !check_ref(m, f.p, why, sizeof why);
            ditto_onnx_close(&m);
            break;
        }
        if (rc != DITTO_ERR_NOMEM || m || lc.errors != 1 || lc.lines != 1 || strncmp(lc.first, "oom.onnx: ", 10))
            bad++;
    }
    test_report(tc, "onnx.alloc_failures", bad == 0 && i > 10 && i < 10000, "%d allocation points, %d bad", i, bad);
    test_buf_free(&f);
}

/* ---- files: mapping, external data ----------------------------------------------------- */

static bool write_file(const char *path, const void *d, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return false;
    bool ok = fwrite(d, 1, n, fp) == n;
    return fclose(fp) == 0 && ok;
}

/* A model with external initializers: w (whole file), b (offset, length), c in a subfolder; one file shared. */
static void make_ext_model(TestBuf *m, const char *loc_w, const char *loc_b, const char *b_offset, const char *b_length)
{
    TestBuf g = { 0 }, t = { 0 };
    ext_tensor(&t, "w", loc_w, NULL, NULL, 2, (int64_t[]){ 2, 2 });
    pb_msg(&g, 5, &t);
    ext_tensor(&t, "b", loc_b, b_offset, b_length, 1, (int64_t[]){ 2 });
    pb_msg(&g, 5, &t);
    node(&g, "Add", NULL, "x,w", "y", NULL, 0);
    vinfo(&g, 11, "x", T_FLOAT, 2, (int64_t[]){ 2, 2 });
    vinfo(&g, 12, "y", T_FLOAT, 2, (int64_t[]){ 2, 2 });
    model(m, 8, 13, &g);
}

static void test_files(TestCtx *tc)
{
    char dir[] = "/tmp/ditto_test_onnx_XXXXXX";
    if (!mkdtemp(dir)) {
        test_report(tc, "onnx.files", false, "mkdtemp failed");
        return;
    }
    char path[4096], wpath[4096], sub[4096], spath[4096], mpath[4096];
    snprintf(path, sizeof path, "%s/ref.onnx", dir);
    snprintf(wpath, sizeof wpath, "%s/weights.bin", dir);
    snprintf(sub, sizeof sub, "%s/data", dir);
    snprintf(spath, sizeof spath, "%s/data/more.bin", dir);
    snprintf(mpath, sizeof mpath, "%s/ext.onnx", dir);
    mkdir(sub, 0700);

    /* the reference model through the file system: same result, mapped */
    TestBuf f = { 0 };
    make_ref(&f);
    bool ok = write_file(path, f.p, f.n);
    TestLogCapture lc;
    DittoLogger lg = test_log_capture(&lc);
    DittoOnnxModel *m = NULL;
    int rc = ditto_onnx_open(&m, path, &lg);
    char why[256] = "";
    ok &= rc == 0 && !strcmp(m->path, path) && !strcmp(m->init->path, path) && m->init->map.size == f.n &&
          check_ref(m, m->init->map.data, why, sizeof why);
    ditto_onnx_close(&m);
    test_report(tc, "onnx.file_mapped", ok, "rc %d %s %s", rc, why, lc.first);

    /* truncated on disk: a clear message naming the path */
    ok = truncate(path, (off_t)f.n - 30) == 0;
    lg = test_log_capture(&lc);
    rc = ditto_onnx_open(&m, path, &lg);
    ok &= rc == DITTO_ERR_FORMAT && lc.lines == 1 && !strncmp(lc.first, path, strlen(path)) && strstr(lc.first, "truncated file");
    test_report(tc, "onnx.file_truncated", ok, "rc %d: %s", rc, lc.first);
    test_buf_free(&f);

    /* missing file, directory, empty file */
    snprintf(wpath, sizeof wpath, "%s/missing.onnx", dir);
    lg = test_log_capture(&lc);
    rc = ditto_onnx_open(&m, wpath, &lg);
    test_report(tc, "onnx.file_missing", rc == DITTO_ERR_NOENT && lc.lines == 1 && strstr(lc.first, wpath), "rc %d: %s", rc, lc.first);
    lg = test_log_capture(&lc);
    rc = ditto_onnx_open(&m, dir, &lg);
    test_report(tc, "onnx.file_directory", rc < 0 && lc.lines == 1 && strstr(lc.first, dir), "rc %d: %s", rc, lc.first);
    ok = truncate(path, 0) == 0;
    lg = test_log_capture(&lc);
    rc = ditto_onnx_open(&m, path, &lg);
    test_report(tc, "onnx.file_empty", ok && rc == DITTO_ERR_FORMAT && lc.lines == 1 && strstr(lc.first, "empty file"), "rc %d: %s", rc,
                lc.first);

    /* external data: weights.bin = 16 bytes of w then 8 bytes of b at offset 16; data/more.bin for the subfolder case */
    snprintf(wpath, sizeof wpath, "%s/weights.bin", dir);
    float wv[6] = { 1, 2, 3, 4, -5, 6.5f }, mv[3] = { 9, 10, 11 };
    ok = write_file(wpath, wv, sizeof wv) && write_file(spath, mv, sizeof mv);
    TestBuf mm = { 0 };
    make_ext_model(&mm, "weights.bin", "./weights.bin", "16", "8");
    ok &= write_file(mpath, mm.p, mm.n);
    test_buf_free(&mm);
    lg = test_log_capture(&lc);
    rc = ditto_onnx_open(&m, mpath, &lg);
    ok &= rc == 0 && entry_is(m, "b", DITTO_F32, 1, (int64_t[]){ 2 }, (double[]){ -5, 6.5 });
    test_report(tc, "onnx.external_offset_length", ok, "rc %d: %s", rc, lc.first);
    ditto_onnx_close(&m);

    /* w covers only the first 16 bytes of a 24-byte file (no length): fine; b in a subfolder at offset 4 */
    make_ext_model(&mm, "weights.bin", "data/more.bin", "4", NULL);
    ok = write_file(mpath, mm.p, mm.n);
    test_buf_free(&mm);
    lg = test_log_capture(&lc);
    rc = ditto_onnx_open(&m, mpath, &lg);
    ok &= rc == 0 && entry_is(m, "w", DITTO_F32, 2, (int64_t[]){ 2, 2 }, (double[]){ 1, 2, 3, 4 }) &&
          entry_is(m, "b", DITTO_F32, 1, (int64_t[]){ 2 }, (double[]){ 10, 11 }) && m->init->entries[1].offset == 4;
    test_report(tc, "onnx.external_subfolder", ok, "rc %d: %s", rc, lc.first);
    ditto_onnx_close(&m);

    /* hostile external data through files */
    static const struct {
        const char *label, *loc, *off, *len, *has;
        int want;
    } bad_ext[] = {
        { "hostile.ext_file_past_end", "data/more.bin", "8", NULL, "lies outside 'data/more.bin' (12 bytes)", DITTO_ERR_FORMAT },
        { "hostile.ext_file_offset_huge", "weights.bin", "18446744073709551615", NULL, "lies outside", DITTO_ERR_FORMAT },
        { "hostile.ext_file_length_mismatch", "weights.bin", "0", "12", "length 12, but", DITTO_ERR_FORMAT },
        { "hostile.ext_file_missing", "nope.bin", NULL, NULL, "cannot map external data file", DITTO_ERR_NOENT },
        { "hostile.ext_file_directory", "data", NULL, NULL, "cannot map external data file", DITTO_ERR_IO },
        { "hostile.ext_file_escape", "../weights.bin", NULL, NULL, "leaves the model's folder", DITTO_ERR_FORMAT },
        { "hostile.ext_file_absolute", "/etc/hostname", NULL, NULL, "absolute path", DITTO_ERR_FORMAT },
        { "hostile.ext_file_escape_inner", "data/../../x.bin", NULL, NULL, "leaves the model's folder", DITTO_ERR_FORMAT },
    };
    for (size_t i = 0; i < sizeof bad_ext / sizeof *bad_ext; i++) {
        make_ext_model(&mm, "weights.bin", bad_ext[i].loc, bad_ext[i].off, bad_ext[i].len);
        ok = write_file(mpath, mm.p, mm.n);
        test_buf_free(&mm);
        lg = test_log_capture(&lc);
        rc = ditto_onnx_open(&m, mpath, &lg);
        ok &= rc == bad_ext[i].want && !m && lc.errors == 1 && lc.lines == 1 && !strncmp(lc.first, mpath, strlen(mpath)) &&
              strstr(lc.first, "tensor 'b'") && strstr(lc.first, bad_ext[i].has);
        test_report(tc, bad_ext[i].label, ok, "rc %d: %s", rc, lc.first);
    }

    /* a model opened by a bare file name resolves external data against "." */
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd) && chdir(dir) == 0) {
        make_ext_model(&mm, "weights.bin", "weights.bin", "16", NULL);
        ok = write_file("ext.onnx", mm.p, mm.n);
        test_buf_free(&mm);
        lg = test_log_capture(&lc);
        rc = ditto_onnx_open(&m, "ext.onnx", &lg);
        ok &= rc == 0 && entry_is(m, "b", DITTO_F32, 1, (int64_t[]){ 2 }, (double[]){ -5, 6.5 });
        ditto_onnx_close(&m);
        ok &= chdir(cwd) == 0;
        test_report(tc, "onnx.external_relative_model_path", ok, "rc %d: %s", rc, lc.first);
    }

    unlink(path);
    unlink(wpath);
    unlink(spath);
    unlink(mpath);
    rmdir(sub);
    rmdir(dir);
}

/* ---- seed files ------------------------------------------------------------------------ */

static void test_seed_files(TestCtx *tc)
{
    static const struct {
        const char *file;
        size_t nodes, inits, consts, inputs;
    } seeds[] = {
        { "typed_fields.onnx", 1, 11, 0, 1 },
        { "attributes_constants.onnx", 5, 1, 3, 1 },
        { "init_as_input_ir3.onnx", 2, 2, 0, 1 },
        { "external/model.onnx", 1, 2, 0, 1 },
    };
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/data/onnx/%s", DITTO_SOURCE_DIR, seeds[i].file);
        TestLogCapture lc;
        DittoLogger lg = test_log_capture(&lc);
        DittoOnnxModel *m = NULL;
        int rc = ditto_onnx_open(&m, path, &lg);
        bool ok = rc == 0 && m->n_nodes == seeds[i].nodes && m->n_initializers == seeds[i].inits &&
                  m->init->n - m->n_initializers == seeds[i].consts && m->n_inputs == seeds[i].inputs;
        float buf[256];
        for (size_t k = 0; ok && k < m->init->n; k++)
            ok = ditto_catalog_entry_numel(&m->init->entries[k]) <= 256 && !ditto_catalog_read_f32(m->init, &m->init->entries[k], buf);
        char label[128];
        snprintf(label, sizeof label, "seed.%s", seeds[i].file);
        test_report(tc, label, ok, "rc %d: %zu nodes, %zu initializers, %zu inputs %s", rc, m ? m->n_nodes : 0,
                    m ? m->n_initializers : 0, m ? m->n_inputs : 0, lc.first);
        ditto_onnx_close(&m);
    }
}

/* ---- the real models in ../shared/models ------------------------------------------------ */

typedef struct OpWant {
    const char *op;
    size_t n;
} OpWant;

typedef struct ModelWant {
    const char *file;
    int64_t ir, opset;
    const char *producer;
    const char *input;
    DittoDType in_dtype;
    int64_t in_shape[4];
    size_t n_outputs;
    const char *out0;
    int64_t out0_shape[4];
    int out0_nd;
    OpWant ops[10];
    size_t depthwise;      /* Conv nodes with group > 1 */
    size_t f16_inits;      /* float16 initializers (0: not checked) */
    size_t min_weights;    /* initializers at least this many */
} ModelWant;

/* From ../shared/models/README.md. */
static const ModelWant real_models[] = {
    { "scrfd/scrfd_500m_bnkps.onnx", 6, 11, "pytorch", "input.1", DITTO_F32, { 1, 3, 640, 640 }, 9, "score_8", { 1, 12800, 1 }, 3,
      { { "Conv", 60 }, { "Relu", 41 }, { "Transpose", 9 }, { "Reshape", 9 }, { "Add", 4 }, { "Sigmoid", 3 }, { "Resize", 2 } }, 20, 0, 100 },
    { "blazeface/face_detection_short_range_nchw.onnx", 4, 9, "tf2onnx", "input", DITTO_F32, { 1, 3, 128, 128 }, 2, "regressors",
      { 1, 896, 16 }, 3,
      { { "Conv", 37 }, { "Relu", 17 }, { "Add", 16 }, { "Pad", 11 }, { "Transpose", 4 }, { "Reshape", 4 }, { "MaxPool", 3 }, { "Concat", 2 } },
      16, 0, 60 },
    { "blazeface/face_detection_short_range_nhwc.onnx", 4, 9, "tf2onnx", "input", DITTO_F32, { 1, 128, 128, 3 }, 2, "regressors",
      { 1, 896, 16 }, 3,
      { { "Conv", 37 }, { "Relu", 17 }, { "Add", 16 }, { "Pad", 11 }, { "Transpose", 5 }, { "Reshape", 4 }, { "MaxPool", 3 }, { "Concat", 2 } },
      16, 0, 60 },
    { "facemesh/face_landmarks_detector_478_fp16.onnx", 7, 13, "tf2onnx", "input_12", DITTO_F16, { 1, 3, 256, 256 }, 3, "Identity",
      { 1, 1, 1, 1434 }, 4,
      { { "Conv", 106 }, { "PRelu", 69 }, { "Add", 34 }, { "MaxPool", 6 }, { "Pad", 3 }, { "Reshape", 2 }, { "Sigmoid", 1 } }, 34, 251, 251 },
    { "landmark106/pfld106_lite.onnx", 4, 9, "pytorch", "input", DITTO_F32, { 1, 3, 112, 112 }, 2, "output1", { 1, 64, 28, 28 }, 4,
      { { "Conv", 30 }, { "Relu", 27 }, { "GlobalAveragePool", 3 }, { "Reshape", 3 }, { "Concat", 1 }, { "Gemm", 1 } }, 13, 0, 65 },
    { "landmark68/slim_160_latest.onnx", 4, 9, "pytorch", "input1", DITTO_F32, { 1, 3, 160, 160 }, 1, "output1", { 1, 143 }, 2,
      { { "Conv", 25 }, { "Relu", 25 }, { "ReduceMean", 6 }, { "Concat", 1 }, { "Gemm", 1 } }, (size_t)-1, 0, 40 },
};

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every node input is "", a graph input, a catalog tensor or the output of an earlier node (topological order). */
static bool inputs_resolve(const DittoOnnxModel *m, char *why, size_t nwhy)
{
    size_t cap = m->n_inputs + 1;
    for (size_t i = 0; i < m->n_nodes; i++)
        cap += (size_t)m->nodes[i].n_outputs;
    const char **known = malloc(cap * sizeof *known);
    size_t nk = 0;
    for (size_t i = 0; i < m->n_inputs; i++)
        known[nk++] = m->inputs[i].name;
    bool ok = true;
    for (size_t i = 0; ok && i < m->n_nodes; i++) {
        const DittoOnnxNode *n = &m->nodes[i];
        qsort(known, nk, sizeof *known, cmp_cstr);
        for (int k = 0; ok && k < n->n_inputs; k++) {
            const char *in = n->inputs[k];
            ok = !*in || ditto_catalog_find(m->init, in) || bsearch(&in, known, nk, sizeof *known, cmp_cstr);
            if (!ok)
                snprintf(why, nwhy, "node #%zu (%s): input '%s' unresolved", i, n->op_type, in);
        }
        for (int k = 0; k < n->n_outputs; k++)
            known[nk++] = n->outputs[k];
    }
    free(known);
    return ok;
}

static void test_real_models(TestCtx *tc, const char *shared)
{
    for (size_t i = 0; i < sizeof real_models / sizeof *real_models; i++) {
        const ModelWant *w = &real_models[i];
        char path[4096], why[512] = "";
        snprintf(path, sizeof path, "%s/models/%s", shared, w->file);
        TestLogCapture lc;
        DittoLogger lg = test_log_capture(&lc);
        DittoOnnxModel *m = NULL;
        int rc = ditto_onnx_open(&m, path, &lg);
        bool ok = rc == 0;
        if (ok && !(m->ir_version == w->ir && m->opset == w->opset && !strcmp(m->producer, w->producer)))
            ok = false, snprintf(why, sizeof why, "IR %lld opset %lld producer %s", (long long)m->ir_version, (long long)m->opset, m->producer);
        if (ok && !(m->n_inputs == 1 && !strcmp(m->inputs[0].name, w->input) && m->inputs[0].dtype == w->in_dtype &&
                    shape_is(m->inputs[0].shape, m->inputs[0].ndim, 4, w->in_shape)))
            ok = false, snprintf(why, sizeof why, "%zu inputs, first '%s'", m->n_inputs, m->n_inputs ? m->inputs[0].name : "");
        if (ok && !(m->n_outputs == w->n_outputs && !strcmp(m->outputs[0].name, w->out0) && m->outputs[0].dtype == w->in_dtype &&
                    shape_is(m->outputs[0].shape, m->outputs[0].ndim, w->out0_nd, w->out0_shape)))
            ok = false, snprintf(why, sizeof why, "%zu outputs, first '%s'", m->n_outputs, m->outputs[0].name);
        /* op counts: exactly the README's list */
        size_t total = 0, depthwise = 0;
        for (size_t k = 0; ok && k < sizeof w->ops / sizeof *w->ops && w->ops[k].op; k++) {
            size_t c = 0;
            for (size_t j = 0; j < m->n_nodes; j++)
                c += !strcmp(m->nodes[j].op_type, w->ops[k].op) && !*m->nodes[j].domain;
            total += c;
            if (c != w->ops[k].n)
                ok = false, snprintf(why, sizeof why, "%s: %zu nodes, README says %zu", w->ops[k].op, c, w->ops[k].n);
        }
        if (ok && total != m->n_nodes)
            ok = false, snprintf(why, sizeof why, "%zu nodes, README lists %zu", m->n_nodes, total);
        for (size_t j = 0; ok && j < m->n_nodes; j++) {
            const DittoOnnxAttr *g = ditto_onnx_attr(&m->nodes[j], "group");
            depthwise += !strcmp(m->nodes[j].op_type, "Conv") && g && g->type == DITTO_ATTR_INT && g->i > 1;
        }
        if (ok && w->depthwise != (size_t)-1 && depthwise != w->depthwise)
            ok = false, snprintf(why, sizeof why, "%zu depthwise convs, README says %zu", depthwise, w->depthwise);
        /* initializers: raw data inside the file, readable, finite */
        size_t f16 = 0, bad = 0, decoded = 0;
        const uint8_t *lo = ok ? m->init->map.data : NULL, *hi = ok ? lo + m->init->map.size : NULL;
        for (size_t k = 0; ok && k < m->init->n; k++) {
            const DittoCatalogEntry *e = &m->init->entries[k];
            f16 += k < m->n_initializers && e->dtype == DITTO_F16;
            const uint8_t *p = e->data;
            int64_t n = ditto_catalog_entry_numel(e);
            float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
            bool in_file = p >= lo && p < hi;   /* raw_data; typed fields (float_data in pfld/slim) are decoded to the heap */
            decoded += !in_file;
            bool good = (!in_file || e->span <= (uint64_t)(hi - p)) && ditto_catalog_read_f32(m->init, e, v) == 0;
            for (int64_t q = 0; good && q < n; q++)
                good = isfinite(v[q]);
            bad += !good;
            free(v);
        }
        if (ok && bad)
            ok = false, snprintf(why, sizeof why, "%zu initializers unreadable or not finite", bad);
        if (ok && w->f16_inits && f16 != w->f16_inits)
            ok = false, snprintf(why, sizeof why, "%zu float16 initializers, README says %zu", f16, w->f16_inits);
        if (ok && m->n_initializers < w->min_weights)
            ok = false, snprintf(why, sizeof why, "%zu initializers", m->n_initializers);
        if (ok)
            ok = inputs_resolve(m, why, sizeof why);
        char label[160];
        snprintf(label, sizeof label, "models.%s", strrchr(w->file, '/') + 1);
        test_report(tc, label, ok, "rc %d: %zu nodes, %zu initializers (%zu from typed fields), %zu value infos %s %s", rc,
                    m ? m->n_nodes : 0, m ? m->n_initializers : 0, decoded, m ? m->n_value_info : 0, why, lc.first);
        ditto_onnx_close(&m);
    }
}

/* Input and output names, shapes and dtypes of every case in ../shared/fixtures/onnx/manifest.json. */
static void test_manifest(TestCtx *tc, const char *shared)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/fixtures/onnx/manifest.json", shared);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        printf("SKIP onnx.fixture_manifest: %s not found\n", path);
        tc->skipped++;
        return;
    }
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *s = malloc((size_t)sz + 1);
    size_t got = fread(s, 1, (size_t)sz, fp);
    s[got] = 0;
    fclose(fp);
    cJSON *j = cJSON_Parse(s);
    free(s);
    int checked = 0, bad = 0;
    char first[512] = "";
    cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(j, "cases"))
    {
        cJSON *mf = cJSON_GetObjectItem(cs, "model_file");
        if (!cJSON_IsString(mf))
            continue;
        char mp[4096];
        snprintf(mp, sizeof mp, "%s/fixtures/onnx/%s", shared, mf->valuestring);
        DittoOnnxModel *m = NULL;
        if (ditto_onnx_open(&m, mp, NULL) < 0) {
            if (!bad++)
                snprintf(first, sizeof first, "%s does not open", mf->valuestring);
            continue;
        }
        for (int sec = 0; sec < 2; sec++) {
            cJSON *t;
            cJSON_ArrayForEach(t, cJSON_GetObjectItem(cs, sec ? "outputs" : "inputs"))
            {
                const DittoOnnxValueInfo *vs = sec ? m->outputs : m->inputs, *v = NULL;
                size_t nv = sec ? m->n_outputs : m->n_inputs;
                for (size_t k = 0; k < nv; k++)
                    if (!strcmp(vs[k].name, t->string))
                        v = &vs[k];
                cJSON *shape = cJSON_GetObjectItem(t, "shape"), *dt = cJSON_GetObjectItem(t, "dtype");
                bool ok = v && cJSON_IsArray(shape) && cJSON_GetArraySize(shape) == v->ndim;
                for (int k = 0; ok && k < v->ndim; k++)
                    ok = (int64_t)cJSON_GetArrayItem(shape, k)->valuedouble == v->shape[k];
                ok = ok && cJSON_IsString(dt) && !strcmp(dt->valuestring, ditto_dtype_name(v->dtype));
                checked++;
                if (!ok && !bad++)
                    snprintf(first, sizeof first, "%s: %s", mf->valuestring, t->string);
            }
        }
        ditto_onnx_close(&m);
    }
    cJSON_Delete(j);
    test_report(tc, "onnx.fixture_manifest_io", checked >= 30 && bad == 0, "%d inputs/outputs checked, %d bad %s", checked, bad, first);
}

static void test_shared(TestCtx *tc)
{
    const char *shared = test_shared_dir();
    char dir[4096];
    struct stat st;
    if (shared)
        snprintf(dir, sizeof dir, "%s/models", shared);
    if (!shared || stat(dir, &st) != 0) {
        printf("SKIP models: ../shared/models not found (set DITTO_SHARED); generated-model checks still ran\n");
        tc->skipped += (int)(sizeof real_models / sizeof *real_models) + 1;
        return;
    }
    test_real_models(tc, shared);
    test_manifest(tc, shared);
}

/* ---- protobuf primitives --------------------------------------------------------------- */

static void test_protobuf(TestCtx *tc)
{
    static const struct {
        const char *bytes;
        size_t n;
        uint64_t v;
        int rc;
    } cases[] = {
        { "\x00", 1, 0, 0 },
        { "\x7f", 1, 127, 0 },
        { "\x80\x01", 2, 128, 0 },
        { "\xff\xff\xff\xff\x0f", 5, 0xffffffffu, 0 },
        { "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10, UINT64_MAX, 0 },
        { "\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 10, (uint64_t)1 << 63, 0 },
        { "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 10, 0, DITTO_ERR_FORMAT },
        { "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11, 0, DITTO_ERR_FORMAT },
        { "\x80", 1, 0, DITTO_ERR_FORMAT },
        { "", 0, 0, DITTO_ERR_FORMAT },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const uint8_t *p = (const uint8_t *)cases[i].bytes;
        uint64_t v = 0;
        const char *why = NULL;
        int rc = ditto_pb_varint(&p, p + cases[i].n, &v, &why);
        bad += rc != cases[i].rc || (rc == 0 && (v != cases[i].v || p != (const uint8_t *)cases[i].bytes + cases[i].n)) || (rc < 0 && !why);
    }
    size_t count = 0;
    const char *why = NULL;
    bad += ditto_pb_packed_varints((const uint8_t *)"\x01\x80\x01\xff\xff\x03", 6, &count, &why) != 0 || count != 3;
    bad += ditto_pb_packed_varints((const uint8_t *)"\x01\x80", 2, &count, &why) == 0;
    bad += ditto_pb_packed_varints((const uint8_t *)"", 0, &count, &why) != 0 || count != 0;

    /* a message with every wire type, read field by field */
    TestBuf b = { 0 };
    pb_int(&b, 1, 150);
    pb_tag(&b, 2, I64);
    pb_fixed64(&b, 0x1122334455667788ull);
    pb_str(&b, 3, "hi");
    pb_f32(&b, 536870911, -1.5f);   /* the largest field number */
    DittoPb r;
    DittoPbField f;
    ditto_pb_init(&r, b.p, b.n, b.p, b.n);
    bad += ditto_pb_next(&r, &f) != 1 || f.number != 1 || f.wire != DITTO_PB_VARINT || f.v != 150 || f.at != 0;
    bad += ditto_pb_next(&r, &f) != 1 || f.number != 2 || f.wire != DITTO_PB_I64 || f.v != 0x1122334455667788ull;
    bad += ditto_pb_next(&r, &f) != 1 || f.number != 3 || f.wire != DITTO_PB_LEN || f.len != 2 || memcmp(f.data, "hi", 2);
    bad += ditto_pb_next(&r, &f) != 1 || f.number != 536870911 || f.wire != DITTO_PB_I32 || ditto_pb_f32(f.v) != -1.5f;
    bad += ditto_pb_next(&r, &f) != 0;
    /* a cut message: the error sticks */
    ditto_pb_init(&r, b.p, b.n - 1, b.p, b.n - 1);
    for (int k = 0; k < 3; k++)
        ditto_pb_next(&r, &f);
    bad += ditto_pb_next(&r, &f) != DITTO_ERR_FORMAT || !r.truncated || !r.err || ditto_pb_next(&r, &f) != DITTO_ERR_FORMAT;
    test_buf_free(&b);
    test_report(tc, "protobuf.primitives", bad == 0, "%d bad", bad);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    test_protobuf(&c);
    test_positive(&c);
    test_hostile_tensors(&c);
    test_hostile_external_memory(&c);
    test_hostile_graph(&c);
    test_hostile_wire(&c);
    test_sweeps(&c);
    test_alloc_failures(&c);
    test_files(&c);
    test_seed_files(&c);
    test_shared(&c);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
