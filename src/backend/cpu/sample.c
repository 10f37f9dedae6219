#include "backend/cpu/cpu.h"

void ditto_cpu_init_sample(DittoOps *ops)
{
    (void)ops;
}
