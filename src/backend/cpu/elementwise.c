/*
 * CPU element-wise family: copy (strided, casting), fill, unary, binary with
 * broadcasting, softmax, reduce, concat, and the fused model steps film and
 * ddim_step (each operation rounded as in the op sequence they replace; C11
 * without GNU extensions compiles with -ffp-contract=off, so a * b + c stays
 * two roundings).
 *
 * Strided element-wise work goes through one iterator: the operands share a
 * logical shape; dims of size 1 are dropped and adjacent dims merged where
 * every operand is linear across them, so a contiguous tensor becomes one
 * long row and (N,C,H,W) op (1,C,1,1) becomes (N, C, H*W) with the inner
 * stride of the per-channel operand 0. The flat index range is split into
 * chunks for the thread pool; each chunk walks rows of the innermost dim.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/thread.h"

#define EW_MAX_OPS 7            /* ddim_step: 3 outputs, 4 inputs */
#define EW_GRAIN 16384            /* elements per task, at least */

typedef struct EwIter {
    int nop, ndim;
    int64_t numel;
    int64_t shape[DITTO_MAX_DIMS];
    int64_t stride[EW_MAX_OPS][DITTO_MAX_DIMS];   /* bytes */
    char *base[EW_MAX_OPS];
} EwIter;

/* One row of n elements; p[k] points at operand k's first element, s[k] is its byte stride. */
typedef void (*EwRowFn)(const void *ctx, char *const *p, const int64_t *s, int64_t n);

typedef struct EwJob {
    const EwIter *it;
    EwRowFn fn;
    const void *ctx;
    int64_t chunk;
} EwJob;

/* Every t[k] has t[0]'s shape (broadcast operands carry stride 0). */
static void ew_init(EwIter *it, int nop, const DittoTensor *const *t)
{
    const DittoTensor *t0 = t[0];
    int64_t es[EW_MAX_OPS];
    memset(it, 0, sizeof *it);
    it->nop = nop;
    it->numel = ditto_tensor_numel(t0);
    for (int k = 0; k < nop; k++) {
        es[k] = (int64_t)ditto_dtype_size(t[k]->dtype);
        it->base[k] = t[k]->data;
    }
    int nd = 0;
    for (int d = 0; d < t0->ndim; d++) {
        int64_t n = t0->shape[d];
        if (n == 1)
            continue;
        bool merge = nd > 0;
        for (int k = 0; k < nop && merge; k++)
            merge = it->stride[k][nd - 1] == t[k]->stride[d] * es[k] * n;
        if (merge) {
            it->shape[nd - 1] *= n;
        } else {
            it->shape[nd] = n;
            nd++;
        }
        for (int k = 0; k < nop; k++)
            it->stride[k][nd - 1] = t[k]->stride[d] * es[k];
    }
    if (nd == 0) {
        it->shape[0] = 1;
        nd = 1;
    }
    it->ndim = nd;
}

static void ew_task(void *arg, int task)
{
    const EwJob *job = arg;
    const EwIter *it = job->it;
    int64_t lo = (int64_t)task * job->chunk;
    int64_t hi = lo + job->chunk < it->numel ? lo + job->chunk : it->numel;
    int last = it->ndim - 1;
    int64_t idx[DITTO_MAX_DIMS];
    int64_t rem = lo;
    for (int d = last; d >= 0; d--) {
        idx[d] = rem % it->shape[d];
        rem /= it->shape[d];
    }
    int64_t s[EW_MAX_OPS];
    for (int k = 0; k < it->nop; k++)
        s[k] = it->stride[k][last];
    while (lo < hi) {
        int64_t n = it->shape[last] - idx[last];
        if (n > hi - lo)
            n = hi - lo;
        char *p[EW_MAX_OPS];
        for (int k = 0; k < it->nop; k++) {
            int64_t off = 0;
            for (int d = 0; d <= last; d++)
                off += idx[d] * it->stride[k][d];
            p[k] = it->base[k] + off;
        }
        job->fn(job->ctx, p, s, n);
        lo += n;
        idx[last] += n;
        for (int d = last; d > 0 && idx[d] >= it->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

static void ew_run(DittoBackend *be, const EwIter *it, EwRowFn fn, const void *ctx)
{
    if (it->numel <= 0)
        return;
    int64_t ntasks = it->numel / EW_GRAIN;
    int64_t maxt = 4 * (int64_t)ditto_pool_size(be->pool);
    if (ntasks > maxt)
        ntasks = maxt;
    if (ntasks < 1)
        ntasks = 1;
    EwJob job = { it, fn, ctx, (it->numel + ntasks - 1) / ntasks };
    ditto_pool_run(be->pool, (int)ntasks, ew_task, &job);
}

/* ---- copy / fill ---- */

typedef struct CopyCtx {
    DittoDType dt, st;
    int64_t dsize, ssize;
} CopyCtx;

static void copy_row(const void *arg, char *const *p, const int64_t *s, int64_t n)
{
    const CopyCtx *c = arg;
    char *y = p[0];
    const char *x = p[1];
    if (c->dt == c->st) {
        if (s[0] == c->dsize && s[1] == c->dsize) {
            memcpy(y, x, (size_t)(n * c->dsize));
            return;
        }
        /* fixed-size memcpy compiles to one load/store per element */
        switch (c->dsize) {
        case 4: for (int64_t i = 0; i < n; i++) memcpy(y + i * s[0], x + i * s[1], 4); break;
        case 2: for (int64_t i = 0; i < n; i++) memcpy(y + i * s[0], x + i * s[1], 2); break;
        case 8: for (int64_t i = 0; i < n; i++) memcpy(y + i * s[0], x + i * s[1], 8); break;
        case 1: for (int64_t i = 0; i < n; i++) y[i * s[0]] = x[i * s[1]]; break;
        default: for (int64_t i = 0; i < n; i++) memcpy(y + i * s[0], x + i * s[1], (size_t)c->dsize); break;
        }
        return;
    }
    if (s[0] == c->dsize && s[1] == c->ssize) {
        ditto_convert(y, c->dt, x, c->st, (size_t)n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        ditto_convert(y + i * s[0], c->dt, x + i * s[1], c->st, 1);
}

/* x and y of the same shape, any strides and dtypes. */
static void copy_same_shape(DittoBackend *be, const DittoTensor *x, const DittoTensor *y)
{
    const DittoTensor *t[2] = { y, x };
    EwIter it;
    ew_init(&it, 2, t);
    CopyCtx c = { y->dtype, x->dtype, (int64_t)ditto_dtype_size(y->dtype), (int64_t)ditto_dtype_size(x->dtype) };
    ew_run(be, &it, copy_row, &c);
}

static int cpu_copy(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    if (x->ndim == y->ndim) {
        copy_same_shape(be, x, y);
        return 0;
    }
    /* reshape copy: y is contiguous, so it reads as x's shape in row-major order */
    DittoTensor yv = ditto_tensor(y->data, y->dtype, x->ndim, x->shape);
    yv.device = y->device;
    copy_same_shape(be, x, &yv);
    return 0;
}

typedef struct FillCtx {
    unsigned char value[8];
    int64_t size;
} FillCtx;

static void fill_row(const void *arg, char *const *p, const int64_t *s, int64_t n)
{
    const FillCtx *c = arg;
    for (int64_t i = 0; i < n; i++)
        memcpy(p[0] + i * s[0], c->value, (size_t)c->size);
}

static int cpu_fill(DittoBackend *be, float value, DittoTensor *y)
{
    FillCtx c;
    memset(&c, 0, sizeof c);
    c.size = (int64_t)ditto_dtype_size(y->dtype);
    if (c.size < 1 || c.size > 8)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "op fill: dtype %s", ditto_dtype_name(y->dtype));
    ditto_convert(c.value, y->dtype, &value, DITTO_F32, 1);
    const DittoTensor *t[1] = { y };
    EwIter it;
    ew_init(&it, 1, t);
    ew_run(be, &it, fill_row, &c);
    return 0;
}

/* ---- randn: a task per row (a, b) of y (A, B, n) ---- */

typedef struct RandnTask {
    const DittoRandnParams *p;
    float *y;
    int64_t B, n;
} RandnTask;

static void randn_row(void *ctx, int t)
{
    const RandnTask *k = ctx;
    const int64_t a = t / k->B, b = t % k->B;
    ditto_rng_fill_normal(k->p->seed, k->p->stream0 + (uint64_t)a * k->p->stream_a + (uint64_t)b * k->p->stream_b, 0,
                          k->y + (int64_t)t * k->n, (size_t)k->n);
}

static int cpu_randn(DittoBackend *be, const DittoRandnParams *p, DittoTensor *y)
{
    const int64_t rows = y->shape[0] * y->shape[1];
    if (rows > INT32_MAX)
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "op randn: %lld rows", (long long)rows);
    RandnTask k = { p, y->data, y->shape[1], y->shape[2] };
    if (rows > 0 && k.n > 0)
        ditto_pool_run(be->pool, (int)rows, randn_row, &k);
    return 0;
}

/* ---- unary ---- */

/* PyTorch softplus (beta 1, threshold 20): linear above the threshold. */
static float softplus_f(float v)
{
    return v > 20.0f ? v : log1pf(expf(v));
}

#define UNARY_LOOP(expr) \
    for (int64_t i = 0; i < n; i++) { \
        float v = x[i * sx]; \
        y[i * sy] = (expr); \
    } \
    break

static void unary_row(const void *arg, char *const *p, const int64_t *s, int64_t n)
{
    const DittoUnaryParams *u = arg;
    float *y = (float *)p[0];
    const float *x = (const float *)p[1];
    int64_t sy = s[0] / (int64_t)sizeof(float), sx = s[1] / (int64_t)sizeof(float);
    const float a = u->alpha, b = u->beta;
    switch (u->kind) {
    case DITTO_UNARY_IDENTITY: UNARY_LOOP(v);
    case DITTO_UNARY_RELU: UNARY_LOOP(v > 0.0f ? v : 0.0f);
    case DITTO_UNARY_LEAKY_RELU: UNARY_LOOP(v > 0.0f ? v : v * a);
    case DITTO_UNARY_GELU: UNARY_LOOP(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
    case DITTO_UNARY_SILU: UNARY_LOOP(v / (1.0f + expf(-v)));
    case DITTO_UNARY_SIGMOID: UNARY_LOOP(1.0f / (1.0f + expf(-v)));
    case DITTO_UNARY_TANH: UNARY_LOOP(tanhf(v));
    case DITTO_UNARY_MISH: UNARY_LOOP(v * tanhf(softplus_f(v)));
    case DITTO_UNARY_SOFTPLUS: UNARY_LOOP(softplus_f(v));
    case DITTO_UNARY_EXP: UNARY_LOOP(expf(v));
    case DITTO_UNARY_LOG: UNARY_LOOP(logf(v));
    case DITTO_UNARY_SQRT: UNARY_LOOP(sqrtf(v));
    case DITTO_UNARY_RSQRT: UNARY_LOOP(1.0f / sqrtf(v));
    case DITTO_UNARY_RECIP: UNARY_LOOP(1.0f / v);
    case DITTO_UNARY_NEG: UNARY_LOOP(-v);
    case DITTO_UNARY_ABS: UNARY_LOOP(fabsf(v));
    case DITTO_UNARY_ERF: UNARY_LOOP(erff(v));
    case DITTO_UNARY_SIN: UNARY_LOOP(sinf(v));
    case DITTO_UNARY_COS: UNARY_LOOP(cosf(v));
    /* clamp as torch.clamp: NaN passes through */
    case DITTO_UNARY_CLIP: UNARY_LOOP(v < a ? a : v > b ? b : v);
    case DITTO_UNARY_AFFINE: UNARY_LOOP(a * v + b);
    default: break;
    }
}

static int cpu_unary(DittoBackend *be, const DittoUnaryParams *p, const DittoTensor *x, DittoTensor *y)
{
    const DittoTensor *t[2] = { y, x };
    EwIter it;
    ew_init(&it, 2, t);
    ew_run(be, &it, unary_row, p);
    return 0;
}

/* y = x + b (b: the bias broadcast along its axis), then the unary in place on y's row. */
static void bias_unary_row(const void *arg, char *const *p, const int64_t *s, int64_t n)
{
    float *y = (float *)p[0];
    const float *x = (const float *)p[1], *b = (const float *)p[2];
    const int64_t sy = s[0] / (int64_t)sizeof(float), sx = s[1] / (int64_t)sizeof(float), sb = s[2] / (int64_t)sizeof(float);
    for (int64_t i = 0; i < n; i++)
        y[i * sy] = x[i * sx] + b[i * sb];
    char *const q[2] = { p[0], p[0] };
    const int64_t s2[2] = { s[0], s[0] };
    unary_row(arg, q, s2, n);
}

static int cpu_bias_unary(DittoBackend *be, const DittoUnaryParams *p, int axis, const DittoTensor *x, const DittoTensor *bias, DittoTensor *y)
{
    DittoTensor bv = *y;   /* the bias as a view of y's shape: stride 1 along axis, 0 elsewhere */
    bv.data = bias->data;
    bv.dtype = bias->dtype;
    for (int d = 0; d < bv.ndim; d++)
        bv.stride[d] = d == axis ? 1 : 0;
    const DittoTensor *t[3] = { y, x, &bv };
    EwIter it;
    ew_init(&it, 3, t);
    ew_run(be, &it, bias_unary_row, p);
    return 0;
}

/* ---- binary ---- */

/* torch.maximum / minimum propagate NaN from either side */
static float max_f(float u, float v)
{
    return (u != u || u > v) ? u : v;
}

static float min_f(float u, float v)
{
    return (u != u || u < v) ? u : v;
}

/* Contiguous rows, a or b broadcast along the row, and the general strided case. */
#define BINARY_LOOP(expr) \
    if (sy == 1 && sa == 1 && sb == 1) { \
        for (int64_t i = 0; i < n; i++) { float u = a[i], v = b[i]; y[i] = (expr); } \
    } else if (sy == 1 && sa == 1 && sb == 0) { \
        const float v = b[0]; \
        for (int64_t i = 0; i < n; i++) { float u = a[i]; y[i] = (expr); } \
    } else if (sy == 1 && sa == 0 && sb == 1) { \
        const float u = a[0]; \
        for (int64_t i = 0; i < n; i++) { float v = b[i]; y[i] = (expr); } \
    } else { \
        for (int64_t i = 0; i < n; i++) { float u = a[i * sa], v = b[i * sb]; y[i * sy] = (expr); } \
    } \
    break

static void binary_row(const void *arg, char *const *p, const int64_t *s, int64_t n)
{
    const DittoBinaryParams *bp = arg;
    float *y = (float *)p[0];
    const float *a = (const float *)p[1], *b = (const float *)p[2];
    int64_t sy = s[0] / (int64_t)sizeof(float), sa = s[1] / (int64_t)sizeof(float), sb = s[2] / (int64_t)sizeof(float);
    switch (bp->kind) {
    case DITTO_BINARY_ADD: BINARY_LOOP(u + v);
    case DITTO_BINARY_SUB: BINARY_LOOP(u - v);
    case DITTO_BINARY_MUL: BINARY_LOOP(u * v);
    case DITTO_BINARY_DIV: BINARY_LOOP(u / v);
    case DITTO_BINARY_POW: BINARY_LOOP(powf(u, v));
    case DITTO_BINARY_MAX: BINARY_LOOP(max_f(u, v));
    case DITTO_BINARY_MIN: BINARY_LOOP(min_f(u, v));
    default: break;
    }
}

/* View of t with y's rank and shape: missing leading dims and size-1 dims get stride 0. */
static DittoTensor broadcast_view(const DittoTensor *t, const DittoTensor *y)
{
    DittoTensor r = *y;
    r.data = t->data;
    r.dtype = t->dtype;
    int off = y->ndim - t->ndim;
    for (int i = 0; i < y->ndim; i++) {
        int j = i - off;
        r.stride[i] = (j >= 0 && t->shape[j] != 1) ? t->stride[j] : 0;
    }
    return r;
}

static int cpu_binary(DittoBackend *be, const DittoBinaryParams *p, const DittoTensor *a, const DittoTensor *b, DittoTensor *y)
{
    DittoTensor av = broadcast_view(a, y), bv = broadcast_view(b, y);
    const DittoTensor *t[3] = { y, &av, &bv };
    EwIter it;
    ew_init(&it, 3, t);
    ew_run(be, &it, binary_row, p);
    return 0;
}

/* ---- softmax and reduce: x viewed as (outer, n, inner), contiguous ---- */

#define COL_BLOCK 64              /* inner columns handled together (stack accumulators) */

typedef struct AxisJob {
    const float *x;
    float *y;
    int64_t outer, n, inner, nblk;   /* nblk column blocks per outer index */
    int64_t units_per_task, units;
    int kind;                        /* reduce kind */
} AxisJob;

static void axis_split(const DittoTensor *x, int axis, AxisJob *j)
{
    j->outer = 1;
    j->inner = 1;
    for (int i = 0; i < axis; i++)
        j->outer *= x->shape[i];
    for (int i = axis + 1; i < x->ndim; i++)
        j->inner *= x->shape[i];
    j->n = x->shape[axis];
    j->nblk = (j->inner + COL_BLOCK - 1) / COL_BLOCK;
    j->units = j->outer * j->nblk;
}

static int axis_tasks(DittoBackend *be, AxisJob *j)
{
    int64_t work = j->outer * j->n * j->inner;
    int64_t ntasks = work / EW_GRAIN;
    int64_t maxt = 4 * (int64_t)ditto_pool_size(be->pool);
    if (ntasks > maxt)
        ntasks = maxt;
    if (ntasks > j->units)
        ntasks = j->units;
    if (ntasks < 1)
        ntasks = 1;
    j->units_per_task = (j->units + ntasks - 1) / ntasks;
    return (int)((j->units + j->units_per_task - 1) / j->units_per_task);
}

/* Stable softmax over n for columns [c0, c0 + cw): max, exp and double sum, scale. y may be x. */
static void softmax_block(const AxisJob *j, int64_t o, int64_t c0, int64_t cw)
{
    float mx[COL_BLOCK];
    double sum[COL_BLOCK];
    const float *x = j->x + o * j->n * j->inner + c0;
    float *y = j->y + o * j->n * j->inner + c0;
    for (int64_t c = 0; c < cw; c++) {
        mx[c] = -INFINITY;
        sum[c] = 0;
    }
    for (int64_t k = 0; k < j->n; k++) {
        const float *r = x + k * j->inner;
        for (int64_t c = 0; c < cw; c++)
            mx[c] = r[c] > mx[c] ? r[c] : mx[c];
    }
    for (int64_t k = 0; k < j->n; k++) {
        const float *r = x + k * j->inner;
        float *w = y + k * j->inner;
        for (int64_t c = 0; c < cw; c++) {
            float e = expf(r[c] - mx[c]);
            w[c] = e;
            sum[c] += e;
        }
    }
    for (int64_t c = 0; c < cw; c++)
        sum[c] = 1.0 / sum[c];
    for (int64_t k = 0; k < j->n; k++) {
        float *w = y + k * j->inner;
        for (int64_t c = 0; c < cw; c++)
            w[c] = (float)(w[c] * sum[c]);
    }
}

static void reduce_block(const AxisJob *j, int64_t o, int64_t c0, int64_t cw)
{
    double acc[COL_BLOCK];
    const float *x = j->x + o * j->n * j->inner + c0;
    float *y = j->y + o * j->inner + c0;
    bool extreme = j->kind == DITTO_REDUCE_MAX || j->kind == DITTO_REDUCE_MIN;
    for (int64_t c = 0; c < cw; c++)
        acc[c] = extreme ? x[c] : 0.0;
    for (int64_t k = extreme ? 1 : 0; k < j->n; k++) {
        const float *r = x + k * j->inner;
        switch (j->kind) {
        case DITTO_REDUCE_SUM:
        case DITTO_REDUCE_MEAN:
            for (int64_t c = 0; c < cw; c++)
                acc[c] += r[c];
            break;
        case DITTO_REDUCE_SUMSQ:
        case DITTO_REDUCE_L2:
            for (int64_t c = 0; c < cw; c++)
                acc[c] += (double)r[c] * r[c];
            break;
        case DITTO_REDUCE_MAX:   /* NaN propagates: once acc is NaN no compare replaces it */
            for (int64_t c = 0; c < cw; c++)
                if (r[c] > acc[c] || r[c] != r[c])
                    acc[c] = r[c];
            break;
        case DITTO_REDUCE_MIN:
            for (int64_t c = 0; c < cw; c++)
                if (r[c] < acc[c] || r[c] != r[c])
                    acc[c] = r[c];
            break;
        default:
            break;
        }
    }
    for (int64_t c = 0; c < cw; c++) {
        double v = acc[c];
        if (j->kind == DITTO_REDUCE_MEAN)
            v /= (double)j->n;
        else if (j->kind == DITTO_REDUCE_L2)
            v = sqrt(v);
        y[c] = (float)v;
    }
}

static void axis_task(void *arg, int task, bool softmax)
{
    const AxisJob *j = arg;
    int64_t lo = (int64_t)task * j->units_per_task;
    int64_t hi = lo + j->units_per_task < j->units ? lo + j->units_per_task : j->units;
    for (int64_t u = lo; u < hi; u++) {
        int64_t o = u / j->nblk, c0 = (u % j->nblk) * COL_BLOCK;
        int64_t cw = j->inner - c0 < COL_BLOCK ? j->inner - c0 : COL_BLOCK;
        if (softmax)
            softmax_block(j, o, c0, cw);
        else
            reduce_block(j, o, c0, cw);
    }
}

static void softmax_task(void *arg, int task)
{
    axis_task(arg, task, true);
}

static void reduce_task(void *arg, int task)
{
    axis_task(arg, task, false);
}

static int cpu_softmax(DittoBackend *be, const DittoSoftmaxParams *p, const DittoTensor *x, DittoTensor *y)
{
    AxisJob j;
    memset(&j, 0, sizeof j);
    j.x = x->data;
    j.y = y->data;
    axis_split(x, p->axis, &j);
    if (j.units == 0 || j.n == 0)
        return 0;
    ditto_pool_run(be->pool, axis_tasks(be, &j), softmax_task, &j);
    return 0;
}

static int cpu_reduce(DittoBackend *be, const DittoReduceParams *p, const DittoTensor *x, DittoTensor *y)
{
    AxisJob j;
    memset(&j, 0, sizeof j);
    j.x = x->data;
    j.y = y->data;
    j.kind = p->kind;
    axis_split(x, p->axis, &j);
    if (j.units == 0)
        return 0;
    if (j.n == 0 && (p->kind == DITTO_REDUCE_MAX || p->kind == DITTO_REDUCE_MIN))
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "op reduce: max/min over an empty axis");
    ditto_pool_run(be->pool, axis_tasks(be, &j), reduce_task, &j);
    return 0;
}

/* ---- concat: each input copied into its slab of y (a strided view of y) ---- */

static int cpu_concat(DittoBackend *be, int axis, int n, const DittoTensor *const *xs, DittoTensor *y)
{
    int64_t off = 0;
    size_t es = ditto_dtype_size(y->dtype);
    for (int i = 0; i < n; i++) {
        DittoTensor slab = *y;
        slab.shape[axis] = xs[i]->shape[axis];
        slab.data = (char *)y->data + (size_t)(off * y->stride[axis]) * es;
        if (ditto_tensor_numel(&slab) > 0)
            copy_same_shape(be, xs[i], &slab);
        off += xs[i]->shape[axis];
    }
    return 0;
}

/* ---- fused model steps ---- */

/* operands: out, h, y, scale, shift */
static void film_row(const void *arg, char *const *p, const int64_t *s, int64_t n)
{
    (void)arg;
    float *o = (float *)p[0];
    const float *h = (const float *)p[1], *y = (const float *)p[2], *sc = (const float *)p[3], *sh = (const float *)p[4];
    int64_t so = s[0] / 4, shh = s[1] / 4, sy = s[2] / 4, ssc = s[3] / 4, ssh = s[4] / 4;
    for (int64_t i = 0; i < n; i++) {
        float t = sc[i * ssc] * y[i * sy];    /* MUL */
        t = t + sh[i * ssh];                  /* ADD shift */
        o[i * so] = h[i * shh] + t;           /* ADD residual */
    }
}

static int cpu_film(DittoBackend *be, const DittoTensor *h, const DittoTensor *y, const DittoTensor *scale, const DittoTensor *shift, DittoTensor *out)
{
    DittoTensor scv = broadcast_view(scale, out), shv = broadcast_view(shift, out);
    const DittoTensor *t[5] = { out, h, y, &scv, &shv };
    EwIter it;
    ew_init(&it, 5, t);
    ew_run(be, &it, film_row, NULL);
    return 0;
}

typedef struct DdimCtx {
    DittoDdimStepParams p;
    bool x0, eps, xn;           /* outputs wanted */
} DdimCtx;

/* operands: x0, eps, x_next (placeholders when not wanted), cond, uncond, x, z (placeholders when not needed) */
static void ddim_row(const void *arg, char *const *p, const int64_t *s, int64_t n)
{
    const DdimCtx *c = arg;
    const float w = c->p.guidance, a = c->p.a, rb = c->p.rb, an = c->p.alpha_next_sqrt, ce = c->p.c, sg = c->p.sigma;
    float *x0o = (float *)p[0], *epo = (float *)p[1], *xno = (float *)p[2];
    const float *cv = (const float *)p[3], *uv = (const float *)p[4], *xv = (const float *)p[5], *zv = (const float *)p[6];
    int64_t s0 = s[0] / 4, s1 = s[1] / 4, s2 = s[2] / 4, s3 = s[3] / 4, s4 = s[4] / 4, s5 = s[5] / 4, s6 = s[6] / 4;
    for (int64_t i = 0; i < n; i++) {
        float u = uv[i * s4];
        float d = cv[i * s3] - u;             /* C - U */
        d = w * d + 0.0f;                     /* affine w, 0 */
        float x0 = u + d;                     /* U + w (C - U) */
        if (c->x0)
            x0o[i * s0] = x0;
        if (!c->eps && !c->xn)
            continue;
        float xi = xv[i * s5];                /* read before x_next (may be x) is written */
        float e = a * xi + 0.0f;              /* A_t x */
        float q = rb * x0 + 0.0f;             /* x0 / B_t */
        e = e - q;
        if (c->eps)
            epo[i * s1] = e;
        if (c->xn) {
            float v = an * x0 + 0.0f;         /* sqrt(abar_next) x0 */
            float t = ce * e + 0.0f;
            v = v + t;                        /* + c eps */
            t = sg * zv[i * s6] + 0.0f;
            v = v + t;                        /* + sigma z */
            xno[i * s2] = v;
        }
    }
}

static int cpu_ddim_step(DittoBackend *be, const DittoDdimStepParams *p, const DittoTensor *cond, const DittoTensor *uncond, const DittoTensor *x,
                         const DittoTensor *z, DittoTensor *x0, DittoTensor *eps, DittoTensor *x_next)
{
    DdimCtx c = { *p, x0 != NULL, eps != NULL, x_next != NULL };
    const DittoTensor *any = x0 ? x0 : eps ? eps : x_next;
    const DittoTensor *t[7] = { x0 ? x0 : any, eps ? eps : any, x_next ? x_next : any, cond, uncond, x ? x : cond, z ? z : cond };
    EwIter it;
    ew_init(&it, 7, t);
    ew_run(be, &it, ddim_row, &c);
    return 0;
}

void ditto_cpu_init_elementwise(DittoOps *ops)
{
    ops->copy = cpu_copy;
    ops->fill = cpu_fill;
    ops->randn = cpu_randn;
    ops->unary = cpu_unary;
    ops->bias_unary = cpu_bias_unary;
    ops->binary = cpu_binary;
    ops->softmax = cpu_softmax;
    ops->reduce = cpu_reduce;
    ops->concat = cpu_concat;
    ops->film = cpu_film;
    ops->ddim_step = cpu_ddim_step;
}
