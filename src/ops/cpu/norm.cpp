// CPU batch normalization kernels over [N, C, ...] inputs (statistics per channel over N and every
// trailing dimension): training forward with running-stat update, eval forward, and backward.
// Statistics accumulate in double whatever the input dtype.
#include <cmath>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernel_support.h"

namespace opsnn::ops {
namespace {

// A channel's elements sit at sample * C * inner + channel * inner + [0, inner).
struct ChannelLayout {
  int64_t batch, channels, inner;
  explicit ChannelLayout(const Tensor& input)
      : batch(input.size(0)), channels(input.size(1)), inner(input.numel() / (input.size(0) * input.size(1))) {}
  int64_t count() const { return batch * inner; }  // elements per channel
  int64_t start(int64_t sample, int64_t channel) const { return (sample * channels + channel) * inner; }
  bool parallel() const { return batch * channels * inner > cpu::kParallelMinElements; }
};

// out = (x - center) * scale + shift; centering first keeps precision when the mean is large next to the
// spread.
template <typename T>
struct Coefficients {
  T center, scale, shift;
  T operator()(T x) const { return (x - center) * scale + shift; }
};

// The training forward's coefficients, from the saved statistics (mean and invstd rounded to T), gamma and
// beta only: the backward recomputes batch_norm_relu's values with them for the relu mask.
template <typename T>
Coefficients<T> training_coefficients(T mean, T invstd, T gamma, T beta) {
  return {mean, static_cast<T>(static_cast<double>(gamma) * static_cast<double>(invstd)), beta};
}

// out = k(x) over channel `channel`. With `relu`, relu of that, `v < 0 ? 0 : v` on the rounded value as
// CpuBackend::relu computes it, so the fused op equals batch norm followed by relu bit for bit; with a
// residual too, relu(value + residual) as CpuBackend::add_relu computes it, the residual first normalized
// by residual_k where that is given (another batch norm's output, computed as its own pass would).
template <typename T>
void normalize_channel(const T* x, const T* residual, T* out, const ChannelLayout& layout, int64_t channel,
                       const Coefficients<T>& k, bool relu, const Coefficients<T>* residual_k = nullptr) {
  for (int64_t n = 0; n < layout.batch; ++n) {
    const int64_t start = layout.start(n, channel);
    if (residual != nullptr) {
      for (int64_t i = start; i < start + layout.inner; ++i) {
        const T sum = k(x[i]) + (residual_k != nullptr ? (*residual_k)(residual[i]) : residual[i]);
        out[i] = sum < T(0) ? T(0) : sum;
      }
    } else if (relu) {
      for (int64_t i = start; i < start + layout.inner; ++i) {
        const T value = k(x[i]);
        out[i] = value < T(0) ? T(0) : value;
      }
    } else {
      for (int64_t i = start; i < start + layout.inner; ++i) out[i] = k(x[i]);
    }
  }
}

template <typename T>
void forward_train_typed(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                         Tensor& running_var, double momentum, double eps, bool relu, const Tensor& residual,
                         const ResidualNormalization& residual_norm, Tensor& out, Tensor& save_mean,
                         Tensor& save_invstd) {
  const ChannelLayout layout(input);
  const T* x = input.data<T>();
  const T* shortcut = residual.defined() ? residual.data<T>() : nullptr;
  const T* weight = gamma.data<T>();
  const T* bias = beta.data<T>();
  T* y = out.defined() ? out.data<T>() : nullptr;  // undefined: the statistics only
  const bool normalized_residual = residual_norm.defined();
  const T* residual_gamma = normalized_residual ? residual_norm.gamma.data<T>() : nullptr;
  const T* residual_beta = normalized_residual ? residual_norm.beta.data<T>() : nullptr;
  const T* residual_mean = normalized_residual ? residual_norm.save_mean.data<T>() : nullptr;
  const T* residual_invstd = normalized_residual ? residual_norm.save_invstd.data<T>() : nullptr;
  T* mean_out = save_mean.data<T>();
  T* invstd_out = save_invstd.data<T>();
  T* run_mean = running_mean.data<T>();
  T* run_var = running_var.data<T>();
  const double count = static_cast<double>(layout.count());
#pragma omp parallel for schedule(static) if (layout.parallel())
  for (int64_t c = 0; c < layout.channels; ++c) {
    // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
    double sum = 0.0;
    for (int64_t n = 0; n < layout.batch; ++n) {
      const int64_t start = layout.start(n, c);
      for (int64_t i = start; i < start + layout.inner; ++i) sum += static_cast<double>(x[i]);
    }
    const double mean = sum / count;
    double squared = 0.0;
    for (int64_t n = 0; n < layout.batch; ++n) {
      const int64_t start = layout.start(n, c);
      for (int64_t i = start; i < start + layout.inner; ++i) {
        const double deviation = static_cast<double>(x[i]) - mean;
        squared += deviation * deviation;
      }
    }
    const double variance = squared / count;
    const double invstd = 1.0 / std::sqrt(variance + eps);
    mean_out[c] = static_cast<T>(mean);
    invstd_out[c] = static_cast<T>(invstd);
    if (y != nullptr) {
      Coefficients<T> residual_k{};
      if (normalized_residual)
        residual_k = training_coefficients(residual_mean[c], residual_invstd[c], residual_gamma[c], residual_beta[c]);
      normalize_channel(x, shortcut, y, layout, c,
                        training_coefficients(mean_out[c], invstd_out[c], weight[c], bias[c]), relu,
                        normalized_residual ? &residual_k : nullptr);
    }
    // Running variance takes the unbiased estimate, as PyTorch does.
    run_mean[c] = static_cast<T>((1.0 - momentum) * static_cast<double>(run_mean[c]) + momentum * mean);
    run_var[c] =
        static_cast<T>((1.0 - momentum) * static_cast<double>(run_var[c]) + momentum * squared / (count - 1.0));
  }
}

template <typename T>
void forward_eval_typed(const Tensor& input, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                        const Tensor& running_var, double eps, bool relu, const Tensor& residual, Tensor& out) {
  const ChannelLayout layout(input);
  const T* x = input.data<T>();
  const T* shortcut = residual.defined() ? residual.data<T>() : nullptr;
  const T* weight = gamma.data<T>();
  const T* bias = beta.data<T>();
  const T* run_mean = running_mean.data<T>();
  const T* run_var = running_var.data<T>();
  T* y = out.data<T>();
#pragma omp parallel for schedule(static) if (layout.parallel())
  for (int64_t c = 0; c < layout.channels; ++c) {
    const double scale = static_cast<double>(weight[c]) / std::sqrt(static_cast<double>(run_var[c]) + eps);
    normalize_channel(x, shortcut, y, layout, c, Coefficients<T>{run_mean[c], static_cast<T>(scale), bias[c]}, relu);
  }
}

// With xhat = (x - mean) * invstd and g the output gradient, per channel over its M elements:
//   grad_beta = sum g,  grad_gamma = sum g * xhat,
//   grad_x = gamma * invstd * (g - sum g / M - xhat * sum(g * xhat) / M).
// After a fused relu, g is the upstream gradient where the relu output is positive and 0 elsewhere, read
// through the mask in both loops (the values relu_backward would have stored; the first loop stores them
// into masked_grad when that is defined). The mask is relu_output > 0, or with beta the forward's value
// recomputed from x with the forward's coefficients, > 0 (the same comparison on the same value).
template <typename T>
void backward_typed(const Tensor& grad_out, const Tensor& relu_output, const Tensor& input, const Tensor& gamma,
                    const Tensor& beta, const Tensor& save_mean, const Tensor& save_invstd, Tensor& grad_input,
                    Tensor& grad_gamma, Tensor& grad_beta, Tensor& masked_grad, bool accumulate_parameter_grads) {
  const ChannelLayout layout(input);
  const T* upstream = grad_out.data<T>();
  const T* mask = relu_output.defined() ? relu_output.data<T>() : nullptr;
  const T* bias = beta.defined() ? beta.data<T>() : nullptr;
  const T* x = input.data<T>();
  const T* weight = gamma.data<T>();
  const T* mean_in = save_mean.data<T>();
  const T* invstd_in = save_invstd.data<T>();
  T* dx = grad_input.data<T>();
  T* dgamma = grad_gamma.defined() ? grad_gamma.data<T>() : nullptr;
  T* dbeta = grad_beta.defined() ? grad_beta.data<T>() : nullptr;
  T* masked_out = masked_grad.defined() ? masked_grad.data<T>() : nullptr;
  const double count = static_cast<double>(layout.count());
#pragma omp parallel for schedule(static) if (layout.parallel())
  for (int64_t c = 0; c < layout.channels; ++c) {
    const double mean = static_cast<double>(mean_in[c]), invstd = static_cast<double>(invstd_in[c]);
    const Coefficients<T> forward =
        bias != nullptr ? training_coefficients(mean_in[c], invstd_in[c], weight[c], bias[c]) : Coefficients<T>{};
    const auto g = [&](int64_t i) {
      if (mask != nullptr) return mask[i] > T(0) ? upstream[i] : T(0);
      if (bias != nullptr) return forward(x[i]) > T(0) ? upstream[i] : T(0);
      return upstream[i];
    };
    double sum_grad = 0.0, sum_grad_centered = 0.0;
    for (int64_t n = 0; n < layout.batch; ++n) {
      const int64_t start = layout.start(n, c);
      for (int64_t i = start; i < start + layout.inner; ++i) {
        if (masked_out != nullptr) masked_out[i] = g(i);  // each value belongs to one channel: written once
        sum_grad += static_cast<double>(g(i));
        sum_grad_centered += static_cast<double>(g(i)) * (static_cast<double>(x[i]) - mean);
      }
    }
    const T beta_grad = static_cast<T>(sum_grad), gamma_grad = static_cast<T>(sum_grad_centered * invstd);
    if (dbeta != nullptr) dbeta[c] = accumulate_parameter_grads ? dbeta[c] + beta_grad : beta_grad;
    if (dgamma != nullptr) dgamma[c] = accumulate_parameter_grads ? dgamma[c] + gamma_grad : gamma_grad;
    const double k = static_cast<double>(weight[c]) * invstd;
    const double projection = sum_grad_centered * invstd * invstd / count;
    const T k_t = static_cast<T>(k), mean_t = static_cast<T>(mean), mean_grad_t = static_cast<T>(sum_grad / count);
    const T slope = static_cast<T>(k * projection);
    for (int64_t n = 0; n < layout.batch; ++n) {
      const int64_t start = layout.start(n, c);
      for (int64_t i = start; i < start + layout.inner; ++i)
        dx[i] = k_t * (g(i) - mean_grad_t) - slope * (x[i] - mean_t);
    }
  }
}

}  // namespace

void CpuBackend::batch_norm_forward_train(const Tensor& input, const Tensor& gamma, const Tensor& beta,
                                          Tensor& running_mean, Tensor& running_var, double momentum, double eps,
                                          bool relu, const Tensor& residual, const ResidualNormalization& residual_norm,
                                          Tensor& out, Tensor& save_mean, Tensor& save_invstd) {
  check_batch_norm_residual(input, relu, residual, "CPU batch_norm_forward_train", residual_norm, out.defined());
  cpu::visit_floating(input.dtype(), "batch_norm_forward_train", [&](auto tag) {
    forward_train_typed<decltype(tag)>(input, gamma, beta, running_mean, running_var, momentum, eps, relu, residual,
                                       residual_norm, out, save_mean, save_invstd);
  });
}

void CpuBackend::batch_norm_forward_eval(const Tensor& input, const Tensor& gamma, const Tensor& beta,
                                         const Tensor& running_mean, const Tensor& running_var, double eps, bool relu,
                                         const Tensor& residual, Tensor& out) {
  check_batch_norm_residual(input, relu, residual, "CPU batch_norm_forward_eval");
  cpu::visit_floating(input.dtype(), "batch_norm_forward_eval", [&](auto tag) {
    forward_eval_typed<decltype(tag)>(input, gamma, beta, running_mean, running_var, eps, relu, residual, out);
  });
}

void CpuBackend::batch_norm_backward(const Tensor& grad_out, const Tensor& relu_output, const Tensor& input,
                                     const Tensor& gamma, const Tensor& beta, const Tensor& save_mean,
                                     const Tensor& save_invstd, Tensor& grad_input, Tensor& grad_gamma,
                                     Tensor& grad_beta, Tensor& masked_grad, bool accumulate_parameter_grads) {
  check_relu_mask(grad_out, relu_output, beta, masked_grad, "CPU batch_norm_backward");
  cpu::visit_floating(grad_out.dtype(), "batch_norm_backward", [&](auto tag) {
    backward_typed<decltype(tag)>(grad_out, relu_output, input, gamma, beta, save_mean, save_invstd, grad_input,
                                  grad_gamma, grad_beta, masked_grad, accumulate_parameter_grads);
  });
}

}  // namespace opsnn::ops
