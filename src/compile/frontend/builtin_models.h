// Built-in model generators: parameterised graphs built without a model file.
#pragma once

#include <string>
#include <vector>

#include "compile/frontend/model_config.h"
#include "compile/ir/graph.h"

namespace tsp::frontend {

/// Names of the built-in generators: mlp, gpt, llama, bert, resnet50.
const std::vector<std::string>& builtinModelNames();

/// Builds the graph of a built-in model; unknown or bad parameters are model errors naming the parameter.
Expected<ir::Graph> buildBuiltinModel(const ModelSpec& spec);

/// Samples one iteration processes (the batch), for throughput.
std::int64_t samplesPerIteration(const ModelSpec& spec, const ir::Graph& graph);

}  // namespace tsp::frontend
