/*
 * Channels-last f16 convolution on Hopper's warpgroup tensor-core
 * instructions (wgmma) with TMA loads, for the convolutions where cuDNN's
 * kernels are slowest (PERF.md, sessions 25-26): the warp network's wide 3-D
 * and depth-split ones over 64-pixel rows, the hourglass's last convolution
 * (144 -> 144 at 3x3x3 over 16x64x64) and the mask head's depth split (144
 * -> 154 at 7x7 over 64x64 slices), and a few narrow ones (<= 32 outputs at
 * 3x3 or 3x3x3: the hourglass's 128 -> 32, the decoder's conv_img). Tiles of
 * other widths lose to cuDNN (see WG_TILES).
 *
 * An implicit GEMM: rows are output pixels, columns the O outputs (one tile
 * of BN columns), the reduction runs over (dz, dy, channel chunk of BK, dx).
 * A block of 256 threads (two warpgroups) computes output rows of one
 * 64-pixel segment, each warpgroup MR m64 accumulators (one row of 64
 * each). Narrow convolutions over rows of 64 take the kw taps as columns
 * instead (WgCfg's TC).
 *
 * Loads: one TMA box brings the input rows a block needs for one dz (or one
 * (dz, dy)), 64 + kw - 1 pixels wide, zero filled outside the image (the
 * padding) and past C (a last, partial channel chunk), and the taps read it
 * through descriptors shifted by dx and dy rows: each input byte comes from
 * L2 once per dz instead of once per tap. The weights of each step, BN x BK,
 * come in by TMA as well. One thread issues the loads (mbarrier
 * completion); the two warpgroups only compute.
 *
 * Shared memory tiles use the 32-byte swizzle in both TMA and wgmma: each
 * 16-channel column of a tile is rows of 32 bytes, the two 16-byte halves
 * of a row swapped on every other group of four rows, which the hardware
 * applies on absolute shared addresses, so a descriptor may start at any
 * row. Only built for sm_90a (the instructions exist nowhere else).
 */
#include <cuda.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/conv_wg.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_DEVICE 1
#include "backend/cuda/wgmma_ops.h"
#endif

#define WG_THREADS 256   /* two warpgroups */

typedef struct WgArgs {
    int D, H, W, C, O, kd, kh, pd, ph, pw, ldy;
    const void *bias;
    int bias_f16, relu, acc;
} WgArgs;

/*
 * Tile geometry. A block computes ROWS = 2 MR output rows of one 64-pixel
 * segment, MR m64 accumulators a warpgroup, BN columns; BK channels a
 * reduction step (BK / 16 wgmma k-steps).
 *  - KH 0: an input box holds the block's ROWS rows of one (dz, dy), WS
 *    pixels wide (64 + kw - 1 rounded up to 8), shared by the kw taps
 *    (descriptors shifted by dx rows); KH = kh: ROWS + kh - 1 rows of one dz,
 *    shared by all kh x kw taps (shifted by dy rows too), which cuts the
 *    input's L2 traffic by another kh ROWS / (ROWS + kh - 1).
 *  - TC (taps as columns, W = 64 and KH): the kw taps are column blocks of
 *    OB = BN / kw columns, Q[p, dx OB + o] = sum over (dz, dy, c) of x[p, ..]
 *    w[o, .., dx], and the epilogue adds y[p, o] = Q[p - 1, o] + Q[p, OB + o]
 *    + Q[p + 1, 2 OB + o] through shared memory (Q is 0 beyond the row: the
 *    padding). A narrow convolution so becomes a wide GEMM with a third of
 *    the steps, and the box needs no halo.
 * SA input slots, SB weight slots, loads P steps ahead; MINB blocks an SM.
 */
template <int BN, int BK, int KW, int KH, int SA, int SB, int P, int MINB, int MR, bool TC> struct WgCfg {
    static constexpr int ROWS = 2 * MR, OB = TC ? BN / KW : BN;
    static constexpr int WS = TC ? 64 : (64 + KW - 1 + 7) / 8 * 8, BOXR = KH ? ROWS + KH - 1 : ROWS, AROWS = BOXR * WS, KC = BK / 16;
    static constexpr int TAPS = TC ? KH : KH ? KH * KW : KW;   /* steps that read one input box */
    static constexpr int A_BYTES = AROWS * BK * 2, B_BYTES = BN * BK * 2;
    static constexpr int A_SLOT = (A_BYTES + 1023) / 1024 * 1024, B_SLOT = (B_BYTES + 1023) / 1024 * 1024;
    static constexpr int QS = BN + 8;   /* TC: the float row stride of Q in shared memory */
    static constexpr size_t PIPE = (size_t)SA * A_SLOT + (size_t)SB * B_SLOT, QB = TC ? (size_t)ROWS * 64 * QS * 4 : 0;
    static constexpr size_t SMEM = 1024 + (PIPE > QB ? PIPE : QB) + 8 * (SA + SB);
    static_assert(P <= SB - 1 && P <= (SA - 1) * TAPS, "load distance");
    static_assert(SMEM <= 227 * 1024, "shared memory");
    static_assert(!TC || (KH && BN % (8 * KW) == 0), "taps as columns");
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

template <int BN> struct WgMma;
#define WG_MMA(n)                                                                                                   \
    template <> struct WgMma<n> {                                                                                   \
        static __device__ __forceinline__ void run(float (&d)[n / 2], uint64_t a, uint64_t b) { wgmma_n##n(d, a, b); } \
    }
WG_MMA(16);
WG_MMA(32);
WG_MMA(96);
WG_MMA(144);
WG_MMA(160);
#undef WG_MMA
#endif

/*
 * x (N, D, H, W, C) through tmx (5-D, boxes of 16 channels x WS pixels x
 * BOXR rows, zeros outside, also past C), w (O, kd, kh, kw, C) through tmw
 * (2-D (O, K), boxes of 16 x OB), y (N, D, H, W, ldy): columns [0, O).
 * Grid: N * D * (H / ROWS) * (W / 64).
 */
template <int BN, int BK, int KW, int KH, int SA, int SB, int P, int MINB, int MR, bool TC>
static __global__ void __launch_bounds__(WG_THREADS, MINB) k_wg_conv(const __grid_constant__ CUtensorMap tmx, const __grid_constant__ CUtensorMap tmw,
                                                                     __half *__restrict__ y, WgArgs a)
{
#ifdef WG_DEVICE
    typedef WgCfg<BN, BK, KW, KH, SA, SB, P, MINB, MR, TC> G;
    constexpr int WS = G::WS, AROWS = G::AROWS, KC = G::KC, TAPS = G::TAPS, ROWS = G::ROWS, OB = G::OB;
    extern __shared__ __align__(1024) uint8_t wg_raw[];
    const int t = threadIdx.x;
    const uint32_t base = (wg_smem(wg_raw) + 1023) & ~1023u;   /* the swizzle repeats every 256 bytes; TMA wants 128 */
    const size_t pipe = G::PIPE > G::QB ? G::PIPE : G::QB;
    const uint32_t sa0 = base, sb0 = base + SA * G::A_SLOT, bar = base + (uint32_t)pipe;   /* barriers: inputs SA, weights SB */
    int bx = blockIdx.x;
    const int segs = a.W / 64, x0 = (bx % segs) * 64;
    bx /= segs;
    const int hq = a.H / ROWS, y0 = (bx % hq) * ROWS;
    bx /= hq;
    const int z = bx % a.D, n = bx / a.D;
    /* chunks of BK channels (the last one zero-filled past C); the box's dy values, then the others */
    const int cc_n = (a.C + BK - 1) / BK, khb = KH ? 1 : a.kh, steps = a.kd * khb * cc_n * TAPS;

    if (t == 0) {
        for (int i = 0; i < SA + SB; ++i)
            mb_init(bar + 8 * i);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    /*
     * step s = ((dz * khb + dyb) * chunks + cc) * TAPS + tap; tap = dy' * KW + dx,
     * or dy' alone with TC (KH: dy = dy'; else dy = dyb); the box of
     * (dz, dyb, cc) arrives with its tap 0
     */
    auto produce = [&](int s) {
        const int tap = s % TAPS, r = s / TAPS, cc = r % cc_n, tz = r / cc_n, dyb = tz % khb, dz = tz / khb;
        const int dy = TC ? tap : KH ? tap / KW : dyb, dx = TC ? 0 : tap % KW;
        if (tap == 0) {
            const uint32_t slot = r % SA, mb = bar + 8 * slot;
            mb_expect(mb, G::A_BYTES);
#pragma unroll
            for (int kc = 0; kc < KC; ++kc)
                tma_5d(sa0 + slot * G::A_SLOT + kc * AROWS * 32, &tmx, cc * BK + kc * 16, x0 - (TC ? 0 : a.pw), y0 - a.ph + dyb, z - a.pd + dz, n,
                       mb);
        }
        const uint32_t slot = s % SB, mb = bar + 8 * (SA + slot);
        mb_expect(mb, G::B_BYTES);
#pragma unroll
        for (int j = 0; j < (TC ? KW : 1); ++j) {   /* TC: tap dx's weights in column block dx */
            const int k0 = ((dz * a.kh + dy) * KW + dx + j) * a.C + cc * BK;   /* past C: the next tap's weights times zeros */
#pragma unroll
            for (int kc = 0; kc < KC; ++kc)
                tma_2d(sb0 + slot * G::B_SLOT + (kc * BN + j * OB) * 32, &tmw, k0 + kc * 16, 0, mb);
        }
    };
    if (t == 0)
        for (int s = 0; s < P && s < steps; ++s)
            produce(s);

    float acc[MR][BN / 2];
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i)
            acc[m][i] = 0.0f;
    const int wg = t >> 7;
    for (int s = 0; s < steps; ++s) {
        const int tap = s % TAPS, r = s / TAPS;
        const int sh = TC ? tap * WS : (KH ? tap / KW : 0) * WS + tap % KW;   /* the tap's first row in the box */
        if (tap == 0)
            mb_wait(bar + 8 * (r % SA), (r / SA) & 1);
        mb_wait(bar + 8 * (SA + s % SB), (s / SB) & 1);
        const uint32_t sa = sa0 + (r % SA) * G::A_SLOT, sb = sb0 + (s % SB) * G::B_SLOT;
#pragma unroll
        for (int m = 0; m < MR; ++m)
            wg_fence(acc[m]);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int j = 0; j < KC; ++j) {
            const uint64_t db = wg_desc(sb + j * BN * 32);
#pragma unroll
            for (int m = 0; m < MR; ++m)
                WgMma<BN>::run(acc[m], wg_desc(sa + (j * AROWS + (MR * wg + m) * WS + sh) * 32), db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");   /* step s - 1 is done in this warpgroup */
#pragma unroll
        for (int m = 0; m < MR; ++m)
            wg_fence(acc[m]);
        /* after the barrier both warpgroups are done with step s - 1: its slots may be refilled (P <= SB - 1) */
        __syncthreads();
        if (t == 0 && s + P < steps)
            produce(s + P);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int m = 0; m < MR; ++m)
        wg_fence(acc[m]);

    /* the m64nN fragment: thread (warp w, lane l) holds rows 16w + l/4 (+8), columns 8j + 2(l%4) (+1) */
    const int warp = (t & 127) >> 5, lane = t & 31;
    /* out = v0, v1 (+ bias, + y when acc, relu) at pixel row px (of the block's ROWS * 64), columns col, col + 1 (col + 1 < O or not stored) */
    auto put = [&](int px, int col, float v0, float v1) {
        __half *yp = y + ((((int64_t)n * a.D + z) * a.H + y0 + px / 64) * a.W + x0 + px % 64) * a.ldy + col;
        if (a.bias) {
            v0 += ditto_ld(a.bias, col, a.bias_f16);
            v1 += col + 1 < a.O ? ditto_ld(a.bias, col + 1, a.bias_f16) : 0.0f;
        }
        if (col + 1 < a.O) {
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
    };
    if (!TC) {
#pragma unroll
        for (int m = 0; m < MR; ++m)
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int col = j * 8 + 2 * (lane & 3);
                if (col >= a.O)
                    continue;
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    put((MR * wg + m) * 64 + warp * 16 + (lane >> 2) + 8 * h, col, acc[m][4 * j + 2 * h], acc[m][4 * j + 2 * h + 1]);
            }
        return;
    }
    /* TC: Q to shared memory (the pipeline's slots are free: every wgmma and load is done), then the shifted sums */
    __syncthreads();
    float *q = (float *)(wg_raw + (base - wg_smem(wg_raw)));
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int px = (MR * wg + m) * 64 + warp * 16 + (lane >> 2) + 8 * h;
                *(float2 *)(q + px * G::QS + j * 8 + 2 * (lane & 3)) = make_float2(acc[m][4 * j + 2 * h], acc[m][4 * j + 2 * h + 1]);
            }
    __syncthreads();
    const int op = (a.O + 1) / 2;   /* column pairs */
    for (int i = t; i < ROWS * 64 * op; i += WG_THREADS) {
        const int px = i / op, col = 2 * (i % op), xq = px % 64;
        const float *qc = q + px * G::QS + col;
        float2 v = *(const float2 *)(qc + OB);
        if (xq > 0) {
            const float2 l = *(const float2 *)(qc - G::QS);
            v.x += l.x, v.y += l.y;
        }
        if (xq < 63) {
            const float2 r = *(const float2 *)(qc + G::QS + 2 * OB);
            v.x += r.x, v.y += r.y;
        }
        put(px, col, v.x, v.y);
    }
#endif
}

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
 * The instantiated tiles (PERF.md, sessions 25-26): id, then WgCfg's
 * BN, BK, KW, KH, SA, SB, P, MINB, MR, TC.
 *  - Wide: 144 or 160 columns in 48-channel steps; kw 3 (the hourglass's
 *    last convolution, 144 -> 144) with the box shared by the 3 x 3 taps
 *    (255 against 292 us a call of 2 items with a box per dy, on the H200),
 *    kw 7 (the mask head's depth split, 144 -> 7 x 22) with a box per dy (a
 *    shared 10-row box was no faster, with fewer weight slots).
 *  - Narrow (<= 32 outputs at 3x3 or 3x3x3, where cuDNN is slowest): rows
 *    of 64 take the taps as columns, 96 columns (3 x 32; the hourglass's 128
 *    -> 32: 103 against 133 us a call of 2 items as a 32-column tile, cuDNN
 *    ~143); wider rows 16 or 32 columns in 32-channel steps, two blocks an SM
 *    (the decoder's conv_img, 64 -> 16 at 256x256: 19.9 against cuDNN's 27.6
 *    us an item). Lost to cuDNN: 64 outputs, as 192 columns with one m64 a
 *    warpgroup (112 -> 64 at 3x3x3: 193 against 147 us) or as a plain
 *    64-column tile (150; 256 -> 64 at 3x3: 58 against 50), and 64-channel
 *    steps at one block an SM.
 * DittoWgConv.alt (DITTO_CUDA_WGALT, measurements): 1 hg_out with a box per
 * dy, 2 no taps as columns.
 */
#define WG_TILES(X)                                         \
    X(WG_144_3, 144, 48, 3, 3, 2, 5, 4, 1, 2, false)        \
    X(WG_160_3, 160, 48, 3, 3, 2, 5, 4, 1, 2, false)        \
    X(WG_144_3D, 144, 48, 3, 0, 3, 5, 4, 1, 2, false)       \
    X(WG_160_7, 160, 48, 7, 0, 2, 6, 5, 1, 2, false)        \
    X(WG_32_3, 32, 32, 3, 3, 2, 6, 5, 2, 2, false)          \
    X(WG_16_3, 16, 32, 3, 3, 2, 6, 5, 2, 2, false)          \
    X(WG_96_3T, 96, 64, 3, 3, 2, 4, 3, 1, 2, true)

#define WG_ENUM(id, ...) id,
enum { WG_NONE, WG_TILES(WG_ENUM) WG_COUNT };
#undef WG_ENUM

static int wg_tile(const DittoWgConv *c)
{
    if (c->O <= 64) {
        if (c->kw != 3 || c->kh != 3)
            return WG_NONE;
        if (c->O > 32)
            return WG_NONE;
        return c->W == 64 && !(c->alt & 2) ? WG_96_3T : c->O <= 16 ? WG_16_3 : WG_32_3;
    }
    if (c->O <= 128 || c->O > 160)
        return WG_NONE;
    if (c->kw == 3 && c->kh == 3)
        return c->O > 144 ? WG_160_3 : c->alt & 1 ? WG_144_3D : WG_144_3;
    if (c->kw == 3)
        return c->O > 144 ? WG_NONE : WG_144_3D;
    return c->kw == 7 ? WG_160_7 : WG_NONE;
}

/* output rows a block of tile id */
static int wg_rows(int id)
{
    switch (id) {
#define WG_ROWS_OF(tid, ...) \
    case tid: return WgCfg<__VA_ARGS__>::ROWS;
        WG_TILES(WG_ROWS_OF)
#undef WG_ROWS_OF
    default: return 0;
    }
}

/*
 * Whether this backend's device runs the kernels: sm_90 (where sm_90a code
 * runs), each kernel allowed its shared memory; probed once per backend.
 */
static bool wg_device(DittoBackend *be)
{
    DittoCuda *cu = ditto_cuda(be);
    if (cu->wg_state == 0) {
        cudaDeviceProp prop;
        bool ok = cudaGetDeviceProperties(&prop, cu->device) == cudaSuccess && prop.major == 9 && prop.minor == 0;
#define WG_ATTR(id, ...)                                                                                                       \
    ok = ok && prop.sharedMemPerBlockOptin >= WgCfg<__VA_ARGS__>::SMEM &&                                                      \
         cudaFuncSetAttribute(k_wg_conv<__VA_ARGS__>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WgCfg<__VA_ARGS__>::SMEM) == \
             cudaSuccess;
        WG_TILES(WG_ATTR)
#undef WG_ATTR
        cudaGetLastError();
        cu->wg_state = ok ? 1 : 2;
    }
    return cu->wg_state == 1;
}

bool ditto_cuda_wg_fits(DittoBackend *be, const DittoWgConv *c)
{
    if (!wg_device(be) || !encode_tiled())
        return false;
    const bool odd = c->kd % 2 && c->kh % 2 && c->kw % 2;
    const int id = wg_tile(c), rows = wg_rows(id);
    return id != WG_NONE && c->W > 0 && c->W % 64 == 0 && c->H > 0 && c->H % rows == 0 && c->D > 0 && c->N > 0 && c->C > 0 && c->C % 8 == 0 &&
           c->ldy >= c->O && odd && c->kh <= 7 && c->kd <= 7 && c->N * c->D * (c->H / rows) * (c->W / 64) <= INT32_MAX &&
           c->W * c->H * c->C <= INT32_MAX && c->O * c->kd * c->kh * c->kw * c->C <= INT32_MAX &&
           ((uintptr_t)c->x | (uintptr_t)c->w) % 16 == 0 && (uintptr_t)c->y % 4 == 0 && c->ldy % 2 == 0;
}

template <int BN, int BK, int KW, int KH, int SA, int SB, int P, int MINB, int MR, bool TC>
static int wg_launch(DittoBackend *be, const DittoWgConv *c)
{
    typedef WgCfg<BN, BK, KW, KH, SA, SB, P, MINB, MR, TC> G;
    DittoCuda *cu = ditto_cuda(be);
    EncodeTiledFn enc = encode_tiled();
    CUtensorMap mx, mw;
    /* x: (C, W, H, D, N) innermost first; boxes of 16 channels x WS pixels x BOXR rows, zeros outside (and past C) */
    const cuuint64_t row = (cuuint64_t)(c->C * c->W) * 2;
    const cuuint64_t dx[5] = { (cuuint64_t)c->C, (cuuint64_t)c->W, (cuuint64_t)c->H, (cuuint64_t)c->D, (cuuint64_t)c->N };
    const cuuint64_t sx[4] = { (cuuint64_t)c->C * 2, row, row * (cuuint64_t)c->H, row * (cuuint64_t)(c->H * c->D) };
    const cuuint32_t bx[5] = { 16, G::WS, G::BOXR, 1, 1 }, one[5] = { 1, 1, 1, 1, 1 };
    CUresult r = enc(&mx, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 5, (void *)c->x, dx, sx, bx, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    /* w: (K, O) innermost first, K = kd * kh * kw * C; boxes of 16 x OB (rows past O read as zeros) */
    const int64_t K = (int64_t)c->kd * c->kh * c->kw * c->C;
    const cuuint64_t dw[2] = { (cuuint64_t)K, (cuuint64_t)c->O }, sw[1] = { (cuuint64_t)K * 2 };
    const cuuint32_t bw[2] = { 16, G::OB };
    if (r == CUDA_SUCCESS)
        r = enc(&mw, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)c->w, dw, sw, bw, one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_32B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return ditto_fail(&be->log, DITTO_ERR_BACKEND, "op conv: cuTensorMapEncodeTiled failed (%d) for the wgmma convolution", (int)r);
    static bool logged;   /* per instantiation: which convolutions take this tile */
    if (!logged) {
        ditto_log(&be->log, DITTO_LOG_DEBUG,
                  "conv: sm_90a wgmma kernel, %dx%d tile%s, kw %d, %d rows a block, box rows %d, for C %lld -> O %lld at %lldx%lldx%lld", BN,
                  BK, TC ? " (taps as columns)" : "", KW, G::ROWS, G::BOXR, (long long)c->C, (long long)c->O, (long long)c->D,
                  (long long)c->H, (long long)c->W);
        logged = true;
    }
    WgArgs a;
    a.D = (int)c->D, a.H = (int)c->H, a.W = (int)c->W, a.C = (int)c->C, a.O = (int)c->O, a.kd = c->kd, a.kh = c->kh;
    a.pd = c->kd / 2, a.ph = c->kh / 2, a.pw = KW / 2, a.ldy = (int)c->ldy;
    a.bias = c->bias, a.bias_f16 = c->bias_f16, a.relu = c->relu, a.acc = c->acc;
    const unsigned blocks = (unsigned)(c->N * c->D * (c->H / G::ROWS) * (c->W / 64));
    k_wg_conv<BN, BK, KW, KH, SA, SB, P, MINB, MR, TC><<<blocks, WG_THREADS, G::SMEM, cu->stream>>>(mx, mw, (__half *)c->y, a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

int ditto_cuda_wg_conv(DittoBackend *be, const DittoWgConv *c)
{
    if (!ditto_cuda_wg_fits(be, c))
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op conv: the wgmma convolution does not take this geometry");
    switch (wg_tile(c)) {
#define WG_CASE(id, ...) \
    case id: return wg_launch<__VA_ARGS__>(be, c);
        WG_TILES(WG_CASE)
#undef WG_CASE
    default: return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op conv: no wgmma tile");
    }
}
