// Options and the registry: bad settings raise ConfigError naming the setting, unknown optimizer names
// list the known ones, default weight decay per optimizer, no decay on 1-d parameters by default, and the
// optimizer settings block (fp32_weight_decay, fp16_momentum, loss_scaling) accepted, with its fp16-momentum warning.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "optim/optim_test_support.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;
using namespace opsnn::optim::testing;

namespace {

void require_rejected(const std::string& name, const OptimizerOptions& options, const std::string& setting) {
  NamedParameters parameters = random_parameters({{2, 2}}, 1);
  INFO("optimizer " << name << ", expected a complaint about " << setting);
  REQUIRE_THROWS_AS(make_optimizer(name, parameters, options), ConfigError);
  REQUIRE_THROWS_WITH(make_optimizer(name, parameters, options), Catch::Contains(setting));
}

}  // namespace

TEST_CASE("options: bad settings raise ConfigError naming the setting", "[optim]") {
  require_rejected("adam", OptimizerOptions(-0.1), "lr");
  require_rejected("sgd", OptimizerOptions(NAN), "lr");
  require_rejected("adam", OptimizerOptions().betas({1.0, 0.999}), "betas[0]");
  require_rejected("adamw", OptimizerOptions().betas({0.9, -0.1}), "betas[1]");
  require_rejected("lamb", OptimizerOptions().betas({0.9, 1.0}), "betas[1]");
  require_rejected("adam", OptimizerOptions().eps(0.0), "eps");
  require_rejected("adam", OptimizerOptions().eps(-1e-8), "eps");
  require_rejected("adam", OptimizerOptions().eps_relative(-1.0), "eps_relative");
  require_rejected("adamw", OptimizerOptions().weight_decay(-0.01), "weight_decay");
  require_rejected("adam", OptimizerOptions().weight_decay(0.1).fp32_weight_decay(0.01), "fp32_weight_decay");
  require_rejected("sgd", OptimizerOptions().nesterov(true), "nesterov");
  require_rejected("sgd", OptimizerOptions().momentum(0.9).dampening(0.1).nesterov(true), "dampening");
  require_rejected("sgd", OptimizerOptions().momentum(1.5), "momentum");
  require_rejected("adam", OptimizerOptions().momentum(0.9), "momentum");
  require_rejected("sgd", OptimizerOptions().amsgrad(true), "amsgrad");
  require_rejected("lamb", OptimizerOptions().amsgrad(true), "amsgrad");
  require_rejected("lion", OptimizerOptions().amsgrad(true), "amsgrad applies to adam and adamw, not lion");
  require_rejected("lion", OptimizerOptions().momentum(0.9),
                   "momentum, dampening and nesterov apply to sgd only, not lion");
  require_rejected("lamb", OptimizerOptions().trust_clamp_lower(2).trust_clamp_upper(1), "trust_clamp");
  require_rejected("adam", OptimizerOptions().state_dtype(DType::f64), "state_dtype");
  require_rejected("adam", OptimizerOptions().max_grad_norm(-1), "max_grad_norm");
  require_rejected("adam", OptimizerOptions().loss_scaling(LossScalingOptions().initial_scale(0)), "initial_scale");
  require_rejected("adam", OptimizerOptions().loss_scaling(LossScalingOptions().initial_scale(-4)), "initial_scale");
  // Finite as a double but not as the float the scale lives in: inf skipped every step, 1e-45 backed off to 0.
  require_rejected("adam", OptimizerOptions().loss_scaling(LossScalingOptions().initial_scale(1e300)), "initial_scale");
  require_rejected("adam", OptimizerOptions().loss_scaling(LossScalingOptions().initial_scale(1e-45)), "initial_scale");
  require_rejected("adam", OptimizerOptions().loss_scaling(LossScalingOptions().growth_factor(1.0)), "growth_factor");
  require_rejected("adam", OptimizerOptions().loss_scaling(LossScalingOptions().backoff_factor(1.5)), "backoff_factor");
  require_rejected("adam", OptimizerOptions().loss_scaling(LossScalingOptions().growth_interval(0)), "growth_interval");
  require_rejected("adam", OptimizerOptions().monitor(MonitorOptions().grad_norm_warn_threshold(0)),
                   "grad_norm_warn_threshold");
  ScheduleParams cosine;
  cosine.kind = ScheduleKind::warmup_cosine;
  cosine.warmup_steps = 10;
  cosine.total_steps = 10;
  require_rejected("adam", OptimizerOptions().schedule(cosine), "total_steps");
  ScheduleParams floor_above_lr;
  floor_above_lr.min_lr = 1.0;
  require_rejected("adam", OptimizerOptions(0.1).schedule(floor_above_lr), "min_lr");
}

TEST_CASE("options: a group with a negative lr multiplier or no parameters is rejected", "[optim]") {
  NamedParameters parameters = random_parameters({{2, 2}}, 1);
  REQUIRE_THROWS_WITH(make_optimizer("sgd", std::vector<ParamGroup>{{"head", parameters, -1.0, std::nullopt}}),
                      Catch::Contains("head") && Catch::Contains("lr_multiplier"));
  REQUIRE_THROWS_WITH(make_optimizer("sgd", std::vector<ParamGroup>{{"empty", {}, 1.0, std::nullopt}}),
                      Catch::Contains("empty"));
}

TEST_CASE("registry: names, unknown name listing the known ones", "[optim]") {
  std::vector<std::string> names = optimizer_names();
  for (const char* name : {"adam", "adamw", "lamb", "lion", "sgd"})
    REQUIRE(std::find(names.begin(), names.end(), name) != names.end());
  NamedParameters parameters = random_parameters({{2, 2}}, 1);
  REQUIRE_THROWS_AS(make_optimizer("adamax", parameters), ConfigError);
  REQUIRE_THROWS_WITH(make_optimizer("adamax", parameters),
                      Catch::Contains("adamax") && Catch::Contains("adam, adamw, lamb, lion, sgd"));
  for (const char* name : {"adam", "adamw", "lamb", "lion", "sgd"})
    REQUIRE(make_optimizer(name, parameters)->name() == name);
  register_optimizer("returns_nothing",
                     [](std::vector<ParamGroup>, const OptimizerOptions&) { return std::unique_ptr<Optimizer>(); });
  REQUIRE_THROWS_WITH(make_optimizer("returns_nothing", parameters),
                      Catch::Contains("returns_nothing") && Catch::Contains("returned no optimizer"));
}

TEST_CASE("options: default weight decay per optimizer and no decay on 1-d parameters", "[optim]") {
  REQUIRE(OptimizerOptions().effective_weight_decay("adamw") == 1e-2);
  REQUIRE(OptimizerOptions().effective_weight_decay("adam") == 0.0);
  REQUIRE(OptimizerOptions().weight_decay(0.0).effective_weight_decay("adamw") == 0.0);
  REQUIRE(OptimizerOptions().fp32_weight_decay(0.05).effective_weight_decay("adam") == 0.05);
  NamedParameters parameters = random_parameters({{3, 3}, {3}, {1}}, 2);
  auto adamw = make_optimizer("adamw", parameters, OptimizerOptions(0.0).weight_decay(0.5));
  REQUIRE(adamw->arena().segments()[0].weight_decay);
  REQUIRE_FALSE(adamw->arena().segments()[1].weight_decay);
  REQUIRE_FALSE(adamw->arena().segments()[2].weight_decay);
  NamedParameters more = random_parameters({{3, 3}, {3}}, 3);
  auto decaying = make_optimizer("adamw", more, OptimizerOptions(0.0).decay_1d_params(true));
  REQUIRE(decaying->arena().segments()[1].weight_decay);
}

TEST_CASE("options: the optimizer settings block is accepted, with the fp16-momentum warning", "[optim]") {
  // optimizer: {name: adam, settings: {fp32_weight_decay: 0.01, fp16_momentum: true,
  //             loss_scaling: {initial_scale: 65536, growth_interval: 2000}}}
  OptimizerOptions options = OptimizerOptions().fp32_weight_decay(0.01).fp16_momentum(true).loss_scaling(
      LossScalingOptions().enabled(true).initial_scale(65536).growth_interval(2000));
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  NamedParameters parameters = random_parameters({{4, 4}, {4}}, 4);
  std::unique_ptr<Optimizer> adam;
  REQUIRE_NOTHROW(adam = make_optimizer("adam", parameters, options));
  spdlog::set_default_logger(previous);
  REQUIRE(log.str().find("beta1 > 0.9") != std::string::npos);
  REQUIRE(adam->arena().state_dtype() == DType::f16);
  REQUIRE(adam->step_state().loss_scale == 65536.0f);
  REQUIRE(adam->options().effective_weight_decay("adam") == 0.01);

  std::ostringstream quiet;
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(quiet)));
  NamedParameters others = random_parameters({{4, 4}}, 5);
  make_optimizer("adam", others, OptimizerOptions(options).betas({0.95, 0.999}));
  spdlog::set_default_logger(previous);
  REQUIRE(quiet.str().find("beta1 > 0.9") == std::string::npos);
}
