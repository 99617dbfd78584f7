// What an optimizer whose states are sharded over ranks (ZeRO stage 1: Rajbhandari et al. 2020, "ZeRO:
// Memory Optimizations Toward Training Trillion Parameter Models") needs from the ranks that share its
// step. The optimizer library knows nothing of communication: dist::DataParallel implements this over
// its Communicator.
#pragma once

#include <cstdint>

#include "opsnn/core/tensor.h"

namespace opsnn::optim {

class ShardExchange {
 public:
  virtual ~ShardExchange() = default;
  // In place: each value of `values` (f64, contiguous, on the arena's device) becomes its sum over the
  // ranks, identical on every rank; on a GPU ordered after the work already queued and before later work.
  virtual void sum(const Tensor& values) = 0;
  // In place: `buffer` (one element per arena element, any dtype) receives every rank's shard from it.
  virtual void gather(const Tensor& buffer) = 0;
};

// Rank `rank` of `world`'s shard of an arena of `elements`: [begin, end), contiguous, consecutive over
// the ranks, each ceil(elements / world) rounded up to the arena alignment (the last ones shorter, or
// empty for a tiny arena).
struct ArenaShardRange {
  int64_t begin = 0;
  int64_t end = 0;
};
ArenaShardRange arena_shard_range(int64_t elements, int rank, int world);

}  // namespace opsnn::optim
