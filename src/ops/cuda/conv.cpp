// CUDA conv2d (NCHW input, OIHW weight) through cuDNN: forward, input gradient and weight gradient.
// The fastest algorithm for each shape is found once with cudnnFind*Ex (on our own buffers, workspace
// from the stream-ordered pool) and cached per shape, dtype and math setting. f32 math is restricted to
// FMA kernels so results match the CPU twin (src/ops/cpu/conv.cpp) to rounding, unless the f32 math
// setting is tf32 (TF32 tensor cores allowed). f16 and bf16 data compute in f32 (cuDNN's pseudo-half
// configurations) on tensor cores.
#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_context.h"
#include "ops/cuda/kernels.h"

namespace opsnn::ops {
namespace {

// Workspace the algorithm search may offer cuDNN: at most this, and at most a quarter of free memory.
constexpr size_t kMaxSearchWorkspaceBytes = size_t{512} << 20;

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

// A found algorithm with the workspace and math type it was measured with.
struct ChosenAlgorithm {
  int algorithm = 0;
  size_t workspace_bytes = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
};

enum class Direction : int64_t { forward, backward_input, backward_weight };
using ConvKey = std::array<int64_t, 15>;

// The last entry tells dtypes and math settings apart: an algorithm found for one may not run another.
ConvKey make_key(Direction direction, int device, const Shape& input, const Shape& weight, const Conv2dGeometry& g,
                 DType dtype) {
  return {static_cast<int64_t>(direction), device, input[0], input[1], input[2], input[3], weight[0], weight[1],
          weight[2], weight[3], g.stride_h, g.stride_w, g.pad_h, g.pad_w,
          static_cast<int64_t>(dtype) * 8 + static_cast<int64_t>(allowed_math(dtype))};
}

struct AlgorithmCache {
  std::mutex mutex;
  std::map<ConvKey, ChosenAlgorithm> entries;
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
template <typename Search> ChosenAlgorithm cached_algorithm(const ConvKey& key, Search&& search) {
  AlgorithmCache& cache = algorithm_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto found = cache.entries.find(key);
    if (found != cache.entries.end()) return found->second;
  }
  ChosenAlgorithm chosen = search();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.emplace(key, chosen);
  return chosen;
}

// The first (fastest) successful entry of cuDNN's measured list.
template <typename Perf> ChosenAlgorithm first_success(const Perf* results, int count, const char* what) {
  for (int i = 0; i < count; ++i)
    if (results[i].status == CUDNN_STATUS_SUCCESS)
      return {static_cast<int>(results[i].algo), results[i].memory, results[i].mathType};
  throw Error(detail::concat("cuDNN found no working ", what, " algorithm for this convolution"));
}

std::shared_ptr<Storage> workspace(size_t bytes, Device device) {
  return bytes == 0 ? nullptr : std::make_shared<Storage>(bytes, device);
}
void* pointer(const std::shared_ptr<Storage>& storage) { return storage ? storage->data() : nullptr; }

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
  cuda::DeviceGuard guard(device.index);
  cudnnHandle_t handle = cuda::handles_for(device.index).cudnn;
  ConvDescriptors d(input.shape(), weight.shape(), out.shape(), geometry, out.dtype());
  const ChosenAlgorithm chosen =
      cached_algorithm(make_key(Direction::forward, device.index, input.shape(), weight.shape(), geometry, out.dtype()), [&] {
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
        OPSNN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            handle, d.input.get(), input.data_ptr(), d.filter.get(), weight.data_ptr(), d.convolution.get(),
            d.output.get(), out.data_ptr(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, results,
            pointer(search_space), budget));
        return first_success(results, returned, "forward");
      });
  d.convolution.set_math(chosen.math);
  auto space = workspace(chosen.workspace_bytes, device);
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUDNN_CHECK(cudnnConvolutionForward(handle, &one, d.input.get(), input.data_ptr(), d.filter.get(),
                                            weight.data_ptr(), d.convolution.get(),
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
  cuda::DeviceGuard guard(device.index);
  cudnnHandle_t handle = cuda::handles_for(device.index).cudnn;
  ConvDescriptors d(grad_input.shape(), weight.shape(), grad_out.shape(), geometry, grad_input.dtype());
  const ChosenAlgorithm chosen = cached_algorithm(
      make_key(Direction::backward_input, device.index, grad_input.shape(), weight.shape(), geometry,
               grad_input.dtype()), [&] {
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
            handle, d.filter.get(), weight.data_ptr(), d.output.get(), grad_out.data_ptr(), d.convolution.get(),
            d.input.get(), grad_input.data_ptr(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, results,
            pointer(search_space), budget));
        return first_success(results, returned, "backward-input");
      });
  d.convolution.set_math(chosen.math);
  auto space = workspace(chosen.workspace_bytes, device);
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUDNN_CHECK(cudnnConvolutionBackwardData(handle, &one, d.filter.get(), weight.data_ptr(), d.output.get(),
                                                 grad_out.data_ptr(), d.convolution.get(),
                                                 static_cast<cudnnConvolutionBwdDataAlgo_t>(chosen.algorithm),
                                                 pointer(space), chosen.workspace_bytes, &zero, d.input.get(),
                                                 grad_input.data_ptr()));
}

void CudaBackend::conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, Tensor& grad_weight,
                                         const Conv2dGeometry& geometry) {
  check_conv_operands(grad_out, input, grad_weight, "conv2d_backward_weight");
  const Device device = grad_weight.device();
  cuda::DeviceGuard guard(device.index);
  cudnnHandle_t handle = cuda::handles_for(device.index).cudnn;
  ConvDescriptors d(input.shape(), grad_weight.shape(), grad_out.shape(), geometry, grad_weight.dtype());
  const ChosenAlgorithm chosen = cached_algorithm(
      make_key(Direction::backward_weight, device.index, input.shape(), grad_weight.shape(), geometry,
               grad_weight.dtype()), [&] {
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
            handle, d.input.get(), input.data_ptr(), d.output.get(), grad_out.data_ptr(), d.convolution.get(),
            d.filter.get(), grad_weight.data_ptr(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, results,
            pointer(search_space), budget));
        return first_success(results, returned, "backward-weight");
      });
  d.convolution.set_math(chosen.math);
  auto space = workspace(chosen.workspace_bytes, device);
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, d.input.get(), input.data_ptr(), d.output.get(),
                                                   grad_out.data_ptr(), d.convolution.get(),
                                                   static_cast<cudnnConvolutionBwdFilterAlgo_t>(chosen.algorithm),
                                                   pointer(space), chosen.workspace_bytes, &zero, d.filter.get(),
                                                   grad_weight.data_ptr()));
}

}  // namespace opsnn::ops
