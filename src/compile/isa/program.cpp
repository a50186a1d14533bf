// The Program: latencies from the chip spec, canonical order, and the versioned on-disk form.
#include "compile/isa/program.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tsp::isa {

using topology::UnitKind;

const char* opcodeName(Opcode op) {
  switch (op) {
    case Opcode::kNop: return "Nop";
    case Opcode::kMemRead: return "MemRead";
    case Opcode::kMemWrite: return "MemWrite";
    case Opcode::kVxmUnary: return "VxmUnary";
    case Opcode::kVxmBinary: return "VxmBinary";
    case Opcode::kMxmInstall: return "MxmInstall";
    case Opcode::kMxmCompute: return "MxmCompute";
    case Opcode::kSxmShift: return "SxmShift";
    case Opcode::kC2cSend: return "C2cSend";
    case Opcode::kC2cReceive: return "C2cReceive";
    case Opcode::kCount: break;
  }
  return "?";
}

UnitKind unitKindOf(Opcode op) {
  switch (op) {
    case Opcode::kMemRead: case Opcode::kMemWrite: return UnitKind::kMem;
    case Opcode::kVxmUnary: case Opcode::kVxmBinary: return UnitKind::kVxm;
    case Opcode::kMxmInstall: case Opcode::kMxmCompute: return UnitKind::kMxm;
    case Opcode::kSxmShift: return UnitKind::kSxm;
    case Opcode::kC2cSend: case Opcode::kC2cReceive: return UnitKind::kC2c;
    default: return UnitKind::kMem;
  }
}

Cycle resultLatency(const topology::ChipSpec& chip, const Instruction& inst) {
  switch (inst.op) {
    case Opcode::kNop: return 0;
    case Opcode::kMemRead: return chip.memReadCycles;
    case Opcode::kMemWrite: return chip.memWriteCycles;
    case Opcode::kVxmUnary: case Opcode::kVxmBinary: return chip.vxmCycles;
    case Opcode::kMxmInstall: return chip.mxmWeightInstallCycles;
    case Opcode::kMxmCompute: return chip.mxmCycles;
    case Opcode::kSxmShift: return chip.sxmCycles;
    case Opcode::kC2cSend: return chip.c2cSendCycles;
    case Opcode::kC2cReceive: return chip.c2cReceiveCycles;
    case Opcode::kCount: break;
  }
  return 0;
}

Cycle busyPerIssue(const topology::ChipSpec& chip, const Instruction& inst) {
  // A weight install holds its queue until the tile is in the plane; everything else issues once per cycle.
  if (inst.op == Opcode::kMxmInstall) return chip.mxmWeightInstallCycles;
  if (inst.op == Opcode::kNop) return inst.interval;
  return 1;
}

Cycle completion(const topology::ChipSpec& chip, const Instruction& inst) {
  return inst.issue + Cycle{inst.repeat - 1} * inst.interval + resultLatency(chip, inst);
}

Cycle unitFreeAt(const topology::ChipSpec& chip, const Instruction& inst) {
  return inst.issue + Cycle{inst.repeat - 1} * inst.interval + busyPerIssue(chip, inst);
}

void canonicalize(Program& program) {
  std::stable_sort(program.instructions.begin(), program.instructions.end(),
                   [](const Instruction& a, const Instruction& b) {
                     return a.issue != b.issue ? a.issue < b.issue : a.unit < b.unit;
                   });
}

namespace {

nlohmann::json toJson(const Instruction& i) {
  return nlohmann::json::array({i.unit, i.issue, static_cast<int>(i.op), static_cast<int>(i.func), i.src.id,
                                static_cast<int>(i.src.dir), i.src2.id, static_cast<int>(i.src2.dir), i.dst.id,
                                static_cast<int>(i.dst.dir), i.address, i.bank, i.stride, i.port, i.repeat,
                                i.interval});
}

Instruction fromJson(const nlohmann::json& j) {
  Instruction i;
  i.unit = j.at(0);
  i.issue = j.at(1);
  i.op = static_cast<Opcode>(j.at(2).get<int>());
  i.func = static_cast<VxmFunc>(j.at(3).get<int>());
  i.src = {j.at(4).get<std::int16_t>(), static_cast<Direction>(j.at(5).get<int>())};
  i.src2 = {j.at(6).get<std::int16_t>(), static_cast<Direction>(j.at(7).get<int>())};
  i.dst = {j.at(8).get<std::int16_t>(), static_cast<Direction>(j.at(9).get<int>())};
  i.address = j.at(10);
  i.bank = j.at(11);
  i.stride = j.at(12);
  i.port = j.at(13);
  i.repeat = j.at(14);
  i.interval = j.at(15);
  return i;
}

}  // namespace

std::uint64_t Program::contentHash() const { return fnv1a(serialize(*this)); }

std::string serialize(const Program& program) {
  nlohmann::json doc;
  doc["format"] = "tsp-program";
  doc["version"] = program.version;
  doc["chip_spec_hash"] = fmt::format("{:016x}", program.chipSpecHash);
  doc["predicted_cycles"] = program.predictedCycles;
  doc["lower_bound_cycles"] = program.lowerBoundCycles;
  doc["sram_bytes"] = program.sramBytes;
  doc["fields"] = "unit,issue,opcode,func,src,src_dir,src2,src2_dir,dst,dst_dir,address,bank,stride,port,repeat,interval";
  auto& list = doc["instructions"] = nlohmann::json::array();
  for (const auto& inst : program.instructions) list.push_back(toJson(inst));
  return doc.dump();
}

Expected<Program> deserialize(const std::string& text, const topology::ChipSpec& chip, const std::string& file) {
  auto fail = [&](const std::string& message) {
    return makeError(ExitCode::kConfig, fmt::format("{}: {}", file, message));
  };
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || doc.value("format", "") != "tsp-program")
    return fail("not a tsp-sim program file");
  Program program;
  program.version = doc.value("version", 0);
  if (program.version != kProgramVersion)
    return fail(fmt::format("program format version {} is not supported (this build reads {})", program.version,
                            kProgramVersion));
  const std::string hash = doc.value("chip_spec_hash", "");
  if (hash != fmt::format("{:016x}", chip.hash()))
    return fail(fmt::format("program was compiled for another chip (spec hash {} , this chip {:016x})", hash, chip.hash()));
  program.chipSpecHash = chip.hash();
  try {
    program.predictedCycles = doc.at("predicted_cycles");
    program.lowerBoundCycles = doc.at("lower_bound_cycles");
    program.sramBytes = doc.at("sram_bytes");
    for (const auto& j : doc.at("instructions")) program.instructions.push_back(fromJson(j));
  } catch (const nlohmann::json::exception& e) {
    return fail(fmt::format("malformed program: {}", e.what()));
  }
  return program;
}

}  // namespace tsp::isa
