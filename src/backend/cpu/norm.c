/*
 * CPU normalisations. Statistics are two-pass in double (mean, then the mean
 * of squared deviations), so inputs with a large common offset keep their
 * precision; the normalised value is formed in double and rounded once.
 * Work is split over independent rows/planes with the pool.
 */
#include <math.h>

#include "backend/cpu/cpu.h"
#include "core/log.h"
#include "core/mem.h"

static int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int ntasks_for(const DittoBackend *be, int64_t items)
{
    int64_t t = 4 * (int64_t)ditto_pool_size(be->pool);
    return (int)(items < 1 ? 1 : imin(items, t));
}

/* Items [lo, hi) of task t out of nt. */
static void task_range(int64_t items, int t, int nt, int64_t *lo, int64_t *hi)
{
    *lo = items * t / nt;
    *hi = items * (t + 1) / nt;
}

/* Mean and 1/sqrt(biased var + eps) of n contiguous values. */
static void plane_stats(const float *x, int64_t n, double eps, double *mean, double *rstd)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    double m = n ? s / (double)n : 0.0, v = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - m;
        v += d * d;
    }
    *mean = m;
    *rstd = 1.0 / sqrt((n ? v / (double)n : 0.0) + eps);
}

/* Size of dims 2.. (1 for a 2-D tensor). */
static int64_t inner_size(const DittoTensor *x)
{
    int64_t r = 1;
    for (int i = 2; i < x->ndim; i++)
        r *= x->shape[i];
    return r;
}

/* Shared context: x, y (N, C, R) viewed flat; per-channel or per-element affine. */
typedef struct NormTask {
    const float *x, *w, *b, *mean, *var;
    float *y;
    int64_t N, C, R, G;
    double eps;
    int64_t items;
    int ntasks;
} NormTask;

/* ---- batch norm (eval): per channel, running statistics ---- */

static void bn_task(void *ctx, int t)
{
    const NormTask *k = ctx;
    int64_t lo, hi;
    task_range(k->items, t, k->ntasks, &lo, &hi);
    for (int64_t pl = lo; pl < hi; pl++) {
        int64_t c = pl % k->C;
        double s = 1.0 / sqrt((double)k->var[c] + k->eps) * (k->w ? k->w[c] : 1.0);
        double m = k->mean[c], b = k->b ? k->b[c] : 0.0;
        const float *x = k->x + pl * k->R;
        float *y = k->y + pl * k->R;
        for (int64_t i = 0; i < k->R; i++)
            y[i] = (float)((x[i] - m) * s + b);
    }
}

static int cpu_batch_norm(DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *mean,
                          const DittoTensor *var, const DittoTensor *w, const DittoTensor *b, DittoTensor *y)
{
    NormTask k = { x->data, w ? w->data : NULL, b ? b->data : NULL, mean->data, var->data, y->data,
                   x->shape[0], x->shape[1], inner_size(x), 1, p->eps, 0, 0 };
    k.items = k.N * k.C;
    k.ntasks = ntasks_for(be, k.items);
    ditto_pool_run(be->pool, k.ntasks, bn_task, &k);
    return 0;
}

/* ---- instance norm and group norm: statistics over contiguous blocks of (C/G) * R ---- */

static void group_task(void *ctx, int t)
{
    const NormTask *k = ctx;
    int64_t lo, hi, Cg = k->C / k->G, len = Cg * k->R;
    task_range(k->items, t, k->ntasks, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) {
        const float *x = k->x + it * len;
        float *y = k->y + it * len;
        double m, r;
        plane_stats(x, len, k->eps, &m, &r);
        for (int64_t cl = 0; cl < Cg; cl++) {
            int64_t c = it % k->G * Cg + cl;
            double s = r * (k->w ? k->w[c] : 1.0), b = k->b ? k->b[c] : 0.0;
            for (int64_t i = cl * k->R; i < (cl + 1) * k->R; i++)
                y[i] = (float)((x[i] - m) * s + b);
        }
    }
}

static int run_groups(DittoBackend *be, double eps, int64_t G, const DittoTensor *x, const DittoTensor *w,
                      const DittoTensor *b, DittoTensor *y)
{
    NormTask k = { x->data, w ? w->data : NULL, b ? b->data : NULL, NULL, NULL, y->data,
                   x->shape[0], x->shape[1], inner_size(x), G, eps, 0, 0 };
    k.items = k.N * k.G;
    k.ntasks = ntasks_for(be, k.items);
    ditto_pool_run(be->pool, k.ntasks, group_task, &k);
    return 0;
}

static int cpu_instance_norm(DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *w,
                             const DittoTensor *b, DittoTensor *y)
{
    return run_groups(be, p->eps, x->shape[1], x, w, b, y);
}

/* ---- SPADE: instance norm modulated per element by gb = (gamma, beta) (+ their bias), optional LeakyReLU ---- */

typedef struct SpadeTask {
    const float *x, *gb, *bias;     /* bias (K C) of gb or NULL */
    float *y;
    int64_t C, K, R, items;         /* y planes of R values; gb planes: K C (2: gamma, beta; 1: gamma) */
    int64_t Rx, W, wx, fh, fw;      /* x planes of Rx values; with upsampling y (H, W) reads x (H / fh, wx = W / fw) */
    double eps, slope;
    bool act;
    int ntasks;
} SpadeTask;

static void spade_task(void *ctx, int t)
{
    const SpadeTask *k = ctx;
    const bool up = k->Rx != k->R;
    int64_t lo, hi;
    task_range(k->items, t, k->ntasks, &lo, &hi);
    for (int64_t pl = lo; pl < hi; pl++) {   /* plane pl = n * C + c */
        int64_t n = pl / k->C, c = pl % k->C;
        const float *x = k->x + pl * k->Rx;
        const float *g = k->gb + (n * k->K * k->C + c) * k->R, *b = k->K == 2 ? g + k->C * k->R : NULL;
        float *y = k->y + pl * k->R;
        const double bg = k->bias ? k->bias[c] : 0.0, bb = k->bias && b ? k->bias[k->C + c] : 0.0;
        double m, r;
        plane_stats(x, k->Rx, k->eps, &m, &r);   /* a nearest upsample repeats every value fh fw times: the same statistics */
        for (int64_t i = 0; i < k->R; i++) {
            const float xv = up ? x[i / k->W / k->fh * k->wx + i % k->W / k->fw] : x[i];
            double v = (xv - m) * r * (1.0 + ((double)g[i] + bg)) + (b ? (double)b[i] + bb : 0.0);
            y[i] = (float)(k->act && v < 0 ? v * k->slope : v);
        }
    }
}

/*
 * Channels-last (p->nhwc): x and gb transposed into NCHW scratch, the NCHW
 * task, y transposed back: the same statistics in the same order, so every
 * value is the NCHW path's on the transposed data. A smaller x (2-D) is read
 * through the nearest-upsampling index map.
 */
static int cpu_spade_norm(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *x, const DittoTensor *gb, const DittoTensor *bias,
                          DittoTensor *y)
{
    const int cax = p->nhwc ? x->ndim - 1 : 1, hax = p->nhwc ? 1 : 2;
    const int64_t N = x->shape[0], C = x->shape[cax], NC = N * C;
    const int64_t R = NC > 0 ? ditto_tensor_numel(y) / NC : 0, Rx = NC > 0 ? ditto_tensor_numel(x) / NC : 0;
    const int64_t K = p->gamma_only ? 1 : 2;
    SpadeTask k = { x->data, gb->data, bias ? bias->data : NULL, y->data, C, K, R, N * C, Rx, 1, 1, 1, 1, p->eps, p->slope, p->act, 1 };
    if (k.items == 0 || k.R == 0)
        return 0;
    if (Rx != R) {   /* 4-D (the front end's rule) */
        k.W = y->shape[hax + 1];
        k.wx = x->shape[hax + 1];
        k.fh = y->shape[hax] / x->shape[hax];
        k.fw = k.W / k.wx;
    }
    k.ntasks = ntasks_for(be, k.items);
    if (!p->nhwc) {
        ditto_pool_run(be->pool, k.ntasks, spade_task, &k);
        return 0;
    }
    const int64_t nx = N * C * Rx, ny = N * C * R;
    float *xs = ditto_malloc_aligned(sizeof(float) * (size_t)(nx + (K + 1) * ny));   /* x, gb (K), y */
    if (!xs)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op spade_norm: cannot allocate %lld floats of layout scratch", (long long)(nx + (K + 1) * ny));
    float *gs = xs + nx, *ys = gs + K * ny;
    ditto_cpu_transpose(be, x->data, xs, N, Rx, C);       /* (N, Rx, C) -> (N, C, Rx) */
    ditto_cpu_transpose(be, gb->data, gs, N, R, K * C);   /* (N, R, KC) -> (N, KC, R): gamma planes (then beta) */
    k.x = xs;
    k.gb = gs;
    k.y = ys;
    ditto_pool_run(be->pool, k.ntasks, spade_task, &k);
    ditto_cpu_transpose(be, ys, y->data, N, C, R);
    ditto_free_aligned(xs);
    return 0;
}

/*
 * spade_conv as its definition: gb = conv(a, w) into float scratch, then
 * spade_norm, so it gives the bits of the two ops (the oracle of the fused
 * GPU kernel). Never fused here. a as a channel slice (row pitch lda > Ca)
 * is copied out first: the conv reads contiguous rows.
 */
static int cpu_spade_conv(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w, const DittoTensor *bias,
                          const DittoTensor *x, DittoTensor *y)
{
    const int64_t N = y->shape[0], H = y->shape[1], W = y->shape[2], KC = w->shape[0], Ca = a->shape[3];
    const int64_t n = N * H * W * KC, na = ditto_tensor_is_contiguous(a) ? 0 : N * H * W * Ca;
    if (n == 0)
        return 0;
    float *gs = ditto_malloc_aligned(sizeof(float) * (size_t)(n + na));
    if (!gs)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op spade_conv: cannot allocate %lld floats for gamma / beta", (long long)(n + na));
    DittoTensor gb = ditto_tensor(gs, DITTO_F32, 4, (const int64_t[]){ N, H, W, KC }), ac = *a;
    gb.device = y->device;
    int rc = 0;
    if (na) {   /* (N, H, W, Ca) rows lda apart -> contiguous, after gb */
        ac = ditto_tensor(gs + n, DITTO_F32, 4, a->shape);
        ac.device = a->device;
        rc = be->ops.copy(be, a, &ac);
    }
    const DittoConvParams cp = { .pad_begin = { 1, 1 }, .pad_end = { 1, 1 }, .nhwc = true };
    if (rc >= 0)
        rc = be->ops.conv(be, &cp, &ac, w, NULL, &gb);
    if (rc >= 0)
        rc = cpu_spade_norm(be, p, x, &gb, bias, y);
    ditto_free_aligned(gs);
    return rc;
}

static bool cpu_spade_conv_fused(DittoBackend *be, const DittoSpadeParams *p, const DittoTensor *a, const DittoTensor *w, const DittoTensor *bias,
                                 const DittoTensor *x, const DittoTensor *y)
{
    (void)be, (void)p, (void)a, (void)w, (void)bias, (void)x, (void)y;
    return false;
}

static int cpu_group_norm(DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *w,
                          const DittoTensor *b, DittoTensor *y)
{
    return run_groups(be, p->eps, p->groups, x, w, b, y);
}

/* ---- layer norm over the last dim: rows of C contiguous values, per-element affine ---- */

static void ln_last_task(void *ctx, int t)
{
    const NormTask *k = ctx;
    int64_t lo, hi;
    task_range(k->items, t, k->ntasks, &lo, &hi);
    for (int64_t row = lo; row < hi; row++) {
        const float *x = k->x + row * k->C;
        float *y = k->y + row * k->C;
        double m, r;
        plane_stats(x, k->C, k->eps, &m, &r);
        for (int64_t c = 0; c < k->C; c++)
            y[c] = (float)((x[c] - m) * r * (k->w ? k->w[c] : 1.0) + (k->b ? k->b[c] : 0.0));
    }
}

/*
 * Layer norm over dim 1 of (N, C, R): each position r normalises C values
 * R apart. A task takes a block of LN_BLOCK positions of one n and sweeps the
 * channels with per-position accumulators, so memory is read row by row.
 */
#define LN_BLOCK 256

static void ln_first_task(void *ctx, int t)
{
    const NormTask *k = ctx;
    int64_t lo, hi, nblk = (k->R + LN_BLOCK - 1) / LN_BLOCK;
    task_range(k->items, t, k->ntasks, &lo, &hi);
    double mean[LN_BLOCK], acc[LN_BLOCK];
    for (int64_t it = lo; it < hi; it++) {
        int64_t n = it / nblk, r0 = it % nblk * LN_BLOCK, len = imin(LN_BLOCK, k->R - r0);
        const float *x = k->x + n * k->C * k->R + r0;
        float *y = k->y + n * k->C * k->R + r0;
        for (int64_t j = 0; j < len; j++)
            acc[j] = 0;
        for (int64_t c = 0; c < k->C; c++)
            for (int64_t j = 0; j < len; j++)
                acc[j] += x[c * k->R + j];
        for (int64_t j = 0; j < len; j++) {
            mean[j] = acc[j] / (double)k->C;
            acc[j] = 0;
        }
        for (int64_t c = 0; c < k->C; c++) {
            for (int64_t j = 0; j < len; j++) {
                double d = x[c * k->R + j] - mean[j];
                acc[j] += d * d;
            }
        }
        for (int64_t j = 0; j < len; j++)
            acc[j] = 1.0 / sqrt(acc[j] / (double)k->C + k->eps);   /* now rstd */
        for (int64_t c = 0; c < k->C; c++) {
            double w = k->w ? k->w[c] : 1.0, b = k->b ? k->b[c] : 0.0;
            for (int64_t j = 0; j < len; j++)
                y[c * k->R + j] = (float)((x[c * k->R + j] - mean[j]) * acc[j] * w + b);
        }
    }
}

static int cpu_layer_norm(DittoBackend *be, const DittoNormParams *p, const DittoTensor *x, const DittoTensor *w,
                          const DittoTensor *b, DittoTensor *y)
{
    NormTask k = { x->data, w ? w->data : NULL, b ? b->data : NULL, NULL, NULL, y->data, 0, 0, 1, 1, p->eps, 0, 0 };
    int64_t numel = ditto_tensor_numel(x);
    if (numel == 0)
        return 0;
    if (p->channels_first) {
        k.N = x->shape[0];
        k.C = x->shape[1];
        k.R = inner_size(x);
        k.items = k.N * ((k.R + LN_BLOCK - 1) / LN_BLOCK);
        k.ntasks = ntasks_for(be, k.items);
        ditto_pool_run(be->pool, k.ntasks, ln_first_task, &k);
    } else {
        k.C = x->shape[x->ndim - 1];
        k.items = numel / k.C;
        k.ntasks = ntasks_for(be, k.items);
        ditto_pool_run(be->pool, k.ntasks, ln_last_task, &k);
    }
    return 0;
}

/*
 * Pre-norm of a rotary FiLM layer: by definition the film, layer_norm and
 * rotary ops of this backend in sequence (the fused op's oracle bits). With
 * no a, the norm goes into ra and the rotary runs there in place. tf32_out
 * rounds a and ra after.
 */
static int cpu_layer_norm_rotary(DittoBackend *be, const DittoLnRotaryParams *p, DittoTensor *h, const DittoTensor *y, const DittoTensor *scale,
                                 const DittoTensor *shift, const DittoTensor *w, const DittoTensor *b, const DittoTensor *freqs, DittoTensor *a,
                                 DittoTensor *ra)
{
    if (y)
        DITTO_TRY(be->ops.film(be, h, y, scale, shift, h));
    DittoTensor *n = a ? a : ra;
    const DittoNormParams np = { .eps = p->eps };
    DITTO_TRY(cpu_layer_norm(be, &np, h, w, b, n));
    if (ra) {
        /* rotary on (rows / L, L, C) views */
        const int nd = h->ndim;
        const int64_t L = h->shape[nd - 2], C = h->shape[nd - 1], N = L > 0 && C > 0 ? ditto_tensor_numel(h) / (L * C) : 0;
        DittoTensor n3, r3;
        DITTO_TRY(ditto_tensor_reshape(n, 3, (const int64_t[]){ N, L, C }, &n3));
        DITTO_TRY(ditto_tensor_reshape(ra, 3, (const int64_t[]){ N, L, C }, &r3));
        const DittoRotaryParams rp = { p->pos_offset };
        DITTO_TRY(be->ops.rotary(be, &rp, &n3, freqs, &r3));
    }
    if (p->tf32_out) {
        /* last, so ra is the rotary of the unrounded norm */
        DittoTensor *outs[2] = { a, ra };
        for (int o = 0; o < 2; o++) {
            if (!outs[o])
                continue;
            float *v = outs[o]->data;
            for (int64_t i = 0, cnt = ditto_tensor_numel(outs[o]); i < cnt; i++)
                v[i] = ditto_tf32_round(v[i]);
        }
    }
    return 0;
}

void ditto_cpu_init_norm(DittoOps *ops)
{
    ops->batch_norm = cpu_batch_norm;
    ops->instance_norm = cpu_instance_norm;
    ops->spade_norm = cpu_spade_norm;
    ops->spade_conv = cpu_spade_conv;
    ops->spade_conv_fused = cpu_spade_conv_fused;
    ops->layer_norm = cpu_layer_norm;
    ops->group_norm = cpu_group_norm;
    ops->layer_norm_rotary = cpu_layer_norm_rotary;
}
