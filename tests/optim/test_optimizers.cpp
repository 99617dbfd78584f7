// Every optimizer and option against the double-precision reference over many steps: SGD (momentum,
// dampening, Nesterov), Adam (L2, amsgrad, eps auto-scaling), AdamW, LAMB (trust clamp), Lion, clipping,
// schedules, groups with lr multipliers and no-decay, fp16/bf16 states; zero, huge and tiny gradients.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "opsnn/optim/adagrad.h"
#include "opsnn/optim/adam.h"
#include "opsnn/optim/rules.h"
#include "optim/optim_test_support.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;
using namespace opsnn::optim::testing;

namespace {

const std::vector<Shape> kShapes = {{6, 5}, {5}, {3, 2, 2}, {130, 130}, {1}};  // {130, 130}: two chunks

struct Tolerance {
  double atol, rtol;
};

// Runs `steps` steps of the named optimizer and of the reference on the same gradients; groups (when
// given) split the parameters into a first half (lr x0.5, default decay rule) and a second half (lr x2,
// decay forced off).
void check_against_reference(const std::string& name, OptimizerOptions options, Tolerance tolerance,
                             GradPattern pattern = GradPattern::mixed, int steps = 40, bool groups = false) {
  options.monitor(MonitorOptions().grad_norm_warn_threshold(1e30));  // huge gradients are on purpose here
  NamedParameters parameters = random_parameters(kShapes, 11);
  std::vector<double> multipliers(parameters.size(), 1.0);
  std::vector<bool> decays;
  for (const auto& [parameter_name, tensor] : parameters)
    decays.push_back(tensor.dim() > 1 || options.decay_1d_params());
  std::unique_ptr<Optimizer> optimizer;
  if (groups) {
    ParamGroup first{"first", {}, 0.5, std::nullopt}, second{"second", {}, 2.0, false};
    for (size_t t = 0; t < parameters.size(); ++t) {
      bool in_first = t < parameters.size() / 2;
      (in_first ? first : second).parameters.push_back(parameters[t]);
      multipliers[t] = in_first ? 0.5 : 2.0;
      if (!in_first) decays[t] = false;
    }
    optimizer = make_optimizer(name, std::vector<ParamGroup>{first, second}, options);
  } else {
    optimizer = make_optimizer(name, parameters, options);
  }
  ReferenceOptimizer reference(reference_config(name, options), values_of(parameters), multipliers, decays);
  for (int step = 0; step < steps; ++step) {
    auto grads = make_grads(parameters, step, 5, pattern);
    for (auto& g : grads)
      for (double& x : g) x = static_cast<float>(x * reference.scale);  // what backward of a scaled loss gives
    write_grads(parameters, grads);
    reference.apply(grads);
    optimizer->step();
    REQUIRE(optimizer->step_state().step == reference.step);
  }
  REQUIRE(optimizer->grad_norm() == Approx(reference.last_grad_norm).epsilon(1e-5));
  require_close(parameters, reference.params, tolerance.atol, tolerance.rtol, name, reference.peak);
}

constexpr Tolerance kFloat{1e-5, 1e-5};
// fp16/bf16 states: fp32 math before the rounding can flip a rounding decision of the stored state (one
// ulp: 2^-11 for fp16, 2^-8 for bf16), which then moves the parameter by up to lr * that fraction.
constexpr Tolerance kHalf{2e-3, 1e-3};
constexpr Tolerance kBFloat{2e-2, 1e-2};

}  // namespace

TEST_CASE("sgd matches the double reference: plain, momentum + dampening + L2, nesterov", "[optim]") {
  check_against_reference("sgd", OptimizerOptions(0.1), kFloat);
  check_against_reference("sgd", OptimizerOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(1e-2), kFloat);
  check_against_reference("sgd", OptimizerOptions(0.05).momentum(0.9).nesterov(true).weight_decay(5e-4), kFloat);
}

TEST_CASE("adam matches the double reference: L2 decay, amsgrad, eps auto-scaling", "[optim]") {
  check_against_reference("adam", OptimizerOptions(1e-2), kFloat);
  check_against_reference("adam", OptimizerOptions(1e-2).weight_decay(1e-2).amsgrad(true), kFloat);
  check_against_reference("adam", OptimizerOptions(1e-2).eps_relative(1e-3).betas({0.8, 0.99}), kFloat);
  check_against_reference("adam", OptimizerOptions(1e-2).fp32_weight_decay(0.01), kFloat);
}

TEST_CASE("adamw matches the double reference: decoupled decay (default 1e-2), amsgrad, decay of 1-d params",
          "[optim]") {
  check_against_reference("adamw", OptimizerOptions(1e-2), kFloat);
  check_against_reference("adamw", OptimizerOptions(1e-2).weight_decay(0.1).amsgrad(true), kFloat);
  check_against_reference("adamw", OptimizerOptions(1e-2).weight_decay(0.1).decay_1d_params(true), kFloat);
}

TEST_CASE("lamb matches the double reference: trust ratio, clamp", "[optim]") {
  check_against_reference("lamb", OptimizerOptions(1e-2).weight_decay(1e-2), kFloat);
  check_against_reference("lamb", OptimizerOptions(1e-2).trust_clamp_lower(0.5).trust_clamp_upper(1.0), kFloat);
}

TEST_CASE("lion matches the double reference: sign update, decoupled decay, its defaults", "[optim]") {
  // Defaults: lr 1e-4, betas (0.9, 0.99), no weight decay.
  OptimizerOptions defaults;
  REQUIRE(defaults.effective_lr("lion") == 1e-4);
  REQUIRE(defaults.effective_betas("lion") == Betas(0.9, 0.99));
  REQUIRE(defaults.effective_weight_decay("lion") == 0.0);
  check_against_reference("lion", OptimizerOptions(), kFloat, GradPattern::bounded);
  check_against_reference("lion", OptimizerOptions(1e-3).weight_decay(0.1), kFloat, GradPattern::mixed, 40);
  check_against_reference("lion", OptimizerOptions(1e-3).betas({0.95, 0.98}).weight_decay(0.5).decay_1d_params(true),
                          kFloat, GradPattern::bounded, 30, true);
  // Clipping and a schedule in the same step.
  check_against_reference("lion",
                          OptimizerOptions(1e-3).weight_decay(0.1).max_grad_norm(1.0).schedule(
                              ScheduleParams{ScheduleKind::warmup_cosine, 1e-3, 1e-5, 5, 40, 1, 0.1}),
                          kFloat);
}

TEST_CASE("lion's sign is 1 or -1 and passes zeros and NaN through, with their sign bits", "[optim]") {
  // sign(c) of c = b1*m + (1-b1)*g with b1 = 0 (c = g): the update is p -= lr * sign(c) (no decay).
  AdamScalars s{};
  s.lr = 1.0f;
  s.beta1 = 0.0f;
  s.one_minus_beta1 = 1.0f;
  s.beta2 = 0.5f;
  s.one_minus_beta2 = 0.5f;
  auto sign_of = [&](float g) {
    float p = 0.0f;
    float state[1] = {0.0f};
    LionRule::element(p, state, g, s);
    return -p;  // p = 0 - sign
  };
  auto bits = [](float x) {
    uint32_t b;
    std::memcpy(&b, &x, sizeof(b));
    return b;
  };
  for (float g : {3.0f, 1e-38f, INFINITY}) REQUIRE(sign_of(g) == 1.0f);
  for (float g : {-3.0f, -1e-38f, -INFINITY}) REQUIRE(sign_of(g) == -1.0f);
  REQUIRE(std::isnan(sign_of(NAN)));
  // A zero c is passed through as +0, not turned into -0: from p = -0 the update -0 - (sign + 0 * -0) keeps
  // -0 for sign = +0 and would give +0 for sign = -0.
  float state[1] = {0.0f};
  float p = -0.0f;
  LionRule::element(p, state, 0.0f, s);
  REQUIRE(bits(p) == bits(-0.0f));
}

TEST_CASE("adagrad matches the double reference: L2 decay, initial accumulator, its defaults", "[optim]") {
  // torch.optim.Adagrad's defaults: lr 1e-2, eps 1e-10, no weight decay, the sum starting at 0.
  OptimizerOptions defaults;
  REQUIRE(defaults.effective_lr("adagrad") == 1e-2);
  REQUIRE(defaults.effective_eps(optimizer_descriptor("adagrad")) == 1e-10);
  REQUIRE(defaults.effective_weight_decay("adagrad") == 0.0);
  REQUIRE(AdagradOptions().eps() == 1e-10);
  check_against_reference("adagrad", OptimizerOptions(), kFloat, GradPattern::bounded);
  check_against_reference("adagrad", OptimizerOptions(5e-2).weight_decay(0.1).initial_accumulator_value(0.1), kFloat,
                          GradPattern::mixed, 40);
  check_against_reference("adagrad", OptimizerOptions(5e-2).eps(1e-6).weight_decay(0.01).decay_1d_params(true), kFloat,
                          GradPattern::bounded, 30, true);
  check_against_reference("adagrad",
                          OptimizerOptions(5e-2).max_grad_norm(1.0).schedule(
                              ScheduleParams{ScheduleKind::warmup_cosine, 5e-2, 1e-4, 5, 40, 1, 0.1}),
                          kFloat);
}

TEST_CASE("adagrad's initial accumulator fills every tensor and is refused elsewhere", "[optim]") {
  NamedParameters parameters = random_parameters({{3, 5}, {7}}, 4);
  Adagrad optimizer(parameters, AdagradOptions(0.1).initial_accumulator_value(0.25));
  for (size_t segment = 0; segment < optimizer.arena().segments().size(); ++segment)
    for (float x : optimizer.arena().state_view(0, segment).to_vector<float>()) REQUIRE(x == 0.25f);
  REQUIRE_THROWS_WITH(
      make_optimizer("adam", random_parameters({{2, 2}}, 1), OptimizerOptions().initial_accumulator_value(0.1)),
      Catch::Contains("initial_accumulator_value") && Catch::Contains("adagrad only"));
  REQUIRE_THROWS_WITH(Adagrad(random_parameters({{2, 2}}, 1), AdagradOptions().initial_accumulator_value(-1.0)),
                      Catch::Contains("initial_accumulator_value = -1"));
}

TEST_CASE("clipping by global norm and schedules inside the step match the reference", "[optim]") {
  check_against_reference("adam", OptimizerOptions(1e-2).max_grad_norm(1.0), kFloat);
  check_against_reference("sgd", OptimizerOptions(0.1).momentum(0.9).max_grad_norm(0.5), kFloat);
  ScheduleParams cosine;
  cosine.kind = ScheduleKind::warmup_cosine;
  cosine.warmup_steps = 10;
  cosine.total_steps = 50;
  cosine.min_lr = 1e-4;
  check_against_reference("adamw", OptimizerOptions(1e-2).schedule(cosine), kFloat);
  ScheduleParams step_decay;
  step_decay.kind = ScheduleKind::step_decay;
  step_decay.step_size = 15;
  step_decay.gamma = 0.5;
  check_against_reference("sgd", OptimizerOptions(0.1).momentum(0.5).schedule(step_decay), kFloat);
}

TEST_CASE("parameter groups: lr multipliers and decay switched off per group", "[optim]") {
  check_against_reference("adamw", OptimizerOptions(1e-2).weight_decay(0.1), kFloat, GradPattern::mixed, 30, true);
  check_against_reference("sgd", OptimizerOptions(0.1).momentum(0.9).weight_decay(1e-2), kFloat, GradPattern::mixed, 30,
                          true);
}

TEST_CASE("fp16 and bf16 optimizer states follow the reference with rounded states", "[optim]") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    Tolerance tolerance = dtype == DType::f16 ? kHalf : kBFloat;
    INFO("state dtype " << dtype_name(dtype));
    check_against_reference("adam", OptimizerOptions(1e-2).betas({0.95, 0.999}).state_dtype(dtype).amsgrad(true),
                            tolerance, GradPattern::bounded);
    check_against_reference("adamw", OptimizerOptions(1e-2).betas({0.95, 0.999}).state_dtype(dtype), tolerance,
                            GradPattern::bounded);
    check_against_reference("sgd", OptimizerOptions(0.05).momentum(0.95).state_dtype(dtype), tolerance,
                            GradPattern::bounded);
    check_against_reference("lamb", OptimizerOptions(1e-2).betas({0.95, 0.999}).state_dtype(dtype), tolerance,
                            GradPattern::bounded);
    check_against_reference("lion", OptimizerOptions(1e-3).betas({0.95, 0.99}).weight_decay(0.1).state_dtype(dtype),
                            tolerance, GradPattern::bounded);
    check_against_reference("adagrad", OptimizerOptions(5e-2).weight_decay(0.1).state_dtype(dtype), tolerance,
                            GradPattern::bounded);
  }
}

TEST_CASE("fp16 states are actually stored as fp16 (halved memory, values rounded)", "[optim]") {
  NamedParameters parameters = random_parameters({{4, 4}}, 3);
  Adam adam(parameters, OptimizerOptions(1e-2).fp16_momentum(true).betas({0.95, 0.999}));
  REQUIRE(adam.arena().state(0).dtype() == DType::f16);
  write_grads(parameters, make_grads(parameters, 0, 1, GradPattern::normal, 1.0 / 3.0));
  adam.step();
  StateDict state = adam.state_dict();
  const Tensor& exp_avg = state.at("layer0.weight.exp_avg");
  REQUIRE(exp_avg.dtype() == DType::f16);
  std::vector<float> values = exp_avg.to_vector<float>();
  std::vector<float> grads = parameters[0].second.grad().to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i)
    REQUIRE(values[i] == half_bits_to_float(float_to_half_bits(0.05f * grads[i])));
}

TEST_CASE("the step is bit-identical for any thread count (deterministic reductions)", "[optim]") {
  auto run = [](int threads) {
    int previous = omp_get_max_threads();
    omp_set_num_threads(threads);
    NamedParameters parameters = random_parameters(kShapes, 2);
    auto optimizer = make_optimizer("lamb", parameters, OptimizerOptions(1e-2).max_grad_norm(5.0));
    for (int step = 0; step < 5; ++step) {
      write_grads(parameters, make_grads(parameters, step, 3, GradPattern::normal));
      optimizer->step();
    }
    omp_set_num_threads(previous);
    std::vector<float> result = optimizer->arena().params().to_vector<float>();
    result.push_back(static_cast<float>(optimizer->grad_norm()));
    return result;
  };
  std::vector<float> one = run(1), two = run(2), three = run(3);
  REQUIRE(one == two);
  REQUIRE(one == three);
}

TEST_CASE("the low-precision parameter copy needs a device step, CPU optimizers refuse it", "[optim]") {
  NamedParameters parameters = random_parameters({{4, 3}, {5}}, 3);
  auto optimizer = make_optimizer("adamw", parameters);
  CHECK_FALSE(optimizer->uses_device_step());
  CHECK_FALSE(optimizer->param_copy(parameters[0].second).defined());  // none enabled
  try {
    optimizer->enable_param_copy(DType::bf16);
    FAIL("enable_param_copy on a CPU arena should throw");
  } catch (const UsageError& error) {
    CHECK(std::string(error.what()).find("enable_param_copy") != std::string::npos);
    CHECK(std::string(error.what()).find("cpu") != std::string::npos);
  }
  optimizer->refresh_param_copy();  // no copy: nothing to do
}
