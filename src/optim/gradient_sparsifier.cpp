// Top-k sparsification of an optimizer's dense gradient arena (step_extensions.h): the checks that tie the
// sparsifier to the optimizer, the per-step call and its checkpoint state.
#include <cmath>

#include "opsnn/autograd/node.h"
#include "opsnn/core/error.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/step_extensions.h"
#include "optim/extension_state.h"

namespace opsnn::optim {

GradientSparsifier::GradientSparsifier(const Optimizer& optimizer, const TopKOptions& options) {
  const OptimizerOptions& settings = optimizer.options();
  OPSNN_CHECK_AS(ConfigError, !settings.loss_scaling().enabled(),
                 "top-k sparsification works on unscaled gradients and cannot be combined with loss scaling");
  if (options.momentum_correction) {
    const OptimizerDescriptor& descriptor = optimizer.descriptor();
    OPSNN_CHECK_AS(ConfigError, descriptor.has_momentum_option && settings.momentum() == 0.0 && !settings.nesterov(),
                   "DGC momentum correction keeps the momentum in the sparsifier (TopKOptions::momentum), so the ",
                   optimizer.name(), " optimizer must be plain SGD without momentum of its own (sgd, momentum 0, ",
                   "nesterov off)");
  }
  sparsifier_ =
      std::make_unique<TopKSparsifier>(optimizer.arena().padded_elements(), options, optimizer.arena().device());
  clip_threshold_ = options.local_clip_norm;
}

void GradientSparsifier::set_ranks(int ranks) {
  OPSNN_CHECK_AS(UsageError, ranks >= 1, "GradientSparsifier::set_ranks: ", ranks, " ranks");
  clip_threshold_ = sparsifier_->options().local_clip_norm / std::sqrt(static_cast<double>(ranks));
}

std::optional<TopKStepReport> GradientSparsifier::apply(const Optimizer& optimizer) {
  Tensor gradient = optimizer.arena().grads();
  bool finite = true;
  if (gradient.device().is_cpu()) {
    const float* values = gradient.data<float>();
    int64_t n = gradient.numel();
    for (int64_t i = 0; i < n; ++i) finite &= std::isfinite(values[i]);
  } else {  // sum of g * 0: NaN exactly when some g is inf or NaN (one reduction on the device)
    autograd::NoGradGuard no_grad;
    finite = std::isfinite(ops::sum(ops::scale(gradient, 0.0)).item());
  }
  if (!finite) return std::nullopt;
  // Local gradient clipping (DGC section 3.3): this step's gradient, before it joins the accumulation.
  last_clip_factor_ = 1.0;
  if (clip_threshold_ > 0.0) {
    autograd::NoGradGuard no_grad;
    double sum_of_squares = 0.0;
    if (gradient.device().is_cpu()) {
      const float* values = gradient.data<float>();
      for (int64_t i = 0; i < gradient.numel(); ++i) sum_of_squares += static_cast<double>(values[i]) * values[i];
    } else {
      sum_of_squares = ops::sum(ops::mul(gradient, gradient)).item();
    }
    const double norm = std::sqrt(sum_of_squares);
    if (norm > clip_threshold_) {
      last_clip_factor_ = clip_threshold_ / norm;
      gradient.copy_(ops::scale(gradient, last_clip_factor_));
    }
  }
  float lr = static_cast<float>(optimizer.next_lr());
  return sparsifier_->sparsify(gradient, sparsifier_->steps(), 1.0f, lr);
}

std::vector<std::pair<std::string, Tensor>> GradientSparsifier::state_tensors() const {
  const TopKState& state = sparsifier_->state();
  auto vector_tensor = [](const std::vector<float>& values) {
    return Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  };
  return {{extension_key("topk.accumulator"), vector_tensor(state.accumulator)},
          {extension_key("topk.velocity"), vector_tensor(state.velocity)},
          {extension_key("topk.variance"), vector_tensor(state.variance)},
          {extension_key("topk.steps"), Tensor::from_vector<int64_t>({state.steps}, {})},
          {extension_key("topk.previous_lr"), Tensor::from_vector<float>({state.previous_lr}, {})}};
}

void GradientSparsifier::load_state_tensors(std::map<std::string, Tensor>& tensors) {
  TopKState state;
  auto load_vector = [&](const char* name) {
    const std::string key = extension_key(std::string("topk.") + name);
    auto found = tensors.find(key);
    int64_t numel = found == tensors.end() ? 0 : found->second.numel();
    return take_extension_state(tensors, key, numel, DType::f32).to_vector<float>();
  };
  state.accumulator = load_vector("accumulator");
  state.velocity = load_vector("velocity");
  state.variance = load_vector("variance");
  state.steps = take_extension_state(tensors, extension_key("topk.steps"), 1, DType::i64).to_vector<int64_t>()[0];
  state.previous_lr =
      take_extension_state(tensors, extension_key("topk.previous_lr"), 1, DType::f32).to_vector<float>()[0];
  sparsifier_->load_state(std::move(state));  // checks the buffers against the arena size
}

}  // namespace opsnn::optim
