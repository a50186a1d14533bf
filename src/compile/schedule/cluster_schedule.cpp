// The cluster scheduler for pipelines of stages.
#include "compile/schedule/cluster_schedule.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "compile/lower/stage_builder.h"

namespace tsp::schedule {

int linkVectorInterval(const topology::ChipSpec& chip, const topology::Link& link) {
  return static_cast<int>(std::ceil(chip.vectorBytes / link.bytesPerCycle - 1e-9));
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
                                          const topology::Cluster& cluster) {
  const auto& chip = cluster.chip();
  ClusterSchedule result;
  result.programs.resize(cluster.chipCount());
  for (auto& p : result.programs) p.chipSpecHash = chip.hash();

  std::vector<int> stageOf(graph.ops().size(), -1);
  for (size_t s = 0; s < stages.size(); ++s)
    for (ir::OpId op : stages[s].ops) stageOf[op] = static_cast<int>(s);

  // Bursts of each tensor sent to a later stage, keyed by (tensor, destination stage).
  std::map<std::pair<ir::TensorId, int>, std::vector<C2CTransfer>> inbound;

  for (size_t s = 0; s < stages.size(); ++s) {
    const PipelineStage& stage = stages[s];
    lower::StageBuilder builder(chip, graph);
    // Receive what earlier stages send here, in tensor order (the order the senders used).
    for (auto& [key, bursts] : inbound) {
      if (key.second != static_cast<int>(s)) continue;
      std::vector<Cycle> arrivals;
      for (const auto& b : bursts) arrivals.push_back(b.arriveCycle);
      const auto& link = cluster.links()[bursts.front().link];
      if (auto st = builder.receive(key.first, link.portOn(stage.chip), arrivals, bursts.front().interval); !st)
        return st.error();
    }
    for (size_t i = 0; i < stage.ops.size();) {
      auto consumed = builder.lowerOp(stage.ops[i], stage.ops, i);
      if (!consumed) return consumed.error();
      i += *consumed;
    }
    // Send every tensor made here that a later stage reads, once per destination stage.
    std::set<std::pair<ir::TensorId, int>> outgoing;
    for (ir::OpId op : stage.ops)
      for (ir::TensorId out : graph.op(op).outputs)
        for (ir::OpId user : graph.tensor(out).users)
          if (stageOf[user] > static_cast<int>(s)) outgoing.insert({out, stageOf[user]});
    for (const auto& [tensor, dstStage] : outgoing) {
      const int dstChip = stages[dstStage].chip;
      const int linkId = directLink(cluster, stage.chip, dstChip);
      if (linkId < 0)
        return makeError(ExitCode::kConfig,
                         fmt::format("stages {} and {} sit on chips {} and {}, which share no link; this scheduler "
                                     "needs pipeline neighbours on neighbouring chips",
                                     s, dstStage, stage.chip, dstChip));
      const auto& link = cluster.links()[linkId];
      const int interval = linkVectorInterval(chip, link);
      auto bursts = builder.send(tensor, link.portOn(stage.chip), interval);
      if (!bursts) return bursts.error();
      for (const auto& b : *bursts) {
        C2CTransfer t;
        t.srcChip = stage.chip;
        t.dstChip = dstChip;
        t.link = linkId;
        t.sendCycle = b.issue;
        t.arriveCycle = b.issue + chip.c2cSendCycles + link.latencyCycles;
        t.vectors = b.vectors;
        t.interval = b.interval;
        t.bytes = Bytes{b.vectors} * chip.vectorBytes;
        inbound[{tensor, dstStage}].push_back(t);
        result.transfers.push_back(t);
      }
    }
    result.programs[stage.chip] = builder.finish();
  }
  return result;
}

Expected<std::vector<Cycle>> estimateLayerCycles(const ir::Graph& graph, const topology::ChipSpec& chip) {
  std::vector<std::vector<ir::OpId>> layers(graph.layerCount());
  for (size_t op = 0; op < graph.ops().size(); ++op) layers[graph.op(op).layer].push_back(static_cast<ir::OpId>(op));
  std::vector<Cycle> cycles;
  for (const auto& ops : layers) {
    lower::StageBuilder builder(chip, graph);
    // A layer alone: its inputs from other layers are taken as resident.
    for (ir::OpId op : ops)
      for (ir::TensorId in : graph.op(op).inputs)
        if (graph.tensor(in).producer >= 0 && graph.op(graph.tensor(in).producer).layer != graph.op(op).layer)
          if (auto s = builder.placeResident(in); !s) return s.error();
    for (size_t i = 0; i < ops.size();) {
      auto consumed = builder.lowerOp(ops[i], ops, i);
      if (!consumed) return consumed.error();
      i += *consumed;
    }
    cycles.push_back(builder.finish().predictedCycles);
  }
  return cycles;
}

}  // namespace tsp::schedule
