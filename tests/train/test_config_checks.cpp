// Tests of src/train/config_checks.cpp without a Trainer: validate_config on configs built in code (which
// no schema has bounded), and the run-time checks given the facts they need (CUDA device counts a CPU
// machine does not have, training-set sizes, batches per epoch, parameters).
#include <cstdint>
#include <limits>
#include <string>

#include "opsnn/core/device.h"
#include "opsnn/core/error.h"
#include "opsnn/core/tensor.h"
#include "opsnn/train/config.h"
#include "support/catch.h"
#include "train/config_checks.h"

using namespace opsnn;
using namespace opsnn::train;

namespace {

// A config as an embedding program might build it: the defaults, no file behind it.
TrainConfig code_config() {
  TrainConfig config;
  config.source = "code";
  return config;
}

}  // namespace

TEST_CASE("validate_config: the defaults and every loaded config pass", "[config]") {
  CHECK_NOTHROW(validate_config(code_config()));
  CHECK_NOTHROW(validate_config(load_default_config()));
  CHECK_NOTHROW(
      validate_config(load_config_text("train: {epochs: 0, max_steps: 5}\ncheckpoint: {keep_last: 0}\n", "test.yaml")));
}

TEST_CASE("validate_config: train.max_steps below 0 in a config built in code names the key", "[config]") {
  TrainConfig config = code_config();
  config.train.max_steps = -1;
  CHECK_THROWS_MATCHES(validate_config(config), ConfigError,
                       Catch::Matchers::Message("code: key 'train.max_steps': -1 must be >= 0"));
  config.train.max_steps = 0;
  CHECK_NOTHROW(validate_config(config));
}

TEST_CASE("validate_config: checkpoint.keep_last outside the int range in a config built in code names the key",
          "[config]") {
  TrainConfig config = code_config();
  for (int64_t keep_last : {int64_t{-1}, int64_t{4294967297}, int64_t{std::numeric_limits<int>::max()} + 1}) {
    INFO("keep_last " << keep_last);
    config.checkpoint.keep_last = keep_last;
    CHECK_THROWS_MATCHES(validate_config(config), ConfigError,
                         Catch::Matchers::Message("code: key 'checkpoint.keep_last': " + std::to_string(keep_last) +
                                                  " must be in [0, 2147483647]"));
  }
  config.checkpoint.keep_last = std::numeric_limits<int>::max();  // beyond the schema's bound, within save_checkpoint's
  CHECK_NOTHROW(validate_config(config));
  // max_steps is checked first, as the trainer did.
  config.train.max_steps = -2;
  config.checkpoint.keep_last = -1;
  CHECK_THROWS_WITH(validate_config(config), Catch::StartsWith("code: key 'train.max_steps'"));
}

TEST_CASE("check_device: auto and cpu resolve for the CUDA devices given, pin_memory auto follows the device",
          "[config]") {
  TrainConfig config = code_config();
  config.train.device = "auto";
  TrainingDevice none = check_device(config, 0);
  CHECK(none.device == kCPU);
  CHECK_FALSE(none.pin_memory);
  TrainingDevice two = check_device(config, 2);
  CHECK(two.device == Device(DeviceType::cuda, 0));
  CHECK(two.pin_memory);
  config.data.pin_memory = false;
  CHECK_FALSE(check_device(config, 2).pin_memory);
  config.train.device = "cpu";
  config.data.pin_memory.reset();
  CHECK(check_device(config, 2).device == kCPU);
  CHECK_FALSE(check_device(config, 2).pin_memory);
  config.train.device = "cuda:1";
  CHECK(check_device(config, 2).device == Device(DeviceType::cuda, 1));
}

TEST_CASE("check_device: a CUDA device the machine lacks names train.device and the devices there are", "[config]") {
  TrainConfig config = code_config();
  config.train.device = "cuda";
  CHECK_THROWS_MATCHES(check_device(config, 0), ConfigError,
                       Catch::Matchers::Message("code: key 'train.device': cuda:0 is not available: no CUDA device "
                                                "was found (or this build has no CUDA backend); use cpu or auto"));
  config.train.device = "cuda:2";
  CHECK_THROWS_MATCHES(check_device(config, 2), ConfigError,
                       Catch::Matchers::Message("code: key 'train.device': cuda:2 is not available: this machine has "
                                                "2 CUDA device(s), cuda:0 to cuda:1"));
  CHECK_NOTHROW(check_device(config, 3));
  // A device name no schema has read is Device::parse's error, as in the trainer.
  config.train.device = "gpu";
  CHECK_THROWS_AS(check_device(config, 1), DeviceError);
}

TEST_CASE("check_device: low precision and pinned batches need a CUDA device", "[config]") {
  TrainConfig config = code_config();
  config.train.device = "auto";
  for (const char* precision : {"tf32", "bf16", "fp16"}) {
    INFO(precision);
    config.train.precision = precision;
    CHECK_THROWS_MATCHES(check_device(config, 0), ConfigError,
                         Catch::Matchers::Message("code: key 'train.precision': " + std::string(precision) +
                                                  " needs a CUDA device (train.device: cuda); the CPU trains in fp32"));
    CHECK_NOTHROW(check_device(config, 1));
  }
  config.train.precision = "fp32";
  config.data.pin_memory = true;
  CHECK_THROWS_MATCHES(check_device(config, 0), ConfigError,
                       Catch::Matchers::Message("code: key 'data.pin_memory': true needs a CUDA device (train.device: "
                                                "cuda); pinned batches only speed up uploads to a GPU"));
  CHECK(check_device(config, 1).pin_memory);
}

TEST_CASE("train.cuda_graph: a boolean, off by default, refused where a captured step cannot hold", "[config]") {
  REQUIRE_FALSE(load_config_text("", "t.yaml").train.cuda_graph);
  const TrainConfig graphed = load_config_text("train:\n  cuda_graph: true\n  precision: bf16\n", "t.yaml");
  REQUIRE(graphed.train.cuda_graph);
  REQUIRE(load_config_text(emit_config(graphed), "emitted.yaml") == graphed);
  CHECK_THROWS_MATCHES(
      load_config_text("train:\n  cuda_graph: often\n", "t.yaml"), ConfigError,
      Catch::Matchers::Message("t.yaml:2:15: key 'train.cuda_graph': expected true or false, got often"));
  CHECK_THROWS_MATCHES(load_config_text("train:\n  cuda_graph: true\n  grad_accumulation: 2\n", "t.yaml"), ConfigError,
                       Catch::Matchers::Message("t.yaml: key 'train.cuda_graph': true needs train.grad_accumulation 1 "
                                                "(a captured step is one batch), got 2"));
  for (const char* overrides : {"train.precision=fp16", "optimizer.settings.loss_scaling.enabled=true"}) {
    INFO(overrides);
    CHECK_THROWS_WITH(load_config_text("train:\n  cuda_graph: true\n", "t.yaml", {overrides}),
                      Catch::Contains("key 'train.cuda_graph': true does not go with loss scaling"));
  }
  CHECK_THROWS_WITH(
      load_config_text("train:\n  cuda_graph: true\n", "t.yaml", {"optimizer.settings.sparsification.method=topk"}),
      Catch::Contains("key 'train.cuda_graph': true does not go with optimizer.settings.sparsification"));
  TrainConfig config = code_config();
  config.train.cuda_graph = true;
  config.train.device = "auto";
  CHECK_THROWS_MATCHES(check_device(config, 0), ConfigError,
                       Catch::Matchers::Message("code: key 'train.cuda_graph': true needs a CUDA device "
                                                "(train.device: cuda); graphs record GPU work"));
  CHECK(check_device(config, 1).device.is_cuda());
}

TEST_CASE("check_batch_size: drop_last with a batch larger than the training set leaves no batch", "[config]") {
  TrainConfig config = code_config();
  config.data.batch_size = 97;
  CHECK_NOTHROW(check_batch_size(config, 96, "synthetic"));  // one short batch
  config.data.drop_last = true;
  CHECK_THROWS_MATCHES(check_batch_size(config, 96, "synthetic"), ConfigError,
                       Catch::Matchers::Message("code: key 'data.batch_size': 97 is more than the 96 training "
                                                "samples of synthetic, and data.drop_last: true drops the one partial "
                                                "batch, leaving none; use a smaller batch_size or drop_last: false"));
  CHECK_NOTHROW(check_batch_size(config, 97, "synthetic"));
}

TEST_CASE("check_run_length: steps per epoch and the run's steps from epochs, max_steps and accumulation", "[config]") {
  TrainConfig config = code_config();
  config.data.batch_size = 16;
  // 6 batches per epoch, 4 micro-batches per step: steps of 4 and 2 batches.
  config.train.grad_accumulation = 4;
  config.train.epochs = 2;
  config.train.max_steps = 0;
  RunLength length = check_run_length(config, 96, 6);
  CHECK(length.steps_per_epoch == 2);
  CHECK(length.total_steps == 4);
  config.train.max_steps = 3;  // the lower limit wins
  CHECK(check_run_length(config, 96, 6).total_steps == 3);
  config.train.max_steps = 100;
  CHECK(check_run_length(config, 96, 6).total_steps == 4);
  config.train.epochs = 0;  // no epoch limit
  CHECK(check_run_length(config, 96, 6).total_steps == 100);
  config.train.grad_accumulation = 1;
  CHECK(check_run_length(config, 96, 6).steps_per_epoch == 6);
}

TEST_CASE("check_run_length: grad accumulation beyond an epoch and epoch counts that overflow name the key",
          "[config]") {
  TrainConfig config = code_config();
  config.data.batch_size = 16;
  for (int64_t accumulation : {int64_t{0}, int64_t{7}}) {
    INFO("grad_accumulation " << accumulation);
    config.train.grad_accumulation = accumulation;
    CHECK_THROWS_MATCHES(
        check_run_length(config, 96, 6), ConfigError,
        Catch::Matchers::Message("code: key 'train.grad_accumulation': " + std::to_string(accumulation) +
                                 " must be in [1, 6], the batches in an epoch (96 training samples "
                                 "at data.batch_size 16)"));
  }
  config.train.grad_accumulation = 6;
  CHECK(check_run_length(config, 96, 6).steps_per_epoch == 1);
  config.train.grad_accumulation = 1;
  config.train.epochs = int64_t{1} << 62;
  CHECK_THROWS_MATCHES(check_run_length(config, 96, 6), ConfigError,
                       Catch::Matchers::Message("code: key 'train.epochs': 4611686018427387904 epochs of 6 steps each "
                                                "is more steps than a 64-bit count holds"));
  config.train.epochs = -1;
  CHECK_THROWS_WITH(check_run_length(config, 96, 6), Catch::StartsWith("code: key 'train.epochs': -1 epochs of 6"));
}

TEST_CASE("make_checked_optimizer: the optimizer's own errors name the config they came from", "[config]") {
  TrainConfig config = code_config();
  auto parameters = [] { return optim::NamedParameters{{"w", Tensor::zeros({3}).set_requires_grad(true)}}; };
  CHECK(make_checked_optimizer(config, parameters(), optim::OptimizerOptions(0.01)) != nullptr);
  CHECK_THROWS_MATCHES(
      make_checked_optimizer(config, parameters(), optim::OptimizerOptions(-1.0)), ConfigError,
      Catch::Matchers::Message("code: invalid optimizer setting: lr = -1 must be a finite number >= 0"));
  config.optimizer.name = "adamax";
  CHECK_THROWS_WITH(make_checked_optimizer(config, parameters(), optim::OptimizerOptions(0.01)),
                    Catch::StartsWith("code: unknown optimizer 'adamax' (known: "));
  config.optimizer.name = "adam";
  CHECK_THROWS_WITH(make_checked_optimizer(config, {}, optim::OptimizerOptions(0.01)), Catch::StartsWith("code: "));
}
