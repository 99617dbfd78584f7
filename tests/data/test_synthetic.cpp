// Synthetic datasets and augmentation: determinism, learnable image classes, and the CTR dataset's
// planted ground truth (labels follow the true probabilities; the Bayes loss beats the base rate).
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/data/synthetic.h"
#include "opsnn/data/transforms.h"
#include "support/catch.h"
#include "support/sanitizers.h"

using namespace opsnn;
using namespace opsnn::data;

TEST_CASE("SyntheticImages: deterministic per index, any shape, learnable classes", "[data]") {
  SyntheticImageOptions options;
  options.size = 600;
  options.channels = 3;
  options.height = 12;
  options.width = 10;
  options.num_classes = 7;
  options.seed = 5;
  const SyntheticImages dataset(options), same(options);
  REQUIRE(dataset.sample_shape() == Shape{3, 12, 10});
  // Sample 17 is the same whichever batch it is fetched in, and in another instance.
  const Batch a = dataset.get(std::vector<int64_t>{3, 17});
  const Batch b = same.get(std::vector<int64_t>{17});
  const auto a_values = a.inputs.to_vector<float>(), b_values = b.inputs.to_vector<float>();
  REQUIRE(std::vector<float>(a_values.begin() + 360, a_values.end()) == b_values);
  REQUIRE(a.labels.to_vector<int64_t>()[1] == b.labels.to_vector<int64_t>()[0]);
  options.seed = 6;
  REQUIRE(SyntheticImages(options).get(std::vector<int64_t>{17}).inputs.to_vector<float>() != b_values);

  // Nearest class pattern recovers the label for nearly every sample (noise std 1, pattern RMS ~1).
  std::vector<std::vector<float>> patterns;
  for (int64_t c = 0; c < 7; ++c) patterns.push_back(dataset.class_pattern(c));
  std::vector<int64_t> all(600);
  for (int64_t i = 0; i < 600; ++i) all[static_cast<size_t>(i)] = i;
  const Batch batch = dataset.get(all);
  const float* images = batch.inputs.data<float>();
  std::vector<int> class_counts(7, 0);
  int correct = 0;
  double noise_sum = 0.0, noise_squares = 0.0;
  for (int64_t i = 0; i < 600; ++i) {
    const int64_t label = batch.labels.data<int64_t>()[i];
    REQUIRE(label == dataset.label(i));
    REQUIRE((label >= 0 && label < 7));
    ++class_counts[static_cast<size_t>(label)];
    int64_t best = -1;
    double best_distance = 1e300;
    for (int64_t c = 0; c < 7; ++c) {
      double distance = 0.0;
      for (int64_t j = 0; j < 360; ++j) {
        const double d = images[i * 360 + j] - patterns[static_cast<size_t>(c)][static_cast<size_t>(j)];
        distance += d * d;
        if (c == label) {
          noise_sum += d;
          noise_squares += d * d;
        }
      }
      if (distance < best_distance) {
        best_distance = distance;
        best = c;
      }
    }
    correct += best == label;
  }
  REQUIRE(correct >= 590);
  for (int count : class_counts) REQUIRE(count > 50);  // labels spread over all classes
  const double noise_mean = noise_sum / (600.0 * 360.0);
  REQUIRE(std::abs(noise_mean) < 0.01);
  REQUIRE(std::sqrt(noise_squares / (600.0 * 360.0)) == Approx(1.0).epsilon(0.02));

  // sample_offset continues the same stream: a test split made of samples 600.. of the same seed.
  options.seed = 5;
  SyntheticImageOptions longer = options, test_split = options;
  longer.size = 1000;
  test_split.sample_offset = 600;
  REQUIRE(SyntheticImages(test_split).get(std::vector<int64_t>{0}).inputs.to_vector<float>() ==
          SyntheticImages(longer).get(std::vector<int64_t>{600}).inputs.to_vector<float>());
}

TEST_CASE("SyntheticCtr: planted logistic truth, Bayes loss below the base-rate loss", "[data]") {
  SyntheticCtrOptions options;
  options.size = 20000;
  options.vocab_sizes = {50, 20, 7, 3};
  options.seed = 9;
  const SyntheticCtr dataset(options);
  REQUIRE(dataset.sample_shape() == Shape{4});
  REQUIRE(dataset.input_dtype() == DType::i64);
  REQUIRE(dataset.label_dtype() == DType::f32);
  std::vector<int64_t> all(20000);
  for (int64_t i = 0; i < 20000; ++i) all[static_cast<size_t>(i)] = i;
  const Batch batch = dataset.get(all);
  const int64_t* values = batch.inputs.data<int64_t>();
  const float* labels = batch.labels.data<float>();
  double label_sum = 0.0, probability_sum = 0.0, true_log_loss = 0.0;
  std::set<int64_t> seen_field0;
  for (int64_t i = 0; i < 20000; ++i) {
    double logit = options.bias;
    for (int64_t f = 0; f < 4; ++f) {
      const int64_t value = values[i * 4 + f];
      REQUIRE((value >= 0 && value < options.vocab_sizes[static_cast<size_t>(f)]));
      logit += dataset.weight(f, value);
    }
    seen_field0.insert(values[i * 4]);
    const double probability = 1.0 / (1.0 + std::exp(-logit));
    REQUIRE(probability == Approx(dataset.click_probability(i)).epsilon(1e-12));
    REQUIRE((labels[i] == 0.0f || labels[i] == 1.0f));
    label_sum += labels[i];
    probability_sum += probability;
    true_log_loss -= labels[i] == 1.0f ? std::log(probability) : std::log1p(-probability);
  }
  REQUIRE(seen_field0.size() > 40);  // skewed but covering the vocabulary
  // Labels are Bernoulli(p): their mean matches the mean probability within a few standard errors,
  // and the log-loss of the true probabilities on the drawn labels matches the Bayes loss.
  REQUIRE(std::abs(label_sum - probability_sum) < 4.0 * std::sqrt(20000 * 0.25));
  REQUIRE(true_log_loss / 20000.0 == Approx(dataset.bayes_log_loss()).margin(0.02));
  REQUIRE(dataset.bayes_log_loss() > 0.1);
  REQUIRE(dataset.bayes_log_loss() < dataset.base_rate_log_loss() - 0.05);
  // Deterministic: the same rows from a second instance.
  REQUIRE(SyntheticCtr(options).get(std::vector<int64_t>{123}).inputs.to_vector<int64_t>() ==
          std::vector<int64_t>(values + 123 * 4, values + 124 * 4));
}

TEST_CASE("Augmentation: decisions are a function of (seed, epoch, sample) and cover the range", "[data]") {
  AugmentOptions options;
  options.crop_padding = 2;
  options.horizontal_flip = true;
  std::set<int64_t> shifts;
  int flips = 0;
  for (int64_t sample = 0; sample < 400; ++sample) {
    const AugmentDecision decision = draw_augment(options, 11, 3, sample);
    const AugmentDecision again = draw_augment(options, 11, 3, sample);
    REQUIRE((decision.shift_y == again.shift_y && decision.shift_x == again.shift_x && decision.flip == again.flip));
    REQUIRE((decision.shift_y >= -2 && decision.shift_y <= 2 && decision.shift_x >= -2 && decision.shift_x <= 2));
    shifts.insert(decision.shift_y * 10 + decision.shift_x);
    flips += decision.flip;
  }
  REQUIRE(shifts.size() == 25);
  REQUIRE((flips > 150 && flips < 250));
  int differing_epochs = 0;
  for (int64_t sample = 0; sample < 50; ++sample) {
    const AugmentDecision e0 = draw_augment(options, 11, 0, sample), e1 = draw_augment(options, 11, 1, sample);
    differing_epochs += e0.shift_y != e1.shift_y || e0.shift_x != e1.shift_x || e0.flip != e1.flip;
  }
  REQUIRE(differing_epochs > 40);
  options = AugmentOptions{};
  const AugmentDecision none = draw_augment(options, 11, 0, 0);
  REQUIRE((none.shift_y == 0 && none.shift_x == 0 && !none.flip));
}

TEST_CASE("Augmentation: crop shifts with background fill, flip mirrors rows", "[data]") {
  // One 3 x 3 channel: 1..9 row-major.
  std::vector<float> image{1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<float> background{-1.0f};
  apply_augment({1, -1, false}, image.data(), 1, 3, 3, background);
  // out[y][x] = in[y + 1][x - 1]
  REQUIRE(image == std::vector<float>{-1, 4, 5, -1, 7, 8, -1, -1, -1});
  apply_augment({0, 0, true}, image.data(), 1, 3, 3, background);
  REQUIRE(image == std::vector<float>{5, 4, -1, 8, 7, -1, -1, -1, -1});
}

TEST_CASE("Synthetic datasets refuse sizes whose products or sums wrap int64", "[data]") {
  // C*H*W = 2^62 * 16 wraps to 0: the sample buffers would be empty and the pattern loops write past them.
  SyntheticImageOptions images;
  images.channels = int64_t{1} << 62;
  images.height = 4;
  images.width = 4;
  CHECK_THROWS_WITH(SyntheticImages(images),
                    Catch::Contains("synthetic image shape 4611686018427387904 x 4 x 4 has more values than int64"));
  // Vocabularies summing past int64 wrapped to a small total: weights sized for it, offsets beyond it.
  SyntheticCtrOptions ctr;
  ctr.vocab_sizes = {INT64_MAX, INT64_MAX, 3};
  CHECK_THROWS_WITH(SyntheticCtr(ctr),
                    Catch::Contains("ctr vocab_sizes total more values than int64 can count (at field 1)"));
}

TEST_CASE("Synthetic datasets refuse NaN and infinite parameters with a ConfigError naming them", "[data]") {
  SyntheticCtrOptions ctr;
  ctr.vocab_sizes = {4, 5};
  ctr.bias = NAN;
  CHECK_THROWS_MATCHES(SyntheticCtr(ctr), ConfigError, Catch::Message("ctr bias must be finite, got nan"));
  ctr.bias = -1.0;
  ctr.weight_scale = INFINITY;
  CHECK_THROWS_MATCHES(SyntheticCtr(ctr), ConfigError,
                       Catch::Message("ctr weight_scale must be finite and >= 0, got inf"));
  ctr.weight_scale = 0.5;
  ctr.value_skew = INFINITY;
  CHECK_THROWS_AS(SyntheticCtr(ctr), ConfigError);
  SyntheticImageOptions images;
  images.noise = INFINITY;
  CHECK_THROWS_MATCHES(SyntheticImages(images), ConfigError,
                       Catch::Message("synthetic noise must be finite and >= 0, got inf"));
}

TEST_CASE("Augmentation helpers refuse bad counts and shapes with opsnn errors, not std:: ones", "[data]") {
  CHECK_THROWS_MATCHES(shuffled_indices(-5, 0, 0), ConfigError,
                       Catch::Message("shuffled_indices: sample count must be >= 0, got -5"));
  CHECK_THROWS_AS(shuffled_indices(INT64_MAX, 0, 0), ConfigError);
  REQUIRE(shuffled_indices(0, 0, 0).empty());
  std::vector<float> image(4, 0.0f);
  const std::vector<float> background{0.0f};
  CHECK_THROWS_MATCHES(apply_augment({1, 0, false}, image.data(), 1, -2, 2, background), ShapeError,
                       Catch::Message("apply_augment: image shape must be non-negative and countable, got 1 x -2 x 2"));
  // 2^50 values fit int64 but not memory: the pattern allocation names the shape (AddressSanitizer's
  // allocator aborts on such a request instead of throwing, so that build skips this check).
  if (testing::kAddressSanitizer) return;
  SyntheticImageOptions huge;
  huge.channels = int64_t{1} << 30;
  huge.height = int64_t{1} << 10;
  huge.width = int64_t{1} << 10;
  SyntheticImages dataset(huge);
  CHECK_THROWS_AS(dataset.class_pattern(0), ShapeError);
  CHECK_THROWS_WITH(
      dataset.class_pattern(0),
      Catch::Contains("synthetic image shape 1073741824 x 1024 x 1024: cannot allocate its class pattern"));
}

TEST_CASE("augment_batch: inputs must be a contiguous f32 CPU [B, C, H, W] batch of the dataset's samples", "[data]") {
  // Writing 3 x 64 x 64 images into a 1 x 1 x 2 x 2 tensor corrupted the heap.
  SyntheticImageOptions options;
  options.channels = 3;
  options.height = options.width = 8;
  SyntheticImages dataset(options);
  AugmentOptions augment;
  augment.crop_padding = 2;
  std::vector<int64_t> indices{0};
  Batch batch;
  batch.labels = Tensor::zeros({1}, DType::i64);
  batch.inputs = Tensor::zeros({1, 1, 2, 2});
  CHECK_THROWS_AS(augment_batch(batch, dataset, augment, 0, 0, indices), ShapeError);
  CHECK_THROWS_WITH(augment_batch(batch, dataset, augment, 0, 0, indices),
                    Catch::Contains("augment_batch: inputs of shape [1, 1, 2, 2] do not match 1 samples of") &&
                        Catch::Contains("(expected [1, 3, 8, 8])"));
  batch.inputs = Tensor::zeros({1, 3, 8, 8}, DType::f64);
  CHECK_THROWS_MATCHES(augment_batch(batch, dataset, augment, 0, 0, indices), TypeError,
                       Catch::Message("augment_batch: inputs must be f32 images, got f64"));
  batch.inputs = Tensor::zeros({1, 3, 8, 8}).transpose(2, 3);
  CHECK_THROWS_AS(augment_batch(batch, dataset, augment, 0, 0, indices), ShapeError);
  batch.inputs = Tensor();
  CHECK_THROWS_AS(augment_batch(batch, dataset, augment, 0, 0, indices), ShapeError);
  // The matching batch is augmented as before.
  batch.inputs = Tensor::zeros({1, 3, 8, 8});
  REQUIRE_NOTHROW(augment_batch(batch, dataset, augment, 0, 0, indices));
}
