// The optimizer's own step extensions (step_extensions.h): row-sparse tables get their updater from
// make_optimizer and from direct construction, top-k runs inside step() when OptimizerOptions asks for it,
// and both keep their state in state_dict(); the combinations the optimizer cannot honour are refused.
#include <algorithm>
#include <cmath>
#include <memory>

#include "opsnn/nn/layers.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/adagrad.h"
#include "opsnn/optim/adam.h"
#include "opsnn/optim/lamb.h"
#include "opsnn/optim/sgd.h"
#include "opsnn/optim/step_extensions.h"
#include "optim/optim_test_support.h"

using namespace opsnn;
using namespace opsnn::optim;

namespace {

// One backward through a sparse Embedding over `indices`: its weight gets a row-sparse gradient.
void embedding_backward(nn::Embedding& table, const std::vector<int64_t>& indices) {
  Tensor ids = Tensor::from_vector(indices, {static_cast<int64_t>(indices.size())});
  ops::sum(ops::mul(table.forward(ids), table.forward(ids))).backward();
}

std::vector<float> weights_of(const nn::Embedding& table) { return table.weight().to_vector<float>(); }

}  // namespace

TEST_CASE("make_optimizer and direct construction both come with the row-sparse updater", "[sparse][optim]") {
  Generator generator(3);
  nn::Embedding a(nn::EmbeddingOptions(16, 4).sparse(true), generator);
  Generator again(3);
  nn::Embedding b(nn::EmbeddingOptions(16, 4).sparse(true), again);
  REQUIRE(weights_of(a) == weights_of(b));

  auto by_name = make_optimizer("adam", a.named_parameters(), OptimizerOptions(0.1));
  Adam direct(b.named_parameters(), AdamOptions(0.1));
  REQUIRE(by_name->sparse_updater() != nullptr);
  REQUIRE(direct.sparse_updater() != nullptr);
  const std::vector<float> before = weights_of(a);
  for (int step = 0; step < 3; ++step) {
    embedding_backward(a, {1, 5, 5, 9});
    embedding_backward(b, {1, 5, 5, 9});
    by_name->step();
    direct.step();
    by_name->zero_grad();
    direct.zero_grad();
  }
  const std::vector<float> after = weights_of(a);
  CHECK(after == weights_of(b));
  // Lazy Adam: the touched rows moved, every other row is bit-unchanged.
  for (int64_t row = 0; row < 16; ++row)
    for (int64_t col = 0; col < 4; ++col) {
      size_t i = static_cast<size_t>(row * 4 + col);
      if (row == 1 || row == 5 || row == 9)
        CHECK(after[i] != before[i]);
      else
        CHECK(after[i] == before[i]);
    }
}

TEST_CASE("sparse Adagrad through an Embedding equals dense Adagrad on the same lookups", "[sparse][optim]") {
  // A zero gradient leaves dense Adagrad's parameter and sum unchanged (no decay), so the lazy update of the
  // sparse table and the dense update of the same table with dense gradients give the same bits.
  Generator generator(4);
  nn::Embedding sparse(nn::EmbeddingOptions(12, 3).sparse(true), generator);
  Generator again(4);
  nn::Embedding dense(nn::EmbeddingOptions(12, 3).sparse(false), again);
  Adagrad sparse_optimizer(sparse.named_parameters(), AdagradOptions(0.1).initial_accumulator_value(0.1));
  auto dense_optimizer =
      make_optimizer("adagrad", dense.named_parameters(), OptimizerOptions(0.1).initial_accumulator_value(0.1));
  REQUIRE(sparse_optimizer.sparse_updater() != nullptr);
  REQUIRE(dense_optimizer->sparse_updater() == nullptr);
  const std::vector<float> before = weights_of(sparse);
  const std::vector<std::vector<int64_t>> lookups = {{2, 7, 7}, {0, 2, 11}, {7}};
  for (const std::vector<int64_t>& ids : lookups) {
    embedding_backward(sparse, ids);
    embedding_backward(dense, ids);
    sparse_optimizer.step();
    dense_optimizer->step();
    sparse_optimizer.zero_grad();
    dense_optimizer->zero_grad();
    REQUIRE(weights_of(sparse) == weights_of(dense));
  }
  const std::vector<float> after = weights_of(sparse);
  for (int64_t row = 0; row < 12; ++row) {
    const bool touched = row == 0 || row == 2 || row == 7 || row == 11;
    for (int64_t col = 0; col < 3; ++col) CHECK((after[row * 3 + col] != before[row * 3 + col]) == touched);
  }
}

TEST_CASE("LAMB refuses a row-sparse table, naming it and the optimizers that can", "[sparse][optim]") {
  Generator generator(1);
  nn::Embedding table(nn::EmbeddingOptions(8, 2).sparse(true), generator);
  CHECK_THROWS_AS(make_optimizer("lamb", table.named_parameters()), ConfigError);
  CHECK_THROWS_WITH(LAMB(table.named_parameters(), LambOptions()),
                    Catch::Contains("'weight' has row-sparse gradients, which lamb cannot update") &&
                        Catch::Contains("trust ratio needs whole-tensor norms") &&
                        Catch::Contains("adam, adamw, adagrad or sgd"));
}

TEST_CASE("top-k inside step() equals sparsifying the arena by hand before a plain step", "[sparse][optim]") {
  TopKOptions topk;
  topk.density = 0.1;
  topk.seed = 11;
  NamedParameters with = testing::random_parameters({{40, 10}, {40}}, 5);
  NamedParameters without = testing::random_parameters({{40, 10}, {40}}, 5);
  SGD inside(with, SgdOptions(0.05).sparsification(topk));
  SGD outside(without, SgdOptions(0.05));
  REQUIRE(inside.sparsifies());
  REQUIRE_FALSE(outside.sparsifies());
  GradientSparsifier by_hand(outside, topk);
  for (int step = 0; step < 5; ++step) {
    auto grads = testing::make_grads(with, step, 2, testing::GradPattern::normal);
    testing::write_grads(with, grads);
    testing::write_grads(without, grads);
    inside.step();
    std::optional<TopKStepReport> report = by_hand.apply(outside);
    outside.step();
    REQUIRE(inside.last_sparsification().has_value());
    REQUIRE(report.has_value());
    CHECK(inside.last_sparsification()->selected_count == report->selected_count);
    CHECK(inside.last_sparsification()->achieved_density < 0.2);
    inside.zero_grad();
    outside.zero_grad();
  }
  CHECK(testing::values_of(with) == testing::values_of(without));
}

TEST_CASE("top-k works with every built-in optimizer: by hand equals inside and density 1 equals dense",
          "[sparse][optim]") {
  for (const std::string name : {"sgd", "adam", "adamw", "lamb", "lion"}) {
    INFO("optimizer " << name);
    const OptimizerOptions base = OptimizerOptions(name == "sgd" ? 0.05 : 1e-3).weight_decay(0.01);
    TopKOptions topk;
    topk.density = 0.1;
    topk.seed = 3;
    // Inside step() and by hand before a plain step: the same parameters (momentum correction off: it
    // moves SGD's momentum only; every rule then sees the sparsified gradient with its own states).
    NamedParameters with = testing::random_parameters({{40, 10}, {40}}, 5);
    NamedParameters without = testing::random_parameters({{40, 10}, {40}}, 5);
    auto inside = make_optimizer(name, with, OptimizerOptions(base).sparsification(topk));
    auto outside = make_optimizer(name, without, base);
    GradientSparsifier by_hand(*outside, topk);
    // Density 1 sends every element every step (nothing waits): exactly the dense optimizer.
    TopKOptions everything = topk;
    everything.density = 1.0;
    NamedParameters full = testing::random_parameters({{40, 10}, {40}}, 5);
    NamedParameters dense = testing::random_parameters({{40, 10}, {40}}, 5);
    auto full_topk = make_optimizer(name, full, OptimizerOptions(base).sparsification(everything));
    auto dense_optimizer = make_optimizer(name, dense, base);
    for (int step = 0; step < 6; ++step) {
      auto grads = testing::make_grads(with, step, 2, testing::GradPattern::normal);
      for (const NamedParameters* parameters : {&with, &without, &full, &dense})
        testing::write_grads(*parameters, grads);
      inside->step();
      REQUIRE(by_hand.apply(*outside).has_value());
      outside->step();
      full_topk->step();
      dense_optimizer->step();
      CHECK(full_topk->last_sparsification()->selected_count >= full_topk->arena().parameter_elements());
      for (Optimizer* optimizer : {inside.get(), outside.get(), full_topk.get(), dense_optimizer.get()})
        optimizer->zero_grad();
    }
    CHECK(inside->last_sparsification()->achieved_density < 0.2);
    CHECK(testing::values_of(with) == testing::values_of(without));
    CHECK(testing::values_of(full) == testing::values_of(dense));
    // The sparse run moved differently from the dense one (the test can fail).
    CHECK(testing::values_of(with) != testing::values_of(dense));
  }
}

TEST_CASE("top-k state travels in state_dict and resumes bit-identically", "[sparse][optim]") {
  TopKOptions topk;
  topk.density = 0.05;
  NamedParameters first = testing::random_parameters({{30, 30}}, 8);
  SGD optimizer(first, SgdOptions(0.1).sparsification(topk));
  for (int step = 0; step < 3; ++step) {
    testing::write_grads(first, testing::make_grads(first, step, 4, testing::GradPattern::normal));
    optimizer.step();
    optimizer.zero_grad();
  }
  StateDict saved = optimizer.state_dict();
  REQUIRE(saved.count("@topk.accumulator") == 1);
  REQUIRE(saved.count("@topk.steps") == 1);

  NamedParameters second = testing::random_parameters({{30, 30}}, 8);
  for (size_t i = 0; i < first.size(); ++i) second[i].second.copy_(first[i].second);
  SGD resumed(second, SgdOptions(0.1).sparsification(topk));
  resumed.load_state_dict(saved);
  for (int step = 3; step < 6; ++step) {
    auto grads = testing::make_grads(first, step, 4, testing::GradPattern::normal);
    testing::write_grads(first, grads);
    testing::write_grads(second, grads);
    optimizer.step();
    resumed.step();
    optimizer.zero_grad();
    resumed.zero_grad();
  }
  CHECK(testing::values_of(first) == testing::values_of(second));

  // The same dict offered to an optimizer without top-k: its "@" entries belong to nothing there.
  NamedParameters dense_parameters = testing::random_parameters({{30, 30}}, 8);
  SGD dense(dense_parameters, SgdOptions(0.1));
  CHECK_THROWS_WITH(dense.load_state_dict(saved),
                    Catch::Contains("'@topk.") && Catch::Contains("belongs to a setting this optimizer does not use"));
  // And a dense dict offered to a top-k optimizer: the sparsifier's entries are missing.
  SGD needs_topk(testing::random_parameters({{30, 30}}, 8), SgdOptions(0.1).sparsification(topk));
  CHECK_THROWS_WITH(needs_topk.load_state_dict(dense.state_dict()), Catch::Contains("'@topk.accumulator' is missing"));
}

TEST_CASE("top-k is refused with loss scaling and with momentum the sparsifier would double", "[sparse][optim]") {
  TopKOptions topk;
  auto parameters = [] { return testing::random_parameters({{4, 4}}, 1); };
  CHECK_THROWS_WITH(
      SGD(parameters(), SgdOptions().sparsification(topk).loss_scaling(LossScalingOptions().enabled(true))),
      Catch::Contains("cannot be combined with loss scaling"));
  TopKOptions corrected = topk;
  corrected.momentum_correction = true;
  CHECK_THROWS_WITH(SGD(parameters(), SgdOptions().momentum(0.9).sparsification(corrected)),
                    Catch::Contains("DGC momentum correction") && Catch::Contains("momentum 0"));
  CHECK_THROWS_WITH(Adam(parameters(), AdamOptions().sparsification(corrected)),
                    Catch::Contains("DGC momentum correction"));
  CHECK_NOTHROW(SGD(parameters(), SgdOptions().sparsification(corrected)));
  TopKOptions bad = topk;
  bad.density = 0.0;
  CHECK_THROWS_AS(SGD(parameters(), SgdOptions().sparsification(bad)), ConfigError);
}

TEST_CASE("top-k local gradient clipping scales the step's gradient to the norm before it accumulates",
          "[sparse][optim]") {
  TopKOptions topk;
  topk.density = 1.0;  // everything is sent: the step applies exactly the clipped gradient
  topk.local_clip_norm = 0.5;
  NamedParameters clipped = testing::random_parameters({{20, 10}, {20}}, 9);
  NamedParameters reference = testing::random_parameters({{20, 10}, {20}}, 9);
  SGD with_clip(clipped, SgdOptions(0.1).sparsification(topk));
  SGD plain(reference, SgdOptions(0.1));
  for (int step = 0; step < 3; ++step) {
    auto grads = testing::make_grads(clipped, step, 6, testing::GradPattern::normal);  // norm ~ 15 >> 0.5
    double sum = 0.0;
    for (const auto& tensor : grads)
      for (double g : tensor) sum += g * g;
    const double factor = 0.5 / std::sqrt(sum);
    testing::write_grads(clipped, grads);
    for (auto& tensor : grads)
      for (double& g : tensor) g = static_cast<float>(static_cast<float>(g) * static_cast<float>(factor));
    testing::write_grads(reference, grads);
    with_clip.step();
    plain.step();
    CHECK(std::fabs(with_clip.gradient_sparsifier()->last_clip_factor() - factor) <= 1e-12 * factor);
    with_clip.zero_grad();
    plain.zero_grad();
  }
  const auto a = testing::values_of(clipped), b = testing::values_of(reference);
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t i = 0; i < a[t].size(); ++i)
      REQUIRE(std::fabs(a[t][i] - b[t][i]) <= 1e-6 * std::max(1.0, std::fabs(b[t][i])));
  // A gradient already below the norm is left alone; 4 ranks clip each to norm / 2.
  with_clip.gradient_sparsifier()->set_ranks(4);
  auto small = testing::make_grads(clipped, 7, 6, testing::GradPattern::normal, 1e-3);
  testing::write_grads(clipped, small);
  with_clip.step();
  CHECK(with_clip.gradient_sparsifier()->last_clip_factor() == 1.0);
  TopKOptions bad = topk;
  bad.local_clip_norm = -1.0;
  CHECK_THROWS_WITH(SGD(testing::random_parameters({{4}}, 1), SgdOptions().sparsification(bad)),
                    Catch::Contains("topk.local_clip_norm = -1"));
}
