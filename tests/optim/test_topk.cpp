// Tests of src/optim/topk.cpp: achieved density on several distributions, the exact fallback, conservation
// of the gradient sum (error feedback, momentum correction, lr compensation), momentum-factor masking,
// determinism across thread counts, the warm-up schedule and option validation.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "opsnn/optim/topk.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;

namespace {

struct ThreadCount {
  int saved = omp_get_max_threads();
  explicit ThreadCount(int threads) { omp_set_num_threads(threads); }
  ~ThreadCount() { omp_set_num_threads(saved); }
};

std::vector<float> gaussian(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<float> result(n);
  for (float& x : result) x = value(rng);
  return result;
}

// Student-t with 1.5 degrees of freedom: heavy tails, a few values dominate.
std::vector<float> heavy_tailed(std::mt19937_64& rng, size_t n) {
  std::student_t_distribution<float> value(1.5f);
  std::vector<float> result(n);
  for (float& x : result) x = value(rng);
  return result;
}

// 70% exact zeros, the rest drawn from three values: massive ties.
std::vector<float> ties_and_zeros(std::mt19937_64& rng, size_t n) {
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<float> result(n);
  for (float& x : result) {
    int r = pick(rng);
    x = r < 7 ? 0.0f : static_cast<float>(r - 6) * 0.25f;
  }
  return result;
}

// Small multiples of 2^-8: every sum the tests form is exact in fp32.
std::vector<float> dyadic(std::mt19937_64& rng, size_t n) {
  std::uniform_int_distribution<int> pick(-64, 64);
  std::vector<float> result(n);
  for (float& x : result) x = static_cast<float>(pick(rng)) / 256.0f;
  return result;
}

int64_t count_nonzero(const std::vector<float>& values) {
  int64_t count = 0;
  for (float x : values) count += x != 0.0f;
  return count;
}

}  // namespace

TEST_CASE("top-k achieves the target density within 20% on several distributions", "[sparse]") {
  const int64_t n = 200'000;
  using Distribution = std::vector<float> (*)(std::mt19937_64&, size_t);
  const std::pair<const char*, Distribution> distributions[] = {
      {"gaussian", gaussian}, {"heavy-tailed", heavy_tailed}, {"ties and zeros", ties_and_zeros}};
  for (auto [name, generate] : distributions) {
    for (double density : {0.1, 0.01, 0.001}) {
      DYNAMIC_SECTION(name << " at density " << density) {
        TopKOptions options;
        options.density = density;
        TopKSparsifier sparsifier(n, options);
        std::mt19937_64 rng(42);
        for (int step = 0; step < 3; ++step) {
          std::vector<float> gradient = generate(rng, n);
          TopKStepReport report = sparsifier.sparsify(gradient.data(), 0);
          REQUIRE(report.target_density == density);
          REQUIRE(report.target_count == std::llround(density * n));
          REQUIRE(report.achieved_density == Approx(density).epsilon(0.2));
          REQUIRE(report.selected_count == static_cast<int64_t>(sparsifier.selected_indices().size()));
          // Sent values are exactly the non-zeros written back (a sent value of 0 cannot occur: score > 0).
          REQUIRE(count_nonzero(gradient) == report.selected_count);
          const auto& indices = sparsifier.selected_indices();
          const auto& values = sparsifier.selected_values();
          int64_t mismatches = 0;
          for (size_t s = 0; s < indices.size(); ++s) {
            mismatches += gradient[indices[s]] != values[s];
            mismatches += s > 0 && indices[s] <= indices[s - 1];  // ascending, unique
          }
          REQUIRE(mismatches == 0);
        }
      }
    }
  }
}

TEST_CASE("top-k selects the largest scores, exact selection breaks ties by lowest index", "[sparse]") {
  // variance_beta = 0: score = |g| * |g| on the first step, so the order is that of |g|.
  TopKOptions options;
  options.density = 0.3;
  options.variance_beta = 0.0;
  TopKSparsifier sparsifier(10, options);
  std::vector<float> gradient = {0.5f, -3.0f, 1.0f, 1.0f, 0.0f, 2.0f, 1.0f, -0.25f, 1.0f, 0.0f};
  TopKStepReport report = sparsifier.sparsify(gradient.data(), 0);
  REQUIRE(report.exact_selection);  // 10 elements: a sample would be most of them
  REQUIRE(report.selected_count == 3);
  REQUIRE(sparsifier.selected_indices() == std::vector<int64_t>{1, 2, 5});  // the 1.0 tie goes to index 2
  REQUIRE(gradient == std::vector<float>{0, -3, 1, 0, 0, 2, 0, 0, 0, 0});
  REQUIRE(sparsifier.state().accumulator == std::vector<float>{0.5f, 0, 0, 1, 0, 0, 1, -0.25f, 1, 0});
}

TEST_CASE("top-k falls back to exact selection where the sample misleads", "[sparse]") {
  const int64_t n = 100'000;
  TopKOptions options;
  options.density = 0.01;
  options.variance_beta = 0.0;
  TopKSparsifier sparsifier(n, options);
  const int64_t sample_size = sparsifier.sample_size_for(options.density);
  REQUIRE(sample_size == 25600);  // min_sample_selected / density beats 1% of n

  SECTION("values at exactly the sampled positions dominate") {
    // Only the sampled positions (a quarter of the array) hold large values, a few of them larger still:
    // the sample's 1% threshold lands on a value far rarer, or far more common, in the whole array.
    std::vector<float> gradient(n, 0.001f);
    for (int64_t d = 0; d < sample_size; ++d) gradient[TopKSparsifier::sample_position(options.seed, 0, d, n)] = 5.0f;
    for (int64_t i = 0; i < n; i += 97) gradient[i] += 1.0f;
    TopKStepReport report = sparsifier.sparsify(gradient.data(), 0);
    REQUIRE(report.sample_size == sample_size);
    REQUIRE(report.exact_selection);
    REQUIRE(report.selected_count == 1000);
  }
  SECTION("a tie at the sampled threshold covers half the array") {
    std::vector<float> gradient(n, 1.0f);
    for (int64_t i = 0; i < n; i += 2) gradient[i] = 0.5f;
    TopKStepReport report = sparsifier.sparsify(gradient.data(), 0);
    REQUIRE(report.exact_selection);
    REQUIRE(report.selected_count == 1000);
    // The quota of ties goes to the lowest indices: the odd positions 1, 3, ..., 1999.
    REQUIRE(sparsifier.selected_indices().front() == 1);
    REQUIRE(sparsifier.selected_indices().back() == 1999);
  }
  SECTION("a representative sample is kept") {
    std::mt19937_64 rng(9);
    std::vector<float> gradient = gaussian(rng, n);
    TopKStepReport report = sparsifier.sparsify(gradient.data(), 0);
    REQUIRE_FALSE(report.exact_selection);
    REQUIRE(report.threshold > 0.0f);
    REQUIRE(report.achieved_density == Approx(0.01).epsilon(0.2));
  }
  SECTION("fewer non-zero scores than k: all of them are sent") {
    std::vector<float> gradient(n, 0.0f);
    for (int64_t i = 0; i < 300; ++i) gradient[i * 300] = 1.0f + static_cast<float>(i);
    TopKStepReport report = sparsifier.sparsify(gradient.data(), 0);
    REQUIRE(report.exact_selection);
    REQUIRE(report.selected_count == 300);
  }
}

TEST_CASE("error feedback conserves the gradient sum exactly", "[sparse]") {
  const int64_t n = 5000;
  TopKOptions options;
  options.density = 0.05;
  TopKSparsifier sparsifier(n, options);
  std::mt19937_64 rng(17);
  std::vector<float> gradient_sum(n, 0.0f), sent_sum(n, 0.0f);
  for (int step = 0; step < 20; ++step) {
    std::vector<float> gradient = dyadic(rng, n);
    for (int64_t i = 0; i < n; ++i) gradient_sum[i] += gradient[i];
    sparsifier.sparsify(gradient.data(), 0);
    for (int64_t i = 0; i < n; ++i) sent_sum[i] += gradient[i];
  }
  const std::vector<float>& residual = sparsifier.state().accumulator;
  int64_t ever_sent = 0, lost = 0;
  for (int64_t i = 0; i < n; ++i) {
    lost += sent_sum[i] + residual[i] != gradient_sum[i];  // dyadic values: exact in fp32
    ever_sent += sent_sum[i] != 0.0f;
  }
  REQUIRE(lost == 0);
  REQUIRE(ever_sent > n / 4);  // many elements waited and were sent later
}

TEST_CASE("momentum correction accumulates velocity, masking zeroes sent positions, nothing is lost", "[sparse]") {
  const int64_t n = 4000;
  TopKOptions options;
  options.density = 0.02;
  options.momentum_correction = true;
  options.momentum = 0.5;  // with dyadic gradients every velocity and sum below is exact in fp32
  TopKSparsifier sparsifier(n, options);
  std::mt19937_64 rng(23);
  std::vector<double> velocity_sum(n, 0.0), sent_sum(n, 0.0);
  int64_t masked = 0;
  for (int step = 0; step < 8; ++step) {
    std::vector<float> gradient = dyadic(rng, n);
    const std::vector<float> raw = gradient;
    const std::vector<float> velocity_before = sparsifier.state().velocity;
    const std::vector<float> accumulator_before = sparsifier.state().accumulator;
    sparsifier.sparsify(gradient.data(), 0);
    const TopKState& state = sparsifier.state();
    std::vector<bool> sent(n, false);
    for (int64_t i : sparsifier.selected_indices()) sent[i] = true;
    int64_t wrong_sent = 0, wrong_kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float velocity = 0.5f * velocity_before[i] + raw[i];   // DGC eq. 5: u = m*u + g
      const float accumulated = accumulator_before[i] + velocity;  // v_acc += u
      velocity_sum[i] += velocity;
      sent_sum[i] += gradient[i];
      if (sent[i]) {
        // momentum-factor masking: velocity and accumulator restart from 0 where sent
        wrong_sent += gradient[i] != accumulated || state.velocity[i] != 0.0f || state.accumulator[i] != 0.0f;
        masked += velocity != 0.0f;
      } else {
        wrong_kept += gradient[i] != 0.0f || state.velocity[i] != velocity || state.accumulator[i] != accumulated;
      }
    }
    REQUIRE(wrong_sent == 0);
    REQUIRE(wrong_kept == 0);
  }
  REQUIRE(masked > 0);
  int64_t lost = 0;
  for (int64_t i = 0; i < n; ++i) lost += sent_sum[i] + sparsifier.state().accumulator[i] != velocity_sum[i];
  REQUIRE(lost == 0);
}

TEST_CASE("lr compensation keeps sum(lr * sent) + lr * residual equal to sum(lr * g)", "[sparse]") {
  const int64_t n = 3000;
  TopKOptions options;
  options.density = 0.03;
  options.lr_compensation = true;
  TopKSparsifier sparsifier(n, options);
  std::mt19937_64 rng(31);
  std::vector<double> dense_displacement(n, 0.0), sparse_displacement(n, 0.0);
  float lr = 0.0f;
  for (int step = 0; step < 12; ++step) {
    lr = step < 6 ? 0.01f * static_cast<float>(step + 1) : 0.06f / static_cast<float>(step - 4);  // up, then down
    std::vector<float> gradient = gaussian(rng, n);
    for (int64_t i = 0; i < n; ++i) dense_displacement[i] += static_cast<double>(lr) * gradient[i];
    float previous = sparsifier.state().previous_lr;
    TopKStepReport report = sparsifier.sparsify(gradient.data(), 0, 1.0f, lr);
    REQUIRE(report.accumulator_lr_factor == (step == 0 ? 1.0f : previous / lr));
    for (int64_t i = 0; i < n; ++i) sparse_displacement[i] += static_cast<double>(lr) * gradient[i];
  }
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double waiting = static_cast<double>(lr) * sparsifier.state().accumulator[i];
    worst = std::max(worst, std::fabs(sparse_displacement[i] + waiting - dense_displacement[i]));
  }
  REQUIRE(worst < 1e-6);  // displacements are about 0.1: fp32 rounding of the rescaled accumulator only
  REQUIRE_THROWS_AS(sparsifier.sparsify(std::vector<float>(n).data(), 0, 1.0f, 0.0f), ConfigError);
}

TEST_CASE("top-k masks are deterministic and independent of the thread count", "[sparse]") {
  const int64_t n = 300'000;  // several blocks
  for (bool ties : {false, true}) {
    DYNAMIC_SECTION((ties ? "exact path (ties)" : "sampled path")) {
      TopKOptions options;
      options.density = 0.01;
      options.momentum_correction = ties;
      std::vector<std::vector<float>> inputs;
      std::mt19937_64 rng(99);
      for (int step = 0; step < 3; ++step) inputs.push_back(ties ? ties_and_zeros(rng, n) : heavy_tailed(rng, n));
      auto run = [&](int threads) {
        ThreadCount count(threads);
        TopKSparsifier sparsifier(n, options);
        std::vector<std::vector<float>> outputs;
        std::vector<int64_t> indices;
        int exact_steps = 0;
        for (const auto& input : inputs) {
          outputs.push_back(input);
          exact_steps += sparsifier.sparsify(outputs.back().data(), 0).exact_selection;
          indices.insert(indices.end(), sparsifier.selected_indices().begin(), sparsifier.selected_indices().end());
        }
        REQUIRE((ties ? exact_steps > 0 : exact_steps < 3));
        return std::make_tuple(outputs, indices, sparsifier.state().accumulator);
      };
      auto reference = run(1);
      for (int threads : {1, 2, 3}) {
        auto other = run(threads);
        REQUIRE(std::get<1>(other) == std::get<1>(reference));
        for (size_t s = 0; s < inputs.size(); ++s) {
          REQUIRE(std::memcmp(std::get<0>(other)[s].data(), std::get<0>(reference)[s].data(), n * sizeof(float)) == 0);
        }
        REQUIRE(std::memcmp(std::get<2>(other).data(), std::get<2>(reference).data(), n * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("density warm-up schedules", "[sparse]") {
  TopKOptions dgc;
  dgc.density = 0.001;
  dgc.warmup_densities = {0.25, 0.0625, 0.015625, 0.00390625};
  const double expected[] = {0.25, 0.0625, 0.015625, 0.00390625, 0.001, 0.001};
  for (int64_t epoch = 0; epoch < 6; ++epoch) REQUIRE(dgc.density_for_epoch(epoch) == expected[epoch]);

  TopKOptions exponential;
  exponential.density = 0.001;
  exponential.warmup_start_density = 0.25;
  exponential.warmup_epochs = 4;
  REQUIRE(exponential.density_for_epoch(0) == 0.25);
  REQUIRE(exponential.density_for_epoch(1) == Approx(0.25 * std::pow(0.004, 0.25)));  // 6.29%
  REQUIRE(exponential.density_for_epoch(2) == Approx(0.25 * std::sqrt(0.004)));       // 1.58%
  REQUIRE(exponential.density_for_epoch(3) == Approx(0.25 * std::pow(0.004, 0.75)));  // 0.40%
  REQUIRE(exponential.density_for_epoch(4) == 0.001);
  REQUIRE(exponential.density_for_epoch(100) == 0.001);
  REQUIRE_THROWS_AS(exponential.density_for_epoch(-1), Error);

  // sparsify() follows the schedule: the count sent shrinks with the epoch.
  TopKSparsifier sparsifier(100'000, dgc);
  std::mt19937_64 rng(5);
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    std::vector<float> gradient = gaussian(rng, 100'000);
    TopKStepReport report = sparsifier.sparsify(gradient.data(), epoch);
    REQUIRE(report.target_density == expected[epoch]);
    REQUIRE(report.achieved_density == Approx(expected[epoch]).epsilon(0.2));
  }
}

TEST_CASE("density 1 sends everything, the multiplier scales the gradient", "[sparse]") {
  TopKOptions options;
  options.density = 1.0;
  TopKSparsifier sparsifier(5, options);
  std::vector<float> gradient = {1, -2, 0, 4, 8};
  TopKStepReport report = sparsifier.sparsify(gradient.data(), 0, 0.5f);
  REQUIRE(gradient == std::vector<float>{0.5f, -1, 0, 2, 4});
  REQUIRE(report.selected_count == 5);
  REQUIRE(report.achieved_density == 1.0);
  REQUIRE(sparsifier.state().accumulator == std::vector<float>(5, 0.0f));
}

TEST_CASE("top-k options are validated, naming the setting", "[sparse]") {
  auto rejects = [](auto change, const char* setting) {
    TopKOptions options;
    change(options);
    REQUIRE_THROWS_AS(options.validate(), ConfigError);
    REQUIRE_THROWS_WITH(TopKSparsifier(10, options), Catch::Contains(setting));
  };
  rejects([](TopKOptions& o) { o.density = 0.0; }, "topk.density");
  rejects([](TopKOptions& o) { o.density = 1.5; }, "topk.density");
  rejects([](TopKOptions& o) { o.density = std::nan(""); }, "topk.density");
  rejects([](TopKOptions& o) { o.sample_fraction = 0.0; }, "topk.sample_fraction");
  rejects([](TopKOptions& o) { o.sample_fraction = 2.0; }, "topk.sample_fraction");
  rejects([](TopKOptions& o) { o.variance_beta = 1.0; }, "topk.variance_beta");
  rejects([](TopKOptions& o) { o.variance_beta = -0.1; }, "topk.variance_beta");
  rejects([](TopKOptions& o) { o.momentum = 1.0; }, "topk.momentum");
  rejects([](TopKOptions& o) { o.tolerance = -0.1; }, "topk.tolerance");
  rejects([](TopKOptions& o) { o.min_sample_selected = 0; }, "topk.min_sample_selected");
  rejects([](TopKOptions& o) { o.warmup_densities = {0.25, 0.0}; }, "topk.warmup_densities[1]");
  rejects([](TopKOptions& o) { o.warmup_epochs = -1; }, "topk.warmup_epochs");
  rejects([](TopKOptions& o) { o.warmup_start_density = 0.0; }, "topk.warmup_start_density");
  rejects(
      [](TopKOptions& o) {
        o.warmup_densities = {0.25};
        o.warmup_epochs = 2;
      },
      "not both");
  TopKOptions good;
  good.validate();
  REQUIRE_THROWS_AS(TopKSparsifier(0, good), ShapeError);
  TopKSparsifier sparsifier(6, good);
  REQUIRE_THROWS_AS(sparsifier.sparsify(Tensor::zeros({5}), 0), ShapeError);
  REQUIRE_THROWS_AS(sparsifier.sparsify(Tensor::zeros({6}, DType::f64), 0), TypeError);
  Tensor gradient = Tensor::from_vector<float>({0, 0, 9, 0, 0, 1}, {2, 3});
  TopKStepReport report = sparsifier.sparsify(gradient, 0);
  REQUIRE(report.selected_count == 1);
  REQUIRE(gradient.to_vector<float>() == std::vector<float>{0, 0, 9, 0, 0, 0});
}

TEST_CASE("a saved top-k state resumes bit-identically, a mismatched one is refused", "[sparse]") {
  const int64_t n = 20'000;
  TopKOptions options;
  options.density = 0.01;
  options.momentum_correction = true;
  TopKSparsifier original(n, options);
  std::mt19937_64 rng(77);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> gradient = gaussian(rng, n);
    original.sparsify(gradient.data(), 0);
  }
  TopKSparsifier resumed(n, options);
  resumed.load_state(original.state());
  std::vector<float> gradient = gaussian(rng, n), copy = gradient;
  original.sparsify(gradient.data(), 0);
  resumed.sparsify(copy.data(), 0);
  REQUIRE(std::memcmp(gradient.data(), copy.data(), n * sizeof(float)) == 0);
  REQUIRE(resumed.selected_indices() == original.selected_indices());
  REQUIRE(resumed.state().steps == 4);

  TopKState wrong = original.state();
  wrong.velocity.clear();
  REQUIRE_THROWS_AS(resumed.load_state(wrong), ShapeError);
}
