/*
 * LMDM denoiser (MotionDecoder), ditto-architecture.md 5.7.
 *
 *   x (B,L,F), kp_cond (B,F), cond (B,L,Cc), t (B)  ->  x0 prediction (B,L,F)
 *
 *   input_projection      h = Lin(concat(x, kp_cond repeated over L))     (B,L,D)
 *   cond_projection       c = Lin(cond)                                   (B,L,D)
 *   cond_encoder.{i}      c = c + MHA(rot(LN1 c), rot(LN1 c), LN1 c)
 *                         c = c + W2 GELU(W1 LN2 c)                       (B,L,D)
 *   (dropped: c = null_cond_embed, ch = null_cond_hidden)
 *   non_attn_cond_proj.   ch = Lin(SiLU(Lin(LN(mean_L c))))               (B,D)
 *   time_mlp              th = Mish(Lin(sinusoid(t)))                     (B,4D)
 *                         tc = Lin(th) + ch (B,D), tt = Lin(th) (B,2,D)
 *   norm_cond             mem = LN(concat(c, tt))                         (B,L+2,D)
 *   seqTransDecoder.{i}   FiLM(Mish tc) around self-attn, cross-attn(mem), FFN
 *   final_layer           out = Lin(h)                                    (B,L,F)
 *
 * rot() is the interleaved-pair rotary embedding on the D input features
 * (positions 0.., memory positions 0..L+1), applied to the query/key inputs
 * before the packed in-projection, never to values.
 *
 * The conditioned and unconditioned passes share x, kp_cond and t; they run
 * as one batch of 2B through the decoder, pass-major: rows [0,B) conditioned,
 * [B,2B) unconditioned. Everything that depends only on the conditions
 * (the encoder, the pooled condition, the condition tokens' cross-attention
 * keys/values) is computed once per window by ditto_lmdm_cond_init().
 */
#include "models/lmdm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "nn/blocks.h"
#include "nn/weights.h"

#define LMDM_LN_EPS 1e-5f
#define LMDM_MAX_LAYERS 64

/* nn.MultiheadAttention (batch_first, no masks): {layer}.self_attn.* / {layer}.multihead_attn.* */
typedef struct LmdmAttn {
    DittoTensor in_w;          /* in_proj_weight (3D, D): rows W_q | W_k | W_v */
    DittoTensor in_b;          /* in_proj_bias (3D) */
    DittoTensor out_w;         /* out_proj.weight (D, D) */
    DittoTensor out_b;         /* out_proj.bias (D) */
    /* row views of in_w / in_b */
    DittoTensor wqk, bqk;      /* [0, 2D): queries and keys (same input in self-attention) */
    DittoTensor wq, bq;        /* [0, D) */
    DittoTensor wk, bk;        /* [D, 2D) */
    DittoTensor wv, bv;        /* [2D, 3D) */
} LmdmAttn;

/* cond_encoder.{i}: TransformerEncoderLayer, norm first, GELU, rotary */
typedef struct LmdmEncLayer {
    LmdmAttn attn;             /* self_attn.* */
    DittoTensor w1, b1;        /* linear1.weight (ff, D), linear1.bias (ff) */
    DittoTensor w2, b2;        /* linear2.weight (D, ff), linear2.bias (D) */
    DittoTensor ln1_w, ln1_b;  /* norm1.weight, norm1.bias (D) */
    DittoTensor ln2_w, ln2_b;  /* norm2.weight, norm2.bias (D) */
} LmdmEncLayer;

/* seqTransDecoder.stack.{i}: FiLMTransformerDecoderLayer, norm first, GELU, rotary */
typedef struct LmdmDecLayer {
    LmdmAttn self_attn;        /* self_attn.* */
    LmdmAttn cross_attn;       /* multihead_attn.* */
    DittoTensor w1, b1;        /* linear1.weight (ff, D), linear1.bias (ff) */
    DittoTensor w2, b2;        /* linear2.weight (D, ff), linear2.bias (D) */
    DittoTensor ln_w[3];       /* norm{1,2,3}.weight (D) */
    DittoTensor ln_b[3];       /* norm{1,2,3}.bias (D) */
    DittoTensor film_w[3];     /* film{1,2,3}.block.1.weight (2D, D): rows scale | shift */
    DittoTensor film_b[3];     /* film{1,2,3}.block.1.bias (2D) */
} LmdmDecLayer;

struct DittoLmdm {
    DittoBackend *be;
    DittoWeights weights;
    DittoLmdmDims dims;
    DittoTensor null_cond_embed;   /* null_cond_embed (1, L, D) */
    DittoTensor null_cond_hidden;  /* null_cond_hidden (1, D) */
    DittoTensor rot_freqs;         /* rotary.freqs (D/2); the per-layer copies are checked equal and skipped */
    DittoTensor time_w, time_b;    /* time_mlp.1.weight (4D, D), time_mlp.1.bias (4D) */
    DittoTensor tcond_w, tcond_b;  /* to_time_cond.0.weight (D, 4D), to_time_cond.0.bias (D) */
    DittoTensor ttok_w, ttok_b;    /* to_time_tokens.0.weight (2D, 4D), to_time_tokens.0.bias (2D) */
    DittoTensor normc_w, normc_b;  /* norm_cond.weight, norm_cond.bias (D) */
    DittoTensor inp_w, inp_b;      /* input_projection.weight (D, 2F), input_projection.bias (D) */
    DittoTensor condp_w, condp_b;  /* cond_projection.weight (D, Cc), cond_projection.bias (D) */
    LmdmEncLayer *enc;             /* cond_encoder.{i}.* */
    DittoTensor pool_ln_w;         /* non_attn_cond_projection.0.weight (D) (LayerNorm) */
    DittoTensor pool_ln_b;         /* non_attn_cond_projection.0.bias (D) */
    DittoTensor pool1_w, pool1_b;  /* non_attn_cond_projection.1.weight (D, D), .bias (D) */
    DittoTensor pool2_w, pool2_b;  /* non_attn_cond_projection.3.weight (D, D), .bias (D) */
    LmdmDecLayer *dec;             /* seqTransDecoder.stack.{i}.* */
    DittoTensor final_w, final_b;  /* final_layer.weight (F, D), final_layer.bias (F) */
    /* constants computed at load */
    DittoBuffer time_table_buf;
    DittoTensor time_table;        /* (T, D): [sin(t f_k), cos(t f_k)] for t = 0..T-1 */
};

void ditto_lmdm_params_default(DittoLmdmParams *p)
{
    memset(p, 0, sizeof *p);
    p->num_heads = 8;
}

const DittoLmdmDims *ditto_lmdm_dims(const DittoLmdm *m)
{
    return &m->dims;
}

DittoBackend *ditto_lmdm_backend(const DittoLmdm *m)
{
    return m->be;
}

/* ---- views (no data is touched) ---- */

/* t with a new axis of the given size and stride inserted before axis `at`. */
static DittoTensor view_insert(const DittoTensor *t, int at, int64_t size, int64_t stride)
{
    DittoTensor v = *t;
    DITTO_ASSERT(t->ndim < DITTO_MAX_DIMS && at >= 0 && at <= t->ndim);
    for (int i = t->ndim; i > at; i--) {
        v.shape[i] = t->shape[i - 1];
        v.stride[i] = t->stride[i - 1];
    }
    v.shape[at] = size;
    v.stride[at] = stride;
    v.ndim = t->ndim + 1;
    return v;
}

/* t repeated n times along a new leading axis (stride 0). */
static DittoTensor view_repeat(const DittoTensor *t, int64_t n)
{
    return view_insert(t, 0, n, 0);
}

/* (N, L, H*dh) with any strides, seen as (N, H, L, dh). */
static DittoTensor view_heads(const DittoTensor *t, int64_t heads)
{
    DittoTensor v = *t;
    int64_t dh = t->shape[2] / heads;
    v.ndim = 4;
    v.shape[0] = t->shape[0];
    v.shape[1] = heads;
    v.shape[2] = t->shape[1];
    v.shape[3] = dh;
    v.stride[0] = t->stride[0];
    v.stride[1] = dh * t->stride[2];
    v.stride[2] = t->stride[1];
    v.stride[3] = t->stride[2];
    return v;
}

static DittoTensor view_slice(const DittoTensor *t, int axis, int64_t start, int64_t end)
{
    DittoTensor v;
    int rc = ditto_tensor_slice(t, axis, start, end, 1, &v);
    DITTO_ASSERT(rc == 0);
    (void)rc;
    return v;
}

static DittoTensor view_select(const DittoTensor *t, int axis, int64_t i)
{
    DittoTensor v;
    int rc = ditto_tensor_select(t, axis, i, &v);
    DITTO_ASSERT(rc == 0);
    (void)rc;
    return v;
}

/* Reshape of a contiguous tensor. */
static DittoTensor view_reshape(const DittoTensor *t, int ndim, const int64_t *shape)
{
    DittoTensor v;
    int rc = ditto_tensor_reshape(t, ndim, shape, &v);
    DITTO_ASSERT(rc == 0);
    (void)rc;
    return v;
}

#define RESHAPE(t, ...) view_reshape(&(t), DITTO_SHAPE(__VA_ARGS__))

/* ---- loading ---- */

static void load_attn(DittoLoader *l, LmdmAttn *a, int64_t d, const char *key)
{
    ditto_loader_get(l, &a->in_w, DITTO_SHAPE(3 * d, d), "%s.in_proj_weight", key);
    ditto_loader_get(l, &a->in_b, DITTO_SHAPE(3 * d), "%s.in_proj_bias", key);
    ditto_loader_get(l, &a->out_w, DITTO_SHAPE(d, d), "%s.out_proj.weight", key);
    ditto_loader_get(l, &a->out_b, DITTO_SHAPE(d), "%s.out_proj.bias", key);
    if (l->err)
        return;
    a->wqk = view_slice(&a->in_w, 0, 0, 2 * d);
    a->bqk = view_slice(&a->in_b, 0, 0, 2 * d);
    a->wq = view_slice(&a->in_w, 0, 0, d);
    a->bq = view_slice(&a->in_b, 0, 0, d);
    a->wk = view_slice(&a->in_w, 0, d, 2 * d);
    a->bk = view_slice(&a->in_b, 0, d, 2 * d);
    a->wv = view_slice(&a->in_w, 0, 2 * d, 3 * d);
    a->bv = view_slice(&a->in_b, 0, 2 * d, 3 * d);
}

static void load_enc_layer(DittoLoader *l, LmdmEncLayer *e, int64_t d, int64_t ff, int i)
{
    char key[64];
    snprintf(key, sizeof key, "cond_encoder.%d.self_attn", i);
    load_attn(l, &e->attn, d, key);
    ditto_loader_get(l, &e->w1, DITTO_SHAPE(ff, d), "cond_encoder.%d.linear1.weight", i);
    ditto_loader_get(l, &e->b1, DITTO_SHAPE(ff), "cond_encoder.%d.linear1.bias", i);
    ditto_loader_get(l, &e->w2, DITTO_SHAPE(d, ff), "cond_encoder.%d.linear2.weight", i);
    ditto_loader_get(l, &e->b2, DITTO_SHAPE(d), "cond_encoder.%d.linear2.bias", i);
    ditto_loader_get(l, &e->ln1_w, DITTO_SHAPE(d), "cond_encoder.%d.norm1.weight", i);
    ditto_loader_get(l, &e->ln1_b, DITTO_SHAPE(d), "cond_encoder.%d.norm1.bias", i);
    ditto_loader_get(l, &e->ln2_w, DITTO_SHAPE(d), "cond_encoder.%d.norm2.weight", i);
    ditto_loader_get(l, &e->ln2_b, DITTO_SHAPE(d), "cond_encoder.%d.norm2.bias", i);
}

static void load_dec_layer(DittoLoader *l, LmdmDecLayer *y, int64_t d, int64_t ff, int i)
{
    char key[64];
    snprintf(key, sizeof key, "seqTransDecoder.stack.%d.self_attn", i);
    load_attn(l, &y->self_attn, d, key);
    snprintf(key, sizeof key, "seqTransDecoder.stack.%d.multihead_attn", i);
    load_attn(l, &y->cross_attn, d, key);
    ditto_loader_get(l, &y->w1, DITTO_SHAPE(ff, d), "seqTransDecoder.stack.%d.linear1.weight", i);
    ditto_loader_get(l, &y->b1, DITTO_SHAPE(ff), "seqTransDecoder.stack.%d.linear1.bias", i);
    ditto_loader_get(l, &y->w2, DITTO_SHAPE(d, ff), "seqTransDecoder.stack.%d.linear2.weight", i);
    ditto_loader_get(l, &y->b2, DITTO_SHAPE(d), "seqTransDecoder.stack.%d.linear2.bias", i);
    for (int j = 0; j < 3; j++) {
        ditto_loader_get(l, &y->ln_w[j], DITTO_SHAPE(d), "seqTransDecoder.stack.%d.norm%d.weight", i, j + 1);
        ditto_loader_get(l, &y->ln_b[j], DITTO_SHAPE(d), "seqTransDecoder.stack.%d.norm%d.bias", i, j + 1);
    }
    for (int j = 0; j < 3; j++) {
        ditto_loader_get(l, &y->film_w[j], DITTO_SHAPE(2 * d, d), "seqTransDecoder.stack.%d.film%d.block.1.weight", i, j + 1);
        ditto_loader_get(l, &y->film_b[j], DITTO_SHAPE(2 * d), "seqTransDecoder.stack.%d.film%d.block.1.bias", i, j + 1);
    }
}

/*
 * The rotary module is shared upstream, so its buffer appears at 1 + enc +
 * dec paths. Bind the first, check it against 1/10000^(2k/D) and every copy
 * against it, and mark the copies as known.
 */
static void load_rotary(DittoLoader *l, DittoLmdm *m)
{
    int64_t half = m->dims.latent / 2;
    ditto_loader_get(l, &m->rot_freqs, DITTO_SHAPE(half), "rotary.freqs");
    if (l->err)
        return;
    float *ref = ditto_malloc((size_t)half * 2 * sizeof(float));
    if (!ref) {
        l->err = DITTO_ERR_NOMEM;
        return;
    }
    float *cp = ref + half;
    int rc = ditto_catalog_read_f32(l->cat, ditto_loader_peek(l, "rotary.freqs"), ref);
    if (rc < 0)
        ditto_loader_fail(l, rc, "cannot read '%srotary.freqs'", l->prefix);
    /* float32 rounding of the exponent alone moves the values by ~1e-6 relative */
    for (int64_t k = 0; k < half && !l->err; k++) {
        double want = pow(10000.0, -(double)(2 * k) / (double)m->dims.latent);
        if (!(fabs(ref[k] - want) <= 1e-5 * want))
            ditto_loader_fail(l, DITTO_ERR_FORMAT, "'%srotary.freqs'[%lld] = %g, expected 1/10000^(2k/%lld) = %g", l->prefix, (long long)k, ref[k], (long long)m->dims.latent, want);
    }
    int n = m->dims.enc_layers + m->dims.layers;
    for (int i = 0; i < n && !l->err; i++) {
        char key[64];
        if (i < m->dims.enc_layers)
            snprintf(key, sizeof key, "cond_encoder.%d.rotary.freqs", i);
        else
            snprintf(key, sizeof key, "seqTransDecoder.stack.%d.rotary.freqs", i - m->dims.enc_layers);
        const DittoCatalogEntry *e = ditto_loader_peek(l, "%s", key);
        if (e && e->ndim == 1 && e->shape[0] == half) {
            rc = ditto_catalog_read_f32(l->cat, e, cp);
            if (rc < 0 || memcmp(cp, ref, (size_t)half * sizeof(float)) != 0)
                ditto_loader_fail(l, rc < 0 ? rc : DITTO_ERR_FORMAT, "'%s%s' differs from '%srotary.freqs'", l->prefix, key, l->prefix);
        } else if (e) {
            char have[DITTO_SHAPE_STR_MAX];
            ditto_loader_fail(l, DITTO_ERR_KEY, "key '%s%s' has shape %s, expected (%lld)", l->prefix, key, ditto_shape_str(e->shape, e->ndim, have, sizeof have), (long long)half);
        }
        ditto_loader_skip(l, "%s", key);   /* missing: a logged DITTO_ERR_KEY */
    }
    ditto_free(ref);
}

/*
 * Sinusoidal time embedding of every t, as upstream computes it in float32:
 * f_k = exp(k * -(ln 10000 / (D/2 - 1))), e = [sin(t f_k), cos(t f_k)].
 */
static int make_time_table(DittoLmdm *m)
{
    int64_t d = m->dims.latent, half = d / 2;
    DittoTensor t = ditto_tensor(NULL, DITTO_F32, DITTO_SHAPE(DITTO_LMDM_T, d));
    size_t bytes = ditto_tensor_nbytes(&t);
    float *host = ditto_malloc(bytes + (size_t)half * sizeof(float));
    if (!host)
        return DITTO_ERR_NOMEM;
    float *freq = host + DITTO_LMDM_T * d;
    const float neg = (float)(-(log(10000.0) / (double)(half - 1)));
    for (int64_t k = 0; k < half; k++)
        freq[k] = (float)exp((double)((float)k * neg));
    for (int64_t s = 0; s < DITTO_LMDM_T; s++) {
        float *row = host + s * d;
        for (int64_t k = 0; k < half; k++) {
            float arg = (float)s * freq[k];
            row[k] = (float)sin((double)arg);
            row[half + k] = (float)cos((double)arg);
        }
    }
    int rc = ditto_buffer_alloc(&m->time_table_buf, &m->be->allocator, bytes);
    if (rc >= 0)
        rc = m->be->upload(m->be, m->time_table_buf.ptr, host, bytes);
    ditto_free(host);
    if (rc < 0)
        return ditto_fail(&m->be->log, rc, "lmdm: cannot place the time embedding table (%zu bytes)", bytes);
    t.data = m->time_table_buf.ptr;
    t.device = m->be->device;
    m->time_table = t;
    return 0;
}

int ditto_lmdm_load(DittoLmdm **out, DittoBackend *be, DittoCatalog *cat, const DittoLmdmParams *p)
{
    if (!out || !be || !cat)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DittoLmdmParams defaults;
    if (!p) {
        ditto_lmdm_params_default(&defaults);
        p = &defaults;
    }
    DittoLmdm *m = ditto_calloc(1, sizeof *m);
    if (!m)
        return DITTO_ERR_NOMEM;
    m->be = be;
    DittoLmdmDims *d = &m->dims;
    DittoLoader l;
    ditto_loader_init(&l, cat, be, &m->weights, "LMDM denoiser", "model_state_dict.");

    /* sizes from the checkpoint */
    d->latent = ditto_loader_dim(&l, 2, 1, "%s", "null_cond_hidden");
    d->seq_len = ditto_loader_dim(&l, 3, 1, "%s", "null_cond_embed");
    d->nfeats = ditto_loader_dim(&l, 2, 0, "%s", "final_layer.weight");
    d->cond_dim = ditto_loader_dim(&l, 2, 1, "%s", "cond_projection.weight");
    d->time_hidden = ditto_loader_dim(&l, 2, 0, "%s", "time_mlp.1.weight");
    d->ff = ditto_loader_dim(&l, 2, 0, "%s", "seqTransDecoder.stack.0.linear1.weight");
    int64_t enc_ff = ditto_loader_dim(&l, 2, 0, "%s", "cond_encoder.0.linear1.weight");
    while (!l.err && d->layers < LMDM_MAX_LAYERS && ditto_loader_peek(&l, "seqTransDecoder.stack.%d.norm1.weight", d->layers))
        d->layers++;
    while (!l.err && d->enc_layers < LMDM_MAX_LAYERS && ditto_loader_peek(&l, "cond_encoder.%d.norm1.weight", d->enc_layers))
        d->enc_layers++;
    d->heads = p->num_heads;
    if (!l.err && (d->latent < 4 || d->latent % 2)) {
        ditto_loader_fail(&l, DITTO_ERR_KEY, "latent width %lld from 'null_cond_hidden' is not an even number >= 4", (long long)d->latent);
    }
    if (!l.err && (d->heads < 1 || d->latent % d->heads)) {
        ditto_loader_fail(&l, DITTO_ERR_INVAL, "%d attention heads do not divide the latent width %lld", d->heads, (long long)d->latent);
    }
    if (!l.err) {
        m->enc = ditto_calloc((size_t)d->enc_layers, sizeof *m->enc);
        m->dec = ditto_calloc((size_t)d->layers, sizeof *m->dec);
        if ((d->enc_layers && !m->enc) || (d->layers && !m->dec))
            l.err = DITTO_ERR_NOMEM;
    }

    /* parameters, in state_dict order */
    const int64_t D = d->latent, F = d->nfeats;
    ditto_loader_get(&l, &m->null_cond_embed, DITTO_SHAPE(1, d->seq_len, D), "null_cond_embed");
    ditto_loader_get(&l, &m->null_cond_hidden, DITTO_SHAPE(1, D), "null_cond_hidden");
    load_rotary(&l, m);
    ditto_loader_get(&l, &m->time_w, DITTO_SHAPE(d->time_hidden, D), "time_mlp.1.weight");
    ditto_loader_get(&l, &m->time_b, DITTO_SHAPE(d->time_hidden), "time_mlp.1.bias");
    ditto_loader_get(&l, &m->tcond_w, DITTO_SHAPE(D, d->time_hidden), "to_time_cond.0.weight");
    ditto_loader_get(&l, &m->tcond_b, DITTO_SHAPE(D), "to_time_cond.0.bias");
    ditto_loader_get(&l, &m->ttok_w, DITTO_SHAPE(2 * D, d->time_hidden), "to_time_tokens.0.weight");
    ditto_loader_get(&l, &m->ttok_b, DITTO_SHAPE(2 * D), "to_time_tokens.0.bias");
    ditto_loader_get(&l, &m->normc_w, DITTO_SHAPE(D), "norm_cond.weight");
    ditto_loader_get(&l, &m->normc_b, DITTO_SHAPE(D), "norm_cond.bias");
    ditto_loader_get(&l, &m->inp_w, DITTO_SHAPE(D, 2 * F), "input_projection.weight");
    ditto_loader_get(&l, &m->inp_b, DITTO_SHAPE(D), "input_projection.bias");
    for (int i = 0; i < d->enc_layers && !l.err; i++)
        load_enc_layer(&l, &m->enc[i], D, enc_ff, i);
    ditto_loader_get(&l, &m->condp_w, DITTO_SHAPE(D, d->cond_dim), "cond_projection.weight");
    ditto_loader_get(&l, &m->condp_b, DITTO_SHAPE(D), "cond_projection.bias");
    ditto_loader_get(&l, &m->pool_ln_w, DITTO_SHAPE(D), "non_attn_cond_projection.0.weight");
    ditto_loader_get(&l, &m->pool_ln_b, DITTO_SHAPE(D), "non_attn_cond_projection.0.bias");
    ditto_loader_get(&l, &m->pool1_w, DITTO_SHAPE(D, D), "non_attn_cond_projection.1.weight");
    ditto_loader_get(&l, &m->pool1_b, DITTO_SHAPE(D), "non_attn_cond_projection.1.bias");
    ditto_loader_get(&l, &m->pool2_w, DITTO_SHAPE(D, D), "non_attn_cond_projection.3.weight");
    ditto_loader_get(&l, &m->pool2_b, DITTO_SHAPE(D), "non_attn_cond_projection.3.bias");
    for (int i = 0; i < d->layers && !l.err; i++)
        load_dec_layer(&l, &m->dec[i], D, d->ff, i);
    ditto_loader_get(&l, &m->final_w, DITTO_SHAPE(F, D), "final_layer.weight");
    ditto_loader_get(&l, &m->final_b, DITTO_SHAPE(F), "final_layer.bias");

    int rc = ditto_loader_finish(&l);
    if (rc >= 0 && d->enc_layers != 2) {
        /* the encoder depth is not fixed by the forward; accept any, but say so */
        ditto_log(&be->log, DITTO_LOG_WARN, "%s: %d cond_encoder layers (the official LMDM has 2)", cat->path, d->enc_layers);
    }
    if (rc >= 0)
        rc = make_time_table(m);
    if (rc < 0) {
        ditto_lmdm_free(&m);
        return rc;
    }
    *out = m;
    return 0;
}

void ditto_lmdm_free(DittoLmdm **m)
{
    if (!m || !*m)
        return;
    ditto_buffer_free(&(*m)->time_table_buf);
    ditto_weights_free(&(*m)->weights);
    ditto_free((*m)->enc);
    ditto_free((*m)->dec);
    ditto_free(*m);
    *m = NULL;
}

/* ---- forward ---- */

#define CK(expr) do { rc = (expr); if (rc < 0) goto done; } while (0)
#define NEW(t, ...) CK(ditto_arena_tensor(ws, DITTO_F32, DITTO_SHAPE(__VA_ARGS__), &(t)))

/*
 * Multi-head attention core + out_proj: q (N,Lq,D), k, v (N,Lk,D), any
 * strides (the in-projection already applied) -> y (N,Lq,D).
 */
static int attend(DittoLmdm *m, DittoArena *ws, const LmdmAttn *w, const DittoTensor *q, const DittoTensor *k, const DittoTensor *v, DittoTensor *y)
{
    DittoBackend *be = m->be;
    const int64_t N = q->shape[0], Lq = q->shape[1], D = m->dims.latent, H = m->dims.heads, dh = D / H;
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor o, om;
    int rc;
    DittoTensor qh = view_heads(q, H);                                  /* (N,H,Lq,dh) */
    DittoTensor kh = view_heads(k, H);                                  /* (N,H,Lk,dh) */
    DittoTensor vh = view_heads(v, H);                                  /* (N,H,Lk,dh) */
    NEW(o, N, H, Lq, dh);
    CK(ditto_op_attention(be, 0.0f, &qh, &kh, &vh, NULL, &o));          /* softmax(q k^T / sqrt(dh)) v */
    DittoTensor ot;
    CK(ditto_tensor_permute(&o, (const int[]){ 0, 2, 1, 3 }, &ot));     /* (N,Lq,H,dh) view */
    NEW(om, N, Lq, H, dh);
    CK(ditto_op_copy(be, &ot, &om));                                    /* heads concatenated */
    DittoTensor omf = RESHAPE(om, N, Lq, D);
    CK(ditto_op_linear(be, &omf, &w->out_w, &w->out_b, y));             /* out_proj (N,Lq,D) */
done:
    ditto_arena_release(ws, mark);
    return rc;
}

/* Self-attention with rotary queries/keys: a (N,L,D) normalised input -> y (N,L,D). */
static int self_attention(DittoLmdm *m, DittoArena *ws, const LmdmAttn *w, const DittoTensor *a, DittoTensor *y)
{
    DittoBackend *be = m->be;
    const int64_t N = a->shape[0], L = a->shape[1], D = m->dims.latent;
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor ra, qk, v;
    int rc;
    NEW(ra, N, L, D);
    CK(ditto_op_rotary(be, 0, a, &m->rot_freqs, &ra));                 /* rot(a) */
    NEW(qk, N, L, 2 * D);
    CK(ditto_op_linear(be, &ra, &w->wqk, &w->bqk, &qk));                /* [q | k] = rot(a) [W_q | W_k]^T + b */
    NEW(v, N, L, D);
    CK(ditto_op_linear(be, a, &w->wv, &w->bv, &v));                     /* v = a W_v^T + b_v */
    DittoTensor q = view_slice(&qk, 2, 0, D);                           /* (N,L,D) strided */
    DittoTensor k = view_slice(&qk, 2, D, 2 * D);
    CK(attend(m, ws, w, &q, &k, &v, y));
done:
    ditto_arena_release(ws, mark);
    return rc;
}

/* Two-layer GELU MLP: y = W2 GELU(W1 a + b1) + b2; a (N,L,D) -> y (N,L,D). */
static int feed_forward(DittoLmdm *m, DittoArena *ws, const DittoTensor *w1, const DittoTensor *b1, const DittoTensor *w2, const DittoTensor *b2,
                        const DittoTensor *a, DittoTensor *y)
{
    DittoBackend *be = m->be;
    const int64_t N = a->shape[0], L = a->shape[1], ff = w1->shape[0];
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor f;
    int rc;
    NEW(f, N, L, ff);
    CK(ditto_op_linear(be, a, w1, b1, &f));                             /* linear1 (N,L,ff) */
    CK(ditto_op_act(be, DITTO_UNARY_GELU, 0, &f, &f));
    CK(ditto_op_linear(be, &f, w2, b2, y));                             /* linear2 (N,L,D) */
done:
    ditto_arena_release(ws, mark);
    return rc;
}

/* cond_encoder.{i}, in place on c (B,L,D). */
static int enc_layer(DittoLmdm *m, DittoArena *ws, const LmdmEncLayer *w, DittoTensor *c)
{
    DittoBackend *be = m->be;
    const int64_t B = c->shape[0], L = c->shape[1], D = m->dims.latent;
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor a, y;
    int rc;
    NEW(a, B, L, D);
    NEW(y, B, L, D);
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, c, &w->ln1_w, &w->ln1_b, &a));   /* a = norm1(c) */
    CK(self_attention(m, ws, &w->attn, &a, &y));                                    /* MHA(rot a, rot a, a) */
    CK(ditto_op_binary(be, DITTO_BINARY_ADD, c, &y, c));                            /* c = c + sa */
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, c, &w->ln2_w, &w->ln2_b, &a));   /* a = norm2(c) */
    CK(feed_forward(m, ws, &w->w1, &w->b1, &w->w2, &w->b2, &a, &y));
    CK(ditto_op_binary(be, DITTO_BINARY_ADD, c, &y, c));                            /* c = c + ff */
done:
    ditto_arena_release(ws, mark);
    return rc;
}

/* h = h + ((1 + scale) y + shift); y (N,L,D) is overwritten; sp1 = 1 + scale, shift: (N,1,D) views. */
static int film_residual(DittoBackend *be, DittoTensor *h, DittoTensor *y, const DittoTensor *sp1, const DittoTensor *shift)
{
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_MUL, sp1, y, y));      /* (scale + 1) * y */
    DITTO_TRY(ditto_op_binary(be, DITTO_BINARY_ADD, y, shift, y));    /* + shift */
    return ditto_op_binary(be, DITTO_BINARY_ADD, h, y, h);            /* h = h + film(y) */
}

/*
 * seqTransDecoder.stack.{i}, in place on h (N,L,D), N = 2B; mem_k, mem_v
 * (N,L+2,D) this layer's cross-attention keys/values; mt = Mish(tc) (N,D).
 */
static int dec_layer(DittoLmdm *m, DittoArena *ws, const LmdmDecLayer *w, DittoTensor *h, const DittoTensor *mem_k, const DittoTensor *mem_v,
                     const DittoTensor *mt)
{
    DittoBackend *be = m->be;
    const int64_t N = h->shape[0], L = h->shape[1], D = m->dims.latent;
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor fs[3], sp1[3], shift[3], a, ra, q, y;
    int rc;
    /* FiLM j: [scale_j | shift_j] = film_j.block.1(Mish(tc)) */
    for (int j = 0; j < 3; j++) {
        NEW(fs[j], N, 2 * D);
        CK(ditto_op_linear(be, mt, &w->film_w[j], &w->film_b[j], &fs[j]));     /* (N,2D) */
        DittoTensor scale = view_slice(&fs[j], 1, 0, D);                      /* (N,D) strided */
        NEW(sp1[j], N, 1, D);
        DittoTensor sp1v = RESHAPE(sp1[j], N, D);
        CK(ditto_op_unary(be, &(DittoUnaryParams){ DITTO_UNARY_AFFINE, 1.0f, 1.0f }, &scale, &sp1v));   /* scale + 1 */
        DittoTensor sh = view_slice(&fs[j], 1, D, 2 * D);
        shift[j] = view_insert(&sh, 1, 1, 0);                                /* (N,1,D) */
    }
    NEW(a, N, L, D);
    NEW(y, N, L, D);

    /* self-attention block */
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, h, &w->ln_w[0], &w->ln_b[0], &a));   /* a = norm1(h) */
    CK(self_attention(m, ws, &w->self_attn, &a, &y));                                   /* MHA(rot a, rot a, a) */
    CK(film_residual(be, h, &y, &sp1[0], &shift[0]));

    /* cross-attention block: keys/values of mem = norm_cond(concat(c, tt)) precomputed */
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, h, &w->ln_w[1], &w->ln_b[1], &a));   /* a = norm2(h) */
    NEW(ra, N, L, D);
    CK(ditto_op_rotary(be, 0, &a, &m->rot_freqs, &ra));                                /* rot(a) */
    NEW(q, N, L, D);
    CK(ditto_op_linear(be, &ra, &w->cross_attn.wq, &w->cross_attn.bq, &q));             /* q = rot(a) W_q^T + b_q */
    CK(attend(m, ws, &w->cross_attn, &q, mem_k, mem_v, &y));                            /* MHA(rot a, rot mem, mem) */
    CK(film_residual(be, h, &y, &sp1[1], &shift[1]));

    /* feed-forward block */
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, h, &w->ln_w[2], &w->ln_b[2], &a));   /* a = norm3(h) */
    CK(feed_forward(m, ws, &w->w1, &w->b1, &w->w2, &w->b2, &a, &y));
    CK(film_residual(be, h, &y, &sp1[2], &shift[2]));
done:
    ditto_arena_release(ws, mark);
    return rc;
}

static int check_tensor(DittoLmdm *m, const char *name, const DittoTensor *t, int ndim, const int64_t *shape)
{
    return ditto_nn_check_tensor(m->be, "lmdm", name, t, ndim, shape);
}

int ditto_lmdm_cond_init(DittoLmdm *m, DittoArena *ws, const DittoTensor *kp_cond, const DittoTensor *cond, DittoLmdmCond *st, const DittoTap *tap)
{
    if (!m || !ws || !kp_cond || !cond || !st)
        return DITTO_ERR_INVAL;
    DittoBackend *be = m->be;
    const DittoLmdmDims *d = &m->dims;
    const int64_t B = kp_cond->ndim == 2 ? kp_cond->shape[0] : 0, L = d->seq_len, D = d->latent, F = d->nfeats, NL = d->layers;
    DITTO_TRY(check_tensor(m, "kp_cond", kp_cond, DITTO_SHAPE(B, F)));
    DITTO_TRY(check_tensor(m, "cond", cond, DITTO_SHAPE(B, L, d->cond_dim)));
    if (B < 1)
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "lmdm: empty batch");
    memset(st, 0, sizeof *st);
    st->batch = B;
    st->cond_frame = *kp_cond;
    DittoArenaMark outer = ditto_arena_mark(ws);
    DittoArenaMark mark;
    DittoTensor c, pooled, pn, p1, cm, mem, rmem, kv;
    int rc;
    NEW(st->ch, 2, B, D);
    NEW(st->mem_k, NL, 2, B, L + 2, D);
    NEW(st->mem_v, NL, 2, B, L + 2, D);
    mark = ditto_arena_mark(ws);

    /* condition tokens of the conditioned pass */
    NEW(c, B, L, D);
    CK(ditto_op_linear(be, cond, &m->condp_w, &m->condp_b, &c));         /* cond_projection (B,L,D) */
    for (int i = 0; i < d->enc_layers; i++)
        CK(enc_layer(m, ws, &m->enc[i], &c));                             /* cond_encoder.{i} */
    ditto_tap(tap, "cond_tokens", &c);

    /* pooled condition: ch[0] = Lin(SiLU(Lin(LN(mean_L c)))), ch[1] = null_cond_hidden */
    NEW(pooled, B, 1, D);
    CK(ditto_op_reduce(be, DITTO_REDUCE_MEAN, 1, &c, &pooled));           /* mean over frames (B,1,D) */
    NEW(pn, B, 1, D);
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, &pooled, &m->pool_ln_w, &m->pool_ln_b, &pn));
    NEW(p1, B, 1, D);
    CK(ditto_op_linear(be, &pn, &m->pool1_w, &m->pool1_b, &p1));
    CK(ditto_op_act(be, DITTO_UNARY_SILU, 0, &p1, &p1));
    DittoTensor ch0 = view_select(&st->ch, 0, 0);
    DittoTensor ch0v = RESHAPE(ch0, B, 1, D);
    CK(ditto_op_linear(be, &p1, &m->pool2_w, &m->pool2_b, &ch0v));        /* (B,1,D) */
    ditto_tap(tap, "cond_hidden", &ch0);
    DittoTensor nh = view_select(&m->null_cond_hidden, 0, 0);           /* (D) */
    DittoTensor nhb = view_repeat(&nh, B);                              /* (B,D) broadcast */
    DittoTensor ch1 = view_select(&st->ch, 0, 1);
    CK(ditto_op_copy(be, &nhb, &ch1));

    /* memory tokens 0..L-1: norm_cond([c ; null_cond_embed]) for both passes */
    NEW(cm, 2, B, L, D);
    DittoTensor cm0 = view_select(&cm, 0, 0);
    CK(ditto_op_copy(be, &c, &cm0));
    DittoTensor ne = view_select(&m->null_cond_embed, 0, 0);            /* (L,D) */
    DittoTensor neb = view_repeat(&ne, B);                              /* (B,L,D) broadcast */
    DittoTensor cm1 = view_select(&cm, 0, 1);
    CK(ditto_op_copy(be, &neb, &cm1));
    DittoTensor cmf = RESHAPE(cm, 2 * B, L, D);
    NEW(mem, 2 * B, L, D);
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, &cmf, &m->normc_w, &m->normc_b, &mem));   /* norm_cond */
    NEW(rmem, 2 * B, L, D);
    CK(ditto_op_rotary(be, 0, &mem, &m->rot_freqs, &rmem));             /* rot(mem), positions 0..L-1 */

    /* their cross-attention keys and values in every layer */
    NEW(kv, 2 * B, L, D);
    DittoTensor kv4 = RESHAPE(kv, 2, B, L, D);
    for (int i = 0; i < NL; i++) {
        const LmdmAttn *w = &m->dec[i].cross_attn;
        DittoTensor lk = view_select(&st->mem_k, 0, i);                 /* (2,B,L+2,D) */
        DittoTensor lv = view_select(&st->mem_v, 0, i);
        DittoTensor lk_c = view_slice(&lk, 2, 0, L);                    /* (2,B,L,D) */
        DittoTensor lv_c = view_slice(&lv, 2, 0, L);
        CK(ditto_op_linear(be, &rmem, &w->wk, &w->bk, &kv));             /* k = rot(mem) W_k^T + b_k */
        CK(ditto_op_copy(be, &kv4, &lk_c));
        CK(ditto_op_linear(be, &mem, &w->wv, &w->bv, &kv));              /* v = mem W_v^T + b_v */
        CK(ditto_op_copy(be, &kv4, &lv_c));
    }
done:
    ditto_arena_release(ws, rc < 0 ? outer : mark);
    return rc;
}

int ditto_lmdm_denoise(DittoLmdm *m, DittoArena *ws, DittoLmdmCond *st, const DittoTensor *x, const int *times, int ntimes, DittoTensor *x_start,
                       const DittoTap *tap)
{
    if (!m || !ws || !st || !x || !times || !x_start)
        return DITTO_ERR_INVAL;
    DittoBackend *be = m->be;
    const DittoLmdmDims *d = &m->dims;
    const int64_t B = st->batch, N = 2 * B, L = d->seq_len, D = d->latent, F = d->nfeats, TH = d->time_hidden;
    DITTO_TRY(check_tensor(m, "x", x, DITTO_SHAPE(B, L, F)));
    DITTO_TRY(check_tensor(m, "x_start", x_start, DITTO_SHAPE(B, L, F)));
    if (x_start->data == x->data)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "lmdm: x_start must not alias x");
    if (ntimes != 1 && ntimes != B)
        return ditto_fail(&be->log, DITTO_ERR_INVAL, "lmdm: %d time steps for a batch of %lld", ntimes, (long long)B);
    for (int b = 0; b < ntimes; b++)
        if (times[b] < 0 || times[b] >= DITTO_LMDM_T)
            return ditto_fail(&be->log, DITTO_ERR_RANGE, "lmdm: time step %d outside [0, %d)", times[b], DITTO_LMDM_T);
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor e, th, tcb, tt, tc, mt, memt, rmemt, kt, vt, xin, h1, h, out;
    int rc;

    /* time embedding: e = sinusoid(t) (B,D), gathered from the table */
    NEW(e, B, D);
    if (ntimes == 1) {
        DittoTensor row = view_select(&m->time_table, 0, times[0]);     /* (D) */
        DittoTensor rows = view_repeat(&row, B);                        /* (B,D) broadcast */
        CK(ditto_op_copy(be, &rows, &e));
    } else {
        for (int64_t b = 0; b < B; b++) {
            DittoTensor row = view_select(&m->time_table, 0, times[b]);
            DittoTensor eb = view_select(&e, 0, b);
            CK(ditto_op_copy(be, &row, &eb));
        }
    }
    NEW(th, B, TH);
    CK(ditto_op_linear(be, &e, &m->time_w, &m->time_b, &th));            /* time_mlp.1 (B,4D) */
    CK(ditto_op_act(be, DITTO_UNARY_MISH, 0, &th, &th));                 /* time_mlp.2 */
    NEW(tcb, B, D);
    CK(ditto_op_linear(be, &th, &m->tcond_w, &m->tcond_b, &tcb));        /* to_time_cond (B,D) */
    NEW(tt, B, 2 * D);
    CK(ditto_op_linear(be, &th, &m->ttok_w, &m->ttok_b, &tt));           /* to_time_tokens (B,2D) */
    DittoTensor tt3 = RESHAPE(tt, B, 2, D);                              /* (B,2,D): token r = values [rD, rD+D) */

    /* tc = time cond + pooled condition, per pass (2,B,D); FiLM input Mish(tc) */
    NEW(tc, 2, B, D);
    DittoTensor tcb2 = view_repeat(&tcb, 2);                             /* (2,B,D) broadcast */
    CK(ditto_op_binary(be, DITTO_BINARY_ADD, &tcb2, &st->ch, &tc));
    NEW(mt, N, D);
    DittoTensor tcf = RESHAPE(tc, N, D);
    CK(ditto_op_act(be, DITTO_UNARY_MISH, 0, &tcf, &mt));                /* film_j.block.0 */

    /* memory tokens L, L+1 (the time tokens, same for both passes): keys/values per layer */
    NEW(memt, B, 2, D);
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, &tt3, &m->normc_w, &m->normc_b, &memt));   /* norm_cond */
    NEW(rmemt, B, 2, D);
    CK(ditto_op_rotary(be, L, &memt, &m->rot_freqs, &rmemt));            /* rot(mem), positions L, L+1 */
    NEW(kt, B, 2, D);
    NEW(vt, B, 2, D);
    DittoTensor kt2 = view_repeat(&kt, 2);                               /* (2,B,2,D) broadcast over passes */
    DittoTensor vt2 = view_repeat(&vt, 2);
    for (int i = 0; i < d->layers; i++) {
        const LmdmAttn *w = &m->dec[i].cross_attn;
        DittoTensor lk = view_select(&st->mem_k, 0, i);                  /* (2,B,L+2,D) */
        DittoTensor lv = view_select(&st->mem_v, 0, i);
        DittoTensor lk_t = view_slice(&lk, 2, L, L + 2);                 /* (2,B,2,D) */
        DittoTensor lv_t = view_slice(&lv, 2, L, L + 2);
        CK(ditto_op_linear(be, &rmemt, &w->wk, &w->bk, &kt));
        CK(ditto_op_copy(be, &kt2, &lk_t));
        CK(ditto_op_linear(be, &memt, &w->wv, &w->bv, &vt));
        CK(ditto_op_copy(be, &vt2, &lv_t));
    }

    /* input projection, shared by both passes */
    NEW(xin, B, L, 2 * F);
    DittoTensor kpl = view_insert(&st->cond_frame, 1, L, 0);             /* kp_cond repeated over frames (B,L,F) */
    const DittoTensor *parts[2] = { x, &kpl };
    CK(ditto_op_concat(be, 2, 2, parts, &xin));                          /* concat(x, kp_cond) (B,L,2F) */
    NEW(h1, B, L, D);
    CK(ditto_op_linear(be, &xin, &m->inp_w, &m->inp_b, &h1));            /* input_projection (B,L,D) */
    NEW(h, 2, B, L, D);
    DittoTensor h12 = view_repeat(&h1, 2);
    CK(ditto_op_copy(be, &h12, &h));                                     /* both passes start equal */
    DittoTensor hf = RESHAPE(h, N, L, D);

    /* decoder stack on the 2B batch */
    for (int i = 0; i < d->layers; i++) {
        DittoTensor lk = view_select(&st->mem_k, 0, i);
        DittoTensor lv = view_select(&st->mem_v, 0, i);
        DittoTensor lkf = RESHAPE(lk, N, L + 2, D);
        DittoTensor lvf = RESHAPE(lv, N, L + 2, D);
        CK(dec_layer(m, ws, &m->dec[i], &hf, &lkf, &lvf, &mt));
    }

    /* output and guidance: x_start = U + 2 (C - U) */
    NEW(out, 2, B, L, F);
    DittoTensor outf = RESHAPE(out, N, L, F);
    CK(ditto_op_linear(be, &hf, &m->final_w, &m->final_b, &outf));        /* final_layer (2B,L,F) */
    DittoTensor xc = view_select(&out, 0, 0);                           /* (B,L,F) conditioned */
    DittoTensor xu = view_select(&out, 0, 1);                           /* (B,L,F) unconditioned */
    ditto_tap(tap, "x_start_cond", &xc);
    ditto_tap(tap, "x_start_uncond", &xu);
    CK(ditto_op_binary(be, DITTO_BINARY_SUB, &xc, &xu, x_start));         /* C - U */
    CK(ditto_op_unary(be, &(DittoUnaryParams){ DITTO_UNARY_AFFINE, DITTO_LMDM_GUIDANCE, 0.0f }, x_start, x_start));   /* * w */
    CK(ditto_op_binary(be, DITTO_BINARY_ADD, &xu, x_start, x_start));     /* U + w (C - U) */
done:
    ditto_arena_release(ws, mark);
    return rc;
}
