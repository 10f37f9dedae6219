#include "core/rng.h"

#include "core/rng_block.h"

void ditto_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    ditto_philox_block((uint64_t)key[0] | (uint64_t)key[1] << 32, (uint64_t)ctr[2] | (uint64_t)ctr[3] << 32,
                       (uint64_t)ctr[0] | (uint64_t)ctr[1] << 32, out);
}

static float to_uniform(uint32_t w)
{
    return (float)(w >> 8) * (1.0f / 16777216.0f);
}

float ditto_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint32_t o[4];
    ditto_philox_block(seed, stream, index >> 2, o);
    return to_uniform(o[index & 3]);
}

float ditto_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint32_t o[4];
    float z[2];
    ditto_philox_block(seed, stream, index >> 2, o);
    int p = (int)(index & 3) >> 1;
    ditto_box_muller(o[2 * p], o[2 * p + 1], &z[0], &z[1]);
    return z[index & 1];
}

void ditto_rng_fill_uniform(uint64_t seed, uint64_t stream, uint64_t first, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ditto_rng_uniform(seed, stream, first + i);
}

void ditto_rng_fill_normal(uint64_t seed, uint64_t stream, uint64_t first, float *out, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint64_t idx = first + i;
        uint32_t o[4];
        ditto_philox_block(seed, stream, idx >> 2, o);
        float z[4];
        ditto_box_muller(o[0], o[1], &z[0], &z[1]);
        ditto_box_muller(o[2], o[3], &z[2], &z[3]);
        for (unsigned k = (unsigned)(idx & 3); k < 4 && i < n; k++, i++)
            out[i] = z[k];
    }
}
