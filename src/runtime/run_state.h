// What one tsp-sim run carries from stage to stage (runtime/driver.cpp), and what the reports read.
#pragma once

#include <array>
#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "compile/ir/graph.h"
#include "compile/schedule/collectives.h"
#include "compile/schedule/cluster_schedule.h"
#include "runtime/cancellation.h"
#include "runtime/driver.h"
#include "runtime/event_buffer.h"
#include "runtime/functional_run.h"
#include "runtime/pdes.h"
#include "runtime/plan_choice.h"
#include "runtime/run_config.h"
#include "runtime/trace_writer.h"

namespace tsp::runtime {

/// What a simulated training step's pipeline did: the scheduler's figures next to Megatron's formula.
struct TrainingFigures {
  int stages = 1, microbatches = 1, chunks = 1, buckets = 0;
  Cycle pipelineCycles = 0, allReduceCycles = 0;
  double idealCycles = 0, bubble = 0;
  int compiledPasses = 0, sharedPasses = 0;
  std::vector<std::vector<Cycle>> forwardCycles, backwardCycles;  ///< [stage][chunk], one microbatch
  bool pipelineOnly = false;  ///< no all-reduce and no update: the programs end with the pipeline
};

/// Simulator counters beyond the trace rows, summed over every chip of every rank.
struct SimulatorTotals {
  std::array<long long, sim::kHazardKindCount> hazards{};  ///< hazards counted (faults on), by kind
  long long bankConflicts = 0;
  long long sramAccesses = 0;  ///< reads and writes
  long long c2cBytes = 0;      ///< bytes sent over C2C links
  long long stallCycles = 0;   ///< summed over every unit
  long long energyPicojoules = 0;  ///< whole picojoules: the sum does not depend on how chips are spread over ranks
};

/// One of the busiest links of the run, for the summaries.
struct BusyLink {
  LinkRow row;
  double utilisation = 0;  ///< busy cycles of its busier direction over the makespan
};

/// What the chips did, gathered over the ranks: the trace's rows and the summaries' figures.
struct RunStatistics {
  std::vector<ChipRow> localRows;        ///< this rank's chips
  std::vector<std::int64_t> unitBusy;    ///< [local chips x units]
  std::vector<float> timeline;           ///< [local chips x unit kinds x bins]
  std::vector<ChipRow> allRows;          ///< every chip, on every rank
  std::vector<LinkRow> linkRows;
  std::vector<UnitRow> unitRows;
  RunRow run{};
  SimulatorTotals totals;
  double energyJoules = 0;
  long long hazardsCounted = 0;
  double bankConflictRate = 0;  ///< bank conflicts per SRAM access
  std::int64_t busiestChip = -1;  ///< the chip with the most busy unit-cycles
  double imbalance = 1;           ///< its busy cycles over the mean of the chips used
  std::array<double, topology::kUnitKindCount> kindUtilisation{};  ///< busy over makespan x units x chips used
  std::vector<BusyLink> busiestLinks;  ///< up to 5, busiest first
};

/// The phases whose wall time the summary gives (rank 0's clock): loading the config, importing the
/// model, the graph passes, choosing the plan, compiling, simulating (with mapping chips to ranks and
/// gathering the statistics), writing the trace; and the report, which the report cannot time.
enum class Phase { kLoad, kImport, kPasses, kSearch, kCompile, kSimulate, kWriteTrace, kReport };
inline constexpr int kPhaseCount = static_cast<int>(Phase::kReport) + 1;

/// The name of a phase in the summaries ("write trace") and in --json ("write_trace").
const char* phaseName(Phase phase);
const char* phaseKey(Phase phase);

/// Wall seconds of each phase that ran (a phase that did not run has none).
struct PhaseTimes {
  std::array<std::optional<double>, kPhaseCount> seconds{};
  void add(Phase phase, double s) { seconds[static_cast<int>(phase)] = seconds[static_cast<int>(phase)].value_or(0) + s; }
};

/// Everything a run has built so far. Stages fill it in order; a later stage reads what earlier ones left.
struct RunState {
  RunState(const RunOptions& o, MPI_Comm c, const volatile std::sig_atomic_t* i);

  const RunOptions& options;
  MPI_Comm comm;
  const volatile std::sig_atomic_t* interrupt;
  CancelWatch* cancel = nullptr;  ///< a signal on any rank, agreed between the stages
  int rank = 0, ranks = 1;
  bool root = true;
  std::chrono::steady_clock::time_point wallStart;
  PhaseTimes phases;

  // configure
  RunConfig config;
  bool configured = false;  ///< the config is loaded and the trace can be written
  bool functional = false;
  // build model
  std::optional<ir::Graph> graph;
  // choose plan
  std::optional<schedule::CollectiveSchedule> collective;  ///< builtin:collective: compiled without a plan
  PlanChoice choice;
  bool planChosen = false;
  // compile
  std::vector<isa::Program> compiled;
  std::vector<schedule::CompileReport> reports;
  /// Compute segments compiled (a pipeline's stages, a sharded plan's segments, a training step's
  /// passes) and reused (identical to one compiled).
  int compiledSegments = 0, sharedSegments = 0;
  std::optional<TrainingFigures> trainingFigures;
  // map ranks
  std::vector<std::shared_ptr<const isa::Program>> programs;  ///< per chip; identical programs shared
  Cycle predictedMakespan = 0;
  std::optional<RankMapping> mapping;
  std::int64_t cutLinks = 0;
  // simulate
  std::optional<TraceWriter> writer;
  EventSelection selection;
  std::unique_ptr<EventBuffer> events;
  std::unique_ptr<sim::KernelRuntime> kernels;  ///< before the chips: they are destroyed first
  sim::SimOptions simOptions;
  std::optional<FunctionalSetup> functionalSetup;
  std::unique_ptr<ParallelSimulation> simulation;
  SimulationOutcome outcome;
  // gather statistics
  RunStatistics statistics;
  // write trace
  double wallSeconds = 0;  ///< from the start to the trace's meta, rank 0's clock
  std::string tracePath;   ///< where the trace went (final or .partial.h5)
  // report
  long long peakRssMaxRank = 0, peakRssAllRanks = 0, eventBufferPeakRows = 0;

  /// How the programs were compiled (the manifest's and --json's `compile`): the effort level, the
  /// compute segments compiled, reused and in all.
  nlohmann::json compileRecord() const {
    return {{"effort", config.compile.effort},
            {"segments",
             {{"compiled", compiledSegments}, {"shared", sharedSegments}, {"total", compiledSegments + sharedSegments}}}};
  }
};

}  // namespace tsp::runtime
