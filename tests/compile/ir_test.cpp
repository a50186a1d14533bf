// Tests of the IR: shape inference of every op kind, errors naming the op, and the text form.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "compile/ir/graph.h"
#include "compile/ir/text_format.h"

namespace tsp::ir {
namespace {

using Shape = std::vector<std::int64_t>;

// One op on fresh fp32 inputs of the given shapes; returns the output shapes or the error text.
struct OneOp {
  Graph g;
  std::vector<TensorId> ins;
  explicit OneOp(std::vector<Shape> shapes, DType dtype = DType::kF32) {
    for (size_t i = 0; i < shapes.size(); ++i) ins.push_back(g.addInput("in" + std::to_string(i), shapes[i], dtype));
  }
  Expected<std::vector<TensorId>> add(OpKind kind, Attrs attrs = {}) { return g.addMultiOp(kind, "op", ins, attrs, 0); }
  Shape shape(OpKind kind, Attrs attrs = {}) {
    auto outs = add(kind, std::move(attrs));
    EXPECT_TRUE(outs.ok()) << outs.error().format();
    return outs.ok() && !outs->empty() ? g.tensor(outs->front()).shape : Shape{-1};
  }
  std::string error(OpKind kind, Attrs attrs = {}) {
    auto outs = add(kind, std::move(attrs));
    return outs.ok() ? "no error" : outs.error().format();
  }
};

TEST(ShapeInference, LinearAlgebra) {
  EXPECT_EQ(OneOp({{2, 5, 8, 16}, {16, 4}}).shape(OpKind::kMatMul), (Shape{2, 5, 8, 4}));
  EXPECT_EQ(OneOp({{3, 1, 8, 16}, {7, 16, 4}}).shape(OpKind::kMatMul), (Shape{3, 7, 8, 4}));
  EXPECT_EQ(OneOp({{16}, {16, 4}}).shape(OpKind::kMatMul), (Shape{4}));
  EXPECT_EQ(OneOp({{8, 16}, {4, 16}, {4}}).shape(OpKind::kGemm, {{"transB", std::int64_t{1}}}), (Shape{8, 4}));
  EXPECT_EQ(OneOp({{1, 8, 32, 32}, {16, 4, 3, 3}})
                .shape(OpKind::kConv, {{"group", std::int64_t{2}}, {"strides", Shape{2, 2}}, {"pads", Shape{1, 1, 1, 1}},
                                       {"dilations", Shape{1, 1}}}),
            (Shape{1, 16, 16, 16}));
  EXPECT_EQ(OneOp({{1, 3, 10, 10}, {4, 3, 3, 3}}).shape(OpKind::kConv, {{"dilations", Shape{2, 2}}}),
            (Shape{1, 4, 6, 6}));
  EXPECT_EQ(OneOp({{1, 8, 32, 32}, {16, 3, 3, 3}}).error(OpKind::kConv, {{"group", std::int64_t{2}}}),
            "node 'op': Conv weight has 3 input channels per group, the input 8 in 2 groups");
  EXPECT_EQ(OneOp({{8, 64}, {65, 32}}).error(OpKind::kMatMul), "node 'op': MatMul inner dimensions differ: 64 vs 65");
}

TEST(ShapeInference, ElementwiseBroadcasts) {
  for (OpKind k : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kPow})
    EXPECT_EQ(OneOp({{4, 1, 3}, {5, 1}}).shape(k), (Shape{4, 5, 3}));
  OneOp eq({{2, 3}, {3}});
  auto out = eq.add(OpKind::kEqual);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(eq.g.tensor(out->front()).dtype, DType::kBool);
  EXPECT_EQ(OneOp({{2, 1}, {1, 3}, {2, 3}}).shape(OpKind::kWhere), (Shape{2, 3}));
  EXPECT_EQ(OneOp({{2, 3}, {4}}).error(OpKind::kAdd), "node 'op': Add shapes do not broadcast: [2,3] and [4]");
  for (OpKind k : {OpKind::kRelu, OpKind::kGelu, OpKind::kTanh, OpKind::kSigmoid, OpKind::kExp, OpKind::kSqrt,
                   OpKind::kErf, OpKind::kIdentity})
    EXPECT_EQ(OneOp({{2, 7}}).shape(k), (Shape{2, 7}));
  EXPECT_EQ(OneOp({{2, 7}, {7}}).error(OpKind::kRelu), "node 'op': Relu takes 1 input");
}

TEST(ShapeInference, NormalisationAndReductions) {
  EXPECT_EQ(OneOp({{2, 7}}).shape(OpKind::kSoftmax, {{"axis", std::int64_t{-1}}}), (Shape{2, 7}));
  EXPECT_EQ(OneOp({{2, 7}}).error(OpKind::kSoftmax, {{"axis", std::int64_t{2}}}),
            "node 'op': Softmax axis 2 is out of range for rank 2");
  EXPECT_EQ(OneOp({{2, 5, 8}, {8}, {8}}).shape(OpKind::kLayerNormalization), (Shape{2, 5, 8}));
  EXPECT_EQ(OneOp({{1, 4, 5, 5}, {4}, {4}, {4}, {4}}).shape(OpKind::kBatchNormalization), (Shape{1, 4, 5, 5}));
  EXPECT_EQ(OneOp({{2, 5, 8}}).shape(OpKind::kReduceMean, {{"axes", Shape{-1}}}), (Shape{2, 5, 1}));
  EXPECT_EQ(OneOp({{2, 5, 8}}).shape(OpKind::kReduceSum, {{"axes", Shape{0, 2}}, {"keepdims", std::int64_t{0}}}),
            (Shape{5}));
  EXPECT_EQ(OneOp({{2, 5, 8}}).shape(OpKind::kReduceMax, {{"keepdims", std::int64_t{0}}}), (Shape{}));
}

TEST(ShapeInference, ShapeAndDataMovement) {
  EXPECT_EQ(OneOp({{2, 3, 4}}).shape(OpKind::kReshape, {{"shape", Shape{0, -1}}}), (Shape{2, 12}));
  EXPECT_EQ(OneOp({{2, 3, 4}}).error(OpKind::kReshape, {{"shape", Shape{5, -1}}}),
            "node 'op': Reshape cannot infer -1 from 24 elements into [5,-1]");
  EXPECT_EQ(OneOp({{2, 3, 4}}).shape(OpKind::kTranspose, {{"perm", Shape{2, 0, 1}}}), (Shape{4, 2, 3}));
  EXPECT_EQ(OneOp({{2, 3, 4}}).shape(OpKind::kTranspose), (Shape{4, 3, 2}));
  EXPECT_EQ(OneOp({{2, 3, 4}}).shape(OpKind::kFlatten, {{"axis", std::int64_t{2}}}), (Shape{6, 4}));
  EXPECT_EQ(OneOp({{2, 3}, {2, 5}}).shape(OpKind::kConcat, {{"axis", std::int64_t{1}}}), (Shape{2, 8}));
  OneOp split({{2, 9}});
  auto parts = split.add(OpKind::kSplit, {{"axis", std::int64_t{1}}, {"split", Shape{2, 7}}});
  ASSERT_TRUE(parts.ok());
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ(split.g.tensor((*parts)[1]).shape, (Shape{2, 7}));
  EXPECT_EQ(OneOp({{10, 4}}).shape(OpKind::kSlice, {{"starts", Shape{1}}, {"ends", Shape{-1}}, {"axes", Shape{0}},
                                                    {"steps", Shape{3}}}),
            (Shape{3, 4}));
  EXPECT_EQ(OneOp({{10, 4}}).shape(OpKind::kSlice, {{"starts", Shape{-1}}, {"ends", Shape{-1000}}, {"axes", Shape{0}},
                                                    {"steps", Shape{-1}}}),
            (Shape{10, 4}));
  // Steps of any magnitude count without overflow: INT64_MIN and INT64_MAX take one element.
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min(), kMax = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(OneOp({{10, 4}}).shape(OpKind::kSlice, {{"starts", Shape{kMax}}, {"ends", Shape{kMin}}, {"axes", Shape{0}},
                                                    {"steps", Shape{kMin}}}),
            (Shape{1, 4}));
  EXPECT_EQ(OneOp({{10, 4}}).shape(OpKind::kSlice, {{"starts", Shape{0}}, {"ends", Shape{kMax}}, {"axes", Shape{1}},
                                                    {"steps", Shape{kMax}}}),
            (Shape{10, 1}));
  Graph g;
  const auto table = g.addWeight("table", {100, 16}, DType::kF16);
  const auto ids = g.addInput("ids", {2, 5}, DType::kI32);
  auto emb = g.addOp(OpKind::kGather, "embed", {table, ids}, {}, 0);
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ(g.tensor(*emb).shape, (Shape{2, 5, 16}));
  EXPECT_EQ(OneOp({{2, 3}}).shape(OpKind::kUnsqueeze, {{"axes", Shape{0, -1}}}), (Shape{1, 2, 3, 1}));
  EXPECT_EQ(OneOp({{1, 3, 1}}).shape(OpKind::kSqueeze), (Shape{3}));
  EXPECT_EQ(OneOp({{1, 3, 1}}).error(OpKind::kSqueeze, {{"axes", Shape{1}}}),
            "node 'op': Squeeze of axis 1 whose size is 3");
  EXPECT_EQ(OneOp({{2, 3}}).shape(OpKind::kCast, {{"to", std::string("int32")}}), (Shape{2, 3}));
  EXPECT_EQ(OneOp({{3, 1}}).shape(OpKind::kExpand, {{"shape", Shape{2, 1, 4}}}), (Shape{2, 3, 4}));
  EXPECT_EQ(OneOp({{2, 3, 4}}).shape(OpKind::kShape, {{"start", std::int64_t{1}}}), (Shape{2}));
  EXPECT_EQ(OneOp({}).shape(OpKind::kConstantOfShape, {{"shape", Shape{3, 2}}, {"value", 1.5}}), (Shape{3, 2}));
}

TEST(ShapeInference, Pooling) {
  const Attrs pool = {{"kernel_shape", Shape{3, 3}}, {"strides", Shape{2, 2}}, {"pads", Shape{1, 1, 1, 1}}};
  EXPECT_EQ(OneOp({{1, 64, 112, 112}}).shape(OpKind::kMaxPool, pool), (Shape{1, 64, 56, 56}));
  EXPECT_EQ(OneOp({{1, 1, 5, 5}}).shape(OpKind::kAveragePool, {{"kernel_shape", Shape{2, 2}}, {"strides", Shape{2, 2}},
                                                              {"ceil_mode", std::int64_t{1}}}),
            (Shape{1, 1, 3, 3}));
  EXPECT_EQ(OneOp({{2, 8, 7, 7}}).shape(OpKind::kGlobalAveragePool), (Shape{2, 8, 1, 1}));
}

TEST(ShapeInference, RangeNeedsConstants) {
  Graph g;
  auto c = [&](const char* n, double v) {
    return g.addConstant(n, {}, DType::kI64, makeData(std::vector<double>(1, v)));
  };
  auto r = g.addOp(OpKind::kRange, "range", {c("a", 2), c("b", 11), c("d", 3)}, {}, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(g.tensor(*r).shape, (Shape{3}));
  const auto x = g.addInput("x", {}, DType::kI64);
  EXPECT_EQ(g.addOp(OpKind::kRange, "dyn", {x, x, x}, {}, 0).error().format(),
            "node 'dyn': Range needs constant scalar start, limit and delta");
}

// Sizes from attributes are checked before they are multiplied or added: each overflow or oversized
// result is a model error naming the op (found by the ONNX fuzzer as signed overflows).
TEST(ShapeInference, SizesNeverOverflow) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::int64_t big = std::int64_t{1} << 40;
  EXPECT_EQ(OneOp({{4, 6}}).error(OpKind::kSplit, {{"axis", std::int64_t{1}}, {"split", Shape{kMax, kMax, 8}}}),
            "node 'op': Split sizes [9223372036854775807,9223372036854775807,8] do not add up to dimension 6");
  EXPECT_EQ(OneOp({{4, 6}}).error(OpKind::kSplit, {{"axis", std::int64_t{1}}, {"split", Shape{-2, 8}}}),
            "node 'op': Split sizes [-2,8] do not add up to dimension 6");
  EXPECT_EQ(OneOp({{1, 1, 5, 5}}).error(OpKind::kMaxPool, {{"kernel_shape", Shape{1, 1}}, {"pads", Shape{kMax, 0, kMax, 0}}}),
            "node 'op': MaxPool pads make spatial axis 0 longer than 2^63 elements");
  // A dilated kernel longer than the input leaves no window, however large the dilation.
  EXPECT_EQ(OneOp({{1, 1, 5, 5}, {1, 1, 3, 3}}).shape(OpKind::kConv, {{"dilations", Shape{kMax, 1}}}),
            (Shape{1, 1, 0, 3}));
  EXPECT_EQ(OneOp({{1, 0, 5, 5}, {0, big, 1, 1}}).error(OpKind::kConv, {{"group", big}}),
            "node 'op': Conv weight has 1099511627776 input channels per group, the input 0 in 1099511627776 groups");
  {
    // The same 2^48-element tensor concatenated 2^15 + 1 times.
    Graph concat;
    const auto x = concat.addInput("x", {std::int64_t{1} << 48}, DType::kI8);
    EXPECT_EQ(concat.addOp(OpKind::kConcat, "cat", std::vector<TensorId>((1 << 15) + 1, x), {}, 0).error().format(),
              "node 'cat': Concat along axis 0 is longer than 2^63 elements");
  }
  Graph g;
  auto c = [&](const char* n, double v) {
    return g.addConstant(n, {}, DType::kF32, std::vector<double>{v});
  };
  EXPECT_EQ(g.addOp(OpKind::kRange, "range", {c("a", 0), c("b", 1e30), c("d", 1)}, {}, 0).error().format(),
            "node 'range': Range from 0 to 1e+30 by 1 has more than 2^48 elements");
  EXPECT_EQ(g.addOp(OpKind::kRange, "nan", {c("a2", 0), c("b2", std::nan("")), c("d2", 1)}, {}, 0).error().format(),
            "node 'nan': Range from 0 to nan by 1 has more than 2^48 elements");
  // A float attribute where an integer is expected saturates instead of an undefined cast.
  EXPECT_EQ(OneOp({{2, 3}}).error(OpKind::kSoftmax, {{"axis", 1e300}}),
            "node 'op': Softmax axis 9223372036854775807 is out of range for rank 2");
}

TEST(ShapeInference, Communication) {
  EXPECT_EQ(OneOp({{8, 16}}).shape(OpKind::kAllReduce, {{"group", std::int64_t{4}}}), (Shape{8, 16}));
  EXPECT_EQ(OneOp({{8, 16}}).shape(OpKind::kAllGather, {{"group", std::int64_t{4}}, {"axis", std::int64_t{1}}}),
            (Shape{8, 64}));
  EXPECT_EQ(OneOp({{8, 16}}).shape(OpKind::kReduceScatter, {{"group", std::int64_t{4}}}), (Shape{2, 16}));
  EXPECT_EQ(OneOp({{6, 16}}).error(OpKind::kReduceScatter, {{"group", std::int64_t{4}}}),
            "node 'op': ReduceScatter of dimension 6 over 4 chips");
  OneOp send({{8, 16}});
  auto none = send.add(OpKind::kSend, {{"peer", std::int64_t{1}}});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(OneOp({}).shape(OpKind::kRecv, {{"shape", Shape{8, 16}}, {"dtype", std::string("fp16")}}), (Shape{8, 16}));
}

TEST(ShapeInference, SizesPastATensorsLimitAreErrors) {
  // The product of the target's dimensions overflows 64 bits before it is compared with the input's.
  EXPECT_EQ(OneOp({{2, 3, 4}}).error(OpKind::kReshape, {{"shape", Shape{4294967296, 4294967296, 4}}}),
            "node 'op': Reshape target [4294967296,4294967296,4] holds more elements than a tensor can");
  EXPECT_EQ(OneOp({Shape{4294967296}}).error(OpKind::kAllGather, {{"group", std::int64_t{1} << 40}}),
            "node 'op': AllGather of dimension 4294967296 over 1099511627776 chips");
  EXPECT_EQ(OneOp({{2, 4294967296}}).error(OpKind::kAllToAll, {{"group", std::int64_t{2}}, {"split_axis", std::int64_t{0}},
                                                                {"concat_axis", std::int64_t{1}}}),
            "no error");  // [1, 2^33] fp32 is 2^35 bytes
  EXPECT_EQ(OneOp({{4611686018427387904, 4}}).error(OpKind::kAllToAll, {{"group", std::int64_t{4}},
                                                                        {"split_axis", std::int64_t{1}},
                                                                        {"concat_axis", std::int64_t{0}}}),
            "node 'op': AllToAll of dimension 4611686018427387904 over 4 chips");
  // Whatever rule made an output's shape, it may not be negative or hold more than 2^48 bytes.
  EXPECT_EQ(OneOp({Shape{16777216}}).error(OpKind::kAllGather, {{"group", std::int64_t{16777216}}}),
            "node 'op': AllGather output shape [281474976710656] holds more than 2^48 bytes, more than the SRAM of "
            "any cluster this build simulates");
  EXPECT_EQ(OneOp({}).error(OpKind::kRecv, {{"shape", Shape{-3, 4}}, {"dtype", std::string("fp16")}}),
            "node 'op': Recv output shape [-3,4] has a negative dimension");
}

TEST(Graph, UseDefChains) {
  Graph g;
  const auto x = g.addInput("x", {4, 4}, DType::kF32);
  auto a = g.addOp(OpKind::kRelu, "a", {x}, 0);
  auto b = g.addOp(OpKind::kMul, "b", {*a, *a}, 0);
  auto c = g.addOp(OpKind::kAdd, "c", {*a, *b}, 1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(g.tensor(*a).users, (std::vector<OpId>{1, 2}));  // one entry per user op, in order
  EXPECT_EQ(g.tensor(*c).producer, 2);
  EXPECT_EQ(g.layerCount(), 2);
  EXPECT_EQ(g.findTensor("b.out"), std::optional<TensorId>(*b));
}

TEST(TextForm, RoundTrips) {
  Graph g;
  const auto x = g.addInput("x", {2, 8}, DType::kF16);
  const auto w = g.addWeight("odd name/w", {8, 4}, DType::kF16);
  const auto shape = g.addConstant("shape", {2}, DType::kI64, makeData({4, 2}));
  (void)shape;
  const auto eps = g.addConstant("eps", {}, DType::kF32, makeData(std::vector<double>(1, 1e-5)));
  auto y = g.addOp(OpKind::kMatMul, "fc", {x, w}, 0);
  auto z = g.addOp(OpKind::kAdd, "add", {*y, eps}, 1);
  auto parts = g.addMultiOp(OpKind::kSplit, "split", {*z}, {{"axis", std::int64_t{1}}, {"split", Shape{1, 3}}}, 1);
  auto r = g.addOp(OpKind::kReshape, "reshape", {(*parts)[1]}, {{"shape", Shape{3, 2}}}, 1);
  auto ge = g.addOp(OpKind::kGelu, "gelu", {*r}, {{"approximate", std::string("tanh")}, {"alpha", 0.5}}, 2);
  ASSERT_TRUE(ge.ok());
  g.markOutput(*ge);
  g.markOutput((*parts)[0]);
  const std::string text = g.print();
  auto parsed = parseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().format() << "\n" << text;
  EXPECT_EQ(parsed->print(), text);
  EXPECT_EQ(parsed->ops().size(), 5u);
  EXPECT_EQ(parsed->tensor(*parsed->findTensor("eps")).data->at(0), 1e-5);
  EXPECT_NE(text.find("%\"odd name/w\""), std::string::npos);
}

TEST(TextForm, ErrorsPointAtLineAndColumn) {
  EXPECT_EQ(parseGraph("input %x: fp32[2]\n%y: fp32[2] = Frobnicate %f(%x) @0\n", "t.ir").error().format(),
            "t.ir:2:15: unknown op kind 'Frobnicate'");
  EXPECT_EQ(parseGraph("input %x: fp32[2]\n%y: fp32[2] = Relu %r(%q) @0\n", "t.ir").error().format(),
            "t.ir:2:23: unknown tensor '%q'");
  EXPECT_EQ(parseGraph("input %x: fp32[2]\n%y: fp32[3] = Relu %r(%x) @0\n", "t.ir").error().format(),
            "t.ir:2:15: node 'r': output '%y' is declared fp32[3] but inferred fp32[2]");
  EXPECT_EQ(parseGraph("input %x: fq32[2]\n", "t.ir").error().format(), "t.ir:1:11: unknown dtype 'fq32'");
}

}  // namespace
}  // namespace tsp::ir
