// Tensor factories, views, copies and conversions (no autograd recording here; see ops/).
#include "opsnn/core/tensor.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "opsnn/core/rng.h"

namespace opsnn {

std::string shape_str(const Shape& shape) {
  std::ostringstream stream;
  stream << '[';
  for (size_t i = 0; i < shape.size(); ++i) stream << (i ? ", " : "") << shape[i];
  stream << ']';
  return stream.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t total = 1;
  bool overflow = false;
  for (int64_t extent : shape) {
    if (extent == 0) return 0;  // empty whatever the other extents are
    overflow = overflow || __builtin_mul_overflow(total, extent, &total);
  }
  // A wrapped count would size a buffer far smaller than the loops that fill it.
  OPSNN_CHECK_AS(ShapeError, !overflow, "shape ", shape_str(shape), " has more elements than int64 can count");
  return total;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

static void check_shape_valid(const Shape& shape) {
  for (int64_t extent : shape)
    OPSNN_CHECK_AS(ShapeError, extent >= 0, "negative dimension in shape ", shape_str(shape));
}

// Bytes of a contiguous tensor; a ShapeError when the count (or its strides) would overflow int64.
static size_t checked_nbytes(const Shape& shape, DType dtype) {
  int64_t span = 1;  // contiguous_strides multiplies max(extent, 1): empty shapes need that to fit too
  for (int64_t extent : shape)
    OPSNN_CHECK_AS(ShapeError, !__builtin_mul_overflow(span, std::max<int64_t>(extent, 1), &span), "shape ",
                   shape_str(shape), " has more elements than int64 can count");
  int64_t bytes = 0;
  OPSNN_CHECK_AS(ShapeError,
                 !__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)), &bytes), "shape ",
                 shape_str(shape), " of ", dtype_name(dtype), " needs more bytes than int64 can count");
  return static_cast<size_t>(bytes);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape_valid(shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(checked_nbytes(shape, dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor result = empty(shape, dtype, device);
  result.fill_(value);
  return result;
}

Tensor Tensor::scalar(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor Tensor::uniform(const Shape& shape, double low, double high, Generator& generator, DType dtype, Device device) {
  OPSNN_CHECK(low <= high, "uniform: low ", low, " exceeds high ", high);
  Tensor host = empty(shape, DType::f64, kCPU);
  double* values = host.data<double>();
  int64_t count = host.numel();
  uint64_t first = generator.advance(static_cast<uint64_t>(count));
  uint64_t seed = generator.seed();
#pragma omp parallel for schedule(static) if (count > 65536)
  for (int64_t i = 0; i < count; ++i) {
    Philox4 r = philox4x32_10(seed, first + static_cast<uint64_t>(i));
    values[i] = low + (high - low) * (uints_to_unit_double(r.v[0], r.v[1]) - 0x1p-53);
  }
  return host.to(dtype).to(device);
}

Tensor Tensor::normal(const Shape& shape, double mean, double stddev, Generator& generator, DType dtype,
                      Device device) {
  OPSNN_CHECK(stddev >= 0, "normal: negative standard deviation ", stddev);
  Tensor host = empty(shape, DType::f64, kCPU);
  double* values = host.data<double>();
  int64_t count = host.numel();
  uint64_t first = generator.advance(static_cast<uint64_t>(count));
  uint64_t seed = generator.seed();
#pragma omp parallel for schedule(static) if (count > 65536)
  for (int64_t i = 0; i < count; ++i) {
    // Box-Muller on the counter's four words: (0, 1] uniforms, so the log is finite.
    Philox4 r = philox4x32_10(seed, first + static_cast<uint64_t>(i));
    double u1 = uints_to_unit_double(r.v[0], r.v[1]);
    double u2 = uints_to_unit_double(r.v[2], r.v[3]);
    values[i] = mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
  return host.to(dtype).to(device);
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, int64_t offset, const Shape& shape, DType dtype) {
  check_shape_valid(shape);
  OPSNN_CHECK_AS(UsageError, storage != nullptr, "view_of: null storage");
  OPSNN_CHECK(offset >= 0 && static_cast<size_t>(offset) <= storage->bytes() / dtype_size(dtype) &&
                  checked_nbytes(shape, dtype) <= storage->bytes() - static_cast<size_t>(offset) * dtype_size(dtype),
              "view_of: ", shape_str(shape), " at offset ", offset, " exceeds a storage of ", storage->bytes(),
              " bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const {
  int64_t rank = dim();
  int64_t index = d < 0 ? d + rank : d;
  OPSNN_CHECK_AS(ShapeError, index >= 0 && index < rank, "dimension ", d, " out of range for shape ",
                 shape_str(shape()));
  return shape()[static_cast<size_t>(index)];
}

bool Tensor::is_contiguous() const {
  const TensorImpl& t = checked();
  if (shape_numel(t.shape) == 0) return true;  // no elements: any strides describe the same (empty) layout
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return detail::concat(dtype_name(dtype()), shape_str(shape()), " on ", device().str());
}

void* Tensor::data_ptr() const {
  const TensorImpl& t = checked();
  if (t.storage->data() == nullptr) return nullptr;
  return static_cast<char*>(t.storage->data()) + t.offset * static_cast<int64_t>(dtype_size(t.dtype));
}

double Tensor::item() const {
  OPSNN_CHECK_AS(ShapeError, numel() == 1, "item() needs a one-element tensor, got ", shape_str(shape()));
  return to_vector<double>()[0];
}

// A new contiguous tensor holding this tensor's values converted to dtype on this tensor's device.
static Tensor convert_on_device(const Tensor& source, DType dtype) {
  Tensor result = Tensor::empty(source.shape(), dtype, source.device());
  if (source.numel() == 0) return result;
  device_services(source.device())
      .strided_copy(result.data_ptr(), dtype, source.data_ptr(), source.dtype(), static_cast<int>(source.dim()),
                    source.shape().data(), source.strides().data(), source.device().index);
  return result;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return convert_on_device(*this, dtype());
}

Tensor Tensor::clone() const { return convert_on_device(*this, dtype()); }

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  return convert_on_device(*this, target);
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor source = contiguous();
  Tensor result = empty(shape(), dtype(), target);
  if (numel() == 0) return result;
  if (source.device().is_cpu()) {
    device_services(target).copy_from_host(result.data_ptr(), source.data_ptr(), nbytes(), target.index);
  } else if (target.is_cpu()) {
    device_services(source.device())
        .copy_to_host(result.data_ptr(), source.data_ptr(), nbytes(), source.device().index);
  } else {  // between two GPUs: through the host, rarely used
    return source.to(kCPU).to(target);
  }
  return result;
}

Tensor& Tensor::copy_(const Tensor& source) {
  check_same_shape(*this, source, "copy_");
  if (numel() == 0) return *this;
  Tensor converted = source.to(device()).to(dtype());
  if (is_contiguous()) {
    Tensor compact = converted.contiguous();
    if (!compact.same(*this))
      device_services(device()).copy_within(data_ptr(), compact.data_ptr(), nbytes(), device().index);
    return *this;
  }
  // A strided destination: scatter on the host (only small, rare cases reach here).
  OPSNN_CHECK(device().is_cpu(), "copy_ into a non-contiguous ", device().str(), " tensor is not supported");
  std::vector<double> values = converted.to_vector<double>();
  visit_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* base = static_cast<T*>(data_ptr());
    const Shape& extents = shape();
    const Shape& steps = strides();
    for (int64_t flat = 0; flat < numel(); ++flat) {
      int64_t offset_elements = 0, remaining = flat;
      for (size_t d = extents.size(); d-- > 0;) {
        offset_elements += (remaining % extents[d]) * steps[d];
        remaining /= extents[d];
      }
      base[offset_elements] = convert_value<T>(values[static_cast<size_t>(flat)]);
    }
  });
  return *this;
}

Tensor& Tensor::fill_(double value) {
  OPSNN_CHECK(is_contiguous(), "fill_ needs a contiguous tensor, got strides ", shape_str(strides()));
  // One value, checked once: NaN, an infinity or an out-of-range value has no integer to stand for it
  // (element copies saturate instead, as the GPU's must, but a fill would only hide the mistake).
  if (!is_floating(dtype())) {
    const bool fits = visit_dtype(dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>)
        return fits_integer<T>(value);
      else
        return true;
    });
    OPSNN_CHECK_AS(TypeError, fits, "fill: value ", value, " is not representable as ", dtype_name(dtype()),
                   " (NaN, infinite or out of its range)");
  }
  if (numel() > 0) device_services(device()).fill(data_ptr(), dtype(), value, numel(), device().index);
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_same_shape(*this, other, "add_");
  check_same_dtype(*this, other, "add_");
  check_same_device(*this, other, "add_");
  OPSNN_CHECK(is_contiguous(), "add_ needs a contiguous destination");
  Tensor source = other.contiguous();
  if (numel() > 0)
    device_services(device()).accumulate(data_ptr(), source.data_ptr(), dtype(), alpha, numel(), device().index);
  return *this;
}

Tensor& Tensor::add_converted_(const Tensor& other) {
  if (other.dtype() == dtype()) return add_(other);
  check_same_shape(*this, other, "add_converted_");
  check_same_device(*this, other, "add_converted_");
  OPSNN_CHECK_AS(TypeError, is_floating(dtype()) && is_floating(other.dtype()), "add_converted_: ", dtype_name(dtype()),
                 " += ", dtype_name(other.dtype()), " needs floating dtypes");
  OPSNN_CHECK(is_contiguous(), "add_converted_ needs a contiguous destination");
  const Tensor source = other.contiguous();
  if (numel() > 0 && device_services(device()).accumulate_converted(data_ptr(), dtype(), source.data_ptr(),
                                                                    source.dtype(), numel(), device().index))
    return *this;
  return add_(source.to(dtype()));
}

Tensor Tensor::view(const Shape& new_shape) const {
  OPSNN_CHECK_AS(ShapeError, is_contiguous(), "view of a non-contiguous tensor ", str(), "; use contiguous() first");
  Shape resolved = new_shape;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      OPSNN_CHECK_AS(ShapeError, infer_at < 0, "view: more than one -1 in ", shape_str(new_shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      OPSNN_CHECK_AS(ShapeError, resolved[i] >= 0, "view: negative dimension in ", shape_str(new_shape));
      known *= resolved[i];
    }
  }
  if (infer_at >= 0) {
    OPSNN_CHECK_AS(ShapeError, known != 0 && numel() % known == 0, "view: cannot infer -1 in ", shape_str(new_shape),
                   " for ", numel(), " elements of ", shape_str(shape()));
    resolved[static_cast<size_t>(infer_at)] = numel() / known;
  }
  OPSNN_CHECK_AS(ShapeError, shape_numel(resolved) == numel(), "view: shape ", shape_str(shape()), " (", numel(),
                 " elements) cannot be viewed as ", shape_str(new_shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->shape = resolved;
  impl->strides = contiguous_strides(resolved);
  impl->offset = offset();
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

static std::shared_ptr<TensorImpl> view_impl(const TensorImpl& base) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage;
  impl->shape = base.shape;
  impl->strides = base.strides;
  impl->offset = base.offset;
  impl->dtype = base.dtype;
  return impl;
}

static size_t wrap_dim(int64_t d, int64_t rank, const Shape& shape) {
  int64_t index = d < 0 ? d + rank : d;
  OPSNN_CHECK_AS(ShapeError, index >= 0 && index < rank, "dimension ", d, " out of range for shape ", shape_str(shape));
  return static_cast<size_t>(index);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  size_t axis = wrap_dim(d, dim(), shape());
  int64_t extent = shape()[axis];
  OPSNN_CHECK_AS(ShapeError, 0 <= start && start <= end && end <= extent, "slice [", start, ", ", end,
                 ") out of range for dimension ", d, " of ", shape_str(shape()));
  auto impl = view_impl(checked());
  impl->offset += start * impl->strides[axis];
  impl->shape[axis] = end - start;
  return Tensor(std::move(impl));
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  size_t axis = wrap_dim(d, dim(), shape());
  OPSNN_CHECK_AS(ShapeError, index >= 0 && index < shape()[axis], "select index ", index,
                 " out of range for dimension ", d, " of ", shape_str(shape()));
  auto impl = view_impl(checked());
  impl->offset += index * impl->strides[axis];
  impl->shape.erase(impl->shape.begin() + static_cast<int64_t>(axis));
  impl->strides.erase(impl->strides.begin() + static_cast<int64_t>(axis));
  return Tensor(std::move(impl));
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  size_t a = wrap_dim(dim0, dim(), shape()), b = wrap_dim(dim1, dim(), shape());
  auto impl = view_impl(checked());
  std::swap(impl->shape[a], impl->shape[b]);
  std::swap(impl->strides[a], impl->strides[b]);
  return Tensor(std::move(impl));
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  OPSNN_CHECK_AS(ShapeError, static_cast<int64_t>(order.size()) == dim(), "permute: order ", shape_str(order), " has ",
                 order.size(), " entries but the shape ", shape_str(shape()), " has ", dim(), " dimensions");
  auto impl = view_impl(checked());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t index = order[i] < 0 ? order[i] + dim() : order[i];
    OPSNN_CHECK_AS(ShapeError, index >= 0 && index < dim(), "permute: order ", shape_str(order), " names dimension ",
                   order[i], ", out of range for shape ", shape_str(shape()));
    const size_t source = static_cast<size_t>(index);
    OPSNN_CHECK_AS(ShapeError, !seen[source], "permute: order ", shape_str(order), " names dimension ", index,
                   " twice (repeated); it must be a permutation of 0 .. ", dim() - 1);
    seen[source] = true;
    impl->shape[i] = shape()[source];
    impl->strides[i] = strides()[source];
  }
  return Tensor(std::move(impl));
}

Tensor Tensor::detach() const { return Tensor(view_impl(checked())); }

Tensor& Tensor::set_requires_grad(bool value) {
  OPSNN_CHECK(!value || is_floating(dtype()), "requires_grad needs a floating dtype, got ", dtype_name(dtype()));
  OPSNN_CHECK(is_leaf() || value, "cannot clear requires_grad of a non-leaf tensor; use detach()");
  checked().requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const {
  const auto& grad_impl = checked().grad;
  return grad_impl ? Tensor(grad_impl) : Tensor();
}

void Tensor::set_grad(const Tensor& grad) {
  // The engine accumulates into .grad in place and the optimizers read it as the parameter's dtype and
  // layout: a gradient of another dtype or a strided view would fail (or convert) deep inside backward.
  if (grad.defined()) {
    check_same_shape(*this, grad, "set_grad");
    check_same_device(*this, grad, "set_grad");
    OPSNN_CHECK_AS(TypeError, grad.dtype() == dtype() && is_floating(grad.dtype()), "set_grad: gradient of dtype ",
                   dtype_name(grad.dtype()), " for a ", dtype_name(dtype()),
                   " tensor (needs the tensor's own floating dtype)");
    OPSNN_CHECK_AS(ShapeError, grad.is_contiguous(), "set_grad: gradient of shape ", shape_str(grad.shape()),
                   " must be contiguous, got a strided view");
  }
  checked().grad = grad.impl_ptr();
}

Tensor& Tensor::set_sparse_grad(bool value) {
  checked().sparse_grad = value;
  return *this;
}

Tensor& Tensor::set_name(std::string name) {
  checked().name = std::move(name);
  return *this;
}

void Tensor::rehome(std::shared_ptr<Storage> new_storage, int64_t new_offset) const {
  OPSNN_CHECK_AS(UsageError, new_storage != nullptr, "rehome: null storage for a tensor of ", shape_str(shape()));
  OPSNN_CHECK_AS(DeviceError, new_storage->device() == device(), "rehome: tensor on ", device().str(),
                 " cannot move into storage on ", new_storage->device().str());
  Tensor destination = view_of(new_storage, new_offset, shape(), dtype());
  destination.copy_(*this);
  TensorImpl& t = checked();
  t.storage = std::move(new_storage);
  t.offset = new_offset;
  t.strides = contiguous_strides(t.shape);
}

void Tensor::set_data(const Tensor& source) const {
  const TensorImpl& from = source.checked();
  TensorImpl& t = checked();
  t.storage = from.storage;
  t.shape = from.shape;
  t.strides = from.strides;
  t.offset = from.offset;
  t.dtype = from.dtype;
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  OPSNN_CHECK_AS(ShapeError, a.shape() == b.shape(), what, ": shape mismatch, ", shape_str(a.shape()), " vs ",
                 shape_str(b.shape()));
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* what) {
  OPSNN_CHECK_AS(TypeError, a.dtype() == b.dtype(), what, ": dtype mismatch, ", dtype_name(a.dtype()), " vs ",
                 dtype_name(b.dtype()));
}

void check_same_device(const Tensor& a, const Tensor& b, const char* what) {
  OPSNN_CHECK_AS(DeviceError, a.device() == b.device(), what, ": device mismatch, ", a.device().str(), " vs ",
                 b.device().str());
}

}  // namespace opsnn
