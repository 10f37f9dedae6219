/*
 * WarpingNetwork (W): warp_network.pth, ditto-architecture.md 5.4.
 *
 *   f_s (B,32,16,64,64), kp_source, kp_driving (B,21,3)
 *   -> DenseMotionNetwork: compress, sparse motions, heatmaps, hourglass,
 *      mask (softmax over the K+1 motions), deformation, occlusion
 *   -> grid_sample(f_s, deformation) -> third -> fourth -> * occlusion
 *   -> (B,256,64,64)
 *
 * Every size comes from the checkpoint shapes (the fixtures use a reduced
 * config); shape comments give the full-size numbers. The coordinate grid
 * depends on f_s's (D,H,W), which the checkpoint fixes only in D: it is
 * computed on the host and uploaded into a buffer the network owns the first
 * time a size is seen (once per size, never per frame at a steady size).
 * Every eval-mode BatchNorm is folded into the convolution before it at load
 * time, the ReLU after it into that convolution's epilogue (ditto_warp_load_ex).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "models/models.h"
#include "models/warp_internal.h"
#include "nn/blocks.h"
#include "nn/weights.h"

#define WARP_MAX_BLOCKS 8
#define WARP_BUDGET ((size_t)320 << 20)
#define WARP_GROUP 8                    /* items a run of the hourglass's deep levels takes at most */

struct DittoWarp {
    DittoBackend *be;
    DittoWeights weights;
    DittoDType act;                     /* activation and weight storage (be->act_dtype at load) */

    /* sizes read from the checkpoint shapes (full size in comments) */
    int64_t c_feat;                     /* f_s channels (32) */
    int64_t depth;                      /* f_s depth D (16) */
    int64_t num_kp;                     /* K (21) */
    int64_t c_compress;                 /* compressed feature channels (4) */
    int nblocks;                        /* hourglass down and up blocks (5) */
    int64_t c_enc[WARP_MAX_BLOCKS];     /* encoder block outputs (64,128,256,512,1024) */
    int64_t c_dec[WARP_MAX_BLOCKS];     /* decoder block conv outputs (512,256,128,64,32) */
    int64_t c_pred;                     /* hourglass output channels (142) */
    int64_t c_third;                    /* third's output (256) */
    int64_t c_out;                      /* fourth's output (256) */
    bool has_occlusion;                 /* estimate_occlusion_map */
    bool folded;                        /* every BatchNorm folded into the convolution before it (the default) */

    /* dense_motion_network. */
    DittoTensor compress_w;             /* compress.weight (4,32,1,1,1) [* norm scale when folded] */
    DittoTensor compress_b;             /* compress.bias (4) [folded with norm.*] */
    DittoBatchNorm compress_norm;       /* norm.* (4); unset when folded */
    DittoConvBn down[WARP_MAX_BLOCKS];  /* hourglass.encoder.down_blocks.{i}.{conv,norm}: (64,110,3,3,3) ... */
    DittoConvBn up[WARP_MAX_BLOCKS];    /* hourglass.decoder.up_blocks.{i}.{conv,norm}: (512,1024,3,3,3) ...; up_phase: (4*64,256,3,2,2) for dec 3 */
    bool up_phase[WARP_MAX_BLOCKS];     /* up block j as a sub-pixel convolution (folded norms; see up_block) */
    DittoConvBn hg_out;                 /* hourglass.decoder.{conv,norm}: (142,142,3,3,3) */
    DittoTensor mask_w;                 /* mask.weight (22,142,7,7,7) */
    DittoTensor mask_b;                 /* mask.bias (22) */
    DittoTensor occlusion_w;            /* occlusion.weight (1,2272,7,7) */
    DittoTensor occlusion_b;            /* occlusion.bias (1) */
    /* warping head */
    DittoConvBn third;                  /* third.{conv,norm}: (256,512,3,3) */
    DittoTensor fourth_w;               /* fourth.weight (256,256,1,1) */
    DittoTensor fourth_b;               /* fourth.bias (256) */

    size_t budget;                      /* activation bytes per chunk of items (0: WARP_BUDGET) */
    int64_t group;                      /* items per run of the deep hourglass levels (0: WARP_GROUP) */

    /* make_coordinate_grid of the last (D,H,W) seen: (D,H,W,3) on the backend */
    DittoBuffer grid_buf;
    DittoTensor grid;

    /*
     * Channels-last hourglass (warp_nhwc). On CUDA with f16 activations its
     * two odd channel counts are padded to multiples of 8 (pad_weights), so
     * those convolutions take the direct tensor-core path: the input 110 ->
     * 112 (zero channels), down block 0 reading 112, the top's concat 144 =
     * 32 + 112, the out convolution 144 -> 144 (zero outputs). Else c_in_p,
     * c_pred_p are the checkpoint's and the tensors unset.
     */
    int layout;                         /* -1 auto, 0 NCDHW, 1 NDHWC (ditto_warp_set_layout) */
    int64_t c_in_p, c_pred_p;           /* hourglass input and output channels as stored channels-last (112, 144) */
    DittoBuffer pad_buf;
    DittoTensor down0_wp;               /* down[0]'s weight, input channels padded (64,112,3,3,3) */
    DittoTensor out_wp, out_bp;         /* hg_out's, both axes padded (144,144,3,3,3), (144) */
    /*
     * The heads on the channels-last hourglass output (B,16,64,64,144) as it
     * is (head_weights; set where the padding is): the mask's input channels
     * padded, the occlusion's as a kernel over the whole depth.
     */
    DittoBuffer head_buf;
    DittoTensor mask_wp;                /* (22,144,7,7,7), zero past 142 */
    DittoTensor occ_w3;                 /* (1,144,16,7,7): occ_w3[0,c,d] = occlusion.weight[0,16c+d], zero past 142 */
};

/* ---- helpers ---- */

#define TRY(expr) do { rc = (expr); if (rc < 0) goto done; } while (0)

/* ---- public pieces (warp_internal.h) ---- */

int ditto_warp_coordinate_grid(float *out, int64_t d, int64_t h, int64_t w)
{
    if (d < 2 || h < 2 || w < 2)
        return DITTO_ERR_SHAPE;
    for (int64_t z = 0; z < d; z++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) {
                float *g = out + ((z * h + y) * w + x) * 3;
                g[0] = (float)(2.0 * ((double)x / (double)(w - 1)) - 1.0);
                g[1] = (float)(2.0 * ((double)y / (double)(h - 1)) - 1.0);
                g[2] = (float)(2.0 * ((double)z / (double)(d - 1)) - 1.0);
            }
    return 0;
}

/* y (..., 1) = exp(-0.5 * sum over the last axis of diff^2 / variance), diff (..., 3). */
static int gaussian(DittoBackend *be, const DittoTensor *diff, double variance, DittoTensor *y)
{
    DITTO_TRY(ditto_op_reduce(be, DITTO_REDUCE_SUMSQ, -1, diff, y));            /* |G - kp|^2 */
    DittoUnaryParams scale = { DITTO_UNARY_AFFINE, (float)(-0.5 / variance), 0.0f };
    DITTO_TRY(ditto_op_unary(be, &scale, y, y));                                /* -0.5 |G - kp|^2 / var */
    return ditto_op_act(be, DITTO_UNARY_EXP, 0.0f, y, y);
}

int ditto_warp_kp2gaussian(DittoBackend *be, DittoArena *ws, const DittoTensor *grid, const DittoTensor *kp, double variance,
                           DittoTensor *out)
{
    if (grid->ndim != 4 || grid->shape[3] != 3 || kp->ndim != 3 || kp->shape[2] != 3 || out->ndim != 5 || out->shape[0] != kp->shape[0] ||
        out->shape[1] != kp->shape[1] || out->shape[2] != grid->shape[0] || out->shape[3] != grid->shape[1] ||
        out->shape[4] != grid->shape[2] || !ditto_tensor_is_contiguous(kp) || !ditto_tensor_is_contiguous(grid) ||
        !ditto_tensor_is_contiguous(out))
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "kp2gaussian: kp (B,K,3), grid (D,H,W,3) and out (B,K,D,H,W) must be contiguous and agree");
    const int64_t B = kp->shape[0], K = kp->shape[1], D = grid->shape[0], H = grid->shape[1], W = grid->shape[2];
    DittoArenaMark top = ditto_arena_mark(ws);
    DittoTensor grid6, kp6, out6, diff;
    int rc;
    TRY(ditto_tensor_reshape(grid, DITTO_SHAPE(1, 1, D, H, W, 3), &grid6));
    TRY(ditto_tensor_reshape(kp, DITTO_SHAPE(B, K, 1, 1, 1, 3), &kp6));
    TRY(ditto_tensor_reshape(out, DITTO_SHAPE(B, K, D, H, W, 1), &out6));
    TRY(ditto_nn_new_f32(ws, &diff, DITTO_SHAPE(B, K, D, H, W, 3)));
    TRY(ditto_op_binary(be, DITTO_BINARY_SUB, &grid6, &kp6, &diff));           /* G - mean (B,K,D,H,W,3) */
    TRY(gaussian(be, &diff, variance, &out6));                                 /* (B,K,D,H,W,1) */
done:
    ditto_arena_release(ws, top);
    return rc;
}

int ditto_warp_grid_sample(DittoBackend *be, const DittoTensor *x, const DittoTensor *grid, DittoTensor *y)
{
    return ditto_op_grid_sample(be, false, x, grid, y);
}

/* ---- load ---- */

/* Read every size from the checkpoint shapes; the gets that follow check the rest. */
static int read_config(DittoWarp *m, DittoLoader *l)
{
    const DittoCatalogEntry *e;
    if ((e = ditto_loader_peek_rank(l, 5, "dense_motion_network.compress.weight"))) {
        m->c_compress = e->shape[0];
        m->c_feat = e->shape[1];
    }
    if ((e = ditto_loader_peek_rank(l, 5, "dense_motion_network.mask.weight")))
        m->num_kp = e->shape[0] - 1;
    if (l->err)
        return l->err;
    if (m->num_kp < 1)
        return ditto_loader_fail(l, DITTO_ERR_KEY, "dense_motion_network.mask.weight has no keypoint channels");
    while (m->nblocks < WARP_MAX_BLOCKS && ditto_loader_peek(l, "dense_motion_network.hourglass.encoder.down_blocks.%d.conv.weight", m->nblocks))
        m->nblocks++;
    if (m->nblocks == 0 || ditto_loader_peek(l, "dense_motion_network.hourglass.encoder.down_blocks.%d.conv.weight", WARP_MAX_BLOCKS))
        return ditto_loader_fail(l, DITTO_ERR_KEY, "the hourglass needs 1 to 8 encoder blocks (dense_motion_network.hourglass.encoder.down_blocks.N.conv.weight)");
    for (int i = 0; i < m->nblocks; i++) {
        if ((e = ditto_loader_peek_rank(l, 5, "dense_motion_network.hourglass.encoder.down_blocks.%d.conv.weight", i)))
            m->c_enc[i] = e->shape[0];
        if ((e = ditto_loader_peek_rank(l, 5, "dense_motion_network.hourglass.decoder.up_blocks.%d.conv.weight", i)))
            m->c_dec[i] = e->shape[0];
    }
    if (l->err)
        return l->err;
    const int64_t c_in = (m->num_kp + 1) * (m->c_compress + 1);                /* hourglass input (110) */
    m->c_pred = m->c_dec[m->nblocks - 1] + c_in;                               /* 32 + 110 = 142 */
    if ((e = ditto_loader_peek(l, "dense_motion_network.occlusion.weight"))) {
        if (e->ndim != 4 || e->shape[1] % m->c_pred)
            return ditto_loader_fail(l, DITTO_ERR_KEY, "dense_motion_network.occlusion.weight is not (1, hourglass channels * depth, 7, 7)");
        m->has_occlusion = true;
        m->depth = e->shape[1] / m->c_pred;
    }
    if ((e = ditto_loader_peek_rank(l, 4, "third.conv.weight"))) {
        m->c_third = e->shape[0];
        if (!m->has_occlusion && e->shape[1] % m->c_feat == 0)
            m->depth = e->shape[1] / m->c_feat;
    }
    if ((e = ditto_loader_peek_rank(l, 4, "fourth.weight")))
        m->c_out = e->shape[0];
    if (!l->err && m->depth < 2)
        return ditto_loader_fail(l, DITTO_ERR_KEY, "cannot derive a feature depth >= 2 from third.conv.weight / dense_motion_network.occlusion.weight");
    return l->err;
}

/* ---- channels-last hourglass ---- */

void ditto_warp_set_layout(DittoWarp *m, int nhwc)
{
    m->layout = nhwc < 0 ? -1 : nhwc > 0;
}

/*
 * The hourglass channels-last: the set layout, else
 * DITTO_WARP_LAYOUT=ncdhw|ndhwc (read once), else CUDA with f16
 * activations. Only with the norms folded (a norm op reads dim 1).
 */
static bool warp_nhwc(const DittoWarp *m)
{
    static int env = -2;
    if (!m->folded)
        return false;
    const int forced = ditto_nn_layout_forced(m->layout, "DITTO_WARP_LAYOUT", "ncdhw", "ndhwc", &env);
    return forced >= 0 ? forced == 1 : m->be->device == DITTO_DEVICE_CUDA && m->act == DITTO_F16;
}

static int64_t round8(int64_t c)
{
    return (c + 7) / 8 * 8;
}

/* at (rows_p, per_p) = zeros with x's (rows, per) values in its top-left corner, on the backend: a padded copy. */
static int pad_copy(DittoBackend *be, const void *x, DittoDType dt, int64_t rows, int64_t per, int64_t rows_p, int64_t per_p, void *at)
{
    DittoTensor src = ditto_tensor((void *)x, dt, 2, (const int64_t[]){ rows, per });
    DittoTensor dst = ditto_tensor(at, dt, 2, (const int64_t[]){ rows_p, per_p }), dv, dv2;
    src.device = dst.device = be->device;
    DITTO_TRY(ditto_op_fill(be, 0.0f, &dst));
    DITTO_TRY(ditto_tensor_slice(&dst, 0, 0, rows, 1, &dv));
    DITTO_TRY(ditto_tensor_slice(&dv, 1, 0, per, 1, &dv2));
    return ditto_op_copy(be, &src, &dv2);
}

/*
 * w (O, C, k...) padded with zeros to (Op, Cp, k...) at *at, in w's storage
 * order: channels-last ((O, kvol, C) memory, as the CUDA f16 loader binds
 * it) or contiguous ((O, C, kvol)); likewise its bias (O) to (Op) when b is
 * given. *at advances past both.
 */
static int pad_conv(DittoWarp *m, const DittoTensor *w, const DittoTensor *b, int64_t Op, int64_t Cp, char **at, DittoTensor *wp,
                    DittoTensor *bp)
{
    DittoBackend *be = m->be;
    const bool cl = ditto_tensor_is_channels_last(w);
    const int64_t O = w->shape[0], C = w->shape[1], kvol = ditto_tensor_numel(w) / (O * C), esz = (int64_t)ditto_dtype_size(w->dtype);
    /*
     * channels-last: (O * kvol) rows of C values into (Op * kvol) rows of Cp;
     * contiguous: O rows of C * kvol values (C outer) into Op rows of Cp * kvol
     */
    if (cl)
        DITTO_TRY(pad_copy(be, w->data, w->dtype, O * kvol, C, Op * kvol, Cp, *at));
    else
        DITTO_TRY(pad_copy(be, w->data, w->dtype, O, C * kvol, Op, Cp * kvol, *at));
    int64_t shape[5] = { Op, Cp };
    for (int i = 2; i < w->ndim; i++)
        shape[i] = w->shape[i];
    *wp = ditto_tensor(*at, w->dtype, w->ndim, shape);
    wp->device = be->device;
    if (cl)
        ditto_tensor_set_channels_last(wp);
    *at += (Op * kvol * Cp * esz + 255) / 256 * 256;
    if (b) {
        DITTO_TRY(pad_copy(be, b->data, b->dtype, 1, O, 1, Op, *at));
        *bp = ditto_tensor(*at, b->dtype, 1, (const int64_t[]){ Op });
        bp->device = be->device;
        *at += (Op * (int64_t)ditto_dtype_size(b->dtype) + 255) / 256 * 256;
    }
    return 0;
}

static int g_force_pad = -1, g_force_phase = -1;

void ditto_warp_force_phase(int plain)
{
    g_force_phase = plain < 0 ? -1 : plain;
}

/*
 * Which up blocks run as sub-pixel convolutions (folded norms only): those
 * after the first `plain` (the deepest). Default 2 (H200, PERF.md session
 * 31: dec 2-4 at 16x16-64x64 run 1.5-2.9x faster in their sub-pixel form;
 * dec 1's (4x4 -> 5x5 phases of 1024 outputs) ran 177 against 113 us on
 * cuDNN, and dec 0's saves no multiply-adds: a 2x2 map's phase output is
 * 3x3). ditto_warp_force_phase, else DITTO_WARP_PHASE (read once).
 */
static bool up_phase(bool folded, int j)
{
    static int env = -2;
    if (env == -2) {
        const char *e = getenv("DITTO_WARP_PHASE");
        env = e && *e >= '0' && *e <= '9' ? atoi(e) : 2;
    }
    return folded && j >= (g_force_phase >= 0 ? g_force_phase : env);
}

void ditto_warp_force_channel_pad(int on)
{
    g_force_pad = on < 0 ? -1 : on > 0;
}

bool ditto_warp_channels_padded(const DittoWarp *m)
{
    return m->down0_wp.data != NULL;
}

/*
 * The heads' weights for the channels-last hourglass output y (B,D,H,W,
 * c_pred_p): the mask's (22,142,7,7,7) with zero input channels up to
 * c_pred_p, and the occlusion's (1,142*D,7,7), whose channel 16c + d is
 * (c, d) of y, as a kernel over y's whole depth (1,c_pred_p,D,7,7). Both
 * heads then read y as it is, not a channels-first copy (dm_heads). In the
 * storage order of the loaded weights.
 */
static int head_weights(DittoWarp *m)
{
    DittoBackend *be = m->be;
    const int64_t cpp = m->c_pred_p, K1 = m->num_kp + 1, D = m->depth;
    const DittoTensor *wo = &m->occlusion_w;
    const size_t esz = ditto_dtype_size(m->mask_w.dtype);
    const size_t bytes = (size_t)(K1 * cpp * (ditto_tensor_numel(&m->mask_w) / (K1 * m->c_pred))) * esz +
                         (m->has_occlusion ? (size_t)(cpp * D * wo->shape[2] * wo->shape[3]) * esz : 0) + 2 * 256;
    DITTO_TRY(ditto_buffer_alloc(&m->head_buf, &be->allocator, bytes));
    char *at = m->head_buf.ptr;
    DITTO_TRY(pad_conv(m, &m->mask_w, NULL, K1, cpp, &at, &m->mask_wp, NULL));
    if (!m->has_occlusion)
        return 0;
    const int64_t kh = wo->shape[2], kw = wo->shape[3];
    DittoTensor t = ditto_tensor(at, wo->dtype, DITTO_SHAPE(1, cpp, D, kh, kw)), tv;
    t.device = be->device;
    if (ditto_tensor_is_channels_last(wo))
        ditto_tensor_set_channels_last(&t);
    DITTO_TRY(ditto_op_fill(be, 0.0f, &t));
    /* wo's channel 16c + d read as (c, d): its channel stride split in two */
    DittoTensor src = ditto_tensor(wo->data, wo->dtype, DITTO_SHAPE(1, m->c_pred, D, kh, kw));
    src.device = be->device;
    const int64_t st[5] = { wo->stride[0], D * wo->stride[1], wo->stride[1], wo->stride[2], wo->stride[3] };
    memcpy(src.stride, st, sizeof st);
    DITTO_TRY(ditto_tensor_slice(&t, 1, 0, m->c_pred, 1, &tv));
    DITTO_TRY(ditto_op_copy(be, &src, &tv));
    m->occ_w3 = t;
    return 0;
}

/*
 * The padded weights (see struct DittoWarp): on CUDA with f16 activations
 * and channels-last weights (where they run on the tensor-core path), or
 * anywhere when forced (ditto_warp_force_channel_pad: the test of the
 * padding); folded norms only. Then, padded or not, the heads' weights
 * (head_weights).
 */
static int pad_weights(DittoWarp *m)
{
    DittoBackend *be = m->be;
    const int n = m->nblocks;
    const int64_t c_in = (m->num_kp + 1) * (m->c_compress + 1);
    m->c_in_p = c_in;
    m->c_pred_p = m->c_pred;
    const bool useful = be->device == DITTO_DEVICE_CUDA && m->act == DITTO_F16 && ditto_tensor_is_channels_last(&m->down[0].weight) &&
                        ditto_tensor_is_channels_last(&m->hg_out.weight);
    if (!m->folded || !(g_force_pad >= 0 ? g_force_pad : useful))
        return 0;
    if (m->c_pred == m->c_dec[n - 1] + c_in && (c_in % 8 || m->c_pred % 8)) {
        const int64_t cip = round8(c_in), cpp = m->c_dec[n - 1] + cip, kvol = ditto_tensor_numel(&m->hg_out.weight) / (m->c_pred * m->c_pred);
        const size_t esz = ditto_dtype_size(m->hg_out.weight.dtype);
        const size_t bytes = (size_t)((m->c_enc[0] * cip + cpp * cpp) * kvol + cpp) * esz + 3 * 256;
        DITTO_TRY(ditto_buffer_alloc(&m->pad_buf, &be->allocator, bytes));
        char *at = m->pad_buf.ptr;
        DITTO_TRY(pad_conv(m, &m->down[0].weight, NULL, m->c_enc[0], cip, &at, &m->down0_wp, NULL));
        DITTO_TRY(pad_conv(m, &m->hg_out.weight, &m->hg_out.bias, cpp, cpp, &at, &m->out_wp, &m->out_bp));
        m->c_in_p = cip;
        m->c_pred_p = cpp;
    }
    DITTO_TRY(head_weights(m));
    return be->sync(be);
}

int ditto_warp_load(DittoWarp **out, DittoBackend *be, DittoCatalog *cat)
{
    return ditto_warp_load_ex(out, be, cat, true);
}

/*
 * fold_bn: each eval-mode BatchNorm (compress, the hourglass blocks, third)
 * becomes part of the convolution before it, computed from the float32
 * checkpoint values before any float16 rounding, and the ReLUs after them run
 * in the convolutions' epilogues: no norm or activation pass of its own.
 */
int ditto_warp_load_ex(DittoWarp **out, DittoBackend *be, DittoCatalog *cat, bool fold_bn)
{
    *out = NULL;
    DittoWarp *m = ditto_calloc(1, sizeof *m);
    if (!m)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "warp network: out of memory");
    m->be = be;
    m->act = be->act_dtype;
    DittoLoader l;
    ditto_loader_init(&l, cat, be, &m->weights, "warp network", "");
    l.dtype = m->act;
    l.conv_channels_last = ditto_nn_conv_channels_last(be, m->act);
    int rc = read_config(m, &l);
    if (rc < 0)
        goto fail;

    const int n = m->nblocks;
    const int64_t K1 = m->num_kp + 1, c = m->c_compress, c_in = K1 * (c + 1);
    char key[128];
    void (*load_conv_bn)(DittoLoader *, DittoConvBn *, int, int64_t, int64_t, const char *) =
        fold_bn ? ditto_nn_load_conv_bn_folded : ditto_nn_load_conv_bn;
    m->folded = fold_bn;
    /* dense_motion_network. */
    if (fold_bn) {
        ditto_loader_get_conv_bn(&l, &m->compress_w, &m->compress_b, DITTO_SHAPE(c, m->c_feat, 1, 1, 1), DITTO_BN_EPS,
                                 "dense_motion_network.compress.weight", "dense_motion_network.compress.bias", "dense_motion_network.norm");
    } else {
        ditto_loader_get(&l, &m->compress_w, DITTO_SHAPE(c, m->c_feat, 1, 1, 1), "dense_motion_network.compress.weight");
        ditto_loader_get(&l, &m->compress_b, DITTO_SHAPE(c), "dense_motion_network.compress.bias");
        ditto_loader_get_bn(&l, &m->compress_norm, c, "dense_motion_network.norm");
    }
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "dense_motion_network.hourglass.encoder.down_blocks.%d", i);
        load_conv_bn(&l, &m->down[i], 3, m->c_enc[i], i ? m->c_enc[i - 1] : c_in, key);
    }
    for (int j = 0; j < n; j++) {
        /* input: the deepest encoder output, then [previous up block, skip] */
        int64_t in = j ? m->c_dec[j - 1] + m->c_enc[n - 1 - j] : m->c_enc[n - 1];
        snprintf(key, sizeof key, "dense_motion_network.hourglass.decoder.up_blocks.%d", j);
        m->up_phase[j] = up_phase(fold_bn, j);
        if (m->up_phase[j]) {   /* the folded weight's sub-pixel form (4 c_dec, in, 3, 2, 2) */
            char cw[160], cb[160], bn[160];
            snprintf(cw, sizeof cw, "%s.conv.weight", key);
            snprintf(cb, sizeof cb, "%s.conv.bias", key);
            snprintf(bn, sizeof bn, "%s.norm", key);
            DittoPhaseDims pd = { m->c_dec[j], in, 3 };
            memset(&m->up[j].norm, 0, sizeof m->up[j].norm);
            m->up[j].folded = true;
            ditto_loader_get_conv_bn_map(&l, &m->up[j].weight, &m->up[j].bias, DITTO_SHAPE(m->c_dec[j], in, 3, 3, 3), DITTO_BN_EPS, cw, cb, bn,
                                         DITTO_SHAPE(4 * m->c_dec[j], in, 3, 2, 2), ditto_nn_phase_weights, &pd);
        } else {
            load_conv_bn(&l, &m->up[j], 3, m->c_dec[j], in, key);
        }
    }
    load_conv_bn(&l, &m->hg_out, 3, m->c_pred, m->c_pred, "dense_motion_network.hourglass.decoder");
    ditto_loader_get(&l, &m->mask_w, DITTO_SHAPE(K1, m->c_pred, 7, 7, 7), "dense_motion_network.mask.weight");
    ditto_loader_get(&l, &m->mask_b, DITTO_SHAPE(K1), "dense_motion_network.mask.bias");
    if (m->has_occlusion) {
        ditto_loader_get(&l, &m->occlusion_w, DITTO_SHAPE(1, m->c_pred * m->depth, 7, 7), "dense_motion_network.occlusion.weight");
        ditto_loader_get(&l, &m->occlusion_b, DITTO_SHAPE(1), "dense_motion_network.occlusion.bias");
    }
    /* warping head */
    load_conv_bn(&l, &m->third, 2, m->c_third, m->c_feat * m->depth, "third");
    ditto_loader_get(&l, &m->fourth_w, DITTO_SHAPE(m->c_out, m->c_third, 1, 1), "fourth.weight");
    ditto_loader_get(&l, &m->fourth_b, DITTO_SHAPE(m->c_out), "fourth.bias");
    rc = ditto_loader_finish(&l);
    if (rc >= 0)
        rc = pad_weights(m);
    if (rc < 0)
        goto fail;
    m->layout = -1;
    const char *wb = getenv("DITTO_WARP_BUDGET_MB");   /* chunk budget for memory/speed measurements */
    if (wb && atoi(wb) > 0)
        m->budget = (size_t)atoi(wb) << 20;
    *out = m;
    return 0;
fail:
    ditto_warp_free(&m);
    return rc;
}

void ditto_warp_free(DittoWarp **pm)
{
    if (!pm || !*pm)
        return;
    DittoWarp *m = *pm;
    ditto_weights_free(&m->weights);
    ditto_buffer_free(&m->grid_buf);
    ditto_buffer_free(&m->pad_buf);
    ditto_buffer_free(&m->head_buf);
    ditto_free(m);
    *pm = NULL;
}

/* ---- forward ---- */

int ditto_warp_out_shape(const DittoWarp *m, const DittoTensor *f_s, int64_t shape[4])
{
    const int64_t mult = (int64_t)1 << m->nblocks;
    if (f_s->ndim != 5 || f_s->shape[0] < 1 || f_s->shape[1] != m->c_feat || f_s->shape[2] != m->depth || f_s->shape[3] < 1 ||
        f_s->shape[4] < 1 || f_s->shape[3] % mult || f_s->shape[4] % mult) {
        char have[DITTO_SHAPE_STR_MAX];
        return ditto_fail(&m->be->log, DITTO_ERR_SHAPE, "warp network: f_s has shape %s, expected (B,%lld,%lld,H,W) with H, W multiples of %lld",
                          ditto_shape_str(f_s->shape, f_s->ndim, have, sizeof have), (long long)m->c_feat, (long long)m->depth, (long long)mult);
    }
    shape[0] = f_s->shape[0];
    shape[1] = m->c_out;
    shape[2] = f_s->shape[3];
    shape[3] = f_s->shape[4];
    return 0;
}

/* Upload make_coordinate_grid((D,H,W)) unless the network already holds it. */
static int ensure_grid(DittoWarp *m, int64_t d, int64_t h, int64_t w)
{
    if (m->grid.data && m->grid.shape[0] == d && m->grid.shape[1] == h && m->grid.shape[2] == w)
        return 0;
    DittoBackend *be = m->be;
    const int64_t shape[4] = { d, h, w, 3 };
    DittoTensor g = ditto_tensor(NULL, DITTO_F32, 4, shape);
    size_t bytes = ditto_tensor_nbytes(&g);
    float *host = ditto_malloc(bytes);
    if (!host)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "warp network: out of memory for the coordinate grid");
    int rc = ditto_warp_coordinate_grid(host, d, h, w);
    if (rc == 0 && m->grid_buf.ptr) {
        rc = be->sync(be);                  /* the old grid may still be in use */
        ditto_buffer_free(&m->grid_buf);
        memset(&m->grid, 0, sizeof m->grid);
    }
    if (rc == 0)
        rc = ditto_buffer_alloc(&m->grid_buf, &be->allocator, bytes);
    if (rc == 0)
        rc = be->upload(be, m->grid_buf.ptr, host, bytes);
    ditto_free(host);
    if (rc < 0)
        return ditto_fail(&be->log, rc, "warp network: cannot set up the (%lld,%lld,%lld) coordinate grid", (long long)d, (long long)h,
                          (long long)w);
    g.data = m->grid_buf.ptr;
    g.device = be->device;
    m->grid = g;
    return 0;
}

/*
 * The hourglass (5.4 step 6) in three parts, so that its small deep levels
 * can run over more items at once than the full-resolution ones:
 *   down_block 0: x (B,110,16,64,64) -> enc1 (B,64,16,32,32)
 *   hg_deep:      enc1 -> the last up block's input (B,128,16,32,32)
 *   hg_top:       that and x -> y (B,142,16,64,64)
 * Every op works per item, so how items are grouped changes no result.
 * With nhwc every activation is channels-last, (B,D,H,W,C): the shapes in
 * comments are then read in that order (hg_new, hg_c...). With padded
 * channels (c_in_p, c_pred_p) x has 112 and y 144.
 */

/* A (B,C,D,H,W) activation of the hourglass in its layout ((B,D,H,W,C) when nhwc). */
static int hg_new(const DittoWarp *m, DittoArena *ws, bool nhwc, int64_t B, int64_t C, int64_t D, int64_t H, int64_t W, DittoTensor *t)
{
    return nhwc ? ditto_nn_new(ws, m->act, t, DITTO_SHAPE(B, D, H, W, C)) : ditto_nn_new(ws, m->act, t, DITTO_SHAPE(B, C, D, H, W));
}

static int64_t hg_c(const DittoTensor *t, bool nhwc)
{
    return t->shape[nhwc ? 4 : 1];
}

static int64_t hg_d(const DittoTensor *t, bool nhwc)
{
    return t->shape[nhwc ? 1 : 2];
}

static int64_t hg_h(const DittoTensor *t, bool nhwc)
{
    return t->shape[nhwc ? 2 : 3];
}

static int64_t hg_w(const DittoTensor *t, bool nhwc)
{
    return t->shape[nhwc ? 3 : 4];
}

/* conv, BN (folded), ReLU with the padded weights where they exist (down block 0, the out convolution) */
static int hg_conv(DittoWarp *m, DittoArena *ws, bool nhwc, const DittoConvBn *cb, const DittoTensor *x, DittoTensor *y)
{
    DittoConvParams pad1 = ditto_nn_conv_pad(1);
    pad1.nhwc = nhwc;
    DittoConvBn b = *cb;
    if (nhwc && cb == &m->down[0] && m->down0_wp.data)
        b.weight = m->down0_wp;
    if (nhwc && cb == &m->hg_out && m->out_wp.data) {
        b.weight = m->out_wp;
        b.bias = m->out_bp;
    }
    return ditto_nn_conv_bn_act(m->be, ws, &pad1, &b, DITTO_UNARY_RELU, 0.0f, x, y);
}

/* DownBlock3d i: conv, BN, ReLU, AvgPool (1,2,2): x (B,C,D,h,w) -> y (B,64<<i,D,h/2,w/2). */
static int down_block(DittoWarp *m, DittoArena *ws, bool nhwc, int i, const DittoTensor *x, DittoTensor *y)
{
    const int64_t B = x->shape[0], D = hg_d(x, nhwc), h = hg_h(x, nhwc), w = hg_w(x, nhwc), C = m->c_enc[i];
    DittoArenaMark mk = ditto_arena_mark(ws);
    DittoTensor tn, tv, yv;
    int rc;
    TRY(hg_new(m, ws, nhwc, B, C, D, h, w, &tn));
    TRY(hg_conv(m, ws, nhwc, &m->down[i], x, &tn));
    if (nhwc) {   /* (B*D, 1, h, w, C) pooled over (h, w): kernel (2,2,1) */
        const DittoPoolParams pool = { .kind = DITTO_POOL_AVG, .kernel = { 2, 2, 1 } };
        TRY(ditto_tensor_reshape(&tn, DITTO_SHAPE(B * D, 1, h, w, C), &tv));
        TRY(ditto_tensor_reshape(y, DITTO_SHAPE(B * D, 1, hg_h(y, true), hg_w(y, true), C), &yv));
        TRY(ditto_op_pool(m->be, &pool, &tv, &yv));
    } else {
        const DittoPoolParams pool = { .kind = DITTO_POOL_AVG, .kernel = { 1, 2, 2 } };
        TRY(ditto_op_pool(m->be, &pool, &tn, y));
    }
done:
    ditto_arena_release(ws, mk);
    return rc;
}

/*
 * UpBlock3d j (nearest x(1,2,2), conv, BN, ReLU), then cat = [that, skip]:
 * (B,1024,16,2,2) -> (B,512+512,16,4,4) for j=0. Sub-pixel (up_phase): the
 * conv reads cur as it is, with kernel (3,2,2) and 4 c_dec outputs at
 * (h/2 + 1, w/2 + 1) (ditto_nn_phase_weights), and the interleave adds the
 * folded bias and applies the ReLU: no upsampled copy, 12 of the 27 taps
 * per output (the MACs of dec 1-4 fall to 0.56-0.69 of the plain form's,
 * their outputs 4x wider).
 */
static int up_block(DittoWarp *m, DittoArena *ws, bool nhwc, int j, const DittoTensor *cur, const DittoTensor *skip, DittoTensor *cat)
{
    const int64_t B = cur->shape[0], D = hg_d(cur, nhwc), h = hg_h(skip, nhwc), w = hg_w(skip, nhwc);
    DittoArenaMark mk = ditto_arena_mark(ws);
    DittoTensor u, tn;
    int rc;
    TRY(hg_new(m, ws, nhwc, B, m->c_dec[j], D, h, w, &tn));
    if (m->up_phase[j]) {
        if (h != 2 * hg_h(cur, nhwc) || w != 2 * hg_w(cur, nhwc)) {
            rc = ditto_fail(&m->be->log, DITTO_ERR_SHAPE, "warp network: hourglass up block %d needs its skip at twice its input's size", j);
            goto done;
        }
        DittoConvParams pad1 = ditto_nn_conv_pad(1);
        pad1.nhwc = nhwc;
        TRY(hg_new(m, ws, nhwc, B, 4 * m->c_dec[j], D, h / 2 + 1, w / 2 + 1, &u));
        TRY(ditto_op_conv(m->be, &pad1, cur, &m->up[j].weight, NULL, &u));           /* the 4 parities (B,4*64,16,17,17) for dec 3 */
        TRY(ditto_nn_phase_interleave(m->be, nhwc, &u, &m->up[j].bias, &tn));         /* relu(conv(x2(cur)) + b) (B,64,16,32,32) */
    } else {
        TRY(hg_new(m, ws, nhwc, B, hg_c(cur, nhwc), D, h, w, &u));
        TRY(nhwc ? ditto_nn_upsample_last(m->be, cur, &u) : ditto_op_upsample_nearest(m->be, cur, &u));
        TRY(hg_conv(m, ws, nhwc, &m->up[j], &u, &tn));
    }
    TRY(ditto_op_concat(m->be, nhwc ? 4 : 1, 2, (const DittoTensor *const[]){ &tn, skip }, cat));
done:
    ditto_arena_release(ws, mk);
    return rc;
}

/* Channels of hg_deep's output (128): up block n-2's output and enc1, or enc1 alone with one block. */
static int64_t deep_channels(const DittoWarp *m)
{
    return m->nblocks > 1 ? m->c_dec[m->nblocks - 2] + m->c_enc[0] : m->c_enc[0];
}

/* Encoder blocks 1..n-1, decoder blocks 0..n-2: enc1 (B,64,16,32,32) -> y (B,128,16,32,32). */
static int hg_deep(DittoWarp *m, DittoArena *ws, bool nhwc, const DittoTensor *enc1, DittoTensor *y)
{
    const int n = m->nblocks;
    const int64_t B = enc1->shape[0], D = hg_d(enc1, nhwc);
    if (n == 1)
        return ditto_op_copy(m->be, enc1, y);
    DittoArenaMark top = ditto_arena_mark(ws);
    DittoTensor enc[WARP_MAX_BLOCKS + 1], cur, cat;
    int rc = 0;
    enc[1] = *enc1;
    for (int i = 1; i < n; i++) {
        TRY(hg_new(m, ws, nhwc, B, m->c_enc[i], D, hg_h(&enc[i], nhwc) / 2, hg_w(&enc[i], nhwc) / 2, &enc[i + 1]));
        TRY(down_block(m, ws, nhwc, i, &enc[i], &enc[i + 1]));                 /* (B,64<<i,16,h/2,w/2) */
    }
    cur = enc[n];
    for (int j = 0; j < n - 1; j++) {                                           /* skips deepest first */
        const DittoTensor *skip = &enc[n - 1 - j];
        if (j == n - 2)
            cat = *y;
        else
            TRY(hg_new(m, ws, nhwc, B, m->c_dec[j] + hg_c(skip, nhwc), D, hg_h(skip, nhwc), hg_w(skip, nhwc), &cat));
        TRY(up_block(m, ws, nhwc, j, &cur, skip, &cat));
        cur = cat;
    }
done:
    ditto_arena_release(ws, top);
    return rc;
}

/* Up block n-1 onto x, then out (conv 3x3x3, BN, ReLU): deep (B,128,16,32,32), x (B,110,16,64,64) -> y (B,142,16,64,64). */
static int hg_top(DittoWarp *m, DittoArena *ws, bool nhwc, const DittoTensor *deep, const DittoTensor *x, DittoTensor *y)
{
    const int n = m->nblocks;
    DittoArenaMark top = ditto_arena_mark(ws);
    DittoTensor cat;
    int rc;
    TRY(hg_new(m, ws, nhwc, x->shape[0], m->c_dec[n - 1] + hg_c(x, nhwc), hg_d(x, nhwc), hg_h(x, nhwc), hg_w(x, nhwc), &cat));
    TRY(up_block(m, ws, nhwc, n - 1, deep, x, &cat));                          /* (B,32+110,16,64,64) */
    TRY(hg_conv(m, ws, nhwc, &m->hg_out, &cat, y));
done:
    ditto_arena_release(ws, top);
    return rc;
}

/* The whole hourglass for B items: x (B,110,16,64,64) -> y (B,142,16,64,64). */
static int hourglass(DittoWarp *m, DittoArena *ws, bool nhwc, const DittoTensor *x, DittoTensor *y)
{
    const int64_t B = x->shape[0], D = hg_d(x, nhwc), H = hg_h(x, nhwc), W = hg_w(x, nhwc);
    DittoArenaMark top = ditto_arena_mark(ws), mk;
    DittoTensor deep, enc1;
    int rc;
    TRY(hg_new(m, ws, nhwc, B, deep_channels(m), D, H / 2, W / 2, &deep));
    mk = ditto_arena_mark(ws);
    TRY(hg_new(m, ws, nhwc, B, m->c_enc[0], D, H / 2, W / 2, &enc1));
    TRY(down_block(m, ws, nhwc, 0, x, &enc1));
    TRY(hg_deep(m, ws, nhwc, &enc1, &deep));
    ditto_arena_release(ws, mk);
    TRY(hg_top(m, ws, nhwc, &deep, x, y));
done:
    ditto_arena_release(ws, top);
    return rc;
}

/* The padding channels c.. of a channels-last hourglass input x (B,D,H,W,112) set to zero. */
static int zero_pad_channels(DittoWarp *m, DittoTensor *x, int64_t c)
{
    DittoTensor pad;
    if (x->shape[4] == c)
        return 0;
    DITTO_TRY(ditto_tensor_slice(x, 4, c, x->shape[4], 1, &pad));
    return ditto_op_fill(m->be, 0.0f, &pad);
}

/* The hourglass input channels-last: hg_in (B,110,D,H,W) -> x (B,D,H,W,112) (one transpose into the channel slice). */
static int hg_input_last(DittoWarp *m, const DittoTensor *hg_in, DittoTensor *x)
{
    const int64_t c = hg_in->shape[1];
    DittoTensor xs;
    DITTO_TRY(ditto_tensor_slice(x, 4, 0, c, 1, &xs));
    DITTO_TRY(ditto_nn_relayout(m->be, hg_in, true, &xs));
    return zero_pad_channels(m, x, c);
}

/*
 * The hourglass output back channels-first (heads without head_weights, or
 * a tap): y (B,D,H,W,144) -> pred (B,142,D,H,W), its first 142 channels.
 */
static int hg_output_first(DittoWarp *m, const DittoTensor *y, DittoTensor *pred)
{
    DittoTensor ys;
    DITTO_TRY(ditto_tensor_slice(y, 4, 0, pred->shape[1], 1, &ys));
    return ditto_nn_relayout(m->be, &ys, false, pred);
}

/*
 * DenseMotionNetwork (5.4 steps 1-9) around the hourglass: f_s (B,32,16,64,64),
 * kp (B,21,3) -> its input (dm_input), and from its output the deformation
 * (B,16,64,64,3) and the occlusion (B,1,64,64) (dm_heads).
 *
 * Storage (act = m->act, float32 or float16): the compressed features, the
 * heatmaps as the hourglass reads them, the hourglass, the mask logits and
 * the occlusion map are act; keypoints, the coordinate grid, the sparse
 * motions, the Gaussians, the softmax mask and the deformation stay float32.
 */
static int dm_input(DittoWarp *m, DittoArena *ws, const DittoTensor *f_s, const DittoTensor *kp_source, const DittoTensor *kp_driving,
                    DittoTensor *hg_in, const DittoTap *tap)
{
    DittoBackend *be = m->be;
    const int64_t B = f_s->shape[0], D = f_s->shape[2], H = f_s->shape[3], W = f_s->shape[4], c = m->c_compress;
    const DittoConvParams pad0 = ditto_nn_conv_pad(0);
    const DittoMotionParams mp = { DITTO_WARP_KP_VARIANCE };
    DittoArenaMark top = ditto_arena_mark(ws);
    DittoTensor cmp, feat;
    int rc;
    /* feature = relu(norm(compress(feature))); folded: one convolution, the relu in it unless the pre-relu tap is read */
    TRY(ditto_nn_new(ws, m->act, &feat, DITTO_SHAPE(B, c, D, H, W)));
    if (m->folded) {
        DittoConvParams pc = pad0;
        pc.relu = !(tap && tap->fn);
        TRY(ditto_op_conv(be, &pc, f_s, &m->compress_w, &m->compress_b, &feat));              /* (B,4,16,64,64) */
        if (!pc.relu) {
            ditto_tap(tap, "dm_compress_bn", &feat);
            TRY(ditto_op_act(be, DITTO_UNARY_RELU, 0.0f, &feat, &feat));
        }
    } else {
        TRY(ditto_nn_new(ws, m->act, &cmp, DITTO_SHAPE(B, c, D, H, W)));
        TRY(ditto_op_conv(be, &pad0, f_s, &m->compress_w, &m->compress_b, &cmp));             /* (B,4,16,64,64) */
        TRY(ditto_nn_batch_norm(be, &m->compress_norm, &cmp, &feat));
        ditto_tap(tap, "dm_compress_bn", &feat);
        TRY(ditto_op_act(be, DITTO_UNARY_RELU, 0.0f, &feat, &feat));
    }

    /*
     * Heatmaps, sparse motions and the deformed features in one pass, with a
     * zero keypoint prepended to both sets (the identity motion S_0 = G and
     * the all-zero heatmap): hg_in[:, m*5] = g(G - kp_d[m]) - g(G - kp_s[m]),
     * hg_in[:, m*5 + 1 + j] = grid_sample(feat[:, j], G - kp_d[m] + kp_s[m]).
     */
    TRY(ditto_op_motion_input(be, &mp, &m->grid, kp_driving, kp_source, &feat, hg_in, NULL));  /* (B,22*5,16,64,64) */
    ditto_tap(tap, "dm_hourglass_in", hg_in);                                                 /* (B,110,16,64,64) */
done:
    ditto_arena_release(ws, top);
    return rc;
}

/*
 * pred (B,142,D,H,W) channels-first, or y_l (B,D,H,W,144) the channels-last
 * hourglass output as it is (head_weights), pred then NULL.
 */
static int dm_heads(DittoWarp *m, DittoArena *ws, const DittoTensor *pred, const DittoTensor *y_l, const DittoTensor *kp_source,
                    const DittoTensor *kp_driving, DittoTensor *deformation, DittoTensor *occlusion, const DittoTap *tap)
{
    DittoBackend *be = m->be;
    const bool last = y_l != NULL;
    const DittoTensor *hy = last ? y_l : pred;
    const int64_t B = hy->shape[0], P = hy->shape[last ? 4 : 1], D = hy->shape[last ? 1 : 2], H = hy->shape[last ? 2 : 3], W = hy->shape[last ? 3 : 4];
    const int64_t K1 = m->num_kp + 1;
    const DittoConvParams pad3 = ditto_nn_conv_pad(3);
    DittoConvParams pm = pad3;   /* channels-last x, channels-first logits */
    pm.nhwc = pm.y_first = true;
    const DittoMotionParams mp = { DITTO_WARP_KP_VARIANCE };
    DittoArenaMark top = ditto_arena_mark(ws);
    DittoTensor mask, pred2d, logits;
    int rc;
    /*
     * mask = softmax(mask(prediction), dim=1) over the K+1 motions, then
     * deformation = sum_m mask_m * S_m (the motions recomputed from the
     * keypoints): one pass over the logits; the float32 mask is only written
     * when a tap reads it
     */
    TRY(ditto_nn_new(ws, m->act, &logits, DITTO_SHAPE(B, K1, D, H, W)));
    if (last)
        TRY(ditto_op_conv(be, &pm, y_l, &m->mask_wp, &m->mask_b, &logits));                   /* (B,22,16,64,64) */
    else
        TRY(ditto_op_conv(be, &pad3, pred, &m->mask_w, &m->mask_b, &logits));
    if (tap && tap->fn)
        TRY(ditto_nn_new_f32(ws, &mask, DITTO_SHAPE(B, K1, D, H, W)));
    TRY(ditto_op_motion_deform(be, &mp, &m->grid, kp_driving, kp_source, &logits, deformation, tap && tap->fn ? &mask : NULL)); /* (B,16,64,64,3) */
    if (tap && tap->fn)
        ditto_tap(tap, "dm_mask", &mask);
    ditto_tap(tap, "dm_deformation", deformation);                                            /* (B,16,64,64,3) */

    /* occlusion_map = sigmoid(occlusion(prediction viewed (B, 142*16, 64, 64))) */
    if (m->has_occlusion && last) {   /* a kernel over the whole depth: (B,16,64,64,144) -> (B,1,64,64,1) */
        const int ph = (int)(m->occ_w3.shape[3] - 1) / 2, pw = (int)(m->occ_w3.shape[4] - 1) / 2;
        const DittoConvParams po = { .pad_begin = { 0, ph, pw }, .pad_end = { 0, ph, pw }, .nhwc = true };
        DittoTensor o5;
        TRY(ditto_tensor_reshape(occlusion, DITTO_SHAPE(B, 1, H, W, 1), &o5));
        TRY(ditto_op_conv(be, &po, y_l, &m->occ_w3, &m->occlusion_b, &o5));
        TRY(ditto_op_act(be, DITTO_UNARY_SIGMOID, 0.0f, occlusion, occlusion));
        ditto_tap(tap, "dm_occlusion_map", occlusion);
    } else if (m->has_occlusion) {
        TRY(ditto_tensor_reshape(pred, DITTO_SHAPE(B, P * D, H, W), &pred2d));                 /* (B,2272,64,64), channel 16c+d */
        TRY(ditto_op_conv(be, &pad3, &pred2d, &m->occlusion_w, &m->occlusion_b, occlusion));  /* (B,1,64,64) */
        TRY(ditto_op_act(be, DITTO_UNARY_SIGMOID, 0.0f, occlusion, occlusion));
        ditto_tap(tap, "dm_occlusion_map", occlusion);
    }
done:
    ditto_arena_release(ws, top);
    return rc;
}

/* The warping head (5.4 steps 10-13): f_s, deformation, occlusion -> out (B,256,64,64). */
static int warp_head(DittoWarp *m, DittoArena *ws, const DittoTensor *f_s, const DittoTensor *deformation, const DittoTensor *occlusion,
                     DittoTensor *out, const DittoTap *tap)
{
    DittoBackend *be = m->be;
    const int64_t B = f_s->shape[0], C = m->c_feat, D = f_s->shape[2], H = f_s->shape[3], W = f_s->shape[4];
    const DittoConvParams pad0 = ditto_nn_conv_pad(0), pad1 = ditto_nn_conv_pad(1);
    DittoArenaMark top = ditto_arena_mark(ws);
    DittoTensor warped, warped2d, t3n;
    int rc;
    /* out = deform_input(feature_3d, deformation).view(bs, c * d, h, w) */
    TRY(ditto_nn_new(ws, m->act, &warped, DITTO_SHAPE(B, C, D, H, W)));
    TRY(ditto_op_grid_sample(be, false, f_s, deformation, &warped));                        /* (B,32,16,64,64) */
    TRY(ditto_tensor_reshape(&warped, DITTO_SHAPE(B, C * D, H, W), &warped2d));             /* (B,512,64,64), channel 16c+d */
    ditto_tap(tap, "warped_feature", &warped2d);

    /* out = third(out): conv 3x3, BN, LeakyReLU(0.01) */
    TRY(ditto_nn_new(ws, m->act, &t3n, DITTO_SHAPE(B, m->c_third, H, W)));
    TRY(ditto_nn_conv_bn_act(be, ws, &pad1, &m->third, DITTO_UNARY_LEAKY_RELU, 0.01f, &warped2d, &t3n)); /* (B,256,64,64) */

    /* out = fourth(out): conv 1x1 */
    TRY(ditto_op_conv(be, &pad0, &t3n, &m->fourth_w, &m->fourth_b, out));                   /* (B,256,64,64) */
    ditto_tap(tap, "pre_occlusion_out", out);

    /* out = out * occlusion_map */
    if (m->has_occlusion)
        TRY(ditto_op_binary(be, DITTO_BINARY_MUL, out, occlusion, out));                    /* (B,256,64,64) * (B,1,64,64) */
done:
    ditto_arena_release(ws, top);
    return rc;
}

/*
 * The hourglass input (dm_input) of items f_s, kp into x in the hourglass's
 * layout: channels-first it is written there; channels-last motion_input
 * writes x's first 110 channels through a channels-last view and the
 * padding channels are zeroed; with taps (which report contiguous tensors)
 * through a channels-first scratch copy, released before return.
 */
static int hg_input(DittoWarp *m, DittoArena *ws, bool nhwc, const DittoTensor *f_s, const DittoTensor *kp_source,
                    const DittoTensor *kp_driving, DittoTensor *x, const DittoTap *tap)
{
    if (!nhwc)
        return dm_input(m, ws, f_s, kp_source, kp_driving, x, tap);
    const int64_t D = f_s->shape[2], H = f_s->shape[3], W = f_s->shape[4], c = (m->num_kp + 1) * (m->c_compress + 1);
    if (!(tap && tap->fn)) {
        DittoTensor xs, xv;
        DITTO_TRY(ditto_tensor_slice(x, 4, 0, c, 1, &xs));
        DITTO_TRY(ditto_tensor_permute(&xs, (const int[]){ 0, 4, 1, 2, 3 }, &xv));   /* (B,110,D,H,W) over (B,D,H,W,112) */
        DITTO_TRY(dm_input(m, ws, f_s, kp_source, kp_driving, &xv, NULL));
        return zero_pad_channels(m, x, c);
    }
    DittoArenaMark mk = ditto_arena_mark(ws);
    DittoTensor hg_in;
    int rc;
    TRY(ditto_nn_new(ws, m->act, &hg_in, DITTO_SHAPE(f_s->shape[0], c, D, H, W)));
    TRY(dm_input(m, ws, f_s, kp_source, kp_driving, &hg_in, tap));
    TRY(hg_input_last(m, &hg_in, x));
done:
    ditto_arena_release(ws, mk);
    return rc;
}

/*
 * Items i0..i0+nb of the full-resolution part: with deep (NULL: the whole
 * hourglass here) and the group's hourglass input xg (its items i0..), the
 * hourglass's top; without them its input and the whole hourglass. Then the
 * heads and the warping head into out's items (f_s, kp, out, deep and xg
 * are the caller's whole tensors).
 */
static int top_items(DittoWarp *m, DittoArena *ws, const DittoTensor *f_s, const DittoTensor *kp_source, const DittoTensor *kp_driving,
                     const DittoTensor *deep, const DittoTensor *xg, DittoTensor *out, int64_t i0, int64_t nb, const DittoTap *tap)
{
    const int64_t D = f_s->shape[2], H = f_s->shape[3], W = f_s->shape[4], K1 = m->num_kp + 1;
    const bool nhwc = warp_nhwc(m);
    DittoArenaMark top = ditto_arena_mark(ws), mk;
    DittoTensor fc, ksc, kdc, oc, dc, deformation, occlusion, x, pred, y_l;
    int rc;
    TRY(ditto_tensor_slice(f_s, 0, i0, i0 + nb, 1, &fc));
    TRY(ditto_tensor_slice(kp_source, 0, i0, i0 + nb, 1, &ksc));
    TRY(ditto_tensor_slice(kp_driving, 0, i0, i0 + nb, 1, &kdc));
    TRY(ditto_tensor_slice(out, 0, i0, i0 + nb, 1, &oc));
    TRY(ditto_nn_new_f32(ws, &deformation, DITTO_SHAPE(nb, D, H, W, 3)));             /* a sampling grid: float32 */
    TRY(ditto_nn_new(ws, m->act, &occlusion, DITTO_SHAPE(nb, 1, H, W)));
    mk = ditto_arena_mark(ws);
    /* the heads read the channels-last output as it is; the channels-first copy only for a tap */
    const bool heads_last = nhwc && m->mask_wp.data, want_pred = !heads_last || (tap && tap->fn);
    if (want_pred)
        TRY(ditto_nn_new(ws, m->act, &pred, DITTO_SHAPE(nb, m->c_pred, D, H, W)));
    if (deep) {
        TRY(ditto_tensor_slice(deep, 0, i0, i0 + nb, 1, &dc));
        TRY(ditto_tensor_slice(xg, 0, i0, i0 + nb, 1, &x));
    } else {
        TRY(hg_new(m, ws, nhwc, nb, nhwc ? m->c_in_p : K1 * (m->c_compress + 1), D, H, W, &x));
        TRY(hg_input(m, ws, nhwc, &fc, &ksc, &kdc, &x, tap));
    }
    if (nhwc)   /* the output channels-last (the heads read it, or a channels-first copy) */
        TRY(hg_new(m, ws, true, nb, m->c_pred_p, D, H, W, &y_l));
    if (deep)
        TRY(hg_top(m, ws, nhwc, &dc, &x, nhwc ? &y_l : &pred));
    else
        TRY(hourglass(m, ws, nhwc, &x, nhwc ? &y_l : &pred));
    if (nhwc && want_pred)
        TRY(hg_output_first(m, &y_l, &pred));
    if (want_pred)
        ditto_tap(tap, "dm_hourglass_out", &pred);                                     /* (B,142,16,64,64) */
    TRY(dm_heads(m, ws, heads_last ? NULL : &pred, heads_last ? &y_l : NULL, &ksc, &kdc, &deformation, &occlusion, tap));
    ditto_arena_release(ws, mk);
    TRY(warp_head(m, ws, &fc, &deformation, &occlusion, &oc, tap));
done:
    ditto_arena_release(ws, top);
    return rc;
}

static int check_kp(const DittoWarp *m, const char *name, const DittoTensor *kp, int64_t B)
{
    if (kp->ndim == 3 && kp->shape[0] == B && kp->shape[1] == m->num_kp && kp->shape[2] == 3 && kp->dtype == DITTO_F32 &&
        kp->device == m->be->device)
        return 0;
    char have[DITTO_SHAPE_STR_MAX];
    return ditto_fail(&m->be->log, DITTO_ERR_SHAPE, "warp network: %s has shape %s (%s), expected float32 (%lld,%lld,3)", name,
                      ditto_shape_str(kp->shape, kp->ndim, have, sizeof have), ditto_dtype_name(kp->dtype), (long long)B,
                      (long long)m->num_kp);
}

void ditto_warp_set_budget(DittoWarp *m, size_t bytes)
{
    m->budget = bytes;
}

/* WARP_GROUP, or DITTO_WARP_GROUP (measurements: 1 runs the deep levels chunk by chunk, as before grouping). */
static int64_t warp_group_default(void)
{
    static int64_t g = 0;   /* read once: the forward runs every batch */
    if (!g) {
        const char *e = getenv("DITTO_WARP_GROUP");
        g = e && atoi(e) > 0 ? atoi(e) : WARP_GROUP;
    }
    return g;
}

void ditto_warp_set_group(DittoWarp *m, int64_t items)
{
    m->group = items > 0 ? items : 0;
}

/* Every argument's shape, dtype and device, then the coordinate grid for f_s's size. */
static int warp_prepare(DittoWarp *m, const DittoTensor *f_s, const DittoTensor *kp_source, const DittoTensor *kp_driving,
                        const DittoTensor *out)
{
    DittoBackend *be = m->be;
    int64_t oshape[4];
    DITTO_TRY(ditto_warp_out_shape(m, f_s, oshape));
    const int64_t B = f_s->shape[0];
    DITTO_TRY(check_kp(m, "kp_source", kp_source, B));
    DITTO_TRY(check_kp(m, "kp_driving", kp_driving, B));
    if (out->ndim != 4 || memcmp(out->shape, oshape, sizeof oshape) || !ditto_tensor_is_contiguous(out)) {
        char have[DITTO_SHAPE_STR_MAX], want[DITTO_SHAPE_STR_MAX];
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "warp network: out has shape %s, expected contiguous %s",
                          ditto_shape_str(out->shape, out->ndim, have, sizeof have), ditto_shape_str(oshape, 4, want, sizeof want));
    }
    /* f_s feeds convolutions and out is one: both in the network's storage dtype */
    if (f_s->dtype != m->act || out->dtype != m->act || f_s->device != be->device || out->device != be->device)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "warp network: f_s (%s) and out (%s) must be %s on the %s backend",
                          ditto_dtype_name(f_s->dtype), ditto_dtype_name(out->dtype), ditto_dtype_name(m->act), be->name);
    return ensure_grid(m, f_s->shape[2], f_s->shape[3], f_s->shape[4]);
}

/*
 * Items go through the full-resolution part in chunks whose activations fit
 * in the budget (WARP_BUDGET; at full size an item holds ~100 MB at once:
 * the hourglass input, its top level at 16x64x64, the mask logits). The deep
 * levels of the hourglass (16x32x32 and below, ~15 MB an item) run once for
 * up to WARP_GROUP items (ditto_warp_set_group): their convolutions are too small to fill the GPU
 * a chunk at a time. The group's hourglass input is made once and kept for
 * the top's skip (14.7 MB an item channels-last at full size; making it
 * again cost about 0.4 ms a batch of 8 on the H200: motion_input and the
 * layout move). With taps everything runs at once.
 */
int ditto_warp_forward(DittoWarp *m, DittoArena *ws, const DittoTensor *f_s, const DittoTensor *kp_source, const DittoTensor *kp_driving,
                       DittoTensor *out, const DittoTap *tap)
{
    DITTO_TRY(warp_prepare(m, f_s, kp_source, kp_driving, out));
    const int64_t B = f_s->shape[0], D = f_s->shape[2], H = f_s->shape[3], W = f_s->shape[4];
    /* per item and voxel: the hourglass input and its widest activations */
    const int64_t vox = D * H * W, K1 = m->num_kp + 1;
    const bool nhwc = warp_nhwc(m);
    const size_t per_item = (size_t)vox * ((size_t)K1 * 3 * 4 * 2 + (size_t)(K1 * (m->c_compress + 1) + 3 * m->c_pred +
                                                                             (nhwc ? m->c_pred_p : 0)) * ditto_dtype_size(m->act));
    const size_t budget = m->budget ? m->budget : WARP_BUDGET;
    int64_t chunk = tap ? B : per_item ? (int64_t)(budget / per_item) : B;
    chunk = chunk < 1 ? 1 : chunk > B ? B : chunk;
    if (chunk >= B)
        return top_items(m, ws, f_s, kp_source, kp_driving, NULL, NULL, out, 0, B, tap);
    const int64_t gmax = m->group ? m->group : warp_group_default(), group = chunk > gmax ? chunk : gmax;
    for (int64_t g0 = 0; g0 < B; g0 += group) {
        const int64_t gb = B - g0 < group ? B - g0 : group;
        DittoArenaMark top = ditto_arena_mark(ws), mk;
        DittoTensor deep, enc1, xg, fc, ksc, kdc, ec, xc;
        int rc;
        TRY(hg_new(m, ws, nhwc, gb, deep_channels(m), D, H / 2, W / 2, &deep));   /* (G,128,16,32,32) */
        TRY(hg_new(m, ws, nhwc, gb, nhwc ? m->c_in_p : K1 * (m->c_compress + 1), D, H, W, &xg));   /* (G,110,16,64,64) */
        mk = ditto_arena_mark(ws);
        TRY(hg_new(m, ws, nhwc, gb, m->c_enc[0], D, H / 2, W / 2, &enc1));       /* (G,64,16,32,32) */
        for (int64_t i0 = 0; i0 < gb; i0 += chunk) {
            const int64_t nb = gb - i0 < chunk ? gb - i0 : chunk;
            DittoArenaMark mc = ditto_arena_mark(ws);
            TRY(ditto_tensor_slice(f_s, 0, g0 + i0, g0 + i0 + nb, 1, &fc));
            TRY(ditto_tensor_slice(kp_source, 0, g0 + i0, g0 + i0 + nb, 1, &ksc));
            TRY(ditto_tensor_slice(kp_driving, 0, g0 + i0, g0 + i0 + nb, 1, &kdc));
            TRY(ditto_tensor_slice(&enc1, 0, i0, i0 + nb, 1, &ec));
            TRY(ditto_tensor_slice(&xg, 0, i0, i0 + nb, 1, &xc));
            TRY(hg_input(m, ws, nhwc, &fc, &ksc, &kdc, &xc, NULL));
            TRY(down_block(m, ws, nhwc, 0, &xc, &ec));
            ditto_arena_release(ws, mc);
        }
        TRY(hg_deep(m, ws, nhwc, &enc1, &deep));
        ditto_arena_release(ws, mk);
        DittoTensor gf, gks, gkd, go;
        TRY(ditto_tensor_slice(f_s, 0, g0, g0 + gb, 1, &gf));
        TRY(ditto_tensor_slice(kp_source, 0, g0, g0 + gb, 1, &gks));
        TRY(ditto_tensor_slice(kp_driving, 0, g0, g0 + gb, 1, &gkd));
        TRY(ditto_tensor_slice(out, 0, g0, g0 + gb, 1, &go));
        for (int64_t i0 = 0; i0 < gb; i0 += chunk)
            TRY(top_items(m, ws, &gf, &gks, &gkd, &deep, &xg, &go, i0, gb - i0 < chunk ? gb - i0 : chunk, NULL));
    done:
        ditto_arena_release(ws, top);
        if (rc < 0)
            return rc;
    }
    return 0;
}
