// The CPU kernel variants (src/core/cpu_variants.h): every variant this CPU runs - the portable one on
// every machine, so CI covers the path a CPU without AVX2 takes - gives the portable variant's optimizer
// bits, half.h's fp16 conversions and the double reference's matrix products; bad OPSNN_CPU_KERNELS
// values are clear errors.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_variants.h"
#include "opsnn/core/error.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/optim/step_kernels.h"
#include "optim/optim_test_support.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;
using namespace opsnn::optim::testing;

namespace {

const cpu::CpuKernels& portable_kernels() { return cpu::select_cpu_kernels("portable"); }

// The optimizer steps of the CPU take `kernels` while this lives.
class UseStepKernels {
 public:
  explicit UseStepKernels(const cpu::CpuKernels& kernels) {
    register_fused_step_kernels(DeviceType::cpu, *kernels.step);
  }
  ~UseStepKernels() { register_fused_step_kernels(DeviceType::cpu, cpu_fused_step_kernels()); }
  UseStepKernels(const UseStepKernels&) = delete;
  UseStepKernels& operator=(const UseStepKernels&) = delete;
};

uint32_t bits_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

struct Run {
  std::vector<std::vector<float>> params;
  std::vector<uint32_t> grad_norm_bits;
};

// Steps of `name` on tensors of several chunks with ragged tails, under `kernels`.
Run run_steps(const cpu::CpuKernels& kernels, const std::string& name, const OptimizerOptions& options) {
  UseStepKernels use(kernels);
  NamedParameters parameters = random_parameters({{333, 61}, {7}, {40003}}, 11);
  auto optimizer = make_optimizer(name, parameters, options);
  Run run;
  for (int step = 0; step < 6; ++step) {
    write_grads(parameters, make_grads(parameters, step, 5, GradPattern::bounded));
    run.grad_norm_bits.push_back(bits_of(optimizer->step().grad_norm));
  }
  for (const auto& entry : parameters) run.params.push_back(entry.second.to_vector<float>());
  return run;
}

}  // namespace

TEST_CASE("CPU kernel variants: the portable one is built and the best runnable one is in use",
          "[core][cpu_variants]") {
  const auto& runnable = cpu::runnable_cpu_kernels();
  REQUIRE(!runnable.empty());
  std::string names;
  for (const cpu::CpuKernels* kernels : runnable) names += std::string(kernels->name) + " ";
  INFO("runnable variants: " << names);
  const char* request = std::getenv("OPSNN_CPU_KERNELS");
  if (request != nullptr && *request != '\0' && std::string(request) != "auto")
    REQUIRE(std::string(cpu::cpu_kernels().name) == request);
  else
    REQUIRE(&cpu::cpu_kernels() == runnable.front());
  REQUIRE(&cpu::select_cpu_kernels("auto") == runnable.front());
  REQUIRE(&cpu::select_cpu_kernels("") == runnable.front());
  if (std::string(runnable.back()->name) != "native") REQUIRE(std::string(runnable.back()->name) == "portable");
}

TEST_CASE("CPU kernel variants: unknown or unrunnable OPSNN_CPU_KERNELS values are clear errors",
          "[core][cpu_variants]") {
  REQUIRE_THROWS_AS(cpu::select_cpu_kernels("avx1024"), ConfigError);
  REQUIRE_THROWS_WITH(cpu::select_cpu_kernels("avx1024"), Catch::Contains("OPSNN_CPU_KERNELS=avx1024") &&
                                                              Catch::Contains("unknown") && Catch::Contains("auto"));
  REQUIRE_THROWS_AS(cpu::select_cpu_kernels("AVX2"), ConfigError);  // names are lower case
  for (const char* name : {"portable", "avx2", "avx512", "native"}) {
    bool runnable = false;
    for (const cpu::CpuKernels* kernels : cpu::runnable_cpu_kernels()) runnable |= std::string(kernels->name) == name;
    if (runnable) {
      REQUIRE(std::string(cpu::select_cpu_kernels(name).name) == name);
    } else {
      INFO(name);
      REQUIRE_THROWS_AS(cpu::select_cpu_kernels(name), ConfigError);  // not built here, or needs what this CPU lacks
    }
  }
}

TEST_CASE("CPU kernel variants give the portable variant's optimizer bits", "[core][cpu_variants][optim]") {
  struct Case {
    std::string name;
    OptimizerOptions options;
  };
  const DType dtype = GENERATE(DType::f32, DType::bf16, DType::f16);
  std::vector<Case> cases = {
      {"adam", OptimizerOptions(1e-3).state_dtype(dtype)},
      {"adamw", OptimizerOptions(1e-3).weight_decay(0.01).amsgrad(true).max_grad_norm(5.0).state_dtype(dtype)},
      {"sgd", OptimizerOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-4).state_dtype(dtype)},
      {"sgd", OptimizerOptions(0.05)},
      {"lamb", OptimizerOptions(1e-3).weight_decay(0.01).state_dtype(dtype)},
      {"lion", OptimizerOptions(1e-4).state_dtype(dtype)},
      {"adagrad", OptimizerOptions(1e-2).max_grad_norm(1.0).state_dtype(dtype)},
  };
  for (const Case& c : cases) {
    const Run expected = run_steps(portable_kernels(), c.name, c.options);
    for (const cpu::CpuKernels* kernels : cpu::runnable_cpu_kernels()) {
      INFO(c.name << " with " << dtype_name(dtype) << " states, variant " << kernels->name);
      const Run actual = run_steps(*kernels, c.name, c.options);
      REQUIRE(actual.grad_norm_bits == expected.grad_norm_bits);
      for (size_t t = 0; t < expected.params.size(); ++t) {
        size_t mismatches = 0;
        for (size_t i = 0; i < expected.params[t].size(); ++i)
          mismatches += bits_of(actual.params[t][i]) != bits_of(expected.params[t][i]);
        INFO("tensor " << t);
        REQUIRE(mismatches == 0);
      }
    }
  }
}

TEST_CASE("CPU kernel variants: fp16 block conversions agree with half.h bit for bit", "[core][cpu_variants][optim]") {
  std::vector<float> values;
  for (uint32_t bits = 0; bits < 0xffffffffu - 0x10000u; bits += 0x2001u) {  // sweeps all exponents, mantissas varied
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    if (!std::isnan(x)) values.push_back(x);
  }
  for (float x : {65504.0f, 65520.0f, 65519.99f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 6.1035156e-5f, -0.0f,
                  INFINITY, -INFINITY})
    values.push_back(x);
  REQUIRE(values.size() > 100000);
  for (const cpu::CpuKernels* kernels : cpu::runnable_cpu_kernels()) {
    INFO("variant " << kernels->name << ", hardware (F16C) conversion: " << kernels->hardware_half);
    std::vector<Half> converted(values.size());
    kernels->float_to_half(values.data(), converted.data(), static_cast<int64_t>(values.size()));
    std::vector<float> back(values.size());
    kernels->half_to_float(converted.data(), back.data(), static_cast<int64_t>(values.size()));
    size_t mismatches = 0, first = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const bool same = converted[i].bits == float_to_half_bits(values[i]) &&
                        bits_of(back[i]) == bits_of(half_bits_to_float(converted[i].bits));
      if (!same && mismatches++ == 0) first = i;
    }
    INFO(mismatches << " mismatches of " << values.size() << ", the first for " << values[first]);
    REQUIRE(mismatches == 0);
  }
}

TEST_CASE("CPU kernel variants: strided and transposed matrix products match the double reference",
          "[core][cpu_variants]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int64_t m = 37, n = 29, k = 45, pad = 3;  // odd sizes, rows padded: strides differ from widths
  for (const cpu::CpuKernels* kernels : cpu::runnable_cpu_kernels()) {
    for (int mode = 0; mode < 8; ++mode) {
      const bool transpose_a = mode & 1, transpose_b = mode & 2, accumulate = mode & 4;
      const int64_t a_rows = transpose_a ? k : m, a_cols = transpose_a ? m : k;
      const int64_t b_rows = transpose_b ? n : k, b_cols = transpose_b ? k : n;
      std::vector<float> a(static_cast<size_t>(a_rows * (a_cols + pad))),
          b(static_cast<size_t>(b_rows * (b_cols + pad)));
      std::vector<float> out(static_cast<size_t>(m * (n + pad)));
      for (float& x : a) x = uniform(rng);
      for (float& x : b) x = uniform(rng);
      for (float& x : out) x = accumulate ? uniform(rng) : NAN;  // beta 0 must not read out
      const std::vector<float> before = out;
      cpu::Matmul<float> product;
      product.a = a.data();
      product.lda = a_cols + pad;
      product.transpose_a = transpose_a;
      product.b = b.data();
      product.ldb = b_cols + pad;
      product.transpose_b = transpose_b;
      product.out = out.data();
      product.ldo = n + pad;
      product.m = m;
      product.n = n;
      product.k = k;
      product.alpha = 0.5f;
      product.beta = accumulate ? 2.0f : 0.0f;
      kernels->matmul_f32(product);
      INFO("variant " << kernels->name << " transpose_a " << transpose_a << " transpose_b " << transpose_b
                      << " accumulate " << accumulate);
      double worst = 0.0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0.0;
          for (int64_t p = 0; p < k; ++p) {
            const double x =
                transpose_a ? a[static_cast<size_t>(p * product.lda + i)] : a[static_cast<size_t>(i * product.lda + p)];
            const double y =
                transpose_b ? b[static_cast<size_t>(j * product.ldb + p)] : b[static_cast<size_t>(p * product.ldb + j)];
            sum += x * y;
          }
          const size_t at = static_cast<size_t>(i * product.ldo + j);
          const double expected = 0.5 * sum + (accumulate ? 2.0 * before[at] : 0.0);
          worst = std::max(worst, std::fabs(out[at] - expected));
        }
        for (int64_t j = n; j < n + pad; ++j) {  // the padding between rows is left alone
          const size_t at = static_cast<size_t>(i * product.ldo + j);
          REQUIRE((std::isnan(before[at]) ? std::isnan(out[at]) : out[at] == before[at]));
        }
      }
      REQUIRE(worst <= 1e-5 * k);  // fp32 rounding of k products of |x| <= 1
    }
  }
}
