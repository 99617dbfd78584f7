// The monitor: global and per-segment grad norms, the norm threshold warning, non-finite gradients and
// parameters reported with the first step and tensor, and the warn / skip / stop actions.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "opsnn/optim/descriptor.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/optim/sgd.h"
#include "optim/optim_test_support.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;
using namespace opsnn::optim::testing;

namespace {

// Captures spdlog's default logger output while alive.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::logger> previous_;
};

OptimizerOptions with_action(NonFiniteAction action) {
  return OptimizerOptions(0.1).monitor(MonitorOptions().on_nonfinite(action));
}

}  // namespace

TEST_CASE("monitor: global and per-segment gradient norms, warning above the threshold", "[optim]") {
  NamedParameters parameters = random_parameters({{3, 4}, {4}, {20000}}, 1);
  SGD sgd(parameters, OptimizerOptions(0.0).monitor(MonitorOptions().grad_norm_warn_threshold(100.0)));
  auto grads = make_grads(parameters, 0, 2, GradPattern::normal);
  write_grads(parameters, grads);
  LogCapture capture;
  sgd.step();
  double total = 0.0;
  for (size_t t = 0; t < grads.size(); ++t) {
    double sum = 0.0;
    for (double g : grads[t]) sum += g * g;
    REQUIRE(sgd.segment_grad_norms()[t] == Approx(std::sqrt(sum)).epsilon(1e-12));
    total += sum;
  }
  REQUIRE(sgd.grad_norm() == Approx(std::sqrt(total)).epsilon(1e-6));
  REQUIRE(sgd.grad_norm() > 100.0);  // 20016 standard normals
  REQUIRE((sgd.step_state().monitor_flags & kGradNormAboveThreshold) != 0);
  REQUIRE(capture.text().find("exceeds the monitor threshold") != std::string::npos);
  REQUIRE(sgd.step_state().step == 1);  // a warning only
}

TEST_CASE("monitor: non-finite gradients with on_nonfinite = skip", "[optim]") {
  NamedParameters parameters = random_parameters({{2, 2}, {3}, {5}}, 2);
  SGD sgd(parameters, with_action(NonFiniteAction::skip));
  write_grads(parameters, make_grads(parameters, 0, 1, GradPattern::normal));
  sgd.step();
  std::vector<std::vector<double>> before = values_of(parameters);
  auto grads = make_grads(parameters, 1, 1, GradPattern::normal);
  grads[1][2] = NAN;
  grads[2][0] = INFINITY;
  write_grads(parameters, grads);
  const StepState& state = sgd.step();
  REQUIRE(values_of(parameters) == before);
  REQUIRE(state.step == 1);
  REQUIRE(state.skipped_steps == 1);
  REQUIRE((state.monitor_flags & kNonFiniteGrad) != 0);
  REQUIRE((state.monitor_flags & kStepSkipped) != 0);
  REQUIRE(state.first_nonfinite_step == 1);     // the second step() call
  REQUIRE(state.first_nonfinite_segment == 1);  // the first tensor holding inf/NaN: layer1.bias
  REQUIRE(std::isnan(sgd.segment_grad_norms()[1]));
  REQUIRE(std::isinf(sgd.segment_grad_norms()[2]));
  // a later good step clears the per-step flags but keeps the first occurrence
  write_grads(parameters, make_grads(parameters, 2, 1, GradPattern::normal));
  REQUIRE(sgd.step().monitor_flags == 0);
  REQUIRE(sgd.step_state().first_nonfinite_segment == 1);
}

TEST_CASE("monitor: on_nonfinite = stop throws naming the step and the tensor", "[optim]") {
  NamedParameters parameters = random_parameters({{2, 2}, {3}}, 3);
  SGD sgd(parameters, with_action(NonFiniteAction::stop));
  for (int step = 0; step < 2; ++step) {
    write_grads(parameters, make_grads(parameters, step, 1, GradPattern::normal));
    sgd.step();
  }
  auto grads = make_grads(parameters, 2, 1, GradPattern::normal);
  grads[0][3] = -INFINITY;
  write_grads(parameters, grads);
  REQUIRE_THROWS_AS(sgd.step(), RuntimeFailure);
  try {
    sgd.step();
  } catch (const RuntimeFailure& failure) {
    std::string message = failure.what();
    CHECK(message.find("layer0.weight") != std::string::npos);
    CHECK(message.find("step 3") != std::string::npos);  // first seen at the third call
  }
}

TEST_CASE("monitor: on_nonfinite = warn applies the step and then reports the non-finite parameter", "[optim]") {
  NamedParameters parameters = random_parameters({{2, 2}, {3}}, 4);
  SGD sgd(parameters, with_action(NonFiniteAction::warn));
  auto grads = make_grads(parameters, 0, 1, GradPattern::normal);
  grads[1][0] = NAN;
  write_grads(parameters, grads);
  LogCapture capture;
  const StepState& state = sgd.step();
  REQUIRE(state.step == 1);
  REQUIRE(std::isnan(parameters[1].second.to_vector<float>()[0]));
  REQUIRE((state.monitor_flags & kNonFiniteGrad) != 0);
  REQUIRE((state.monitor_flags & kNonFiniteParam) != 0);
  REQUIRE(state.first_nonfinite_segment == 1);
  REQUIRE(capture.text().find("layer1.bias") != std::string::npos);
}

TEST_CASE("monitor: the single-pass and check-first CPU steps give the two-pass step's bits", "[optim]") {
  // warn without clipping or loss scaling sums the gradients inside the update pass (single pass); skip
  // without them first only checks that the gradients are finite, then does the same (check first); a
  // clipping bound too large to act still needs the norm before the update, so it sums the gradients in a
  // pass of their own first (two passes). With finite gradients all three must give the same parameters,
  // states and norms.
  auto bits = [](float x) {
    uint32_t b;
    std::memcpy(&b, &x, sizeof(b));
    return b;
  };
  const std::vector<MonitorOptions> monitors = {MonitorOptions().on_nonfinite(NonFiniteAction::warn),
                                                MonitorOptions().on_nonfinite(NonFiniteAction::skip),
                                                MonitorOptions().on_nonfinite(NonFiniteAction::skip)};
  for (const std::string& name : builtin_optimizer_names()) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      INFO(name << " with " << dtype_name(dtype) << " states");
      std::vector<std::vector<std::vector<float>>> params(monitors.size());
      std::vector<std::vector<uint32_t>> norms(monitors.size()), segment_norms(monitors.size());
      for (size_t run = 0; run < monitors.size(); ++run) {
        // Several chunks with ragged tails, a tiny tensor, fp16 blocks that do not divide the chunks.
        NamedParameters parameters = random_parameters({{333, 61}, {7}, {40003}}, 21);
        OptimizerOptions options = OptimizerOptions(1e-3).state_dtype(dtype).monitor(monitors[run]);
        if (run == 2) options.max_grad_norm(1e30);  // clipping on, never acting: the two-pass step
        auto optimizer = make_optimizer(name, parameters, options);
        for (int step = 0; step < 4; ++step) {
          write_grads(parameters, make_grads(parameters, step, 9, GradPattern::mixed));
          norms[run].push_back(bits(optimizer->step().grad_norm));
          for (double norm : optimizer->segment_grad_norms())
            segment_norms[run].push_back(bits(static_cast<float>(norm)));
        }
        for (const auto& entry : parameters) params[run].push_back(entry.second.to_vector<float>());
      }
      for (size_t run = 1; run < monitors.size(); ++run) {
        INFO("run " << run << " against the single-pass run");
        REQUIRE(norms[run] == norms[0]);
        REQUIRE(segment_norms[run] == segment_norms[0]);
        for (size_t t = 0; t < params[0].size(); ++t) {
          INFO("tensor " << t);
          REQUIRE(std::memcmp(params[run][t].data(), params[0][t].data(), params[0][t].size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("monitor: a check-first step skips on a non-finite gradient and reports the two-pass step's norms",
          "[optim]") {
  // skip without clipping checks the gradients first, reading each chunk's quarters side by side; one
  // non-finite value anywhere in the last tensor (each quarter, the tail past them) makes it skip the step
  // with nothing changed, and report the same norms and tensor as the two-pass step (clipping on).
  for (const int64_t position : {int64_t{0}, int64_t{1250}, int64_t{2501}, int64_t{3751}, int64_t{5002}}) {
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
      INFO("value " << bad << " at " << position);
      std::vector<std::vector<uint32_t>> segment_norms(2);
      for (int run = 0; run < 2; ++run) {
        NamedParameters parameters = random_parameters({{300, 100}, {5003}}, 23);
        OptimizerOptions options = OptimizerOptions(1e-3).monitor(MonitorOptions().on_nonfinite(NonFiniteAction::skip));
        if (run == 1) options.max_grad_norm(1e30);
        auto optimizer = make_optimizer("adam", parameters, options);
        write_grads(parameters, make_grads(parameters, 0, 3, GradPattern::normal));
        optimizer->step();
        const std::vector<float> before = parameters[1].second.to_vector<float>();
        auto grads = make_grads(parameters, 1, 3, GradPattern::normal);
        grads[1][static_cast<size_t>(position)] = bad;
        write_grads(parameters, grads);
        LogCapture capture;
        const StepState& state = optimizer->step();
        INFO("run " << run);
        REQUIRE(state.step == 1);  // skipped: the applied-step count stays
        REQUIRE(std::memcmp(parameters[1].second.to_vector<float>().data(), before.data(), before.size() * 4) == 0);
        REQUIRE((state.monitor_flags & kNonFiniteGrad) != 0);
        REQUIRE(state.first_nonfinite_segment == 1);
        REQUIRE(!std::isfinite(state.grad_norm));
        REQUIRE(capture.text().find("non-finite (inf/NaN) gradient in tensor 'layer1.bias': step skipped") !=
                std::string::npos);
        for (double norm : optimizer->segment_grad_norms()) {
          float value = static_cast<float>(norm);
          uint32_t b;
          std::memcpy(&b, &value, sizeof(b));
          segment_norms[static_cast<size_t>(run)].push_back(b);
        }
      }
      REQUIRE(segment_norms[0] == segment_norms[1]);
    }
  }
}

TEST_CASE("monitor: a single-pass step with a NaN gradient names its tensor and applies the update", "[optim]") {
  // Adam over several chunks: the NaN sits in the last tensor, so earlier chunks' sums are finite.
  NamedParameters parameters = random_parameters({{300, 100}, {5000}}, 22);
  auto optimizer = make_optimizer("adam", parameters, with_action(NonFiniteAction::warn));
  auto grads = make_grads(parameters, 0, 3, GradPattern::normal);
  grads[1][4321] = NAN;
  write_grads(parameters, grads);
  LogCapture capture;
  const StepState& state = optimizer->step();
  REQUIRE(state.step == 1);
  REQUIRE(std::isnan(state.grad_norm));
  REQUIRE(std::isfinite(optimizer->segment_grad_norms()[0]));
  REQUIRE(std::isnan(optimizer->segment_grad_norms()[1]));
  REQUIRE(std::isnan(parameters[1].second.to_vector<float>()[4321]));
  REQUIRE(std::isfinite(parameters[1].second.to_vector<float>()[4320]));
  REQUIRE((state.monitor_flags & kNonFiniteGrad) != 0);
  REQUIRE(state.first_nonfinite_segment == 1);
  REQUIRE(capture.text().find("non-finite (inf/NaN) gradient in tensor 'layer1.bias'") != std::string::npos);
  REQUIRE(capture.text().find("applied anyway") != std::string::npos);
}

TEST_CASE("monitor: parameters overflowing to inf are caught after the update", "[optim]") {
  for (NonFiniteAction action : {NonFiniteAction::warn, NonFiniteAction::stop}) {
    NamedParameters parameters = random_parameters({{2, 2}, {3}}, 5);
    SGD sgd(parameters, OptimizerOptions(1e30).monitor(MonitorOptions().on_nonfinite(action)));
    write_grads(parameters, {{0, 0, 0, 0}, {0, 1e10, 0}});  // finite gradient, update -1e40 overflows
    if (action == NonFiniteAction::stop) {
      REQUIRE_THROWS_WITH(sgd.step(), Catch::Contains("layer1.bias") && Catch::Contains("became non-finite"));
    } else {
      LogCapture capture;
      const StepState& state = sgd.step();
      REQUIRE((state.monitor_flags & kNonFiniteParam) != 0);
      REQUIRE((state.monitor_flags & kNonFiniteGrad) == 0);
      REQUIRE(state.first_nonfinite_segment == 1);
      REQUIRE(capture.text().find("became non-finite") != std::string::npos);
    }
  }
}

TEST_CASE("monitor: with loss scaling an overflow is skipped whatever the action but stop still stops", "[optim]") {
  NamedParameters parameters = random_parameters({{2, 2}}, 6);
  SGD sgd(parameters, with_action(NonFiniteAction::warn).loss_scaling(LossScalingOptions().enabled(true)));
  write_grads(parameters, {{1, INFINITY, 1, 1}});
  std::vector<std::vector<double>> before = values_of(parameters);
  REQUIRE(sgd.step().skipped_steps == 1);
  REQUIRE(values_of(parameters) == before);
  REQUIRE(sgd.step_state().loss_scale == 32768.0f);
  REQUIRE(parse_nonfinite_action("skip") == NonFiniteAction::skip);
  REQUIRE_THROWS_WITH(parse_nonfinite_action("explode"), Catch::Contains("warn, skip, stop"));
}
