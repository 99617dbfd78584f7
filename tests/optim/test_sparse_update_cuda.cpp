// Tests of the CUDA row-sparse updates (src/optim/cuda/sparse_rows.*) against the CPU implementation
// (src/optim/sparse_update.cpp): coalescing with duplicates across chunks, f16/bf16 chunks, bad indices,
// sorted (the CPU's bits, run after run, hot rows and large tables included) and atomic; many steps of
// sparse SGD, lazy Adam/AdamW and lazy Adagrad with f32/f16/bf16 states on odd widths and misaligned
// tables, including non-finite and zero gradients; and an optimizer over a table on the GPU against the
// same on the CPU: clipping, a schedule, groups, loss scaling and skipped steps included, and a bad index
// failing the whole device step before anything changes. Run under compute-sanitizer memcheck and racecheck.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "opsnn/core/storage.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/optim/sparse_update.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"

using namespace opsnn;
using opsnn::testing::kGpu;
using namespace opsnn::optim;

namespace {

bool gpu_missing() { return opsnn::testing::gpu_missing("the [cuda] sparse-row tests"); }

uint32_t bits_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

// Equal bits, or both NaN (NaN payloads differ between x86 and CUDA arithmetic).
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b); }

// Counts the elements that differ (bitwise, NaN == NaN) and reports the first.
int64_t count_mismatches(const std::vector<float>& actual, const std::vector<float>& expected, const char* what) {
  REQUIRE(actual.size() == expected.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (same_float(actual[i], expected[i])) continue;
    if (mismatches++ == 0) UNSCOPED_INFO(what << " element " << i << ": " << actual[i] << " vs CPU " << expected[i]);
  }
  return mismatches;
}

// A random row-sparse gradient on the GPU: `chunks` chunks of indices from a small pool (many duplicates).
struct RandomGrad {
  RowSparseGrad gpu, cpu;
  std::vector<int64_t> occurrences;  // per table row
};

RandomGrad random_grad(std::mt19937_64& rng, int64_t num_rows, int64_t width, int chunks, int per_chunk,
                       DType row_dtype, bool special_values) {
  RandomGrad grad;
  grad.occurrences.assign(static_cast<size_t>(num_rows), 0);
  std::vector<int64_t> pool(static_cast<size_t>(std::max<int64_t>(1, num_rows / 3)));
  std::uniform_int_distribution<int64_t> any_row(0, num_rows - 1);
  for (int64_t& row : pool) row = any_row(rng);
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::normal_distribution<float> value(0.0f, 1.0f);
  for (int c = 0; c < chunks; ++c) {
    std::vector<int64_t> indices(static_cast<size_t>(per_chunk));
    std::vector<float> rows(static_cast<size_t>(per_chunk * width));
    for (int i = 0; i < per_chunk; ++i) {
      indices[i] = pool[pick(rng)];
      ++grad.occurrences[indices[i]];
      const bool zero_row = i % 7 == 3;
      for (int64_t j = 0; j < width; ++j) rows[i * width + j] = zero_row ? 0.0f : value(rng);
    }
    if (special_values && per_chunk > 2) {
      rows[1] = -0.0f;
      rows[width] = std::numeric_limits<float>::infinity();
    }
    Tensor index_tensor = Tensor::from_vector(indices, {per_chunk});
    Tensor row_tensor = Tensor::from_vector(rows, {per_chunk, width}).to(row_dtype);
    grad.cpu.indices.push_back(index_tensor);
    grad.cpu.rows.push_back(row_tensor);
    grad.gpu.indices.push_back(index_tensor.to(kGpu));
    grad.gpu.rows.push_back(row_tensor.to(kGpu));
  }
  return grad;
}

// The device result as a CPU CoalescedRows sorted by index (the device order is up to the atomics).
CoalescedRows sorted_copy(const CoalescedRows& device) {
  const int64_t count = device.row_count(), width = device.width;
  std::vector<int64_t> indices = device.device_indices.slice(0, 0, count).to_vector<int64_t>();
  std::vector<float> values = device.device_values.slice(0, 0, count * width).to_vector<float>();
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return indices[a] < indices[b]; });
  CoalescedRows out;
  out.width = width;
  out.sum_of_squares = device.sum_of_squares;
  out.non_finite = device.non_finite;
  for (int64_t u : order) {
    out.indices.push_back(indices[u]);
    out.values.insert(out.values.end(), values.begin() + u * width, values.begin() + (u + 1) * width);
  }
  return out;
}

}  // namespace

TEST_CASE("CUDA sorted coalescing gives the CPU's bits: duplicates, chunks, dtypes, scale, norm", "[cuda][sparse]") {
  if (gpu_missing()) return;
  std::mt19937_64 rng(5);
  CoalescedRows gpu_rows;  // reused across cases, as a training loop does
  for (int64_t width : {1, 3, 32, 33, 130}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      const int64_t num_rows = 97;
      RandomGrad grad = random_grad(rng, num_rows, width, 3, 41, dtype, width == 3);
      const float scale = 1.0f / 256.0f;
      CoalescedRows cpu_rows = coalesce(grad.cpu, num_rows, width, scale);
      coalesce(grad.gpu, num_rows, width, scale, gpu_rows);
      INFO("width " << width << ", rows " << dtype_name(dtype));
      REQUIRE(gpu_rows.device == kGpu);
      REQUIRE(gpu_rows.row_count() == cpu_rows.row_count());
      const int64_t count = gpu_rows.row_count();
      // Ascending as on the CPU, no reordering needed; every value and the norm bit for bit.
      REQUIRE(gpu_rows.device_indices.slice(0, 0, count).to_vector<int64_t>() == cpu_rows.indices);
      REQUIRE(count_mismatches(gpu_rows.device_values.slice(0, 0, count * width).to_vector<float>(), cpu_rows.values,
                               "coalesced value") == 0);
      REQUIRE(std::memcmp(&gpu_rows.sum_of_squares, &cpu_rows.sum_of_squares, sizeof(double)) == 0);
      REQUIRE(gpu_rows.non_finite == cpu_rows.non_finite);
    }
  }
}

TEST_CASE("CUDA sorted coalescing repeats itself and the CPU on hot rows and a large table", "[cuda][sparse]") {
  if (gpu_missing()) return;
  // Zipf-like ids (a few rows thousands of times, many once) over a 2^22-row table: CUB's multi-pass sort,
  // long runs per row, thousands of rows in the norm's blocks.
  const int64_t num_rows = int64_t{1} << 22, width = 20, total = 200000;
  std::mt19937_64 rng(17);
  std::vector<int64_t> indices(static_cast<size_t>(total));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t& index : indices) {
    const double u = unit(rng);
    index = static_cast<int64_t>(std::pow(static_cast<double>(num_rows), u * u * u)) - 1;  // skewed to small ids
  }
  std::vector<float> rows(static_cast<size_t>(total * width));
  std::normal_distribution<float> value(0.0f, 1.0f);
  for (float& x : rows) x = value(rng);
  RowSparseGrad cpu_grad, gpu_grad;
  cpu_grad.indices = {Tensor::from_vector(indices, {total})};
  cpu_grad.rows = {Tensor::from_vector(rows, {total, width})};
  gpu_grad.indices = {cpu_grad.indices[0].to(kGpu)};
  gpu_grad.rows = {cpu_grad.rows[0].to(kGpu)};
  CoalescedRows cpu_rows = coalesce(cpu_grad, num_rows, width, 0.125f);
  REQUIRE(cpu_rows.row_count() > 10000);
  std::vector<float> first_values;
  for (int run = 0; run < 3; ++run) {
    CoalescedRows gpu_rows;
    coalesce(gpu_grad, num_rows, width, 0.125f, gpu_rows);
    const int64_t count = gpu_rows.row_count();
    REQUIRE(count == cpu_rows.row_count());
    REQUIRE(gpu_rows.device_indices.slice(0, 0, count).to_vector<int64_t>() == cpu_rows.indices);
    std::vector<float> values = gpu_rows.device_values.slice(0, 0, count * width).to_vector<float>();
    REQUIRE(count_mismatches(values, cpu_rows.values, "coalesced value") == 0);
    REQUIRE(std::memcmp(&gpu_rows.sum_of_squares, &cpu_rows.sum_of_squares, sizeof(double)) == 0);
    if (run == 0) first_values = values;
    REQUIRE(std::memcmp(values.data(), first_values.data(), values.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("CUDA atomic coalescing (the opt-in) equals the CPU's up to the order of additions", "[cuda][sparse]") {
  if (gpu_missing()) return;
  std::mt19937_64 rng(5);
  CoalescedRows gpu_rows;  // reused across cases, as a training loop does
  gpu_rows.atomics = true;
  for (int64_t width : {1, 3, 32, 33, 130}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      const int64_t num_rows = 97;
      RandomGrad grad = random_grad(rng, num_rows, width, 3, 41, dtype, false);
      const float scale = 1.0f / 256.0f;
      CoalescedRows cpu_rows = coalesce(grad.cpu, num_rows, width, scale);
      coalesce(grad.gpu, num_rows, width, scale, gpu_rows);
      INFO("width " << width << ", rows " << dtype_name(dtype));
      REQUIRE(gpu_rows.device == kGpu);
      REQUIRE(gpu_rows.row_count() == cpu_rows.row_count());
      CoalescedRows sorted = sorted_copy(gpu_rows);
      REQUIRE(sorted.indices == cpu_rows.indices);
      int64_t single_mismatches = 0, duplicate_mismatches = 0;
      for (size_t u = 0; u < sorted.indices.size(); ++u) {
        const bool single = grad.occurrences[sorted.indices[u]] == 1;
        for (int64_t j = 0; j < width; ++j) {
          const float actual = sorted.values[u * width + j], expected = cpu_rows.values[u * width + j];
          if (single) {
            single_mismatches += !same_float(actual, expected);  // -0.0f start of the sum: exact copy
          } else {
            // Atomics add the occurrences in any order, the CPU in occurrence order: the sums may differ in
            // the last bits, at most a few ulps of the sum of magnitudes (about 10 terms here).
            duplicate_mismatches += std::fabs(actual - expected) > 1e-6f * (1.0f + std::fabs(expected)) * 8.0f;
          }
        }
      }
      REQUIRE(single_mismatches == 0);
      REQUIRE(duplicate_mismatches == 0);
      REQUIRE(gpu_rows.sum_of_squares == Approx(cpu_rows.sum_of_squares).epsilon(1e-5));
      REQUIRE_FALSE(gpu_rows.non_finite);
    }
  }
  SECTION("non-finite values are flagged; an empty gradient has no rows") {
    RandomGrad grad = random_grad(rng, 50, 5, 2, 9, DType::f32, true);
    coalesce(grad.gpu, 50, 5, 1.0f, gpu_rows);
    REQUIRE(gpu_rows.non_finite);
    REQUIRE(std::isinf(gpu_rows.sum_of_squares));
    RowSparseGrad empty;
    empty.indices.push_back(Tensor::empty({0}, DType::i64, kGpu));
    empty.rows.push_back(Tensor::empty({0, 5}, DType::f32, kGpu));
    coalesce(empty, 50, 5, 1.0f, gpu_rows);
    REQUIRE(gpu_rows.row_count() == 0);
    REQUIRE(gpu_rows.sum_of_squares == 0.0);
    REQUIRE_FALSE(gpu_rows.non_finite);
  }
}

TEST_CASE("CUDA coalescing rejects indices outside the table and stays usable", "[cuda][sparse]") {
  if (gpu_missing()) return;
  const bool atomics = GENERATE(false, true);
  // The first bad occurrence in the input's order is named, whether it is too large or negative.
  const bool negative_first = GENERATE(false, true);
  INFO((atomics ? "atomic" : "sorted") << " coalescing, negative first " << negative_first);
  RowSparseGrad grad;
  grad.indices = {Tensor::from_vector<int64_t>({1, 2}, {2}, DType::i64, kGpu),
                  Tensor::from_vector<int64_t>(
                      negative_first ? std::vector<int64_t>{4, -1, 3, 10} : std::vector<int64_t>{4, 10, 3, -1}, {4},
                      DType::i64, kGpu)};
  grad.rows = {Tensor::ones({2, 2}, DType::f32, kGpu), Tensor::ones({4, 2}, DType::f32, kGpu)};
  CoalescedRows rows;
  rows.atomics = atomics;
  REQUIRE_THROWS_WITH(coalesce(grad, 10, 2, 1.0f, rows), Catch::Contains(negative_first ? "index -1" : "index 10") &&
                                                             Catch::Contains("chunk 1, position 1") &&
                                                             Catch::Contains("table of 10 rows"));
  // The scratch was restored: the same table coalesces correctly afterwards.
  grad.indices[1] = Tensor::from_vector<int64_t>({4, 9, 3, 1}, {4}, DType::i64, kGpu);
  coalesce(grad, 10, 2, 0.5f, rows);
  CoalescedRows sorted = sorted_copy(rows);
  REQUIRE(sorted.indices == std::vector<int64_t>{1, 2, 3, 4, 9});
  REQUIRE(sorted.values == std::vector<float>{1, 1, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f});
  // Updating a table of another size with it is a clear error too.
  Tensor other = Tensor::zeros({11, 2}, DType::f32, kGpu);
  SgdScalars sgd{
      .lr = 0.1f, .momentum = 0.0f, .dampening = 0.0f, .weight_decay = 0.0f, .nesterov = false, .first_step = false};
  REQUIRE_THROWS_AS(sparse_sgd_step(other, Tensor(), Tensor(), rows, sgd), ShapeError);
  REQUIRE_THROWS_AS(sparse_sgd_step(Tensor::zeros({10, 2}), Tensor(), Tensor(), rows, sgd), DeviceError);
}

namespace {

// A table of `num_rows` rows placed one row into a larger buffer (an odd element offset when width is
// odd: misaligned rows), with the same values on the CPU and the GPU.
struct Table {
  Tensor cpu, gpu;
};

Table make_table(std::mt19937_64& rng, int64_t num_rows, int64_t width, DType dtype, float low, float high) {
  std::uniform_real_distribution<float> value(low, high);
  std::vector<float> values(static_cast<size_t>((num_rows + 1) * width));
  for (float& x : values) x = value(rng);
  Tensor cpu = Tensor::from_vector(values, {num_rows + 1, width}).to(dtype).slice(0, 1, num_rows + 1);
  Tensor gpu = Tensor::from_vector(values, {num_rows + 1, width}, dtype, kGpu).slice(0, 1, num_rows + 1);
  return {cpu, gpu};
}

int64_t table_mismatches(const Table& table, const char* what) {
  return count_mismatches(table.gpu.to_vector<float>(), table.cpu.to_vector<float>(), what);
}

}  // namespace

TEST_CASE("CUDA sparse SGD and lazy Adam equal the CPU bit for bit over many steps", "[cuda][sparse]") {
  if (gpu_missing()) return;
  const int64_t num_rows = 61;
  for (int64_t width : {1, 7, 33, 96}) {
    for (DType state_dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (int variant = 0; variant < 5; ++variant) {
        // 0: SGD momentum + wd, 1: SGD Nesterov + dampening 0, 2: Adam L2 + amsgrad + eps_relative, 3: AdamW,
        // 4: Adagrad with L2 decay
        const bool sgd = variant < 2, adagrad = variant == 4;
        INFO("width " << width << ", states " << dtype_name(state_dtype) << ", variant " << variant);
        std::mt19937_64 rng(static_cast<uint64_t>(width * 10 + variant));
        Table param = make_table(rng, num_rows, width, DType::f32, -1.0f, 1.0f);
        const std::vector<float> initial = param.cpu.to_vector<float>();
        std::vector<Table> states;
        for (int s = 0; s < (sgd || adagrad ? 1 : 3); ++s)
          states.push_back(make_table(rng, num_rows, width, state_dtype, s == 0 ? -0.1f : 0.0f, 0.1f));
        Tensor flags_cpu = Tensor::zeros({num_rows}, DType::u8);
        Tensor flags_gpu = Tensor::zeros({num_rows}, DType::u8, kGpu);
        std::vector<bool> ever_touched(static_cast<size_t>(num_rows), false);
        CoalescedRows gpu_rows;
        float beta1_power = 1.0f, beta2_power = 1.0f;
        for (int step = 0; step < 12; ++step) {
          RandomGrad grad = random_grad(rng, num_rows, width, 1 + step % 3, 5 + step, DType::f32, step == 7);
          coalesce(grad.gpu, num_rows, width, 0.5f, gpu_rows);
          // The CPU updates from the GPU's coalesced rows: the update math is compared bit for bit, apart
          // from the summation order of duplicates (tested above).
          CoalescedRows cpu_rows = sorted_copy(gpu_rows);
          for (int64_t row : cpu_rows.indices) ever_touched[row] = true;
          const float multiplier = step % 2 == 0 ? 1.0f : 0.75f;
          if (sgd) {
            SgdScalars scalars{.lr = 0.05f,
                               .momentum = 0.9f,
                               .dampening = variant == 0 ? 0.1f : 0.0f,
                               .weight_decay = variant == 0 ? 0.01f : 0.0f,
                               .nesterov = variant == 1,
                               .first_step = false};
            sparse_sgd_step(param.cpu, states[0].cpu, flags_cpu, cpu_rows, scalars, multiplier);
            sparse_sgd_step(param.gpu, states[0].gpu, flags_gpu, gpu_rows, scalars, multiplier);
          } else if (adagrad) {
            AdamScalars scalars{};
            scalars.lr = 0.02f;
            scalars.eps = 1e-10f;
            scalars.weight_decay = 0.01f;
            sparse_rule_step(UpdateRule::adagrad, param.cpu, {states[0].cpu}, cpu_rows, scalars, multiplier);
            sparse_rule_step(UpdateRule::adagrad, param.gpu, {states[0].gpu}, gpu_rows, scalars, multiplier);
          } else {
            beta1_power *= 0.9f;
            beta2_power *= 0.999f;
            AdamScalars scalars{.lr = 0.01f,
                                .beta1 = 0.9f,
                                .beta2 = 0.999f,
                                .one_minus_beta1 = 1.0f - 0.9f,
                                .one_minus_beta2 = 1.0f - 0.999f,
                                .inv_bias_correction1 = 1.0f / (1.0f - beta1_power),
                                .inv_bias_correction2 = 1.0f / (1.0f - beta2_power),
                                .eps = 1e-8f,
                                .eps_relative = variant == 2 ? 1e-6f : 0.0f,
                                .weight_decay = 0.02f,
                                .decoupled = variant == 3,
                                .amsgrad = variant == 2};
            Tensor max_cpu = variant == 2 ? states[2].cpu : Tensor(), max_gpu = variant == 2 ? states[2].gpu : Tensor();
            lazy_adam_step(param.cpu, states[0].cpu, states[1].cpu, max_cpu, cpu_rows, scalars, multiplier);
            lazy_adam_step(param.gpu, states[0].gpu, states[1].gpu, max_gpu, gpu_rows, scalars, multiplier);
          }
          REQUIRE(table_mismatches(param, "param") == 0);
          for (const Table& state : states) REQUIRE(table_mismatches(state, "state") == 0);
        }
        if (sgd) REQUIRE(flags_gpu.to_vector<int>() == flags_cpu.to_vector<int>());
        // Untouched rows: bit-identical to their initial values.
        const std::vector<float> final_values = param.gpu.to_vector<float>();
        int64_t changed_untouched = 0;
        for (int64_t row = 0; row < num_rows; ++row)
          for (int64_t j = 0; !ever_touched[row] && j < width; ++j)
            changed_untouched += bits_of(final_values[row * width + j]) != bits_of(initial[row * width + j]);
        REQUIRE(changed_untouched == 0);
      }
    }
  }
}

TEST_CASE("an optimizer over a row-sparse table steps the GPU copy to the CPU's bits, clipping included",
          "[cuda][sparse]") {
  if (gpu_missing()) return;
  const int64_t num_rows = 5000, width = 24;
  for (const char* name : {"adam", "adamw", "sgd", "adagrad"}) {
    for (DType state_dtype : {DType::f32, DType::bf16}) {
      INFO(name << " with " << dtype_name(state_dtype) << " states");
      std::mt19937_64 rng(23);
      std::vector<float> initial(static_cast<size_t>(num_rows * width));
      std::normal_distribution<float> value(0.0f, 0.1f);
      for (float& x : initial) x = value(rng);
      Tensor cpu_table = Tensor::from_vector(initial, {num_rows, width}), gpu_table = cpu_table.to(kGpu);
      cpu_table.set_requires_grad(true).set_sparse_grad(true);
      gpu_table.set_requires_grad(true).set_sparse_grad(true);
      OptimizerOptions options(0.05);
      options.max_grad_norm(2.0).state_dtype(state_dtype).weight_decay(0.01).decay_1d_params(true);
      if (std::string(name) == "sgd") options.momentum(0.9);
      auto cpu = make_optimizer(name, {{"table", cpu_table}}, options);
      auto gpu = make_optimizer(name, {{"table", gpu_table}}, options);
      for (int step = 0; step < 8; ++step) {
        // Two lookups per step, ids skewed towards small rows, as an embedding bag's would be.
        for (int chunk = 0; chunk < 2; ++chunk) {
          const int64_t count = 3000;
          std::vector<int64_t> ids(static_cast<size_t>(count));
          std::vector<float> rows(static_cast<size_t>(count * width));
          std::uniform_real_distribution<double> unit(0.0, 1.0);
          for (int64_t& id : ids)
            id = static_cast<int64_t>(std::pow(static_cast<double>(num_rows), unit(rng) * unit(rng))) - 1;
          for (float& x : rows) x = value(rng);
          Tensor id_tensor = Tensor::from_vector(ids, {count}), row_tensor = Tensor::from_vector(rows, {count, width});
          cpu_table.row_sparse_grad().indices.push_back(id_tensor);
          cpu_table.row_sparse_grad().rows.push_back(row_tensor);
          gpu_table.row_sparse_grad().indices.push_back(id_tensor.to(kGpu));
          gpu_table.row_sparse_grad().rows.push_back(row_tensor.to(kGpu));
        }
        cpu->step();
        gpu->step();
        cpu->zero_grad();
        gpu->zero_grad();
        REQUIRE(count_mismatches(cpu_table.to_vector<float>(), gpu_table.to(kCPU).to_vector<float>(), "table") == 0);
      }
      // The gradients were large enough for clipping to act (else the clip path went untested).
      REQUIRE(cpu->grad_norm() > 2.0);
    }
  }
}

namespace {

// A dense weight and an embedding table in two groups (lr multipliers 1 and 0.5), on `device`.
struct MixedModel {
  Tensor weight, table;
  std::unique_ptr<Optimizer> optimizer;
};

MixedModel mixed_model(const std::string& name, Device device, const OptimizerOptions& options) {
  std::mt19937_64 rng(41);
  std::normal_distribution<float> value(0.0f, 0.1f);
  std::vector<float> weight(64 * 33), table(3000 * 16);
  for (float& x : weight) x = value(rng);
  for (float& x : table) x = value(rng);
  MixedModel model;
  model.weight = Tensor::from_vector(weight, {64, 33}).to(device);
  model.table = Tensor::from_vector(table, {3000, 16}).to(device);
  model.weight.set_requires_grad(true);
  model.table.set_requires_grad(true).set_sparse_grad(true);
  std::vector<ParamGroup> groups = {ParamGroup{"dense", {{"weight", model.weight}}, 1.0, std::nullopt},
                                    ParamGroup{"embeddings", {{"table", model.table}}, 0.5, std::nullopt}};
  model.optimizer = make_optimizer(name, std::move(groups), options);
  return model;
}

// One step's gradients: a dense one for the weight and two lookups into the table (one of them, when
// `poison` is set, carrying an inf).
void push_gradients(MixedModel& model, uint64_t seed, bool poison, float loss_scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<float> weight_grad(64 * 33);
  for (float& x : weight_grad) x = loss_scale * value(rng);
  model.weight.grad().copy_(Tensor::from_vector(weight_grad, {64, 33}).to(model.weight.device()));
  std::uniform_int_distribution<int64_t> row(0, 2999);
  for (int chunk = 0; chunk < 2; ++chunk) {
    std::vector<int64_t> ids(500);
    std::vector<float> rows(500 * 16);
    for (int64_t& id : ids) id = row(rng) % (chunk == 0 ? 3000 : 40);  // the second lookup repeats rows
    for (float& x : rows) x = loss_scale * value(rng);
    if (poison && chunk == 1) rows[17] = std::numeric_limits<float>::infinity();
    model.table.row_sparse_grad().indices.push_back(Tensor::from_vector(ids, {500}).to(model.table.device()));
    model.table.row_sparse_grad().rows.push_back(Tensor::from_vector(rows, {500, 16}).to(model.table.device()));
  }
}

}  // namespace

TEST_CASE("a GPU step over dense and row-sparse parameters equals the CPU's: schedule, groups, loss scaling, skips",
          "[cuda][sparse]") {
  if (gpu_missing()) return;
  for (const char* name : {"adamw", "sgd", "adagrad"}) {
    INFO(name);
    OptimizerOptions options(0.02);
    ScheduleParams schedule;
    schedule.kind = ScheduleKind::warmup_cosine;
    schedule.warmup_steps = 3;
    schedule.total_steps = 12;
    schedule.min_lr = 1e-3;
    options.schedule(schedule).max_grad_norm(5.0).weight_decay(0.01);
    options.loss_scaling(LossScalingOptions().enabled(true).initial_scale(1024.0).growth_interval(3));
    if (std::string(name) == "sgd") options.momentum(0.9).nesterov(true);
    MixedModel cpu = mixed_model(name, kCPU, options), gpu = mixed_model(name, kGpu, options);
    for (int step = 0; step < 10; ++step) {
      const bool poison = step == 4;  // skipped, the scale backs off; neither table nor weight moves
      const float scale = static_cast<float>(cpu.optimizer->step_state().loss_scale);
      push_gradients(cpu, 100 + step, poison, scale);
      push_gradients(gpu, 100 + step, poison, scale);
      const StepState cpu_state = cpu.optimizer->step();
      const StepState gpu_state = gpu.optimizer->step();
      INFO("step " << step);
      REQUIRE(gpu_state.step == cpu_state.step);
      REQUIRE(gpu_state.skipped_steps == cpu_state.skipped_steps);
      REQUIRE(gpu_state.loss_scale == cpu_state.loss_scale);
      REQUIRE(same_float(gpu_state.grad_norm, cpu_state.grad_norm));
      REQUIRE(count_mismatches(gpu.weight.to_vector<float>(), cpu.weight.to_vector<float>(), "weight") == 0);
      REQUIRE(count_mismatches(gpu.table.to_vector<float>(), cpu.table.to_vector<float>(), "table") == 0);
      cpu.optimizer->zero_grad();
      gpu.optimizer->zero_grad();
    }
    REQUIRE(cpu.optimizer->step_state().skipped_steps == 1);
    REQUIRE(cpu.optimizer->step_state().step == 9);
  }
}

TEST_CASE("an index outside a GPU table fails the optimizer step before anything changes", "[cuda][sparse]") {
  if (gpu_missing()) return;
  const bool atomics = GENERATE(false, true);
  INFO((atomics ? "atomic" : "sorted") << " coalescing");
  MixedModel model = mixed_model("adam", kGpu, OptimizerOptions(0.01).row_sparse_atomics(atomics));
  push_gradients(model, 7, false, 1.0f);
  model.optimizer->step();
  model.optimizer->zero_grad();
  const std::vector<float> weight = model.weight.to_vector<float>(), table = model.table.to_vector<float>();
  const StepState before = model.optimizer->step_state();

  push_gradients(model, 8, false, 1.0f);
  model.table.row_sparse_grad().indices[1] =
      Tensor::from_vector<int64_t>(std::vector<int64_t>(500, 3000), {500}, DType::i64, kGpu);
  REQUIRE_THROWS_WITH(model.optimizer->step(), Catch::Contains("index 3000") &&
                                                   Catch::Contains("chunk 1, position 0") &&
                                                   Catch::Contains("table of 3000 rows"));
  // Neither the weight (updated in the same device step) nor the table nor the step counters moved.
  REQUIRE(model.weight.to_vector<float>() == weight);
  REQUIRE(model.table.to_vector<float>() == table);
  const StepState& after = model.optimizer->sync_state();
  REQUIRE(after.step == before.step);
  REQUIRE(after.skipped_steps == before.skipped_steps);
  REQUIRE(after.beta1_power == before.beta1_power);

  // The next, good step is step 2, as if the bad one had not been attempted.
  model.optimizer->zero_grad();
  push_gradients(model, 8, false, 1.0f);
  REQUIRE(model.optimizer->step().step == 2);
  REQUIRE(model.weight.to_vector<float>() != weight);
  REQUIRE(model.table.to_vector<float>() != table);
}
