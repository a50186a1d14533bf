// Tests of the graph IR and the built-in MLP generator.
#include "compile/ir/graph.h"

#include <gtest/gtest.h>

#include "compile/frontend/builtin_models.h"

namespace tsp {
namespace {

TEST(Graph, MatMulShapeInference) {
  ir::Graph g;
  const auto x = g.addInput("x", {8, 64}, ir::DType::kF16);
  const auto w = g.addWeight("w", {64, 32}, ir::DType::kF16);
  auto y = g.addOp(ir::OpKind::kMatMul, "fc", {x, w}, 0);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(g.tensor(*y).shape, (std::vector<std::int64_t>{8, 32}));
  EXPECT_EQ(g.flops(), 2 * 8 * 32 * 64);
}

TEST(Graph, MatMulMismatchNamesTheNode) {
  ir::Graph g;
  const auto x = g.addInput("x", {8, 64}, ir::DType::kF16);
  const auto w = g.addWeight("w", {65, 32}, ir::DType::kF16);
  auto y = g.addOp(ir::OpKind::kMatMul, "fc7", {x, w}, 0);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.error().format(), "node 'fc7': MatMul inner dimensions differ: 64 vs 65");
}

TEST(Graph, AddBroadcastsBias) {
  ir::Graph g;
  const auto x = g.addInput("x", {8, 32}, ir::DType::kF16);
  const auto b = g.addWeight("b", {32}, ir::DType::kF16);
  auto y = g.addOp(ir::OpKind::kAdd, "bias", {x, b}, 0);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(g.tensor(*y).shape, (std::vector<std::int64_t>{8, 32}));
  const auto c = g.addWeight("c", {31}, ir::DType::kF16);
  EXPECT_FALSE(g.addOp(ir::OpKind::kAdd, "bad", {x, c}, 0).ok());
}

TEST(BuiltinMlp, LayersAndParameters) {
  frontend::ModelSpec spec;
  spec.builtin = "mlp";
  spec.params = {{"layers", "3"}, {"hidden", "128"}, {"batch", "4"}};
  auto g = frontend::buildBuiltinModel(spec);
  ASSERT_TRUE(g.ok()) << g.error().format();
  EXPECT_EQ(g->layerCount(), 3);
  EXPECT_EQ(g->parameters(), 3 * (128 * 128 + 128));
  EXPECT_EQ(frontend::samplesPerIteration(spec, *g), 4);
}

TEST(BuiltinMlp, UnknownParameterIsAModelError) {
  frontend::ModelSpec spec;
  spec.builtin = "mlp";
  spec.params = {{"layerz", "3"}};
  auto g = frontend::buildBuiltinModel(spec);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, ExitCode::kModel);
  EXPECT_EQ(g.error().format(), "node 'builtin:mlp': unknown parameter 'layerz'");
}

TEST(ModelArgument, ParsesBuiltinWithParameters) {
  auto spec = frontend::parseModelArgument("builtin:mlp,layers=2,hidden=64", {});
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->builtin, "mlp");
  EXPECT_EQ(spec->params.at("hidden"), "64");
  EXPECT_FALSE(frontend::parseModelArgument("builtin:mlp,layers", {}).ok());
}

}  // namespace
}  // namespace tsp
