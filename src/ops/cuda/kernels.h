// Launchers for the own CUDA kernels of the compute backend (elementwise, sum, batch norm, pooling,
// log-softmax and NLL loss, embedding, index range checks, dot interaction). Plain C++ signatures, all work on the
// legacy default stream of the current device; the Backend methods (ops.cpp) validate and call them. Templates over T
// are instantiated for the floating storage types float, Half and BFloat16 (f32, f16, bf16; arithmetic in f32 or
// wider); the loss, embedding and interaction kernels are f32 only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "opsnn/core/half.h"

// Applies macro(T) to every floating storage type the templated kernels are instantiated for.
#define OPSNN_FOR_EACH_FLOATING_TYPE(macro) macro(float) macro(opsnn::Half) macro(opsnn::BFloat16)

namespace opsnn::cuda {

// Strided operands are described by at most this many (coalesced) dimensions.
inline constexpr int kMaxKernelDims = 8;

// ---- elementwise (elementwise.cu) ----
enum class BinaryKind : int { add, sub, mul, div };
// out (contiguous) = a (op) b, a and b strided views broadcast to out's extents (stride 0 on broadcast).
struct BinaryLayout {
  int dim = 0;
  int64_t extents[kMaxKernelDims];
  int64_t a_strides[kMaxKernelDims];
  int64_t b_strides[kMaxKernelDims];
};
template <typename T>
void launch_binary(BinaryKind kind, const T* a, const T* b, T* out, const BinaryLayout& layout, int64_t count);
template <typename T>
void launch_affine(const T* x, float scale, float shift, T* out, int64_t count);
template <typename T>
void launch_relu(const T* x, T* out, int64_t count);
template <typename T>
void launch_relu_backward(const T* grad_out, const T* x, T* grad_in, int64_t count);
// out = relu(a + b), the sum rounded to T before the relu (as add followed by relu); contiguous arrays.
template <typename T>
void launch_add_relu(const T* a, const T* b, T* out, int64_t count);

// ---- sum over dimensions (reduce.cu) ----
// Output o sums x[kept_offset(o) + reduced_offset(r)] over r in [0, reduced_count); offsets decompose
// o and r over the kept and reduced (extent, stride) lists, the last dimension varying fastest.
struct ReduceLayout {
  int kept_dim = 0, reduced_dim = 0;
  int64_t kept_extents[kMaxKernelDims], kept_strides[kMaxKernelDims];
  int64_t reduced_extents[kMaxKernelDims], reduced_strides[kMaxKernelDims];
};
// Terms accumulate in double; the result is rounded once to T.
template <typename T>
void launch_sum(const T* x, T* out, const ReduceLayout& layout, int64_t out_count, int64_t reduced_count);

// ---- batch normalization over [batch, channels, inner] (norm.cu; with inner == 1, channels-last
// activations as [N * H * W, C] among them, the channel-innermost kernels of norm_rows.cu) ----
// Data (x, out, grad_out, grad_input) of type T; the per-channel tensors (gamma, beta, running and saved
// statistics, their gradients) are always f32, and statistics accumulate in double. Each launcher
// takes device scratch of batch_norm_workspace_bytes(layout) bytes (16-byte aligned), computed on the
// device that runs the launch; it may be freed, stream-ordered, right after the launch. An empty input
// (batch * inner == 0) launches nothing. With `relu` the forwards write relu(batch norm), and with a
// non-null residual too relu(T(batch norm) + residual); a non-null relu_output (that fused output) makes
// the backward use grad_out only where relu_output > 0, and so does a non-null beta (the forward's, given
// instead of relu_output), by recomputing the forward's value from x (the training forward computes it
// from save_mean, save_invstd, gamma and beta alone).
struct ChannelLayout {
  int64_t batch, channels, inner;
};
// What a training forward's coefficients come from: saved statistics, gamma and beta (device pointers).
struct NormalizeInputs {
  const float *mean, *invstd, *gamma, *beta;
};
size_t batch_norm_workspace_bytes(const ChannelLayout& layout);
// A null out: the statistics and running stats only. A non-null residual_norm (with residual): the residual
// is another batch norm's input, normalized with those inputs before it is added (its output bit for bit).
template <typename T>
void launch_batch_norm_forward_train(const T* x, const float* gamma, const float* beta, float* running_mean,
                                     float* running_var, double momentum, double eps, bool relu, const T* residual,
                                     const NormalizeInputs* residual_norm, T* out, float* save_mean, float* save_invstd,
                                     const ChannelLayout& layout, void* workspace);
template <typename T>
void launch_batch_norm_forward_eval(const T* x, const float* gamma, const float* beta, const float* running_mean,
                                    const float* running_var, double eps, bool relu, const T* residual, T* out,
                                    const ChannelLayout& layout, void* workspace);
// grad_gamma / grad_beta and relu_output may be null; masked_grad too, else (with relu_output) it
// receives grad_out masked by relu_output > 0 from the sums pass, and the grad_input pass reads it. With
// accumulate_parameter_grads grad_gamma / grad_beta are added into.
template <typename T>
void launch_batch_norm_backward(const T* grad_out, const T* relu_output, const T* x, const float* gamma,
                                const float* beta, const float* save_mean, const float* save_invstd, T* grad_input,
                                float* grad_gamma, float* grad_beta, T* masked_grad, bool accumulate_parameter_grads,
                                const ChannelLayout& layout, void* workspace);

// ---- pooling over NCHW planes (pool.cu) ----
struct PoolLayout {
  int64_t planes, in_h, in_w, out_h, out_w;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  bool count_include_pad;
};
template <typename T>
void launch_max_pool_forward(const T* x, T* out, int32_t* indices, const PoolLayout& layout);
// Writes all of grad_input: each cell is the sum (in f32, in window order, rounded once to T) of the
// output gradients whose argmax it is, zero for the others.
template <typename T>
void launch_max_pool_backward(const T* grad_out, const int32_t* indices, T* grad_input, const PoolLayout& layout);
template <typename T>
void launch_avg_pool_forward(const T* x, T* out, const PoolLayout& layout);
template <typename T>
void launch_avg_pool_backward(const T* grad_out, T* grad_input, const PoolLayout& layout);

// ---- training batch_norm_relu followed by max pooling, fused (norm_pool.cu): a ResNet stem's tail ----
// Takes stride-2 pooling with windows up to 5 wide (and planes, and plane counts, below 2^31).
bool batch_norm_relu_max_pool_fits(const PoolLayout& pool);
size_t batch_norm_relu_max_pool_workspace_bytes(const ChannelLayout& layout);
// Statistics, running stats and saved statistics as launch_batch_norm_forward_train's; out as
// launch_max_pool_forward's of batch_norm_relu's output, bit for bit; offsets: each window's choice as
// dh * kernel_w + dw within the window (its max_pool2d index is (oh * stride - pad + dh) * W + ow * stride
// - pad + dw).
template <typename T>
void launch_batch_norm_relu_max_pool_forward_train(const T* x, const float* gamma, const float* beta,
                                                   float* running_mean, float* running_var, double momentum, double eps,
                                                   T* out, uint8_t* offsets, float* save_mean, float* save_invstd,
                                                   const ChannelLayout& layout, const PoolLayout& pool,
                                                   void* workspace);
// grad_out: the pooled output's gradient. grad_gamma / grad_beta may be null; with
// accumulate_parameter_grads they are added into.
template <typename T>
void launch_batch_norm_relu_max_pool_backward(const T* grad_out, const uint8_t* offsets, const T* x, const float* gamma,
                                              const float* beta, const float* save_mean, const float* save_invstd,
                                              T* grad_input, float* grad_gamma, float* grad_beta,
                                              bool accumulate_parameter_grads, const ChannelLayout& layout,
                                              const PoolLayout& pool, void* workspace);

// ---- convolution lowerings (conv_lowering.cu) ----
// images x [N, C, in_h, in_w] <-> columns [N, rows_padded, out_h * out_w] with row (c, r, s) of the
// C * kernel_h * kernel_w real rows; rows_padded >= that (the extra rows are zero in im2col's output and
// ignored by col2im). Sizes must fit 31 bits per plane / row; N * rows_padded may be larger.
struct Im2colLayout {
  int64_t images, channels, in_h, in_w, out_h, out_w;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  int64_t rows_padded;
};
template <typename T>
void launch_im2col(const T* x, T* columns, const Im2colLayout& layout);
// x = col2im(columns): each x value is the sum (f32, fixed order) of the column entries im2col would have
// copied it to; overwrites every x value. TC is the columns' type (f32 or T).
template <typename TC, typename T>
void launch_col2im(const TC* columns, T* x, const Im2colLayout& layout);
// out[r * cols + c] = (out[...] if accumulate) + sum over i < count of partials[(i * rows + r) * cols_padded + c],
// in i order, in double; all f32.
void launch_sum_partials(const float* partials, int64_t count, int64_t rows, int64_t cols, int64_t cols_padded,
                         float* out, bool accumulate);
// dst[b] = the transpose ([cols, rows]) of the row-major [rows, cols] matrix src[b], for b < batches, of
// 2-, 4- or 8-byte elements. False (nothing launched) when a matrix does not fit a block's shared memory
// (48 KiB with its padding) or the element size is another: the caller then copies another way.
bool launch_batched_transpose(const void* src, void* dst, int64_t batches, int64_t rows, int64_t cols,
                              size_t element_bytes);

// ---- log-softmax and NLL loss over [rows, classes] (loss.cu) ----
void launch_log_softmax_forward(const float* logits, float* out, int64_t rows, int64_t classes);
void launch_log_softmax_backward(const float* grad_out, const float* out, float* grad_logits, int64_t rows,
                                 int64_t classes);
// out[0] = mean over rows of -(1 - s) logp[i, t_i] - s / K sum_k logp[i, k], summed in a fixed order.
void launch_nll_loss_forward(const float* log_probs, const int64_t* target, double label_smoothing, float* out,
                             int64_t rows, int64_t classes);
// grad[i, k] = uniform + (k == t_i ? target : 0), from g = *grad_output (read on the device): with
// r = g / N, uniform = -r s / K and target = -r (1 - s), in double, rounded to f32 (the CPU twin's bits).
void launch_nll_loss_backward(const float* grad_output, double label_smoothing, const int64_t* target, float* grad,
                              int64_t rows, int64_t classes);

// ---- embedding and index checks (embedding.cu) ----
// out[i, :] = table[indices[i], :]; an index outside [0, table_rows) gives a NaN row.
void launch_embedding_forward(const float* table, const int64_t* indices, float* out, int64_t count, int64_t width,
                              int64_t table_rows);
// grad_weight[indices[i], :] += grad_out[i, :] with atomics (duplicates accumulate, order unspecified);
// an index outside [0, table_rows) adds nothing.
void launch_embedding_backward(const float* grad_out, const int64_t* indices, float* grad_weight, int64_t count,
                               int64_t width, int64_t table_rows);
// *first_bad = the smallest position i with values[i] outside [0, limit), or UINT64_MAX when none.
void launch_find_out_of_range(const int64_t* values, int64_t count, int64_t limit, unsigned long long* first_bad);
// record = {*first_bad, values[*first_bad]} when *first_bad names a position and record[0] is UINT64_MAX
// (a captured graph's check keeps the first failure of any replay).
void launch_commit_out_of_range(const int64_t* values, const unsigned long long* first_bad, unsigned long long* record);

// ---- dot interaction over x [batch, features, width] (interaction.cu) ----
// out [batch, features (features - 1) / 2]: the dot products of the pairs j < i, row by row; grad_x gets
// sum over j != i of grad_out[pair(i, j)] * x[j]. Sums in double in the CPU twin's order.
void launch_dot_interaction_forward(const float* x, float* out, int64_t batch, int64_t features, int64_t width);
void launch_dot_interaction_backward(const float* grad_out, const float* x, float* grad_x, int64_t batch,
                                     int64_t features, int64_t width);

}  // namespace opsnn::cuda
