// The cluster scheduler: the one owner of cross-chip timing, for pipelines of stages and sharded plans.
#pragma once

#include <vector>

#include "compile/ir/graph.h"
#include "compile/isa/program.h"
#include "compile/schedule/shard_compiler.h"
#include "support/expected.h"
#include "support/progress.h"
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
  int interval = 1;       ///< cycles between the vectors the send hands over
  double spacing = 0;     ///< cycles between the vectors on the link, its exact rate (0: interval)
  Bytes bytes = 0;
  std::vector<int> route;  ///< every link of a multi-hop route, in hop order (empty: `link` alone)
};

/// A Program for every chip of the cluster (empty for idle chips) and the C2C schedule.
struct ClusterSchedule {
  std::vector<isa::Program> programs;
  std::vector<CompileReport> reports;  ///< per chip (zeros for idle chips)
  std::vector<C2CTransfer> transfers;
  /// Compute segments compiled by compileShard (sharded plans), or a pipeline's stages, each counting
  /// its distinct layers when it was searched layer by layer (CompileReport::distinctSegments).
  int compiledShards = 0;
  /// Compute segments that reused an identical segment's program, or a stage's repeated layers.
  int sharedShards = 0;
  int collectives = 0;     ///< collectives scheduled on routes (sharded plans)
};

/// One pipeline chunk of one wave: the ops of model chunk `chunk` on every device of wave `wave`.
struct WaveChunk {
  int wave = 0;
  int chunk = 0;
};

/// The per-chip graphs of a sharded plan (SPMD: every device graph has the same op sequence; its
/// collectives and Send/Recv ops name the devices they join in `devices` and `peer` by their
/// position in the device's wave).
struct ShardedWorkload {
  std::vector<ir::Graph> graphs;        ///< per mesh device
  std::vector<std::vector<int>> opChip; ///< per device, the chip that runs each op
  /// Devices scheduled together, in order (a TP group of one microbatch of one replica): the
  /// collectives of a wave's graphs join only devices of that wave.
  std::vector<std::vector<int>> waves;
  /// The model chunk of each op of the SPMD graphs; empty: every op in chunk 0.
  std::vector<int> opChunk;
  /// Per pipeline lane (the chips of one replica's stage), the order its wave chunks run in (every
  /// (wave, chunk) in exactly one lane); the scheduler takes the lanes' next chunks as they become
  /// ready. Empty: the waves in turn, each wave's ops in order.
  std::vector<std::vector<WaveChunk>> lanes;
};

/// Cycles between consecutive vectors on a link: one 320-byte vector at the link's bandwidth.
int linkVectorInterval(const topology::ChipSpec& chip, const topology::Link& link);

/// How a point-to-point tile of `rows` vectors crosses a link: the send hands them over `interval`
/// cycles apart and the link carries them `spacing` apart.
struct LinkPace {
  int interval = 1;
  double spacing = 1;
};
/// A tile goes at the link's exact rate t_vec, handed over every floor(t_vec) cycles: the port's
/// buffer then holds the few vectors the send is ahead of the link. A tile longer than a MEM slice
/// leaves in segments that continue one stream on the link (topology::streamCycles).
LinkPace linkPace(const topology::ChipSpec& chip, const topology::Link& link);
/// The same for a link that carries one vector in `vectorCycles` cycles.
LinkPace linkPace(double vectorCycles);

/// Schedules the stages in order; a tensor produced on one stage and used on a later one travels
/// over the direct link between their chips: its receives are release times for the consumer.
/// Each chip is compiled by compileShard() with `options` (its seed mixed with the stage index).
Expected<ClusterSchedule> scheduleCluster(const ir::Graph& graph, const std::vector<PipelineStage>& stages,
                                          const topology::Cluster& cluster, const Options& options = {});

/// Schedules every chip of a sharded plan as one problem: each chip runs its compute segments (runs
/// of ops on one chip between communications, compiled by compileShard with their inputs resident)
/// and communications back to back; collectives (planCollective's algorithm for the group) and
/// cross-chip tensors (Send/Recv, stage to stage) are scheduled on routes at the earliest cycle
/// their chips are free, every link booked cycle by cycle in one calendar. Identical segments are
/// compiled once and relocated: the new segments of a wave's devices are compiled as one batch by
/// `batchCompiler` (empty: compileShards, here), which every MPI rank calls in the same order.
/// It runs `compileRanks` compiles at once: a batch of fewer new segments is filled with segments
/// likely compiled next (the schedule is the same whatever compileRanks is).
/// Errors name the op.
Expected<ClusterSchedule> scheduleCluster(const ShardedWorkload& workload, const topology::Cluster& cluster,
                                          const Options& options = {}, const ShardBatchCompiler& batchCompiler = {},
                                          int compileRanks = 1);

/// Predicted cycles of each layer run alone on one chip: the per-op estimates the partitioner uses.
/// progress is told after each layer.
Expected<std::vector<Cycle>> estimateLayerCycles(const ir::Graph& graph, const topology::ChipSpec& chip,
                                                 const support::ProgressFn& progress = {});

}  // namespace tsp::schedule
