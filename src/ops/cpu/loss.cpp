// CPU log-softmax over the rows of [N, K] logits (max-subtracted, so large logits do not overflow) and
// the mean negative log-likelihood with PyTorch's label smoothing, forward and backward.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernel_support.h"

namespace opsnn::ops {
namespace {

void check_rows(const Tensor& t, const char* kernel) {
  OPSNN_CHECK_AS(ShapeError, t.dim() == 2, "CPU ", kernel, ": expects [N, K], got ", shape_str(t.shape()));
  OPSNN_CHECK(t.is_contiguous(), "CPU ", kernel, ": operands must be contiguous");
}

// Runs serially before any parallel loop: an exception must not leave an OpenMP region.
void check_targets(const Tensor& target, int64_t rows, int64_t classes, const char* kernel) {
  OPSNN_CHECK_AS(TypeError, target.dtype() == DType::i64, "CPU ", kernel, ": targets must be i64, got ",
                 dtype_name(target.dtype()));
  OPSNN_CHECK_AS(ShapeError, target.dim() == 1 && target.size(0) == rows, "CPU ", kernel, ": targets ",
                 shape_str(target.shape()), " do not match ", rows, " rows");
  OPSNN_CHECK(target.is_contiguous(), "CPU ", kernel, ": targets must be contiguous");
  const int64_t* labels = target.data<int64_t>();
  for (int64_t i = 0; i < rows; ++i)
    OPSNN_CHECK_AS(
        ShapeError, labels[i] >= 0 && labels[i] < classes, "nll_loss: target ", labels[i], " (row ", i,
        ") is out of range for ", classes, " classes ",
        classes == 0 ? std::string("(no class is valid)") : detail::concat("(valid: 0 to ", classes - 1, ")"));
}

}  // namespace

void CpuBackend::log_softmax_forward(const Tensor& logits, Tensor& out) {
  check_rows(logits, "log_softmax_forward");
  check_same_shape(logits, out, "CPU log_softmax_forward");
  check_same_dtype(logits, out, "CPU log_softmax_forward");
  cpu::visit_floating(logits.dtype(), "log_softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = logits.size(0), classes = logits.size(1);
    const T* in = logits.data<T>();
    T* result = out.data<T>();
#pragma omp parallel for schedule(static) if (logits.numel() >= cpu::kParallelMinElements)
    for (int64_t i = 0; i < rows; ++i) {
      const T* row = in + i * classes;
      T* out_row = result + i * classes;
      T row_max = -INFINITY;
      for (int64_t k = 0; k < classes; ++k) row_max = std::max(row_max, row[k]);
      double exp_sum = 0.0;
      for (int64_t k = 0; k < classes; ++k) exp_sum += std::exp(static_cast<double>(row[k] - row_max));
      const T log_normalizer = row_max + static_cast<T>(std::log(exp_sum));
#pragma omp simd
      for (int64_t k = 0; k < classes; ++k) out_row[k] = row[k] - log_normalizer;
    }
  });
}

void CpuBackend::log_softmax_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_logits) {
  check_rows(grad_out, "log_softmax_backward");
  check_rows(out, "log_softmax_backward");
  check_rows(grad_logits, "log_softmax_backward");
  check_same_shape(grad_out, out, "CPU log_softmax_backward");
  check_same_shape(grad_out, grad_logits, "CPU log_softmax_backward");
  check_same_dtype(grad_out, out, "CPU log_softmax_backward");
  check_same_dtype(grad_out, grad_logits, "CPU log_softmax_backward");
  cpu::visit_floating(out.dtype(), "log_softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = out.size(0), classes = out.size(1);
    const T* upstream = grad_out.data<T>();
    const T* log_probs = out.data<T>();
    T* result = grad_logits.data<T>();
    // d/dx_k of sum_j g_j (x_j - logsumexp(x)) = g_k - softmax(x)_k * sum_j g_j
#pragma omp parallel for schedule(static) if (out.numel() >= cpu::kParallelMinElements)
    for (int64_t i = 0; i < rows; ++i) {
      const T* g = upstream + i * classes;
      const T* p = log_probs + i * classes;
      T* r = result + i * classes;
      double g_sum = 0.0;
      for (int64_t k = 0; k < classes; ++k) g_sum += static_cast<double>(g[k]);
      const T total = static_cast<T>(g_sum);
      for (int64_t k = 0; k < classes; ++k) r[k] = g[k] - std::exp(p[k]) * total;
    }
  });
}

void CpuBackend::nll_loss_forward(const Tensor& log_probs, const Tensor& target, double label_smoothing, Tensor& out) {
  check_rows(log_probs, "nll_loss_forward");
  const int64_t rows = log_probs.size(0), classes = log_probs.size(1);
  check_targets(target, rows, classes, "nll_loss_forward");
  check_same_dtype(log_probs, out, "CPU nll_loss_forward");
  OPSNN_CHECK_AS(ShapeError, out.numel() == 1, "CPU nll_loss_forward: output must hold one element, got ",
                 shape_str(out.shape()));
  cpu::visit_floating(log_probs.dtype(), "nll_loss_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* in = log_probs.data<T>();
    const int64_t* labels = target.data<int64_t>();
    const double target_weight = 1.0 - label_smoothing;
    const double uniform_weight = label_smoothing / static_cast<double>(classes);
    // Per-row losses in parallel, then summed in row order: the same result for any thread count.
    std::vector<double> row_loss(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static) if (log_probs.numel() >= cpu::kParallelMinElements)
    for (int64_t i = 0; i < rows; ++i) {
      const T* row = in + i * classes;
      double loss = -target_weight * static_cast<double>(row[labels[i]]);
      if (uniform_weight != 0.0) {
        double row_sum = 0.0;
        for (int64_t k = 0; k < classes; ++k) row_sum += static_cast<double>(row[k]);
        loss -= uniform_weight * row_sum;
      }
      row_loss[static_cast<size_t>(i)] = loss;
    }
    double total = 0.0;
    for (double loss : row_loss) total += loss;
    out.data<T>()[0] = static_cast<T>(total / static_cast<double>(rows));
  });
}

void CpuBackend::nll_loss_backward(const Tensor& grad_output, const Tensor& target, double label_smoothing,
                                   Tensor& grad_log_probs) {
  check_rows(grad_log_probs, "nll_loss_backward");
  OPSNN_CHECK_AS(ShapeError, grad_output.numel() == 1,
                 "nll_loss_backward: the loss gradient must hold one element, got ", shape_str(grad_output.shape()));
  const double grad_scale = grad_output.item();
  const int64_t rows = grad_log_probs.size(0), classes = grad_log_probs.size(1);
  check_targets(target, rows, classes, "nll_loss_backward");
  cpu::visit_floating(grad_log_probs.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t* labels = target.data<int64_t>();
    T* result = grad_log_probs.data<T>();
    // The gradient of the mean: every row carries 1/N of the upstream gradient.
    const double row_scale = grad_scale / static_cast<double>(rows);
    const T uniform_grad = static_cast<T>(-row_scale * label_smoothing / static_cast<double>(classes));
    const T target_grad = static_cast<T>(-row_scale * (1.0 - label_smoothing));
#pragma omp parallel for schedule(static) if (grad_log_probs.numel() >= cpu::kParallelMinElements)
    for (int64_t i = 0; i < rows; ++i) {
      T* row = result + i * classes;
      for (int64_t k = 0; k < classes; ++k) row[k] = uniform_grad;
      row[labels[i]] += target_grad;
    }
  });
}

}  // namespace opsnn::ops
