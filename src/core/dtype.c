#include "core/dtype.h"

#include <string.h>

#include "core/dtype_elem.h"
#include "core/half.h"

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

uint16_t ditto_f32_to_f16(float f)
{
    return ditto_half_from_f32(f);
}

float ditto_f16_to_f32(uint16_t h)
{
    return ditto_half_to_f32(h);
}

uint16_t ditto_f32_to_bf16(float f)
{
    return ditto_bf16_from_f32(f);
}

float ditto_bf16_to_f32(uint16_t h)
{
    return ditto_bf16_to_f32_inline(h);
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
        ditto_elem_store(dst, dt, (int64_t)i, ditto_elem_load(src, st, (int64_t)i));
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
