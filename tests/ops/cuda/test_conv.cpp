// Tests of the channel padding in src/ops/cuda/conv.cpp: stem-like convolutions (1, 3 or 5 input
// channels, 7x7 stride 2 pad 3) in f32 with tf32 math, bf16 and f16, with the padded variant forced, off
// and measured, against the CPU twin on the same values, forward, input gradient and weight gradient;
// the cached choice says which variant ran; strict f32 never pads. Compiled in CUDA builds only (it reads
// the CUDA backend's algorithm cache); tagged [cuda]: skipped without a GPU.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "opsnn/core/rng.h"
#include "opsnn/ops/ops.h"
#include "ops/cuda/conv_algorithms.h"
#include "ops/op_test_helpers.h"
#include "support/cuda_test_support.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

bool gpu_missing() { return opsnn::testing::gpu_missing("the CUDA conv channel-padding tests"); }

// Puts the process-wide math and padding settings back, whatever a test set.
struct SettingsReset {
  ~SettingsReset() {
    ops::set_fp32_math(ops::Fp32Math::strict);
    ops::set_conv_channel_padding(ops::ConvChannelPadding::measured);
  }
};

// The data of one stem-like conv: values exactly representable in the dtype under test, so the CPU
// (f32) and the GPU see the same operands and only the GPU's rounding differs.
struct StemCase {
  Tensor input, weight, upstream;  // f32 on the CPU
  ops::Conv2dGeometry geometry;
};

StemCase stem_case(int64_t channels, DType dtype, Generator& generator) {
  StemCase c;
  auto rounded = [&](const Shape& shape, double bound) {
    return Tensor::uniform(shape, -bound, bound, generator, DType::f32).to(dtype).to(DType::f32);
  };
  c.input = rounded({2, channels, 19, 22}, 1.0);
  c.weight = rounded({16, channels, 7, 7}, 0.3);
  c.geometry.stride_h = c.geometry.stride_w = 2;
  c.geometry.pad_h = c.geometry.pad_w = 3;
  c.upstream = rounded({2, 16, 10, 11}, 1.0);
  return c;
}

struct ConvResults {
  Tensor out, grad_input, grad_weight;  // f32 on the CPU
};

ConvResults run_conv(const StemCase& c, DType dtype, Device device) {
  // detach: fresh leaves, so a CPU f32 run (where to() returns the case's own tensors) leaves them untouched.
  Tensor input = c.input.to(dtype).to(device).detach(), weight = c.weight.to(dtype).to(device).detach();
  input.set_requires_grad(true);
  weight.set_requires_grad(true);
  const Tensor out = ops::conv2d(input, weight, Tensor(), c.geometry);
  out.backward(c.upstream.to(dtype).to(device));
  REQUIRE(input.grad().dtype() == dtype);
  REQUIRE(weight.grad().dtype() == dtype);
  return {out.to(kCPU).to(DType::f32), input.grad().to(kCPU).to(DType::f32), weight.grad().to(kCPU).to(DType::f32)};
}

void require_close_to(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what) {
  REQUIRE(actual.shape() == expected.shape());
  const double error = scaled_error(actual, expected);
  std::printf("cuda vs cpu  %-58s max scaled error %.2e (tolerance %.0e)\n", what.c_str(), error, tolerance);
  INFO(what << ": max scaled error " << error << ", tolerance " << tolerance);
  REQUIRE(error <= tolerance);
}

const ops::ConvDirection kDirections[] = {ops::ConvDirection::forward, ops::ConvDirection::backward_input,
                                          ops::ConvDirection::backward_weight};

}  // namespace

TEST_CASE("CUDA stem-like conv2d with padded input channels matches the CPU, forward and both gradients",
          "[cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  struct Precision {
    const char* name;
    DType dtype;
    ops::Fp32Math math;
    int64_t granule;
    double tolerance;  // as the existing tf32 / mixed-precision conv tests
  };
  const Precision precisions[] = {{"tf32", DType::f32, ops::Fp32Math::tf32, 4, 5e-3},
                                  {"bf16", DType::bf16, ops::Fp32Math::strict, 8, 2e-2},
                                  {"f16", DType::f16, ops::Fp32Math::strict, 8, 5e-3}};
  const std::pair<const char*, ops::ConvChannelPadding> paddings[] = {
      {"padding always", ops::ConvChannelPadding::always},
      {"padding never", ops::ConvChannelPadding::never},
      {"padding measured", ops::ConvChannelPadding::measured}};
  Generator generator(41);
  for (const Precision& precision : precisions) {
    ops::set_fp32_math(precision.math);
    for (int64_t channels : {1, 3, 5}) {
      const StemCase c = stem_case(channels, precision.dtype, generator);
      const ConvResults expected = run_conv(c, DType::f32, kCPU);
      for (const auto& [padding_name, padding] : paddings) {
        ops::set_conv_channel_padding(padding);
        const std::string name =
            std::string("stem ") + precision.name + " C=" + std::to_string(channels) + " " + padding_name;
        const ConvResults actual = run_conv(c, precision.dtype, kGpu);
        require_close_to(actual.out, expected.out, precision.tolerance, name + " forward");
        require_close_to(actual.grad_input, expected.grad_input, precision.tolerance, name + " grad input");
        require_close_to(actual.grad_weight, expected.grad_weight, precision.tolerance, name + " grad weight");
        const int64_t padded_channels = (channels + precision.granule - 1) / precision.granule * precision.granule;
        for (ops::ConvDirection direction : kDirections) {
          const auto choice = ops::cached_conv_algorithm(direction, kGpu, c.input.shape(), c.weight.shape(), c.geometry,
                                                         precision.dtype);
          REQUIRE(choice.has_value());
          INFO(name << ", direction " << static_cast<int>(direction) << ": " << ops::describe(*choice));
          if (padding == ops::ConvChannelPadding::always) {
            CHECK(choice->padded_channels == padded_channels);
          } else if (padding == ops::ConvChannelPadding::never) {
            CHECK(choice->padded_channels == 0);
            CHECK(choice->padded_ms < 0.0f);
          } else {  // measured: both variants timed, whichever won runs
            CHECK(choice->padded_ms >= 0.0f);
            CHECK((choice->padded_channels == 0 || choice->padded_channels == padded_channels));
          }
        }
      }
    }
  }
}

TEST_CASE("CUDA conv2d pads nothing under strict f32 math or when the channels fit the granule", "[cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  ops::set_conv_channel_padding(ops::ConvChannelPadding::always);
  Generator generator(42);
  struct Unpadded {
    const char* name;
    DType dtype;
    ops::Fp32Math math;
    int64_t channels;
    double tolerance;
  };
  const Unpadded cases[] = {{"strict f32 C=3", DType::f32, ops::Fp32Math::strict, 3, 1e-4},
                            {"tf32 C=4", DType::f32, ops::Fp32Math::tf32, 4, 5e-3},
                            {"bf16 C=8", DType::bf16, ops::Fp32Math::strict, 8, 2e-2}};
  for (const Unpadded& u : cases) {
    ops::set_fp32_math(u.math);
    const StemCase c = stem_case(u.channels, u.dtype, generator);
    const ConvResults expected = run_conv(c, DType::f32, kCPU);
    const ConvResults actual = run_conv(c, u.dtype, kGpu);
    const std::string name = std::string("stem ") + u.name + " padding always";
    require_close_to(actual.out, expected.out, u.tolerance, name + " forward");
    require_close_to(actual.grad_input, expected.grad_input, u.tolerance, name + " grad input");
    require_close_to(actual.grad_weight, expected.grad_weight, u.tolerance, name + " grad weight");
    for (ops::ConvDirection direction : kDirections) {
      const auto choice =
          ops::cached_conv_algorithm(direction, kGpu, c.input.shape(), c.weight.shape(), c.geometry, u.dtype);
      REQUIRE(choice.has_value());
      INFO(name << ", direction " << static_cast<int>(direction) << ": " << ops::describe(*choice));
      CHECK(choice->padded_channels == 0);
      CHECK(choice->padded_ms < 0.0f);  // never tried
    }
  }
}
