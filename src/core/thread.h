/*
 * A small thread pool for the CPU backend: a blocking parallel-for.
 * ditto_pool_run(pool, n, fn, ctx) calls fn(ctx, i) for i in [0, n) spread
 * over the workers and the calling thread, and returns when all are done.
 * A NULL pool (or one thread) runs everything on the caller. Not reentrant:
 * fn must not call ditto_pool_run on the same pool.
 */
#ifndef DITTO_CORE_THREAD_H
#define DITTO_CORE_THREAD_H

typedef struct DittoThreadPool DittoThreadPool;

typedef void (*DittoTaskFn)(void *ctx, int task);

/* nthreads <= 0: the number of online CPUs. */
int ditto_pool_create(DittoThreadPool **out, int nthreads);
void ditto_pool_destroy(DittoThreadPool **pool);
int ditto_pool_size(const DittoThreadPool *pool);
void ditto_pool_run(DittoThreadPool *pool, int ntasks, DittoTaskFn fn, void *ctx);

int ditto_cpu_count(void);

#endif
