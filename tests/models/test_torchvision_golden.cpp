// opsnn's ResNets against torchvision's: with OPSNN_TORCHVISION_RESNET naming a weights file that
// tools/export_torchvision_resnet.py wrote (and its .logits.safetensors beside it: a fixed input batch and
// torchvision's eval-mode logits), the same architecture is built in opsnn (imagenet stem, f32, eval
// mode), the weights are loaded by model.init_from's loader (strict: every name must match) and the logits
// are compared: max |opsnn - torchvision| <= 1e-3 * max |torchvision logit|, on the CPU and, where there
// is a GPU, on CUDA (NCHW and channels-last residual stages; f32 math, not TF32). Without the variable
// both tests warn and return: PyTorch is not needed anywhere else.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "opsnn/autograd/node.h"
#include "opsnn/models/models.h"
#include "opsnn/nn/module.h"
#include "opsnn/ops/backend.h"
#include "opsnn/train/init_from.h"
#include "opsnn/train/safetensors.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"

using namespace opsnn;
using namespace opsnn::train;
namespace fs = std::filesystem;

namespace {

constexpr double kRelativeTolerance = 1e-3;  // of the largest |logit| torchvision gave

struct Golden {
  fs::path weights, logits_file;
  std::string arch;
  Tensor input, logits;  // [N, 3, S, S] and [N, classes], f32 on the CPU
};

// The files OPSNN_TORCHVISION_RESNET names, or nullopt (with a warning) when it is not set.
std::optional<Golden> golden_files(const char* what) {
  const char* variable = std::getenv("OPSNN_TORCHVISION_RESNET");
  if (variable == nullptr || *variable == '\0') {
    WARN("OPSNN_TORCHVISION_RESNET is not set: "
         << what << " did not run (tools/export_torchvision_resnet.py writes its files)");
    return std::nullopt;
  }
  Golden golden;
  golden.weights = variable;
  std::string stem = golden.weights.string();
  if (stem.size() > 12 && stem.compare(stem.size() - 12, 12, ".safetensors") == 0) stem.resize(stem.size() - 12);
  golden.logits_file = stem + ".logits.safetensors";
  const SafetensorsContents logits = read_safetensors(golden.logits_file);
  REQUIRE(logits.find("input") != nullptr);
  REQUIRE(logits.find("logits") != nullptr);
  golden.input = logits.find("input")->to(DType::f32);
  golden.logits = logits.find("logits")->to(DType::f32);
  auto arch = logits.metadata.find("arch");
  golden.arch = arch != logits.metadata.end() ? arch->second : "resnet50";
  return golden;
}

// opsnn's model of the export, its weights loaded strictly from the file, in eval mode on `device`.
std::shared_ptr<nn::Module> load_model(const Golden& golden, Device device, bool channels_last) {
  models::ModelOptions options;
  options.arch = golden.arch;
  options.in_channels = golden.input.size(1);
  options.num_classes = golden.logits.size(1);
  options.image_size = golden.input.size(2);
  options.stem = "imagenet";
  options.channels_last = channels_last;
  Generator generator(0);
  std::shared_ptr<nn::Module> model = models::build_model(options, generator);
  model->to(device);
  const InitFromReport report = load_init_weights(*model, golden.weights, true);
  CHECK(report.complete());
  model->eval();
  return model;
}

// max |logits - golden| / max |golden|, after checking the shapes agree.
double relative_error(const Tensor& logits, const Golden& golden) {
  REQUIRE(logits.shape() == golden.logits.shape());
  const std::vector<float> got = logits.to_vector<float>(), want = golden.logits.to_vector<float>();
  double difference = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    difference = std::max(difference, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  REQUIRE(scale > 0.0);
  return difference / scale;
}

}  // namespace

TEST_CASE("torchvision ResNet logits: opsnn's resnet with init_from weights matches on the CPU (f32)",
          "[golden][models]") {
  std::optional<Golden> golden = golden_files("the CPU comparison with torchvision's ResNet");
  if (!golden) return;
  INFO(golden->weights.string() << " (" << golden->arch << ")");
  std::shared_ptr<nn::Module> model = load_model(*golden, kCPU, false);
  autograd::NoGradGuard no_grad;
  const double error = relative_error(model->forward(golden->input), *golden);
  WARN("CPU: max |opsnn - torchvision| / max |logit| = " << error);
  CHECK(error <= kRelativeTolerance);
}

TEST_CASE("torchvision ResNet logits: opsnn's resnet with init_from weights matches on CUDA (f32)",
          "[cuda][golden][models]") {
  if (opsnn::testing::gpu_missing("the CUDA comparison with torchvision's ResNet")) return;
  std::optional<Golden> golden = golden_files("the CUDA comparison with torchvision's ResNet");
  if (!golden) return;
  struct StrictMath {  // TF32 would need a looser bound; the setting is process-wide, so handed back
    ops::Fp32Math before = ops::fp32_math();
    StrictMath() { ops::set_fp32_math(ops::Fp32Math::strict); }
    ~StrictMath() { ops::set_fp32_math(before); }
  } strict_math;
  for (bool channels_last : {false, true}) {
    INFO(golden->weights.string() << " (" << golden->arch << "), channels_last " << channels_last);
    std::shared_ptr<nn::Module> model = load_model(*golden, opsnn::testing::kGpu, channels_last);
    autograd::NoGradGuard no_grad;
    const double error = relative_error(model->forward(golden->input.to(opsnn::testing::kGpu)), *golden);
    WARN("CUDA" << (channels_last ? " channels-last" : "") << ": max |opsnn - torchvision| / max |logit| = " << error);
    CHECK(error <= kRelativeTolerance);
  }
}
