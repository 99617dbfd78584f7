// The model zoo and its registry: mlp, small_cnn, resnet18/34/50 (basic and bottleneck blocks, imagenet
// or cifar stem), ctr (sparse embeddings + MLP) and dlrm (Criteo rows: bottom MLP, hashed sparse
// embeddings, dot interaction, top MLP). Models are nn::Modules built from ModelOptions; architecture
// files under models/ (YAML) fill ModelOptions through the config loader.
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
  int64_t embedding_dim = 16;                     // ctr, dlrm
  bool sparse_embeddings = true;                  // ctr, dlrm: row-sparse embedding gradients
  // dlrm: table rows of each of the 26 categorical fields (one entry: the same for every field).
  std::vector<int64_t> hash_buckets = {262144};
  std::vector<int64_t> bottom_mlp = {512, 256, 64, 16};  // dlrm: widths on the 13 dense features, last = embedding_dim
  std::vector<int64_t> top_mlp = {512, 256};             // dlrm: hidden widths before the 2 logits
};

using ModelBuilder = std::function<std::shared_ptr<nn::Module>(const ModelOptions&, Generator&)>;

// Registers a builder under a name (adds or replaces).
void register_model(const std::string& name, ModelBuilder builder);
// The built-in models (mlp, small_cnn, resnet18/34/50, ctr, dlrm): their names in the order configs list them,
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
// DLRM after Naumov et al. 2019, "Deep Learning Recommendation Model for Personalization and
// Recommendation Systems", on criteo batches (i64 [B, 39], data/criteo.h): the 13 integer features as
// log(1 + max(x, 0)) (an empty one as 0) through the bottom MLP (ReLU after every layer) to a vector of
// embedding_dim; each of the 26 categorical values hashed (dlrm_hash) into its field's rows of one
// shared embedding table (row-sparse gradients with sparse_embeddings); ops::dot_interaction over the 27
// vectors (351 pairs) beside the bottom output into the top MLP (ReLU after each hidden layer), ending in
// 2 logits (no click / click) for cross-entropy. Each field's rows start uniform in +-sqrt(1 / rows), the
// reference implementation's initialisation; the MLPs have nn::Linear's. ConfigError for bad settings.
std::shared_ptr<nn::Module> make_dlrm(const ModelOptions& options, Generator& generator);
// dlrm's table row within field `field` (0 .. 25) of a raw categorical value (as a criteo batch holds
// it, kCriteoEmpty included: every field has a row for "empty"): splitmix64's finaliser (Steele, Lea and
// Flood 2014, "Fast Splittable Pseudorandom Number Generators") of value + (field + 1) *
// 0x9E3779B97F4A7C15, modulo `buckets`, the field's row count.
int64_t dlrm_hash(int64_t field, int64_t value, int64_t buckets);

int64_t count_parameters(const nn::Module& module);

}  // namespace opsnn::models
