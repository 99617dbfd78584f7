// IndexDataset: sample i has input [i] and label i % 10, so a batch reveals which indices it holds; it
// throws on a chosen "poisoned" index. For the loader tests.
#pragma once

#include <span>
#include <string>

#include "opsnn/core/error.h"
#include "opsnn/data/dataset.h"

namespace opsnn::testing {

class IndexDataset final : public data::Dataset {
 public:
  explicit IndexDataset(int64_t size, int64_t poison_index = -1) : size_(size), poison_index_(poison_index) {}
  std::string name() const override { return "index"; }
  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return {1}; }
  int64_t num_classes() const override { return 10; }
  void get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const override {
    check_batch_arguments(indices, inputs, labels);
    for (size_t row = 0; row < indices.size(); ++row) {
      if (indices[row] == poison_index_)
        throw DataError("index dataset: poisoned sample " + std::to_string(indices[row]));
      inputs.data<float>()[row] = static_cast<float>(indices[row]);
      labels.data<int64_t>()[row] = indices[row] % 10;
    }
  }

 private:
  int64_t size_, poison_index_;
};

}  // namespace opsnn::testing
