// Dynamic loss scaling (GradScaler semantics): back-off on inf/NaN with the step skipped and the step
// count, schedule and beta powers kept; growth after the interval (only to a finite scale); scaled losses
// unscaled inside the step; the scaler state round-trips through state_dict.
#include <cfloat>

#include "opsnn/ops/ops.h"
#include "opsnn/optim/adam.h"
#include "opsnn/optim/loss_scaler.h"
#include "opsnn/optim/sgd.h"
#include "optim/optim_test_support.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;
using namespace opsnn::optim::testing;

TEST_CASE("LossScaler: initial scale, back-off, growth after the interval, growth only to a finite scale", "[optim]") {
  LossScaler scaler(LossScalingOptions().enabled(true).growth_interval(3));
  StepState state;
  scaler.initialize(state);
  REQUIRE(state.loss_scale == 65536.0f);
  REQUIRE(scaler.inverse_scale(state) == 1.0f / 65536.0f);
  state.found_inf = 1;
  scaler.update(state);
  REQUIRE(state.loss_scale == 32768.0f);
  REQUIRE(state.growth_tracker == 0);
  state.found_inf = 0;
  scaler.update(state);
  scaler.update(state);
  REQUIRE(state.loss_scale == 32768.0f);
  REQUIRE(state.growth_tracker == 2);
  scaler.update(state);
  REQUIRE(state.loss_scale == 65536.0f);
  REQUIRE(state.growth_tracker == 0);
  state.loss_scale = FLT_MAX;
  for (int i = 0; i < 3; ++i) scaler.update(state);
  REQUIRE(state.loss_scale == FLT_MAX);  // FLT_MAX * 2 is inf: not taken, tracker still restarts
  REQUIRE(state.growth_tracker == 0);

  LossScaler disabled;
  disabled.initialize(state);
  REQUIRE(state.loss_scale == 1.0f);
  state.found_inf = 1;
  disabled.update(state);
  REQUIRE(state.loss_scale == 1.0f);
}

TEST_CASE("loss scaling: injected inf/NaN skip the step and keep step count, schedule and beta powers", "[optim]") {
  ScheduleParams warmup;
  warmup.kind = ScheduleKind::warmup_cosine;
  warmup.warmup_steps = 4;
  warmup.total_steps = 30;
  OptimizerOptions options = OptimizerOptions(1e-2).schedule(warmup).loss_scaling(
      LossScalingOptions().enabled(true).initial_scale(1024).growth_interval(3));
  NamedParameters parameters = random_parameters({{4, 3}, {3}, {300}}, 21);
  Adam adam(parameters, options);
  ReferenceOptimizer reference(reference_config("adam", options), values_of(parameters), {1, 1, 1},
                               {true, false, false});
  std::vector<float> scales;
  for (int step = 0; step < 20; ++step) {
    auto grads = make_grads(parameters, step, 8, GradPattern::normal);
    for (auto& g : grads)
      for (double& x : g) x = static_cast<float>(x * reference.scale);
    if (step == 2) grads[1][1] = INFINITY;
    if (step == 7) grads[2][5] = NAN;
    if (step == 8) grads[0][0] = -INFINITY;
    write_grads(parameters, grads);
    StepState before = adam.step_state();
    std::vector<double> values_before = values_of(parameters)[0];
    double lr_before = adam.next_lr();
    bool applied = reference.apply(grads);
    const StepState& after = adam.step();
    scales.push_back(after.loss_scale);
    INFO("step " << step);
    REQUIRE(after.loss_scale == static_cast<float>(reference.scale));
    if (!applied) {
      REQUIRE(after.found_inf == 1);
      REQUIRE((after.monitor_flags & kStepSkipped) != 0);
      REQUIRE(after.step == before.step);
      REQUIRE(after.beta1_power == before.beta1_power);
      REQUIRE(after.beta2_power == before.beta2_power);
      REQUIRE(adam.next_lr() == lr_before);
      REQUIRE(values_of(parameters)[0] == values_before);
    } else {
      REQUIRE(after.found_inf == 0);
      REQUIRE(after.step == before.step + 1);
    }
  }
  REQUIRE(adam.step_state().skipped_steps == 3);
  REQUIRE(adam.step_state().step == 17);
  // 1024 -> 512 at step 2, grows to 1024 after three finite steps (5), back off at 7 and 8 -> 256, then
  // grows every three finite steps: 512 (11), 1024 (14), 2048 (17)
  std::vector<float> expected{1024, 1024, 512, 512, 512,  1024, 1024, 512,  256,  256,
                              256,  512,  512, 512, 1024, 1024, 1024, 2048, 2048, 2048};
  REQUIRE(scales == expected);
  require_close(parameters, reference.params, 1e-5, 1e-5, "adam with loss scaling");
}

TEST_CASE("loss scaling: a scaled loss gives the same update as the unscaled one", "[optim]") {
  auto run = [](bool scaling) {
    Tensor weight = Tensor::from_vector<float>({0.5f, -1.0f, 2.0f}, {3}).set_requires_grad(true);
    SGD sgd({{"w", weight}}, OptimizerOptions(0.1).loss_scaling(LossScalingOptions().enabled(scaling)));
    Tensor input = Tensor::from_vector<float>({1.5f, 2.0f, -3.0f}, {3});
    Tensor loss = ops::sum(ops::mul(ops::mul(weight, weight), input));
    sgd.scale_loss(loss).backward();
    float expected_grad_scale = scaling ? 65536.0f : 1.0f;
    REQUIRE(weight.grad().to_vector<float>()[0] == 2 * 0.5f * 1.5f * expected_grad_scale);
    sgd.step();
    return weight.to_vector<float>();
  };
  REQUIRE(run(true) == run(false));
}

TEST_CASE("loss scaling: scale and growth tracker round-trip through state_dict", "[optim]") {
  OptimizerOptions options = OptimizerOptions(1e-2).loss_scaling(LossScalingOptions().enabled(true).growth_interval(4));
  NamedParameters parameters = random_parameters({{3, 3}}, 2);
  Adam adam(parameters, options);
  for (int step = 0; step < 5; ++step) {
    auto grads = make_grads(parameters, step, 1, GradPattern::normal, adam.step_state().loss_scale);
    if (step == 1) grads[0][0] = NAN;
    write_grads(parameters, grads);
    adam.step();
  }
  // backed off at step 1, then three finite steps: one short of growing
  REQUIRE(adam.step_state().loss_scale == 32768.0f);
  REQUIRE(adam.step_state().growth_tracker == 3);
  StateDict saved = adam.state_dict();
  REQUIRE(saved.at("step_state.loss_scale").item() == 32768.0);
  REQUIRE(saved.at("step_state.growth_tracker").item() == 3.0);
  REQUIRE(saved.at("step_state.skipped_steps").item() == 1.0);

  NamedParameters copy = random_parameters({{3, 3}}, 99);
  Adam restored(copy, options);
  restored.load_state_dict(saved);
  REQUIRE(restored.step_state().loss_scale == 32768.0f);
  REQUIRE(restored.step_state().growth_tracker == 3);
  REQUIRE(restored.step_state().step == 4);
  REQUIRE(restored.step_state().skipped_steps == 1);
  // the next finite step grows the scale in both
  for (Optimizer* optimizer : {static_cast<Optimizer*>(&adam), static_cast<Optimizer*>(&restored)}) {
    const NamedParameters& target = optimizer == &adam ? parameters : copy;
    write_grads(target, make_grads(target, 9, 1, GradPattern::normal));
    REQUIRE(optimizer->step().loss_scale == 65536.0f);
  }
}
