#include "test_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"

#define GUARD_WORDS 16
#define GUARD_BYTE 0x5c

TT *tt_new(TestCtx *c, DittoDType dtype, int ndim, const int64_t *shape)
{
    TT *t = calloc(1, sizeof *t);
    if (!t)
        abort();
    t->ctx = c;
    t->host = ditto_tensor(NULL, dtype, ndim, shape);
    size_t n = ditto_tensor_nbytes(&t->host);
    t->host_bytes = n;
    size_t g = GUARD_WORDS * 8;
    t->host_alloc = malloc(n + 2 * g + 8);
    if (!t->host_alloc)
        abort();
    memset(t->host_alloc, GUARD_BYTE, n + 2 * g + 8);
    t->host.data = (char *)t->host_alloc + g;
    if (dtype == DITTO_F32) {
        for (size_t i = 0; i < n / 4; i++)
            ((float *)t->host.data)[i] = NAN;
    } else {
        memset(t->host.data, 0xA5, n);
    }
    t->dev = t->host;
    if (c->be->device != DITTO_DEVICE_CPU) {
        if (ditto_buffer_alloc(&t->dev_buf, &c->be->allocator, n ? n : 1) < 0)
            abort();
        t->dev.data = t->dev_buf.ptr;
        t->dev.device = c->be->device;
    }
    return t;
}

bool tt_guards_ok(const TT *t)
{
    const unsigned char *p = t->host_alloc;
    size_t g = GUARD_WORDS * 8;
    for (size_t i = 0; i < g; i++)
        if (p[i] != GUARD_BYTE || p[g + t->host_bytes + i] != GUARD_BYTE)
            return false;
    return true;
}

void tt_free(TT *t)
{
    if (!t)
        return;
    if (!tt_guards_ok(t)) {
        fprintf(stderr, "FAIL guard bytes around a test tensor were overwritten\n");
        t->ctx->failed++;
    }
    ditto_buffer_free(&t->dev_buf);
    free(t->host_alloc);
    free(t);
}

float *tt_f32(TT *t)
{
    return (float *)t->host.data;
}

void tt_fill_uniform(TT *t, float lo, float hi)
{
    size_t n = (size_t)ditto_tensor_numel(&t->host);
    uint64_t stream = t->ctx->draws++;
    for (size_t i = 0; i < n; i++) {
        float u = ditto_rng_uniform(t->ctx->seed, stream, i);
        if (t->host.dtype == DITTO_F32)
            ((float *)t->host.data)[i] = lo + (hi - lo) * u;
        else if (t->host.dtype == DITTO_U8)
            ((uint8_t *)t->host.data)[i] = (uint8_t)(u * 256.0f);
        else
            abort();
    }
}

void tt_fill_normal(TT *t, float mean, float std)
{
    size_t n = (size_t)ditto_tensor_numel(&t->host);
    if (t->host.dtype != DITTO_F32)
        abort();
    ditto_rng_fill_normal(t->ctx->seed, t->ctx->draws++, 0, t->host.data, n);
    for (size_t i = 0; i < n; i++)
        ((float *)t->host.data)[i] = mean + std * ((float *)t->host.data)[i];
}

int tt_to_dev(TT *t)
{
    if (t->ctx->be->device == DITTO_DEVICE_CPU)
        return 0;
    return t->ctx->be->upload(t->ctx->be, t->dev.data, t->host.data, t->host_bytes);
}

int tt_to_host(TT *t)
{
    if (t->ctx->be->device == DITTO_DEVICE_CPU)
        return 0;
    int rc = t->ctx->be->sync(t->ctx->be);
    if (rc < 0)
        return rc;
    return t->ctx->be->download(t->ctx->be, t->host.data, t->dev.data, t->host_bytes);
}

TestErr test_compare(const float *out, const double *ref, size_t n)
{
    TestErr e = { 0, 0, 0, 0 };
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double o = out[i], r = ref[i];
        if (!isfinite(o)) {
            if (!(isnan(r) && isnan(o)) && !(isinf(r) && o == r))
                e.nonfinite++;
            continue;
        }
        double d = fabs(o - r);
        num += d * d;
        den += r * r;
        if (d > e.max_abs)
            e.max_abs = d;
        if (fabs(r) > e.max_ref)
            e.max_ref = fabs(r);
    }
    e.rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    return e;
}

bool test_selected(const TestCtx *c, const char *name)
{
    return !c->filter || strstr(name, c->filter);
}

bool test_report(TestCtx *c, const char *name, bool ok, const char *fmt, ...)
{
    if (ok)
        c->passed++;
    else
        c->failed++;
    if (!ok || c->verbose) {
        printf("%s %-48s ", ok ? "PASS" : "FAIL", name);
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    return ok;
}

bool test_check(TestCtx *c, const char *name, TT *t, const double *ref, double tol, double tol_max)
{
    if (tt_to_host(t) < 0)
        return test_report(c, name, false, "download failed");
    size_t n = (size_t)ditto_tensor_numel(&t->host);
    TestErr e = test_compare(tt_f32(t), ref, n);
    double rmax = e.max_ref > 0 ? e.max_abs / e.max_ref : e.max_abs;
    bool guards = tt_guards_ok(t);
    bool ok = e.nonfinite == 0 && e.rel_l2 <= tol && rmax <= tol_max && guards;
    return test_report(c, name, ok, "rel_l2 %.3g (tol %.1g) max_abs/max_ref %.3g (tol %.1g)%s%s", e.rel_l2, tol, rmax, tol_max,
                       e.nonfinite ? " NON-FINITE" : "", guards ? "" : " GUARDS-OVERWRITTEN");
}

int test_summary(const TestCtx *c)
{
    printf("%d passed, %d failed\n", c->passed, c->failed);
    return c->failed ? 1 : 0;
}

int test_init(TestCtx *c, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->seed = 20261129;
    const char *backend = "cpu";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-b") && i + 1 < argc)
            backend = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc)
            c->filter = argv[++i];
        else if (!strcmp(argv[i], "-s") && i + 1 < argc)
            c->seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-v"))
            c->verbose = 1;
        else {
            fprintf(stderr, "usage: %s [-b cpu|cuda] [-o NAME-FILTER] [-s SEED] [-v]\n", argv[0]);
            return 2;
        }
    }
    DittoBackendParams bp;
    ditto_backend_params_default(&bp);
    bp.log = ditto_logger_stderr(DITTO_LOG_WARN);
    if (ditto_backend_open(&c->cpu, "cpu", &bp) < 0)
        return 1;
    if (!strcmp(backend, "cpu")) {
        c->be = c->cpu;
    } else if (ditto_backend_open(&c->be, backend, &bp) < 0) {
        return 1;
    }
    return 0;
}

void test_close(TestCtx *c)
{
    if (c->be != c->cpu)
        ditto_backend_close(&c->be);
    ditto_backend_close(&c->cpu);
}

const char *test_shared_dir(void)
{
    static char buf[4096];
    const char *env = getenv("DITTO_SHARED");
    const char *cands[] = { env, DITTO_SOURCE_DIR "/../shared", DITTO_SOURCE_DIR "/shared" };
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        struct stat st;
        if (cands[i] && !stat(cands[i], &st) && S_ISDIR(st.st_mode)) {
            snprintf(buf, sizeof buf, "%s", cands[i]);
            return buf;
        }
    }
    return NULL;
}
