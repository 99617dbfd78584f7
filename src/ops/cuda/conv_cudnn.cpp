// conv_cudnn.h's cuDNN helpers of the CUDA conv2d: data types, math and formats, the KRSC weight copy,
// workspace, and the three cuDNN convolution calls with a chosen algorithm.
#include "ops/cuda/conv_cudnn.h"

#include <memory>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/device_context.h"
#include "ops/cuda/kernels.h"

namespace opsnn::ops::detail {

cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

cudnnMathType_t allowed_math(DType dtype) {
  if (dtype != DType::f32) return CUDNN_TENSOR_OP_MATH;
  return fp32_math() == Fp32Math::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

int64_t tensor_core_granule(DType dtype) {
  if (dtype != DType::f32) return 8;
  return fp32_math() == Fp32Math::tf32 ? 4 : 0;
}

cudnnTensorFormat_t cudnn_format(bool channels_last) { return channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW; }

Shape nchw_sizes(const Shape& shape, bool channels_last) {
  return channels_last ? Shape{shape[0], shape[3], shape[1], shape[2]} : shape;
}

// Both directions are K transposes of small matrices ([C, R*S] <-> [R*S, C]), one block each; the generic
// strided copy read them a few bytes at a time (a ResNet-50 step spent about 1 ms in these copies).
Tensor krsc_copy(const Tensor& weight) {
  const Shape& k = weight.shape();
  if (k[2] * k[3] == 1) return weight.contiguous();  // 1x1: KRSC is KCRS
  if (weight.is_contiguous()) {
    Tensor krsc = Tensor::empty({k[0], k[2], k[3], k[1]}, weight.dtype(), weight.device());
    if (cuda::launch_batched_transpose(weight.data_ptr(), krsc.data_ptr(), k[0], k[1], k[2] * k[3],
                                       dtype_size(weight.dtype()))) {
      OPSNN_CUDA_CHECK(cudaGetLastError());
      return krsc;
    }
  }
  return weight.permute({0, 2, 3, 1}).contiguous();
}

void copy_from_krsc(const Tensor& krsc, Tensor& grad_weight) {
  const Shape& k = grad_weight.shape();
  if (grad_weight.is_contiguous() && krsc.is_contiguous() &&
      cuda::launch_batched_transpose(krsc.data_ptr(), grad_weight.data_ptr(), k[0], k[2] * k[3], k[1],
                                     dtype_size(grad_weight.dtype()))) {
    OPSNN_CUDA_CHECK(cudaGetLastError());
    return;
  }
  grad_weight.copy_(krsc.permute({0, 3, 1, 2}));
}

std::shared_ptr<Storage> workspace(size_t bytes, Device device) {
  return bytes == 0 ? nullptr : std::make_shared<Storage>(bytes, device);
}
void* pointer(const std::shared_ptr<Storage>& storage) { return storage ? storage->data() : nullptr; }

void cudnn_forward(const CudnnRun& run, const ConvDescriptors& d, const void* x, const void* w, void* y) {
  d.convolution.set_math(static_cast<cudnnMathType_t>(run.choice.math));
  auto space = workspace(run.choice.workspace_bytes, run.device);
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUDNN_CHECK(cudnnConvolutionForward(run.handle, &one, d.input.get(), x, d.filter.get(), w, d.convolution.get(),
                                            static_cast<cudnnConvolutionFwdAlgo_t>(run.choice.algorithm),
                                            pointer(space), run.choice.workspace_bytes, &zero, d.output.get(), y));
}

void cudnn_backward_input(const CudnnRun& run, const ConvDescriptors& d, const void* w, const void* dy, void* dx,
                          bool accumulate) {
  d.convolution.set_math(static_cast<cudnnMathType_t>(run.choice.math));
  auto space = workspace(run.choice.workspace_bytes, run.device);
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  OPSNN_CUDNN_CHECK(cudnnConvolutionBackwardData(run.handle, &one, d.filter.get(), w, d.output.get(), dy,
                                                 d.convolution.get(),
                                                 static_cast<cudnnConvolutionBwdDataAlgo_t>(run.choice.algorithm),
                                                 pointer(space), run.choice.workspace_bytes, &beta, d.input.get(), dx));
}

void cudnn_backward_weight(const CudnnRun& run, const ConvDescriptors& d, const void* x, const void* dy, void* dw) {
  d.convolution.set_math(static_cast<cudnnMathType_t>(run.choice.math));
  auto space = workspace(run.choice.workspace_bytes, run.device);
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUDNN_CHECK(
      cudnnConvolutionBackwardFilter(run.handle, &one, d.input.get(), x, d.output.get(), dy, d.convolution.get(),
                                     static_cast<cudnnConvolutionBwdFilterAlgo_t>(run.choice.algorithm), pointer(space),
                                     run.choice.workspace_bytes, &zero, d.filter.get(), dw));
}

}  // namespace opsnn::ops::detail
