// The one-chip compiler: lowering, list scheduling, annealing, stream colouring with spills, the Program.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "compile/isa/program.h"
#include "compile/lower/lowering.h"
#include "compile/schedule/list_scheduler.h"
#include "support/expected.h"

namespace tsp::schedule {

/// The compile report of one chip: what the schedule achieved against what any schedule could.
struct CompileReport {
  Cycle cycles = 0;            ///< predicted (== simulated) cycles
  Cycle listCycles = 0;        ///< the list schedule's cycles, before annealing
  /// max(critical path, busiest resource, resource window, plane sequence), order-free: the MXM
  /// planes' chosen run order (its chain dependences) left out, so that no order of the runs beats it;
  /// heads and tails raised by the resources (LowerBound).
  Cycle lowerBound = 0;
  Cycle criticalPath = 0;             ///< the order-free critical path (the lowering's dependences)
  Cycle chosenOrderCriticalPath = 0;  ///< the critical path with the planes' runs chained as scheduled
  Cycle busiestResource = 0;
  Cycle planeSequence = 0;     ///< each MXM plane's runs one after another, in any order (LowerBound::serialSegments)
  Cycle resourceWindowBound = 0;  ///< every resource's one-machine bound with heads and tails (LowerBound::resourceWindow)
  double utilisation[topology::kUnitKindCount] = {};  ///< busy / (units of the kind x cycles)
  double mxmMacUtilisation = 0;  ///< MACs / (peak MACs per cycle x cycles)
  Bytes sramPeakBytes = 0;       ///< the most bytes allocated at once (live tensors, scratch, spills)
  Bytes sramFootprintBytes = 0;  ///< per MEM slice the highest address accessed + 1, summed (the run summary's SRAM)
  Bytes sramCapacityBytes = 0;
  int spills = 0;              ///< stream edges sent through SRAM because no register was free
  int streamRegisters[2] = {0, 0};  ///< registers used eastward, westward
  std::int64_t memAccesses = 0;
  std::int64_t delayedMemAccesses = 0;      ///< MEM accesses the scheduler delayed: port, queue or bank busy
  std::int64_t bankDelayedMemAccesses = 0;  ///< of those, the ones delayed by a bank conflict alone
  /// Accesses delayed because the other port's run shared a bank with them, over all accesses.
  double bankConflictRate() const {
    return memAccesses > 0 ? static_cast<double>(bankDelayedMemAccesses) / static_cast<double>(memAccesses) : 0.0;
  }
  /// Accesses delayed for any reason (a busy port or queue, or a bank), over all accesses.
  double memDelayRate() const {
    return memAccesses > 0 ? static_cast<double>(delayedMemAccesses) / static_cast<double>(memAccesses) : 0.0;
  }
  std::int64_t tasks = 0;
  std::int64_t instructions = 0;
  std::int64_t annealMoves = 0;
  std::int64_t annealAccepted = 0;
  /// Priority weightings the first round list-scheduled: 2 when the pair was tried (a shard compiled
  /// alone whose first schedule is more than 2 % over its busiest plane's computes), else 1.
  int priorityWeightings = 1;
  /// Layers the shard was cut into for the search, and the distinct ones searched (Options::
  /// shareRepeatedLayers); 1 and 1 when the shard was searched whole.
  int segments = 1;
  int distinctSegments = 1;
};

/// The report as JSON text (the `report_*.json` next to emitted programs).
std::string reportJson(const CompileReport& report);

/// One compiled chip: its program, report, and the issue cycle of every send burst
/// (per SendPlan of the interface, one per tile).
struct CompiledShard {
  isa::Program program;
  CompileReport report;
  std::vector<std::vector<Cycle>> sendIssues;
};

/// Compiles one chip's ops. Receives are release times and sends may carry deadlines (the cluster
/// scheduler's); the result is verified before it is returned.
Expected<CompiledShard> compileShard(const topology::ChipSpec& chip, const ir::Graph& graph,
                                     const std::vector<ir::OpId>& ops, const lower::ShardInterface& interface,
                                     const Options& options);

/// One compileShard call of a batch: the graph (kept alive by the caller), ops, interface, options.
struct ShardJob {
  const ir::Graph* graph = nullptr;
  std::vector<ir::OpId> ops;
  lower::ShardInterface interface;
  Options options;
};

/// Compiles a batch of independent shards: element i is what compileShard gives job i, or the error
/// of the first job (in batch order) that fails. A scheduler hands every batch to one such function
/// on every MPI rank in the same order, so an implementation may deal the jobs over the ranks.
using ShardBatchCompiler =
    std::function<Expected<std::vector<CompiledShard>>(const topology::ChipSpec&, const std::vector<ShardJob>&)>;

/// The batch compiled here, job after job.
Expected<std::vector<CompiledShard>> compileShards(const topology::ChipSpec& chip, const std::vector<ShardJob>& jobs);

/// A compiled shard as bytes (its program in the binary on-disk form, its report, its send issues),
/// and back: deserialize(serialize(s)) equals s.
std::string serializeCompiledShard(const CompiledShard& shard);
Expected<CompiledShard> deserializeCompiledShard(const std::string& bytes, const topology::ChipSpec& chip);

/// Splits a spilled stream edge of a lowered shard: the producer's values go to an SRAM slot and a
/// MEM read brings them back to the consumer, in a second task that depends on the first.
Status spillEdge(lower::LoweredShard& shard, const StreamEdge& edge);

}  // namespace tsp::schedule
