/*
 * One element of any dtype read as double / written from double, the way
 * ditto_convert casts: float -> integer clamps to the target range (NaN -> 0;
 * the C cast alone is undefined outside it). Header-only and usable from CUDA
 * device code, so the CPU conversion and the GPU cast kernels share it.
 */
#ifndef DITTO_CORE_DTYPE_ELEM_H
#define DITTO_CORE_DTYPE_ELEM_H

#include <stdint.h>

#include "core/dtype.h"
#include "core/half.h"

static inline DITTO_HOST_DEVICE double ditto_elem_load(const void *p, int t, int64_t i)
{
    switch (t) {
    case DITTO_F32: return ((const float *)p)[i];
    case DITTO_F16: return ditto_half_to_f32(((const uint16_t *)p)[i]);
    case DITTO_BF16: return ditto_bf16_to_f32_inline(((const uint16_t *)p)[i]);
    case DITTO_F64: return ((const double *)p)[i];
    case DITTO_I64: return (double)((const int64_t *)p)[i];
    case DITTO_I32: return ((const int32_t *)p)[i];
    case DITTO_U8: return ((const uint8_t *)p)[i];
    case DITTO_I8: return ((const int8_t *)p)[i];
    case DITTO_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

static inline DITTO_HOST_DEVICE double ditto_elem_clamp(double v, double lo, double hi)
{
    return v != v ? 0 : v < lo ? lo : v > hi ? hi : v;
}

static inline DITTO_HOST_DEVICE void ditto_elem_store(void *p, int t, int64_t i, double v)
{
    switch (t) {
    case DITTO_F32: ((float *)p)[i] = (float)v; break;
    case DITTO_F16: ((uint16_t *)p)[i] = ditto_half_from_f32((float)v); break;
    case DITTO_BF16: ((uint16_t *)p)[i] = ditto_bf16_from_f32((float)v); break;
    case DITTO_F64: ((double *)p)[i] = v; break;
    case DITTO_I64: ((int64_t *)p)[i] = (int64_t)ditto_elem_clamp(v, -9.2233720368547748e18, 9.2233720368547748e18 - 1024); break;
    case DITTO_I32: ((int32_t *)p)[i] = (int32_t)ditto_elem_clamp(v, -2147483648.0, 2147483647.0); break;
    case DITTO_U8: ((uint8_t *)p)[i] = (uint8_t)(int)ditto_elem_clamp(v, 0, 255); break;
    case DITTO_I8: ((int8_t *)p)[i] = (int8_t)(int)ditto_elem_clamp(v, -128, 127); break;
    case DITTO_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

#endif
