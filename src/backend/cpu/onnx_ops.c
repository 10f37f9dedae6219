/*
 * CPU oracle for the ops the ONNX executor needs beyond the native networks:
 * gather, where, pad (constant / reflect / edge / wrap on any axis), resize
 * (ONNX Resize: nearest, linear, cubic, every coordinate transform), prelu
 * and transposed convolution. Shapes and dtypes are checked by the front ends
 * in ops/ops.c. gather, where and pad move bytes, so they take any dtype;
 * resize, prelu and conv_transpose are float32.
 *
 * Broadcast operands are walked row by row: a row is the last axis of the
 * output, and each operand carries element strides (0 on broadcast axes).
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "core/log.h"
#include "ops/pad_map.h"

#define MAX_TASKS 1024

static int task_count(int64_t n)
{
    return n < 1 ? 1 : n < MAX_TASKS ? (int)n : MAX_TASKS;
}

static void task_range(int64_t n, int ntasks, int t, int64_t *lo, int64_t *hi)
{
    *lo = n * t / ntasks;
    *hi = n * (t + 1) / ntasks;
}

/* Element strides of t read as y's shape (right-aligned; 0 where t broadcasts). */
static void bcast_strides(const DittoTensor *t, const DittoTensor *y, int64_t *st)
{
    int off = y->ndim - t->ndim;
    for (int i = 0; i < y->ndim; i++) {
        int j = i - off;
        st[i] = (j >= 0 && t->shape[j] != 1) ? t->stride[j] : 0;
    }
}

/* Offset of row r (an index over every axis of shape but the last) under strides st. */
static int64_t row_offset(int64_t r, int ndim, const int64_t *shape, const int64_t *st)
{
    int64_t off = 0;
    for (int d = ndim - 2; d >= 0; d--) {
        int64_t i = r % shape[d];
        r /= shape[d];
        off += i * st[d];
    }
    return off;
}

/* ---- gather: y (outer, m, inner) = x (outer, n, inner) at idx (m) ---- */

typedef struct GatherCtx {
    const char *x;
    char *y;
    const int64_t *idx;
    int64_t outer, n, m;
    size_t inner_bytes;
    int ntasks;
} GatherCtx;

static void gather_task(void *arg, int t)
{
    const GatherCtx *g = arg;
    int64_t lo, hi;
    task_range(g->outer * g->m, g->ntasks, t, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t o = r / g->m, k = g->idx[r % g->m];
        if (k < 0)
            k += g->n;
        memcpy(g->y + (size_t)r * g->inner_bytes, g->x + (size_t)(o * g->n + k) * g->inner_bytes, g->inner_bytes);
    }
}

static int cpu_gather(DittoBackend *be, int axis, const DittoTensor *x, const DittoTensor *idx, DittoTensor *y)
{
    GatherCtx g = { .x = x->data, .y = y->data, .idx = idx->data, .outer = 1, .n = x->shape[axis] };
    int64_t inner = 1;
    for (int i = 0; i < axis; i++)
        g.outer *= x->shape[i];
    for (int i = axis + 1; i < x->ndim; i++)
        inner *= x->shape[i];
    g.m = ditto_tensor_numel(idx);
    g.inner_bytes = (size_t)inner * ditto_dtype_size(x->dtype);
    /* indices come from data: check them all before touching memory */
    for (int64_t j = 0; j < g.m; j++) {
        if (g.idx[j] < -g.n || g.idx[j] >= g.n)
            return ditto_fail(&be->log, DITTO_ERR_RANGE, "op gather: index %lld out of range for an axis of %lld",
                              (long long)g.idx[j], (long long)g.n);
    }
    if (g.outer * g.m == 0 || g.inner_bytes == 0)
        return 0;
    g.ntasks = task_count(g.outer * g.m / 64);
    ditto_pool_run(be->pool, g.ntasks, gather_task, &g);
    return 0;
}

/* ---- where ---- */

typedef struct WhereCtx {
    const uint8_t *c;
    const char *a, *b;
    char *y;
    int ndim;
    const int64_t *shape;
    int64_t sc[DITTO_MAX_DIMS], sa[DITTO_MAX_DIMS], sb[DITTO_MAX_DIMS];
    size_t es;
    int64_t rows;
    int ntasks;
} WhereCtx;

static void where_task(void *arg, int t)
{
    const WhereCtx *w = arg;
    int64_t lo, hi, n = w->shape[w->ndim - 1];
    int last = w->ndim - 1;
    task_range(w->rows, w->ntasks, t, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const uint8_t *c = w->c + row_offset(r, w->ndim, w->shape, w->sc);
        const char *a = w->a + (size_t)row_offset(r, w->ndim, w->shape, w->sa) * w->es;
        const char *b = w->b + (size_t)row_offset(r, w->ndim, w->shape, w->sb) * w->es;
        char *y = w->y + (size_t)(r * n) * w->es;
        for (int64_t i = 0; i < n; i++) {
            const char *src = c[i * w->sc[last]] ? a + (size_t)(i * w->sa[last]) * w->es : b + (size_t)(i * w->sb[last]) * w->es;
            memcpy(y + (size_t)i * w->es, src, w->es);
        }
    }
}

static int cpu_where(DittoBackend *be, const DittoTensor *cond, const DittoTensor *a, const DittoTensor *b, DittoTensor *y)
{
    if (ditto_tensor_numel(y) == 0)
        return 0;
    /* a rank-0 y is walked as one row of one element */
    DittoTensor yv = *y, cv = *cond, av = *a, bv = *b;
    if (yv.ndim == 0) {
        yv.ndim = 1;
        yv.shape[0] = 1;
        yv.stride[0] = 1;
    }
    WhereCtx w = { .c = cond->data, .a = a->data, .b = b->data, .y = y->data, .ndim = yv.ndim, .shape = yv.shape,
                   .es = ditto_dtype_size(y->dtype) };
    bcast_strides(&cv, &yv, w.sc);
    bcast_strides(&av, &yv, w.sa);
    bcast_strides(&bv, &yv, w.sb);
    w.rows = ditto_tensor_numel(&yv) / yv.shape[yv.ndim - 1];
    w.ntasks = task_count(ditto_tensor_numel(&yv) / 4096);
    ditto_pool_run(be->pool, w.ntasks, where_task, &w);
    return 0;
}

/* ---- pad ---- */

typedef struct PadCtx {
    const DittoPadParams *p;
    const char *x;
    char *y;
    int ndim;
    const int64_t *xs, *ys;
    int64_t xst[DITTO_MAX_DIMS];
    unsigned char value[8];
    size_t es;
    int64_t rows;
    int ntasks;
} PadCtx;

static void pad_fill(char *dst, const unsigned char *value, size_t es, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + (size_t)i * es, value, es);
}

static void pad_task(void *arg, int t)
{
    const PadCtx *c = arg;
    int last = c->ndim - 1;
    int64_t lo, hi, n = c->ys[last], nx = c->xs[last], b = c->p->begin[last];
    task_range(c->rows, c->ntasks, t, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        char *y = c->y + (size_t)(r * n) * c->es;
        int64_t rem = r, off = 0;
        bool outside = false;
        for (int d = last - 1; d >= 0; d--) {
            int64_t o = rem % c->ys[d];
            rem /= c->ys[d];
            int64_t i = ditto_pad_map(c->p->mode, o, c->p->begin[d], c->xs[d]);
            if (i < 0)
                outside = true;
            off += i * c->xst[d];
        }
        if (outside) {
            pad_fill(y, c->value, c->es, n);
            continue;
        }
        const char *x = c->x + (size_t)off * c->es;
        /* the part of the row inside x is one memcpy; the rest maps element by element */
        int64_t in0 = b > 0 ? b : 0, in1 = b + nx < n ? b + nx : n;
        if (in1 > in0)
            memcpy(y + (size_t)in0 * c->es, x + (size_t)(in0 - b) * c->es, (size_t)(in1 - in0) * c->es);
        for (int64_t o = 0; o < n; o++) {
            if (o >= in0 && o < in1) {
                o = in1 - 1;
                continue;
            }
            int64_t i = ditto_pad_map(c->p->mode, o, b, nx);
            if (i < 0)
                memcpy(y + (size_t)o * c->es, c->value, c->es);
            else
                memcpy(y + (size_t)o * c->es, x + (size_t)i * c->es, c->es);
        }
    }
}

static int cpu_pad(DittoBackend *be, const DittoPadParams *p, const DittoTensor *x, DittoTensor *y)
{
    if (ditto_tensor_numel(y) == 0)
        return 0;
    PadCtx c = { .p = p, .x = x->data, .y = y->data, .ndim = x->ndim, .xs = x->shape, .ys = y->shape,
                 .es = ditto_dtype_size(x->dtype) };
    if (c.es > sizeof c.value)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op pad: dtype %s", ditto_dtype_name(x->dtype));
    memset(c.value, 0, sizeof c.value);
    ditto_convert(c.value, x->dtype, &p->value, DITTO_F32, 1);
    if (x->ndim == 0) {
        memcpy(y->data, x->data, c.es);
        return 0;
    }
    int64_t s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        c.xst[d] = s;
        s *= x->shape[d];
    }
    c.rows = ditto_tensor_numel(y) / y->shape[y->ndim - 1];
    c.ntasks = task_count(ditto_tensor_numel(y) / 4096);
    ditto_pool_run(be->pool, c.ntasks, pad_task, &c);
    return 0;
}

/* ---- resize ---- */

typedef struct RzAxis {
    int64_t in, out;
    float scale;
    float roi0, roi1;
} RzAxis;

typedef struct Taps {
    int n;
    int64_t idx[4];
    float w[4];
} Taps;

/* ONNX coordinate transform in float32, as ONNX Runtime evaluates it. */
static float rz_coord(const DittoResizeParams *p, const RzAxis *a, int64_t o)
{
    float x = (float)o, s = a->scale, in = (float)a->in, out = (float)a->out;
    switch (p->coord) {
    case DITTO_RESIZE_HALF_PIXEL_SYMMETRIC: {
        float adj = out / (s * in);
        return in * 0.5f * (1.0f - adj) + (x + 0.5f) / s - 0.5f;
    }
    case DITTO_RESIZE_PYTORCH_HALF_PIXEL:
        return a->out > 1 ? (x + 0.5f) / s - 0.5f : 0.0f;
    case DITTO_RESIZE_ALIGN_CORNERS:
        return a->out == 1 ? 0.0f : x * (in - 1.0f) / (out - 1.0f);
    case DITTO_RESIZE_ASYMMETRIC:
        return x / s;
    case DITTO_RESIZE_TF_HALF_PIXEL_FOR_NN:
        return (x + 0.5f) / s;
    case DITTO_RESIZE_TF_CROP_AND_RESIZE:
        if (a->out > 1)
            return a->roi0 * (in - 1.0f) + x * (a->roi1 - a->roi0) * (in - 1.0f) / (out - 1.0f);
        return 0.5f * (a->roi0 + a->roi1) * (in - 1.0f);
    case DITTO_RESIZE_HALF_PIXEL:
    default:
        return (x + 0.5f) / s - 0.5f;
    }
}

static int64_t clampi(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static void cubic_coeffs(float t, float A, float *c)
{
    float t1 = t + 1.0f, u = 1.0f - t, u1 = u + 1.0f;
    c[0] = ((A * t1 - 5.0f * A) * t1 + 8.0f * A) * t1 - 4.0f * A;
    c[1] = ((A + 2.0f) * t - (A + 3.0f)) * t * t + 1.0f;
    c[2] = ((A + 2.0f) * u - (A + 3.0f)) * u * u + 1.0f;
    c[3] = ((A * u1 - 5.0f * A) * u1 + 8.0f * A) * u1 - 4.0f * A;
}

/* Taps of output index o along one axis; false when the point lies outside (tf_crop_and_resize). */
static bool rz_taps(const DittoResizeParams *p, const RzAxis *a, int64_t o, Taps *t)
{
    if (a->in == a->out && a->scale == 1.0f && p->coord != DITTO_RESIZE_TF_CROP_AND_RESIZE &&
        p->coord != DITTO_RESIZE_TF_HALF_PIXEL_FOR_NN) {
        /* every other transform maps o to itself at scale 1 */
        t->n = 1;
        t->idx[0] = o;
        t->w[0] = 1.0f;
        return true;
    }
    float x = rz_coord(p, a, o);
    int64_t last = a->in - 1;
    if (p->coord == DITTO_RESIZE_TF_CROP_AND_RESIZE && (x < 0.0f || x > (float)last))
        return false;
    if (p->mode == DITTO_RESIZE_NEAREST) {
        float f = floorf(x);
        int64_t i;
        switch (p->nearest) {
        case DITTO_NEAREST_FLOOR: i = (int64_t)f; break;
        case DITTO_NEAREST_CEIL: i = (int64_t)ceilf(x); break;
        case DITTO_NEAREST_SIMPLE: i = a->scale < 1.0f ? (int64_t)ceilf(x) : (int64_t)f; break;
        case DITTO_NEAREST_ROUND_PREFER_CEIL: i = x == f + 0.5f ? (int64_t)f + 1 : (int64_t)roundf(x); break;
        case DITTO_NEAREST_ROUND_PREFER_FLOOR:
        default: i = x == f + 0.5f ? (int64_t)f : (int64_t)roundf(x); break;
        }
        t->n = 1;
        t->idx[0] = clampi(i, 0, last);
        t->w[0] = 1.0f;
        return true;
    }
    if (p->mode == DITTO_RESIZE_LINEAR) {
        x = x < 0.0f ? 0.0f : x > (float)last ? (float)last : x;
        int64_t i0 = (int64_t)x;
        float f = x - (float)i0;
        t->idx[0] = i0;
        t->w[0] = 1.0f - f;
        t->n = 1;
        if (f > 0.0f && i0 < last) {
            t->idx[1] = i0 + 1;
            t->w[1] = f;
            t->n = 2;
        } else {
            t->w[0] = 1.0f;
        }
        return true;
    }
    /* cubic: 4 taps around floor(x), edge-clamped, or dropped and renormalised with exclude_outside */
    float f = floorf(x);
    int64_t i0 = (int64_t)f;
    cubic_coeffs(x - f, p->cubic_a, t->w);
    float sum = 0.0f;
    for (int k = 0; k < 4; k++) {
        int64_t i = i0 - 1 + k;
        if (p->exclude_outside && (i < 0 || i > last))
            t->w[k] = 0.0f;
        sum += t->w[k];
        t->idx[k] = clampi(i, 0, last);
    }
    if (p->exclude_outside && sum != 0.0f)
        for (int k = 0; k < 4; k++)
            t->w[k] /= sum;
    t->n = 4;
    return true;
}

typedef struct RzCtx {
    const DittoResizeParams *p;
    const float *x;
    float *y;
    int ndim;
    RzAxis ax[DITTO_MAX_DIMS];
    int64_t xst[DITTO_MAX_DIMS];
    int64_t rows;
    int ntasks;
} RzCtx;

static void rz_task(void *arg, int task)
{
    const RzCtx *c = arg;
    int last = c->ndim - 1;
    int64_t lo, hi, n = c->ax[last].out;
    task_range(c->rows, c->ntasks, task, &lo, &hi);
    Taps t[DITTO_MAX_DIMS];
    for (int64_t r = lo; r < hi; r++) {
        float *y = c->y + r * n;
        int64_t rem = r;
        bool inside = true;
        for (int d = last - 1; d >= 0; d--) {
            int64_t o = rem % c->ax[d].out;
            rem /= c->ax[d].out;
            inside = rz_taps(c->p, &c->ax[d], o, &t[d]) && inside;
        }
        for (int64_t o = 0; o < n; o++) {
            if (!inside || !rz_taps(c->p, &c->ax[last], o, &t[last])) {
                y[o] = c->p->extrapolation_value;
                continue;
            }
            /* sum over the product of every axis' taps */
            int k[DITTO_MAX_DIMS] = { 0 };
            float acc = 0.0f;
            for (;;) {
                int64_t off = 0;
                float w = 1.0f;
                for (int d = 0; d <= last; d++) {
                    off += t[d].idx[k[d]] * c->xst[d];
                    w *= t[d].w[k[d]];
                }
                acc += w * c->x[off];
                int d = last;
                while (d >= 0 && ++k[d] == t[d].n)
                    k[d--] = 0;
                if (d < 0)
                    break;
            }
            y[o] = acc;
        }
    }
}

static int cpu_resize(DittoBackend *be, const DittoResizeParams *p, const DittoTensor *x, DittoTensor *y)
{
    if (ditto_tensor_numel(y) == 0)
        return 0;
    RzCtx c = { .p = p, .x = x->data, .y = y->data, .ndim = x->ndim };
    int64_t s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        RzAxis *a = &c.ax[d];
        a->in = x->shape[d];
        a->out = y->shape[d];
        a->scale = p->scale[d] > 0.0f ? p->scale[d] : (float)a->out / (float)a->in;
        a->roi0 = p->roi_start[d];
        a->roi1 = p->roi_end[d];
        c.xst[d] = s;
        s *= x->shape[d];
    }
    c.rows = ditto_tensor_numel(y) / y->shape[y->ndim - 1];
    c.ntasks = task_count(ditto_tensor_numel(y) / 4096);
    ditto_pool_run(be->pool, c.ntasks, rz_task, &c);
    return 0;
}

/* ---- prelu ---- */

typedef struct PreluCtx {
    const float *x, *s;
    float *y;
    int ndim;
    const int64_t *shape;
    int64_t ss[DITTO_MAX_DIMS];
    int64_t rows;
    int ntasks;
} PreluCtx;

static void prelu_task(void *arg, int t)
{
    const PreluCtx *c = arg;
    int64_t lo, hi, n = c->shape[c->ndim - 1], sl = c->ss[c->ndim - 1];
    task_range(c->rows, c->ntasks, t, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *x = c->x + r * n, *s = c->s + row_offset(r, c->ndim, c->shape, c->ss);
        float *y = c->y + r * n;
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            y[i] = v >= 0.0f ? v : v * s[i * sl];
        }
    }
}

static int cpu_prelu(DittoBackend *be, const DittoTensor *x, const DittoTensor *slope, DittoTensor *y)
{
    if (ditto_tensor_numel(x) == 0)
        return 0;
    DittoTensor xv = *x, sv = *slope;
    if (xv.ndim == 0) {
        xv.ndim = 1;
        xv.shape[0] = 1;
        xv.stride[0] = 1;
    }
    PreluCtx c = { .x = x->data, .s = slope->data, .y = y->data, .ndim = xv.ndim, .shape = xv.shape };
    bcast_strides(&sv, &xv, c.ss);
    c.rows = ditto_tensor_numel(&xv) / xv.shape[xv.ndim - 1];
    c.ntasks = task_count(ditto_tensor_numel(&xv) / 8192);
    ditto_pool_run(be->pool, c.ntasks, prelu_task, &c);
    return 0;
}

/* ---- conv_transpose: each (n, oc) plane scatters its inputs' contributions ---- */

typedef struct ConvTCtx {
    const float *x, *w, *b;
    float *y;
    int64_t n, cin, cout, groups;
    int64_t in[3], out[3], k[3];
    int s[3], d[3], pb[3];
    int ntasks;
} ConvTCtx;

static void convt_task(void *arg, int t)
{
    const ConvTCtx *c = arg;
    int64_t lo, hi;
    int64_t cin_g = c->cin / c->groups, cout_g = c->cout / c->groups;
    int64_t in_plane = c->in[0] * c->in[1] * c->in[2], out_plane = c->out[0] * c->out[1] * c->out[2];
    int64_t kvol = c->k[0] * c->k[1] * c->k[2];
    task_range(c->n * c->cout, c->ntasks, t, &lo, &hi);
    for (int64_t p = lo; p < hi; p++) {
        int64_t n = p / c->cout, oc = p % c->cout, g = oc / cout_g, ocg = oc % cout_g;
        float *y = c->y + p * out_plane;
        float bias = c->b ? c->b[oc] : 0.0f;
        for (int64_t i = 0; i < out_plane; i++)
            y[i] = bias;
        for (int64_t icg = 0; icg < cin_g; icg++) {
            int64_t ic = g * cin_g + icg;
            const float *x = c->x + (n * c->cin + ic) * in_plane;
            const float *w = c->w + (ic * cout_g + ocg) * kvol;
            for (int64_t id = 0; id < c->in[0]; id++)
            for (int64_t ih = 0; ih < c->in[1]; ih++)
            for (int64_t iw = 0; iw < c->in[2]; iw++) {
                float v = x[(id * c->in[1] + ih) * c->in[2] + iw];
                for (int64_t kd = 0; kd < c->k[0]; kd++) {
                    int64_t od = id * c->s[0] - c->pb[0] + kd * c->d[0];
                    if (od < 0 || od >= c->out[0])
                        continue;
                    for (int64_t kh = 0; kh < c->k[1]; kh++) {
                        int64_t oh = ih * c->s[1] - c->pb[1] + kh * c->d[1];
                        if (oh < 0 || oh >= c->out[1])
                            continue;
                        const float *wr = w + (kd * c->k[1] + kh) * c->k[2];
                        float *yr = y + (od * c->out[1] + oh) * c->out[2];
                        for (int64_t kw = 0; kw < c->k[2]; kw++) {
                            int64_t ow = iw * c->s[2] - c->pb[2] + kw * c->d[2];
                            if (ow >= 0 && ow < c->out[2])
                                yr[ow] += v * wr[kw];
                        }
                    }
                }
            }
        }
    }
}

static int cpu_conv_transpose(DittoBackend *be, const DittoConvTransposeParams *p, const DittoTensor *x, const DittoTensor *w,
                              const DittoTensor *bias, DittoTensor *y)
{
    ConvTCtx c = { .x = x->data, .w = w->data, .b = bias ? bias->data : NULL, .y = y->data, .n = x->shape[0],
                   .cin = x->shape[1], .cout = y->shape[1], .groups = p->conv.groups ? p->conv.groups : 1 };
    int ns = x->ndim - 2;
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - ns);   /* params index, < 0 for the padded leading slots */
        c.in[i] = j < 0 ? 1 : x->shape[2 + j];
        c.out[i] = j < 0 ? 1 : y->shape[2 + j];
        c.k[i] = j < 0 ? 1 : w->shape[2 + j];
        c.s[i] = j < 0 || !p->conv.stride[j] ? 1 : p->conv.stride[j];
        c.d[i] = j < 0 || !p->conv.dilation[j] ? 1 : p->conv.dilation[j];
        c.pb[i] = j < 0 ? 0 : p->conv.pad_begin[j];
    }
    c.ntasks = task_count(c.n * c.cout);
    ditto_pool_run(be->pool, c.ntasks, convt_task, &c);
    return 0;
}

void ditto_cpu_init_onnx_ops(DittoOps *ops)
{
    ops->gather = cpu_gather;
    ops->where = cpu_where;
    ops->pad = cpu_pad;
    ops->resize = cpu_resize;
    ops->prelu = cpu_prelu;
    ops->conv_transpose = cpu_conv_transpose;
}
