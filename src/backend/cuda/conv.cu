/*
 * CUDA convolution (cross-correlation), 1-D/2-D/3-D; x, w, y share a dtype
 * (f32 or f16), the bias may be f32 or f16. Strategies:
 *
 * - f32: cuDNN NCHW, FMA math (no TF32), one call per item, so results match
 *   the CPU oracle; a 1-D conv runs as 2-D with H = 1.
 * - f16, O <= 16 (2-D up to 7x7, or 1x1(x1)): our direct kernel
 *   (k_conv_small_o): the image head and the compress conv; with 256 or
 *   more input channels and a kernel of 9 or more taps a GEMM per item on
 *   the tensor cores and a tap sum (conv_tap_gemm): the occlusion head.
 * - f16, 3-D "same" conv with few outputs: depth split into one 2-D conv
 *   over the slices plus a tap sum (conv_depth_split): the mask head and
 *   hourglass decoder block 4.
 * - f16 otherwise: channels-last. x is transposed to NHWC with channels
 *   padded to a multiple of 8 (tensor cores), w to KRSC, cuDNN runs with
 *   tensor-op math (fp16 data, fp32 accumulation) and the result is
 *   transposed back with the bias added (conv_nhwc). Chunks of items go in
 *   one call when the batched plan was checked bit-identical per item
 *   against the one-item plan (batch_check); else item by item. So an
 *   item's result never depends on the batch size.
 *
 * Plans: descriptors per (dtype, geometry, items per call, layout), the
 * algorithm from cudnnGetConvolutionForwardAlgorithm_v7 (heuristics:
 * deterministic, launches nothing) restricted to the GEMM-like algorithms
 * (FFT and Winograd transform the data and lose accuracy); cached on the
 * backend. Checks and workspace growth happen on first use, outside graph
 * capture (a plan first seen while capturing stays item by item).
 *
 * Engines: the legacy algorithms reach only some of cuDNN's Hopper kernels
 * (a 1x1 conv at 256x256 ran 10x slower than the best). So each channels-
 * last f16 geometry is tuned once (tune_engines): the legacy plan against
 * the graph API's heuristic engines (conv_graph.h, mode A), timed on hashed
 * operands behind a spin (no host gaps), keeping the faster; an engine
 * only when it gives the same bits per item as its one-item plan, and a
 * legacy plan that does not timed as what runs, item by item. The
 * choice holds for the geometry at every item count and is kept on disk
 * (engine_file_append), so later processes run the same kernels.
 * DITTO_CUDNN_ENGINES selects it.
 *
 * NCHW path (f32; f16 with groups or asymmetric padding): y is prefilled
 * with the bias and cuDNN adds the convolution onto it (beta = 1), one
 * rounding per output; with asymmetric padding each item is first copied
 * into a zero-padded buffer (k_pad).
 *
 * Channels-last tensors (DittoConvParams.nhwc): f16 2-D convolutions with
 * groups 1, symmetric padding and C, O multiples of 8 run cuDNN on x and y
 * themselves (conv_nhwc_direct: the conv_nhwc plans without the input and
 * output transposes), then one vectorised bias (+relu) pass; anything else
 * is transposed into NCHW layout scratch around the paths above
 * (conv_nhwc_generic). y_first (channels-first y): the depth split and the
 * tap GEMM over depth slices write it; elsewhere channels-last scratch and
 * one transpose (conv_y_first). relu: fused into k_from_nhwc or the bias
 * pass, else one more pass over y.
 *
 * DittoConvParams.accumulate (y = conv + bias + y): every epilogue that
 * writes y (k_from_nhwc, the small-O and depth-split kernels) reads the
 * residual there; the cuDNN NCHW path adds the bias to y and convolves with
 * beta = 1; the direct channels-last path convolves each chunk into scratch
 * (cuDNN with beta = 0, the checked plans unchanged) and its bias pass reads
 * that scratch and the residual and writes y once.
 *
 * Channels-last direct convolutions with a bias and a relu or a residual
 * run their epilogue inside cuDNN's kernel where that was timed faster
 * (conv_fused, below the small-O kernel); DITTO_CUDA_CONV_EPILOGUE=pass
 * keeps the separate pass.
 *
 * On sm_90 the warp's wide 3-D convolutions over rows of 64 (the
 * hourglass's last one, the mask head's depth split) run on conv_wg.cu's
 * wgmma kernel (DITTO_CUDA_WGCONV=0: cuDNN as before); see wg_direct and
 * conv_depth_split.
 *
 * DITTO_CUDA_CONV (nchw, nhwc, nhwc-batch, no-split) overrides the f16
 * strategy for measurements (nchw also sends channels-last tensors through
 * the transposes); DITTO_CUDA_DEPTH_PIECES, _DEPTH_UNFOLD and
 * _UNFOLD_SLICES vary the depth split (conv_depth_split).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/conv_graph.h"
#include "backend/cuda/conv_wg.h"

extern "C" {
#include "backend/conv_choices.h"
#include "core/mem.h"
}

/* Largest cuDNN workspace a plan may ask for. */
#define CONV_WS_LIMIT ((size_t)256 << 20)
#define KEY_LEN 25

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
    bool nhwc;                /* channels-last plan (f16): Cp, Op channels padded to a multiple of 8 */
    int64_t cp, op;
    int batch_ok;             /* nhwc plans with N > 1: each item bit-identical to the N = 1 plan (1), not (0), unchecked (-1) */
    int64_t pin[3];           /* input extents cuDNN sees (padded when pre_pad) */
    CgPlan *cg;               /* nhwc: the graph-API plan that runs instead of algo (NULL: the legacy call) */
} ConvPlan;

/* The graph-API engines for one geometry, in the order plans try them (make_key with nb = 0). */
#define CONV_MAX_ENGINES 8
typedef struct ConvEngines {
    int64_t key[KEY_LEN];
    int n;
    CgEngine eng[CONV_MAX_ENGINES];
} ConvEngines;

typedef struct FusedPlan FusedPlan;

struct DittoCudaConvCache {
    ConvPlan *plans;
    int n, cap;
    ConvEngines *engines;
    int neng, capeng;
    FusedPlan **fused;        /* conv_fused's plans, each allocated alone (pointers stay valid as the array grows) */
    int nfused, capfused;
    bool file_read;           /* the tuned choices on disk were read (engine_file) */
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

static void make_key(const ConvGeom *g, DittoDType dt, int64_t nb, bool nhwc, int64_t *key)
{
    memset(key, 0, sizeof(int64_t) * KEY_LEN);
    int64_t *k = key;
    *k++ = dt;
    *k++ = nb * 2 + nhwc;
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

/* Room for one more element in *arr (n used of *cap, esz bytes each): doubles from 32. */
static int cache_grow(DittoBackend *be, void **arr, int n, int *cap, size_t esz, const char *what)
{
    if (n < *cap)
        return 0;
    int nc = *cap ? 2 * *cap : 32;
    void *p = ditto_realloc(*arr, esz * (size_t)nc);
    if (!p)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op conv: cannot grow the %s cache", what);
    *arr = p;
    *cap = nc;
    return 0;
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
    ditto_cg_plan_free(&pl->cg);
}

static void fused_plan_free(FusedPlan *f);

void ditto_cuda_conv_cache_free(DittoCuda *cu)
{
    DittoCudaConvCache *c = cu->conv_cache;
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        plan_destroy(&c->plans[i]);
    for (int i = 0; i < c->nfused; i++)
        fused_plan_free(c->fused[i]);
    ditto_free(c->fused);
    ditto_free(c->plans);
    ditto_free(c->engines);
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
static int64_t round8(int64_t c)
{
    return (c + 7) / 8 * 8;
}

static int plan_graph(DittoBackend *be, const ConvGeom *g, int64_t nb, ConvPlan *pl);
static int engine_mode(void);

/* The legacy descriptors and algorithm of a plan of nb items. */
static int plan_setup_legacy(DittoBackend *be, const ConvGeom *g, DittoDType dt, int64_t nb, bool nhwc, ConvPlan *pl)
{
    bool f16 = dt == DITTO_F16;
    cudnnDataType_t ddt = f16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    int nsd = g->ns == 1 ? 2 : g->ns, nd = nsd + 2;
    pl->nhwc = nhwc;
    pl->batch_ok = nb == 1 ? 1 : -1;
    pl->cp = nhwc ? round8(g->C) : g->C;
    pl->op = nhwc ? round8(g->O) : g->O;
    pl->pre_pad = false;
    for (int i = 0; i < 3; i++)
        pl->pre_pad = pl->pre_pad || g->pb[i] != g->pe[i];
    int64_t pin_vol = 1;
    for (int i = 0; i < 3; i++) {
        pl->pin[i] = pl->pre_pad ? g->in[i] + g->pb[i] + g->pe[i] : g->in[i];
        pin_vol *= pl->pin[i];
    }
    bool ok = fits_int(nb * pl->cp * pin_vol) && fits_int(nb * pl->op * g->out_vol) && fits_int(pl->op * pl->cp * g->k_vol) &&
              fits_int(g->G);
    for (int i = 0; i < 3; i++)
        ok = ok && fits_int(g->pb[i]) && fits_int(g->s[i]) && fits_int(g->d[i]);
    if (!ok)
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "op conv: an item exceeds cuDNN's int range");
    int xdim[5], xstr[5], ydim[5], ystr[5], wdim[5], pad[3], str[3], dil[3];
    xdim[0] = ydim[0] = (int)nb;
    xdim[1] = (int)pl->cp;
    ydim[1] = wdim[0] = (int)pl->op;
    wdim[1] = nhwc ? (int)pl->cp : (int)g->Cg;
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
    if (nhwc) {
        DITTO_CUDNN_CHECK(be, cudnnSetTensorNdDescriptorEx(pl->xd, CUDNN_TENSOR_NHWC, ddt, nd, xdim));
        DITTO_CUDNN_CHECK(be, cudnnSetTensorNdDescriptorEx(pl->yd, CUDNN_TENSOR_NHWC, ddt, nd, ydim));
    } else {
        DITTO_CUDNN_CHECK(be, cudnnSetTensorNdDescriptor(pl->xd, ddt, nd, xdim, xstr));
        DITTO_CUDNN_CHECK(be, cudnnSetTensorNdDescriptor(pl->yd, ddt, nd, ydim, ystr));
    }
    DITTO_CUDNN_CHECK(be, cudnnSetFilterNdDescriptor(pl->wd, ddt, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, nd, wdim));
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

/* Channels-last f16 plans may then run a graph-API engine instead (engine_mode). */
static int plan_setup(DittoBackend *be, const ConvGeom *g, DittoDType dt, int64_t nb, bool nhwc, ConvPlan *pl)
{
    DITTO_TRY(plan_setup_legacy(be, g, dt, nb, nhwc, pl));
    return nhwc && dt == DITTO_F16 && g->G == 1 && !pl->pre_pad && engine_mode() ? plan_graph(be, g, nb, pl) : 0;
}

static int plan_get(DittoBackend *be, const ConvGeom *g, DittoDType dt, int64_t nb, bool nhwc, ConvPlan **out)
{
    DittoCuda *cu = ditto_cuda(be);
    int64_t key[KEY_LEN];
    make_key(g, dt, nb, nhwc, key);
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
    DITTO_TRY(cache_grow(be, (void **)&c->plans, c->n, &c->cap, sizeof(ConvPlan), "plan"));
    ConvPlan *pl = &c->plans[c->n];
    memset(pl, 0, sizeof *pl);
    memcpy(pl->key, key, sizeof key);
    int rc = plan_setup(be, g, dt, nb, nhwc, pl);
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

/* ---- channels-last (NHWC) path for f16: transposes around a cuDNN NHWC convolution ---- */

#define TT 32   /* transpose tile */

/* xt (n, vol, Cp) = x (n, C, vol); channels C..Cp-1 zero. grid (vol/TT, Cp/TT, n), block (TT, 8). */
static __global__ void k_to_nhwc(const __half *x, __half *xt, int64_t C, int64_t Cp, int64_t vol)
{
    __shared__ __half tile[TT][TT + 1];
    const int64_t n = blockIdx.z, v0 = (int64_t)blockIdx.x * TT, c0 = (int64_t)blockIdx.y * TT;
    const __half *xn = x + n * C * vol;
    for (int j = threadIdx.y; j < TT; j += blockDim.y) {
        int64_t c = c0 + j, v = v0 + threadIdx.x;
        tile[j][threadIdx.x] = c < C && v < vol ? xn[c * vol + v] : __float2half(0.0f);
    }
    __syncthreads();
    __half *xo = xt + n * vol * Cp;
    for (int j = threadIdx.y; j < TT; j += blockDim.y) {
        int64_t v = v0 + j, c = c0 + threadIdx.x;
        if (v < vol && c < Cp)
            xo[v * Cp + c] = tile[threadIdx.x][j];
    }
}

/* y (n, O, vol) = yt (n, vol, Op)[..O] + bias (+ y when acc), then max(0, .) when relu; grid (vol/TT, O/TT, n), block (TT, 8). */
static __global__ void k_from_nhwc(const __half *yt, __half *y, const void *bias, bool bf16, bool relu, bool acc, int64_t O, int64_t Op,
                                   int64_t vol)
{
    __shared__ float tile[TT][TT + 1];
    const int64_t n = blockIdx.z, v0 = (int64_t)blockIdx.x * TT, o0 = (int64_t)blockIdx.y * TT;
    const __half *yn = yt + n * vol * Op;
    for (int j = threadIdx.y; j < TT; j += blockDim.y) {
        int64_t v = v0 + j, o = o0 + threadIdx.x;
        tile[j][threadIdx.x] = v < vol && o < O ? __half2float(yn[v * Op + o]) : 0.0f;
    }
    __syncthreads();
    __half *yo = y + n * O * vol;
    for (int j = threadIdx.y; j < TT; j += blockDim.y) {
        int64_t o = o0 + j, v = v0 + threadIdx.x;
        if (o < O && v < vol) {
            float r = tile[threadIdx.x][j] + (bias ? ditto_ld(bias, o, bf16) : 0.0f);
            if (acc)
                r += __half2float(yo[o * vol + v]);
            yo[o * vol + v] = __float2half_rn(relu && !(r > 0.0f) ? 0.0f : r);
        }
    }
}

/* wt (Op, kvol, Cp) = w (O, C, kvol), zero padded. */
static __global__ void k_w_nhwc(const __half *w, __half *wt, int64_t O, int64_t C, int64_t Op, int64_t Cp, int64_t kvol, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % Cp, t = i / Cp;
        int64_t k = t % kvol, o = t / kvol;
        wt[i] = o < O && c < C ? w[(o * C + c) * kvol + k] : __float2half(0.0f);
    }
}

/*
 * The same layout changes with 64x64 tiles and 4-byte accesses (half2 along
 * the contiguous axis of each side): the 32x32 tiles of 2-byte accesses
 * above moved about 1.1 TB/s on the H200 (ncu: 32 us for a 142-channel
 * 16x64x64 item). Need an even vol (and Cp, Op, which are multiples of 8)
 * and 4-byte aligned tensors; bit-identical to the kernels above.
 * Grid (vol/64, channels/64, n), block (32, 8).
 */
#define TV 64
static __global__ void k_to_nhwc_v(const __half *x, __half *xt, int64_t C, int64_t Cp, int64_t vol)
{
    __shared__ __half tile[TV][TV + 2];   /* [channel][position] */
    const int64_t n = blockIdx.z, v0 = (int64_t)blockIdx.x * TV, c0 = (int64_t)blockIdx.y * TV;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const __half *xn = x + n * C * vol;
    const int64_t v = v0 + 2 * tx;
    for (int j = ty; j < TV; j += 8) {
        const int64_t c = c0 + j;
        __half2 h = __halves2half2(__float2half(0.0f), __float2half(0.0f));
        if (c < C && v < vol)
            h = *(const __half2 *)(xn + c * vol + v);
        tile[j][2 * tx] = __low2half(h);
        tile[j][2 * tx + 1] = __high2half(h);
    }
    __syncthreads();
    __half *xo = xt + n * vol * Cp;
    const int64_t c = c0 + 2 * tx;
    for (int j = ty; j < TV; j += 8) {
        const int64_t vv = v0 + j;
        if (vv < vol && c < Cp)
            *(__half2 *)(xo + vv * Cp + c) = __halves2half2(tile[2 * tx][j], tile[2 * tx + 1][j]);
    }
}

static __global__ void k_from_nhwc_v(const __half *yt, __half *y, const void *bias, bool bf16, bool relu, bool acc, int64_t O, int64_t Op,
                                     int64_t vol)
{
    __shared__ float tile[TV][TV + 1];   /* [position][output] */
    const int64_t n = blockIdx.z, v0 = (int64_t)blockIdx.x * TV, o0 = (int64_t)blockIdx.y * TV;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const __half *yn = yt + n * vol * Op;
    const int64_t o = o0 + 2 * tx;
    for (int j = ty; j < TV; j += 8) {
        const int64_t v = v0 + j;
        float2 f = make_float2(0.0f, 0.0f);
        if (v < vol && o < Op)
            f = __half22float2(*(const __half2 *)(yn + v * Op + o));
        tile[j][2 * tx] = f.x;
        tile[j][2 * tx + 1] = f.y;
    }
    __syncthreads();
    __half *yo = y + n * O * vol;
    const int64_t v = v0 + 2 * tx;
    for (int j = ty; j < TV; j += 8) {
        const int64_t oo = o0 + j;
        if (oo >= O || v >= vol)
            continue;
        const float b = bias ? ditto_ld(bias, oo, bf16) : 0.0f;
        float r0 = tile[2 * tx][j] + b, r1 = tile[2 * tx + 1][j] + b;
        __half2 *py = (__half2 *)(yo + oo * vol + v);
        if (acc) {
            const float2 a = __half22float2(*py);
            r0 += a.x;
            r1 += a.y;
        }
        if (relu) {
            r0 = r0 > 0.0f ? r0 : 0.0f;
            r1 = r1 > 0.0f ? r1 : 0.0f;
        }
        *py = __halves2half2(__float2half_rn(r0), __float2half_rn(r1));
    }
}

/*
 * wt (Op, kvol, Cp) = w (O, C, kvol), zero padded: a block per (ob outputs,
 * 64 input channels) reads its ob runs of 64 x kvol weights contiguously
 * (16-byte loads when C is a multiple of 8) into shared memory and writes
 * 16-byte vectors of 8 channels. It runs before every conv call; the
 * gather of k_w_nhwc (2-byte reads at stride kvol) moved under 1 TB/s.
 */
#define WT_CB 64
#define WT_SMEM 16384   /* halfs (32 KB): ob * WT_CB * kvol */
static __global__ void k_w_nhwc_t(const __half *w, __half *wt, int64_t O, int64_t C, int64_t Op, int64_t Cp, int kvol, int ob, bool vec)
{
    __shared__ __align__(16) __half sm[WT_SMEM];
    const int64_t o0 = (int64_t)blockIdx.y * ob, c0 = (int64_t)blockIdx.x * WT_CB;
    const int nc = C > c0 ? (int)(C - c0 < WT_CB ? C - c0 : WT_CB) : 0, cw = (int)(Cp - c0 < WT_CB ? Cp - c0 : WT_CB);
    const int run = nc * kvol, tid = threadIdx.x;
    for (int r = 0; r < ob && o0 + r < O; r++) {
        const __half *src = w + ((o0 + r) * C + c0) * kvol;
        __half *dst = sm + r * WT_CB * kvol;
        if (vec)
            for (int i = tid; i < run / 8; i += blockDim.x)
                ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
        else
            for (int i = tid; i < run; i += blockDim.x)
                dst[i] = src[i];
    }
    __syncthreads();
    const int c8n = cw / 8, total = ob * kvol * c8n;
    for (int i = tid; i < total; i += blockDim.x) {
        const int c8 = i % c8n, t = i / c8n, k = t % kvol, r = t / kvol;
        const int64_t o = o0 + r;
        if (o >= Op)
            continue;
        uint4 u;
        __half *h = (__half *)&u;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int c = c8 * 8 + j;
            h[j] = o < O && c < nc ? sm[(r * WT_CB + c) * kvol + k] : __float2half(0.0f);
        }
        *(uint4 *)(wt + (o * kvol + k) * Cp + c0 + c8 * 8) = u;
    }
}

/* wt (Op, kvol, Cp) = a channels-last w (O, kvol, C), zero padded (both sides contiguous along channels). */
static __global__ void k_w_krsc_pad(const __half *w, __half *wt, int64_t O, int64_t C, int64_t Cp, int64_t kvol, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % Cp, t = i / Cp;   /* t = o * kvol + k */
        wt[i] = t / kvol < O && c < C ? w[t * C + c] : __float2half(0.0f);
    }
}

/* wc (O, C, kvol) = a channels-last w (O, kvol, C); elements of T (2 or 4 bytes). */
template <typename T>
static __global__ void k_w_to_oihw(const T *w, T *wc, int64_t C, int64_t kvol, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = i % kvol, t = i / kvol, c = t % C, o = t / C;
        wc[i] = w[(o * kvol + k) * C + c];
    }
}

/* w stored channels-last (ditto_tensor_is_channels_last) rather than contiguous (O, C/groups, k...). */
static bool w_krsc(const DittoTensor *w)
{
    return !ditto_tensor_is_contiguous(w);
}

/*
 * For the kernels that read (O, C/groups, k...) (the small-O kernel, the
 * cuDNN NCHW path): a channels-last w copied to that order in stream-ordered
 * memory (*tmp, which the caller frees with release_w); else w itself.
 */
static int w_contiguous(DittoBackend *be, const DittoTensor *w, DittoTensor *out, void **tmp)
{
    *out = *w;
    *tmp = NULL;
    if (!w_krsc(w))
        return 0;
    DittoCuda *cu = ditto_cuda(be);
    const int64_t n = ditto_tensor_numel(w), C = w->shape[1], kvol = n / (w->shape[0] * C);
    const size_t esz = ditto_dtype_size(w->dtype);
    DITTO_CUDA_CHECK(be, cudaMallocAsync(tmp, (size_t)n * esz, cu->stream));
    if (esz == 2)
        k_w_to_oihw<uint16_t><<<ditto_cuda_blocks(n, 256), 256, 0, cu->stream>>>((const uint16_t *)w->data, (uint16_t *)*tmp, C, kvol, n);
    else
        k_w_to_oihw<uint32_t><<<ditto_cuda_blocks(n, 256), 256, 0, cu->stream>>>((const uint32_t *)w->data, (uint32_t *)*tmp, C, kvol, n);
    DITTO_CUDA_LAUNCHED(be);
    out->data = *tmp;
    ditto_tensor_set_contiguous(out);
    return 0;
}

static int release_w(DittoBackend *be, void *tmp, int rc)
{
    if (tmp) {
        cudaError_t e = cudaFreeAsync(tmp, ditto_cuda(be)->stream);
        if (e != cudaSuccess && rc >= 0)
            return ditto_cuda_fail(be, e, "cudaFreeAsync", __FILE__, __LINE__);
    }
    return rc;
}

/* The layout kernels' launches: the vectorised ones where they apply. */
static void launch_to_nhwc(cudaStream_t st, const __half *x, __half *xt, int64_t C, int64_t Cp, int64_t vol, int64_t n)
{
    if (vol % 2 == 0 && ((uintptr_t)x | (uintptr_t)xt) % 4 == 0) {
        dim3 g((unsigned)((vol + TV - 1) / TV), (unsigned)((Cp + TV - 1) / TV), (unsigned)n);
        k_to_nhwc_v<<<g, dim3(32, 8), 0, st>>>(x, xt, C, Cp, vol);
    } else {
        dim3 g((unsigned)((vol + TT - 1) / TT), (unsigned)((Cp + TT - 1) / TT), (unsigned)n);
        k_to_nhwc<<<g, dim3(TT, 8), 0, st>>>(x, xt, C, Cp, vol);
    }
}

static void launch_from_nhwc(cudaStream_t st, const __half *yt, __half *y, const void *bias, bool bf16, bool relu, bool acc, int64_t O,
                             int64_t Op, int64_t vol, int64_t n)
{
    if (vol % 2 == 0 && ((uintptr_t)yt | (uintptr_t)y) % 4 == 0) {
        dim3 g((unsigned)((vol + TV - 1) / TV), (unsigned)((O + TV - 1) / TV), (unsigned)n);
        k_from_nhwc_v<<<g, dim3(32, 8), 0, st>>>(yt, y, bias, bf16, relu, acc, O, Op, vol);
    } else {
        dim3 g((unsigned)((vol + TT - 1) / TT), (unsigned)((O + TT - 1) / TT), (unsigned)n);
        k_from_nhwc<<<g, dim3(TT, 8), 0, st>>>(yt, y, bias, bf16, relu, acc, O, Op, vol);
    }
}

/* wt (Op, kvol, Cp) from w, (O, C, kvol) or channels-last (O, kvol, C) when krsc (callers use a channels-last w itself when Op = O, Cp = C). */
static void launch_w_nhwc(cudaStream_t st, const __half *w, bool krsc, __half *wt, int64_t O, int64_t C, int64_t Op, int64_t Cp, int64_t kvol)
{
    if (krsc) {
        const int64_t nw = Op * Cp * kvol;
        k_w_krsc_pad<<<ditto_cuda_blocks(nw, 256), 256, 0, st>>>(w, wt, O, C, Cp, kvol, nw);
    } else if (kvol <= WT_SMEM / WT_CB && Cp % 8 == 0 && (uintptr_t)wt % 16 == 0) {
        /* ob outputs a block while about 4 blocks per SM remain (small weights: ob = 1, else few blocks of serial work) */
        const int64_t blocks1 = (Cp + WT_CB - 1) / WT_CB * Op, ob_mem = WT_SMEM / WT_CB / kvol;
        int64_t ob = blocks1 / 528;
        ob = ob < 1 ? 1 : ob > 8 ? 8 : ob;
        ob = ob > ob_mem ? ob_mem : ob;
        const bool vec = C % 8 == 0 && (uintptr_t)w % 16 == 0;
        dim3 g((unsigned)((Cp + WT_CB - 1) / WT_CB), (unsigned)((Op + ob - 1) / ob));
        k_w_nhwc_t<<<g, 256, 0, st>>>(w, wt, O, C, Op, Cp, (int)kvol, (int)ob, vec);
    } else {
        const int64_t nw = Op * Cp * kvol;
        k_w_nhwc<<<ditto_cuda_blocks(nw, 256), 256, 0, st>>>(w, wt, O, C, Op, Cp, kvol, nw);
    }
}

/*
 * Batched plans must not change an item's bits: cuDNN may pick other kernels
 * (tiles, split-K) for N items than for one. The first use of a batched plan
 * runs it and the N = 1 plan on the same pseudo-random data and compares
 * every output bit; a plan that differs is never used (items go one by one).
 */
static __global__ void k_fill_hash(__half *p, int64_t n, uint32_t seed)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = __float2half((float)(h & 0xffff) / 32768.0f - 1.0f);
    }
}

static __global__ void k_count_diff(const uint16_t *a, const uint16_t *b, int64_t n, unsigned int *count)
{
    unsigned int c = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c += a[i] != b[i];
    if (c)
        atomicAdd(count, c);
}

/* *host = the device counter cnt, after everything queued so far; what names the check in an error. */
static int read_count(DittoBackend *be, const unsigned int *cnt, const char *what, unsigned int *host)
{
    cudaStream_t st = ditto_cuda(be)->stream;
    if (cudaMemcpyAsync(host, cnt, sizeof *host, cudaMemcpyDeviceToHost, st) != cudaSuccess || cudaStreamSynchronize(st) != cudaSuccess)
        return ditto_cuda_fail(be, cudaGetLastError(), what, __FILE__, __LINE__);
    return 0;
}

/* y = conv(x, w) with plan p (beta 0); cw: p->ws bytes of workspace. */
static cudnnStatus_t plan_exec(DittoBackend *be, const ConvPlan *p, const void *x, const void *w, void *y, void *cw)
{
    if (p->cg)
        return ditto_cg_exec(be, p->cg, x, w, NULL, NULL, y, p->ws ? cw : NULL);
    const float one = 1.0f, zero = 0.0f;
    return cudnnConvolutionForward(ditto_cuda(be)->cudnn, &one, p->xd, x, p->wd, w, p->cd, p->algo, p->ws ? cw : NULL, p->ws, &zero,
                                   p->yd, y);
}

static int plan_run(DittoBackend *be, const ConvPlan *p, const void *x, const void *w, void *y, void *cw)
{
    cudnnStatus_t st = plan_exec(be, p, x, w, y, cw);
    return st == CUDNN_STATUS_SUCCESS ? 0 : ditto_cudnn_fail(be, st, p->cg ? "cudnnBackendExecute (conv)" : "cudnnConvolutionForward",
                                                             __FILE__, __LINE__);
}

/* ---- graph-API engines (conv_graph.h) for the channels-last f16 plans ---- */

/*
 * DITTO_CUDNN_ENGINES picks the kernels of the channels-last f16 plans:
 * "tune" (default): per geometry, the fastest of the legacy algorithm and
 * the engines of the graph API's heuristics mode A that gives the same bits
 * per item at every item count, timed once when the geometry is first
 * planned; "tune-b" (measurements) the same over heuristics mode B (on the
 * H200: 0.06 ms/frame faster at B=8, but each query takes ~18 ms, 0.8 s more
 * model load on a machine's first run); "heuristic": the first usable engine
 * of mode A, untimed; "legacy": the cudnnConvolutionForward algorithm alone.
 */
enum { ENG_LEGACY, ENG_TUNE, ENG_TUNE_B, ENG_HEURISTIC };

static int engine_mode(void)
{
    static int m = -1;
    if (m < 0) {
        const char *e = getenv("DITTO_CUDNN_ENGINES");
        m = ENG_TUNE;
        if (e && !strcmp(e, "legacy"))
            m = ENG_LEGACY;
        else if (e && !strcmp(e, "heuristic"))
            m = ENG_HEURISTIC;
        else if (e && !strcmp(e, "tune-b"))
            m = ENG_TUNE_B;
    }
    return m;
}

static size_t nhwc_chunk_bytes(void);

/* An integer measurement switch: the variable's value when in [lo, hi], else dflt. */
static int env_int(const char *name, int lo, int hi, int dflt)
{
    const char *e = getenv(name);
    int v = e ? atoi(e) : dflt;
    return v >= lo && v <= hi ? v : dflt;
}

/* the narrow 3-D convolutions on conv_wg.cu's taps-as-columns kernel, unless DITTO_CUDA_WGTC=0 (A/B) */
static bool wg_tc_on(void)
{
    static int on = -1;
    if (on < 0)
        on = env_int("DITTO_CUDA_WGTC", 0, 1, 1);
    return on;
}

/* conv_wg.cu's kernel takes c, unless DITTO_CUDA_WGCONV=0 keeps cuDNN (A/B) */
static bool wg_fits(DittoBackend *be, const DittoWgConv *c)
{
    static int on = -1;
    if (on < 0)
        on = env_int("DITTO_CUDA_WGCONV", 0, 1, 1);
    return on && ditto_cuda_wg_fits(be, c);
}

static void cg_conv(const ConvGeom *g, int64_t cp, int64_t op, int64_t n, CgConv *cv)
{
    cv->nsd = g->ns == 1 ? 2 : g->ns;
    cv->epi = CG_EPI_NONE;
    cv->bias_f16 = false;
    cv->n = n;
    cv->c = cp;
    cv->o = op;
    for (int i = 0; i < 3; i++) {
        cv->in[i] = g->in[i];
        cv->k[i] = g->k[i];
        cv->out[i] = g->out[i];
        cv->s[i] = g->s[i];
        cv->d[i] = g->d[i];
        cv->pad[i] = g->pb[i];
    }
}

/* Hashed operands for timing and bit checks: x (n items), w, y (n items), y1 (one item). */
typedef struct TuneBufs {
    __half *x, *w, *y, *y1;
    int64_t item_x, item_y;
    unsigned int *cnt;
} TuneBufs;

/*
 * The bytes of scratch a candidate under test asks for, stream-ordered: the
 * backend's workspace only grows, and a candidate that is not taken must not
 * leave it bigger (cuDNN allows a plan up to CONV_WS_LIMIT). false: no room
 * (the candidate counts as not running).
 */
static bool tune_ws(DittoCuda *cu, size_t bytes, void **ws)
{
    *ws = NULL;
    if (!bytes)
        return true;
    if (cudaMallocAsync(ws, bytes, cu->stream) == cudaSuccess)
        return true;
    cudaGetLastError();
    *ws = NULL;
    return false;
}

/*
 * The device waits this many clock cycles (about 1 ms) before a timed
 * sequence, so the host has queued every run by the time the first starts:
 * the timing then holds no gaps of host-side launch work, which a CUDA
 * graph's replay does not have either (without it the legacy calls, whose
 * host part is the slowest, looked up to 3x slower than they run and the
 * choice changed from one tuning to the next).
 */
#define TUNE_SPIN_CYCLES 2000000
#define TUNE_RUNS 5

static __global__ void k_tune_spin(long long cycles)
{
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

/*
 * An engine replaces the legacy plan when it takes under this share of its
 * time: 100 %, the faster of the two. (90 % kept the legacy plan in near
 * ties, 2.92-2.96 ms/frame at B = 8 against 2.88-2.92 on the H200, once
 * the timings held no host gaps.) DITTO_CUDA_TUNE_MARGIN_PCT (50..150) for
 * measurements.
 */
static float tune_margin(void)
{
    static int pct = -1;
    if (pct < 0)
        pct = env_int("DITTO_CUDA_TUNE_MARGIN_PCT", 50, 150, 100);
    return (float)pct / 100.0f;
}

/*
 * Tuning counts what a choice really runs: a plan whose batch changes bits
 * per item runs item by item, so its time is that of its one-item plan per
 * item (H200: the legacy 8-item plans of the hourglass's 3x3x3 convolutions
 * at 8x8 and 4x4 differ per item; item by item they take 1.5-1.7x their
 * batched time). DITTO_CUDA_TUNE_BYITEM=0 times the batch as before (A/B).
 */
static bool tune_by_item(void)
{
    static int on = -1;
    if (on < 0)
        on = env_int("DITTO_CUDA_TUNE_BYITEM", 0, 1, 1);
    return on;
}

/* End of a timed sequence begun at e0: record e1, free ws, *ms = mean of TUNE_RUNS (-1 when a run failed). */
static int tune_end(DittoBackend *be, cudaEvent_t e0, cudaEvent_t e1, void *ws, bool ran, float *ms)
{
    cudaStream_t st = ditto_cuda(be)->stream;
    cudaEventRecord(e1, st);
    if (ws)
        cudaFreeAsync(ws, st);
    float v = 0.0f;
    if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&v, e0, e1) != cudaSuccess)
        return ditto_cuda_fail(be, cudaGetLastError(), "cudaEventElapsedTime (convolution timing)", __FILE__, __LINE__);
    *ms = ran ? v / TUNE_RUNS : -1.0f;
    return 0;
}

/* Mean ms of TUNE_RUNS runs of plan p (legacy when p->cg is NULL) after one untimed, queued behind a spin; < 0 when it does not run. */
static int time_plan(DittoBackend *be, const ConvPlan *p, const TuneBufs *t, cudaEvent_t e0, cudaEvent_t e1, float *ms)
{
    DittoCuda *cu = ditto_cuda(be);
    void *ws;
    *ms = -1.0f;
    k_tune_spin<<<1, 1, 0, cu->stream>>>(TUNE_SPIN_CYCLES);
    DITTO_CUDA_LAUNCHED(be);
    if (!tune_ws(cu, p->ws, &ws))
        return 0;
    bool ran = true;
    for (int r = 0; r <= TUNE_RUNS && ran; r++) {
        if (r == 1)
            cudaEventRecord(e0, cu->stream);
        ran = plan_exec(be, p, t->x, t->w, t->y, ws) == CUDNN_STATUS_SUCCESS;
    }
    return tune_end(be, e0, e1, ws, ran, ms);
}

/* *same: plan p over its n items gives, for each, the bits of plan one run on that item alone. */
static int same_per_item(DittoBackend *be, const ConvPlan *p, const ConvPlan *one, int64_t n, const TuneBufs *t, bool *same)
{
    DittoCuda *cu = ditto_cuda(be);
    void *ws;
    *same = false;
    if (!tune_ws(cu, p->ws > one->ws ? p->ws : one->ws, &ws))
        return 0;
    cudaMemsetAsync(t->cnt, 0, sizeof *t->cnt, cu->stream);
    bool ran = plan_exec(be, p, t->x, t->w, t->y, ws) == CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; i < n && ran; i++) {
        ran = plan_exec(be, one, t->x + i * t->item_x, t->w, t->y1, ws) == CUDNN_STATUS_SUCCESS;
        if (ran)
            k_count_diff<<<ditto_cuda_blocks(t->item_y, 256), 256, 0, cu->stream>>>((const uint16_t *)(t->y + i * t->item_y),
                                                                                     (const uint16_t *)t->y1, t->item_y, t->cnt);
    }
    if (ws)
        cudaFreeAsync(ws, cu->stream);
    if (!ran)
        return 0;
    unsigned int host = 1;
    DITTO_TRY(read_count(be, t->cnt, "cudaMemcpyAsync (engine check)", &host));
    *same = host == 0;
    return 0;
}

/*
 * Tune e for geometry g at n items (engine_mode "tune", "tune-b"): time the legacy
 * plan and each heuristic engine, then keep the fastest engine whose plan
 * over n items matches its one-item plan bit for bit, when it beats the
 * legacy plan (tune_margin); else e->n = 0 (legacy). *timed: the
 * choice was measured (to keep in the file). Never while capturing: then
 * the legacy plan, untimed.
 */
static int tune_engines(DittoBackend *be, const ConvGeom *g, int64_t cp, int64_t op, int64_t n, ConvEngines *e, bool *timed)
{
    *timed = false;
    DittoCuda *cu = ditto_cuda(be);
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    DITTO_CUDA_CHECK(be, cudaStreamIsCapturing(cu->stream, &cs));
    if (cs != cudaStreamCaptureStatusNone) {   /* cannot time while recording: the legacy plan, untuned */
        e->n = 0;
        return 0;
    }
    TuneBufs t;
    t.item_x = cp * g->in_vol;
    t.item_y = op * g->out_vol;
    const int64_t nw = op * cp * g->k_vol, nx = n * t.item_x, ny = n * t.item_y;
    char *buf = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    ConvPlan legacy, cand, one, lone;
    memset(&lone, 0, sizeof lone);
    memset(&legacy, 0, sizeof legacy);
    memset(&cand, 0, sizeof cand);
    memset(&one, 0, sizeof one);
    float ms[CONV_MAX_ENGINES], ms_legacy = -1.0f;
    int rc = 0, pick = -1;
    /*
     * Stream-ordered: cudaFree would wait for the whole device (the motion
     * warm-up too), and a buffer kept for the process would hold up to 150 MB
     * (one 256x256 item of 128 -> 512 channels, twice).
     */
    if (cudaMallocAsync((void **)&buf, (size_t)(nx + nw + ny + t.item_y) * 2 + 256, cu->stream) != cudaSuccess) {
        cudaGetLastError();   /* no room to time: the legacy plan (not kept in the file) */
        ditto_log(&be->log, DITTO_LOG_DEBUG, "conv: no device memory to tune a convolution: legacy algorithm");
        e->n = 0;
        return 0;
    }
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        rc = ditto_cuda_fail(be, cudaGetLastError(), "cudaEventCreate (engine timing)", __FILE__, __LINE__);
        goto done;
    }
    t.x = (__half *)buf;
    t.w = t.x + nx;
    t.y = t.w + nw;
    t.y1 = t.y + ny;
    t.cnt = (unsigned int *)(buf + ((size_t)(nx + nw + ny + t.item_y) * 2 + 15) / 16 * 16);
    k_fill_hash<<<ditto_cuda_blocks(nx + nw, 256), 256, 0, cu->stream>>>(t.x, nx + nw, 0x2545f491u);
    DITTO_CUDA_LAUNCHED(be);
    rc = plan_setup_legacy(be, g, DITTO_F16, n, true, &legacy);
    if (!rc)
        rc = time_plan(be, &legacy, &t, e0, e1, &ms_legacy);   /* timed again after the engines: the faster of the two counts */
    for (int i = 0; i < e->n && !rc; i++) {
        cand.ws = 0;
        ms[i] = -1.0f;
        CgConv cv;
        cg_conv(g, cp, op, n, &cv);
        rc = ditto_cg_plan(be, &cv, &e->eng[i], CONV_WS_LIMIT, &cand.cg);
        if (!rc && cand.cg) {
            cand.ws = cand.cg->ws;
            rc = time_plan(be, &cand, &t, e0, e1, &ms[i]);
        }
        ditto_cg_plan_free(&cand.cg);
    }
    if (!rc) {
        float again = -1.0f;
        rc = time_plan(be, &legacy, &t, e0, e1, &again);
        if (again >= 0.0f && (ms_legacy < 0.0f || again < ms_legacy))
            ms_legacy = again;
    }
    /* a legacy plan that changes bits per item runs item by item: n times its one-item time is what it costs */
    if (!rc && n > 1 && ms_legacy >= 0.0f && tune_by_item()) {
        bool same = false;
        rc = plan_setup_legacy(be, g, DITTO_F16, 1, true, &lone);
        if (!rc)
            rc = same_per_item(be, &legacy, &lone, n, &t, &same);
        if (!rc && !same) {
            float m1 = -1.0f;
            rc = time_plan(be, &lone, &t, e0, e1, &m1);
            ditto_log(&be->log, DITTO_LOG_DEBUG, "conv:   legacy %lld-item plan differs per item: %.1f us item by item",
                      (long long)n, 1000.0 * n * m1);
            if (m1 >= 0.0f)
                ms_legacy = (float)n * m1;
        }
    }
    /* fastest first among the engines within the margin of the legacy plan, until one keeps its bits per item */
    while (!rc) {
        int best = -1;
        for (int i = 0; i < e->n; i++)
            if (ms[i] >= 0.0f && (ms_legacy < 0.0f || ms[i] < tune_margin() * ms_legacy) && (best < 0 || ms[i] < ms[best]))
                best = i;
        if (best < 0)
            break;
        CgConv cv;
        cg_conv(g, cp, op, n, &cv);
        bool same = false;
        rc = ditto_cg_plan(be, &cv, &e->eng[best], CONV_WS_LIMIT, &cand.cg);
        cv.n = 1;
        if (!rc && cand.cg)
            rc = ditto_cg_plan(be, &cv, &e->eng[best], CONV_WS_LIMIT, &one.cg);
        if (!rc && cand.cg && one.cg) {
            cand.ws = cand.cg->ws;
            one.ws = one.cg->ws;
            rc = n > 1 ? same_per_item(be, &cand, &one, n, &t, &same) : 0;
            same = same || n == 1;
        }
        ditto_cg_plan_free(&cand.cg);
        ditto_cg_plan_free(&one.cg);
        if (same) {
            pick = best;
            break;
        }
        ms[best] = -1.0f;
    }
    if (!rc) {
        ditto_log(&be->log, DITTO_LOG_DEBUG, "conv: C %lld O %lld k %lldx%lldx%lld in %lldx%lldx%lld at %lld items: legacy %.1f us, %s",
                  (long long)g->C, (long long)g->O, (long long)g->k[0], (long long)g->k[1], (long long)g->k[2], (long long)g->in[0],
                  (long long)g->in[1], (long long)g->in[2], (long long)n, 1000.0 * ms_legacy,
                  pick < 0 ? "kept" : "engine taken");
        if (pick >= 0) {
            ditto_log(&be->log, DITTO_LOG_DEBUG, "conv:   engine %lld at %.1f us", (long long)e->eng[pick].index, 1000.0 * ms[pick]);
            e->eng[0] = e->eng[pick];
            e->n = 1;
        } else {
            e->n = 0;
        }
        *timed = true;
    }
done:
    plan_destroy(&legacy);
    plan_destroy(&lone);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFreeAsync(buf, cu->stream);
    return rc;
}

/*
 * Tuned choices persist on disk (conv_choices.h), so later processes on this
 * machine run the same kernels (and bits) without timing again. Lines of
 * another device or cuDNN version are skipped; without a writable directory
 * the choices last for the process.
 */
static_assert(KEY_LEN == DITTO_CONV_KEY_LEN && CG_MAX_KNOBS == DITTO_CONV_MAX_KNOBS, "conv_choices.h sizes");

static void engine_scope(DittoBackend *be, char *scope, size_t n)
{
    cudaDeviceProp prop;
    const bool ok = cudaGetDeviceProperties(&prop, ditto_cuda(be)->device) == cudaSuccess;
    ditto_conv_choices_scope(ok ? prop.name : "", (unsigned long)cudnnGetVersion(), scope, n);
}

static int engines_grow(DittoBackend *be, DittoCudaConvCache *c)
{
    return cache_grow(be, (void **)&c->engines, c->neng, &c->capeng, sizeof(ConvEngines), "engine");
}

/* The choices of this device and cuDNN version from the file, once per backend; an unreadable file is skipped. */
static int engine_file_read(DittoBackend *be, DittoCudaConvCache *c)
{
    c->file_read = true;
    char dir[4096], path[4200], scope[DITTO_CONV_SCOPE_MAX];
    if (ditto_conv_choices_path(dir, sizeof dir, path, sizeof path) < 0)
        return 0;
    engine_scope(be, scope, sizeof scope);
    DittoConvChoice *ch = NULL;
    int n = 0, got = 0;
    int rc = ditto_conv_choices_read(path, scope, &ch, &n);
    if (rc == DITTO_ERR_NOMEM)
        return ditto_fail(&be->log, rc, "op conv: out of memory reading %s", path);
    if (rc < 0) {
        ditto_log(&be->log, DITTO_LOG_WARN, "cannot read the tuned convolution choices in %s (%s): tuning again", path, ditto_strerror(rc));
        return 0;
    }
    for (int i = 0; i < n && !rc; i++) {
        bool dup = false;
        for (int j = 0; j < c->neng && !dup; j++)
            dup = !memcmp(c->engines[j].key, ch[i].key, sizeof ch[i].key);
        if (dup || (rc = engines_grow(be, c)) < 0)
            continue;
        ConvEngines *e = &c->engines[c->neng++];
        memset(e, 0, sizeof *e);
        memcpy(e->key, ch[i].key, sizeof e->key);
        if (!ch[i].legacy) {
            e->n = 1;
            e->eng[0].index = ch[i].engine;
            e->eng[0].nknobs = ch[i].nknobs;
            memcpy(e->eng[0].knob_type, ch[i].knob_type, sizeof e->eng[0].knob_type);
            memcpy(e->eng[0].knob_value, ch[i].knob_value, sizeof e->eng[0].knob_value);
        }
        got++;
    }
    ditto_free(ch);
    ditto_log(&be->log, DITTO_LOG_DEBUG, "conv: %d tuned engine choices read from %s", got, path);
    return rc;
}

/* Append e's choice to the file (best effort: the choice stays in this process either way). */
static void engine_file_append(DittoBackend *be, const ConvEngines *e)
{
    char dir[4096], path[4200], scope[DITTO_CONV_SCOPE_MAX];
    if (ditto_conv_choices_path(dir, sizeof dir, path, sizeof path) < 0)
        return;
    engine_scope(be, scope, sizeof scope);
    DittoConvChoice ch;
    memset(&ch, 0, sizeof ch);
    memcpy(ch.key, e->key, sizeof ch.key);
    ch.legacy = e->n == 0;
    if (!ch.legacy) {
        ch.engine = e->eng[0].index;
        ch.nknobs = e->eng[0].nknobs;
        memcpy(ch.knob_type, e->eng[0].knob_type, sizeof ch.knob_type);
        memcpy(ch.knob_value, e->eng[0].knob_value, sizeof ch.knob_value);
    }
    if (ditto_conv_choices_append(dir, path, scope, &ch) < 0)
        ditto_log(&be->log, DITTO_LOG_DEBUG, "conv: cannot keep tuned engine choices in %s: %s", path, strerror(errno));
}

/*
 * The engines for g's geometry, whatever the item count: chosen once at the
 * item count of a full channels-last chunk, so the choice depends on the
 * geometry alone and every plan of it runs the same kernels.
 */
static int conv_engines(DittoBackend *be, const ConvGeom *g, int64_t cp, int64_t op, const ConvEngines **out)
{
    DittoCudaConvCache *c = ditto_cuda(be)->conv_cache;   /* plan_get made it */
    const bool tune = engine_mode() == ENG_TUNE || engine_mode() == ENG_TUNE_B;
    if (tune && !c->file_read)
        DITTO_TRY(engine_file_read(be, c));
    int64_t key[KEY_LEN];
    make_key(g, DITTO_F16, 0, true, key);
    for (int i = 0; i < c->neng; i++) {
        if (!memcmp(c->engines[i].key, key, sizeof key)) {
            *out = &c->engines[i];
            return 0;
        }
    }
    DITTO_TRY(engines_grow(be, c));
    ConvEngines *e = &c->engines[c->neng];
    memset(e, 0, sizeof *e);
    memcpy(e->key, key, sizeof key);
    const size_t item = (size_t)(cp * g->in_vol + op * g->out_vol) * 2;
    int64_t n = (int64_t)(nhwc_chunk_bytes() / (item ? item : 1));
    n = n < 1 ? 1 : n > 8 ? 8 : n;
    CgConv cv;
    cg_conv(g, cp, op, n, &cv);
    DITTO_TRY(ditto_cg_engines(be, &cv, engine_mode() == ENG_TUNE_B, e->eng, CONV_MAX_ENGINES, &e->n));
    bool timed = false;
    if (tune)
        DITTO_TRY(tune_engines(be, g, cp, op, n, e, &timed));
    if (timed)
        engine_file_append(be, e);
    c->neng++;
    *out = e;
    return 0;
}

/* pl runs the first of its geometry's engines that plans at nb items, else stays on the legacy algorithm. */
static int plan_graph(DittoBackend *be, const ConvGeom *g, int64_t nb, ConvPlan *pl)
{
    const ConvEngines *e;
    DITTO_TRY(conv_engines(be, g, pl->cp, pl->op, &e));
    CgConv cv;
    cg_conv(g, pl->cp, pl->op, nb, &cv);
    for (int i = 0; i < e->n && !pl->cg; i++)
        DITTO_TRY(ditto_cg_plan(be, &cv, &e->eng[i], CONV_WS_LIMIT, &pl->cg));
    if (pl->cg)
        pl->ws = pl->cg->ws;
    return 0;
}

/*
 * Bits of the nb-item plan's output that differ from the reference plan's
 * (run on groups of unit items) on the hashed data in xt, wt (*diff; 0:
 * identical).
 */
static int batch_diff(DittoBackend *be, const ConvGeom *g, const ConvPlan *pl, const ConvPlan *one, int64_t unit, __half *wt, __half *xt,
                      __half *yt, void *cw, int64_t nb, unsigned int *diff)
{
    DittoCuda *cu = ditto_cuda(be);
    const int64_t ny1 = unit * pl->op * g->out_vol;
    __half *y1 = NULL;
    unsigned int *cnt = NULL, host = 0;
    DITTO_CUDA_CHECK(be, cudaMalloc(&y1, (size_t)ny1 * 2 + 256));
    cnt = (unsigned int *)((char *)y1 + ((size_t)ny1 * 2 + 3) / 4 * 4);
    int rc = 0;
    cudaMemsetAsync(cnt, 0, sizeof *cnt, cu->stream);
    cudnnStatus_t st = plan_exec(be, pl, xt, wt, yt, cw);
    for (int64_t i = 0; i < nb / unit && st == CUDNN_STATUS_SUCCESS; i++) {
        st = plan_exec(be, one, xt + i * unit * pl->cp * g->in_vol, wt, y1, cw);
        if (st == CUDNN_STATUS_SUCCESS)
            k_count_diff<<<ditto_cuda_blocks(ny1, 256), 256, 0, cu->stream>>>((const uint16_t *)(yt + i * ny1), (const uint16_t *)y1, ny1, cnt);
    }
    if (st != CUDNN_STATUS_SUCCESS) {   /* this algorithm does not run here: not a candidate */
        cudaFree(y1);
        *diff = UINT_MAX;
        return 0;
    }
    if (!rc)
        rc = read_count(be, cnt, "cudaMemcpyAsync (batch check)", &host);
    cudaFree(y1);
    *diff = host;
    return rc;
}

/*
 * Decide pl->batch_ok for a plan of nb items against the reference plan one
 * (unit items; nb a multiple of unit): the heuristic's algorithm first, then
 * the other GEMM-like algorithms that fit in the cws workspace bytes there
 * are; the first that is bit-identical per group of unit items is kept.
 * ws holds wt, xt (nb items), yt (nb items), then cws bytes.
 */
static int batch_check(DittoBackend *be, const ConvGeom *g, ConvPlan *pl, const ConvPlan *one, int64_t unit, __half *wt, __half *xt,
                       __half *yt, void *cw, size_t cws, int64_t nb)
{
    DittoCuda *cu = ditto_cuda(be);
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    DITTO_CUDA_CHECK(be, cudaStreamIsCapturing(cu->stream, &cs));
    if (cs != cudaStreamCaptureStatusNone) {
        pl->batch_ok = 0;      /* cannot sync while recording: stay item by item */
        return 0;
    }
    const int64_t nx = nb * pl->cp * g->in_vol, nw = pl->op * pl->cp * g->k_vol;
    k_fill_hash<<<ditto_cuda_blocks(nx, 256), 256, 0, cu->stream>>>(xt, nx, 0x9e3779b9u);
    k_fill_hash<<<ditto_cuda_blocks(nw, 256), 256, 0, cu->stream>>>(wt, nw, 0x85ebca6bu);
    DITTO_CUDA_LAUNCHED(be);
    unsigned int diff = 1;
    DITTO_TRY(batch_diff(be, g, pl, one, unit, wt, xt, yt, cw, nb, &diff));
    const cudnnConvolutionFwdAlgo_t first = pl->algo;
    const size_t first_ws = pl->ws;
    static const cudnnConvolutionFwdAlgo_t others[] = {
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
    };
    for (size_t i = 0; diff && !pl->cg && i < sizeof others / sizeof *others; i++) {   /* a graph plan keeps its engine */
        size_t need = 0;
        if (others[i] == first ||
            cudnnGetConvolutionForwardWorkspaceSize(cu->cudnn, pl->xd, pl->wd, pl->cd, pl->yd, others[i], &need) != CUDNN_STATUS_SUCCESS ||
            need > cws)
            continue;
        pl->algo = others[i];
        pl->ws = need;
        DITTO_TRY(batch_diff(be, g, pl, one, unit, wt, xt, yt, cw, nb, &diff));
    }
    if (diff) {
        pl->algo = first;
        pl->ws = first_ws;
    }
    pl->batch_ok = diff == 0;
    ditto_log(&be->log, DITTO_LOG_DEBUG, "conv: C %lld O %lld k %lldx%lldx%lld in %lldx%lldx%lld: %lld-item plan %s (%s %d)",
              (long long)g->C, (long long)g->O, (long long)g->k[0], (long long)g->k[1], (long long)g->k[2], (long long)g->in[0],
              (long long)g->in[1], (long long)g->in[2], (long long)nb,
              pl->batch_ok ? "bit-identical per item: batched" : "differs per item: item by item",
              pl->cg ? "engine" : "algo", pl->cg ? (int)pl->cg->index : (int)pl->algo);
    return 0;
}

/*
 * Direct convolution for few output channels (O <= 16), f16 storage, fp32
 * sums: 2-D, stride 1, dilation 1, kernel up to 7x7 (the warp's occlusion
 * head, 2272 -> 1 at 7x7; conv_img, 64 -> 12 at 3x3), or any 1x1x1 without
 * padding (compress, 32 -> 4, run as 2-D over the flattened volume).
 * Implicit-GEMM libraries waste most of a tile on so few outputs.
 *
 * Register blocking: a warp computes a 32-column x 4R-row output tile, its
 * lanes 8 across by 4 down, each lane 4 adjacent columns x R rows for every
 * output (R * 4 * OM fp32 sums). Per input channel a lane loads each window
 * row segment it needs (4 + kw - 1 values) once for every kx tap, output row
 * and output that uses it, and each weight once for its 4R positions: the
 * occlusion head does 1568 FMAs per channel and lane against 14 row segments
 * and 13 weight vectors, about 0.1 shared-memory words per FMA where the old
 * kernel read 2 (a window float and a weight per FMA).
 *
 * A block is SO_G warps on one tile and one range of SO_CSPLIT input
 * channels. Each warp takes its own channels of the range, CPW at a time,
 * staged in its own part of shared memory (no block barrier in the channel
 * loop): windows as raw fp16 rows of aligned 8-half chunks (16-byte async
 * copies, the next channels' in flight while these are computed; values
 * widened to fp32 as a lane loads its segment) and weights as fp32. The
 * warps' sums are added in warp order at the end; with more than one range,
 * each writes fp32 partial sums and k_small_o_sum adds the ranges in range
 * order. Every summation order depends on C and the kernel only, so an
 * item's bits do not depend on N.
 */
#define SO_KMAX 7
#define SO_OMAX 16
#define SO_CSPLIT 64   /* input channels per block */
#define SO_G 4         /* warps per block, each over its own channels of the range */
#define SO_TW 32       /* tile columns: 8 lanes x SO_P */
#define SO_P 4         /* adjacent output columns per lane */
#define SO_RED_LD 40   /* reduction row stride, 8 mod 32: the transposed reads hit 32 distinct banks */

/*
 * Tiles and staging for OM (>= O) outputs and kernel size KS: 1, 3, 7 with
 * left padding KS / 2 (the window then starts M = -(KS / 2) mod 8 halves
 * into its first aligned chunk, a constant), or 0: kh, kw <= 7 and padding
 * at run time.
 */
template <int OM, int KS>
struct SoCfg {
    static constexpr int KSM = KS ? KS : SO_KMAX;
    static constexpr int R = OM <= 2 ? 8 : OM == 4 ? 4 : OM <= 12 ? 2 : 1;   /* rows per lane: 32 to 96 sums */
    static constexpr int TH = 4 * R;
    static constexpr int WH = TH + KSM - 1, WW = SO_TW + KSM - 1;           /* window (rows, columns) */
    static constexpr int M = KS ? (8 - KS / 2 % 8) % 8 : 7;                  /* (largest) start in the first chunk */
    static constexpr int NCH = (M + WW + 7) / 8, RW = 4 * NCH;              /* chunks and 32-bit words per window row */
    static constexpr int XW = WH * RW;                                      /* words per staged window */
    static constexpr int KK = KSM * KSM, WST = (KK * OM + 3) / 4 * 4;        /* weights per channel, (k, o) */
    /* channels a warp stages at once: up to 8, two window buffers and the weights within 12 KiB */
    static constexpr int CH = 2 * XW + WST;
    static constexpr int CPW = 8 * CH <= 3072 ? 8 : 4 * CH <= 3072 ? 4 : 2 * CH <= 3072 ? 2 : 1;
    static constexpr int NACC = OM * R * SO_P;
    /* few weights per channel (occlusion: 49): all in registers, each window row loaded once for every ky */
    static constexpr bool ROWS = KS && OM * KS * KS <= 64;
    /* otherwise ky by ky, holding the R row segments or the ky row's weights, whichever is fewer registers */
    static constexpr bool SEGS = R * (SO_P + KSM - 1) <= KSM * OM;
    /* blocks per SM the registers must allow (ptxas -v: no spills) */
    static constexpr int MINB = NACC <= 32 ? 4 : 3;
};

/* 16 bytes global -> shared, asynchronous; zeros when !valid (src is then not read). */
static __device__ __forceinline__ void so_cp16(unsigned *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
static __device__ __forceinline__ void so_cp_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Wait until at most n of this thread's committed groups are in flight. */
template <int n>
static __device__ __forceinline__ void so_cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}

/* fp16 number i of the words at u, widened: one conversion of the word's half (no shift or repack). */
static __device__ __forceinline__ float so_h(const unsigned *u, int i)
{
    float f;
    if (i & 1)
        asm("{.reg .f16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.f32.f16 %0, hi;}\n" : "=f"(f) : "r"(u[i >> 1]));
    else
        asm("{.reg .f16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.f32.f16 %0, lo;}\n" : "=f"(f) : "r"(u[i >> 1]));
    return f;
}

/* L values of a raw row from fp16 number OFF of p (8-byte aligned): 8-byte loads, widened. */
template <int L, int OFF>
static __device__ __forceinline__ void so_ld_row(const unsigned *p, float (&v)[L])
{
    constexpr int NW = (OFF + L + 1) / 2;
    unsigned u[NW];
#pragma unroll
    for (int i = 0; i + 2 <= NW; i += 2) {
        const uint2 t = *(const uint2 *)(p + i);
        u[i] = t.x;
        u[i + 1] = t.y;
    }
    if (NW % 2)
        u[NW - 1] = p[NW - 1];
#pragma unroll
    for (int i = 0; i < L; i++)
        v[i] = so_h(u, OFF + i);
}

/* The OM weights of one tap (a broadcast: every lane reads the same address). */
template <int OM>
static __device__ __forceinline__ void so_ld_w(const float *p, float (&v)[OM])
{
    if constexpr (OM % 4 == 0) {
#pragma unroll
        for (int o = 0; o < OM; o += 4) {
            const float4 t = *(const float4 *)(p + o);
            v[o] = t.x;
            v[o + 1] = t.y;
            v[o + 2] = t.z;
            v[o + 3] = t.w;
        }
    } else if constexpr (OM == 2) {
        const float2 t = *(const float2 *)p;
        v[0] = t.x;
        v[1] = t.y;
    } else {
        v[0] = p[0];
    }
}

/*
 * One staged channel into acc (o, r, p): xb the lane's first window row in
 * the raw buffer, mm (KS == 0) the fp16 number of its first column there,
 * wb the channel's weights (k, o). Per sum the taps go ky then kx ascending
 * on every path.
 */
template <int OM, int KS>
static __device__ __forceinline__ void so_channel(const unsigned *xb, int mm, const float *wb, int kh, int kw,
                                                  float (&acc)[SoCfg<OM, KS>::NACC])
{
    typedef SoCfg<OM, KS> K;
    constexpr int R = K::R, P = SO_P, L = SO_P + K::KSM - 1, OFF = K::M % 4;
    if constexpr (K::ROWS) {
        float wr[K::WST];
#pragma unroll
        for (int i = 0; i < K::WST; i += 4) {
            const float4 t = *(const float4 *)(wb + i);
            wr[i] = t.x;
            wr[i + 1] = t.y;
            wr[i + 2] = t.z;
            wr[i + 3] = t.w;
        }
        /* window row j feeds output rows r = j - ky */
#pragma unroll
        for (int j = 0; j < R + KS - 1; j++) {
            float s[L];
            so_ld_row<L, OFF>(xb + j * K::RW, s);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int ky = j - r;
                if (ky < 0 || ky >= KS)
                    continue;
#pragma unroll
                for (int kx = 0; kx < KS; kx++)
#pragma unroll
                    for (int o = 0; o < OM; o++)
#pragma unroll
                        for (int p = 0; p < P; p++)
                            acc[(o * R + r) * P + p] = fmaf(s[p + kx], wr[(ky * KS + kx) * OM + o], acc[(o * R + r) * P + p]);
            }
        }
    } else if constexpr (KS > 0) {
#pragma unroll 1
        for (int ky = 0; ky < KS; ky++) {
            if constexpr (K::SEGS) {
                float s[R][L];
#pragma unroll
                for (int r = 0; r < R; r++)
                    so_ld_row<L, OFF>(xb + (r + ky) * K::RW, s[r]);
#pragma unroll
                for (int kx = 0; kx < KS; kx++) {
                    float wv[OM];
                    so_ld_w<OM>(wb + (ky * KS + kx) * OM, wv);
#pragma unroll
                    for (int r = 0; r < R; r++)
#pragma unroll
                        for (int o = 0; o < OM; o++)
#pragma unroll
                            for (int p = 0; p < P; p++)
                                acc[(o * R + r) * P + p] = fmaf(s[r][p + kx], wv[o], acc[(o * R + r) * P + p]);
                }
            } else {
                float wk[KS][OM];
#pragma unroll
                for (int kx = 0; kx < KS; kx++)
                    so_ld_w<OM>(wb + (ky * KS + kx) * OM, wk[kx]);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float s[L];
                    so_ld_row<L, OFF>(xb + (r + ky) * K::RW, s);
#pragma unroll
                    for (int kx = 0; kx < KS; kx++)
#pragma unroll
                        for (int o = 0; o < OM; o++)
#pragma unroll
                            for (int p = 0; p < P; p++)
                                acc[(o * R + r) * P + p] = fmaf(s[p + kx], wk[kx][o], acc[(o * R + r) * P + p]);
                }
            }
        }
    } else {
        /* kh x kw and padding at run time (5x3, 2x2, ...): tap by tap, one window value per OM FMAs */
        for (int ky = 0; ky < kh; ky++) {
            for (int kx = 0; kx < kw; kx++) {
                float wv[OM];
                so_ld_w<OM>(wb + (ky * kw + kx) * OM, wv);
#pragma unroll
                for (int r = 0; r < R; r++) {
#pragma unroll
                    for (int p = 0; p < P; p++) {
                        const float v = so_h(xb + (r + ky) * K::RW, mm + p + kx);
#pragma unroll
                        for (int o = 0; o < OM; o++)
                            acc[(o * R + r) * P + p] = fmaf(v, wv[o], acc[(o * R + r) * P + p]);
                    }
                }
            }
        }
    }
}

/*
 * Raw windows of channels [c0, c0 + cc) into buf (cc, WH, RW words): row yy,
 * fp16 number h holds x at (iy0 + yy, a0 + h), zero outside the input. vec
 * (Win % 8 == 0, x 16-byte aligned): 16-byte async copies of aligned chunks,
 * each wholly inside or outside a row; else pairs of values now.
 */
template <int OM, int KS>
static __device__ __forceinline__ void so_stage(unsigned *buf, const __half *xn, int c0, int cc, int Hin, int Win, int iy0, int a0, int wh,
                                                bool vec, int lane)
{
    typedef SoCfg<OM, KS> K;
    if (vec) {
        /* lane: chunk k of rows lr, lr + RS, ... (RS rows of NCH chunks per pass) */
        constexpr int RS = 32 / K::NCH;
        const int k = lane % K::NCH, lr = lane / K::NCH, a = a0 + 8 * k;
        if (lr >= RS)
            return;
        const bool ain = (unsigned)a < (unsigned)Win;
        for (int ci = 0; ci < cc; ci++) {
            unsigned *d = buf + ci * K::XW + lr * K::RW + 4 * k;
            for (int yy = lr; yy < wh; yy += RS, d += RS * K::RW) {
                const int iy = iy0 + yy;
                const bool in = ain && (unsigned)iy < (unsigned)Hin;
                so_cp16(d, in ? xn + ((c0 + ci) * Hin + iy) * Win + a : xn, in);
            }
        }
    } else {
        for (int t = 0; t < cc * wh; t++) {
            const int ci = t / wh, yy = t - ci * wh, iy = iy0 + yy;
            const bool rin = (unsigned)iy < (unsigned)Hin;
            const __half *row = xn + ((c0 + ci) * Hin + (rin ? iy : 0)) * Win;
            for (int q = lane; q < K::RW; q += 32) {
                const int ix = a0 + 2 * q;
                const unsigned lo = rin && (unsigned)ix < (unsigned)Win ? __half_as_ushort(row[ix]) : 0u;
                const unsigned hi = rin && (unsigned)(ix + 1) < (unsigned)Win ? __half_as_ushort(row[ix + 1]) : 0u;
                buf[ci * K::XW + yy * K::RW + q] = lo | hi << 16;
            }
        }
    }
}

/*
 * Grid (column tiles, row tiles of TH, N x channel ranges), SO_G warps.
 * part != NULL (more than one range): fp32 partial sums to part (ranges, N,
 * O, H, W), else y = sum + bias (+ y when accum).
 */
template <int OM, int KS>
static __global__ void __launch_bounds__(SO_G * 32, SoCfg<OM, KS>::MINB)
k_conv_small_o(const __half *x, const __half *w, const void *bias, bool bh, bool accum, __half *y, float *part, int C, int O,
               int Hin, int Win, int H, int W, int kh_rt, int kw_rt, int ph, int pw, int N, bool vec)
{
    typedef SoCfg<OM, KS> K;
    __shared__ __align__(16) union {
        struct {
            unsigned x[SO_G][2][K::CPW * K::XW];   /* raw fp16 windows, two rounds */
            float w[SO_G][K::CPW * K::WST];        /* fp32 weights (k, o) */
        } st;
        float red[SO_G * 32 * SO_RED_LD];          /* the warps' sums, 32 at a time */
    } sm;
    const int kh = KS ? KS : kh_rt, kw = KS ? KS : kw_rt, kk = kh * kw;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, lx = lane & 7, ly = lane >> 3;
    const int n = blockIdx.z % N, split = blockIdx.z / N;
    const int ox0 = blockIdx.x * SO_TW, oy0 = blockIdx.y * K::TH, ix0 = ox0 - pw, iy0 = oy0 - ph;
    const int a0 = ix0 & ~7, wh = K::TH + kh - 1;   /* KS > 0: ix0 - a0 == K::M */
    const int cbeg = split * SO_CSPLIT, cend = C < cbeg + SO_CSPLIT ? C : cbeg + SO_CSPLIT;
    const int step = SO_G * K::CPW, rounds = (cend - cbeg + step - 1) / step;
    const __half *xn = x + (int64_t)n * C * Hin * Win;   /* C * Hin * Win < INT_MAX: small_o_fits */
    float *ws = sm.st.w[warp];
    /* lane's first window row and column in a raw buffer */
    const int xoff = ly * K::R * K::RW + (KS ? (SO_P * lx + K::M - K::M % 4) / 2 : 0), mm = KS ? 0 : ix0 - a0 + SO_P * lx;
    float acc[K::NACC];
#pragma unroll
    for (int i = 0; i < K::NACC; i++)
        acc[i] = 0.0f;
    {
        const int c0 = cbeg + warp * K::CPW, cc = cend - c0 < K::CPW ? cend - c0 : K::CPW;
        so_stage<OM, KS>(sm.st.x[warp][0], xn, c0, cc, Hin, Win, iy0, a0, wh, vec, lane);
        so_cp_commit();
    }
    for (int r = 0; r < rounds; r++) {
        const int c0 = cbeg + r * step + warp * K::CPW, cc = cend - c0 < K::CPW ? cend - c0 : K::CPW;
        if (r + 1 < rounds) {   /* the next round's windows, in flight during this one */
            const int c1 = c0 + step, cc1 = cend - c1 < K::CPW ? cend - c1 : K::CPW;
            so_stage<OM, KS>(sm.st.x[warp][(r + 1) & 1], xn, c1, cc1, Hin, Win, iy0, a0, wh, vec, lane);
        }
        so_cp_commit();
        /* weights (cc, k, o), zero past kh * kw taps and O outputs */
        for (int i = lane; i < cc * K::WST; i += 32) {
            const int ci = i / K::WST, q = i - ci * K::WST, k = q / OM, o = q - k * OM;
            ws[i] = o < O && k < kk ? __half2float(w[((int64_t)o * C + c0 + ci) * kk + k]) : 0.0f;
        }
        so_cp_wait<1>();   /* this round's copies landed (the newest group may not have) */
        __syncwarp();
        const unsigned *xr = sm.st.x[warp][r & 1] + xoff;
        for (int ci = 0; ci < cc; ci++)
            so_channel<OM, KS>(xr + ci * K::XW, mm, ws + ci * K::WST, kh, kw, acc);
        __syncwarp();   /* buffers free for the round after next, weights for the next */
    }
    /*
     * Add the warps' sums in warp order, 32 sums at a time through shared
     * memory (over the staging buffers): lane i of warp g writes its sum j to
     * (g, j, i); then each warp adds rows of 32 adjacent outputs, lane = 4 lx + p.
     */
    const int64_t HW = (int64_t)H * W;
    so_cp_wait<0>();
    __syncthreads();
#pragma unroll
    for (int b = 0; b < K::NACC; b += 32) {
#pragma unroll
        for (int i = 0; i < 32; i++)
            sm.red[(warp * 32 + i) * SO_RED_LD + lane] = acc[b + i];
        __syncthreads();
        for (int s = warp; s < 32; s += SO_G) {
            /* sums (o, r) pair ql of this group of 32, lane row yl */
            const int ql = s >> 2, yl = s & 3, i = ql * SO_P + (lane & 3), src = yl * 8 + (lane >> 2);
            float v = sm.red[i * SO_RED_LD + src];
#pragma unroll
            for (int g = 1; g < SO_G; g++)
                v += sm.red[(g * 32 + i) * SO_RED_LD + src];
            const int q = b / SO_P + ql, o = q / K::R, oy = oy0 + yl * K::R + q % K::R, ox = ox0 + lane;
            if (o >= O || oy >= H || ox >= W)
                continue;
            if (part) {   /* partial sums of this channel range: part (ranges, N, O, H, W) */
                part[(((int64_t)split * N + n) * O + o) * HW + (int64_t)oy * W + ox] = v;
            } else {
                const int64_t yi = ((int64_t)n * O + o) * HW + (int64_t)oy * W + ox;
                const float rr = v + (bias ? ditto_ld(bias, o, bh) : 0.0f);
                y[yi] = __float2half_rn(accum ? rr + __half2float(y[yi]) : rr);
            }
        }
        __syncthreads();
    }
}

/* y (N, O, HW) = bias + sum over ranges of part (ranges, N, O, HW), in range order (+ y when accum). */
static __global__ void k_small_o_sum(const float *part, const void *bias, bool bh, bool accum, __half *y, int splits, int O, int64_t NOHW,
                                     int64_t HW)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < NOHW; i += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        int k = 0;
        /* 8 loads in flight (the occlusion head has 36 ranges), added in order */
        for (; k + 8 <= splits; k += 8) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                v[u] = part[(k + u) * NOHW + i];
#pragma unroll
            for (int u = 0; u < 8; u++)
                s += v[u];
        }
        for (; k < splits; k++)
            s += part[k * NOHW + i];
        s += bias ? ditto_ld(bias, i / HW % O, bh) : 0.0f;
        y[i] = __float2half_rn(accum ? s + __half2float(y[i]) : s);
    }
}

/*
 * Few outputs from many input channels through a wide kernel (the warp's
 * occlusion head: 2272 channels, 7x7, one output), on the tensor cores: per
 * item one cuBLAS GEMM gives every input position's products for every tap,
 * Z (Tp, P) = Wt^T (Tp, C) * x (C, P), Wt[c, t * O + o] = w[o, c, t] (T =
 * kh * kw * O rows, zero up to Tp, a multiple of 8), fp32 accumulation and
 * output; then k_tap_sum adds each output's kh * kw shifted taps of Z in
 * tap order (a tap's row is read along positions: coalesced). The GEMM runs
 * as TG_SPLITS batches over ranges of channels (partial Z's that k_tap_sum
 * adds in range order): one item's GEMM (4096 x 56 x 2272 for the occlusion
 * head) keeps too few tiles in flight to stream x at full speed (H200: 12.3
 * us an item whole, 9.4 in four ranges). The same calls for every item, so
 * an item's bits do not depend on N. H200, two items of the occlusion head:
 * 30 us in all, against 79 us for k_conv_small_o on the CUDA cores.
 */
#define TG_MIN_C 256                     /* input channels: below this the small-O kernel */
#define TG_MAX_T 128                     /* taps x outputs (padded) */
#define TG_SPLITS 4                      /* channel ranges (fewer when C is not a multiple) */
#define TG_Z_BYTES ((size_t)64 << 20)    /* Z of the items of one round */

/* DITTO_CUDA_TAP_GEMM=0 (measurements): the small-O kernel instead */
static bool tap_gemm_on(void)
{
    static int on = -1;
    if (on < 0)
        on = env_int("DITTO_CUDA_TAP_GEMM", 0, 1, 1);
    return on == 1;
}

/* channel ranges of the tap GEMM: the most, up to TG_SPLITS, that divide C */
static int tap_gemm_splits(int64_t C)
{
    int s = TG_SPLITS;
    while (s > 1 && C % s)
        s--;
    return s;
}

static bool tap_gemm_fits(const ConvGeom *g, int64_t Hin, int64_t Win, bool flat)
{
    if (!tap_gemm_on())
        return false;
    const int64_t tp = (g->k_vol * g->O + 7) / 8 * 8, P = Hin * Win;
    return !flat && g->C >= TG_MIN_C && g->k_vol >= 9 && tp <= TG_MAX_T && g->C <= INT_MAX && P <= INT_MAX &&
           g->N * g->O * g->out_vol / 32 < INT_MAX &&   /* k_tap_sum's blocks */
           (size_t)(P * tp) * tap_gemm_splits(g->C) * sizeof(float) <= TG_Z_BYTES;
}

/* wt (C, Tp) from w (O, C, kk) contiguous: wt[c * Tp + t * O + o] = w[(o * C + c) * kk + t], zero past kk * O */
static __global__ void k_tap_w(const __half *w, __half *wt, int64_t C, int O, int kk, int Tp)
{
    const int64_t n = C * Tp;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i / Tp;
        const int j = (int)(i - c * Tp), t = j / O, o = j - t * O;
        wt[i] = t < kk ? w[((int64_t)o * C + c) * kk + t] : __float2half(0.0f);
    }
}

/*
 * y (N, O, H, W) = bias + the sum of z (N, splits, Tp, Hin * Win) over taps
 * and channel ranges: tap (ky, kx) of output (o, oy, ox) is row (ky * kw +
 * kx) * O + o, column (oy - ph + ky) * Win + ox - pw + kx (taps outside the
 * input skipped: zero padding); + y when accum. A block is 32 adjacent
 * outputs (flat index, ox fastest: coalesced rows) by kh threads, thread ky
 * adding its kernel row (kx, then range, in order); the rows' sums are then
 * added in ky order. A thread per output adding all kh * kw * splits terms
 * had too few threads in flight (43 us for two items of the occlusion head).
 * KS: a square kernel's size at compile time (the kx loop unrolled), or 0.
 */
#define TS_X 32
template <int KS>
static __global__ void k_tap_sum(const float *z, const void *bias, bool bh, bool accum, __half *y, int O, int H, int W, int Hin, int Win,
                                 int kh_rt, int kw_rt, int ph, int pw, int Tp, int splits, int64_t total)
{
    __shared__ float rows[SO_KMAX][TS_X];
    const int kh = KS ? KS : kh_rt, kw = KS ? KS : kw_rt, tx = threadIdx.x, ky = threadIdx.y;
    const int64_t PT = (int64_t)Hin * Win * Tp, i = (int64_t)blockIdx.x * TS_X + tx;
    int o = 0;
    float s = 0.0f;
    if (i < total) {
        const int ox = (int)(i % W), oy = (int)(i / W % H);
        o = (int)(i / ((int64_t)W * H) % O);
        const int64_t n = i / ((int64_t)W * H * O);
        const int iy = oy - ph + ky;
        if ((unsigned)iy < (unsigned)Hin) {
            const float *zr = z + n * splits * PT + ((int64_t)(ky * kw) * O + o) * Hin * Win + (int64_t)iy * Win;
#pragma unroll
            for (int kx = 0; kx < kw; kx++) {
                const int ix = ox - pw + kx;
                if ((unsigned)ix < (unsigned)Win)
                    for (int r = 0; r < splits; r++)
                        s += zr[r * PT + (int64_t)kx * O * Hin * Win + ix];
            }
        }
    }
    rows[ky][tx] = s;
    __syncthreads();
    if (ky != 0 || i >= total)
        return;
    float t = 0.0f;
    for (int k = 0; k < kh; k++)
        t += rows[k][tx];
    t += bias ? ditto_ld(bias, o, bh) : 0.0f;
    y[i] = __float2half_rn(accum ? t + __half2float(y[i]) : t);
}

/*
 * The tap GEMM's calls once its weights wt are in place: items of x in
 * rounds of per, each item `splits` GEMMs in one batched call, Z_r^T (P, Tp)
 * = x_r^T (P, K) * Wt_r (K, Tp), x_r at r * sx in the item (column-major:
 * (P, K) with ld lda, or with xt (K, P) with ld lda, transposed), Wt_r at r
 * * K * Tp; then k_tap_sum of each round into y (N, O, H, W).
 */
typedef struct TapRun {
    const ConvGeom *g;
    int64_t H, W, Hin, Win, item, per;   /* item: x's elements per item */
    int K, splits, lda;
    long long sx;
    bool xt;
} TapRun;

static int tap_run(DittoBackend *be, const TapRun *r, const DittoTensor *x, const __half *wt, float *z, const DittoTensor *bias, bool accum,
                   DittoTensor *y)
{
    DittoCuda *cu = ditto_cuda(be);
    const ConvGeom *g = r->g;
    const int kh = (int)g->k[1], kw = (int)g->k[2], O = (int)g->O, Tp = (kh * kw * O + 7) / 8 * 8, P = (int)(r->Hin * r->Win);
    const float one = 1.0f, zero = 0.0f;
    const void *bp = bias ? bias->data : NULL;
    const bool bh = bias && bias->dtype == DITTO_F16;
    for (int64_t n0 = 0; n0 < g->N; n0 += r->per) {
        const int64_t nr = g->N - n0 < r->per ? g->N - n0 : r->per;
        for (int64_t n = 0; n < nr; n++) {
            const __half *xn = (const __half *)x->data + (n0 + n) * r->item;
            DITTO_CUBLAS_CHECK(be, cublasGemmStridedBatchedEx(cu->cublas, r->xt ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_T, P, Tp, r->K, &one, xn,
                                                              CUDA_R_16F, r->lda, r->sx, wt, CUDA_R_16F, Tp, (long long)r->K * Tp, &zero,
                                                              z + n * (int64_t)r->splits * P * Tp, CUDA_R_32F, P, (long long)P * Tp, r->splits,
                                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
        const int64_t total = nr * O * r->H * r->W;
        __half *yr = (__half *)y->data + n0 * O * r->H * r->W;
#define TG_SUM(KSV)                                                                                                              \
    k_tap_sum<KSV><<<(unsigned)((total + TS_X - 1) / TS_X), dim3(TS_X, kh), 0, cu->stream>>>(                                    \
        z, bp, bh, accum, yr, O, (int)r->H, (int)r->W, (int)r->Hin, (int)r->Win, kh, kw, (int)g->pb[1], (int)g->pb[2], Tp, r->splits, total)
        if (kh == 7 && kw == 7)
            TG_SUM(7);
        else if (kh == 3 && kw == 3)
            TG_SUM(3);
        else
            TG_SUM(0);
#undef TG_SUM
        DITTO_CUDA_LAUNCHED(be);
    }
    return 0;
}

/* The tap GEMM's workspace: wt (nwt halves), then Z for *per items of z_item floats, as many as TG_Z_BYTES holds (at most N). */
static int tap_bufs(DittoBackend *be, const ConvGeom *g, int64_t nwt, int64_t z_item, __half **wt, float **z, int64_t *per)
{
    const size_t wt_bytes = ((size_t)nwt * sizeof(__half) + 255) & ~(size_t)255, zb = (size_t)z_item * sizeof(float);
    *per = (int64_t)(TG_Z_BYTES / zb) < g->N ? (int64_t)(TG_Z_BYTES / zb) : g->N;
    char *ws;
    DITTO_TRY(ditto_cuda_workspace(be, wt_bytes + (size_t)*per * zb, (void **)&ws));
    *wt = (__half *)ws;
    *z = (float *)(ws + wt_bytes);
    return 0;
}

static int conv_tap_gemm(DittoBackend *be, const ConvGeom *g, int64_t H, int64_t W, int64_t Hin, int64_t Win, const DittoTensor *x,
                         const DittoTensor *w, const DittoTensor *bias, bool accum, DittoTensor *y)
{
    DittoCuda *cu = ditto_cuda(be);
    const int kh = (int)g->k[1], kw = (int)g->k[2], kk = kh * kw, O = (int)g->O;
    const int Tp = (kk * O + 7) / 8 * 8, P = (int)(Hin * Win), C = (int)g->C, splits = tap_gemm_splits(C), Kc = C / splits;
    __half *wt;
    float *z;
    int64_t per;
    DITTO_TRY(tap_bufs(be, g, (int64_t)C * Tp, (int64_t)splits * P * Tp, &wt, &z, &per));
    k_tap_w<<<ditto_cuda_blocks((int64_t)C * Tp, 256), 256, 0, cu->stream>>>((const __half *)w->data, wt, C, O, kk, Tp);
    DITTO_CUDA_LAUNCHED(be);
    /* range r: x_r (P, Kc) column-major, the item's channels r * Kc.. */
    const TapRun r = { g, H, W, Hin, Win, (int64_t)C * P, per, Kc, splits, P, (long long)Kc * P, false };
    return tap_run(be, &r, x, wt, z, bias, accum, y);
}

/*
 * A 3-D convolution whose kernel spans the whole depth, unpadded there (out
 * depth 1), on a channels-last x (N, D, H, W, C): the occlusion head read
 * from the hourglass's channels-last output, the 2-D form's 2272 input
 * channels (c, d) being D slices of C channels. conv_tap_gemm with the depth
 * slices as its channel ranges: per item one batched call of D GEMMs, Z_d
 * (Tp, P) = Wt_d^T (Tp, C) * x_d (C, P) reading the slice's (P, C) rows as
 * they are, then k_tap_sum adds the D partial Z's (the same calls for every
 * item). y (N, O, H, W): channels-first, or channels-last when O is 1.
 */
static bool tap_fold_fits(const ConvGeom *g)
{
    if (!tap_gemm_on() || g->ns != 3 || g->G != 1 || g->C % 8 || g->C > INT_MAX || g->k[0] != g->in[0] || g->pb[0] || g->pe[0] ||
        g->k[1] * g->k[2] < 9 || g->k[1] > SO_KMAX || g->k[2] > SO_KMAX || g->in[0] > 65535)
        return false;
    for (int i = 0; i < 3; i++)
        if (g->s[i] != 1 || g->d[i] != 1)
            return false;
    const int64_t tp = (g->k[1] * g->k[2] * g->O + 7) / 8 * 8, P = g->in[1] * g->in[2];
    return tp <= TG_MAX_T && P * g->C <= INT_MAX && g->N * g->O * g->out_vol / 32 < INT_MAX &&
           (size_t)(P * tp) * (size_t)g->in[0] * sizeof(float) <= TG_Z_BYTES;
}

/* wt (D, C, Tp) from w (O, C, D, kk), contiguous or krsc ((O, D, kk, C) memory): wt[(d * C + c) * Tp + t * O + o] = w[o, c, d, t], zero past kk * O */
static __global__ void k_tap_w_fold(const __half *w, bool krsc, __half *wt, int64_t C, int D, int O, int kk, int Tp)
{
    const int64_t n = (int64_t)D * C * Tp;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t dc = i / Tp, c = dc % C;
        const int j = (int)(i - dc * Tp), d = (int)(dc / C), t = j / O, o = j - t * O;
        wt[i] = t < kk ? w[krsc ? (((int64_t)o * D + d) * kk + t) * C + c : (((int64_t)o * C + c) * D + d) * kk + t] : __float2half(0.0f);
    }
}

static int conv_tap_fold(DittoBackend *be, const ConvGeom *g, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias,
                         bool accum, DittoTensor *y)
{
    DittoCuda *cu = ditto_cuda(be);
    const int kk = (int)(g->k[1] * g->k[2]), O = (int)g->O, D = (int)g->in[0];
    const int Tp = (kk * O + 7) / 8 * 8, P = (int)(g->in[1] * g->in[2]), C = (int)g->C;
    __half *wt;
    float *z;
    int64_t per;
    DITTO_TRY(tap_bufs(be, g, (int64_t)D * C * Tp, (int64_t)D * P * Tp, &wt, &z, &per));
    k_tap_w_fold<<<ditto_cuda_blocks((int64_t)D * C * Tp, 256), 256, 0, cu->stream>>>((const __half *)w->data, w_krsc(w), wt, C, D, O, kk,
                                                                                     Tp);
    DITTO_CUDA_LAUNCHED(be);
    /* slice d: x_d the (P, C) rows as they are, (C, P) column-major with ld C */
    const TapRun r = { g, g->out[1], g->out[2], g->in[1], g->in[2], (int64_t)D * P * C, per, C, D, C, (long long)P * C, true };
    return tap_run(be, &r, x, wt, z, bias, accum, y);
}

/*
 * Whether k_conv_small_o runs this convolution; (*H, *W, *Hin, *Win) the 2-D
 * view it uses, *flat when that view is the flattened volume of a 1x1(x1).
 */
static bool small_o_fits(const ConvGeom *g, int64_t *H, int64_t *W, int64_t *Hin, int64_t *Win, bool *flat)
{
    *flat = false;
    /* grid z = items x channel ranges; bigger batches take the general path */
    if (g->G != 1 || g->O > SO_OMAX || g->O < 1 || g->N * ((g->C + SO_CSPLIT - 1) / SO_CSPLIT) > 65535)
        return false;
    bool unit = true, nopad = true;
    for (int i = 0; i < 3; i++) {
        unit = unit && g->s[i] == 1 && g->d[i] == 1;
        nopad = nopad && g->pb[i] == 0 && g->pe[i] == 0;
    }
    if (!unit)
        return false;
    /* grid y: tiles of at least 4 rows */
    if (g->k_vol == 1 && nopad) {          /* 1x1(x1): one plane of in_vol positions, as (in_vol / W, W) */
        *flat = true;
        *Hin = *H = g->in_vol / g->in[2];
        *Win = *W = g->in[2];
        return (*H + 3) / 4 <= 65535 && g->in_vol < INT_MAX && g->C * g->in_vol < INT_MAX && g->O * g->out_vol < INT_MAX;
    }
    if (g->in[0] != 1 || g->k[0] != 1 || g->k[1] > SO_KMAX || g->k[2] > SO_KMAX)
        return false;
    *Hin = g->in[1];
    *Win = g->in[2];
    *H = g->out[1];
    *W = g->out[2];
    return (*H + 3) / 4 <= 65535 && g->C * g->in_vol < INT_MAX && g->O * g->out_vol < INT_MAX;
}

static int conv_small_o(DittoBackend *be, const ConvGeom *g, int64_t H, int64_t W, int64_t Hin, int64_t Win, bool flat,
                        const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, bool accum, DittoTensor *y)
{
    const int splits = (int)((g->C + SO_CSPLIT - 1) / SO_CSPLIT);   /* splits * N <= 65535: small_o_fits */
    const int64_t NOHW = g->N * g->O * H * W;
    float *part = NULL;
    if (splits > 1)
        DITTO_TRY(ditto_cuda_workspace(be, (size_t)splits * (size_t)NOHW * sizeof(float), (void **)&part));
    const int kh = flat ? 1 : (int)g->k[1], kw = flat ? 1 : (int)g->k[2];
    const int ph = flat ? 0 : (int)g->pb[1], pw = flat ? 0 : (int)g->pb[2];
    /* compiled square sizes need left padding k / 2 (the window's offset in its first 16-byte chunk is then fixed) */
    const int ks = kh == kw && (kh == 1 || kh == 3 || kh == 7) && pw == kw / 2 ? kh : 0;
    cudaStream_t st = ditto_cuda(be)->stream;
    const __half *xp = (const __half *)x->data, *wp = (const __half *)w->data;
    __half *yp = (__half *)y->data;
    const void *bp = bias ? bias->data : NULL;
    const bool bh = bias && bias->dtype == DITTO_F16;
    /* 16-byte staging when rows start aligned; either way the same windows land in shared memory */
    const bool vec = Win % 8 == 0 && (uintptr_t)xp % 16 == 0;
    const unsigned gx = (unsigned)((W + SO_TW - 1) / SO_TW), gz = (unsigned)(g->N * splits);
#define SO_ARGS xp, wp, bp, bh, accum, yp, part, (int)g->C, (int)g->O, (int)Hin, (int)Win, (int)H, (int)W, kh, kw, ph, pw, (int)g->N, vec
#define SO_GO(OMV, KSV)                                                                                         \
    k_conv_small_o<OMV, KSV><<<dim3(gx, (unsigned)((H + SoCfg<OMV, KSV>::TH - 1) / SoCfg<OMV, KSV>::TH), gz), \
                               SO_G * 32, 0, st>>>(SO_ARGS)
#define SO_KS(OMV)         \
    do {                   \
        if (ks == 1)       \
            SO_GO(OMV, 1); \
        else if (ks == 3)  \
            SO_GO(OMV, 3); \
        else if (ks == 7)  \
            SO_GO(OMV, 7); \
        else               \
            SO_GO(OMV, 0); \
    } while (0)
    if (g->O <= 1)
        SO_KS(1);
    else if (g->O <= 2)
        SO_KS(2);
    else if (g->O <= 4)
        SO_KS(4);
    else if (g->O <= 8)
        SO_KS(8);
    else if (g->O <= 12)
        SO_KS(12);
    else
        SO_KS(16);
#undef SO_KS
#undef SO_GO
#undef SO_ARGS
    DITTO_CUDA_LAUNCHED(be);
    if (splits > 1) {
        k_small_o_sum<<<ditto_cuda_blocks(NOHW, 256), 256, 0, st>>>(part, bp, bh, accum, yp, splits, (int)g->O, NOHW, H * W);
        DITTO_CUDA_LAUNCHED(be);
    }
    return 0;
}

/*
 * Largest NHWC scratch (x and y of one chunk of items) a call may use; 32 MiB
 * costs no measurable speed against 128 MiB and 76 MB of device memory less.
 */
#define NHWC_CHUNK_DEFAULT ((size_t)32 << 20)

/* DITTO_CUDA_NHWC_CHUNK_MB overrides the chunk bytes, for memory measurements. */
static size_t nhwc_chunk_bytes(void)
{
    static size_t b = 0;
    if (!b)
        b = (size_t)env_int("DITTO_CUDA_NHWC_CHUNK_MB", 1, INT_MAX, (int)(NHWC_CHUNK_DEFAULT >> 20)) << 20;
    return b;
}
#define NHWC_CHUNK_BYTES nhwc_chunk_bytes()

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/*
 * DITTO_CUDA_CONV_STUDY (measurement only, wrong results): "no-transpose"
 * skips the layout kernels around cuDNN (inputs, outputs and weights), "force-batch" runs every batched
 * plan whether or not it passed the per-item check: what each costs.
 */
static int study_mode(void)
{
    static int m = -1;
    if (m < 0) {
        const char *e = getenv("DITTO_CUDA_CONV_STUDY");
        m = !e ? 0 : !strcmp(e, "no-transpose") ? 1 : !strcmp(e, "force-batch") ? 2 : 0;
    }
    return m;
}

/*
 * Which plan runs the chunk starting at item n, and its item count:
 * chunks of nb items with the nb-item plan while it passed the per-item
 * check (pl_ok; 0 back), the last N % nb items with the tail plan when both
 * passed (1), else single items with the one-item plan (2).
 */
static int chunk_at(const ConvGeom *g, int64_t n, int64_t nb, bool pl_ok, bool tail_ok, int64_t *cnt)
{
    const int64_t full_end = pl_ok ? g->N / nb * nb : 0;
    if (n < full_end) {
        *cnt = nb;
        return 0;
    }
    if (tail_ok && n == g->N / nb * nb && pl_ok) {
        *cnt = g->N - n;
        return 1;
    }
    *cnt = 1;
    return 2;
}

static const ConvPlan *pick_chunk(const ConvGeom *g, int64_t n, int64_t nb, const ConvPlan *pl, const ConvPlan *tail, const ConvPlan *one,
                                  int64_t *cnt)
{
    const int k = chunk_at(g, n, nb, pl->batch_ok, tail && tail->batch_ok, cnt);
    return k == 0 ? pl : k == 1 ? tail : one;
}

/*
 * The cuDNN plans of a channels-last f16 convolution run in chunks of items:
 * nb items a chunk (as many as the chunk budget holds, item_bytes = one
 * item's x and y; 1 without batch), pl for them, tail for the last N % nb
 * items (NULL when none), one for single items; cws the largest of their
 * workspaces. conv_nhwc and conv_nhwc_direct chunk alike: the same plans.
 */
typedef struct ChunkPlans {
    int64_t nb;
    ConvPlan *pl, *tail, *one;
    size_t cws;
} ChunkPlans;

static int chunk_plans(DittoBackend *be, const ConvGeom *g, size_t item_bytes, bool batch, ChunkPlans *c)
{
    int64_t nb = batch ? (int64_t)(NHWC_CHUNK_BYTES / item_bytes) : 1;
    if (nb < 1)
        nb = 1;
    if (nb > g->N)
        nb = g->N;
    c->nb = nb;
    for (int pass = 0; pass < 2; pass++) {   /* plan_get may move the plan array: make all, then look all up */
        c->tail = NULL;
        DITTO_TRY(plan_get(be, g, DITTO_F16, 1, true, &c->one));
        DITTO_TRY(plan_get(be, g, DITTO_F16, nb, true, &c->pl));
        if (g->N % nb)
            DITTO_TRY(plan_get(be, g, DITTO_F16, g->N % nb, true, &c->tail));
    }
    c->cws = c->pl->ws > c->one->ws ? c->pl->ws : c->one->ws;
    if (c->tail && c->tail->ws > c->cws)
        c->cws = c->tail->ws;
    return 0;
}

static bool chunk_plans_unchecked(const ChunkPlans *c)
{
    return c->pl->batch_ok < 0 || (c->tail && c->tail->batch_ok < 0);
}

/*
 * First use of batched plans: the per-item bit check on hashed operands in
 * the workspace (wt_bytes of weights, then nb items of item_x and of item_y
 * bytes). It synchronises: never while capturing.
 */
static int check_chunk_plans(DittoBackend *be, const ConvGeom *g, const ChunkPlans *c, size_t wt_bytes, size_t item_x, size_t item_y)
{
    const size_t xt_bytes = align256(item_x * (size_t)c->nb), yt_bytes = align256(item_y * (size_t)c->nb);
    char *ws;
    DITTO_TRY(ditto_cuda_workspace(be, wt_bytes + xt_bytes + yt_bytes + c->cws, (void **)&ws));
    __half *wt = (__half *)ws, *xt = (__half *)(ws + wt_bytes), *yt = (__half *)(ws + wt_bytes + xt_bytes);
    void *cw = c->cws ? ws + wt_bytes + xt_bytes + yt_bytes : NULL;
    if (c->pl->batch_ok < 0)
        DITTO_TRY(batch_check(be, g, c->pl, c->one, 1, wt, xt, yt, cw, c->cws, c->nb));
    if (c->tail && c->tail->batch_ok < 0)
        DITTO_TRY(batch_check(be, g, c->tail, c->one, 1, wt, xt, yt, cw, c->cws, g->N % c->nb));
    return 0;
}

static int conv_nhwc(DittoBackend *be, const ConvGeom *g, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias,
                     bool relu, bool acc, DittoTensor *y, bool batch)
{
    DittoCuda *cu = ditto_cuda(be);
    const int study = study_mode();
    const int64_t cp = round8(g->C), op = round8(g->O);
    const size_t item_x = (size_t)(cp * g->in_vol) * 2, item_y = (size_t)(op * g->out_vol) * 2;
    ChunkPlans c;
    DITTO_TRY(chunk_plans(be, g, item_x + item_y, batch, &c));
    const int64_t nb = c.nb;
    ConvPlan *pl = c.pl, *tail = c.tail, *one = c.one;
    const size_t cws = c.cws;
    const size_t wt_bytes = align256((size_t)(op * cp * g->k_vol) * 2);
    const size_t xt_bytes = align256(item_x * (size_t)nb), yt_bytes = align256(item_y * (size_t)nb);
    if (chunk_plans_unchecked(&c))
        DITTO_TRY(check_chunk_plans(be, g, &c, wt_bytes, item_x, item_y));
    /* the check's workspace, the same size: wt, nb items of x and of y, cuDNN's */
    char *ws;
    DITTO_TRY(ditto_cuda_workspace(be, wt_bytes + xt_bytes + yt_bytes + cws, (void **)&ws));
    __half *wt = (__half *)ws, *xt = (__half *)(ws + wt_bytes), *yt = (__half *)(ws + wt_bytes + xt_bytes);
    void *cw = cws ? ws + wt_bytes + xt_bytes + yt_bytes : NULL;
    if (study == 2) {
        pl->batch_ok = 1;
        if (tail)
            tail->batch_ok = 1;
    }
    /* a channels-last w without channel padding is already what cuDNN reads (a 1x1(x1) w in either layout) */
    const bool krsc = w_krsc(w) || g->k_vol == 1;
    const __half *wk = krsc && op == g->O && cp == g->C ? (const __half *)w->data : wt;
    if (study != 1 && wk == wt) {
        launch_w_nhwc(cu->stream, (const __half *)w->data, krsc, wt, g->O, g->C, op, cp, g->k_vol);
        DITTO_CUDA_LAUNCHED(be);
    }
    /* chunks of nb items, the last one of N % nb; a plan that changes bits runs as single items instead */
    for (int64_t n = 0; n < g->N;) {
        int64_t cnt;
        const ConvPlan *p = pick_chunk(g, n, nb, pl, tail, one, &cnt);
        const __half *xi = (const __half *)x->data + n * g->C * g->in_vol;
        __half *yi = (__half *)y->data + n * g->O * g->out_vol;
        if (study != 1) {
            launch_to_nhwc(cu->stream, xi, xt, g->C, cp, g->in_vol, cnt);
            DITTO_CUDA_LAUNCHED(be);
        }
        DITTO_TRY(plan_run(be, p, xt, wk, yt, cw));
        if (study != 1) {
            launch_from_nhwc(cu->stream, yt, yi, bias ? bias->data : NULL, bias && bias->dtype == DITTO_F16, relu, acc, g->O, op,
                             g->out_vol, cnt);
            DITTO_CUDA_LAUNCHED(be);
        }
        n += cnt;
    }
    return 0;
}

/*
 * Depth-split 3-D convolution for few outputs (the warp's mask head, 142 ->
 * 22 at 7x7x7, and hourglass decoder block 4, 128 -> 32 at 3x3x3, over
 * 16x64x64): as an implicit GEMM their 22 or 32 output channels fill a
 * fraction of a tensor-core tile. Instead, every depth slice runs as a 2-D
 * image through a 2-D convolution whose outputs are all (depth tap, output)
 * pairs, kd * O channels (154, 96), and a second kernel adds the kd taps of
 * neighbouring slices: y[n,o,d] = b[o] + sum_i Z[n,d+i-pd][i*O + o] (relu
 * after). "Same" size, stride 1, no dilation only. Z is f16 (each of the kd
 * partial sums rounded once; they are added in fp32).
 *
 * Wide kernels (kw >= DEPTH_UNFOLD_KW, the mask head's 7x7) also move their
 * kw taps into channels: each slice row is unfolded into (W, kw, Cp)
 * (k_unfold_w) and convolved (kh x 1) over kw * Cp = 1008 channels. Same
 * products, another summation order inside cuDNN; on the H200 cuDNN ran
 * 144 -> 160 at 7x7 over 128 slices in 3.69 ms and 1008 -> 160 at 7x1 in
 * 2.01 ms (bench/torch_ref/conv_best.py --reshape). The unfolded rows need
 * kw times the input: they are made DEPTH_UNFOLD_SLICES slices at a time.
 */
#define DEPTH_MAX_O 32
#define DEPTH_UNFOLD_KW 5
#define DEPTH_UNFOLD_SLICES 8

static bool depth_split_fits(const ConvGeom *g)
{
    if (g->ns != 3 || g->G != 1 || g->O > DEPTH_MAX_O || g->k[0] < 2 || g->k[0] * g->O > 256)
        return false;
    for (int i = 0; i < 3; i++)
        if (g->s[i] != 1 || g->d[i] != 1 || g->pb[i] != g->pe[i] || 2 * g->pb[i] != g->k[i] - 1)
            return false;
    return true;
}

/* w2 (O2p, kh, kw, Cp): w2[i*O + o][ky][kx][c] = w[o][c][i][ky][kx] (w[o][i][ky][kx][c] when krsc), zero padded. */
static __global__ void k_w_depth(const __half *w, bool krsc, __half *w2, int O, int C, int kd, int kh, int kw, int Cp, int64_t n)
{
    for (int64_t t0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t0 < n; t0 += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = t0;
        int c = (int)(t % Cp);
        t /= Cp;
        int kx = (int)(t % kw);
        t /= kw;
        int ky = (int)(t % kh);
        int j = (int)(t / kh);
        __half v = __float2half(0.0f);
        if (j < kd * O && c < C) {
            int i = j / O, o = j - i * O;
            v = krsc ? w[((((int64_t)o * kd + i) * kh + ky) * kw + kx) * C + c] : w[((((int64_t)o * C + c) * kd + i) * kh + ky) * kw + kx];
        }
        w2[t0] = v;
    }
}

/*
 * xu (rows, W, kw, Cp) for the rows (s, h) of slices s0.. of x (N, C, D, H,
 * W), slice s = n * D + d: a block per row gathers it channels-last into
 * shared memory (channels C..Cp-1 zero), then writes each position's kw
 * taps w + kx - pw (zero outside the row) as 16-byte vectors. The same
 * memory order as w2's (kh, kw, Cp), so w2 serves as the (kh, 1) weight
 * over kw * Cp channels. Needs W * Cp * 2 bytes of shared memory and a
 * block of a multiple of kw * Cp / 8 threads: thread i of each group of
 * kw * Cp / 8 writes vector i of the positions its group takes, so the
 * stores are contiguous and the loop divides nothing.
 */
static __global__ void k_unfold_w(const __half *x, uint4 *xu, int C, int Cp, int D, int H, int W, int kw, int pw, int64_t s0)
{
    extern __shared__ __align__(16) __half urow[];   /* (W, Cp) */
    const int64_t s = s0 + blockIdx.x / H;
    const int h = (int)(blockIdx.x % H), d = (int)(s % D);
    const int64_t cs = (int64_t)D * H * W;            /* channel stride */
    const __half *src = x + s / D * C * cs + ((int64_t)d * H + h) * W;
    for (int t = threadIdx.x; t < Cp * W; t += blockDim.x) {
        const int c = t / W, w = t - c * W;
        urow[w * Cp + c] = c < C ? src[c * cs + w] : __float2half(0.0f);
    }
    __syncthreads();
    const int V = Cp / 8, KV = kw * V, G = blockDim.x / KV;
    const int g = threadIdx.x / KV, i = threadIdx.x - g * KV, kx = i / V, v = i - kx * V;
    uint4 *dst = xu + (int64_t)blockIdx.x * W * KV + i;
    for (int w = g; w < W; w += G) {
        const int sw = w + kx - pw;
        dst[w * KV] = sw >= 0 && sw < W ? *(const uint4 *)(urow + sw * Cp + 8 * v) : make_uint4(0u, 0u, 0u, 0u);
    }
}

/* k_unfold_w's block: whole groups of kw * Cp / 8 threads, about 512 in all. */
static int unfold_threads(int64_t kw, int64_t cp)
{
    const int kv = (int)(kw * cp / 8);
    return kv * (512 / kv > 0 ? 512 / kv : 1);
}

/* The tap sum's output: *y = acc + bias[o] (+ *y when accum), max(0, .) when relu, rounded once. */
static __device__ __forceinline__ void combine_store(float acc, const void *bias, bool bh, int o, bool accum, bool relu, __half *y)
{
    float r = acc + (bias ? ditto_ld(bias, o, bh) : 0.0f);
    if (accum)
        r += __half2float(*y);
    *y = __float2half_rn(relu ? fmaxf(r, 0.0f) : r);
}

/*
 * y (N, O, D, HW), or (N, D, HW, O) when nhwc, = bias + sum_i Z[n*D + d + i
 * - pd][hw][i*O + o] (+ y when accum), then max(0, .) when relu; a thread
 * per (n, d, hw), all O. Z's columns are in two pieces: column j < w0 in z0
 * (rows of w0), the rest in z1 (rows of w1).
 */
static __global__ void k_depth_combine(const __half *z0, int w0, const __half *z1, int w1, const void *bias, bool bh, bool accum,
                                       bool relu, bool nhwc, __half *y, int O, int kd, int pd, int D, int64_t HW, int64_t npos)
{
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < npos; p += (int64_t)gridDim.x * blockDim.x) {
        int64_t hw = p % HW, t = p / HW;
        int d = (int)(t % D);
        int64_t n = t / D;
        float acc[DEPTH_MAX_O];
#pragma unroll
        for (int o = 0; o < DEPTH_MAX_O; o++)
            acc[o] = 0.0f;
        for (int i = 0; i < kd; i++) {
            int dd = d + i - pd;
            if (dd < 0 || dd >= D)
                continue;
            const int64_t row = (n * D + dd) * HW + hw;
#pragma unroll
            for (int o = 0; o < DEPTH_MAX_O; o++) {
                const int j = i * O + o;
                if (o < O)
                    acc[o] += __half2float(j < w0 ? z0[row * w0 + j] : z1[row * w1 + (j - w0)]);
            }
        }
#pragma unroll
        for (int o = 0; o < DEPTH_MAX_O; o++)
            if (o < O)
                combine_store(acc[o], bias, bh, o, accum, relu,
                              y + (nhwc ? ((n * D + d) * HW + hw) * O + o : ((n * O + o) * D + d) * HW + hw));
    }
}

/*
 * k_depth_combine for one piece of Z (width wz), O even, HW a multiple of
 * COMB_P: a block per (n, d) and COMB_P positions stages the O columns of
 * all kd taps' rows in shared memory at once (4-byte words, rows at an odd
 * word stride; a tap outside the item stays unread), so the reads of Z are
 * all in flight together and the writes of y are coalesced (channels-last
 * y: a thread's k-th value is (position t / O, output t % O) of the block's
 * COMB_P * O, so neighbouring threads write neighbouring outputs). Needs
 * comb_smem() bytes of dynamic shared memory. The same sums in the same
 * order as k_depth_combine.
 */
#define COMB_P 64
#define COMB_T 256
static size_t comb_smem(int64_t O, int64_t kd)
{
    return (size_t)(kd * COMB_P * ((O / 2) | 1)) * 4;
}

static __global__ void __launch_bounds__(COMB_T) k_depth_combine_t(const __half *z, int wz, const void *bias, bool bh, bool accum,
                                                                   bool relu, bool nhwc, __half *y, int O, int kd, int pd, int D,
                                                                   int64_t HW)
{
    extern __shared__ uint32_t zs[];   /* (kd, COMB_P, st) */
    constexpr int NA = COMB_P * DEPTH_MAX_O / COMB_T;
    const int O2 = O / 2, st = O2 | 1, per_tap = COMB_P * O2;
    const int64_t hw0 = (int64_t)blockIdx.x * COMB_P, nd = blockIdx.y, n = nd / D;
    const int d = (int)(nd % D);
    const int i0 = pd - d > 0 ? pd - d : 0, i1 = D - 1 + pd - d < kd - 1 ? D - 1 + pd - d : kd - 1;   /* taps inside the item */
    /* word t of a tap's (COMB_P, O2) block is (r, q) = (t / O2, t % O2); a thread steps COMB_T words: no division in the loop */
    const int dr = COMB_T / O2, dq = COMB_T - dr * O2, r0 = threadIdx.x / O2, q0 = threadIdx.x - r0 * O2;
    for (int i = i0; i <= i1; i++) {
        const uint32_t *src = (const uint32_t *)(z + ((n * D + d + i - pd) * HW + hw0) * wz + i * O);
        uint32_t *dst = zs + i * COMB_P * st;
        int r = r0, q = q0;
#pragma unroll 4
        for (int t = threadIdx.x; t < per_tap; t += COMB_T) {
            dst[r * st + q] = src[r * (wz / 2) + q];
            r += dr;
            q += dq;
            if (q >= O2) {
                q -= O2;
                r++;
            }
        }
    }
    __syncthreads();
    float acc[NA];
#pragma unroll
    for (int k = 0; k < NA; k++)
        acc[k] = 0.0f;
    for (int i = i0; i <= i1; i++) {
#pragma unroll
        for (int k = 0; k < NA; k++) {
            const int t = threadIdx.x + k * COMB_T, o = nhwc ? t % O : t / COMB_P, p = nhwc ? t / O : t % COMB_P;
            if (o < O && p < COMB_P) {
                const __half2 v = *(const __half2 *)&zs[(i * COMB_P + p) * st + o / 2];
                acc[k] += __half2float(o & 1 ? __high2half(v) : __low2half(v));
            }
        }
    }
#pragma unroll
    for (int k = 0; k < NA; k++) {
        const int t = threadIdx.x + k * COMB_T, o = nhwc ? t % O : t / COMB_P, p = nhwc ? t / O : t % COMB_P;
        if (o < O && p < COMB_P)
            combine_store(acc[k], bias, bh, o, accum, relu,
                          y + (nhwc ? ((nd * HW + hw0 + p) * O + o) : ((n * O + o) * D + d) * HW + hw0 + p));
    }
}

/*
 * Measurement switches: DITTO_CUDA_DEPTH_PIECES=1|2 forces the depth
 * split's columns into one convolution or two; DITTO_CUDA_DEPTH_UNFOLD=0
 * keeps wide kernels' kw taps; DITTO_CUDA_UNFOLD_SLICES=n (1..64) sets the
 * slices unfolded at a time. Each read once.
 */
static int depth_pieces_env(void)
{
    static int n = -1;
    if (n < 0)
        n = env_int("DITTO_CUDA_DEPTH_PIECES", 1, 2, 0);
    return n;
}

static bool depth_unfold(const ConvGeom *g)
{
    static int on = -1;
    if (on < 0)
        on = env_int("DITTO_CUDA_DEPTH_UNFOLD", 0, 1, 1);
    /* k_unfold_w's row in shared memory, a group of threads per position */
    return on && g->k[2] >= DEPTH_UNFOLD_KW && g->in[2] * round8(g->C) * 2 <= 48 * 1024 && g->k[2] * round8(g->C) / 8 <= 1024;
}

static int64_t unfold_slices(int64_t D)
{
    static int s = -1;
    if (s < 0)
        s = env_int("DITTO_CUDA_UNFOLD_SLICES", 1, 64, DEPTH_UNFOLD_SLICES);
    int64_t ds = s < D ? s : D;
    while (D % ds)   /* a divisor of D: every call covers slices of one item at the same offsets, whatever the batch */
        ds--;
    return ds;
}

/*
 * nhwc: x (N, D, H, W, C) with C a multiple of 8, channels-last (not
 * unfolded): x's slices are the 2-D input as they are. y_nhwc: y (N, D, H,
 * W, O) channels-last, else (N, O, D, H, W) (the warp's mask head: nhwc x,
 * channels-first y).
 */
static int conv_depth_split(DittoBackend *be, const ConvGeom *g, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias,
                            bool accum, bool relu, bool nhwc, bool y_nhwc, DittoTensor *y)
{
    DittoCuda *cu = ditto_cuda(be);
    const int64_t D = g->in[0], HW = g->in[1] * g->in[2], kd = g->k[0], o2 = kd * g->O;
    const int64_t cp = round8(g->C), o2p = round8(o2);
    /* the 2-D convolution over slices on the wgmma kernel where it fits (its own reads of the rows: no unfolding) */
    DittoWgConv wc;
    memset(&wc, 0, sizeof wc);
    wc.N = D, wc.D = 1, wc.H = g->in[1], wc.W = g->in[2], wc.C = cp, wc.O = o2p, wc.ldy = o2p;
    wc.kd = 1, wc.kh = (int)g->k[1], wc.kw = (int)g->k[2];
    const bool wg = (!nhwc || cp == g->C) && wg_fits(be, &wc);
    const bool unfold = !nhwc && !wg && depth_unfold(g);
    if (nhwc && cp != g->C)
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op conv: the channels-last depth split needs C a multiple of 8");
    const int64_t kwu = unfold ? g->k[2] : 1, ds = unfold ? unfold_slices(D) : 0;
    /*
     * The 2-D convolution over depth slices: C -> kd * O columns, (kh, kw),
     * same size; unfolded: kw * Cp -> kd * O at (kh, 1). cuDNN's Hopper
     * kernels take outputs in tiles of 64 or 128: at (kh, kw) more than 128
     * columns (the mask head's 154) run as two convolutions, the last 64
     * columns apart (PyTorch probe on the H200, 128 slices: 160 outputs 3.69
     * ms, 96 + 64 outputs 2.19 + 1.23 ms); unfolded, one (2.01 against 1.25
     * + 0.91 ms). Each column's sum is the same computation in either piece.
     */
    const int forced = depth_pieces_env();
    const int np = wg ? 1 : forced ? (o2p > 64 ? forced : 1) : !unfold && o2p > 128 ? 2 : 1;
    const int64_t width[2] = { np == 2 ? o2p - 64 : o2p, np == 2 ? 64 : 0 };
    ConvGeom g2[2];
    for (int k = 0; k < np; k++) {
        g2[k] = *g;
        g2[k].ns = 2;
        g2[k].O = width[k];
        g2[k].in[0] = g2[k].out[0] = g2[k].k[0] = 1;
        g2[k].pb[0] = g2[k].pe[0] = 0;
        if (unfold) {
            g2[k].C = g2[k].Cg = kwu * cp;
            g2[k].k[2] = 1;
            g2[k].pb[2] = g2[k].pe[2] = 0;
        }
        g2[k].in_vol = g2[k].out_vol = HW;
        g2[k].k_vol = g2[k].k[1] * g2[k].k[2];
    }
    const size_t img_x = (size_t)(cp * HW) * 2, img_z = (size_t)(o2p * HW) * 2;
    int64_t nbi = (int64_t)(NHWC_CHUNK_BYTES / ((size_t)D * (img_x + img_z)));
    nbi = nbi < 1 ? 1 : nbi > g->N ? g->N : nbi;
    /* plans: unfolded, one of ds slices; else one item (D slices), a chunk of nbi items and the tail */
    ConvPlan *pitem[2] = { NULL, NULL }, *pchunk[2] = { NULL, NULL }, *ptail[2] = { NULL, NULL };
    const int64_t tail_items = unfold ? 0 : g->N % nbi;
    for (int pass = 0; pass < 2 && !wg; pass++) {   /* plan_get may move the plan array: make all, then look all up */
        for (int k = 0; k < np; k++) {
            DITTO_TRY(plan_get(be, &g2[k], DITTO_F16, unfold ? ds : D, true, &pitem[k]));
            if (!unfold)
                DITTO_TRY(plan_get(be, &g2[k], DITTO_F16, nbi * D, true, &pchunk[k]));
            if (tail_items)
                DITTO_TRY(plan_get(be, &g2[k], DITTO_F16, tail_items * D, true, &ptail[k]));
        }
    }
    size_t cws = 0;
    for (int k = 0; k < np && !wg; k++) {
        const ConvPlan *all[] = { pitem[k], pchunk[k], ptail[k] };
        for (int i = 0; i < 3; i++)
            if (all[i] && all[i]->ws > cws)
                cws = all[i]->ws;
    }
    const int64_t kvol2 = g->k[1] * g->k[2];   /* w2's taps per column and channel, unfolded or not */
    const size_t w2_bytes = align256((size_t)(o2p * cp * kvol2) * 2);
    /* xt: the chunk channels-last (unfolded: not needed, k_unfold_w reads x); xu: ds unfolded slices */
    const size_t xt_bytes = unfold ? 0 : align256(img_x * (size_t)(nbi * D)), zt_bytes = align256(img_z * (size_t)(nbi * D));
    const size_t xu_bytes = unfold ? align256(img_x * (size_t)(kwu * ds)) : 0;
    char *ws;
    DITTO_TRY(ditto_cuda_workspace(be, w2_bytes + xt_bytes + zt_bytes + xu_bytes + cws, (void **)&ws));
    /* w2 (o2p, kh, kw, Cp): piece k's rows follow piece k-1's; Z piece k (slices, HW, width[k]) likewise */
    __half *w2 = (__half *)ws, *xt = unfold ? NULL : (__half *)(ws + w2_bytes), *zt = (__half *)(ws + w2_bytes + xt_bytes);
    __half *xu = unfold ? (__half *)(ws + w2_bytes + xt_bytes + zt_bytes) : NULL;
    __half *wk[2] = { w2, w2 + width[0] * kvol2 * cp }, *zk[2] = { zt, zt + nbi * D * HW * width[0] };
    void *cw = cws ? ws + w2_bytes + xt_bytes + zt_bytes + xu_bytes : NULL;
    /* one item (its D slices in one call) is the reference: B = 1 runs it; bigger chunks must match it item by item */
    /* (the wgmma kernel computes every item alike at any count: no check) */
    bool chunk_ok = !unfold, tail_ok = tail_items > 0;
    for (int k = 0; k < np && !unfold && !wg; k++) {
        pitem[k]->batch_ok = 1;
        if (pchunk[k]->batch_ok < 0)
            DITTO_TRY(batch_check(be, &g2[k], pchunk[k], pitem[k], D, w2, xt, zt, cw, cws, nbi * D));
        if (ptail[k] && ptail[k]->batch_ok < 0)
            DITTO_TRY(batch_check(be, &g2[k], ptail[k], pitem[k], D, w2, xt, zt, cw, cws, tail_items * D));
        chunk_ok = chunk_ok && pchunk[k]->batch_ok;
        tail_ok = tail_ok && ptail[k]->batch_ok;
    }
    const int64_t nw = o2p * kvol2 * cp;
    k_w_depth<<<ditto_cuda_blocks(nw, 256), 256, 0, cu->stream>>>((const __half *)w->data, w_krsc(w), w2, (int)g->O, (int)g->C, (int)kd,
                                                                  (int)g->k[1], (int)g->k[2], (int)cp, nw);
    DITTO_CUDA_LAUNCHED(be);
    const void *bp = bias ? bias->data : NULL;
    const bool bh = bias && bias->dtype == DITTO_F16;
    for (int64_t n = 0; n < g->N;) {
        /*
         * the biggest chunk every piece checked: nbi items, the tail, else
         * one item (D slices, the reference); unfolded, nbi items in calls
         * of ds slices (the same calls for an item at every batch size)
         */
        int64_t cnt = g->N - n < nbi ? g->N - n : nbi;
        ConvPlan *const *p;
        if (unfold) {
            p = pitem;
        } else if (cnt == nbi && chunk_ok) {
            p = pchunk;
        } else if (tail_ok && cnt == tail_items) {
            p = ptail;
        } else {
            cnt = 1;
            p = pitem;
        }
        const __half *xi = (const __half *)x->data + n * g->C * D * HW;
        __half *yi = (__half *)y->data + n * g->O * D * HW;
        if (unfold) {
            const size_t smem = (size_t)(g->in[2] * cp) * 2;
            for (int64_t s0 = 0; s0 < cnt * D; s0 += ds) {
                k_unfold_w<<<(unsigned)(ds * g->in[1]), unfold_threads(kwu, cp), smem, cu->stream>>>(
                    xi, (uint4 *)xu, (int)g->C, (int)cp, (int)D, (int)g->in[1], (int)g->in[2], (int)kwu, (int)g->pb[2], s0);
                DITTO_CUDA_LAUNCHED(be);
                for (int k = 0; k < np; k++)
                    DITTO_TRY(plan_run(be, p[k], xu, wk[k], zk[k] + s0 * HW * width[k], cw));
            }
        } else {
            const __half *xs = xi;   /* channels-last x: already cnt*D slices (D*HW, C) */
            if (!nhwc) {
                launch_to_nhwc(cu->stream, xi, xt, g->C, cp, D * HW, cnt);   /* (cnt, D*HW, Cp): cnt*D slices, NHWC */
                DITTO_CUDA_LAUNCHED(be);
                xs = xt;
            }
            if (wg) {
                wc.x = xs, wc.w = w2, wc.y = zk[0], wc.N = cnt * D;
                DITTO_TRY(ditto_cuda_wg_conv(be, &wc));
            }
            for (int k = 0; k < np && !wg; k++)
                DITTO_TRY(plan_run(be, p[k], xs, wk[k], zk[k], cw));
        }
        if (np == 1 && g->O % 2 == 0 && HW % COMB_P == 0 && comb_smem(g->O, kd) <= 48 * 1024) {
            k_depth_combine_t<<<dim3((unsigned)(HW / COMB_P), (unsigned)(cnt * D)), COMB_T, comb_smem(g->O, kd), cu->stream>>>(
                zk[0], (int)width[0], bp, bh, accum, relu, y_nhwc, yi, (int)g->O, (int)kd, (int)g->pb[0], (int)D, HW);
        } else {
            const int64_t npos = cnt * D * HW;
            k_depth_combine<<<ditto_cuda_blocks(npos, 256), 256, 0, cu->stream>>>(zk[0], (int)width[0], zk[1], (int)width[1], bp, bh, accum,
                                                                                  relu, y_nhwc, yi, (int)g->O, (int)kd, (int)g->pb[0], (int)D,
                                                                                  HW, npos);
        }
        DITTO_CUDA_LAUNCHED(be);
        n += cnt;
    }
    return 0;
}

/* ---- epilogues and layout changes ---- */

/*
 * y (rows, O) f16 channels-last, 8 channels a thread: y = t + bias[o] (+ y
 * when acc), then max(0, .) when relu (k_from_nhwc's rounding); t may be y.
 */
static __global__ void k_bias_act_h8(const __half *t, __half *y, const void *bias, bool bh, bool relu, bool acc, int64_t O8, int64_t nvec)
{
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o0 = v % O8 * 8;
        uint4 u = ((const uint4 *)t)[v], r = make_uint4(0u, 0u, 0u, 0u);
        if (acc)
            r = ((const uint4 *)y)[v];
        __half2 *h = (__half2 *)&u;
        const __half2 *hr = (const __half2 *)&r;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __half22float2(h[j]);
            f.x += bias ? ditto_ld(bias, o0 + 2 * j, bh) : 0.0f;
            f.y += bias ? ditto_ld(bias, o0 + 2 * j + 1, bh) : 0.0f;
            if (acc) {
                const float2 fr = __half22float2(hr[j]);
                f.x += fr.x;
                f.y += fr.y;
            }
            if (relu) {
                f.x = f.x > 0.0f ? f.x : 0.0f;
                f.y = f.y > 0.0f ? f.y : 0.0f;
            }
            h[j] = __floats2half2_rn(f.x, f.y);
        }
        ((uint4 *)y)[v] = u;
    }
}

/* y = y + bias[c] (bias may be NULL), then max(0, .) when relu; c = i % O channels-last, else i / vol % O. */
static __global__ void k_bias_act(void *y, bool yh, const void *bias, bool bh, bool relu, bool nhwc, int64_t O, int64_t vol, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = nhwc ? i % O : i / vol % O;
        float v = ditto_ld(y, i, yh) + (bias ? ditto_ld(bias, c, bh) : 0.0f);
        ditto_st(y, i, relu && !(v > 0.0f) ? 0.0f : v, yh);
    }
}

/* In place on a contiguous y: + bias (or NULL), relu; vectorised for f16 channels-last with O % 8 == 0 and an aligned y. */
static int bias_act(DittoBackend *be, DittoTensor *y, const DittoTensor *bias, bool relu, bool nhwc, int64_t O, int64_t vol)
{
    if (!bias && !relu)
        return 0;
    const int64_t n = ditto_tensor_numel(y);
    if (n == 0)
        return 0;
    cudaStream_t st = ditto_cuda(be)->stream;
    const void *bp = bias ? bias->data : NULL;
    const bool bh = bias && bias->dtype == DITTO_F16;
    if (nhwc && y->dtype == DITTO_F16 && O % 8 == 0 && (uintptr_t)y->data % 16 == 0)
        k_bias_act_h8<<<ditto_cuda_blocks(n / 8, 256), 256, 0, st>>>((const __half *)y->data, (__half *)y->data, bp, bh, relu, false, O / 8,
                                                                      n / 8);
    else
        k_bias_act<<<ditto_cuda_blocks(n, 256), 256, 0, st>>>(y->data, y->dtype == DITTO_F16, bp, bh, relu, nhwc, O, vol, n);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/*
 * DITTO_CUDA_CONV (measurements): 0 nchw, 1 nhwc (one call per item), 2
 * nhwc-batch (default), 3 no-split; see cuda_conv.
 */
static int conv_mode(void)
{
    static int mode = -1;
    if (mode < 0) {
        const char *e = getenv("DITTO_CUDA_CONV");
        mode = !e || !strcmp(e, "nhwc-batch") ? 2 : !strcmp(e, "no-split") ? 3 : !strcmp(e, "nhwc") ? 1 : 0;
    }
    return mode;
}

/* cuDNN NCHW, one call per item, y prefilled with the bias (or the residual plus the bias): the f32 path and the f16 fallbacks; w contiguous. */
static int conv_nchw_cudnn(DittoBackend *be, const DittoConvParams *p, const ConvGeom *gp, const DittoTensor *x, const DittoTensor *w,
                           const DittoTensor *bias, DittoTensor *y)
{
    const ConvGeom g = *gp;
    DittoDType dt = x->dtype;
    DittoCuda *cu = ditto_cuda(be);
    bool f16 = dt == DITTO_F16;
    if (p->accumulate) {   /* y += bias: cuDNN adds the convolution onto the residual */
        DITTO_TRY(bias_act(be, y, bias, false, false, g.O, g.out_vol));
    } else {
        const int64_t ny = g.N * g.O * g.out_vol;
        k_bias_fill<<<ditto_cuda_blocks(ny, 256), 256, 0, cu->stream>>>(bias ? bias->data : NULL,
                                                                        bias && bias->dtype == DITTO_F16, y->data, f16, g.O,
                                                                        g.out_vol, ny);
        DITTO_CUDA_LAUNCHED(be);
    }
    /* nothing to reduce (no input channels or an empty input): every tap reads zeros, y = bias or 0 */
    if (g.C == 0 || g.in_vol == 0)
        return bias_act(be, y, NULL, p->relu, false, g.O, g.out_vol);
    const int64_t nb = 1;
    ConvPlan *pl;
    DITTO_TRY(plan_get(be, &g, dt, nb, false, &pl));
    size_t esz = ditto_dtype_size(dt);
    size_t item_in = (size_t)(g.C * g.in_vol) * esz, item_out = (size_t)(g.O * g.out_vol) * esz;
    int64_t pad_n = pl->pre_pad ? g.C * pl->pin[0] * pl->pin[1] * pl->pin[2] : 0;
    size_t pad_bytes = ((size_t)pad_n * esz + 255) & ~(size_t)255;
    char *ws = NULL;
    if (pad_bytes + pl->ws > 0)
        DITTO_TRY(ditto_cuda_workspace(be, pad_bytes + pl->ws, (void **)&ws));
    const float one = 1.0f;
    for (int64_t n = 0; n < g.N; n += nb) {
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
    return bias_act(be, y, NULL, p->relu, false, g.O, g.out_vol);
}

/* NCHW tensors: the strategies of the header; relu fused into k_from_nhwc on the channels-last path, else one more pass. */
static int conv_nchw(DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w,
                     const DittoTensor *bias, DittoTensor *y)
{
    DittoDType dt = x->dtype;
    ConvGeom g;
    conv_geom(p, x, w, y, &g);
    if (g.N * g.O * g.out_vol == 0)
        return 0;
    bool f16 = dt == DITTO_F16;
    /*
     * f16 strategy override for measurements, DITTO_CUDA_CONV: nchw (cuDNN
     * NCHW, one call per item), nhwc (channels-last, one call per item),
     * nhwc-batch (checked batched plans), no-split (nhwc-batch without the
     * depth split); default: nhwc-batch with the depth split.
     */
    const int mode = conv_mode();
    bool asym = false;
    for (int i = 0; i < 3; i++)
        asym = asym || g.pb[i] != g.pe[i];
    int64_t soH, soW, soHin, soWin;
    bool flat;
    if (f16 && g.C > 0 && g.in_vol > 0 && small_o_fits(&g, &soH, &soW, &soHin, &soWin, &flat)) {
        DittoTensor wc;
        void *tmp;
        DITTO_TRY(w_contiguous(be, w, &wc, &tmp));
        if (tap_gemm_fits(&g, soHin, soWin, flat))
            DITTO_TRY(release_w(be, tmp, conv_tap_gemm(be, &g, soH, soW, soHin, soWin, x, &wc, bias, p->accumulate, y)));
        else
            DITTO_TRY(release_w(be, tmp, conv_small_o(be, &g, soH, soW, soHin, soWin, flat, x, &wc, bias, p->accumulate, y)));
        return bias_act(be, y, NULL, p->relu, false, g.O, g.out_vol);
    }
    if (f16 && mode == 2 && g.C > 0 && g.in_vol > 0 && depth_split_fits(&g)) {
        return conv_depth_split(be, &g, x, w, bias, p->accumulate, p->relu, false, false, y);
    }
    if (f16 && mode > 0 && g.G == 1 && !asym && g.C > 0 && g.in_vol > 0)
        return conv_nhwc(be, &g, x, w, bias, p->relu, p->accumulate, y, mode >= 2);
    DittoTensor wc;
    void *tmp;
    DITTO_TRY(w_contiguous(be, w, &wc, &tmp));
    return release_w(be, tmp, conv_nchw_cudnn(be, p, &g, x, &wc, bias, y));
}

static int is_capturing(DittoBackend *be, bool *cap)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    DITTO_CUDA_CHECK(be, cudaStreamIsCapturing(ditto_cuda(be)->stream, &cs));
    *cap = cs != cudaStreamCaptureStatusNone;
    return 0;
}

/*
 * Channels-last tensors, the direct path (f16, 2-D or 3-D, groups 1, symmetric
 * padding, C and O multiples of 8): cuDNN reads x and writes y in place
 * through NHWC descriptors (the plans and per-item checks of conv_nhwc, so
 * the same kernels and bits as that path), w is relaid out to KRSC, then
 * one vectorised pass adds the bias and applies the relu.
 */
static bool nhwc_direct_fits(const ConvGeom *g, const DittoTensor *x, const DittoTensor *y)
{
    bool asym = false;
    for (int i = 0; i < 3; i++)
        asym = asym || g->pb[i] != g->pe[i];
    return x->dtype == DITTO_F16 && (g->ns == 2 || g->ns == 3) && g->G == 1 && !asym && g->C > 0 && g->in_vol > 0 && g->C % 8 == 0 &&
           g->O % 8 == 0 && ((uintptr_t)x->data | (uintptr_t)y->data) % 16 == 0;
}

/*
 * DITTO_CUDA_NHWC_EPILOGUE=scratch (measurement, same results): the direct
 * path's convolutions with a bias or relu also go through the per-chunk
 * scratch (cuDNN writes the chunk there, the bias pass reads it and writes
 * y once) instead of the in-place pass over y: whether a chunk that stays in
 * L2 saves the pass's HBM traffic.
 */
static bool nhwc_epilogue_scratch(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("DITTO_CUDA_NHWC_EPILOGUE");
        on = e && !strcmp(e, "scratch");
    }
    return on;
}

/* ---- conv_fused: the direct path's epilogue inside cuDNN's kernel ---- */

/*
 * A bias, relu and residual after a channels-last convolution cost a pass
 * over y (k_bias_act_h8), or with the residual a scratch output and a pass
 * (9-14 us an item at 64x64x512 on the H200). cuDNN can apply them in the
 * convolution's own epilogue, before y's one rounding:
 * - relu(conv + bias (+ y)): graph-API engines compiled ahead of time
 *   (conv_graph.h, CG_EPI_*), as fast as the plain convolution's;
 * - conv + bias + y (and relu(conv + bias + y)):
 *   cudnnConvolutionBiasActivationForward, for the identity with the
 *   implicit-precomp GEMM (the only algorithm it takes there; graph engines
 *   for the identity compile at run time, which model load cannot afford),
 *   an f16 bias. Without the residual this call would be handed y as its z
 *   with a zero scale, and whether it reads it is not documented: y may hold
 *   any bits, so conv + bias alone keeps its pass.
 * Per geometry and kind, fused and unfused (the tuned conv plan, then the
 * pass) are timed once like the engines (tune_fused), and the choice is
 * kept in the choices file under the geometry key whose last number is the
 * kind (EPI_KEY). A fused plan for N items runs batched only once checked
 * bit-identical per item against its one-item plan (fused_check), as the
 * plain plans are. DITTO_CUDA_CONV_EPILOGUE=pass keeps the pass (A/B).
 */
enum { EPI_NONE, EPI_RELU, EPI_ZRELU, EPI_ZID };
#define EPI_KEY (KEY_LEN - 1)                     /* make_key leaves this last number 0 */
#define EPI_LEGACY_ENGINE ((int64_t)1 << 30)      /* a choice's engine: cudnnConvolutionBiasActivationForward */

struct FusedPlan {
    int64_t key[KEY_LEN];
    int epi;
    ConvPlan conv;                /* descriptors and algorithm (legacy), or conv.cg (graph engine) */
    cudnnTensorDescriptor_t bd;   /* legacy: the bias (1, O, 1, 1) */
    cudnnActivationDescriptor_t ad;
    int batch_ok;                 /* as ConvPlan's */
};

static bool epi_relu(int epi)
{
    return epi == EPI_RELU || epi == EPI_ZRELU;
}

static bool epi_z(int epi)
{
    return epi == EPI_ZRELU || epi == EPI_ZID;
}

static int epi_kind(const DittoTensor *bias, bool relu, bool acc)
{
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("DITTO_CUDA_CONV_EPILOGUE");
        off = e && !strcmp(e, "pass");
    }
    if (off || !bias || engine_mode() == ENG_LEGACY)
        return EPI_NONE;
    /* the identity form takes an f16 bias only (pseudo-half configuration), and the residual (above) */
    if (!relu && (bias->dtype != DITTO_F16 || !acc))
        return EPI_NONE;
    return relu ? (acc ? EPI_ZRELU : EPI_RELU) : EPI_ZID;
}

static void fused_plan_free(FusedPlan *f)
{
    if (!f)
        return;
    plan_destroy(&f->conv);
    if (f->bd)
        cudnnDestroyTensorDescriptor(f->bd);
    if (f->ad)
        cudnnDestroyActivationDescriptor(f->ad);
    ditto_free(f);
}

static void epi_key(const ConvGeom *g, int64_t nb, int epi, bool bh, int64_t *key)
{
    make_key(g, DITTO_F16, nb, true, key);
    key[EPI_KEY] = epi + (bh ? 8 : 0);
}

/* *out: engine e's fused plan of g at nb items, or NULL when e does not run it (freed). */
static int fused_setup(DittoBackend *be, const ConvGeom *g, int64_t nb, int epi, bool bh, const CgEngine *e, FusedPlan **out)
{
    DittoCuda *cu = ditto_cuda(be);
    *out = NULL;
    FusedPlan *f = (FusedPlan *)ditto_calloc(1, sizeof *f);
    if (!f)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op conv: out of memory for a fused plan");
    epi_key(g, nb, epi, bh, f->key);
    f->epi = epi;
    int rc = plan_setup_legacy(be, g, DITTO_F16, nb, true, &f->conv);
    f->batch_ok = nb == 1 ? 1 : -1;
    bool ok = rc == 0;
    if (ok && e->index == EPI_LEGACY_ENGINE) {
        const int bdim[5] = { 1, (int)g->O, 1, 1, 1 };   /* (1, O, 1...) of the convolution's rank */
        cudnnConvolutionFwdAlgo_t algo = epi_relu(epi) ? f->conv.algo : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
        size_t need = 0;
        ok = cudnnGetConvolutionForwardWorkspaceSize(cu->cudnn, f->conv.xd, f->conv.wd, f->conv.cd, f->conv.yd, algo, &need) ==
                 CUDNN_STATUS_SUCCESS &&
             need <= CONV_WS_LIMIT && cudnnCreateTensorDescriptor(&f->bd) == CUDNN_STATUS_SUCCESS &&
             cudnnSetTensorNdDescriptorEx(f->bd, CUDNN_TENSOR_NHWC, bh ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT, g->ns == 3 ? 5 : 4, bdim) ==
                 CUDNN_STATUS_SUCCESS &&
             cudnnCreateActivationDescriptor(&f->ad) == CUDNN_STATUS_SUCCESS &&
             cudnnSetActivationDescriptor(f->ad, epi_relu(epi) ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                          CUDNN_NOT_PROPAGATE_NAN, 0.0) == CUDNN_STATUS_SUCCESS;
        f->conv.algo = algo;
        f->conv.ws = need;
    } else if (ok) {
        CgConv cv;
        cg_conv(g, g->C, g->O, nb, &cv);
        cv.epi = epi == EPI_RELU ? CG_EPI_RELU : CG_EPI_ZRELU;
        cv.bias_f16 = bh;
        ok = epi_relu(epi) && (rc = ditto_cg_plan(be, &cv, e, CONV_WS_LIMIT, &f->conv.cg)) == 0 && f->conv.cg;
        if (ok)
            f->conv.ws = f->conv.cg->ws;
    }
    if (!ok) {
        fused_plan_free(f);
        return rc < 0 ? rc : 0;
    }
    *out = f;
    return 0;
}

/* y = epilogue(conv(x, w)) with f in place (z is y); ws: f->conv.ws bytes. */
static cudnnStatus_t fused_exec(DittoBackend *be, const FusedPlan *f, const void *x, const void *w, const void *bias, void *y, void *ws)
{
    if (f->conv.cg)
        return ditto_cg_exec(be, f->conv.cg, x, w, bias, y, y, f->conv.ws ? ws : NULL);
    const float one = 1.0f, a2 = epi_z(f->epi) ? 1.0f : 0.0f;
    return cudnnConvolutionBiasActivationForward(ditto_cuda(be)->cudnn, &one, f->conv.xd, x, f->conv.wd, w, f->conv.cd, f->conv.algo,
                                                 f->conv.ws ? ws : NULL, f->conv.ws, &a2, f->conv.yd, y, f->bd, bias, f->ad, f->conv.yd,
                                                 y);
}

static __global__ void k_bias_act_h8(const __half *t, __half *y, const void *bias, bool bh, bool relu, bool acc, int64_t O8, int64_t nvec);

/*
 * Hashed operands of a fused timing or check: x (n items), w, bias, z and y
 * (n items), y1 (one item), t (n items, the unfused path's scratch).
 */
typedef struct FusedBufs {
    char *buf;
    __half *x, *w, *z, *y, *y1, *t;
    void *bias;
    int64_t item_x, item_y;
    unsigned int *cnt;
} FusedBufs;

static int fused_bufs(DittoBackend *be, const ConvGeom *g, int64_t n, bool bh, FusedBufs *b)
{
    DittoCuda *cu = ditto_cuda(be);
    memset(b, 0, sizeof *b);
    b->item_x = g->C * g->in_vol;
    b->item_y = g->O * g->out_vol;
    const size_t sx = align256((size_t)(n * b->item_x) * 2), sw = align256((size_t)(g->O * g->C * g->k_vol) * 2),
                 sb = align256((size_t)g->O * 4), sy = align256((size_t)(n * b->item_y) * 2), s1 = align256((size_t)b->item_y * 2);
    if (cudaMallocAsync((void **)&b->buf, sx + sw + sb + 3 * sy + s1 + 256, cu->stream) != cudaSuccess) {
        cudaGetLastError();
        b->buf = NULL;
        return 0;
    }
    char *p = b->buf;
    b->x = (__half *)p;
    b->w = (__half *)(p += sx);
    b->bias = (void *)(p += sw);
    b->z = (__half *)(p += sb);
    b->y = (__half *)(p += sy);
    b->t = (__half *)(p += sy);
    b->y1 = (__half *)(p += sy);
    b->cnt = (unsigned int *)(p + s1);
    /* values in [-1, 1), as tune_engines' */
    k_fill_hash<<<ditto_cuda_blocks(n * b->item_x, 256), 256, 0, cu->stream>>>(b->x, n * b->item_x, 0x51ed270bu);
    k_fill_hash<<<ditto_cuda_blocks(g->O * g->C * g->k_vol, 256), 256, 0, cu->stream>>>(b->w, g->O * g->C * g->k_vol, 0x2f6b1c3du);
    k_fill_hash<<<ditto_cuda_blocks(n * b->item_y, 256), 256, 0, cu->stream>>>(b->z, n * b->item_y, 0x7a3c9e11u);
    if (bh)
        k_fill_hash<<<1, 256, 0, cu->stream>>>((__half *)b->bias, g->O, 0x1b873593u);
    else
        cudaMemsetAsync(b->bias, 0, (size_t)g->O * 4, cu->stream);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/*
 * *same: fused plan f over its n items gives, for each, the bits of plan one
 * on that item alone (both in place over a copy of z).
 */
static int fused_same(DittoBackend *be, const FusedPlan *f, const FusedPlan *one, int64_t n, const FusedBufs *b, bool *same)
{
    DittoCuda *cu = ditto_cuda(be);
    void *ws;
    *same = false;
    if (!tune_ws(cu, f->conv.ws > one->conv.ws ? f->conv.ws : one->conv.ws, &ws))
        return 0;
    cudaMemsetAsync(b->cnt, 0, sizeof *b->cnt, cu->stream);
    cudaMemcpyAsync(b->y, b->z, (size_t)(n * b->item_y) * 2, cudaMemcpyDeviceToDevice, cu->stream);
    bool ran = fused_exec(be, f, b->x, b->w, b->bias, b->y, ws) == CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; i < n && ran; i++) {
        cudaMemcpyAsync(b->y1, b->z + i * b->item_y, (size_t)b->item_y * 2, cudaMemcpyDeviceToDevice, cu->stream);
        ran = fused_exec(be, one, b->x + i * b->item_x, b->w, b->bias, b->y1, ws) == CUDNN_STATUS_SUCCESS;
        if (ran)
            k_count_diff<<<ditto_cuda_blocks(b->item_y, 256), 256, 0, cu->stream>>>((const uint16_t *)(b->y + i * b->item_y),
                                                                                     (const uint16_t *)b->y1, b->item_y, b->cnt);
    }
    if (ws)
        cudaFreeAsync(ws, cu->stream);
    unsigned int host = 1;
    DITTO_TRY(read_count(be, b->cnt, "cudaMemcpyAsync (fused check)", &host));
    *same = ran && host == 0;
    return 0;
}

/*
 * Mean ms of TUNE_RUNS runs (after one untimed, behind a spin) of f, or of
 * the unfused plan u and its pass when f is NULL; < 0: does not run.
 */
static int fused_time(DittoBackend *be, const ConvGeom *g, const FusedPlan *f, const ConvPlan *u, int epi, bool bh, int64_t n,
                      const FusedBufs *b, cudaEvent_t e0, cudaEvent_t e1, float *ms)
{
    DittoCuda *cu = ditto_cuda(be);
    void *ws;
    *ms = -1.0f;
    k_tune_spin<<<1, 1, 0, cu->stream>>>(TUNE_SPIN_CYCLES);
    DITTO_CUDA_LAUNCHED(be);
    if (!tune_ws(cu, f ? f->conv.ws : u->ws, &ws))
        return 0;
    const int64_t nvec = n * b->item_y / 8;
    bool ran = true;
    for (int r = 0; r <= TUNE_RUNS && ran; r++) {
        if (r == 1)
            cudaEventRecord(e0, cu->stream);
        if (f) {
            ran = fused_exec(be, f, b->x, b->w, b->bias, b->y, ws) == CUDNN_STATUS_SUCCESS;
        } else {
            __half *out = epi_z(epi) ? b->t : b->y;   /* conv_nhwc_direct's unfused forms */
            ran = plan_exec(be, u, b->x, b->w, out, ws) == CUDNN_STATUS_SUCCESS;
            k_bias_act_h8<<<ditto_cuda_blocks(nvec, 256), 256, 0, cu->stream>>>(out, b->y, b->bias, bh, epi_relu(epi), epi_z(epi), g->O / 8,
                                                                                nvec);
        }
    }
    return tune_end(be, e0, e1, ws, ran, ms);
}

/*
 * The items tune_fused checks a fused plan's bits per item at when it tunes
 * at one item (a B = 1 call first): the chunk conv_nhwc_direct takes of a
 * batch of FUSED_CHECK_ITEMS, the default batch.
 */
#define FUSED_CHECK_ITEMS 8
static int64_t fused_check_items(const ConvGeom *g)
{
    const size_t item = (size_t)(g->C * g->in_vol + g->O * g->out_vol) * 2;
    const int64_t nb = item ? (int64_t)(NHWC_CHUNK_BYTES / item) : 1;
    return nb < 1 ? 1 : nb > FUSED_CHECK_ITEMS ? FUSED_CHECK_ITEMS : nb;
}

/*
 * Choose e (key set) for kind epi at n items: the unfused plan u and its
 * pass (u1's n times over when u runs item by item) against each fused
 * candidate (the heuristics' engines for the relu kinds, then the legacy
 * call), the fastest candidate under the unfused time
 * that keeps its bits per item (checked at n items, or at
 * fused_check_items when n is 1: a choice that cannot batch would run item
 * by item in every batched call, and falling back to the unfused plan then
 * would make bits depend on the batch size); else e->n = 0 (unfused).
 * *timed as tune_engines'.
 */
static int tune_fused(DittoBackend *be, const ConvGeom *g, int epi, bool bh, int64_t n, const ConvPlan *u, const ConvPlan *u1,
                      ConvEngines *e, bool *timed)
{
    DittoCuda *cu = ditto_cuda(be);
    *timed = false;
    e->n = 0;
    CgEngine cand[CONV_MAX_ENGINES + 1];
    int nc = 0;
    if (epi_relu(epi)) {
        CgConv cv;
        cg_conv(g, g->C, g->O, n, &cv);
        cv.epi = epi == EPI_RELU ? CG_EPI_RELU : CG_EPI_ZRELU;
        cv.bias_f16 = bh;
        DITTO_TRY(ditto_cg_engines(be, &cv, engine_mode() == ENG_TUNE_B, cand, CONV_MAX_ENGINES, &nc));
    }
    if (bh && epi_z(epi)) {   /* the legacy call is handed y as z: with the residual only */
        memset(&cand[nc], 0, sizeof cand[nc]);
        cand[nc++].index = EPI_LEGACY_ENGINE;
    }
    if (!nc)
        return 0;
    FusedBufs b;
    DITTO_TRY(fused_bufs(be, g, n, bh, &b));
    if (!b.buf)
        return 0;   /* no room to time: unfused, not kept */
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms[CONV_MAX_ENGINES + 1], ms_u = -1.0f;
    int rc = 0, pick = -1;
    int64_t nchk = n > 1 ? n : fused_check_items(g);
    FusedBufs bc = b;   /* the check's operands: b's, or nchk items of their own */
    if (nchk != n) {
        rc = fused_bufs(be, g, nchk, bh, &bc);
        if (!rc && !bc.buf) {   /* no room: checked at n */
            bc = b;
            nchk = n;
        }
        if (rc)
            goto done;
    }
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        rc = ditto_cuda_fail(be, cudaGetLastError(), "cudaEventCreate (fused timing)", __FILE__, __LINE__);
        goto done;
    }
    rc = fused_time(be, g, NULL, u, epi, bh, n, &b, e0, e1, &ms_u);
    /* an unfused plan that changes bits per item runs item by item (tune_by_item) */
    if (!rc && n > 1 && u->batch_ok == 0 && ms_u >= 0.0f && tune_by_item()) {
        float m1 = -1.0f;
        rc = fused_time(be, g, NULL, u1, epi, bh, 1, &b, e0, e1, &m1);
        if (m1 >= 0.0f)
            ms_u = (float)n * m1;
    }
    for (int i = 0; i < nc && !rc; i++) {
        FusedPlan *f = NULL;
        ms[i] = -1.0f;
        rc = fused_setup(be, g, n, epi, bh, &cand[i], &f);
        if (!rc && f)
            rc = fused_time(be, g, f, NULL, epi, bh, n, &b, e0, e1, &ms[i]);
        fused_plan_free(f);
    }
    while (!rc) {
        int best = -1;
        for (int i = 0; i < nc; i++)
            if (ms[i] >= 0.0f && (ms_u < 0.0f || ms[i] < tune_margin() * ms_u) && (best < 0 || ms[i] < ms[best]))
                best = i;
        if (best < 0)
            break;
        FusedPlan *f = NULL, *one = NULL;
        bool same = nchk == 1;
        rc = fused_setup(be, g, nchk, epi, bh, &cand[best], &f);
        if (!rc && f)
            rc = fused_setup(be, g, 1, epi, bh, &cand[best], &one);
        if (!rc && f && one && nchk > 1)
            rc = fused_same(be, f, one, nchk, &bc, &same);
        same = same && f && one;
        fused_plan_free(f);
        fused_plan_free(one);
        if (same) {
            pick = best;
            break;
        }
        ms[best] = -1.0f;
    }
    if (!rc) {
        char got[64] = "pass kept";
        if (pick >= 0)
            snprintf(got, sizeof got, "%s %.1f us", cand[pick].index == EPI_LEGACY_ENGINE ? "fused (legacy call)" : "fused engine",
                     1000.0 * ms[pick]);
        ditto_log(&be->log, DITTO_LOG_DEBUG,
                  "conv: C %lld O %lld k %lldx%lldx%lld in %lldx%lldx%lld epilogue %d at %lld items: pass %.1f us, %s", (long long)g->C, (long long)g->O, (long long)g->k[0], (long long)g->k[1], (long long)g->k[2], (long long)g->in[0],
                  (long long)g->in[1], (long long)g->in[2], epi, (long long)n, 1000.0 * ms_u, got);
        if (pick >= 0) {
            e->eng[0] = cand[pick];
            e->n = 1;
        }
        *timed = true;
    }
done:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (bc.buf != b.buf)
        cudaFreeAsync(bc.buf, cu->stream);
    cudaFreeAsync(b.buf, cu->stream);
    return rc;
}

/* The choice for g and kind epi (tuned at n items with the unfused plans u, u1 on first use): *out, or NULL for unfused. */
static int fused_choice(DittoBackend *be, const ConvGeom *g, int epi, bool bh, int64_t n, const ConvPlan *u, const ConvPlan *u1,
                        const CgEngine **out)
{
    DittoCudaConvCache *c = ditto_cuda(be)->conv_cache;
    *out = NULL;
    if (!c->file_read)
        DITTO_TRY(engine_file_read(be, c));
    int64_t key[KEY_LEN];
    epi_key(g, 0, epi, bh, key);
    int i = 0;
    while (i < c->neng && memcmp(c->engines[i].key, key, sizeof key))
        i++;
    if (i == c->neng) {
        bool cap, timed = false;
        DITTO_TRY(is_capturing(be, &cap));
        if (cap)
            return 0;   /* cannot time while recording: unfused, decided on an uncaptured run */
        DITTO_TRY(engines_grow(be, c));
        ConvEngines *e = &c->engines[c->neng];
        memset(e, 0, sizeof *e);
        memcpy(e->key, key, sizeof key);
        DITTO_TRY(tune_fused(be, g, epi, bh, n, u, u1, e, &timed));
        if (timed)
            engine_file_append(be, e);
        c->neng++;
    }
    *out = c->engines[i].n ? &c->engines[i].eng[0] : NULL;
    return 0;
}

/* *out: the cached fused plan of g at nb items with engine e (made on first use; NULL when e does not run it). */
static int fused_get(DittoBackend *be, const ConvGeom *g, int64_t nb, int epi, bool bh, const CgEngine *e, FusedPlan **out)
{
    DittoCudaConvCache *c = ditto_cuda(be)->conv_cache;
    int64_t key[KEY_LEN];
    epi_key(g, nb, epi, bh, key);
    for (int i = 0; i < c->nfused; i++)
        if (!memcmp(c->fused[i]->key, key, sizeof key)) {
            *out = c->fused[i];
            return 0;
        }
    *out = NULL;
    DITTO_TRY(cache_grow(be, (void **)&c->fused, c->nfused, &c->capfused, sizeof(FusedPlan *), "fused plan"));
    FusedPlan *f = NULL;
    DITTO_TRY(fused_setup(be, g, nb, epi, bh, e, &f));
    if (f) {
        c->fused[c->nfused++] = f;
        *out = f;
    }
    return 0;
}

/* First use of a fused plan of nb > 1 items: the per-item check against one (never while capturing: then item by item). */
static int fused_batch_check(DittoBackend *be, const ConvGeom *g, FusedPlan *f, const FusedPlan *one, int64_t nb, bool bh)
{
    bool cap, same = false;
    DITTO_TRY(is_capturing(be, &cap));
    if (!cap) {
        FusedBufs b;
        DITTO_TRY(fused_bufs(be, g, nb, bh, &b));
        if (b.buf) {
            int rc = fused_same(be, f, one, nb, &b, &same);
            cudaFreeAsync(b.buf, ditto_cuda(be)->stream);
            DITTO_TRY(rc);
        }
    }
    f->batch_ok = same;
    ditto_log(&be->log, DITTO_LOG_DEBUG, "conv: C %lld O %lld k %lldx%lldx%lld in %lldx%lldx%lld epilogue %d: %lld-item fused plan %s",
              (long long)g->C, (long long)g->O, (long long)g->k[0], (long long)g->k[1], (long long)g->k[2], (long long)g->in[0],
              (long long)g->in[1], (long long)g->in[2], f->epi, (long long)nb, same ? "bit-identical per item: batched" : "item by item");
    return 0;
}

/*
 * The fused plans of conv_nhwc_direct's chunks (c's counts): pl, tail, one
 * as in ChunkPlans, all NULL when the kind runs unfused here.
 */
typedef struct FusedChunks {
    FusedPlan *pl, *tail, *one;
    size_t ws;
} FusedChunks;

static int fused_chunks(DittoBackend *be, const ConvGeom *g, int epi, bool bh, const ChunkPlans *c, FusedChunks *fc)
{
    memset(fc, 0, sizeof *fc);
    const CgEngine *e;
    DITTO_TRY(fused_choice(be, g, epi, bh, c->nb, c->pl, c->one, &e));
    if (!e)
        return 0;
    FusedPlan *pl = NULL, *tail = NULL, *one = NULL;
    DITTO_TRY(fused_get(be, g, 1, epi, bh, e, &one));
    if (one)
        DITTO_TRY(fused_get(be, g, c->nb, epi, bh, e, &pl));
    if (one && pl && g->N % c->nb)
        DITTO_TRY(fused_get(be, g, g->N % c->nb, epi, bh, e, &tail));
    if (!one || !pl || (g->N % c->nb && !tail))
        return 0;   /* the engine plans at the tuned count only: unfused */
    if (pl->batch_ok < 0)
        DITTO_TRY(fused_batch_check(be, g, pl, one, c->nb, bh));
    if (tail && tail->batch_ok < 0)
        DITTO_TRY(fused_batch_check(be, g, tail, one, g->N % c->nb, bh));
    /*
     * A fused plan that is not bit-identical per item runs item by item,
     * even where the plain plan would run batched: falling back to the plain
     * plan and its pass would round each output twice instead of once, so a
     * frame's bits would depend on the batch size.
     */
    fc->pl = pl;
    fc->tail = tail;
    fc->one = one;
    fc->ws = one->conv.ws;
    if (pl->conv.ws > fc->ws)
        fc->ws = pl->conv.ws;
    if (tail && tail->conv.ws > fc->ws)
        fc->ws = tail->conv.ws;
    return 0;
}

/*
 * c: g as conv_wg.cu's convolution (stride 1, "same" size), true where it
 * runs it: on the H200 the hourglass's last convolution (144 -> 144 at
 * 3x3x3, 8 items) took 1.00 ms there against cuDNN's 1.28-1.41 (PERF.md,
 * session 25). The bias, relu and residual go in its epilogue.
 */
static bool wg_direct(DittoBackend *be, const ConvGeom *g, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias, bool relu,
                      bool acc, DittoTensor *y, DittoWgConv *c)
{
    /* 3-D only: the decoder's 2-D convolutions of these widths run faster in cuDNN (mlp_shared's 128 outputs: 611 against ~550 TFLOP/s) */
    if (g->G != 1 || g->ns != 3)
        return false;
    for (int i = 0; i < 3; i++)
        if (g->s[i] != 1 || g->d[i] != 1 || g->pb[i] != g->pe[i] || 2 * g->pb[i] != g->k[i] - 1 || g->in[i] != g->out[i])
            return false;
    memset(c, 0, sizeof *c);
    c->x = x->data, c->w = w->data, c->y = y->data;
    c->bias = bias ? bias->data : NULL;
    c->bias_f16 = bias && bias->dtype == DITTO_F16;
    c->relu = relu, c->acc = acc;
    c->N = g->N, c->D = g->in[0], c->H = g->in[1], c->W = g->in[2], c->C = g->C, c->O = g->O, c->ldy = g->O;
    c->kd = (int)g->k[0], c->kh = (int)g->k[1], c->kw = (int)g->k[2];
    return wg_fits(be, c);
}

static int conv_nhwc_direct(DittoBackend *be, const ConvGeom *g, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias,
                            bool relu, bool acc, DittoTensor *y, bool batch)
{
    DittoCuda *cu = ditto_cuda(be);
    DittoWgConv wc;
    if (wg_direct(be, g, x, w, bias, relu, acc, y, &wc)) {
        if (!w_krsc(w) && g->k_vol > 1) {   /* the kernel reads w as (O, kd, kh, kw, C) */
            __half *wt;
            DITTO_TRY(ditto_cuda_workspace(be, align256((size_t)(g->O * g->C * g->k_vol) * 2), (void **)&wt));
            launch_w_nhwc(cu->stream, (const __half *)w->data, false, wt, g->O, g->C, g->O, g->C, g->k_vol);
            DITTO_CUDA_LAUNCHED(be);
            wc.w = wt;
        }
        return ditto_cuda_wg_conv(be, &wc);
    }
    const size_t item_x = (size_t)(g->C * g->in_vol) * 2, item_y = (size_t)(g->O * g->out_vol) * 2;
    ChunkPlans c;
    DITTO_TRY(chunk_plans(be, g, item_x + item_y, batch, &c));
    const int64_t nb = c.nb;
    ConvPlan *pl = c.pl, *tail = c.tail, *one = c.one;
    const size_t cws = c.cws;
    const size_t wt_bytes = align256((size_t)(g->O * g->C * g->k_vol) * 2);
    if (chunk_plans_unchecked(&c)) {
        /* an unchecked plan met while capturing counts as failed: its items run one by one */
        bool cap;
        DITTO_TRY(is_capturing(be, &cap));
        if (cap) {
            pl->batch_ok = pl->batch_ok < 0 ? 0 : pl->batch_ok;
            if (tail)
                tail->batch_ok = tail->batch_ok < 0 ? 0 : tail->batch_ok;
        } else {
            DITTO_TRY(check_chunk_plans(be, g, &c, wt_bytes, item_x, item_y));
        }
    }
    const bool bh = bias && bias->dtype == DITTO_F16;
    const int epi = epi_kind(bias, relu, acc);
    FusedChunks fc;
    memset(&fc, 0, sizeof fc);
    if (epi != EPI_NONE)
        DITTO_TRY(fused_chunks(be, g, epi, bh, &c, &fc));
    const bool fused = fc.pl != NULL;
    /* unfused with acc, each chunk's convolution goes to scratch t, then one pass y = t + bias (+ y, the residual) */
    const bool via_t = !fused && (acc || ((bias || relu) && nhwc_epilogue_scratch()));
    const size_t t_bytes = via_t ? align256(item_y * (size_t)nb) : 0;
    char *ws;
    const size_t cw_bytes = fc.ws > cws ? fc.ws : cws;
    DITTO_TRY(ditto_cuda_workspace(be, wt_bytes + t_bytes + cw_bytes, (void **)&ws));
    __half *wt = (__half *)ws, *t = via_t ? (__half *)(ws + wt_bytes) : NULL;
    void *cw = cw_bytes ? ws + wt_bytes + t_bytes : NULL;
    /* a channels-last w is already what cuDNN reads (C and O are multiples of 8 here; a 1x1(x1) w in either layout) */
    const __half *wk = w_krsc(w) || g->k_vol == 1 ? (const __half *)w->data : wt;
    if (wk == wt) {
        launch_w_nhwc(cu->stream, (const __half *)w->data, false, wt, g->O, g->C, g->O, g->C, g->k_vol);
        DITTO_CUDA_LAUNCHED(be);
    }
    const void *bp = bias ? bias->data : NULL;
    for (int64_t n = 0; n < g->N;) {
        int64_t cnt;
        const __half *xi = (const __half *)x->data + n * g->C * g->in_vol;
        __half *yi = (__half *)y->data + n * g->O * g->out_vol;
        if (fused) {   /* chunks as the plain plans', by the fused plans' own per-item checks */
            const int k = chunk_at(g, n, nb, fc.pl->batch_ok, fc.tail && fc.tail->batch_ok, &cnt);
            const FusedPlan *f = k == 0 ? fc.pl : k == 1 ? fc.tail : fc.one;
            cudnnStatus_t st = fused_exec(be, f, xi, wk, bp, yi, cw);
            if (st != CUDNN_STATUS_SUCCESS)
                return ditto_cudnn_fail(be, st, f->conv.cg ? "cudnnBackendExecute (fused conv)" : "cudnnConvolutionBiasActivationForward",
                                        __FILE__, __LINE__);
            n += cnt;
            continue;
        }
        const ConvPlan *p = pick_chunk(g, n, nb, pl, tail, one, &cnt);
        DITTO_TRY(plan_run(be, p, xi, wk, via_t ? t : yi, cw));
        if (via_t) {
            const int64_t nvec = cnt * g->O * g->out_vol / 8;
            k_bias_act_h8<<<ditto_cuda_blocks(nvec, 256), 256, 0, cu->stream>>>(t, yi, bp, bh, relu, acc, g->O / 8, nvec);
            DITTO_CUDA_LAUNCHED(be);
        }
        n += cnt;
    }
    return via_t || fused ? 0 : bias_act(be, y, bias, relu, true, g->O, g->out_vol);
}

/*
 * Channels-last tensors, every other case (f32, channel counts not a
 * multiple of 8, groups, asymmetric padding, ...): x transposed into NCHW
 * layout scratch, the NCHW strategies (which may use the workspace), y
 * transposed back from the scratch.
 */
static int conv_nhwc_generic(DittoBackend *be, const DittoConvParams *p, const ConvGeom *g, const DittoTensor *x, const DittoTensor *w,
                             const DittoTensor *bias, DittoTensor *y)
{
    const size_t esz = ditto_dtype_size(x->dtype);
    const int64_t nx = g->N * g->C * g->in_vol, ny = g->N * g->O * g->out_vol;
    const size_t xs_bytes = align256((size_t)nx * esz);
    char *sc;
    DITTO_TRY(ditto_cuda_scratch(be, xs_bytes + (size_t)ny * esz, (void **)&sc));
    /* NCHW-ordered (N, C, *in) and (N, O, *out), from the geometry's last ns extents */
    const int nd = x->ndim;
    int64_t xsh[5] = { g->N, g->C }, ysh[5] = { g->N, g->O };
    for (int j = 0; j < nd - 2; j++) {
        xsh[2 + j] = g->in[3 - (nd - 2) + j];
        ysh[2 + j] = g->out[3 - (nd - 2) + j];
    }
    DittoTensor xs = ditto_tensor(sc, x->dtype, nd, xsh);
    DittoTensor ys = ditto_tensor(sc + xs_bytes, y->dtype, nd, ysh);
    xs.device = ys.device = x->device;
    DittoConvParams q = *p;
    q.nhwc = false;
    DITTO_TRY(ditto_cuda_transpose(be, x->data, xs.data, esz, g->N, g->in_vol, g->C));     /* (N, HW, C) -> (N, C, HW) */
    if (p->accumulate)
        DITTO_TRY(ditto_cuda_transpose(be, y->data, ys.data, esz, g->N, g->out_vol, g->O));   /* the residual: (N, OHW, O) -> (N, O, OHW) */
    DITTO_TRY(conv_nchw(be, &q, &xs, w, bias, &ys));
    return ditto_cuda_transpose(be, ys.data, y->data, esz, g->N, g->O, g->out_vol);        /* (N, O, OHW) -> (N, OHW, O) */
}

static int cuda_conv(DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w,
                     const DittoTensor *bias, DittoTensor *y);

/*
 * y_first where no strategy writes it: the convolution channels-last into
 * stream-ordered scratch (a graph records the allocation), then one
 * transpose into y.
 */
static int conv_y_first(DittoBackend *be, const DittoConvParams *p, const DittoTensor *x, const DittoTensor *w, const DittoTensor *bias,
                        DittoTensor *y)
{
    DittoCuda *cu = ditto_cuda(be);
    const int nd = y->ndim;
    int64_t sh[5] = { y->shape[0] };
    for (int i = 2; i < nd; i++)
        sh[i - 1] = y->shape[i];
    sh[nd - 1] = y->shape[1];
    void *buf = NULL;
    if (cudaMallocAsync(&buf, (size_t)ditto_tensor_numel(y) * ditto_dtype_size(y->dtype) + 16, cu->stream) != cudaSuccess)
        return ditto_cuda_fail(be, cudaGetLastError(), "cudaMallocAsync (conv y_first scratch)", __FILE__, __LINE__);
    DittoTensor yl = ditto_tensor(buf, y->dtype, nd, sh), yv;
    yl.device = y->device;
    DittoConvParams q = *p;
    q.y_first = false;
    static const int to_first4[4] = { 0, 3, 1, 2 }, to_first5[5] = { 0, 4, 1, 2, 3 };
    int rc = cuda_conv(be, &q, x, w, bias, &yl);
    if (!rc)
        rc = ditto_tensor_permute(&yl, nd == 5 ? to_first5 : to_first4, &yv);
    if (!rc)
        rc = be->ops.copy(be, &yv, y);
    cudaFreeAsync(buf, cu->stream);
    return rc;
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
    if (!p->nhwc)
        return conv_nchw(be, p, x, w, bias, y);
    /* the geometry from NCHW-ordered views of the channels-last x, y (shapes only), 2-D or 3-D */
    static const int to_nchw4[4] = { 0, 3, 1, 2 }, to_nchw5[5] = { 0, 4, 1, 2, 3 };
    const int *to_nchw = x->ndim == 5 ? to_nchw5 : to_nchw4;
    DittoTensor xl, yl = *y;
    DITTO_TRY(ditto_tensor_permute(x, to_nchw, &xl));
    if (!p->y_first)
        DITTO_TRY(ditto_tensor_permute(y, to_nchw, &yl));
    ConvGeom g;
    conv_geom(p, &xl, w, &yl, &g);
    if (g.N * g.O * g.out_vol == 0)
        return 0;
    const int mode = conv_mode();
    /* the kernel over the whole depth (the occlusion head on the hourglass's output): the tap GEMM over depth slices */
    if (x->dtype == DITTO_F16 && (g.O == 1 || p->y_first) && tap_fold_fits(&g) && ((uintptr_t)x->data % 16) == 0) {
        DITTO_TRY(conv_tap_fold(be, &g, x, w, bias, p->accumulate, y));
        return bias_act(be, y, NULL, p->relu, false, g.O, g.out_vol);
    }
    /*
     * 3-D, up to 32 outputs at 3x3x3 over rows of 64: the wgmma kernel with
     * the taps as columns (the hourglass's 128 -> 32: 102 against 139 us a
     * call of 2 items for cuDNN's depth split, PERF.md session 29), unless
     * DITTO_CUDA_WGTC=0 (A/B)
     */
    DittoWgConv wc;
    if (mode == 2 && !p->y_first && g.O <= 32 && wg_tc_on() && nhwc_direct_fits(&g, x, y) &&
        wg_direct(be, &g, x, w, bias, p->relu, p->accumulate, y, &wc))
        return conv_nhwc_direct(be, &g, x, w, bias, p->relu, p->accumulate, y, true);
    /* 3-D, few outputs: the depth split reads the channels-last slices as they are (not unfolded), y in either layout */
    if (mode == 2 && x->dtype == DITTO_F16 && g.ns == 3 && g.C > 0 && g.C % 8 == 0 && g.in_vol > 0 && depth_split_fits(&g) &&
        ((uintptr_t)x->data | (uintptr_t)y->data) % 16 == 0)
        return conv_depth_split(be, &g, x, w, bias, p->accumulate, p->relu, true, !p->y_first, y);
    if (p->y_first)
        return conv_y_first(be, p, x, w, bias, y);
    if (mode > 0 && nhwc_direct_fits(&g, x, y))
        return conv_nhwc_direct(be, &g, x, w, bias, p->relu, p->accumulate, y, mode >= 2);
    return conv_nhwc_generic(be, p, &g, x, w, bias, y);
}

void ditto_cuda_init_conv(DittoOps *ops)
{
    ops->conv = cuda_conv;
}
