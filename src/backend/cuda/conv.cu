#include "backend/cuda/cuda_backend.h"

void ditto_cuda_init_conv(DittoOps *ops)
{
    (void)ops;
}
