// Tests of ops::max_pool2d, avg_pool2d and global_avg_pool2d (src/ops/pool.cpp, src/ops/cpu/pool.cpp):
// worked values, tie and padding rules, finite-difference gradients and geometry errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/op_test_helpers.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/backend.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

ops::Pool2dGeometry pool(int64_t kernel, int64_t stride, int64_t pad, bool count_include_pad = true) {
  ops::Pool2dGeometry g;
  g.kernel_h = g.kernel_w = kernel;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  g.count_include_pad = count_include_pad;
  return g;
}

// Distinct values (a shuffled ramp with gaps of 0.05) so no max-pool window has a tie that a
// finite-difference step could flip.
Tensor distinct_leaf(const Shape& shape, uint64_t seed) {
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = -1.0 + 0.05 * static_cast<double>(i);
  Generator generator(seed);
  for (size_t i = values.size(); i > 1; --i) std::swap(values[i - 1], values[generator.next_below(i)]);
  Tensor t = Tensor::from_vector<double>(values, shape);
  t.set_requires_grad(true);
  return t;
}

}  // namespace

TEST_CASE("max_pool2d picks window maxima and returns flat h*W+w indices", "[ops]") {
  // 4x4 plane 0..15 with 2x2 stride-2 windows: maxima at the bottom-right of each window.
  std::vector<double> ramp(16);
  std::iota(ramp.begin(), ramp.end(), 0.0);
  Tensor input = Tensor::from_vector<double>(ramp, {1, 1, 4, 4});
  Tensor out = ops::max_pool2d(input, pool(2, 2, 0));
  REQUIRE(out.shape() == Shape{1, 1, 2, 2});
  REQUIRE(out.to_vector<double>() == std::vector<double>{5, 7, 13, 15});

  // 3x3 stride 2 padding 1 on 5x5: output floor((5 + 2 - 3) / 2) + 1 = 3.
  std::vector<double> values(25);
  std::iota(values.begin(), values.end(), 0.0);
  Tensor padded_out = ops::max_pool2d(Tensor::from_vector<double>(values, {1, 1, 5, 5}), pool(3, 2, 1));
  REQUIRE(padded_out.shape() == Shape{1, 1, 3, 3});
  REQUIRE(padded_out.to_vector<double>() == std::vector<double>{6, 8, 9, 16, 18, 19, 21, 23, 24});
}

TEST_CASE("max_pool2d 2x2 stride 2 follows the scan-order rules with ties NaN and -inf and odd sizes", "[ops]") {
  // The 2x2 stride-2 fast path against a scan of each window in the general loop's order: the first
  // maximum wins a tie, the first NaN wins over everything, -inf cells still give an index.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> palette = {-inf, -1.0, 0.0, 1.0, 1.0, nan};
  const int64_t planes = 6, h = 7, w = 9;  // odd: the last row and column belong to no window
  std::vector<double> values(static_cast<size_t>(planes * h * w));
  uint32_t state = 12345;
  for (double& v : values) {
    state = state * 1664525u + 1013904223u;
    v = palette[(state >> 16) % palette.size()];
  }
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor input = Tensor::from_vector<double>(values, {2, 3, h, w}).to(dtype);
    Tensor out = Tensor::empty({2, 3, h / 2, w / 2}, dtype), indices = Tensor::empty({2, 3, h / 2, w / 2}, DType::i32);
    ops::backend_for(kCPU).max_pool2d_forward(input, out, indices, pool(2, 2, 0));
    const std::vector<double> got = out.to_vector<double>();
    const std::vector<int32_t> at = indices.to_vector<int32_t>();
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t oh = 0; oh < h / 2; ++oh)
        for (int64_t ow = 0; ow < w / 2; ++ow) {
          double best = -inf;
          int64_t best_at = 2 * oh * w + 2 * ow;
          for (int64_t ih = 2 * oh; ih < 2 * oh + 2; ++ih)
            for (int64_t iw = 2 * ow; iw < 2 * ow + 2; ++iw) {
              const double v = values[static_cast<size_t>(p * h * w + ih * w + iw)];
              if (v > best || (std::isnan(v) && !std::isnan(best))) best = v, best_at = ih * w + iw;
            }
          const size_t o = static_cast<size_t>((p * (h / 2) + oh) * (w / 2) + ow);
          INFO("plane " << p << " window " << oh << "," << ow);
          REQUIRE(at[o] == best_at);
          REQUIRE((std::isnan(best) ? std::isnan(got[o]) : got[o] == best));
        }
  }
}

TEST_CASE("max_pool2d treats padding as -inf", "[ops]") {
  // All inputs negative: a zero-padded max would return 0 at the borders.
  Tensor input = Tensor::from_vector<float>({-4, -3, -2, -1}, {1, 1, 2, 2});
  Tensor out = ops::max_pool2d(input, pool(2, 1, 1));
  REQUIRE(out.shape() == Shape{1, 1, 3, 3});
  REQUIRE(out.to_vector<float>() == std::vector<float>{-4, -3, -3, -2, -1, -1, -2, -1, -1});
}

TEST_CASE("max_pool2d sends the gradient of a tie to the first maximum", "[ops]") {
  // Every window of a constant plane ties; with overlapping 2x2 stride-1 windows the first (top-left)
  // element of each window takes the whole gradient.
  Tensor input = Tensor::full({1, 1, 3, 3}, 2.0, DType::f64).set_requires_grad(true);
  Tensor out = ops::max_pool2d(input, pool(2, 1, 0));
  out.backward(Tensor::from_vector<double>({1, 10, 100, 1000}, {1, 1, 2, 2}));
  REQUIRE(input.grad().to_vector<double>() == std::vector<double>{1, 10, 0, 100, 1000, 0, 0, 0, 0});

  // A tie between a later and an earlier position of one window, in f32 too.
  Tensor partial = Tensor::from_vector<float>({1, 7, 7, 3}, {1, 1, 2, 2}).set_requires_grad(true);
  ops::max_pool2d(partial, pool(2, 2, 0)).backward(Tensor::full({1, 1, 1, 1}, 1.0));
  REQUIRE(partial.grad().to_vector<float>() == std::vector<float>{0, 1, 0, 0});
}

TEST_CASE("max_pool2d gradients match finite differences", "[ops]") {
  uint64_t seed = 1;
  for (const auto& [shape, geometry] : std::vector<std::pair<Shape, ops::Pool2dGeometry>>{
           {{2, 2, 6, 6}, pool(2, 2, 0)}, {{1, 3, 7, 5}, pool(3, 2, 1)}, {{2, 1, 5, 5}, pool(3, 1, 1)}}) {
    INFO("input " << shape_str(shape) << " kernel " << geometry.kernel_h << " stride " << geometry.stride_h);
    const ops::Pool2dGeometry g = geometry;
    require_gradcheck([g](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], g); },
                      {distinct_leaf(shape, ++seed)});
  }
}

TEST_CASE("avg_pool2d divides by the window, with or without padding counted", "[ops]") {
  Tensor input = Tensor::from_vector<double>({1, 2, 3, 4}, {1, 1, 2, 2});
  // 2x2 windows at stride 1 with padding 1: corner windows hold one input cell.
  Tensor with_pad = ops::avg_pool2d(input, pool(2, 1, 1, true));
  require_close(with_pad.to_vector<double>(),
                {1 / 4.0, 3 / 4.0, 2 / 4.0, 4 / 4.0, 10 / 4.0, 6 / 4.0, 3 / 4.0, 7 / 4.0, 4 / 4.0});
  Tensor without_pad = ops::avg_pool2d(input, pool(2, 1, 1, false));
  require_close(without_pad.to_vector<double>(), {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4});
}

TEST_CASE("avg_pool2d gradients match finite differences", "[ops]") {
  uint64_t seed = 20;
  for (bool include_pad : {true, false}) {
    for (const auto& [shape, geometry] :
         std::vector<std::pair<Shape, ops::Pool2dGeometry>>{{{2, 2, 6, 6}, pool(2, 2, 0, include_pad)},
                                                            {{1, 3, 7, 5}, pool(3, 2, 1, include_pad)},
                                                            {{2, 1, 5, 6}, pool(5, 1, 2, include_pad)}}) {
      INFO("input " << shape_str(shape) << " kernel " << geometry.kernel_h << " include_pad " << include_pad);
      Generator generator(++seed);
      const ops::Pool2dGeometry g = geometry;
      require_gradcheck([g](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], g); },
                        {random_leaf(shape, generator)});
    }
  }
}

TEST_CASE("global_avg_pool2d averages each plane into [N, C]", "[ops]") {
  std::vector<double> values(2 * 3 * 4 * 5);
  std::iota(values.begin(), values.end(), 0.0);
  Tensor input = Tensor::from_vector<double>(values, {2, 3, 4, 5});
  Tensor out = ops::global_avg_pool2d(input);
  REQUIRE(out.shape() == Shape{2, 3});
  // Plane p holds 20p .. 20p + 19, mean 20p + 9.5.
  require_close(out.to_vector<double>(), {9.5, 29.5, 49.5, 69.5, 89.5, 109.5});

  Generator generator(5);
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::global_avg_pool2d(in[0]); },
                    {random_leaf({2, 3, 3, 4}, generator)});
}

TEST_CASE("global_avg_pool2d_nhwc equals global_avg_pool2d of the NCHW tensor bit for bit", "[ops]") {
  // Each channel's cells are summed in the same order (h, then w) in both layouts, so the f32 results
  // and gradients are equal exactly, not just closely.
  Generator generator(6);
  const Tensor nchw = Tensor::uniform({3, 5, 4, 6}, -2, 2, generator);
  Tensor a = nchw.clone(), b = ops::permute(nchw, {0, 2, 3, 1}).clone();  // b: [N, H, W, C], contiguous
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor pooled_a = ops::global_avg_pool2d(a), pooled_b = ops::global_avg_pool2d_nhwc(b);
  REQUIRE(pooled_b.shape() == Shape{3, 5});
  REQUIRE(pooled_b.to_vector<float>() == pooled_a.to_vector<float>());
  const Tensor upstream = Tensor::uniform({3, 5}, -1, 1, generator);
  ops::sum(ops::mul(pooled_a, upstream)).backward();
  ops::sum(ops::mul(pooled_b, upstream)).backward();
  REQUIRE(b.grad().shape() == Shape{3, 4, 6, 5});
  REQUIRE(ops::permute(b.grad(), {0, 3, 1, 2}).to_vector<float>() == a.grad().to_vector<float>());
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::global_avg_pool2d_nhwc(in[0]); },
                    {random_leaf({2, 3, 4, 5}, generator)});
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::global_avg_pool2d_nhwc(Tensor::zeros({2, 4, 3}));
             }),
             Catch::Contains("global_avg_pool2d_nhwc") && Catch::Contains("[2, 4, 3]"));
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::global_avg_pool2d_nhwc(Tensor::zeros({2, 0, 3, 4}));
             }),
             Catch::Contains("empty spatial extent"));
}

TEST_CASE("pooling kernels agree between f32 and f64", "[ops]") {
  Generator generator(9);
  Tensor input = Tensor::uniform({2, 3, 9, 9}, -1, 1, generator, DType::f64);
  Tensor input32 = input.to(DType::f32);
  const ops::Pool2dGeometry g = pool(3, 2, 1);
  require_close(ops::max_pool2d(input32, g).to_vector<double>(),
                ops::max_pool2d(input.to(DType::f32).to(DType::f64), g).to_vector<double>(), 0.0);
  require_close(ops::avg_pool2d(input32, g).to_vector<double>(), ops::avg_pool2d(input, g).to_vector<double>(), 1e-6);
  require_close(ops::global_avg_pool2d(input32).to_vector<double>(), ops::global_avg_pool2d(input).to_vector<double>(),
                1e-6);
}

TEST_CASE("pooling rejects invalid geometry naming it", "[ops]") {
  Tensor input = Tensor::zeros({1, 2, 4, 4});
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::max_pool2d(Tensor::zeros({1, 2, 2, 2}), pool(3, 1, 0));
             }),
             Catch::Contains("kernel 3x3") && Catch::Contains("padded input 2x2"));
  CHECK_THAT(require_throws<ShapeError>([&] { ops::avg_pool2d(input, pool(2, 0, 0)); }),
             Catch::Contains("avg_pool2d") && Catch::Contains("stride 0x0"));
  CHECK_THAT(require_throws<ShapeError>([&] { ops::max_pool2d(input, pool(3, 1, -1)); }),
             Catch::Contains("padding -1x-1"));
  CHECK_THAT(require_throws<ShapeError>([&] { ops::max_pool2d(input, pool(3, 1, 2)); }),
             Catch::Contains("padding 2x2") && Catch::Contains("half the kernel 3x3"));
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::max_pool2d(Tensor::zeros({2, 4, 4}), pool(2, 2, 0));
             }),
             Catch::Contains("4-D") && Catch::Contains("[2, 4, 4]"));
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::global_avg_pool2d(Tensor::zeros({2, 4}));
             }),
             Catch::Contains("[2, 4]"));
  // Max pooling's i32 argmax indices address planes of fewer than 2^31 cells (an empty batch of such
  // planes allocates nothing).
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::max_pool2d(Tensor::zeros({0, 1, 65536, 32769}), pool(2, 2, 0));
             }),
             Catch::Contains("max_pool2d") && Catch::Contains("65536x32769") && Catch::Contains("2^31 - 1"));
  // Padding exactly half the kernel is fine: 4 + 2 - 2 = 4 -> 5 windows at stride 1.
  REQUIRE(ops::max_pool2d(input, pool(2, 1, 1)).shape() == Shape{1, 2, 5, 5});
}
