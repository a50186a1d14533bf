// Rank-to-chip mappings: block, and METIS through the partition layer (the one place METIS is linked).
#include "runtime/rank_mapping.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "partition/metis_partition.h"

namespace tsp::runtime {

namespace {

RankMapping fromOwners(std::vector<int> owner, int rank) {
  RankMapping mapping;
  mapping.owner = std::move(owner);
  for (int chip = 0; chip < static_cast<int>(mapping.owner.size()); ++chip)
    if (mapping.owner[chip] == rank) mapping.localChips.push_back(chip);
  return mapping;
}

}  // namespace

RankMapping blockMapping(int chips, int ranks, int rank) {
  std::vector<int> owner(chips);
  const int base = chips / ranks, extra = chips % ranks;
  int chip = 0;
  for (int r = 0; r < ranks; ++r) {
    const int count = base + (r < extra ? 1 : 0);
    for (int i = 0; i < count; ++i) owner[chip++] = r;
  }
  return fromOwners(std::move(owner), rank);
}

RankMapping blockMapping(const std::vector<std::int64_t>& chipWeights, int ranks, int rank) {
  const int chips = static_cast<int>(chipWeights.size());
  std::vector<std::int64_t> weight(chipWeights.size());
  std::int64_t total = 0;
  for (size_t chip = 0; chip < weight.size(); ++chip) total += weight[chip] = 1 + std::max<std::int64_t>(chipWeights[chip], 0);
  std::vector<int> owner(weight.size());
  std::int64_t running = 0;
  int chip = 0;
  for (int r = 0; r < ranks; ++r) {
    // Rank r takes chips until its block's end reaches its share, leaving one chip for each later rank.
    const int last = chips - (ranks - r);  // the last chip rank r may take
    const std::int64_t share = total * (r + 1);  // instruction counts: far below 2^63 / ranks
    do {
      running += weight[static_cast<size_t>(chip)];
      owner[static_cast<size_t>(chip++)] = r;
    } while (chip <= last && (r + 1 == ranks || running * ranks < share));
  }
  return fromOwners(std::move(owner), rank);
}

Expected<RankMapping> metisMapping(const topology::Cluster& cluster, const std::vector<std::int64_t>& chipWeights,
                                   int ranks, int rank) {
  const int chips = cluster.chipCount();
  if (ranks <= 1) return fromOwners(std::vector<int>(chips, 0), rank);
  // CSR adjacency; parallel links between two chips become one edge weighing the link count.
  std::vector<int> xadj{0}, adjncy, edgeWeights;
  for (int chip = 0; chip < chips; ++chip) {
    std::map<int, int> peers;
    for (const auto& [port, linkId] : cluster.linksOf(chip)) ++peers[cluster.links()[linkId].other(chip)];
    for (const auto& [peer, count] : peers) {
      adjncy.push_back(peer);
      edgeWeights.push_back(count);
    }
    xadj.push_back(static_cast<int>(adjncy.size()));
  }
  // METIS balances int weights: scale instruction counts so that their sum stays far below 2^31.
  std::int64_t total = 0;
  for (auto w : chipWeights) total += std::max<std::int64_t>(w, 0);
  const std::int64_t scale = std::max<std::int64_t>(1, total / (std::int64_t{1} << 24));
  std::vector<int> vertexWeights(chips);
  for (int chip = 0; chip < chips; ++chip)
    vertexWeights[chip] =
        static_cast<int>(1 + std::max<std::int64_t>(chipWeights.empty() ? 0 : chipWeights[chip], 0) / scale);
  auto parts = partition::partitionGraphKway(xadj, adjncy, vertexWeights, edgeWeights, ranks);
  if (!parts) return parts.error();
  return fromOwners(std::move(*parts), rank);
}

Expected<RankMapping> mapChipsToRanks(const std::string& kind, const topology::Cluster& cluster,
                                      const std::vector<std::int64_t>& chipWeights, int ranks, int rank) {
  if (ranks > cluster.chipCount())
    return makeError(ExitCode::kConfig, fmt::format("{} MPI ranks for {} chips: run on at most one rank per chip",
                                                    ranks, cluster.chipCount()));
  if (kind == "metis") return metisMapping(cluster, chipWeights, ranks, rank);
  assert(kind == "block" && "the config loader accepts block and metis only");
  if (static_cast<int>(chipWeights.size()) != cluster.chipCount()) return blockMapping(cluster.chipCount(), ranks, rank);
  return blockMapping(chipWeights, ranks, rank);
}

std::int64_t cutLinks(const topology::Cluster& cluster, const RankMapping& mapping) {
  std::int64_t cut = 0;
  for (const auto& link : cluster.links()) cut += mapping.owner[link.a] != mapping.owner[link.b];
  return cut;
}

}  // namespace tsp::runtime
