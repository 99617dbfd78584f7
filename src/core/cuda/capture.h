// A CUDA graph capture in progress on this thread (capture_graph in cuda_services.cpp): what the services
// and the ops consult while the work is being recorded.
// - Allocations: the services note each buffer the work allocates; a buffer the work frees that it did
//   not allocate is still read by the recorded kernels, so the graph keeps it until it is destroyed.
// - Deferred checks: an index range check cannot read its result back during a capture. It records its
//   search into the graph with a slot of its own: a device pair {first bad position, its value} that
//   keeps the first failure any replay finds, copied to pinned host memory at the end of each replay,
//   where the graph's replay() and synchronize() read it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/cuda/current_stream.h"
#include "opsnn/core/graph.h"

namespace opsnn::cuda {

// The deferred checks of one graph: kMaxChecks slots of two words, on the current device and mirrored in
// pinned host memory, position ~0 meaning "no failure".
struct DeferredChecks {
  static constexpr int kMaxChecks = 64;
  DeferredChecks();
  ~DeferredChecks();
  DeferredChecks(const DeferredChecks&) = delete;
  DeferredChecks& operator=(const DeferredChecks&) = delete;

  using Message = std::function<std::string(int64_t position, int64_t value)>;
  unsigned long long* device_words = nullptr;
  unsigned long long* host_words = nullptr;
  std::vector<Message> messages;  // one per slot in use
};

class GraphCapture {
 public:
  GraphCapture(cudaStream_t stream, std::shared_ptr<DeferredChecks> checks);
  cudaStream_t stream() const { return stream_; }

  void allocated(void* pointer) { live_.insert(pointer); }
  // Whether the work allocated `pointer` (then its free is recorded); otherwise the graph keeps it.
  bool release(void* pointer);
  size_t live_count() const { return live_.size(); }
  // The buffers the work allocated that are still alive: a failed capture's, given to disown().
  std::unordered_set<void*> take_live() { return std::move(live_); }
  std::vector<void*> take_kept() { return std::move(kept_); }

  // A slot for one deferred check: its device words (position, value) and host mirror; UsageError when
  // the graph has no slot left.
  struct Slot {
    unsigned long long* device_words;
    unsigned long long* host_words;
  };
  Slot add_check(DeferredChecks::Message message);
  std::shared_ptr<DeferredChecks> checks() const { return checks_; }

 private:
  cudaStream_t stream_;
  std::unordered_set<void*> live_;
  std::vector<void*> kept_;
  std::shared_ptr<DeferredChecks> checks_;
};

// The buffers a failed capture allocated that outlive its work (tensors the work kept; those destroyed as it
// unwinds were released while the capture was active). The graph that held them is gone and its allocations with it, so
// freeing one would at best fail and at worst free another buffer that took its address since: the services ask
// disowned() before each free and skip those.
void disown(std::unordered_set<void*> pointers);
bool disowned(void* pointer);  // true once per pointer given to disown(), which it then forgets

// The capture in progress on this thread, or nullptr.
GraphCapture* active_capture();

// Makes `capture` the thread's active capture and its stream the current stream, for its lifetime.
class ActiveCapture {
 public:
  explicit ActiveCapture(GraphCapture& capture);
  ~ActiveCapture();
  ActiveCapture(const ActiveCapture&) = delete;
  ActiveCapture& operator=(const ActiveCapture&) = delete;

 private:
  GraphCapture* previous_;
  StreamScope stream_;
};

// capture_graph on CUDA device `index` (the services' implementation).
std::unique_ptr<CapturedGraph> capture_graph(int index, const std::function<void()>& work);

}  // namespace opsnn::cuda
