// Tests of src/optim/sparse_update.cpp: coalescing (duplicates, scale, norm, bad indices, thread-count
// determinism), sparse SGD and lazy Adam/AdamW against rules.h applied densely to the touched rows, with
// untouched rows and states bit-unchanged, f16/bf16 states.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "opsnn/optim/sparse_update.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;

namespace {

// Restores the OpenMP thread count on scope exit.
struct ThreadCount {
  int saved = omp_get_max_threads();
  explicit ThreadCount(int threads) { omp_set_num_threads(threads); }
  ~ThreadCount() { omp_set_num_threads(saved); }
};

template <typename T>
bool bits_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// A row-sparse gradient held in plain vectors: chunks of (indices, rows).
struct Chunks {
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<float>> rows;
  std::vector<RowChunkView> views() const {
    std::vector<RowChunkView> result;
    for (size_t c = 0; c < indices.size(); ++c)
      result.push_back({indices[c].data(), rows[c].data(), static_cast<int64_t>(indices[c].size())});
    return result;
  }
  // The dense gradient the same occurrences give when accumulated row by row in occurrence order.
  std::vector<float> dense(int64_t num_rows, int64_t width, std::vector<bool>& touched) const {
    std::vector<float> result(static_cast<size_t>(num_rows * width), 0.0f);
    touched.assign(static_cast<size_t>(num_rows), false);
    for (size_t c = 0; c < indices.size(); ++c) {
      for (size_t i = 0; i < indices[c].size(); ++i) {
        int64_t row = indices[c][i];
        touched[row] = true;
        for (int64_t j = 0; j < width; ++j) result[row * width + j] += rows[c][i * width + j];
      }
    }
    return result;
  }
};

// Random chunks whose indices come from `pool` (so repeats within and across chunks are frequent).
Chunks random_chunks(std::mt19937_64& rng, const std::vector<int64_t>& pool, int chunk_count, int per_chunk,
                     int64_t width) {
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::normal_distribution<float> value(0.0f, 1.0f);
  Chunks chunks;
  for (int c = 0; c < chunk_count; ++c) {
    chunks.indices.emplace_back();
    chunks.rows.emplace_back();
    for (int i = 0; i < per_chunk; ++i) {
      chunks.indices.back().push_back(pool[pick(rng)]);
      for (int64_t j = 0; j < width; ++j) chunks.rows.back().push_back(value(rng));
    }
  }
  return chunks;
}

std::vector<float> random_values(std::mt19937_64& rng, size_t count, float low, float high) {
  std::uniform_real_distribution<float> value(low, high);
  std::vector<float> result(count);
  for (float& x : result) x = value(rng);
  return result;
}

// Adam scalars of step t = 1 with the PyTorch defaults (1/(1-beta^1) bias corrections), no decay.
AdamScalars first_step_adam(float lr) {
  return AdamScalars{.lr = lr,
                     .beta1 = 0.9f,
                     .beta2 = 0.999f,
                     .one_minus_beta1 = 0.1f,
                     .one_minus_beta2 = 0.001f,
                     .inv_bias_correction1 = 10.0f,
                     .inv_bias_correction2 = 1000.0f,
                     .eps = 1e-8f,
                     .eps_relative = 0.0f,
                     .weight_decay = 0.0f,
                     .decoupled = false,
                     .amsgrad = false};
}

CoalescedRows coalesce_chunks(const Chunks& chunks, int64_t num_rows, int64_t width, float scale) {
  CoalescedRows out;
  auto views = chunks.views();
  coalesce_rows(views.data(), static_cast<int64_t>(views.size()), num_rows, width, scale, out);
  return out;
}

}  // namespace

TEST_CASE("coalesce sums duplicates within and across chunks, sorted, scaled", "[sparse]") {
  const int64_t num_rows = 10, width = 3;
  Chunks chunks;
  chunks.indices = {{3, 7, 3, 0}, {7, 9, 3}};
  std::mt19937_64 rng(1);
  chunks.rows = {random_values(rng, 4 * width, -2, 2), random_values(rng, 3 * width, -2, 2)};
  const float scale = 1.0f / 1024.0f;
  CoalescedRows out = coalesce_chunks(chunks, num_rows, width, scale);

  REQUIRE(out.indices == std::vector<int64_t>{0, 3, 7, 9});
  REQUIRE(out.width == width);
  std::vector<bool> touched;
  std::vector<float> dense = chunks.dense(num_rows, width, touched);
  double squares = 0.0;
  for (size_t u = 0; u < out.indices.size(); ++u) {
    for (int64_t j = 0; j < width; ++j) {
      float expected = dense[out.indices[u] * width + j] * scale;
      REQUIRE(out.values[u * width + j] == expected);
      squares += static_cast<double>(expected) * expected;
    }
  }
  // Row 3 occurs three times: chunk 0 positions 0 and 2, chunk 1 position 2, summed in that order.
  float row3 = (chunks.rows[0][0] + chunks.rows[0][2 * width]) + chunks.rows[1][2 * width];
  REQUIRE(out.values[1 * width] == row3 * scale);
  REQUIRE(out.sum_of_squares == Approx(squares).epsilon(1e-12));
  REQUIRE_FALSE(out.non_finite);

  chunks.rows[1][width + 1] = std::numeric_limits<float>::infinity();  // row 9
  REQUIRE(coalesce_chunks(chunks, num_rows, width, scale).non_finite);
  chunks.rows[1][width + 1] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(coalesce_chunks(chunks, num_rows, width, scale).non_finite);

  CoalescedRows empty = coalesce_chunks(Chunks{}, num_rows, width, scale);
  REQUIRE(empty.row_count() == 0);
  REQUIRE(empty.sum_of_squares == 0.0);
  REQUIRE_FALSE(empty.non_finite);
}

TEST_CASE("coalesce rejects indices outside the table, naming index and table size", "[sparse]") {
  Chunks chunks;
  chunks.indices = {{1, 2}, {4, 10, 3}};
  chunks.rows = {std::vector<float>(4, 1.0f), std::vector<float>(6, 1.0f)};
  REQUIRE_THROWS_WITH(coalesce_chunks(chunks, 10, 2, 1.0f), Catch::Contains("index 10") &&
                                                                Catch::Contains("chunk 1, position 1") &&
                                                                Catch::Contains("table of 10 rows"));
  chunks.indices[0][0] = -1;
  REQUIRE_THROWS_WITH(coalesce_chunks(chunks, 10, 2, 1.0f),
                      Catch::Contains("index -1") && Catch::Contains("chunk 0, position 0"));
  REQUIRE_THROWS_AS(coalesce_chunks(chunks, 10, 0, 1.0f), Error);
}

TEST_CASE("coalesce handles tables past 2^32 rows (the unpacked sort path)", "[sparse]") {
  const int64_t num_rows = int64_t{1} << 40, width = 2;
  const int64_t big = 5'000'000'000, mid = int64_t{1} << 35;
  Chunks chunks;
  chunks.indices = {{big, 3, big}, {mid, 3}};
  chunks.rows = {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10}};
  CoalescedRows out = coalesce_chunks(chunks, num_rows, width, 1.0f);
  REQUIRE(out.indices == std::vector<int64_t>{3, big, mid});
  REQUIRE(out.values == std::vector<float>{3 + 9, 4 + 10, 1 + 5, 2 + 6, 7, 8});
}

TEST_CASE("coalesce is bit-identical for any thread count", "[sparse]") {
  const int64_t num_rows = 700, width = 24;
  std::vector<int64_t> pool;
  for (int64_t r = 0; r < num_rows; r += 2) pool.push_back(r);
  std::mt19937_64 rng(7);
  Chunks chunks = random_chunks(rng, pool, 3, 10000, width);
  CoalescedRows reference;
  {
    ThreadCount one(1);
    reference = coalesce_chunks(chunks, num_rows, width, 0.125f);
  }
  for (int threads : {2, 3}) {
    ThreadCount many(threads);
    CoalescedRows out = coalesce_chunks(chunks, num_rows, width, 0.125f);
    REQUIRE(out.indices == reference.indices);
    REQUIRE(bits_equal(out.values, reference.values));
    REQUIRE(out.sum_of_squares == reference.sum_of_squares);
  }
}

TEST_CASE("sparse SGD equals rules.h on the touched rows, untouched rows bit-unchanged", "[sparse]") {
  struct Case {
    const char* name;
    float momentum, dampening, weight_decay;
    bool nesterov;
    int64_t num_rows, width;
  };
  const Case cases[] = {{"plain", 0.0f, 0.0f, 0.0f, false, 50, 8},
                        {"momentum + L2", 0.9f, 0.0f, 0.01f, false, 50, 8},
                        {"dampening", 0.8f, 0.3f, 0.0f, false, 50, 8},
                        {"nesterov, parallel rows", 0.9f, 0.0f, 1e-3f, true, 2000, 64}};
  for (const Case& c : cases) {
    SECTION(c.name) {
      const int64_t num_rows = c.num_rows, width = c.width, size = num_rows * width;
      std::mt19937_64 rng(11);
      std::vector<float> param = random_values(rng, size, -1, 1);
      std::vector<float> buffer = random_values(rng, size, -1, 1);  // garbage: ignored until a row's first touch
      std::vector<uint8_t> initialized(num_rows, 0);
      std::vector<float> ref_param = param, ref_buffer = buffer;
      std::vector<uint8_t> ref_initialized = initialized;
      const std::vector<float> initial_param = param, initial_buffer = buffer;
      // Rows >= 3/4 of the table are never touched; the pool shifts between steps.
      std::vector<bool> ever_touched(num_rows, false);
      SgdScalars scalars{.lr = 0.05f,
                         .momentum = c.momentum,
                         .dampening = c.dampening,
                         .weight_decay = c.weight_decay,
                         .nesterov = c.nesterov,
                         .first_step = false};
      const float scale = 0.5f, multiplier = 0.75f;
      for (int step = 0; step < 4; ++step) {
        std::vector<int64_t> pool;
        for (int64_t r = step; r < num_rows * 3 / 4; r += 1 + step) pool.push_back(r);
        Chunks chunks = random_chunks(rng, pool, 2, static_cast<int>(pool.size()), width);
        CoalescedRows grad = coalesce_chunks(chunks, num_rows, width, scale);
        sparse_sgd_step<float>(param.data(), buffer.data(), initialized.data(), num_rows, width, grad.indices.data(),
                               grad.values.data(), grad.row_count(), scalars, multiplier);

        std::vector<bool> touched;
        std::vector<float> dense = chunks.dense(num_rows, width, touched);
        for (int64_t row = 0; row < num_rows; ++row) {
          if (!touched[row]) continue;
          ever_touched[row] = true;
          SgdScalars row_scalars = scalars;
          row_scalars.first_step = !ref_initialized[row];
          for (int64_t j = 0; j < width; ++j) {
            size_t e = static_cast<size_t>(row * width + j);
            sgd_element(ref_param[e], ref_buffer[e], dense[e] * scale * multiplier, row_scalars);
          }
          if (c.momentum != 0.0f) ref_initialized[row] = 1;
        }
        REQUIRE(bits_equal(param, ref_param));
        REQUIRE(bits_equal(buffer, ref_buffer));
        REQUIRE(initialized == ref_initialized);
      }
      for (int64_t row = num_rows * 3 / 4; row < num_rows; ++row) {
        REQUIRE_FALSE(ever_touched[row]);
        REQUIRE(std::memcmp(&param[row * width], &initial_param[row * width], width * sizeof(float)) == 0);
        REQUIRE(std::memcmp(&buffer[row * width], &initial_buffer[row * width], width * sizeof(float)) == 0);
        REQUIRE(initialized[row] == 0);
      }
    }
  }
}

TEST_CASE("plain sparse SGD equals the dense step on a gradient that is zero off the touched rows", "[sparse]") {
  const int64_t num_rows = 30, width = 5;
  std::mt19937_64 rng(3);
  std::vector<int64_t> pool = {0, 4, 4, 9, 17, 29};
  Chunks chunks = random_chunks(rng, pool, 3, 5, width);
  std::vector<float> param = random_values(rng, num_rows * width, -1, 1), dense_param = param;
  const std::vector<float> initial = param;
  SgdScalars scalars{
      .lr = 0.1f, .momentum = 0.0f, .dampening = 0.0f, .weight_decay = 0.0f, .nesterov = false, .first_step = true};
  CoalescedRows grad = coalesce_chunks(chunks, num_rows, width, 1.0f);
  sparse_sgd_step<float>(param.data(), nullptr, nullptr, num_rows, width, grad.indices.data(), grad.values.data(),
                         grad.row_count(), scalars);
  std::vector<bool> touched;
  std::vector<float> dense = chunks.dense(num_rows, width, touched);
  float unused = 0.0f;
  for (size_t e = 0; e < dense.size(); ++e) sgd_element(dense_param[e], unused, dense[e], scalars);
  REQUIRE(bits_equal(param, dense_param));
  // Independent of rules.h: row 4 (drawn from the pool twice) moved by -lr * (sum of its occurrences).
  REQUIRE(std::find(grad.indices.begin(), grad.indices.end(), 4) != grad.indices.end());
  for (int64_t j = 0; j < width; ++j) {
    REQUIRE(param[4 * width + j] == Approx(initial[4 * width + j] - 0.1 * dense[4 * width + j]).margin(1e-6));
  }
}

TEMPLATE_TEST_CASE("lazy Adam/AdamW equal rules.h on touched rows, other rows and states untouched", "[sparse]", float,
                   Half, BFloat16) {
  using State = TestType;
  struct Case {
    const char* name;
    bool decoupled, amsgrad;
    float weight_decay;
  };
  const Case cases[] = {{"adam", false, false, 0.0f},
                        {"adam L2", false, false, 0.01f},
                        {"adamw", true, false, 0.05f},
                        {"adamw amsgrad", true, true, 0.05f}};
  for (const Case& c : cases) {
    SECTION(c.name) {
      const int64_t num_rows = 40, width = 16, size = num_rows * width;
      std::mt19937_64 rng(5);
      std::vector<float> param = random_values(rng, size, -1, 1);
      auto random_state = [&](float low, float high) {
        std::vector<State> state(size);
        std::vector<float> values = random_values(rng, size, low, high);
        for (int64_t e = 0; e < size; ++e) store_value(state[e], values[e]);
        return state;
      };
      std::vector<State> m = random_state(-0.1f, 0.1f), v = random_state(0.0f, 0.01f),
                         v_max = random_state(0.0f, 0.02f);
      std::vector<float> ref_param = param;
      std::vector<State> ref_m = m, ref_v = v, ref_v_max = v_max;
      const std::vector<float> initial_param = param;
      const std::vector<State> initial_m = m, initial_v = v, initial_v_max = v_max;

      const float beta1 = 0.9f, beta2 = 0.999f;
      double beta1_power = 1.0, beta2_power = 1.0;
      for (int step = 1; step <= 5; ++step) {
        beta1_power *= beta1;
        beta2_power *= beta2;
        AdamScalars scalars{.lr = 1e-2f,
                            .beta1 = beta1,
                            .beta2 = beta2,
                            .one_minus_beta1 = 1 - beta1,
                            .one_minus_beta2 = 1 - beta2,
                            .inv_bias_correction1 = static_cast<float>(1 / (1 - beta1_power)),
                            .inv_bias_correction2 = static_cast<float>(1 / (1 - beta2_power)),
                            .eps = 1e-8f,
                            .eps_relative = 0.0f,
                            .weight_decay = c.weight_decay,
                            .decoupled = c.decoupled,
                            .amsgrad = c.amsgrad};
        std::vector<int64_t> pool;
        for (int64_t r = step % 3; r < 30; r += 3) pool.push_back(r);
        Chunks chunks = random_chunks(rng, pool, 2, 8, width);
        CoalescedRows grad = coalesce_chunks(chunks, num_rows, width, 1.0f);
        lazy_adam_step<State>(param.data(), m.data(), v.data(), c.amsgrad ? v_max.data() : nullptr, num_rows, width,
                              grad.indices.data(), grad.values.data(), grad.row_count(), scalars);

        std::vector<bool> touched;
        std::vector<float> dense = chunks.dense(num_rows, width, touched);
        for (int64_t e = 0; e < size; ++e) {
          if (!touched[e / width]) continue;
          float mf = load_value(ref_m[e]), vf = load_value(ref_v[e]), vmf = load_value(ref_v_max[e]);
          adam_element(ref_param[e], mf, vf, vmf, dense[e], scalars);
          store_value(ref_m[e], mf);
          store_value(ref_v[e], vf);
          if (c.amsgrad) store_value(ref_v_max[e], vmf);
        }
        REQUIRE(bits_equal(param, ref_param));
        REQUIRE(bits_equal(m, ref_m));
        REQUIRE(bits_equal(v, ref_v));
        REQUIRE(bits_equal(v_max, ref_v_max));
      }
      // Rows 30.. were never in a pool: parameters and every state keep their exact bits.
      for (int64_t e = 30 * width; e < size; ++e) {
        REQUIRE(std::memcmp(&param[e], &initial_param[e], sizeof(float)) == 0);
        REQUIRE(std::memcmp(&m[e], &initial_m[e], sizeof(State)) == 0);
        REQUIRE(std::memcmp(&v[e], &initial_v[e], sizeof(State)) == 0);
        REQUIRE(std::memcmp(&v_max[e], &initial_v_max[e], sizeof(State)) == 0);
      }
    }
  }
}

TEMPLATE_TEST_CASE("lazy Adagrad equals the dense step on a gradient that is zero off the touched rows", "[sparse]",
                   float, Half, BFloat16) {
  // Without weight decay a zero gradient leaves dense Adagrad's parameter and sum as they are, so the lazy
  // update must give the dense step's bits everywhere; with decay, touched rows follow the rule and the
  // others keep their bits.
  using State = TestType;
  for (float weight_decay : {0.0f, 0.05f}) {
    INFO("weight decay " << weight_decay);
    const int64_t num_rows = 40, width = 9, size = num_rows * width;
    std::mt19937_64 rng(11);
    std::vector<float> param = random_values(rng, size, -1, 1), dense_param = param;
    std::vector<State> sum(static_cast<size_t>(size)), dense_sum;
    std::vector<float> start = random_values(rng, size, 0.0f, 0.5f);
    for (int64_t e = 0; e < size; ++e) store_value(sum[e], start[e]);
    dense_sum = sum;
    const std::vector<float> initial = param;
    std::vector<bool> ever_touched(static_cast<size_t>(num_rows), false);
    for (int step = 1; step <= 6; ++step) {
      AdamScalars scalars{};
      scalars.lr = 0.05f * static_cast<float>(step);
      scalars.eps = 1e-10f;
      scalars.weight_decay = weight_decay;
      std::vector<int64_t> pool;
      for (int64_t r = step % 4; r < 32; r += 4) pool.push_back(r);
      Chunks chunks = random_chunks(rng, pool, 2, 7, width);
      CoalescedRows grad = coalesce_chunks(chunks, num_rows, width, 0.5f);
      State* states[1] = {sum.data()};
      sparse_rule_step<AdagradRule, State>(param.data(), states, num_rows, width, grad.indices.data(),
                                           grad.values.data(), grad.row_count(), scalars, 0.75f);
      std::vector<bool> touched;
      std::vector<float> dense = chunks.dense(num_rows, width, touched);
      for (int64_t e = 0; e < size; ++e) {
        if (weight_decay != 0.0f && !touched[e / width]) continue;
        if (touched[e / width]) ever_touched[e / width] = true;
        float state[1] = {load_value(dense_sum[e])};
        AdagradRule::element(dense_param[e], state, dense[e] * 0.5f * 0.75f, scalars);
        store_value(dense_sum[e], state[0]);
      }
      REQUIRE(bits_equal(param, dense_param));
      REQUIRE(std::memcmp(sum.data(), dense_sum.data(), sum.size() * sizeof(State)) == 0);
    }
    // Independent of rules.h: untouched rows kept their bits, touched rows moved.
    for (int64_t row = 0; row < num_rows; ++row) {
      const bool same = std::memcmp(&param[row * width], &initial[row * width], width * sizeof(float)) == 0;
      REQUIRE(same == !ever_touched[row]);
    }
  }
}

TEST_CASE("coalesce sums a row occurring more than 32 times in 32 lanes folded pairwise", "[sparse]") {
  // Row 3 occurs 101 times across two chunks, row 5 exactly 32 times (still one chain), row 7 once.
  const int64_t width = 3;
  std::mt19937_64 rng(21);
  Chunks chunks;
  for (int c = 0; c < 2; ++c) {
    chunks.indices.emplace_back();
    chunks.rows.emplace_back();
  }
  for (int i = 0; i < 101 + 32 + 1; ++i) {
    const int c = i % 2;
    chunks.indices[c].push_back(i < 101 ? 3 : i < 133 ? 5 : 7);
    for (float x : random_values(rng, width, -1, 1)) chunks.rows[c].push_back(x);
  }
  CoalescedRows grad = coalesce_chunks(chunks, 10, width, 0.5f);
  REQUIRE(grad.indices == std::vector<int64_t>{3, 5, 7});
  // The occurrences of each row in occurrence order (chunk 0 first, then chunk 1).
  std::vector<std::vector<const float*>> occurrences(10);
  for (size_t c = 0; c < 2; ++c)
    for (size_t i = 0; i < chunks.indices[c].size(); ++i)
      occurrences[chunks.indices[c][i]].push_back(&chunks.rows[c][i * width]);
  for (int64_t j = 0; j < width; ++j) {
    std::vector<float> lanes(32);
    for (size_t k = 0; k < occurrences[3].size(); ++k)
      lanes[k % 32] = k < 32 ? occurrences[3][k][j] : lanes[k % 32] + occurrences[3][k][j];
    for (size_t offset = 16; offset > 0; offset /= 2)
      for (size_t lane = 0; lane < offset; ++lane) lanes[lane] = lanes[lane] + lanes[lane + offset];
    const float hot = lanes[0] * 0.5f;
    REQUIRE(std::memcmp(&grad.values[j], &hot, sizeof(float)) == 0);
    float chain = occurrences[5][0][j];
    for (size_t k = 1; k < occurrences[5].size(); ++k) chain += occurrences[5][k][j];
    chain *= 0.5f;
    REQUIRE(std::memcmp(&grad.values[width + j], &chain, sizeof(float)) == 0);
    REQUIRE(grad.values[2 * width + j] == occurrences[7][0][j] * 0.5f);
  }
}

TEST_CASE("coalesce's sum of squares follows the fixed 32-lane order per row, per 256-row block, over blocks",
          "[sparse]") {
  // 700 unique rows of width 45: three blocks, lanes with two columns and with one. The order is what the
  // CUDA coalescing repeats, so it is pinned here, written out without rules.h's helper.
  const int64_t num_rows = 1000, width = 45;
  std::mt19937_64 rng(8);
  std::vector<int64_t> pool(700);
  for (int64_t r = 0; r < 700; ++r) pool[r] = r + 100;
  Chunks chunks = random_chunks(rng, pool, 2, 900, width);
  CoalescedRows grad = coalesce_chunks(chunks, num_rows, width, 0.25f);
  const int64_t rows = grad.row_count();
  REQUIRE(rows > 512);
  auto fold = [](std::vector<double> partial) {  // a warp's shuffle-down: 16, 8, 4, 2, 1
    for (size_t offset = 16; offset > 0; offset /= 2)
      for (size_t lane = 0; lane < offset; ++lane) partial[lane] = partial[lane] + partial[lane + offset];
    return partial[0];
  };
  std::vector<double> block_lanes(32, 0.0);
  for (int64_t block = 0; block * 256 < rows; ++block) {
    std::vector<double> row_lanes(32, 0.0);
    for (int64_t u = block * 256; u < std::min<int64_t>(rows, (block + 1) * 256); ++u) {
      std::vector<double> lanes(32, 0.0);
      for (int64_t j = 0; j < width; ++j) {
        const double x = grad.values[u * width + j];
        lanes[j % 32] += x * x;
      }
      row_lanes[(u - block * 256) % 32] += fold(lanes);
    }
    block_lanes[block % 32] += fold(row_lanes);
  }
  const double total = fold(block_lanes);
  REQUIRE(std::memcmp(&total, &grad.sum_of_squares, sizeof(double)) == 0);
  // And it is the sum of squares, up to double rounding.
  double plain = 0.0;
  for (float x : grad.values) plain += static_cast<double>(x) * x;
  REQUIRE(grad.sum_of_squares == Approx(plain).epsilon(1e-12));
}

TEST_CASE("lazy Adam's first step moves a touched row by about lr * sign(g)", "[sparse]") {
  // Independent of rules.h: from zero moments at t = 1, m_hat = g and v_hat = g^2.
  Tensor param = Tensor::from_vector<float>({1, 1, 1, 2, 2, 2, 3, 3, 3}, {3, 3});
  Tensor m = Tensor::zeros({3, 3}, DType::bf16), v = Tensor::zeros({3, 3}, DType::bf16);
  RowSparseGrad sparse;
  sparse.indices = {Tensor::from_vector<int64_t>({2, 2}, {2})};
  sparse.rows = {Tensor::from_vector<float>({0.5f, -0.25f, 4.0f, 0.5f, -0.25f, 4.0f}, {2, 3}, DType::bf16)};
  CoalescedRows grad = coalesce(sparse, 3, 3);
  REQUIRE(grad.values == std::vector<float>{1.0f, -0.5f, 8.0f});
  AdamScalars scalars = first_step_adam(0.1f);
  lazy_adam_step(param, m, v, Tensor(), grad, scalars, 2.0f);
  std::vector<float> p = param.to_vector<float>();
  REQUIRE(p[6] == Approx(3.0 - 0.1).epsilon(1e-5));
  REQUIRE(p[7] == Approx(3.0 + 0.1).epsilon(1e-5));
  REQUIRE(p[8] == Approx(3.0 - 0.1).epsilon(1e-5));
  for (int e = 0; e < 6; ++e) REQUIRE(p[e] == (e < 3 ? 1.0f : 2.0f));
  // m = (1 - beta1) * g with g = 2 * coalesced (the multiplier), stored bf16.
  REQUIRE(m.to_vector<float>()[8] == Approx(0.1 * 16.0).epsilon(1e-2));
}

TEST_CASE("sparse updates reject malformed rows and tables", "[sparse]") {
  std::vector<float> param(20, 0.0f), m(20, 0.0f), v(20, 0.0f);
  std::vector<float> values(8, 1.0f);
  AdamScalars adam = first_step_adam(1e-3f);
  std::vector<int64_t> unsorted = {3, 1};
  REQUIRE_THROWS_WITH(
      lazy_adam_step<float>(param.data(), m.data(), v.data(), nullptr, 5, 4, unsorted.data(), values.data(), 2, adam),
      Catch::Contains("strictly increasing"));
  std::vector<int64_t> outside = {1, 5};
  REQUIRE_THROWS_WITH(
      lazy_adam_step<float>(param.data(), m.data(), v.data(), nullptr, 5, 4, outside.data(), values.data(), 2, adam),
      Catch::Contains("row index 5") && Catch::Contains("5 rows"));
  adam.amsgrad = true;
  std::vector<int64_t> good = {1, 2};
  REQUIRE_THROWS_WITH(
      lazy_adam_step<float>(param.data(), m.data(), v.data(), nullptr, 5, 4, good.data(), values.data(), 2, adam),
      Catch::Contains("amsgrad"));
  SgdScalars sgd{
      .lr = 0.1f, .momentum = 0.9f, .dampening = 0.0f, .weight_decay = 0.0f, .nesterov = false, .first_step = false};
  REQUIRE_THROWS_WITH(sparse_sgd_step<float>(param.data(), nullptr, nullptr, 5, 4, good.data(), values.data(), 2, sgd),
                      Catch::Contains("momentum"));

  // Tensor layer: width mismatch, mixed state dtypes, wrong flag dtype.
  Tensor table = Tensor::zeros({5, 4});
  CoalescedRows grad;
  grad.width = 3;
  REQUIRE_THROWS_AS(lazy_adam_step(table, Tensor::zeros({5, 4}), Tensor::zeros({5, 4}), Tensor(), grad, adam),
                    ShapeError);
  grad.width = 4;
  adam.amsgrad = false;
  REQUIRE_THROWS_AS(
      lazy_adam_step(table, Tensor::zeros({5, 4}), Tensor::zeros({5, 4}, DType::bf16), Tensor(), grad, adam),
      TypeError);
  REQUIRE_THROWS_AS(sparse_sgd_step(table, Tensor::zeros({5, 4}), Tensor::zeros({5}, DType::f32), grad, sgd),
                    TypeError);
  RowSparseGrad sparse;
  sparse.indices = {Tensor::from_vector<int64_t>({1, 2}, {2})};
  sparse.rows = {Tensor::zeros({2, 3})};
  REQUIRE_THROWS_AS(coalesce(sparse, 5, 4), ShapeError);
}
