// CUDA conv2d (NCHW input, OIHW weight) through cuDNN: forward, input gradient and weight gradient.
// The fastest algorithm for each shape is found once with cudnnFind*Ex (on our own buffers, workspace
// from the stream-ordered pool) and cached per shape, dtype, math and padding setting. f32 math is
// restricted to FMA kernels so results match the CPU twin (src/ops/cpu/conv.cpp) to rounding, unless the
// f32 math setting is tf32 (TF32 tensor cores allowed). f16 and bf16 data compute in f32 (cuDNN's
// pseudo-half configurations) on tensor cores.
//
// Tensor-core kernels want the input channels to be a multiple of 4 (tf32) or 8 (f16/bf16); with fewer
// (the RGB stem) cuDNN falls back to slow legacy kernels. For such shapes the search also times the
// convolution on channel-padded copies (input [N, C', H, W] and weight [K, C', R, S], the extra
// channels zero, so they add exact zeros) and keeps that variant when cudnnFind's time plus the measured
// pad/crop copies beats the plain one. The input gradient of the padded channels and their weight
// gradient are computed and dropped.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <map>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"
#include "ops/cuda/conv_algorithms.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_context.h"
#include "ops/cuda/kernels.h"

namespace opsnn::ops {
namespace {

// Workspace the algorithm search may offer cuDNN: at most this, and at most a quarter of free memory.
constexpr size_t kMaxSearchWorkspaceBytes = size_t{512} << 20;

std::atomic<ConvChannelPadding> channel_padding_setting{ConvChannelPadding::measured};

cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

// The math a convolution of `dtype` may use: FMA only for strict f32, tensor cores otherwise.
cudnnMathType_t allowed_math(DType dtype) {
  if (dtype != DType::f32) return CUDNN_TENSOR_OP_MATH;
  return fp32_math() == Fp32Math::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

// The input-channel multiple the tensor-core kernels of `dtype` need under the current math; 0 where
// only FMA kernels may run (strict f32), which padding could not help.
int64_t tensor_core_granule(DType dtype) {
  if (dtype != DType::f32) return 8;
  return fp32_math() == Fp32Math::tf32 ? 4 : 0;
}

class TensorDescriptor {
 public:
  TensorDescriptor(const Shape& shape, DType dtype) {
    OPSNN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&handle_));
    OPSNN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(handle_, CUDNN_TENSOR_NCHW, cudnn_type(dtype),
                                                 cuda::checked_int(shape[0], "conv2d"),
                                                 cuda::checked_int(shape[1], "conv2d"),
                                                 cuda::checked_int(shape[2], "conv2d"),
                                                 cuda::checked_int(shape[3], "conv2d")));
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
  FilterDescriptor(const Shape& shape, DType dtype) {
    OPSNN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&handle_));
    OPSNN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(handle_, cudnn_type(dtype), CUDNN_TENSOR_NCHW,
                                                 cuda::checked_int(shape[0], "conv2d"),
                                                 cuda::checked_int(shape[1], "conv2d"),
                                                 cuda::checked_int(shape[2], "conv2d"),
                                                 cuda::checked_int(shape[3], "conv2d")));
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
        cuda::checked_int(g.stride_h, "conv2d"), cuda::checked_int(g.stride_w, "conv2d"), 1, 1,
        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    set_math(math);
  }
  ~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(handle_); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  void set_math(cudnnMathType_t math) { OPSNN_CUDNN_CHECK(cudnnSetConvolutionMathType(handle_, math)); }
  cudnnConvolutionDescriptor_t get() const { return handle_; }

 private:
  cudnnConvolutionDescriptor_t handle_ = nullptr;
};

// Everything cuDNN needs to describe one convolution (input x, filter w, output y).
struct ConvDescriptors {
  TensorDescriptor input;
  FilterDescriptor filter;
  TensorDescriptor output;
  ConvolutionDescriptor convolution;
  ConvDescriptors(const Shape& input_shape, const Shape& weight_shape, const Shape& output_shape,
                  const Conv2dGeometry& g, DType dtype)
      : input(input_shape, dtype), filter(weight_shape, dtype), output(output_shape, dtype),
        convolution(g, allowed_math(dtype)) {}
};


// The input and weight shapes the padded variant of a convolution would use (channel count C' in
// dimension 1 of both), or 0 when none is tried: the channels are already a multiple of the granule,
// no tensor cores may run, padding is set to never, or a padded row is wider than a 2-D copy allows.
int64_t padded_channel_count(const Shape& input, const Shape& weight, DType dtype, int device) {
  const int64_t granule = tensor_core_granule(dtype);
  if (granule == 0 || input[1] % granule == 0 || conv_channel_padding() == ConvChannelPadding::never) return 0;
  const int64_t padded = (input[1] + granule - 1) / granule * granule;
  int max_pitch_bytes = 0;
  OPSNN_CUDA_CHECK(cudaDeviceGetAttribute(&max_pitch_bytes, cudaDevAttrMaxPitch, device));
  const int64_t widest_row_bytes =
      padded * std::max(input[2] * input[3], weight[2] * weight[3]) * static_cast<int64_t>(dtype_size(dtype));
  return widest_row_bytes <= max_pitch_bytes ? padded : 0;
}

// An uninitialized [rows, channels, ...] tensor shaped like t otherwise.
Tensor with_channels(const Tensor& t, int64_t channels) {
  Shape shape = t.shape();
  shape[1] = channels;
  return Tensor::empty(shape, t.dtype(), t.device());
}

// source [rows, C, ...] into padded [rows, C', ...] with channels C..C'-1 zero (all-zero bytes are 0.0
// in every float dtype), on the legacy default stream the cuDNN handle runs on.
void pad_channels(const Tensor& source, Tensor& padded) {
  const auto rows = static_cast<size_t>(source.size(0));
  const size_t source_row = source.nbytes() / rows, padded_row = padded.nbytes() / rows;
  auto* base = static_cast<char*>(padded.data_ptr());
  OPSNN_CUDA_CHECK(cudaMemset2DAsync(base + source_row, padded_row, 0, padded_row - source_row, rows, nullptr));
  OPSNN_CUDA_CHECK(cudaMemcpy2DAsync(base, padded_row, source.data_ptr(), source_row, source_row, rows,
                                     cudaMemcpyDeviceToDevice, nullptr));
}

// The first C channels of padded [rows, C', ...] into out [rows, C, ...].
void crop_channels(const Tensor& padded, Tensor& out) {
  const auto rows = static_cast<size_t>(out.size(0));
  const size_t out_row = out.nbytes() / rows, padded_row = padded.nbytes() / rows;
  OPSNN_CUDA_CHECK(cudaMemcpy2DAsync(out.data_ptr(), out_row, padded.data_ptr(), padded_row, out_row, rows,
                                     cudaMemcpyDeviceToDevice, nullptr));
}

class Event {
 public:
  Event() { OPSNN_CUDA_CHECK(cudaEventCreate(&handle_)); }
  ~Event() { cudaEventDestroy(handle_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return handle_; }

 private:
  cudaEvent_t handle_ = nullptr;
};

// Milliseconds of `work` on the legacy default stream, timed on its second run (the first may pay for
// lazy module loading), so it compares with cudnnFind's times.
template <typename Work> float measured_ms(Work&& work) {
  work();
  Event start, stop;
  OPSNN_CUDA_CHECK(cudaEventRecord(start.get(), nullptr));
  work();
  OPSNN_CUDA_CHECK(cudaEventRecord(stop.get(), nullptr));
  OPSNN_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float elapsed_ms = 0.0f;
  OPSNN_CUDA_CHECK(cudaEventElapsedTime(&elapsed_ms, start.get(), stop.get()));
  return elapsed_ms;
}

using ConvKey = std::array<int64_t, 15>;

// The last entry tells dtypes, math and padding settings apart: an algorithm found for one may not run
// another, and a forced padding setting must not reuse a measured decision.
ConvKey make_key(ConvDirection direction, int device, const Shape& input, const Shape& weight,
                 const Conv2dGeometry& g, DType dtype) {
  const int64_t variant = (static_cast<int64_t>(dtype) * 8 + static_cast<int64_t>(allowed_math(dtype))) * 4 +
                          static_cast<int64_t>(conv_channel_padding());
  return {static_cast<int64_t>(direction), device, input[0], input[1], input[2], input[3], weight[0], weight[1],
          weight[2], weight[3], g.stride_h, g.stride_w, g.pad_h, g.pad_w, variant};
}

struct AlgorithmCache {
  std::mutex mutex;
  std::map<ConvKey, ConvAlgorithmChoice> entries;
};

AlgorithmCache& algorithm_cache() {
  static AlgorithmCache instance;
  return instance;
}

size_t search_workspace_budget(size_t largest_requirement) {
  size_t free_bytes = 0, total_bytes = 0;
  OPSNN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return std::min({largest_requirement, kMaxSearchWorkspaceBytes, free_bytes / 4});
}

// The cached algorithm for `key`, or the result of `search` (run once, outside the lock: it launches
// work and synchronizes) stored under it.
template <typename Search> ConvAlgorithmChoice cached_algorithm(const ConvKey& key, Search&& search) {
  AlgorithmCache& cache = algorithm_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto found = cache.entries.find(key);
    if (found != cache.entries.end()) return found->second;
  }
  ConvAlgorithmChoice chosen = search();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.emplace(key, chosen);
  return chosen;
}

// The first (fastest) successful entry of cuDNN's measured list.
template <typename Perf> ConvAlgorithmChoice first_success(const Perf* results, int count, const char* what) {
  for (int i = 0; i < count; ++i)
    if (results[i].status == CUDNN_STATUS_SUCCESS) {
      ConvAlgorithmChoice found;
      found.algorithm = static_cast<int>(results[i].algo);
      found.math = static_cast<int>(results[i].mathType);
      found.workspace_bytes = results[i].memory;
      found.plain_ms = results[i].time;
      return found;
    }
  throw Error(detail::concat("cuDNN found no working ", what, " algorithm for this convolution"));
}

// The plain search's result, or the padded search's (run on C' = `channels` input channels) when the
// setting forces it or its time plus the pad/crop copies' beats the plain time.
ConvAlgorithmChoice plain_or_padded(ConvAlgorithmChoice plain, const ConvAlgorithmChoice& padded, float copies_ms,
                                    int64_t channels) {
  plain.padded_ms = padded.plain_ms + copies_ms;
  if (conv_channel_padding() != ConvChannelPadding::always && plain.padded_ms >= plain.plain_ms) return plain;
  ConvAlgorithmChoice chosen = padded;
  chosen.padded_channels = channels;
  chosen.plain_ms = plain.plain_ms;
  chosen.padded_ms = plain.padded_ms;
  return chosen;
}

std::shared_ptr<Storage> workspace(size_t bytes, Device device) {
  return bytes == 0 ? nullptr : std::make_shared<Storage>(bytes, device);
}
void* pointer(const std::shared_ptr<Storage>& storage) { return storage ? storage->data() : nullptr; }

// cudnnFind over every forward algorithm for descriptors d on these buffers (y is overwritten).
ConvAlgorithmChoice find_forward(cudnnHandle_t handle, const ConvDescriptors& d, const void* x, const void* w,
                                 void* y, Device device) {
  size_t largest = 0;
  for (int algorithm = 0; algorithm < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++algorithm) {
    size_t bytes = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(handle, d.input.get(), d.filter.get(), d.convolution.get(),
                                                d.output.get(), static_cast<cudnnConvolutionFwdAlgo_t>(algorithm),
                                                &bytes) == CUDNN_STATUS_SUCCESS)
      largest = std::max(largest, bytes);
  }
  const size_t budget = search_workspace_budget(largest);
  auto search_space = workspace(budget, device);
  cudnnConvolutionFwdAlgoPerf_t results[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  OPSNN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(handle, d.input.get(), x, d.filter.get(), w,
                                                           d.convolution.get(), d.output.get(), y,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, results,
                                                           pointer(search_space), budget));
  return first_success(results, returned, "forward");
}

// cudnnFind over every backward-data algorithm (dx is overwritten).
ConvAlgorithmChoice find_backward_input(cudnnHandle_t handle, const ConvDescriptors& d, const void* w,
                                        const void* dy, void* dx, Device device) {
  size_t largest = 0;
  for (int algorithm = 0; algorithm < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; ++algorithm) {
    size_t bytes = 0;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.filter.get(), d.output.get(), d.convolution.get(),
                                                     d.input.get(),
                                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(algorithm),
                                                     &bytes) == CUDNN_STATUS_SUCCESS)
      largest = std::max(largest, bytes);
  }
  const size_t budget = search_workspace_budget(largest);
  auto search_space = workspace(budget, device);
  cudnnConvolutionBwdDataAlgoPerf_t results[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int returned = 0;
  OPSNN_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
      handle, d.filter.get(), w, d.output.get(), dy, d.convolution.get(), d.input.get(), dx,
      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, results, pointer(search_space), budget));
  return first_success(results, returned, "backward-input");
}

// cudnnFind over every backward-filter algorithm (dw is overwritten).
ConvAlgorithmChoice find_backward_weight(cudnnHandle_t handle, const ConvDescriptors& d, const void* x,
                                         const void* dy, void* dw, Device device) {
  size_t largest = 0;
  for (int algorithm = 0; algorithm < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; ++algorithm) {
    size_t bytes = 0;
    if (cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, d.input.get(), d.output.get(), d.convolution.get(),
                                                       d.filter.get(),
                                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(algorithm),
                                                       &bytes) == CUDNN_STATUS_SUCCESS)
      largest = std::max(largest, bytes);
  }
  const size_t budget = search_workspace_budget(largest);
  auto search_space = workspace(budget, device);
  cudnnConvolutionBwdFilterAlgoPerf_t results[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int returned = 0;
  OPSNN_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
      handle, d.input.get(), x, d.output.get(), dy, d.convolution.get(), d.filter.get(), dw,
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, results, pointer(search_space), budget));
  return first_success(results, returned, "backward-weight");
}

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

void set_conv_channel_padding(ConvChannelPadding padding) { channel_padding_setting.store(padding); }
ConvChannelPadding conv_channel_padding() { return channel_padding_setting.load(); }

std::optional<ConvAlgorithmChoice> cached_conv_algorithm(ConvDirection direction, Device device, const Shape& input,
                                                         const Shape& weight, const Conv2dGeometry& geometry,
                                                         DType dtype) {
  AlgorithmCache& cache = algorithm_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto found = cache.entries.find(make_key(direction, device.index, input, weight, geometry, dtype));
  if (found == cache.entries.end()) return std::nullopt;
  return found->second;
}

std::string describe(const ConvAlgorithmChoice& choice) {
  const char* math = "fma";
  if (choice.math == CUDNN_DEFAULT_MATH) math = "default-math";
  if (choice.math == CUDNN_TENSOR_OP_MATH || choice.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) math = "tensor-op";
  std::string text = detail::concat("algo ", choice.algorithm, " ", math);
  if (choice.padded_ms < 0.0f) return text;
  char times[96];
  std::snprintf(times, sizeof times, "padded %.3f ms vs plain %.3f ms", choice.padded_ms, choice.plain_ms);
  return detail::concat(text, choice.padded_channels != 0 ? " on padded channels (" : " unpadded (", times, ")");
}

void CudaBackend::conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, Tensor& out,
                                 const Conv2dGeometry& geometry) {
  check_conv_operands(input, weight, out, "conv2d_forward");
  const Device device = out.device();
  const DType dtype = out.dtype();
  cuda::DeviceGuard guard(device.index);
  cudnnHandle_t handle = cuda::handles_for(device.index).cudnn;
  const ConvAlgorithmChoice chosen = cached_algorithm(
      make_key(ConvDirection::forward, device.index, input.shape(), weight.shape(), geometry, dtype), [&] {
        const ConvAlgorithmChoice plain =
            find_forward(handle, ConvDescriptors(input.shape(), weight.shape(), out.shape(), geometry, dtype),
                         input.data_ptr(), weight.data_ptr(), out.data_ptr(), device);
        const int64_t channels = padded_channel_count(input.shape(), weight.shape(), dtype, device.index);
        if (channels == 0) return plain;
        Tensor padded_input = with_channels(input, channels), padded_weight = with_channels(weight, channels);
        const float copies_ms = measured_ms([&] {
          pad_channels(input, padded_input);
          pad_channels(weight, padded_weight);
        });
        const ConvAlgorithmChoice padded = find_forward(
            handle, ConvDescriptors(padded_input.shape(), padded_weight.shape(), out.shape(), geometry, dtype),
            padded_input.data_ptr(), padded_weight.data_ptr(), out.data_ptr(), device);
        return plain_or_padded(plain, padded, copies_ms, channels);
      });
  Tensor x = input, w = weight;
  if (chosen.padded_channels != 0) {
    x = with_channels(input, chosen.padded_channels);
    w = with_channels(weight, chosen.padded_channels);
    pad_channels(input, x);
    pad_channels(weight, w);
  }
  ConvDescriptors d(x.shape(), w.shape(), out.shape(), geometry, dtype);
  d.convolution.set_math(static_cast<cudnnMathType_t>(chosen.math));
  auto space = workspace(chosen.workspace_bytes, device);
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUDNN_CHECK(cudnnConvolutionForward(handle, &one, d.input.get(), x.data_ptr(), d.filter.get(), w.data_ptr(),
                                            d.convolution.get(),
                                            static_cast<cudnnConvolutionFwdAlgo_t>(chosen.algorithm), pointer(space),
                                            chosen.workspace_bytes, &zero, d.output.get(), out.data_ptr()));
  if (bias.defined()) {
    OPSNN_CHECK_AS(TypeError, bias.dtype() == out.dtype(), "CUDA conv2d_forward: bias ", bias.str(),
                   " must have the output's dtype ", dtype_name(out.dtype()));
    cuda::require_on(bias, device, "conv2d_forward");
    OPSNN_CHECK_AS(ShapeError, bias.numel() == out.size(1), "CUDA conv2d_forward: bias ", bias.str(),
                   " does not match ", out.size(1), " output channels");
    // out += bias over [N, C, H*W] with the bias broadcast (stride 0) along N and H*W; in place is safe
    // as every element reads only itself.
    cuda::BinaryLayout layout;
    layout.dim = 3;
    const int64_t plane = out.size(2) * out.size(3);
    const int64_t extents[3] = {out.size(0), out.size(1), plane}, out_strides[3] = {out.size(1) * plane, plane, 1},
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
                                        const Conv2dGeometry& geometry) {
  check_conv_operands(grad_out, weight, grad_input, "conv2d_backward_input");
  const Device device = grad_input.device();
  const DType dtype = grad_input.dtype();
  cuda::DeviceGuard guard(device.index);
  cudnnHandle_t handle = cuda::handles_for(device.index).cudnn;
  const ConvAlgorithmChoice chosen = cached_algorithm(
      make_key(ConvDirection::backward_input, device.index, grad_input.shape(), weight.shape(), geometry, dtype), [&] {
        const ConvAlgorithmChoice plain = find_backward_input(
            handle, ConvDescriptors(grad_input.shape(), weight.shape(), grad_out.shape(), geometry, dtype),
            weight.data_ptr(), grad_out.data_ptr(), grad_input.data_ptr(), device);
        const int64_t channels = padded_channel_count(grad_input.shape(), weight.shape(), dtype, device.index);
        if (channels == 0) return plain;
        Tensor padded_weight = with_channels(weight, channels), padded_grad = with_channels(grad_input, channels);
        const float copies_ms = measured_ms([&] {
          pad_channels(weight, padded_weight);
          crop_channels(padded_grad, grad_input);
        });
        const ConvAlgorithmChoice padded = find_backward_input(
            handle, ConvDescriptors(padded_grad.shape(), padded_weight.shape(), grad_out.shape(), geometry, dtype),
            padded_weight.data_ptr(), grad_out.data_ptr(), padded_grad.data_ptr(), device);
        return plain_or_padded(plain, padded, copies_ms, channels);
      });
  Tensor w = weight, dx = grad_input;
  if (chosen.padded_channels != 0) {
    w = with_channels(weight, chosen.padded_channels);
    dx = with_channels(grad_input, chosen.padded_channels);
    pad_channels(weight, w);
  }
  ConvDescriptors d(dx.shape(), w.shape(), grad_out.shape(), geometry, dtype);
  d.convolution.set_math(static_cast<cudnnMathType_t>(chosen.math));
  auto space = workspace(chosen.workspace_bytes, device);
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUDNN_CHECK(cudnnConvolutionBackwardData(handle, &one, d.filter.get(), w.data_ptr(), d.output.get(),
                                                 grad_out.data_ptr(), d.convolution.get(),
                                                 static_cast<cudnnConvolutionBwdDataAlgo_t>(chosen.algorithm),
                                                 pointer(space), chosen.workspace_bytes, &zero, d.input.get(),
                                                 dx.data_ptr()));
  if (chosen.padded_channels != 0) crop_channels(dx, grad_input);
}

void CudaBackend::conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, Tensor& grad_weight,
                                         const Conv2dGeometry& geometry) {
  check_conv_operands(grad_out, input, grad_weight, "conv2d_backward_weight");
  const Device device = grad_weight.device();
  const DType dtype = grad_weight.dtype();
  cuda::DeviceGuard guard(device.index);
  cudnnHandle_t handle = cuda::handles_for(device.index).cudnn;
  const ConvAlgorithmChoice chosen = cached_algorithm(
      make_key(ConvDirection::backward_weight, device.index, input.shape(), grad_weight.shape(), geometry, dtype),
      [&] {
        const ConvAlgorithmChoice plain = find_backward_weight(
            handle, ConvDescriptors(input.shape(), grad_weight.shape(), grad_out.shape(), geometry, dtype),
            input.data_ptr(), grad_out.data_ptr(), grad_weight.data_ptr(), device);
        const int64_t channels = padded_channel_count(input.shape(), grad_weight.shape(), dtype, device.index);
        if (channels == 0) return plain;
        Tensor padded_input = with_channels(input, channels), padded_grad = with_channels(grad_weight, channels);
        const float copies_ms = measured_ms([&] {
          pad_channels(input, padded_input);
          crop_channels(padded_grad, grad_weight);
        });
        const ConvAlgorithmChoice padded = find_backward_weight(
            handle, ConvDescriptors(padded_input.shape(), padded_grad.shape(), grad_out.shape(), geometry, dtype),
            padded_input.data_ptr(), grad_out.data_ptr(), padded_grad.data_ptr(), device);
        return plain_or_padded(plain, padded, copies_ms, channels);
      });
  Tensor x = input, dw = grad_weight;
  if (chosen.padded_channels != 0) {
    x = with_channels(input, chosen.padded_channels);
    dw = with_channels(grad_weight, chosen.padded_channels);
    pad_channels(input, x);
  }
  ConvDescriptors d(x.shape(), dw.shape(), grad_out.shape(), geometry, dtype);
  d.convolution.set_math(static_cast<cudnnMathType_t>(chosen.math));
  auto space = workspace(chosen.workspace_bytes, device);
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, d.input.get(), x.data_ptr(), d.output.get(),
                                                   grad_out.data_ptr(), d.convolution.get(),
                                                   static_cast<cudnnConvolutionBwdFilterAlgo_t>(chosen.algorithm),
                                                   pointer(space), chosen.workspace_bytes, &zero, d.filter.get(),
                                                   dw.data_ptr()));
  if (chosen.padded_channels != 0) crop_channels(dw, grad_weight);
}

}  // namespace opsnn::ops
