// Tests of src/nn/sync_batch_norm.cpp in one process: sync_batch_norm with a reducer of world size 1 equals
// ops::batch_norm (f64, every layout, with and without the fused relu, forward, gradients and running
// statistics) and matches finite differences; with a reducer that stands for two ranks holding the same
// batch it equals batch norm of that batch twice (the backward's all-reduce included); BatchNorm2d with a
// reducer through set_batch_norm_reducer (one call per layer and pass, named after the layer, none in
// eval); argument errors. tests/dist/mpi_sync_batch_norm.cpp runs it over two real ranks.
#include <memory>
#include <string>
#include <vector>

#include "ops/op_test_helpers.h"
#include "opsnn/autograd/node.h"
#include "opsnn/core/error.h"
#include "opsnn/nn/nn.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

// world_size() ranks that all hold this process's tensors: the sum over them is the tensor times the
// world size (1: the identity). Records every call.
class EqualRanksReducer final : public nn::BatchStatisticsReducer {
 public:
  explicit EqualRanksReducer(int world = 1) : world_(world) {}
  int world_size() const override { return world_; }
  void all_reduce_sum(const Tensor& tensor, const std::string& what) override {
    calls.push_back({what, tensor.numel()});
    if (world_ == 1) return;
    Tensor handle = tensor;
    handle.copy_(ops::scale(tensor, static_cast<double>(world_)));
  }
  struct Call {
    std::string what;
    int64_t numel = 0;
  };
  std::vector<Call> calls;

 private:
  int world_;
};

struct Layout {
  Shape shape;
  bool channels_last = false;
};
int64_t channels_of(const Layout& layout) { return layout.channels_last ? layout.shape.back() : layout.shape[1]; }

// One training forward and backward of batch norm on copies of the inputs: plain (reducer null) or
// synchronised.
struct Run {
  Tensor out, grad_input, grad_gamma, grad_beta, running_mean, running_var;
};
Run run(const Layout& layout, bool relu, const Tensor& input, const Tensor& gamma, const Tensor& beta,
        const Tensor& upstream, const std::shared_ptr<nn::BatchStatisticsReducer>& reducer) {
  Run result;
  Tensor x = input.clone().set_requires_grad(true);
  Tensor weight = gamma.clone().set_requires_grad(true), bias = beta.clone().set_requires_grad(true);
  const int64_t C = channels_of(layout);
  result.running_mean = Tensor::full({C}, 0.25, input.dtype());
  result.running_var = Tensor::full({C}, 2.0, input.dtype());
  if (reducer)
    result.out = nn::sync_batch_norm(x, weight, bias, result.running_mean, result.running_var, 0.1, 1e-5,
                                     layout.channels_last, relu, reducer, "test layer");
  else if (relu)
    result.out = ops::batch_norm_relu(x, weight, bias, result.running_mean, result.running_var, true, 0.1, 1e-5,
                                      layout.channels_last);
  else
    result.out = ops::batch_norm(x, weight, bias, result.running_mean, result.running_var, true, 0.1, 1e-5,
                                 layout.channels_last);
  result.out.backward(upstream);
  result.grad_input = x.grad();
  result.grad_gamma = weight.grad();
  result.grad_beta = bias.grad();
  return result;
}

void require_same(const Run& actual, const Run& expected, double tolerance) {
  require_close(actual.out.to_vector<double>(), expected.out.to_vector<double>(), tolerance);
  require_close(actual.grad_input.to_vector<double>(), expected.grad_input.to_vector<double>(), tolerance);
  require_close(actual.grad_gamma.to_vector<double>(), expected.grad_gamma.to_vector<double>(), tolerance);
  require_close(actual.grad_beta.to_vector<double>(), expected.grad_beta.to_vector<double>(), tolerance);
  require_close(actual.running_mean.to_vector<double>(), expected.running_mean.to_vector<double>(), tolerance);
  require_close(actual.running_var.to_vector<double>(), expected.running_var.to_vector<double>(), tolerance);
}

const std::vector<Layout> kLayouts{{{3, 2, 3, 4}, false}, {{5, 3}, false}, {{2, 3, 5}, false}, {{2, 3, 4, 3}, true}};

// x stacked on itself along the batch dimension (dimension 0).
Tensor twice(const Tensor& x) {
  std::vector<double> values = x.to_vector<double>();
  values.insert(values.end(), values.begin(), values.end());
  Shape shape = x.shape();
  shape[0] *= 2;
  return Tensor::from_vector(values, shape, x.dtype());
}

// The first half of dimension 0.
Tensor first_half(const Tensor& x) { return ops::slice(x.detach(), 0, x.size(0) / 2); }

}  // namespace

TEST_CASE("sync_batch_norm with a reducer of world size 1 equals batch_norm in f64", "[nn]") {
  for (const Layout& layout : kLayouts) {
    for (bool relu : {false, true}) {
      INFO(shape_str(layout.shape) << (layout.channels_last ? " channels_last" : "") << (relu ? " relu" : ""));
      Generator generator(5);
      const int64_t C = channels_of(layout);
      const Tensor input = Tensor::uniform(layout.shape, -2, 3, generator, DType::f64);
      const Tensor gamma = Tensor::uniform({C}, 0.5, 1.5, generator, DType::f64);
      const Tensor beta = Tensor::uniform({C}, -1, 1, generator, DType::f64);
      const Tensor upstream = Tensor::uniform(layout.shape, -1, 1, generator, DType::f64);
      auto reducer = std::make_shared<EqualRanksReducer>();
      const Run synchronised = run(layout, relu, input, gamma, beta, upstream, reducer);
      require_same(synchronised, run(layout, relu, input, gamma, beta, upstream, nullptr), 1e-12);
      // One call of [sum, sum of squares, count] forward, one of its gradient backward.
      REQUIRE(reducer->calls.size() == 2);
      CHECK(reducer->calls[0].what == "test layer");
      CHECK(reducer->calls[0].numel == 2 * C + 1);
      CHECK(reducer->calls[1].what == "gradient of test layer");
      CHECK(reducer->calls[1].numel == 2 * C + 1);
    }
  }
}

TEST_CASE("sync_batch_norm gradients match finite differences", "[nn]") {
  for (const Layout& layout : kLayouts) {
    for (int world : {1, 3}) {
      for (bool relu : {false, true}) {
        INFO(shape_str(layout.shape) << (layout.channels_last ? " channels_last" : "") << " world " << world
                                     << (relu ? " relu" : ""));
        Generator generator(17);
        const int64_t C = channels_of(layout);
        Tensor input = random_leaf(layout.shape, generator, -2, 2);
        Tensor gamma = random_leaf({C}, generator, 0.5, 1.5);
        Tensor beta = random_leaf({C}, generator);
        auto reducer = std::make_shared<EqualRanksReducer>(world);
        require_gradcheck(
            [&](const std::vector<Tensor>& in) {
              Tensor mean = Tensor::zeros({C}, DType::f64), var = Tensor::ones({C}, DType::f64);
              return nn::sync_batch_norm(in[0], in[1], in[2], mean, var, 0.1, 1e-5, layout.channels_last, relu, reducer,
                                         "gradcheck");
            },
            {input, gamma, beta});
      }
    }
  }
}

TEST_CASE("sync_batch_norm over two ranks holding one batch equals batch_norm of that batch twice", "[nn]") {
  // Each rank's gradient is that of the sum of both ranks' losses: batch norm of [x; x] with the upstream
  // gradient [g; g], first half. Without the backward's all-reduce the statistics' part would be halved.
  for (const Layout& layout : kLayouts) {
    for (bool relu : {false, true}) {
      INFO(shape_str(layout.shape) << (layout.channels_last ? " channels_last" : "") << (relu ? " relu" : ""));
      Generator generator(9);
      const int64_t C = channels_of(layout);
      const Tensor input = Tensor::uniform(layout.shape, -1, 2, generator, DType::f64);
      const Tensor gamma = Tensor::uniform({C}, 0.5, 1.5, generator, DType::f64);
      const Tensor beta = Tensor::uniform({C}, -1, 1, generator, DType::f64);
      const Tensor upstream = Tensor::uniform(layout.shape, -1, 1, generator, DType::f64);
      const Run together = run(layout, relu, input, gamma, beta, upstream, std::make_shared<EqualRanksReducer>(2));
      const Layout doubled{twice(input).shape(), layout.channels_last};
      const Run alone = run(doubled, relu, twice(input), gamma, beta, twice(upstream), nullptr);
      require_close(together.out.to_vector<double>(), first_half(alone.out).to_vector<double>(), 1e-12);
      require_close(together.grad_input.to_vector<double>(), first_half(alone.grad_input).to_vector<double>(), 1e-12);
      // Each rank's parameter gradient is half the whole batch's (data parallelism sums or averages them).
      require_close(ops::scale(together.grad_gamma, 2.0).to_vector<double>(), alone.grad_gamma.to_vector<double>(),
                    1e-12);
      require_close(ops::scale(together.grad_beta, 2.0).to_vector<double>(), alone.grad_beta.to_vector<double>(),
                    1e-12);
      // The running variance is unbiased with the global count (2n - 1 below), not this rank's.
      require_close(together.running_mean.to_vector<double>(), alone.running_mean.to_vector<double>(), 1e-12);
      require_close(together.running_var.to_vector<double>(), alone.running_var.to_vector<double>(), 1e-12);
    }
  }
}

TEST_CASE("sync_batch_norm in f32 and with bf16 activations stays close to batch_norm", "[nn]") {
  Generator generator(23);
  const Tensor input = Tensor::normal({4, 3, 5, 5}, 0.5, 2.0, generator, DType::f32);
  const Tensor gamma = Tensor::uniform({3}, 0.5, 1.5, generator), beta = Tensor::uniform({3}, -1, 1, generator);
  const Tensor upstream = Tensor::uniform({4, 3, 5, 5}, -1, 1, generator);
  const Layout layout{{4, 3, 5, 5}, false};
  auto reducer = std::make_shared<EqualRanksReducer>();
  const Run plain = run(layout, true, input, gamma, beta, upstream, nullptr);
  const Run synchronised = run(layout, true, input, gamma, beta, upstream, reducer);
  for (const auto& [actual, expected] :
       std::vector<std::pair<Tensor, Tensor>>{{synchronised.out, plain.out},
                                              {synchronised.grad_input, plain.grad_input},
                                              {synchronised.grad_gamma, plain.grad_gamma},
                                              {synchronised.running_var, plain.running_var}})
    CHECK(scaled_error(actual, expected) < 1e-5);

  // bf16 activations (the CPU has no bf16 batch-norm kernels to compare with): statistics, gamma and beta
  // in f32, the output in bf16, that of the f32 batch norm of the same values to bf16's precision.
  const Tensor half = input.to(DType::bf16);
  Tensor mean = Tensor::zeros({3}), var = Tensor::ones({3});
  Tensor x = half.clone().set_requires_grad(true);
  Tensor out = nn::sync_batch_norm(x, gamma, beta, mean, var, 0.1, 1e-5, false, false, reducer, "bf16");
  REQUIRE(out.dtype() == DType::bf16);
  Tensor plain_mean = Tensor::zeros({3}), plain_var = Tensor::ones({3});
  const Tensor expected = ops::batch_norm(half.to(DType::f32), gamma, beta, plain_mean, plain_var, true);
  CHECK(scaled_error(out, expected) < 1e-2);
  CHECK(scaled_error(var, plain_var) < 1e-5);
  CHECK(scaled_error(mean, plain_mean) < 1e-5);
  out.backward(upstream.to(DType::bf16));
  CHECK(x.grad().dtype() == DType::bf16);
}

TEST_CASE("set_batch_norm_reducer gives every BatchNorm2d of a tree its reducer and eval does not communicate",
          "[nn]") {
  Generator generator(3);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 3, 3).padding(1), generator));
  auto first = model->push_back(std::make_shared<nn::BatchNorm2d>(3));
  auto inner = model->push_back(std::make_shared<nn::Sequential>());
  auto second = inner->push_back(std::make_shared<nn::BatchNorm2d>(3));
  auto reducer = std::make_shared<EqualRanksReducer>();
  CHECK(nn::set_batch_norm_reducer(*model, reducer) == 2);
  CHECK(first->reducer() == reducer);
  CHECK(second->reducer() == reducer);

  const Tensor input = Tensor::uniform({4, 2, 5, 5}, -1, 1, generator);
  Tensor out = model->forward(input);
  ops::sum(ops::mul(out, out)).backward();
  REQUIRE(reducer->calls.size() == 4);  // two forward, then the backward from the last layer
  CHECK(reducer->calls[0].what == "SyncBatchNorm statistics of 1");
  CHECK(reducer->calls[1].what == "SyncBatchNorm statistics of 2.0");
  CHECK(reducer->calls[2].what == "gradient of SyncBatchNorm statistics of 2.0");
  CHECK(reducer->calls[3].what == "gradient of SyncBatchNorm statistics of 1");

  // forward_relu is relu after the synchronised normalisation.
  const Tensor features = Tensor::uniform({4, 3, 2, 2}, -1, 1, generator);
  const Tensor fused = first->forward_relu(features);
  const Tensor separate = ops::relu(first->forward(features));
  CHECK(scaled_error(fused, separate) < 1e-6);

  // Eval: the running statistics, no call, and the same output as without a reducer.
  model->eval();
  const size_t calls = reducer->calls.size();
  const Tensor evaluated = model->forward(input);
  CHECK(reducer->calls.size() == calls);
  CHECK(nn::set_batch_norm_reducer(*model, nullptr) == 2);
  CHECK(first->reducer() == nullptr);
  CHECK(model->forward(input).to_vector<float>() == evaluated.to_vector<float>());
  // Training again without the reducer: per-rank statistics, no call.
  model->train();
  model->forward(input);
  CHECK(reducer->calls.size() == calls);
  // The root itself may be the layer, named by its type.
  nn::BatchNorm2d alone(3);
  CHECK(nn::set_batch_norm_reducer(alone, reducer) == 1);
  alone.forward(features);
  CHECK(reducer->calls.back().what == "SyncBatchNorm statistics of BatchNorm2d");
}

TEST_CASE("sync_batch_norm and all_reduce_sum reject bad arguments with clear messages", "[nn]") {
  auto reducer = std::make_shared<EqualRanksReducer>();
  Tensor mean = Tensor::zeros({3}), var = Tensor::ones({3});
  const Tensor input = Tensor::zeros({4, 3, 2, 2});
  auto bn = [&](const Tensor& x, const Tensor& gamma, bool channels_last = false,
                std::shared_ptr<nn::BatchStatisticsReducer> with = nullptr) {
    nn::sync_batch_norm(x, gamma, Tensor(), mean, var, 0.1, 1e-5, channels_last, false, with ? with : reducer,
                        "bad layer");
  };
  CHECK_THAT(require_throws<ShapeError>([&] { bn(input, Tensor::ones({5})); }),
             Catch::Contains("gamma [5]") && Catch::Contains("[4, 3, 2, 2]"));
  CHECK_THAT(require_throws<TypeError>([&] { bn(input, Tensor::ones({3}, DType::f64)); }),
             Catch::Contains("gamma") && Catch::Contains("f64") && Catch::Contains("f32"));
  CHECK_THAT(require_throws<ShapeError>([&] { bn(Tensor::zeros({4}), Tensor()); }), Catch::Contains("[N, C]"));
  CHECK(require_throws<ShapeError>([&] {
          bn(Tensor::zeros({4, 3, 2}), Tensor(), true);
        }) == "sync_batch_norm: running_mean [3] does not match input [4, 3, 2] (expected [2])");
  // One value per channel: an error with one rank, fine with more (the global batch has more).
  CHECK_THAT(require_throws<ShapeError>([&] {
               bn(Tensor::zeros({1, 3}), Tensor());
             }),
             Catch::Contains("more than one value per channel"));
  REQUIRE(reducer->calls.empty());  // every check comes before the collective
  bn(Tensor::ones({1, 3}), Tensor(), false, std::make_shared<EqualRanksReducer>(2));
  CHECK_THAT(require_throws<UsageError>([&] {
               nn::sync_batch_norm(input, Tensor(), Tensor(), mean, var, 0.1, 1e-5, false, false, nullptr, "orphan");
             }),
             Catch::Contains("no reducer") && Catch::Contains("orphan"));

  CHECK_THAT(require_throws<ShapeError>([&] { nn::all_reduce_sum({}, reducer, "nothing"); }),
             Catch::Contains("nothing") && Catch::Contains("no tensors"));
  CHECK_THAT(require_throws<TypeError>([&] {
               nn::all_reduce_sum({Tensor::ones({2}), Tensor::ones({2}, DType::f64)}, reducer, "mixed");
             }),
             Catch::Contains("dtype mismatch"));
  CHECK_THAT(require_throws<TypeError>([&] { nn::all_reduce_sum({Tensor::ones({2}, DType::i64)}, reducer, "ints"); }),
             Catch::Contains("f32 or f64"));
}

TEST_CASE("all_reduce_sum concatenates its parts and splits the reduced gradient among them", "[nn]") {
  auto reducer = std::make_shared<EqualRanksReducer>(2);
  Tensor a = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2}).set_requires_grad(true);
  Tensor b = Tensor::from_vector<double>({5}, {1});  // no gradient wanted
  Tensor c = Tensor::from_vector<double>({6, 7}, {2}).set_requires_grad(true);
  Tensor total = nn::all_reduce_sum({a, b, c}, reducer, "parts");
  CHECK(total.to_vector<double>() == std::vector<double>{2, 4, 6, 8, 10, 12, 14});
  total.backward(Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7}, {7}));
  REQUIRE(a.grad().shape() == Shape{2, 2});
  CHECK(a.grad().to_vector<double>() == std::vector<double>{2, 4, 6, 8});
  CHECK(c.grad().to_vector<double>() == std::vector<double>{12, 14});
  CHECK_FALSE(b.grad().defined());
  REQUIRE(reducer->calls.size() == 2);
  CHECK(reducer->calls[1].what == "gradient of parts");
  CHECK(reducer->calls[1].numel == 7);
}
