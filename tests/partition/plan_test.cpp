// Tests of pipeline planning: the DP stage partition, placement, and real METIS calls.
#include "partition/plan.h"

#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "partition/metis_partition.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::partition {
namespace {

// The largest stage of a split, the quantity the DP minimises.
Cycle largestStage(const std::vector<Cycle>& cost, const std::vector<int>& first) {
  Cycle worst = 0;
  for (size_t s = 0; s < first.size(); ++s) {
    const int end = s + 1 < first.size() ? first[s + 1] : static_cast<int>(cost.size());
    worst = std::max(worst, std::accumulate(cost.begin() + first[s], cost.begin() + end, Cycle{0}));
  }
  return worst;
}

TEST(PartitionChain, MatchesBruteForce) {
  const std::vector<Cycle> cost = {5, 1, 9, 2, 2, 7, 3, 3, 8, 1};
  for (int stages = 1; stages <= 5; ++stages) {
    const auto first = partitionChain(cost, stages);
    ASSERT_EQ(static_cast<int>(first.size()), stages);
    // Brute force over every set of cut points.
    Cycle best = std::numeric_limits<Cycle>::max();
    const int n = static_cast<int>(cost.size());
    for (int mask = 0; mask < (1 << (n - 1)); ++mask) {
      if (__builtin_popcount(mask) != stages - 1) continue;
      std::vector<int> f{0};
      for (int i = 1; i < n; ++i)
        if (mask >> (i - 1) & 1) f.push_back(i);
      best = std::min(best, largestStage(cost, f));
    }
    EXPECT_EQ(largestStage(cost, first), best) << stages << " stages";
  }
}

TEST(PlacePipeline, NeighboursOnARing) {
  topology::YamlReader reader("c.yaml");
  auto cluster = topology::loadCluster(reader, YAML::Load("{topology: {kind: ring, chips: 6}}"));
  ASSERT_TRUE(cluster.ok());
  auto chips = placePipeline(*cluster, 6);
  ASSERT_TRUE(chips.ok());
  EXPECT_EQ(*chips, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(placePipeline(*cluster, 7).error().code, ExitCode::kDoesNotFit);
}

TEST(PlacePipeline, SnakesThroughAMesh) {
  topology::YamlReader reader("c.yaml");
  auto cluster = topology::loadCluster(reader, YAML::Load("{topology: {kind: mesh, dims: [3, 3]}}"));
  ASSERT_TRUE(cluster.ok());
  auto chips = placePipeline(*cluster, 9);
  ASSERT_TRUE(chips.ok());
  for (size_t i = 0; i + 1 < chips->size(); ++i) EXPECT_EQ(cluster->hopsFrom((*chips)[i])[(*chips)[i + 1]], 1);
}

TEST(Metis, SplitsTwoCliquesAtTheirBridge) {
  // Two 4-cliques {0..3} and {4..7} joined by the edge 3-4.
  std::vector<std::vector<int>> adj(8);
  auto edge = [&](int a, int b) { adj[a].push_back(b); adj[b].push_back(a); };
  for (int base : {0, 4})
    for (int i = 0; i < 4; ++i)
      for (int j = i + 1; j < 4; ++j) edge(base + i, base + j);
  edge(3, 4);
  std::vector<int> xadj{0}, adjncy;
  for (const auto& list : adj) {
    adjncy.insert(adjncy.end(), list.begin(), list.end());
    xadj.push_back(static_cast<int>(adjncy.size()));
  }
  auto parts = partitionGraphKway(xadj, adjncy, {}, {}, 2);
  ASSERT_TRUE(parts.ok());
  for (int v = 1; v < 4; ++v) EXPECT_EQ((*parts)[v], (*parts)[0]);
  for (int v = 5; v < 8; ++v) EXPECT_EQ((*parts)[v], (*parts)[4]);
  EXPECT_NE((*parts)[0], (*parts)[4]);
}

}  // namespace
}  // namespace tsp::partition
