/*
 * Element-wise family: copy (strided views, reshape, dtype casts), fill,
 * unary, binary with broadcasting, softmax, reduce, concat; plus shape errors
 * through the front ends.
 *
 * References are plain double loops over the definition, read through host
 * views built with the same permute/slice calls as the device views.
 *
 * Tolerances (rel_l2, max_abs / max_ref):
 *   copy, fill, concat, neg/abs/relu/clip-like ops: exact (0, 0);
 *   add/sub/mul/div/max/min: one float rounding each, 1e-6;
 *   libm-based unary ops and pow: float libm is within ~2 ulp, 2e-6;
 *   softmax: float exp and a rounded 1/sum, 1e-6;
 *   reduce: double accumulation then one rounding, 1e-6.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ditto/ditto_error.h"
#include "ops/ops.h"
#include "op_util.h"
#include "test_ops.h"

static double at(const DittoTensor *v, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < v->ndim; d++)
        off += idx[d] * v->stride[d];
    return ((const float *)v->data)[off];
}

/* ref[i] = x at row-major index i of x's shape */
static double *ref_gather(const DittoTensor *x)
{
    int64_t n = ditto_tensor_numel(x), idx[DITTO_MAX_DIMS] = { 0 };
    double *r = ref_alloc(n);
    for (int64_t i = 0; i < n; i++) {
        r[i] = at(x, idx);
        op_next_idx(idx, x->shape, x->ndim);
    }
    return r;
}

/* ---------------- copy ---------------- */

/* y (contiguous, y_shape) = copy of the view x; reference = x in row-major order. */
static void copy_case(TestCtx *c, const char *name, View x, int yndim, const int64_t *yshape)
{
    if (!test_selected(c, name))
        return;
    TT *y = new_out(c, DITTO_F32, yndim, yshape);
    double *ref = ref_gather(&x.h);
    int rc = ditto_op_copy(c->be, &x.d, &y->dev);
    op_check(c, name, rc, y, ref, 0, 0);
    free(ref);
    tt_free(y);
}

/*
 * Channels-first x (2, C, *sp) into channels 0..C-1 of a channel-padded
 * channels-last y (2, *sp, Cp) (CUDA: a transpose with a row pitch);
 * channels C..Cp-1 keep new_out's contents, checked as they were.
 */
static void copy_into_padded(TestCtx *c, const char *name, int64_t C, const int64_t sp[3], int64_t Cp)
{
    if (!test_selected(c, name))
        return;
    const int64_t vol = sp[0] * sp[1] * sp[2];
    TT *x = new_rand(c, 5, (int64_t[]){ 2, C, sp[0], sp[1], sp[2] }, -3, 3);
    TT *y = new_out(c, DITTO_F32, 5, (int64_t[]){ 2, sp[0], sp[1], sp[2], Cp });
    tt_to_host(y);
    double *ref = ref_alloc(2 * vol * Cp);
    for (int64_t i = 0; i < 2 * vol * Cp; i++)
        ref[i] = tt_f32(y)[i];
    for (int64_t n = 0; n < 2; n++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t v = 0; v < vol; v++)
                ref[(n * vol + v) * Cp + ch] = tt_f32(x)[(n * C + ch) * vol + v];
    View xv = view_permute(view_of(x), (int[]){ 0, 2, 3, 4, 1 });
    View yv = view_slice(view_of(y), 4, 0, C, 1);
    int rc = ditto_op_copy(c->be, &xv.d, &yv.d);
    op_check(c, name, rc, y, ref, 0, 0);
    free(ref);
    tt_free(x);
    tt_free(y);
}

static void test_copy(TestCtx *c)
{
    {
        TT *x = new_rand(c, 3, (int64_t[]){ 3, 5, 7 }, -3, 3);
        copy_case(c, "copy/contig", view_of(x), 3, (int64_t[]){ 3, 5, 7 });
        copy_case(c, "copy/reshape_contig", view_of(x), 2, (int64_t[]){ 7, 15 });
        tt_free(x);
    }
    {
        TT *x = new_rand(c, 4, (int64_t[]){ 3, 4, 5, 6 }, -3, 3);
        View v = view_permute(view_of(x), (int[]){ 0, 2, 3, 1 });
        copy_case(c, "copy/permute4d", v, 4, v.h.shape);
        View b1 = view_permute(view_select(view_of(x), 0, 1), (int[]){ 2, 0, 1 });
        copy_case(c, "copy/permute_b1", b1, 3, b1.h.shape);
        tt_free(x);
    }
    {
        /* channels-first <-> channels-last moves of 3-D activations (CUDA: a tiled transpose), odd sizes, a size-1 dim */
        TT *x = new_rand(c, 5, (int64_t[]){ 2, 37, 3, 5, 9 }, -3, 3);
        View v = view_permute(view_of(x), (int[]){ 0, 2, 3, 4, 1 });
        copy_case(c, "copy/ncdhw_to_ndhwc", v, 5, v.h.shape);
        View w = view_permute(view_of(x), (int[]){ 0, 4, 1, 2, 3 });
        copy_case(c, "copy/ndhwc_to_ncdhw", w, 5, w.h.shape);
        View u = view_permute(view_reshape(view_of(x), 5, (int64_t[]){ 2, 37, 1, 15, 9 }), (int[]){ 0, 2, 3, 4, 1 });
        copy_case(c, "copy/ncdhw_to_ndhwc_d1", u, 5, u.h.shape);
        tt_free(x);
    }
    {
        /* items 1 and 3 of 4 (a step on the item dim: not one transpose) and items 1..2 (one) */
        TT *x = new_rand(c, 5, (int64_t[]){ 4, 6, 2, 4, 10 }, -3, 3);
        View v = view_permute(view_slice(view_of(x), 0, 1, 4, 2), (int[]){ 0, 2, 3, 4, 1 });
        copy_case(c, "copy/ncdhw_to_ndhwc_item_step2", v, 5, v.h.shape);
        View w = view_permute(view_slice(view_of(x), 0, 1, 3, 1), (int[]){ 0, 2, 3, 4, 1 });
        copy_case(c, "copy/ncdhw_to_ndhwc_item_slice", w, 5, w.h.shape);
        tt_free(x);
    }
    {
        /* even sizes (CUDA f16: the half2 transpose), several 64-wide tiles each way */
        TT *x = new_rand(c, 5, (int64_t[]){ 2, 70, 2, 10, 14 }, -3, 3);
        View v = view_permute(view_of(x), (int[]){ 0, 2, 3, 4, 1 });
        copy_case(c, "copy/ncdhw_to_ndhwc_even", v, 5, v.h.shape);
        View w = view_permute(view_reshape(view_of(x), 5, (int64_t[]){ 2, 2, 10, 14, 70 }), (int[]){ 0, 4, 1, 2, 3 });
        copy_case(c, "copy/ndhwc_to_ncdhw_even", w, 5, w.h.shape);
        /* channels 0..65 of the channels-last (2,2,10,14,70) out to channels-first: rows 72 apart */
        View last = view_reshape(view_of(x), 5, (int64_t[]){ 2, 2, 10, 14, 70 });
        View p = view_permute(view_slice(last, 4, 0, 66, 1), (int[]){ 0, 4, 1, 2, 3 });
        copy_case(c, "copy/padded_ndhwc_to_ncdhw_even", p, 5, p.h.shape);
        tt_free(x);
    }
    {
        TT *x = new_rand(c, 6, (int64_t[]){ 2, 3, 2, 3, 2, 3 }, -3, 3);
        View v = view_permute(view_of(x), (int[]){ 5, 4, 3, 2, 1, 0 });
        copy_case(c, "copy/permute6d", v, 6, v.h.shape);
        tt_free(x);
    }
    {
        TT *x = new_rand(c, 3, (int64_t[]){ 3, 9, 11 }, -3, 3);
        View v = view_select(view_slice(view_of(x), 2, 1, 10, 3), 1, 4);
        copy_case(c, "copy/slice_select", v, 2, v.h.shape);
        View p = view_permute(view_of(x), (int[]){ 2, 0, 1 });
        copy_case(c, "copy/reshape_strided", p, 2, (int64_t[]){ 9, 33 });
        tt_free(x);
    }
    {
        /* (211, 97, 3) -> (3, 97, 211): several tasks, chunks that start mid-row */
        TT *x = new_rand(c, 3, (int64_t[]){ 211, 97, 3 }, -3, 3);
        View v = view_permute(view_of(x), (int[]){ 2, 1, 0 });
        copy_case(c, "copy/large_permute", v, 3, v.h.shape);
        copy_case(c, "copy/large_contig", view_of(x), 3, x->host.shape);
        tt_free(x);
    }
    {
        /* contiguous rows of 16 / 8 values, whole 16-byte runs (CUDA moves them 16 bytes a thread) */
        TT *x = new_rand(c, 3, (int64_t[]){ 6, 4, 16 }, -3, 3);
        View v = view_permute(view_of(x), (int[]){ 1, 0, 2 });
        copy_case(c, "copy/rows16_permute", v, 3, v.h.shape);
        View s2 = view_slice(view_reshape(view_of(x), 3, (int64_t[]){ 12, 4, 8 }), 0, 1, 12, 2);
        copy_case(c, "copy/rows16_slice", s2, 3, s2.h.shape);
        tt_free(x);
    }
    if (test_selected(c, "copy/into_strided")) {
        /* y is a permuted view covering a whole (5,3,4) tensor */
        TT *x = new_rand(c, 3, (int64_t[]){ 3, 5, 4 }, -3, 3);
        TT *y = new_out(c, DITTO_F32, 3, (int64_t[]){ 5, 3, 4 });
        View yv = view_permute(view_of(y), (int[]){ 1, 0, 2 });
        int rc = ditto_op_copy(c->be, &x->dev, &yv.d);
        double *ref = ref_alloc(60);
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 4; k++)
                    ref[(i * 3 + j) * 4 + k] = tt_f32(x)[(j * 5 + i) * 4 + k];
        op_check(c, "copy/into_strided", rc, y, ref, 0, 0);
        free(ref);
        tt_free(x);
        tt_free(y);
    }
    /* odd sizes, then even ones (CUDA f16: the half2 transpose) */
    copy_into_padded(c, "copy/ncdhw_into_padded_ndhwc", 5, (const int64_t[]){ 3, 4, 6 }, 8);
    copy_into_padded(c, "copy/ncdhw_into_padded_ndhwc_even", 6, (const int64_t[]){ 4, 10, 14 }, 8);
    {
        /* channels 0..4 of a channel-padded channels-last x (2,3,4,6,8) out to channels-first (CUDA: a transpose with a row pitch) */
        TT *x = new_rand(c, 5, (int64_t[]){ 2, 3, 4, 6, 8 }, -3, 3);
        View v = view_permute(view_slice(view_of(x), 4, 0, 5, 1), (int[]){ 0, 4, 1, 2, 3 });
        copy_case(c, "copy/padded_ndhwc_to_ncdhw", v, 5, v.h.shape);
        tt_free(x);
    }
    if (test_selected(c, "copy/into_slices")) {
        /* two copies into the even and odd columns of y: together they cover it */
        TT *a = new_rand(c, 2, (int64_t[]){ 3, 5 }, -3, 3), *b = new_rand(c, 2, (int64_t[]){ 3, 5 }, -3, 3);
        TT *y = new_out(c, DITTO_F32, 2, (int64_t[]){ 3, 10 });
        View ev = view_slice(view_of(y), 1, 0, 10, 2), od = view_slice(view_of(y), 1, 1, 10, 2);
        int rc = ditto_op_copy(c->be, &a->dev, &ev.d);
        if (rc >= 0)
            rc = ditto_op_copy(c->be, &b->dev, &od.d);
        double ref[30];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 10; j++)
                ref[i * 10 + j] = (j % 2 ? tt_f32(b) : tt_f32(a))[i * 5 + j / 2];
        op_check(c, "copy/into_slices", rc, y, ref, 0, 0);
        tt_free(a);
        tt_free(b);
        tt_free(y);
    }
}

/* ---------------- casts (exact expected bytes) ---------------- */

/* A tensor whose device dtype is exactly dt, also in fp16 storage mode (casts test exact dtypes). */
static TT *new_exact(TestCtx *c, DittoDType dt, int ndim, const int64_t *shape)
{
    return dt == DITTO_F32 ? tt_new_f32dev(c, ndim, shape) : tt_new(c, dt, ndim, shape);
}

static void cast_case(TestCtx *c, const char *name, DittoDType st, const void *src, DittoDType dt, const void *want, int n)
{
    if (!test_selected(c, name))
        return;
    TT *x = new_exact(c, st, 1, (int64_t[]){ n });
    TT *y = new_exact(c, dt, 1, (int64_t[]){ n });
    tt_to_dev(y);
    memcpy(x->host.data, src, (size_t)n * ditto_dtype_size(st));
    tt_to_dev(x);
    int rc = ditto_op_copy(c->be, &x->dev, &y->dev);
    if (rc < 0) {
        test_report(c, name, false, "rc %d", rc);
    } else if (tt_to_host(y) < 0) {
        test_report(c, name, false, "download failed");
    } else {
        size_t es = ditto_dtype_size(dt);
        int bad = -1;
        for (int i = 0; i < n && bad < 0; i++)
            if (memcmp((char *)y->host.data + i * es, (const char *)want + i * es, es))
                bad = i;
        test_report(c, name, bad < 0 && tt_guards_ok(y), "%d elements, first mismatch at %d", n, bad);
    }
    tt_free(x);
    tt_free(y);
}

static void test_cast(TestCtx *c)
{
    /* values and their correctly rounded conversions (round to nearest even; ints truncate) */
    static const float f32v[] = { 0.0f, 1.0f, -2.0f, 0.5f, 1.0f / 3, 65504.0f, 70000.0f, 1e-7f, -3.7f, 2.5f, 255.9f, 3.14159265f, -1e-4f };
    static const uint16_t f16v[] = { 0x0000, 0x3c00, 0xc000, 0x3800, 0x3555, 0x7bff, 0x7c00, 0x0002, 0xc366, 0x4100, 0x5bff, 0x4248, 0x868e };
    static const uint16_t bf16v[] = { 0x0000, 0x3f80, 0xc000, 0x3f00, 0x3eab, 0x4780, 0x4789, 0x33d7, 0xc06d, 0x4020, 0x4380, 0x4049, 0xb8d2 };
    static const int64_t i64v[] = { 0, 1, -2, 0, 0, 65504, 70000, 0, -3, 2, 255, 3, 0 };
    const int n = (int)(sizeof f32v / sizeof *f32v);
    cast_case(c, "copy/cast_f32_f16", DITTO_F32, f32v, DITTO_F16, f16v, n);
    cast_case(c, "copy/cast_f32_bf16", DITTO_F32, f32v, DITTO_BF16, bf16v, n);
    cast_case(c, "copy/cast_f32_i64", DITTO_F32, f32v, DITTO_I64, i64v, n);

    static const float u8src[] = { 0.0f, 1.0f, 2.5f, 127.9f, 200.0f, 255.0f };
    static const uint8_t u8v[] = { 0, 1, 2, 127, 200, 255 };
    static const float u8back[] = { 0.0f, 1.0f, 2.0f, 127.0f, 200.0f, 255.0f };
    static const int64_t u8i64[] = { 0, 1, 2, 127, 200, 255 };
    cast_case(c, "copy/cast_f32_u8", DITTO_F32, u8src, DITTO_U8, u8v, 6);
    cast_case(c, "copy/cast_u8_f32", DITTO_U8, u8v, DITTO_F32, u8back, 6);
    cast_case(c, "copy/cast_u8_i64", DITTO_U8, u8v, DITTO_I64, u8i64, 6);
    cast_case(c, "copy/cast_i64_u8", DITTO_I64, u8i64, DITTO_U8, u8v, 6);

    static const uint16_t h[] = { 0x3c00, 0xc000, 0x3555, 0x0001, 0x7bff, 0x7c00 };
    static const float hf[] = { 1.0f, -2.0f, 0.333251953125f, 5.960464477539063e-08f, 65504.0f, INFINITY };
    static const uint16_t hb[] = { 0x3f80, 0xc000, 0x3eab, 0x3380, 0x4780, 0x7f80 };
    cast_case(c, "copy/cast_f16_f32", DITTO_F16, h, DITTO_F32, hf, 6);
    cast_case(c, "copy/cast_f16_bf16", DITTO_F16, h, DITTO_BF16, hb, 6);

    static const uint16_t b[] = { 0x3f80, 0x3eab, 0xc020, 0x4049 };
    static const float bf[] = { 1.0f, 0.333984375f, -2.5f, 3.140625f };
    static const uint16_t bh[] = { 0x3c00, 0x3558, 0xc100, 0x4248 };
    cast_case(c, "copy/cast_bf16_f32", DITTO_BF16, b, DITTO_F32, bf, 4);
    cast_case(c, "copy/cast_bf16_f16", DITTO_BF16, b, DITTO_F16, bh, 4);

    static const int64_t iv[] = { 0, 1, -5, 123456789, (int64_t)1 << 40 };
    static const float ivf[] = { 0.0f, 1.0f, -5.0f, 123456792.0f, 1099511627776.0f };
    cast_case(c, "copy/cast_i64_f32", DITTO_I64, iv, DITTO_F32, ivf, 5);

    if (test_selected(c, "copy/cast_f32_f16_strided")) {
        /* x (3,4) f32 read transposed into y (4,3) f16 */
        TT *x = tt_new_f32dev(c, 2, (int64_t[]){ 3, 4 });
        TT *y = new_out(c, DITTO_F16, 2, (int64_t[]){ 4, 3 });
        for (int i = 0; i < 12; i++)
            tt_f32(x)[i] = f32v[i];
        tt_to_dev(x);
        View xt = view_permute(view_of(x), (int[]){ 1, 0 });
        int rc = ditto_op_copy(c->be, &xt.d, &y->dev);
        bool ok = rc >= 0 && tt_to_host(y) >= 0;
        for (int i = 0; i < 4 && ok; i++)
            for (int j = 0; j < 3; j++)
                ok = ok && ((uint16_t *)y->host.data)[i * 3 + j] == f16v[j * 4 + i];
        test_report(c, "copy/cast_f32_f16_strided", ok, "rc %d", rc);
        tt_free(x);
        tt_free(y);
    }
}

/* ---------------- fill ---------------- */

static void fill_bytes_case(TestCtx *c, const char *name, DittoDType dt, float value, const void *want)
{
    if (!test_selected(c, name))
        return;
    TT *y = new_out(c, dt, 3, (int64_t[]){ 3, 5, 7 });
    int rc = ditto_op_fill(c->be, value, &y->dev);
    bool ok = rc >= 0 && tt_to_host(y) >= 0;
    size_t es = ditto_dtype_size(dt);
    for (int i = 0; i < 105 && ok; i++)
        ok = !memcmp((char *)y->host.data + i * es, want, es);
    test_report(c, name, ok && tt_guards_ok(y), "rc %d", rc);
    tt_free(y);
}

static void fill_f32_case(TestCtx *c, const char *name, int ndim, const int64_t *shape, float value)
{
    if (!test_selected(c, name))
        return;
    TT *y = new_out(c, DITTO_F32, ndim, shape);
    int64_t n = ditto_tensor_numel(&y->host);
    double *ref = ref_alloc(n);
    for (int64_t i = 0; i < n; i++)
        ref[i] = value;
    int rc = ditto_op_fill(c->be, value, &y->dev);
    op_check(c, name, rc, y, ref, 0, 0);
    free(ref);
    tt_free(y);
}

/*
 * be->skip_ops (ditto bench --skip-ops, measurement): a listed op leaves y as
 * it was; an op of another name, of a prefix of the name or of other
 * shapes runs.
 */
static void fill_skip_case(TestCtx *c)
{
    if (!test_selected(c, "fill/skip_ops"))
        return;
    static const struct {
        const char *list;
        float want;
    } tab[] = { { "copy;fill:(3,5,7)", 1.0f }, { "fill", 1.0f }, { "fill:(3,5,8)", 2.0f }, { "fil;fill_x;conv", 2.0f }, { "", 2.0f } };
    bool ok = true;
    for (size_t k = 0; k < sizeof tab / sizeof *tab && ok; k++) {
        TT *y = new_out(c, DITTO_F32, 3, (int64_t[]){ 3, 5, 7 });
        int rc = ditto_op_fill(c->be, 1.0f, &y->dev);
        c->be->skip_ops = tab[k].list;
        if (rc >= 0)
            rc = ditto_op_fill(c->be, 2.0f, &y->dev);
        c->be->skip_ops = NULL;
        ok = rc >= 0 && tt_to_host(y) >= 0 && tt_guards_ok(y);
        for (int i = 0; i < 105 && ok; i++)
            ok = ((const float *)y->host.data)[i] == tab[k].want;
        if (!ok)
            test_report(c, "fill/skip_ops", false, "list '%s': rc %d", tab[k].list, rc);
        tt_free(y);
    }
    if (ok)
        test_report(c, "fill/skip_ops", true, "");
}

static void test_fill(TestCtx *c)
{
    fill_skip_case(c);
    fill_f32_case(c, "fill/f32", 3, (int64_t[]){ 3, 5, 7 }, -1.25f);
    fill_f32_case(c, "fill/f32_scalar", 0, NULL, 3.5f);
    fill_f32_case(c, "fill/f32_large", 3, (int64_t[]){ 3, 97, 211 }, 0.125f);
    fill_bytes_case(c, "fill/f16", DITTO_F16, -3.7f, &(uint16_t){ 0xc366 });
    fill_bytes_case(c, "fill/bf16", DITTO_BF16, 1.0f / 3, &(uint16_t){ 0x3eab });
    fill_bytes_case(c, "fill/i64", DITTO_I64, -3.7f, &(int64_t){ -3 });
    fill_bytes_case(c, "fill/u8", DITTO_U8, 7.9f, &(uint8_t){ 7 });
    if (test_selected(c, "fill/strided")) {
        TT *y = new_out(c, DITTO_F32, 2, (int64_t[]){ 4, 6 });
        View ev = view_slice(view_of(y), 1, 0, 6, 2), od = view_slice(view_of(y), 1, 1, 6, 2);
        int rc = ditto_op_fill(c->be, 1.0f, &ev.d);
        if (rc >= 0)
            rc = ditto_op_fill(c->be, 2.0f, &od.d);
        double ref[24];
        for (int i = 0; i < 24; i++)
            ref[i] = i % 2 ? 2.0 : 1.0;
        op_check(c, "fill/strided", rc, y, ref, 0, 0);
        tt_free(y);
    }
}

/* ---------------- unary ---------------- */

static const char *const unary_names[DITTO_UNARY_COUNT] = {
    "identity", "relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "mish", "softplus", "exp", "log",
    "sqrt", "rsqrt", "recip", "neg", "abs", "erf", "sin", "cos", "clip", "affine",
};

static double unary_ref(const DittoUnaryParams *p, double v)
{
    double a = p->alpha, b = p->beta;
    switch (p->kind) {
    case DITTO_UNARY_IDENTITY: return v;
    case DITTO_UNARY_RELU: return v > 0 ? v : 0;
    case DITTO_UNARY_LEAKY_RELU: return v > 0 ? v : a * v;
    case DITTO_UNARY_GELU: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    case DITTO_UNARY_SILU: return v / (1 + exp(-v));
    case DITTO_UNARY_SIGMOID: return 1 / (1 + exp(-v));
    case DITTO_UNARY_TANH: return tanh(v);
    case DITTO_UNARY_MISH: return v * tanh(log1p(exp(v)));
    case DITTO_UNARY_SOFTPLUS: return v > 20 ? v : log1p(exp(v));
    case DITTO_UNARY_EXP: return exp(v);
    case DITTO_UNARY_LOG: return log(v);
    case DITTO_UNARY_SQRT: return sqrt(v);
    case DITTO_UNARY_RSQRT: return 1 / sqrt(v);
    case DITTO_UNARY_RECIP: return 1 / v;
    case DITTO_UNARY_NEG: return -v;
    case DITTO_UNARY_ABS: return fabs(v);
    case DITTO_UNARY_ERF: return erf(v);
    case DITTO_UNARY_SIN: return sin(v);
    case DITTO_UNARY_COS: return cos(v);
    case DITTO_UNARY_CLIP: return v < a ? a : v > b ? b : v;
    case DITTO_UNARY_AFFINE: return a * v + b;
    default: return NAN;
    }
}

/* Input range and params that exercise each kind (softplus/mish cross the threshold at 20 and the float exp overflow at 88). */
static DittoUnaryParams unary_setup(DittoUnaryKind k, float *lo, float *hi)
{
    DittoUnaryParams p = { k, 0, 0 };
    *lo = -4;
    *hi = 4;
    switch (k) {
    case DITTO_UNARY_LEAKY_RELU: p.alpha = 0.1f; break;
    case DITTO_UNARY_CLIP: p.alpha = -0.5f; p.beta = 0.7f; break;
    case DITTO_UNARY_AFFINE: p.alpha = 1.5f; p.beta = -0.25f; break;
    case DITTO_UNARY_SOFTPLUS: case DITTO_UNARY_MISH: *lo = -30; *hi = 100; break;   /* expf overflows past 88 */
    case DITTO_UNARY_LOG: case DITTO_UNARY_SQRT: case DITTO_UNARY_RSQRT: *lo = 0.05f; break;
    case DITTO_UNARY_RECIP: *lo = 0.2f; *hi = 3; break;
    case DITTO_UNARY_SIN: case DITTO_UNARY_COS: *lo = -10; *hi = 10; break;
    default: break;
    }
    return p;
}

static bool unary_exact(DittoUnaryKind k)
{
    return k == DITTO_UNARY_IDENTITY || k == DITTO_UNARY_RELU || k == DITTO_UNARY_NEG || k == DITTO_UNARY_ABS ||
           k == DITTO_UNARY_CLIP;
}

/*
 * y = f(x) (or f(x + b[i_axis]) with a bias b: bias_unary) for a view x into
 * a view y; ref computed into the layout of ytt (y covers ytt).
 */
static void unary_bias_case(TestCtx *c, const char *name, const DittoUnaryParams *p, View x, TT *b, int axis, TT *ytt, View y)
{
    int64_t n = ditto_tensor_numel(&ytt->host), idx[DITTO_MAX_DIMS] = { 0 };
    double *ref = ref_alloc(n);
    /* ref in the memory layout of ytt: walk the logical shape, place through y's host strides */
    const float *ybase = ytt->host.data;
    do {
        int64_t off = 0;
        for (int d = 0; d < y.h.ndim; d++)
            off += idx[d] * y.h.stride[d];
        ref[(const float *)y.h.data + off - ybase] = unary_ref(p, b ? at(&x.h, idx) + tt_f32(b)[idx[axis]] : at(&x.h, idx));
    } while (x.h.ndim > 0 && op_next_idx(idx, x.h.shape, x.h.ndim));
    int rc = b ? ditto_op_bias_unary(c->be, p, axis, &x.d, &b->dev, &y.d) : ditto_op_unary(c->be, p, &x.d, &y.d);
    double tol = !b && unary_exact(p->kind) ? 0 : 2e-6;
    op_check(c, name, rc, ytt, ref, tol, tol);
    free(ref);
}

static void unary_case(TestCtx *c, const char *name, const DittoUnaryParams *p, View x, TT *ytt, View y)
{
    unary_bias_case(c, name, p, x, NULL, 0, ytt, y);
}

static void bias_unary_case(TestCtx *c, const char *name, const DittoUnaryParams *p, int axis, View x, TT *b, TT *ytt, View y)
{
    unary_bias_case(c, name, p, x, b, axis, ytt, y);
}

/*
 * bias_unary: contiguous along the last axis and the decoder's sub-pixel
 * interleave (a 6-D view of a (B, h+1, w+1, 4C) tensor into (B, 2h, 2w,
 * C)), both the CUDA f16 path of 8 channels a thread (relu built in, leaky
 * relu at run time); along a middle axis of a permuted x, in place; a bias
 * of the wrong size.
 */
static void test_bias_unary(TestCtx *c)
{
    const DittoUnaryParams relu = { DITTO_UNARY_RELU, 0, 0 }, leaky = { DITTO_UNARY_LEAKY_RELU, 0.2f, 0 };
    const DittoUnaryParams sig = { DITTO_UNARY_SIGMOID, 0, 0 };
    if (test_selected(c, "bias_unary/last_axis")) {
        TT *x = new_rand(c, 3, (int64_t[]){ 3, 5, 16 }, -2, 2), *b = new_rand(c, 1, (int64_t[]){ 16 }, -1, 1);
        TT *y = new_out(c, DITTO_F32, 3, (int64_t[]){ 3, 5, 16 });
        bias_unary_case(c, "bias_unary/last_axis", &relu, 2, view_of(x), b, y, view_of(y));
        bias_unary_case(c, "bias_unary/last_axis_leaky", &leaky, 2, view_of(x), b, y, view_of(y));   /* CUDA f16: the kind at run time */
        tt_free(x);
        tt_free(b);
        tt_free(y);
    }
    if (test_selected(c, "bias_unary/interleave")) {
        const int64_t B = 2, h = 3, w = 5, C = 16, sw = 4 * C, sh = (w + 1) * sw;
        TT *p = new_rand(c, 4, (int64_t[]){ B, h + 1, w + 1, 4 * C }, -2, 2), *b = new_rand(c, 1, &C, -1, 1);
        TT *y = new_out(c, DITTO_F32, 6, (int64_t[]){ B, h, 2, w, 2, C });
        View pv = view_of(p);
        const int64_t shape[6] = { B, h, 2, w, 2, C }, st[6] = { (h + 1) * sh, sh, sh + 2 * C, sw, sw + C, 1 };
        DittoTensor *ts[2] = { &pv.h, &pv.d };
        for (int k = 0; k < 2; k++) {
            ts[k]->ndim = 6;
            memcpy(ts[k]->shape, shape, sizeof shape);
            memcpy(ts[k]->stride, st, sizeof st);
        }
        bias_unary_case(c, "bias_unary/interleave", &relu, 5, pv, b, y, view_of(y));
        tt_free(p);
        tt_free(b);
        tt_free(y);
    }
    if (test_selected(c, "bias_unary/middle_axis_strided")) {
        TT *x = new_rand(c, 3, (int64_t[]){ 4, 6, 5 }, -2, 2), *b = new_rand(c, 1, (int64_t[]){ 4 }, -1, 1);
        View xv = view_permute(view_of(x), (int[]){ 2, 0, 1 });   /* (5, 4, 6) */
        TT *y = new_out(c, DITTO_F32, 3, xv.h.shape);
        bias_unary_case(c, "bias_unary/middle_axis_strided", &leaky, 1, xv, b, y, view_of(y));
        tt_free(x);
        tt_free(b);
        tt_free(y);
    }
    if (test_selected(c, "bias_unary/inplace")) {
        TT *x = new_rand(c, 2, (int64_t[]){ 6, 8 }, -3, 3), *b = new_rand(c, 1, (int64_t[]){ 6 }, -1, 1);
        double ref[48];
        for (int i = 0; i < 48; i++)
            ref[i] = 1.0 / (1.0 + exp(-((double)tt_f32(x)[i] + tt_f32(b)[i / 8])));
        int rc = ditto_op_bias_unary(c->be, &sig, 0, &x->dev, &b->dev, &x->dev);
        op_check(c, "bias_unary/inplace", rc, x, ref, 2e-6, 2e-6);
        tt_free(x);
        tt_free(b);
    }
    if (test_selected(c, "bias_unary/err_bias")) {
        TT *x = new_rand(c, 2, (int64_t[]){ 3, 8 }, -1, 1), *b = new_rand(c, 1, (int64_t[]){ 3 }, -1, 1);
        TT *y = new_out(c, DITTO_F32, 2, (int64_t[]){ 3, 8 });
        expect_rc(c, "bias_unary/err_bias", ditto_op_bias_unary(c->be, &relu, 1, &x->dev, &b->dev, &y->dev), DITTO_ERR_SHAPE);
        tt_free(x);
        tt_free(b);
        tt_free(y);
    }
}

static void test_unary(TestCtx *c)
{
    char name[64];
    for (int k = 0; k < DITTO_UNARY_COUNT; k++) {
        float lo, hi;
        DittoUnaryParams p = unary_setup((DittoUnaryKind)k, &lo, &hi);
        for (int b1 = 0; b1 < 2; b1++) {
            snprintf(name, sizeof name, "unary/%s%s", unary_names[k], b1 ? "_b1" : "");
            if (!test_selected(c, name))
                continue;
            const int64_t *shape = b1 ? (const int64_t[]){ 1, 13, 9 } : (const int64_t[]){ 3, 5, 7 };
            TT *x = new_rand(c, 3, shape, lo, hi);
            TT *y = new_out(c, DITTO_F32, 3, shape);
            unary_case(c, name, &p, view_of(x), y, view_of(y));
            tt_free(x);
            tt_free(y);
        }
    }
    DittoUnaryParams gelu = { DITTO_UNARY_GELU, 0, 0 }, silu = { DITTO_UNARY_SILU, 0, 0 };
    DittoUnaryParams tnh = { DITTO_UNARY_TANH, 0, 0 }, aff = { DITTO_UNARY_AFFINE, -2.0f, 0.5f };
    DittoUnaryParams ex = { DITTO_UNARY_EXP, 0, 0 };
    if (test_selected(c, "unary/strided_in")) {
        TT *x = new_rand(c, 4, (int64_t[]){ 3, 4, 5, 6 }, -4, 4);
        View xv = view_permute(view_of(x), (int[]){ 3, 0, 2, 1 });
        TT *y = new_out(c, DITTO_F32, 4, xv.h.shape);
        unary_case(c, "unary/strided_in", &gelu, xv, y, view_of(y));
        tt_free(x);
        tt_free(y);
    }
    if (test_selected(c, "unary/strided_out")) {
        TT *x = new_rand(c, 3, (int64_t[]){ 3, 5, 7 }, -4, 4);
        TT *y = new_out(c, DITTO_F32, 3, (int64_t[]){ 5, 7, 3 });
        unary_case(c, "unary/strided_out", &silu, view_of(x), y, view_permute(view_of(y), (int[]){ 2, 0, 1 }));
        tt_free(x);
        tt_free(y);
    }
    if (test_selected(c, "unary/inplace")) {
        TT *x = new_rand(c, 3, (int64_t[]){ 3, 5, 7 }, -4, 4);
        double ref[105];
        for (int i = 0; i < 105; i++)
            ref[i] = tanh(tt_f32(x)[i]);
        int rc = ditto_op_unary(c->be, &tnh, &x->dev, &x->dev);
        op_check(c, "unary/inplace", rc, x, ref, 2e-6, 2e-6);
        tt_free(x);
    }
    if (test_selected(c, "unary/inplace_slice")) {
        /* in place on the even columns only: odd columns must stay untouched */
        TT *x = new_rand(c, 2, (int64_t[]){ 3, 10 }, -4, 4);
        double ref[30];
        for (int i = 0; i < 30; i++)
            ref[i] = i % 2 ? tt_f32(x)[i] : -2.0 * tt_f32(x)[i] + 0.5;
        View ev = view_slice(view_of(x), 1, 0, 10, 2);
        int rc = ditto_op_unary(c->be, &aff, &ev.d, &ev.d);
        op_check(c, "unary/inplace_slice", rc, x, ref, 1e-6, 1e-6);
        tt_free(x);
    }
    if (test_selected(c, "unary/large_strided")) {
        TT *x = new_rand(c, 3, (int64_t[]){ 211, 97, 3 }, -5, 5);
        View xv = view_permute(view_of(x), (int[]){ 2, 1, 0 });
        TT *y = new_out(c, DITTO_F32, 3, xv.h.shape);
        unary_case(c, "unary/large_strided", &ex, xv, y, view_of(y));
        tt_free(x);
        tt_free(y);
    }
    /* contiguous, 8-element multiples: the CUDA f16 vector path (-p f16), apart, in place, and f16 into f32 */
    const DittoUnaryParams vec[3] = { { DITTO_UNARY_LEAKY_RELU, 0.2f, 0 }, { DITTO_UNARY_SIGMOID, 0, 0 }, { DITTO_UNARY_GELU, 0, 0 } };
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "unary/vec8/%s", unary_names[vec[k].kind]);
        if (!test_selected(c, name))
            continue;
        const int64_t shape[3] = { 4, 6, 16 };
        TT *x = new_rand(c, 3, shape, -6, 6), *y = new_out(c, DITTO_F32, 3, shape);
        unary_case(c, name, &vec[k], view_of(x), y, view_of(y));
        tt_free(x);
        tt_free(y);
    }
    if (test_selected(c, "unary/vec8/inplace")) {
        TT *x = new_rand(c, 2, (int64_t[]){ 24, 40 }, -4, 4);
        double ref[960];
        for (int i = 0; i < 960; i++)
            ref[i] = tt_f32(x)[i] > 0 ? tt_f32(x)[i] : 0.2 * tt_f32(x)[i];
        int rc = ditto_op_unary(c->be, &vec[0], &x->dev, &x->dev);
        op_check(c, "unary/vec8/inplace", rc, x, ref, 1e-6, 1e-6);
        tt_free(x);
    }
    if (test_selected(c, "unary/vec8/f16_to_f32")) {
        const int64_t shape[2] = { 12, 32 };
        TT *x = tt_new_f16dev(c, 2, shape), *y = tt_new_f32dev(c, 2, shape);
        tt_fill_uniform(x, -6, 6);
        tt_to_dev(x);
        tt_to_dev(y);
        unary_case(c, "unary/vec8/f16_to_f32", &vec[1], view_of(x), y, view_of(y));
        tt_free(x);
        tt_free(y);
    }
    if (test_selected(c, "unary/err_shape")) {
        TT *x = new_rand(c, 2, (int64_t[]){ 3, 5 }, -1, 1);
        TT *y = new_out(c, DITTO_F32, 2, (int64_t[]){ 5, 3 });
        expect_rc(c, "unary/err_shape", ditto_op_unary(c->be, &gelu, &x->dev, &y->dev), DITTO_ERR_SHAPE);
        tt_free(x);
        tt_free(y);
    }
}

/* ---------------- binary ---------------- */

static const char *const binary_names[DITTO_BINARY_COUNT] = { "add", "sub", "mul", "div", "pow", "max", "min" };

static double binary_ref(DittoBinaryKind k, double u, double v)
{
    switch (k) {
    case DITTO_BINARY_ADD: return u + v;
    case DITTO_BINARY_SUB: return u - v;
    case DITTO_BINARY_MUL: return u * v;
    case DITTO_BINARY_DIV: return u / v;
    case DITTO_BINARY_POW: return pow(u, v);
    case DITTO_BINARY_MAX: return u > v ? u : v;
    case DITTO_BINARY_MIN: return u < v ? u : v;
    default: return NAN;
    }
}

static void binary_run(TestCtx *c, const char *name, DittoBinaryKind k, View a, View b)
{
    if (!test_selected(c, name))
        return;
    int nd = a.h.ndim > b.h.ndim ? a.h.ndim : b.h.ndim;
    int64_t shape[DITTO_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a.h.ndim), ib = i - (nd - b.h.ndim);
        int64_t da = ia >= 0 ? a.h.shape[ia] : 1, db = ib >= 0 ? b.h.shape[ib] : 1;
        shape[i] = da == 1 ? db : da;
    }
    TT *y = new_out(c, DITTO_F32, nd, shape);
    int64_t n = ditto_tensor_numel(&y->host), idx[DITTO_MAX_DIMS] = { 0 };
    double *ref = ref_alloc(n);
    for (int64_t i = 0; i < n; i++) {
        ref[i] = binary_ref(k, op_at_bcast(&a.h, idx, nd), op_at_bcast(&b.h, idx, nd));
        op_next_idx(idx, shape, nd);
    }
    int rc = ditto_op_binary(c->be, k, &a.d, &b.d, &y->dev);
    double tol = k == DITTO_BINARY_POW ? 2e-6 : (k == DITTO_BINARY_MAX || k == DITTO_BINARY_MIN) ? 0 : 1e-6;
    op_check(c, name, rc, y, ref, tol, tol);
    free(ref);
    tt_free(y);
}

/* Operand ranges: pow needs a > 0, div keeps |b| >= 0.5. */
static void binary_ranges(DittoBinaryKind k, float *alo, float *ahi, float *blo, float *bhi)
{
    *alo = -2, *ahi = 2, *blo = -2, *bhi = 2;
    if (k == DITTO_BINARY_POW)
        *alo = 0.1f, *ahi = 3;
    if (k == DITTO_BINARY_DIV)
        *blo = 0.5f, *bhi = 2;
}

static void binary_shapes(TestCtx *c, const char *name, DittoBinaryKind k, int na, const int64_t *sa, int nb, const int64_t *sb)
{
    if (!test_selected(c, name))
        return;
    float alo, ahi, blo, bhi;
    binary_ranges(k, &alo, &ahi, &blo, &bhi);
    TT *a = new_rand(c, na, sa, alo, ahi), *b = new_rand(c, nb, sb, blo, bhi);
    binary_run(c, name, k, view_of(a), view_of(b));
    tt_free(a);
    tt_free(b);
}

static void test_binary(TestCtx *c)
{
    char name[64];
    for (int k = 0; k < DITTO_BINARY_COUNT; k++) {
        snprintf(name, sizeof name, "binary/%s", binary_names[k]);
        binary_shapes(c, name, (DittoBinaryKind)k, 3, (int64_t[]){ 3, 5, 7 }, 3, (int64_t[]){ 3, 5, 7 });
        snprintf(name, sizeof name, "binary/%s_chan", binary_names[k]);
        binary_shapes(c, name, (DittoBinaryKind)k, 4, (int64_t[]){ 3, 5, 4, 7 }, 4, (int64_t[]){ 1, 5, 1, 1 });
        snprintf(name, sizeof name, "binary/%s_chan_left", binary_names[k]);
        binary_shapes(c, name, (DittoBinaryKind)k, 4, (int64_t[]){ 1, 5, 1, 1 }, 4, (int64_t[]){ 3, 5, 4, 7 });
    }
    binary_shapes(c, "binary/scalar0", DITTO_BINARY_SUB, 3, (int64_t[]){ 3, 5, 7 }, 0, NULL);
    binary_shapes(c, "binary/scalar1_left", DITTO_BINARY_DIV, 1, (int64_t[]){ 1 }, 3, (int64_t[]){ 3, 5, 7 });
    binary_shapes(c, "binary/trailing_vec", DITTO_BINARY_MUL, 3, (int64_t[]){ 3, 5, 7 }, 1, (int64_t[]){ 7 });
    binary_shapes(c, "binary/chan_rank3", DITTO_BINARY_ADD, 4, (int64_t[]){ 3, 5, 4, 7 }, 3, (int64_t[]){ 5, 1, 1 });
    binary_shapes(c, "binary/outer", DITTO_BINARY_SUB, 3, (int64_t[]){ 3, 1, 7 }, 3, (int64_t[]){ 1, 5, 1 });
    binary_shapes(c, "binary/outer_rank2", DITTO_BINARY_MAX, 3, (int64_t[]){ 3, 1, 7 }, 2, (int64_t[]){ 5, 1 });
    binary_shapes(c, "binary/batch1", DITTO_BINARY_MIN, 3, (int64_t[]){ 1, 5, 7 }, 2, (int64_t[]){ 5, 7 });
    binary_shapes(c, "binary/mid_bcast", DITTO_BINARY_ADD, 4, (int64_t[]){ 3, 5, 4, 7 }, 4, (int64_t[]){ 3, 1, 4, 1 });
    binary_shapes(c, "binary/large_col", DITTO_BINARY_ADD, 3, (int64_t[]){ 3, 97, 211 }, 2, (int64_t[]){ 97, 1 });
    /* a plane broadcast over channels, rows a multiple of 8 (CUDA f16: 8 elements a thread; the occlusion multiply) */
    binary_shapes(c, "binary/plane", DITTO_BINARY_MUL, 4, (int64_t[]){ 3, 16, 4, 24 }, 4, (int64_t[]){ 3, 1, 4, 24 });
    binary_shapes(c, "binary/plane_left", DITTO_BINARY_SUB, 4, (int64_t[]){ 3, 1, 5, 16 }, 4, (int64_t[]){ 3, 6, 5, 16 });
    if (test_selected(c, "binary/plane_inplace")) {
        TT *a = new_rand(c, 4, (int64_t[]){ 2, 12, 3, 32 }, -2, 2), *b = new_rand(c, 4, (int64_t[]){ 2, 1, 3, 32 }, -2, 2);
        double *ref = ref_alloc(2 * 12 * 96);
        for (int i = 0; i < 2 * 12 * 96; i++)
            ref[i] = (double)tt_f32(a)[i] * tt_f32(b)[i / (12 * 96) * 96 + i % 96];
        int rc = ditto_op_binary(c->be, DITTO_BINARY_MUL, &a->dev, &b->dev, &a->dev);
        op_check(c, "binary/plane_inplace", rc, a, ref, 1e-6, 1e-6);
        free(ref);
        tt_free(a);
        tt_free(b);
    }
    if (test_selected(c, "binary/strided")) {
        /* a permuted (3,5,7) view, b a step-2 slice (5,7) broadcast over the batch */
        TT *a = new_rand(c, 3, (int64_t[]){ 7, 3, 5 }, -2, 2), *b = new_rand(c, 2, (int64_t[]){ 5, 14 }, -2, 2);
        binary_run(c, "binary/strided", DITTO_BINARY_ADD, view_permute(view_of(a), (int[]){ 1, 2, 0 }),
                   view_slice(view_of(b), 1, 1, 14, 2));
        tt_free(a);
        tt_free(b);
    }
    if (test_selected(c, "binary/large_strided")) {
        TT *a = new_rand(c, 3, (int64_t[]){ 211, 97, 3 }, -2, 2), *b = new_rand(c, 1, (int64_t[]){ 211 }, -2, 2);
        binary_run(c, "binary/large_strided", DITTO_BINARY_MUL, view_permute(view_of(a), (int[]){ 2, 1, 0 }), view_of(b));
        tt_free(a);
        tt_free(b);
    }
    for (int side = 0; side < 2; side++) {
        const char *nm = side ? "binary/alias_b" : "binary/alias_a";
        if (!test_selected(c, nm))
            continue;
        TT *a = new_rand(c, 3, (int64_t[]){ 3, 5, 7 }, -2, 2), *b = new_rand(c, 3, (int64_t[]){ 3, 5, 7 }, -2, 2);
        double ref[105];
        for (int i = 0; i < 105; i++)
            ref[i] = (double)tt_f32(a)[i] - tt_f32(b)[i];
        TT *y = side ? b : a;
        int rc = ditto_op_binary(c->be, DITTO_BINARY_SUB, &a->dev, &b->dev, &y->dev);
        op_check(c, nm, rc, y, ref, 1e-6, 1e-6);
        tt_free(a);
        tt_free(b);
    }
    if (test_selected(c, "binary/err")) {
        TT *a = new_rand(c, 2, (int64_t[]){ 3, 5 }, -1, 1), *b = new_rand(c, 2, (int64_t[]){ 4, 5 }, -1, 1);
        TT *v = new_rand(c, 1, (int64_t[]){ 5 }, -1, 1);
        TT *y = new_out(c, DITTO_F32, 2, (int64_t[]){ 3, 5 }), *yb = new_out(c, DITTO_F32, 2, (int64_t[]){ 3, 4 });
        TT *yt = new_out(c, DITTO_F32, 2, (int64_t[]){ 5, 3 });
        expect_rc(c, "binary/err_broadcast", ditto_op_binary(c->be, DITTO_BINARY_ADD, &a->dev, &b->dev, &y->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "binary/err_y_shape", ditto_op_binary(c->be, DITTO_BINARY_ADD, &a->dev, &v->dev, &yb->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "binary/err_y_rank", ditto_op_binary(c->be, DITTO_BINARY_ADD, &v->dev, &v->dev, &y->dev), DITTO_ERR_SHAPE);
        View ytv = view_permute(view_of(yt), (int[]){ 1, 0 });
        expect_rc(c, "binary/err_y_strided", ditto_op_binary(c->be, DITTO_BINARY_ADD, &a->dev, &v->dev, &ytv.d), DITTO_ERR_INVAL);
        tt_free(a);
        tt_free(b);
        tt_free(v);
        tt_free(y);
        tt_free(yb);
        tt_free(yt);
    }
}

/* ---------------- softmax ---------------- */

static void softmax_case(TestCtx *c, const char *name, int ndim, const int64_t *shape, int axis, float lo, float hi, bool inplace)
{
    if (!test_selected(c, name))
        return;
    TT *x = new_rand(c, ndim, shape, lo, hi);
    TT *y = inplace ? x : new_out(c, DITTO_F32, ndim, shape);
    int ax = axis < 0 ? axis + ndim : axis;
    int64_t outer = 1, inner = 1, n = shape[ax];
    for (int i = 0; i < ax; i++)
        outer *= shape[i];
    for (int i = ax + 1; i < ndim; i++)
        inner *= shape[i];
    double *ref = ref_alloc(outer * n * inner);
    const float *xs = tt_f32(x);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            double m = -INFINITY, s = 0;
            for (int64_t k = 0; k < n; k++)
                m = fmax(m, xs[(o * n + k) * inner + i]);
            for (int64_t k = 0; k < n; k++)
                s += exp(xs[(o * n + k) * inner + i] - m);
            for (int64_t k = 0; k < n; k++)
                ref[(o * n + k) * inner + i] = exp(xs[(o * n + k) * inner + i] - m) / s;
        }
    }
    int rc = ditto_op_softmax(c->be, axis, &x->dev, &y->dev);
    op_check(c, name, rc, y, ref, 1e-6, 1e-6);
    free(ref);
    if (!inplace)
        tt_free(y);
    tt_free(x);
}

static void test_softmax(TestCtx *c)
{
    const int64_t s3[] = { 3, 5, 7 };
    softmax_case(c, "softmax/axis0", 3, s3, 0, -4, 4, false);
    softmax_case(c, "softmax/axis1", 3, s3, 1, -4, 4, false);
    softmax_case(c, "softmax/axis_last", 3, s3, -1, -4, 4, false);
    softmax_case(c, "softmax/axis_last_b1", 3, (int64_t[]){ 1, 6, 9 }, 2, -4, 4, false);
    softmax_case(c, "softmax/rank1", 1, (int64_t[]){ 11 }, 0, -4, 4, false);
    softmax_case(c, "softmax/shifted", 3, s3, -1, 80, 100, false);   /* exp would overflow without the max shift */
    softmax_case(c, "softmax/wide_inner", 3, (int64_t[]){ 2, 5, 130 }, 1, -4, 4, false);
    softmax_case(c, "softmax/inplace", 3, s3, 1, -4, 4, true);
    softmax_case(c, "softmax/large", 3, (int64_t[]){ 4, 37, 300 }, 1, -4, 4, false);
    softmax_case(c, "softmax/large_last", 2, (int64_t[]){ 160, 333 }, -1, -4, 4, false);
    if (test_selected(c, "softmax/err_axis")) {
        TT *x = new_rand(c, 3, s3, -1, 1), *y = new_out(c, DITTO_F32, 3, s3);
        expect_rc(c, "softmax/err_axis", ditto_op_softmax(c->be, 3, &x->dev, &y->dev), DITTO_ERR_INVAL);
        tt_free(x);
        tt_free(y);
    }
}

/* ---------------- reduce ---------------- */

static const char *const reduce_names[DITTO_REDUCE_COUNT] = { "sum", "mean", "max", "min", "sumsq", "l2" };

static void reduce_case(TestCtx *c, const char *name, DittoReduceKind k, int ndim, const int64_t *shape, int axis)
{
    if (!test_selected(c, name))
        return;
    TT *x = new_rand(c, ndim, shape, -2, 2);
    int ax = axis < 0 ? axis + ndim : axis;
    int64_t ys[DITTO_MAX_DIMS], outer = 1, inner = 1, n = shape[ax];
    for (int i = 0; i < ndim; i++)
        ys[i] = i == ax ? 1 : shape[i];
    for (int i = 0; i < ax; i++)
        outer *= shape[i];
    for (int i = ax + 1; i < ndim; i++)
        inner *= shape[i];
    TT *y = new_out(c, DITTO_F32, ndim, ys);
    double *ref = ref_alloc(outer * inner);
    const float *xs = tt_f32(x);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            double s = 0, sq = 0, mx = -INFINITY, mn = INFINITY;
            for (int64_t j = 0; j < n; j++) {
                double v = xs[(o * n + j) * inner + i];
                s += v;
                sq += v * v;
                mx = fmax(mx, v);
                mn = fmin(mn, v);
            }
            double r[DITTO_REDUCE_COUNT] = { s, s / (double)n, mx, mn, sq, sqrt(sq) };
            ref[o * inner + i] = r[k];
        }
    }
    int rc = ditto_op_reduce(c->be, k, axis, &x->dev, &y->dev);
    double tol = (k == DITTO_REDUCE_MAX || k == DITTO_REDUCE_MIN) ? 0 : 1e-6;
    op_check(c, name, rc, y, ref, tol, tol);
    free(ref);
    tt_free(x);
    tt_free(y);
}

static void test_reduce(TestCtx *c)
{
    char name[64];
    static const char *const axis_names[3] = { "first", "mid", "last" };
    for (int k = 0; k < DITTO_REDUCE_COUNT; k++) {
        for (int a = 0; a < 3; a++) {
            snprintf(name, sizeof name, "reduce/%s_%s", reduce_names[k], axis_names[a]);
            reduce_case(c, name, (DittoReduceKind)k, 3, (int64_t[]){ 3, 5, 7 }, a == 2 ? -1 : a);
        }
    }
    reduce_case(c, "reduce/sum_wide_inner", DITTO_REDUCE_SUM, 3, (int64_t[]){ 2, 9, 150 }, 1);
    reduce_case(c, "reduce/max_wide_inner", DITTO_REDUCE_MAX, 3, (int64_t[]){ 2, 9, 150 }, 1);
    reduce_case(c, "reduce/mean_b1", DITTO_REDUCE_MEAN, 3, (int64_t[]){ 1, 6, 5 }, -1);
    reduce_case(c, "reduce/l2_b1", DITTO_REDUCE_L2, 3, (int64_t[]){ 1, 6, 5 }, 1);
    reduce_case(c, "reduce/sumsq_large", DITTO_REDUCE_SUMSQ, 3, (int64_t[]){ 3, 97, 211 }, 1);
    reduce_case(c, "reduce/mean_large_last", DITTO_REDUCE_MEAN, 2, (int64_t[]){ 97, 633 }, -1);
    if (test_selected(c, "reduce/err_shape")) {
        TT *x = new_rand(c, 3, (int64_t[]){ 3, 5, 7 }, -1, 1), *y = new_out(c, DITTO_F32, 3, (int64_t[]){ 3, 5, 7 });
        TT *y2 = new_out(c, DITTO_F32, 2, (int64_t[]){ 3, 7 });
        expect_rc(c, "reduce/err_shape", ditto_op_reduce(c->be, DITTO_REDUCE_SUM, 1, &x->dev, &y->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "reduce/err_dropped_axis", ditto_op_reduce(c->be, DITTO_REDUCE_SUM, 1, &x->dev, &y2->dev), DITTO_ERR_SHAPE);
        tt_free(x);
        tt_free(y);
        tt_free(y2);
    }
}

/* ---------------- concat ---------------- */

/* Concatenate 3 inputs along axis; input 1 is a strided view (permute or slice). */
static void concat_case(TestCtx *c, const char *name, int axis, View *xs, int n, int ndim)
{
    if (!test_selected(c, name))
        return;
    int ax = axis < 0 ? axis + ndim : axis;
    int64_t shape[DITTO_MAX_DIMS];
    memcpy(shape, xs[0].h.shape, sizeof shape);
    shape[ax] = 0;
    for (int i = 0; i < n; i++)
        shape[ax] += xs[i].h.shape[ax];
    TT *y = new_out(c, DITTO_F32, ndim, shape);
    int64_t total = ditto_tensor_numel(&y->host), idx[DITTO_MAX_DIMS] = { 0 };
    double *ref = ref_alloc(total);
    for (int64_t e = 0; e < total; e++) {
        int64_t sub[DITTO_MAX_DIMS];
        memcpy(sub, idx, sizeof sub);
        int i = 0;
        while (sub[ax] >= xs[i].h.shape[ax])
            sub[ax] -= xs[i++].h.shape[ax];
        ref[e] = at(&xs[i].h, sub);
        op_next_idx(idx, shape, ndim);
    }
    const DittoTensor *dv[8];
    for (int i = 0; i < n; i++)
        dv[i] = &xs[i].d;
    int rc = ditto_op_concat(c->be, axis, n, dv, &y->dev);
    op_check(c, name, rc, y, ref, 0, 0);
    free(ref);
    tt_free(y);
}

static void test_concat(TestCtx *c)
{
    {
        TT *a = new_rand(c, 3, (int64_t[]){ 1, 5, 7 }, -1, 1), *b = new_rand(c, 3, (int64_t[]){ 5, 3, 7 }, -1, 1);
        TT *d = new_rand(c, 3, (int64_t[]){ 2, 5, 7 }, -1, 1);
        View xs[3] = { view_of(a), view_permute(view_of(b), (int[]){ 1, 0, 2 }), view_of(d) };
        concat_case(c, "concat/axis0", 0, xs, 3, 3);
        tt_free(a);
        tt_free(b);
        tt_free(d);
    }
    {
        TT *a = new_rand(c, 3, (int64_t[]){ 3, 2, 7 }, -1, 1), *b = new_rand(c, 3, (int64_t[]){ 3, 10, 7 }, -1, 1);
        TT *d = new_rand(c, 3, (int64_t[]){ 3, 1, 7 }, -1, 1);
        View xs[3] = { view_of(a), view_slice(view_of(b), 1, 1, 10, 2), view_of(d) };
        concat_case(c, "concat/axis1", 1, xs, 3, 3);
        concat_case(c, "concat/single", 1, xs + 1, 1, 3);
        tt_free(a);
        tt_free(b);
        tt_free(d);
    }
    {
        TT *a = new_rand(c, 3, (int64_t[]){ 3, 5, 4 }, -1, 1), *b = new_rand(c, 3, (int64_t[]){ 7, 3, 5 }, -1, 1);
        TT *d = new_rand(c, 3, (int64_t[]){ 3, 5, 1 }, -1, 1);
        View xs[3] = { view_of(a), view_permute(view_of(b), (int[]){ 1, 2, 0 }), view_of(d) };
        concat_case(c, "concat/axis_last", -1, xs, 3, 3);
        tt_free(a);
        tt_free(b);
        tt_free(d);
    }
    {
        TT *a = new_rand(c, 2, (int64_t[]){ 1, 80 }, -1, 1), *b = new_rand(c, 2, (int64_t[]){ 1, 3 }, -1, 1);
        View xs[2] = { view_of(a), view_of(b) };
        concat_case(c, "concat/b1_last", 1, xs, 2, 2);
        tt_free(a);
        tt_free(b);
    }
    if (test_selected(c, "concat/u8")) {
        /* byte copies of a non-float dtype, one input a step-2 slice */
        TT *a = tt_new(c, DITTO_U8, 2, (int64_t[]){ 2, 3 }), *b = tt_new(c, DITTO_U8, 2, (int64_t[]){ 1, 6 });
        tt_fill_uniform(a, 0, 1);
        tt_fill_uniform(b, 0, 1);
        tt_to_dev(a);
        tt_to_dev(b);
        TT *y = new_out(c, DITTO_U8, 2, (int64_t[]){ 3, 3 });
        View bs = view_slice(view_of(b), 1, 1, 6, 2);
        const DittoTensor *xs[2] = { &a->dev, &bs.d };
        int rc = ditto_op_concat(c->be, 0, 2, xs, &y->dev);
        bool ok = rc >= 0 && tt_to_host(y) >= 0;
        const uint8_t *yy = y->host.data, *aa = a->host.data, *bb = b->host.data;
        for (int i = 0; i < 6 && ok; i++)
            ok = yy[i] == aa[i];
        for (int j = 0; j < 3 && ok; j++)
            ok = yy[6 + j] == bb[1 + 2 * j];
        test_report(c, "concat/u8", ok && tt_guards_ok(y), "rc %d", rc);
        tt_free(a);
        tt_free(b);
        tt_free(y);
    }
    if (test_selected(c, "concat/err")) {
        TT *a = new_rand(c, 2, (int64_t[]){ 3, 5 }, -1, 1), *b = new_rand(c, 2, (int64_t[]){ 4, 6 }, -1, 1);
        TT *y = new_out(c, DITTO_F32, 2, (int64_t[]){ 7, 5 }), *y2 = new_out(c, DITTO_F32, 2, (int64_t[]){ 8, 5 });
        const DittoTensor *xs[2] = { &a->dev, &b->dev }, *xa[2] = { &a->dev, &a->dev };
        expect_rc(c, "concat/err_mismatch", ditto_op_concat(c->be, 0, 2, xs, &y->dev), DITTO_ERR_SHAPE);
        expect_rc(c, "concat/err_total", ditto_op_concat(c->be, 0, 2, xa, &y2->dev), DITTO_ERR_SHAPE);
        tt_free(a);
        tt_free(b);
        tt_free(y);
        tt_free(y2);
    }
}

static void test_copy_errors(TestCtx *c)
{
    if (!test_selected(c, "copy/err"))
        return;
    TT *x = new_rand(c, 2, (int64_t[]){ 3, 5 }, -1, 1);
    TT *y1 = new_out(c, DITTO_F32, 2, (int64_t[]){ 3, 4 }), *y2 = new_out(c, DITTO_F32, 2, (int64_t[]){ 5, 3 });
    TT *y3 = new_out(c, DITTO_F32, 2, (int64_t[]){ 5, 3 });
    expect_rc(c, "copy/err_numel", ditto_op_copy(c->be, &x->dev, &y1->dev), DITTO_ERR_SHAPE);
    expect_rc(c, "copy/err_same_rank", ditto_op_copy(c->be, &x->dev, &y2->dev), DITTO_ERR_SHAPE);
    /* a reshape copy needs a contiguous y */
    View yt = view_select(view_permute(view_of(y3), (int[]){ 1, 0 }), 0, 0);
    TT *x1 = new_rand(c, 3, (int64_t[]){ 1, 1, 5 }, -1, 1);
    expect_rc(c, "copy/err_reshape_strided_y", ditto_op_copy(c->be, &x1->dev, &yt.d), DITTO_ERR_SHAPE);
    tt_free(x);
    tt_free(x1);
    tt_free(y1);
    tt_free(y2);
    tt_free(y3);
}

void test_ops_elementwise(TestCtx *c)
{
    test_copy(c);
    test_cast(c);
    test_copy_errors(c);
    test_fill(c);
    test_unary(c);
    test_bias_unary(c);
    test_binary(c);
    test_softmax(c);
    test_reduce(c);
    test_concat(c);
}
