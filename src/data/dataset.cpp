// Dataset helpers shared by every implementation: batch allocation and argument checks.
#include "opsnn/data/dataset.h"

#include "opsnn/core/error.h"

namespace opsnn::data {

Batch Dataset::allocate_batch(int64_t count) const {
  OPSNN_CHECK(count >= 0, name(), ": batch of ", count, " samples");
  Shape input_shape{count};
  for (int64_t extent : sample_shape()) input_shape.push_back(extent);
  Batch batch;
  batch.inputs = Tensor::empty(input_shape, input_dtype());
  batch.labels = Tensor::empty({count}, label_dtype());
  return batch;
}

Batch Dataset::get(std::span<const int64_t> indices) const {
  Batch batch = allocate_batch(static_cast<int64_t>(indices.size()));
  get_batch(indices, batch.inputs, batch.labels);
  return batch;
}

void Dataset::check_batch_arguments(std::span<const int64_t> indices, const Tensor& inputs,
                                    const Tensor& labels) const {
  const int64_t count = static_cast<int64_t>(indices.size());
  Shape expected_inputs{count};
  for (int64_t extent : sample_shape()) expected_inputs.push_back(extent);
  OPSNN_CHECK_AS(ShapeError, inputs.defined() && inputs.shape() == expected_inputs && inputs.is_contiguous(), name(),
                 ": input buffer must be contiguous ", shape_str(expected_inputs), ", got ",
                 inputs.defined() ? inputs.str() : std::string("an undefined tensor"));
  OPSNN_CHECK_AS(ShapeError, labels.defined() && labels.shape() == Shape{count} && labels.is_contiguous(), name(),
                 ": label buffer must be contiguous [", count, "], got ",
                 labels.defined() ? labels.str() : std::string("an undefined tensor"));
  OPSNN_CHECK_AS(TypeError, inputs.dtype() == input_dtype() && labels.dtype() == label_dtype(), name(),
                 ": buffers must be ", dtype_name(input_dtype()), " inputs and ", dtype_name(label_dtype()),
                 " labels, got ", inputs.str(), " and ", labels.str());
  OPSNN_CHECK_AS(DeviceError, inputs.device() == kCPU && labels.device() == kCPU, name(),
                 ": batch buffers must be on the CPU");
  const int64_t total = size();
  for (int64_t index : indices) {
    OPSNN_CHECK(index >= 0 && index < total, name(), ": sample index ", index, " out of range [0, ", total, ")");
  }
}

}  // namespace opsnn::data
