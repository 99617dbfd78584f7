// Loading a model's parameters and buffers by name from a safetensors file (see init_from.h).
#include "opsnn/train/init_from.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "opsnn/core/error.h"
#include "opsnn/nn/module.h"

namespace opsnn::train {

namespace {

constexpr std::string_view kBatchCounter = ".num_batches_tracked";

bool is_batch_counter(const std::string& name) {
  return name.size() > kBatchCounter.size() &&
         std::string_view(name).substr(name.size() - kBatchCounter.size()) == kBatchCounter;
}

// "2 shape mismatches: a (...), b (...)"
std::string listing(const std::vector<std::string>& names, const char* singular, const char* plural) {
  std::string text = std::to_string(names.size()) + " " + (names.size() == 1 ? singular : plural) + ": ";
  for (size_t i = 0; i < names.size(); ++i) text += (i > 0 ? ", " : "") + names[i];
  return text;
}

}  // namespace

bool InitFromReport::complete() const {
  return missing.empty() && unexpected.empty() && shape_mismatches.empty() && dtype_mismatches.empty();
}

std::string InitFromReport::problems() const {
  std::string text;
  auto add = [&text](const std::vector<std::string>& names, const char* singular, const char* plural) {
    if (names.empty()) return;
    if (!text.empty()) text += "; ";
    text += listing(names, singular, plural);
  };
  add(missing, "missing", "missing");
  add(unexpected, "unexpected", "unexpected");
  add(shape_mismatches, "shape mismatch", "shape mismatches");
  add(dtype_mismatches, "dtype mismatch", "dtype mismatches");
  return text;
}

InitFromReport load_init_weights(nn::Module& model, const NamedTensors& tensors, const std::string& source,
                                 bool strict) {
  const nn::StateDict own = model.state_dict();
  InitFromReport report;
  nn::StateDict matching;
  std::set<std::string> in_file;
  for (const auto& [name, tensor] : tensors) {
    in_file.insert(name);
    auto found = own.find(name);
    if (found == own.end()) {
      (is_batch_counter(name) ? report.skipped : report.unexpected).push_back(name);
      continue;
    }
    const Tensor& target = found->second;
    OPSNN_CHECK_AS(DataError, tensor.defined(), source, ": tensor '", name, "' is undefined");
    if (tensor.shape() != target.shape()) {
      report.shape_mismatches.push_back(
          detail::concat(name, " (file ", shape_str(tensor.shape()), ", model ", shape_str(target.shape()), ")"));
      continue;
    }
    // Floating values convert between precisions; integer bits into a float tensor (or the reverse) are
    // another quantity, as Module::load_state_dict refuses them too.
    if (tensor.dtype() != target.dtype() && !(is_floating(tensor.dtype()) && is_floating(target.dtype()))) {
      report.dtype_mismatches.push_back(
          detail::concat(name, " (file ", dtype_name(tensor.dtype()), ", model ", dtype_name(target.dtype()), ")"));
      continue;
    }
    matching.emplace(name, tensor);
    report.loaded.push_back(name);
  }
  for (const auto& entry : own)
    if (in_file.count(entry.first) == 0) report.missing.push_back(entry.first);  // sorted: a std::map
  // Sorted by name, so a message reads the same whatever order the file's writer chose.
  for (auto* names : {&report.unexpected, &report.shape_mismatches, &report.dtype_mismatches, &report.skipped})
    std::sort(names->begin(), names->end());
  OPSNN_CHECK_AS(DataError, !strict || report.complete(), source, " does not fit the model (", model.type_name(),
                 ", strict): ", report.problems(), "; nothing was loaded");
  model.load_state_dict(matching, false);  // names, shapes and dtypes were checked above: it copies
  return report;
}

InitFromReport load_init_weights(nn::Module& model, const std::filesystem::path& file, bool strict) {
  SafetensorsContents contents = read_safetensors(file);
  return load_init_weights(model, contents.tensors, file.string(), strict);
}

}  // namespace opsnn::train
