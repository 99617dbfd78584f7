// Seed derivation, epoch shuffles and the crop/flip augmentation.
#include "opsnn/data/transforms.h"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/core/rng.h"
#include "opsnn/data/dataset.h"

namespace opsnn::data {

uint64_t derive_seed(uint64_t seed, RandomStream stream, int64_t epoch) {
  // One Philox block keyed by the user seed, counter = (stream, epoch): a cheap, well-mixed 64-bit hash.
  const uint64_t counter = (static_cast<uint64_t>(stream) << 56) ^ static_cast<uint64_t>(epoch);
  Philox4 block = philox4x32_10(seed, counter);
  return (static_cast<uint64_t>(block.v[0]) << 32) | block.v[1];
}

uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t sample_index) {
  Philox4 block = philox4x32_10(derive_seed(seed, RandomStream::sample, epoch), static_cast<uint64_t>(sample_index));
  return (static_cast<uint64_t>(block.v[0]) << 32) | block.v[1];
}

std::vector<int64_t> shuffled_indices(int64_t count, uint64_t seed, int64_t epoch) {
  // A negative count would become a huge size_t (std::length_error), not a message naming it.
  OPSNN_CHECK_AS(ConfigError, count >= 0, "shuffled_indices: sample count must be >= 0, got ", count);
  std::vector<int64_t> order;
  try {
    order.resize(static_cast<size_t>(count));
  } catch (const std::exception&) {  // bad_alloc or length_error: name the count, not the allocator
    throw ConfigError(detail::concat("shuffled_indices: cannot allocate the order of ", count, " samples"));
  }
  for (int64_t i = 0; i < count; ++i) order[static_cast<size_t>(i)] = i;
  Generator generator(derive_seed(seed, RandomStream::shuffle, epoch));
  for (int64_t i = count - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(generator.next_below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

AugmentDecision draw_augment(const AugmentOptions& options, uint64_t seed, int64_t epoch, int64_t sample_index) {
  OPSNN_CHECK(options.crop_padding >= 0, "augment crop_padding must be >= 0, got ", options.crop_padding);
  Philox4 block = philox4x32_10(derive_seed(seed, RandomStream::augment, epoch), static_cast<uint64_t>(sample_index));
  AugmentDecision decision;
  if (options.crop_padding > 0) {
    const uint64_t positions = 2 * static_cast<uint64_t>(options.crop_padding) + 1;
    decision.shift_y = static_cast<int64_t>(block.v[0] % positions) - options.crop_padding;
    decision.shift_x = static_cast<int64_t>(block.v[1] % positions) - options.crop_padding;
  }
  decision.flip = options.horizontal_flip && (block.v[2] & 1u) != 0;
  return decision;
}

void apply_augment(const AugmentDecision& decision, float* image, int64_t channels, int64_t height, int64_t width,
                   std::span<const float> background) {
  // Negative sizes would turn into huge buffer sizes below; so would a plane size that wraps int64.
  int64_t plane_values = 0;
  OPSNN_CHECK_AS(
      ShapeError, channels >= 0 && height >= 0 && width >= 0 && !__builtin_mul_overflow(height, width, &plane_values),
      "apply_augment: image shape must be non-negative and countable, got ", channels, " x ", height, " x ", width);
  OPSNN_CHECK(static_cast<int64_t>(background.size()) == channels, "apply_augment: ", background.size(),
              " background values for ", channels, " channels");
  std::vector<float> source(static_cast<size_t>(height * width));
  for (int64_t c = 0; c < channels; ++c) {
    float* plane = image + c * height * width;
    if (decision.shift_y != 0 || decision.shift_x != 0) {
      std::copy(plane, plane + height * width, source.begin());
      for (int64_t y = 0; y < height; ++y) {
        const int64_t source_y = y + decision.shift_y;
        for (int64_t x = 0; x < width; ++x) {
          const int64_t source_x = x + decision.shift_x;
          const bool inside = source_y >= 0 && source_y < height && source_x >= 0 && source_x < width;
          plane[y * width + x] = inside ? source[static_cast<size_t>(source_y * width + source_x)] : background[c];
        }
      }
    }
    if (decision.flip) {
      for (int64_t y = 0; y < height; ++y) std::reverse(plane + y * width, plane + (y + 1) * width);
    }
  }
}

void augment_batch(Batch& batch, const Dataset& dataset, const AugmentOptions& options, uint64_t seed, int64_t epoch,
                   std::span<const int64_t> sample_indices) {
  if (!options.any()) return;
  const Shape shape = dataset.sample_shape();
  OPSNN_CHECK(shape.size() == 3, dataset.name(), ": crop/flip augmentation needs [C, H, W] images, samples are ",
              shape_str(shape));
  OPSNN_CHECK(batch.size() == static_cast<int64_t>(sample_indices.size()), "augment_batch: batch of ", batch.size(),
              " rows but ", sample_indices.size(), " sample indices");
  const int64_t channels = shape[0], height = shape[1], width = shape[2];
  // The images are written in place at the dataset's sample size: a batch of any other layout would be
  // written past its end (or misread), so it must be exactly a contiguous f32 [B, C, H, W] on the CPU.
  const Tensor& inputs = batch.inputs;
  OPSNN_CHECK_AS(ShapeError, inputs.defined(), "augment_batch: the batch has no inputs");
  OPSNN_CHECK_AS(TypeError, inputs.dtype() == DType::f32, "augment_batch: inputs must be f32 images, got ",
                 dtype_name(inputs.dtype()));
  OPSNN_CHECK_AS(DeviceError, inputs.device().is_cpu(), "augment_batch: inputs must be on the CPU, got ",
                 inputs.device().str());
  const Shape expected{static_cast<int64_t>(sample_indices.size()), channels, height, width};
  OPSNN_CHECK_AS(ShapeError, inputs.shape() == expected, "augment_batch: inputs of shape ", shape_str(inputs.shape()),
                 " do not match ", sample_indices.size(), " samples of ", dataset.name(), " (expected ",
                 shape_str(expected), ")");
  OPSNN_CHECK_AS(ShapeError, inputs.is_contiguous(),
                 "augment_batch: inputs must be contiguous, got a strided view of shape ", shape_str(inputs.shape()));
  std::vector<float> background(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) background[static_cast<size_t>(c)] = dataset.background_value(c);
  float* images = inputs.data<float>();
  for (size_t row = 0; row < sample_indices.size(); ++row) {
    const AugmentDecision decision = draw_augment(options, seed, epoch, sample_indices[row]);
    apply_augment(decision, images + static_cast<int64_t>(row) * channels * height * width, channels, height, width,
                  background);
  }
}

}  // namespace opsnn::data
