// Benchmarks of topology construction and routing for large dragonfly systems.
#include <benchmark/benchmark.h>
#include <yaml-cpp/yaml.h>

#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace {

void BM_BuildDragonfly(benchmark::State& state) {
  const std::string yaml = "{topology: {kind: dragonfly, racks: " + std::to_string(state.range(0)) + "}}";
  tsp::topology::YamlReader reader("bench.yaml");
  for (auto _ : state) {
    auto cluster = tsp::topology::loadCluster(reader, YAML::Load(yaml));
    if (!cluster) state.SkipWithError(cluster.error().format().c_str());
    benchmark::DoNotOptimize(cluster);
  }
}
BENCHMARK(BM_BuildDragonfly)->Arg(1)->Arg(16)->Arg(145)->Unit(benchmark::kMillisecond);

void BM_RouteDragonfly(benchmark::State& state) {
  tsp::topology::YamlReader reader("bench.yaml");
  auto cluster = tsp::topology::loadCluster(reader, YAML::Load("{topology: {kind: dragonfly, racks: 145}}"));
  int dst = 0;
  for (auto _ : state) {
    auto route = cluster->route(0, dst);
    benchmark::DoNotOptimize(route);
    dst = (dst + 7919) % cluster->chipCount();
  }
}
BENCHMARK(BM_RouteDragonfly)->Unit(benchmark::kMicrosecond);

}  // namespace
