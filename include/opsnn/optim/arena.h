// The flat parameter arena (src/optim/README.md): one fp32 buffer for the parameters, one for their
// gradients and one per optimizer state (in the state dtype), all on the parameters' device with the same
// element offsets. Parameters are re-homed into it (every holder of a parameter handle sees the arena),
// their .grad becomes an arena view, and a segment table maps each tensor to its range. Segments start
// on multiples of kArenaAlignmentElements; padding elements stay zero and are never touched by a step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "opsnn/core/storage.h"
#include "opsnn/core/tensor.h"
#include "opsnn/optim/step_kernels.h"

namespace opsnn::optim {

// 32 elements: 128 bytes of fp32 and 64 bytes of fp16/bf16, so every array's segments start 64-byte aligned.
inline constexpr int64_t kArenaAlignmentElements = 32;
// Chunk length of the fused passes: 16K elements (64 KB of fp32 per array) keeps a chunk's arrays in L2.
inline constexpr int64_t kArenaChunkElements = 16384;

// One parameter tensor's place in the arena.
struct ArenaSegment {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in elements, a multiple of kArenaAlignmentElements
  int64_t numel = 0;
  int32_t group = 0;         // index of its parameter group
  bool weight_decay = true;  // decay applies to this tensor
  bool sparse = false;       // gradients arrive row-sparse: skipped by the dense passes
  Tensor parameter;          // the (re-homed) parameter handle
};

// What the arena needs to know about one parameter.
struct ArenaEntry {
  std::string name;
  Tensor parameter;
  int32_t group = 0;
  bool weight_decay = true;
};

class ParamArena {
 public:
  // Re-homes every parameter (values kept) and its gradient (kept when present, else zeros); allocates
  // state_names.size() zeroed state buffers of state_dtype. Parameters must be f32, contiguous-able,
  // on one device, distinct; ShapeError/TypeError/DeviceError/ConfigError name the offending tensor.
  ParamArena(std::vector<ArenaEntry> entries, std::vector<std::string> state_names, DType state_dtype);

  const std::vector<ArenaSegment>& segments() const { return segments_; }
  const std::vector<std::string>& state_names() const { return state_names_; }
  int64_t padded_elements() const { return padded_elements_; }  // length of every arena buffer
  int64_t parameter_elements() const;                           // sum of the segments' numel
  Device device() const { return device_; }
  DType state_dtype() const { return state_dtype_; }

  // Flat views of whole buffers (padded length) and shaped views of one segment.
  Tensor params() const { return Tensor::view_of(params_, 0, {padded_elements_}, DType::f32); }
  Tensor grads() const { return Tensor::view_of(grads_, 0, {padded_elements_}, DType::f32); }
  // A state buffer: the whole arena's, or with sharded states the shard's (shard_end - shard_begin).
  Tensor state(size_t index) const;
  // A segment's state, shaped; UsageError with sharded states (the segment may lie on other ranks).
  Tensor state_view(size_t index, size_t segment) const;
  Tensor grad_view(size_t segment) const;

  // Chunks of the dense passes (sparse segments left out) and the raw view kernels take: with sharded
  // states, the shard's chunks (cut at its ends, offsets relative to shard_begin) over buffers that start
  // at shard_begin.
  const std::vector<ArenaChunk>& dense_chunks() const { return dense_chunks_; }
  const std::vector<ArenaChunk>& step_chunks() const { return sharded() ? shard_chunks_ : dense_chunks_; }
  ArenaView view() const;

  // ZeRO-1: keep the optimizer states only for elements [begin, end) (multiples of kArenaAlignmentElements,
  // or end = padded_elements()); their values there are kept. A segment may straddle either end. Steps then
  // cover only that range (view(), step_chunks()). Row-sparse segments cannot be sharded (ConfigError).
  void shard_states(int64_t begin, int64_t end);
  bool sharded() const { return sharded_; }
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return sharded_ ? shard_end_ : padded_elements_; }

  // Zeroes every gradient (one fill over the buffer) and clears row-sparse gradients.
  void zero_grads();
  // Before a step: throws if a parameter left the arena (another optimizer re-homed it); adopts a
  // replaced .grad (copying its values into the arena) and treats a missing one as zeros.
  void reclaim_grads();

 private:
  std::vector<ArenaSegment> segments_;
  std::vector<std::string> state_names_;
  std::vector<ArenaChunk> dense_chunks_, shard_chunks_;
  bool sharded_ = false;
  int64_t shard_begin_ = 0, shard_end_ = 0;
  std::shared_ptr<Storage> params_, grads_;
  std::vector<std::shared_ptr<Storage>> states_;
  int64_t padded_elements_ = 0;
  Device device_ = kCPU;
  DType state_dtype_ = DType::f32;
};

}  // namespace opsnn::optim
