// The one-chip scheduling problem: rigid stream-connected tasks, dependences, resources; check() and verify().
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "compile/isa/program.h"
#include "support/expected.h"
#include "topology/chip_spec.h"
#include "topology/cluster.h"

namespace tsp::schedule {

/// One instruction of a task. Its issue is the task's start plus `offset`, which the stream
/// time-of-flight rule fixes: a consumer issues at producer issue + d_func + |delta slice|.
struct Step {
  isa::Instruction inst;  ///< unit, opcode, operands; issue and stream ids are filled in by scheduling
  int producer = -1;      ///< step of the same task whose result is this step's src, or -1
  int producer2 = -1;     ///< step whose result is src2, or -1
  Cycle offset = 0;       ///< set by Problem::finalize()
  /// C2C send: cycles between its vectors on the link, the link's exact rate (a fraction; at least
  /// the interval it hands them over at, which it is taken as when smaller).
  double linkSpacing = 0;
  /// C2C send: the vectors of its stream before its own (a later MEM-slice segment of one tile goes
  /// on from where the segment before left the link's fraction of a cycle; 0: a stream of its own).
  /// The program carries it as the send's `stride` (isa::Instruction::stride), which the simulator
  /// follows: it continues a stream exactly when its instruction says so.
  std::int64_t linkFrom = 0;
  /// A rigid link without a stream: this step issues exactly `followGap` cycles after step `follows`
  /// of the same task (-1: none), e.g. the segments of one C2C burst leaving back to back.
  int follows = -1;
  Cycle followGap = 0;
  std::int32_t reads = -1;  ///< a MemRead of a graph tensor: its id (the lowering's), -1: none known
  int origin = -1;          ///< its origin when not the task's (a read of one input of several), -1: the task's
};

/// Cycles a C2C send step holds its link from its issue: its vectors at the link's exact rate, the
/// fractions accumulated over its stream (topology::streamCycles).
inline Cycle linkCycles(const Step& s) {
  return topology::streamCycles(s.linkFrom, s.inst.repeat, s.linkSpacing, s.inst.interval);
}

/// A rigid group of instructions joined by streams: when its first step issues, every other step
/// issues at its fixed offset. The scheduler places tasks; instructions never move inside one.
struct Task {
  std::vector<Step> steps;
  std::string name;      ///< model op and tile, for diagnostics
  Cycle release = 0;     ///< the task may not start earlier (a receive: the data's arrival)
  Cycle deadline = -1;   ///< the task must start by then (a send the cluster scheduler timed), -1: none
  /// Only that it ends with the program matters (a send whose consumer takes the tensor once the
  /// whole program has run): it lends the tasks before it no list-scheduling priority.
  bool untimed = false;
  int origin = -1;       ///< the op it lowers, an index into LoweredShard::origins (-1: none)
};

/// issue(to.toStep) >= issue(from.fromStep) + latency.
struct Dependence {
  int from = 0, fromStep = 0;
  int to = 0, toStep = 0;
  Cycle latency = 0;
  friend bool operator==(const Dependence&, const Dependence&) = default;
};

/// A stream value run of one step: who produces it, its direction and how far it travels.
struct StreamEdge {
  int task = 0, step = 0;  ///< the producing step
  isa::Direction dir = isa::Direction::kEast;
  int reach = 0;           ///< slices to the farthest consumer
  Cycle firstValue = 0;    ///< offset in the task of the first value's entry on the stream
  Cycle lastValue = 0;     ///< offset of the last value's entry
  int slice = 0;           ///< producer slice
  /// The moving-frame coordinate of a value is tau = cycle - slice eastward, cycle + slice westward;
  /// the values of this edge cover tau in [start + tauFirst(), start + tauLast()].
  Cycle tauFirst() const { return firstValue + (dir == isa::Direction::kEast ? -slice : slice); }
  Cycle tauLast() const { return lastValue + (dir == isa::Direction::kEast ? -slice : slice); }
};

/// The scheduling problem of one chip. finalize() derives offsets and stream edges; check()
/// says whether the input is well formed before any algorithm runs.
class Problem {
 public:
  explicit Problem(const topology::ChipSpec& chip);

  /// Appends a task and returns its index.
  int addTask(Task task);
  /// Adds a dependence between steps of two tasks.
  void addDependence(const Dependence& dep) { deps_.push_back(dep); }
  /// A data dependence: `to` may read only after `from`'s last repeat iteration completed.
  void addDataDependence(int from, int fromStep, int to, int toStep);
  /// Derives step offsets (time of flight) and stream edges; call after the last change.
  void finalize();
  /// Is the problem well formed: units exist and fit their opcodes, offsets respect the time of flight,
  /// no task collides with itself, the dependence graph is acyclic? Errors name the task.
  Status check() const;
  /// The dependence part of check() alone (steps named exist, the graph is acyclic), which also
  /// makes topologicalOrder(): enough after a change of dependences only, the tasks having passed.
  Status checkDependences() const;

  const topology::ChipSpec& chip() const { return *chip_; }
  const std::vector<Task>& tasks() const { return tasks_; }
  std::vector<Task>& mutableTasks() { return tasks_; }
  const std::vector<Dependence>& dependences() const { return deps_; }
  std::vector<Dependence>& mutableDependences() { return deps_; }
  const std::vector<StreamEdge>& streamEdges() const { return edges_; }
  /// Stream edges of a task: [first, last) into streamEdges().
  std::pair<int, int> edgesOf(int task) const { return {edgeBegin_[task], edgeBegin_[task + 1]}; }
  /// Slice of a unit (0 for a unit that does not exist: check() reports it).
  int sliceOf(int unit) const {
    return unit >= 0 && unit < static_cast<int>(units_.size()) ? units_[unit].slice : 0;
  }
  const std::vector<topology::UnitInfo>& units() const { return units_; }
  /// Tasks in a topological order of the dependences (valid after a successful check()).
  const std::vector<int>& topologicalOrder() const { return topo_; }
  /// Number of stream values (instructions with a dst) and instructions in all.
  std::int64_t instructionCount() const;

  /// Offset of a step's last unit-busy cycle + 1 relative to the task start.
  Cycle unitEnd(int task, int step) const;
  /// Offset relative to the task start at which the step's last result is ready.
  Cycle completionOffset(int task, int step) const;
  /// Offset relative to the task start after which every step of the task has completed.
  Cycle span(int task) const { return span_[task]; }

 private:
  /// check()'s and checkDependences()' error about a task, naming it.
  Diagnostic taskError(int task, const std::string& what) const;
  const topology::ChipSpec* chip_;
  std::vector<topology::UnitInfo> units_;
  std::vector<Task> tasks_;
  std::vector<Dependence> deps_;
  std::vector<StreamEdge> edges_;
  std::vector<int> edgeBegin_;
  std::vector<Cycle> span_;
  mutable std::vector<int> topo_;
};

/// Dependences grouped per task (compressed rows): row t is [begin[t], begin[t + 1]) of `index`, the
/// indices into Problem::dependences() of the dependences into t (byTarget) or out of t, in order.
struct DependenceRows {
  std::vector<int> begin, index;
};
/// The rows of `deps` over `tasks` tasks; only the dependences listed in `subset` when it is given.
DependenceRows dependenceRows(const std::vector<Dependence>& deps, size_t tasks, bool byTarget,
                              const std::vector<int>* subset = nullptr);
/// The same into `rows`, reusing its memory (a caller that builds rows again and again).
void dependenceRows(const std::vector<Dependence>& deps, size_t tasks, bool byTarget, DependenceRows& rows,
                    const std::vector<int>* subset = nullptr);

/// A schedule: each task's start, each stream edge's register, and the predicted completion.
struct Schedule {
  std::vector<Cycle> start;      ///< per task: issue of step offset 0
  std::vector<int> streamId;     ///< per stream edge: register in its direction
  std::vector<int> unitOf;       ///< per task and step, flattened: the unit chosen (VXM groups are a pool)
  std::vector<int> stepBase;     ///< per task: first index into unitOf
  Cycle makespan = 0;            ///< last completion + ripple (what the simulator will count)
  std::int64_t delayedMemAccesses = 0;  ///< MEM steps placed later than their data allowed: port busy
  std::int64_t bankDelayedMemAccesses = 0;  ///< of those, the ones whose port was free but a bank was not
  std::int64_t memAccesses = 0;
};

/// May two stream edges, started at the given task starts, not share a register? The simulator treats
/// a value as able to reach every slice downstream of its producer, so two values of one direction
/// interfere when their moving-frame coordinates tau overlap, wherever their producers sit.
bool streamEdgesConflict(const StreamEdge& a, Cycle startA, const StreamEdge& b, Cycle startB);

/// Does the schedule respect every dependence, release, deadline, unit, link and stream-register
/// constraint (values on one register never share a (slice, cycle) cell)? Errors name the task.
Status verify(const Problem& problem, const Schedule& schedule);

/// Lower bounds of a problem: no schedule finishes earlier than any of them.
struct LowerBound {
  Cycle criticalPath = 0;     ///< longest dependence chain from the releases, + ripple
  Cycle busiestResource = 0;  ///< most loaded unit, link or pool, + ripple
  /// The one-machine bound of every resource, + ripple: for a unit, MEM port, link or pool, its uses
  /// as jobs with heads (the least start of their task), busy cycles (over the pool's units) and tails
  /// (the least time their task still needs after them), under Jackson's preemptive schedule. Heads
  /// and tails are those raised by the resources (lowerBound). A true bound >= busiestResource.
  Cycle resourceWindow = 0;
  /// The serial groups' bound, + ripple: over each group of segments that run one after another in
  /// any order (SerialSegment), the one-machine bound of the segments as jobs with their heads, their
  /// own shortest lengths (their longest dependence paths from first to last step) with the gaps
  /// between them, and their tails, with heads and tails raised by the resources.
  Cycle serialSegments = 0;
  Cycle value() const { return std::max({criticalPath, busiestResource, resourceWindow, serialSegments}); }
};
/// A stretch from step `firstStep` of task `first` to step `lastStep` of task `last` (tasks first..last
/// by index, every dependence between them running forward). The segments of one group never
/// overlap in time, whatever their order: the next one's first step issues at least `gap` cycles
/// after the previous one's last step (an MXM plane's runs: its installs and computes alternate).
struct SerialSegment {
  int first = 0, firstStep = 0, last = 0, lastStep = 0;
  Cycle gap = 1;
};
/// Computes the bounds (check() must have succeeded). Dependences listed in `relaxed` (each
/// occurrence once) are left out: a bound of every problem that differs from this one only in them,
/// e.g. the order-free bound of a problem whose MXM planes' runs were chained in a chosen order;
/// `serial` then keeps what every such order has in common (its segments never overlap).
/// For up to `rounds` rounds the heads of the segments' first tasks are raised to what every
/// resource allows their ancestors to have done (the one-machine bound of the ancestors' uses, each
/// with the longest path from its end to the task as its tail), the tails of their last tasks to what
/// their descendants' uses still need, and both carried over the dependences (0: data alone; the
/// rounds are skipped where the busiest resource is within 1 % of the bound from the data alone).
LowerBound lowerBound(const Problem& problem, const std::vector<Dependence>& relaxed = {},
                      const std::vector<std::vector<SerialSegment>>& serial = {}, int rounds = 4);
/// LowerBound::criticalPath alone (the cheaper part), with the same relaxation.
Cycle criticalPath(const Problem& problem, const std::vector<Dependence>& relaxed = {});

/// The scheduled instructions, with issue cycles, units and stream ids, in canonical order; with
/// `originOf`, each one's task origin (Task::origin) beside it.
std::vector<isa::Instruction> emitInstructions(const Problem& problem, const Schedule& schedule,
                                               std::vector<std::int32_t>* originOf = nullptr);

/// MEM slices have one queue, one read port and one write port (docs/machine-model.md): the queue
/// dispatches one instruction per cycle, a read (write) holds the read (write) port for its repeats,
/// and a read and a write running at once on one slice must never touch the same bank in one cycle.
/// The first cycle in which runs a (issued at issueA) and b (at issueB) hit one bank, or -1.
Cycle firstSharedBankCycle(const topology::ChipSpec& chip, const isa::Instruction& a, Cycle issueA,
                           const isa::Instruction& b, Cycle issueB);
/// Index of a MEM step's port among all ports: 2 x slice + (0 read, 1 write).
inline int memPortOf(const topology::ChipSpec& chip, const isa::Instruction& inst) {
  return 2 * (inst.unit - chip.firstUnit(topology::UnitKind::kMem)) + (inst.op == isa::Opcode::kMemWrite ? 1 : 0);
}
/// Is the instruction a MEM read or write?
inline bool isMemAccess(const isa::Instruction& inst) {
  return inst.op == isa::Opcode::kMemRead || inst.op == isa::Opcode::kMemWrite;
}

/// The interchangeable units a unit belongs to (`count` units from `first`): the VXM ALU groups, or
/// the SXM units of one hemisphere (each set shares one slice); any other unit is a pool of one.
struct UnitPool {
  int first = 0, count = 1;
};
/// The pool of a unit; the scheduler may run a step on any unit of its step's pool.
UnitPool unitPool(const topology::ChipSpec& chip, int unit);
/// Is a unit one of an interchangeable pool of several?
inline bool pooledUnit(const topology::ChipSpec& chip, int unit) { return unitPool(chip, unit).count > 1; }

}  // namespace tsp::schedule
