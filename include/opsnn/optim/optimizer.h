// The optimizer base in the libtorch style (named parameters + options, parameter groups, zero_grad,
// step, state_dict / load_state_dict) and the registry by name (builtin_list.h; descriptor.h). The base
// owns the bookkeeping - flat arena, step state, loss scaler, monitor, schedule, the fused pipeline
// (src/optim/README.md) - and a subclass writes only its update pass (a kernel call over the arena).
//
//   auto optimizer = opsnn::optim::make_optimizer("adamw", model.named_parameters(),
//                                                 OptimizerOptions(1e-3).weight_decay(0.05));
//   loss = optimizer->scale_loss(loss);  // identity unless loss scaling is enabled
//   loss.backward(); optimizer->step(); optimizer->zero_grad();
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "opsnn/core/tensor.h"
#include "opsnn/optim/arena.h"
#include "opsnn/optim/descriptor.h"
#include "opsnn/optim/device_step.h"
#include "opsnn/optim/loss_scaler.h"
#include "opsnn/optim/monitor.h"
#include "opsnn/optim/options.h"
#include "opsnn/optim/shard.h"
#include "opsnn/optim/step_kernels.h"
#include "opsnn/optim/step_state.h"
#include "opsnn/optim/topk.h"

namespace opsnn::optim {

// What nn::Module::named_parameters() returns: f32 leaf tensors requiring grad, by name.
using NamedParameters = std::vector<std::pair<std::string, Tensor>>;
// Optimizer state by key: "<param>.<state>" tensors and "step_state.<field>" scalars (0-d tensors).
using StateDict = std::map<std::string, Tensor>;

struct ParamGroup {
  std::string name;
  NamedParameters parameters;
  double lr_multiplier = 1.0;        // this group's lr = scheduled lr * lr_multiplier
  std::optional<bool> weight_decay;  // unset: decay unless dim() <= 1 (OptimizerOptions::decay_1d_params)
};

// The one group "default" over `parameters` (what the constructors taking NamedParameters use).
inline std::vector<ParamGroup> default_group(NamedParameters parameters) {
  return {ParamGroup{"default", std::move(parameters), 1.0, std::nullopt}};
}

// One segment whose gradient arrives row-sparse, as the sparse updater sees it.
struct SparseSegment {
  size_t index = 0;  // in the arena's segment table
  const ArenaSegment* segment = nullptr;
  std::vector<Tensor> states;                       // shaped views of this segment's optimizer states, in state order
  std::string_view optimizer;                       // registry name
  const OptimizerDescriptor* descriptor = nullptr;  // its traits (never null)
};

// Scalars of the step being applied for one sparse segment: the same values the dense pass uses.
struct SparseStepScalars {
  AdamScalars adam;  // adam/adamw/lamb (lr and weight decay of the segment's group)
  SgdScalars sgd;    // sgd
  float clip_factor = 1.0f;
};

// Hook for parameters with sparse_grad() (Embedding tables): their segments are left out of the dense
// passes. prepare() runs in the gradient pass and returns the sum of squares of the unscaled gradient
// (multiplied by inverse_loss_scale; inf/NaN when the gradient holds inf/NaN); update() runs only on
// applied steps. The functions of sparse_update.h (coalesce, sparse_sgd_step, lazy_adam_step) implement it.
class SparseUpdater {
 public:
  virtual ~SparseUpdater() = default;
  virtual double prepare(const SparseSegment& segment, float inverse_loss_scale) = 0;
  virtual void update(const SparseSegment& segment, const SparseStepScalars& scalars) = 0;
  // The device step's path, for an updater whose tables live on the optimizer's GPU (updates_on_device()
  // true): prepare_on_device enqueues the coalescing and returns where its statistics stay on the device
  // (the step reads them there); update_on_device enqueues the update, which takes the step's lr, bias
  // corrections, clip factor and skip decision from `inputs` (scalars carries the rest); after the step's
  // one synchronisation finish_on_device throws what the host must report (an index outside the table).
  // The defaults throw UsageError.
  virtual bool updates_on_device() const { return false; }
  virtual DeviceSparseStats prepare_on_device(const SparseSegment& segment, float inverse_loss_scale);
  virtual void update_on_device(const SparseSegment& segment, const SparseStepScalars& scalars,
                                const DeviceStepInputs& inputs);
  virtual void finish_on_device(const SparseSegment& segment);
  // State the updater keeps beyond the optimizer's per-parameter states, for Optimizer::state_dict (keys
  // start with "@"); load_state_tensors takes its entries out of `tensors`.
  virtual std::vector<std::pair<std::string, Tensor>> state_tensors() const { return {}; }
  virtual void load_state_tensors(std::map<std::string, Tensor>& tensors) { (void)tensors; }
};

class GradientSparsifier;  // step_extensions.h

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  std::string_view name() const { return name_; }
  // The registry's facts about this optimizer (a generic one for a name registered without them).
  const OptimizerDescriptor& descriptor() const { return *descriptor_; }
  const OptimizerOptions& options() const { return options_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Changes a group's lr multiplier from the next step on (ConfigError if negative or not finite).
  void set_lr_multiplier(size_t group, double multiplier);

  // Zeroes the gradient arena (one fill; gradients stay arena views) and clears row-sparse gradients.
  void zero_grad();
  // One fused step: gradient pass (unscale, inf/NaN check, global and per-segment norms), tiny step
  // (clip factor, skip decision, schedule), update pass, then scaler/schedule advance. A skipped step
  // (inf/NaN) advances neither the step count, the schedule nor the beta powers. Returns the step state.
  // On a GPU arena the whole step runs on the device (device_step.h) and step() waits for it at the end
  // to read the step state back (for the monitor's messages and actions and for logging).
  const StepState& step();
  // The step without waiting: on a GPU arena it is only enqueued (the monitor reports at the next step()
  // or sync_state(); use step() while a loss scaler is on, since scale_loss reads the host's copy of the
  // scale). Elsewhere, and with row-sparse segments (whose updater runs on the host), it is step().
  void step_async();
  // Waits for enqueued steps and refreshes step_state() from the device.
  const StepState& sync_state();
  // Finishes one step_async() (or one replay of a graph that captured it) as step() finishes its device
  // step: waits for it, refreshes step_state() and runs the monitor's host side (its messages, and the
  // RuntimeFailure of on_nonfinite: stop). Call it after every such step, so that the host's copy of the
  // state names the step it began as. UsageError without a device step.
  const StepState& complete_step();
  // Captures one step into a CUDA graph; replay() then enqueues it with a single launch, reading every
  // scalar from the device step state. UsageError on the CPU and with row-sparse segments. Gradients must
  // stay in the arena (they do unless .grad is replaced), and the optimizer must outlive the graph.
  std::unique_ptr<CapturedStep> capture_step();

  // Loss scaling: multiply the loss before backward(); the step divides the gradients back.
  Tensor scale_loss(const Tensor& loss) const { return scaler_.scale_loss(loss, state_); }
  const LossScaler& loss_scaler() const { return scaler_; }

  const StepState& step_state() const { return state_; }  // as of the last step() or sync_state()
  double grad_norm() const { return state_.grad_norm; }   // of the last step, unscaled, before clipping
  const std::vector<double>& segment_grad_norms() const;
  double next_lr() const;  // scheduled base lr of the next applied step (before group multipliers)

  const ParamArena& arena() const { return *arena_; }

  // Mixed precision's low-precision parameter copy (f16 or bf16): one more arena buffer holding every
  // dense parameter rounded to `dtype`, rewritten by each applied step in its update pass (the same
  // rounding as a cast), so a model can compute with it instead of casting its fp32 masters every
  // forward. refresh_param_copy() rewrites it from the masters after they change outside a step (a
  // checkpoint load, a manual edit). UsageError without a device step (CPU arenas, optimizers registered
  // outside the built-in four), TypeError for another dtype; enabling it again with another dtype
  // replaces the copy.
  void enable_param_copy(DType dtype);
  // Whether steps run on the device (a GPU arena and a built-in rule): what enable_param_copy needs.
  bool uses_device_step() const { return stepper_ != nullptr; }
  void refresh_param_copy();
  // The copy of `parameter` (one of this optimizer's parameters, shaped like it), or an undefined tensor
  // when there is no copy or the parameter is row-sparse (its updater runs on the host, outside the pass).
  Tensor param_copy(const Tensor& parameter) const;
  // Every parameter's copy keyed by its TensorImpl (what nn::Module::set_parameter_copies takes); empty
  // when there is no copy.
  std::unordered_map<const TensorImpl*, Tensor> param_copies() const;
  // The flat copy ([padded_elements], the arena's layout), or an undefined tensor.
  const Tensor& param_copy_buffer() const { return param_copy_; }

  // The row-sparse updater: the built-ins install theirs (step_extensions.h) when their parameters include
  // row-sparse tables; an optimizer registered from outside sets its own.
  void set_sparse_updater(std::shared_ptr<SparseUpdater> updater) { sparse_updater_ = std::move(updater); }
  const SparseUpdater* sparse_updater() const { return sparse_updater_.get(); }
  // Top-k sparsification (OptimizerOptions::sparsification): step() sparsifies the gradient arena first.
  // The report of the last step's sparsification; empty without it, or when that step's gradients held
  // inf/NaN (left to the monitor).
  bool sparsifies() const { return sparsifier_ != nullptr; }
  // Runs this step's sparsification now instead of at the start of step() (which then uses it as is):
  // data parallelism exchanges each rank's selected pairs between the two. Returns the report (nothing
  // when the gradients hold inf/NaN); UsageError without sparsification.
  std::optional<TopKStepReport> sparsify_gradients();
  // The sparsifier (null without sparsification): its options and last selected pairs.
  const GradientSparsifier* gradient_sparsifier() const { return sparsifier_.get(); }
  GradientSparsifier* gradient_sparsifier() { return sparsifier_.get(); }
  const std::optional<TopKStepReport>& last_sparsification() const { return last_sparsification_; }

  // ZeRO-1 (shard.h): keep the optimizer states only for arena elements [begin, end) (arena_shard_range)
  // and step only those. Gradient statistics (the norm for clipping and the monitor, found-inf, LAMB's
  // per-tensor norms) are summed over the ranks through `exchange`, so every rank decides alike;
  // state_dict() gathers the whole state from every rank (a collective: every rank calls it) and
  // load_state_dict() keeps this rank's part of a whole one, so checkpoints do not depend on the world
  // size. The caller reduces the gradients of [begin, end) before each step and gathers the parameters
  // (and the low-precision copy) after it: dist::DataParallel with zero_stage 1 does both. UsageError for
  // optimizers registered from outside (their update pass may reduce over tensors), with row-sparse
  // segments or top-k sparsification, or when called twice; capture_step() is refused afterwards.
  void shard_states(int64_t begin, int64_t end, std::shared_ptr<ShardExchange> exchange);
  bool sharded() const { return exchange_ != nullptr; }

  // Tensors by parameter name ("<param>.exp_avg", ...; copies), the step-state scalars
  // ("step_state.step", ...) and the step extensions' state ("@..."; step_extensions.h). load_state_dict
  // copies them back; a missing, unexpected or mismatched entry throws ConfigError (DataError for an
  // extension's) naming the key (and both shapes).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

  // What a device stepper is built from (tests and benchmarks build steppers over other buffers, e.g.
  // bf16 gradients or a low-precision parameter copy, with the same settings).
  StepConstants device_step_constants() const;
  std::vector<DeviceSegment> device_segments() const;
  DeviceArena device_arena() const;

 protected:
  // name: the registry name (its descriptor is looked up there: a subclass registered from outside);
  // state_names: this optimizer's per-parameter states ("exp_avg", ...).
  Optimizer(std::string name, std::vector<ParamGroup> groups, OptimizerOptions options,
            std::vector<std::string> state_names);
  // The built-ins hand over their own descriptor, so they behave the same whether or not they are
  // registered (a program that constructs Adam directly needs no registration).
  Optimizer(const OptimizerDescriptor& descriptor, std::string name, std::vector<ParamGroup> groups,
            OptimizerOptions options, std::vector<std::string> state_names);

  // Everything an update pass needs; valid during apply_update().
  struct UpdateContext {
    const ArenaView& arena;
    const FusedStepKernels& kernels;
    const StepState& state;  // before this step's advance (step = t - 1)
    AdamScalars adam;        // lr/weight decay filled per segment by the kernels
    SgdScalars sgd;
    std::vector<SegmentStepScalars>& segments;
    float grad_multiplier;  // 1/loss_scale * clip factor
    std::vector<float>& chunk_param_check;
    // Not null in a single-pass step: the update kernels also write each chunk's sum of g^2 here.
    double* chunk_grad_sums = nullptr;
  };
  virtual void apply_update(UpdateContext& context) = 0;

  // Per-chunk scratch (one double per dense chunk) for subclasses with extra reductions (LAMB's norms).
  static constexpr size_t kScratchArrays = 2;
  double* scratch(size_t index);
  // Sums per-segment partial statistics over the ranks of a sharded step (shard_states); nothing otherwise.
  void sum_over_shards(std::vector<double>& values);

 private:
  void validate_groups() const;
  double scheduled_lr(int64_t applied_steps) const;
  // Sets segment_sum_squares_ from the per-chunk sums (summed here unless chunk_sums_ready: a single-pass
  // update wrote them) and the sparse segments'; returns the index of the first non-finite one or -1.
  int32_t gradient_pass(float inverse_scale, bool chunk_sums_ready);
  // The host step sums the gradients inside the update pass (see the definitions for when): with nothing
  // read first (single pass), or after a pass that only checks them for inf/NaN (check first).
  bool single_pass_host_step() const;
  bool check_first_host_step() const;
  // The segment of the first chunk whose check in chunk_param_check_ is not 0 (NaN: a non-finite value),
  // or -1.
  int32_t first_flagged_segment() const;
  SparseSegment sparse_segment(size_t index) const;
  // The scalars of an applied step as the CPU update pass and the sparse updater see them.
  void step_scalars(const StepState& state, double lr, AdamScalars& adam, SgdScalars& sgd) const;
  // segment_scalars_: each segment's lr (scheduled lr x its group's multiplier) and weight decay.
  void set_segment_scalars(double lr);
  // Hands every row-sparse segment to the sparse updater with segment_scalars_ applied.
  // on_device: enqueued after the device step, reading its values there (SparseUpdater::update_on_device).
  void update_sparse_segments(const AdamScalars& adam, const SgdScalars& sgd, float clip_factor,
                              bool on_device = false);
  const StepState& device_step();
  // The monitor's host side for a device step that began from `before` and left `report`; an applied
  // step runs before_parameter_check (the host's sparse update) before the parameter check.
  void monitor_device_step(const StepState& before, const DeviceStepReport& report,
                           const std::function<void()>& before_parameter_check = {});
  bool has_sparse_segments() const;
  // (Re)creates the device stepper over device_arena() and hands it the current step state.
  void build_stepper();
  // The shaped view of segment's values in param_copy_.
  Tensor param_copy_view(const ArenaSegment& segment) const;
  // The whole arena's state buffer `index`: the arena's own, or gathered from the shards.
  Tensor whole_state(size_t index) const;

  std::string name_;
  const OptimizerDescriptor* descriptor_;
  OptimizerOptions options_;
  std::vector<ParamGroup> groups_;
  std::unique_ptr<ParamArena> arena_;
  StepState state_;
  LossScaler scaler_;
  Monitor monitor_;
  ScheduleParams schedule_;
  std::shared_ptr<SparseUpdater> sparse_updater_;
  std::unique_ptr<GradientSparsifier> sparsifier_;
  std::optional<TopKStepReport> last_sparsification_;
  bool sparsified_ = false;  // sparsify_gradients() ran for the coming step
  std::vector<double> chunk_sums_;
  std::vector<float> chunk_param_check_;
  std::array<std::vector<double>, kScratchArrays> scratch_;
  std::vector<double> segment_sum_squares_;
  mutable std::vector<double> segment_grad_norms_;
  std::unique_ptr<DeviceStepper> stepper_;  // set when the arena's device registered one (CUDA)
  Tensor param_copy_;                       // [padded_elements] f16/bf16 when enable_param_copy ran
  bool state_stale_ = false;                // steps were enqueued since state_ was read back
  mutable bool segment_norms_stale_ = false;
  std::vector<SegmentStepScalars> segment_scalars_;
  std::shared_ptr<ShardExchange> exchange_;  // set by shard_states
};

// ---- registry (descriptor.h: register_optimizer(descriptor), find_optimizer) ----
// Adds or replaces an optimizer by name, with a generic descriptor (the host pipeline, no defaults).
void register_optimizer(const std::string& name, OptimizerFactory factory);
// Registered names, sorted.
std::vector<std::string> optimizer_names();
// ConfigError listing the known names for an unknown one; options are validated by the optimizer.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamGroup> groups,
                                          const OptimizerOptions& options = OptimizerOptions());
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, NamedParameters parameters,
                                          const OptimizerOptions& options = OptimizerOptions());

}  // namespace opsnn::optim
