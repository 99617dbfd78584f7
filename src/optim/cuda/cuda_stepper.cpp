// The CUDA DeviceStepper: owns the device tables and scratch of one optimizer's fused step and enqueues
// the fused step pipeline (src/optim/README.md) on the thread's current stream (or on a private one while
// capture() records):
//   two-pass: grad sums of squares -> segment sums -> prologue (norm, clip, skip, schedule, scaler)
//             -> update -> epilogue (parameter check)
//   single pass (no clipping, no loss scaling, on_nonfinite = warn): prologue -> update with the gradient
//             sums riding along -> segment sums -> epilogue (norm, monitor flags)
//   LAMB:     as either of the above with the update being LAMB's one kernel (launch_lamb: phase 1 ->
//             per-segment trust ratios -> phase 2, ordered by windows of segments so that phase 2 rereads
//             the moments from L2 where a window fits)
// No step reads anything back to the host; read() copies the state out through pinned memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
#include "core/cuda/device_guard.h"
#include "core/cuda/multiprocessors.h"
#include "opsnn/core/error.h"
#include "opsnn/core/storage.h"
#include "opsnn/core/tensor.h"
#include "opsnn/optim/device_step.h"
#include "optim/cuda/fused_step_kernels.h"
#include "optim/cuda/register.h"

namespace opsnn::optim::cuda {
namespace {

using CurrentDevice = ::opsnn::cuda::DeviceGuard;

template <typename T>
struct PinnedDeleter {
  void operator()(T* pointer) const { cudaFreeHost(pointer); }
};
template <typename T>
std::unique_ptr<T[], PinnedDeleter<T>> pinned_array(size_t count) {
  void* pointer = nullptr;
  OPSNN_CUDA_CHECK(cudaMallocHost(&pointer, std::max<size_t>(count, 1) * sizeof(T)));
  return std::unique_ptr<T[], PinnedDeleter<T>>(static_cast<T*>(pointer));
}

void check_dtype(const char* what, DType dtype) {
  OPSNN_CHECK_AS(TypeError, dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16,
                 "the fused CUDA step keeps ", what, " as f32, f16 or bf16, not ", dtype_name(dtype));
}

class CudaCapturedStep final : public CapturedStep {
 public:
  CudaCapturedStep(int device, cudaStream_t stream, cudaGraph_t graph, cudaGraphExec_t exec)
      : device_(device), stream_(stream), graph_(graph), exec_(exec) {
    OPSNN_CUDA_CHECK(cudaEventCreateWithFlags(&before_, cudaEventDisableTiming));
    OPSNN_CUDA_CHECK(cudaEventCreateWithFlags(&after_, cudaEventDisableTiming));
  }
  // Never throws (a destructor): errors while releasing are ignored, the previous device is restored.
  ~CudaCapturedStep() override {
    ::opsnn::cuda::DeviceGuard guard(device_, std::nothrow);
    cudaStreamSynchronize(stream_);
    cudaEventDestroy(before_);
    cudaEventDestroy(after_);
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
    cudaStreamDestroy(stream_);
  }

  // The graph runs on its own (non-blocking) stream, fenced by events on both sides against the legacy
  // default stream where the rest of the framework's work goes.
  void replay() override {
    CurrentDevice guard(device_);
    OPSNN_CUDA_CHECK(cudaEventRecord(before_, cudaStreamLegacy));
    OPSNN_CUDA_CHECK(cudaStreamWaitEvent(stream_, before_, 0));
    OPSNN_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
    OPSNN_CUDA_CHECK(cudaEventRecord(after_, stream_));
    OPSNN_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, after_, 0));
  }

 private:
  int device_;
  cudaStream_t stream_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaEvent_t before_ = nullptr, after_ = nullptr;
};

// LAMB's work order over the tiles: windows of whole segments of at least `window` elements (a larger
// segment is a window of its own); phase 1 of window w + 1 runs between phase 1 and phase 2 of window w,
// so a segment's last phase-1 tiles are usually done before its phase 2 starts, and phase 2 finds the
// moments phase 1 wrote still in L2. Item = tile * 2 + phase.
std::vector<int32_t> lamb_work_items(const std::vector<ArenaChunk>& tiles, int64_t window) {
  std::vector<std::pair<int32_t, int32_t>> windows;  // [first tile, end tile)
  int64_t elements = 0;
  for (size_t t = 0; t < tiles.size(); ++t) {
    const bool new_segment = t == 0 || tiles[t].segment != tiles[t - 1].segment;
    if (windows.empty() || (new_segment && elements >= window)) {
      windows.push_back({static_cast<int32_t>(t), static_cast<int32_t>(t)});
      elements = 0;
    }
    windows.back().second = static_cast<int32_t>(t + 1);
    elements += tiles[t].end - tiles[t].begin;
  }
  std::vector<int32_t> items;
  items.reserve(2 * tiles.size());
  auto add = [&](size_t w, int32_t phase) {
    for (int32_t t = windows[w].first; t < windows[w].second; ++t) items.push_back(t * 2 + phase);
  };
  for (size_t w = 0; w < windows.size(); ++w) {
    add(w, 0);
    if (w > 0) add(w - 1, 1);
  }
  if (!windows.empty()) add(windows.size() - 1, 1);
  return items;
}

// What read() brings back after a step, in one device allocation.
struct StepStatus {
  StepState state;
  DeviceStepReport report;
};

class CudaStepper final : public DeviceStepper {
 public:
  CudaStepper(Device device, const StepConstants& constants, const DeviceArena& arena,
              const std::vector<DeviceSegment>& segments)
      : device_(device), constants_(constants) {
    OPSNN_CHECK_AS(DeviceError, device.type == DeviceType::cuda, "the CUDA stepper got a ", device.str(), " arena");
    OPSNN_CHECK(arena.params != nullptr && arena.grads != nullptr,
                "the CUDA stepper needs parameter and gradient buffers");
    check_dtype("gradients", arena.grad_dtype);
    check_dtype("optimizer states", arena.state_dtype);
    if (arena.param_copy != nullptr)
      OPSNN_CHECK_AS(TypeError, arena.param_copy_dtype == DType::f16 || arena.param_copy_dtype == DType::bf16,
                     "the low-precision parameter copy must be f16 or bf16, not ", dtype_name(arena.param_copy_dtype));
    OPSNN_CHECK(segments.size() < 0x7fffffffu, "too many segments: ", segments.size());
    CurrentDevice guard(device.index);
    // The arena's chunks cut into tiles (the passes' work items); each segment's tiles are contiguous.
    int64_t elements = 0;
    for (int64_t c = 0; c < arena.chunk_count; ++c) elements += arena.chunks[c].end - arena.chunks[c].begin;
    // Passes size their grids as SMs x resident blocks per SM.
    const int multiprocessors = static_cast<int>(opsnn::cuda::multiprocessor_count(device.index));
    int64_t tile_elements = constants.rule == UpdateRule::lamb ? kMinLambTileElements : kMinTileElements;
    while (tile_elements < kMaxTileElements && elements / tile_elements > 128 * static_cast<int64_t>(multiprocessors))
      tile_elements *= 2;
    std::vector<ArenaChunk> tiles;
    tile_first_.assign(segments.size(), 0);
    tile_count_.assign(segments.size(), 0);
    for (int64_t c = 0; c < arena.chunk_count; ++c) {
      const ArenaChunk& chunk = arena.chunks[c];
      OPSNN_CHECK(chunk.segment >= 0 && static_cast<size_t>(chunk.segment) < segments.size(), "arena chunk ", c,
                  " names segment ", chunk.segment, " of ", segments.size());
      size_t segment = static_cast<size_t>(chunk.segment);
      if (tile_count_[segment] == 0) tile_first_[segment] = static_cast<int32_t>(tiles.size());
      for (int64_t begin = chunk.begin; begin < chunk.end; begin += tile_elements) {
        tiles.push_back({begin, std::min(chunk.end, begin + tile_elements), chunk.segment});
        tile_count_[segment] += 1;
      }
    }
    OPSNN_CHECK(tiles.size() < 0x7fffffffu, "arena too large: ", tiles.size(), " tiles");
    const size_t chunks = tiles.size(), count = segments.size();
    chunks_ = allocate(chunks * sizeof(ArenaChunk));
    segments_ = allocate(count * sizeof(DeviceSegment));
    sums_ = std::make_shared<Storage>(std::max<size_t>((3 * chunks + 5 * count) * sizeof(double), 16), device_);
    status_ = allocate(sizeof(StepStatus));
    scalars_ = allocate(sizeof(StepScalars));

    buffers_.arena = arena;
    buffers_.arena.chunks = nullptr;
    buffers_.chunks = static_cast<const ArenaChunk*>(chunks_->data());
    buffers_.chunk_count = static_cast<int32_t>(chunks);
    buffers_.multiprocessors = multiprocessors;
    buffers_.segments = static_cast<const DeviceSegment*>(segments_->data());
    buffers_.segment_count = static_cast<int32_t>(count);
    double* sums = static_cast<double*>(sums_->data());
    for (int a = 0; a < 3; ++a) {
      buffers_.chunk_sums[a] = sums + a * chunks;
      buffers_.segment_sums[a] = sums + 3 * chunks + a * count;
    }
    buffers_.segment_grad_sums = sums + 3 * chunks + 3 * count;
    sparse_sums_device_ = sums + 3 * chunks + 4 * count;
    buffers_.state = &static_cast<StepStatus*>(status_->data())->state;
    buffers_.scalars = static_cast<StepScalars*>(scalars_->data());
    buffers_.report = &static_cast<StepStatus*>(status_->data())->report;

    if (chunks > 0)
      OPSNN_CUDA_CHECK(cudaMemcpy(chunks_->data(), tiles.data(), chunks * sizeof(ArenaChunk), cudaMemcpyHostToDevice));
    if (constants.rule == UpdateRule::lamb) {
      // A window's parameters, moments (and gradients, on the way) should fit L2 twice over: the next
      // window's phase 1 streams through while this one's phase 2 rereads.
      int l2_bytes = 0;
      OPSNN_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device.index));
      const int64_t per_element =
          static_cast<int64_t>(4 + dtype_size(arena.grad_dtype) + 2 * dtype_size(arena.state_dtype));
      int64_t window = std::max<int64_t>(int64_t{l2_bytes} / (2 * per_element), kMaxTileElements);
      const std::vector<int32_t> items = lamb_work_items(tiles, window);
      lamb_items_ = allocate(items.size() * sizeof(int32_t));
      lamb_flags_ = allocate((1 + 2 * count) * sizeof(int32_t) + count * sizeof(float));
      if (!items.empty())
        OPSNN_CUDA_CHECK(
            cudaMemcpy(lamb_items_->data(), items.data(), items.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
      OPSNN_CUDA_CHECK(cudaMemset(lamb_flags_->data(), 0, lamb_flags_->bytes()));
      if (constants.sharded) {
        std::vector<int32_t> phase1(tiles.size()), phase2(tiles.size());
        for (size_t t = 0; t < tiles.size(); ++t) {
          phase1[t] = static_cast<int32_t>(t * 2);
          phase2[t] = static_cast<int32_t>(t * 2 + 1);
        }
        lamb_phase_items_ = static_cast<int32_t>(tiles.size());
        lamb_phase1_items_ = allocate(tiles.size() * sizeof(int32_t));
        lamb_phase2_items_ = allocate(tiles.size() * sizeof(int32_t));
        if (!tiles.empty()) {
          OPSNN_CUDA_CHECK(cudaMemcpy(lamb_phase1_items_->data(), phase1.data(), phase1.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice));
          OPSNN_CUDA_CHECK(cudaMemcpy(lamb_phase2_items_->data(), phase2.data(), phase2.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice));
        }
      }
      int32_t* flags = static_cast<int32_t*>(lamb_flags_->data());
      buffers_.lamb.items = static_cast<const int32_t*>(lamb_items_->data());
      buffers_.lamb.item_count = static_cast<int32_t>(items.size());
      buffers_.lamb.next_item = flags;
      buffers_.lamb.segment_done = flags + 1;
      buffers_.lamb.segment_ready = flags + 1 + count;
      buffers_.lamb.trust = reinterpret_cast<float*>(flags + 1 + 2 * count);
    }
    OPSNN_CUDA_CHECK(cudaMemset(sums_->data(), 0, sums_->bytes()));
    DeviceStepReport report;
    OPSNN_CUDA_CHECK(cudaMemcpy(buffers_.report, &report, sizeof(report), cudaMemcpyHostToDevice));
    set_segments(segments);

    pinned_status_ = pinned_array<StepStatus>(1);
    pinned_sparse_ = pinned_array<double>(count);
  }

  void enqueue(const std::vector<double>* sparse_sums) override {
    CurrentDevice guard(device_.index);
    buffers_.sparse_sums = nullptr;
    buffers_.sparse_stats = nullptr;
    if (sparse_sums != nullptr) {
      OPSNN_CHECK(sparse_sums->size() == static_cast<size_t>(buffers_.segment_count), "sparse sums: got ",
                  sparse_sums->size(), " values for ", buffers_.segment_count, " segments");
      std::copy(sparse_sums->begin(), sparse_sums->end(), pinned_sparse_.get());
      OPSNN_CUDA_CHECK(cudaMemcpyAsync(sparse_sums_device_, pinned_sparse_.get(), sparse_sums->size() * sizeof(double),
                                       cudaMemcpyHostToDevice, stream()));
      buffers_.sparse_sums = sparse_sums_device_;
    }
    enqueue_step();
  }

  // The table of pointers goes to the device only when it changes (the coalescing keeps its buffers).
  void enqueue(const std::vector<DeviceSparseStats>& sparse_stats) override {
    CurrentDevice guard(device_.index);
    OPSNN_CHECK(sparse_stats.size() == static_cast<size_t>(buffers_.segment_count), "sparse statistics: got ",
                sparse_stats.size(), " entries for ", buffers_.segment_count, " segments");
    const bool changed = sparse_stats.size() != uploaded_stats_.size() ||
                         !std::equal(sparse_stats.begin(), sparse_stats.end(), uploaded_stats_.begin(),
                                     [](const DeviceSparseStats& a, const DeviceSparseStats& b) {
                                       return a.sum_of_squares == b.sum_of_squares && a.first_bad == b.first_bad;
                                     });
    if (!sparse_stats_device_) sparse_stats_device_ = allocate(sparse_stats.size() * sizeof(DeviceSparseStats));
    if (changed) {
      // Ordered before the step on the same stream; synchronous, so the host vector may go away after.
      OPSNN_CUDA_CHECK(cudaMemcpy(sparse_stats_device_->data(), sparse_stats.data(),
                                  sparse_stats.size() * sizeof(DeviceSparseStats), cudaMemcpyHostToDevice));
      uploaded_stats_ = sparse_stats;
    }
    buffers_.sparse_sums = nullptr;
    buffers_.sparse_stats = static_cast<const DeviceSparseStats*>(sparse_stats_device_->data());
    enqueue_step();
  }

  const StepScalars* device_scalars() const override { return buffers_.scalars; }
  const StepState* device_state() const override { return buffers_.state; }

  void set_cross_rank_sum(std::function<void(const Tensor&)> sum) override {
    OPSNN_CHECK_AS(UsageError, constants_.sharded, "set_cross_rank_sum: this stepper's step is not sharded");
    cross_rank_sum_ = std::move(sum);
  }

  void read(StepState& state, DeviceStepReport& report) override {
    CurrentDevice guard(device_.index);
    // One copy: the state and the report lie side by side.
    OPSNN_CUDA_CHECK(
        cudaMemcpyAsync(pinned_status_.get(), status_->data(), sizeof(StepStatus), cudaMemcpyDeviceToHost, stream()));
    OPSNN_CUDA_CHECK(cudaStreamSynchronize(stream()));
    state = pinned_status_[0].state;
    report = pinned_status_[0].report;
  }

  void write_state(const StepState& state) override {
    CurrentDevice guard(device_.index);
    OPSNN_CUDA_CHECK(cudaMemcpy(buffers_.state, &state, sizeof(StepState), cudaMemcpyHostToDevice));
  }

  void set_segments(const std::vector<DeviceSegment>& segments) override {
    OPSNN_CHECK(segments.size() == static_cast<size_t>(buffers_.segment_count), "set_segments: got ", segments.size(),
                " segments, the arena has ", buffers_.segment_count);
    if (segments.empty()) return;
    std::vector<DeviceSegment> table = segments;
    for (size_t i = 0; i < table.size(); ++i) {  // the segments' ranges in this stepper's tiles
      table[i].first_chunk = tile_first_[i];
      table[i].chunk_count = table[i].sparse ? 0 : tile_count_[i];
    }
    CurrentDevice guard(device_.index);
    OPSNN_CUDA_CHECK(
        cudaMemcpy(segments_->data(), table.data(), table.size() * sizeof(DeviceSegment), cudaMemcpyHostToDevice));
  }

  std::vector<double> segment_grad_sum_squares() override {
    CurrentDevice guard(device_.index);
    std::vector<double> sums(static_cast<size_t>(buffers_.segment_count));
    if (!sums.empty())
      OPSNN_CUDA_CHECK(
          cudaMemcpy(sums.data(), buffers_.segment_grad_sums, sums.size() * sizeof(double), cudaMemcpyDeviceToHost));
    return sums;
  }

  std::unique_ptr<CapturedStep> capture() override {
    CurrentDevice guard(device_.index);
    OPSNN_CUDA_CHECK(cudaDeviceSynchronize());
    cudaStream_t stream = nullptr;
    OPSNN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    stream_ = stream;
    try {
      OPSNN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue(nullptr);
      } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      OPSNN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      OPSNN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    } catch (...) {
      stream_ = nullptr;
      cudaStreamDestroy(stream);
      throw;
    }
    stream_ = nullptr;
    return std::make_unique<CudaCapturedStep>(device_.index, stream, graph, exec);
  }

 private:
  // The step's kernels, with buffers_.sparse_sums / sparse_stats set by the enqueue() that calls it.
  void enqueue_step() {
    const cudaStream_t stream = this->stream();
    const FusedBuffers& b = buffers_;
    const StepConstants& k = constants_;
    auto update = [&](bool with_stats) {
      if (k.rule == UpdateRule::lamb && k.sharded)
        sharded_lamb(stream);
      else if (k.rule == UpdateRule::lamb)
        launch_lamb(b, k, with_stats, stream);
      else
        launch_update(b, k, with_stats, stream);
    };
    if (single_pass_step(k)) {
      launch_step_prologue(b, k, false, stream);
      update(true);
      launch_segment_sums(b, 1, stream);
      launch_step_epilogue(b, k, true, stream);
    } else {
      launch_grad_sum_of_squares(b, stream);
      launch_segment_sums(b, 1, stream);
      if (k.sharded) sum_over_ranks(buffers_.segment_sums[0], 1);
      launch_step_prologue(b, k, true, stream);
      update(false);
      launch_step_epilogue(b, k, false, stream);
    }
  }

  // `arrays` consecutive per-segment arrays starting at `first` (inside sums_) summed over the ranks.
  void sum_over_ranks(double* first, int arrays) {
    OPSNN_CHECK_AS(UsageError, static_cast<bool>(cross_rank_sum_),
                   "a sharded CUDA step needs its cross-rank sum (set_cross_rank_sum) before it runs");
    const int64_t offset = first - static_cast<double*>(sums_->data());
    cross_rank_sum_(Tensor::view_of(sums_, offset, {int64_t{arrays} * buffers_.segment_count}, DType::f64));
  }

  // LAMB on a shard: phase 1 over every tile (which also publishes each segment's local ratio), the
  // segments' r^2 and p^2 sums (segment_sums[1], [2]: zeroed first, as a segment may have no tile here)
  // summed over the ranks, the ratios recomputed from them, then phase 2 over every tile.
  void sharded_lamb(cudaStream_t stream) {
    const int32_t count = buffers_.segment_count;
    OPSNN_CUDA_CHECK(
        cudaMemsetAsync(buffers_.segment_sums[1], 0, 2 * static_cast<size_t>(count) * sizeof(double), stream));
    FusedBuffers phase = buffers_;
    phase.lamb.items = static_cast<const int32_t*>(lamb_phase1_items_->data());
    phase.lamb.item_count = lamb_phase_items_;
    launch_lamb(phase, constants_, false, stream);
    sum_over_ranks(buffers_.segment_sums[1], 2);
    launch_lamb_trust_ratios(buffers_, constants_, stream);
    OPSNN_CUDA_CHECK(cudaMemsetAsync(buffers_.lamb.next_item, 0, sizeof(int32_t), stream));
    phase.lamb.items = static_cast<const int32_t*>(lamb_phase2_items_->data());
    launch_lamb(phase, constants_, false, stream);
  }

  // Where the step's work goes: the private stream while capture() records, else the thread's current one.
  cudaStream_t stream() const { return stream_ != nullptr ? stream_ : ::opsnn::cuda::current_stream(); }

  std::unique_ptr<Storage> allocate(size_t bytes) {
    return std::make_unique<Storage>(std::max<size_t>(bytes, 16), device_);
  }

  Device device_;
  StepConstants constants_;
  FusedBuffers buffers_;
  std::unique_ptr<Storage> chunks_, segments_, status_, scalars_, lamb_items_, lamb_flags_;
  std::shared_ptr<Storage> sums_;  // shared: a sharded step hands views of its segment sums to cross_rank_sum_
  // Sharded LAMB: phase 1 and phase 2 as two launches over these item lists, the trust ratios between.
  std::unique_ptr<Storage> lamb_phase1_items_, lamb_phase2_items_;
  int32_t lamb_phase_items_ = 0;
  std::function<void(const Tensor&)> cross_rank_sum_;
  double* sparse_sums_device_ = nullptr;
  std::unique_ptr<Storage> sparse_stats_device_;
  std::vector<DeviceSparseStats> uploaded_stats_;
  std::unique_ptr<StepStatus[], PinnedDeleter<StepStatus>> pinned_status_;
  std::unique_ptr<double[], PinnedDeleter<double>> pinned_sparse_;
  std::vector<int32_t> tile_first_, tile_count_;
  cudaStream_t stream_ = nullptr;  // set while capture() records
};

std::unique_ptr<DeviceStepper> make_cuda_stepper(Device device, const StepConstants& constants,
                                                 const DeviceArena& arena, const std::vector<DeviceSegment>& segments) {
  return std::make_unique<CudaStepper>(device, constants, arena, segments);
}

}  // namespace
}  // namespace opsnn::optim::cuda

namespace opsnn::optim {

void register_cuda_fused_stepper() { register_device_stepper(DeviceType::cuda, &cuda::make_cuda_stepper); }

}  // namespace opsnn::optim
