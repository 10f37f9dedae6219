/* Op front ends: shape/dtype rules shared by every backend, then dispatch. */
#include "ops/ops.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/profile.h"
#include "core/log.h"

static const char *const op_names[DITTO_OP_COUNT] = {
#define X(E, f) #f,
#include "ops/ops.def"
#undef X
};

static const size_t op_offsets[DITTO_OP_COUNT] = {
#define X(E, f) offsetof(DittoOps, f),
#include "ops/ops.def"
#undef X
};

const char *ditto_op_name(DittoOp op)
{
    return (unsigned)op < DITTO_OP_COUNT ? op_names[op] : "invalid";
}

bool ditto_ops_has(const DittoOps *ops, DittoOp op)
{
    if ((unsigned)op >= DITTO_OP_COUNT)
        return false;
    void *const *slot = (void *const *)((const char *)ops + op_offsets[op]);
    return *slot != NULL;
}

#define SHAPE(t) ditto_shape_str((t)->shape, (t)->ndim, (char[DITTO_SHAPE_STR_MAX]){0}, DITTO_SHAPE_STR_MAX)

static int unsupported(DittoBackend *be, DittoOp op)
{
    return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op %s: not supported by the %s backend", ditto_op_name(op), be->name);
}

static int bad_shape(DittoBackend *be, DittoOp op, const char *what, const DittoTensor *a, const DittoTensor *b)
{
    if (b)
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "op %s: %s: %s vs %s", ditto_op_name(op), what, SHAPE(a), SHAPE(b));
    return ditto_fail(&be->log, DITTO_ERR_SHAPE, "op %s: %s: %s", ditto_op_name(op), what, SHAPE(a));
}

static int bad_arg(DittoBackend *be, DittoOp op, const char *what)
{
    return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: %s", ditto_op_name(op), what);
}

/* float tensor on this backend's device (f32 on the CPU; f32/f16/bf16 elsewhere) */
static bool is_float(const DittoBackend *be, const DittoTensor *t)
{
    if (t->dtype == DITTO_F32)
        return true;
    return be->device != DITTO_DEVICE_CPU && (t->dtype == DITTO_F16 || t->dtype == DITTO_BF16);
}

static int check_float(DittoBackend *be, DittoOp op, const char *name, const DittoTensor *t)
{
    if (!t)
        return 0;
    if (t->device != be->device)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: %s is on the wrong device for the %s backend", ditto_op_name(op), name, be->name);
    if (!is_float(be, t))
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: %s has dtype %s, not supported by the %s backend", ditto_op_name(op), name, ditto_dtype_name(t->dtype), be->name);
    return 0;
}

static int check_contig(DittoBackend *be, DittoOp op, const char *name, const DittoTensor *t)
{
    if (t && !ditto_tensor_is_contiguous(t))
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: %s %s must be contiguous", ditto_op_name(op), name, SHAPE(t));
    return 0;
}

/* The n named tensors are float tensors on this backend's device, then contiguous: checked in that order. */
static int check_dense(DittoBackend *be, DittoOp op, int n, const char *const *names, const DittoTensor *const *ts)
{
    for (int i = 0; i < n; i++)
        DITTO_TRY(check_float(be, op, names[i], ts[i]));
    for (int i = 0; i < n; i++)
        DITTO_TRY(check_contig(be, op, names[i], ts[i]));
    return 0;
}

/* check_dense of x and y */
static int check_xy(DittoBackend *be, DittoOp op, const DittoTensor *x, const DittoTensor *y)
{
    return check_dense(be, op, 2, (const char *const[]){ "x", "y" }, (const DittoTensor *const[]){ x, y });
}

static int check_vec(DittoBackend *be, DittoOp op, const char *name, const DittoTensor *t, int64_t n)
{
    if (!t)
        return 0;
    DITTO_TRY(check_float(be, op, name, t));
    DITTO_TRY(check_contig(be, op, name, t));
    if (t->ndim < 1 || ditto_tensor_numel(t) != n) {
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "op %s: %s has shape %s, expected %lld elements",
                          ditto_op_name(op), name, SHAPE(t), (long long)n);
    }
    return 0;
}

static int norm_axis(int axis, int ndim)
{
    return axis < 0 ? axis + ndim : axis;
}

/* be->skip_ops (measurement): whether op on these tensors is listed there */
static bool op_skipped(const DittoBackend *be, DittoOp op, const DittoTensor *x, const DittoTensor *w, const DittoTensor *y)
{
    char desc[3 * DITTO_SHAPE_STR_MAX + 64], a[DITTO_SHAPE_STR_MAX], b[DITTO_SHAPE_STR_MAX], c[DITTO_SHAPE_STR_MAX];
    const char *name = ditto_op_name(op);
    snprintf(desc, sizeof desc, "%s %s -> %s w%s", name, x ? ditto_shape_str(x->shape, x->ndim, a, sizeof a) : "-",
             y ? ditto_shape_str(y->shape, y->ndim, b, sizeof b) : "-", w ? ditto_shape_str(w->shape, w->ndim, c, sizeof c) : "-");
    const size_t nl = strlen(name);
    for (const char *e = be->skip_ops; *e;) {
        const char *end = strchr(e, ';');
        const size_t len = end ? (size_t)(end - e) : strlen(e);
        if (len >= nl && !strncmp(e, name, nl) && (len == nl || e[nl] == ':')) {
            char text[256];
            const size_t tl = len > nl ? len - nl - 1 : 0;
            if (tl < sizeof text) {
                memcpy(text, e + nl + (len > nl), tl);
                text[tl] = 0;
                if (strstr(desc, text))
                    return true;
            }
        }
        e += len + (end != NULL);
    }
    return false;
}

/* Dispatch to the backend (unless be->skip_ops lists the op); with the profiler on, timing marks around the call. */
#define CALL_W(op, xt, wt, yt, expr) do { if (be->skip_ops && op_skipped(be, op, xt, wt, yt)) return 0; if (!be->prof) return (expr); ditto_profile_op(be, op, xt, wt, yt, false); int r_ = (expr); ditto_profile_op(be, op, xt, wt, yt, true); return r_; } while (0)
#define CALL(op, xt, yt, expr) CALL_W(op, xt, NULL, yt, expr)

#define NEED(op, field) do { if (!be->ops.field) return unsupported(be, op); } while (0)

int ditto_op_copy(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_COPY, copy);
    if (ditto_tensor_numel(x) != ditto_tensor_numel(y) || (x->ndim != y->ndim && !ditto_tensor_is_contiguous(y)))
        return bad_shape(be, DITTO_OP_COPY, "x and y differ", x, y);
    if (x->ndim == y->ndim && !ditto_tensor_same_shape(x, y))
        return bad_shape(be, DITTO_OP_COPY, "x and y differ", x, y);
    CALL(DITTO_OP_COPY, x, y, be->ops.copy(be, x, y));
}

int ditto_op_randn(DittoBackend *be, const DittoRandnParams *p, DittoTensor *y)
{
    NEED(DITTO_OP_RANDN, randn);
    if (!p || !y)
        return DITTO_ERR_INVAL;
    if (y->dtype != DITTO_F32 || y->ndim != 3)
        return bad_arg(be, DITTO_OP_RANDN, "y must be float32 (A, B, n)");
    DITTO_TRY(check_contig(be, DITTO_OP_RANDN, "y", y));
    CALL(DITTO_OP_RANDN, NULL, y, be->ops.randn(be, p, y));
}

int ditto_op_fill(DittoBackend *be, float value, DittoTensor *y)
{
    NEED(DITTO_OP_FILL, fill);
    CALL(DITTO_OP_FILL, NULL, y, be->ops.fill(be, value, y));
}

int ditto_op_unary(DittoBackend *be, const DittoUnaryParams *p, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_UNARY, unary);
    DITTO_TRY(check_float(be, DITTO_OP_UNARY, "x", x));
    DITTO_TRY(check_float(be, DITTO_OP_UNARY, "y", y));
    if ((unsigned)p->kind >= DITTO_UNARY_COUNT)
        return bad_arg(be, DITTO_OP_UNARY, "unknown kind");
    if (!ditto_tensor_same_shape(x, y))
        return bad_shape(be, DITTO_OP_UNARY, "x and y differ", x, y);
    CALL(DITTO_OP_UNARY, x, y, be->ops.unary(be, p, x, y));
}

int ditto_op_bias_unary(DittoBackend *be, const DittoUnaryParams *p, int axis, const DittoTensor *x, const DittoTensor *bias, DittoTensor *y)
{
    NEED(DITTO_OP_BIAS_UNARY, bias_unary);
    DITTO_TRY(check_float(be, DITTO_OP_BIAS_UNARY, "x", x));
    DITTO_TRY(check_float(be, DITTO_OP_BIAS_UNARY, "y", y));
    DITTO_TRY(check_float(be, DITTO_OP_BIAS_UNARY, "bias", bias));
    DITTO_TRY(check_contig(be, DITTO_OP_BIAS_UNARY, "bias", bias));
    if ((unsigned)p->kind >= DITTO_UNARY_COUNT)
        return bad_arg(be, DITTO_OP_BIAS_UNARY, "unknown kind");
    if (!ditto_tensor_same_shape(x, y))
        return bad_shape(be, DITTO_OP_BIAS_UNARY, "x and y differ", x, y);
    if (axis < 0 || axis >= x->ndim || bias->ndim != 1 || bias->shape[0] != x->shape[axis])
        return bad_shape(be, DITTO_OP_BIAS_UNARY, "bias does not match x along the axis", x, bias);
    CALL(DITTO_OP_BIAS_UNARY, x, y, be->ops.bias_unary(be, p, axis, x, bias, y));
}

int ditto_op_act(DittoBackend *be, DittoUnaryKind kind, float alpha, const DittoTensor *x, DittoTensor *y)
{
    DittoUnaryParams p = { kind, alpha, 0 };
    return ditto_op_unary(be, &p, x, y);
}

int ditto_op_binary(DittoBackend *be, DittoBinaryKind kind, const DittoTensor *a, const DittoTensor *b, DittoTensor *y)
{
    NEED(DITTO_OP_BINARY, binary);
    DITTO_TRY(check_float(be, DITTO_OP_BINARY, "a", a));
    DITTO_TRY(check_float(be, DITTO_OP_BINARY, "b", b));
    DITTO_TRY(check_float(be, DITTO_OP_BINARY, "y", y));
    DITTO_TRY(check_contig(be, DITTO_OP_BINARY, "y", y));
    if ((unsigned)kind >= DITTO_BINARY_COUNT)
        return bad_arg(be, DITTO_OP_BINARY, "unknown kind");
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    if (y->ndim != nd)
        return bad_shape(be, DITTO_OP_BINARY, "y rank differs from the broadcast rank", a, y);
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return bad_shape(be, DITTO_OP_BINARY, "a and b do not broadcast", a, b);
        int64_t d = da == 1 ? db : da;
        if (y->shape[i] != d)
            return bad_shape(be, DITTO_OP_BINARY, "y is not the broadcast shape", a, y);
    }
    DittoBinaryParams p = { kind };
    CALL(DITTO_OP_BINARY, a, y, be->ops.binary(be, &p, a, b, y));
}

int ditto_op_softmax(DittoBackend *be, int axis, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_SOFTMAX, softmax);
    DITTO_TRY(check_xy(be, DITTO_OP_SOFTMAX, x, y));
    axis = norm_axis(axis, x->ndim);
    if (axis < 0 || axis >= x->ndim)
        return bad_arg(be, DITTO_OP_SOFTMAX, "axis out of range");
    if (!ditto_tensor_same_shape(x, y))
        return bad_shape(be, DITTO_OP_SOFTMAX, "x and y differ", x, y);
    DittoSoftmaxParams p = { axis };
    CALL(DITTO_OP_SOFTMAX, x, y, be->ops.softmax(be, &p, x, y));
}

int ditto_op_reduce(DittoBackend *be, DittoReduceKind kind, int axis, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_REDUCE, reduce);
    DITTO_TRY(check_xy(be, DITTO_OP_REDUCE, x, y));
    axis = norm_axis(axis, x->ndim);
    if (axis < 0 || axis >= x->ndim || (unsigned)kind >= DITTO_REDUCE_COUNT)
        return bad_arg(be, DITTO_OP_REDUCE, "axis or kind out of range");
    if (y->ndim != x->ndim)
        return bad_shape(be, DITTO_OP_REDUCE, "y must keep the reduced axis", x, y);
    for (int i = 0; i < x->ndim; i++)
        if (y->shape[i] != (i == axis ? 1 : x->shape[i]))
            return bad_shape(be, DITTO_OP_REDUCE, "y shape", x, y);
    DittoReduceParams p = { kind, axis };
    CALL(DITTO_OP_REDUCE, x, y, be->ops.reduce(be, &p, x, y));
}

int ditto_op_matmul(DittoBackend *be, const DittoMatmulParams *p, const DittoTensor *a, const DittoTensor *b, DittoTensor *c)
{
    NEED(DITTO_OP_MATMUL, matmul);
    DITTO_TRY(check_dense(be, DITTO_OP_MATMUL, 3, (const char *const[]){ "a", "b", "c" }, (const DittoTensor *const[]){ a, b, c }));
    if (a->ndim < 2 || b->ndim < 2 || c->ndim < 2 || a->ndim != c->ndim || b->ndim != c->ndim)
        return bad_shape(be, DITTO_OP_MATMUL, "a, b and c need the same rank >= 2", a, b);
    int n = c->ndim;
    int64_t M = p->trans_a ? a->shape[n - 1] : a->shape[n - 2];
    int64_t K = p->trans_a ? a->shape[n - 2] : a->shape[n - 1];
    int64_t Kb = p->trans_b ? b->shape[n - 1] : b->shape[n - 2];
    int64_t N = p->trans_b ? b->shape[n - 2] : b->shape[n - 1];
    if (K != Kb)
        return bad_shape(be, DITTO_OP_MATMUL, "inner dimensions differ", a, b);
    if (c->shape[n - 2] != M || c->shape[n - 1] != N)
        return bad_shape(be, DITTO_OP_MATMUL, "c shape", a, c);
    for (int i = 0; i < n - 2; i++) {
        if ((a->shape[i] != c->shape[i] && a->shape[i] != 1) || (b->shape[i] != c->shape[i] && b->shape[i] != 1))
            return bad_shape(be, DITTO_OP_MATMUL, "batch dims do not broadcast to c", a, c);
    }
    CALL_W(DITTO_OP_MATMUL, a, b, c, be->ops.matmul(be, p, a, b, c));
}

int ditto_op_linear(DittoBackend *be, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y)
{
    return ditto_op_linear_ex(be, NULL, x, w, bias, y);
}

int ditto_op_linear_ex(DittoBackend *be, const DittoLinearParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y)
{
    static const DittoLinearParams defaults = { 0 };
    if (!p)
        p = &defaults;
    NEED(DITTO_OP_LINEAR, linear);
    DITTO_TRY(check_dense(be, DITTO_OP_LINEAR, 3, (const char *const[]){ "x", "w", "y" }, (const DittoTensor *const[]){ x, w, y }));
    if (w->ndim != 2 || x->ndim < 1 || y->ndim != x->ndim)
        return bad_shape(be, DITTO_OP_LINEAR, "w must be (out, in) and y the rank of x", x, w);
    if (x->shape[x->ndim - 1] != w->shape[1])
        return bad_shape(be, DITTO_OP_LINEAR, "x last dim != w in", x, w);
    for (int i = 0; i < x->ndim - 1; i++)
        if (y->shape[i] != x->shape[i])
            return bad_shape(be, DITTO_OP_LINEAR, "y leading dims", x, y);
    if (y->shape[y->ndim - 1] != w->shape[0])
        return bad_shape(be, DITTO_OP_LINEAR, "y last dim != w out", y, w);
    DITTO_TRY(check_vec(be, DITTO_OP_LINEAR, "bias", bias, w->shape[0]));
    CALL_W(DITTO_OP_LINEAR, x, w, y, be->ops.linear(be, p, x, w, bias, y));
}

static int conv_dims(const DittoConvParams *p, int i, int *s, int *d)
{
    *s = p->stride[i] ? p->stride[i] : 1;
    *d = p->dilation[i] ? p->dilation[i] : 1;
    return 0;
}

int ditto_conv_out_shape(const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w, int64_t *shape)
{
    if (p->nhwc) {   /* (N,spatial...,C) -> (N,out...,O), 2-D or 3-D: the NCHW rule on x's shape read channels-last */
        const int nd = x->ndim;
        if (nd != 4 && nd != 5)
            return DITTO_ERR_SHAPE;
        DittoConvParams q = *p;
        q.nhwc = false;
        DittoTensor xl = *x;
        xl.shape[1] = x->shape[nd - 1];
        for (int i = 2; i < nd; i++)
            xl.shape[i] = x->shape[i - 1];
        int64_t s[5];
        DITTO_TRY(ditto_conv_out_shape(&q, &xl, w, s));
        shape[0] = s[0];
        for (int i = 2; i < nd; i++)
            shape[i - 1] = s[i];
        shape[nd - 1] = s[1];
        return 0;
    }
    int ns = x->ndim - 2;
    if (ns < 1 || ns > 3 || w->ndim != x->ndim)
        return DITTO_ERR_SHAPE;
    int g = p->groups ? p->groups : 1;
    if (g < 1 || x->shape[1] % g || w->shape[0] % g || w->shape[1] * g != x->shape[1])
        return DITTO_ERR_SHAPE;
    shape[0] = x->shape[0];
    shape[1] = w->shape[0];
    for (int i = 0; i < ns; i++) {
        int s, d;
        conv_dims(p, i, &s, &d);
        if (s < 1 || d < 1 || p->pad_begin[i] < 0 || p->pad_end[i] < 0)
            return DITTO_ERR_INVAL;
        int64_t span = (int64_t)d * (w->shape[2 + i] - 1) + 1;
        int64_t in = x->shape[2 + i] + p->pad_begin[i] + p->pad_end[i];
        if (in < span)
            return DITTO_ERR_SHAPE;
        shape[2 + i] = (in - span) / s + 1;
    }
    return 0;
}

int ditto_op_conv(DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y)
{
    NEED(DITTO_OP_CONV, conv);
    DITTO_TRY(check_float(be, DITTO_OP_CONV, "x", x));
    DITTO_TRY(check_float(be, DITTO_OP_CONV, "w", w));
    DITTO_TRY(check_float(be, DITTO_OP_CONV, "y", y));
    DITTO_TRY(check_contig(be, DITTO_OP_CONV, "x", x));
    if (!ditto_tensor_is_contiguous(w) && !ditto_tensor_is_channels_last(w))
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op conv: w %s must be contiguous or channels-last", SHAPE(w));
    DITTO_TRY(check_contig(be, DITTO_OP_CONV, "y", y));
    if (p->y_first && (!p->nhwc || p->accumulate))
        return bad_arg(be, DITTO_OP_CONV, "y_first needs nhwc and no accumulate");
    int64_t shape[DITTO_MAX_DIMS];
    int rc = ditto_conv_out_shape(p, x, w, shape);
    if (rc < 0)
        return bad_shape(be, DITTO_OP_CONV, "x and w (or params) do not form a convolution", x, w);
    if (p->y_first) {   /* (N,out...,O) -> (N,O,out...) */
        const int64_t o = shape[x->ndim - 1];
        memmove(shape + 2, shape + 1, sizeof(int64_t) * (size_t)(x->ndim - 2));
        shape[1] = o;
    }
    if (y->ndim != x->ndim || memcmp(shape, y->shape, sizeof(int64_t) * (size_t)x->ndim)) {
        DittoTensor want = ditto_tensor(NULL, y->dtype, x->ndim, shape);
        return bad_shape(be, DITTO_OP_CONV, "y shape (got, expected)", y, &want);
    }
    DITTO_TRY(check_vec(be, DITTO_OP_CONV, "bias", bias, w->shape[0]));
    CALL_W(DITTO_OP_CONV, x, w, y, be->ops.conv(be, p, x, w, bias, y));
}

static int check_norm_common(DittoBackend *be, DittoOp op, const DittoTensor *x, DittoTensor *y)
{
    DITTO_TRY(check_xy(be, op, x, y));
    if (!ditto_tensor_same_shape(x, y))
        return bad_shape(be, op, "x and y differ", x, y);
    return 0;
}

int ditto_op_batch_norm(DittoBackend *be, float eps, const DittoTensor *x, const DittoTensor *mean, const DittoTensor *var, const DittoTensor *w, const DittoTensor *b, DittoTensor *y)
{
    NEED(DITTO_OP_BATCH_NORM, batch_norm);
    DITTO_TRY(check_norm_common(be, DITTO_OP_BATCH_NORM, x, y));
    if (x->ndim < 2)
        return bad_shape(be, DITTO_OP_BATCH_NORM, "x needs (N, C, ...)", x, NULL);
    int64_t C = x->shape[1];
    if (!mean || !var)
        return bad_arg(be, DITTO_OP_BATCH_NORM, "running mean and var are required");
    DITTO_TRY(check_vec(be, DITTO_OP_BATCH_NORM, "mean", mean, C));
    DITTO_TRY(check_vec(be, DITTO_OP_BATCH_NORM, "var", var, C));
    DITTO_TRY(check_vec(be, DITTO_OP_BATCH_NORM, "weight", w, C));
    DITTO_TRY(check_vec(be, DITTO_OP_BATCH_NORM, "bias", b, C));
    DittoNormParams p = { .eps = eps };
    CALL(DITTO_OP_BATCH_NORM, x, y, be->ops.batch_norm(be, &p, x, mean, var, w, b, y));
}

int ditto_op_instance_norm(DittoBackend *be, float eps, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b, DittoTensor *y)
{
    NEED(DITTO_OP_INSTANCE_NORM, instance_norm);
    DITTO_TRY(check_norm_common(be, DITTO_OP_INSTANCE_NORM, x, y));
    if (x->ndim < 3)
        return bad_shape(be, DITTO_OP_INSTANCE_NORM, "x needs (N, C, spatial...)", x, NULL);
    DITTO_TRY(check_vec(be, DITTO_OP_INSTANCE_NORM, "weight", w, x->shape[1]));
    DITTO_TRY(check_vec(be, DITTO_OP_INSTANCE_NORM, "bias", b, x->shape[1]));
    DittoNormParams p = { .eps = eps };
    CALL(DITTO_OP_INSTANCE_NORM, x, y, be->ops.instance_norm(be, &p, x, w, b, y));
}

int ditto_op_spade_norm(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *x, const DittoTensor *gb, const DittoTensor *bias,
                        DittoTensor *y)
{
    NEED(DITTO_OP_SPADE_NORM, spade_norm);
    DITTO_TRY(check_xy(be, DITTO_OP_SPADE_NORM, x, y));
    if (x->ndim < 3)
        return bad_shape(be, DITTO_OP_SPADE_NORM, p->nhwc ? "x needs (N, spatial..., C)" : "x needs (N, C, spatial...)", x, NULL);
    const int cax = p->nhwc ? x->ndim - 1 : 1;   /* channel axis */
    /* y's spatial dims: x's, or (2-D only) integer multiples of them (x read nearest-upsampled) */
    bool ok = y->ndim == x->ndim && y->shape[0] == x->shape[0] && y->shape[cax] == x->shape[cax], up = false;
    for (int i = 1; ok && i < x->ndim; i++) {
        if (i == cax || y->shape[i] == x->shape[i])
            continue;
        up = true;
        ok = x->shape[i] > 0 && y->shape[i] % x->shape[i] == 0;
    }
    if (!ok || (up && x->ndim != 4))
        return bad_shape(be, DITTO_OP_SPADE_NORM, "x and y differ (other than by integer 2-D upsampling factors)", x, y);
    DITTO_TRY(check_float(be, DITTO_OP_SPADE_NORM, "gb", gb));
    DITTO_TRY(check_contig(be, DITTO_OP_SPADE_NORM, "gb", gb));
    const int64_t k = p->gamma_only ? 1 : 2;   /* gb's channels per channel of x: gamma (and beta) */
    ok = gb->ndim == y->ndim;
    for (int i = 0; ok && i < y->ndim; i++)
        ok = gb->shape[i] == (i == cax ? k * y->shape[i] : y->shape[i]);
    if (!ok)
        return bad_shape(be, DITTO_OP_SPADE_NORM,
                         p->gamma_only ? (p->nhwc ? "gb needs (N, spatial of y, C)" : "gb needs (N, C, spatial of y)")
                                       : (p->nhwc ? "gb needs (N, spatial of y, 2C)" : "gb needs (N, 2C, spatial of y)"),
                         y, gb);
    if (gb->data == y->data)
        return bad_arg(be, DITTO_OP_SPADE_NORM, "y must not alias gb");
    DITTO_TRY(check_vec(be, DITTO_OP_SPADE_NORM, "bias", bias, k * x->shape[cax]));
    CALL(DITTO_OP_SPADE_NORM, x, y, be->ops.spade_norm(be, p, x, gb, bias, y));
}

/* Bytes from t's first element to just past its last (strides not negative); 0 when empty. */
static size_t span_bytes(const DittoTensor *t)
{
    if (ditto_tensor_numel(t) == 0)
        return 0;
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++)
        last += (t->shape[i] - 1) * t->stride[i];
    return (size_t)(last + 1) * ditto_dtype_size(t->dtype);
}

/* Whether the address ranges of a and b (strides not negative) meet. */
static bool overlaps(const DittoTensor *a, const DittoTensor *b)
{
    const char *pa = a->data, *pb = b->data;
    const size_t na = span_bytes(a), nb = span_bytes(b);
    return na && nb && pa < pb + nb && pb < pa + na;
}

/* A channels-last (N, H, W, C) slice of channels of a wider contiguous (N, H, W, lda): strides (H W lda, W lda, lda, 1), lda >= C. */
static bool is_channel_slice(const DittoTensor *t)
{
    if (t->ndim != 4)
        return false;
    const int64_t lda = t->stride[2];
    return t->stride[3] == 1 && lda >= t->shape[3] && t->stride[1] == t->shape[2] * lda && t->stride[0] == t->shape[1] * t->stride[1];
}

/*
 * spade_conv's argument rule (ops.h) with dtypes and devices: NULL when the
 * arguments fit, else what is wrong (*code the error, *t1, *t2 the tensors
 * to name, or NULL).
 */
static const char *spade_conv_problem(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w,
                                      const DittoTensor *bias, const DittoTensor *x, const DittoTensor *y, int *code, const DittoTensor **t1,
                                      const DittoTensor **t2)
{
    const DittoTensor *all[] = { a, w, bias, x, y };
    *code = DITTO_ERR_INVAL;
    *t1 = *t2 = NULL;
    if (!p->nhwc)
        return "channels-last only (p->nhwc)";
    for (int i = 0; i < 5; i++)
        if (all[i] && (all[i]->device != be->device || !is_float(be, all[i])))
            return "a tensor is on the wrong device or not a float tensor of this backend";
    if ((!ditto_tensor_is_contiguous(a) && !is_channel_slice(a)) || !ditto_tensor_is_contiguous(x) || !ditto_tensor_is_contiguous(y) ||
        (bias && !ditto_tensor_is_contiguous(bias)) || (!ditto_tensor_is_contiguous(w) && !ditto_tensor_is_channels_last(w)))
        return "a contiguous or a channel slice of a wider channels-last tensor, x, y and bias contiguous, w contiguous or channels-last";
    *code = DITTO_ERR_SHAPE;
    *t1 = a, *t2 = y;
    if (a->ndim != 4 || y->ndim != 4 || x->ndim != 4 || w->ndim != 4)
        return "a, w, x and y need 4 dims";
    const int64_t N = y->shape[0], H = y->shape[1], W = y->shape[2], C = y->shape[3], K = p->gamma_only ? 1 : 2;
    if (a->shape[0] != N || a->shape[1] != H || a->shape[2] != W)
        return "a needs (N, H, W, Ca) of y's (N, H, W, C)";
    *t1 = w;
    if (w->shape[0] != K * C || w->shape[1] != a->shape[3] || w->shape[2] != 3 || w->shape[3] != 3)
        return p->gamma_only ? "w needs (C, Ca, 3, 3) (gamma only)" : "w needs (2C, Ca, 3, 3)";
    *t1 = x;
    if (x->shape[0] != N || x->shape[3] != C || x->shape[1] <= 0 || x->shape[2] <= 0 || H % x->shape[1] || W % x->shape[2])
        return "x needs (N, H / fh, W / fw, C) for integer fh, fw";
    if (bias && ditto_tensor_numel(bias) != K * C) {
        *t1 = bias, *t2 = NULL;
        return p->gamma_only ? "bias needs C elements (gamma only)" : "bias needs 2C elements";
    }
    *code = DITTO_ERR_INVAL;
    *t1 = *t2 = NULL;
    if (overlaps(y, a) || overlaps(y, x))
        return "y must not alias a or x";
    return NULL;
}

int ditto_op_spade_conv(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w, const DittoTensor *bias,
                        const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_SPADE_CONV, spade_conv);
    int code;
    const DittoTensor *t1, *t2;
    const char *what = spade_conv_problem(be, p, a, w, bias, x, y, &code, &t1, &t2);
    if (what && code == DITTO_ERR_SHAPE && t1)
        return bad_shape(be, DITTO_OP_SPADE_CONV, what, t1, t2);
    if (what)
        return bad_arg(be, DITTO_OP_SPADE_CONV, what);
    CALL_W(DITTO_OP_SPADE_CONV, a, w, y, be->ops.spade_conv(be, p, a, w, bias, x, y));
}

bool ditto_op_spade_conv_fused(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w, const DittoTensor *bias,
                               const DittoTensor *x, const DittoTensor *y)
{
    int code;
    const DittoTensor *t1, *t2;
    return be->ops.spade_conv && be->ops.spade_conv_fused && !spade_conv_problem(be, p, a, w, bias, x, y, &code, &t1, &t2) &&
           be->ops.spade_conv_fused(be, p, a, w, bias, x, y);
}

int ditto_op_layer_norm(DittoBackend *be, float eps, bool channels_first, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b, DittoTensor *y)
{
    NEED(DITTO_OP_LAYER_NORM, layer_norm);
    DITTO_TRY(check_norm_common(be, DITTO_OP_LAYER_NORM, x, y));
    if (x->ndim < 1 || (channels_first && x->ndim < 2))
        return bad_shape(be, DITTO_OP_LAYER_NORM, "x rank", x, NULL);
    int64_t C = channels_first ? x->shape[1] : x->shape[x->ndim - 1];
    DITTO_TRY(check_vec(be, DITTO_OP_LAYER_NORM, "weight", w, C));
    DITTO_TRY(check_vec(be, DITTO_OP_LAYER_NORM, "bias", b, C));
    DittoNormParams p = { .eps = eps, .channels_first = channels_first };
    CALL(DITTO_OP_LAYER_NORM, x, y, be->ops.layer_norm(be, &p, x, w, b, y));
}

int ditto_op_group_norm(DittoBackend *be, int groups, float eps, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b, DittoTensor *y)
{
    NEED(DITTO_OP_GROUP_NORM, group_norm);
    DITTO_TRY(check_norm_common(be, DITTO_OP_GROUP_NORM, x, y));
    if (x->ndim < 2 || groups < 1 || x->shape[1] % groups)
        return bad_shape(be, DITTO_OP_GROUP_NORM, "x (N, C, ...) with C divisible by groups", x, NULL);
    DITTO_TRY(check_vec(be, DITTO_OP_GROUP_NORM, "weight", w, x->shape[1]));
    DITTO_TRY(check_vec(be, DITTO_OP_GROUP_NORM, "bias", b, x->shape[1]));
    DittoNormParams p = { .eps = eps, .groups = groups };
    CALL(DITTO_OP_GROUP_NORM, x, y, be->ops.group_norm(be, &p, x, w, b, y));
}

int ditto_op_upsample_nearest(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_UPSAMPLE_NEAREST, upsample_nearest);
    DITTO_TRY(check_xy(be, DITTO_OP_UPSAMPLE_NEAREST, x, y));
    if (x->ndim < 3 || x->ndim > 5 || y->ndim != x->ndim || x->shape[0] != y->shape[0] || x->shape[1] != y->shape[1])
        return bad_shape(be, DITTO_OP_UPSAMPLE_NEAREST, "x (N,C,*) and y (N,C,*) with 1-3 spatial dims", x, y);
    for (int i = 2; i < x->ndim; i++)
        if (x->shape[i] < 1 || y->shape[i] < 1)
            return bad_shape(be, DITTO_OP_UPSAMPLE_NEAREST, "empty spatial dim", x, y);
    CALL(DITTO_OP_UPSAMPLE_NEAREST, x, y, be->ops.upsample_nearest(be, x, y));
}

int ditto_pool_out_shape(const DittoPoolParams *p, const DittoTensor *x, int64_t *shape)
{
    int ns = x->ndim - 2;
    if (ns < 1 || ns > 3)
        return DITTO_ERR_SHAPE;
    shape[0] = x->shape[0];
    shape[1] = x->shape[1];
    for (int i = 0; i < ns; i++) {
        int k = p->kernel[i], s = p->stride[i] ? p->stride[i] : k;
        if (k < 1 || s < 1 || p->pad_begin[i] < 0 || p->pad_end[i] < 0 || p->pad_begin[i] >= k || p->pad_end[i] >= k)
            return DITTO_ERR_INVAL;
        int64_t in = x->shape[2 + i] + p->pad_begin[i] + p->pad_end[i] - k;
        if (in < 0)
            return DITTO_ERR_SHAPE;
        int64_t o = (p->ceil_mode ? (in + s - 1) / s : in / s) + 1;
        /* PyTorch/ONNX: the last window must start inside the input or left padding */
        if (p->ceil_mode && (o - 1) * s >= x->shape[2 + i] + p->pad_begin[i])
            o--;
        shape[2 + i] = o;
    }
    return 0;
}

int ditto_op_pool(DittoBackend *be, const DittoPoolParams *p, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_POOL, pool);
    DITTO_TRY(check_xy(be, DITTO_OP_POOL, x, y));
    int64_t shape[DITTO_MAX_DIMS];
    if (ditto_pool_out_shape(p, x, shape) < 0)
        return bad_shape(be, DITTO_OP_POOL, "x does not fit the pooling window", x, NULL);
    if (y->ndim != x->ndim || memcmp(shape, y->shape, sizeof(int64_t) * (size_t)x->ndim))
        return bad_shape(be, DITTO_OP_POOL, "y shape", x, y);
    CALL(DITTO_OP_POOL, x, y, be->ops.pool(be, p, x, y));
}

static int shuffle_shapes(DittoBackend *be, int r, const DittoTensor *x, const DittoTensor *y)
{
    if (r < 1 || x->ndim != 4 || y->ndim != 4 || x->shape[1] % ((int64_t)r * r) || y->shape[0] != x->shape[0] ||
        y->shape[1] != x->shape[1] / ((int64_t)r * r) || y->shape[2] != x->shape[2] * r || y->shape[3] != x->shape[3] * r)
        return bad_shape(be, DITTO_OP_PIXEL_SHUFFLE, "x (N, C r^2, H, W) -> y (N, C, H r, W r)", x, y);
    return 0;
}

int ditto_op_pixel_shuffle(DittoBackend *be, int r, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_PIXEL_SHUFFLE, pixel_shuffle);
    DITTO_TRY(check_xy(be, DITTO_OP_PIXEL_SHUFFLE, x, y));
    DITTO_TRY(shuffle_shapes(be, r, x, y));
    const DittoShuffleParams p = { r, { DITTO_UNARY_IDENTITY, 0.0f, 0.0f } };
    CALL(DITTO_OP_PIXEL_SHUFFLE, x, y, be->ops.pixel_shuffle(be, &p, x, y));
}

int ditto_op_pixel_shuffle_act(DittoBackend *be, const DittoShuffleParams *p, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_PIXEL_SHUFFLE, pixel_shuffle);
    DITTO_TRY(check_float(be, DITTO_OP_PIXEL_SHUFFLE, "x", x));
    DITTO_TRY(check_float(be, DITTO_OP_PIXEL_SHUFFLE, "y", y));
    DITTO_TRY(check_contig(be, DITTO_OP_PIXEL_SHUFFLE, "y", y));
    DITTO_TRY(shuffle_shapes(be, p->factor, x, y));
    if ((unsigned)p->act.kind >= (unsigned)DITTO_UNARY_COUNT)
        return bad_arg(be, DITTO_OP_PIXEL_SHUFFLE, "unknown activation");
    CALL(DITTO_OP_PIXEL_SHUFFLE, x, y, be->ops.pixel_shuffle(be, p, x, y));
}

int ditto_op_grid_sample(DittoBackend *be, bool align_corners, const DittoTensor *x, const DittoTensor *grid, DittoTensor *y)
{
    NEED(DITTO_OP_GRID_SAMPLE, grid_sample);
    DITTO_TRY(check_float(be, DITTO_OP_GRID_SAMPLE, "x", x));
    DITTO_TRY(check_float(be, DITTO_OP_GRID_SAMPLE, "y", y));
    DITTO_TRY(check_contig(be, DITTO_OP_GRID_SAMPLE, "x", x));
    DITTO_TRY(check_contig(be, DITTO_OP_GRID_SAMPLE, "grid", grid));
    DITTO_TRY(check_contig(be, DITTO_OP_GRID_SAMPLE, "y", y));
    if (grid->dtype != DITTO_F32 || grid->device != be->device)
        return bad_arg(be, DITTO_OP_GRID_SAMPLE, "grid must be float32 on the backend's device");
    int ns = x->ndim - 2;
    if ((ns != 2 && ns != 3) || grid->ndim != x->ndim || grid->shape[x->ndim - 1] != ns || grid->shape[0] != x->shape[0])
        return bad_shape(be, DITTO_OP_GRID_SAMPLE, "x (N,C,[D,]H,W) and grid (N,[Do,]Ho,Wo,2|3)", x, grid);
    if (y->ndim != x->ndim || y->shape[0] != x->shape[0] || y->shape[1] != x->shape[1])
        return bad_shape(be, DITTO_OP_GRID_SAMPLE, "y shape", x, y);
    for (int i = 0; i < ns; i++)
        if (y->shape[2 + i] != grid->shape[1 + i])
            return bad_shape(be, DITTO_OP_GRID_SAMPLE, "y spatial dims != grid dims", y, grid);
    DittoGridSampleParams p = { align_corners };
    CALL(DITTO_OP_GRID_SAMPLE, x, y, be->ops.grid_sample(be, &p, x, grid, y));
}

/* float32 tensor of exactly this shape, contiguous, on the backend's device (NULL passes when optional) */
static int check_f32_shape(DittoBackend *be, DittoOp op, const char *name, const DittoTensor *t, int ndim, const int64_t *shape, bool optional)
{
    if (!t)
        return optional ? 0 : bad_arg(be, op, "a required tensor is NULL");
    DITTO_TRY(check_float(be, op, name, t));
    DITTO_TRY(check_contig(be, op, name, t));
    if (t->dtype != DITTO_F32)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: %s must be float32", ditto_op_name(op), name);
    DittoTensor want = ditto_tensor(NULL, DITTO_F32, ndim, shape);
    if (!ditto_tensor_same_shape(t, &want))
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "op %s: %s has shape %s, expected %s", ditto_op_name(op), name, SHAPE(t), SHAPE(&want));
    return 0;
}

/* The grid (D,H,W,3) and keypoints (N,K,3) of motion_input / motion_deform; D, H, W, N, K out. */
static int check_motion(DittoBackend *be, DittoOp op, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d,
                        const DittoTensor *kp_s, int64_t *dhw, int64_t *N, int64_t *K)
{
    if (!p || !grid || !kp_d || !kp_s)
        return DITTO_ERR_INVAL;
    if (!(p->variance > 0.0) || !isfinite(p->variance))
        return bad_arg(be, op, "the Gaussian variance must be positive and finite");
    if (grid->ndim != 4 || kp_d->ndim != 3)
        return bad_shape(be, op, "grid (D,H,W,3) and kp_d (N,K,3)", grid, kp_d);
    DITTO_TRY(check_f32_shape(be, op, "grid", grid, 4, (const int64_t[]){ grid->shape[0], grid->shape[1], grid->shape[2], 3 }, false));
    DITTO_TRY(check_f32_shape(be, op, "kp_d", kp_d, 3, (const int64_t[]){ kp_d->shape[0], kp_d->shape[1], 3 }, false));
    DITTO_TRY(check_f32_shape(be, op, "kp_s", kp_s, 3, kp_d->shape, false));
    for (int i = 0; i < 3; i++)
        dhw[i] = grid->shape[i];
    *N = kp_d->shape[0];
    *K = kp_d->shape[1];
    if (dhw[0] < 1 || dhw[1] < 1 || dhw[2] < 1 || *N < 1)
        return bad_shape(be, op, "grid and keypoints must not be empty", grid, kp_d);
    return 0;
}

/* motion_input's y (5-D): contiguous, or channels-last (channel stride 1, positions evenly apart, no two elements at one address) */
static bool motion_y_layout(const DittoTensor *y)
{
    if (ditto_tensor_is_contiguous(y))
        return true;
    const int64_t *s = y->stride, *n = y->shape;
    return s[1] == 1 && s[4] >= n[1] && s[3] == n[4] * s[4] && s[2] == n[3] * s[3] && s[0] >= n[2] * s[2];
}

int ditto_op_motion_input(DittoBackend *be, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s,
                          const DittoTensor *feat, DittoTensor *y, DittoTensor *motion)
{
    NEED(DITTO_OP_MOTION_INPUT, motion_input);
    int64_t dhw[3] = { 0, 0, 0 }, N = 0, K = 0;
    DITTO_TRY(check_motion(be, DITTO_OP_MOTION_INPUT, p, grid, kp_d, kp_s, dhw, &N, &K));
    if (!feat || !y)
        return DITTO_ERR_INVAL;
    DITTO_TRY(check_dense(be, DITTO_OP_MOTION_INPUT, 1, (const char *const[]){ "feat" }, (const DittoTensor *const[]){ feat }));
    DITTO_TRY(check_float(be, DITTO_OP_MOTION_INPUT, "y", y));
    if (feat->ndim != 5 || feat->shape[0] != N || feat->shape[1] < 1 || feat->shape[2] != dhw[0] || feat->shape[3] != dhw[1] ||
        feat->shape[4] != dhw[2])
        return bad_shape(be, DITTO_OP_MOTION_INPUT, "feat (N,c,D,H,W) against grid (D,H,W,3)", feat, grid);
    const int64_t ys[5] = { N, (K + 1) * (feat->shape[1] + 1), dhw[0], dhw[1], dhw[2] };
    DittoTensor want = ditto_tensor(NULL, y->dtype, 5, ys);
    if (!ditto_tensor_same_shape(y, &want))
        return bad_shape(be, DITTO_OP_MOTION_INPUT, "y must be (N,(K+1)(c+1),D,H,W)", y, &want);
    if (!motion_y_layout(y))
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: y %s must be contiguous or a channels-last view", ditto_op_name(DITTO_OP_MOTION_INPUT),
                          SHAPE(y));
    DITTO_TRY(check_f32_shape(be, DITTO_OP_MOTION_INPUT, "motion", motion, 6, (const int64_t[]){ N, K + 1, dhw[0], dhw[1], dhw[2], 3 }, true));
    CALL(DITTO_OP_MOTION_INPUT, feat, y, be->ops.motion_input(be, p, grid, kp_d, kp_s, feat, y, motion));
}

int ditto_op_motion_deform(DittoBackend *be, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s,
                           const DittoTensor *logits, DittoTensor *deformation, DittoTensor *mask)
{
    NEED(DITTO_OP_MOTION_DEFORM, motion_deform);
    int64_t dhw[3] = { 0, 0, 0 }, N = 0, K = 0;
    DITTO_TRY(check_motion(be, DITTO_OP_MOTION_DEFORM, p, grid, kp_d, kp_s, dhw, &N, &K));
    if (!logits || !deformation)
        return DITTO_ERR_INVAL;
    DITTO_TRY(check_dense(be, DITTO_OP_MOTION_DEFORM, 1, (const char *const[]){ "logits" }, (const DittoTensor *const[]){ logits }));
    const int64_t ls[5] = { N, K + 1, dhw[0], dhw[1], dhw[2] };
    DittoTensor want = ditto_tensor(NULL, logits->dtype, 5, ls);
    if (!ditto_tensor_same_shape(logits, &want))
        return bad_shape(be, DITTO_OP_MOTION_DEFORM, "logits must be (N,K+1,D,H,W)", logits, &want);
    DITTO_TRY(check_f32_shape(be, DITTO_OP_MOTION_DEFORM, "deformation", deformation, 5, (const int64_t[]){ N, dhw[0], dhw[1], dhw[2], 3 }, false));
    DITTO_TRY(check_f32_shape(be, DITTO_OP_MOTION_DEFORM, "mask", mask, 5, ls, true));
    CALL(DITTO_OP_MOTION_DEFORM, logits, deformation, be->ops.motion_deform(be, p, grid, kp_d, kp_s, logits, deformation, mask));
}

int ditto_op_concat(DittoBackend *be, int axis, int n, const DittoTensor *const *xs, DittoTensor *y)
{
    NEED(DITTO_OP_CONCAT, concat);
    DITTO_TRY(check_contig(be, DITTO_OP_CONCAT, "y", y));
    if (n < 1)
        return bad_arg(be, DITTO_OP_CONCAT, "no inputs");
    axis = norm_axis(axis, y->ndim);
    if (axis < 0 || axis >= y->ndim)
        return bad_arg(be, DITTO_OP_CONCAT, "axis out of range");
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const DittoTensor *x = xs[i];
        if (x->ndim != y->ndim || x->dtype != y->dtype || x->device != be->device)
            return bad_shape(be, DITTO_OP_CONCAT, "input rank/dtype differs from y", x, y);
        for (int d = 0; d < y->ndim; d++)
            if (d != axis && x->shape[d] != y->shape[d])
                return bad_shape(be, DITTO_OP_CONCAT, "inputs differ outside the axis", x, y);
        total += x->shape[axis];
    }
    if (total != y->shape[axis])
        return bad_shape(be, DITTO_OP_CONCAT, "sum of input sizes along the axis != y", xs[0], y);
    CALL(DITTO_OP_CONCAT, xs[0], y, be->ops.concat(be, axis, n, xs, y));
}

int ditto_op_attention(DittoBackend *be, float scale, const DittoTensor *q, const DittoTensor *k, const DittoTensor *v, const DittoTensor *mask, DittoTensor *y)
{
    const DittoAttentionParams p = { .scale = scale };
    return ditto_op_attention_ex(be, &p, q, k, v, mask, y);
}

int ditto_op_attention_ex(DittoBackend *be, const DittoAttentionParams *ap, const DittoTensor *q, const DittoTensor *k, const DittoTensor *v,
                          const DittoTensor *mask, DittoTensor *y)
{
    static const DittoAttentionParams defaults = { 0 };
    if (!ap)
        ap = &defaults;
    NEED(DITTO_OP_ATTENTION, attention);
    DITTO_TRY(check_float(be, DITTO_OP_ATTENTION, "q", q));
    DITTO_TRY(check_float(be, DITTO_OP_ATTENTION, "k", k));
    DITTO_TRY(check_float(be, DITTO_OP_ATTENTION, "v", v));
    DITTO_TRY(check_float(be, DITTO_OP_ATTENTION, "y", y));
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || y->ndim != 4)
        return bad_shape(be, DITTO_OP_ATTENTION, "q, k, v, y must be (B, H, L, D)", q, k);
    for (int i = 0; i < 4; i++)
        if (y->shape[i] > 1 && y->stride[i] == 0)
            return bad_arg(be, DITTO_OP_ATTENTION, "y has a broadcast (stride 0) dimension");
    if (k->shape[0] != q->shape[0] || k->shape[1] != q->shape[1] || k->shape[3] != q->shape[3] ||
        v->shape[0] != q->shape[0] || v->shape[1] != q->shape[1] || v->shape[2] != k->shape[2])
        return bad_shape(be, DITTO_OP_ATTENTION, "q/k/v mismatch", q, v);
    if (y->shape[0] != q->shape[0] || y->shape[1] != q->shape[1] || y->shape[2] != q->shape[2] || y->shape[3] != v->shape[3])
        return bad_shape(be, DITTO_OP_ATTENTION, "y shape", q, y);
    if (mask) {
        DITTO_TRY(check_float(be, DITTO_OP_ATTENTION, "mask", mask));
        if (mask->ndim > 4)
            return bad_shape(be, DITTO_OP_ATTENTION, "mask rank > 4", mask, NULL);
        const int64_t full[4] = { q->shape[0], q->shape[1], q->shape[2], k->shape[2] };
        for (int i = 0; i < mask->ndim; i++) {
            int64_t d = mask->shape[i], f = full[4 - mask->ndim + i];
            if (d != f && d != 1)
                return bad_shape(be, DITTO_OP_ATTENTION, "mask does not broadcast to (B,H,Lq,Lk)", mask, q);
        }
    }
    CALL(DITTO_OP_ATTENTION, q, y, be->ops.attention(be, ap, q, k, v, mask, y));
}

int ditto_op_rotary(DittoBackend *be, int64_t pos_offset, const DittoTensor *x, const DittoTensor *freqs, DittoTensor *y)
{
    NEED(DITTO_OP_ROTARY, rotary);
    DITTO_TRY(check_xy(be, DITTO_OP_ROTARY, x, y));
    if (x->ndim != 3 || !ditto_tensor_same_shape(x, y) || x->shape[2] % 2)
        return bad_shape(be, DITTO_OP_ROTARY, "x and y must be (B, L, C) with even C", x, y);
    if (!freqs || freqs->dtype != DITTO_F32 || ditto_tensor_numel(freqs) != x->shape[2] / 2)
        return bad_shape(be, DITTO_OP_ROTARY, "freqs must be float32 (C/2)", x, freqs);
    DittoRotaryParams p = { pos_offset };
    CALL(DITTO_OP_ROTARY, x, y, be->ops.rotary(be, &p, x, freqs, y));
}

static int check_image(DittoBackend *be, DittoOp op, const DittoTensor *x, DittoTensor *y)
{
    DITTO_TRY(check_contig(be, op, "x", x));
    DITTO_TRY(check_contig(be, op, "y", y));
    if ((x->dtype != DITTO_U8 && x->dtype != DITTO_F32) || y->dtype != x->dtype)
        return bad_arg(be, op, "images must be uint8 or float32, x and y alike");
    if ((x->ndim != 3 && x->ndim != 4) || y->ndim != x->ndim)
        return bad_shape(be, op, "images are (H,W,C) or (N,H,W,C)", x, y);
    int c = x->ndim - 1;
    if (x->shape[c] != y->shape[c] || (x->ndim == 4 && x->shape[0] != y->shape[0]))
        return bad_shape(be, op, "x and y differ in channels or batch", x, y);
    if (x->shape[c - 1] < 1 || x->shape[c - 2] < 1 || y->shape[c - 1] < 1 || y->shape[c - 2] < 1)
        return bad_shape(be, op, "empty image", x, y);
    return 0;
}

int ditto_op_warp_affine(DittoBackend *be, const DittoWarpAffineParams *p, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_WARP_AFFINE, warp_affine);
    DITTO_TRY(check_image(be, DITTO_OP_WARP_AFFINE, x, y));
    double det = p->m[0] * p->m[4] - p->m[1] * p->m[3];
    if (det == 0 || det != det)
        return bad_arg(be, DITTO_OP_WARP_AFFINE, "matrix is singular");
    CALL(DITTO_OP_WARP_AFFINE, x, y, be->ops.warp_affine(be, p, x, y));
}

/* t is a contiguous uint8 / float32 tensor of exactly this shape on be's device. */
static int check_plane(DittoBackend *be, DittoOp op, const char *name, const DittoTensor *t, DittoDType dt, int ndim, const int64_t *shape)
{
    bool ok = t->dtype == dt && t->ndim == ndim && t->device == be->device && ditto_tensor_is_contiguous(t);
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[DITTO_SHAPE_STR_MAX];
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "op %s: %s is %s %s, expected contiguous %s %s on the %s backend", ditto_op_name(op), name,
                          ditto_dtype_name(t->dtype), SHAPE(t), ditto_dtype_name(dt), ditto_shape_str(shape, ndim, want, sizeof want), be->name);
    }
    return 0;
}

int ditto_op_mask_blend(DittoBackend *be, const DittoBlendParams *p, const DittoTensor *mask, const DittoTensor *img, const DittoTensor *src,
                        DittoTensor *dst)
{
    NEED(DITTO_OP_MASK_BLEND, mask_blend);
    if (src->ndim != 3)
        return bad_shape(be, DITTO_OP_MASK_BLEND, "src needs (H,W,3)", src, NULL);
    const int64_t H = src->shape[0], W = src->shape[1];
    DITTO_TRY(check_plane(be, DITTO_OP_MASK_BLEND, "src", src, DITTO_U8, 3, (const int64_t[]){ H, W, 3 }));
    DITTO_TRY(check_plane(be, DITTO_OP_MASK_BLEND, "dst", dst, DITTO_U8, 3, (const int64_t[]){ H, W, 3 }));
    if (mask->ndim != 3)
        return bad_shape(be, DITTO_OP_MASK_BLEND, "mask needs (h,w,1)", mask, NULL);
    const int64_t h = mask->shape[0], w = mask->shape[1];
    DITTO_TRY(check_plane(be, DITTO_OP_MASK_BLEND, "mask", mask, DITTO_F32, 3, (const int64_t[]){ h, w, 1 }));
    DITTO_TRY(check_plane(be, DITTO_OP_MASK_BLEND, "img", img, DITTO_F32, 3, (const int64_t[]){ h, w, 3 }));
    if (p->y0 < 0 || p->y0 > p->y1 || p->y1 > H || p->y1 > h || p->x0 < 0 || p->x0 > p->x1 || p->x1 > W || p->x1 > w)
        return bad_arg(be, DITTO_OP_MASK_BLEND, "box outside the frame or the mask");
    if (p->y0 == p->y1 || p->x0 == p->x1)
        return 0;
    CALL(DITTO_OP_MASK_BLEND, img, dst, be->ops.mask_blend(be, p, mask, img, src, dst));
}

int ditto_op_rgb_to_yuv420(DittoBackend *be, const DittoTensor *x, DittoTensor *y, DittoTensor *u, DittoTensor *v)
{
    NEED(DITTO_OP_RGB_TO_YUV420, rgb_to_yuv420);
    if (x->ndim != 3 || x->shape[0] < 1 || x->shape[1] < 1 || x->shape[0] > INT32_MAX / 4 || x->shape[1] > INT32_MAX / 4)
        return bad_shape(be, DITTO_OP_RGB_TO_YUV420, "x needs (H,W,3), H, W >= 1", x, NULL);
    const int64_t H = x->shape[0], W = x->shape[1], ch = (H + 1) / 2, cw = (W + 1) / 2;
    DITTO_TRY(check_plane(be, DITTO_OP_RGB_TO_YUV420, "x", x, DITTO_U8, 3, (const int64_t[]){ H, W, 3 }));
    DITTO_TRY(check_plane(be, DITTO_OP_RGB_TO_YUV420, "y", y, DITTO_U8, 2, (const int64_t[]){ H, W }));
    DITTO_TRY(check_plane(be, DITTO_OP_RGB_TO_YUV420, "u", u, DITTO_U8, 2, (const int64_t[]){ ch, cw }));
    DITTO_TRY(check_plane(be, DITTO_OP_RGB_TO_YUV420, "v", v, DITTO_U8, 2, (const int64_t[]){ ch, cw }));
    CALL(DITTO_OP_RGB_TO_YUV420, x, y, be->ops.rgb_to_yuv420(be, x, y, u, v));
}

/* t is uint8 of exactly this shape on be's device, row-major but for dim 0, whose items do not overlap. */
static int check_frames(DittoBackend *be, const char *name, const DittoTensor *t, int ndim, const int64_t *shape)
{
    bool ok = t->dtype == DITTO_U8 && t->ndim == ndim && t->device == be->device;
    int64_t inner = 1;
    for (int i = ndim - 1; ok && i >= 0; i--) {
        ok = t->shape[i] == shape[i] && (i == 0 ? t->shape[0] == 1 || t->stride[0] >= inner : t->stride[i] == inner);
        inner *= shape[i];
    }
    if (!ok) {
        char want[DITTO_SHAPE_STR_MAX];
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "op paste_yuv: %s is %s %s, expected uint8 %s (rows contiguous) on the %s backend", name,
                          ditto_dtype_name(t->dtype), SHAPE(t), ditto_shape_str(shape, ndim, want, sizeof want), be->name);
    }
    return 0;
}

void ditto_paste_blocks(const DittoPasteItem *it, bool box_only, int64_t ch, int64_t cw, int64_t b[4])
{
    if (!box_only) {
        b[0] = b[2] = 0;
        b[1] = ch;
        b[3] = cw;
    } else if (it->y0 == it->y1 || it->x0 == it->x1) {
        b[0] = b[1] = b[2] = b[3] = 0;
    } else {   /* every block with a pixel in the box */
        b[0] = it->y0 / 2;
        b[1] = (it->y1 + 1) / 2;
        b[2] = it->x0 / 2;
        b[3] = (it->x1 + 1) / 2;
    }
}

int ditto_op_paste_yuv(DittoBackend *be, const DittoPasteParams *p, const DittoTensor *mask, const DittoTensor *render, const DittoTensor *src,
                       DittoTensor *rgb, DittoTensor *y, DittoTensor *u, DittoTensor *v)
{
    const DittoOp op = DITTO_OP_PASTE_YUV;
    NEED(op, paste_yuv);
    if (!p || !p->items || !mask || !render || !src || !y || !u || !v)
        return bad_arg(be, op, "missing argument");
    if (render->ndim != 4 || render->shape[0] < 1 || render->shape[1] != 3 || (render->dtype != DITTO_F32 && render->dtype != DITTO_F16))
        return bad_shape(be, op, "render needs (N,3,h,w) float32 or float16", render, NULL);
    const int64_t N = render->shape[0], h = render->shape[2], w = render->shape[3];
    DITTO_TRY(check_plane(be, op, "render", render, render->dtype, 4, (const int64_t[]){ N, 3, h, w }));
    DITTO_TRY(check_plane(be, op, "mask", mask, DITTO_F32, 3, (const int64_t[]){ h, w, 1 }));
    if ((src->ndim != 3 && src->ndim != 4) || src->shape[src->ndim - 1] != 3 || (src->ndim == 4 && src->shape[0] != N))
        return bad_shape(be, op, "src needs (H,W,3) or (N,H,W,3) like the render's N", src, render);
    const int o = src->ndim - 3;
    const int64_t H = src->shape[o], W = src->shape[o + 1], ch = (H + 1) / 2, cw = (W + 1) / 2;
    if (h < 1 || w < 1 || H < 1 || W < 1 || H > INT32_MAX / 4 || W > INT32_MAX / 4)
        return bad_shape(be, op, "empty or oversized image", render, src);
    DITTO_TRY(check_plane(be, op, "src", src, DITTO_U8, src->ndim, src->shape));
    if (rgb)
        DITTO_TRY(check_frames(be, "rgb", rgb, 4, (const int64_t[]){ N, H, W, 3 }));
    DITTO_TRY(check_frames(be, "y", y, 3, (const int64_t[]){ N, H, W }));
    DITTO_TRY(check_frames(be, "u", u, 3, (const int64_t[]){ N, ch, cw }));
    DITTO_TRY(check_frames(be, "v", v, 3, (const int64_t[]){ N, ch, cw }));
    for (int64_t i = 0; i < N; i++) {
        const DittoPasteItem *it = &p->items[i];
        double det = it->m[0] * it->m[4] - it->m[1] * it->m[3];
        if (det == 0 || det != det)
            return bad_arg(be, op, "a matrix is singular");
        if (it->y0 < 0 || it->y0 > it->y1 || it->y1 > H || it->x0 < 0 || it->x0 > it->x1 || it->x1 > W)
            return bad_arg(be, op, "a box lies outside the frame");
    }
    CALL(op, render, y, be->ops.paste_yuv(be, p, mask, render, src, rgb, y, u, v));
}

int ditto_op_resize_area(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_RESIZE_AREA, resize_area);
    DITTO_TRY(check_image(be, DITTO_OP_RESIZE_AREA, x, y));
    CALL(DITTO_OP_RESIZE_AREA, x, y, be->ops.resize_area(be, x, y));
}

int ditto_op_resize_bilinear(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_RESIZE_BILINEAR, resize_bilinear);
    DITTO_TRY(check_image(be, DITTO_OP_RESIZE_BILINEAR, x, y));
    CALL(DITTO_OP_RESIZE_BILINEAR, x, y, be->ops.resize_bilinear(be, x, y));
}

/* ---- ONNX-style ops ---- */

static int check_dev(DittoBackend *be, DittoOp op, const char *name, const DittoTensor *t)
{
    if (t->device != be->device)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op %s: %s is on the wrong device for the %s backend", ditto_op_name(op), name, be->name);
    if (ditto_dtype_size(t->dtype) == 0)
        return bad_arg(be, op, "invalid dtype");
    return 0;
}

/* t broadcasts to y (NumPy, right-aligned). */
static bool broadcasts_to(const DittoTensor *t, const DittoTensor *y)
{
    if (t->ndim > y->ndim)
        return false;
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = t->shape[i], f = y->shape[y->ndim - t->ndim + i];
        if (d != f && d != 1)
            return false;
    }
    return true;
}

int ditto_op_gather(DittoBackend *be, int axis, const DittoTensor *x, const DittoTensor *idx, DittoTensor *y)
{
    NEED(DITTO_OP_GATHER, gather);
    DITTO_TRY(check_dev(be, DITTO_OP_GATHER, "x", x));
    DITTO_TRY(check_dev(be, DITTO_OP_GATHER, "idx", idx));
    DITTO_TRY(check_dev(be, DITTO_OP_GATHER, "y", y));
    DITTO_TRY(check_contig(be, DITTO_OP_GATHER, "x", x));
    DITTO_TRY(check_contig(be, DITTO_OP_GATHER, "idx", idx));
    DITTO_TRY(check_contig(be, DITTO_OP_GATHER, "y", y));
    if (idx->dtype != DITTO_I64 || x->dtype != y->dtype)
        return bad_arg(be, DITTO_OP_GATHER, "idx must be int64 and y the dtype of x");
    axis = norm_axis(axis, x->ndim);
    if (axis < 0 || axis >= x->ndim)
        return bad_arg(be, DITTO_OP_GATHER, "axis out of range");
    if (y->ndim != x->ndim - 1 + idx->ndim)
        return bad_shape(be, DITTO_OP_GATHER, "y rank != x rank - 1 + idx rank", x, y);
    for (int i = 0; i < y->ndim; i++) {
        int64_t want = i < axis ? x->shape[i] : i < axis + idx->ndim ? idx->shape[i - axis] : x->shape[i - idx->ndim + 1];
        if (y->shape[i] != want)
            return bad_shape(be, DITTO_OP_GATHER, "y shape", x, y);
    }
    if (x->shape[axis] == 0 && ditto_tensor_numel(idx) > 0)
        return bad_shape(be, DITTO_OP_GATHER, "indices into an empty axis", x, idx);
    CALL(DITTO_OP_GATHER, x, y, be->ops.gather(be, axis, x, idx, y));
}

int ditto_op_where(DittoBackend *be, const DittoTensor *cond, const DittoTensor *a, const DittoTensor *b, DittoTensor *y)
{
    NEED(DITTO_OP_WHERE, where);
    DITTO_TRY(check_dev(be, DITTO_OP_WHERE, "cond", cond));
    DITTO_TRY(check_dev(be, DITTO_OP_WHERE, "a", a));
    DITTO_TRY(check_dev(be, DITTO_OP_WHERE, "b", b));
    DITTO_TRY(check_dev(be, DITTO_OP_WHERE, "y", y));
    DITTO_TRY(check_contig(be, DITTO_OP_WHERE, "y", y));
    if ((cond->dtype != DITTO_BOOL && cond->dtype != DITTO_U8) || a->dtype != y->dtype || b->dtype != y->dtype)
        return bad_arg(be, DITTO_OP_WHERE, "cond must be bool or uint8, a, b and y one dtype");
    if (!broadcasts_to(cond, y) || !broadcasts_to(a, y) || !broadcasts_to(b, y))
        return bad_shape(be, DITTO_OP_WHERE, "cond, a, b do not broadcast to y", a, y);
    int nd = cond->ndim > a->ndim ? cond->ndim : a->ndim;
    nd = b->ndim > nd ? b->ndim : nd;
    if (nd != y->ndim)
        return bad_shape(be, DITTO_OP_WHERE, "y rank differs from the broadcast rank", a, y);
    for (int i = 0; i < y->ndim; i++) {
        /* y must be the broadcast shape, not larger */
        int64_t d = 1;
        const DittoTensor *t3[3] = { cond, a, b };
        for (int k = 0; k < 3; k++) {
            int j = i - (y->ndim - t3[k]->ndim);
            if (j >= 0 && t3[k]->shape[j] != 1)
                d = t3[k]->shape[j];
        }
        if (y->shape[i] != d)
            return bad_shape(be, DITTO_OP_WHERE, "y is not the broadcast shape", a, y);
    }
    CALL(DITTO_OP_WHERE, a, y, be->ops.where(be, cond, a, b, y));
}

int ditto_op_pad(DittoBackend *be, const DittoPadParams *p, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_PAD, pad);
    DITTO_TRY(check_dev(be, DITTO_OP_PAD, "x", x));
    DITTO_TRY(check_dev(be, DITTO_OP_PAD, "y", y));
    DITTO_TRY(check_contig(be, DITTO_OP_PAD, "x", x));
    DITTO_TRY(check_contig(be, DITTO_OP_PAD, "y", y));
    if (x->dtype != y->dtype || (unsigned)p->mode > DITTO_PAD_WRAP)
        return bad_arg(be, DITTO_OP_PAD, "x and y differ in dtype, or unknown mode");
    if (x->ndim != y->ndim)
        return bad_shape(be, DITTO_OP_PAD, "x and y differ in rank", x, y);
    for (int i = 0; i < x->ndim; i++) {
        if (y->shape[i] != x->shape[i] + p->begin[i] + p->end[i] || y->shape[i] < 0)
            return bad_shape(be, DITTO_OP_PAD, "y.shape != begin + x.shape + end", x, y);
        if (p->mode != DITTO_PAD_CONSTANT && x->shape[i] == 0 && y->shape[i] > 0)
            return bad_shape(be, DITTO_OP_PAD, "reflect/edge/wrap padding of an empty axis", x, y);
    }
    CALL(DITTO_OP_PAD, x, y, be->ops.pad(be, p, x, y));
}

void ditto_resize_params_default(DittoResizeParams *p)
{
    memset(p, 0, sizeof *p);
    p->mode = DITTO_RESIZE_NEAREST;
    p->coord = DITTO_RESIZE_HALF_PIXEL;
    p->nearest = DITTO_NEAREST_ROUND_PREFER_FLOOR;
    p->cubic_a = -0.75f;
    for (int i = 0; i < DITTO_MAX_DIMS; i++)
        p->roi_end[i] = 1.0f;
}

int ditto_op_resize(DittoBackend *be, const DittoResizeParams *p, const DittoTensor *x, DittoTensor *y)
{
    NEED(DITTO_OP_RESIZE, resize);
    DITTO_TRY(check_float(be, DITTO_OP_RESIZE, "x", x));
    DITTO_TRY(check_float(be, DITTO_OP_RESIZE, "y", y));
    DITTO_TRY(check_contig(be, DITTO_OP_RESIZE, "x", x));
    DITTO_TRY(check_contig(be, DITTO_OP_RESIZE, "y", y));
    if ((unsigned)p->mode > DITTO_RESIZE_CUBIC || (unsigned)p->coord > DITTO_RESIZE_TF_CROP_AND_RESIZE ||
        (unsigned)p->nearest > DITTO_NEAREST_SIMPLE)
        return bad_arg(be, DITTO_OP_RESIZE, "unknown mode, coordinate transform or nearest mode");
    if (x->ndim < 1 || x->ndim != y->ndim)
        return bad_shape(be, DITTO_OP_RESIZE, "x and y need the same rank >= 1", x, y);
    for (int i = 0; i < x->ndim; i++)
        if (x->shape[i] < 1 && y->shape[i] > 0)
            return bad_shape(be, DITTO_OP_RESIZE, "resize from an empty axis", x, y);
    CALL(DITTO_OP_RESIZE, x, y, be->ops.resize(be, p, x, y));
}

int ditto_op_prelu(DittoBackend *be, const DittoTensor *x, const DittoTensor *slope, DittoTensor *y)
{
    NEED(DITTO_OP_PRELU, prelu);
    DITTO_TRY(check_float(be, DITTO_OP_PRELU, "x", x));
    DITTO_TRY(check_float(be, DITTO_OP_PRELU, "slope", slope));
    DITTO_TRY(check_float(be, DITTO_OP_PRELU, "y", y));
    DITTO_TRY(check_contig(be, DITTO_OP_PRELU, "x", x));
    DITTO_TRY(check_contig(be, DITTO_OP_PRELU, "y", y));
    if (!ditto_tensor_same_shape(x, y))
        return bad_shape(be, DITTO_OP_PRELU, "x and y differ", x, y);
    if (!broadcasts_to(slope, x))
        return bad_shape(be, DITTO_OP_PRELU, "slope does not broadcast to x", slope, x);
    CALL(DITTO_OP_PRELU, x, y, be->ops.prelu(be, x, slope, y));
}

int ditto_conv_transpose_out_shape(const DittoConvTransposeParams *p, const DittoTensor *x, const DittoTensor *w, int64_t *shape)
{
    int ns = x->ndim - 2;
    if (ns < 1 || ns > 3 || w->ndim != x->ndim)
        return DITTO_ERR_SHAPE;
    int g = p->conv.groups ? p->conv.groups : 1;
    if (g < 1 || x->shape[1] % g || w->shape[0] != x->shape[1])
        return DITTO_ERR_SHAPE;
    shape[0] = x->shape[0];
    shape[1] = w->shape[1] * g;
    for (int i = 0; i < ns; i++) {
        int s, d;
        conv_dims(&p->conv, i, &s, &d);
        int op = p->output_padding[i];
        if (s < 1 || d < 1 || op < 0 || (op >= s && op >= d) || p->conv.pad_begin[i] < 0 || p->conv.pad_end[i] < 0)
            return DITTO_ERR_INVAL;
        int64_t o = (x->shape[2 + i] - 1) * s - p->conv.pad_begin[i] - p->conv.pad_end[i] + (int64_t)d * (w->shape[2 + i] - 1) + op + 1;
        if (x->shape[2 + i] < 1 || o < 1)
            return DITTO_ERR_SHAPE;
        shape[2 + i] = o;
    }
    return 0;
}

int ditto_op_conv_transpose(DittoBackend *be, const DittoConvTransposeParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, DittoTensor *y)
{
    NEED(DITTO_OP_CONV_TRANSPOSE, conv_transpose);
    if (p->conv.nhwc || p->conv.relu || p->conv.accumulate)
        return bad_arg(be, DITTO_OP_CONV_TRANSPOSE, "nhwc, relu and accumulate are conv params only");
    DITTO_TRY(check_float(be, DITTO_OP_CONV_TRANSPOSE, "x", x));
    DITTO_TRY(check_float(be, DITTO_OP_CONV_TRANSPOSE, "w", w));
    DITTO_TRY(check_float(be, DITTO_OP_CONV_TRANSPOSE, "y", y));
    DITTO_TRY(check_contig(be, DITTO_OP_CONV_TRANSPOSE, "x", x));
    DITTO_TRY(check_contig(be, DITTO_OP_CONV_TRANSPOSE, "w", w));
    DITTO_TRY(check_contig(be, DITTO_OP_CONV_TRANSPOSE, "y", y));
    int64_t shape[DITTO_MAX_DIMS];
    if (ditto_conv_transpose_out_shape(p, x, w, shape) < 0)
        return bad_shape(be, DITTO_OP_CONV_TRANSPOSE, "x and w (or params) do not form a transposed convolution", x, w);
    if (y->ndim != x->ndim || memcmp(shape, y->shape, sizeof(int64_t) * (size_t)x->ndim)) {
        DittoTensor want = ditto_tensor(NULL, y->dtype, x->ndim, shape);
        return bad_shape(be, DITTO_OP_CONV_TRANSPOSE, "y shape (got, expected)", y, &want);
    }
    DITTO_TRY(check_vec(be, DITTO_OP_CONV_TRANSPOSE, "bias", bias, shape[1]));
    CALL_W(DITTO_OP_CONV_TRANSPOSE, x, w, y, be->ops.conv_transpose(be, p, x, w, bias, y));
}

int ditto_op_film(DittoBackend *be, const DittoTensor *h, const DittoTensor *y, const DittoTensor *scale, const DittoTensor *shift, DittoTensor *out)
{
    NEED(DITTO_OP_FILM, film);
    DITTO_TRY(check_float(be, DITTO_OP_FILM, "h", h));
    DITTO_TRY(check_float(be, DITTO_OP_FILM, "y", y));
    DITTO_TRY(check_float(be, DITTO_OP_FILM, "scale", scale));
    DITTO_TRY(check_float(be, DITTO_OP_FILM, "shift", shift));
    DITTO_TRY(check_float(be, DITTO_OP_FILM, "out", out));
    DITTO_TRY(check_contig(be, DITTO_OP_FILM, "out", out));
    if (!ditto_tensor_same_shape(h, out) || !ditto_tensor_same_shape(y, out))
        return bad_shape(be, DITTO_OP_FILM, "h, y and out differ", h, ditto_tensor_same_shape(h, out) ? y : out);
    if (!broadcasts_to(scale, out))
        return bad_shape(be, DITTO_OP_FILM, "scale does not broadcast to out", scale, out);
    if (!broadcasts_to(shift, out))
        return bad_shape(be, DITTO_OP_FILM, "shift does not broadcast to out", shift, out);
    CALL(DITTO_OP_FILM, y, out, be->ops.film(be, h, y, scale, shift, out));
}

int ditto_op_ddim_step(DittoBackend *be, const DittoDdimStepParams *p, const DittoTensor *cond, const DittoTensor *uncond, const DittoTensor *x,
                       const DittoTensor *z, DittoTensor *x0, DittoTensor *eps, DittoTensor *x_next)
{
    NEED(DITTO_OP_DDIM_STEP, ddim_step);
    const DittoTensor *ins[4] = { cond, uncond, x, z };
    DittoTensor *outs[3] = { x0, eps, x_next };
    static const char *const in_names[4] = { "cond", "uncond", "x", "z" };
    static const char *const out_names[3] = { "x0", "eps", "x_next" };
    if (!cond || !uncond || (!x0 && !eps && !x_next))
        return bad_arg(be, DITTO_OP_DDIM_STEP, "cond, uncond and at least one output are required");
    if ((eps || x_next) && !x)
        return bad_arg(be, DITTO_OP_DDIM_STEP, "eps and x_next need x");
    if (x_next && !z)
        return bad_arg(be, DITTO_OP_DDIM_STEP, "x_next needs z");
    for (int i = 0; i < 4; i++) {
        if (!ins[i])
            continue;
        DITTO_TRY(check_float(be, DITTO_OP_DDIM_STEP, in_names[i], ins[i]));
        if (!ditto_tensor_same_shape(ins[i], cond))
            return bad_shape(be, DITTO_OP_DDIM_STEP, "inputs differ", cond, ins[i]);
    }
    for (int i = 0; i < 3; i++) {
        if (!outs[i])
            continue;
        DITTO_TRY(check_float(be, DITTO_OP_DDIM_STEP, out_names[i], outs[i]));
        DITTO_TRY(check_contig(be, DITTO_OP_DDIM_STEP, out_names[i], outs[i]));
        if (!ditto_tensor_same_shape(outs[i], cond))
            return bad_shape(be, DITTO_OP_DDIM_STEP, "an output differs from the inputs", cond, outs[i]);
    }
    const DittoTensor *first = x0 ? x0 : eps ? eps : x_next;
    CALL(DITTO_OP_DDIM_STEP, cond, first, be->ops.ddim_step(be, p, cond, uncond, x, z, x0, eps, x_next));
}

/* t of h's rank with each dim 1 or h's (broadcast to h). */
static bool bcast_same_rank(const DittoTensor *t, const DittoTensor *h)
{
    if (t->ndim != h->ndim)
        return false;
    for (int i = 0; i < h->ndim; i++)
        if (t->shape[i] != 1 && t->shape[i] != h->shape[i])
            return false;
    return true;
}

int ditto_op_layer_norm_rotary(DittoBackend *be, const DittoLnRotaryParams *p, DittoTensor *h, const DittoTensor *y, const DittoTensor *scale,
                               const DittoTensor *shift, const DittoTensor *w, const DittoTensor *b, const DittoTensor *freqs, DittoTensor *a, DittoTensor *ra)
{
    const DittoOp op = DITTO_OP_LAYER_NORM_ROTARY;
    NEED(op, layer_norm_rotary);
    if (!p || !h || (!a && !ra))
        return bad_arg(be, op, "params, h and at least one of a, ra are required");
    if (!!y != !!scale || !!y != !!shift)
        return bad_arg(be, op, "y, scale and shift go together (FiLM)");
    DITTO_TRY(check_dense(be, op, 3, (const char *const[]){ "h", "a", "ra" }, (const DittoTensor *const[]){ h, a, ra }));
    if (h->ndim < 2 || h->shape[h->ndim - 1] % 2)
        return bad_shape(be, op, "h must be (..., L, C) with even C", h, NULL);
    if ((a && !ditto_tensor_same_shape(a, h)) || (ra && !ditto_tensor_same_shape(ra, h)))
        return bad_shape(be, op, "a and ra must have h's shape", h, a && !ditto_tensor_same_shape(a, h) ? a : ra);
    if (y) {
        DITTO_TRY(check_float(be, op, "y", y));
        DITTO_TRY(check_float(be, op, "scale", scale));
        DITTO_TRY(check_float(be, op, "shift", shift));
        if (!ditto_tensor_same_shape(y, h))
            return bad_shape(be, op, "y and h differ", y, h);
        if (y->data == h->data)
            return bad_arg(be, op, "y must not be h (h is updated in place)");
        if (!bcast_same_rank(scale, h) || !bcast_same_rank(shift, h))
            return bad_shape(be, op, "scale and shift must have h's rank and broadcast to it", bcast_same_rank(scale, h) ? shift : scale, h);
    }
    const int64_t C = h->shape[h->ndim - 1];
    DITTO_TRY(check_vec(be, op, "weight", w, C));
    DITTO_TRY(check_vec(be, op, "bias", b, C));
    if (ra && (!freqs || freqs->dtype != DITTO_F32 || freqs->device != be->device || ditto_tensor_numel(freqs) != C / 2))
        return bad_shape(be, op, "freqs must be float32 (C/2) on the backend's device", h, freqs ? freqs : h);
    /* outputs apart from each other and from every input (same buffer start: the cheap check) */
    const void *ins[6] = { h->data, y ? y->data : NULL, scale ? scale->data : NULL, shift ? shift->data : NULL, w ? w->data : NULL, b ? b->data : NULL };
    for (int i = 0; i < 6; i++)
        if (ins[i] && ((a && a->data == ins[i]) || (ra && ra->data == ins[i])))
            return bad_arg(be, op, "a and ra must not alias the inputs");
    if (a && ra && a->data == ra->data)
        return bad_arg(be, op, "a and ra must not alias each other");
    CALL(op, h, a ? a : ra, be->ops.layer_norm_rotary(be, p, h, y, scale, shift, w, b, freqs, a, ra));
}
