// Deterministic synthetic datasets generated on the fly from the sample index with Philox: images of any
// shape and class count (learnable class-dependent patterns under noise, e.g. ImageNet-shaped for
// throughput runs), and click-through rows with a planted logistic ground truth whose best achievable
// log-loss is known.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "opsnn/data/dataset.h"

namespace opsnn::data {

struct SyntheticImageOptions {
  int64_t size = 1024;  // number of samples
  int64_t channels = 3;
  int64_t height = 32;
  int64_t width = 32;
  int64_t num_classes = 10;
  double noise = 1.0;         // standard deviation of the per-pixel noise (the class pattern has RMS 1)
  uint64_t seed = 0;          // defines the class patterns, the labels and the noise
  int64_t sample_offset = 0;  // sample i is generated as sample (sample_offset + i): disjoint splits
};

// Sample s: label uniform in [0, num_classes); pixel = pattern[label](c, y, x) + noise * u, where each
// class pattern is a sum of two plane waves per channel with class-specific frequencies and phases
// (unit RMS) and u is uniform with unit variance. Nothing is stored, so any size and shape is cheap.
class SyntheticImages final : public Dataset {
 public:
  explicit SyntheticImages(SyntheticImageOptions options);
  std::string name() const override { return "synthetic"; }
  int64_t size() const override { return options_.size; }
  Shape sample_shape() const override { return {options_.channels, options_.height, options_.width}; }
  int64_t num_classes() const override { return options_.num_classes; }
  void get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const override;

  int64_t label(int64_t index) const;
  // The noiseless class pattern [C, H, W].
  std::vector<float> class_pattern(int64_t label) const;
  const SyntheticImageOptions& options() const { return options_; }

 private:
  void write_pattern(int64_t label, float* pattern) const;
  void fill_sample(int64_t index, float* image, int64_t& label) const;
  SyntheticImageOptions options_;
  uint64_t pattern_key_, label_key_, noise_key_;
};

struct SyntheticCtrOptions {
  int64_t size = 100000;                                                     // number of rows
  std::vector<int64_t> vocab_sizes = {1000, 1000, 100, 100, 50, 20, 10, 5};  // one categorical field each
  double weight_scale = 0.5;  // standard deviation of each planted per-(field, value) weight
  double bias = -1.0;         // planted logit bias (sets the base click rate)
  double value_skew = 2.0;    // value id = floor(vocab * u^skew): > 1 makes small ids frequent (power-law-like)
  uint64_t seed = 0;          // defines the planted weights, the rows and the labels
  int64_t sample_offset = 0;  // row i is generated as row (sample_offset + i): disjoint splits
};

// Row s: field f takes value id v_f; the true click probability is p = sigmoid(bias + sum_f w[f][v_f]);
// the label is Bernoulli(p). Inputs are i64 [F] value ids (each within its field's vocabulary), labels
// f32 0/1. The Bayes-optimal expected log-loss is the mean entropy of p, which no model can beat.
class SyntheticCtr final : public Dataset {
 public:
  explicit SyntheticCtr(SyntheticCtrOptions options);
  std::string name() const override { return "ctr_synthetic"; }
  int64_t size() const override { return options_.size; }
  Shape sample_shape() const override { return {num_fields()}; }
  DType input_dtype() const override { return DType::i64; }
  DType label_dtype() const override { return DType::f32; }
  int64_t num_classes() const override { return 2; }
  void get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const override;

  int64_t num_fields() const { return static_cast<int64_t>(options_.vocab_sizes.size()); }
  const std::vector<int64_t>& vocab_sizes() const { return options_.vocab_sizes; }
  // The planted weight of value `value` of field `field`.
  double weight(int64_t field, int64_t value) const;
  double click_probability(int64_t index) const;
  // Mean over this dataset's rows of the entropy of the true click probability (natural log): the
  // expected log-loss of the Bayes-optimal predictor. Computed once, on first use.
  double bayes_log_loss() const;
  // Log-loss of always predicting the mean click probability (the best constant predictor).
  double base_rate_log_loss() const;
  const SyntheticCtrOptions& options() const { return options_; }

 private:
  void fill_row(int64_t index, int64_t* values, float& label) const;
  void compute_losses() const;
  SyntheticCtrOptions options_;
  std::vector<int64_t> field_offsets_;  // start of each field in weights_
  std::vector<double> weights_;
  uint64_t value_key_, label_key_;
  mutable std::once_flag losses_once_;
  mutable double bayes_log_loss_ = 0.0, base_rate_log_loss_ = 0.0;
};

}  // namespace opsnn::data
