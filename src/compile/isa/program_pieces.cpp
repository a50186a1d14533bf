// Programs made of shared instruction bodies: their hashes, their written-out form, and reading them in place.
#include <algorithm>
#include <array>

#include "compile/isa/program.h"

namespace tsp::isa {

namespace {

// Two 32-bit fields in one word, four 16-bit ones: lossless for the instruction's field widths.
constexpr std::uint64_t pair(std::int64_t low, std::int64_t high) {
  return static_cast<std::uint32_t>(low) | std::uint64_t{static_cast<std::uint32_t>(high)} << 32;
}
constexpr std::uint64_t quad(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return static_cast<std::uint16_t>(a) | std::uint64_t{static_cast<std::uint16_t>(b)} << 16 |
         std::uint64_t{static_cast<std::uint16_t>(c)} << 32 | std::uint64_t{static_cast<std::uint16_t>(d)} << 48;
}

}  // namespace

std::uint64_t instructionsHash(const std::vector<Instruction>& instructions) {
  // A word at a time (a multiply and a shift per word): the collectives of 10,440 chips hash tens of
  // millions of instructions.
  std::uint64_t hash = fnv1a("tsp-instructions");
  const auto mix = [&hash](std::uint64_t word) {
    hash = (hash ^ word) * 0x9E3779B97F4A7C15ULL;
    hash ^= hash >> 29;
  };
  for (const Instruction& i : instructions) {
    mix(pair(i.unit, i.operand));
    mix(static_cast<std::uint64_t>(i.issue));
    mix(quad(static_cast<int>(i.op), static_cast<int>(i.func), static_cast<int>(i.sxm), i.timingOnly));
    mix(quad(i.src.id, static_cast<int>(i.src.dir), i.src2.id, static_cast<int>(i.src2.dir)));
    mix(pair(quad(i.dst.id, static_cast<int>(i.dst.dir), 0, 0), i.address));
    mix(pair(i.bank, i.stride));
    mix(pair(i.port, i.repeat));
    mix(pair(i.interval, i.weightUnit));
    mix(static_cast<std::uint64_t>(i.weightRows));
  }
  return hash ^ (hash >> 31);
}

std::shared_ptr<const InstructionBody> makeBody(std::vector<Instruction> instructions,
                                                std::vector<std::int32_t> originOf) {
  auto body = std::make_shared<InstructionBody>();
  body->hash = instructionsHash(instructions);
  body->instructions = std::move(instructions);
  body->originOf = std::move(originOf);
  return body;
}

std::int64_t Program::instructionCount() const {
  auto count = static_cast<std::int64_t>(instructions.size());
  for (const ProgramPiece& piece : pieces) count += static_cast<std::int64_t>(piece.body->instructions.size());
  return count;
}

Program expanded(const Program& program) {
  if (program.pieces.empty()) return program;
  Program flat = program;
  flat.pieces.clear();
  flat.instructions.reserve(static_cast<size_t>(program.instructionCount()));
  const InstructionSequence sequence(program);
  bool origins = false;
  for (const ProgramPiece& piece : program.pieces) origins |= !piece.body->originOf.empty() && piece.originMap;
  if (origins) flat.originOf.reserve(flat.instructions.capacity());
  for (size_t i = 0; i < sequence.size(); ++i) {
    flat.instructions.push_back(sequence[i]);
    if (origins) flat.originOf.push_back(sequence.originOf(i));
  }
  return flat;
}

InstructionSequence::InstructionSequence(const Program& program) : program_(&program) {
  if (program.pieces.empty()) {
    size_ = program.instructions.size();
    return;
  }
  starts_.reserve(program.pieces.size());
  for (const ProgramPiece& piece : program.pieces) {
    starts_.push_back(size_);
    size_ += piece.body->instructions.size();
  }
}

void InstructionSequence::seek(size_t i) const {
  const auto& pieces = program_->pieces;
  const auto inPiece = [&](size_t p) {
    return i >= starts_[p] && i - starts_[p] < pieces[p].body->instructions.size();
  };
  if (!inPiece(piece_)) {
    if (piece_ + 1 < pieces.size() && inPiece(piece_ + 1))
      ++piece_;
    else
      piece_ = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
    while (!inPiece(piece_)) ++piece_;  // past empty bodies
  }
}

Instruction InstructionSequence::operator[](size_t i) const {
  if (starts_.empty()) return program_->instructions[i];
  seek(i);
  const auto& pieces = program_->pieces;
  Instruction inst = pieces[piece_].body->instructions[i - starts_[piece_]];
  inst.issue += pieces[piece_].offset;
  return inst;
}

std::int32_t InstructionSequence::originOf(size_t i) const {
  if (starts_.empty()) return i < program_->originOf.size() ? program_->originOf[i] : -1;
  seek(i);
  const ProgramPiece& piece = program_->pieces[piece_];
  const size_t k = i - starts_[piece_];
  if (!piece.originMap || k >= piece.body->originOf.size()) return -1;
  const std::int32_t local = piece.body->originOf[k];
  return local >= 0 && static_cast<size_t>(local) < piece.originMap->size() ? (*piece.originMap)[local] : -1;
}

}  // namespace tsp::isa
