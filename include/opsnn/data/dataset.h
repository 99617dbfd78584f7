// The Dataset interface every data source implements (Fashion-MNIST, CIFAR, image folders, synthetic
// images, synthetic CTR, Criteo click logs), and the Batch the loader hands to the trainer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "opsnn/core/dtype.h"
#include "opsnn/core/tensor.h"

namespace opsnn::data {

class BatchBuffer;  // batch_pool.h

// The two halves of a file-backed dataset's distribution (Fashion-MNIST, CIFAR).
enum class Split { train, test };

// One batch on the host. Images: inputs f32 [B, C, H, W], labels i64 [B] (class ids).
// CTR: inputs i64 [B, F] (one value id per field; Criteo: raw feature values), labels f32 [B] (0 or 1).
struct Batch {
  Tensor inputs;
  Tensor labels;
  int64_t epoch = 0;  // where the loader produced it
  int64_t index = 0;  // batch index within the epoch
  // Set when inputs and labels view a pooled loader buffer (LoaderOptions::pin_memory): the buffer is
  // reused once every tensor viewing it is gone and the copies that read it (release_after) are done.
  std::shared_ptr<BatchBuffer> buffer;
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Short name for messages, e.g. "fashion_mnist/train".
  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;
  // Shape of one sample's input: [C, H, W] for images, [F] for CTR rows.
  virtual Shape sample_shape() const = 0;
  virtual DType input_dtype() const { return DType::f32; }
  virtual DType label_dtype() const { return DType::i64; }
  // Number of label classes (2 for the binary CTR label).
  virtual int64_t num_classes() const = 0;
  bool is_image() const { return sample_shape().size() == 3; }
  // The value a black (empty) pixel of `channel` has after normalisation: the fill used by crop padding,
  // so padded borders look like the dataset's own background.
  virtual float background_value(int64_t channel) const { return 0.0f; }

  // Writes sample indices[i] into row i of `inputs` ([n, sample_shape...], input_dtype(), contiguous, CPU)
  // and of `labels` ([n], label_dtype()). Must be safe to call from several threads at once.
  // Throws opsnn::Error naming the dataset when an index is out of range.
  virtual void get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const = 0;

  // The same for datasets whose samples are random (image_folder's random crops): sample_seeds[i] is the
  // seed of row i, a pure function of (train.seed, epoch, indices[i]) that the loader derives
  // (sample_seed in transforms.h), so a batch repeats bit for bit on resume. The default ignores the seeds.
  virtual void get_batch_seeded(std::span<const int64_t> indices, std::span<const uint64_t> sample_seeds,
                                const Tensor& inputs, const Tensor& labels) const {
    get_batch(indices, inputs, labels);
  }
  // The name of each class, in label order (image_folder's folder names); empty when the dataset has none.
  virtual std::vector<std::string> class_names() const { return {}; }

  // Allocates host tensors of the right shape and dtype for `count` samples.
  Batch allocate_batch(int64_t count) const;
  // allocate_batch + get_batch.
  Batch get(std::span<const int64_t> indices) const;

 protected:
  // Checks buffer shapes/dtypes and index range; implementations call it first.
  void check_batch_arguments(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const;
};

// Per-dataset pixel normalisation: value = (pixel / 255 - mean) / std.
struct Normalization {
  float mean = 0.0f;
  float std = 1.0f;
  static Normalization none() { return {0.0f, 1.0f}; }
  // Fashion-MNIST training-set statistics (mean and std of the 60k training images' pixels in [0, 1]).
  static Normalization fashion_mnist() { return {0.2860f, 0.3530f}; }
};

}  // namespace opsnn::data
