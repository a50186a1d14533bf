// Training steps of pipelined and data-parallel plans through the training cluster scheduler: pipeline bubbles
// against the event simulation of the same orders and against Megatron's formula, shared passes, all-reduce buckets.
#include <cstdio>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "compile/frontend/builtin_models.h"
#include "partition/pipeline_schedule.h"
#include "partition/training_step.h"
#include "sim/chip.h"
#include "sim/kokkos_environment.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::partition {
namespace {

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new sim::KokkosEnvironment);

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

// A chain like uniformChain whose every run of `chunk` layers (a model stage) widens from `narrow`
// columns to `hidden` in its first layer and narrows back in its last: every stage does the same
// work, and what crosses between stages (rows x narrow) is small next to it.
ir::Graph bottleneckChain(int layers, int chunk, std::int64_t rows, std::int64_t narrow, std::int64_t hidden) {
  ir::Graph g;
  ir::TensorId x = g.addInput("x", {rows, narrow}, ir::DType::kF16);
  for (int l = 0; l < layers; ++l) {
    const std::int64_t in = l % chunk == 0 ? narrow : hidden, out = l % chunk == chunk - 1 ? narrow : hidden;
    const auto w = g.addWeight(fmt::format("w{}", l), {in, out}, ir::DType::kF16);
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

// A uniform chain's training step (8 v layers of 640, 256 rows per microbatch) scheduled cycle by
// cycle on a ring with fast links (the formula leaves communication out), and the event simulation
// of pipeline_schedule on the same order with the scheduled pass cycles.
struct BubbleRun {
  double cycleLevel = 0, events = 0, formula = 0;
  Cycle shortestPass = 0, longestPass = 0;  // over stages: forward + backward of one microbatch
};

BubbleRun runBubble(const BubbleCase& c, bool equalStages) {
  BubbleRun out;
  const auto cluster = ring(4, "{gbps_per_lane: 3000, latency_ns: 10}");
  const int layers = (equalStages ? 12 : 2) * c.p * c.v;
  const ir::Graph forward = equalStages ? bottleneckChain(layers, 12, 128 * c.m, 160, 1536)
                                        : uniformChain(layers, 256 * c.m, 640);
  TrainingConfig config;
  config.enabled = true;
  config.schedule = c.schedule;
  config.optimizer = ir::Optimizer::kNone;
  config.inputGradients = equalStages;
  config.sendAfterPass = equalStages;
  auto step = buildTrainingStep(forward, pipelinePlan(layers, c.p, c.m, c.v), config, false);
  EXPECT_TRUE(step.ok()) << step.error().format();
  if (!step.ok()) return out;
  auto scheduled = schedule::scheduleTrainingStep((*step)->workload, cluster);
  EXPECT_TRUE(scheduled.ok()) << scheduled.error().format();
  if (!scheduled.ok()) return out;
  // One compile per distinct pass: each stage's forward and backward (and their few variants).
  EXPECT_LE(scheduled->cluster.compiledShards, 4 * c.p * c.v);
  EXPECT_EQ(scheduled->cluster.compiledShards + scheduled->cluster.sharedShards, 2 * c.p * c.v * c.m);
  auto order = buildPipelineOrder(c.schedule, c.p, c.m, c.v);
  EXPECT_TRUE(order.ok());
  PipelineCosts costs;
  out.shortestPass = -1;
  for (int s = 0; s < c.p; ++s) {
    costs.forward.emplace_back(scheduled->forwardCycles[s].begin(), scheduled->forwardCycles[s].end());
    costs.backward.emplace_back(scheduled->backwardCycles[s].begin(), scheduled->backwardCycles[s].end());
    Cycle pass = 0;
    for (int k = 0; k < c.v; ++k) pass += scheduled->forwardCycles[s][k] + scheduled->backwardCycles[s][k];
    out.shortestPass = out.shortestPass < 0 ? pass : std::min(out.shortestPass, pass);
    out.longestPass = std::max(out.longestPass, pass);
  }
  costs.transfer = static_cast<double>(cluster.chip().c2cSendCycles + cluster.minLinkLatency());
  auto events = simulatePipeline(*order, costs);
  EXPECT_TRUE(events.ok());
  out.cycleLevel = scheduled->bubbleFraction();
  out.events = events.ok() ? events->bubbleFraction() : 0;
  out.formula = (c.p - 1.0) / c.m / c.v;
  std::printf("%s p=%d m=%d v=%d%s: bubble %.4f cycle-level, %.4f event simulation, %.4f formula (%d passes "
              "compiled, stage passes %lld to %lld cycles)\n",
              pipelineScheduleName(c.schedule), c.p, c.m, c.v, equalStages ? ", equal stages" : "", out.cycleLevel,
              out.events, out.formula, scheduled->cluster.compiledShards, static_cast<long long>(out.shortestPass),
              static_cast<long long>(out.longestPass));
  for (int s = 0; s < c.p; ++s)
    for (int k = 0; k < c.v; ++k)
      std::printf("  stage %d chunk %d: forward %lld, backward %lld cycles\n", s, k,
                  static_cast<long long>(scheduled->forwardCycles[s][k]),
                  static_cast<long long>(scheduled->backwardCycles[s][k]));
  if (events.ok()) {
    // Never slower than the event simulation of the same order and pass cycles, which charges every
    // pass whole before its successor starts (and a transfer after it).
    const double ratio = static_cast<double>(scheduled->pipelineCycles) / events->makespan;
    EXPECT_LE(ratio, 1.001);
    EXPECT_GE(ratio, 0.9);
  }
  return out;
}

const BubbleCase kBubbleCases[] = {{PipelineSchedule::kGPipe, 4, 8, 1},
                                   {PipelineSchedule::k1F1B, 4, 8, 1},
                                   {PipelineSchedule::k1F1B, 4, 16, 1},
                                   {PipelineSchedule::kInterleaved, 4, 8, 2}};

// The realistic step lies below the formula: the first stage receives nothing and computes no input
// gradient, the last sends nothing, so the ends are lighter; and a backward pass sends its input
// gradient before it computes its weight gradients, so the previous stage starts its backward pass
// while this one still runs (the cycle level overlaps what the event simulation serialises).
TEST(TrainingStep, UniformPipelineBubbleMatchesTheEventSimulationAndTheFormula) {
  for (const BubbleCase& c : kBubbleCases) {
    const BubbleRun run = runBubble(c, false);
    EXPECT_LT(run.cycleLevel, run.formula);
    EXPECT_GT(run.cycleLevel, 0.5 * run.formula);
  }
}

// The formula's assumptions met cycle by cycle as far as the compiled passes allow: every stage does
// the same work (the first one also computes its input gradient), a pass's outputs reach the next
// stage once the whole pass has run (Megatron's exchange between passes), and the stage-to-stage
// tensors are small next to a stage's compute (12 layers per chunk, widening from 160 columns to
// 1536 and back, 128 rows per microbatch, so that one tile of 128 vectors crosses between stages).
// The first stage's model input is resident as the other stages' kept activations are, and a send
// released at the pass's end lends no scheduling priority, so that every backward pass compiles to
// the same schedule (77,029 cycles) whether or not it sends. What still differs is the
// communication at the ends: the first stage's forward pass receives nothing (127 cycles shorter),
// the last stage's forward sends nothing (185); the passes are 0.16 % apart. The bubble is within
// 1 % of (p-1)/m and (1/v)(p-1)/m for every schedule (measured -0.03 %, -0.08 %, -0.05 % and
// -0.3 %: the interleaved schedule's bubble is half as long while the lighter end chunks weigh the
// same). The formula needs equal forward and
// equal backward passes, not only equal sums: GPipe fills at the slowest forward and then at the
// slowest backward.
TEST(TrainingStep, EqualStagesBubbleIsNearTheFormula) {
  for (const BubbleCase& c : kBubbleCases) {
    const BubbleRun run = runBubble(c, true);
    EXPECT_NEAR(run.cycleLevel, run.formula, 0.01 * run.formula);
    // The event simulation within 0.2 % of the formula of the cycle level (measured: under 0.1 %
    // for every schedule).
    EXPECT_NEAR(run.cycleLevel, run.events, 0.002 * run.formula);
    // The passes of the stages differ by the stage-to-stage receives and sends only.
    EXPECT_LT(static_cast<double>(run.longestPass - run.shortestPass), 0.005 * static_cast<double>(run.longestPass));
  }
}

// A uniform chain's 1F1B step, scheduled: the chain (rows per microbatch, hidden) in p stages with m
// microbatches and dp replicas on a ring of `chips`, SGD (its update on every chip).
schedule::TrainingStepSchedule scheduledChain(int p, int m, int dp, int chips) {
  const int layers = 2 * p;
  const ir::Graph forward = uniformChain(layers, 128 * m, 320);
  TrainingConfig config;
  config.enabled = true;
  config.schedule = PipelineSchedule::k1F1B;
  config.optimizer = ir::Optimizer::kSgd;
  auto step = buildTrainingStep(forward, pipelinePlan(layers, p, m, 1, dp), config, false);
  EXPECT_TRUE(step.ok()) << step.error().format();
  auto scheduled = schedule::scheduleTrainingStep((*step)->workload, ring(chips, "{latency_ns: 250}"));
  EXPECT_TRUE(scheduled.ok()) << scheduled.error().format();
  return std::move(*scheduled);
}

// A training program is a sequence of pass instances: each compiled pass is held once, and every chip
// and microbatch that runs it refers to it at its own start cycle. Two replicas' chips run the same
// passes (their gradients all-reduced between them) and share their bodies; the written-out
// programs are canonical.
TEST(TrainingPrograms, ChipsRunningTheSamePassesShareTheirBodies) {
  const auto step = scheduledChain(1, 4, 2, 2);  // replica r on chip r
  const auto& programs = step.cluster.programs;
  ASSERT_EQ(programs.size(), 2u);
  std::int64_t instances = 0, held = 0;
  std::set<const isa::InstructionBody*> bodies;
  for (const isa::Program& program : programs) {
    EXPECT_TRUE(program.instructions.empty());
    ASSERT_FALSE(program.pieces.empty());
    instances += program.instructionCount();
    for (const auto& piece : program.pieces)
      if (bodies.insert(piece.body.get()).second) held += static_cast<std::int64_t>(piece.body->instructions.size());
    const isa::Program flat = isa::expanded(program);
    EXPECT_EQ(static_cast<std::int64_t>(flat.instructions.size()), program.instructionCount());
    isa::Program sorted = flat;
    isa::canonicalize(sorted);
    EXPECT_EQ(sorted.instructions, flat.instructions);
    EXPECT_EQ(isa::serialize(program), isa::serialize(flat));
  }
  // Every pass body a chip runs more than once (its microbatches) is the one the other chip runs.
  for (const auto& [a, b] : {std::pair{0, 1}, std::pair{1, 0}}) {
    std::map<const isa::InstructionBody*, int> uses;
    std::set<const isa::InstructionBody*> other;
    for (const auto& piece : programs[a].pieces) ++uses[piece.body.get()];
    for (const auto& piece : programs[b].pieces) other.insert(piece.body.get());
    int repeated = 0;
    for (const auto& [body, n] : uses)
      if (n >= 4) {
        ++repeated;
        EXPECT_TRUE(other.count(body)) << "chip " << a << " against chip " << b;
      }
    EXPECT_GE(repeated, 2) << "a forward and a backward pass per microbatch on chip " << a;
  }
  EXPECT_LT(2 * held, instances);
  // Equal hashes for equal written-out programs (the runtime shares a program between such chips).
  EXPECT_EQ(programs[0].contentHash() == programs[1].contentHash(),
            isa::serialize(programs[0]) == isa::serialize(programs[1]));
}

// A chip's program of many pass instances simulates in exactly the predicted cycles, and as its
// written-out form does (same cycles, instructions and unit busy cycles).
TEST(TrainingPrograms, AManyPassProgramSimulatesInThePredictedCycles) {
  const auto step = scheduledChain(1, 4, 1, 2);
  const isa::Program& program = step.cluster.programs[0];
  ASSERT_GE(program.pieces.size(), 9u);  // 4 forward, 4 backward, the update
  const topology::ChipSpec chip;
  auto pieced = sim::makeTspChip(0, chip, std::make_shared<const isa::Program>(program), {}, {});
  auto flat = sim::makeTspChip(0, chip, std::make_shared<const isa::Program>(isa::expanded(program)), {}, {});
  ASSERT_TRUE(pieced->advanceTo(sim::kNever).ok());
  ASSERT_TRUE(flat->advanceTo(sim::kNever).ok());
  EXPECT_EQ(pieced->stats().cycles, program.predictedCycles);
  EXPECT_EQ(pieced->stats().cycles, flat->stats().cycles);
  EXPECT_EQ(pieced->stats().instructions, program.instructionCount());
  EXPECT_EQ(pieced->stats().unitBusy, flat->stats().unitBusy);
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
  for (int c = 0; c < 4; ++c) EXPECT_GT(scheduled->cluster.programs[c].instructionCount(), 0) << c;
}

}  // namespace
}  // namespace tsp::partition
