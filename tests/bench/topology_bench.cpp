// Benchmarks of topology construction, routing and summary figures for large dragonfly systems.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <yaml-cpp/yaml.h>

#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace {

tsp::topology::Cluster dragonfly(int racks) {
  tsp::topology::YamlReader reader("bench.yaml");
  auto cluster = tsp::topology::loadCluster(
      reader, YAML::Load("{topology: {kind: dragonfly, racks: " + std::to_string(racks) + "}}"));
  return std::move(*cluster);
}

// Building includes generating the links, validating them and the router's hop table.
void BM_BuildDragonfly(benchmark::State& state) {
  const std::string yaml = "{topology: {kind: dragonfly, racks: " + std::to_string(state.range(0)) + "}}";
  tsp::topology::YamlReader reader("bench.yaml");
  for (auto _ : state) {
    auto cluster = tsp::topology::loadCluster(reader, YAML::Load(yaml));
    if (!cluster) state.SkipWithError(cluster.error().format().c_str());
    benchmark::DoNotOptimize(cluster);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  state.counters["max_rss_MiB"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
}
BENCHMARK(BM_BuildDragonfly)->Arg(1)->Arg(16)->Arg(145)->Unit(benchmark::kMillisecond);

// Build, then one route from chip 0 to every chip: the whole routing cost of a 10,440-chip system.
void BM_BuildAndRouteAllFromOneChip(benchmark::State& state) {
  for (auto _ : state) {
    auto cluster = dragonfly(145);
    std::size_t hops = 0;
    for (int dst = 0; dst < cluster.chipCount(); ++dst) hops += cluster.route(0, dst).size();
    benchmark::DoNotOptimize(hops);
  }
}
BENCHMARK(BM_BuildAndRouteAllFromOneChip)->Unit(benchmark::kMillisecond);

void BM_RouteDragonfly(benchmark::State& state) {
  const auto cluster = dragonfly(145);
  int src = 0, dst = 0;
  for (auto _ : state) {
    auto route = cluster.route(src, dst);
    benchmark::DoNotOptimize(route);
    src = (src + 104729) % cluster.chipCount();
    dst = (dst + 7919) % cluster.chipCount();
  }
}
BENCHMARK(BM_RouteDragonfly)->Unit(benchmark::kMicrosecond);

void BM_SummarizeDragonfly(benchmark::State& state) {
  const auto cluster = dragonfly(145);
  for (auto _ : state) benchmark::DoNotOptimize(tsp::topology::summarize(cluster));
}
BENCHMARK(BM_SummarizeDragonfly)->Unit(benchmark::kMillisecond);

}  // namespace
