// Sequential: ordered registration and the chained forward pass.
#include "opsnn/nn/sequential.h"

#include "opsnn/core/error.h"

namespace opsnn::nn {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) : Module("Sequential") {
  for (auto& module : modules) push_back(std::move(module));
}

std::shared_ptr<Module> Sequential::operator[](size_t index) const {
  OPSNN_CHECK(index < modules_.size(), "Sequential index ", index, " out of range for ", modules_.size(), " modules");
  return modules_[index];
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor output = input;
  for (const auto& module : modules_) output = module->forward(output);
  return output;
}

}  // namespace opsnn::nn
