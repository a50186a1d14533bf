// Built-in model generators: parameterised graphs built without a model file.
#pragma once

#include "compile/frontend/model_config.h"
#include "compile/ir/graph.h"

namespace tsp::frontend {

/// Builds the graph of a built-in model; unknown or bad parameters are model errors naming the parameter.
Expected<ir::Graph> buildBuiltinModel(const ModelSpec& spec);

/// Samples one iteration processes (the batch), for throughput.
std::int64_t samplesPerIteration(const ModelSpec& spec, const ir::Graph& graph);

}  // namespace tsp::frontend
