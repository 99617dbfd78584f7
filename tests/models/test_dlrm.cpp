// Tests of the dlrm model (src/models/dlrm.cpp): its parameters, its forward against the computation
// written out by hand from its own weights (dense transform, hashing, interaction order, concatenation),
// gradients reaching every parameter with row-sparse table rows, each field hashing into its own rows,
// the hash's spread, the range checks of its settings, and ([cuda]) the model on a GPU against the CPU.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/data/criteo.h"
#include "opsnn/models/models.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"

using namespace opsnn;
using models::ModelOptions;

namespace {

ModelOptions small_dlrm() {
  ModelOptions options;
  options.arch = "dlrm";
  options.embedding_dim = 4;
  options.hash_buckets = {50};
  options.bottom_mlp = {8, 4};
  options.top_mlp = {16};
  return options;
}

// Rows as a criteo batch holds them: dense values (some empty or negative), then categorical values.
Tensor criteo_rows(int64_t batch, uint64_t seed) {
  Generator generator(seed);
  std::vector<int64_t> values;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t k = 0; k < data::kCriteoDenseFields; ++k) {
      const uint64_t draw = generator.next_below(40);
      values.push_back(draw == 0 ? data::kCriteoEmpty : static_cast<int64_t>(draw) - 5);
    }
    for (int64_t k = 0; k < data::kCriteoCategoricalFields; ++k) {
      const uint64_t draw = generator.next_below(1000);
      values.push_back(draw == 0 ? data::kCriteoEmpty : static_cast<int64_t>(generator.next_below(1ull << 32)));
    }
  }
  return Tensor::from_vector<int64_t>(values, {batch, data::kCriteoFeatures});
}

std::map<std::string, std::vector<double>> weights_of(nn::Module& model) {
  std::map<std::string, std::vector<double>> weights;
  for (const auto& [name, tensor] : model.named_parameters()) weights[name] = tensor.to_vector<double>();
  return weights;
}

// y = W x + b for W [out, in] row-major, then ReLU when asked.
std::vector<double> affine(const std::vector<double>& w, const std::vector<double>& b, const std::vector<double>& x,
                           bool relu) {
  std::vector<double> y(b.size());
  for (size_t o = 0; o < b.size(); ++o) {
    double sum = b[o];
    for (size_t i = 0; i < x.size(); ++i) sum += w[o * x.size() + i] * x[i];
    y[o] = relu ? std::max(sum, 0.0) : sum;
  }
  return y;
}

}  // namespace

TEST_CASE("dlrm model: parameters and a forward equal to the computation written out", "[models]") {
  Generator generator(40);
  ModelOptions options = small_dlrm();
  auto model = models::build_model(options, generator);
  // bottom 13-8-4, table 26 x 50 rows of 4, top (4 + 351)-16, head 16-2
  CHECK(models::count_parameters(*model) == (13 * 8 + 8) + (8 * 4 + 4) + 26 * 50 * 4 + (355 * 16 + 16) + (16 * 2 + 2));
  std::vector<std::string> names;
  for (const auto& [name, tensor] : model->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"bottom_mlp.fc1.weight", "bottom_mlp.fc1.bias", "bottom_mlp.fc2.weight",
                                          "bottom_mlp.fc2.bias", "embedding.weight", "top_mlp.fc1.weight",
                                          "top_mlp.fc1.bias", "head.weight", "head.bias"});
  // Each field's rows start within +-sqrt(1 / 50).
  std::map<std::string, std::vector<double>> w = weights_of(*model);
  const double bound = std::sqrt(1.0 / 50.0);
  CHECK(std::all_of(w["embedding.weight"].begin(), w["embedding.weight"].end(),
                    [bound](double v) { return std::fabs(v) <= bound && v != 0.0; }));

  const int64_t batch = 5;
  const Tensor rows = criteo_rows(batch, 41);
  const std::vector<double> logits = model->forward(rows).to_vector<double>();
  REQUIRE(logits.size() == static_cast<size_t>(batch * 2));
  const std::vector<int64_t> values = rows.to_vector<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> dense;
    for (int64_t k = 0; k < 13; ++k)
      dense.push_back(std::log1p(static_cast<double>(std::max<int64_t>(values[b * 39 + k], 0))));
    std::vector<double> z = affine(w["bottom_mlp.fc1.weight"], w["bottom_mlp.fc1.bias"], dense, true);
    z = affine(w["bottom_mlp.fc2.weight"], w["bottom_mlp.fc2.bias"], z, true);
    std::vector<std::vector<double>> vectors{z};
    for (int64_t f = 0; f < 26; ++f) {
      const int64_t row = f * 50 + models::dlrm_hash(f, values[b * 39 + 13 + f], 50);
      vectors.emplace_back(w["embedding.weight"].begin() + row * 4, w["embedding.weight"].begin() + row * 4 + 4);
    }
    std::vector<double> joined = z;
    for (size_t i = 1; i < vectors.size(); ++i)
      for (size_t j = 0; j < i; ++j) {
        double dot = 0.0;
        for (size_t d = 0; d < 4; ++d) dot += vectors[i][d] * vectors[j][d];
        joined.push_back(dot);
      }
    REQUIRE(joined.size() == 355);
    const std::vector<double> hidden = affine(w["top_mlp.fc1.weight"], w["top_mlp.fc1.bias"], joined, true);
    const std::vector<double> expected = affine(w["head.weight"], w["head.bias"], hidden, false);
    for (size_t c = 0; c < 2; ++c) {
      INFO("sample " << b << " logit " << c);
      CHECK(std::fabs(logits[static_cast<size_t>(b * 2) + c] - expected[c]) <= 1e-5 * (1.0 + std::fabs(expected[c])));
    }
  }
}

TEST_CASE("dlrm model: gradients reach every parameter and each field hashes into its own rows", "[models]") {
  Generator generator(42);
  ModelOptions options = small_dlrm();
  options.hash_buckets.clear();
  for (int64_t f = 0; f < 26; ++f) options.hash_buckets.push_back(3 + 7 * f);  // 3, 10, ..., 178
  auto model = models::build_model(options, generator);
  const int64_t batch = 64;
  const Tensor rows = criteo_rows(batch, 43);
  std::vector<int64_t> targets;
  for (int64_t b = 0; b < batch; ++b) targets.push_back(b % 2);
  ops::cross_entropy(model->forward(rows), Tensor::from_vector<int64_t>(targets, {batch})).backward();
  for (const auto& [name, tensor] : model->named_parameters()) {
    INFO(name);
    if (name == "embedding.weight") {
      CHECK(tensor.sparse_grad());
      CHECK_FALSE(tensor.grad().defined());
      REQUIRE(tensor.row_sparse_grad().indices.size() == 1);
      continue;
    }
    REQUIRE(tensor.grad().defined());
    double norm = 0.0;
    for (double g : tensor.grad().to_vector<double>()) norm += g * g;
    CHECK(norm > 0.0);
  }
  const Tensor table = model->named_parameters()[4].second;
  CHECK(table.shape() == Shape{26 * 3 + 7 * 325, 4});
  const std::vector<int64_t> touched = table.row_sparse_grad().indices.front().to_vector<int64_t>();
  REQUIRE(touched.size() == static_cast<size_t>(batch * 26));
  const std::vector<int64_t> values = rows.to_vector<int64_t>();
  int64_t offset = 0;
  std::vector<int64_t> offsets;
  for (int64_t f = 0; f < 26; ++f) {
    offsets.push_back(offset);
    offset += 3 + 7 * f;
  }
  for (size_t k = 0; k < touched.size(); ++k) {
    const int64_t b = static_cast<int64_t>(k) / 26, f = static_cast<int64_t>(k) % 26;
    INFO("sample " << b << " field " << f);
    CHECK(touched[k] >= offsets[static_cast<size_t>(f)]);
    CHECK(touched[k] < offsets[static_cast<size_t>(f)] + 3 + 7 * f);
    CHECK(touched[k] == offsets[static_cast<size_t>(f)] + models::dlrm_hash(f, values[b * 39 + 13 + f], 3 + 7 * f));
  }
  // The gradient of each touched row is finite and, for a batch this size, somewhere nonzero.
  const std::vector<double> row_grads = table.row_sparse_grad().rows.front().to_vector<double>();
  CHECK(std::any_of(row_grads.begin(), row_grads.end(), [](double g) { return g != 0.0; }));

  // Dense table gradients when asked.
  options.sparse_embeddings = false;
  auto dense_model = models::build_model(options, generator);
  ops::cross_entropy(dense_model->forward(rows), Tensor::from_vector<int64_t>(targets, {batch})).backward();
  const Tensor dense_table = dense_model->named_parameters()[4].second;
  CHECK_FALSE(dense_table.sparse_grad());
  CHECK(dense_table.grad().defined());
}

TEST_CASE("dlrm_hash spreads values over the buckets and differs between fields", "[models]") {
  const int64_t buckets = 64, values = 64000;
  std::vector<int64_t> counts(buckets, 0);
  int64_t same_in_next_field = 0;
  for (int64_t v = 0; v < values; ++v) {
    const int64_t row = models::dlrm_hash(3, v, buckets);
    REQUIRE(row >= 0);
    REQUIRE(row < buckets);
    ++counts[static_cast<size_t>(row)];
    same_in_next_field += row == models::dlrm_hash(4, v, buckets) ? 1 : 0;
  }
  // 1000 expected per bucket: a uniform hash stays within a few standard deviations (about 31).
  CHECK(*std::min_element(counts.begin(), counts.end()) > 850);
  CHECK(*std::max_element(counts.begin(), counts.end()) < 1150);
  CHECK(same_in_next_field < values / buckets * 2);
  // The empty value and the largest categorical value have rows like any other; the mix is fixed.
  CHECK(models::dlrm_hash(0, data::kCriteoEmpty, 1000) != models::dlrm_hash(0, 0, 1000));
  CHECK(models::dlrm_hash(25, 0xffffffffll, 1) == 0);
  // value 0 of fields 0 and 1: splitmix64's first two outputs from seed 0 (0xe220a8397b1dcdaf,
  // 0x6e789e6aa1b965f4), modulo 2^62.
  CHECK(models::dlrm_hash(0, 0, int64_t{1} << 62) == 0x2220a8397b1dcdafll);
  CHECK(models::dlrm_hash(1, 0, int64_t{1} << 62) == 0x2e789e6aa1b965f4ll);
  CHECK_THROWS(models::dlrm_hash(0, 5, 0));
}

TEST_CASE("dlrm model: bad settings and inputs are refused naming the key", "[models]") {
  Generator generator(44);
  auto fails = [&generator](ModelOptions options, const std::string& part) {
    INFO(part);
    CHECK_THROWS_AS(models::build_model(options, generator), ConfigError);
    CHECK_THROWS_WITH(models::build_model(options, generator), Catch::Contains(part));
  };
  ModelOptions options = small_dlrm();
  options.hash_buckets = {5, 5, 5};
  fails(options,
        "model.hash_buckets: give one row count for every categorical field or one for each of the 26, "
        "got 3 entries");
  options.hash_buckets = std::vector<int64_t>(26, 5);
  options.hash_buckets[7] = 0;
  fails(options, "model.hash_buckets[7] must be at least 1, got 0");
  options.hash_buckets = {INT64_MAX / 4};
  fails(options, "the fields' rows add up past a 64-bit count");
  options.hash_buckets = {int64_t{1} << 56};
  options.embedding_dim = 4;
  options.bottom_mlp = {4};
  fails(options, "hold more bytes of f32 than a 64-bit count holds");
  options = small_dlrm();
  options.bottom_mlp = {8, 5};
  fails(options, "model.bottom_mlp must end in model.embedding_dim (4)");
  options.bottom_mlp = {};
  fails(options, "model.bottom_mlp must end in model.embedding_dim (4)");
  options = small_dlrm();
  options.top_mlp = {16, 0};
  fails(options, "model.top_mlp[1] must be at least 1, got 0");
  options = small_dlrm();
  options.embedding_dim = 0;
  fails(options, "model.embedding_dim must be at least 1");

  // An empty top MLP puts the head straight on the interactions.
  options = small_dlrm();
  options.top_mlp = {};
  auto model = models::build_model(options, generator);
  CHECK(model->forward(criteo_rows(3, 45)).shape() == Shape{3, 2});
  CHECK_THROWS_AS(model->forward(Tensor::zeros({3, 38}, DType::i64)), ShapeError);
  CHECK_THROWS_WITH(model->forward(Tensor::zeros({3, 38}, DType::i64)), Catch::Contains("[batch, 39]"));
  CHECK_THROWS_AS(model->forward(Tensor::zeros({3, 39}, DType::f32)), TypeError);
}

TEST_CASE("dlrm model on the GPU matches the CPU forward and gradients", "[cuda][models]") {
  if (testing::gpu_missing("the CUDA dlrm model test")) return;
  ModelOptions options = small_dlrm();
  Generator cpu_generator(46), gpu_generator(46);  // the same weights
  auto cpu_model = models::build_model(options, cpu_generator);
  auto gpu_model = models::build_model(options, gpu_generator);
  gpu_model->to(testing::kGpu);
  const int64_t batch = 33;
  const Tensor rows = criteo_rows(batch, 47);
  std::vector<int64_t> targets;
  for (int64_t b = 0; b < batch; ++b) targets.push_back((b * 7) % 2);
  const Tensor target = Tensor::from_vector<int64_t>(targets, {batch});
  const Tensor cpu_logits = cpu_model->forward(rows);
  const Tensor gpu_logits = gpu_model->forward(rows.to(testing::kGpu));
  REQUIRE(gpu_logits.device() == testing::kGpu);
  const std::vector<float> expected = cpu_logits.to_vector<float>(), actual = gpu_logits.to_vector<float>();
  for (size_t i = 0; i < expected.size(); ++i)
    CHECK(std::fabs(actual[i] - expected[i]) <= 1e-4f * (1.0f + std::fabs(expected[i])));
  ops::cross_entropy(cpu_logits, target).backward();
  ops::cross_entropy(gpu_logits, target.to(testing::kGpu)).backward();
  const auto cpu_parameters = cpu_model->named_parameters(), gpu_parameters = gpu_model->named_parameters();
  for (size_t p = 0; p < cpu_parameters.size(); ++p) {
    const std::string& name = cpu_parameters[p].first;
    INFO(name);
    const Tensor& cpu_tensor = cpu_parameters[p].second;
    const Tensor& gpu_tensor = gpu_parameters[p].second;
    const bool sparse = name == "embedding.weight";
    const Tensor cpu_grad = sparse ? cpu_tensor.row_sparse_grad().rows.front() : cpu_tensor.grad();
    const Tensor gpu_grad = sparse ? gpu_tensor.row_sparse_grad().rows.front() : gpu_tensor.grad();
    if (sparse)
      CHECK(gpu_tensor.row_sparse_grad().indices.front().to_vector<int64_t>() ==
            cpu_tensor.row_sparse_grad().indices.front().to_vector<int64_t>());
    const std::vector<float> want = cpu_grad.to_vector<float>(), got = gpu_grad.to_vector<float>();
    REQUIRE(got.size() == want.size());
    double scale = 0.0;
    for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t i = 0; i < want.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 1e-4 * (scale + 1e-6));
  }
}
