// End-to-end tests of the one-chip compiler: verified programs that simulate in exactly the predicted
// cycles, spills through SRAM, seeds, quality against the lower bound, and golden programs.
#include "compile/schedule/shard_compiler.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "compile/schedule/cluster_schedule.h"
#include "compile/schedule/plane_order.h"
#include "sim/chip.h"
#include "compile/test_problems.h"

namespace tsp::schedule {
namespace {

std::vector<ir::OpId> allOps(const ir::Graph& g) {
  std::vector<ir::OpId> ops;
  for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  return ops;
}

// Runs a program on the cycle-accurate chip; returns its cycle count or the hazard.
Expected<Cycle> simulate(const topology::ChipSpec& chip, const isa::Program& program) {
  sim::KernelRuntime kernels;
  auto c = sim::makeTspChip(0, chip, std::make_shared<const isa::Program>(program), {}, {});
  if (auto s = c->advanceTo(sim::kNever); !s) return s.error();
  return c->stats().cycles;
}

ir::Graph matmul(std::int64_t m, std::int64_t k, std::int64_t n, ir::DType dtype) {
  ir::Graph g;
  const auto x = g.addInput("x", {m, k}, dtype);
  const auto w = g.addWeight("w", {k, n}, dtype);
  g.markOutput(*g.addOp(ir::OpKind::kMatMul, "mm", {x, w}, 0));
  return g;
}

TEST(ShardCompiler, ProgramsSimulateInExactlyThePredictedCycles) {
  topology::ChipSpec chip;
  struct Case { int layers, hidden, batch; const char* dtype; };
  for (const Case c : {Case{1, 320, 8, "int8"}, Case{3, 640, 24, "fp16"}, Case{2, 1000, 100, "int8"},
                       Case{4, 2048, 64, "fp16"}, Case{2, 640, 9000, "int8"}}) {  // the last spans two slices per tile
    const ir::Graph g = testing::mlp(c.layers, c.hidden, c.batch, c.dtype);
    Options o;
    o.annealMoves = 20;
    auto compiled = compileShard(chip, g, allOps(g), {}, o);
    ASSERT_TRUE(compiled.ok()) << compiled.error().format();
    auto cycles = simulate(chip, compiled->program);
    ASSERT_TRUE(cycles.ok()) << c.hidden << ": " << cycles.error().format();
    EXPECT_EQ(*cycles, compiled->program.predictedCycles) << c.hidden;
    EXPECT_GE(compiled->program.predictedCycles, compiled->report.lowerBound);
    EXPECT_LE(compiled->report.cycles, compiled->report.listCycles);
    EXPECT_EQ(compiled->report.spills, 0);
  }
}

TEST(ShardCompiler, SpillsGoThroughSramAndStillSimulateExactly) {
  topology::ChipSpec chip;
  chip.streamsPerDirection = 3;
  const ir::Graph g = testing::mlp(2, 960, 40, "int8");
  Options o;
  o.limitStreamPressure = false;  // let the scheduler overcommit registers so that colouring spills
  auto compiled = compileShard(chip, g, allOps(g), {}, o);
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  EXPECT_GT(compiled->report.spills, 0);
  auto cycles = simulate(chip, compiled->program);
  ASSERT_TRUE(cycles.ok()) << cycles.error().format();
  EXPECT_EQ(*cycles, compiled->program.predictedCycles);
}

TEST(ShardCompiler, TheSameSeedGivesTheSameProgram) {
  topology::ChipSpec chip;
  const ir::Graph g = testing::mlp(2, 960, 48);
  Options o;
  o.annealMoves = 100;
  o.seed = 3;
  const auto a = compileShard(chip, g, allOps(g), {}, o)->program;
  const auto b = compileShard(chip, g, allOps(g), {}, o)->program;
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.contentHash(), b.contentHash());
}

// Each effort level: one program per seed, simulated in exactly its predicted cycles; fast is the
// list schedule alone, max searches at least as much as default.
TEST(ShardCompiler, EveryEffortLevelGivesOneProgramPerSeed) {
  topology::ChipSpec chip;
  const ir::Graph g = testing::mlp(3, 960, 48, "int8");
  std::map<Effort, CompileReport> reports;
  for (Effort effort : {Effort::kFast, Effort::kDefault, Effort::kMax}) {
    Options o = effortOptions(effort);
    o.seed = 5;
    const auto a = compileShard(chip, g, allOps(g), {}, o);
    const auto b = compileShard(chip, g, allOps(g), {}, o);
    ASSERT_TRUE(a.ok() && b.ok()) << effortName(effort);
    EXPECT_EQ(a->program, b->program) << effortName(effort);
    auto cycles = simulate(chip, a->program);
    ASSERT_TRUE(cycles.ok()) << effortName(effort) << ": " << cycles.error().format();
    EXPECT_EQ(*cycles, a->program.predictedCycles) << effortName(effort);
    reports[effort] = a->report;
    EXPECT_EQ(parseEffort(effortName(effort)), effort);
  }
  EXPECT_FALSE(parseEffort("slow").has_value());
  EXPECT_EQ(reports[Effort::kFast].annealMoves, 0);
  EXPECT_EQ(reports[Effort::kFast].priorityWeightings, 1);
  EXPECT_EQ(reports[Effort::kFast].cycles, reports[Effort::kFast].listCycles);
  EXPECT_GT(reports[Effort::kDefault].annealMoves, 0);
  EXPECT_GE(reports[Effort::kMax].annealMoves, reports[Effort::kDefault].annealMoves);
  // A shard of many keeps the full plane-order search and the priority portfolio at max alone.
  EXPECT_EQ(effortOptions(Effort::kMax).asShardOfMany().planeOrderMoves, effortOptions(Effort::kMax).planeOrderMoves);
  EXPECT_TRUE(effortOptions(Effort::kMax).asShardOfMany().priorityPortfolio);
  EXPECT_FALSE(effortOptions(Effort::kDefault).asShardOfMany().priorityPortfolio);
  EXPECT_FALSE(effortOptions(Effort::kFast).reorderPlanes);
}

// Repeated layers are compiled once for the per-layer estimate: every copy gets its cycles, and they
// equal each layer's own compile.
TEST(ShardCompiler, LayerEstimatesOfRepeatedLayersEqualTheirOwnCompiles) {
  topology::ChipSpec chip;
  const ir::Graph g = testing::mlp(5, 640, 24, "int8");
  auto estimates = estimateLayerCycles(g, chip);
  ASSERT_TRUE(estimates.ok()) << estimates.error().format();
  ASSERT_EQ(estimates->size(), static_cast<size_t>(g.layerCount()));
  ASSERT_GE(g.layerCount(), 4);
  Options o = Options{}.asShardOfMany();
  o.boundRounds = 0;
  for (int layer = 0; layer < g.layerCount(); ++layer) {
    std::vector<ir::OpId> ops;
    std::set<ir::TensorId> resident;
    for (ir::OpId op : allOps(g))
      if (g.op(op).layer == layer) ops.push_back(op);
    for (ir::OpId op : ops)
      for (ir::TensorId in : g.op(op).inputs)
        if (g.tensor(in).producer >= 0 && g.op(g.tensor(in).producer).layer != layer) resident.insert(in);
    lower::ShardInterface interface;
    interface.resident.assign(resident.begin(), resident.end());
    auto alone = compileShard(chip, g, ops, interface, o);
    ASSERT_TRUE(alone.ok()) << alone.error().format();
    EXPECT_EQ((*estimates)[layer], alone->program.predictedCycles) << layer;
  }
}

// A shard whose layers repeat is searched once per distinct layer and placed whole: the program
// simulates in exactly its predicted cycles, one seed gives one program, the report counts the
// layers, and the SRAM placement is the one of the shard searched whole.
TEST(ShardCompiler, RepeatedLayersAreSearchedOnceAndSimulateExactly) {
  topology::ChipSpec chip;
  const ir::Graph g = testing::mlp(6, 640, 48, "int8");
  Options o = effortOptions(Effort::kDefault);
  o.seed = 3;
  const auto a = compileShard(chip, g, allOps(g), {}, o);
  const auto b = compileShard(chip, g, allOps(g), {}, o);
  ASSERT_TRUE(a.ok()) << a.error().format();
  ASSERT_TRUE(b.ok()) << b.error().format();
  EXPECT_EQ(a->program, b->program);
  EXPECT_EQ(a->report.segments, g.layerCount());
  EXPECT_GE(a->report.distinctSegments, 1);
  EXPECT_LT(a->report.distinctSegments, a->report.segments);
  EXPECT_GT(a->report.annealMoves, 0);
  auto cycles = simulate(chip, a->program);
  ASSERT_TRUE(cycles.ok()) << cycles.error().format();
  EXPECT_EQ(*cycles, a->program.predictedCycles);
  EXPECT_GE(a->program.predictedCycles, a->report.lowerBound);
  EXPECT_NE(reportJson(a->report).find("\"segments\""), std::string::npos);

  o.shareRepeatedLayers = false;
  const auto whole = compileShard(chip, g, allOps(g), {}, o);
  ASSERT_TRUE(whole.ok()) << whole.error().format();
  EXPECT_EQ(whole->report.segments, 1);
  EXPECT_EQ(whole->report.distinctSegments, 1);
  EXPECT_EQ(whole->program.tensors, a->program.tensors);
  EXPECT_EQ(whole->report.lowerBound, a->report.lowerBound);

  // List scheduling alone has no search to share.
  const auto fast = compileShard(chip, g, allOps(g), {}, effortOptions(Effort::kFast));
  ASSERT_TRUE(fast.ok()) << fast.error().format();
  EXPECT_EQ(fast->report.segments, 1);
}

TEST(ShardCompiler, PlacementTableNamesEveryTensor) {
  topology::ChipSpec chip;
  const ir::Graph g = testing::mlp(2, 320, 8);
  const auto program = compileShard(chip, g, allOps(g), {}, {})->program;
  std::set<std::string> names;
  for (const auto& t : program.tensors) names.insert(t.name);
  for (const char* n : {"x", "w0", "b0", "w1", "b1", "relu0.out"}) EXPECT_TRUE(names.count(n)) << n;
  for (const auto& t : program.tensors) {
    const std::int64_t segments = t.segmentRows > 0 ? (t.rows + t.segmentRows - 1) / t.segmentRows : 1;
    EXPECT_EQ(t.memUnit.size(), static_cast<size_t>(t.tiles * segments * t.replicas)) << t.name;
    EXPECT_EQ(t.replicas, t.rows == 1 && t.resident ? chip.mxmPlanes : 1) << t.name;  // biases: a copy per plane
    const std::set<std::string> resident = {"x", "w0", "b0", "w1", "b1"};
    EXPECT_EQ(t.resident, resident.count(t.name) > 0) << t.name;
  }
}

// A one-layer MLP of 16 rows whose input arrives on port 2, its first vector at cycle 500, read
// every `interval` cycles; the vectors arrive `spacing` cycles apart (0: interval).
Expected<CompiledShard> compileReceiving(int interval, double spacing) {
  topology::ChipSpec chip;
  const ir::Graph g = testing::mlp(1, 320, 16, "int8");
  lower::ShardInterface interface;
  lower::ReceivePlan rx;
  rx.tensor = g.inputs()[0];
  rx.port = 2;
  rx.arrivals = {500};
  rx.interval = interval;
  rx.spacing = spacing;
  interface.receives.push_back(rx);
  return compileShard(chip, g, allOps(g), interface, {});
}

TEST(ShardCompiler, ReceivesAreReleaseTimes) {
  auto compiled = compileReceiving(20, 0);
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  Cycle receiveIssue = -1, firstCompute = -1;
  for (const auto& i : compiled->program.instructions) {
    if (i.op == isa::Opcode::kC2cReceive) receiveIssue = i.issue;
    if (i.op == isa::Opcode::kMxmCompute && firstCompute < 0) firstCompute = i.issue;
  }
  EXPECT_GE(receiveIssue, 500);
  EXPECT_GT(firstCompute, receiveIssue + 15 * 20);  // after the last received vector is in SRAM
  EXPECT_GE(compiled->report.criticalPath, 500 + 15 * 20);
}

// At the link's exact rate (4 lanes x 30 Gb/s less 2.5 % framing: 320 / 16.25 = 19.69 cycles a
// vector), vector j of a burst arrives ceil(j x 19.69) cycles after the first: a receive reading one
// vector every 19 cycles issues so that it reads the last (the 16th, 296 cycles in) as it arrives.
TEST(ShardCompiler, AReceiveAtTheExactRateReadsItsLastVectorAsItArrives) {
  auto compiled = compileReceiving(19, 320 / 16.25);
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  std::vector<isa::Instruction> receives;
  for (const auto& i : compiled->program.instructions)
    if (i.op == isa::Opcode::kC2cReceive) receives.push_back(i);
  ASSERT_EQ(receives.size(), 1u);
  EXPECT_EQ(receives[0].issue + 15 * 19, 500 + 296);  // ceil(15 x 19.69); 15 x ceil(19.69) would be 300
}

// The C2C sends (repeat, issue) of a ReLU of 16 x 640 INT8 whose output leaves on port 1 of a
// link of 19.69 cycles a vector (4 lanes x 30 Gb/s less 2.5 % framing), in issue order.
std::vector<std::pair<int, Cycle>> exactRateSends(const topology::ChipSpec& chip) {
  ir::Graph g;
  const auto y = *g.addOp(ir::OpKind::kRelu, "y", {g.addInput("x", {16, 640}, ir::DType::kI8)}, 0);
  g.markOutput(y);
  lower::ShardInterface interface;
  interface.sends.push_back({.tensor = y, .port = 1, .interval = 19, .spacing = 320 / 16.25});
  auto compiled = compileShard(chip, g, allOps(g), interface, {});
  EXPECT_TRUE(compiled.ok()) << compiled.error().format();
  std::vector<std::pair<int, Cycle>> sends;
  if (compiled.ok())
    for (const auto& i : compiled->program.instructions)
      if (i.op == isa::Opcode::kC2cSend) sends.push_back({i.repeat, i.issue});
  std::sort(sends.begin(), sends.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return sends;
}

// A send at the link's exact rate holds the link for ceil(k x t_vec) cycles: the next tile's send
// on the port follows 16 vectors later by ceil(16 x 19.69) = 316 cycles, not 16 x 20.
TEST(ShardCompiler, SendsAtTheExactRateHoldTheLinkForTheExactTime) {
  const auto sends = exactRateSends(topology::ChipSpec{});
  ASSERT_EQ(sends.size(), 2u);  // two tiles of 16 rows
  EXPECT_EQ(sends[1].second - sends[0].second, 316);
}

// A tile longer than a MEM slice leaves in segments that continue one stream on the link: with 3
// addresses a slice, a 16-row tile goes in sends of 3, 3, 3, 3, 3 and 1 vectors, segment k issued
// ceil(3k x 19.69) cycles after the first (0, 60, 119, 178, 237, 296; a stream each would take
// ceil(3 x 19.69) = 60 cycles: 0, 60, 120, ...), and the next tile follows by ceil(16 x 19.69) = 316.
TEST(ShardCompiler, ASendLongerThanASliceContinuesOneStreamAtTheExactRate) {
  topology::ChipSpec chip;
  chip.addressesPerSlice = 3;
  const auto sends = exactRateSends(chip);
  ASSERT_EQ(sends.size(), 12u);  // two tiles of six segments
  std::vector<Cycle> offsets;
  for (const auto& [repeat, issue] : sends) offsets.push_back(issue - sends[0].second);
  EXPECT_EQ(offsets, (std::vector<Cycle>{0, 60, 119, 178, 237, 296, 316, 376, 435, 494, 553, 612}));
  EXPECT_EQ(sends[5].first, 1);
}

// Two ReLUs: r0 (layer 0) on input x0, whose output leaves on port 1, and r1 (layer 1) on input
// x1, which arrives on port 2 (the caller says when).
ir::Graph sendAndReceive(lower::ShardInterface& interface) {
  ir::Graph g;
  const auto x0 = g.addInput("x0", {16, 320}, ir::DType::kI8);
  const auto x1 = g.addInput("x1", {16, 320}, ir::DType::kI8);
  lower::SendPlan send;
  send.tensor = *g.addOp(ir::OpKind::kRelu, "r0", {x0}, 0);
  send.port = 1;
  send.interval = 20;
  send.spacing = 20;
  interface.sends.push_back(send);
  g.markOutput(*g.addOp(ir::OpKind::kRelu, "r1", {x1}, 1));
  lower::ReceivePlan receive;
  receive.tensor = x1;
  receive.port = 2;
  interface.receives.push_back(receive);
  return g;
}

TEST(ShardCompiler, MirroredReceivesFollowTheirOwnSends) {
  // A ring of identical chips: step 1's input arrives from the left neighbour, which sent it when
  // this chip sent its own step-0 output.
  topology::ChipSpec chip;
  lower::ShardInterface interface;
  const ir::Graph g = sendAndReceive(interface);
  interface.receives[0].interval = 20;
  interface.receives[0].mirrorsSend = 0;
  interface.receives[0].sendToArrival = 300;
  auto compiled = compileShard(chip, g, {0, 1}, interface, {});
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  ASSERT_EQ(compiled->sendIssues.size(), 1u);
  Cycle receiveIssue = -1;
  for (const auto& i : compiled->program.instructions)
    if (i.op == isa::Opcode::kC2cReceive) receiveIssue = i.issue;
  EXPECT_GE(receiveIssue, compiled->sendIssues[0][0] + 300);
}

// Every instruction names the op it serves: the computing op, or the tensor's producer for a send
// and a receive, with its layer and tensor; both on-disk forms keep the names.
TEST(ShardCompiler, EveryInstructionNamesItsOp) {
  topology::ChipSpec chip;
  lower::ShardInterface interface;
  const ir::Graph g = sendAndReceive(interface);
  interface.receives[0].arrivals = {500};
  const ir::TensorId y0 = interface.sends[0].tensor;
  auto compiled = compileShard(chip, g, {0, 1}, interface, {});
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  const isa::Program& p = compiled->program;
  ASSERT_EQ(p.originOf.size(), p.instructions.size());
  ASSERT_EQ(p.origins, lower::originsOf(g, {0, 1}, interface));
  EXPECT_EQ(p.origins[0], (isa::OpOrigin{"r0", "Relu", 0, "r0.out", "", ""}));  // its input is a graph input
  // A Send reads the tensor it sends, made by its producer (OpOrigin::input and inputProducer, which
  // the simulator checks is written first).
  EXPECT_EQ(p.origins[2], (isa::OpOrigin{"r0", "Send", 0, g.tensor(y0).name, g.tensor(y0).name, "r0"}));
  EXPECT_EQ(p.origins[3], (isa::OpOrigin{"x1", "Receive", -1, "x1", "", ""}));  // a graph input names itself
  std::set<std::string> kinds;
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    ASSERT_GE(p.originOf[i], 0) << "instruction " << i << " names no op";
    const isa::OpOrigin& o = p.origins[p.originOf[i]];
    kinds.insert(o.kind);
    if (p.instructions[i].op == isa::Opcode::kC2cSend) {
      EXPECT_EQ(o.kind, "Send");
    }
    if (p.instructions[i].op == isa::Opcode::kC2cReceive) {
      EXPECT_EQ(o.kind, "Receive");
    }
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"Relu", "Send", "Receive"}));
  auto json = isa::deserialize(isa::serialize(p), chip, "p.json");
  ASSERT_TRUE(json.ok()) << json.error().format();
  EXPECT_EQ(*json, p);
  auto binary = isa::deserializeBinary(isa::serializeBinary(p), chip, "p.tspp");
  ASSERT_TRUE(binary.ok()) << binary.error().format();
  EXPECT_EQ(*binary, p);
}

// Each MEM read of an op with several inputs names the input it reads (an origin of its own, after
// the receives': lower::inputReads), at that input's SRAM placement, so that the simulator checks
// the read against that input's first write.
TEST(ShardCompiler, EachReadOfATwoInputOpNamesItsInput) {
  topology::ChipSpec chip;
  ir::Graph g;
  const auto x0 = g.addInput("x0", {16, 320}, ir::DType::kI8);
  const auto x1 = g.addInput("x1", {16, 320}, ir::DType::kI8);
  const auto r0 = *g.addOp(ir::OpKind::kRelu, "r0", {x0}, 0);
  const auto r1 = *g.addOp(ir::OpKind::kRelu, "r1", {x1}, 0);
  const auto sum = *g.addOp(ir::OpKind::kAdd, "a", {r0, r1}, 1);
  g.markOutput(sum);
  auto compiled = compileShard(chip, g, {0, 1, 2}, {}, {});
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  const isa::Program& p = compiled->program;
  ASSERT_EQ(p.origins.size(), 5u);
  const std::string a = g.tensor(sum).name;
  EXPECT_EQ(p.origins[3], (isa::OpOrigin{"a", "Add", 1, a, g.tensor(r0).name, "r0"}));
  EXPECT_EQ(p.origins[4], (isa::OpOrigin{"a", "Add", 1, a, g.tensor(r1).name, "r1"}));
  std::map<std::string, int> readsOf;
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const isa::Instruction& inst = p.instructions[i];
    const isa::OpOrigin& o = p.origins[p.originOf[i]];
    if (inst.op != isa::Opcode::kMemRead || o.op != "a") continue;
    ASSERT_FALSE(o.input.empty()) << "a read of 'a' at cycle " << inst.issue << " names no input";
    const auto placed = std::find_if(p.tensors.begin(), p.tensors.end(),
                                     [&](const isa::TensorPlacement& t) { return t.name == o.input; });
    ASSERT_NE(placed, p.tensors.end()) << o.input;
    bool inside = false;
    for (size_t k = 0; k < placed->memUnit.size(); ++k)
      inside |= placed->memUnit[k] == inst.unit && inst.address >= placed->address[k] &&
                inst.address < placed->address[k] + (placed->segmentRows > 0 ? placed->segmentRows : placed->rows);
    EXPECT_TRUE(inside) << "a read named '" << o.input << "' at unit " << inst.unit << " address " << inst.address;
    ++readsOf[o.input];
  }
  EXPECT_GT(readsOf[g.tensor(r0).name], 0);
  EXPECT_GT(readsOf[g.tensor(r1).name], 0);
}

// A tile longer than a slice leaves in segments: they must leave back to back (the receiver's
// release times assume it), even when another reader of the second segment competes for its slice;
// on a link of one vector a cycle and at the exact rate of 19.69 cycles a vector (the segments one
// stream: the second leaves ceil(5,000 x 19.69) cycles after the first, and says so in its stride).
// With two tiles the second tile's first segment may enter the link the cycle the first tile's last
// leaves it: it starts a stream of its own (stride 0), as the receiver's release times assume.
TEST(ShardCompiler, ALongTileLeavesInBackToBackSegments) {
  for (const std::int64_t cols : {320, 640})
  for (const double bytesPerCycle : {320.0, 16.25}) {
    const schedule::LinkPace pace = schedule::linkPace(320 / bytesPerCycle);
    const int tiles = static_cast<int>(cols / 320);
    topology::ChipSpec chip;
    ir::Graph g;
    // y leaves in two segments of 5,000 rows a tile; the add reads y's second segment when the chain
    // t is ready, about when that segment should leave, and the chain of ReLUs after the add gives it
    // the higher priority: placed first, it holds the segment's read port.
    const auto y = *g.addOp(ir::OpKind::kRelu, "y", {g.addInput("x", {10000, cols}, ir::DType::kI8)}, 0);
    auto t = g.addInput("x2", {10000, cols}, ir::DType::kI8);
    for (int i = 0; i < 5; ++i) t = *g.addOp(ir::OpKind::kRelu, fmt::format("t{}", i), {t}, 0);
    auto r = *g.addOp(ir::OpKind::kAdd, "add", {y, t}, 0);
    for (int i = 0; i < 8; ++i) r = *g.addOp(ir::OpKind::kRelu, fmt::format("r{}", i), {r}, 0);
    g.markOutput(r);
    lower::ShardInterface interface;
    const lower::SendPlan send{.tensor = y, .port = 3, .interval = pace.interval, .spacing = pace.spacing};
    interface.sends.push_back(send);
    for (std::uint64_t seed : {0u, 1u, 2u}) {
      Options o;
      o.annealMoves = 64;
      o.seed = seed;
      auto compiled = compileShard(chip, g, allOps(g), interface, o);
      ASSERT_TRUE(compiled.ok()) << compiled.error().format();
      std::vector<isa::Instruction> sends;
      for (const auto& i : compiled->program.instructions)
        if (i.op == isa::Opcode::kC2cSend) sends.push_back(i);
      ASSERT_EQ(sends.size(), 2u * tiles);  // 10,000 rows: two segments on two slices a tile
      EXPECT_NE(sends[0].unit, -1);
      std::vector<Cycle> tileIssues;
      for (int tile = 0; tile < tiles; ++tile) {
        const isa::Instruction& a = sends[2 * tile];
        const isa::Instruction& b = sends[2 * tile + 1];
        const Cycle first = topology::serializationCycles(a.repeat, std::max(1.0, send.spacing));
        EXPECT_EQ(b.issue, a.issue + first) << "seed " << seed;
        EXPECT_EQ(a.stride, 0);
        EXPECT_EQ(b.stride, a.repeat);
        tileIssues.push_back(a.issue);
      }
      ASSERT_EQ(compiled->sendIssues.size(), 1u);
      EXPECT_EQ(compiled->sendIssues[0], tileIssues);

      // A second chip receives the bursts at the arrivals the cluster scheduler would derive from
      // each tile's first send; both chips simulate in their predicted cycles, without a hazard.
      const Cycle latency = 200;
      // Its input is the tensor sent, under the sender's name: a receive checks the burst's tensor.
      ir::Graph rg;
      const auto x = rg.addInput(g.tensor(y).name, {10000, cols}, ir::DType::kI8);
      rg.markOutput(*rg.addOp(ir::OpKind::kRelu, "r", {x}, 0));
      lower::ShardInterface in;
      lower::ReceivePlan receive;
      receive.tensor = x;
      receive.port = 5;
      receive.interval = send.interval;
      receive.spacing = send.spacing;
      for (const Cycle issue : compiled->sendIssues[0]) receive.arrivals.push_back(issue + chip.c2cSendCycles + latency);
      in.receives.push_back(receive);
      auto receiver = compileShard(chip, rg, allOps(rg), in, o);
      ASSERT_TRUE(receiver.ok()) << receiver.error().format();
      std::vector<sim::PortBinding> senderPorts(chip.c2cPorts), receiverPorts(chip.c2cPorts);
      senderPorts[send.port] = {0, 1, receive.port, true, latency, bytesPerCycle};
      receiverPorts[receive.port] = {0, 0, send.port, false, latency, bytesPerCycle};
      sim::KernelRuntime kernels;
      auto a = sim::makeTspChip(0, chip, std::make_shared<const isa::Program>(compiled->program), senderPorts, {});
      auto b = sim::makeTspChip(1, chip, std::make_shared<const isa::Program>(receiver->program), receiverPorts, {});
      ASSERT_TRUE(a->advanceTo(sim::kNever).ok());
      const auto bursts = a->takeOutgoing();
      EXPECT_EQ(bursts.size(), 2u * tiles);
      for (const auto& burst : bursts) b->deliver(burst);
      const Status received = b->advanceTo(sim::kNever);
      ASSERT_TRUE(received.ok()) << received.error().format();
      EXPECT_EQ(a->stats().cycles, compiled->program.predictedCycles);
      EXPECT_EQ(b->stats().cycles, receiver->program.predictedCycles);
      EXPECT_EQ(a->stats().hazardCount() + b->stats().hazardCount(), 0);
      if (bytesPerCycle < 320) {
        for (int tile = 0; tile < tiles; ++tile) {
          EXPECT_EQ(bursts[2 * tile].streamFrom, 0);
          EXPECT_EQ(bursts[2 * tile + 1].streamFrom, sends[2 * tile].repeat);
        }
      }
      // The case the stride settles: the second tile enters the link as the first tile leaves it.
      if (tiles == 2 && bytesPerCycle < 320 && seed == 0) {
        const Cycle firstTile = topology::streamCycles(0, sends[0].repeat + sends[1].repeat, send.spacing, send.interval);
        EXPECT_EQ(sends[2].issue, sends[0].issue + firstTile);
      }
    }
  }
}

TEST(ShardCompiler, Int8MatMulReachesTheMxmUtilisationTarget) {
  topology::ChipSpec chip;
  const ir::Graph g = matmul(2304, 4096, 1280, ir::DType::kI8);
  auto compiled = compileShard(chip, g, allOps(g), {}, {});
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  EXPECT_GE(compiled->report.mxmMacUtilisation, 0.80);
  EXPECT_LE(static_cast<double>(compiled->report.cycles), 1.10 * static_cast<double>(compiled->report.lowerBound));
  // Within 2 % of its busiest plane's computes after one list schedule: no second weighting.
  EXPECT_EQ(compiled->report.priorityWeightings, 1);
  auto cycles = simulate(chip, compiled->program);
  ASSERT_TRUE(cycles.ok()) << cycles.error().format();
  EXPECT_EQ(*cycles, compiled->program.predictedCycles);
}

// A wide INT8 MLP whose weights fill most slices: no matmul task may read its input tile and write
// its output tile on one MEM slice (one queue cannot do both at once), which check() would reject.
TEST(ShardCompiler, AWideInt8MlpNeverReadsAndWritesOneSliceInOneTask) {
  topology::ChipSpec chip;
  const ir::Graph g = testing::mlp(4, 6144, 256, "int8");
  Options o;
  o.annealMoves = 0;
  auto compiled = compileShard(chip, g, allOps(g), {}, o);
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  auto cycles = simulate(chip, compiled->program);
  ASSERT_TRUE(cycles.ok()) << cycles.error().format();
  EXPECT_EQ(*cycles, compiled->program.predictedCycles);
  // Each layer alone, as the partitioner's cost model compiles it (inputs resident): the bias of
  // fc3 once landed on a slice of its input tile and the chain read both at once.
  auto layers = estimateLayerCycles(g, chip);
  ASSERT_TRUE(layers.ok()) << layers.error().format();
  EXPECT_EQ(layers->size(), 4u);
}

// A small conv net through every spatial lowering: Conv 3x3 (folded BatchNorm, ReLU), a strided
// Conv with a residual-free epilogue, MaxPool, AveragePool, a BatchNorm on the VXM, GlobalAveragePool.
TEST(ShardCompiler, ConvNetSimulatesInExactlyThePredictedCycles) {
  topology::ChipSpec chip;
  ir::Graph g;
  using Ints = std::vector<std::int64_t>;
  const auto dt = ir::DType::kI8;
  auto x = g.addInput("x", {1, 16, 20, 20}, dt);
  auto conv = [&](const std::string& name, ir::TensorId in, std::int64_t cin, std::int64_t cout, std::int64_t stride) {
    const auto w = g.addWeight(name + ".w", {cout, cin, 3, 3}, dt);
    return *g.addOp(ir::OpKind::kConv, name, {in, w},
                    ir::Attrs{{"strides", Ints{stride, stride}}, {"pads", Ints{1, 1, 1, 1}}}, 0);
  };
  auto bn = [&](const std::string& name, ir::TensorId in, std::int64_t c) {
    return *g.addOp(ir::OpKind::kBatchNormalization, name,
                    {in, g.addWeight(name + ".scale", {c}, dt), g.addWeight(name + ".b", {c}, dt),
                     g.addWeight(name + ".mean", {c}, dt), g.addWeight(name + ".var", {c}, dt)},
                    ir::Attrs{{"epsilon", 1e-5}}, 0);
  };
  auto y = *g.addOp(ir::OpKind::kRelu, "relu1", {bn("bn1", conv("conv1", x, 16, 32, 1), 32)}, 0);
  y = conv("conv2", y, 32, 32, 2);  // 10 x 10
  y = *g.addOp(ir::OpKind::kMaxPool, "maxpool", {y},
               ir::Attrs{{"kernel_shape", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 1, 1}}}, 0);
  y = *g.addOp(ir::OpKind::kAveragePool, "avgpool", {y}, ir::Attrs{{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}, 0);
  y = bn("bn2", y, 32);
  g.markOutput(*g.addOp(ir::OpKind::kGlobalAveragePool, "gap", {y}, 0));
  Options o;
  o.annealMoves = 20;
  auto compiled = compileShard(chip, g, allOps(g), {}, o);
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  int strided = 0, computes = 0;
  for (const auto& i : compiled->program.instructions) {
    strided += i.op == isa::Opcode::kMemRead && i.stride == 2;
    computes += i.op == isa::Opcode::kMxmCompute;
  }
  EXPECT_GT(strided, 0);               // the stride-2 Conv and pool read every other pixel
  EXPECT_GT(computes, 9);  // conv1 streams window-gathered input (1 K tile), conv2 one K tile per tap
  auto cycles = simulate(chip, compiled->program);
  ASSERT_TRUE(cycles.ok()) << cycles.error().format();
  EXPECT_EQ(*cycles, compiled->program.predictedCycles);
  EXPECT_GE(compiled->program.predictedCycles, compiled->report.lowerBound);
}

// A 3 x 3 Conv over 32 channels packs ten taps per vector: gather passes shift taps to their lanes
// on the SXM, and the MXM streams one vector per pixel instead of nine.
TEST(ShardCompiler, PackedConvSimulatesInExactlyThePredictedCycles) {
  topology::ChipSpec chip;
  ir::Graph g;
  const auto x = g.addInput("x", {1, 32, 56, 56}, ir::DType::kI8);
  const auto a = *g.addOp(ir::OpKind::kRelu, "relu", {x}, 0);  // made on chip: not window-gathered by the host
  const auto w = g.addWeight("w", {32, 32, 3, 3}, ir::DType::kI8);
  g.markOutput(*g.addOp(ir::OpKind::kConv, "conv", {a, w},
                        ir::Attrs{{"pads", std::vector<std::int64_t>{1, 1, 1, 1}}}, 0));
  auto compiled = compileShard(chip, g, allOps(g), {}, {});
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  std::int64_t shifted = 0, streamed = 0;
  for (const auto& i : compiled->program.instructions) {
    shifted += i.op == isa::Opcode::kSxmShift ? i.repeat : 0;
    streamed += i.op == isa::Opcode::kMxmCompute ? i.repeat : 0;
  }
  EXPECT_EQ(shifted, 8 * 56 * 56);   // every tap but the first of each packed vector
  EXPECT_EQ(streamed, 56 * 56);      // one packed vector per pixel
  auto cycles = simulate(chip, compiled->program);
  ASSERT_TRUE(cycles.ok()) << cycles.error().format();
  EXPECT_EQ(*cycles, compiled->program.predictedCycles);
}

// A ResNet-50 stage-1 bottleneck without its shortcut: 1 x 1 (64), packed 3 x 3 (64), 1 x 1 (256).
ir::Graph bottleneck() {
  ir::Graph g;
  const auto dt = ir::DType::kI8;
  auto conv = [&](const std::string& name, ir::TensorId in, std::int64_t cin, std::int64_t cout, std::int64_t k) {
    const auto w = g.addWeight(name + ".w", {cout, cin, k, k}, dt);
    const std::int64_t pad = k / 2;
    const auto y = *g.addOp(ir::OpKind::kConv, name, {in, w},
                            ir::Attrs{{"pads", std::vector<std::int64_t>{pad, pad, pad, pad}}}, 0);
    return *g.addOp(ir::OpKind::kRelu, name + ".relu", {y}, 0);
  };
  const auto x = g.addInput("x", {1, 64, 56, 56}, dt);
  g.markOutput(conv("conv3", conv("conv2", conv("conv1", x, 64, 64, 1), 64, 64, 3), 64, 256, 1));
  return g;
}

// A shard compiled alone is list-scheduled with the seed's default weights and with each portfolio
// beta, gamma 0 (each from the lowered problem, its planes' run order searched), and the shortest
// schedule is kept: exactly the best of the weightings compiled alone, and it still simulates exactly.
TEST(ShardCompiler, PriorityWeightingsKeepTheShortestSchedule) {
  topology::ChipSpec chip;
  const ir::Graph g = bottleneck();
  Options first;
  first.priorityPortfolio = false;
  auto one = compileShard(chip, g, allOps(g), {}, first);
  ASSERT_TRUE(one.ok());
  Cycle shortest = one->program.predictedCycles, shortestList = one->report.listCycles;
  std::string each = fmt::format("defaults {}", shortest);
  for (const double beta : first.portfolioBetas) {
    Options other = first;
    other.beta = beta;
    other.gamma = 0.0;
    auto alone = compileShard(chip, g, allOps(g), {}, other);
    ASSERT_TRUE(alone.ok());
    shortest = std::min(shortest, alone->program.predictedCycles);
    shortestList = std::min(shortestList, alone->report.listCycles);
    each += fmt::format(", beta {} {}", beta, alone->program.predictedCycles);
  }
  auto all = compileShard(chip, g, allOps(g), {}, Options{});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->program.predictedCycles, shortest) << each;
  EXPECT_EQ(all->report.listCycles, shortestList);
  EXPECT_EQ(all->report.priorityWeightings, 1 + static_cast<int>(first.portfolioBetas.size()));
  EXPECT_EQ(one->report.priorityWeightings, 1);
  auto cycles = simulate(chip, all->program);
  ASSERT_TRUE(cycles.ok()) << cycles.error().format();
  EXPECT_EQ(*cycles, all->program.predictedCycles);
}

// Each MXM plane takes its runs in the order a schedule without the plane chains suggests: the runs
// stay whole (one install sequence and its computes each), every plane's new order is chained, the
// list makespan is no worse than the lowering's order, and the program still simulates exactly.
TEST(ShardCompiler, PlanesReorderTheirRunsAndStillSimulateExactly) {
  topology::ChipSpec chip;
  const ir::Graph g = bottleneck();
  auto lowered = lower::lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok()) << lowered.error().format();
  lower::LoweredShard& shard = **lowered;
  ASSERT_TRUE(shard.problem.check().ok());
  const auto inLoweringOrder = shard.planeRuns;
  ASSERT_EQ(static_cast<int>(inLoweringOrder.size()), chip.mxmPlanes);
  const auto before = scheduleList(shard.problem, {});
  ASSERT_TRUE(before.ok());
  for (const auto& runs : inLoweringOrder)
    for (const auto& d : planeChain(shard.problem, runs))
      EXPECT_NE(std::find(shard.problem.dependences().begin(), shard.problem.dependences().end(), d),
                shard.problem.dependences().end());

  const auto changed = orderPlaneRuns(shard, *before, {});
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(shard.problem.check().ok());
  bool reordered = false;
  for (size_t p = 0; p < shard.planeRuns.size(); ++p) {
    auto sorted = shard.planeRuns[p], original = inLoweringOrder[p];
    reordered |= sorted != original;
    auto byTask = [](const lower::PlaneRun& a, const lower::PlaneRun& b) { return a.firstInstall < b.firstInstall; };
    std::sort(sorted.begin(), sorted.end(), byTask);
    std::sort(original.begin(), original.end(), byTask);
    EXPECT_EQ(sorted, original) << "plane " << p << " lost or gained a run";
    for (const auto& d : planeChain(shard.problem, shard.planeRuns[p]))
      EXPECT_NE(std::find(shard.problem.dependences().begin(), shard.problem.dependences().end(), d),
                shard.problem.dependences().end());
  }
  EXPECT_TRUE(reordered);
  const auto after = scheduleList(shard.problem, {});
  ASSERT_TRUE(after.ok());
  EXPECT_LT(after->makespan, before->makespan);
  EXPECT_TRUE(verify(shard.problem, *after).ok());

  Options o;
  o.annealMoves = 20;
  auto compiled = compileShard(chip, g, allOps(g), {}, o);
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  auto cycles = simulate(chip, compiled->program);
  ASSERT_TRUE(cycles.ok()) << cycles.error().format();
  EXPECT_EQ(*cycles, compiled->program.predictedCycles);
  o.reorderPlanes = false;
  auto fixed = compileShard(chip, g, allOps(g), {}, o);
  ASSERT_TRUE(fixed.ok()) << fixed.error().format();
  EXPECT_LT(compiled->report.cycles, fixed->report.cycles);
  // The bound is order-free: the same whichever order the planes took, never above the chosen
  // order's critical path, and no schedule beats it.
  EXPECT_EQ(compiled->report.lowerBound, fixed->report.lowerBound);
  EXPECT_EQ(compiled->report.criticalPath, fixed->report.criticalPath);
  EXPECT_EQ(compiled->program.lowerBoundCycles, compiled->report.lowerBound);
  EXPECT_LE(compiled->report.criticalPath, compiled->report.chosenOrderCriticalPath);
  EXPECT_LE(fixed->report.criticalPath, fixed->report.chosenOrderCriticalPath);
  EXPECT_NE(compiled->report.chosenOrderCriticalPath, fixed->report.chosenOrderCriticalPath);
  EXPECT_LE(compiled->report.lowerBound, compiled->report.cycles);
  // The order is a function of the seed alone.
  o.reorderPlanes = true;
  auto again = compileShard(chip, g, allOps(g), {}, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->program.instructions, compiled->program.instructions);
}

// A plane whose chain runs backwards against the data (a run after one that reads its result) is a
// cycle that check() reports; orderPlaneRuns never produces one.
TEST(ShardCompiler, APlaneChainAgainstTheDataIsACycle) {
  topology::ChipSpec chip;
  const ir::Graph g = bottleneck();
  auto lowered = lower::lowerShard(chip, g, allOps(g), {});
  ASSERT_TRUE(lowered.ok());
  lower::LoweredShard& shard = **lowered;
  auto& runs = shard.planeRuns[0];
  ASSERT_GE(runs.size(), 2u);
  std::reverse(runs.begin(), runs.end());
  for (const auto& d : planeChain(shard.problem, runs)) shard.problem.addDependence(d);
  EXPECT_FALSE(shard.problem.check().ok());
}

// A feature map that a 3 x 3 max-pool reads nine times per pixel is stored twice: the Conv's one
// result stream is written by two MEM slices of one hemisphere, each pass of the pool reads two taps,
// one from each copy, and the program still simulates in exactly the predicted cycles.
TEST(ShardCompiler, AFeatureMapReadByManyTapsIsWrittenTwice) {
  topology::ChipSpec chip;
  ir::Graph g;
  using Ints = std::vector<std::int64_t>;
  const auto x = g.addInput("x", {1, 3, 32, 32}, ir::DType::kI8);
  const auto w = g.addWeight("w", {64, 3, 7, 7}, ir::DType::kI8);
  auto y = *g.addOp(ir::OpKind::kConv, "conv", {x, w},
                    ir::Attrs{{"strides", Ints{2, 2}}, {"pads", Ints{3, 3, 3, 3}}}, 0);
  y = *g.addOp(ir::OpKind::kRelu, "relu", {y}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kMaxPool, "pool", {y},
                        ir::Attrs{{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}},
                        0));
  auto compiled = compileShard(chip, g, allOps(g), {}, {});
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  const isa::Program& program = compiled->program;
  const isa::TensorPlacement* map = nullptr;
  for (const auto& t : program.tensors)
    if (t.name == g.tensor(y).name) map = &t;
  ASSERT_NE(map, nullptr);
  ASSERT_EQ(map->replicas, 2);
  const size_t pieces = map->memUnit.size() / 2;
  std::set<int> first(map->memUnit.begin(), map->memUnit.begin() + static_cast<std::ptrdiff_t>(pieces));
  std::set<int> second(map->memUnit.begin() + static_cast<std::ptrdiff_t>(pieces), map->memUnit.end());
  std::int64_t written[2] = {0, 0}, read[2] = {0, 0};
  for (const auto& i : program.instructions) {
    for (int c = 0; c < 2; ++c) {
      if (!(c == 0 ? first : second).count(i.unit)) continue;
      (i.op == isa::Opcode::kMemWrite ? written : read)[c] += i.op == isa::Opcode::kMemWrite || i.op == isa::Opcode::kMemRead ? i.repeat : 0;
    }
  }
  EXPECT_EQ(written[0], 16 * 16);  // every pixel, in both copies
  EXPECT_EQ(written[1], 16 * 16);
  // Nine taps of 8 x 8 output pixels: passes of two taps (one per copy) and a last single tap.
  EXPECT_EQ(read[0] + read[1], 9 * 8 * 8);
  EXPECT_EQ(read[1], 4 * 8 * 8);
  // Each write of the second copy shares its stream (and so its values) with one of the first.
  std::set<std::pair<Cycle, int>> firstWrites;
  for (const auto& i : program.instructions)
    if (i.op == isa::Opcode::kMemWrite && first.count(i.unit)) firstWrites.insert({i.issue, i.src.id});
  for (const auto& i : program.instructions)
    if (i.op == isa::Opcode::kMemWrite && second.count(i.unit)) {
      bool shared = false;
      for (const auto& [issue, id] : firstWrites) shared |= id == i.src.id && std::abs(issue - i.issue) < chip.sliceCount();
      EXPECT_TRUE(shared) << "a write of the second copy at cycle " << i.issue;
    }
  auto cycles = simulate(chip, program);
  ASSERT_TRUE(cycles.ok()) << cycles.error().format();
  EXPECT_EQ(*cycles, program.predictedCycles);
}

// Golden programs: the readable form of tiny graphs, regenerated only on purpose
// (TSP_REGENERATE_GOLDEN=1).
void expectGolden(const std::string& name, const std::string& text) {
  const std::string path = std::string(TSP_SOURCE_DIR) + "/tests/golden/compile/" + name;
  if (std::getenv("TSP_REGENERATE_GOLDEN")) {
    std::ofstream(path) << text;
    GTEST_SKIP() << "regenerated " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing golden file " << path;
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(text, expected.str()) << name;
}

// The report's two SRAM figures: the most bytes live at once, and the address footprint the
// simulator measures (per slice the highest address a MEM access or weight install touches + 1).
TEST(ShardCompiler, SramFootprintIsTheSimulatorsFigure) {
  topology::ChipSpec chip;
  sim::KernelRuntime kernels;
  for (const auto& g : {testing::mlp(3, 640, 64, "int8"), bottleneck()}) {
    auto compiled = compileShard(chip, g, allOps(g), {}, {});
    ASSERT_TRUE(compiled.ok()) << compiled.error().format();
    auto c = sim::makeTspChip(0, chip, std::make_shared<const isa::Program>(compiled->program), {}, {});
    ASSERT_TRUE(c->advanceTo(sim::kNever).ok());
    EXPECT_EQ(c->stats().sramPeakBytes, compiled->report.sramFootprintBytes);
    EXPECT_GT(compiled->report.sramPeakBytes, 0);
    EXPECT_NE(reportJson(compiled->report).find("\"sram_live_peak_bytes\""), std::string::npos);
  }
}

TEST(ShardCompiler, GoldenTinyMlpInt8) {
  topology::ChipSpec chip;
  const ir::Graph g = testing::mlp(2, 320, 4, "int8");
  expectGolden("mlp2_320_b4_int8.txt", isa::toText(compileShard(chip, g, allOps(g), {}, {})->program, chip));
}

TEST(ShardCompiler, GoldenTinyElementwiseFp16) {
  topology::ChipSpec chip;
  ir::Graph g;
  const auto a = g.addInput("a", {6, 320}, ir::DType::kF16);
  const auto b = g.addInput("b", {6, 320}, ir::DType::kF16);
  g.markOutput(*g.addOp(ir::OpKind::kRelu, "relu", {*g.addOp(ir::OpKind::kAdd, "add", {a, b}, 0)}, 0));
  expectGolden("add_relu_6x320_fp16.txt", isa::toText(compileShard(chip, g, allOps(g), {}, {})->program, chip));
}

}  // namespace
}  // namespace tsp::schedule
