// Bucketed, overlapped gradient averaging over the optimizer's flat arena (data_parallel.h).
#include "opsnn/dist/data_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "dist/pair_scatter.h"
#include "opsnn/autograd/node.h"
#include "opsnn/core/error.h"
#include "opsnn/nn/module.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/optim/step_extensions.h"

namespace opsnn::dist {
namespace {

int64_t bytes_of_mb(double mb) { return static_cast<int64_t>(mb * 1024.0 * 1024.0); }

// ZeRO-1's statistics and state gathers over the communicator (optim::ShardExchange).
class CommunicatorShardExchange final : public optim::ShardExchange {
 public:
  CommunicatorShardExchange(Communicator& communicator, std::vector<int64_t> counts, const int64_t& steps)
      : communicator_(communicator), counts_(std::move(counts)), steps_(steps) {}
  void sum(const Tensor& values) override {
    communicator_.all_reduce(
        values, ReduceOp::sum,
        detail::concat("all-reduce of the sharded step's per-tensor statistics at step ", steps_ + 1));
  }
  void gather(const Tensor& buffer) override {
    communicator_.all_gather_v(buffer, counts_, "all-gather of the sharded optimizer state");
  }

 private:
  Communicator& communicator_;
  std::vector<int64_t> counts_;
  const int64_t& steps_;
};

}  // namespace

uint64_t tensor_hash(const Tensor& tensor) {
  Tensor host = tensor.device().is_cpu() ? tensor.contiguous() : tensor.to(kCPU);
  const unsigned char* bytes = static_cast<const unsigned char*>(host.data_ptr());
  const size_t count = static_cast<size_t>(host.nbytes());
  uint64_t hash = 0xcbf29ce484222325ull;
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes + i, 8);
    hash = (hash ^ word) * 0x100000001b3ull;
  }
  for (; i < count; ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

DataParallel::DataParallel(nn::Module& model, optim::Optimizer& optimizer, std::shared_ptr<Communicator> communicator,
                           DataParallelOptions options)
    : model_(model), optimizer_(optimizer), communicator_(std::move(communicator)), options_(options) {
  OPSNN_CHECK_AS(UsageError, communicator_ != nullptr, "DataParallel: no communicator (dist::init)");
  OPSNN_CHECK_AS(ConfigError, options_.bucket_mb > 0.0 && options_.bucket_mb <= 4096.0,
                 "distributed.bucket_mb = ", options_.bucket_mb, ": expected a size in MiB in (0, 4096]");
  OPSNN_CHECK_AS(ConfigError, options_.first_bucket_mb > 0.0 && options_.first_bucket_mb <= options_.bucket_mb,
                 "distributed.first_bucket_mb = ", options_.first_bucket_mb,
                 ": expected a size in MiB in (0, bucket_mb = ", options_.bucket_mb, "]");
  OPSNN_CHECK_AS(ConfigError, options_.zero_stage == 0 || options_.zero_stage == 1,
                 "distributed.zero_stage = ", options_.zero_stage,
                 ": expected 0 (plain data parallelism) or 1 (ZeRO-1: sharded optimizer states)");
  OPSNN_CHECK_AS(ConfigError, options_.check_every_steps >= 0,
                 "distributed.check_every_steps = ", options_.check_every_steps,
                 ": expected 0 (off) or a number of steps");
  const optim::ParamArena& arena = optimizer_.arena();
  const Device device = arena.device();
  OPSNN_CHECK_AS(UsageError, device == communicator_->device() || (communicator_->backend() == Backend::mpi),
                 "DataParallel: the optimizer's parameters are on ", device.str(), " but the ",
                 backend_name(communicator_->backend()), " communicator of rank ", communicator_->rank(), " works on ",
                 communicator_->device().str());
  if (optimizer_.sparsifies()) {
    topk_ = true;
    const double density = optimizer_.gradient_sparsifier()->sparsifier().options().density;
    optimizer_.gradient_sparsifier()->set_ranks(communicator_->size());  // local clipping's share per rank
    topk_pairs_ = options_.topk_exchange == DataParallelOptions::TopKExchange::pairs ||
                  (options_.topk_exchange == DataParallelOptions::TopKExchange::automatic &&
                   density * communicator_->size() < 1.0);
  }
  const std::vector<optim::ArenaSegment>& segments = arena.segments();
  for (const optim::ArenaSegment& segment : segments)
    OPSNN_CHECK_AS(
        ConfigError, !segment.sparse, "distributed training: parameter '", segment.name,
        "' has row-sparse gradients (an embedding with sparse_grad), which are not in the gradient arena and "
        "are not reduced across ranks yet; use a dense embedding or train in one process");

  // Rank 0's weights everywhere: the parameter arena in one call, then every buffer.
  communicator_->broadcast(arena.params(), 0, "broadcast of the initial parameters");
  for (auto& [name, buffer] : model_.named_buffers())
    if (buffer.numel() > 0) communicator_->broadcast(buffer, 0, "broadcast of buffer '" + name + "'");
  optimizer_.refresh_param_copy();

  // Buckets from the end of the arena (the last layers' gradients are final first), each a contiguous
  // range of whole segments; the padding between segments (zeros) rides along.
  segment_bucket_.assign(segments.size(), -1);
  int64_t end = arena.padded_elements();
  int64_t limit = std::max<int64_t>(bytes_of_mb(options_.first_bucket_mb) / 4, 1);
  GradientBucket bucket;
  bucket.end = end;
  for (size_t i = segments.size(); i-- > 0;) {
    bucket.segments.push_back(i);
    bucket.begin = segments[i].offset;
    if ((bucket.end - bucket.begin) >= limit || i == 0) {
      for (size_t s : bucket.segments) segment_bucket_[s] = static_cast<int64_t>(buckets_.size());
      buckets_.push_back(bucket);
      bucket = GradientBucket{};
      bucket.end = segments[i].offset;
      limit = std::max<int64_t>(bytes_of_mb(options_.bucket_mb) / 4, 1);
    }
  }
  for (size_t i = 0; i < segments.size(); ++i) segment_of_[segments[i].parameter.impl()] = i;
  pending_.assign(buckets_.size(), 0);

  shard_ = {0, arena.padded_elements()};
  if (options_.zero_stage == 1) {
    OPSNN_CHECK_AS(ConfigError, !topk_,
                   "distributed.zero_stage = 1 with top-k sparsification: the selection needs "
                   "every rank's whole gradient and momentum; use zero_stage 0 with top-k");
    zero_ = true;
    for (int r = 0; r < communicator_->size(); ++r)
      shards_.push_back(optim::arena_shard_range(arena.padded_elements(), r, communicator_->size()));
    shard_ = shards_[static_cast<size_t>(communicator_->rank())];
    optimizer_.shard_states(
        shard_.begin, shard_.end,
        std::make_shared<CommunicatorShardExchange>(*communicator_, shard_counts(0, arena.padded_elements()), steps_));
  }
}

std::vector<int64_t> DataParallel::shard_counts(int64_t begin, int64_t end) const {
  std::vector<int64_t> counts;
  for (const optim::ArenaShardRange& shard : shards_)
    counts.push_back(std::max<int64_t>(0, std::min(end, shard.end) - std::max(begin, shard.begin)));
  return counts;
}

int64_t DataParallel::state_bytes_per_rank() const {
  const optim::ParamArena& arena = optimizer_.arena();
  return static_cast<int64_t>(arena.state_names().size()) * (shard_.end - shard_.begin) *
         static_cast<int64_t>(dtype_size(arena.state_dtype()));
}

void DataParallel::gather_parameters() {
  const optim::ParamArena& arena = optimizer_.arena();
  const std::vector<int64_t> counts = shard_counts(0, arena.padded_elements());
  communicator_->all_gather_v(arena.params(), counts,
                              detail::concat("all-gather of the updated parameters at step ", steps_ + 1));
  if (optimizer_.param_copy_buffer().defined())
    communicator_->all_gather_v(optimizer_.param_copy_buffer(), counts,
                                detail::concat("all-gather of the parameter copy at step ", steps_ + 1));
}

DataParallel::~DataParallel() {
  // A reduction still in flight writes into the arena: finish it before the arena can go away.
  for (auto& work : in_flight_)
    if (work) work->wait();
}

void DataParallel::launch(size_t index) {
  const GradientBucket& bucket = buckets_[index];
  Tensor grads = optimizer_.arena().grads();
  Tensor range = Tensor::view_of(grads.storage(), bucket.begin, {bucket.end - bucket.begin}, DType::f32);
  const std::string what =
      detail::concat(zero_ ? "reduce-scatter" : "all-reduce", " of gradient bucket ", index + 1, " of ",
                     buckets_.size(), " (", (bucket.end - bucket.begin) * 4 / 1024, " KiB) at step ", steps_ + 1);
  in_flight_.push_back(
      zero_ ? communicator_->reduce_scatter_v_async(range, shard_counts(bucket.begin, bucket.end), ReduceOp::avg, what)
            : communicator_->all_reduce_async(range, ReduceOp::avg, what));
}

void DataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void DataParallel::on_gradient_ready(size_t segment) {
  const int64_t bucket = segment_bucket_[segment];
  if (bucket < 0 || static_cast<size_t>(bucket) < next_launch_) return;  // launched already
  int64_t& pending = pending_[static_cast<size_t>(bucket)];
  if (pending > 0 && --pending == 0) launch_ready_buckets();
}

void DataParallel::backward(const Tensor& loss, bool synchronize) {
  OPSNN_CHECK_AS(UsageError, !reducing_,
                 "DataParallel::backward: the previous synchronizing backward's reduction was not waited for (call "
                 "step() or synchronize_gradients() between them)");
  synchronized_ = false;
  if (!synchronize || topk_) {  // top-k selects from the whole gradient: the exchange waits for backward
    loss.backward();
    return;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = static_cast<int64_t>(buckets_[b].segments.size());
  next_launch_ = 0;
  in_flight_.clear();
  reducing_ = true;
  {
    autograd::GradientReadyHook hook([this](const TensorImpl& leaf) {
      auto found = segment_of_.find(&leaf);
      if (found != segment_of_.end()) on_gradient_ready(found->second);
    });
    loss.backward();
  }
  // Buckets whose tensors got no gradient in this pass (unused parameters) go now, in order.
  while (next_launch_ < buckets_.size()) launch(next_launch_++);
}

void DataParallel::wait_for_buckets() {
  for (auto& work : in_flight_) work->wait();
  in_flight_.clear();
}

void DataParallel::exchange_sparsified() {
  const std::optional<optim::TopKStepReport> report = optimizer_.sparsify_gradients();
  const optim::ParamArena& arena = optimizer_.arena();
  last_exchange_ = ExchangeReport{};
  last_exchange_.dense_bytes = arena.padded_elements() * 4;
  // Gradients with inf/NaN were not sparsified: averaging them densely carries the inf to every rank,
  // which then skips the step alike. With pairs, every rank must take part in the same collectives, so
  // whether any rank saw inf/NaN is agreed first.
  const Device device = communicator_->device();
  bool dense = !topk_pairs_;
  if (!dense) {
    const int64_t selected = report ? report->selected_count : -1;
    const std::vector<int64_t> all = communicator_->all_gather_values(
        selected, detail::concat("all-gather of the top-k counts at step ", steps_ + 1));
    const int64_t k = *std::max_element(all.begin(), all.end());
    dense = *std::min_element(all.begin(), all.end()) < 0;
    if (!dense) {
      // Fixed k per rank (NCCL has no all-gatherv): the smaller selections are padded with index -1.
      const optim::TopKSparsifier& sparsifier = optimizer_.gradient_sparsifier()->sparsifier();
      const Device arena_device = arena.device();
      Tensor indices = Tensor::full({std::max<int64_t>(k, 1)}, -1.0, DType::i64, device);
      Tensor values = Tensor::zeros({std::max<int64_t>(k, 1)}, DType::f32, device);
      if (selected > 0) {
        Tensor::view_of(indices.storage(), 0, {selected}, DType::i64)
            .copy_(sparsifier.selected_indices_tensor().to(device));
        Tensor::view_of(values.storage(), 0, {selected}, DType::f32)
            .copy_(sparsifier.selected_values_tensor().to(device));
      }
      const int world = communicator_->size();
      Tensor all_indices = Tensor::empty({world * indices.numel()}, DType::i64, device);
      Tensor all_values = Tensor::empty({world * values.numel()}, DType::f32, device);
      communicator_->all_gather(indices, all_indices,
                                detail::concat("all-gather of the top-k indices at step ", steps_ + 1));
      communicator_->all_gather(values, all_values,
                                detail::concat("all-gather of the top-k values at step ", steps_ + 1));
      // The union, summed in rank order into the zeroed arena, then averaged.
      Tensor grads = arena.grads();
      grads.zero_();
      Tensor gathered_indices = all_indices.to(arena_device), gathered_values = all_values.to(arena_device);
      const PairScatterAdd scatter = pair_scatter_add(arena_device);
      const int64_t per_rank = indices.numel();
      for (int r = 0; r < world; ++r)
        scatter(arena_device.index, grads.data<float>(),
                static_cast<const int64_t*>(gathered_indices.data_ptr()) + r * per_rank,
                static_cast<const float*>(gathered_values.data_ptr()) + r * per_rank, per_rank);
      grads.copy_(ops::scale(grads, 1.0 / world));
      last_exchange_.sparse = true;
      last_exchange_.pairs_per_rank = k;
      last_exchange_.sent_bytes = k * 12 + 8;
    }
  }
  if (dense) {
    for (size_t b = 0; b < buckets_.size(); ++b) launch(b);
    wait_for_buckets();
    last_exchange_.sent_bytes = last_exchange_.dense_bytes;
  }
}

void DataParallel::synchronize_gradients() {
  if (synchronized_) return;  // already, since the last backward
  synchronized_ = true;
  if (topk_) {
    exchange_sparsified();
    return;
  }
  if (!reducing_) {  // the last backward only accumulated (an epoch ended inside gradient accumulation)
    in_flight_.clear();
    for (size_t b = 0; b < buckets_.size(); ++b) launch(b);
    reducing_ = true;
  }
  wait_for_buckets();
  reducing_ = false;
}

void DataParallel::count_step() {
  ++steps_;
  if (options_.check_every_steps > 0 && steps_ % options_.check_every_steps == 0) check_consistency(steps_);
}

const optim::StepState& DataParallel::step() {
  synchronize_gradients();
  const optim::StepState& state = optimizer_.step();
  if (zero_) gather_parameters();
  count_step();
  return state;
}

void DataParallel::step_async() {
  synchronize_gradients();
  optimizer_.step_async();
  if (zero_) gather_parameters();
  count_step();
}

void DataParallel::check_consistency(int64_t step) {
  const optim::StepState& state = optimizer_.sync_state();
  uint64_t hash = tensor_hash(optimizer_.arena().params());
  if (!zero_)  // ZeRO-1's ranks hold different slices of the states by design
    for (size_t s = 0; s < optimizer_.arena().state_names().size(); ++s)
      hash = (hash ^ tensor_hash(optimizer_.arena().state(s))) * 0x100000001b3ull;
  const uint64_t scalars[] = {static_cast<uint64_t>(state.step), static_cast<uint64_t>(state.skipped_steps),
                              static_cast<uint64_t>(state.growth_tracker)};
  for (uint64_t value : scalars) hash = (hash ^ value) * 0x100000001b3ull;
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &state.loss_scale, sizeof scale_bits);
  hash = (hash ^ scale_bits) * 0x100000001b3ull;

  const std::vector<int64_t> hashes = communicator_->all_gather_values(
      static_cast<int64_t>(hash), detail::concat("all-gather of the consistency hashes at step ", step));
  auto hex = [](int64_t value) {
    char text[20];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
    return std::string(text);
  };
  for (int r = 1; r < communicator_->size(); ++r)
    OPSNN_CHECK_AS(RuntimeFailure, hashes[static_cast<size_t>(r)] == hashes[0],
                   "distributed.check_every_steps: after step ", step, " the parameters and optimizer state of rank ",
                   r, " differ from rank 0's (hash ", hex(hashes[static_cast<size_t>(r)]), " vs ", hex(hashes[0]),
                   "): the ranks no longer train the same model");
}

}  // namespace opsnn::dist
