// Tests of src/train/init_from.cpp (model.init_from) without PyTorch: an opsnn ResNet's state dict saved
// under torchvision's names (with torchvision's i64 num_batches_tracked counters added) loads into a fresh
// model and gives the same logits bit for bit; f16/bf16 files convert; missing, unexpected, shape- and
// dtype-mismatched names are all listed (strict: one DataError naming the file, nothing loaded; not
// strict: the rest loads and the misfits keep their fresh initialisation); and the trainer's
// model.init_from / model.init_strict keys, ignored when resuming.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "opsnn/autograd/node.h"
#include "opsnn/core/error.h"
#include "opsnn/models/models.h"
#include "opsnn/nn/module.h"
#include "opsnn/train/init_from.h"
#include "opsnn/train/safetensors.h"
#include "opsnn/train/trainer.h"
#include "support/catch.h"
#include "support/temporary_folder.h"
#include "support/trainer_runs.h"

using namespace opsnn;
using namespace opsnn::train;
namespace fs = std::filesystem;
using opsnn::testing::quiet_options;

namespace {

struct TemporaryFolder : opsnn::testing::TemporaryFolder {
  TemporaryFolder() : opsnn::testing::TemporaryFolder("opsnn-init-from-test") {}
};

models::ModelOptions small_resnet_options(const std::string& arch, int64_t classes = 10) {
  models::ModelOptions options;
  options.arch = arch;
  options.in_channels = 3;
  options.num_classes = classes;
  options.stem = "imagenet";
  options.width = 8;
  return options;
}

std::shared_ptr<nn::Module> build(const models::ModelOptions& options, uint64_t seed) {
  Generator generator(seed);
  return models::build_model(options, generator);
}

// Random BatchNorm affine parameters and running statistics (fresh ones are 1, 0, 0, 1: a swap of two
// of them would go unseen).
void randomise_batch_norms(nn::Module& model, uint64_t seed) {
  Generator generator(seed);
  autograd::NoGradGuard no_grad;
  for (auto& [name, tensor] : model.state_dict()) {
    auto ends_with = [&name = name](const char* suffix) {
      return name.size() >= std::strlen(suffix) &&
             name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0;
    };
    if (ends_with("running_var") || (ends_with(".weight") && tensor.dim() == 1))
      tensor.copy_(Tensor::uniform(tensor.shape(), 0.5, 1.5, generator));
    else if (ends_with("running_mean") || (ends_with(".bias") && name.rfind("fc.", 0) != 0))
      tensor.copy_(Tensor::normal(tensor.shape(), 0.0, 0.2, generator));
  }
}

// The state dict as torchvision's would be: the same names plus an i64 num_batches_tracked per BatchNorm.
NamedTensors torchvision_style(const nn::Module& model) {
  NamedTensors tensors;
  for (const auto& [name, tensor] : model.state_dict()) {
    tensors.emplace_back(name, tensor);
    const std::string suffix = ".running_mean";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), std::string::npos, suffix) == 0)
      tensors.emplace_back(name.substr(0, name.size() - suffix.size()) + ".num_batches_tracked",
                           Tensor::full({}, 7, DType::i64));
  }
  return tensors;
}

std::vector<float> eval_logits(nn::Module& model, const Tensor& input) {
  autograd::NoGradGuard no_grad;
  model.eval();
  return model.forward(input).to_vector<float>();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::map<std::string, std::vector<float>> values_of(const nn::Module& model) {
  std::map<std::string, std::vector<float>> values;
  for (const auto& [name, tensor] : model.state_dict()) values[name] = tensor.to_vector<float>();
  return values;
}

NamedTensors without(NamedTensors tensors, const std::string& name) {
  std::erase_if(tensors, [&](const auto& entry) { return entry.first == name; });
  return tensors;
}

}  // namespace

TEST_CASE("init_from: opsnn's ResNet names are torchvision's", "[init_from]") {
  // torchvision's resnet18 / resnet50 state dicts have 122 / 320 entries, 20 / 53 of them num_batches_tracked.
  for (const auto& [arch, expected] :
       std::vector<std::pair<std::string, size_t>>{{"resnet18", 102}, {"resnet50", 267}}) {
    INFO(arch);
    const nn::StateDict state = build(small_resnet_options(arch, 1000), 0)->state_dict();
    CHECK(state.size() == expected);
    for (const char* name : {"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
                             "layer1.0.conv1.weight", "layer1.0.bn2.running_var", "layer2.0.downsample.0.weight",
                             "layer2.0.downsample.1.running_mean", "layer4.1.bn1.bias", "fc.weight", "fc.bias"})
      CHECK(state.count(name) == 1);
  }
  CHECK(build(small_resnet_options("resnet50"), 0)->state_dict().count("layer3.5.conv3.weight") == 1);
}

TEST_CASE("init_from: a torchvision-style file loads into a fresh model, logits equal bit for bit", "[init_from]") {
  TemporaryFolder folder;
  for (const std::string arch : {"resnet18", "resnet50"}) {
    INFO(arch);
    auto source = build(small_resnet_options(arch), 1);
    randomise_batch_norms(*source, 2);
    const fs::path file = folder.path / (arch + ".safetensors");
    const NamedTensors tensors = torchvision_style(*source);
    write_safetensors(file, tensors, {{"format", "pt"}});

    auto target = build(small_resnet_options(arch), 3);
    Generator generator(4);
    const Tensor input = Tensor::normal({2, 3, 32, 32}, 0.0, 1.0, generator);
    const std::vector<float> expected = eval_logits(*source, input);
    REQUIRE_FALSE(same_bits(eval_logits(*target, input), expected));  // another seed: other weights

    const InitFromReport report = load_init_weights(*target, file, true);
    CHECK(report.complete());
    CHECK(report.problems().empty());
    CHECK(report.loaded.size() == source->state_dict().size());
    CHECK(report.skipped.size() == tensors.size() - source->state_dict().size());
    CHECK(report.skipped.front().find(".num_batches_tracked") != std::string::npos);
    CHECK(values_of(*target) == values_of(*source));
    CHECK(same_bits(eval_logits(*target, input), expected));
  }
}

TEST_CASE("init_from: f16, bf16 and f64 files are converted to the model's f32", "[init_from]") {
  auto source = build(small_resnet_options("resnet18"), 1);
  randomise_batch_norms(*source, 2);
  for (DType dtype : {DType::f16, DType::bf16, DType::f64}) {
    INFO(dtype_name(dtype));
    NamedTensors tensors;
    for (const auto& [name, tensor] : source->state_dict()) tensors.emplace_back(name, tensor.to(dtype));
    auto target = build(small_resnet_options("resnet18"), 3);
    CHECK(load_init_weights(*target, tensors, "converted.safetensors", true).complete());
    const nn::StateDict loaded = target->state_dict();
    for (const auto& [name, tensor] : tensors) {
      INFO(name);
      CHECK(loaded.at(name).dtype() == DType::f32);
      CHECK(loaded.at(name).to_vector<float>() == tensor.to(DType::f32).to_vector<float>());
    }
  }
}

TEST_CASE("init_from: misfits are all listed, strict refuses and loads nothing, non-strict loads the rest",
          "[init_from]") {
  auto source = build(small_resnet_options("resnet18", 1000), 1);  // an ImageNet head
  randomise_batch_norms(*source, 2);
  NamedTensors tensors = without(without(torchvision_style(*source), "layer1.0.bn1.bias"), "layer3.1.conv2.weight");
  tensors.emplace_back("head.weight", Tensor::zeros({3, 3}));  // unknown to the model
  for (auto& [name, tensor] : tensors)
    if (name == "layer2.0.conv1.weight") tensor = tensor.to(DType::i32);  // integer bits for a float weight

  const models::ModelOptions ten_classes = small_resnet_options("resnet18", 10);  // fine-tune: another fc
  auto target = build(ten_classes, 3);
  const auto fresh = values_of(*target);
  try {
    load_init_weights(*target, tensors, "/data/imagenet-resnet18.safetensors", true);
    FAIL("a strict load of a file that does not fit succeeded");
  } catch (const DataError& error) {
    const std::string message = error.what();
    INFO(message);
    CHECK_THAT(message,
               Catch::StartsWith("/data/imagenet-resnet18.safetensors does not fit the model (ResNet, strict)"));
    CHECK_THAT(message, Catch::Contains("2 missing: layer1.0.bn1.bias, layer3.1.conv2.weight"));
    CHECK_THAT(message, Catch::Contains("1 unexpected: head.weight"));
    CHECK_THAT(message, Catch::Contains("2 shape mismatches: fc.bias (file [1000], model [10]), fc.weight (file "
                                        "[1000, 64], model [10, 64])"));
    CHECK_THAT(message, Catch::Contains("1 dtype mismatch: layer2.0.conv1.weight (file i32, model f32)"));
    CHECK_THAT(message, Catch::EndsWith("nothing was loaded"));
    CHECK_THAT(message, !Catch::Contains("num_batches_tracked"));
  }
  CHECK(values_of(*target) == fresh);

  const InitFromReport report = load_init_weights(*target, tensors, "imagenet-resnet18.safetensors", false);
  CHECK_FALSE(report.complete());
  CHECK(report.missing == std::vector<std::string>{"layer1.0.bn1.bias", "layer3.1.conv2.weight"});
  CHECK(report.unexpected == std::vector<std::string>{"head.weight"});
  CHECK(report.shape_mismatches.size() == 2);
  CHECK(report.dtype_mismatches.size() == 1);
  CHECK(report.skipped.size() == 20);  // the 20 BatchNorms of a ResNet-18
  const auto loaded = values_of(*target);
  const auto original = values_of(*source);
  const std::set<std::string> kept_fresh = {"layer1.0.bn1.bias", "layer3.1.conv2.weight", "fc.weight", "fc.bias",
                                            "layer2.0.conv1.weight"};
  for (const auto& [name, values] : loaded) {
    INFO(name);
    CHECK(values == (kept_fresh.count(name) ? fresh.at(name) : original.at(name)));
  }
  CHECK(report.loaded.size() == loaded.size() - kept_fresh.size());
}

TEST_CASE("init_from: a missing or corrupt file is a DataError naming it", "[init_from]") {
  TemporaryFolder folder;
  auto model = build(small_resnet_options("resnet18"), 1);
  CHECK_THROWS_AS(load_init_weights(*model, folder.path / "absent.safetensors", false), DataError);
  std::ofstream(folder.path / "short.safetensors") << "1234";
  CHECK_THROWS_WITH(load_init_weights(*model, folder.path / "short.safetensors", false),
                    Catch::Contains((folder.path / "short.safetensors").string()));
}

namespace {

// A small ResNet on tiny synthetic images, so the trainer builds in milliseconds.
const char* kTinyResnetYaml = R"(
run: {name: tiny_resnet}
model: {arch: resnet18, width: 4, stem: cifar}
data:
  dataset: synthetic
  batch_size: 16
  eval_batch_size: 64
  synthetic: {train_size: 64, test_size: 32, channels: 3, height: 8, width: 8, num_classes: 4, seed: 3}
train: {epochs: 0, max_steps: 2, seed: 1, device: cpu}
optimizer: {name: sgd, lr: 0.01}
logging: {every_steps: 1, progress: plain}
checkpoint: {every_epochs: 0, keep_last: 0}
)";

using opsnn::testing::read_text;

}  // namespace

TEST_CASE("trainer: model.init_from loads the file before training, init_strict refuses or warns", "[init_from]") {
  TemporaryFolder folder;
  // The weights of another run (train.seed 9), saved as a torchvision export would be.
  Trainer donor(load_config_text(kTinyResnetYaml, "donor.yaml", {"train.seed=9"}),
                quiet_options(folder.path / "donor"));
  const fs::path file = folder.path / "donor.safetensors";
  write_safetensors(file, torchvision_style(donor.model()));
  const auto donor_values = values_of(donor.model());

  const std::string init = "model.init_from=" + file.string();
  Trainer loaded(load_config_text(kTinyResnetYaml, "run.yaml", {init}), quiet_options(folder.path / "loaded"));
  CHECK(values_of(loaded.model()) == donor_values);
  CHECK_THAT(read_text(folder.path / "loaded" / "train.log"),
             Catch::Contains("model.init_from: 102 of the model's 102 tensors from " + file.string() +
                             " (20 num_batches_tracked counters skipped: opsnn keeps none)"));

  // A head of 6 classes: strict refuses naming the key, the file and fc; non-strict keeps a fresh fc.
  const std::vector<std::string> six_classes = {init, "model.num_classes=6"};
  try {
    Trainer refused(load_config_text(kTinyResnetYaml, "run.yaml", six_classes), quiet_options(folder.path / "refused"));
    FAIL("init_strict accepted a file with another fc");
  } catch (const DataError& error) {
    const std::string message = error.what();
    INFO(message);
    CHECK_THAT(message, Catch::StartsWith("run.yaml: key 'model.init_from': " + file.string() + " does not fit"));
    CHECK_THAT(message, Catch::Contains("2 shape mismatches: fc.bias (file [4], model [6]), fc.weight (file [4, 32], "
                                        "model [6, 32])"));
    CHECK_THAT(message, Catch::EndsWith("(model.init_strict: false loads the tensors that fit)"));
  }
  std::vector<std::string> lenient = six_classes;
  lenient.push_back("model.init_strict=false");
  Trainer fine_tune(load_config_text(kTinyResnetYaml, "run.yaml", lenient), quiet_options(folder.path / "lenient"));
  Trainer fresh(load_config_text(kTinyResnetYaml, "run.yaml", {"model.num_classes=6"}),
                quiet_options(folder.path / "fresh"));
  const auto tuned = values_of(fine_tune.model()), fresh_values = values_of(fresh.model());
  for (const auto& [name, values] : tuned) {
    INFO(name);
    CHECK(values == (name.rfind("fc.", 0) == 0 ? fresh_values.at(name) : donor_values.at(name)));
  }
  CHECK_THAT(read_text(folder.path / "lenient" / "train.log"),
             Catch::Contains("model.init_from (init_strict false): 2 shape mismatches: fc.bias") &&
                 Catch::Contains("keep their fresh initialisation"));
  fine_tune.train_steps(1);  // and it trains

  // A file that is not there is a DataError naming the key.
  CHECK_THROWS_WITH(Trainer(load_config_text(kTinyResnetYaml, "run.yaml", {"model.init_from=absent.safetensors"}),
                            quiet_options(folder.path / "absent")),
                    Catch::Contains("run.yaml: key 'model.init_from': absent.safetensors does not exist"));
}

TEST_CASE("trainer: model.init_from is ignored when resuming from a checkpoint", "[init_from]") {
  TemporaryFolder folder;
  const fs::path run = folder.path / "run";
  fs::path checkpoint;
  std::map<std::string, std::vector<float>> saved;
  {
    Trainer first(load_config_text(kTinyResnetYaml, "run.yaml"), quiet_options(run));
    first.train_steps(1);
    checkpoint = first.save_checkpoint();
    saved = values_of(first.model());
  }
  // Not even read: a file that does not exist is no error when the weights come from the checkpoint.
  Trainer resumed(load_config_text(kTinyResnetYaml, "run.yaml", {"model.init_from=absent.safetensors"}),
                  quiet_options(run, "auto"));
  CHECK(resumed.step() == 1);
  CHECK(values_of(resumed.model()) == saved);
  CHECK_THAT(read_text(run / "train.log"),
             Catch::Contains("model.init_from absent.safetensors not used: the weights come from the checkpoint " +
                             checkpoint.string()));
}
