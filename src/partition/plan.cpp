// Pipeline plans: the parallelism section, chain partition by dynamic programming, placement.
#include "partition/plan.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "partition/stage_partition.h"
#include "topology/yaml_reader.h"

namespace tsp::partition {

Expected<ParallelismConfig> loadParallelism(const topology::YamlReader& reader, const YAML::Node& node) {
  ParallelismConfig config;
  if (!node || node.IsNull()) return config;
  if (auto s = reader.checkKeys(node, {"plan", "objective", "search_budget", "max_tp"}, "parallelism"); !s)
    return s.error();
  auto objective = reader.text(node, "objective", "throughput", {"throughput", "latency", "chips"});
  if (!objective) return objective.error();
  config.objective = *objective;
  auto budget = reader.integer(node, "search_budget", config.searchBudget, 1, 1'000'000'000);
  if (!budget) return budget.error();
  config.searchBudget = *budget;
  auto maxTp = reader.integer(node, "max_tp", config.maxTp, 1, 4096);
  if (!maxTp) return maxTp.error();
  config.maxTp = static_cast<int>(*maxTp);
  const YAML::Node plan = reader.child(node, "plan");
  if (plan) config.planWhere = reader.at(plan);
  if (plan && plan.IsMap()) {
    if (auto s = reader.checkKeys(plan, {"dp", "tp", "pp", "microbatches", "interleave", "split"}, "parallelism.plan");
        !s)
      return s.error();
    int* fields[] = {&config.dp, &config.tp, &config.microbatches, &config.interleave};
    const char* keys[] = {"dp", "tp", "microbatches", "interleave"};
    for (int i = 0; i < 4; ++i) {
      auto value = reader.integer(plan, keys[i], 1, 1, 1 << 20);
      if (!value) return value.error();
      *fields[i] = static_cast<int>(*value);
    }
    auto pp = reader.integer(plan, "pp", 0, 1, 1 << 20);
    if (!pp) return pp.error();
    config.pp = static_cast<int>(*pp);
    auto split = reader.text(plan, "split", config.tp > 1 ? "megatron" : "none", {"none", "megatron", "2d", "spatial"});
    if (!split) return split.error();
    parseTensorSplit(*split, config.split);
    if ((config.tp > 1) != (config.split != TensorSplit::kNone))
      return reader.error(reader.child(plan, "split"), "parallelism.plan.split: 'none' goes with tp 1 and only with it");
    config.plan = "fixed";
  } else {
    auto text = reader.text(node, "plan", "auto");
    if (!text) return text.error();
    if (*text != "auto") {
      // A plan file, relative to the config's directory.
      const auto dir = std::filesystem::path(reader.file()).parent_path();
      config.planFile = std::filesystem::path(*text).is_absolute() || dir.empty() ? *text : (dir / *text).string();
      config.plan = "file";
    }
  }
  return config;
}

std::string Plan::canonical() const { return candidate().canonical(); }

std::string Plan::toYaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "dp" << YAML::Value << dp << YAML::Key << "tp" << YAML::Value << tp
      << YAML::Key << "pp" << YAML::Value << pp << YAML::Key << "microbatches" << YAML::Value << microbatches
      << YAML::Key << "interleave" << YAML::Value << interleave;
  if (tp > 1) out << YAML::Key << "split" << YAML::Value << tensorSplitName(split);
  out << YAML::Key << "stages" << YAML::Value << YAML::BeginSeq;
  for (size_t s = 0; s < stageChip.size(); ++s)
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "first_layer" << YAML::Value << stageFirstLayer[s]
        << YAML::Key << "chip" << YAML::Value << stageChip[s] << YAML::Key << "estimated_cycles" << YAML::Value
        << stageCycles[s] << YAML::EndMap;
  out << YAML::EndSeq;
  if (!layerChunk.empty()) out << YAML::Key << "layer_chunk" << YAML::Value << YAML::Flow << layerChunk;
  if (!placement.empty()) out << YAML::Key << "placement" << YAML::Value << YAML::Flow << placement;
  out << YAML::EndMap;
  return out.c_str();
}

Expected<Plan> loadPlanFile(const std::string& path) {
  auto loaded = topology::loadYamlFile(path, "plan");
  if (!loaded) return loaded.error();
  const YAML::Node root = *loaded;
  topology::YamlReader reader(path);
  if (!root.IsMap()) return reader.error(root, "the plan file must be a mapping");
  if (auto s = reader.checkKeys(root, {"dp", "tp", "pp", "microbatches", "interleave", "split", "stages", "layer_chunk",
                                       "placement", "predicted"},
                                "plan");
      !s)
    return s.error();
  Plan plan;
  plan.source.file = reader.at(root);
  int* fields[] = {&plan.dp, &plan.tp, &plan.pp, &plan.microbatches, &plan.interleave};
  const char* keys[] = {"dp", "tp", "pp", "microbatches", "interleave"};
  for (int i = 0; i < 5; ++i) {
    auto value = reader.integer(root, keys[i], 1, 1, 1 << 20);
    if (!value) return value.error();
    *fields[i] = static_cast<int>(*value);
  }
  auto split = reader.text(root, "split", plan.tp > 1 ? "megatron" : "none", {"none", "megatron", "2d", "spatial"});
  if (!split) return split.error();
  parseTensorSplit(*split, plan.split);
  const YAML::Node stages = reader.child(root, "stages");
  if (!stages || !stages.IsSequence()) return reader.error(topology::YamlReader::either(stages, root), "the plan needs a 'stages' list");
  if (static_cast<int>(stages.size()) != plan.pp)
    return reader.error(stages, fmt::format("'stages' has {} entries but pp is {}", stages.size(), plan.pp));
  for (size_t s = 0; s < stages.size(); ++s) {
    const YAML::Node stage = stages[s];
    if (auto st = reader.checkKeys(stage, {"first_layer", "chip", "estimated_cycles"}, "plan.stages"); !st)
      return st.error();
    auto first = reader.integer(stage, "first_layer", -1, 0, 1 << 30);
    if (!first) return first.error();
    auto chip = reader.integer(stage, "chip", -1, 0, 1 << 30);
    if (!chip) return chip.error();
    auto cycles = reader.integer(stage, "estimated_cycles", 0, 0, std::numeric_limits<std::int64_t>::max());
    if (!cycles) return cycles.error();
    if (*first < 0 || *chip < 0) return reader.error(stage, "a stage needs 'first_layer' and 'chip'");
    if ((s == 0 && *first != 0) || (s > 0 && *first <= plan.stageFirstLayer.back()))
      return reader.error(reader.child(stage, "first_layer"),
                          fmt::format("stage {}: first_layer {} must be 0 for the first stage and grow from stage to stage",
                                      s, *first));
    plan.stageFirstLayer.push_back(static_cast<int>(*first));
    plan.stageChip.push_back(static_cast<int>(*chip));
    plan.source.stageFirstLayer.push_back(reader.at(reader.child(stage, "first_layer")));
    plan.source.stageChip.push_back(reader.at(reader.child(stage, "chip")));
    plan.stageCycles.push_back(*cycles);
  }
  for (const char* key : {"layer_chunk", "placement"}) {
    if (!reader.child(root, key)) continue;
    auto list = reader.integerList(root, key, 0, 1 << 30);
    if (!list) return list.error();
    const bool chunks = std::string(key) == "layer_chunk";
    auto& target = chunks ? plan.layerChunk : plan.placement;
    auto& where = chunks ? plan.source.layerChunk : plan.source.placement;
    for (auto v : *list) target.push_back(static_cast<int>(v));
    for (const auto& item : reader.child(root, key)) where.push_back(reader.at(item));
  }
  const int chunks = plan.pp * plan.interleave;
  for (size_t l = 0; l < plan.layerChunk.size(); ++l)
    if (plan.layerChunk[l] >= chunks)
      return configError(plan.source.layerChunk[l],
                         fmt::format("layer_chunk entry {} is chunk {}, but pp x interleave is {} chunks", l,
                                     plan.layerChunk[l], chunks));
  if (plan.placement.empty() && std::int64_t{plan.dp} * plan.tp > 1)
    return reader.error(root, fmt::format("the plan has dp x tp = {} ranks per stage and needs a 'placement' list of "
                                          "the chip of each of its dp x tp x pp ranks",
                                          std::int64_t{plan.dp} * plan.tp));
  for (size_t r = 0; r < plan.placement.size(); ++r)
    for (size_t q = 0; q < r; ++q)
      if (plan.placement[q] == plan.placement[r])
        return configError(plan.source.placement[r],
                           fmt::format("'placement' gives chip {} to ranks {} and {}", plan.placement[r], q, r));
  if (!plan.placement.empty() && static_cast<std::int64_t>(plan.placement.size()) != std::int64_t{plan.dp} * plan.tp * plan.pp)
    return reader.error(reader.child(root, "placement"),
                        fmt::format("'placement' has {} chips but dp x tp x pp is {}", plan.placement.size(),
                                    std::int64_t{plan.dp} * plan.tp * plan.pp));
  return plan;
}

Status checkPlan(const Plan& plan, int layers, const topology::Cluster& cluster, const std::string& file) {
  const SourceLocation where{file, 0, 0, ""};
  // An entry's place in the file when the plan was read from one, else the file.
  auto at = [&](const std::vector<SourceLocation>& entries, size_t i) { return i < entries.size() ? entries[i] : where; };
  for (size_t s = 0; s < plan.stageChip.size(); ++s) {
    if (plan.stageChip[s] >= cluster.chipCount())
      return configError(at(plan.source.stageChip, s), fmt::format("plan stage {}: chip {} is not in the cluster (chips 0 to {})", s,
                                            plan.stageChip[s], cluster.chipCount() - 1));
    if (plan.stageFirstLayer[s] >= layers)
      return configError(at(plan.source.stageFirstLayer, s), fmt::format("plan stage {} starts at layer {} but the model has {} layers", s,
                                            plan.stageFirstLayer[s], layers));
  }
  for (size_t r = 0; r < plan.placement.size(); ++r)
    if (plan.placement[r] >= cluster.chipCount())
      return configError(at(plan.source.placement, r),
                         fmt::format("plan placement: chip {} is not in the cluster (chips 0 to {})", plan.placement[r],
                                     cluster.chipCount() - 1));
  if (!plan.layerChunk.empty() && static_cast<int>(plan.layerChunk.size()) != layers)
    return configError(at(plan.source.layerChunk, 0), fmt::format("plan layer_chunk has {} entries but the model has {} layers",
                                          plan.layerChunk.size(), layers));
  return {};
}

Status checkInputsFitCluster(const ir::Graph& graph, const topology::Cluster& cluster) {
  const double sram = static_cast<double>(cluster.chip().sramBytes()) * cluster.chipCount();
  for (ir::TensorId id : graph.inputs()) {
    const ir::Tensor& tensor = graph.tensor(id);
    double bytes = ir::dtypeBytes(tensor.dtype);
    for (auto d : tensor.shape) bytes *= static_cast<double>(d);
    if (bytes > sram) {
      Diagnostic d = modelError(tensor.name,
                       fmt::format("tensor '{}' of shape [{}] holds {:.4g} bytes, more than the {:.4g} bytes of SRAM "
                                   "of all {} chips of the cluster together",
                                   tensor.name, fmt::join(tensor.shape, ", "), bytes, sram, cluster.chipCount()));
      d.code = ExitCode::kDoesNotFit;
      return d;
    }
  }
  return {};
}

std::vector<int> partitionChain(const std::vector<Cycle>& cost, int stages) {
  return ChainStages(cost).firstLayers(stages);
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

Expected<Plan> planPipeline(const ir::Graph& graph, const topology::Cluster& cluster, const ParallelismConfig& config,
                            const support::ProgressFn& progress) {
  auto layerCycles = schedule::estimateLayerCycles(graph, cluster.chip(), progress);
  if (!layerCycles) return layerCycles.error();
  const int layers = static_cast<int>(layerCycles->size());
  int stages = config.pp > 0 ? config.pp : std::min(layers, cluster.chipCount());
  if (stages > layers)
    return configError(config.planWhere,
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

std::vector<int> Plan::layerChunks(int layers) const {
  std::vector<int> chunk(std::max(layers, 0), 0);
  for (int l = 0; l < layers; ++l) {
    if (!layerChunk.empty() && l < static_cast<int>(layerChunk.size())) {
      chunk[l] = layerChunk[l];
      continue;
    }
    int s = pp - 1;
    while (s > 0 && stageFirstLayer[s] > l) --s;
    chunk[l] = s;
  }
  return chunk;
}

std::vector<schedule::PipelineStage> stagesOf(const ir::Graph& graph, const Plan& plan) {
  std::vector<schedule::PipelineStage> stages(plan.pp);
  for (int s = 0; s < plan.pp; ++s) stages[s].chip = plan.stageChip[s];
  const auto chunks = plan.layerChunks(graph.layerCount());
  for (size_t op = 0; op < graph.ops().size(); ++op)
    stages[chunks[graph.op(op).layer] % plan.pp].ops.push_back(static_cast<ir::OpId>(op));
  return stages;
}

}  // namespace tsp::partition
