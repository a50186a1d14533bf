// Benchmarks of sharding propagation and collective scheduling.
#include <benchmark/benchmark.h>
#include <yaml-cpp/yaml.h>

#include "compile/frontend/builtin_models.h"
#include "compile/schedule/collectives.h"
#include "partition/sharding.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace {

tsp::topology::Cluster clusterOf(const std::string& yaml) {
  tsp::topology::YamlReader reader("bench.yaml");
  return std::move(*tsp::topology::loadCluster(reader, YAML::Load(yaml)));
}

// Propagation over GPT-style decoder layers with the batch split (data parallel): iteration spaces,
// dependence classes and specs for every op.
void BM_PropagateShardingsGpt(benchmark::State& state) {
  tsp::frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"layers", std::to_string(state.range(0))}, {"hidden", "1024"}, {"heads", "16"},
                 {"seq", "128"}, {"batch", "8"}, {"vocab", "32000"}};
  auto graph = tsp::frontend::buildBuiltinModel(spec);
  if (!graph) {
    state.SkipWithError(graph.error().format().c_str());
    return;
  }
  const tsp::partition::Mesh mesh{{"dp"}, {8}};
  std::map<tsp::ir::TensorId, tsp::partition::TensorSharding> annotations;
  const auto in = graph->inputs()[0];
  auto s = tsp::partition::TensorSharding::replicated(graph->tensor(in).shape.size());
  s.dimAxis[0] = 0;
  annotations[in] = s;
  for (auto _ : state) {
    auto plan = tsp::partition::propagateShardings(*graph, mesh, annotations);
    if (!plan) state.SkipWithError(plan.error().format().c_str());
    benchmark::DoNotOptimize(plan);
  }
  state.counters["ops"] = static_cast<double>(graph->ops().size());
}
BENCHMARK(BM_PropagateShardingsGpt)->Arg(12)->Arg(96)->Unit(benchmark::kMillisecond);

// Scheduling a ring all-reduce of 64 MiB per chip: plan, routes, link calendar, chains on every chip.
void BM_ScheduleRingAllReduce(benchmark::State& state) {
  const auto cluster = clusterOf("{topology: {kind: ring, chips: " + std::to_string(state.range(0)) + "}}");
  std::vector<int> group(cluster.chipCount());
  for (int i = 0; i < cluster.chipCount(); ++i) group[i] = i;
  for (auto _ : state) {
    auto plan = tsp::schedule::planCollective(tsp::schedule::CollectiveOp::kAllReduce,
                                              tsp::schedule::CollectiveAlgorithm::kRing, group, 64 << 20, cluster);
    auto s = tsp::schedule::scheduleCollective(*plan, cluster);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_ScheduleRingAllReduce)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond);

// Ring all-reduces of 1 MiB per chip over 64 chips booked one after the other in one link calendar,
// as a training step books its TP collectives: each message's first fit searches the windows the
// earlier ones left on its links.
void BM_ScheduleRingAllReducesOneCalendar(benchmark::State& state) {
  const auto cluster = clusterOf("{topology: {kind: ring, chips: 64}}");
  std::vector<int> group(cluster.chipCount());
  for (int i = 0; i < cluster.chipCount(); ++i) group[i] = i;
  auto plan = tsp::schedule::planCollective(tsp::schedule::CollectiveOp::kAllReduce,
                                            tsp::schedule::CollectiveAlgorithm::kRing, group, 1 << 20, cluster);
  for (auto _ : state) {
    tsp::schedule::LinkCalendar calendar(cluster.links().size());
    std::vector<tsp::Cycle> start(cluster.chipCount(), 0);
    for (std::int64_t i = 0; i < state.range(0); ++i) {
      auto s = tsp::schedule::scheduleCollective(*plan, cluster, start, calendar);
      if (!s) state.SkipWithError(s.error().format().c_str());
      std::fill(start.begin(), start.end(), s->cycles);
    }
    benchmark::DoNotOptimize(start);
  }
  state.counters["collectives"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_ScheduleRingAllReducesOneCalendar)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond);

// The hierarchical all-reduce over a full 72-chip rack (node rings, then rack rings).
void BM_ScheduleHierarchicalRack(benchmark::State& state) {
  const auto cluster = clusterOf("{topology: {kind: dragonfly, racks: 1}}");
  std::vector<int> group(cluster.chipCount());
  for (int i = 0; i < cluster.chipCount(); ++i) group[i] = i;
  for (auto _ : state) {
    auto plan = tsp::schedule::planCollective(tsp::schedule::CollectiveOp::kAllReduce,
                                              tsp::schedule::CollectiveAlgorithm::kHierarchical, group, 8 << 20, cluster);
    auto s = tsp::schedule::scheduleCollective(*plan, cluster);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_ScheduleHierarchicalRack)->Unit(benchmark::kMillisecond);

}  // namespace
