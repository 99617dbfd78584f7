// Private to the trainer: the config rules that need facts known only at run time (the machine's CUDA
// devices, the training set, the loader's batches per epoch, the model's parameters), each taking those
// facts as arguments. validate_config (config.h), the rules that need the config alone, lives beside them
// in config_checks.cpp. All raise ConfigError "SOURCE: key 'a.b': ..." (exit 2).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "opsnn/core/device.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/train/config.h"

namespace opsnn::train {

struct TrainingDevice {
  Device device;            // train.device resolved (auto: cuda:0 when there is a GPU, else cpu)
  bool pin_memory = false;  // data.pin_memory resolved (auto: on for a CUDA device)
};

// train.device on a machine with `cuda_device_count` CUDA devices (0 without a CUDA backend): the device
// must exist, and train.precision other than fp32 and data.pin_memory true need a CUDA device.
// Device::parse's DeviceError for a train.device no schema has checked (a config built in code).
TrainingDevice check_device(const TrainConfig& config, int cuda_device_count);

// data.batch_size against a training set of `train_samples` samples (of the dataset `dataset_name`): with
// data.drop_last, a batch larger than the whole set would leave no batch at all. The loader would refuse
// it as a data failure; it is a choice of two config keys.
void check_batch_size(const TrainConfig& config, int64_t train_samples, const std::string& dataset_name);

struct RunLength {
  int64_t steps_per_epoch = 0;  // ceil(batches per epoch / train.grad_accumulation): the last step may be short
  int64_t total_steps = 0;      // of the whole run, from train.epochs and train.max_steps (0 = no limit)
};

// train.grad_accumulation against the `batches_per_epoch` the loader makes of `train_samples` samples, and
// train.epochs x steps per epoch within 64 bits; returns the step counts. Expects validate_config to have
// passed (train.max_steps >= 0).
RunLength check_run_length(const TrainConfig& config, int64_t train_samples, int64_t batches_per_epoch);

// The optimizer optimizer.name names, over `parameters`. Its own checks (the name, OptimizerOptions::validate,
// the parameter groups) know no file: a ConfigError from them is re-thrown as "SOURCE: MESSAGE".
std::unique_ptr<optim::Optimizer> make_checked_optimizer(const TrainConfig& config, optim::NamedParameters parameters,
                                                         const optim::OptimizerOptions& options);

}  // namespace opsnn::train
