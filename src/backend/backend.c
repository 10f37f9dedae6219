#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/profile.h"
#include "core/log.h"

void ditto_backend_params_default(DittoBackendParams *p)
{
    memset(p, 0, sizeof *p);
    p->log.level = DITTO_LOG_WARN;
}

int ditto_backend_open(DittoBackend **out, const char *name, const DittoBackendParams *p)
{
    *out = NULL;
    if (!strcmp(name, "cpu"))
        return ditto_backend_cpu_open(out, p);
    if (!strcmp(name, "cuda")) {
#ifdef DITTO_HAVE_CUDA
        return ditto_backend_cuda_open(out, p);
#else
        return ditto_fail(&p->log, DITTO_ERR_UNSUPPORTED, "backend 'cuda': this build has no CUDA support (configure with -DDITTO_CUDA=ON)");
#endif
    }
    return ditto_fail(&p->log, DITTO_ERR_INVAL, "unknown backend '%s' (expected cpu or cuda)", name);
}

void ditto_backend_close(DittoBackend **be)
{
    if (be && *be) {
        ditto_profile_free(*be);
        (*be)->destroy(*be);
        *be = NULL;
    }
}

int ditto_backend_halves(DittoBackend *be, int64_t n, DittoArena *const ws[2], DittoHalfFn fn, void *ctx)
{
    if (n < 2)
        return fn(ctx, 0, n, ws[0]);
    const int64_t h = (n + 1) / 2;
    const bool lanes = be->lane_select && be->lane_wait;
    int rc = lanes ? be->lane_wait(be, 1, 0) : 0;
    if (rc < 0)
        return rc;
    rc = fn(ctx, 0, h, ws[0]);
    if (rc >= 0 && lanes)
        rc = be->lane_select(be, 1);
    if (rc >= 0)
        rc = fn(ctx, h, n - h, ws[1]);
    if (lanes) {   /* back on lane 0 and joined, also after an error (a capture must end there) */
        int rc2 = be->lane_select(be, 0);
        if (rc2 >= 0)
            rc2 = be->lane_wait(be, 0, 1);
        if (rc >= 0)
            rc = rc2;
    }
    return rc;
}

int ditto_backend_lanes(const DittoBackend *be)
{
    const char *e = getenv("DITTO_LANES");
    return e && !strcmp(e, "1") ? 1 : e && !strcmp(e, "2") ? 2 : be->lane_select ? 2 : 1;
}

int ditto_marks_init(DittoBackend *be, DittoMarks *k, int n)
{
    memset(k, 0, sizeof *k);
    if (n < 1 || n > DITTO_MARKS_MAX)
        return DITTO_ERR_INVAL;
    k->n = n;
    for (int i = 0; i < n && be->mark_new; i++) {
        int rc = be->mark_new(be, &k->m[i]);
        if (rc < 0) {
            ditto_marks_free(be, k);
            return rc;
        }
    }
    return 0;
}

void ditto_marks_free(DittoBackend *be, DittoMarks *k)
{
    for (int i = 0; i < k->n; i++)
        if (k->m[i])
            be->mark_free(be, k->m[i]);
    memset(k, 0, sizeof *k);
}

int ditto_marks_record(DittoBackend *be, DittoMarks *k, int i)
{
    if (k->m[i]) {
        be->mark_record(be, k->m[i]);
        return 0;
    }
    int rc = be->sync(be);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    k->host[i] = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return rc;
}

int ditto_marks_wait(DittoBackend *be, const DittoMarks *k, int i)
{
    return k->m[i] ? be->mark_wait(be, k->m[i]) : 0;   /* without marks the boundary waited already */
}

double ditto_marks_seconds(DittoBackend *be, const DittoMarks *k, int a, int b)
{
    return k->m[a] ? 1e-3 * be->mark_elapsed(be, k->m[a], k->m[b]) : k->host[b] - k->host[a];
}

