// configs/reference.yaml cannot rot: it loads, names every key of the schema, documents each with a
// comment, and states the true defaults. Every other config in configs/ must load too.
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/train/config.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::train;

namespace {

const std::string kReference = std::string(OPSNN_SOURCE_DIR) + "/configs/reference.yaml";

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Dotted paths of every key in a YAML tree, with the 0-based line of each key.
void collect_keys(const YAML::Node& map, const std::string& prefix, std::vector<std::pair<std::string, int>>& keys) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string path = prefix.empty() ? it->first.Scalar() : prefix + "." + it->first.Scalar();
    keys.emplace_back(path, it->first.Mark().line);
    if (it->second.IsMap()) collect_keys(it->second, path, keys);
  }
}

}  // namespace

TEST_CASE("configs/reference.yaml loads and holds exactly the defaults", "[config]") {
  const TrainConfig loaded = load_config(kReference);
  TrainConfig defaults;
  defaults.run.name = "reference";
  defaults.run.out_dir = "runs/reference";
  REQUIRE(loaded == defaults);
}

TEST_CASE("configs/reference.yaml documents every key of the schema", "[config]") {
  std::vector<std::pair<std::string, int>> keys;
  collect_keys(YAML::LoadFile(kReference), "", keys);
  std::set<std::string> present;
  for (const auto& key : keys) present.insert(key.first);
  const std::vector<std::string> lines = read_lines(kReference);
  for (const std::string& path : config_key_paths()) {
    INFO("key " << path);
    CHECK(present.count(path) == 1);
  }
  // Each leaf key sits right under its comment (type, default, range, meaning).
  const std::vector<std::string> schema_keys = config_key_paths();
  const std::set<std::string> leaves(schema_keys.begin(), schema_keys.end());
  for (const auto& [path, line] : keys) {
    if (leaves.count(path) == 0) continue;
    INFO("key " << path << " at line " << line + 1);
    REQUIRE(line > 0);
    const std::string& above = lines[static_cast<size_t>(line - 1)];
    CHECK(above.find_first_not_of(' ') != std::string::npos);
    CHECK(above[above.find_first_not_of(' ')] == '#');
  }
}

TEST_CASE("every config in configs/ loads", "[config]") {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(OPSNN_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    INFO(entry.path().string());
    const TrainConfig config = load_config(entry.path().string());
    CHECK(config.run.name.size() > 0);
    ++count;
  }
  REQUIRE(count >= 2);
}
