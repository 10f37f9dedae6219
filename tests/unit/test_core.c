/* Core: dtype conversion, tensor views, arena, thread pool, RNG, errors. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/thread.h"
#include "ditto/ditto.h"
#include "test_util.h"

static void test_f16(TestCtx *c)
{
    /* exact values, rounding to nearest even, subnormals, overflow, NaN */
    const struct { float f; uint16_t h; } cases[] = {
        { 0.0f, 0x0000 }, { -0.0f, 0x8000 }, { 1.0f, 0x3c00 }, { -2.0f, 0xc000 }, { 65504.0f, 0x7bff },
        { 65520.0f, 0x7c00 }, { 1e6f, 0x7c00 }, { 5.960464477539063e-08f, 0x0001 }, { 6.103515625e-05f, 0x0400 },
        { 1.0009765625f, 0x3c01 }, { 1.00048828125f, 0x3c00 }, /* tie -> even */ { 1.00146484375f, 0x3c02 }, /* tie -> even (up) */
        { 2.98023223876953125e-08f, 0x0000 }, /* half of the smallest subnormal: ties to even -> 0 */
        { INFINITY, 0x7c00 }, { -INFINITY, 0xfc00 },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t h = ditto_f32_to_f16(cases[i].f);
        if (h != cases[i].h) {
            printf("  f16(%g) = 0x%04x, expected 0x%04x\n", cases[i].f, h, cases[i].h);
            bad++;
        }
    }
    /* every finite half round-trips */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00)
            continue;
        if (ditto_f32_to_f16(ditto_f16_to_f32((uint16_t)h)) != h)
            bad++;
    }
    if (!isnan(ditto_f16_to_f32(ditto_f32_to_f16(NAN))))
        bad++;
    test_report(c, "core.f16", bad == 0, "%d mismatches", bad);

    bad = 0;
    if (ditto_f32_to_bf16(1.0f) != 0x3f80 || ditto_bf16_to_f32(0x3f80) != 1.0f)
        bad++;
    if (ditto_f32_to_bf16(1.00390625f) != 0x3f80)    /* tie -> even */
        bad++;
    if (ditto_f32_to_bf16(1.01171875f) != 0x3f82)    /* tie -> even (up) */
        bad++;
    if (!isnan(ditto_bf16_to_f32(ditto_f32_to_bf16(NAN))))
        bad++;
    test_report(c, "core.bf16", bad == 0, "%d mismatches", bad);

    float src[4] = { 1.5f, -2.25f, 300.0f, 0.0f };
    uint8_t u8[4];
    int64_t i64[4];
    ditto_convert(u8, DITTO_U8, src, DITTO_F32, 4);
    ditto_convert(i64, DITTO_I64, src, DITTO_F32, 4);
    test_report(c, "core.convert", u8[0] == 1 && u8[1] == 0 && u8[2] == 255 && i64[1] == -2 && i64[2] == 300, "");
}

static void test_views(TestCtx *c)
{
    float data[2 * 3 * 4];
    for (int i = 0; i < 24; i++)
        data[i] = (float)i;
    DittoTensor t = ditto_tensor_f32(data, 3, (int64_t[]){ 2, 3, 4 });
    DittoTensor p, s, r, sel;
    int ok = ditto_tensor_numel(&t) == 24 && ditto_tensor_is_contiguous(&t);
    ok &= ditto_tensor_permute(&t, (int[]){ 2, 0, 1 }, &p) == 0 && p.shape[0] == 4 && p.stride[0] == 1 && !ditto_tensor_is_contiguous(&p);
    ok &= ditto_tensor_slice(&t, -1, 1, 4, 2, &s) == 0 && s.shape[2] == 2 && ((float *)s.data)[0] == 1.0f && s.stride[2] == 2;
    ok &= ditto_tensor_reshape(&t, 2, (int64_t[]){ -1, 4 }, &r) == 0 && r.shape[0] == 6;
    ok &= ditto_tensor_reshape(&p, 2, (int64_t[]){ -1, 4 }, &r) == DITTO_ERR_SHAPE;
    ok &= ditto_tensor_reshape(&t, 2, (int64_t[]){ 5, -1 }, &r) == DITTO_ERR_SHAPE;
    ok &= ditto_tensor_select(&t, 1, 2, &sel) == 0 && sel.ndim == 2 && ((float *)sel.data)[0] == 8.0f;
    ok &= ditto_tensor_select(&t, 1, 3, &sel) == DITTO_ERR_INVAL;
    ok &= ditto_tensor_permute(&t, (int[]){ 0, 0, 1 }, &p) == DITTO_ERR_INVAL;
    char buf[DITTO_SHAPE_STR_MAX];
    ok &= !strcmp(ditto_shape_str(t.shape, t.ndim, buf, sizeof buf), "(2,3,4)");
    test_report(c, "core.tensor_views", ok, "");
}

static void test_arena(TestCtx *c)
{
    DittoArena a;
    int ok = ditto_arena_init(&a, &ditto_host_allocator, 4096) == 0;
    DittoTensor t1, t2, t3;
    ok &= ditto_arena_tensor(&a, DITTO_F32, 2, (int64_t[]){ 10, 10 }, &t1) == 0;
    DittoArenaMark mark = ditto_arena_mark(&a);
    ok &= ditto_arena_tensor(&a, DITTO_F32, 1, (int64_t[]){ 100 }, &t2) == 0;
    ok &= ((uintptr_t)t2.data % DITTO_ARENA_ALIGN) == 0 && (char *)t2.data >= (char *)t1.data + 400;
    ditto_arena_release(&a, mark);
    ok &= ditto_arena_tensor(&a, DITTO_F32, 1, (int64_t[]){ 100 }, &t3) == 0 && t3.data == t2.data;
    /* overflow grows a block; reset folds to one block of the peak; the same pass then fits */
    ok &= ditto_arena_tensor(&a, DITTO_F32, 1, (int64_t[]){ 10000 }, &t3) == 0 && a.nblocks == 2 && a.grows == 1;
    size_t peak = a.peak;
    ok &= peak >= 40000 + 400 + 400 && ditto_arena_reset(&a) == 0 && a.nblocks == 1 && ditto_arena_capacity(&a) == peak;
    ok &= ditto_arena_tensor(&a, DITTO_F32, 2, (int64_t[]){ 10, 10 }, &t1) == 0;
    ok &= ditto_arena_tensor(&a, DITTO_F32, 1, (int64_t[]){ 100 }, &t2) == 0;
    ok &= ditto_arena_tensor(&a, DITTO_F32, 1, (int64_t[]){ 10000 }, &t3) == 0 && a.grows == 1;
    ditto_arena_free(&a);
    ditto_mem_fail_after(0);
    ok &= ditto_arena_init(&a, &ditto_host_allocator, 64) == DITTO_ERR_NOMEM;
    ditto_mem_fail_after(-1);
    ok &= ditto_arena_init(&a, &ditto_host_allocator, 0) == 0 && ditto_arena_bytes(&a, 10) != NULL;
    ditto_mem_fail_after(0);
    ok &= ditto_arena_bytes(&a, (size_t)2 << 20) == NULL;
    ditto_mem_fail_after(-1);
    ditto_arena_free(&a);
    test_report(c, "core.arena", ok, "");
}

typedef struct { atomic_int hits[1000]; atomic_int total; } PoolCtx;

static void pool_task(void *ctx, int i)
{
    PoolCtx *p = ctx;
    atomic_fetch_add(&p->hits[i], 1);
    atomic_fetch_add(&p->total, i);
}

static void test_pool(TestCtx *c)
{
    DittoThreadPool *pool;
    int ok = ditto_pool_create(&pool, 4) == 0 && ditto_pool_size(pool) == 4;
    static PoolCtx pc;
    for (int rep = 0; rep < 50; rep++) {
        memset(&pc, 0, sizeof pc);
        ditto_pool_run(pool, 1000, pool_task, &pc);
        for (int i = 0; i < 1000; i++)
            ok &= atomic_load(&pc.hits[i]) == 1;
        ok &= atomic_load(&pc.total) == 999 * 1000 / 2;
    }
    ditto_pool_destroy(&pool);
    ok &= pool == NULL;
    ditto_pool_destroy(&pool);   /* NULL is fine */
    test_report(c, "core.thread_pool", ok, "");
}

static void test_rng(TestCtx *c)
{
    /* Known-answer vectors of Philox4x32-10 (Random123 kat_vectors) */
    const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        { { 0, 0, 0, 0 }, { 0, 0 }, { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 } },
        { { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff }, { 0xffffffff, 0xffffffff }, { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd } },
        { { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 }, { 0xa4093822, 0x299f31d0 }, { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } },
    };
    int bad = 0;
    for (size_t i = 0; i < 3; i++) {
        uint32_t o[4];
        ditto_philox4x32(kat[i].ctr, kat[i].key, o);
        bad += memcmp(o, kat[i].out, sizeof o) != 0;
    }
    test_report(c, "core.rng_philox_kat", bad == 0, "%d vectors wrong", bad);

    /* addressability: fill == per-index draws, from any start */
    float a[37], b[37];
    ditto_rng_fill_normal(7, 3, 5, a, 37);
    bad = 0;
    for (int i = 0; i < 37; i++)
        bad += a[i] != ditto_rng_normal(7, 3, 5 + (uint64_t)i);
    ditto_rng_fill_normal(8, 3, 5, b, 37);
    int differ = memcmp(a, b, sizeof a) != 0;
    test_report(c, "core.rng_addressable", bad == 0 && differ, "%d mismatches", bad);

    /* moments of 1e6 normals and uniforms */
    enum { N = 1000000 };
    static float v[N];
    ditto_rng_fill_normal(1, 0, 0, v, N);
    double m = 0, s2 = 0;
    for (int i = 0; i < N; i++)
        m += v[i];
    m /= N;
    for (int i = 0; i < N; i++)
        s2 += (v[i] - m) * (v[i] - m);
    s2 /= N;
    ditto_rng_fill_uniform(1, 1, 0, v, N);
    double mu = 0, lo = 1, hi = 0;
    for (int i = 0; i < N; i++) {
        mu += v[i];
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    mu /= N;
    int ok = fabs(m) < 0.005 && fabs(s2 - 1) < 0.005 && fabs(mu - 0.5) < 0.002 && lo >= 0 && hi < 1;
    test_report(c, "core.rng_moments", ok, "normal mean %.4f var %.4f, uniform mean %.4f", m, s2, mu);
}

static void test_errors(TestCtx *c)
{
    int ok = !strcmp(ditto_strerror(0), "success") && strlen(ditto_strerror(DITTO_ERR_FORMAT)) > 0 &&
             !strcmp(ditto_strerror(12345), "unknown error") && !strcmp(ditto_strerror(DITTO_ERR_NOMEM), "out of memory");
    test_report(c, "core.strerror", ok, "");
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    test_f16(&c);
    test_views(&c);
    test_arena(&c);
    test_pool(&c);
    test_rng(&c);
    test_errors(&c);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
