// The optimizer base: parameter groups into the arena, and the fused step pipeline (src/optim/README.md)
// (gradient pass -> tiny step -> update pass -> scaler and schedule advance). The tiny step runs on the
// host here over StepState with the OPSNN_HD functions of step_logic.h, which a CUDA step can run on the
// device unchanged.
#include "opsnn/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "opsnn/core/error.h"
#include "opsnn/optim/step_extensions.h"
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
    : Optimizer(optimizer_descriptor(name), name, std::move(groups), std::move(options), std::move(state_names)) {}

Optimizer::Optimizer(const OptimizerDescriptor& descriptor, std::string name, std::vector<ParamGroup> groups,
                     OptimizerOptions options, std::vector<std::string> state_names)
    : name_(std::move(name)),
      descriptor_(&descriptor),
      options_(std::move(options)),
      groups_(std::move(groups)),
      scaler_(options_.loss_scaling()),
      monitor_(options_.monitor()) {
  options_.validate(*descriptor_, name_);
  validate_groups();
  schedule_ = options_.schedule();
  schedule_.base_lr = options_.effective_lr(*descriptor_);
  arena_ =
      std::make_unique<ParamArena>(arena_entries(groups_, options_), std::move(state_names), options_.state_dtype());
  scaler_.initialize(state_);
  size_t chunks = arena_->step_chunks().size();
  size_t segments = arena_->segments().size();
  chunk_sums_.assign(chunks, 0.0);
  chunk_param_check_.assign(chunks, 0.0f);
  for (std::vector<double>& scratch : scratch_) scratch.assign(chunks, 0.0);
  segment_sum_squares_.assign(segments, 0.0);
  segment_grad_norms_.assign(segments, 0.0);
  segment_scalars_.assign(segments, SegmentStepScalars{});
  // The built-in rules run on a device-resident stepper where the arena's device has one; an optimizer
  // registered under another name keeps the host pipeline (and its own apply_update).
  if (device_stepper_factory(arena_->device().type) != nullptr && descriptor_->builtin) build_stepper();
  // The step extensions (step_extensions.h), which read the arena and options set up above.
  if (descriptor_->builtin && has_sparse_segments()) sparse_updater_ = std::make_shared<RowSparseUpdater>(*this);
  if (options_.sparsification()) sparsifier_ = std::make_unique<GradientSparsifier>(*this, *options_.sparsification());
}

Optimizer::~Optimizer() = default;

StepConstants Optimizer::device_step_constants() const {
  StepConstants k;
  k.rule = descriptor_->rule;
  k.decoupled = descriptor_->decoupled_weight_decay ? 1 : 0;
  k.amsgrad = options_.amsgrad() ? 1 : 0;
  k.nesterov = options_.nesterov() ? 1 : 0;
  std::tie(k.beta1, k.beta2) = options_.effective_betas(*descriptor_);
  k.eps = static_cast<float>(options_.effective_eps(*descriptor_));
  k.eps_relative = static_cast<float>(options_.eps_relative());
  k.momentum = static_cast<float>(options_.momentum());
  k.dampening = static_cast<float>(options_.dampening());
  k.trust_lower = static_cast<float>(options_.trust_clamp_lower());
  k.trust_upper = static_cast<float>(options_.trust_clamp_upper());
  k.max_grad_norm = options_.max_grad_norm();
  k.schedule = schedule_;
  const LossScalingOptions& scaling = scaler_.options();
  k.scaling = scaler_.enabled() ? 1 : 0;
  k.growth_factor = scaling.growth_factor();
  k.backoff_factor = scaling.backoff_factor();
  k.growth_interval = scaling.growth_interval();
  switch (monitor_.options().on_nonfinite()) {
    case NonFiniteAction::warn:
      k.on_nonfinite = DeviceNonFiniteAction::warn;
      break;
    case NonFiniteAction::skip:
      k.on_nonfinite = DeviceNonFiniteAction::skip;
      break;
    case NonFiniteAction::stop:
      k.on_nonfinite = DeviceNonFiniteAction::stop;
      break;
  }
  k.grad_norm_warn_threshold = monitor_.options().grad_norm_warn_threshold();
  k.sharded = arena_->sharded() ? 1 : 0;
  return k;
}

std::vector<DeviceSegment> Optimizer::device_segments() const {
  const std::vector<ArenaSegment>& segments = arena_->segments();
  double weight_decay = options_.effective_weight_decay(*descriptor_);
  std::vector<DeviceSegment> table(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    table[i].lr_multiplier = groups_[static_cast<size_t>(segments[i].group)].lr_multiplier;
    table[i].weight_decay = segments[i].weight_decay ? static_cast<float>(weight_decay) : 0.0f;
    table[i].sparse = segments[i].sparse ? 1 : 0;
  }
  const std::vector<ArenaChunk>& chunks = arena_->dense_chunks();
  for (size_t c = 0; c < chunks.size(); ++c) {
    DeviceSegment& entry = table[static_cast<size_t>(chunks[c].segment)];
    if (entry.chunk_count == 0) entry.first_chunk = static_cast<int32_t>(c);
    entry.chunk_count += 1;
  }
  return table;
}

DeviceArena Optimizer::device_arena() const {
  ArenaView view = arena_->view();
  DeviceArena arena;
  arena.params = view.params;
  arena.grads = view.grads;
  arena.grad_dtype = DType::f32;
  for (int i = 0; i < kMaxOptimizerStates; ++i) arena.states[i] = view.states[i];
  arena.state_dtype = view.state_dtype;
  arena.chunks = view.chunks;
  arena.chunk_count = view.chunk_count;
  if (param_copy_.defined()) {  // the whole arena's copy; the step writes the shard's part
    arena.param_copy = static_cast<char*>(param_copy_.data_ptr()) +
                       arena_->shard_begin() * static_cast<int64_t>(dtype_size(param_copy_.dtype()));
    arena.param_copy_dtype = param_copy_.dtype();
  }
  return arena;
}

ArenaShardRange arena_shard_range(int64_t elements, int rank, int world) {
  OPSNN_CHECK_AS(UsageError, world >= 1 && rank >= 0 && rank < world, "arena shard of rank ", rank, " of ", world);
  const int64_t per_rank = (elements + world - 1) / world;
  const int64_t size = (per_rank + kArenaAlignmentElements - 1) / kArenaAlignmentElements * kArenaAlignmentElements;
  return {std::min(elements, size * rank), std::min(elements, size * (rank + 1))};
}

void Optimizer::shard_states(int64_t begin, int64_t end, std::shared_ptr<ShardExchange> exchange) {
  OPSNN_CHECK_AS(UsageError, exchange != nullptr, "shard_states: no exchange");
  OPSNN_CHECK_AS(UsageError, exchange_ == nullptr, "shard_states: the ", name_,
                 " optimizer's states are sharded already");
  OPSNN_CHECK_AS(UsageError, descriptor_->builtin, "shard_states: the ", name_,
                 " optimizer is registered from outside; only the built-in update passes can run on a shard");
  OPSNN_CHECK_AS(ConfigError, !has_sparse_segments(), "ZeRO-1: the ", name_,
                 " optimizer has row-sparse parameters (sparse_grad), whose updater needs whole tables");
  OPSNN_CHECK_AS(ConfigError, sparsifier_ == nullptr, "ZeRO-1: the ", name_,
                 " optimizer sparsifies its gradients (top-k), which selects over the whole arena; use "
                 "zero_stage 0 with top-k");
  sync_state();
  arena_->shard_states(begin, end);
  exchange_ = std::move(exchange);
  const size_t chunks = arena_->step_chunks().size();
  chunk_sums_.assign(chunks, 0.0);
  chunk_param_check_.assign(chunks, 0.0f);
  for (std::vector<double>& scratch : scratch_) scratch.assign(chunks, 0.0);
  if (stepper_) build_stepper();
}

void Optimizer::sum_over_shards(std::vector<double>& values) {
  if (!exchange_ || values.empty()) return;
  Tensor tensor = Tensor::from_vector<double>(values, {static_cast<int64_t>(values.size())});
  if (!arena_->device().is_cpu()) tensor = tensor.to(arena_->device());
  exchange_->sum(tensor);
  values = tensor.to_vector<double>();
}

void Optimizer::enable_param_copy(DType dtype) {
  OPSNN_CHECK_AS(UsageError, stepper_ != nullptr, "enable_param_copy: the ", name_, " optimizer's parameters are on ",
                 arena_->device().str(), "; the low-precision parameter copy is written by the GPU step");
  OPSNN_CHECK_AS(TypeError, dtype == DType::f16 || dtype == DType::bf16,
                 "enable_param_copy: the low-precision parameter copy is f16 or bf16, not ", dtype_name(dtype));
  sync_state();  // the new stepper starts from the current step state
  param_copy_ = Tensor::empty({arena_->padded_elements()}, dtype, arena_->device());
  refresh_param_copy();
  build_stepper();  // over the arena with the copy
}

void Optimizer::build_stepper() {
  stepper_ = device_stepper_factory(arena_->device().type)(arena_->device(), device_step_constants(), device_arena(),
                                                           device_segments());
  if (exchange_)
    stepper_->set_cross_rank_sum([exchange = exchange_.get()](const Tensor& values) { exchange->sum(values); });
  stepper_->write_state(state_);
}

void Optimizer::refresh_param_copy() {
  if (param_copy_.defined()) param_copy_.copy_(arena_->params());
}

Tensor Optimizer::param_copy_view(const ArenaSegment& segment) const {
  return Tensor::view_of(param_copy_.storage(), segment.offset, segment.shape, param_copy_.dtype());
}

std::unordered_map<const TensorImpl*, Tensor> Optimizer::param_copies() const {
  std::unordered_map<const TensorImpl*, Tensor> copies;
  if (!param_copy_.defined()) return copies;
  for (const ArenaSegment& segment : arena_->segments())
    if (!segment.sparse) copies.emplace(segment.parameter.impl(), param_copy_view(segment));
  return copies;
}

Tensor Optimizer::param_copy(const Tensor& parameter) const {
  if (!param_copy_.defined() || !parameter.defined()) return Tensor();
  for (const ArenaSegment& segment : arena_->segments())
    if (!segment.sparse && segment.parameter.same(parameter)) return param_copy_view(segment);
  return Tensor();
}

bool Optimizer::has_sparse_segments() const {
  for (const ArenaSegment& segment : arena_->segments())
    if (segment.sparse) return true;
  return false;
}

SparseSegment Optimizer::sparse_segment(size_t index) const {
  const std::vector<ArenaSegment>& segments = arena_->segments();
  OPSNN_CHECK_AS(ConfigError, sparse_updater_ != nullptr, "parameter '", segments[index].name,
                 "' has row-sparse gradients (sparse_grad) but no sparse updater is installed on the ", name_,
                 " optimizer (set_sparse_updater)");
  SparseSegment sparse{index, &segments[index], {}, name_, descriptor_};
  for (size_t s = 0; s < arena_->state_names().size(); ++s) sparse.states.push_back(arena_->state_view(s, index));
  return sparse;
}

void Optimizer::validate_groups() const {
  OPSNN_CHECK_AS(ConfigError, !groups_.empty(), "the optimizer got no parameter groups");
  for (const ParamGroup& group : groups_) {
    OPSNN_CHECK_AS(ConfigError, !group.parameters.empty(), "parameter group '", group.name, "' has no parameters");
    OPSNN_CHECK_AS(ConfigError, group.lr_multiplier >= 0.0 && std::isfinite(group.lr_multiplier), "parameter group '",
                   group.name, "': lr_multiplier = ", group.lr_multiplier, " must be a finite number >= 0");
  }
}

void Optimizer::set_lr_multiplier(size_t group, double multiplier) {
  OPSNN_CHECK_AS(ConfigError, group < groups_.size(), "parameter group ", group, " out of range (", groups_.size(),
                 " groups)");
  OPSNN_CHECK_AS(ConfigError, multiplier >= 0.0 && std::isfinite(multiplier), "parameter group '", groups_[group].name,
                 "': lr_multiplier = ", multiplier, " must be a finite number >= 0");
  groups_[group].lr_multiplier = multiplier;
  if (stepper_) stepper_->set_segments(device_segments());
}

double* Optimizer::scratch(size_t index) {
  OPSNN_CHECK(index < kScratchArrays, "optimizer scratch array ", index, " out of range");
  return scratch_[index].data();
}

double Optimizer::scheduled_lr(int64_t applied_steps) const { return schedule_lr(schedule_, applied_steps); }
double Optimizer::next_lr() const { return scheduled_lr(state_.step); }

namespace {
[[noreturn]] void no_device_path(const SparseSegment& segment) {
  throw UsageError(detail::concat("the sparse updater of '", segment.segment->name,
                                  "' does not update on the device (updates_on_device() is false)"));
}
}  // namespace

DeviceSparseStats SparseUpdater::prepare_on_device(const SparseSegment& segment, float) { no_device_path(segment); }
void SparseUpdater::update_on_device(const SparseSegment& segment, const SparseStepScalars&, const DeviceStepInputs&) {
  no_device_path(segment);
}
void SparseUpdater::finish_on_device(const SparseSegment& segment) { no_device_path(segment); }

void Optimizer::zero_grad() { arena_->zero_grads(); }

int32_t Optimizer::gradient_pass(float inverse_scale, bool chunk_sums_ready) {
  const ParamArena& arena = *arena_;
  if (!chunk_sums_ready) {
    ArenaView view = arena.view();
    fused_step_kernels(arena.device()).grad_sum_of_squares(view, chunk_sums_.data());
  }

  // Per-chunk partials summed in chunk order: the same result for any thread count; a sharded step's
  // partial sums over the ranks (in the same way on every rank).
  std::fill(segment_sum_squares_.begin(), segment_sum_squares_.end(), 0.0);
  const std::vector<ArenaChunk>& chunks = arena.step_chunks();
  for (size_t c = 0; c < chunks.size(); ++c)
    segment_sum_squares_[static_cast<size_t>(chunks[c].segment)] += chunk_sums_[c];
  sum_over_shards(segment_sum_squares_);
  double inverse_squared = static_cast<double>(inverse_scale) * static_cast<double>(inverse_scale);
  const std::vector<ArenaSegment>& segments = arena.segments();
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].sparse) {
      SparseSegment sparse = sparse_segment(i);  // throws when no updater is installed
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

int32_t Optimizer::first_flagged_segment() const {
  const std::vector<ArenaChunk>& chunks = arena_->step_chunks();
  for (size_t c = 0; c < chunks.size(); ++c)
    if (chunk_param_check_[c] != 0.0f) return chunks[c].segment;
  return -1;
}

void Optimizer::step_scalars(const StepState& state, double lr, AdamScalars& adam, SgdScalars& sgd) const {
  auto [beta1, beta2] = options_.effective_betas(*descriptor_);
  double weight_decay = options_.effective_weight_decay(*descriptor_);
  adam = AdamScalars{};
  adam.lr = static_cast<float>(lr);
  adam.beta1 = static_cast<float>(beta1);
  adam.beta2 = static_cast<float>(beta2);
  adam.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  adam.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  adam.inv_bias_correction1 = inverse_bias_correction(state.beta1_power * beta1);
  adam.inv_bias_correction2 = inverse_bias_correction(state.beta2_power * beta2);
  adam.eps = static_cast<float>(options_.effective_eps(*descriptor_));
  adam.eps_relative = static_cast<float>(options_.eps_relative());
  adam.weight_decay = static_cast<float>(weight_decay);
  adam.decoupled = descriptor_->decoupled_weight_decay;
  adam.amsgrad = options_.amsgrad();
  sgd = SgdScalars{};
  sgd.lr = static_cast<float>(lr);
  sgd.momentum = static_cast<float>(options_.momentum());
  sgd.dampening = static_cast<float>(options_.dampening());
  sgd.weight_decay = static_cast<float>(weight_decay);
  sgd.nesterov = options_.nesterov();
  sgd.first_step = state.step == 0;
}

void Optimizer::set_segment_scalars(double lr) {
  const std::vector<ArenaSegment>& segments = arena_->segments();
  double weight_decay = options_.effective_weight_decay(*descriptor_);
  for (size_t i = 0; i < segments.size(); ++i) {
    const ArenaSegment& segment = segments[i];
    segment_scalars_[i].lr = static_cast<float>(lr * groups_[static_cast<size_t>(segment.group)].lr_multiplier);
    segment_scalars_[i].weight_decay = segment.weight_decay ? static_cast<float>(weight_decay) : 0.0f;
    segment_scalars_[i].trust_ratio = 1.0f;
  }
}

void Optimizer::update_sparse_segments(const AdamScalars& adam, const SgdScalars& sgd, float clip_factor,
                                       bool on_device) {
  const std::vector<ArenaSegment>& segments = arena_->segments();
  for (size_t i = 0; i < segments.size(); ++i) {
    if (!segments[i].sparse) continue;
    SparseSegment sparse = sparse_segment(i);
    SparseStepScalars scalars{adam, sgd, clip_factor};
    scalars.adam.lr = scalars.sgd.lr = segment_scalars_[i].lr;
    scalars.adam.weight_decay = scalars.sgd.weight_decay = segment_scalars_[i].weight_decay;
    if (!on_device) {
      sparse_updater_->update(sparse, scalars);
      continue;
    }
    DeviceStepInputs inputs;
    inputs.scalars = stepper_->device_scalars();
    inputs.state = stepper_->device_state();
    inputs.lr_multiplier = groups_[static_cast<size_t>(segments[i].group)].lr_multiplier;
    sparse_updater_->update_on_device(sparse, scalars, inputs);
  }
}

const std::vector<double>& Optimizer::segment_grad_norms() const {
  if (stepper_ && segment_norms_stale_) {
    std::vector<double> sums = stepper_->segment_grad_sum_squares();
    for (size_t i = 0; i < sums.size(); ++i) segment_grad_norms_[i] = std::sqrt(sums[i]);
    segment_norms_stale_ = false;
  }
  return segment_grad_norms_;
}

const StepState& Optimizer::sync_state() {
  if (stepper_ && state_stale_) {
    DeviceStepReport report;
    stepper_->read(state_, report);
    state_stale_ = false;
  }
  return state_;
}

void Optimizer::step_async() {
  if (!stepper_ || has_sparse_segments() || sparsifier_) {
    step();
    return;
  }
  arena_->reclaim_grads();
  stepper_->enqueue(nullptr);
  state_stale_ = true;
  segment_norms_stale_ = true;
}

namespace {

// Replays a captured step and marks the optimizer's host copy of the step state out of date.
class OptimizerCapturedStep final : public CapturedStep {
 public:
  OptimizerCapturedStep(std::unique_ptr<CapturedStep> graph, bool& state_stale)
      : graph_(std::move(graph)), state_stale_(state_stale) {}
  void replay() override {
    graph_->replay();
    state_stale_ = true;
  }

 private:
  std::unique_ptr<CapturedStep> graph_;
  bool& state_stale_;
};

}  // namespace

std::unique_ptr<CapturedStep> Optimizer::capture_step() {
  OPSNN_CHECK_AS(UsageError, stepper_ != nullptr, "capture_step: the ", name_, " optimizer's parameters are on ",
                 arena_->device().str(), "; capturing a step into a CUDA graph needs them on a GPU");
  OPSNN_CHECK_AS(UsageError, !has_sparse_segments(), "capture_step: the ", name_,
                 " optimizer has row-sparse segments, whose updater runs on the host; a step with them cannot be "
                 "captured");
  OPSNN_CHECK_AS(UsageError, sparsifier_ == nullptr, "capture_step: the ", name_,
                 " optimizer sparsifies its gradients (top-k), which decides on the host each step; a step with "
                 "it cannot be captured");
  OPSNN_CHECK_AS(UsageError, exchange_ == nullptr, "capture_step: the ", name_,
                 " optimizer's states are sharded (ZeRO-1), whose step sums statistics over the ranks between its "
                 "kernels; a sharded step is not captured (use zero_stage 0 to capture)");
  sync_state();
  arena_->reclaim_grads();
  segment_norms_stale_ = true;
  return std::make_unique<OptimizerCapturedStep>(stepper_->capture(), state_stale_);
}

// The device pipeline; then the host side of the monitor (messages, stop) from what the device found.
// Row-sparse tables on the optimizer's GPU (SparseUpdater::updates_on_device) are coalesced and updated in
// the same stream as the dense step, the update reading the step's values from the device: one host
// synchronisation per step, at the end; an index outside a table aborts the step on the device (nothing
// changes) and is reported once the header is back. Other sparse updaters run on the host's schedule:
// their sums go to the device before the step, their update after it, when the step was applied.
const StepState& Optimizer::device_step() {
  sync_state();
  arena_->reclaim_grads();
  const StepState before = state_;
  const std::vector<ArenaSegment>& segments = arena_->segments();
  const bool sparse = has_sparse_segments();
  const bool sparse_on_device = sparse && sparse_updater_->updates_on_device();
  // The host's values of an applied step for the sparse updater (on the device, the lr, bias corrections
  // and clip factor are the device step's own; betas, eps and weight decay come from here).
  auto update_sparse = [&](float clip_factor) {
    const double lr = scheduled_lr(before.step);
    set_segment_scalars(lr);
    AdamScalars adam;
    SgdScalars sgd;
    step_scalars(before, lr, adam, sgd);
    update_sparse_segments(adam, sgd, clip_factor, sparse_on_device);
  };
  const float inverse_scale = sparse ? scaler_.inverse_scale(before) : 1.0f;
  if (sparse_on_device) {
    std::vector<DeviceSparseStats> stats(segments.size());
    for (size_t i = 0; i < segments.size(); ++i)
      if (segments[i].sparse) stats[i] = sparse_updater_->prepare_on_device(sparse_segment(i), inverse_scale);
    stepper_->enqueue(stats);
    update_sparse(1.0f);
  } else if (sparse) {
    std::vector<double> sparse_sums(segments.size(), 0.0);
    for (size_t i = 0; i < segments.size(); ++i)
      if (segments[i].sparse) sparse_sums[i] = sparse_updater_->prepare(sparse_segment(i), inverse_scale);
    stepper_->enqueue(&sparse_sums);
  } else {
    stepper_->enqueue(nullptr);
  }
  DeviceStepReport report;
  stepper_->read(state_, report);
  state_stale_ = false;
  segment_norms_stale_ = true;
  if (sparse_on_device) {
    try {
      for (size_t i = 0; i < segments.size(); ++i)
        if (segments[i].sparse) sparse_updater_->finish_on_device(sparse_segment(i));
    } catch (...) {
      stepper_->write_state(before);
      state_ = before;
      throw;
    }
  }
  std::function<void()> host_sparse_update;  // an applied step's, before the parameter check
  if (sparse && !sparse_on_device) host_sparse_update = [&] { update_sparse(state_.clip_factor); };
  monitor_device_step(before, report, host_sparse_update);
  return state_;
}

const StepState& Optimizer::complete_step() {
  OPSNN_CHECK_AS(UsageError, stepper_ != nullptr, "complete_step: the ", name_, " optimizer's step runs on ",
                 arena_->device().str(), ", not on a GPU, so step() already completed it");
  const StepState before = state_;
  DeviceStepReport report;
  stepper_->read(state_, report);
  state_stale_ = false;
  segment_norms_stale_ = true;
  monitor_device_step(before, report);
  return state_;
}

void Optimizer::monitor_device_step(const StepState& before, const DeviceStepReport& report,
                                    const std::function<void()>& before_parameter_check) {
  const std::vector<ArenaSegment>& segments = arena_->segments();
  auto name_of = [&](int32_t segment) {
    return segment >= 0 ? segments[static_cast<size_t>(segment)].name : std::string();
  };
  // The monitor sees the step as it began (its counters name the step), with the device's findings.
  StepState view = before;
  view.found_inf = state_.found_inf;
  view.grad_norm = state_.grad_norm;
  monitor_.check_gradients(view, report.bad_grad_segment, name_of(report.bad_grad_segment), scaler_.enabled());
  if ((state_.monitor_flags & kStepSkipped) == 0) {
    if (before_parameter_check) before_parameter_check();
    monitor_.check_parameters(view, report.bad_param_segment, name_of(report.bad_param_segment));
  }
}

std::optional<TopKStepReport> Optimizer::sparsify_gradients() {
  OPSNN_CHECK_AS(UsageError, sparsifier_ != nullptr, "sparsify_gradients: the ", name_,
                 " optimizer has no sparsification (OptimizerOptions::sparsification)");
  OPSNN_CHECK_AS(UsageError, !sparsified_, "sparsify_gradients: already ran for this step");
  arena_->reclaim_grads();
  last_sparsification_ = sparsifier_->apply(*this);
  sparsified_ = true;
  return last_sparsification_;
}

bool Optimizer::single_pass_host_step() const {
  // As the device step's single_pass_step: nothing in the update depends on the gradient statistics (no
  // clipping, no loss scaling, warn on non-finite values), the states are not sharded (the sums would have to
  // cross the ranks first), and the update passes are the built-in ones that can sum the gradients.
  return descriptor_->builtin && !scaler_.enabled() && !(options_.max_grad_norm() > 0.0) && !arena_->sharded() &&
         monitor_.options().on_nonfinite() == NonFiniteAction::warn;
}

bool Optimizer::check_first_host_step() const {
  // skip or stop without clipping or loss scaling: the decision to update needs only whether every gradient
  // is finite, not their norm, so the first pass only checks them (a read at one instruction per vector) and
  // the update pass sums their squares as the single-pass step does. Row-sparse segments would be checked
  // only after the update, so their steps keep the two passes.
  if (!descriptor_->builtin || scaler_.enabled() || options_.max_grad_norm() > 0.0 || arena_->sharded() ||
      monitor_.options().on_nonfinite() == NonFiniteAction::warn)
    return false;
  const std::vector<ArenaSegment>& segments = arena_->segments();
  return std::none_of(segments.begin(), segments.end(), [](const ArenaSegment& segment) { return segment.sparse; });
}

const StepState& Optimizer::step() {
  if (sparsifier_ && !sparsified_) last_sparsification_ = sparsifier_->apply(*this);
  sparsified_ = false;
  if (stepper_) return device_step();
  arena_->reclaim_grads();
  StepState& state = state_;
  state.monitor_flags = 0;
  state.found_inf = 0;
  const std::vector<ArenaSegment>& segments = arena_->segments();
  const Betas betas = options_.effective_betas(*descriptor_);  // a pair: clang 14 lambdas cannot capture bindings

  // The update pass, with unscale and clip folded into the gradient read; in a single-pass step it also
  // sums the gradients' squares, which the two-pass step sums in a pass of its own first.
  auto update = [&](float grad_multiplier, double* chunk_grad_sums) {
    double lr = scheduled_lr(state.step);
    set_segment_scalars(lr);
    AdamScalars adam;
    SgdScalars sgd;
    step_scalars(state, lr, adam, sgd);
    ArenaView view = arena_->view();
    UpdateContext context{view,
                          fused_step_kernels(arena_->device()),
                          state,
                          adam,
                          sgd,
                          segment_scalars_,
                          grad_multiplier,
                          chunk_param_check_,
                          chunk_grad_sums};
    apply_update(context);
    return std::tuple{lr, context.adam, context.sgd};
  };
  // The norm, clip factor, monitor and skip decision from the per-segment sums (unscaled).
  auto check_gradients = [&](int32_t bad_segment) {
    double total = 0.0;
    for (double sum : segment_sum_squares_) total += sum;
    state.found_inf = bad_segment >= 0 ? 1 : 0;
    state.grad_norm = static_cast<float>(std::sqrt(total));
    state.clip_factor = gradient_clip_factor(std::sqrt(total), options_.max_grad_norm());
    std::string bad_name = bad_segment >= 0 ? segments[static_cast<size_t>(bad_segment)].name : std::string();
    return monitor_.check_gradients(state, bad_segment, bad_name, scaler_.enabled());
  };
  auto finish_applied = [&](double lr, const AdamScalars& adam, const SgdScalars& sgd) {
    update_sparse_segments(adam, sgd, state.clip_factor);
    int32_t bad_parameter = first_flagged_segment();
    monitor_.check_parameters(state, bad_parameter,
                              bad_parameter >= 0 ? segments[static_cast<size_t>(bad_parameter)].name : std::string());
    advance_applied_step(state, betas.first, betas.second, lr);
  };

  bool all_finite = false;
  if (check_first_host_step()) {
    fused_step_kernels(arena_->device()).grad_finite_check(arena_->view(), chunk_param_check_.data());
    all_finite = first_flagged_segment() < 0;
  }
  if (single_pass_host_step() || all_finite) {
    // The update pass sums the squares; the gradient statistics come from its sums.
    auto [lr, adam, sgd] = update(1.0f, chunk_sums_.data());
    const bool skip = check_gradients(gradient_pass(1.0f, true));
    OPSNN_CHECK(!skip, "a step that sums the gradients in its update pass cannot be skipped");
    finish_applied(lr, adam, sgd);
  } else {  // two passes: clipping or loss scaling needs the norm first, or a gradient is not finite
    float inverse_scale = scaler_.inverse_scale(state);
    if (check_gradients(gradient_pass(inverse_scale, false))) {
      mark_skipped(state);
    } else {
      auto [lr, adam, sgd] = update(inverse_scale * state.clip_factor, nullptr);
      finish_applied(lr, adam, sgd);
    }
  }
  scaler_.update(state);
  return state;
}

}  // namespace opsnn::optim
