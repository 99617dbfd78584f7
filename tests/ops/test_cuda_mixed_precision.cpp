// Tests of the low-precision paths of the CUDA backend (mixed precision, src/optim/README.md): every op
// with f16/bf16 variants against its f32 GPU twin on the same values (inputs and upstream gradients
// rounded to the low dtype first, so only the op's own rounding differs), forward and backward; batch
// norm with f32 parameters and statistics under f16/bf16 data; the autograd cast; cross_entropy on
// low-precision logits computing in f32; and the tf32 setting of f32 GEMMs and convolutions.
// Tolerances are on max |low - f32| / (|f32| + mean |f32|): a few units of the dtype's rounding
// (unit roundoff bf16: 2^-8, f16: 2^-11). Tagged [cuda]: skipped without a GPU.
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ops/op_test_helpers.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

bool gpu_missing() { return opsnn::testing::gpu_missing("the CUDA mixed-precision tests"); }

// Several roundings of the low dtype (outputs, intermediate gradients) may add up.
double tolerance_for(DType dtype) { return dtype == DType::bf16 ? 2e-2 : 5e-3; }

// One leaf twice on the GPU: f32 with values exactly representable in `dtype`, and the same values in
// `dtype`.
struct LowTwin {
  Tensor reference, low;
};

LowTwin random_low_twin(const Shape& shape, DType dtype, Generator& generator, double low = -1.0, double high = 1.0,
                        bool requires_grad = true) {
  const Tensor values = Tensor::uniform(shape, low, high, generator, DType::f32).to(dtype);
  LowTwin twin{values.to(DType::f32).to(kGpu), values.to(kGpu)};
  twin.reference.set_requires_grad(requires_grad);
  twin.low.set_requires_grad(requires_grad);
  return twin;
}

void require_close_to(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what) {
  REQUIRE(actual.defined());
  REQUIRE(expected.defined());
  REQUIRE(actual.shape() == expected.shape());
  const double error = scaled_error(actual, expected);
  std::printf("low vs f32   %-62s max scaled error %.2e (tolerance %.0e)\n", what.c_str(), error, tolerance);
  INFO(what << ": max scaled error " << error << ", tolerance " << tolerance);
  REQUIRE(error <= tolerance);
}

// Runs f on the f32 leaves and on the low-precision leaves, requires the low output in `out_dtype`
// (the low dtype unless the op promises f32), compares, backpropagates one random upstream gradient
// (rounded to the output dtype) through both, and compares every leaf's gradient, which must come
// back in the leaf's dtype.
void check_low_twins(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                     const std::vector<LowTwin>& leaves, DType dtype, Generator& generator,
                     std::optional<DType> out_dtype = std::nullopt) {
  const std::string label = name + " " + std::string(dtype_name(dtype));
  std::vector<Tensor> reference_inputs, low_inputs;
  for (const LowTwin& leaf : leaves) {
    reference_inputs.push_back(leaf.reference);
    low_inputs.push_back(leaf.low);
  }
  const Tensor reference_out = f(reference_inputs);
  const Tensor low_out = f(low_inputs);
  REQUIRE(low_out.device() == kGpu);
  REQUIRE(low_out.dtype() == out_dtype.value_or(dtype));
  const double tolerance = tolerance_for(dtype);
  require_close_to(low_out, reference_out, tolerance, label + " forward");
  if (!reference_out.requires_grad()) return;
  const Tensor upstream =
      Tensor::uniform(reference_out.shape(), -1.0, 1.0, generator, DType::f32).to(low_out.dtype()).to(kGpu);
  reference_out.backward(upstream.to(DType::f32));
  low_out.backward(upstream);
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!leaves[i].reference.requires_grad()) continue;
    const Tensor low_grad = leaves[i].low.grad();
    REQUIRE(low_grad.defined());
    REQUIRE(low_grad.dtype() == leaves[i].low.dtype());
    require_close_to(low_grad, leaves[i].reference.grad(), tolerance, label + " grad of input " + std::to_string(i));
  }
}

const DType kLowDtypes[] = {DType::bf16, DType::f16};

}  // namespace

TEST_CASE("CUDA f16/bf16 matmul and linear match f32 (f32 accumulation)", "[cuda][ops][mixed]") {
  if (gpu_missing()) return;
  Generator generator(21);
  for (DType dtype : kLowDtypes) {
    for (const auto& [rows, inner, cols] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {7, 13, 5}, {64, 300, 33}}) {
      const std::string dims = std::to_string(rows) + "x" + std::to_string(inner) + "x" + std::to_string(cols);
      check_low_twins(
          "matmul " + dims, [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); },
          {random_low_twin({rows, inner}, dtype, generator), random_low_twin({inner, cols}, dtype, generator)}, dtype,
          generator);
      check_low_twins(
          "linear " + dims, [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); },
          {random_low_twin({rows, inner}, dtype, generator), random_low_twin({cols, inner}, dtype, generator),
           random_low_twin({cols}, dtype, generator)},
          dtype, generator);
    }
  }
}

TEST_CASE("CUDA f16/bf16 elementwise ops, relu and reductions match f32", "[cuda][ops][mixed]") {
  if (gpu_missing()) return;
  Generator generator(22);
  for (DType dtype : kLowDtypes) {
    const Shape shape{3, 5, 7, 2};
    check_low_twins(
        "add broadcast", [](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); },
        {random_low_twin(shape, dtype, generator), random_low_twin({5, 1, 1}, dtype, generator)}, dtype, generator);
    check_low_twins(
        "sub", [](const std::vector<Tensor>& in) { return ops::sub(in[0], in[1]); },
        {random_low_twin(shape, dtype, generator), random_low_twin(shape, dtype, generator)}, dtype, generator);
    check_low_twins(
        "mul broadcast", [](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); },
        {random_low_twin(shape, dtype, generator), random_low_twin({7, 1}, dtype, generator)}, dtype, generator);
    check_low_twins(
        "div", [](const std::vector<Tensor>& in) { return ops::div(in[0], in[1]); },
        {random_low_twin(shape, dtype, generator), random_low_twin(shape, dtype, generator, 0.5, 2.0)}, dtype,
        generator);
    check_low_twins(
        "scale", [](const std::vector<Tensor>& in) { return ops::scale(in[0], -0.75); },
        {random_low_twin(shape, dtype, generator)}, dtype, generator);
    check_low_twins(
        "relu", [](const std::vector<Tensor>& in) { return ops::relu(in[0]); },
        {random_low_twin(shape, dtype, generator)}, dtype, generator);
    check_low_twins(
        "sum over 0, 2",
        [](const std::vector<Tensor>& in) {
          return ops::sum(in[0], {0, 2});
        },
        {random_low_twin(shape, dtype, generator)}, dtype, generator);
    check_low_twins(
        "mean of 4096", [](const std::vector<Tensor>& in) { return ops::mean(in[0]); },
        {random_low_twin({64, 64}, dtype, generator)}, dtype, generator);
  }
}

TEST_CASE("CUDA f16/bf16 conv2d matches f32, forward and both gradients", "[cuda][ops][mixed]") {
  if (gpu_missing()) return;
  Generator generator(23);
  for (DType dtype : kLowDtypes) {
    for (const auto& [stride, pad, bias] :
         std::vector<std::tuple<int64_t, int64_t, bool>>{{1, 1, true}, {2, 0, false}, {2, 3, true}}) {
      ops::Conv2dGeometry geometry;
      geometry.stride_h = geometry.stride_w = stride;
      geometry.pad_h = geometry.pad_w = pad;
      const std::string name =
          "conv2d stride " + std::to_string(stride) + " pad " + std::to_string(pad) + (bias ? " with bias" : "");
      std::vector<LowTwin> leaves{random_low_twin({4, 6, 11, 9}, dtype, generator),
                                  random_low_twin({8, 6, 3, 3}, dtype, generator, -0.3, 0.3)};
      if (bias) leaves.push_back(random_low_twin({8}, dtype, generator));
      check_low_twins(
          name,
          [geometry, with_bias = bias](const std::vector<Tensor>& in) {
            return ops::conv2d(in[0], in[1], with_bias ? in[2] : Tensor(), geometry);
          },
          leaves, dtype, generator);
    }
  }
}

TEST_CASE("CUDA f16/bf16 pooling matches f32", "[cuda][ops][mixed]") {
  if (gpu_missing()) return;
  Generator generator(24);
  for (DType dtype : kLowDtypes) {
    ops::Pool2dGeometry overlapping;  // 3x3 stride 2 pad 1: windows overlap (ResNet's stem pool)
    overlapping.kernel_h = overlapping.kernel_w = 3;
    overlapping.pad_h = overlapping.pad_w = 1;
    check_low_twins(
        "max_pool2d 3x3/2 pad 1",
        [overlapping](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], overlapping); },
        {random_low_twin({2, 3, 9, 8}, dtype, generator)}, dtype, generator);
    check_low_twins(
        "avg_pool2d 3x3/2 pad 1",
        [overlapping](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], overlapping); },
        {random_low_twin({2, 3, 9, 8}, dtype, generator)}, dtype, generator);
    check_low_twins(
        "global_avg_pool2d", [](const std::vector<Tensor>& in) { return ops::global_avg_pool2d(in[0]); },
        {random_low_twin({4, 5, 7, 7}, dtype, generator)}, dtype, generator);
    check_low_twins(
        "global_avg_pool2d_nhwc", [](const std::vector<Tensor>& in) { return ops::global_avg_pool2d_nhwc(in[0]); },
        {random_low_twin({4, 7, 7, 40}, dtype, generator)}, dtype, generator);
  }
}

TEST_CASE("CUDA batch norm on f16/bf16 data keeps f32 parameters and statistics", "[cuda][ops][mixed]") {
  if (gpu_missing()) return;
  Generator generator(25);
  for (DType dtype : kLowDtypes) {
    const std::string label = "batch_norm " + std::string(dtype_name(dtype));
    const double tolerance = tolerance_for(dtype);
    // A mean far from zero checks that statistics are not computed in the low dtype.
    const LowTwin input = random_low_twin({8, 4, 5, 6}, dtype, generator, 2.0, 4.0);
    const Tensor gamma_values = Tensor::uniform({4}, 0.5, 1.5, generator, DType::f32).to(kGpu);
    const Tensor beta_values = Tensor::uniform({4}, -0.5, 0.5, generator, DType::f32).to(kGpu);
    Tensor gamma_reference = gamma_values.clone().set_requires_grad(true);
    Tensor beta_reference = beta_values.clone().set_requires_grad(true);
    Tensor gamma_low = gamma_values.clone().set_requires_grad(true);
    Tensor beta_low = beta_values.clone().set_requires_grad(true);
    Tensor mean_reference = Tensor::zeros({4}, DType::f32, kGpu), var_reference = Tensor::ones({4}, DType::f32, kGpu);
    Tensor mean_low = Tensor::zeros({4}, DType::f32, kGpu), var_low = Tensor::ones({4}, DType::f32, kGpu);

    const Tensor out_reference =
        ops::batch_norm(input.reference, gamma_reference, beta_reference, mean_reference, var_reference, true);
    const Tensor out_low = ops::batch_norm(input.low, gamma_low, beta_low, mean_low, var_low, true);
    REQUIRE(out_low.dtype() == dtype);
    REQUIRE(mean_low.dtype() == DType::f32);
    require_close_to(out_low, out_reference, tolerance, label + " training forward");
    // The statistics see the same (exactly representable) values, summed in double: f32-exact.
    require_close_to(mean_low, mean_reference, 1e-6, label + " running mean");
    require_close_to(var_low, var_reference, 1e-6, label + " running var");

    const Tensor upstream = Tensor::uniform(out_reference.shape(), -1.0, 1.0, generator, DType::f32).to(dtype).to(kGpu);
    out_reference.backward(upstream.to(DType::f32));
    out_low.backward(upstream);
    REQUIRE(input.low.grad().dtype() == dtype);
    REQUIRE(gamma_low.grad().dtype() == DType::f32);
    require_close_to(input.low.grad(), input.reference.grad(), tolerance, label + " grad input");
    require_close_to(gamma_low.grad(), gamma_reference.grad(), tolerance, label + " grad gamma");
    require_close_to(beta_low.grad(), beta_reference.grad(), tolerance, label + " grad beta");

    const Tensor eval_reference = ops::batch_norm(input.reference.detach(), gamma_reference, beta_reference,
                                                  mean_reference, var_reference, false);
    const Tensor eval_low = ops::batch_norm(input.low.detach(), gamma_low, beta_low, mean_low, var_low, false);
    REQUIRE(eval_low.dtype() == dtype);
    require_close_to(eval_low, eval_reference, tolerance, label + " eval forward");

    // Low-precision per-channel tensors are refused: mixed precision keeps them f32.
    Tensor low_mean = mean_low.to(dtype), low_var = var_low.to(dtype);
    const std::string message = require_throws<TypeError>(
        [&] { ops::batch_norm(input.low.detach(), gamma_low.detach().to(dtype), Tensor(), low_mean, low_var, true); });
    CHECK_THAT(message, Catch::Contains("gamma") && Catch::Contains("f32"));
  }
}

TEST_CASE("cast converts with autograd, cross_entropy of f16/bf16 logits computes in f32", "[cuda][ops][mixed]") {
  if (gpu_missing()) return;
  Generator generator(26);
  for (DType dtype : kLowDtypes) {
    // cast f32 -> low: the gradient returns to the f32 leaf as f32.
    Tensor master = Tensor::uniform({5, 7}, -2.0, 2.0, generator, DType::f32).to(kGpu).set_requires_grad(true);
    const Tensor low = ops::cast(master, dtype);
    REQUIRE(low.dtype() == dtype);
    require_close_to(low, master, tolerance_for(dtype) / 4, "cast f32 -> " + std::string(dtype_name(dtype)));
    ops::sum(ops::scale(low, 3.0)).backward();
    REQUIRE(master.grad().dtype() == DType::f32);
    for (double value : master.grad().to_vector<double>()) REQUIRE(value == 3.0);
    CHECK(ops::cast(master, DType::f32).same(master));
    require_throws<TypeError>([&] { ops::cast(master, DType::i64); });

    const Tensor targets = Tensor::from_vector<int64_t>({0, 3, 9, 4, 4, 1}, {6}, DType::i64, kGpu);
    check_low_twins(
        "cross_entropy", [&targets](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], targets, 0.1); },
        {random_low_twin({6, 10}, dtype, generator, -3.0, 3.0)}, dtype, generator, DType::f32);
  }
}

TEST_CASE("tf32 lets f32 GEMMs and convolutions use TF32 tensor cores, strict restores exact f32",
          "[cuda][ops][mixed]") {
  if (gpu_missing()) return;
  Generator generator(27);
  const Tensor a_cpu = Tensor::uniform({256, 256}, -1.0, 1.0, generator, DType::f32);
  const Tensor b_cpu = Tensor::uniform({256, 256}, -1.0, 1.0, generator, DType::f32);
  const Tensor input_cpu = Tensor::uniform({4, 16, 12, 12}, -1.0, 1.0, generator, DType::f32);
  const Tensor weight_cpu = Tensor::uniform({32, 16, 3, 3}, -0.2, 0.2, generator, DType::f32);
  ops::Conv2dGeometry geometry;
  geometry.pad_h = geometry.pad_w = 1;
  const Tensor product_cpu = ops::matmul(a_cpu, b_cpu);
  const Tensor conv_cpu = ops::conv2d(input_cpu, weight_cpu, Tensor(), geometry);

  struct MathReset {
    ~MathReset() { ops::set_fp32_math(ops::Fp32Math::strict); }
  } reset;
  REQUIRE(ops::fp32_math() == ops::Fp32Math::strict);
  const Tensor strict_product = ops::matmul(a_cpu.to(kGpu), b_cpu.to(kGpu));
  require_close_to(strict_product, product_cpu, 2e-5, "strict f32 matmul vs cpu");

  ops::set_fp32_math(ops::Fp32Math::tf32);
  const Tensor tf32_product = ops::matmul(a_cpu.to(kGpu), b_cpu.to(kGpu));
  const Tensor tf32_conv = ops::conv2d(input_cpu.to(kGpu), weight_cpu.to(kGpu), Tensor(), geometry);
  // TF32 keeps 10 mantissa bits of each input: errors of order 2^-11 per product, f32 accumulation.
  require_close_to(tf32_product, product_cpu, 5e-3, "tf32 matmul vs cpu");
  require_close_to(tf32_conv, conv_cpu, 5e-3, "tf32 conv2d vs cpu");
  // And it did use reduced-precision inputs: a 256-term f32 product differs from the strict one.
  const double tf32_difference = scaled_error(tf32_product, strict_product);
  std::printf("tf32 vs strict matmul: max scaled difference %.2e\n", tf32_difference);
  CHECK(tf32_difference > 1e-6);

  ops::set_fp32_math(ops::Fp32Math::strict);
  require_close_to(ops::matmul(a_cpu.to(kGpu), b_cpu.to(kGpu)), product_cpu, 2e-5, "strict again: matmul vs cpu");
  require_close_to(ops::conv2d(input_cpu.to(kGpu), weight_cpu.to(kGpu), Tensor(), geometry), conv_cpu, 1e-4,
                   "strict again: conv2d vs cpu");
}
