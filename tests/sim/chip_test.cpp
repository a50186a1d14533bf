// Tests of the cycle-accurate chip: predicted equals simulated, one test per hazard, and chips sharing a program's checks.
#include "sim/chip.h"
#include "compile/ir/graph.h"
#include "sim/functional.h"
#include "sim/kokkos_environment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "topology/yaml_reader.h"

#include "compile/frontend/builtin_models.h"
#include "compile/schedule/shard_compiler.h"

namespace tsp::sim {
namespace {

using isa::Direction;
using isa::Instruction;
using isa::Opcode;
using topology::UnitKind;

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

  Status runNamed(const std::vector<std::pair<std::vector<Instruction>, isa::OpOrigin>>& parts);
  void expectReadBeforeWrite(const std::function<Status(Cycle)>& runAt, Cycle legal, Cycle early,
                             const std::string& what, const std::string& writer);

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

  // A functional run: the program holds `tensors`, the resident ones with `values`.
  Status runFunctional(std::vector<Instruction> list, std::vector<isa::TensorPlacement> tensors,
                       std::map<std::string, TensorValues> values, ElementType element,
                       std::vector<PortBinding> ports = {}, int chipId = 0) {
    auto program = std::make_shared<isa::Program>();
    program->instructions = std::move(list);
    program->tensors = std::move(tensors);
    isa::canonicalize(*program);
    if (ports.empty()) ports.resize(spec_.c2cPorts);
    SimOptions options;
    options.functional.enabled = true;
    options.functional.element = element;
    options.functional.resident = std::make_shared<std::map<std::string, TensorValues>>(std::move(values));
    chip_ = makeTspChip(chipId, spec_, program, ports, options);
    return chip_->advanceTo(kNever);
  }

  static TensorValues valuesOf(std::int64_t cols, std::vector<double> data) {
    return {cols, ir::makeData(data), {}};
  }

  isa::TensorPlacement placement(const std::string& name, std::int64_t rows, std::vector<int> memUnits,
                                 bool resident, std::int32_t address = 0, ir::DType dtype = ir::DType::kF16) const {
    isa::TensorPlacement t;
    t.name = name;
    t.dtype = static_cast<std::int32_t>(dtype);
    t.rows = rows;
    t.tiles = static_cast<std::int32_t>(memUnits.size());
    t.memUnit = std::move(memUnits);
    t.address.assign(t.memUnit.size(), address);
    t.resident = resident;
    return t;
  }

  // A 3-layer MLP (hidden 640, batch 24) compiled for one chip.
  Expected<isa::Program> compiledMlp() const {
    frontend::ModelSpec model;
    model.builtin = "mlp";
    model.params = {{"layers", "3"}, {"hidden", "640"}, {"batch", "24"}};
    const ir::Graph g = *frontend::buildBuiltinModel(model);
    std::vector<ir::OpId> ops;
    for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
    auto compiled = schedule::compileShard(spec_, g, ops, {}, {});
    if (!compiled) return compiled.error();
    return std::move(compiled->program);
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
  auto compiled = compiledMlp();
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  const isa::Program program = *compiled;
  auto status = run(program.instructions);
  ASSERT_TRUE(status.ok()) << status.error().format();
  EXPECT_EQ(chip_->stats().cycles, program.predictedCycles);
}

TEST_F(ChipTest, EventsRunInCycleOrderWhateverTheListOrder) {
  auto list = chain(0, 50, 10, 0, 32);
  auto other = chain(1, 51, 100, 4, 8);
  list.insert(list.end(), other.begin(), other.end());
  std::reverse(list.begin(), list.end());  // not canonical: the simulator orders the events itself
  auto program = std::make_shared<isa::Program>();
  program->instructions = list;
  chip_ = makeTspChip(0, spec_, program, std::vector<PortBinding>(spec_.c2cPorts), SimOptions{});
  EXPECT_EQ(chip_->nextEventCycle(), 10);
  auto s = chip_->advanceTo(kNever);
  ASSERT_TRUE(s.ok()) << s.error().format();
  const Cycle cycles = chip_->stats().cycles;
  ASSERT_TRUE(run(list).ok());  // the same instructions in canonical order
  EXPECT_EQ(chip_->stats().cycles, cycles);
  EXPECT_EQ(chip_->stats().instructions, 6);
}

TEST_F(ChipTest, IssueWhileBusy) {
  auto list = chain(0, 50, 10, 0, 32);
  auto again = chain(0, 51, 20, 4, 4);  // MEM slice 0 is still reading
  list.insert(list.end(), again.begin(), again.end());
  auto s = run(list);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kHazard);
  EXPECT_NE(s.error().message.find("issued while the MEM read port is busy until cycle 42 (instruction #0)"),
            std::string::npos)
      << s.error().format();
  EXPECT_NE(s.error().message.find("chip 0, unit 0 (MEM 0"), std::string::npos);
}

TEST_F(ChipTest, TwoIssuesInOneCycleOnOneQueue) {
  auto list = chain(0, 50, 10, 0, 1);
  Instruction nop = inst(vxm(0), list[1].issue, Opcode::kNop);
  list.push_back(nop);
  auto s = run(list);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("issued while the unit is busy until cycle"), std::string::npos)
      << s.error().format();
}

// A MEM slice reads and writes in one cycle when the two accesses hit different banks.
TEST_F(ChipTest, ReadAndWriteShareASliceOnDifferentBanks) {
  auto list = chain(0, 50, 10, 0, 32);
  Instruction read = inst(mem(50), list[2].issue + 1, Opcode::kMemRead, 8);
  read.address = 0;  // bank (m % 2) while the write is at address 1 + m: bank (1 + m) % 2
  read.stride = 1;
  read.dst = {9, Direction::kEast};
  list.push_back(read);
  auto s = run(list);
  ASSERT_TRUE(s.ok()) << s.error().format();
  EXPECT_EQ(chip_->stats().sramReads, 40);
  EXPECT_EQ(chip_->stats().sramWrites, 32);
  EXPECT_EQ(chip_->stats().bankConflicts, 0);
}

TEST_F(ChipTest, BankPortConflict) {
  auto list = chain(0, 50, 10, 0, 32);
  Instruction read = inst(mem(50), list[2].issue + 1, Opcode::kMemRead, 8);
  read.address = 1;  // the same bank as the write in the same cycle
  read.stride = 1;
  read.dst = {9, Direction::kEast};
  list.push_back(read);
  auto s = run(list);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("hazard at cycle " + std::to_string(read.issue) + ","), std::string::npos);
  EXPECT_NE(s.error().message.find("bank port conflict on MEM slice 50 bank 1"), std::string::npos)
      << s.error().format();
}

TEST_F(ChipTest, BankFieldMustMatchTheChipsMapping) {
  auto list = chain(0, 50, 10, 0, 4);
  list[0].bank = 1 - spec_.bankOf(list[0].address);
  auto s = run(list);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("disagrees with the chip's bank mapping"), std::string::npos);
}

TEST_F(ChipTest, StreamThatDoesNotExist) {
  auto list = chain(0, 50, 10, 0, 4);
  list[0].dst.id = static_cast<std::int16_t>(spec_.streamsPerDirection);
  auto s = run(list);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("stream 32 does not exist"), std::string::npos);
}

TEST_F(ChipTest, MalformedInstructions) {
  Instruction bad = inst(vxm(0), 5, Opcode::kMemRead);
  auto s = run({bad});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("opcode cannot run on this kind of unit"), std::string::npos);
  bad = inst(vxm(0), 5, Opcode::kVxmUnary, 0);
  s = run({bad});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("repeat and interval must be >= 1"), std::string::npos);
  bad = inst(static_cast<int>(units_.size()), 5, Opcode::kNop);
  s = run({bad});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("names unit 144, which does not exist"), std::string::npos);
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

// A read of its origin's input (OpOrigin::input) before the chip's first write of that tensor is a
// hazard naming the read, its address and the write that makes the tensor.
TEST_F(ChipTest, ReadOfATensorBeforeItIsWritten) {
  const auto runOrdered = [&](Cycle consumerStart, const SimOptions& options) {
    auto producer = chain(0, 50, 10, 0, 8);     // writes 'x' on slice 50
    auto consumer = chain(50, 60, consumerStart, 2, 8);  // reads 'x' there, writes 'y' on slice 60
    auto program = std::make_shared<isa::Program>();
    program->instructions = producer;
    program->instructions.insert(program->instructions.end(), consumer.begin(), consumer.end());
    program->origins = {{"p", "Relu", 0, "x", "", ""}, {"c", "Relu", 0, "y", "x", "p"}};
    program->originOf = {0, 0, 0, 1, 1, 1};
    isa::canonicalize(*program);
    std::vector<PortBinding> ports(spec_.c2cPorts);
    chip_ = makeTspChip(0, spec_, program, ports, options);
    return chip_->advanceTo(kNever);
  };
  const Cycle written = chain(0, 50, 10, 0, 8)[2].issue;
  auto ok = runOrdered(written + 8, SimOptions{});
  EXPECT_TRUE(ok.ok()) << ok.error().message;
  auto s = runOrdered(1, SimOptions{});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kHazard);
  EXPECT_NE(s.error().message.find("hazard at cycle 1, chip 0, unit " + std::to_string(mem(50))), std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("(MemRead): reads SRAM address 0 on MEM slice 50 for 'x' (Relu 'c'), which the chip "
                                   "first writes later: instruction #"),
            std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("(MemWrite, Relu 'p', MEM slice 50 address 0) at cycle " + std::to_string(written)),
            std::string::npos)
      << s.error().message;
  // Counted with faults on, and the run goes on.
  SimOptions faults;
  faults.faults.linkJitterCycles = 1;
  ASSERT_TRUE(runOrdered(1, faults).ok());
  EXPECT_EQ(chip_->stats().hazards[static_cast<int>(HazardKind::kReadBeforeWrite)], 1);
}

// Chains of instructions (ChipTest::chain), each named by its origin, run as one chip's program.
Status ChipTest::runNamed(const std::vector<std::pair<std::vector<Instruction>, isa::OpOrigin>>& parts) {
  auto program = std::make_shared<isa::Program>();
  for (const auto& [list, origin] : parts) {
    program->instructions.insert(program->instructions.end(), list.begin(), list.end());
    program->originOf.insert(program->originOf.end(), list.size(), static_cast<std::int32_t>(program->origins.size()));
    program->origins.push_back(origin);
  }
  isa::canonicalize(*program);
  std::vector<PortBinding> ports(spec_.c2cPorts);
  chip_ = makeTspChip(0, spec_, program, ports, SimOptions{});
  return chip_->advanceTo(kNever);
}

// runAt(cycle) runs a program whose read on MEM slice 50 issues at that cycle: legal at `legal`, a
// read_before_write at `early` naming the read (`what`) and the write that makes its tensor (`writer`).
void ChipTest::expectReadBeforeWrite(const std::function<Status(Cycle)>& runAt, Cycle legal, Cycle early,
                                     const std::string& what, const std::string& writer) {
  auto ok = runAt(legal);
  EXPECT_TRUE(ok.ok()) << ok.error().message;
  auto s = runAt(early);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kHazard);
  EXPECT_NE(s.error().message.find(fmt::format("hazard at cycle {}, chip 0, unit {}", early, mem(50))),
            std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find(what + ", which the chip first writes later: instruction #"), std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find(writer), std::string::npos) << s.error().message;
}

// A chip may hold two tensors of one name: the one an op of it makes and a neighbour's copy a
// receive brings (a ring of chips passing their outputs on). A read of the made one (named by its
// producer, OpOrigin::inputProducer) before the op writes it is a hazard, though the received copy
// was written first.
TEST_F(ChipTest, ReadOfAMadeTensorBeforeItsOpWritesItThoughACopyWasReceived) {
  const auto runWithReadAt = [&](Cycle read) {
    return runNamed({{chain(0, 50, 10, 0, 8), {"x", "Receive", -1, "x", "", ""}},        // the neighbour's 'x'
                     {chain(50, 60, read, 2, 8), {"s", "Relu", 0, "y", "x", "p"}},      // reads p's 'x'
                     {chain(20, 70, 200, 4, 8), {"p", "Relu", 0, "x", "", ""}}});      // p makes 'x'
  };
  const Cycle written = chain(20, 70, 200, 4, 8)[2].issue;
  expectReadBeforeWrite(runWithReadAt, written + 8, 100, "for 'x' (Relu 's')",
                        "(MemWrite, Relu 'p', MEM slice 70 address 0) at cycle " + std::to_string(written));
}

// Each microbatch of a training step has its own copy of a tensor (OpOrigin::instance): a read of
// microbatch 1's copy before it is written is a hazard, though microbatch 0's was written first.
TEST_F(ChipTest, ReadOfALaterMicrobatchsCopyBeforeItIsWritten) {
  const auto runWithReadAt = [&](Cycle read) {
    return runNamed({{chain(0, 50, 10, 0, 8), {"p", "Relu", 0, "x", "", "", 0}},
                     {chain(50, 60, 100, 2, 8), {"c", "Relu", 0, "y", "x", "p", 0}},
                     {chain(50, 70, read, 4, 8), {"c", "Relu", 0, "y", "x", "p", 1}},
                     {chain(20, 50, 300, 6, 8), {"p", "Relu", 0, "x", "", "", 1}}});
  };
  const Cycle written = chain(20, 50, 300, 6, 8)[2].issue;
  expectReadBeforeWrite(runWithReadAt, written + 8, 200, "for 'x' of instance 1 (Relu 'c')",
                        "(MemWrite, Relu 'p', MEM slice 50 address 0) at cycle " + std::to_string(written));
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
  /// Chip 1 in functional mode running `instructions` with the given port bindings.
  std::unique_ptr<Chip> functionalChip(std::vector<Instruction> instructions, const std::vector<PortBinding>& bound) const {
    auto program = std::make_shared<isa::Program>();
    program->instructions = std::move(instructions);
    SimOptions options;
    options.functional.enabled = true;
    return makeTspChip(1, spec_, program, bound, options);
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
  /// Runs `list` with `extra` (a send of `list`'s port) issued `gap` cycles after list[1].
  Status runWithSendAfter(std::vector<Instruction> list, Instruction extra, Cycle gap) {
    extra.issue = list[1].issue + gap;
    list.push_back(extra);
    return run(list, ports());
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

// The link carries vectors at its exact rate, 320 / 16.25 = 19.69 cycles each, whatever the send's
// interval: 4 vectors handed over one a cycle take ceil(4 x 19.69) = 79 cycles, not 4 x 20, and
// vector 3 arrives ceil(3 x 19.69) = 60 cycles after vector 0.
TEST_F(C2cTest, LinkCarriesVectorsAtItsExactRate) {
  auto list = sendChain(0, 4, 1);
  Instruction again = list[1];
  again.src = {};
  again.repeat = 1;
  for (Cycle gap : {Cycle{78}, Cycle{79}}) {
    auto s = runWithSendAfter(list, again, gap);
    EXPECT_EQ(s.ok(), gap == 79) << gap;
    if (gap == 78) {
      EXPECT_NE(s.error().message.find("C2C send on link 7, busy until cycle"), std::string::npos);
    }
  }
  ASSERT_TRUE(run(list, ports()).ok());
  auto bursts = chip_->takeOutgoing();
  ASSERT_EQ(bursts.size(), 1u);
  EXPECT_NEAR(bursts[0].spacing, 320 / 16.25, 1e-12);
  EXPECT_EQ(bursts[0].arrival(3) - bursts[0].arrival(0), 60);
  // A receive taking the 4 vectors one a cycle reads vector 3 at issue + 3: not before its arrival.
  for (Cycle lateBy : {Cycle{0}, Cycle{-1}}) {
    Instruction receive = inst(c2c(0), bursts[0].arrival(3) - 3 + lateBy, Opcode::kC2cReceive, 4);
    receive.port = 0;
    auto program = std::make_shared<isa::Program>();
    program->instructions = {receive};
    chip_ = makeTspChip(1, spec_, program, ports(), SimOptions{});
    C2CBurst burst = bursts[0];
    burst.dstPort = 0;  // the receiving chip's port on this link
    chip_->deliver(burst);
    auto s = chip_->advanceTo(kNever);
    EXPECT_EQ(s.ok(), lateBy == 0) << lateBy << (s.ok() ? "" : s.error().message);
  }
}

// A send whose stride says it continues a stream of 3 vectors, entering the link the cycle the
// previous burst leaves it, goes on with that stream: 3 vectors then 3 more take ceil(6 x 19.69) =
// 119 cycles, not 2 x ceil(3 x 19.69) = 120, and vector 2 of the second burst arrives ceil(5 x 19.69)
// - ceil(3 x 19.69) = 39 cycles after its first, not 40.
TEST_F(C2cTest, ASendContinuesTheLinksStreamWhenItsStrideSaysSo) {
  auto list = sendChain(0, 3, 1);
  Instruction again = list[1];
  again.src = {};
  again.issue = list[1].issue + 60;  // the cycle the first burst leaves the link
  again.stride = 3;
  list.push_back(again);
  Instruction third = again;
  third.repeat = 1;
  third.stride = 0;
  for (Cycle gap : {Cycle{118}, Cycle{119}}) EXPECT_EQ(runWithSendAfter(list, third, gap).ok(), gap == 119) << gap;
  ASSERT_TRUE(run(list, ports()).ok());
  auto bursts = chip_->takeOutgoing();
  ASSERT_EQ(bursts.size(), 2u);
  EXPECT_EQ(bursts[0].streamFrom, 0);
  EXPECT_EQ(bursts[1].streamFrom, 3);
  EXPECT_EQ(bursts[1].firstArrive - bursts[0].firstArrive, 60);
  EXPECT_EQ(bursts[1].arrival(2) - bursts[1].arrival(0), 39);
}

// A send with stride 0 entering the link the cycle the previous burst leaves it starts a stream of
// its own (the first segment of a tile after another tile): vector 2 arrives ceil(2 x 19.69) = 40
// cycles after its first.
TEST_F(C2cTest, ABackToBackSendWithStrideZeroStartsItsOwnStream) {
  auto list = sendChain(0, 3, 1);
  Instruction again = list[1];
  again.src = {};
  again.issue = list[1].issue + 60;
  list.push_back(again);
  ASSERT_TRUE(run(list, ports()).ok());
  const auto bursts = chip_->takeOutgoing();
  ASSERT_EQ(bursts.size(), 2u);
  EXPECT_EQ(bursts[1].streamFrom, 0);
  EXPECT_EQ(bursts[1].arrival(2) - bursts[1].arrival(0), 40);
}

// A send saying it continues a stream must enter the link the cycle the stream's last burst leaves
// it, with the stream at its count: a cycle late, or after 3 vectors when it says 2, it is a hazard.
TEST_F(C2cTest, ASendContinuingAStreamItDoesNotAbutIsAHazard) {
  auto list = sendChain(0, 3, 1);
  Instruction again = list[1];
  again.src = {};
  again.stride = 3;
  for (const auto& [gap, stride] : {std::pair<Cycle, int>{61, 3}, {60, 2}}) {
    again.stride = stride;
    const Status s = runWithSendAfter(list, again, gap);
    ASSERT_FALSE(s.ok()) << gap;
    EXPECT_NE(s.error().message.find(fmt::format("C2C send on link 7 continues a stream of {} vectors", stride)),
              std::string::npos)
        << s.error().message;
  }
  again.stride = -1;
  const Status s = runWithSendAfter(list, again, 60);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("C2C send continuing a stream of -1 vectors"), std::string::npos) << s.error().message;
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

// A port hands bursts over in arrival order: a receive placed for tensor b that finds a burst of
// tensor a in front of b's takes a's vectors, which is a hazard (its data would be wrong).
TEST_F(C2cTest, ReceiveTakingAnotherTensorsBurst) {
  Instruction receive = inst(c2c(0), 300, Opcode::kC2cReceive, 4);
  receive.port = 0;
  const auto chipTaking = [&](const std::string& named, std::uint64_t first, const SimOptions& options) {
    auto program = std::make_shared<isa::Program>();
    program->instructions = {receive};
    if (!named.empty()) {
      program->origins = {{"b_op", "Receive", 0, named, "", ""}};
      program->originOf = {0};
    }
    auto chip = makeTspChip(1, spec_, program, ports(), options);
    for (const auto& [arrive, tensor] : {std::pair{Cycle{100}, first}, std::pair{Cycle{200}, burstTensor("b")}}) {
      C2CBurst burst;
      burst.dstPort = 0;
      burst.firstArrive = arrive;
      burst.vectors = 4;
      burst.tensor = tensor;
      burst.srcChip = 3;
      burst.sendCycle = arrive - 10;
      chip->deliver(burst);
    }
    return chip;
  };
  chip_ = chipTaking("b", burstTensor("a"), SimOptions{});
  auto s = chip_->advanceTo(kNever);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("C2C receive on port 0 takes vectors of another tensor than 'b' (the burst chip 3 "
                                   "sent at cycle 90)"),
            std::string::npos)
      << s.error().message;
  // Counted once per instruction with faults on.
  SimOptions faults;
  faults.faults.linkJitterCycles = 1;
  chip_ = chipTaking("b", burstTensor("a"), faults);
  ASSERT_TRUE(chip_->advanceTo(kNever).ok());
  EXPECT_EQ(chip_->stats().hazards[static_cast<int>(HazardKind::kReceiveMismatch)], 1);
  // Its own tensor, a burst of no known tensor, or a receive of no known tensor: no hazard.
  for (const auto& [named, first] : {std::pair{std::string("b"), burstTensor("b")}, std::pair{std::string("b"), std::uint64_t{0}},
                                     std::pair{std::string(), burstTensor("a")}}) {
    chip_ = chipTaking(named, first, SimOptions{});
    auto ok = chip_->advanceTo(kNever);
    EXPECT_TRUE(ok.ok()) << ok.error().message;
  }
}

// A forward checks the bursts it takes against its origin's tensor and passes that tensor on; one
// without an origin passes on the tensor of the burst it took.
TEST_F(C2cTest, ForwardPassesTheBurstsTensorOn) {
  auto bound = ports();
  bound[1] = {8, 2, 5, true, 225, 16.25};
  Instruction forward = inst(c2c(0), 300, Opcode::kC2cForward, 4);
  forward.port = 1;
  for (const std::string named : {"a", ""}) {
    auto program = std::make_shared<isa::Program>();
    program->instructions = {forward};
    if (!named.empty()) {
      program->origins = {{"a_op", "Collective", 0, named, "", ""}};
      program->originOf = {0};
    }
    chip_ = makeTspChip(1, spec_, program, bound, SimOptions{});
    C2CBurst burst;
    burst.dstPort = 0;
    burst.firstArrive = 250;
    burst.vectors = 4;
    burst.tensor = burstTensor("a");
    chip_->deliver(burst);
    ASSERT_TRUE(chip_->advanceTo(kNever).ok());
    auto out = chip_->takeOutgoing();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].tensor, burstTensor("a"));
  }
}

TEST_F(C2cTest, ReceiveWithNothingInFlight) {
  Instruction receive = inst(c2c(0), 300, Opcode::kC2cReceive, 4);
  receive.port = 0;
  receive.interval = 20;
  auto s = run({receive}, ports());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("before the data has arrived"), std::string::npos);
}

// A burst carries the sender's vectors; the receiver stores them.
TEST_F(C2cTest, FunctionalBurstCarriesTheVectors) {
  std::vector<double> x(8 * 160);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i % 97) / 8.0 - 6.0;
  auto list = sendChain(0, 8, 20);
  auto s = runFunctional(list, {placement("x", 8, {mem(40)}, true)}, {{"x", valuesOf(160, x)}}, ElementType::kFp16, ports());
  ASSERT_TRUE(s.ok()) << s.error().format();
  auto bursts = chip_->takeOutgoing();
  ASSERT_EQ(bursts.size(), 1u);
  ASSERT_TRUE(bursts[0].payload);
  EXPECT_EQ(bursts[0].payload->size(), 8u * 320);

  Instruction receive = inst(c2c(0), bursts[0].firstArrive, Opcode::kC2cReceive, 8);
  receive.port = 0;
  receive.interval = 20;
  receive.dst = {1, Direction::kEast};
  Instruction write = inst(mem(7), receive.issue + spec_.c2cReceiveCycles + slice(mem(7)) - slice(c2c(0)),
                           Opcode::kMemWrite, 8);
  write.interval = 20;
  write.address = 100;
  write.stride = 1;
  write.src = receive.dst;
  auto peer = functionalChip({receive, write}, ports());
  bursts[0].dstPort = 0;
  peer->deliver(bursts[0]);
  auto r = peer->advanceTo(kNever);
  ASSERT_TRUE(r.ok()) << r.error().format();
  EXPECT_EQ(peer->readTensor(placement("x", 8, {mem(7)}, false, 100), 160), x);
}

// A transit chip's forward passes the vectors' bytes on to its next link unchanged.
TEST_F(C2cTest, FunctionalForwardPassesTheVectorsOn) {
  auto bound = ports();
  bound[1] = {8, 2, 5, true, 225, 16.25};
  Instruction forward = inst(c2c(0), 300, Opcode::kC2cForward, 4);
  forward.port = 1;
  forward.interval = 20;
  chip_ = functionalChip({forward}, bound);
  std::vector<std::uint8_t> bytes(4 * 320);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 7 + 3);
  C2CBurst burst;
  burst.dstPort = 0;
  burst.firstArrive = 250;
  burst.vectors = 4;
  burst.interval = 20;
  burst.payload = std::make_shared<const std::vector<std::uint8_t>>(bytes);
  chip_->deliver(burst);
  auto s = chip_->advanceTo(kNever);
  ASSERT_TRUE(s.ok()) << s.error().format();
  auto out = chip_->takeOutgoing();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dstChip, 2);
  ASSERT_TRUE(out[0].payload);
  EXPECT_EQ(*out[0].payload, bytes);
}

// A burst from a chip that computed no values cannot feed a functional receive.
TEST_F(C2cTest, FunctionalReceiveOfABurstWithoutValues) {
  Instruction receive = inst(c2c(0), 300, Opcode::kC2cReceive, 4);
  receive.port = 0;
  receive.interval = 20;
  chip_ = functionalChip({receive}, ports());
  C2CBurst burst;
  burst.dstPort = 0;
  burst.firstArrive = 250;
  burst.vectors = 4;
  burst.interval = 20;
  chip_->deliver(burst);
  auto s = chip_->advanceTo(kNever);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kModel);
  EXPECT_NE(s.error().message.find("a C2C burst on port 0 arrived without its values"), std::string::npos)
      << s.error().message;
}

TEST_F(C2cTest, UnconnectedPort) {
  Instruction receive = inst(c2c(5), 300, Opcode::kC2cReceive, 1);
  receive.port = 5;
  auto s = run({receive}, ports());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("port 5 is not connected"), std::string::npos);
}

// ---- Functional mode: the instructions compute on values.

TEST_F(ChipTest, FunctionalChainAppliesTheAluToTheStoredValues) {
  const std::vector<double> x = {-1.5, 2.0, 0.25, 3.0, -0.0625, 1.0 / 3, 7.5, -8.0};  // 4 rows x 2
  const auto tensors = {placement("x", 4, {mem(0)}, true), placement("y", 4, {mem(50)}, false)};
  auto s = runFunctional(chain(0, 50, 10, 0, 4), tensors, {{"x", valuesOf(2, x)}}, ElementType::kFp16);
  ASSERT_TRUE(s.ok()) << s.error().format();
  const auto y = chip_->readTensor(placement("y", 4, {mem(50)}, false), 2);
  ASSERT_EQ(y.size(), 8u);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(y[i], std::max(0.0, static_cast<double>(halfToFloat(floatToHalf(static_cast<float>(x[i])))))) << i;
  EXPECT_EQ(chip_->stats().cycles, isa::completion(spec_, chain(0, 50, 10, 0, 4)[2]) + spec_.rippleCycles);
}

// The process's last placement of a resident tensor drops its values: SRAM alone holds them then.
TEST_F(ChipTest, FunctionalValuesAreDroppedAfterTheirLastPlacement) {
  const std::vector<double> x = {-1.5, 2.0, 0.25, 3.0, -0.0625, 1.0 / 3, 7.5, -8.0};  // 4 rows x 2
  auto program = std::make_shared<isa::Program>();
  program->instructions = chain(0, 50, 10, 0, 4);
  program->tensors = {placement("x", 4, {mem(0)}, true), placement("y", 4, {mem(50)}, false)};
  isa::canonicalize(*program);
  auto resident = std::make_shared<std::map<std::string, TensorValues>>();
  (*resident)["x"] = valuesOf(2, x);
  (*resident)["x"].placements = 2;  // two chips of the process hold it
  SimOptions options;
  options.functional.enabled = true;
  options.functional.resident = resident;
  std::vector<std::unique_ptr<Chip>> chips;
  for (int id = 0; id < 2; ++id) {
    chips.push_back(makeTspChip(id, spec_, program, std::vector<PortBinding>(spec_.c2cPorts), options));
    EXPECT_EQ(resident->at("x").data == nullptr, id == 1) << "after chip " << id;
  }
  for (auto& chip : chips) {
    ASSERT_TRUE(chip->advanceTo(kNever).ok());
    const auto held = chip->readTensor(placement("x", 4, {mem(0)}, true), 2);
    ASSERT_EQ(held.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(held[i], static_cast<double>(halfToFloat(floatToHalf(static_cast<float>(x[i]))))) << i;
  }
}

// x (2 x 640, INT8, tiles on MEM 0 and 1) times W (640 x 3 on MEM 2) on MXM plane 0: two K tiles
// accumulate in INT32, the second emits the rows wrapped to INT8, which MEM 3 stores.
TEST_F(ChipTest, FunctionalMatmulAccumulatesKTilesInInt32) {
  const int plane = spec_.firstUnit(UnitKind::kMxm), compute = plane + 1;
  std::vector<double> x(2 * 640), w(640 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(static_cast<int>(i % 11) - 5);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<double>(static_cast<int>(i % 7) - 3);
  std::vector<Instruction> list;
  Cycle next = 0;
  for (int k = 0; k < 2; ++k) {
    Instruction install = inst(plane, next, Opcode::kMxmInstall);
    install.address = 320 * k;
    install.weightUnit = mem(2);
    install.weightRows = 320;
    Instruction read = inst(mem(k), isa::completion(spec_, install), Opcode::kMemRead, 2);
    read.address = 0;
    read.stride = 1;
    read.dst = {static_cast<std::int16_t>(k), Direction::kWest};
    Instruction mxm = inst(compute, read.issue + spec_.memReadCycles + slice(mem(k)) - slice(compute), Opcode::kMxmCompute, 2);
    mxm.src = read.dst;
    list.insert(list.end(), {install, read});
    if (k == 1) {
      mxm.dst = {4, Direction::kEast};
      Instruction write = inst(mem(3), mxm.issue + spec_.mxmCycles + slice(mem(3)) - slice(compute), Opcode::kMemWrite, 2);
      write.address = 0;
      write.stride = 1;
      write.src = mxm.dst;
      list.push_back(write);
    }
    list.push_back(mxm);
    next = mxm.issue + 2;  // the next install follows this compute (two weight buffers)
  }
  const auto tensors = {placement("x", 2, {mem(0), mem(1)}, true, 0, ir::DType::kI8),
                        placement("w", 640, {mem(2)}, true, 0, ir::DType::kI8), placement("y", 2, {mem(3)}, false, 0, ir::DType::kI8)};
  auto s = runFunctional(list, tensors, {{"x", valuesOf(640, x)}, {"w", valuesOf(3, w)}}, ElementType::kInt8);
  ASSERT_TRUE(s.ok()) << s.error().format();
  const auto y = chip_->readTensor(placement("y", 2, {mem(3)}, false, 0, ir::DType::kI8), 3);
  for (int r = 0; r < 2; ++r)
    for (int n = 0; n < 3; ++n) {
      std::int32_t sum = 0;
      for (int k = 0; k < 640; ++k)
        sum += static_cast<std::int32_t>(x[r * 640 + k]) * static_cast<std::int32_t>(w[k * 3 + n]);
      EXPECT_EQ(y[r * 3 + n], static_cast<std::int8_t>(static_cast<std::uint8_t>(sum & 0xff))) << r << "," << n;
    }
}

TEST_F(ChipTest, FunctionalModeRefusesTimingOnlyInstructions) {
  auto list = chain(0, 50, 10, 0, 4);
  list[1].timingOnly = true;
  const auto tensors = {placement("x", 4, {mem(0)}, true)};
  auto s = runFunctional(list, tensors, {{"x", valuesOf(1, std::vector<double>(4, 1.0))}}, ElementType::kFp16);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kModel);
  EXPECT_NE(s.error().message.find("functional mode cannot compute instruction #1 (VxmUnary relu) on chip 0"),
            std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("on 'x'"), std::string::npos) << s.error().message;
}

TEST_F(ChipTest, FunctionalModeRefusesAnInstallThatDoesNotNameItsWeights) {
  Instruction install = inst(spec_.firstUnit(UnitKind::kMxm), 0, Opcode::kMxmInstall);
  install.address = 0;
  auto s = runFunctional({install}, {}, {}, ElementType::kInt8);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("the install does not say which MEM slice holds its weights"), std::string::npos);
}

TEST_F(ChipTest, FunctionalModeNeedsValuesForEveryResidentTensor) {
  auto s = runFunctional(chain(0, 50, 10, 0, 4), {placement("x", 4, {mem(0)}, true)}, {}, ElementType::kFp16);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kInternal);
  EXPECT_NE(s.error().message.find("has no values for its resident tensor 'x'"), std::string::npos);
}

TEST_F(ChipTest, FunctionalModeRefusesAWriteWithoutASource) {
  Instruction write = inst(mem(3), 5, Opcode::kMemWrite, 2);
  write.address = 0;
  write.stride = 1;
  auto s = runFunctional({write}, {}, {}, ElementType::kFp16);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("(MemWrite) on chip 0, unit 3 (MEM 3): a write with no source stream"),
            std::string::npos)
      << s.error().message;
}

// Two computes of one accumulation must cover the same rows.
TEST_F(ChipTest, FunctionalModeRefusesAnAccumulatorOfOtherRows) {
  const int plane = spec_.firstUnit(UnitKind::kMxm);
  Instruction install = inst(plane, 0, Opcode::kMxmInstall);
  install.address = 0;
  install.weightUnit = mem(2);
  install.weightRows = 1;
  // The second compute follows a second install, so that both add to the plane's first accumulator.
  Instruction again = install;
  again.issue = 110;
  std::vector<Instruction> list = {install, again};
  for (int k = 0; k < 2; ++k) {
    Instruction read = inst(mem(k), 100 + 50 * k, Opcode::kMemRead, 4 + k);
    read.address = 0;
    read.stride = 1;
    read.dst = {static_cast<std::int16_t>(k), Direction::kWest};
    Instruction mxm = inst(plane + 1, read.issue + spec_.memReadCycles + slice(mem(k)) - slice(plane + 1),
                           Opcode::kMxmCompute, 4 + k);
    mxm.src = read.dst;
    list.insert(list.end(), {read, mxm});
  }
  auto s = runFunctional(list, {}, {}, ElementType::kInt8);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("an MXM compute of 5 rows meets an accumulator of 4 rows on plane 0"),
            std::string::npos)
      << s.error().message;
}

TEST_F(ChipTest, TimingModeReadsNoValues) {
  ASSERT_TRUE(run(chain(0, 50, 10, 0, 4)).ok());
  EXPECT_TRUE(chip_->readTensor(placement("y", 4, {mem(50)}, false), 2).empty());
}

// ---- Fault injection: hazards are counted instead of ending the run.

class FaultTest : public ChipTest {
 protected:
  // Two weight tiles on MXM plane 0: install, then 16 rows from MEM slice 2 through the plane, then
  // the next install once the plane's compute queue is done, and its 16 rows.
  isa::Program matmulProgram() const {
    const int installUnit = spec_.firstUnit(UnitKind::kMxm), computeUnit = installUnit + 1;
    const Cycle flight = spec_.memReadCycles + std::abs(slice(computeUnit) - slice(mem(2)));
    isa::Program program;
    Cycle installAt = 0;
    for (int tile = 0; tile < 2; ++tile) {
      Instruction install = inst(installUnit, installAt, Opcode::kMxmInstall);
      install.address = 320 * tile;
      Instruction read = inst(mem(2), installAt + spec_.mxmWeightInstallCycles, Opcode::kMemRead, 16);
      read.address = 16 * tile;
      read.stride = 1;
      read.dst = {3, Direction::kWest};
      Instruction compute = inst(computeUnit, read.issue + flight, Opcode::kMxmCompute, 16);
      compute.src = read.dst;
      program.instructions.insert(program.instructions.end(), {install, read, compute});
      installAt = compute.issue + 16;
    }
    isa::canonicalize(program);
    return program;
  }
  Status runWith(const isa::Program& program, const SimOptions& options) {
    chip_ = makeTspChip(0, spec_, std::make_shared<isa::Program>(program), std::vector<PortBinding>(spec_.c2cPorts),
                        options);
    return chip_->advanceTo(kNever);
  }
};

TEST_F(FaultTest, OffByDefault) {
  EXPECT_FALSE(SimOptions{}.faults.enabled());
  auto list = chain(0, 50, 10, 0, 8);
  list[1].issue += 1;
  list[2].issue += 1;
  EXPECT_FALSE(run(list).ok());  // the same late read with faults off ends the run
}

TEST_F(FaultTest, StalledUnitIsCountedAndTheRunGoesOn) {
  const isa::Program program = matmulProgram();
  const Instruction& first = *std::find_if(program.instructions.begin(), program.instructions.end(),
                                           [](const Instruction& i) { return i.op == Opcode::kMemRead; });
  SimOptions options;
  options.faults.stallUnit = first.unit;
  options.faults.stallCycle = first.issue;
  options.faults.stallCycles = 3;
  auto s = runWith(program, options);
  ASSERT_TRUE(s.ok()) << s.error().format();
  const auto& st = chip_->stats();
  EXPECT_EQ(st.instructions, static_cast<std::int64_t>(program.instructions.size()));
  EXPECT_EQ(st.unitStall[first.unit], 3);
  EXPECT_GT(st.hazards[static_cast<int>(HazardKind::kTimeOfFlight)], 0);
  EXPECT_GT(st.hazardCount(), 0);
  EXPECT_NE(st.firstHazard.find("time of flight"), std::string::npos) << st.firstHazard;
}

TEST_F(FaultTest, StalledInstallLeavesComputesWithoutTheirWeights) {
  const isa::Program program = matmulProgram();
  const Instruction& install = *std::find_if(program.instructions.begin(), program.instructions.end(),
                                             [](const Instruction& i) { return i.op == Opcode::kMxmInstall; });
  SimOptions options;
  options.faults.stallUnit = install.unit;
  options.faults.stallCycles = 100;
  ASSERT_TRUE(runWith(program, options).ok());
  const auto& st = chip_->stats();
  EXPECT_GT(st.hazards[static_cast<int>(HazardKind::kWeightsMissing)], 0);
  EXPECT_NE(st.firstHazard.find("before its weights are installed"), std::string::npos) << st.firstHazard;
  options.faults.stallUnit = install.unit + 1;  // now the first compute runs late, after the next install
  options.faults.stallCycle = 0;
  ASSERT_TRUE(runWith(program, options).ok());
  EXPECT_GT(chip_->stats().hazards[static_cast<int>(HazardKind::kWeightsMissing)], 0);
}

TEST_F(FaultTest, StallOnAnotherChipChangesNothing) {
  const isa::Program program = matmulProgram();
  SimOptions options;
  options.faults.stallChip = 5;
  options.faults.stallUnit = program.instructions.front().unit;
  options.faults.stallCycles = 3;
  ASSERT_TRUE(runWith(program, SimOptions{}).ok());
  const Cycle clean = chip_->stats().cycles;
  ASSERT_TRUE(runWith(program, options).ok());
  EXPECT_EQ(chip_->stats().hazardCount(), 0);
  EXPECT_EQ(chip_->stats().cycles, clean);
}

TEST_F(FaultTest, StalledUnitCanCauseABankConflict) {
  // A long read on MEM slice 50 overlaps a chain's write there, always on the other bank; a
  // one-cycle stall of the slice's queue after the read started moves the write onto the read's bank.
  auto list = chain(0, 50, 10, 0, 4);
  list[2].address = 1;
  Instruction read = inst(mem(50), list[2].issue - 10, Opcode::kMemRead, 40);
  read.address = 0;
  read.stride = 1;
  read.dst = {9, Direction::kEast};
  list.push_back(read);
  auto program = std::make_shared<isa::Program>();
  program->instructions = list;
  isa::canonicalize(*program);
  ASSERT_TRUE(makeTspChip(0, spec_, program, std::vector<PortBinding>(spec_.c2cPorts), SimOptions{})
                  ->advanceTo(kNever)
                  .ok());
  SimOptions options;
  options.faults.stallUnit = mem(50);
  options.faults.stallCycle = read.issue + 1;
  options.faults.stallCycles = 1;
  chip_ = makeTspChip(0, spec_, program, std::vector<PortBinding>(spec_.c2cPorts), options);
  ASSERT_TRUE(chip_->advanceTo(kNever).ok());
  const auto& st = chip_->stats();
  EXPECT_GT(st.hazards[static_cast<int>(HazardKind::kBankConflict)], 0);
  EXPECT_GT(st.bankConflicts, 0);
  EXPECT_DOUBLE_EQ(st.bankConflictRate(),
                   static_cast<double>(st.bankConflicts) / static_cast<double>(st.sramReads + st.sramWrites));
}

TEST_F(C2cTest, LinkJitterDelaysArrivalsDeterministically) {
  std::vector<Cycle> arrivals;
  for (std::uint64_t seed : {1u, 1u, 2u, 3u, 4u, 5u, 6u, 7u}) {
    SimOptions options;
    options.faults.linkJitterCycles = 9;
    options.faults.seed = seed;
    auto program = std::make_shared<isa::Program>();
    program->instructions = sendChain(0, 4, 20);
    chip_ = makeTspChip(0, spec_, program, ports(), options);
    ASSERT_TRUE(chip_->advanceTo(kNever).ok());
    auto bursts = chip_->takeOutgoing();
    ASSERT_EQ(bursts.size(), 1u);
    const Cycle onTime = program->instructions[1].issue + spec_.c2cSendCycles + 225;
    EXPECT_GE(bursts[0].firstArrive, onTime);
    EXPECT_LE(bursts[0].firstArrive, onTime + 9);
    arrivals.push_back(bursts[0].firstArrive - onTime);
  }
  EXPECT_EQ(arrivals[0], arrivals[1]);  // the same seed gives the same draw
  EXPECT_TRUE(std::any_of(arrivals.begin(), arrivals.end(), [](Cycle c) { return c > 0; }));
}

TEST_F(C2cTest, LateArrivalIsCountedWithFaultsOn) {
  Instruction receive = inst(c2c(0), 300, Opcode::kC2cReceive, 4);
  receive.port = 0;
  receive.interval = 20;
  auto program = std::make_shared<isa::Program>();
  program->instructions = {receive};
  SimOptions options;
  options.faults.linkJitterCycles = 4;
  chip_ = makeTspChip(1, spec_, program, ports(), options);
  C2CBurst burst;
  burst.dstPort = 0;
  burst.firstArrive = 303;  // as a jittered link would deliver it
  burst.vectors = 4;
  burst.interval = 20;
  chip_->deliver(burst);
  ASSERT_TRUE(chip_->advanceTo(kNever).ok());
  EXPECT_EQ(chip_->stats().hazards[static_cast<int>(HazardKind::kReceiveEarly)], 1);
  EXPECT_EQ(chip_->stats().instructions, 1);
}

// ---- Statistics.

TEST_F(ChipTest, UtilisationSramAndStreamStatistics) {
  const auto c = chain(0, 50, 10, 0, 32);
  ASSERT_TRUE(run(c).ok());
  const auto& st = chip_->stats();
  EXPECT_EQ(st.sramReads, 32);
  EXPECT_EQ(st.sramWrites, 32);
  // Each value travels from the MEM slice to the VXM and from the VXM to the other MEM slice.
  const std::int64_t hops = std::abs(slice(vxm(0)) - slice(mem(0))) + std::abs(slice(mem(50)) - slice(vxm(0)));
  EXPECT_EQ(st.streamHops, 32 * hops);
  EXPECT_DOUBLE_EQ(unitUtilization(spec_, st, vxm(0)), 32.0 / static_cast<double>(st.cycles));
  EXPECT_DOUBLE_EQ(unitUtilization(spec_, st, mem(0)), 32.0 / (2.0 * static_cast<double>(st.cycles)));
  EXPECT_EQ(st.hazardCount(), 0);
  EXPECT_EQ(st.bankConflictRate(), 0.0);
  for (Cycle stall : st.unitStall) EXPECT_EQ(stall, 0);
}

TEST_F(ChipTest, EnergyFollowsThePerOpFigures) {
  spec_.energy.memReadPj = 1000;
  spec_.energy.memWritePj = 2000;
  spec_.energy.vxmOpPj = 500;
  spec_.energy.streamHopPj = 10;
  spec_.energy.staticWatts = 90;
  ASSERT_TRUE(run(chain(0, 50, 10, 0, 32)).ok());
  const auto& st = chip_->stats();
  EXPECT_NEAR(st.energy.memJ, 32 * 3000e-12, 1e-15);
  EXPECT_NEAR(st.energy.vxmJ, 32 * 500e-12, 1e-15);
  EXPECT_NEAR(st.energy.streamJ, static_cast<double>(st.streamHops) * 10e-12, 1e-15);
  EXPECT_NEAR(st.energy.staticJ, 90.0 * static_cast<double>(st.cycles) / 900e6, 1e-15);
  EXPECT_EQ(st.energy.mxmJ, 0.0);
  EXPECT_NEAR(st.energy.totalJ(), st.energy.memJ + st.energy.vxmJ + st.energy.streamJ + st.energy.staticJ, 1e-18);
}

TEST_F(C2cTest, C2cBytesAndEnergy) {
  ASSERT_TRUE(run(sendChain(0, 4, 20), ports()).ok());
  EXPECT_EQ(chip_->stats().bytesSent, 4 * 320);
  EXPECT_NEAR(chip_->stats().energy.c2cJ, 4 * 320 * spec_.energy.c2cPjPerByte * 1e-12, 1e-18);
}

// Every instruction a chip reports, in order.
class Recorder : public ChipObserver {
 public:
  void instructionExecuted(int chip, std::int64_t index, Cycle start, Cycle end) override {
    calls.emplace_back(chip, index, start, end);
  }
  std::vector<std::tuple<int, std::int64_t, Cycle, Cycle>> calls;
};

void expectSameStats(const ChipStats& a, const ChipStats& b) {
  EXPECT_EQ(a.cycles, b.cycles);
  EXPECT_EQ(a.instructions, b.instructions);
  EXPECT_EQ(a.unitBusy, b.unitBusy);
  for (int k = 0; k < topology::kUnitKindCount; ++k) EXPECT_EQ(a.kindBusy[k], b.kindBusy[k]) << k;
  EXPECT_EQ(a.bytesSent, b.bytesSent);
  EXPECT_EQ(a.bytesReceived, b.bytesReceived);
  EXPECT_EQ(a.sramPeakBytes, b.sramPeakBytes);
  ASSERT_EQ(a.links.size(), b.links.size());
  for (size_t i = 0; i < a.links.size(); ++i) {
    EXPECT_EQ(a.links[i].link, b.links[i].link);
    EXPECT_EQ(a.links[i].bytes, b.links[i].bytes);
    EXPECT_EQ(a.links[i].busyCycles, b.links[i].busyCycles);
  }
  EXPECT_EQ(a.utilization, b.utilization);
  EXPECT_EQ(a.unitStall, b.unitStall);
  EXPECT_EQ(a.sramReads, b.sramReads);
  EXPECT_EQ(a.sramWrites, b.sramWrites);
  EXPECT_EQ(a.bankConflicts, b.bankConflicts);
  EXPECT_EQ(a.streamHops, b.streamHops);
  EXPECT_EQ(a.hazards, b.hazards);
  EXPECT_EQ(a.firstHazard, b.firstHazard);
  EXPECT_EQ(a.energy.totalJ(), b.energy.totalJ());
  EXPECT_EQ(a.energy.c2cJ, b.energy.c2cJ);
}

// Chips that share a program's checks (SimOptions::shareChecks): a follower gives what a chip
// running every check gives, instruction by instruction, mid-run and at the end, and when its own
// bursts, or the program, make it fail.
class SharedChecksTest : public ChipTest {
 protected:
  Instruction inst(int unit, Cycle issue, Opcode op, int repeat = 1, int interval = 1) const {
    Instruction i = ChipTest::inst(unit, issue, op, repeat);
    i.interval = interval;
    return i;
  }

  std::vector<PortBinding> ports() const {
    std::vector<PortBinding> p(spec_.c2cPorts);
    p[0] = {7, 1, 0, true, 225, 16.25};
    return p;
  }

  // A MEM read sent on port 0, then a receive on port 0 whose vectors a MEM write stores.
  std::shared_ptr<const isa::Program> c2cProgram(Cycle receiveAt) const {
    Instruction read = inst(mem(40), 0, Opcode::kMemRead, 4, 20);
    read.address = 0;
    read.stride = 1;
    read.dst = {0, Direction::kWest};
    Instruction send = inst(c2c(0), spec_.memReadCycles + std::abs(slice(mem(40)) - slice(c2c(0))), Opcode::kC2cSend, 4, 20);
    send.port = 0;
    send.src = read.dst;
    Instruction receive = inst(c2c(0), receiveAt, Opcode::kC2cReceive, 4, 20);
    receive.port = 0;
    receive.dst = {1, slice(mem(60)) >= slice(c2c(0)) ? Direction::kEast : Direction::kWest};
    Instruction write = inst(mem(60), receiveAt + isa::resultLatency(spec_, receive) + std::abs(slice(mem(60)) - slice(c2c(0))),
                             Opcode::kMemWrite, 4, 20);
    write.address = 8;
    write.stride = 1;
    write.src = receive.dst;
    auto program = std::make_shared<isa::Program>();
    program->instructions = {read, send, receive, write};
    isa::canonicalize(*program);
    return program;
  }

  static C2CBurst burst(Cycle firstArrive) {
    C2CBurst b;
    b.srcChip = 1;
    b.link = 7;
    b.dstPort = 0;
    b.firstArrive = firstArrive;
    b.vectors = 4;
    b.interval = 20;
    b.bytes = 4 * 320;
    return b;
  }

  std::unique_ptr<Chip> make(int id, const std::shared_ptr<const isa::Program>& program, bool share,
                             Recorder* recorder = nullptr, Cycle binCycles = 7) const {
    SimOptions options;
    options.shareChecks = share;
    options.binCycles = binCycles;
    options.observer = recorder;
    return makeTspChip(id, spec_, program, ports(), options);
  }
};

// A compiled MLP: a follower, whether its statistics are read mid-run or only at the end, gives the
// figures and the instruction reports of a chip that runs every check.
TEST_F(SharedChecksTest, FollowersGiveWhatEveryCheckGives) {
  auto compiled = compiledMlp();
  ASSERT_TRUE(compiled.ok()) << compiled.error().format();
  const auto program = std::make_shared<const isa::Program>(*compiled);
  const Cycle bin = std::max<Cycle>(1, program->predictedCycles / 64);
  Recorder alone, leader, polled, quiet;
  auto a = make(0, program, false, &alone, bin);
  auto l = make(0, program, true, &leader, bin);
  auto p = make(0, program, true, &polled, bin);
  auto q = make(0, program, true, &quiet, bin);
  // With no observer, followers pass over whole stretches of events at once.
  auto silentPolled = make(0, program, true, nullptr, bin);
  auto silent = make(0, program, true, nullptr, bin);
  const std::vector<Chip*> chips = {a.get(), l.get(), p.get(), q.get(), silentPolled.get(), silent.get()};
  for (Cycle end = 0; end < program->predictedCycles + 100; end += 250) {
    for (Chip* chip : chips) ASSERT_TRUE(chip->advanceTo(end).ok());
    expectSameStats(p->stats(), a->stats());
    expectSameStats(silentPolled->stats(), a->stats());
    EXPECT_EQ(q->instructionsExecuted(), a->stats().instructions);
    EXPECT_EQ(silent->instructionsExecuted(), a->stats().instructions);
    EXPECT_EQ(silent->nextEventCycle(), a->nextEventCycle());
  }
  for (Chip* chip : chips) ASSERT_TRUE(chip->advanceTo(kNever).ok());
  EXPECT_EQ(a->stats().cycles, program->predictedCycles);
  for (Chip* chip : chips) expectSameStats(chip->stats(), a->stats());
  EXPECT_EQ(leader.calls, alone.calls);
  EXPECT_EQ(polled.calls, alone.calls);
  EXPECT_EQ(quiet.calls, alone.calls);
  // A chip made after the leader finished follows from the start.
  Recorder later;
  auto f = make(0, program, true, &later, bin);
  ASSERT_TRUE(f->advanceTo(kNever).ok());
  expectSameStats(f->stats(), a->stats());
  EXPECT_EQ(later.calls, alone.calls);
  // A follower with no observer after the leader finished, window by window beside a full chip.
  auto laterSilent = make(0, program, true, nullptr, bin);
  auto full = make(0, program, false, nullptr, bin);
  for (Cycle end = 0; end < program->predictedCycles + 100; end += 97) {
    ASSERT_TRUE(laterSilent->advanceTo(end).ok());
    ASSERT_TRUE(full->advanceTo(end).ok());
    EXPECT_EQ(laterSilent->nextEventCycle(), full->nextEventCycle());
    EXPECT_EQ(laterSilent->instructionsExecuted(), full->stats().instructions);
  }
  expectSameStats(laterSilent->stats(), a->stats());
}

// The C2C part is each chip's own: bursts sent on its links, receives checked against what it got.
TEST_F(SharedChecksTest, FollowersSendAndReceiveOnTheirOwnLinks) {
  const auto program = c2cProgram(600);
  auto a = make(2, program, false);
  auto l = make(3, program, true);
  auto f = make(2, program, true);
  for (Chip* chip : {a.get(), l.get(), f.get()}) {
    chip->deliver(burst(600));
    ASSERT_TRUE(chip->advanceTo(kNever).ok());
  }
  expectSameStats(f->stats(), a->stats());
  const auto sentAlone = a->takeOutgoing(), sentFollower = f->takeOutgoing();
  ASSERT_EQ(sentFollower.size(), 1u);
  ASSERT_EQ(sentAlone.size(), 1u);
  EXPECT_EQ(sentFollower[0].srcChip, 2);
  EXPECT_EQ(sentFollower[0].firstArrive, sentAlone[0].firstArrive);
  EXPECT_EQ(l->takeOutgoing()[0].srcChip, 3);
}

// A follower whose burst comes late fails as a chip running every check does, with the statistics
// that chip has at its failure, though its leader's burst came on time.
TEST_F(SharedChecksTest, AFollowersLateBurstFailsItAlone) {
  const auto program = c2cProgram(600);
  auto l = make(1, program, true);
  l->deliver(burst(600));
  auto a = make(1, program, false);
  auto f = make(1, program, true);
  for (Chip* chip : {a.get(), f.get()}) chip->deliver(burst(601));
  ASSERT_TRUE(l->advanceTo(kNever).ok());
  const Status alone = a->advanceTo(kNever), follower = f->advanceTo(kNever);
  ASSERT_FALSE(alone.ok());
  ASSERT_FALSE(follower.ok());
  EXPECT_EQ(follower.error().message, alone.error().message);
  EXPECT_EQ(f->nextEventCycle(), a->nextEventCycle());
  expectSameStats(f->stats(), a->stats());
}

// A follower whose send port is not connected fails as a chip running every check does.
TEST_F(SharedChecksTest, AFollowersUnconnectedPortFailsItAlone) {
  const auto program = c2cProgram(600);
  auto l = make(1, program, true);
  l->deliver(burst(600));
  ASSERT_TRUE(l->advanceTo(kNever).ok());
  SimOptions alone, shared;
  alone.shareChecks = false;
  alone.binCycles = shared.binCycles = 7;
  const std::vector<PortBinding> unconnected(spec_.c2cPorts);
  auto a = makeTspChip(1, spec_, program, unconnected, alone);
  auto f = makeTspChip(1, spec_, program, unconnected, shared);
  const Status s = a->advanceTo(kNever), t = f->advanceTo(kNever);
  ASSERT_FALSE(s.ok());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(s.error().message.find("C2C port 0 is not connected"), std::string::npos);
  EXPECT_EQ(t.error().message, s.error().message);
  expectSameStats(f->stats(), a->stats());
}

// A hazard of the program itself: the leader fails, and so does a follower, at the same instruction,
// naming its own chip.
TEST_F(SharedChecksTest, AProgramHazardFailsLeaderAndFollowers) {
  auto broken = std::make_shared<isa::Program>(*c2cProgram(600));
  broken->instructions.back().issue += 1;  // the write reads its stream a cycle late: time of flight
  const std::shared_ptr<const isa::Program> program = broken;
  auto a = make(4, program, false);
  auto l = make(5, program, true);
  auto f = make(4, program, true);
  Status results[3];
  int i = 0;
  for (Chip* chip : {a.get(), l.get(), f.get()}) {
    chip->deliver(burst(600));
    results[i++] = chip->advanceTo(kNever);
  }
  for (const Status& s : results) ASSERT_FALSE(s.ok());
  EXPECT_NE(results[0].error().message.find("time of flight"), std::string::npos);
  EXPECT_NE(results[1].error().message.find("chip 5"), std::string::npos);
  EXPECT_EQ(results[2].error().message, results[0].error().message);
  expectSameStats(f->stats(), a->stats());
}

TEST(HazardKinds, EveryKindHasAName) {
  std::set<std::string> names;
  for (int k = 0; k < kHazardKindCount; ++k) names.insert(hazardKindName(static_cast<HazardKind>(k)));
  EXPECT_EQ(names.size(), static_cast<size_t>(kHazardKindCount));
  EXPECT_EQ(names.count("?"), 0u);
}

TEST(ChipEnergy, YamlKeysAndTheHash) {
  const topology::YamlReader reader("chip.yaml");
  auto spec = topology::loadChipSpec(reader, YAML::Load("energy: {mem_read_pj: 1000, static_watts: 75.5}"));
  ASSERT_TRUE(spec.ok()) << spec.error().format();
  EXPECT_EQ(spec->energy.memReadPj, 1000);
  EXPECT_EQ(spec->energy.staticWatts, 75.5);
  EXPECT_EQ(spec->energy.memWritePj, topology::ChipSpec{}.energy.memWritePj);
  // Energy does not change timing: programs compiled for the preset stay valid.
  EXPECT_EQ(spec->hash(), topology::ChipSpec{}.hash());
  auto bad = topology::loadChipSpec(reader, YAML::Load("energy: {mem_reed_pj: 1}"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().format().find("unknown key 'mem_reed_pj' in 'cluster.chip.energy'"), std::string::npos)
      << bad.error().format();
  bad = topology::loadChipSpec(reader, YAML::Load("energy: {vxm_op_pj: -1}"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().format().find("'vxm_op_pj' is -1, out of range"), std::string::npos) << bad.error().format();
}

}  // namespace
}  // namespace tsp::sim
