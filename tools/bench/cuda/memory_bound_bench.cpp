// opsnn-bench memory-bound: achieved GB/s of the memory-bound CUDA kernels of a training step (relu and
// its backward, the residual add, affine, copies with and without conversion, strided copies, gradient
// accumulation, fill) on one ResNet-50 activation (batch 256, 256 channels, 56x56 by default), next to
// cudaMemcpy's device-to-device rate as the reference. Bytes are the minimum each kernel must move.
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
#include "opsnn/core/tensor.h"
#include "opsnn/ops/backend.h"

namespace opsnn::bench {
namespace {

int run(const std::vector<std::string>& args) {
  for (const std::string& arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: opsnn-bench memory-bound [--batch 256] [--channels 256] [--size 56] [--dtype f32|bf16|f16] "
          "[--repeats 20]\n");
      return 0;
    }
  // The options first (exit 2), then the GPU (exit 1), as the other GPU benchmarks do.
  check_options(args, {"--batch", "--channels", "--size", "--dtype", "--repeats"});
  const int64_t batch = parse_positive(args, "--batch", 256), channels = parse_positive(args, "--channels", 256);
  const int64_t size = parse_positive(args, "--size", 56);
  const int repeats = parse_positive(args, "--repeats", 20);
  const std::string dtype_text = option(args, "--dtype", "f32");
  OPSNN_CHECK_AS(ConfigError, dtype_text == "f32" || dtype_text == "bf16" || dtype_text == "f16",
                 "--dtype: expected f32, bf16 or f16, got '", dtype_text, "'");
  const DType dtype = parse_dtype(dtype_text);
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "opsnn-bench memory-bound: no CUDA device\n");
    return 1;
  }
  const Device gpu(DeviceType::cuda, 0);
  const Shape shape = {batch, channels, size, size};
  const int64_t count = shape_numel(shape);
  const double element_bytes = static_cast<double>(dtype_size(dtype));

  Generator generator(7);
  const Tensor a = Tensor::uniform(shape, -1.0, 1.0, generator, dtype, gpu);
  const Tensor b = Tensor::uniform(shape, -1.0, 1.0, generator, dtype, gpu);
  Tensor out = Tensor::empty(shape, dtype, gpu);
  Tensor accumulator = a.clone();
  // Views one element into buffers one element longer: the misaligned case of the vector kernels.
  const Tensor a_shifted = Tensor::uniform({count + 1}, -1.0, 1.0, generator, dtype, gpu).slice(0, 1, count + 1);
  Tensor out_shifted = Tensor::empty({count + 1}, dtype, gpu).slice(0, 1, count + 1);
  Tensor out_flat = out.view({count});
  ops::Backend& backend = ops::backend_for(gpu);
  const DType other = dtype == DType::f32 ? DType::bf16 : DType::f32;

  cudaDeviceProp properties{};
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf("opsnn-bench memory-bound: %s, %s [%lld, %lld, %lld, %lld] (%.0f MB), median of %d runs\n",
              properties.name, std::string(dtype_name(dtype)).c_str(), static_cast<long long>(batch),
              static_cast<long long>(channels), static_cast<long long>(size), static_cast<long long>(size),
              count * element_bytes * 1e-6, repeats);
  std::printf("  %-44s %9s %9s\n", "", "ms", "GB/s");
  auto row = [&](const std::string& what, double bytes_per_element, const std::function<void()>& fn) {
    const double ms = median_ms(fn, 1, repeats);
    std::printf("  %-44s %9.3f %9.0f\n", what.c_str(), ms, bytes_per_element * static_cast<double>(count) / ms * 1e-6);
  };
  const double s = element_bytes, o = static_cast<double>(dtype_size(other));
  row("cudaMemcpyAsync device to device (reference)", 2 * s, [&] {
    BENCH_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), a.data_ptr(), out.nbytes(), cudaMemcpyDeviceToDevice, nullptr));
  });
  row("relu", 2 * s, [&] { backend.relu(a, out); });
  row("relu, input and output misaligned alike", 2 * s, [&] { backend.relu(a_shifted, out_shifted); });
  row("relu, input misaligned, output aligned", 2 * s, [&] { backend.relu(a_shifted, out_flat); });
  row("relu_backward", 3 * s, [&] { backend.relu_backward(a, b, out); });
  row("add (residual)", 3 * s, [&] { backend.binary(ops::BinaryOp::add, a, b, out); });
  row("affine", 2 * s, [&] { backend.affine(a, 0.5, 1.0, out); });
  row("clone (contiguous copy)", 2 * s, [&] { (void)a.clone(); });
  row(std::string("to ") + std::string(dtype_name(other)) + " (converting copy)", s + o, [&] { (void)a.to(other); });
  row("contiguous() of a [N, C, H, W] -> [N, H, W, C] permute", 2 * s, [&] {
    (void)a.permute({0, 2, 3, 1}).contiguous();
  });
  row("contiguous() of a transpose of the last two dims", 2 * s, [&] { (void)a.transpose(2, 3).contiguous(); });
  row("add_ (gradient accumulation, alpha 1)", 3 * s, [&] { accumulator.add_(b); });
  row("add_ with alpha 0.5", 3 * s, [&] { accumulator.add_(b, 0.5); });
  row("fill_(0) (memset)", s, [&] { out.fill_(0.0); });
  row("fill_(1)", s, [&] { out.fill_(1.0); });
  BENCH_CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}

Registration registration{
    {"memory-bound", "GB/s of the CUDA elementwise, copy, accumulate and fill kernels on a ResNet-50 activation", run}};

}  // namespace
}  // namespace opsnn::bench
