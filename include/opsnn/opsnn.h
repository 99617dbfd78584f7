// All of opsnn in one include, and the registration of its built-ins. A program that includes this header
// has the built-in backends (CUDA when the build has it), optimizers, models and datasets registered
// before main() runs; one that includes only the layer headers calls opsnn::register_builtins() once
// itself (the CPU device and its kernels work either way).
//
//   #include <opsnn/opsnn.h>
//   auto model = opsnn::models::build_model(options, generator);
//   auto optimizer = opsnn::optim::make_optimizer("adamw", model->named_parameters());
#pragma once

#include "opsnn/core/tensor.h"
#include "opsnn/data/loader.h"
#include "opsnn/data/registry.h"
#include "opsnn/dist/data_parallel.h"
#include "opsnn/dist/dist.h"
#include "opsnn/dist/sync_batch_norm.h"
#include "opsnn/models/models.h"
#include "opsnn/nn/nn.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/adagrad.h"
#include "opsnn/optim/adam.h"
#include "opsnn/optim/lamb.h"
#include "opsnn/optim/lion.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/optim/sgd.h"
#include "opsnn/train/config.h"
#include "opsnn/train/trainer.h"

namespace opsnn {

// Registers every built-in (src/register_builtins.cpp); safe to call any number of times, from any thread.
void register_builtins();

namespace detail {
// Each translation unit that includes this header registers the built-ins during static initialisation
// (the call is idempotent; the registries it fills are created on first use, so the order of static
// initialisation does not matter).
struct BuiltinsRegistration {
  BuiltinsRegistration() { register_builtins(); }
};
static const BuiltinsRegistration builtins_registration;
}  // namespace detail

}  // namespace opsnn
