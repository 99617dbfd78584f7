// CUDA kernels of top-k gradient sparsification (DGC): accumulation (variance EMA, velocity, residual) in
// one pass, sampled scores, per-block counts against a threshold, an exact k-th largest by radix sort for
// the fallback, and one pass that masks, keeps the residual, applies momentum-factor masking and writes the
// (index, value) pairs in index order. The element rules are topk_rules.h, as on the CPU, and blocks of
// kTopKBlock elements are the CPU's, so the selection matches it exactly.
#include <cuda_runtime.h>

#include <climits>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
#include "optim/cuda/topk_kernels.h"

namespace opsnn::optim::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kScanThreads = 1024;  // threads of the ordered passes (tie position, write)
constexpr int64_t kMaxBlocks = 4096;

int blocks_for(int64_t items) {
  int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}
int64_t selection_blocks(int64_t n) { return (n + kTopKBlock - 1) / kTopKBlock; }

__device__ __forceinline__ int64_t global_thread() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Device scratch on the legacy default stream, freed in stream order.
class DeviceScratch {
 public:
  explicit DeviceScratch(size_t bytes) { OPSNN_CUDA_CHECK(cudaMallocAsync(&data_, bytes == 0 ? 1 : bytes, 0)); }
  ~DeviceScratch() { cudaFreeAsync(data_, 0); }  // not checked: a destructor must not throw
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

__global__ void accumulate_kernel(const float* gradient, float* accumulator, float* variance, float* velocity,
                                  int64_t n, TopKAccumulateScalars scalars) {
  for (int64_t i = global_thread(); i < n; i += thread_stride()) {
    if (velocity != nullptr) {
      topk_accumulate_element(gradient[i], variance[i], velocity[i], accumulator[i], scalars);
    } else {
      topk_accumulate_element(gradient[i], variance[i], accumulator[i], scalars);
    }
  }
}

__global__ void sample_scores_kernel(uint64_t seed, int64_t step, int64_t n, int64_t sample_size,
                                     const float* accumulator, const float* variance, double* scores) {
  for (int64_t d = global_thread(); d < sample_size; d += thread_stride()) {
    const int64_t position = topk_sample_position(seed, step, d, n);
    scores[d] = topk_score_squared(accumulator[position], variance[position]);
  }
}

__device__ __forceinline__ unsigned warp_sum(unsigned value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

// blockIdx.y: the selection block; gridDim.x CUDA blocks share it.
__global__ void count_kernel(const float* accumulator, const float* variance, int64_t n, double threshold,
                             unsigned long long* greater, unsigned long long* ties) {
  const int64_t block = blockIdx.y, begin = block * kTopKBlock;
  const int64_t end = begin + kTopKBlock < n ? begin + kTopKBlock : n;
  unsigned above = 0, equal = 0;
  for (int64_t i = begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < end;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double score = topk_score_squared(accumulator[i], variance[i]);
    above += score > threshold;
    equal += score == threshold;
  }
  above = warp_sum(above);
  equal = warp_sum(equal);
  if (threadIdx.x % 32 == 0) {
    if (above != 0) atomicAdd(&greater[block], static_cast<unsigned long long>(above));
    if (equal != 0) atomicAdd(&ties[block], static_cast<unsigned long long>(equal));
  }
}

__global__ void clamped_scores_kernel(const float* accumulator, const float* variance, int64_t n, double* scores) {
  for (int64_t i = global_thread(); i < n; i += thread_stride()) {
    const double score = topk_score_squared(accumulator[i], variance[i]);
    scores[i] = score > 0.0 ? score : 0.0;  // NaN counts as 0, as on the CPU
  }
}

using BlockScan = cub::BlockScan<int, kScanThreads>;

// One CUDA block walks [begin, end) in order, tile by tile.
__global__ void tie_position_kernel(const float* accumulator, const float* variance, int64_t begin, int64_t end,
                                    double threshold, int64_t rank, int64_t* position) {
  __shared__ typename BlockScan::TempStorage scan_storage;
  int64_t seen = 0;  // ties before this tile; the same in every thread
  for (int64_t tile = begin; tile < end; tile += kScanThreads) {
    const int64_t i = tile + threadIdx.x;
    const int tie = i < end && topk_score_squared(accumulator[i], variance[i]) == threshold;
    int before = 0, tile_ties = 0;
    BlockScan(scan_storage).ExclusiveSum(tie, before, tile_ties);
    if (tie && seen + before == rank) *position = i;
    seen += tile_ties;
    if (seen > rank) break;  // uniform: every thread has the same `seen`
    __syncthreads();         // scan_storage is reused by the next tile
  }
}

// One CUDA block per selection block: mask, residual, momentum-factor masking and the ordered pairs.
__global__ void write_selected_kernel(float* gradient, float* accumulator, const float* variance, float* velocity,
                                      int64_t n, double threshold, int64_t tie_cutoff, const int64_t* block_first,
                                      int64_t* selected_indices, float* selected_values) {
  __shared__ typename BlockScan::TempStorage scan_storage;
  const int64_t begin = blockIdx.x * kTopKBlock;
  const int64_t end = begin + kTopKBlock < n ? begin + kTopKBlock : n;
  int64_t slot = block_first[blockIdx.x];
  for (int64_t tile = begin; tile < end; tile += kScanThreads) {
    const int64_t i = tile + threadIdx.x;
    int selected = 0;
    float value = 0.0f;
    if (i < end) {
      value = accumulator[i];
      const double score = topk_score_squared(value, variance[i]);
      selected = score > threshold || (score == threshold && i < tie_cutoff);
      gradient[i] = selected ? value : 0.0f;
      accumulator[i] = selected ? 0.0f : value;                 // error feedback: the unsent value waits
      if (velocity != nullptr && selected) velocity[i] = 0.0f;  // momentum-factor masking (DGC 3.2)
    }
    int before = 0, tile_selected = 0;
    BlockScan(scan_storage).ExclusiveSum(selected, before, tile_selected);
    if (selected) {
      selected_indices[slot + before] = i;
      selected_values[slot + before] = value;
    }
    slot += tile_selected;
    __syncthreads();  // scan_storage is reused by the next tile
  }
}

__global__ void send_everything_kernel(float* gradient, float* accumulator, float* velocity, int64_t n,
                                       int64_t* selected_indices, float* selected_values) {
  for (int64_t i = global_thread(); i < n; i += thread_stride()) {
    const float value = accumulator[i];
    gradient[i] = value;
    selected_indices[i] = i;
    selected_values[i] = value;
    accumulator[i] = 0.0f;
    if (velocity != nullptr) velocity[i] = 0.0f;
  }
}

}  // namespace

void launch_topk_accumulate(const float* gradient, float* accumulator, float* variance, float* velocity, int64_t n,
                            const TopKAccumulateScalars& scalars) {
  accumulate_kernel<<<blocks_for(n), kThreads, 0, ::opsnn::cuda::current_stream()>>>(gradient, accumulator, variance,
                                                                                     velocity, n, scalars);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void topk_sample_scores(uint64_t seed, int64_t step, int64_t n, int64_t sample_size, const float* accumulator,
                        const float* variance, double* scores) {
  DeviceScratch device_scores(static_cast<size_t>(sample_size) * sizeof(double));
  sample_scores_kernel<<<blocks_for(sample_size), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      seed, step, n, sample_size, accumulator, variance, device_scores.as<double>());
  OPSNN_CUDA_CHECK(cudaGetLastError());
  OPSNN_CUDA_CHECK(cudaMemcpy(scores, device_scores.as<double>(), static_cast<size_t>(sample_size) * sizeof(double),
                              cudaMemcpyDeviceToHost));
}

void topk_count_blocks(const float* accumulator, const float* variance, int64_t n, double threshold,
                       int64_t* block_greater, int64_t* block_ties) {
  const int64_t blocks = selection_blocks(n);
  if (blocks > 65535)
    throw Error(
        detail::concat("top-k sparsification on CUDA: ", n, " elements exceed the limit of ", 65535 * kTopKBlock));
  DeviceScratch counts(static_cast<size_t>(2 * blocks) * sizeof(unsigned long long));
  unsigned long long* greater = counts.as<unsigned long long>();
  OPSNN_CUDA_CHECK(cudaMemsetAsync(greater, 0, static_cast<size_t>(2 * blocks) * sizeof(unsigned long long), 0));
  count_kernel<<<dim3(16, static_cast<unsigned>(blocks)), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      accumulator, variance, n, threshold, greater, greater + blocks);
  OPSNN_CUDA_CHECK(cudaGetLastError());
  std::vector<unsigned long long> host(static_cast<size_t>(2 * blocks));
  OPSNN_CUDA_CHECK(cudaMemcpy(host.data(), greater, host.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  for (int64_t b = 0; b < blocks; ++b) {
    block_greater[b] = static_cast<int64_t>(host[static_cast<size_t>(b)]);
    block_ties[b] = static_cast<int64_t>(host[static_cast<size_t>(blocks + b)]);
  }
}

void topk_kth_largest(const float* accumulator, const float* variance, int64_t n, int64_t k, double* kth,
                      double* next) {
  if (n > INT_MAX)
    throw Error(detail::concat("top-k sparsification on CUDA: exact selection over ", n,
                               " elements exceeds the sort's limit of ", INT_MAX));
  const size_t bytes = static_cast<size_t>(n) * sizeof(double);
  DeviceScratch scores(bytes), sorted(bytes);
  clamped_scores_kernel<<<blocks_for(n), kThreads, 0, ::opsnn::cuda::current_stream()>>>(accumulator, variance, n,
                                                                                         scores.as<double>());
  OPSNN_CUDA_CHECK(cudaGetLastError());
  size_t temp_bytes = 0;
  OPSNN_CUDA_CHECK(cub::DeviceRadixSort::SortKeysDescending(nullptr, temp_bytes, scores.as<double>(),
                                                            sorted.as<double>(), static_cast<int>(n)));
  DeviceScratch temp(temp_bytes);
  OPSNN_CUDA_CHECK(cub::DeviceRadixSort::SortKeysDescending(temp.as<void>(), temp_bytes, scores.as<double>(),
                                                            sorted.as<double>(), static_cast<int>(n)));
  double both[2] = {0.0, 0.0};
  OPSNN_CUDA_CHECK(cudaMemcpy(both, sorted.as<double>() + (k - 1), 2 * sizeof(double), cudaMemcpyDeviceToHost));
  *kth = both[0];
  *next = both[1];
}

int64_t topk_tie_position(const float* accumulator, const float* variance, int64_t begin, int64_t end, double threshold,
                          int64_t rank) {
  DeviceScratch position(sizeof(int64_t));
  const int64_t none = -1;
  OPSNN_CUDA_CHECK(cudaMemcpy(position.as<int64_t>(), &none, sizeof(none), cudaMemcpyHostToDevice));
  tie_position_kernel<<<1, kScanThreads, 0, ::opsnn::cuda::current_stream()>>>(accumulator, variance, begin, end,
                                                                               threshold, rank, position.as<int64_t>());
  OPSNN_CUDA_CHECK(cudaGetLastError());
  int64_t result = -1;
  OPSNN_CUDA_CHECK(cudaMemcpy(&result, position.as<int64_t>(), sizeof(result), cudaMemcpyDeviceToHost));
  if (result < 0)
    throw Error(detail::concat("top-k sparsification on CUDA: tie ", rank, " not found in [", begin, ", ", end,
                               ") (the counts and the selection pass disagree)"));
  return result;
}

void launch_topk_write_selected(float* gradient, float* accumulator, const float* variance, float* velocity, int64_t n,
                                double threshold, int64_t tie_cutoff, const int64_t* block_first,
                                int64_t* selected_indices, float* selected_values) {
  const int64_t blocks = selection_blocks(n);
  DeviceScratch device_first(static_cast<size_t>(blocks) * sizeof(int64_t));
  OPSNN_CUDA_CHECK(cudaMemcpy(device_first.as<int64_t>(), block_first, static_cast<size_t>(blocks) * sizeof(int64_t),
                              cudaMemcpyHostToDevice));
  write_selected_kernel<<<static_cast<unsigned>(blocks), kScanThreads, 0, ::opsnn::cuda::current_stream()>>>(
      gradient, accumulator, variance, velocity, n, threshold, tie_cutoff, device_first.as<int64_t>(), selected_indices,
      selected_values);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_topk_send_everything(float* gradient, float* accumulator, float* velocity, int64_t n,
                                 int64_t* selected_indices, float* selected_values) {
  send_everything_kernel<<<blocks_for(n), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      gradient, accumulator, velocity, n, selected_indices, selected_values);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace opsnn::optim::cuda
