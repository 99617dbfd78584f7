// The dataset registry and the built-in datasets' builders (one each: its files or generator and its
// disjoint train and test splits).
#include "opsnn/data/registry.h"

#include <array>
#include <cmath>
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

// options.mean / options.std for a dataset of `channels` channels: empty (the dataset's own) or one each.
bool custom_statistics(const DatasetOptions& options, size_t channels) {
  OPSNN_CHECK_AS(ConfigError, options.mean.size() == options.std.size(), "data.mean has ", options.mean.size(),
                 " entries and data.std ", options.std.size(), "; give both, one per channel, or neither");
  if (options.mean.empty()) return false;
  OPSNN_CHECK_AS(ConfigError, options.mean.size() == channels, "data.mean and data.std have ", options.mean.size(),
                 " entries; ", options.name, " has ", channels, " channel(s)");
  for (size_t c = 0; c < channels; ++c)
    OPSNN_CHECK_AS(ConfigError, std::isfinite(options.mean[c]) && std::isfinite(options.std[c]) && options.std[c] > 0,
                   "data.std[", c, "] = ", options.std[c], " must be > 0 (and data.mean[", c, "] = ", options.mean[c],
                   " finite)");
  return true;
}

// Generated data has no normalisation to replace.
void no_statistics(const DatasetOptions& options) {
  OPSNN_CHECK_AS(ConfigError, options.mean.empty() && options.std.empty(), "data.mean and data.std apply to ",
                 "fashion_mnist, cifar10, cifar100 and image_folder, not to the generated ", options.name);
}

Normalization channel_statistics(const DatasetOptions& options, size_t c) {
  return {static_cast<float>(options.mean[c]), static_cast<float>(options.std[c])};
}

DatasetSplits fashion_mnist(const DatasetOptions& options) {
  Normalization normalization = !options.normalize              ? Normalization::none()
                                : custom_statistics(options, 1) ? channel_statistics(options, 0)
                                                                : Normalization::fashion_mnist();
  return {std::make_shared<FashionMnist>(options.root, Split::train, normalization),
          std::make_shared<FashionMnist>(options.root, Split::test, normalization)};
}

DatasetSplits cifar(CifarVariant variant, const DatasetOptions& options) {
  std::array<Normalization, 3> normalization =
      options.normalize ? Cifar::standard_normalization(variant) : Cifar::no_normalization();
  if (options.normalize && custom_statistics(options, 3))
    for (size_t c = 0; c < 3; ++c) normalization[c] = channel_statistics(options, c);
  return {std::make_shared<Cifar>(options.root, variant, Split::train, normalization),
          std::make_shared<Cifar>(options.root, variant, Split::test, normalization)};
}

DatasetSplits image_folder(const DatasetOptions& options) {
  ImageFolderOptions settings = options.image_folder;
  settings.root = options.root;
  settings.normalize = options.normalize;
  if (options.normalize && custom_statistics(options, 3))
    for (size_t c = 0; c < 3; ++c) {
      settings.mean[c] = static_cast<float>(options.mean[c]);
      settings.std[c] = static_cast<float>(options.std[c]);
    }
  settings.split = "train";
  settings.random_resized_crop = true;
  settings.classes.clear();
  auto train = std::make_shared<ImageFolder>(settings);
  settings.split = "val";
  settings.random_resized_crop = false;
  settings.classes = train->class_names();
  return {std::move(train), std::make_shared<ImageFolder>(settings)};
}

// Criteo-format click logs: no pixel statistics to replace; the test split is test.txt or held out.
DatasetSplits criteo(const DatasetOptions& options) {
  OPSNN_CHECK_AS(ConfigError, options.mean.empty() && options.std.empty(),
                 "data.mean and data.std apply to fashion_mnist, cifar10, cifar100 and image_folder, not to criteo");
  CriteoOptions settings = options.criteo;
  settings.root = options.root;
  CriteoSplits splits = load_criteo(settings);
  return {std::move(splits.train), std::move(splits.test)};
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
       [](const DatasetOptions& o) {
         no_statistics(o);
         return generated<SyntheticImages>(o.synthetic, o.synthetic_test_size);
       }},
      {"ctr_synthetic",
       [](const DatasetOptions& o) {
         no_statistics(o);
         return generated<SyntheticCtr>(o.ctr, o.ctr_test_size);
       }},
      {"cifar10", [](const DatasetOptions& o) { return cifar(CifarVariant::cifar10, o); }},
      {"cifar100", [](const DatasetOptions& o) { return cifar(CifarVariant::cifar100, o); }},
      {"image_folder", image_folder},
      {"criteo", criteo},
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
