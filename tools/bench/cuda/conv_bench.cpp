// opsnn-bench conv: the cuDNN convolutions of src/ops/cuda/conv.cpp on ResNet-50's distinct kinds of
// conv shapes (batch 256 by default): milliseconds and TFLOP/s of the forward, input gradient and weight
// gradient through the Backend, each with what the search picked (and, where a lowering applies - the
// few-channel RGB stem, the strided 1x1 projections - the lowered and cuDNN times it compared).
// --layout nhwc runs them channels-last (NHWC activations, KRSC filter copy; only the 1x1 stride-1 shapes
// have a lowering, plain GEMMs on the NHWC data), as the ResNet residual stages do with
// model.channels_last.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/cuda/cuda_bench.h"
#include "ops/cuda/conv_algorithms.h"
#include "opsnn/core/error.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/backend.h"

namespace opsnn::bench {
namespace {

struct Layer {
  const char* name;
  int64_t in_channels, out_channels, side, kernel, stride;  // square input side, square kernel
};

// The stem, then each stage's 1x1 reduce / 3x3 / 1x1 expand shapes and the strided ones (torchvision's
// v1.5 bottleneck: the stride sits on the 3x3 and the projection shortcut), where NCHW cuDNN is most
// likely to fall back to legacy kernels.
const std::vector<Layer> kLayers = {{"stem 7x7/2", 3, 64, 224, 7, 2},       {"layer1 1x1", 64, 64, 56, 1, 1},
                                    {"layer1 3x3", 64, 64, 56, 3, 1},       {"layer1 1x1 up", 64, 256, 56, 1, 1},
                                    {"layer2 3x3/2", 128, 128, 56, 3, 2},   {"layer2 down/2", 256, 512, 56, 1, 2},
                                    {"layer3 3x3", 256, 256, 14, 3, 1},     {"layer3 1x1", 1024, 256, 14, 1, 1},
                                    {"layer3 down/2", 512, 1024, 28, 1, 2}, {"layer4 down/2", 1024, 2048, 14, 1, 2},
                                    {"layer4 1x1 up", 512, 2048, 7, 1, 1}};

ops::ConvLoweringPolicy parse_lowering(const std::string& text) {
  if (text == "measured") return ops::ConvLoweringPolicy::measured;
  if (text == "always") return ops::ConvLoweringPolicy::always;
  if (text == "never") return ops::ConvLoweringPolicy::never;
  throw ConfigError("--lowering: expected measured, always or never, got '" + text + "'");
}

int run(const std::vector<std::string>& args) {
  for (const std::string& arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: opsnn-bench conv [--dtype f32|tf32|bf16|f16] [--batch 256] [--repeats 10] "
          "[--lowering measured|always|never] [--layout nchw|nhwc] [--layer PREFIX]\n"
          "  f32: strict FMA math; tf32: f32 data with TF32 tensor cores allowed\n"
          "  --lowering: the im2col-GEMM / subsampled lowerings of the stem and strided 1x1 convolutions,\n"
          "             see src/ops/cuda/conv_algorithms.h\n"
          "  --layout: activations NCHW, or NHWC (channels-last: cuDNN's NHWC descriptors; 1x1 stride-1\n"
          "            shapes also timed as plain GEMMs)\n"
          "  --layer: only the layers whose name starts with PREFIX (e.g. stem, layer2)\n");
      return 0;
    }
  check_options(args, {"--dtype", "--batch", "--repeats", "--lowering", "--layout", "--layer"});
  const int batch = parse_positive(args, "--batch", 256);
  const int repeats = parse_positive(args, "--repeats", 10);
  const std::string dtype_text = option(args, "--dtype", "f32");
  OPSNN_CHECK_AS(ConfigError,
                 dtype_text == "f32" || dtype_text == "tf32" || dtype_text == "bf16" || dtype_text == "f16",
                 "--dtype: expected f32, tf32, bf16 or f16, got '", dtype_text, "'");
  const DType dtype = dtype_text == "bf16" ? DType::bf16 : dtype_text == "f16" ? DType::f16 : DType::f32;
  const ops::ConvLoweringPolicy lowering = parse_lowering(option(args, "--lowering", "measured"));
  const std::string layout = option(args, "--layout", "nchw");
  OPSNN_CHECK_AS(ConfigError, layout == "nchw" || layout == "nhwc", "--layout: expected nchw or nhwc, got '", layout,
                 "'");
  const bool channels_last = layout == "nhwc";
  const std::string only = option(args, "--layer", "");
  OPSNN_CHECK_AS(ConfigError,
                 std::any_of(kLayers.begin(), kLayers.end(),
                             [&](const Layer& layer) { return std::string(layer.name).starts_with(only); }),
                 "--layer: no layer name starts with '", only, "'");
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "opsnn-bench conv: no CUDA device\n");
    return 1;
  }
  struct SettingsReset {
    ~SettingsReset() {
      ops::set_fp32_math(ops::Fp32Math::strict);
      ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::measured);
    }
  } reset;
  ops::set_fp32_math(dtype_text == "tf32" ? ops::Fp32Math::tf32 : ops::Fp32Math::strict);
  ops::set_conv_lowering_policy(lowering);
  const Device gpu(DeviceType::cuda, 0);
  ops::Backend& backend = ops::backend_for(gpu);
  cudaDeviceProp properties{};
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf(
      "opsnn-bench conv: %s, %s, %s, batch %d, mean of %d calls after the search; TFLOP/s counts "
      "2*N*K*C*R*S*P*Q with the real C\n",
      properties.name, dtype_text.c_str(), layout.c_str(), batch, repeats);
  Generator generator(0);
  for (const Layer& layer : kLayers) {
    if (!std::string(layer.name).starts_with(only)) continue;
    ops::Conv2dGeometry geometry;
    geometry.stride_h = geometry.stride_w = layer.stride;
    geometry.pad_h = geometry.pad_w = layer.kernel / 2;
    geometry.channels_last = channels_last;
    const int64_t out_side = (layer.side + 2 * geometry.pad_h - layer.kernel) / layer.stride + 1;
    auto activation = [&](int64_t channels, int64_t side) {
      return channels_last ? Shape{batch, side, side, channels} : Shape{batch, channels, side, side};
    };
    const Shape input_shape = activation(layer.in_channels, layer.side);
    const Shape weight_shape{layer.out_channels, layer.in_channels, layer.kernel, layer.kernel};
    const Shape output_shape = activation(layer.out_channels, out_side);
    const Tensor input = Tensor::uniform(input_shape, -1.0, 1.0, generator, dtype, gpu);
    const Tensor weight = Tensor::uniform(weight_shape, -0.1, 0.1, generator, dtype, gpu);
    const Tensor grad_out = Tensor::uniform(output_shape, -1.0, 1.0, generator, dtype, gpu);
    Tensor out = Tensor::empty(output_shape, dtype, gpu), grad_input = Tensor::empty(input_shape, dtype, gpu),
           grad_weight = Tensor::empty(weight_shape, dtype, gpu);
    const double flops = 2.0 * static_cast<double>(batch) *
                         static_cast<double>(layer.out_channels * layer.in_channels) *
                         static_cast<double>(layer.kernel * layer.kernel * out_side * out_side);
    std::printf("  %-14s %s * %s stride %lld\n", layer.name, shape_str(input_shape).c_str(),
                shape_str(weight_shape).c_str(), static_cast<long long>(layer.stride));
    struct Pass {
      const char* name;
      ops::ConvDirection direction;
      std::function<void()> call;
    };
    const std::vector<Pass> passes = {
        {"forward", ops::ConvDirection::forward,
         [&] { backend.conv2d_forward(input, weight, Tensor(), out, geometry); }},
        {"grad input", ops::ConvDirection::backward_input,
         [&] { backend.conv2d_backward_input(grad_out, weight, grad_input, geometry, false); }},
        {"grad weight", ops::ConvDirection::backward_weight,
         [&] { backend.conv2d_backward_weight(grad_out, input, grad_weight, geometry); }}};
    for (const Pass& pass : passes) {
      const double ms = mean_ms(pass.call, repeats);
      const auto choice = ops::cached_conv_algorithm(pass.direction, gpu, input_shape, weight_shape, geometry, dtype);
      std::printf("    %-11s %9.3f ms %7.1f TFLOP/s  %s\n", pass.name, ms, flops / (ms * 1e-3) * 1e-12,
                  choice ? ops::describe(*choice).c_str() : "(no cached algorithm)");
    }
  }
  return 0;
}

Registration registration{
    {"conv", "cuDNN convolutions on ResNet-50's conv shapes: time, TFLOP/s and the algorithm the search picked", run}};

}  // namespace
}  // namespace opsnn::bench
