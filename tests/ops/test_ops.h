/* Op test families: each compares the backend under test with a double-precision reference. */
#ifndef DITTO_TEST_OPS_H
#define DITTO_TEST_OPS_H

#include "test_util.h"

void test_ops_elementwise(TestCtx *c);  /* copy/cast, fill, unary, binary, softmax, reduce, concat, permute/slice views */
void test_ops_gemm(TestCtx *c);         /* matmul, linear */
void test_ops_conv(TestCtx *c);         /* conv 1-D/2-D/3-D */
void test_ops_norm(TestCtx *c);         /* batch, instance, layer, group norm */
void test_ops_sample(TestCtx *c);       /* upsample_nearest, pool, pixel_shuffle, grid_sample */
void test_ops_attention(TestCtx *c);    /* attention, rotary */
void test_ops_image(TestCtx *c);        /* warp_affine, resize_area, resize_bilinear */
void test_ops_onnx(TestCtx *c);         /* gather, where, pad, resize, prelu, conv_transpose */
void test_ops_fused(TestCtx *c);        /* film, ddim_step, layer_norm_rotary, randn */
void test_ops_motion(TestCtx *c);       /* motion_input, motion_deform */
void test_ops_transfer(TestCtx *c);     /* the backend's asynchronous device -> host copies */
void test_ops_lanes(TestCtx *c);        /* the backend's lanes: a batch in two halves, eager and in one graph */

#endif
