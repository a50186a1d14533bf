// Simulated annealing over list-scheduling orders: swap and move neighbourhoods chosen by UCB.
#pragma once

#include <cstdint>

#include "compile/schedule/list_scheduler.h"

namespace tsp::schedule {

/// What annealing did; the schedule is never worse than the list schedule it started from.
struct AnnealResult {
  Schedule schedule;
  Cycle listMakespan = 0;
  std::int64_t moves = 0;
  std::int64_t accepted = 0;
  std::int64_t improved = 0;  ///< moves that lowered the best energy
};

/// Utilisation of the units a schedule uses: busy cycles / (units used x makespan).
double utilisation(const Problem& problem, const Schedule& schedule);

/// Improves `list` (the list schedule of `problem`) by re-deciding the order in which ready tasks
/// are placed, for options.annealMoves moves. Deterministic for a given options.seed.
Expected<AnnealResult> anneal(const Problem& problem, const Schedule& list, const Options& options);

}  // namespace tsp::schedule
