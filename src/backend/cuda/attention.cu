#include "backend/cuda/cuda_backend.h"

void ditto_cuda_init_attention(DittoOps *ops)
{
    (void)ops;
}
