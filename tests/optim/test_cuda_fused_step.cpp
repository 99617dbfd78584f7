// The device-resident fused step (src/optim/cuda/) against the CPU pipeline: the same optimizer, options
// and gradients on both devices over hundreds of steps. The kernels call the same rules.h with FMA
// contraction off on both sides, so parameters, states and the step state must agree bit for bit, except
// where a result depends on a sum of squares (global norm -> clip factor, LAMB's per-tensor norms), which
// the GPU adds in another order: those compare within a few ulps. Also: non-finite injection with and
// without loss scaling, the single-pass (warn) mode, fp16 overflow, zero gradients, odd sizes and tails,
// bf16/fp16 gradients and the low-precision parameter copy, CUDA graph capture. Tagged [cuda]: they
// return early where no GPU exists.
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/optim/device_step.h"
#include "opsnn/optim/optimizer.h"
#include "optim/optim_test_support.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;
using opsnn::optim::testing::GradPattern;

namespace {

const Device kGpu(DeviceType::cuda, 0);

bool have_gpu() {
  if (cuda_device_count() > 0) return true;
  WARN("no CUDA device: this GPU test checks nothing here");
  return false;
}

// Odd sizes: tails of 1..7 elements after the 8-wide vectors, a tensor spanning two 16K chunks, scalars.
const std::vector<Shape> kShapes = {{37}, {5, 7}, {16384 + 101}, {3, 3, 3, 3}, {1000}, {1}, {8, 125}};

NamedParameters copy_to(const NamedParameters& parameters, Device device) {
  NamedParameters copies;
  for (const auto& [name, tensor] : parameters) {
    Tensor copy = tensor.to(kCPU).clone().to(device);
    copy.set_requires_grad(true);
    copies.emplace_back(name, copy);
  }
  return copies;
}

bool same_value(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

// Every element equal (bits; NaN matches NaN), or within rtol of the larger magnitude when rtol > 0.
void require_match(const Tensor& gpu, const Tensor& cpu, double rtol, const std::string& what) {
  std::vector<float> a = gpu.to_vector<float>(), b = cpu.to_vector<float>();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = same_value(a[i], b[i]);
    if (!ok && rtol > 0.0 && std::isfinite(a[i]) && std::isfinite(b[i]))
      ok = std::fabs(a[i] - b[i]) <= rtol * std::max({std::fabs(a[i]), std::fabs(b[i]), 1e-30f});
    if (!ok) {
      INFO(what << ": element " << i << " gpu " << a[i] << " cpu " << b[i]);
      REQUIRE(ok);
    }
  }
}

void require_same_state(const StepState& gpu, const StepState& cpu, double rtol) {
  REQUIRE(gpu.step == cpu.step);
  REQUIRE(gpu.skipped_steps == cpu.skipped_steps);
  REQUIRE(gpu.lr == cpu.lr);
  REQUIRE(gpu.beta1_power == cpu.beta1_power);
  REQUIRE(gpu.beta2_power == cpu.beta2_power);
  REQUIRE(gpu.loss_scale == cpu.loss_scale);
  REQUIRE(gpu.growth_tracker == cpu.growth_tracker);
  REQUIRE(gpu.found_inf == cpu.found_inf);
  REQUIRE(gpu.monitor_flags == cpu.monitor_flags);
  REQUIRE(gpu.first_nonfinite_step == cpu.first_nonfinite_step);
  REQUIRE(gpu.first_nonfinite_segment == cpu.first_nonfinite_segment);
  if (std::isfinite(cpu.grad_norm))
    REQUIRE(std::fabs(gpu.grad_norm - cpu.grad_norm) <= 1e-6 * cpu.grad_norm + 1e-30);
  else
    REQUIRE(!std::isfinite(gpu.grad_norm));
  REQUIRE(std::fabs(gpu.clip_factor - cpu.clip_factor) <= std::max(rtol, 1e-6) * cpu.clip_factor);
}

struct Scenario {
  std::string optimizer;
  OptimizerOptions options;
  int steps = 200;
  GradPattern pattern = GradPattern::normal;
  double grad_scale = 1.0;
  double rtol = 0.0;  // 0: bit-exact
  // Edits a step's gradients (non-finite injection, loss scaling).
  std::function<void(int step, const StepState& state, std::vector<std::vector<double>>& grads)> edit;
};

Scenario scenario(std::string optimizer, OptimizerOptions options, int steps = 200,
                  GradPattern pattern = GradPattern::normal, double grad_scale = 1.0, double rtol = 0.0) {
  Scenario s;
  s.optimizer = std::move(optimizer);
  s.options = std::move(options);
  s.steps = steps;
  s.pattern = pattern;
  s.grad_scale = grad_scale;
  s.rtol = rtol;
  return s;
}

void run_scenario(const Scenario& s) {
  NamedParameters cpu = testing::random_parameters(kShapes, 11);
  NamedParameters gpu = copy_to(cpu, kGpu);
  auto reference = make_optimizer(s.optimizer, cpu, s.options);
  auto fused = make_optimizer(s.optimizer, gpu, s.options);
  for (int step = 0; step < s.steps; ++step) {
    std::vector<std::vector<double>> grads = testing::make_grads(cpu, step, 5, s.pattern, s.grad_scale);
    if (s.edit) s.edit(step, reference->step_state(), grads);
    testing::write_grads(cpu, grads);
    testing::write_grads(gpu, grads);
    const StepState& want = reference->step();
    const StepState& got = fused->step();
    INFO(s.optimizer << " state " << dtype_name(s.options.state_dtype()) << ", step " << step);
    require_same_state(got, want, s.rtol);
    if (step % 25 == 0 || step + 1 == s.steps)
      for (size_t t = 0; t < cpu.size(); ++t) require_match(gpu[t].second, cpu[t].second, s.rtol, cpu[t].first);
  }
  StateDict want = reference->state_dict(), got = fused->state_dict();
  REQUIRE(want.size() == got.size());
  for (const auto& [key, tensor] : want) {
    if (key.rfind("step_state.", 0) == 0) continue;
    require_match(got.at(key), tensor, s.rtol, key);
  }
  std::vector<double> cpu_norms = reference->segment_grad_norms(), gpu_norms = fused->segment_grad_norms();
  REQUIRE(cpu_norms.size() == gpu_norms.size());
  for (size_t i = 0; i < cpu_norms.size(); ++i)
    if (std::isfinite(cpu_norms[i])) REQUIRE(std::fabs(gpu_norms[i] - cpu_norms[i]) <= 1e-12 * cpu_norms[i] + 1e-300);
}

const DType kStateTypes[] = {DType::f32, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("cuda fused step: SGD, momentum, dampening, Nesterov equal the CPU bit for bit", "[cuda][optim]") {
  if (!have_gpu()) return;
  for (DType dtype : kStateTypes) {
    run_scenario(scenario("sgd", OptimizerOptions(0.05).state_dtype(dtype), 150));
    run_scenario(scenario("sgd",
                          OptimizerOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(1e-3).state_dtype(dtype),
                          150, GradPattern::mixed));
    run_scenario(
        scenario("sgd", OptimizerOptions(0.05).momentum(0.95).nesterov(true).weight_decay(1e-4).state_dtype(dtype)));
  }
}

TEST_CASE("cuda fused step: Adam, AdamW, amsgrad, eps scaling, schedules equal the CPU bit for bit", "[cuda][optim]") {
  if (!have_gpu()) return;
  ScheduleParams cosine;
  cosine.kind = ScheduleKind::warmup_cosine;
  cosine.warmup_steps = 10;
  cosine.total_steps = 150;
  cosine.min_lr = 1e-5;
  for (DType dtype : kStateTypes) {
    GradPattern pattern = dtype == DType::f32 ? GradPattern::mixed : GradPattern::bounded;
    run_scenario(scenario("adam", OptimizerOptions(1e-3).weight_decay(1e-2).state_dtype(dtype), 200, pattern));
    run_scenario(
        scenario("adam", OptimizerOptions(1e-3).amsgrad(true).eps_relative(1e-3).state_dtype(dtype), 200, pattern));
    run_scenario(scenario(
        "adamw", OptimizerOptions(2e-3).betas({0.95, 0.99}).weight_decay(0.05).schedule(cosine).state_dtype(dtype), 200,
        pattern));
  }
}

TEST_CASE("cuda fused step: Lion (the generic element-wise pass) equals the CPU bit for bit", "[cuda][optim]") {
  if (!have_gpu()) return;
  ScheduleParams cosine;
  cosine.kind = ScheduleKind::warmup_cosine;
  cosine.warmup_steps = 10;
  cosine.total_steps = 150;
  cosine.min_lr = 1e-6;
  for (DType dtype : kStateTypes) {
    GradPattern pattern = dtype == DType::f32 ? GradPattern::mixed : GradPattern::bounded;
    run_scenario(scenario("lion", OptimizerOptions().state_dtype(dtype), 150, pattern));
    run_scenario(
        scenario("lion", OptimizerOptions(3e-4).weight_decay(0.1).schedule(cosine).state_dtype(dtype), 200, pattern));
  }
}

TEST_CASE("cuda fused step: Adagrad (the generic element-wise pass) equals the CPU bit for bit", "[cuda][optim]") {
  if (!have_gpu()) return;
  ScheduleParams cosine;
  cosine.kind = ScheduleKind::warmup_cosine;
  cosine.warmup_steps = 10;
  cosine.total_steps = 150;
  cosine.min_lr = 1e-5;
  for (DType dtype : kStateTypes) {
    GradPattern pattern = dtype == DType::f32 ? GradPattern::mixed : GradPattern::bounded;
    run_scenario(scenario("adagrad", OptimizerOptions().state_dtype(dtype), 150, pattern));
    run_scenario(scenario(
        "adagrad",
        OptimizerOptions(5e-2).weight_decay(0.01).initial_accumulator_value(0.1).schedule(cosine).state_dtype(dtype),
        200, pattern));
  }
}

TEST_CASE("cuda fused step: parameter groups with lr multipliers and decay flags", "[cuda][optim]") {
  if (!have_gpu()) return;
  NamedParameters all = testing::random_parameters(kShapes, 3);
  NamedParameters gpu_all = copy_to(all, kGpu);
  auto groups_of = [](const NamedParameters& p) {
    return std::vector<ParamGroup>{ParamGroup{"body", {p.begin(), p.begin() + 4}, 1.0, std::nullopt},
                                   ParamGroup{"head", {p.begin() + 4, p.end()}, 0.25, true}};
  };
  OptimizerOptions options = OptimizerOptions(1e-2).weight_decay(0.1);
  auto reference = make_optimizer("adamw", groups_of(all), options);
  auto fused = make_optimizer("adamw", groups_of(gpu_all), options);
  for (int step = 0; step < 60; ++step) {
    if (step == 30) {  // a multiplier change reaches the device table
      reference->set_lr_multiplier(1, 2.0);
      fused->set_lr_multiplier(1, 2.0);
    }
    std::vector<std::vector<double>> grads = testing::make_grads(all, step, 9, GradPattern::normal);
    testing::write_grads(all, grads);
    testing::write_grads(gpu_all, grads);
    require_same_state(fused->step(), reference->step(), 0.0);
  }
  for (size_t t = 0; t < all.size(); ++t) require_match(gpu_all[t].second, all[t].second, 0.0, all[t].first);
}

TEST_CASE("cuda fused step: LAMB trust ratios and clipping agree within rounding of the norms", "[cuda][optim]") {
  if (!have_gpu()) return;
  for (DType dtype : kStateTypes) {
    run_scenario(scenario("lamb", OptimizerOptions(1e-2).weight_decay(0.01).state_dtype(dtype), 150,
                          GradPattern::bounded, 1.0, dtype == DType::f32 ? 2e-5 : 1e-2));
    run_scenario(scenario("adamw", OptimizerOptions(1e-3).max_grad_norm(1.0).state_dtype(dtype), 150,
                          GradPattern::bounded, 1.0, dtype == DType::f32 ? 2e-5 : 1e-2));
  }
  run_scenario(
      scenario("sgd", OptimizerOptions(0.1).momentum(0.9).max_grad_norm(0.5), 150, GradPattern::normal, 1.0, 2e-5));
}

namespace {

// Every parameter and optimizer state (moments) of two optimizers equal bit for bit.
void require_same_bits(Optimizer& a, Optimizer& b, const NamedParameters& pa, const NamedParameters& pb,
                       const std::string& what) {
  for (size_t t = 0; t < pa.size(); ++t) require_match(pb[t].second, pa[t].second, 0.0, what + " " + pa[t].first);
  StateDict want = a.state_dict(), got = b.state_dict();
  REQUIRE(want.size() == got.size());
  for (const auto& [key, tensor] : want) {
    if (key.rfind("step_state.", 0) == 0) continue;
    require_match(got.at(key), tensor, 0.0, what + " " + key);
  }
  require_same_state(b.step_state(), a.step_state(), 0.0);
  REQUIRE(b.step_state().grad_norm == a.step_state().grad_norm);
}

// LAMB over `shapes` on the CPU and twice on the GPU from the same start: the GPU agrees with the CPU
// within rounding of the norms, and the two GPU runs agree bit for bit in every parameter and moment
// (which block runs which tile changes no sum). Two-pass (skip) and single-pass (warn) pipelines.
void run_lamb_twice(const std::vector<Shape>& shapes, int steps) {
  for (NonFiniteAction action : {NonFiniteAction::skip, NonFiniteAction::warn}) {
    INFO("on_nonfinite " << (action == NonFiniteAction::warn ? "warn" : "skip"));
    OptimizerOptions options = OptimizerOptions(1e-2).weight_decay(0.01).monitor(MonitorOptions().on_nonfinite(action));
    NamedParameters cpu = testing::random_parameters(shapes, 5);
    NamedParameters gpu = copy_to(cpu, kGpu), again = copy_to(cpu, kGpu);
    auto reference = make_optimizer("lamb", cpu, options);
    auto fused = make_optimizer("lamb", gpu, options);
    auto repeat = make_optimizer("lamb", again, options);
    REQUIRE(single_pass_step(fused->device_step_constants()) == (action == NonFiniteAction::warn));
    for (int step = 0; step < steps; ++step) {
      std::vector<std::vector<double>> grads = testing::make_grads(cpu, step, 2, GradPattern::bounded);
      testing::write_grads(cpu, grads);
      testing::write_grads(gpu, grads);
      testing::write_grads(again, grads);
      const StepState& want = reference->step();
      INFO("step " << step);
      require_same_state(fused->step(), want, 2e-5);
      repeat->step();
    }
    for (size_t t = 0; t < cpu.size(); ++t) require_match(gpu[t].second, cpu[t].second, 2e-5, cpu[t].first);
    require_same_bits(*fused, *repeat, gpu, again, "repeat");
  }
}

}  // namespace

TEST_CASE("cuda fused step: LAMB over an arena of many L2 windows agrees with the CPU and repeats exactly",
          "[cuda][optim]") {
  if (!have_gpu()) return;
  // About 7.4M values in 40 tensors: several of LAMB's L2 windows (a few million values each), one
  // tensor larger than a window, odd tails.
  std::vector<Shape> shapes;
  for (int i = 0; i < 38; ++i) shapes.push_back({(i % 7 + 1) * 5000 + i * 3 + 1, 5 + (i % 3)});
  shapes.push_back({3'000'001});
  shapes.push_back({17});
  run_lamb_twice(shapes, 6);
}

TEST_CASE("cuda fused step: LAMB with one huge segment among many tiny ones agrees with the CPU and repeats exactly",
          "[cuda][optim]") {
  if (!have_gpu()) return;
  // 5M values in one tensor (a window of its own, over a thousand tiles) amid 300 tensors of 1 to a few
  // thousand values, some one element around a tile (4095, 4097).
  std::vector<Shape> shapes;
  auto tiny = [&](int i) {
    if (i % 50 == 7)
      shapes.push_back({4095 + 2 * (i % 2)});
    else
      shapes.push_back({1 + (i * 37) % 300});
  };
  for (int i = 0; i < 150; ++i) tiny(i);
  shapes.push_back({5'000'011});
  for (int i = 150; i < 300; ++i) tiny(i);
  run_lamb_twice(shapes, 4);
}

TEST_CASE("cuda fused step: loss scaling skips inf steps, backs off and grows like the CPU", "[cuda][optim]") {
  if (!have_gpu()) return;
  for (DType dtype : {DType::f32, DType::f16}) {
    OptimizerOptions options = OptimizerOptions(1e-3).state_dtype(dtype).loss_scaling(
        LossScalingOptions().enabled(true).initial_scale(65536).growth_interval(7));
    Scenario s = scenario("adam", options, 120, GradPattern::bounded);
    s.edit = [](int step, const StepState& state, std::vector<std::vector<double>>& grads) {
      for (auto& tensor : grads)
        for (double& g : tensor) g = static_cast<float>(g * state.loss_scale);
      if (step == 3 || step == 4 || step == 50) grads[2][16384 + 7] = INFINITY;  // in the tail of chunk 2
      if (step == 60) grads[5][0] = NAN;
    };
    run_scenario(s);
  }
}

TEST_CASE("cuda fused step: non-finite gradients with warn (single pass), skip and stop", "[cuda][optim]") {
  if (!have_gpu()) return;
  auto inject = [](int step, const StepState&, std::vector<std::vector<double>>& grads) {
    if (step == 5) grads[3][10] = NAN;
    if (step == 9) grads[1][0] = -INFINITY;
  };
  for (NonFiniteAction action : {NonFiniteAction::warn, NonFiniteAction::skip}) {
    Scenario s = scenario("adamw", OptimizerOptions(1e-3).monitor(MonitorOptions().on_nonfinite(action)), 20);
    s.edit = inject;
    run_scenario(s);
    Scenario sgd =
        scenario("sgd", OptimizerOptions(0.1).momentum(0.9).monitor(MonitorOptions().on_nonfinite(action)), 20);
    sgd.edit = inject;
    run_scenario(sgd);
  }
  // The single-pass mode is what warn without clipping or scaling selects.
  NamedParameters gpu = copy_to(testing::random_parameters(kShapes, 1), kGpu);
  auto warn =
      make_optimizer("adam", gpu, OptimizerOptions().monitor(MonitorOptions().on_nonfinite(NonFiniteAction::warn)));
  REQUIRE(device_stepper_factory(DeviceType::cuda) != nullptr);
  REQUIRE(single_pass_step(warn->device_step_constants()));
  // stop: the step throws naming the tensor and leaves the parameters untouched.
  NamedParameters stop_parameters = copy_to(testing::random_parameters(kShapes, 2), kGpu);
  auto stop = make_optimizer("adam", stop_parameters,
                             OptimizerOptions().monitor(MonitorOptions().on_nonfinite(NonFiniteAction::stop)));
  std::vector<std::vector<double>> grads = testing::make_grads(stop_parameters, 0, 1, GradPattern::normal);
  grads[4][3] = NAN;
  testing::write_grads(stop_parameters, grads);
  std::vector<float> before = stop_parameters[0].second.to_vector<float>();
  REQUIRE_THROWS_WITH(stop->step(), Catch::Contains("layer4"));
  REQUIRE(stop_parameters[0].second.to_vector<float>() == before);
}

TEST_CASE("cuda fused step: fp16 states overflow and zero gradients as on the CPU", "[cuda][optim]") {
  if (!have_gpu()) return;
  // |g| ~ 300: g^2 ~ 1e5 overflows fp16's 65504 in the second moment.
  run_scenario(scenario("adam", OptimizerOptions(1e-3).state_dtype(DType::f16), 40, GradPattern::bounded, 300.0));
  run_scenario(
      scenario("sgd", OptimizerOptions(0.01).momentum(0.9).state_dtype(DType::f16), 40, GradPattern::bounded, 7e4));
  run_scenario(scenario("adamw", OptimizerOptions(1e-3), 30, GradPattern::normal, 0.0));  // all-zero gradients
}

TEST_CASE("cuda fused step: bf16/fp16 gradients and the low-precision parameter copy", "[cuda][optim]") {
  if (!have_gpu()) return;
  for (DType grad_dtype : {DType::bf16, DType::f16, DType::f32})
    for (DType copy_dtype : {DType::bf16, DType::f16}) {
      for (const char* name : {"adamw", "sgd", "lamb"}) {
        INFO(name << " grads " << dtype_name(grad_dtype) << " copy " << dtype_name(copy_dtype));
        OptimizerOptions options =
            OptimizerOptions(std::string(name) == "sgd" ? 0.05 : 1e-3).momentum(std::string(name) == "sgd" ? 0.9 : 0.0);
        NamedParameters cpu = testing::random_parameters(kShapes, 21);
        NamedParameters gpu = copy_to(cpu, kGpu);
        auto reference = make_optimizer(name, cpu, options);
        auto owner = make_optimizer(name, gpu, options);  // owns the device arena the custom stepper updates
        const ParamArena& arena = owner->arena();
        Tensor grads = Tensor::zeros({arena.padded_elements()}, grad_dtype, kGpu);
        Tensor copy = Tensor::zeros({arena.padded_elements()}, copy_dtype, kGpu);
        DeviceArena buffers = owner->device_arena();
        buffers.grads = grads.data_ptr();
        buffers.grad_dtype = grad_dtype;
        buffers.param_copy = copy.data_ptr();
        buffers.param_copy_dtype = copy_dtype;
        auto stepper = device_stepper_factory(DeviceType::cuda)(kGpu, owner->device_step_constants(), buffers,
                                                                owner->device_segments());
        stepper->write_state(owner->step_state());
        for (int step = 0; step < 40; ++step) {
          std::vector<std::vector<double>> g = testing::make_grads(cpu, step, 3, GradPattern::normal);
          std::vector<float> flat(static_cast<size_t>(arena.padded_elements()), 0.0f);
          for (size_t t = 0; t < g.size(); ++t)
            for (size_t i = 0; i < g[t].size(); ++i) {
              // Values the gradient dtype holds exactly, so the CPU sees the same gradients.
              float value = Tensor::scalar(g[t][i], grad_dtype).item();
              g[t][i] = value;
              flat[static_cast<size_t>(arena.segments()[t].offset) + i] = value;
            }
          grads.copy_(Tensor::from_vector(flat, {arena.padded_elements()}));
          testing::write_grads(cpu, g);
          const StepState& want = reference->step();
          stepper->enqueue(nullptr);
          StepState got;
          DeviceStepReport report;
          stepper->read(got, report);
          require_same_state(got, want, std::string(name) == "lamb" ? 2e-5 : 0.0);
        }
        double rtol = std::string(name) == "lamb" ? 2e-5 : 0.0;
        for (size_t t = 0; t < cpu.size(); ++t) require_match(gpu[t].second, cpu[t].second, rtol, cpu[t].first);
        // The copy holds the updated parameters rounded to its dtype (padding stays zero).
        require_match(copy.to(DType::f32), arena.params().to(copy_dtype).to(DType::f32), 0.0, "parameter copy");
      }
    }
}

TEST_CASE("cuda fused step: a captured step replayed N times equals N eager steps", "[cuda][optim]") {
  if (!have_gpu()) return;
  for (const char* name : {"adamw", "sgd", "lamb", "lion"}) {
    OptimizerOptions options =
        OptimizerOptions(std::string(name) == "sgd" ? 0.05 : 1e-3)
            .momentum(std::string(name) == "sgd" ? 0.9 : 0.0)
            .nesterov(std::string(name) == "sgd")
            .loss_scaling(LossScalingOptions().enabled(true).initial_scale(1024).growth_interval(4));
    NamedParameters base = testing::random_parameters(kShapes, 8);
    NamedParameters eager_parameters = copy_to(base, kGpu), graph_parameters = copy_to(base, kGpu);
    auto eager = make_optimizer(name, eager_parameters, options);
    auto graphed = make_optimizer(name, graph_parameters, options);
    std::unique_ptr<CapturedStep> graph = graphed->capture_step();
    for (int step = 0; step < 25; ++step) {
      std::vector<std::vector<double>> g = testing::make_grads(base, step, 4, GradPattern::bounded);
      if (step == 6) g[2][5] = INFINITY;  // a skipped step inside the graph
      testing::write_grads(eager_parameters, g);
      testing::write_grads(graph_parameters, g);
      eager->step();
      graph->replay();
    }
    INFO(name);
    require_same_state(graphed->sync_state(), eager->step_state(), 0.0);
    for (size_t t = 0; t < base.size(); ++t)
      require_match(graph_parameters[t].second, eager_parameters[t].second, 0.0, base[t].first);
  }
}

TEST_CASE("cuda fused step: misuse is a clear error", "[cuda][optim]") {
  NamedParameters cpu = testing::random_parameters({{4}}, 1);
  auto on_cpu = make_optimizer("adam", cpu);
  REQUIRE_THROWS_AS(on_cpu->capture_step(), UsageError);
  REQUIRE_THROWS_WITH(on_cpu->capture_step(), Catch::Contains("needs them on a GPU"));
  REQUIRE_THROWS_WITH(on_cpu->complete_step(), Catch::Contains("step() already completed it"));
  if (!have_gpu()) return;
  {  // complete_step runs the monitor's host side, as step() does: here on_nonfinite stop
    NamedParameters stopping = copy_to(cpu, kGpu);
    auto guarded = make_optimizer("adam", stopping,
                                  OptimizerOptions(1e-3).monitor(MonitorOptions().on_nonfinite(NonFiniteAction::stop)));
    testing::write_grads(stopping, {{1.0, 2.0, 3.0, 4.0}});
    guarded->step_async();
    REQUIRE(guarded->complete_step().step == 1);
    testing::write_grads(stopping, {{1.0, INFINITY, 3.0, 4.0}});
    guarded->step_async();
    REQUIRE_THROWS_AS(guarded->complete_step(), RuntimeFailure);
    REQUIRE(guarded->step_state().step == 1);  // the step was not applied
  }
  NamedParameters gpu = copy_to(cpu, kGpu);
  auto optimizer = make_optimizer("adam", gpu);
  DeviceArena buffers = optimizer->device_arena();
  buffers.grad_dtype = DType::i32;
  REQUIRE_THROWS_AS(device_stepper_factory(DeviceType::cuda)(kGpu, optimizer->device_step_constants(), buffers,
                                                             optimizer->device_segments()),
                    TypeError);
  // step_async + sync_state is step() without the wait in between.
  testing::write_grads(gpu, {{1.0, 2.0, 3.0, 4.0}});
  optimizer->step_async();
  REQUIRE(optimizer->sync_state().step == 1);
}

TEST_CASE("cuda fused step: the optimizer's low-precision parameter copy follows every step and refresh",
          "[cuda][optim]") {
  if (!have_gpu()) return;
  for (const std::string name : {"adamw", "sgd", "lamb"})
    for (DType dtype : {DType::bf16, DType::f16}) {
      INFO(name << " with a " << dtype_name(dtype) << " copy");
      NamedParameters cpu = testing::random_parameters(kShapes, 12);
      NamedParameters gpu = copy_to(cpu, kGpu);
      OptimizerOptions options(1e-2);
      if (name == "sgd") options.momentum(0.9);
      auto optimizer = make_optimizer(name, gpu, options);
      REQUIRE(optimizer->uses_device_step());
      CHECK_FALSE(optimizer->param_copy(gpu[0].second).defined());
      // Two steps before enabling it: the copy starts from the masters as they are, and the new
      // stepper continues from the current step state.
      for (int step = 0; step < 2; ++step) {
        testing::write_grads(gpu, testing::make_grads(cpu, step, 5, GradPattern::normal, 1.0));
        optimizer->step();
      }
      const int64_t steps_before = optimizer->step_state().step;
      optimizer->enable_param_copy(dtype);
      REQUIRE(optimizer->step_state().step == steps_before);
      auto require_copy_current = [&](const std::string& when) {
        for (const auto& [parameter_name, parameter] : gpu) {
          const Tensor copy = optimizer->param_copy(parameter);
          REQUIRE(copy.defined());
          REQUIRE(copy.dtype() == dtype);
          REQUIRE(copy.shape() == parameter.shape());
          INFO(when << ": " << parameter_name);
          // Bit for bit the cast of the master (the fused pass rounds as Tensor::to does).
          REQUIRE(copy.to(DType::f32).to_vector<float>() == parameter.to(dtype).to(DType::f32).to_vector<float>());
        }
      };
      require_copy_current("after enable_param_copy");
      for (int step = 2; step < 7; ++step) {
        testing::write_grads(gpu, testing::make_grads(cpu, step, 5, GradPattern::normal, 1.0));
        optimizer->step();
        require_copy_current("after step " + std::to_string(step));
      }
      REQUIRE(optimizer->step_state().step == steps_before + 5);
      gpu[1].second.fill_(0.375);  // a change outside the step (as a checkpoint load makes)
      optimizer->refresh_param_copy();
      require_copy_current("after refresh_param_copy");
      const Tensor stranger = Tensor::zeros({5, 7}, DType::f32, kGpu);
      CHECK_FALSE(optimizer->param_copy(stranger).defined());
      try {
        optimizer->enable_param_copy(DType::f32);
        FAIL("an f32 copy should be refused");
      } catch (const TypeError& error) {
        CHECK(std::string(error.what()).find("f16 or bf16") != std::string::npos);
      }
    }
}
