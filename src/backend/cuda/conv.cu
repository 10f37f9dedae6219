/*
 * CUDA convolution (cross-correlation) on cuDNN's convolution API, 1-D/2-D/3-D:
 * a 1-D conv runs as 2-D with H = 1. x, w, y share a dtype (f32 or f16); the
 * bias may be f32 or f16.
 *
 * Precision: the compute type is fp32 in both cases. f32 runs with
 * CUDNN_FMA_MATH (no TF32), so results match the CPU oracle; f16 storage runs
 * with tensor-op math (PSEUDO_HALF: fp16 data, fp32 accumulation). Only the
 * GEMM-like algorithms are used (implicit / precomputed implicit GEMM, GEMM,
 * direct): FFT and Winograd transform the data and lose accuracy.
 *
 * Plans: the first call for a (dtype, geometry) builds cuDNN descriptors for
 * ONE item (N = 1) and picks the algorithm with cudnnGetConvolutionForward-
 * Algorithm_v7 (heuristics: deterministic from run to run, launches nothing,
 * so it is also safe during stream capture); the plan is cached on the
 * backend. Batches run item by item with that plan, so an item gets the same
 * algorithm, and the same bits, whatever the batch size (cuDNN may otherwise
 * choose its kernels by N).
 *
 * Bias: y is prefilled with the bias and cuDNN adds the convolution onto it
 * (beta = 1), one rounding per output also for f16.
 *
 * Padding: cuDNN pads symmetrically. When pad_begin != pad_end in some dim,
 * each item is copied into a zero-padded buffer in the workspace (k_pad) and
 * convolved without padding.
 */
#include <limits.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

extern "C" {
#include "core/mem.h"
}

/* Largest cuDNN workspace a plan may ask for. */
#define CONV_WS_LIMIT ((size_t)256 << 20)
#define KEY_LEN 24

/* Everything as 3 spatial dims (D, H, W); leading dims of 1-D/2-D convs are 1. */
typedef struct ConvGeom {
    int ns;
    int64_t N, C, O, G, Cg;
    int64_t in[3], k[3], out[3], s[3], d[3], pb[3], pe[3];
    int64_t in_vol, out_vol, k_vol;
} ConvGeom;

typedef struct ConvPlan {
    int64_t key[KEY_LEN];
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;                /* cuDNN workspace bytes for algo */
    bool pre_pad;             /* asymmetric padding: convolve a padded copy */
    int64_t pin[3];           /* input extents cuDNN sees (padded when pre_pad) */
} ConvPlan;

struct DittoCudaConvCache {
    ConvPlan *plans;
    int n, cap;
};

static void conv_geom(const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *y, ConvGeom *g)
{
    int ns = x->ndim - 2;
    g->ns = ns;
    g->N = x->shape[0];
    g->C = x->shape[1];
    g->O = w->shape[0];
    g->G = p->groups ? p->groups : 1;
    g->Cg = g->C / g->G;
    g->in_vol = g->out_vol = g->k_vol = 1;
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - ns);
        if (j < 0) {
            g->in[i] = g->k[i] = g->out[i] = g->s[i] = g->d[i] = 1;
            g->pb[i] = g->pe[i] = 0;
        } else {
            g->in[i] = x->shape[2 + j];
            g->k[i] = w->shape[2 + j];
            g->out[i] = y->shape[2 + j];
            g->s[i] = p->stride[j] ? p->stride[j] : 1;
            g->d[i] = p->dilation[j] ? p->dilation[j] : 1;
            g->pb[i] = p->pad_begin[j];
            g->pe[i] = p->pad_end[j];
        }
        g->in_vol *= g->in[i];
        g->out_vol *= g->out[i];
        g->k_vol *= g->k[i];
    }
}

static void make_key(const ConvGeom *g, DittoDType dt, int64_t *key)
{
    memset(key, 0, sizeof(int64_t) * KEY_LEN);
    int64_t *k = key;
    *k++ = dt;
    *k++ = g->ns;
    *k++ = g->C;
    *k++ = g->O;
    *k++ = g->G;
    for (int i = 0; i < 3; i++) {
        *k++ = g->in[i];
        *k++ = g->k[i];
        *k++ = g->s[i];
        *k++ = g->d[i];
        *k++ = g->pb[i];
        *k++ = g->pe[i];
    }
}

static void plan_destroy(ConvPlan *pl)
{
    if (pl->xd)
        cudnnDestroyTensorDescriptor(pl->xd);
    if (pl->yd)
        cudnnDestroyTensorDescriptor(pl->yd);
    if (pl->wd)
        cudnnDestroyFilterDescriptor(pl->wd);
    if (pl->cd)
        cudnnDestroyConvolutionDescriptor(pl->cd);
    pl->xd = pl->yd = NULL;
    pl->wd = NULL;
    pl->cd = NULL;
}

void ditto_cuda_conv_cache_free(DittoCuda *cu)
{
    DittoCudaConvCache *c = cu->conv_cache;
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        plan_destroy(&c->plans[i]);
    ditto_free(c->plans);
    ditto_free(c);
    cu->conv_cache = NULL;
}

static bool algo_allowed(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}

/* Set the math type and take algo when cuDNN supports it here within the workspace limit. */
static bool try_algo(DittoCuda *cu, ConvPlan *pl, cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t mt)
{
    if (cudnnSetConvolutionMathType(pl->cd, mt) != CUDNN_STATUS_SUCCESS)
        return false;
    size_t ws = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(cu->cudnn, pl->xd, pl->wd, pl->cd, pl->yd, algo, &ws) != CUDNN_STATUS_SUCCESS ||
        ws > CONV_WS_LIMIT)
        return false;
    pl->algo = algo;
    pl->ws = ws;
    return true;
}

static int plan_choose(DittoBackend *be, ConvPlan *pl, bool f16)
{
    DittoCuda *cu = ditto_cuda(be);
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    DITTO_CUDNN_CHECK(be, cudnnGetConvolutionForwardAlgorithm_v7(cu->cudnn, pl->xd, pl->wd, pl->cd, pl->yd,
                                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
    for (int i = 0; i < got && i < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !algo_allowed(perf[i].algo))
            continue;
        cudnnMathType_t mt = perf[i].mathType;
        if (!f16) {
            /* f32: never a tensor-core (TF32 or converting) kernel */
            if (mt == CUDNN_TENSOR_OP_MATH || mt == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
                continue;
            mt = CUDNN_FMA_MATH;
        }
        if (try_algo(cu, pl, perf[i].algo, mt))
            return 0;
    }
    /* heuristics offered nothing usable: the GEMM-like algorithms in a fixed order */
    static const cudnnConvolutionFwdAlgo_t fallback[] = {
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
    };
    for (size_t i = 0; i < sizeof fallback / sizeof *fallback; i++)
        if (try_algo(cu, pl, fallback[i], f16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH))
            return 0;
    return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op conv: cuDNN offers no usable forward algorithm for this convolution");
}

static bool fits_int(int64_t v)
{
    return v >= 0 && v <= INT_MAX;
}

/* Descriptors for one item (N = 1), then the algorithm. pl->key is set by the caller. */
static int plan_setup(DittoBackend *be, const ConvGeom *g, DittoDType dt, ConvPlan *pl)
{
    bool f16 = dt == DITTO_F16;
    cudnnDataType_t ddt = f16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    int nsd = g->ns == 1 ? 2 : g->ns, nd = nsd + 2;
    pl->pre_pad = false;
    for (int i = 0; i < 3; i++)
        pl->pre_pad = pl->pre_pad || g->pb[i] != g->pe[i];
    int64_t pin_vol = 1;
    for (int i = 0; i < 3; i++) {
        pl->pin[i] = pl->pre_pad ? g->in[i] + g->pb[i] + g->pe[i] : g->in[i];
        pin_vol *= pl->pin[i];
    }
    bool ok = fits_int(g->C * pin_vol) && fits_int(g->O * g->out_vol) && fits_int(g->O * g->Cg * g->k_vol) &&
              fits_int(g->G);
    for (int i = 0; i < 3; i++)
        ok = ok && fits_int(g->pb[i]) && fits_int(g->s[i]) && fits_int(g->d[i]);
    if (!ok)
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "op conv: an item exceeds cuDNN's int range");
    int xdim[5], xstr[5], ydim[5], ystr[5], wdim[5], pad[3], str[3], dil[3];
    xdim[0] = ydim[0] = 1;
    xdim[1] = (int)g->C;
    ydim[1] = wdim[0] = (int)g->O;
    wdim[1] = (int)g->Cg;
    for (int j = 0; j < nsd; j++) {
        int i = 3 - nsd + j;
        xdim[2 + j] = (int)pl->pin[i];
        ydim[2 + j] = (int)g->out[i];
        wdim[2 + j] = (int)g->k[i];
        pad[j] = pl->pre_pad ? 0 : (int)g->pb[i];
        str[j] = (int)g->s[i];
        dil[j] = (int)g->d[i];
    }
    xstr[nd - 1] = ystr[nd - 1] = 1;
    for (int j = nd - 2; j >= 0; j--) {
        xstr[j] = xstr[j + 1] * xdim[j + 1];
        ystr[j] = ystr[j + 1] * ydim[j + 1];
    }
    DITTO_CUDNN_CHECK(be, cudnnCreateTensorDescriptor(&pl->xd));
    DITTO_CUDNN_CHECK(be, cudnnCreateTensorDescriptor(&pl->yd));
    DITTO_CUDNN_CHECK(be, cudnnCreateFilterDescriptor(&pl->wd));
    DITTO_CUDNN_CHECK(be, cudnnCreateConvolutionDescriptor(&pl->cd));
    DITTO_CUDNN_CHECK(be, cudnnSetTensorNdDescriptor(pl->xd, ddt, nd, xdim, xstr));
    DITTO_CUDNN_CHECK(be, cudnnSetTensorNdDescriptor(pl->yd, ddt, nd, ydim, ystr));
    DITTO_CUDNN_CHECK(be, cudnnSetFilterNdDescriptor(pl->wd, ddt, CUDNN_TENSOR_NCHW, nd, wdim));
    DITTO_CUDNN_CHECK(be, cudnnSetConvolutionNdDescriptor(pl->cd, nsd, pad, str, dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DITTO_CUDNN_CHECK(be, cudnnSetConvolutionGroupCount(pl->cd, (int)g->G));
    DITTO_CUDNN_CHECK(be, cudnnSetConvolutionMathType(pl->cd, f16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    int odim[5];
    DITTO_CUDNN_CHECK(be, cudnnGetConvolutionNdForwardOutputDim(pl->cd, pl->xd, pl->wd, nd, odim));
    for (int j = 0; j < nd; j++)
        if (odim[j] != ydim[j])
            return ditto_fail(&be->log, DITTO_ERR_BACKEND, "op conv: cuDNN output dim %d is %d, expected %d", j, odim[j], ydim[j]);
    return plan_choose(be, pl, f16);
}

static int plan_get(DittoBackend *be, const ConvGeom *g, DittoDType dt, ConvPlan **out)
{
    DittoCuda *cu = ditto_cuda(be);
    int64_t key[KEY_LEN];
    make_key(g, dt, key);
    DittoCudaConvCache *c = cu->conv_cache;
    if (c) {
        for (int i = 0; i < c->n; i++) {
            if (!memcmp(c->plans[i].key, key, sizeof key)) {
                *out = &c->plans[i];
                return 0;
            }
        }
    } else {
        c = (DittoCudaConvCache *)ditto_calloc(1, sizeof *c);
        if (!c)
            return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op conv: cannot allocate the plan cache");
        cu->conv_cache = c;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 32;
        ConvPlan *p = (ConvPlan *)ditto_realloc(c->plans, sizeof(ConvPlan) * (size_t)cap);
        if (!p)
            return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op conv: cannot grow the plan cache");
        c->plans = p;
        c->cap = cap;
    }
    ConvPlan *pl = &c->plans[c->n];
    memset(pl, 0, sizeof *pl);
    memcpy(pl->key, key, sizeof key);
    int rc = plan_setup(be, g, dt, pl);
    if (rc < 0) {
        plan_destroy(pl);
        return rc;
    }
    c->n++;
    *out = pl;
    return 0;
}

/* ---- kernels ---- */

/* y (N, O, vol) = bias[o], or 0 without a bias. */
static __global__ void k_bias_fill(const void *bias, bool bf16, void *y, bool yf16, int64_t O, int64_t vol, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        ditto_st(y, i, bias ? ditto_ld(bias, i / vol % O, bf16) : 0.0f, yf16);
}

/* xp (C, PD, PH, PW) = x (C, D, H, W) placed at (bd, bh, bw), zeros around; bit copies of esz-byte elements. */
static __global__ void k_pad(const void *x, void *xp, int esz, int64_t D, int64_t H, int64_t W, int64_t PD, int64_t PH,
                             int64_t PW, int64_t bd, int64_t bh, int64_t bw, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t pw = i % PW, t = i / PW;
        int64_t ph = t % PH;
        t /= PH;
        int64_t pd = t % PD, c = t / PD;
        int64_t sd = pd - bd, sh = ph - bh, sw = pw - bw;
        bool in = sd >= 0 && sd < D && sh >= 0 && sh < H && sw >= 0 && sw < W;
        int64_t src = ((c * D + sd) * H + sh) * W + sw;
        if (esz == 2)
            ((uint16_t *)xp)[i] = in ? ((const uint16_t *)x)[src] : (uint16_t)0;
        else
            ((uint32_t *)xp)[i] = in ? ((const uint32_t *)x)[src] : 0u;
    }
}

static int cuda_conv(DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w,
                     const DittoTensor *bias, DittoTensor *y)
{
    DittoDType dt = x->dtype;
    if ((dt != DITTO_F32 && dt != DITTO_F16) || w->dtype != dt || y->dtype != dt ||
        (bias && bias->dtype != DITTO_F32 && bias->dtype != DITTO_F16))
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op conv: the cuda backend needs x, w, y all f32 or all f16"
                          " (got %s, %s, %s) and an f32/f16 bias", ditto_dtype_name(x->dtype), ditto_dtype_name(w->dtype),
                          ditto_dtype_name(y->dtype));
    ConvGeom g;
    conv_geom(p, x, w, y, &g);
    if (g.N * g.O * g.out_vol == 0)
        return 0;
    DittoCuda *cu = ditto_cuda(be);
    bool f16 = dt == DITTO_F16;
    int64_t ny = g.N * g.O * g.out_vol;
    k_bias_fill<<<ditto_cuda_blocks(ny, 256), 256, 0, cu->stream>>>(bias ? bias->data : NULL,
                                                                    bias && bias->dtype == DITTO_F16, y->data, f16, g.O,
                                                                    g.out_vol, ny);
    DITTO_CUDA_LAUNCHED(be);
    /* nothing to reduce (no input channels or an empty input): every tap reads zeros, y = bias or 0 */
    if (g.C == 0 || g.in_vol == 0)
        return 0;
    ConvPlan *pl;
    DITTO_TRY(plan_get(be, &g, dt, &pl));
    size_t esz = ditto_dtype_size(dt);
    size_t item_in = (size_t)(g.C * g.in_vol) * esz, item_out = (size_t)(g.O * g.out_vol) * esz;
    int64_t pad_n = pl->pre_pad ? g.C * pl->pin[0] * pl->pin[1] * pl->pin[2] : 0;
    size_t pad_bytes = ((size_t)pad_n * esz + 255) & ~(size_t)255;
    char *ws = NULL;
    if (pad_bytes + pl->ws > 0)
        DITTO_TRY(ditto_cuda_workspace(be, pad_bytes + pl->ws, (void **)&ws));
    const float one = 1.0f;
    for (int64_t n = 0; n < g.N; n++) {
        const char *xi = (const char *)x->data + (size_t)n * item_in;
        if (pl->pre_pad) {
            k_pad<<<ditto_cuda_blocks(pad_n, 256), 256, 0, cu->stream>>>(xi, ws, (int)esz, g.in[0], g.in[1], g.in[2],
                                                                         pl->pin[0], pl->pin[1], pl->pin[2], g.pb[0],
                                                                         g.pb[1], g.pb[2], pad_n);
            DITTO_CUDA_LAUNCHED(be);
            xi = ws;
        }
        DITTO_CUDNN_CHECK(be, cudnnConvolutionForward(cu->cudnn, &one, pl->xd, xi, pl->wd, w->data, pl->cd, pl->algo,
                                                      pl->ws ? ws + pad_bytes : NULL, pl->ws, &one, pl->yd,
                                                      (char *)y->data + (size_t)n * item_out));
    }
    return 0;
}

void ditto_cuda_init_conv(DittoOps *ops)
{
    ops->conv = cuda_conv;
}
