// Training steps of pipelined and data-parallel plans through the training cluster scheduler: pipeline bubbles
// against the event simulation of the same orders and against Megatron's formula, shared passes, all-reduce buckets.
#include <cstdio>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "compile/frontend/builtin_models.h"
#include "partition/pipeline_schedule.h"
#include "partition/training_step.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::partition {
namespace {

topology::Cluster ring(int chips, const std::string& link) {
  topology::YamlReader reader("ring.yaml");
  auto c = topology::loadCluster(reader, YAML::Load(fmt::format("topology: {{kind: ring, chips: {}}}\nlink: {}\n",
                                                                chips, link)));
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().format());
  return *c;
}

// A chain of identical layers (MatMul, Relu): every model stage does the same work.
ir::Graph uniformChain(int layers, std::int64_t rows, std::int64_t hidden) {
  ir::Graph g;
  ir::TensorId x = g.addInput("x", {rows, hidden}, ir::DType::kF16);
  for (int l = 0; l < layers; ++l) {
    const auto w = g.addWeight(fmt::format("w{}", l), {hidden, hidden}, ir::DType::kF16);
    x = *g.addOp(ir::OpKind::kRelu, fmt::format("relu{}", l),
                 {*g.addOp(ir::OpKind::kMatMul, fmt::format("fc{}", l), {x, w}, l)}, l);
  }
  g.markOutput(x);
  return g;
}

// A plan of p stages, m microbatches and v chunks per stage over chips 0..p-1, layers split evenly.
Plan pipelinePlan(int layers, int p, int m, int v, int dp = 1) {
  Plan plan;
  plan.dp = dp;
  plan.pp = p;
  plan.microbatches = m;
  plan.interleave = v;
  for (int s = 0; s < p; ++s) {
    plan.stageFirstLayer.push_back(s * layers / (p * v));
    plan.stageChip.push_back(s);
  }
  if (v > 1)
    for (int l = 0; l < layers; ++l) plan.layerChunk.push_back(l / (layers / (p * v)));
  for (int d = 0; d < dp && dp > 1; ++d)
    for (int s = 0; s < p; ++s) plan.placement.push_back(d * p + s);
  return plan;
}

struct BubbleCase {
  PipelineSchedule schedule;
  int p, m, v;
};

// The cycle-level schedule of a uniform chain against the event simulation of pipeline_schedule with
// the same pass cycles and Megatron's (1/v)(p-1)/m. Both lie below the formula: the first stage
// receives nothing and computes no input gradient, the last sends nothing, so the ends are lighter.
TEST(TrainingStep, UniformPipelineBubbleMatchesTheEventSimulationAndTheFormula) {
  // Fast links: the formula leaves communication out.
  const auto cluster = ring(4, "{gbps_per_lane: 3000, latency_ns: 10}");
  for (const BubbleCase& c : {BubbleCase{PipelineSchedule::kGPipe, 4, 8, 1}, BubbleCase{PipelineSchedule::k1F1B, 4, 8, 1},
                              BubbleCase{PipelineSchedule::k1F1B, 4, 16, 1},
                              BubbleCase{PipelineSchedule::kInterleaved, 4, 8, 2}}) {
    const int layers = 8 * c.v;
    const ir::Graph forward = uniformChain(layers, 256 * c.m, 640);
    TrainingConfig config;
    config.enabled = true;
    config.schedule = c.schedule;
    config.optimizer = ir::Optimizer::kNone;
    auto step = buildTrainingStep(forward, pipelinePlan(layers, c.p, c.m, c.v), config, false);
    ASSERT_TRUE(step.ok()) << step.error().format();
    auto scheduled = schedule::scheduleTrainingStep((*step)->workload, cluster);
    ASSERT_TRUE(scheduled.ok()) << scheduled.error().format();
    // One compile per distinct pass: each stage's forward and backward (and their few variants).
    EXPECT_LE(scheduled->cluster.compiledShards, 4 * c.p * c.v);
    EXPECT_EQ(scheduled->cluster.compiledShards + scheduled->cluster.sharedShards, 2 * c.p * c.v * c.m);
    auto order = buildPipelineOrder(c.schedule, c.p, c.m, c.v);
    ASSERT_TRUE(order.ok());
    PipelineCosts costs;
    for (int s = 0; s < c.p; ++s) {
      costs.forward.emplace_back(scheduled->forwardCycles[s].begin(), scheduled->forwardCycles[s].end());
      costs.backward.emplace_back(scheduled->backwardCycles[s].begin(), scheduled->backwardCycles[s].end());
    }
    costs.transfer = static_cast<double>(cluster.chip().c2cSendCycles + cluster.minLinkLatency());
    auto events = simulatePipeline(*order, costs);
    ASSERT_TRUE(events.ok());
    const double formula = (c.p - 1.0) / c.m / c.v;
    std::printf("%s p=%d m=%d v=%d: bubble %.4f cycle-level, %.4f event simulation, %.4f formula (%d passes compiled)\n",
                pipelineScheduleName(c.schedule), c.p, c.m, c.v, scheduled->bubbleFraction(), events->bubbleFraction(),
                formula, scheduled->cluster.compiledShards);
    // Never slower than the event simulation of the same order and pass cycles, which charges every
    // pass whole before its successor starts: the cycle level overlaps a backward pass's dW with the
    // previous stage's backward, which starts once dX has arrived.
    const double ratio = static_cast<double>(scheduled->pipelineCycles) / events->makespan;
    EXPECT_LE(ratio, 1.001);
    EXPECT_GE(ratio, 0.9);
    EXPECT_LT(scheduled->bubbleFraction(), formula);
    EXPECT_GT(scheduled->bubbleFraction(), 0.5 * formula);
  }
}

// Megatron's conjugate operators: with tp = 2 every transformer layer's backward pass all-reduces the
// gradients of the activations its column-parallel matmuls read (attention's QKV input, the MLP's
// input), and the step schedules with those collectives on the TP pair's chips.
TEST(TrainingStep, TensorParallelBackwardAllReducesTheColumnParallelInputs) {
  frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"layers", "2"}, {"hidden", "128"}, {"heads", "2"}, {"seq", "16"},
                 {"batch", "4"},  {"vocab", "256"},  {"dtype", "fp16"}};
  auto forward = frontend::buildBuiltinModel(spec);
  ASSERT_TRUE(forward.ok()) << forward.error().format();
  Plan plan = pipelinePlan(forward->layerCount(), 2, 2, 1);
  plan.tp = 2;
  plan.split = TensorSplit::kMegatron;
  plan.placement = {0, 1, 2, 3};  // stage s, TP rank t on chip 2 s + t
  TrainingConfig config;
  config.enabled = true;
  config.optimizer = ir::Optimizer::kSgd;
  auto step = buildTrainingStep(*forward, plan, config);
  ASSERT_TRUE(step.ok()) << step.error().format();
  ASSERT_EQ((*step)->workload.graphs.size(), 2u);
  const ir::Graph& g = (*step)->training.front().graph;
  std::map<int, int> backwardAllReduces;  // per layer
  int forwardAllReduces = 0;
  const auto& work = (*step)->workload;
  for (const auto& ops : work.backward)
    for (ir::OpId op : ops)
      if (g.op(op).kind == ir::OpKind::kAllReduce) {
        ++backwardAllReduces[g.op(op).layer];
        // The gradients of the LayerNorm outputs that QKV and fc1 read, nothing else.
        const std::string& name = g.op(op).name;
        EXPECT_TRUE(name.find(".norm1.out/grad") != std::string::npos || name.find(".norm2.out/grad") != std::string::npos)
            << name;
      }
  for (const auto& ops : work.forward)
    for (ir::OpId op : ops) forwardAllReduces += g.op(op).kind == ir::OpKind::kAllReduce;
  EXPECT_GT(forwardAllReduces, 0);
  for (int layer = 1; layer <= 2; ++layer) EXPECT_EQ(backwardAllReduces[layer], 2) << "layer " << layer;
  EXPECT_EQ(work.chips.front()[1], (std::vector<int>{2, 3}));
  const auto cluster = ring(4, "{latency_ns: 250}");
  auto scheduled = schedule::scheduleTrainingStep(work, cluster);
  ASSERT_TRUE(scheduled.ok()) << scheduled.error().format();
  EXPECT_GT(scheduled->cluster.collectives, 0);
  for (int c = 0; c < 4; ++c) EXPECT_GT(scheduled->cluster.programs[c].instructions.size(), 0u) << c;
}

}  // namespace
}  // namespace tsp::partition
