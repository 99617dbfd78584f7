// The row-sparse updater and the top-k gradient sparsifier the trainer plugs into the optimizer (see
// optimizer_hooks.h).
#include "train/optimizer_hooks.h"

#include <algorithm>
#include <cmath>

#include "opsnn/autograd/node.h"
#include "opsnn/core/error.h"
#include "opsnn/ops/ops.h"

namespace opsnn::train {
namespace {

std::string hook_key(const std::string& name) { return std::string(kHookStatePrefix) + name; }

// Removes `key` from `tensors` and returns it; DataError when it is absent or has the wrong element count.
Tensor take_state(std::map<std::string, Tensor>& tensors, const std::string& key, int64_t numel, DType dtype) {
  auto found = tensors.find(key);
  OPSNN_CHECK_AS(DataError, found != tensors.end(), "checkpoint: optimizer state '", key,
                 "' is missing (was the checkpoint written with another optimizer or sparsification setting?)");
  Tensor tensor = found->second;
  tensors.erase(found);
  OPSNN_CHECK_AS(DataError, tensor.numel() == numel && tensor.dtype() == dtype, "checkpoint: optimizer state '", key,
                 "' is ", tensor.str(), ", expected ", numel, " elements of ", dtype_name(dtype));
  return tensor.contiguous();
}

std::vector<float> to_floats(const Tensor& tensor) { return tensor.to_vector<float>(); }

}  // namespace

// ---- row-sparse updates ----

namespace {

// "adam, adamw or sgd": the built-ins that update row-sparse tables, for the message.
std::string sparse_capable_names() {
  std::vector<std::string> names;
  for (const std::string& name : optim::builtin_optimizer_names())
    if (optim::find_optimizer(name)->sparse_capable) names.push_back(name);
  // Adam's family first, as the message always read.
  std::stable_partition(names.begin(), names.end(),
                        [](const std::string& name) { return !optim::find_optimizer(name)->has_momentum_option; });
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return text;
}

}  // namespace

RowSparseUpdater::RowSparseUpdater(const optim::Optimizer& optimizer) {
  std::string_view name = optimizer.name();
  const optim::OptimizerDescriptor& descriptor = optimizer.descriptor();
  const optim::ParamArena& arena = optimizer.arena();
  for (size_t i = 0; i < arena.segments().size(); ++i) {
    const optim::ArenaSegment& segment = arena.segments()[i];
    if (!segment.sparse) continue;
    OPSNN_CHECK_AS(ConfigError, descriptor.sparse_capable, "key 'optimizer.name': parameter '", segment.name,
                   "' has row-sparse gradients, which ", name, " cannot update",
                   descriptor.per_tensor_norms ? " (its trust ratio needs whole-tensor norms)" : "", "; use ",
                   sparse_capable_names());
    OPSNN_CHECK_AS(ConfigError, segment.shape.size() == 2, "parameter '", segment.name,
                   "' has row-sparse gradients but is not a [rows, width] table: ", shape_str(segment.shape));
    names_[i] = segment.name;
    if (descriptor.rule == optim::UpdateRule::sgd && optimizer.options().momentum() > 0.0)
      row_initialized_[i] = Tensor::zeros({segment.shape[0]}, DType::u8, segment.parameter.device());
  }
}

double RowSparseUpdater::prepare(const optim::SparseSegment& segment, float inverse_loss_scale) {
  const Tensor& parameter = segment.segment->parameter;
  optim::CoalescedRows& rows = gradients_[segment.index];
  optim::coalesce(parameter.row_sparse_grad(), parameter.size(0), parameter.size(1), inverse_loss_scale, rows);
  return rows.sum_of_squares;
}

void RowSparseUpdater::update(const optim::SparseSegment& segment, const optim::SparseStepScalars& scalars) {
  const Tensor& parameter = segment.segment->parameter;
  const optim::CoalescedRows& rows = gradients_.at(segment.index);
  if (rows.row_count() == 0) return;  // no row of this table was looked up in this step
  if (segment.descriptor->rule == optim::UpdateRule::sgd) {
    Tensor momentum = segment.states.empty() ? Tensor() : segment.states[0];
    auto flags = row_initialized_.find(segment.index);
    optim::sparse_sgd_step(parameter, momentum, flags == row_initialized_.end() ? Tensor() : flags->second, rows,
                           scalars.sgd, scalars.clip_factor);
    return;
  }
  OPSNN_CHECK(segment.states.size() >= 2, "lazy Adam for '", segment.segment->name, "' needs exp_avg and exp_avg_sq");
  Tensor max_exp_avg_sq = scalars.adam.amsgrad && segment.states.size() > 2 ? segment.states[2] : Tensor();
  optim::lazy_adam_step(parameter, segment.states[0], segment.states[1], max_exp_avg_sq, rows, scalars.adam,
                        scalars.clip_factor);
}

std::vector<std::pair<std::string, Tensor>> RowSparseUpdater::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [index, flags] : row_initialized_)
    out.emplace_back(hook_key("sparse_rows." + names_.at(index) + ".row_initialized"), flags.clone());
  return out;
}

void RowSparseUpdater::load_state_tensors(std::map<std::string, Tensor>& tensors) {
  for (auto& [index, flags] : row_initialized_)
    flags.copy_(
        take_state(tensors, hook_key("sparse_rows." + names_.at(index) + ".row_initialized"), flags.numel(), DType::u8)
            .view(flags.shape()));
}

std::shared_ptr<RowSparseUpdater> install_row_sparse_updater(optim::Optimizer& optimizer) {
  bool any_sparse = false;
  for (const optim::ArenaSegment& segment : optimizer.arena().segments()) any_sparse |= segment.sparse;
  if (!any_sparse) return nullptr;
  auto updater = std::make_shared<RowSparseUpdater>(optimizer);
  optimizer.set_sparse_updater(updater);
  return updater;
}

// ---- top-k sparsification ----

bool topk_enabled(const TrainConfig& config) { return config.optimizer.settings.sparsification.method == "topk"; }

GradientSparsifier::GradientSparsifier(const TrainConfig& config, const optim::Optimizer& optimizer) {
  const SparsificationConfig& settings = config.optimizer.settings.sparsification;
  OPSNN_CHECK_AS(ConfigError, !config.loss_scaling_enabled(), config.source,
                 ": key 'optimizer.settings.sparsification.method': topk works on unscaled gradients and cannot be "
                 "combined with loss scaling (optimizer.settings.loss_scaling.enabled / train.precision fp16)");
  if (settings.momentum_correction) {
    const optim::OptimizerDescriptor* descriptor = optim::find_optimizer(config.optimizer.name);
    OPSNN_CHECK_AS(ConfigError,
                   descriptor != nullptr && descriptor->has_momentum_option && config.optimizer.momentum > 0.0 &&
                       !config.optimizer.nesterov,
                   config.source,
                   ": key 'optimizer.settings.sparsification.momentum_correction': DGC momentum correction moves SGD's "
                   "momentum into the sparsifier, so it needs optimizer.name sgd with momentum > 0 and nesterov "
                   "false (got ",
                   config.optimizer.name, ", momentum ", config.optimizer.momentum,
                   "); set momentum_correction: false for other optimizers");
  }
  optim::TopKOptions options;
  options.density = settings.density;
  options.sample_fraction = settings.sample_fraction;
  options.momentum_correction = settings.momentum_correction;
  options.momentum = settings.momentum_correction ? config.optimizer.momentum : 0.0;
  options.lr_compensation = settings.lr_compensation;
  options.seed = config.train.seed;
  // The sparsifier's warm-up counts "epochs"; the trainer feeds it applied steps, so its exponential
  // warm-up runs over sparsification.warmup_steps steps.
  options.warmup_epochs = settings.warmup_steps;
  options.warmup_start_density = std::max(settings.initial_density, settings.density);
  sparsifier_ =
      std::make_unique<optim::TopKSparsifier>(optimizer.arena().padded_elements(), options, optimizer.arena().device());
}

std::optional<optim::TopKStepReport> GradientSparsifier::apply(const optim::Optimizer& optimizer) {
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
  float lr = static_cast<float>(optimizer.next_lr());
  return sparsifier_->sparsify(gradient, sparsifier_->state().steps, 1.0f, lr);
}

std::vector<std::pair<std::string, Tensor>> GradientSparsifier::state_tensors() const {
  const optim::TopKState& state = sparsifier_->state();
  auto vector_tensor = [](const std::vector<float>& values) {
    return Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  };
  return {{hook_key("topk.accumulator"), vector_tensor(state.accumulator)},
          {hook_key("topk.velocity"), vector_tensor(state.velocity)},
          {hook_key("topk.variance"), vector_tensor(state.variance)},
          {hook_key("topk.steps"), Tensor::from_vector<int64_t>({state.steps}, {})},
          {hook_key("topk.previous_lr"), Tensor::from_vector<float>({state.previous_lr}, {})}};
}

void GradientSparsifier::load_state_tensors(std::map<std::string, Tensor>& tensors) {
  optim::TopKState state;
  auto load_vector = [&](const char* name) {
    const std::string key = hook_key(std::string("topk.") + name);
    auto found = tensors.find(key);
    int64_t numel = found == tensors.end() ? 0 : found->second.numel();
    return to_floats(take_state(tensors, key, numel, DType::f32));
  };
  state.accumulator = load_vector("accumulator");
  state.velocity = load_vector("velocity");
  state.variance = load_vector("variance");
  state.steps = take_state(tensors, hook_key("topk.steps"), 1, DType::i64).to_vector<int64_t>()[0];
  state.previous_lr = take_state(tensors, hook_key("topk.previous_lr"), 1, DType::f32).to_vector<float>()[0];
  sparsifier_->load_state(std::move(state));  // checks the buffers against the arena size
}

}  // namespace opsnn::train
