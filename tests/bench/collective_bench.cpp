// Collective bus bandwidth (nccl-tests' busbw) on the shipped GroqNode, torus and GroqRack configs,
// and the scheduling time of the 10,440-chip system's all-reduce.
#include <benchmark/benchmark.h>
#include <yaml-cpp/yaml.h>

#include <numeric>
#include <string>

#include "compile/schedule/collectives.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace {

// The cluster of a shipped config, or of a YAML text.
tsp::topology::Cluster shippedCluster(const std::string& config) {
  const std::string path = std::string(TSP_SOURCE_DIR) + "/configs/" + config + ".yaml";
  tsp::topology::YamlReader reader(path);
  return std::move(*tsp::topology::loadCluster(reader, YAML::LoadFile(path)["cluster"]));
}

const char* const kConfigs[] = {"fully-connected-8", "mesh-4x4", "groqrack-72", "torus-4x4"};

// An all-reduce of range(1) bytes per chip over every chip of config range(0), algorithm chosen
// automatically: its time (the compiler's prediction, which the simulator matches on every chip:
// sim.agreement_collectives), busbw = 2 (p-1)/p n / time, and busbw as a share of the payload rate of
// the chip's links (one direction, all of them at once: the injection bandwidth).
void BM_AllReduceBusBandwidth(benchmark::State& state) {
  const std::string config = kConfigs[state.range(0)];
  const auto cluster = config == "torus-4x4" ? [] {
    tsp::topology::YamlReader reader("torus-4x4");
    return std::move(*tsp::topology::loadCluster(reader, YAML::Load("{topology: {kind: torus, dims: [4, 4]}}")));
  }() : shippedCluster(config);
  const std::int64_t bytes = state.range(1);
  std::vector<int> group(cluster.chipCount());
  std::iota(group.begin(), group.end(), 0);
  tsp::Cycle cycles = 0;
  std::string algorithm;
  for (auto _ : state) {
    auto plan = tsp::schedule::planCollective(tsp::schedule::CollectiveOp::kAllReduce,
                                              tsp::schedule::CollectiveAlgorithm::kAuto, group, bytes, cluster);
    if (!plan) {
      state.SkipWithError(plan.error().format().c_str());
      return;
    }
    auto s = tsp::schedule::scheduleCollective(*plan, cluster);
    if (!s) {
      state.SkipWithError(s.error().format().c_str());
      return;
    }
    cycles = s->cycles;
    algorithm = tsp::schedule::collectiveAlgorithmName(plan->algorithm);
  }
  const double hz = cluster.chip().clockMhz * 1e6, seconds = static_cast<double>(cycles) / hz;
  const double busbw = tsp::schedule::busBandwidthFactor(tsp::schedule::CollectiveOp::kAllReduce, cluster.chipCount()) *
                       static_cast<double>(bytes) / seconds;
  double injection = 0;  // chip 0's links, payload bytes per second in one direction
  for (const auto& [port, link] : cluster.linksOf(0)) injection += cluster.links()[link].bytesPerCycle * hz;
  state.SetLabel(config + " " + algorithm);
  state.counters["us"] = seconds * 1e6;
  state.counters["busbw_GBps"] = busbw / 1e9;
  state.counters["of_injection"] = busbw / injection;
}
BENCHMARK(BM_AllReduceBusBandwidth)
    ->ArgsProduct({{0, 1, 2, 3}, {1 << 10, 64 << 20}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// Scheduling alone (no simulation) of the all-reduce of range(0) bytes per chip over all 10,440
// chips of configs/dragonfly-10440.yaml, as builtin:collective schedules it (programs of shared
// bodies, no transfer list): the compiler's share of a full-system run.
void BM_ScheduleAllReduce10440(benchmark::State& state) {
  const auto cluster = shippedCluster("dragonfly-10440");
  std::vector<int> group(cluster.chipCount());
  std::iota(group.begin(), group.end(), 0);
  std::int64_t bursts = 0, instructions = 0;
  for (auto _ : state) {
    auto plan = tsp::schedule::planCollective(tsp::schedule::CollectiveOp::kAllReduce,
                                              tsp::schedule::CollectiveAlgorithm::kAuto, group, state.range(0), cluster);
    if (!plan) {
      state.SkipWithError(plan.error().format().c_str());
      return;
    }
    tsp::schedule::LinkCalendar calendar(cluster.links().size());
    auto s = tsp::schedule::scheduleCollective(*plan, cluster, std::vector<tsp::Cycle>(cluster.chipCount(), 0), calendar,
                                               true, false, true);
    if (!s) {
      state.SkipWithError(s.error().format().c_str());
      return;
    }
    bursts = s->transferCount;
    instructions = 0;
    for (const auto& program : s->cluster.programs) instructions += program.instructionCount();
  }
  state.counters["bursts"] = static_cast<double>(bursts);
  state.counters["instructions"] = static_cast<double>(instructions);
}
BENCHMARK(BM_ScheduleAllReduce10440)->Arg(1 << 20)->Arg(64 << 20)->Iterations(1)->Unit(benchmark::kSecond)->MeasureProcessCPUTime();

}  // namespace
