// Tensor: a strided view (shape, strides, element offset, dtype) of a Storage, plus the autograd
// fields (requires_grad, grad, grad_fn). A Tensor is a cheap handle: copies share one TensorImpl, so a
// parameter re-homed into an arena (rehome) is seen by every holder. Member functions here do not
// record autograd history; differentiable operations live in opsnn/ops/ops.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "opsnn/core/device.h"
#include "opsnn/core/dtype.h"
#include "opsnn/core/error.h"
#include "opsnn/core/storage.h"

namespace opsnn {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);

namespace autograd {
class Node;
}
class Tensor;

// A row-sparse gradient (of an Embedding table): rows[i] is the gradient of table row indices[i].
// Indices may repeat; each occurrence contributes once. Accumulated by appending.
struct RowSparseGrad {
  std::vector<Tensor> indices;  // i64 [n_k] each
  std::vector<Tensor> rows;     // [n_k, row_width] each, dtype of the table
  bool empty() const { return indices.empty(); }
  void clear();  // defined below Tensor: clearing needs the complete type
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  // autograd
  bool requires_grad = false;
  bool sparse_grad = false;  // gradients arrive as RowSparseGrad instead of a dense grad
  std::shared_ptr<TensorImpl> grad;
  RowSparseGrad row_sparse_grad;
  std::shared_ptr<autograd::Node> grad_fn;
  std::string name;  // parameter name, set by nn::Module; used in messages
};

class Generator;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories ----
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = kCPU);
  // Copies host values (converted to dtype) into a new tensor of the given shape.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, DType dtype = dtype_of<T>,
                            Device device = kCPU);
  static Tensor scalar(double value, DType dtype = DType::f32, Device device = kCPU);
  // Seeded random values; the stream depends only on the generator state, never on thread count.
  static Tensor uniform(const Shape& shape, double low, double high, Generator& generator, DType dtype = DType::f32,
                        Device device = kCPU);
  static Tensor normal(const Shape& shape, double mean, double stddev, Generator& generator, DType dtype = DType::f32,
                       Device device = kCPU);
  // A view of existing storage (used by arenas): shape contiguous from element offset.
  static Tensor view_of(std::shared_ptr<Storage> storage, int64_t offset, const Shape& shape, DType dtype);

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return checked().shape; }
  const Shape& strides() const { return checked().strides; }
  int64_t offset() const { return checked().offset; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(shape()); }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().storage->device(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }
  std::string str() const;  // "f32[2, 3] on cpu"

  // ---- data access (CPU tensors; T must match the dtype) ----
  void* data_ptr() const;
  template <typename T>
  T* data() const;
  template <typename T>
  std::vector<T> to_vector() const;  // any device, any layout, converted to T
  double item() const;               // one-element tensor -> double

  // ---- conversions and copies (no autograd) ----
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor& copy_(const Tensor& source);  // same shape; converts dtype, crosses devices
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // same shape, contiguous, floating
  // this += other converted to this dtype (any floating pair): the bits of add_(other.to(dtype())), in one
  // pass for a 16-bit other into f32 on the GPU (a mixed-precision gradient into its f32 parameter's).
  Tensor& add_converted_(const Tensor& other);

  // ---- views (no autograd; share storage) ----
  Tensor view(const Shape& shape) const;  // contiguous tensors; one dimension may be -1
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor detach() const;  // same data, no autograd history, requires_grad false

  // ---- autograd ----
  bool requires_grad() const { return checked().requires_grad; }
  Tensor& set_requires_grad(bool value);
  bool is_leaf() const { return checked().grad_fn == nullptr; }
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked().grad_fn; }
  bool sparse_grad() const { return checked().sparse_grad; }
  Tensor& set_sparse_grad(bool value);
  RowSparseGrad& row_sparse_grad() const { return checked().row_sparse_grad; }
  const std::string& name() const { return checked().name; }
  Tensor& set_name(std::string name);
  // Backpropagates from this tensor; without an argument it must hold one element (gradient 1).
  void backward(const Tensor& gradient = Tensor()) const;

  // Moves this tensor's data into `storage` at element `offset` (copying the current values) and makes
  // it a contiguous view there. Every handle sharing this TensorImpl sees the new location.
  void rehome(std::shared_ptr<Storage> storage, int64_t offset) const;
  // Points this TensorImpl at source's data (storage, shape, strides, offset, dtype), keeping its own
  // autograd fields and name, so every handle sees the new data (nn::Module::to moves tensors so).
  void set_data(const Tensor& source) const;

 private:
  TensorImpl& checked() const {
    OPSNN_CHECK(impl_ != nullptr, "use of an undefined Tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// Throws ShapeError/TypeError/DeviceError naming both sides when a and b differ.
void check_same_shape(const Tensor& a, const Tensor& b, const char* what);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* what);
void check_same_device(const Tensor& a, const Tensor& b, const char* what);

// ---- template definitions ----
template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, DType dtype, Device device) {
  OPSNN_CHECK_AS(ShapeError, static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
                 " values do not fill shape ", shape_str(shape));
  Tensor host = empty(shape, dtype_of<T>, kCPU);
  std::copy(values.begin(), values.end(), host.data<T>());
  if (dtype == dtype_of<T> && device == kCPU) return host;
  return host.to(dtype).to(device);
}

template <typename T>
T* Tensor::data() const {
  OPSNN_CHECK_AS(TypeError, dtype() == dtype_of<T>, "data<", dtype_name(dtype_of<T>), ">() on a ", dtype_name(dtype()),
                 " tensor");
  return static_cast<T*>(data_ptr());
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = to(kCPU).to(dtype_of<T>).contiguous();
  const T* begin = host.data<T>();
  return std::vector<T>(begin, begin + host.numel());
}

inline void RowSparseGrad::clear() {
  indices.clear();
  rows.clear();
}

}  // namespace opsnn
