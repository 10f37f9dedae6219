/*
 * Test helpers shared by the op, unit and model tests.
 *
 * TT tensors: a host copy (float32 or the tensor's dtype) with guard words on
 * both sides, plus a view on the backend under test (same memory on the CPU,
 * a device buffer elsewhere). Cases fill the host copy, call tt_to_dev(), run
 * the op on ->dev, call tt_to_host(), and compare against a double-precision
 * reference. Guards are checked in tt_free() and by tt_check().
 *
 * fp16 storage mode (-p f16, GPU backends, programs that opt in through
 * test_init_opts): tt_new() of a float32 tensor gives it a float16 device
 * copy. tt_to_dev() rounds the host values to float16 (nearest even, in
 * place, so a reference computed from the host data sees exactly the device
 * inputs) and uploads them; tt_to_host() converts the float16 result back to
 * float32. test_check() then raises its tolerances to the fp16 floor
 * TEST_FP16_REL_L2 / TEST_FP16_MAX: one float16 rounding of an output is up
 * to 2^-11 = 4.9e-4 relative, and ops that store float16 intermediates
 * (cuDNN/cuBLAS tensor-op paths, fp32 accumulation) add a few of those, so
 * rel_l2 3e-3 and max_abs/max_ref 1e-2 leave a margin of several roundings
 * while still catching wrong indexing or a dropped term. Tolerances below
 * the floor are raised to it; larger ones are kept. Tensors whose dtype is
 * part of the contract (sampling grids, rotary frequencies, exact casts)
 * use tt_new_f32dev(); families that make no sense in float16 (u8/f32 image
 * ops, the ONNX ops) run with the mode suspended (test_fp16_suspend).
 */
#ifndef DITTO_TEST_UTIL_H
#define DITTO_TEST_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "core/log.h"
#include "core/tensor.h"

/* fp16 storage mode tolerance floor (see above). */
#define TEST_FP16_REL_L2 3e-3
#define TEST_FP16_MAX 1e-2

typedef struct TestCtx {
    DittoBackend *be;       /* backend under test */
    bool fp16;              /* -p f16: float32 test tensors live as float16 on the device */
    int fp16_suspended;     /* > 0: fp16 mode paused (test_fp16_suspend) */
    DittoBackend *cpu;      /* the oracle backend (== be when testing the CPU) */
    const char *filter;     /* run only cases whose name contains this (NULL: all) */
    int verbose;
    int passed, failed, skipped;
    uint64_t seed;
    unsigned long draws;    /* distinct random stream per fill */
} TestCtx;

typedef struct TT {
    DittoTensor host;       /* contiguous host view (guarded) */
    DittoTensor dev;        /* view on the backend under test */
    void *host_alloc;       /* allocation including guards */
    size_t host_bytes;
    DittoBuffer dev_buf;    /* device allocation (non-CPU backends) */
    TestCtx *ctx;
} TT;

/*
 * Allocate; host data is poisoned with NaN (floats) / 0xA5 (others) so unwritten outputs show.
 * In fp16 mode a float32 tensor's device copy is float16 (t->dev.dtype); tt_new_f32dev keeps it float32.
 */
TT *tt_new(TestCtx *c, DittoDType dtype, int ndim, const int64_t *shape);
TT *tt_new_f32dev(TestCtx *c, int ndim, const int64_t *shape);
TT *tt_new_f16dev(TestCtx *c, int ndim, const int64_t *shape);   /* float16 device copy off the CPU (in any mode) */
void tt_free(TT *t);
float *tt_f32(TT *t);                          /* host data as float (dtype must be f32) */
void tt_fill_uniform(TT *t, float lo, float hi);   /* f32: uniform; u8: 0..255 */
void tt_fill_normal(TT *t, float mean, float std);
int tt_to_dev(TT *t);
int tt_to_host(TT *t);
bool tt_guards_ok(const TT *t);

/* Compare host float data against a double reference: NaN/Inf check, rel_l2, max_abs/max_ref. */
typedef struct TestErr {
    double rel_l2, max_abs, max_ref;
    long long nonfinite;
} TestErr;
TestErr test_compare(const float *out, const double *ref, size_t n);

/* Record a result; prints "PASS|FAIL name ..." and returns ok. */
bool test_report(TestCtx *c, const char *name, bool ok, const char *fmt, ...);
/*
 * Compare t (after tt_to_host) with ref at tol (rel_l2) and max_abs_over_max_ref tol_max; checks guards.
 * In fp16 mode the tolerances are at least TEST_FP16_REL_L2 / TEST_FP16_MAX.
 */
bool test_check(TestCtx *c, const char *name, TT *t, const double *ref, double tol_rel_l2, double tol_max);
bool test_selected(const TestCtx *c, const char *name);

/* Standard main epilogue: prints "N passed, N failed" and returns the exit status. */
int test_summary(const TestCtx *c);
/* Parse -b BACKEND -o FILTER -v -s SEED; opens backends. Returns 0 or exit status. */
int test_init(TestCtx *c, int argc, char **argv);
/* test_init; with TEST_ALLOW_FP16 also -p f32|f16 (fp16 storage mode, GPU backends only). */
#define TEST_ALLOW_FP16 1u
int test_init_opts(TestCtx *c, int argc, char **argv, unsigned flags);
/* fp16 storage mode in effect (requested and not suspended). */
bool test_fp16(const TestCtx *c);
/* Pause / resume fp16 storage mode (nestable) for tests whose dtypes are part of the contract. */
void test_fp16_suspend(TestCtx *c);
void test_fp16_resume(TestCtx *c);
void test_close(TestCtx *c);

/* Path of ../shared (fixtures, models, media) or NULL when absent. */
const char *test_shared_dir(void);

/* Log capture for checks that an error is exactly one line naming the file. */
typedef struct TestLogCapture {
    int errors, lines;     /* error lines, all lines */
    char first[1024];      /* the first line */
} TestLogCapture;
/* Zero *lc and return a logger (all levels) that counts into it. */
DittoLogger test_log_capture(TestLogCapture *lc);

/* Growable byte buffer for the file writers of the reader tests; zero-initialize. */
typedef struct TestBuf {
    uint8_t *p;
    size_t n, cap;
} TestBuf;
/* Append n bytes (aborts when out of memory). */
void test_buf_put(TestBuf *b, const void *d, size_t n);
void test_buf_put8(TestBuf *b, unsigned v);
/* Free and zero *b. */
void test_buf_free(TestBuf *b);

#endif
