// Functional mode on tensors of other element types than the storage type (INT32, bool, BF16, FP32),
// broadcasts that repeat rows, LayerNormalization over several axes, BatchNormalization without
// convolutions, Where, average pooling, and the compile-time refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "sim/kokkos_environment.h"
#include "sim/one_chip_functional.h"

namespace tsp::sim {
namespace {

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new KokkosEnvironment);

using ir::OpKind;

ir::Attrs axesAttrs(std::int64_t axis) { return {{"axes", std::vector<std::int64_t>{axis}}, {"keepdims", std::int64_t{1}}}; }

TEST(FunctionalTypes, Int32ElementwiseAndEqualAreExact) {
  // INT32 tensors stored 80 to a vector, computed on the INT32 ALUs with two's complement wrap;
  // Equal gives a bool tensor (320 to a vector).
  ir::Graph g;
  const auto i32 = ir::DType::kI32;
  const auto x = g.addInput("x", {6, 50}, i32);
  const auto y = g.addInput("y", {6, 50}, i32);
  const auto sum = *g.addOp(OpKind::kAdd, "sum", {x, y}, 0);
  g.markOutput(*g.addOp(OpKind::kMul, "product", {sum, y}, 0));
  g.markOutput(*g.addOp(OpKind::kPow, "cube", {sum, g.addWeight("three", {1}, i32)}, 0));
  g.markOutput(*g.addOp(OpKind::kDiv, "quotient", {x, y}, 0));  // truncating, x / 0 = 0
  g.markOutput(*g.addOp(OpKind::kEqual, "equal", {x, y}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalTypes, MixedTypeOperandsAndCastsMatchTheInterpreter) {
  // FP16 to the power of INT32 exponents (one tile each: the lanes line up), and casts of FP16 to
  // INT32 (toward zero), BF16 (rounded to nearest even) and FP32.
  ir::Graph g;
  const auto f16 = ir::DType::kF16;
  const auto x = g.addInput("x", {8, 60}, f16);
  const auto wide = *g.addOp(OpKind::kMul, "wide", {x, g.addWeight("nine", {}, f16)}, 0);
  g.markOutput(*g.addOp(OpKind::kPow, "pow", {wide, g.addInput("e", {8, 60}, ir::DType::kI32)}, 0));
  for (const auto& [name, to] : {std::pair{"to_int32", "int32"}, std::pair{"to_bf16", "bf16"}, std::pair{"to_fp32", "fp32"}})
    g.markOutput(*g.addOp(OpKind::kCast, name, {wide}, {{"to", std::string(to)}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalTypes, ExpandedSoftmaxOverOuterAndMiddleAxesMatchesTheInterpreter) {
  // ReduceMax and ReduceSum with keepdims over axis 0 ([1, 8, 20]: output row r reads row r mod 8)
  // and over axis 1 ([3, 1, 20]: eight consecutive output rows read one row, with stride 0).
  for (std::int64_t axis : {0, 1}) {
    ir::Graph g;
    const auto x = g.addInput("x", {3, 8, 20}, ir::DType::kF16);
    const auto max = *g.addOp(OpKind::kReduceMax, "max", {x}, axesAttrs(axis), 0);
    const auto e = *g.addOp(OpKind::kExp, "exp", {*g.addOp(OpKind::kSub, "centered", {x, max}, 0)}, 0);
    const auto sum = *g.addOp(OpKind::kReduceSum, "sum", {e}, axesAttrs(axis), 0);
    g.markOutput(*g.addOp(OpKind::kDiv, "softmax", {e, sum}, 0));
    const Status s = runOnOneChip(g);
    EXPECT_TRUE(s.ok()) << "axis " << axis << ": " << s.error().format();
  }
}

TEST(FunctionalTypes, LayerNormalizationOverTwoAxesReadsItsScaleAndBiasPeriodically) {
  // Normalised over [6, 40]: the scale and bias [6, 40] repeat every 6 output rows.
  ir::Graph g;
  const auto f16 = ir::DType::kF16;
  const auto x = g.addInput("x", {4, 6, 40}, f16);
  g.markOutput(*g.addOp(OpKind::kLayerNormalization, "ln",
                        {x, g.addWeight("gamma", {6, 40}, f16), g.addWeight("beta", {6, 40}, f16)},
                        {{"axis", std::int64_t{1}}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalTypes, BatchNormalizationWithoutConvolutionsPermutesItsChannelsToRows) {
  // [2, 3, 4, 30] is stored as 24 rows of 30: each row's channel value of the folded scale and
  // shift is put in lane 0 by an SXM permute and splatted over the lanes.
  ir::Graph g;
  const auto f16 = ir::DType::kF16;
  const auto var = g.addWeight("var", {3}, f16);
  g.setData(var, ir::makeData({0.5, 2.0, 1.25}));
  g.markOutput(*g.addOp(OpKind::kBatchNormalization, "bn",
                        {g.addInput("x", {2, 3, 4, 30}, f16), g.addWeight("gamma", {3}, f16), g.addWeight("beta", {3}, f16),
                         g.addWeight("mean", {3}, f16), var},
                        {{"epsilon", 1e-5}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalTypes, MixedWidthsOverSeveralTilesAreRefusedAtCompileTime) {
  // FP16 [4, 200] (2 tiles) to the power of INT32 [4, 200] (3 tiles): lane l is not one column in
  // both, so the program only times the op, and functional mode refuses it before it runs.
  ir::Graph g;
  g.markOutput(*g.addOp(OpKind::kPow, "pow",
                        {g.addInput("x", {4, 200}, ir::DType::kF16), g.addInput("e", {4, 200}, ir::DType::kI32)}, 0));
  const Status s = runOnOneChip(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kModel);
  EXPECT_NE(s.error().message.find("Pow 'pow': its operands' element widths differ and they span several tiles"),
            std::string::npos)
      << s.error().message;
}

TEST(FunctionalTypes, OpsThatComputeOnlyTheStorageTypesAreRefusedNamingTheType) {
  // The named accumulators and the SXM's lane shifts work on FP16 or INT8 lanes; FP16 and INT8 do
  // not share a run. Each is refused before it runs (exit 2), naming the node or the tensor.
  struct Case {
    const char* expected;
    std::function<void(ir::Graph&)> build;
  };
  const std::vector<Case> cases = {
      {"ReduceSum 'sum': its sums are accumulated for FP16 or INT8 values, not int32",
       [](ir::Graph& g) {
         g.markOutput(*g.addOp(OpKind::kReduceSum, "sum", {g.addInput("x", {4, 30}, ir::DType::kI32)}, axesAttrs(1), 0));
       }},
      {"Concat 'cat': its lane shifts move FP16 or INT8 lanes, not int32",
       [](ir::Graph& g) {
         g.markOutput(*g.addOp(OpKind::kConcat, "cat",
                               {g.addInput("a", {4, 30}, ir::DType::kI32), g.addInput("b", {4, 20}, ir::DType::kI32)},
                               {{"axis", std::int64_t{1}}}, 0));
       }},
      {"functional mode stores FP16 or INT8 on chip, not both",
       [](ir::Graph& g) {
         g.markOutput(*g.addOp(OpKind::kRelu, "relu", {g.addInput("a", {4, 30}, ir::DType::kF16)}, 0));
         g.markOutput(*g.addOp(OpKind::kRelu, "relu8", {g.addInput("b", {4, 30}, ir::DType::kI8)}, 0));
       }},
  };
  for (const auto& c : cases) {
    ir::Graph g;
    c.build(g);
    const Status s = runOnOneChip(g);
    ASSERT_FALSE(s.ok()) << c.expected;
    EXPECT_EQ(s.error().code, ExitCode::kModel);
    EXPECT_NE(s.error().message.find(c.expected), std::string::npos) << s.error().message;
  }
}

using Ints = std::vector<std::int64_t>;

// A condition with about half its elements true: Relu(u) == 0 where u < 0.
ir::TensorId halfTrue(ir::Graph& g, const std::string& name, std::vector<std::int64_t> shape, ir::DType type) {
  const auto u = *g.addOp(OpKind::kRelu, name + "_relu", {g.addInput(name + "_u", std::move(shape), type)}, 0);
  const auto zero = g.addWeight(name + "_zero", {}, type);
  g.setData(zero, ir::makeData({0.0}));
  return *g.addOp(OpKind::kEqual, name, {u, zero}, 0);
}

TEST(FunctionalTypes, WhereSelectsExactlyInFp16WithBroadcastConditions) {
  // x masked by the condition plus y masked by its negation on three ALUs: a full condition, one
  // row of a condition for every row, one value per row (splatted), and a scalar -inf (the
  // attention mask's fill), which an arithmetic select would turn into NaN.
  ir::Graph g;
  const auto f16 = ir::DType::kF16;
  const auto x = g.addInput("x", {6, 50}, f16), y = g.addInput("y", {6, 50}, f16);
  const auto fill = g.addWeight("fill", {}, f16);
  g.setData(fill, ir::makeData({-INFINITY}));
  g.markOutput(*g.addOp(OpKind::kWhere, "full", {halfTrue(g, "c", {6, 50}, f16), x, y}, 0));
  g.markOutput(*g.addOp(OpKind::kWhere, "row", {halfTrue(g, "r", {1, 50}, f16), x, y}, 0));
  g.markOutput(*g.addOp(OpKind::kWhere, "splat", {halfTrue(g, "s", {6, 1}, f16), x, y}, 0));
  g.markOutput(*g.addOp(OpKind::kWhere, "masked", {halfTrue(g, "m", {6, 50}, f16), x, fill}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalTypes, WhereSelectsExactlyInInt8AndInt32) {
  for (const ir::DType type : {ir::DType::kI8, ir::DType::kI32}) {
    ir::Graph g;
    const auto x = g.addInput("x", {5, 70}, type), y = g.addInput("y", {5, 70}, type);
    g.markOutput(*g.addOp(OpKind::kWhere, "full", {halfTrue(g, "c", {5, 70}, type), x, y}, 0));
    g.markOutput(*g.addOp(OpKind::kWhere, "row", {halfTrue(g, "r", {70}, type), x, y}, 0));
    const Status s = runOnOneChip(g);
    EXPECT_TRUE(s.ok()) << ir::dtypeName(type) << ": " << s.error().format();
  }
}

TEST(FunctionalTypes, AveragePoolsWhoseDivisorIsTheKernelMatchTheInterpreter) {
  // Every tap scaled by 1 / taps and added to the partial: a padded strided 3 x 3 pool whose padding
  // counts (count_include_pad) over two channel tiles, and an unpadded 2 x 2 one.
  for (const bool padded : {true, false}) {
    ir::Graph g;
    const auto x = *g.addOp(OpKind::kRelu, "x_relu", {g.addInput("x", {1, padded ? 200 : 40, 9, 8}, ir::DType::kF16)}, 0);
    ir::Attrs attrs = padded ? ir::Attrs{{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}},
                                         {"count_include_pad", std::int64_t{1}}}
                             : ir::Attrs{{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}};
    g.markOutput(*g.addOp(OpKind::kAveragePool, "pool", {x}, attrs, 0));
    const Status s = runOnOneChip(g);
    EXPECT_TRUE(s.ok()) << (padded ? "padded: " : "unpadded: ") << s.error().format();
  }
}

TEST(FunctionalTypes, AveragePoolOverPaddingThatDoesNotCountIsRefusedAtCompileTime) {
  // Without count_include_pad a border pixel divides by its taps inside the map, not by 9.
  ir::Graph g;
  const auto x = *g.addOp(OpKind::kRelu, "x_relu", {g.addInput("x", {1, 40, 6, 6}, ir::DType::kF16)}, 0);
  g.markOutput(*g.addOp(OpKind::kAveragePool, "pool", {x}, {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}, 0));
  const Status s = runOnOneChip(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kModel);
  EXPECT_NE(s.error().message.find("AveragePool 'pool': an average pool whose divisor is not the kernel's size"),
            std::string::npos)
      << s.error().message;
}

}  // namespace
}  // namespace tsp::sim
