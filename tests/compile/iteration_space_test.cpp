// Tests of iteration spaces: the linalg-style index maps of representative ops.
#include "compile/ir/iteration_space.h"

#include <gtest/gtest.h>

namespace tsp::ir {
namespace {

using Shape = std::vector<std::int64_t>;

std::string textOf(Graph& g, OpKind kind, std::vector<TensorId> in, Attrs attrs = {}) {
  auto out = g.addOp(kind, "Y", std::move(in), std::move(attrs), 0);
  EXPECT_TRUE(out.ok());
  const Op& op = g.ops().back();
  auto space = iterationSpace(g, op);
  EXPECT_TRUE(space.ok());
  return space->text(g, op);
}

TEST(IterationSpace, MatMulAndBatchedMatMul) {
  Graph g;
  const auto a = g.addInput("A", {4, 6}, DType::kF32);
  const auto b = g.addWeight("B", {6, 8}, DType::kF32);
  EXPECT_EQ(textOf(g, OpKind::kMatMul, {a, b}), "Y.out[i,j] += MatMul(A[i,k], B[k,j])");
  const auto q = g.addInput("Q", {2, 4, 6}, DType::kF32);
  const auto k = g.addInput("K", {2, 6, 5}, DType::kF32);
  auto text = textOf(g, OpKind::kMatMul, {q, k});
  EXPECT_EQ(text.substr(text.find(" ")), " += MatMul(Q[b0,i,k], K[b0,k,j])");
}

TEST(IterationSpace, ConvWindowMaps) {
  Graph g;
  const auto x = g.addInput("X", {1, 3, 8, 8}, DType::kF32);
  const auto w = g.addWeight("W", {4, 3, 3, 3}, DType::kF32);
  EXPECT_EQ(textOf(g, OpKind::kConv, {x, w}, {{"strides", Shape{2, 2}}, {"pads", Shape{1, 1, 1, 1}}}),
            "Y.out[n,c,h,w] += Conv(X[n,k,h*2+r-1,w*2+q-1], W[c,k,r,q])");
}

TEST(IterationSpace, ElementwiseBroadcastTransposeReduce) {
  Graph g;
  const auto x = g.addInput("X", {4, 5}, DType::kF32);
  const auto b = g.addWeight("b", {5}, DType::kF32);
  const auto r = g.addInput("R", {4, 1}, DType::kF32);
  EXPECT_EQ(textOf(g, OpKind::kAdd, {x, b}), "Y.out[d0,d1] = Add(X[d0,d1], b[d1])");
  Graph g2;
  const auto x2 = g2.addInput("X", {4, 5}, DType::kF32);
  const auto r2 = g2.addInput("R", {4, 1}, DType::kF32);
  EXPECT_EQ(textOf(g2, OpKind::kMul, {x2, r2}), "Y.out[d0,d1] = Mul(X[d0,d1], R[d0,0])");
  Graph g3;
  const auto x3 = g3.addInput("X", {4, 5}, DType::kF32);
  EXPECT_EQ(textOf(g3, OpKind::kTranspose, {x3}), "Y.out[d0,d1] = Transpose(X[d1,d0])");
  Graph g4;
  const auto x4 = g4.addInput("X", {4, 5}, DType::kF32);
  EXPECT_EQ(textOf(g4, OpKind::kReduceSum, {x4}, {{"axes", Shape{1}}, {"keepdims", std::int64_t{0}}}),
            "Y.out[d0] += ReduceSum(X[d0,r1])");
  (void)r;
}

}  // namespace
}  // namespace tsp::ir
