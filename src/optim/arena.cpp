// The flat parameter arena: layout (aligned offsets, chunks), re-homing parameters and gradients into it,
// zeroing gradients and re-adopting gradients that were replaced behind the optimizer's back.
#include "opsnn/optim/arena.h"

#include <algorithm>
#include <unordered_map>

#include "opsnn/core/error.h"

namespace opsnn::optim {
namespace {

int64_t align_up(int64_t value, int64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

std::shared_ptr<Storage> zeroed_storage(int64_t elements, DType dtype, Device device) {
  auto storage = std::make_shared<Storage>(static_cast<size_t>(elements) * dtype_size(dtype), device);
  if (elements > 0) device_services(device).fill(storage->data(), dtype, 0.0, elements, device.index);
  return storage;
}

void check_entry(const ArenaEntry& entry, Device device) {
  const Tensor& p = entry.parameter;
  OPSNN_CHECK_AS(ConfigError, p.defined(), "parameter '", entry.name, "' is an undefined tensor");
  OPSNN_CHECK_AS(TypeError, p.dtype() == DType::f32, "parameter '", entry.name, "' is ", dtype_name(p.dtype()),
                 ": the optimizer keeps fp32 master weights, so parameters must be f32");
  OPSNN_CHECK_AS(ConfigError, p.requires_grad(), "parameter '", entry.name,
                 "' does not require grad; pass only trainable parameters");
  OPSNN_CHECK_AS(ConfigError, p.is_leaf(), "parameter '", entry.name,
                 "' is not a leaf tensor (it was computed by an op); pass the leaf parameters");
  OPSNN_CHECK_AS(DeviceError, p.device() == device, "parameter '", entry.name, "' is on ", p.device().str(),
                 " but the first parameter is on ", device.str(), "; all parameters must share one device");
}

}  // namespace

ParamArena::ParamArena(std::vector<ArenaEntry> entries, std::vector<std::string> state_names, DType state_dtype)
    : state_names_(std::move(state_names)), state_dtype_(state_dtype) {
  OPSNN_CHECK_AS(ConfigError, !entries.empty(), "the optimizer got no parameters to optimize");
  OPSNN_CHECK(state_names_.size() <= static_cast<size_t>(kMaxOptimizerStates), "at most ", kMaxOptimizerStates,
              " optimizer states are supported, got ", state_names_.size());
  device_ = entries.front().parameter.defined() ? entries.front().parameter.device() : kCPU;

  std::unordered_map<const TensorImpl*, std::string> seen;
  std::unordered_map<std::string, int> names;
  int64_t cursor = 0;
  for (ArenaEntry& entry : entries) {
    check_entry(entry, device_);
    // The name keys its states ("<name>.exp_avg") in state dicts and checkpoints.
    OPSNN_CHECK_AS(ConfigError, !entry.name.empty(), "parameter ", segments_.size(),
                   " has an empty name (state dicts key its states by name)");
    auto [it, inserted] = seen.emplace(entry.parameter.impl(), entry.name);
    OPSNN_CHECK_AS(ConfigError, inserted, "parameter '", entry.name, "' is the same tensor as '", it->second,
                   "': each parameter may appear once");
    OPSNN_CHECK_AS(ConfigError, names.emplace(entry.name, 0).second, "two parameters are named '", entry.name,
                   "': names key the optimizer state and must be unique");
    ArenaSegment segment;
    segment.name = entry.name;
    segment.shape = entry.parameter.shape();
    segment.numel = entry.parameter.numel();
    segment.offset = align_up(cursor, kArenaAlignmentElements);
    segment.group = entry.group;
    segment.weight_decay = entry.weight_decay;
    segment.sparse = entry.parameter.sparse_grad();
    segment.parameter = entry.parameter;
    cursor = segment.offset + segment.numel;
    segments_.push_back(std::move(segment));
  }
  padded_elements_ = std::max<int64_t>(align_up(cursor, kArenaAlignmentElements), kArenaAlignmentElements);

  params_ = zeroed_storage(padded_elements_, DType::f32, device_);
  grads_ = zeroed_storage(padded_elements_, DType::f32, device_);
  for (size_t i = 0; i < state_names_.size(); ++i)
    states_.push_back(zeroed_storage(padded_elements_, state_dtype_, device_));

  for (size_t i = 0; i < segments_.size(); ++i) {
    ArenaSegment& segment = segments_[i];
    Tensor old_grad = segment.parameter.grad();
    segment.parameter.rehome(params_, segment.offset);
    Tensor grad = grad_view(i);
    if (old_grad.defined() && old_grad.shape() == segment.shape) grad.copy_(old_grad);
    segment.parameter.set_grad(grad);
    for (int64_t begin = 0; begin < segment.numel && !segment.sparse; begin += kArenaChunkElements) {
      int64_t end = std::min(segment.numel, begin + kArenaChunkElements);
      dense_chunks_.push_back({segment.offset + begin, segment.offset + end, static_cast<int32_t>(i)});
    }
  }
}

int64_t ParamArena::parameter_elements() const {
  int64_t total = 0;
  for (const ArenaSegment& segment : segments_) total += segment.numel;
  return total;
}

Tensor ParamArena::state(size_t index) const {
  OPSNN_CHECK(index < states_.size(), "optimizer state index ", index, " out of range (", states_.size(), " states)");
  return Tensor::view_of(states_[index], 0, {shard_end() - shard_begin()}, state_dtype_);
}

Tensor ParamArena::state_view(size_t index, size_t segment) const {
  OPSNN_CHECK(index < states_.size() && segment < segments_.size(), "state view (", index, ", ", segment,
              ") out of range");
  OPSNN_CHECK_AS(UsageError, !sharded_, "the optimizer states are sharded (ZeRO-1): parameter '",
                 segments_[segment].name, "' has no whole state on this rank");
  return Tensor::view_of(states_[index], segments_[segment].offset, segments_[segment].shape, state_dtype_);
}

Tensor ParamArena::grad_view(size_t segment) const {
  OPSNN_CHECK(segment < segments_.size(), "segment ", segment, " out of range");
  return Tensor::view_of(grads_, segments_[segment].offset, segments_[segment].shape, DType::f32);
}

ArenaView ParamArena::view() const {
  ArenaView view;
  view.params = static_cast<float*>(params_->data()) + shard_begin_;
  view.grads = static_cast<float*>(grads_->data()) + shard_begin_;
  for (size_t i = 0; i < states_.size(); ++i) view.states[i] = states_[i]->data();
  view.state_dtype = state_dtype_;
  const std::vector<ArenaChunk>& chunks = step_chunks();
  view.chunks = chunks.data();
  view.chunk_count = static_cast<int64_t>(chunks.size());
  return view;
}

void ParamArena::shard_states(int64_t begin, int64_t end) {
  OPSNN_CHECK_AS(UsageError,
                 begin >= 0 && begin <= end && end <= padded_elements_ && begin % kArenaAlignmentElements == 0 &&
                     (end % kArenaAlignmentElements == 0 || end == padded_elements_),
                 "arena shard [", begin, ", ", end, ") of an arena of ", padded_elements_,
                 " elements: the ends must be aligned multiples of ", kArenaAlignmentElements, " inside the arena");
  for (const ArenaSegment& segment : segments_)
    OPSNN_CHECK_AS(ConfigError, !segment.sparse, "parameter '", segment.name,
                   "' has row-sparse gradients (sparse_grad): its optimizer states cannot be sharded");
  const int64_t old_begin = shard_begin_;
  std::vector<std::shared_ptr<Storage>> states;
  for (const std::shared_ptr<Storage>& old : states_) {
    std::shared_ptr<Storage> storage = zeroed_storage(end - begin, state_dtype_, device_);
    // The new range's values from the old buffer (which covers [old_begin, shard_end())).
    const int64_t from = std::max(begin, old_begin), to = std::min(end, shard_end());
    if (to > from)
      Tensor::view_of(storage, from - begin, {to - from}, state_dtype_)
          .copy_(Tensor::view_of(old, from - old_begin, {to - from}, state_dtype_));
    states.push_back(std::move(storage));
  }
  states_ = std::move(states);
  sharded_ = true;
  shard_begin_ = begin;
  shard_end_ = end;
  shard_chunks_.clear();
  for (const ArenaChunk& chunk : dense_chunks_) {
    const int64_t from = std::max(chunk.begin, begin), to = std::min(chunk.end, end);
    if (to > from) shard_chunks_.push_back({from - begin, to - begin, chunk.segment});
  }
}

void ParamArena::zero_grads() {
  device_services(device_).fill(grads_->data(), DType::f32, 0.0, padded_elements_, device_.index);
  for (ArenaSegment& segment : segments_)
    if (segment.sparse) segment.parameter.row_sparse_grad().clear();
}

void ParamArena::reclaim_grads() {
  for (size_t i = 0; i < segments_.size(); ++i) {
    ArenaSegment& segment = segments_[i];
    const Tensor& p = segment.parameter;
    OPSNN_CHECK(p.storage() == params_ && p.offset() == segment.offset && p.is_contiguous(), "parameter '",
                segment.name,
                "' no longer lives in this optimizer's arena (another optimizer or a re-home moved "
                "it); build one optimizer per set of parameters");
    if (segment.sparse) continue;
    Tensor grad = p.grad();
    if (grad.defined() && grad.storage() == grads_ && grad.offset() == segment.offset) continue;
    Tensor arena_grad = grad_view(i);
    if (grad.defined())
      arena_grad.copy_(grad);
    else
      arena_grad.zero_();
    segment.parameter.set_grad(arena_grad);
  }
}

}  // namespace opsnn::optim
