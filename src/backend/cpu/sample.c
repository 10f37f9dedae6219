/*
 * CPU oracle for the resampling family: nearest upsampling, avg/max pooling,
 * pixel shuffle, grid_sample (2-D bilinear, 3-D trilinear, zeros padding)
 * and the warp network's fused keypoint fields (motion_input, motion_deform).
 * fp32 data; shapes are checked by the front ends in ops/ops.c, so only
 * internal invariants remain here. 1-D and 2-D spatial layouts are handled as
 * 3-D ones with leading extents of 1.
 */
#include <math.h>
#include <stdint.h>

#include "backend/cpu/cpu.h"

/* Work items are split into at most this many contiguous ranges per call. */
#define MAX_TASKS 1024

static int task_count(int64_t n)
{
    return n < MAX_TASKS ? (int)n : MAX_TASKS;
}

static void task_range(int64_t n, int ntasks, int t, int64_t *lo, int64_t *hi)
{
    *lo = n * t / ntasks;
    *hi = n * (t + 1) / ntasks;
}

/* Spatial extents of t (N, C, *s) right-aligned into (D, H, W). */
static void spatial3(const DittoTensor *t, int64_t *s)
{
    int ns = t->ndim - 2;
    for (int i = 0; i < 3; i++)
        s[i] = i < 3 - ns ? 1 : t->shape[2 + i - (3 - ns)];
}

/* ---- upsample_nearest: y[o] = x[floor(o * in / out)] per dim, exact integers ---- */

typedef struct UpCtx {
    const float *x;
    float *y;
    int64_t in[3], out[3];
    int64_t rows;            /* N * C * out D * out H */
    int ntasks;
} UpCtx;

static void up_task(void *arg, int t)
{
    const UpCtx *u = arg;
    int64_t lo, hi;
    task_range(u->rows, u->ntasks, t, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t oh = r % u->out[1], od = r / u->out[1] % u->out[0], nc = r / u->out[1] / u->out[0];
        int64_t id = od * u->in[0] / u->out[0], ih = oh * u->in[1] / u->out[1];
        const float *src = u->x + ((nc * u->in[0] + id) * u->in[1] + ih) * u->in[2];
        float *dst = u->y + r * u->out[2];
        for (int64_t ow = 0; ow < u->out[2]; ow++)
            dst[ow] = src[ow * u->in[2] / u->out[2]];
    }
}

static int cpu_upsample_nearest(DittoBackend *be, const DittoTensor *x, DittoTensor *y)
{
    UpCtx u = { .x = x->data, .y = y->data };
    spatial3(x, u.in);
    spatial3(y, u.out);
    u.rows = x->shape[0] * x->shape[1] * u.out[0] * u.out[1];
    u.ntasks = task_count(u.rows);
    ditto_pool_run(be->pool, u.ntasks, up_task, &u);
    return 0;
}

/* ---- pool ---- */

typedef struct PoolCtx {
    const float *x;
    float *y;
    int64_t in[3], out[3];
    int k[3], s[3], pb[3], pe[3];
    bool is_max, include_pad;
    int64_t planes;          /* N * C */
    int ntasks;
} PoolCtx;

static void pool_task(void *arg, int t)
{
    const PoolCtx *p = arg;
    int64_t lo, hi;
    task_range(p->planes, p->ntasks, t, &lo, &hi);
    int64_t in_plane = p->in[0] * p->in[1] * p->in[2];
    for (int64_t nc = lo; nc < hi; nc++) {
        const float *xp = p->x + nc * in_plane;
        float *yp = p->y + nc * p->out[0] * p->out[1] * p->out[2];
        for (int64_t od = 0; od < p->out[0]; od++)
        for (int64_t oh = 0; oh < p->out[1]; oh++)
        for (int64_t ow = 0; ow < p->out[2]; ow++) {
            /* Window [b, e) clipped to the padded input gives the
             * count_include_pad divisor (a ceil_mode window hanging past the
             * padding is not counted); clipped to the input, the real one. */
            const int64_t o[3] = { od, oh, ow };
            int64_t b[3], e[3], padded = 1, real = 1;
            for (int i = 0; i < 3; i++) {
                int64_t wb = o[i] * p->s[i] - p->pb[i];
                int64_t we = wb + p->k[i];
                if (we > p->in[i] + p->pe[i])
                    we = p->in[i] + p->pe[i];
                padded *= we - wb;
                b[i] = wb < 0 ? 0 : wb;
                e[i] = we > p->in[i] ? p->in[i] : we;
                real *= e[i] > b[i] ? e[i] - b[i] : 0;
            }
            float acc = p->is_max ? -INFINITY : 0.0f;
            for (int64_t d = b[0]; d < e[0]; d++)
            for (int64_t h = b[1]; h < e[1]; h++) {
                const float *row = xp + (d * p->in[1] + h) * p->in[2];
                for (int64_t w = b[2]; w < e[2]; w++) {
                    float v = row[w];
                    if (!p->is_max)
                        acc += v;
                    else if (v > acc || v != v)   /* NaN propagates, as in PyTorch */
                        acc = v;
                }
            }
            if (!p->is_max) {
                int64_t div = p->include_pad ? padded : real;
                acc = div > 0 ? acc / (float)div : 0.0f;
            }
            yp[(od * p->out[1] + oh) * p->out[2] + ow] = acc;
        }
    }
}

static int cpu_pool(DittoBackend *be, const DittoPoolParams *prm, const DittoTensor *x, DittoTensor *y)
{
    PoolCtx p = { .x = x->data, .y = y->data, .is_max = prm->kind == DITTO_POOL_MAX,
                  .include_pad = prm->count_include_pad };
    int ns = x->ndim - 2;
    spatial3(x, p.in);
    spatial3(y, p.out);
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - ns);   /* params index of this slot, < 0 for padded slots */
        p.k[i] = j < 0 ? 1 : prm->kernel[j];
        p.s[i] = j < 0 ? 1 : (prm->stride[j] ? prm->stride[j] : prm->kernel[j]);
        p.pb[i] = j < 0 ? 0 : prm->pad_begin[j];
        p.pe[i] = j < 0 ? 0 : prm->pad_end[j];
    }
    p.planes = x->shape[0] * x->shape[1];
    p.ntasks = task_count(p.planes);
    ditto_pool_run(be->pool, p.ntasks, pool_task, &p);
    return 0;
}

/* ---- pixel_shuffle: y[n, c, h r + i, w r + j] = x[n, c r^2 + i r + j, h, w] ---- */

typedef struct ShuffleCtx {
    const float *x;
    float *y;
    int64_t h, w;            /* input spatial size */
    int64_t sn, sc, sh, sw;  /* x's strides */
    int r;
    int64_t cout;            /* output channels */
    int64_t rows;            /* N * C_out * H r */
    int ntasks;
} ShuffleCtx;

static void shuffle_task(void *arg, int t)
{
    const ShuffleCtx *s = arg;
    int64_t lo, hi, r = s->r, ho = s->h * r, wo = s->w * r;
    task_range(s->rows, s->ntasks, t, &lo, &hi);
    for (int64_t row = lo; row < hi; row++) {
        int64_t oh = row % ho, nc = row / ho;     /* nc = n * C_out + c */
        int64_t n = nc / s->cout, c = nc % s->cout, h = oh / r, i = oh % r;
        float *dst = s->y + row * wo;
        for (int64_t ow = 0; ow < wo; ow++) {
            int64_t w = ow / r, j = ow % r;
            int64_t ci = c * r * r + i * r + j;
            dst[ow] = s->x[n * s->sn + ci * s->sc + h * s->sh + w * s->sw];
        }
    }
}

/* The shuffle, then the activation in place (the unary op's own arithmetic). */
static int cpu_pixel_shuffle(DittoBackend *be, const DittoShuffleParams *p, const DittoTensor *x, DittoTensor *y)
{
    ShuffleCtx s = { .x = x->data, .y = y->data, .h = x->shape[2], .w = x->shape[3], .r = p->factor, .cout = y->shape[1] };
    s.sn = x->stride[0];
    s.sc = x->stride[1];
    s.sh = x->stride[2];
    s.sw = x->stride[3];
    s.rows = y->shape[0] * y->shape[1] * y->shape[2];
    s.ntasks = task_count(s.rows);
    ditto_pool_run(be->pool, s.ntasks, shuffle_task, &s);
    return p->act.kind == DITTO_UNARY_IDENTITY ? 0 : be->ops.unary(be, &p->act, y, y);
}

/* ---- grid_sample ---- */

/*
 * PyTorch's unnormalisation in fp32: align_corners maps -1/+1 to the centres
 * of the first/last pixel, otherwise to their outer edges.
 */
static float unnormalize(float g, int64_t size, bool align_corners)
{
    if (align_corners)
        return (g + 1.0f) / 2.0f * (float)(size - 1);
    return ((g + 1.0f) * (float)size - 1.0f) / 2.0f;
}

/*
 * Corners floor(c) and floor(c)+1 along one axis, weights (1-f, f) written as
 * PyTorch does ((i0+1) - c and c - i0). Coordinates outside (-2, size+1),
 * and NaN, touch no pixel at all; the test also keeps the integer
 * conversion in range. Returns false then.
 */
typedef struct Axis {
    int64_t i0;
    float w0, w1;
    bool ok0, ok1;           /* corner inside [0, size) */
} Axis;

static bool axis_taps(float c, int64_t size, Axis *a)
{
    if (!(c > -2.0f && c < (float)size + 1.0f))
        return false;
    float f0 = floorf(c);
    a->i0 = (int64_t)f0;
    a->w0 = (f0 + 1.0f) - c;
    a->w1 = c - f0;
    a->ok0 = a->i0 >= 0 && a->i0 < size;
    a->ok1 = a->i0 + 1 >= 0 && a->i0 + 1 < size;
    return a->ok0 || a->ok1;
}

/* Output points handled per block: their taps are computed once, then every
 * channel runs over the block (contiguous writes, gathers within one plane). */
#define GS_BLOCK 64

typedef struct GridCtx {
    const float *x, *grid;
    float *y;
    int64_t C, D, H, W;      /* input; D = 1 for 2-D */
    int64_t Do, Ho, Wo;      /* output; Do = 1 for 2-D */
    bool three_d, align_corners;
    int64_t slices;          /* N * Do (3-D) or N * Ho (2-D) */
    int ntasks;
} GridCtx;

typedef struct GridBlock {
    int n[GS_BLOCK];             /* taps per point: 0..8, 8 (or 4 in 2-D) = all inside */
    int64_t off[GS_BLOCK][8];    /* offsets inside one input channel plane */
    float w[GS_BLOCK][8];
} GridBlock;

/*
 * Taps of one output point in PyTorch's accumulation order: z0 before z1,
 * then (y0,x0), (y0,x1), (y1,x0), (y1,x1); weights wx*wy*wz left to right.
 * Corners outside the input are left out (zeros padding). Returns the count.
 */
static int point_taps(const GridCtx *g, const float *gp, int64_t *off, float *w)
{
    Axis ax, ay, az = { 0, 1.0f, 0.0f, true, false };
    if (!axis_taps(unnormalize(gp[0], g->W, g->align_corners), g->W, &ax) ||
        !axis_taps(unnormalize(gp[1], g->H, g->align_corners), g->H, &ay))
        return 0;
    if (g->three_d && !axis_taps(unnormalize(gp[2], g->D, g->align_corners), g->D, &az))
        return 0;
    int64_t HW = g->H * g->W, base = (az.i0 * g->H + ay.i0) * g->W + ax.i0;
    float wyx[4] = { ax.w0 * ay.w0, ax.w1 * ay.w0, ax.w0 * ay.w1, ax.w1 * ay.w1 };
    const int64_t step[4] = { 0, 1, g->W, g->W + 1 };
    int nz = g->three_d ? 2 : 1;
    if (ax.ok0 && ax.ok1 && ay.ok0 && ay.ok1 && az.ok0 && (az.ok1 || !g->three_d)) {
        /* the common case of a smooth warp: every corner inside */
        for (int k = 0; k < 4; k++) {
            off[k] = base + step[k];
            w[k] = g->three_d ? wyx[k] * az.w0 : wyx[k];
            if (g->three_d) {
                off[4 + k] = base + HW + step[k];
                w[4 + k] = wyx[k] * az.w1;
            }
        }
        return 4 * nz;
    }
    const bool okx[2] = { ax.ok0, ax.ok1 }, oky[2] = { ay.ok0, ay.ok1 }, okz[2] = { az.ok0, az.ok1 };
    const float wz[2] = { az.w0, az.w1 };
    int n = 0;
    for (int kz = 0; kz < nz; kz++) {
        for (int k = 0; k < 4; k++) {
            if (!okz[kz] || !oky[k >> 1] || !okx[k & 1])
                continue;
            off[n] = base + kz * HW + step[k];
            w[n] = g->three_d ? wyx[k] * wz[kz] : wyx[k];
            n++;
        }
    }
    return n;
}

/* One task = a range of output slices: (n, od) in 3-D, (n, oh) in 2-D. */
static void grid_task(void *arg, int t)
{
    const GridCtx *g = arg;
    GridBlock blk;
    int64_t lo, hi;
    task_range(g->slices, g->ntasks, t, &lo, &hi);
    int nsd = g->three_d ? 3 : 2;
    int64_t in_plane = g->D * g->H * g->W, out_plane = g->Do * g->Ho * g->Wo;
    /* points per slice: Ho*Wo in 3-D (one depth slice), Wo in 2-D (one row) */
    int64_t per_slice = g->three_d ? g->Ho * g->Wo : g->Wo;
    int64_t slices_per_n = g->three_d ? g->Do : g->Ho;
    for (int64_t s = lo; s < hi; s++) {
        int64_t n = s / slices_per_n;
        int64_t p0 = (s % slices_per_n) * per_slice;   /* first point within sample n */
        const float *xn = g->x + n * g->C * in_plane;
        float *yn = g->y + n * g->C * out_plane;
        const float *gn = g->grid + n * out_plane * nsd;
        for (int64_t b = 0; b < per_slice; b += GS_BLOCK) {
            int np = per_slice - b < GS_BLOCK ? (int)(per_slice - b) : GS_BLOCK;
            for (int i = 0; i < np; i++)
                blk.n[i] = point_taps(g, gn + (p0 + b + i) * nsd, blk.off[i], blk.w[i]);
            for (int64_t c = 0; c < g->C; c++) {
                const float *xc = xn + c * in_plane;
                float *yc = yn + c * out_plane + p0 + b;
                for (int i = 0; i < np; i++) {
                    const int64_t *o = blk.off[i];
                    const float *w = blk.w[i];
                    float acc = 0.0f;
                    if (blk.n[i] == 8) {
                        acc += xc[o[0]] * w[0];
                        acc += xc[o[1]] * w[1];
                        acc += xc[o[2]] * w[2];
                        acc += xc[o[3]] * w[3];
                        acc += xc[o[4]] * w[4];
                        acc += xc[o[5]] * w[5];
                        acc += xc[o[6]] * w[6];
                        acc += xc[o[7]] * w[7];
                    } else {
                        for (int k = 0; k < blk.n[i]; k++)
                            acc += xc[o[k]] * w[k];
                    }
                    yc[i] = acc;
                }
            }
        }
    }
}

static int cpu_grid_sample(DittoBackend *be, const DittoGridSampleParams *p, const DittoTensor *x,
                           const DittoTensor *grid, DittoTensor *y)
{
    GridCtx g = { .x = x->data, .grid = grid->data, .y = y->data, .C = x->shape[1],
                  .three_d = x->ndim == 5, .align_corners = p->align_corners };
    int64_t in[3], out[3];
    spatial3(x, in);
    spatial3(y, out);
    g.D = in[0], g.H = in[1], g.W = in[2];
    g.Do = out[0], g.Ho = out[1], g.Wo = out[2];
    g.slices = x->shape[0] * (g.three_d ? g.Do : g.Ho);
    g.ntasks = task_count(g.slices);
    ditto_pool_run(be->pool, g.ntasks, grid_task, &g);
    return 0;
}

/* ---- motion_input, motion_deform: the dense motion network's keypoint fields ---- */

/*
 * Sparse motion S = (G - kd) + ks and Gaussian exponent arguments of one
 * motion at grid point g: the float32 operations of the unfused chain
 * (binary sub, reduce sum of squares in double, affine by a, binary add).
 */
static void motion_point(const float *g, const float *kd, const float *ks, float a, float *S, float *ad, float *as)
{
    float t[3], u[3];
    double qd = 0.0, qs = 0.0;
    for (int i = 0; i < 3; i++) {
        t[i] = g[i] - kd[i];
        u[i] = g[i] - ks[i];
        qd += (double)t[i] * t[i];
        qs += (double)u[i] * u[i];
        S[i] = t[i] + ks[i];
    }
    *ad = a * (float)qd;
    *as = a * (float)qs;
}

/* The sparse motion alone, S = (G - kd) + ks (motion_deform: no Gaussians). */
static void sparse_motion(const float *g, const float *kd, const float *ks, float *S)
{
    for (int i = 0; i < 3; i++)
        S[i] = (g[i] - kd[i]) + ks[i];
}

typedef struct MotionCtx {
    const float *grid, *kd, *ks;     /* grid (D,H,W,3), kd / ks (N,K,3) */
    const float *x;                  /* motion_input: feat (N,c,D,H,W); motion_deform: logits (N,K+1,D,H,W) */
    float *y, *motion;               /* motion_input: y (N,(K+1)(c+1),D,H,W), S (N,K+1,D,H,W,3) or NULL */
    int64_t ysn, ysc, ysp;           /* motion_input: y's strides of item, channel, position (channels-last views too) */
    float *deform, *mask;            /* motion_deform: (N,D,H,W,3), (N,K+1,D,H,W) or NULL */
    float a;                         /* (float)(-0.5 / variance) */
    int64_t N, K, c, D, H, W;
    int64_t units;                   /* motion_input: N (K+1) D slices; motion_deform: N D slices */
    int ntasks;
} MotionCtx;

/* m = 0 is the zero keypoint of both sets */
static const float *motion_kp(const float *kp, int64_t n, int64_t K, int64_t m)
{
    static const float zero[3] = { 0.0f, 0.0f, 0.0f };
    return m == 0 ? zero : kp + (n * K + m - 1) * 3;
}

/* One task = a range of (n, m, d) slices: heatmap and the c deformed feature channels of each point. */
static void motion_input_task(void *arg, int t)
{
    const MotionCtx *mc = arg;
    const int64_t K1 = mc->K + 1, HW = mc->H * mc->W, vol = mc->D * HW, c1 = mc->c + 1;
    const GridCtx g = { .C = mc->c, .D = mc->D, .H = mc->H, .W = mc->W, .three_d = true, .align_corners = false };
    int64_t lo, hi;
    task_range(mc->units, mc->ntasks, t, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        const int64_t d = u % mc->D, m = u / mc->D % K1, n = u / mc->D / K1;
        const float *kd = motion_kp(mc->kd, n, mc->K, m), *ks = motion_kp(mc->ks, n, mc->K, m);
        const float *xn = mc->x + n * mc->c * vol;
        float *yh = mc->y + n * mc->ysn + m * c1 * mc->ysc + d * HW * mc->ysp;   /* channel m(c+1), depth d */
        for (int64_t p = 0; p < HW; p++) {
            float S[3], ad, as;
            motion_point(mc->grid + (d * HW + p) * 3, kd, ks, mc->a, S, &ad, &as);
            yh[p * mc->ysp] = expf(ad) - expf(as);
            if (mc->motion)
                for (int i = 0; i < 3; i++)
                    mc->motion[(((n * K1 + m) * mc->D + d) * HW + p) * 3 + i] = S[i];
            int64_t off[8];
            float w[8];
            const int nt = point_taps(&g, S, off, w);
            for (int64_t j = 0; j < mc->c; j++) {
                const float *xc = xn + j * vol;
                float acc = 0.0f;
                for (int k = 0; k < nt; k++)
                    acc += xc[off[k]] * w[k];
                yh[(1 + j) * mc->ysc + p * mc->ysp] = acc;
            }
        }
    }
}

static int cpu_motion_input(DittoBackend *be, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s,
                            const DittoTensor *feat, DittoTensor *y, DittoTensor *motion)
{
    MotionCtx mc = { .grid = grid->data, .kd = kp_d->data, .ks = kp_s->data, .x = feat->data, .y = y->data,
                     .motion = motion ? motion->data : NULL, .a = (float)(-0.5 / p->variance), .N = kp_d->shape[0], .K = kp_d->shape[1],
                     .c = feat->shape[1], .D = grid->shape[0], .H = grid->shape[1], .W = grid->shape[2],
                     .ysn = y->stride[0], .ysc = y->stride[1], .ysp = y->stride[4] };
    mc.units = mc.N * (mc.K + 1) * mc.D;
    mc.ntasks = task_count(mc.units);
    ditto_pool_run(be->pool, mc.ntasks, motion_input_task, &mc);
    return 0;
}

/* One task = a range of (n, d) slices: the softmax over the K+1 logits of each point, then the mask-weighted motion. */
static void motion_deform_task(void *arg, int t)
{
    const MotionCtx *mc = arg;
    const int64_t K1 = mc->K + 1, HW = mc->H * mc->W, vol = mc->D * HW;
    int64_t lo, hi;
    task_range(mc->units, mc->ntasks, t, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        const int64_t d = u % mc->D, n = u / mc->D;
        for (int64_t p = 0; p < HW; p++) {
            const float *l = mc->x + n * K1 * vol + d * HW + p;   /* logit m at l[m * vol] */
            const float *g = mc->grid + (d * HW + p) * 3;
            float mx = -INFINITY;
            double sum = 0.0, acc[3] = { 0.0, 0.0, 0.0 };
            for (int64_t m = 0; m < K1; m++)
                mx = l[m * vol] > mx ? l[m * vol] : mx;
            for (int64_t m = 0; m < K1; m++)
                sum += expf(l[m * vol] - mx);
            const double inv = 1.0 / sum;
            for (int64_t m = 0; m < K1; m++) {
                const float mk = (float)(expf(l[m * vol] - mx) * inv);
                float S[3];
                sparse_motion(g, motion_kp(mc->kd, n, mc->K, m), motion_kp(mc->ks, n, mc->K, m), S);
                for (int i = 0; i < 3; i++)
                    acc[i] += S[i] * mk;
                if (mc->mask)
                    mc->mask[n * K1 * vol + m * vol + d * HW + p] = mk;
            }
            for (int i = 0; i < 3; i++)
                mc->deform[((n * mc->D + d) * HW + p) * 3 + i] = (float)acc[i];
        }
    }
}

static int cpu_motion_deform(DittoBackend *be, const DittoMotionParams *p, const DittoTensor *grid, const DittoTensor *kp_d, const DittoTensor *kp_s,
                             const DittoTensor *logits, DittoTensor *deformation, DittoTensor *mask)
{
    MotionCtx mc = { .grid = grid->data, .kd = kp_d->data, .ks = kp_s->data, .x = logits->data, .deform = deformation->data,
                     .mask = mask ? mask->data : NULL, .a = (float)(-0.5 / p->variance), .N = kp_d->shape[0], .K = kp_d->shape[1],
                     .D = grid->shape[0], .H = grid->shape[1], .W = grid->shape[2] };
    mc.units = mc.N * mc.D;
    mc.ntasks = task_count(mc.units);
    ditto_pool_run(be->pool, mc.ntasks, motion_deform_task, &mc);
    return 0;
}

void ditto_cpu_init_sample(DittoOps *ops)
{
    ops->motion_input = cpu_motion_input;
    ops->motion_deform = cpu_motion_deform;
    ops->upsample_nearest = cpu_upsample_nearest;
    ops->pool = cpu_pool;
    ops->pixel_shuffle = cpu_pixel_shuffle;
    ops->grid_sample = cpu_grid_sample;
}
