// Datasets by name, like models: a builder turns DatasetOptions into the train and test splits. The
// built-ins (fashion_mnist, synthetic, ctr_synthetic, cifar10, cifar100, image_folder, criteo) are listed
// once in src/data/registry.cpp and registered by the composition root (opsnn::register_builtins); a
// program may register its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "opsnn/data/criteo.h"
#include "opsnn/data/dataset.h"
#include "opsnn/data/image_folder.h"
#include "opsnn/data/synthetic.h"

namespace opsnn::data {

// What a builder gets: the name, a root folder for file-backed datasets, and the settings of the
// built-in generated ones.
struct DatasetOptions {
  std::string name = "fashion_mnist";
  std::string root;       // folder of the dataset's files; empty: the dataset's default (CIFAR has none)
  bool normalize = true;  // per-channel mean/std normalisation where the dataset defines it
  // With normalize, statistics other than the dataset's own: one mean and std per channel (of pixels in
  // [0, 1]); empty: the dataset's (Fashion-MNIST's, CIFAR's, ImageNet's for image_folder).
  std::vector<double> mean, std;
  // Generated datasets: size is the training split's; the test split's samples follow it
  // (sample_offset is set per split).
  SyntheticImageOptions synthetic;  // synthetic
  int64_t synthetic_test_size = 256;
  SyntheticCtrOptions ctr;  // ctr_synthetic
  int64_t ctr_test_size = 10000;
  // image_folder: the transform and bad-image settings (root and normalize come from above; the splits
  // are <root>/train, with random resized crops, and <root>/val with its class list, resized and centred).
  ImageFolderOptions image_folder;
  // criteo: the split, bad-line and line-count settings (root comes from above).
  CriteoOptions criteo;
};

struct DatasetSplits {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> test;
};

using DatasetBuilder = std::function<DatasetSplits(const DatasetOptions&)>;

// Adds or replaces a builder (ConfigError without a name or builder).
void register_dataset(const std::string& name, DatasetBuilder builder);
// Builds options.name: ConfigError listing the known names for an unknown one; DataError from the
// dataset for missing or corrupt files.
DatasetSplits build_datasets(const DatasetOptions& options);
// Registered names, sorted.
std::vector<std::string> known_datasets();
// The built-ins in the order configs list them, and their registration.
const std::vector<std::string>& builtin_dataset_names();
void register_builtin_datasets();

}  // namespace opsnn::data
