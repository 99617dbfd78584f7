// End-to-end check of the CUDA backend under the trainer (src/train/trainer.cpp with train.device
// cuda): a quickstart-like small CNN trained 200 steps on the CPU and on the GPU from the same seed
// gives the same loss curve within fp32 nondeterminism, and the same evaluation; with train.precision
// tf32, bf16 and fp16 (mixed precision) the small CNN and a ResNet-18 reach losses close to fp32's, and
// fp16 records its dynamic loss scale in metrics.jsonl; pinned batches uploaded on a copy stream
// (data.pin_memory) train bit for bit like pageable ones, and checkpoint the same loader position; mixed
// precision computing with the optimizer's low-precision parameter copy trains bit for bit like casting
// the fp32 masters every forward; train.cuda_graph's replayed steps train bit for bit like eager ones. Tagged
// [cuda].
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "opsnn/core/rng.h"
#include "opsnn/core/storage.h"
#include "opsnn/models/models.h"
#include "opsnn/nn/module.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/train/checkpoint.h"
#include "opsnn/train/config.h"
#include "opsnn/train/trainer.h"
#include "support/catch.h"
#include "support/temporary_folder.h"
#include "support/trainer_runs.h"

using namespace opsnn;
using namespace opsnn::train;
namespace fs = std::filesystem;

namespace {

// One temporary folder per test, named after this file.
struct TemporaryFolder : opsnn::testing::TemporaryFolder {
  TemporaryFolder() : opsnn::testing::TemporaryFolder("opsnn-trainer-cuda-test") {}
};

// The quickstart's model and optimizer on synthetic 16x16 images (no dataset download needed).
const char* kQuickstartLikeYaml = R"(
run: {name: quickstart_like}
model: {arch: small_cnn}
data:
  dataset: synthetic
  batch_size: 64
  eval_batch_size: 500
  synthetic: {train_size: 12800, test_size: 1000, channels: 1, height: 16, width: 16, num_classes: 10, noise: 0.5, seed: 5}
train: {epochs: 0, max_steps: 200, seed: 7}
optimizer: {name: adam, lr: 0.001}
scheduler: {name: warmup_cosine, warmup_steps: 20}
logging: {every_steps: 10, progress: plain}
checkpoint: {enabled: false}
)";

using Curve = opsnn::testing::MetricsCurve;
using opsnn::testing::quiet_options;

Curve train_on(const std::string& device, const fs::path& out, const char* yaml = kQuickstartLikeYaml,
               const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> settings{"train.device=" + device};
  settings.insert(settings.end(), overrides.begin(), overrides.end());
  TrainConfig config = load_config_text(yaml, "quickstart_like.yaml", settings);
  Trainer trainer(config, quiet_options(out));
  TrainSummary summary = trainer.fit();
  REQUIRE(summary.steps == config.train.max_steps);
  return opsnn::testing::read_metrics_curve(out);
}

}  // namespace

TEST_CASE("cuda: a quickstart-like run trains to the same loss curve on the GPU as on the CPU", "[cuda][trainer]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the GPU training comparison is skipped");
    return;
  }
  TemporaryFolder folder;
  const Curve cpu = train_on("cpu", folder.path / "cpu");
  const Curve gpu = train_on("cuda", folder.path / "cuda");
  REQUIRE(cpu.losses.size() >= 20);  // every 10 steps (and the first step)
  REQUIRE(gpu.losses.size() == cpu.losses.size());
  // The first interval differs only by rounding; later ones drift apart slowly as rounding differences
  // compound through 200 Adam steps, but must stay within a few percent.
  CHECK(std::fabs(gpu.losses[0] - cpu.losses[0]) <= 1e-4 * std::fabs(cpu.losses[0]));
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    INFO("logged interval " << i << ": cpu " << cpu.losses[i] << ", gpu " << gpu.losses[i]);
    CHECK(std::fabs(gpu.losses[i] - cpu.losses[i]) <= 0.03 * std::fabs(cpu.losses[i]));
  }
  CHECK(cpu.losses.back() < 0.8 * cpu.losses.front());  // it learned something: the comparison is not vacuous
  INFO("test loss: cpu " << cpu.test_loss << ", gpu " << gpu.test_loss);
  CHECK(std::fabs(gpu.test_loss - cpu.test_loss) <= 0.03 * std::fabs(cpu.test_loss));
}

// Row-sparse embedding gradients (lazy Adam through the GPU sparse-row kernels) and top-k sparsification
// (DGC with momentum correction on the GPU arena) under the trainer: CPU and GPU runs agree.
const char* kCtrLazyAdamYaml = R"(
run: {name: ctr_lazy_adam}
model: {arch: ctr, embedding_dim: 8, hidden_sizes: [32]}
data:
  dataset: ctr_synthetic
  batch_size: 64
  eval_batch_size: 1024
  ctr: {train_size: 12800, test_size: 2048, vocab_sizes: [400, 50, 7], seed: 3}
train: {epochs: 0, max_steps: 100, seed: 1}
optimizer: {name: adam, lr: 0.01}
logging: {every_steps: 10, progress: plain}
checkpoint: {enabled: false}
)";

const char* kTopKYaml = R"(
run: {name: topk_like}
model: {arch: small_cnn}
data:
  dataset: synthetic
  batch_size: 64
  eval_batch_size: 500
  synthetic: {train_size: 6400, test_size: 1000, channels: 1, height: 16, width: 16, num_classes: 10, noise: 0.5, seed: 5}
train: {epochs: 0, max_steps: 100, seed: 7}
optimizer:
  name: sgd
  lr: 0.05
  momentum: 0.9
  settings:
    sparsification: {method: topk, density: 0.05, initial_density: 0.25, warmup_steps: 30, momentum_correction: true}
logging: {every_steps: 10, progress: plain}
checkpoint: {enabled: false}
)";

void require_same_curves(const Curve& cpu, const Curve& gpu, double tolerance) {
  REQUIRE(cpu.losses.size() >= 10);
  REQUIRE(gpu.losses.size() == cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    INFO("logged interval " << i << ": cpu " << cpu.losses[i] << ", gpu " << gpu.losses[i]);
    CHECK(std::fabs(gpu.losses[i] - cpu.losses[i]) <= tolerance * std::fabs(cpu.losses[i]));
  }
  INFO("test loss: cpu " << cpu.test_loss << ", gpu " << gpu.test_loss);
  CHECK(std::fabs(gpu.test_loss - cpu.test_loss) <= tolerance * std::fabs(cpu.test_loss));
}

TEST_CASE("cuda: lazy Adam on row-sparse embeddings and top-k sparsification train alike on GPU and CPU",
          "[cuda][trainer]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the GPU training comparison is skipped");
    return;
  }
  TemporaryFolder folder;
  require_same_curves(train_on("cpu", folder.path / "ctr_cpu", kCtrLazyAdamYaml),
                      train_on("cuda", folder.path / "ctr_gpu", kCtrLazyAdamYaml), 0.02);
  require_same_curves(train_on("cpu", folder.path / "topk_cpu", kTopKYaml),
                      train_on("cuda", folder.path / "topk_gpu", kTopKYaml), 0.05);
}

TEST_CASE("cuda: tf32, bf16 and fp16 train a small CNN and a ResNet-18 to losses close to fp32's", "[cuda][trainer]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the mixed-precision training comparison is skipped");
    return;
  }
  TemporaryFolder folder;
  struct Model {
    std::string name;
    std::vector<std::string> overrides;
  };
  // The small CNN brings max pooling, the ResNet BatchNorm (f32 statistics under low-precision data),
  // residual adds and the global average pool into the low-precision path.
  const std::vector<Model> models = {{"small_cnn", {}}, {"resnet18", {"model.arch=resnet18", "train.max_steps=120"}}};
  for (const Model& model : models) {
    const Curve fp32 = train_on("cuda", folder.path / (model.name + "-fp32"), kQuickstartLikeYaml, model.overrides);
    // The mean of the last three logged intervals smooths single-batch noise.
    auto final_loss = [](const Curve& curve) {
      const size_t n = curve.losses.size();
      return (curve.losses[n - 1] + curve.losses[n - 2] + curve.losses[n - 3]) / 3.0;
    };
    REQUIRE(fp32.losses.size() >= 10);
    CHECK(final_loss(fp32) < 0.8 * fp32.losses.front());  // it learned: the comparison is not vacuous
    for (const std::string precision : {"tf32", "bf16", "fp16"}) {
      std::vector<std::string> overrides = model.overrides;
      overrides.push_back("train.precision=" + precision);
      const Curve low = train_on("cuda", folder.path / (model.name + "-" + precision), kQuickstartLikeYaml, overrides);
      REQUIRE(low.losses.size() == fp32.losses.size());
      INFO(model.name << " " << precision << ": final loss " << final_loss(low) << " vs fp32 " << final_loss(fp32)
                      << ", test accuracy " << low.test_accuracy << " vs fp32 " << fp32.test_accuracy);
      std::printf("%s %s: final loss %.4f (fp32 %.4f), test loss %.4f (fp32 %.4f), test accuracy %.4f (fp32 %.4f)\n",
                  model.name.c_str(), precision.c_str(), final_loss(low), final_loss(fp32), low.test_loss,
                  fp32.test_loss, low.test_accuracy, fp32.test_accuracy);
      for (double loss : low.losses) REQUIRE(std::isfinite(loss));
      CHECK(std::fabs(final_loss(low) - final_loss(fp32)) <= 0.15 * final_loss(fp32) + 0.05);
      CHECK(std::fabs(low.test_loss - fp32.test_loss) <= 0.15 * fp32.test_loss + 0.05);
      CHECK(std::fabs(low.test_accuracy - fp32.test_accuracy) <= 0.03);
      if (precision == "fp16") {
        // The dynamic loss scale is on (auto with fp16) and every train line records it.
        REQUIRE(low.loss_scales.size() == low.losses.size());
        for (double scale : low.loss_scales) CHECK((scale > 1.0 && std::isfinite(scale)));
      } else {
        for (double scale : low.loss_scales) CHECK(scale == 1.0);
      }
    }
  }
}

namespace {

// An MLP is deterministic on the GPU (GEMMs, ReLU, softmax cross-entropy, the fused Adam step: no atomics,
// no algorithm search), so runs that differ only in how batches reach the GPU must agree bit for bit.
// 1000 samples in batches of 64 (the last of 40) and micro-batches in pairs: 8 steps per epoch, so 40
// steps cross four epoch ends, each with an evaluation while the next upload is in flight.
const char* kPinnedMlpYaml = R"(
run: {name: pinned_mlp}
model: {arch: mlp, hidden_sizes: [64, 32]}
data:
  dataset: synthetic
  batch_size: 64
  eval_batch_size: 250
  synthetic: {train_size: 1000, test_size: 500, channels: 1, height: 16, width: 16, num_classes: 10, noise: 0.5, seed: 5}
train: {epochs: 0, max_steps: 40, seed: 7, grad_accumulation: 2, device: cuda}
optimizer: {name: adam, lr: 0.002}
logging: {every_steps: 5, progress: plain}
checkpoint: {enabled: false}
)";

struct GpuRun {
  std::vector<double> step_losses;
  std::vector<double> test_losses;
  std::map<std::string, std::vector<float>> state;
  bool asynchronous = false;  // the trainer logged pinned batches on a copy stream
};

GpuRun summarize(Trainer& trainer) {
  GpuRun run;
  run.step_losses = trainer.step_losses();
  for (const auto& [name, tensor] : trainer.model().state_dict())
    run.state["model." + name] = tensor.to_vector<float>();
  for (const auto& [name, tensor] : trainer.optimizer().state_dict())
    run.state["optimizer." + name] = tensor.to_vector<float>();
  std::ifstream metrics(trainer.run_dir() / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record["event"] == "eval") run.test_losses.push_back(record["test_loss"].get<double>());
  }
  std::ifstream log(trainer.run_dir() / "train.log");
  for (std::string line; std::getline(log, line);)
    run.asynchronous = run.asynchronous || line.find("training batches in pinned memory") != std::string::npos;
  return run;
}

void require_bit_identical(const GpuRun& run, const GpuRun& reference) {
  REQUIRE(run.step_losses.size() == reference.step_losses.size());
  for (size_t i = 0; i < run.step_losses.size(); ++i) {
    INFO("step " << i + 1);
    REQUIRE(run.step_losses[i] == reference.step_losses[i]);
  }
  REQUIRE(run.test_losses == reference.test_losses);
  REQUIRE(run.state.size() == reference.state.size());
  for (const auto& [name, values] : reference.state) {
    INFO(name);
    REQUIRE(run.state.count(name) == 1);
    REQUIRE(run.state.at(name) == values);
  }
}

}  // namespace

TEST_CASE("cuda: pinned batches uploaded on a copy stream train bit for bit like pageable ones", "[cuda][trainer]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: pinned asynchronous uploads are not tested");
    return;
  }
  TemporaryFolder folder;
  auto train = [&](const std::string& name, const std::vector<std::string>& overrides) {
    Trainer trainer(load_config_text(kPinnedMlpYaml, "pinned_mlp.yaml", overrides), quiet_options(folder.path / name));
    trainer.train_steps(40);
    REQUIRE(trainer.step() == 40);
    return summarize(trainer);
  };
  const GpuRun pageable = train("pageable", {"data.pin_memory=false"});
  REQUIRE_FALSE(pageable.asynchronous);
  REQUIRE(pageable.test_losses.size() == 4);
  REQUIRE(pageable.step_losses.back() < pageable.step_losses.front());  // it learns: the comparison is not vacuous
  struct Variant {
    std::string name;
    std::vector<std::string> overrides;
  };
  const std::vector<Variant> variants = {
      {"auto", {}},
      {"loading-on-the-training-thread", {"data.pin_memory=true", "data.num_workers=0", "data.prefetch=1"}},
      {"three-workers", {"data.pin_memory=true", "data.num_workers=3", "data.prefetch=4"}}};
  for (const Variant& variant : variants) {
    INFO(variant.name);
    const GpuRun pinned = train(variant.name, variant.overrides);
    REQUIRE(pinned.asynchronous);
    require_bit_identical(pinned, pageable);
  }
}

TEST_CASE("cuda: a checkpoint taken with an upload in flight records the next batch, resuming from it is exact",
          "[cuda][trainer]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: checkpoints with pinned asynchronous uploads are not tested");
    return;
  }
  TemporaryFolder folder;
  // 13 steps end inside epoch 1 (8 steps per epoch), with micro-batch 10 of that epoch already uploading.
  std::map<std::string, fs::path> checkpoints;
  std::map<std::string, DataLoaderPosition> positions;
  for (const std::string setting : {"false", "true"}) {
    Trainer trainer(load_config_text(kPinnedMlpYaml, "pinned_mlp.yaml", {"data.pin_memory=" + setting}),
                    quiet_options(folder.path / ("first-" + setting)));
    trainer.train_steps(13);
    checkpoints[setting] = trainer.save_checkpoint();
    positions[setting] = load_checkpoint(checkpoints[setting]).data_loader;
  }
  CHECK(positions["false"].epoch == 1);
  CHECK(positions["false"].batch_in_epoch == 10);
  CHECK(positions["true"] == positions["false"]);
  std::map<std::string, GpuRun> resumed;
  for (const std::string setting : {"false", "true"}) {
    Trainer trainer(load_config_text(kPinnedMlpYaml, "pinned_mlp.yaml", {"data.pin_memory=" + setting}),
                    quiet_options(folder.path / ("resumed-" + setting), checkpoints[setting].string()));
    REQUIRE(trainer.step() == 13);
    trainer.train_steps(11);
    resumed[setting] = summarize(trainer);
  }
  require_bit_identical(resumed["true"], resumed["false"]);
}

// 167 samples in batches of 32: five full batches and a short one per epoch; two epochs, each evaluated.
const char* kGraphedResnetYaml = R"(
run: {name: graphed_resnet}
model: {arch: resnet18, stem: cifar, width: 8}
data:
  dataset: synthetic
  batch_size: 32
  eval_batch_size: 100
  synthetic: {train_size: 167, test_size: 200, channels: 3, height: 16, width: 16, num_classes: 10, noise: 0.5, seed: 5}
train: {epochs: 2, seed: 7, device: cuda, label_smoothing: 0.1}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0005}
logging: {every_steps: 4, progress: plain}
checkpoint: {enabled: false}
)";

TEST_CASE("cuda: train.cuda_graph replays a captured step bit for bit like eager steps, a short batch eagerly",
          "[cuda][trainer]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: train.cuda_graph is not tested");
    return;
  }
  TemporaryFolder folder;
  for (const std::string precision : {"fp32", "bf16"}) {
    INFO(precision);
    auto train = [&](bool graphed) {
      const std::string name = precision + (graphed ? "-graph" : "-eager");
      Trainer trainer(load_config_text(kGraphedResnetYaml, "graphed_resnet.yaml",
                                       {"train.precision=" + precision,
                                        std::string("train.cuda_graph=") + (graphed ? "true" : "false")}),
                      quiet_options(folder.path / name));
      trainer.train_steps(100);
      REQUIRE(trainer.step() == 12);
      std::ifstream log(trainer.run_dir() / "train.log");
      const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      // Steps 1 and 2 eager, the capture at step 3; the short batches (steps 6 and 12) eager between replays.
      CHECK((text.find("train.cuda_graph: the step captured at step 3") != std::string::npos) == graphed);
      return summarize(trainer);
    };
    const GpuRun eager = train(false), graphed = train(true);
    REQUIRE(eager.test_losses.size() == 2);
    REQUIRE(eager.step_losses.back() < eager.step_losses.front());  // it trains: the comparison is not vacuous
    require_bit_identical(graphed, eager);
  }
  // Row-sparse embedding gradients update on the host: refused when the trainer is made, naming the key.
  REQUIRE_THROWS_WITH(
      Trainer(load_config_text(kCtrLazyAdamYaml, "ctr.yaml", {"train.device=cuda", "train.cuda_graph=true"}),
              quiet_options(folder.path / "ctr-graph")),
      Catch::Contains("ctr.yaml: key 'train.cuda_graph': true needs the optimizer's fused device step "
                      "over dense gradients"));
}

TEST_CASE("cuda: mixed precision with the optimizer's parameter copy trains bit for bit like casting the masters",
          "[cuda][trainer]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  const Device gpu(DeviceType::cuda, 0);
  for (DType dtype : {DType::bf16, DType::f16}) {
    INFO("compute dtype " << dtype_name(dtype));
    struct Run {
      std::vector<double> losses;
      std::vector<float> parameters;
    };
    auto run = [&](bool with_copies) {
      Generator init(3);
      models::ModelOptions model_options;
      model_options.arch = "small_cnn";
      model_options.image_size = 16;
      std::shared_ptr<nn::Module> model = models::build_model(model_options, init);
      model->to(gpu);
      model->train();
      model->set_compute_dtype(dtype);
      auto optimizer = optim::make_optimizer("adamw", model->named_parameters(), optim::OptimizerOptions(1e-3));
      if (with_copies) {
        optimizer->enable_param_copy(dtype);
        model->set_parameter_copies(std::make_shared<const nn::Module::ParameterCopies>(optimizer->param_copies()));
        for (const auto& [name, parameter] : model->named_parameters())
          REQUIRE(model->parameter_copy(parameter).defined());
      }
      Generator data(9);
      const Tensor images = Tensor::normal({32, 1, 16, 16}, 0.0, 1.0, data, DType::f32, gpu);
      std::vector<int64_t> labels(32);
      for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7) % 10);
      const Tensor targets = Tensor::from_vector<int64_t>(labels, {32}, DType::i64, gpu);
      Run result;
      for (int step = 0; step < 5; ++step) {
        const Tensor loss = ops::cross_entropy(model->forward(images), targets);
        loss.backward();
        result.losses.push_back(loss.item());
        optimizer->step();
        optimizer->zero_grad();
      }
      for (const auto& [name, parameter] : model->named_parameters())
        for (float value : parameter.to_vector<float>()) result.parameters.push_back(value);
      return result;
    };
    const Run cast = run(false), copied = run(true);
    CHECK(copied.losses == cast.losses);
    CHECK(copied.parameters == cast.parameters);
    CHECK(cast.losses.back() < cast.losses.front());  // it trains
  }
}
