// A program built on the installed tsp-sim libraries: it reads a cluster config with a built-in model,
// pipelines the model over the cluster, compiles one program per chip and runs them on the cycle-level
// chip model in one process, then prints each chip's predicted and simulated cycles.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "compile/frontend/builtin_models.h"
#include "compile/schedule/cluster_schedule.h"
#include "partition/plan.h"
#include "runtime/run_config.h"
#include "sim/chip.h"

int main(int argc, char** argv) {
  using namespace tsp;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CONFIG.yaml (a config with a built-in model)\n", argv[0]);
    return 1;
  }
  auto config = runtime::loadRunConfig(argv[1]);
  if (!config) {
    std::fprintf(stderr, "%s\n", config.error().format().c_str());
    return 2;
  }
  auto graph = frontend::buildBuiltinModel(config->model);
  if (!graph) {
    std::fprintf(stderr, "%s\n", graph.error().format().c_str());
    return 2;
  }
  const topology::Cluster& cluster = *config->cluster;
  auto plan = partition::planPipeline(*graph, cluster, config->parallelism);
  if (!plan) {
    std::fprintf(stderr, "%s\n", plan.error().format().c_str());
    return 3;
  }
  auto compiled = schedule::scheduleCluster(*graph, partition::stagesOf(*graph, *plan), cluster);
  if (!compiled) {
    std::fprintf(stderr, "%s\n", compiled.error().format().c_str());
    return 3;
  }

  // Every chip runs in windows no longer than the shortest send-to-arrival time; the bursts sent in a
  // window are delivered before the next one.
  const sim::KernelRuntime kernels;
  const auto& spec = cluster.chip();
  std::vector<std::unique_ptr<sim::Chip>> chips;
  for (int c = 0; c < cluster.chipCount(); ++c) {
    std::vector<sim::PortBinding> ports(spec.c2cPorts);
    for (const auto& [port, linkId] : cluster.linksOf(c)) {
      const auto& link = cluster.links()[linkId];
      ports[port] = {linkId, link.other(c), link.portOn(link.other(c)), link.a == c, link.latencyCycles,
                     link.bytesPerCycle};
    }
    chips.push_back(sim::makeTspChip(c, spec, std::make_shared<const isa::Program>(compiled->programs[c]), ports, {}));
  }
  const Cycle lookahead = spec.c2cSendCycles + std::max<Cycle>(1, cluster.minLinkLatency());
  for (Cycle start = 0;;) {
    std::vector<sim::C2CBurst> bursts;
    for (auto& chip : chips) {
      if (auto status = chip->advanceTo(start + lookahead); !status) {
        std::fprintf(stderr, "%s\n", status.error().format().c_str());
        return 4;
      }
      for (auto& burst : chip->takeOutgoing()) bursts.push_back(burst);
    }
    std::sort(bursts.begin(), bursts.end());
    for (const auto& burst : bursts) chips[burst.dstChip]->deliver(burst);
    Cycle next = sim::kNever;
    for (auto& chip : chips) next = std::min(next, chip->nextEventCycle());
    if (next == sim::kNever) break;
    start = std::max(start + lookahead, next);
  }

  int disagreeing = 0;
  for (int c = 0; c < cluster.chipCount(); ++c) {
    const long long predicted = compiled->programs[c].predictedCycles;
    const long long simulated = chips[c]->stats().cycles;
    std::printf("chip %d: predicted %lld cycles, simulated %lld cycles\n", c, predicted, simulated);
    disagreeing += predicted != simulated;
  }
  return disagreeing == 0 ? 0 : 6;
}
