/*
 * Index arithmetic of the pad op (ONNX Pad modes), one definition for the
 * CPU backend and the CUDA kernels (host and device).
 */
#ifndef DITTO_OPS_PAD_MAP_H
#define DITTO_OPS_PAD_MAP_H

#include <stdint.h>

#include "core/half.h"   /* DITTO_HOST_DEVICE */
#include "ops/ops.h"

/* Source index along an axis of n elements for output index o, or -1 for the constant. */
static inline DITTO_HOST_DEVICE int64_t ditto_pad_map(int mode, int64_t o, int64_t begin, int64_t n)
{
    int64_t i = o - begin;
    if (i >= 0 && i < n)
        return i;
    switch (mode) {
    case DITTO_PAD_EDGE:
        return i < 0 ? 0 : n - 1;
    case DITTO_PAD_WRAP:
        return ((i % n) + n) % n;
    case DITTO_PAD_REFLECT: {
        if (n == 1)
            return 0;
        int64_t period = 2 * (n - 1);
        i = ((i % period) + period) % period;
        return i < n ? i : period - i;
    }
    default:
        return -1;
    }
}

#endif
