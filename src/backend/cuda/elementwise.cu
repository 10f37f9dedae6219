#include "backend/cuda/cuda_backend.h"

void ditto_cuda_init_elementwise(DittoOps *ops)
{
    (void)ops;
}
