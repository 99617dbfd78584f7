// Reading and writing the state of an optimizer's step extensions (step_extensions.h) as named tensors.
#pragma once

#include <map>
#include <string>

#include "opsnn/core/error.h"
#include "opsnn/core/tensor.h"
#include "opsnn/optim/step_extensions.h"

namespace opsnn::optim {

inline std::string extension_key(const std::string& name) { return std::string(kExtensionStatePrefix) + name; }

// Removes `key` from `tensors` and returns it (contiguous); DataError when it is absent or has another
// element count or dtype.
inline Tensor take_extension_state(std::map<std::string, Tensor>& tensors, const std::string& key, int64_t numel,
                                   DType dtype) {
  auto found = tensors.find(key);
  OPSNN_CHECK_AS(DataError, found != tensors.end(), "checkpoint: optimizer state '", key,
                 "' is missing (was the checkpoint written with another optimizer or sparsification setting?)");
  Tensor tensor = found->second;
  tensors.erase(found);
  OPSNN_CHECK_AS(DataError, tensor.numel() == numel && tensor.dtype() == dtype, "checkpoint: optimizer state '", key,
                 "' is ", tensor.str(), ", expected ", numel, " elements of ", dtype_name(dtype));
  return tensor.contiguous();
}

}  // namespace opsnn::optim
