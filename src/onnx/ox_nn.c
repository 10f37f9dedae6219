/*
 * Network ONNX ops on the backend: Conv, ConvTranspose, MatMul, Gemm,
 * MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, the four norms,
 * Softmax, LogSoftmax, the Reduce family, Resize, Upsample, LpNormalization,
 * GridSample.
 * Each maps ONNX attributes (and their opset differences) onto the op
 * table's params; rank juggling (MatMul promotion and batch broadcast,
 * Softmax's old 2-D coercion, multi-axis reductions) is done with views.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "onnx/exec_internal.h"

#define MAX_INTS 64

static int op_failed(DittoOnnxRunner *r, const OxNode *n, int rc)
{
    return rc < 0 ? ox_fail(r, n, rc, "%s failed", n->src->op_type) : 0;
}

/* Float input i on the device; NULL-able. */
static int dev_in(DittoOnnxRunner *r, const OxNode *n, int i, bool required, DittoTensor *t, const OxValue **out)
{
    const OxValue *v = ox_in(r, n, i);
    if (out)
        *out = v;
    if (!v || (ditto_tensor_numel(&v->t) == 0 && !required && v->t.ndim == 1)) {
        if (required)
            return ox_fail(r, n, DITTO_ERR_FORMAT, "input %d is required", i);
        if (out)
            *out = NULL;
        return 1;
    }
    if (!ox_is_float(v->type))
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "input %d has type %s (float expected)", i, ditto_dtype_name(v->type));
    DITTO_TRY(ox_dev(r, v, t));
    return 0;
}

/* ints attribute into int[n] with a default; error when its length is wrong. */
static int attr_ints_n(DittoOnnxRunner *r, const OxNode *n, const char *name, int count, int def, int *out)
{
    const int64_t *a;
    int k = ox_attr_ints(n, name, &a);
    for (int i = 0; i < count; i++)
        out[i] = def;
    if (k < 0)
        return 0;
    if (k != count)
        return ox_fail(r, n, DITTO_ERR_INVAL, "%s has %d values, %d expected", name, k, count);
    for (int i = 0; i < count; i++) {
        if (a[i] < INT32_MIN || a[i] > INT32_MAX)
            return ox_fail(r, n, DITTO_ERR_RANGE, "%s out of range", name);
        out[i] = (int)a[i];
    }
    return 0;
}

/* pads (begin..., end...) and auto_pad for conv and pool windows. */
static int window_pads(DittoOnnxRunner *r, const OxNode *n, int ns, const int64_t *in, const int *k, const int *s, const int *d,
                       int *pb, int *pe)
{
    int pads[6];
    DITTO_TRY(attr_ints_n(r, n, "pads", 2 * ns, 0, pads));
    const char *ap = ox_attr_str(n, "auto_pad", "NOTSET");
    for (int i = 0; i < ns; i++) {
        pb[i] = pads[i];
        pe[i] = pads[ns + i];
        if (!strcmp(ap, "VALID")) {
            pb[i] = pe[i] = 0;
        } else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            int64_t out = (in[i] + s[i] - 1) / s[i];
            int64_t total = (out - 1) * s[i] + (int64_t)(k[i] - 1) * d[i] + 1 - in[i];
            if (total < 0)
                total = 0;
            int64_t small = total / 2, big = total - small;
            pb[i] = (int)(!strcmp(ap, "SAME_UPPER") ? small : big);
            pe[i] = (int)(total - pb[i]);
        } else if (strcmp(ap, "NOTSET")) {
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "auto_pad '%s'", ap);
        }
        if (pb[i] < 0 || pe[i] < 0)
            return ox_fail(r, n, DITTO_ERR_INVAL, "negative pads");
    }
    return 0;
}

/* ---- Conv / ConvTranspose ---- */

static int run_conv(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, w, b;
    const OxValue *xv, *wv, *bv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    DITTO_TRY(dev_in(r, n, 1, true, &w, &wv));
    int hb = dev_in(r, n, 2, false, &b, &bv);
    DITTO_TRY(hb);
    int ns = x.ndim - 2;
    if (ns < 1 || ns > 3 || w.ndim != x.ndim)
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "input of rank %d with weights of rank %d (1-3 spatial dims supported)", x.ndim, w.ndim);
    bool transpose = !strcmp(n->src->op_type, "ConvTranspose");
    DittoConvTransposeParams tp;
    memset(&tp, 0, sizeof tp);
    DittoConvParams *p = &tp.conv;
    int k[3], s[3], d[3];
    for (int i = 0; i < ns; i++)
        k[i] = (int)w.shape[2 + i];
    DITTO_TRY(attr_ints_n(r, n, "strides", ns, 1, s));
    DITTO_TRY(attr_ints_n(r, n, "dilations", ns, 1, d));
    int64_t g = ox_attr_int(n, "group", 1);
    if (g < 1 || g > INT32_MAX)
        return ox_fail(r, n, DITTO_ERR_INVAL, "group %lld", (long long)g);
    p->groups = (int)g;
    for (int i = 0; i < ns; i++) {
        if (s[i] < 1 || d[i] < 1)
            return ox_fail(r, n, DITTO_ERR_INVAL, "strides and dilations must be >= 1");
        p->stride[i] = s[i];
        p->dilation[i] = d[i];
    }
    int64_t shape[DITTO_MAX_DIMS];
    DittoTensor y;
    if (!transpose) {
        DITTO_TRY(window_pads(r, n, ns, x.shape + 2, k, s, d, p->pad_begin, p->pad_end));
        if (ditto_conv_out_shape(p, &x, &w, shape) < 0)
            return ox_fail(r, n, DITTO_ERR_SHAPE, "input %s and weights %s do not form a convolution",
                           ditto_shape_str(x.shape, x.ndim, (char[DITTO_SHAPE_STR_MAX]){ 0 }, DITTO_SHAPE_STR_MAX),
                           ditto_shape_str(w.shape, w.ndim, (char[DITTO_SHAPE_STR_MAX]){ 0 }, DITTO_SHAPE_STR_MAX));
        DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, shape, false, &y));
        return op_failed(r, n, ditto_op_conv(r->be, p, &x, &w, hb ? NULL : &b, &y));
    }
    int pads[6], op[3];
    DITTO_TRY(attr_ints_n(r, n, "pads", 2 * ns, 0, pads));
    DITTO_TRY(attr_ints_n(r, n, "output_padding", ns, 0, op));
    const int64_t *oshape;
    int nos = ox_attr_ints(n, "output_shape", &oshape);
    const char *ap = ox_attr_str(n, "auto_pad", "NOTSET");
    bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
    for (int i = 0; i < ns; i++) {
        tp.output_padding[i] = op[i];
        p->pad_begin[i] = pads[i];
        p->pad_end[i] = pads[ns + i];
        if (!strcmp(ap, "VALID"))
            p->pad_begin[i] = p->pad_end[i] = 0;
        if (nos >= ns || same) {
            /* pads from the requested output size */
            int64_t want = nos >= ns ? oshape[nos - ns + i] : x.shape[2 + i] * s[i];
            int64_t total = (int64_t)s[i] * (x.shape[2 + i] - 1) + op[i] + (int64_t)(k[i] - 1) * d[i] + 1 - want;
            if (total < 0)
                return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "output_shape larger than the full transposed convolution");
            bool upper = !strcmp(ap, "SAME_UPPER");
            p->pad_begin[i] = (int)(upper ? total / 2 : total - total / 2);
            p->pad_end[i] = (int)(total - p->pad_begin[i]);
        }
    }
    if (ditto_conv_transpose_out_shape(&tp, &x, &w, shape) < 0)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "input and weights (or attributes) do not form a transposed convolution");
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, shape, false, &y));
    return op_failed(r, n, ditto_op_conv_transpose(r->be, &tp, &x, &w, hb ? NULL : &b, &y));
}

/* ---- MatMul / Gemm ---- */

static int run_matmul(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor a, b;
    const OxValue *av;
    DITTO_TRY(dev_in(r, n, 0, true, &a, &av));
    DITTO_TRY(dev_in(r, n, 1, true, &b, NULL));
    if (a.ndim < 1 || b.ndim < 1)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "scalar operand");
    /* 1-D operands get a unit dim that the result drops again */
    bool a1 = a.ndim == 1, b1 = b.ndim == 1;
    DittoTensor av2 = a, bv2 = b;
    if (a1) {
        int64_t s[2] = { 1, a.shape[0] };
        ditto_tensor_reshape(&a, 2, s, &av2);
    }
    if (b1) {
        int64_t s[2] = { b.shape[0], 1 };
        ditto_tensor_reshape(&b, 2, s, &bv2);
    }
    int nba = av2.ndim - 2, nbb = bv2.ndim - 2, nbatch;
    int64_t batch[DITTO_MAX_DIMS];
    if (ox_broadcast(nba, av2.shape, nbb, bv2.shape, &nbatch, batch) < 0)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "batch dims do not broadcast");
    int nd = nbatch + 2;
    if (nd > DITTO_MAX_DIMS)
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "rank %d", nd);
    int64_t M = av2.shape[av2.ndim - 2], K = av2.shape[av2.ndim - 1], N = bv2.shape[bv2.ndim - 1];
    if (bv2.shape[bv2.ndim - 2] != K)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "inner dimensions %lld and %lld differ", (long long)K, (long long)bv2.shape[bv2.ndim - 2]);
    /* both operands at the output rank, leading 1s */
    int64_t sa[DITTO_MAX_DIMS], sb[DITTO_MAX_DIMS], sc[DITTO_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - av2.ndim), ib = i - (nd - bv2.ndim);
        sa[i] = ia >= 0 ? av2.shape[ia] : 1;
        sb[i] = ib >= 0 ? bv2.shape[ib] : 1;
        sc[i] = i < nbatch ? batch[i] : 0;
    }
    sc[nd - 2] = M;
    sc[nd - 1] = N;
    DittoTensor A, B, C;
    ditto_tensor_reshape(&av2, nd, sa, &A);
    ditto_tensor_reshape(&bv2, nd, sb, &B);
    /* output shape without the promoted dims */
    int64_t out[DITTO_MAX_DIMS];
    int no = 0;
    for (int i = 0; i < nd; i++) {
        if ((i == nd - 2 && a1) || (i == nd - 1 && b1))
            continue;
        out[no++] = sc[i];
    }
    DittoTensor y;
    DITTO_TRY(ox_alloc(r, n, 0, av->type, no, out, false, &y));
    ditto_tensor_reshape(&y, nd, sc, &C);
    DittoMatmulParams p = { false, false, 1.0f };
    return op_failed(r, n, ditto_op_matmul(r->be, &p, &A, &B, &C));
}

static int run_gemm(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor a, b, c;
    const OxValue *av;
    DITTO_TRY(dev_in(r, n, 0, true, &a, &av));
    DITTO_TRY(dev_in(r, n, 1, true, &b, NULL));
    int hc = dev_in(r, n, 2, false, &c, NULL);
    DITTO_TRY(hc);
    if (a.ndim != 2 || b.ndim != 2)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "A and B must be 2-D");
    float alpha = ox_attr_float(n, "alpha", 1.0f), beta = ox_attr_float(n, "beta", 1.0f);
    bool ta = ox_attr_int(n, "transA", 0) != 0, tb = ox_attr_int(n, "transB", 0) != 0;
    int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
    int64_t Kb = tb ? b.shape[1] : b.shape[0], N = tb ? b.shape[0] : b.shape[1];
    if (K != Kb)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "inner dimensions %lld and %lld differ", (long long)K, (long long)Kb);
    int64_t shape[2] = { M, N };
    DittoTensor y;
    DITTO_TRY(ox_alloc(r, n, 0, av->type, 2, shape, false, &y));
    bool bias_vec = hc == 0 && ditto_tensor_numel(&c) == N && (c.ndim == 1 || (c.ndim == 2 && c.shape[0] == 1));
    if (tb && !ta && alpha == 1.0f && (hc || (bias_vec && beta == 1.0f))) {
        /* y = A B^T + c: the linear op, B being (out, in) */
        DittoTensor cv = c;
        if (hc == 0) {
            int64_t s1 = N;
            ditto_tensor_reshape(&c, 1, &s1, &cv);
        }
        /* one GEMM over all rows: the linear op splits only its leading (batch) dim */
        int64_t s3a[3] = { 1, M, K }, s3y[3] = { 1, M, N };
        DittoTensor a3, y3;
        ditto_tensor_reshape(&a, 3, s3a, &a3);
        ditto_tensor_reshape(&y, 3, s3y, &y3);
        return op_failed(r, n, ditto_op_linear(r->be, &a3, &b, hc ? NULL : &cv, &y3));
    }
    DittoMatmulParams p = { ta, tb, alpha };
    DITTO_TRY(op_failed(r, n, ditto_op_matmul(r->be, &p, &a, &b, &y)));
    if (hc || beta == 0.0f)
        return 0;
    int nd;
    int64_t bs[DITTO_MAX_DIMS];
    if (ox_broadcast(2, shape, c.ndim, c.shape, &nd, bs) < 0 || nd != 2 || bs[0] != M || bs[1] != N)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "C does not broadcast to (M, N)");
    DittoTensor cs = c;
    if (beta != 1.0f) {
        DITTO_TRY(ox_temp(r, DITTO_F32, c.ndim, c.shape, false, &cs));
        DittoUnaryParams up = { DITTO_UNARY_AFFINE, beta, 0.0f };
        DITTO_TRY(op_failed(r, n, ditto_op_unary(r->be, &up, &c, &cs)));
    }
    return op_failed(r, n, ditto_op_binary(r->be, DITTO_BINARY_ADD, &y, &cs, &y));
}

/* ---- pooling ---- */

static int run_pool(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, y;
    const OxValue *xv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    int ns = x.ndim - 2;
    if (ns < 1 || ns > 3)
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "input of rank %d (1-3 spatial dims supported)", x.ndim);
    if (ox_out_used(r, n, 1))
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "the Indices output");
    DittoPoolParams p;
    memset(&p, 0, sizeof p);
    p.kind = !strcmp(n->src->op_type, "MaxPool") ? DITTO_POOL_MAX : DITTO_POOL_AVG;
    int k[3], s[3], d[3];
    const int64_t *ks;
    if (ox_attr_ints(n, "kernel_shape", &ks) != ns)
        return ox_fail(r, n, DITTO_ERR_FORMAT, "kernel_shape must have %d values", ns);
    DITTO_TRY(attr_ints_n(r, n, "kernel_shape", ns, 1, k));
    DITTO_TRY(attr_ints_n(r, n, "strides", ns, 1, s));
    DITTO_TRY(attr_ints_n(r, n, "dilations", ns, 1, d));
    for (int i = 0; i < ns; i++) {
        if (d[i] != 1)
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "dilated pooling");
        if (k[i] < 1 || s[i] < 1)
            return ox_fail(r, n, DITTO_ERR_INVAL, "kernel and strides must be >= 1");
        p.kernel[i] = k[i];
        p.stride[i] = s[i];
    }
    DITTO_TRY(window_pads(r, n, ns, x.shape + 2, k, s, d, p.pad_begin, p.pad_end));
    for (int i = 0; i < ns; i++)
        if (p.pad_begin[i] >= k[i] || p.pad_end[i] >= k[i])
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "padding as large as the kernel");
    p.ceil_mode = ox_attr_int(n, "ceil_mode", 0) != 0;
    p.count_include_pad = ox_attr_int(n, "count_include_pad", 0) != 0;
    int64_t shape[DITTO_MAX_DIMS];
    if (ditto_pool_out_shape(&p, &x, shape) < 0)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "the window does not fit the input");
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, shape, false, &y));
    return op_failed(r, n, ditto_op_pool(r->be, &p, &x, &y));
}

static int run_global_pool(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, y;
    const OxValue *xv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    if (x.ndim < 3)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "needs (N, C, spatial...)");
    int64_t shape[DITTO_MAX_DIMS], s3[3] = { x.shape[0], x.shape[1], 1 };
    for (int i = 0; i < x.ndim; i++)
        shape[i] = i < 2 ? x.shape[i] : 1;
    for (int i = 2; i < x.ndim; i++)
        s3[2] *= x.shape[i];
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, shape, false, &y));
    DittoTensor xv3, yv3;
    ditto_tensor_reshape(&x, 3, s3, &xv3);
    s3[2] = 1;
    ditto_tensor_reshape(&y, 3, s3, &yv3);
    DittoReduceKind kind = !strcmp(n->src->op_type, "GlobalMaxPool") ? DITTO_REDUCE_MAX : DITTO_REDUCE_MEAN;
    return op_failed(r, n, ditto_op_reduce(r->be, kind, 2, &xv3, &yv3));
}

/* ---- norms ---- */

static int run_batch_norm(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, w, b, m, v, y;
    const OxValue *xv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    DITTO_TRY(dev_in(r, n, 1, true, &w, NULL));
    DITTO_TRY(dev_in(r, n, 2, true, &b, NULL));
    DITTO_TRY(dev_in(r, n, 3, true, &m, NULL));
    DITTO_TRY(dev_in(r, n, 4, true, &v, NULL));
    if (ox_attr_int(n, "training_mode", 0) || ox_out_used(r, n, 1) || ox_out_used(r, n, 2))
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "training mode (running statistics outputs)");
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, x.shape, false, &y));
    return op_failed(r, n, ditto_op_batch_norm(r->be, ox_attr_float(n, "epsilon", 1e-5f), &x, &m, &v, &w, &b, &y));
}

static int run_instance_norm(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, w, b, y;
    const OxValue *xv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    DITTO_TRY(dev_in(r, n, 1, true, &w, NULL));
    DITTO_TRY(dev_in(r, n, 2, true, &b, NULL));
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, x.shape, false, &y));
    return op_failed(r, n, ditto_op_instance_norm(r->be, ox_attr_float(n, "epsilon", 1e-5f), &x, &w, &b, &y));
}

/* A contiguous float tensor of `count` elements from t broadcast (t of numel count, or 1): the norms' scale/bias. */
static int flat_vec(DittoOnnxRunner *r, const OxNode *n, const DittoTensor *t, int64_t count, DittoTensor *out)
{
    int64_t numel = ditto_tensor_numel(t);
    if (numel == count) {
        ditto_tensor_reshape(t, 1, &count, out);
        return 0;
    }
    if (numel != 1)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "scale/bias of %lld elements for %lld", (long long)numel, (long long)count);
    DittoTensor v = ditto_tensor(t->data, t->dtype, 1, &count);
    v.stride[0] = 0;
    v.device = t->device;
    DITTO_TRY(ox_temp(r, DITTO_F32, 1, &count, false, out));
    return op_failed(r, n, ditto_op_copy(r->be, &v, out));
}

static int run_layer_norm(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, w, b, y;
    const OxValue *xv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    DITTO_TRY(dev_in(r, n, 1, true, &w, NULL));
    int hb = dev_in(r, n, 2, false, &b, NULL);
    DITTO_TRY(hb);
    if (ox_out_used(r, n, 1) || ox_out_used(r, n, 2))
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "the Mean and InvStdDev outputs");
    int axis;
    if (!ox_axis(ox_attr_int(n, "axis", -1), x.ndim, &axis))
        return ox_fail(r, n, DITTO_ERR_INVAL, "axis out of range");
    int64_t s2[2] = { 1, 1 };
    for (int i = 0; i < x.ndim; i++)
        s2[i < axis ? 0 : 1] *= x.shape[i];
    DittoTensor wf, bf, x2, y2;
    DITTO_TRY(flat_vec(r, n, &w, s2[1], &wf));
    if (!hb)
        DITTO_TRY(flat_vec(r, n, &b, s2[1], &bf));
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, x.shape, false, &y));
    ditto_tensor_reshape(&x, 2, s2, &x2);
    ditto_tensor_reshape(&y, 2, s2, &y2);
    return op_failed(r, n, ditto_op_layer_norm(r->be, ox_attr_float(n, "epsilon", 1e-5f), false, &x2, &wf, hb ? NULL : &bf, &y2));
}

static int run_group_norm(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, w, b, y;
    const OxValue *xv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    DITTO_TRY(dev_in(r, n, 1, true, &w, NULL));
    DITTO_TRY(dev_in(r, n, 2, true, &b, NULL));
    int64_t g = ox_attr_int(n, "num_groups", 0);
    if (x.ndim < 2 || g < 1 || x.shape[1] % g)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "channels not divisible by num_groups %lld", (long long)g);
    int64_t C = x.shape[1];
    DittoTensor wc = w, bc = b;
    if (ditto_tensor_numel(&w) == g && g != C) {
        /* opset 18: one scale and bias per group, repeated over its channels */
        int64_t s2[2] = { g, C / g };
        DittoTensor wv = ditto_tensor(w.data, DITTO_F32, 2, s2), bv = ditto_tensor(b.data, DITTO_F32, 2, s2);
        wv.stride[1] = bv.stride[1] = 0;
        wv.device = bv.device = w.device;
        DITTO_TRY(ox_temp(r, DITTO_F32, 2, s2, false, &wc));
        DITTO_TRY(ox_temp(r, DITTO_F32, 2, s2, false, &bc));
        DITTO_TRY(op_failed(r, n, ditto_op_copy(r->be, &wv, &wc)));
        DITTO_TRY(op_failed(r, n, ditto_op_copy(r->be, &bv, &bc)));
    }
    DittoTensor wf, bf;
    DITTO_TRY(flat_vec(r, n, &wc, C, &wf));
    DITTO_TRY(flat_vec(r, n, &bc, C, &bf));
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, x.shape, false, &y));
    return op_failed(r, n, ditto_op_group_norm(r->be, (int)g, ox_attr_float(n, "epsilon", 1e-5f), &x, &wf, &bf, &y));
}

static int run_softmax(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, y;
    const OxValue *xv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    int64_t a = ox_attr_int(n, "axis", r->opset < 13 ? 1 : -1);
    int axis;
    if (!ox_axis(a, x.ndim > 0 ? x.ndim : 1, &axis))
        return ox_fail(r, n, DITTO_ERR_INVAL, "axis %lld out of range", (long long)a);
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, x.shape, false, &y));
    DittoTensor xs = x, ys = y;
    int ax = axis;
    if (r->opset < 13 || x.ndim == 0) {
        /* before opset 13 the input is coerced to 2-D at axis */
        int64_t s2[2] = { 1, 1 };
        for (int i = 0; i < x.ndim; i++)
            s2[i < axis ? 0 : 1] *= x.shape[i];
        ditto_tensor_reshape(&x, 2, s2, &xs);
        ditto_tensor_reshape(&y, 2, s2, &ys);
        ax = 1;
    }
    DITTO_TRY(op_failed(r, n, ditto_op_softmax(r->be, ax, &xs, &ys)));
    if (!strcmp(n->src->op_type, "LogSoftmax")) {
        DittoUnaryParams p = { DITTO_UNARY_LOG, 0, 0 };
        return op_failed(r, n, ditto_op_unary(r->be, &p, &ys, &ys));
    }
    return 0;
}

static int run_lp_norm(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, y, t, a;
    const OxValue *xv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    int axis;
    if (!ox_axis(ox_attr_int(n, "axis", -1), x.ndim, &axis))
        return ox_fail(r, n, DITTO_ERR_INVAL, "axis out of range");
    int64_t p = ox_attr_int(n, "p", 2);
    if (p != 1 && p != 2)
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "p = %lld", (long long)p);
    int64_t shape[DITTO_MAX_DIMS];
    memcpy(shape, x.shape, sizeof shape);
    shape[axis] = 1;
    DITTO_TRY(ox_temp(r, DITTO_F32, x.ndim, shape, false, &t));
    if (p == 1) {
        DITTO_TRY(ox_temp(r, DITTO_F32, x.ndim, x.shape, false, &a));
        DittoUnaryParams up = { DITTO_UNARY_ABS, 0, 0 };
        DITTO_TRY(op_failed(r, n, ditto_op_unary(r->be, &up, &x, &a)));
        DITTO_TRY(op_failed(r, n, ditto_op_reduce(r->be, DITTO_REDUCE_SUM, axis, &a, &t)));
    } else {
        DITTO_TRY(op_failed(r, n, ditto_op_reduce(r->be, DITTO_REDUCE_L2, axis, &x, &t)));
    }
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, x.shape, false, &y));
    return op_failed(r, n, ditto_op_binary(r->be, DITTO_BINARY_DIV, &x, &t, &y));
}

/* ---- Reduce* ---- */

typedef enum RedKind { RK_SUM, RK_MEAN, RK_MAX, RK_MIN, RK_PROD, RK_SUMSQ, RK_L1, RK_L2, RK_LOGSUM, RK_LOGSUMEXP } RedKind;

static const struct { const char *name; RedKind kind; } red_names[] = {
    { "ReduceSum", RK_SUM }, { "ReduceMean", RK_MEAN }, { "ReduceMax", RK_MAX }, { "ReduceMin", RK_MIN },
    { "ReduceProd", RK_PROD }, { "ReduceSumSquare", RK_SUMSQ }, { "ReduceL1", RK_L1 }, { "ReduceL2", RK_L2 },
    { "ReduceLogSum", RK_LOGSUM }, { "ReduceLogSumExp", RK_LOGSUMEXP },
};

/* Host reduction of xt over mask[] into y (keepdims element order), accumulating in double in acc[numel(y)]. */
static void reduce_host(RedKind k, const DittoTensor *xt, const bool *mask, DittoTensor *y, bool flt, double *acc)
{
    int nd = xt->ndim;
    int64_t ny = ditto_tensor_numel(y), numel = ditto_tensor_numel(xt), cnt = ny ? numel / ny : 0;
    int64_t ys[DITTO_MAX_DIMS], s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ys[d] = mask[d] ? 0 : s;
        s *= mask[d] ? 1 : xt->shape[d];
    }
    double init = k == RK_MAX ? -INFINITY : k == RK_MIN ? INFINITY : k == RK_PROD ? 1.0 : 0.0;
    for (int64_t o = 0; o < ny; o++)
        acc[o] = init;
    int64_t idx[DITTO_MAX_DIMS] = { 0 }, off = 0;
    for (int64_t i = 0; i < numel; i++) {
        double v = flt ? ((const float *)xt->data)[i] : (double)((const int64_t *)xt->data)[i];
        double cur = acc[off];
        switch (k) {
        case RK_SUM: case RK_MEAN: case RK_LOGSUM: cur += v; break;
        case RK_MAX: cur = v > cur || v != v ? v : cur; break;
        case RK_MIN: cur = v < cur || v != v ? v : cur; break;
        case RK_PROD: cur *= v; break;
        case RK_SUMSQ: case RK_L2: cur += v * v; break;
        case RK_L1: cur += fabs(v); break;
        case RK_LOGSUMEXP: cur += exp(v); break;
        }
        acc[off] = cur;
        for (int d = nd - 1; d >= 0; d--) {
            off += ys[d];
            if (++idx[d] < xt->shape[d])
                break;
            off -= ys[d] * xt->shape[d];
            idx[d] = 0;
        }
    }
    for (int64_t o = 0; o < ny; o++) {
        double cur = acc[o];
        if (k == RK_MEAN)
            cur = flt ? cur / (double)cnt : (double)((int64_t)cur / (cnt ? cnt : 1));
        else if (k == RK_L2)
            cur = sqrt(cur);
        else if (k == RK_LOGSUM || k == RK_LOGSUMEXP)
            cur = log(cur);
        if (flt)
            ((float *)y->data)[o] = (float)cur;
        else
            ((int64_t *)y->data)[o] = isfinite(cur) && fabs(cur) < 9.2e18 ? (int64_t)cur : 0;
    }
}

static int run_reduce(DittoOnnxRunner *r, const OxNode *n)
{
    RedKind kind = RK_SUM;
    for (size_t i = 0; i < sizeof red_names / sizeof *red_names; i++)
        if (!strcmp(red_names[i].name, n->src->op_type))
            kind = red_names[i].kind;
    const OxValue *xv = ox_need(r, n, 0);
    if (!xv)
        return DITTO_ERR_FORMAT;
    int nd = xv->t.ndim, na = -1;
    int64_t axes[MAX_INTS];
    if (ox_in(r, n, 1)) {
        DITTO_TRY(ox_read_ints(r, n, ox_in(r, n, 1), axes, MAX_INTS, &na));
    } else {
        const int64_t *a;
        na = ox_attr_ints(n, "axes", &a);
        if (na > MAX_INTS)
            return ox_fail(r, n, DITTO_ERR_INVAL, "too many axes");
        if (na > 0)
            memcpy(axes, a, sizeof(int64_t) * (size_t)na);
    }
    bool keep = ox_attr_int(n, "keepdims", 1) != 0;
    if (na <= 0 && ox_attr_int(n, "noop_with_empty_axes", 0))
        return ox_alias(r, n, 0, xv, nd, xv->t.shape, xv->type);
    bool mask[DITTO_MAX_DIMS] = { false };
    for (int i = 0; i < nd; i++)
        mask[i] = na <= 0;
    for (int i = 0; i < na; i++) {
        int a;
        if (!ox_axis(axes[i], nd, &a))
            return ox_fail(r, n, DITTO_ERR_INVAL, "axis %lld out of range for rank %d", (long long)axes[i], nd);
        mask[a] = true;
    }
    int64_t kshape[DITTO_MAX_DIMS], oshape[DITTO_MAX_DIMS];
    int no = 0;
    for (int i = 0; i < nd; i++) {
        kshape[i] = mask[i] ? 1 : xv->t.shape[i];
        if (!mask[i] || keep)
            oshape[no++] = kshape[i];
    }
    bool flt = ox_is_float(xv->type);
    DittoTensor y;
    if (!flt || xv->host || kind == RK_PROD) {
        DittoTensor xt;
        DITTO_TRY(ox_host(r, xv, &xt));
        DITTO_TRY(ox_alloc(r, n, 0, xv->type, no, oshape, true, &y));
        DittoTensor acc;
        int64_t ny = ditto_tensor_numel(&y);
        DITTO_TRY(ox_temp(r, DITTO_F64, 1, &ny, true, &acc));
        reduce_host(kind, &xt, mask, &y, flt, acc.data);
        return 0;
    }
    DittoTensor x;
    DITTO_TRY(ox_dev(r, xv, &x));
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, no, oshape, false, &y));
    if (ditto_tensor_numel(&y) == 0)
        return 0;
    /* merge runs of adjacent reduced (or kept) axes: fewer, larger reductions */
    int64_t ms[DITTO_MAX_DIMS];
    bool mm[DITTO_MAX_DIMS];
    int m = 0;
    for (int i = 0; i < nd; i++) {
        if (xv->t.shape[i] == 1 && nd > 1)
            continue;   /* size-1 axes change nothing */
        if (m > 0 && mm[m - 1] == mask[i]) {
            ms[m - 1] *= xv->t.shape[i];
        } else {
            ms[m] = xv->t.shape[i];
            mm[m++] = mask[i];
        }
    }
    if (m == 0) {
        ms[0] = 1;
        mm[0] = true;
        m = 1;
    }
    DittoTensor cur;
    ditto_tensor_reshape(&x, m, ms, &cur);
    DittoTensor ylast;
    int64_t yk[DITTO_MAX_DIMS];
    for (int i = 0; i < m; i++)
        yk[i] = mm[i] ? 1 : ms[i];
    ditto_tensor_reshape(&y, m, yk, &ylast);
    int nred = 0;
    for (int i = 0; i < m; i++)
        nred += mm[i];
    if (nred == 0)
        return op_failed(r, n, ditto_op_copy(r->be, &cur, &ylast));
    DittoTensor mx;   /* log-sum-exp: the max, kept for the shift */
    if (kind == RK_LOGSUMEXP || kind == RK_L1) {
        DittoTensor t;
        if (kind == RK_LOGSUMEXP) {
            DITTO_TRY(ox_temp(r, DITTO_F32, m, yk, false, &mx));
            DittoTensor src = cur, dst;
            int done = 0;
            for (int i = 0; i < m; i++) {
                if (!mm[i])
                    continue;
                if (++done == nred) {
                    dst = mx;
                } else {
                    int64_t s[DITTO_MAX_DIMS];
                    memcpy(s, src.shape, sizeof s);
                    s[i] = 1;
                    DITTO_TRY(ox_temp(r, DITTO_F32, m, s, false, &dst));
                }
                DITTO_TRY(op_failed(r, n, ditto_op_reduce(r->be, DITTO_REDUCE_MAX, i, &src, &dst)));
                src = dst;
            }
            DITTO_TRY(ox_temp(r, DITTO_F32, m, ms, false, &t));
            DITTO_TRY(op_failed(r, n, ditto_op_binary(r->be, DITTO_BINARY_SUB, &cur, &mx, &t)));
            DittoUnaryParams up = { DITTO_UNARY_EXP, 0, 0 };
            DITTO_TRY(op_failed(r, n, ditto_op_unary(r->be, &up, &t, &t)));
        } else {
            DITTO_TRY(ox_temp(r, DITTO_F32, m, ms, false, &t));
            DittoUnaryParams up = { DITTO_UNARY_ABS, 0, 0 };
            DITTO_TRY(op_failed(r, n, ditto_op_unary(r->be, &up, &cur, &t)));
        }
        cur = t;
    }
    int done = 0;
    for (int i = 0; i < m; i++) {
        if (!mm[i])
            continue;
        DittoReduceKind rk;
        switch (kind) {
        case RK_MEAN: rk = DITTO_REDUCE_MEAN; break;
        case RK_MAX: rk = DITTO_REDUCE_MAX; break;
        case RK_MIN: rk = DITTO_REDUCE_MIN; break;
        case RK_SUMSQ: case RK_L2: rk = done == 0 ? DITTO_REDUCE_SUMSQ : DITTO_REDUCE_SUM; break;
        default: rk = DITTO_REDUCE_SUM; break;
        }
        DittoTensor dst;
        if (++done == nred) {
            dst = ylast;
        } else {
            int64_t s[DITTO_MAX_DIMS];
            memcpy(s, cur.shape, sizeof s);
            s[i] = 1;
            DITTO_TRY(ox_temp(r, DITTO_F32, m, s, false, &dst));
        }
        DITTO_TRY(op_failed(r, n, ditto_op_reduce(r->be, rk, i, &cur, &dst)));
        cur = dst;
    }
    DittoUnaryParams up = { DITTO_UNARY_IDENTITY, 0, 0 };
    if (kind == RK_L2)
        up.kind = DITTO_UNARY_SQRT;
    else if (kind == RK_LOGSUM || kind == RK_LOGSUMEXP)
        up.kind = DITTO_UNARY_LOG;
    else
        return 0;
    DITTO_TRY(op_failed(r, n, ditto_op_unary(r->be, &up, &ylast, &ylast)));
    if (kind == RK_LOGSUMEXP)
        return op_failed(r, n, ditto_op_binary(r->be, DITTO_BINARY_ADD, &ylast, &mx, &ylast));
    return 0;
}

/* ---- Resize / Upsample ---- */

static int run_resize(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, y;
    const OxValue *xv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    int nd = x.ndim;
    bool upsample = !strcmp(n->src->op_type, "Upsample");
    bool legacy = upsample || r->opset < 11;
    DittoResizeParams p;
    ditto_resize_params_default(&p);
    const char *mode = ox_attr_str(n, "mode", "nearest");
    if (!strcmp(mode, "nearest"))
        p.mode = DITTO_RESIZE_NEAREST;
    else if (!strcmp(mode, "linear") || !strcmp(mode, "bilinear") || !strcmp(mode, "trilinear"))
        p.mode = DITTO_RESIZE_LINEAR;
    else if (!strcmp(mode, "cubic"))
        p.mode = DITTO_RESIZE_CUBIC;
    else
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "mode '%s'", mode);
    if (legacy) {
        /* Upsample and Resize-10: asymmetric coordinates, truncating nearest */
        p.coord = DITTO_RESIZE_ASYMMETRIC;
        p.nearest = DITTO_NEAREST_SIMPLE;
    } else {
        static const char *const coords[] = { "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                              "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize" };
        static const char *const nearest[] = { "round_prefer_floor", "round_prefer_ceil", "floor", "ceil" };
        const char *c = ox_attr_str(n, "coordinate_transformation_mode", "half_pixel");
        const char *nm = ox_attr_str(n, "nearest_mode", "round_prefer_floor");
        int ci = -1, ni = -1;
        for (int i = 0; i < 7; i++)
            if (!strcmp(c, coords[i]))
                ci = i;
        for (int i = 0; i < 4; i++)
            if (!strcmp(nm, nearest[i]))
                ni = i;
        if (ci < 0 || ni < 0)
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "coordinate_transformation_mode '%s' / nearest_mode '%s'", c, nm);
        p.coord = (DittoResizeCoord)ci;
        p.nearest = (DittoResizeNearest)ni;
        p.cubic_a = ox_attr_float(n, "cubic_coeff_a", -0.75f);
        p.exclude_outside = ox_attr_int(n, "exclude_outside", 0) != 0;
        p.extrapolation_value = ox_attr_float(n, "extrapolation_value", 0.0f);
    }
    /* scales / sizes for `axes` (default: every axis) */
    int64_t axes[DITTO_MAX_DIMS];
    const int64_t *aa;
    int na = ox_attr_ints(n, "axes", &aa);
    if (na > DITTO_MAX_DIMS)
        return ox_fail(r, n, DITTO_ERR_INVAL, "too many axes");
    if (na < 0) {
        na = nd;
        for (int i = 0; i < nd; i++)
            axes[i] = i;
    } else {
        for (int i = 0; i < na; i++) {
            int a;
            if (!ox_axis(aa[i], nd, &a))
                return ox_fail(r, n, DITTO_ERR_INVAL, "axis out of range");
            axes[i] = a;
        }
    }
    float scales[DITTO_MAX_DIMS];
    int64_t sizes[DITTO_MAX_DIMS], shape[DITTO_MAX_DIMS];
    int nsc = 0, nsz = 0;
    const OxValue *sv = NULL, *zv = NULL, *rv = NULL;
    if (upsample && r->opset < 9) {
        const DittoOnnxAttr *a = NULL;
        for (int i = 0; i < n->src->n_attrs; i++)
            if (!strcmp(n->src->attrs[i].name, "scales"))
                a = &n->src->attrs[i];
        if (!a || a->type != DITTO_ATTR_FLOATS || (int)a->n != nd)
            return ox_fail(r, n, DITTO_ERR_FORMAT, "scales attribute of %d floats expected", nd);
        for (int i = 0; i < nd; i++)
            scales[i] = a->floats[i];
        nsc = nd;
    } else {
        sv = ox_in(r, n, legacy ? 1 : 2);
        zv = legacy ? NULL : ox_in(r, n, 3);
        rv = legacy ? NULL : ox_in(r, n, 1);
        if (sv && ditto_tensor_numel(&sv->t) > 0) {
            DittoTensor st;
            DITTO_TRY(ox_host(r, sv, &st));
            nsc = (int)ditto_tensor_numel(&st);
            if (nsc != na || !ox_is_float(sv->type))
                return ox_fail(r, n, DITTO_ERR_SHAPE, "%d scales for %d axes", nsc, na);
            for (int i = 0; i < nsc; i++)
                scales[i] = ((const float *)st.data)[i];
        }
        if (zv && ditto_tensor_numel(&zv->t) > 0) {
            DITTO_TRY(ox_read_ints(r, n, zv, sizes, DITTO_MAX_DIMS, &nsz));
            if (nsz != na)
                return ox_fail(r, n, DITTO_ERR_SHAPE, "%d sizes for %d axes", nsz, na);
        }
    }
    if ((nsc > 0) == (nsz > 0))
        return ox_fail(r, n, DITTO_ERR_FORMAT, "exactly one of scales and sizes must be given");
    if (ox_attr_int(n, "antialias", 0) && p.mode != DITTO_RESIZE_NEAREST)
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "antialias");
    if (p.coord == DITTO_RESIZE_TF_CROP_AND_RESIZE) {
        DittoTensor rt;
        if (!rv || ditto_tensor_numel(&rv->t) != 2 * na)
            return ox_fail(r, n, DITTO_ERR_FORMAT, "tf_crop_and_resize needs a roi of %d values", 2 * na);
        DITTO_TRY(ox_host(r, rv, &rt));
        for (int i = 0; i < na; i++) {
            p.roi_start[axes[i]] = rt.dtype == DITTO_F32 ? ((const float *)rt.data)[i] : (float)((const int64_t *)rt.data)[i];
            p.roi_end[axes[i]] = rt.dtype == DITTO_F32 ? ((const float *)rt.data)[na + i] : (float)((const int64_t *)rt.data)[na + i];
        }
    }
    memcpy(shape, x.shape, sizeof shape);
    for (int i = 0; i < nd; i++)
        p.scale[i] = 1.0f;
    const char *policy = ox_attr_str(n, "keep_aspect_ratio_policy", "stretch");
    if (nsz > 0 && strcmp(policy, "stretch")) {
        bool smaller = !strcmp(policy, "not_smaller");
        if (!smaller && strcmp(policy, "not_larger"))
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "keep_aspect_ratio_policy '%s'", policy);
        float s = smaller ? 0.0f : INFINITY;
        for (int i = 0; i < na; i++) {
            float si = (float)sizes[i] / (float)x.shape[axes[i]];
            s = smaller ? fmaxf(s, si) : fminf(s, si);
        }
        for (int i = 0; i < na; i++) {
            sizes[i] = (int64_t)nearbyintf(s * (float)x.shape[axes[i]]);
            p.scale[axes[i]] = s;
        }
    }
    for (int i = 0; i < na; i++) {
        int a = (int)axes[i];
        if (nsc > 0) {
            if (!(scales[i] > 0.0f))
                return ox_fail(r, n, DITTO_ERR_INVAL, "scale %g", (double)scales[i]);
            float ext = p.coord == DITTO_RESIZE_TF_CROP_AND_RESIZE ? p.roi_end[a] - p.roi_start[a] : 1.0f;
            shape[a] = (int64_t)(scales[i] * ext * (float)x.shape[a]);
            p.scale[a] = scales[i];
        } else {
            if (sizes[i] < 0)
                return ox_fail(r, n, DITTO_ERR_INVAL, "negative size");
            shape[a] = sizes[i];
            if (!strcmp(policy, "stretch"))
                p.scale[a] = x.shape[a] ? (float)sizes[i] / (float)x.shape[a] : 1.0f;
        }
    }
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, nd, shape, false, &y));
    return op_failed(r, n, ditto_op_resize(r->be, &p, &x, &y));
}

/* GridSample (opset 16+): the table's grid_sample is bilinear / trilinear with zeros padding. */
static int run_grid_sample(DittoOnnxRunner *r, const OxNode *n)
{
    DittoTensor x, grid, y;
    const OxValue *xv;
    DITTO_TRY(dev_in(r, n, 0, true, &x, &xv));
    DITTO_TRY(dev_in(r, n, 1, true, &grid, NULL));
    const char *mode = ox_attr_str(n, "mode", r->opset >= 20 ? "linear" : "bilinear");
    const char *pad = ox_attr_str(n, "padding_mode", "zeros");
    if ((strcmp(mode, "bilinear") && strcmp(mode, "linear")) || strcmp(pad, "zeros"))
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "mode '%s' with padding_mode '%s' (linear with zeros is supported)", mode, pad);
    if ((x.ndim != 4 && x.ndim != 5) || grid.ndim != x.ndim)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "input and grid must both be 4-D or 5-D");
    int64_t shape[5] = { x.shape[0], x.shape[1] };
    for (int i = 2; i < x.ndim; i++)
        shape[i] = grid.shape[i - 1];
    DITTO_TRY(ox_alloc(r, n, 0, xv->type, x.ndim, shape, false, &y));
    return op_failed(r, n, ditto_op_grid_sample(r->be, ox_attr_int(n, "align_corners", 0) != 0, &x, &grid, &y));
}

const OxOpDef ditto_ox_ops_nn[] = {
    { "GridSample", run_grid_sample },
    { "Conv", run_conv }, { "ConvTranspose", run_conv }, { "MatMul", run_matmul }, { "Gemm", run_gemm },
    { "MaxPool", run_pool }, { "AveragePool", run_pool }, { "GlobalAveragePool", run_global_pool },
    { "GlobalMaxPool", run_global_pool }, { "BatchNormalization", run_batch_norm },
    { "InstanceNormalization", run_instance_norm }, { "LayerNormalization", run_layer_norm },
    { "GroupNormalization", run_group_norm }, { "Softmax", run_softmax }, { "LogSoftmax", run_softmax },
    { "LpNormalization", run_lp_norm },
    { "ReduceSum", run_reduce }, { "ReduceMean", run_reduce }, { "ReduceMax", run_reduce }, { "ReduceMin", run_reduce },
    { "ReduceProd", run_reduce }, { "ReduceSumSquare", run_reduce }, { "ReduceL1", run_reduce }, { "ReduceL2", run_reduce },
    { "ReduceLogSum", run_reduce }, { "ReduceLogSumExp", run_reduce },
    { "Resize", run_resize }, { "Upsample", run_resize },
    { NULL, NULL },
};
