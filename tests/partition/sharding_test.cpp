// Tests of sharding: dependence classes, propagation on tiny graphs, and every split run through the
// multi-device reference interpreter against the unsharded graph.
#include "partition/sharding.h"

#include <cmath>

#include <gtest/gtest.h>

#include "compile/ir/interpreter.h"
#include "partition/sharding_spmd.h"
#include "test_values.h"

namespace tsp::partition {
namespace {

using ir::DType;
using ir::OpKind;
using ir::TensorId;
using Shape = std::vector<std::int64_t>;

using testing::values;

std::int64_t count(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

TensorId weight(ir::Graph& g, const std::string& name, Shape shape, std::uint64_t seed) {
  const auto n = count(shape);
  return g.addWeight(name, std::move(shape), DType::kF32, values(n, seed));
}

TensorId op(ir::Graph& g, OpKind kind, const std::string& name, std::vector<TensorId> in, ir::Attrs attrs = {}) {
  auto out = g.addOp(kind, name, std::move(in), std::move(attrs), 0);
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().format());
  return out.ok() ? *out : 0;
}

TensorSharding spec(std::vector<int> dims) { return TensorSharding{std::move(dims), {}}; }

// Shards graph under annotations, runs both, and checks every output matches within float rounding.
ShardingPlan expectSameResults(const ir::Graph& g, const Mesh& mesh, const std::map<TensorId, TensorSharding>& annotations,
                               const std::vector<ir::Value>& inputs, DeviceGraphs* keep = nullptr) {
  auto plan = propagateShardings(g, mesh, annotations);
  EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().format());
  if (!plan.ok()) return {};
  auto devices = shardGraph(g, *plan);
  EXPECT_TRUE(devices.ok()) << (devices.ok() ? "" : devices.error().format());
  if (!devices.ok()) return *plan;
  auto want = ir::interpret(g, inputs);
  auto got = interpretSharded(*devices, inputs);
  EXPECT_TRUE(want.ok()) << (want.ok() ? "" : want.error().format());
  EXPECT_TRUE(got.ok()) << (got.ok() ? "" : got.error().format());
  if (!want.ok() || !got.ok()) return *plan;
  EXPECT_EQ(want->size(), got->size());
  for (size_t o = 0; o < want->size(); ++o) {
    EXPECT_EQ((*want)[o].shape, (*got)[o].shape);
    if ((*want)[o].shape != (*got)[o].shape) continue;
    for (size_t e = 0; e < (*want)[o].data.size(); ++e)
      EXPECT_NEAR((*want)[o].data[e], (*got)[o].data[e], 1e-4 + 1e-4 * std::abs((*want)[o].data[e])) << "output " << o
                                                                                                       << " element " << e;
  }
  if (keep) *keep = std::move(*devices);
  return *plan;
}

ir::Value input(Shape shape, std::uint64_t seed) {
  const auto n = count(shape);
  return ir::Value{DType::kF32, std::move(shape), *values(n, seed)};
}

std::vector<DimClass> classes(const ir::Graph& g, ir::OpId id) {
  auto space = ir::iterationSpace(g, g.op(id));
  EXPECT_TRUE(space.ok());
  std::vector<DimClass> out;
  for (const auto& d : analyzeDependences(*space).dims) out.push_back(d.kind);
  return out;
}

TEST(Dependence, MatMulConvSoftmaxGather) {
  ir::Graph g;
  const auto a = g.addInput("A", {4, 6}, DType::kF32);
  const auto b = weight(g, "B", {6, 8}, 1);
  op(g, OpKind::kMatMul, "mm", {a, b});
  using C = DimClass;
  EXPECT_EQ(classes(g, 0), (std::vector<C>{C::kParallel, C::kParallel, C::kReduction}));  // i, j, k

  const auto x = g.addInput("X", {1, 3, 8, 8}, DType::kF32);
  const auto w = weight(g, "W", {4, 3, 3, 3}, 2);
  op(g, OpKind::kConv, "conv", {x, w}, {{"pads", Shape{1, 1, 1, 1}}, {"strides", Shape{2, 2}}});
  // n, c, h, w, k, r, q
  EXPECT_EQ(classes(g, 1), (std::vector<C>{C::kParallel, C::kParallel, C::kWindowed, C::kWindowed, C::kReduction,
                                           C::kReduction, C::kReduction}));
  auto conv = ir::iterationSpace(g, g.op(1));
  const auto deps = analyzeDependences(*conv);
  EXPECT_TRUE(deps.dims[2].splittable);
  EXPECT_FALSE(deps.dims[5].splittable);  // the window offset r never splits
  EXPECT_EQ(deps.dims[2].haloBefore, 1);   // pad rows above
  EXPECT_EQ(deps.dims[2].haloAfter, 0);    // stride 2, 3 taps: 2*(3-1) - (2-1) - 1

  const auto s = g.addInput("S", {4, 5}, DType::kF32);
  op(g, OpKind::kSoftmax, "sm", {s}, {{"axis", std::int64_t{1}}});
  auto sm = ir::iterationSpace(g, g.op(2));
  const auto smDeps = analyzeDependences(*sm);
  EXPECT_TRUE(smDeps.dims[0].splittable);
  EXPECT_FALSE(smDeps.dims[1].splittable);  // shares X's axis with the statistics' r
  EXPECT_EQ(smDeps.dims[2].kind, C::kReduction);

  const auto ids = g.addInput("ids", {2, 3}, DType::kI64);
  const auto table = weight(g, "E", {10, 4}, 3);
  op(g, OpKind::kGather, "emb", {table, ids});
  EXPECT_EQ(classes(g, 3).back(), C::kReduction);  // the table row: a one-hot sum
}

TEST(Dependence, ReshapeMergesAreParallelNotWindowed) {
  ir::Graph g;
  const auto x = g.addInput("x", {2, 12}, DType::kF32);
  op(g, OpKind::kReshape, "r", {x}, {{"shape", Shape{2, 3, 4}}});
  for (auto c : classes(g, 0)) EXPECT_EQ(c, DimClass::kParallel);
  auto space = ir::iterationSpace(g, g.op(0));
  EXPECT_EQ(space->text(g, g.op(0)), "r.out[f0,f1,f2] = Reshape(x[f0,f1*4+f2])");
}

TEST(Propagation, DataParallelNeedsNoCommunicationForward) {
  ir::Graph g;
  const auto x = g.addInput("x", {8, 6}, DType::kF32);
  const auto h = op(g, OpKind::kRelu, "relu", {op(g, OpKind::kMatMul, "fc1", {x, weight(g, "w1", {6, 10}, 1)})});
  const auto y = op(g, OpKind::kMatMul, "fc2", {h, weight(g, "w2", {10, 3}, 2)});
  g.markOutput(y);
  const Mesh mesh{{"dp"}, {4}};
  auto plan = expectSameResults(g, mesh, {{x, spec({0, -1})}}, {input({8, 6}, 7)});
  EXPECT_TRUE(plan.reshards.empty());
  EXPECT_EQ(plan.tensors[y].text(mesh), "[dp,-]");
  EXPECT_EQ(plan.tensors[1].text(mesh), "[-,-]");  // w1 replicated
}

// Megatron MLP: column-parallel fc1, row-parallel fc2 follows from propagation; one AllReduce.
TEST(Propagation, MegatronMlpHasOneAllReduce) {
  ir::Graph g;
  const auto x = g.addInput("x", {4, 8}, DType::kF32);
  const auto w1 = weight(g, "w1", {8, 16}, 1);
  const auto b1 = weight(g, "b1", {16}, 2);
  const auto h = op(g, OpKind::kGelu, "gelu", {op(g, OpKind::kAdd, "bias1", {op(g, OpKind::kMatMul, "fc1", {x, w1}), b1})});
  const auto w2 = weight(g, "w2", {16, 8}, 3);
  const auto y = op(g, OpKind::kMatMul, "fc2", {h, w2});
  const auto out = op(g, OpKind::kAdd, "residual", {y, x});
  g.markOutput(out);
  const Mesh mesh{{"tp"}, {4}};
  auto plan = expectSameResults(g, mesh, {{w1, spec({-1, 0})}}, {input({4, 8}, 9)});
  EXPECT_EQ(plan.count(ReshardKind::kAllReduce), 1);
  EXPECT_EQ(plan.reshards.size(), 1u);
  EXPECT_EQ(plan.tensors[b1].text(mesh), "[tp]");
  EXPECT_EQ(plan.tensors[w2].text(mesh), "[tp,-]");  // w2 row-parallel
  EXPECT_EQ(plan.tensors[y].text(mesh), "[-,-] partial(tp)");
}

// Attention with heads split: Q, K, V column-parallel, heads through reshape and transpose, output projection row-parallel.
TEST(Propagation, AttentionHeadsSplitWithOneAllReduce) {
  const std::int64_t s = 4, heads = 4, dh = 2, d = heads * dh;
  ir::Graph g;
  const auto x = g.addInput("x", {s, d}, DType::kF32);
  std::map<TensorId, TensorSharding> ann;
  auto project = [&](const std::string& name, std::uint64_t seed) {
    const auto w = weight(g, "w" + name, {d, d}, seed);
    ann[w] = spec({-1, 0});
    const auto p = op(g, OpKind::kMatMul, name, {x, w});
    const auto r = op(g, OpKind::kReshape, name + ".split", {p}, {{"shape", Shape{s, heads, dh}}});
    return op(g, OpKind::kTranspose, name + ".heads", {r}, {{"perm", Shape{1, 0, 2}}});  // [H, s, dh]
  };
  const auto q = project("q", 1), k = project("k", 2), v = project("v", 3);
  const auto kt = op(g, OpKind::kTranspose, "kt", {k}, {{"perm", Shape{0, 2, 1}}});
  const auto scores = op(g, OpKind::kMatMul, "scores", {q, kt});
  const auto probs = op(g, OpKind::kSoftmax, "softmax", {scores}, {{"axis", std::int64_t{-1}}});
  const auto ctx = op(g, OpKind::kMatMul, "ctx", {probs, v});
  const auto merged = op(g, OpKind::kReshape, "merge",
                         {op(g, OpKind::kTranspose, "unheads", {ctx}, {{"perm", Shape{1, 0, 2}}})}, {{"shape", Shape{s, d}}});
  const auto out = op(g, OpKind::kMatMul, "proj", {merged, weight(g, "wo", {d, d}, 4)});
  g.markOutput(out);
  const Mesh mesh{{"tp"}, {2}};
  auto plan = expectSameResults(g, mesh, ann, {input({s, d}, 5)});
  EXPECT_EQ(plan.count(ReshardKind::kAllReduce), 1);
  EXPECT_EQ(plan.reshards.size(), 1u);
  EXPECT_EQ(plan.tensors[q].text(mesh), "[tp,-,-]");
  EXPECT_EQ(plan.tensors[probs].text(mesh), "[tp,-,-]");
}

TEST(Propagation, VocabParallelEmbedding) {
  ir::Graph g;
  const auto ids = g.addInput("ids", {2, 3}, DType::kI64);
  const auto table = weight(g, "embedding", {12, 4}, 1);
  const auto y = op(g, OpKind::kGather, "lookup", {table, ids});
  g.markOutput(y);
  const Mesh mesh{{"tp"}, {4}};
  ir::Value idv{DType::kI64, {2, 3}, {0, 11, 5, 3, 7, 8}};
  auto plan = expectSameResults(g, mesh, {{table, spec({0, -1})}}, {idv});
  EXPECT_EQ(plan.count(ReshardKind::kAllReduce), 1);
  EXPECT_EQ(plan.tensors[y].text(mesh), "[-,-,-] partial(tp)");
}

// A vocabulary-parallel lookup read by a norm-like chain (x * x, x / ...) and a residual: its
// partial sums are all-reduced once, and every consumer reads the one reduced value.
TEST(Propagation, APartialTensorIsReducedOnceForAllItsConsumers) {
  ir::Graph g;
  const auto ids = g.addInput("ids", {2, 3}, DType::kI64);
  const auto table = weight(g, "embedding", {12, 4}, 1);
  const auto x = op(g, OpKind::kGather, "lookup", {table, ids});
  const auto sq = op(g, OpKind::kMul, "square", {x, x});
  const auto y = op(g, OpKind::kAdd, "residual", {op(g, OpKind::kDiv, "div", {x, op(g, OpKind::kSigmoid, "s", {sq})}), x});
  g.markOutput(y);
  const Mesh mesh{{"tp"}, {4}};
  ir::Value idv{DType::kI64, {2, 3}, {0, 11, 5, 3, 7, 8}};
  DeviceGraphs devices;
  auto plan = expectSameResults(g, mesh, {{table, spec({0, -1})}}, {idv}, &devices);
  EXPECT_EQ(plan.count(ReshardKind::kAllReduce), 1);
  ASSERT_EQ(plan.reshards.size(), 1u);
  EXPECT_EQ(plan.reshards[0].alsoFeeds.size(), 3u);  // square's second operand, div, residual
  ASSERT_FALSE(devices.graphs.empty());
  int allReduces = 0;
  for (const auto& o : devices.graphs[0].ops()) allReduces += o.kind == OpKind::kAllReduce;
  EXPECT_EQ(allReduces, 1);
}

// Spatial split of a 3x3 convolution over a 4x4 grid: interior tiles exchange the seed's
// 2p(tile_h + tile_w)C bytes plus the 4p^2 C corner elements.
TEST(Propagation, SpatialConvHaloMatchesTheSeedFormula) {
  const std::int64_t c = 3, hw = 16, grid = 4, tile = hw / grid, p = 1, bytes = 4;
  ir::Graph g;
  const auto x = g.addInput("x", {1, c, hw, hw}, DType::kF32);
  const auto y = op(g, OpKind::kConv, "conv", {x, weight(g, "w", {5, c, 3, 3}, 1)}, {{"pads", Shape{1, 1, 1, 1}}});
  g.markOutput(op(g, OpKind::kRelu, "relu", {y}));
  const Mesh mesh{{"row", "col"}, {grid, grid}};
  DeviceGraphs devices;
  auto plan = expectSameResults(g, mesh, {{x, spec({-1, -1, 0, 1})}}, {input({1, c, hw, hw}, 3)}, &devices);
  EXPECT_EQ(plan.count(ReshardKind::kHalo), 2);
  EXPECT_EQ(plan.tensors[y].text(mesh), "[-,-,row,col]");
  const std::int64_t formula = 2 * p * (tile + tile) * c * bytes;
  const int interior = mesh.device({1, 2});
  EXPECT_EQ(devices.haloBytes[interior], formula + 4 * p * p * c * bytes);
  // A corner tile receives one edge of rows, then one of columns that spans the rows with their halo.
  EXPECT_EQ(devices.haloBytes[mesh.device({0, 0})], (p * tile + p * (tile + 2 * p)) * c * bytes);
}

TEST(Propagation, StridedConvSplitOverRows) {
  ir::Graph g;
  const auto x = g.addInput("x", {2, 2, 8, 6}, DType::kF32);
  const auto y = op(g, OpKind::kConv, "conv", {x, weight(g, "w", {3, 2, 3, 3}, 1)},
                    {{"pads", Shape{1, 1, 1, 1}}, {"strides", Shape{2, 1}}});
  g.markOutput(y);
  expectSameResults(g, Mesh{{"row"}, {2}}, {{x, spec({-1, -1, 0, -1})}}, {input({2, 2, 8, 6}, 4)});
}

// SUMMA-style 2D matmul on a q x q mesh: each device gathers a row panel of A and a column panel of B,
// 2(q-1)/q^2 n^2 elements, against (P-1)/P n^2 for a 1D split: sqrt(P)/2 times less.
TEST(Propagation, Summa2dMatmulCommunicatesLessThan1d) {
  const std::int64_t n = 8;
  const int q = 4;
  ir::Graph g;
  const auto a = g.addInput("a", {n, n}, DType::kF32);
  const auto b = g.addInput("b", {n, n}, DType::kF32);
  const auto c = op(g, OpKind::kMatMul, "mm", {a, b});
  g.markOutput(c);
  const Mesh mesh2{{"r", "c"}, {q, q}};
  DeviceGraphs two;
  auto plan2 = expectSameResults(g, mesh2, {{a, spec({0, 1})}, {b, spec({0, 1})}, {c, spec({0, 1})}},
                                 {input({n, n}, 1), input({n, n}, 2)}, &two);
  EXPECT_EQ(plan2.count(ReshardKind::kAllGather), 2);
  EXPECT_EQ(plan2.count(ReshardKind::kAllReduce), 0);
  EXPECT_EQ(two.collectiveBytes[5], 2 * (q - 1) * n * n * 4 / (q * q));

  const Mesh mesh1{{"p"}, {q * q}};
  ir::Graph g1;
  const auto a1 = g1.addInput("a", {n * 2, n}, DType::kF32);  // rows must split 16 ways
  const auto b1 = g1.addInput("b", {n, n * 2}, DType::kF32);
  g1.markOutput(op(g1, OpKind::kMatMul, "mm", {a1, b1}));
  DeviceGraphs one;
  auto plan1 = expectSameResults(g1, mesh1, {{a1, spec({0, -1})}, {b1, spec({-1, 0})}},
                                 {input({n * 2, n}, 1), input({n, n * 2}, 2)}, &one);
  EXPECT_EQ(plan1.count(ReshardKind::kAllGather), 1);
  const std::int64_t oneD = (q * q - 1) * n * n * 2 * 4 / (q * q);  // (P-1)/P of B
  EXPECT_EQ(one.collectiveBytes[5], oneD);
  EXPECT_LT(two.collectiveBytes[5] * 2, one.collectiveBytes[5]);
}

TEST(Propagation, AllToAllWhenTheSplitDimMoves) {
  ir::Graph g;
  const auto x = g.addInput("x", {8, 4}, DType::kF32);
  const auto y = op(g, OpKind::kSoftmax, "sm", {x}, {{"axis", std::int64_t{0}}});
  g.markOutput(y);
  const Mesh mesh{{"a"}, {4}};
  auto plan = expectSameResults(g, mesh, {{x, spec({0, -1})}, {y, spec({-1, 0})}}, {input({8, 4}, 1)});
  EXPECT_EQ(plan.count(ReshardKind::kAllToAll), 1);
}

TEST(Propagation, DataAndTensorParallelOnA2dMesh) {
  ir::Graph g;
  const auto x = g.addInput("x", {4, 6}, DType::kF32);
  const auto w1 = weight(g, "w1", {6, 8}, 1);
  const auto h = op(g, OpKind::kRelu, "relu", {op(g, OpKind::kMatMul, "fc1", {x, w1})});
  const auto y = op(g, OpKind::kMatMul, "fc2", {h, weight(g, "w2", {8, 6}, 2)});
  g.markOutput(y);
  const Mesh mesh{{"dp", "tp"}, {2, 2}};
  auto plan = expectSameResults(g, mesh, {{x, spec({0, -1})}, {w1, spec({-1, 1})}}, {input({4, 6}, 3)});
  ASSERT_EQ(plan.reshards.size(), 1u);
  ASSERT_EQ(plan.reshards[0].steps.size(), 1u);
  EXPECT_EQ(plan.reshards[0].steps[0].kind, ReshardKind::kAllReduce);
  EXPECT_EQ(plan.reshards[0].steps[0].axis, 1);
}

TEST(Propagation, ReshardStepsBetweenSpecs) {
  EXPECT_EQ(reshardSteps(spec({0, -1}), spec({-1, -1}))[0].kind, ReshardKind::kAllGather);
  EXPECT_EQ(reshardSteps(spec({-1, -1}), spec({-1, 0}))[0].kind, ReshardKind::kSlice);
  EXPECT_EQ(reshardSteps(TensorSharding{{-1, -1}, {0}}, spec({0, -1}))[0].kind, ReshardKind::kReduceScatter);
  EXPECT_TRUE(reshardSteps(spec({0, 1}), spec({0, 1})).empty());
}

TEST(Propagation, ErrorsNameTheTensor) {
  ir::Graph g;
  const auto x = g.addInput("x", {6, 4}, DType::kF32), y = g.addInput("y", {1, 4}, DType::kF32);
  g.markOutput(op(g, OpKind::kRelu, "r", {x}));
  g.markOutput(op(g, OpKind::kRelu, "s", {y}));
  auto bad = propagateShardings(g, Mesh{{"tp"}, {4}}, {{y, spec({0, -1})}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().format(), "node 'y': dim 0 of size 1 does not split over mesh axis 'tp' of 4 devices");
  auto rank = propagateShardings(g, Mesh{{"tp"}, {2}}, {{x, spec({0})}});
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.error().format(), "node 'x': sharding [tp] has 1 dims, the tensor 2");
  auto twice = propagateShardings(g, Mesh{{"tp"}, {2}}, {{x, spec({0, 0})}});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().format(), "node 'x': mesh axis 'tp' splits two dims");
}

}  // namespace
}  // namespace tsp::partition
