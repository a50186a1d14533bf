// Built-in model generators.
#include "compile/frontend/builtin_models.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace tsp::frontend {

namespace {

// Reads integer parameter key of spec, checking it is known and in range.
class ParamReader {
 public:
  explicit ParamReader(const ModelSpec& spec) : spec_(spec) {}
  Expected<std::int64_t> integer(const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
    known_.push_back(key);
    auto found = spec_.params.find(key);
    if (found == spec_.params.end()) return fallback;
    std::int64_t value = 0;
    const auto& text = found->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
      return modelError("builtin:" + spec_.builtin, fmt::format("parameter '{}' must be an integer, got '{}'", key, text));
    if (value < lo || value > hi)
      return modelError("builtin:" + spec_.builtin,
                        fmt::format("parameter '{}' is {}, out of range [{}, {}]", key, value, lo, hi));
    return value;
  }
  Status checkUnknown() const {
    for (const auto& [key, value] : spec_.params)
      if (std::find(known_.begin(), known_.end(), key) == known_.end())
        return modelError("builtin:" + spec_.builtin, fmt::format("unknown parameter '{}'", key));
    return {};
  }

 private:
  const ModelSpec& spec_;
  std::vector<std::string> known_;
};

// A multi-layer perceptron: layer i is MatMul (+ bias Add) + Relu, the last without activation.
Expected<ir::Graph> buildMlp(const ModelSpec& spec) {
  ParamReader params(spec);
  auto layers = params.integer("layers", 2, 1, 4096);
  if (!layers) return layers.error();
  auto hidden = params.integer("hidden", 1024, 1, 1 << 20);
  if (!hidden) return hidden.error();
  auto input = params.integer("input", *hidden, 1, 1 << 20);
  if (!input) return input.error();
  auto output = params.integer("output", *hidden, 1, 1 << 20);
  if (!output) return output.error();
  auto batch = params.integer("batch", spec.overrides.count("batch") ? spec.overrides.at("batch") : 8, 1, 1 << 20);
  if (!batch) return batch.error();
  if (auto s = params.checkUnknown(); !s) return s.error();

  ir::Graph graph;
  const ir::DType act = spec.precision.activations;
  ir::TensorId x = graph.addInput("x", {*batch, *input}, act);
  std::int64_t width = *input;
  for (int i = 0; i < *layers; ++i) {
    const std::int64_t next = i + 1 == *layers ? *output : *hidden;
    const auto w = graph.addWeight(fmt::format("w{}", i), {width, next}, spec.precision.weights);
    const auto b = graph.addWeight(fmt::format("b{}", i), {next}, spec.precision.weights);
    auto y = graph.addOp(ir::OpKind::kMatMul, fmt::format("fc{}", i), {x, w}, i);
    if (!y) return y.error();
    auto z = graph.addOp(ir::OpKind::kAdd, fmt::format("bias{}", i), {*y, b}, i);
    if (!z) return z.error();
    x = *z;
    if (i + 1 < *layers) {
      auto r = graph.addOp(ir::OpKind::kRelu, fmt::format("relu{}", i), {x}, i);
      if (!r) return r.error();
      x = *r;
    }
    width = next;
  }
  graph.markOutput(x);
  return graph;
}

}  // namespace

Expected<ir::Graph> buildBuiltinModel(const ModelSpec& spec) {
  if (spec.builtin == "mlp") return buildMlp(spec);
  return modelError("builtin:" + spec.builtin, "unknown built-in model (available: mlp)");
}

std::int64_t samplesPerIteration(const ModelSpec&, const ir::Graph& graph) {
  // The leading dimension of the first input is the batch.
  if (graph.inputs().empty() || graph.tensor(graph.inputs()[0]).shape.empty()) return 1;
  return graph.tensor(graph.inputs()[0]).shape[0];
}

}  // namespace tsp::frontend
