// The model zoo and its registry: mlp, small_cnn, resnet18/34/50 (basic and bottleneck blocks, imagenet
// or cifar stem) and ctr (sparse embeddings + MLP). Models are nn::Modules built from ModelOptions;
// architecture files under models/ (YAML) fill ModelOptions through the config loader.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "opsnn/core/device.h"
#include "opsnn/core/dtype.h"
#include "opsnn/core/rng.h"
#include "opsnn/nn/module.h"

namespace opsnn::models {

struct ModelOptions {
  std::string arch = "small_cnn";
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  int64_t image_size = 28;                        // height = width of the input images (mlp, small_cnn)
  std::vector<int64_t> hidden = {256, 128, 100};  // mlp hidden widths; ctr's MLP on the embeddings
  int64_t width = 0;                              // base channel count (resnet 64, small_cnn 16); 0 = default
  std::string stem = "imagenet";                  // resnet: imagenet (7x7/2 + max-pool) | cifar (3x3/1, no pool)
  bool zero_init_residual = false;                // resnet: last BatchNorm of each block starts at weight 0
  bool channels_last = false;                     // resnet: residual stages run on NHWC activations
  std::vector<int64_t> field_vocab_sizes;         // ctr: categories of each field
  int64_t embedding_dim = 16;                     // ctr
  bool sparse_embeddings = true;                  // ctr: row-sparse embedding gradients
};

using ModelBuilder = std::function<std::shared_ptr<nn::Module>(const ModelOptions&, Generator&)>;

// Registers a builder under a name (adds or replaces).
void register_model(const std::string& name, ModelBuilder builder);
// The built-in models (mlp, small_cnn, resnet18/34/50, ctr): their names in the order configs list them,
// and their registration (what opsnn::register_builtins does for the models).
const std::vector<std::string>& builtin_model_names();
void register_builtin_models();
// Builds options.arch; an unknown name throws ConfigError listing the known ones.
std::shared_ptr<nn::Module> build_model(const ModelOptions& options, Generator& generator);
std::vector<std::string> known_models();

// The individual builders, usable directly.
std::shared_ptr<nn::Module> make_mlp(const ModelOptions& options, Generator& generator);
std::shared_ptr<nn::Module> make_small_cnn(const ModelOptions& options, Generator& generator);
// depth 18, 34 (basic blocks) or 50 (bottleneck blocks), torchvision layout and initialisation.
std::shared_ptr<nn::Module> make_resnet(int depth, const ModelOptions& options, Generator& generator);
// What `channels_last: auto` means: NHWC residual stages on a CUDA device where the convolutions run on
// tensor cores - f16 or bf16 activations, or f32 with tf32 math (cuDNN's tensor-core convolutions work on
// NHWC data; with NCHW they transpose around each one) - NCHW elsewhere.
bool channels_last_by_default(Device device, DType compute_dtype, bool tf32);
std::shared_ptr<nn::Module> make_ctr(const ModelOptions& options, Generator& generator);

int64_t count_parameters(const nn::Module& module);

}  // namespace opsnn::models
