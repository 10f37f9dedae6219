#include "core/dtype.h"

#include <string.h>

static const struct { size_t size; const char *name; } dtype_info[DITTO_DTYPE_COUNT] = {
    [DITTO_F32] = { 4, "float32" }, [DITTO_F16] = { 2, "float16" }, [DITTO_BF16] = { 2, "bfloat16" },
    [DITTO_F64] = { 8, "float64" }, [DITTO_I64] = { 8, "int64" },   [DITTO_I32] = { 4, "int32" },
    [DITTO_U8] = { 1, "uint8" },    [DITTO_I8] = { 1, "int8" },      [DITTO_BOOL] = { 1, "bool" },
};

size_t ditto_dtype_size(DittoDType t)
{
    return (unsigned)t < DITTO_DTYPE_COUNT ? dtype_info[t].size : 0;
}

const char *ditto_dtype_name(DittoDType t)
{
    return (unsigned)t < DITTO_DTYPE_COUNT ? dtype_info[t].name : "invalid";
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t ditto_f32_to_f16(float f)
{
    uint32_t x = f2u(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff)                       /* Inf / NaN */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)                           /* overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {                          /* subnormal or zero */
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;                               /* may carry into the exponent: correct */
    return (uint16_t)h;
}

float ditto_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0)
            return u2f(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31)
        return u2f(sign | 0x7f800000u | (man << 13));
    return u2f(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

uint16_t ditto_f32_to_bf16(float f)
{
    uint32_t x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float ditto_bf16_to_f32(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

static double load(const void *p, DittoDType t, size_t i)
{
    switch (t) {
    case DITTO_F32: return ((const float *)p)[i];
    case DITTO_F16: return ditto_f16_to_f32(((const uint16_t *)p)[i]);
    case DITTO_BF16: return ditto_bf16_to_f32(((const uint16_t *)p)[i]);
    case DITTO_F64: return ((const double *)p)[i];
    case DITTO_I64: return (double)((const int64_t *)p)[i];
    case DITTO_I32: return ((const int32_t *)p)[i];
    case DITTO_U8: return ((const uint8_t *)p)[i];
    case DITTO_I8: return ((const int8_t *)p)[i];
    case DITTO_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

/* Float -> integer casts are undefined in C outside the target range: clamp. */
static double clampd(double v, double lo, double hi)
{
    return v != v ? 0 : v < lo ? lo : v > hi ? hi : v;
}

static void store(void *p, DittoDType t, size_t i, double v)
{
    switch (t) {
    case DITTO_F32: ((float *)p)[i] = (float)v; break;
    case DITTO_F16: ((uint16_t *)p)[i] = ditto_f32_to_f16((float)v); break;
    case DITTO_BF16: ((uint16_t *)p)[i] = ditto_f32_to_bf16((float)v); break;
    case DITTO_F64: ((double *)p)[i] = v; break;
    case DITTO_I64: ((int64_t *)p)[i] = (int64_t)clampd(v, -9.2233720368547748e18, 9.2233720368547748e18 - 1024); break;
    case DITTO_I32: ((int32_t *)p)[i] = (int32_t)clampd(v, -2147483648.0, 2147483647.0); break;
    case DITTO_U8: ((uint8_t *)p)[i] = (uint8_t)clampd(v, 0, 255); break;
    case DITTO_I8: ((int8_t *)p)[i] = (int8_t)clampd(v, -128, 127); break;
    case DITTO_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

void ditto_convert(void *dst, DittoDType dt, const void *src, DittoDType st, size_t n)
{
    if (dt == st) {
        memcpy(dst, src, n * ditto_dtype_size(dt));
        return;
    }
    if (dt == DITTO_F32 && st == DITTO_F16) {
        for (size_t i = 0; i < n; i++)
            ((float *)dst)[i] = ditto_f16_to_f32(((const uint16_t *)src)[i]);
        return;
    }
    if (dt == DITTO_F16 && st == DITTO_F32) {
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = ditto_f32_to_f16(((const float *)src)[i]);
        return;
    }
    /* i64 -> f64 -> i64 would lose precision above 2^53; integers copy exactly here */
    if ((dt == DITTO_I64 || dt == DITTO_I32) && (st == DITTO_I64 || st == DITTO_I32)) {
        for (size_t i = 0; i < n; i++) {
            int64_t v = st == DITTO_I64 ? ((const int64_t *)src)[i] : ((const int32_t *)src)[i];
            if (dt == DITTO_I64) ((int64_t *)dst)[i] = v; else ((int32_t *)dst)[i] = (int32_t)v;
        }
        return;
    }
    for (size_t i = 0; i < n; i++)
        store(dst, dt, i, load(src, st, i));
}

void ditto_convert_unaligned(void *dst, DittoDType dt, const void *src, DittoDType st, size_t n)
{
    size_t es = ditto_dtype_size(st);
    if (((uintptr_t)src % (es ? es : 1)) == 0) {
        ditto_convert(dst, dt, src, st, n);
        return;
    }
    /* element by element through an aligned 8-byte slot: no misaligned typed loads */
    size_t ds = ditto_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        uint64_t slot;
        memcpy(&slot, (const char *)src + i * es, es);
        ditto_convert((char *)dst + i * ds, dt, &slot, st, 1);
    }
}
