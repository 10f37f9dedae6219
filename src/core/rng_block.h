/*
 * The arithmetic of core/rng.h, one definition for the host and CUDA
 * kernels (the GPU draws the diffusion noise where it is used).
 */
#ifndef DITTO_CORE_RNG_BLOCK_H
#define DITTO_CORE_RNG_BLOCK_H

#include <math.h>
#include <stdint.h>

#include "core/half.h"   /* DITTO_HOST_DEVICE */

/* Philox4x32-10 of counter (blk, stream) under key seed: the 4 words of block blk. */
static inline DITTO_HOST_DEVICE void ditto_philox_block(uint64_t seed, uint64_t stream, uint64_t blk, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)blk, c1 = (uint32_t)(blk >> 32), c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        const uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/*
 * Box-Muller of two words in double, rounded to float: z0 = r cos a,
 * z1 = r sin a. The device's double log / sin / cos may differ from the C
 * library's in the last double bit, which reaches a float only when the
 * exact value lies within that bit of a float rounding boundary (about one
 * value in 10^8).
 */
static inline DITTO_HOST_DEVICE void ditto_box_muller(uint32_t a, uint32_t b, float *z0, float *z1)
{
    const double u1 = ((double)(a >> 8) + 1.0) * (1.0 / 16777216.0);
    const double u2 = (double)(b >> 8) * (1.0 / 16777216.0);
    const double r = sqrt(-2.0 * log(u1));
    const double t = 6.283185307179586476925 * u2;
    *z0 = (float)(r * cos(t));
    *z1 = (float)(r * sin(t));
}

#endif
