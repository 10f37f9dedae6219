#include "backend/cuda/cuda_backend.h"

void ditto_cuda_init_sample(DittoOps *ops)
{
    (void)ops;
}
