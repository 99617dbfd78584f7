// The device-resident fused step (src/optim/README.md) for arenas on a GPU: the whole pipeline -
// gradient pass (unscale, non-finite check, per-chunk sums of squares), segment sums, the tiny step
// (norms, clip factor, skip decision, schedule, bias corrections, scaler), the update pass over the
// flat arena and a tiny epilogue (parameter check, monitor flags) - is enqueued on a stream with every
// scalar read from and written to the device StepState, so a step needs no host synchronisation and can
// be captured in a CUDA graph. Plain structs, no third-party includes: the CUDA kernels and host code
// share them. Optimizer uses a DeviceStepper whenever its arena lives on a device that registered one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "opsnn/core/device.h"
#include "opsnn/core/dtype.h"
#include "opsnn/optim/rules.h"
#include "opsnn/optim/step_kernels.h"
#include "opsnn/optim/step_state.h"

namespace opsnn {
class Tensor;
}

namespace opsnn::optim {

// What the monitor does with non-finite gradients, as the device's tiny step sees it.
enum class DeviceNonFiniteAction : int32_t { warn = 0, skip = 1, stop = 2 };

// The optimizer's settings as one step needs them (constant between steps; a kernel argument).
struct StepConstants {
  UpdateRule rule = UpdateRule::adam;
  int32_t decoupled = 0;  // AdamW
  int32_t amsgrad = 0;
  int32_t nesterov = 0;
  double beta1 = 0.9, beta2 = 0.999;  // double: beta powers advance in double, as on the CPU
  float eps = 1e-8f, eps_relative = 0.0f;
  float momentum = 0.0f, dampening = 0.0f;
  float trust_lower = 1e-3f, trust_upper = 10.0f;
  double max_grad_norm = 0.0;  // <= 0: no clipping
  ScheduleParams schedule;     // base_lr is the optimizer's lr
  int32_t scaling = 0;         // dynamic loss scaling on
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  DeviceNonFiniteAction on_nonfinite = DeviceNonFiniteAction::skip;
  double grad_norm_warn_threshold = 1e6;
  // The states are sharded over ranks (ZeRO-1): the segment sums are summed over the ranks before the
  // prologue (and LAMB's before its trust ratios), so the step is always two-pass.
  int32_t sharded = 0;
};

// One arena segment (tensor) in the device table.
struct DeviceSegment {
  double lr_multiplier = 1.0;  // its group's
  float weight_decay = 0.0f;   // 0 when decay is off for it
  int32_t first_chunk = 0;     // its chunks in the dense chunk list (none for a sparse segment)
  int32_t chunk_count = 0;
  int32_t sparse = 0;
};

// What the tiny step hands the update pass (device memory, written every step).
struct StepScalars {
  int32_t apply = 0;       // 0: this step is skipped
  int32_t first_step = 0;  // SGD: momentum buffers start as g
  double lr = 0.0;         // scheduled lr (before group multipliers)
  float inv_bias_correction1 = 1.0f, inv_bias_correction2 = 1.0f;
  float grad_multiplier = 1.0f;  // 1/loss_scale * clip factor
  // A row-sparse gradient coalesced on the device held an index outside its table (DeviceSparseStats):
  // nothing of this step was applied or counted, and the host reports the index once it reads it.
  int32_t aborted = 0;
};

// A row-sparse segment's gradient statistics left on the device by its coalescing (no host round trip):
// the tiny step reads the sum of squares from there, and a first_bad other than kNoBadSparseIndex (the
// first occurrence outside the table) aborts the step before anything changes. Null pointers: no rows
// this step (sum 0).
struct DeviceSparseStats {
  const double* sum_of_squares = nullptr;
  const unsigned long long* first_bad = nullptr;
};
inline constexpr unsigned long long kNoBadSparseIndex = ~0ull;

// Where a sparse update launched right after a device step finds that step's values (all device memory
// written by the step's prologue), instead of taking them from the host: whether the step applies, the
// scheduled lr (times lr_multiplier, the segment's group), the bias corrections, the clip factor (the
// grad_multiplier) and the coalesced row count (row_count is then an upper bound).
struct DeviceStepInputs {
  const StepScalars* scalars = nullptr;
  const StepState* state = nullptr;
  const int* row_count = nullptr;
  double lr_multiplier = 1.0;
};

// Which tensors held inf/NaN in the last step (-1: none): for the host's messages.
struct DeviceStepReport {
  int32_t bad_grad_segment = -1;
  int32_t bad_param_segment = -1;
  int32_t bad_param_chunk = 0x7fffffff;  // scratch of the parameter check
  int32_t unused = 0;
};

// Raw device buffers of an arena. grads and the states may be f32, f16 or bf16; param_copy (optional) is
// the low-precision copy of the parameters (f16 or bf16) the update pass writes beside the fp32 masters.
struct DeviceArena {
  float* params = nullptr;
  const void* grads = nullptr;
  DType grad_dtype = DType::f32;
  void* states[kMaxOptimizerStates] = {nullptr, nullptr, nullptr};
  DType state_dtype = DType::f32;
  void* param_copy = nullptr;
  DType param_copy_dtype = DType::bf16;
  const ArenaChunk* chunks = nullptr;  // host array of the dense chunks
  int64_t chunk_count = 0;
};

// A step captured into a CUDA graph: replay() enqueues it (ordered after the work already on the
// default stream, and before later work there) with one launch.
class CapturedStep {
 public:
  virtual ~CapturedStep() = default;
  virtual void replay() = 0;
};

class DeviceStepper {
 public:
  virtual ~DeviceStepper() = default;
  // Enqueues one step on the default stream. sparse_sums (or null): per segment, the unscaled sum of
  // squares of each row-sparse segment's gradient (other entries ignored), computed by the host.
  virtual void enqueue(const std::vector<double>* sparse_sums) = 0;
  // The same with the row-sparse segments' statistics on the device (one entry per segment, dense
  // segments' entries ignored): the step needs no value from the host.
  virtual void enqueue(const std::vector<DeviceSparseStats>& sparse_stats) = 0;
  // Device memory the enqueued step writes and later work on the default stream may read: this step's
  // scalars (valid after its prologue) and the step state (clip_factor among them).
  virtual const StepScalars* device_scalars() const = 0;
  virtual const StepState* device_state() const = 0;
  // Waits for the enqueued work and copies the step state and report back.
  virtual void read(StepState& state, DeviceStepReport& report) = 0;
  virtual void write_state(const StepState& state) = 0;
  // New lr multipliers / decay flags (from the next step on).
  virtual void set_segments(const std::vector<DeviceSegment>& segments) = 0;
  // Per segment: the unscaled sum of squares of the last step's gradients (waits).
  virtual std::vector<double> segment_grad_sum_squares() = 0;
  // Captures one step into a graph (no sparse segments); the stepper must outlive it.
  virtual std::unique_ptr<CapturedStep> capture() = 0;
  // A sharded step (StepConstants::sharded): `sum` makes per-segment statistics (an f64 device tensor)
  // the sums over the ranks, in place, ordered on the default stream. Set before the first step.
  virtual void set_cross_rank_sum(std::function<void(const Tensor&)> sum) = 0;
};

// True when a step's gradient statistics ride along in the update pass (LAMB: its phase 1): no clipping,
// no loss scaling and monitor.on_nonfinite = warn (nothing in the step depends on them before the update),
// and the step is not sharded.
inline bool single_pass_step(const StepConstants& k) {
  return !k.sharded && !k.scaling && !(k.max_grad_norm > 0.0) && k.on_nonfinite == DeviceNonFiniteAction::warn;
}

using DeviceStepperFactory = std::unique_ptr<DeviceStepper> (*)(Device device, const StepConstants& constants,
                                                                const DeviceArena& arena,
                                                                const std::vector<DeviceSegment>& segments);
void register_device_stepper(DeviceType type, DeviceStepperFactory factory);
// The factory for the device's type, or null (the CPU runs the host pipeline of optimizer.cpp).
DeviceStepperFactory device_stepper_factory(DeviceType type);

}  // namespace opsnn::optim
