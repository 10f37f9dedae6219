/*
 * StitchingNetwork (S), ditto-architecture.md 5.6: the 'retarget_shoulder'
 * MLP of stitch_network.pth.
 * kp_source, kp_driving (B,K,3) -> kp_driving_new (B,K,3):
 *
 *   delta = mlp(cat(kp_source.view(B,-1), kp_driving.view(B,-1)))  (B,3K+2)
 *   kp_driving_new = kp_driving + delta[:, :3K].view(B,K,3)
 *   kp_driving_new[..., :2] += delta[:, 3K:3K+2].view(B,1,2)
 *
 * mlp = Linear, ReLU, Linear, ReLU, ..., Linear (keys mlp.{0,2,4,...}); the
 * widths come from the checkpoint (126 -> 128 -> 128 -> 64 -> 65 for K = 21).
 * Upstream deletes every "module." substring of the keys before loading.
 *
 * Keypoint math: the MLP, its weights and every tensor stay float32 whatever
 * be->act_dtype (the loader's default dtype; the network is a few kFLOP).
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "models/models.h"
#include "nn/weights.h"

#define ST_MAX_LAYERS 16

struct DittoStitch {
    DittoBackend *be;
    DittoWeights weights;
    int n_layers;                      /* Linear layers (4) */
    int64_t width[ST_MAX_LAYERS + 1];  /* width[0] = 6K (126), width[n] = 3K+2 (65) */
    int64_t num_kp;                    /* K (21) */
    DittoTensor w[ST_MAX_LAYERS];      /* retarget_shoulder.mlp.{2i}.weight (width[i+1], width[i]) */
    DittoTensor b[ST_MAX_LAYERS];      /* retarget_shoulder.mlp.{2i}.bias (width[i+1]) */
};

int ditto_stitch_load(DittoStitch **out, DittoBackend *be, DittoCatalog *cat)
{
    if (!out || !be || !cat)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DittoStitch *m = ditto_calloc(1, sizeof *m);
    if (!m)
        return DITTO_ERR_NOMEM;
    m->be = be;
    DittoLoader l;
    ditto_loader_init(&l, cat, be, &m->weights, "stitching network", "retarget_shoulder.");
    l.strip_module = true;

    /* widths from the checkpoint: mlp.0, mlp.2, ... (ReLUs in between hold no parameters) */
    m->width[0] = ditto_loader_dim(&l, 2, 1, "%s", "mlp.0.weight");
    while (!l.err && ditto_loader_peek(&l, "mlp.%d.weight", 2 * m->n_layers)) {
        if (m->n_layers == ST_MAX_LAYERS) {
            ditto_loader_fail(&l, DITTO_ERR_KEY, "more than %d MLP layers", ST_MAX_LAYERS);
            break;
        }
        char key[32];
        snprintf(key, sizeof key, "mlp.%d.weight", 2 * m->n_layers);
        m->width[m->n_layers + 1] = ditto_loader_dim(&l, 2, 0, "%s", key);
        m->n_layers++;
    }
    if (!l.err) {
        /* input 2 x 3K values, output 3K + 2 */
        m->num_kp = m->width[0] / 6;
        if (m->width[0] % 6 || m->width[m->n_layers] != 3 * m->num_kp + 2)
            ditto_loader_fail(&l, DITTO_ERR_KEY, "MLP maps %lld -> %lld values, expected 6K -> 3K+2", (long long)m->width[0], (long long)m->width[m->n_layers]);
    }

    for (int i = 0; i < m->n_layers; i++) {
        ditto_loader_get(&l, &m->w[i], DITTO_SHAPE(m->width[i + 1], m->width[i]), "mlp.%d.weight", 2 * i);
        ditto_loader_get(&l, &m->b[i], DITTO_SHAPE(m->width[i + 1]), "mlp.%d.bias", 2 * i);
    }

    int rc = ditto_loader_finish(&l);
    if (rc < 0) {
        ditto_stitch_free(&m);
        return rc;
    }
    *out = m;
    return 0;
}

void ditto_stitch_free(DittoStitch **m)
{
    if (!m || !*m)
        return;
    ditto_weights_free(&(*m)->weights);
    ditto_free(*m);
    *m = NULL;
}

static int forward(DittoStitch *m, DittoArena *ws, const DittoTensor *kp_source, const DittoTensor *kp_driving, DittoTensor *kp_new, const DittoTap *tap)
{
    DittoBackend *be = m->be;
    const DittoDType dt = kp_new->dtype;
    const int64_t B = kp_source->shape[0], K = m->num_kp;

    /* feat = torch.cat([kp_source.view(bs, -1), kp_driving.view(bs, -1)], dim=1): (B,2K,3) read as (B,6K) */
    DittoTensor cat, x;
    const DittoTensor *parts[2] = { kp_source, kp_driving };
    DITTO_TRY(ditto_arena_tensor(ws, dt, 3, (int64_t[]){ B, 2 * K, 3 }, &cat));
    DITTO_TRY(ditto_op_concat(be, 1, 2, parts, &cat));                                /* (B,2K,3) */
    DITTO_TRY(ditto_tensor_reshape(&cat, 2, (int64_t[]){ B, 6 * K }, &x));            /* (B,6K) */

    /* delta = self.mlp(feat) */
    for (int i = 0; i < m->n_layers; i++) {
        DittoTensor y;
        DITTO_TRY(ditto_arena_tensor(ws, dt, 2, (int64_t[]){ B, m->width[i + 1] }, &y));
        DITTO_TRY(ditto_op_linear(be, &x, &m->w[i], &m->b[i], &y));                       /* mlp.{2i}: (B,width[i+1]) */
        if (i + 1 < m->n_layers)
            DITTO_TRY(ditto_op_act(be, DITTO_UNARY_RELU, 0, &y, &y));                  /* mlp.{2i+1} */
        x = y;
    }
    const DittoTensor delta = x;                                                       /* (B,3K+2) */
    ditto_tap(tap, "delta", &delta);

    /* delta_exp = delta[..., :3K].reshape(bs, K, 3); delta_tx_ty = delta[..., 3K:3K+2].reshape(bs, 1, 2) */
    DittoTensor s_exp, s_txy, d_exp, d_txy, d_exp3, d_txy3;
    DITTO_TRY(ditto_tensor_slice(&delta, 1, 0, 3 * K, 1, &s_exp));                    /* (B,3K) strided */
    DITTO_TRY(ditto_tensor_slice(&delta, 1, 3 * K, 3 * K + 2, 1, &s_txy));            /* (B,2) strided */
    DITTO_TRY(ditto_arena_tensor(ws, dt, 2, (int64_t[]){ B, 3 * K }, &d_exp));
    DITTO_TRY(ditto_arena_tensor(ws, dt, 2, (int64_t[]){ B, 2 }, &d_txy));
    DITTO_TRY(ditto_op_copy(be, &s_exp, &d_exp));                                     /* (B,3K) */
    DITTO_TRY(ditto_op_copy(be, &s_txy, &d_txy));                                     /* (B,2) */
    DITTO_TRY(ditto_tensor_reshape(&d_exp, 3, (int64_t[]){ B, K, 3 }, &d_exp3));      /* (B,K,3) */
    DITTO_TRY(ditto_tensor_reshape(&d_txy, 3, (int64_t[]){ B, 1, 2 }, &d_txy3));      /* (B,1,2) */

    /* kp_driving_new += delta_exp */
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_ADD, kp_driving, &d_exp3, kp_new));    /* (B,K,3) */
    /* kp_driving_new[..., :2] += delta_tx_ty */
    DittoTensor xy, xy_new;
    DITTO_TRY(ditto_tensor_slice(kp_new, 2, 0, 2, 1, &xy));                            /* (B,K,2) strided */
    DITTO_TRY(ditto_arena_tensor(ws, dt, 3, (int64_t[]){ B, K, 2 }, &xy_new));
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_ADD, &xy, &d_txy3, &xy_new));          /* (B,K,2) */
    DITTO_TRY(ditto_op_copy(be, &xy_new, &xy));                                        /* write back into x, y */
    return 0;
}

int ditto_stitch_forward(DittoStitch *m, DittoArena *ws, const DittoTensor *kp_source, const DittoTensor *kp_driving, DittoTensor *kp_new,
                         const DittoTap *tap)
{
    if (!m || !ws || !kp_source || !kp_driving || !kp_new)
        return DITTO_ERR_INVAL;
    const DittoTensor *ts[3] = { kp_source, kp_driving, kp_new };
    const char *names[3] = { "kp_source", "kp_driving", "kp_driving_new" };
    for (int i = 0; i < 3; i++) {
        const DittoTensor *t = ts[i];
        if (t->ndim != 3 || t->shape[0] != kp_source->shape[0] || t->shape[0] < 1 || t->shape[1] != m->num_kp || t->shape[2] != 3) {
            char have[DITTO_SHAPE_STR_MAX];
            return ditto_fail(&m->be->log, DITTO_ERR_SHAPE, "stitching network: %s has shape %s, expected (B,%lld,3)", names[i],
                              ditto_shape_str(t->shape, t->ndim, have, sizeof have), (long long)m->num_kp);
        }
    }
    DittoArenaMark mark = ditto_arena_mark(ws);
    int rc = forward(m, ws, kp_source, kp_driving, kp_new, tap);
    ditto_arena_release(ws, mark);
    return rc;
}
