#include "backend/cuda/cuda_backend.h"

void ditto_cuda_init_image(DittoOps *ops)
{
    (void)ops;
}
