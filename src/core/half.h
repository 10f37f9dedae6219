/*
 * float32 <-> float16 / bfloat16 bit conversions, round to nearest even, NaN
 * kept quiet. Header-only and usable from CUDA device code too, so the CPU
 * oracle (core/dtype.c) and the GPU cast kernels share one definition.
 */
#ifndef DITTO_CORE_HALF_H
#define DITTO_CORE_HALF_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define DITTO_HOST_DEVICE __host__ __device__
#else
#define DITTO_HOST_DEVICE
#endif

static inline DITTO_HOST_DEVICE uint32_t ditto_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline DITTO_HOST_DEVICE float ditto_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/*
 * The nearest TF32 value of v (10 explicit mantissa bits, ties to even), as
 * a float; Inf and NaN unchanged, overflow rounds to Inf. The rounding of
 * every tf32 option (ops.h), host and device.
 */
static inline DITTO_HOST_DEVICE float ditto_tf32_round(float v)
{
    uint32_t u = ditto_f32_bits(v);
    if ((u & 0x7f800000u) != 0x7f800000u) {
        u += 0xfffu + ((u >> 13) & 1u);
        u &= ~0x1fffu;
    }
    return ditto_bits_f32(u);
}

static inline DITTO_HOST_DEVICE uint16_t ditto_half_from_f32(float f)
{
    uint32_t x = ditto_f32_bits(f);
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

static inline DITTO_HOST_DEVICE float ditto_half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0)
            return ditto_bits_f32(sign);
        float v = (float)man * (1.0f / 16777216.0f);   /* subnormal: man * 2^-24 */
        return sign ? -v : v;
    }
    if (exp == 31)
        return ditto_bits_f32(sign | 0x7f800000u | (man << 13));
    return ditto_bits_f32(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

static inline DITTO_HOST_DEVICE uint16_t ditto_bf16_from_f32(float f)
{
    uint32_t x = ditto_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline DITTO_HOST_DEVICE float ditto_bf16_to_f32_inline(uint16_t h)
{
    return ditto_bits_f32((uint32_t)h << 16);
}

#endif
