/*
 * Channels-last f16 convolution on Hopper's warpgroup tensor-core
 * instructions (wgmma) with TMA loads, for the warp network's wide 3-D and
 * depth-split convolutions over 64-pixel rows, where cuDNN's kernels run at
 * 320-460 TFLOP/s (PERF.md, session 25): the hourglass's last convolution
 * (144 -> 144 at 3x3x3 over 16x64x64) and the mask head's depth split
 * (144 -> 154 at 7x7 over 64x64 slices). Narrower tiles lose to cuDNN
 * (96 columns, decoder block 4's depth split: 379 against 516 TFLOP/s).
 *
 * An implicit GEMM: rows are output pixels, columns the O outputs (one tile
 * of BN = 144 or 160 columns), the reduction runs over (dz, dy, channel
 * chunk of BK = 48, dx). A block of 256 threads (two warpgroups) computes four
 * output rows of 64 pixels, two per warpgroup (two m64 accumulators each).
 *
 * Loads: per (dz, dy, chunk) one TMA box brings the 4 input rows it needs,
 * 64 + kw - 1 pixels wide (zero filled outside the image: the padding), and
 * the kw taps along x read it through descriptors shifted by dx rows: each
 * input byte comes from L2 once per (dz, dy) instead of once per tap. The
 * weights of each tap, BN x 48, come in by TMA as well. One thread issues
 * the loads (mbarrier completion); the two warpgroups only compute.
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

#define WG_ROWS 4         /* output rows a block */
#define WG_THREADS 256

typedef struct WgArgs {
    int D, H, C, O, kd, kh, pd, ph, pw, ldy;
    const void *bias;
    int bias_f16, relu, acc;
} WgArgs;

/*
 * Tile geometry: BN output columns, BK channels a reduction step (BK / 16
 * wgmma k-steps), a block's 4 input rows WS pixels wide (64 + kw - 1
 * rounded up to 8).
 */
template <int BN, int BK, int KW> struct WgCfg {
    static constexpr int WS = (64 + KW - 1 + 7) / 8 * 8, AROWS = WG_ROWS * WS, KC = BK / 16;
    static constexpr int A_BYTES = AROWS * BK * 2, B_BYTES = BN * BK * 2;
    static constexpr int A_SLOT = (A_BYTES + 1023) / 1024 * 1024, B_SLOT = (B_BYTES + 1023) / 1024 * 1024;
    /* slots: input rows SA, weights SB, loads P steps ahead (P <= SB - 1 and <= (SA - 1) * KW, see the loop) */
    static constexpr int SA = KW >= 7 ? 2 : 3, SB = KW >= 7 ? 6 : 5, P = KW >= 7 ? 5 : 4;
    static constexpr size_t SMEM = 1024 + (size_t)SA * A_SLOT + (size_t)SB * B_SLOT + 8 * (SA + SB);
    static_assert(P <= SB - 1 && P <= (SA - 1) * KW, "load distance");
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
template <> struct WgMma<144> {
    static __device__ __forceinline__ void run(float (&d)[72], uint64_t a, uint64_t b) { wgmma_n144(d, a, b); }
};
template <> struct WgMma<160> {
    static __device__ __forceinline__ void run(float (&d)[80], uint64_t a, uint64_t b) { wgmma_n160(d, a, b); }
};
#endif

/*
 * x (N, D, H, 64, C) through tmx (5-D, boxes of 16 channels x WS pixels x 4
 * rows), w (O, kd, kh, kw, C) through tmw (2-D (O, K), boxes of 16 x BN),
 * y (N, D, H, 64, ldy): columns [0, O). Grid: N * D * H / 4 blocks.
 */
template <int BN, int BK, int KW>
static __global__ void __launch_bounds__(WG_THREADS, 1) k_wg_conv(const __grid_constant__ CUtensorMap tmx, const __grid_constant__ CUtensorMap tmw,
                                                                  __half *__restrict__ y, WgArgs a)
{
#ifdef WG_DEVICE
    typedef WgCfg<BN, BK, KW> G;
    constexpr int WS = G::WS, AROWS = G::AROWS, KC = G::KC, SA = G::SA, SB = G::SB, P = G::P;
    extern __shared__ __align__(1024) uint8_t wg_raw[];
    const int t = threadIdx.x;
    const uint32_t base = (wg_smem(wg_raw) + 1023) & ~1023u;   /* the swizzle repeats every 256 bytes; TMA wants 128 */
    const uint32_t sa0 = base, sb0 = base + SA * G::A_SLOT, bar = sb0 + SB * G::B_SLOT;   /* barriers: inputs SA, weights SB */
    int bx = blockIdx.x;
    const int hq = a.H / WG_ROWS, y0 = (bx % hq) * WG_ROWS;
    bx /= hq;
    const int z = bx % a.D, n = bx / a.D;
    const int cc_n = a.C / BK, steps = a.kd * a.kh * cc_n * KW;

    if (t == 0) {
        for (int i = 0; i < SA + SB; ++i)
            mb_init(bar + 8 * i);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    /* step s = ((dz * kh + dy) * chunks + cc) * KW + dx (chunks of BK channels); the rows of (dz, dy, cc) arrive with its dx = 0 */
    auto produce = [&](int s) {
        const int dx = s % KW, r = s / KW, cc = r % cc_n, tz = r / cc_n, dy = tz % a.kh, dz = tz / a.kh;
        if (dx == 0) {
            const uint32_t slot = r % SA, mb = bar + 8 * slot;
            mb_expect(mb, G::A_BYTES);
#pragma unroll
            for (int kc = 0; kc < KC; ++kc)
                tma_5d(sa0 + slot * G::A_SLOT + kc * AROWS * 32, &tmx, cc * BK + kc * 16, -a.pw, y0 - a.ph + dy, z - a.pd + dz, n, mb);
        }
        const uint32_t slot = s % SB, mb = bar + 8 * (SA + slot);
        mb_expect(mb, G::B_BYTES);
        const int k0 = ((dz * a.kh + dy) * KW + dx) * a.C + cc * BK;
#pragma unroll
        for (int kc = 0; kc < KC; ++kc)
            tma_2d(sb0 + slot * G::B_SLOT + kc * BN * 32, &tmw, k0 + kc * 16, 0, mb);
    };
    if (t == 0)
        for (int s = 0; s < P && s < steps; ++s)
            produce(s);

    float acc0[BN / 2], acc1[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i)
        acc0[i] = 0.0f, acc1[i] = 0.0f;
    const int wg = t >> 7;
    for (int s = 0; s < steps; ++s) {
        const int dx = s % KW, r = s / KW;
        if (dx == 0)
            mb_wait(bar + 8 * (r % SA), (r / SA) & 1);
        mb_wait(bar + 8 * (SA + s % SB), (s / SB) & 1);
        const uint32_t sa = sa0 + (r % SA) * G::A_SLOT, sb = sb0 + (s % SB) * G::B_SLOT;
        wg_fence(acc0);
        wg_fence(acc1);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int j = 0; j < KC; ++j) {
            const uint64_t db = wg_desc(sb + j * BN * 32);
            WgMma<BN>::run(acc0, wg_desc(sa + (j * AROWS + (2 * wg) * WS + dx) * 32), db);
            WgMma<BN>::run(acc1, wg_desc(sa + (j * AROWS + (2 * wg + 1) * WS + dx) * 32), db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");   /* step s - 1 is done in this warpgroup */
        wg_fence(acc0);
        wg_fence(acc1);
        /* after the barrier both warpgroups are done with step s - 1: its slots may be refilled (P <= SB - 1) */
        __syncthreads();
        if (t == 0 && s + P < steps)
            produce(s + P);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    wg_fence(acc0);
    wg_fence(acc1);

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
            for (int h = 0; h < 2; ++h) {
                __half *yp = y + (prow + warp * 16 + (lane >> 2) + 8 * h) * a.ldy + col;
                float v0 = acc[4 * j + 2 * h] + b0, v1 = acc[4 * j + 2 * h + 1] + b1;
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
            }
        }
    };
    store(acc0, 2 * wg);
    store(acc1, 2 * wg + 1);
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
 * Whether this backend's device runs the kernels: sm_90 (where sm_90a code
 * runs) with room for the largest tile's shared memory, which each kernel
 * is then allowed; probed once per backend.
 */
static bool wg_device(DittoBackend *be)
{
    DittoCuda *cu = ditto_cuda(be);
    if (cu->wg_state == 0) {
        cudaDeviceProp prop;
        const size_t smem = WgCfg<160, 48, 3>::SMEM > WgCfg<160, 48, 7>::SMEM ? WgCfg<160, 48, 3>::SMEM : WgCfg<160, 48, 7>::SMEM;
        bool ok = cudaGetDeviceProperties(&prop, cu->device) == cudaSuccess && prop.major == 9 && prop.minor == 0 &&
                  prop.sharedMemPerBlockOptin >= smem;
        ok = ok && cudaFuncSetAttribute(k_wg_conv<144, 48, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WgCfg<144, 48, 3>::SMEM) == cudaSuccess;
        ok = ok && cudaFuncSetAttribute(k_wg_conv<160, 48, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WgCfg<160, 48, 3>::SMEM) == cudaSuccess;
        ok = ok && cudaFuncSetAttribute(k_wg_conv<160, 48, 7>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WgCfg<160, 48, 7>::SMEM) == cudaSuccess;
        cudaGetLastError();
        cu->wg_state = ok ? 1 : 2;
    }
    return cu->wg_state == 1;
}

/*
 * The instantiated tiles, all with 48-channel steps: kw 3 with 129-144 and
 * 145-160 outputs (the hourglass's last convolution, 144 -> 144), kw 7 with
 * 129-160 (the mask head's depth split, 144 -> 7 x 22). 0: none.
 */
enum { WG_NONE, WG_144_48_3, WG_160_48_3, WG_160_48_7 };

static int wg_tile(const DittoWgConv *c)
{
    if (c->O <= 128 || c->O > 160 || c->C % 48)
        return WG_NONE;
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

template <int BN, int BK, int KW>
static int wg_launch(DittoBackend *be, const DittoWgConv *c)
{
    typedef WgCfg<BN, BK, KW> G;
    DittoCuda *cu = ditto_cuda(be);
    EncodeTiledFn enc = encode_tiled();
    CUtensorMap mx, mw;
    /* x: (C, W, H, D, N) innermost first; boxes of 16 channels x WS pixels x 4 rows, zeros outside */
    const cuuint64_t dx[5] = { (cuuint64_t)c->C, 64, (cuuint64_t)c->H, (cuuint64_t)c->D, (cuuint64_t)c->N };
    const cuuint64_t sx[4] = { (cuuint64_t)c->C * 2, (cuuint64_t)c->C * 128, (cuuint64_t)(c->C * 128 * c->H),
                               (cuuint64_t)(c->C * 128 * c->H * c->D) };
    const cuuint32_t bx[5] = { 16, G::WS, WG_ROWS, 1, 1 }, one[5] = { 1, 1, 1, 1, 1 };
    CUresult r = enc(&mx, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 5, (void *)c->x, dx, sx, bx, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    /* w: (K, O) innermost first, K = kd * kh * kw * C; boxes of 16 x BN (rows past O read as zeros) */
    const int64_t K = (int64_t)c->kd * c->kh * c->kw * c->C;
    const cuuint64_t dw[2] = { (cuuint64_t)K, (cuuint64_t)c->O }, sw[1] = { (cuuint64_t)K * 2 };
    const cuuint32_t bw[2] = { 16, BN };
    if (r == CUDA_SUCCESS)
        r = enc(&mw, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)c->w, dw, sw, bw, one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_32B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return ditto_fail(&be->log, DITTO_ERR_BACKEND, "op conv: cuTensorMapEncodeTiled failed (%d) for the wgmma convolution", (int)r);
    static bool logged;   /* per instantiation: which convolutions take this tile */
    if (!logged) {
        ditto_log(&be->log, DITTO_LOG_DEBUG, "conv: sm_90a wgmma kernel, %dx%d tile, kw %d, for C %lld -> O %lld at %lldx%lldx64", BN, BK, KW,
                  (long long)c->C, (long long)c->O, (long long)c->D, (long long)c->H);
        logged = true;
    }
    WgArgs a;
    a.D = (int)c->D, a.H = (int)c->H, a.C = (int)c->C, a.O = (int)c->O, a.kd = c->kd, a.kh = c->kh;
    a.pd = c->kd / 2, a.ph = c->kh / 2, a.pw = KW / 2, a.ldy = (int)c->ldy;
    a.bias = c->bias, a.bias_f16 = c->bias_f16, a.relu = c->relu, a.acc = c->acc;
    const unsigned blocks = (unsigned)(c->N * c->D * (c->H / WG_ROWS));
    k_wg_conv<BN, BK, KW><<<blocks, WG_THREADS, G::SMEM, cu->stream>>>(mx, mw, (__half *)c->y, a);
    DITTO_CUDA_LAUNCHED(be);
    return 0;
}

int ditto_cuda_wg_conv(DittoBackend *be, const DittoWgConv *c)
{
    if (!ditto_cuda_wg_fits(be, c))
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op conv: the wgmma convolution does not take this geometry");
    switch (wg_tile(c)) {
    case WG_144_48_3: return wg_launch<144, 48, 3>(be, c);
    case WG_160_48_3: return wg_launch<160, 48, 3>(be, c);
    default: return wg_launch<160, 48, 7>(be, c);
    }
}
