// Conservative parallel discrete-event simulation of the cluster over MPI ranks.
#pragma once

#include <csignal>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <mpi.h>

#include "compile/isa/program.h"
#include "runtime/rank_mapping.h"
#include "sim/chip.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::runtime {

/// Longest window, in cycles: with no link between ranks (one rank) the window would be the whole
/// run, and signals and progress are only looked at between windows.
inline constexpr Cycle kMaxWindowCycles = Cycle{1} << 16;

/// How a simulation ended.
struct SimulationOutcome {
  bool interrupted = false;  ///< a signal stopped it at a window boundary
  Cycle reachedCycle = 0;    ///< every event before this cycle was simulated
  std::int64_t windows = 0;
  std::int64_t events = 0;   ///< instructions executed by this rank's chips
};

/// A progress report for rank 0.
struct ProgressReport {
  Cycle cycle = 0;           ///< every event before this cycle is simulated
  std::int64_t windows = 0;
  std::int64_t events = 0;   ///< instructions executed on all ranks
};

/// What the window loop tells the rest of the run, and asks of it, at window boundaries.
/// Every member may be empty.
struct WindowHooks {
  std::function<void(const std::vector<sim::C2CBurst>&)> sent;  ///< bursts a local chip sent
  std::function<bool()> wantsFlush;               ///< this rank's event buffers are full
  std::function<Status()> flush;                  ///< collective; called on every rank when any wants it
  std::function<bool()> progressDue;              ///< rank 0: time for a progress line
  std::function<void(const ProgressReport&)> progress;  ///< rank 0: print it
};

/// One C2C instruction on a link, as the static schedule has it: its issue cycle and vector count.
struct LinkUse {
  Cycle issue = 0;
  std::int64_t vectors = 0;
};

/// For the sends on one link (issue order) and the reads of its far end (receives and forwards,
/// issue order), matched vector by vector in FIFO order: element k is the earliest issue of a read
/// that takes a vector of send k or of any later send; sim::kNever when none is ever read.
std::vector<Cycle> readDeadlines(const std::vector<LinkUse>& sends, const std::vector<LinkUse>& reads);

/// Refuses a cluster whose chips' simulation state (sim::chipStateBytes each, the chips spread evenly
/// over the ranks) would take more than half the memory this node gives each rank: the rest is for
/// the programs, the compiler and the trace. Checked before anything is compiled or built.
Status checkChipStateFits(const topology::Cluster& cluster, const sim::SimOptions& options, MPI_Comm comm,
                          const std::string& configFile);

/// The chips of this rank and the window loop that advances them in step with other ranks.
///
/// A window lasts at least as long as the fastest C2C burst between two ranks (send latency + link
/// latency), so nothing sent in a window is due on another rank before the window ends; since the
/// programs are scheduled statically, the instruction that will read each burst crossing ranks (a
/// receive or a forward, matched to the sends on its link in FIFO order) is known, and a window
/// stretches to the first cycle at which a burst not yet sent is read (at most kMaxWindowCycles).
/// With faults injected (jitter may reorder arrivals, stalls move issues) it stretches only to the
/// next send that crosses ranks + the cross-rank latency. The bursts
/// that cross ranks are exchanged with the neighbouring ranks only, between windows. Inside a window a
/// rank advances its own chips in sub-windows as long as its fastest internal burst, delivering
/// between them, so every burst reaches its chip before it arrives whatever the mapping: results
/// do not depend on the number of ranks. Ranks agree once per window, in one MPI_Allreduce, on the
/// next event anywhere (idle windows are skipped), on continue, flush, stop or fail, and on
/// whether any burst crosses ranks (windows that send nothing skip the exchange).
class ParallelSimulation {
 public:
  ParallelSimulation(MPI_Comm comm, const topology::Cluster& cluster,
                     const std::vector<std::shared_ptr<const isa::Program>>& programs, RankMapping mapping,
                     const sim::SimOptions& options);
  ~ParallelSimulation();
  ParallelSimulation(const ParallelSimulation&) = delete;
  ParallelSimulation& operator=(const ParallelSimulation&) = delete;

  /// The shortest window: the fastest burst between ranks, at most kMaxWindowCycles.
  Cycle lookahead() const { return window_; }
  /// The sub-window length: the fastest burst between two chips of this rank, at most lookahead().
  Cycle innerLookahead() const { return inner_; }
  /// Ranks that own a chip linked to one of this rank's chips, ascending.
  const std::vector<int>& neighbours() const { return neighbours_; }

  /// Runs until every chip is done, a hazard is found on any rank, or *interrupt becomes non-zero.
  /// Every rank returns the same outcome or the same exit code; `reportHere` is set on the one
  /// rank that should print the error: the one whose chip failed first in (cycle, chip) order.
  Expected<SimulationOutcome> run(const volatile std::sig_atomic_t* interrupt, const WindowHooks& hooks,
                                  bool& reportHere);

  /// Which rank simulates which chip.
  const RankMapping& mapping() const { return mapping_; }
  /// Statistics of the i-th chip of mapping().localChips.
  const sim::ChipStats& stats(size_t localIndex) const { return chips_[localIndex]->stats(); }
  /// The i-th chip of mapping().localChips (functional mode reads its SRAM at the end).
  const sim::Chip& chip(size_t localIndex) const { return *chips_[localIndex]; }

 private:
  // The first failure of this rank in (issue cycle of the failing instruction, chip) order.
  struct Failure {
    Cycle issue = 0;
    int who = 0;  // chip id, or chipCount + rank for a failure that is not a chip's
    Diagnostic diagnostic;
  };

  /// The earliest next event of this rank's running chips (kNever: none).
  Cycle nextLocalEvent() const;
  Cycle nextCrossSend(Cycle from) const;
  void buildInboundLinks(const topology::Cluster& cluster,
                         const std::vector<std::shared_ptr<const isa::Program>>& programs);
  /// No burst sent to this rank from another one at or after `from` is read before this cycle.
  Cycle crossDeadline(Cycle from) const;
  Cycle windowEnd(Cycle start, Cycle deadline) const;
  void advanceLocal(Cycle windowStart, Cycle windowEnd, const WindowHooks& hooks, std::int64_t& events);
  void exchange(std::vector<sim::C2CBurst>& arrived);

  MPI_Comm comm_;
  MPI_Comm neighbourComm_ = MPI_COMM_NULL;
  int rank_ = 0, ranks_ = 1, chipCount_ = 0;
  RankMapping mapping_;
  std::vector<std::unique_ptr<sim::Chip>> chips_;
  // Each local chip's next event (kNever once it failed), and their minimum: kept as the chips run,
  // so a window reads one array rather than asking every chip.
  std::vector<Cycle> next_;
  Cycle nextLocal_ = sim::kNever;
  // A link into one of this rank's chips from another rank, as the static programs use it.
  struct InboundLink {
    std::vector<Cycle> sendIssue;  // the sender's sends and forwards on it, ascending
    std::vector<Cycle> readFrom;   // readFrom[k]: earliest read of a vector of burst k or a later one
  };

  std::vector<std::vector<Cycle>> crossSends_;  // per local chip: issues of its sends to other ranks
  std::vector<InboundLink> inboundLinks_;
  bool exactDeadlines_ = true;  // no faults: reads are where the programs put them, arrivals in send order
  std::vector<int> localIndex_;      // chip id -> index in chips_, or -1
  std::vector<int> neighbours_;
  std::vector<int> neighbourIndex_;  // rank -> index in neighbours_, or -1
  std::vector<std::vector<sim::C2CBurst>> toNeighbour_;
  std::optional<Failure> failure_;
  Cycle window_ = 1, inner_ = 1;
};

}  // namespace tsp::runtime
