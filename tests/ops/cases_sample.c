#include "test_ops.h"

void test_ops_sample(TestCtx *c)
{
    (void)c;
}
