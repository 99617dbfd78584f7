// SyncBatchNorm over two MPI ranks (run by ctest as `mpirun -np 2 opsnn-dist-tests`): each rank holds
// half of a batch, and what the ranks compute together must be what one process computes with plain batch
// norm over the whole batch - the rank's half of the output and of the input gradient, the parameter
// gradients summed over the ranks, the running statistics - in f64 for the op in every layout, and in f32
// for a convolutional model trained data-parallel with dist::convert_sync_batch_norm (where per-rank
// statistics, the control, do not match).
#include <cmath>
#include <string>
#include <vector>

#include "opsnn/dist/data_parallel.h"
#include "opsnn/dist/dist.h"
#include "opsnn/dist/sync_batch_norm.h"
#include "opsnn/nn/nn.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/optimizer.h"
#include "support/catch.h"

namespace {

using opsnn::DType;
using opsnn::Generator;
using opsnn::Shape;
using opsnn::Tensor;
namespace dist = opsnn::dist;
namespace nn = opsnn::nn;
namespace ops = opsnn::ops;
namespace optim = opsnn::optim;

std::shared_ptr<dist::Communicator> world() {
  static std::shared_ptr<dist::Communicator> communicator = [] {
    dist::InitOptions options;
    options.backend = "mpi";
    options.timeout_seconds = 120.0;
    return dist::init(options);
  }();
  return communicator;
}

// This rank's half of dimension 0 (the batch).
Tensor my_half(const Tensor& whole, int rank) {
  const int64_t half = whole.size(0) / 2;
  return ops::slice(whole.detach(), rank * half, (rank + 1) * half);
}

double largest(const Tensor& tensor) {
  double scale = 0.0;
  for (double v : tensor.to_vector<double>()) scale = std::max(scale, std::fabs(v));
  return scale;
}

// The largest |a - b| over `scale`, by default the largest |b|.
double relative_error(const Tensor& a, const Tensor& b, double scale = -1.0) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double error = std::fabs(x[i] - y[i]);
    if (!(error <= worst)) worst = error;  // a NaN sticks
  }
  return worst / ((scale < 0.0 ? largest(b) : scale) + 1e-30);
}

Tensor summed_over_ranks(const Tensor& tensor, const std::string& what) {
  Tensor total = tensor.clone();
  world()->all_reduce(total, dist::ReduceOp::sum, what);
  return total;
}

struct Layout {
  Shape shape;
  bool channels_last = false;
};

// A small convolutional network with a BatchNorm2d after each convolution (the first with the fused relu),
// NCHW or channels-last throughout.
class Net : public nn::Module {
 public:
  Net(bool channels_last, Generator& generator) : Module("Net"), channels_last_(channels_last) {
    conv1_ = register_module(
        "conv1",
        std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 4, 3).padding(1).channels_last(channels_last), generator));
    bn1_ = register_module("bn1",
                           std::make_shared<nn::BatchNorm2d>(nn::BatchNorm2dOptions(4).channels_last(channels_last)));
    conv2_ = register_module(
        "conv2", std::make_shared<nn::Conv2d>(
                     nn::Conv2dOptions(4, 6, 3).stride(2).padding(1).channels_last(channels_last), generator));
    bn2_ = register_module("bn2",
                           std::make_shared<nn::BatchNorm2d>(nn::BatchNorm2dOptions(6).channels_last(channels_last)));
    fc_ = register_module("fc", std::make_shared<nn::Linear>(6, 3, generator));
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = bn1_->forward_relu(conv1_->forward(input));
    x = ops::relu(bn2_->forward(conv2_->forward(x)));
    return fc_->forward(ops::mean(x, channels_last_ ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 3}));
  }

 private:
  bool channels_last_;
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Linear> fc_;
};

constexpr int64_t kBatch = 8, kSide = 6, kSteps = 20;

struct Problem {
  Tensor inputs, labels;
};
Problem make_problem(bool channels_last) {
  Generator generator(77);
  Problem problem;
  problem.inputs = Tensor::normal(channels_last ? Shape{kBatch, kSide, kSide, 2} : Shape{kBatch, 2, kSide, kSide}, 0.5,
                                  1.5, generator);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < kBatch; ++i) labels.push_back((i * 5 + 1) % 3);
  problem.labels = Tensor::from_vector(labels, {kBatch});
  return problem;
}

// What a model computes and holds: the first step's logits, input gradient and parameter gradients (this
// rank's, before any averaging), and after kSteps SGD steps its parameters and running statistics.
struct Trained {
  Tensor logits, input_grad;
  std::vector<Tensor> first_grads, params, buffers;
};

// Alone (no communicator) on the whole batch, or data-parallel on this rank's half with or without
// SyncBatchNorm.
Trained train(bool channels_last, bool together, bool synchronise) {
  Generator generator(5);
  auto model = std::make_shared<Net>(channels_last, generator);
  auto optimizer = optim::make_optimizer("sgd", model->named_parameters(), optim::OptimizerOptions(0.05).momentum(0.9));
  std::unique_ptr<dist::DataParallel> parallel;
  if (together) {
    dist::DataParallelOptions buckets;  // several buckets, launched while backward (and its all-reduces) run
    buckets.bucket_mb = 0.0005;
    buckets.first_bucket_mb = 0.0002;
    parallel = std::make_unique<dist::DataParallel>(*model, *optimizer, world(), buckets);
    if (synchronise) REQUIRE(dist::convert_sync_batch_norm(*model, world()) == 2);
  }
  const Problem problem = make_problem(channels_last);
  const int rank = world()->rank();
  const Tensor inputs = together ? my_half(problem.inputs, rank) : problem.inputs;
  const Tensor labels = together ? my_half(problem.labels, rank) : problem.labels;
  Trained trained;
  for (int64_t step = 0; step < kSteps; ++step) {
    Tensor x = inputs.clone().set_requires_grad(step == 0);
    Tensor logits = model->forward(x);
    Tensor loss = ops::cross_entropy(logits, labels);
    if (step == 0) {
      trained.logits = logits.detach().clone();
      loss.backward();  // no averaging yet: this rank's own gradients
      trained.input_grad = x.grad().clone();
      for (const Tensor& p : model->parameters()) trained.first_grads.push_back(p.grad().clone());
      optimizer->zero_grad();
      logits = model->forward(inputs);  // the step itself, on a fresh graph
      loss = ops::cross_entropy(logits, labels);
    }
    if (parallel) {
      parallel->backward(loss);
      parallel->step();
    } else {
      loss.backward();
      optimizer->step();
    }
    optimizer->zero_grad();
  }
  for (const Tensor& p : model->parameters()) trained.params.push_back(p.clone());
  for (const Tensor& b : model->buffers()) trained.buffers.push_back(b.clone());
  return trained;
}

}  // namespace

TEST_CASE("SyncBatchNorm on 2 ranks x half a batch equals BatchNorm over the whole batch in f64", "[dist]") {
  auto reducer = dist::make_batch_statistics_reducer(world());
  const int rank = world()->rank();
  REQUIRE(reducer->world_size() == 2);
  // {2, 3}: one value per channel on each rank, which only the global batch makes enough.
  for (const Layout& layout : std::vector<Layout>{
           {{8, 3, 4, 5}, false}, {{6, 4}, false}, {{4, 3, 7}, false}, {{6, 3, 4, 3}, true}, {{2, 3}, false}}) {
    for (bool relu : {false, true}) {
      INFO(opsnn::shape_str(layout.shape) << (layout.channels_last ? " channels_last" : "") << (relu ? " relu" : ""));
      Generator generator(13);  // the same whole batch on both ranks
      const int64_t C = layout.channels_last ? layout.shape.back() : layout.shape[1];
      const Tensor input = Tensor::uniform(layout.shape, -1, 3, generator, DType::f64);
      const Tensor upstream = Tensor::uniform(layout.shape, -1, 1, generator, DType::f64);
      const Tensor gamma = Tensor::uniform({C}, 0.5, 1.5, generator, DType::f64);
      const Tensor beta = Tensor::uniform({C}, -1, 1, generator, DType::f64);

      Tensor x = input.clone().set_requires_grad(true);
      Tensor weight = gamma.clone().set_requires_grad(true), bias = beta.clone().set_requires_grad(true);
      Tensor mean = Tensor::full({C}, 0.5, DType::f64), var = Tensor::full({C}, 2.0, DType::f64);
      Tensor out = relu ? ops::batch_norm_relu(x, weight, bias, mean, var, true, 0.1, 1e-5, layout.channels_last)
                        : ops::batch_norm(x, weight, bias, mean, var, true, 0.1, 1e-5, layout.channels_last);
      out.backward(upstream);

      Tensor mine = my_half(input, rank).clone().set_requires_grad(true);
      Tensor my_weight = gamma.clone().set_requires_grad(true), my_bias = beta.clone().set_requires_grad(true);
      Tensor my_mean = Tensor::full({C}, 0.5, DType::f64), my_var = Tensor::full({C}, 2.0, DType::f64);
      Tensor my_out = nn::sync_batch_norm(mine, my_weight, my_bias, my_mean, my_var, 0.1, 1e-5, layout.channels_last,
                                          relu, reducer, "SyncBatchNorm statistics of the test layer");
      my_out.backward(my_half(upstream, rank));

      CHECK(relative_error(my_out, my_half(out, rank)) < 1e-12);
      // With two values per channel the input gradient is of the order of eps (the output is about +-1
      // whatever the input): judged against the upstream gradient's scale instead.
      CHECK(relative_error(mine.grad(), my_half(x.grad(), rank), layout.shape[0] == 2 ? 1.0 : -1.0) < 1e-12);
      CHECK(relative_error(summed_over_ranks(my_weight.grad(), "gamma gradients"), weight.grad()) < 1e-12);
      CHECK(relative_error(summed_over_ranks(my_bias.grad(), "beta gradients"), bias.grad()) < 1e-12);
      CHECK(relative_error(my_mean, mean) < 1e-12);
      CHECK(relative_error(my_var, var) < 1e-12);
    }
  }
}

TEST_CASE("SyncBatchNorm layers trained data-parallel on 2 ranks x B/2 equal 1 rank x batch B in f32", "[dist]") {
  const int rank = world()->rank();
  for (bool channels_last : {false, true}) {
    INFO((channels_last ? "channels_last" : "NCHW"));
    const Trained alone = train(channels_last, false, false);
    const Trained together = train(channels_last, true, true);
    // The first step: this rank's half of the logits and of the input gradient (whose loss is the mean
    // over half the batch: twice the whole batch's), and the parameter gradients averaged over the ranks.
    CHECK(relative_error(together.logits, my_half(alone.logits, rank)) < 1e-5);
    CHECK(relative_error(ops::scale(together.input_grad, 0.5), my_half(alone.input_grad, rank)) < 1e-5);
    // Against the largest gradient of any parameter: a convolution's bias before a batch norm has none
    // (the normalisation removes it), only rounding.
    REQUIRE(together.first_grads.size() == alone.first_grads.size());
    double gradient_scale = 0.0;
    for (const Tensor& grad : alone.first_grads) gradient_scale = std::max(gradient_scale, largest(grad));
    for (size_t i = 0; i < alone.first_grads.size(); ++i) {
      INFO("parameter " << i);
      CHECK(relative_error(ops::scale(summed_over_ranks(together.first_grads[i], "first gradients"), 0.5),
                           alone.first_grads[i], gradient_scale) < 1e-5);
    }
    // After kSteps steps: the parameters and the running statistics.
    for (size_t i = 0; i < alone.params.size(); ++i) {
      INFO("parameter " << i);
      CHECK(relative_error(together.params[i], alone.params[i]) < 1e-5);
    }
    REQUIRE(alone.buffers.size() == 4);
    for (size_t i = 0; i < alone.buffers.size(); ++i) {
      INFO("buffer " << i);
      CHECK(relative_error(together.buffers[i], alone.buffers[i]) < 1e-5);
    }
    // The control: per-rank statistics are another computation, visibly so.
    const Trained separate = train(channels_last, true, false);
    CHECK(relative_error(separate.buffers[1], alone.buffers[1]) > 1e-3);
  }
}
