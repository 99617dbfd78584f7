// The layers models are built from: Linear, Conv2d, BatchNorm2d, Embedding (with parameters, initialised
// as PyTorch does from a seeded Generator), and ReLU, MaxPool2d, AvgPool2d, GlobalAvgPool, Flatten.
// Options structs have chained setters: Conv2dOptions(3, 16, 3).stride(2).padding(1).bias(false).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "opsnn/core/rng.h"
#include "opsnn/nn/module.h"
#include "opsnn/nn/sync_batch_norm.h"
#include "opsnn/ops/backend.h"

namespace opsnn::nn {

// ---- Linear: y = x W^T + b, weight [out, in] ----
struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  OPSNN_ARG(int64_t, in_features);
  OPSNN_ARG(int64_t, out_features);
  OPSNN_ARG(bool, bias) = true;
};

class Linear : public Module {
 public:
  // Weight and bias uniform in +-1/sqrt(in_features) (PyTorch's kaiming_uniform_ with a = sqrt(5)).
  Linear(const LinearOptions& options, Generator& generator);
  Linear(int64_t in_features, int64_t out_features, Generator& generator)
      : Linear(LinearOptions(in_features, out_features), generator) {}
  Tensor forward(const Tensor& input) override;  // [..., in] -> [..., out]
  void reset_parameters(Generator& generator);
  std::string extra_repr() const override;
  const LinearOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined with bias(false)

 private:
  LinearOptions options_;
  Tensor weight_, bias_;
};

// ---- Conv2d: NCHW input (NHWC with channels_last), weight [out, in, k, k] ----
struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  OPSNN_ARG(int64_t, in_channels);
  OPSNN_ARG(int64_t, out_channels);
  OPSNN_ARG(int64_t, kernel_size);
  OPSNN_ARG(int64_t, stride) = 1;
  OPSNN_ARG(int64_t, padding) = 0;
  OPSNN_ARG(bool, bias) = true;
  // [N, H, W, C] activations in and out (ops::Conv2dGeometry::channels_last); the weight keeps its layout.
  OPSNN_ARG(bool, channels_last) = false;
};

class Conv2d : public Module {
 public:
  // Weight and bias uniform in +-1/sqrt(in_channels * k * k), as PyTorch.
  Conv2d(const Conv2dOptions& options, Generator& generator);
  Tensor forward(const Tensor& input) override;  // [N, in, H, W] -> [N, out, H', W'] (or NHWC)
  void reset_parameters(Generator& generator);
  std::string extra_repr() const override;
  const Conv2dOptions& options() const { return options_; }
  ops::Conv2dGeometry geometry() const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined with bias(false)

 private:
  Conv2dOptions options_;
  Tensor weight_, bias_;
};

// ---- BatchNorm2d: per-channel normalisation; batch statistics in training, running ones in eval ----
// With a reducer (set_reducer, or set_batch_norm_reducer on a tree) the training statistics are those of
// every rank's batch together (nn::sync_batch_norm, SyncBatchNorm); eval never communicates.
struct BatchNorm2dOptions {
  explicit BatchNorm2dOptions(int64_t num_features) : num_features_(num_features) {}
  OPSNN_ARG(int64_t, num_features);
  OPSNN_ARG(double, eps) = 1e-5;
  // running = (1 - momentum) * running + momentum * batch statistic
  OPSNN_ARG(double, momentum) = 0.1;
  // The channel axis is the last one: [N, H, W, C] inputs.
  OPSNN_ARG(bool, channels_last) = false;
};

class MaxPool2d;

class BatchNorm2d : public Module {
 public:
  // weight 1, bias 0, running_mean 0, running_var 1. No Generator: nothing random.
  explicit BatchNorm2d(const BatchNorm2dOptions& options);
  explicit BatchNorm2d(int64_t num_features) : BatchNorm2d(BatchNorm2dOptions(num_features)) {}
  Tensor forward(const Tensor& input) override;  // [N, C, H, W] (or [N, C]; [N, H, W, C] channels_last) -> same shape
  // relu(forward(input)) with the relu fused into the normalization (ops::batch_norm_relu).
  Tensor forward_relu(const Tensor& input);
  // relu(forward(input) + residual) in one pass (ops::batch_norm_add_relu): a ResNet block's end.
  Tensor forward_add_relu(const Tensor& input, const Tensor& residual);
  // relu(forward(input) + shortcut_norm.forward(shortcut)) with the shortcut's batch norm folded into the
  // same pass (ops::dual_batch_norm_add_relu): a ResNet block's end with a downsampling shortcut. The two
  // computed apart where the layers differ in mode or layout or synchronise their statistics.
  Tensor forward_add_relu(const Tensor& input, BatchNorm2d& shortcut_norm, const Tensor& shortcut);
  // pool.forward(forward_relu(input)) for NCHW input, fused in training where the backend fuses it
  // (ops::batch_norm_relu_max_pool2d: a ResNet stem); computed apart with channels_last or synchronised
  // statistics.
  Tensor forward_relu_max_pool(const Tensor& input, const MaxPool2d& pool);
  void reset_parameters();
  std::string extra_repr() const override;
  const BatchNorm2dOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  // Synchronised statistics in training through `reducer` (nullptr: this rank's own); `name` (the layer's
  // dotted name in its model) names the layer's collectives.
  void set_reducer(std::shared_ptr<BatchStatisticsReducer> reducer, std::string name);
  const std::shared_ptr<BatchStatisticsReducer>& reducer() const { return reducer_; }

 private:
  void check_input(const Tensor& input) const;
  Tensor synchronized(const Tensor& input, bool relu);

  BatchNorm2dOptions options_;
  Tensor weight_, bias_, running_mean_, running_var_;
  std::shared_ptr<BatchStatisticsReducer> reducer_;
  std::string reducer_name_;
};

// ---- Embedding: a table [num_embeddings, embedding_dim] looked up by i64 indices ----
struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  OPSNN_ARG(int64_t, num_embeddings);
  OPSNN_ARG(int64_t, embedding_dim);
  // Gradients arrive as rows (RowSparseGrad) instead of a dense table-sized tensor.
  OPSNN_ARG(bool, sparse) = false;
};

class Embedding : public Module {
 public:
  // Weight N(0, 1), as PyTorch.
  Embedding(const EmbeddingOptions& options, Generator& generator);
  Tensor forward(const Tensor& indices) override;  // i64 indices [...] -> [..., embedding_dim]
  void reset_parameters(Generator& generator);
  std::string extra_repr() const override;
  const EmbeddingOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }

 private:
  EmbeddingOptions options_;
  Tensor weight_;
};

// ---- layers without parameters ----
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& input) override;
};

struct MaxPool2dOptions {
  // The stride defaults to the kernel size, as in PyTorch.
  explicit MaxPool2dOptions(int64_t kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  OPSNN_ARG(int64_t, kernel_size);
  OPSNN_ARG(int64_t, stride);
  OPSNN_ARG(int64_t, padding) = 0;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const MaxPool2dOptions& options);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const MaxPool2dOptions& options() const { return options_; }
  ops::Pool2dGeometry geometry() const;

 private:
  MaxPool2dOptions options_;
};

struct AvgPool2dOptions {
  explicit AvgPool2dOptions(int64_t kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  OPSNN_ARG(int64_t, kernel_size);
  OPSNN_ARG(int64_t, stride);
  OPSNN_ARG(int64_t, padding) = 0;
  // Whether padded positions count in the divisor (PyTorch's default: they do).
  OPSNN_ARG(bool, count_include_pad) = true;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const AvgPool2dOptions& options);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const AvgPool2dOptions& options() const { return options_; }

 private:
  AvgPool2dOptions options_;
};

// [N, C, H, W] -> [N, C]: the mean over each channel's plane.
class GlobalAvgPool : public Module {
 public:
  GlobalAvgPool() : Module("GlobalAvgPool") {}
  Tensor forward(const Tensor& input) override;
};

// Merges dimensions start_dim..end_dim into one (by default all but the batch dimension).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

 private:
  int64_t start_dim_, end_dim_;
};

}  // namespace opsnn::nn
