// Tests of cluster generators, routing and the cluster section's validation.
#include "topology/cluster.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::topology {
namespace {

Expected<Cluster> load(const std::string& yaml) {
  YamlReader reader("c.yaml");
  return loadCluster(reader, YAML::Load(yaml));
}

TEST(Cluster, RingOf16) {
  auto c = load("{topology: {kind: ring, chips: 16}}");
  ASSERT_TRUE(c.ok()) << c.error().format();
  const auto s = summarize(*c);
  EXPECT_EQ(s.links, 16);
  EXPECT_EQ(s.diameterHops, 8);
  EXPECT_EQ(s.bisectionLinks, 2);
  EXPECT_TRUE(s.bisectionExact);
}

TEST(Cluster, Torus8x8) {
  auto c = load("{topology: {kind: torus, dims: [8, 8]}}");
  ASSERT_TRUE(c.ok()) << c.error().format();
  const auto s = summarize(*c);
  EXPECT_EQ(s.chips, 64);
  EXPECT_EQ(s.links, 128);
  EXPECT_EQ(s.diameterHops, 8);
  EXPECT_EQ(s.bisectionLinks, 16);
  EXPECT_EQ(s.minDegree, 4);
  EXPECT_EQ(s.maxDegree, 4);
}

TEST(Cluster, ExplicitBisectionIsExact) {
  // Two triangles joined by one link: the best balanced cut is that link.
  auto c = load("{topology: {kind: explicit, chips: 6, links: [{a: 0, b: 1}, {a: 1, b: 2}, {a: 0, b: 2}, "
                "{a: 3, b: 4}, {a: 4, b: 5}, {a: 3, b: 5}, {a: 2, b: 3}]}}");
  ASSERT_TRUE(c.ok()) << c.error().format();
  EXPECT_EQ(summarize(*c).bisectionLinks, 1);
}

TEST(Cluster, LinkTimingFromTheChipClock) {
  auto c = load("{topology: {kind: ring, chips: 4}, link: {latency_ns: 250, lanes: 4, gbps_per_lane: 30}}");
  ASSERT_TRUE(c.ok());
  const Link& l = c->links()[0];
  EXPECT_EQ(l.latencyCycles, 225);
  EXPECT_NEAR(l.bytesPerCycle, 4 * 30e9 / 8 * 0.975 / 900e6, 1e-9);
}

TEST(Cluster, RoutesAreMinimalAndUseExistingLinks) {
  auto c = load("{topology: {kind: mesh, dims: [3, 4, 2]}}");
  ASSERT_TRUE(c.ok());
  for (int src = 0; src < c->chipCount(); ++src) {
    const auto hops = c->hopsFrom(src);
    for (int dst = 0; dst < c->chipCount(); ++dst) {
      const auto route = c->route(src, dst);
      ASSERT_EQ(static_cast<int>(route.size()), hops[dst]);
      int at = src;
      for (const auto& hop : route) {
        ASSERT_EQ(hop.chip, at);
        const Link& link = c->links()[hop.link];
        ASSERT_TRUE(link.a == at || link.b == at);
        at = link.other(at);
      }
      EXPECT_EQ(at, dst);
    }
  }
}

TEST(Cluster, DragonflyRackWiring) {
  auto c = load("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 1}}");
  ASSERT_TRUE(c.ok()) << c.error().format();
  EXPECT_EQ(c->chipCount(), 72);
  // 9 nodes x 28 local links + 36 node pairs x 4 rack links.
  EXPECT_EQ(c->links().size(), 9u * 28 + 36 * 4);
  for (int chip = 0; chip < 72; ++chip) EXPECT_EQ(c->linksOf(chip).size(), 7u + 4);
}

TEST(ClusterErrors, LinkToMissingChip) {
  auto c = load("{topology: {kind: explicit, chips: 2, links: [{a: 0, b: 5}]}}");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().format().find("c.yaml:1:"), std::string::npos);
  EXPECT_NE(c.error().message.find("chips 0 to 1"), std::string::npos);
}

TEST(ClusterErrors, MorePortsThanTheChipHas) {
  auto c = load("{topology: {kind: fully-connected, chips: 18}}");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("more than its 16 C2C ports"), std::string::npos);
}

TEST(ClusterErrors, NotConnected) {
  auto c = load("{topology: {kind: explicit, chips: 4, links: [{a: 0, b: 1}, {a: 2, b: 3}]}}");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("not connected"), std::string::npos);
}

TEST(ClusterErrors, LinkShorterThanOneCycle) {
  auto c = load("{topology: {kind: ring, chips: 4}, link: {latency_ns: 0.5}}");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("shorter than one cycle"), std::string::npos);
}

TEST(ClusterErrors, WrongType) {
  auto c = load("{topology: {kind: ring, chips: four}}");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().format(), "c.yaml:1:32: 'chips' must be an integer");
}

}  // namespace
}  // namespace tsp::topology
