#include "op_util.h"

#include <stdlib.h>

#include "ditto/ditto_error.h"

View view_of(TT *t)
{
    View v = { t->host, t->dev };
    return v;
}

View view_permute(View v, const int *perm)
{
    View r;
    ditto_tensor_permute(&v.h, perm, &r.h);
    ditto_tensor_permute(&v.d, perm, &r.d);
    return r;
}

View view_slice(View v, int axis, int64_t start, int64_t end, int64_t step)
{
    View r;
    ditto_tensor_slice(&v.h, axis, start, end, step, &r.h);
    ditto_tensor_slice(&v.d, axis, start, end, step, &r.d);
    return r;
}

View view_select(View v, int axis, int64_t i)
{
    View r;
    ditto_tensor_select(&v.h, axis, i, &r.h);
    ditto_tensor_select(&v.d, axis, i, &r.d);
    return r;
}

View view_reshape(View v, int ndim, const int64_t *shape)
{
    View r;
    ditto_tensor_reshape(&v.h, ndim, shape, &r.h);
    ditto_tensor_reshape(&v.d, ndim, shape, &r.d);
    return r;
}

TT *new_rand(TestCtx *c, int ndim, const int64_t *shape, float lo, float hi)
{
    TT *t = tt_new(c, DITTO_F32, ndim, shape);
    tt_fill_uniform(t, lo, hi);
    tt_to_dev(t);
    return t;
}

TT *new_normal(TestCtx *c, int ndim, const int64_t *shape)
{
    TT *t = tt_new(c, DITTO_F32, ndim, shape);
    tt_fill_normal(t, 0, 1);
    tt_to_dev(t);
    return t;
}

TT *new_out(TestCtx *c, DittoDType dt, int ndim, const int64_t *shape)
{
    TT *t = tt_new(c, dt, ndim, shape);
    tt_to_dev(t);
    return t;
}

bool op_next_idx(int64_t *idx, const int64_t *shape, int ndim)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d])
            return true;
        idx[d] = 0;
    }
    return false;
}

double op_at_bcast(const DittoTensor *x, const int64_t *idx, int nd)
{
    int64_t off = 0;
    for (int i = 0; i < x->ndim; i++) {
        int64_t j = idx[nd - x->ndim + i];
        off += (x->shape[i] == 1 ? 0 : j) * x->stride[i];
    }
    return ((const float *)x->data)[off];
}

double *ref_alloc(int64_t n)
{
    double *r = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!r)
        abort();
    return r;
}

double *ref_new(const TT *t)
{
    return ref_alloc(ditto_tensor_numel(&t->host));
}

bool expect_rc(TestCtx *c, const char *name, int rc, int want)
{
    return test_report(c, name, rc == want, "rc %d (%s), expected %d (%s)", rc, ditto_strerror(rc), want, ditto_strerror(want));
}

bool op_ok(TestCtx *c, const char *name, int rc)
{
    if (rc < 0)
        return test_report(c, name, false, "op returned %d (%s)", rc, ditto_strerror(rc));
    return true;
}

bool op_check(TestCtx *c, const char *name, int rc, TT *y, const double *ref, double tol, double tol_max)
{
    return op_ok(c, name, rc) && test_check(c, name, y, ref, tol, tol_max);
}
