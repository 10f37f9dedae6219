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
 * together, window-major: activations are (B,2,L,D) (window, pass, frame),
 * and every linear sees them as (B,2L,D), so a window's two passes are one
 * GEMM item of 2L rows whatever the number of windows B (the linear op's
 * batch consistency is per item of dim 0). Work is hoisted by what it
 * depends on:
 *   ditto_lmdm_cond_init()   the conditions: encoder, pooled condition, the
 *                            condition tokens' cross-attention keys/values;
 *   ditto_lmdm_steps_init()  the time steps of a schedule (with the pooled
 *                            condition): time MLP, every FiLM of every layer
 *                            and step in one GEMM, the time tokens' keys and
 *                            values;
 *   ditto_lmdm_denoise_step() per step only what depends on x: the decoder
 *                            stack, with the step's time-token keys/values
 *                            copied into memory rows L, L+1 first.
 * ditto_lmdm_denoise() takes any times and builds their tables per call.
 *
 * Per layer and step the decoder is one fused pre-norm per block (the FiLM
 * residual of the block before, layer norm, rotary: ditto_op_layer_norm_rotary),
 * the linears (bias in the GEMM; GELU with linear1) and the two attentions.
 * With DittoLmdmParams.tf32 its linears take TF32 operands (see lmdm.h), off
 * the CPU held as float16 (DittoLmdm.op16).
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
    /* the weights the per-step linears read: views of the above, or their float16 copies (DittoLmdm.op16) */
    DittoTensor s_wqk, s_wq, s_wv, s_out;
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
    DittoTensor s_w1, s_w2;    /* what the step's feed-forward reads: w1, w2 or their float16 copies */
    /* film{1,2,3}.block.1.*: rows of DittoLmdm.film_w / film_b */
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
    /*
     * seqTransDecoder.stack.{i}.film{j+1}.block.1.weight (2D, D) / .bias (2D)
     * of every layer, concatenated in (i, j) order: (layers*3*2D, D) and
     * (layers*3*2D); rows of one FiLM are scale | shift. One GEMM makes
     * every FiLM of every step (ditto_lmdm_steps_init).
     */
    DittoTensor film_w, film_b;
    DittoLinearParams lin;         /* options of the per-step linears (tf32) */
    /*
     * op16: the TF32 operands of the per-step linears held as float16
     * (weights copied at load, activations written so): the same values
     * wherever they lie in float16's normal range, and half the bytes, on
     * faster tensor-core kernels. Only off the CPU, with tf32, and when the
     * load-time bounds show no operand can pass 65504 (see make_step16).
     */
    bool op16;
    DittoBuffer step16_buf;        /* the float16 weight copies */
    /* constants computed at load */
    DittoBuffer time_table_buf;
    DittoTensor time_table;        /* (T, D): row r = [sin(t f_k), cos(t f_k)] of t = T-1-r (descending, see gather_times) */
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

bool ditto_lmdm_f16_operands(const DittoLmdm *m)
{
    return m && m->op16;
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
    a->s_wqk = a->wqk;
    a->s_wq = a->wq;
    a->s_wv = a->wv;
    a->s_out = a->out_w;
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
    y->s_w1 = y->w1;
    y->s_w2 = y->w2;
}

/* film{1,2,3}.block.1.* of every decoder layer as one weight and one bias (DittoLmdm.film_w, film_b). */
static void load_films(DittoLoader *l, DittoLmdm *m)
{
    const int n = 3 * m->dims.layers;
    const int64_t d = m->dims.latent;
    char (*names)[64] = ditto_malloc((size_t)n * 2 * sizeof *names);
    const char **keys = ditto_malloc((size_t)n * 2 * sizeof *keys);
    if (!names || !keys) {
        if (!l->err)
            l->err = DITTO_ERR_NOMEM;
    } else {
        for (int k = 0; k < n; k++) {
            snprintf(names[k], sizeof names[k], "seqTransDecoder.stack.%d.film%d.block.1.weight", k / 3, k % 3 + 1);
            snprintf(names[n + k], sizeof names[n + k], "seqTransDecoder.stack.%d.film%d.block.1.bias", k / 3, k % 3 + 1);
            keys[k] = names[k];
            keys[n + k] = names[n + k];
        }
        ditto_loader_get_cat(l, &m->film_w, n, keys, DITTO_SHAPE(2 * d, d));
        ditto_loader_get_cat(l, &m->film_b, n, keys + n, DITTO_SHAPE(2 * d));
    }
    ditto_free(names);
    ditto_free(keys);
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
 * Stored with t descending (row T-1-t), so the decreasing times of a DDIM
 * schedule are increasing rows.
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
        float *row = host + (DITTO_LMDM_T - 1 - s) * d;
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

/* t (contiguous float32 on the model's backend) rounded in place to the nearest TF32 values, through host memory. */
static int round_tf32(DittoLmdm *m, const DittoTensor *t)
{
    if (t->dtype != DITTO_F32)
        return 0;   /* float16 values are TF32 values */
    const size_t n = (size_t)ditto_tensor_numel(t), bytes = n * sizeof(float);
    float *host = ditto_malloc(bytes ? bytes : 1);
    if (!host)
        return DITTO_ERR_NOMEM;
    int rc = m->be->download(m->be, host, t->data, bytes);
    for (size_t i = 0; rc >= 0 && i < n; i++)
        host[i] = ditto_tf32_round(host[i]);
    if (rc >= 0)
        rc = m->be->upload(m->be, t->data, host, bytes);
    ditto_free(host);
    return rc;
}

/*
 * tf32: the weights of the per-step tf32 linears become TF32 values at load
 * (their activations are rounded where they are made), so every backend
 * forms exactly the products of the CPU oracle, whatever its tensor cores do
 * with the low mantissa bits (truncation: a bias of ~2^-11 per operand that
 * measurably accumulates over 50 steps). The cross-attention keys and values
 * (W_k, W_v), used once per window in float32, keep their bits.
 */
static int round_step_weights(DittoLmdm *m)
{
    for (int i = 0; i < m->dims.layers; i++) {
        const LmdmDecLayer *y = &m->dec[i];
        const DittoTensor *ts[6] = { &y->self_attn.in_w, &y->self_attn.out_w, &y->cross_attn.wq, &y->cross_attn.out_w, &y->w1, &y->w2 };
        for (int j = 0; j < 6; j++)
            DITTO_TRY(round_tf32(m, ts[j]));
    }
    return 0;
}

/* contiguous float32 t on the model's backend -> host (numel floats) */
static int fetch_f32(DittoLmdm *m, const DittoTensor *t, float *host)
{
    if (t->dtype != DITTO_F32 || !ditto_tensor_is_contiguous(t))
        return ditto_fail(&m->be->log, DITTO_ERR_INVAL, "lmdm: a decoder weight is not contiguous float32");
    return m->be->download(m->be, host, t->data, (size_t)ditto_tensor_numel(t) * sizeof(float));
}

static double max_abs(const float *v, int64_t n)
{
    double mx = 0;
    for (int64_t i = 0; i < n; i++)
        mx = fmax(mx, fabs((double)v[i]));   /* fmax drops a NaN: non-finite weights are checked apart */
    return mx;
}

/* max over the rows of sum_j |w[r][j]| (rows, cols): bounds |w x| by it times max |x| */
static double max_row_l1(const float *w, int64_t rows, int64_t cols)
{
    double mx = 0;
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t j = 0; j < cols; j++)
            s += fabs((double)w[r * cols + j]);
        mx = fmax(mx, s);
    }
    return mx;
}

static bool all_finite(const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return false;
    return true;
}

/* (rows, cols) float16 at p on the model's device */
static DittoTensor dev_f16(const DittoLmdm *m, uint16_t *p, int64_t rows, int64_t cols)
{
    DittoTensor t = ditto_tensor(p, DITTO_F16, DITTO_SHAPE(rows, cols));
    t.device = m->be->device;
    return t;
}

/*
 * The float16 operands of the per-step linears (DittoLmdm.op16). First a
 * bound on every value that would be stored as float16, from the weights:
 *   layer norm output a: |(x - mean) / std| < sqrt(D), so |a| <= A = sqrt(D)
 *     max|ln_w| + max|ln_b|; rot(a) rotates pairs: <= sqrt(2) A;
 *   attention output: a convex mix of value rows, |v| <= max row L1 of W_v
 *     times the bound of its input + max|b_v| (cross: the memory rows, a
 *     layer norm of norm_cond);
 *   GELU(z), |GELU(z)| <= |z|: max row L1 of W1 times A + max|b1|;
 *   the weights themselves.
 * Above 65504 (float16's largest finite value) the copies are not made and
 * *on stays false: the linears keep TF32 operands in float32. Else every
 * decoder step weight gets its float16 copy (nearest even: the TF32 value
 * of the CPU oracle in float16's normal range) and the s_* views point at
 * them.
 */
static int make_step16(DittoLmdm *m, bool *on)
{
    const DittoLmdmDims *d = &m->dims;
    const int64_t D = d->latent, ff = d->ff;
    *on = false;
    if (d->layers < 1)
        return 0;
    const int64_t per = 3 * D * D + 3 * D * D + 2 * ff * D;   /* self in_w + out, cross wq + out, w1, w2 */
    const int64_t big = (3 * D > ff ? 3 * D : ff) * D;
    float *h = ditto_malloc(sizeof(float) * (size_t)(big + 2 * D));
    uint16_t *h16 = ditto_malloc(sizeof(uint16_t) * (size_t)(per * d->layers));
    int rc = h && h16 ? 0 : DITTO_ERR_NOMEM;
    double bound = 0;
    bool finite = true;
    /* memory rows: norm_cond's output */
    double amem = 0;
    if (rc >= 0)
        rc = fetch_f32(m, &m->normc_w, h);
    if (rc >= 0)
        rc = fetch_f32(m, &m->normc_b, h + D);
    if (rc >= 0)
        amem = sqrt((double)D) * max_abs(h, D) + max_abs(h + D, D);
    for (int i = 0; i < d->layers && rc >= 0; i++) {
        LmdmDecLayer *y = &m->dec[i];
        double A[3];
        for (int j = 0; j < 3 && rc >= 0; j++) {
            rc = fetch_f32(m, &y->ln_w[j], h);
            if (rc >= 0)
                rc = fetch_f32(m, &y->ln_b[j], h + D);
            A[j] = sqrt((double)D) * max_abs(h, D) + max_abs(h + D, D);
            bound = fmax(bound, sqrt(2.0) * A[j]);
        }
        /* the six weights, in the copy's order; the row L1 norms of W_v (self) and W1 on the way */
        const DittoTensor *ws[6] = { &y->self_attn.in_w, &y->self_attn.out_w, &y->cross_attn.wq, &y->cross_attn.out_w, &y->w1, &y->w2 };
        uint16_t *dst = h16 + per * i;
        double l1_v = 0, l1_w1 = 0, l1_cv = 0, b_v = 0, b_1 = 0, b_cv = 0;
        for (int k = 0; k < 6 && rc >= 0; k++) {
            const int64_t rows = ws[k]->shape[0], cols = ws[k]->shape[1], n = rows * cols;
            rc = fetch_f32(m, ws[k], h);
            if (rc < 0)
                break;
            finite = finite && all_finite(h, n);
            bound = fmax(bound, max_abs(h, n));
            if (k == 0)
                l1_v = max_row_l1(h + 2 * D * D, D, D);
            if (k == 4)
                l1_w1 = max_row_l1(h, rows, cols);
            ditto_convert(dst, DITTO_F16, h, DITTO_F32, (size_t)n);
            dst += n;
        }
        if (rc >= 0 && (rc = fetch_f32(m, &y->cross_attn.wv, h)) >= 0)
            l1_cv = max_row_l1(h, D, D);
        if (rc >= 0 && (rc = fetch_f32(m, &y->self_attn.bv, h)) >= 0)
            b_v = max_abs(h, D);
        if (rc >= 0 && (rc = fetch_f32(m, &y->b1, h)) >= 0)
            b_1 = max_abs(h, ff);
        if (rc >= 0 && (rc = fetch_f32(m, &y->cross_attn.bv, h)) >= 0)
            b_cv = max_abs(h, D);
        bound = fmax(bound, l1_v * A[0] + b_v);      /* self-attention output (values from a = LN1) */
        bound = fmax(bound, l1_cv * amem + b_cv);    /* cross-attention output (values from the memory rows) */
        bound = fmax(bound, l1_w1 * A[2] + b_1);     /* GELU(W1 LN3 + b1) */
    }
    ditto_free(h);
    if (rc >= 0 && (!finite || !(bound <= 65504.0))) {
        ditto_log(&m->be->log, DITTO_LOG_INFO, "lmdm: the decoder's TF32 operands stay float32 (%s)",
                  finite ? "a bound on them passes float16's 65504" : "non-finite weights");
        ditto_free(h16);
        return 0;
    }
    if (rc >= 0)
        rc = ditto_buffer_alloc(&m->step16_buf, &m->be->allocator, sizeof(uint16_t) * (size_t)(per * d->layers));
    if (rc >= 0)
        rc = m->be->upload(m->be, m->step16_buf.ptr, h16, sizeof(uint16_t) * (size_t)(per * d->layers));
    ditto_free(h16);
    if (rc < 0)
        return ditto_fail(&m->be->log, rc, "lmdm: cannot make the float16 copies of the decoder weights");
    uint16_t *p = m->step16_buf.ptr;
    for (int i = 0; i < d->layers; i++) {
        LmdmDecLayer *y = &m->dec[i];
        const DittoTensor in16 = dev_f16(m, p, 3 * D, D);
        y->self_attn.s_wqk = view_slice(&in16, 0, 0, 2 * D);
        y->self_attn.s_wv = view_slice(&in16, 0, 2 * D, 3 * D);
        y->self_attn.s_out = dev_f16(m, p += 3 * D * D, D, D);
        y->cross_attn.s_wq = dev_f16(m, p += D * D, D, D);
        y->cross_attn.s_out = dev_f16(m, p += D * D, D, D);
        y->s_w1 = dev_f16(m, p += D * D, ff, D);
        y->s_w2 = dev_f16(m, p += ff * D, D, ff);
        p += D * ff;
    }
    *on = true;
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
    m->lin.tf32 = p->tf32;
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
    if (d->layers > 0)
        load_films(&l, m);
    ditto_loader_get(&l, &m->final_w, DITTO_SHAPE(F, D), "final_layer.weight");
    ditto_loader_get(&l, &m->final_b, DITTO_SHAPE(F), "final_layer.bias");

    int rc = ditto_loader_finish(&l);
    if (rc >= 0 && d->enc_layers != 2) {
        /* the encoder depth is not fixed by the forward; accept any, but say so */
        ditto_log(&be->log, DITTO_LOG_WARN, "%s: %d cond_encoder layers (the official LMDM has 2)", cat->path, d->enc_layers);
    }
    if (rc >= 0)
        rc = make_time_table(m);
    if (rc >= 0 && m->lin.tf32 && be->device != DITTO_DEVICE_CPU)
        rc = make_step16(m, &m->op16);
    if (rc >= 0 && m->lin.tf32 && !m->op16) {
        rc = round_step_weights(m);
        if (rc < 0)
            ditto_fail(&be->log, rc, "lmdm: cannot round the decoder weights to TF32");
    }
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
    ditto_buffer_free(&(*m)->step16_buf);
    ditto_weights_free(&(*m)->weights);
    ditto_free((*m)->enc);
    ditto_free((*m)->dec);
    ditto_free(*m);
    *m = NULL;
}

/* ---- forward ---- */

#define CK(expr) do { rc = (expr); if (rc < 0) goto done; } while (0)
#define NEW(t, ...) CK(ditto_arena_tensor(ws, DITTO_F32, DITTO_SHAPE(__VA_ARGS__), &(t)))

/* y = x w^T + b with the options lp (NULL: float32). */
static int linear(DittoLmdm *m, const DittoLinearParams *lp, const DittoTensor *x, const DittoTensor *w, const DittoTensor *b, DittoTensor *y)
{
    return ditto_op_linear_ex(m->be, lp, x, w, b, y);
}

/*
 * Multi-head attention core + out_proj: q (N,Lq,D), k, v (N,Lk,D), any
 * strides (the in-projection already applied) -> y (B,R,D) contiguous, the
 * same rows (B R = N Lq) shaped for the out_proj GEMM.
 */
static int attend(DittoLmdm *m, DittoArena *ws, const DittoLinearParams *lp, const LmdmAttn *w, const DittoTensor *q, const DittoTensor *k,
                  const DittoTensor *v, DittoTensor *y)
{
    DittoBackend *be = m->be;
    const int64_t N = q->shape[0], Lq = q->shape[1], D = m->dims.latent, H = m->dims.heads, dh = D / H;
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor om;
    int rc;
    DittoTensor qh = view_heads(q, H);                                  /* (N,H,Lq,dh) */
    DittoTensor kh = view_heads(k, H);                                  /* (N,H,Lk,dh) */
    DittoTensor vh = view_heads(v, H);                                  /* (N,H,Lk,dh) */
    CK(ditto_arena_tensor(ws, w->s_out.dtype, DITTO_SHAPE(N, Lq, H, dh), &om));   /* the out_proj's operand dtype */
    DittoTensor oh;
    CK(ditto_tensor_permute(&om, (const int[]){ 0, 2, 1, 3 }, &oh));    /* (N,H,Lq,dh) view: heads land concatenated */
    const DittoAttentionParams ap = { .tf32_out = lp && lp->tf32 };     /* om feeds a tf32 out_proj: TF32 values */
    CK(ditto_op_attention_ex(be, &ap, &qh, &kh, &vh, NULL, &oh));        /* softmax(q k^T / sqrt(dh)) v */
    DittoTensor omf = RESHAPE(om, y->shape[0], y->shape[1], D);
    CK(linear(m, lp, &omf, &w->s_out, &w->out_b, y));                   /* out_proj (B,R,D) */
done:
    ditto_arena_release(ws, mark);
    return rc;
}

/*
 * Self-attention with rotary queries/keys within sequences of L rows: a
 * (B,R,D) normalised input and ra = rot(a) (positions 0..L-1 per sequence),
 * R = n L (n sequences per GEMM item) -> y (B,R,D).
 */
static int self_attention(DittoLmdm *m, DittoArena *ws, const DittoLinearParams *lp, const LmdmAttn *w, const DittoTensor *a, const DittoTensor *ra,
                          int64_t L, DittoTensor *y)
{
    const int64_t B = a->shape[0], R = a->shape[1], N = B * (R / L), D = m->dims.latent;
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor qk, v;
    int rc;
    NEW(qk, B, R, 2 * D);
    CK(linear(m, lp, ra, &w->s_wqk, &w->bqk, &qk));                     /* [q | k] = rot(a) [W_q | W_k]^T + b */
    NEW(v, B, R, D);
    CK(linear(m, lp, a, &w->s_wv, &w->bv, &v));                         /* v = a W_v^T + b_v */
    DittoTensor qks = RESHAPE(qk, N, L, 2 * D);
    DittoTensor q = view_slice(&qks, 2, 0, D);                          /* (N,L,D) strided */
    DittoTensor k = view_slice(&qks, 2, D, 2 * D);
    DittoTensor vs = RESHAPE(v, N, L, D);
    CK(attend(m, ws, lp, w, &q, &k, &vs, y));
done:
    ditto_arena_release(ws, mark);
    return rc;
}

/*
 * Two-layer GELU MLP: y = W2 GELU(W1 a + b1) + b2; a (B,R,D) -> y (B,R,D).
 * Float16 weights (op16): linear1 to float32, then GELU into the float16
 * operand of linear2 (one rounding after GELU, as tf32_out does).
 */
static int feed_forward(DittoLmdm *m, DittoArena *ws, const DittoLinearParams *lp, const DittoTensor *w1, const DittoTensor *b1,
                        const DittoTensor *w2, const DittoTensor *b2, const DittoTensor *a, DittoTensor *y)
{
    const int64_t B = a->shape[0], R = a->shape[1], ff = w1->shape[0];
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor f;
    int rc;
    NEW(f, B, R, ff);
    if (w2->dtype == DITTO_F16) {
        DittoTensor g;
        CK(ditto_arena_tensor(ws, DITTO_F16, DITTO_SHAPE(B, R, ff), &g));
        CK(linear(m, lp, a, w1, b1, &f));                               /* linear1 (B,R,ff) */
        CK(ditto_op_act(m->be, DITTO_UNARY_GELU, 0.0f, &f, &g));
        CK(linear(m, lp, &g, w2, b2, y));                               /* linear2 (B,R,D) */
        goto done;
    }
    DittoLinearParams l1 = lp ? *lp : (DittoLinearParams){ 0 };
    l1.gelu = true;
    l1.tf32_out = l1.tf32;                                              /* f feeds a tf32 linear2: TF32 values */
    CK(linear(m, &l1, a, w1, b1, &f));                                  /* GELU(linear1) (B,R,ff) */
    CK(linear(m, lp, &f, w2, b2, y));                                   /* linear2 (B,R,D) */
done:
    ditto_arena_release(ws, mark);
    return rc;
}

/*
 * Pre-norm of a block, one fused op: h += FiLM(y) of the previous block when
 * film is given ((1 + scale) y + shift, views broadcast over frames), then
 * a = LN(h) and ra = rot(LN(h)) with positions 0..L-1 along dim -2 of h;
 * a or ra may be NULL. tf32: a and ra feed tf32 linears, as TF32 values.
 */
typedef struct LmdmFilm {
    const DittoTensor *y, *scale, *shift;
} LmdmFilm;

static int pre_norm(DittoLmdm *m, bool tf32, DittoTensor *h, const LmdmFilm *film, const DittoTensor *ln_w, const DittoTensor *ln_b, DittoTensor *a,
                    DittoTensor *ra)
{
    const DittoLnRotaryParams p = { .eps = LMDM_LN_EPS, .pos_offset = 0, .tf32_out = tf32 };
    return ditto_op_layer_norm_rotary(m->be, &p, h, film ? film->y : NULL, film ? film->scale : NULL, film ? film->shift : NULL, ln_w, ln_b,
                                      ra ? &m->rot_freqs : NULL, a, ra);
}

/* cond_encoder.{i}, in place on c (B,L,D); float32 linears. */
static int enc_layer(DittoLmdm *m, DittoArena *ws, const LmdmEncLayer *w, DittoTensor *c)
{
    DittoBackend *be = m->be;
    const int64_t B = c->shape[0], L = c->shape[1], D = m->dims.latent;
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor a, ra, y;
    int rc;
    NEW(a, B, L, D);
    NEW(ra, B, L, D);
    NEW(y, B, L, D);
    CK(pre_norm(m, false, c, NULL, &w->ln1_w, &w->ln1_b, &a, &ra));                        /* a = norm1(c), ra = rot(a) */
    CK(self_attention(m, ws, NULL, &w->attn, &a, &ra, L, &y));                      /* MHA(rot a, rot a, a) */
    CK(ditto_op_binary(be, DITTO_BINARY_ADD, c, &y, c));                            /* c = c + sa */
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, c, &w->ln2_w, &w->ln2_b, &a));   /* a = norm2(c) */
    CK(feed_forward(m, ws, NULL, &w->w1, &w->b1, &w->w2, &w->b2, &a, &y));
    CK(ditto_op_binary(be, DITTO_BINARY_ADD, c, &y, c));                            /* c = c + ff */
done:
    ditto_arena_release(ws, mark);
    return rc;
}

/*
 * seqTransDecoder.stack.{i}, in place on h (B,2,L,D) (both passes of each
 * window: one GEMM item of 2L rows); mem_k, mem_v (2B,L+2,D) this layer's
 * cross-attention keys/values; film (B,2,3,2D) this layer's FiLM rows of
 * this step, [1 + scale_j | shift_j]. The FiLM residuals are folded into the
 * next pre-norm: prev is the previous layer's FiLM 3 (NULL for layer 0), and
 * on return y (B,2,L,D) holds this layer's feed-forward output and *next its
 * FiLM 3 (scale and shift views of film), for the next layer or decode() to
 * apply. a, ra: (B,2L,D) scratch.
 */
static int dec_layer(DittoLmdm *m, DittoArena *ws, const LmdmDecLayer *w, DittoTensor *h, const DittoTensor *mem_k, const DittoTensor *mem_v,
                     const DittoTensor *film, const LmdmFilm *prev, DittoTensor *y, DittoTensor *a, DittoTensor *ra, DittoTensor *next_scale,
                     DittoTensor *next_shift)
{
    const int64_t B = h->shape[0], L = h->shape[2], N = 2 * B, D = m->dims.latent;
    const DittoLinearParams *lp = &m->lin;
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor q, sp1[3], shift[3];
    int rc;
    for (int j = 0; j < 3; j++) {
        DittoTensor fj = view_select(film, 2, j);                        /* (B,2,2D) */
        DittoTensor sc = view_slice(&fj, 2, 0, D), sh = view_slice(&fj, 2, D, 2 * D);
        sp1[j] = view_insert(&sc, 2, 1, 0);                               /* (B,2,1,D): broadcast over frames */
        shift[j] = view_insert(&sh, 2, 1, 0);
    }
    DittoTensor a4 = RESHAPE(*a, B, 2, L, D), ra4 = RESHAPE(*ra, B, 2, L, D), yf = RESHAPE(*y, B, 2 * L, D);

    /* self-attention block */
    CK(pre_norm(m, lp->tf32, h, prev, &w->ln_w[0], &w->ln_b[0], &a4, &ra4));                     /* h += FiLM_3 of the last layer; a = norm1(h), rot(a) */
    CK(self_attention(m, ws, lp, &w->self_attn, a, ra, L, &yf));                       /* MHA(rot a, rot a, a) */

    /* cross-attention block: keys/values of mem = norm_cond(concat(c, tt)) precomputed */
    const LmdmFilm f1 = { y, &sp1[0], &shift[0] };
    CK(pre_norm(m, lp->tf32, h, &f1, &w->ln_w[1], &w->ln_b[1], NULL, &ra4));                      /* h += (1 + scale_1) sa + shift_1; rot(norm2(h)) */
    NEW(q, B, 2 * L, D);
    CK(linear(m, lp, ra, &w->cross_attn.s_wq, &w->cross_attn.bq, &q));                  /* q = rot(a) W_q^T + b_q */
    DittoTensor qs = RESHAPE(q, N, L, D);
    CK(attend(m, ws, lp, &w->cross_attn, &qs, mem_k, mem_v, &yf));                      /* MHA(rot a, rot mem, mem) */

    /* feed-forward block */
    const LmdmFilm f2 = { y, &sp1[1], &shift[1] };
    CK(pre_norm(m, lp->tf32, h, &f2, &w->ln_w[2], &w->ln_b[2], &a4, NULL));                       /* h += FiLM_2 (ca); a = norm3(h) */
    CK(feed_forward(m, ws, lp, &w->s_w1, &w->b1, &w->s_w2, &w->b2, a, &yf));            /* y; FiLM 3 goes to the caller */
    *next_scale = sp1[2];                                                                /* (prev was read above: it may be these) */
    *next_shift = shift[2];
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
    DittoTensor c, pooled, pn, p1, p2, cm, mem, rmem, kv;
    int rc;
    NEW(st->ch, B, 2, D);
    NEW(st->mem, 2, NL, B, 2, L + 2, D);
    st->mem_k = view_select(&st->mem, 0, 0);
    st->mem_v = view_select(&st->mem, 0, 1);
    mark = ditto_arena_mark(ws);

    /* condition tokens of the conditioned pass */
    NEW(c, B, L, D);
    CK(ditto_op_linear(be, cond, &m->condp_w, &m->condp_b, &c));         /* cond_projection (B,L,D) */
    for (int i = 0; i < d->enc_layers; i++)
        CK(enc_layer(m, ws, &m->enc[i], &c));                             /* cond_encoder.{i} */
    ditto_tap(tap, "cond_tokens", &c);

    /* pooled condition: ch[:,0] = Lin(SiLU(Lin(LN(mean_L c)))), ch[:,1] = null_cond_hidden */
    NEW(pooled, B, 1, D);
    CK(ditto_op_reduce(be, DITTO_REDUCE_MEAN, 1, &c, &pooled));           /* mean over frames (B,1,D) */
    NEW(pn, B, 1, D);
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, &pooled, &m->pool_ln_w, &m->pool_ln_b, &pn));
    NEW(p1, B, 1, D);
    CK(ditto_op_linear(be, &pn, &m->pool1_w, &m->pool1_b, &p1));
    CK(ditto_op_act(be, DITTO_UNARY_SILU, 0, &p1, &p1));
    NEW(p2, B, 1, D);
    CK(ditto_op_linear(be, &p1, &m->pool2_w, &m->pool2_b, &p2));          /* (B,1,D) */
    DittoTensor ch0 = view_select(&st->ch, 1, 0);                       /* (B,D) strided */
    DittoTensor p2v = RESHAPE(p2, B, D);
    CK(ditto_op_copy(be, &p2v, &ch0));
    ditto_tap(tap, "cond_hidden", &p2v);
    DittoTensor nh = view_select(&m->null_cond_hidden, 0, 0);           /* (D) */
    DittoTensor nhb = view_repeat(&nh, B);                              /* (B,D) broadcast */
    DittoTensor ch1 = view_select(&st->ch, 1, 1);
    CK(ditto_op_copy(be, &nhb, &ch1));

    /* memory tokens 0..L-1: norm_cond([c ; null_cond_embed]) per window and pass (B,2,L,D) */
    NEW(cm, B, 2, L, D);
    DittoTensor cm0 = view_select(&cm, 1, 0);
    CK(ditto_op_copy(be, &c, &cm0));
    DittoTensor ne = view_select(&m->null_cond_embed, 0, 0);            /* (L,D) */
    DittoTensor neb = view_repeat(&ne, B);                              /* (B,L,D) broadcast */
    DittoTensor cm1 = view_select(&cm, 1, 1);
    CK(ditto_op_copy(be, &neb, &cm1));
    NEW(mem, B, 2 * L, D);
    DittoTensor cmf = RESHAPE(cm, B, 2 * L, D);
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, &cmf, &m->normc_w, &m->normc_b, &mem));   /* norm_cond */
    NEW(rmem, B, 2 * L, D);
    DittoTensor mems = RESHAPE(mem, 2 * B, L, D), rmems = RESHAPE(rmem, 2 * B, L, D);
    CK(ditto_op_rotary(be, 0, &mems, &m->rot_freqs, &rmems));           /* rot(mem), positions 0..L-1 */

    /* their cross-attention keys and values in every layer */
    NEW(kv, B, 2 * L, D);
    DittoTensor kv4 = RESHAPE(kv, B, 2, L, D);
    for (int i = 0; i < NL; i++) {
        const LmdmAttn *w = &m->dec[i].cross_attn;
        DittoTensor lk = view_select(&st->mem_k, 0, i);                 /* (B,2,L+2,D) */
        DittoTensor lv = view_select(&st->mem_v, 0, i);
        DittoTensor lk_c = view_slice(&lk, 2, 0, L);                    /* (B,2,L,D) */
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

/*
 * e (n,D) = sinusoid(times[i]) from the descending table: a run of equally
 * spaced times (a DDIM schedule is one or a few) is one strided copy.
 */
static int gather_times(DittoLmdm *m, const int *times, int n, DittoTensor *e)
{
    const int64_t D = m->dims.latent;
    for (int i = 0; i < n;) {
        int j = i + 1;
        int64_t gap = j < n ? (int64_t)times[i] - times[j] : 0;   /* row step in the descending table */
        while (gap >= 0 && j < n && (int64_t)times[j - 1] - times[j] == gap)
            j++;
        if (gap < 0)
            gap = 0;
        DittoTensor row = view_select(&m->time_table, 0, DITTO_LMDM_T - 1 - times[i]);   /* (D) */
        DittoTensor src = view_insert(&row, 0, j - i, gap * D);          /* (j-i,D) */
        DittoTensor dst = view_slice(e, 0, i, j);
        DITTO_TRY(ditto_op_copy(m->be, &src, &dst));
        i = j;
    }
    return 0;
}

/*
 * Everything that depends on the time step (and the window's pooled
 * condition) but not on x, for n time steps times[0..n), left in the arena:
 *   film (B,S,2,layers,3,2D)  FiLM j of every layer per window, step, pass:
 *                             [1 + scale_j | shift_j] = film_j.block.1(Mish(tc)) (+1 on scale)
 *   tkv (2,layers,n,2,D)      keys [0] and values [1] of the time tokens (memory rows L, L+1) per layer
 * A schedule (per_item false): every window at every step, S = n. One time
 * per window (per_item, n == B): window b at times[b] only, S = 1, and tkv's
 * axis n is the window axis.
 * GEMM items (batch consistency): the time MLP and the token keys/values run
 * as one item of n rows, or per_item as n items of one step, whose rows then
 * do not depend on n = B; the FiLM GEMM has one item of 2S rows per window.
 */
static int time_tables(DittoLmdm *m, DittoArena *ws, const DittoLmdmCond *st, const int *times, int n, bool per_item, DittoTensor *film,
                       DittoTensor *tkv)
{
    DittoBackend *be = m->be;
    const DittoLmdmDims *d = &m->dims;
    const int64_t B = st->batch, L = d->seq_len, D = d->latent, TH = d->time_hidden, NL = d->layers;
    const int64_t G = per_item ? n : 1, R = n / G;                      /* GEMM items x rows of the time MLP */
    const int64_t S = per_item ? 1 : n;                                 /* FiLM steps per window */
    DITTO_ASSERT(!per_item || n == B);
    DittoArenaMark outer = ditto_arena_mark(ws);
    DittoArenaMark mark;
    DittoTensor e, th, tcb, tt, mt, memt, rmemt;
    int rc;
    NEW(*film, B, S, 2, NL, 3, 2 * D);
    NEW(*tkv, 2, NL, n, 2, D);
    mark = ditto_arena_mark(ws);

    /* time MLP: e = sinusoid(t), th = Mish(time_mlp.1(e)), tc = to_time_cond(th), tt = to_time_tokens(th) */
    NEW(e, G, R, D);
    DittoTensor e2 = RESHAPE(e, n, D);
    CK(gather_times(m, times, n, &e2));
    NEW(th, G, R, TH);
    CK(ditto_op_linear(be, &e, &m->time_w, &m->time_b, &th));             /* time_mlp.1 (n,4D) */
    CK(ditto_op_act(be, DITTO_UNARY_MISH, 0, &th, &th));                  /* time_mlp.2 */
    NEW(tcb, G, R, D);
    CK(ditto_op_linear(be, &th, &m->tcond_w, &m->tcond_b, &tcb));         /* to_time_cond (n,D) */
    NEW(tt, G, R, 2 * D);
    CK(ditto_op_linear(be, &th, &m->ttok_w, &m->ttok_b, &tt));            /* to_time_tokens (n,2D): token r = values [rD, rD+D) */

    /* FiLM input Mish(tc), tc = time cond + pooled condition (B,S,2,D); every FiLM of every layer in one GEMM */
    NEW(mt, B, S, 2, D);
    DittoTensor tc2 = RESHAPE(tcb, n, D);
    DittoTensor tc3 = view_insert(&tc2, 1, 1, 0);                         /* (n,1,D): (1,S,1,D) broadcast, or per_item (B,1,D) */
    if (per_item)
        tc3 = view_insert(&tc3, 1, 1, 0);                                 /* (B,1,1,D) */
    DittoTensor ch4 = view_insert(&st->ch, 1, 1, 0);                      /* (B,1,2,D) */
    CK(ditto_op_binary(be, DITTO_BINARY_ADD, &tc3, &ch4, &mt));            /* tc (B,S,2,D) */
    CK(ditto_op_act(be, DITTO_UNARY_MISH, 0, &mt, &mt));                  /* film_j.block.0 */
    DittoTensor mtf = RESHAPE(mt, B, 2 * S, D);
    DittoTensor filmf = RESHAPE(*film, B, 2 * S, NL * 6 * D);
    CK(ditto_op_linear(be, &mtf, &m->film_w, &m->film_b, &filmf));        /* film_j.block.1, all j and layers */
    DittoTensor f5 = RESHAPE(*film, B, S, 2, NL * 3, 2 * D);
    DittoTensor scale = view_slice(&f5, 4, 0, D);
    CK(ditto_op_unary(be, &(DittoUnaryParams){ DITTO_UNARY_AFFINE, 1.0f, 1.0f }, &scale, &scale));   /* scale + 1 */

    /* time tokens: memory rows L, L+1 = norm_cond(tt) at rotary positions L, L+1; their keys/values per layer */
    DittoTensor tt3 = RESHAPE(tt, n, 2, D);
    NEW(memt, G, 2 * R, D);
    DittoTensor memt3 = RESHAPE(memt, n, 2, D);
    CK(ditto_op_layer_norm(be, LMDM_LN_EPS, false, &tt3, &m->normc_w, &m->normc_b, &memt3));   /* norm_cond */
    NEW(rmemt, G, 2 * R, D);
    DittoTensor rmemt3 = RESHAPE(rmemt, n, 2, D);
    CK(ditto_op_rotary(be, L, &memt3, &m->rot_freqs, &rmemt3));           /* rot(mem), positions L, L+1 */
    for (int i = 0; i < NL; i++) {
        const LmdmAttn *w = &m->dec[i].cross_attn;
        DittoTensor k = view_select(tkv, 0, 0), v = view_select(tkv, 0, 1);
        DittoTensor ki = view_select(&k, 0, i), vi = view_select(&v, 0, i);   /* (n,2,D) */
        DittoTensor kf = RESHAPE(ki, G, 2 * R, D), vf = RESHAPE(vi, G, 2 * R, D);
        CK(ditto_op_linear(be, &rmemt, &w->wk, &w->bk, &kf));
        CK(ditto_op_linear(be, &memt, &w->wv, &w->bv, &vf));
    }
done:
    ditto_arena_release(ws, rc < 0 ? outer : mark);
    return rc;
}

int ditto_lmdm_steps_init(DittoLmdm *m, DittoArena *ws, DittoLmdmCond *st, const int *times, int nsteps)
{
    if (!m || !ws || !st || !times || st->batch < 1)
        return DITTO_ERR_INVAL;
    if (nsteps < 1)
        return ditto_fail(&m->be->log, DITTO_ERR_RANGE, "lmdm: %d time steps", nsteps);
    for (int i = 0; i < nsteps; i++)
        if (times[i] < 0 || times[i] >= DITTO_LMDM_T)
            return ditto_fail(&m->be->log, DITTO_ERR_RANGE, "lmdm: time step %d outside [0, %d)", times[i], DITTO_LMDM_T);
    st->nsteps = 0;
    DITTO_TRY(time_tables(m, ws, st, times, nsteps, false, &st->film, &st->time_kv));
    st->nsteps = nsteps;
    return 0;
}

/*
 * The decoder on both passes of every window: x (B,L,F), this step's FiLM
 * rows film (B,2,layers,3,2D) and time-token keys/values tkv
 * (2,layers,B,2,D) -> out (B,2,L,F): [b,0] conditioned, [b,1] unconditioned.
 */
static int decode(DittoLmdm *m, DittoArena *ws, DittoLmdmCond *st, const DittoTensor *x, const DittoTensor *film, const DittoTensor *tkv,
                  DittoTensor *out)
{
    DittoBackend *be = m->be;
    const DittoLmdmDims *d = &m->dims;
    const int64_t B = st->batch, L = d->seq_len, D = d->latent, F = d->nfeats;
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor xin, h, y, a, ra;
    int rc;

    /* memory rows L, L+1 of every layer, window and pass: this step's time tokens, one copy for keys and values */
    DittoTensor slots = view_slice(&st->mem, 4, L, L + 2);              /* (2,layers,B,2,2,D) */
    DittoTensor src = view_insert(tkv, 3, 2, 0);                        /* the same for both passes */
    CK(ditto_op_copy(be, &src, &slots));

    /* input projection: concat(x, kp_cond repeated over frames), the same for both passes (B,2L,2F) */
    NEW(xin, B, 2, L, 2 * F);
    DittoTensor x2 = view_insert(x, 1, 2, 0);                            /* (B,2,L,F) */
    DittoTensor kp2 = view_insert(&st->cond_frame, 1, 2, 0);
    DittoTensor kpl = view_insert(&kp2, 2, L, 0);                        /* (B,2,L,F) */
    const DittoTensor *parts[2] = { &x2, &kpl };
    CK(ditto_op_concat(be, 3, 2, parts, &xin));
    NEW(h, B, 2 * L, D);
    DittoTensor xinf = RESHAPE(xin, B, 2 * L, 2 * F);
    CK(linear(m, NULL, &xinf, &m->inp_w, &m->inp_b, &h));                /* input_projection (B,2L,D), float32 */

    /* decoder stack: each window's two passes are one GEMM item of 2L rows; each FiLM residual lands in the next pre-norm */
    NEW(y, B, 2, L, D);
    const DittoDType adt = m->op16 ? DITTO_F16 : DITTO_F32;              /* the normalised operands of the step's linears */
    CK(ditto_arena_tensor(ws, adt, DITTO_SHAPE(B, 2 * L, D), &a));
    CK(ditto_arena_tensor(ws, adt, DITTO_SHAPE(B, 2 * L, D), &ra));
    DittoTensor h4 = RESHAPE(h, B, 2, L, D), f3_scale, f3_shift;
    const LmdmFilm f3 = { &y, &f3_scale, &f3_shift };                    /* the last layer's FiLM 3, applied by the next pre-norm */
    for (int i = 0; i < d->layers; i++) {
        DittoTensor lk = view_select(&st->mem_k, 0, i);                  /* (B,2,L+2,D) */
        DittoTensor lv = view_select(&st->mem_v, 0, i);
        DittoTensor lkf = RESHAPE(lk, 2 * B, L + 2, D);
        DittoTensor lvf = RESHAPE(lv, 2 * B, L + 2, D);
        DittoTensor fl = view_select(film, 2, i);                        /* (B,2,3,2D) */
        CK(dec_layer(m, ws, &m->dec[i], &h4, &lkf, &lvf, &fl, i ? &f3 : NULL, &y, &a, &ra, &f3_scale, &f3_shift));
    }
    if (d->layers > 0)
        CK(ditto_op_film(be, &h4, &y, &f3_scale, &f3_shift, &h4));       /* FiLM 3 of the last layer */
    DittoTensor outf = RESHAPE(*out, B, 2 * L, F);
    CK(linear(m, NULL, &h, &m->final_w, &m->final_b, &outf));             /* final_layer (B,2L,F), float32 */
done:
    ditto_arena_release(ws, mark);
    return rc;
}

/* Taps "x_start_cond" / "x_start_uncond" (B,L,F) of out (B,2,L,F), as contiguous copies. */
static int tap_passes(DittoLmdm *m, DittoArena *ws, const DittoTensor *out, const DittoTap *tap)
{
    if (!tap)
        return 0;
    const int64_t B = out->shape[0], L = out->shape[2], F = out->shape[3];
    DittoArenaMark mark = ditto_arena_mark(ws);
    DittoTensor t;
    int rc;
    NEW(t, B, L, F);
    for (int p = 0; p < 2; p++) {
        DittoTensor v = view_select(out, 1, p);
        CK(ditto_op_copy(m->be, &v, &t));
        ditto_tap(tap, p == 0 ? "x_start_cond" : "x_start_uncond", &t);
    }
done:
    ditto_arena_release(ws, mark);
    return rc;
}

int ditto_lmdm_denoise_step(DittoLmdm *m, DittoArena *ws, DittoLmdmCond *st, const DittoTensor *x, int step, DittoTensor *out, const DittoTap *tap)
{
    if (!m || !ws || !st || !x || !out)
        return DITTO_ERR_INVAL;
    const DittoLmdmDims *d = &m->dims;
    const int64_t B = st->batch, L = d->seq_len, F = d->nfeats;
    DITTO_TRY(check_tensor(m, "x", x, DITTO_SHAPE(B, L, F)));
    DITTO_TRY(check_tensor(m, "out", out, DITTO_SHAPE(B, 2, L, F)));
    if (step < 0 || step >= st->nsteps)
        return ditto_fail(&m->be->log, DITTO_ERR_RANGE, "lmdm: step %d outside the %d of ditto_lmdm_steps_init", step, st->nsteps);
    if (out->data == x->data)
        return ditto_fail(&m->be->log, DITTO_ERR_INVAL, "lmdm: out must not alias x");
    DittoTensor film = view_select(&st->film, 1, step);                  /* (B,2,layers,3,2D) */
    DittoTensor kv = view_select(&st->time_kv, 2, step);                 /* (2,layers,2,D) */
    DittoTensor tkv = view_insert(&kv, 2, B, 0);                         /* every window at this step */
    DITTO_TRY(decode(m, ws, st, x, &film, &tkv, out));
    return tap_passes(m, ws, out, tap);
}

int ditto_lmdm_denoise(DittoLmdm *m, DittoArena *ws, DittoLmdmCond *st, const DittoTensor *x, const int *times, int ntimes, DittoTensor *x_start,
                       const DittoTap *tap)
{
    if (!m || !ws || !st || !x || !times || !x_start)
        return DITTO_ERR_INVAL;
    DittoBackend *be = m->be;
    const DittoLmdmDims *d = &m->dims;
    const int64_t B = st->batch, L = d->seq_len, F = d->nfeats;
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
    DittoTensor film, tkv, out;
    int rc;

    /* the time tables of these times: one step for every window, or each window at its own time */
    const bool per_item = ntimes > 1;
    CK(time_tables(m, ws, st, times, ntimes, per_item, &film, &tkv));
    DittoTensor fb = view_select(&film, 1, 0);                           /* (B,2,layers,3,2D) */
    DittoTensor kvb = tkv;                                               /* (2,layers,B,2,D) */
    if (!per_item) {
        DittoTensor k0 = view_select(&tkv, 2, 0);
        kvb = view_insert(&k0, 2, B, 0);
    }
    NEW(out, B, 2, L, F);
    CK(decode(m, ws, st, x, &fb, &kvb, &out));
    CK(tap_passes(m, ws, &out, tap));

    /* guidance: x_start = U + w (C - U) */
    DittoTensor xc = view_select(&out, 1, 0), xu = view_select(&out, 1, 1);   /* (B,L,F) */
    const DittoDdimStepParams gp = { .guidance = DITTO_LMDM_GUIDANCE };
    CK(ditto_op_ddim_step(be, &gp, &xc, &xu, NULL, NULL, x_start, NULL, NULL));
done:
    ditto_arena_release(ws, mark);
    return rc;
}
