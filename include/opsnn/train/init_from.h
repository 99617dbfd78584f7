// Initialising a model from weights trained elsewhere (model.init_from): a safetensors file whose tensor
// names are the model's state_dict() names. opsnn's module names follow PyTorch's (for ResNets exactly
// torchvision's: conv1.weight, bn1.running_var, layer2.0.downsample.1.weight, fc.bias), so the state dict
// of a torchvision model saved with safetensors.torch.save_file (tools/export_torchvision_resnet.py) loads
// as it is. Floating tensors of any precision (F32, F16, BF16, F64) are converted to the model's dtype.
// Entries named *.num_batches_tracked (torchvision's BatchNorm step counters, i64) are skipped where the
// model has no such tensor: opsnn's BatchNorm2d keeps none (its momentum is fixed).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "opsnn/train/safetensors.h"

namespace opsnn::nn {
class Module;
}

namespace opsnn::train {

// What a load matched: the names copied and, each in full, the names that did not fit.
struct InitFromReport {
  // All but `loaded` (file order) sorted by name.
  std::vector<std::string> loaded;            // copied into the model
  std::vector<std::string> missing;           // the model's, absent from the file
  std::vector<std::string> unexpected;        // the file's, unknown to the model
  std::vector<std::string> shape_mismatches;  // "fc.weight (file [1000, 512], model [10, 512])"
  std::vector<std::string> dtype_mismatches;  // "x (file i64, model f32)": integer bits are no float values
  std::vector<std::string> skipped;           // *.num_batches_tracked the model has no tensor for
  // True when every name of the model and of the file matched (skipped counters aside).
  bool complete() const;
  // "1 missing: a; 2 unexpected: b, c; 1 shape mismatch: fc.weight (file [..], model [..])"; "" when complete.
  std::string problems() const;
};

// Copies the tensors of `tensors` whose name, shape and dtype kind fit into `model` (in place, onto the
// model's device and dtype). A tensor of the model that gets no value keeps the one it had (its fresh
// initialisation). With strict, any missing, unexpected or mismatched name throws DataError "SOURCE does
// not fit the model (TYPE, strict): " + problems() and nothing is copied; otherwise the report says what
// did not fit. `source` names the tensors in messages (the file, usually).
InitFromReport load_init_weights(nn::Module& model, const NamedTensors& tensors, const std::string& source,
                                 bool strict = true);
// read_safetensors(file) (DataError for a missing or corrupt file) and the load above.
InitFromReport load_init_weights(nn::Module& model, const std::filesystem::path& file, bool strict = true);

}  // namespace opsnn::train
