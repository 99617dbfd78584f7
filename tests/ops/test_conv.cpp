// Tests of ops::conv2d (src/ops/conv.cpp, src/ops/cpu/conv.cpp): values against a direct loop
// reference, f32 against f64, finite-difference gradients for many geometries, and argument errors.
#include <omp.h>

#include <cmath>
#include <utility>
#include <vector>

#include "ops/op_test_helpers.h"
#include "opsnn/autograd/node.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

Tensor random_input(const Shape& shape, uint64_t seed) {
  Generator generator(seed);
  return random_leaf(shape, generator);
}

// out[n, o, oh, ow] = bias[o] + sum_{c, kh, kw} input[n, c, oh*sh - ph + kh, ow*sw - pw + kw] * weight[o, c, kh, kw]
std::vector<double> reference_conv(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                   const ops::Conv2dGeometry& g) {
  const auto x = input.to_vector<double>(), w = weight.to_vector<double>();
  const auto b = bias.defined() ? bias.to_vector<double>() : std::vector<double>();
  const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
  const int64_t O = weight.size(0), KH = weight.size(2), KW = weight.size(3);
  const int64_t OH = (H + 2 * g.pad_h - KH) / g.stride_h + 1, OW = (W + 2 * g.pad_w - KW) / g.stride_w + 1;
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double total = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * g.stride_h - g.pad_h + kh, iw = ow * g.stride_w - g.pad_w + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                total += x[static_cast<size_t>(((n * C + c) * H + ih) * W + iw)] *
                         w[static_cast<size_t>(((o * C + c) * KH + kh) * KW + kw)];
              }
          out.push_back(total);
        }
  return out;
}

// Gradients of sum(out * grad_out) by the same direct loops: {grad_input, grad_weight}.
std::pair<std::vector<double>, std::vector<double>> reference_conv_backward(const Tensor& input, const Tensor& weight,
                                                                            const Tensor& grad_out,
                                                                            const ops::Conv2dGeometry& g) {
  const auto x = input.to_vector<double>(), w = weight.to_vector<double>(), dy = grad_out.to_vector<double>();
  const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
  const int64_t O = weight.size(0), KH = weight.size(2), KW = weight.size(3);
  const int64_t OH = grad_out.size(2), OW = grad_out.size(3);
  std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const double d = dy[static_cast<size_t>(((n * O + o) * OH + oh) * OW + ow)];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * g.stride_h - g.pad_h + kh, iw = ow * g.stride_w - g.pad_w + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const size_t xi = static_cast<size_t>(((n * C + c) * H + ih) * W + iw);
                const size_t wi = static_cast<size_t>(((o * C + c) * KH + kh) * KW + kw);
                dx[xi] += d * w[wi];
                dw[wi] += d * x[xi];
              }
        }
  return {dx, dw};
}

ops::Conv2dGeometry geometry(int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  ops::Conv2dGeometry g;
  g.stride_h = stride_h;
  g.stride_w = stride_w;
  g.pad_h = pad_h;
  g.pad_w = pad_w;
  return g;
}

struct ConvCase {
  Shape input, weight;
  ops::Conv2dGeometry geometry;
  bool bias;
};

// Kernel sizes 1, 3, 5, 7, non-square kernels and images, strides 1-3, padding 0-3, with and without
// bias; batch 1 and odd batches take the one-sample-at-a-time path, even batches the spread one.
const std::vector<ConvCase> kCases = {
    {{2, 3, 5, 6}, {4, 3, 1, 1}, geometry(1, 1, 0, 0), true},   // pointwise (direct GEMM)
    {{1, 3, 5, 6}, {2, 3, 1, 1}, geometry(2, 2, 0, 0), false},  // 1x1 stride 2
    {{2, 2, 6, 5}, {3, 2, 3, 3}, geometry(1, 1, 1, 1), true},  {{3, 2, 7, 7}, {2, 2, 3, 3}, geometry(2, 2, 1, 1), true},
    {{1, 2, 8, 7}, {3, 2, 5, 5}, geometry(1, 2, 2, 1), false}, {{2, 1, 9, 8}, {2, 1, 7, 7}, geometry(2, 2, 3, 3), true},
    {{2, 2, 6, 9}, {2, 2, 3, 5}, geometry(1, 3, 0, 2), true},  // non-square kernel, asymmetric geometry
    {{1, 2, 5, 4}, {2, 2, 2, 4}, geometry(3, 1, 1, 0), false},
};

}  // namespace

TEST_CASE("conv2d forward matches a direct loop reference", "[ops]") {
  uint64_t seed = 10;
  for (const ConvCase& c : kCases) {
    Tensor input = random_input(c.input, ++seed), weight = random_input(c.weight, ++seed);
    Tensor bias = c.bias ? random_input({c.weight[0]}, ++seed) : Tensor();
    INFO("input " << shape_str(c.input) << " weight " << shape_str(c.weight) << " stride " << c.geometry.stride_h << "x"
                  << c.geometry.stride_w << " pad " << c.geometry.pad_h << "x" << c.geometry.pad_w);
    Tensor out = ops::conv2d(input, weight, bias, c.geometry);
    const int64_t out_h = (c.input[2] + 2 * c.geometry.pad_h - c.weight[2]) / c.geometry.stride_h + 1;
    const int64_t out_w = (c.input[3] + 2 * c.geometry.pad_w - c.weight[3]) / c.geometry.stride_w + 1;
    REQUIRE(out.shape() == Shape{c.input[0], c.weight[0], out_h, out_w});
    require_close(out.to_vector<double>(), reference_conv(input, weight, bias, c.geometry));

    // The f32 kernels compute the same values to f32 precision.
    Tensor out32 = ops::conv2d(input.to(DType::f32), weight.to(DType::f32),
                               bias.defined() ? bias.to(DType::f32) : Tensor(), c.geometry);
    REQUIRE(out32.dtype() == DType::f32);
    require_close(out32.to_vector<double>(), out.to_vector<double>(), 1e-5);
  }
}

TEST_CASE("conv2d gradients match finite differences", "[ops]") {
  uint64_t seed = 100;
  for (const ConvCase& c : kCases) {
    INFO("input " << shape_str(c.input) << " weight " << shape_str(c.weight) << " stride " << c.geometry.stride_h << "x"
                  << c.geometry.stride_w << " pad " << c.geometry.pad_h << "x" << c.geometry.pad_w);
    std::vector<Tensor> inputs = {random_input(c.input, ++seed), random_input(c.weight, ++seed)};
    if (c.bias) inputs.push_back(random_input({c.weight[0]}, ++seed));
    const ops::Conv2dGeometry g = c.geometry;
    require_gradcheck(
        [g](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), g); },
        inputs);
  }
}

TEST_CASE("conv2d gradients agree between the spread and one-sample-at-a-time paths", "[ops]") {
  // With one thread every batch runs sample by sample; with two an even batch is spread over threads
  // and the weight gradient is summed from per-thread partials. Both must give the same numbers.
  const int saved_threads = omp_get_max_threads();
  auto run = [](int threads) {
    omp_set_num_threads(threads);
    Tensor input = random_input({4, 3, 7, 7}, 7), weight = random_input({5, 3, 3, 3}, 8), bias = random_input({5}, 9);
    Tensor out = ops::conv2d(input, weight, bias, geometry(2, 1, 1, 1));
    out.backward(Tensor::full(out.shape(), 0.5, DType::f64));
    std::vector<double> all = out.to_vector<double>();
    for (const Tensor& t : {input.grad(), weight.grad(), bias.grad()}) {
      std::vector<double> values = t.to_vector<double>();
      all.insert(all.end(), values.begin(), values.end());
    }
    return all;
  };
  const std::vector<double> single = run(1), spread = run(2);
  omp_set_num_threads(saved_threads);
  require_close(spread, single, 1e-13);
}

TEST_CASE("conv2d splits large images into row bands without changing the result", "[ops]") {
  // 64 channels x 3x3 give 576 im2col rows; a 40-wide output then needs several bands of rows (the
  // kernel keeps each band's im2col block near 512 KiB), including a short last band.
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 2}) {
    for (const auto& [batch, g] :
         std::vector<std::pair<int64_t, ops::Conv2dGeometry>>{{1, geometry(1, 1, 1, 1)}, {2, geometry(2, 1, 1, 0)}}) {
      INFO(threads << " thread(s), batch " << batch << ", stride " << g.stride_h << "x" << g.stride_w);
      omp_set_num_threads(threads);
      Tensor input = random_input({batch, 64, 83, 40}, 31), weight = random_input({3, 64, 3, 3}, 32);
      Tensor out = ops::conv2d(input, weight, Tensor(), g);
      require_close(out.to_vector<double>(), reference_conv(input, weight, Tensor(), g));
      Tensor grad_out = random_input(out.shape(), 33).detach();
      out.backward(grad_out);
      const auto [grad_input, grad_weight] = reference_conv_backward(input, weight, grad_out, g);
      require_close(input.grad().to_vector<double>(), grad_input);
      require_close(weight.grad().to_vector<double>(), grad_weight);
    }
  }
  omp_set_num_threads(saved_threads);
}

TEST_CASE("conv2d without any input requiring grad records no history", "[ops]") {
  Tensor input = Tensor::ones({1, 1, 3, 3}, DType::f32), weight = Tensor::ones({1, 1, 3, 3}, DType::f32);
  Tensor out = ops::conv2d(input, weight, Tensor(), geometry(1, 1, 1, 1));
  REQUIRE_FALSE(out.requires_grad());
  // Corner windows see 4 ones, edges 6, the centre 9.
  REQUIRE(out.to_vector<float>() == std::vector<float>{4, 6, 4, 6, 9, 6, 4, 6, 4});
}

TEST_CASE("conv2d on images that do not require grad computes no input gradient (the stem)", "[ops]") {
  Generator generator(19);
  const Tensor images = Tensor::uniform({2, 3, 9, 9}, -1.0, 1.0, generator, DType::f32);
  Tensor weight = Tensor::uniform({4, 3, 7, 7}, -0.3, 0.3, generator, DType::f32);
  weight.set_requires_grad(true);
  // Mixed precision casts the images before the stem; that cast records nothing either.
  REQUIRE_FALSE(ops::cast(images, DType::bf16).requires_grad());
  Tensor out = ops::conv2d(images, weight, Tensor(), geometry(2, 2, 3, 3));
  REQUIRE(out.grad_fn() != nullptr);
  // The backward runs the backend's input-gradient kernel only where needs_grad(0) holds.
  REQUIRE_FALSE(out.grad_fn()->needs_grad(0));
  REQUIRE(out.grad_fn()->needs_grad(1));
  ops::sum(out).backward();
  REQUIRE_FALSE(images.grad().defined());
  REQUIRE(weight.grad().defined());
}

TEST_CASE("conv2d rejects bad arguments with messages naming both sides", "[ops]") {
  Tensor input = Tensor::zeros({2, 3, 8, 8}), weight = Tensor::zeros({4, 3, 3, 3});
  SECTION("channel mismatch") {
    std::string message = require_throws<ShapeError>([&] {
      ops::conv2d(input, Tensor::zeros({4, 2, 3, 3}), Tensor());
    });
    CHECK_THAT(message, Catch::Contains("[2, 3, 8, 8]") && Catch::Contains("[4, 2, 3, 3]"));
  }
  SECTION("bias length") {
    std::string message = require_throws<ShapeError>([&] { ops::conv2d(input, weight, Tensor::zeros({3})); });
    CHECK_THAT(message, Catch::Contains("[3]") && Catch::Contains("[4, 3, 3, 3]"));
  }
  SECTION("input rank") {
    std::string message = require_throws<ShapeError>([&] { ops::conv2d(Tensor::zeros({3, 8, 8}), weight, Tensor()); });
    CHECK_THAT(message, Catch::Contains("4-D") && Catch::Contains("[3, 8, 8]"));
  }
  SECTION("kernel larger than the padded input") {
    std::string message = require_throws<ShapeError>([&] {
      ops::conv2d(Tensor::zeros({1, 3, 2, 2}), weight, Tensor(), geometry(1, 1, 0, 0));
    });
    CHECK_THAT(message, Catch::Contains("kernel 3x3") && Catch::Contains("padded input 2x2"));
    // Padding 1 makes it fit.
    REQUIRE(ops::conv2d(Tensor::zeros({1, 3, 2, 2}), weight, Tensor(), geometry(1, 1, 1, 1)).shape() ==
            Shape{1, 4, 2, 2});
  }
  SECTION("stride zero and negative padding") {
    CHECK_THAT(require_throws<ShapeError>([&] { ops::conv2d(input, weight, Tensor(), geometry(0, 1, 0, 0)); }),
               Catch::Contains("stride 0x1"));
    CHECK_THAT(require_throws<ShapeError>([&] { ops::conv2d(input, weight, Tensor(), geometry(1, 1, -1, 0)); }),
               Catch::Contains("padding -1x0"));
  }
  SECTION("dtype mismatch") {
    std::string message = require_throws<TypeError>([&] {
      ops::conv2d(input, Tensor::zeros({4, 3, 3, 3}, DType::f64), Tensor());
    });
    CHECK_THAT(message, Catch::Contains("f32") && Catch::Contains("f64"));
  }
  SECTION("integer dtype") {
    CHECK_THAT(
        require_throws<TypeError>([&] {
          ops::conv2d(Tensor::zeros({1, 1, 3, 3}, DType::i32), Tensor::zeros({1, 1, 1, 1}, DType::i32), Tensor());
        }),
        Catch::Contains("i32"));
  }
}
