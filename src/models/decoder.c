/*
 * SPADEDecoder (G): decoder.pth, ditto-architecture.md 5.5.
 *
 *   feature (B,256,64,64), also the SPADE segmentation map
 *   -> fc -> G_middle_0..5 -> x2 -> up_0 -> x2 -> up_1
 *   -> LeakyReLU(0.2) -> conv_img -> PixelShuffle(2) -> sigmoid
 *   -> img (B,3,512,512)
 *
 * Channel counts, the number of G_middle / up blocks, the SPADE hidden width
 * and the PixelShuffle factor come from the checkpoint shapes; shape comments
 * give the full-size numbers. Spectral-norm convs are folded at load time.
 *
 * Layout: on CUDA with f16 activations everything up to conv_img runs
 * channels-last (NHWC: the feature is transposed once, convolutions and
 * SPADE norms take and give (B,H,W,C), nearest upsampling is a copy from a
 * broadcast view), so cuDNN's tensor-core convolutions need no transposes
 * between layers; conv_img's 12 outputs go back to NCHW for the pixel
 * shuffle. Shape comments
 * stay in NCHW order. NCHW elsewhere; ditto_decoder_set_layout and
 * DITTO_DECODER_LAYOUT override the choice.
 *
 * Sub-pixel SPADE convolutions in the up blocks: there mlp_shared reads the
 * label map nearest-upsampled x2, so each output parity (ry, rx) sees only
 * a 2x2 window of the map at half resolution, with the 3x3 taps that land
 * on the same source pixel summed (ditto-architecture.md 5.5 gives the
 * upsample-then-conv form; the two are equal in exact arithmetic). The four
 * parities run as one 2x2 convolution (padding 1) with 4 x 128 outputs at
 * half resolution, 4/9 of the multiply-adds, and one strided pass
 * interleaves them, adding the bias and applying the relu on the way; no
 * full-resolution label map is made.
 *
 * Merged mlp_shared (channels-last; DITTO_DECODER_MERGE): the SPADEs that
 * read the same map run their mlp_shared as one convolution of many outputs
 * (G_middle's twelve 128-output convolutions as one of 1536, each up
 * block's three phase convolutions as one of 3 x 512), which the GPU runs
 * far faster than narrow ones; each SPADE reads its channels of the output
 * as a strided view. The per-SPADE weights are views of the merged ones.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "models/models.h"
#include "nn/blocks.h"
#include "nn/weights.h"

#define DEC_MAX_MIDDLE 16
#define DEC_MAX_UP 4
#define DEC_IN_EPS 1e-5f
/*
 * The up blocks run on chunks of items so that their activations stay within
 * this many bytes (at full size and B = 8 they would need ~1.6 GB at once);
 * every op is per item, so chunking does not change any item's result.
 * 256 MiB: a session on the H200 stays under 2 GB at the same speed as with
 * 512 MiB (docs/PERF.md).
 */
#define DEC_UP_BUDGET ((size_t)256 << 20)
#define DEC_LRELU 0.2f

/*
 * SPADE(norm_nc = c, label_nc): parameter-free instance norm modulated by convs
 * of the resized feature. mlp_gamma and mlp_beta read the same activation, so
 * they are bound as one convolution with 2c outputs (gamma rows, then beta).
 */
typedef struct DecSpade {
    int64_t c;
    bool phase;             /* in an up block: mlp_shared as the sub-pixel phase convolution */
    bool gamma_only;        /* norm_s: gb_w, gb_b are mlp_gamma's alone (beta goes through conv_s folded: DecBlock.beta_s_w) */
    int slot;               /* place among the SPADEs of one merged mlp_shared: its rows there, its channels of the output */
    /* <spade>.mlp_shared.0.weight (128,256,3,3); phase: (4*128,256,2,2), parity (ry,rx) in rows (2ry+rx)*128..; rows of a merged one (load_shared) */
    DittoTensor shared_w;
    DittoTensor shared_b;   /* <spade>.mlp_shared.0.bias (128); phase: added by ditto_nn_phase_interleave (every parity the same) */
    DittoTensor gb_w;       /* <spade>.mlp_gamma.weight ; <spade>.mlp_beta.weight (2c,128,3,3); gamma_only (c,128,3,3) */
    DittoTensor gb_b;       /* <spade>.mlp_gamma.bias ; <spade>.mlp_beta.bias (2c); gamma_only (c) */
} DecSpade;

/* SPADEResnetBlock(fin, fout), fmid = min(fin, fout); convs are spectral-norm (folded). */
typedef struct DecBlock {
    int64_t fin, fmid, fout;
    bool learned_shortcut;  /* fin != fout */
    DittoTensor conv_0_w;   /* <block>.conv_0.{weight_orig,weight_u,weight_v} (fmid,fin,3,3) */
    DittoTensor conv_0_b;   /* <block>.conv_0.bias (fmid); bound, not applied (norm_1 cancels it: resblock) */
    DittoTensor conv_1_w;   /* <block>.conv_1.{weight_orig,weight_u,weight_v} (fout,fmid,3,3) */
    DittoTensor conv_1_b;   /* <block>.conv_1.bias (fout) */
    DittoTensor conv_s_w;   /* <block>.conv_s.{weight_orig,weight_u,weight_v} (fout,fin,1,1), no bias */
    DittoTensor beta_s_w;   /* conv_s folded into norm_s.mlp_beta: W_s W_beta (fout,128,3,3) */
    DittoTensor beta_s_b;   /* W_s b_beta (fout): conv_s's bias */
    DecSpade norm_0;        /* <block>.norm_0 (fin) */
    DecSpade norm_1;        /* <block>.norm_1 (fmid) */
    DecSpade norm_s;        /* <block>.norm_s (fin), learned shortcut only */
    DittoTensor shared_w;   /* up blocks: the phase mlp_shared of norm_0, norm_1 [, norm_s] as one (3*4*128,256,2,2) */
} DecBlock;

/* The SPADEs whose mlp_shared read the same map, in slot order, with their keys (load). */
#define DEC_MAX_SHARED (3 * DEC_MAX_MIDDLE)
typedef struct DecShared {
    int n;
    DecSpade *s[DEC_MAX_SHARED];
    char key[DEC_MAX_SHARED][96];
} DecShared;

struct DittoDecoder {
    DittoBackend *be;
    DittoWeights weights;
    DittoDType act;                     /* activation and weight storage (be->act_dtype at load) */

    /* sizes read from the checkpoint shapes (full size in comments) */
    int64_t c_in;                       /* input feature = SPADE label channels (256) */
    int64_t c_fc;                       /* fc output (512) */
    int64_t c_hidden;                   /* SPADE hidden width (128) */
    int nmiddle;                        /* G_middle_{i} blocks (6) */
    int nup;                            /* up_{i} blocks, each after a nearest x2 (2) */
    int upscale;                        /* PixelShuffle factor after conv_img (2; 1: none) */

    DittoTensor fc_w;                   /* fc.weight (512,256,3,3) */
    DittoTensor fc_b;                   /* fc.bias (512) */
    DecBlock middle[DEC_MAX_MIDDLE];    /* G_middle_{i}: (512 -> 512) */
    DittoTensor mid_shared_w;           /* G_middle_{i}.norm_{0,1}.mlp_shared.0.weight as one (12*128,256,3,3), block by block */
    DittoTensor mid_shared_b;           /* their biases (12*128) */
    DecBlock up[DEC_MAX_UP];            /* up_0 (512 -> 256), up_1 (256 -> 64) */
    DittoTensor img_w;                  /* conv_img.0.weight (12,64,3,3) (conv_img.weight (3,64,3,3) without PixelShuffle) */
    DittoTensor img_b;                  /* conv_img.0.bias (12) */
    DittoTensor img_wp, img_bp;         /* CUDA f16: the same with zero outputs up to a multiple of 8 (16,64,3,3), (16) (img_pad) */
    size_t up_budget;                   /* bytes of up-block activations per chunk of items (0: DEC_UP_BUDGET) */
    int layout;                         /* -1 auto, 0 NCHW, 1 NHWC (ditto_decoder_set_layout) */
    int merge;                          /* -1 env, 0 never, 1 where fused, 2 always (ditto_decoder_set_merge) */
};

void ditto_decoder_set_up_budget(DittoDecoder *m, size_t bytes)
{
    m->up_budget = bytes;
}

void ditto_decoder_set_layout(DittoDecoder *m, int nhwc)
{
    m->layout = nhwc < 0 ? -1 : nhwc > 0;
}

void ditto_decoder_set_merge(DittoDecoder *m, int mode)
{
    m->merge = mode < 0 ? -1 : mode > 2 ? 2 : mode;
}

/* Channels-last forward: the set layout, else DITTO_DECODER_LAYOUT=nchw|nhwc (read once), else CUDA with f16 activations. */
static bool dec_nhwc(const DittoDecoder *m)
{
    static int env = -2;
    const int forced = ditto_nn_layout_forced(m->layout, "DITTO_DECODER_LAYOUT", "nchw", "nhwc", &env);
    return forced >= 0 ? forced == 1 : m->be->device == DITTO_DEVICE_CUDA && m->act == DITTO_F16;
}

#define TRY(expr) do { rc = (expr); if (rc < 0) goto done; } while (0)

/* ---- load ---- */

/* A SPADE's gamma / beta convolutions; its mlp_shared joins set (bound by load_shared). */
static void load_spade(DittoLoader *l, DecShared *set, DecSpade *s, int64_t c, int64_t hidden, bool phase, bool gamma_only, const char *key)
{
    s->c = c;
    s->phase = phase;
    s->gamma_only = gamma_only;
    if (set->n == DEC_MAX_SHARED) {
        ditto_loader_fail(l, DITTO_ERR_INVAL, "more than %d SPADEs read one map ('%s')", DEC_MAX_SHARED, key);
        return;
    }
    s->slot = set->n;
    set->s[set->n] = s;
    snprintf(set->key[set->n++], sizeof set->key[0], "%s", key);
    if (gamma_only) {   /* mlp_beta's keys are read by the fold into conv_s (load_block) */
        ditto_loader_get(l, &s->gb_w, DITTO_SHAPE(c, hidden, 3, 3), "%s.mlp_gamma.weight", key);
        ditto_loader_get(l, &s->gb_b, DITTO_SHAPE(c), "%s.mlp_gamma.bias", key);
        return;
    }
    char gw[128], bw[128], gbias[128], bbias[128];
    snprintf(gw, sizeof gw, "%s.mlp_gamma.weight", key);
    snprintf(bw, sizeof bw, "%s.mlp_beta.weight", key);
    snprintf(gbias, sizeof gbias, "%s.mlp_gamma.bias", key);
    snprintf(bbias, sizeof bbias, "%s.mlp_beta.bias", key);
    ditto_loader_get_cat(l, &s->gb_w, 2, (const char *const[]){ gw, bw }, DITTO_SHAPE(c, hidden, 3, 3));
    ditto_loader_get_cat(l, &s->gb_b, 2, (const char *const[]){ gbias, bbias }, DITTO_SHAPE(c));
}

typedef struct PadDims {
    int64_t rows, rows_p, per;   /* rows of per values -> rows_p rows, the new ones zero */
} PadDims;

static void pad_rows(void *ctx, const float *w, float *pw)
{
    const PadDims *d = ctx;
    memcpy(pw, w, (size_t)(d->rows * d->per) * sizeof(float));
    memset(pw + d->rows * d->per, 0, (size_t)((d->rows_p - d->rows) * d->per) * sizeof(float));
}

/*
 * conv_img channels-last with outputs padded to a multiple of 8: on CUDA
 * with f16 activations, where that is a tensor-core convolution of x as it
 * is. Elsewhere the 12 outputs as they are (on the CPU the channels-last
 * forward then gives the NCHW one's bits).
 */
static bool img_pad(const DittoDecoder *m)
{
    return m->be->device == DITTO_DEVICE_CUDA && m->act == DITTO_F16;
}

/* conv_img's weight (o, c, 3, 3) and bias (o) as bound, and (img_pad) padded with zero outputs to a multiple of 8. */
static void load_img(DittoLoader *l, DittoDecoder *m, int64_t o, int64_t c, const char *key)
{
    ditto_loader_get(l, &m->img_w, DITTO_SHAPE(o, c, 3, 3), "%s.weight", key);
    ditto_loader_get(l, &m->img_b, DITTO_SHAPE(o), "%s.bias", key);
    if (!img_pad(m))
        return;
    PadDims pw = { o, (o + 7) / 8 * 8, c * 9 }, pb = { o, pw.rows_p, 1 };
    ditto_loader_get_map(l, &m->img_wp, DITTO_SHAPE(o, c, 3, 3), DITTO_SHAPE(pw.rows_p, c, 3, 3), pad_rows, &pw, "%s.weight", key);
    ditto_loader_get_map(l, &m->img_bp, DITTO_SHAPE(o), DITTO_SHAPE(pb.rows_p), pad_rows, &pb, "%s.bias", key);
}

/*
 * The mlp_shared convolutions of set's SPADEs as one, w (n*128,256,3,3) or
 * phase (n*4*128,256,2,2), in slot order, and b (n*128) its bias (not
 * phase: ditto_nn_phase_interleave adds each SPADE's own); each SPADE's shared_w
 * (and shared_b) is its rows of them.
 */
static void load_shared(DittoDecoder *m, DittoLoader *l, DecShared *set, bool phase, DittoTensor *w, DittoTensor *b)
{
    if (l->err || !set->n)
        return;
    const int64_t hid = m->c_hidden, label = m->c_in, rows = phase ? 4 * hid : hid;
    char wbuf[DEC_MAX_SHARED][128], bbuf[DEC_MAX_SHARED][128];
    const char *wk[DEC_MAX_SHARED], *bk[DEC_MAX_SHARED];
    for (int i = 0; i < set->n; i++) {
        snprintf(wbuf[i], sizeof wbuf[i], "%s.mlp_shared.0.weight", set->key[i]);
        snprintf(bbuf[i], sizeof bbuf[i], "%s.mlp_shared.0.bias", set->key[i]);
        wk[i] = wbuf[i];
        bk[i] = bbuf[i];
    }
    if (phase) {
        DittoPhaseDims pd = { hid, label, 1 };
        ditto_loader_get_cat_map(l, w, set->n, wk, DITTO_SHAPE(hid, label, 3, 3), DITTO_SHAPE(rows, label, 2, 2), ditto_nn_phase_weights, &pd);
    } else {
        ditto_loader_get_cat(l, w, set->n, wk, DITTO_SHAPE(hid, label, 3, 3));
        ditto_loader_get_cat(l, b, set->n, bk, DITTO_SHAPE(hid));
    }
    for (int i = 0; i < set->n && !l->err; i++) {
        DecSpade *s = set->s[i];
        ditto_tensor_slice(w, 0, i * rows, (i + 1) * rows, 1, &s->shared_w);
        if (phase)
            ditto_loader_get(l, &s->shared_b, DITTO_SHAPE(hid), "%s", bk[i]);
        else
            ditto_tensor_slice(b, 0, i * hid, (i + 1) * hid, 1, &s->shared_b);
    }
}

/*
 * SPADEResnetBlock at key with input channels fin; fmid and fout from conv_0
 * / conv_1; up: after a nearest x2 (sub-pixel SPADEs). Its SPADEs join set
 * (norm_0, norm_1, norm_s).
 */
static void load_block(DittoDecoder *m, DittoLoader *l, DecShared *set, DecBlock *b, int64_t fin, bool up, const char *key)
{
    const DittoCatalogEntry *e0 = ditto_loader_peek_rank(l, 4, "%s.conv_0.weight_orig", key);
    const DittoCatalogEntry *e1 = ditto_loader_peek_rank(l, 4, "%s.conv_1.weight_orig", key);
    if (!e0 || !e1)
        return;
    b->fin = fin;
    b->fmid = e0->shape[0];
    b->fout = e1->shape[0];
    b->learned_shortcut = fin != b->fout;
    ditto_loader_get_sn(l, &b->conv_0_w, DITTO_SHAPE(b->fmid, fin, 3, 3), "%s.conv_0", key);
    ditto_loader_get(l, &b->conv_0_b, DITTO_SHAPE(b->fmid), "%s.conv_0.bias", key);
    ditto_loader_get_sn(l, &b->conv_1_w, DITTO_SHAPE(b->fout, b->fmid, 3, 3), "%s.conv_1", key);
    ditto_loader_get(l, &b->conv_1_b, DITTO_SHAPE(b->fout), "%s.conv_1.bias", key);
    char sub[96];
    snprintf(sub, sizeof sub, "%s.norm_0", key);
    load_spade(l, set, &b->norm_0, fin, m->c_hidden, up, false, sub);
    snprintf(sub, sizeof sub, "%s.norm_1", key);
    load_spade(l, set, &b->norm_1, b->fmid, m->c_hidden, up, false, sub);
    if (b->learned_shortcut) {
        ditto_loader_get_sn(l, &b->conv_s_w, DITTO_SHAPE(b->fout, fin, 1, 1), "%s.conv_s", key);
        snprintf(sub, sizeof sub, "%s.norm_s", key);
        load_spade(l, set, &b->norm_s, fin, m->c_hidden, up, true, sub);
        char cs[128], bw[128], bb[128];
        snprintf(cs, sizeof cs, "%s.conv_s", key);
        snprintf(bw, sizeof bw, "%s.norm_s.mlp_beta.weight", key);
        snprintf(bb, sizeof bb, "%s.norm_s.mlp_beta.bias", key);
        ditto_loader_get_sn_product(l, &b->beta_s_w, &b->beta_s_b, b->fout, cs, DITTO_SHAPE(fin, m->c_hidden, 3, 3), bw, bb);
    }
}

int ditto_decoder_load(DittoDecoder **out, DittoBackend *be, DittoCatalog *cat)
{
    *out = NULL;
    DittoDecoder *m = ditto_calloc(1, sizeof *m);
    if (!m)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "decoder: out of memory");
    m->be = be;
    m->act = be->act_dtype;
    m->layout = -1;
    m->merge = -1;
    const char *db = getenv("DITTO_DECODER_BUDGET_MB");   /* up-block chunk budget for memory/speed measurements */
    if (db && atoi(db) > 0)
        m->up_budget = (size_t)atoi(db) << 20;
    DittoLoader l;
    ditto_loader_init(&l, cat, be, &m->weights, "SPADE decoder", "");
    l.dtype = m->act;
    l.conv_channels_last = ditto_nn_conv_channels_last(be, m->act);
    const DittoCatalogEntry *e;
    int rc;
    char key[64];

    /* sizes */
    if ((e = ditto_loader_peek_rank(&l, 4, "fc.weight"))) {
        m->c_fc = e->shape[0];
        m->c_in = e->shape[1];
    }
    while (m->nmiddle < DEC_MAX_MIDDLE && ditto_loader_peek(&l, "G_middle_%d.conv_0.weight_orig", m->nmiddle))
        m->nmiddle++;
    while (m->nup < DEC_MAX_UP && ditto_loader_peek(&l, "up_%d.conv_0.weight_orig", m->nup))
        m->nup++;
    if (!l.err && m->nup == 0)
        ditto_loader_peek_rank(&l, 4, "up_0.conv_0.weight_orig");      /* logs the missing key */
    if ((e = ditto_loader_peek_rank(&l, 4, "%s.norm_0.mlp_shared.0.weight", m->nmiddle ? "G_middle_0" : "up_0")))
        m->c_hidden = e->shape[0];
    int64_t c_last = m->c_fc;

    /* fc: conv 3x3 */
    ditto_loader_get(&l, &m->fc_w, DITTO_SHAPE(m->c_fc, m->c_in, 3, 3), "fc.weight");
    ditto_loader_get(&l, &m->fc_b, DITTO_SHAPE(m->c_fc), "fc.bias");
    /* mlp_shared, merged where they read the same map (load_shared): G_middle's SPADEs all, an up block's its own */
    DecShared set = { 0 };
    for (int i = 0; i < m->nmiddle && !l.err; i++) {
        snprintf(key, sizeof key, "G_middle_%d", i);
        load_block(m, &l, &set, &m->middle[i], c_last, false, key);
        c_last = m->middle[i].fout;
    }
    load_shared(m, &l, &set, false, &m->mid_shared_w, &m->mid_shared_b);
    for (int i = 0; i < m->nup && !l.err; i++) {
        snprintf(key, sizeof key, "up_%d", i);
        set.n = 0;
        load_block(m, &l, &set, &m->up[i], c_last, true, key);
        load_shared(m, &l, &set, true, &m->up[i].shared_w, NULL);
        c_last = m->up[i].fout;
    }
    /* conv_img: Sequential(conv 3x3 -> 3 r^2, PixelShuffle(r)), or a plain conv to 3 channels */
    if (!l.err && (e = ditto_loader_peek(&l, "conv_img.0.weight"))) {
        m->upscale = 2;                                    /* upstream's factor; the get below reports a mismatch */
        for (int r = 3; r <= 8 && e->ndim == 4; r++)
            if (e->shape[0] == 3 * r * r)
                m->upscale = r;
        load_img(&l, m, 3 * m->upscale * m->upscale, c_last, "conv_img.0");
    } else if (!l.err) {
        m->upscale = 1;
        load_img(&l, m, 3, c_last, "conv_img");
    }
    rc = ditto_loader_finish(&l);
    if (rc < 0) {
        ditto_decoder_free(&m);
        return rc;
    }
    *out = m;
    return 0;
}

void ditto_decoder_free(DittoDecoder **pm)
{
    if (!pm || !*pm)
        return;
    ditto_weights_free(&(*pm)->weights);
    ditto_free(*pm);
    *pm = NULL;
}

/* ---- forward ---- */

int ditto_decoder_out_shape(const DittoDecoder *m, const DittoTensor *feature, int64_t shape[4])
{
    if (feature->ndim != 4 || feature->shape[0] < 1 || feature->shape[1] != m->c_in || feature->shape[2] < 1 || feature->shape[3] < 1) {
        char have[DITTO_SHAPE_STR_MAX];
        return ditto_fail(&m->be->log, DITTO_ERR_SHAPE, "decoder: feature has shape %s, expected (B,%lld,H,W)",
                          ditto_shape_str(feature->shape, feature->ndim, have, sizeof have), (long long)m->c_in);
    }
    const int64_t f = ((int64_t)1 << m->nup) * m->upscale;
    shape[0] = feature->shape[0];
    shape[1] = 3;
    shape[2] = feature->shape[2] * f;
    shape[3] = feature->shape[3] * f;
    return 0;
}

/* ---- layout helpers: activations are (B,C,H,W), or (B,H,W,C) when nhwc ---- */

static int64_t dim_h(const DittoTensor *x, bool nhwc)
{
    return x->shape[nhwc ? 1 : 2];
}

static int64_t dim_w(const DittoTensor *x, bool nhwc)
{
    return x->shape[nhwc ? 2 : 3];
}

/* A (B,C,H,W) activation in the forward's layout. */
static int new_act(DittoArena *ws, DittoDType dt, bool nhwc, int64_t B, int64_t C, int64_t H, int64_t W, DittoTensor *t)
{
    return nhwc ? ditto_nn_new(ws, dt, t, DITTO_SHAPE(B, H, W, C)) : ditto_nn_new(ws, dt, t, DITTO_SHAPE(B, C, H, W));
}

/* Report activation x under name, as (B,C,H,W): channels-last ones through a contiguous NCHW copy in scratch. */
static int tap_act(DittoBackend *be, DittoArena *ws, bool nhwc, const DittoTap *tap, const char *name, const DittoTensor *x)
{
    if (!tap || !tap->fn)
        return 0;
    if (!nhwc) {
        ditto_tap(tap, name, x);
        return 0;
    }
    DittoArenaMark mk = ditto_arena_mark(ws);
    DittoTensor t;
    int rc = ditto_nn_new(ws, x->dtype, &t, DITTO_SHAPE(x->shape[0], x->shape[3], x->shape[1], x->shape[2]));
    if (rc >= 0)
        rc = ditto_nn_relayout(be, x, false, &t);
    if (rc >= 0)
        ditto_tap(tap, name, &t);
    ditto_arena_release(ws, mk);
    return rc;
}

/*
 * SPADE: y = instance_norm(x) * (1 + gamma(seg)) + beta(seg), then
 * LeakyReLU(0.2) when lrelu (what follows norm_0 / norm_1 in the block);
 * seg at y's size, or at half of it for a sub-pixel SPADE (s->phase: the
 * map before the nearest x2); x at y's size or smaller by integer factors (read
 * nearest-upsampled by spade_norm); scratch in act. The gamma / beta
 * convolution runs without its bias, which spade_norm adds as it reads gb
 * (gb, the largest tensor of the block, is written once and read once).
 * s->gamma_only (norm_s): no beta here; fold_w makes it, through conv_s,
 * from the same hidden activation: fold_y = fold_w * actv (its bias is
 * added by conv_s, which adds onto fold_y: resblock). Where the backend
 * runs the convolution and the modulation as one kernel (spade_conv, where
 * ditto_op_spade_conv_fused says so: on Hopper with f16 channels-last),
 * gb is never stored. merged: the output of the merged mlp_shared
 * convolution of this SPADE's set (channels-last), whose channels of slot
 * s->slot stand in for its own mlp_shared (a view, no copy; phase: before
 * the interleave, which still adds the bias).
 */
static int spade(DittoBackend *be, DittoArena *ws, DittoDType act, bool nhwc, const DecSpade *s, const DittoTensor *x, const DittoTensor *seg,
                 const DittoTensor *merged, bool lrelu, DittoTensor *y, const DittoTensor *fold_w, DittoTensor *fold_y)
{
    const int64_t B = y->shape[0], C = s->c, H = dim_h(y, nhwc), W = dim_w(y, nhwc);
    DittoConvParams pad1 = ditto_nn_conv_pad(1);
    pad1.nhwc = nhwc;
    DittoConvParams pad1_relu = pad1;
    pad1_relu.relu = true;
    const DittoSpadeParams sp = { DEC_IN_EPS, lrelu, DEC_LRELU, nhwc, s->gamma_only };
    const int64_t gk = s->gamma_only ? 1 : 2;   /* gb's channels per channel of y */
    DittoArenaMark top = ditto_arena_mark(ws);
    const int64_t rows = s->shared_w.shape[0];   /* mlp_shared's outputs: 128, phase 4*128 */
    DittoTensor actv, gb, ph, mine, dense;
    int rc;
    if (merged)
        TRY(ditto_tensor_slice(merged, 3, s->slot * rows, (s->slot + 1) * rows, 1, &mine));   /* this SPADE's channels, a view */
    if (s->phase) {
        TRY(new_act(ws, act, nhwc, B, rows / 4, H, W, &actv));
        DittoArenaMark mk = ditto_arena_mark(ws);
        if (!merged) {
            TRY(new_act(ws, act, nhwc, B, rows, H / 2 + 1, W / 2 + 1, &ph));
            TRY(ditto_op_conv(be, &pad1, seg, &s->shared_w, NULL, &ph));                   /* the 4 parities (B,4*128,H/2+1,W/2+1) */
        }
        TRY(ditto_nn_phase_interleave(be, nhwc, merged ? &mine : &ph, &s->shared_b, &actv));        /* relu(mlp_shared(x2(seg))) (B,128,H,W) */
        ditto_arena_release(ws, mk);
    } else if (merged) {
        actv = mine;                                                                       /* relu(mlp_shared) (B,128,H,W), channels 128 slot.. */
    } else {
        TRY(new_act(ws, act, nhwc, B, rows, H, W, &actv));
        TRY(ditto_op_conv(be, &pad1_relu, seg, &s->shared_w, &s->shared_b, &actv));        /* relu(mlp_shared) (B,128,H,W) */
    }
    const bool strided = !ditto_tensor_is_contiguous(&actv);   /* a channel slice: spade_conv reads it, a plain conv does not */
    if (s->gamma_only && strided) {
        TRY(new_act(ws, act, nhwc, B, rows, H, W, &dense));
        TRY(ditto_op_copy(be, &actv, &dense));                                             /* for the fold's plain conv (B,128,H,W) */
        actv = dense;
    }
    if (s->gamma_only)
        TRY(ditto_op_conv(be, &pad1, &actv, fold_w, NULL, fold_y));                        /* W_s mlp_beta, no bias (B,fout,H,W) */
    if (nhwc && (strided || ditto_op_spade_conv_fused(be, &sp, &actv, &s->gb_w, &s->gb_b, x, y))) {
        TRY(ditto_op_spade_conv(be, &sp, &actv, &s->gb_w, &s->gb_b, x, y));                 /* the same in one op (fused: gamma, beta in registers) */
        goto done;
    }
    TRY(new_act(ws, act, nhwc, B, gk * C, H, W, &gb));
    TRY(ditto_op_conv(be, &pad1, &actv, &s->gb_w, NULL, &gb));                             /* mlp_gamma ; mlp_beta (B,2C,H,W) or gamma alone, no bias */
    TRY(ditto_op_spade_norm(be, &sp, x, &gb, &s->gb_b, y));                                /* norm(x) * (1 + gamma) + beta [, lrelu] */
done:
    ditto_arena_release(ws, top);
    return rc;
}

/*
 * SPADEResnetBlock: y = shortcut(x) + conv_1(lrelu(norm_1(conv_0(lrelu(norm_0(x)))))),
 * at y's size; x smaller by integer factors is the block's input before
 * F.interpolate(mode='nearest') (the up blocks): the SPADEs read it
 * upsampled, so with a learned shortcut no upsampled copy exists. The
 * shortcut goes into y first and conv_1 adds onto it (accumulate), so the
 * sum costs no pass of its own. With a learned shortcut y must not alias x;
 * without one y may be x (updated in place; else x is copied, or upsampled,
 * into y). merge (channels-last): the SPADEs' mlp_shared merged, hid the
 * merged output of G_middle's (B,H,W,12*128) or, in an up block, made here.
 */
static int resblock(DittoDecoder *m, DittoArena *ws, bool nhwc, bool merge, const DittoTensor *hid, const DecBlock *b, const DittoTensor *x,
                    const DittoTensor *feature, DittoTensor *y)
{
    DittoBackend *be = m->be;
    const int64_t B = y->shape[0], H = dim_h(y, nhwc), W = dim_w(y, nhwc);
    const bool up = dim_h(x, nhwc) != H || dim_w(x, nhwc) != W;
    DittoConvParams pad0 = ditto_nn_conv_pad(0), pad1 = ditto_nn_conv_pad(1);
    pad0.nhwc = pad1.nhwc = nhwc;
    DittoConvParams pad1_acc = pad1, pad0_acc = pad0;
    pad1_acc.accumulate = pad0_acc.accumulate = true;
    DittoArenaMark top = ditto_arena_mark(ws), mk;
    DittoTensor seg = *feature, n_s, n_0, dx_0, n_1, ph;
    int rc;
    if (b->learned_shortcut && y->data == x->data)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "decoder: a block with a learned shortcut cannot run in place");
    /*
     * seg = F.interpolate(feature, size=(H,W), mode='nearest'), shared by the
     * block's SPADEs; sub-pixel SPADEs (up blocks) read it before the last x2,
     * at (H/2,W/2)
     */
    const int64_t sf = b->norm_0.phase ? 2 : 1;
    if (H % sf || W % sf)
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "decoder: an up block's output must have an even size");
    if (dim_h(feature, nhwc) != H / sf || dim_w(feature, nhwc) != W / sf) {
        TRY(new_act(ws, m->act, nhwc, B, m->c_in, H / sf, W / sf, &seg));
        TRY(nhwc ? ditto_nn_upsample_last(be, feature, &seg) : ditto_op_upsample_nearest(be, feature, &seg));   /* (B,256,H/sf,W/sf) */
    }
    /* merged up block: the phase convolutions of its 3 SPADEs as one, read by each through its slot, then gone with the block */
    if (merge && b->norm_0.phase) {
        TRY(new_act(ws, m->act, nhwc, B, b->shared_w.shape[0], H / 2 + 1, W / 2 + 1, &ph));
        TRY(ditto_op_conv(be, &pad1, &seg, &b->shared_w, NULL, &ph));                      /* (B,3*4*128,H/2+1,W/2+1) */
        hid = &ph;
    }
    const DittoTensor *mg = merge ? hid : NULL;
    /*
     * x_s = conv_s(norm_s(x)) if fin != fout, else x. conv_s (1x1, nothing
     * between) is linear, so its share of norm_s's beta is W_s mlp_beta(a) =
     * (W_s W_beta) * a + W_s b_beta: one convolution to fout channels (folded
     * at load) instead of mlp_beta's fin, then conv_s of the gamma part adds
     * onto it, adding the fold's bias W_s b_beta too: a convolution with a
     * bias and a residual can run as one cuDNN call (conv.cu's conv_fused),
     * so the fold has no bias pass.
     */
    if (b->learned_shortcut) {
        mk = ditto_arena_mark(ws);
        TRY(new_act(ws, m->act, nhwc, B, b->fin, H, W, &n_s));
        TRY(spade(be, ws, m->act, nhwc, &b->norm_s, x, &seg, mg, false, &n_s, &b->beta_s_w, y));   /* norm(x)(1+gamma) (B,fin,H,W); y */
        TRY(ditto_op_conv(be, &pad0_acc, &n_s, &b->conv_s_w, &b->beta_s_b, y));            /* y += conv_s + W_s b_beta (B,fout,H,W) */
        ditto_arena_release(ws, mk);
    } else if (up) {
        TRY(nhwc ? ditto_nn_upsample_last(be, x, y) : ditto_op_upsample_nearest(be, x, y));
    } else if (y->data != x->data) {
        TRY(ditto_op_copy(be, x, y));
    }
    /*
     * dx = conv_0(lrelu(norm_0(x))), without conv_0's bias: dx only feeds
     * norm_1, whose instance norm subtracts each channel's mean, so a
     * per-channel constant cancels exactly (up to rounding); no bias pass.
     */
    TRY(new_act(ws, m->act, nhwc, B, b->fmid, H, W, &dx_0));
    mk = ditto_arena_mark(ws);
    TRY(new_act(ws, m->act, nhwc, B, b->fin, H, W, &n_0));
    TRY(spade(be, ws, m->act, nhwc, &b->norm_0, x, &seg, mg, true, &n_0, NULL, NULL));         /* lrelu(norm_0(x)) (B,fin,H,W) */
    TRY(ditto_op_conv(be, &pad1, &n_0, &b->conv_0_w, NULL, &dx_0));                        /* (B,fmid,H,W), no bias */
    ditto_arena_release(ws, mk);
    /* out = x_s + conv_1(lrelu(norm_1(dx))): conv_1 accumulates onto x_s in y */
    TRY(new_act(ws, m->act, nhwc, B, b->fmid, H, W, &n_1));
    TRY(spade(be, ws, m->act, nhwc, &b->norm_1, &dx_0, &seg, mg, true, &n_1, NULL, NULL));     /* lrelu(norm_1(dx)) (B,fmid,H,W) */
    TRY(ditto_op_conv(be, &pad1_acc, &n_1, &b->conv_1_w, &b->conv_1_b, y));                /* y += conv_1 (B,fout,H,W) */
done:
    ditto_arena_release(ws, top);
    return rc;
}

/*
 * Whether this forward merges the mlp_shared convolutions that read one map
 * (ditto_decoder_set_merge, else DITTO_DECODER_MERGE read once): channels-last
 * only; in mode 1 where the first SPADE's spade_conv, as the merged forward
 * calls it (a being a channel slice in G_middle), runs fused: the wide convolution
 * pays off there. Probe tensors in ws, released. (B, H, W): the feature's.
 */
static bool dec_merge(DittoDecoder *m, DittoArena *ws, bool nhwc, int64_t B, int64_t H, int64_t W)
{
    static int env = -2;
    if (env == -2) {
        const char *e = getenv("DITTO_DECODER_MERGE");
        env = e && !strcmp(e, "0") ? 0 : e && !strcmp(e, "2") ? 2 : 1;
    }
    const int mode = m->merge >= 0 ? m->merge : env;
    if (!nhwc || mode == 0 || m->nmiddle + m->nup == 0)
        return false;
    if (mode == 2)
        return true;
    const bool mid = m->nmiddle > 0;
    const DecBlock *b = mid ? &m->middle[0] : &m->up[0];
    const DecSpade *s = &b->norm_0;
    const int64_t hid = m->c_hidden, f = mid ? 1 : 2, pitch = mid ? m->mid_shared_w.shape[0] : hid;
    const DittoSpadeParams sp = { DEC_IN_EPS, true, DEC_LRELU, true, false };
    DittoArenaMark mk = ditto_arena_mark(ws);
    DittoTensor all, a, x, y;
    const bool fused = ditto_nn_new(ws, m->act, &all, DITTO_SHAPE(B, f * H, f * W, pitch)) >= 0 &&
                       ditto_tensor_slice(&all, 3, 0, hid, 1, &a) >= 0 && new_act(ws, m->act, true, B, b->fin, H, W, &x) >= 0 &&
                       new_act(ws, m->act, true, B, b->fin, f * H, f * W, &y) >= 0 &&
                       ditto_op_spade_conv_fused(m->be, &sp, &a, &s->gb_w, &s->gb_b, &x, &y);
    ditto_arena_release(ws, mk);
    return fused;
}

/*
 * Items per chunk of up block i at output size (H, W) within budget bytes
 * (B with taps). Per item: seg at half size, y, conv_0 out, SPADE out and
 * scratch (hidden + 2 fin; the phase output, about hidden, is gone before
 * the 2 fin); x2(x) is never stored. merge: the block's merged phase
 * output (3 x 4 x 128 at (H/2+1, W/2+1)) too, there while its SPADEs run.
 */
static int64_t up_chunk(const DittoDecoder *m, int i, bool merge, int64_t B, int64_t H, int64_t W, size_t budget, const DittoTap *tap)
{
    if (tap)
        return B;
    const DecBlock *b = &m->up[i];
    const int64_t ch = (m->c_in + 3) / 4 + b->fin + b->fout + b->fmid + m->c_hidden + 2 * b->fin;
    const int64_t ph = merge ? b->shared_w.shape[0] * (H / 2 + 1) * (W / 2 + 1) : 0;
    const size_t per_item = (size_t)(ch * H * W + ph) * ditto_dtype_size(m->act);
    int64_t chunk = per_item ? (int64_t)(budget / per_item) : B;
    return chunk < 1 ? 1 : chunk > B ? B : chunk;
}

int ditto_decoder_forward(DittoDecoder *m, DittoArena *ws, const DittoTensor *feature, DittoTensor *img, const DittoTap *tap)
{
    DittoBackend *be = m->be;
    int64_t oshape[4];
    DITTO_TRY(ditto_decoder_out_shape(m, feature, oshape));
    if (img->ndim != 4 || memcmp(img->shape, oshape, sizeof oshape) || !ditto_tensor_is_contiguous(img)) {
        char have[DITTO_SHAPE_STR_MAX], want[DITTO_SHAPE_STR_MAX];
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "decoder: img has shape %s, expected contiguous %s",
                          ditto_shape_str(img->shape, img->ndim, have, sizeof have), ditto_shape_str(oshape, 4, want, sizeof want));
    }
    /* feature feeds convolutions: the network's storage dtype; img (written by the final sigmoid) float32 or that */
    if (feature->dtype != m->act || feature->device != be->device)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "decoder: feature has dtype %s, expected %s on the %s backend",
                          ditto_dtype_name(feature->dtype), ditto_dtype_name(m->act), be->name);
    DITTO_TRY(ditto_nn_check_float(be, "decoder", "img", img, m->act));
    const bool nhwc = dec_nhwc(m);
    const int64_t B = feature->shape[0];
    int64_t H = feature->shape[2], W = feature->shape[3];
    const DittoConvParams pad1 = ditto_nn_conv_pad(1);
    DittoConvParams pad1_act = pad1;   /* convolutions on activations in the forward's layout */
    pad1_act.nhwc = nhwc;
    DittoConvParams pad1_relu = pad1_act;
    pad1_relu.relu = true;
    DittoArenaMark top = ditto_arena_mark(ws);
    DittoTensor feat = *feature, x, y, c_img, logits;
    char name[32];
    int rc;

    /* the feature (also the SPADE label map) channels-last, once */
    if (nhwc) {
        TRY(new_act(ws, m->act, true, B, m->c_in, H, W, &feat));
        TRY(ditto_nn_relayout(be, feature, true, &feat));                                    /* (B,64,64,256) */
    }

    /* x = fc(feature) */
    TRY(new_act(ws, m->act, nhwc, B, m->c_fc, H, W, &x));
    TRY(ditto_op_conv(be, &pad1_act, &feat, &m->fc_w, &m->fc_b, &x));                        /* (B,512,64,64) */
    TRY(tap_act(be, ws, nhwc, tap, "fc_out", &x));

    /*
     * G_middle's SPADEs' mlp_shared merged (dec_merge): once for all blocks,
     * kept while they run
     */
    const bool merge = dec_merge(m, ws, nhwc, B, H, W);
    DittoArenaMark mid = ditto_arena_mark(ws);
    DittoTensor hid = { 0 };
    bool keep = false;   /* something the blocks made lies above hid */
    if (merge && m->nmiddle) {
        TRY(ditto_nn_new(ws, m->act, &hid, DITTO_SHAPE(B, H, W, m->mid_shared_w.shape[0])));
        TRY(ditto_op_conv(be, &pad1_relu, &feat, &m->mid_shared_w, &m->mid_shared_b, &hid)); /* relu(mlp_shared) x 12 (B,12*128,64,64) */
    }

    /* x = G_middle_i(x, seg): in place (conv_1 adds onto x); a learned shortcut needs a new tensor */
    for (int i = 0; i < m->nmiddle; i++) {
        const DecBlock *b = &m->middle[i];
        if (b->learned_shortcut) {
            TRY(new_act(ws, m->act, nhwc, B, b->fout, H, W, &y));
            TRY(resblock(m, ws, nhwc, merge, &hid, b, &x, &feat, &y));
            x = y;
            keep = true;
        } else {
            TRY(resblock(m, ws, nhwc, merge, &hid, b, &x, &feat, &x));                      /* (B,512,64,64) */
        }
        snprintf(name, sizeof name, "G_middle_%d_out", i);
        TRY(tap_act(be, ws, nhwc, tap, name, &x));
    }
    if (!keep)
        ditto_arena_release(ws, mid);

    /*
     * The up blocks on chunks of items (DEC_UP_BUDGET; everything when taps
     * are read, which want whole-batch tensors), each level in chunks its own
     * size allows: the blocks before the last one level by level over all
     * items (their outputs, a quarter of the last level's per item, kept for
     * all), the last with conv_img item chunk by item chunk.
     */
    const size_t budget = m->up_budget ? m->up_budget : DEC_UP_BUDGET;
    for (int i = 0; i + 1 < m->nup; i++) {
        H *= 2;
        W *= 2;
        const int64_t chunk = up_chunk(m, i, merge, B, H, W, budget, tap);
        TRY(new_act(ws, m->act, nhwc, B, m->up[i].fout, H, W, &y));
        for (int64_t i0 = 0; i0 < B; i0 += chunk) {
            const int64_t nb = B - i0 < chunk ? B - i0 : chunk;
            DittoArenaMark ck = ditto_arena_mark(ws);
            DittoTensor xc, featc, yc;
            TRY(ditto_tensor_slice(&x, 0, i0, i0 + nb, 1, &xc));
            TRY(ditto_tensor_slice(&feat, 0, i0, i0 + nb, 1, &featc));
            TRY(ditto_tensor_slice(&y, 0, i0, i0 + nb, 1, &yc));
            TRY(resblock(m, ws, nhwc, merge, NULL, &m->up[i], &xc, &featc, &yc));            /* (B,256,128,128) from x2(x) for up_0 */
            ditto_arena_release(ws, ck);
        }
        x = y;
        snprintf(name, sizeof name, "up_%d_out", i);
        TRY(tap_act(be, ws, nhwc, tap, name, &x));
    }
    const int last = m->nup - 1;
    H *= 2;
    W *= 2;
    const int64_t chunk = up_chunk(m, last, merge, B, H, W, budget, tap);
    const DittoTensor xall = x;
    for (int64_t i0 = 0; i0 < B; i0 += chunk) {
        const int64_t nb = B - i0 < chunk ? B - i0 : chunk;
        DittoArenaMark ck = ditto_arena_mark(ws);
        DittoTensor xc, featc, imgc;
        TRY(ditto_tensor_slice(&xall, 0, i0, i0 + nb, 1, &xc));
        TRY(ditto_tensor_slice(&feat, 0, i0, i0 + nb, 1, &featc));
        TRY(ditto_tensor_slice(img, 0, i0, i0 + nb, 1, &imgc));
        TRY(new_act(ws, m->act, nhwc, nb, m->up[last].fout, H, W, &y));
        TRY(resblock(m, ws, nhwc, merge, NULL, &m->up[last], &xc, &featc, &y));              /* (B,64,256,256) for up_1 */
        x = y;
        snprintf(name, sizeof name, "up_%d_out", last);
        TRY(tap_act(be, ws, nhwc, tap, name, &x));

        /*
         * x = conv_img(leaky_relu(x, 0.2)); conv_img = conv 3x3 -> PixelShuffle(2).
         * Channels-last: the LeakyReLU in place, conv_img channels-last (on
         * CUDA f16 with its outputs padded to 16, img_pad), then its 12 real
         * channels shuffled from there (1.5 MB an item, not x's 8 MB).
         */
        const int r = m->upscale;
        if (nhwc) {
            const bool pad = m->img_wp.data != NULL;
            const DittoTensor *iw = pad ? &m->img_wp : &m->img_w, *ib = pad ? &m->img_bp : &m->img_b;
            DittoTensor cp, cv, cf;
            TRY(ditto_op_act(be, DITTO_UNARY_LEAKY_RELU, DEC_LRELU, &x, &x));               /* (B,256,256,64) */
            TRY(ditto_nn_new(ws, m->act, &cp, DITTO_SHAPE(nb, H, W, iw->shape[0])));
            TRY(ditto_op_conv(be, &pad1_act, &x, iw, ib, &cp));                              /* (B,256,256,16) */
            TRY(ditto_tensor_slice(&cp, 3, 0, 3 * r * r, 1, &cv));
            TRY(ditto_tensor_permute(&cv, (const int[]){ 0, 3, 1, 2 }, &cf));               /* (B,12,256,256) view */
            if (!(tap && tap->fn)) {   /* shuffled straight from the channels-last output, the sigmoid as it is written */
                const DittoShuffleParams sp = { r, { DITTO_UNARY_SIGMOID, 0.0f, 0.0f } };
                TRY(ditto_op_pixel_shuffle_act(be, &sp, &cf, &imgc));                        /* (B,3,512,512) */
                ditto_arena_release(ws, ck);
                continue;
            }
            TRY(ditto_nn_new(ws, m->act, &c_img, DITTO_SHAPE(nb, 3 * r * r, H, W)));
            TRY(ditto_nn_relayout(be, &cv, false, &c_img));                                 /* (B,12,256,256) for the logits tap */
        } else {
            TRY(ditto_nn_new(ws, m->act, &c_img, DITTO_SHAPE(nb, 3 * r * r, H, W)));
            TRY(ditto_op_act(be, DITTO_UNARY_LEAKY_RELU, DEC_LRELU, &x, &x));
            TRY(ditto_op_conv(be, &pad1, &x, &m->img_w, &m->img_b, &c_img));                /* (B,12,256,256) */
        }
        logits = c_img;
        if (r > 1) {
            TRY(ditto_nn_new(ws, m->act, &logits, DITTO_SHAPE(nb, 3, H * r, W * r)));
            TRY(ditto_op_pixel_shuffle(be, r, &c_img, &logits));                            /* (B,3,512,512) */
        }
        ditto_tap(tap, "logits", &logits);

        /* img = sigmoid(x) */
        TRY(ditto_op_act(be, DITTO_UNARY_SIGMOID, 0.0f, &logits, &imgc));
        ditto_arena_release(ws, ck);
    }
done:
    ditto_arena_release(ws, top);
    return rc;
}

int ditto_warp_decode_items(DittoWarp *w, DittoDecoder *d, DittoArena *ws, const DittoTensor *f_s, const DittoTensor *kp_source,
                            const DittoTensor *kp_driving, DittoTensor *feature, DittoTensor *img, int64_t a, int64_t n)
{
    DittoTensor fs, ks, kd, fe, im;
    const int64_t e = a + n;
    DITTO_TRY(ditto_tensor_slice(f_s, 0, a, e, 1, &fs));
    DITTO_TRY(ditto_tensor_slice(kp_source, 0, a, e, 1, &ks));
    DITTO_TRY(ditto_tensor_slice(kp_driving, 0, a, e, 1, &kd));
    DITTO_TRY(ditto_tensor_slice(feature, 0, a, e, 1, &fe));
    DITTO_TRY(ditto_tensor_slice(img, 0, a, e, 1, &im));
    DITTO_TRY(ditto_warp_forward(w, ws, &fs, &ks, &kd, &fe, NULL));
    return ditto_decoder_forward(d, ws, &fe, &im, NULL);
}
