#include "backend/cpu/cpu.h"

void ditto_cpu_init_norm(DittoOps *ops)
{
    (void)ops;
}
