// Tests of the CUDA top-k sparsifier (src/optim/cuda/topk.cu through TopKSparsifier on a CUDA device)
// against the CPU sparsifier: over many steps on random data, the same reports, sparse gradient, (index,
// value) pairs and state bit for bit, for the sampled threshold and the exact fallback, ties, momentum
// correction, lr compensation, density 1, zero and non-finite gradients, odd sizes across several blocks.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "opsnn/core/storage.h"
#include "opsnn/optim/topk.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;

namespace {

const Device kGpu{DeviceType::cuda, 0};

uint32_t bits_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

// Elements whose bits differ (NaN == NaN: payloads differ between x86 and CUDA arithmetic).
int64_t mismatches(const std::vector<float>& actual, const std::vector<float>& expected, const char* what) {
  REQUIRE(actual.size() == expected.size());
  int64_t count = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if ((std::isnan(actual[i]) && std::isnan(expected[i])) || bits_of(actual[i]) == bits_of(expected[i])) continue;
    if (count++ == 0) UNSCOPED_INFO(what << " element " << i << ": GPU " << actual[i] << " vs CPU " << expected[i]);
  }
  return count;
}

enum class Data { gaussian, dyadic_ties, sparse_zeros, with_nan };

std::vector<float> gradient_for(std::mt19937_64& rng, int64_t n, Data data, int step) {
  std::vector<float> g(static_cast<size_t>(n), 0.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-4, 4);
  for (int64_t i = 0; i < n; ++i) {
    switch (data) {
      case Data::gaussian:
        g[i] = normal(rng);
        break;
      case Data::dyadic_ties:
        g[i] = 0.25f * static_cast<float>(small(rng));
        break;  // many equal scores
      case Data::sparse_zeros:
        g[i] = i % 97 == step % 97 ? normal(rng) : 0.0f;
        break;
      case Data::with_nan:
        g[i] = normal(rng);
        break;
    }
  }
  if (data == Data::with_nan && step == 2) {
    g[static_cast<size_t>(n / 3)] = std::numeric_limits<float>::quiet_NaN();
    g[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::infinity();
  }
  return g;
}

struct Case {
  const char* name;
  int64_t n;
  TopKOptions options;
  Data data;
  int steps;
};

}  // namespace

TEST_CASE("CUDA top-k selects exactly what the CPU selects, step after step", "[cuda][sparse]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the [cuda] top-k tests did not run");
    return;
  }
  std::vector<Case> cases;
  auto add = [&](const char* name, int64_t n, double density, Data data, int steps, auto&& tweak) {
    Case c{name, n, TopKOptions{}, data, steps};
    c.options.density = density;
    c.options.seed = 1234 + cases.size();
    tweak(c.options);
    cases.push_back(c);
  };
  auto none = [](TopKOptions&) {};
  add("sampled threshold, several blocks, odd n", 200'003, 0.01, Data::gaussian, 6, none);
  add("exact selection (small n), error feedback", 5'001, 0.05, Data::gaussian, 10, none);
  add("ties across blocks (dyadic values)", 140'001, 0.02, Data::dyadic_ties, 8, none);
  add("ties, exact fallback forced by a zero tolerance", 70'003, 0.03, Data::dyadic_ties, 6,
      [](TopKOptions& o) { o.tolerance = 0.0; });
  add("momentum correction", 131'075, 0.01, Data::gaussian, 8, [](TopKOptions& o) {
    o.momentum_correction = true;
    o.momentum = 0.9;
  });
  add("lr compensation and a density warm-up", 66'000, 0.01, Data::gaussian, 8, [](TopKOptions& o) {
    o.lr_compensation = true;
    o.warmup_densities = {0.25, 0.0625};
  });
  add("mostly zero gradients: fewer candidates than k", 9'999, 0.05, Data::sparse_zeros, 6, none);
  add("density 1 sends everything", 1'001, 1.0, Data::gaussian, 3,
      [](TopKOptions& o) { o.momentum_correction = true; });
  add("non-finite values", 80'001, 0.01, Data::with_nan, 5, none);
  add("one element", 1, 0.5, Data::gaussian, 3, none);

  int64_t sampled_steps = 0, exact_steps = 0;
  for (const Case& c : cases) {
    INFO(c.name);
    TopKSparsifier cpu(c.n, c.options);
    TopKSparsifier gpu(c.n, c.options, kGpu);
    REQUIRE(gpu.device() == kGpu);
    std::mt19937_64 rng(static_cast<uint64_t>(c.n));
    for (int step = 0; step < c.steps; ++step) {
      INFO("step " << step);
      std::vector<float> host_gradient = gradient_for(rng, c.n, c.data, step);
      Tensor device_gradient = Tensor::from_vector(host_gradient, {c.n}, DType::f32, kGpu);
      const int64_t epoch = step / 2;
      const float lr = 0.1f / static_cast<float>(1 + step);
      const float multiplier = step % 3 == 0 ? 1.0f : 0.5f;
      TopKStepReport expected = cpu.sparsify(host_gradient.data(), epoch, multiplier, lr);
      TopKStepReport actual = gpu.sparsify(device_gradient, epoch, multiplier, lr);
      REQUIRE(actual.target_count == expected.target_count);
      REQUIRE(actual.sample_size == expected.sample_size);
      REQUIRE(actual.exact_selection == expected.exact_selection);
      REQUIRE(actual.selected_count == expected.selected_count);
      REQUIRE(bits_of(actual.threshold) == bits_of(expected.threshold));
      REQUIRE(actual.accumulator_lr_factor == expected.accumulator_lr_factor);
      (expected.exact_selection ? exact_steps : sampled_steps) += 1;

      REQUIRE(mismatches(device_gradient.to_vector<float>(), host_gradient, "sparse gradient") == 0);
      REQUIRE(gpu.selected_indices() == cpu.selected_indices());
      REQUIRE(mismatches(gpu.selected_values(), cpu.selected_values(), "selected value") == 0);
      REQUIRE(gpu.selected_indices_tensor().device() == kGpu);
      const TopKState& gpu_state = gpu.state();
      const TopKState& cpu_state = cpu.state();
      REQUIRE(mismatches(gpu_state.accumulator, cpu_state.accumulator, "accumulator") == 0);
      REQUIRE(mismatches(gpu_state.variance, cpu_state.variance, "variance") == 0);
      REQUIRE(mismatches(gpu_state.velocity, cpu_state.velocity, "velocity") == 0);
      REQUIRE(gpu_state.steps == cpu_state.steps);
    }
  }
  // Both selection paths ran.
  REQUIRE(sampled_steps > 0);
  REQUIRE(exact_steps > 0);
}

TEST_CASE("CUDA top-k state round-trips through load_state and checks devices", "[cuda][sparse]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the [cuda] top-k tests did not run");
    return;
  }
  const int64_t n = 30'001;
  TopKOptions options;
  options.density = 0.02;
  options.momentum_correction = true;
  TopKSparsifier cpu(n, options), gpu(n, options, kGpu);
  std::mt19937_64 rng(3);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g = gradient_for(rng, n, Data::gaussian, step);
    cpu.sparsify(g.data(), 0);
  }
  gpu.load_state(cpu.state());  // resume a CPU run on the GPU
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g = gradient_for(rng, n, Data::gaussian, step);
    Tensor device_gradient = Tensor::from_vector(g, {n}, DType::f32, kGpu);
    cpu.sparsify(g.data(), 0);
    gpu.sparsify(device_gradient, 0);
    REQUIRE(mismatches(device_gradient.to_vector<float>(), g, "sparse gradient") == 0);
    REQUIRE(gpu.selected_indices() == cpu.selected_indices());
  }
  REQUIRE(mismatches(gpu.state().accumulator, cpu.state().accumulator, "accumulator") == 0);
  REQUIRE_THROWS_AS(gpu.sparsify(Tensor::zeros({n}), 0), DeviceError);
  std::vector<float> host(static_cast<size_t>(n));
  REQUIRE_THROWS_AS(gpu.sparsify(host.data(), 0), DeviceError);
}
