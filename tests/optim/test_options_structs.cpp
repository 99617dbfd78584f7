// The per-optimizer options structs (AdamOptions, AdamWOptions, SgdOptions, LambOptions, LionOptions): each
// shows its optimizer's real defaults, chains its setters, and an optimizer built from it steps exactly as
// the same settings given through OptimizerOptions and make_optimizer.
#include "opsnn/opsnn.h"
#include "optim/optim_test_support.h"

using namespace opsnn;
using namespace opsnn::optim;
using namespace opsnn::optim::testing;

namespace {

// Steps `typed` and `by_name` (over equal parameters) on the same gradients and requires equal weights.
void require_same_trajectory(Optimizer& typed, const NamedParameters& a, Optimizer& by_name, const NamedParameters& b) {
  for (int step = 0; step < 6; ++step) {
    auto grads = make_grads(a, step, 9, GradPattern::normal);
    write_grads(a, grads);
    write_grads(b, grads);
    typed.step();
    by_name.step();
  }
  REQUIRE(values_of(a) == values_of(b));
}

const std::vector<Shape> kShapes = {{7, 3}, {3}};

}  // namespace

TEST_CASE("options structs: each shows its optimizer's defaults", "[optim]") {
  CHECK(AdamOptions().lr() == 1e-3);
  CHECK(AdamOptions().betas() == Betas(0.9, 0.999));
  CHECK(AdamOptions().eps() == 1e-8);
  CHECK(AdamOptions().weight_decay() == 0.0);
  CHECK_FALSE(AdamOptions().amsgrad());
  CHECK(AdamWOptions().weight_decay() == 1e-2);
  CHECK(SgdOptions().momentum() == 0.0);
  CHECK_FALSE(SgdOptions().nesterov());
  CHECK(LambOptions().trust_clamp_lower() == 1e-3);
  CHECK(LambOptions().trust_clamp_upper() == 10.0);
  CHECK(LionOptions().lr() == 1e-4);
  CHECK(LionOptions().betas() == Betas(0.9, 0.99));
  CHECK(LionOptions().weight_decay() == 0.0);
  // Chained setters keep the struct's type and reach the options the optimizer gets.
  AdamWOptions chained = AdamWOptions(3e-4).betas({0.8, 0.95}).weight_decay(0.1).amsgrad(true).max_grad_norm(1.0);
  CHECK(chained.options().lr() == 3e-4);
  CHECK(chained.options().betas() == Betas(0.8, 0.95));
  CHECK(chained.options().weight_decay() == std::optional<double>(0.1));
  CHECK(chained.options().amsgrad());
  CHECK(chained.options().max_grad_norm() == 1.0);
}

TEST_CASE("options structs: a typed optimizer steps as make_optimizer with the same settings", "[optim]") {
  SECTION("adam") {
    NamedParameters a = random_parameters(kShapes, 2), b = random_parameters(kShapes, 2);
    Adam typed(a, AdamOptions(1e-2).betas({0.85, 0.99}).amsgrad(true).weight_decay(0.01));
    auto by_name =
        make_optimizer("adam", b, OptimizerOptions(1e-2).betas({0.85, 0.99}).amsgrad(true).weight_decay(0.01));
    require_same_trajectory(typed, a, *by_name, b);
  }
  SECTION("adamw: the struct's weight decay default is the optimizer's") {
    NamedParameters a = random_parameters(kShapes, 3), b = random_parameters(kShapes, 3);
    AdamW typed(a, AdamWOptions(1e-2));
    auto by_name = make_optimizer("adamw", b, OptimizerOptions(1e-2));
    require_same_trajectory(typed, a, *by_name, b);
  }
  SECTION("sgd with nesterov") {
    NamedParameters a = random_parameters(kShapes, 4), b = random_parameters(kShapes, 4);
    SGD typed(a, SgdOptions(0.05).momentum(0.9).nesterov(true));
    auto by_name = make_optimizer("sgd", b, OptimizerOptions(0.05).momentum(0.9).nesterov(true));
    require_same_trajectory(typed, a, *by_name, b);
  }
  SECTION("lamb") {
    NamedParameters a = random_parameters(kShapes, 5), b = random_parameters(kShapes, 5);
    LAMB typed(a, LambOptions(1e-2).weight_decay(0.01).trust_clamp_upper(5.0));
    auto by_name = make_optimizer("lamb", b, OptimizerOptions(1e-2).weight_decay(0.01).trust_clamp_upper(5.0));
    require_same_trajectory(typed, a, *by_name, b);
  }
  SECTION("lion: its defaults without any setting") {
    NamedParameters a = random_parameters(kShapes, 6), b = random_parameters(kShapes, 6);
    Lion typed(a);
    auto by_name = make_optimizer("lion", b);
    require_same_trajectory(typed, a, *by_name, b);
    CHECK(typed.next_lr() == 1e-4);
  }
}

TEST_CASE("options structs: a typed optimizer validates like the named one", "[optim]") {
  NamedParameters parameters = random_parameters(kShapes, 1);
  CHECK_THROWS_WITH(Adam(parameters, AdamOptions(-1.0)), Catch::Contains("lr = -1"));
  CHECK_THROWS_WITH(SGD(random_parameters(kShapes, 1), SgdOptions().nesterov(true)),
                    Catch::Contains("nesterov = true needs momentum > 0"));
  CHECK_THROWS_WITH(Lion(random_parameters(kShapes, 1), LionOptions().betas({1.0, 0.99})),
                    Catch::Contains("betas[0] = 1"));
}

TEST_CASE("the composition root registers every built-in once", "[optim][models][data]") {
  register_builtins();  // again: idempotent
  CHECK(builtins_registered());
  for (const std::string& name : builtin_optimizer_names()) CHECK(find_optimizer(name) != nullptr);
  std::vector<std::string> models = models::known_models();
  for (const std::string& name : models::builtin_model_names())
    CHECK(std::find(models.begin(), models.end(), name) != models.end());
  std::vector<std::string> datasets = data::known_datasets();
  for (const std::string& name : data::builtin_dataset_names())
    CHECK(std::find(datasets.begin(), datasets.end(), name) != datasets.end());
  // Each name is registered once: the optimizer list has no duplicates after a second call.
  std::vector<std::string> names = optimizer_names();
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
}
