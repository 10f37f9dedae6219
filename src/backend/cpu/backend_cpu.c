#include <string.h>
#include <time.h>

#include "backend/cpu/cpu.h"
#include "core/log.h"
#include "core/mem.h"

static int cpu_memcpy(DittoBackend *be, void *dst, const void *src, size_t n)
{
    (void)be;
    memcpy(dst, src, n);
    return 0;
}

static int cpu_sync(DittoBackend *be)
{
    (void)be;
    return 0;
}

/* profiler marks: the monotonic clock (CPU ops are synchronous) */
static int cpu_mark_new(DittoBackend *be, void **mark)
{
    (void)be;
    *mark = ditto_calloc(1, sizeof(struct timespec));
    return *mark ? 0 : DITTO_ERR_NOMEM;
}

static void cpu_mark_record(DittoBackend *be, void *mark)
{
    (void)be;
    clock_gettime(CLOCK_MONOTONIC, (struct timespec *)mark);
}

static int cpu_mark_wait(DittoBackend *be, void *mark)
{
    (void)be;
    (void)mark;   /* CPU ops are done when they return */
    return 0;
}

static double cpu_mark_elapsed(DittoBackend *be, void *a, void *b)
{
    (void)be;
    const struct timespec *x = a, *y = b;
    return (double)(y->tv_sec - x->tv_sec) * 1e3 + (double)(y->tv_nsec - x->tv_nsec) * 1e-6;
}

static void cpu_mark_free(DittoBackend *be, void *mark)
{
    (void)be;
    ditto_free(mark);
}

/* The CPU's copies are done when download_async returns: notifications run at once, fences and waits have nothing to wait for. */
static int cpu_download_notify(DittoBackend *be, void (*fn)(void *arg), void *arg)
{
    (void)be;
    fn(arg);
    return 0;
}

static int cpu_download_nothing(DittoBackend *be)
{
    (void)be;
    return 0;
}

static void cpu_destroy(DittoBackend *be)
{
    ditto_pool_destroy(&be->pool);
    ditto_free(be);
}

int ditto_backend_cpu_open(DittoBackend **out, const DittoBackendParams *p)
{
    *out = NULL;
    if (p->fp16)
        return ditto_fail(&p->log, DITTO_ERR_UNSUPPORTED,
                          "cpu backend: fp16 storage is not supported (the CPU backend is the fp32 oracle; use --backend cuda for fp16)");
    DittoBackend *be = ditto_calloc(1, sizeof *be);
    if (!be)
        return DITTO_ERR_NOMEM;
    be->name = "cpu";
    be->device = DITTO_DEVICE_CPU;
    be->act_dtype = DITTO_F32;
    be->allocator = ditto_host_allocator;
    be->log = p->log;
    be->upload = cpu_memcpy;
    be->upload_async = cpu_memcpy;
    be->download = cpu_memcpy;
    be->download_async = cpu_memcpy;
    be->download_notify = cpu_download_notify;
    be->download_fence = cpu_download_nothing;
    be->download_wait = cpu_download_nothing;
    be->sync = cpu_sync;
    be->destroy = cpu_destroy;
    be->mark_new = cpu_mark_new;
    be->mark_record = cpu_mark_record;
    be->mark_wait = cpu_mark_wait;
    be->mark_elapsed = cpu_mark_elapsed;
    be->mark_free = cpu_mark_free;
    int rc = ditto_pool_create(&be->pool, p->nthreads);
    if (rc < 0) {
        ditto_free(be);
        return ditto_fail(&p->log, rc, "cpu backend: cannot start %d threads", p->nthreads);
    }
    ditto_cpu_init_elementwise(&be->ops);
    ditto_cpu_init_gemm(&be->ops);
    ditto_cpu_init_conv(&be->ops);
    ditto_cpu_init_norm(&be->ops);
    ditto_cpu_init_sample(&be->ops);
    ditto_cpu_init_attention(&be->ops);
    ditto_cpu_init_image(&be->ops);
    ditto_cpu_init_onnx_ops(&be->ops);
    *out = be;
    return 0;
}
