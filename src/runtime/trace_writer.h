// The HDF5 trace (docs/trace-format.md): written collectively by all ranks under a temporary name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "runtime/attribution.h"
#include "support/expected.h"

namespace tsp::runtime {

/// Trace format version, stored as /meta format_version.
inline constexpr int kTraceFormatVersion = 1;

/// One row of /summary/chips.
struct ChipRow {
  std::int32_t chip;
  std::int64_t cycles, predictedCycles, lowerBoundCycles, instructions;
  std::int64_t busyMem, busyVxm, busyMxm, busySxm, busyC2c;
  std::int64_t bytesSent, bytesReceived, sramPeakBytes;
  /// The makespan split into compute, communication, pipeline bubble and other idle cycles (TimeSplit).
  std::int64_t computeCycles, commCycles, bubbleCycles, otherCycles;
};

/// One row of /summary/units.
struct UnitRow {
  std::int32_t unit;
  char kind[8];
  std::int32_t slice;
};

/// One row of /summary/links.
struct LinkRow {
  std::int32_t link, a, b;
  std::int64_t bytesAb, bytesBa, busyCyclesAb, busyCyclesBa, latencyCycles;
  double bytesPerCycle;
};

/// The single row of /summary/run.
struct RunRow {
  std::int64_t makespanCycles;
  double makespanSeconds, throughputPerSecond;
  std::int64_t samples;
  std::int32_t chips, iterations;
};

/// One row of /compile/reports: the compiler's report on one chip's program (docs/trace-format.md).
struct CompileReportRow {
  std::int32_t chip;
  std::int64_t cycles, listCycles, lowerBound, criticalPath, busiestResource;
  std::int64_t sramPeakBytes, sramFootprintBytes, sramCapacityBytes;
  std::int32_t spills;
  std::int64_t memAccesses, delayedMemAccesses, tasks;
};

/// One row of /search/plans: a ranked plan and its predicted figures.
struct SearchPlanRow {
  std::int32_t rank;
  char plan[48];
  char split[12];
  std::int32_t dp, tp, pp, microbatches, interleave, chips;
  double iterationCycles, throughputPerSecond, latencySeconds;
  std::int64_t memoryBytes;
  double bubbleFraction, commShare;
  std::uint8_t feasible, exact;
};

/// One row of /events/c2c: one C2C burst (a send instruction's vectors on one link).
struct C2cEventRow {
  std::int32_t srcChip, dstChip, link;
  std::int64_t sendCycle, arriveCycle, bytes;
  std::int32_t vectors, interval;
  std::int32_t op;  ///< row of /names/ops, -1: none
};

/// One row of /events/instructions: one executed instruction.
struct InstructionEventRow {
  std::int32_t chip, unit, slice;
  std::int16_t opcode;
  std::int64_t programIndex, startCycle, endCycle;
  std::int32_t repeat;
  std::int32_t op;  ///< row of /names/ops, -1: none
};

/// One row of /names/ops (fixed-width strings: parallel HDF5 writes no variable-length data).
struct OpNameRow {
  char op[160];
  char kind[24];
  std::int32_t layer;
  char tensor[160];
};

/// One row of /summary/ops or /summary/layers: the work of an op or a layer (WorkRow).
struct WorkSummaryRow {
  std::int32_t id, chips;
  std::int64_t instructions, busyMem, busyVxm, busyMxm, busySxm, busyC2c;
  std::int64_t memBytes, c2cBytes, sramBytes, firstCycle, lastCycle, cycles, chipCycles;
  double linkBusy;  ///< busy fraction of its busiest C2C queue (WorkRow::linkBusy)
};

/// Rows of an event table bound for given rows of the file (positions fixed before the run).
template <typename Row>
struct EventRows {
  std::vector<std::int64_t> positions;  ///< ascending
  std::vector<Row> rows;                ///< rows[i] goes to positions[i]
};

/// String and number attributes of /meta.
struct TraceMeta {
  std::string toolVersion, configYaml, planYaml, traceLevel, rankMapping, created;
  double clockMhz = 0, wallSeconds = 0;
  std::int64_t chipCount = 0, linkCount = 0, seed = 0;
  int ranks = 1;
  bool partial = false;       ///< a signal stopped the run (a .partial.h5 file)
  std::int64_t reachedCycle = 0;  ///< partial traces: every event before this cycle is in the file
};

/// Whether a trace can be written at path: not a directory, in a writable directory (made when
/// missing). Checked before any work, so that a bad --out fails in a second.
Status checkTraceTarget(const std::string& path);

/// Writes one trace file. Every call is collective over the communicator. A write that fails (a
/// full disk) fails on the ranks that saw it, while the others may wait inside HDF5's collectives:
/// after a failure the caller abandon()s the file, without any collective, and ends the job (exit
/// 5, MPI_Abort).
class TraceWriter {
 public:
  /// Creates `finalPath`'s temporary sibling under a name unique to this run; nothing appears under
  /// finalPath until commit().
  static Expected<TraceWriter> create(const std::string& finalPath, MPI_Comm comm);
  TraceWriter(TraceWriter&& other) noexcept;
  TraceWriter& operator=(TraceWriter&&) = delete;
  ~TraceWriter();

  Status writeMeta(const TraceMeta& meta);
  /// Rows of the chips this rank owns (any order); the dataset has chipCount rows indexed by chip.
  Status writeChips(const std::vector<ChipRow>& localRows, std::int64_t chipCount);
  /// unit_busy_cycles rows [chips x units] for this rank's chips, in the order of localChips.
  Status writeUnitBusy(const std::vector<int>& localChips, const std::vector<std::int64_t>& rows, int units,
                       std::int64_t chipCount);
  /// Timeline rows [chips x kinds x bins] for this rank's chips.
  Status writeTimeline(const std::vector<int>& localChips, const std::vector<float>& rows, int kinds, int bins,
                       std::int64_t binCycles, std::int64_t chipCount);
  /// Rows identical on every rank (written by rank 0): units, links, run.
  Status writeUnits(const std::vector<UnitRow>& rows);
  Status writeLinks(const std::vector<LinkRow>& rows);
  Status writeRun(const RunRow& row);
  /// /names/ops, /summary/ops and /summary/layers (identical on every rank; written by rank 0).
  Status writeAttribution(const Attribution& attribution);
  /// The ranked plans of a search, best first (identical on every rank; written by rank 0).
  Status writeSearchPlans(const std::vector<SearchPlanRow>& rows);
  /// /compile/reports, one row per chip (identical on every rank; written by rank 0).
  Status writeCompileReports(const std::vector<CompileReportRow>& rows);
  /// Marks a trace whose /meta is written as partial: the signal came after the simulation ended.
  Status markPartial(std::int64_t reachedCycle);

  /// Creates /events/c2c with `rows` rows (unwritten rows read as -1), extendible, chunked, compressed.
  Status createC2cEvents(std::int64_t rows);
  /// Creates /events/instructions with `rows` rows and the opcode_names attribute.
  Status createInstructionEvents(std::int64_t rows, const std::string& opcodeNames);
  /// Writes this rank's buffered rows at their positions (collective: every rank calls, maybe with none).
  Status writeC2cEvents(const EventRows<C2cEventRow>& rows);
  /// The same for /events/instructions.
  Status writeInstructionEvents(const EventRows<InstructionEventRow>& rows);

  /// Closes and renames to `path` (the final name, or a .partial.h5 name).
  Status commit(const std::string& path);
  /// Closes and deletes the temporary file (collective).
  void discard();
  /// Deletes the temporary file after a failed write, on this rank alone (no collective).
  void abandon();
  /// Whether commit() failed on this rank (the rank that reports it).
  bool failedHere() const { return failedHere_; }

 private:
  TraceWriter(std::string tempPath, MPI_Comm comm, std::int64_t file);
  std::string tempPath_;
  MPI_Comm comm_;
  std::int64_t file_ = -1;
  int rank_ = 0;
  bool failedHere_ = false;
};

}  // namespace tsp::runtime
