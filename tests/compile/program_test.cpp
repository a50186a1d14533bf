// Tests of the Program format: latencies from the chip spec and the versioned on-disk form.
#include "compile/isa/program.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tsp::isa {
namespace {

Program sample() {
  Program p;
  p.chipSpecHash = topology::ChipSpec{}.hash();
  Instruction read;
  read.unit = 3;
  read.issue = 10;
  read.op = Opcode::kMemRead;
  read.dst = {5, Direction::kWest};
  read.address = 100;
  read.bank = 1;
  read.stride = 1;
  read.repeat = 64;
  p.instructions.push_back(read);
  p.predictedCycles = 99;
  TensorPlacement t;
  t.name = "x";
  t.dtype = 3;
  t.rows = 64;
  t.tiles = 2;
  t.memUnit = {3, 50};
  t.address = {100, 0};
  t.resident = true;
  p.tensors.push_back(t);
  return p;
}

TEST(Program, CompletionComesFromTheChipSpec) {
  topology::ChipSpec chip;
  const Instruction read = sample().instructions[0];
  EXPECT_EQ(completion(chip, read), 10 + 63 + chip.memReadCycles);
  EXPECT_EQ(unitFreeAt(chip, read), 10 + 64);
  Instruction install;
  install.op = Opcode::kMxmInstall;
  EXPECT_EQ(unitFreeAt(chip, install), chip.mxmWeightInstallCycles);
}

TEST(Program, RoundTripsThroughTheOnDiskForm) {
  const Program p = sample();
  auto back = deserialize(serialize(p), topology::ChipSpec{}, "p.json");
  ASSERT_TRUE(back.ok()) << back.error().format();
  EXPECT_EQ(*back, p);
  EXPECT_EQ(back->contentHash(), p.contentHash());
}

// The program reads back equal from both on-disk forms.
void expectBothFormsRoundTrip(const Program& p) {
  auto json = deserialize(serialize(p), topology::ChipSpec{}, "p.json");
  ASSERT_TRUE(json.ok()) << json.error().format();
  EXPECT_EQ(*json, p);
  auto binary = deserializeBinary(serializeBinary(p), topology::ChipSpec{}, "p.tspp");
  ASSERT_TRUE(binary.ok()) << binary.error().format();
  EXPECT_EQ(*binary, p);
}

// What functional mode needs (an install's weight slice and rows, an SXM copy, a timing-only
// stand-in) survives both on-disk forms; a program without these fields keeps its old form.
TEST(Program, FunctionalFieldsRoundTrip) {
  Program p = sample();
  const std::string plain = serialize(p);
  Instruction install;
  install.unit = 104;
  install.op = Opcode::kMxmInstall;
  install.address = 320;
  install.weightUnit = 7;
  install.weightRows = 97;
  Instruction shift;
  shift.unit = 112;
  shift.op = Opcode::kSxmShift;
  shift.sxm = SxmFunc::kCopy;
  Instruction standIn;
  standIn.unit = 88;
  standIn.op = Opcode::kVxmBinary;
  standIn.func = VxmFunc::kMul;
  standIn.timingOnly = true;
  p.instructions.insert(p.instructions.end(), {install, shift, standIn});
  expectBothFormsRoundTrip(p);
  EXPECT_EQ(plain.find("[100,1,1,0,64,1]"), plain.find("[100,1,1,0,64,1"));  // 16 fields, none appended
  EXPECT_NE(toText(p, topology::ChipSpec{}).find("weights=q7x97"), std::string::npos);
}

// A VXM instruction (unit 88) with a functional operand.
Instruction vxmWithOperand(Opcode op, VxmFunc func, std::int32_t operand) {
  Instruction i;
  i.unit = 88;
  i.op = op;
  i.func = func;
  i.operand = operand;
  return i;
}

// A VXM instruction's operand (splatted lanes, an immediate, a named accumulator) and the
// accumulator table survive both on-disk forms; a bad accumulator index is refused.
TEST(Program, FunctionalOperandsAndAccumulatorsRoundTrip) {
  Program p = sample();
  p.instructions.insert(p.instructions.end(), {vxmWithOperand(Opcode::kVxmUnary, VxmFunc::kAccumulate, 1),
                                               vxmWithOperand(Opcode::kVxmBinary, VxmFunc::kScaleAdd, 0)});
  p.operands = {{-1, 0, 0, 0.25f, false, true}, {0, 2, 130, 0.0f, false, false}};
  isa::Accumulator moments;
  moments.kind = isa::Accumulator::Kind::kMoments;
  moments.dims = {4, 3, 200};
  moments.reduced = {0, 0, 1};
  moments.epsilon = 1e-5;
  p.accumulators = {moments};
  p.operands[0].immediate2 = 0.5f;
  p.operands[0].transposed = true;
  p.operands[0].laneShift = 40;
  p.operands[0].laneCount = 100;
  p.operands[0].window = 0;
  isa::WindowRead tap;
  tap.h = tap.w = 8;
  tap.ho = tap.wo = 4;
  tap.sh = tap.sw = 2;
  tap.pt = tap.pl = 1;
  tap.ky = 2;
  tap.first = -1;
  tap.stride = 2;
  tap.fill = -65504.0f;
  p.windows = {tap};
  isa::WeightFold fold;
  fold.tensor = "conv.w";
  fold.source = "conv.w";
  fold.gamma = "g";
  fold.beta = "b";
  fold.mean = "m";
  fold.var = "v";
  p.folds = {fold};
  isa::ElementMap gather;  // embedding rows selected by ids [2, 8] from a [100, 64] table
  gather.sources = {"table"};
  gather.sourceDims = {100, 64};
  gather.sourceCols = {64};
  gather.outDims = {2, 8, 64};
  gather.outCols = 64;
  gather.from = {0, 2};
  gather.starts = {0, 0};
  gather.steps = {1, 1};
  gather.indices = "ids";
  gather.indexDims = {2, 8};
  gather.indexAxis = 0;
  p.maps = {gather};
  p.operands[1].map = 0;
  auto json = deserialize(serialize(p), topology::ChipSpec{}, "p.json");
  ASSERT_TRUE(json.ok()) << json.error().format();
  EXPECT_EQ(*json, p);
  const std::string bytes = serializeBinary(p);
  auto binary = deserializeBinary(bytes, topology::ChipSpec{}, "p.tspp");
  ASSERT_TRUE(binary.ok()) << binary.error().format();
  EXPECT_EQ(*binary, p);
  EXPECT_NE(p.contentHash(), sample().contentHash());
  EXPECT_NE(toText(p, topology::ChipSpec{}).find("VxmUnary.accumulate operand=1"), std::string::npos);
  p.operands[1].accumulator = 5;  // no such accumulator
  auto bad = deserializeBinary(serializeBinary(p), topology::ChipSpec{}, "p.tspp");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad functional section"), std::string::npos);
}

TEST(Program, SecondOperandWindowRoundTripsAndLeavesOtherProgramsAlone) {
  // An ALU step folding two window taps carries a window for each operand (window, window2).
  Program p = sample();
  p.instructions.push_back(vxmWithOperand(Opcode::kVxmBinary, VxmFunc::kMax, 0));
  isa::WindowRead tap;
  tap.ky = 1;
  isa::WindowRead next = tap;
  next.kx = 1;
  p.windows = {tap, next};
  p.operands.resize(1);
  p.operands[0].window = 0;
  // Without window2 the program's text (and so its hash) and bytes are those of its older form.
  const std::string text = serialize(p);
  const std::string bytes = serializeBinary(p);
  EXPECT_EQ(nlohmann::json::parse(text).at("operands").at(0).size(), 12u);  // up to the permute map
  p.operands[0].window2 = 1;
  EXPECT_NE(serialize(p), text);
  EXPECT_GT(serializeBinary(p).size(), bytes.size());
  expectBothFormsRoundTrip(p);
  p.operands[0].window2 = 2;  // no such window
  auto bad = deserializeBinary(serializeBinary(p), topology::ChipSpec{}, "p.tspp");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad functional section"), std::string::npos);
}

TEST(Program, ElementTypesAndRefusalsRoundTrip) {
  // A mixed-type VXM op names its operands' element types; the ops timed without values are named
  // for functional mode. Both forms carry them, alone or after a second-operand window.
  Program p = sample();
  p.instructions.push_back(vxmWithOperand(Opcode::kVxmBinary, VxmFunc::kEqual, 0));
  p.instructions.push_back(vxmWithOperand(Opcode::kVxmBinary, VxmFunc::kMaskClear, 1));  // the last function code
  p.operands.resize(2);
  p.operands[0].types = isa::packElementTypes(4, 4, 6);  // int32, int32 -> bool
  EXPECT_EQ(isa::elementTypeOf(p.operands[0].types, 0), 4);
  EXPECT_EQ(isa::elementTypeOf(p.operands[0].types, 2), 6);
  EXPECT_EQ(isa::elementTypeOf(p.operands[1].types, 1), -1);  // the run's storage type
  p.refusals = {"Gemm 'g': Gemm's transA is timed, not computed"};
  expectBothFormsRoundTrip(p);
  isa::WindowRead tap;
  p.windows = {tap};
  p.operands[1].window2 = 0;
  expectBothFormsRoundTrip(p);
  p.operands[0].types = 0;
  p.refusals.clear();
  expectBothFormsRoundTrip(p);
}

TEST(Program, OriginsFollowTheirInstructions) {
  // Sorting keeps each instruction's origin; a piece maps its body's ids into its program's names,
  // so that one body placed for two ops names each; writing out the pieces keeps the names.
  Program p = sample();
  Instruction early = p.instructions[0];
  early.issue = 2;
  p.instructions.push_back(early);
  // b reads a's output (made by a, microbatch 1's copy); a reads nothing named, of microbatch 0.
  p.origins = {{"a", "MatMul", 0, "a.out", "", "", 0}, {"b", "Relu", 1, "b.out", "a.out", "a", 1}};
  p.originOf = {0, 1};
  canonicalize(p);
  EXPECT_EQ(p.instructions[0].issue, 2);
  EXPECT_EQ(p.originOf, (std::vector<std::int32_t>{1, 0}));
  expectBothFormsRoundTrip(p);

  Program pieces;
  pieces.chipSpecHash = p.chipSpecHash;
  pieces.origins = p.origins;
  const auto body = makeBody({sample().instructions[0]}, {0});
  pieces.pieces.push_back({body, 0, std::make_shared<const std::vector<std::int32_t>>(std::vector<std::int32_t>{1})});
  pieces.pieces.push_back({body, 100, std::make_shared<const std::vector<std::int32_t>>(std::vector<std::int32_t>{0})});
  const InstructionSequence sequence(pieces);
  EXPECT_EQ(sequence.originOf(0), 1);
  EXPECT_EQ(sequence.originOf(1), 0);
  const Program flat = expanded(pieces);
  EXPECT_EQ(flat.originOf, (std::vector<std::int32_t>{1, 0}));
  expectBothFormsRoundTrip(flat);
}

TEST(Program, EveryInstructionFieldMovesTheInstructionsHash) {
  const Instruction base = sample().instructions[0];
  const std::vector<std::function<void(Instruction&)>> changes = {
      [](Instruction& i) { i.unit = 4; },
      [](Instruction& i) { i.operand = 0; },
      [](Instruction& i) { i.issue = Cycle{1} << 40; },
      [](Instruction& i) { i.op = Opcode::kMemWrite; },
      [](Instruction& i) { i.func = VxmFunc::kAdd; },
      [](Instruction& i) { i.sxm = SxmFunc::kPermute; },
      [](Instruction& i) { i.timingOnly = true; },
      [](Instruction& i) { i.src = {2, Direction::kEast}; },
      [](Instruction& i) { i.src.dir = Direction::kWest; },
      [](Instruction& i) { i.src2 = {2, Direction::kEast}; },
      [](Instruction& i) { i.src2.dir = Direction::kWest; },
      [](Instruction& i) { i.dst.id = 6; },
      [](Instruction& i) { i.dst.dir = Direction::kEast; },
      [](Instruction& i) { i.address = 101; },
      [](Instruction& i) { i.bank = 0; },
      [](Instruction& i) { i.stride = -1; },
      [](Instruction& i) { i.port = 2; },
      [](Instruction& i) { i.repeat = 65; },
      [](Instruction& i) { i.interval = 2; },
      [](Instruction& i) { i.weightUnit = 7; },
      [](Instruction& i) { i.weightRows = 8; },
  };
  std::set<std::uint64_t> hashes = {instructionsHash({base})};
  for (const auto& change : changes) {
    Instruction changed = base;
    change(changed);
    ASSERT_NE(changed, base);
    hashes.insert(instructionsHash({changed}));
  }
  EXPECT_EQ(hashes.size(), changes.size() + 1);
  // Order counts: two instructions swapped are another list.
  Instruction later = base;
  later.issue = 11;
  EXPECT_NE(instructionsHash({base, later}), instructionsHash({later, base}));
}

TEST(Program, RefusesOriginsOutOfRange) {
  Program p = sample();
  p.origins = {{"a", "MatMul", 0, "a.out", "", ""}};
  p.originOf = {1};
  auto json = deserialize(serialize(p), topology::ChipSpec{}, "p.json");
  ASSERT_FALSE(json.ok());
  EXPECT_NE(json.error().message.find("bad origin table"), std::string::npos);
  auto binary = deserializeBinary(serializeBinary(p), topology::ChipSpec{}, "p.tspp");
  ASSERT_FALSE(binary.ok());
  EXPECT_NE(binary.error().message.find("bad origin table"), std::string::npos);
}

TEST(Program, RefusesAProgramForAnotherChip) {
  topology::ChipSpec other;
  other.memReadCycles = 3;
  auto back = deserialize(serialize(sample()), other, "p.json");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("compiled for another chip"), std::string::npos);
}

TEST(Program, RefusesAnotherVersion) {
  Program p = sample();
  p.version = 99;
  auto back = deserialize(serialize(p), topology::ChipSpec{}, "p.json");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("version 99"), std::string::npos);
}

TEST(Program, RoundTripsThroughTheBinaryForm) {
  const Program p = sample();
  const std::string bytes = serializeBinary(p);
  auto back = deserializeBinary(bytes, topology::ChipSpec{}, "p.bin");
  ASSERT_TRUE(back.ok()) << back.error().format();
  EXPECT_EQ(*back, p);
}

TEST(Program, BinaryFormRefusesBadInput) {
  const topology::ChipSpec chip;
  auto notProgram = deserializeBinary("hello world", chip, "p.bin");
  ASSERT_FALSE(notProgram.ok());
  EXPECT_NE(notProgram.error().message.find("not a tsp-sim binary program file"), std::string::npos);

  Program p = sample();
  p.version = 7;
  auto version = deserializeBinary(serializeBinary(p), chip, "p.bin");
  ASSERT_FALSE(version.ok());
  EXPECT_NE(version.error().message.find("version 7 is not supported"), std::string::npos);

  topology::ChipSpec other;
  other.vxmCycles = 9;
  auto otherChip = deserializeBinary(serializeBinary(sample()), other, "p.bin");
  ASSERT_FALSE(otherChip.ok());
  EXPECT_NE(otherChip.error().message.find("compiled for another chip"), std::string::npos);

  std::string bytes = serializeBinary(sample());
  auto truncated = deserializeBinary(bytes.substr(0, 20), chip, "p.bin");
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.error().message.find("truncated header"), std::string::npos);
  auto cut = deserializeBinary(bytes.substr(0, bytes.size() - 3), chip, "p.bin");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.error().message.find("bad tensor table"), std::string::npos);
  auto trailing = deserializeBinary(bytes + "x", chip, "p.bin");
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.error().message.find("trailing bytes"), std::string::npos);
  std::string badOp = bytes;
  badOp[8 + 4 + 8 + 8 + 8 + 8 + 8 + 4 + 8] = 100;  // the first instruction's opcode
  auto op = deserializeBinary(badOp, chip, "p.bin");
  ASSERT_FALSE(op.ok());
  EXPECT_NE(op.error().message.find("bad instruction record"), std::string::npos);
}

TEST(Program, JsonFormRefusesAMalformedProgram) {
  auto back = deserialize(R"({"format":"tsp-program","version":)" + std::to_string(kProgramVersion) + R"(,"chip_spec_hash":")" +
                              fmt::format("{:016x}", topology::ChipSpec{}.hash()) + R"("})",
                          topology::ChipSpec{}, "p.json");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("malformed program"), std::string::npos);
  auto junk = deserialize("[1,2]", topology::ChipSpec{}, "p.json");
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.error().message.find("not a tsp-sim program file"), std::string::npos);
}

TEST(Program, TextFormNamesUnitsAndTensors) {
  const std::string text = toText(sample(), topology::ChipSpec{});
  EXPECT_NE(text.find("MemRead"), std::string::npos);
  EXPECT_NE(text.find("MEM3"), std::string::npos);
  EXPECT_NE(text.find("dst=W5"), std::string::npos);
  EXPECT_NE(text.find("addr=100 bank=1"), std::string::npos);
  EXPECT_NE(text.find("repeat=64,1"), std::string::npos);
  EXPECT_NE(text.find("# tensor x rows 64 tiles 2 resident: 3@100 50@0"), std::string::npos);
}

}  // namespace
}  // namespace tsp::isa
