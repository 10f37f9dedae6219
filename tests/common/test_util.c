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

bool test_fp16(const TestCtx *c)
{
    return c->fp16 && c->fp16_suspended == 0;
}

void test_fp16_suspend(TestCtx *c)
{
    c->fp16_suspended++;
}

void test_fp16_resume(TestCtx *c)
{
    if (c->fp16_suspended > 0)
        c->fp16_suspended--;
}

static TT *new_tt(TestCtx *c, DittoDType dtype, DittoDType dev_dtype, int ndim, const int64_t *shape)
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
        t->dev.dtype = dev_dtype;   /* same element strides: a float16 copy is half the bytes */
        size_t dn = ditto_tensor_nbytes(&t->dev);
        if (ditto_buffer_alloc(&t->dev_buf, &c->be->allocator, dn ? dn : 1) < 0)
            abort();
        t->dev.data = t->dev_buf.ptr;
        t->dev.device = c->be->device;
    }
    return t;
}

TT *tt_new(TestCtx *c, DittoDType dtype, int ndim, const int64_t *shape)
{
    bool half = dtype == DITTO_F32 && test_fp16(c) && c->be->device != DITTO_DEVICE_CPU;
    return new_tt(c, dtype, half ? DITTO_F16 : dtype, ndim, shape);
}

TT *tt_new_f32dev(TestCtx *c, int ndim, const int64_t *shape)
{
    return new_tt(c, DITTO_F32, DITTO_F32, ndim, shape);
}

TT *tt_new_f16dev(TestCtx *c, int ndim, const int64_t *shape)
{
    return new_tt(c, DITTO_F32, c->be->device != DITTO_DEVICE_CPU ? DITTO_F16 : DITTO_F32, ndim, shape);
}

/* Device copy in another dtype than the host (fp16 mode): bytes of the device copy. */
static size_t dev_bytes(const TT *t)
{
    return ditto_tensor_nbytes(&t->dev);
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
    DittoBackend *be = t->ctx->be;
    if (be->device == DITTO_DEVICE_CPU)
        return 0;
    if (t->dev.dtype == t->host.dtype)
        return be->upload(be, t->dev.data, t->host.data, t->host_bytes);
    /* fp16 mode: round the host values to the device dtype (in place), upload the converted copy */
    size_t n = (size_t)ditto_tensor_numel(&t->host), bytes = dev_bytes(t);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp)
        abort();
    ditto_convert(tmp, t->dev.dtype, t->host.data, t->host.dtype, n);
    ditto_convert(t->host.data, t->host.dtype, tmp, t->dev.dtype, n);
    int rc = be->upload(be, t->dev.data, tmp, bytes);
    free(tmp);
    return rc;
}

int tt_to_host(TT *t)
{
    DittoBackend *be = t->ctx->be;
    if (be->device == DITTO_DEVICE_CPU)
        return 0;
    int rc = be->sync(be);
    if (rc < 0)
        return rc;
    if (t->dev.dtype == t->host.dtype)
        return be->download(be, t->host.data, t->dev.data, t->host_bytes);
    size_t n = (size_t)ditto_tensor_numel(&t->host), bytes = dev_bytes(t);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp)
        abort();
    rc = be->download(be, tmp, t->dev.data, bytes);
    if (rc >= 0)
        ditto_convert(t->host.data, t->host.dtype, tmp, t->dev.dtype, n);
    free(tmp);
    return rc;
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
    bool fp16_floor = test_fp16(c);
    if (fp16_floor) {
        tol = tol > TEST_FP16_REL_L2 ? tol : TEST_FP16_REL_L2;
        tol_max = tol_max > TEST_FP16_MAX ? tol_max : TEST_FP16_MAX;
    }
    bool ok = e.nonfinite == 0 && e.rel_l2 <= tol && rmax <= tol_max && guards;
    return test_report(c, name, ok, "rel_l2 %.3g (tol %.1g) max_abs/max_ref %.3g (tol %.1g)%s%s%s", e.rel_l2, tol, rmax, tol_max,
                       fp16_floor ? " [fp16 floor]" : "", e.nonfinite ? " NON-FINITE" : "", guards ? "" : " GUARDS-OVERWRITTEN");
}

int test_summary(const TestCtx *c)
{
    printf("%d passed, %d failed\n", c->passed, c->failed);
    return c->failed ? 1 : 0;
}

int test_init(TestCtx *c, int argc, char **argv)
{
    return test_init_opts(c, argc, argv, 0);
}

int test_init_opts(TestCtx *c, int argc, char **argv, unsigned flags)
{
    memset(c, 0, sizeof *c);
    c->seed = 20261129;
    const char *backend = "cpu";
    bool allow_fp16 = flags & TEST_ALLOW_FP16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-b") && i + 1 < argc)
            backend = argv[++i];
        else if (allow_fp16 && !strcmp(argv[i], "-p") && i + 1 < argc && (!strcmp(argv[i + 1], "f16") || !strcmp(argv[i + 1], "f32")))
            c->fp16 = !strcmp(argv[++i], "f16");
        else if (!strcmp(argv[i], "-o") && i + 1 < argc)
            c->filter = argv[++i];
        else if (!strcmp(argv[i], "-s") && i + 1 < argc)
            c->seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-v"))
            c->verbose = 1;
        else {
            fprintf(stderr, "usage: %s [-b cpu|cuda]%s [-o NAME-FILTER] [-s SEED] [-v]\n", argv[0], allow_fp16 ? " [-p f32|f16]" : "");
            return 2;
        }
    }
    if (c->fp16 && !strcmp(backend, "cpu")) {
        fprintf(stderr, "%s: -p f16 (float16 device storage) needs a GPU backend (-b cuda); the CPU backend is the fp32 oracle\n", argv[0]);
        return 2;
    }
    DittoBackendParams bp;
    ditto_backend_params_default(&bp);
    bp.log = ditto_logger_stderr(DITTO_LOG_WARN);
    if (ditto_backend_open(&c->cpu, "cpu", &bp) < 0)
        return 1;
    if (!strcmp(backend, "cpu")) {
        c->be = c->cpu;
    } else {
        bp.fp16 = c->fp16;   /* the backend under test only; the oracle stays fp32 */
        if (ditto_backend_open(&c->be, backend, &bp) < 0)
            return 1;
    }
    if (c->fp16)
        printf("fp16 storage mode: float32 test tensors are float16 on the %s device; tolerance floor rel_l2 %g, max_abs/max_ref %g\n",
               c->be->name, TEST_FP16_REL_L2, TEST_FP16_MAX);
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

/* ---- log capture, byte buffers ---- */

static void log_capture_cb(void *cookie, DittoLogLevel level, const char *msg)
{
    TestLogCapture *lc = cookie;
    if (!lc->lines++)
        snprintf(lc->first, sizeof lc->first, "%s", msg);
    if (level == DITTO_LOG_ERROR)
        lc->errors++;
}

DittoLogger test_log_capture(TestLogCapture *lc)
{
    memset(lc, 0, sizeof *lc);
    DittoLogger lg = { log_capture_cb, lc, DITTO_LOG_DEBUG };
    return lg;
}

void test_buf_put(TestBuf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, d, n);
    b->n += n;
}

void test_buf_put8(TestBuf *b, unsigned v)
{
    uint8_t x = (uint8_t)v;
    test_buf_put(b, &x, 1);
}

void test_buf_free(TestBuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}
