// Launchers for the own CUDA kernels of the compute backend (elementwise, sum, batch norm, pooling,
// log-softmax and NLL loss, embedding, index range checks). Plain C++ signatures, f32 data, all work on
// the legacy default stream of the current device; the Backend methods (ops.cpp) validate and call them.
#pragma once

#include <cstdint>

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
void launch_binary(BinaryKind kind, const float* a, const float* b, float* out, const BinaryLayout& layout,
                   int64_t count);
void launch_affine(const float* x, float scale, float shift, float* out, int64_t count);
void launch_relu(const float* x, float* out, int64_t count);
void launch_relu_backward(const float* grad_out, const float* x, float* grad_in, int64_t count);

// ---- sum over dimensions (reduce.cu) ----
// Output o sums x[kept_offset(o) + reduced_offset(r)] over r in [0, reduced_count); offsets decompose
// o and r over the kept and reduced (extent, stride) lists, the last dimension varying fastest.
struct ReduceLayout {
  int kept_dim = 0, reduced_dim = 0;
  int64_t kept_extents[kMaxKernelDims], kept_strides[kMaxKernelDims];
  int64_t reduced_extents[kMaxKernelDims], reduced_strides[kMaxKernelDims];
};
void launch_sum(const float* x, float* out, const ReduceLayout& layout, int64_t out_count, int64_t reduced_count);

// ---- batch normalization over [batch, channels, inner] (norm.cu) ----
struct ChannelLayout {
  int64_t batch, channels, inner;
};
void launch_batch_norm_forward_train(const float* x, const float* gamma, const float* beta, float* running_mean,
                                     float* running_var, double momentum, double eps, float* out, float* save_mean,
                                     float* save_invstd, const ChannelLayout& layout);
void launch_batch_norm_forward_eval(const float* x, const float* gamma, const float* beta, const float* running_mean,
                                    const float* running_var, double eps, float* out, const ChannelLayout& layout);
// grad_gamma / grad_beta may be null.
void launch_batch_norm_backward(const float* grad_out, const float* x, const float* gamma, const float* save_mean,
                                const float* save_invstd, float* grad_input, float* grad_gamma, float* grad_beta,
                                const ChannelLayout& layout);

// ---- pooling over NCHW planes (pool.cu) ----
struct PoolLayout {
  int64_t planes, in_h, in_w, out_h, out_w;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  bool count_include_pad;
};
void launch_max_pool_forward(const float* x, float* out, int64_t* indices, const PoolLayout& layout);
// Adds each output gradient at its plane's argmax into grad_input (which the caller zeroed).
void launch_max_pool_backward(const float* grad_out, const int64_t* indices, float* grad_input, int64_t planes,
                              int64_t in_plane, int64_t out_plane);
void launch_avg_pool_forward(const float* x, float* out, const PoolLayout& layout);
void launch_avg_pool_backward(const float* grad_out, float* grad_input, const PoolLayout& layout);

// ---- log-softmax and NLL loss over [rows, classes] (loss.cu) ----
void launch_log_softmax_forward(const float* logits, float* out, int64_t rows, int64_t classes);
void launch_log_softmax_backward(const float* grad_out, const float* out, float* grad_logits, int64_t rows,
                                 int64_t classes);
// out[0] = mean over rows of -(1 - s) logp[i, t_i] - s / K sum_k logp[i, k], summed in a fixed order.
void launch_nll_loss_forward(const float* log_probs, const int64_t* target, double label_smoothing, float* out,
                             int64_t rows, int64_t classes);
// grad[i, k] = uniform_grad + (k == t_i ? target_grad : 0)
void launch_nll_loss_backward(float uniform_grad, float target_grad, const int64_t* target, float* grad,
                              int64_t rows, int64_t classes);

// ---- embedding and index checks (embedding.cu) ----
void launch_embedding_forward(const float* table, const int64_t* indices, float* out, int64_t count, int64_t width);
// grad_weight[indices[i], :] += grad_out[i, :] with atomics (duplicates accumulate, order unspecified).
void launch_embedding_backward(const float* grad_out, const int64_t* indices, float* grad_weight, int64_t count,
                               int64_t width);
// *first_bad = the smallest position i with values[i] outside [0, limit), or UINT64_MAX when none.
void launch_find_out_of_range(const int64_t* values, int64_t count, int64_t limit, unsigned long long* first_bad);

}  // namespace opsnn::cuda
