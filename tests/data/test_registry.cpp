// Datasets by name: the built-ins build their disjoint train and test splits, an unknown name lists the
// known ones, and a program's own dataset registers and builds like a built-in.
#include <algorithm>

#include "opsnn/core/error.h"
#include "opsnn/data/registry.h"
#include "opsnn/data/synthetic.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::data;

TEST_CASE("dataset registry: synthetic splits are sized and disjoint", "[data]") {
  DatasetOptions options;
  options.name = "synthetic";
  options.synthetic.size = 40;
  options.synthetic.height = options.synthetic.width = 6;
  options.synthetic_test_size = 12;
  DatasetSplits splits = build_datasets(options);
  REQUIRE(splits.train->size() == 40);
  REQUIRE(splits.test->size() == 12);
  // Test sample i is generated as sample 40 + i of the same sequence: not a copy of a training sample.
  SyntheticImageOptions longer = options.synthetic;
  longer.size = 52;
  SyntheticImages whole(longer);
  CHECK(splits.test->get(std::vector<int64_t>{3}).inputs.to_vector<float>() ==
        whole.get(std::vector<int64_t>{43}).inputs.to_vector<float>());
  CHECK(splits.train->get(std::vector<int64_t>{3}).inputs.to_vector<float>() ==
        whole.get(std::vector<int64_t>{3}).inputs.to_vector<float>());

  options.name = "ctr_synthetic";
  options.ctr.size = 30;
  options.ctr_test_size = 7;
  splits = build_datasets(options);
  CHECK(splits.train->size() == 30);
  CHECK(splits.test->size() == 7);
  CHECK_FALSE(splits.train->is_image());
}

TEST_CASE("dataset registry: unknown names, registration from outside, a builder returning nothing", "[data]") {
  DatasetOptions options;
  options.name = "imagenet21k";
  CHECK_THROWS_AS(build_datasets(options), ConfigError);
  CHECK_THROWS_WITH(build_datasets(options),
                    Catch::Contains("unknown dataset 'imagenet21k'") &&
                        Catch::Contains("ctr_synthetic, fashion_mnist, image_folder, synthetic"));
  CHECK_THROWS_AS(register_dataset("", [](const DatasetOptions&) { return DatasetSplits{}; }), ConfigError);

  register_dataset("tiny_noise", [](const DatasetOptions&) {
    SyntheticImageOptions settings;
    settings.size = 5;
    auto dataset = std::make_shared<SyntheticImages>(settings);
    return DatasetSplits{dataset, dataset};
  });
  options.name = "tiny_noise";
  CHECK(build_datasets(options).train->size() == 5);
  std::vector<std::string> names = known_datasets();
  CHECK(std::find(names.begin(), names.end(), "tiny_noise") != names.end());
  // Configs accept the built-ins, in their fixed order.
  CHECK(builtin_dataset_names() == std::vector<std::string>{"fashion_mnist", "synthetic", "ctr_synthetic", "cifar10",
                                                            "cifar100", "image_folder", "criteo"});

  register_dataset("nothing", [](const DatasetOptions&) { return DatasetSplits{}; });
  options.name = "nothing";
  CHECK_THROWS_WITH(build_datasets(options), Catch::Contains("'nothing' returned no train or test split"));
}

TEST_CASE("dataset registry: other normalisation statistics are checked before any file is read", "[data]") {
  DatasetOptions options;
  options.name = "fashion_mnist";
  options.root = "/nonexistent";
  options.mean = {0.5, 0.5};
  options.std = {0.2, 0.2};
  CHECK_THROWS_WITH(build_datasets(options), Catch::Contains("fashion_mnist has 1 channel(s)"));
  options.mean = {0.5};
  options.std = {0.0};
  CHECK_THROWS_WITH(build_datasets(options), Catch::Contains("data.std[0] = 0 must be > 0"));
  options.std = {};
  CHECK_THROWS_WITH(build_datasets(options), Catch::Contains("give both, one per channel, or neither"));
  options.name = "synthetic";
  options.std = {0.2};
  CHECK_THROWS_WITH(build_datasets(options), Catch::Contains("not to the generated synthetic"));
}
