// A training step end to end on one chip: autodiff and SGD on an MLP, compiled by the one-chip
// compiler and run on the cycle-accurate chip in exactly the predicted cycles.
#include <cstdio>
#include <set>

#include <gtest/gtest.h>

#include "compile/frontend/builtin_models.h"
#include "compile/ir/autodiff.h"
#include "compile/schedule/shard_compiler.h"
#include "sim/chip.h"
#include "sim/kokkos_environment.h"

namespace tsp::schedule {
namespace {

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new sim::KokkosEnvironment);

// Two bias-free layers with Tanh: every op of its training step (MatMul, Tanh, Transpose, Mul,
// Sub and the SGD update) has a lowering. The gradient of the output comes in as an input
// (fc2.out.grad), as a pipeline stage receives it from the next stage.
ir::Graph mlp(std::int64_t batch, std::int64_t hidden, ir::DType dtype) {
  ir::Graph g;
  const auto x = g.addInput("x", {batch, hidden}, dtype);
  const auto w1 = g.addWeight("w1", {hidden, hidden}, dtype);
  const auto w2 = g.addWeight("w2", {hidden, hidden}, dtype);
  const auto h = *g.addOp(ir::OpKind::kTanh, "act", {*g.addOp(ir::OpKind::kMatMul, "fc1", {x, w1}, 0)}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kMatMul, "fc2", {h, w2}, 1));
  return g;
}

TEST(TrainingStep, SimulatesInExactlyThePredictedCycles) {
  topology::ChipSpec chip;
  for (std::int64_t hidden : {320, 640}) {
    ir::TrainingOptions options;
    options.optimizer = ir::Optimizer::kSgd;
    auto step = ir::differentiate(mlp(64, hidden, ir::DType::kF16), options);
    ASSERT_TRUE(step.ok()) << step.error().format();
    const ir::Graph& g = step->graph;
    ASSERT_TRUE(g.findTensor("fc2.out.grad").has_value());
    ASSERT_EQ(g.outputs().size(), 3u);  // fc2's output, then the two updated weights
    std::vector<ir::OpId> ops;
    for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
    Options o;
    o.annealMoves = 20;
    auto compiled = compileShard(chip, g, ops, {}, o);
    ASSERT_TRUE(compiled.ok()) << compiled.error().format();
    // Forward (2 matmuls), backward (dW2, dh, dW1: 3) on 64 x hidden x hidden each.
    EXPECT_EQ(g.macFlops(), 5 * 2 * 64 * hidden * hidden);
    auto c = sim::makeTspChip(0, chip, std::make_shared<const isa::Program>(compiled->program), {}, {});
    ASSERT_TRUE(c->advanceTo(sim::kNever).ok());
    EXPECT_EQ(c->stats().cycles, compiled->program.predictedCycles) << hidden;
    std::printf("training step, batch 64, hidden %lld: %lld cycles predicted and simulated, lower bound %lld\n",
                static_cast<long long>(hidden), static_cast<long long>(c->stats().cycles),
                static_cast<long long>(compiled->report.lowerBound));
    EXPECT_GE(compiled->program.predictedCycles, compiled->report.lowerBound);
  }
}

// A whole GPT training step on one chip: embedding (Gather and its scatter-add GatherGrad),
// attention, LayerNorm, GELU, the loss and its gradient, and the optimizer, every op lowered.
TEST(TrainingStep, GptStepOfEveryOptimizerAndRecomputationSimulatesInThePredictedCycles) {
  topology::ChipSpec chip;
  frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"layers", "2"}, {"hidden", "64"}, {"heads", "2"}, {"seq", "16"},
                 {"batch", "2"},  {"vocab", "128"}, {"dtype", "fp16"}};
  auto forward = frontend::buildBuiltinModel(spec);
  ASSERT_TRUE(forward.ok()) << forward.error().format();
  for (ir::Optimizer optimizer : {ir::Optimizer::kSgd, ir::Optimizer::kAdam})
    for (ir::Recompute recompute : {ir::Recompute::kNone, ir::Recompute::kFull}) {
      ir::TrainingOptions options;
      options.optimizer = optimizer;
      options.recompute = recompute;
      auto step = ir::buildTrainingGraph(*forward, options);
      ASSERT_TRUE(step.ok()) << step.error().format();
      const ir::Graph& g = step->graph;
      std::set<ir::OpKind> kinds;
      std::vector<ir::OpId> ops;
      for (size_t i = 0; i < g.ops().size(); ++i) {
        ops.push_back(static_cast<ir::OpId>(i));
        kinds.insert(g.op(static_cast<ir::OpId>(i)).kind);
      }
      for (ir::OpKind k : {ir::OpKind::kSoftmaxCrossEntropyLoss, ir::OpKind::kSoftmaxCrossEntropyLossGrad,
                           ir::OpKind::kGatherGrad, ir::OpKind::kReduceSum, ir::OpKind::kTranspose})
        EXPECT_TRUE(kinds.count(k)) << ir::opKindName(k);
      Options o;
      o.annealMoves = 20;
      auto compiled = compileShard(chip, g, ops, {}, o);
      ASSERT_TRUE(compiled.ok()) << compiled.error().format();
      auto c = sim::makeTspChip(0, chip, std::make_shared<const isa::Program>(compiled->program), {}, {});
      ASSERT_TRUE(c->advanceTo(sim::kNever).ok());
      EXPECT_EQ(c->stats().cycles, compiled->program.predictedCycles);
      std::printf("GPT 2 x 64 training step, %s, recompute %s: %lld cycles predicted and simulated (lower bound %lld)\n",
                  ir::optimizerName(optimizer), ir::recomputeName(recompute),
                  static_cast<long long>(c->stats().cycles), static_cast<long long>(compiled->report.lowerBound));
    }
}

}  // namespace
}  // namespace tsp::schedule
