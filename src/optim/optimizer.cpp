// The optimizer base: parameter groups into the arena, and the fused step pipeline of DESIGN.md decision 4
// (gradient pass -> tiny step -> update pass -> scaler and schedule advance). The tiny step runs on the
// host here over StepState with the OPSNN_HD functions of step_logic.h, which a CUDA step can run on the
// device unchanged.
#include "opsnn/optim/optimizer.h"

#include <cmath>

#include "opsnn/core/error.h"
#include "opsnn/optim/step_logic.h"

namespace opsnn::optim {
namespace {

std::vector<ArenaEntry> arena_entries(const std::vector<ParamGroup>& groups, const OptimizerOptions& options) {
  std::vector<ArenaEntry> entries;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& [name, parameter] : groups[g].parameters) {
      OPSNN_CHECK_AS(ConfigError, parameter.defined(), "parameter '", name, "' of group '", groups[g].name,
                     "' is an undefined tensor");
      bool decays = groups[g].weight_decay.value_or(parameter.dim() > 1 || options.decay_1d_params());
      entries.push_back({name, parameter, static_cast<int32_t>(g), decays});
    }
  }
  return entries;
}

}  // namespace

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, OptimizerOptions options,
                     std::vector<std::string> state_names)
    : name_(std::move(name)),
      options_(std::move(options)),
      groups_(std::move(groups)),
      scaler_(options_.loss_scaling()),
      monitor_(options_.monitor()) {
  options_.validate(name_);
  validate_groups();
  schedule_ = options_.schedule();
  schedule_.base_lr = options_.lr();
  arena_ = std::make_unique<ParamArena>(arena_entries(groups_, options_), std::move(state_names),
                                        options_.state_dtype());
  scaler_.initialize(state_);
  size_t chunks = arena_->dense_chunks().size();
  size_t segments = arena_->segments().size();
  chunk_sums_.assign(chunks, 0.0);
  chunk_param_check_.assign(chunks, 0.0f);
  for (std::vector<double>& scratch : scratch_) scratch.assign(chunks, 0.0);
  segment_sum_squares_.assign(segments, 0.0);
  segment_grad_norms_.assign(segments, 0.0);
  segment_scalars_.assign(segments, SegmentStepScalars{});
}

void Optimizer::validate_groups() const {
  OPSNN_CHECK_AS(ConfigError, !groups_.empty(), "the optimizer got no parameter groups");
  for (const ParamGroup& group : groups_) {
    OPSNN_CHECK_AS(ConfigError, !group.parameters.empty(), "parameter group '", group.name, "' has no parameters");
    OPSNN_CHECK_AS(ConfigError, group.lr_multiplier >= 0.0 && std::isfinite(group.lr_multiplier),
                   "parameter group '", group.name, "': lr_multiplier = ", group.lr_multiplier,
                   " must be a finite number >= 0");
  }
}

void Optimizer::set_lr_multiplier(size_t group, double multiplier) {
  OPSNN_CHECK_AS(ConfigError, group < groups_.size(), "parameter group ", group, " out of range (", groups_.size(),
                 " groups)");
  OPSNN_CHECK_AS(ConfigError, multiplier >= 0.0 && std::isfinite(multiplier), "parameter group '",
                 groups_[group].name, "': lr_multiplier = ", multiplier, " must be a finite number >= 0");
  groups_[group].lr_multiplier = multiplier;
}

double* Optimizer::scratch(size_t index) {
  OPSNN_CHECK(index < kScratchArrays, "optimizer scratch array ", index, " out of range");
  return scratch_[index].data();
}

double Optimizer::scheduled_lr(int64_t applied_steps) const { return schedule_lr(schedule_, applied_steps); }
double Optimizer::next_lr() const { return scheduled_lr(state_.step); }

void Optimizer::zero_grad() { arena_->zero_grads(); }

int32_t Optimizer::gradient_pass(float inverse_scale) {
  const ParamArena& arena = *arena_;
  const FusedStepKernels& kernels = fused_step_kernels(arena.device());
  ArenaView view = arena.view();
  kernels.grad_sum_of_squares(view, chunk_sums_.data());

  // Per-chunk partials summed in chunk order: the same result for any thread count.
  std::fill(segment_sum_squares_.begin(), segment_sum_squares_.end(), 0.0);
  const std::vector<ArenaChunk>& chunks = arena.dense_chunks();
  for (size_t c = 0; c < chunks.size(); ++c) segment_sum_squares_[static_cast<size_t>(chunks[c].segment)] += chunk_sums_[c];
  double inverse_squared = static_cast<double>(inverse_scale) * static_cast<double>(inverse_scale);
  const std::vector<ArenaSegment>& segments = arena.segments();
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].sparse) {
      OPSNN_CHECK_AS(ConfigError, sparse_updater_ != nullptr, "parameter '", segments[i].name,
                     "' has row-sparse gradients (sparse_grad) but no sparse updater is installed on the ", name_,
                     " optimizer (set_sparse_updater)");
      SparseSegment sparse{i, &segments[i], {}, name_};
      for (size_t s = 0; s < arena.state_names().size(); ++s) sparse.states.push_back(arena.state_view(s, i));
      segment_sum_squares_[i] = sparse_updater_->prepare(sparse, inverse_scale);
    } else {
      segment_sum_squares_[i] *= inverse_squared;
    }
  }
  int32_t first_bad = -1;
  for (size_t i = 0; i < segments.size(); ++i) {
    segment_grad_norms_[i] = std::sqrt(segment_sum_squares_[i]);
    if (first_bad < 0 && !std::isfinite(segment_sum_squares_[i])) first_bad = static_cast<int32_t>(i);
  }
  return first_bad;
}

int32_t Optimizer::first_nonfinite_param_segment() const {
  const std::vector<ArenaChunk>& chunks = arena_->dense_chunks();
  for (size_t c = 0; c < chunks.size(); ++c)
    if (chunk_param_check_[c] != 0.0f) return chunks[c].segment;
  return -1;
}

const StepState& Optimizer::step() {
  arena_->reclaim_grads();
  StepState& state = state_;
  state.monitor_flags = 0;
  state.found_inf = 0;

  // Pass 1: unscaled sums of squares per segment; inf/NaN shows up as a non-finite sum.
  float inverse_scale = scaler_.inverse_scale(state);
  int32_t bad_segment = gradient_pass(inverse_scale);
  double total = 0.0;
  for (double sum : segment_sum_squares_) total += sum;

  // Tiny step: norm, clip factor, monitor and skip decision.
  state.found_inf = bad_segment >= 0 ? 1 : 0;
  state.grad_norm = static_cast<float>(std::sqrt(total));
  state.clip_factor = gradient_clip_factor(std::sqrt(total), options_.max_grad_norm());
  const std::vector<ArenaSegment>& segments = arena_->segments();
  std::string bad_name = bad_segment >= 0 ? segments[static_cast<size_t>(bad_segment)].name : std::string();
  bool skip = monitor_.check_gradients(state, bad_segment, bad_name, scaler_.enabled());

  if (skip) {
    state.skipped_steps += 1;
    state.monitor_flags |= kStepSkipped;
  } else {
    auto [beta1, beta2] = options_.betas();
    double lr = scheduled_lr(state.step);
    double weight_decay = options_.effective_weight_decay(name_);
    for (size_t i = 0; i < segments.size(); ++i) {
      const ArenaSegment& segment = segments[i];
      segment_scalars_[i].lr = static_cast<float>(lr * groups_[static_cast<size_t>(segment.group)].lr_multiplier);
      segment_scalars_[i].weight_decay = segment.weight_decay ? static_cast<float>(weight_decay) : 0.0f;
      segment_scalars_[i].trust_ratio = 1.0f;
    }
    AdamScalars adam{};
    adam.lr = static_cast<float>(lr);
    adam.beta1 = static_cast<float>(beta1);
    adam.beta2 = static_cast<float>(beta2);
    adam.one_minus_beta1 = static_cast<float>(1.0 - beta1);
    adam.one_minus_beta2 = static_cast<float>(1.0 - beta2);
    adam.inv_bias_correction1 = inverse_bias_correction(state.beta1_power * beta1);
    adam.inv_bias_correction2 = inverse_bias_correction(state.beta2_power * beta2);
    adam.eps = static_cast<float>(options_.eps());
    adam.eps_relative = static_cast<float>(options_.eps_relative());
    adam.weight_decay = static_cast<float>(weight_decay);
    adam.decoupled = name_ == "adamw";
    adam.amsgrad = options_.amsgrad();
    SgdScalars sgd{};
    sgd.lr = static_cast<float>(lr);
    sgd.momentum = static_cast<float>(options_.momentum());
    sgd.dampening = static_cast<float>(options_.dampening());
    sgd.weight_decay = static_cast<float>(weight_decay);
    sgd.nesterov = options_.nesterov();
    sgd.first_step = state.step == 0;

    // Pass 2: the update, with unscale and clip folded into the gradient read.
    ArenaView view = arena_->view();
    UpdateContext context{view,   fused_step_kernels(arena_->device()), state, adam, sgd, segment_scalars_,
                          inverse_scale * state.clip_factor, chunk_param_check_};
    apply_update(context);
    for (size_t i = 0; i < segments.size(); ++i) {
      if (!segments[i].sparse) continue;
      SparseSegment sparse{i, &segments[i], {}, name_};
      for (size_t s = 0; s < arena_->state_names().size(); ++s) sparse.states.push_back(arena_->state_view(s, i));
      SparseStepScalars scalars{context.adam, context.sgd, state.clip_factor};
      scalars.adam.lr = scalars.sgd.lr = segment_scalars_[i].lr;
      scalars.adam.weight_decay = scalars.sgd.weight_decay = segment_scalars_[i].weight_decay;
      sparse_updater_->update(sparse, scalars);
    }
    int32_t bad_parameter = first_nonfinite_param_segment();
    monitor_.check_parameters(state, bad_parameter,
                              bad_parameter >= 0 ? segments[static_cast<size_t>(bad_parameter)].name : std::string());
    advance_applied_step(state, beta1, beta2, lr);
  }
  scaler_.update(state);
  return state;
}

}  // namespace opsnn::optim
