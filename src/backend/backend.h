/*
 * Backends: a struct of function pointers (memory + the op table). The CPU
 * backend fills every op; the CUDA backend fills what it implements. Model
 * code talks to a backend only through this struct.
 */
#ifndef DITTO_BACKEND_BACKEND_H
#define DITTO_BACKEND_BACKEND_H

#include <stddef.h>

#include "core/buffer.h"
#include "core/thread.h"
#include "ditto/ditto_types.h"
#include "ops/ops.h"

typedef struct DittoBackendParams {
    int nthreads;          /* CPU worker threads; <= 0: all cores */
    int device_index;      /* CUDA device */
    DittoLogger log;
} DittoBackendParams;

void ditto_backend_params_default(DittoBackendParams *p);

typedef struct DittoBackend {
    const char *name;      /* "cpu", "cuda" */
    DittoDevice device;
    DittoAllocator allocator;
    DittoOps ops;
    DittoLogger log;
    DittoThreadPool *pool; /* CPU work (also host-side work of other backends) */
    int bad_state;         /* sticky after a fatal device error */
    /* host <-> device transfers; on the CPU these are memcpy */
    int (*upload)(struct DittoBackend *be, void *dst, const void *src, size_t n);
    int (*download)(struct DittoBackend *be, void *dst, const void *src, size_t n);
    int (*sync)(struct DittoBackend *be);
    void (*destroy)(struct DittoBackend *be);
    void *priv;
} DittoBackend;

/* name: "cpu" or "cuda". DITTO_ERR_UNSUPPORTED when not built in. */
int ditto_backend_open(DittoBackend **out, const char *name, const DittoBackendParams *p);
void ditto_backend_close(DittoBackend **be);

int ditto_backend_cpu_open(DittoBackend **out, const DittoBackendParams *p);
#ifdef DITTO_HAVE_CUDA
int ditto_backend_cuda_open(DittoBackend **out, const DittoBackendParams *p);
#endif

#endif
