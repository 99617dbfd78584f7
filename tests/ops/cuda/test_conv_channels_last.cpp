// Tests of channels-last (NHWC) conv2d on the CUDA backend (src/ops/cuda/conv.cpp, conv_cudnn.h: NHWC cuDNN
// descriptors, the KRSC weight copy and the weight gradient transposed back) against the CPU's channels-last conv2d
// (the NCHW kernels on permuted operands), forward, input gradient, weight gradient and bias gradient,
// in strict f32, bf16 and f16, with the tolerances of the NCHW tests (test_conv.cpp). Shapes: 3x3 pad 1,
// 3x3 stride 2, 1x1 (also on 13 channels), strided 1x1 (which NCHW lowers by subsampling), input
// channels no multiple of 8, a 7x7/2 stem-like one with 3 channels, and a 3x3 one on 2800 channels, whose
// [C, R*S] weight matrices are too large for the shared-memory transpose of the KRSC copies (the generic
// strided copy runs instead; the others take the transpose kernel), and a 1x1 one from 1024 to 1024
// channels on 13 images, whose weight gradient the GEMM lowering sums from partials of several images each
// (on an H200: 4 partials of 3 images and one of the last image). Only the 1x1 stride-1 shapes
// have a lowering (one GEMM per direction on the NHWC data, which policy `always` runs); every other
// shape stays with cuDNN in every direction, the lowering never tried. Compiled in CUDA builds only;
// tagged [cuda]: skipped without a GPU.
#include <string>
#include <vector>

#include "ops/cuda/conv_algorithms.h"
#include "ops/op_test_helpers.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

bool gpu_missing() { return opsnn::testing::gpu_missing("the CUDA channels-last conv tests"); }

struct SettingsReset {
  ~SettingsReset() {
    ops::set_fp32_math(ops::Fp32Math::strict);
    ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::measured);
  }
};

struct Precision {
  const char* name;
  DType dtype;
  double tolerance;  // as the NCHW conv tests
};
const Precision kPrecisions[] = {{"f32", DType::f32, 1e-4}, {"bf16", DType::bf16, 2e-2}, {"f16", DType::f16, 5e-3}};

// Operands of one NHWC convolution, values exact in the dtype under test, f32 on the CPU.
struct Case {
  Tensor input, weight, bias, upstream;
  ops::Conv2dGeometry geometry;
};

Case make_case(const Shape& nhwc_input, const Shape& weight, int64_t stride, int64_t pad, DType dtype,
               Generator& generator) {
  auto rounded = [&](const Shape& shape, double bound) {
    return Tensor::uniform(shape, -bound, bound, generator, DType::f32).to(dtype).to(DType::f32);
  };
  Case c;
  c.geometry.stride_h = c.geometry.stride_w = stride;
  c.geometry.pad_h = c.geometry.pad_w = pad;
  c.geometry.channels_last = true;
  c.input = rounded(nhwc_input, 1.0);
  c.weight = rounded(weight, 0.3);
  c.bias = rounded({weight[0]}, 0.5);
  const int64_t out_h = (nhwc_input[1] + 2 * pad - weight[2]) / stride + 1;
  const int64_t out_w = (nhwc_input[2] + 2 * pad - weight[3]) / stride + 1;
  c.upstream = rounded({nhwc_input[0], out_h, out_w, weight[0]}, 1.0);
  return c;
}

struct Results {
  Tensor out, grad_input, grad_weight, grad_bias;  // f32 on the CPU
};

Results run(const Case& c, DType dtype, Device device) {
  Tensor input = c.input.to(dtype).to(device).detach(), weight = c.weight.to(dtype).to(device).detach(),
         bias = c.bias.to(dtype).to(device).detach();
  for (Tensor* t : {&input, &weight, &bias}) t->set_requires_grad(true);
  const Tensor out = ops::conv2d(input, weight, bias, c.geometry);
  REQUIRE(out.shape() == c.upstream.shape());
  out.backward(c.upstream.to(dtype).to(device));
  auto host = [](const Tensor& t) { return t.to(kCPU).to(DType::f32); };
  return {host(out), host(input.grad()), host(weight.grad()), host(bias.grad())};
}

void require_close_to(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what) {
  REQUIRE(actual.shape() == expected.shape());
  const double error = scaled_error(actual, expected);
  INFO(what << ": max scaled error " << error << ", tolerance " << tolerance);
  REQUIRE(error <= tolerance);
}

const ops::ConvDirection kDirections[] = {ops::ConvDirection::forward, ops::ConvDirection::backward_input,
                                          ops::ConvDirection::backward_weight};

}  // namespace

TEST_CASE("CUDA channels-last conv2d matches the CPU, forward and all gradients, lowering only 1x1 stride 1 to GEMMs",
          "[cuda][ops][conv]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  Generator generator(71);
  struct Shapes {
    const char* name;
    Shape input, weight;  // input NHWC
    int64_t stride, pad;
  };
  const Shapes cases[] = {{"3x3 pad 1 C=16", {2, 9, 7, 16}, {24, 16, 3, 3}, 1, 1},
                          {"3x3 stride 2 C=32", {2, 10, 9, 32}, {16, 32, 3, 3}, 2, 1},
                          {"1x1 C=24", {3, 7, 5, 24}, {32, 24, 1, 1}, 1, 0},
                          {"1x1 C=13", {3, 5, 6, 13}, {7, 13, 1, 1}, 1, 0},
                          {"1x1 stride 2 C=16", {2, 9, 11, 16}, {24, 16, 1, 1}, 2, 0},
                          {"3x3 pad 1 C=13", {2, 6, 5, 13}, {8, 13, 3, 3}, 1, 1},
                          {"1x1 stride 2 C=12", {2, 8, 7, 12}, {8, 12, 1, 1}, 2, 0},
                          {"7x7 stride 2 C=3", {2, 19, 22, 3}, {16, 3, 7, 7}, 2, 3},
                          {"3x3 pad 1 C=2800", {1, 3, 4, 2800}, {5, 2800, 3, 3}, 1, 1},
                          {"1x1 C=1024 13 images", {13, 2, 3, 1024}, {1024, 1024, 1, 1}, 1, 0}};
  for (const Precision& precision : kPrecisions)
    for (const Shapes& s : cases) {
      const Case c = make_case(s.input, s.weight, s.stride, s.pad, precision.dtype, generator);
      // Only a 1x1 stride-1 unpadded convolution has a lowering in NHWC: one GEMM per direction.
      const bool gemm = s.weight[2] == 1 && s.stride == 1 && s.pad == 0;
      REQUIRE(ops::applicable_lowering(c.input.shape(), c.weight.shape(), c.geometry, precision.dtype) ==
              (gemm ? ops::ConvLowering::gemm : ops::ConvLowering::cudnn));
      const Results expected = run(c, DType::f32, kCPU);
      for (ops::ConvLoweringPolicy policy : {ops::ConvLoweringPolicy::measured, ops::ConvLoweringPolicy::always}) {
        ops::set_conv_lowering_policy(policy);
        const std::string name = std::string(s.name) + " " + precision.name +
                                 (policy == ops::ConvLoweringPolicy::always ? " lowering always" : "");
        const Results actual = run(c, precision.dtype, kGpu);
        require_close_to(actual.out, expected.out, precision.tolerance, name + " forward");
        require_close_to(actual.grad_input, expected.grad_input, precision.tolerance, name + " grad input");
        require_close_to(actual.grad_weight, expected.grad_weight, precision.tolerance, name + " grad weight");
        require_close_to(actual.grad_bias, expected.grad_bias, precision.tolerance, name + " grad bias");
        for (ops::ConvDirection direction : kDirections) {
          const auto choice = ops::cached_conv_algorithm(direction, kGpu, c.input.shape(), c.weight.shape(), c.geometry,
                                                         precision.dtype);
          REQUIRE(choice.has_value());
          INFO(name << ", direction " << static_cast<int>(direction) << ": " << ops::describe(*choice));
          if (!gemm) {
            CHECK(choice->lowering == ops::ConvLowering::cudnn);
            CHECK(choice->lowered_ms < 0.0f);  // never tried
          } else if (policy == ops::ConvLoweringPolicy::always) {
            CHECK(choice->lowering == ops::ConvLowering::gemm);
          } else {
            CHECK(choice->lowered_ms >= 0.0f);  // timed against cuDNN
          }
        }
      }
    }
}

TEST_CASE("CUDA channels-last and NCHW conv2d keep separate algorithm choices and agree", "[cuda][ops][conv]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  Generator generator(72);
  // The same problem in both layouts (an NHWC [2, 8, 8, 16] input is an NCHW [2, 8, 8, 16] shape too, so
  // the cache key must tell the layouts apart): values agree to the bf16 tolerance.
  const Case c = make_case({2, 8, 8, 16}, {16, 16, 3, 3}, 1, 1, DType::bf16, generator);
  const Results nhwc = run(c, DType::bf16, kGpu);
  Case nchw_case = c;
  nchw_case.geometry.channels_last = false;
  nchw_case.input = c.input.permute({0, 3, 1, 2}).contiguous();
  nchw_case.upstream = c.upstream.permute({0, 3, 1, 2}).contiguous();
  const Results nchw = run(nchw_case, DType::bf16, kGpu);
  require_close_to(nhwc.out, nchw.out.permute({0, 2, 3, 1}).contiguous(), 2e-2, "NHWC vs NCHW forward");
  require_close_to(nhwc.grad_input, nchw.grad_input.permute({0, 2, 3, 1}).contiguous(), 2e-2,
                   "NHWC vs NCHW grad input");
  require_close_to(nhwc.grad_weight, nchw.grad_weight, 2e-2, "NHWC vs NCHW grad weight");
  // A square input whose NHWC shape reads as an NCHW one: both layouts cached under the same shape.
  const Case square = make_case({2, 16, 16, 16}, {16, 16, 3, 3}, 1, 1, DType::bf16, generator);
  Case square_nchw = square;
  square_nchw.geometry.channels_last = false;
  const Results from_nhwc = run(square, DType::bf16, kGpu);
  const Results from_nchw = run(square_nchw, DType::bf16, kGpu);  // another function of the same values
  for (bool channels_last : {false, true}) {
    ops::Conv2dGeometry g = square.geometry;
    g.channels_last = channels_last;
    CHECK(ops::cached_conv_algorithm(ops::ConvDirection::forward, kGpu, square.input.shape(), square.weight.shape(), g,
                                     DType::bf16)
              .has_value());
  }
  const Results cpu_nchw = run(square_nchw, DType::f32, kCPU), cpu_nhwc = run(square, DType::f32, kCPU);
  require_close_to(from_nchw.out, cpu_nchw.out, 2e-2, "square NCHW forward");
  require_close_to(from_nhwc.out, cpu_nhwc.out, 2e-2, "square NHWC forward");
}
