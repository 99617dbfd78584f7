// The per-shape algorithm search of the CUDA conv2d (conv_search.cpp tells how it decides): timing on the
// default stream, the algorithm cache and its key, cudnnFind over each direction's algorithms, and the
// choice between cuDNN and a lowering. Internal to src/ops/cuda/; conv_algorithms.h is the part the conv
// benchmark and the tests read and steer.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/conv_algorithms.h"
#include "ops/cuda/conv_cudnn.h"

namespace opsnn::ops::detail {

// ---- timing ----

class Event {
 public:
  Event() { OPSNN_CUDA_CHECK(cudaEventCreate(&handle_)); }
  ~Event() { cudaEventDestroy(handle_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return handle_; }

 private:
  cudaEvent_t handle_ = nullptr;
};

// Milliseconds of `work` on the legacy default stream, timed on its second run (the first may pay for
// lazy module loading), so it compares with cudnnFind's times.
template <typename Work>
float measured_ms(Work&& work) {
  work();
  Event start, stop;
  OPSNN_CUDA_CHECK(cudaEventRecord(start.get(), nullptr));
  work();
  OPSNN_CUDA_CHECK(cudaEventRecord(stop.get(), nullptr));
  OPSNN_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float elapsed_ms = 0.0f;
  OPSNN_CUDA_CHECK(cudaEventElapsedTime(&elapsed_ms, start.get(), stop.get()));
  return elapsed_ms;
}

// ---- the algorithm cache ----

// What a decision depends on: the convolution, and the settings an algorithm found for one may not run
// under (dtype, math, layout) or a forced policy must not reuse a measured decision for.
struct ConvKey {
  ConvDirection direction;
  int device;
  std::array<int64_t, 4> input, weight, geometry;  // geometry: stride_h, stride_w, pad_h, pad_w
  bool channels_last;
  DType dtype;
  int math;  // allowed_math(dtype)
  ConvLoweringPolicy policy;
  bool deterministic;
  auto operator<=>(const ConvKey&) const = default;
};

// The key of a convolution decided under the given settings (a loaded record's, or this process's).
ConvKey key_of(ConvDirection direction, int device, const Shape& input, const Shape& weight, const Conv2dGeometry& g,
               DType dtype, int math, ConvLoweringPolicy policy, bool deterministic);

// The key under the current settings.
ConvKey make_key(ConvDirection direction, int device, const Shape& input, const Shape& weight, const Conv2dGeometry& g,
                 DType dtype);

struct AlgorithmCache {
  std::mutex mutex;
  std::map<ConvKey, ConvAlgorithmChoice> entries;
};

// The process's cache: every decision made or loaded so far.
AlgorithmCache& algorithm_cache();

// The cached algorithm for `key`, or the result of `search` (run once, outside the lock: it launches
// work and synchronizes) stored under it.
template <typename Search>
ConvAlgorithmChoice cached_algorithm(const ConvKey& key, Search&& search) {
  AlgorithmCache& cache = algorithm_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto found = cache.entries.find(key);
    if (found != cache.entries.end()) return found->second;
  }
  ConvAlgorithmChoice chosen = search();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.emplace(key, chosen);
  return chosen;
}

// ---- cudnnFind ----

// cudnnFind over every forward algorithm for descriptors d on these buffers (y is overwritten).
ConvAlgorithmChoice find_forward(cudnnHandle_t handle, const ConvDescriptors& d, const void* x, const void* w, void* y,
                                 Device device);

// cudnnFind over every backward-data algorithm (dx is overwritten).
ConvAlgorithmChoice find_backward_input(cudnnHandle_t handle, const ConvDescriptors& d, const void* w, const void* dy,
                                        void* dx, Device device);

// cudnnFind over every backward-filter algorithm (dw is overwritten).
ConvAlgorithmChoice find_backward_weight(cudnnHandle_t handle, const ConvDescriptors& d, const void* x, const void* dy,
                                         void* dw, Device device);

// ---- choosing ----

// The search every direction runs once per shape: cudnnFind on the convolution as given (`find_given`,
// skipped when the policy forces the lowering), then, where `lowering` applies and the policy allows,
// the lowering's time (`time_lowered` returns a choice with lowered_ms set, and for the subsampled
// lowering the stride-1 problem's algorithm). The lowering wins when forced or faster; both times are
// kept in the choice.
template <typename FindGiven, typename TimeLowered>
ConvAlgorithmChoice search(ConvLowering lowering, FindGiven&& find_given, TimeLowered&& time_lowered) {
  const ConvLoweringPolicy policy = conv_lowering_policy();
  ConvAlgorithmChoice cudnn;
  if (lowering == ConvLowering::cudnn || policy != ConvLoweringPolicy::always)
    cudnn = find_given();
  else
    cudnn.cudnn_ms = -1.0f;  // not searched
  if (lowering == ConvLowering::cudnn || policy == ConvLoweringPolicy::never) return cudnn;
  ConvAlgorithmChoice lowered = time_lowered();
  lowered.lowering = lowering;
  lowered.cudnn_ms = cudnn.cudnn_ms;
  lowered.cudnn_deterministic = cudnn.deterministic;
  // A deterministic lowering also wins where cuDNN had no deterministic algorithm to offer.
  const bool for_determinism = conv_deterministic() && !cudnn.deterministic && lowered.deterministic;
  if (policy == ConvLoweringPolicy::always || lowered.lowered_ms < cudnn.cudnn_ms || for_determinism) return lowered;
  cudnn.lowered_ms = lowered.lowered_ms;
  return cudnn;
}

// applicable_lowering with the tensor-core granule given (tensor_core_granule's value under some math).
ConvLowering lowering_for(const Shape& input, const Shape& weight, const Conv2dGeometry& g,
                          int64_t tensor_core_granule);

}  // namespace opsnn::ops::detail
