// The CUDA Backend methods that run own kernels (kernels.h): elementwise, sum, batch norm, pooling,
// log-softmax and NLL loss, embedding, dot interaction. Each checks dtype, device, layout and shape, lays out the
// kernel's arguments (coalescing strided dimensions like the CPU twin) and launches on the legacy
// default stream of the operands' device (batch norm with scratch from that device's stream-ordered
// pool). Elementwise, sum, batch norm and pooling take f32, f16 or bf16 data (batch norm with f32
// per-channel tensors); the loss, embedding and interaction kernels are f32 only.
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/capture.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
#include "core/cuda/device_guard.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_context.h"
#include "ops/cuda/kernels.h"

namespace opsnn::ops {
namespace {

using cuda::dispatch_floating;
using cuda::require_f32;
using cuda::require_on;

void check_launch() { OPSNN_CUDA_CHECK(cudaGetLastError()); }

// Checks for operands that must be f32, contiguous and on `device`.
void require_dense(const Tensor& t, Device device, const char* kernel) {
  require_f32(t, kernel);
  require_on(t, device, kernel);
  OPSNN_CHECK(t.is_contiguous(), "CUDA ", kernel, ": operands must be contiguous");
}

// Checks for data operands that must be contiguous, on `device` and of `like`'s floating dtype.
void require_dense_as(const Tensor& t, const Tensor& like, Device device, const char* kernel) {
  cuda::require_floating(t, kernel);
  OPSNN_CHECK_AS(TypeError, t.dtype() == like.dtype(), "CUDA ", kernel, ": dtype mismatch, ", t.str(), " vs ",
                 like.str());
  require_on(t, device, kernel);
  OPSNN_CHECK(t.is_contiguous(), "CUDA ", kernel, ": operands must be contiguous");
}

// The iteration space of a binary op with dimensions every operand walks as one progression merged:
// [N, C, H, W] + [1, C, 1, 1] becomes extents [N, C, H*W] with b strides [0, 1, 0].
cuda::BinaryLayout coalesce(const Tensor& a, const Tensor& b, const Tensor& out) {
  std::vector<int64_t> extents, a_strides, b_strides, out_strides;
  const Shape contiguous = contiguous_strides(out.shape());
  for (size_t d = 0; d < out.shape().size(); ++d) {
    const int64_t extent = out.shape()[d];
    if (extent == 1) continue;
    if (!extents.empty() && a_strides.back() == a.strides()[d] * extent &&
        b_strides.back() == b.strides()[d] * extent && out_strides.back() == contiguous[d] * extent) {
      extents.back() *= extent;
      a_strides.back() = a.strides()[d];
      b_strides.back() = b.strides()[d];
      out_strides.back() = contiguous[d];
      continue;
    }
    extents.push_back(extent);
    a_strides.push_back(a.strides()[d]);
    b_strides.push_back(b.strides()[d]);
    out_strides.push_back(contiguous[d]);
  }
  cuda::BinaryLayout layout;
  if (extents.empty()) {  // a single element
    layout.dim = 1;
    layout.extents[0] = layout.a_strides[0] = layout.b_strides[0] = 1;
    return layout;
  }
  OPSNN_CHECK_AS(ShapeError, extents.size() <= static_cast<size_t>(cuda::kMaxKernelDims),
                 "CUDA binary: ", extents.size(), " non-mergeable dimensions in ", shape_str(out.shape()), " (at most ",
                 cuda::kMaxKernelDims, ")");
  layout.dim = static_cast<int>(extents.size());
  for (size_t d = 0; d < extents.size(); ++d) {
    layout.extents[d] = extents[d];
    layout.a_strides[d] = a_strides[d];
    layout.b_strides[d] = b_strides[d];
  }
  return layout;
}

cuda::ChannelLayout channel_layout(const Tensor& input) {
  return {input.size(0), input.size(1), input.numel() / (input.size(0) * input.size(1))};
}

void check_channel_vector(const Tensor& t, const Tensor& input, const char* kernel) {
  require_dense(t, input.device(), kernel);
  OPSNN_CHECK_AS(ShapeError, t.numel() == input.size(1), "CUDA ", kernel, ": per-channel tensor ", t.str(),
                 " does not match ", input.size(1), " channels of ", shape_str(input.shape()));
}

cuda::PoolLayout pool_layout(const Shape& input, const Shape& output, const Pool2dGeometry& g) {
  return {input[0] * input[1], input[2],   input[3],   output[2], output[3], g.kernel_h,
          g.kernel_w,          g.stride_h, g.stride_w, g.pad_h,   g.pad_w,   g.count_include_pad};
}

void check_pool_pair(const Tensor& input_side, const Tensor& output_side, const char* kernel) {
  OPSNN_CHECK_AS(ShapeError,
                 input_side.dim() == 4 && output_side.dim() == 4 && input_side.size(0) == output_side.size(0) &&
                     input_side.size(1) == output_side.size(1),
                 "CUDA ", kernel, ": ", shape_str(input_side.shape()), " and ", shape_str(output_side.shape()),
                 " are not matching NCHW input and output");
}

// Throws ShapeError with message(position, value) for the first entry of `values` (i64, contiguous)
// outside [0, limit). Reads one word back, so it synchronizes with the device; during a graph capture,
// which cannot read back, the search and its report are recorded into the graph (core/cuda/capture.h)
// and a replay reports the failure later, the kernels reading the values guarding against it meanwhile.
void check_index_range(const Tensor& values, int64_t limit,
                       std::function<std::string(int64_t position, int64_t value)> message) {
  const Device device = values.device();
  Storage flag(sizeof(unsigned long long), device);
  auto* found = static_cast<unsigned long long*>(flag.data());
  cuda::launch_find_out_of_range(values.data<int64_t>(), values.numel(), limit, found);
  check_launch();
  if (cuda::GraphCapture* capture = cuda::active_capture()) {
    const cuda::GraphCapture::Slot slot = capture->add_check(std::move(message));
    cuda::launch_commit_out_of_range(values.data<int64_t>(), found, slot.device_words);
    check_launch();
    OPSNN_CUDA_CHECK(cudaMemcpyAsync(slot.host_words, slot.device_words, 2 * sizeof(unsigned long long),
                                     cudaMemcpyDeviceToHost, cuda::current_stream()));
    return;
  }
  unsigned long long first_bad = 0;
  OPSNN_CUDA_CHECK(cudaMemcpy(&first_bad, found, sizeof(first_bad), cudaMemcpyDeviceToHost));
  if (first_bad == ~0ULL) return;
  int64_t value = 0;
  OPSNN_CUDA_CHECK(cudaMemcpy(&value, values.data<int64_t>() + first_bad, sizeof(value), cudaMemcpyDeviceToHost));
  throw ShapeError(message(static_cast<int64_t>(first_bad), value));
}

// Index tensors: of `dtype` (i64 for targets and embedding rows, i32 for max pooling's argmax), on
// `device`, contiguous.
void check_index_tensor(const Tensor& indices, DType dtype, Device device, const char* kernel) {
  OPSNN_CHECK_AS(TypeError, indices.dtype() == dtype, "CUDA ", kernel, ": indices must be ", dtype_name(dtype),
                 ", got ", dtype_name(indices.dtype()));
  require_on(indices, device, kernel);
  OPSNN_CHECK(indices.is_contiguous(), "CUDA ", kernel, ": indices must be contiguous");
}

void check_rows(const Tensor& t, Device device, const char* kernel) {
  OPSNN_CHECK_AS(ShapeError, t.dim() == 2, "CUDA ", kernel, ": expects [N, K], got ", shape_str(t.shape()));
  require_dense(t, device, kernel);
}

void check_target_shape(const Tensor& target, int64_t rows, Device device, const char* kernel) {
  check_index_tensor(target, DType::i64, device, kernel);
  OPSNN_CHECK_AS(ShapeError, target.dim() == 1 && target.size(0) == rows, "CUDA ", kernel, ": targets ",
                 shape_str(target.shape()), " do not match ", rows, " rows");
}

void check_targets(const Tensor& target, int64_t rows, int64_t classes, Device device, const char* kernel) {
  check_target_shape(target, rows, device, kernel);
  check_index_range(target, classes, [classes](int64_t row, int64_t value) {
    return detail::concat(
        "nll_loss: target ", value, " (row ", row, ") is out of range for ", classes, " classes ",
        classes == 0 ? std::string("(no class is valid)") : detail::concat("(valid: 0 to ", classes - 1, ")"));
  });
}

void check_embedding_operands(const Tensor& rows, const Tensor& indices, const Tensor& table, const char* kernel) {
  OPSNN_CHECK_AS(ShapeError, table.dim() == 2, "CUDA ", kernel, ": table must be [V, D], got ",
                 shape_str(table.shape()));
  OPSNN_CHECK_AS(ShapeError, rows.dim() == 2 && rows.size(0) == indices.numel() && rows.size(1) == table.size(1),
                 "CUDA ", kernel, ": rows ", shape_str(rows.shape()), " do not match ", indices.numel(),
                 " indices of a table ", shape_str(table.shape()));
  require_dense(table, table.device(), kernel);
  require_dense(rows, table.device(), kernel);
  check_index_tensor(indices, DType::i64, table.device(), kernel);
  const int64_t table_rows = table.size(0);
  check_index_range(indices, table_rows, [table_rows](int64_t position, int64_t value) {
    return detail::concat("embedding: index ", value, " (position ", position, ") is out of range for a table of ",
                          table_rows, " rows ",
                          table_rows == 0 ? std::string("(an empty table has no valid index)")
                                          : detail::concat("(valid: 0 to ", table_rows - 1, ")"));
  });
}

}  // namespace

// ---- elementwise ----

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  OPSNN_CHECK_AS(ShapeError, a.shape() == out.shape() && b.shape() == out.shape(),
                 "CUDA binary: inputs must be broadcast to the output shape ", shape_str(out.shape()), ", got ",
                 shape_str(a.shape()), " and ", shape_str(b.shape()));
  require_dense_as(out, out, out.device(), "binary");
  OPSNN_CHECK_AS(TypeError, a.dtype() == out.dtype() && b.dtype() == out.dtype(), "CUDA binary: dtype mismatch, ",
                 a.str(), ", ", b.str(), " -> ", out.str());
  require_on(a, out.device(), "binary");
  require_on(b, out.device(), "binary");
  const cuda::BinaryLayout layout = coalesce(a, b, out);
  cuda::DeviceGuard guard(out.device().index);
  static constexpr cuda::BinaryKind kinds[] = {cuda::BinaryKind::add, cuda::BinaryKind::sub, cuda::BinaryKind::mul,
                                               cuda::BinaryKind::div};
  const cuda::BinaryKind kind = kinds[static_cast<int>(op)];
  dispatch_floating(out.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_binary(kind, a.data<T>(), b.data<T>(), out.data<T>(), layout, out.numel());
  });
  check_launch();
}

void CudaBackend::affine(const Tensor& x, double scale, double shift, Tensor& out) {
  check_same_shape(x, out, "CUDA affine");
  require_dense_as(x, out, out.device(), "affine");
  require_dense_as(out, out, out.device(), "affine");
  cuda::DeviceGuard guard(out.device().index);
  dispatch_floating(out.dtype(), "affine", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_affine(x.data<T>(), static_cast<float>(scale), static_cast<float>(shift), out.data<T>(), x.numel());
  });
  check_launch();
}

void CudaBackend::relu(const Tensor& x, Tensor& out) {
  check_same_shape(x, out, "CUDA relu");
  require_dense_as(x, out, out.device(), "relu");
  require_dense_as(out, out, out.device(), "relu");
  cuda::DeviceGuard guard(out.device().index);
  dispatch_floating(out.dtype(), "relu", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_relu(x.data<T>(), out.data<T>(), x.numel());
  });
  check_launch();
}

void CudaBackend::relu_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_in) {
  check_same_shape(grad_out, x, "CUDA relu_backward");
  check_same_shape(grad_out, grad_in, "CUDA relu_backward");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&grad_out, &x, &grad_in})
    require_dense_as(*t, grad_in, grad_in.device(), "relu_backward");
  cuda::DeviceGuard guard(grad_in.device().index);
  dispatch_floating(grad_in.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_relu_backward(grad_out.data<T>(), x.data<T>(), grad_in.data<T>(), x.numel());
  });
  check_launch();
}

void CudaBackend::add_relu(const Tensor& a, const Tensor& b, Tensor& out) {
  check_same_shape(a, out, "CUDA add_relu");
  check_same_shape(b, out, "CUDA add_relu");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&a, &b, &out})
    require_dense_as(*t, out, out.device(), "add_relu");
  cuda::DeviceGuard guard(out.device().index);
  dispatch_floating(out.dtype(), "add_relu", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_add_relu(a.data<T>(), b.data<T>(), out.data<T>(), out.numel());
  });
  check_launch();
}

// ---- reductions ----

void CudaBackend::sum(const Tensor& x, const std::vector<int64_t>& reduce_dims, Tensor& out) {
  require_dense_as(x, out, out.device(), "sum");
  require_dense_as(out, out, out.device(), "sum");
  std::vector<bool> reduced(x.shape().size(), false);
  for (int64_t d : reduce_dims) {
    OPSNN_CHECK_AS(ShapeError, d >= 0 && d < x.dim(), "CUDA sum: dimension ", d, " out of range for ",
                   shape_str(x.shape()));
    reduced[static_cast<size_t>(d)] = true;
  }
  Shape expected = x.shape();
  for (size_t d = 0; d < expected.size(); ++d)
    if (reduced[d]) expected[d] = 1;
  OPSNN_CHECK_AS(ShapeError, out.shape() == expected, "CUDA sum: output ", shape_str(out.shape()),
                 " does not match the keepdim shape ", shape_str(expected), " of ", shape_str(x.shape()));
  // Size-1 dimensions dropped, neighbours of the same kind merged (x is contiguous, so each merged run
  // is one progression); kept and reduced runs then alternate.
  cuda::ReduceLayout layout;
  const Shape strides = contiguous_strides(x.shape());
  int previous_kind = -1;
  int64_t reduced_count = 1;
  for (size_t d = 0; d < x.shape().size(); ++d) {
    const int64_t extent = x.shape()[d];
    if (extent == 1) continue;
    const int kind = reduced[d] ? 1 : 0;
    int& dim = kind ? layout.reduced_dim : layout.kept_dim;
    int64_t* extents = kind ? layout.reduced_extents : layout.kept_extents;
    int64_t* run_strides = kind ? layout.reduced_strides : layout.kept_strides;
    if (kind) reduced_count *= extent;
    if (kind == previous_kind) {
      extents[dim - 1] *= extent;
      run_strides[dim - 1] = strides[d];
      continue;
    }
    OPSNN_CHECK_AS(ShapeError, dim < cuda::kMaxKernelDims, "CUDA sum: too many alternating dimensions in ",
                   shape_str(x.shape()));
    extents[dim] = extent;
    run_strides[dim] = strides[d];
    ++dim;
    previous_kind = kind;
  }
  if (x.numel() == 0) reduced_count = 0;
  cuda::DeviceGuard guard(out.device().index);
  dispatch_floating(out.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_sum(x.data<T>(), out.data<T>(), layout, out.numel(), reduced_count);
  });
  check_launch();
}

// ---- batch normalization ----

void CudaBackend::batch_norm_forward_train(const Tensor& input, const Tensor& gamma, const Tensor& beta,
                                           Tensor& running_mean, Tensor& running_var, double momentum, double eps,
                                           bool relu, const Tensor& residual,
                                           const ResidualNormalization& residual_norm, Tensor& out, Tensor& save_mean,
                                           Tensor& save_invstd) {
  const char* kernel = "batch_norm_forward_train";
  OPSNN_CHECK_AS(ShapeError, input.dim() >= 2, "CUDA ", kernel, ": input must be [N, C, ...], got ", input.str());
  require_dense_as(input, input, input.device(), kernel);
  if (out.defined()) {
    require_dense_as(out, input, input.device(), kernel);
    check_same_shape(input, out, "CUDA batch_norm_forward_train");
  }
  check_batch_norm_residual(input, relu, residual, "CUDA batch_norm_forward_train", residual_norm, out.defined());
  for (const Tensor* t :
       std::initializer_list<const Tensor*>{&gamma, &beta, &running_mean, &running_var, &save_mean, &save_invstd})
    check_channel_vector(*t, input, kernel);
  if (residual_norm.defined())
    for (const Tensor* t :
         {&residual_norm.gamma, &residual_norm.beta, &residual_norm.save_mean, &residual_norm.save_invstd})
      check_channel_vector(*t, input, kernel);
  cuda::DeviceGuard guard(input.device().index);
  const cuda::ChannelLayout layout = channel_layout(input);
  const Storage workspace(cuda::batch_norm_workspace_bytes(layout), input.device());
  const cuda::NormalizeInputs residual_inputs =
      residual_norm.defined()
          ? cuda::NormalizeInputs{residual_norm.save_mean.data<float>(), residual_norm.save_invstd.data<float>(),
                                  residual_norm.gamma.data<float>(), residual_norm.beta.data<float>()}
          : cuda::NormalizeInputs{};
  dispatch_floating(input.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_batch_norm_forward_train(
        input.data<T>(), gamma.data<float>(), beta.data<float>(), running_mean.data<float>(), running_var.data<float>(),
        momentum, eps, relu, residual.defined() ? residual.data<T>() : nullptr,
        residual_norm.defined() ? &residual_inputs : nullptr, out.defined() ? out.data<T>() : nullptr,
        save_mean.data<float>(), save_invstd.data<float>(), layout, workspace.data());
  });
  check_launch();
}

void CudaBackend::batch_norm_forward_eval(const Tensor& input, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& running_mean, const Tensor& running_var, double eps, bool relu,
                                          const Tensor& residual, Tensor& out) {
  const char* kernel = "batch_norm_forward_eval";
  OPSNN_CHECK_AS(ShapeError, input.dim() >= 2, "CUDA ", kernel, ": input must be [N, C, ...], got ", input.str());
  require_dense_as(input, input, input.device(), kernel);
  require_dense_as(out, input, input.device(), kernel);
  check_same_shape(input, out, "CUDA batch_norm_forward_eval");
  check_batch_norm_residual(input, relu, residual, "CUDA batch_norm_forward_eval");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &beta, &running_mean, &running_var})
    check_channel_vector(*t, input, kernel);
  cuda::DeviceGuard guard(input.device().index);
  const cuda::ChannelLayout layout = channel_layout(input);
  const Storage workspace(cuda::batch_norm_workspace_bytes(layout), input.device());
  dispatch_floating(input.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_batch_norm_forward_eval(
        input.data<T>(), gamma.data<float>(), beta.data<float>(), running_mean.data<float>(), running_var.data<float>(),
        eps, relu, residual.defined() ? residual.data<T>() : nullptr, out.data<T>(), layout, workspace.data());
  });
  check_launch();
}

void CudaBackend::batch_norm_backward(const Tensor& grad_out, const Tensor& relu_output, const Tensor& input,
                                      const Tensor& gamma, const Tensor& beta, const Tensor& save_mean,
                                      const Tensor& save_invstd, Tensor& grad_input, Tensor& grad_gamma,
                                      Tensor& grad_beta, Tensor& masked_grad, bool accumulate_parameter_grads) {
  const char* kernel = "batch_norm_backward";
  OPSNN_CHECK_AS(ShapeError, input.dim() >= 2, "CUDA ", kernel, ": input must be [N, C, ...], got ", input.str());
  for (const Tensor* t : std::initializer_list<const Tensor*>{&grad_out, &input, &grad_input})
    require_dense_as(*t, input, input.device(), kernel);
  check_same_shape(input, grad_out, "CUDA batch_norm_backward");
  check_same_shape(input, grad_input, "CUDA batch_norm_backward");
  check_relu_mask(grad_out, relu_output, beta, masked_grad, "CUDA batch_norm_backward");
  if (relu_output.defined()) require_dense_as(relu_output, input, input.device(), kernel);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &save_mean, &save_invstd})
    check_channel_vector(*t, input, kernel);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&beta, &grad_gamma, &grad_beta})
    if (t->defined()) check_channel_vector(*t, input, kernel);
  cuda::DeviceGuard guard(input.device().index);
  const cuda::ChannelLayout layout = channel_layout(input);
  const Storage workspace(cuda::batch_norm_workspace_bytes(layout), input.device());
  dispatch_floating(input.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_batch_norm_backward(
        grad_out.data<T>(), relu_output.defined() ? relu_output.data<T>() : nullptr, input.data<T>(),
        gamma.data<float>(), beta.defined() ? beta.data<float>() : nullptr, save_mean.data<float>(),
        save_invstd.data<float>(), grad_input.data<T>(), grad_gamma.defined() ? grad_gamma.data<float>() : nullptr,
        grad_beta.defined() ? grad_beta.data<float>() : nullptr,
        masked_grad.defined() ? masked_grad.data<T>() : nullptr, accumulate_parameter_grads, layout, workspace.data());
  });
  check_launch();
}

// ---- pooling ----

void CudaBackend::max_pool2d_forward(const Tensor& input, Tensor& out, Tensor& indices,
                                     const Pool2dGeometry& geometry) {
  const char* kernel = "max_pool2d_forward";
  check_pool_pair(input, out, kernel);
  require_dense_as(input, input, input.device(), kernel);
  require_dense_as(out, input, input.device(), kernel);
  check_index_tensor(indices, DType::i32, input.device(), kernel);
  check_same_shape(out, indices, "CUDA max_pool2d_forward");
  cuda::DeviceGuard guard(input.device().index);
  dispatch_floating(input.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_max_pool_forward(input.data<T>(), out.data<T>(), indices.data<int32_t>(),
                                  pool_layout(input.shape(), out.shape(), geometry));
  });
  check_launch();
}

void CudaBackend::max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_input,
                                      const Pool2dGeometry& geometry) {
  const char* kernel = "max_pool2d_backward";
  check_pool_pair(grad_input, grad_out, kernel);
  require_dense_as(grad_out, grad_input, grad_input.device(), kernel);
  require_dense_as(grad_input, grad_input, grad_input.device(), kernel);
  check_index_tensor(indices, DType::i32, grad_input.device(), kernel);
  check_same_shape(grad_out, indices, "CUDA max_pool2d_backward");
  cuda::DeviceGuard guard(grad_input.device().index);
  dispatch_floating(grad_out.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_max_pool_backward(grad_out.data<T>(), indices.data<int32_t>(), grad_input.data<T>(),
                                   pool_layout(grad_input.shape(), grad_out.shape(), geometry));
  });
  check_launch();
}

// ---- training batch_norm_relu + max pooling, fused ----

bool CudaBackend::fuses_batch_norm_relu_max_pool2d(const Tensor& input, const Pool2dGeometry& geometry) const {
  if (input.dim() != 4 || !is_floating(input.dtype()) || input.dtype() == DType::f64) return false;
  const Shape& in = input.shape();
  const int64_t out_h = (in[2] + 2 * geometry.pad_h - geometry.kernel_h) / geometry.stride_h + 1;
  const int64_t out_w = (in[3] + 2 * geometry.pad_w - geometry.kernel_w) / geometry.stride_w + 1;
  return out_h > 0 && out_w > 0 &&
         cuda::batch_norm_relu_max_pool_fits(pool_layout(in, {in[0], in[1], out_h, out_w}, geometry));
}

void CudaBackend::batch_norm_relu_max_pool2d_forward_train(const Tensor& input, const Tensor& gamma, const Tensor& beta,
                                                           Tensor& running_mean, Tensor& running_var, double momentum,
                                                           double eps, const Pool2dGeometry& geometry, Tensor& out,
                                                           Tensor& offsets, Tensor& save_mean, Tensor& save_invstd) {
  const char* kernel = "batch_norm_relu_max_pool2d_forward_train";
  OPSNN_CHECK(fuses_batch_norm_relu_max_pool2d(input, geometry), "CUDA ", kernel, ": not fused for ", input.str());
  check_pool_pair(input, out, kernel);
  require_dense_as(input, input, input.device(), kernel);
  require_dense_as(out, input, input.device(), kernel);
  check_index_tensor(offsets, DType::u8, input.device(), kernel);
  check_same_shape(out, offsets, "CUDA batch_norm_relu_max_pool2d_forward_train");
  for (const Tensor* t :
       std::initializer_list<const Tensor*>{&gamma, &beta, &running_mean, &running_var, &save_mean, &save_invstd})
    check_channel_vector(*t, input, kernel);
  cuda::DeviceGuard guard(input.device().index);
  const cuda::ChannelLayout layout = channel_layout(input);
  const Storage workspace(cuda::batch_norm_relu_max_pool_workspace_bytes(layout), input.device());
  dispatch_floating(input.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_batch_norm_relu_max_pool_forward_train(
        input.data<T>(), gamma.data<float>(), beta.data<float>(), running_mean.data<float>(), running_var.data<float>(),
        momentum, eps, out.data<T>(), offsets.data<uint8_t>(), save_mean.data<float>(), save_invstd.data<float>(),
        layout, pool_layout(input.shape(), out.shape(), geometry), workspace.data());
  });
  check_launch();
}

void CudaBackend::batch_norm_relu_max_pool2d_backward(const Tensor& grad_out, const Tensor& offsets,
                                                      const Tensor& input, const Tensor& gamma, const Tensor& beta,
                                                      const Tensor& save_mean, const Tensor& save_invstd,
                                                      const Pool2dGeometry& geometry, Tensor& grad_input,
                                                      Tensor& grad_gamma, Tensor& grad_beta,
                                                      bool accumulate_parameter_grads) {
  const char* kernel = "batch_norm_relu_max_pool2d_backward";
  OPSNN_CHECK(fuses_batch_norm_relu_max_pool2d(input, geometry), "CUDA ", kernel, ": not fused for ", input.str());
  check_pool_pair(input, grad_out, kernel);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&input, &grad_out, &grad_input})
    require_dense_as(*t, input, input.device(), kernel);
  check_same_shape(input, grad_input, "CUDA batch_norm_relu_max_pool2d_backward");
  check_index_tensor(offsets, DType::u8, input.device(), kernel);
  check_same_shape(grad_out, offsets, "CUDA batch_norm_relu_max_pool2d_backward");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &beta, &save_mean, &save_invstd})
    check_channel_vector(*t, input, kernel);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&grad_gamma, &grad_beta})
    if (t->defined()) check_channel_vector(*t, input, kernel);
  cuda::DeviceGuard guard(input.device().index);
  const cuda::ChannelLayout layout = channel_layout(input);
  const Storage workspace(cuda::batch_norm_relu_max_pool_workspace_bytes(layout), input.device());
  dispatch_floating(input.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_batch_norm_relu_max_pool_backward(
        grad_out.data<T>(), offsets.data<uint8_t>(), input.data<T>(), gamma.data<float>(), beta.data<float>(),
        save_mean.data<float>(), save_invstd.data<float>(), grad_input.data<T>(),
        grad_gamma.defined() ? grad_gamma.data<float>() : nullptr,
        grad_beta.defined() ? grad_beta.data<float>() : nullptr, accumulate_parameter_grads, layout,
        pool_layout(input.shape(), grad_out.shape(), geometry), workspace.data());
  });
  check_launch();
}

void CudaBackend::avg_pool2d_forward(const Tensor& input, Tensor& out, const Pool2dGeometry& geometry) {
  const char* kernel = "avg_pool2d_forward";
  check_pool_pair(input, out, kernel);
  require_dense_as(input, input, input.device(), kernel);
  require_dense_as(out, input, input.device(), kernel);
  cuda::DeviceGuard guard(input.device().index);
  dispatch_floating(input.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_avg_pool_forward(input.data<T>(), out.data<T>(), pool_layout(input.shape(), out.shape(), geometry));
  });
  check_launch();
}

void CudaBackend::avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_input, const Pool2dGeometry& geometry) {
  const char* kernel = "avg_pool2d_backward";
  check_pool_pair(grad_input, grad_out, kernel);
  require_dense_as(grad_out, grad_input, grad_input.device(), kernel);
  require_dense_as(grad_input, grad_input, grad_input.device(), kernel);
  cuda::DeviceGuard guard(grad_input.device().index);
  dispatch_floating(grad_input.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_avg_pool_backward(grad_out.data<T>(), grad_input.data<T>(),
                                   pool_layout(grad_input.shape(), grad_out.shape(), geometry));
  });
  check_launch();
}

// ---- softmax and loss ----

void CudaBackend::log_softmax_forward(const Tensor& logits, Tensor& out) {
  check_rows(logits, out.device(), "log_softmax_forward");
  check_rows(out, out.device(), "log_softmax_forward");
  check_same_shape(logits, out, "CUDA log_softmax_forward");
  cuda::DeviceGuard guard(out.device().index);
  cuda::launch_log_softmax_forward(logits.data<float>(), out.data<float>(), logits.size(0), logits.size(1));
  check_launch();
}

void CudaBackend::log_softmax_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_logits) {
  for (const Tensor* t : std::initializer_list<const Tensor*>{&grad_out, &out, &grad_logits})
    check_rows(*t, grad_logits.device(), "log_softmax_backward");
  check_same_shape(grad_out, out, "CUDA log_softmax_backward");
  check_same_shape(grad_out, grad_logits, "CUDA log_softmax_backward");
  cuda::DeviceGuard guard(grad_logits.device().index);
  cuda::launch_log_softmax_backward(grad_out.data<float>(), out.data<float>(), grad_logits.data<float>(), out.size(0),
                                    out.size(1));
  check_launch();
}

void CudaBackend::nll_loss_forward(const Tensor& log_probs, const Tensor& target, double label_smoothing, Tensor& out) {
  const Device device = log_probs.device();
  check_rows(log_probs, device, "nll_loss_forward");
  require_dense(out, device, "nll_loss_forward");
  OPSNN_CHECK_AS(ShapeError, out.numel() == 1, "CUDA nll_loss_forward: output must hold one element, got ",
                 shape_str(out.shape()));
  const int64_t rows = log_probs.size(0), classes = log_probs.size(1);
  cuda::DeviceGuard guard(device.index);
  check_targets(target, rows, classes, device, "nll_loss_forward");
  cuda::launch_nll_loss_forward(log_probs.data<float>(), target.data<int64_t>(), label_smoothing, out.data<float>(),
                                rows, classes);
  check_launch();
}

// The loss gradient is read on the device and the targets' range is not checked again (the forward did,
// on the private copy the node keeps): no host synchronisation in the middle of backward.
void CudaBackend::nll_loss_backward(const Tensor& grad_output, const Tensor& target, double label_smoothing,
                                    Tensor& grad_log_probs) {
  const Device device = grad_log_probs.device();
  check_rows(grad_log_probs, device, "nll_loss_backward");
  const int64_t rows = grad_log_probs.size(0), classes = grad_log_probs.size(1);
  require_dense(grad_output, device, "nll_loss_backward");
  OPSNN_CHECK_AS(ShapeError, grad_output.numel() == 1,
                 "CUDA nll_loss_backward: the loss gradient must hold one element, got ",
                 shape_str(grad_output.shape()));
  check_target_shape(target, rows, device, "nll_loss_backward");
  cuda::DeviceGuard guard(device.index);
  cuda::launch_nll_loss_backward(grad_output.data<float>(), label_smoothing, target.data<int64_t>(),
                                 grad_log_probs.data<float>(), rows, classes);
  check_launch();
}

// ---- embedding ----

void CudaBackend::embedding_forward(const Tensor& weight, const Tensor& indices, Tensor& out) {
  cuda::DeviceGuard guard(weight.device().index);
  check_embedding_operands(out, indices, weight, "embedding_forward");
  cuda::launch_embedding_forward(weight.data<float>(), indices.data<int64_t>(), out.data<float>(), indices.numel(),
                                 weight.size(1), weight.size(0));
  check_launch();
}

void CudaBackend::embedding_backward_dense(const Tensor& grad_out, const Tensor& indices, Tensor& grad_weight) {
  cuda::DeviceGuard guard(grad_weight.device().index);
  check_embedding_operands(grad_out, indices, grad_weight, "embedding_backward_dense");
  cuda::launch_embedding_backward(grad_out.data<float>(), indices.data<int64_t>(), grad_weight.data<float>(),
                                  indices.numel(), grad_weight.size(1), grad_weight.size(0));
  check_launch();
}

// ---- dot interaction ----

void CudaBackend::dot_interaction_forward(const Tensor& x, Tensor& out) {
  cuda::DeviceGuard guard(x.device().index);
  OPSNN_CHECK_AS(ShapeError, x.dim() == 3, "CUDA dot_interaction_forward: x must be [B, F, D], got ",
                 shape_str(x.shape()));
  const int64_t features = x.size(1);
  OPSNN_CHECK_AS(ShapeError, out.dim() == 2 && out.size(0) == x.size(0) && out.size(1) == features * (features - 1) / 2,
                 "CUDA dot_interaction_forward: out ", shape_str(out.shape()), " does not match x ",
                 shape_str(x.shape()));
  require_dense(x, x.device(), "dot_interaction_forward");
  require_dense(out, x.device(), "dot_interaction_forward");
  cuda::launch_dot_interaction_forward(x.data<float>(), out.data<float>(), x.size(0), features, x.size(2));
  check_launch();
}

void CudaBackend::dot_interaction_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_x) {
  cuda::DeviceGuard guard(x.device().index);
  OPSNN_CHECK_AS(ShapeError, x.dim() == 3 && grad_x.shape() == x.shape(), "CUDA dot_interaction_backward: x ",
                 shape_str(x.shape()), " and grad_x ", shape_str(grad_x.shape()), " must be one [B, F, D] shape");
  const int64_t features = x.size(1);
  OPSNN_CHECK_AS(
      ShapeError,
      grad_out.dim() == 2 && grad_out.size(0) == x.size(0) && grad_out.size(1) == features * (features - 1) / 2,
      "CUDA dot_interaction_backward: grad_out ", shape_str(grad_out.shape()), " does not match x ",
      shape_str(x.shape()));
  require_dense(x, x.device(), "dot_interaction_backward");
  require_dense(grad_out, x.device(), "dot_interaction_backward");
  require_dense(grad_x, x.device(), "dot_interaction_backward");
  cuda::launch_dot_interaction_backward(grad_out.data<float>(), x.data<float>(), grad_x.data<float>(), x.size(0),
                                        features, x.size(2));
  check_launch();
}

}  // namespace opsnn::ops
