/*
 * Channels-last f16 convolution on Hopper's warpgroup tensor-core
 * instructions (wgmma) with TMA loads, for the warp network's wide 3-D and
 * depth-split convolutions over 64-pixel rows, where cuDNN's kernels run at
 * 320-460 TFLOP/s (PERF.md, session 25): the hourglass's last convolution
 * (144 -> 144 at 3x3x3 over 16x64x64) and the mask head's depth split
 * (144 -> 154 at 7x7 over 64x64 slices). Narrower tiles lose to cuDNN
 * (96 columns, decoder block 4's depth split: 379 against 516 TFLOP/s),
 * except with the taps as columns (k_wg_conv_tc, below): the hourglass's
 * 128 -> 32 at 3x3x3.
 *
 * An implicit GEMM: rows are output pixels, columns the O outputs (one tile
 * of BN = 144 or 160 columns), the reduction runs over (dz, dy, channel
 * chunk of BK = 48, dx). A block of 256 threads (two warpgroups) computes four
 * output rows of 64 pixels, two per warpgroup (two m64 accumulators each).
 *
 * Loads: per (dz, dy, chunk) one TMA box brings the 4 input rows it needs,
 * 64 + kw - 1 pixels wide (zero filled outside the image: the padding), and
 * the kw taps along x read it through descriptors shifted by dx rows: each
 * input byte comes from L2 once per (dz, dy) instead of once per tap. At kh
 * 3 (WgCfg's KH) one box of 6 rows per (dz, chunk) serves all 9 (dy, dx)
 * taps instead. The weights of each tap, BN x 48, come in by TMA as well.
 * One thread issues the loads (mbarrier completion); the two warpgroups
 * only compute.
 *
 * Shared memory tiles use the 32-byte swizzle in both TMA and wgmma: each
 * 16-channel column of a tile is rows of 32 bytes, the two 16-byte halves
 * of a row swapped on every other group of four rows, which the hardware
 * applies on absolute shared addresses, so a descriptor may start at any
 * row. Only built for sm_90a (the instructions exist nowhere else).
 *
 * k_wg_spade (further down) is the decoder's SPADE with its gamma / beta
 * convolution in one kernel, on the same instructions.
 */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>
#ifdef DITTO_SPADE_PROBE
#include <stdio.h>
#endif

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/conv_wg.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_DEVICE 1
#include "backend/cuda/wgmma_ops.h"
#endif

#define WG_ROWS 4         /* output rows a block */
#define WG_THREADS 256

typedef struct WgArgs {
    int D, H, C, O, kd, kh, pd, ph, pw, ldy;
    const void *bias;
    int bias_f16, relu, acc;
} WgArgs;

/*
 * Tile geometry: BN output columns, BK channels a reduction step (BK / 16
 * wgmma k-steps), input boxes WS pixels wide (64 + kw - 1 rounded up to 8).
 * KH 0: a box holds the block's 4 input rows of one (dz, dy), read by the
 * kw taps (TAPS steps); KH = kh: 4 + kh - 1 rows of one dz, read by all kh x
 * kw taps (shifted by dy rows too), a third of the input's L2 traffic at kh 3.
 */
template <int BN, int BK, int KW, int KH> struct WgCfg {
    static constexpr int WS = (64 + KW - 1 + 7) / 8 * 8, BOXR = KH ? WG_ROWS + KH - 1 : WG_ROWS, AROWS = BOXR * WS, KC = BK / 16;
    static constexpr int TAPS = KH ? KH * KW : KW;
    static constexpr int A_BYTES = AROWS * BK * 2, B_BYTES = BN * BK * 2;
    static constexpr int A_SLOT = (A_BYTES + 1023) / 1024 * 1024, B_SLOT = (B_BYTES + 1023) / 1024 * 1024;
    /* slots: input boxes SA, weights SB, loads P steps ahead (P <= SB - 1 and <= (SA - 1) * TAPS, see wg_loop) */
    static constexpr int SA = KW >= 7 || KH ? 2 : 3, SB = KW >= 7 ? 6 : 5, P = KW >= 7 ? 5 : 4;
    static constexpr size_t SMEM = 1024 + (size_t)SA * A_SLOT + (size_t)SB * B_SLOT + 8 * (SA + SB);
    static_assert(P <= SB - 1 && P <= (SA - 1) * TAPS, "load distance");
    static_assert(SMEM <= 227 * 1024, "shared memory");
};

#ifdef WG_DEVICE
static __device__ __forceinline__ uint32_t wg_smem(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* a K-major operand with the 32-byte swizzle: rows of 32 bytes, 8-row groups 256 bytes apart */
static __device__ __forceinline__ uint64_t wg_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(256 >> 4) << 32) | (3ull << 62);
}

template <int R> static __device__ __forceinline__ void wg_fence(float (&d)[R])
{
#pragma unroll
    for (int i = 0; i < R; ++i)
        asm volatile("" : "+f"(d[i])::"memory");
}

static __device__ __forceinline__ void mb_init(uint32_t b)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b));
}

static __device__ __forceinline__ void mb_expect(uint32_t b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void mb_wait(uint32_t b, uint32_t parity)
{
    asm volatile("{\n.reg .pred p;\nW%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W%=;\n}\n" ::"r"(b), "r"(parity)
                 : "memory");
}

static __device__ __forceinline__ void tma_5d(uint32_t dst, const CUtensorMap *m, int c0, int c1, int c2, int c3, int c4, uint32_t mb)
{
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
                 "l"(m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(mb)
                 : "memory");
}

static __device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap *m, int c0, int c1, uint32_t mb)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst), "l"(m),
                 "r"(c0), "r"(c1), "r"(mb)
                 : "memory");
}

/* n bytes (a multiple of 16) from global src to shared dst, contiguous */
static __device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t n, uint32_t mb)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst), "l"(src), "r"(n), "r"(mb)
                 : "memory");
}
#endif

/*
 * k_wg_spade's tile column n (< 128) -> its channel's offset from the tile's
 * first channel. The m64nN accumulator gives lane l columns 8j + 2(l%4) (+1)
 * for every j; ordering the columns so that lane l's j = 4b .. 4b + 3 are
 * channels 32b + 8(l%4) .. + 7 gives each lane 8 consecutive channels a
 * block b: its x loads and y stores are 16 bytes, a warp's 64 contiguous
 * bytes a pixel. Gamma only: 128 channels (b < 4); else gamma of 64 (n <
 * 64, b < 2), then their beta in the same order.
 */
static __host__ __device__ __forceinline__ int sp_col_channel(int n, bool go)
{
    const int j = go ? n >> 3 : (n >> 3) & 7;
    return 32 * (j >> 2) + 8 * ((n >> 1) & 3) + 2 * (j & 3) + (n & 1);
}

/*
 * k_wg_spade's weights, step by step: wt[tile][step][kc][row][32 bytes] with
 * step = cc * 9 + dy * 3 + dx (chunks of 64 channels), row the tile column
 * (channel c0 + sp_col_channel's: gamma's weight row, or beta's at C + that
 * in columns 64-127 without go), and the two 16-byte halves of a row swapped
 * on every other group of four rows: the 32-byte swizzle TMA would apply,
 * so one contiguous bulk copy of 16 KB fills a weight slot (a box of 16
 * channels reads 32 bytes from each of 64 weight rows). w KRSC (KC, 3, 3,
 * Ca); one thread per 16 bytes.
 */
static __global__ void k_sp_wprep(const __half *w, __half *wt, int Ca, int C, int tiles, int go, int64_t n)
{
    const int steps = Ca / 64 * 9;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        /* i = ((tile * steps + step) * 4 + kc) * 256 + row * 2 + physical half */
        const int ph = (int)(i & 1), row = (int)((i >> 1) & 127), kc = (int)((i >> 8) & 3);
        const int64_t ts = i >> 10;
        const int step = (int)(ts % steps), tile = (int)(ts / steps);
        const int half = ph ^ ((row >> 2) & 1), cc = step / 9, tap = step % 9;
        const int c0 = go ? tile * 128 : tile * 64;
        const int64_t o = (!go && row >= 64 ? C : 0) + c0 + sp_col_channel(row, go);
        const __half *src = w + (o * 9 + tap) * Ca + cc * 64 + kc * 16 + half * 8;
        *(uint4 *)(wt + i * 8) = *(const uint4 *)src;
    }
}

#ifdef WG_DEVICE
template <int BN> struct WgMma;
template <> struct WgMma<96> {
    static __device__ __forceinline__ void run(float (&d)[48], uint64_t a, uint64_t b, int sd = 1) { wgmma_n96(d, a, b, sd); }
};
template <> struct WgMma<128> {
    static __device__ __forceinline__ void run(float (&d)[64], uint64_t a, uint64_t b, int sd = 1) { wgmma_n128(d, a, b, sd); }
};
template <> struct WgMma<144> {
    static __device__ __forceinline__ void run(float (&d)[72], uint64_t a, uint64_t b, int sd = 1) { wgmma_n144(d, a, b, sd); }
};
template <> struct WgMma<160> {
    static __device__ __forceinline__ void run(float (&d)[80], uint64_t a, uint64_t b, int sd = 1) { wgmma_n160(d, a, b, sd); }
};

/*
 * One reduction step of a warpgroup's two m64 row blocks, issued and
 * committed: for each 16-channel chunk j < KC, the 64 input rows from row
 * a0 (and a1) of slot sa (32-byte rows, chunks AROWS rows apart) against
 * the weights of slot sb (chunks BN rows apart). fresh: the step starts new
 * sums (scale-d 0 on its first chunk).
 */
template <int BN, int KC, int AROWS>
static __device__ __forceinline__ void wg_step(float (&acc0)[BN / 2], float (&acc1)[BN / 2], uint32_t sa, int a0, int a1, uint32_t sb, bool fresh)
{
    wg_fence(acc0);
    wg_fence(acc1);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int j = 0; j < KC; ++j) {
        const uint64_t db = wg_desc(sb + j * BN * 32);
        const int sd = !fresh || j != 0;
        WgMma<BN>::run(acc0, wg_desc(sa + (j * AROWS + a0) * 32), db, sd);
        WgMma<BN>::run(acc1, wg_desc(sa + (j * AROWS + a1) * 32), db, sd);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* n full barriers from bar on (one arrival each), seen by the whole block */
static __device__ __forceinline__ void wg_bars_init(uint32_t bar, int n)
{
    if (threadIdx.x == 0) {
        for (int i = 0; i < n; ++i)
            mb_init(bar + 8 * i);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
}

/* k_wg_conv's and k_wg_conv_tc's block: its first output row, depth slice and item */
static __device__ __forceinline__ void wg_block(const WgArgs &a, int *y0, int *z, int *n)
{
    int bx = blockIdx.x;
    const int hq = a.H / WG_ROWS;
    *y0 = (bx % hq) * WG_ROWS;
    bx /= hq;
    *z = bx % a.D, *n = bx / a.D;
}

/*
 * k_wg_conv's and k_wg_conv_tc's main loop, sums from zero: step s reads
 * input box s / TAPS (slot r % SA, waited on at its first step) and weight
 * slot s % SB; row0(tap) gives the warpgroup's first input row in the box
 * for tap s % TAPS. Thread 0 issues the first P steps' loads, then refills
 * the slots of step s - 1 with step s + P - 1's once both warpgroups are
 * past it (P <= SB - 1). SD0: the first step ignores the accumulators
 * (scale-d 0) instead of their being zeroed first, which ptxas serializes
 * the wgmma for (C7515) in some instantiations.
 */
template <int BN, int KC, int AROWS, int TAPS, int SA, int SB, int P, int A_SLOT, int B_SLOT, bool SD0, class Produce, class Row0>
static __device__ __forceinline__ void wg_loop(float (&acc0)[BN / 2], float (&acc1)[BN / 2], int steps, uint32_t bar, uint32_t sa0, uint32_t sb0,
                                               int ws, Produce produce, Row0 row0)
{
    const int t = threadIdx.x;
    if (t == 0)
        for (int s = 0; s < P && s < steps; ++s)
            produce(s);
    if (!SD0)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i)
            acc0[i] = 0.0f, acc1[i] = 0.0f;
    for (int s = 0; s < steps; ++s) {
        const int tap = s % TAPS, r = s / TAPS;
        if (tap == 0)
            mb_wait(bar + 8 * (r % SA), (r / SA) & 1);
        mb_wait(bar + 8 * (SA + s % SB), (s / SB) & 1);
        const uint32_t sa = sa0 + (r % SA) * A_SLOT, sb = sb0 + (s % SB) * B_SLOT;
        const int a0 = row0(tap);
        wg_step<BN, KC, AROWS>(acc0, acc1, sa, a0, a0 + ws, sb, SD0 && s == 0);
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");   /* step s - 1 is done in this warpgroup */
        wg_fence(acc0);
        wg_fence(acc1);
        __syncthreads();
        if (t == 0 && s + P < steps)
            produce(s + P);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    wg_fence(acc0);
    wg_fence(acc1);
}

/* y's columns col (and col + 1 when pair) from v0, v1 (bias added): + y (a.acc), relu (a.relu), one rounding */
static __device__ __forceinline__ void wg_out(__half *yp, bool pair, float v0, float v1, const WgArgs &a)
{
    if (pair) {
        if (a.acc) {
            const float2 o = __half22float2(*(const __half2 *)yp);
            v0 += o.x, v1 += o.y;
        }
        if (a.relu)
            v0 = fmaxf(v0, 0.0f), v1 = fmaxf(v1, 0.0f);
        *(__half2 *)yp = __floats2half2_rn(v0, v1);
    } else {
        if (a.acc)
            v0 += __half2float(*yp);
        *yp = __float2half_rn(a.relu ? fmaxf(v0, 0.0f) : v0);
    }
}
#endif

/*
 * x (N, D, H, 64, C) through tmx (5-D, boxes of 16 channels x WS pixels x 4
 * rows), w (O, kd, kh, kw, C) through tmw (2-D (O, K), boxes of 16 x BN),
 * y (N, D, H, 64, ldy): columns [0, O). Grid: N * D * H / 4 blocks.
 */
template <int BN, int BK, int KW, int KH>
static __global__ void __launch_bounds__(WG_THREADS, 1) k_wg_conv(const __grid_constant__ CUtensorMap tmx, const __grid_constant__ CUtensorMap tmw,
                                                                  __half *__restrict__ y, WgArgs a)
{
#ifdef WG_DEVICE
    typedef WgCfg<BN, BK, KW, KH> G;
    constexpr int WS = G::WS, AROWS = G::AROWS, KC = G::KC, TAPS = G::TAPS, SA = G::SA, SB = G::SB, P = G::P;
    extern __shared__ __align__(1024) uint8_t wg_raw[];
    const int t = threadIdx.x;
    const uint32_t base = (wg_smem(wg_raw) + 1023) & ~1023u;   /* the swizzle repeats every 256 bytes; TMA wants 128 */
    const uint32_t sa0 = base, sb0 = base + SA * G::A_SLOT, bar = sb0 + SB * G::B_SLOT;   /* barriers: inputs SA, weights SB */
    int y0, z, n;
    wg_block(a, &y0, &z, &n);
    const int khb = KH ? 1 : a.kh, cc_n = a.C / BK, steps = a.kd * khb * cc_n * TAPS;

    wg_bars_init(bar, SA + SB);
    /*
     * step s = ((dz * khb + dyb) * chunks + cc) * TAPS + tap (chunks of BK
     * channels), tap = dx, or dy * KW + dx with KH (dyb 0); the box of
     * (dz, dyb, cc) arrives with its tap 0
     */
    auto produce = [&](int s) {
        const int tap = s % TAPS, r = s / TAPS, cc = r % cc_n, tz = r / cc_n, dyb = tz % khb, dz = tz / khb;
        const int dy = KH ? tap / KW : dyb, dx = KH ? tap % KW : tap;
        if (tap == 0) {
            const uint32_t slot = r % SA, mb = bar + 8 * slot;
            mb_expect(mb, G::A_BYTES);
#pragma unroll
            for (int kc = 0; kc < KC; ++kc)
                tma_5d(sa0 + slot * G::A_SLOT + kc * AROWS * 32, &tmx, cc * BK + kc * 16, -a.pw, y0 - a.ph + dyb, z - a.pd + dz, n, mb);
        }
        const uint32_t slot = s % SB, mb = bar + 8 * (SA + slot);
        mb_expect(mb, G::B_BYTES);
        const int k0 = ((dz * a.kh + dy) * KW + dx) * a.C + cc * BK;
#pragma unroll
        for (int kc = 0; kc < KC; ++kc)
            tma_2d(sb0 + slot * G::B_SLOT + kc * BN * 32, &tmw, k0 + kc * 16, 0, mb);
    };

    float acc0[BN / 2], acc1[BN / 2];
    const int wg = t >> 7;
    /* tap (dy,) dx: the warpgroup's rows 2 wg, 2 wg + 1 of the box (+ dy with KH), shifted by dx pixels */
    wg_loop<BN, KC, AROWS, TAPS, SA, SB, P, G::A_SLOT, G::B_SLOT, KH != 0>(acc0, acc1, steps, bar, sa0, sb0, WS, produce, [&](int tap) {
        return KH ? (2 * wg + tap / KW) * WS + tap % KW : 2 * wg * WS + tap;
    });

    /* the m64nN fragment: thread (warp w, lane l) holds rows 16w + l/4 (+8), columns 8j + 2(l%4) (+1) */
    const int warp = (t & 127) >> 5, lane = t & 31;
    auto store = [&](float (&acc)[BN / 2], int row) {
        const int64_t prow = (((int64_t)n * a.D + z) * a.H + y0 + row) * 64;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = j * 8 + 2 * (lane & 3);
            if (col >= a.O)
                continue;
            float b0 = 0.0f, b1 = 0.0f;
            if (a.bias) {
                b0 = ditto_ld(a.bias, col, a.bias_f16);
                b1 = col + 1 < a.O ? ditto_ld(a.bias, col + 1, a.bias_f16) : 0.0f;
            }
#pragma unroll
            for (int h = 0; h < 2; ++h)
                wg_out(y + (prow + warp * 16 + (lane >> 2) + 8 * h) * a.ldy + col, col + 1 < a.O, acc[4 * j + 2 * h] + b0,
                       acc[4 * j + 2 * h + 1] + b1, a);
        }
    };
    store(acc0, 2 * wg);
    store(acc1, 2 * wg + 1);
#endif
}

/*
 * Narrow 3x3(x3) convolutions (up to 32 outputs, rows of 64) with the kw
 * taps as columns: the hourglass's 128 -> 32, where cuDNN's depth split
 * runs at about 210 TFLOP/s. A block computes 4 output rows into 96
 * columns, three blocks of 32 (OB), Q[p, dx OB + o] = sum over (dz, dy, c)
 * of x[p, ..] w[o, dz, dy, dx, c], so each step (dz, channel chunk, dy) is
 * one wide GEMM step; the epilogue adds y[p, o] = Q[p - 1, o] + Q[p, OB + o]
 * + Q[p + 1, 2 OB + o] through shared memory (Q is 0 past the row: the
 * padding). One box of 6 input rows (64 pixels, no halo) per (dz, chunk)
 * serves the 3 dy steps (descriptors shifted by dy rows); the last chunk
 * may run past C (TMA zero fill, the next tap's weights times zeros).
 */
struct WgTcCfg {
    static constexpr int BN = 96, OB = 32, BK = 64, KC = BK / 16, WS = 64, BOXR = WG_ROWS + 2, AROWS = BOXR * WS, TAPS = 3;
    static constexpr int A_BYTES = AROWS * BK * 2, B_BYTES = BN * BK * 2;
    static constexpr int A_SLOT = (A_BYTES + 1023) / 1024 * 1024, B_SLOT = (B_BYTES + 1023) / 1024 * 1024;
    static constexpr int SA = 2, SB = 4, P = 3;   /* loads P steps ahead: P <= SB - 1 and <= (SA - 1) * TAPS */
    static constexpr int QS = BN + 8;             /* Q's float row stride in shared memory (over the pipeline's slots) */
    static constexpr size_t PIPE = (size_t)SA * A_SLOT + (size_t)SB * B_SLOT, QB = (size_t)WG_ROWS * 64 * QS * 4;
    static constexpr size_t SMEM = 1024 + (PIPE > QB ? PIPE : QB) + 8 * (SA + SB);
    static_assert(P <= SB - 1 && P <= (SA - 1) * TAPS, "load distance");
};

/* x (N, D, H, 64, C) through tmx (boxes of 16 channels x 64 pixels x 6 rows), w (O, kd, 3, 3, C) through tmw (boxes of 16 x 32), y as k_wg_conv's */
static __global__ void __launch_bounds__(WG_THREADS, 1) k_wg_conv_tc(const __grid_constant__ CUtensorMap tmx, const __grid_constant__ CUtensorMap tmw,
                                                                     __half *__restrict__ y, WgArgs a)
{
#ifdef WG_DEVICE
    typedef WgTcCfg G;
    constexpr int BN = G::BN, OB = G::OB, BK = G::BK, WS = G::WS, AROWS = G::AROWS, KC = G::KC, TAPS = G::TAPS, SA = G::SA, SB = G::SB, P = G::P;
    extern __shared__ __align__(1024) uint8_t wg_raw[];
    const int t = threadIdx.x;
    const uint32_t base = (wg_smem(wg_raw) + 1023) & ~1023u;
    const uint32_t sa0 = base, sb0 = base + SA * G::A_SLOT, bar = base + (uint32_t)(G::PIPE > G::QB ? G::PIPE : G::QB);
    int y0, z, n;
    wg_block(a, &y0, &z, &n);
    const int cc_n = (a.C + BK - 1) / BK, steps = a.kd * cc_n * TAPS;

    wg_bars_init(bar, SA + SB);
    /* step s = (dz * chunks + cc) * 3 + dy; the box of (dz, cc) arrives with its dy = 0 */
    auto produce = [&](int s) {
        const int dy = s % TAPS, r = s / TAPS, cc = r % cc_n, dz = r / cc_n;
        if (dy == 0) {
            const uint32_t slot = r % SA, mb = bar + 8 * slot;
            mb_expect(mb, G::A_BYTES);
#pragma unroll
            for (int kc = 0; kc < KC; ++kc)
                tma_5d(sa0 + slot * G::A_SLOT + kc * AROWS * 32, &tmx, cc * BK + kc * 16, 0, y0 - a.ph, z - a.pd + dz, n, mb);
        }
        const uint32_t slot = s % SB, mb = bar + 8 * (SA + slot);
        mb_expect(mb, G::B_BYTES);
#pragma unroll
        for (int dx = 0; dx < 3; ++dx) {   /* tap dx's weights in column block dx; past C: the next tap's weights times zeros */
            const int k0 = ((dz * 3 + dy) * 3 + dx) * a.C + cc * BK;
#pragma unroll
            for (int kc = 0; kc < KC; ++kc)
                tma_2d(sb0 + slot * G::B_SLOT + (kc * BN + dx * OB) * 32, &tmw, k0 + kc * 16, 0, mb);
        }
    };

    float acc0[BN / 2], acc1[BN / 2];
    const int wg = t >> 7;
    /* tap dy: the warpgroup's rows 2 wg, 2 wg + 1 of the box, shifted by dy rows */
    wg_loop<BN, KC, AROWS, TAPS, SA, SB, P, G::A_SLOT, G::B_SLOT, false>(acc0, acc1, steps, bar, sa0, sb0, WS, produce,
                                                                          [&](int dy) { return (2 * wg + dy) * WS; });

    /* Q to shared memory over the pipeline's slots (every wgmma and load is done), then the shifted sums */
    __syncthreads();
    float *q = (float *)(wg_raw + (base - wg_smem(wg_raw)));
    const int warp = (t & 127) >> 5, lane = t & 31;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int px = 2 * wg * 64 + warp * 16 + (lane >> 2) + 8 * h, col = j * 8 + 2 * (lane & 3);
            *(float2 *)(q + px * G::QS + col) = make_float2(acc0[4 * j + 2 * h], acc0[4 * j + 2 * h + 1]);
            *(float2 *)(q + (px + 64) * G::QS + col) = make_float2(acc1[4 * j + 2 * h], acc1[4 * j + 2 * h + 1]);
        }
    __syncthreads();
    const int op = (a.O + 1) / 2;   /* column pairs */
    for (int i = t; i < WG_ROWS * 64 * op; i += WG_THREADS) {
        const int px = i / op, col = 2 * (i % op), xq = px % 64;
        const float *qc = q + px * G::QS + col;
        float2 v = *(const float2 *)(qc + OB);
        if (xq > 0) {
            const float2 l = *(const float2 *)(qc - G::QS);
            v.x += l.x, v.y += l.y;
        }
        if (xq < 63) {
            const float2 rr = *(const float2 *)(qc + G::QS + 2 * OB);
            v.x += rr.x, v.y += rr.y;
        }
        if (a.bias) {
            v.x += ditto_ld(a.bias, col, a.bias_f16);
            v.y += col + 1 < a.O ? ditto_ld(a.bias, col + 1, a.bias_f16) : 0.0f;
        }
        wg_out(y + ((((int64_t)n * a.D + z) * a.H + y0 + px / 64) * 64 + xq) * a.ldy + col, col + 1 < a.O, v.x, v.y, a);
    }
#endif
}

/*
 * SPADE with its gamma / beta convolution (DittoWgSpade): the 3x3
 * convolution of a as an implicit GEMM like k_wg_conv's, over tiles of 4
 * rows of 64 pixels by 128 columns: 64 channels' gamma (columns 0-63,
 * weight rows c0..) and beta (64-127, rows C + c0..), or 128 channels'
 * gamma alone. The epilogue modulates x with them, so gamma and beta never
 * reach memory (the two-op form writes and reads them in f16: 4 C bytes a
 * position each way).
 *
 * With K = 9 Ca short (1152 in the decoder), a block's fixed costs matter:
 *  - one box of 6 input rows per 64-channel chunk serves all 9 taps
 *    (descriptors shifted by dy rows and dx pixels), half the input loads
 *    of a box per dy; the weights of a step come in one contiguous bulk
 *    copy (k_sp_wprep);
 *  - the grid is persistent (a block an SM, tiles blockIdx.x + k gridDim.x,
 *    the column tile fastest so the blocks that share an input box run
 *    together) and the load pipeline runs across tiles, so the next tile's
 *    first loads are in flight during this tile's epilogue;
 *  - warp-specialised: a loader warpgroup (one thread issues the copies,
 *    its registers given to the others by setmaxnreg) refills a slot when
 *    every consumer thread has released it (an empty barrier a slot), so
 *    the two consumer warpgroups never wait for each other in the main
 *    loop;
 *  - the epilogue's per-channel values (mean, rstd, biases) go to shared
 *    memory at a tile's start, its x loads and y stores are 16 bytes
 *    (sp_col_channel), and its first x loads go out with the tile's last
 *    step, behind its wgmma (G_middle 151.6 against 155.7 us, PERF.md
 *    session 30);
 *  - a tile's first wgmma has scale-d 0 instead of zeroed accumulators.
 * The epilogue does not overlap the next tile's math (PERF.md, sessions
 * 27-28: what was tried).
 */
#define SP_BN 128
#define SP_BK 64
#define SP_BOXR (WG_ROWS + 2)
struct SpCfg {
    static constexpr int WS = 72, AROWS = SP_BOXR * WS, KC = SP_BK / 16, TAPS = 9;
    static constexpr int A_BYTES = AROWS * SP_BK * 2, B_BYTES = SP_BN * SP_BK * 2;
    static constexpr int A_SLOT = (A_BYTES + 1023) / 1024 * 1024, B_SLOT = (B_BYTES + 1023) / 1024 * 1024;
    static constexpr int SA = 2, SB = 6;
    static constexpr size_t SMEM = 1024 + (size_t)SA * A_SLOT + (size_t)SB * B_SLOT + 16 * (SA + SB) + 2 * 128 * 16;   /* + the epilogue's per-channel values */
    static_assert(SMEM <= 227 * 1024, "shared memory");
};

#ifdef DITTO_SPADE_PROBE
/*
 * A measurement probe (build with -DDITTO_SPADE_PROBE): clock64 cycles of
 * k_wg_spade's consumer threads 0, 64 and 128 in data waits, wgmma waits
 * and the epilogue, over the G_middle calls (8 x 64 x 64 x 512), printed to
 * stderr at exit.
 */
__device__ unsigned long long g_sp_prof[16];
#define SP_CLOCK(v) v = clock64()
#define SP_ADD(v) v += clock64() - ta
#else
#define SP_CLOCK(v) (void)0
#define SP_ADD(v) (void)0
#endif
typedef struct SpArgs {
    int prof;
    int H, W, Ca, C, Hx, Wx, fh, fw, tiles, total;
    const void *bias;
    int bias_f16, act;
    float slope;
    const __half *x;
    const float *stat;
    int NC;
    int prefetch;       /* the epilogue's first x loads issued with the tile's last step (1; DITTO_CUDA_SPPF=0, A/B) */
} SpArgs;

/*
 * The epilogue's per-channel values (float4: mean, rstd, biases) of tile
 * channel c at chv slot sp_chv(c): within a block of 32 channels, channel
 * 8q + m at 4m + q. A warp's load of channel 32b + 8(l%4) + m then reads 4
 * consecutive slots (64 bytes, one shared-memory wavefront) instead of 4
 * slots 128 bytes apart in the same banks (16 wavefronts: ncu found 76% of
 * the kernel's shared-load wavefronts were such conflicts).
 */
static __device__ __forceinline__ int sp_chv(int c)
{
    return (c & ~31) | ((c & 7) << 2) | ((c >> 3) & 3);
}

#define SP_THREADS (WG_THREADS + 128)   /* two consumer warpgroups and a loader warpgroup (registers moved by setmaxnreg) */

static __device__ __forceinline__ void mb_init_n(uint32_t b, int n)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b), "r"(n));
}

static __device__ __forceinline__ void nbar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

static __device__ __forceinline__ void mb_arrive(uint32_t b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(b) : "memory");
}

template <bool GO>
static __global__ void __launch_bounds__(SP_THREADS, 1) k_wg_spade(const __grid_constant__ CUtensorMap tma, const __half *__restrict__ wt,
                                                                   __half *__restrict__ y, SpArgs a)
{
#ifdef WG_DEVICE
    typedef SpCfg G;
    constexpr int BN = SP_BN, BK = SP_BK, WS = G::WS, AROWS = G::AROWS, KC = G::KC, TAPS = G::TAPS, SA = G::SA, SB = G::SB;
    extern __shared__ __align__(1024) uint8_t wg_raw[];
    const int t = threadIdx.x;
    const uint32_t base = (wg_smem(wg_raw) + 1023) & ~1023u;
    /* barriers: full A (SA), full B (SB), then empty A (SA), empty B (SB) */
    const uint32_t sa0 = base, sb0 = base + SA * G::A_SLOT, bar = sb0 + SB * G::B_SLOT, ebar = bar + 8 * (SA + SB);
    /* per tile (two buffers), per channel of its tile: mean, rstd, gamma's bias, beta's bias */
    float4 *chv = (float4 *)(wg_raw + (ebar + 8 * (SA + SB) - wg_smem(wg_raw)));
    const int segs = a.W / 64, hq = a.H / WG_ROWS, cc_n = a.Ca / BK, steps = cc_n * TAPS;
    const int mine = (a.total - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;   /* this block's tiles */

    /* tile k of this block: item, first row and pixel, first channel, column tile */
    struct Tile {
        int n, y0, x0, c0, col;
    };
    auto tile_of = [&](int k) {
        int bx = (int)blockIdx.x + k * (int)gridDim.x;
        Tile q;
        q.col = bx % a.tiles;
        bx /= a.tiles;
        q.x0 = (bx % segs) * 64;
        bx /= segs;
        q.y0 = (bx % hq) * WG_ROWS;
        q.n = bx / hq;
        q.c0 = GO ? q.col * 128 : q.col * 64;
        return q;
    };

    if (t == 0) {
        for (int i = 0; i < SA + SB; ++i) {
            mb_init(bar + 8 * i);
            mb_init_n(ebar + 8 * i, WG_THREADS);   /* every consumer thread releases a slot */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();   /* the last block-wide barrier */
    const int gend = mine * steps;

    if (t >= WG_THREADS) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        /*
         * The loader (the warpgroup's first thread): step g = k * steps + cc *
         * 9 + dy * 3 + dx of tile k; box g / 9 with its tap 0. A slot is
         * refilled once every consumer thread released its previous use (its
         * first use waits on the phase before the first, complete at init).
         */
        if (t != WG_THREADS)
            return;
        for (int g = 0; g < gend; ++g) {
            const int k = g / steps, s = g % steps, tap = s % TAPS, cc = s / TAPS, r = g / TAPS;
            const Tile q = tile_of(k);
            if (tap == 0) {
                const uint32_t slot = r % SA, mb = bar + 8 * slot;
                mb_wait(ebar + 8 * slot, ((r / SA) & 1) ^ 1);
                mb_expect(mb, G::A_BYTES);
#pragma unroll
                for (int kc = 0; kc < KC; ++kc)
                    tma_5d(sa0 + slot * G::A_SLOT + kc * AROWS * 32, &tma, cc * BK + kc * 16, q.x0 - 1, q.y0 - 1, 0, q.n, mb);
            }
            const uint32_t slot = g % SB, mb = bar + 8 * (SA + slot);
            mb_wait(ebar + 8 * (SA + slot), ((g / SB) & 1) ^ 1);
            mb_expect(mb, G::B_BYTES);
            bulk_copy(sb0 + slot * G::B_SLOT, wt + ((int64_t)q.col * steps + s) * (G::B_BYTES / 2), G::B_BYTES, mb);
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int wg = t >> 7, warp = (t & 127) >> 5, lane = t & 31;
    long long c_start = 0, c_wait = 0, c_grp = 0, c_epi = 0, ta = 0;
    SP_CLOCK(c_start);
    /* release the slots of step g (its box with its last tap) */
    auto release = [&](int g) {
        mb_arrive(ebar + 8 * (SA + g % SB));
        if (g % TAPS == TAPS - 1)
            mb_arrive(ebar + 8 * ((g / TAPS) % SA));
    };
    /* each tile's first wgmma ignores the accumulators (scale-d 0): zeroing them
       per tile with ordinary stores would make ptxas serialize every wgmma (C7515) */
    float acc0[BN / 2] = {}, acc1[BN / 2] = {};
    /*
     * The epilogue's view: thread (warp w, lane l) holds pixels 16w + l/4
     * (+8) of its two rows and, a block b, channels c0 + 32b + 8(l%4) .. + 7
     * (sp_col_channel); i = 2 m + h: row 2 wg + m, pixel 16 warp + l/4 + 8 h.
     * xv: x of blocks b0, b0 + 1 at the 4 pixels; with a.prefetch the first
     * two blocks' loads go out with the tile's last step, behind its wgmma.
     */
    constexpr int NB = GO ? 4 : 2;
    const int qd = lane & 3;
    const __half *xp[4];
    __half *yp[4];
    uint4 xv[2][4];
    auto epi_ptrs = [&](const Tile &q) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int py = q.y0 + 2 * wg + i / 2, px = q.x0 + warp * 16 + (lane >> 2) + 8 * (i % 2);
            xp[i] = a.x + (((int64_t)q.n * a.Hx + py / a.fh) * a.Wx + px / a.fw) * a.C + q.c0 + 8 * qd;
            yp[i] = y + (((int64_t)q.n * a.H + py) * a.W + px) * a.C + q.c0 + 8 * qd;
        }
    };
    auto epi_load = [&](int b0) {
#pragma unroll
        for (int bb = 0; bb < 2; ++bb)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                xv[bb][i] = *(const uint4 *)(xp[i] + 32 * (b0 + bb));
    };
    for (int k = 0; k < mine; ++k) {
        const Tile q = tile_of(k);
        if (t < (GO ? 128 : 64)) {   /* read during the main loop, used by the epilogue (after the consumers' barrier) */
            const int c = q.c0 + t;
            float4 v;
            v.x = a.stat[q.n * a.C + c];
            v.y = a.stat[a.NC + q.n * a.C + c];
            v.z = a.bias ? ditto_ld(a.bias, c, a.bias_f16) : 0.0f;
            v.w = a.bias && !GO ? ditto_ld(a.bias, a.C + c, a.bias_f16) : 0.0f;
            chv[(k & 1) * 128 + sp_chv(t)] = v;
        }
        for (int s = 0; s < steps; ++s) {
            const int g = k * steps + s, tap = s % TAPS, r = g / TAPS;
            const int sh = (tap / 3) * WS + tap % 3;   /* the tap's first row in the box */
            SP_CLOCK(ta);
            if (tap == 0)
                mb_wait(bar + 8 * (r % SA), (r / SA) & 1);
            mb_wait(bar + 8 * (SA + g % SB), (g / SB) & 1);
            SP_ADD(c_wait);
            const uint32_t sa = sa0 + (r % SA) * G::A_SLOT, sb = sb0 + (g % SB) * G::B_SLOT;
            wg_step<BN, KC, AROWS>(acc0, acc1, sa, (2 * wg) * WS + sh, (2 * wg + 1) * WS + sh, sb, s == 0);
            if (a.prefetch && s == steps - 1) {
                epi_ptrs(q);
                epi_load(0);
            }
            SP_CLOCK(ta);
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            wg_fence(acc0);
            wg_fence(acc1);
            SP_ADD(c_grp);
            if (s > 0)
                release(g - 1);   /* this thread's reads of step g - 1 are done */
        }
        SP_CLOCK(ta);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        wg_fence(acc0);
        wg_fence(acc1);
        release(k * steps + steps - 1);
        nbar_sync(1, WG_THREADS);   /* the consumers: chv of this tile written */

        /*
         * Gamma in j = 4b .. 4b + 3, beta in j + 8 (b < 2), or gamma alone
         * (b < 4). spade_norm's expression (norm.cu), gamma and beta
         * unrounded; statistics and biases from chv; x read and y written 16
         * bytes at a time, two blocks' loads for the 4 pixels issued together.
         */
        if (!a.prefetch)
            epi_ptrs(q);
#pragma unroll
        for (int b0 = 0; b0 < NB; b0 += 2) {
            if (b0 || !a.prefetch)
                epi_load(b0);
#pragma unroll
            for (int bb = 0; bb < 2; ++bb) {
                const int b = b0 + bb;
                const float4 *cv = chv + (k & 1) * 128 + 32 * b + qd;   /* channel 32b + 8qd + m at 32b + 4m + qd (sp_chv) */
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int h = i % 2;
                    const float *ac = i / 2 ? acc1 : acc0;
                    const __half2 *xh = (const __half2 *)&xv[bb][i];
                    uint4 out;
                    __half2 *oh = (__half2 *)&out;
#pragma unroll
                    for (int t2 = 0; t2 < 4; ++t2) {
                        const int j = 4 * b + t2;
                        const float4 v0c = cv[8 * t2], v1c = cv[8 * t2 + 4];
                        const float2 fx = __half22float2(xh[t2]);
                        const float g0 = ac[4 * j + 2 * h] + v0c.z, g1 = ac[4 * j + 2 * h + 1] + v1c.z;
                        const float b0v = (GO ? 0.0f : ac[(4 * (j + 8) + 2 * h) % 64]) + v0c.w;
                        const float b1v = (GO ? 0.0f : ac[(4 * (j + 8) + 2 * h + 1) % 64]) + v1c.w;
                        float v0 = fmaf((fx.x - v0c.x) * v0c.y, 1.0f + g0, b0v), v1 = fmaf((fx.y - v1c.x) * v1c.y, 1.0f + g1, b1v);
                        if (a.act) {
                            v0 = v0 < 0.0f ? v0 * a.slope : v0;
                            v1 = v1 < 0.0f ? v1 * a.slope : v1;
                        }
                        oh[t2] = __floats2half2_rn(v0, v1);
                    }
                    *(uint4 *)(yp[i] + 32 * b) = out;
                }
            }
        }
        SP_ADD(c_epi);
    }
#ifdef DITTO_SPADE_PROBE
    if (a.prof && (t == 0 || t == 128 || t == 64)) {
        const int o = t == 0 ? 0 : t == 64 ? 4 : 8;
        atomicAdd(&g_sp_prof[o + 0], (unsigned long long)c_wait);
        atomicAdd(&g_sp_prof[o + 1], (unsigned long long)c_grp);
        atomicAdd(&g_sp_prof[o + 2], (unsigned long long)c_epi);
        atomicAdd(&g_sp_prof[o + 3], (unsigned long long)(clock64() - c_start));
    }
#else
    (void)c_start, (void)c_wait, (void)c_grp, (void)c_epi, (void)ta;
#endif
#endif
}

#ifdef DITTO_SPADE_PROBE
static void sp_prof_print(void)
{
    unsigned long long h[16];
    if (cudaMemcpyFromSymbol(h, g_sp_prof, sizeof h) != cudaSuccess)
        return;
    static const char *const who[3] = { "t0", "t64", "t128" };
    for (int w = 0; w < 3; w++) {
        const double tot = (double)h[4 * w + 3];
        fprintf(stderr, "k_wg_spade %s: data waits %.1f%%, wgmma waits %.1f%%, epilogue %.1f%%, the rest %.1f%% of %.3g cycles\n", who[w],
                100 * h[4 * w] / tot, 100 * h[4 * w + 1] / tot, 100 * h[4 * w + 2] / tot, 100 * (tot - h[4 * w] - h[4 * w + 1] - h[4 * w + 2]) / tot,
                tot);
    }
}
#endif

/* ---- host side ---- */

typedef CUresult (*EncodeTiledFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                                  const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* the driver's cuTensorMapEncodeTiled through the runtime (no link to libcuda); NULL when absent */
static EncodeTiledFn encode_tiled(void)
{
    static EncodeTiledFn fn;
    static bool tried;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    if (!tried) {
        tried = true;
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (EncodeTiledFn)p;
        else
            cudaGetLastError();
    }
    pthread_mutex_unlock(&lock);
    return fn;
}

/*
 * Whether this backend's device runs the kernels: sm_90 (where sm_90a code
 * runs) with room for the largest tile's shared memory, which each kernel
 * is then allowed; probed once per backend.
 */
static bool wg_device(DittoBackend *be)
{
    DittoCuda *cu = ditto_cuda(be);
    if (cu->wg_state == 0) {
        cudaDeviceProp prop;
        size_t smem = WgCfg<160, 48, 3, 0>::SMEM > WgCfg<160, 48, 7, 0>::SMEM ? WgCfg<160, 48, 3, 0>::SMEM : WgCfg<160, 48, 7, 0>::SMEM;
        smem = smem > SpCfg::SMEM ? smem : SpCfg::SMEM;
        bool ok = cudaGetDeviceProperties(&prop, cu->device) == cudaSuccess && prop.major == 9 && prop.minor == 0 &&
                  prop.sharedMemPerBlockOptin >= smem && prop.multiProcessorCount > 0;
        cu->wg_sms = ok ? prop.multiProcessorCount : 0;
#define WG_ATTR(bn, kw, kh)                                                                                                           \
    ok = ok && cudaFuncSetAttribute(k_wg_conv<bn, 48, kw, kh>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WgCfg<bn, 48, kw, kh>::SMEM) == \
                   cudaSuccess
        WG_ATTR(144, 3, 0);
        WG_ATTR(160, 3, 0);
        WG_ATTR(144, 3, 3);
        WG_ATTR(160, 3, 3);
        WG_ATTR(160, 7, 0);
#undef WG_ATTR
        ok = ok && cudaFuncSetAttribute(k_wg_conv_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WgTcCfg::SMEM) == cudaSuccess;
        ok = ok && cudaFuncSetAttribute(k_wg_spade<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SpCfg::SMEM) == cudaSuccess;
        ok = ok && cudaFuncSetAttribute(k_wg_spade<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SpCfg::SMEM) == cudaSuccess;
        cudaGetLastError();
        cu->wg_state = ok ? 1 : 2;
    }
    return cu->wg_state == 1;
}

/*
 * The instantiated tiles: 48-channel steps, kw 3 with 129-144 and 145-160
 * outputs (the hourglass's last convolution, 144 -> 144), at kh 3 with one
 * box per dz read by all 9 taps (DITTO_CUDA_WGBOX=0: a box per (dz, dy),
 * A/B), kw 7 with 129-160 (the mask head's depth split, 144 -> 7 x 22, a
 * box per dy); up to 32 outputs at 3x3(x3) with the taps as columns
 * (k_wg_conv_tc: the hourglass's 128 -> 32), C a multiple of 8. 0: none.
 */
enum { WG_NONE, WG_144_48_3, WG_160_48_3, WG_144_48_3B, WG_160_48_3B, WG_160_48_7, WG_96_TC };

static int wg_tile(const DittoWgConv *c)
{
    static int box = -1;
    if (box < 0) {
        const char *e = getenv("DITTO_CUDA_WGBOX");
        box = !(e && !strcmp(e, "0"));
    }
    if (c->O <= 32)
        return c->kh == 3 && c->kw == 3 && c->C % 8 == 0 ? WG_96_TC : WG_NONE;
    if (c->O <= 128 || c->O > 160 || c->C % 48)
        return WG_NONE;
    if (c->kw == 3 && c->kh == 3 && box)
        return c->O <= 144 ? WG_144_48_3B : WG_160_48_3B;
    if (c->kw == 3)
        return c->O <= 144 ? WG_144_48_3 : WG_160_48_3;
    return c->kw == 7 ? WG_160_48_7 : WG_NONE;
}

bool ditto_cuda_wg_fits(DittoBackend *be, const DittoWgConv *c)
{
    if (!wg_device(be) || !encode_tiled())
        return false;
    const bool odd = c->kd % 2 && c->kh % 2 && c->kw % 2;
    return wg_tile(c) != WG_NONE && c->W == 64 && c->H > 0 && c->H % WG_ROWS == 0 && c->D > 0 && c->N > 0 && c->C > 0 &&
           c->ldy >= c->O && odd && c->kh <= 7 && c->kd <= 7 && c->N * c->D * (c->H / WG_ROWS) <= INT32_MAX &&
           c->O * c->kd * c->kh * c->kw * c->C <= INT32_MAX && ((uintptr_t)c->x | (uintptr_t)c->w) % 16 == 0 && (uintptr_t)c->y % 4 == 0 &&
           c->ldy % 2 == 0;
}

/*
 * The tensor maps and arguments of a k_wg_conv / k_wg_conv_tc launch: x
 * (C, W, H, D, N) innermost first in boxes of 16 channels x ws pixels x
 * boxr rows, zeros outside (and past C); w (K, O), K = kd kh kw C, in boxes
 * of 16 x bn (rows past O read as zeros).
 */
static int wg_prepare(DittoBackend *be, const DittoWgConv *c, int ws, int boxr, int bn, CUtensorMap *mx, CUtensorMap *mw, WgArgs *a)
{
    EncodeTiledFn enc = encode_tiled();
    const cuuint64_t dx[5] = { (cuuint64_t)c->C, 64, (cuuint64_t)c->H, (cuuint64_t)c->D, (cuuint64_t)c->N };
    const cuuint64_t sx[4] = { (cuuint64_t)c->C * 2, (cuuint64_t)c->C * 128, (cuuint64_t)(c->C * 128 * c->H),
                               (cuuint64_t)(c->C * 128 * c->H * c->D) };
    const cuuint32_t bx[5] = { 16, (cuuint32_t)ws, (cuuint32_t)boxr, 1, 1 }, one[5] = { 1, 1, 1, 1, 1 };
    CUresult r = enc(mx, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 5, (void *)c->x, dx, sx, bx, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    const int64_t K = (int64_t)c->kd * c->kh * c->kw * c->C;
    const cuuint64_t dw[2] = { (cuuint64_t)K, (cuuint64_t)c->O }, sw[1] = { (cuuint64_t)K * 2 };
    const cuuint32_t bw[2] = { 16, (cuuint32_t)bn };
    if (r == CUDA_SUCCESS)
        r = enc(mw, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)c->w, dw, sw, bw, one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_32B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return ditto_fail(&be->log, DITTO_ERR_BACKEND, "op conv: cuTensorMapEncodeTiled failed (%d) for the wgmma convolution", (int)r);
    a->D = (int)c->D, a->H = (int)c->H, a->C = (int)c->C, a->O = (int)c->O, a->kd = c->kd, a->kh = c->kh;
    a->pd = c->kd / 2, a->ph = c->kh / 2, a->pw = c->kw / 2, a->ldy = (int)c->ldy;
    a->bias = c->bias, a->bias_f16 = c->bias_f16, a->relu = c->relu, a->acc = c->acc;
    return 0;
}

template <int BN, int BK, int KW, int KH>
static int wg_launch(DittoBackend *be, const DittoWgConv *c)
{
    typedef WgCfg<BN, BK, KW, KH> G;
    CUtensorMap mx, mw;
    WgArgs a;
    DITTO_TRY(wg_prepare(be, c, G::WS, G::BOXR, BN, &mx, &mw, &a));
    static bool logged;   /* per instantiation: which convolutions take this tile */
    if (!logged) {
        ditto_log(&be->log, DITTO_LOG_DEBUG, "conv: sm_90a wgmma kernel, %dx%d tile, kw %d, box rows %d, for C %lld -> O %lld at %lldx%lldx64", BN,
                  BK, KW, G::BOXR, (long long)c->C, (long long)c->O, (long long)c->D, (long long)c->H);
        logged = true;
    }
    const unsigned blocks = (unsigned)(c->N * c->D * (c->H / WG_ROWS));
    k_wg_conv<BN, BK, KW, KH><<<blocks, WG_THREADS, G::SMEM, ditto_cuda(be)->stream>>>(mx, mw, (__half *)c->y, a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

/* k_wg_conv_tc's launch: boxes of 6 rows of 64 pixels (no halo), weights in boxes of 16 x 32 (one tap) */
static int wg_launch_tc(DittoBackend *be, const DittoWgConv *c)
{
    typedef WgTcCfg G;
    CUtensorMap mx, mw;
    WgArgs a;
    DITTO_TRY(wg_prepare(be, c, G::WS, G::BOXR, G::OB, &mx, &mw, &a));
    static bool logged;
    if (!logged) {
        ditto_log(&be->log, DITTO_LOG_DEBUG, "conv: sm_90a wgmma kernel, taps as columns, for C %lld -> O %lld at %lldx%lldx64",
                  (long long)c->C, (long long)c->O, (long long)c->D, (long long)c->H);
        logged = true;
    }
    const unsigned blocks = (unsigned)(c->N * c->D * (c->H / WG_ROWS));
    k_wg_conv_tc<<<blocks, WG_THREADS, G::SMEM, ditto_cuda(be)->stream>>>(mx, mw, (__half *)c->y, a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

int ditto_cuda_wg_conv(DittoBackend *be, const DittoWgConv *c)
{
    if (!ditto_cuda_wg_fits(be, c))
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op conv: the wgmma convolution does not take this geometry");
    switch (wg_tile(c)) {
    case WG_144_48_3: return wg_launch<144, 48, 3, 0>(be, c);
    case WG_160_48_3: return wg_launch<160, 48, 3, 0>(be, c);
    case WG_144_48_3B: return wg_launch<144, 48, 3, 3>(be, c);
    case WG_160_48_3B: return wg_launch<160, 48, 3, 3>(be, c);
    case WG_96_TC: return wg_launch_tc(be, c);
    default: return wg_launch<160, 48, 7, 0>(be, c);
    }
}

bool ditto_cuda_wg_spade_fits(DittoBackend *be, const DittoWgSpade *s)
{
    if (!wg_device(be) || !encode_tiled())
        return false;
    const int64_t tiles = s->gamma_only ? s->C / 128 : s->C / 64;
    return s->N > 0 && s->H > 0 && s->H % WG_ROWS == 0 && s->W > 0 && s->W % 64 == 0 && s->Ca > 0 && s->Ca % SP_BK == 0 && s->C > 0 &&
           s->C % (s->gamma_only ? 128 : 64) == 0 && s->fh > 0 && s->fw > 0 && s->H % s->fh == 0 && s->W % s->fw == 0 &&
           s->N * (s->H / WG_ROWS) * (s->W / 64) * tiles <= INT32_MAX && s->N * s->C <= INT32_MAX / 2 && s->H <= INT32_MAX &&
           s->W <= INT32_MAX && s->Ca * 9 * s->C * 2 <= INT32_MAX && s->N * (s->H / WG_ROWS) * (s->W / 64) * tiles * (s->Ca / SP_BK) * 9 <= INT32_MAX &&
           s->lda >= s->Ca && s->lda % 8 == 0 && ((uintptr_t)s->a | (uintptr_t)s->w | (uintptr_t)s->x | (uintptr_t)s->y) % 16 == 0;
}

size_t ditto_cuda_wg_spade_wbytes(const DittoWgSpade *s)
{
    return (size_t)((s->gamma_only ? 1 : 2) * s->C * 9 * s->Ca) * 2;
}

int ditto_cuda_wg_spade(DittoBackend *be, const DittoWgSpade *s)
{
    if (!ditto_cuda_wg_spade_fits(be, s))
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op spade_conv: the wgmma kernel does not take this geometry");
    DittoCuda *cu = ditto_cuda(be);
    EncodeTiledFn enc = encode_tiled();
    CUtensorMap ma;
    /*
     * a: (Ca, W, H, 1, N) innermost first, pixels lda apart (a channel slice
     * of a wider tensor when lda > Ca); boxes of 16 channels x WS pixels x 4
     * rows, zeros outside (the padding)
     */
    const cuuint64_t da[5] = { (cuuint64_t)s->Ca, (cuuint64_t)s->W, (cuuint64_t)s->H, 1, (cuuint64_t)s->N };
    const cuuint64_t sx[4] = { (cuuint64_t)(s->lda * 2), (cuuint64_t)(s->lda * 2 * s->W), (cuuint64_t)(s->lda * 2 * s->W * s->H),
                               (cuuint64_t)(s->lda * 2 * s->W * s->H) };
    const cuuint32_t ba[5] = { 16, SpCfg::WS, SP_BOXR, 1, 1 }, one[5] = { 1, 1, 1, 1, 1 };
    CUresult r = enc(&ma, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 5, (void *)s->a, da, sx, ba, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return ditto_fail(&be->log, DITTO_ERR_BACKEND, "op spade_conv: cuTensorMapEncodeTiled failed (%d)", (int)r);
    SpArgs a;
    a.H = (int)s->H, a.W = (int)s->W, a.Ca = (int)s->Ca, a.C = (int)s->C;
    a.Hx = (int)(s->H / s->fh), a.Wx = (int)(s->W / s->fw), a.fh = (int)s->fh, a.fw = (int)s->fw;
    a.tiles = (int)(s->gamma_only ? s->C / 128 : s->C / 64);
    a.total = (int)(s->N * (s->H / WG_ROWS) * (s->W / 64) * a.tiles);
    a.bias = s->bias, a.bias_f16 = s->bias_f16, a.act = s->act, a.slope = s->slope;
    a.x = (const __half *)s->x, a.stat = s->stat, a.NC = (int)(s->N * s->C);
#ifdef DITTO_SPADE_PROBE
    static bool reg;
    if (!reg) {
        reg = true;
        atexit(sp_prof_print);
    }
    a.prof = !s->gamma_only && s->N == 8 && s->H == 64 && s->C == 512;
#else
    a.prof = 0;
#endif
    static int pf = -1;   /* DITTO_CUDA_SPPF=0: the epilogue's x loads after the main loop (A/B) */
    if (pf < 0) {
        const char *e = getenv("DITTO_CUDA_SPPF");
        pf = !(e && !strcmp(e, "0"));
    }
    a.prefetch = pf;
    const unsigned blocks = (unsigned)(a.total < cu->wg_sms ? a.total : cu->wg_sms);   /* persistent: a block an SM */
    const int64_t nw = (int64_t)(ditto_cuda_wg_spade_wbytes(s) / 16);
    k_sp_wprep<<<ditto_cuda_blocks(nw, 256), 256, 0, cu->stream>>>((const __half *)s->w, (__half *)s->wt, a.Ca, a.C, a.tiles, s->gamma_only, nw);
    DITTO_CUDA_LAUNCHED(be);
    if (s->gamma_only)
        k_wg_spade<true><<<blocks, SP_THREADS, SpCfg::SMEM, cu->stream>>>(ma, (const __half *)s->wt, (__half *)s->y, a);
    else
        k_wg_spade<false><<<blocks, SP_THREADS, SpCfg::SMEM, cu->stream>>>(ma, (const __half *)s->wt, (__half *)s->y, a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}
