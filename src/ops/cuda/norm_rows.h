// The channels-innermost passes of CUDA batch normalization (norm_rows.cu): data [rows, channels] with
// the channel the fastest-varying index, as channels-last [N, H, W, C] activations are ([N * H * W, C])
// and as a plain [N, C] batch is. norm.cu runs them instead of its [batch, channels, inner] passes when
// inner == 1 and shares its finalize kernels and workspace with them: the partials are laid out alike
// (partials[split * channels + channel]) and the coefficients are the same float4 per channel.
#pragma once

#include <cstdint>

#include "ops/cuda/norm_support.cuh"

namespace opsnn::cuda::norm {

// Splits of the rows for the partial reductions: a function of the shape and the device only (the
// workspace is sized with it), so equal inputs reduce in one fixed order.
int64_t row_split_count(int64_t rows, int64_t channels);

// Moments of each channel over each split's rows into partials[split * channels + channel].
template <typename T>
void launch_row_moments(const T* x, int64_t rows, int64_t channels, int64_t splits, Moments* partials);
// Sums of g and of g * (x - forward.mean) per channel and split into partials[split * channels + channel]
// (g masked by relu_output where that is not null, then also stored into masked_out where that is not
// null; else, with forward.beta not null, by the fused relu's mask recomputed from x).
template <typename T>
void launch_row_gradient_sums(const T* grad_out, const T* relu_output, const T* x, const NormalizeInputs& forward,
                              int64_t rows, int64_t channels, int64_t splits, double2* partials, T* masked_out);
// out = finish_normalized(normalize_value(x, coefficients[channel]), residual): relu'd with `relu`, the
// residual (null, or with relu) added before the relu, normalized first with residual_coefficients[channel]
// where those are not null.
template <typename T>
void launch_row_normalize(const T* x, const T* residual, const float4* residual_coefficients, T* out,
                          const float4* coefficients, int64_t rows, int64_t channels, bool relu);
// grad_input = grad_input_value(g, x, coefficients[channel]) (g masked by relu_output where not null; else,
// with mask_coefficients not null, by relu_output_positive(x, mask_coefficients[channel])).
template <typename T>
void launch_row_grad_input(const T* grad_out, const T* relu_output, const T* x, T* grad_input,
                           const float4* coefficients, const float4* mask_coefficients, int64_t rows, int64_t channels);

}  // namespace opsnn::cuda::norm
