/*
 * Helpers shared by the op test families (cases_*.c): paired host/backend
 * views, test tensors, reference buffers and the usual result checks.
 */
#ifndef DITTO_TEST_OP_UTIL_H
#define DITTO_TEST_OP_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "test_util.h"

/* A host view and the matching view on the backend under test. */
typedef struct View {
    DittoTensor h, d;
} View;

View view_of(TT *t);
View view_permute(View v, const int *perm);
View view_slice(View v, int axis, int64_t start, int64_t end, int64_t step);
View view_select(View v, int axis, int64_t i);
View view_reshape(View v, int ndim, const int64_t *shape);

/* float32 input on the backend: uniform in [lo, hi) / standard normal. */
TT *new_rand(TestCtx *c, int ndim, const int64_t *shape, float lo, float hi);
TT *new_normal(TestCtx *c, int ndim, const int64_t *shape);
/* Output on the backend, holding the NaN / 0xA5 poison of tt_new (uploaded). */
TT *new_out(TestCtx *c, DittoDType dt, int ndim, const int64_t *shape);

/* Reference buffer of n doubles / of t's element count (never NULL; free). */
/* Row-major successor of idx in a shape of ndim dims; false after the last index. */
bool op_next_idx(int64_t *idx, const int64_t *shape, int ndim);
/* Element of host float32 x (rank <= nd, NumPy broadcasting) at index idx of an nd-rank shape. */
double op_at_bcast(const DittoTensor *x, const int64_t *idx, int nd);

double *ref_alloc(int64_t n);
double *ref_new(const TT *t);

/* Report name as "rc R (text), expected W (text)" when rc != want; returns rc == want. */
bool expect_rc(TestCtx *c, const char *name, int rc, int want);
/* true when rc >= 0, else reports a failure of name. */
bool op_ok(TestCtx *c, const char *name, int rc);
/* An op's result: a failure of name when rc < 0, else test_check(y, ref, tol, tol_max). */
bool op_check(TestCtx *c, const char *name, int rc, TT *y, const double *ref, double tol, double tol_max);

#endif
