/* CUDA backend: device memory, one stream, cuBLAS and cuDNN handles, and the op table. */
#include <string.h>

#include "backend/cuda/cuda_backend.h"

extern "C" {
#include "core/mem.h"
}

int ditto_cuda_fail(DittoBackend *be, cudaError_t err, const char *what, const char *file, int line)
{
    be->bad_state = 1;
    ditto_log(&be->log, DITTO_LOG_ERROR, "cuda: %s failed: %s (%s:%d)", what, cudaGetErrorString(err), file, line);
    return DITTO_ERR_BACKEND;
}

int ditto_cublas_fail(DittoBackend *be, cublasStatus_t st, const char *what, const char *file, int line)
{
    ditto_log(&be->log, DITTO_LOG_ERROR, "cublas: %s failed: status %d (%s:%d)", what, (int)st, file, line);
    return DITTO_ERR_BACKEND;
}

int ditto_cudnn_fail(DittoBackend *be, cudnnStatus_t st, const char *what, const char *file, int line)
{
    ditto_log(&be->log, DITTO_LOG_ERROR, "cudnn: %s failed: %s (%s:%d)", what, cudnnGetErrorString(st), file, line);
    return DITTO_ERR_BACKEND;
}

static void *cuda_alloc(void *ctx, size_t n)
{
    DittoBackend *be = (DittoBackend *)ctx;
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 256) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    DittoCuda *cu = ditto_cuda(be);
    cu->bytes_in_use += n;
    if (cu->bytes_in_use > cu->peak_bytes)
        cu->peak_bytes = cu->bytes_in_use;
    return p;
}

static void cuda_free(void *ctx, void *p)
{
    (void)ctx;
    if (p)
        cudaFree(p);
}

int ditto_cuda_workspace(DittoBackend *be, size_t n, void **out)
{
    DittoCuda *cu = ditto_cuda(be);
    if (n > cu->workspace_size) {
        if (cu->workspace) {
            DITTO_CUDA_CHECK(be, cudaStreamSynchronize(cu->stream));
            cudaFree(cu->workspace);
            cu->workspace = NULL;
            cu->workspace_size = 0;
        }
        size_t want = n < ((size_t)32 << 20) ? ((size_t)32 << 20) : n;
        DITTO_CUDA_CHECK(be, cudaMalloc(&cu->workspace, want));
        cu->workspace_size = want;
    }
    *out = cu->workspace;
    return 0;
}

static int cuda_upload(DittoBackend *be, void *dst, const void *src, size_t n)
{
    DittoCuda *cu = ditto_cuda(be);
    DITTO_CUDA_CHECK(be, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cu->stream));
    /* the host buffer may be freed right after: finish the copy */
    DITTO_CUDA_CHECK(be, cudaStreamSynchronize(cu->stream));
    return 0;
}

static int cuda_download(DittoBackend *be, void *dst, const void *src, size_t n)
{
    DittoCuda *cu = ditto_cuda(be);
    DITTO_CUDA_CHECK(be, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cu->stream));
    DITTO_CUDA_CHECK(be, cudaStreamSynchronize(cu->stream));
    return 0;
}

static int cuda_sync(DittoBackend *be)
{
    DITTO_CUDA_CHECK(be, cudaStreamSynchronize(ditto_cuda(be)->stream));
    return 0;
}

static void cuda_destroy(DittoBackend *be)
{
    DittoCuda *cu = ditto_cuda(be);
    if (cu) {
        if (cu->stream)
            cudaStreamSynchronize(cu->stream);
        if (cu->workspace)
            cudaFree(cu->workspace);
        ditto_cuda_conv_cache_free(cu);
        if (cu->cudnn)
            cudnnDestroy(cu->cudnn);
        if (cu->cublas)
            cublasDestroy(cu->cublas);
        if (cu->stream)
            cudaStreamDestroy(cu->stream);
        ditto_free(cu);
    }
    ditto_pool_destroy(&be->pool);
    ditto_free(be);
}

extern "C" int ditto_backend_cuda_open(DittoBackend **out, const DittoBackendParams *p)
{
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return ditto_fail(&p->log, DITTO_ERR_UNSUPPORTED, "backend 'cuda': no CUDA device (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (p->device_index < 0 || p->device_index >= count)
        return ditto_fail(&p->log, DITTO_ERR_INVAL, "backend 'cuda': device %d does not exist (%d present)", p->device_index, count);
    DittoBackend *be = (DittoBackend *)ditto_calloc(1, sizeof *be);
    DittoCuda *cu = (DittoCuda *)ditto_calloc(1, sizeof *cu);
    if (!be || !cu) {
        ditto_free(be);
        ditto_free(cu);
        return DITTO_ERR_NOMEM;
    }
    be->name = "cuda";
    be->device = DITTO_DEVICE_CUDA;
    be->log = p->log;
    be->priv = cu;
    be->allocator.alloc = cuda_alloc;
    be->allocator.free = cuda_free;
    be->allocator.ctx = be;
    be->allocator.device = DITTO_DEVICE_CUDA;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->sync = cuda_sync;
    be->destroy = cuda_destroy;
    cu->device = p->device_index;
    int rc = 0;
    if (cudaSetDevice(cu->device) != cudaSuccess || cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking) != cudaSuccess)
        rc = ditto_fail(&p->log, DITTO_ERR_BACKEND, "backend 'cuda': cannot create a stream on device %d", cu->device);
    else if (cublasCreate(&cu->cublas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(cu->cublas, cu->stream) != CUBLAS_STATUS_SUCCESS)
        rc = ditto_fail(&p->log, DITTO_ERR_BACKEND, "backend 'cuda': cannot initialise cuBLAS");
    else if (cudnnCreate(&cu->cudnn) != CUDNN_STATUS_SUCCESS || cudnnSetStream(cu->cudnn, cu->stream) != CUDNN_STATUS_SUCCESS)
        rc = ditto_fail(&p->log, DITTO_ERR_BACKEND, "backend 'cuda': cannot initialise cuDNN");
    else if (ditto_pool_create(&be->pool, p->nthreads) < 0)
        rc = DITTO_ERR_NOMEM;
    if (rc < 0) {
        cuda_destroy(be);
        return rc;
    }
    /* fp32 math stays fp32 (no TF32) so fp32 results match the CPU oracle; f16 GEMM reductions accumulate in fp32 */
    cublasSetMathMode(cu->cublas, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    ditto_cuda_init_elementwise(&be->ops);
    ditto_cuda_init_gemm(&be->ops);
    ditto_cuda_init_conv(&be->ops);
    ditto_cuda_init_norm(&be->ops);
    ditto_cuda_init_sample(&be->ops);
    ditto_cuda_init_attention(&be->ops);
    ditto_cuda_init_image(&be->ops);
    *out = be;
    return 0;
}
