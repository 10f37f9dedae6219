/*
 * Op test driver: every op on the chosen backend (-b cpu|cuda) against a
 * naive double-precision reference, on random inputs of odd shapes, batch 1
 * and 3, with NaN/Inf checks and guard words around outputs.
 *   test_ops [-b cpu|cuda] [-p f32|f16] [-o NAME-FILTER] [-s SEED] [-v]
 * -p f16 (GPU backends): the same cases with float16 device storage of every
 * float32 test tensor and the fp16 tolerance floor (tests/common/test_util.h);
 * the image ops (uint8/float32 by contract) and the ONNX ops (graphs compute
 * in float32) keep float32 storage.
 */
#include <stdio.h>

#include "ops/ops.h"
#include "test_ops.h"

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init_opts(&c, argc, argv, TEST_ALLOW_FP16);
    if (rc)
        return rc;
    test_ops_elementwise(&c);
    test_ops_gemm(&c);
    test_ops_conv(&c);
    test_ops_norm(&c);
    test_ops_sample(&c);
    test_ops_attention(&c);
    test_ops_fused(&c);
    test_ops_motion(&c);
    test_ops_transfer(&c);
    test_ops_lanes(&c);
    test_fp16_suspend(&c);   /* dtype is part of these contracts */
    test_ops_image(&c);
    test_ops_onnx(&c);
    test_fp16_resume(&c);
    /* coverage: every op in the table must be implemented by the backend under test */
    for (int op = 0; op < DITTO_OP_COUNT; op++) {
        if (!ditto_ops_has(&c.be->ops, (DittoOp)op))
            test_report(&c, ditto_op_name((DittoOp)op), false, "not implemented by the %s backend", c.be->name);
    }
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
