// Writing a TrainConfig back as YAML: every key in schema order, so the file round-trips through
// load_config_text and documents the full resolved setup (--print-config, the run folder's config.yaml).
#include "opsnn/train/config.h"
#include "train/config_schema.h"

namespace opsnn::train {

std::string emit_config(const TrainConfig& config) {
  std::string source = config.source;
  for (char& c : source) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::string out = "# opsnn training config, resolved" + (source.empty() ? std::string() : " from " + source) +
                    ".\n# Every key is documented in configs/reference.yaml.\n";
  std::vector<std::string> open_sections;
  for (const detail::KeySpec& key : detail::schema()) {
    std::vector<std::string> components;
    size_t start = 0;
    for (size_t dot; (dot = key.path.find('.', start)) != std::string::npos; start = dot + 1) {
      components.push_back(key.path.substr(start, dot - start));
    }
    const std::string leaf = key.path.substr(start);
    size_t common = 0;
    while (common < open_sections.size() && common < components.size() && open_sections[common] == components[common]) {
      ++common;
    }
    open_sections.resize(common);
    for (size_t depth = common; depth < components.size(); ++depth) {
      if (depth == 0) out += "\n";
      out += std::string(2 * depth, ' ') + components[depth] + ":\n";
      open_sections.push_back(components[depth]);
    }
    out += std::string(2 * components.size(), ' ') + leaf + ": " + key.write(config) + "\n";
  }
  return out;
}

}  // namespace opsnn::train
