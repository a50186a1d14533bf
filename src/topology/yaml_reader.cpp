// Typed, located YAML lookups.
#include "topology/yaml_reader.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>

#include "support/files.h"
#include "support/strings.h"

namespace tsp::topology {

namespace {

SourceLocation markAt(const std::string& path, const YAML::Mark& mark) {
  return {path, mark.line >= 0 ? mark.line + 1 : 0, mark.line >= 0 ? mark.column + 1 : 0, ""};
}

// Every mapping's keys are scalars, each present once. Aliased nodes are walked once (a node is known
// by its position and kind), so a billion-laughs document costs its size, not its expansion.
Status checkMappingKeys(const std::string& path, const YAML::Node& root, const std::string& what) {
  std::set<std::pair<int, int>> seen;
  std::vector<YAML::Node> pending{root};
  while (!pending.empty()) {
    const YAML::Node node = pending.back();
    pending.pop_back();
    if (!node.IsMap() && !node.IsSequence()) continue;
    if (!seen.insert({node.Mark().pos, static_cast<int>(node.Type())}).second) continue;
    if (node.IsSequence()) {
      for (const auto& item : node) pending.push_back(item);
      continue;
    }
    std::set<std::string> keys;
    for (const auto& entry : node) {
      if (!entry.first.IsScalar())
        return configError(markAt(path, entry.first.Mark()),
                           fmt::format("a key in the {} file must be a scalar, not a {}", what,
                                       entry.first.IsMap() ? "mapping" : entry.first.IsSequence() ? "list" : "null"));
      if (!keys.insert(entry.first.Scalar()).second)
        return configError(markAt(path, entry.first.Mark()), fmt::format("duplicate key '{}'", entry.first.Scalar()));
      pending.push_back(entry.second);
    }
  }
  return {};
}

// Whether a YAML document has content, and where it starts. yaml-cpp 0.7's LoadAll loops forever,
// allocating, on a stream whose parser yields empty documents without consuming anything (a config
// of ","; found by config_fuzzer: it took the machine's memory); its later releases stop at the
// first empty document (yaml-cpp pull request 1319), and so does countDocuments.
class DocumentProbe : public YAML::EventHandler {
 public:
  bool content = false;
  YAML::Mark start;  ///< where the document's content starts
  void OnDocumentStart(const YAML::Mark&) override { content = false; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { found(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override { found(mark); }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    found(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    found(mark);
  }
  void OnMapEnd() override {}

 private:
  void found(const YAML::Mark& mark) {
    if (!content) start = mark;
    content = true;
  }
};

// The documents with content in text; `second` is where the second starts.
int countDocuments(const std::string& text, YAML::Mark& second) {
  std::stringstream stream(text);
  YAML::Parser parser(stream);
  DocumentProbe probe;
  int documents = 0;
  while (parser.HandleNextDocument(probe) && probe.content)
    if (++documents == 2) second = probe.start;
  return documents;
}

}  // namespace

Expected<YAML::Node> loadYamlFile(const std::string& path, const std::string& what) {
  if (existsButNotRegular(path))
    return configError({path, 0, 0, ""}, fmt::format("the {} file is not a regular file", what));
  std::ifstream in(path);
  if (!in) return configError({path, 0, 0, ""}, fmt::format("cannot open the {} file", what));
  std::stringstream text;
  text << in.rdbuf();
  try {
    YAML::Mark second;
    if (const int documents = countDocuments(text.str(), second); documents > 1)
      return configError(markAt(path, second),
                         fmt::format("the {} file holds {} YAML documents, expected one", what, documents));
    YAML::Node root = YAML::Load(text.str());
    if (auto s = checkMappingKeys(path, root, what); !s) return s.error();
    return root;
  } catch (const YAML::Exception& e) {
    return configError(markAt(path, e.mark), fmt::format("YAML syntax error in the {} file: {}", what, e.msg));
  }
}

YAML::Node YamlReader::child(const YAML::Node& map, const std::string& key) const {
  if (!map || !map.IsMap()) return YAML::Node();
  const YAML::Node& constMap = map;  // const lookup: never inserts
  YAML::Node found = constMap[key];
  return found ? found : YAML::Node();
}

SourceLocation YamlReader::at(const YAML::Node& node) const {
  SourceLocation where;
  where.file = file_;
  if (!node) return where;  // a missing node has no position
  const YAML::Mark mark = node.Mark();
  if (mark.line >= 0) {
    where.line = mark.line + 1;
    where.column = mark.column + 1;
  }
  return where;
}

Diagnostic YamlReader::error(const YAML::Node& node, const std::string& message) const {
  return configError(at(node), message);
}

Status YamlReader::checkKeys(const YAML::Node& map, const std::vector<std::string>& allowed,
                             const std::string& section) const {
  if (!map || map.IsNull()) return {};
  if (!map.IsMap()) return error(map, fmt::format("'{}' must be a mapping", section));
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) return error(entry.first, fmt::format("a key in '{}' must be a scalar", section));
    const auto key = entry.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string message = fmt::format("unknown key '{}' in '{}'", key, section);
    const std::string suggestion = closestMatch(key, allowed);
    if (!suggestion.empty()) message += fmt::format(" (did you mean '{}'?)", suggestion);
    return error(entry.first, message);
  }
  return {};
}

Status YamlReader::expectMap(const YAML::Node& node, const std::string& key) const {
  if (!node || node.IsNull() || node.IsMap()) return {};
  return error(node, fmt::format("'{}' must be a mapping", key));
}

namespace {
template <typename T>
bool convert(const YAML::Node& node, T& out) {
  if (!node.IsScalar()) return false;
  try {
    out = node.as<T>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}
}  // namespace

Expected<std::int64_t> YamlReader::integer(const YAML::Node& map, const std::string& key,
                                           std::int64_t fallback, std::int64_t lo, std::int64_t hi) const {
  const YAML::Node node = child(map, key);
  if (!node || node.IsNull()) return fallback;
  std::int64_t value = 0;
  if (!convert(node, value)) return error(node, fmt::format("'{}' must be an integer", key));
  if (value < lo || value > hi)
    return error(node, fmt::format("'{}' is {}, out of range [{}, {}]", key, value, lo, hi));
  return value;
}

Expected<double> YamlReader::number(const YAML::Node& map, const std::string& key, double fallback,
                                    double lo, double hi) const {
  const YAML::Node node = child(map, key);
  if (!node || node.IsNull()) return fallback;
  double value = 0;
  if (!convert(node, value)) return error(node, fmt::format("'{}' must be a number", key));
  if (!(value >= lo && value <= hi))
    return error(node, fmt::format("'{}' is {}, out of range [{}, {}]", key, value, lo, hi));
  return value;
}

Expected<std::string> YamlReader::text(const YAML::Node& map, const std::string& key,
                                       const std::string& fallback,
                                       const std::vector<std::string>& choices) const {
  const YAML::Node node = child(map, key);
  if (!node || node.IsNull()) return fallback;
  std::string value;
  if (!convert(node, value)) return error(node, fmt::format("'{}' must be a string", key));
  if (!choices.empty() && std::find(choices.begin(), choices.end(), value) == choices.end()) {
    std::string message = fmt::format("'{}' is '{}', expected one of: {}", key, value, join(choices, ", "));
    const std::string suggestion = closestMatch(value, choices);
    if (!suggestion.empty()) message += fmt::format(" (did you mean '{}'?)", suggestion);
    return error(node, message);
  }
  return value;
}

Expected<bool> YamlReader::boolean(const YAML::Node& map, const std::string& key, bool fallback) const {
  const YAML::Node node = child(map, key);
  if (!node || node.IsNull()) return fallback;
  bool value = false;
  if (!convert(node, value)) return error(node, fmt::format("'{}' must be true or false", key));
  return value;
}

Expected<std::vector<std::int64_t>> YamlReader::integerList(const YAML::Node& map, const std::string& key,
                                                            std::int64_t lo, std::int64_t hi) const {
  const YAML::Node node = child(map, key);
  std::vector<std::int64_t> values;
  if (!node || node.IsNull()) return values;
  if (!node.IsSequence()) return error(node, fmt::format("'{}' must be a list of integers", key));
  for (const auto& item : node) {
    std::int64_t value = 0;
    if (!convert(item, value)) return error(item, fmt::format("'{}' must be a list of integers", key));
    if (value < lo || value > hi)
      return error(item, fmt::format("'{}' entry {} is out of range [{}, {}]", key, value, lo, hi));
    values.push_back(value);
  }
  return values;
}

}  // namespace tsp::topology
