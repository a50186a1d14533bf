// The one-chip compiler pipeline: lower, schedule, anneal, colour streams (spilling to SRAM), verify, emit.
#include "compile/schedule/shard_compiler.h"

#include <algorithm>
#include <optional>
#include <cstring>
#include <set>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compile/alloc/stream_colouring.h"
#include "compile/schedule/annealer.h"
#include "compile/schedule/plane_order.h"
#include "compile/schedule/repeated_segments.h"
#include "support/cancel.h"

namespace tsp::schedule {

using isa::Opcode;
using topology::UnitKind;

std::string reportJson(const CompileReport& r) {
  nlohmann::json util;
  for (int k = 0; k < topology::kUnitKindCount; ++k)
    util[topology::unitKindName(static_cast<UnitKind>(k))] = r.utilisation[k];
  nlohmann::json j = {{"cycles", r.cycles},
                      {"list_cycles", r.listCycles},
                      {"lower_bound_cycles", r.lowerBound},
                      {"critical_path_cycles", r.criticalPath},
                      {"chosen_order_critical_path_cycles", r.chosenOrderCriticalPath},
                      {"busiest_resource_cycles", r.busiestResource},
                      {"plane_sequence_cycles", r.planeSequence},
                      {"resource_window_bound_cycles", r.resourceWindowBound},
                      {"makespan_over_lower_bound",
                       r.lowerBound > 0 ? static_cast<double>(r.cycles) / static_cast<double>(r.lowerBound) : 1.0},
                      {"utilisation", util},
                      {"mxm_mac_utilisation", r.mxmMacUtilisation},
                      {"sram_live_peak_bytes", r.sramPeakBytes},
                      {"sram_footprint_bytes", r.sramFootprintBytes},
                      {"sram_capacity_bytes", r.sramCapacityBytes},
                      {"spills", r.spills},
                      {"stream_registers", {{"east", r.streamRegisters[0]}, {"west", r.streamRegisters[1]}}},
                      {"mem_accesses", r.memAccesses},
                      {"bank_conflict_rate", r.bankConflictRate()},
                      {"mem_delay_rate", r.memDelayRate()},
                      {"tasks", r.tasks},
                      {"instructions", r.instructions},
                      {"anneal_moves", r.annealMoves},
                      {"anneal_accepted", r.annealAccepted},
                      {"priority_weightings", r.priorityWeightings},
                      {"segments", {{"compiled", r.distinctSegments}, {"total", r.segments}}}};
  return j.dump(2);
}

Status spillEdge(lower::LoweredShard& shard, const StreamEdge& edge) {
  Problem& problem = shard.problem;
  const auto& chip = problem.chip();
  const int t = edge.task, p = edge.step;
  const Task original = problem.tasks()[t];
  const int n = static_cast<int>(original.steps.size());
  int consumer = -1;
  for (int k = 0; k < n; ++k)
    if (original.steps[k].producer == p || original.steps[k].producer2 == p) consumer = k;
  if (consumer < 0) return makeError(ExitCode::kInternal, "spill of a stream edge without a consumer");

  // The two halves of the task's tree once the edge p -> consumer is cut.
  std::vector<int> side(n, -1);
  std::vector<int> work = {p};
  side[p] = 0;
  while (!work.empty()) {
    const int v = work.back();
    work.pop_back();
    for (int w = 0; w < n; ++w) {
      const bool linked = original.steps[w].producer == v || original.steps[w].producer2 == v ||
                          original.steps[v].producer == w || original.steps[v].producer2 == w;
      const bool cut = (v == p && w == consumer) || (v == consumer && w == p);
      if (linked && !cut && side[w] < 0) side[w] = 0, work.push_back(w);
    }
  }
  for (int k = 0; k < n; ++k)
    if (side[k] < 0) side[k] = 1;

  alloc::SliceSet avoid;
  for (const auto& s : original.steps)
    if (problem.units()[s.inst.unit].kind == UnitKind::kMem) avoid.insert(problem.units()[s.inst.unit].indexInKind);
  const auto& src = original.steps[p].inst;
  auto slot = shard.sram.allocate(src.repeat, avoid);
  if (!slot)
    return makeError(ExitCode::kDoesNotFit,
                     fmt::format("shard does not fit in SRAM: a stream spill of task '{}' needs {} bytes, {} bytes "
                                 "live, {} bytes available",
                                 original.name, Bytes{src.repeat} * chip.vectorBytes, shard.sram.inUse(),
                                 shard.sram.capacity()));
  const int memUnit = chip.firstUnit(UnitKind::kMem) + slot->slice;

  Task halves[2];
  std::vector<int> newIndex(n, -1);
  for (int k = 0; k < n; ++k) {
    newIndex[k] = static_cast<int>(halves[side[k]].steps.size()) + (side[k] == 1 ? 1 : 0);
    halves[side[k]].steps.push_back(original.steps[k]);
  }
  // Half 1 starts with the MEM read of the slot; its steps shift by one.
  schedule::Step read;
  read.inst.unit = memUnit;
  read.inst.op = Opcode::kMemRead;
  read.inst.repeat = src.repeat;
  read.inst.interval = src.interval;
  read.inst.address = slot->address;
  read.inst.stride = 1;
  halves[1].steps.insert(halves[1].steps.begin(), read);
  for (int h = 0; h < 2; ++h)
    for (auto& s : halves[h].steps) {
      if (&s == &halves[1].steps[0] && h == 1) continue;
      for (int* ref : {&s.producer, &s.producer2}) {
        if (*ref < 0) continue;
        if (side[*ref] == h) *ref = newIndex[*ref];
        else *ref = 0;  // the cut edge: in half 1 the consumer now reads the slot
      }
      // A rigid link into the other half cannot hold: the halves are placed apart.
      // A send cut from the segment before it is a stream of its own.
      if (s.follows >= 0) s.follows = side[s.follows] == h ? newIndex[s.follows] : -1;
      if (s.follows < 0) s.linkFrom = 0;
    }
  schedule::Step write;
  write.inst.unit = memUnit;
  write.inst.op = Opcode::kMemWrite;
  write.inst.repeat = src.repeat;
  write.inst.interval = src.interval;
  write.inst.address = slot->address;
  write.inst.stride = 1;
  write.producer = newIndex[p];
  halves[0].steps.push_back(write);
  const int writeStep = static_cast<int>(halves[0].steps.size()) - 1;
  for (int h = 0; h < 2; ++h) {
    halves[h].name = fmt::format("{} (spill {})", original.name, h == 0 ? "store" : "load");
    halves[h].release = original.release;
    const bool hasSend = std::any_of(halves[h].steps.begin(), halves[h].steps.end(),
                                     [](const Step& s) { return s.inst.op == Opcode::kC2cSend; });
    halves[h].deadline = hasSend ? original.deadline : -1;
    halves[h].untimed = hasSend && original.untimed;
  }
  problem.mutableTasks()[t] = halves[0];
  const int second = problem.addTask(halves[1]);
  for (auto& d : problem.mutableDependences()) {
    if (d.from == t) {
      if (side[d.fromStep] == 1) d.from = second;
      d.fromStep = newIndex[d.fromStep];
    }
    if (d.to == t) {
      if (side[d.toStep] == 1) d.to = second;
      d.toStep = newIndex[d.toStep];
    }
  }
  problem.addDataDependence(t, writeStep, second, 0);
  // A send task whose C2C send moved to the second half is now that half.
  for (auto& tasks : shard.sendTasks)
    for (int& task : tasks)
      if (task == t)
        for (int k = 0; k < n; ++k)
          if (original.steps[k].inst.op == Opcode::kC2cSend && side[k] == 1) task = second;
  problem.finalize();
  return {};
}

namespace {

// Per MEM slice the highest address a MEM read or write or a weight install touches + 1, summed
// over the slices: the simulator's `sram_peak_bytes` of the chip.
Bytes sramFootprint(const topology::ChipSpec& chip, const std::vector<isa::Instruction>& instructions) {
  std::vector<std::int64_t> top(static_cast<size_t>(chip.memSlices), -1);
  const int memFirst = chip.firstUnit(UnitKind::kMem);
  for (const auto& inst : instructions) {
    std::int64_t last = -1;
    int slice = -1;
    if (isMemAccess(inst)) {
      slice = inst.unit - memFirst;
      last = inst.address + std::int64_t{inst.stride} * (inst.repeat - 1);
    } else if (inst.op == Opcode::kMxmInstall) {
      slice = inst.weightUnit - memFirst;
      last = inst.address + std::max(1, inst.weightRows) - 1;
    }
    if (slice >= 0 && slice < chip.memSlices && inst.address >= 0)
      top[static_cast<size_t>(slice)] = std::max({top[static_cast<size_t>(slice)], std::int64_t{inst.address}, last});
  }
  Bytes total = 0;
  for (std::int64_t a : top)
    if (a >= 0) total += Bytes{a + 1} * chip.vectorBytes;
  return total;
}

void fillReport(const Problem& problem, const Schedule& schedule, const lower::LoweredShard& shard, CompileReport& r) {
  const auto& chip = problem.chip();
  Cycle kindBusy[topology::kUnitKindCount] = {};
  const auto& tasks = problem.tasks();
  for (size_t t = 0; t < tasks.size(); ++t)
    for (size_t k = 0; k < tasks[t].steps.size(); ++k) {
      const auto kind = problem.units()[tasks[t].steps[k].inst.unit].kind;
      kindBusy[static_cast<int>(kind)] +=
          problem.unitEnd(static_cast<int>(t), static_cast<int>(k)) - tasks[t].steps[k].offset;
    }
  for (int k = 0; k < topology::kUnitKindCount; ++k) {
    const double capacity = static_cast<double>(chip.unitCount(static_cast<UnitKind>(k))) * static_cast<double>(schedule.makespan);
    r.utilisation[k] = capacity > 0 ? static_cast<double>(kindBusy[k]) / capacity : 0.0;
  }
  r.mxmMacUtilisation = schedule.makespan > 0 ? static_cast<double>(shard.macs) /
                                                    (static_cast<double>(chip.int8MacsPerCycle()) * static_cast<double>(schedule.makespan))
                                              : 0.0;
  r.memAccesses = schedule.memAccesses;
  r.delayedMemAccesses = schedule.delayedMemAccesses;
  r.bankDelayedMemAccesses = schedule.bankDelayedMemAccesses;
  r.tasks = static_cast<std::int64_t>(tasks.size());
  r.instructions = problem.instructionCount();
}

// The first round's list schedule of a lowered shard: the planes' run order searched from it, and with
// the priority portfolio the other weightings tried from the problem as lowered; `chosen` takes the
// weights of the shortest (the earlier on ties).
Expected<Schedule> firstListSchedule(lower::LoweredShard& shard, const Options& options, Options& chosen,
                                     CompileReport& report) {
  Problem& problem = shard.problem;
  const std::vector<Dependence> loweredDependences = problem.dependences();
  const auto loweredRuns = shard.planeRuns;
  auto listAndOrder = [&](const Options& with) -> Expected<Schedule> {
    auto list = scheduleList(problem, with);
    if (!list) return list.error();
    if (with.reorderPlanes) {
      auto reordered = orderPlaneRuns(shard, *list, with);
      if (!reordered) return reordered.error();
      if (*reordered) list = scheduleList(problem, with);
    }
    return list;
  };
  auto list = listAndOrder(chosen);
  if (!list) return list.error();
  if (!options.priorityPortfolio || nearBusiestPlane(shard, list->makespan)) return list;
  // The seed's priority with other weights (r/R_avg at each of portfolioBetas, no fanout), each
  // from the same lowered problem; the shortest list schedule goes on (the earlier on ties).
  for (const double beta : options.portfolioBetas) {
    const std::vector<Dependence> asBest = problem.dependences();
    const auto bestRuns = shard.planeRuns;
    problem.mutableDependences() = loweredDependences;
    shard.planeRuns = loweredRuns;
    if (auto s = problem.check(); !s) return s.error();
    ++report.priorityWeightings;
    Options other = chosen;
    other.beta = beta;
    other.gamma = 0.0;
    auto tried = listAndOrder(other);
    if (!tried) return tried.error();
    if (tried->makespan < list->makespan) {
      list = std::move(tried);
      chosen = other;
    } else {
      problem.mutableDependences() = asBest;
      shard.planeRuns = bestRuns;
      if (auto s = problem.check(); !s) return s.error();
    }
  }
  return list;
}

// A shard whose layers repeat: the search (first round and annealing) runs on each distinct layer
// alone (segmentShard), each with an equal share of the work caps and a seed of its own; every
// repeat takes its layer's planes' run order, and the whole shard is placed by one pass of the
// list scheduler's decoder over the layers in order, each layer's tasks ranked by their start in
// its layer's schedule. Placement, SRAM and every constraint stay those of the whole shard.
// Nothing when few layers repeat, when there is no search to share, or in a shard with C2C.
Expected<std::optional<Schedule>> scheduleRepeatedLayers(lower::LoweredShard& shard, const Options& options,
                                                         CompileReport& report) {
  if (!options.shareRepeatedLayers || (options.annealMoves == 0 && !options.reorderPlanes && !options.priorityPortfolio))
    return std::optional<Schedule>{};
  Problem& problem = shard.problem;
  for (const auto& task : problem.tasks())
    for (const auto& step : task.steps)
      if (step.inst.op == Opcode::kC2cSend || step.inst.op == Opcode::kC2cReceive) return std::optional<Schedule>{};
  // Searched layer by layer when at least as many layers repeat an earlier one as are distinct: the
  // search's work then shrinks with the repeats. With fewer, the whole shard's search, which sees
  // across the layers, is kept (ResNet-50: 12 distinct layers of 18 give a makespan 3 % longer).
  const ShardSegments segments = shardSegments(shard);
  if (segments.distinct() == 0 || segments.count() - segments.distinct() < segments.distinct())
    return std::optional<Schedule>{};  // no layer (a graph folded to constants), or too few repeats
  report.segments = segments.count();
  report.distinctSegments = segments.distinct();
  Options each = options;
  each.annealWork = options.annealWork / segments.distinct();
  each.planeOrderWork = options.planeOrderWork / segments.distinct();
  std::vector<std::vector<Cycle>> startOf(static_cast<size_t>(segments.count()));
  int weightings = 1;
  for (int s = 0; s < segments.count(); ++s) {
    if (segments.representative[s] != s) continue;
    if (support::cancelRequested()) return support::interrupted();
    auto segment = segmentShard(shard, segments.begin[s], segments.begin[s + 1]);
    if (auto c = segment->problem.check(); !c) return c.error();
    Options own = each;
    own.seed = options.seed * 1000003ULL + static_cast<std::uint64_t>(s);
    Options chosen = own;
    CompileReport part;
    auto list = firstListSchedule(*segment, own, chosen, part);
    if (!list) return list.error();
    weightings = std::max(weightings, part.priorityWeightings);
    auto annealed = anneal(segment->problem, *list, chosen);
    if (!annealed) return annealed.error();
    report.annealMoves += annealed->moves;
    report.annealAccepted += annealed->accepted;
    startOf[s] = std::move(annealed->schedule.start);
  }
  report.priorityWeightings = weightings;
  // The whole shard's list schedule (the lowering's plane order, the seed's priority), kept when the
  // layers' searched orders do not beat it.
  auto whole = scheduleList(problem, options);
  if (!whole) return whole.error();
  const std::vector<Dependence> asLowered = problem.dependences();
  const auto loweredRuns = shard.planeRuns;
  // Per task: its layer, and its start in its layer's representative's schedule.
  std::vector<std::pair<int, Cycle>> at(problem.tasks().size());
  for (int s = 0; s < segments.count(); ++s)
    for (int t = segments.begin[s]; t < segments.begin[s + 1]; ++t)
      at[t] = {s, startOf[segments.representative[s]][t - segments.begin[s]]};
  // Every plane's runs, layer after layer; a repeat's runs on a plane go in the order their
  // counterparts' first computes start in its representative's schedule.
  std::vector<std::vector<lower::PlaneRun>> planes = shard.planeRuns;
  for (auto& runs : planes)
    std::stable_sort(runs.begin(), runs.end(), [&](const lower::PlaneRun& a, const lower::PlaneRun& b) {
      return at[a.firstCompute] < at[b.firstCompute];
    });
  setPlaneOrder(shard, std::move(planes));
  if (auto c = problem.check(); !c) return c.error();
  // The decoder places the layers one after another, each layer's tasks in that order.
  std::vector<int> order(problem.tasks().size());
  for (size_t t = 0; t < order.size(); ++t) order[t] = static_cast<int>(t);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return at[a] < at[b]; });
  std::vector<std::int64_t> rank(order.size());
  for (size_t k = 0; k < order.size(); ++k) rank[order[k]] = static_cast<std::int64_t>(k);
  auto best = scheduleInOrder(problem, rank, options);
  if (!best) return best.error();
  if (whole->makespan < best->makespan) {
    problem.mutableDependences() = asLowered;
    shard.planeRuns = loweredRuns;
    if (auto c = problem.check(); !c) return c.error();
    best = std::move(*whole);
  }
  report.listCycles = best->makespan;
  return std::optional<Schedule>(std::move(*best));
}

}  // namespace

namespace {

// Raises each task's release so that none of its steps issues on a unit before options.unitRelease has it free.
void releaseUnits(Problem& problem, const std::vector<std::pair<int, Cycle>>& unitRelease) {
  const auto& units = problem.units();
  std::vector<Cycle> freeAt(units.size(), 0);
  for (const auto& [unit, at] : unitRelease)
    if (unit >= 0 && unit < static_cast<int>(units.size())) freeAt[unit] = std::max(freeAt[unit], at);
  for (auto& task : problem.mutableTasks())
    for (const auto& step : task.steps) {
      const int unit = step.inst.unit;
      if (unit < 0 || unit >= static_cast<int>(units.size())) continue;
      const int resource = units[unit].kind == topology::UnitKind::kMxm ? unit - units[unit].indexInKind % 2 : unit;
      task.release = std::max(task.release, freeAt[resource] - step.offset);
    }
}

}  // namespace

Expected<CompiledShard> compileShard(const topology::ChipSpec& chip, const ir::Graph& graph,
                                     const std::vector<ir::OpId>& ops, const lower::ShardInterface& interface,
                                     const Options& options) {
  if (support::cancelRequested()) return support::interrupted();
  auto lowered = lower::lowerShard(chip, graph, ops, interface);
  if (!lowered) return lowered.error();
  lower::LoweredShard& shard = **lowered;
  Problem& problem = shard.problem;
  if (!options.unitRelease.empty()) releaseUnits(problem, options.unitRelease);
  CompiledShard result;
  CompileReport& report = result.report;

  constexpr int kSpillRounds = 4;
  Schedule schedule;
  auto shared = scheduleRepeatedLayers(shard, options, report);
  if (!shared) return shared.error();
  if (*shared) {
    schedule = std::move(**shared);
    const alloc::StreamColouring colouring = alloc::colourStreams(problem, schedule);
    if (!colouring.spilled.empty()) {
      // A spill would change the problem the layers were searched on: the shard is compiled whole.
      Options whole = options;
      whole.shareRepeatedLayers = false;
      return compileShard(chip, graph, ops, interface, whole);
    }
    schedule.streamId = colouring.streamId;
    report.streamRegisters[0] = colouring.registersUsed[0];
    report.streamRegisters[1] = colouring.registersUsed[1];
  }
  Options chosen = options;  // the priority weights the first round found better
  for (int round = 0; !*shared; ++round) {
    if (auto s = problem.check(); !s) return s.error();
    // The last round keeps stream pressure within the registers, so a colouring always exists.
    Options roundOptions = chosen;
    if (round == kSpillRounds) roundOptions.limitStreamPressure = true;
    Expected<Schedule> list = round == 0 ? firstListSchedule(shard, roundOptions, chosen, report)
                                         : scheduleList(problem, roundOptions);
    if (!list) return list.error();
    if (round == 0) roundOptions = chosen;
    report.listCycles = list->makespan;
    auto annealed = anneal(problem, *list, roundOptions);
    if (!annealed) return annealed.error();
    report.annealMoves = annealed->moves;
    report.annealAccepted = annealed->accepted;
    schedule = std::move(annealed->schedule);
    const alloc::StreamColouring colouring = alloc::colourStreams(problem, schedule);
    if (colouring.spilled.empty()) {
      schedule.streamId = colouring.streamId;
      report.streamRegisters[0] = colouring.registersUsed[0];
      report.streamRegisters[1] = colouring.registersUsed[1];
      break;
    }
    if (round == kSpillRounds) {
      // The scheduler's own register choice is a valid colouring when pressure was limited.
      report.streamRegisters[0] = report.streamRegisters[1] = chip.streamsPerDirection;
      break;
    }
    // Spill cheapest-first edges one task at a time (a task split twice in a round would renumber).
    std::set<int> split;
    const auto edges = problem.streamEdges();
    for (int e : colouring.spilled) {
      if (split.count(edges[e].task)) continue;
      split.insert(edges[e].task);
      if (auto s = spillEdge(shard, edges[e]); !s) return s.error();
      ++report.spills;
    }
  }
  if (auto s = verify(problem, schedule); !s) return s.error();

  // The bound leaves out the chains of the planes' runs (an order the scheduler chose); the
  // critical path in that order is reported beside it.
  const std::vector<Dependence> chains = planeChains(problem, shard.planeRuns);
  const LowerBound bound = lowerBound(problem, chains, planeSegments(problem, shard.planeRuns), options.boundRounds);
  report.cycles = schedule.makespan;
  report.lowerBound = bound.value();
  report.criticalPath = bound.criticalPath;
  report.chosenOrderCriticalPath = chains.empty() ? bound.criticalPath : criticalPath(problem);
  report.busiestResource = bound.busiestResource;
  report.planeSequence = bound.serialSegments;
  report.resourceWindowBound = bound.resourceWindow;
  report.sramPeakBytes = shard.sram.peak();
  report.sramCapacityBytes = shard.sram.capacity();
  fillReport(problem, schedule, shard, report);

  isa::Program& program = result.program;
  program.chipSpecHash = chip.hash();
  program.instructions = emitInstructions(problem, schedule, &program.originOf);
  program.origins = shard.origins;
  program.predictedCycles = schedule.makespan;
  program.lowerBoundCycles = bound.value();
  program.sramBytes = shard.sram.peak();
  report.sramFootprintBytes = sramFootprint(chip, program.instructions);
  program.tensors = shard.tensors;
  program.operands = shard.operands;
  program.accumulators = shard.accumulators;
  program.windows = shard.windows;
  program.folds = shard.folds;
  program.maps = shard.maps;
  program.refusals = shard.refusals;
  for (const auto& tasks : shard.sendTasks) {
    result.sendIssues.emplace_back();
    for (int t : tasks) {
      Cycle issue = -1;
      for (const auto& s : problem.tasks()[t].steps)  // the burst's first send (its segments follow it)
        if (s.inst.op == Opcode::kC2cSend && issue < 0) issue = schedule.start[t] + s.offset;
      result.sendIssues.back().push_back(issue);
    }
  }
  return result;
}

Expected<std::vector<CompiledShard>> compileShards(const topology::ChipSpec& chip, const std::vector<ShardJob>& jobs) {
  std::vector<CompiledShard> shards;
  shards.reserve(jobs.size());
  for (const auto& job : jobs) {
    auto shard = compileShard(chip, *job.graph, job.ops, job.interface, job.options);
    if (!shard) return shard.error();
    shards.push_back(std::move(*shard));
  }
  return shards;
}

namespace {

static_assert(std::is_trivially_copyable_v<CompileReport>, "CompileReport is copied as bytes");

void putWord(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

}  // namespace

std::string serializeCompiledShard(const CompiledShard& shard) {
  std::string out;
  const std::string program = isa::serializeBinary(shard.program);
  putWord(out, program.size());
  out += program;
  out.append(reinterpret_cast<const char*>(&shard.report), sizeof shard.report);
  putWord(out, shard.sendIssues.size());
  for (const auto& issues : shard.sendIssues) {
    putWord(out, issues.size());
    for (Cycle c : issues) putWord(out, static_cast<std::uint64_t>(c));
  }
  return out;
}

Expected<CompiledShard> deserializeCompiledShard(const std::string& bytes, const topology::ChipSpec& chip) {
  size_t at = 0;
  const auto truncated = [] { return makeError(ExitCode::kInternal, "a compiled shard's bytes are truncated"); };
  auto word = [&](std::uint64_t& v) {
    if (bytes.size() - at < sizeof v) return false;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return true;
  };
  std::uint64_t n = 0;
  if (!word(n) || bytes.size() - at < n) return truncated();
  auto program = isa::deserializeBinary(bytes.substr(at, n), chip, "a compiled shard");
  if (!program) return program.error();
  at += n;
  CompiledShard shard;
  shard.program = std::move(*program);
  if (bytes.size() - at < sizeof shard.report) return truncated();
  std::memcpy(&shard.report, bytes.data() + at, sizeof shard.report);
  at += sizeof shard.report;
  if (!word(n)) return truncated();
  shard.sendIssues.resize(n);
  for (auto& issues : shard.sendIssues) {
    std::uint64_t m = 0;
    if (!word(m) || (bytes.size() - at) / sizeof(std::uint64_t) < m) return truncated();
    issues.resize(m);
    for (Cycle& c : issues) {
      std::uint64_t v = 0;
      word(v);
      c = static_cast<Cycle>(v);
    }
  }
  if (at != bytes.size()) return makeError(ExitCode::kInternal, "a compiled shard's bytes run on past its end");
  return shard;
}

}  // namespace tsp::schedule
