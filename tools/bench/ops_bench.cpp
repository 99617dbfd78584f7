// `opsnn-bench ops`: CPU GFLOP/s of GEMM and of conv2d forward, input gradient, weight gradient and
// forward+backward on ResNet layer shapes, each next to Eigen's own f32 GEMM rate measured in the run (in the CPU
// kernel variant in use).
#include <omp.h>

#include <Eigen/Core>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench.h"
#include "core/cpu_variants.h"
#include "opsnn/core/error.h"
#include "opsnn/core/rng.h"
#include "opsnn/core/tensor.h"
#include "opsnn/ops/backend.h"

namespace opsnn::bench {
namespace {

constexpr int64_t kGemmSize = 1024;  // square f32 GEMM: large enough for Eigen to run near its peak

struct ConvLayer {
  const char* name;
  int64_t batch, in_channels, out_channels, size, kernel, stride, pad;
};

// ResNet layers at batch 8: the three 3x3 stages that dominate ResNet-18/34, a bottleneck 1x1 of
// ResNet-50 and the 7x7 stride-2 stem.
const std::vector<ConvLayer> kLayers = {
    {"3x3 64->64 56x56", 8, 64, 64, 56, 3, 1, 1},           {"3x3 128->128 28x28", 8, 128, 128, 28, 3, 1, 1},
    {"3x3 256->256 14x14", 8, 256, 256, 14, 3, 1, 1},       {"1x1 256->64 56x56", 8, 256, 64, 56, 1, 1, 0},
    {"7x7/2 3->64 224x224 (stem)", 8, 3, 64, 224, 7, 2, 3},
};

double gflops(double flops, double seconds) { return flops / seconds * 1e-9; }

void print_row(const std::string& what, double rate, double reference) {
  std::printf("  %-42s %9.1f %9.0f%%\n", what.c_str(), rate, 100.0 * rate / reference);
}

// Eigen's GEMM on plain buffers, as compiled into the CPU kernel variant in use (cpu::matmul): the
// reference without opsnn's tensor and op layers, with the same vector instructions as opsnn's gemm.
double eigen_gemm_rate(int repeats) {
  const size_t count = static_cast<size_t>(kGemmSize * kGemmSize);
  std::vector<float> a(count), b(count), c(count);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& x : a) x = uniform(rng);
  for (float& x : b) x = uniform(rng);
  opsnn::cpu::Matmul<float> product;
  product.a = a.data();
  product.lda = kGemmSize;
  product.b = b.data();
  product.ldb = kGemmSize;
  product.out = c.data();
  product.ldo = kGemmSize;
  product.m = product.n = product.k = kGemmSize;
  const double seconds = median_seconds([&] { opsnn::cpu::matmul(product); }, 1, repeats);
  return gflops(2.0 * kGemmSize * kGemmSize * kGemmSize, seconds);
}

double opsnn_gemm_rate(ops::Backend& backend, Generator& generator, int repeats) {
  const Tensor a = Tensor::uniform({kGemmSize, kGemmSize}, -1, 1, generator);
  const Tensor b = Tensor::uniform({kGemmSize, kGemmSize}, -1, 1, generator);
  Tensor c = Tensor::empty({kGemmSize, kGemmSize});
  const double seconds = median_seconds([&] { backend.gemm(a, false, b, false, c, 1.0, 0.0); }, 1, repeats);
  return gflops(2.0 * kGemmSize * kGemmSize * kGemmSize, seconds);
}

// Prints the layer's rows and returns {flops, seconds} of its forward+backward.
std::pair<double, double> bench_layer(const ConvLayer& layer, ops::Backend& backend, Generator& generator, int repeats,
                                      double reference) {
  const int64_t out_size = (layer.size + 2 * layer.pad - layer.kernel) / layer.stride + 1;
  const Tensor input = Tensor::uniform({layer.batch, layer.in_channels, layer.size, layer.size}, -1, 1, generator);
  const Tensor weight =
      Tensor::uniform({layer.out_channels, layer.in_channels, layer.kernel, layer.kernel}, -0.1, 0.1, generator);
  const Tensor bias = Tensor::zeros({layer.out_channels});
  const Tensor grad_out = Tensor::uniform({layer.batch, layer.out_channels, out_size, out_size}, -1, 1, generator);
  Tensor out = Tensor::empty(grad_out.shape());
  Tensor grad_input = Tensor::empty(input.shape());
  Tensor grad_weight = Tensor::empty(weight.shape());
  ops::Conv2dGeometry geometry;
  geometry.stride_h = geometry.stride_w = layer.stride;
  geometry.pad_h = geometry.pad_w = layer.pad;

  // Each of the three products does 2 * N * O * OH * OW * C * KH * KW flops.
  const double flops = 2.0 * static_cast<double>(layer.batch * layer.out_channels * out_size * out_size *
                                                 layer.in_channels * layer.kernel * layer.kernel);
  auto forward = [&] { backend.conv2d_forward(input, weight, bias, out, geometry); };
  auto backward_input = [&] { backend.conv2d_backward_input(grad_out, weight, grad_input, geometry, false); };
  auto backward_weight = [&] { backend.conv2d_backward_weight(grad_out, input, grad_weight, geometry); };
  const double forward_s = median_seconds(forward, 1, repeats);
  const double input_s = median_seconds(backward_input, 1, repeats);
  const double weight_s = median_seconds(backward_weight, 1, repeats);
  const double total_s = median_seconds(
      [&] {
        forward();
        backward_input();
        backward_weight();
      },
      0, repeats);
  std::printf("conv2d %s (batch %lld, %.2f GFLOP per pass)\n", layer.name, static_cast<long long>(layer.batch),
              flops * 1e-9);
  print_row("forward", gflops(flops, forward_s), reference);
  print_row("backward input", gflops(flops, input_s), reference);
  print_row("backward weight", gflops(flops, weight_s), reference);
  print_row("forward+backward", gflops(3.0 * flops, total_s), reference);
  return {3.0 * flops, total_s};
}

int run(const std::vector<std::string>& args) {
  for (const std::string& arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: opsnn-bench ops [--threads N] [--repeats 5]\n");
      return 0;
    }
  check_options(args, {"--threads", "--repeats"});
  const int threads = parse_positive(args, "--threads", omp_get_max_threads());
  const int repeats = parse_positive(args, "--repeats", 5);
  omp_set_num_threads(threads);
  ops::Backend& backend = ops::backend_for(kCPU);
  Generator generator(2024);

  const double reference = eigen_gemm_rate(repeats);
  std::printf("opsnn-bench ops: CPU, f32, %d thread(s), median of %d runs; Eigen %d.%d.%d, CPU kernels %s\n", threads,
              repeats, EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION, opsnn::cpu::cpu_kernels().name);
  std::printf("  %-42s %9s %10s\n", "", "GFLOP/s", "of Eigen");
  print_row("Eigen GEMM " + std::to_string(kGemmSize) + "^3 (reference)", reference, reference);
  print_row("opsnn gemm " + std::to_string(kGemmSize) + "^3", opsnn_gemm_rate(backend, generator, repeats), reference);
  double total_flops = 0.0, total_seconds = 0.0;
  for (const ConvLayer& layer : kLayers) {
    const auto [flops, seconds] = bench_layer(layer, backend, generator, repeats, reference);
    total_flops += flops;
    total_seconds += seconds;
  }
  std::printf("conv2d all layers above\n");
  print_row("forward+backward", gflops(total_flops, total_seconds), reference);
  return 0;
}

Registration registration{
    {"ops", "CPU GEMM and conv2d GFLOP/s on ResNet shapes vs Eigen's GEMM [--threads N] [--repeats N]", run}};

}  // namespace
}  // namespace opsnn::bench
