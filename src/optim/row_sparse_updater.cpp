// The row-sparse updater of Embedding tables (step_extensions.h): coalesce each table's gradient in the
// gradient pass, then lazy Adam/AdamW, sparse SGD or a lazy element-wise rule (Adagrad) over the touched
// rows in applied steps; on a GPU both are enqueued in the device step's stream, without a readback.
#include <algorithm>

#include "opsnn/core/error.h"
#include "opsnn/optim/step_extensions.h"
#include "optim/extension_state.h"

namespace opsnn::optim {
namespace {

// "adam, adamw, adagrad or sgd": the built-ins that update row-sparse tables, for the message.
std::string sparse_capable_names() {
  std::vector<const OptimizerDescriptor*> capable;
  for (const OptimizerDescriptor* descriptor : builtin_optimizer_descriptors())
    if (descriptor->sparse_capable) capable.push_back(descriptor);
  // Adam's family first, as the message always read.
  std::stable_partition(capable.begin(), capable.end(),
                        [](const OptimizerDescriptor* descriptor) { return !descriptor->has_momentum_option; });
  std::string text;
  for (size_t i = 0; i < capable.size(); ++i)
    text += (i == 0 ? "" : i + 1 == capable.size() ? " or " : ", ") + capable[i]->name;
  return text;
}

}  // namespace

RowSparseUpdater::RowSparseUpdater(const Optimizer& optimizer) {
  std::string_view name = optimizer.name();
  const OptimizerDescriptor& descriptor = optimizer.descriptor();
  const ParamArena& arena = optimizer.arena();
  for (size_t i = 0; i < arena.segments().size(); ++i) {
    const ArenaSegment& segment = arena.segments()[i];
    if (!segment.sparse) continue;
    OPSNN_CHECK_AS(ConfigError, descriptor.sparse_capable, "key 'optimizer.name': parameter '", segment.name,
                   "' has row-sparse gradients, which ", name, " cannot update",
                   descriptor.per_tensor_norms ? " (its trust ratio needs whole-tensor norms)" : "", "; use ",
                   sparse_capable_names());
    OPSNN_CHECK_AS(ConfigError, segment.shape.size() == 2, "parameter '", segment.name,
                   "' has row-sparse gradients but is not a [rows, width] table: ", shape_str(segment.shape));
    names_[i] = segment.name;
    on_device_ = !segment.parameter.device().is_cpu();
    gradients_[i].atomics = optimizer.options().row_sparse_atomics();
    if (descriptor.rule == UpdateRule::sgd && optimizer.options().momentum() > 0.0)
      row_initialized_[i] = Tensor::zeros({segment.shape[0]}, DType::u8, segment.parameter.device());
  }
}

double RowSparseUpdater::prepare(const SparseSegment& segment, float inverse_loss_scale) {
  const Tensor& parameter = segment.segment->parameter;
  CoalescedRows& rows = gradients_[segment.index];
  coalesce(parameter.row_sparse_grad(), parameter.size(0), parameter.size(1), inverse_loss_scale, rows);
  return rows.sum_of_squares;
}

void RowSparseUpdater::update(const SparseSegment& segment, const SparseStepScalars& scalars) {
  apply(segment, scalars, nullptr);
}

DeviceSparseStats RowSparseUpdater::prepare_on_device(const SparseSegment& segment, float inverse_loss_scale) {
  const Tensor& parameter = segment.segment->parameter;
  CoalescedRows& rows = gradients_[segment.index];
  rows.deferred = true;
  coalesce(parameter.row_sparse_grad(), parameter.size(0), parameter.size(1), inverse_loss_scale, rows);
  // Chunks on the host are coalesced there (and read back at once): their table must be there too.
  OPSNN_CHECK_AS(DeviceError, rows.pending || rows.row_count() == 0, "parameter '", segment.segment->name, "' is on ",
                 parameter.device().str(), " but its row-sparse gradient is on ", rows.device.str());
  return rows.device_stats;
}

void RowSparseUpdater::update_on_device(const SparseSegment& segment, const SparseStepScalars& scalars,
                                        const DeviceStepInputs& inputs) {
  const CoalescedRows& rows = gradients_.at(segment.index);
  if (!rows.pending) return;  // no row of this table was looked up in this step
  DeviceStepInputs with_rows = inputs;
  with_rows.row_count = rows.device_row_count_at;
  apply(segment, scalars, &with_rows);
}

void RowSparseUpdater::finish_on_device(const SparseSegment& segment) { finish_coalesce(gradients_[segment.index]); }

void RowSparseUpdater::apply(const SparseSegment& segment, const SparseStepScalars& scalars,
                             const DeviceStepInputs* inputs) {
  const Tensor& parameter = segment.segment->parameter;
  const CoalescedRows& rows = gradients_.at(segment.index);
  if (rows.row_count() == 0) return;  // no row of this table was looked up in this step
  if (segment.descriptor->rule == UpdateRule::sgd) {
    Tensor momentum = segment.states.empty() ? Tensor() : segment.states[0];
    auto flags = row_initialized_.find(segment.index);
    sparse_sgd_step(parameter, momentum, flags == row_initialized_.end() ? Tensor() : flags->second, rows, scalars.sgd,
                    scalars.clip_factor, inputs);
    return;
  }
  if (segment.descriptor->rule != UpdateRule::adam) {  // an element-wise rule (Adagrad)
    sparse_rule_step(segment.descriptor->rule, parameter, segment.states, rows, scalars.adam, scalars.clip_factor,
                     inputs);
    return;
  }
  OPSNN_CHECK(segment.states.size() >= 2, "lazy Adam for '", segment.segment->name, "' needs exp_avg and exp_avg_sq");
  Tensor max_exp_avg_sq = scalars.adam.amsgrad && segment.states.size() > 2 ? segment.states[2] : Tensor();
  lazy_adam_step(parameter, segment.states[0], segment.states[1], max_exp_avg_sq, rows, scalars.adam,
                 scalars.clip_factor, inputs);
}

std::vector<std::pair<std::string, Tensor>> RowSparseUpdater::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [index, flags] : row_initialized_)
    out.emplace_back(extension_key("sparse_rows." + names_.at(index) + ".row_initialized"), flags.clone());
  return out;
}

void RowSparseUpdater::load_state_tensors(std::map<std::string, Tensor>& tensors) {
  for (auto& [index, flags] : row_initialized_)
    flags.copy_(take_extension_state(tensors, extension_key("sparse_rows." + names_.at(index) + ".row_initialized"),
                                     flags.numel(), DType::u8)
                    .view(flags.shape()));
}

std::shared_ptr<RowSparseUpdater> install_row_sparse_updater(Optimizer& optimizer) {
  bool any_sparse = false;
  for (const ArenaSegment& segment : optimizer.arena().segments()) any_sparse |= segment.sparse;
  if (!any_sparse) return nullptr;
  auto updater = std::make_shared<RowSparseUpdater>(optimizer);
  optimizer.set_sparse_updater(updater);
  return updater;
}

}  // namespace opsnn::optim
