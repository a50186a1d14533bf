// Conservative parallel discrete-event simulation of the cluster over MPI ranks.
#pragma once

#include <csignal>
#include <functional>
#include <memory>
#include <vector>

#include <mpi.h>

#include "compile/isa/program.h"
#include "sim/chip.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::runtime {

/// Which rank simulates which chip.
struct RankMapping {
  std::vector<int> owner;       ///< rank of every chip
  std::vector<int> localChips;  ///< chips of this rank, ascending
};

/// Contiguous blocks of chips per rank (the first chips % ranks ranks get one more).
RankMapping blockMapping(int chips, int ranks, int rank);

/// How a simulation ended.
struct SimulationOutcome {
  bool interrupted = false;  ///< a signal stopped it at a window boundary
  Cycle reachedCycle = 0;    ///< every event before this cycle was simulated
  std::int64_t windows = 0;
};

/// A progress report, called on rank 0 after windows: (simulated cycle, windows, local events).
using ProgressCallback = std::function<void(Cycle, std::int64_t, std::int64_t)>;

/// The chips of this rank and the window loop that advances them in lock-step with other ranks.
class ParallelSimulation {
 public:
  ParallelSimulation(MPI_Comm comm, const topology::Cluster& cluster,
                     const std::vector<std::shared_ptr<const isa::Program>>& programs, RankMapping mapping,
                     const sim::SimOptions& options);

  /// The window length: the smallest cycles any C2C burst takes from send to arrival.
  Cycle lookahead() const { return lookahead_; }

  /// Runs until every chip is done, a hazard is found on any rank, or *interrupt becomes non-zero.
  /// Every rank returns the same outcome or the same exit code; `reportHere` tells the one rank
  /// that should print the error.
  Expected<SimulationOutcome> run(const volatile std::sig_atomic_t* interrupt, const ProgressCallback& progress,
                                  bool& reportHere);

  const RankMapping& mapping() const { return mapping_; }
  const sim::ChipStats& stats(size_t localIndex) const { return chips_[localIndex]->stats(); }

 private:
  MPI_Comm comm_;
  int rank_ = 0, ranks_ = 1;
  RankMapping mapping_;
  std::vector<std::unique_ptr<sim::Chip>> chips_;
  std::vector<int> localIndex_;  // chip id -> index in chips_, or -1
  Cycle lookahead_ = 1;
};

}  // namespace tsp::runtime
