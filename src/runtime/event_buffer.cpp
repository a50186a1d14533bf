// Event rows at positions known before the run, buffered per rank and flushed collectively.
#include "runtime/event_buffer.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace tsp::runtime {

namespace {

// Sorts rows by file position: chips of one rank interleave in time, the file wants chip order.
template <typename Row>
void sortByPosition(EventRows<Row>& rows) {
  std::vector<size_t> order(rows.rows.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rows.positions[a] < rows.positions[b]; });
  EventRows<Row> sorted;
  sorted.positions.reserve(order.size());
  sorted.rows.reserve(order.size());
  for (size_t i : order) {
    sorted.positions.push_back(rows.positions[i]);
    sorted.rows.push_back(rows.rows[i]);
  }
  rows = std::move(sorted);
}

}  // namespace

std::string opcodeNames() {
  std::string names;
  for (int op = 0; op < static_cast<int>(isa::Opcode::kCount); ++op) {
    if (op > 0) names += ",";
    names += isa::opcodeName(static_cast<isa::Opcode>(op));
  }
  return names;
}

EventBuffer::EventBuffer(const topology::ChipSpec& spec,
                         const std::vector<std::shared_ptr<const isa::Program>>& programs, Attribution attribution,
                         EventSelection selection, std::int64_t flushRows)
    : units_(spec.units()), programs_(programs), selection_(std::move(selection)),
      flushRows_(std::max<std::int64_t>(1, flushRows)), attribution_(std::move(attribution)) {
  const size_t chips = programs_.size();
  recorded_.assign(chips, selection_.instructions && selection_.instructionChips.empty() ? 1 : 0);
  if (selection_.instructions)
    for (int chip : selection_.instructionChips) recorded_.at(chip) = 1;
  sends_.assign(chips, 0);
  sendOps_.resize(chips);
  sequences_.reserve(chips);
  c2cOffset_.assign(chips + 1, 0);
  instructionOffset_.assign(chips + 1, 0);
  for (size_t chip = 0; chip < chips; ++chip) {
    const isa::InstructionSequence& list = sequences_.emplace_back(*programs_[chip]);
    std::int64_t sendCount = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const isa::Opcode op = list[i].op;
      if (op != isa::Opcode::kC2cSend && op != isa::Opcode::kC2cForward) continue;
      ++sendCount;
      // A chip's bursts are recorded in its send order, which is program order.
      if (selection_.c2c) sendOps_[chip].push_back(attribution_.opOf(static_cast<int>(chip), list.originOf(i)));
    }
    c2cOffset_[chip + 1] = c2cOffset_[chip] + (selection_.c2c ? sendCount : 0);
    instructionOffset_[chip + 1] =
        instructionOffset_[chip] + (recorded_[chip] ? static_cast<std::int64_t>(list.size()) : 0);
  }
}

Status EventBuffer::check() const {
  const isa::Program* last = nullptr;
  for (size_t chip = 0; chip < programs_.size(); ++chip) {
    if (programs_[chip].get() == last) continue;  // shared programs are checked once
    last = programs_[chip].get();
    const isa::InstructionSequence list(*last);
    bool canonical = true;
    for (size_t i = 1; i < list.size() && canonical; ++i) {
      const isa::Instruction a = list[i - 1], b = list[i];
      canonical = a.issue != b.issue ? a.issue < b.issue : a.unit <= b.unit;
    }
    if (!canonical)
      return makeError(ExitCode::kInternal,
                       fmt::format("the program of chip {} is not in (issue, unit) order; event rows need it", chip));
  }
  return {};
}

void EventBuffer::instructionExecuted(int chip, std::int64_t programIndex, Cycle start, Cycle end) {
  if (!recorded_[chip]) return;
  const isa::Instruction inst = sequences_[chip][static_cast<size_t>(programIndex)];
  instructions_.positions.push_back(instructionOffset_[chip] + programIndex);
  const std::int32_t op = attribution_.opOf(chip, sequences_[chip].originOf(static_cast<size_t>(programIndex)));
  instructions_.rows.push_back({chip, inst.unit, units_[inst.unit].slice, static_cast<std::int16_t>(inst.op),
                                programIndex, start, end, inst.repeat, op});
  peak_ = std::max(peak_, buffered());
}

void EventBuffer::recordBursts(const std::vector<sim::C2CBurst>& bursts) {
  if (!selection_.c2c) return;
  for (const auto& b : bursts) {
    const std::int64_t k = sends_[b.srcChip]++;
    const auto& ops = sendOps_[b.srcChip];
    c2c_.positions.push_back(c2cOffset_[b.srcChip] + k);
    c2c_.rows.push_back({b.srcChip, b.dstChip, b.link, b.sendCycle, b.firstArrive, b.bytes, b.vectors, b.interval,
                         k < static_cast<std::int64_t>(ops.size()) ? ops[k] : -1});
  }
  peak_ = std::max(peak_, buffered());
}

Status EventBuffer::flush(TraceWriter& writer) {
  if (selection_.c2c) {
    sortByPosition(c2c_);
    if (auto s = writer.writeC2cEvents(c2c_); !s) return s;
    c2c_.positions.clear();  // capacity stays at the peak: bounded, and no churn
    c2c_.rows.clear();
  }
  if (selection_.instructions) {
    sortByPosition(instructions_);
    if (auto s = writer.writeInstructionEvents(instructions_); !s) return s;
    instructions_.positions.clear();
    instructions_.rows.clear();
  }
  return {};
}

}  // namespace tsp::runtime
