// The convolution as cuDNN sees it, for the CUDA conv2d (conv.cpp) and its algorithm search
// (conv_search.h): cuDNN's data type and the math a dtype may use, RAII tensor, filter and convolution
// descriptors (NCHW, or NHWC data with a KRSC filter for channels-last convolutions), the KRSC weight
// copy, workspace from the stream-ordered pool, and the three cuDNN calls run with a chosen algorithm.
// Internal to src/ops/cuda/; defined in conv_cudnn.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/conv_algorithms.h"
#include "ops/cuda/device_context.h"
#include "opsnn/core/storage.h"
#include "opsnn/core/tensor.h"

namespace opsnn::ops::detail {

cudnnDataType_t cudnn_type(DType dtype);

// The math a convolution of `dtype` may use: FMA only for strict f32, tensor cores otherwise.
cudnnMathType_t allowed_math(DType dtype);

// The input-channel multiple the tensor-core kernels of `dtype` need under the current math; 0 where
// only FMA kernels may run (strict f32), which padding could not help.
int64_t tensor_core_granule(DType dtype);

cudnnTensorFormat_t cudnn_format(bool channels_last);

// The [N, C, H, W] sizes of an activation shape ([N, H, W, C] when channels_last), the order cuDNN's 4-D
// descriptors take whatever the memory format.
Shape nchw_sizes(const Shape& shape, bool channels_last);

class TensorDescriptor {
 public:
  // shape: the tensor's own (NCHW, or NHWC with channels_last).
  TensorDescriptor(const Shape& shape, DType dtype, bool channels_last) {
    const Shape sizes = nchw_sizes(shape, channels_last);
    OPSNN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&handle_));
    OPSNN_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(handle_, cudnn_format(channels_last), cudnn_type(dtype),
                                   cuda::checked_int(sizes[0], "conv2d"), cuda::checked_int(sizes[1], "conv2d"),
                                   cuda::checked_int(sizes[2], "conv2d"), cuda::checked_int(sizes[3], "conv2d")));
  }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(handle_); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return handle_; }

 private:
  cudnnTensorDescriptor_t handle_ = nullptr;
};

class FilterDescriptor {
 public:
  // shape: [K, C, R, S]; the data is laid out so (KCRS), or KRSC with channels_last.
  FilterDescriptor(const Shape& shape, DType dtype, bool channels_last) {
    OPSNN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&handle_));
    OPSNN_CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(handle_, cudnn_type(dtype), cudnn_format(channels_last),
                                   cuda::checked_int(shape[0], "conv2d"), cuda::checked_int(shape[1], "conv2d"),
                                   cuda::checked_int(shape[2], "conv2d"), cuda::checked_int(shape[3], "conv2d")));
  }
  ~FilterDescriptor() { cudnnDestroyFilterDescriptor(handle_); }
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  cudnnFilterDescriptor_t get() const { return handle_; }

 private:
  cudnnFilterDescriptor_t handle_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  // Accumulation is f32 for every data type; `math` is what the algorithm search may use.
  ConvolutionDescriptor(const Conv2dGeometry& g, cudnnMathType_t math) {
    OPSNN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&handle_));
    OPSNN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        handle_, cuda::checked_int(g.pad_h, "conv2d"), cuda::checked_int(g.pad_w, "conv2d"),
        cuda::checked_int(g.stride_h, "conv2d"), cuda::checked_int(g.stride_w, "conv2d"), 1, 1, CUDNN_CROSS_CORRELATION,
        CUDNN_DATA_FLOAT));
    set_math(math);
  }
  ~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(handle_); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  void set_math(cudnnMathType_t math) const { OPSNN_CUDNN_CHECK(cudnnSetConvolutionMathType(handle_, math)); }
  cudnnConvolutionDescriptor_t get() const { return handle_; }

 private:
  cudnnConvolutionDescriptor_t handle_ = nullptr;
};

// Everything cuDNN needs to describe one convolution (input x, filter w, output y). The shapes are the
// tensors' own; with g.channels_last the data is NHWC and the filter KRSC (its shape still [K, C, R, S]).
struct ConvDescriptors {
  TensorDescriptor input;
  FilterDescriptor filter;
  TensorDescriptor output;
  ConvolutionDescriptor convolution;
  ConvDescriptors(const Shape& input_shape, const Shape& weight_shape, const Shape& output_shape,
                  const Conv2dGeometry& g, DType dtype)
      : input(input_shape, dtype, g.channels_last),
        filter(weight_shape, dtype, g.channels_last),
        output(output_shape, dtype, g.channels_last),
        convolution(g, allowed_math(dtype)) {}
};

// ---- the KRSC weight of channels-last convolutions ----

// The [K, C, R, S] weight's values in KRSC order ([K, R, S, C] contiguous), for an NHWC filter descriptor.
Tensor krsc_copy(const Tensor& weight);

// grad_weight [K, C, R, S] from its KRSC twin.
void copy_from_krsc(const Tensor& krsc, Tensor& grad_weight);

// ---- workspace ----

// `bytes` of device memory for a cuDNN call (none for 0), and its address (null for none).
std::shared_ptr<Storage> workspace(size_t bytes, Device device);
void* pointer(const std::shared_ptr<Storage>& storage);

// ---- running one cuDNN call with a chosen algorithm ----

struct CudnnRun {
  cudnnHandle_t handle;
  const ConvAlgorithmChoice& choice;
  Device device;
};

// y = conv(x, w), dx = its input gradient from w and dy (added to dx's values with accumulate: cuDNN's
// beta 1), dw = its weight gradient from x and dy, each with run.choice's algorithm, math type and workspace.
void cudnn_forward(const CudnnRun& run, const ConvDescriptors& d, const void* x, const void* w, void* y);
void cudnn_backward_input(const CudnnRun& run, const ConvDescriptors& d, const void* w, const void* dy, void* dx,
                          bool accumulate = false);
void cudnn_backward_weight(const CudnnRun& run, const ConvDescriptors& d, const void* x, const void* dy, void* dw);

}  // namespace opsnn::ops::detail
