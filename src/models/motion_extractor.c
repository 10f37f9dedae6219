/*
 * MotionExtractor (M), ditto-architecture.md 5.3: a ConvNeXt-V2 backbone
 * (keys "detector.*") plus seven linear heads.
 * image (B,3,H,W) in [0,1] -> pitch, yaw, roll (B,66), t (B,3), exp (B,63),
 * scale (B,1), kp (B,63), raw linear outputs.
 *
 *   downsample_layers.0  conv4x4 s4 + LayerNorm(channels_first)  (B,C0,H/4,W/4)
 *   stages.0             d0 x Block(C0)
 *   downsample_layers.s  LayerNorm(channels_first) + conv2x2 s2  (B,Cs,.,.)  s = 1..3
 *   stages.s             ds x Block(Cs)
 *   norm                 LayerNorm(mean over H,W)                (B,C3)
 *   fc_*                 Linear heads
 *
 * Block(C): dwconv7x7 -> NHWC -> LayerNorm -> Linear C->4C -> GELU -> GRN
 * -> Linear 4C->C -> NCHW -> + input. Depths, widths and head sizes come from
 * the checkpoint (stages.{s}.{j} present, weight shapes).
 *
 * Storage: the backbone's activations and weights in be->act_dtype (GRN's
 * norms float32); the image may be float32 or that dtype (converted once on
 * entry). The pooled features, the final LayerNorm and the seven heads stay
 * float32 (they produce the pose / keypoint parameters); outputs are float32.
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "models/models.h"
#include "nn/blocks.h"
#include "nn/weights.h"

#define ME_STAGES 4
#define ME_MAX_DEPTH 64
#define ME_HEADS 7
#define ME_LN_EPS 1e-6f
#define ME_GRN_EPS 1e-6f

/* ConvNeXt-V2 Block, stages.{s}.{j}.* */
typedef struct MeBlock {
    DittoTensor dw_w;    /* dwconv.weight (C,1,7,7) */
    DittoTensor dw_b;    /* dwconv.bias (C) */
    DittoTensor ln_w;    /* norm.weight (C) */
    DittoTensor ln_b;    /* norm.bias (C) */
    DittoTensor pw1_w;   /* pwconv1.weight (4C,C) */
    DittoTensor pw1_b;   /* pwconv1.bias (4C) */
    DittoTensor gamma;   /* grn.gamma (1,1,1,4C), viewed as (4C) */
    DittoTensor beta;    /* grn.beta (1,1,1,4C), viewed as (4C) */
    DittoTensor pw2_w;   /* pwconv2.weight (C,4C) */
    DittoTensor pw2_b;   /* pwconv2.bias (C) */
} MeBlock;

/* downsample_layers.{s}: stem (conv then LN) for s = 0, LN then conv for s > 0 */
typedef struct MeDown {
    DittoTensor conv_w;  /* downsample_layers.0.0.weight (C0,3,4,4) | downsample_layers.{s}.1.weight (Cs,Cs-1,2,2) */
    DittoTensor conv_b;  /* downsample_layers.0.0.bias | downsample_layers.{s}.1.bias (Cs) */
    DittoTensor ln_w;    /* downsample_layers.0.1.weight (C0) | downsample_layers.{s}.0.weight (Cs-1) */
    DittoTensor ln_b;    /* downsample_layers.0.1.bias | downsample_layers.{s}.0.bias */
} MeDown;

/* heads in DittoMotionInfo order */
static const char *const head_names[ME_HEADS] = { "pitch", "yaw", "roll", "t", "exp", "scale", "kp" };

struct DittoMotionExtractor {
    DittoBackend *be;
    DittoWeights weights;
    DittoDType act;                   /* backbone activation and weight storage (be->act_dtype at load) */
    /* hyper-parameters read from the checkpoint */
    int64_t c_in;                     /* in_chans (3) */
    int64_t dims[ME_STAGES];          /* (96, 192, 384, 768) */
    int64_t hidden[ME_STAGES];        /* pwconv1 width (4 * dims) */
    int depths[ME_STAGES];            /* (3, 3, 9, 3) */
    int64_t head_dims[ME_HEADS];      /* (66, 66, 66, 3, 63, 1, 63) */
    /* parameters */
    MeDown down[ME_STAGES];           /* detector.downsample_layers.{s}.* */
    MeBlock *blocks[ME_STAGES];       /* detector.stages.{s}.{j}.* */
    DittoTensor norm_w, norm_b;       /* detector.norm.weight, detector.norm.bias (C3) */
    DittoTensor head_w[ME_HEADS];     /* detector.fc_{name}.weight (n, C3) */
    DittoTensor head_b[ME_HEADS];     /* detector.fc_{name}.bias (n) */
};

static void load_block(DittoLoader *l, MeBlock *b, int64_t c, int64_t h, int s, int j)
{
    ditto_loader_get(l, &b->dw_w, DITTO_SHAPE(c, 1, 7, 7), "stages.%d.%d.dwconv.weight", s, j);
    ditto_loader_get(l, &b->dw_b, DITTO_SHAPE(c), "stages.%d.%d.dwconv.bias", s, j);
    ditto_loader_get(l, &b->ln_w, DITTO_SHAPE(c), "stages.%d.%d.norm.weight", s, j);
    ditto_loader_get(l, &b->ln_b, DITTO_SHAPE(c), "stages.%d.%d.norm.bias", s, j);
    ditto_loader_get(l, &b->pw1_w, DITTO_SHAPE(h, c), "stages.%d.%d.pwconv1.weight", s, j);
    ditto_loader_get(l, &b->pw1_b, DITTO_SHAPE(h), "stages.%d.%d.pwconv1.bias", s, j);
    ditto_loader_get(l, &b->gamma, DITTO_SHAPE(1, 1, 1, h), "stages.%d.%d.grn.gamma", s, j);
    ditto_loader_get(l, &b->beta, DITTO_SHAPE(1, 1, 1, h), "stages.%d.%d.grn.beta", s, j);
    ditto_loader_get(l, &b->pw2_w, DITTO_SHAPE(c, h), "stages.%d.%d.pwconv2.weight", s, j);
    ditto_loader_get(l, &b->pw2_b, DITTO_SHAPE(c), "stages.%d.%d.pwconv2.bias", s, j);
    if (!l->err) {
        /* (1,1,1,4C) -> (4C), to broadcast over (B, H*W, 4C) */
        ditto_tensor_reshape(&b->gamma, 1, &h, &b->gamma);
        ditto_tensor_reshape(&b->beta, 1, &h, &b->beta);
    }
}

int ditto_motion_extractor_load(DittoMotionExtractor **out, DittoBackend *be, DittoCatalog *cat)
{
    if (!out || !be || !cat)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DittoMotionExtractor *m = ditto_calloc(1, sizeof *m);
    if (!m)
        return DITTO_ERR_NOMEM;
    m->be = be;
    m->act = be->act_dtype;
    DittoLoader l;
    ditto_loader_init(&l, cat, be, &m->weights, "motion extractor", "detector.");
    l.dtype = m->act;

    /* sizes from the checkpoint */
    m->c_in = ditto_loader_dim(&l, 4, 1, "%s", "downsample_layers.0.0.weight");
    for (int s = 0; s < ME_STAGES; s++) {
        char key[64];
        snprintf(key, sizeof key, "downsample_layers.%d.%d.weight", s, s ? 1 : 0);
        m->dims[s] = ditto_loader_dim(&l, 4, 0, "%s", key);
        snprintf(key, sizeof key, "stages.%d.0.pwconv1.weight", s);
        m->hidden[s] = ditto_loader_dim(&l, 2, 0, "%s", key);
        while (!l.err && ditto_loader_peek(&l, "stages.%d.%d.dwconv.weight", s, m->depths[s])) {
            if (m->depths[s] == ME_MAX_DEPTH) {
                ditto_loader_fail(&l, DITTO_ERR_KEY, "stage %d has more than %d blocks", s, ME_MAX_DEPTH);
                break;
            }
            m->depths[s]++;
        }
    }
    for (int k = 0; k < ME_HEADS; k++) {
        char key[64];
        snprintf(key, sizeof key, "fc_%s.weight", head_names[k]);
        m->head_dims[k] = ditto_loader_dim(&l, 2, 0, "%s", key);
    }
    for (int s = 0; s < ME_STAGES && !l.err; s++) {
        m->blocks[s] = ditto_calloc((size_t)m->depths[s], sizeof(MeBlock));
        if (!m->blocks[s])
            l.err = DITTO_ERR_NOMEM;
    }

    /* parameters, in state_dict order */
    int64_t c = m->c_in;
    for (int s = 0; s < ME_STAGES; s++) {
        MeDown *d = &m->down[s];
        if (s == 0) {
            ditto_loader_get(&l, &d->conv_w, DITTO_SHAPE(m->dims[0], c, 4, 4), "downsample_layers.0.0.weight");
            ditto_loader_get(&l, &d->conv_b, DITTO_SHAPE(m->dims[0]), "downsample_layers.0.0.bias");
            ditto_loader_get(&l, &d->ln_w, DITTO_SHAPE(m->dims[0]), "downsample_layers.0.1.weight");
            ditto_loader_get(&l, &d->ln_b, DITTO_SHAPE(m->dims[0]), "downsample_layers.0.1.bias");
        } else {
            ditto_loader_get(&l, &d->ln_w, DITTO_SHAPE(c), "downsample_layers.%d.0.weight", s);
            ditto_loader_get(&l, &d->ln_b, DITTO_SHAPE(c), "downsample_layers.%d.0.bias", s);
            ditto_loader_get(&l, &d->conv_w, DITTO_SHAPE(m->dims[s], c, 2, 2), "downsample_layers.%d.1.weight", s);
            ditto_loader_get(&l, &d->conv_b, DITTO_SHAPE(m->dims[s]), "downsample_layers.%d.1.bias", s);
        }
        c = m->dims[s];
    }
    for (int s = 0; s < ME_STAGES; s++)
        for (int j = 0; j < m->depths[s] && !l.err; j++)
            load_block(&l, &m->blocks[s][j], m->dims[s], m->hidden[s], s, j);
    l.dtype = DITTO_F32;   /* final norm and heads: float32 (pose and keypoint parameters) */
    ditto_loader_get(&l, &m->norm_w, DITTO_SHAPE(c), "norm.weight");
    ditto_loader_get(&l, &m->norm_b, DITTO_SHAPE(c), "norm.bias");
    for (int k = 0; k < ME_HEADS; k++) {
        ditto_loader_get(&l, &m->head_w[k], DITTO_SHAPE(m->head_dims[k], c), "fc_%s.weight", head_names[k]);
        ditto_loader_get(&l, &m->head_b[k], DITTO_SHAPE(m->head_dims[k]), "fc_%s.bias", head_names[k]);
    }

    int rc = ditto_loader_finish(&l);
    if (rc < 0) {
        ditto_motion_extractor_free(&m);
        return rc;
    }
    *out = m;
    return 0;
}

void ditto_motion_extractor_free(DittoMotionExtractor **m)
{
    if (!m || !*m)
        return;
    for (int s = 0; s < ME_STAGES; s++)
        ditto_free((*m)->blocks[s]);
    ditto_weights_free(&(*m)->weights);
    ditto_free(*m);
    *m = NULL;
}

void ditto_motion_extractor_dims(const DittoMotionExtractor *m, int64_t dims[7])
{
    for (int k = 0; k < ME_HEADS; k++)
        dims[k] = m->head_dims[k];
}

static const DittoConvParams conv_stem = { .stride = { 4, 4 } };
static const DittoConvParams conv_down = { .stride = { 2, 2 } };

/* GRN over x (B,H,W,K) -> y: G = ||x||_2 over (H,W); N = G / (mean_K G + eps); y = gamma (x N) + beta + x */
static int grn(DittoBackend *be, DittoArena *ws, const MeBlock *p, const DittoTensor *x, DittoTensor *y)
{
    const int64_t B = x->shape[0], HW = x->shape[1] * x->shape[2], K = x->shape[3];
    DittoTensor xv, yv, g, gm;
    DITTO_TRY(ditto_tensor_reshape(x, 3, (int64_t[]){ B, HW, K }, &xv));              /* (B,HW,K) */
    DITTO_TRY(ditto_tensor_reshape(y, 3, (int64_t[]){ B, HW, K }, &yv));
    DITTO_TRY(ditto_arena_tensor(ws, DITTO_F32, 3, (int64_t[]){ B, 1, K }, &g));   /* norms: float32 */
    DITTO_TRY(ditto_arena_tensor(ws, DITTO_F32, 3, (int64_t[]){ B, 1, 1 }, &gm));
    DITTO_TRY(ditto_op_reduce(be, DITTO_REDUCE_L2, 1, &xv, &g));                      /* Gx = torch.norm(x, p=2, dim=(1,2)): (B,1,K) */
    DITTO_TRY(ditto_op_reduce(be, DITTO_REDUCE_MEAN, 2, &g, &gm));                    /* Gx.mean(dim=-1): (B,1,1) */
    DITTO_TRY(ditto_op_unary(be, &(DittoUnaryParams){ DITTO_UNARY_AFFINE, 1.0f, ME_GRN_EPS }, &gm, &gm)); /* + 1e-6 */
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_DIV, &g, &gm, &g));                    /* Nx = Gx / (...): (B,1,K) */
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_MUL, &xv, &g, &yv));                   /* x * Nx: (B,HW,K) */
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_MUL, &yv, &p->gamma, &yv));            /* gamma * (x * Nx) */
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_ADD, &yv, &p->beta, &yv));             /* + beta */
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_ADD, &yv, &xv, &yv));                  /* + x */
    return 0;
}

/* Block(C): x (B,C,H,W) -> y (B,C,H,W) */
static int block(DittoBackend *be, DittoArena *ws, const MeBlock *p, const DittoTensor *x, DittoTensor *y)
{
    DittoArenaMark mark = ditto_arena_mark(ws);
    const DittoDType dt = y->dtype;
    const int64_t B = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], K = p->pw1_w.shape[0];
    const DittoConvParams dw = { .pad_begin = { 3, 3 }, .pad_end = { 3, 3 }, .groups = (int)C };
    DittoTensor t, tp, u, un, h, g, v, vp;
    DITTO_TRY(ditto_arena_tensor(ws, dt, 4, x->shape, &t));
    DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, H, W, C }, &u));
    DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, H, W, C }, &un));
    DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, H, W, K }, &h));
    DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, H, W, K }, &g));
    DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, H, W, C }, &v));
    DITTO_TRY(ditto_op_conv(be, &dw, x, &p->dw_w, &p->dw_b, &t));                  /* x = self.dwconv(x): (B,C,H,W) */
    DITTO_TRY(ditto_tensor_permute(&t, (int[]){ 0, 2, 3, 1 }, &tp));
    DITTO_TRY(ditto_op_copy(be, &tp, &u));                                          /* x.permute(0, 2, 3, 1): (B,H,W,C) */
    DITTO_TRY(ditto_op_layer_norm(be, ME_LN_EPS, false, &u, &p->ln_w, &p->ln_b, &un)); /* self.norm(x) */
    DITTO_TRY(ditto_op_linear(be, &un, &p->pw1_w, &p->pw1_b, &h));                     /* self.pwconv1(x): (B,H,W,4C) */
    DITTO_TRY(ditto_op_act(be, DITTO_UNARY_GELU, 0, &h, &h));                       /* self.act(x) */
    DITTO_TRY(grn(be, ws, p, &h, &g));                                              /* self.grn(x) */
    DITTO_TRY(ditto_op_linear(be, &g, &p->pw2_w, &p->pw2_b, &v));                      /* self.pwconv2(x): (B,H,W,C) */
    DITTO_TRY(ditto_tensor_permute(&v, (int[]){ 0, 3, 1, 2 }, &vp));                /* x.permute(0, 3, 1, 2): (B,C,H,W) */
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_ADD, x, &vp, y));                    /* input + drop_path(x) */
    ditto_arena_release(ws, mark);
    return 0;
}

static int check_out(DittoBackend *be, const char *name, const DittoTensor *t, int64_t B, int64_t n)
{
    if (t->ndim == 2 && t->shape[0] == B && t->shape[1] == n) {
        if (t->dtype != DITTO_F32)
            return ditto_fail(&be->log, DITTO_ERR_INVAL, "motion extractor: output %s has dtype %s, expected float32", name,
                              ditto_dtype_name(t->dtype));
        return 0;
    }
    char have[DITTO_SHAPE_STR_MAX];
    return ditto_fail(&be->log, DITTO_ERR_SHAPE, "motion extractor: output %s has shape %s, expected (%lld,%lld)", name,
                      ditto_shape_str(t->shape, t->ndim, have, sizeof have), (long long)B, (long long)n);
}

static int forward(DittoMotionExtractor *m, DittoArena *ws, const DittoTensor *image, DittoMotionInfo *info, const DittoTap *tap)
{
    DittoBackend *be = m->be;
    const DittoDType dt = m->act;
    const int64_t B = image->shape[0];
    int64_t h = image->shape[2] / 4, w = image->shape[3] / 4;
    DittoTensor x, t, img;
    DITTO_TRY(ditto_nn_as_dtype(be, ws, image, dt, &img));                                     /* the stem conv takes the act dtype */

    /* forward_features: for i in range(4): x = self.downsample_layers[i](x); x = self.stages[i](x) */
    for (int s = 0; s < ME_STAGES; s++) {
        const MeDown *d = &m->down[s];
        const int64_t c = m->dims[s];
        if (s == 0) {
            DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, c, h, w }, &t));
            DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, c, h, w }, &x));
            DITTO_TRY(ditto_op_conv(be, &conv_stem, &img, &d->conv_w, &d->conv_b, &t));        /* conv4x4 s4: (B,C0,H/4,W/4) */
            DITTO_TRY(ditto_op_layer_norm(be, ME_LN_EPS, true, &t, &d->ln_w, &d->ln_b, &x));    /* LayerNorm channels_first */
        } else {
            DITTO_TRY(ditto_arena_tensor(ws, dt, 4, x.shape, &t));
            DITTO_TRY(ditto_op_layer_norm(be, ME_LN_EPS, true, &x, &d->ln_w, &d->ln_b, &t));    /* LayerNorm channels_first */
            h /= 2;
            w /= 2;
            DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, c, h, w }, &x));
            DITTO_TRY(ditto_op_conv(be, &conv_down, &t, &d->conv_w, &d->conv_b, &x));          /* conv2x2 s2: (B,Cs,h/2,w/2) */
        }
        if (m->depths[s] > 0) {
            DittoTensor y[2];
            DITTO_TRY(ditto_arena_tensor(ws, dt, 4, x.shape, &y[0]));
            DITTO_TRY(ditto_arena_tensor(ws, dt, 4, x.shape, &y[1]));
            for (int j = 0; j < m->depths[s]; j++) {
                DITTO_TRY(block(be, ws, &m->blocks[s][j], &x, &y[j & 1]));                  /* stages[s][j]: (B,Cs,h,w) */
                x = y[j & 1];
            }
        }
    }

    /* self.norm(x.mean([-2, -1])) */
    const int64_t C = m->dims[ME_STAGES - 1];
    DittoTensor xv, pooled, pv, feat;
    DITTO_TRY(ditto_tensor_reshape(&x, 3, (int64_t[]){ B, C, h * w }, &xv));           /* (B,C,h*w) */
    DITTO_TRY(ditto_arena_tensor(ws, DITTO_F32, 3, (int64_t[]){ B, C, 1 }, &pooled));
    DITTO_TRY(ditto_op_reduce(be, DITTO_REDUCE_MEAN, 2, &xv, &pooled));               /* (B,C,1), float32 */
    DITTO_TRY(ditto_tensor_reshape(&pooled, 2, (int64_t[]){ B, C }, &pv));            /* (B,C) */
    DITTO_TRY(ditto_arena_tensor(ws, DITTO_F32, 2, (int64_t[]){ B, C }, &feat));
    DITTO_TRY(ditto_op_layer_norm(be, ME_LN_EPS, false, &pv, &m->norm_w, &m->norm_b, &feat)); /* (B,C) */
    ditto_tap(tap, "features", &feat);

    /* heads: pitch, yaw, roll, t, exp, scale, kp = self.fc_*(x) */
    DittoTensor *outs[ME_HEADS] = { &info->pitch, &info->yaw, &info->roll, &info->t, &info->exp, &info->scale, &info->kp };
    for (int k = 0; k < ME_HEADS; k++)
        DITTO_TRY(ditto_op_linear(be, &feat, &m->head_w[k], &m->head_b[k], outs[k]));     /* (B,n_k) */
    return 0;
}

int ditto_motion_extractor_forward(DittoMotionExtractor *m, DittoArena *ws, const DittoTensor *image, DittoMotionInfo *info, const DittoTap *tap)
{
    if (!m || !ws || !image || !info)
        return DITTO_ERR_INVAL;
    int64_t h = image->ndim == 4 ? image->shape[2] / 4 : 0, w = image->ndim == 4 ? image->shape[3] / 4 : 0;
    for (int s = 1; s < ME_STAGES; s++) {
        h /= 2;
        w /= 2;
    }
    if (image->ndim != 4 || image->shape[0] < 1 || image->shape[1] != m->c_in || h < 1 || w < 1) {
        char have[DITTO_SHAPE_STR_MAX];
        return ditto_fail(&m->be->log, DITTO_ERR_SHAPE, "motion extractor: image %s must be (B,%lld,H,W) with H, W >= 32",
                          ditto_shape_str(image->shape, image->ndim, have, sizeof have), (long long)m->c_in);
    }
    const DittoTensor *outs[ME_HEADS] = { &info->pitch, &info->yaw, &info->roll, &info->t, &info->exp, &info->scale, &info->kp };
    for (int k = 0; k < ME_HEADS; k++)
        DITTO_TRY(check_out(m->be, head_names[k], outs[k], image->shape[0], m->head_dims[k]));
    DITTO_TRY(ditto_nn_check_float(m->be, "motion extractor", "image", image, m->act));
    DittoArenaMark mark = ditto_arena_mark(ws);
    int rc = forward(m, ws, image, info, tap);
    ditto_arena_release(ws, mark);
    return rc;
}
