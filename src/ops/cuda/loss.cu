// CUDA log-softmax over the rows of [N, K] logits (max-subtracted) and the mean negative log-likelihood
// with label smoothing, forward and backward. Row sums accumulate in double like the CPU twin
// (src/ops/cpu/loss.cpp); the loss sums its rows in a fixed order in one block, so it is reproducible.
#include <cmath>

#include "core/cuda/current_stream.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"

namespace opsnn::cuda {
namespace {

constexpr int kRowThreads = 128;
constexpr int kLossThreads = 1024;

__global__ void log_softmax_forward_kernel(const float* logits, float* out, int64_t rows, int64_t classes) {
  __shared__ float max_scratch[32];
  __shared__ double sum_scratch[32];
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const float* row = logits + i * classes;
    float* out_row = out + i * classes;
    float row_max = -INFINITY;
    for (int64_t k = threadIdx.x; k < classes; k += blockDim.x) row_max = fmaxf(row_max, row[k]);
    row_max = block_reduce(row_max, max_scratch, MaxOp{});
    double exp_sum = 0.0;
    for (int64_t k = threadIdx.x; k < classes; k += blockDim.x) exp_sum += exp(static_cast<double>(row[k] - row_max));
    exp_sum = block_reduce(exp_sum, sum_scratch, SumOp{});
    const float log_normalizer = row_max + static_cast<float>(log(exp_sum));
    for (int64_t k = threadIdx.x; k < classes; k += blockDim.x) out_row[k] = row[k] - log_normalizer;
  }
}

// d/dx_k of sum_j g_j (x_j - logsumexp(x)) = g_k - softmax(x)_k * sum_j g_j
__global__ void log_softmax_backward_kernel(const float* grad_out, const float* out, float* grad_logits, int64_t rows,
                                            int64_t classes) {
  __shared__ double scratch[32];
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const float* g = grad_out + i * classes;
    const float* p = out + i * classes;
    float* r = grad_logits + i * classes;
    double g_sum = 0.0;
    for (int64_t k = threadIdx.x; k < classes; k += blockDim.x) g_sum += static_cast<double>(g[k]);
    const float total = static_cast<float>(block_reduce(g_sum, scratch, SumOp{}));
    for (int64_t k = threadIdx.x; k < classes; k += blockDim.x) r[k] = g[k] - expf(p[k]) * total;
  }
}

__global__ void nll_loss_forward_kernel(const float* log_probs, const int64_t* target, double target_weight,
                                        double uniform_weight, float* out, int64_t rows, int64_t classes) {
  __shared__ double scratch[32];
  double total = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    const float* row = log_probs + i * classes;
    // A target outside [0, classes) reaches a kernel only from a replayed graph, whose check reports it
    // afterwards (ops.cpp): its row's loss is NaN rather than a read outside the row.
    const int64_t t = target[i];
    double loss = t >= 0 && t < classes ? -target_weight * static_cast<double>(row[t]) : NAN;
    if (uniform_weight != 0.0) {
      double row_sum = 0.0;
      for (int64_t k = 0; k < classes; ++k) row_sum += static_cast<double>(row[k]);
      loss -= uniform_weight * row_sum;
    }
    total += loss;
  }
  total = block_reduce(total, scratch, SumOp{});
  if (threadIdx.x == 0) out[0] = static_cast<float>(total / static_cast<double>(rows));
}

__global__ void nll_loss_backward_kernel(const float* grad_output, double label_smoothing, const int64_t* target,
                                         float* grad, int64_t rows, int64_t classes) {
  // The gradient of the mean: every row carries 1/N of the upstream gradient.
  const double row_scale = static_cast<double>(*grad_output) / static_cast<double>(rows);
  const float uniform_grad = static_cast<float>(-row_scale * label_smoothing / static_cast<double>(classes));
  const float target_grad = static_cast<float>(-row_scale * (1.0 - label_smoothing));
  const int64_t total = rows * classes;
  for (int64_t e = global_thread_index(); e < total; e += global_thread_count()) {
    const int64_t i = e / classes, k = e - i * classes, t = target[i];
    grad[e] = t < 0 || t >= classes ? NAN : k == t ? uniform_grad + target_grad : uniform_grad;  // NaN: as forward
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 * 8 ? rows : 65535 * 8); }

}  // namespace

void launch_log_softmax_forward(const float* logits, float* out, int64_t rows, int64_t classes) {
  if (rows == 0 || classes == 0) return;
  log_softmax_forward_kernel<<<row_blocks(rows), kRowThreads, 0, current_stream()>>>(logits, out, rows, classes);
}

void launch_log_softmax_backward(const float* grad_out, const float* out, float* grad_logits, int64_t rows,
                                 int64_t classes) {
  if (rows == 0 || classes == 0) return;
  log_softmax_backward_kernel<<<row_blocks(rows), kRowThreads, 0, current_stream()>>>(grad_out, out, grad_logits, rows,
                                                                                      classes);
}

void launch_nll_loss_forward(const float* log_probs, const int64_t* target, double label_smoothing, float* out,
                             int64_t rows, int64_t classes) {
  if (rows == 0) return;
  nll_loss_forward_kernel<<<1, kLossThreads, 0, current_stream()>>>(
      log_probs, target, 1.0 - label_smoothing, label_smoothing / static_cast<double>(classes), out, rows, classes);
}

void launch_nll_loss_backward(const float* grad_output, double label_smoothing, const int64_t* target, float* grad,
                              int64_t rows, int64_t classes) {
  const int64_t total = rows * classes;
  if (total == 0) return;
  nll_loss_backward_kernel<<<blocks_for(total), kThreadsPerBlock, 0, current_stream()>>>(grad_output, label_smoothing,
                                                                                         target, grad, rows, classes);
}

}  // namespace opsnn::cuda
