#include "weights/synthetic.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/thread.h"

typedef enum Init {
    INIT_WEIGHT,   /* N(0, 1/fan_in), fan_in = prod(shape[1:]) */
    INIT_BIAS,     /* 0.1 N(0,1) */
    INIT_NORM_W,   /* 1 + 0.2 N(0,1) */
    INIT_RVAR,     /* U(0.5, 1.5) */
    INIT_GRN_G,    /* 0.5 N(0,1) */
    INIT_SN_U,     /* u = W v / |W v| of the preceding weight_orig / weight_v */
    INIT_SN_V,     /* random unit vector */
    INIT_COUNT,    /* int64 scalar 0 (num_batches_tracked) */
    INIT_EMBED,    /* N(0,1) (learned null embeddings) */
    INIT_ROTARY,   /* 1/10000^(2k/(2n)), the LMDM's rotary frequencies (not learned) */
} Init;

typedef struct Spec {
    char name[160];
    int ndim;
    int64_t shape[DITTO_MAX_DIMS];
    Init init;
} Spec;

typedef struct Emitter {
    Spec *specs;
    size_t n, cap;
    int err;
} Emitter;

static void emit(Emitter *e, Init init, int ndim, const int64_t *shape, const char *fmt, ...) DITTO_PRINTF(5, 6);
static void emit(Emitter *e, Init init, int ndim, const int64_t *shape, const char *fmt, ...)
{
    if (e->err)
        return;
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 256;
        Spec *s = ditto_realloc(e->specs, cap * sizeof *s);
        if (!s) {
            e->err = DITTO_ERR_NOMEM;
            return;
        }
        e->specs = s;
        e->cap = cap;
    }
    Spec *s = &e->specs[e->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    s->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        s->shape[i] = shape[i];
    s->init = init;
}

#define SHP(...) (int)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)), (const int64_t[]){ __VA_ARGS__ }

static void emit_bn(Emitter *e, int64_t c, const char *base)
{
    emit(e, INIT_NORM_W, SHP(c), "%s.weight", base);
    emit(e, INIT_BIAS, SHP(c), "%s.bias", base);
    emit(e, INIT_BIAS, SHP(c), "%s.running_mean", base);
    emit(e, INIT_RVAR, SHP(c), "%s.running_var", base);
    emit(e, INIT_COUNT, 0, NULL, "%s.num_batches_tracked", base);
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* 5.2 AppearanceFeatureExtractor */
static void gen_appearance(Emitter *e, DittoSyntheticSize size)
{
    const bool full = size == DITTO_SYNTH_FULL, tiny = size == DITTO_SYNTH_TINY;
    /*
     * tiny: four down blocks (256 -> 16), f_s (4, 2, 16, 16): second has
     * C*D = 8 outputs viewed as 4 channels x depth 2
     */
    int64_t be = full ? 64 : tiny ? 8 : 16, maxf = full ? 512 : tiny ? 8 : 128, rc = full ? 32 : tiny ? 4 : 8, nres = full ? 6 : tiny ? 1 : 2;
    int ndown = tiny ? 4 : 2;
    char b[64];
    emit(e, INIT_WEIGHT, SHP(be, 3, 3, 3), "first.conv.weight");
    emit(e, INIT_BIAS, SHP(be), "first.conv.bias");
    emit_bn(e, be, "first.norm");
    int64_t in = be;
    for (int i = 0; i < ndown; i++) {
        int64_t out = min64(maxf, be << (i + 1));
        emit(e, INIT_WEIGHT, SHP(out, in, 3, 3), "down_blocks.%d.conv.weight", i);
        emit(e, INIT_BIAS, SHP(out), "down_blocks.%d.conv.bias", i);
        snprintf(b, sizeof b, "down_blocks.%d.norm", i);
        emit_bn(e, out, b);
        in = out;
    }
    emit(e, INIT_WEIGHT, SHP(maxf, in, 1, 1), "second.weight");
    emit(e, INIT_BIAS, SHP(maxf), "second.bias");
    for (int i = 0; i < nres; i++) {
        for (int j = 1; j <= 2; j++) {
            snprintf(b, sizeof b, "resblocks_3d.3dr%d.norm%d", i, j);
            emit_bn(e, rc, b);
            emit(e, INIT_WEIGHT, SHP(rc, rc, 3, 3, 3), "resblocks_3d.3dr%d.conv%d.weight", i, j);
            emit(e, INIT_BIAS, SHP(rc), "resblocks_3d.3dr%d.conv%d.bias", i, j);
        }
    }
}

/* 5.3 MotionExtractor (ConvNeXt-V2 + heads), keys under "detector." */
static void gen_motion(Emitter *e, DittoSyntheticSize size)
{
    const int64_t dims_full[4] = { 96, 192, 384, 768 }, dims_small[4] = { 16, 32, 48, 64 }, dims_tiny[4] = { 8, 8, 16, 16 };
    const int depth_full[4] = { 3, 3, 9, 3 }, depth_small[4] = { 1, 1, 2, 1 }, depth_tiny[4] = { 1, 1, 1, 1 };
    const int64_t *dims = size == DITTO_SYNTH_FULL ? dims_full : size == DITTO_SYNTH_TINY ? dims_tiny : dims_small;
    const int *depth = size == DITTO_SYNTH_FULL ? depth_full : size == DITTO_SYNTH_TINY ? depth_tiny : depth_small;
    emit(e, INIT_WEIGHT, SHP(dims[0], 3, 4, 4), "detector.downsample_layers.0.0.weight");
    emit(e, INIT_BIAS, SHP(dims[0]), "detector.downsample_layers.0.0.bias");
    emit(e, INIT_NORM_W, SHP(dims[0]), "detector.downsample_layers.0.1.weight");
    emit(e, INIT_BIAS, SHP(dims[0]), "detector.downsample_layers.0.1.bias");
    for (int i = 1; i < 4; i++) {
        emit(e, INIT_NORM_W, SHP(dims[i - 1]), "detector.downsample_layers.%d.0.weight", i);
        emit(e, INIT_BIAS, SHP(dims[i - 1]), "detector.downsample_layers.%d.0.bias", i);
        emit(e, INIT_WEIGHT, SHP(dims[i], dims[i - 1], 2, 2), "detector.downsample_layers.%d.1.weight", i);
        emit(e, INIT_BIAS, SHP(dims[i]), "detector.downsample_layers.%d.1.bias", i);
    }
    for (int s = 0; s < 4; s++) {
        int64_t c = dims[s];
        for (int j = 0; j < depth[s]; j++) {
            emit(e, INIT_WEIGHT, SHP(c, 1, 7, 7), "detector.stages.%d.%d.dwconv.weight", s, j);
            emit(e, INIT_BIAS, SHP(c), "detector.stages.%d.%d.dwconv.bias", s, j);
            emit(e, INIT_NORM_W, SHP(c), "detector.stages.%d.%d.norm.weight", s, j);
            emit(e, INIT_BIAS, SHP(c), "detector.stages.%d.%d.norm.bias", s, j);
            emit(e, INIT_WEIGHT, SHP(4 * c, c), "detector.stages.%d.%d.pwconv1.weight", s, j);
            emit(e, INIT_BIAS, SHP(4 * c), "detector.stages.%d.%d.pwconv1.bias", s, j);
            emit(e, INIT_GRN_G, SHP(1, 1, 1, 4 * c), "detector.stages.%d.%d.grn.gamma", s, j);
            emit(e, INIT_BIAS, SHP(1, 1, 1, 4 * c), "detector.stages.%d.%d.grn.beta", s, j);
            emit(e, INIT_WEIGHT, SHP(c, 4 * c), "detector.stages.%d.%d.pwconv2.weight", s, j);
            emit(e, INIT_BIAS, SHP(c), "detector.stages.%d.%d.pwconv2.bias", s, j);
        }
    }
    int64_t c = dims[3];
    emit(e, INIT_NORM_W, SHP(c), "detector.norm.weight");
    emit(e, INIT_BIAS, SHP(c), "detector.norm.bias");
    const char *heads[7] = { "fc_kp", "fc_scale", "fc_pitch", "fc_yaw", "fc_roll", "fc_t", "fc_exp" };
    const int64_t widths[7] = { 63, 1, 66, 66, 66, 3, 63 };
    for (int h = 0; h < 7; h++) {
        emit(e, INIT_WEIGHT, SHP(widths[h], c), "detector.%s.weight", heads[h]);
        emit(e, INIT_BIAS, SHP(widths[h]), "detector.%s.bias", heads[h]);
    }
}

/* 5.4 WarpingNetwork + DenseMotionNetwork */
static void gen_warp(Emitter *e, DittoSyntheticSize size)
{
    const bool full = size == DITTO_SYNTH_FULL, tiny = size == DITTO_SYNTH_TINY;
    /*
     * tiny: f_s (4, 2, 16, 16), one compressed channel, a 2-block hourglass
     * of 4-8 channels. The 7x7x7 mask conv over (K+1)(c+1) + 4 = 48
     * channels costs 22*48*343 MACs per voxel whatever the widths (2.9
     * GMAC per frame at 2 x 64 x 64, 0.19 at 2 x 16 x 16), which is why the
     * tiny pipeline runs the motion field at 16 x 16.
     */
    int64_t fc = full ? 32 : tiny ? 4 : 8, depth = tiny ? 2 : 16, K = 21;
    int64_t be = full ? 32 : tiny ? 4 : 8, maxf = full ? 1024 : tiny ? 8 : 64, comp = full ? 4 : tiny ? 1 : 2, nblocks = full ? 5 : tiny ? 2 : 3;
    int64_t out_be = full ? 64 : tiny ? 2 : 16;     /* warping net block_expansion (third: out_be * 4) */
    const char *dm = "dense_motion_network";
    char b[160];
    int64_t in_hg = (K + 1) * (comp + 1);
    int64_t in = in_hg;
    for (int i = 0; i < nblocks; i++) {
        int64_t out = min64(maxf, be << (i + 1));
        emit(e, INIT_WEIGHT, SHP(out, in, 3, 3, 3), "%s.hourglass.encoder.down_blocks.%d.conv.weight", dm, i);
        emit(e, INIT_BIAS, SHP(out), "%s.hourglass.encoder.down_blocks.%d.conv.bias", dm, i);
        snprintf(b, sizeof b, "%s.hourglass.encoder.down_blocks.%d.norm", dm, i);
        emit_bn(e, out, b);
        in = out;
    }
    for (int k = 0; k < nblocks; k++) {
        int i = (int)nblocks - 1 - k;
        int64_t cin = (k == 0 ? 1 : 2) * min64(maxf, be << (i + 1));
        int64_t out = min64(maxf, be << i);
        emit(e, INIT_WEIGHT, SHP(out, cin, 3, 3, 3), "%s.hourglass.decoder.up_blocks.%d.conv.weight", dm, k);
        emit(e, INIT_BIAS, SHP(out), "%s.hourglass.decoder.up_blocks.%d.conv.bias", dm, k);
        snprintf(b, sizeof b, "%s.hourglass.decoder.up_blocks.%d.norm", dm, k);
        emit_bn(e, out, b);
    }
    int64_t of = be + in_hg;
    emit(e, INIT_WEIGHT, SHP(of, of, 3, 3, 3), "%s.hourglass.decoder.conv.weight", dm);
    emit(e, INIT_BIAS, SHP(of), "%s.hourglass.decoder.conv.bias", dm);
    snprintf(b, sizeof b, "%s.hourglass.decoder.norm", dm);
    emit_bn(e, of, b);
    emit(e, INIT_WEIGHT, SHP(K + 1, of, 7, 7, 7), "%s.mask.weight", dm);
    emit(e, INIT_BIAS, SHP(K + 1), "%s.mask.bias", dm);
    emit(e, INIT_WEIGHT, SHP(comp, fc, 1, 1, 1), "%s.compress.weight", dm);
    emit(e, INIT_BIAS, SHP(comp), "%s.compress.bias", dm);
    snprintf(b, sizeof b, "%s.norm", dm);
    emit_bn(e, comp, b);
    emit(e, INIT_WEIGHT, SHP(1, of * depth, 7, 7), "%s.occlusion.weight", dm);
    emit(e, INIT_BIAS, SHP(1), "%s.occlusion.bias", dm);
    int64_t third = out_be * 4;
    emit(e, INIT_WEIGHT, SHP(third, fc * depth, 3, 3), "third.conv.weight");
    emit(e, INIT_BIAS, SHP(third), "third.conv.bias");
    emit_bn(e, third, "third.norm");
    emit(e, INIT_WEIGHT, SHP(third, third, 1, 1), "fourth.weight");
    emit(e, INIT_BIAS, SHP(third), "fourth.bias");
}

static void gen_spade(Emitter *e, const char *blk, const char *norm, int64_t c, int64_t label, int64_t hidden)
{
    emit(e, INIT_WEIGHT, SHP(hidden, label, 3, 3), "%s.%s.mlp_shared.0.weight", blk, norm);
    emit(e, INIT_BIAS, SHP(hidden), "%s.%s.mlp_shared.0.bias", blk, norm);
    emit(e, INIT_WEIGHT, SHP(c, hidden, 3, 3), "%s.%s.mlp_gamma.weight", blk, norm);
    emit(e, INIT_BIAS, SHP(c), "%s.%s.mlp_gamma.bias", blk, norm);
    emit(e, INIT_WEIGHT, SHP(c, hidden, 3, 3), "%s.%s.mlp_beta.weight", blk, norm);
    emit(e, INIT_BIAS, SHP(c), "%s.%s.mlp_beta.bias", blk, norm);
}

static void gen_sn_conv(Emitter *e, const char *blk, const char *conv, int64_t out, int64_t in, int64_t k, bool bias)
{
    if (bias)
        emit(e, INIT_BIAS, SHP(out), "%s.%s.bias", blk, conv);
    emit(e, INIT_WEIGHT, SHP(out, in, k, k), "%s.%s.weight_orig", blk, conv);
    emit(e, INIT_SN_V, SHP(in * k * k), "%s.%s.weight_v", blk, conv);   /* v before u: u derives from W v */
    emit(e, INIT_SN_U, SHP(out), "%s.%s.weight_u", blk, conv);
}

static void gen_resblock(Emitter *e, const char *blk, int64_t fin, int64_t fout, int64_t label, int64_t hidden)
{
    int64_t fmid = min64(fin, fout);
    gen_sn_conv(e, blk, "conv_0", fmid, fin, 3, true);
    gen_sn_conv(e, blk, "conv_1", fout, fmid, 3, true);
    if (fin != fout)
        gen_sn_conv(e, blk, "conv_s", fout, fin, 1, false);
    gen_spade(e, blk, "norm_0", fin, label, hidden);
    gen_spade(e, blk, "norm_1", fmid, label, hidden);
    if (fin != fout)
        gen_spade(e, blk, "norm_s", fin, label, hidden);
}

/* 5.5 SPADEDecoder */
static void gen_decoder(Emitter *e, DittoSyntheticSize size)
{
    const bool full = size == DITTO_SYNTH_FULL, tiny = size == DITTO_SYNTH_TINY;
    /*
     * tiny: the tiny warp's 8 x 16 x 16 output, 8 channels, one middle
     * block, three up blocks (16 -> 128) of 8, 4, 4 channels, SPADE hidden
     * 4, then conv_img to 48 channels and PixelShuffle(4) -> 512 x 512.
     */
    int64_t label = full ? 256 : tiny ? 8 : 64, ch = full ? 512 : tiny ? 8 : 64, hidden = full ? 128 : tiny ? 4 : 32;
    int64_t ups_full[2] = { 256, 64 }, ups_small[2] = { 32, 16 }, ups_tiny[3] = { 8, 4, 4 };
    const int64_t *ups = full ? ups_full : tiny ? ups_tiny : ups_small;
    int nmiddle = tiny ? 1 : 6, nup = tiny ? 3 : 2, r = tiny ? 4 : 2;
    char b[32];
    emit(e, INIT_WEIGHT, SHP(ch, label, 3, 3), "fc.weight");
    emit(e, INIT_BIAS, SHP(ch), "fc.bias");
    for (int i = 0; i < nmiddle; i++) {
        snprintf(b, sizeof b, "G_middle_%d", i);
        gen_resblock(e, b, ch, ch, label, hidden);
    }
    int64_t in = ch;
    for (int i = 0; i < nup; i++) {
        snprintf(b, sizeof b, "up_%d", i);
        gen_resblock(e, b, in, ups[i], label, hidden);
        in = ups[i];
    }
    emit(e, INIT_WEIGHT, SHP(3 * r * r, in, 3, 3), "conv_img.0.weight");
    emit(e, INIT_BIAS, SHP(3 * r * r), "conv_img.0.bias");
}

/* 5.6 StitchingNetwork: always full size (45k parameters) */
static void gen_stitch(Emitter *e, DittoSyntheticSize size)
{
    (void)size;
    const int64_t sizes[5] = { 126, 128, 128, 64, 65 };
    for (int i = 0; i < 4; i++) {
        emit(e, INIT_WEIGHT, SHP(sizes[i + 1], sizes[i]), "retarget_shoulder.mlp.%d.weight", 2 * i);
        emit(e, INIT_BIAS, SHP(sizes[i + 1]), "retarget_shoulder.mlp.%d.bias", 2 * i);
    }
}


/* MultiheadAttention (packed in_proj) of width d. */
static void gen_mha(Emitter *e, const char *base, int64_t d)
{
    emit(e, INIT_WEIGHT, SHP(3 * d, d), "%s.in_proj_weight", base);
    emit(e, INIT_BIAS, SHP(3 * d), "%s.in_proj_bias", base);
    emit(e, INIT_WEIGHT, SHP(d, d), "%s.out_proj.weight", base);
    emit(e, INIT_BIAS, SHP(d), "%s.out_proj.bias", base);
}

static void gen_linear(Emitter *e, const char *base, int64_t out, int64_t in)
{
    emit(e, INIT_WEIGHT, SHP(out, in), "%s.weight", base);
    emit(e, INIT_BIAS, SHP(out), "%s.bias", base);
}

static void gen_ln(Emitter *e, const char *base, int64_t d)
{
    emit(e, INIT_NORM_W, SHP(d), "%s.weight", base);
    emit(e, INIT_BIAS, SHP(d), "%s.bias", base);
}

/*
 * 5.7 LMDM MotionDecoder, {'model_state_dict': ...}. The window (80 frames),
 * the motion width (265) and the condition width (1103) are the official
 * ones at every size; only the latent width and depth shrink.
 */
static void gen_lmdm(Emitter *e, DittoSyntheticSize size)
{
    const bool full = size == DITTO_SYNTH_FULL, tiny = size == DITTO_SYNTH_TINY;
    const int64_t F = 265, L = 80, C = 1103;
    const int64_t D = full ? 512 : tiny ? 64 : 128, ff = full ? 1024 : tiny ? 128 : 256, th = full ? 2048 : tiny ? 256 : 512;
    const int layers = full ? 8 : tiny ? 2 : 4, enc = 2;
    const char *p = "model_state_dict";
    char b[96];
    emit(e, INIT_EMBED, SHP(1, L, D), "%s.null_cond_embed", p);
    emit(e, INIT_EMBED, SHP(1, D), "%s.null_cond_hidden", p);
    emit(e, INIT_ROTARY, SHP(D / 2), "%s.rotary.freqs", p);
    snprintf(b, sizeof b, "%s.time_mlp.1", p);
    gen_linear(e, b, th, D);
    snprintf(b, sizeof b, "%s.to_time_cond.0", p);
    gen_linear(e, b, D, th);
    snprintf(b, sizeof b, "%s.to_time_tokens.0", p);
    gen_linear(e, b, 2 * D, th);
    snprintf(b, sizeof b, "%s.norm_cond", p);
    gen_ln(e, b, D);
    snprintf(b, sizeof b, "%s.input_projection", p);
    gen_linear(e, b, D, 2 * F);
    snprintf(b, sizeof b, "%s.cond_projection", p);
    gen_linear(e, b, D, C);
    for (int i = 0; i < enc; i++) {
        snprintf(b, sizeof b, "%s.cond_encoder.%d.self_attn", p, i);
        gen_mha(e, b, D);
        snprintf(b, sizeof b, "%s.cond_encoder.%d.linear1", p, i);
        gen_linear(e, b, ff, D);
        snprintf(b, sizeof b, "%s.cond_encoder.%d.linear2", p, i);
        gen_linear(e, b, D, ff);
        snprintf(b, sizeof b, "%s.cond_encoder.%d.norm1", p, i);
        gen_ln(e, b, D);
        snprintf(b, sizeof b, "%s.cond_encoder.%d.norm2", p, i);
        gen_ln(e, b, D);
        emit(e, INIT_ROTARY, SHP(D / 2), "%s.cond_encoder.%d.rotary.freqs", p, i);
    }
    snprintf(b, sizeof b, "%s.non_attn_cond_projection.0", p);
    gen_ln(e, b, D);
    snprintf(b, sizeof b, "%s.non_attn_cond_projection.1", p);
    gen_linear(e, b, D, D);
    snprintf(b, sizeof b, "%s.non_attn_cond_projection.3", p);
    gen_linear(e, b, D, D);
    for (int i = 0; i < layers; i++) {
        snprintf(b, sizeof b, "%s.seqTransDecoder.stack.%d.self_attn", p, i);
        gen_mha(e, b, D);
        snprintf(b, sizeof b, "%s.seqTransDecoder.stack.%d.multihead_attn", p, i);
        gen_mha(e, b, D);
        snprintf(b, sizeof b, "%s.seqTransDecoder.stack.%d.linear1", p, i);
        gen_linear(e, b, ff, D);
        snprintf(b, sizeof b, "%s.seqTransDecoder.stack.%d.linear2", p, i);
        gen_linear(e, b, D, ff);
        for (int j = 1; j <= 3; j++) {
            snprintf(b, sizeof b, "%s.seqTransDecoder.stack.%d.norm%d", p, i, j);
            gen_ln(e, b, D);
            snprintf(b, sizeof b, "%s.seqTransDecoder.stack.%d.film%d.block.1", p, i, j);
            gen_linear(e, b, 2 * D, D);
        }
        emit(e, INIT_ROTARY, SHP(D / 2), "%s.seqTransDecoder.stack.%d.rotary.freqs", p, i);
    }
    snprintf(b, sizeof b, "%s.final_layer", p);
    gen_linear(e, b, F, D);
}

int ditto_synthetic_lmdm_heads(DittoSyntheticSize size)
{
    return size == DITTO_SYNTH_TINY ? 4 : 8;
}

static const char *const net_files[DITTO_NET_COUNT] = {
    "appearance_extractor.pth", "motion_extractor.pth", "warp_network.pth", "decoder.pth", "stitch_network.pth",
};

const char *ditto_net_file_name(DittoNetKind net)
{
    return (unsigned)net < DITTO_NET_COUNT ? net_files[net] : "unknown";
}

static int64_t spec_numel(const Spec *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->shape[i];
    return n;
}

/* Whether elements [first, first + n) of an entry are independent draws (filled in parallel chunks). */
static bool drawn(const Spec *s)
{
    return s->init != INIT_COUNT && s->init != INIT_SN_U && s->init != INIT_ROTARY;
}

/* Elements [first, first + n) of a drawn entry: the counter-based RNG makes chunks exact. */
static void fill_range(const Spec *s, size_t idx, uint64_t seed, float *f, int64_t first, int64_t n)
{
    int64_t fan_in = 1;
    for (int i = 1; i < s->ndim; i++)
        fan_in *= s->shape[i];
    uint64_t stream = ditto_rng_stream(0x5e, (uint32_t)idx, 0);
    if (s->init == INIT_RVAR) {
        ditto_rng_fill_uniform(seed, stream, (uint64_t)first, f + first, (size_t)n);
        for (int64_t i = first; i < first + n; i++)
            f[i] += 0.5f;
        return;
    }
    ditto_rng_fill_normal(seed, stream, (uint64_t)first, f + first, (size_t)n);
    float scale = 1, shift = 0;
    switch (s->init) {
    case INIT_WEIGHT: scale = 1.0f / sqrtf((float)fan_in); break;
    case INIT_BIAS: scale = 0.1f; break;
    case INIT_NORM_W: scale = 0.2f; shift = 1; break;
    case INIT_GRN_G: scale = 0.5f; break;
    default: break;
    }
    for (int64_t i = first; i < first + n; i++)
        f[i] = f[i] * scale + shift;
}

/* What is not an independent draw: counters, rotary tables, the unit-norm scaling of SN_V. */
static void fill_finish(const Spec *s, void *data)
{
    const int64_t n = spec_numel(s);
    float *f = data;
    switch (s->init) {
    case INIT_COUNT:
        memset(data, 0, 8);
        return;
    case INIT_ROTARY:
        for (int64_t k = 0; k < n; k++)
            f[k] = (float)pow(10000.0, -(double)(2 * k) / (double)(2 * n));
        return;
    case INIT_SN_V: {
        double norm = 0;
        for (int64_t i = 0; i < n; i++)
            norm += (double)f[i] * f[i];
        norm = sqrt(norm);
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)(f[i] / norm);
        return;
    }
    default:
        return;   /* INIT_SN_U: from the preceding entries, by build() */
    }
}

/* Parallel draw: the entries cut into chunks of at most FILL_CHUNK elements, one task each. */
#define FILL_CHUNK ((int64_t)1 << 20)

typedef struct FillJob {
    const Spec *specs;
    uint8_t *const *data;   /* per entry */
    int64_t *task_first;    /* per entry: first task index; [n] = number of tasks */
    size_t n;
    uint64_t seed;
} FillJob;

static void fill_task(void *ctx, int task)
{
    const FillJob *j = ctx;
    size_t lo = 0, hi = j->n;   /* the entry whose task range holds `task` */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (j->task_first[mid] <= task)
            lo = mid;
        else
            hi = mid;
    }
    const Spec *s = &j->specs[lo];
    int64_t first = (task - j->task_first[lo]) * FILL_CHUNK, n = spec_numel(s) - first;
    fill_range(s, lo, j->seed, (float *)j->data[lo], first, n < FILL_CHUNK ? n : FILL_CHUNK);
}

/* Turn the specs of one network into a catalog over one heap block (frees e->specs). */
static int build(DittoCatalog **out, Emitter *ep, const char *file, uint64_t seed, const DittoLogger *log)
{
    Emitter e = *ep;
    if (e.err) {
        ditto_free(e.specs);
        return ditto_fail(log, e.err, "synthetic weights: out of memory");
    }
    /* one block for all tensors, each 64-byte aligned */
    size_t total = 0;
    for (size_t i = 0; i < e.n; i++) {
        int64_t n = 1;
        for (int d = 0; d < e.specs[i].ndim; d++)
            n *= e.specs[i].shape[d];
        total += ((size_t)n * (e.specs[i].init == INIT_COUNT ? 8 : 4) + 63) & ~(size_t)63;
    }
    uint8_t **data = ditto_calloc(e.n + 1, sizeof *data);
    int64_t *task_first = ditto_calloc(e.n + 1, sizeof *task_first);
    uint8_t *block = data && task_first ? ditto_malloc_aligned(total ? total : 64) : NULL;
    char name[64];
    snprintf(name, sizeof name, "synthetic %s", file);
    DittoCatalog *c = NULL;
    int rc = block ? ditto_catalog_create_heap(&c, name, block, total, log) : DITTO_ERR_NOMEM;
    if (rc >= 0) {
        /* the random draws, in parallel (hundreds of MB at the official sizes); bit-identical to a serial fill */
        size_t off = 0;
        int64_t tasks = 0;
        for (size_t i = 0; i < e.n; i++) {
            const Spec *s = &e.specs[i];
            data[i] = block + off;
            task_first[i] = tasks;
            if (drawn(s))
                tasks += (spec_numel(s) + FILL_CHUNK - 1) / FILL_CHUNK;
            off += ((size_t)spec_numel(s) * (s->init == INIT_COUNT ? 8 : 4) + 63) & ~(size_t)63;
        }
        task_first[e.n] = tasks;
        FillJob job = { e.specs, data, task_first, e.n, seed };
        DittoThreadPool *pool = NULL;
        int nt = ditto_cpu_count();
        if (tasks > 1 && nt > 1 && ditto_pool_create(&pool, nt < 32 ? nt : 32) >= 0) {
            ditto_pool_run(pool, (int)tasks, fill_task, &job);
            ditto_pool_destroy(&pool);
        } else {
            for (int64_t t = 0; t < tasks; t++)
                fill_task(&job, (int)t);
        }
    }
    size_t off = 0;
    for (size_t i = 0; rc >= 0 && i < e.n; i++) {
        const Spec *s = &e.specs[i];
        DittoCatalogEntry en;
        memset(&en, 0, sizeof en);
        en.name = (char *)s->name;
        en.dtype = s->init == INIT_COUNT ? DITTO_I64 : DITTO_F32;
        DittoTensor t = ditto_tensor(NULL, en.dtype, s->ndim, s->shape);
        en.ndim = s->ndim;
        for (int d = 0; d < s->ndim; d++) {
            en.shape[d] = s->shape[d];
            en.stride[d] = t.stride[d];
        }
        en.offset = off;
        en.span = ditto_tensor_nbytes(&t);
        en.data = block + off;
        fill_finish(s, block + off);
        if (s->init == INIT_SN_U && c->n >= 2) {
            /* u = W v / |W v| from the two preceding entries, weight_orig (rows, cols) and weight_v (cols) */
            const float *w = c->entries[c->n - 2].data, *v = c->entries[c->n - 1].data;
            int64_t rows = s->shape[0], cols = ditto_catalog_entry_numel(&c->entries[c->n - 1]);
            float *u = (float *)(block + off);
            double norm = 0;
            for (int64_t r = 0; r < rows; r++) {
                double acc = 0;
                for (int64_t k = 0; k < cols; k++)
                    acc += (double)w[r * cols + k] * v[k];
                u[r] = (float)acc;
                norm += acc * acc;
            }
            norm = sqrt(norm) + 1e-12;
            for (int64_t r = 0; r < rows; r++)
                u[r] = (float)(u[r] / norm);
        }
        off += ((size_t)en.span + 63) & ~(size_t)63;
        rc = ditto_catalog_add(c, &en);
    }
    if (rc >= 0)
        rc = ditto_catalog_finish(c);
    ditto_free(e.specs);
    ditto_free(data);
    ditto_free(task_first);
    if (rc < 0) {
        ditto_catalog_close(&c);
        return ditto_fail(log, rc, "synthetic weights for %s: %s", file, ditto_strerror(rc));
    }
    *out = c;
    return 0;
}

static bool size_ok(DittoSyntheticSize size)
{
    return size == DITTO_SYNTH_FULL || size == DITTO_SYNTH_SMALL || size == DITTO_SYNTH_TINY;
}

int ditto_synthetic_catalog_size(DittoCatalog **out, DittoNetKind net, DittoSyntheticSize size, uint64_t seed, const DittoLogger *log)
{
    *out = NULL;
    if (!size_ok(size))
        return ditto_fail(log, DITTO_ERR_INVAL, "synthetic weights: unknown size %d", (int)size);
    Emitter e = { 0 };
    switch (net) {
    case DITTO_NET_APPEARANCE: gen_appearance(&e, size); break;
    case DITTO_NET_MOTION: gen_motion(&e, size); break;
    case DITTO_NET_WARP: gen_warp(&e, size); break;
    case DITTO_NET_DECODER: gen_decoder(&e, size); break;
    case DITTO_NET_STITCH: gen_stitch(&e, size); break;
    default: return ditto_fail(log, DITTO_ERR_INVAL, "synthetic weights: unknown network %d", (int)net);
    }
    return build(out, &e, net_files[net], seed, log);
}

int ditto_synthetic_catalog(DittoCatalog **out, DittoNetKind net, bool full_size, uint64_t seed, const DittoLogger *log)
{
    return ditto_synthetic_catalog_size(out, net, full_size ? DITTO_SYNTH_FULL : DITTO_SYNTH_SMALL, seed, log);
}

int ditto_synthetic_lmdm_catalog(DittoCatalog **out, DittoSyntheticSize size, uint64_t seed, const DittoLogger *log)
{
    *out = NULL;
    if (!size_ok(size))
        return ditto_fail(log, DITTO_ERR_INVAL, "synthetic weights: unknown size %d", (int)size);
    Emitter e = { 0 };
    gen_lmdm(&e, size);
    return build(out, &e, "lmdm_v0.4_hubert.pth", seed, log);
}
