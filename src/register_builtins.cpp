// The composition root: the one place that registers what is built into the library - the CUDA device
// services, compute kernels, optimizer steppers and the NCCL communicator when this build has CUDA (the CPU's are built
// into their layers), the optimizers, the models and the datasets. Lower layers only offer registries; nothing below
// calls up into this file. Programs call register_builtins() once (including <opsnn/opsnn.h> does).
#include <mutex>

#include "opsnn/core/storage.h"
#include "opsnn/data/registry.h"
#include "opsnn/models/models.h"
#include "opsnn/opsnn.h"
#include "opsnn/optim/descriptor.h"
#if OPSNN_WITH_CUDA
#include "dist/cuda/register.h"
#include "ops/cuda/cuda_backend.h"
#include "optim/cuda/register.h"
#endif

namespace opsnn {

void register_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
#if OPSNN_WITH_CUDA
    ops::register_cuda_backend();
    optim::register_cuda_optimizer_kernels();
    dist::register_nccl_backend();
#endif
    optim::register_builtin_optimizers();
    models::register_builtin_models();
    data::register_builtin_datasets();
    mark_builtins_registered();
  });
}

}  // namespace opsnn
