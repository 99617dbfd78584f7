// Tests of the CUDA conv2d input gradient added in place (conv2d_backward_input with accumulate: cuDNN's beta
// 1, the one-GEMM lowerings' beta 1, a fresh gradient then added for the others), which autograd uses to sum
// a ResNet block's branch gradient into its shortcut's. For NCHW and NHWC shapes that reach every path
// (cuDNN, the direct and channels-last GEMMs, the padded im2col GEMM, the subsampled lowering), under each
// lowering policy, in strict f32 and bf16:
//   - the result equals the gradient given plus the input gradient computed on its own (f32: to the last
//     bit, both being one f32 rounding of the same sum; bf16: within one rounding of the result);
//   - the first call of a shape, which runs the algorithm search, leaves the given gradient's values alone
//     (the search times its trials in a buffer of its own);
//   - it repeats bit for bit.
// Then through autograd: a tensor feeding two convolutions (the second one's input gradient offered the
// first one's) gets the CPU's gradient. Compiled in CUDA builds only; tagged [cuda]: skipped without a GPU.
#include <string>
#include <vector>

#include "ops/cuda/conv_algorithms.h"
#include "ops/op_test_helpers.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/backend.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

bool gpu_missing() { return opsnn::testing::gpu_missing("the CUDA conv accumulation tests"); }

struct SettingsReset {
  ~SettingsReset() {
    ops::set_fp32_math(ops::Fp32Math::strict);
    ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::measured);
  }
};

struct AccumulateCase {
  const char* name;
  Shape input, weight;  // input in the case's layout
  ops::Conv2dGeometry geometry;
};

ops::Conv2dGeometry geometry(int64_t stride, int64_t pad, bool channels_last) {
  ops::Conv2dGeometry g;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  g.channels_last = channels_last;
  return g;
}

Shape output_shape(const AccumulateCase& c) {
  const bool nhwc = c.geometry.channels_last;
  const int64_t h = c.input[nhwc ? 1 : 2], w = c.input[nhwc ? 2 : 3];
  const int64_t out_h = (h + 2 * c.geometry.pad_h - c.weight[2]) / c.geometry.stride_h + 1;
  const int64_t out_w = (w + 2 * c.geometry.pad_w - c.weight[3]) / c.geometry.stride_w + 1;
  return nhwc ? Shape{c.input[0], out_h, out_w, c.weight[0]} : Shape{c.input[0], c.weight[0], out_h, out_w};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         a.to(kCPU).to(DType::f32).to_vector<float>() == b.to(kCPU).to(DType::f32).to_vector<float>();
}

}  // namespace

TEST_CASE("CUDA conv2d input gradient added in place equals the gradient given plus the one computed alone",
          "[cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  ops::Backend& gpu = ops::backend_for(kGpu);
  const AccumulateCase cases[] = {
      {"nchw 3x3 (cuDNN)", {2, 8, 9, 9}, {16, 8, 3, 3}, geometry(1, 1, false)},
      {"nchw 1x1 on 16 channels (direct GEMM)", {2, 16, 7, 7}, {24, 16, 1, 1}, geometry(1, 0, false)},
      {"nchw 1x1 on 13 channels (padded GEMM)", {2, 13, 7, 7}, {24, 13, 1, 1}, geometry(1, 0, false)},
      {"nchw 7x7/2 on 3 channels (im2col GEMM)", {2, 3, 19, 19}, {8, 3, 7, 7}, geometry(2, 3, false)},
      {"nchw strided 1x1 (subsampled)", {2, 16, 9, 9}, {32, 16, 1, 1}, geometry(2, 0, false)},
      {"nhwc 3x3 (cuDNN)", {2, 9, 9, 8}, {16, 8, 3, 3}, geometry(1, 1, true)},
      {"nhwc 1x1 (channels-last GEMM)", {2, 7, 7, 16}, {24, 16, 1, 1}, geometry(1, 0, true)},
      {"nhwc strided 1x1 (cuDNN)", {2, 9, 9, 16}, {32, 16, 1, 1}, geometry(2, 0, true)},
  };
  const std::pair<const char*, ops::ConvLoweringPolicy> policies[] = {{"always", ops::ConvLoweringPolicy::always},
                                                                      {"never", ops::ConvLoweringPolicy::never},
                                                                      {"measured", ops::ConvLoweringPolicy::measured}};
  Generator generator(31);
  for (const AccumulateCase& c : cases) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const Tensor upstream = Tensor::uniform(output_shape(c), -1, 1, generator, DType::f32).to(dtype).to(kGpu);
      const Tensor weight = Tensor::uniform(c.weight, -0.3, 0.3, generator, DType::f32).to(dtype).to(kGpu);
      const Tensor given = Tensor::uniform(c.input, -1, 1, generator, DType::f32).to(dtype).to(kGpu);
      for (const auto& [policy_name, policy] : policies) {
        ops::set_conv_lowering_policy(policy);
        INFO(c.name << ", " << dtype_name(dtype) << ", lowering " << policy_name);
        // In place first: for this policy the shape is new, so this call searches.
        Tensor summed = given.clone();
        gpu.conv2d_backward_input(upstream, weight, summed, c.geometry, true);
        Tensor alone = Tensor::empty(c.input, dtype, kGpu);
        gpu.conv2d_backward_input(upstream, weight, alone, c.geometry, false);
        const auto choice =
            ops::cached_conv_algorithm(ops::ConvDirection::backward_input, kGpu, c.input, c.weight, c.geometry, dtype);
        REQUIRE(choice.has_value());
        INFO("chosen: " << ops::describe(*choice));
        // The sum in f32 of the two operands as stored, rounded once to the dtype.
        const Tensor expected = ops::add(given.to(kCPU).to(DType::f32), alone.to(kCPU).to(DType::f32)).to(dtype);
        if (dtype == DType::f32) {
          CHECK(same_bits(summed, expected));
        } else {
          // The in-place sum rounds the unrounded gradient plus the given value once; the expectation rounds
          // the gradient first: they differ by at most a rounding of the result.
          const double error = scaled_error(summed.to(kCPU).to(DType::f32), expected.to(DType::f32));
          INFO("max scaled error " << error);
          CHECK(error <= 1e-2);
        }
        Tensor again = given.clone();
        gpu.conv2d_backward_input(upstream, weight, again, c.geometry, true);
        CHECK(same_bits(again, summed));
      }
    }
  }
}

TEST_CASE("CUDA autograd: a tensor feeding two convolutions gets both input gradients, as on the CPU", "[cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  Generator generator(7);
  for (bool channels_last : {false, true}) {
    INFO((channels_last ? "nhwc" : "nchw"));
    const Shape input_shape = channels_last ? Shape{2, 8, 8, 16} : Shape{2, 16, 8, 8};
    const Tensor x0 = Tensor::uniform(input_shape, -1, 1, generator, DType::f32);
    const Tensor w1 = Tensor::uniform({16, 16, 1, 1}, -0.3, 0.3, generator, DType::f32);
    const Tensor w2 = Tensor::uniform({16, 16, 3, 3}, -0.3, 0.3, generator, DType::f32);
    const Tensor w3 = Tensor::uniform({32, 16, 1, 1}, -0.3, 0.3, generator, DType::f32);
    auto gradient_of_x = [&](Device device) {
      Tensor x = x0.to(device).detach();
      x.set_requires_grad(true);
      // h has three consumers: a 1x1 convolution, a 3x3 one and a strided 1x1 one, summed into one loss.
      const Tensor h = ops::relu(x);
      const Tensor a = ops::conv2d(h, w1.to(device), Tensor(), geometry(1, 0, channels_last));
      const Tensor b = ops::conv2d(h, w2.to(device), Tensor(), geometry(1, 1, channels_last));
      const Tensor c = ops::conv2d(h, w3.to(device), Tensor(), geometry(2, 0, channels_last));
      const Tensor loss = ops::add(ops::sum(ops::mul(a, b)), ops::sum(ops::mul(c, c)));
      loss.backward();
      return x.grad().to(kCPU);
    };
    const double error = scaled_error(gradient_of_x(kGpu), gradient_of_x(kCPU));
    INFO("max scaled error " << error);
    CHECK(error <= 1e-4);  // the strict f32 conv tests' bound
  }
}
