#include "nn/blocks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

int ditto_nn_new(DittoArena *ws, DittoDType dt, DittoTensor *t, int ndim, const int64_t *shape)
{
    return ditto_arena_tensor(ws, dt, ndim, shape, t);
}

int ditto_nn_new_f32(DittoArena *ws, DittoTensor *t, int ndim, const int64_t *shape)
{
    return ditto_arena_tensor(ws, DITTO_F32, ndim, shape, t);
}

int ditto_nn_as_dtype(DittoBackend *be, DittoArena *ws, const DittoTensor *x, DittoDType dt, DittoTensor *out)
{
    if (x->dtype == dt) {
        *out = *x;
        return 0;
    }
    DITTO_TRY(ditto_arena_tensor(ws, dt, x->ndim, x->shape, out));
    return ditto_op_copy(be, x, out);
}

int ditto_nn_check_float(DittoBackend *be, const char *what, const char *name, const DittoTensor *t, DittoDType act)
{
    if ((t->dtype == DITTO_F32 || t->dtype == act) && t->device == be->device)
        return 0;
    if (t->device != be->device)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "%s: %s is not on the %s backend's device", what, name, be->name);
    if (act == DITTO_F32)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "%s: %s has dtype %s, expected float32", what, name, ditto_dtype_name(t->dtype));
    return ditto_fail(&be->log, DITTO_ERR_INVAL, "%s: %s has dtype %s, expected float32 or %s", what, name, ditto_dtype_name(t->dtype),
                      ditto_dtype_name(act));
}

DittoConvParams ditto_nn_conv_pad(int pad)
{
    DittoConvParams p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < 3; i++)
        p.pad_begin[i] = p.pad_end[i] = pad;
    return p;
}

int ditto_nn_batch_norm(DittoBackend *be, const DittoBatchNorm *bn, const DittoTensor *x, DittoTensor *y)
{
    return ditto_op_batch_norm(be, DITTO_BN_EPS, x, &bn->mean, &bn->var, &bn->weight, &bn->bias, y);
}

void ditto_nn_load_conv_bn(DittoLoader *l, DittoConvBn *b, int ns, int64_t out, int64_t in, const char *key)
{
    if (ns == 3)
        ditto_loader_get(l, &b->weight, DITTO_SHAPE(out, in, 3, 3, 3), "%s.conv.weight", key);
    else
        ditto_loader_get(l, &b->weight, DITTO_SHAPE(out, in, 3, 3), "%s.conv.weight", key);
    ditto_loader_get(l, &b->bias, DITTO_SHAPE(out), "%s.conv.bias", key);
    ditto_loader_get_bn(l, &b->norm, out, "%s.norm", key);
    b->folded = false;
}

void ditto_nn_load_conv_bn_folded(DittoLoader *l, DittoConvBn *b, int ns, int64_t out, int64_t in, const char *key)
{
    char cw[160], cb[160], bn[160];
    snprintf(cw, sizeof cw, "%s.conv.weight", key);
    snprintf(cb, sizeof cb, "%s.conv.bias", key);
    snprintf(bn, sizeof bn, "%s.norm", key);
    memset(&b->norm, 0, sizeof b->norm);
    if (ns == 3)
        ditto_loader_get_conv_bn(l, &b->weight, &b->bias, DITTO_SHAPE(out, in, 3, 3, 3), DITTO_BN_EPS, cw, cb, bn);
    else
        ditto_loader_get_conv_bn(l, &b->weight, &b->bias, DITTO_SHAPE(out, in, 3, 3), DITTO_BN_EPS, cw, cb, bn);
    b->folded = true;
}

int ditto_nn_conv_bn_act(DittoBackend *be, DittoArena *ws, const DittoConvParams *p, const DittoConvBn *b, DittoUnaryKind act, float alpha,
                         const DittoTensor *x, DittoTensor *y)
{
    if (b->folded) {
        DittoConvParams q = *p;
        q.relu = act == DITTO_UNARY_RELU;
        DITTO_TRY(ditto_op_conv(be, &q, x, &b->weight, &b->bias, y));
        return q.relu || act == DITTO_UNARY_IDENTITY ? 0 : ditto_op_act(be, act, alpha, y, y);
    }
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor t;
    int rc = ditto_arena_tensor(ws, y->dtype, y->ndim, y->shape, &t);
    if (rc == 0)
        rc = ditto_op_conv(be, p, x, &b->weight, &b->bias, &t);
    if (rc == 0)
        rc = ditto_nn_batch_norm(be, &b->norm, &t, y);
    if (rc == 0)
        rc = ditto_op_act(be, act, alpha, y, y);
    ditto_arena_release(ws, mark);
    return rc;
}

int ditto_nn_check_tensor(DittoBackend *be, const char *what, const char *name, const DittoTensor *t, int ndim, const int64_t *shape)
{
    bool ok = t && t->ndim == ndim && t->dtype == DITTO_F32 && t->device == be->device && ditto_tensor_is_contiguous(t);
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (ok)
        return 0;
    char want[DITTO_SHAPE_STR_MAX], have[DITTO_SHAPE_STR_MAX] = "(null)";
    if (t)
        ditto_shape_str(t->shape, t->ndim, have, sizeof have);
    return ditto_fail(&be->log, DITTO_ERR_SHAPE, "%s: %s is %s, expected a contiguous float32 %s on the %s backend", what, name, have,
                      ditto_shape_str(shape, ndim, want, sizeof want), be->name);
}

int ditto_nn_relayout(DittoBackend *be, const DittoTensor *x, bool to_last, DittoTensor *y)
{
    static const int last4[4] = { 0, 2, 3, 1 }, first4[4] = { 0, 3, 1, 2 }, last5[5] = { 0, 2, 3, 4, 1 }, first5[5] = { 0, 4, 1, 2, 3 };
    if (x->ndim != 4 && x->ndim != 5)
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "layout change: x needs 4 or 5 dims, got %d", x->ndim);
    const int *perm = x->ndim == 4 ? (to_last ? last4 : first4) : (to_last ? last5 : first5);
    DittoTensor v;
    DITTO_TRY(ditto_tensor_permute(x, perm, &v));
    return ditto_op_copy(be, &v, y);
}

/*
 * A copy from the broadcast view (L, h, H/h, w, W/w, C) of x, stride 0 on
 * the repeat axes (L: the leading dims). Rows of C elements whose bytes are
 * a multiple of 8 move as 8-byte elements (a raw copy either way).
 */
int ditto_nn_upsample_last(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    const int nd = x->ndim;
    bool ok = nd >= 3 && y->ndim == nd && ditto_tensor_is_contiguous(x) && ditto_tensor_is_contiguous(y) && y->dtype == x->dtype;
    int64_t L = 1;
    for (int i = 0; ok && i < nd - 3; i++) {
        ok = x->shape[i] == y->shape[i];
        L *= x->shape[i];
    }
    const int64_t h = ok ? x->shape[nd - 3] : 0, w = ok ? x->shape[nd - 2] : 0;
    const int64_t H = ok ? y->shape[nd - 3] : 0, W = ok ? y->shape[nd - 2] : 0;
    if (!ok || h < 1 || w < 1 || H % h || W % w || y->shape[nd - 1] != x->shape[nd - 1])
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "nearest upsampling (channels last) needs contiguous tensors and integer factors");
    int64_t C = x->shape[nd - 1];
    DittoDType dt = x->dtype;
    const size_t row = (size_t)C * ditto_dtype_size(dt);
    if (row % 8 == 0 && ((uintptr_t)x->data | (uintptr_t)y->data) % 8 == 0) {
        dt = DITTO_I64;
        C = (int64_t)(row / 8);
    }
    DittoTensor xv = ditto_tensor(x->data, dt, 6, (const int64_t[]){ L, h, H / h, w, W / w, C });
    DittoTensor yv = ditto_tensor(y->data, dt, 6, xv.shape);
    const int64_t xs[6] = { h * w * C, w * C, 0, C, 0, 1 };
    memcpy(xv.stride, xs, sizeof xs);
    xv.device = x->device;
    yv.device = y->device;
    return ditto_op_copy(be, &xv, &yv);
}

int ditto_nn_layout_forced(int set, const char *env, const char *first, const char *last, int *cache)
{
    if (set >= 0)
        return set > 0;
    if (*cache == -2) {
        const char *e = getenv(env);
        *cache = !e ? -1 : !strcmp(e, last) ? 1 : !strcmp(e, first) ? 0 : -1;
    }
    return *cache;
}

static int g_force_cl = -1;

void ditto_nn_force_conv_channels_last(int on)
{
    g_force_cl = on < 0 ? -1 : on > 0;
}

bool ditto_nn_conv_channels_last(const DittoBackend *be, DittoDType act)
{
    if (g_force_cl >= 0)
        return g_force_cl;
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("DITTO_CONV_WEIGHTS");
        env = !(e && !strcmp(e, "oihw"));
    }
    return env && be->device == DITTO_DEVICE_CUDA && act == DITTO_F16;
}
