// Learning-rate schedules at key steps (constant + warmup, warmup + cosine with min lr, step decay with a
// floor, linear decay), and the schedule evaluated inside the optimizer step from the applied-step count.
#include <cmath>

#include "opsnn/optim/sgd.h"
#include "optim/optim_test_support.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;
using namespace opsnn::optim::testing;

namespace {

ScheduleParams schedule(ScheduleKind kind, long long warmup, long long total, double min_lr = 0.0) {
  ScheduleParams p;
  p.kind = kind;
  p.base_lr = 1.0;
  p.warmup_steps = warmup;
  p.total_steps = total;
  p.min_lr = min_lr;
  return p;
}

}  // namespace

TEST_CASE("schedules: values at key steps", "[optim]") {
  ScheduleParams constant = schedule(ScheduleKind::constant, 4, 0);
  CHECK(schedule_lr(constant, 0) == Approx(0.25));
  CHECK(schedule_lr(constant, 3) == Approx(1.0));
  CHECK(schedule_lr(constant, 1000) == Approx(1.0));

  ScheduleParams cosine = schedule(ScheduleKind::warmup_cosine, 10, 110, 0.1);
  CHECK(schedule_lr(cosine, 0) == Approx(0.1));
  CHECK(schedule_lr(cosine, 4) == Approx(0.5));
  CHECK(schedule_lr(cosine, 9) == Approx(1.0));
  CHECK(schedule_lr(cosine, 10) == Approx(1.0));
  CHECK(schedule_lr(cosine, 35) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25))));
  CHECK(schedule_lr(cosine, 60) == Approx(0.55));
  CHECK(schedule_lr(cosine, 110) == Approx(0.1));
  CHECK(schedule_lr(cosine, 500) == Approx(0.1));

  ScheduleParams step_decay = schedule(ScheduleKind::step_decay, 0, 0, 0.005);
  step_decay.step_size = 10;
  step_decay.gamma = 0.1;
  CHECK(schedule_lr(step_decay, 9) == Approx(1.0));
  CHECK(schedule_lr(step_decay, 10) == Approx(0.1));
  CHECK(schedule_lr(step_decay, 25) == Approx(0.01));
  CHECK(schedule_lr(step_decay, 30) == Approx(0.005));  // 0.001 is below the floor
  CHECK(schedule_lr(step_decay, 1000) == Approx(0.005));
  // Per-step exponential decay far into a run: gamma^drops in a few products, not one per drop (a loop
  // took seconds at 1e9 drops and never ended at 1e15 with gamma 1).
  ScheduleParams exponential = schedule(ScheduleKind::step_decay, 0, 0, 0.0);
  exponential.step_size = 1;
  exponential.gamma = 0.999999;
  CHECK(schedule_lr(exponential, 1000000) == Approx(std::pow(0.999999, 1000000.0)).epsilon(1e-12));
  CHECK(schedule_lr(exponential, 1000000000000000LL) == 0.0);  // underflows to the floor
  exponential.gamma = 1.0;
  CHECK(schedule_lr(exponential, 1000000000000000LL) == 1.0);

  ScheduleParams linear = schedule(ScheduleKind::linear_decay, 5, 105, 0.0);
  CHECK(schedule_lr(linear, 2) == Approx(0.6));
  CHECK(schedule_lr(linear, 5) == Approx(1.0));
  CHECK(schedule_lr(linear, 55) == Approx(0.5));
  CHECK(schedule_lr(linear, 105) == Approx(0.0).margin(1e-12));
  CHECK(schedule_lr(linear, 200) == Approx(0.0).margin(1e-12));
}

TEST_CASE("schedules: the optimizer's lr follows the schedule of its applied steps", "[optim]") {
  ScheduleParams cosine = schedule(ScheduleKind::warmup_cosine, 3, 13, 0.01);
  cosine.base_lr = 123.0;  // ignored: the optimizer's lr is the schedule's base
  NamedParameters parameters = random_parameters({{2, 2}}, 1);
  SGD sgd(parameters, OptimizerOptions(0.5).schedule(cosine));
  cosine.base_lr = 0.5;
  for (long long s = 0; s < 15; ++s) {
    REQUIRE(sgd.next_lr() == Approx(schedule_lr(cosine, s)));
    std::vector<double> before = values_of(parameters)[0];
    write_grads(parameters, {{1.0, 1.0, 1.0, 1.0}});
    REQUIRE(sgd.step().lr == Approx(schedule_lr(cosine, s)));
    std::vector<double> after = values_of(parameters)[0];
    REQUIRE(before[0] - after[0] == Approx(schedule_lr(cosine, s)).epsilon(1e-5));
  }
  REQUIRE(schedule_kind_name(parse_schedule_kind("warmup_cosine")) == "warmup_cosine");
  REQUIRE_THROWS_WITH(parse_schedule_kind("exponential"), Catch::Contains("step_decay"));
}
