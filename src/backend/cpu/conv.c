/*
 * CPU convolution (cross-correlation), 1-D/2-D/3-D through one 3-D code path:
 * missing leading spatial dims are size 1. Three strategies:
 *  - one input channel per group (depthwise, or C == 1): a direct loop per
 *    output plane, threaded over (n, o);
 *  - 1x1(x1), stride 1, no padding: y_g (Og, P) = w_g (Og, Cg) x_g (Cg, P), one GEMM;
 *  - otherwise vol2col + GEMM per group, in bounded chunks: a column chunk of
 *    pc output positions and kc rows of the K = Cg * kvol reduction, so the
 *    scratch never exceeds col_limit floats (32 MB) whatever the layer size;
 *    reduction chunks accumulate into y (beta = 1).
 * The bias is written into y first (added to it with .accumulate, y then
 * holding a residual) and every GEMM accumulates onto it; the relu
 * (DittoConvParams.relu) is one more pass. Channels-last tensors
 * (.nhwc) are transposed into NCHW scratch around all of this.
 * OpenBLAS threads the GEMMs; our pool threads the fills and direct loops.
 * Our workers sleep while OpenBLAS runs; OpenBLAS's workers spin-yield for a
 * while after each GEMM, which slows the next fill a little on few cores.
 */
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "core/log.h"
#include "core/mem.h"

/*
 * Chunking defaults, measured on the full-size 3x3x3 142->142 and 7x7x7
 * 142->22 convs and the decoder's 3x3 convs (2 and 16 cores): chunks of
 * 32 MB (about a last-level cache) and at least 2048 columns, so OpenBLAS
 * gets a wide N to thread over (the 7x7x7 conv, K = 48706, then splits its
 * reduction into chunks of 4096 rows).
 */
#define COL_LIMIT_DEFAULT ((int64_t)8 << 20)    /* floats of column scratch */
#define MIN_COLS_DEFAULT 2048                    /* below this, split the reduction instead */

static int64_t col_limit = COL_LIMIT_DEFAULT;
static int64_t min_cols = MIN_COLS_DEFAULT;

/*
 * Test hook (not thread-safe; tests only): shrink the scratch limit so that
 * small cases exercise the chunking. 0 restores a default.
 */
void ditto_cpu_conv_set_chunking(int64_t max_col_floats, int64_t min_chunk_cols)
{
    col_limit = max_col_floats > 0 ? max_col_floats : COL_LIMIT_DEFAULT;
    min_cols = min_chunk_cols > 0 ? min_chunk_cols : MIN_COLS_DEFAULT;
}

/* Everything as 3 spatial dims (D, H, W); a 2-D conv has D = KD = OD = 1. */
typedef struct ConvGeom {
    int64_t N, C, O, G, Cg, Og;
    int64_t in[3], k[3], out[3], s[3], pb[3], d[3];
    int64_t in_vol, out_vol, k_vol;
} ConvGeom;

static void conv_geom(const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *y, ConvGeom *g)
{
    int ns = x->ndim - 2;
    g->N = x->shape[0];
    g->C = x->shape[1];
    g->O = w->shape[0];
    g->G = p->groups ? p->groups : 1;
    g->Cg = g->C / g->G;
    g->Og = g->O / g->G;
    g->in_vol = g->out_vol = g->k_vol = 1;
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - ns);  /* index into the tensor's spatial dims and the params */
        if (j < 0) {
            g->in[i] = g->k[i] = g->out[i] = g->s[i] = g->d[i] = 1;
            g->pb[i] = 0;
        } else {
            g->in[i] = x->shape[2 + j];
            g->k[i] = w->shape[2 + j];
            g->out[i] = y->shape[2 + j];
            g->s[i] = p->stride[j] ? p->stride[j] : 1;
            g->d[i] = p->dilation[j] ? p->dilation[j] : 1;
            g->pb[i] = p->pad_begin[j];
        }
        g->in_vol *= g->in[i];
        g->out_vol *= g->out[i];
        g->k_vol *= g->k[i];
    }
}

/* Output positions o in [lo, hi) read input o * s + off inside [0, n). */
static void valid_range(int64_t n, int64_t s, int64_t off, int64_t *lo, int64_t *hi)
{
    *lo = off < 0 ? (-off + s - 1) / s : 0;
    *hi = n - 1 - off < 0 ? 0 : (n - 1 - off) / s + 1;
}

static int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t imax(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int ntasks_for(const DittoBackend *be, int64_t items)
{
    int64_t t = 4 * (int64_t)ditto_pool_size(be->pool);
    return (int)imax(1, imin(items, t));
}

/* ---- bias prefill ---- */

typedef struct BiasTask {
    const ConvGeom *g;
    const float *bias;
    float *y;
    int64_t planes;
    int ntasks;
    bool add;            /* y += bias (accumulate) instead of y = bias */
} BiasTask;

static void bias_task(void *ctx, int t)
{
    const BiasTask *b = ctx;
    int64_t p0 = b->planes * t / b->ntasks, p1 = b->planes * (t + 1) / b->ntasks;
    for (int64_t pl = p0; pl < p1; pl++) {
        float v = b->bias[pl % b->g->O], *dst = b->y + pl * b->g->out_vol;
        if (b->add) {
            for (int64_t i = 0; i < b->g->out_vol; i++)
                dst[i] += v;
        } else {
            for (int64_t i = 0; i < b->g->out_vol; i++)
                dst[i] = v;
        }
    }
}

static void bias_fill(DittoBackend *be, const ConvGeom *g, const float *bias, bool add, float *y)
{
    BiasTask b = { g, bias, y, g->N * g->O, 0, add };
    b.ntasks = ntasks_for(be, b.planes);
    ditto_pool_run(be->pool, b.ntasks, bias_task, &b);
}

/* ---- direct loop: one input channel per group ---- */

typedef struct DirectTask {
    const ConvGeom *g;
    const float *x, *w, *bias;
    float *y;
    int64_t planes;
    int ntasks;
    bool acc;            /* accumulate onto y */
} DirectTask;

static void direct_plane(const ConvGeom *g, const float *xp, const float *wp, float bv, bool acc, float *yp)
{
    const int64_t H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int64_t KH = g->k[1], KW = g->k[2];
    for (int64_t od = 0; od < g->out[0]; od++) {
        for (int64_t oh = 0; oh < OH; oh++) {
            float *yrow = yp + (od * OH + oh) * OW;
            for (int64_t ow = 0; ow < OW; ow++)
                yrow[ow] = acc ? yrow[ow] + bv : bv;
            for (int64_t kd = 0; kd < g->k[0]; kd++) {
                int64_t id = od * g->s[0] - g->pb[0] + kd * g->d[0];
                if (id < 0 || id >= g->in[0])
                    continue;
                for (int64_t kh = 0; kh < KH; kh++) {
                    int64_t ih = oh * g->s[1] - g->pb[1] + kh * g->d[1];
                    if (ih < 0 || ih >= H)
                        continue;
                    const float *xrow = xp + (id * H + ih) * W;
                    const float *wrow = wp + (kd * KH + kh) * KW;
                    for (int64_t kw = 0; kw < KW; kw++) {
                        int64_t off = kw * g->d[2] - g->pb[2], lo, hi;
                        valid_range(W, g->s[2], off, &lo, &hi);
                        hi = imin(hi, OW);
                        const float wv = wrow[kw];
                        if (g->s[2] == 1) {
                            const float *xs = xrow + off;
                            for (int64_t ow = lo; ow < hi; ow++)
                                yrow[ow] += wv * xs[ow];
                        } else {
                            for (int64_t ow = lo; ow < hi; ow++)
                                yrow[ow] += wv * xrow[ow * g->s[2] + off];
                        }
                    }
                }
            }
        }
    }
}

static void direct_task(void *ctx, int t)
{
    const DirectTask *d = ctx;
    const ConvGeom *g = d->g;
    int64_t p0 = d->planes * t / d->ntasks, p1 = d->planes * (t + 1) / d->ntasks;
    for (int64_t pl = p0; pl < p1; pl++) {
        int64_t n = pl / g->O, o = pl % g->O, c = o / g->Og;  /* Cg == 1: group index = input channel */
        direct_plane(g, d->x + (n * g->C + c) * g->in_vol, d->w + o * g->k_vol, d->bias ? d->bias[o] : 0.0f, d->acc,
                     d->y + pl * g->out_vol);
    }
}

/* ---- vol2col ---- */

typedef struct ColTask {
    const ConvGeom *g;
    const float *x;      /* first input channel of the group, batch n */
    float *col;          /* (kc, pc) */
    int64_t k0, kc, p0, pc;
    int ntasks;
} ColTask;

/* Row r of the group's reduction (channel c, tap kd,kh,kw) for output positions [p0, p0 + pc). */
static void col_row(const ConvGeom *g, const float *x, int64_t r, int64_t p0, int64_t pc, float *dst)
{
    const int64_t H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    int64_t c = r / g->k_vol, kr = r % g->k_vol;
    int64_t kw = kr % g->k[2], kh = kr / g->k[2] % g->k[1], kd = kr / (g->k[2] * g->k[1]);
    const float *xc = x + c * g->in_vol;
    int64_t off = kw * g->d[2] - g->pb[2], lo, hi;
    valid_range(W, g->s[2], off, &lo, &hi);
    int64_t ow = p0 % OW, oh = p0 / OW % OH, od = p0 / (OW * OH);
    for (int64_t done = 0; done < pc;) {
        int64_t len = imin(OW - ow, pc - done);
        int64_t id = od * g->s[0] - g->pb[0] + kd * g->d[0];
        int64_t ih = oh * g->s[1] - g->pb[1] + kh * g->d[1];
        float *out = dst + done;
        if (id < 0 || id >= g->in[0] || ih < 0 || ih >= H) {
            memset(out, 0, sizeof(float) * (size_t)len);
        } else {
            const float *xrow = xc + (id * H + ih) * W;
            int64_t a = imin(imax(lo, ow), ow + len), b = imin(imax(hi, a), ow + len);
            for (int64_t o = ow; o < a; o++)
                out[o - ow] = 0.0f;
            if (g->s[2] == 1) {
                memcpy(out + (a - ow), xrow + a + off, sizeof(float) * (size_t)(b - a));
            } else {
                for (int64_t o = a; o < b; o++)
                    out[o - ow] = xrow[o * g->s[2] + off];
            }
            for (int64_t o = b; o < ow + len; o++)
                out[o - ow] = 0.0f;
        }
        done += len;
        ow = 0;
        if (++oh == OH) {
            oh = 0;
            od++;
        }
    }
}

static void col_task(void *ctx, int t)
{
    const ColTask *ct = ctx;
    int64_t r0 = ct->kc * t / ct->ntasks, r1 = ct->kc * (t + 1) / ct->ntasks;
    for (int64_t r = r0; r < r1; r++)
        col_row(ct->g, ct->x, ct->k0 + r, ct->p0, ct->pc, ct->col + r * ct->pc);
}

/* prefilled: y already holds the bias (and a residual): every GEMM accumulates. */
static int conv_im2col(DittoBackend *be, const ConvGeom *g, const float *x, const float *w, bool prefilled, float *y)
{
    const int64_t K = g->Cg * g->k_vol, P = g->out_vol;
    int64_t pc, kc;
    if (K * P <= col_limit) {
        pc = P;
        kc = K;
    } else if (col_limit / K >= min_cols) {
        pc = imin(P, col_limit / K);
        kc = K;
    } else {
        pc = imin(P, min_cols);
        kc = imax(1, imin(K, col_limit / pc));
    }
    if (K > INT_MAX || P > INT_MAX || g->Og > INT_MAX)
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "op conv: reduction or output size exceeds the BLAS int range");
    float *col = ditto_malloc_aligned(sizeof(float) * (size_t)(pc * kc));
    if (!col)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op conv: cannot allocate %lld floats of column scratch",
                          (long long)(pc * kc));
    for (int64_t n = 0; n < g->N; n++) {
        for (int64_t gi = 0; gi < g->G; gi++) {
            const float *xg = x + (n * g->C + gi * g->Cg) * g->in_vol;
            const float *wg = w + gi * g->Og * K;
            float *yg = y + (n * g->O + gi * g->Og) * P;
            for (int64_t p0 = 0; p0 < P; p0 += pc) {
                int64_t pcur = imin(pc, P - p0);
                for (int64_t k0 = 0; k0 < K; k0 += kc) {
                    ColTask ct = { g, xg, col, k0, imin(kc, K - k0), p0, pcur, 0 };
                    ct.ntasks = ntasks_for(be, ct.kc);
                    ditto_pool_run(be->pool, ct.ntasks, col_task, &ct);
                    /* y_g[:, p0:p0+pcur] (+)= w_g[:, k0:k0+kc] col */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->Og, (int)pcur, (int)ct.kc, 1.0f,
                                wg + k0, (int)K, col, (int)pcur, prefilled || k0 > 0 ? 1.0f : 0.0f, yg + p0, (int)P);
                }
            }
        }
    }
    ditto_free_aligned(col);
    return 0;
}

static bool is_pointwise(const ConvGeom *g)
{
    for (int i = 0; i < 3; i++)
        if (g->k[i] != 1 || g->s[i] != 1 || g->pb[i] != 0 || g->out[i] != g->in[i])
            return false;
    return true;
}

/* NCHW convolution without the relu; p->accumulate: onto y's values. */
static int conv_nchw(DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w,
                     const DittoTensor *bias, DittoTensor *y)
{
    ConvGeom g;
    conv_geom(p, x, w, y, &g);
    if (g.N * g.O * g.out_vol == 0)
        return 0;
    const float *bv = bias ? bias->data : NULL;
    const bool acc = p->accumulate;
    if (g.Cg == 1) {
        DirectTask d = { &g, x->data, w->data, bv, y->data, g.N * g.O, 0, acc };
        d.ntasks = ntasks_for(be, d.planes);
        ditto_pool_run(be->pool, d.ntasks, direct_task, &d);
        return 0;
    }
    bool empty = g.Cg * g.k_vol == 0;  /* nothing to reduce: y = bias or 0 (+ y with acc) */
    if (bv)
        bias_fill(be, &g, bv, acc, y->data);
    else if (empty && !acc)
        memset(y->data, 0, sizeof(float) * (size_t)(g.N * g.O * g.out_vol));
    if (empty)
        return 0;
    const bool prefilled = bv || acc;
    if (is_pointwise(&g)) {
        const int64_t P = g.out_vol;
        if (P > INT_MAX || g.Og > INT_MAX || g.Cg > INT_MAX)
            return ditto_fail(&be->log, DITTO_ERR_RANGE, "op conv: size exceeds the BLAS int range");
        const float *X = x->data, *W = w->data;
        float *Y = y->data;
        for (int64_t n = 0; n < g.N; n++)
            for (int64_t gi = 0; gi < g.G; gi++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g.Og, (int)P, (int)g.Cg, 1.0f,
                            W + gi * g.Og * g.Cg, (int)g.Cg, X + (n * g.C + gi * g.Cg) * P, (int)P,
                            prefilled ? 1.0f : 0.0f, Y + (n * g.O + gi * g.Og) * P, (int)P);
        return 0;
    }
    return conv_im2col(be, &g, x->data, w->data, prefilled, y->data);
}

/* ---- layout helpers and the relu epilogue ---- */

#define TR_BLOCK 32

typedef struct TransposeTask {
    const float *x;
    float *y;
    int64_t rows, cols, rblocks, items;
    int ntasks;
} TransposeTask;

static void transpose_task(void *ctx, int t)
{
    const TransposeTask *k = ctx;
    int64_t lo = k->items * t / k->ntasks, hi = k->items * (t + 1) / k->ntasks;
    for (int64_t it = lo; it < hi; it++) {   /* it = n * rblocks + row block */
        int64_t n = it / k->rblocks, r0 = it % k->rblocks * TR_BLOCK, r1 = imin(r0 + TR_BLOCK, k->rows);
        const float *x = k->x + n * k->rows * k->cols;
        float *y = k->y + n * k->rows * k->cols;
        for (int64_t c0 = 0; c0 < k->cols; c0 += TR_BLOCK) {
            int64_t c1 = imin(c0 + TR_BLOCK, k->cols);
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++)
                    y[c * k->rows + r] = x[r * k->cols + c];
        }
    }
}

void ditto_cpu_transpose(DittoBackend *be, const float *x, float *y, int64_t n, int64_t rows, int64_t cols)
{
    TransposeTask k = { x, y, rows, cols, (rows + TR_BLOCK - 1) / TR_BLOCK, 0, 0 };
    k.items = n * k.rblocks;
    if (k.items == 0 || cols == 0)
        return;
    k.ntasks = ntasks_for(be, k.items);
    ditto_pool_run(be->pool, k.ntasks, transpose_task, &k);
}

typedef struct ReluTask {
    float *y;
    int64_t n;
    int ntasks;
} ReluTask;

static void relu_task(void *ctx, int t)
{
    const ReluTask *k = ctx;
    for (int64_t i = k->n * t / k->ntasks, e = k->n * (t + 1) / k->ntasks; i < e; i++)
        k->y[i] = k->y[i] > 0.0f ? k->y[i] : 0.0f;   /* the unary op's relu */
}

static void relu_inplace(DittoBackend *be, float *y, int64_t n)
{
    ReluTask k = { y, n, 0 };
    k.ntasks = ntasks_for(be, (n + 4095) / 4096);
    ditto_pool_run(be->pool, k.ntasks, relu_task, &k);
}

/*
 * Channels-last (p->nhwc): x (and with p->accumulate y) transposed into NCHW
 * scratch, the NCHW code, the result transposed back (p->y_first: written
 * in place), so every value is the NCHW path's. relu after the bias (and
 * the residual).
 */
static int cpu_conv_w(DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w,
                      const DittoTensor *bias, DittoTensor *y);

/* A channels-last w (O, C/groups, k...) stored (O, k..., C/groups): the convolution of a contiguous copy. */
static int cpu_conv(DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w,
                    const DittoTensor *bias, DittoTensor *y)
{
    if (ditto_tensor_is_contiguous(w))
        return cpu_conv_w(be, p, x, w, bias, y);
    const int64_t O = w->shape[0], Cg = w->shape[1], n = ditto_tensor_numel(w), kvol = O && Cg ? n / (O * Cg) : 0;
    float *wc = ditto_malloc_aligned(sizeof(float) * (size_t)(n + 1));
    if (!wc)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op conv: cannot allocate %lld floats for the weights", (long long)n);
    ditto_cpu_transpose(be, w->data, wc, O, kvol, Cg);   /* (O, k..., C/groups) -> (O, C/groups, k...) */
    DittoTensor wt = *w;
    wt.data = wc;
    ditto_tensor_set_contiguous(&wt);
    int rc = cpu_conv_w(be, p, x, &wt, bias, y);
    ditto_free_aligned(wc);
    return rc;
}

static int cpu_conv_w(DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w,
                      const DittoTensor *bias, DittoTensor *y)
{
    if (!p->nhwc) {
        DITTO_TRY(conv_nchw(be, p, x, w, bias, y));
        if (p->relu)
            relu_inplace(be, y->data, ditto_tensor_numel(y));
        return 0;
    }
    /* (N, *in, C) and (N, *out, O): 2-D or 3-D */
    const int nd = x->ndim;
    const int64_t N = x->shape[0], C = x->shape[nd - 1], O = y->shape[p->y_first ? 1 : nd - 1];
    int64_t vin = 1, vout = 1, xsh[5] = { N, C }, ysh[5] = { N, O };
    for (int i = 1; i < nd - 1; i++) {
        vin *= x->shape[i];
        vout *= y->shape[p->y_first ? i + 1 : i];
        xsh[i + 1] = x->shape[i];
        ysh[i + 1] = y->shape[p->y_first ? i + 1 : i];
    }
    const int64_t nx = N * C * vin, ny = N * O * vout;
    float *xs = ditto_malloc_aligned(sizeof(float) * (size_t)(nx + ny + 1));
    if (!xs)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op conv: cannot allocate %lld floats of layout scratch", (long long)(nx + ny));
    float *ys = xs + nx;
    DittoConvParams q = *p;
    q.nhwc = false;
    DittoTensor xt = ditto_tensor_f32(xs, nd, xsh);
    DittoTensor yt = ditto_tensor_f32(ys, nd, ysh);
    ditto_cpu_transpose(be, x->data, xs, N, vin, C);     /* (N, vol, C) -> (N, C, vol) */
    if (p->accumulate)
        ditto_cpu_transpose(be, y->data, ys, N, vout, O);   /* the residual: (N, ovol, O) -> (N, O, ovol) */
    if (p->y_first) {   /* y is already the NCHW result's layout (no accumulate) */
        q.y_first = false;
        int rc = conv_nchw(be, &q, &xt, w, bias, y);
        if (rc >= 0 && p->relu)
            relu_inplace(be, y->data, ny);
        ditto_free_aligned(xs);
        return rc;
    }
    int rc = conv_nchw(be, &q, &xt, w, bias, &yt);
    if (rc >= 0) {
        if (p->relu)
            relu_inplace(be, ys, ny);
        ditto_cpu_transpose(be, ys, y->data, N, O, vout);   /* (N, O, ovol) -> (N, ovol, O) */
    }
    ditto_free_aligned(xs);
    return rc;
}

void ditto_cpu_init_conv(DittoOps *ops)
{
    ops->conv = cpu_conv;
}
