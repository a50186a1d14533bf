// Tests of the in-order lowering: stream time of flight, resources and SRAM.
#include "compile/lower/stage_builder.h"

#include <gtest/gtest.h>

#include "compile/frontend/builtin_models.h"

namespace tsp::lower {
namespace {

ir::Graph mlp(int layers, int hidden, int batch, const char* dtype = "fp16") {
  frontend::ModelSpec spec;
  spec.builtin = "mlp";
  spec.params = {{"layers", std::to_string(layers)}, {"hidden", std::to_string(hidden)},
                 {"batch", std::to_string(batch)}};
  spec.precision.weights = spec.precision.activations = *ir::parseDType(dtype);
  return *frontend::buildBuiltinModel(spec);
}

isa::Program lowerAll(const topology::ChipSpec& chip, const ir::Graph& g) {
  StageBuilder builder(chip, g);
  std::vector<ir::OpId> ops;
  for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  for (size_t i = 0; i < ops.size();) {
    auto consumed = builder.lowerOp(ops[i], ops, i);
    EXPECT_TRUE(consumed.ok());
    i += *consumed;
  }
  return builder.finish();
}

TEST(StageBuilder, ConsumersIssueAtTimeOfFlight) {
  topology::ChipSpec chip;
  const auto program = lowerAll(chip, mlp(1, 320, 16));
  const auto units = chip.units();
  // Every stream read must meet a write at producer issue + d_func + |delta slice|.
  for (const auto& consumer : program.instructions) {
    if (!consumer.src.valid()) continue;
    bool met = false;
    for (const auto& producer : program.instructions)
      if (producer.dst == consumer.src &&
          producer.issue + isa::resultLatency(chip, producer) +
                  std::abs(units[producer.unit].slice - units[consumer.unit].slice) ==
              consumer.issue)
        met = true;
    EXPECT_TRUE(met) << "instruction on unit " << consumer.unit << " at " << consumer.issue;
  }
}

TEST(StageBuilder, FusesBiasAndActivation) {
  topology::ChipSpec chip;
  const auto program = lowerAll(chip, mlp(2, 320, 8));
  int binary = 0, unary = 0;
  for (const auto& i : program.instructions) {
    binary += i.op == isa::Opcode::kVxmBinary;
    unary += i.op == isa::Opcode::kVxmUnary;
  }
  // FP16 [8x320]x[320x320]: 2 output tiles per layer, a bias add each; a Relu only after layer 0.
  EXPECT_EQ(binary, 4);
  EXPECT_EQ(unary, 2);
}

TEST(StageBuilder, PredictionIsAtLeastTheLowerBound) {
  topology::ChipSpec chip;
  const auto program = lowerAll(chip, mlp(2, 1024, 32, "int8"));
  EXPECT_GT(program.predictedCycles, 0);
  EXPECT_GE(program.predictedCycles, program.lowerBoundCycles);
  EXPECT_EQ(program.chipSpecHash, chip.hash());
}

TEST(StageBuilder, TooLargeForSramDoesNotFit) {
  topology::ChipSpec chip;
  chip.addressesPerSlice = 64;  // a tiny chip
  StageBuilder builder(chip, mlp(1, 4096, 8));
  const ir::Graph g = mlp(1, 4096, 8);
  StageBuilder small(chip, g);
  auto s = small.placeResident(g.weights()[0]);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kDoesNotFit);
}

}  // namespace
}  // namespace tsp::lower
