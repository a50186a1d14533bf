// Tests of the Program format: latencies from the chip spec and the versioned on-disk form.
#include "compile/isa/program.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tsp::isa
