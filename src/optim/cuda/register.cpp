// Registers every CUDA implementation of the optimizer subsystem's device tables.
#include "optim/cuda/register.h"

#include "optim/cuda/sparse_rows.h"

namespace opsnn::optim {

void register_cuda_optimizer_kernels() {
  register_cuda_fused_stepper();
  register_cuda_sparse_gradient_kernels();
}

}  // namespace opsnn::optim
