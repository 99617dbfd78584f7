// The unfused ("traditional") Adam / AdamW chain on the GPU, one kernel per stage as a framework without fusion
// runs it, for the fused step's baseline; and a deterministic fill. Plain grid-stride kernels.
#include <cmath>

#include "bench/cuda/unfused_chain.h"

namespace opsnn::bench {
namespace {

constexpr int kThreads = 256;
constexpr int kNormBlocks = 1024;

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)); }

__global__ void norm_partials_kernel(const float* g, int64_t n, double* partials) {
  __shared__ double shared[kThreads];
  double sum = 0.0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    sum += static_cast<double>(g[i]) * g[i];
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

#define GRID_STRIDE(i, n)                                                                \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void prepare_kernel(const float* g, const float* p, float* out, float inverse_scale, float wd, int64_t n) {
  GRID_STRIDE(i, n) out[i] = g[i] * inverse_scale + wd * p[i];
}
__global__ void momentum_kernel(float* m, const float* g, float beta1, int64_t n) {
  GRID_STRIDE(i, n) m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
}
__global__ void variance_kernel(float* v, const float* g, float beta2, int64_t n) {
  GRID_STRIDE(i, n) v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
}
__global__ void bias_correction_kernel(const float* m, const float* v, float* m_hat, float* v_hat, float c1, float c2,
                                       int64_t n) {
  GRID_STRIDE(i, n) {
    m_hat[i] = m[i] * c1;
    v_hat[i] = v[i] * c2;
  }
}
__global__ void decay_kernel(float* p, float factor, int64_t n) { GRID_STRIDE(i, n) p[i] *= factor; }
__global__ void update_kernel(float* p, const float* m_hat, const float* v_hat, float lr, float eps, int64_t n) {
  GRID_STRIDE(i, n) p[i] -= lr * m_hat[i] / (sqrtf(v_hat[i]) + eps);
}
__global__ void fill_kernel(float* data, int64_t n, uint64_t seed, float low, float high) {
  GRID_STRIDE(i, n) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    data[i] = low + (high - low) * static_cast<float>(z >> 40) * 0x1p-24f;
  }
}

}  // namespace

void unfused_step(const UnfusedAdamBuffers& b, UnfusedRule rule, int64_t step, cudaStream_t stream) {
  const float beta1 = 0.9f, beta2 = 0.999f, lr = 1e-3f, eps = 1e-8f, wd = 0.0f, decoupled_wd = 1e-2f;
  const int grid = blocks_for(b.n);
  norm_partials_kernel<<<kNormBlocks, kThreads, 0, stream>>>(b.grads, b.n, b.norm_partials);
  prepare_kernel<<<grid, kThreads, 0, stream>>>(b.grads, b.params, b.prepared, 1.0f, wd, b.n);
  momentum_kernel<<<grid, kThreads, 0, stream>>>(b.exp_avg, b.prepared, beta1, b.n);
  variance_kernel<<<grid, kThreads, 0, stream>>>(b.exp_avg_sq, b.prepared, beta2, b.n);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(0.9, static_cast<double>(step))));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(0.999, static_cast<double>(step))));
  bias_correction_kernel<<<grid, kThreads, 0, stream>>>(b.exp_avg, b.exp_avg_sq, b.m_hat, b.v_hat, c1, c2, b.n);
  if (rule == UnfusedRule::adamw) decay_kernel<<<grid, kThreads, 0, stream>>>(b.params, 1.0f - lr * decoupled_wd, b.n);
  update_kernel<<<grid, kThreads, 0, stream>>>(b.params, b.m_hat, b.v_hat, lr, eps, b.n);
}

void fill_uniform(float* data, int64_t n, uint64_t seed, float low, float high, cudaStream_t stream) {
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(data, n, seed, low, high);
}

}  // namespace opsnn::bench
