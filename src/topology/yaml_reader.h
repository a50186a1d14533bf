// Typed, located YAML lookups: every error names the file, line, column and key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "support/expected.h"

namespace tsp::topology {

/// Parses the YAML file at path; `what` names it in errors ("cannot open the config file",
/// "YAML syntax error in the plan file: ..." at the parser's line and column). Only a regular file of
/// one document whose mapping keys are distinct scalars is accepted.
Expected<YAML::Node> loadYamlFile(const std::string& path, const std::string& what);

/// Reads values out of one YAML document, reporting mistakes as Diagnostics with file:line:col.
class YamlReader {
 public:
  explicit YamlReader(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }

  /// map[key] when map is a mapping holding key; otherwise a null node (absent and null are alike).
  YAML::Node child(const YAML::Node& map, const std::string& key) const;

  /// Whether map holds key with a value (a key given no value is absent: required keys need one).
  bool has(const YAML::Node& map, const std::string& key) const {
    const YAML::Node node = child(map, key);
    return node && !node.IsNull();
  }

  /// `preferred` when it is present, else `fallback`: where to point an error about a missing value.
  static const YAML::Node& either(const YAML::Node& preferred, const YAML::Node& fallback) {
    return (preferred && !preferred.IsNull()) ? preferred : fallback;
  }

  /// Where node sits in the file (1-based line and column).
  SourceLocation at(const YAML::Node& node) const;

  /// An error at node's position.
  Diagnostic error(const YAML::Node& node, const std::string& message) const;

  /// Fails on the first key of map that is not in allowed, suggesting the closest allowed one.
  Status checkKeys(const YAML::Node& map, const std::vector<std::string>& allowed,
                   const std::string& section) const;

  /// Fails unless node is a mapping (or absent).
  Status expectMap(const YAML::Node& node, const std::string& key) const;

  /// map[key] as an integer in [lo, hi]; fallback when absent.
  Expected<std::int64_t> integer(const YAML::Node& map, const std::string& key, std::int64_t fallback,
                                 std::int64_t lo, std::int64_t hi) const;
  /// map[key] as a number in [lo, hi]; fallback when absent.
  Expected<double> number(const YAML::Node& map, const std::string& key, double fallback, double lo,
                          double hi) const;
  /// map[key] as a string; when choices is not empty the value must be one of them.
  Expected<std::string> text(const YAML::Node& map, const std::string& key, const std::string& fallback,
                             const std::vector<std::string>& choices = {}) const;
  /// map[key] as a boolean; fallback when absent.
  Expected<bool> boolean(const YAML::Node& map, const std::string& key, bool fallback) const;
  /// map[key] as a list of integers in [lo, hi].
  Expected<std::vector<std::int64_t>> integerList(const YAML::Node& map, const std::string& key,
                                                  std::int64_t lo, std::int64_t hi) const;

 private:
  std::string file_;
};

}  // namespace tsp::topology
