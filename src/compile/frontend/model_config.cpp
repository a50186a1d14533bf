// The `model:` section and the --model argument.
#include "compile/frontend/model_config.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "compile/frontend/builtin_models.h"
#include "topology/yaml_reader.h"

namespace tsp::frontend {

std::string ModelSpec::describe() const {
  if (!onnxPath.empty()) return onnxPath;
  std::string text = "builtin:" + builtin;
  for (const auto& [k, v] : params) text += fmt::format(",{}={}", k, v);
  return text;
}

Diagnostic ModelSpec::paramError(const std::string& key, std::string message) const {
  Diagnostic d = modelError("builtin:" + builtin, std::move(message));
  auto found = paramsAt.find(key);
  const SourceLocation& at = found != paramsAt.end() ? found->second : where;
  d.where.file = at.file;
  d.where.line = at.line;
  d.where.column = at.column;
  return d;
}

Expected<ModelSpec> loadModelSpec(const topology::YamlReader& reader, const YAML::Node& node) {
  ModelSpec spec;
  if (!node || node.IsNull()) return configError({reader.file(), 0, 0, ""}, "missing 'model' section");
  if (auto s = reader.checkKeys(node, {"onnx", "builtin", "params", "overrides", "precision"}, "model"); !s)
    return s.error();
  auto builtin = reader.text(node, "builtin", "", builtinModelNames());
  if (!builtin) return builtin.error();
  auto onnx = reader.text(node, "onnx", "");
  if (!onnx) return onnx.error();
  if (builtin->empty() == onnx->empty())
    return reader.error(node, "'model' needs exactly one of 'builtin' and 'onnx'");
  spec.builtin = *builtin;
  // An ONNX path relative to the config's directory, as plan files are.
  const auto dir = std::filesystem::path(reader.file()).parent_path();
  spec.onnxPath = onnx->empty() || std::filesystem::path(*onnx).is_absolute() || dir.empty() ? *onnx
                                                                                             : (dir / *onnx).string();
  spec.where = reader.at(node);

  const YAML::Node params = reader.child(node, "params");
  if (auto s = reader.expectMap(params, "model.params"); !s) return s.error();
  for (const auto& entry : params) {
    if (!entry.second.IsScalar())
      return reader.error(entry.second, fmt::format("'model.params.{}' must be a scalar", entry.first.Scalar()));
    spec.params[entry.first.Scalar()] = entry.second.Scalar();
    spec.paramsAt[entry.first.Scalar()] = reader.at(entry.first);
  }
  const YAML::Node overrides = reader.child(node, "overrides");
  if (auto s = reader.expectMap(overrides, "model.overrides"); !s) return s.error();
  for (const auto& entry : overrides) {
    auto value = reader.integer(overrides, entry.first.Scalar(), 0, 1, std::int64_t{1} << 40);
    if (!value) return value.error();
    spec.overrides[entry.first.Scalar()] = *value;
  }
  const YAML::Node precision = reader.child(node, "precision");
  if (auto s = reader.checkKeys(precision, {"weights", "activations", "accumulate"}, "model.precision"); !s)
    return s.error();
  const std::vector<std::string> storage = {"int8", "fp16", "bf16"};
  for (auto [key, field] : {std::pair{"weights", &spec.precision.weights},
                            std::pair{"activations", &spec.precision.activations}}) {
    auto text = reader.text(precision, key, ir::dtypeName(*field), storage);
    if (!text) return text.error();
    *field = *ir::parseDType(*text);
  }
  auto accumulate = reader.text(precision, "accumulate", ir::dtypeName(spec.precision.accumulate), {"int32", "fp32"});
  if (!accumulate) return accumulate.error();
  spec.precision.accumulate = *ir::parseDType(*accumulate);
  const bool intWeights = spec.precision.weights == ir::DType::kI8;
  if (intWeights != (spec.precision.accumulate == ir::DType::kI32))
    return reader.error(reader.either(precision, node),
                        "model.precision: int8 weights accumulate in int32, fp16/bf16 in fp32");
  return spec;
}

Expected<ModelSpec> parseModelArgument(const std::string& argument, ModelSpec base) {
  const std::string prefix = "builtin:";
  if (argument.rfind(prefix, 0) != 0) {
    base.builtin.clear();
    base.params.clear();
    base.onnxPath = argument;
    return base;
  }
  base.onnxPath.clear();
  base.params.clear();
  base.paramsAt.clear();
  base.where = {};
  std::string rest = argument.substr(prefix.size());
  size_t comma = rest.find(',');
  base.builtin = rest.substr(0, comma);
  while (comma != std::string::npos) {
    const size_t next = rest.find(',', comma + 1);
    const std::string item = rest.substr(comma + 1, next == std::string::npos ? std::string::npos : next - comma - 1);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return makeError(ExitCode::kConfig, fmt::format("--model: '{}' is not key=value", item));
    base.params[item.substr(0, eq)] = item.substr(eq + 1);
    comma = next;
  }
  const auto& names = builtinModelNames();
  if (std::find(names.begin(), names.end(), base.builtin) == names.end())
    return makeError(ExitCode::kConfig, fmt::format("--model: unknown built-in model '{}' (available: {})", base.builtin,
                                                    fmt::join(names, ", ")));
  return base;
}

}  // namespace tsp::frontend
