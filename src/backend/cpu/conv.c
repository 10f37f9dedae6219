#include "backend/cpu/cpu.h"

void ditto_cpu_init_conv(DittoOps *ops)
{
    (void)ops;
}
