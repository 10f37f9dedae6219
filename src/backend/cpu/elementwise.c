#include "backend/cpu/cpu.h"

void ditto_cpu_init_elementwise(DittoOps *ops)
{
    (void)ops;
}
