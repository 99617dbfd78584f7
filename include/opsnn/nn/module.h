// Module: the base of every layer and model, in the manner of torch::nn::Module. It owns named
// parameters, buffers and child modules; walks them with dotted names in registration order; switches
// train/eval; moves them between devices; and saves/loads them as a state dict. Parameter handles are
// never replaced after registration, so an optimizer may re-home them into one flat arena.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "opsnn/core/device.h"
#include "opsnn/core/tensor.h"

// Declares an option with a chained setter and a getter, as libtorch's TORCH_ARG:
//   struct Conv2dOptions { OPSNN_ARG(int64_t, stride) = 1; };  Conv2dOptions(...).stride(2).padding(1)
#define OPSNN_ARG(T, name)                  \
 public:                                    \
  auto& name(const T& new_##name) {         \
    this->name##_ = new_##name;             \
    return *this;                           \
  }                                         \
  const T& name() const { return name##_; } \
                                            \
 private:                                   \
  T name##_

namespace opsnn::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// Dotted parameter and buffer names -> the module's own tensors (handles, not copies).
using StateDict = std::map<std::string, Tensor>;

struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, absent from the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, unknown to the module
};

class Module {
 public:
  explicit Module(std::string type_name = "Module");
  virtual ~Module() = default;
  // Modules are shared through std::shared_ptr; a copy would silently share (or not) its tensors.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation; the base version throws (modules with other signatures define their own).
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  const std::string& type_name() const { return type_name_; }
  // The text inside the parentheses of str(), e.g. "3, 16, kernel_size=3" for a Conv2d.
  virtual std::string extra_repr() const { return {}; }
  // The module tree, one child per line, as PyTorch prints it.
  std::string str() const;

  // ---- registration (names: non-empty, no '.', unique among this module's entries) ----
  // Marks the tensor requires_grad (unless told otherwise) and names it; returns the same handle.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  // A tensor that is state but not trained (BatchNorm running statistics).
  Tensor register_buffer(const std::string& name, Tensor tensor);
  // Adopts a child; its tensors are renamed "name.<their name>" for messages.
  template <typename ModuleType>
  std::shared_ptr<ModuleType> register_module(const std::string& name, std::shared_ptr<ModuleType> module) {
    static_assert(std::is_base_of_v<Module, ModuleType>, "register_module needs an nn::Module");
    register_child(name, module);
    return module;
  }

  // ---- traversal: own entries first, then each child's, in registration order ----
  // A tensor registered in two places (tied weights) is listed once, under its first name.
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  // Every descendant (not this module), depth first, with dotted names.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules() const;

  // ---- modes and placement ----
  virtual void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter, buffer and gradient in place (all existing handles follow). Call it before
  // an optimizer re-homes the parameters into its arena: moving afterwards leaves the arena behind.
  void to(Device device);
  // The dtype activations are computed in (recursive; default f32). With f16 or bf16 (mixed precision)
  // Conv2d and Linear cast their input and their f32 parameters to it (autograd casts: the gradients
  // reach the parameters as f32), so activations flow in low precision while parameters, gradients,
  // BatchNorm's statistics and affine parameters stay f32. Parameters themselves are never converted;
  // with set_parameter_copies the casts of parameters read the given copies instead.
  void set_compute_dtype(DType dtype);
  DType compute_dtype() const { return compute_dtype_; }
  // Low-precision copies of parameters to use instead of casting them (recursive): keyed by the
  // parameter's TensorImpl, each copy that parameter rounded to the compute dtype, kept current by its
  // owner (optim::Optimizer::enable_param_copy / param_copy). Conv2d and Linear then read the copy
  // through ops::cast_from_copy (same values and gradients as the cast, no conversion). Null: cast.
  using ParameterCopies = std::unordered_map<const TensorImpl*, Tensor>;
  void set_parameter_copies(std::shared_ptr<const ParameterCopies> copies);
  // The copy of `parameter` in the compute dtype, or an undefined tensor.
  Tensor parameter_copy(const Tensor& parameter) const;
  // Zeroes the gradients in place by default, unlike PyTorch: an optimizer's gradients may be views of
  // its arena, which must stay where they are. set_to_none drops them instead. Sparse rows are cleared.
  void zero_grad(bool set_to_none = false);

  // ---- saving and loading ----
  // Parameters and buffers by dotted name, the module's own handles (tied weights under each name).
  StateDict state_dict() const;
  // Copies values in place (converting dtype and device). Shape mismatches always throw ShapeError
  // naming the key and both shapes; with strict, missing or unexpected keys throw DataError listing
  // them. Nothing is copied when it throws.
  LoadStateDictResult load_state_dict(const StateDict& state, bool strict = true);

 private:
  void register_child(const std::string& name, std::shared_ptr<Module> module);
  bool holds(const Module* other) const;  // `other` is a submodule at any depth
  void check_new_name(const std::string& name, const char* kind) const;
  void collect(const std::string& prefix, bool parameters, bool recurse, NamedTensors& out) const;
  void print(std::string& out, int indent) const;

  std::string type_name_;
  bool training_ = true;
  DType compute_dtype_ = DType::f32;
  std::shared_ptr<const ParameterCopies> parameter_copies_;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace opsnn::nn
