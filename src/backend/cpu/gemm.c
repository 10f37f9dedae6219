#include "backend/cpu/cpu.h"

void ditto_cpu_init_gemm(DittoOps *ops)
{
    (void)ops;
}
