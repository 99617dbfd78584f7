// Tests of the channels-last (NHWC) form of conv2d on the CPU (src/ops/conv.cpp, src/ops/cpu/conv.cpp): it
// equals the NCHW form on permuted operands, values and every gradient; finite-difference gradients in
// f64; shape errors name the channels-last layout.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ops/op_test_helpers.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/ops.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

const std::vector<int64_t> kToNhwc{0, 2, 3, 1}, kToNchw{0, 3, 1, 2};

Tensor leaf_copy(const Tensor& t) {
  Tensor copy = t.clone();
  copy.set_requires_grad(true);
  return copy;
}

void require_same_values(const Tensor& actual, const Tensor& expected, const std::string& what) {
  INFO(what);
  REQUIRE(actual.shape() == expected.shape());
  require_close(actual.to_vector<double>(), expected.to_vector<double>(), 1e-5);
}

ops::Conv2dGeometry geometry_of(int64_t stride, int64_t pad, bool channels_last) {
  ops::Conv2dGeometry g;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  g.channels_last = channels_last;
  return g;
}

struct ConvCase {
  const char* name;
  Shape input, weight;  // input NCHW
  int64_t stride, pad;
};

}  // namespace

TEST_CASE("channels-last conv2d equals the NCHW conv2d on permuted operands, values and gradients", "[ops][conv]") {
  const ConvCase cases[] = {{"1x1", {2, 5, 6, 7}, {4, 5, 1, 1}, 1, 0},
                            {"3x3 pad 1", {2, 3, 7, 6}, {6, 3, 3, 3}, 1, 1},
                            {"3x3 stride 2", {3, 4, 9, 8}, {5, 4, 3, 3}, 2, 1},
                            {"1x1 stride 2", {2, 6, 7, 9}, {3, 6, 1, 1}, 2, 0}};
  Generator generator(61);
  for (const ConvCase& c : cases)
    for (bool with_bias : {false, true}) {
      const std::string name = std::string(c.name) + (with_bias ? " bias" : "");
      const Tensor input = Tensor::uniform(c.input, -1.0, 1.0, generator);
      const Tensor weight = Tensor::uniform(c.weight, -0.5, 0.5, generator);
      const Tensor bias = with_bias ? Tensor::uniform({c.weight[0]}, -0.5, 0.5, generator) : Tensor();

      Tensor x = leaf_copy(input), w = leaf_copy(weight), b = with_bias ? leaf_copy(bias) : Tensor();
      const Tensor out = ops::conv2d(x, w, b, geometry_of(c.stride, c.pad, false));
      const Tensor upstream = Tensor::uniform(out.shape(), -1.0, 1.0, generator);
      out.backward(upstream);

      Tensor x_nhwc = leaf_copy(input.permute(kToNhwc).contiguous()), w_cl = leaf_copy(weight);
      Tensor b_cl = with_bias ? leaf_copy(bias) : Tensor();
      const Tensor out_nhwc = ops::conv2d(x_nhwc, w_cl, b_cl, geometry_of(c.stride, c.pad, true));
      REQUIRE(out_nhwc.shape() == Shape{out.size(0), out.size(2), out.size(3), out.size(1)});
      out_nhwc.backward(upstream.permute(kToNhwc).contiguous());

      require_same_values(out_nhwc.permute(kToNchw), out, name + " output");
      require_same_values(x_nhwc.grad().permute(kToNchw), x.grad(), name + " grad input");
      require_same_values(w_cl.grad(), w.grad(), name + " grad weight");
      if (with_bias) require_same_values(b_cl.grad(), b.grad(), name + " grad bias");
    }
}

TEST_CASE("channels-last conv2d gradients match finite differences", "[ops][conv]") {
  Generator generator(62);
  for (int64_t stride : {1, 2}) {
    const ops::Conv2dGeometry g = geometry_of(stride, 1, true);
    require_gradcheck([&](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], in[2], g); },
                      {random_leaf({2, 5, 4, 3}, generator), random_leaf({2, 3, 3, 3}, generator),
                       random_leaf({2}, generator)});
  }
}

TEST_CASE("channels-last conv2d errors speak of the NHWC layout", "[ops][conv]") {
  const Tensor weight = Tensor::zeros({4, 3, 3, 3});
  // An NCHW-shaped input ([N, C, H, W] with C = 3) read as NHWC has 5 channels.
  std::string message = require_throws<ShapeError>(
      [&] { ops::conv2d(Tensor::zeros({2, 3, 5, 5}), weight, Tensor(), geometry_of(1, 1, true)); });
  CHECK_THAT(message, Catch::Contains("[N, H, W, C]") && Catch::Contains("5 channels"));
  message = require_throws<ShapeError>(
      [&] { ops::conv2d(Tensor::zeros({2, 5, 3}), weight, Tensor(), geometry_of(1, 1, true)); });
  CHECK_THAT(message, Catch::Contains("[N, H, W, C]"));
  // The same tensor is a valid NCHW input.
  CHECK(ops::conv2d(Tensor::zeros({2, 3, 5, 5}), weight, Tensor(), geometry_of(1, 1, false)).shape() ==
        Shape{2, 4, 5, 5});
}
