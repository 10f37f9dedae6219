#include "test_ops.h"

void test_ops_conv(TestCtx *c)
{
    (void)c;
}
