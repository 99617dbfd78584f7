// CUDA conv2d (NCHW or NHWC input, OIHW weight): forward, input gradient and weight gradient, the three
// CudaBackend methods. Each checks its operands, takes its direction's choice from the algorithm cache or
// searches once (conv_search.h; conv_search.cpp tells how it decides) and runs it: cuDNN (conv_cudnn.h) or
// a lowering (conv_lowerings.h). Channels-last convolutions give cuDNN a KRSC copy of the weight and
// transpose the weight gradient back from KRSC; a bias is added to the output afterwards.
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"
#include "ops/cuda/conv_algorithms.h"
#include "ops/cuda/conv_cudnn.h"
#include "ops/cuda/conv_lowerings.h"
#include "ops/cuda/conv_search.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_context.h"
#include "ops/cuda/kernels.h"

namespace opsnn::ops {

using namespace detail;  // conv_cudnn.h, conv_search.h and conv_lowerings.h

namespace {

void check_conv_operands(const Tensor& data, const Tensor& weight, const Tensor& result, const char* kernel) {
  cuda::require_floating(result, kernel);
  for (const Tensor* t : {&data, &weight, &result}) {
    OPSNN_CHECK_AS(TypeError, t->dtype() == result.dtype(), "CUDA ", kernel, ": operands must share one dtype, got ",
                   data.str(), ", ", weight.str(), " and ", result.str());
    cuda::require_on(*t, result.device(), kernel);
    OPSNN_CHECK(t->is_contiguous(), "CUDA ", kernel, ": operands must be contiguous");
    OPSNN_CHECK_AS(ShapeError, t->dim() == 4, "CUDA ", kernel, ": operands must be 4-D, got ", t->str());
  }
}

}  // namespace

void CudaBackend::conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, Tensor& out,
                                 const Conv2dGeometry& geometry) {
  check_conv_operands(input, weight, out, "conv2d_forward");
  const Device device = out.device();
  const DType dtype = out.dtype();
  cuda::DeviceGuard guard(device.index);
  const cuda::LibraryHandles& handles = cuda::handles_for(device.index);
  const ConvLowering lowering = applicable_lowering(input.shape(), weight.shape(), geometry, dtype);
  const Shape sampled_shape = subsampled_shape(input.shape(), out.shape());
  const Tensor filter =
      geometry.channels_last ? krsc_copy(weight) : weight;  // what cuDNN's filter descriptor describes
  const ConvAlgorithmChoice chosen = cached_algorithm(
      make_key(ConvDirection::forward, device.index, input.shape(), weight.shape(), geometry, dtype), [&] {
        return search(
            lowering,
            [&] {
              return find_forward(handles.cudnn,
                                  ConvDescriptors(input.shape(), weight.shape(), out.shape(), geometry, dtype),
                                  input.data_ptr(), filter.data_ptr(), out.data_ptr(), device);
            },
            [&] {
              ConvAlgorithmChoice lowered;
              if (lowering == ConvLowering::subsampled) {
                Tensor sampled = Tensor::empty(sampled_shape, dtype, device);
                const float copy_ms = measured_ms([&] { subsample(input, sampled, geometry); });
                lowered = find_forward(handles.cudnn,
                                       ConvDescriptors(sampled_shape, weight.shape(), out.shape(), kUnitStride, dtype),
                                       sampled.data_ptr(), weight.data_ptr(), out.data_ptr(), device);
                lowered.lowered_ms = lowered.cudnn_ms + copy_ms;
              } else {
                const GemmPlan plan = gemm_plan(input.shape(), weight.shape(), out.shape(), geometry);
                lowered.lowered_ms = measured_ms([&] { gemm_forward(handles.cublas, input, weight, out, plan); });
              }
              return lowered;
            });
      });
  const CudnnRun run{handles.cudnn, chosen, device};
  switch (chosen.lowering) {
    case ConvLowering::gemm:
      gemm_forward(handles.cublas, input, weight, out, gemm_plan(input.shape(), weight.shape(), out.shape(), geometry));
      break;
    case ConvLowering::subsampled: {
      Tensor sampled = Tensor::empty(sampled_shape, dtype, device);
      subsample(input, sampled, geometry);
      cudnn_forward(run, ConvDescriptors(sampled_shape, weight.shape(), out.shape(), kUnitStride, dtype),
                    sampled.data_ptr(), weight.data_ptr(), out.data_ptr());
      break;
    }
    case ConvLowering::cudnn:
      cudnn_forward(run, ConvDescriptors(input.shape(), weight.shape(), out.shape(), geometry, dtype), input.data_ptr(),
                    filter.data_ptr(), out.data_ptr());
      break;
  }
  if (bias.defined()) {
    OPSNN_CHECK_AS(TypeError, bias.dtype() == out.dtype(), "CUDA conv2d_forward: bias ", bias.str(),
                   " must have the output's dtype ", dtype_name(out.dtype()));
    cuda::require_on(bias, device, "conv2d_forward");
    const int64_t filters = out.size(geometry.channels_last ? 3 : 1);
    OPSNN_CHECK_AS(ShapeError, bias.numel() == filters, "CUDA conv2d_forward: bias ", bias.str(), " does not match ",
                   filters, " output channels");
    // out += bias over out viewed as [outer, C, inner] - NCHW: [N, C, H*W]; NHWC: [N*H*W, C, 1] - with
    // the bias broadcast (stride 0) along outer and inner; in place is safe as every element reads only itself.
    const int64_t inner = geometry.channels_last ? 1 : out.size(2) * out.size(3);
    const int64_t outer = filters * inner == 0 ? 0 : out.numel() / (filters * inner);
    cuda::BinaryLayout layout;
    layout.dim = 3;
    const int64_t extents[3] = {outer, filters, inner}, out_strides[3] = {filters * inner, inner, 1},
                  bias_strides[3] = {0, 1, 0};
    for (int d = 0; d < 3; ++d) {
      layout.extents[d] = extents[d];
      layout.a_strides[d] = out_strides[d];
      layout.b_strides[d] = bias_strides[d];
    }
    cuda::dispatch_floating(out.dtype(), "conv2d_forward", [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_binary(cuda::BinaryKind::add, out.data<T>(), bias.data<T>(), out.data<T>(), layout, out.numel());
    });
    OPSNN_CUDA_CHECK(cudaGetLastError());
  }
}

void CudaBackend::conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, Tensor& grad_input,
                                        const Conv2dGeometry& geometry, bool accumulate) {
  check_conv_operands(grad_out, weight, grad_input, "conv2d_backward_input");
  const Device device = grad_input.device();
  const DType dtype = grad_input.dtype();
  cuda::DeviceGuard guard(device.index);
  const cuda::LibraryHandles& handles = cuda::handles_for(device.index);
  const ConvLowering lowering = applicable_lowering(grad_input.shape(), weight.shape(), geometry, dtype);
  const Shape sampled_shape = subsampled_shape(grad_input.shape(), grad_out.shape());
  const Tensor filter =
      geometry.channels_last ? krsc_copy(weight) : weight;  // what cuDNN's filter descriptor describes
  const ConvAlgorithmChoice chosen = cached_algorithm(
      make_key(ConvDirection::backward_input, device.index, grad_input.shape(), weight.shape(), geometry, dtype), [&] {
        // The search writes its trials somewhere: not into a gradient it must add to.
        Tensor target = accumulate ? Tensor::empty(grad_input.shape(), dtype, device) : grad_input;
        return search(
            lowering,
            [&] {
              return find_backward_input(
                  handles.cudnn, ConvDescriptors(target.shape(), weight.shape(), grad_out.shape(), geometry, dtype),
                  filter.data_ptr(), grad_out.data_ptr(), target.data_ptr(), device);
            },
            [&] {
              ConvAlgorithmChoice lowered;
              if (lowering == ConvLowering::subsampled) {
                Tensor sampled = Tensor::empty(sampled_shape, dtype, device);
                lowered = find_backward_input(
                    handles.cudnn, ConvDescriptors(sampled_shape, weight.shape(), grad_out.shape(), kUnitStride, dtype),
                    weight.data_ptr(), grad_out.data_ptr(), sampled.data_ptr(), device);
                lowered.lowered_ms = lowered.cudnn_ms + measured_ms([&] { unsubsample(sampled, target, geometry); });
              } else {
                const GemmPlan plan = gemm_plan(target.shape(), weight.shape(), grad_out.shape(), geometry);
                lowered.lowered_ms =
                    measured_ms([&] { gemm_backward_input(handles.cublas, grad_out, weight, target, plan); });
              }
              return lowered;
            });
      });
  const CudnnRun run{handles.cudnn, chosen, device};
  const GemmPlan plan = chosen.lowering == ConvLowering::gemm
                            ? gemm_plan(grad_input.shape(), weight.shape(), grad_out.shape(), geometry)
                            : GemmPlan{};
  // cuDNN (beta 1) and the one-GEMM plans add in place; the others write a fresh gradient that is then added.
  if (accumulate && (chosen.lowering == ConvLowering::subsampled ||
                     (chosen.lowering == ConvLowering::gemm && !gemm_backward_input_accumulates(plan)))) {
    Tensor fresh = Tensor::empty(grad_input.shape(), dtype, device);
    conv2d_backward_input(grad_out, weight, fresh, geometry, false);
    grad_input.add_(fresh);
    return;
  }
  switch (chosen.lowering) {
    case ConvLowering::gemm:
      gemm_backward_input(handles.cublas, grad_out, weight, grad_input, plan, accumulate);
      break;
    case ConvLowering::subsampled: {
      Tensor sampled = Tensor::empty(sampled_shape, dtype, device);
      cudnn_backward_input(run, ConvDescriptors(sampled_shape, weight.shape(), grad_out.shape(), kUnitStride, dtype),
                           weight.data_ptr(), grad_out.data_ptr(), sampled.data_ptr());
      unsubsample(sampled, grad_input, geometry);
      break;
    }
    case ConvLowering::cudnn:
      cudnn_backward_input(run, ConvDescriptors(grad_input.shape(), weight.shape(), grad_out.shape(), geometry, dtype),
                           filter.data_ptr(), grad_out.data_ptr(), grad_input.data_ptr(), accumulate);
      break;
  }
}

void CudaBackend::conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, Tensor& grad_weight,
                                         const Conv2dGeometry& geometry) {
  check_conv_operands(grad_out, input, grad_weight, "conv2d_backward_weight");
  const Device device = grad_weight.device();
  const DType dtype = grad_weight.dtype();
  cuda::DeviceGuard guard(device.index);
  const cuda::LibraryHandles& handles = cuda::handles_for(device.index);
  const ConvLowering lowering = applicable_lowering(input.shape(), grad_weight.shape(), geometry, dtype);
  const Shape sampled_shape = subsampled_shape(input.shape(), grad_out.shape());
  // cuDNN writes the gradient in its filter descriptor's layout: KRSC for channels_last, in a buffer made
  // only when cuDNN runs (the lowerings write grad_weight itself) and copied back below.
  Tensor krsc_grad;
  auto filter_grad = [&]() -> void* {
    if (!geometry.channels_last) return grad_weight.data_ptr();
    const Shape& k = grad_weight.shape();
    if (!krsc_grad.defined()) krsc_grad = Tensor::empty({k[0], k[2], k[3], k[1]}, dtype, device);
    return krsc_grad.data_ptr();
  };
  const ConvAlgorithmChoice chosen = cached_algorithm(
      make_key(ConvDirection::backward_weight, device.index, input.shape(), grad_weight.shape(), geometry, dtype), [&] {
        return search(
            lowering,
            [&] {
              return find_backward_weight(
                  handles.cudnn, ConvDescriptors(input.shape(), grad_weight.shape(), grad_out.shape(), geometry, dtype),
                  input.data_ptr(), grad_out.data_ptr(), filter_grad(), device);
            },
            [&] {
              ConvAlgorithmChoice lowered;
              if (lowering == ConvLowering::subsampled) {
                Tensor sampled = Tensor::empty(sampled_shape, dtype, device);
                const float copy_ms = measured_ms([&] { subsample(input, sampled, geometry); });
                lowered = find_backward_weight(
                    handles.cudnn,
                    ConvDescriptors(sampled_shape, grad_weight.shape(), grad_out.shape(), kUnitStride, dtype),
                    sampled.data_ptr(), grad_out.data_ptr(), grad_weight.data_ptr(), device);
                lowered.lowered_ms = lowered.cudnn_ms + copy_ms;
              } else {
                const GemmPlan plan = gemm_plan(input.shape(), grad_weight.shape(), grad_out.shape(), geometry);
                lowered.lowered_ms =
                    measured_ms([&] { gemm_backward_weight(handles.cublas, grad_out, input, grad_weight, plan); });
              }
              return lowered;
            });
      });
  const CudnnRun run{handles.cudnn, chosen, device};
  switch (chosen.lowering) {
    case ConvLowering::gemm:
      gemm_backward_weight(handles.cublas, grad_out, input, grad_weight,
                           gemm_plan(input.shape(), grad_weight.shape(), grad_out.shape(), geometry));
      break;
    case ConvLowering::subsampled: {
      Tensor sampled = Tensor::empty(sampled_shape, dtype, device);
      subsample(input, sampled, geometry);
      cudnn_backward_weight(run,
                            ConvDescriptors(sampled_shape, grad_weight.shape(), grad_out.shape(), kUnitStride, dtype),
                            sampled.data_ptr(), grad_out.data_ptr(), grad_weight.data_ptr());
      break;
    }
    case ConvLowering::cudnn:
      cudnn_backward_weight(run, ConvDescriptors(input.shape(), grad_weight.shape(), grad_out.shape(), geometry, dtype),
                            input.data_ptr(), grad_out.data_ptr(), filter_grad());
      if (geometry.channels_last) copy_from_krsc(krsc_grad, grad_weight);
      break;
  }
}

}  // namespace opsnn::ops
