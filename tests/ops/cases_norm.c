#include "test_ops.h"

void test_ops_norm(TestCtx *c)
{
    (void)c;
}
