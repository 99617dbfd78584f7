// The built-in layers: parameter registration with PyTorch's default initialisation, input checks that
// name the layer, and forward passes through the differentiable ops of ops.h.
#include "opsnn/nn/layers.h"

#include <cmath>

#include "opsnn/core/error.h"
#include "opsnn/nn/init.h"
#include "opsnn/ops/ops.h"

namespace opsnn::nn {
namespace {

void check_positive(int64_t value, const char* layer, const char* option) {
  OPSNN_CHECK_AS(ConfigError, value > 0, layer, ": ", option, " must be positive, got ", value);
}

// PyTorch's reset_parameters for Linear and Conv: kaiming_uniform_(a = sqrt(5)) for the weight, which
// works out to a bound of 1/sqrt(fan_in), and the same bound for the bias.
void default_uniform_init(const Tensor& weight, const Tensor& bias, Generator& generator) {
  init::kaiming_uniform_(weight, generator, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(init::compute_fans(weight.shape()).fan_in));
    init::uniform_(bias, -bound, bound, generator);
  }
}

std::string bool_text(bool value) { return value ? "true" : "false"; }

// t cast (with autograd) to the module's compute dtype when that is low precision, read from the
// parameter copy the module was given for t when there is one; f32 modules leave every dtype as it is.
// Undefined tensors (no bias) pass through.
Tensor in_compute_dtype(const Module& module, const Tensor& t) {
  if (module.compute_dtype() == DType::f32 || !t.defined()) return t;
  if (Tensor copy = module.parameter_copy(t); copy.defined()) return ops::cast_from_copy(t, copy);
  return ops::cast(t, module.compute_dtype());
}

}  // namespace

// ---- Linear ----

Linear::Linear(const LinearOptions& options, Generator& generator) : Module("Linear"), options_(options) {
  check_positive(options.in_features(), "Linear", "in_features");
  check_positive(options.out_features(), "Linear", "out_features");
  weight_ = register_parameter("weight", Tensor::empty({options.out_features(), options.in_features()}));
  if (options.bias()) bias_ = register_parameter("bias", Tensor::empty({options.out_features()}));
  reset_parameters(generator);
}

void Linear::reset_parameters(Generator& generator) { default_uniform_init(weight_, bias_, generator); }

Tensor Linear::forward(const Tensor& input) {
  OPSNN_CHECK_AS(ShapeError, input.dim() >= 1 && input.size(-1) == options_.in_features(), "Linear(", extra_repr(),
                 "): input ", shape_str(input.shape()), " does not end in ", options_.in_features(), " features");
  return ops::linear(in_compute_dtype(*this, input), in_compute_dtype(*this, weight_), in_compute_dtype(*this, bias_));
}

std::string Linear::extra_repr() const {
  return detail::concat("in_features=", options_.in_features(), ", out_features=", options_.out_features(),
                        ", bias=", bool_text(options_.bias()));
}

// ---- Conv2d ----

Conv2d::Conv2d(const Conv2dOptions& options, Generator& generator) : Module("Conv2d"), options_(options) {
  check_positive(options.in_channels(), "Conv2d", "in_channels");
  check_positive(options.out_channels(), "Conv2d", "out_channels");
  check_positive(options.kernel_size(), "Conv2d", "kernel_size");
  check_positive(options.stride(), "Conv2d", "stride");
  OPSNN_CHECK_AS(ConfigError, options.padding() >= 0, "Conv2d: padding must not be negative, got ", options.padding());
  int64_t k = options.kernel_size();
  weight_ = register_parameter("weight", Tensor::empty({options.out_channels(), options.in_channels(), k, k}));
  if (options.bias()) bias_ = register_parameter("bias", Tensor::empty({options.out_channels()}));
  reset_parameters(generator);
}

void Conv2d::reset_parameters(Generator& generator) { default_uniform_init(weight_, bias_, generator); }

ops::Conv2dGeometry Conv2d::geometry() const {
  ops::Conv2dGeometry geometry;
  geometry.stride_h = geometry.stride_w = options_.stride();
  geometry.pad_h = geometry.pad_w = options_.padding();
  geometry.channels_last = options_.channels_last();
  return geometry;
}

Tensor Conv2d::forward(const Tensor& input) {
  if (options_.channels_last())
    OPSNN_CHECK_AS(ShapeError, input.dim() == 4 && input.size(3) == options_.in_channels(), "Conv2d(", extra_repr(),
                   "): expected input [N, H, W, ", options_.in_channels(), "], got ", shape_str(input.shape()));
  else
    OPSNN_CHECK_AS(ShapeError, input.dim() == 4 && input.size(1) == options_.in_channels(), "Conv2d(", extra_repr(),
                   "): expected input [N, ", options_.in_channels(), ", H, W], got ", shape_str(input.shape()));
  return ops::conv2d(in_compute_dtype(*this, input), in_compute_dtype(*this, weight_), in_compute_dtype(*this, bias_),
                     geometry());
}

std::string Conv2d::extra_repr() const {
  return detail::concat(options_.in_channels(), ", ", options_.out_channels(), ", kernel_size=", options_.kernel_size(),
                        ", stride=", options_.stride(), ", padding=", options_.padding(),
                        ", bias=", bool_text(options_.bias()), options_.channels_last() ? ", channels_last=true" : "");
}

// ---- BatchNorm2d ----

BatchNorm2d::BatchNorm2d(const BatchNorm2dOptions& options) : Module("BatchNorm2d"), options_(options) {
  check_positive(options.num_features(), "BatchNorm2d", "num_features");
  OPSNN_CHECK_AS(ConfigError, options.eps() > 0, "BatchNorm2d: eps must be positive, got ", options.eps());
  OPSNN_CHECK_AS(ConfigError, options.momentum() >= 0 && options.momentum() <= 1,
                 "BatchNorm2d: momentum must be in [0, 1], got ", options.momentum());
  const Shape channels{options.num_features()};
  weight_ = register_parameter("weight", Tensor::empty(channels));
  bias_ = register_parameter("bias", Tensor::empty(channels));
  running_mean_ = register_buffer("running_mean", Tensor::empty(channels));
  running_var_ = register_buffer("running_var", Tensor::empty(channels));
  reset_parameters();
}

void BatchNorm2d::reset_parameters() {
  init::ones_(weight_);
  init::zeros_(bias_);
  init::zeros_(running_mean_);
  init::ones_(running_var_);
}

void BatchNorm2d::check_input(const Tensor& input) const {
  if (options_.channels_last()) {
    OPSNN_CHECK_AS(ShapeError, input.dim() >= 2 && input.size(-1) == options_.num_features(), "BatchNorm2d(",
                   extra_repr(), "): expected input [N, ..., ", options_.num_features(), "], got ",
                   shape_str(input.shape()));
    return;
  }
  OPSNN_CHECK_AS(ShapeError, input.dim() >= 2 && input.size(1) == options_.num_features(), "BatchNorm2d(", extra_repr(),
                 "): expected input [N, ", options_.num_features(), ", ...], got ", shape_str(input.shape()));
}

Tensor BatchNorm2d::forward(const Tensor& input) {
  check_input(input);
  if (reducer_ && is_training()) return synchronized(input, false);
  return ops::batch_norm(input, weight_, bias_, running_mean_, running_var_, is_training(), options_.momentum(),
                         options_.eps(), options_.channels_last());
}

Tensor BatchNorm2d::forward_relu(const Tensor& input) {
  check_input(input);
  if (reducer_ && is_training()) return synchronized(input, true);
  return ops::batch_norm_relu(input, weight_, bias_, running_mean_, running_var_, is_training(), options_.momentum(),
                              options_.eps(), options_.channels_last());
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& input, const Tensor& residual) {
  check_input(input);
  // Synchronised statistics come from sync_batch_norm's composition; the add and relu follow it.
  if (reducer_ && is_training()) return ops::add_relu(synchronized(input, false), residual);
  return ops::batch_norm_add_relu(input, residual, weight_, bias_, running_mean_, running_var_, is_training(),
                                  options_.momentum(), options_.eps(), options_.channels_last());
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& input, BatchNorm2d& shortcut_norm, const Tensor& shortcut) {
  const bool fusable = is_training() == shortcut_norm.is_training() &&
                       options_.channels_last() == shortcut_norm.options_.channels_last() &&
                       !(is_training() && (reducer_ || shortcut_norm.reducer_));
  if (!fusable) return forward_add_relu(input, shortcut_norm.forward(shortcut));
  check_input(input);
  shortcut_norm.check_input(shortcut);
  const auto args = [](const BatchNorm2d& layer) {
    return ops::BatchNormArgs{
        layer.weight_,       layer.bias_, layer.running_mean_, layer.running_var_, layer.options_.momentum(),
        layer.options_.eps()};
  };
  return ops::dual_batch_norm_add_relu(input, args(*this), shortcut, args(shortcut_norm), is_training(),
                                       options_.channels_last());
}

Tensor BatchNorm2d::forward_relu_max_pool(const Tensor& input, const MaxPool2d& pool) {
  if (options_.channels_last() || (reducer_ && is_training()))
    return ops::max_pool2d(forward_relu(input), pool.geometry());
  check_input(input);
  return ops::batch_norm_relu_max_pool2d(input, weight_, bias_, running_mean_, running_var_, is_training(),
                                         options_.momentum(), options_.eps(), pool.geometry());
}

void BatchNorm2d::set_reducer(std::shared_ptr<BatchStatisticsReducer> reducer, std::string name) {
  reducer_ = std::move(reducer);
  reducer_name_ = std::move(name);
}

Tensor BatchNorm2d::synchronized(const Tensor& input, bool relu) {
  return sync_batch_norm(input, weight_, bias_, running_mean_, running_var_, options_.momentum(), options_.eps(),
                         options_.channels_last(), relu, reducer_, "SyncBatchNorm statistics of " + reducer_name_);
}

std::string BatchNorm2d::extra_repr() const {
  return detail::concat(options_.num_features(), ", eps=", options_.eps(), ", momentum=", options_.momentum(),
                        options_.channels_last() ? ", channels_last=true" : "");
}

// ---- Embedding ----

Embedding::Embedding(const EmbeddingOptions& options, Generator& generator) : Module("Embedding"), options_(options) {
  check_positive(options.num_embeddings(), "Embedding", "num_embeddings");
  check_positive(options.embedding_dim(), "Embedding", "embedding_dim");
  weight_ = register_parameter("weight", Tensor::empty({options.num_embeddings(), options.embedding_dim()}));
  weight_.set_sparse_grad(options.sparse());
  reset_parameters(generator);
}

void Embedding::reset_parameters(Generator& generator) { init::normal_(weight_, 0.0, 1.0, generator); }

Tensor Embedding::forward(const Tensor& indices) {
  OPSNN_CHECK_AS(TypeError, indices.dtype() == DType::i64, "Embedding(", extra_repr(), "): indices must be i64, got ",
                 indices.str());
  return ops::embedding(weight_, indices);
}

std::string Embedding::extra_repr() const {
  return detail::concat(options_.num_embeddings(), ", ", options_.embedding_dim(),
                        options_.sparse() ? ", sparse=true" : "");
}

// ---- layers without parameters ----

Tensor ReLU::forward(const Tensor& input) { return ops::relu(input); }

static ops::Pool2dGeometry pool_geometry(int64_t kernel_size, int64_t stride, int64_t padding, const char* layer) {
  check_positive(kernel_size, layer, "kernel_size");
  check_positive(stride, layer, "stride");
  OPSNN_CHECK_AS(ConfigError, padding >= 0 && 2 * padding <= kernel_size, layer,
                 ": padding must be in [0, kernel_size / 2], got ", padding, " for kernel_size ", kernel_size);
  ops::Pool2dGeometry geometry;
  geometry.kernel_h = geometry.kernel_w = kernel_size;
  geometry.stride_h = geometry.stride_w = stride;
  geometry.pad_h = geometry.pad_w = padding;
  return geometry;
}

MaxPool2d::MaxPool2d(const MaxPool2dOptions& options) : Module("MaxPool2d"), options_(options) {
  pool_geometry(options.kernel_size(), options.stride(), options.padding(), "MaxPool2d");
}

Tensor MaxPool2d::forward(const Tensor& input) { return ops::max_pool2d(input, geometry()); }

ops::Pool2dGeometry MaxPool2d::geometry() const {
  return pool_geometry(options_.kernel_size(), options_.stride(), options_.padding(), "MaxPool2d");
}

std::string MaxPool2d::extra_repr() const {
  return detail::concat("kernel_size=", options_.kernel_size(), ", stride=", options_.stride(),
                        ", padding=", options_.padding());
}

AvgPool2d::AvgPool2d(const AvgPool2dOptions& options) : Module("AvgPool2d"), options_(options) {
  pool_geometry(options.kernel_size(), options.stride(), options.padding(), "AvgPool2d");
}

Tensor AvgPool2d::forward(const Tensor& input) {
  ops::Pool2dGeometry geometry =
      pool_geometry(options_.kernel_size(), options_.stride(), options_.padding(), "AvgPool2d");
  geometry.count_include_pad = options_.count_include_pad();
  return ops::avg_pool2d(input, geometry);
}

std::string AvgPool2d::extra_repr() const {
  return detail::concat("kernel_size=", options_.kernel_size(), ", stride=", options_.stride(),
                        ", padding=", options_.padding(),
                        ", count_include_pad=", bool_text(options_.count_include_pad()));
}

Tensor GlobalAvgPool::forward(const Tensor& input) { return ops::global_avg_pool2d(input); }

Flatten::Flatten(int64_t start_dim, int64_t end_dim) : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}

Tensor Flatten::forward(const Tensor& input) { return ops::flatten(input, start_dim_, end_dim_); }

std::string Flatten::extra_repr() const { return detail::concat("start_dim=", start_dim_, ", end_dim=", end_dim_); }

}  // namespace opsnn::nn
