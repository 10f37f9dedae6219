#include "backend/cuda/cuda_backend.h"

void ditto_cuda_init_norm(DittoOps *ops)
{
    (void)ops;
}
