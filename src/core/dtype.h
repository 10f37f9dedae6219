/* Element types and f16/bf16 <-> f32 conversion. */
#ifndef DITTO_CORE_DTYPE_H
#define DITTO_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum DittoDType {
    DITTO_F32 = 0,
    DITTO_F16,
    DITTO_BF16,
    DITTO_F64,
    DITTO_I64,
    DITTO_I32,
    DITTO_U8,
    DITTO_I8,
    DITTO_BOOL,
    DITTO_DTYPE_COUNT
} DittoDType;

size_t ditto_dtype_size(DittoDType t);
const char *ditto_dtype_name(DittoDType t);

/* IEEE binary16, round to nearest even; NaN stays NaN, overflow -> Inf. */
uint16_t ditto_f32_to_f16(float f);
float ditto_f16_to_f32(uint16_t h);
/* bfloat16 = upper half of binary32, round to nearest even; NaN kept quiet. */
uint16_t ditto_f32_to_bf16(float f);
float ditto_bf16_to_f32(uint16_t h);

/* Convert n elements between any two numeric dtypes (contiguous, both aligned to their element size). */
void ditto_convert(void *dst, DittoDType dt, const void *src, DittoDType st, size_t n);
/* Same, for a source that may be unaligned (e.g. raw tensor bytes inside a mapped file). */
void ditto_convert_unaligned(void *dst, DittoDType dt, const void *src, DittoDType st, size_t n);

#endif
