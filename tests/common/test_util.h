/*
 * Test helpers shared by the op, unit and model tests.
 *
 * TT tensors: a host copy (float32 or the tensor's dtype) with guard words on
 * both sides, plus a view on the backend under test (same memory on the CPU,
 * a device buffer elsewhere). Cases fill the host copy, call tt_to_dev(), run
 * the op on ->dev, call tt_to_host(), and compare against a double-precision
 * reference. Guards are checked in tt_free() and by tt_check().
 */
#ifndef DITTO_TEST_UTIL_H
#define DITTO_TEST_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "core/tensor.h"

typedef struct TestCtx {
    DittoBackend *be;       /* backend under test */
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

/* Allocate; host data is poisoned with NaN (floats) / 0xA5 (others) so unwritten outputs show. */
TT *tt_new(TestCtx *c, DittoDType dtype, int ndim, const int64_t *shape);
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
/* Compare t (after tt_to_host) with ref at tol (rel_l2) and max_abs_over_max_ref tol_max; checks guards. */
bool test_check(TestCtx *c, const char *name, TT *t, const double *ref, double tol_rel_l2, double tol_max);
bool test_selected(const TestCtx *c, const char *name);

/* Standard main epilogue: prints "N passed, N failed" and returns the exit status. */
int test_summary(const TestCtx *c);
/* Parse -b BACKEND -o FILTER -v -s SEED; opens backends. Returns 0 or exit status. */
int test_init(TestCtx *c, int argc, char **argv);
void test_close(TestCtx *c);

/* Path of ../shared (fixtures, models, media) or NULL when absent. */
const char *test_shared_dir(void);

#endif
