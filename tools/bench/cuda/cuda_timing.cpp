// Event timing of the GPU benchmarks (cuda_bench.h).
#include <algorithm>
#include <vector>

#include "bench/cuda/cuda_bench.h"

namespace opsnn::bench {

double median_ms(const std::function<void()>& fn, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start, stop;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    BENCH_CUDA_CHECK(cudaEventRecord(start, nullptr));
    fn();
    BENCH_CUDA_CHECK(cudaEventRecord(stop, nullptr));
    BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

double mean_ms(const std::function<void()>& fn, int repeats) {
  fn();
  BENCH_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  BENCH_CUDA_CHECK(cudaEventRecord(start, nullptr));
  for (int i = 0; i < repeats; ++i) fn();
  BENCH_CUDA_CHECK(cudaEventRecord(stop, nullptr));
  BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
  float total = 0.0f;
  BENCH_CUDA_CHECK(cudaEventElapsedTime(&total, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(total) / repeats;
}

}  // namespace opsnn::bench
