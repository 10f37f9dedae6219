#include "core/thread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "core/mem.h"
#include "ditto/ditto_error.h"

struct DittoThreadPool {
    int nthreads;            /* workers + the caller */
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    unsigned long generation;
    int quit;
    /* current job */
    DittoTaskFn fn;
    void *ctx;
    int ntasks;
    atomic_int next;
    int active;              /* workers still in the job */
};

int ditto_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void drain(DittoThreadPool *p)
{
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->ntasks)
            break;
        p->fn(p->ctx, i);
    }
}

static void *worker(void *arg)
{
    DittoThreadPool *p = arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        drain(p);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int ditto_pool_create(DittoThreadPool **out, int nthreads)
{
    *out = NULL;
    if (nthreads <= 0)
        nthreads = ditto_cpu_count();
    DittoThreadPool *p = ditto_calloc(1, sizeof *p);
    if (!p)
        return DITTO_ERR_NOMEM;
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (nthreads > 1) {
        p->workers = ditto_calloc((size_t)nthreads - 1, sizeof *p->workers);
        if (!p->workers) {
            ditto_pool_destroy(&p);
            return DITTO_ERR_NOMEM;
        }
        for (int i = 0; i < nthreads - 1; i++) {
            if (pthread_create(&p->workers[i], NULL, worker, p)) {
                p->nthreads = i + 1;     /* destroy joins only the started ones */
                ditto_pool_destroy(&p);
                return DITTO_ERR_NOMEM;
            }
        }
    }
    *out = p;
    return 0;
}

void ditto_pool_destroy(DittoThreadPool **pp)
{
    DittoThreadPool *p = pp ? *pp : NULL;
    if (!p)
        return;
    if (p->workers) {
        pthread_mutex_lock(&p->mu);
        p->quit = 1;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->nthreads - 1; i++)
            pthread_join(p->workers[i], NULL);
        ditto_free(p->workers);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    ditto_free(p);
    *pp = NULL;
}

int ditto_pool_size(const DittoThreadPool *p)
{
    return p ? p->nthreads : 1;
}

void ditto_pool_run(DittoThreadPool *p, int ntasks, DittoTaskFn fn, void *ctx)
{
    if (ntasks <= 0)
        return;
    if (!p || p->nthreads <= 1 || ntasks == 1) {
        for (int i = 0; i < ntasks; i++)
            fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    atomic_store(&p->next, 0);
    p->active = p->nthreads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    drain(p);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
