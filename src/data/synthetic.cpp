// Synthetic image and click-through datasets: every sample is a pure function of (seed, sample id).
#include "opsnn/data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "data/log_loss.h"
#include "opsnn/core/error.h"
#include "opsnn/core/rng.h"

namespace opsnn::data {
namespace {

// Sub-keys of a dataset seed, one per independent random quantity.
uint64_t sub_key(uint64_t seed, uint64_t purpose) {
  Philox4 block = philox4x32_10(seed, 0xDA7A000000000000ull + purpose);
  return (static_cast<uint64_t>(block.v[0]) << 32) | block.v[1];
}

double unit_interval_open(uint32_t bits) { return (static_cast<double>(bits) + 0.5) * (1.0 / 4294967296.0); }

// Uniform noise from one byte, scaled to zero mean and unit variance (256 levels: variance (256^2-1)/12).
constexpr float kByteNoiseScale = 1.0f / 73.900271f;

}  // namespace

// ---- images ----

SyntheticImages::SyntheticImages(SyntheticImageOptions options) : options_(options) {
  OPSNN_CHECK(options_.size >= 0, "synthetic dataset size must be >= 0, got ", options_.size);
  OPSNN_CHECK(options_.channels >= 1 && options_.height >= 1 && options_.width >= 1,
              "synthetic image shape must be positive, got ", options_.channels, " x ", options_.height, " x ",
              options_.width);
  // Samples are written C*H*W values at a time: a count that wrapped would size buffers far too small.
  int64_t values = 0;
  OPSNN_CHECK(!__builtin_mul_overflow(options_.channels, options_.height, &values) &&
                  !__builtin_mul_overflow(values, options_.width, &values),
              "synthetic image shape ", options_.channels, " x ", options_.height, " x ", options_.width,
              " has more values than int64 can count");
  OPSNN_CHECK(options_.num_classes >= 1, "synthetic num_classes must be >= 1, got ", options_.num_classes);
  OPSNN_CHECK_AS(ConfigError, std::isfinite(options_.noise) && options_.noise >= 0.0,
                 "synthetic noise must be finite and >= 0, got ", options_.noise);
  OPSNN_CHECK(options_.sample_offset >= 0, "synthetic sample_offset must be >= 0");
  pattern_key_ = sub_key(options_.seed, 1);
  label_key_ = sub_key(options_.seed, 2);
  noise_key_ = sub_key(options_.seed, 3);
}

int64_t SyntheticImages::label(int64_t index) const {
  const uint64_t id = static_cast<uint64_t>(options_.sample_offset + index);
  return static_cast<int64_t>(philox4x32_10(label_key_, id).v[0] % static_cast<uint64_t>(options_.num_classes));
}

std::vector<float> SyntheticImages::class_pattern(int64_t label) const {
  OPSNN_CHECK(label >= 0 && label < options_.num_classes, "synthetic class ", label, " out of range [0, ",
              options_.num_classes, ")");
  const int64_t values = options_.channels * options_.height * options_.width;  // checked not to wrap
  std::vector<float> pattern;
  try {
    pattern.resize(static_cast<size_t>(values));
  } catch (const std::exception&) {  // bad_alloc or length_error: name the shape, not the allocator
    throw ShapeError(detail::concat("synthetic image shape ", options_.channels, " x ", options_.height, " x ",
                                    options_.width, ": cannot allocate its class pattern of ", values, " values"));
  }
  write_pattern(label, pattern.data());
  return pattern;
}

void SyntheticImages::write_pattern(int64_t label, float* pattern) const {
  const int64_t height = options_.height, width = options_.width;
  std::vector<double> cos_y(height), sin_y(height), cos_x(width), sin_x(width);
  constexpr double two_pi = 2.0 * std::numbers::pi;
  for (int64_t c = 0; c < options_.channels; ++c) {
    const Philox4 block = philox4x32_10(pattern_key_, static_cast<uint64_t>(label * options_.channels + c));
    float* plane = pattern + c * height * width;
    std::fill(plane, plane + height * width, 0.0f);
    for (int wave = 0; wave < 2; ++wave) {
      // Integer frequencies in [-3, 3] cycles per image side and a random phase: a plane wave
      // cos(2 pi (fy y / H + fx x / W) + phase), evaluated separably as cos(a + b) = cos a cos b - sin a sin b.
      const int64_t frequency_y = static_cast<int64_t>((block.v[0] >> (16 * wave)) % 7) - 3;
      const int64_t frequency_x = static_cast<int64_t>((block.v[0] >> (16 * wave + 8)) % 7) - 3;
      const double phase = two_pi * unit_interval_open(block.v[1 + wave]);
      for (int64_t y = 0; y < height; ++y) {
        const double angle = two_pi * static_cast<double>(frequency_y * y) / static_cast<double>(height);
        cos_y[y] = std::cos(angle);
        sin_y[y] = std::sin(angle);
      }
      for (int64_t x = 0; x < width; ++x) {
        const double angle = two_pi * static_cast<double>(frequency_x * x) / static_cast<double>(width) + phase;
        cos_x[x] = std::cos(angle);
        sin_x[x] = std::sin(angle);
      }
      for (int64_t y = 0; y < height; ++y) {
        for (int64_t x = 0; x < width; ++x) {
          plane[y * width + x] += static_cast<float>(cos_y[y] * cos_x[x] - sin_y[y] * sin_x[x]);
        }
      }
    }
  }
}

void SyntheticImages::fill_sample(int64_t index, float* image, int64_t& label_out) const {
  label_out = label(index);
  write_pattern(label_out, image);
  const int64_t numel = options_.channels * options_.height * options_.width;
  // 16 noise values per Philox block (one byte each): cheap enough for ImageNet-shaped throughput runs.
  const int64_t blocks_per_sample = (numel + 15) / 16;
  const uint64_t first_counter = static_cast<uint64_t>(options_.sample_offset + index) * blocks_per_sample;
  const float noise = static_cast<float>(options_.noise) * kByteNoiseScale;
  for (int64_t block_index = 0; block_index < blocks_per_sample; ++block_index) {
    const Philox4 block = philox4x32_10(noise_key_, first_counter + static_cast<uint64_t>(block_index));
    const int64_t begin = block_index * 16, end = std::min(begin + 16, numel);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t k = i - begin;
      const uint32_t byte = (block.v[k >> 2] >> (8 * (k & 3))) & 0xFFu;
      image[i] += noise * (static_cast<float>(byte) - 127.5f);
    }
  }
}

void SyntheticImages::get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const {
  check_batch_arguments(indices, inputs, labels);
  const int64_t numel = options_.channels * options_.height * options_.width;
  float* images = inputs.data<float>();
  int64_t* out_labels = labels.data<int64_t>();
  for (size_t row = 0; row < indices.size(); ++row) {
    fill_sample(indices[row], images + static_cast<int64_t>(row) * numel, out_labels[row]);
  }
}

// ---- click-through rows ----

SyntheticCtr::SyntheticCtr(SyntheticCtrOptions options) : options_(std::move(options)) {
  OPSNN_CHECK(options_.size >= 0, "ctr dataset size must be >= 0, got ", options_.size);
  OPSNN_CHECK(!options_.vocab_sizes.empty(), "ctr dataset needs at least one field (vocab_sizes is empty)");
  // Non-finite settings would make every logit (and so every label and loss) NaN or saturated.
  OPSNN_CHECK_AS(ConfigError, std::isfinite(options_.weight_scale) && options_.weight_scale >= 0.0,
                 "ctr weight_scale must be finite and >= 0, got ", options_.weight_scale);
  OPSNN_CHECK_AS(ConfigError, std::isfinite(options_.bias), "ctr bias must be finite, got ", options_.bias);
  OPSNN_CHECK_AS(ConfigError, std::isfinite(options_.value_skew) && options_.value_skew > 0.0,
                 "ctr value_skew must be finite and > 0, got ", options_.value_skew);
  OPSNN_CHECK(options_.sample_offset >= 0, "ctr sample_offset must be >= 0");
  int64_t total = 0;
  for (size_t field = 0; field < options_.vocab_sizes.size(); ++field) {
    OPSNN_CHECK(options_.vocab_sizes[field] >= 1, "ctr vocab_sizes[", field, "] must be >= 1, got ",
                options_.vocab_sizes[field]);
    field_offsets_.push_back(total);
    // A wrapped total would size the weights too small for the offsets that index them.
    OPSNN_CHECK(!__builtin_add_overflow(total, options_.vocab_sizes[field], &total),
                "ctr vocab_sizes total more values than int64 can count (at field ", field, ")");
  }
  // Planted weights ~ N(0, weight_scale^2), Box-Muller on one Philox block per weight.
  const uint64_t weight_key = sub_key(options_.seed, 11);
  try {
    weights_.resize(static_cast<size_t>(total));
  } catch (const std::exception&) {  // bad_alloc or length_error: name the cause, not the allocator
    throw Error(detail::concat("ctr vocab_sizes total ", total, " values: cannot allocate their planted weights (",
                               total, " x 8 bytes)"));
  }
  for (int64_t j = 0; j < total; ++j) {
    const Philox4 block = philox4x32_10(weight_key, static_cast<uint64_t>(j));
    const double radius = std::sqrt(-2.0 * std::log(unit_interval_open(block.v[0])));
    weights_[static_cast<size_t>(j)] =
        options_.weight_scale * radius * std::cos(2.0 * std::numbers::pi * unit_interval_open(block.v[1]));
  }
  value_key_ = sub_key(options_.seed, 12);
  label_key_ = sub_key(options_.seed, 13);
}

double SyntheticCtr::weight(int64_t field, int64_t value) const {
  OPSNN_CHECK(field >= 0 && field < num_fields(), "ctr field ", field, " out of range [0, ", num_fields(), ")");
  OPSNN_CHECK(value >= 0 && value < options_.vocab_sizes[static_cast<size_t>(field)], "ctr value ", value,
              " out of range for field ", field);
  return weights_[static_cast<size_t>(field_offsets_[static_cast<size_t>(field)] + value)];
}

void SyntheticCtr::fill_row(int64_t index, int64_t* values, float& label) const {
  const uint64_t id = static_cast<uint64_t>(options_.sample_offset + index);
  const int64_t fields = num_fields();
  const uint64_t blocks_per_row = static_cast<uint64_t>((fields + 3) / 4);
  double logit = options_.bias;
  Philox4 block{};
  for (int64_t field = 0; field < fields; ++field) {
    if (field % 4 == 0) block = philox4x32_10(value_key_, id * blocks_per_row + static_cast<uint64_t>(field / 4));
    const int64_t vocab = options_.vocab_sizes[static_cast<size_t>(field)];
    const double u = std::pow(unit_interval_open(block.v[field % 4]), options_.value_skew);
    const int64_t value = std::min<int64_t>(static_cast<int64_t>(u * static_cast<double>(vocab)), vocab - 1);
    values[field] = value;
    logit += weights_[static_cast<size_t>(field_offsets_[static_cast<size_t>(field)] + value)];
  }
  const double probability = 1.0 / (1.0 + std::exp(-logit));
  label = unit_interval_open(philox4x32_10(label_key_, id).v[0]) < probability ? 1.0f : 0.0f;
}

double SyntheticCtr::click_probability(int64_t index) const {
  OPSNN_CHECK(index >= 0 && index < size(), name(), ": row ", index, " out of range [0, ", size(), ")");
  std::vector<int64_t> values(static_cast<size_t>(num_fields()));
  float label = 0.0f;
  fill_row(index, values.data(), label);
  double logit = options_.bias;
  for (int64_t field = 0; field < num_fields(); ++field) logit += weight(field, values[static_cast<size_t>(field)]);
  return 1.0 / (1.0 + std::exp(-logit));
}

void SyntheticCtr::compute_losses() const {
  std::call_once(losses_once_, [this] {
    if (size() == 0) return;
    double entropy_sum = 0.0, probability_sum = 0.0;
    for (int64_t index = 0; index < size(); ++index) {
      const double probability = click_probability(index);
      entropy_sum += binary_entropy(probability);
      probability_sum += probability;
    }
    bayes_log_loss_ = entropy_sum / static_cast<double>(size());
    base_rate_log_loss_ = binary_entropy(probability_sum / static_cast<double>(size()));
  });
}

double SyntheticCtr::bayes_log_loss() const {
  compute_losses();
  return bayes_log_loss_;
}

double SyntheticCtr::base_rate_log_loss() const {
  compute_losses();
  return base_rate_log_loss_;
}

void SyntheticCtr::get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const {
  check_batch_arguments(indices, inputs, labels);
  const int64_t fields = num_fields();
  int64_t* values = inputs.data<int64_t>();
  float* out_labels = labels.data<float>();
  for (size_t row = 0; row < indices.size(); ++row) {
    fill_row(indices[row], values + static_cast<int64_t>(row) * fields, out_labels[row]);
  }
}

}  // namespace opsnn::data
