// Turning a TrainConfig into the pieces the trainer runs: datasets, model options and optimizer options,
// and which model reads which dataset's feature rows. Kept apart from the loop so each mapping from
// config keys to library options sits in one place.
#pragma once

#include <memory>
#include <string>

#include "opsnn/data/dataset.h"
#include "opsnn/data/registry.h"
#include "opsnn/models/models.h"
#include "opsnn/optim/options.h"
#include "opsnn/train/config.h"

namespace opsnn::train {

using Datasets = data::DatasetSplits;

// The models that train on rows of features instead of images, each with the one dataset it reads.
struct RowModel {
  const char* arch;
  const char* dataset;
};
// The row model `arch` names, or the one whose rows `dataset` holds; nullptr for image models and images.
const RowModel* row_model_of_arch(const std::string& arch);
const RowModel* row_model_of_dataset(const std::string& dataset);
// "ctr goes with ctr_synthetic, dlrm with criteo", for messages.
std::string row_model_pairs();

// data.dataset -> the train and test splits (DataError for missing or corrupt files).
Datasets make_datasets(const TrainConfig& config);
// model.* completed from the dataset (channels, classes, image size); ConfigError for a model that does
// not fit the data (ctr or dlrm on images, an image model on feature rows).
models::ModelOptions make_model_options(const TrainConfig& config, const data::Dataset& dataset);
// optimizer.*, scheduler.* and monitor.* -> OptimizerOptions; total_steps feeds the schedule.
// With optimizer.settings.sparsification.method topk the options include make_topk_options(config).
optim::OptimizerOptions make_optimizer_options(const TrainConfig& config, int64_t steps_per_epoch, int64_t total_steps);
// optimizer.settings.sparsification -> TopKOptions; ConfigError naming the key for loss scaling (top-k
// needs unscaled gradients) and for momentum correction without SGD momentum to move into the sparsifier.
optim::TopKOptions make_topk_options(const TrainConfig& config);

}  // namespace opsnn::train
