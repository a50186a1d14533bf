// Tests of routing and summary figures: hand-checked small cases, exact hop tables against
// breadth-first search, minimal routes over existing links, and the 10,440-chip dragonfly.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <set>
#include <fstream>
#include <sstream>

#include "topology/cluster.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::topology {
namespace {

Cluster load(const std::string& yaml) {
  YamlReader reader("c.yaml");
  auto c = loadCluster(reader, YAML::Load(yaml));
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().format());
  return std::move(*c);
}

// Every route has as many hops as breadth-first search says, follows existing links from src to
// dst, and the router's hop count agrees; summary diameter and average agree with the searches.
void expectMinimalRoutes(const Cluster& c) {
  int diameter = 0;
  double sum = 0;
  for (int src = 0; src < c.chipCount(); ++src) {
    const auto hops = c.hopsFrom(src);
    for (int dst = 0; dst < c.chipCount(); ++dst) {
      ASSERT_EQ(c.hops(src, dst), hops[dst]) << src << " -> " << dst;
      const auto route = c.route(src, dst);
      ASSERT_EQ(static_cast<int>(route.size()), hops[dst]) << src << " -> " << dst;
      int at = src;
      for (const auto& hop : route) {
        ASSERT_EQ(hop.chip, at);
        const Link& link = c.links()[hop.link];
        ASSERT_TRUE(link.a == at || link.b == at);
        at = link.other(at);
      }
      ASSERT_EQ(at, dst);
      diameter = std::max(diameter, hops[dst]);
      sum += hops[dst];
    }
  }
  const auto s = summarize(c);
  EXPECT_TRUE(s.hopsExact);
  EXPECT_EQ(s.diameterHops, diameter);
  const double n = c.chipCount();
  EXPECT_NEAR(s.averageHops, n > 1 ? sum / (n * (n - 1)) : 0.0, 1e-9);
}

TEST(Routing, EveryGeneratorRoutesMinimally) {
  for (const char* yaml : {"{topology: {kind: ring, chips: 7}}", "{topology: {kind: ring, chips: 8}}",
                           "{topology: {kind: ring, chips: 2}}", "{topology: {kind: ring, chips: 1}}",
                           "{topology: {kind: mesh, dims: [3, 4, 2]}}", "{topology: {kind: mesh, dims: [5]}}",
                           "{topology: {kind: torus, dims: [4, 5]}}", "{topology: {kind: torus, dims: [3, 2, 4]}}",
                           "{topology: {kind: torus, dims: [6]}}", "{topology: {kind: fully-connected, chips: 9}}",
                           "{topology: {kind: explicit, chips: 5, links: [{a: 0, b: 1}, {a: 1, b: 2}, {a: 2, b: 3}, "
                           "{a: 3, b: 4}, {a: 4, b: 0}, {a: 0, b: 2}, {a: 0, b: 2}]}}",
                           "{topology: {kind: dragonfly, racks: 1}}",
                           "{topology: {kind: dragonfly, chips_per_node: 2, nodes_per_rack: 3, racks: 5, "
                           "global_links_per_chip: 1}, chip: {c2c: {ports: 4}, icu_queues: 132}}",
                           "{topology: {kind: dragonfly, chips_per_node: 4, nodes_per_rack: 3, racks: 4, "
                           "global_links_per_chip: 2}}"}) {
    SCOPED_TRACE(yaml);
    expectMinimalRoutes(load(yaml));
  }
}

TEST(Routing, MeshAndTorusUseDimensionOrder) {
  // 4x4 mesh, chip id = 4 * row + column: from (0,0) to (3,3) rows are corrected first.
  const auto mesh = load("{topology: {kind: mesh, dims: [4, 4]}}");
  std::vector<int> path;
  for (const auto& hop : mesh.route(0, 15)) path.push_back(hop.chip);
  EXPECT_EQ(path, (std::vector<int>{0, 4, 8, 12, 13, 14}));
  // On a ring of 8, chip 0 to chip 4 is 4 hops either way: the lower neighbour (1) goes first.
  const auto ring = load("{topology: {kind: ring, chips: 8}}");
  EXPECT_EQ(ring.links()[ring.route(0, 4)[0].link].other(0), 1);
  // Chip 2 to chip 6: neighbours 1 and 3, so the route goes down through 1.
  EXPECT_EQ(ring.links()[ring.route(2, 6)[0].link].other(2), 1);
  // The shorter way round wins on a torus: 0 to 7 on a ring of 8 is one hop over the wrap link.
  EXPECT_EQ(ring.route(0, 7).size(), 1u);
}

TEST(Routing, HopAndLatencyMatrices) {
  const auto c = load("{topology: {kind: explicit, chips: 3, links: [{a: 0, b: 1, latency_ns: 100}, "
                      "{a: 1, b: 2, latency_ns: 200}]}, chip: {c2c: {forward_cycles: 5}}}");
  const auto hops = c.hopMatrix();
  EXPECT_EQ(hops[0][2], 2);
  EXPECT_EQ(hops[2][1], 1);
  const auto latency = c.latencyMatrix();
  EXPECT_EQ(latency[0][1], 90);             // 100 ns at 900 MHz
  EXPECT_EQ(latency[0][2], 90 + 180 + 5);   // two links plus forwarding at chip 1
  EXPECT_EQ(latency[2][0], latency[0][2]);
  EXPECT_TRUE(c.hopMatrix(2).empty());      // too large for the requested bound
}

TEST(Summary, HandCheckedFigures) {
  auto ring = summarize(load("{topology: {kind: ring, chips: 16}}"));
  EXPECT_EQ(ring.diameterHops, 8);
  EXPECT_EQ(ring.bisectionLinks, 2);
  // Ring of 16: from one chip, distances 1..7 twice and 8 once: 64 / 15.
  EXPECT_NEAR(ring.averageHops, 64.0 / 15, 1e-12);
  auto torus = summarize(load("{topology: {kind: torus, dims: [8, 8]}}"));
  EXPECT_EQ(torus.diameterHops, 8);
  EXPECT_EQ(torus.bisectionLinks, 16);
  EXPECT_TRUE(torus.bisectionExact);
  auto mesh = summarize(load("{topology: {kind: mesh, dims: [4, 4, 4]}}"));
  EXPECT_EQ(mesh.diameterHops, 9);
  EXPECT_EQ(mesh.bisectionLinks, 16);
  auto full = summarize(load("{topology: {kind: fully-connected, chips: 8}}"));
  EXPECT_EQ(full.diameterHops, 1);
  EXPECT_EQ(full.bisectionLinks, 16);
  EXPECT_EQ(full.minDegree, 7);
  // Odd dimensions up to 24 chips: exact by enumeration (3x5 mesh: a 3-link straight cut plus one step).
  auto odd = summarize(load("{topology: {kind: mesh, dims: [3, 5]}}"));
  EXPECT_TRUE(odd.bisectionExact);
  EXPECT_EQ(odd.bisectionLinks, 4);
  // Larger odd meshes: an upper bound, flagged.
  auto big = summarize(load("{topology: {kind: mesh, dims: [5, 5]}}"));
  EXPECT_FALSE(big.bisectionExact);
}

TEST(Summary, PerLinkBandwidthLatencyAndLanes) {
  const auto c = load("{topology: {kind: explicit, chips: 2, links: [{a: 0, b: 1, lanes: 2, gbps_per_lane: 10, "
                      "latency_ns: 500}, {a: 0, b: 1}]}}");
  EXPECT_EQ(c.links()[0].lanes, 2);
  EXPECT_EQ(c.links()[0].latencyCycles, 450);
  EXPECT_EQ(c.links()[1].lanes, 4);
  const auto s = summarize(c);
  EXPECT_EQ(s.minLatencyCycles, 225);
  EXPECT_EQ(s.maxLatencyCycles, 450);
  // Both directions of both links: (2 x 10 + 4 x 30) Gb/s x 0.975 / 8, twice.
  EXPECT_NEAR(s.injectionBytesPerSecond, 2 * (20e9 + 120e9) / 8 * 0.975, 1.0);
}

TEST(Dragonfly, GroqRackWiring) {
  const auto c = load("{topology: {kind: dragonfly, racks: 1}}");
  ASSERT_EQ(c.chipCount(), 72);
  std::map<std::pair<int, int>, int> nodePairs;
  for (const auto& link : c.links())
    if (link.tier == LinkTier::kRack) {
      ++nodePairs[{link.a / 8, link.b / 8}];
      EXPECT_EQ(link.gbpsPerLane, 28.0);  // cabled
    } else {
      EXPECT_EQ(link.tier, LinkTier::kNode);
      EXPECT_EQ(link.a / 8, link.b / 8);
      EXPECT_EQ(link.gbpsPerLane, 30.0);
    }
  EXPECT_EQ(nodePairs.size(), 36u);
  for (const auto& [pair, count] : nodePairs) EXPECT_EQ(count, 4);
  // A chip's four rack links go to four different nodes (ports dealt in chip-id order).
  for (int chip = 0; chip < 72; ++chip) {
    std::set<int> nodes;
    for (const auto& [port, id] : c.linksOf(chip))
      if (c.links()[id].tier == LinkTier::kRack) nodes.insert(c.links()[id].other(chip) / 8);
    EXPECT_EQ(nodes.size(), 4u);
  }
  const auto s = summarize(c);
  EXPECT_EQ(s.diameterHops, 3);  // local, rack, local
  // Rack halves: 4 whole nodes and half of a fifth: 4 x 4 node pairs x 4 links + 16 local links.
  EXPECT_EQ(s.rackBisectionLinks, 80);
}

TEST(Dragonfly, FullSystemOf10440Chips) {
  const auto c = load("{topology: {kind: dragonfly, racks: 145}}");
  ASSERT_EQ(c.chipCount(), 10440);
  const auto s = summarize(c);
  EXPECT_EQ(s.links, 10440 * 16 / 2);
  EXPECT_EQ(s.minDegree, 16);
  EXPECT_EQ(s.maxDegree, 16);
  EXPECT_TRUE(s.hopsExact);
  // The default wiring reaches every chip in at most 6 hops (the published figure is "5 to 6").
  EXPECT_EQ(s.diameterHops, 6);
  // Every pair of racks is joined directly, by 2 or 3 system links.
  std::map<std::pair<int, int>, int> rackPairs;
  for (const auto& link : c.links())
    if (link.tier == LinkTier::kSystem) ++rackPairs[{std::min(link.a, link.b) / 72, std::max(link.a, link.b) / 72}];
  EXPECT_EQ(rackPairs.size(), 145u * 144 / 2);
  for (const auto& [pair, count] : rackPairs) EXPECT_TRUE(count == 2 || count == 3) << count;
  // Rack bisection: 80 links inside the rack plus the 36 x 5 system links of one half, about 3.6 TB/s.
  EXPECT_EQ(s.rackBisectionLinks, 80 + 180);
  EXPECT_NEAR(s.rackBisectionBytesPerSecond, 3.6e12, 0.1e12);
  // Spot-check the hop table against breadth-first search from chips of other racks.
  for (int src : {5, 777, 5000, 10439}) {
    const auto hops = c.hopsFrom(src);
    for (int dst = 0; dst < c.chipCount(); dst += 7) ASSERT_EQ(c.hops(src, dst), hops[dst]);
    EXPECT_EQ(static_cast<int>(c.route(src, (src + 5555) % 10440).size()), hops[(src + 5555) % 10440]);
  }
}

TEST(Configs, EveryShippedConfigLoads) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(TSP_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const YAML::Node root = YAML::LoadFile(entry.path().string());
    YamlReader reader(entry.path().string());
    auto c = loadCluster(reader, root["cluster"]);
    ASSERT_TRUE(c.ok()) << c.error().format();
    ++count;
  }
  EXPECT_GE(count, 9);
}

}  // namespace
}  // namespace tsp::topology
