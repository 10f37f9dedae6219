/*
 * Tensor views: a pointer, a dtype, a device tag and up to 6 dimensions with
 * element strides. A view never owns memory; buffers and arenas do.
 */
#ifndef DITTO_CORE_TENSOR_H
#define DITTO_CORE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

#define DITTO_MAX_DIMS 6

typedef enum DittoDevice {
    DITTO_DEVICE_CPU = 0,
    DITTO_DEVICE_CUDA = 1,
} DittoDevice;

typedef struct DittoTensor {
    void *data;                      /* address of element (0,...,0) */
    DittoDType dtype;
    DittoDevice device;
    int ndim;                        /* 0 = scalar (one element) */
    int64_t shape[DITTO_MAX_DIMS];
    int64_t stride[DITTO_MAX_DIMS];  /* in elements, may be 0 (broadcast) */
} DittoTensor;

/* Contiguous (row-major) view of data with the given shape. */
DittoTensor ditto_tensor(void *data, DittoDType dtype, int ndim, const int64_t *shape);
/* Shorthand for CPU float32 views: ditto_tensor_f32(p, 3, (int64_t[]){2,3,4}). */
DittoTensor ditto_tensor_f32(float *data, int ndim, const int64_t *shape);

int64_t ditto_tensor_numel(const DittoTensor *t);
size_t ditto_tensor_nbytes(const DittoTensor *t);   /* numel * dtype size */
bool ditto_tensor_is_contiguous(const DittoTensor *t);
/*
 * Channels-last layout of a convolution weight: t (O, I, k...) (ndim >= 3)
 * stored as a contiguous (O, k..., I), the layout cuDNN's channels-last
 * kernels read. set gives t those strides (its data must hold that order).
 */
bool ditto_tensor_is_channels_last(const DittoTensor *t);
void ditto_tensor_set_channels_last(DittoTensor *t);
bool ditto_tensor_same_shape(const DittoTensor *a, const DittoTensor *b);
/* Fill stride[] for a row-major layout of shape[]. */
void ditto_tensor_set_contiguous(DittoTensor *t);

/* View transforms; each returns 0 or DITTO_ERR_SHAPE / DITTO_ERR_INVAL. */
/* Reshape a contiguous tensor; one entry of shape may be -1. */
int ditto_tensor_reshape(const DittoTensor *t, int ndim, const int64_t *shape, DittoTensor *out);
/* out.shape[i] = t.shape[perm[i]]. */
int ditto_tensor_permute(const DittoTensor *t, const int *perm, DittoTensor *out);
/* Elements start, start+step, ... < end along axis (negative axis counts from the end). */
int ditto_tensor_slice(const DittoTensor *t, int axis, int64_t start, int64_t end, int64_t step, DittoTensor *out);
/* Select index i along axis and drop the axis. */
int ditto_tensor_select(const DittoTensor *t, int axis, int64_t i, DittoTensor *out);

/* "(1,3,256,256)" into buf; returns buf. */
char *ditto_shape_str(const int64_t *shape, int ndim, char *buf, size_t n);
#define DITTO_SHAPE_STR_MAX 96

/* Overflow-checked size maths for anything derived from file bytes. */
bool ditto_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out);
bool ditto_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out);

#endif
