// The algorithm search of CUDA conv2d (NCHW or NHWC input, OIHW weight; the entry points are conv.cpp's):
// conv_search.h's cache, keys and cudnnFind wrappers, the lowering policy setting, and conv_algorithms.h's
// applicable_lowering, cached_conv_algorithm and describe. Each direction (forward, input gradient, weight
// gradient) of each shape is decided once (cached per shape, dtype, math and lowering policy): cuDNN's
// fastest algorithm from cudnnFind*Ex (on our own buffers, workspace from the stream-ordered pool), or, for
// the shapes where NCHW cuDNN falls back to slow legacy kernels, a lowering (conv_algorithms.h; host side
// in conv_lowerings.cpp, kernels in conv_lowering.cu):
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
#include "ops/cuda/conv_search.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/conv_algorithms.h"
#include "ops/cuda/conv_cudnn.h"

namespace opsnn::ops {
namespace {

// Workspace the algorithm search may offer cuDNN: at most this, and at most a quarter of free memory.
constexpr size_t kMaxSearchWorkspaceBytes = size_t{512} << 20;

std::atomic<ConvLoweringPolicy> lowering_policy_setting{ConvLoweringPolicy::measured};

std::array<int64_t, 4> four(const Shape& shape) { return {shape[0], shape[1], shape[2], shape[3]}; }

size_t search_workspace_budget(size_t largest_requirement) {
  size_t free_bytes = 0, total_bytes = 0;
  OPSNN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return std::min({largest_requirement, kMaxSearchWorkspaceBytes, free_bytes / 4});
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
  if (fastest < 0)
    throw Error(opsnn::detail::concat("cuDNN found no working ", what, " algorithm for this convolution"));
  ConvAlgorithmChoice found;
  found.algorithm = static_cast<int>(results[fastest].algo);
  found.math = static_cast<int>(results[fastest].mathType);
  found.workspace_bytes = results[fastest].memory;
  found.cudnn_ms = results[fastest].time;
  found.deterministic = found.cudnn_deterministic = results[fastest].determinism == CUDNN_DETERMINISTIC;
  return found;
}

}  // namespace

namespace detail {

ConvKey key_of(ConvDirection direction, int device, const Shape& input, const Shape& weight, const Conv2dGeometry& g,
               DType dtype, int math, ConvLoweringPolicy policy, bool deterministic) {
  return {direction,       device, four(input), four(weight), {g.stride_h, g.stride_w, g.pad_h, g.pad_w},
          g.channels_last, dtype,  math,        policy,       deterministic};
}

ConvKey make_key(ConvDirection direction, int device, const Shape& input, const Shape& weight, const Conv2dGeometry& g,
                 DType dtype) {
  return key_of(direction, device, input, weight, g, dtype, static_cast<int>(allowed_math(dtype)),
                conv_lowering_policy(), conv_deterministic());
}

AlgorithmCache& algorithm_cache() {
  static AlgorithmCache instance;
  return instance;
}

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

}  // namespace detail

using namespace detail;

void set_conv_lowering_policy(ConvLoweringPolicy policy) { lowering_policy_setting.store(policy); }
ConvLoweringPolicy conv_lowering_policy() { return lowering_policy_setting.load(); }

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
  std::string text = choice.lowering == ConvLowering::gemm
                         ? std::string("gemm")
                         : opsnn::detail::concat("algo ", choice.algorithm, " ", math);
  if (choice.lowering == ConvLowering::subsampled) text = opsnn::detail::concat("subsampled, stride-1 ", text);
  if (!choice.deterministic) text += " non-deterministic";
  if (choice.lowered_ms < 0.0f) return text;
  char times[96];
  if (choice.cudnn_ms < 0.0f)
    std::snprintf(times, sizeof times, " (forced: %.3f ms)", choice.lowered_ms);
  else
    std::snprintf(times, sizeof times, " (lowered %.3f ms vs cudnn %.3f ms)", choice.lowered_ms, choice.cudnn_ms);
  return text + times;
}

}  // namespace opsnn::ops
