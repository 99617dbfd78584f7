// CUDA conv2d (NCHW input, OIHW weight) through cuDNN: forward, input gradient and weight gradient.
// The fastest algorithm for each shape is found once with cudnnFind*Ex (on our own buffers, workspace
// from the stream-ordered pool) and cached; math is restricted to FMA kernels (no TF32) so f32 results
// match the CPU twin (src/ops/cpu/conv.cpp) to rounding.
#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_context.h"

namespace opsnn::ops {
namespace {

// Workspace the algorithm search may offer cuDNN: at most this, and at most a quarter of free memory.
constexpr size_t kMaxSearchWorkspaceBytes = size_t{512} << 20;

class TensorDescriptor {
 public:
  explicit TensorDescriptor(const Shape& shape) {
    OPSNN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&handle_));
    OPSNN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(handle_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
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
  explicit FilterDescriptor(const Shape& shape) {
    OPSNN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&handle_));
    OPSNN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(handle_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
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
  explicit ConvolutionDescriptor(const Conv2dGeometry& g) {
    OPSNN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&handle_));
    OPSNN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        handle_, cuda::checked_int(g.pad_h, "conv2d"), cuda::checked_int(g.pad_w, "conv2d"),
        cuda::checked_int(g.stride_h, "conv2d"), cuda::checked_int(g.stride_w, "conv2d"), 1, 1,
        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    set_math(CUDNN_FMA_MATH);
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
                  const Conv2dGeometry& g)
      : input(input_shape), filter(weight_shape), output(output_shape), convolution(g) {}
};

// A found algorithm with the workspace and math type it was measured with.
struct ChosenAlgorithm {
  int algorithm = 0;
  size_t workspace_bytes = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
};

enum class Direction : int64_t { forward, backward_input, backward_weight };
using ConvKey = std::array<int64_t, 15>;

ConvKey make_key(Direction direction, int device, const Shape& input, const Shape& weight, const Conv2dGeometry& g) {
  return {static_cast<int64_t>(direction), device, input[0], input[1], input[2], input[3], weight[0], weight[1],
          weight[2], weight[3], g.stride_h, g.stride_w, g.pad_h, g.pad_w, 0};
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
  for (const Tensor* t : {&data, &weight, &result}) {
    cuda::require_f32(*t, kernel);
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
  ConvDescriptors d(input.shape(), weight.shape(), out.shape(), geometry);
  const ChosenAlgorithm chosen =
      cached_algorithm(make_key(Direction::forward, device.index, input.shape(), weight.shape(), geometry), [&] {
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
    cuda::require_f32(bias, "conv2d_forward");
    cuda::require_on(bias, device, "conv2d_forward");
    OPSNN_CHECK_AS(ShapeError, bias.numel() == out.size(1), "CUDA conv2d_forward: bias ", bias.str(),
                   " does not match ", out.size(1), " output channels");
    TensorDescriptor bias_descriptor({1, out.size(1), 1, 1});
    OPSNN_CUDNN_CHECK(
        cudnnAddTensor(handle, &one, bias_descriptor.get(), bias.data_ptr(), &one, d.output.get(), out.data_ptr()));
  }
}

void CudaBackend::conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, Tensor& grad_input,
                                        const Conv2dGeometry& geometry) {
  check_conv_operands(grad_out, weight, grad_input, "conv2d_backward_input");
  const Device device = grad_input.device();
  cuda::DeviceGuard guard(device.index);
  cudnnHandle_t handle = cuda::handles_for(device.index).cudnn;
  ConvDescriptors d(grad_input.shape(), weight.shape(), grad_out.shape(), geometry);
  const ChosenAlgorithm chosen = cached_algorithm(
      make_key(Direction::backward_input, device.index, grad_input.shape(), weight.shape(), geometry), [&] {
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
  ConvDescriptors d(input.shape(), grad_weight.shape(), grad_out.shape(), geometry);
  const ChosenAlgorithm chosen = cached_algorithm(
      make_key(Direction::backward_weight, device.index, input.shape(), grad_weight.shape(), geometry), [&] {
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
