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

/*
 * Output row 2q + r reads upsampled rows 2q + r - 1 + k (k = 0..2), i.e.
 * source row q + floor((r - 1 + k) / 2): window row t = that - q - r + 1 of
 * the 2x2 window starting at source row q + r - 1 (t in {0, 1}).
 */
static int phase_tap(int r, int k)
{
    const int num = r - 1 + k;   /* -1 .. 2 */
    const int d = num < 0 ? -1 : num / 2;
    return d - r + 1;
}

void ditto_nn_phase_weights(void *ctx, const float *w, float *pw)
{
    const DittoPhaseDims *d = ctx;
    for (int ry = 0; ry < 2; ry++)
    for (int rx = 0; rx < 2; rx++)
    for (int64_t o = 0; o < d->o; o++)
    for (int64_t c = 0; c < d->c; c++)
    for (int64_t z = 0; z < d->kd; z++) {
        double acc[2][2] = { { 0, 0 }, { 0, 0 } };
        const float *src = w + ((o * d->c + c) * d->kd + z) * 9;
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++)
                acc[phase_tap(ry, ky)][phase_tap(rx, kx)] += src[ky * 3 + kx];
        float *dst = pw + ((((int64_t)(2 * ry + rx) * d->o + o) * d->c + c) * d->kd + z) * 4;
        for (int t = 0; t < 4; t++)
            dst[t] = (float)acc[t / 2][t % 2];
    }
}

/* The 4-D case: p (B,h+1,w+1,4C) [channel slice] or (B,4C,h+1,w+1), y (B,2h,2w,C) or (B,C,2h,2w); bias along c_axis of the 6-D view. */
static int interleave_4d(DittoBackend *be, bool nhwc, const DittoTensor *p, const DittoTensor *bias, DittoTensor *y)
{
    const int64_t B = y->shape[0], h = y->shape[nhwc ? 1 : 2] / 2, w = y->shape[nhwc ? 2 : 3] / 2, C = y->shape[nhwc ? 3 : 1];
    const bool p_ok = nhwc ? p->stride[3] == 1 && p->stride[2] >= 4 * C && p->stride[1] == (w + 1) * p->stride[2] &&
                                 p->stride[0] == (h + 1) * p->stride[1]
                           : ditto_tensor_is_contiguous(p);
    if (y->shape[nhwc ? 1 : 2] % 2 || y->shape[nhwc ? 2 : 3] % 2 || p->shape[0] != B || p->shape[nhwc ? 3 : 1] != 4 * C ||
        p->shape[nhwc ? 1 : 2] != h + 1 || p->shape[nhwc ? 2 : 3] != w + 1 || !p_ok)
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "sub-pixel interleave: mismatched tensors");
    int64_t shape[6], st[6];
    if (nhwc) {
        const int64_t sw = p->stride[2], sh = p->stride[1];   /* 4C, (w+1) 4C when p is its own tensor */
        const int64_t sh6[6] = { B, h, 2, w, 2, C }, st6[6] = { p->stride[0], sh, sh + 2 * C, sw, sw + C, 1 };
        memcpy(shape, sh6, sizeof shape);
        memcpy(st, st6, sizeof st);
    } else {
        const int64_t sh = w + 1, sc = (h + 1) * sh;
        const int64_t sh6[6] = { B, C, h, 2, w, 2 }, st6[6] = { 4 * C * sc, sc, sh, sh + 2 * C * sc, 1, 1 + C * sc };
        memcpy(shape, sh6, sizeof shape);
        memcpy(st, st6, sizeof st);
    }
    DittoTensor pv = ditto_tensor(p->data, p->dtype, 6, shape), yv = ditto_tensor(y->data, y->dtype, 6, shape);
    memcpy(pv.stride, st, sizeof st);
    pv.device = p->device;
    yv.device = y->device;
    const DittoUnaryParams relu = { DITTO_UNARY_RELU, 0.0f, 0.0f };
    return ditto_op_bias_unary(be, &relu, nhwc ? 5 : 1, &pv, bias, &yv);
}

int ditto_nn_phase_interleave(DittoBackend *be, bool nhwc, const DittoTensor *p, const DittoTensor *bias, DittoTensor *y)
{
    const int nd = y->ndim;
    if ((nd != 4 && nd != 5) || p->ndim != nd || p->dtype != y->dtype || !ditto_tensor_is_contiguous(y) ||
        ditto_tensor_numel(bias) != y->shape[nhwc ? nd - 1 : 1] || (nd == 5 && !ditto_tensor_is_contiguous(p)))
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "sub-pixel interleave: mismatched tensors");
    if (nd == 4)
        return interleave_4d(be, nhwc, p, bias, y);
    if (p->shape[0] != y->shape[0] || p->shape[nhwc ? 1 : 2] != y->shape[nhwc ? 1 : 2])
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "sub-pixel interleave: mismatched tensors");
    const int64_t B = y->shape[0], D = y->shape[nhwc ? 1 : 2];
    if (nhwc) {   /* (B,D,..) as (B*D,..) */
        DittoTensor pv, yv;
        DITTO_TRY(ditto_tensor_reshape(p, DITTO_SHAPE(B * D, p->shape[2], p->shape[3], p->shape[4]), &pv));
        DITTO_TRY(ditto_tensor_reshape(y, DITTO_SHAPE(B * D, y->shape[2], y->shape[3], y->shape[4]), &yv));
        return interleave_4d(be, true, &pv, bias, &yv);
    }
    /*
     * (B,4C,D,h+1,w+1) -> (B,C,D,2h,2w): an item at a time, (C,D,h,2,w,2)
     * (batch and channel cannot share a view axis: the parity blocks lie
     * between an item's channels)
     */
    const int64_t C = y->shape[1], h = y->shape[3] / 2, w = y->shape[4] / 2;
    if (y->shape[3] % 2 || y->shape[4] % 2 || p->shape[1] != 4 * C || p->shape[3] != h + 1 || p->shape[4] != w + 1)
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "sub-pixel interleave: mismatched tensors");
    const int64_t sd = (h + 1) * (w + 1), sc = D * sd;
    const int64_t shape[6] = { C, D, h, 2, w, 2 }, st[6] = { sc, sd, w + 1, w + 1 + 2 * C * sc, 1, 1 + C * sc };
    const DittoUnaryParams relu = { DITTO_UNARY_RELU, 0.0f, 0.0f };
    const size_t es = ditto_dtype_size(y->dtype);
    for (int64_t b = 0; b < B; b++) {
        DittoTensor pv = ditto_tensor((char *)p->data + (size_t)(b * 4 * C * sc) * es, p->dtype, 6, shape);
        DittoTensor yv = ditto_tensor((char *)y->data + (size_t)(b * C * D * 4 * h * w) * es, y->dtype, 6, shape);
        memcpy(pv.stride, st, sizeof st);
        pv.device = p->device;
        yv.device = y->device;
        DITTO_TRY(ditto_op_bias_unary(be, &relu, 0, &pv, bias, &yv));
    }
    return 0;
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
