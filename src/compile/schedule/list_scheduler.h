// List scheduling of a one-chip problem with the seed's priority, and the order-driven decoder annealing uses.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "compile/problem/problem.h"
#include "support/expected.h"
#include "support/progress.h"

namespace tsp::schedule {

/// Options of the one-chip scheduler. Every budget is a count of steps, never a time.
struct Options {
  /// priority(v) = alpha*CP(v) + beta*r(v)/R_avg + gamma*fanout(v) (seed, stage 1); CP in cycles.
  double alpha = 1.0;
  double beta = 16.0;
  double gamma = 4.0;
  /// A shard compiled alone is list-scheduled (and its planes' run order searched) again with beta
  /// = each of portfolioBetas and gamma = 0, and the shortest schedule is kept (compileShard).
  bool priorityPortfolio = true;
  std::vector<double> portfolioBetas = {1.0, 0.0};
  /// Simulated annealing moves after the list schedule; 0 keeps the list schedule.
  std::int64_t annealMoves = 0;
  /// A second budget in task placements: moves are capped at annealWork / tasks, so that large
  /// shards anneal less instead of compiling for minutes (still a step count, never a time).
  /// scheduleCluster divides it evenly among the stages.
  std::int64_t annealWork = 5'000'000;
  /// Moves between temperature steps T_{k+1} = 0.95 T_k.
  std::int64_t movesPerTemperature = 8;
  /// Energy = makespan + lambda * (1 - utilisation) * (list makespan), so utilisation weighs in cycles.
  double lambda = 0.05;
  /// Seeds the annealer's random stream (with the shard index mixed in by the caller).
  std::uint64_t seed = 0;
  /// Keep at most streamsPerDirection values in flight per direction at any cycle, so that the
  /// register colouring always has a solution; off only to exercise spilling.
  bool limitStreamPressure = true;
  /// Let each MXM plane take its runs (one output tile and row group each) in the order a schedule
  /// without the plane chains reaches them (plane_order.h), instead of the lowering's order.
  bool reorderPlanes = true;
  /// Moves of one run within its plane's order tried after that (each one list schedule).
  std::int64_t planeOrderMoves = 640;
  /// At most this many of those moves for each of a plan's many shards (a pipeline's stages, a
  /// sharded plan's segments, a training step's passes), whose compiles add up.
  std::int64_t planeOrderShardMoves = 160;
  /// Caps those moves at planeOrderWork / tasks, as annealWork caps the annealer's.
  std::int64_t planeOrderWork = 1'000'000;
  /// Rounds of heads and tails raised by the resources in the report's lower bound (lowerBound);
  /// 0 bounds from the data alone (a caller that only wants the makespan).
  int boundRounds = 4;
  /// Told after each shard a cluster scheduler compiles: (done, total), total 0 when not known ahead.
  support::ProgressFn progress;
  /// A shard whose layers repeat (a transformer's blocks, a ResNet stage's bottlenecks) runs the
  /// search (plane order, priority weightings, annealing) once per distinct layer, its work caps
  /// shared among them, and every repeat takes its layer's order (compileShard).
  bool shareRepeatedLayers = true;
  /// Keeps the priority portfolio in each of a plan's many shards too (asShardOfMany).
  bool shardPortfolio = false;
  /// (unit, cycle): no step on the unit issues before the cycle, relative to the program's start,
  /// because the chip's earlier programs still use it (compileShard raises the tasks' release
  /// times). An MXM plane is named by its first unit; a MEM or C2C unit stands for its slice or port.
  std::vector<std::pair<int, Cycle>> unitRelease;
  /// These options for one of a plan's many shards: at most planeOrderShardMoves plane-order moves,
  /// one priority (unless shardPortfolio).
  Options asShardOfMany() const {
    Options shard = *this;
    shard.planeOrderMoves = std::min(planeOrderMoves, planeOrderShardMoves);
    shard.priorityPortfolio = priorityPortfolio && shardPortfolio;
    return shard;
  }
};

/// How hard the one-chip compiler works (`--effort`, config `compile.effort`); every level is a
/// count of steps, so a seed gives one program at each level.
enum class Effort { kFast, kDefault, kMax };

/// "fast", "default", "max".
const char* effortName(Effort effort);
/// The level a name denotes, or nothing.
std::optional<Effort> parseEffort(std::string_view name);
/// The options of a level:
/// - fast: list scheduling alone (the lowering's plane order, one priority, no annealing);
/// - default: the planes' run order searched, the priority portfolio for a shard compiled alone,
///   256 annealing moves;
/// - max: the full plane-order search and the priority portfolio in every shard, 1,024 annealing
///   moves, four times the annealing and plane-order work caps.
Options effortOptions(Effort effort);

/// The seed's priority of every task.
std::vector<double> priorities(const Problem& problem, const Options& options);

/// Places tasks one at a time, each at its earliest feasible start; `rank[t]` orders the ready
/// tasks (smaller first, ties by index). Fails when a deadline cannot be met.
Expected<Schedule> scheduleInOrder(const Problem& problem, const std::vector<std::int64_t>& rank, const Options& options);

/// List scheduling: ranks by decreasing priority. check() must have succeeded.
Expected<Schedule> scheduleList(const Problem& problem, const Options& options);

/// The rank vector list scheduling uses (position of each task in decreasing priority).
std::vector<std::int64_t> priorityRank(const Problem& problem, const Options& options);

}  // namespace tsp::schedule
