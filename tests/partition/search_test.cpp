// Tests of the cost model, stage partition, placement and hybrid search on real models and clusters.
#include "partition/search.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <cstdio>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "compile/frontend/builtin_models.h"
#include "compile/schedule/collectives.h"
#include "partition/plan_shards.h"
#include "partition/stage_partition.h"
#include "support/cancel.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::partition {
namespace {

topology::Cluster cluster(const std::string& yaml) {
  topology::YamlReader reader("c.yaml");
  auto c = topology::loadCluster(reader, YAML::Load(yaml));
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().format());
  return *c;
}

ir::Graph model(const std::string& name, std::map<std::string, std::string> params,
                frontend::Precision precision = {}) {
  frontend::ModelSpec spec;
  spec.builtin = name;
  spec.params = std::move(params);
  spec.precision = precision;
  auto g = frontend::buildBuiltinModel(spec);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().format());
  return *g;
}

ModelProfile profileOf(const ir::Graph& g, const topology::Cluster& c, std::int64_t samples) {
  auto p = profileModel(g, c.chip(), samples);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().format());
  return *p;
}

// A LayerCompileBatch that compiles its jobs last to first (as ranks dealt them would, in another
// order) and notes each batch's size.
LayerCompileBatch reversedBatch(std::vector<int>& batchSizes) {
  return [&batchSizes](const topology::ChipSpec& chip, const std::vector<LayerCompile>& jobs, const support::ProgressFn&) {
    batchSizes.push_back(static_cast<int>(jobs.size()));
    std::vector<Expected<Cycle>> out(jobs.size(), makeError(ExitCode::kInternal, "not compiled"));
    for (size_t i = jobs.size(); i-- > 0;) out[i] = compileLayer(chip, jobs[i]);
    return out;
  };
}

// Calls check(split, tp, x's figures, y's figures) at Megatron's and 2D's widths 2, 4 and 8 where
// the two layers have figures (each has them where the other does).
template <typename Check>
void forEachWidth(const LayerProfile& x, const LayerProfile& y, Check check) {
  for (TensorSplit split : {TensorSplit::kMegatron, TensorSplit::k2d})
    for (int tp : {2, 4, 8}) {
      const auto* a = x.figuresAt(split, tp);
      const auto* b = y.figuresAt(split, tp);
      EXPECT_EQ(a == nullptr, b == nullptr) << "split " << static_cast<int>(split) << " tp " << tp;
      if (a && b) check(split, tp, *a, *b);
    }
}

// Links that cost almost nothing: 64 lanes at 10 Tb/s each, ~1 ns.
const char* kFreeRing = "{topology: {kind: ring, chips: 16}, link: {lanes: 64, gbps_per_lane: 10000, latency_ns: 1.2}}";

TEST(CostModel, BubbleIsTheTextbookFractionOnUniformLayers) {
  const auto c = cluster(kFreeRing);
  // 16 identical layers (the last has no ReLU, a few hundred cycles of VXM out of thousands).
  const auto g = model("mlp", {{"layers", "16"}, {"hidden", "1024"}, {"batch", "256"}});
  const auto profile = profileOf(g, c, 256);
  EXPECT_EQ(profile.fallbackLayers, 0);  // the compiler lowers every MLP layer
  for (int p : {2, 4, 8, 16})
    for (int m : {1, 2, 4, 8, 16, 32}) {
      auto stages = assignStages(profile, p);
      ASSERT_TRUE(stages.ok());
      const Candidate cand{TensorSplit::kNone, 1, 1, p, m, 1};
      auto order = localityOrder(c);
      ASSERT_TRUE(order.ok());
      auto placed = placePlan(c, *order, 1, 1, p);
      ASSERT_TRUE(placed.ok());
      const auto links = linkFigures(c, *placed, 1, 1, p, 1, true);
      const PlanCost cost = evaluateCandidate(profile, cand, *stages, links, c.chip(), c.chipCount());
      const double expected = static_cast<double>(p - 1) / (m + p - 1);
      EXPECT_NEAR(cost.bubbleFraction, expected, 0.01) << "p " << p << " m " << m;
    }
}

// The compute of a microbatch is the compiler's: the profile compiles each distinct layer at halved
// shares of the batch (the share of 16 of 64 rows is what a batch-16 profile measures) and
// interpolates between them; a layer that sends on knows how much of the send its compute hides.
TEST(CostModel, LayerCyclesAtMicrobatchSharesAreTheCompilers) {
  const auto c = cluster(kFreeRing);
  const auto g64 = model("mlp", {{"layers", "2"}, {"hidden", "1024"}, {"batch", "64"}});
  const auto g16 = model("mlp", {{"layers", "2"}, {"hidden", "1024"}, {"batch", "16"}});
  const auto p64 = profileOf(g64, c, 64), p16 = profileOf(g16, c, 16);
  const LayerProfile& layer = p64.layers[0];
  ASSERT_EQ(layer.batchCycles.size(), 6u);  // shares 1/32 .. 1
  EXPECT_DOUBLE_EQ(layer.batchCycles.back().first, 1.0);
  EXPECT_DOUBLE_EQ(layer.batchCycles.front().first, 1.0 / 32);
  EXPECT_DOUBLE_EQ(layerCyclesAt(layer, 0.25), static_cast<double>(p16.layers[0].cycles));
  EXPECT_DOUBLE_EQ(layerCyclesAt(layer, 1.0), static_cast<double>(layer.cycles));
  const double between = layerCyclesAt(layer, 0.375);
  EXPECT_GT(between, layerCyclesAt(layer, 0.25));
  EXPECT_LT(between, layerCyclesAt(layer, 0.5));
  EXPECT_GE(layer.sendHiddenPerShare, 0);        // layer 0 sends to layer 1
  EXPECT_LT(p64.layers[1].sendHiddenPerShare, 0);  // the last layer sends nothing on
}

// Consecutive layers of one chip are one program, in which the compiler schedules a layer's weight
// installation and other independent work under the layer before it: the profile compiles each
// distinct pair of consecutive layers together, and an unsharded chunk takes the sum of its layers
// less those overlaps (none across a stage boundary).
TEST(CostModel, ConsecutiveLayersOfOneChipOverlapAsTheirPairCompiles) {
  const auto c = cluster(kFreeRing);
  const auto g = model("mlp", {{"layers", "4"}, {"hidden", "1024"}, {"batch", "16"}});
  const auto profile = profileOf(g, c, 16);
  std::vector<ir::OpId> pair;
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (g.op(i).layer == 0 || g.op(i).layer == 1) pair.push_back(static_cast<ir::OpId>(i));
  auto sub = layerGraph(g, pair);
  ASSERT_TRUE(sub.ok()) << sub.error().format();
  auto together = compiledCycles(*sub, c.chip());
  ASSERT_TRUE(together.ok()) << together.error().format();
  const LayerProfile& first = profile.layers[0];
  const LayerProfile& second = profile.layers[1];
  EXPECT_EQ(first.overlapWithPrevious, 0);
  EXPECT_EQ(second.overlapWithPrevious, first.cycles + second.cycles - *together);
  EXPECT_GT(second.overlapWithPrevious, 0);
  double sum = 0, overlaps = 0;
  for (const auto& l : profile.layers) {
    sum += static_cast<double>(l.cycles);
    overlaps += static_cast<double>(l.overlapWithPrevious);
  }
  for (int pp : {1, 2}) {
    auto stages = assignStages(profile, pp);
    ASSERT_TRUE(stages.ok());
    const PlanCost cost = evaluateCandidate(profile, {TensorSplit::kNone, 1, 1, pp, 1, 1}, *stages, {}, c.chip(), 16);
    if (pp == 1) EXPECT_DOUBLE_EQ(cost.iterationCycles, sum - overlaps);
    else EXPECT_GT(cost.chunkCycles, (sum - overlaps) / 2);  // the second stage's first layer overlaps nothing
  }
}

// The profile's compiles go to a LayerCompileBatch in one batch ahead of its walk over the layers:
// a batch that compiles its jobs in another order (as ranks dealt them would) gives the same
// profile, and holds each distinct layer, its batch shares, its sends and each distinct pair once.
TEST(CostModel, ProfileIsTheSameWhateverRunsItsCompileBatch) {
  const auto c = cluster(kFreeRing);
  const auto g = model("mlp", {{"layers", "4"}, {"hidden", "1024"}, {"batch", "16"}});
  const auto here = profileOf(g, c, 16);
  std::vector<int> batchSizes;
  const LayerCompileBatch reversed = reversedBatch(batchSizes);
  auto dealt = profileModel(g, c.chip(), 16, {}, searchedWidths(kWidestSplit), reversed);
  ASSERT_TRUE(dealt.ok()) << dealt.error().format();
  // 3 distinct layers (the first reads the model's input, the last has no ReLU), each alone and at
  // 1/2, 1/4, 1/8 and 1/16 of the batch, the two that send on with their sends; 3 distinct pairs.
  std::vector<std::vector<ir::OpId>> ops(4);
  for (size_t i = 0; i < g.ops().size(); ++i) ops.at(g.op(i).layer).push_back(static_cast<ir::OpId>(i));
  std::set<std::string> distinct, pairs;
  for (int l = 0; l < 4; ++l) distinct.insert(layerSignature(g, ops[l]));
  for (int l = 1; l < 4; ++l) pairs.insert(layerSignature(g, ops[l - 1]) + "|" + layerSignature(g, ops[l]));
  ASSERT_EQ(distinct.size(), 3u);
  ASSERT_EQ(pairs.size(), 3u);
  ASSERT_EQ(batchSizes, std::vector<int>({3 * (1 + 4) + 2 + 3}));
  ASSERT_EQ(dealt->layers.size(), here.layers.size());
  for (size_t l = 0; l < here.layers.size(); ++l) {
    EXPECT_EQ(dealt->layers[l].cycles, here.layers[l].cycles);
    EXPECT_EQ(dealt->layers[l].batchCycles, here.layers[l].batchCycles);
    EXPECT_EQ(dealt->layers[l].overlapWithPrevious, here.layers[l].overlapWithPrevious);
    EXPECT_EQ(dealt->layers[l].sendHiddenPerShare, here.layers[l].sendHiddenPerShare);
    EXPECT_EQ(dealt->layers[l].installCycles, here.layers[l].installCycles);
  }
  EXPECT_GT(here.layers[1].overlapWithPrevious, 0);
  EXPECT_GE(here.layers[0].sendHiddenPerShare, 0);
}

// A layer too large for one chip is compiled op by op in pieces, and at each width its rank's layer
// once that fits: those compiles go to the LayerCompileBatch too (a batch of the pieces after the
// layers', then one of the rank layers of every width), and a batch compiled in another order
// gives the same profile.
TEST(CostModel, PiecewiseAndRankLayerCompilesGoToTheBatch) {
  const auto c = cluster(kFreeRing);
  const auto g = model("llama", {{"layers", "1"}, {"hidden", "4096"}, {"heads", "32"}, {"kv_heads", "8"},
                                 {"ffn", "11008"}, {"seq", "1"}, {"phase", "decode"}, {"context", "128"},
                                 {"vocab", "512"}});
  const int costedTp = 8;
  auto here = profileModel(g, c.chip(), 1, {}, searchedWidths(costedTp));
  ASSERT_TRUE(here.ok()) << here.error().format();
  std::vector<int> batchSizes;
  const LayerCompileBatch reversed = reversedBatch(batchSizes);
  auto dealt = profileModel(g, c.chip(), 1, {}, searchedWidths(costedTp), reversed);
  ASSERT_TRUE(dealt.ok()) << dealt.error().format();
  EXPECT_GE(here->piecewiseLayers, 1);
  ASSERT_EQ(batchSizes.size(), 3u);
  EXPECT_GT(batchSizes[1], 0);
  EXPECT_GT(batchSizes[2], 0);
  ASSERT_EQ(dealt->layers.size(), here->layers.size());
  int ranked = 0;
  for (size_t l = 0; l < here->layers.size(); ++l) {
    EXPECT_EQ(dealt->layers[l].cycles, here->layers[l].cycles);
    forEachWidth(here->layers[l], dealt->layers[l], [&](TensorSplit, int tp, const auto& a, const auto& b) {
      EXPECT_EQ(a.rankCycles, b.rankCycles) << "layer " << l << " tp " << tp;
      ranked += a.rankCycles > 0;
    });
  }
  EXPECT_GT(ranked, 0);
}

// A given plan's profile (planWidths) compiles the rank layers of its own split and width only:
// fewer compiles than a search's profile, the same figures at that width, the same plan cost.
TEST(CostModel, GivenPlansProfileMeasuresItsOwnWidthOnly) {
  const auto c = cluster(kFreeRing);
  const auto g = model("llama", {{"layers", "1"}, {"hidden", "4096"}, {"heads", "32"}, {"kv_heads", "8"},
                                 {"ffn", "11008"}, {"seq", "1"}, {"phase", "decode"}, {"context", "128"},
                                 {"vocab", "512"}});
  std::vector<int> searchedBatches, givenBatches;
  auto searched = profileModel(g, c.chip(), 1, {}, searchedWidths(8), reversedBatch(searchedBatches));
  auto given = profileModel(g, c.chip(), 1, {}, planWidths(TensorSplit::kMegatron, 4, 8), reversedBatch(givenBatches));
  ASSERT_TRUE(searched.ok()) << searched.error().format();
  ASSERT_TRUE(given.ok()) << given.error().format();
  ASSERT_EQ(searchedBatches.size(), 3u);
  ASSERT_EQ(givenBatches.size(), 3u);
  EXPECT_EQ(givenBatches[0], searchedBatches[0]);
  EXPECT_EQ(givenBatches[1], searchedBatches[1]);
  EXPECT_GT(givenBatches[2], 0);
  EXPECT_LT(givenBatches[2], searchedBatches[2]);  // the rank layers of tp 4 only
  ASSERT_EQ(given->layers.size(), searched->layers.size());
  int ranked = 0;
  for (size_t l = 0; l < given->layers.size(); ++l)
    forEachWidth(given->layers[l], searched->layers[l], [&](TensorSplit split, int tp, const auto& a, const auto& b) {
      EXPECT_EQ(a.allReduceBytes, b.allReduceBytes);
      EXPECT_EQ(a.rank.weightBytes, b.rank.weightBytes);
      if (split == TensorSplit::kMegatron && tp == 4) {
        EXPECT_EQ(a.rankCycles, b.rankCycles) << "layer " << l;
        ranked += a.rankCycles > 0;
      } else {
        EXPECT_EQ(a.rankCycles, 0) << "layer " << l << " split " << static_cast<int>(split) << " tp " << tp;
      }
    });
  EXPECT_GT(ranked, 0);
  auto order = localityOrder(c);
  ASSERT_TRUE(order.ok());
  const Candidate plan{TensorSplit::kMegatron, 1, 4, 1, 1, 1};
  RankedPlan fromSearched, fromGiven;
  ASSERT_TRUE(buildPlan(c, *searched, plan, *order, &fromSearched).ok());
  ASSERT_TRUE(buildPlan(c, *given, plan, *order, &fromGiven).ok());
  EXPECT_GT(fromGiven.cost.iterationCycles, 0);
  EXPECT_EQ(fromGiven.cost.iterationCycles, fromSearched.cost.iterationCycles);
  EXPECT_EQ(fromGiven.cost.memoryPerChip, fromSearched.cost.memoryPerChip);
}

// A layer of a batch of one has no share of the batch to find its latency in, so a FLOP share of
// it would divide its chain of small ops' latencies by the width too: at the plan's width its rank
// layer is compiled as the plan runs it (the runs of ops between its collectives), and a rank's
// compute is that, more than half of the layer at tp 2.
TEST(CostModel, BatchOfOneCostsTheRankLayerAsCompiled) {
  const auto c = cluster(kFreeRing);
  const auto g = model("llama", {{"layers", "2"}, {"hidden", "256"}, {"heads", "8"}, {"kv_heads", "2"},
                                 {"ffn", "512"}, {"seq", "64"}, {"vocab", "512"}, {"batch", "1"}});
  auto profile = profileModel(g, c.chip(), 1, {}, planWidths(TensorSplit::kMegatron, 2, 2));
  ASSERT_TRUE(profile.ok()) << profile.error().format();
  const Candidate tp2{TensorSplit::kMegatron, 1, 2, 1, 1, 1};
  int ranked = 0;
  for (const auto& layer : profile->layers) {
    const auto* two = layer.figuresAt(TensorSplit::kMegatron, 2);
    ASSERT_TRUE(two);
    if (layer.batchCycles.size() >= 2 || two->allReduces == 0) continue;
    ++ranked;
    EXPECT_GT(two->rankCycles, layer.cycles / 2);
    EXPECT_DOUBLE_EQ(layerShare(layer, tp2, {}).compute, static_cast<double>(two->rankCycles));
  }
  EXPECT_EQ(ranked, 2);
}

// A tensor split shrinks the part of a layer's cycles that shrinks with its rows and its weights'
// tiles; what stays at zero rows beyond the weight tiles (op latencies, pipeline fill) stays whole
// on every rank.
TEST(CostModel, TensorSplitKeepsTheLayersLatencyWhole) {
  LayerProfile layer;
  layer.cycles = 4000;
  layer.batchCycles = {{0.5, 3000}, {1.0, 4000}};  // 2000 cycles at zero rows
  layer.weightInstallCycles = 500;                  // of which 500 are weight tiles
  const Candidate tp2{TensorSplit::kMegatron, 1, 2, 1, 1, 1};
  EXPECT_DOUBLE_EQ(layerShare(layer, tp2, {}).compute, 1500 + (4000 - 1500) / 2.0);
  const Candidate tp2m2{TensorSplit::kMegatron, 1, 2, 1, 2, 1};  // half the batch per microbatch: 3000 cycles
  EXPECT_DOUBLE_EQ(layerShare(layer, tp2m2, {}).compute, 1500 + (3000 - 1500) / 2.0);
  layer.batchCycles.clear();  // not measured: the split divides everything
  EXPECT_DOUBLE_EQ(layerShare(layer, tp2, {}).compute, 2000);
}

TEST(CostModel, InterleavingDividesTheBubbleByV) {
  // A synthetic profile of 16 equal layers with no communication: bubble (p-1)/(m v + p - 1).
  ModelProfile profile;
  profile.samples = 64;
  profile.layers.assign(16, LayerProfile{});
  for (auto& l : profile.layers) l.cycles = 10000;
  const auto c = cluster(kFreeRing);
  for (int v : {1, 2, 4}) {
    auto stages = assignStages(profile, 4 * v);
    ASSERT_TRUE(stages.ok());
    const PlanCost cost = evaluateCandidate(profile, {TensorSplit::kNone, 1, 1, 4, 8, v}, *stages, {}, c.chip(), 16);
    EXPECT_NEAR(cost.bubbleFraction, 3.0 / (8.0 * v + 3.0), 1e-9) << "v " << v;
  }
}

// An interleaved pipeline's chips run their own chunks back to back in the forward order: chunks
// of 3,000, 2,000, 2,000 and 1,000 cycles over 2 chips and 4 microbatches take 4 x (3,000 + 2,000)
// on the first chip and the last chunk's 1,000 after it (21,000), where (m v - 1) t_max + the
// chips' longest chunks gives 26,000; equal chunks of 2,000 take (m v + p - 1) t either way.
TEST(CostModel, InterleavedChipsRunTheirOwnChunksInTurn) {
  ModelProfile profile;
  profile.samples = 4;
  profile.layers.assign(4, LayerProfile{});
  const std::vector<Cycle> cycles = {12000, 8000, 8000, 4000};
  const auto c = cluster(kFreeRing);
  const Candidate cand{TensorSplit::kNone, 1, 1, 2, 4, 2};
  for (bool equal : {false, true}) {
    for (int l = 0; l < 4; ++l) profile.layers[l].cycles = equal ? 8000 : cycles[l];
    auto stages = assignStages(profile, 4);
    ASSERT_TRUE(stages.ok());
    ASSERT_EQ(stages->layerChunk, (std::vector<int>{0, 1, 2, 3}));
    const PlanCost cost = evaluateCandidate(profile, cand, *stages, {}, c.chip(), 16);
    EXPECT_NEAR(cost.iterationCycles, equal ? 18000 : 21000, 1e-6) << (equal ? "equal" : "unequal");
  }
}

TEST(CostModel, MegatronPairsMatmulsIntoAllReduces) {
  const auto c = cluster(kFreeRing);
  const auto g = model("gpt", {{"layers", "2"}, {"hidden", "256"}, {"heads", "4"}, {"seq", "64"}, {"vocab", "512"}});
  const auto profile = profileOf(g, c, 1);
  // A GPT block as the runtime's sharding splits it (query, key, value and fc1 column-parallel,
  // out-proj and fc2 row-parallel, attention by heads): Megatron's two all-reduces of B s h per block (the out-proj's
  // and fc2's) and nothing gathered; bytes as the links carry them (a 512-byte row of 256 FP16
  // values is two 320-byte vectors), and the block's output leaves replicated.
  const auto& block = profile.layers[1];
  EXPECT_EQ(block.weightMatmuls, 6);
  EXPECT_EQ(block.allReduces, 2);
  EXPECT_EQ(block.allReduceBytes, 2 * 64 * 2 * 320);
  EXPECT_EQ(block.allGathers, 0);
  EXPECT_EQ(block.allGatherBytes, 0);
  EXPECT_FALSE(block.outputSplit);
  EXPECT_TRUE(profile.chain);
}

// The figures at each width are the runtime's sharding at that width: a Llama block with 2 KV heads
// splits attention by heads over 2 chips; over 4 the KV heads do not divide, so they split in
// whole-head blocks (the last two ranks hold padding for attention): nothing is gathered, one
// rank's compute share is above 1/4, and the weights one rank holds still shrink with tp.
TEST(CostModel, MegatronFiguresAreTheShardingsAtEachWidth) {
  const auto c = cluster(kFreeRing);
  const auto g = model("llama", {{"layers", "2"}, {"hidden", "256"}, {"heads", "8"}, {"kv_heads", "2"},
                                 {"ffn", "512"}, {"seq", "64"}, {"vocab", "512"}});
  const auto profile = profileOf(g, c, 1);
  const auto& block = profile.layers[1];
  const auto* two = block.figuresAt(TensorSplit::kMegatron, 2);
  const auto* four = block.figuresAt(TensorSplit::kMegatron, 4);
  ASSERT_TRUE(two && four);
  EXPECT_EQ(two->allGathers, 0);
  EXPECT_EQ(four->allGathers, 0);
  // One rank's compute share, from its graph: the norms stay whole on every rank, so above 1/tp.
  EXPECT_GT(two->computeShare, 0.5);
  EXPECT_LT(two->computeShare, 1.0);
  EXPECT_GT(four->computeShare, two->computeShare / 2);  // the padding heads compute too
  EXPECT_LT(four->rank.weightBytes, two->rank.weightBytes);
  // The tp = 2 figures are also the fields the other splits' code reads.
  EXPECT_EQ(block.allReduces, two->allReduces);
  EXPECT_EQ(block.allGathers, two->allGathers);
  // Over 8 as over 4: the KV heads in whole-head blocks, nothing gathered.
  const auto* eight = block.figuresAt(TensorSplit::kMegatron, 8);
  ASSERT_TRUE(eight);
  EXPECT_EQ(eight->allGathers, four->allGathers);
  // Candidates see it: Megatron over 4 chips costs more per rank than half of Megatron over 2.
  auto stages = assignStages(profile, 1);
  ASSERT_TRUE(stages.ok());
  CandidateLinks links;
  const auto share = [&](int tp) { return layerShare(block, {TensorSplit::kMegatron, 1, tp, 1, 1, 1}, links).compute; };
  EXPECT_GT(share(4), 0.5 * share(2) * 1.04);
}

// torch exports nn.Linear as a MatMul on Transpose(W), W stored [out, in]. Such a matmul is a weight
// matmul like one on the weight stored [in, out]: the same installs, the same Megatron figures (the
// second matmul's all-reduce), and a tensor-parallel plan costs its collective.
TEST(CostModel, WeightReadThroughATransposeIsAWeightMatmul) {
  const auto c = cluster("{topology: {kind: fully-connected, chips: 2}, link: {lanes: 4, gbps_per_lane: 30, latency_ns: 250}}");
  auto mlp = [](bool transposed) {
    ir::Graph g;
    ir::TensorId x = g.addInput("x", {64, 256}, ir::DType::kF16);
    const std::vector<std::pair<std::int64_t, std::int64_t>> dims{{256, 512}, {512, 256}};
    for (int l = 0; l < 2; ++l) {
      const auto [in, out] = dims[l];
      const std::string name = "fc" + std::to_string(l);
      ir::TensorId w = g.addWeight(name + ".weight", transposed ? std::vector<std::int64_t>{out, in}
                                                                : std::vector<std::int64_t>{in, out}, ir::DType::kF16);
      if (transposed)
        w = *g.addOp(ir::OpKind::kTranspose, name + ".t", {w}, {{"perm", std::vector<std::int64_t>{1, 0}}}, l);
      x = *g.addOp(ir::OpKind::kRelu, name + ".relu", {*g.addOp(ir::OpKind::kMatMul, name, {x, w}, l)}, l);
    }
    g.markOutput(x);
    return g;
  };
  const auto stored = profileOf(mlp(false), c, 1);
  const auto read = profileOf(mlp(true), c, 1);
  ASSERT_TRUE(read.hasWeightMatmul);
  ASSERT_EQ(read.layers.size(), stored.layers.size());
  for (size_t l = 0; l < read.layers.size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const auto& a = read.layers[l];
    const auto& b = stored.layers[l];
    EXPECT_EQ(a.weightMatmuls, 1);
    EXPECT_EQ(a.installCycles, b.installCycles);
    EXPECT_EQ(a.weightInstallCycles, b.weightInstallCycles);
    const auto* ta = a.figuresAt(TensorSplit::kMegatron, 2);
    const auto* tb = b.figuresAt(TensorSplit::kMegatron, 2);
    ASSERT_TRUE(ta && tb);
    EXPECT_EQ(ta->allReduces, tb->allReduces);
    EXPECT_EQ(ta->allReduceBytes, tb->allReduceBytes);
    EXPECT_EQ(ta->rank.weightBytes, tb->rank.weightBytes);
  }
  EXPECT_EQ(read.layers[1].allReduces, 1);
  Plan plan;
  plan.tp = 2;
  plan.split = TensorSplit::kMegatron;
  plan.stageFirstLayer = {0};
  plan.stageChip = {0};
  plan.placement = {0, 1};
  auto costed = evaluatePlan(c, read, plan);
  ASSERT_TRUE(costed.ok()) << costed.error().format();
  EXPECT_GT(costed->cost.commShare, 0.0);
}

// Consecutive layers with no collective between them run as one program on every rank (the
// cluster schedule compiles each run of compute ops between collectives as one segment), so a
// tensor-parallel plan overlaps them as one chip does. Convolutions, which Megatron leaves whole,
// then a classifier whose column-split output leaves the graph split: no collective anywhere, and
// tp 2 costs no more than one chip.
TEST(CostModel, LayersWithoutCollectivesOverlapOnEveryRank) {
  const auto c = cluster("{topology: {kind: fully-connected, chips: 2}, link: {lanes: 4, gbps_per_lane: 30, latency_ns: 250}}");
  ir::Graph g;
  const ir::Attrs pads{{"pads", std::vector<std::int64_t>{1, 1, 1, 1}}};
  ir::TensorId x = g.addInput("x", {1, 64, 28, 28}, ir::DType::kF16);
  for (int l = 0; l < 3; ++l) {
    const auto w = g.addWeight("conv" + std::to_string(l) + ".w", {64, 64, 3, 3}, ir::DType::kF16);
    x = *g.addOp(ir::OpKind::kRelu, "relu" + std::to_string(l),
                 {*g.addOp(ir::OpKind::kConv, "conv" + std::to_string(l), {x, w}, pads, l)}, l);
  }
  const auto pooled = *g.addOp(ir::OpKind::kGlobalAveragePool, "pool", {x}, 3);
  const auto flat = *g.addOp(ir::OpKind::kFlatten, "flatten", {pooled}, 3);
  const auto fc = g.addWeight("fc.w", {64, 640}, ir::DType::kF16);
  g.markOutput(*g.addOp(ir::OpKind::kMatMul, "fc", {flat, fc}, 3));
  const auto profile = profileOf(g, c, 1);
  ASSERT_TRUE(profile.hasWeightMatmul);
  Cycle overlap = 0;
  for (const auto& layer : profile.layers) {
    const auto* two = layer.figuresAt(TensorSplit::kMegatron, 2);
    ASSERT_TRUE(two);
    EXPECT_EQ(two->allReduces + two->allGathers, 0);
    overlap += layer.overlapWithPrevious;
  }
  ASSERT_GT(overlap, 0);
  auto cost = [&](int tp) {
    Plan plan;
    plan.tp = tp;
    plan.split = tp > 1 ? TensorSplit::kMegatron : TensorSplit::kNone;
    plan.stageFirstLayer = {0};
    plan.stageChip = {0};
    if (tp > 1) plan.placement = {0, 1};
    auto costed = evaluatePlan(c, profile, plan);
    EXPECT_TRUE(costed.ok()) << costed.error().format();
    return costed->cost.iterationCycles;
  };
  EXPECT_LE(cost(2), cost(1));
}

// The memory check counts what one rank's graph holds. A Llama decode step with 2 KV heads over 8
// ranks: the sharding keeps whole heads, so 2 ranks hold a KV head each (its group of query heads,
// its KV cache) and the other 6 hold zero padding of the same shape. The check at tp 8 is at least
// the materialised rank graph's bytes, well above the model's bytes / 8; on a chip whose SRAM holds
// the latter but not the former, tp 8 on one stage does not fit, and each stage of the smallest plan
// that fits holds its materialised shards.
TEST(CostModel, MemoryCheckCountsThePaddingOfUnevenSplits) {
  const auto c = cluster(kFreeRing);
  const auto g = model("llama", {{"layers", "2"}, {"hidden", "512"}, {"heads", "8"}, {"kv_heads", "2"},
                                 {"ffn", "512"}, {"vocab", "256"}, {"seq", "1"}, {"phase", "decode"},
                                 {"context", "2048"}});
  const auto profile = profileOf(g, c, 1);
  // The weights, constants and KV cache that rank 0's graph of a candidate (every rank's has its
  // shapes) holds on its fullest stage, counted on the materialised graph.
  const auto held = [&](const Candidate& cand) {
    Plan plan;
    plan.tp = cand.tp;
    plan.split = cand.split;
    auto ranks = tensorParallelGraphs(g, plan);
    EXPECT_TRUE(ranks.ok()) << (ranks.ok() ? "" : ranks.error().format());
    auto stages = assignStages(profile, cand.pp);
    EXPECT_TRUE(stages.ok());
    const ir::Graph& rank = ranks->graphs[0];
    std::vector<std::set<ir::TensorId>> leaves(cand.pp);
    std::vector<Bytes> bytes(cand.pp, 0);
    for (const auto& op : rank.ops()) {
      const int stage = stages->layerChunk[std::clamp(op.layer, 0, static_cast<int>(profile.layers.size()) - 1)];
      for (ir::TensorId t : op.inputs)
        if (rank.tensor(t).producer < 0 && rank.tensor(t).role != ir::TensorRole::kInput &&
            leaves[stage].insert(t).second)
          bytes[stage] += rank.tensor(t).bytes();
    }
    return *std::max_element(bytes.begin(), bytes.end());
  };
  auto one = assignStages(profile, 1);
  ASSERT_TRUE(one.ok());
  const Candidate tp8{TensorSplit::kMegatron, 1, 8, 1, 1, 1};
  const Bytes checked = memoryPerChip(profile, tp8, *one);
  const Bytes whole = g.weightBytes() + g.stateBytes();
  EXPECT_GE(checked, held(tp8));
  EXPECT_GT(held(tp8), whole / 8 * 3 / 2);  // the padding is a large part of a rank's share
  // A chip whose allocatable SRAM holds the share of bytes / 8 (weights, KV cache, the largest
  // op's activations), with a margin, but not the padded blocks.
  Bytes peak = 0;
  for (const auto& layer : profile.layers) peak = std::max(peak, layer.peakBytes);
  const Bytes unpadded = (whole + peak) / 8;
  topology::ChipSpec small = c.chip();
  small.addressesPerSlice = 1;
  const Bytes row = allocatableSramBytes(small);
  small.addressesPerSlice = static_cast<int>((unpadded + checked) / 2 / row);
  const Bytes sram = allocatableSramBytes(small);
  ASSERT_LT(unpadded * 5 / 4, sram);
  ASSERT_GT(checked, sram);
  EXPECT_FALSE(evaluateCandidate(profile, tp8, *one, CandidateLinks{}, small, 64).fits);
  const Candidate smallest = smallestFittingPlan(profile, small, 16);
  ASSERT_GT(smallest.dp, 0);
  EXPECT_NE(smallest.canonical(), tp8.canonical());
  EXPECT_LE(held(smallest), sram) << smallest.canonical();
}

// A profile costed up to tp 8 holds the sharding figures at the widths up to 8 only; widened, it
// holds what the profile of every width holds, and the smallest fit is the same.
TEST(CostModel, WidenedProfileEqualsTheProfileOfEveryWidth) {
  const auto c = cluster(kFreeRing);
  const auto g = model("gpt", {{"layers", "2"}, {"hidden", "256"}, {"heads", "4"}, {"seq", "64"}, {"vocab", "512"}});
  const auto every = profileOf(g, c, 1);
  auto narrow = profileModel(g, c.chip(), 1, {}, searchedWidths(8));
  ASSERT_TRUE(narrow.ok());
  EXPECT_EQ(narrow->figuresUpTo, 8);
  auto widths = [](const std::map<int, LayerProfile::WidthFigures>& at) {
    std::vector<int> keys;
    for (const auto& entry : at) keys.push_back(entry.first);
    return keys;
  };
  ASSERT_EQ(narrow->layers.size(), every.layers.size());
  for (const auto& layer : narrow->layers) {
    EXPECT_EQ(widths(layer.megatronAt), (std::vector<int>{2, 4, 8}));
    EXPECT_EQ(widths(layer.gridAt), (std::vector<int>{4}));
  }
  ModelProfile wide = *narrow;
  widenProfile(g, c.chip(), wide);
  EXPECT_EQ(wide.figuresUpTo, kWidestSplit);
  for (size_t l = 0; l < every.layers.size(); ++l)
    for (TensorSplit split : {TensorSplit::kMegatron, TensorSplit::k2d}) {
      const auto& want = split == TensorSplit::kMegatron ? every.layers[l].megatronAt : every.layers[l].gridAt;
      ASSERT_EQ(widths(split == TensorSplit::kMegatron ? wide.layers[l].megatronAt : wide.layers[l].gridAt),
                widths(want));
      for (const auto& [tp, f] : want) {
        const auto* got = wide.layers[l].figuresAt(split, tp);
        ASSERT_NE(got, nullptr);
        EXPECT_EQ(got->allReduceBytes, f.allReduceBytes) << l << " tp " << tp;
        EXPECT_EQ(got->allGatherBytes, f.allGatherBytes) << l << " tp " << tp;
        EXPECT_EQ(got->rank.weightBytes, f.rank.weightBytes) << l << " tp " << tp;
        EXPECT_EQ(got->rank.peakBytes, f.rank.peakBytes) << l << " tp " << tp;
        EXPECT_DOUBLE_EQ(got->computeShare, f.computeShare) << l << " tp " << tp;
      }
    }
  for (size_t k = 0; k < every.sharedLeaves.size(); ++k)
    EXPECT_EQ(wide.sharedLeaves[k].rankBytesAt, every.sharedLeaves[k].rankBytesAt);
  // A chip so small that the smallest fit needs a width above 8.
  topology::ChipSpec small = c.chip();
  Candidate want;
  for (int rows = 64; rows >= 1; --rows) {
    small.addressesPerSlice = rows;
    want = smallestFittingPlan(every, small, kWidestSplit);
    if (want.dp == 0 || want.tp > 8) break;
  }
  ASSERT_GT(want.dp, 0) << small.addressesPerSlice;
  EXPECT_GT(want.tp, 8) << want.canonical();
  EXPECT_EQ(smallestFittingPlan(wide, small, kWidestSplit).canonical(), want.canonical());
}

// The causal mask every block reads and the tied embedding table are held once by a chip that
// runs several of their readers, not once per layer.
TEST(CostModel, ASharedConstantIsHeldOncePerChip) {
  const auto c = cluster(kFreeRing);
  const auto g = model("gpt", {{"layers", "4"}, {"hidden", "256"}, {"heads", "4"}, {"seq", "64"}, {"vocab", "512"}});
  const auto profile = profileOf(g, c, 1);
  Bytes overCount = 0;
  for (const auto& leaf : profile.sharedLeaves) overCount += leaf.bytes * (static_cast<Bytes>(leaf.layers.size()) - 1);
  const ir::Tensor& mask = g.tensor(*g.findTensor("causal_mask"));
  ASSERT_GE(profile.sharedLeaves.size(), 2u);
  EXPECT_GE(overCount, 3 * mask.bytes());
  auto counted = profile;
  counted.sharedLeaves.clear();
  auto stages = assignStages(profile, 1);
  ASSERT_TRUE(stages.ok());
  const Candidate one{TensorSplit::kNone, 1, 1, 1, 1, 1};
  EXPECT_EQ(memoryPerChip(counted, one, *stages) - memoryPerChip(profile, one, *stages), overCount);
}

TEST(CostModel, SpatialSplitsConvolutionsAndMegatronLeavesThemWhole) {
  const auto c = cluster(kFreeRing);
  const auto g = model("resnet50", {{"batch", "2"}, {"image", "64"}});
  const auto profile = profileOf(g, c, 2);
  ASSERT_TRUE(profile.hasConv);
  auto stages = assignStages(profile, 1);
  ASSERT_TRUE(stages.ok());
  CandidateLinks links;
  auto cost = [&](TensorSplit split, int tp) {
    return evaluateCandidate(profile, {split, 1, tp, 1, 1, 1}, *stages, links, c.chip(), 16);
  };
  const double alone = cost(TensorSplit::kNone, 1).iterationCycles;
  // With free links, a spatial split of 4 runs the convolutions (most of ResNet) 4 ways ...
  EXPECT_LT(cost(TensorSplit::kSpatial, 4).iterationCycles, 0.5 * alone);
  // ... while Megatron only splits the final matmul and its neighbours.
  EXPECT_GT(cost(TensorSplit::kMegatron, 4).iterationCycles, 0.8 * alone);
  // Convolution weights stay whole on every chip of either split.
  EXPECT_GT(cost(TensorSplit::kSpatial, 4).memoryPerChip, cost(TensorSplit::kNone, 1).memoryPerChip / 2);
}

TEST(CostModel, FallbackIsFlaggedWhenTheCompilerCannotLowerALayer) {
  const auto c = cluster(kFreeRing);
  // A convolution whose activations (256 MiB in, 64 MiB out) do not fit in one chip's SRAM beside each other,
  // with weights far too small for the piecewise estimate: its layer falls back to the flop estimate.
  ir::Graph g;
  const auto x = g.addInput("x", {1, 32, 2048, 2048}, ir::DType::kF16);
  const auto w = g.addWeight("w", {8, 32, 1, 1}, ir::DType::kF16);
  const ir::Attrs attrs{{"group", std::int64_t{1}}};
  g.markOutput(*g.addOp(ir::OpKind::kConv, "conv", {x, w}, attrs, 0));
  const auto profile = profileOf(g, c, 1);
  EXPECT_GT(profile.fallbackLayers, 0);
  EXPECT_FALSE(profile.fallbackReason.empty());
  for (const auto& l : profile.layers) EXPECT_GT(l.cycles, 0);
}

// A branchy CNN cut between two stages (as Inception's and DenseNet's cuts are): the stem's map is
// read by both layers of the second stage, the first branch's by its last. The cost model's stage
// sends are the bytes the cluster schedule sends: each channels-last map [N, C, H, W] as N*H*W
// rows of C, once however many layers of the next stage read it; and the first stage, its sends
// included, is costed within 20 % of its scheduled program.
TEST(CostModel, StageSendsAreTheMapsTheClusterScheduleSends) {
  const auto c = cluster("{topology: {kind: fully-connected, chips: 2}, link: {lanes: 4, gbps_per_lane: 30, latency_ns: 250}}");
  ir::Graph g;
  const ir::Attrs pads{{"pads", std::vector<std::int64_t>{1, 1, 1, 1}}};
  auto conv = [&](const std::string& name, ir::TensorId in, int layer) {
    const auto w = g.addWeight(name + ".w", {64, 64, 3, 3}, ir::DType::kF16);
    return *g.addOp(ir::OpKind::kConv, name, {in, w}, pads, layer);
  };
  const auto x = g.addInput("x", {1, 64, 28, 28}, ir::DType::kF16);
  const auto stem = *g.addOp(ir::OpKind::kRelu, "stem.relu", {conv("stem", x, 0)}, 0);
  const auto a = *g.addOp(ir::OpKind::kRelu, "a.relu", {conv("a", stem, 1)}, 1);
  const auto b = conv("b", stem, 2);
  const auto d = conv("d", stem, 3);
  g.markOutput(*g.addOp(ir::OpKind::kAdd, "sum", {*g.addOp(ir::OpKind::kAdd, "ab", {a, b}, 3), d}, 3));
  const auto profile = profileOf(g, c, 1);
  ASSERT_FALSE(profile.chain);
  Plan plan;
  plan.pp = 2;
  plan.stageFirstLayer = {0, 2};
  plan.stageChip = {0, 1};
  plan.layerChunk = {0, 0, 1, 1};
  auto scheduled = schedule::scheduleCluster(g, stagesOf(g, plan), c);
  ASSERT_TRUE(scheduled.ok()) << scheduled.error().format();
  Bytes sent = 0;
  for (const auto& t : scheduled->transfers) sent += t.bytes;
  // Two maps of 28 x 28 rows of 64 FP16 channels, one 320-byte vector each.
  EXPECT_EQ(sent, 2 * 28 * 28 * 320);
  EXPECT_EQ(planTraffic(profile, plan).stageBytes.at(0), sent);
  std::vector<Cycle> stageCycles;
  auto costed = evaluatePlan(c, profile, plan, &stageCycles);
  ASSERT_TRUE(costed.ok()) << costed.error().format();
  const double program = static_cast<double>(scheduled->programs.at(0).predictedCycles);
  EXPECT_NEAR(static_cast<double>(stageCycles.at(0)), program, 0.2 * program);
}

// The seed's DP written plainly, O(p n^2), ties to the earliest cut: the reference for ChainStages.
std::vector<int> plainDp(const std::vector<Cycle>& cost, int stages) {
  const int n = static_cast<int>(cost.size());
  std::vector<Cycle> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  const Cycle inf = std::numeric_limits<Cycle>::max();
  std::vector<std::vector<Cycle>> best(stages + 1, std::vector<Cycle>(n + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int p = 1; p <= stages; ++p)
    for (int i = p; i <= n; ++i)
      for (int j = p - 1; j < i; ++j)
        if (best[p - 1][j] != inf && std::max(best[p - 1][j], prefix[i] - prefix[j]) < best[p][i]) {
          best[p][i] = std::max(best[p - 1][j], prefix[i] - prefix[j]);
          cut[p][i] = j;
        }
  std::vector<int> first(stages);
  for (int p = stages, i = n; p >= 1; --p) i = first[p - 1] = cut[p][i];
  return first;
}

TEST(StagePartition, ChainTableEqualsThePlainDpForEveryChunkCount) {
  std::uint64_t state = 12345;
  auto next = [&] { return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<Cycle> cost(1 + next() % 30);
    for (auto& c : cost) c = static_cast<Cycle>(next() % 4 == 0 ? 0 : next() % 50);  // zeros make ties
    ChainStages table(cost);
    for (int chunks = static_cast<int>(cost.size()); chunks >= 1; --chunks)
      EXPECT_EQ(table.firstLayers(chunks), plainDp(cost, chunks)) << "trial " << trial << " chunks " << chunks;
  }
}

TEST(StagePartition, DagStagesOnlyMoveForward) {
  // Six layers with skip edges 0->3 and 2->5 (not a chain): METIS, then the forward fix-up.
  ModelProfile profile;
  profile.chain = false;
  profile.layers.assign(6, LayerProfile{});
  for (int l = 0; l < 6; ++l) profile.layers[l].cycles = 1000 * (l + 1);
  for (int l = 0; l + 1 < 6; ++l) profile.edges.push_back({l, l + 1, 4096});
  profile.edges.push_back({0, 3, 1 << 20});
  profile.edges.push_back({2, 5, 1 << 20});
  for (int chunks = 2; chunks <= 4; ++chunks) {
    auto stages = partitionDagStages(profile, chunks);
    ASSERT_TRUE(stages.ok());
    for (const auto& e : profile.edges) EXPECT_LE(stages->layerChunk[e.from], stages->layerChunk[e.to]);
    for (int k : stages->layerChunk) EXPECT_LT(k, chunks);
    EXPECT_GT(*std::max_element(stages->layerChunk.begin(), stages->layerChunk.end()), 0);
  }
}

// A layer every later layer reads (an attention mask, a stem's output): the heavy edges from it
// pull METIS's parts together and the forward fix-up moves every layer into one chunk; the stages
// then split the layers in their order, and every chunk holds layers.
TEST(StagePartition, EveryChunkHoldsLayersWhenOneLayerFeedsAll) {
  for (int layers = 3; layers <= 5; ++layers) {
    ModelProfile profile;
    profile.chain = false;
    profile.layers.assign(layers, LayerProfile{});
    for (int l = 0; l < layers; ++l) profile.layers[l].cycles = l == 0 ? 100 : 5000;
    for (int l = 0; l + 1 < layers; ++l) profile.edges.push_back({l, l + 1, 4096});
    for (int l = 2; l < layers; ++l) profile.edges.push_back({0, l, 1 << 20});
    auto metis = partitionDagStages(profile, 2);
    ASSERT_TRUE(metis.ok());
    EXPECT_EQ(std::set<int>(metis->layerChunk.begin(), metis->layerChunk.end()).size(), 1u) << layers << " layers";
    for (int chunks = 2; chunks <= layers; ++chunks) {
      auto stages = assignStages(profile, chunks);
      ASSERT_TRUE(stages.ok());
      EXPECT_EQ(std::set<int>(stages->layerChunk.begin(), stages->layerChunk.end()).size(), static_cast<size_t>(chunks))
          << layers << " layers, " << chunks << " chunks";
      for (const auto& e : profile.edges) EXPECT_LE(stages->layerChunk[e.from], stages->layerChunk[e.to]);
    }
  }
}

TEST(Placement, TensorGroupsTakeTightBlocksOfAMesh) {
  const auto c = cluster("{topology: {kind: mesh, dims: [4, 4]}}");
  auto order = localityOrder(c);
  ASSERT_TRUE(order.ok());
  std::vector<int> sorted = *order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(sorted[i], i);
  // Every group of 4 consecutive chips in the order lies within 2 hops of each other (a 2x2 block
  // or a row); a random order would not.
  for (int g = 0; g < 4; ++g)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) EXPECT_LE(c.hops((*order)[4 * g + i], (*order)[4 * g + j]), 3);
  auto placed = placePlan(c, *order, 4, 4, 1);
  ASSERT_TRUE(placed.ok());
  const auto links = linkFigures(c, *placed, 4, 4, 1, 1, true);
  EXPECT_LE(links.tp.maxHops, 3);
}

// The cycles of the scheduler's multi-ring all-reduce of `bytes` per chip over every chip of `c`
// (in chip order), after checking that the scheduler picks it; -1 when it does not.
double scheduledMultiRing(const topology::Cluster& c, const std::vector<int>& chips, std::int64_t bytes) {
  const auto op = schedule::CollectiveOp::kAllReduce;
  if (schedule::chooseAlgorithm(op, chips, bytes, c) != schedule::CollectiveAlgorithm::kMultiRing) return -1;
  auto plan = schedule::planCollective(op, schedule::CollectiveAlgorithm::kMultiRing, chips, bytes, c);
  if (!plan.ok()) return -1;
  auto scheduled = schedule::scheduleCollective(*plan, c, false);
  return scheduled.ok() ? static_cast<double>(scheduled->cycles) : -1;
}

TEST(Placement, WholeRingGroupIsChargedTheMultiRingTheSchedulerRuns) {
  // A TP group of every chip of a ring: the scheduler all-reduces it as a multi-ring (both
  // directions, half the data each); the cost model charges that, not a one-direction ring.
  const auto c = cluster("{topology: {kind: ring, chips: 4}, link: {lanes: 4, gbps_per_lane: 30, latency_ns: 250}}");
  const std::vector<int> chips = {0, 1, 2, 3};
  const std::int64_t bytes = 71680;
  const double cycles = scheduledMultiRing(c, chips, bytes);
  ASSERT_GT(cycles, 0);
  const auto links = linkFigures(c, chips, 1, 4, 1, 1, true);
  EXPECT_FALSE(links.tp.fitPoints.empty());
  EXPECT_NEAR(allReduceCycles(4, static_cast<double>(bytes), links.tp), cycles, 0.05 * cycles);
  LinkFigures oneWay = links.tp;
  oneWay.fitPoints.clear();
  EXPECT_GT(allReduceCycles(4, static_cast<double>(bytes), oneWay), 1.3 * cycles);
}

TEST(Placement, WholeRingReplicaGroupIsChargedTheMultiRingTheSchedulerRuns) {
  // Four replicas on every chip of a ring: the training step all-reduces their gradient buckets as a
  // multi-ring, and the replicas' figures carry the scheduler's own fit for it.
  const auto c = cluster("{topology: {kind: ring, chips: 4}, link: {lanes: 4, gbps_per_lane: 30, latency_ns: 250}}");
  const std::vector<int> chips = {0, 1, 2, 3};
  const std::int64_t bytes = std::int64_t{1} << 20;
  const double cycles = scheduledMultiRing(c, chips, bytes);
  ASSERT_GT(cycles, 0);
  const auto links = linkFigures(c, chips, 4, 1, 1, 1, true);
  ASSERT_FALSE(links.dp.fitPoints.empty());
  EXPECT_NEAR(allReduceCycles(4, static_cast<double>(bytes), links.dp), cycles, 0.05 * cycles);
  // Two replicas of a ring of 4 are not the whole ring: the ring's figures, no fit.
  EXPECT_TRUE(linkFigures(c, chips, 2, 1, 2, 1, true).dp.fitPoints.empty());
}

TEST(Placement, DragonflyKeepsIdOrderAndReportsHops) {
  const auto c = cluster("{topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 2}}");
  auto order = localityOrder(c);
  ASSERT_TRUE(order.ok());
  for (int i = 0; i < c.chipCount(); ++i) EXPECT_EQ((*order)[i], i);
  auto placed = placePlan(c, *order, 2, 8, 4);
  ASSERT_TRUE(placed.ok());
  const auto report = reportPlacement(c, *placed, 2, 8, 4, 1000, {10, 10, 10});
  EXPECT_EQ(report.tpMaxHops, 1);  // a TP group of 8 is one fully connected node
  EXPECT_GT(report.linksUsed, 0);
  EXPECT_GT(report.busiestLinkBytes, 0);
}

Candidate bestPure(const topology::Cluster& c, const ModelProfile& profile, int which, RankedPlan& out) {
  // which: 0 pure DP, 1 pure TP (Megatron), 2 pure PP; the best one that fits, or chips 0.
  auto order = localityOrder(c);
  bool found = false;
  for (int n = 1; n <= c.chipCount(); ++n)
    for (int m = 1; m <= profile.samples; m *= 2) {
      Candidate cand{which == 1 && n > 1 ? TensorSplit::kMegatron : TensorSplit::kNone, which == 0 ? n : 1,
                     which == 1 ? n : 1, which == 2 ? n : 1, m, 1};
      if (cand.dp > 1 && profile.samples % cand.dp) continue;
      if (which == 1 && (n & (n - 1))) continue;
      if (static_cast<int>(profile.layers.size()) < cand.pp || (profile.samples / cand.dp) % m) continue;
      auto plan = buildPlan(c, profile, cand, *order);
      if (!plan) continue;
      auto ranked = evaluatePlan(c, profile, *plan);
      if (!ranked || !ranked->cost.fits) continue;
      if (!found || betterPlan("throughput", *ranked, out)) out = *ranked;
      found = true;
    }
  return found ? out.candidate : Candidate{TensorSplit::kNone, 0, 0, 0, 0, 0};
}

void expectNeverSlowerThanPure(const topology::Cluster& c, const ir::Graph& g, std::int64_t samples,
                               std::int64_t budget) {
  const auto profile = profileOf(g, c, samples);
  SearchOptions options;
  options.budget = budget;
  auto result = searchPlans(c, profile, options);
  ASSERT_TRUE(result.ok()) << result.error().format();
  EXPECT_LE(result->evaluated, budget);
  const RankedPlan& best = result->ranked.front();
  EXPECT_TRUE(best.exact);
  int compared = 0;
  for (int which = 0; which < 3; ++which) {
    RankedPlan pure;
    if (bestPure(c, profile, which, pure).dp == 0) continue;
    ++compared;
    EXPECT_GE(best.cost.throughput, pure.cost.throughput * (1 - 1e-9))
        << "searched " << best.candidate.canonical() << " vs pure " << pure.candidate.canonical() << " ("
        << result->method << ")";
  }
  EXPECT_GE(compared, 2);  // at least pure DP and pure PP fit these models
}

TEST(Search, NeverSlowerThanPureDpTpOrPpExhaustive) {
  const auto c = cluster("{topology: {kind: ring, chips: 8}}");
  expectNeverSlowerThanPure(c, model("mlp", {{"layers", "8"}, {"hidden", "2048"}, {"batch", "64"}}), 64, 100000);
  const auto gpt = model("gpt", {{"layers", "4"}, {"hidden", "512"}, {"heads", "8"}, {"seq", "128"}, {"batch", "4"},
                                 {"vocab", "1024"}});
  expectNeverSlowerThanPure(c, gpt, 4, 100000);
}

TEST(Search, NeverSlowerThanPureDpTpOrPpHierarchical) {
  const auto c = cluster("{topology: {kind: torus, dims: [4, 4]}}");
  const auto g = model("mlp", {{"layers", "16"}, {"hidden", "4096"}, {"batch", "64"}});
  const auto profile = profileOf(g, c, 64);
  SearchOptions options;
  options.budget = 300;
  auto result = searchPlans(c, profile, options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->method, "hierarchical");
  expectNeverSlowerThanPure(c, g, 64, 300);
}

TEST(Search, DeterministicAndTiesBrokenByCanonicalString) {
  const auto c = cluster("{topology: {kind: ring, chips: 8}}");
  const auto g = model("mlp", {{"layers", "4"}, {"hidden", "1024"}, {"batch", "16"}});
  const auto profile = profileOf(g, c, 16);
  auto a = searchPlans(c, profile, {});
  auto b = searchPlans(c, profile, {});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->ranked.size(), b->ranked.size());
  for (size_t i = 0; i < a->ranked.size(); ++i) EXPECT_EQ(a->ranked[i].candidate.canonical(), b->ranked[i].candidate.canonical());
  for (size_t i = 0; i + 1 < a->ranked.size(); ++i) EXPECT_FALSE(betterPlan("throughput", a->ranked[i + 1], a->ranked[i]));
  EXPECT_EQ(a->best.toYaml(), b->best.toYaml());
}

TEST(Search, ObjectivesChooseDifferently) {
  const auto c = cluster("{topology: {kind: ring, chips: 8}}");
  const auto g = model("mlp", {{"layers", "4"}, {"hidden", "1024"}, {"batch", "16"}});
  const auto profile = profileOf(g, c, 16);
  SearchOptions latency, chips;
  latency.objective = "latency";
  chips.objective = "chips";
  auto l = searchPlans(c, profile, latency);
  auto k = searchPlans(c, profile, chips);
  ASSERT_TRUE(l.ok() && k.ok());
  EXPECT_EQ(k->ranked.front().candidate.chips(), 1);
  EXPECT_GT(l->ranked.front().candidate.chips(), 1);  // splitting the batch over chips cuts latency
  for (const auto& r : l->ranked) EXPECT_GE(r.cost.latencySeconds, l->ranked.front().cost.latencySeconds);
}

TEST(Search, ModelThatFitsNowhereNamesTheSmallestChipCount) {
  const auto c = cluster("{topology: {kind: ring, chips: 2}}");
  const auto g = model("mlp", {{"layers", "2"}, {"hidden", "16384"}, {"batch", "8"}});
  const auto profile = profileOf(g, c, 8);
  auto result = searchPlans(c, profile, {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().code, ExitCode::kDoesNotFit);
  // 2 x 512 MiB of FP16 weights: 8 chips (tp 4 x pp 2) is the first split under 220 MiB each.
  EXPECT_NE(result.error().message.find("the smallest chip count that would fit is 8 (dp1-tp4-pp2"), std::string::npos)
      << result.error().message;
}

// An all-gather between threads standing in for MPI ranks (the runtime's gather uses MPI_Allgatherv).
class ThreadGather {
 public:
  explicit ThreadGather(int size) : size_(size) {}
  std::vector<EvaluatedCandidate> operator()(const std::vector<EvaluatedCandidate>& mine) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int generation = generation_;
    pool_.insert(pool_.end(), mine.begin(), mine.end());
    if (++arrived_ == size_) {
      result_ = pool_;
      pool_.clear();
      arrived_ = 0;
      ++generation_;
      done_.notify_all();
    } else {
      done_.wait(lock, [&] { return generation_ != generation; });
    }
    return result_;
  }

 private:
  int size_, arrived_ = 0, generation_ = 0;
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<EvaluatedCandidate> pool_, result_;
};

TEST(Search, RanksEvaluatingSlicesGiveTheSerialRanking) {
  const auto c = cluster("{topology: {kind: ring, chips: 8}}");
  const auto g = model("mlp", {{"layers", "4"}, {"hidden", "1024"}, {"batch", "16"}});
  const auto profile = profileOf(g, c, 16);
  SearchOptions options;
  for (std::int64_t budget : {100000, 60}) {  // exhaustive, then hierarchical
    options.budget = budget;
    auto serial = searchPlans(c, profile, options);
    ASSERT_TRUE(serial.ok());
    for (int size : {2, 3}) {
      ThreadGather gather(size);
      std::vector<std::optional<Expected<SearchResult>>> results(size);
      std::vector<std::thread> ranks;
      for (int r = 0; r < size; ++r)
        ranks.emplace_back([&, r] {
          SearchParallel parallel{r, size, [&](const std::vector<EvaluatedCandidate>& mine) { return gather(mine); }, {}};
          results[r].emplace(searchPlans(c, profile, options, parallel));
        });
      for (auto& t : ranks) t.join();
      for (int r = 0; r < size; ++r) {
        ASSERT_TRUE(results[r]->ok());
        const auto& mine = results[r]->value();
        EXPECT_EQ(mine.evaluated, serial->evaluated);
        ASSERT_EQ(mine.ranked.size(), serial->ranked.size());
        for (size_t i = 0; i < mine.ranked.size(); ++i) {
          EXPECT_EQ(mine.ranked[i].candidate.canonical(), serial->ranked[i].candidate.canonical());
          EXPECT_EQ(mine.ranked[i].cost.throughput, serial->ranked[i].cost.throughput);
        }
      }
    }
  }
}

// A signal stops the search where the ranks agree to (the gather): every rank's search ends there,
// interrupted, and runs nothing more on the candidates it holds (no fallback, no widening).
TEST(Search, StopsAtTheGatherWhereTheRanksAgreeToStop) {
  const auto c = cluster("{topology: {kind: ring, chips: 8}}");
  const auto g = model("mlp", {{"layers", "4"}, {"hidden", "1024"}, {"batch", "16"}});
  const auto profile = profileOf(g, c, 16);
  SearchOptions options;
  int widened = 0;
  options.widen = [&](const ModelProfile& p) {
    ++widened;
    return p;
  };
  for (int stopAt : {1, 2}) {
    int gathers = 0;
    SearchParallel parallel{0, 2, [&](const std::vector<EvaluatedCandidate>& mine) -> std::optional<std::vector<EvaluatedCandidate>> {
                              if (++gathers == stopAt) return std::nullopt;
                              return mine;
                            }, {}};
    auto stopped = searchPlans(c, profile, options, parallel);
    ASSERT_FALSE(stopped.ok());
    EXPECT_EQ(stopped.error().code, ExitCode::kInterrupted);
    EXPECT_EQ(gathers, stopAt);
  }
  EXPECT_EQ(widened, 0);
}

// Alone, the search stops on cancelRequested() before its candidates are all evaluated, interrupted
// (not a ranking of the few it evaluated, nor "does not fit" for those it did not).
TEST(Search, StopsWhenCancelledOnOneRank) {
  const auto c = cluster("{topology: {kind: ring, chips: 8}}");
  const auto g = model("mlp", {{"layers", "4"}, {"hidden", "1024"}, {"batch", "16"}});
  const auto profile = profileOf(g, c, 16);
  support::setCancelPoll([] { return true; });
  auto stopped = searchPlans(c, profile, {});
  support::setCancelPoll(nullptr);
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.error().code, ExitCode::kInterrupted);
  EXPECT_TRUE(searchPlans(c, profile, {}).ok());
}

TEST(PlanFile, RoundTripsThroughYaml) {
  const auto c = cluster("{topology: {kind: ring, chips: 8}}");
  const auto g = model("mlp", {{"layers", "8"}, {"hidden", "1024"}, {"batch", "16"}});
  const auto profile = profileOf(g, c, 16);
  auto order = localityOrder(c);
  ASSERT_TRUE(order.ok());
  for (const Candidate cand : {Candidate{TensorSplit::kMegatron, 2, 2, 2, 4, 1}, Candidate{TensorSplit::kNone, 1, 1, 4, 1, 2}}) {
    auto plan = buildPlan(c, profile, cand, *order);
    ASSERT_TRUE(plan.ok());
    const std::string path = std::string(TSP_BINARY_DIR) + "/roundtrip.plan.yaml";
    std::ofstream(path) << plan->toYaml();
    auto back = loadPlanFile(path);
    ASSERT_TRUE(back.ok()) << back.error().format();
    EXPECT_EQ(back->toYaml(), plan->toYaml());
    EXPECT_TRUE(checkPlan(*back, 8, c, path).ok());
    auto a = evaluatePlan(c, profile, *plan), b = evaluatePlan(c, profile, *back);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->cost.iterationCycles, b->cost.iterationCycles);
  }
}

// A plan's stage cycles are the cost model's stage times: over one iteration they make up its
// predicted time by the pipeline formula ((m - 1) t_max + one pass through the stages, t_max the
// longest stage per microbatch), TP collectives and sends included, not the layers' one-chip
// cycles over tp.
TEST(PlanFile, StageCyclesAreTheCostModelsStageTimes) {
  const auto c = cluster("{topology: {kind: ring, chips: 8}}");
  const auto g = model("gpt", {{"layers", "4"}, {"hidden", "256"}, {"heads", "4"}, {"seq", "64"}, {"batch", "8"}});
  const auto profile = profileOf(g, c, 8);
  auto order = localityOrder(c);
  ASSERT_TRUE(order.ok());
  for (const Candidate cand : {Candidate{TensorSplit::kMegatron, 1, 4, 2, 1, 1}, Candidate{TensorSplit::kMegatron, 1, 2, 2, 4, 1},
                               Candidate{TensorSplit::kNone, 1, 1, 4, 2, 1}}) {
    SCOPED_TRACE(cand.canonical());
    auto plan = buildPlan(c, profile, cand, *order);
    ASSERT_TRUE(plan.ok()) << plan.error().format();
    auto ranked = evaluatePlan(c, profile, *plan);
    ASSERT_TRUE(ranked.ok());
    ASSERT_EQ(plan->stageCycles.size(), static_cast<size_t>(cand.pp));
    double sum = 0, longest = 0, oneChip = 0;
    for (Cycle s : plan->stageCycles) {
      sum += static_cast<double>(s);
      longest = std::max(longest, static_cast<double>(s));
    }
    for (const auto& layer : profile.layers) oneChip += static_cast<double>(layer.cycles) / cand.tp;
    const double m = cand.microbatches;
    EXPECT_NEAR((m - 1) * longest / m + sum / m, ranked->cost.iterationCycles, cand.pp);
    if (cand.tp > 1) {
      EXPECT_GT(sum, 1.1 * oneChip);  // the all-reduces are in the stages' times
    }
  }
}

// One case per plan-file error message.
struct PlanFileError {
  const char* text;
  const char* message;
};

TEST(PlanFile, EveryErrorNamesWhere) {
  const PlanFileError cases[] = {
      {"dp: [1", "plan.yaml:1:1: YAML syntax error in the plan file"},
      {"- 1", "plan.yaml:1:1: the plan file must be a mapping"},
      {"dp: 1\nstage: []", "plan.yaml:2:1: unknown key 'stage' in 'plan'"},
      {"dp: 1\npp: 2", "plan.yaml:1:1: the plan needs a 'stages' list"},
      {"pp: 2\nstages: [{first_layer: 0, chip: 0}]", "plan.yaml:2:9: 'stages' has 1 entries but pp is 2"},
      {"pp: 2\nstages: [{first_layer: 0, chip: 0}, {first_layer: 0, chip: 1}]",
       "plan.yaml:2:51: stage 1: first_layer 0 must be 0 for the first stage and grow"},
      {"pp: 1\nstages: [{chip: 0}]", "plan.yaml:2:10: a stage needs 'first_layer' and 'chip'"},
      {"dp: 2\npp: 1\nstages: [{first_layer: 0, chip: 0}]\nplacement: [0]",
       "plan.yaml:4:12: 'placement' has 1 chips but dp x tp x pp is 2"},
  };
  const std::string path = std::string(TSP_BINARY_DIR) + "/plan.yaml";
  for (const auto& e : cases) {
    std::ofstream(path) << e.text;
    auto plan = loadPlanFile(path);
    ASSERT_FALSE(plan.ok()) << e.text;
    EXPECT_NE(plan.error().format().find(e.message), std::string::npos) << plan.error().format();
  }
  EXPECT_NE(loadPlanFile("/nonexistent/p.yaml").error().format().find("cannot open the plan file"), std::string::npos);
  const auto c = cluster("{topology: {kind: ring, chips: 4}}");
  Plan plan;
  plan.pp = 1;
  plan.stageFirstLayer = {0};
  plan.stageChip = {9};
  plan.stageCycles = {0};
  EXPECT_NE(checkPlan(plan, 2, c, "p.yaml").error().message.find("stage 0: chip 9 is not in the cluster (chips 0 to 3)"),
            std::string::npos);
  plan.stageChip = {0};
  plan.stageFirstLayer = {5};
  EXPECT_NE(checkPlan(plan, 2, c, "p.yaml").error().message.find("starts at layer 5 but the model has 2 layers"),
            std::string::npos);
  plan.stageFirstLayer = {0};
  plan.placement = {7};
  EXPECT_NE(checkPlan(plan, 2, c, "p.yaml").error().message.find("placement: chip 7 is not in the cluster"),
            std::string::npos);
  plan.placement.clear();
  plan.layerChunk = {0};
  EXPECT_NE(checkPlan(plan, 2, c, "p.yaml").error().message.find("layer_chunk has 1 entries but the model has 2"),
            std::string::npos);
}

}  // namespace
}  // namespace tsp::partition
