#include "test_ops.h"

void test_ops_elementwise(TestCtx *c)
{
    (void)c;
}
