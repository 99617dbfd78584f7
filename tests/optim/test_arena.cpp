// The flat parameter arena: parameters become views (values kept, every handle sees the arena), aligned
// segment offsets, chunks inside segments, gradients accumulating in the arena through autograd,
// zero_grad keeping the views, replaced gradients re-adopted, and bad parameter lists rejected.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "opsnn/ops/ops.h"
#include "opsnn/optim/adam.h"
#include "opsnn/optim/sgd.h"
#include "optim/optim_test_support.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;
using namespace opsnn::optim::testing;

TEST_CASE("arena: parameters are re-homed as views with their values and aligned offsets", "[optim]") {
  NamedParameters parameters = random_parameters({{3, 7}, {5}, {20000}, {2, 3, 4}}, 1);
  std::vector<std::vector<double>> before = values_of(parameters);
  Tensor alias = parameters[2].second;  // another holder of the same handle
  SGD sgd(parameters, OptimizerOptions(0.1).momentum(0.9));
  const ParamArena& arena = sgd.arena();
  REQUIRE(arena.segments().size() == 4);
  REQUIRE(values_of(parameters) == before);
  REQUIRE(alias.storage() == arena.params().storage());
  int64_t previous_end = 0;
  for (size_t i = 0; i < arena.segments().size(); ++i) {
    const ArenaSegment& segment = arena.segments()[i];
    INFO("segment " << segment.name);
    REQUIRE(segment.name == parameters[i].first);
    REQUIRE(segment.offset % kArenaAlignmentElements == 0);
    REQUIRE(segment.offset >= previous_end);
    previous_end = segment.offset + segment.numel;
    const Tensor& p = parameters[i].second;
    REQUIRE(p.storage() == arena.params().storage());
    REQUIRE(p.offset() == segment.offset);
    REQUIRE(reinterpret_cast<uintptr_t>(p.data_ptr()) % 64 == 0);
    REQUIRE(reinterpret_cast<uintptr_t>(p.grad().data_ptr()) % 64 == 0);
    REQUIRE(reinterpret_cast<uintptr_t>(arena.state_view(0, i).data_ptr()) % 64 == 0);
    REQUIRE(p.grad().storage() == arena.grads().storage());
  }
  REQUIRE(arena.padded_elements() >= previous_end);
  REQUIRE(arena.parameter_elements() == 21 + 5 + 20000 + 24);
  // chunks stay inside their segment and cover it exactly
  std::vector<int64_t> covered(arena.segments().size(), 0);
  for (const ArenaChunk& chunk : arena.dense_chunks()) {
    const ArenaSegment& segment = arena.segments()[static_cast<size_t>(chunk.segment)];
    REQUIRE(chunk.begin >= segment.offset);
    REQUIRE(chunk.end <= segment.offset + segment.numel);
    REQUIRE(chunk.end - chunk.begin <= kArenaChunkElements);
    covered[static_cast<size_t>(chunk.segment)] += chunk.end - chunk.begin;
  }
  for (size_t i = 0; i < covered.size(); ++i) REQUIRE(covered[i] == arena.segments()[i].numel);
  // a write through the arena is seen by the parameter handle
  arena.params().data<float>()[arena.segments()[1].offset] = 42.0f;
  REQUIRE(parameters[1].second.to_vector<float>()[0] == 42.0f);
}

TEST_CASE("arena: gradients accumulate in the arena through autograd, zero_grad keeps the views", "[optim]") {
  Tensor weight = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad(true);
  Tensor bias = Tensor::from_vector<float>({0.5f, -0.5f}, {2}).set_requires_grad(true);
  Tensor existing_grad = Tensor::from_vector<float>({1, 1}, {2});
  bias.set_grad(existing_grad);  // a gradient accumulated before the optimizer existed is kept
  Adam adam({{"fc.weight", weight}, {"fc.bias", bias}}, OptimizerOptions(1e-3));
  REQUIRE(bias.grad().to_vector<float>() == std::vector<float>{1, 1});
  adam.zero_grad();
  Tensor input = Tensor::from_vector<float>({1, 0, 2, -1, 1, 0}, {2, 3});
  for (int pass = 0; pass < 2; ++pass) {
    Tensor loss = ops::sum(ops::linear(input, weight, bias));
    loss.backward();
  }
  // d/dW sum(x W^T + b) = column sums of x per output row; twice (two backward passes)
  std::vector<float> expected_weight{0, 2, 4, 0, 2, 4};
  REQUIRE(weight.grad().to_vector<float>() == expected_weight);
  REQUIRE(bias.grad().to_vector<float>() == std::vector<float>{4, 4});
  REQUIRE(weight.grad().storage() == adam.arena().grads().storage());
  std::vector<float> arena_grads = adam.arena().grads().to_vector<float>();
  REQUIRE(arena_grads[static_cast<size_t>(adam.arena().segments()[1].offset)] == 4.0f);
  adam.zero_grad();
  REQUIRE(weight.grad().storage() == adam.arena().grads().storage());
  REQUIRE(weight.grad().to_vector<float>() == std::vector<float>(6, 0.0f));
}

TEST_CASE("arena: a replaced or cleared gradient is adopted back into the arena at the step", "[optim]") {
  NamedParameters parameters = random_parameters({{2, 2}, {3}}, 4);
  SGD sgd(parameters, OptimizerOptions(1.0).decay_1d_params(true));
  std::vector<double> before = parameters[0].second.to_vector<double>();
  parameters[0].second.set_grad(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  parameters[1].second.set_grad(Tensor());
  sgd.step();
  std::vector<double> after = parameters[0].second.to_vector<double>();
  for (size_t i = 0; i < 4; ++i) REQUIRE(after[i] == Approx(before[i] - (i + 1.0)));
  REQUIRE(parameters[0].second.grad().storage() == sgd.arena().grads().storage());
  REQUIRE(parameters[1].second.grad().storage() == sgd.arena().grads().storage());
}

TEST_CASE("arena: bad parameter lists are rejected naming the tensor", "[optim]") {
  NamedParameters parameters = random_parameters({{2, 2}}, 5);
  Tensor frozen = Tensor::zeros({3});
  REQUIRE_THROWS_WITH(make_optimizer("adam", NamedParameters{{"frozen", frozen}}),
                      Catch::Contains("frozen") && Catch::Contains("require grad"));
  Tensor wide = Tensor::zeros({3}, DType::f64).set_requires_grad(true);
  REQUIRE_THROWS_WITH(make_optimizer("adam", NamedParameters{{"wide", wide}}), Catch::Contains("wide"));
  NamedParameters twice{parameters[0], {"alias", parameters[0].second}};
  REQUIRE_THROWS_WITH(make_optimizer("adam", twice), Catch::Contains("same tensor"));
  REQUIRE_THROWS_AS(make_optimizer("adam", NamedParameters{}), ConfigError);
  // An empty name would key its states ".exp_avg" in state dicts and checkpoints.
  REQUIRE_THROWS_WITH(make_optimizer("adam", NamedParameters{{"", parameters[0].second}}),
                      Catch::Contains("empty name"));
}

TEST_CASE("arena: a parameter taken over by a second optimizer is reported by the first", "[optim]") {
  NamedParameters parameters = random_parameters({{2, 2}}, 6);
  SGD first(parameters, OptimizerOptions(0.1));
  SGD second(parameters, OptimizerOptions(0.1));
  REQUIRE_THROWS_WITH(first.step(), Catch::Contains("layer0.weight") && Catch::Contains("arena"));
  REQUIRE_NOTHROW(second.step());
}
