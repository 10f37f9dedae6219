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
