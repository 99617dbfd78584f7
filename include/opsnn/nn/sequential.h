// Sequential: a chain of modules applied in order, registered under their position ("0", "1", ...) or
// a given name, as torch::nn::Sequential.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "opsnn/nn/module.h"

namespace opsnn::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);

  // Appends under the next position's name; returns the module with its own type.
  template <typename ModuleType>
  std::shared_ptr<ModuleType> push_back(std::shared_ptr<ModuleType> module) {
    return push_back(std::to_string(modules_.size()), std::move(module));
  }
  template <typename ModuleType>
  std::shared_ptr<ModuleType> push_back(const std::string& name, std::shared_ptr<ModuleType> module) {
    register_module(name, module);
    modules_.push_back(module);
    return module;
  }

  std::shared_ptr<Module> operator[](size_t index) const;  // throws naming the index and the size
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  Tensor forward(const Tensor& input) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace opsnn::nn
