#include "test_ops.h"

void test_ops_image(TestCtx *c)
{
    (void)c;
}
