/*
 * CUDA backend internals shared by the .cu files (the only place that sees
 * CUDA headers). Launchers are extern "C"-free C++ internally; the backend
 * is exposed to C through ditto_backend_cuda_open() only.
 */
#ifndef DITTO_BACKEND_CUDA_H
#define DITTO_BACKEND_CUDA_H

#include <pthread.h>

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

extern "C" {
#include "backend/backend.h"
#include "core/log.h"
}

/* Lanes (DittoBackend.lane_select): 0 is the main stream; lane 1 is made on first use. */
#define DITTO_CUDA_LANES 2
typedef struct DittoCudaLane {
    bool made;
    cudaStream_t stream;
    cublasHandle_t cublas;
    void *workspace, *scratch;
    size_t workspace_size, scratch_size;
    cudaEvent_t mark;         /* lane_wait: recorded on this lane, waited on by another */
} DittoCudaLane;

#define DITTO_CUDA_STAGE_SLOTS 16   /* a batch stages two or three inputs: several batches in flight */
#define DITTO_CUDA_STAGE_MAX (1u << 20)   /* larger uploads wait for the device instead */

typedef struct DittoCuda {
    int device;
    int stream_priority;
    /*
     * stream, cublas, workspace and scratch are the selected lane's (every op
     * uses these; the workspace and scratch may grow there); lanes[lane] is
     * stale while it is selected, the other entries hold their lane's
     * (lane_park writes the selected one's back).
     */
    int lane;
    DittoCudaLane lanes[DITTO_CUDA_LANES];
    cudaStream_t stream;
    cudaStream_t copy_stream; /* download_async's copies and notifications, behind copy_after on stream */
    cudaEvent_t copy_after;   /* recorded on stream by download_async: the copy starts after that work */
    cudaEvent_t copy_done;    /* recorded on copy_stream by download_fence: stream's later work waits for it */
    /* upload_async's staging ring: page-locked slots, each reused once the copy recorded in its event is done */
    struct {
        void *host;
        size_t cap;
        cudaEvent_t done;
    } stage[DITTO_CUDA_STAGE_SLOTS];
    unsigned stage_next;
    cublasHandle_t cublas;
    cudnnHandle_t cudnn;
    void *workspace;          /* cuDNN / cuBLAS workspace, grown on demand (outside graph capture) */
    size_t workspace_size;
    void *scratch;            /* layout scratch of the channels-last fallbacks (conv.cu), grown on demand outside graph capture */
    size_t scratch_size;
    /* device memory accounting (mem_info): live allocator blocks, their bytes and the high-water mark incl. the workspace */
    struct DittoCudaAlloc *allocs;
    size_t nallocs, capallocs;
    size_t bytes_in_use, peak_bytes;
    pthread_mutex_t alloc_lock;  /* guards the accounting (allocations may come from any thread) */
    bool alloc_lock_ok;
    struct DittoCudaConvCache *conv_cache;  /* cuDNN plans per conv shape (conv.cu), created on first use */
    int wg_state;             /* conv_wg.cu on this device: 0 not probed yet, 1 usable (sm_90, shared memory limits set), 2 not */
    int wg_sms;               /* its multiprocessor count (conv_wg.cu's persistent grids), once probed */
} DittoCuda;

static inline DittoCuda *ditto_cuda(DittoBackend *be)
{
    return (DittoCuda *)be->priv;
}

/* Log a CUDA error with the call site, set the sticky bad state, return DITTO_ERR_BACKEND. */
int ditto_cuda_fail(DittoBackend *be, cudaError_t err, const char *what, const char *file, int line);
int ditto_cublas_fail(DittoBackend *be, cublasStatus_t st, const char *what, const char *file, int line);
int ditto_cudnn_fail(DittoBackend *be, cudnnStatus_t st, const char *what, const char *file, int line);

#define DITTO_CUDA_CHECK(be, call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return ditto_cuda_fail(be, e_, #call, __FILE__, __LINE__); } while (0)
#define DITTO_CUBLAS_CHECK(be, call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) return ditto_cublas_fail(be, s_, #call, __FILE__, __LINE__); } while (0)
#define DITTO_CUDNN_CHECK(be, call) do { cudnnStatus_t s_ = (call); if (s_ != CUDNN_STATUS_SUCCESS) return ditto_cudnn_fail(be, s_, #call, __FILE__, __LINE__); } while (0)
/* After a kernel launch. */
#define DITTO_CUDA_LAUNCHED(be) DITTO_CUDA_CHECK(be, cudaGetLastError())

/* Scratch workspace of at least n bytes (stream-ordered; valid until the next call). */
int ditto_cuda_workspace(DittoBackend *be, size_t n, void **out);
/*
 * A second grow-only buffer of at least n bytes, for data that must live
 * across calls that use the workspace (transposed operands around a call
 * of another op path). Growing it while the stream captures a graph fails.
 */
int ditto_cuda_scratch(DittoBackend *be, size_t n, void **out);

/*
 * y (n, cols, rows) = x (n, rows, cols), per item, for 2- or 4-byte
 * elements (elementwise.cu): the layout moves of channels-last paths and of
 * copies from transposed views.
 */
int ditto_cuda_transpose(DittoBackend *be, const void *x, void *y, size_t esz, int64_t n, int64_t rows, int64_t cols);

/* Element access helpers: float32 or float16 storage, fp32 math. */
__device__ __forceinline__ float ditto_ld(const void *p, int64_t i, bool f16)
{
    return f16 ? __half2float(((const __half *)p)[i]) : ((const float *)p)[i];
}
__device__ __forceinline__ void ditto_st(void *p, int64_t i, float v, bool f16)
{
    if (f16)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((float *)p)[i] = v;
}

/* An op's unary activation (DittoUnaryKind) of v, fp32: the unary op's arithmetic, shared by the kernels that fuse it. */
__device__ __forceinline__ float ditto_softplus_f(float v)
{
    return v > 20.0f ? v : log1pf(expf(v));
}

__device__ __forceinline__ float ditto_unary_f(int kind, float a, float b, float v)
{
    switch (kind) {
    case DITTO_UNARY_IDENTITY: return v;
    case DITTO_UNARY_RELU: return v > 0.0f ? v : 0.0f;
    case DITTO_UNARY_LEAKY_RELU: return v > 0.0f ? v : v * a;
    case DITTO_UNARY_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case DITTO_UNARY_SILU: return v / (1.0f + expf(-v));
    case DITTO_UNARY_SIGMOID: return 1.0f / (1.0f + expf(-v));
    case DITTO_UNARY_TANH: return tanhf(v);
    case DITTO_UNARY_MISH: return v * tanhf(ditto_softplus_f(v));
    case DITTO_UNARY_SOFTPLUS: return ditto_softplus_f(v);
    case DITTO_UNARY_EXP: return expf(v);
    case DITTO_UNARY_LOG: return logf(v);
    case DITTO_UNARY_SQRT: return sqrtf(v);
    case DITTO_UNARY_RSQRT: return 1.0f / sqrtf(v);
    case DITTO_UNARY_RECIP: return 1.0f / v;
    case DITTO_UNARY_NEG: return -v;
    case DITTO_UNARY_ABS: return fabsf(v);
    case DITTO_UNARY_ERF: return erff(v);
    case DITTO_UNARY_SIN: return sinf(v);
    case DITTO_UNARY_COS: return cosf(v);
    case DITTO_UNARY_CLIP: return v < a ? a : v > b ? b : v;   /* NaN passes through */
    case DITTO_UNARY_AFFINE: return __fadd_rn(__fmul_rn(a, v), b);
    default: return v;
    }
}

static inline int ditto_cuda_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (int)(b > 65535 * 32 ? 65535 * 32 : (b < 1 ? 1 : b));
}

/* Family init functions (one per .cu file). */
void ditto_cuda_init_elementwise(DittoOps *ops);
void ditto_cuda_init_gemm(DittoOps *ops);
void ditto_cuda_init_conv(DittoOps *ops);
void ditto_cuda_init_norm(DittoOps *ops);
void ditto_cuda_init_sample(DittoOps *ops);
void ditto_cuda_init_attention(DittoOps *ops);
void ditto_cuda_init_image(DittoOps *ops);
void ditto_cuda_init_onnx_ops(DittoOps *ops);

/* Destroy the conv plan cache (descriptors and host memory); called by cuda_destroy. */
void ditto_cuda_conv_cache_free(DittoCuda *cu);

#endif
