// CUDA conv2d (NCHW or NHWC input, OIHW weight): forward, input gradient and weight gradient. Each direction
// of each shape is decided once (cached per shape, dtype, math and lowering policy): cuDNN's fastest
// algorithm from cudnnFind*Ex (on our own buffers, workspace from the stream-ordered pool), or, for the
// shapes where NCHW cuDNN falls back to slow legacy kernels, a lowering (conv_algorithms.h):
//   - 1x1 stride > 1 (ResNet's projection shortcuts): the stride-1 convolution of the subsampled input,
//     whose cuDNN kernels use tensor cores (measured on an H200: about 2 ms -> 0.3 ms per direction at
//     ResNet-50's layer2 shape);
//   - input channels off the tensor-core granule (the RGB stem): im2col + batched cuBLAS GEMMs;
//   - 1x1 stride 1: batched cuBLAS GEMMs on the NCHW data as it lies (no im2col, no layout transposes).
// A lowering runs when its measured time, copies included, beats cudnnFind's best (policy `measured`).
// Channels-last convolutions (geometry.channels_last) run cuDNN on NHWC data descriptors and a KRSC copy
// of the weight (an NHWC filter descriptor: the configuration cuDNN documents for its NHWC tensor-core
// kernels and the one PyTorch's channels_last convolutions use); the weight gradient is computed in KRSC
// and transposed back. The NCHW lowerings do not apply (they avoid transposes NHWC data needs none of),
// except that a 1x1 stride-1 convolution is timed as plain cuBLAS GEMMs on the [N*H*W, C] data (cuDNN's
// NHWC kernels took 0.20-0.57 ms per direction of ResNet-50's 1x1 shapes on an H200 in bf16, the GEMMs
// 0.04-0.19 ms, winning in 11 of 12).
// f32 math is restricted to FMA kernels so results match the CPU twin (src/ops/cpu/conv.cpp) to rounding,
// unless the f32 math setting is tf32 (TF32 tensor cores allowed). f16 and bf16 data compute in f32
// (cuDNN's pseudo-half configurations, cuBLAS's 32F compute) on tensor cores.
#include <algorithm>
#include <array>
#include <atomic>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"
#include "ops/conv_algorithm_store.h"
#include "ops/cuda/conv_algorithms.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_context.h"
#include "ops/cuda/kernels.h"

namespace opsnn::ops {
namespace {

// Workspace the algorithm search may offer cuDNN: at most this, and at most a quarter of free memory.
constexpr size_t kMaxSearchWorkspaceBytes = size_t{512} << 20;

std::atomic<ConvLoweringPolicy> lowering_policy_setting{ConvLoweringPolicy::measured};

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

cudnnTensorFormat_t cudnn_format(bool channels_last) { return channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW; }

// The [N, C, H, W] sizes of an activation shape ([N, H, W, C] when channels_last), the order cuDNN's 4-D
// descriptors take whatever the memory format.
Shape nchw_sizes(const Shape& shape, bool channels_last) {
  return channels_last ? Shape{shape[0], shape[3], shape[1], shape[2]} : shape;
}

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
Tensor krsc_copy(const Tensor& weight) { return weight.permute({0, 2, 3, 1}).contiguous(); }

// grad_weight [K, C, R, S] from its KRSC twin.
void copy_from_krsc(const Tensor& krsc, Tensor& grad_weight) { grad_weight.copy_(krsc.permute({0, 3, 1, 2})); }

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
template <typename Work>
float measured_ms(Work&& work) {
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

// What a decision depends on: the convolution, and the settings an algorithm found for one may not run
// under (dtype, math, layout) or a forced policy must not reuse a measured decision for.
struct ConvKey {
  ConvDirection direction;
  int device;
  std::array<int64_t, 4> input, weight, geometry;  // geometry: stride_h, stride_w, pad_h, pad_w
  bool channels_last;
  DType dtype;
  int math;  // allowed_math(dtype)
  ConvLoweringPolicy policy;
  bool deterministic;
  auto operator<=>(const ConvKey&) const = default;
};

std::array<int64_t, 4> four(const Shape& shape) { return {shape[0], shape[1], shape[2], shape[3]}; }

// The key of a convolution decided under the given settings (a loaded record's, or this process's).
ConvKey key_of(ConvDirection direction, int device, const Shape& input, const Shape& weight, const Conv2dGeometry& g,
               DType dtype, int math, ConvLoweringPolicy policy, bool deterministic) {
  return {direction,       device, four(input), four(weight), {g.stride_h, g.stride_w, g.pad_h, g.pad_w},
          g.channels_last, dtype,  math,        policy,       deterministic};
}

// The key under the current settings.
ConvKey make_key(ConvDirection direction, int device, const Shape& input, const Shape& weight, const Conv2dGeometry& g,
                 DType dtype) {
  return key_of(direction, device, input, weight, g, dtype, static_cast<int>(allowed_math(dtype)),
                conv_lowering_policy(), conv_deterministic());
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
template <typename Search>
ConvAlgorithmChoice cached_algorithm(const ConvKey& key, Search&& search) {
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

// The first (fastest) successful entry of cuDNN's measured list; with deterministic convolutions (the
// default), the first that cuDNN also marks deterministic (no atomics: the same bits on every run), or,
// where there is none, the fastest marked deterministic = false.
template <typename Perf>
ConvAlgorithmChoice first_success(const Perf* results, int count, const char* what) {
  const bool deterministic = conv_deterministic();
  int fastest = -1;
  for (int i = 0; i < count; ++i) {
    if (results[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (fastest < 0) fastest = i;
    if (deterministic && results[i].determinism != CUDNN_DETERMINISTIC) continue;
    fastest = i;
    break;
  }
  if (fastest < 0) throw Error(detail::concat("cuDNN found no working ", what, " algorithm for this convolution"));
  ConvAlgorithmChoice found;
  found.algorithm = static_cast<int>(results[fastest].algo);
  found.math = static_cast<int>(results[fastest].mathType);
  found.workspace_bytes = results[fastest].memory;
  found.cudnn_ms = results[fastest].time;
  found.deterministic = found.cudnn_deterministic = results[fastest].determinism == CUDNN_DETERMINISTIC;
  return found;
}

std::shared_ptr<Storage> workspace(size_t bytes, Device device) {
  return bytes == 0 ? nullptr : std::make_shared<Storage>(bytes, device);
}
void* pointer(const std::shared_ptr<Storage>& storage) { return storage ? storage->data() : nullptr; }

// cudnnFind over every forward algorithm for descriptors d on these buffers (y is overwritten).
ConvAlgorithmChoice find_forward(cudnnHandle_t handle, const ConvDescriptors& d, const void* x, const void* w, void* y,
                                 Device device) {
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
      handle, d.input.get(), x, d.filter.get(), w, d.convolution.get(), d.output.get(), y,
      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, results, pointer(search_space), budget));
  return first_success(results, returned, "forward");
}

// cudnnFind over every backward-data algorithm (dx is overwritten).
ConvAlgorithmChoice find_backward_input(cudnnHandle_t handle, const ConvDescriptors& d, const void* w, const void* dy,
                                        void* dx, Device device) {
  size_t largest = 0;
  for (int algorithm = 0; algorithm < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; ++algorithm) {
    size_t bytes = 0;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(
            handle, d.filter.get(), d.output.get(), d.convolution.get(), d.input.get(),
            static_cast<cudnnConvolutionBwdDataAlgo_t>(algorithm), &bytes) == CUDNN_STATUS_SUCCESS)
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
ConvAlgorithmChoice find_backward_weight(cudnnHandle_t handle, const ConvDescriptors& d, const void* x, const void* dy,
                                         void* dw, Device device) {
  size_t largest = 0;
  for (int algorithm = 0; algorithm < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; ++algorithm) {
    size_t bytes = 0;
    if (cudnnGetConvolutionBackwardFilterWorkspaceSize(
            handle, d.input.get(), d.output.get(), d.convolution.get(), d.filter.get(),
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algorithm), &bytes) == CUDNN_STATUS_SUCCESS)
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

// ---- running one cuDNN call with a chosen algorithm ----

struct CudnnRun {
  cudnnHandle_t handle;
  const ConvAlgorithmChoice& choice;
  Device device;
};

void cudnn_forward(const CudnnRun& run, const ConvDescriptors& d, const void* x, const void* w, void* y) {
  d.convolution.set_math(static_cast<cudnnMathType_t>(run.choice.math));
  auto space = workspace(run.choice.workspace_bytes, run.device);
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUDNN_CHECK(cudnnConvolutionForward(run.handle, &one, d.input.get(), x, d.filter.get(), w, d.convolution.get(),
                                            static_cast<cudnnConvolutionFwdAlgo_t>(run.choice.algorithm),
                                            pointer(space), run.choice.workspace_bytes, &zero, d.output.get(), y));
}

void cudnn_backward_input(const CudnnRun& run, const ConvDescriptors& d, const void* w, const void* dy, void* dx) {
  d.convolution.set_math(static_cast<cudnnMathType_t>(run.choice.math));
  auto space = workspace(run.choice.workspace_bytes, run.device);
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUDNN_CHECK(cudnnConvolutionBackwardData(run.handle, &one, d.filter.get(), w, d.output.get(), dy,
                                                 d.convolution.get(),
                                                 static_cast<cudnnConvolutionBwdDataAlgo_t>(run.choice.algorithm),
                                                 pointer(space), run.choice.workspace_bytes, &zero, d.input.get(), dx));
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

// ---- the subsampled lowering (1x1, stride > 1, no padding) ----

const Conv2dGeometry kUnitStride{};  // stride 1, no padding

// im2col of a 1x1 kernel without padding: exactly x[:, :, ::stride_h, ::stride_w], as [N, C, out_h, out_w].
cuda::Im2colLayout subsample_layout(const Shape& input, const Shape& output, const Conv2dGeometry& g) {
  return {input[0], input[1], input[2], input[3], output[2], output[3], 1, 1, g.stride_h, g.stride_w, 0, 0, input[1]};
}

Shape subsampled_shape(const Shape& input, const Shape& output) { return {input[0], input[1], output[2], output[3]}; }

void subsample(const Tensor& input, Tensor& sampled, const Conv2dGeometry& g) {
  const cuda::Im2colLayout layout = subsample_layout(input.shape(), sampled.shape(), g);
  cuda::dispatch_floating(input.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_im2col(input.data<T>(), sampled.data<T>(), layout);
  });
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

// grad_input = the sampled positions' gradients, zero elsewhere (col2im of the 1x1 layout).
void unsubsample(const Tensor& sampled_grad, Tensor& grad_input, const Conv2dGeometry& g) {
  const cuda::Im2colLayout layout = subsample_layout(grad_input.shape(), sampled_grad.shape(), g);
  cuda::dispatch_floating(grad_input.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_col2im(sampled_grad.data<T>(), grad_input.data<T>(), layout);
  });
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

// ---- the gemm lowering (im2col + batched cuBLAS GEMMs) ----

std::atomic<size_t> column_budget_setting{size_t{512} << 20};

struct GemmPlan {
  cuda::Im2colLayout layout;  // for the whole batch; chunks change `images`
  int64_t filters = 0, rows = 0, rows_padded = 0, pixels = 0, in_plane = 0;
  // A 1x1 stride-1 convolution without padding on channels that need no row padding: each image's
  // [C, H*W] input already is its column matrix, and the input gradient is the GEMM's output.
  bool direct = false;
  // Channels-last (always 1x1, stride 1, no padding): the NHWC input is an [N*H*W, C] matrix and the
  // [K, C, 1, 1] weight a [K, C] one (KRSC and KCRS agree for 1x1), so each direction is plain GEMMs.
  bool channels_last = false;
};

GemmPlan gemm_plan(const Shape& input, const Shape& weight, const Shape& output, const Conv2dGeometry& g) {
  GemmPlan plan;
  if (g.channels_last) {
    plan.filters = weight[0];
    plan.rows = plan.rows_padded = weight[1];
    plan.pixels = output[1] * output[2];
    plan.in_plane = input[1] * input[2];
    plan.direct = plan.channels_last = true;
    return plan;
  }
  plan.filters = weight[0];
  plan.rows = input[1] * weight[2] * weight[3];
  plan.rows_padded = (plan.rows + 7) / 8 * 8;  // 16-byte aligned rows for the tensor-core GEMMs
  plan.pixels = output[2] * output[3];
  plan.in_plane = input[2] * input[3];
  plan.layout = {input[0],  input[1],   input[2],   input[3], output[2], output[3],       weight[2],
                 weight[3], g.stride_h, g.stride_w, g.pad_h,  g.pad_w,   plan.rows_padded};
  plan.direct = weight[2] == 1 && weight[3] == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 &&
                g.pad_w == 0 && plan.rows == plan.rows_padded;
  return plan;
}

// Images per chunk when each image needs `bytes_per_image` of scratch.
int64_t images_per_chunk(int64_t images, size_t bytes_per_image) {
  const size_t fitting = conv_column_budget() / std::max<size_t>(bytes_per_image, 1);
  return std::clamp<int64_t>(static_cast<int64_t>(std::min<size_t>(fitting, INT64_MAX)), 1,
                             std::max<int64_t>(images, 1));
}

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// One operand of a strided batched GEMM: column-major data with leading dimension ld, `stride` elements
// between consecutive images (0: shared by all).
struct GemmOperand {
  const void* data;
  cudaDataType_t type;
  int64_t ld, stride;
};

// C[i] = op_a(A[i]) * op_b(B[i]) for i < count (column-major, m x n, inner k), C f32 or the data type,
// with the compute type the data type and f32 math setting allow.
void batched_gemm(cublasHandle_t handle, DType dtype, cublasOperation_t op_a, cublasOperation_t op_b, int64_t m,
                  int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, void* c, cudaDataType_t c_type,
                  int64_t ldc, int64_t c_stride, int64_t count) {
  const cublasComputeType_t compute =
      dtype == DType::f32 && fp32_math() == Fp32Math::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float one = 1.0f, zero = 0.0f;
  OPSNN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, op_a, op_b, cuda::checked_int(m, "conv2d"), cuda::checked_int(n, "conv2d"),
      cuda::checked_int(k, "conv2d"), &one, a.data, a.type, cuda::checked_int(a.ld, "conv2d"), a.stride, b.data, b.type,
      cuda::checked_int(b.ld, "conv2d"), b.stride, &zero, c, c_type, cuda::checked_int(ldc, "conv2d"), c_stride,
      cuda::checked_int(count, "conv2d"), compute, CUBLAS_GEMM_DEFAULT));
}

// weight [K, C, R, S] as [K, rows_padded] with the rows C*R*S..rows_padded-1 zero (weight itself when
// there are none).
Tensor padded_weight(const Tensor& weight, const GemmPlan& plan) {
  if (plan.rows == plan.rows_padded) return weight;
  Tensor padded = Tensor::empty({plan.filters, plan.rows_padded}, weight.dtype(), weight.device());
  const size_t element = dtype_size(weight.dtype());
  const size_t row = static_cast<size_t>(plan.rows) * element,
               padded_row = static_cast<size_t>(plan.rows_padded) * element;
  auto* base = static_cast<char*>(padded.data_ptr());
  const auto filters = static_cast<size_t>(plan.filters);
  if (padded_row > row)
    OPSNN_CUDA_CHECK(cudaMemset2DAsync(base + row, padded_row, 0, padded_row - row, filters, nullptr));
  OPSNN_CUDA_CHECK(
      cudaMemcpy2DAsync(base, padded_row, weight.data_ptr(), row, row, filters, cudaMemcpyDeviceToDevice, nullptr));
  return padded;
}

void im2col(const Tensor& input, int64_t first, int64_t count, const GemmPlan& plan, void* columns) {
  cuda::Im2colLayout layout = plan.layout;
  layout.images = count;
  cuda::dispatch_floating(input.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_im2col(input.data<T>() + first * plan.layout.channels * plan.in_plane, static_cast<T*>(columns),
                        layout);
  });
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

// Per image: out[K, P] = W[K, rows] * columns[rows, P] (row-major; cuBLAS sees the transposes).
// Channels-last: out[N*P, K] = X[N*P, C] * W[K, C]^T in one GEMM.
void gemm_forward(cublasHandle_t handle, const Tensor& input, const Tensor& weight, Tensor& out, const GemmPlan& plan) {
  const DType dtype = out.dtype();
  if (plan.channels_last) {
    const cudaDataType_t type = cuda_data_type(dtype);
    batched_gemm(handle, dtype, CUBLAS_OP_T, CUBLAS_OP_N, plan.filters, input.size(0) * plan.pixels, plan.rows,
                 {weight.data_ptr(), type, plan.rows, 0}, {input.data_ptr(), type, plan.rows, 0}, out.data_ptr(), type,
                 plan.filters, 0, 1);
    return;
  }
  const size_t element = dtype_size(dtype);
  const Tensor w = padded_weight(weight, plan);
  const int64_t images = input.size(0);
  const int64_t chunk =
      plan.direct ? images : images_per_chunk(images, static_cast<size_t>(plan.rows_padded * plan.pixels) * element);
  std::optional<Storage> columns;
  if (!plan.direct)
    columns.emplace(static_cast<size_t>(chunk * plan.rows_padded * plan.pixels) * element, out.device());
  const cudaDataType_t type = cuda_data_type(dtype);
  for (int64_t first = 0; first < images; first += chunk) {
    const int64_t count = std::min(chunk, images - first);
    const void* a = plan.direct ? input.data_ptr() : columns->data();
    if (!plan.direct) im2col(input, first, count, plan, columns->data());
    batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_N, plan.pixels, plan.filters, plan.rows_padded,
                 {a, type, plan.pixels, plan.rows_padded * plan.pixels}, {w.data_ptr(), type, plan.rows_padded, 0},
                 static_cast<char*>(out.data_ptr()) + static_cast<size_t>(first * plan.filters * plan.pixels) * element,
                 type, plan.pixels, plan.filters * plan.pixels, count);
  }
}

// Per image: dcolumns[rows, P] = W^T * dY[K, P] in f32, then col2im into grad_input; a direct plan's
// GEMM writes grad_input itself.
// Channels-last: grad_input[N*P, C] = dY[N*P, K] * W[K, C] in one GEMM.
void gemm_backward_input(cublasHandle_t handle, const Tensor& grad_out, const Tensor& weight, Tensor& grad_input,
                         const GemmPlan& plan) {
  const DType dtype = grad_input.dtype();
  const size_t element = dtype_size(dtype);
  const cudaDataType_t type = cuda_data_type(dtype);
  const int64_t images = grad_input.size(0);
  if (plan.channels_last) {
    batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_N, plan.rows, images * plan.pixels, plan.filters,
                 {weight.data_ptr(), type, plan.rows, 0}, {grad_out.data_ptr(), type, plan.filters, 0},
                 grad_input.data_ptr(), type, plan.rows, 0, 1);
    return;
  }
  const Tensor w = padded_weight(weight, plan);
  if (plan.direct) {
    batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_T, plan.pixels, plan.rows_padded, plan.filters,
                 {grad_out.data_ptr(), type, plan.pixels, plan.filters * plan.pixels},
                 {w.data_ptr(), type, plan.rows_padded, 0}, grad_input.data_ptr(), type, plan.pixels,
                 plan.rows_padded * plan.pixels, images);
    return;
  }
  const int64_t chunk = images_per_chunk(images, static_cast<size_t>(plan.rows_padded * plan.pixels) * sizeof(float));
  Storage columns(static_cast<size_t>(chunk * plan.rows_padded * plan.pixels) * sizeof(float), grad_input.device());
  for (int64_t first = 0; first < images; first += chunk) {
    const int64_t count = std::min(chunk, images - first);
    const char* dy = static_cast<const char*>(grad_out.data_ptr()) +
                     static_cast<size_t>(first * plan.filters * plan.pixels) * element;
    batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_T, plan.pixels, plan.rows_padded, plan.filters,
                 {dy, type, plan.pixels, plan.filters * plan.pixels}, {w.data_ptr(), type, plan.rows_padded, 0},
                 columns.data(), CUDA_R_32F, plan.pixels, plan.rows_padded * plan.pixels, count);
    cuda::Im2colLayout layout = plan.layout;
    layout.images = count;
    cuda::dispatch_floating(dtype, "conv2d", [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_col2im(static_cast<const float*>(columns.data()),
                          grad_input.data<T>() + first * plan.layout.channels * plan.in_plane, layout);
    });
    OPSNN_CUDA_CHECK(cudaGetLastError());
  }
}

// Per image: partial[K, rows_padded] = dY[K, P] * columns[rows, P]^T in f32 (channels-last: dY[P, K]^T *
// X[P, C]); the partials summed over the images in order (double) into an f32 [K, rows] result, converted
// to the weight's dtype.
void gemm_backward_weight(cublasHandle_t handle, const Tensor& grad_out, const Tensor& input, Tensor& grad_weight,
                          const GemmPlan& plan) {
  const DType dtype = grad_weight.dtype();
  const size_t element = dtype_size(dtype);
  const int64_t images = input.size(0);
  const size_t per_image = (plan.direct ? 0 : static_cast<size_t>(plan.rows_padded * plan.pixels) * element) +
                           static_cast<size_t>(plan.filters * plan.rows_padded) * sizeof(float);
  const int64_t chunk = images_per_chunk(images, per_image);
  std::optional<Storage> columns;
  if (!plan.direct)
    columns.emplace(static_cast<size_t>(chunk * plan.rows_padded * plan.pixels) * element, grad_weight.device());
  Storage partials(static_cast<size_t>(chunk * plan.filters * plan.rows_padded) * sizeof(float), grad_weight.device());
  Tensor sums =
      dtype == DType::f32 ? grad_weight : Tensor::empty(grad_weight.shape(), DType::f32, grad_weight.device());
  const cudaDataType_t type = cuda_data_type(dtype);
  for (int64_t first = 0; first < images; first += chunk) {
    const int64_t count = std::min(chunk, images - first);
    const void* a = plan.direct ? static_cast<const char*>(input.data_ptr()) +
                                      static_cast<size_t>(first * plan.rows_padded * plan.pixels) * element
                                : columns->data();
    if (!plan.direct) im2col(input, first, count, plan, columns->data());
    const char* dy = static_cast<const char*>(grad_out.data_ptr()) +
                     static_cast<size_t>(first * plan.filters * plan.pixels) * element;
    if (plan.channels_last)
      batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_T, plan.rows, plan.filters, plan.pixels,
                   {a, type, plan.rows, plan.rows * plan.pixels}, {dy, type, plan.filters, plan.filters * plan.pixels},
                   partials.data(), CUDA_R_32F, plan.rows, plan.filters * plan.rows, count);
    else
      batched_gemm(handle, dtype, CUBLAS_OP_T, CUBLAS_OP_N, plan.rows_padded, plan.filters, plan.pixels,
                   {a, type, plan.pixels, plan.rows_padded * plan.pixels},
                   {dy, type, plan.pixels, plan.filters * plan.pixels}, partials.data(), CUDA_R_32F, plan.rows_padded,
                   plan.filters * plan.rows_padded, count);
    cuda::launch_sum_partials(static_cast<const float*>(partials.data()), count, plan.filters, plan.rows,
                              plan.rows_padded, sums.data<float>(), first > 0);
    OPSNN_CUDA_CHECK(cudaGetLastError());
  }
  if (dtype != DType::f32) grad_weight.copy_(sums);
}

// ---- choosing ----

// The search every direction runs once per shape: cudnnFind on the convolution as given (`find_given`,
// skipped when the policy forces the lowering), then, where `lowering` applies and the policy allows,
// the lowering's time (`time_lowered` returns a choice with lowered_ms set, and for the subsampled
// lowering the stride-1 problem's algorithm). The lowering wins when forced or faster; both times are
// kept in the choice.
template <typename FindGiven, typename TimeLowered>
ConvAlgorithmChoice search(ConvLowering lowering, FindGiven&& find_given, TimeLowered&& time_lowered) {
  const ConvLoweringPolicy policy = conv_lowering_policy();
  ConvAlgorithmChoice cudnn;
  if (lowering == ConvLowering::cudnn || policy != ConvLoweringPolicy::always)
    cudnn = find_given();
  else
    cudnn.cudnn_ms = -1.0f;  // not searched
  if (lowering == ConvLowering::cudnn || policy == ConvLoweringPolicy::never) return cudnn;
  ConvAlgorithmChoice lowered = time_lowered();
  lowered.lowering = lowering;
  lowered.cudnn_ms = cudnn.cudnn_ms;
  lowered.cudnn_deterministic = cudnn.deterministic;
  // A deterministic lowering also wins where cuDNN had no deterministic algorithm to offer.
  const bool for_determinism = conv_deterministic() && !cudnn.deterministic && lowered.deterministic;
  if (policy == ConvLoweringPolicy::always || lowered.lowered_ms < cudnn.cudnn_ms || for_determinism) return lowered;
  cudnn.lowered_ms = lowered.lowered_ms;
  return cudnn;
}

}  // namespace

void set_conv_lowering_policy(ConvLoweringPolicy policy) { lowering_policy_setting.store(policy); }
void set_conv_column_budget(size_t bytes) { column_budget_setting.store(bytes); }
size_t conv_column_budget() { return column_budget_setting.load(); }
ConvLoweringPolicy conv_lowering_policy() { return lowering_policy_setting.load(); }

namespace {

// applicable_lowering with the tensor-core granule given (tensor_core_granule's value under some math).
ConvLowering lowering_for(const Shape& input, const Shape& weight, const Conv2dGeometry& g,
                          int64_t tensor_core_granule) {
  constexpr int64_t kMax31 = 0x7fffffff;
  if (input.size() != 4 || weight.size() != 4) return ConvLowering::cudnn;
  const bool one_by_one = weight[2] == 1 && weight[3] == 1 && g.pad_h == 0 && g.pad_w == 0;
  // Channels-last: cuDNN runs NHWC natively, without the transposes the NCHW lowerings avoid; only a 1x1
  // stride-1 convolution, a plain GEMM on NHWC data, is worth timing against it.
  if (g.channels_last)
    return one_by_one && g.stride_h == 1 && g.stride_w == 1 && input[0] >= 1 && input[1] * input[2] >= 1 &&
                   input[3] >= 1 && weight[0] >= 1 && input[0] * input[1] * input[2] <= kMax31
               ? ConvLowering::gemm
               : ConvLowering::cudnn;
  const int64_t out_h = (input[2] + 2 * g.pad_h - weight[2]) / g.stride_h + 1;
  const int64_t out_w = (input[3] + 2 * g.pad_w - weight[3]) / g.stride_w + 1;
  const int64_t rows = input[1] * weight[2] * weight[3];
  // The kernels decode 31-bit positions within an image's planes and column matrix.
  // An empty batch stays with cuDNN as before (the lowerings assume at least one image).
  if (input[0] < 1 || out_h < 1 || out_w < 1 || input[2] * input[3] > kMax31 || (rows + 8) * out_h * out_w > kMax31)
    return ConvLowering::cudnn;
  if (weight[2] == 1 && weight[3] == 1 && g.pad_h == 0 && g.pad_w == 0 && (g.stride_h > 1 || g.stride_w > 1))
    return ConvLowering::subsampled;
  const int64_t granule = tensor_core_granule == 0 ? 8 : tensor_core_granule;
  if (input[1] % granule != 0) return ConvLowering::gemm;
  // 1x1 stride 1 without padding: in NCHW a batched GEMM on the data as it lies, where cuDNN's tensor-core
  // kernels transpose to NHWC and back around the product.
  if (weight[2] == 1 && weight[3] == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0)
    return ConvLowering::gemm;
  return ConvLowering::cudnn;
}

}  // namespace

ConvLowering applicable_lowering(const Shape& input, const Shape& weight, const Conv2dGeometry& g, DType dtype) {
  return lowering_for(input, weight, g, tensor_core_granule(dtype));
}

void clear_conv_algorithm_cache() {
  AlgorithmCache& cache = algorithm_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.clear();
}

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
  // "gemm": im2col + GEMMs, or plain GEMMs where the data already is the column matrix (1x1 stride 1).
  std::string text = choice.lowering == ConvLowering::gemm ? std::string("gemm")
                                                           : detail::concat("algo ", choice.algorithm, " ", math);
  if (choice.lowering == ConvLowering::subsampled) text = detail::concat("subsampled, stride-1 ", text);
  if (!choice.deterministic) text += " non-deterministic";
  if (choice.lowered_ms < 0.0f) return text;
  char times[96];
  if (choice.cudnn_ms < 0.0f)
    std::snprintf(times, sizeof times, " (forced: %.3f ms)", choice.lowered_ms);
  else
    std::snprintf(times, sizeof times, " (lowered %.3f ms vs cudnn %.3f ms)", choice.lowered_ms, choice.cudnn_ms);
  return text + times;
}

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
                                        const Conv2dGeometry& geometry) {
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
        return search(
            lowering,
            [&] {
              return find_backward_input(
                  handles.cudnn, ConvDescriptors(grad_input.shape(), weight.shape(), grad_out.shape(), geometry, dtype),
                  filter.data_ptr(), grad_out.data_ptr(), grad_input.data_ptr(), device);
            },
            [&] {
              ConvAlgorithmChoice lowered;
              if (lowering == ConvLowering::subsampled) {
                Tensor sampled = Tensor::empty(sampled_shape, dtype, device);
                lowered = find_backward_input(
                    handles.cudnn, ConvDescriptors(sampled_shape, weight.shape(), grad_out.shape(), kUnitStride, dtype),
                    weight.data_ptr(), grad_out.data_ptr(), sampled.data_ptr(), device);
                lowered.lowered_ms =
                    lowered.cudnn_ms + measured_ms([&] { unsubsample(sampled, grad_input, geometry); });
              } else {
                const GemmPlan plan = gemm_plan(grad_input.shape(), weight.shape(), grad_out.shape(), geometry);
                lowered.lowered_ms =
                    measured_ms([&] { gemm_backward_input(handles.cublas, grad_out, weight, grad_input, plan); });
              }
              return lowered;
            });
      });
  const CudnnRun run{handles.cudnn, chosen, device};
  switch (chosen.lowering) {
    case ConvLowering::gemm:
      gemm_backward_input(handles.cublas, grad_out, weight, grad_input,
                          gemm_plan(grad_input.shape(), weight.shape(), grad_out.shape(), geometry));
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
                           filter.data_ptr(), grad_out.data_ptr(), grad_input.data_ptr());
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

// ---- the algorithm cache as records (ops::save_conv_algorithms / load_conv_algorithms) ----
namespace {

// The name and memory of each GPU of this process, by index (one properties query each, no context).
struct GpuIdentity {
  std::string name;
  size_t memory_bytes;
};
std::vector<GpuIdentity> gpu_identities() {
  std::vector<GpuIdentity> gpus;
  for (int d = 0; d < cuda_device_count(); ++d) {
    cudaDeviceProp properties{};
    OPSNN_CUDA_CHECK(cudaGetDeviceProperties(&properties, d));
    gpus.push_back({properties.name, properties.totalGlobalMem});
  }
  return gpus;
}

int algorithm_count(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::forward:
      return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case ConvDirection::backward_input:
      return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    case ConvDirection::backward_weight:
      return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
  return 0;
}

class CudaConvAlgorithmStore final : public ConvAlgorithmStore {
 public:
  std::vector<ConvAlgorithmRecord> records() override {
    std::vector<std::pair<ConvKey, ConvAlgorithmChoice>> entries;
    {
      AlgorithmCache& cache = algorithm_cache();
      std::lock_guard<std::mutex> lock(cache.mutex);
      entries.assign(cache.entries.begin(), cache.entries.end());
    }
    std::vector<ConvAlgorithmRecord> out;
    out.reserve(entries.size());
    const std::vector<GpuIdentity> gpus = entries.empty() ? std::vector<GpuIdentity>() : gpu_identities();
    for (const auto& [key, choice] : entries) {
      ConvAlgorithmRecord r;
      r.device = gpus.at(static_cast<size_t>(key.device)).name;
      r.cudnn_version = static_cast<int64_t>(cudnnGetVersion());
      r.direction = key.direction;
      r.input = Shape(key.input.begin(), key.input.end());
      r.weight = Shape(key.weight.begin(), key.weight.end());
      r.geometry = {key.geometry[0], key.geometry[1], key.geometry[2], key.geometry[3], key.channels_last};
      r.dtype = key.dtype;
      r.math = key.math;
      r.policy = key.policy;
      r.deterministic_setting = key.deterministic;
      r.choice = choice;
      out.push_back(std::move(r));
    }
    return out;
  }

  ConvAlgorithmLoad insert(const std::vector<ConvAlgorithmRecord>& records, const std::string& origin) override {
    const std::vector<GpuIdentity> gpus = gpu_identities();
    const int64_t cudnn_version = static_cast<int64_t>(cudnnGetVersion());
    ConvAlgorithmLoad load;
    AlgorithmCache& cache = algorithm_cache();
    for (size_t i = 0; i < records.size(); ++i) {
      const ConvAlgorithmRecord& r = records[i];
      const ConvAlgorithmChoice& c = r.choice;
      auto fail = [&](const char* field, auto&&... parts) {
        throw DataError(detail::concat(origin, ": field \"entries[", i, "].", field, "\": ", parts...));
      };
      // What would run wrongly rather than fail: a lowering where it does not apply (the granule follows
      // the math the entry was decided under: TF32 tensor cores for f32 only with CUDNN_DEFAULT_MATH).
      const int64_t granule = r.dtype != DType::f32 ? 8 : (r.math == CUDNN_DEFAULT_MATH ? 4 : 0);
      if (c.lowering != ConvLowering::cudnn && lowering_for(r.input, r.weight, r.geometry, granule) != c.lowering)
        fail("lowering", "this lowering does not apply to the entry's convolution");
      if (c.algorithm >= algorithm_count(r.direction))
        fail("algorithm", c.algorithm, " is not a cuDNN algorithm of this direction (there are ",
             algorithm_count(r.direction), ")");
      if (c.math > CUDNN_FMA_MATH) fail("math_type", c.math, " is not a cudnnMathType_t");
      bool applied = false;
      for (int d = 0; d < static_cast<int>(gpus.size()); ++d) {
        if (gpus[d].name != r.device || cudnn_version != r.cudnn_version) continue;
        if (c.workspace_bytes > gpus[d].memory_bytes)
          fail("workspace_bytes", c.workspace_bytes, " is more than the GPU's ", gpus[d].memory_bytes, " bytes");
        const ConvKey key =
            key_of(r.direction, d, r.input, r.weight, r.geometry, r.dtype, r.math, r.policy, r.deterministic_setting);
        std::lock_guard<std::mutex> lock(cache.mutex);
        applied = cache.entries.emplace(key, c).second || applied;
      }
      (applied ? load.applied : load.skipped) += 1;
    }
    return load;
  }
};

}  // namespace

std::unique_ptr<ConvAlgorithmStore> make_cuda_conv_algorithm_store() {
  return std::make_unique<CudaConvAlgorithmStore>();
}

}  // namespace opsnn::ops
