// opsnn-bench batchnorm: the CUDA batch-norm kernels (src/ops/cuda/norm.cu) on ResNet-50's BatchNorm
// shapes (batch 256 by default): milliseconds and effective bandwidth of the training forward (reads x
// twice, writes once), the backward (reads g and x twice, writes once) and the eval forward (reads
// once, writes once), next to a device-to-device copy of the same tensor timed in the same run, the
// bandwidth one streaming pass can reach. --channels-last lays each activation out as the channels-last
// ResNets hand it to batch norm, [batch * H * W, channels] (norm_rows.cu's kernels). In NCHW it then
// times the stem's batch norm, relu and max pool, unfused and fused (norm_pool.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/cuda/cuda_bench.h"
#include "opsnn/core/error.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/backend.h"

namespace opsnn::bench {
namespace {

struct Layer {
  const char* name;
  int64_t channels, side;
};

// The BatchNorm inputs of ResNet-50 at 224x224: the stem, then each stage's bottleneck width and output.
const std::vector<Layer> kLayers = {{"stem", 64, 112},        {"layer1", 64, 56},      {"layer1 out", 256, 56},
                                    {"layer2", 128, 28},      {"layer2 out", 512, 28}, {"layer3", 256, 14},
                                    {"layer3 out", 1024, 14}, {"layer4", 512, 7},      {"layer4 out", 2048, 7}};

DType parse_dtype(const std::string& text) {
  if (text == "f32") return DType::f32;
  if (text == "bf16") return DType::bf16;
  if (text == "f16") return DType::f16;
  throw ConfigError("--dtype: expected f32, bf16 or f16, got '" + text + "'");
}

// The stem's batch norm, relu and 3x3/2 max pool in training, forward and backward: the unfused kernels
// (batch_norm_relu's, max pooling's) beside the fused pair of ops::batch_norm_relu_max_pool2d.
void stem_tail(ops::Backend& backend, Device gpu, int batch, int repeats, DType dtype, Generator& generator) {
  const int64_t channels = 64, side = 112, pooled = 56;
  const Shape shape{batch, channels, side, side}, pooled_shape{batch, channels, pooled, pooled};
  const Shape channel_shape{channels};
  ops::Pool2dGeometry pool;
  pool.kernel_h = pool.kernel_w = 3;
  pool.pad_h = pool.pad_w = 1;
  const Tensor x = Tensor::uniform(shape, -1.0, 1.0, generator, dtype, gpu);
  const Tensor g = Tensor::uniform(pooled_shape, -1.0, 1.0, generator, dtype, gpu);
  const Tensor gamma = Tensor::ones(channel_shape, DType::f32, gpu),
               beta = Tensor::zeros(channel_shape, DType::f32, gpu);
  Tensor running_mean = Tensor::zeros(channel_shape, DType::f32, gpu),
         running_var = Tensor::ones(channel_shape, DType::f32, gpu);
  Tensor save_mean = Tensor::empty(channel_shape, DType::f32, gpu),
         save_invstd = Tensor::empty(channel_shape, DType::f32, gpu);
  Tensor grad_gamma = Tensor::empty(channel_shape, DType::f32, gpu),
         grad_beta = Tensor::empty(channel_shape, DType::f32, gpu);
  Tensor relu_out = Tensor::empty(shape, dtype, gpu), relu_grad = Tensor::empty(shape, dtype, gpu);
  Tensor grad_input = Tensor::empty(shape, dtype, gpu);
  Tensor out = Tensor::empty(pooled_shape, dtype, gpu), indices = Tensor::empty(pooled_shape, DType::i32, gpu);
  Tensor offsets = Tensor::empty(pooled_shape, DType::u8, gpu), no_masked_grad;
  const double unfused_forward = mean_ms(
      [&] {
        backend.batch_norm_forward_train(x, gamma, beta, running_mean, running_var, 0.1, 1e-5, true, Tensor(), {},
                                         relu_out, save_mean, save_invstd);
        backend.max_pool2d_forward(relu_out, out, indices, pool);
      },
      repeats);
  const double unfused_backward = mean_ms(
      [&] {
        backend.max_pool2d_backward(g, indices, relu_grad, pool);
        backend.batch_norm_backward(relu_grad, Tensor(), x, gamma, beta, save_mean, save_invstd, grad_input, grad_gamma,
                                    grad_beta, no_masked_grad, false);
      },
      repeats);
  const double fused_forward = mean_ms(
      [&] {
        backend.batch_norm_relu_max_pool2d_forward_train(x, gamma, beta, running_mean, running_var, 0.1, 1e-5, pool,
                                                         out, offsets, save_mean, save_invstd);
      },
      repeats);
  const double fused_backward = mean_ms(
      [&] {
        backend.batch_norm_relu_max_pool2d_backward(g, offsets, x, gamma, beta, save_mean, save_invstd, pool,
                                                    grad_input, grad_gamma, grad_beta, false);
      },
      repeats);
  std::printf("stem tail (batch norm + relu + max pool 3x3/2, training) %s: ms\n", shape_str(shape).c_str());
  std::printf("  %-10s %10s %10s %10s\n", "", "forward", "backward", "total");
  std::printf("  %-10s %10.3f %10.3f %10.3f\n", "unfused", unfused_forward, unfused_backward,
              unfused_forward + unfused_backward);
  std::printf("  %-10s %10.3f %10.3f %10.3f\n", "fused", fused_forward, fused_backward, fused_forward + fused_backward);
}

int run(const std::vector<std::string>& args) {
  for (const std::string& arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: opsnn-bench batchnorm [--batch 256] [--repeats 20] [--dtype f32|bf16|f16] [--channels-last]\n");
      return 0;
    }
  check_options(args, {"--batch", "--repeats", "--dtype"}, {"--channels-last"});
  const int batch = parse_positive(args, "--batch", 256);
  const int repeats = parse_positive(args, "--repeats", 20);
  const DType dtype = parse_dtype(option(args, "--dtype", "f32"));
  const bool channels_last = std::find(args.begin(), args.end(), "--channels-last") != args.end();
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "opsnn-bench batchnorm: no CUDA device\n");
    return 1;
  }
  const Device gpu(DeviceType::cuda, 0);
  ops::Backend& backend = ops::backend_for(gpu);
  cudaDeviceProp properties{};
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf("opsnn-bench batchnorm: %s, %s data, %s, batch %d, mean of %d calls (GB/s counts every byte moved)\n",
              properties.name, std::string(dtype_name(dtype)).c_str(),
              channels_last ? "channels-last [N*H*W, C]" : "NCHW", batch, repeats);
  std::printf("  %-11s %-20s %10s %7s %10s %7s %10s %7s %10s\n", "layer", "shape", "train ms", "GB/s", "backward ms",
              "GB/s", "eval ms", "GB/s", "copy GB/s");
  Generator generator(0);
  for (const Layer& layer : kLayers) {
    const Shape shape = channels_last ? Shape{batch * layer.side * layer.side, layer.channels}
                                      : Shape{batch, layer.channels, layer.side, layer.side};
    const Shape channel_shape{layer.channels};
    const Tensor x = Tensor::uniform(shape, -1.0, 1.0, generator, dtype, gpu);
    Tensor out = Tensor::empty(shape, dtype, gpu), grad_input = Tensor::empty(shape, dtype, gpu);
    const Tensor gamma = Tensor::ones(channel_shape, DType::f32, gpu),
                 beta = Tensor::zeros(channel_shape, DType::f32, gpu);
    Tensor running_mean = Tensor::zeros(channel_shape, DType::f32, gpu);
    Tensor running_var = Tensor::ones(channel_shape, DType::f32, gpu);
    Tensor save_mean = Tensor::empty(channel_shape, DType::f32, gpu),
           save_invstd = Tensor::empty(channel_shape, DType::f32, gpu);
    Tensor grad_gamma = Tensor::empty(channel_shape, DType::f32, gpu),
           grad_beta = Tensor::empty(channel_shape, DType::f32, gpu);
    Tensor no_masked_grad;
    const double train_ms = mean_ms(
        [&] {
          backend.batch_norm_forward_train(x, gamma, beta, running_mean, running_var, 0.1, 1e-5, false, Tensor(), {},
                                           out, save_mean, save_invstd);
        },
        repeats);
    // x stands in for the upstream gradient: the kernels' cost does not depend on the values.
    const double backward_ms = mean_ms(
        [&] {
          backend.batch_norm_backward(x, Tensor(), x, gamma, Tensor(), save_mean, save_invstd, grad_input, grad_gamma,
                                      grad_beta, no_masked_grad, false);
        },
        repeats);
    const double eval_ms = mean_ms(
        [&] { backend.batch_norm_forward_eval(x, gamma, beta, running_mean, running_var, 1e-5, false, Tensor(), out); },
        repeats);
    const double copy_ms = mean_ms(
        [&] {
          BENCH_CUDA_CHECK(
              cudaMemcpyAsync(out.data_ptr(), x.data_ptr(), x.nbytes(), cudaMemcpyDeviceToDevice, nullptr));
        },
        repeats);
    const double bytes = static_cast<double>(x.nbytes());
    auto rate = [&](double passes, double ms) { return passes * bytes / (ms * 1e-3) * 1e-9; };
    std::printf("  %-11s %-20s %10.3f %7.0f %10.3f %7.0f %10.3f %7.0f %10.0f\n", layer.name, shape_str(shape).c_str(),
                train_ms, rate(3, train_ms), backward_ms, rate(5, backward_ms), eval_ms, rate(2, eval_ms),
                rate(2, copy_ms));
  }
  if (!channels_last) stem_tail(backend, gpu, batch, repeats, dtype, generator);
  return 0;
}

Registration registration{
    {"batchnorm", "CUDA batch-norm kernels on ResNet-50's shapes: time and bandwidth beside a device copy", run}};

}  // namespace
}  // namespace opsnn::bench
