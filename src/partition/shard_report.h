// What a plan's sharding does on each chip: op shardings, the collectives inserted and why, bytes sent, memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "partition/plan.h"
#include "support/expected.h"

namespace tsp::partition {

/// One op of a chip's share: its kind and the sharding of its results.
struct OpShardingEntry {
  std::string op, kind;
  std::vector<std::string> results;  ///< "name [-,tp] partial(tp)" per result
};

/// One collective (or halo exchange) inserted by propagation, as one chip takes part in it.
struct CollectiveEntry {
  std::string kind;    ///< AllReduce, AllGather, ReduceScatter, AllToAll, Halo
  std::string tensor;  ///< the tensor moved
  std::int64_t bytes = 0;      ///< the chip's local bytes of the tensor entering the step
  std::int64_t sentBytes = 0;  ///< bytes the chip sends for it (nccl-tests accounting)
  std::vector<int> group;      ///< chips of the group, in rank order
  std::string neededBy;        ///< the op that reads the result, or "graph output"
  std::string why;             ///< the layouts it moves between
};

/// One chip's share of one batch block (a microbatch of one replica).
struct ChipShards {
  int chip = 0, stage = 0, tpRank = 0;
  std::vector<OpShardingEntry> ops;
  std::vector<CollectiveEntry> collectives;
  std::int64_t sentBytes = 0;
  std::int64_t weightBytes = 0;      ///< local weights and constants the chip's ops read
  std::int64_t activationBytes = 0;  ///< peak of live local activations over the chip's ops, in op order
  std::int64_t kvCacheBytes = 0;     ///< local state tensors (KV cache) the chip's ops read
};

/// The sharding of `plan` on the chips of replica 0: every (stage, TP rank) chip with its ops,
/// collectives, bytes sent and memory, for one batch block (dp x microbatches blocks run alike).
Expected<std::vector<ChipShards>> describeShards(const ir::Graph& graph, const Plan& plan);

/// The readable form of describeShards (one section per chip).
std::string shardsText(const std::vector<ChipShards>& chips);

/// The JSON form of describeShards.
std::string shardsJson(const std::vector<ChipShards>& chips);

}  // namespace tsp::partition
