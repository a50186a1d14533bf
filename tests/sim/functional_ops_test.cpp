// Functional mode on the VXM functions beyond add/mul: division, transcendental functions, splatted
// operands, Softmax and LayerNorm statistics and reductions through named accumulators.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <tuple>

#include "compile/ir/interpreter.h"
#include "compile/schedule/cluster_schedule.h"
#include "runtime/functional_run.h"
#include "sim/accumulators.h"
#include "sim/chip.h"
#include "sim/functional.h"
#include "sim/kokkos_environment.h"
#include "sim/onnx_node_cases.h"
#include "sim/one_chip_functional.h"

namespace tsp::sim {
namespace {

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new KokkosEnvironment);

using ir::OpKind;

TEST(FunctionalOps, ElementwiseFunctionsAndSplattedOperandsMatchTheInterpreter) {
  // Div, Pow, Sqrt, Sigmoid, Erf on FP16, and a scalar and a one-value-per-row operand whose lane 0
  // stands for every lane.
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const auto x = g.addInput("x", {40, 200}, dt);
  const auto y = g.addInput("y", {40, 200}, dt);
  const auto positive = *g.addOp(OpKind::kAdd, "positive", {*g.addOp(OpKind::kMul, "square", {x, x}, 0),
                                                           g.addWeight("one", {200}, dt)}, 0);
  const auto root = *g.addOp(OpKind::kSqrt, "sqrt", {positive}, 0);
  const auto ratio = *g.addOp(OpKind::kDiv, "div", {y, root}, 0);
  const auto gate = *g.addOp(OpKind::kSigmoid, "sigmoid", {ratio}, 0);
  const auto erf = *g.addOp(OpKind::kErf, "erf", {gate}, 0);
  const auto scaled = *g.addOp(OpKind::kMul, "scale", {erf, g.addWeight("s", {}, dt)}, 0);
  const auto perRow = *g.addOp(OpKind::kSub, "per_row", {scaled, g.addInput("r", {40, 1}, dt)}, 0);
  g.markOutput(*g.addOp(OpKind::kPow, "pow", {positive, g.addWeight("two", {1}, dt)}, 0));
  g.markOutput(perRow);
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, AttentionScoresSoftmaxAndLayerNormMatchTheInterpreter) {
  // Scores x W scaled by a scalar, a Softmax over 200 values a row (two tiles, the second part
  // full), a second matmul, a residual and a LayerNormalization with scale and bias: FP16.
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const auto x = g.addInput("x", {64, 160}, dt);
  const auto scores = *g.addOp(OpKind::kMatMul, "qk", {x, g.addWeight("wk", {160, 200}, dt)}, 0);
  const auto scaled = *g.addOp(OpKind::kMul, "scale", {scores, g.addWeight("attn_scale", {}, dt)}, 0);
  const auto probs = *g.addOp(OpKind::kSoftmax, "softmax", {scaled}, {{"axis", std::int64_t{-1}}}, 0);
  g.markOutput(probs);
  const auto ctx = *g.addOp(OpKind::kMatMul, "pv", {probs, g.addWeight("wv", {200, 160}, dt)}, 0);
  const auto sum = *g.addOp(OpKind::kAdd, "residual", {ctx, x}, 0);
  g.markOutput(*g.addOp(OpKind::kLayerNormalization, "norm",
                        {sum, g.addWeight("gamma", {160}, dt), g.addWeight("beta", {160}, dt)},
                        {{"axis", std::int64_t{-1}}, {"epsilon", 1e-5}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, Int8ReductionsAreExact) {
  // Sum over the values of a row, maximum over the outer axis, a mean over the middle axis
  // (truncated toward zero as the interpreter stores it) and a mean over everything.
  ir::Graph g;
  const auto dt = ir::DType::kI8;
  const auto x = *g.addOp(OpKind::kRelu, "relu", {g.addInput("x", {6, 5, 400}, dt)}, 0);
  const auto y = g.addInput("y", {6, 5, 400}, dt);
  g.markOutput(*g.addOp(OpKind::kReduceSum, "sum", {x}, {{"axes", std::vector<std::int64_t>{-1}}}, 0));
  g.markOutput(*g.addOp(OpKind::kReduceMax, "max", {y}, {{"axes", std::vector<std::int64_t>{0}}}, 0));
  g.markOutput(*g.addOp(OpKind::kReduceMean, "mean", {y},
                        {{"axes", std::vector<std::int64_t>{1}}, {"keepdims", std::int64_t{0}}}, 0));
  g.markOutput(*g.addOp(OpKind::kReduceMean, "mean_all", {y}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, GlobalAveragePoolOfAChannelsLastMapMatchesTheInterpreter) {
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const auto x = *g.addOp(OpKind::kRelu, "relu", {g.addInput("x", {2, 200, 7, 7}, dt)}, 0);
  g.markOutput(*g.addOp(OpKind::kGlobalAveragePool, "pool", {x}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, Int8SoftmaxIsRefusedNamingTheFunction) {
  ir::Graph g;
  g.markOutput(*g.addOp(OpKind::kSoftmax, "softmax", {g.addInput("x", {8, 64}, ir::DType::kI8)},
                        {{"axis", std::int64_t{-1}}}, 0));
  const Status s = runOnOneChip(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kModel) << s.error().format();
  EXPECT_NE(s.error().message.find("VxmUnary accumulate"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("softmax and moment statistics have no integer form"), std::string::npos)
      << s.error().message;
}

TEST(FunctionalOps, Int8SigmoidIsRefusedNamingTheFunction) {
  ir::Graph g;
  g.markOutput(*g.addOp(OpKind::kSigmoid, "sigmoid", {g.addInput("x", {8, 64}, ir::DType::kI8)}, 0));
  const Status s = runOnOneChip(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kModel) << s.error().format();
  EXPECT_NE(s.error().message.find("VXM function sigmoid has no integer form"), std::string::npos) << s.error().message;
}

TEST(FunctionalOps, ReductionOfRowValuesIntoSeveralOutputTilesIsRefused) {
  // Each output tile's emit waits for the input tiles of its own columns only: a reduction of the
  // values per row whose output spans several tiles is timed, not computed (exit 2).
  ir::Graph g;
  g.markOutput(*g.addOp(OpKind::kReduceSum, "sum", {g.addInput("x", {2, 400, 5}, ir::DType::kF16)},
                        {{"axes", std::vector<std::int64_t>{-1}}, {"keepdims", std::int64_t{0}}}, 0));
  const Status s = runOnOneChip(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kModel) << s.error().format();
  EXPECT_NE(s.error().message.find("ReduceSum 'sum': it reduces the values per row into several output tiles"),
            std::string::npos)
      << s.error().message;
}

// The accumulator kernels on known values: an online softmax across a new maximum, Welford moments,
// and an INT8 mean that truncates toward zero.
TEST(FunctionalOps, AccumulatorKernelsOnKnownValues) {
  const int lanes = 4;
  AccumulatorBank fp16(ElementType::kFp16, lanes);
  isa::Accumulator softmax;
  softmax.kind = isa::Accumulator::Kind::kSoftmax;
  softmax.dims = {1, 4};
  softmax.reduced = {0, 1};
  std::uint16_t halves[4] = {floatToHalf(1), floatToHalf(3), floatToHalf(2), floatToHalf(0)};
  std::uint8_t bytes[8];
  std::memcpy(bytes, halves, sizeof bytes);
  ASSERT_TRUE(fp16.accumulate(0, softmax, {0, 0, 0}, bytes, 1).ok());
  auto probs = fp16.normalize(0, softmax, {0, 0, 0}, bytes, 1);
  ASSERT_TRUE(probs.ok()) << probs.error().format();
  std::uint16_t out[4];
  std::memcpy(out, probs->data(), sizeof out);
  const double total = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  EXPECT_NEAR(halfToFloat(out[1]), std::exp(3.0) / total, 1e-3);
  EXPECT_NEAR(halfToFloat(out[3]), 1.0 / total, 1e-3);

  isa::Accumulator moments = softmax;
  moments.kind = isa::Accumulator::Kind::kMoments;
  ASSERT_TRUE(fp16.accumulate(1, moments, {1, 0, 0}, bytes, 1).ok());
  auto normal = fp16.normalize(1, moments, {1, 0, 0}, bytes, 1);
  ASSERT_TRUE(normal.ok());
  std::memcpy(out, normal->data(), sizeof out);
  // mean 1.5, variance 1.25: (3 - 1.5) / sqrt(1.25)
  EXPECT_NEAR(halfToFloat(out[1]), 1.5 / std::sqrt(1.25), 2e-3);

  AccumulatorBank int8(ElementType::kInt8, lanes);
  isa::Accumulator mean;
  mean.dims = {2, 4};  // two rows, reduced: one value per lane position
  mean.reduced = {1, 0};
  mean.outCols = 4;
  mean.divisor = 2;
  const std::int8_t values[8] = {-7, 5, 3, 1, 0, 4, -2, 1};
  ASSERT_TRUE(int8.accumulate(2, mean, {2, 0, 0}, reinterpret_cast<const std::uint8_t*>(values), 2).ok());
  auto emitted = int8.emit(2, mean, {2, 0, 0}, 1);
  ASSERT_TRUE(emitted.ok());
  const std::int8_t expected[4] = {-3, 4, 0, 1};  // -7/2, 9/2, 1/2, 2/2 truncated
  for (int l = 0; l < 4; ++l) EXPECT_EQ(static_cast<std::int8_t>((*emitted)[l]), expected[l]) << l;
}

// Conv and pooling windows over channels-last maps made on chip (so that they are not gathered).
ir::TensorId mapOf(ir::Graph& g, const std::string& name, const std::vector<std::int64_t>& shape, ir::DType dt) {
  return *g.addOp(OpKind::kRelu, name + "_relu", {g.addInput(name, shape, dt)}, 0);
}

using Ints = std::vector<std::int64_t>;

TEST(FunctionalOps, StridedPaddedConvAndPaddedMaxPoolMatchTheInterpreter) {
  for (const auto dt : {ir::DType::kF16, ir::DType::kI8}) {
    ir::Graph g;
    const auto x = mapOf(g, "x", {1, 200, 9, 9}, dt);
    const auto y = *g.addOp(OpKind::kConv, "conv", {x, g.addWeight("w", {24, 200, 3, 3}, dt)},
                            {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}, 0);
    g.markOutput(y);
    g.markOutput(*g.addOp(OpKind::kMaxPool, "pool", {x},
                          {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}, 0));
    const Status s = runOnOneChip(g);
    EXPECT_TRUE(s.ok()) << ir::dtypeName(dt) << ": " << s.error().format();
  }
}

TEST(FunctionalOps, DepthwiseConvsMatchTheInterpreter) {
  // MobileNet's 3 x 3 (stride 1 and 2), ConvNeXt's 7 x 7 with bias; 200 channels (two FP16 tiles).
  for (const auto dt : {ir::DType::kF16, ir::DType::kI8})
    for (const auto& [k, stride, bias] : {std::tuple{3, 1, false}, std::tuple{3, 2, false}, std::tuple{7, 1, true}}) {
      ir::Graph g;
      const std::int64_t c = 200, pad = k / 2;
      const auto x = mapOf(g, "x", {2, c, 9, 9}, dt);
      std::vector<ir::TensorId> ins = {x, g.addWeight("w", {c, 1, k, k}, dt)};
      if (bias) ins.push_back(g.addWeight("b", {c}, dt));
      g.markOutput(*g.addOp(OpKind::kConv, "depthwise", ins,
                            {{"kernel_shape", Ints{k, k}}, {"strides", Ints{stride, stride}}, {"group", c},
                             {"pads", Ints{pad, pad, pad, pad}}},
                            0));
      const Status s = runOnOneChip(g);
      EXPECT_TRUE(s.ok()) << ir::dtypeName(dt) << " " << k << "x" << k << " stride " << stride << ": "
                          << s.error().format();
    }
}

TEST(FunctionalOps, GroupedConvsMatchTheInterpreter) {
  // RegNet's 3 x 3 groups of 8 channels over 200 channels (two FP16 tiles: an output tile skips the
  // K tiles of other groups), stride 1 and 2 with bias; ResNeXt-style 2 groups of 24 channels, 1 x 1.
  for (const auto dt : {ir::DType::kF16, ir::DType::kI8})
    for (const auto& [c, groups, k, stride, bias] :
         {std::tuple{200, 25, 3, 1, false}, std::tuple{200, 25, 3, 2, true}, std::tuple{48, 2, 1, 1, false}}) {
      ir::Graph g;
      const std::int64_t pad = k / 2;
      const auto x = mapOf(g, "x", {2, c, 7, 7}, dt);
      std::vector<ir::TensorId> ins = {x, g.addWeight("w", {c, c / groups, k, k}, dt)};
      if (bias) ins.push_back(g.addWeight("b", {c}, dt));
      g.markOutput(*g.addOp(OpKind::kConv, "grouped", ins,
                            {{"kernel_shape", Ints{k, k}}, {"strides", Ints{stride, stride}}, {"group", std::int64_t{groups}},
                             {"pads", Ints{pad, pad, pad, pad}}},
                            0));
      const Status s = runOnOneChip(g);
      EXPECT_TRUE(s.ok()) << ir::dtypeName(dt) << " " << groups << " groups " << k << "x" << k << " stride " << stride
                          << ": " << s.error().format();
    }
}

TEST(FunctionalOps, ConvNeXtBlockMatchesTheInterpreter) {
  // Depthwise 7 x 7 Conv, the map moved to [N, H, W, C] (stored row-major: matmuls read it),
  // LayerNorm, pointwise MLP, moved back, a layer scale [C, 1, 1] broadcast over the channels-last
  // map (an SXM element map), the residual add. 200 channels: two FP16 tiles.
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const std::int64_t c = 200;
  const auto x = mapOf(g, "x", {1, c, 6, 6}, dt);
  const auto dw = *g.addOp(OpKind::kConv, "dwconv", {x, g.addWeight("w", {c, 1, 7, 7}, dt), g.addWeight("b", {c}, dt)},
                           {{"kernel_shape", Ints{7, 7}}, {"group", c}, {"pads", Ints{3, 3, 3, 3}}}, 0);
  const auto nhwc = *g.addOp(OpKind::kTranspose, "nhwc", {dw}, {{"perm", Ints{0, 2, 3, 1}}}, 0);
  const auto norm = *g.addOp(OpKind::kLayerNormalization, "norm", {nhwc, g.addWeight("g", {c}, dt), g.addWeight("beta", {c}, dt)},
                             {{"axis", std::int64_t{-1}}}, 0);
  const auto up = *g.addOp(OpKind::kMatMul, "pw1", {norm, g.addWeight("w1", {c, 2 * c}, dt)}, 0);
  const auto act = *g.addOp(OpKind::kRelu, "act", {up}, 0);
  const auto down = *g.addOp(OpKind::kMatMul, "pw2", {act, g.addWeight("w2", {2 * c, c}, dt)}, 0);
  const auto nchw = *g.addOp(OpKind::kTranspose, "nchw", {down}, {{"perm", Ints{0, 3, 1, 2}}}, 0);
  const auto scaled = *g.addOp(OpKind::kMul, "layer_scale", {g.addWeight("gamma", {c, 1, 1}, dt), nchw}, 0);
  g.markOutput(*g.addOp(OpKind::kAdd, "residual", {x, scaled}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, SqueezeExcitationMatchesTheInterpreter) {
  // Global pool, two 1 x 1 Convs, a sigmoid gate [N, C, 1, 1] multiplied into the map (batch 2: the
  // gate's row n serves the H*W rows of image n).
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const auto x = mapOf(g, "x", {2, 48, 5, 5}, dt);
  const auto pooled = *g.addOp(OpKind::kGlobalAveragePool, "pool", {x}, 0);
  const auto squeezed = *g.addOp(OpKind::kRelu, "relu", {*g.addOp(OpKind::kConv, "reduce", {pooled, g.addWeight("w1", {12, 48, 1, 1}, dt)}, 0)}, 0);
  const auto gate = *g.addOp(OpKind::kSigmoid, "gate", {*g.addOp(OpKind::kConv, "expand", {squeezed, g.addWeight("w2", {48, 12, 1, 1}, dt)}, 0)}, 0);
  g.markOutput(*g.addOp(OpKind::kMul, "scale", {x, gate}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, PackedTapConvMatchesTheInterpreter) {
  // 32 input channels: five taps per 160-lane vector, merged on the VXM after SXM lane shifts; padded.
  ir::Graph g;
  const auto x = mapOf(g, "x", {1, 32, 8, 8}, ir::DType::kF16);
  g.markOutput(*g.addOp(OpKind::kConv, "conv", {x, g.addWeight("w", {40, 32, 3, 3}, ir::DType::kF16)},
                        {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, RowTripletConvMatchesTheInterpreter) {
  // A 3 x 3 Conv whose vector holds five taps (64 INT8 or 32 FP16 channels) over a map made by a
  // 1 x 1 Conv's epilogue (stored twice, in 16 segments of two image rows): each pixel's row of
  // three taps is gathered once, and the packed tiles add the rows above and below to it, the
  // lanes past the fifth tap falling off the vector (docs/compiler.md, MXM lowering).
  for (const auto& [dt, channels] : {std::pair{ir::DType::kI8, std::int64_t{64}}, std::pair{ir::DType::kF16, std::int64_t{32}}}) {
    ir::Graph g;
    const auto a = *g.addOp(OpKind::kConv, "a",
                            {g.addInput("x", {1, channels, 32, 32}, dt), g.addWeight("wa", {channels, channels, 1, 1}, dt)}, 0);
    const auto ra = *g.addOp(OpKind::kRelu, "ra", {a}, 0);
    g.markOutput(*g.addOp(OpKind::kConv, "b", {ra, g.addWeight("wb", {48, channels, 3, 3}, dt)},
                          {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}, 0));
    const Status s = runOnOneChip(g);
    EXPECT_TRUE(s.ok()) << ir::dtypeName(dt) << ": " << s.error().format();
  }
}

TEST(FunctionalOps, TapsAcrossMemSegmentsMatchTheInterpreter) {
  // A 16 x 16 map is cut into segments of whole image rows on different MEM slices: the taps of a
  // block next to a segment end need the neighbouring segment's rows, and each reads them from that
  // segment (the blocks, or a packed conv's gathers, cut at the bands). Packed taps (32 channels),
  // one K tile per tap (200 channels), a strided Conv and unit-stride and strided max-pools.
  for (const auto dt : {ir::DType::kF16, ir::DType::kI8}) {
    ir::Graph g;
    const auto x = mapOf(g, "x", {1, 32, 16, 16}, dt);
    const auto wide = mapOf(g, "wide", {1, 200, 16, 16}, dt);
    const Ints pads{1, 1, 1, 1};
    g.markOutput(*g.addOp(OpKind::kConv, "packed", {x, g.addWeight("w", {40, 32, 3, 3}, dt)},
                          {{"kernel_shape", Ints{3, 3}}, {"pads", pads}}, 0));
    g.markOutput(*g.addOp(OpKind::kConv, "implicit", {wide, g.addWeight("w2", {24, 200, 3, 3}, dt)},
                          {{"kernel_shape", Ints{3, 3}}, {"pads", pads}}, 0));
    g.markOutput(*g.addOp(OpKind::kConv, "strided", {wide, g.addWeight("w3", {24, 200, 3, 3}, dt)},
                          {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", pads}}, 0));
    g.markOutput(*g.addOp(OpKind::kMaxPool, "pool", {x}, {{"kernel_shape", Ints{3, 3}}, {"pads", pads}}, 0));
    g.markOutput(*g.addOp(OpKind::kMaxPool, "pool2", {x},
                          {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", pads}}, 0));
    const Status s = runOnOneChip(g);
    EXPECT_TRUE(s.ok()) << ir::dtypeName(dt) << ": " << s.error().format();
  }
}

TEST(FunctionalOps, AResidualInOtherSegmentsThanTheOutputMatchesTheInterpreter) {
  // A 1 x 1 Conv's epilogue adds a residual whose segments hold whole image rows (a max-pool reads
  // it: 24-row segments) while the output's do not (36 rows): the Conv's row blocks are cut at the
  // segments of both, so that every read of the residual stays inside one of its segments.
  for (const auto dt : {ir::DType::kI8, ir::DType::kF16}) {
    ir::Graph g;
    const auto x = mapOf(g, "x", {1, 64, 24, 24}, dt);
    const auto r = mapOf(g, "r", {1, 64, 24, 24}, dt);
    const auto y = *g.addOp(OpKind::kConv, "conv", {x, g.addWeight("w", {64, 64, 1, 1}, dt)}, 0);
    g.markOutput(*g.addOp(OpKind::kAdd, "add", {y, r}, 0));
    g.markOutput(*g.addOp(OpKind::kMaxPool, "pool", {r}, {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}, 0));
    const Status s = runOnOneChip(g);
    EXPECT_TRUE(s.ok()) << ir::dtypeName(dt) << ": " << s.error().format();
  }
}

// A Conv followed by inference BatchNormalization (and ReLU): the program's image holds the folded
// weights and shift (Program::folds); INT8 folding is exact under the integer BatchNormalization.
ir::TensorId convBn(ir::Graph& g, const std::string& p, ir::TensorId x, std::int64_t cin, std::int64_t cout,
                    std::int64_t k, std::int64_t stride, ir::DType dt) {
  const auto y = *g.addOp(OpKind::kConv, p + ".conv", {x, g.addWeight(p + ".w", {cout, cin, k, k}, dt)},
                          {{"kernel_shape", Ints{k, k}}, {"strides", Ints{stride, stride}},
                           {"pads", Ints{k / 2, k / 2, k / 2, k / 2}}},
                          0);
  const auto mean = g.addConstant(p + ".mean", {cout}, dt,
                                  ir::makeData(std::vector<double>(static_cast<size_t>(cout), 1.0)));
  const auto var = g.addConstant(p + ".var", {cout}, dt,
                                 ir::makeData(std::vector<double>(static_cast<size_t>(cout), 3.0)));
  const auto bn = *g.addOp(OpKind::kBatchNormalization, p + ".bn",
                           {y, g.addWeight(p + ".gamma", {cout}, dt), g.addWeight(p + ".beta", {cout}, dt), mean, var},
                           {{"epsilon", 1e-5}}, 0);
  return *g.addOp(OpKind::kRelu, p + ".relu", {bn}, 0);
}

TEST(FunctionalOps, ConvWithFoldedBatchNormMatchesTheInterpreter) {
  for (const auto dt : {ir::DType::kI8, ir::DType::kF16}) {
    ir::Graph g;
    const auto stem = convBn(g, "stem", g.addInput("images", {1, 3, 16, 16}, dt), 3, 64, 7, 2, dt);  // gathered
    g.markOutput(stem);
    g.markOutput(convBn(g, "b", stem, 64, 64, 3, 1, dt));
    const Status s = runOnOneChip(g);
    EXPECT_TRUE(s.ok()) << ir::dtypeName(dt) << ": " << s.error().format();
  }
}

TEST(FunctionalOps, ReluBeforeAMaxPoolIsThePoolsLastStep) {
  // The stem's Conv -> BatchNorm -> ReLU -> max-pool: the ReLU runs on the pool's rows (they
  // commute) unless the ReLU's output is itself a graph output, which must then hold its values.
  for (const bool reluIsOutput : {false, true}) {
    ir::Graph g;
    const auto dt = ir::DType::kI8;
    const auto stem = convBn(g, "stem", g.addInput("images", {1, 3, 32, 32}, dt), 3, 64, 7, 2, dt);
    if (reluIsOutput) g.markOutput(stem);
    g.markOutput(*g.addOp(OpKind::kMaxPool, "pool", {stem},
                          {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}, 0));
    const Status s = runOnOneChip(g);
    EXPECT_TRUE(s.ok()) << (reluIsOutput ? "ReLU output marked: " : "") << s.error().format();
  }
}

// Two ResNet bottleneck stages on a 32 x 32 image, INT8: the gathered stem with folded BatchNorm,
// a padded strided max-pool, 1 x 1 and packed 3 x 3 Convs, strided downsampling, residual Adds and
// ReLUs in the epilogues, GlobalAveragePool, Flatten and the classifier. The classifier's weights
// are placed when it is lowered, late: they must not share addresses with earlier activations
// (they hold their values from the program's start), else the chip computes with overwritten weights.
TEST(FunctionalOps, Int8BottleneckStagesMatchTheInterpreterExactly) {
  const auto dt = ir::DType::kI8;
  ir::Graph g;
  auto bn = [&](const std::string& p, ir::TensorId in, std::int64_t cin, std::int64_t cout, std::int64_t k,
                std::int64_t stride, bool relu) {
    const auto y = *g.addOp(OpKind::kConv, p + ".conv", {in, g.addWeight(p + ".w", {cout, cin, k, k}, dt)},
                            {{"kernel_shape", Ints{k, k}}, {"strides", Ints{stride, stride}},
                             {"pads", Ints{k / 2, k / 2, k / 2, k / 2}}}, 0);
    const auto mean = g.addConstant(p + ".mean", {cout}, dt, ir::makeData(std::vector<double>(cout, 0.0)));
    const auto var = g.addConstant(p + ".var", {cout}, dt, ir::makeData(std::vector<double>(cout, 1.0)));
    const auto b = *g.addOp(OpKind::kBatchNormalization, p + ".bn",
                            {y, g.addWeight(p + ".gamma", {cout}, dt), g.addWeight(p + ".beta", {cout}, dt), mean, var},
                            {{"epsilon", 1e-5}}, 0);
    return relu ? *g.addOp(OpKind::kRelu, p + ".relu", {b}, 0) : b;
  };
  auto x = bn("stem", g.addInput("images", {1, 3, 32, 32}, dt), 3, 64, 7, 2, true);
  x = *g.addOp(OpKind::kMaxPool, "pool", {x}, {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}, 0);
  std::int64_t cin = 64;
  for (int stage = 0; stage < 2; ++stage) {
    const std::int64_t width = 64 << stage, cout = 4 * width, stride = stage > 0 ? 2 : 1;
    const std::string p = stage == 0 ? "s0" : "s1";
    auto y = bn(p + ".a", x, cin, width, 1, 1, true);
    y = bn(p + ".b", y, width, width, 3, stride, true);
    g.markOutput(y);
    y = bn(p + ".c", y, width, cout, 1, 1, false);
    const auto shortcut = bn(p + ".down", x, cin, cout, 1, stride, false);
    g.markOutput(shortcut);
    x = *g.addOp(OpKind::kRelu, p + ".relu", {*g.addOp(OpKind::kAdd, p + ".add", {y, shortcut}, 0)}, 0);
    g.markOutput(x);
    cin = cout;
  }
  x = *g.addOp(OpKind::kFlatten, "flatten", {*g.addOp(OpKind::kGlobalAveragePool, "avgpool", {x}, 0)}, {{"axis", std::int64_t{1}}}, 0);
  g.markOutput(x);
  x = *g.addOp(OpKind::kAdd, "fc.bias_add", {*g.addOp(OpKind::kMatMul, "fc", {x, g.addWeight("fc.w", {cin, 100}, dt)}, 0), g.addWeight("fc.b", {100}, dt)}, 0);
  g.markOutput(x);
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, SplitOffTileBoundariesShiftsLanes) {
  // Three parts of 40, 100 and 20 values of a 160-value row (one FP16 tile): each part's lanes move
  // down to lane 0 on the SXM, the lanes past its values zero.
  ir::Graph g;
  const auto x = *g.addOp(OpKind::kRelu, "relu", {g.addInput("x", {24, 160}, ir::DType::kF16)}, 0);
  auto parts = g.addMultiOp(OpKind::kSplit, "split", {x}, {{"axis", std::int64_t{-1}}, {"split", Ints{40, 100, 20}}}, 0,
                            {"a", "b", "c"});
  ASSERT_TRUE(parts.ok()) << parts.error().format();
  for (auto p : *parts) g.markOutput(p);
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, ConcatOffTileBoundariesMergesLanes) {
  // Parts of 30, 50 and 60 values into one 140-value FP16 tile: the first copied with its lanes, the
  // others moved up on the SXM and added into the output row on the VXM.
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  std::vector<ir::TensorId> parts;
  for (const auto& [name, cols] : std::vector<std::pair<std::string, std::int64_t>>{{"a", 30}, {"b", 50}, {"c", 60}})
    parts.push_back(*g.addOp(OpKind::kExp, name + "_exp", {g.addInput(name, {12, cols}, dt)}, 0));
  g.markOutput(*g.addOp(OpKind::kConcat, "concat", parts, {{"axis", std::int64_t{1}}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, TransposeAcrossTilesIsAnSxmPermute) {
  // [320, 480] -> [480, 320]: every output vector takes one lane of 160 input rows (three input
  // tiles, two output tiles); the Program's element map names the source of every lane.
  ir::Graph g;
  const auto x = *g.addOp(OpKind::kRelu, "relu", {g.addInput("x", {320, 480}, ir::DType::kF16)}, 0);
  g.markOutput(*g.addOp(OpKind::kTranspose, "t", {x}, {{"perm", Ints{1, 0}}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

// Residual blocks x + tanh(x W + b) behind a ReLU and two Reshapes (which do not round), weights from
// a fixed generator with a gain below 1: the skip path carries each block's roundings to the output
// unamplified, so that they add up. `swapped` exchanges two columns of the last weight (a wrong result).
ir::Graph residualChain(int blocks, bool swapped) {
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const std::int64_t rows = 16, d = 64;
  std::mt19937 rng(11);
  std::normal_distribution<double> normal(0.0, 0.9 / std::sqrt(static_cast<double>(d)));
  std::vector<double> input(static_cast<size_t>(rows * d));
  for (double& v : input) v = ir::toStorage(normal(rng) * 8, dt);
  auto x = *g.addOp(OpKind::kRelu, "relu", {g.addWeight("x", {rows, d}, dt, ir::makeData(input))}, 0);
  x = *g.addOp(OpKind::kReshape, "flat", {x}, {{"shape", Ints{rows * d}}}, 0);
  x = *g.addOp(OpKind::kReshape, "rows", {x}, {{"shape", Ints{rows, d}}}, 0);
  for (int l = 0; l < blocks; ++l) {
    std::vector<double> w(static_cast<size_t>(d * d)), b(static_cast<size_t>(d));
    for (double& v : w) v = ir::toStorage(normal(rng), dt);
    for (double& v : b) v = ir::toStorage(normal(rng), dt);
    if (swapped && l == blocks - 1)
      for (std::int64_t k = 0; k < d; ++k) std::swap(w[static_cast<size_t>(k * d)], w[static_cast<size_t>(k * d + 1)]);
    const std::string n = std::to_string(l);
    auto y = *g.addOp(OpKind::kMatMul, "mm" + n, {x, g.addWeight("w" + n, {d, d}, dt, ir::makeData(w))}, 0);
    y = *g.addOp(OpKind::kAdd, "bias" + n, {y, g.addWeight("b" + n, {d}, dt, ir::makeData(b))}, 0);
    y = *g.addOp(OpKind::kTanh, "tanh" + n, {y}, 0);
    x = *g.addOp(OpKind::kAdd, "residual" + n, {x, y}, 0);
  }
  g.markOutput(x);
  return g;
}

TEST(FunctionalOps, ToleranceGrowsWithDepthAndStillFailsAWrongResult) {
  // 24 blocks: 96 rounding ops deep (the ReLU and the Reshapes do not round), so atol holds sqrt(96)
  // FP16 units of the largest output. Against the graph computed in FP32 (as PyTorch's outputs are,
  // with no FP16 rounding between ops) the chip's roundings add up beyond one unit near zero, within
  // sqrt(96); a result with two columns of the last weight exchanged is outside both.
  const int blocks = 24, depth = 4 * blocks;
  const ir::Graph g = residualChain(blocks, false), wrong = residualChain(blocks, true);
  std::map<ir::TensorId, std::int64_t> memo;
  EXPECT_EQ(runtime::roundingDepth(g, g.outputs().front(), memo), depth);
  const topology::ChipSpec spec;
  schedule::PipelineStage stage;
  for (size_t i = 0; i < g.ops().size(); ++i) stage.ops.push_back(static_cast<ir::OpId>(i));
  auto schedule = schedule::scheduleCluster(g, {stage}, oneChipCluster(spec));
  ASSERT_TRUE(schedule.ok()) << schedule.error().format();
  const auto program = std::make_shared<const isa::Program>(schedule->programs.front());
  auto setup = runtime::prepareFunctional(g, {program}, {3, std::nullopt, std::nullopt});
  ASSERT_TRUE(setup.ok());
  double largest = 0.0;
  for (float v : setup->outputs.front().reference) largest = std::max(largest, static_cast<double>(std::fabs(v)));
  EXPECT_DOUBLE_EQ(setup->outputs.front().tolerance.atol, fp16TensorTolerance(64, largest, depth).atol);
  SimOptions options;
  options.functional = setup->options;
  auto chip = makeTspChip(0, spec, program, std::vector<PortBinding>(spec.c2cPorts), options);
  ASSERT_TRUE(chip->advanceTo(kNever).ok());
  auto chipOf = [&](int) { return chip.get(); };
  const Status interpreted = runtime::checkFunctionalOutputs(*setup, {program}, chipOf);
  EXPECT_TRUE(interpreted.ok()) << interpreted.error().format();

  // The FP32 references, each with the depth's tolerance and with one op's.
  auto against = [&](const ir::Graph& graph, std::int64_t roundings) {
    auto values = ir::interpret(graph, {});
    EXPECT_TRUE(values.ok());
    runtime::FunctionalSetup fp32 = *setup;
    auto& check = fp32.outputs.front();
    check.reference.assign(values->front().data.begin(), values->front().data.end());
    double top = 0.0;
    for (float v : check.reference) top = std::max(top, static_cast<double>(std::fabs(v)));
    check.tolerance = fp16TensorTolerance(64, top, roundings);
    return runtime::checkFunctionalOutputs(fp32, {program}, chipOf);
  };
  const Status fp32 = against(g, depth);
  EXPECT_TRUE(fp32.ok()) << fp32.error().format();
  EXPECT_FALSE(against(g, 1).ok());
  for (std::int64_t roundings : {std::int64_t{1}, std::int64_t{depth}}) {
    const Status s = against(wrong, roundings);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ExitCode::kFunctionalMismatch);
    EXPECT_NE(s.error().message.find("outside the tolerance"), std::string::npos) << s.error().message;
  }
}

TEST(FunctionalOps, RoundingDepthOfAVeryLongChainDoesNotExhaustTheStack) {
  // 200,000 elementwise ops in one chain: the walks over an output's producers keep their own stack.
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  ir::TensorId x = g.addInput("x", {1, 4}, dt);
  constexpr std::int64_t kOps = 200'000;
  for (std::int64_t i = 0; i < kOps; ++i) x = *g.addOp(i % 2 ? OpKind::kSigmoid : OpKind::kRelu, fmt::format("op{}", i), {x}, 0);
  x = *g.addOp(OpKind::kMatMul, "mm", {x, g.addWeight("w", {4, 3}, dt)}, 0);
  g.markOutput(x);
  std::map<ir::TensorId, std::int64_t> depths, lengths;
  EXPECT_EQ(runtime::roundingDepth(g, x, depths), kOps / 2 + 1);  // the Sigmoids and the MatMul
  EXPECT_EQ(runtime::reductionLength(g, x, lengths), 4);
}

// The rows of `table` for t token ids given at run time (Gather on axis 0).
ir::TensorId embed(ir::Graph& g, ir::TensorId table, std::int64_t t) {
  return *g.addOp(OpKind::kGather, "embed", {table, g.addInput("ids", {t}, ir::DType::kI32)},
                  {{"axis", std::int64_t{0}}}, 0);
}

TEST(FunctionalOps, SpaceOfWeightsMadeOnChipIsReusedAfterTheirInstalls) {
  // GPT-2's shape on a chip of 8 MEM slices: attention installs activations as MXM weights (the
  // keys transposed, V); once they are dead, a transposed embedding made on chip (a Transpose of a
  // resident table of 1,001 rows, also a graph output, so that the head does not read the table in
  // place) takes their space. The schedule runs that Transpose early (it reads only the table) while
  // the keys come late (four matmuls deep): its writes must wait for the keys' installs, or the
  // scores read the table (the full-size GPT-2 export's wrong logits when its head made the copy).
  topology::ChipSpec chip;
  chip.icuQueues += 8 - chip.memSlices;
  chip.memSlices = 8;
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const std::int64_t t = 64, d = 160, vocab = 1001;
  const auto table = g.addWeight("wte", {vocab, d}, dt);
  const auto x = embed(g, table, t);
  const auto q = *g.addOp(OpKind::kMatMul, "q", {x, g.addWeight("wq", {d, d}, dt)}, 0);
  auto k = x;
  for (int i = 0; i < 4; ++i) {
    const std::string name = std::string("k").append(std::to_string(i));
    k = *g.addOp(OpKind::kMatMul, name, {k, g.addWeight("w" + name, {d, d}, dt)}, 0);
  }
  const auto v = *g.addOp(OpKind::kMatMul, "v", {x, g.addWeight("wv", {d, d}, dt)}, 0);
  const auto kt = *g.addOp(OpKind::kTranspose, "k_t", {k}, {{"perm", Ints{1, 0}}}, 0);
  const auto scores = *g.addOp(OpKind::kMatMul, "qk", {q, kt}, 0);
  const auto probs = *g.addOp(OpKind::kSoftmax, "softmax", {scores}, {{"axis", std::int64_t{-1}}}, 0);
  const auto ctx = *g.addOp(OpKind::kMatMul, "pv", {probs, v}, 0);
  const auto h = *g.addOp(OpKind::kAdd, "residual", {x, ctx}, 0);
  const auto head = *g.addOp(OpKind::kTranspose, "head_t", {table}, {{"perm", Ints{1, 0}}}, 0);
  g.markOutput(*g.addOp(OpKind::kMatMul, "logits", {h, head}, 0));
  g.markOutput(head);
  const Status s = runOnOneChip(g, 3, chip);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, TiedHeadInstallsTheEmbeddingTransposedWithoutACopy) {
  // A tied head, logits = h x Transpose(wte): the matmul installs the embedding's own rows as
  // columns (Gemm transB's install), so no transposed copy of the table is made or held. A table of
  // 9,000 rows takes two MEM segments, cut at a multiple of the plane's 160 lanes so that every
  // install reads one slice.
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const std::int64_t t = 32, d = 160, vocab = 9000;
  const auto table = g.addWeight("wte", {vocab, d}, dt);
  const auto x = embed(g, table, t);
  const auto h = *g.addOp(OpKind::kSigmoid, "h", {x}, 0);
  const auto head = *g.addOp(OpKind::kTranspose, "head_t", {table}, {{"perm", Ints{1, 0}}}, 0);
  g.markOutput(*g.addOp(OpKind::kMatMul, "logits", {h, head}, 0));
  const topology::Cluster cluster = oneChipCluster({});
  schedule::PipelineStage stage;
  for (size_t i = 0; i < g.ops().size(); ++i) stage.ops.push_back(static_cast<ir::OpId>(i));
  auto schedule = schedule::scheduleCluster(g, {stage}, cluster);
  ASSERT_TRUE(schedule) << schedule.error().format();
  const isa::Program& program = schedule->programs.front();
  for (const auto& placement : program.tensors) EXPECT_NE(placement.name, g.tensor(head).name);
  const auto wte = std::find_if(program.tensors.begin(), program.tensors.end(),
                                [](const isa::TensorPlacement& p) { return p.name == "wte"; });
  ASSERT_NE(wte, program.tensors.end());
  EXPECT_GT(wte->segmentRows, 0);
  EXPECT_EQ(wte->segmentRows % (topology::ChipSpec{}.vectorBytes / 2), 0);  // FP16 lanes per vector
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, AttentionHeadsReshapeTransposeSliceAndMiddleConcat) {
  // Attention's reshape-to-heads [2, 16, 256] -> [2, 16, 4, 64] -> [2, 4, 16, 64] and back, a
  // Concat along a middle axis, a strided Slice of a middle axis and an Expand.
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const auto x = *g.addOp(OpKind::kExp, "exp", {g.addInput("x", {2, 16, 256}, dt)}, 0);
  const auto heads = *g.addOp(OpKind::kReshape, "heads_r", {x}, {{"shape", Ints{2, 16, 4, 64}}}, 0);
  const auto t = *g.addOp(OpKind::kTranspose, "heads_t", {heads}, {{"perm", Ints{0, 2, 1, 3}}}, 0);
  const auto back = *g.addOp(OpKind::kTranspose, "ctx_t", {t}, {{"perm", Ints{0, 2, 1, 3}}}, 0);
  g.markOutput(*g.addOp(OpKind::kReshape, "ctx_r", {back}, {{"shape", Ints{2, 16, 256}}}, 0));
  const auto y = *g.addOp(OpKind::kExp, "exp_y", {g.addInput("y", {2, 5, 256}, dt)}, 0);
  g.markOutput(*g.addOp(OpKind::kConcat, "cat", {x, y}, {{"axis", std::int64_t{1}}}, 0));
  g.markOutput(*g.addOp(OpKind::kSlice, "slice", {x},
                        {{"starts", Ints{1}}, {"ends", Ints{15}}, {"axes", Ints{1}}, {"steps", Ints{3}}}, 0));
  const auto row = *g.addOp(OpKind::kExp, "exp_row", {g.addInput("row", {1, 256}, dt)}, 0);
  g.markOutput(*g.addOp(OpKind::kExpand, "expand", {row}, {{"shape", Ints{24, 256}}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, GatherReadsInt32IdsFromSram) {
  // An FP16 table of 50 rows of 200 values and INT32 ids [3, 7] (stored as 4-byte lanes): the
  // output rows are the rows the ids select, not the table in order.
  ir::Graph g;
  const auto ids = g.addInput("ids", {3, 7}, ir::DType::kI32);
  g.markOutput(*g.addOp(OpKind::kGather, "embed", {g.addWeight("table", {50, 200}, ir::DType::kF16), ids},
                        {{"axis", std::int64_t{0}}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

// A [1, 16, 4, 4] map made on chip by a 1 x 1 max pool: the graph stores 4-D maps channels-last.
ir::TensorId pooledMap(ir::Graph& g) {
  const auto x = mapOf(g, "x", {1, 16, 4, 4}, ir::DType::kF16);
  return *g.addOp(OpKind::kMaxPool, "pool", {x}, {{"kernel_shape", Ints{1, 1}}}, 0);
}

TEST(FunctionalOps, ChannelsLastTransposeAndFlattenArePermutes) {
  // In a graph with pooling a 4-D map is stored channels-last ([N, H, W, C]): the element maps are
  // expressed over that order, for a Transpose of the map and a Flatten of it into rows.
  ir::Graph g;
  const auto p = pooledMap(g);
  g.markOutput(*g.addOp(OpKind::kTranspose, "t", {p}, {{"perm", Ints{0, 2, 3, 1}}}, 0));
  g.markOutput(*g.addOp(OpKind::kFlatten, "flat", {p}, {{"axis", std::int64_t{1}}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, ChannelScaleOnAMapWithAsManyPositionsAsChannelsMatchesTheInterpreter) {
  // A scale [C, 1, 1] on a channels-last [1, 16, 4, 4] map has as many rows as the map (H x W = C),
  // yet one value per channel (a column), not one per row.
  ir::Graph g;
  const auto p = pooledMap(g);
  g.markOutput(*g.addOp(OpKind::kMul, "scale", {p, g.addWeight("gamma", {16, 1, 1}, ir::DType::kF16)}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, ChannelsLastMapReshapedToRowsWithAsManyPositionsAsChannelsMatchesTheInterpreter) {
  // A channels-last [1, 16, 4, 4] map reshaped to a row-major [1, 16, 16] keeps its values per row
  // (C = H x W) and its rows, but not their order: an SXM permute, not a copy (GroupNormalization's
  // per-channel form at opset 21 after a Conv).
  ir::Graph g;
  const auto p = pooledMap(g);
  g.markOutput(*g.addOp(OpKind::kReshape, "rows", {p}, {{"shape", Ints{1, 16, 16}}}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, GroupNormOfAChannelsLastMapMatchesTheInterpreter) {
  // GroupNormalization as imported: the map reshaped to [N, groups, C / groups x H x W] (row-major),
  // LayerNormalization over the rows, reshaped back into a channels-last map (an element map that
  // reads the rows in row-major order), the per-channel scale and bias.
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const auto rows = *g.addOp(OpKind::kReshape, "rows", {pooledMap(g)}, {{"shape", Ints{1, 4, 64}}}, 0);
  const auto ones = g.addConstant("ones", {64}, dt, std::vector<double>(64, 1.0));
  const auto normed = *g.addOp(OpKind::kLayerNormalization, "norm", {rows, ones}, {{"axis", std::int64_t{-1}}}, 0);
  const auto map = *g.addOp(OpKind::kReshape, "map", {normed}, {{"shape", Ints{1, 16, 4, 4}}}, 0);
  const auto scaled = *g.addOp(OpKind::kMul, "scaled", {map, g.addWeight("gamma", {16, 1, 1}, dt)}, 0);
  g.markOutput(*g.addOp(OpKind::kAdd, "shifted", {scaled, g.addWeight("beta", {16, 1, 1}, dt)}, 0));
  const Status s = runOnOneChip(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalOps, ChannelsLastReshapeIsRefusedNamingItsTensor) {
  // A reshape of a channels-last map into another 4-D map has no element map: functional mode
  // refuses it (exit 2) naming the tensor its SXM reads.
  ir::Graph g;
  g.markOutput(*g.addOp(OpKind::kReshape, "r", {pooledMap(g)}, {{"shape", Ints{1, 4, 16, 4}}}, 0));
  const Status s = runOnOneChip(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kModel) << s.error().format();
  EXPECT_NE(s.error().message.find("does not say which permutation it applies, on 'pool.out'"), std::string::npos)
      << s.error().message;
}

}  // namespace
}  // namespace tsp::sim

