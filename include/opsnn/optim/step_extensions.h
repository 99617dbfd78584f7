// What an optimizer runs beside its dense fused step, both set up by the optimizer itself:
//   - RowSparseUpdater, for Embedding tables with row-sparse gradients (coalesce, then lazy Adam/AdamW or
//     sparse SGD over the touched rows only); make_optimizer installs it when the parameters include such
//     tables.
//   - GradientSparsifier, top-k sparsification (Deep Gradient Compression) of the dense gradient arena
//     before each step, on when OptimizerOptions::sparsification is set.
// Both keep state a checkpoint must hold to resume bit-identically; Optimizer::state_dict() carries it
// under keys starting with kExtensionStatePrefix ("@sparse_rows.<param>.row_initialized", "@topk.<field>").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "opsnn/optim/optimizer.h"
#include "opsnn/optim/sparse_update.h"
#include "opsnn/optim/topk.h"

namespace opsnn::optim {

// Keys of extension state start with this, so they never meet the optimizer's own "<param>.<state>" and
// "step_state.<field>" keys.
inline constexpr const char* kExtensionStatePrefix = "@";

// Adam and AdamW update lazily (TensorFlow's LazyAdam: moments and parameters of touched rows only), SGD
// sparsely with per-row momentum start; an optimizer without the sparse_capable trait (LAMB: its trust
// ratio needs whole-tensor norms) is refused with a ConfigError naming the table.
class RowSparseUpdater final : public SparseUpdater {
 public:
  explicit RowSparseUpdater(const Optimizer& optimizer);

  double prepare(const SparseSegment& segment, float inverse_loss_scale) override;
  void update(const SparseSegment& segment, const SparseStepScalars& scalars) override;
  // Tables on a GPU: coalesced with a deferred readback, updated from the device step's values.
  bool updates_on_device() const override { return on_device_; }
  DeviceSparseStats prepare_on_device(const SparseSegment& segment, float inverse_loss_scale) override;
  void update_on_device(const SparseSegment& segment, const SparseStepScalars& scalars,
                        const DeviceStepInputs& inputs) override;
  void finish_on_device(const SparseSegment& segment) override;

  // SGD with momentum: which rows have started their momentum buffer.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  void load_state_tensors(std::map<std::string, Tensor>& tensors) override;

 private:
  std::map<size_t, CoalescedRows> gradients_;  // by segment index, buffers reused across steps
  std::map<size_t, Tensor> row_initialized_;   // u8 [rows] per sparse segment (SGD with momentum)
  std::map<size_t, std::string> names_;
  bool on_device_ = false;

  void apply(const SparseSegment& segment, const SparseStepScalars& scalars, const DeviceStepInputs* inputs);
};

// Installs a RowSparseUpdater when the optimizer has row-sparse segments; returns it (nullptr otherwise).
std::shared_ptr<RowSparseUpdater> install_row_sparse_updater(Optimizer& optimizer);

// Top-k sparsification of an optimizer's dense gradient arena. The density warm-up counts applied steps
// (TopKOptions::warmup_epochs is read as steps). With momentum correction the sparsifier keeps the
// momentum (TopKOptions::momentum) and the optimizer must run plain SGD with momentum 0.
class GradientSparsifier {
 public:
  GradientSparsifier(const Optimizer& optimizer, const TopKOptions& options);

  // Sparsifies the gradient arena in place before the step. Returns nothing when the gradients hold
  // inf/NaN: that step is the monitor's to skip or report, and must not poison the accumulator.
  std::optional<TopKStepReport> apply(const Optimizer& optimizer);

  // The sparsifier itself: its options and the pairs the last step selected (the distributed exchange).
  const TopKSparsifier& sparsifier() const { return *sparsifier_; }
  // Data parallelism over `ranks` processes: local clipping (TopKOptions::local_clip_norm) then clips
  // each rank's gradient to local_clip_norm / sqrt(ranks).
  void set_ranks(int ranks);
  // The factor the last step's local clipping scaled the gradient by (1: not clipped, or clipping off).
  double last_clip_factor() const { return last_clip_factor_; }

  std::vector<std::pair<std::string, Tensor>> state_tensors() const;  // "@topk.<field>"
  // Takes its entries out of `tensors`; DataError when one is missing or mismatched.
  void load_state_tensors(std::map<std::string, Tensor>& tensors);

 private:
  std::unique_ptr<TopKSparsifier> sparsifier_;
  double clip_threshold_ = 0.0;  // local_clip_norm / sqrt(ranks); 0: off
  double last_clip_factor_ = 1.0;
};

}  // namespace opsnn::optim
