#include "test_ops.h"

void test_ops_attention(TestCtx *c)
{
    (void)c;
}
