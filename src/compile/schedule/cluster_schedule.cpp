// The cluster scheduler for pipelines of stages.
#include "compile/schedule/cluster_schedule.h"

#include <cmath>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "compile/lower/lowering.h"
#include "compile/schedule/sharded_schedule_internal.h"

namespace tsp::schedule {

int linkVectorInterval(const topology::ChipSpec& chip, const topology::Link& link) {
  return static_cast<int>(std::ceil(chip.vectorBytes / link.bytesPerCycle - 1e-9));
}

LinkPace linkPace(double vectorCycles) {
  return {std::max(1, static_cast<int>(std::floor(vectorCycles + 1e-9))), vectorCycles};
}

LinkPace linkPace(const topology::ChipSpec& chip, const topology::Link& link) {
  return linkPace(link.vectorCycles(chip.vectorBytes));
}

namespace {

// The direct link between two chips (lowest id), or -1.
int directLink(const topology::Cluster& cluster, int a, int b) {
  for (const auto& [port, linkId] : cluster.linksOf(a))
    if (cluster.links()[linkId].other(a) == b) return linkId;
  return -1;
}

}  // namespace

Expected<ClusterSchedule> scheduleCluster(const ir::Graph& graph, const std::vector<PipelineStage>& stages,
                                          const topology::Cluster& cluster, const Options& options) {
  const auto& chip = cluster.chip();
  ClusterSchedule result;
  result.programs.resize(cluster.chipCount());
  result.reports.resize(cluster.chipCount());
  for (auto& p : result.programs) p.chipSpecHash = chip.hash();

  std::vector<int> stageOf(graph.ops().size(), -1);
  for (size_t s = 0; s < stages.size(); ++s)
    for (ir::OpId op : stages[s].ops) stageOf[op] = static_cast<int>(s);

  // Bursts of each tensor sent to a later stage, keyed by (tensor, destination stage).
  std::map<std::pair<ir::TensorId, int>, std::vector<C2CTransfer>> inbound;

  for (size_t s = 0; s < stages.size(); ++s) {
    const PipelineStage& stage = stages[s];
    lower::ShardInterface interface;
    // Receives are release times: the arrivals of what earlier stages sent here.
    for (auto& [key, bursts] : inbound) {
      if (key.second != static_cast<int>(s)) continue;
      lower::ReceivePlan plan;
      plan.tensor = key.first;
      plan.port = cluster.links()[bursts.front().link].portOn(stage.chip);
      plan.interval = bursts.front().interval;
      plan.spacing = bursts.front().spacing;
      for (const auto& b : bursts) plan.arrivals.push_back(b.arriveCycle);
      interface.receives.push_back(plan);
    }
    // Send every tensor made here that a later stage reads, once per destination stage.
    std::set<std::pair<ir::TensorId, int>> outgoing;
    for (ir::OpId op : stage.ops)
      for (ir::TensorId out : graph.op(op).outputs)
        for (ir::OpId user : graph.tensor(out).users)
          if (stageOf[user] > static_cast<int>(s)) outgoing.insert({out, stageOf[user]});
    std::vector<std::pair<ir::TensorId, int>> sendKeys(outgoing.begin(), outgoing.end());
    std::vector<int> sendLinks;
    for (const auto& [tensor, dstStage] : sendKeys) {
      const int dstChip = stages[dstStage].chip;
      const int linkId = directLink(cluster, stage.chip, dstChip);
      if (linkId < 0)
        return makeError(ExitCode::kConfig,
                         fmt::format("stages {} and {} sit on chips {} and {}, which share no link; this scheduler "
                                     "needs pipeline neighbours on neighbouring chips",
                                     s, dstStage, stage.chip, dstChip));
      const auto& link = cluster.links()[linkId];
      lower::SendPlan plan;
      plan.tensor = tensor;
      plan.port = link.portOn(stage.chip);
      const LinkPace pace = linkPace(chip, link);
      plan.interval = pace.interval;
      plan.spacing = pace.spacing;
      interface.sends.push_back(plan);
      sendLinks.push_back(linkId);
    }
    Options shardOptions = stages.size() > 1 ? options.asShardOfMany() : options;
    shardOptions.seed = options.seed * 1000003ULL + s;  // one random stream per (seed, stage)
    shardOptions.annealWork = options.annealWork / static_cast<std::int64_t>(stages.size());
    auto compiled = compileShard(chip, graph, stage.ops, interface, shardOptions);
    if (!compiled) return compiled.error();
    for (size_t i = 0; i < sendKeys.size(); ++i) {
      const auto& link = cluster.links()[sendLinks[i]];
      const int dstChip = stages[sendKeys[i].second].chip;
      const auto [rows, tiles] = lower::tensorGeometry(chip, graph, sendKeys[i].first);
      (void)tiles;
      for (Cycle issue : compiled->sendIssues[i]) {
        C2CTransfer t;
        t.srcChip = stage.chip;
        t.dstChip = dstChip;
        t.link = sendLinks[i];
        t.sendCycle = issue;
        t.arriveCycle = issue + chip.c2cSendCycles + link.latencyCycles;
        t.vectors = static_cast<int>(rows);
        t.interval = interface.sends[i].interval;
        t.spacing = interface.sends[i].spacing;
        t.bytes = Bytes{rows} * chip.vectorBytes;
        inbound[sendKeys[i]].push_back(t);
        result.transfers.push_back(t);
      }
    }
    // A stage searched layer by layer counts its distinct layers as compiled, the repeats as shared.
    result.compiledShards += compiled->report.distinctSegments;
    result.sharedShards += compiled->report.segments - compiled->report.distinctSegments;
    result.programs[stage.chip] = std::move(compiled->program);
    result.reports[stage.chip] = compiled->report;
    if (options.progress) options.progress(static_cast<std::int64_t>(s) + 1, static_cast<std::int64_t>(stages.size()));
  }
  return result;
}

Expected<std::vector<Cycle>> estimateLayerCycles(const ir::Graph& graph, const topology::ChipSpec& chip,
                                                 const support::ProgressFn& progress) {
  std::vector<std::vector<ir::OpId>> layers(graph.layerCount());
  for (size_t op = 0; op < graph.ops().size(); ++op) layers[graph.op(op).layer].push_back(static_cast<ir::OpId>(op));
  std::vector<Cycle> cycles;
  // List schedule only: the partitioner compares layers, annealing would not change the ranking; each
  // layer stands for a shard of a plan of many.
  Options options = Options{}.asShardOfMany();
  options.boundRounds = 0;  // nor would the report's bound
  // Identical layers (a transformer's blocks) compile once: every layer has the same options and seed.
  std::map<std::string, Cycle> compiled;
  for (const auto& ops : layers) {
    lower::ShardInterface interface;
    // A layer alone: its inputs from other layers are taken as resident.
    std::set<ir::TensorId> resident;
    for (ir::OpId op : ops)
      for (ir::TensorId in : graph.op(op).inputs)
        if (graph.tensor(in).producer >= 0 && graph.op(graph.tensor(in).producer).layer != graph.op(op).layer)
          resident.insert(in);
    interface.resident.assign(resident.begin(), resident.end());
    const std::string key = detail::residentSegmentKey(graph, ops, interface.resident);
    auto it = compiled.find(key);
    if (it == compiled.end()) {
      auto shard = compileShard(chip, graph, ops, interface, options);
      if (!shard) return shard.error();
      it = compiled.emplace(key, shard->program.predictedCycles).first;
    }
    cycles.push_back(it->second);
    if (progress) progress(static_cast<std::int64_t>(cycles.size()), static_cast<std::int64_t>(layers.size()));
  }
  return cycles;
}

}  // namespace tsp::schedule
