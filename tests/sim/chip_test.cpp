// Tests of the cycle-accurate chip: predicted equals simulated, and one test per hazard.
#include "sim/chip.h"

#include <gtest/gtest.h>

#include "compile/frontend/builtin_models.h"
#include "compile/schedule/shard_compiler.h"

namespace tsp::sim {
namespace {

using isa::Direction;
using isa::Instruction;
using isa::Opcode;
using topology::UnitKind;

// One KernelRuntime for the whole test binary.
class KokkosEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { runtime_ = std::make_unique<KernelRuntime>(); }
  void TearDown() override { runtime_.reset(); }

 private:
  std::unique_ptr<KernelRuntime> runtime_;
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new KokkosEnvironment);

class ChipTest : public ::testing::Test {
 protected:
  topology::ChipSpec spec_;
  std::vector<topology::UnitInfo> units_ = spec_.units();

  int mem(int i) const { return spec_.firstUnit(UnitKind::kMem) + i; }
  int vxm(int i) const { return spec_.firstUnit(UnitKind::kVxm) + i; }
  int c2c(int i) const { return spec_.firstUnit(UnitKind::kC2c) + i; }
  int slice(int unit) const { return units_[unit].slice; }

  Instruction inst(int unit, Cycle issue, Opcode op, int repeat = 1) const {
    Instruction i;
    i.unit = unit;
    i.issue = issue;
    i.op = op;
    i.repeat = repeat;
    return i;
  }

  // A MEM read on slice `from` feeding a VXM op that writes to MEM slice `to`, all on time.
  std::vector<Instruction> chain(int from, int to, Cycle start, int stream, int repeat) const {
    Instruction read = inst(mem(from), start, Opcode::kMemRead, repeat);
    read.address = 0;
    read.stride = 1;
    read.dst = {static_cast<std::int16_t>(stream), slice(vxm(0)) >= slice(mem(from)) ? Direction::kEast : Direction::kWest};
    Instruction alu = inst(vxm(0), start + spec_.memReadCycles + std::abs(slice(vxm(0)) - slice(mem(from))),
                           Opcode::kVxmUnary, repeat);
    alu.func = isa::VxmFunc::kRelu;
    alu.src = read.dst;
    alu.dst = {static_cast<std::int16_t>(stream + 1), slice(mem(to)) >= slice(vxm(0)) ? Direction::kEast : Direction::kWest};
    Instruction write = inst(mem(to), alu.issue + spec_.vxmCycles + std::abs(slice(mem(to)) - slice(vxm(0))),
                             Opcode::kMemWrite, repeat);
    write.address = 0;
    write.stride = 1;
    write.src = alu.dst;
    return {read, alu, write};
  }

  Status run(std::vector<Instruction> list, std::vector<PortBinding> ports = {}, const Chip** out = nullptr) {
    auto program = std::make_shared<isa::Program>();
    program->chipSpecHash = spec_.hash();
    program->instructions = std::move(list);
    isa::canonicalize(*program);
    if (ports.empty()) ports.resize(spec_.c2cPorts);
    chip_ = makeTspChip(0, spec_, program, ports, SimOptions{});
    if (out) *out = chip_.get();
    return chip_->advanceTo(kNever);
  }

  std::unique_ptr<Chip> chip_;
};

TEST_F(ChipTest, OnTimeChainRunsAndCounts) {
  ASSERT_TRUE(run(chain(0, 50, 10, 0, 32)).ok());
  const auto& st = chip_->stats();
  EXPECT_EQ(st.instructions, 3);
  EXPECT_EQ(st.kindBusy[static_cast<int>(UnitKind::kMem)], 64);
  const auto c = chain(0, 50, 10, 0, 32);
  EXPECT_EQ(st.cycles, isa::completion(spec_, c[2]) + spec_.rippleCycles);
  EXPECT_EQ(st.sramPeakBytes, 2 * 32 * spec_.vectorBytes);
}

TEST_F(ChipTest, CompiledProgramSimulatesInExactlyThePredictedCycles) {
  frontend::ModelSpec model;
  model.builtin = "mlp";
  model.params = {{"layers", "3"}, {"hidden", "640"}, {"batch", "24"}};
  const ir::Graph g = *frontend::buildBuiltinModel(model);
  std::vector<ir::OpId> ops;
  for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  auto compiled = schedule::compileShard(spec_, g, ops, {}, {});
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  const isa::Program program = compiled->program;
  auto status = run(program.instructions);
  ASSERT_TRUE(status.ok()) << status.error().format();
  EXPECT_EQ(chip_->stats().cycles, program.predictedCycles);
}

TEST_F(ChipTest, IssueWhileBusy) {
  auto list = chain(0, 50, 10, 0, 32);
  auto again = chain(0, 51, 20, 4, 4);  // MEM slice 0 is still reading
  list.insert(list.end(), again.begin(), again.end());
  auto s = run(list);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kHazard);
  EXPECT_NE(s.error().message.find("issued while the unit is busy until cycle 42"), std::string::npos);
  EXPECT_NE(s.error().message.find("chip 0, unit 0 (MEM 0"), std::string::npos);
}

TEST_F(ChipTest, ReadOffTheTimeOfFlight) {
  auto list = chain(0, 50, 10, 0, 8);
  list[1].issue += 1;  // one cycle late: the value has moved on
  list[2].issue += 1;
  auto s = run(list);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("time of flight"), std::string::npos);
}

TEST_F(ChipTest, TwoValuesOnOneStream) {
  auto a = chain(0, 50, 10, 0, 8);
  auto b = chain(1, 51, 11, 0, 8);  // same stream, entering one slice east one cycle later: collides
  a.insert(a.end(), b.begin(), b.end());
  auto s = run(a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("two values on stream 0 east"), std::string::npos) << s.error().format();
}

TEST_F(ChipTest, SramAddressOutOfRange) {
  auto list = chain(0, 50, 10, 0, 8);
  list[2].address = spec_.addressesPerSlice - 4;  // 8 writes run past the end
  auto s = run(list);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("out of range"), std::string::npos);
}

TEST_F(ChipTest, ComputeBeforeWeightsInstalled) {
  Instruction compute = inst(spec_.firstUnit(UnitKind::kMxm) + 1, 5, Opcode::kMxmCompute);
  auto s = run({compute});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("before its weights are installed"), std::string::npos);
}

class C2cTest : public ChipTest {
 protected:
  std::vector<PortBinding> ports() const {
    std::vector<PortBinding> p(spec_.c2cPorts);
    p[0] = {7, 1, 3, true, 225, 16.25};
    return p;
  }
  std::vector<Instruction> sendChain(Cycle start, int repeat, int interval) const {
    Instruction read = inst(mem(40), start, Opcode::kMemRead, repeat);
    read.address = 0;
    read.stride = 1;
    read.interval = interval;
    read.dst = {0, Direction::kWest};
    Instruction send = inst(c2c(0), start + spec_.memReadCycles + std::abs(slice(mem(40)) - slice(c2c(0))),
                            Opcode::kC2cSend, repeat);
    send.interval = interval;
    send.port = 0;
    send.src = read.dst;
    return {read, send};
  }
};

TEST_F(C2cTest, SendEmitsABurstWithArrivalTimes) {
  const Chip* chip = nullptr;
  auto list = sendChain(0, 4, 20);
  ASSERT_TRUE(run(list, ports(), &chip).ok());
  auto bursts = chip_->takeOutgoing();
  ASSERT_EQ(bursts.size(), 1u);
  EXPECT_EQ(bursts[0].dstChip, 1);
  EXPECT_EQ(bursts[0].dstPort, 3);
  EXPECT_EQ(bursts[0].firstArrive, list[1].issue + spec_.c2cSendCycles + 225);
  EXPECT_EQ(bursts[0].bytes, 4 * 320);
}

TEST_F(C2cTest, SendOnBusyLink) {
  auto list = sendChain(0, 4, 20);
  Instruction again = list[1];
  again.unit = c2c(0);
  again.issue = list[1].issue + 61;  // the last vector is still on the wire
  again.src = {};
  again.repeat = 1;
  list.push_back(again);
  auto s = run(list, ports());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("C2C send on link 7, busy until cycle"), std::string::npos);
}

TEST_F(C2cTest, SendFasterThanTheLink) {
  auto s = run(sendChain(0, 4, 10), ports());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("faster than link 7"), std::string::npos);
}

TEST_F(C2cTest, ReceiveBeforeArrival) {
  Instruction receive = inst(c2c(0), 300, Opcode::kC2cReceive, 4);
  receive.port = 0;
  receive.interval = 20;
  auto program = std::make_shared<isa::Program>();
  program->instructions = {receive};
  chip_ = makeTspChip(1, spec_, program, ports(), SimOptions{});
  C2CBurst burst;
  burst.dstPort = 0;
  burst.firstArrive = 301;  // one cycle too late
  burst.vectors = 4;
  burst.interval = 20;
  chip_->deliver(burst);
  auto s = chip_->advanceTo(kNever);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("reads a vector before it arrives (cycle 301)"), std::string::npos);
}

TEST_F(C2cTest, ReceiveWithNothingInFlight) {
  Instruction receive = inst(c2c(0), 300, Opcode::kC2cReceive, 4);
  receive.port = 0;
  receive.interval = 20;
  auto s = run({receive}, ports());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("before the data has arrived"), std::string::npos);
}

TEST_F(C2cTest, UnconnectedPort) {
  Instruction receive = inst(c2c(5), 300, Opcode::kC2cReceive, 1);
  receive.port = 5;
  auto s = run({receive}, ports());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("port 5 is not connected"), std::string::npos);
}

}  // namespace
}  // namespace tsp::sim
