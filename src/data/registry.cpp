// The dataset registry and the built-in datasets' builders (one each: its files or generator and its
// disjoint train and test splits).
#include "opsnn/data/registry.h"

#include <array>
#include <map>
#include <mutex>
#include <utility>

#include "opsnn/core/error.h"
#include "opsnn/data/cifar.h"
#include "opsnn/data/fashion_mnist.h"

namespace opsnn::data {
namespace {

struct DatasetRegistry {
  std::mutex mutex;
  std::map<std::string, DatasetBuilder> builders;
};

DatasetRegistry& registry() {
  static DatasetRegistry instance;
  return instance;
}

DatasetSplits fashion_mnist(const DatasetOptions& options) {
  Normalization normalization = options.normalize ? Normalization::fashion_mnist() : Normalization::none();
  return {std::make_shared<FashionMnist>(options.root, Split::train, normalization),
          std::make_shared<FashionMnist>(options.root, Split::test, normalization)};
}

DatasetSplits cifar(CifarVariant variant, const DatasetOptions& options) {
  const std::array<Normalization, 3> normalization =
      options.normalize ? Cifar::standard_normalization(variant) : Cifar::no_normalization();
  return {std::make_shared<Cifar>(options.root, variant, Split::train, normalization),
          std::make_shared<Cifar>(options.root, variant, Split::test, normalization)};
}

DatasetSplits image_folder(const DatasetOptions& options) {
  ImageFolderOptions settings = options.image_folder;
  settings.root = options.root;
  settings.normalize = options.normalize;
  settings.split = "train";
  settings.random_resized_crop = true;
  settings.classes.clear();
  auto train = std::make_shared<ImageFolder>(settings);
  settings.split = "val";
  settings.random_resized_crop = false;
  settings.classes = train->class_names();
  return {std::move(train), std::make_shared<ImageFolder>(settings)};
}

// Generated datasets: the test split continues the sample sequence after the training split's samples.
template <typename Generated, typename Options>
DatasetSplits generated(Options settings, int64_t test_size) {
  settings.sample_offset = 0;
  auto train = std::make_shared<Generated>(settings);
  settings.sample_offset = settings.size;
  settings.size = test_size;
  return {std::move(train), std::make_shared<Generated>(settings)};
}

const std::vector<std::pair<std::string, DatasetBuilder>>& builtin_datasets() {
  static const std::vector<std::pair<std::string, DatasetBuilder>> datasets{
      {"fashion_mnist", fashion_mnist},
      {"synthetic",
       [](const DatasetOptions& o) { return generated<SyntheticImages>(o.synthetic, o.synthetic_test_size); }},
      {"ctr_synthetic", [](const DatasetOptions& o) { return generated<SyntheticCtr>(o.ctr, o.ctr_test_size); }},
      {"cifar10", [](const DatasetOptions& o) { return cifar(CifarVariant::cifar10, o); }},
      {"cifar100", [](const DatasetOptions& o) { return cifar(CifarVariant::cifar100, o); }},
      {"image_folder", image_folder},
  };
  return datasets;
}

}  // namespace

void register_dataset(const std::string& name, DatasetBuilder builder) {
  OPSNN_CHECK_AS(ConfigError, !name.empty() && builder, "register_dataset needs a name and a builder");
  std::lock_guard lock(registry().mutex);
  registry().builders[name] = std::move(builder);
}

std::vector<std::string> known_datasets() {
  std::lock_guard lock(registry().mutex);
  std::vector<std::string> names;
  for (const auto& entry : registry().builders) names.push_back(entry.first);
  return names;
}

DatasetSplits build_datasets(const DatasetOptions& options) {
  DatasetBuilder builder;
  {
    std::lock_guard lock(registry().mutex);
    auto found = registry().builders.find(options.name);
    if (found != registry().builders.end()) builder = found->second;
  }
  if (!builder) {
    std::string list;
    for (const std::string& name : known_datasets()) list += (list.empty() ? "" : ", ") + name;
    if (list.empty())
      throw ConfigError(detail::concat("unknown dataset '", options.name,
                                       "': no dataset is registered (a program calls opsnn::register_builtins() "
                                       "once, or includes <opsnn/opsnn.h>)"));
    throw ConfigError(detail::concat("unknown dataset '", options.name, "' (known: ", list, ")"));
  }
  DatasetSplits splits = builder(options);
  OPSNN_CHECK_AS(ConfigError, splits.train != nullptr && splits.test != nullptr, "the builder registered for dataset '",
                 options.name, "' returned no train or test split");
  return splits;
}

const std::vector<std::string>& builtin_dataset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& entry : builtin_datasets()) out.push_back(entry.first);
    return out;
  }();
  return names;
}

void register_builtin_datasets() {
  for (const auto& [name, builder] : builtin_datasets()) register_dataset(name, builder);
}

}  // namespace opsnn::data
