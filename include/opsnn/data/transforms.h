// Training-time augmentation (random crop with zero padding, horizontal flip) and the seed derivation
// that makes every random decision a pure function of (seed, epoch, sample): reproducible, resumable and
// independent of thread count or batch composition.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace opsnn::data {

class Dataset;
struct Batch;

// Independent random streams drawn from one user seed.
enum class RandomStream : uint64_t { shuffle = 1, augment = 2, sample = 3 };

// A Philox key for (seed, stream, epoch): distinct for distinct triples with overwhelming probability.
uint64_t derive_seed(uint64_t seed, RandomStream stream, int64_t epoch);

// The seed of one sample's own random decisions in one epoch (Dataset::get_batch_seeded: image_folder's
// random-resized-crop box), from its own stream, so it is independent of the crop/flip decisions below.
uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t sample_index);

// The sample order of one epoch: a Fisher-Yates shuffle of 0..count-1 driven by Philox.
std::vector<int64_t> shuffled_indices(int64_t count, uint64_t seed, int64_t epoch);

struct AugmentOptions {
  // Pad each side by this many pixels (filled with the dataset's background value, i.e. a black pixel
  // after normalisation), then crop a random H x W window back out. 0 disables cropping.
  int64_t crop_padding = 0;
  bool horizontal_flip = false;  // mirror left-right with probability 1/2
  bool any() const { return crop_padding > 0 || horizontal_flip; }
};

// What augmentation does to one sample: the crop window's offset from the centre and the flip.
struct AugmentDecision {
  int64_t shift_y = 0;  // in [-crop_padding, crop_padding]
  int64_t shift_x = 0;
  bool flip = false;
};

AugmentDecision draw_augment(const AugmentOptions& options, uint64_t seed, int64_t epoch, int64_t sample_index);

// Applies a decision to one [C, H, W] image in place: out[c][y][x] = in[c][y + shift_y][x + shift_x]
// (background outside), then mirrors each row when flip is set. `background` holds one value per channel.
void apply_augment(const AugmentDecision& decision, float* image, int64_t channels, int64_t height, int64_t width,
                   std::span<const float> background);

// Augments every image of an image batch; sample_indices[i] is the dataset index of row i.
void augment_batch(Batch& batch, const Dataset& dataset, const AugmentOptions& options, uint64_t seed, int64_t epoch,
                   std::span<const int64_t> sample_indices);

}  // namespace opsnn::data
