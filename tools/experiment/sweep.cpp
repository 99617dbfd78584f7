// Reading a sweep file. The YAML is read and located by the config loader's own functions
// (train/config_schema.h), so a sweep's messages look like a config's: FILE:LINE:COL, the key, what was
// expected and what was found. Overrides are checked against the config schema here (to name the sweep
// key that holds them) and then handed, with the place each value was written, to the loader opsnn-train
// uses, which checks the values as it checks --set.
#include "experiment/sweep.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/printable.h"
#include "opsnn/core/error.h"
#include "train/config_schema.h"

namespace opsnn::experiment {
namespace {

namespace fs = std::filesystem;
using train::detail::Origin;

const std::vector<std::string> kTopLevelKeys = {"base", "set", "variants", "grid", "seeds", "name", "out_dir"};
// Keys the runner sets itself: a sweep that set them would put runs into one folder or mislabel them.
const std::map<std::string, std::string> kReservedKeys = {
    {"train.seed", "seeds come from the sweep's seeds: list"},
    {"run.name", "the runner names each run <experiment>/<variant>/seed<k>"},
    {"run.out_dir", "each run's folder is <out_dir>/<variant>/seed<k> (set the sweep's out_dir:)"},
};
// Far more than a sweep on one machine runs; a typo in a grid (a list where a range was meant) is caught.
constexpr size_t kMaxRuns = 10000;

struct Override {
  std::string path;    // "optimizer.lr"
  std::string value;   // the value as YAML flow text
  std::string origin;  // FILE:LINE:COL of the value
};

class SweepReader {
 public:
  explicit SweepReader(std::string path) : file_{std::move(path), 0, 0} {}

  std::string at(const YAML::Node& node) const { return train::detail::origin_of(node, file_).text(); }

  [[noreturn]] void fail(const YAML::Node& node, const std::string& key, const std::string& message) const {
    throw ConfigError(at(node) + ": key '" + printable(key) + "': " + message);
  }

  // A scalar naming a string (not a list or mapping, not empty).
  std::string text(const YAML::Node& node, const YAML::Node& key_node, const std::string& key) const {
    if (node.IsNull()) fail(key_node, key, "expected a name or path, got nothing");
    if (!node.IsScalar() || node.Scalar().empty())
      fail(node, key, "expected a name or path, got " + train::detail::describe(node));
    return node.Scalar();
  }

  // The keys of a mapping in order, refusing duplicates (yaml-cpp keeps both) and keys that are not names.
  std::vector<std::pair<YAML::Node, YAML::Node>> entries(const YAML::Node& map, const std::string& section) const {
    std::vector<std::pair<YAML::Node, YAML::Node>> result;
    std::map<std::string, std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key = it->first, value = it->second;
      const std::string where = section.empty() ? "the top level" : "'" + section + "'";
      if (!key.IsScalar() || key.Scalar().empty())
        throw ConfigError(at(key) + ": keys must be plain names, got " + train::detail::describe(key) + " in " + where);
      const std::string name = key.Scalar();
      if (auto previous = seen.find(name); previous != seen.end())
        throw ConfigError(at(key) + ": duplicate key '" + printable(section.empty() ? name : section + "." + name) +
                          "' (first set at " + previous->second + ")");
      seen.emplace(name, at(key));
      result.emplace_back(key, value);
    }
    return result;
  }

  // A config key or section, as --set takes it; else ConfigError at `key_node` with a did-you-mean.
  void check_config_key(const std::string& path, const YAML::Node& key_node, const std::string& sweep_key) const {
    const std::vector<std::string> paths = train::config_key_paths();
    if (train::detail::is_section(path) || std::find(paths.begin(), paths.end(), path) != paths.end()) {
      if (auto reserved = kReservedKeys.find(path); reserved != kReservedKeys.end())
        fail(key_node, sweep_key, "'" + path + "' cannot be overridden here: " + reserved->second);
      return;
    }
    std::string suggestion = train::detail::closest_match(path, paths);
    if (suggestion.empty()) {  // the right name in the wrong section ("lr" for "optimizer.lr")
      const std::string last = path.substr(path.rfind('.') + 1);
      for (const std::string& candidate : paths)
        if (candidate.substr(candidate.rfind('.') + 1) == last) suggestion = candidate;
    }
    fail(key_node, sweep_key,
         "unknown config key '" + printable(path) + "'" +
             (suggestion.empty() ? "; the keys are those of configs/reference.yaml, dotted (optimizer.lr)"
                                 : " (did you mean '" + suggestion + "'?)"));
  }

  // A mapping of config keys to values (set:, one variant). Nested sections ({optimizer: {lr: 0.1}}) are
  // flattened to their keys, so that they override single keys as the dotted form does rather than
  // replacing the base config's whole section.
  void read_overrides(const YAML::Node& map, const YAML::Node& key_node, const std::string& sweep_key,
                      const std::string& prefix, std::vector<Override>& out) const {
    if (map.IsNull()) return;
    if (!map.IsMap())
      fail(map, sweep_key,
           "expected a mapping of config keys to values (e.g. {optimizer.lr: 0.01}), got " +
               train::detail::describe(map));
    for (const auto& [key, value] : entries(map, sweep_key)) {
      const std::string path = prefix.empty() ? key.Scalar() : prefix + "." + key.Scalar();
      check_config_key(path, key, sweep_key);
      if (train::detail::is_section(path)) {
        if (!value.IsMap() || value.size() == 0)
          fail(value.IsNull() ? key : value, sweep_key,
               "'" + path + "' is a section: give its keys ({" + path + ".KEY: VALUE}), got " +
                   train::detail::describe(value));
        read_overrides(value, key, sweep_key, path, out);
        continue;
      }
      for (const Override& earlier : out)
        if (earlier.path == path) fail(key, sweep_key, "'" + path + "' is set twice (first at " + earlier.origin + ")");
      out.push_back({path, flow(value), at(value.IsNull() ? key : value)});
    }
  }

  // The value as one line of YAML, for the loader's --set parser.
  static std::string flow(const YAML::Node& value) {
    if (value.IsScalar()) {
      // A plain scalar stays plain where it can (the loader then types it as YAML would: 1.0e-3, true) and
      // is quoted where it could not be read back alone ("a: b", "x # y"); a quoted one stays a string ("1").
      YAML::Emitter scalar;
      if (value.Tag() == "!") scalar << YAML::DoubleQuoted;
      scalar << value.Scalar();
      return scalar.c_str();
    }
    YAML::Emitter emitter;
    emitter.SetMapFormat(YAML::Flow);
    emitter.SetSeqFormat(YAML::Flow);
    emitter << value;
    return emitter.c_str();
  }

  const Origin& file() const { return file_; }

 private:
  Origin file_;
};

// How a grid value reads in a variant name: numbers in their shortest form (1.0e-3 -> 0.001), other
// scalars as written, lists as flow YAML.
std::string value_label(const YAML::Node& value) {
  if (value.IsScalar()) {
    const std::string& scalar = value.Scalar();
    double number = 0.0;
    const auto [end, error] = std::from_chars(scalar.data(), scalar.data() + scalar.size(), number);
    if (error == std::errc() && end == scalar.data() + scalar.size() && std::isfinite(number))
      return train::detail::format_number(number);
    return scalar;
  }
  std::string text;
  for (const YAML::Node& element : value) {  // appended piece by piece: GCC 12's -Wrestrict misfires on "," + string
    if (!text.empty()) text += ',';
    text += value_label(element);
  }
  return text;
}

struct GridAxis {
  std::string path, short_name;
  std::vector<std::pair<YAML::Node, std::string>> values;  // node, label
};

// The base config: relative to the sweep file's folder, else the current folder.
std::string find_base(const SweepReader& reader, const YAML::Node& node, const std::string& written,
                      const std::string& sweep_path) {
  std::vector<fs::path> candidates;
  const fs::path as_written(written);
  if (as_written.is_relative())
    candidates.push_back((fs::path(sweep_path).parent_path() / as_written).lexically_normal());
  candidates.push_back(as_written);
  std::error_code error;
  for (const fs::path& candidate : candidates)
    if (fs::is_regular_file(candidate, error)) return candidate.string();
  std::string tried;
  for (const fs::path& candidate : candidates) tried += (tried.empty() ? "" : ", ") + candidate.string();
  reader.fail(node, "base", "cannot find the base config (tried " + tried + ")");
}

std::string default_name(const std::string& path) {
  const fs::path file(path);
  if (file.stem() == "sweep") {
    std::error_code error;
    const fs::path folder = fs::absolute(file, error).parent_path();
    if (!folder.filename().empty()) return folder_safe(folder.filename().string());
  }
  return folder_safe(file.stem().string());
}

}  // namespace

std::string folder_safe(const std::string& text) {
  std::string name = text;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' && c != '=' && c != '+')
      c = '_';
  return name.empty() || name == "." || name == ".." ? "_" + name : name;
}

Sweep load_sweep(const std::string& path, const std::vector<std::string>& cli_overrides, const std::string& out_dir) {
  SweepReader reader(path);
  const YAML::Node root = train::detail::parse_yaml_document(train::detail::read_yaml_file(path, "sweep file"), path);
  if (!root.IsMap())
    throw ConfigError(reader.at(root) + ": expected a mapping (base, set, variants, grid, seeds, name, out_dir), got " +
                      train::detail::describe(root));
  Sweep sweep;
  sweep.path = path;
  YAML::Node base_node, base_key, seeds_node, seeds_key;  // null nodes until read (so: the has_ flags)
  bool has_base = false, has_seeds = false;
  std::vector<Override> common;
  std::vector<std::pair<std::string, std::vector<Override>>> variants;
  std::vector<GridAxis> grid;
  for (const auto& [key, value] : reader.entries(root, "")) {
    const std::string name = key.Scalar();
    if (std::find(kTopLevelKeys.begin(), kTopLevelKeys.end(), name) == kTopLevelKeys.end()) {
      const std::string suggestion = train::detail::closest_match(name, kTopLevelKeys);
      if (!suggestion.empty())
        throw ConfigError(reader.at(key) + ": unknown key '" + printable(name) + "' (did you mean '" + suggestion +
                          "'?)");
      // A config key at the top level: the user meant an override for every run.
      const std::vector<std::string> paths = train::config_key_paths();
      const bool config_key = train::detail::is_section(name) ||
                              std::find(paths.begin(), paths.end(), name) != paths.end() ||
                              name.find('.') != std::string::npos;
      throw ConfigError(reader.at(key) + ": unknown key '" + printable(name) + "'" +
                        (config_key
                             ? " (config keys go under set:, e.g. set: {" + printable(name) + ": ...})"
                             : "; the keys of a sweep file are: base, set, variants, grid, seeds, name, out_dir"));
    }
    if (name == "base") {
      base_node = value;
      base_key = key;
      has_base = true;
    } else if (name == "set") {
      reader.read_overrides(value, key, "set", "", common);
    } else if (name == "variants") {
      if (!value.IsMap() || value.size() == 0)
        reader.fail(value.IsNull() ? key : value, "variants",
                    "expected a mapping of variant names to overrides (e.g. {adam: {optimizer.name: adam}}), got " +
                        (value.IsMap() ? std::string("an empty mapping") : train::detail::describe(value)));
      for (const auto& [variant_key, overrides] : reader.entries(value, "variants")) {
        const std::string variant = variant_key.Scalar();
        if (folder_safe(variant) != variant)
          reader.fail(variant_key, "variants." + variant,
                      "a variant name is a folder name: letters, digits and . _ - = + only");
        std::vector<Override> list;
        reader.read_overrides(overrides, variant_key, "variants." + variant, "", list);
        variants.emplace_back(variant, std::move(list));
      }
    } else if (name == "grid") {
      if (!value.IsMap() || value.size() == 0)
        reader.fail(value.IsNull() ? key : value, "grid",
                    "expected a mapping of config keys to lists of values (e.g. {optimizer.lr: [0.1, 0.01]}), got " +
                        (value.IsMap() ? std::string("an empty mapping") : train::detail::describe(value)));
      for (const auto& [grid_key, values] : reader.entries(value, "grid")) {
        const std::string key_path = grid_key.Scalar();
        const std::string sweep_key = "grid." + key_path;
        reader.check_config_key(key_path, grid_key, sweep_key);
        if (train::detail::is_section(key_path))
          reader.fail(grid_key, sweep_key, "'" + key_path + "' is a section; a grid sweeps single keys");
        if (!values.IsSequence() || values.size() == 0)
          reader.fail(values.IsNull() ? grid_key : values, sweep_key,
                      "expected a non-empty list of values (e.g. [0.1, 0.01]), got " +
                          (values.IsSequence() ? std::string("an empty list") : train::detail::describe(values)));
        GridAxis axis{key_path, key_path.substr(key_path.rfind('.') + 1), {}};
        for (const YAML::Node& element : values) {
          if (element.IsNull() || element.IsMap())
            reader.fail(element.IsNull() ? values : element, sweep_key,
                        "expected a value of " + key_path + ", got " + train::detail::describe(element));
          const std::string label = folder_safe(value_label(element));
          for (const auto& [earlier, earlier_label] : axis.values)
            if (earlier_label == label)
              reader.fail(element, sweep_key,
                          "the value " + printable(label) + " is listed twice (first at " + reader.at(earlier) + ")");
          axis.values.emplace_back(element, label);
        }
        grid.push_back(std::move(axis));
      }
    } else if (name == "seeds") {
      seeds_node = value;
      seeds_key = key;
      has_seeds = true;
    } else if (name == "name") {
      sweep.name = reader.text(value, key, "name");
      if (folder_safe(sweep.name) != sweep.name)
        reader.fail(value, "name", "the experiment name is a folder name: letters, digits and . _ - = + only");
    } else if (name == "out_dir") {
      sweep.out_dir = reader.text(value, key, "out_dir");
    }
  }
  if (!has_base)
    throw ConfigError(path +
                      ": key 'base' is missing: the config every run starts from (e.g. base: ../../quickstart.yaml)");
  sweep.base = find_base(reader, base_node, reader.text(base_node, base_key, "base"), path);
  if (sweep.name.empty()) sweep.name = default_name(path);
  if (!out_dir.empty()) sweep.out_dir = out_dir;
  if (sweep.out_dir.empty()) sweep.out_dir = "runs/" + sweep.name;

  for (const std::string& argument : cli_overrides) {
    const std::string key = argument.substr(0, argument.find('='));
    if (auto reserved = kReservedKeys.find(key); reserved != kReservedKeys.end())
      throw ConfigError("--set " + argument + ": '" + key + "' cannot be overridden here: " + reserved->second);
  }
  // A key a variant sets and the grid sweeps would leave one of the two without effect.
  for (const GridAxis& axis : grid)
    for (const auto& [variant, overrides] : variants)
      for (const Override& entry : overrides)
        if (entry.path == axis.path)
          throw ConfigError(entry.origin + ": key 'variants." + variant + "': '" + axis.path +
                            "' is also swept by grid: (one of the two would have no effect); set it in one place");

  auto load = [&](const std::vector<const std::vector<Override>*>& lists) {
    std::vector<train::detail::LocatedOverride> overrides;
    for (const std::vector<Override>* list : lists)
      for (const Override& entry : *list) overrides.push_back({entry.path + "=" + entry.value, entry.origin});
    for (const std::string& argument : cli_overrides) overrides.push_back({argument, ""});
    return train::detail::load_config_located(sweep.base, overrides);
  };

  std::vector<uint64_t> seeds;
  if (!has_seeds) {
    seeds.push_back(load({&common}).train.seed);  // one run with the base config's own seed
  } else {
    if (!seeds_node.IsSequence() || seeds_node.size() == 0)
      reader.fail(seeds_node.IsNull() ? seeds_key : seeds_node, "seeds",
                  "expected a non-empty list of seeds (e.g. [0, 1, 2]), got " +
                      (seeds_node.IsSequence() ? std::string("an empty list") : train::detail::describe(seeds_node)));
    for (size_t i = 0; i < seeds_node.size(); ++i) {
      const YAML::Node element = seeds_node[i];
      const std::string scalar = element.IsScalar() ? element.Scalar() : std::string();
      uint64_t seed = 0;
      const auto [end, error] = std::from_chars(scalar.data(), scalar.data() + scalar.size(), seed);
      if (scalar.empty() || error != std::errc() || end != scalar.data() + scalar.size())
        reader.fail(element.IsNull() ? seeds_node : element, "seeds[" + std::to_string(i) + "]",
                    "expected an integer in [0, 2^64), got " + train::detail::describe(element));
      if (std::find(seeds.begin(), seeds.end(), seed) != seeds.end())
        reader.fail(element, "seeds[" + std::to_string(i) + "]", "seed " + scalar + " is listed twice");
      seeds.push_back(seed);
    }
  }

  if (variants.empty()) variants.emplace_back(grid.empty() ? "base" : "", std::vector<Override>{});
  size_t points = 1;
  for (const GridAxis& axis : grid) points *= axis.values.size();
  if (points > kMaxRuns || variants.size() * points * seeds.size() > kMaxRuns)
    throw ConfigError(path + ": the sweep has more than " + std::to_string(kMaxRuns) +
                      " runs (variants x grid points x seeds); split it");

  std::map<std::string, std::string> variant_names;  // folder -> what it came from, to catch collisions
  for (const auto& [variant, overrides] : variants) {
    for (size_t point = 0; point < points; ++point) {
      std::vector<size_t> index(grid.size());  // the point's value of each axis; the last varies fastest
      for (size_t a = grid.size(), rest = point; a-- > 0; rest /= grid[a].values.size())
        index[a] = rest % grid[a].values.size();
      std::vector<Override> grid_overrides;
      std::string name = variant;
      for (size_t a = 0; a < grid.size(); ++a) {
        const auto& [node, label] = grid[a].values[index[a]];
        grid_overrides.push_back({grid[a].path, SweepReader::flow(node), reader.at(node)});
        name += (name.empty() ? "" : "_") + folder_safe(grid[a].short_name) + "=" + label;
      }
      if (auto [it, inserted] = variant_names.emplace(name, variant); !inserted)
        throw ConfigError(path + ": two runs would share the folder '" + name +
                          "' (a variant name equals a grid point's); rename the variant");
      sweep.variants.push_back(name);
      for (uint64_t seed : seeds) {
        Run run;
        run.variant = name;
        run.seed = seed;
        run.run_dir = (fs::path(sweep.out_dir) / name / ("seed" + std::to_string(seed))).string();
        run.config = load({&common, &overrides, &grid_overrides});
        run.config.train.seed = seed;
        run.config.run.name = sweep.name + "/" + name + "/seed" + std::to_string(seed);
        run.config.run.out_dir = run.run_dir;
        train::validate_config(run.config);
        sweep.runs.push_back(std::move(run));
      }
    }
  }
  return sweep;
}

}  // namespace opsnn::experiment
