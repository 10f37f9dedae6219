/*
 * Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11).
 *
 * Every draw is addressed by (seed, stream, index), so any element can be
 * produced independently, in any order, on any thread or device:
 *   key     = (seed & 0xffffffff, seed >> 32)
 *   counter = (block & 0xffffffff, block >> 32, stream & 0xffffffff, stream >> 32)
 * where block = index / 4 and the block's 4 output words serve indices
 * 4*block .. 4*block+3.
 *
 * uniform(index): word w = out[index % 4]; (w >> 8) * 2^-24, in [0, 1).
 * normal(index):  Box-Muller on the pair of words (out[2p], out[2p+1]) with
 *   p = (index % 4) / 2: u1 = ((out[2p] >> 8) + 1) * 2^-24 in (0, 1],
 *   u2 = (out[2p+1] >> 8) * 2^-24, r = sqrt(-2 ln u1), a = 2 pi u2;
 *   even index -> r cos a, odd index -> r sin a. Computed in double, rounded
 *   to float, so a GPU port that uses double math gives identical values.
 */
#ifndef DITTO_CORE_RNG_H
#define DITTO_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

void ditto_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

float ditto_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
float ditto_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* out[i] = draw(seed, stream, first + i) for i < n. */
void ditto_rng_fill_uniform(uint64_t seed, uint64_t stream, uint64_t first, float *out, size_t n);
void ditto_rng_fill_normal(uint64_t seed, uint64_t stream, uint64_t first, float *out, size_t n);

/* Compose a stream id from up to three small fields (e.g. purpose, window, step). */
static inline uint64_t ditto_rng_stream(uint32_t purpose, uint32_t a, uint32_t b)
{
    return ((uint64_t)purpose << 48) ^ ((uint64_t)a << 24) ^ (uint64_t)b;
}

#endif
