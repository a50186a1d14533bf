// The `model:` section of a config and the --model command-line form, resolved into a ModelSpec.
#pragma once

#include <map>
#include <string>

#include "compile/ir/graph.h"
#include "support/expected.h"

namespace YAML { class Node; }
namespace tsp::topology { class YamlReader; }

namespace tsp::frontend {

/// How ONNX FP32 tensors are stored and accumulated on chip.
struct Precision {
  ir::DType weights = ir::DType::kF16;
  ir::DType activations = ir::DType::kF16;
  ir::DType accumulate = ir::DType::kF32;
};

/// Which model to build: a built-in generator with parameters, or an ONNX file.
struct ModelSpec {
  std::string builtin;                        ///< generator name, or empty
  std::string onnxPath;                       ///< ONNX file, or empty
  std::map<std::string, std::string> params;  ///< generator parameters, as given
  std::map<std::string, std::int64_t> overrides;
  Precision precision;
  SourceLocation where;                             ///< the config's `model:` section, when read from one
  std::map<std::string, SourceLocation> paramsAt;   ///< where each parameter is given in the config

  /// A model error about parameter key (empty: about the model), located at the parameter in the config
  /// (or at the model section) when the model came from one.
  Diagnostic paramError(const std::string& key, std::string message) const;

  /// "builtin:mlp,batch=8,..." or the ONNX path: a one-line description.
  std::string describe() const;
};

/// Reads the `model:` section.
Expected<ModelSpec> loadModelSpec(const topology::YamlReader& reader, const YAML::Node& node);

/// Parses "builtin:NAME[,key=value...]" or an ONNX path (as given to --model) over base.
Expected<ModelSpec> parseModelArgument(const std::string& argument, ModelSpec base);

}  // namespace tsp::frontend
