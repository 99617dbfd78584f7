// Synchronised batch norm (sync_batch_norm.h): the collective op all_reduce_sum and the training-mode batch
// norm composed around it from the differentiable ops of ops.h, so that autograd derives the backward
// through the global statistics; set_batch_norm_reducer walks a module tree.
#include "opsnn/nn/sync_batch_norm.h"

#include "opsnn/autograd/node.h"
#include "opsnn/core/error.h"
#include "opsnn/nn/layers.h"
#include "opsnn/ops/ops.h"

namespace opsnn::nn {
namespace {

// The backward of all_reduce_sum: the gradient of the sum over ranks is the sum over ranks of the
// gradients, so each rank all-reduces its incoming gradient and every part takes its piece.
class AllReduceSumBackward final : public autograd::Node {
 public:
  AllReduceSumBackward(std::shared_ptr<BatchStatisticsReducer> reducer, std::string what, std::vector<Shape> shapes,
                       DType dtype)
      : reducer_(std::move(reducer)), what_(std::move(what)), shapes_(std::move(shapes)), dtype_(dtype) {}
  std::string name() const override { return "AllReduceSumBackward"; }

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    // A copy of its own: the reduction is in place and the engine's gradient may be shared.
    const Tensor grad = grad_output.to(dtype_).contiguous().clone();
    reducer_->all_reduce_sum(grad, "gradient of " + what_);
    std::vector<Tensor> grads(shapes_.size());
    int64_t offset = 0;
    for (size_t i = 0; i < shapes_.size(); ++i) {
      const int64_t size = shape_numel(shapes_[i]);
      if (needs_grad(i)) grads[i] = grad.slice(0, offset, offset + size).view(shapes_[i]);
      offset += size;
    }
    return grads;
  }

 private:
  std::shared_ptr<BatchStatisticsReducer> reducer_;
  std::string what_;
  std::vector<Shape> shapes_;
  DType dtype_;
};

bool is_low_precision(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

// A per-channel tensor (gamma, beta, running statistics) against the input, as ops::batch_norm checks it;
// undefined passes.
void check_channel_tensor(const Tensor& input, const Tensor& tensor, int64_t channels, DType dtype, const char* what) {
  if (!tensor.defined()) return;
  OPSNN_CHECK_AS(ShapeError, tensor.dim() == 1 && tensor.size(0) == channels, "sync_batch_norm: ", what, " ",
                 shape_str(tensor.shape()), " does not match input ", shape_str(input.shape()), " (expected [",
                 channels, "])");
  OPSNN_CHECK_AS(TypeError, tensor.dtype() == dtype, "sync_batch_norm: ", what, " ", tensor.str(), " must be ",
                 dtype_name(dtype), " for input ", input.str(),
                 is_low_precision(input.dtype()) ? " (f16/bf16 inputs keep per-channel tensors in f32)" : "");
  OPSNN_CHECK_AS(DeviceError, tensor.device() == input.device(), "sync_batch_norm: ", what, " ", tensor.str(),
                 " is not on the input's device (input ", input.str(), ")");
}

}  // namespace

Tensor all_reduce_sum(const std::vector<Tensor>& parts, const std::shared_ptr<BatchStatisticsReducer>& reducer,
                      const std::string& what) {
  OPSNN_CHECK_AS(UsageError, reducer != nullptr, "all_reduce_sum (", what, "): no reducer");
  OPSNN_CHECK_AS(ShapeError, !parts.empty(), "all_reduce_sum (", what, "): no tensors to reduce");
  const Tensor& first = parts.front();
  OPSNN_CHECK_AS(TypeError, first.dtype() == DType::f32 || first.dtype() == DType::f64, "all_reduce_sum (", what,
                 "): tensors must be f32 or f64, got ", first.str());
  int64_t total = 0;
  std::vector<Shape> shapes;
  for (const Tensor& part : parts) {
    OPSNN_CHECK_AS(TypeError, part.dtype() == first.dtype(), "all_reduce_sum (", what, "): dtype mismatch, ",
                   part.str(), " vs ", first.str());
    OPSNN_CHECK_AS(DeviceError, part.device() == first.device(), "all_reduce_sum (", what, "): device mismatch, ",
                   part.str(), " vs ", first.str());
    shapes.push_back(part.shape());
    total += part.numel();
  }
  Tensor packed = Tensor::empty({total}, first.dtype(), first.device());
  int64_t offset = 0;
  for (const Tensor& part : parts) {
    packed.slice(0, offset, offset + part.numel()).copy_(part.detach().contiguous().view({part.numel()}));
    offset += part.numel();
  }
  reducer->all_reduce_sum(packed, what);
  if (!autograd::any_requires_grad(parts)) return packed;
  return autograd::record(packed, std::make_shared<AllReduceSumBackward>(reducer, what, shapes, first.dtype()), parts);
}

Tensor sync_batch_norm(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                       Tensor& running_var, double momentum, double eps, bool channels_last, bool relu,
                       const std::shared_ptr<BatchStatisticsReducer>& reducer, const std::string& what) {
  OPSNN_CHECK_AS(UsageError, reducer != nullptr, "sync_batch_norm (", what, "): no reducer");
  OPSNN_CHECK_AS(ShapeError, input.dim() >= 2 && input.numel() > 0, "sync_batch_norm: input must be a non-empty ",
                 channels_last ? "[N, ..., C]" : "[N, C] or [N, C, ...]", ", got ", input.str());
  OPSNN_CHECK_AS(TypeError, is_floating(input.dtype()), "sync_batch_norm: input must be floating, got ", input.str());
  OPSNN_CHECK_AS(ConfigError, eps >= 0.0, "sync_batch_norm: eps must not be negative, got ", eps);
  OPSNN_CHECK_AS(ConfigError, momentum >= 0.0 && momentum <= 1.0, "sync_batch_norm: momentum must lie in [0, 1], got ",
                 momentum);
  const int64_t channels = channels_last ? input.size(-1) : input.size(1);
  // Mixed precision: statistics, gamma and beta in f32 for f16/bf16 activations, as ops::batch_norm.
  const DType stats_dtype = is_low_precision(input.dtype()) ? DType::f32 : input.dtype();
  check_channel_tensor(input, gamma, channels, stats_dtype, "gamma");
  check_channel_tensor(input, beta, channels, stats_dtype, "beta");
  check_channel_tensor(input, running_mean, channels, stats_dtype, "running_mean");
  check_channel_tensor(input, running_var, channels, stats_dtype, "running_var");
  const int64_t count = input.numel() / channels;
  OPSNN_CHECK_AS(ShapeError, count > 1 || reducer->world_size() > 1,
                 "sync_batch_norm: training on one rank needs more than one value per channel, input ",
                 shape_str(input.shape()));

  // x: the input in the statistics' dtype with the channels on axis 1 (a channels-last input as its
  // [rows, C] matrix); statistics reduce every other axis and broadcast back as [1, C, 1, ...].
  Tensor x = input.dtype() == stats_dtype ? input : ops::cast(input, stats_dtype);
  if (channels_last) x = ops::reshape(x, {-1, channels});
  std::vector<int64_t> reduced{0};
  for (int64_t d = 2; d < x.dim(); ++d) reduced.push_back(d);
  Shape channel_shape(static_cast<size_t>(x.dim()), 1);
  channel_shape[1] = channels;

  // One collective: [sum x, sum x^2, count] of this rank -> of the global batch.
  const Tensor local_count = Tensor::full({1}, static_cast<double>(count), stats_dtype, input.device());
  const Tensor totals =
      all_reduce_sum({ops::sum(x, reduced), ops::sum(ops::mul(x, x), reduced), local_count}, reducer, what);
  // The count depends on no input: a plain view, outside the graph.
  const Tensor global_count = totals.detach().slice(0, 2 * channels, 2 * channels + 1);
  const Tensor mean = ops::div(ops::slice(totals, 0, channels), global_count);
  const Tensor mean_square = ops::div(ops::slice(totals, channels, 2 * channels), global_count);
  // Biased, for the normalisation; rounding may take E[x^2] - E[x]^2 just below 0.
  const Tensor var = ops::relu(ops::sub(mean_square, ops::mul(mean, mean)));
  const Tensor invstd = ops::batch_norm_invstd(var, eps);
  const Tensor scale = gamma.defined() ? ops::mul(gamma, invstd) : invstd;
  Tensor out = ops::mul(ops::sub(x, ops::reshape(mean, channel_shape)), ops::reshape(scale, channel_shape));
  if (beta.defined()) out = ops::add(out, ops::reshape(beta, channel_shape));
  if (channels_last) out = ops::reshape(out, input.shape());
  if (out.dtype() != input.dtype()) out = ops::cast(out, input.dtype());
  if (relu) out = ops::relu(out);

  // running = (1 - momentum) * running + momentum * statistic, the variance unbiased with the global count.
  autograd::NoGradGuard no_grad;
  if (running_mean.defined())
    running_mean.copy_(ops::add(ops::scale(running_mean, 1.0 - momentum), ops::scale(mean.detach(), momentum)));
  if (running_var.defined()) {
    const Tensor one = Tensor::ones({1}, stats_dtype, input.device());
    const Tensor unbiased = ops::mul(var.detach(), ops::div(global_count, ops::sub(global_count, one)));
    running_var.copy_(ops::add(ops::scale(running_var, 1.0 - momentum), ops::scale(unbiased, momentum)));
  }
  return out;
}

int64_t set_batch_norm_reducer(Module& root, const std::shared_ptr<BatchStatisticsReducer>& reducer) {
  int64_t layers = 0;
  auto visit = [&](Module& module, const std::string& name) {
    if (auto* norm = dynamic_cast<BatchNorm2d*>(&module)) {
      norm->set_reducer(reducer, name);
      ++layers;
    }
  };
  visit(root, root.type_name());
  for (const auto& [name, module] : root.named_modules()) visit(*module, name);
  return layers;
}

}  // namespace opsnn::nn
