// Tests of the sharded scheduler's segment keys: what a compile sees of a segment, and nothing else.
#include <gtest/gtest.h>

#include "compile/lower/lowering.h"
#include "compile/schedule/sharded_schedule_internal.h"

namespace tsp::schedule::detail {
namespace {

using ir::DType;
using ir::OpKind;

// A segment that gathers `count` rows of a table by constant indices (first index `first`) and
// scales them; the graph and its ops.
struct Segment {
  ir::Graph graph;
  std::vector<ir::OpId> ops;
};
Segment gatherSegment(double first, std::int64_t count) {
  Segment s;
  ir::Graph& g = s.graph;
  const auto table = g.addWeight("table", {16, 32}, DType::kF16);
  std::vector<double> ids(static_cast<size_t>(count), 1.0);
  ids.front() = first;
  const auto rows = g.addOp(OpKind::kGather, "gather", {table, g.addConstant("ids", {count}, DType::kI64, ids)},
                            {{"axis", std::int64_t{0}}}, 0);
  EXPECT_TRUE(rows.ok()) << rows.error().format();
  const auto scaled = g.addOp(OpKind::kMul, "scale", {*rows, g.addConstant("scale", {}, DType::kF16, {0.5})}, 0);
  EXPECT_TRUE(scaled.ok()) << scaled.error().format();
  g.markOutput(*scaled);
  s.ops = {0, 1};
  return s;
}

// Segments whose constants differ only in values the lowering does not read (a TP rank's vocabulary
// row map) have one key, so they share one compile; the constants' shapes are part of it.
TEST(SegmentKey, ConstantValuesTheLoweringDoesNotReadAreNotPartOfIt) {
  const Segment a = gatherSegment(0, 4), otherIds = gatherSegment(9, 4), moreIds = gatherSegment(0, 8);
  EXPECT_EQ(segmentKey(a.graph, a.ops), segmentKey(otherIds.graph, otherIds.ops));
  EXPECT_NE(segmentKey(a.graph, a.ops), segmentKey(moreIds.graph, moreIds.ops));
}

// The lowering reads the values of a Slice's parameter inputs and of a reduction's axes input
// (ONNX opset 10 and 18 forms), of no other input.
TEST(SegmentKey, InputsWhoseValuesTheLoweringReads) {
  ir::Op slice;
  slice.kind = OpKind::kSlice;
  slice.inputs = {0, 1, 2, 3};
  EXPECT_FALSE(lower::readsInputValues(slice, 0));
  for (size_t i = 1; i < 4; ++i) EXPECT_TRUE(lower::readsInputValues(slice, i)) << "input " << i;
  ir::Op reduce;
  reduce.kind = OpKind::kReduceSum;
  reduce.inputs = {0, 1};
  EXPECT_FALSE(lower::readsInputValues(reduce, 0));
  EXPECT_TRUE(lower::readsInputValues(reduce, 1));
  ir::Op gather;
  gather.kind = OpKind::kGather;
  gather.inputs = {0, 1};
  EXPECT_FALSE(lower::readsInputValues(gather, 1));
}

}  // namespace
}  // namespace tsp::schedule::detail
