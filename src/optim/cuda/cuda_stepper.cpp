// The CUDA DeviceStepper: owns the device tables and scratch of one optimizer's fused step and enqueues
// the pipeline of DESIGN.md decision 4 on the default stream (or, while capturing, on a private stream):
//   two-pass: grad sums of squares -> segment sums -> prologue (norm, clip, skip, schedule, scaler)
//             -> update -> epilogue (parameter check)
//   single pass (no clipping, no loss scaling, on_nonfinite = warn): prologue -> update with the gradient
//             sums riding along -> segment sums -> epilogue (norm, monitor flags)
//   LAMB:     grad sums -> segment sums -> prologue -> phase 1 (moments, r^2, p^2) -> segment sums
//             -> phase 2 (trust ratios, update) -> epilogue
// No step reads anything back to the host; read() copies the state out through pinned memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"
#include "opsnn/core/error.h"
#include "opsnn/core/storage.h"
#include "opsnn/optim/device_step.h"
#include "optim/cuda/fused_step_kernels.h"
#include "optim/cuda/register.h"

namespace opsnn::optim::cuda {
namespace {

using CurrentDevice = ::opsnn::cuda::DeviceGuard;

template <typename T> struct PinnedDeleter {
  void operator()(T* pointer) const { cudaFreeHost(pointer); }
};
template <typename T> std::unique_ptr<T[], PinnedDeleter<T>> pinned_array(size_t count) {
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
    int previous = 0;
    bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
    cudaStreamSynchronize(stream_);
    cudaEventDestroy(before_);
    cudaEventDestroy(after_);
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
    cudaStreamDestroy(stream_);
    if (switched) cudaSetDevice(previous);
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

class CudaStepper final : public DeviceStepper {
 public:
  CudaStepper(Device device, const StepConstants& constants, const DeviceArena& arena,
              const std::vector<DeviceSegment>& segments)
      : device_(device), constants_(constants) {
    OPSNN_CHECK_AS(DeviceError, device.type == DeviceType::cuda, "the CUDA stepper got a ", device.str(), " arena");
    OPSNN_CHECK(arena.params != nullptr && arena.grads != nullptr, "the CUDA stepper needs parameter and gradient buffers");
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
    const int multiprocessors = multiprocessor_count(device.index);
    int64_t tile_elements = kMinTileElements;
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
    sums_ = allocate((2 * chunks + 4 * count) * sizeof(double));
    state_ = allocate(sizeof(StepState));
    scalars_ = allocate(sizeof(StepScalars));
    report_ = allocate(sizeof(DeviceStepReport));

    buffers_.arena = arena;
    buffers_.arena.chunks = nullptr;
    buffers_.chunks = static_cast<const ArenaChunk*>(chunks_->data());
    buffers_.chunk_count = static_cast<int32_t>(chunks);
    buffers_.multiprocessors = multiprocessors;
    buffers_.segments = static_cast<const DeviceSegment*>(segments_->data());
    buffers_.segment_count = static_cast<int32_t>(count);
    double* sums = static_cast<double*>(sums_->data());
    buffers_.chunk_sums[0] = sums;
    buffers_.chunk_sums[1] = sums + chunks;
    buffers_.segment_sums[0] = sums + 2 * chunks;
    buffers_.segment_sums[1] = sums + 2 * chunks + count;
    buffers_.segment_grad_sums = sums + 2 * chunks + 2 * count;
    sparse_sums_device_ = sums + 2 * chunks + 3 * count;
    buffers_.state = static_cast<StepState*>(state_->data());
    buffers_.scalars = static_cast<StepScalars*>(scalars_->data());
    buffers_.report = static_cast<DeviceStepReport*>(report_->data());

    if (chunks > 0)
      OPSNN_CUDA_CHECK(cudaMemcpy(chunks_->data(), tiles.data(), chunks * sizeof(ArenaChunk), cudaMemcpyHostToDevice));
    OPSNN_CUDA_CHECK(cudaMemset(sums_->data(), 0, sums_->bytes()));
    DeviceStepReport report;
    OPSNN_CUDA_CHECK(cudaMemcpy(report_->data(), &report, sizeof(report), cudaMemcpyHostToDevice));
    set_segments(segments);

    pinned_state_ = pinned_array<StepState>(1);
    pinned_report_ = pinned_array<DeviceStepReport>(1);
    pinned_sparse_ = pinned_array<double>(count);
  }

  void enqueue(const std::vector<double>* sparse_sums) override {
    CurrentDevice guard(device_.index);
    cudaStream_t stream = stream_;
    buffers_.sparse_sums = nullptr;
    if (sparse_sums != nullptr) {
      OPSNN_CHECK(sparse_sums->size() == static_cast<size_t>(buffers_.segment_count), "sparse sums: got ",
                  sparse_sums->size(), " values for ", buffers_.segment_count, " segments");
      std::copy(sparse_sums->begin(), sparse_sums->end(), pinned_sparse_.get());
      OPSNN_CUDA_CHECK(cudaMemcpyAsync(sparse_sums_device_, pinned_sparse_.get(), sparse_sums->size() * sizeof(double),
                                       cudaMemcpyHostToDevice, stream));
      buffers_.sparse_sums = sparse_sums_device_;
    }
    const FusedBuffers& b = buffers_;
    const StepConstants& k = constants_;
    if (k.rule == UpdateRule::lamb) {
      launch_grad_sum_of_squares(b, stream);
      launch_segment_sums(b, 1, stream);
      launch_step_prologue(b, k, true, stream);
      launch_lamb_phase1(b, k, stream);
      launch_segment_sums(b, 2, stream);
      launch_lamb_phase2(b, k, stream);
      launch_step_epilogue(b, k, false, stream);
    } else if (single_pass_step(k)) {
      launch_step_prologue(b, k, false, stream);
      launch_update(b, k, true, stream);
      launch_segment_sums(b, 1, stream);
      launch_step_epilogue(b, k, true, stream);
    } else {
      launch_grad_sum_of_squares(b, stream);
      launch_segment_sums(b, 1, stream);
      launch_step_prologue(b, k, true, stream);
      launch_update(b, k, false, stream);
      launch_step_epilogue(b, k, false, stream);
    }
  }

  void read(StepState& state, DeviceStepReport& report) override {
    CurrentDevice guard(device_.index);
    OPSNN_CUDA_CHECK(cudaMemcpyAsync(pinned_state_.get(), buffers_.state, sizeof(StepState), cudaMemcpyDeviceToHost, stream_));
    OPSNN_CUDA_CHECK(cudaMemcpyAsync(pinned_report_.get(), buffers_.report, sizeof(DeviceStepReport),
                                     cudaMemcpyDeviceToHost, stream_));
    OPSNN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    state = pinned_state_[0];
    report = pinned_report_[0];
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
    OPSNN_CUDA_CHECK(cudaMemcpy(segments_->data(), table.data(), table.size() * sizeof(DeviceSegment),
                                cudaMemcpyHostToDevice));
  }

  std::vector<double> segment_grad_sum_squares() override {
    CurrentDevice guard(device_.index);
    std::vector<double> sums(static_cast<size_t>(buffers_.segment_count));
    if (!sums.empty())
      OPSNN_CUDA_CHECK(cudaMemcpy(sums.data(), buffers_.segment_grad_sums, sums.size() * sizeof(double),
                                  cudaMemcpyDeviceToHost));
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
  std::unique_ptr<Storage> allocate(size_t bytes) {
    return std::make_unique<Storage>(std::max<size_t>(bytes, 16), device_);
  }

  Device device_;
  StepConstants constants_;
  FusedBuffers buffers_;
  std::unique_ptr<Storage> chunks_, segments_, sums_, state_, scalars_, report_;
  double* sparse_sums_device_ = nullptr;
  std::unique_ptr<StepState[], PinnedDeleter<StepState>> pinned_state_;
  std::unique_ptr<DeviceStepReport[], PinnedDeleter<DeviceStepReport>> pinned_report_;
  std::unique_ptr<double[], PinnedDeleter<double>> pinned_sparse_;
  std::vector<int32_t> tile_first_, tile_count_;
  cudaStream_t stream_ = nullptr;  // the legacy default stream, except while capturing
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
