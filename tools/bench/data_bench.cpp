// opsnn-bench data: images/s of the training input pipeline on a folder of images (image_folder): decode,
// RandomResizedCrop, flip, normalisation and collation into batches by N loader threads, as the trainer
// reads them. tools/bench_data_torch.py runs torchvision's ImageFolder + DataLoader beside it.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "bench/bench.h"
#include "opsnn/core/error.h"
#include "opsnn/data/loader.h"
#include "opsnn/data/registry.h"

namespace opsnn::bench {
namespace {

int run(const std::vector<std::string>& args) {
  for (const std::string& arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: opsnn-bench data --root DIR [--workers 4] [--batch 64] [--batches 16] [--warmup 8] "
          "[--image-size 224] [--seed 0] [--json FILE]\n"
          "  DIR holds DIR/train/<class>/*.jpg|png (and DIR/val/...); times --batches training batches after\n"
          "  --warmup, with --workers loader threads and 2 batches in flight per thread\n");
      return 0;
    }
  check_options(args, {"--root", "--workers", "--batch", "--batches", "--warmup", "--image-size", "--seed", "--json"});
  const std::string root = option(args, "--root", "");
  OPSNN_CHECK_AS(ConfigError, !root.empty(), "--root is required (a folder holding train/<class>/ images)");
  const int workers = parse_positive(args, "--workers", 4);
  const int batch = parse_positive(args, "--batch", 64);
  const int batches = parse_positive(args, "--batches", 16);
  const int warmup = parse_positive(args, "--warmup", 8);
  const int image_size = parse_positive(args, "--image-size", 224);
  const std::string seed_text = option(args, "--seed", "0");
  uint64_t seed = 0;
  auto [end, error] = std::from_chars(seed_text.data(), seed_text.data() + seed_text.size(), seed);
  OPSNN_CHECK_AS(ConfigError, error == std::errc() && end == seed_text.data() + seed_text.size(),
                 "--seed must be a non-negative integer, got '", seed_text, "'");
  const std::string json_path = option(args, "--json", "");

  data::DatasetOptions dataset_options;
  dataset_options.name = "image_folder";
  dataset_options.root = root;
  dataset_options.image_folder.image_size = image_size;
  data::DatasetSplits splits = data::build_datasets(dataset_options);
  data::LoaderOptions loader_options;
  loader_options.batch_size = batch;
  loader_options.shuffle = true;
  loader_options.drop_last = true;
  loader_options.seed = seed;
  loader_options.num_workers = workers;
  loader_options.prefetch = 2 * workers;  // torch's DataLoader default: prefetch_factor 2 per worker
  loader_options.augment.horizontal_flip = true;
  data::DataLoader loader(splits.train, loader_options);
  OPSNN_CHECK_AS(ConfigError, loader.batches_per_epoch() >= warmup + batches, root, ": ", loader.batches_per_epoch(),
                 " batches of ", batch, " per epoch, the measurement needs ", warmup + batches,
                 "; add images or lower --batches / --warmup");

  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) loader.next();  // the pipeline filling: threads started, first batches
  const Clock::time_point start = Clock::now();
  int64_t images = 0;
  for (int i = 0; i < batches; ++i) images += loader.next()->size();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double rate = static_cast<double>(images) / seconds;
  std::printf(
      "opsnn-bench data: %s, %lld training images in %d classes, %d loader thread(s) (%u hardware threads), "
      "batch %d, %dx%d crops\n  %d batches after %d warm-up: %.0f images/s\n",
      root.c_str(), static_cast<long long>(splits.train->size()), static_cast<int>(splits.train->num_classes()),
      workers, std::thread::hardware_concurrency(), batch, image_size, image_size, batches, warmup, rate);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << nlohmann::json{{"images_per_s", rate}, {"workers", workers}, {"batch", batch},
                          {"batches", batches},   {"warmup", warmup},   {"image_size", image_size},
                          {"images", images},     {"seconds", seconds}, {"root", root}}
               .dump()
        << "\n";
    OPSNN_CHECK_AS(Error, static_cast<bool>(out), "cannot write ", json_path);
  }
  return 0;
}

Registration registration{
    {"data", "images/s of decode + crop + flip + collate from an image folder [--root DIR] [--workers N]", run}};

}  // namespace
}  // namespace opsnn::bench
