// Tests of lowering: tiling cost model, tasks per op kind, SRAM placement and reuse, does-not-fit errors.
#include "compile/lower/lowering.h"

#include <set>

#include <gtest/gtest.h>

#include "compile/test_problems.h"

namespace tsp::lower {
namespace {

std::vector<ir::OpId> allOps(const ir::Graph& g) {
  std::vector<ir::OpId> ops;
  for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  return ops;
}

// The preset with only `slices` MEM slices of `addresses` rows each (its ICU queues one per slice
// fewer), for tests of SRAM reuse and of shards that do not fit.
topology::ChipSpec withSlices(int slices, int addresses = topology::ChipSpec{}.addressesPerSlice) {
  topology::ChipSpec chip;
  chip.icuQueues += slices - chip.memSlices;
  chip.memSlices = slices;
  chip.addressesPerSlice = addresses;
  return chip;
}

// The lowering failed as a shard that does not fit (exit code 3), with `text` in its message.
template <typename Result>
void expectDoesNotFit(const Result& r, const std::string& text) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ExitCode::kDoesNotFit);
  EXPECT_NE(r.error().message.find(text), std::string::npos) << r.error().message;
}

TEST(Tiling, PlaneShapeAndTheSramConstraint) {
  topology::ChipSpec chip;
  const auto int8 = chooseMatMulTiling(chip, 2304, 4096, 4096, 1, chip.sramBytes() / 3);
  EXPECT_EQ(int8.tk, 320);
  EXPECT_EQ(int8.tn, 320);
  EXPECT_EQ(int8.tm, 2304);  // the longest stream hides the most installs
  const auto fp16 = chooseMatMulTiling(chip, 64, 1024, 1024, 2, chip.sramBytes() / 6);
  EXPECT_EQ(fp16.tk, 160);
  // A tight budget forces shorter streams: T_m*T_k + T_k*T_n + T_m*T_n <= budget.
  const auto tight = chooseMatMulTiling(chip, 2304, 4096, 4096, 1, 320 * 320 + 2 * 320 * 300);
  EXPECT_LE(std::int64_t{tight.tm} * 320 * 2 + 320 * 320, 320 * 320 + 2 * 320 * 300);
  EXPECT_GT(tight.tm, 0);
  // Streams shorter than a weight install cannot hide it: the model charges the install.
  const auto shortRows = chooseMatMulTiling(chip, 8, 320, 320, 1, chip.sramBytes() / 3);
  EXPECT_GE(shortRows.cycles, chip.mxmWeightInstallCycles);
}

TEST(Lowering, MatMulBecomesInstallsAndStreams) {
  topology::ChipSpec chip;
  const ir::Graph g = testing::mlp(1, 640, 16, "int8");  // K = N = 640: 2 x 2 tiles
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  const auto& p = (*lowered)->problem;
  int installs = 0, computes = 0, writes = 0, biasAdds = 0;
  for (const auto& t : p.tasks())
    for (const auto& s : t.steps) {
      installs += s.inst.op == isa::Opcode::kMxmInstall;
      computes += s.inst.op == isa::Opcode::kMxmCompute;
      writes += s.inst.op == isa::Opcode::kMemWrite;
      biasAdds += s.inst.op == isa::Opcode::kVxmBinary;
      if (s.inst.op == isa::Opcode::kMxmCompute) {
        EXPECT_EQ(s.inst.repeat, 16);  // one Repeat per stream
      }
    }
  EXPECT_EQ(installs, 4);
  EXPECT_EQ(computes, 4);
  EXPECT_EQ(writes, 2);    // one output write per N tile, on the last K tile
  EXPECT_EQ(biasAdds, 2);  // the bias Add is fused
  EXPECT_TRUE(p.check().ok());
  EXPECT_EQ((*lowered)->macs, 16 * 640 * 640);
}

TEST(Lowering, ElementwiseGoesToTheVxm) {
  topology::ChipSpec chip;
  ir::Graph g;
  const auto a = g.addInput("a", {8, 320}, ir::DType::kF16);
  const auto b = g.addInput("b", {8, 320}, ir::DType::kF16);
  const auto s = *g.addOp(ir::OpKind::kAdd, "add", {a, b}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kGelu, "gelu", {s}, 0));
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok());
  const auto& p = (*lowered)->problem;
  ASSERT_EQ(p.tasks().size(), 4u);  // 2 tiles x 2 ops
  EXPECT_EQ(p.tasks()[0].steps[1].inst.op, isa::Opcode::kVxmBinary);
  EXPECT_EQ(p.tasks()[2].steps[1].inst.func, isa::VxmFunc::kGelu);
  // Gelu reads what Add wrote: data dependences join the tiles.
  EXPECT_EQ(p.dependences().size(), 2u);
}

TEST(Lowering, SquareReadsItsOperandOnce) {
  // x * x (RMSNorm's square, the Tanh and Adam gradients): one MEM read feeds both ALU operands.
  topology::ChipSpec chip;
  ir::Graph g;
  const auto x = g.addInput("x", {8, 320}, ir::DType::kF16);
  g.markOutput(*g.addOp(ir::OpKind::kMul, "square", {x, x}, 0));
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  const auto& p = (*lowered)->problem;
  ASSERT_TRUE(p.check().ok()) << p.check().error().format();
  for (const auto& task : p.tasks()) {
    ASSERT_EQ(task.steps.size(), 3u);  // read, multiply, write
    EXPECT_EQ(task.steps[1].producer, 0);
    EXPECT_EQ(task.steps[1].producer2, 0);
  }
}

TEST(Lowering, DeadTensorsAreReusedAfterTheirLastRead) {
  const topology::ChipSpec chip = withSlices(4, 64);  // few slices so that space must be reused
  ir::Graph g;
  ir::TensorId x = g.addInput("x", {32, 160}, ir::DType::kF16);
  for (int i = 0; i < 10; ++i) x = *g.addOp(ir::OpKind::kRelu, std::string("r").append(std::to_string(i)), {x}, 0);
  g.markOutput(x);
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  // Eleven 32-row tensors in 4 x 64 addresses: only reuse makes them fit; the peak stays small.
  EXPECT_LE((*lowered)->sram.peak(), 3 * 32 * chip.vectorBytes);
  bool war = false;
  for (const auto& d : (*lowered)->problem.dependences())
    war |= (*lowered)->problem.tasks()[d.from].steps[d.fromStep].inst.op == isa::Opcode::kMemRead;
  EXPECT_TRUE(war);  // a write into reused space waits for the old tensor's last read
}

TEST(Lowering, SpaceOfAValueNothingReadsIsWrittenAfterIt) {
  // "dead" is computed and never read; the chain after it needs its space on a chip of 4 short
  // slices. With no read to wait for, a write into that space must wait for the dead value's
  // write: else the dead value could land over the live one.
  const topology::ChipSpec chip = withSlices(4, 64);
  ir::Graph g;
  ir::TensorId x = g.addInput("x", {32, 160}, ir::DType::kF16);
  (void)*g.addOp(ir::OpKind::kRelu, "dead", {x}, 0);
  for (int i = 0; i < 10; ++i) x = *g.addOp(ir::OpKind::kRelu, std::string("r").append(std::to_string(i)), {x}, 0);
  g.markOutput(x);
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  const auto& p = (*lowered)->problem;
  auto overlap = [](const isa::Instruction& a, const isa::Instruction& b) {
    return a.unit == b.unit && a.address < b.address + b.repeat && b.address < a.address + a.repeat;
  };
  std::vector<std::pair<int, int>> deadWrites;
  for (size_t t = 0; t < p.tasks().size(); ++t)
    if (p.tasks()[t].name.find("dead") != std::string::npos)
      for (size_t s = 0; s < p.tasks()[t].steps.size(); ++s)
        if (p.tasks()[t].steps[s].inst.op == isa::Opcode::kMemWrite)
          deadWrites.push_back({static_cast<int>(t), static_cast<int>(s)});
  ASSERT_FALSE(deadWrites.empty());
  int reused = 0, ordered = 0;
  for (const auto& [dt, ds] : deadWrites) {
    const isa::Instruction& dead = p.tasks()[dt].steps[ds].inst;
    for (size_t t = 0; t < p.tasks().size(); ++t)
      for (size_t s = 0; s < p.tasks()[t].steps.size(); ++s) {
        const isa::Instruction& w = p.tasks()[t].steps[s].inst;
        if (static_cast<int>(t) == dt || w.op != isa::Opcode::kMemWrite || !overlap(dead, w)) continue;
        ++reused;
        for (const auto& d : p.dependences())
          ordered += d.from == dt && d.fromStep == ds && d.to == static_cast<int>(t) && d.toStep == static_cast<int>(s);
      }
  }
  EXPECT_GT(reused, 0);  // the chain does reuse the dead value's space
  EXPECT_GT(ordered, 0);  // and its first write there waits for the dead write
}

TEST(Lowering, WeightsMadeOnChipAreOverwrittenOnlyAfterTheirInstalls) {
  // v (made on chip) is installed as an MXM's weights and is dead after that matmul; the transposed
  // table lowered next (made on chip: it is also a graph output, so the head does not read the table
  // in place) takes its space on a chip of 4 short slices. The Transpose reads only a resident
  // table: only a dependence on v's installs keeps its writes after them.
  const topology::ChipSpec chip = withSlices(4, 256);
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  const auto v = *g.addOp(ir::OpKind::kRelu, "v", {g.addInput("b", {160, 160}, dt)}, 0);
  const auto y = *g.addOp(ir::OpKind::kMatMul, "pv", {g.addInput("a", {16, 160}, dt), v}, 0);
  const auto head = *g.addOp(ir::OpKind::kTranspose, "head", {g.addWeight("table", {160, 160}, dt)},
                             {{"perm", std::vector<std::int64_t>{1, 0}}}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kMatMul, "logits", {y, head}, 0));
  g.markOutput(head);
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  const auto& p = (*lowered)->problem;
  int waits = 0;
  for (const auto& d : p.dependences()) {
    const isa::Instruction& from = p.tasks()[d.from].steps[d.fromStep].inst;
    const isa::Instruction& to = p.tasks()[d.to].steps[d.toStep].inst;
    waits += from.op == isa::Opcode::kMxmInstall && to.op == isa::Opcode::kMemWrite && to.unit == from.weightUnit &&
             to.address < from.address + from.weightRows && from.address < to.address + to.repeat;
  }
  EXPECT_GT(waits, 0);  // a write into v's space waits for an install that read it
}

TEST(Lowering, AShardTooLargeIsAnErrorWithBytes) {
  const topology::ChipSpec chip = withSlices(4);
  const ir::Graph g = testing::mlp(1, 1024, 8);  // 1024x1024 fp16 = 2 MiB of weights; 4 slices hold 10 MiB
  const ir::Graph big = testing::mlp(2, 4096, 8);
  EXPECT_TRUE(lowerShard(chip, g, allOps(g), {}).ok());
  const auto r = lowerShard(chip, big, allOps(big), {});
  expectDoesNotFit(r, "shard does not fit in SRAM");
  expectDoesNotFit(r, "bytes, 10485760 bytes available (tensor 'w");
}

TEST(Lowering, ATensorWithNoFreeRunOfItsRowsSaysSoWhenTheBytesWouldFit) {
  const topology::ChipSpec chip = withSlices(2, 100);  // 200 rows in all
  ir::Graph g;
  // 60 + 90 rows leave 40 and 10 free: 45 more rows fit in bytes but in no one slice.
  const auto a = g.addInput("a", {60, 160}, ir::DType::kF16);
  const auto b = g.addInput("b", {90, 160}, ir::DType::kF16);
  const auto x = g.addInput("x", {45, 160}, ir::DType::kF16);
  for (auto t : {a, b, x}) g.markOutput(*g.addOp(ir::OpKind::kRelu, g.tensor(t).name + "_relu", {t}, 0));
  expectDoesNotFit(lowerShard(chip, g, allOps(g), {}),
                   "shard does not fit in SRAM: needs 62400 bytes, 64000 bytes available (tensor 'x' "
                   "of 14400 bytes with 48000 bytes live, no slice has a free run of its tile's rows)");
}

TEST(Lowering, ATileLongerThanASliceSpansSeveralSlices) {
  topology::ChipSpec chip;
  const ir::Graph g = testing::mlp(1, 320, 9000);  // 9000 rows > 8192 addresses: two segments of 4500
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  int checked = 0;
  for (const auto& t : (*lowered)->tensors) {
    if (t.rows != 9000) continue;
    ++checked;
    // Graph inputs and tensors made on chip spread over 8 slices (segments of at least 128 rows).
    EXPECT_EQ(t.segmentRows, 1125) << t.name;
    const size_t segments = 8;
    ASSERT_EQ(t.memUnit.size(), segments * t.tiles) << t.name;
    for (int k = 0; k < t.tiles; ++k) {
      const std::set<std::int32_t> units(t.memUnit.begin() + k * segments, t.memUnit.begin() + (k + 1) * segments);
      EXPECT_EQ(units.size(), segments) << t.name;
    }
  }
  EXPECT_EQ(checked, 2);  // x and the matmul's output (bias fused)
  // No instruction reads or writes past its segment.
  for (const auto& task : (*lowered)->problem.tasks())
    for (const auto& st : task.steps)
      if (st.inst.op == isa::Opcode::kMemRead || st.inst.op == isa::Opcode::kMemWrite) {
        EXPECT_LT(st.inst.address + std::int64_t{st.inst.stride} * (st.inst.repeat - 1), chip.addressesPerSlice);
      }
}

TEST(Lowering, AGroupedConvIsDenseOverBlockDiagonalWeights) {
  topology::ChipSpec chip;
  ir::Graph g;
  // 400 INT8 channels in groups of 8: two K tiles per tap (320 + 80 channels), two output tiles.
  const auto x = g.addInput("x", {1, 400, 6, 6}, ir::DType::kI8);
  const auto w = g.addWeight("w", {400, 8, 3, 3}, ir::DType::kI8);
  g.markOutput(*g.addOp(ir::OpKind::kConv, "grouped", {x, w},
                        ir::Attrs{{"group", std::int64_t{50}}, {"pads", std::vector<std::int64_t>{1, 1, 1, 1}}}, 0));
  EXPECT_EQ(blockDiagonalGroups(g, g.op(0)), 50);
  EXPECT_EQ(tensorGeometry(chip, g, w), (std::pair<std::int64_t, int>{9 * 400, 2}));  // 9 taps x 400 input channels
  auto r = lowerShard(chip, g, {0}, {});
  ASSERT_TRUE(r.ok()) << r.error().format();
  // Output tile 0 (channels 0-319, groups 0-39) needs K tile 0 of each tap (channels 0-319) alone;
  // output tile 1 (320-399, groups 40-49) K tile 1 alone: 9 installs per output tile, not 18.
  int installs = 0;
  for (const auto& task : (*r)->problem.tasks())
    if (task.steps.size() == 1 && task.steps[0].inst.op == isa::Opcode::kMxmInstall) ++installs;
  EXPECT_EQ(installs, 2 * 9);
  EXPECT_EQ((*r)->macs, 36 * 400 * 8 * 9);
}

TEST(Lowering, AMatMulOnAChannelsLastMapNamesTheTensor) {
  // The Conv's output is read by the MatMul too: it is a channels-last map, which a matmul's rows do not follow.
  topology::ChipSpec chip;
  ir::Graph g;
  const auto x = g.addInput("x", {1, 8, 6, 6}, ir::DType::kF16);
  const auto y = g.addOp(ir::OpKind::kConv, "conv", {x, g.addWeight("w", {8, 8, 1, 1}, ir::DType::kF16)}, 0).value();
  g.addOp(ir::OpKind::kMatMul, "mlp", {y, g.addWeight("l", {6, 32}, ir::DType::kF16)}, 0).value();
  auto r = lowerShard(chip, g, {0, 1}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ExitCode::kModel);
  EXPECT_EQ(r.error().format(), "node 'mlp': MatMul on the 4-D tensor 'conv.out', which is stored channels-last (a window "
                                "op or an elementwise op joined to one reads or writes it), cannot be lowered");
}

TEST(Lowering, MapsOnlyMatmulsReadAreStoredRowMajor) {
  // ConvNeXt's block: Conv, the map moved channels-last ([N, H, W, C]), a MatMul and GELU-like
  // elementwise ops on it, moved back and added to the Conv's output.
  topology::ChipSpec chip;
  ir::Graph g;
  const auto x = g.addInput("x", {1, 8, 6, 6}, ir::DType::kF16);
  const auto y = g.addOp(ir::OpKind::kConv, "conv", {x, g.addWeight("w", {8, 8, 1, 1}, ir::DType::kF16)}, 0).value();
  const auto t = g.addOp(ir::OpKind::kTranspose, "nhwc", {y}, ir::Attrs{{"perm", std::vector<std::int64_t>{0, 2, 3, 1}}}, 0).value();
  const auto m = g.addOp(ir::OpKind::kMatMul, "mlp", {t, g.addWeight("l", {8, 8}, ir::DType::kF16)}, 0).value();
  const auto a = g.addOp(ir::OpKind::kRelu, "act", {m}, 0).value();
  const auto b = g.addOp(ir::OpKind::kTranspose, "nchw", {a}, ir::Attrs{{"perm", std::vector<std::int64_t>{0, 3, 1, 2}}}, 0).value();
  g.markOutput(g.addOp(ir::OpKind::kAdd, "residual", {y, b}, 0).value());
  const std::vector<bool> layout = channelsLastTensors(g);
  for (const auto id : {x, y, b}) EXPECT_TRUE(layout[static_cast<size_t>(id)]) << g.tensor(id).name;
  for (const auto id : {t, m, a}) EXPECT_FALSE(layout[static_cast<size_t>(id)]) << g.tensor(id).name;
  EXPECT_EQ(tensorGeometry(chip, g, t), (std::pair<std::int64_t, int>{36, 1}));  // 1 x 6 x 6 rows of 8
  auto r = lowerShard(chip, g, allOps(g), {});
  EXPECT_TRUE(r.ok()) << r.error().format();
}

TEST(Lowering, FeatureMapsAreStoredChannelsLast) {
  topology::ChipSpec chip;
  ir::Graph g;
  const auto x = g.addInput("x", {1, 3, 8, 8}, ir::DType::kI8);       // read by one Conv: window-gathered
  const auto w = g.addWeight("w", {400, 3, 3, 3}, ir::DType::kI8);    // 27 rows of 400 output channels
  const auto y = *g.addOp(ir::OpKind::kConv, "conv", {x, w}, ir::Attrs{{"pads", std::vector<std::int64_t>{1, 1, 1, 1}}}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kRelu, "relu", {y}, 0));
  EXPECT_EQ(tensorGeometry(chip, g, x), (std::pair<std::int64_t, int>{64, 1}));   // 8x8 pixels of 27 bytes
  EXPECT_EQ(tensorGeometry(chip, g, w), (std::pair<std::int64_t, int>{27, 2}));
  EXPECT_EQ(tensorGeometry(chip, g, y), (std::pair<std::int64_t, int>{64, 2}));   // 400 channels: 2 vectors
  EXPECT_TRUE(lowerShard(chip, g, {0, 1}, {}).ok());
}

TEST(Lowering, PoolingScratchThatDoesNotFitIsAnErrorWithBytes) {
  const topology::ChipSpec chip = withSlices(3, 64);  // input, output and one partial fill the three slices
  ir::Graph g;
  const auto x = g.addInput("x", {1, 1, 8, 8}, ir::DType::kI8);
  g.markOutput(*g.addOp(ir::OpKind::kMaxPool, "pool", {x},
                        ir::Attrs{{"kernel_shape", std::vector<std::int64_t>{3, 3}},
                                  {"pads", std::vector<std::int64_t>{1, 1, 1, 1}}},
                        0));
  expectDoesNotFit(lowerShard(chip, g, {0}, {}),
                   "shard does not fit in SRAM: needs 20480 bytes of scratch with 61440 bytes live, 61440 bytes available");
}

TEST(Lowering, MixedStorageWidthsNameTheNode) {
  topology::ChipSpec chip;
  ir::Graph mixed;
  const auto x = mixed.addInput("x", {8, 320}, ir::DType::kI8);
  const auto w = mixed.addWeight("w", {320, 320}, ir::DType::kF16);
  mixed.addOp(ir::OpKind::kMatMul, "mm", {x, w}, 0).value();
  auto width = lowerShard(chip, mixed, {0}, {});
  ASSERT_FALSE(width.ok());
  EXPECT_EQ(width.error().format(), "node 'mm': activations and weights must have the same storage width");
}

// An INT8 input x [1, 64, side, side] and a 1 x 1 Conv "a" over it, then ReLU "ra": {x, ra}.
std::pair<ir::TensorId, ir::TensorId> inputAndConvRelu(ir::Graph& g, std::int64_t side) {
  const auto x = g.addInput("x", {1, 64, side, side}, ir::DType::kI8);
  const auto a = *g.addOp(ir::OpKind::kConv, "a", {x, g.addWeight("wa", {64, 64, 1, 1}, ir::DType::kI8)}, 0);
  return {x, *g.addOp(ir::OpKind::kRelu, "ra", {a}, 0)};
}

// ResNet-50 stage 1's 3 x 3 Conv "b" (64 channels, padding 1) over "ra" (inputAndConvRelu at 56 x 56),
// then ReLU "rb": the graph and the map's tensor id.
std::pair<ir::TensorId, ir::TensorId> stageOneConv(ir::Graph& g) {
  const auto [x, ra] = inputAndConvRelu(g, 56);
  const auto b = *g.addOp(ir::OpKind::kConv, "b", {ra, g.addWeight("wb", {64, 64, 3, 3}, ir::DType::kI8)},
                          ir::Attrs{{"pads", std::vector<std::int64_t>{1, 1, 1, 1}}}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kRelu, "rb", {b}, 0));
  return {x, ra};
}

// A map that 1 x 1 unit-stride Convs (with their epilogues), BatchNorm, Add or ReLU turn into one a
// window op reads keeps whole image rows per segment, as that one does (ResNet-50 stage 1: every map
// in 168-row segments), so that a 1 x 1 Conv's row blocks end where its input's and its output's
// segments both do. Here a bottleneck whose output a max-pool reads: its input (read by conv a and
// by the residual Add) and conv b's output (read by conv c) keep whole rows too.
TEST(Lowering, MapsBehindOneByOneConvsKeepWholeImageRows) {
  topology::ChipSpec chip;
  ir::Graph g;
  const auto [x, ra] = inputAndConvRelu(g, 56);
  const auto b = *g.addOp(ir::OpKind::kConv, "b", {ra, g.addWeight("wb", {64, 64, 3, 3}, ir::DType::kI8)},
                          ir::Attrs{{"pads", std::vector<std::int64_t>{1, 1, 1, 1}}}, 0);
  const auto rb = *g.addOp(ir::OpKind::kRelu, "rb", {b}, 0);
  const auto c = *g.addOp(ir::OpKind::kConv, "c", {rb, g.addWeight("wc", {64, 64, 1, 1}, ir::DType::kI8)}, 0);
  const auto out = *g.addOp(ir::OpKind::kRelu, "out", {*g.addOp(ir::OpKind::kAdd, "add", {c, x}, 0)}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kMaxPool, "pool", {out},
                        ir::Attrs{{"kernel_shape", std::vector<std::int64_t>{3, 3}},
                                  {"strides", std::vector<std::int64_t>{2, 2}},
                                  {"pads", std::vector<std::int64_t>{1, 1, 1, 1}}},
                        0));
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  for (const ir::TensorId t : {x, ra, rb, out}) {
    std::int64_t segmentRows = -1;
    for (const auto& placement : (*lowered)->tensors)
      if (placement.name == g.tensor(t).name) segmentRows = placement.segmentRows;
    EXPECT_GT(segmentRows, 0) << g.tensor(t).name << " is not spread over segments";
    EXPECT_EQ(segmentRows % 56, 0) << g.tensor(t).name << ": " << segmentRows << "-row segments";
  }
}

// A packed 3 x 3 Conv (64 input channels: five taps per vector) over a map whose segments hold three
// or more image rows streams blocks of at most half a segment (ResNet-50 stage 1: 56 x 56, segments
// of 168 rows, blocks of 84), so that its first blocks wait for fewer gathers.
TEST(Lowering, APackedConvStreamsBlocksOfHalfASegment) {
  topology::ChipSpec chip;
  ir::Graph g;
  const auto [x, ra] = stageOneConv(g);
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  std::int64_t segmentRows = 0;
  for (const auto& t : (*lowered)->tensors)
    if (t.name == g.tensor(ra).name) segmentRows = t.segmentRows;
  ASSERT_EQ(segmentRows % 56, 0);
  ASSERT_GE(segmentRows, 3 * 56);
  int computes = 0, gathers = 0;
  std::int64_t longest = 0;
  for (const auto& task : (*lowered)->problem.tasks()) {
    gathers += task.name.rfind("b gather", 0) == 0;
    if (task.name.rfind("b m", 0) != 0) continue;
    for (const auto& step : task.steps)
      if (step.inst.op == isa::Opcode::kMxmCompute) {
        ++computes;
        longest = std::max<std::int64_t>(longest, step.inst.repeat);
      }
  }
  EXPECT_GT(gathers, 0) << "the taps are not packed";
  EXPECT_GT(computes, 0);
  EXPECT_EQ(longest, segmentRows / 2);
}

// The same Conv gathers each pixel's row of three taps once (two passes over the map, stored
// twice), then packs each tile in one pass: 4 ALU steps and 4 SXM shifts a pixel instead of 7 and 7.
// The triplets lie on the map's own slices (a segment on the next segment's slice), and no task
// reads a slice that another of its MEM steps uses (no detour copies).
TEST(Lowering, APackedConvOfFiveTapsAVectorGathersRowTripletsOnce) {
  topology::ChipSpec chip;
  ir::Graph g;
  const auto [x, ra] = stageOneConv(g);
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  std::set<int> mapUnits;
  for (const auto& t : (*lowered)->tensors)
    if (t.name == g.tensor(ra).name) {
      ASSERT_EQ(t.replicas, 2);
      mapUnits.insert(t.memUnit.begin(), t.memUnit.end());
    }
  std::int64_t alu = 0, shifted = 0, tripletRows = 0;
  for (const auto& task : (*lowered)->problem.tasks()) {
    EXPECT_EQ(task.name.find("detour"), std::string::npos) << task.name;
    const bool triplet = task.name.rfind("b row triplets", 0) == 0;
    if (!triplet && task.name.rfind("b gather", 0) != 0) continue;
    const bool lastPass = triplet && task.name.find("tap 2") != std::string::npos;
    for (const auto& step : task.steps) {
      alu += step.inst.op == isa::Opcode::kVxmUnary || step.inst.op == isa::Opcode::kVxmBinary ? step.inst.repeat : 0;
      shifted += step.inst.op == isa::Opcode::kSxmShift ? step.inst.repeat : 0;
      if (lastPass && step.inst.op == isa::Opcode::kMemWrite) {
        EXPECT_TRUE(mapUnits.count(step.inst.unit)) << task.name << " writes its triplets off the map's slices";
        tripletRows += step.inst.repeat;
      }
    }
  }
  EXPECT_EQ(alu, 4 * 56 * 56);
  EXPECT_EQ(shifted, 4 * 56 * 56);
  EXPECT_EQ(tripletRows, 2 * 56 * 56);  // both copies
}

// A bottleneck block with a downsample, ops in the ONNX order (conv c, then the downsample, then the
// Add): the downsample is lowered first, so the Add fuses into conv c and no dependence leads from
// conv c's tasks to the downsample's (before, the Add fused into the downsample, which then waited
// for conv c's output).
TEST(Lowering, AShortcutIsLoweredBeforeTheConvItsAddFusesInto) {
  topology::ChipSpec chip;
  ir::Graph g;
  const auto [x, ra] = inputAndConvRelu(g, 8);
  const auto c = *g.addOp(ir::OpKind::kConv, "c", {ra, g.addWeight("wc", {64, 64, 1, 1}, ir::DType::kI8)}, 0);
  const auto ds = *g.addOp(ir::OpKind::kConv, "ds", {x, g.addWeight("wd", {64, 64, 1, 1}, ir::DType::kI8)}, 0);
  const auto sum = *g.addOp(ir::OpKind::kAdd, "add", {c, ds}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kRelu, "out", {sum}, 0));
  auto lowered = lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  const auto& problem = (*lowered)->problem;
  const auto& tasks = problem.tasks();
  std::vector<std::vector<int>> successors(tasks.size());
  for (const auto& d : problem.dependences()) successors[d.from].push_back(d.to);
  std::vector<char> reached(tasks.size(), 0);
  std::vector<int> work;
  for (size_t t = 0; t < tasks.size(); ++t)
    if (tasks[t].name.rfind("c ", 0) == 0) reached[t] = 1, work.push_back(static_cast<int>(t));
  ASSERT_FALSE(work.empty());
  while (!work.empty()) {
    const int t = work.back();
    work.pop_back();
    for (int s : successors[t])
      if (!reached[s]) reached[s] = 1, work.push_back(s);
  }
  int dsTasks = 0;
  for (size_t t = 0; t < tasks.size(); ++t)
    if (tasks[t].name.rfind("ds ", 0) == 0) {
      ++dsTasks;
      EXPECT_FALSE(reached[t]) << tasks[t].name << " waits for conv c";
    }
  EXPECT_GT(dsTasks, 0);
}

}  // namespace
}  // namespace tsp::lower
