#include "core/tensor.h"

#include <stdio.h>
#include <string.h>

#include "ditto/ditto_error.h"

DittoTensor ditto_tensor(void *data, DittoDType dtype, int ndim, const int64_t *shape)
{
    DittoTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t.shape[i] = shape[i];
    ditto_tensor_set_contiguous(&t);
    return t;
}

DittoTensor ditto_tensor_f32(float *data, int ndim, const int64_t *shape)
{
    return ditto_tensor(data, DITTO_F32, ndim, shape);
}

void ditto_tensor_set_contiguous(DittoTensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->stride[i] = s;
        s *= t->shape[i];
    }
}

int64_t ditto_tensor_numel(const DittoTensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t ditto_tensor_nbytes(const DittoTensor *t)
{
    return (size_t)ditto_tensor_numel(t) * ditto_dtype_size(t->dtype);
}

bool ditto_tensor_is_contiguous(const DittoTensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return false;
        s *= t->shape[i];
    }
    return true;
}

/* The strides of (d0, d1, d2, ..., dn) stored as a contiguous (d0, d2, ..., dn, d1). */
static void channels_last_strides(const DittoTensor *t, int64_t *st)
{
    int64_t s = t->shape[1];
    for (int i = t->ndim - 1; i >= 2; i--) {
        st[i] = s;
        s *= t->shape[i];
    }
    st[1] = 1;
    st[0] = s;
}

bool ditto_tensor_is_channels_last(const DittoTensor *t)
{
    if (t->ndim < 3 || t->ndim > DITTO_MAX_DIMS)
        return false;
    int64_t st[DITTO_MAX_DIMS];
    channels_last_strides(t, st);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != 1 && t->stride[i] != st[i])
            return false;
    return true;
}

void ditto_tensor_set_channels_last(DittoTensor *t)
{
    if (t->ndim >= 3 && t->ndim <= DITTO_MAX_DIMS)
        channels_last_strides(t, t->stride);
}

bool ditto_tensor_same_shape(const DittoTensor *a, const DittoTensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

int ditto_tensor_reshape(const DittoTensor *t, int ndim, const int64_t *shape, DittoTensor *out)
{
    if (ndim < 0 || ndim > DITTO_MAX_DIMS || !ditto_tensor_is_contiguous(t))
        return DITTO_ERR_SHAPE;
    int64_t n = ditto_tensor_numel(t), known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0)
                return DITTO_ERR_SHAPE;
            infer = i;
        } else if (shape[i] < 0) {
            return DITTO_ERR_SHAPE;
        } else {
            known *= shape[i];
        }
    }
    DittoTensor r = *t;
    r.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        r.shape[i] = shape[i];
    if (infer >= 0) {
        if (known == 0 || n % known)
            return DITTO_ERR_SHAPE;
        r.shape[infer] = n / known;
    } else if (known != n) {
        return DITTO_ERR_SHAPE;
    }
    ditto_tensor_set_contiguous(&r);
    *out = r;
    return 0;
}

int ditto_tensor_permute(const DittoTensor *t, const int *perm, DittoTensor *out)
{
    DittoTensor r = *t;
    unsigned seen = 0;
    for (int i = 0; i < t->ndim; i++) {
        int p = perm[i];
        if (p < 0 || p >= t->ndim || (seen & (1u << p)))
            return DITTO_ERR_INVAL;
        seen |= 1u << p;
        r.shape[i] = t->shape[p];
        r.stride[i] = t->stride[p];
    }
    *out = r;
    return 0;
}

int ditto_tensor_slice(const DittoTensor *t, int axis, int64_t start, int64_t end, int64_t step, DittoTensor *out)
{
    if (axis < 0)
        axis += t->ndim;
    if (axis < 0 || axis >= t->ndim || step <= 0)
        return DITTO_ERR_INVAL;
    int64_t n = t->shape[axis];
    if (start < 0) start += n;
    if (end < 0) end += n;
    if (start < 0) start = 0;
    if (end > n) end = n;
    if (start > n) start = n;
    DittoTensor r = *t;
    r.shape[axis] = end > start ? (end - start + step - 1) / step : 0;
    r.stride[axis] = t->stride[axis] * step;
    r.data = (char *)t->data + (size_t)(start * t->stride[axis]) * ditto_dtype_size(t->dtype);
    *out = r;
    return 0;
}

int ditto_tensor_select(const DittoTensor *t, int axis, int64_t i, DittoTensor *out)
{
    if (axis < 0)
        axis += t->ndim;
    if (axis < 0 || axis >= t->ndim || i < 0 || i >= t->shape[axis])
        return DITTO_ERR_INVAL;
    DittoTensor r = *t;
    r.data = (char *)t->data + (size_t)(i * t->stride[axis]) * ditto_dtype_size(t->dtype);
    for (int k = axis; k < t->ndim - 1; k++) {
        r.shape[k] = t->shape[k + 1];
        r.stride[k] = t->stride[k + 1];
    }
    r.ndim = t->ndim - 1;
    *out = r;
    return 0;
}

char *ditto_shape_str(const int64_t *shape, int ndim, char *buf, size_t n)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, ")");
    return buf;
}

bool ditto_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

bool ditto_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}
