// Config rules beyond the schema's key-by-key bounds and load_config's cross-key rules: validate_config,
// which needs the config alone, and the checks that need run-time facts (config_checks.h). The schema
// bounds most of these keys more tightly on load, but a Trainer may be handed a config built in code, so
// each rule is checked here rather than left to wrap around or to be narrowed later.
#include "train/config_checks.h"

#include <limits>

#include "opsnn/core/error.h"

namespace opsnn::train {

void validate_config(const TrainConfig& config) {
  if (config.train.max_steps < 0)
    throw ConfigError(
        detail::concat(config.source, ": key 'train.max_steps': ", config.train.max_steps, " must be >= 0"));
  // save_checkpoint counts in int; checked before training rather than narrowed at the first save.
  if (config.checkpoint.keep_last < 0 || config.checkpoint.keep_last > std::numeric_limits<int>::max())
    throw ConfigError(detail::concat(config.source, ": key 'checkpoint.keep_last': ", config.checkpoint.keep_last,
                                     " must be in [0, ", std::numeric_limits<int>::max(), "]"));
  const DistributedConfig& distributed = config.distributed;
  if (!(distributed.bucket_mb > 0.0 && distributed.bucket_mb <= 4096.0))
    throw ConfigError(detail::concat(config.source, ": key 'distributed.bucket_mb': ", distributed.bucket_mb,
                                     " must be a size in MiB in (0, 4096]"));
  if (!(distributed.first_bucket_mb > 0.0 && distributed.first_bucket_mb <= distributed.bucket_mb))
    throw ConfigError(detail::concat(config.source,
                                     ": key 'distributed.first_bucket_mb': ", distributed.first_bucket_mb,
                                     " must be in (0, distributed.bucket_mb = ", distributed.bucket_mb, "]"));
  if (!(distributed.timeout_s > 0.0 && distributed.timeout_s <= 1e6))
    throw ConfigError(detail::concat(config.source, ": key 'distributed.timeout_s': ", distributed.timeout_s,
                                     " must be a number of seconds in (0, 1e6]"));
  if (config.train.cuda_graph && config.train.grad_accumulation > 1)
    throw ConfigError(detail::concat(config.source,
                                     ": key 'train.cuda_graph': true needs train.grad_accumulation 1 "
                                     "(a captured step is one batch), got ",
                                     config.train.grad_accumulation));
  if (config.train.cuda_graph && config.loss_scaling_enabled())
    throw ConfigError(detail::concat(config.source,
                                     ": key 'train.cuda_graph': true does not go with loss scaling (on with "
                                     "train.precision fp16: the host reads the scale each step); use bf16"));
  if (config.train.cuda_graph && config.optimizer.settings.sparsification.method != "none")
    throw ConfigError(detail::concat(config.source,
                                     ": key 'train.cuda_graph': true does not go with optimizer.settings."
                                     "sparsification (top-k selects on the host each step)"));
  if (distributed.check_every_steps < 0)
    throw ConfigError(detail::concat(config.source, ": key 'distributed.check_every_steps': ",
                                     distributed.check_every_steps, " must be >= 0 (0 = off)"));
}

TrainingDevice check_device(const TrainConfig& config, int cuda_device_count) {
  TrainingDevice resolved;
  resolved.device = config.train.device == "auto" ? (cuda_device_count > 0 ? Device(DeviceType::cuda, 0) : kCPU)
                                                  : Device::parse(config.train.device);
  const Device& device = resolved.device;
  // Device::parse gives the CPU as index 0 only, and CUDA indices >= 0.
  if (!device.is_cpu() && device.index >= cuda_device_count)
    throw ConfigError(detail::concat(
        config.source, ": key 'train.device': ", device.str(), " is not available: ",
        cuda_device_count == 0
            ? std::string("no CUDA device was found (or this build has no CUDA backend); use cpu or auto")
            : detail::concat("this machine has ", cuda_device_count,
                             " CUDA device(s), cuda:0 to cuda:", cuda_device_count - 1)));
  if (config.train.precision != "fp32" && device.is_cpu())
    throw ConfigError(detail::concat(config.source, ": key 'train.precision': ", config.train.precision,
                                     " needs a CUDA device (train.device: cuda); the CPU trains in fp32"));
  if (config.train.cuda_graph && device.is_cpu())
    throw ConfigError(detail::concat(config.source, ": key 'train.cuda_graph': true needs a CUDA device ",
                                     "(train.device: cuda); graphs record GPU work"));
  resolved.pin_memory = config.data.pin_memory.value_or(device.is_cuda());
  if (resolved.pin_memory && device.is_cpu())
    throw ConfigError(detail::concat(config.source, ": key 'data.pin_memory': true needs a CUDA device ",
                                     "(train.device: cuda); pinned batches only speed up uploads to a GPU"));
  return resolved;
}

void check_batch_size(const TrainConfig& config, int64_t train_samples, const std::string& dataset_name) {
  if (config.data.drop_last && config.data.batch_size > train_samples)
    throw ConfigError(detail::concat(config.source, ": key 'data.batch_size': ", config.data.batch_size,
                                     " is more than the ", train_samples, " training samples of ", dataset_name,
                                     ", and data.drop_last: true drops the one partial batch, leaving none; use a "
                                     "smaller batch_size or drop_last: false"));
}

RunLength check_run_length(const TrainConfig& config, int64_t train_samples, int64_t batches_per_epoch) {
  const int64_t batches = batches_per_epoch, accumulation = config.train.grad_accumulation;
  if (accumulation < 1 || accumulation > batches)
    // More micro-batches than an epoch holds would end every step early at the epoch end while the loss
    // is still divided by grad_accumulation: each step one epoch, with a gradient scaled down.
    throw ConfigError(detail::concat(config.source, ": key 'train.grad_accumulation': ", accumulation,
                                     " must be in [1, ", batches, "], the batches in an epoch (", train_samples,
                                     " training samples at data.batch_size ", config.data.batch_size, ")"));
  RunLength length;
  length.steps_per_epoch = batches / accumulation + (batches % accumulation != 0);  // the last step may be short
  int64_t by_epochs = 0;
  if (config.train.epochs < 0 || __builtin_mul_overflow(config.train.epochs, length.steps_per_epoch, &by_epochs))
    throw ConfigError(detail::concat(config.source, ": key 'train.epochs': ", config.train.epochs, " epochs of ",
                                     length.steps_per_epoch, " steps each is more steps than a 64-bit count holds"));
  length.total_steps = config.train.max_steps > 0 && (by_epochs == 0 || config.train.max_steps < by_epochs)
                           ? config.train.max_steps
                           : by_epochs;
  return length;
}

std::unique_ptr<optim::Optimizer> make_checked_optimizer(const TrainConfig& config, optim::NamedParameters parameters,
                                                         const optim::OptimizerOptions& options) {
  try {
    return optim::make_optimizer(config.optimizer.name, std::move(parameters), options);
  } catch (const ConfigError& error) {  // the optimizer's own checks know no file: say which config it was
    throw ConfigError(detail::concat(config.source, ": ", error.what()));
  }
}

}  // namespace opsnn::train
