// The CUDA pair scatter-add of the top-k exchange (pair_scatter.h): one thread per pair; a call's
// indices are distinct, so plain read-modify-writes suffice and the result is deterministic.
#include <cstdint>

#include "core/cuda/current_stream.h"
#include "dist/cuda/pair_scatter_cuda.h"
#include "opsnn/core/error.h"

namespace opsnn::dist {
namespace {

__global__ void pair_scatter_add_kernel(float* dense, const int64_t* indices, const float* values, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int64_t index = indices[i];
  if (index >= 0) dense[index] += values[i];
}

}  // namespace

void cuda_pair_scatter_add(int device_index, float* dense, const int64_t* indices, const float* values, int64_t count) {
  if (count <= 0) return;
  int previous = 0;
  cudaGetDevice(&previous);
  if (previous != device_index) cudaSetDevice(device_index);
  constexpr int kThreads = 256;
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  pair_scatter_add_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      dense, indices, values, count);
  const cudaError_t status = cudaGetLastError();
  if (previous != device_index) cudaSetDevice(previous);
  OPSNN_CHECK(status == cudaSuccess, "CUDA error '", cudaGetErrorString(status),
              "' launching the top-k pair scatter-add");
}

}  // namespace opsnn::dist
