// Programs made of shared instruction bodies: their hashes, their written-out form, and reading them in place.
#include <algorithm>
#include <array>

#include "compile/isa/program.h"

namespace tsp::isa {

std::uint64_t instructionsHash(const std::vector<Instruction>& instructions) {
  std::uint64_t hash = fnv1a("tsp-instructions");
  for (const Instruction& i : instructions) {
    const std::array<std::int64_t, 22> fields = {
        i.unit,        i.operand,       i.issue,        static_cast<int>(i.op), static_cast<int>(i.func),
        static_cast<int>(i.sxm),        i.timingOnly,   i.src.id,   static_cast<int>(i.src.dir),
        i.src2.id,     static_cast<int>(i.src2.dir),    i.dst.id,   static_cast<int>(i.dst.dir),
        i.address,     i.bank,          i.stride,       i.port,     i.repeat,
        i.interval,    i.weightUnit,    i.weightRows,   0};
    hash = fnv1a(std::string_view(reinterpret_cast<const char*>(fields.data()), sizeof fields), hash);
  }
  return hash;
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
