// capture_graph on a CUDA device. The work runs with a capture active on the calling thread
// (cudaStreamCaptureModeThreadLocal) and a stream of its own as the current stream. That stream is a
// blocking one: a call the framework still made on the legacy default stream would have to wait for it,
// which a capture refuses, so a missed call fails the capture instead of escaping the graph. Replays go
// to the same stream, which orders them with the legacy stream's work on both sides.
#include "core/cuda/capture.h"

#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"
#include "opsnn/core/error.h"

namespace opsnn::cuda {
namespace {

thread_local GraphCapture* t_active_capture = nullptr;

constexpr size_t kCheckBytes = DeferredChecks::kMaxChecks * 2 * sizeof(unsigned long long);

class CudaCapturedGraph final : public CapturedGraph {
 public:
  CudaCapturedGraph(int device, cudaStream_t stream, cudaGraph_t graph, cudaGraphExec_t exec,
                    std::shared_ptr<DeferredChecks> checks, std::vector<void*> kept)
      : device_(device),
        stream_(stream),
        graph_(graph),
        exec_(exec),
        checks_(std::move(checks)),
        kept_(std::move(kept)) {
    OPSNN_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  // Never throws: waits for the replays, then releases the graph and the buffers it kept.
  ~CudaCapturedGraph() override {
    DeviceGuard guard(device_, std::nothrow);
    cudaStreamSynchronize(stream_);
    for (void* pointer : kept_) cudaFreeAsync(pointer, nullptr);
    cudaEventDestroy(done_);
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
    cudaStreamDestroy(stream_);
  }

  void replay() override {
    DeviceGuard guard(device_);
    report_failures(false);
    OPSNN_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
    OPSNN_CUDA_CHECK(cudaEventRecord(done_, stream_));
    replayed_ = true;
  }

  void synchronize() override {
    DeviceGuard guard(device_);
    OPSNN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    report_failures(true);
  }

 private:
  // Throws the first failed check's error once the replays are done (waited for, or found done); the
  // slot is cleared first, so the next replays report only new failures.
  void report_failures(bool waited) {
    if (!replayed_ || checks_->messages.empty()) return;
    if (!waited) {
      const cudaError_t state = cudaEventQuery(done_);
      if (state == cudaErrorNotReady) {
        cudaGetLastError();
        return;
      }
      OPSNN_CUDA_CHECK(state);
    }
    for (size_t slot = 0; slot < checks_->messages.size(); ++slot) {
      volatile unsigned long long* words = checks_->host_words + 2 * slot;
      const unsigned long long position = words[0];
      if (position == ~0ULL) continue;
      const auto value = static_cast<int64_t>(words[1]);
      OPSNN_CUDA_CHECK(
          cudaMemsetAsync(checks_->device_words + 2 * slot, 0xff, 2 * sizeof(unsigned long long), stream_));
      OPSNN_CUDA_CHECK(cudaStreamSynchronize(stream_));
      words[0] = ~0ULL;
      throw ShapeError(checks_->messages[slot](static_cast<int64_t>(position), value) +
                       " (found by a replay of a captured CUDA graph)");
    }
  }

  int device_;
  cudaStream_t stream_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaEvent_t done_ = nullptr;
  std::shared_ptr<DeferredChecks> checks_;
  std::vector<void*> kept_;  // freed by the work but allocated before it: the kernels still read them
  bool replayed_ = false;
};

std::mutex g_disowned_mutex;
std::unordered_set<void*> g_disowned;
std::atomic<bool> g_any_disowned{false};

// Destroys what a failed capture recorded and frees the buffers it kept, ignoring errors; the buffers the
// work allocated and left alive are disowned (their allocations went with the graph).
void discard(cudaStream_t stream, cudaGraph_t graph, GraphCapture& capture) {
  disown(capture.take_live());
  if (graph) cudaGraphDestroy(graph);
  for (void* pointer : capture.take_kept()) cudaFreeAsync(pointer, nullptr);
  cudaStreamDestroy(stream);
  cudaGetLastError();
}

}  // namespace

DeferredChecks::DeferredChecks() {
  OPSNN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_words), kCheckBytes));
  OPSNN_CUDA_CHECK(cudaMemset(device_words, 0xff, kCheckBytes));
  OPSNN_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_words), kCheckBytes, cudaHostAllocPortable));
  std::memset(host_words, 0xff, kCheckBytes);
}

DeferredChecks::~DeferredChecks() {
  cudaFree(device_words);
  cudaFreeHost(host_words);
}

GraphCapture::GraphCapture(cudaStream_t stream, std::shared_ptr<DeferredChecks> checks)
    : stream_(stream), checks_(std::move(checks)) {}

bool GraphCapture::release(void* pointer) {
  if (live_.erase(pointer) > 0) return true;
  kept_.push_back(pointer);
  return false;
}

GraphCapture::Slot GraphCapture::add_check(DeferredChecks::Message message) {
  const size_t slot = checks_->messages.size();
  OPSNN_CHECK_AS(UsageError, slot < DeferredChecks::kMaxChecks, "capture_graph: the work makes more than ",
                 DeferredChecks::kMaxChecks, " index range checks (cross_entropy targets, embedding lookups)");
  checks_->messages.push_back(std::move(message));
  return {checks_->device_words + 2 * slot, checks_->host_words + 2 * slot};
}

void disown(std::unordered_set<void*> pointers) {
  if (pointers.empty()) return;
  const std::lock_guard<std::mutex> lock(g_disowned_mutex);
  g_disowned.merge(pointers);
  g_any_disowned.store(true, std::memory_order_release);
}

bool disowned(void* pointer) {
  if (!g_any_disowned.load(std::memory_order_acquire)) return false;
  const std::lock_guard<std::mutex> lock(g_disowned_mutex);
  const bool found = g_disowned.erase(pointer) > 0;
  if (g_disowned.empty()) g_any_disowned.store(false, std::memory_order_release);
  return found;
}

GraphCapture* active_capture() { return t_active_capture; }

ActiveCapture::ActiveCapture(GraphCapture& capture) : previous_(t_active_capture), stream_(capture.stream()) {
  t_active_capture = &capture;
}
ActiveCapture::~ActiveCapture() { t_active_capture = previous_; }

std::unique_ptr<CapturedGraph> capture_graph(int index, const std::function<void()>& work) {
  OPSNN_CHECK_AS(UsageError, active_capture() == nullptr,
                 "capture_graph: called inside the work of another capture on this thread");
  DeviceGuard guard(index);
  auto checks = std::make_shared<DeferredChecks>();
  cudaStream_t stream = nullptr;
  OPSNN_CUDA_CHECK(cudaStreamCreate(&stream));  // blocking: see the file comment
  GraphCapture capture(stream, std::move(checks));
  if (const cudaError_t begun = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
      begun != cudaSuccess) {
    cudaGetLastError();
    cudaStreamDestroy(stream);
    throw DeviceError(
        detail::concat("capture_graph: cannot begin a capture on cuda:", index, " (", cudaGetErrorString(begun), ")"));
  }
  try {
    ActiveCapture active(capture);
    work();
  } catch (...) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &status);
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    discard(stream, partial, capture);
    try {
      throw;
    } catch (const std::exception& error) {
      // The capture's own errors: it was invalidated, or a CUDA call failed inside it (a refused call).
      if (status != cudaStreamCaptureStatusActive || std::string(error.what()).rfind("CUDA error", 0) == 0)
        throw UsageError(detail::concat(
            "capture_graph: the work made a call that a CUDA graph cannot record (", error.what(),
            "). Run the work once before capturing it (convolution searches and lazily made state happen then), "
            "and keep host reads (item(), copies to the CPU) and other devices out of it"));
      throw;
    }
  }
  cudaGraph_t graph = nullptr;
  if (const cudaError_t ended = cudaStreamEndCapture(stream, &graph); ended != cudaSuccess) {
    discard(stream, graph, capture);
    throw UsageError(detail::concat("capture_graph: the capture on cuda:", index, " failed (",
                                    cudaGetErrorString(ended),
                                    "): the work made a call that a CUDA graph cannot record, or work on another "
                                    "stream joined it"));
  }
  if (capture.live_count() > 0) {
    const size_t live = capture.live_count();
    discard(stream, graph, capture);
    throw UsageError(detail::concat("capture_graph: ", live,
                                    " buffer(s) the work allocated outlive it (a tensor made inside the work was "
                                    "kept); write results into tensors made before the capture"));
  }
  cudaGraphExec_t exec = nullptr;
  if (const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0); made != cudaSuccess) {
    discard(stream, graph, capture);
    throw DeviceError(
        detail::concat("capture_graph: cannot instantiate the recorded graph (", cudaGetErrorString(made), ")"));
  }
  return std::make_unique<CudaCapturedGraph>(index, stream, graph, exec, capture.checks(), capture.take_kept());
}

}  // namespace opsnn::cuda
