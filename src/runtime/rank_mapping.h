// Which MPI rank simulates which chip: contiguous blocks, or METIS on the topology graph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::runtime {

/// Which rank simulates which chip.
struct RankMapping {
  std::vector<int> owner;       ///< rank of every chip
  std::vector<int> localChips;  ///< chips of this rank, ascending
};

/// Contiguous blocks of chips per rank (the first chips % ranks ranks get one more).
RankMapping blockMapping(int chips, int ranks, int rank);

/// Contiguous blocks of chips per rank with `chipWeights` (instruction counts; every chip weighs at
/// least 1) balanced: rank r's block ends where the running weight first reaches (r + 1) / ranks of
/// the total, every rank keeping at least one chip.
RankMapping blockMapping(const std::vector<std::int64_t>& chipWeights, int ranks, int rank);

/// METIS k-way partition of the topology graph (one vertex per chip, one unit of edge weight per
/// link) that cuts the fewest links between ranks while balancing `chipWeights` (instruction
/// counts; every chip weighs at least 1). Deterministic: the same on every rank and every run.
Expected<RankMapping> metisMapping(const topology::Cluster& cluster, const std::vector<std::int64_t>& chipWeights,
                                   int ranks, int rank);

/// The mapping named by `simulation.rank_mapping` (block | metis); an error when there are more
/// ranks than chips, since a rank without a chip would only wait for the others.
Expected<RankMapping> mapChipsToRanks(const std::string& kind, const topology::Cluster& cluster,
                                      const std::vector<std::int64_t>& chipWeights, int ranks, int rank);

/// Links whose two chips sit on different ranks.
std::int64_t cutLinks(const topology::Cluster& cluster, const RankMapping& mapping);

}  // namespace tsp::runtime
