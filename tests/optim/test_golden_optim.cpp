// Golden trajectories from PyTorch (tools/gen_golden_optim.py, run on the GPU machine): torch.optim.SGD
// (momentum + dampening + decay, Nesterov), Adam (L2, amsgrad), AdamW, Adagrad and Adam under GradScaler with
// injected inf gradients, 200 steps each, replayed here with the stored float32 gradients; Lion from
// tools/gen_golden_lion.py (torch has no Lion: the formula in float64, see the script). A missing fixture
// is a failure, not a skip.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "opsnn/optim/optimizer.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;
using json = nlohmann::json;

namespace {

json load_fixture(const std::string& name) {
  std::string path = std::string(OPSNN_GOLDEN_DIR) + "/optim_" + name + ".json";
  std::ifstream file(path);
  INFO("golden fixture " << path << " (generate it with tools/gen_golden_optim.py on a machine with torch)");
  REQUIRE(file.good());
  return json::parse(file);
}

OptimizerOptions options_of(const json& fixture) {
  const json& o = fixture.at("options");
  const std::string optimizer = fixture.at("optimizer");
  OptimizerOptions options(o.at("lr").get<double>());
  options.weight_decay(o.at("weight_decay").get<double>()).decay_1d_params(true);  // torch decays every tensor
  if (optimizer == "adagrad") {
    options.eps(o.at("eps").get<double>()).initial_accumulator_value(o.at("initial_accumulator_value").get<double>());
  } else if (optimizer == "sgd") {
    options.momentum(o.at("momentum").get<double>())
        .dampening(o.at("dampening").get<double>())
        .nesterov(o.at("nesterov").get<bool>());
  } else {
    options.betas({o.at("betas")[0].get<double>(), o.at("betas")[1].get<double>()});
    if (o.contains("eps")) options.eps(o.at("eps").get<double>());  // lion has neither
    if (o.contains("amsgrad")) options.amsgrad(o.at("amsgrad").get<bool>());
  }
  if (fixture.contains("scaler")) {
    const json& s = fixture.at("scaler");
    options.loss_scaling(LossScalingOptions()
                             .enabled(true)
                             .initial_scale(s.at("initial_scale").get<double>())
                             .growth_factor(s.at("growth_factor").get<double>())
                             .backoff_factor(s.at("backoff_factor").get<double>())
                             .growth_interval(s.at("growth_interval").get<int64_t>()));
  }
  return options;
}

// Replays the fixture; parameters must match at every checkpoint within atol + rtol * |expected|.
void check_fixture(const std::string& name, double atol, double rtol, Device device = kCPU) {
  json fixture = load_fixture(name);
  INFO("fixture " << name << " from torch " << fixture.value("torch_version", std::string("?")) << " on "
                  << fixture.value("device", std::string("?")));
  NamedParameters parameters;
  for (const json& p : fixture.at("params")) {
    Tensor t = Tensor::from_vector(p.at("initial").get<std::vector<float>>(), p.at("shape").get<Shape>()).to(device);
    t.set_requires_grad(true);
    parameters.emplace_back(p.at("name").get<std::string>(), t);
  }
  auto optimizer = make_optimizer(fixture.at("optimizer").get<std::string>(), parameters, options_of(fixture));
  std::vector<int> inject = fixture.value("inject_inf", std::vector<int>{});
  std::vector<int> checkpoint_steps = fixture.at("checkpoint_steps").get<std::vector<int>>();
  std::vector<double> scale_history;
  std::vector<int> skipped;
  size_t next_checkpoint = 0;
  const json& grads = fixture.at("grads");
  for (size_t step = 0; step < grads.size(); ++step) {
    float scale = optimizer->step_state().loss_scale;
    for (size_t t = 0; t < parameters.size(); ++t) {
      std::vector<float> g = grads[step][t].get<std::vector<float>>();
      for (float& x : g) x *= scale;
      if (t == 1 && std::find(inject.begin(), inject.end(), static_cast<int>(step)) != inject.end()) g[0] = INFINITY;
      parameters[t].second.grad().copy_(Tensor::from_vector(g, parameters[t].second.shape()));
    }
    const StepState& state = optimizer->step();
    scale_history.push_back(state.loss_scale);
    if (state.monitor_flags & kStepSkipped) skipped.push_back(static_cast<int>(step));
    if (next_checkpoint < checkpoint_steps.size() && static_cast<int>(step) + 1 == checkpoint_steps[next_checkpoint]) {
      const json& expected = fixture.at("checkpoints")[next_checkpoint];
      for (size_t t = 0; t < parameters.size(); ++t) {
        std::vector<float> actual = parameters[t].second.to_vector<float>();
        std::vector<double> want = expected[t].get<std::vector<double>>();
        for (size_t i = 0; i < actual.size(); ++i) {
          INFO("after step " << step + 1 << ", tensor " << t << ", element " << i);
          REQUIRE(std::fabs(actual[i] - want[i]) <= atol + rtol * std::fabs(want[i]));
        }
      }
      ++next_checkpoint;
    }
  }
  REQUIRE(next_checkpoint == checkpoint_steps.size());
  if (fixture.contains("scale_history")) {
    REQUIRE(scale_history == fixture.at("scale_history").get<std::vector<double>>());
    REQUIRE(skipped == fixture.at("skipped").get<std::vector<int>>());
  }
}

}  // namespace

// Tolerances: fp32 rounding differs in order only (PyTorch divides by sqrt(bias_correction2) and
// multiplies by lr/bias_correction1; opsnn multiplies by the inverse corrections), over 200 steps.
TEST_CASE("golden: torch.optim.SGD with momentum, dampening and weight decay", "[golden][optim]") {
  check_fixture("sgd_momentum", 1e-5, 1e-5);
}

TEST_CASE("golden: torch.optim.SGD with Nesterov momentum", "[golden][optim]") {
  check_fixture("sgd_nesterov", 1e-5, 1e-5);
}

TEST_CASE("golden: torch.optim.Adam with L2 weight decay", "[golden][optim]") { check_fixture("adam", 2e-5, 1e-4); }

TEST_CASE("golden: torch.optim.Adam with amsgrad", "[golden][optim]") { check_fixture("adam_amsgrad", 2e-5, 1e-4); }

TEST_CASE("golden: torch.optim.AdamW", "[golden][optim]") { check_fixture("adamw", 2e-5, 1e-4); }

// Adagrad's sum only grows, so its steps shrink and fp32 rounding stays at the scale of the first steps.
TEST_CASE("golden: torch.optim.Adagrad with L2 weight decay and an initial accumulator", "[golden][optim]") {
  check_fixture("adagrad", 1e-5, 1e-5);
}

// Lion's step is lr * (+-1 + wd*p): float32 rounding of p and of the decay only, while a sign agrees.
TEST_CASE("golden: Lion in float64 (tools/gen_golden_lion.py)", "[golden][optim]") {
  check_fixture("lion", 1e-5, 1e-5);
}

TEST_CASE("golden: Adam under torch.amp.GradScaler with injected inf gradients", "[golden][optim]") {
  check_fixture("grad_scaler", 2e-5, 1e-4);
}

// The same trajectories through the fused CUDA step (device-resident step state, GPU kernels).
TEST_CASE("golden: the PyTorch trajectories through the fused CUDA step", "[golden][optim][cuda]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: this GPU test checks nothing here");
    return;
  }
  const Device gpu(DeviceType::cuda, 0);
  check_fixture("sgd_momentum", 1e-5, 1e-5, gpu);
  check_fixture("sgd_nesterov", 1e-5, 1e-5, gpu);
  check_fixture("adam", 2e-5, 1e-4, gpu);
  check_fixture("adam_amsgrad", 2e-5, 1e-4, gpu);
  check_fixture("adamw", 2e-5, 1e-4, gpu);
  check_fixture("grad_scaler", 2e-5, 1e-4, gpu);
  check_fixture("lion", 1e-5, 1e-5, gpu);
  check_fixture("adagrad", 1e-5, 1e-5, gpu);
}
