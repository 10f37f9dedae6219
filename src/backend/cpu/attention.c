#include "backend/cpu/cpu.h"

void ditto_cpu_init_attention(DittoOps *ops)
{
    (void)ops;
}
