// Data parallelism over a Communicator: every rank holds the whole model and optimizer, computes on its
// own share of each batch, and the gradients are averaged over ranks before the (identical) optimizer
// step, so every rank makes the same update and the parameters stay equal. As in PyTorch DDP the
// flat gradient arena is reduced in buckets that start while backward still runs: a bucket is launched
// as soon as every gradient in it is final (autograd's gradient-ready hook), buckets are launched in the
// same order on every rank (bucket i waits for bucket i - 1), a small first bucket gets communication
// going early, and step() waits for the rest. Because the reduced gradients are identical on every rank,
// the fused step's found-inf check, the gradient norm (clipping, the monitor), LAMB's per-tensor norms
// and the loss scaler decide alike everywhere: an inf on one rank becomes an inf in the average, and
// every rank skips that step and backs off its scale identically.
//
//   auto comm = opsnn::dist::init({.device = "cpu"});
//   opsnn::dist::DataParallel ddp(*model, *optimizer, comm);   // broadcasts rank 0's weights
//   ddp.backward(optimizer->scale_loss(loss));                  // reduction overlapped with backward
//   ddp.step();                                                 // waits for it, then optimizer->step()
//   optimizer->zero_grad();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "opsnn/dist/communicator.h"
#include "opsnn/optim/shard.h"
#include "opsnn/optim/step_state.h"

namespace opsnn::nn {
class Module;
}
namespace opsnn::optim {
class Optimizer;
}

namespace opsnn::dist {

struct DataParallelOptions {
  double bucket_mb = 25.0;       // gradient bucket size after the first, in MiB (PyTorch DDP's default)
  double first_bucket_mb = 1.0;  // the first bucket (the last layers' gradients, ready first)
  // Every this many steps, all-gather a hash of the parameters and the step state and stop with
  // RuntimeFailure on a mismatch (0: never). A debugging aid: costs a device-to-host copy of the arena.
  int64_t check_every_steps = 0;
  // Top-k sparsification (OptimizerOptions::sparsification): how the ranks' selections are combined.
  // auto: the (index, value) pairs by all-gather while that sends less than a dense all-reduce, i.e.
  // density < 1 / world size, else a dense all-reduce of the sparsified gradients (the same sum).
  enum class TopKExchange { automatic, pairs, dense };
  TopKExchange topk_exchange = TopKExchange::automatic;
  // 1: ZeRO stage 1 (Rajbhandari et al. 2020): the optimizer states (and the fp32 masters' update) are
  // sharded as contiguous, aligned slices of the arena (optim::arena_shard_range); each bucket's gradients
  // are reduced to the ranks owning its slices (a reduce-scatter, overlapped with backward as before), every
  // rank steps its slice, and the parameters (and the low-precision copy) are all-gathered after the step.
  // 0: every rank keeps every state (plain data parallelism).
  int zero_stage = 0;
};

// What the last step exchanged (top-k), per rank.
struct ExchangeReport {
  bool sparse = false;         // the step exchanged pairs (false: a dense all-reduce)
  int64_t pairs_per_rank = 0;  // k of the all-gather: the largest selection of any rank (the others pad)
  int64_t sent_bytes = 0;      // this rank's contribution (pairs: k x (8 + 4) bytes + the count)
  int64_t dense_bytes = 0;     // what a dense all-reduce contributes: 4 bytes per arena element
};

// One gradient bucket: elements [begin, end) of the arena and the segments it holds.
struct GradientBucket {
  int64_t begin = 0;
  int64_t end = 0;
  std::vector<size_t> segments;
};

class DataParallel {
 public:
  // Broadcasts rank 0's parameters (the whole arena at once) and module buffers (BatchNorm statistics)
  // to every rank, and plans the buckets. ConfigError for row-sparse (sparse_grad) tables, whose
  // gradients are not in the arena; UsageError when the optimizer's arena is not on the communicator's
  // device (the MPI backend takes any). With top-k sparsification (Lin et al. 2018, "Deep Gradient
  // Compression") each rank selects from its own gradient (its residual and momentum masked by what it
  // sent), the selections are summed in rank order and averaged, and every rank applies that identical
  // union update; the reduction then waits for the end of backward (the selection needs every gradient).
  DataParallel(nn::Module& model, optim::Optimizer& optimizer, std::shared_ptr<Communicator> communicator,
               DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // loss.backward() with the gradient reduction overlapped. With synchronize false (every micro-batch of
  // gradient accumulation but the last) gradients only accumulate locally.
  void backward(const Tensor& loss, bool synchronize = true);
  // Waits for the reduction started by backward(), then runs the optimizer's step. After a backward
  // without synchronize (an epoch that ended inside gradient accumulation) the whole arena is reduced now.
  const optim::StepState& step();
  // The same with Optimizer::step_async(): on a GPU the step is only enqueued (see there).
  void step_async();
  // The reduction of step() without the step (an embedding program's own update, or to inspect the
  // averaged gradients before step(), which then does not reduce them again). With ZeRO-1 only this
  // rank's slice of the arena holds the average afterwards.
  void synchronize_gradients();

  // The all-gathered hash check of DataParallelOptions::check_every_steps, run now.
  void check_consistency(int64_t step);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // ZeRO-1: this rank's slice of the arena ([0, padded) without sharding) and the optimizer-state bytes it
  // holds (states x slice length x state dtype size; without sharding the whole arena's).
  optim::ArenaShardRange shard() const { return shard_; }
  int64_t state_bytes_per_rank() const;
  // Top-k: whether the pairs are exchanged (see DataParallelOptions::topk_exchange) and the last step's
  // volume.
  bool exchanges_pairs() const { return topk_pairs_; }
  const ExchangeReport& last_exchange() const { return last_exchange_; }
  Communicator& communicator() { return *communicator_; }
  const DataParallelOptions& options() const { return options_; }

 private:
  void on_gradient_ready(size_t segment);
  // Top-k: this rank's selection (in place in the gradient arena), then the union summed over ranks.
  void exchange_sparsified();
  void wait_for_buckets();  // every collective in flight, then none is
  void count_step();        // after a step: its count, and the consistency check when due
  void launch_ready_buckets();
  void launch(size_t bucket);
  // ZeRO-1, after a step: every rank's updated slice of the parameters (and their copy) to every rank.
  void gather_parameters();
  // ZeRO-1: per rank, how many elements of [begin, end) its shard holds.
  std::vector<int64_t> shard_counts(int64_t begin, int64_t end) const;

  nn::Module& model_;
  optim::Optimizer& optimizer_;
  std::shared_ptr<Communicator> communicator_;
  DataParallelOptions options_;
  std::vector<GradientBucket> buckets_;
  std::vector<int64_t> segment_bucket_;                 // bucket of each arena segment
  std::unordered_map<const void*, size_t> segment_of_;  // TensorImpl of a parameter -> its segment
  std::vector<int64_t> pending_;                        // per bucket: segments not yet final in this backward
  std::vector<std::unique_ptr<Work>> in_flight_;
  size_t next_launch_ = 0;
  bool reducing_ = false;      // a synchronizing backward ran and its reduction is not waited for yet
  bool synchronized_ = false;  // the gradients of the last backward are reduced (step() does not again)
  int64_t steps_ = 0;
  bool topk_ = false, topk_pairs_ = false;
  ExchangeReport last_exchange_;
  bool zero_ = false;
  optim::ArenaShardRange shard_;
  std::vector<optim::ArenaShardRange> shards_;  // every rank's (ZeRO-1)
};

// A 64-bit hash of a tensor's bytes (FNV-1a over 8-byte words; the values are copied to the host).
uint64_t tensor_hash(const Tensor& tensor);

}  // namespace opsnn::dist
