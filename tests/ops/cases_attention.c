/*
 * Attention and rotary against naive double references.
 *
 * attention: y = softmax(scale q k^T + mask) v per (batch, head), with strided
 * q/k/v views (heads split out of a packed projection, transposed k, sliced
 * last dims that force packing), strided y (a permuted (B,Lq,H,Dv) buffer:
 * heads concatenated per row, as the LMDM writes it; a transposed y), masks
 * of rank 2 and 4 with broadcast dims and -inf entries, Lq != Lk, Dv != D,
 * more query rows than one work block, and the LMDM shapes (B 2, 8 heads of
 * 64, L 80, cross-attention Lk 82) as lmdm.c passes them. The CUDA backend
 * has a tiled kernel (float32, head dim 64, up to 128 keys, no mask, rows of
 * q/k/v 16-byte aligned with unit stride: the LMDM shapes; tiles of 16 query
 * rows, or 8 when the grid is small against the SM count), a short-key
 * kernel (K and V of a head in shared memory: other shapes with head dims up
 * to 128) and a general one (long key rows, head dims above 128): cases
 * cover all three, the tiled one with both tile sizes (8 rows: the small
 * "tile_" cases of 2 to 6 sequence-heads; 16 rows: the LMDM cases and
 * tile_big_grid), partial query tiles, 1, 33, 128 and 129 keys and a
 * transposed y.
 * Tolerance 1e-5 (rel_l2 and max_abs/max_ref): two float GEMMs with K = D and
 * K = Lk and a float softmax; errors grow like sqrt(K) ulp, ~1e-7 measured.
 *
 * rotary: theta = (float)p * freqs[k] rounded to float as the spec says, then
 * cos/sin in double; y within a few ulp: 1e-6.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ditto/ditto_error.h"
#include "ops/ops.h"
#include "op_util.h"
#include "test_ops.h"

static double at4(const DittoTensor *t, int64_t a, int64_t b, int64_t i, int64_t j)
{
    const int64_t *s = t->stride;
    return ((const float *)t->data)[a * s[0] + b * s[1] + i * s[2] + j * s[3]];
}

/* mask element for (b, h, i, j): rank <= 4, aligned right, size-1 dims read index 0 */
static double mask_at(const DittoTensor *m, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const int64_t full[4] = { b, h, i, j };
    int64_t off = 0;
    for (int d = 0; d < m->ndim; d++) {
        int64_t x = full[4 - m->ndim + d];
        off += (m->shape[d] == 1 ? 0 : x) * m->stride[d];
    }
    return ((const float *)m->data)[off];
}

/* y layouts: contiguous (B,H,Lq,Dv); a permuted (B,Lq,H,Dv) buffer; a permuted (B,H,Dv,Lq) buffer (column stride Lq) */
enum { Y_DENSE = 0, Y_HEADS_LAST, Y_TRANSPOSED };

/*
 * tf32_out: y must be TF32 values (low 13 mantissa bits zero) within one TF32 ulp of the reference, rounded the same way.
 * y16: y float16 on a device (the LMDM's float16 operands of out_proj), within one float16 ulp of the rounded reference.
 */
static void attention_run_opts(TestCtx *c, const char *name, float scale, View q, View k, View v, const View *mask, int ylayout, bool tf32_out,
                               bool y16)
{
    if (y16 && c->be->device == DITTO_DEVICE_CPU)
        return;
    int64_t B = q.h.shape[0], H = q.h.shape[1], Lq = q.h.shape[2], D = q.h.shape[3];
    int64_t Lk = k.h.shape[2], Dv = v.h.shape[3];
    static const int perm_heads_last[4] = { 0, 2, 1, 3 }, perm_transposed[4] = { 0, 1, 3, 2 };
    const int64_t ysh[3][4] = { { B, H, Lq, Dv }, { B, Lq, H, Dv }, { B, H, Dv, Lq } };
    TT *y = y16 ? tt_new_f16dev(c, 4, ysh[ylayout]) : new_out(c, DITTO_F32, 4, ysh[ylayout]);
    if (y16)
        tt_to_dev(y);
    View yv = view_of(y);
    if (ylayout == Y_HEADS_LAST)
        yv = view_permute(yv, perm_heads_last);
    else if (ylayout == Y_TRANSPOSED)
        yv = view_permute(yv, perm_transposed);
    double *ref = malloc(sizeof(double) * (size_t)(B * H * Lq * Dv));
    double *p = malloc(sizeof(double) * (size_t)Lk);
    if (!ref || !p)
        abort();
    double sc = scale != 0 ? scale : 1.0 / sqrt((double)D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < Lk; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += at4(&q.h, b, h, i, d) * at4(&k.h, b, h, j, d);
                    p[j] = sc * s + (mask ? mask_at(&mask->h, b, h, i, j) : 0);
                    mx = fmax(mx, p[j]);
                }
                for (int64_t j = 0; j < Lk; j++) {
                    p[j] = exp(p[j] - mx);
                    sum += p[j];
                }
                for (int64_t e = 0; e < Dv; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < Lk; j++)
                        acc += p[j] * at4(&v.h, b, h, j, e);
                    /* index of y's buffer (row-major in its own shape) */
                    const int64_t *st = yv.h.stride;
                    ref[b * st[0] + h * st[1] + i * st[2] + e * st[3]] = acc / sum;
                }
            }
    const DittoAttentionParams ap = { .scale = scale, .tf32_out = tf32_out };
    int rc = ditto_op_attention_ex(c->be, &ap, &q.d, &k.d, &v.d, mask ? &mask->d : NULL, &yv.d);
    if (y16) {
        const int64_t n = B * H * Lq * Dv;
        for (int64_t i = 0; i < n; i++)
            ref[i] = ditto_half_to_f32(ditto_half_from_f32((float)ref[i]));
        op_check(c, name, rc, y, ref, 1e-3, 2e-3);
    } else if (tf32_out) {
        const int64_t n = B * H * Lq * Dv;
        for (int64_t i = 0; i < n; i++)
            ref[i] = ditto_tf32_round((float)ref[i]);
        if (op_check(c, name, rc, y, ref, 2e-3, 2e-3) && !test_fp16(c)) {
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) {
                uint32_t u;
                memcpy(&u, &tt_f32(y)[i], sizeof u);
                bad += (u & 0x1fffu) != 0;
            }
            char n2[160];
            snprintf(n2, sizeof n2, "%s: TF32 values", name);
            test_report(c, n2, bad == 0, "%lld of %lld outputs with low mantissa bits", (long long)bad, (long long)n);
        }
    } else {
        op_check(c, name, rc, y, ref, 1e-5, 1e-5);
    }
    free(p);
    free(ref);
    tt_free(y);
}

static void attention_run_y(TestCtx *c, const char *name, float scale, View q, View k, View v, const View *mask, int ylayout)
{
    attention_run_opts(c, name, scale, q, k, v, mask, ylayout, false, false);
}

static void attention_run(TestCtx *c, const char *name, float scale, View q, View k, View v, const View *mask)
{
    attention_run_y(c, name, scale, q, k, v, mask, Y_DENSE);
}

/* Contiguous q, k, v of the given sizes, optional random mask of mask_shape with -inf where (i + j) % 5 == 1. */
static void attention_case(TestCtx *c, const char *name, int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv,
                           float scale, int mask_ndim, const int64_t *mask_shape)
{
    if (!test_selected(c, name))
        return;
    TT *q = new_normal(c, 4, (int64_t[]){ B, H, Lq, D });
    TT *k = new_normal(c, 4, (int64_t[]){ B, H, Lk, D });
    TT *v = new_normal(c, 4, (int64_t[]){ B, H, Lk, Dv });
    TT *m = NULL;
    View mv;
    if (mask_ndim) {
        m = tt_new(c, DITTO_F32, mask_ndim, mask_shape);
        tt_fill_uniform(m, -3, 0);
        int64_t n = ditto_tensor_numel(&m->host), last = mask_shape[mask_ndim - 1];
        int64_t rows = mask_ndim >= 2 ? mask_shape[mask_ndim - 2] : 1;
        for (int64_t e = 0; e < n; e++) {
            int64_t j = e % last, i = (e / last) % rows;
            if ((i + j) % 5 == 1 && j > 0)   /* key 0 is never masked: no row is fully -inf */
                tt_f32(m)[e] = -INFINITY;
        }
        tt_to_dev(m);
        mv = view_of(m);
    }
    attention_run(c, name, scale, view_of(q), view_of(k), view_of(v), m ? &mv : NULL);
    tt_free(q);
    tt_free(k);
    tt_free(v);
    tt_free(m);
}

/* Self-attention with q, k, v split out of a packed (B, L, 3 E) projection, E = H D. */
static void attention_packed(TestCtx *c, const char *name, int64_t B, int64_t L, int64_t H, int64_t D)
{
    if (!test_selected(c, name))
        return;
    int64_t E = H * D;
    TT *x = new_normal(c, 3, (int64_t[]){ B, L, 3 * E });
    View x5 = view_reshape(view_of(x), 5, (int64_t[]){ B, L, 3, H, D });
    View qkv[3];
    for (int i = 0; i < 3; i++)
        qkv[i] = view_permute(view_select(x5, 2, i), (int[]){ 0, 2, 1, 3 });   /* (B, H, L, D) */
    attention_run(c, name, 0, qkv[0], qkv[1], qkv[2], NULL);
    tt_free(x);
}

static void test_attention(TestCtx *c)
{
    attention_case(c, "attention/basic", 3, 2, 7, 7, 16, 16, 0, 0, NULL);
    attention_case(c, "attention/b1_scale", 1, 3, 5, 9, 8, 12, 0.3f, 0, NULL);
    attention_case(c, "attention/lq_ne_lk_dv", 3, 2, 5, 11, 6, 9, 0, 0, NULL);
    attention_case(c, "attention/mask_lq_lk", 3, 2, 5, 11, 6, 9, 0, 2, (int64_t[]){ 5, 11 });
    attention_case(c, "attention/mask_b11k", 3, 2, 5, 11, 6, 9, 0, 4, (int64_t[]){ 3, 1, 1, 11 });
    attention_case(c, "attention/mask_full", 3, 2, 5, 11, 6, 9, 0, 4, (int64_t[]){ 3, 2, 5, 11 });
    attention_case(c, "attention/mask_1h1k", 3, 2, 5, 11, 6, 9, 0, 3, (int64_t[]){ 2, 1, 11 });
    attention_case(c, "attention/long_q_mask", 1, 2, 150, 33, 8, 5, 0, 2, (int64_t[]){ 150, 33 });
    attention_case(c, "attention/lq1", 3, 2, 1, 13, 8, 4, 0, 0, NULL);
    attention_case(c, "attention/lk1_d1", 1, 2, 6, 1, 1, 3, 0, 0, NULL);
    attention_packed(c, "attention/packed_qkv", 3, 9, 2, 4);
    attention_packed(c, "attention/lmdm_self", 2, 80, 8, 64);
    /* head dims at and beyond the short-key kernel's limit (128); long key rows: the general CUDA kernel */
    attention_case(c, "attention/d128", 2, 2, 19, 20, 128, 128, 0, 0, NULL);
    attention_case(c, "attention/d129", 1, 2, 7, 10, 129, 33, 0, 0, NULL);
    attention_case(c, "attention/long_k", 1, 3, 21, 300, 64, 64, 0, 0, NULL);
    attention_case(c, "attention/long_k_mask", 2, 2, 5, 700, 16, 24, 0, 2, (int64_t[]){ 5, 700 });
    if (test_selected(c, "attention/lmdm_y")) {
        /*
         * As lmdm.c runs it, window-major: self-attention q, k sliced from one (N, 80, 1024) projection and v
         * (N, 80, 512); cross-attention q (N, 80, 512), k and v the (N, 82, 512) memory; y a (N, 80, 8, 64) buffer
         * seen as (N, 8, 80, 64), heads concatenated per row (the out_proj input). N = 2 windows x 2 passes.
         */
        TT *qk = new_normal(c, 3, (int64_t[]){ 4, 80, 1024 }), *vs = new_normal(c, 3, (int64_t[]){ 4, 80, 512 });
        TT *qc = new_normal(c, 3, (int64_t[]){ 4, 80, 512 });
        TT *mk = new_normal(c, 3, (int64_t[]){ 4, 82, 512 }), *mv = new_normal(c, 3, (int64_t[]){ 4, 82, 512 });
        const int perm[4] = { 0, 2, 1, 3 };
        View qk5 = view_reshape(view_of(qk), 5, (int64_t[]){ 4, 80, 2, 8, 64 });
        View q = view_permute(view_select(qk5, 2, 0), perm), k = view_permute(view_select(qk5, 2, 1), perm);
        View v = view_permute(view_reshape(view_of(vs), 4, (int64_t[]){ 4, 80, 8, 64 }), perm);
        attention_run_y(c, "attention/lmdm_y_self", 0, q, k, v, NULL, Y_HEADS_LAST);
        View cq = view_permute(view_reshape(view_of(qc), 4, (int64_t[]){ 4, 80, 8, 64 }), perm);
        View ck = view_permute(view_reshape(view_of(mk), 4, (int64_t[]){ 4, 82, 8, 64 }), perm);
        View cv = view_permute(view_reshape(view_of(mv), 4, (int64_t[]){ 4, 82, 8, 64 }), perm);
        attention_run_y(c, "attention/lmdm_y_cross", 0, cq, ck, cv, NULL, Y_HEADS_LAST);
        tt_free(qk);
        tt_free(vs);
        tt_free(qc);
        tt_free(mk);
        tt_free(mv);
    }
    if (test_selected(c, "attention/lmdm_b1")) {
        /* one window (B 1) as the bench runs it: N = 2 passes, q/k sliced from (2, 80, 1024), memory (2, 82, 512) */
        TT *qk = new_normal(c, 3, (int64_t[]){ 2, 80, 1024 }), *vs = new_normal(c, 3, (int64_t[]){ 2, 80, 512 });
        TT *mk = new_normal(c, 3, (int64_t[]){ 2, 82, 512 }), *mv = new_normal(c, 3, (int64_t[]){ 2, 82, 512 });
        const int perm[4] = { 0, 2, 1, 3 };
        View qk5 = view_reshape(view_of(qk), 5, (int64_t[]){ 2, 80, 2, 8, 64 });
        View q = view_permute(view_select(qk5, 2, 0), perm), k = view_permute(view_select(qk5, 2, 1), perm);
        View v = view_permute(view_reshape(view_of(vs), 4, (int64_t[]){ 2, 80, 8, 64 }), perm);
        attention_run_y(c, "attention/lmdm_b1_self", 0, q, k, v, NULL, Y_HEADS_LAST);
        View ck = view_permute(view_reshape(view_of(mk), 4, (int64_t[]){ 2, 82, 8, 64 }), perm);
        View cv = view_permute(view_reshape(view_of(mv), 4, (int64_t[]){ 2, 82, 8, 64 }), perm);
        attention_run_y(c, "attention/lmdm_b1_cross", 0, q, ck, cv, NULL, Y_HEADS_LAST);
        attention_run_opts(c, "attention/lmdm_b1_self_tf32_out", 0, q, k, v, NULL, Y_HEADS_LAST, true, false);
        attention_run_opts(c, "attention/lmdm_b1_cross_tf32_out", 0, q, ck, cv, NULL, Y_HEADS_LAST, true, false);
        attention_run_opts(c, "attention/lmdm_b1_self_y16", 0, q, k, v, NULL, Y_HEADS_LAST, false, true);
        attention_run_opts(c, "attention/lmdm_b1_cross_y16", 0, q, ck, cv, NULL, Y_HEADS_LAST, false, true);
        tt_free(qk);
        tt_free(vs);
        tt_free(mk);
        tt_free(mv);
    }
    /* the tiled CUDA kernel's edges: key counts, partial query tiles, both tile sizes, transposed y; 129 keys leave it */
    attention_case(c, "attention/tile_k1", 1, 2, 21, 1, 64, 64, 0, 0, NULL);
    attention_case(c, "attention/tile_k33_q37", 1, 2, 37, 33, 64, 64, 0.2f, 0, NULL);
    attention_case(c, "attention/tile_k128", 2, 3, 19, 128, 64, 64, 0, 0, NULL);
    attention_case(c, "attention/tile_k129", 1, 2, 9, 129, 64, 64, 0, 0, NULL);
    attention_case(c, "attention/tile_big_grid", 40, 8, 45, 82, 64, 64, 0, 0, NULL);
    if (test_selected(c, "attention/tile_y_t")) {
        TT *q = new_normal(c, 4, (int64_t[]){ 2, 3, 17, 64 }), *k = new_normal(c, 4, (int64_t[]){ 2, 3, 40, 64 });
        TT *v = new_normal(c, 4, (int64_t[]){ 2, 3, 40, 64 });
        attention_run_y(c, "attention/tile_y_t", 0, view_of(q), view_of(k), view_of(v), NULL, Y_TRANSPOSED);
        /* tf32_out on the short-key and general kernels too (a mask leaves the tiled one; 300 keys the short-key one) */
        TT *m = new_rand(c, 2, (int64_t[]){ 17, 40 }, -1, 1), *kl = new_normal(c, 4, (int64_t[]){ 2, 3, 300, 64 });
        TT *vl = new_normal(c, 4, (int64_t[]){ 2, 3, 300, 64 });
        View mv = view_of(m);
        attention_run_opts(c, "attention/tile_y_t_tf32_out", 0, view_of(q), view_of(k), view_of(v), NULL, Y_TRANSPOSED, true, false);
        attention_run_opts(c, "attention/small_mask_tf32_out", 0, view_of(q), view_of(k), view_of(v), &mv, Y_HEADS_LAST, true, false);
        attention_run_opts(c, "attention/long_k_tf32_out", 0, view_of(q), view_of(kl), view_of(vl), NULL, Y_HEADS_LAST, true, false);
        tt_free(m);
        tt_free(kl);
        tt_free(vl);
        tt_free(q);
        tt_free(k);
        tt_free(v);
    }
    if (test_selected(c, "attention/y_strided")) {
        /* y heads-last and transposed, with masks, on both CUDA kernels (short and long key rows) */
        TT *q = new_normal(c, 4, (int64_t[]){ 2, 3, 9, 16 }), *k = new_normal(c, 4, (int64_t[]){ 2, 3, 11, 16 });
        TT *v = new_normal(c, 4, (int64_t[]){ 2, 3, 11, 8 }), *m = new_rand(c, 2, (int64_t[]){ 9, 11 }, -2, 2);
        View mv = view_of(m);
        attention_run_y(c, "attention/y_strided_heads_last", 0, view_of(q), view_of(k), view_of(v), &mv, Y_HEADS_LAST);
        attention_run_y(c, "attention/y_strided_transposed", 0.4f, view_of(q), view_of(k), view_of(v), &mv, Y_TRANSPOSED);
        TT *kl = new_normal(c, 4, (int64_t[]){ 2, 3, 600, 16 }), *vl = new_normal(c, 4, (int64_t[]){ 2, 3, 600, 8 });
        attention_run_y(c, "attention/y_strided_long_k", 0, view_of(q), view_of(kl), view_of(vl), NULL, Y_HEADS_LAST);
        attention_run_y(c, "attention/y_strided_long_k_t", 0, view_of(q), view_of(kl), view_of(vl), NULL, Y_TRANSPOSED);
        tt_free(q);
        tt_free(k);
        tt_free(v);
        tt_free(m);
        tt_free(kl);
        tt_free(vl);
    }
    if (test_selected(c, "attention/lmdm_cross")) {
        /* LMDM cross-attention: q from (B, 80, 512), k and v from a packed (B, 82, 1024) memory projection */
        TT *xq = new_normal(c, 3, (int64_t[]){ 2, 80, 512 }), *xm = new_normal(c, 3, (int64_t[]){ 2, 82, 1024 });
        View q = view_permute(view_reshape(view_of(xq), 4, (int64_t[]){ 2, 80, 8, 64 }), (int[]){ 0, 2, 1, 3 });
        View m5 = view_reshape(view_of(xm), 5, (int64_t[]){ 2, 82, 2, 8, 64 });
        View k = view_permute(view_select(m5, 2, 0), (int[]){ 0, 2, 1, 3 });
        View v = view_permute(view_select(m5, 2, 1), (int[]){ 0, 2, 1, 3 });
        attention_run(c, "attention/lmdm_cross", 0, q, k, v, NULL);
        tt_free(xq);
        tt_free(xm);
    }
    if (test_selected(c, "attention/strided")) {
        /* k stored as (B,H,D,Lk) and read transposed; q and v sliced along their last dim (packed path);
           mask a transposed (Lk, Lq) tensor */
        TT *q = new_normal(c, 4, (int64_t[]){ 3, 2, 7, 10 }), *kt = new_normal(c, 4, (int64_t[]){ 3, 2, 5, 9 });
        TT *v = new_normal(c, 4, (int64_t[]){ 3, 2, 9, 8 }), *m = tt_new(c, DITTO_F32, 2, (int64_t[]){ 9, 7 });
        tt_fill_uniform(m, -2, 2);
        tt_to_dev(m);
        View qv = view_slice(view_of(q), 3, 0, 10, 2);              /* (3,2,7,5), last stride 2 */
        View kv = view_permute(view_of(kt), (int[]){ 0, 1, 3, 2 }); /* (3,2,9,5), column-major */
        View vv = view_slice(view_of(v), 3, 1, 8, 2);               /* (3,2,9,4), last stride 2 */
        View mv = view_permute(view_of(m), (int[]){ 1, 0 });        /* (7,9) */
        attention_run(c, "attention/strided", 0.5f, qv, kv, vv, &mv);
        tt_free(q);
        tt_free(kt);
        tt_free(v);
        tt_free(m);
    }
    if (test_selected(c, "attention/err")) {
        TT *q = new_normal(c, 4, (int64_t[]){ 2, 2, 5, 4 }), *k = new_normal(c, 4, (int64_t[]){ 2, 2, 6, 4 });
        TT *k3 = new_normal(c, 4, (int64_t[]){ 2, 2, 6, 3 }), *v = new_normal(c, 4, (int64_t[]){ 2, 2, 6, 3 });
        TT *y = new_out(c, DITTO_F32, 4, (int64_t[]){ 2, 2, 5, 3 }), *yb = new_out(c, DITTO_F32, 4, (int64_t[]){ 2, 2, 5, 4 });
        TT *m = new_normal(c, 2, (int64_t[]){ 5, 5 });
        TT *q3 = new_normal(c, 3, (int64_t[]){ 2, 5, 4 });
        int rc = ditto_op_attention(c->be, 0, &q->dev, &k3->dev, &v->dev, NULL, &y->dev);
        expect_rc(c, "attention/err_head_dim", rc, DITTO_ERR_SHAPE);
        rc = ditto_op_attention(c->be, 0, &q->dev, &k->dev, &v->dev, NULL, &yb->dev);
        expect_rc(c, "attention/err_y_shape", rc, DITTO_ERR_SHAPE);
        rc = ditto_op_attention(c->be, 0, &q->dev, &k->dev, &v->dev, &m->dev, &y->dev);
        expect_rc(c, "attention/err_mask", rc, DITTO_ERR_SHAPE);
        rc = ditto_op_attention(c->be, 0, &q3->dev, &k->dev, &v->dev, NULL, &y->dev);
        expect_rc(c, "attention/err_rank", rc, DITTO_ERR_SHAPE);
        DittoTensor yb0 = y->dev;   /* heads aliased onto one another */
        yb0.stride[1] = 0;
        rc = ditto_op_attention(c->be, 0, &q->dev, &k->dev, &v->dev, NULL, &yb0);
        expect_rc(c, "attention/err_y_broadcast", rc, DITTO_ERR_INVAL);
        tt_free(q);
        tt_free(k);
        tt_free(k3);
        tt_free(v);
        tt_free(y);
        tt_free(yb);
        tt_free(m);
        tt_free(q3);
    }
}

/* ---------------- rotary ---------------- */

static void rotary_case(TestCtx *c, const char *name, int64_t B, int64_t L, int64_t C, int64_t pos, bool inplace, bool strided_freqs)
{
    if (!test_selected(c, name))
        return;
    int64_t half = C / 2;
    TT *x = new_normal(c, 3, (int64_t[]){ B, L, C });
    TT *y = inplace ? x : new_out(c, DITTO_F32, 3, (int64_t[]){ B, L, C });
    /* the LMDM buffer: freq_k = 1 / 10000^(2k / C) in float32; strided variant: every other element of 2 C/2 */
    TT *f = tt_new_f32dev(c, 1, (int64_t[]){ strided_freqs ? 2 * half : half });   /* freqs: float32 by contract */
    for (int64_t k = 0; k < half; k++) {
        float fk = (float)(1.0 / pow(10000.0, 2.0 * (double)k / (double)C));
        if (strided_freqs) {
            tt_f32(f)[2 * k] = -1.0f;
            tt_f32(f)[2 * k + 1] = fk;
        } else {
            tt_f32(f)[k] = fk;
        }
    }
    tt_to_dev(f);
    View fv = strided_freqs ? view_slice(view_of(f), 0, 1, 2 * half, 2) : view_of(f);
    double *ref = malloc(sizeof(double) * (size_t)(B * L * C));
    if (!ref)
        abort();
    const float *xs = tt_f32(x), *fs = fv.h.data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++)
            for (int64_t k = 0; k < half; k++) {
                float th = (float)(pos + l) * fs[k * fv.h.stride[0]];
                int64_t e = (b * L + l) * C + 2 * k;
                double x0 = xs[e], x1 = xs[e + 1];
                ref[e] = x0 * cos(th) - x1 * sin(th);
                ref[e + 1] = x1 * cos(th) + x0 * sin(th);
            }
    int rc = ditto_op_rotary(c->be, pos, &x->dev, &fv.d, &y->dev);
    op_check(c, name, rc, y, ref, 1e-6, 1e-6);
    free(ref);
    tt_free(f);
    if (!inplace)
        tt_free(y);
    tt_free(x);
}

static void test_rotary(TestCtx *c)
{
    rotary_case(c, "rotary/pos0", 3, 7, 10, 0, false, false);
    rotary_case(c, "rotary/pos80", 3, 7, 10, 80, false, false);
    rotary_case(c, "rotary/b1_pos80", 1, 2, 512, 80, false, false);
    rotary_case(c, "rotary/lmdm", 2, 80, 512, 0, false, false);
    rotary_case(c, "rotary/inplace", 3, 5, 6, 80, true, false);
    rotary_case(c, "rotary/strided_freqs", 3, 5, 12, 3, false, true);
    if (test_selected(c, "rotary/err")) {
        TT *x = new_normal(c, 3, (int64_t[]){ 2, 3, 5 }), *y = new_out(c, DITTO_F32, 3, (int64_t[]){ 2, 3, 5 });
        TT *x2 = new_normal(c, 3, (int64_t[]){ 2, 3, 6 }), *y2 = new_out(c, DITTO_F32, 3, (int64_t[]){ 2, 3, 6 });
        TT *f2 = tt_new_f32dev(c, 1, (int64_t[]){ 2 }), *f3 = tt_new_f32dev(c, 1, (int64_t[]){ 3 });   /* float32: fail on size only */
        tt_fill_normal(f2, 0, 1);
        tt_fill_normal(f3, 0, 1);
        tt_to_dev(f2);
        tt_to_dev(f3);
        int rc = ditto_op_rotary(c->be, 0, &x->dev, &f2->dev, &y->dev);
        expect_rc(c, "rotary/err_odd_c", rc, DITTO_ERR_SHAPE);
        rc = ditto_op_rotary(c->be, 0, &x2->dev, &f2->dev, &y2->dev);
        expect_rc(c, "rotary/err_freqs", rc, DITTO_ERR_SHAPE);
        rc = ditto_op_rotary(c->be, 0, &x2->dev, &f3->dev, &y->dev);
        expect_rc(c, "rotary/err_y_shape", rc, DITTO_ERR_SHAPE);
        tt_free(x);
        tt_free(y);
        tt_free(x2);
        tt_free(y2);
        tt_free(f2);
        tt_free(f3);
    }
}

void test_ops_attention(TestCtx *c)
{
    test_attention(c);
    test_rotary(c);
}
