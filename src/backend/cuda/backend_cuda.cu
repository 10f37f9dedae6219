/* CUDA backend: device memory, streams (lanes), cuBLAS and cuDNN handles, and the op table. */
#include <stdlib.h>
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

/* One live allocator block: its address and requested size. */
struct DittoCudaAlloc {
    void *ptr;
    size_t size;
};

/* Workspace and scratch bytes of every lane (the selected one's are in cu's own fields). */
static size_t lane_bytes(const DittoCuda *cu)
{
    size_t n = cu->workspace_size + cu->scratch_size;
    for (int i = 0; i < DITTO_CUDA_LANES; i++)
        if (i != cu->lane)
            n += cu->lanes[i].workspace_size + cu->lanes[i].scratch_size;
    return n;
}

static void note_peak(DittoCuda *cu)
{
    size_t now = cu->bytes_in_use + lane_bytes(cu);
    if (now > cu->peak_bytes)
        cu->peak_bytes = now;
}

static void *cuda_alloc(void *ctx, size_t n)
{
    DittoBackend *be = (DittoBackend *)ctx;
    DittoCuda *cu = ditto_cuda(be);
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 256) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    pthread_mutex_lock(&cu->alloc_lock);
    if (cu->nallocs == cu->capallocs) {
        size_t cap = cu->capallocs ? 2 * cu->capallocs : 256;
        DittoCudaAlloc *a = (DittoCudaAlloc *)ditto_realloc(cu->allocs, cap * sizeof *a);
        if (!a) {
            pthread_mutex_unlock(&cu->alloc_lock);
            cudaFree(p);
            return NULL;
        }
        cu->allocs = a;
        cu->capallocs = cap;
    }
    cu->allocs[cu->nallocs].ptr = p;
    cu->allocs[cu->nallocs].size = n;
    cu->nallocs++;
    cu->bytes_in_use += n;
    note_peak(cu);
    pthread_mutex_unlock(&cu->alloc_lock);
    return p;
}

static void cuda_free(void *ctx, void *p)
{
    if (!p)
        return;
    DittoCuda *cu = ditto_cuda((DittoBackend *)ctx);
    pthread_mutex_lock(&cu->alloc_lock);
    /* newest first: scratch buffers are usually freed soon after they are made */
    for (size_t i = cu->nallocs; i-- > 0;) {
        if (cu->allocs[i].ptr == p) {
            cu->bytes_in_use -= cu->allocs[i].size;
            cu->allocs[i] = cu->allocs[--cu->nallocs];
            break;
        }
    }
    pthread_mutex_unlock(&cu->alloc_lock);
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
        ditto_log(&be->log, DITTO_LOG_DEBUG, "cuda: workspace grows to %.1f MB", want / 1048576.0);
        DITTO_CUDA_CHECK(be, cudaMalloc(&cu->workspace, want));
        pthread_mutex_lock(&cu->alloc_lock);
        cu->workspace_size = want;
        note_peak(cu);
        pthread_mutex_unlock(&cu->alloc_lock);
    }
    *out = cu->workspace;
    return 0;
}

int ditto_cuda_scratch(DittoBackend *be, size_t n, void **out)
{
    DittoCuda *cu = ditto_cuda(be);
    if (n > cu->scratch_size) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        DITTO_CUDA_CHECK(be, cudaStreamIsCapturing(cu->stream, &cs));
        if (cs != cudaStreamCaptureStatusNone)
            return ditto_fail(&be->log, DITTO_ERR_BACKEND, "cuda: layout scratch of %zu bytes first needed while capturing a graph"
                              " (run the step once before capturing)", n);
        if (cu->scratch) {
            DITTO_CUDA_CHECK(be, cudaStreamSynchronize(cu->stream));
            cudaFree(cu->scratch);
            cu->scratch = NULL;
            cu->scratch_size = 0;
        }
        DITTO_CUDA_CHECK(be, cudaMalloc(&cu->scratch, n));
        pthread_mutex_lock(&cu->alloc_lock);
        cu->scratch_size = n;
        note_peak(cu);
        pthread_mutex_unlock(&cu->alloc_lock);
    }
    *out = cu->scratch;
    return 0;
}

static int cuda_mem_info(DittoBackend *be, DittoMemInfo *info)
{
    DittoCuda *cu = ditto_cuda(be);
    memset(info, 0, sizeof *info);
    pthread_mutex_lock(&cu->alloc_lock);
    info->used = cu->bytes_in_use + lane_bytes(cu);
    info->peak = cu->peak_bytes;
    pthread_mutex_unlock(&cu->alloc_lock);
    size_t free_b = 0, total_b = 0;
    DITTO_CUDA_CHECK(be, cudaMemGetInfo(&free_b, &total_b));
    info->device_used = total_b - free_b;
    info->device_total = total_b;
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

static int cuda_upload_async(DittoBackend *be, void *dst, const void *src, size_t n)
{
    DittoCuda *cu = ditto_cuda(be);
    if (n > DITTO_CUDA_STAGE_MAX)
        return cuda_upload(be, dst, src, n);
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    DITTO_CUDA_CHECK(be, cudaStreamIsCapturing(cu->stream, &cs));
    if (cs != cudaStreamCaptureStatusNone)   /* a graph would replay the slot's later contents */
        return ditto_fail(&be->log, DITTO_ERR_BACKEND, "cuda: upload_async while capturing a graph");
    const unsigned i = cu->stage_next++ % DITTO_CUDA_STAGE_SLOTS;
    if (!cu->stage[i].done)
        DITTO_CUDA_CHECK(be, cudaEventCreateWithFlags(&cu->stage[i].done, cudaEventDisableTiming));
    DITTO_CUDA_CHECK(be, cudaEventSynchronize(cu->stage[i].done));   /* the slot's last copy (slots ago) is done */
    if (cu->stage[i].cap < n) {
        size_t want = n < 4096 ? 4096 : n;
        if (cu->stage[i].host)
            cudaFreeHost(cu->stage[i].host);
        cu->stage[i].host = NULL;
        cu->stage[i].cap = 0;
        DITTO_CUDA_CHECK(be, cudaHostAlloc(&cu->stage[i].host, want, cudaHostAllocDefault));
        cu->stage[i].cap = want;
    }
    memcpy(cu->stage[i].host, src, n);
    DITTO_CUDA_CHECK(be, cudaMemcpyAsync(dst, cu->stage[i].host, n, cudaMemcpyHostToDevice, cu->stream));
    DITTO_CUDA_CHECK(be, cudaEventRecord(cu->stage[i].done, cu->stream));
    return 0;
}

static int cuda_download(DittoBackend *be, void *dst, const void *src, size_t n)
{
    DittoCuda *cu = ditto_cuda(be);
    DITTO_CUDA_CHECK(be, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cu->stream));
    DITTO_CUDA_CHECK(be, cudaStreamSynchronize(cu->stream));
    return 0;
}

static int cuda_download_async(DittoBackend *be, void *dst, const void *src, size_t n)
{
    DittoCuda *cu = ditto_cuda(be);
    DITTO_CUDA_CHECK(be, cudaEventRecord(cu->copy_after, cu->stream));
    DITTO_CUDA_CHECK(be, cudaStreamWaitEvent(cu->copy_stream, cu->copy_after, 0));
    DITTO_CUDA_CHECK(be, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cu->copy_stream));
    return 0;
}

static int cuda_download_notify(DittoBackend *be, void (*fn)(void *arg), void *arg)
{
    DITTO_CUDA_CHECK(be, cudaLaunchHostFunc(ditto_cuda(be)->copy_stream, fn, arg));
    return 0;
}

static int cuda_download_fence(DittoBackend *be)
{
    DittoCuda *cu = ditto_cuda(be);
    DITTO_CUDA_CHECK(be, cudaEventRecord(cu->copy_done, cu->copy_stream));
    DITTO_CUDA_CHECK(be, cudaStreamWaitEvent(cu->stream, cu->copy_done, 0));
    return 0;
}

static int cuda_download_wait(DittoBackend *be)
{
    DITTO_CUDA_CHECK(be, cudaStreamSynchronize(ditto_cuda(be)->copy_stream));
    return 0;
}

static void *cuda_host_alloc(DittoBackend *be, size_t n)
{
    (void)be;
    void *p = NULL;
    return cudaHostAlloc(&p, n ? n : 1, cudaHostAllocDefault) == cudaSuccess ? p : NULL;
}

static void cuda_host_free(DittoBackend *be, void *p)
{
    (void)be;
    if (p)
        cudaFreeHost(p);
}

static int cuda_sync(DittoBackend *be)
{
    DittoCuda *cu = ditto_cuda(be);
    DITTO_CUDA_CHECK(be, cudaStreamSynchronize(cu->stream));
    for (int i = 0; i < DITTO_CUDA_LANES; i++)
        if (i != cu->lane && cu->lanes[i].made)
            DITTO_CUDA_CHECK(be, cudaStreamSynchronize(cu->lanes[i].stream));
    return 0;
}

/* The selected lane's resources from cu's fields back into its entry. */
static void lane_park(DittoCuda *cu)
{
    DittoCudaLane *l = &cu->lanes[cu->lane];
    l->stream = cu->stream;
    l->cublas = cu->cublas;
    l->workspace = cu->workspace;
    l->workspace_size = cu->workspace_size;
    l->scratch = cu->scratch;
    l->scratch_size = cu->scratch_size;
}

/* Park the selected lane, then lane i's resources into cu's fields. */
static void lane_swap(DittoCuda *cu, int i)
{
    const DittoCudaLane *n = &cu->lanes[i];
    lane_park(cu);
    cu->stream = n->stream;
    cu->cublas = n->cublas;
    cu->workspace = n->workspace;
    cu->workspace_size = n->workspace_size;
    cu->scratch = n->scratch;
    cu->scratch_size = n->scratch_size;
    cu->lane = i;
}

/* Lane i's stream, cuBLAS handle (same math mode as lane 0's) and event, on first use. */
static int lane_make(DittoBackend *be, int i)
{
    DittoCuda *cu = ditto_cuda(be);
    DittoCudaLane *l = &cu->lanes[i];
    if (l->made)
        return 0;
    if (cudaStreamCreateWithPriority(&l->stream, cudaStreamNonBlocking, cu->stream_priority) != cudaSuccess) {
        l->stream = NULL;
        return ditto_fail(&be->log, DITTO_ERR_BACKEND, "backend 'cuda': cannot create the stream of lane %d", i);
    }
    if (cublasCreate(&l->cublas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(l->cublas, l->stream) != CUBLAS_STATUS_SUCCESS) {
        if (l->cublas)
            cublasDestroy(l->cublas);
        l->cublas = NULL;
        cudaStreamDestroy(l->stream);
        l->stream = NULL;
        return ditto_fail(&be->log, DITTO_ERR_BACKEND, "backend 'cuda': cannot initialise cuBLAS for lane %d", i);
    }
    cublasSetMathMode(l->cublas, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    l->made = true;
    return 0;
}

static int cuda_lane_select(DittoBackend *be, int lane)
{
    DittoCuda *cu = ditto_cuda(be);
    if (lane < 0 || lane >= DITTO_CUDA_LANES)
        return DITTO_ERR_INVAL;
    if (lane == cu->lane)
        return 0;
    DITTO_TRY(lane_make(be, lane));
    lane_swap(cu, lane);
    DITTO_CUDNN_CHECK(be, cudnnSetStream(cu->cudnn, cu->stream));
    return 0;
}

static cudaStream_t lane_stream(DittoCuda *cu, int i)
{
    return i == cu->lane ? cu->stream : cu->lanes[i].stream;
}

static int cuda_lane_wait(DittoBackend *be, int lane, int on)
{
    DittoCuda *cu = ditto_cuda(be);
    if (lane < 0 || lane >= DITTO_CUDA_LANES || on < 0 || on >= DITTO_CUDA_LANES)
        return DITTO_ERR_INVAL;
    if (lane == on)
        return 0;
    DITTO_TRY(lane_make(be, lane));
    DITTO_TRY(lane_make(be, on));
    DittoCudaLane *l = &cu->lanes[on];
    if (!l->mark)
        DITTO_CUDA_CHECK(be, cudaEventCreateWithFlags(&l->mark, cudaEventDisableTiming));
    DITTO_CUDA_CHECK(be, cudaEventRecord(l->mark, lane_stream(cu, on)));
    DITTO_CUDA_CHECK(be, cudaStreamWaitEvent(lane_stream(cu, lane), l->mark, 0));
    return 0;
}

/* profiler marks: CUDA events on the backend stream */
static int cuda_mark_new(DittoBackend *be, void **mark)
{
    cudaEvent_t ev;
    DITTO_CUDA_CHECK(be, cudaEventCreate(&ev));
    *mark = (void *)ev;
    return 0;
}

static void cuda_mark_record(DittoBackend *be, void *mark)
{
    cudaEventRecord((cudaEvent_t)mark, ditto_cuda(be)->stream);
}

static int cuda_mark_wait(DittoBackend *be, void *mark)
{
    DITTO_CUDA_CHECK(be, cudaEventSynchronize((cudaEvent_t)mark));
    return 0;
}

static double cuda_mark_elapsed(DittoBackend *be, void *a, void *b)
{
    (void)be;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return ms;
}

static void cuda_mark_free(DittoBackend *be, void *mark)
{
    (void)be;
    cudaEventDestroy((cudaEvent_t)mark);
}

static int cuda_capture_begin(DittoBackend *be)
{
    DITTO_CUDA_CHECK(be, cudaStreamBeginCapture(ditto_cuda(be)->stream, cudaStreamCaptureModeThreadLocal));
    return 0;
}

static int cuda_capture_end(DittoBackend *be, void **graph)
{
    *graph = NULL;
    cudaGraph_t g = NULL;
    DITTO_CUDA_CHECK(be, cudaStreamEndCapture(ditto_cuda(be)->stream, &g));
    cudaGraphExec_t ex = NULL;
    cudaError_t e = cudaGraphInstantiate(&ex, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess)
        return ditto_cuda_fail(be, e, "cudaGraphInstantiate", __FILE__, __LINE__);
    *graph = (void *)ex;
    return 0;
}

static int cuda_graph_launch(DittoBackend *be, void *graph)
{
    DITTO_CUDA_CHECK(be, cudaGraphLaunch((cudaGraphExec_t)graph, ditto_cuda(be)->stream));
    return 0;
}

static void cuda_graph_free(DittoBackend *be, void *graph)
{
    (void)be;
    if (graph)
        cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static void cuda_destroy(DittoBackend *be)
{
    DittoCuda *cu = ditto_cuda(be);
    if (cu) {
        lane_park(cu);   /* every lane's resources in lanes[] */
        for (int i = 0; i < DITTO_CUDA_LANES; i++)
            if (cu->lanes[i].stream)
                cudaStreamSynchronize(cu->lanes[i].stream);
        if (cu->copy_stream) {
            cudaStreamSynchronize(cu->copy_stream);
            cudaStreamDestroy(cu->copy_stream);
        }
        for (int i = 0; i < DITTO_CUDA_STAGE_SLOTS; i++) {
            if (cu->stage[i].done) {
                cudaEventSynchronize(cu->stage[i].done);
                cudaEventDestroy(cu->stage[i].done);
            }
            if (cu->stage[i].host)
                cudaFreeHost(cu->stage[i].host);
        }
        if (cu->copy_after)
            cudaEventDestroy(cu->copy_after);
        if (cu->copy_done)
            cudaEventDestroy(cu->copy_done);
        ditto_cuda_conv_cache_free(cu);
        if (cu->cudnn)
            cudnnDestroy(cu->cudnn);
        for (int i = 0; i < DITTO_CUDA_LANES; i++) {
            DittoCudaLane *l = &cu->lanes[i];
            if (l->workspace)
                cudaFree(l->workspace);
            if (l->scratch)
                cudaFree(l->scratch);
            if (l->cublas)
                cublasDestroy(l->cublas);
            if (l->mark)
                cudaEventDestroy(l->mark);
            if (l->stream)
                cudaStreamDestroy(l->stream);
        }
        ditto_free(cu->allocs);
        if (cu->alloc_lock_ok)
            pthread_mutex_destroy(&cu->alloc_lock);
        ditto_free(cu);
    }
    ditto_pool_destroy(&be->pool);
    ditto_free(be);
}

/*
 * How a host thread waits for the GPU. The default spin wait keeps a core
 * busy for every waiting thread (the render and motion workers wait most of
 * the time) and takes it from the CPU stages that run meanwhile, the video
 * encoder above all; a blocking wait costs a few microseconds per wake-up, at
 * most a few hundred times a second here. DITTO_CUDA_SYNC=spin|yield|block
 * (default block) for measurements. Applies to the device's primary context,
 * so to every backend on it.
 */
static void set_sync_mode(const DittoLogger *log)
{
    const char *e = getenv("DITTO_CUDA_SYNC");
    unsigned flag = cudaDeviceScheduleBlockingSync;
    if (e && !strcmp(e, "spin"))
        flag = cudaDeviceScheduleSpin;
    else if (e && !strcmp(e, "yield"))
        flag = cudaDeviceScheduleYield;
    cudaError_t r = cudaSetDeviceFlags(flag);
    if (r != cudaSuccess) {
        cudaGetLastError();
        ditto_log(log, DITTO_LOG_DEBUG, "backend 'cuda': cannot set the wait mode: %s", cudaGetErrorString(r));
    }
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
    if (pthread_mutex_init(&cu->alloc_lock, NULL) != 0) {
        ditto_free(be);
        ditto_free(cu);
        return DITTO_ERR_NOMEM;
    }
    cu->alloc_lock_ok = true;
    be->name = "cuda";
    be->device = DITTO_DEVICE_CUDA;
    /* activations and network weights in f16 storage on request (fp32 math inside every op) */
    be->act_dtype = p->fp16 ? DITTO_F16 : DITTO_F32;
    be->log = p->log;
    be->priv = cu;
    be->allocator.alloc = cuda_alloc;
    be->allocator.free = cuda_free;
    be->allocator.ctx = be;
    be->allocator.device = DITTO_DEVICE_CUDA;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->upload_async = cuda_upload_async;
    be->download_async = cuda_download_async;
    be->download_notify = cuda_download_notify;
    be->download_fence = cuda_download_fence;
    be->download_wait = cuda_download_wait;
    be->host_alloc = cuda_host_alloc;
    be->host_free = cuda_host_free;
    be->sync = cuda_sync;
    be->mem_info = cuda_mem_info;
    be->destroy = cuda_destroy;
    be->mark_new = cuda_mark_new;
    be->mark_record = cuda_mark_record;
    be->mark_wait = cuda_mark_wait;
    be->mark_elapsed = cuda_mark_elapsed;
    be->mark_free = cuda_mark_free;
    be->capture_begin = cuda_capture_begin;
    be->capture_end = cuda_capture_end;
    be->graph_launch = cuda_graph_launch;
    be->graph_free = cuda_graph_free;
    be->lane_select = cuda_lane_select;
    be->lane_wait = cuda_lane_wait;
    cu->device = p->device_index;
    int rc = 0;
    int prio_least = 0, prio_greatest = 0;
    if (p->high_priority && cudaDeviceGetStreamPriorityRange(&prio_least, &prio_greatest) != cudaSuccess)
        prio_greatest = 0;
    cu->stream_priority = p->high_priority ? prio_greatest : 0;
    cu->lanes[0].made = true;
    const cudaError_t se = cudaSetDevice(cu->device);
    if (se == cudaSuccess)
        set_sync_mode(&p->log);
    if (se != cudaSuccess ||
        cudaStreamCreateWithPriority(&cu->stream, cudaStreamNonBlocking, p->high_priority ? prio_greatest : 0) != cudaSuccess)
        rc = ditto_fail(&p->log, DITTO_ERR_BACKEND, "backend 'cuda': cannot create a stream on device %d", cu->device);
    else if (cudaStreamCreateWithFlags(&cu->copy_stream, cudaStreamNonBlocking) != cudaSuccess ||
             cudaEventCreateWithFlags(&cu->copy_after, cudaEventDisableTiming) != cudaSuccess ||
             cudaEventCreateWithFlags(&cu->copy_done, cudaEventDisableTiming) != cudaSuccess)
        rc = ditto_fail(&p->log, DITTO_ERR_BACKEND, "backend 'cuda': cannot create the copy stream on device %d", cu->device);
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
    ditto_cuda_init_onnx_ops(&be->ops);
    *out = be;
    return 0;
}
