/* CPU backend internals: the per-family init functions that fill the op table. */
#ifndef DITTO_BACKEND_CPU_H
#define DITTO_BACKEND_CPU_H

#include "backend/backend.h"

void ditto_cpu_init_elementwise(DittoOps *ops);  /* copy, fill, unary, binary, softmax, reduce, concat */
void ditto_cpu_init_gemm(DittoOps *ops);         /* matmul, linear */
void ditto_cpu_init_conv(DittoOps *ops);         /* conv */
void ditto_cpu_init_norm(DittoOps *ops);         /* batch/instance/layer/group norm */
void ditto_cpu_init_sample(DittoOps *ops);       /* upsample_nearest, pool, pixel_shuffle, grid_sample */
void ditto_cpu_init_attention(DittoOps *ops);    /* attention, rotary */
void ditto_cpu_init_image(DittoOps *ops);        /* warp_affine, resize_area, resize_bilinear */
void ditto_cpu_init_onnx_ops(DittoOps *ops);     /* gather, where, pad, resize, prelu, conv_transpose */

/* y (n, cols, rows) = x (n, rows, cols) transposed per item, float32, threaded (conv.c; the channels-last paths). */
void ditto_cpu_transpose(DittoBackend *be, const float *x, float *y, int64_t n, int64_t rows, int64_t cols);

/* Test hook: column-chunk limits of the im2col conv (0, 0 restores the defaults). */
void ditto_cpu_conv_set_chunking(int64_t max_col_floats, int64_t min_chunk_cols);

#endif
