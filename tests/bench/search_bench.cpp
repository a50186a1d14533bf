// Benchmarks of the hybrid parallelism search: GPT-3 175B on the 10,440-TSP dragonfly, on one core.
#include <algorithm>

#include <benchmark/benchmark.h>
#include <yaml-cpp/yaml.h>

#include "compile/frontend/builtin_models.h"
#include "partition/search.h"
#include "partition/training_cost.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace {

tsp::topology::Cluster dragonfly10440() {
  tsp::topology::YamlReader reader(TSP_SOURCE_DIR "/configs/dragonfly-10440.yaml");
  const YAML::Node root = YAML::LoadFile(reader.file());
  auto cluster = tsp::topology::loadCluster(reader, root["cluster"]);
  return std::move(*cluster);
}

// GPT-3 175B (Megatron Table 1 shape: 96 layers, hidden 12288, 96 heads), prefill of 8 x 2048 tokens, FP16.
tsp::ir::Graph gpt3(int batch) {
  tsp::frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"layers", "96"}, {"hidden", "12288"}, {"heads", "96"}, {"seq", "2048"},
                 {"batch", std::to_string(batch)}, {"vocab", "50257"}, {"dtype", "fp16"}};
  return std::move(*tsp::frontend::buildBuiltinModel(spec));
}

// The full search: per-layer profile (compiler estimates or the FLOP fallback), enumeration,
// memory pruning, hierarchical screening within the default budget, finalists with every group's
// contention, the best plan's stages, placement and report.
void BM_SearchGpt3OnDragonfly10440(benchmark::State& state) {
  const auto cluster = dragonfly10440();
  const int batch = static_cast<int>(state.range(1));
  const auto graph = gpt3(batch);
  tsp::partition::SearchOptions options;
  options.budget = state.range(0);
  std::int64_t evaluated = 0, space = 0;
  std::string best;
  for (auto _ : state) {
    auto profile = tsp::partition::profileModel(graph, cluster.chip(), batch);
    if (!profile) {
      state.SkipWithError(profile.error().format().c_str());
      break;
    }
    auto result = tsp::partition::searchPlans(cluster, *profile, options);
    if (!result) {
      state.SkipWithError(result.error().format().c_str());
      break;
    }
    evaluated = result->evaluated;
    space = result->spaceSize;
    best = result->best.canonical();
    benchmark::DoNotOptimize(result);
  }
  state.counters["candidates_evaluated"] = static_cast<double>(evaluated);
  state.counters["space"] = static_cast<double>(space);
  state.SetLabel(best);
}
// Args: budget (candidates), batch (more divisors: more dp and m choices).
BENCHMARK(BM_SearchGpt3OnDragonfly10440)
    ->Args({20000, 8})
    ->Args({500, 8})
    ->Args({20000, 1536})
    ->Args({1000000, 1536})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// A training step (Adam, recompute: full, 1F1B) of Megatron-LM Table 1's models on the dragonfly:
// profile, training figures, and the search of the best plan (docs/validation.md's table).
void BM_TrainingSearchMegatronTable1(benchmark::State& state) {
  const auto cluster = dragonfly10440();
  struct Row { int layers, hidden, heads, batch; };
  const Row rows[] = {{24, 2304, 24, 512}, {40, 6144, 48, 1024}};
  const Row& r = rows[state.range(0)];
  tsp::frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"layers", std::to_string(r.layers)}, {"hidden", std::to_string(r.hidden)},
                 {"heads", std::to_string(r.heads)},   {"seq", "2048"},
                 {"batch", std::to_string(r.batch)},   {"vocab", "51200"}, {"dtype", "fp16"}};
  const auto graph = std::move(*tsp::frontend::buildBuiltinModel(spec));
  tsp::partition::TrainingConfig training;
  training.enabled = true;
  training.recompute = tsp::ir::Recompute::kFull;
  std::string best;
  std::int64_t evaluated = 0;
  for (auto _ : state) {
    auto profile = tsp::partition::profileModel(graph, cluster.chip(), r.batch);
    if (!profile) {
      state.SkipWithError(profile.error().format().c_str());
      break;
    }
    if (auto s = tsp::partition::applyTraining(*profile, graph, training); !s) {
      state.SkipWithError(s.error().format().c_str());
      break;
    }
    // TP groups up to the width of the smallest plan that fits (256 for the 18.4B).
    tsp::partition::SearchOptions options;
    options.maxTp =
        std::max(options.maxTp, tsp::partition::smallestFittingPlan(*profile, cluster.chip(), 1 << 12).tp);
    auto result = tsp::partition::searchPlans(cluster, *profile, options);
    if (!result) {
      state.SkipWithError(result.error().format().c_str());
      break;
    }
    best = result->best.canonical();
    evaluated = result->evaluated;
    benchmark::DoNotOptimize(result);
  }
  state.counters["candidates_evaluated"] = static_cast<double>(evaluated);
  state.SetLabel(best);
}
// Arg: 0 = 1.7B, 1 = 18.4B.
BENCHMARK(BM_TrainingSearchMegatronTable1)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
