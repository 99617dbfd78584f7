// Tests of the CUDA compute backend (src/ops/cuda/): every op through the functional API on the GPU
// against its CPU twin on the same random f32 values, forward and backward (autograd gradients of every
// input), on odd shapes (dot_interaction and concat bit for bit); index range errors and the TypeError
// for unsupported dtypes. Each test prints its largest scaled error so a GPU run shows the margins.
// Tagged [cuda]: skipped without a GPU.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ops/op_test_helpers.h"
#include "opsnn/core/rng.h"
#include "opsnn/nn/sync_batch_norm.h"
#include "opsnn/ops/backend.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

const Device kGpu{DeviceType::cuda, 0};

// Tolerances on max |gpu - cpu| / (|cpu| + mean |cpu|): rounding-level for elementwise work, a little
// more where the two sides sum long products in different orders (GEMM, cuDNN algorithms, norms).
constexpr double kElementwiseTolerance = 1e-6;
constexpr double kReductionTolerance = 2e-5;
constexpr double kConvTolerance = 1e-4;

bool gpu_missing() {
  if (cuda_device_count() > 0) return false;
  WARN("no CUDA device: the CUDA backend tests are skipped");
  return true;
}

// The same leaf on the CPU and on the GPU.
struct Twin {
  Tensor cpu, gpu;
};

Twin random_twin(const Shape& shape, Generator& generator, double low = -1.0, double high = 1.0,
                 bool requires_grad = true) {
  Tensor cpu = Tensor::uniform(shape, low, high, generator, DType::f32);
  Tensor gpu = cpu.to(kGpu);
  cpu.set_requires_grad(requires_grad);
  gpu.set_requires_grad(requires_grad);
  return {cpu, gpu};
}

Twin index_twin(const Shape& shape, int64_t limit, Generator& generator) {
  std::vector<int64_t> values(static_cast<size_t>(shape_numel(shape)));
  for (int64_t& value : values) value = static_cast<int64_t>(generator.next_below(static_cast<uint64_t>(limit)));
  Tensor cpu = Tensor::from_vector<int64_t>(values, shape);
  return {cpu, cpu.to(kGpu)};
}

void require_match(const Tensor& gpu, const Tensor& cpu, double tolerance, const std::string& what) {
  REQUIRE(gpu.defined());
  REQUIRE(cpu.defined());
  REQUIRE(gpu.device() == kGpu);
  REQUIRE(gpu.shape() == cpu.shape());
  const double error = scaled_error(gpu, cpu);
  std::printf("cuda vs cpu  %-58s max scaled error %.2e (tolerance %.0e)\n", what.c_str(), error, tolerance);
  INFO(what << ": max scaled error " << error << ", tolerance " << tolerance);
  REQUIRE(error <= tolerance);
}

// Runs f on the CPU leaves and on the GPU leaves, compares the outputs, backpropagates one random
// upstream gradient through both and compares the gradient of every leaf that requires one.
void check_twins(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                 const std::vector<Twin>& leaves, double tolerance, Generator& generator) {
  std::vector<Tensor> cpu_inputs, gpu_inputs;
  for (const Twin& leaf : leaves) {
    cpu_inputs.push_back(leaf.cpu);
    gpu_inputs.push_back(leaf.gpu);
  }
  const Tensor cpu_out = f(cpu_inputs);
  const Tensor gpu_out = f(gpu_inputs);
  require_match(gpu_out, cpu_out, tolerance, name + " forward");
  if (!cpu_out.requires_grad()) return;
  const Tensor upstream = Tensor::uniform(cpu_out.shape(), -1.0, 1.0, generator, DType::f32);
  cpu_out.backward(upstream);
  gpu_out.backward(upstream.to(kGpu));
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!leaves[i].cpu.requires_grad()) continue;
    if (!leaves[i].cpu.grad().defined()) {  // not reached by autograd (e.g. used through a plain view)
      REQUIRE(!leaves[i].gpu.grad().defined());
      continue;
    }
    require_match(leaves[i].gpu.grad(), leaves[i].cpu.grad(), tolerance, name + " grad of input " + std::to_string(i));
  }
}

std::string shape_name(const Shape& shape) { return shape_str(shape); }

}  // namespace

TEST_CASE("CUDA matmul and linear match the CPU, forward and backward", "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(11);
  const std::vector<std::array<int64_t, 3>> sizes = {{1, 1, 1}, {7, 13, 5}, {64, 300, 33}, {1, 257, 10}, {129, 3, 65}};
  for (const auto& [rows, inner, cols] : sizes) {
    const std::string dims = std::to_string(rows) + "x" + std::to_string(inner) + "x" + std::to_string(cols);
    check_twins(
        "matmul " + dims, [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); },
        {random_twin({rows, inner}, generator), random_twin({inner, cols}, generator)}, kReductionTolerance, generator);
    // Transposed views reach gemm as transpose flags.
    check_twins(
        "matmul of transposed views " + dims,
        [](const std::vector<Tensor>& in) { return ops::matmul(in[0].transpose(0, 1), in[1].transpose(0, 1)); },
        {random_twin({inner, rows}, generator), random_twin({cols, inner}, generator)}, kReductionTolerance, generator);
    check_twins(
        "linear " + dims, [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); },
        {random_twin({rows, inner}, generator), random_twin({cols, inner}, generator), random_twin({cols}, generator)},
        kReductionTolerance, generator);
  }
  // An empty inner dimension gives zeros.
  const Tensor empty_product =
      ops::matmul(Tensor::zeros({3, 0}, DType::f32, kGpu), Tensor::zeros({0, 4}, DType::f32, kGpu));
  for (double value : empty_product.to_vector<double>()) CHECK(value == 0.0);
}

TEST_CASE("CUDA elementwise ops with broadcasting match the CPU", "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(12);
  const std::vector<std::pair<Shape, Shape>> pairs = {{{4, 3, 5, 6}, {1, 3, 1, 1}},
                                                      {{7}, {1}},
                                                      {{2, 1, 5}, {3, 1}},
                                                      {{6, 1}, {1, 6}},
                                                      {{}, {3, 2}},
                                                      {{5, 4}, {5, 4}},
                                                      {{2, 3, 4, 5, 6}, {3, 1, 5, 1}},
                                                      {{1000, 33}, {33}}};
  using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<std::string, BinaryFn>> binaries = {
      {"add", ops::add}, {"sub", ops::sub}, {"mul", ops::mul}, {"div", ops::div}};
  for (const auto& [a_shape, b_shape] : pairs) {
    for (const auto& [name, fn] : binaries) {
      // Divisors stay away from zero so the quotient's rounding does not blow up.
      const double low = name == "div" ? 0.5 : -1.0;
      check_twins(
          name + " " + shape_name(a_shape) + " with " + shape_name(b_shape),
          [fn = fn](const std::vector<Tensor>& in) { return fn(in[0], in[1]); },
          {random_twin(a_shape, generator), random_twin(b_shape, generator, low, 2.0)}, kReductionTolerance, generator);
    }
  }
  // A non-contiguous operand (a transposed view) is read through its strides.
  check_twins(
      "add of a transposed view", [](const std::vector<Tensor>& in) { return ops::add(in[0].transpose(0, 1), in[1]); },
      {random_twin({9, 4}, generator), random_twin({4, 9}, generator)}, kElementwiseTolerance, generator);
  check_twins(
      "scale", [](const std::vector<Tensor>& in) { return ops::scale(in[0], -2.5); },
      {random_twin({3, 17, 5}, generator)}, kElementwiseTolerance, generator);
  check_twins(
      "relu", [](const std::vector<Tensor>& in) { return ops::relu(in[0]); }, {random_twin({4, 300, 7}, generator)},
      kElementwiseTolerance, generator);
}

TEST_CASE("CUDA sum and mean over dimensions match the CPU", "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(13);
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{3, 4, 5, 6}, {0, 2}}, {{3, 4, 5, 6}, {1}},    {{3, 4, 5, 6}, {3}}, {{3, 4, 5, 6}, {1, 3}},
      {{3, 4, 5, 6}, {}},     {{2, 5000}, {1}},       {{300, 7}, {0}},     {{64, 1, 9, 9}, {0, 2, 3}},
      {{1, 1, 1}, {1}},       {{2, 3, 1, 4}, {0, 3}}, {{100000}, {0}}};
  for (const auto& [shape, dims] : cases) {
    std::string name = "sum of " + shape_name(shape) + " over {";
    for (int64_t d : dims) name += std::to_string(d) + " ";
    name += "}";
    check_twins(
        name, [dims = dims](const std::vector<Tensor>& in) { return ops::sum(in[0], dims, true); },
        {random_twin(shape, generator)}, kReductionTolerance, generator);
    check_twins(
        "mean" + name.substr(3), [dims = dims](const std::vector<Tensor>& in) { return ops::mean(in[0], dims, false); },
        {random_twin(shape, generator)}, kReductionTolerance, generator);
  }
}

TEST_CASE("CUDA conv2d matches the CPU, forward and both gradients", "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(14);
  struct ConvCase {
    Shape input, weight;
    int64_t stride_h, stride_w, pad_h, pad_w;
    bool bias;
  };
  const std::vector<ConvCase> cases = {
      {{2, 3, 8, 8}, {4, 3, 3, 3}, 1, 1, 1, 1, true},       // 3x3 same padding
      {{1, 5, 7, 9}, {6, 5, 1, 1}, 1, 1, 0, 0, false},      // 1x1, batch 1, non-square
      {{3, 4, 11, 10}, {8, 4, 3, 3}, 2, 2, 1, 1, true},     // stride 2
      {{1, 16, 7, 7}, {32, 16, 1, 1}, 2, 2, 0, 0, false},   // ResNet downsample shortcut
      {{2, 3, 32, 32}, {16, 3, 7, 7}, 2, 2, 3, 3, false},   // ResNet stem
      {{2, 3, 13, 6}, {5, 3, 5, 5}, 2, 1, 2, 2, true},      // 5x5, unequal strides
      {{2, 4, 9, 8}, {3, 4, 3, 1}, 1, 1, 1, 0, true},       // non-square kernel and padding
      {{4, 64, 14, 14}, {64, 64, 3, 3}, 1, 1, 1, 1, false}  // a ResNet block layer
  };
  for (const ConvCase& c : cases) {
    ops::Conv2dGeometry geometry;
    geometry.stride_h = c.stride_h;
    geometry.stride_w = c.stride_w;
    geometry.pad_h = c.pad_h;
    geometry.pad_w = c.pad_w;
    std::vector<Twin> leaves;
    leaves.reserve(3);
    leaves.push_back(random_twin(c.input, generator));
    leaves.push_back(random_twin(c.weight, generator));
    if (c.bias) leaves.push_back(random_twin({c.weight[0]}, generator));
    const std::string name = "conv2d " + shape_name(c.input) + " * " + shape_name(c.weight) + " stride " +
                             std::to_string(c.stride_h) + "x" + std::to_string(c.stride_w) + " pad " +
                             std::to_string(c.pad_h) + "x" + std::to_string(c.pad_w);
    check_twins(
        name,
        [geometry](const std::vector<Tensor>& in) {
          return ops::conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), geometry);
        },
        leaves, kConvTolerance, generator);
    // Second call with the same shape takes the cached algorithm.
    const Tensor again = ops::conv2d(leaves[0].gpu.detach(), leaves[1].gpu.detach(),
                                     c.bias ? leaves[2].gpu.detach() : Tensor(), geometry);
    const Tensor expected = ops::conv2d(leaves[0].cpu.detach(), leaves[1].cpu.detach(),
                                        c.bias ? leaves[2].cpu.detach() : Tensor(), geometry);
    require_match(again, expected, kConvTolerance, name + " (cached algorithm)");
  }
}

TEST_CASE("CUDA batch norm matches the CPU in training and eval, with running statistics", "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(15);
  // Odd and tiny rows, rows split over many blocks (odd and vector-aligned); test_cuda_norm.cpp has more.
  const std::vector<Shape> shapes = {{4, 3, 5, 6}, {8, 5},    {1, 4, 3, 3},  {16, 2, 17, 9},
                                     {2, 5, 1},    {1, 1, 7}, {64, 3, 3137}, {32, 2, 4104}};
  for (const Shape& shape : shapes) {
    const int64_t channels = shape[1];
    for (bool training : {true, false}) {
      Twin running_mean = random_twin({channels}, generator, -0.5, 0.5, false);
      Twin running_var = random_twin({channels}, generator, 0.5, 2.0, false);
      const std::string name = std::string("batch_norm ") + (training ? "train " : "eval ") + shape_name(shape);
      // Inputs offset from zero, so centering matters.
      check_twins(
          name,
          [&, training](const std::vector<Tensor>& in) {
            Tensor& mean = in[0].device() == kGpu ? running_mean.gpu : running_mean.cpu;
            Tensor& var = in[0].device() == kGpu ? running_var.gpu : running_var.cpu;
            return ops::batch_norm(in[0], in[1], in[2], mean, var, training, 0.1, 1e-5);
          },
          {random_twin(shape, generator, 2.0, 5.0), random_twin({channels}, generator, 0.5, 1.5),
           random_twin({channels}, generator)},
          kConvTolerance, generator);
      require_match(running_mean.gpu, running_mean.cpu, kReductionTolerance, name + " running_mean");
      require_match(running_var.gpu, running_var.cpu, kReductionTolerance, name + " running_var");
    }
  }
}

TEST_CASE("CUDA pooling matches the CPU, including ties and padding", "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(16);
  auto geometry = [](int64_t kernel, int64_t stride, int64_t pad, bool count_include_pad) {
    ops::Pool2dGeometry g;
    g.kernel_h = g.kernel_w = kernel;
    g.stride_h = g.stride_w = stride;
    g.pad_h = g.pad_w = pad;
    g.count_include_pad = count_include_pad;
    return g;
  };
  const std::vector<Shape> shapes = {{2, 3, 8, 8}, {1, 2, 9, 7}, {3, 4, 15, 15}};
  const std::vector<ops::Pool2dGeometry> geometries = {geometry(2, 2, 0, true), geometry(3, 2, 1, true),
                                                       geometry(3, 2, 1, false), geometry(3, 1, 1, true)};
  for (const Shape& shape : shapes) {
    for (const ops::Pool2dGeometry& g : geometries) {
      const std::string where = shape_name(shape) + " kernel " + std::to_string(g.kernel_h) + " stride " +
                                std::to_string(g.stride_h) + " pad " + std::to_string(g.pad_h);
      check_twins(
          "max_pool2d " + where, [g](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], g); },
          {random_twin(shape, generator)}, kElementwiseTolerance, generator);
      check_twins(
          "avg_pool2d " + where + (g.count_include_pad ? " count_include_pad" : " exclude_pad"),
          [g](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], g); }, {random_twin(shape, generator)},
          kElementwiseTolerance, generator);
    }
    check_twins(
        "global_avg_pool2d " + shape_name(shape),
        [](const std::vector<Tensor>& in) { return ops::global_avg_pool2d(in[0]); }, {random_twin(shape, generator)},
        kReductionTolerance, generator);
    check_twins(
        "global_avg_pool2d_nhwc " + shape_name(shape),
        [](const std::vector<Tensor>& in) { return ops::global_avg_pool2d_nhwc(in[0]); },
        {random_twin(shape, generator)}, kReductionTolerance, generator);
  }
  // Ties everywhere (values from {0, 1}): the gradient must go to the first maximum, as on the CPU.
  std::vector<float> ties(2 * 3 * 10 * 10);
  for (float& value : ties) value = static_cast<float>(generator.next_below(2));
  Tensor tie_cpu = Tensor::from_vector<float>(ties, {2, 3, 10, 10});
  Twin tie{tie_cpu, tie_cpu.to(kGpu)};
  tie.cpu.set_requires_grad(true);
  tie.gpu.set_requires_grad(true);
  const ops::Pool2dGeometry g = geometry(3, 2, 1, true);
  check_twins(
      "max_pool2d with ties", [g](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], g); }, {tie},
      kElementwiseTolerance, generator);
}

TEST_CASE("CUDA max pool matches its CPU twin's outputs, indices and gradients exactly", "[cuda][ops][pool]") {
  if (gpu_missing()) return;
  Generator generator(18);
  ops::Backend& cpu = ops::backend_for(kCPU);
  ops::Backend& gpu = ops::backend_for(kGpu);
  auto geometry = [](int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                     int64_t pad_w) {
    ops::Pool2dGeometry g;
    g.kernel_h = kernel_h, g.kernel_w = kernel_w, g.stride_h = stride_h, g.stride_w = stride_w;
    g.pad_h = pad_h, g.pad_w = pad_w;
    return g;
  };
  // ResNet's 3x3/2 pad 1 on odd and even planes (112x112 is the stem's); 2x2/2; 3x3/1 (a cell is the
  // argmax of up to nine windows, all of which the backward's gather visits); a non-square window (the
  // runtime loop); a window wider than the stride with no padding; planes one, two and three cells wide
  // under 5x5/2 windows, whose argmax may be the first cell of the next row (the stride-2 backward's 2x2
  // blocks must not take it for their own).
  const std::vector<std::pair<Shape, ops::Pool2dGeometry>> cases = {
      {{2, 3, 13, 11}, geometry(3, 3, 2, 2, 1, 1)},   {{2, 4, 112, 112}, geometry(3, 3, 2, 2, 1, 1)},
      {{1, 2, 130, 130}, geometry(3, 3, 2, 2, 1, 1)}, {{3, 2, 15, 9}, geometry(2, 2, 2, 2, 0, 0)},
      {{2, 2, 10, 9}, geometry(3, 3, 1, 1, 1, 1)},    {{2, 3, 11, 12}, geometry(2, 3, 2, 1, 1, 1)},
      {{1, 3, 9, 7}, geometry(3, 3, 2, 2, 0, 0)},     {{2, 2, 5, 1}, geometry(5, 5, 2, 2, 2, 2)},
      {{2, 2, 3, 3}, geometry(5, 5, 2, 2, 2, 2)},     {{1, 2, 4, 2}, geometry(3, 3, 2, 2, 1, 1)}};
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const auto& [shape, g] : cases) {
      const std::string name = shape_name(shape) + " " + std::string(dtype_name(dtype)) + " kernel " +
                               std::to_string(g.kernel_h) + "x" + std::to_string(g.kernel_w) + " stride " +
                               std::to_string(g.stride_h) + " pad " + std::to_string(g.pad_h);
      INFO(name);
      // Small integers (ties everywhere, exact in every dtype), a few NaNs and -infs; integer upstream
      // gradients, whose sums are exact in every dtype, so any summation order gives the CPU's result.
      std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
      for (float& value : values) {
        const uint64_t draw = generator.next_below(200);
        value = draw == 0 ? NAN : (draw == 1 ? -INFINITY : static_cast<float>(draw % 4));
      }
      const Tensor input = Tensor::from_vector<float>(values, shape).to(dtype);
      const Shape out_shape{shape[0], shape[1], (shape[2] + 2 * g.pad_h - g.kernel_h) / g.stride_h + 1,
                            (shape[3] + 2 * g.pad_w - g.kernel_w) / g.stride_w + 1};
      // The CPU twin runs f32 (it has no f16/bf16 kernels); the values are exact in every dtype.
      Tensor cpu_out = Tensor::empty(out_shape, DType::f32), cpu_indices = Tensor::empty(out_shape, DType::i32);
      Tensor gpu_out = Tensor::empty(out_shape, dtype, kGpu), gpu_indices = Tensor::empty(out_shape, DType::i32, kGpu);
      cpu.max_pool2d_forward(input.to(DType::f32), cpu_out, cpu_indices, g);
      gpu.max_pool2d_forward(input.to(kGpu), gpu_out, gpu_indices, g);
      REQUIRE(gpu_indices.to(kCPU).to_vector<int32_t>() == cpu_indices.to_vector<int32_t>());
      const std::vector<double> expected = cpu_out.to_vector<double>(), actual = gpu_out.to(kCPU).to_vector<double>();
      for (size_t i = 0; i < expected.size(); ++i) {
        if (std::isnan(expected[i]) && std::isnan(actual[i])) continue;
        INFO("output " << i << ": " << actual[i] << " vs the CPU's " << expected[i]);
        REQUIRE(actual[i] == expected[i]);
      }
      std::vector<float> upstream(static_cast<size_t>(shape_numel(out_shape)));
      for (float& value : upstream) value = static_cast<float>(static_cast<int64_t>(generator.next_below(5)) - 2);
      const Tensor grad_out = Tensor::from_vector<float>(upstream, out_shape).to(dtype);
      Tensor cpu_grad = Tensor::empty(shape, DType::f32);
      Tensor gpu_grad = Tensor::full(shape, 7.0, dtype, kGpu);  // every cell must be written
      cpu.max_pool2d_backward(grad_out.to(DType::f32), cpu_indices, cpu_grad, g);
      gpu.max_pool2d_backward(grad_out.to(kGpu), gpu_indices, gpu_grad, g);
      REQUIRE(gpu_grad.to(kCPU).to_vector<double>() == cpu_grad.to_vector<double>());
    }
  // The backend takes i32 indices only, and says so.
  {
    const ops::Pool2dGeometry g = geometry(2, 2, 2, 2, 0, 0);
    Tensor out = Tensor::empty({1, 1, 2, 2}, DType::f32, kGpu), wide = Tensor::empty({1, 1, 2, 2}, DType::i64, kGpu);
    CHECK_THAT(require_throws<TypeError>([&] {
                 gpu.max_pool2d_forward(Tensor::zeros({1, 1, 4, 4}).to(kGpu), out, wide, g);
               }),
               Catch::Contains("max_pool2d_forward") && Catch::Contains("indices must be i32, got i64"));
  }
  // Windows of -inf only report their first cell inside the input, padding or not.
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor input = Tensor::full({1, 2, 5, 6}, -INFINITY, dtype);
    const ops::Pool2dGeometry g = geometry(3, 3, 2, 2, 1, 1);
    const Shape out_shape{1, 2, 3, 3};
    Tensor cpu_out = Tensor::empty(out_shape, DType::f32), cpu_indices = Tensor::empty(out_shape, DType::i32);
    Tensor gpu_out = Tensor::empty(out_shape, dtype, kGpu), gpu_indices = Tensor::empty(out_shape, DType::i32, kGpu);
    cpu.max_pool2d_forward(input.to(DType::f32), cpu_out, cpu_indices, g);  // the CPU twin is f32
    gpu.max_pool2d_forward(input.to(kGpu), gpu_out, gpu_indices, g);
    REQUIRE(gpu_indices.to(kCPU).to_vector<int32_t>() == cpu_indices.to_vector<int32_t>());
    REQUIRE(gpu_out.to(kCPU).to_vector<double>() == cpu_out.to_vector<double>());
  }
}

TEST_CASE("CUDA log_softmax, nll_loss and cross_entropy match the CPU", "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(17);
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{1, 10}, {32, 10}, {7, 1000}, {300, 3}, {2, 1}};
  for (const auto& [rows, classes] : sizes) {
    const std::string where = std::to_string(rows) + "x" + std::to_string(classes);
    check_twins(
        "log_softmax " + where, [](const std::vector<Tensor>& in) { return ops::log_softmax(in[0]); },
        {random_twin({rows, classes}, generator, -30.0, 30.0)}, kReductionTolerance, generator);
    for (double smoothing : {0.0, 0.1}) {
      const Twin target = index_twin({rows}, classes, generator);
      check_twins(
          "cross_entropy " + where + " smoothing " + std::to_string(smoothing),
          [&target, smoothing = smoothing](const std::vector<Tensor>& in) {
            return ops::cross_entropy(in[0], in[0].device() == kGpu ? target.gpu : target.cpu, smoothing);
          },
          {random_twin({rows, classes}, generator, -5.0, 5.0)}, kReductionTolerance, generator);
    }
  }
}

TEST_CASE("CUDA nll_loss's backward reads the loss gradient on the device and gives the CPU's bits", "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(23);
  const Tensor values = Tensor::normal({5, 7}, 0.0, 2.0, generator);
  const Tensor target = Tensor::from_vector<int64_t>({6, 0, 3, 3, 1}, {5});
  for (double smoothing : {0.0, 0.1})
    for (double scale : {1.0, 1024.0, -3.7}) {  // the upstream gradient as the loss scaler leaves it
      INFO("smoothing " << smoothing << ", loss scaled by " << scale);
      std::vector<std::vector<float>> grads;
      for (Device device : {kCPU, kGpu}) {
        Tensor log_probs = values.to(device).detach().set_requires_grad(true);
        ops::scale(ops::nll_loss(log_probs, target.to(device), smoothing), scale).backward();
        grads.push_back(log_probs.grad().to(kCPU).to_vector<float>());
      }
      REQUIRE(grads[1] == grads[0]);
    }
}

TEST_CASE("CUDA embedding matches the CPU, duplicate indices accumulate", "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(18);
  const Twin indices = index_twin({6, 9}, 7, generator);  // 54 lookups into 7 rows: many duplicates
  check_twins(
      "embedding [7, 16] with duplicates",
      [&indices](const std::vector<Tensor>& in) {
        return ops::embedding(in[0], in[0].device() == kGpu ? indices.gpu : indices.cpu);
      },
      {random_twin({7, 16}, generator)}, kReductionTolerance, generator);
  const Twin wide = index_twin({3000}, 500, generator);
  check_twins(
      "embedding [500, 33]",
      [&wide](const std::vector<Tensor>& in) {
        return ops::embedding(in[0], in[0].device() == kGpu ? wide.gpu : wide.cpu);
      },
      {random_twin({500, 33}, generator)}, kReductionTolerance, generator);
}

TEST_CASE("CUDA index errors name the bad entry like the CPU", "[cuda][ops]") {
  if (gpu_missing()) return;
  const Tensor table = Tensor::zeros({5, 3}, DType::f32, kGpu);
  const Tensor bad_indices = Tensor::from_vector<int64_t>({1, 4, 5, 0}, {4}, DType::i64, kGpu);
  const std::string embedding_message = require_throws<ShapeError>([&] { ops::embedding(table, bad_indices); });
  CHECK_THAT(embedding_message, Catch::Contains("index 5 (position 2)") && Catch::Contains("valid: 0 to 4"));
  const Tensor logits = Tensor::zeros({3, 4}, DType::f32, kGpu);
  const Tensor bad_targets = Tensor::from_vector<int64_t>({0, -1, 3}, {3}, DType::i64, kGpu);
  const std::string loss_message = require_throws<ShapeError>([&] { ops::cross_entropy(logits, bad_targets); });
  CHECK_THAT(loss_message, Catch::Contains("target -1 (row 1)") && Catch::Contains("4 classes"));
}

TEST_CASE("CUDA kernels refuse unsupported dtypes with a TypeError", "[cuda][ops]") {
  if (gpu_missing()) return;
  // f64 has no CUDA kernels at all; f16/bf16 exist for the mixed-precision ops (test_cuda_mixed_precision)
  // but not for log-softmax, the NLL loss and embedding, which stay f32.
  const Tensor doubles = Tensor::ones({4, 4}, DType::f64, kGpu);
  const std::string relu_message = require_throws<TypeError>([&] { ops::relu(doubles); });
  CHECK_THAT(relu_message, Catch::Contains("CUDA relu") && Catch::Contains("f64"));
  require_throws<TypeError>([&] { ops::matmul(doubles, doubles); });
  require_throws<TypeError>([&] { ops::add(doubles, doubles); });
  const Tensor halves = Tensor::ones({4, 4}, DType::f16, kGpu);
  const std::string softmax_message = require_throws<TypeError>([&] { ops::log_softmax(halves); });
  CHECK_THAT(softmax_message, Catch::Contains("log_softmax") && Catch::Contains("f16"));
  const Tensor table = Tensor::ones({4, 4}, DType::bf16, kGpu);
  require_throws<TypeError>([&] { ops::embedding(table, Tensor::zeros({2}, DType::i64, kGpu)); });
}

namespace {

// A world of one rank: the statistics are this rank's (what SyncBatchNorm computes with one rank).
class OneRankReducer final : public nn::BatchStatisticsReducer {
 public:
  int world_size() const override { return 1; }
  void all_reduce_sum(const Tensor&, const std::string&) override {}
};

}  // namespace

TEST_CASE("CUDA slice batch_norm_invstd and sync_batch_norm match the CPU", "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(31);
  check_twins(
      "slice rows 2..5 of 7x3x4", [](const std::vector<Tensor>& in) { return ops::slice(in[0], 2, 5); },
      {random_twin({7, 3, 4}, generator)}, kElementwiseTolerance, generator);
  check_twins(
      "batch_norm_invstd", [](const std::vector<Tensor>& in) { return ops::batch_norm_invstd(in[0], 1e-5); },
      {random_twin({37}, generator, 0.01, 2.0)}, kElementwiseTolerance, generator);
  auto reducer = std::make_shared<OneRankReducer>();
  for (const bool channels_last : {false, true}) {
    for (const bool relu : {false, true}) {
      const Shape shape = channels_last ? Shape{6, 5, 7, 3} : Shape{6, 3, 5, 7};
      Tensor cpu_mean = Tensor::zeros({3}), cpu_var = Tensor::ones({3});
      Tensor gpu_mean = cpu_mean.to(kGpu), gpu_var = cpu_var.to(kGpu);
      bool on_gpu = false;
      check_twins(
          std::string("sync_batch_norm") + (channels_last ? " channels_last" : "") + (relu ? " relu" : ""),
          [&](const std::vector<Tensor>& in) {
            Tensor& mean = on_gpu ? gpu_mean : cpu_mean;
            Tensor& var = on_gpu ? gpu_var : cpu_var;
            on_gpu = !on_gpu;  // check_twins runs the CPU leaves first
            return nn::sync_batch_norm(in[0], in[1], in[2], mean, var, 0.1, 1e-5, channels_last, relu, reducer,
                                       "test layer");
          },
          {random_twin(shape, generator, -2.0, 3.0), random_twin({3}, generator, 0.5, 1.5),
           random_twin({3}, generator)},
          kReductionTolerance, generator);
      require_match(gpu_mean, cpu_mean, kReductionTolerance, "sync_batch_norm running_mean");
      require_match(gpu_var, cpu_var, kReductionTolerance, "sync_batch_norm running_var");
    }
  }
}

TEST_CASE("CUDA dot_interaction and concat match their CPU twins bit for bit", "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(32);
  // Both sides sum exact double products of the f32 inputs in one order: the same bits, forward and back.
  for (const Shape& shape : {Shape{5, 27, 16}, Shape{3, 2, 1}, Shape{7, 9, 33}, Shape{1, 1, 4}}) {
    check_twins(
        "dot_interaction " + shape_name(shape),
        [](const std::vector<Tensor>& in) { return ops::dot_interaction(in[0]); }, {random_twin(shape, generator)}, 0.0,
        generator);
  }
  // DLRM's join: the bottom output as one more feature vector, then beside the interactions.
  check_twins(
      "concat of [4, 1, 8] and [4, 26, 8] along dim 1, flattened beside [4, 208]",
      [](const std::vector<Tensor>& in) {
        const Tensor joined = ops::concat({ops::reshape(in[0], {4, 1, 8}), in[1]}, 1);
        return ops::concat({ops::flatten(joined, 1), ops::flatten(in[1], 1)}, 1);
      },
      {random_twin({4, 8}, generator), random_twin({4, 26, 8}, generator)}, 0.0, generator);
}
