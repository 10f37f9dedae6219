#include "core/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void ditto_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static void block(uint64_t seed, uint64_t stream, uint64_t blk, uint32_t out[4])
{
    uint32_t ctr[4] = { (uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)stream, (uint32_t)(stream >> 32) };
    uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    ditto_philox4x32(ctr, key, out);
}

static float to_uniform(uint32_t w)
{
    return (float)(w >> 8) * (1.0f / 16777216.0f);
}

static void box_muller(uint32_t a, uint32_t b, float *z0, float *z1)
{
    double u1 = ((double)(a >> 8) + 1.0) * (1.0 / 16777216.0);
    double u2 = (double)(b >> 8) * (1.0 / 16777216.0);
    double r = sqrt(-2.0 * log(u1));
    double t = 6.283185307179586476925 * u2;
    *z0 = (float)(r * cos(t));
    *z1 = (float)(r * sin(t));
}

float ditto_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint32_t o[4];
    block(seed, stream, index >> 2, o);
    return to_uniform(o[index & 3]);
}

float ditto_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint32_t o[4];
    float z[2];
    block(seed, stream, index >> 2, o);
    int p = (int)(index & 3) >> 1;
    box_muller(o[2 * p], o[2 * p + 1], &z[0], &z[1]);
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
        block(seed, stream, idx >> 2, o);
        float z[4];
        box_muller(o[0], o[1], &z[0], &z[1]);
        box_muller(o[2], o[3], &z[2], &z[3]);
        for (unsigned k = (unsigned)(idx & 3); k < 4 && i < n; k++, i++)
            out[i] = z[k];
    }
}
