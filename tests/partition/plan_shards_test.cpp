// Tests of a plan's per-chip graphs and their cluster schedule: Megatron annotations computed from
// the plan match the unsharded graph, and the schedule of the shards books no link twice.
#include "partition/plan_shards.h"

#include <cmath>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "compile/frontend/builtin_models.h"
#include "compile/ir/interpreter.h"
#include "partition/pipeline_schedule.h"
#include "partition/placement.h"
#include "partition/sharding_spmd.h"
#include "test_values.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::partition {
namespace {

using ir::DType;
using ir::OpKind;
using Shape = std::vector<std::int64_t>;

using testing::values;

// A builtin:mlp-shaped chain with weight values: layer i is MatMul + bias Add (+ Relu but the last).
ir::Graph mlp(int layers, std::int64_t batch, std::int64_t width, DType dtype) {
  ir::Graph g;
  ir::TensorId x = g.addInput("x", {batch, width}, dtype);
  for (int i = 0; i < layers; ++i) {
    const auto w = g.addWeight(fmt::format("w{}", i), {width, width}, dtype, values(width * width, 2 * i + 1));
    const auto b = g.addWeight(fmt::format("b{}", i), {width}, dtype, values(width, 2 * i + 2));
    x = *g.addOp(OpKind::kAdd, fmt::format("bias{}", i), {*g.addOp(OpKind::kMatMul, fmt::format("fc{}", i), {x, w}, i), b}, i);
    if (i + 1 < layers) x = *g.addOp(OpKind::kRelu, fmt::format("relu{}", i), {x}, i);
  }
  g.markOutput(x);
  return g;
}

Plan plan(int dp, int tp, int pp, int m, std::vector<int> placement) {
  Plan p;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.microbatches = m;
  p.split = tp > 1 ? TensorSplit::kMegatron : TensorSplit::kNone;
  for (int s = 0; s < pp; ++s) p.stageFirstLayer.push_back(s * 4 / pp);
  p.stageChip.assign(pp, 0);
  p.placement = std::move(placement);
  return p;
}

// TP 2, PP 2, 2 microbatches on chips 0, 1 (stage 0) and 5, 4 (stage 1) of a 6-chip ring.
Plan tp2pp2OnRing6() { return plan(1, 2, 2, 2, {0, 1, 5, 4}); }

topology::Cluster ring(int chips) {
  topology::YamlReader reader("test.yaml");
  auto cluster = topology::loadCluster(reader, YAML::Load("{topology: {kind: ring, chips: " + std::to_string(chips) + "}}"));
  EXPECT_TRUE(cluster.ok());
  return *cluster;
}

// Megatron from the plan: alternate column and row splits give one all-reduce per pair of layers,
// and the TP group's graphs of one batch block compute what the unsharded block does.
TEST(PlanShards, MegatronAnnotationsMatchTheUnshardedGraph) {
  const ir::Graph g = mlp(4, 8, 8, DType::kF32);
  const Plan p = plan(2, 2, 1, 2, {0, 1, 2, 3});
  auto block = batchBlockGraph(g, p.dp * p.microbatches);
  ASSERT_TRUE(block.ok()) << block.error().format();
  EXPECT_EQ(block->tensor(block->inputs().front()).shape, (Shape{2, 8}));  // 8 rows in 4 blocks
  const Mesh mesh = tensorMesh(p.split, p.tp);
  EXPECT_EQ(mesh.axisSizes, (std::vector<int>{2}));
  auto annotations = planAnnotations(*block, p.split, mesh);
  ASSERT_TRUE(annotations.ok()) << annotations.error().format();
  auto propagated = propagateShardings(*block, mesh, *annotations);
  ASSERT_TRUE(propagated.ok());
  EXPECT_EQ(propagated->count(ReshardKind::kAllReduce), 2);
  EXPECT_EQ(propagated->tensors[*block->findTensor("w0")].text(mesh), "[-,tp]");
  EXPECT_EQ(propagated->tensors[*block->findTensor("w1")].text(mesh), "[tp,-]");
  EXPECT_EQ(propagated->tensors[*block->findTensor("w2")].text(mesh), "[-,tp]");
  auto devices = shardGraph(*block, *propagated);
  ASSERT_TRUE(devices.ok());
  ir::Value x{DType::kF32, {2, 8}, *values(16, 99)};
  auto want = ir::interpret(*block, {x});
  auto got = interpretSharded(*devices, {x});
  ASSERT_TRUE(want.ok() && got.ok());
  ASSERT_EQ((*want)[0].data.size(), (*got)[0].data.size());
  for (size_t e = 0; e < (*want)[0].data.size(); ++e)
    EXPECT_NEAR((*want)[0].data[e], (*got)[0].data[e], 1e-4 + 1e-4 * std::abs((*want)[0].data[e]));
}

TEST(PlanShards, BatchThatDoesNotDivideNamesTheInput) {
  auto block = batchBlockGraph(mlp(2, 6, 8, DType::kF32), 4);
  ASSERT_FALSE(block.ok());
  EXPECT_EQ(block.error().message, "the batch dim of input 'x' (6) does not divide into dp x microbatches = 4 blocks");
}

// Every op of a device runs on the chip of its stage, replica and TP rank; waves go microbatch by microbatch.
TEST(PlanShards, OpsGoToTheirRanksChips) {
  const ir::Graph g = mlp(4, 16, 640, DType::kF16);
  const Plan p = plan(1, 2, 2, 2, {5, 4, 6, 7});
  auto work = shardPlan(g, p);
  ASSERT_TRUE(work.ok()) << work.error().format();
  ASSERT_EQ(work->graphs.size(), 4u);  // 2 microbatches x 2 TP ranks
  EXPECT_EQ(work->waves, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  for (size_t d = 0; d < work->graphs.size(); ++d)
    for (size_t j = 0; j < work->graphs[d].ops().size(); ++j) {
      const int stage = work->graphs[d].op(j).layer < 2 ? 0 : 1;
      EXPECT_EQ(work->opChip[d][j], p.placement[stage * 2 + d % 2]) << "device " << d << " op " << j;
    }
}

// The schedule of the shards: TP ranks share compiled segments, no directed link carries two bursts
// at once (chip 1 sends to chip 4 over three hops, chips 0, 5 forwarding), only the plan's chips
// and the transit chips have programs.
TEST(PlanShards, ClusterScheduleSharesShardsAndBooksLinksOnce) {
  const ir::Graph g = mlp(4, 16, 640, DType::kF16);
  const auto cluster = ring(6);
  auto work = shardPlan(g, tp2pp2OnRing6());
  ASSERT_TRUE(work.ok());
  auto schedule = schedule::scheduleCluster(*work, cluster);
  ASSERT_TRUE(schedule.ok()) << schedule.error().format();
  EXPECT_GT(schedule->sharedShards, 0);
  EXPECT_GT(schedule->compiledShards, 0);
  EXPECT_EQ(schedule->collectives, 4);  // two all-reduces per microbatch
  for (int c = 0; c < 6; ++c) EXPECT_EQ(schedule->programs[c].instructions.empty(), c == 2 || c == 3) << "chip " << c;
  // A chip's report adds up its segments' reports, the diagnostic window bound and bank delays included.
  for (int c : {0, 1, 4, 5}) {
    const auto& report = schedule->reports[c];
    EXPECT_GT(report.busiestResource, 0) << "chip " << c;
    EXPECT_GE(report.resourceWindowBound, report.busiestResource) << "chip " << c;
    EXPECT_LE(report.bankDelayedMemAccesses, report.delayedMemAccesses) << "chip " << c;
    EXPECT_GT(report.streamRegisters[0] + report.streamRegisters[1], 0) << "chip " << c;
  }
  // Directed link windows [send + send cycles, + vectors x interval) never overlap.
  std::map<std::pair<int, int>, std::vector<std::pair<Cycle, Cycle>>> windows;
  for (const auto& t : schedule->transfers) {
    // Hop h of a route starts after the send and the earlier hops' latency and forwarding.
    const std::vector<int> links = t.route.empty() ? std::vector<int>{t.link} : t.route;
    Cycle start = t.sendCycle + cluster.chip().c2cSendCycles;
    int at = t.srcChip;
    for (int link : links) {
      windows[{link, at}].push_back({start, start + Cycle{t.vectors} * t.interval});
      start += cluster.links()[link].latencyCycles + cluster.chip().c2cForwardCycles;
      at = cluster.links()[link].other(at);
    }
  }
  EXPECT_FALSE(windows.empty());
  for (auto& [key, list] : windows) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) EXPECT_LE(list[i - 1].second, list[i].first) << "link " << key.first;
  }
  // Stage-to-stage tensors arrive after they are sent, over the route's latency.
  for (const auto& t : schedule->transfers) EXPECT_GE(t.arriveCycle, t.sendCycle + cluster.links()[t.link].latencyCycles);
}

// A batch compiler that compiles a wave's new segments in another order (as ranks would, each
// its share) and passes every shard through its bytes gives the same schedule as compiling here.
TEST(PlanShards, SegmentsCompiledInBatchesGiveTheSameSchedule) {
  const ir::Graph g = mlp(4, 16, 640, DType::kF16);
  const auto cluster = ring(6);
  auto work = shardPlan(g, tp2pp2OnRing6());
  ASSERT_TRUE(work.ok());
  auto here = schedule::scheduleCluster(*work, cluster);
  ASSERT_TRUE(here.ok()) << here.error().format();
  size_t batches = 0, largest = 0;
  const schedule::ShardBatchCompiler reversed =
      [&](const topology::ChipSpec& chip,
          const std::vector<schedule::ShardJob>& jobs) -> Expected<std::vector<schedule::CompiledShard>> {
    ++batches;
    largest = std::max(largest, jobs.size());
    std::vector<schedule::CompiledShard> shards(jobs.size());
    for (size_t i = jobs.size(); i-- > 0;) {
      auto shard = schedule::compileShard(chip, *jobs[i].graph, jobs[i].ops, jobs[i].interface, jobs[i].options);
      if (!shard) return shard.error();
      auto back = schedule::deserializeCompiledShard(schedule::serializeCompiledShard(*shard), chip);
      if (!back) return back.error();
      EXPECT_EQ(back->program, shard->program);
      EXPECT_EQ(back->sendIssues, shard->sendIssues);
      EXPECT_EQ(back->report.cycles, shard->report.cycles);
      EXPECT_EQ(back->report.annealAccepted, shard->report.annealAccepted);
      shards[i] = std::move(*back);
    }
    return shards;
  };
  auto batched = schedule::scheduleCluster(*work, cluster, {}, reversed);
  ASSERT_TRUE(batched.ok()) << batched.error().format();
  EXPECT_GT(batches, 0u);
  EXPECT_GT(largest, 1u);  // the TP pair's segments differ in their sends: two jobs in one batch
  EXPECT_EQ(batched->compiledShards, here->compiledShards);
  EXPECT_EQ(batched->sharedShards, here->sharedShards);
  ASSERT_EQ(batched->programs.size(), here->programs.size());
  for (size_t c = 0; c < here->programs.size(); ++c) EXPECT_EQ(batched->programs[c], here->programs[c]) << "chip " << c;
  EXPECT_EQ(batched->transfers.size(), here->transfers.size());
  // The first failing job's error reaches the scheduler.
  const schedule::ShardBatchCompiler failing = [](const topology::ChipSpec&, const std::vector<schedule::ShardJob>& jobs)
      -> Expected<std::vector<schedule::CompiledShard>> {
    return modelError(jobs.front().graph->op(jobs.front().ops.front()).name, "refused");
  };
  auto refused = schedule::scheduleCluster(*work, cluster, {}, failing);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "refused");
}

// A batch compiler that runs 4 compiles at once gets batches filled with the segments likely compiled
// next (the first segments of the pipeline lanes' next chunks, the segments after a fence): fewer
// batches, and the same schedule as one compile at a time.
TEST(PlanShards, BatchesFilledWithLikelyNextSegmentsGiveTheSameSchedule) {
  const ir::Graph g = mlp(4, 16, 640, DType::kF16);
  const auto cluster = ring(6);
  auto work = shardPlan(g, tp2pp2OnRing6());
  ASSERT_TRUE(work.ok());
  struct Count {
    size_t batches = 0, jobs = 0;
  };
  const auto counting = [](Count& count) -> schedule::ShardBatchCompiler {
    return [&count](const topology::ChipSpec& chip, const std::vector<schedule::ShardJob>& jobs) {
      ++count.batches;
      count.jobs += jobs.size();
      return schedule::compileShards(chip, jobs);
    };
  };
  Count one, four;
  auto here = schedule::scheduleCluster(*work, cluster, {}, counting(one), 1);
  ASSERT_TRUE(here.ok()) << here.error().format();
  auto filled = schedule::scheduleCluster(*work, cluster, {}, counting(four), 4);
  ASSERT_TRUE(filled.ok()) << filled.error().format();
  EXPECT_LT(four.batches, one.batches);
  EXPECT_GT(four.jobs, 0u);
  EXPECT_EQ(filled->compiledShards, here->compiledShards);
  EXPECT_EQ(filled->sharedShards, here->sharedShards);
  ASSERT_EQ(filled->programs.size(), here->programs.size());
  for (size_t c = 0; c < here->programs.size(); ++c) EXPECT_EQ(filled->programs[c], here->programs[c]) << "chip " << c;
  ASSERT_EQ(filled->transfers.size(), here->transfers.size());
  for (size_t i = 0; i < here->transfers.size(); ++i) {
    EXPECT_EQ(filled->transfers[i].sendCycle, here->transfers[i].sendCycle) << "transfer " << i;
    EXPECT_EQ(filled->transfers[i].arriveCycle, here->transfers[i].arriveCycle) << "transfer " << i;
  }
  // A filled-in segment that fails to compile does not fail the schedule: its batch runs again
  // without the filled-in ones.
  Count refusing;
  const schedule::ShardBatchCompiler refuseFilled =
      [&](const topology::ChipSpec& chip,
          const std::vector<schedule::ShardJob>& jobs) -> Expected<std::vector<schedule::CompiledShard>> {
    ++refusing.batches;
    if (jobs.size() > 1) return modelError(jobs.back().graph->op(jobs.back().ops.front()).name, "refused");
    return schedule::compileShards(chip, jobs);
  };
  const Plan single = plan(1, 1, 2, 2, {0, 1});
  auto pipeline = shardPlan(g, single);
  ASSERT_TRUE(pipeline.ok());
  auto alone = schedule::scheduleCluster(*pipeline, cluster, {}, {}, 1);
  ASSERT_TRUE(alone.ok()) << alone.error().format();
  auto retried = schedule::scheduleCluster(*pipeline, cluster, {}, refuseFilled, 2);
  ASSERT_TRUE(retried.ok()) << retried.error().format();
  for (size_t c = 0; c < alone->programs.size(); ++c) EXPECT_EQ(retried->programs[c], alone->programs[c]) << "chip " << c;
}

// METIS on the communication graph: TP groups of 4 on a 4x4 torus become rings of one-hop edges,
// with no more bytes x hops than the locality order's slices.
TEST(PlanShards, CommunicationGraphMapsTpRingsOntoNeighbours) {
  topology::YamlReader reader("test.yaml");
  auto cluster = topology::loadCluster(reader, YAML::Load("{topology: {kind: torus, dims: [4, 4]}}"));
  ASSERT_TRUE(cluster.ok());
  auto order = localityOrder(*cluster);
  ASSERT_TRUE(order.ok());
  const auto graph = communicationGraph(2, 4, 2, 1 << 20, {1 << 16, 0});
  EXPECT_EQ(graph.ranks, 16);
  auto mapped = mapCommunicationGraph(graph, *order);
  ASSERT_TRUE(mapped.ok()) << mapped.error().format();
  EXPECT_EQ(std::set<int>(mapped->begin(), mapped->end()).size(), 16u);
  for (int group = 0; group < 4; ++group)
    for (int t = 0; t < 4; ++t)
      EXPECT_EQ(cluster->route((*mapped)[group * 4 + t], (*mapped)[group * 4 + (t + 1) % 4]).size(), 1u)
          << "group " << group << " rank " << t;
  EXPECT_LE(placementTraffic(*cluster, *mapped, graph), placementTraffic(*cluster, *order, graph));
}

// Interleaved (pp 2, v 2, m 4): each chip's lane runs two microbatches through one chunk, then the
// same two through its next chunk; run in that order the chips overlap the next microbatch with the
// wait for the other chip, where waves in turn leave them idle.
TEST(PlanShards, InterleavedLanesOverlapMicrobatches) {
  const ir::Graph g = mlp(4, 16, 640, DType::kF16);
  Plan p = plan(1, 1, 2, 4, {});
  p.interleave = 2;
  p.stageChip = {0, 1};
  p.layerChunk = {0, 1, 2, 3};
  auto work = shardPlan(g, p);
  ASSERT_TRUE(work.ok()) << work.error().format();
  using schedule::WaveChunk;
  ASSERT_EQ(work->lanes.size(), 2u);
  std::vector<std::pair<int, int>> lane0, lane1;
  for (const WaveChunk& t : work->lanes[0]) lane0.push_back({t.wave, t.chunk});
  for (const WaveChunk& t : work->lanes[1]) lane1.push_back({t.wave, t.chunk});
  EXPECT_EQ(lane0, (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {0, 2}, {1, 2}, {2, 0}, {3, 0}, {2, 2}, {3, 2}}));
  EXPECT_EQ(lane1, (std::vector<std::pair<int, int>>{{0, 1}, {1, 1}, {0, 3}, {1, 3}, {2, 1}, {3, 1}, {2, 3}, {3, 3}}));
  const auto cluster = ring(2);
  auto makespan = [&](const schedule::ShardedWorkload& w) {
    auto s = schedule::scheduleCluster(w, cluster);
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().format());
    Cycle last = 0;
    for (const auto& program : s->programs) last = std::max(last, program.predictedCycles);
    return last;
  };
  schedule::ShardedWorkload wavesInTurn = *work;
  wavesInTurn.lanes.clear();
  EXPECT_LT(makespan(*work), makespan(wavesInTurn));
  // A partial last group: 3 microbatches on 2 stages run (0, 1), then (2) through each chunk.
  const auto order = forwardOrder(2, 3, 2);
  std::vector<std::pair<int, int>> stage0;
  for (const auto& t : order[0]) stage0.push_back({t.microbatch, t.chunk});
  EXPECT_EQ(stage0, (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 0}, {2, 1}}));
}

// A residual CNN under TP 2 x PP 2 (one microbatch; chips 0, 1 send to 5, 2 of a ring of 6): the
// stage boundary carries a channels-last feature map [1, 256, 4, 4], stored as 16 rows of 256
// channels (two 320-byte tiles), not 1,024 rows of 4.
// Each tile leaves as one burst of 16 vectors, and the bursts of one link never overlap.
TEST(PlanShards, ResidualCnnSendsItsFeatureMapsChannelsLast) {
  ir::Graph g;
  const ir::Attrs same{{"pads", Shape{1, 1, 1, 1}}};
  const auto conv = [&](const std::string& name, ir::TensorId x, std::int64_t cin, const ir::Attrs& attrs, int layer) {
    const auto w = g.addWeight(name + ".w", {256, cin, 3, 3}, DType::kF16, values(256 * cin * 9, 7 + layer));
    return *g.addOp(OpKind::kConv, name, {x, w}, attrs, layer);
  };
  ir::TensorId x = g.addInput("x", {1, 64, 8, 8}, DType::kF16);
  x = *g.addOp(OpKind::kRelu, "relu0", {conv("conv0", x, 64, {{"pads", Shape{1, 1, 1, 1}}, {"strides", Shape{2, 2}}}, 0)}, 0);
  for (int layer = 1; layer < 4; ++layer) {
    const auto y = conv(fmt::format("conv{}", layer), x, 256, same, layer);
    x = *g.addOp(OpKind::kRelu, fmt::format("relu{}", layer),
                 {*g.addOp(OpKind::kAdd, fmt::format("residual{}", layer), {y, x}, layer)}, layer);
  }
  g.markOutput(x);
  const auto cluster = ring(6);
  auto work = shardPlan(g, plan(1, 2, 2, 1, {0, 1, 5, 2}));
  ASSERT_TRUE(work.ok()) << work.error().format();
  auto schedule = schedule::scheduleCluster(*work, cluster);
  ASSERT_TRUE(schedule.ok()) << schedule.error().format();
  // Per directed link, the bursts' windows on the wire at the link's pace.
  std::map<std::pair<int, int>, std::vector<std::pair<Cycle, Cycle>>> windows;
  int bursts = 0;
  for (const auto& t : schedule->transfers) {
    if (t.srcChip != 0 && t.srcChip != 1) continue;  // stage 0 -> stage 1
    EXPECT_EQ(t.vectors, 16) << "burst of chip " << t.srcChip << " at " << t.sendCycle;
    ++bursts;
    const Cycle start = t.sendCycle + cluster.chip().c2cSendCycles;
    windows[{t.link, t.srcChip}].push_back(
        {start, start + topology::pacedSerializationCycles(t.vectors, t.spacing, t.interval)});
  }
  EXPECT_EQ(bursts, 2 * 2);  // 2 TP ranks x 2 tiles
  for (auto& [key, list] : windows) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) EXPECT_LE(list[i - 1].second, list[i].first) << "link " << key.first;
  }
}

// 2D on a 2 x 2 grid: every weight is split over both axes (a quarter per chip), each matmul
// reduces over one axis of 2 chips, and the group's graphs compute what the unsharded block does.
TEST(PlanShards, TwoDimensionalSplitHoldsAQuarterOfEachWeightAndMatches) {
  const ir::Graph g = mlp(4, 8, 8, DType::kF32);
  Plan p = plan(1, 4, 1, 1, {0, 1, 2, 3});
  p.split = TensorSplit::k2d;
  const Mesh mesh = tensorMesh(p.split, p.tp);
  EXPECT_EQ(mesh.axisSizes, (std::vector<int>{2, 2}));
  auto annotations = planAnnotations(g, p.split, mesh);
  ASSERT_TRUE(annotations.ok()) << annotations.error().format();
  auto propagated = propagateShardings(g, mesh, *annotations);
  ASSERT_TRUE(propagated.ok()) << propagated.error().format();
  EXPECT_EQ(propagated->tensors[*g.findTensor("w0")].text(mesh), "[r,c]");
  EXPECT_EQ(propagated->tensors[*g.findTensor("w1")].text(mesh), "[c,r]");
  EXPECT_EQ(propagated->tensors[*g.findTensor("w2")].text(mesh), "[r,c]");
  auto devices = shardGraph(g, *propagated);
  ASSERT_TRUE(devices.ok()) << devices.error().format();
  ASSERT_EQ(devices->graphs.size(), 4u);
  EXPECT_EQ(devices->graphs[3].tensor(*devices->graphs[3].findTensor("w1")).shape, (Shape{4, 4}));
  ir::Value x{DType::kF32, {8, 8}, *values(64, 7)};
  auto want = ir::interpret(g, {x});
  auto got = interpretSharded(*devices, {x});
  ASSERT_TRUE(want.ok() && got.ok()) << (got.ok() ? "" : got.error().format());
  ASSERT_EQ((*want)[0].data.size(), (*got)[0].data.size());
  for (size_t e = 0; e < (*want)[0].data.size(); ++e)
    EXPECT_NEAR((*want)[0].data[e], (*got)[0].data[e], 1e-4 + 1e-4 * std::abs((*want)[0].data[e]));
  auto work = shardPlan(g, p);
  ASSERT_TRUE(work.ok()) << work.error().format();
  EXPECT_EQ(work->graphs.size(), 4u);
}

// The weight rule taken literally: one propagation per annotated weight, each choice made on the
// propagation of the annotations before it (Megatron: the first matmul whose activation and weight
// are not split over tp takes a column split; 2D: [k, 1 - k] from its activation's last dim).
std::map<ir::TensorId, TensorSharding> literalWeightRule(const ir::Graph& g, const Plan& p, const Mesh& mesh) {
  std::map<ir::TensorId, TensorSharding> annotations;
  const bool grid = p.split == TensorSplit::k2d;
  const int q = mesh.axisSizes[0];
  for (const auto& op : g.ops()) {
    if (op.kind != OpKind::kGather || op.intAttr("axis", 0) != 0) continue;
    const auto& table = g.tensor(op.inputs[0]);
    if (table.role != ir::TensorRole::kWeight || table.shape.size() != 2) continue;
    // Megatron splits the rows (in ceil-sized blocks), else (fewer rows than ranks) the columns; 2D both.
    if (!grid && (table.shape[0] + q - 1) / q < table.shape[0]) annotations[op.inputs[0]] = TensorSharding{{0, -1}, {}};
    else if (!grid && (table.shape[1] + q - 1) / q < table.shape[1]) annotations[op.inputs[0]] = TensorSharding{{-1, 0}, {}};
    else if (grid && table.shape[0] % q == 0 && table.shape[1] % q == 0)
      annotations[op.inputs[0]] = TensorSharding{{0, 1}, {}};
  }
  auto split = [](const TensorSharding& s) {
    return std::any_of(s.dimAxis.begin(), s.dimAxis.end(), [](int a) { return a >= 0; }) || !s.partialAxes.empty();
  };
  std::set<ir::TensorId> tried;
  for (bool added = true; added;) {
    added = false;
    auto propagated = propagateShardings(g, mesh, annotations);
    EXPECT_TRUE(propagated.ok());
    if (!propagated.ok()) break;
    for (const auto& op : g.ops()) {
      if (op.kind != OpKind::kMatMul || op.inputs.size() != 2) continue;
      const ir::TensorId w = op.inputs[1];
      const auto& weight = g.tensor(w);
      if (weight.role != ir::TensorRole::kWeight || weight.shape.size() != 2 || tried.count(w) ||
          annotations.count(w))
        continue;
      const auto& in = propagated->tensors[op.inputs[0]];
      if (!grid && (split(in) || split(propagated->tensors[w]))) continue;
      tried.insert(w);
      if (weight.shape[0] % q != 0 && grid) continue;
      if (grid ? weight.shape[1] % q != 0 : (weight.shape[1] + q - 1) / q >= weight.shape[1]) continue;
      const int k = !in.dimAxis.empty() && in.dimAxis.back() >= 0 ? in.dimAxis.back() : 0;
      annotations[w] = grid ? TensorSharding{{k, 1 - k}, {}} : TensorSharding{{-1, 0}, {}};
      added = true;
      break;
    }
  }
  return annotations;
}

// planAnnotations chooses every weight in one propagation (graphs whose weights are first read by
// their matmul) or one propagation per weight (a weight read earlier): the same annotations as the
// literal rule either way, on the builtin transformers, Megatron and 2D.
TEST(PlanShards, WeightsChosenInOnePropagationFollowTheLiteralRule) {
  std::vector<ir::Graph> graphs;
  for (const std::string name : {"gpt", "bert"}) {
    frontend::ModelSpec spec;
    spec.builtin = name;
    spec.params = {{"layers", "2"}, {"hidden", "256"}, {"heads", "4"}, {"seq", "16"}};
    auto g = frontend::buildBuiltinModel(spec);
    ASSERT_TRUE(g.ok()) << g.error().format();
    graphs.push_back(std::move(*g));
  }
  // A weight an Add reads before its matmul does: the one-pass choice would change the Add's view.
  ir::Graph early;
  const auto x = early.addInput("x", {8, 8}, DType::kF32);
  const auto w0 = early.addWeight("w0", {8, 8}, DType::kF32, values(64, 1));
  const auto w1 = early.addWeight("w1", {8, 8}, DType::kF32, values(64, 2));
  const auto a = *early.addOp(OpKind::kAdd, "early_read", {x, w1}, 0);
  const auto h = *early.addOp(OpKind::kMatMul, "fc0", {a, w0}, 0);
  early.markOutput(*early.addOp(OpKind::kMatMul, "fc1", {*early.addOp(OpKind::kRelu, "relu", {h}, 0), w1}, 0));
  graphs.push_back(std::move(early));
  for (const auto& g : graphs)
    for (const TensorSplit split : {TensorSplit::kMegatron, TensorSplit::k2d}) {
      Plan p = plan(1, 4, 1, 1, {0, 1, 2, 3});
      p.split = split;
      const Mesh mesh = tensorMesh(p.split, p.tp);
      auto annotations = planAnnotations(g, p.split, mesh);
      ASSERT_TRUE(annotations.ok()) << annotations.error().format();
      const auto want = literalWeightRule(g, p, mesh);
      EXPECT_EQ(annotations->size(), want.size());
      for (const auto& [id, s] : want) {
        ASSERT_TRUE(annotations->count(id)) << g.tensor(id).name;
        EXPECT_EQ(annotations->at(id).text(mesh), s.text(mesh)) << g.tensor(id).name;
      }
    }
}

TEST(PlanShards, TwoDimensionalSplitNeedsASquareGroup) {
  Plan p = plan(1, 8, 1, 1, {0, 1, 2, 3, 4, 5, 6, 7});
  p.split = TensorSplit::k2d;
  auto work = shardPlan(mlp(2, 8, 8, DType::kF32), p);
  ASSERT_FALSE(work.ok());
  EXPECT_EQ(work.error().message, "the 2d split runs on a q x q grid: tp = 8 is not a square");
}

// A builtin GPT in FP32 with deterministic weights.
ir::Graph gptWithWeights(std::map<std::string, std::string> params) {
  frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = std::move(params);
  spec.params["dtype"] = "fp32";
  auto g = frontend::buildBuiltinModel(spec);
  EXPECT_TRUE(g.ok()) << g.error().format();
  std::uint64_t seed = 1;
  for (ir::TensorId t = 0; t < static_cast<ir::TensorId>(g->tensors().size()); ++t)
    if (g->tensor(t).role == ir::TensorRole::kWeight) g->setData(t, values(g->tensor(t).elements(), seed++));
  return std::move(*g);
}

// The TP group's graphs of a propagated sharding compute what the unsharded graph does on `tokens`.
void expectShardsMatch(const ir::Graph& g, const ShardingPlan& propagated, const ir::Value& tokens, double tolerance) {
  auto devices = shardGraph(g, propagated);
  ASSERT_TRUE(devices.ok()) << devices.error().format();
  auto want = ir::interpret(g, {tokens});
  auto got = interpretSharded(*devices, {tokens});
  ASSERT_TRUE(want.ok() && got.ok()) << (want.ok() ? got.error().format() : want.error().format());
  ASSERT_EQ(want->size(), got->size());
  for (size_t o = 0; o < want->size(); ++o) {
    ASSERT_EQ((*want)[o].data.size(), (*got)[o].data.size());
    for (size_t e = 0; e < (*want)[o].data.size(); ++e)
      EXPECT_NEAR((*want)[o].data[e], (*got)[o].data[e], tolerance + tolerance * std::abs((*want)[o].data[e]))
          << "output " << o;
  }
}

ir::Value input(Shape shape, std::uint64_t seed) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return ir::Value{DType::kF32, std::move(shape), *values(n, seed)};
}

// Tokens 2 x 8 spread over a vocabulary.
ir::Value tokensOf(int vocab) {
  ir::Value tokens{DType::kI32, {2, 8}, {}};
  for (int i = 0; i < 16; ++i) tokens.data.push_back((5 * i + 3) % vocab);
  return tokens;
}

// Megatron's attention on the builtin GPT: the column split of the query, key and value weights gives
// every TP rank whole heads (KV-head groups), so attention needs no collective; each block all-reduces twice (the
// output projection and fc2), the vocabulary-parallel lookups once each, and nothing is gathered.
// The TP group's graphs compute what the unsharded block does (grouped-query attention included).
TEST(PlanShards, GptAttentionSplitsByHeads) {
  struct Case {
    int tp;
    std::string heads, kvHeads;
  };
  for (const Case& c : {Case{2, "4", "4"}, Case{4, "4", "4"}, Case{2, "4", "2"}}) {
    SCOPED_TRACE(fmt::format("tp {}, heads {}, kv_heads {}", c.tp, c.heads, c.kvHeads));
    auto g = gptWithWeights({{"layers", "2"}, {"hidden", "32"}, {"heads", c.heads}, {"kv_heads", c.kvHeads},
                             {"seq", "8"}, {"batch", "2"}, {"vocab", "16"}});
    Plan p = plan(1, c.tp, 1, 1, {});
    const Mesh mesh = tensorMesh(p.split, p.tp);
    auto annotations = planAnnotations(g, p.split, mesh);
    ASSERT_TRUE(annotations.ok()) << annotations.error().format();
    auto propagated = propagateShardings(g, mesh, *annotations);
    ASSERT_TRUE(propagated.ok()) << propagated.error().format();
    EXPECT_EQ(propagated->count(ReshardKind::kAllGather), 0);
    EXPECT_EQ(propagated->count(ReshardKind::kAllToAll), 0);
    EXPECT_EQ(propagated->count(ReshardKind::kAllReduce), 2 * 2 + 2);  // 2 per block, token and position lookups
    for (const char* w : {"layers.0.query.weight", "layers.0.key.weight", "layers.0.value.weight"})
      EXPECT_EQ(propagated->tensors[*g.findTensor(w)].text(mesh), "[-,tp]") << w;
    EXPECT_EQ(propagated->tensors[*g.findTensor("layers.0.attn_out.weight")].text(mesh), "[tp,-]");
    expectShardsMatch(g, *propagated, tokensOf(16), 1e-6);
  }
}

// A vocabulary that tp does not divide (GPT-2/3's 50,257): the tied table's rows split in ceil-sized
// blocks (8 and 7 of 15), the last padded with a zero row, so every rank holds half of it; each
// lookup is one all-reduce, the tied head leaves its logits split by vocabulary, nothing is
// gathered, and the TP group computes what the unsharded graph does.
TEST(PlanShards, OddVocabularySplitsTheTableRowsInCeilSizedBlocks) {
  auto g = gptWithWeights({{"layers", "1"}, {"hidden", "32"}, {"heads", "4"}, {"seq", "8"}, {"batch", "2"}, {"vocab", "15"}});
  Plan p = plan(1, 2, 1, 1, {});
  const Mesh mesh = tensorMesh(p.split, p.tp);
  auto annotations = planAnnotations(g, p.split, mesh);
  ASSERT_TRUE(annotations.ok()) << annotations.error().format();
  auto propagated = propagateShardings(g, mesh, *annotations);
  ASSERT_TRUE(propagated.ok()) << propagated.error().format();
  EXPECT_EQ(propagated->tensors[*g.findTensor("wte")].text(mesh), "[tp,-]");
  EXPECT_EQ(propagated->count(ReshardKind::kAllGather), 0);
  expectShardsMatch(g, *propagated, tokensOf(15), 1e-5);
  // Each rank's lookup reads its block of 8 rows in place (ids of the other rank masked to zero):
  // nothing copies the table.
  auto devices = shardGraph(g, *propagated);
  ASSERT_TRUE(devices.ok()) << devices.error().format();
  for (const auto& d : devices->graphs) {
    const ir::TensorId table = *d.findTensor("wte");
    EXPECT_EQ(d.tensor(table).shape, (Shape{8, 32}));
    for (const auto& op : d.ops())
      for (ir::TensorId in : op.inputs)
        if (in == table) {
          EXPECT_NE(op.kind, OpKind::kConcat) << op.name;
        }
  }
}

// The TP ranks' embedding segments differ only in their vocabulary blocks' row maps and masks
// (constants the lowering reads as operands at run time): one compile serves both ranks, relocated
// to each chip, and the distinct segments are counted once.
TEST(PlanShards, TpRanksDifferingInConstantValuesShareOneCompile) {
  auto g = gptWithWeights({{"layers", "1"}, {"hidden", "32"}, {"heads", "4"}, {"seq", "8"}, {"batch", "2"}, {"vocab", "16"}});
  auto work = shardPlan(g, plan(1, 2, 1, 1, {0, 1}));
  ASSERT_TRUE(work.ok()) << work.error().format();
  ASSERT_EQ(work->graphs.size(), 2u);
  bool differ = false;  // the ranks' graphs hold constants of one name with other values
  for (ir::TensorId t = 0; t < static_cast<ir::TensorId>(work->graphs[0].tensors().size()); ++t) {
    const ir::Tensor& mine = work->graphs[0].tensor(t);
    const auto theirs = work->graphs[1].findTensor(mine.name);
    if (mine.role == ir::TensorRole::kConstant && mine.data && theirs && work->graphs[1].tensor(*theirs).data)
      differ |= *mine.data != *work->graphs[1].tensor(*theirs).data;
  }
  ASSERT_TRUE(differ);
  std::vector<size_t> batches;
  size_t compared = 0;
  const schedule::ShardBatchCompiler counting = [&](const topology::ChipSpec& chip,
                                                    const std::vector<schedule::ShardJob>& jobs) {
    batches.push_back(jobs.size());
    auto shards = schedule::compileShards(chip, jobs);
    // Each rank's own compile of the segment (its graph, the same seed) is the shared program.
    for (size_t i = 0; shards && i < jobs.size(); ++i)
      for (const ir::Graph& rank : work->graphs) {
        if (&rank == jobs[i].graph) continue;
        auto own = schedule::compileShard(chip, rank, jobs[i].ops, jobs[i].interface, jobs[i].options);
        EXPECT_TRUE(own.ok()) << own.error().format();
        if (!own) continue;
        EXPECT_EQ(own->program.instructions, (*shards)[i].program.instructions) << "batch " << batches.size();
        EXPECT_EQ(own->program.predictedCycles, (*shards)[i].program.predictedCycles);
        ++compared;
      }
    return shards;
  };
  auto schedule = schedule::scheduleCluster(*work, ring(4), {}, counting, 1);
  ASSERT_TRUE(schedule.ok()) << schedule.error().format();
  ASSERT_FALSE(batches.empty());
  for (size_t jobs : batches) EXPECT_EQ(jobs, 1u);  // every wave's two segments: one key
  EXPECT_EQ(compared, batches.size());
  EXPECT_EQ(schedule->compiledShards, static_cast<int>(batches.size()));
  EXPECT_EQ(schedule->sharedShards, schedule->compiledShards);
  EXPECT_FALSE(schedule->programs[0].instructions.empty());
  EXPECT_FALSE(schedule->programs[1].instructions.empty());
}

// Self-attention with one fused in-projection [d, 3d], as torch exports it: the projection is taken
// apart by a Split (nn.MultiheadAttention's chunk), by three Slices, or by a Reshape to
// [b, s, 3, heads, hd] and constant-index Gathers (GPT-2's c_attn viewed whole); or, for
// comparison, three separate projections. A Gemm (transB) output projection, a residual and an
// MLP (whose first weight is stored transposed behind a Transpose) follow.
enum class Fused { kSeparate, kSplit, kSlice, kReshape };
ir::Graph fusedAttention(Fused form, std::int64_t heads, std::int64_t hd, bool positionBias = false) {
  const std::int64_t b = 2, s = 4, d = heads * hd;
  ir::Graph g;
  std::uint64_t seed = 1;
  auto w = [&](const std::string& name, Shape shape) {
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    return g.addWeight(name, std::move(shape), DType::kF32, values(n, seed++));
  };
  auto add = [&](OpKind kind, const std::string& name, std::vector<ir::TensorId> in, ir::Attrs attrs = {}) {
    auto out = g.addOp(kind, name, std::move(in), std::move(attrs), 0);
    EXPECT_TRUE(out.ok()) << out.error().format();
    return *out;
  };
  const auto x = g.addInput("x", {b, s, d}, DType::kF32);
  std::vector<ir::TensorId> qkv;
  auto heads4 = [&](ir::TensorId t, const std::string& name) {  // [b, s, d] -> [b, heads, s, hd]
    const auto r = add(OpKind::kReshape, name + ".view", {t}, {{"shape", Shape{b, s, heads, hd}}});
    return add(OpKind::kTranspose, name + ".heads", {r}, {{"perm", Shape{0, 2, 1, 3}}});
  };
  if (form == Fused::kSeparate) {
    for (const char* n : {"q", "k", "v"})
      qkv.push_back(heads4(add(OpKind::kAdd, std::string(n) + ".bias",
                               {add(OpKind::kMatMul, n, {x, w(std::string(n) + ".weight", {d, d})}), w(std::string(n) + ".b", {d})}),
                           n));
  } else {
    // The fused weight is stored [3d, d] (torch's in_proj_weight) and transposed in the graph.
    const auto wt = add(OpKind::kTranspose, "in_proj.t", {w("in_proj.weight", {3 * d, d})}, {{"perm", Shape{1, 0}}});
    const auto proj = add(OpKind::kAdd, "in_proj.bias", {add(OpKind::kMatMul, "in_proj", {x, wt}), w("in_proj.b", {3 * d})});
    if (form == Fused::kSplit) {
      auto parts = g.addMultiOp(OpKind::kSplit, "chunk", {proj}, {{"axis", std::int64_t{2}}, {"split", Shape{d, d, d}}}, 0);
      EXPECT_TRUE(parts.ok());
      for (int i = 0; i < 3; ++i) qkv.push_back(heads4((*parts)[i], fmt::format("p{}", i)));
    } else if (form == Fused::kSlice) {
      for (int i = 0; i < 3; ++i)
        qkv.push_back(heads4(add(OpKind::kSlice, fmt::format("slice{}", i), {proj},
                                 {{"starts", Shape{i * d}}, {"ends", Shape{(i + 1) * d}}, {"axes", Shape{2}}}),
                             fmt::format("p{}", i)));
    } else {
      const auto r = add(OpKind::kReshape, "qkv.view", {proj}, {{"shape", Shape{b, s, 3, heads, hd}}});
      const auto t = add(OpKind::kTranspose, "qkv.t", {r}, {{"perm", Shape{2, 0, 3, 1, 4}}});  // [3, b, heads, s, hd]
      for (int i = 0; i < 3; ++i) {
        const auto index = g.addConstant(fmt::format("index{}", i), {}, DType::kI64,
                                         ir::makeData({double(i)}));
        qkv.push_back(add(OpKind::kGather, fmt::format("pick{}", i), {t, index}, {{"axis", std::int64_t{0}}}));
      }
    }
  }
  const auto kt = add(OpKind::kTranspose, "kt", {qkv[1]}, {{"perm", Shape{0, 1, 3, 2}}});
  ir::TensorId scores = add(OpKind::kMatMul, "scores", {qkv[0], kt});
  if (positionBias) {
    // Swin's relative position bias: a table [2s - 1, heads] looked up by each query-key offset,
    // made [heads, s, s] and added to every batch's scores.
    std::vector<double> offsets;
    for (std::int64_t i = 0; i < s; ++i)
      for (std::int64_t j = 0; j < s; ++j) offsets.push_back(static_cast<double>(i - j + s - 1));
    const auto index = g.addConstant("bias.index", {s * s}, DType::kI64, ir::makeData(offsets));
    const auto rows = add(OpKind::kGather, "bias.lookup", {w("bias.table", {2 * s - 1, heads}), index},
                          {{"axis", std::int64_t{0}}});
    const auto view = add(OpKind::kReshape, "bias.view", {rows}, {{"shape", Shape{s, s, heads}}});
    scores = add(OpKind::kAdd, "scores.bias", {scores, add(OpKind::kTranspose, "bias.heads", {view}, {{"perm", Shape{2, 0, 1}}})});
  }
  const auto probs = add(OpKind::kSoftmax, "softmax", {scores}, {{"axis", std::int64_t{-1}}});
  const auto ctx = add(OpKind::kTranspose, "ctx.t", {add(OpKind::kMatMul, "ctx", {probs, qkv[2]})}, {{"perm", Shape{0, 2, 1, 3}}});
  const auto merged = add(OpKind::kReshape, "merge", {ctx}, {{"shape", Shape{b * s, d}}});
  const auto attn = add(OpKind::kGemm, "out_proj", {merged, w("out_proj.weight", {d, d}), w("out_proj.b", {d})},
                        {{"transB", std::int64_t{1}}});
  const auto h = add(OpKind::kAdd, "residual", {add(OpKind::kReshape, "unmerge", {attn}, {{"shape", Shape{b, s, d}}}), x});
  const auto up = add(OpKind::kTranspose, "fc1.t", {w("fc1.weight", {2 * d, d})}, {{"perm", Shape{1, 0}}});
  const auto act = add(OpKind::kRelu, "relu", {add(OpKind::kMatMul, "fc1", {h, up})});
  g.markOutput(add(OpKind::kMatMul, "fc2", {act, w("fc2.weight", {2 * d, d})}));
  return g;
}

// A fused QKV projection splits each of q, k and v over tp (every rank holds whole heads of each),
// whether a Split, Slices or a Reshape with Gathers takes it apart: nothing is gathered, one
// all-reduce follows the output projection and one the MLP, each rank sends what the separate
// projections send, and the TP group computes what the unsharded graph does.
TEST(PlanShards, FusedQkvSplitsEachPartOverTp) {
  for (int tp : {2, 4}) {
    Plan p = plan(1, tp, 1, 1, {});
    const Mesh mesh = tensorMesh(p.split, p.tp);
    auto bytes = [&](const ir::Graph& g) {
      auto annotations = planAnnotations(g, p.split, mesh);
      EXPECT_TRUE(annotations.ok()) << annotations.error().format();
      auto propagated = propagateShardings(g, mesh, *annotations);
      EXPECT_TRUE(propagated.ok()) << propagated.error().format();
      auto devices = shardGraph(g, *propagated);
      EXPECT_TRUE(devices.ok()) << devices.error().format();
      return devices->collectiveBytes.front();
    };
    const std::int64_t separate = bytes(fusedAttention(Fused::kSeparate, 4, 2));
    {
      const auto g = fusedAttention(Fused::kSeparate, 4, 2);
      auto annotations = planAnnotations(g, p.split, mesh);
      ASSERT_TRUE(annotations.ok()) << annotations.error().format();
      auto propagated = propagateShardings(g, mesh, *annotations);
      ASSERT_TRUE(propagated.ok()) << propagated.error().format();
      expectShardsMatch(g, *propagated, input({2, 4, 8}, 7), 1e-6);
    }
    for (Fused form : {Fused::kSplit, Fused::kSlice, Fused::kReshape}) {
      SCOPED_TRACE(fmt::format("tp {}, form {}", tp, static_cast<int>(form)));
      const auto g = fusedAttention(form, 4, 2);
      auto annotations = planAnnotations(g, p.split, mesh);
      ASSERT_TRUE(annotations.ok()) << annotations.error().format();
      auto propagated = propagateShardings(g, mesh, *annotations);
      ASSERT_TRUE(propagated.ok()) << propagated.error().format();
      EXPECT_EQ(propagated->tensors[*g.findTensor("in_proj.weight")].text(mesh), "[3xtp,-]");
      EXPECT_EQ(propagated->tensors[*g.findTensor("out_proj.weight")].text(mesh), "[-,tp]");
      EXPECT_EQ(propagated->tensors[*g.findTensor("fc1.weight")].text(mesh), "[tp,-]");
      EXPECT_EQ(propagated->count(ReshardKind::kAllGather), 0);
      EXPECT_EQ(propagated->count(ReshardKind::kAllToAll), 0);
      EXPECT_EQ(propagated->count(ReshardKind::kAllReduce), 2);
      EXPECT_EQ(bytes(g), separate);
      expectShardsMatch(g, *propagated, input({2, 4, 8}, 7), 1e-6);
    }
  }
}

// Dims tp does not divide split in ceil-sized blocks, the last padded: an untied head of 15 logits
// (GPT-2's 50,257) column-splits over 2, 3 and 4 ranks instead of staying whole on each, an FFN of
// 10 (hidden 2,560 over 3) splits fc1's columns and fc2's rows with one all-reduce, and the TP
// group computes what the unsharded graph does (padding computes on zeros and is cut on output).
TEST(PlanShards, UnevenSplitsPadTheLastBlock) {
  ir::Graph g;
  const auto x = g.addInput("x", {4, 6}, DType::kF32);
  auto w = [&](const std::string& name, Shape shape, std::uint64_t seed) {
    return g.addWeight(name, shape, DType::kF32, values(shape[0] * (shape.size() > 1 ? shape[1] : 1), seed));
  };
  const auto fc1 = w("fc1.weight", {6, 10}, 1), fc2 = w("fc2.weight", {10, 6}, 3), head = w("head.weight", {6, 15}, 4);
  auto h = *g.addOp(OpKind::kAdd, "fc1.bias", {*g.addOp(OpKind::kMatMul, "fc1", {x, fc1}, 0), w("fc1.b", {10}, 2)}, 0);
  h = *g.addOp(OpKind::kGelu, "gelu", {h}, 0);
  h = *g.addOp(OpKind::kAdd, "residual", {*g.addOp(OpKind::kMatMul, "fc2", {h, fc2}, 0), x}, 0);
  g.markOutput(*g.addOp(OpKind::kMatMul, "head", {h, head}, 0));
  for (int tp : {2, 3, 4}) {
    SCOPED_TRACE(tp);
    Plan p = plan(1, tp, 1, 1, {});
    const Mesh mesh = tensorMesh(p.split, p.tp);
    auto annotations = planAnnotations(g, p.split, mesh);
    ASSERT_TRUE(annotations.ok()) << annotations.error().format();
    auto propagated = propagateShardings(g, mesh, *annotations);
    ASSERT_TRUE(propagated.ok()) << propagated.error().format();
    EXPECT_EQ(propagated->tensors[fc1].text(mesh), "[-,tp]");
    EXPECT_EQ(propagated->tensors[fc2].text(mesh), "[tp,-]");
    EXPECT_EQ(propagated->tensors[head].text(mesh), "[-,tp]");
    EXPECT_EQ(propagated->count(ReshardKind::kAllReduce), 1);
    EXPECT_EQ(propagated->count(ReshardKind::kAllGather), 0);
    EXPECT_EQ(localShape(g.tensor(head).shape, propagated->tensors[head], mesh), (Shape{6, (15 + tp - 1) / tp}));
    expectShardsMatch(g, *propagated, input({4, 6}, 5), 1e-6);
  }
}

// A GPT whose vocabulary (15), hidden size (30) and heads (3) tp = 4 does not divide: the table's
// rows split in blocks of 4, 4, 4 and 3, the projections' columns in blocks of one head (10
// columns; the last rank holds padding), and the TP group computes what the unsharded graph does.
TEST(PlanShards, UnevenGptMatchesTheUnshardedGraph) {
  auto g = gptWithWeights({{"layers", "1"}, {"hidden", "30"}, {"heads", "3"}, {"seq", "8"}, {"batch", "2"}, {"vocab", "15"}});
  for (int tp : {3, 4}) {
    SCOPED_TRACE(tp);
    Plan p = plan(1, tp, 1, 1, {});
    const Mesh mesh = tensorMesh(p.split, p.tp);
    auto annotations = planAnnotations(g, p.split, mesh);
    ASSERT_TRUE(annotations.ok()) << annotations.error().format();
    auto propagated = propagateShardings(g, mesh, *annotations);
    ASSERT_TRUE(propagated.ok()) << propagated.error().format();
    EXPECT_EQ(propagated->tensors[*g.findTensor("wte")].text(mesh), "[tp,-]");
    EXPECT_EQ(propagated->tensors[*g.findTensor("layers.0.query.weight")].text(mesh), tp == 3 ? "[-,tp]" : "[-,tp/10]");
    EXPECT_EQ(propagated->count(ReshardKind::kAllGather), 0);
    expectShardsMatch(g, *propagated, tokensOf(15), 1e-5);
  }
}

// Heads that tp does not divide split in ceil-sized blocks of whole heads (6 heads over 4 ranks:
// 2, 2, 2 and padding; 3 heads over 2: 2 and 1 plus padding), separate or fused QKV: attention
// gathers nothing, and the TP group computes what the unsharded graph does.
TEST(PlanShards, UnevenHeadsSplitInWholeHeads) {
  auto gpt = gptWithWeights({{"layers", "1"}, {"hidden", "48"}, {"heads", "6"}, {"seq", "8"}, {"batch", "2"}, {"vocab", "16"}});
  Plan p = plan(1, 4, 1, 1, {});
  Mesh mesh = tensorMesh(p.split, p.tp);
  auto annotations = planAnnotations(gpt, p.split, mesh);
  ASSERT_TRUE(annotations.ok()) << annotations.error().format();
  auto propagated = propagateShardings(gpt, mesh, *annotations);
  ASSERT_TRUE(propagated.ok()) << propagated.error().format();
  EXPECT_EQ(propagated->tensors[*gpt.findTensor("layers.0.query.weight")].text(mesh), "[-,tp/8]");
  EXPECT_EQ(propagated->count(ReshardKind::kAllGather), 0);
  EXPECT_EQ(propagated->count(ReshardKind::kAllReduce), 2 + 2);
  expectShardsMatch(gpt, *propagated, tokensOf(16), 1e-5);

  // Grouped-query attention whose 2 KV heads tp = 4 does not divide: queries split by KV head's
  // group (16 columns), keys and values by KV head (8), the last ranks padding; nothing is
  // gathered, and the TP group computes what the unsharded graph does.
  auto gqa = gptWithWeights({{"layers", "1"}, {"hidden", "32"}, {"heads", "4"}, {"kv_heads", "2"}, {"seq", "8"},
                             {"batch", "2"}, {"vocab", "16"}});
  auto gqaAnnotations = planAnnotations(gqa, p.split, mesh);
  ASSERT_TRUE(gqaAnnotations.ok()) << gqaAnnotations.error().format();
  auto gqaPropagated = propagateShardings(gqa, mesh, *gqaAnnotations);
  ASSERT_TRUE(gqaPropagated.ok()) << gqaPropagated.error().format();
  EXPECT_EQ(gqaPropagated->tensors[*gqa.findTensor("layers.0.query.weight")].text(mesh), "[-,tp/16]");
  EXPECT_EQ(gqaPropagated->tensors[*gqa.findTensor("layers.0.key.weight")].text(mesh), "[-,tp/8]");
  EXPECT_EQ(gqaPropagated->count(ReshardKind::kAllGather), 0);
  expectShardsMatch(gqa, *gqaPropagated, tokensOf(16), 1e-5);

  p = plan(1, 2, 1, 1, {});
  mesh = tensorMesh(p.split, p.tp);
  for (Fused form : {Fused::kSplit, Fused::kSlice, Fused::kReshape}) {
    SCOPED_TRACE(static_cast<int>(form));
    const auto g = fusedAttention(form, 3, 2);
    auto fusedAnnotations = planAnnotations(g, p.split, mesh);
    ASSERT_TRUE(fusedAnnotations.ok()) << fusedAnnotations.error().format();
    auto fused = propagateShardings(g, mesh, *fusedAnnotations);
    ASSERT_TRUE(fused.ok()) << fused.error().format();
    EXPECT_EQ(fused->tensors[*g.findTensor("in_proj.weight")].text(mesh), "[3xtp/2,-]");
    EXPECT_EQ(fused->count(ReshardKind::kAllGather), 0);
    expectShardsMatch(g, *fused, input({2, 4, 6}, 7), 1e-6);
  }

  // A relative position bias of 3 heads (Swin's), made whole on every rank and sliced to its
  // heads: the last rank's block is padded with a zero head. Every rank's graph runs the same ops
  // in the same order (the cluster schedule walks them op by op), and the TP group computes what
  // the unsharded graph does.
  const auto biased = fusedAttention(Fused::kSeparate, 3, 2, true);
  auto biasAnnotations = planAnnotations(biased, p.split, mesh);
  ASSERT_TRUE(biasAnnotations.ok()) << biasAnnotations.error().format();
  auto bias = propagateShardings(biased, mesh, *biasAnnotations);
  ASSERT_TRUE(bias.ok()) << bias.error().format();
  EXPECT_GT(bias->count(ReshardKind::kSlice), 0);
  auto devices = shardGraph(biased, *bias);
  ASSERT_TRUE(devices.ok()) << devices.error().format();
  ASSERT_EQ(devices->graphs.size(), 2u);
  const ir::Graph& first = devices->graphs[0];
  const ir::Graph& last = devices->graphs[1];
  ASSERT_EQ(first.ops().size(), last.ops().size());
  for (size_t j = 0; j < first.ops().size(); ++j)
    EXPECT_EQ(first.op(j).kind, last.op(j).kind) << first.op(j).name << " / " << last.op(j).name;
  expectShardsMatch(biased, *bias, input({2, 4, 6}, 7), 1e-6);
}

}  // namespace
}  // namespace tsp::partition
