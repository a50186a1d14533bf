// Pipeline plans: the parallelism section, chain partition by dynamic programming, placement.
#include "partition/plan.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "topology/yaml_reader.h"

namespace tsp::partition {

Expected<ParallelismConfig> loadParallelism(const topology::YamlReader& reader, const YAML::Node& node) {
  ParallelismConfig config;
  if (!node || node.IsNull()) return config;
  if (auto s = reader.checkKeys(node, {"plan", "objective"}, "parallelism"); !s) return s.error();
  auto objective = reader.text(node, "objective", "throughput", {"throughput", "latency", "chips"});
  if (!objective) return objective.error();
  config.objective = *objective;
  const YAML::Node plan = reader.child(node, "plan");
  if (plan && plan.IsMap()) {
    if (auto s = reader.checkKeys(plan, {"dp", "tp", "pp", "microbatches", "interleave"}, "parallelism.plan"); !s)
      return s.error();
    for (const char* key : {"dp", "tp", "microbatches", "interleave"}) {
      auto value = reader.integer(plan, key, 1, 1, 1);
      if (!value)
        return reader.error(reader.child(plan, key), fmt::format("parallelism.plan.{}: only 1 is supported by the pipeline planner "
                                                   "of this version",
                                                   key));
    }
    auto pp = reader.integer(plan, "pp", 0, 1, 1 << 20);
    if (!pp) return pp.error();
    config.plan = "fixed";
    config.pp = static_cast<int>(*pp);
  } else {
    auto text = reader.text(node, "plan", "auto", {"auto"});
    if (!text) return text.error();
  }
  return config;
}

std::string Plan::canonical() const {
  return fmt::format("dp{}-tp{}-pp{}-m{}-v{}", dp, tp, pp, microbatches, interleave);
}

std::string Plan::toYaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "dp" << YAML::Value << dp << YAML::Key << "tp" << YAML::Value << tp
      << YAML::Key << "pp" << YAML::Value << pp << YAML::Key << "microbatches" << YAML::Value << microbatches
      << YAML::Key << "interleave" << YAML::Value << interleave << YAML::Key << "stages" << YAML::Value
      << YAML::BeginSeq;
  for (size_t s = 0; s < stageChip.size(); ++s)
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "first_layer" << YAML::Value << stageFirstLayer[s]
        << YAML::Key << "chip" << YAML::Value << stageChip[s] << YAML::Key << "estimated_cycles" << YAML::Value
        << stageCycles[s] << YAML::EndMap;
  out << YAML::EndSeq << YAML::EndMap;
  return out.c_str();
}

std::vector<int> partitionChain(const std::vector<Cycle>& cost, int stages) {
  const int n = static_cast<int>(cost.size());
  stages = std::clamp(stages, 1, std::max(1, n));
  std::vector<Cycle> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  constexpr Cycle kInf = std::numeric_limits<Cycle>::max();
  // best[p][i]: the smallest largest-stage cost of splitting layers [0, i) into p stages.
  std::vector<std::vector<Cycle>> best(stages + 1, std::vector<Cycle>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int p = 1; p <= stages; ++p)
    for (int i = p; i <= n; ++i)
      for (int j = p - 1; j < i; ++j) {
        if (best[p - 1][j] == kInf) continue;
        const Cycle value = std::max(best[p - 1][j], prefix[i] - prefix[j]);
        if (value < best[p][i]) {  // strict: ties keep the earliest cut, deterministically
          best[p][i] = value;
          cut[p][i] = j;
        }
      }
  std::vector<int> first(stages);
  for (int p = stages, i = n; p >= 1; --p) {
    first[p - 1] = cut[p][i];
    i = cut[p][i];
  }
  return first;
}

Expected<std::vector<int>> placePipeline(const topology::Cluster& cluster, int stages) {
  if (stages > cluster.chipCount())
    return makeError(ExitCode::kDoesNotFit,
                     fmt::format("a pipeline of {} stages needs {} chips; the cluster has {}", stages, stages,
                                 cluster.chipCount()));
  // Depth-first search for a simple path of `stages` chips, neighbours in ascending chip id.
  std::vector<int> path{0};
  std::vector<char> used(cluster.chipCount(), 0);
  used[0] = 1;
  std::vector<size_t> nextChoice{0};
  std::int64_t budget = 1'000'000;  // steps, so that a hopeless search ends deterministically
  while (static_cast<int>(path.size()) < stages && !path.empty() && budget-- > 0) {
    const int u = path.back();
    std::vector<int> neighbours;
    for (const auto& [port, linkId] : cluster.linksOf(u)) neighbours.push_back(cluster.links()[linkId].other(u));
    std::sort(neighbours.begin(), neighbours.end());
    neighbours.erase(std::unique(neighbours.begin(), neighbours.end()), neighbours.end());
    size_t& choice = nextChoice.back();
    while (choice < neighbours.size() && used[neighbours[choice]]) ++choice;
    if (choice == neighbours.size()) {
      used[u] = 0;
      path.pop_back();
      nextChoice.pop_back();
      continue;
    }
    const int v = neighbours[choice++];
    used[v] = 1;
    path.push_back(v);
    nextChoice.push_back(0);
  }
  if (static_cast<int>(path.size()) != stages)
    return makeError(ExitCode::kDoesNotFit,
                     fmt::format("no path of {} directly linked chips exists for the pipeline", stages));
  return path;
}

Expected<Plan> planPipeline(const ir::Graph& graph, const topology::Cluster& cluster, const ParallelismConfig& config) {
  auto layerCycles = schedule::estimateLayerCycles(graph, cluster.chip());
  if (!layerCycles) return layerCycles.error();
  const int layers = static_cast<int>(layerCycles->size());
  int stages = config.pp > 0 ? config.pp : std::min(layers, cluster.chipCount());
  if (stages > layers)
    return makeError(ExitCode::kConfig,
                     fmt::format("parallelism.plan.pp is {} but the model has only {} layers", stages, layers));
  Plan plan;
  plan.pp = stages;
  plan.stageFirstLayer = partitionChain(*layerCycles, stages);
  auto chips = placePipeline(cluster, stages);
  if (!chips) return chips.error();
  plan.stageChip = *chips;
  for (int s = 0; s < stages; ++s) {
    const int end = s + 1 < stages ? plan.stageFirstLayer[s + 1] : layers;
    plan.stageCycles.push_back(std::accumulate(layerCycles->begin() + plan.stageFirstLayer[s],
                                               layerCycles->begin() + end, Cycle{0}));
  }
  return plan;
}

std::vector<schedule::PipelineStage> stagesOf(const ir::Graph& graph, const Plan& plan) {
  std::vector<schedule::PipelineStage> stages(plan.pp);
  for (int s = 0; s < plan.pp; ++s) stages[s].chip = plan.stageChip[s];
  for (size_t op = 0; op < graph.ops().size(); ++op) {
    const int layer = graph.op(op).layer;
    int s = plan.pp - 1;
    while (s > 0 && plan.stageFirstLayer[s] > layer) --s;
    stages[s].ops.push_back(static_cast<ir::OpId>(op));
  }
  return stages;
}

}  // namespace tsp::partition
