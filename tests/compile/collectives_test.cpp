// Tests of collectives: algorithm steps, schedules on routes, link exclusivity, shared programs, alpha-beta times.
#include "compile/schedule/collectives.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "support/cancel.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::schedule {
namespace {

topology::Cluster clusterOf(const std::string& yaml) {
  topology::YamlReader reader("test.yaml");
  auto cluster = topology::loadCluster(reader, YAML::Load(yaml));
  EXPECT_TRUE(cluster.ok());
  return *cluster;
}

std::vector<int> allChips(const topology::Cluster& c) {
  std::vector<int> g(c.chipCount());
  for (int i = 0; i < c.chipCount(); ++i) g[i] = i;
  return g;
}

CollectiveSchedule run(const topology::Cluster& c, CollectiveOp op, CollectiveAlgorithm a, std::int64_t bytes) {
  auto plan = planCollective(op, a, allChips(c), bytes, c);
  EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().format());
  auto s = scheduleCollective(*plan, c);
  EXPECT_TRUE(s.ok());
  return *s;
}

// The alpha-beta model of REFERENCES.md: alpha = link latency + the on-chip turnaround, beta = the
// link's exact cycles per byte (framing included).
double formula(const topology::Cluster& c, CollectiveOp op, std::int64_t bytes) {
  const auto& link = c.links()[0];
  const double beta = 1.0 / link.bytesPerCycle;
  const bool reduce = op != CollectiveOp::kAllGather;
  const double alpha = static_cast<double>(link.latencyCycles + ringTurnaroundCycles(c.chip(), reduce));
  return alphaBetaCycles(op, c.chipCount(), static_cast<double>(bytes), alpha, beta);
}

TEST(Collectives, RingAllReduceWithinTwoPercentOfAlphaBeta) {
  const auto ring = clusterOf("{topology: {kind: ring, chips: 16}}");
  for (std::int64_t bytes : {std::int64_t{1} << 20, std::int64_t{16} << 20, std::int64_t{64} << 20}) {
    const auto s = run(ring, CollectiveOp::kAllReduce, CollectiveAlgorithm::kRing, bytes);
    EXPECT_EQ(s.plan.steps.size(), 30u);
    const double want = formula(ring, CollectiveOp::kAllReduce, bytes);
    EXPECT_NEAR(static_cast<double>(s.cycles), want, 0.02 * want) << bytes << " bytes";
  }
}

// ASTRA-sim's analytical ring with its link figures: 50 GiB/s of payload per link direction (a
// payload rate, so no framing: 429.5 Gb/s on one lane) and 500 ns per hop. The exact link rate
// (5.36 cycles per vector, not 6) keeps the ring within 2 % of the formula at 1 and 64 MiB.
TEST(Collectives, RingAllReduceWithAstraSimLinkFigures) {
  const auto ring = clusterOf(
      "{chip: {c2c: {framing_overhead: 0}}, topology: {kind: ring, chips: 16},"
      " link: {lanes: 1, gbps_per_lane: 429.4967296, latency_ns: 500}}");
  EXPECT_NEAR(ring.links()[0].bytesPerCycle * ring.chip().clockMhz * 1e6, 50.0 * (1 << 30), 1.0);
  for (std::int64_t bytes : {std::int64_t{1} << 20, std::int64_t{64} << 20}) {
    const auto s = run(ring, CollectiveOp::kAllReduce, CollectiveAlgorithm::kRing, bytes);
    const double want = formula(ring, CollectiveOp::kAllReduce, bytes);
    EXPECT_NEAR(static_cast<double>(s.cycles), want, 0.02 * want) << bytes << " bytes";
  }
}

TEST(Collectives, AllGatherAndReduceScatterOnEveryTopology) {
  for (const char* yaml : {"{topology: {kind: ring, chips: 8}}", "{topology: {kind: torus, dims: [4, 4]}}",
                           "{topology: {kind: fully-connected, chips: 8}}"}) {
    const auto c = clusterOf(yaml);
    for (auto op : {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllReduce}) {
      const auto s = run(c, op, CollectiveAlgorithm::kRing, std::int64_t{4} << 20);
      const double want = formula(c, op, std::int64_t{4} << 20);
      EXPECT_NEAR(static_cast<double>(s.cycles), want, 0.02 * want) << yaml << " " << collectiveOpName(op);
    }
  }
}

// No directed link carries two vectors at once, on multi-hop routes too.
TEST(Collectives, NoLinkCarriesTwoVectorsAtOnce) {
  const auto c = clusterOf("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 1}}");
  for (auto a : {CollectiveAlgorithm::kHierarchical, CollectiveAlgorithm::kTree, CollectiveAlgorithm::kRing}) {
    const auto s = run(c, CollectiveOp::kAllReduce, a, 1 << 20);
    std::map<std::pair<int, int>, std::vector<std::pair<Cycle, Cycle>>> windows;
    for (const auto& t : s.transfers) {
      Cycle at = t.sendCycle + c.chip().c2cSendCycles;
      int chip = t.srcChip;
      for (int link : t.links) {
        const auto& l = c.links()[link];
        windows[{link, chip == l.a ? 0 : 1}].push_back({at, at + topology::serializationCycles(t.vectors, t.spacing)});
        at += l.latencyCycles + c.chip().c2cForwardCycles;
        chip = l.other(chip);
      }
      EXPECT_EQ(chip, t.dstChip);
    }
    for (auto& [key, list] : windows) {
      std::sort(list.begin(), list.end());
      for (size_t i = 1; i < list.size(); ++i) EXPECT_LE(list[i - 1].second, list[i].first) << "link " << key.first;
    }
  }
}

TEST(Collectives, IdenticalShardsShareOneProgram) {
  const auto ring = clusterOf("{topology: {kind: ring, chips: 16}}");
  const auto s = run(ring, CollectiveOp::kAllReduce, CollectiveAlgorithm::kRing, 1 << 20);
  std::set<std::uint64_t> hashes;
  for (const auto& p : s.cluster.programs) hashes.insert(p.contentHash());
  EXPECT_LE(hashes.size(), 3u);  // relocatable: ports, not chip ids
}

// The tree-or-ring choice weighs bytes at the links' exact rate, as the collectives are scheduled:
// beta is 1 / 16.25 cycles a byte on the default links (4 lanes x 30 Gb/s less 2.5 % framing), not
// ceil(19.69) / 320.
TEST(Collectives, TheTreeOrRingChoiceUsesTheLinksExactRate) {
  const auto c = clusterOf("{topology: {kind: ring, chips: 8}}");
  const auto [alpha, beta] = groupAlphaBeta(allChips(c), c);
  EXPECT_DOUBLE_EQ(beta, 1 / 16.25);
  const Cycle hops4 = c.routeLatency(c.route(0, 4));
  EXPECT_DOUBLE_EQ(alpha, static_cast<double>(hops4 + ringTurnaroundCycles(c.chip(), true)));
}

// Programs made of shared bodies are the plain programs written differently, on every chip; a
// ring's chips hold their instructions once, scheduled once (chip 0's ports are renamed on the others).
TEST(Collectives, SharedBodiesHoldThePlainProgramsOnce) {
  struct Case { std::string yaml; CollectiveOp op; CollectiveAlgorithm algorithm; std::int64_t bytes; };
  const std::vector<Case> cases = {
      {"{topology: {kind: ring, chips: 96}}", CollectiveOp::kAllReduce, CollectiveAlgorithm::kRing, 16 << 20},
      {"{topology: {kind: ring, chips: 32}}", CollectiveOp::kAllReduce, CollectiveAlgorithm::kTree, 64 << 10},
      {"{topology: {kind: torus, dims: [4, 4]}}", CollectiveOp::kAllReduce, CollectiveAlgorithm::kMultiRing, 8 << 20},
      {"{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 1}}", CollectiveOp::kAllReduce,
       CollectiveAlgorithm::kHierarchical, 8 << 20}};
  for (const auto& k : cases) {
    SCOPED_TRACE(k.yaml);
    const auto c = clusterOf(k.yaml);
    auto plan = planCollective(k.op, k.algorithm, allChips(c), k.bytes, c);
    ASSERT_TRUE(plan.ok());
    plan->origin = {"ar", "allreduce", 0, "", "", ""};
    const std::vector<Cycle> start(c.chipCount(), 0);
    LinkCalendar plainLinks(c.links().size()), sharedLinks(c.links().size());
    auto plain = scheduleCollective(*plan, c, start, plainLinks, true, false, false);
    auto shared = scheduleCollective(*plan, c, start, sharedLinks, true, false, true);
    ASSERT_TRUE(plain.ok() && shared.ok());
    EXPECT_EQ(shared->cycles, plain->cycles);
    std::set<const isa::InstructionBody*> bodies;
    std::int64_t held = 0, placed = 0;
    for (int chip = 0; chip < c.chipCount(); ++chip) {
      isa::Program expected = plain->cluster.programs[chip];
      if (!expected.instructions.empty()) isa::attributeAll(expected, plan->origin);
      const auto& program = shared->cluster.programs[chip];
      EXPECT_TRUE(program.instructions.empty());
      EXPECT_EQ(isa::expanded(program), expected) << "chip " << chip;
      for (const auto& piece : program.pieces)
        if (bodies.insert(piece.body.get()).second) held += static_cast<std::int64_t>(piece.body->instructions.size());
      placed += program.instructionCount();
    }
    EXPECT_EQ(plain->chainsScheduled, c.chipCount());
    if (k.algorithm == CollectiveAlgorithm::kRing) {
      EXPECT_EQ(shared->chainsScheduled, 1);                    // chip 0's chains stand for all
      EXPECT_GT(shared->cluster.programs[0].pieces.size(), 1u);  // cut as the schedule went
      EXPECT_LT(held * 20, placed);                             // 96 chips, at most a few distinct
    } else {
      EXPECT_EQ(shared->chainsScheduled, c.chipCount());
    }
  }
}

// A cancelled schedule stops and says so, on the symmetric path (a ring) and burst by burst (a
// rack's hierarchical levels); with the poll saying no, both finish.
TEST(Collectives, SchedulingStopsWhenCancelled) {
  struct Case { std::string yaml; CollectiveAlgorithm algorithm; };
  for (const auto& k : {Case{"{topology: {kind: ring, chips: 16}}", CollectiveAlgorithm::kRing},
                        Case{"{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 1}}",
                             CollectiveAlgorithm::kHierarchical}}) {
    SCOPED_TRACE(k.yaml);
    const auto c = clusterOf(k.yaml);
    auto plan = planCollective(CollectiveOp::kAllReduce, k.algorithm, allChips(c), 1 << 20, c);
    ASSERT_TRUE(plan.ok());
    for (bool shared : {false, true}) {
      int polls = 0;
      support::setCancelPoll([&polls] { return ++polls > 0; });
      LinkCalendar links(c.links().size());
      auto stopped = scheduleCollective(*plan, c, std::vector<Cycle>(c.chipCount(), 0), links, true, false, shared);
      ASSERT_FALSE(stopped.ok());
      EXPECT_EQ(stopped.error().code, ExitCode::kInterrupted);
      EXPECT_GE(polls, 1);
      support::setCancelPoll([] { return false; });
      LinkCalendar again(c.links().size());
      EXPECT_TRUE(scheduleCollective(*plan, c, std::vector<Cycle>(c.chipCount(), 0), again, true, false, shared).ok());
      support::setCancelPoll(nullptr);
    }
  }
}

TEST(Collectives, HierarchicalTopLevelIsATreeForSmallSharesAndRoundsPerLevel) {
  const auto system = clusterOf("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 145}}");
  const auto all = allChips(system);
  // 1 MiB: 3,277 vectors, not 10,440 (one per chip); 46 per sub-piece (one per chip of a rack). The
  // node level sends each chip the 9 sub-pieces it holds (its own, two per rack link), the rack
  // level every sub-piece to its owner over the links joining the nodes; 46 over 145 racks is under
  // one vector per ring step, so the top level is a tree: 1 + 1 + 2 x 8 + 1 + 1 steps.
  auto small = planCollective(CollectiveOp::kAllReduce, CollectiveAlgorithm::kHierarchical, all, 1 << 20, system);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->vectorsPerChip, 3277);
  ASSERT_EQ(small->steps.size(), 20u);
  EXPECT_EQ(small->steps[0].size(), 10440u * 7u);  // every chip to the 7 others of its node
  EXPECT_EQ(small->steps[0][0].vectors, 9 * 46);
  EXPECT_EQ(small->steps[1].size(), 10440u * 8u);  // every chip's sub-piece from each of the 8 other nodes
  EXPECT_EQ(small->steps[1][0].vectors, 46);
  EXPECT_EQ(small->steps[2].size(), 72u * 72u);  // the tree's first step: 72 messages in each of 72 groups
  EXPECT_TRUE(small->steps[2][0].reduce);
  EXPECT_FALSE(small->steps[10][0].reduce);  // the tree's first broadcast step
  // 64 MiB: 2,913 vectors per chip at the top level, about 20 per ring step: a ring of 145 both ways
  // at once, 2 x 72 steps, between node and rack levels run in 4 parts that overlap (5 steps each way:
  // part i + 1's node level with part i's rack level).
  auto large = planCollective(CollectiveOp::kAllReduce, CollectiveAlgorithm::kHierarchical, all, 64 << 20, system);
  ASSERT_TRUE(large.ok());
  ASSERT_EQ(large->steps.size(), 5u + 144u + 5u);
  EXPECT_EQ(large->steps[0].size(), 10440u * 7u);  // the first part's node level
  for (size_t s = 1; s < 4; ++s) EXPECT_EQ(large->steps[s].size(), 10440u * (8u + 7u)) << "step " << s;
  EXPECT_EQ(large->steps[4].size(), 10440u * 8u);  // the last part's rack level
  EXPECT_EQ(large->steps[0][0].vectors, 9 * ceilDiv(2913, 4));
}

// Above the racks each rack position rings over the racks at its own stride, both ways at once,
// every step over one of the links joining the two racks and no directed link in two rings: on the
// 145-rack system the positions whose own system links reach the racks at a stride coprime to 145
// ring one hop a step, each way. Both ways, a chunk gathers its sum from 72 racks on each side: 72
// steps, where the one-way ring takes 144.
TEST(Collectives, HierarchicalTopLevelSpreadsOverTheLinksJoiningRacks) {
  const auto system = clusterOf("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 145}}");
  auto plan = planCollective(CollectiveOp::kAllReduce, CollectiveAlgorithm::kHierarchical, allChips(system), 64 << 20, system);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps.size(), 5u + 144u + 5u);
  const auto& top = plan->steps[5];
  ASSERT_EQ(top.size(), 2u * 10440u);
  std::map<int, int> sends;  // chip -> messages it sends in the step
  for (const auto& m : top) ++sends[m.src];
  for (const auto& [chip, count] : sends) EXPECT_EQ(count, 2) << "chip " << chip;
  std::map<std::pair<int, int>, int> rings;  // directed link -> messages of the step crossing it
  int oneHop = 0;
  for (const auto& m : top) {
    ASSERT_GE(m.link, 0);
    EXPECT_NE(m.src / 72, m.dst / 72);
    EXPECT_EQ(m.src % 72, m.dst % 72);
    const auto route = messageRoute(system, m);
    for (const auto& hop : route)
      if (hop.link == m.link) ++rings[{hop.link, hop.chip}];
    oneHop += route.size() == 1;
  }
  for (const auto& [key, count] : rings) EXPECT_EQ(count, 1) << "link " << key.first;
  // Position q's own links join racks q + 1 apart (docs/config.md's circulant); 145 = 5 x 29 leaves
  // the 56 positions with q + 1 prime to both.
  EXPECT_EQ(oneHop, 2 * 56 * 145);
  for (size_t i = 0; i < top.size(); ++i) EXPECT_EQ(plan->steps[6][i].link, top[i].link);  // the same links every step
}

// The rack level of a GroqRack crosses every one of the 4 links joining each pair of nodes, each
// carrying the same share, and routes at most 2 hops (the link, then a node link to the owner).
TEST(Collectives, HierarchicalRackLevelSpreadsOverEveryJoiningLink) {
  const auto rack = clusterOf("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 1}}");
  auto plan = planCollective(CollectiveOp::kReduceScatter, CollectiveAlgorithm::kHierarchical, allChips(rack), 64 << 20, rack);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps.size(), 2u);
  std::map<int, std::int64_t> perLink;  // rack link -> vectors, both directions
  std::map<std::pair<int, int>, std::int64_t> forwarded;  // node link direction -> vectors forwarded on it
  for (const auto& m : plan->steps[1]) {
    ASSERT_GE(m.link, 0);
    const auto route = messageRoute(rack, m);
    ASSERT_LE(route.size(), 2u);
    EXPECT_EQ(route.front().link, m.link);
    perLink[m.link] += m.vectors;
    if (route.size() == 2) forwarded[{route[1].chip, route[1].link}] += m.vectors;
  }
  std::int64_t rackLinks = 0;
  for (const auto& l : rack.links()) rackLinks += l.tier == topology::LinkTier::kRack;
  EXPECT_EQ(static_cast<std::int64_t>(perLink.size()), rackLinks);
  const std::int64_t piece = ceilDiv(plan->vectorsPerChip, 72);
  for (const auto& [link, vectors] : perLink) EXPECT_EQ(vectors, 2 * 2 * piece) << "link " << link;  // 2 each way
  for (const auto& [key, vectors] : forwarded) EXPECT_EQ(vectors, piece) << "node link " << key.second;
  // Every chip holds 9 sub-pieces after the node level: its own and two for each of its 4 rack links.
  for (const auto& m : plan->steps[0]) EXPECT_EQ(m.vectors, 9 * piece);
}

// The all-reduce overlaps its levels: the second half of every sub-piece runs its node level while
// the first crosses the rack links, so it takes less than the 2 x (9 + 2) sub-pieces' time at a link's
// rate of the levels one after the other, and no less than the 2 x 9 + 2 of perfect overlap.
TEST(Collectives, HierarchicalAllReduceOverlapsNodeAndRackLevels) {
  const auto rack = clusterOf("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 1}}");
  auto plan = planCollective(CollectiveOp::kAllReduce, CollectiveAlgorithm::kHierarchical, allChips(rack), 64 << 20, rack);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps.size(), 5u);
  const auto s = scheduleCollective(*plan, rack);
  ASSERT_TRUE(s.ok());
  const double piece = static_cast<double>(ceilDiv(plan->vectorsPerChip, 72));
  const double perVector = rack.links()[0].vectorCycles(rack.chip().vectorBytes);
  EXPECT_LT(static_cast<double>(s->cycles), 0.98 * 2 * (9 + 2) * piece * perVector);
  EXPECT_GT(static_cast<double>(s->cycles), (2 * 9 + 2) * piece * perVector);
}

TEST(Collectives, AlgorithmChoiceFollowsSizeAndTopology) {
  const auto fc = clusterOf("{topology: {kind: fully-connected, chips: 8}}");
  const auto ring = clusterOf("{topology: {kind: ring, chips: 8}}");
  const auto torus = clusterOf("{topology: {kind: torus, dims: [4, 4]}}");
  const auto df = clusterOf("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 1}}");
  const auto allReduce = CollectiveOp::kAllReduce;
  // Latency-bound: every chip sends its whole data to every other in one step.
  EXPECT_EQ(chooseAlgorithm(allReduce, allChips(fc), 1024, fc), CollectiveAlgorithm::kOneShot);
  // Bandwidth-bound: n/p chunks over all 7 links (two-shot), every dimension both ways.
  EXPECT_EQ(chooseAlgorithm(allReduce, allChips(fc), 1 << 20, fc), CollectiveAlgorithm::kDirect);
  EXPECT_EQ(chooseAlgorithm(CollectiveOp::kAllToAll, allChips(fc), 1 << 20, fc), CollectiveAlgorithm::kDirect);
  EXPECT_EQ(chooseAlgorithm(allReduce, allChips(torus), 1 << 20, torus), CollectiveAlgorithm::kMultiRing);
  // A whole ring is a torus of one dimension: a ring each way, half the data each.
  EXPECT_EQ(chooseAlgorithm(allReduce, allChips(ring), 1 << 20, ring), CollectiveAlgorithm::kMultiRing);
  EXPECT_EQ(chooseAlgorithm(allReduce, allChips(df), 1 << 20, df), CollectiveAlgorithm::kHierarchical);
  // 4 KiB on a rack: the hierarchical levels' 4 steps (estimate) beat the tree's 2 log2(72).
  EXPECT_EQ(chooseAlgorithm(allReduce, allChips(df), 4096, df), CollectiveAlgorithm::kHierarchical);
  // A sub-group of a torus is no whole grid: no multi-ring.
  EXPECT_NE(chooseAlgorithm(allReduce, {0, 1, 2, 3}, 1 << 20, torus), CollectiveAlgorithm::kMultiRing);
  // A whole ring in another order (a placement's locality order): the all-reduce still runs the
  // multi-ring, in chip order; a reduce-scatter's pieces follow the group's order, so it does not.
  const std::vector<int> shuffled = {0, 3, 1, 2, 7, 5, 4, 6};
  EXPECT_EQ(chooseAlgorithm(allReduce, shuffled, 1 << 20, ring), CollectiveAlgorithm::kMultiRing);
  const auto anyOrder = planCollective(allReduce, CollectiveAlgorithm::kMultiRing, shuffled, 1 << 20, ring);
  ASSERT_TRUE(static_cast<bool>(anyOrder));
  EXPECT_EQ(anyOrder->group, allChips(ring));
  EXPECT_FALSE(planCollective(allReduce, CollectiveAlgorithm::kMultiRing, shuffled, 1 << 20, ring, true));
  EXPECT_FALSE(
      planCollective(CollectiveOp::kReduceScatter, CollectiveAlgorithm::kMultiRing, shuffled, 1 << 20, ring));
  // Halving/doubling: log2(p) exchanges each way, halves of the data.
  const auto hd = run(fc, allReduce, CollectiveAlgorithm::kHalvingDoubling, 8 * 320 * 8);
  ASSERT_EQ(hd.plan.steps.size(), 6u);
  EXPECT_EQ(hd.plan.steps[0][0].vectors, 32);
  EXPECT_EQ(hd.plan.steps[2][0].vectors, 8);
}

// A 4x4 mesh's corner chips have two links, so no all-reduce on it passes two links' payload rate
// (every chip sends 2(p-1)/p of the data). Its multi-ring is the ring through all chips over single
// links, both ways at once with half the data each: within 2 % of the alpha-beta ring formula on
// half the bytes, and at least 95 % of the corners' two links. A 3x3 mesh has no such ring (an odd
// number of chips on a bipartite grid) and keeps the per-dimension rings.
TEST(Collectives, MeshMultiRingRunsItsEmbeddedRingBothWays) {
  const auto mesh = clusterOf("{topology: {kind: mesh, dims: [4, 4]}}");
  const std::int64_t bytes = std::int64_t{64} << 20;
  EXPECT_EQ(chooseAlgorithm(CollectiveOp::kAllReduce, allChips(mesh), bytes, mesh), CollectiveAlgorithm::kMultiRing);
  const double twoLinks = 2 * mesh.links()[0].bytesPerCycle * mesh.chip().clockMhz * 1e6;
  for (auto op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter}) {
    const auto s = run(mesh, op, CollectiveAlgorithm::kMultiRing, bytes);
    std::set<std::pair<int, int>> directed;
    for (const auto& step : s.plan.steps)
      for (const auto& m : step) {
        EXPECT_EQ(mesh.hops(m.src, m.dst), 1) << m.src << " -> " << m.dst;
        directed.insert({m.src, m.dst});
      }
    EXPECT_EQ(directed.size(), 32u);  // the ring's 16 links, both ways
    const double want = formula(mesh, op, bytes / 2);
    EXPECT_NEAR(static_cast<double>(s.cycles), want, 0.02 * want) << collectiveOpName(op);
    const double busbw = busBandwidthFactor(op, mesh.chipCount()) * static_cast<double>(bytes) /
                         (static_cast<double>(s.cycles) / (mesh.chip().clockMhz * 1e6));
    EXPECT_GT(busbw, 0.95 * twoLinks) << collectiveOpName(op);
  }
  // With the rows odd and the columns even the ring goes along the first row; in three dimensions
  // along the first even one, snaking over the others. Chosen on its own (every step one link).
  for (const char* yaml : {"{topology: {kind: mesh, dims: [3, 4]}}", "{topology: {kind: mesh, dims: [4, 4, 4]}}",
                           "{topology: {kind: mesh, dims: [3, 5, 2]}}"}) {
    const auto other = clusterOf(yaml);
    EXPECT_EQ(chooseAlgorithm(CollectiveOp::kAllReduce, allChips(other), bytes, other), CollectiveAlgorithm::kMultiRing)
        << yaml;
    const auto w = run(other, CollectiveOp::kAllReduce, CollectiveAlgorithm::kMultiRing, std::int64_t{1} << 20);
    std::set<std::pair<int, int>> directed;
    for (const auto& step : w.plan.steps)
      for (const auto& m : step) {
        EXPECT_EQ(other.hops(m.src, m.dst), 1) << yaml << " " << m.src << " -> " << m.dst;
        directed.insert({m.src, m.dst});
      }
    EXPECT_EQ(directed.size(), 2u * static_cast<size_t>(other.chipCount())) << yaml;
  }
  const auto odd = clusterOf("{topology: {kind: mesh, dims: [3, 3]}}");
  const auto s = run(odd, CollectiveOp::kAllReduce, CollectiveAlgorithm::kMultiRing, std::int64_t{1} << 20);
  int longest = 0;
  for (const auto& step : s.plan.steps)
    for (const auto& m : step) longest = std::max(longest, odd.hops(m.src, m.dst));
  EXPECT_EQ(longest, 2);  // a line's last ring step goes back along it
}

// A whole ring is a torus of one dimension: its multi-ring is a ring each way with half the data,
// within 2 % of the ring formula on half the bytes, at busbw above 95 % of a chip's two links.
TEST(Collectives, WholeRingMultiRingRunsBothDirections) {
  const auto ring = clusterOf("{topology: {kind: ring, chips: 16}}");
  const std::int64_t bytes = std::int64_t{64} << 20;
  const double twoLinks = 2 * ring.links()[0].bytesPerCycle * ring.chip().clockMhz * 1e6;
  for (auto op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter}) {
    EXPECT_EQ(chooseAlgorithm(op, allChips(ring), bytes, ring), CollectiveAlgorithm::kMultiRing);
    const auto s = run(ring, op, CollectiveAlgorithm::kMultiRing, bytes);
    std::set<std::pair<int, int>> directed;
    for (const auto& step : s.plan.steps)
      for (const auto& m : step) directed.insert({m.src, m.dst});
    EXPECT_EQ(directed.size(), 32u);
    const double want = formula(ring, op, bytes / 2);
    EXPECT_NEAR(static_cast<double>(s.cycles), want, 0.02 * want) << collectiveOpName(op);
    const double busbw = busBandwidthFactor(op, ring.chipCount()) * static_cast<double>(bytes) /
                         (static_cast<double>(s.cycles) / (ring.chip().clockMhz * 1e6));
    EXPECT_GT(busbw, 0.95 * twoLinks) << collectiveOpName(op);
  }
}

// The chosen algorithm's schedule is within 10 % of the fastest schedule of every algorithm the
// group allows, from latency-bound to bandwidth-bound sizes; and on direct links the estimate the
// choice rests on is within 10 % of the schedule from 1 MiB (below, the stream distances of the
// chains weigh; a pipelined broadcast's steps overlap, which the per-step estimate does not see).
TEST(Collectives, ChosenAlgorithmIsTheFastestScheduled) {
  for (const char* yaml : {"{topology: {kind: ring, chips: 8}}", "{topology: {kind: torus, dims: [4, 4]}}",
                           "{topology: {kind: mesh, dims: [4, 4]}}",
                           "{topology: {kind: fully-connected, chips: 8}}"}) {
    const auto c = clusterOf(yaml);
    for (std::int64_t bytes : {std::int64_t{1024}, std::int64_t{64} << 10, std::int64_t{1} << 20, std::int64_t{16} << 20})
      for (auto op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter,
                      CollectiveOp::kAllToAll, CollectiveOp::kBroadcast}) {
        const auto chosen = chooseAlgorithm(op, allChips(c), bytes, c);
        Cycle best = -1, chosenCycles = -1;
        for (auto a : kCollectiveAlgorithms) {
          auto plan = planCollective(op, a, allChips(c), bytes, c);
          if (!plan) continue;
          auto s = scheduleCollective(*plan, c);
          ASSERT_TRUE(s.ok());
          if (a == chosen) chosenCycles = s->cycles;
          bool oneHop = true;
          for (const auto& step : plan->steps)
            for (const auto& m : step) oneHop = oneHop && c.hops(m.src, m.dst) == 1;
          if (!oneHop && (a == CollectiveAlgorithm::kDirect || a == CollectiveAlgorithm::kOneShot ||
                          a == CollectiveAlgorithm::kMultiRing))
            continue;  // not offered to the choice
          if (best < 0 || s->cycles < best) best = s->cycles;
          if (oneHop && bytes >= (1 << 20) && op != CollectiveOp::kBroadcast) {
            EXPECT_NEAR(estimateCollectiveCycles(*plan, c), static_cast<double>(s->cycles), 0.1 * static_cast<double>(s->cycles))
                << yaml << " " << collectiveOpName(op) << " " << collectiveAlgorithmName(a) << " " << bytes;
          }
        }
        ASSERT_GT(chosenCycles, 0);
        EXPECT_LE(static_cast<double>(chosenCycles), 1.1 * static_cast<double>(best))
            << yaml << " " << collectiveOpName(op) << " " << bytes << " chose " << collectiveAlgorithmName(chosen);
      }
  }
}

// A group on two dragonfly nodes (chips 0, 1, 4, 5 of node 0 and 8, 9, 12, 13 of node 1, whose
// nodes are joined by links 0-8, 1-9, 2-10, 3-11): in chip order the ring crosses over routes of
// two hops; its ring order crosses on the direct links, every edge one hop.
TEST(Collectives, RingOrderCrossesNodesOnDirectLinks) {
  const auto c = clusterOf("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 1}}");
  const std::vector<int> group = {0, 1, 4, 5, 8, 9, 12, 13};
  auto hops = [&](const std::vector<int>& ring) {
    std::vector<size_t> h;
    for (size_t i = 0; i < ring.size(); ++i) h.push_back(c.route(ring[i], ring[(i + 1) % ring.size()]).size());
    return h;
  };
  const auto sorted = hops(group);
  EXPECT_EQ(*std::max_element(sorted.begin(), sorted.end()), 2u);
  const auto order = ringOrder(c, group);
  EXPECT_EQ(std::set<int>(order.begin(), order.end()), std::set<int>(group.begin(), group.end()));
  for (size_t h : hops(order)) EXPECT_EQ(h, 1u);
  // A whole ring keeps its chip order.
  const auto ring = clusterOf("{topology: {kind: ring, chips: 8}}");
  EXPECT_EQ(ringOrder(ring, allChips(ring)), allChips(ring));
}

TEST(Collectives, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(busBandwidthFactor(CollectiveOp::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(CollectiveOp::kAllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(CollectiveOp::kBroadcast, 8), 1.0);
}

TEST(Collectives, Errors) {
  const auto ring = clusterOf("{topology: {kind: ring, chips: 6}}");
  auto hd = planCollective(CollectiveOp::kAllReduce, CollectiveAlgorithm::kHalvingDoubling, allChips(ring), 1024, ring);
  ASSERT_FALSE(hd.ok());
  EXPECT_EQ(hd.error().format(), "halving-doubling needs a power-of-two group, not 6");
  auto tree = planCollective(CollectiveOp::kAllGather, CollectiveAlgorithm::kTree, allChips(ring), 1024, ring);
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.error().format(), "the tree algorithm runs all-reduce and broadcast, not allgather");
  auto hier = planCollective(CollectiveOp::kAllReduce, CollectiveAlgorithm::kHierarchical, allChips(ring), 1024, ring);
  ASSERT_FALSE(hier.ok());
  EXPECT_EQ(hier.error().format(), "the hierarchical algorithm needs whole dragonfly nodes");
  auto chip = planCollective(CollectiveOp::kAllReduce, CollectiveAlgorithm::kRing, {0, 9}, 1024, ring);
  ASSERT_FALSE(chip.ok());
  EXPECT_EQ(chip.error().format(), "collective chip 9 is not in the cluster of 6 chips");
}

// The validation table of docs/validation.md: printed, so the document's figures can be regenerated.
// Each schedule against its algorithm's alpha-beta estimate with contention (estimateCollectiveCycles).
TEST(Collectives, ValidationTable) {
  for (const char* yaml : {"{topology: {kind: ring, chips: 16}}", "{topology: {kind: torus, dims: [4, 4]}}",
                           "{topology: {kind: mesh, dims: [4, 4]}}", "{topology: {kind: fully-connected, chips: 8}}",
                           "{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 1}}"}) {
    const auto c = clusterOf(yaml);
    for (auto op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter}) {
      const std::int64_t bytes = std::int64_t{64} << 20;
      const auto s = run(c, op, CollectiveAlgorithm::kAuto, bytes);
      const double want = estimateCollectiveCycles(s.plan, c);
      const double busbw = busBandwidthFactor(op, c.chipCount()) * static_cast<double>(bytes) /
                           (static_cast<double>(s.cycles) / (c.chip().clockMhz * 1e6)) / 1e9;
      std::printf("| %s | %s | %s | %d | %lld | %.0f | %+.2f%% | %.1f |\n", c.description().kind.c_str(),
                  collectiveOpName(op), collectiveAlgorithmName(s.plan.algorithm), c.chipCount(),
                  static_cast<long long>(s.cycles), want, 100.0 * (static_cast<double>(s.cycles) - want) / want, busbw);
      EXPECT_GT(s.cycles, 0);
    }
  }
}

// A whole system's top level rings both ways where the way back crosses links the one-way rings
// leave idle (on 7 racks every rack position's own links, both directions): 3 steps each way, not
// 6. On 40 of the 145 racks the rings share links, and running both ways would double that sharing:
// the top level stays one way (39 steps each way).
TEST(Collectives, HierarchicalTopLevelRunsBothWaysOnLinksLeftIdle) {
  const auto seven = clusterOf("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 7}}");
  auto whole = planCollective(CollectiveOp::kAllReduce, CollectiveAlgorithm::kHierarchical, allChips(seven), 4 << 20, seven);
  ASSERT_TRUE(whole.ok());
  ASSERT_EQ(whole->steps.size(), 3u + 6u + 3u);
  for (size_t s = 3; s < 9; ++s) EXPECT_EQ(whole->steps[s].size(), 2u * 504u) << "step " << s;
  // At 16 MiB (729-vector sub-pieces) the node and rack levels go in 4 parts, 5 steps each way
  // (sim.agreement_collectives simulates it).
  auto larger = planCollective(CollectiveOp::kAllReduce, CollectiveAlgorithm::kHierarchical, allChips(seven), 16 << 20, seven);
  ASSERT_TRUE(larger.ok());
  EXPECT_EQ(larger->steps.size(), 5u + 6u + 5u);
  const auto system = clusterOf("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 145}}");
  std::vector<int> forty(2880);
  for (int c = 0; c < 2880; ++c) forty[c] = c;
  auto part = planCollective(CollectiveOp::kAllReduce, CollectiveAlgorithm::kHierarchical, forty, 64 << 20, system);
  ASSERT_TRUE(part.ok());
  ASSERT_EQ(part->steps.size(), 5u + 78u + 5u);
  EXPECT_EQ(part->steps[5].size(), 2880u);
}

}  // namespace
}  // namespace tsp::schedule
