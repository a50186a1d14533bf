// The cluster scheduler: the one owner of cross-chip timing for a pipeline of stages.
#pragma once

#include <vector>

#include "compile/ir/graph.h"
#include "compile/isa/program.h"
#include "compile/schedule/shard_compiler.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::schedule {

/// One pipeline stage: the graph ops (in topological order) that run on one chip.
struct PipelineStage {
  int chip = 0;
  std::vector<ir::OpId> ops;
};

/// One scheduled C2C burst between neighbouring chips.
struct C2CTransfer {
  int srcChip = 0, dstChip = 0, link = 0;
  Cycle sendCycle = 0;    ///< issue of the send instruction
  Cycle arriveCycle = 0;  ///< arrival of the first vector
  int vectors = 0;
  int interval = 1;       ///< cycles between vectors on the link
  Bytes bytes = 0;
};

/// A Program for every chip of the cluster (empty for idle chips) and the C2C schedule.
struct ClusterSchedule {
  std::vector<isa::Program> programs;
  std::vector<CompileReport> reports;  ///< per chip (zeros for idle chips)
  std::vector<C2CTransfer> transfers;
};

/// Cycles between consecutive vectors on a link: one 320-byte vector at the link's bandwidth.
int linkVectorInterval(const topology::ChipSpec& chip, const topology::Link& link);

/// Schedules the stages in order; a tensor produced on one stage and used on a later one travels
/// over the direct link between their chips: its receives are release times for the consumer.
/// Each chip is compiled by compileShard() with `options` (its seed mixed with the stage index).
Expected<ClusterSchedule> scheduleCluster(const ir::Graph& graph, const std::vector<PipelineStage>& stages,
                                          const topology::Cluster& cluster, const Options& options = {});

/// Predicted cycles of each layer run alone on one chip: the per-op estimates the partitioner uses.
Expected<std::vector<Cycle>> estimateLayerCycles(const ir::Graph& graph, const topology::ChipSpec& chip);

}  // namespace tsp::schedule
