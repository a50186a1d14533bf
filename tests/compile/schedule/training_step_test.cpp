// A training step end to end on one chip: autodiff and SGD on an MLP, compiled by the one-chip
// compiler and run on the cycle-accurate chip in exactly the predicted cycles.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "compile/frontend/builtin_models.h"
#include "compile/ir/autodiff.h"
#include "compile/lower/lowering.h"
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

// Every op of g, in order.
std::vector<ir::OpId> allOps(const ir::Graph& g) {
  std::vector<ir::OpId> ops;
  for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  return ops;
}

// Every op of g compiled as one shard for the chip, with `annealMoves` annealing moves.
Expected<CompiledShard> compileWholeGraph(const topology::ChipSpec& chip, const ir::Graph& g, std::int64_t annealMoves) {
  Options o;
  o.annealMoves = annealMoves;
  return compileShard(chip, g, allOps(g), {}, o);
}

// The forward GPT of the one-chip steps: 2 layers, hidden 64, 2 heads, seq 16, batch 2, vocab 128.
Expected<ir::Graph> smallGpt() {
  frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"layers", "2"}, {"hidden", "64"}, {"heads", "2"}, {"seq", "16"},
                 {"batch", "2"},  {"vocab", "128"}, {"dtype", "fp16"}};
  return frontend::buildBuiltinModel(spec);
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
    auto compiled = compileWholeGraph(chip, g, 20);
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
  auto forward = smallGpt();
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
      for (const ir::Op& op : g.ops()) kinds.insert(op.kind);
      for (ir::OpKind k : {ir::OpKind::kSoftmaxCrossEntropyLoss, ir::OpKind::kSoftmaxCrossEntropyLossGrad,
                           ir::OpKind::kGatherGrad, ir::OpKind::kReduceSum, ir::OpKind::kTranspose})
        EXPECT_TRUE(kinds.count(k)) << ir::opKindName(k);
      auto compiled = compileWholeGraph(chip, g, 20);
      ASSERT_TRUE(compiled.ok()) << compiled.error().format();
      auto c = sim::makeTspChip(0, chip, std::make_shared<const isa::Program>(compiled->program), {}, {});
      ASSERT_TRUE(c->advanceTo(sim::kNever).ok());
      EXPECT_EQ(c->stats().cycles, compiled->program.predictedCycles);
      std::printf("GPT 2 x 64 training step, %s, recompute %s: %lld cycles predicted and simulated (lower bound %lld)\n",
                  ir::optimizerName(optimizer), ir::recomputeName(recompute),
                  static_cast<long long>(c->stats().cycles), static_cast<long long>(compiled->report.lowerBound));
    }
}

// The backward matmuls of a GPT step read the Transposes of their weights in place (transB
// installs), with or without recomputation; and while the SRAM is plentiful (the step holds about
// 1 MB of 230 MB) no two tensors share an address, so no tensor's writes wait for the last reads of
// a freed one (with first-fit reuse, layer 0's recomputed activations took space that layer 1's
// backward reads last, and waited for it: 18,870 cycles against 15,484 without recomputation).
TEST(TrainingStep, GptStepReadsTransposedWeightsInPlaceAndReusesNoSpace) {
  topology::ChipSpec chip;
  auto forward = smallGpt();
  ASSERT_TRUE(forward.ok()) << forward.error().format();
  for (ir::Recompute recompute : {ir::Recompute::kNone, ir::Recompute::kFull}) {
    ir::TrainingOptions options;
    options.optimizer = ir::Optimizer::kSgd;
    options.recompute = recompute;
    auto step = ir::buildTrainingGraph(*forward, options);
    ASSERT_TRUE(step.ok()) << step.error().format();
    const ir::Graph& g = step->graph;
    auto lowered = lower::lowerShard(chip, g, allOps(g), {});
    ASSERT_TRUE(lowered.ok()) << lowered.error().format();
    // The Transposes of 2-D weights whose outputs were placed (copied): only those a matmul does
    // not read alone.
    int transposes = 0, copied = 0;
    for (const ir::Op& op : g.ops()) {
      if (op.kind != ir::OpKind::kTranspose || g.tensor(op.inputs[0]).producer >= 0 || g.tensor(op.inputs[0]).shape.size() != 2)
        continue;
      ++transposes;
      const std::string& name = g.tensor(op.outputs[0]).name;
      copied += std::any_of((*lowered)->tensors.begin(), (*lowered)->tensors.end(),
                            [&](const isa::TensorPlacement& p) { return p.name == name; });
    }
    EXPECT_GT(transposes, 1);
    EXPECT_LT(copied, transposes);
    // Every piece's addresses, per MEM queue: no two tensors' pieces overlap.
    std::map<int, std::vector<std::tuple<std::int64_t, std::int64_t, std::string>>> pieces;
    for (const isa::TensorPlacement& p : (*lowered)->tensors) {
      const std::int64_t segRows = p.segmentRows > 0 ? p.segmentRows : p.rows;
      const std::int64_t segments = (p.rows + segRows - 1) / segRows;
      for (size_t i = 0; i < p.memUnit.size(); ++i) {
        const std::int64_t seg = static_cast<std::int64_t>(i) % segments;
        const std::int64_t rows = std::min(segRows, p.rows - seg * segRows);
        pieces[p.memUnit[i]].push_back({p.address[i], p.address[i] + rows, p.name});
      }
    }
    int shared = 0;
    for (auto& [unit, list] : pieces) {
      std::sort(list.begin(), list.end());
      for (size_t i = 1; i < list.size(); ++i)
        if (std::get<0>(list[i]) < std::get<1>(list[i - 1]) && std::get<2>(list[i]) != std::get<2>(list[i - 1]))
          ++shared;
    }
    EXPECT_EQ(shared, 0) << ir::recomputeName(recompute);
    EXPECT_LE((*lowered)->sram.footprint(), alloc::SramAllocator::kFreshShare * static_cast<double>(chip.sramBytes()));
  }
}

// Adam's new weights and moments take the space of the old ones once these have been read, as an
// in-place update would: 13 weights of 1024 x 1024 (13.6 M parameters) hold 12 bytes a parameter on
// the chip (weight and gradient in FP16, m and v in FP32), 163 MB, and their new values another 10,
// which together (299 MB) would not fit the 230.7 MB of SRAM.
TEST(TrainingStep, AdamOverwritesItsWeightsAndMomentsInPlace) {
  topology::ChipSpec chip;
  constexpr int kLayers = 13;
  constexpr std::int64_t kHidden = 1024;
  ir::Graph forward;
  ir::TensorId x = forward.addInput("x", {8, kHidden}, ir::DType::kF16);
  for (int l = 0; l < kLayers; ++l) {
    const auto w = forward.addWeight(fmt::format("w{}", l), {kHidden, kHidden}, ir::DType::kF16);
    x = *forward.addOp(ir::OpKind::kTanh, fmt::format("act{}", l),
                       {*forward.addOp(ir::OpKind::kMatMul, fmt::format("fc{}", l), {x, w}, l)}, l);
  }
  forward.markOutput(x);
  ir::TrainingOptions options;
  options.optimizer = ir::Optimizer::kAdam;
  auto step = ir::differentiate(forward, options);
  ASSERT_TRUE(step.ok()) << step.error().format();
  const ir::Graph& g = step->graph;
  const Bytes parameters = forward.parameters(), held = 12 * parameters, renewed = 10 * parameters;
  for (size_t i = 0; i < step->tensors.weights.size(); ++i)
    EXPECT_EQ(g.overwrites(step->tensors.updatedWeights[i]), step->tensors.weights[i]);
  auto compiled = compileWholeGraph(chip, g, 0);
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  EXPECT_GT(held + renewed, compiled->report.sramCapacityBytes);
  EXPECT_GE(compiled->report.sramPeakBytes, held);
  EXPECT_LT(compiled->report.sramPeakBytes, held + renewed / 2);
  auto c = sim::makeTspChip(0, chip, std::make_shared<const isa::Program>(compiled->program), {}, {});
  ASSERT_TRUE(c->advanceTo(sim::kNever).ok());
  EXPECT_EQ(c->stats().cycles, compiled->program.predictedCycles);
  std::printf("Adam step of %lld parameters: SRAM peak %lld bytes (%lld held), %lld cycles\n",
              static_cast<long long>(parameters), static_cast<long long>(compiled->report.sramPeakBytes),
              static_cast<long long>(held), static_cast<long long>(c->stats().cycles));
}

}  // namespace
}  // namespace tsp::schedule
