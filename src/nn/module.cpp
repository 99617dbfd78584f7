// Module bookkeeping: registration, dotted-name traversal, train/eval, device moves in place,
// zero_grad, state dicts and the PyTorch-style tree printout.
#include "opsnn/nn/module.h"

#include <unordered_set>

#include "opsnn/autograd/node.h"
#include "opsnn/core/error.h"

namespace opsnn::nn {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// Points tensor (and its gradients) at a copy on `device`, keeping every handle valid.
void move_in_place(const Tensor& tensor, Device device) {
  if (tensor.device() != device) tensor.set_data(tensor.to(device));
  Tensor grad = tensor.grad();
  if (grad.defined() && grad.device() != device) grad.set_data(grad.to(device));
  RowSparseGrad& sparse = tensor.row_sparse_grad();
  for (Tensor& part : sparse.indices) part.set_data(part.to(device));
  for (Tensor& part : sparse.rows) part.set_data(part.to(device));
}

}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Tensor Module::forward(const Tensor&) {
  throw Error(detail::concat(type_name_, " does not implement forward(const Tensor&)"));
}

void Module::check_new_name(const std::string& name, const char* kind) const {
  OPSNN_CHECK(!name.empty(), type_name_, ": a ", kind, " needs a non-empty name");
  OPSNN_CHECK(name.find('.') == std::string::npos, type_name_, ": ", kind, " name '", name,
              "' must not contain '.' (dots separate module levels)");
  auto taken = [&](const auto& entries) {
    for (const auto& entry : entries)
      if (entry.first == name) return true;
    return false;
  };
  OPSNN_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), type_name_, ": cannot register ", kind,
              " '", name, "': the name is already used by a parameter, buffer or submodule");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "parameter");
  OPSNN_CHECK(tensor.defined(), type_name_, ": parameter '", name, "' is an undefined tensor");
  OPSNN_CHECK(tensor.is_leaf(), type_name_, ": parameter '", name,
              "' must be a leaf tensor (it was computed by an op); detach() it first");
  tensor.set_requires_grad(requires_grad);
  tensor.set_name(name);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name, "buffer");
  OPSNN_CHECK(tensor.defined(), type_name_, ": buffer '", name, "' is an undefined tensor");
  tensor.set_name(name);
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::register_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "submodule");
  OPSNN_CHECK(module != nullptr, type_name_, ": submodule '", name, "' is null");
  OPSNN_CHECK(module.get() != this, type_name_, ": cannot register a module as its own submodule '", name, "'");
  // A module holding this one (at any depth) would make a cycle that every walk over the tree (parameters,
  // forward, state_dict) follows until the stack runs out. Before this edge the tree has no cycle, so the
  // search ends.
  OPSNN_CHECK(!module->holds(this), type_name_, ": cannot register submodule '", name, "': it (a ", module->type_name_,
              ") already contains this module, which would make a cycle");
  for (auto& [child_name, tensor] : module->named_parameters()) tensor.set_name(name + "." + child_name);
  for (auto& [child_name, tensor] : module->named_buffers()) tensor.set_name(name + "." + child_name);
  children_.emplace_back(name, std::move(module));
}

bool Module::holds(const Module* other) const {
  for (const auto& [name, child] : children_)
    if (child.get() == other || child->holds(other)) return true;
  return false;
}

void Module::collect(const std::string& prefix, bool parameters, bool recurse, NamedTensors& out) const {
  for (const auto& [name, tensor] : parameters ? parameters_ : buffers_) out.emplace_back(prefix + name, tensor);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", parameters, true, out);
}

// Keeps the first name of each distinct tensor.
static NamedTensors unique_tensors(NamedTensors all) {
  std::unordered_set<const TensorImpl*> seen;
  NamedTensors unique;
  for (auto& entry : all)
    if (seen.insert(entry.second.impl()).second) unique.push_back(std::move(entry));
  return unique;
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors all;
  collect("", true, recurse, all);
  return unique_tensors(std::move(all));
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> tensors;
  for (auto& entry : named_parameters(recurse)) tensors.push_back(std::move(entry.second));
  return tensors;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors all;
  collect("", false, recurse, all);
  return unique_tensors(std::move(all));
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> tensors;
  for (auto& entry : named_buffers(recurse)) tensors.push_back(std::move(entry.second));
  return tensors;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules;
  for (const auto& [name, child] : children_) {
    modules.emplace_back(name, child);
    for (auto& [descendant_name, descendant] : child->named_modules())
      modules.emplace_back(name + "." + descendant_name, std::move(descendant));
  }
  return modules;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& entry : children_) entry.second->train(on);
}

void Module::set_parameter_copies(std::shared_ptr<const ParameterCopies> copies) {
  parameter_copies_ = copies;
  for (auto& entry : children_) entry.second->set_parameter_copies(copies);
}

Tensor Module::parameter_copy(const Tensor& parameter) const {
  if (!parameter_copies_ || !parameter.defined()) return Tensor();
  auto found = parameter_copies_->find(parameter.impl());
  if (found == parameter_copies_->end() || found->second.dtype() != compute_dtype_) return Tensor();
  return found->second;
}

void Module::set_compute_dtype(DType dtype) {
  OPSNN_CHECK_AS(TypeError, dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, type_name_,
                 ": compute dtype must be f32, f16 or bf16, got ", dtype_name(dtype));
  compute_dtype_ = dtype;
  for (auto& entry : children_) entry.second->set_compute_dtype(dtype);
}

void Module::to(Device device) {
  device_services(device);  // an absent device fails here, before anything has moved
  for (const Tensor& tensor : parameters()) move_in_place(tensor, device);
  for (const Tensor& tensor : buffers()) move_in_place(tensor, device);
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& parameter : parameters()) {
    parameter.row_sparse_grad().clear();
    if (set_to_none) {
      parameter.set_grad(Tensor());
    } else if (parameter.grad().defined()) {
      parameter.grad().zero_();
    }
  }
}

StateDict Module::state_dict() const {
  NamedTensors all;
  collect("", true, true, all);
  collect("", false, true, all);
  return StateDict(all.begin(), all.end());
}

LoadStateDictResult Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict own = state_dict();
  LoadStateDictResult result;
  std::vector<std::string> shape_mismatches, dtype_mismatches;
  for (const auto& [key, tensor] : own) {
    auto found = state.find(key);
    if (found == state.end()) {
      result.missing_keys.push_back(key);
      continue;
    }
    OPSNN_CHECK_AS(DataError, found->second.defined(), "load_state_dict: entry '", key, "' is an undefined tensor");
    if (found->second.shape() != tensor.shape())
      shape_mismatches.push_back(detail::concat("'", key, "': state dict has ", shape_str(found->second.shape()),
                                                ", module has ", shape_str(tensor.shape())));
    // Floating values convert between precisions (a bf16 export into f32 parameters); integer bits
    // copied into floating parameters, or the reverse, are a different quantity and would load as garbage.
    DType from = found->second.dtype(), to = tensor.dtype();
    if (from != to && !(is_floating(from) && is_floating(to)))
      dtype_mismatches.push_back(
          detail::concat("'", key, "': state dict has ", dtype_name(from), ", module has ", dtype_name(to)));
  }
  for (const auto& entry : state)
    if (!own.count(entry.first)) result.unexpected_keys.push_back(entry.first);
  OPSNN_CHECK_AS(ShapeError, shape_mismatches.empty(), "load_state_dict into ", type_name_, ": shape mismatch for ",
                 join(shape_mismatches));
  OPSNN_CHECK_AS(TypeError, dtype_mismatches.empty(), "load_state_dict into ", type_name_, ": dtype mismatch for ",
                 join(dtype_mismatches));
  if (strict) {
    std::vector<std::string> problems;
    if (!result.missing_keys.empty()) problems.push_back("missing keys: " + join(result.missing_keys));
    if (!result.unexpected_keys.empty()) problems.push_back("unexpected keys: " + join(result.unexpected_keys));
    OPSNN_CHECK_AS(DataError, problems.empty(), "load_state_dict into ", type_name_, " (strict): ", problems[0],
                   problems.size() > 1 ? "; " + problems[1] : std::string());
  }
  autograd::NoGradGuard no_grad;
  for (auto& [key, tensor] : own) {
    auto found = state.find(key);
    if (found != state.end()) tensor.copy_(found->second);
  }
  return result;
}

void Module::print(std::string& out, int indent) const {
  out += type_name_ + "(" + extra_repr();
  if (children_.empty()) {
    out += ")";
    return;
  }
  out += "\n";
  for (const auto& [name, child] : children_) {
    out += std::string(static_cast<size_t>(indent + 2), ' ') + "(" + name + "): ";
    child->print(out, indent + 2);
    out += "\n";
  }
  out += std::string(static_cast<size_t>(indent), ' ') + ")";
}

std::string Module::str() const {
  std::string out;
  print(out, 0);
  return out;
}

}  // namespace opsnn::nn
