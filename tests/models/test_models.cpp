// Tests of the model zoo: parameter counts against torchvision's, names, output shapes, backward reaching
// every parameter, zero-init of residual BatchNorms, the registry's errors.
#include "opsnn/core/error.h"
#include "opsnn/models/models.h"
#include "opsnn/nn/layers.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using models::ModelOptions;

static ModelOptions options_for(const std::string& arch) {
  ModelOptions options;
  options.arch = arch;
  return options;
}

TEST_CASE("resnet parameter counts match torchvision", "[models]") {
  Generator generator(1);
  ModelOptions options = options_for("resnet50");
  options.in_channels = 3;
  options.num_classes = 1000;
  auto resnet50 = models::build_model(options, generator);
  CHECK(models::count_parameters(*resnet50) == 25557032);
  auto named = resnet50->named_parameters();
  CHECK(named.size() == 161);
  CHECK(named.front().first == "conv1.weight");
  CHECK(named.back().first == "fc.bias");
  options.arch = "resnet18";
  CHECK(models::count_parameters(*models::build_model(options, generator)) == 11689512);
  options.arch = "resnet34";
  CHECK(models::count_parameters(*models::build_model(options, generator)) == 21797672);
  bool has_downsample = false;
  for (const auto& [name, tensor] : resnet50->named_parameters())
    has_downsample |= name == "layer2.0.downsample.0.weight";
  CHECK(has_downsample);
}

TEST_CASE("small models: shapes and gradients reach every parameter", "[models]") {
  Generator generator(2);
  for (const char* arch : {"mlp", "small_cnn"}) {
    auto model = models::build_model(options_for(arch), generator);
    Tensor images = Tensor::normal({4, 1, 28, 28}, 0, 1, generator);
    Tensor logits = model->forward(images);
    REQUIRE(logits.shape() == Shape{4, 10});
    Tensor target = Tensor::from_vector<int64_t>({0, 3, 9, 1}, {4});
    ops::cross_entropy(logits, target).backward();
    for (const auto& [name, tensor] : model->named_parameters()) {
      INFO(arch << " " << name);
      REQUIRE(tensor.grad().defined());
      double norm = 0;
      for (float g : tensor.grad().to_vector<float>()) norm += double(g) * g;
      CHECK(norm > 0);
    }
  }
  CHECK(models::count_parameters(*models::build_model(options_for("small_cnn"), generator)) ==
        16 * 9 + 16 + 32 * 16 * 9 + 32 + 32 * 7 * 7 * 10 + 10);
}

TEST_CASE("cifar-stem resnet18 trains a step on small images, zero-init residual", "[models]") {
  Generator generator(3);
  ModelOptions options = options_for("resnet18");
  options.stem = "cifar";
  options.zero_init_residual = true;
  auto model = models::build_model(options, generator);
  Tensor images = Tensor::normal({2, 1, 8, 8}, 0, 1, generator);
  Tensor logits = model->forward(images);
  REQUIRE(logits.shape() == Shape{2, 10});
  for (const auto& [name, tensor] : model->named_parameters())
    if (name == "layer1.0.bn2.weight") CHECK(tensor.to_vector<float>() == std::vector<float>(64, 0.0f));
  ops::cross_entropy(logits, Tensor::from_vector<int64_t>({1, 2}, {2})).backward();
  for (const auto& [name, tensor] : model->named_parameters()) REQUIRE(tensor.grad().defined());
}

TEST_CASE("ctr model: sparse embedding gradients and id validation", "[models]") {
  Generator generator(4);
  ModelOptions options = options_for("ctr");
  options.field_vocab_sizes = {5, 7, 3};
  options.embedding_dim = 4;
  options.hidden = {8};
  auto model = models::build_model(options, generator);
  Tensor ids = Tensor::from_vector<int64_t>({0, 6, 2, 4, 0, 0}, {2, 3});
  Tensor logits = model->forward(ids);
  REQUIRE(logits.shape() == Shape{2, 2});
  ops::cross_entropy(logits, Tensor::from_vector<int64_t>({1, 0}, {2})).backward();
  Tensor table = model->named_parameters().front().second;
  CHECK(table.shape() == Shape{15, 4});
  REQUIRE(table.sparse_grad());
  REQUIRE(!table.row_sparse_grad().empty());
  // field offsets: field 1 starts at row 5, field 2 at row 12
  std::vector<int64_t> rows = table.row_sparse_grad().indices.front().to_vector<int64_t>();
  CHECK(rows == std::vector<int64_t>{0, 11, 14, 4, 5, 12});
  CHECK_THROWS_WITH(model->forward(Tensor::from_vector<int64_t>({0, 7, 0}, {1, 3})),
                    Catch::Contains("id 7 of field 1"));
}

TEST_CASE("model registry errors list the known models", "[models]") {
  Generator generator(5);
  CHECK_THROWS_WITH(models::build_model(options_for("resnet51"), generator),
                    Catch::Contains("unknown model 'resnet51'") && Catch::Contains("resnet50"));
  ModelOptions bad_stem = options_for("resnet18");
  bad_stem.stem = "tiny";
  CHECK_THROWS_WITH(models::build_model(bad_stem, generator), Catch::Contains("model.stem"));
  CHECK_THROWS_AS(models::register_model("nothing", nullptr), ConfigError);
  models::register_model("returns_nothing",
                         [](const ModelOptions&, Generator&) { return std::shared_ptr<nn::Module>(); });
  CHECK_THROWS_WITH(models::build_model(options_for("returns_nothing"), generator),
                    Catch::Contains("returns_nothing") && Catch::Contains("returned no model"));
}

TEST_CASE("model options that would build a wrong or broken model are config errors", "[models]") {
  Generator generator(5);
  ModelOptions mlp = options_for("mlp");
  mlp.image_size = -28;  // built a 784-input MLP
  CHECK_THROWS_AS(models::build_model(mlp, generator), ConfigError);
  mlp.image_size = int64_t{1} << 32;  // in_channels * image_size^2 wrapped
  CHECK_THROWS_WITH(models::build_model(mlp, generator), Catch::Contains("overflows"));
  ModelOptions ctr = options_for("ctr");
  ctr.field_vocab_sizes = {10, 10};
  ctr.hidden = {0};
  CHECK_THROWS_WITH(models::build_model(ctr, generator), Catch::Contains("model.hidden[0] must be at least 1"));
  ctr.hidden = {8};
  ctr.field_vocab_sizes = {INT64_MAX, INT64_MAX};
  CHECK_THROWS_WITH(models::build_model(ctr, generator), Catch::Contains("model.field_vocab_sizes"));
  CHECK_THROWS_AS(nn::Linear(0, 3, generator), ConfigError);
}
