/*
 * AppearanceFeatureExtractor (F), ditto-architecture.md 5.2:
 * image (B,3,H,W) in [0,1] -> f_s (B, C, D, H/2^n, W/2^n).
 *
 *   first        conv3x3 p1 + BN + ReLU                     (B,C0,H,W)
 *   down_blocks  n x [conv3x3 p1 + BN + ReLU + AvgPool2d(2)] (B,Cn,H/2^n,W/2^n)
 *   second       conv1x1                                    (B,C*D,h,w)
 *   view         channel c*D+d -> (c, d)                    (B,C,D,h,w)
 *   resblocks_3d r x pre-activation ResBlock3d(C)           (B,C,D,h,w)
 *
 * Every width comes from the checkpoint: C0 from first.conv, n and the Ci
 * from down_blocks.{i}.conv, C*D from second, C from the first ResBlock3d
 * (so D = C*D / C), r from the 3dr{i} keys present.
 *
 * Storage: activations and weights in be->act_dtype (BatchNorm running
 * statistics float32). The image may be float32 or that dtype (converted
 * once on entry); f_s may be float32 or that dtype (the warp network takes it
 * in the act dtype).
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "models/models.h"
#include "nn/blocks.h"
#include "nn/weights.h"

#define APP_MAX_DOWN 8
#define APP_MAX_RES 32

/* pre-activation ResBlock3d(C): x + conv2(relu(norm2(conv1(relu(norm1(x)))))) */
typedef struct AppResBlock {
    DittoBatchNorm norm1; /* resblocks_3d.3dr{i}.norm1.* (C) */
    DittoTensor conv1_w;  /* resblocks_3d.3dr{i}.conv1.weight (C,C,3,3,3) */
    DittoTensor conv1_b;  /* resblocks_3d.3dr{i}.conv1.bias (C) */
    DittoBatchNorm norm2; /* resblocks_3d.3dr{i}.norm2.* (C) */
    DittoTensor conv2_w;  /* resblocks_3d.3dr{i}.conv2.weight (C,C,3,3,3) */
    DittoTensor conv2_b;  /* resblocks_3d.3dr{i}.conv2.bias (C) */
} AppResBlock;

struct DittoAppearance {
    DittoBackend *be;
    DittoWeights weights;
    DittoDType act;                 /* activation and weight storage (be->act_dtype at load) */
    /* hyper-parameters read from the checkpoint */
    int64_t c_in;                   /* image channels (3) */
    int64_t c_first;                /* block_expansion (64) */
    int n_down;                     /* num_down_blocks (2) */
    int64_t c_down[APP_MAX_DOWN];   /* down block i output channels (128, 256) */
    int64_t c_second;               /* max_features = C*D (512) */
    int64_t reshape_c, reshape_d;   /* C (32), D (16) */
    int n_res;                      /* num_resblocks (6) */
    /* parameters */
    DittoConvBn first;              /* first.conv.*, first.norm.*: conv3x3 + BatchNorm of SameBlock2d (Co,Ci,3,3) */
    DittoConvBn down[APP_MAX_DOWN]; /* down_blocks.{i}.conv.*, down_blocks.{i}.norm.*: of DownBlock2d */
    DittoTensor second_w;           /* second.weight (C*D, Cn, 1, 1) */
    DittoTensor second_b;           /* second.bias (C*D) */
    AppResBlock res[APP_MAX_RES];   /* resblocks_3d.3dr{i}.* */
};

static void load_resblock(DittoLoader *l, AppResBlock *r, int64_t c, int i)
{
    ditto_loader_get_bn(l, &r->norm1, c, "resblocks_3d.3dr%d.norm1", i);
    ditto_loader_get(l, &r->conv1_w, DITTO_SHAPE(c, c, 3, 3, 3), "resblocks_3d.3dr%d.conv1.weight", i);
    ditto_loader_get(l, &r->conv1_b, DITTO_SHAPE(c), "resblocks_3d.3dr%d.conv1.bias", i);
    ditto_loader_get_bn(l, &r->norm2, c, "resblocks_3d.3dr%d.norm2", i);
    ditto_loader_get(l, &r->conv2_w, DITTO_SHAPE(c, c, 3, 3, 3), "resblocks_3d.3dr%d.conv2.weight", i);
    ditto_loader_get(l, &r->conv2_b, DITTO_SHAPE(c), "resblocks_3d.3dr%d.conv2.bias", i);
}

int ditto_appearance_load(DittoAppearance **out, DittoBackend *be, DittoCatalog *cat)
{
    if (!out || !be || !cat)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DittoAppearance *m = ditto_calloc(1, sizeof *m);
    if (!m)
        return DITTO_ERR_NOMEM;
    m->be = be;
    m->act = be->act_dtype;
    DittoLoader l;
    ditto_loader_init(&l, cat, be, &m->weights, "appearance feature extractor", "");
    l.dtype = m->act;

    /* sizes from the checkpoint */
    m->c_first = ditto_loader_dim(&l, 4, 0, "%s", "first.conv.weight");
    m->c_in = ditto_loader_dim(&l, 4, 1, "%s", "first.conv.weight");
    while (!l.err && ditto_loader_peek(&l, "down_blocks.%d.conv.weight", m->n_down)) {
        if (m->n_down == APP_MAX_DOWN) {
            ditto_loader_fail(&l, DITTO_ERR_KEY, "more than %d down blocks", APP_MAX_DOWN);
            break;
        }
        char key[64];
        snprintf(key, sizeof key, "down_blocks.%d.conv.weight", m->n_down);
        m->c_down[m->n_down++] = ditto_loader_dim(&l, 4, 0, "%s", key);
    }
    m->c_second = ditto_loader_dim(&l, 4, 0, "%s", "second.weight");
    while (!l.err && ditto_loader_peek(&l, "resblocks_3d.3dr%d.conv1.weight", m->n_res)) {
        if (m->n_res == APP_MAX_RES) {
            ditto_loader_fail(&l, DITTO_ERR_KEY, "more than %d 3-D resblocks", APP_MAX_RES);
            break;
        }
        m->n_res++;
    }
    /* the view (B, C*D, h, w) -> (B, C, D, h, w) takes C from the resblocks */
    m->reshape_c = ditto_loader_dim(&l, 5, 0, "%s", "resblocks_3d.3dr0.conv1.weight");
    if (!l.err && m->c_second % m->reshape_c) {
        ditto_loader_fail(&l, DITTO_ERR_KEY, "second.weight has %lld output channels, not a multiple of the %lld resblock channels", (long long)m->c_second, (long long)m->reshape_c);
    }
    if (!l.err)
        m->reshape_d = m->c_second / m->reshape_c;

    /* parameters, in state_dict order */
    ditto_nn_load_conv_bn(&l, &m->first, 2, m->c_first, m->c_in, "first");
    int64_t c = m->c_first;
    for (int i = 0; i < m->n_down; i++) {
        char k[32];
        snprintf(k, sizeof k, "down_blocks.%d", i);
        ditto_nn_load_conv_bn(&l, &m->down[i], 2, m->c_down[i], c, k);
        c = m->c_down[i];
    }
    ditto_loader_get(&l, &m->second_w, DITTO_SHAPE(m->c_second, c, 1, 1), "second.weight");
    ditto_loader_get(&l, &m->second_b, DITTO_SHAPE(m->c_second), "second.bias");
    for (int i = 0; i < m->n_res; i++)
        load_resblock(&l, &m->res[i], m->reshape_c, i);

    int rc = ditto_loader_finish(&l);
    if (rc < 0) {
        ditto_appearance_free(&m);
        return rc;
    }
    *out = m;
    return 0;
}

void ditto_appearance_free(DittoAppearance **m)
{
    if (!m || !*m)
        return;
    ditto_weights_free(&(*m)->weights);
    ditto_free(*m);
    *m = NULL;
}

int ditto_appearance_out_shape(const DittoAppearance *m, const DittoTensor *image, int64_t shape[5])
{
    if (!m || !image || !shape)
        return DITTO_ERR_INVAL;
    if (image->ndim != 4 || image->shape[0] < 1 || image->shape[1] != m->c_in)
        return ditto_fail(&m->be->log, DITTO_ERR_SHAPE, "appearance feature extractor: image %s must be (B,%lld,H,W)",
                          ditto_shape_str(image->shape, image->ndim, (char[DITTO_SHAPE_STR_MAX]){ 0 }, DITTO_SHAPE_STR_MAX), (long long)m->c_in);
    int64_t h = image->shape[2], w = image->shape[3];
    for (int i = 0; i < m->n_down; i++) {
        h /= 2;
        w /= 2;
    }
    if (h < 1 || w < 1)
        return ditto_fail(&m->be->log, DITTO_ERR_SHAPE, "appearance feature extractor: image %lldx%lld is too small for %d down blocks",
                          (long long)image->shape[2], (long long)image->shape[3], m->n_down);
    shape[0] = image->shape[0];
    shape[1] = m->reshape_c;
    shape[2] = m->reshape_d;
    shape[3] = h;
    shape[4] = w;
    return 0;
}

static const DittoConvParams conv3_pad1 = { .pad_begin = { 1, 1, 1 }, .pad_end = { 1, 1, 1 } };
static const DittoConvParams conv1_pad0 = { 0 };
static const DittoPoolParams avg_pool2 = { .kind = DITTO_POOL_AVG, .kernel = { 2, 2 } };

/* SameBlock2d: x (B,Ci,H,W) -> y (B,Co,H,W) = relu(norm(conv(x))) */
static int same_block(DittoBackend *be, DittoArena *ws, const DittoConvBn *p, const DittoTensor *x, DittoTensor *y)
{
    return ditto_nn_conv_bn_act(be, ws, &conv3_pad1, p, DITTO_UNARY_RELU, 0, x, y);   /* (B,Co,H,W) */
}

/* DownBlock2d: x (B,Ci,H,W) -> y (B,Co,H/2,W/2) = avgpool2(relu(norm(conv(x)))) */
static int down_block(DittoBackend *be, DittoArena *ws, const DittoConvBn *p, const DittoTensor *x, DittoTensor *y)
{
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor t;
    DITTO_TRY(ditto_arena_tensor(ws, y->dtype, 4, (int64_t[]){ x->shape[0], y->shape[1], x->shape[2], x->shape[3] }, &t));
    DITTO_TRY(same_block(be, ws, p, x, &t));               /* (B,Co,H,W) */
    DITTO_TRY(ditto_op_pool(be, &avg_pool2, &t, y));       /* (B,Co,H/2,W/2) */
    ditto_arena_release(ws, mark);
    return 0;
}

/* ResBlock3d: x (B,C,D,H,W) -> y = x + conv2(relu(norm2(conv1(relu(norm1(x)))))); scratch in x's dtype, y float32 or that */
static int res_block(DittoBackend *be, DittoArena *ws, const AppResBlock *r, const DittoTensor *x, DittoTensor *y)
{
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor a, b;
    DITTO_TRY(ditto_arena_tensor(ws, x->dtype, 5, x->shape, &a));
    DITTO_TRY(ditto_arena_tensor(ws, x->dtype, 5, x->shape, &b));
    DITTO_TRY(ditto_nn_batch_norm(be, &r->norm1, x, &a));                       /* (B,C,D,H,W) */
    DITTO_TRY(ditto_op_act(be, DITTO_UNARY_RELU, 0, &a, &a));
    DITTO_TRY(ditto_op_conv(be, &conv3_pad1, &a, &r->conv1_w, &r->conv1_b, &b)); /* (B,C,D,H,W) */
    DITTO_TRY(ditto_nn_batch_norm(be, &r->norm2, &b, &a));
    DITTO_TRY(ditto_op_act(be, DITTO_UNARY_RELU, 0, &a, &a));
    DITTO_TRY(ditto_op_conv(be, &conv3_pad1, &a, &r->conv2_w, &r->conv2_b, &b));
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_ADD, &b, x, y));                 /* out += x */
    ditto_arena_release(ws, mark);
    return 0;
}

static int forward(DittoAppearance *m, DittoArena *ws, const DittoTensor *image, DittoTensor *f_s, const DittoTap *tap)
{
    DittoBackend *be = m->be;
    const DittoDType dt = m->act;
    const int64_t B = image->shape[0];
    int64_t h = image->shape[2], w = image->shape[3];

    /* out = self.first(x) */
    DittoTensor img, x;
    DITTO_TRY(ditto_nn_as_dtype(be, ws, image, dt, &img));             /* the convs take the act dtype */
    DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, m->c_first, h, w }, &x));
    DITTO_TRY(same_block(be, ws, &m->first, &img, &x));               /* (B,C0,H,W) */
    ditto_tap(tap, "first_out", &x);

    /* for down_block in self.down_blocks: out = down_block(out) */
    for (int i = 0; i < m->n_down; i++) {
        h /= 2;
        w /= 2;
        DittoTensor y;
        DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, m->c_down[i], h, w }, &y));
        DITTO_TRY(down_block(be, ws, &m->down[i], &x, &y));           /* (B,Ci,H/2^i,W/2^i) */
        x = y;
    }
    ditto_tap(tap, "down_out", &x);

    /* out = self.second(out) */
    DittoTensor s;
    DITTO_TRY(ditto_arena_tensor(ws, dt, 4, (int64_t[]){ B, m->c_second, h, w }, &s));
    DITTO_TRY(ditto_op_conv(be, &conv1_pad0, &x, &m->second_w, &m->second_b, &s));  /* (B,C*D,h,w) */
    ditto_tap(tap, "second_out", &s);

    /* f_s = out.view(bs, self.reshape_channel, self.reshape_depth, h, w) */
    DittoTensor v;
    DITTO_TRY(ditto_tensor_reshape(&s, 5, (int64_t[]){ B, m->reshape_c, m->reshape_d, h, w }, &v));  /* (B,C,D,h,w) */

    /* f_s = self.resblocks_3d(f_s), ping-ponging two buffers, the last block writing f_s */
    DittoTensor buf[2];
    for (int k = 0; k < 2 && m->n_res > 1; k++)
        DITTO_TRY(ditto_arena_tensor(ws, dt, 5, v.shape, &buf[k]));
    for (int i = 0; i < m->n_res; i++) {
        DittoTensor *y = i == m->n_res - 1 ? f_s : &buf[i & 1];
        DITTO_TRY(res_block(be, ws, &m->res[i], &v, y));              /* (B,C,D,h,w) */
        v = *y;
    }
    return 0;
}

int ditto_appearance_forward(DittoAppearance *m, DittoArena *ws, const DittoTensor *image, DittoTensor *f_s, const DittoTap *tap)
{
    if (!m || !ws || !image || !f_s)
        return DITTO_ERR_INVAL;
    int64_t shape[5];
    DITTO_TRY(ditto_appearance_out_shape(m, image, shape));
    if (f_s->ndim != 5 || memcmp(f_s->shape, shape, sizeof shape)) {
        char want[DITTO_SHAPE_STR_MAX], have[DITTO_SHAPE_STR_MAX];
        return ditto_fail(&m->be->log, DITTO_ERR_SHAPE, "appearance feature extractor: f_s has shape %s, expected %s",
                          ditto_shape_str(f_s->shape, f_s->ndim, have, sizeof have), ditto_shape_str(shape, 5, want, sizeof want));
    }
    DITTO_TRY(ditto_nn_check_float(m->be, "appearance feature extractor", "image", image, m->act));
    DITTO_TRY(ditto_nn_check_float(m->be, "appearance feature extractor", "f_s", f_s, m->act));
    DittoArenaMark mark = ditto_arena_mark(ws);
    int rc = forward(m, ws, image, f_s, tap);
    ditto_arena_release(ws, mark);
    return rc;
}
