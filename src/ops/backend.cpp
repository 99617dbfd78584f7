// The compute-backend registry that the functional ops dispatch through (the CPU kernels are built in;
// the composition root, src/register_builtins.cpp, registers the CUDA ones) and the process-wide f32 math
// and convolution settings; the base class's optional fused kernels.
#include "opsnn/ops/backend.h"

#include <array>
#include <atomic>

#include "ops/cpu/cpu_backend.h"

namespace opsnn::ops {
namespace {
std::array<std::unique_ptr<Backend>, 2>& backends() {
  static std::array<std::unique_ptr<Backend>, 2> instance{make_cpu_backend(), nullptr};
  return instance;
}

std::atomic<Fp32Math> fp32_math_setting{Fp32Math::strict};
std::atomic<bool> conv_deterministic_setting{true};
}  // namespace

void set_fp32_math(Fp32Math math) { fp32_math_setting.store(math); }
Fp32Math fp32_math() { return fp32_math_setting.load(); }
void set_conv_deterministic(bool deterministic) { conv_deterministic_setting.store(deterministic); }
bool conv_deterministic() { return conv_deterministic_setting.load(); }

void register_backend(DeviceType type, std::unique_ptr<Backend> backend) {
  backends()[static_cast<size_t>(type)] = std::move(backend);
}

Backend& backend_for(Device device) {
  device_services(device);  // throws a clear error for an absent device
  Backend* backend = backends()[static_cast<size_t>(device.type)].get();
  OPSNN_CHECK_AS(DeviceError, backend != nullptr, "no compute kernels are registered for ", device.str());
  return *backend;
}

bool Backend::fuses_batch_norm_relu_max_pool2d(const Tensor&, const Pool2dGeometry&) const { return false; }

void Backend::batch_norm_relu_max_pool2d_forward_train(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                                                       double, double, const Pool2dGeometry&, Tensor&, Tensor&, Tensor&,
                                                       Tensor&) {
  throw UsageError(
      "batch_norm_relu_max_pool2d_forward_train: this backend does not fuse it (ask "
      "fuses_batch_norm_relu_max_pool2d first)");
}

void Backend::batch_norm_relu_max_pool2d_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                  const Tensor&, const Tensor&, const Tensor&, const Pool2dGeometry&,
                                                  Tensor&, Tensor&, Tensor&, bool) {
  throw UsageError(
      "batch_norm_relu_max_pool2d_backward: this backend does not fuse it (ask "
      "fuses_batch_norm_relu_max_pool2d first)");
}

void check_batch_norm_residual(const Tensor& input, bool relu, const Tensor& residual, const char* what,
                               const ResidualNormalization& residual_norm, bool has_out) {
  OPSNN_CHECK(has_out || (!relu && !residual.defined()), what,
              ": without an output (statistics only) there is no relu or residual to apply");
  if (residual_norm.defined()) {
    OPSNN_CHECK(residual.defined(), what, ": a residual normalization needs the residual it normalizes");
    const int64_t channels = input.dim() >= 2 ? input.size(1) : -1;
    for (const Tensor* t :
         {&residual_norm.gamma, &residual_norm.beta, &residual_norm.save_mean, &residual_norm.save_invstd}) {
      OPSNN_CHECK_AS(ShapeError, t->defined() && t->dim() == 1 && t->size(0) == channels, what,
                     ": the residual normalization's per-channel tensors must be [", channels, "], got ",
                     t->defined() ? t->str() : std::string("an undefined one"));
      check_same_device(input, *t, what);
    }
  }
  if (!residual.defined()) return;
  OPSNN_CHECK(relu, what, ": a residual is added only before a relu (relu(batch norm + residual))");
  check_same_shape(input, residual, what);
  check_same_dtype(input, residual, what);
  check_same_device(input, residual, what);
  OPSNN_CHECK(residual.is_contiguous(), what, ": the residual must be contiguous");
}

void check_relu_mask(const Tensor& grad_out, const Tensor& relu_output, const Tensor& beta, const Tensor& masked_grad,
                     const char* what) {
  OPSNN_CHECK(!relu_output.defined() || !beta.defined(), what,
              ": the relu mask is read from relu_output or recomputed with beta, not both");
  if (relu_output.defined()) {
    check_same_shape(grad_out, relu_output, what);
    check_same_dtype(grad_out, relu_output, what);
    check_same_device(grad_out, relu_output, what);
  }
  if (beta.defined()) {
    OPSNN_CHECK_AS(ShapeError, grad_out.dim() >= 2 && beta.dim() == 1 && beta.size(0) == grad_out.size(1), what,
                   ": beta ", beta.str(), " does not match the gradient ", grad_out.str(), " (one value per channel)");
    check_same_device(grad_out, beta, what);
  }
  if (!masked_grad.defined()) return;
  OPSNN_CHECK(relu_output.defined(), what, ": a masked gradient is written only after a fused relu");
  check_same_shape(grad_out, masked_grad, what);
  check_same_dtype(grad_out, masked_grad, what);
  check_same_device(grad_out, masked_grad, what);
  OPSNN_CHECK(masked_grad.is_contiguous(), what, ": the masked gradient must be contiguous");
}

}  // namespace opsnn::ops
