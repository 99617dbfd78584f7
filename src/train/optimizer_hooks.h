// What the trainer plugs into the optimizer beyond the dense fused step: the row-sparse updater for
// Embedding tables (coalesce, then lazy Adam/AdamW or sparse SGD over the touched rows only) and top-k
// gradient sparsification of the dense gradient arena between backward and step. Both keep state that a
// checkpoint must hold to resume bit-identically; they export it as named tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "opsnn/optim/optimizer.h"
#include "opsnn/optim/sparse_update.h"
#include "opsnn/optim/topk.h"
#include "opsnn/train/config.h"

namespace opsnn::train {

// Names of hook state tensors in optimizer.safetensors start with this, so they never meet the
// optimizer's own "<param>.<state>" and "step_state.<field>" keys.
inline constexpr const char* kHookStatePrefix = "@";

// The SparseUpdater the trainer installs on every optimizer whose parameters include row-sparse tables.
// Adam and AdamW update lazily (TensorFlow's LazyAdam: moments and parameters of touched rows only), SGD
// sparsely with per-row momentum start; LAMB has no row-sparse form (its trust ratio needs whole-tensor
// norms) and is refused with a ConfigError.
class RowSparseUpdater final : public optim::SparseUpdater {
 public:
  explicit RowSparseUpdater(const optim::Optimizer& optimizer);

  double prepare(const optim::SparseSegment& segment, float inverse_loss_scale) override;
  void update(const optim::SparseSegment& segment, const optim::SparseStepScalars& scalars) override;

  // SGD with momentum: which rows have started their momentum buffer ("@sparse_rows.<param>.row_initialized").
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // Takes the entries state_tensors() wrote out of `tensors`; DataError when one is missing or mismatched.
  void load_state_tensors(std::map<std::string, Tensor>& tensors);

 private:
  std::map<size_t, optim::CoalescedRows> gradients_;  // by segment index, buffers reused across steps
  std::map<size_t, Tensor> row_initialized_;          // u8 [rows] per sparse segment (SGD with momentum)
  std::map<size_t, std::string> names_;
};

// Installs a RowSparseUpdater when the optimizer has row-sparse segments; returns it (nullptr otherwise).
std::shared_ptr<RowSparseUpdater> install_row_sparse_updater(optim::Optimizer& optimizer);

// Top-k sparsification (Deep Gradient Compression) of the optimizer's dense gradient arena, configured by
// optimizer.settings.sparsification. The density warm-up runs over sparsification.warmup_steps applied
// steps, geometrically from initial_density to density. With momentum correction the sparsifier keeps
// the momentum (optimizer.momentum) and the optimizer must run plain SGD: make_optimizer_options does that.
class GradientSparsifier {
 public:
  GradientSparsifier(const TrainConfig& config, const optim::Optimizer& optimizer);

  // Sparsifies the gradient arena in place before optimizer.step(). Returns nothing when the gradients
  // hold inf/NaN: that step is the monitor's to skip or report, and must not poison the accumulator.
  std::optional<optim::TopKStepReport> apply(const optim::Optimizer& optimizer);

  std::vector<std::pair<std::string, Tensor>> state_tensors() const;  // "@topk.<field>"
  void load_state_tensors(std::map<std::string, Tensor>& tensors);

 private:
  std::unique_ptr<optim::TopKSparsifier> sparsifier_;
};

// Whether the config turns top-k sparsification on.
bool topk_enabled(const TrainConfig& config);

}  // namespace opsnn::train
