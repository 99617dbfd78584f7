// opsnn-bench sparse: the optimizer step of one embedding table updated from row-sparse gradients (lazy
// Adam through the row-sparse updater: coalescing included, sorted and atomic on a GPU) against the dense
// fused Adam step over the whole table, for uniform and Zipf-distributed row ids touching 0.01% to 1% of
// the rows; and the dense step with top-k sparsification at 90%, 99% and 99.9% sparsity against the plain
// dense step. Row ids come from a counter-based generator (splitmix64) that tools/bench_sparse_torch.py
// repeats, so PyTorch's nn.Embedding(sparse=True) + SparseAdam sees the same lookups.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>
#include <vector>

#include "bench/bench.h"
#include "opsnn/core/error.h"
#include "opsnn/core/storage.h"
#include "opsnn/optim/optimizer.h"

namespace opsnn::bench {
namespace {

// splitmix64 of (seed, i): a uniform double in [0, 1) per draw, the same in tools/bench_sparse_torch.py.
double uniform_draw(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// Draw i's row: uniform over the table, or Zipf-like with exponent 1 (ids log-uniform: row r is drawn
// with probability ~ 1/r) scattered over the table by an odd multiplier.
int64_t draw_row(const std::string& distribution, uint64_t seed, uint64_t i, int64_t rows) {
  const double u = uniform_draw(seed, i);
  if (distribution == "uniform")
    return std::min<int64_t>(rows - 1, static_cast<int64_t>(u * static_cast<double>(rows)));
  const int64_t rank = std::min<int64_t>(rows - 1, static_cast<int64_t>(std::pow(static_cast<double>(rows), u)) - 1);
  return static_cast<int64_t>((static_cast<unsigned __int128>(rank) * 0x9E3779B97F4A7C15ull) %
                              static_cast<uint64_t>(rows));
}

// Lookups drawn in order until `unique_rows` distinct rows are touched (the batch of an embedding bag).
std::vector<int64_t> draw_lookups(const std::string& distribution, uint64_t seed, int64_t rows, int64_t unique_rows) {
  std::vector<int64_t> ids;
  std::unordered_set<int64_t> seen;
  seen.reserve(static_cast<size_t>(unique_rows) * 2);
  for (uint64_t i = 0; static_cast<int64_t>(seen.size()) < unique_rows; ++i) {
    OPSNN_CHECK(i < 1000ull * static_cast<uint64_t>(unique_rows) + 1000000ull, "sparse bench: ", distribution,
                " draws did not reach ", unique_rows, " distinct rows");
    ids.push_back(draw_row(distribution, seed, i, rows));
    seen.insert(ids.back());
  }
  return ids;
}

Device parse_device(const std::string& text) {
  OPSNN_CHECK_AS(ConfigError, text == "cpu" || text == "cuda", "--device: expected cpu or cuda, got '", text, "'");
  return text == "cpu" ? kCPU : Device(DeviceType::cuda, 0);
}

// The whole text as a number (std::stod alone reads "1e7x" as 1e7), or NaN.
double read_number(const std::string& text) {
  size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nan("");
  }
  return used == text.size() ? value : std::nan("");
}

double parse_fraction(const std::string& text, const std::string& key) {
  const double value = read_number(text);
  OPSNN_CHECK_AS(ConfigError, value > 0.0 && value < 1.0, key, ": expected fractions in (0, 1), got '", text, "'");
  return value;
}

int64_t parse_count(const std::string& text, const std::string& key) {
  const double value = read_number(text);
  OPSNN_CHECK_AS(ConfigError, value >= 1.0 && value <= 1e12 && value == std::floor(value), key,
                 ": expected a whole number >= 1 (e.g. 8388608 or 1e7), got '", text, "'");
  return static_cast<int64_t>(value);
}

// Median seconds of step(), each finished on the device, after `warmup` steps. prepare() runs before each
// step, outside the timing (it hands the optimizer its gradient).
double time_steps(Device device, optim::Optimizer& optimizer, const std::function<void()>& prepare, int warmup,
                  int repeats) {
  std::vector<double> times;
  for (int i = 0; i < warmup + repeats; ++i) {
    prepare();
    device_services(device).synchronize(device.index);
    auto start = std::chrono::steady_clock::now();
    optimizer.step();
    device_services(device).synchronize(device.index);
    if (i >= warmup) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

Tensor random_normal(const Shape& shape, Device device, uint64_t seed) {
  Generator generator(seed);
  return Tensor::normal(shape, 0.0, 1.0, generator).to(device);
}

// A table of a billion values is filled on the device (random values from the host would take longer
// than the measurement); Adam's time does not depend on the values as long as they are normal numbers.
Tensor filled_table(int64_t rows, int64_t width, double value, Device device) {
  return Tensor::full({rows, width}, value, DType::f32, device);
}

int run(const std::vector<std::string>& args) {
  for (const std::string& arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: opsnn-bench sparse [--device cpu|cuda] [--rows N] [--width D] [--touched 0.0001,0.001,0.01] "
          "[--distributions uniform,zipf] [--state-dtype f32|bf16|f16] [--topk-size N] [--sparsities 0.9,0.99,0.999] "
          "[--repeats 10] [--seed 1] [--json FILE]\n"
          "defaults: cpu 2^20 rows x 32, top-k over 1e7; cuda 2^23 rows x 128 (1.07e9 parameters), top-k over 1e8\n");
      return 0;
    }
  check_options(args, {"--device", "--rows", "--width", "--touched", "--distributions", "--state-dtype", "--topk-size",
                       "--sparsities", "--repeats", "--seed", "--json"});
  const Device device = parse_device(option(args, "--device", "cpu"));
  const bool gpu = !device.is_cpu();
  const int64_t rows = parse_count(option(args, "--rows", gpu ? "8388608" : "1048576"), "--rows");
  const int64_t width = parse_count(option(args, "--width", gpu ? "128" : "32"), "--width");
  const int64_t topk_size = parse_count(option(args, "--topk-size", gpu ? "1e8" : "1e7"), "--topk-size");
  const uint64_t seed = static_cast<uint64_t>(parse_count(option(args, "--seed", "1"), "--seed"));
  const int repeats = parse_positive(args, "--repeats", 10);
  const int warmup = 3;
  const DType state_dtype = parse_dtype(option(args, "--state-dtype", "f32"));
  OPSNN_CHECK_AS(ConfigError, state_dtype == DType::f32 || state_dtype == DType::bf16 || state_dtype == DType::f16,
                 "--state-dtype: expected f32, bf16 or f16");
  std::vector<double> touched, sparsities;
  for (const std::string& text : split(option(args, "--touched", "0.0001,0.001,0.01"), "--touched"))
    touched.push_back(parse_fraction(text, "--touched"));
  for (const std::string& text : split(option(args, "--sparsities", "0.9,0.99,0.999"), "--sparsities"))
    sparsities.push_back(parse_fraction(text, "--sparsities"));
  const std::vector<std::string> distributions =
      split(option(args, "--distributions", "uniform,zipf"), "--distributions");
  for (const std::string& distribution : distributions)
    OPSNN_CHECK_AS(ConfigError, distribution == "uniform" || distribution == "zipf",
                   "--distributions: expected uniform and/or zipf, got '", distribution, "'");
  const std::string json_path = option(args, "--json", "");

  nlohmann::json out = {{"device", gpu ? "cuda" : "cpu"},
                        {"rows", rows},
                        {"width", width},
                        {"parameters", rows * width},
                        {"state_dtype", std::string(dtype_name(state_dtype))},
                        {"seed", seed},
                        {"repeats", repeats}};
  const optim::OptimizerOptions adam = optim::OptimizerOptions(1e-3).state_dtype(state_dtype);
  std::printf(
      "opsnn-bench sparse --device %s: table %lld x %lld (%.3g parameters), Adam with %s states, median of %d\n",
      gpu ? "cuda" : "cpu", static_cast<long long>(rows), static_cast<long long>(width),
      static_cast<double>(rows * width), std::string(dtype_name(state_dtype)).c_str(), repeats);

  // The dense fused step over the whole table (a dense gradient of the table's size).
  double dense_ms = 0.0;
  {
    Tensor table = filled_table(rows, width, 0.01, device);
    table.set_requires_grad(true);
    auto optimizer = optim::make_optimizer("adam", {{"table", table}}, adam);
    table.grad().fill_(1e-3);
    dense_ms = 1e3 * time_steps(
                         device, *optimizer, [] {}, warmup, repeats);
  }
  std::printf("\n%-9s %-9s %12s %12s %14s %12s %10s\n", "ids", "touched", "rows", "lookups", "dense Adam ms",
              "sparse ms", "speedup");
  out["dense_adam_ms"] = dense_ms;
  nlohmann::json sparse_rows = nlohmann::json::array();
  {
    Tensor table = filled_table(rows, width, 0.01, device);
    table.set_requires_grad(true).set_sparse_grad(true);
    std::vector<bool> modes = {false};
    if (gpu) modes.push_back(true);  // atomic coalescing, the opt-in
    for (bool atomics : modes) {
      auto optimizer =
          optim::make_optimizer("adam", {{"table", table}}, optim::OptimizerOptions(adam).row_sparse_atomics(atomics));
      for (const std::string& distribution : distributions) {
        for (double fraction : touched) {
          const int64_t unique_rows = std::max<int64_t>(1, std::llround(fraction * static_cast<double>(rows)));
          std::vector<int64_t> ids = draw_lookups(distribution, seed, rows, unique_rows);
          const int64_t lookups = static_cast<int64_t>(ids.size());
          Tensor id_tensor = Tensor::from_vector(ids, {lookups}).to(device);
          Tensor grad_rows = random_normal({lookups, width}, device, seed + 2);
          const double ms = 1e3 * time_steps(
                                      device, *optimizer,
                                      [&] {
                                        optimizer->zero_grad();
                                        table.row_sparse_grad().indices.push_back(id_tensor);
                                        table.row_sparse_grad().rows.push_back(grad_rows);
                                      },
                                      warmup, repeats);
          const std::string label = atomics ? "atomic" : "sorted";
          std::printf("%-9s %8.3g%% %12lld %12lld %14.3f %12.3f %9.1fx  %s\n", distribution.c_str(), 100.0 * fraction,
                      static_cast<long long>(unique_rows), static_cast<long long>(lookups), dense_ms, ms, dense_ms / ms,
                      label.c_str());
          sparse_rows.push_back({{"distribution", distribution},
                                 {"touched_fraction", fraction},
                                 {"touched_rows", unique_rows},
                                 {"lookups", lookups},
                                 {"coalescing", label},
                                 {"sparse_adam_ms", ms}});
        }
      }
    }
  }
  out["sparse"] = sparse_rows;

  // Top-k sparsification inside the dense step, against the plain dense step on the same arena.
  std::printf("\n%-12s %10s %12s %12s %10s\n", "top-k", "sparsity", "dense ms", "top-k ms", "ratio");
  nlohmann::json topk_rows = nlohmann::json::array();
  double plain_ms = 0.0;
  {
    Tensor weights = random_normal({topk_size}, device, seed + 3);
    weights.set_requires_grad(true);
    Tensor gradient = random_normal({topk_size}, device, seed + 4);
    auto optimizer = optim::make_optimizer("adam", {{"weights", weights}}, adam);
    plain_ms = 1e3 * time_steps(
                         device, *optimizer, [&] { weights.grad().copy_(gradient); }, warmup, repeats);
  }
  for (double sparsity : sparsities) {
    Tensor weights = random_normal({topk_size}, device, seed + 3);
    weights.set_requires_grad(true);
    Tensor gradient = random_normal({topk_size}, device, seed + 4);
    optim::TopKOptions topk;
    topk.density = 1.0 - sparsity;
    auto optimizer =
        optim::make_optimizer("adam", {{"weights", weights}}, optim::OptimizerOptions(adam).sparsification(topk));
    const double ms = 1e3 * time_steps(
                                device, *optimizer, [&] { weights.grad().copy_(gradient); }, warmup, repeats);
    std::printf("%-12.3g %9.1f%% %12.3f %12.3f %9.2fx\n", static_cast<double>(topk_size), 100.0 * sparsity, plain_ms,
                ms, plain_ms / ms);
    topk_rows.push_back({{"parameters", topk_size}, {"sparsity", sparsity}, {"dense_ms", plain_ms}, {"topk_ms", ms}});
  }
  out["topk"] = topk_rows;
  if (!json_path.empty()) {
    std::ofstream file(json_path);
    OPSNN_CHECK_AS(ConfigError, file.good(), "--json: cannot write '", json_path, "'");
    file << out.dump(2) << "\n";
  }
  return 0;
}

Registration registration{{"sparse",
                           "row-sparse embedding updates against the dense step, uniform and Zipf ids; top-k "
                           "sparsification against the dense step",
                           run}};

}  // namespace
}  // namespace opsnn::bench
