// Benchmarks of the front end: importing a 100k-node ONNX graph with shape inference, and the passes.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <benchmark/benchmark.h>

#include "compile/frontend/builtin_models.h"
#include "compile/frontend/onnx_importer.h"
#include "compile/passes/passes.h"

namespace {

// The 100k-node model, written once by tests/bench/make_chain_model.py into the build tree.
std::string chainModel() {
  const std::string path = std::string(TSP_BINARY_DIR) + "/tests/bench/chain_100k.onnx";
  if (!std::filesystem::exists(path)) {
    const std::string command = std::string(TSP_PYTHON) + " " + TSP_SOURCE_DIR + "/tests/bench/make_chain_model.py 10000 " + path;
    if (std::system(command.c_str()) != 0) return "";
  }
  return path;
}

void BM_ImportOnnx100kNodes(benchmark::State& state) {
  const std::string path = chainModel();
  if (path.empty()) {
    state.SkipWithError("could not write the model (needs python3-onnx)");
    return;
  }
  tsp::frontend::ImportOptions options;
  options.overrides = {{"batch", 8}};
  options.loadWeights = false;
  std::int64_t ops = 0;
  for (auto _ : state) {
    auto graph = tsp::frontend::importOnnx(path, options);
    if (!graph) {
      state.SkipWithError(graph.error().format().c_str());
      return;
    }
    ops = static_cast<std::int64_t>(graph->ops().size());
    benchmark::DoNotOptimize(graph->flops());
  }
  state.counters["onnx_nodes"] = 100000;
  state.counters["ir_ops"] = static_cast<double>(ops);
}
BENCHMARK(BM_ImportOnnx100kNodes)->Unit(benchmark::kMillisecond);

void BM_PassesOnGpt3(benchmark::State& state) {
  tsp::frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"layers", "96"}, {"hidden", "12288"}, {"heads", "96"}, {"vocab", "50257"}, {"seq", "16"}};
  auto graph = tsp::frontend::buildBuiltinModel(spec);
  auto pipeline = tsp::passes::parsePipeline("fold,cse,dce,layout,fuse,liveness");
  for (auto _ : state) {
    auto out = tsp::passes::runPipeline(*graph, *pipeline);
    benchmark::DoNotOptimize(out.ok());
  }
  state.counters["ops"] = static_cast<double>(graph->ops().size());
}
BENCHMARK(BM_PassesOnGpt3)->Unit(benchmark::kMillisecond);

}  // namespace
