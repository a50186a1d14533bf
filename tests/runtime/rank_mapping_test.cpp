// Tests of the rank-to-chip mappings: block and METIS (fewest links cut, balanced instructions).
#include "runtime/rank_mapping.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::runtime {
namespace {

topology::Cluster cluster(const std::string& yaml) {
  topology::YamlReader reader("test.yaml");
  auto c = topology::loadCluster(reader, YAML::Load(yaml));
  EXPECT_TRUE(c.ok()) << c.error().format();
  return std::move(*c);
}

// Every chip is owned once, and each rank's localChips lists exactly its chips.
void expectPartition(const topology::Cluster& c, const std::string& kind, const std::vector<std::int64_t>& weights,
                     int ranks) {
  std::vector<int> seen(c.chipCount(), 0);
  std::vector<int> owners;
  for (int rank = 0; rank < ranks; ++rank) {
    auto m = mapChipsToRanks(kind, c, weights, ranks, rank);
    ASSERT_TRUE(m.ok()) << m.error().format();
    if (owners.empty()) owners = m->owner;
    EXPECT_EQ(m->owner, owners) << "every rank computes the same owners";
    for (int chip : m->localChips) {
      ++seen[chip];
      EXPECT_EQ(m->owner[chip], rank);
    }
  }
  for (int count : seen) EXPECT_EQ(count, 1);
}

TEST(RankMapping, EveryRankCountFromOneToTheChipCount) {
  const auto c = cluster("{topology: {kind: torus, dims: [3, 3]}}");
  for (int ranks = 1; ranks <= c.chipCount(); ++ranks) {
    expectPartition(c, "block", {}, ranks);
    expectPartition(c, "metis", std::vector<std::int64_t>(c.chipCount(), 100), ranks);
  }
}

TEST(RankMapping, MetisCutsARingInTwoPlaces) {
  const auto c = cluster("{topology: {kind: ring, chips: 16}}");
  auto m = metisMapping(c, std::vector<std::int64_t>(16, 50), 2, 0);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(cutLinks(c, *m), 2);
  EXPECT_EQ(m->localChips.size(), 8u);
}

TEST(RankMapping, MetisCutsFewerLinksThanBlocksOnAMesh) {
  // Blocks of 16 consecutive ids in a 8x8 mesh are two rows each; splitting into 4 by METIS is
  // at least as good, and on an 8x8 mesh 4 quadrants cut 16 links.
  const auto c = cluster("{topology: {kind: mesh, dims: [8, 8]}}");
  const std::vector<std::int64_t> weights(64, 10);
  auto metis = metisMapping(c, weights, 4, 0);
  ASSERT_TRUE(metis.ok());
  EXPECT_LE(cutLinks(c, *metis), cutLinks(c, blockMapping(64, 4, 0)));
  EXPECT_LE(cutLinks(c, *metis), 16);
}

TEST(RankMapping, MetisBalancesInstructionCounts) {
  // Chip 0 holds as many instructions as the other seven together: it gets a rank to itself
  // (or nearly), where blocks would put four chips on each rank.
  const auto c = cluster("{topology: {kind: ring, chips: 8}}");
  std::vector<std::int64_t> weights(8, 1000);
  weights[0] = 7000;
  auto m = metisMapping(c, weights, 2, 0);
  ASSERT_TRUE(m.ok());
  std::int64_t load[2] = {0, 0};
  for (int chip = 0; chip < 8; ++chip) load[m->owner[chip]] += weights[chip];
  EXPECT_LE(std::max(load[0], load[1]), 8000);  // blocks would give 10000
}

TEST(RankMapping, MoreRanksThanChipsIsAnError) {
  const auto c = cluster("{topology: {kind: ring, chips: 2}}");
  auto m = mapChipsToRanks("block", c, {}, 3, 0);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ExitCode::kConfig);
  EXPECT_EQ(m.error().format(), "3 MPI ranks for 2 chips: run on at most one rank per chip");
}

}  // namespace
}  // namespace tsp::runtime
