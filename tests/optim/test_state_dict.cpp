// state_dict / load_state_dict: keys by parameter name and state, step-state scalars, bit-identical
// continuation after a round trip, and clear errors for missing, unexpected and mismatched entries.
#include "opsnn/optim/adam.h"
#include "opsnn/optim/sgd.h"
#include "optim/optim_test_support.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;
using namespace opsnn::optim::testing;

TEST_CASE("state_dict: keys name the parameter and the state, plus the step-state scalars", "[optim]") {
  NamedParameters parameters = random_parameters({{3, 2}, {2}}, 1);
  Adam adam(parameters, OptimizerOptions(1e-2).amsgrad(true));
  StateDict state = adam.state_dict();
  for (const char* key :
       {"layer0.weight.exp_avg", "layer0.weight.exp_avg_sq", "layer0.weight.max_exp_avg_sq", "layer1.bias.exp_avg",
        "step_state.step", "step_state.beta1_power", "step_state.loss_scale", "step_state.growth_tracker"}) {
    INFO(key);
    REQUIRE(state.count(key) == 1);
  }
  REQUIRE(state.at("layer0.weight.exp_avg").shape() == Shape{3, 2});
  REQUIRE(state.at("step_state.step").dtype() == DType::i64);
  SGD plain(random_parameters({{2}}, 2), OptimizerOptions(0.1));
  REQUIRE(plain.state_dict().count("layer0.bias.momentum_buffer") == 0);  // no momentum, no buffer
  SGD momentum(random_parameters({{2}}, 2), OptimizerOptions(0.1).momentum(0.9));
  REQUIRE(momentum.state_dict().count("layer0.bias.momentum_buffer") == 1);
}

TEST_CASE("state_dict: a restored optimizer continues bit-identically", "[optim]") {
  for (std::string name : {"sgd", "adam", "adamw", "lamb"}) {
    INFO(name);
    OptimizerOptions options = name == "sgd" ? OptimizerOptions(0.1).momentum(0.9) : OptimizerOptions(1e-2);
    options.state_dtype(DType::bf16);
    NamedParameters parameters = random_parameters({{5, 4}, {4}}, 3);
    auto original = make_optimizer(name, parameters, options);
    for (int step = 0; step < 4; ++step) {
      write_grads(parameters, make_grads(parameters, step, 4, GradPattern::normal));
      original->step();
    }
    StateDict saved = original->state_dict();
    NamedParameters copy = random_parameters({{5, 4}, {4}}, 3);
    for (size_t t = 0; t < copy.size(); ++t) copy[t].second.copy_(parameters[t].second);
    auto restored = make_optimizer(name, copy, options);
    restored->load_state_dict(saved);
    for (int step = 4; step < 8; ++step) {
      auto grads = make_grads(parameters, step, 4, GradPattern::normal);
      write_grads(parameters, grads);
      write_grads(copy, grads);
      original->step();
      restored->step();
    }
    REQUIRE(values_of(parameters) == values_of(copy));
    REQUIRE(original->step_state().step == restored->step_state().step);
    REQUIRE(original->step_state().beta1_power == restored->step_state().beta1_power);
  }
}

TEST_CASE("state_dict: missing, unexpected and mismatched entries name the key", "[optim]") {
  NamedParameters parameters = random_parameters({{3, 2}, {2}}, 5);
  Adam adam(parameters, OptimizerOptions(1e-2));
  StateDict good = adam.state_dict();

  StateDict missing = good;
  missing.erase("layer1.bias.exp_avg_sq");
  REQUIRE_THROWS_WITH(adam.load_state_dict(missing),
                      Catch::Contains("missing key 'layer1.bias.exp_avg_sq'") && Catch::Contains("[2]"));

  StateDict wrong_shape = good;
  wrong_shape["layer0.weight.exp_avg"] = Tensor::zeros({2, 3});
  REQUIRE_THROWS_WITH(adam.load_state_dict(wrong_shape), Catch::Contains("layer0.weight.exp_avg") &&
                                                             Catch::Contains("[2, 3]") && Catch::Contains("[3, 2]"));

  StateDict extra = good;
  extra["layer0.weight.momentum_buffer"] = Tensor::zeros({3, 2});
  REQUIRE_THROWS_WITH(adam.load_state_dict(extra), Catch::Contains("unexpected key 'layer0.weight.momentum_buffer'"));

  SGD sgd(random_parameters({{3, 2}, {2}}, 6), OptimizerOptions(0.1).momentum(0.9));
  REQUIRE_THROWS_AS(sgd.load_state_dict(good), ConfigError);

  // a failed load leaves the optimizer untouched
  StateDict changed = good;
  changed["step_state.step"] = Tensor::scalar(7, DType::i64);
  changed.erase("layer1.bias.exp_avg");
  REQUIRE_THROWS(adam.load_state_dict(changed));
  REQUIRE(adam.step_state().step == 0);
}

TEST_CASE("state_dict: values a state cannot hold are refused before anything changes", "[optim]") {
  NamedParameters parameters = random_parameters({{3, 2}, {2}}, 5);
  Adam adam(parameters, OptimizerOptions(1e-2));
  const StateDict good = adam.state_dict();
  struct Bad {
    const char* key;
    Tensor value;
    const char* expected;
  };
  const Bad bad[] = {
      // A negative second moment moved a weight from 1 to -1e5 at the next step.
      {"layer0.weight.exp_avg_sq", Tensor::full({3, 2}, -1.0), "negative or NaN"},
      {"layer1.bias.exp_avg_sq", Tensor::full({2}, NAN), "negative or NaN"},
      {"step_state.skipped_steps", Tensor::scalar(-7, DType::i64), "step_state.skipped_steps' = -7"},
      {"step_state.lr", Tensor::scalar(NAN, DType::f64), "step_state.lr"},
      // Finite in the dict, infinite as the float it becomes: every later step would be skipped.
      {"step_state.loss_scale", Tensor::scalar(INFINITY), "step_state.loss_scale"},
      {"step_state.loss_scale", Tensor::scalar(1e-45), "step_state.loss_scale"},
      // Was narrowed to INT_MIN.
      {"step_state.growth_tracker", Tensor::scalar(1e20, DType::f64), "step_state.growth_tracker' = 1e+20"},
      {"step_state.step", Tensor::scalar(2.5, DType::f64), "an integer"},
  };
  for (const Bad& b : bad) {
    INFO(b.key);
    StateDict state = good;
    state[b.key] = b.value;
    REQUIRE_THROWS_AS(adam.load_state_dict(state), ConfigError);
    REQUIRE_THROWS_WITH(adam.load_state_dict(state), Catch::Contains(b.expected));
  }
  REQUIRE(adam.step_state().loss_scale == good.at("step_state.loss_scale").item());
  StateDict zero_moments = good;  // zeros (a fresh state) are fine
  zero_moments["layer0.weight.exp_avg_sq"] = Tensor::zeros({3, 2});
  REQUIRE_NOTHROW(adam.load_state_dict(zero_moments));
}
