// Tests of the reference interpreter on hand-computed cases.
#include "compile/ir/interpreter.h"

#include <cmath>

#include <gtest/gtest.h>

namespace tsp::ir {
namespace {

TEST(Interpreter, MatMulBiasRelu) {
  Graph g;
  const auto x = g.addInput("x", {1, 2}, DType::kF32);
  const auto w = g.addWeight("w", {2, 2}, DType::kF32, makeData({1, 2, 3, 4}));
  const auto b = g.addWeight("b", {2}, DType::kF32, makeData({-10, 0}));
  auto y = g.addOp(OpKind::kRelu, "r", {*g.addOp(OpKind::kAdd, "a", {*g.addOp(OpKind::kMatMul, "m", {x, w}, 0), b}, 0)}, 0);
  g.markOutput(*y);
  auto out = interpret(g, {Value{DType::kF32, {1, 2}, {1, 1}}});
  ASSERT_TRUE(out.ok()) << out.error().format();
  EXPECT_EQ((*out)[0].data, (std::vector<double>{0, 6}));
}

TEST(Interpreter, IntegersAreExactAndWrap) {
  Graph g;
  const auto a = g.addInput("a", {2}, DType::kI8);
  const auto b = g.addInput("b", {2}, DType::kI8);
  auto s = g.addOp(OpKind::kAdd, "s", {a, b}, 0);
  g.markOutput(*s);
  auto out = interpret(g, {Value{DType::kI8, {2}, {100, -100}}, Value{DType::kI8, {2}, {100, -29}}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].data, (std::vector<double>{-56, 127}));  // 200 wraps to -56
  Graph big;
  const auto x = big.addInput("x", {1}, DType::kI32);
  auto sq = big.addOp(OpKind::kMul, "sq", {x, x}, 0);
  big.markOutput(*sq);
  auto r = interpret(big, {Value{DType::kI32, {1}, {46341}}});
  EXPECT_EQ((*r)[0].data[0], static_cast<double>(static_cast<std::int32_t>(46341LL * 46341LL - 4294967296LL)));
}

TEST(Interpreter, ConvWithPaddingAndGroups) {
  Graph g;
  const auto x = g.addInput("x", {1, 2, 3, 3}, DType::kF32);
  // Group 2: each output channel sums its own input channel's 3x3 neighbourhood.
  const auto w = g.addWeight("w", {2, 1, 3, 3}, DType::kF32, makeData(std::vector<double>(18, 1.0)));
  auto y = g.addOp(OpKind::kConv, "c", {x, w}, {{"group", std::int64_t{2}}, {"pads", std::vector<std::int64_t>{1, 1, 1, 1}}}, 0);
  ASSERT_TRUE(y.ok());
  g.markOutput(*y);
  std::vector<double> in(18, 1.0);
  for (int i = 9; i < 18; ++i) in[i] = 2.0;
  auto out = interpret(g, {Value{DType::kF32, {1, 2, 3, 3}, in}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].data[0], 4.0);   // corner: 4 neighbours
  EXPECT_EQ((*out)[0].data[4], 9.0);   // centre
  EXPECT_EQ((*out)[0].data[13], 18.0); // centre of channel 2
}

TEST(Interpreter, SoftmaxAndLayerNorm) {
  Graph g;
  const auto x = g.addInput("x", {1, 3}, DType::kF32);
  auto s = g.addOp(OpKind::kSoftmax, "s", {x}, {{"axis", std::int64_t{-1}}}, 0);
  const auto one = g.addWeight("g", {3}, DType::kF32, makeData(std::vector<double>(3, 1.0)));
  auto n = g.addOp(OpKind::kLayerNormalization, "n", {x, one}, {{"epsilon", 0.0}}, 0);
  g.markOutput(*s);
  g.markOutput(*n);
  auto out = interpret(g, {Value{DType::kF32, {1, 3}, {1, 2, 3}}});
  ASSERT_TRUE(out.ok());
  double sum = 0;
  for (double v : (*out)[0].data) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_NEAR((*out)[1].data[2], std::sqrt(1.5), 1e-6);
}

TEST(Interpreter, MissingWeightsAndCollectivesAreErrors) {
  Graph g;
  const auto x = g.addInput("x", {2}, DType::kF32);
  const auto w = g.addWeight("w", {2}, DType::kF32);
  g.markOutput(*g.addOp(OpKind::kAdd, "a", {x, w}, 0));
  EXPECT_EQ(interpret(g, {Value{DType::kF32, {2}, {1, 2}}}).error().format(),
            "node 'w': weight values were not loaded; the interpreter needs them");
  Graph c;
  const auto y = c.addInput("y", {4}, DType::kF32);
  c.markOutput(*c.addOp(OpKind::kAllReduce, "ar", {y}, {{"group", std::int64_t{2}}}, 0));
  EXPECT_FALSE(interpret(c, {Value{DType::kF32, {4}, {1, 2, 3, 4}}}).ok());
}

}  // namespace
}  // namespace tsp::ir
