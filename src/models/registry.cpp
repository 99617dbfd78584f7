// The model registry: name -> builder. The built-ins are listed here once; the composition root
// (src/register_builtins.cpp) registers them through register_builtin_models.
#include <map>
#include <utility>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/models/models.h"

namespace opsnn::models {
namespace {

std::map<std::string, ModelBuilder>& registry() {
  static std::map<std::string, ModelBuilder> builders;
  return builders;
}

// The built-in models in the order configs list them.
const std::vector<std::pair<std::string, ModelBuilder>>& builtin_models() {
  static const std::vector<std::pair<std::string, ModelBuilder>> models{
      {"mlp", make_mlp},
      {"small_cnn", make_small_cnn},
      {"resnet18", [](const ModelOptions& o, Generator& g) { return make_resnet(18, o, g); }},
      {"resnet34", [](const ModelOptions& o, Generator& g) { return make_resnet(34, o, g); }},
      {"resnet50", [](const ModelOptions& o, Generator& g) { return make_resnet(50, o, g); }},
      {"ctr", make_ctr},
      {"dlrm", make_dlrm},
  };
  return models;
}

}  // namespace

void register_builtin_models() {
  for (const auto& [name, builder] : builtin_models()) register_model(name, builder);
}

const std::vector<std::string>& builtin_model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& entry : builtin_models()) out.push_back(entry.first);
    return out;
  }();
  return names;
}

void register_model(const std::string& name, ModelBuilder builder) {
  OPSNN_CHECK_AS(ConfigError, !name.empty() && builder, "register_model needs a name and a builder");
  registry()[name] = std::move(builder);
}

std::vector<std::string> known_models() {
  std::vector<std::string> names;
  for (const auto& [name, builder] : registry()) names.push_back(name);
  return names;
}

std::shared_ptr<nn::Module> build_model(const ModelOptions& options, Generator& generator) {
  auto found = registry().find(options.arch);
  if (found == registry().end()) {
    std::string list;
    for (const std::string& name : known_models()) list += (list.empty() ? "" : ", ") + name;
    if (list.empty())  // nothing registered: the program never ran the composition root
      throw ConfigError(detail::concat("unknown model '", options.arch,
                                       "': no model is registered (a program calls opsnn::register_builtins() once, "
                                       "or includes <opsnn/opsnn.h>)"));
    throw ConfigError(detail::concat("unknown model '", options.arch, "' (known: ", list, ")"));
  }
  OPSNN_CHECK_AS(ConfigError, options.num_classes >= 1, "model.num_classes must be at least 1, got ",
                 options.num_classes);
  OPSNN_CHECK_AS(ConfigError, options.in_channels >= 1, "model.in_channels must be at least 1, got ",
                 options.in_channels);
  std::shared_ptr<nn::Module> model = found->second(options, generator);
  OPSNN_CHECK_AS(ConfigError, model != nullptr, "the builder registered for model '", options.arch,
                 "' returned no model");
  return model;
}

int64_t count_parameters(const nn::Module& module) {
  int64_t total = 0;
  for (const auto& [name, tensor] : module.named_parameters()) total += tensor.numel();
  return total;
}

}  // namespace opsnn::models
