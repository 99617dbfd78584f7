// Differentiable embedding lookup: rows of a [V, D] table gathered by i64 indices of any shape. The
// backward scatters dense gradients into a [V, D] table gradient, or, for a table marked sparse_grad,
// appends the touched rows to its RowSparseGrad so the optimizer updates only those rows.
#include <memory>
#include <string>

#include "ops/op_support.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {
namespace {

class EmbeddingNode final : public autograd::Node {
 public:
  // sparse_table is set when the gradient goes to that leaf's RowSparseGrad instead of flowing densely.
  EmbeddingNode(Tensor flat_indices, Shape weight_shape, DType dtype, Device device,
                std::shared_ptr<TensorImpl> sparse_table)
      : flat_indices_(std::move(flat_indices)),
        weight_shape_(std::move(weight_shape)),
        dtype_(dtype),
        device_(device),
        sparse_table_(std::move(sparse_table)) {}
  std::string name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    if (!needs_grad(0)) return {Tensor()};
    Tensor rows = internal::contiguous_grad(grad_output, dtype_).view({flat_indices_.numel(), weight_shape_[1]});
    if (sparse_table_) {
      // Our own copies: the gradient buffer may be shared with other nodes, the indices are already ours.
      sparse_table_->row_sparse_grad.indices.push_back(flat_indices_);
      sparse_table_->row_sparse_grad.rows.push_back(rows.clone());
      return {Tensor()};
    }
    Tensor grad_weight = Tensor::zeros(weight_shape_, dtype_, device_);
    backend_for(device_).embedding_backward_dense(rows, flat_indices_, grad_weight);
    return {grad_weight};
  }
  void release() override {
    flat_indices_ = Tensor();
    sparse_table_.reset();
  }

 private:
  Tensor flat_indices_;  // i64 [n], a private copy: callers may refill their index buffer before backward
  Shape weight_shape_;
  DType dtype_;
  Device device_;
  std::shared_ptr<TensorImpl> sparse_table_;
};

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  OPSNN_CHECK_AS(ShapeError, weight.dim() == 2, "embedding: weight must be [V, D], got ", weight.str());
  OPSNN_CHECK_AS(TypeError, indices.dtype() == DType::i64, "embedding: indices must be i64, got ", indices.str());
  OPSNN_CHECK_AS(DeviceError, indices.device() == weight.device(), "embedding: device mismatch, weight ", weight.str(),
                 " vs indices ", indices.str());
  const int64_t count = indices.numel(), width = weight.size(1);
  Tensor flat_indices = indices.clone().view({count});
  Tensor table = weight.contiguous();
  Tensor rows = Tensor::empty({count, width}, table.dtype(), table.device());
  backend_for(table.device()).embedding_forward(table, flat_indices, rows);
  Shape out_shape = indices.shape();
  out_shape.push_back(width);
  Tensor out = rows.view(out_shape);
  if (!autograd::any_requires_grad({weight})) return out;
  // Only a leaf table can take a row-sparse gradient; a computed one passes its gradient on densely.
  std::shared_ptr<TensorImpl> sparse_table = weight.sparse_grad() && weight.is_leaf() ? weight.impl_ptr() : nullptr;
  auto node = std::make_shared<EmbeddingNode>(flat_indices, weight.shape(), weight.dtype(), weight.device(),
                                              std::move(sparse_table));
  return autograd::record(out, std::move(node), {weight});
}

}  // namespace opsnn::ops
