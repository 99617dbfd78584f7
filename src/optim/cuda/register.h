// Registration of the optimizer's CUDA kernels (fused step, sparse rows, top-k), called once from
// load_builtin_backends() (src/ops/backend.cpp) next to the CUDA compute backend, so that optimizer code
// dispatches on the arena's device without #ifdef.
#pragma once

namespace opsnn::optim {
void register_cuda_optimizer_kernels();
// The device-resident fused step (cuda_stepper.cpp).
void register_cuda_fused_stepper();
}  // namespace opsnn::optim
