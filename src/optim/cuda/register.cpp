// Registers every CUDA implementation of the optimizer subsystem's device tables.
#include "optim/cuda/register.h"

namespace opsnn::optim {

void register_cuda_optimizer_kernels() { register_cuda_fused_stepper(); }

}  // namespace opsnn::optim
