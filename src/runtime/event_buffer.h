// Buffered streaming of trace events: rows collect per rank and go to the file in collective flushes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compile/isa/program.h"
#include "runtime/attribution.h"
#include "runtime/trace_writer.h"
#include "sim/chip.h"
#include "topology/chip_spec.h"

namespace tsp::runtime {

/// Which event tables a trace level asks for.
struct EventSelection {
  bool c2c = false;                   ///< trace level links or instructions
  bool instructions = false;          ///< trace level instructions
  std::vector<int> instructionChips;  ///< chips whose instructions are recorded; empty: all
};

/// Collects the /events rows of this rank's chips and writes them in bounded pieces. Every row's
/// place in the file is fixed before the run: a chip's rows start after those of lower chips
/// (its program's instruction and send counts are known), so rows land in (chip, program) order
/// whatever the number of ranks, and memory stays bounded by the flush threshold.
class EventBuffer final : public sim::ChipObserver {
 public:
  /// `programs` indexed by chip, `attribution` theirs; `flushRows` is the number of buffered rows that
  /// asks for a flush.
  EventBuffer(const topology::ChipSpec& spec, const std::vector<std::shared_ptr<const isa::Program>>& programs,
              Attribution attribution, EventSelection selection, std::int64_t flushRows);

  /// Checks that every program is in canonical order, the order rows are written in.
  Status check() const;

  /// Rows of the whole run in each table (the sizes of the datasets).
  std::int64_t c2cRowCount() const { return c2cOffset_.back(); }
  /// Rows of /events/instructions over the whole run.
  std::int64_t instructionRowCount() const { return instructionOffset_.back(); }
  /// The tables this buffer fills.
  const EventSelection& selection() const { return selection_; }
  /// The op names the rows' `op` column indexes and the static work per op and layer.
  const Attribution& attribution() const { return attribution_; }

  /// Records an executed instruction of a chip whose instructions are traced.
  void instructionExecuted(int chip, std::int64_t programIndex, Cycle start, Cycle end) override;
  /// Records bursts a local chip sent (in its send order).
  void recordBursts(const std::vector<sim::C2CBurst>& bursts);

  /// True when this rank holds at least the flush threshold of rows.
  bool wantsFlush() const { return buffered() >= flushRows_; }
  /// Rows held now.
  std::int64_t buffered() const {
    return static_cast<std::int64_t>(c2c_.rows.size() + instructions_.rows.size());
  }
  /// Most rows held at once (what memory per rank is bounded by).
  std::int64_t peakBuffered() const { return peak_; }

  /// Writes and drops the buffered rows; collective over the writer's ranks.
  Status flush(TraceWriter& writer);

 private:
  std::vector<topology::UnitInfo> units_;
  const std::vector<std::shared_ptr<const isa::Program>>& programs_;
  std::vector<isa::InstructionSequence> sequences_;  // per chip: its program's instructions, read in place
  EventSelection selection_;
  std::int64_t flushRows_;
  std::vector<std::int64_t> c2cOffset_;          // first /events/c2c row of each chip; back() = total
  std::vector<std::int64_t> instructionOffset_;  // first /events/instructions row of each chip
  std::vector<char> recorded_;                   // chip's instructions are recorded
  std::vector<std::int64_t> sends_;              // bursts recorded so far per chip
  std::vector<std::vector<std::int32_t>> sendOps_;  // per chip: the op of each send or forward, in program order
  Attribution attribution_;
  EventRows<C2cEventRow> c2c_;
  EventRows<InstructionEventRow> instructions_;
  std::int64_t peak_ = 0;
};

/// The opcode_names attribute: opcode names in opcode order, comma-separated.
std::string opcodeNames();

}  // namespace tsp::runtime
