#include "backend/cpu/cpu.h"

void ditto_cpu_init_image(DittoOps *ops)
{
    (void)ops;
}
