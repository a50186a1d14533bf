// The cycle-accurate TSP chip: executes a Program as events of known length and checks every hazard.
#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "sim/chip.h"
#include "sim/utilization.h"

namespace tsp::sim {

using isa::Direction;
using isa::Instruction;
using isa::Opcode;
using topology::UnitKind;

namespace {

__extension__ typedef __int128 Wide;  // exact products of cycle counts

// Values an instruction put on one stream: value i enters at `slice` in cycle first + i*interval
// and travels `reach` slices in the stream's direction. In the value's moving frame
// (tau = cycle - slice eastward, cycle + slice westward) each value is a single point.
struct StreamRun {
  int slice = 0;
  Cycle first = 0;
  Cycle interval = 1;
  std::int64_t count = 1;
  int reach = 0;
  std::int64_t programIndex = 0;

  Cycle tau0(Direction dir) const { return dir == Direction::kEast ? first - slice : first + slice; }
  Cycle tauLast(Direction dir) const { return tau0(dir) + (count - 1) * interval; }
  int lowSlice(Direction dir) const { return dir == Direction::kEast ? slice : slice - reach; }
  int highSlice(Direction dir) const { return dir == Direction::kEast ? slice + reach : slice; }
};

// Smallest common point of {a + i*da, i < na} and {b + j*db, j < nb}, or -1 (points are >= 0 here
// after shifting, so -1 is free as "none").
std::int64_t extendedGcd(std::int64_t a, std::int64_t b, std::int64_t& x, std::int64_t& y) {
  if (b == 0) {
    x = 1;
    y = 0;
    return a;
  }
  std::int64_t x1, y1;
  const std::int64_t g = extendedGcd(b, a % b, x1, y1);
  x = y1;
  y = x1 - (a / b) * y1;
  return g;
}

std::optional<std::int64_t> firstCommon(std::int64_t a, std::int64_t da, std::int64_t na, std::int64_t b,
                                        std::int64_t db, std::int64_t nb) {
  if (na == 1) da = 1;
  if (nb == 1) db = 1;
  const std::int64_t lo = std::max(a, b);
  const std::int64_t hi = std::min(a + (na - 1) * da, b + (nb - 1) * db);
  if (lo > hi) return std::nullopt;
  if (na == 1) return ((a - b) % db == 0 && a >= b && a <= hi) ? std::optional(a) : std::nullopt;
  if (nb == 1) return ((b - a) % da == 0 && b >= a && b <= hi) ? std::optional(b) : std::nullopt;
  // x = a + i*da = b + j*db  ->  i*da - j*db = b - a.
  std::int64_t p, q;
  const std::int64_t g = extendedGcd(da, db, p, q);
  if ((b - a) % g != 0) return std::nullopt;
  const std::int64_t period = da / g * db;
  // One solution x0 = a + da * (p * (b - a) / g), reduced modulo the period.
  const Wide step = static_cast<Wide>(p) * ((b - a) / g) % (db / g);
  Wide x0 = static_cast<Wide>(a) + static_cast<Wide>(da) * step;
  // Move x0 to the first value >= lo.
  Wide k = (static_cast<Wide>(lo) - x0) / period;
  x0 += k * period;
  while (x0 < lo) x0 += period;
  while (x0 - period >= lo) x0 -= period;
  if (x0 > hi) return std::nullopt;
  return static_cast<std::int64_t>(x0);
}

class TspChip final : public Chip {
 public:
  TspChip(int chipId, const topology::ChipSpec& spec, std::shared_ptr<const isa::Program> program,
          std::vector<PortBinding> ports, const SimOptions& options)
      : id_(chipId), spec_(spec), units_(spec.units()), program_(std::move(program)), ports_(std::move(ports)),
        options_(options) {
    unitFree_.assign(units_.size(), 0);
    stats_.unitBusy.assign(units_.size(), 0);
    linkFree_.assign(ports_.size(), 0);
    inbound_.resize(ports_.size());
    planeReady_.assign(spec_.mxmPlanes, -1);
    maxAddress_.assign(spec_.memSlices, -1);
    timeline_.assign(static_cast<size_t>(topology::kUnitKindCount) * options_.bins, 0.0);
    for (size_t p = 0; p < ports_.size(); ++p)
      if (ports_[p].link >= 0) stats_.links.push_back({ports_[p].link, ports_[p].aToB, 0, 0});
  }

  Status advanceTo(Cycle end) override {
    const auto& list = program_->instructions;
    while (next_ < list.size() && list[next_].issue < end) {
      if (auto s = execute(list[next_], static_cast<std::int64_t>(next_)); !s) return s;
      ++next_;
    }
    if (next_ == list.size() && !finished_) finish();
    return {};
  }

  void deliver(const C2CBurst& burst) override {
    auto& queue = inbound_.at(burst.dstPort);
    queue.insert(std::upper_bound(queue.begin(), queue.end(), burst), burst);
    stats_.bytesReceived += burst.bytes;
  }

  std::vector<C2CBurst> takeOutgoing() override { return std::exchange(outgoing_, {}); }

  Cycle nextEventCycle() const override {
    return next_ < program_->instructions.size() ? program_->instructions[next_].issue : kNever;
  }

  const ChipStats& stats() const override { return stats_; }

 private:
  Diagnostic hazard(const Instruction& inst, std::int64_t index, Cycle cycle, const std::string& what) const {
    const auto& unit = units_[inst.unit];
    return makeError(ExitCode::kHazard,
                     fmt::format("hazard at cycle {}, chip {}, unit {} ({} {} at slice {}), instruction #{} ({}): {}",
                                 cycle, id_, inst.unit, topology::unitKindName(unit.kind), unit.indexInKind,
                                 unit.slice, index, isa::opcodeName(inst.op), what));
  }

  std::deque<StreamRun>& runsOf(isa::StreamRef ref) { return streams_[{ref.id, static_cast<int>(ref.dir)}]; }

  // Two runs on one stream collide when a value of each occupies the same (slice, cycle).
  std::optional<Cycle> collision(const StreamRun& a, const StreamRun& b, Direction dir) const {
    if (a.highSlice(dir) < b.lowSlice(dir) || b.highSlice(dir) < a.lowSlice(dir)) return std::nullopt;
    const auto tau = firstCommon(a.tau0(dir), a.interval, a.count, b.tau0(dir), b.interval, b.count);
    if (!tau) return std::nullopt;
    const int slice = std::max(a.lowSlice(dir), b.lowSlice(dir));
    return dir == Direction::kEast ? *tau + slice : *tau - slice;
  }

  Status checkCollisions(std::deque<StreamRun>& runs, size_t changed, Direction dir, const Instruction& inst,
                         std::int64_t index, isa::StreamRef ref) {
    for (size_t r = 0; r < runs.size(); ++r) {
      if (r == changed) continue;
      if (auto cycle = collision(runs[r], runs[changed], dir))
        return hazard(inst, index, *cycle,
                      fmt::format("two values on stream {} {} at once (instructions #{} and #{})", ref.id,
                                  dir == Direction::kEast ? "east" : "west", runs[r].programIndex,
                                  runs[changed].programIndex));
    }
    return {};
  }

  // Reads of inst from stream ref: value j must pass the unit's slice exactly at issue + j*interval,
  // and exactly one run may be able to put a value there (two would share the stream cell).
  Status checkRead(const Instruction& inst, std::int64_t index, isa::StreamRef ref) {
    auto& runs = runsOf(ref);
    const int slice = units_[inst.unit].slice;
    const Cycle firstRead = inst.issue;
    std::optional<size_t> match;
    int matchDistance = 0;
    for (size_t r = runs.size(); r-- > 0;) {
      const StreamRun& run = runs[r];
      const int distance = ref.dir == Direction::kEast ? slice - run.slice : run.slice - slice;
      if (distance < 0) continue;
      const Cycle emitted = firstRead - distance;  // when value 0 of this read left the producer
      if (emitted < run.first || (emitted - run.first) % run.interval != 0) continue;
      const std::int64_t i0 = (emitted - run.first) / run.interval;
      if (i0 >= run.count) continue;
      if (inst.repeat > 1) {
        if (inst.interval % run.interval != 0) continue;
        const std::int64_t last = i0 + std::int64_t{inst.repeat - 1} * (inst.interval / run.interval);
        if (last >= run.count) continue;
      }
      if (match)
        return hazard(inst, index, firstRead,
                      fmt::format("two values on stream {} {} at once at slice {} (instructions #{} and #{})", ref.id,
                                  ref.dir == Direction::kEast ? "east" : "west", slice, runs[*match].programIndex,
                                  run.programIndex));
      match = r;
      matchDistance = distance;
    }
    if (!match)
      return hazard(inst, index, firstRead,
                    fmt::format("reads stream {} {} at slice {} but no value is passing there then (time of flight)",
                                ref.id, ref.dir == Direction::kEast ? "east" : "west", slice));
    if (matchDistance > runs[*match].reach) {
      runs[*match].reach = matchDistance;
      if (auto s = checkCollisions(runs, *match, ref.dir, inst, index, ref); !s) return s;
    }
    return {};
  }

  Status writeStream(const Instruction& inst, std::int64_t index, isa::StreamRef ref) {
    auto& runs = runsOf(ref);
    // A later read or run has moving-frame point >= issue - sliceCount, so older runs are done.
    const Cycle horizon = inst.issue - spec_.sliceCount() - 1;
    while (!runs.empty() && runs.front().tauLast(ref.dir) < horizon) runs.pop_front();
    StreamRun run;
    run.slice = units_[inst.unit].slice;
    run.first = inst.issue + isa::resultLatency(spec_, inst);
    run.interval = inst.interval;
    run.count = inst.repeat;
    run.programIndex = index;
    runs.push_back(run);
    return checkCollisions(runs, runs.size() - 1, ref.dir, inst, index, ref);
  }

  Status execute(const Instruction& inst, std::int64_t index) {
    if (inst.unit < 0 || inst.unit >= static_cast<int>(units_.size()))
      return makeError(ExitCode::kHazard, fmt::format("chip {}: instruction #{} names unit {}, which does not exist",
                                                      id_, index, inst.unit));
    const auto& unit = units_[inst.unit];
    if (inst.repeat < 1 || inst.interval < 1) return hazard(inst, index, inst.issue, "repeat and interval must be >= 1");
    if (inst.op != Opcode::kNop && isa::unitKindOf(inst.op) != unit.kind)
      return hazard(inst, index, inst.issue, "opcode cannot run on this kind of unit");
    if (inst.issue < unitFree_[inst.unit])
      return hazard(inst, index, inst.issue,
                    fmt::format("issued while the unit is busy until cycle {}", unitFree_[inst.unit]));

    if (inst.op == Opcode::kMemRead || inst.op == Opcode::kMemWrite) {
      const std::int64_t last = inst.address + std::int64_t{inst.stride} * (inst.repeat - 1);
      if (inst.address < 0 || inst.address >= spec_.addressesPerSlice || last < 0 || last >= spec_.addressesPerSlice)
        return hazard(inst, index, inst.issue,
                      fmt::format("SRAM address {}..{} out of range [0, {})", inst.address, last,
                                  spec_.addressesPerSlice));
      maxAddress_[unit.indexInKind] = std::max<std::int64_t>(maxAddress_[unit.indexInKind], std::max<std::int64_t>(inst.address, last));
    }
    if (inst.src.valid())
      if (auto s = checkRead(inst, index, inst.src); !s) return s;
    if (inst.src2.valid())
      if (auto s = checkRead(inst, index, inst.src2); !s) return s;

    if (inst.op == Opcode::kMxmInstall) planeReady_[unit.indexInKind / 2] = isa::completion(spec_, inst);
    if (inst.op == Opcode::kMxmCompute) {
      const Cycle ready = planeReady_[unit.indexInKind / 2];
      if (ready < 0 || ready > inst.issue)
        return hazard(inst, index, inst.issue, "MXM compute before its weights are installed");
    }
    if (inst.op == Opcode::kC2cSend || inst.op == Opcode::kC2cReceive) {
      if (inst.port < 0 || inst.port >= static_cast<int>(ports_.size()) || ports_[inst.port].link < 0)
        return hazard(inst, index, inst.issue, fmt::format("C2C port {} is not connected", inst.port));
    }
    if (inst.op == Opcode::kC2cSend) {
      if (auto s = send(inst, index); !s) return s;
    }
    if (inst.op == Opcode::kC2cReceive) {
      if (auto s = receive(inst, index); !s) return s;
    }
    if (inst.dst.valid())
      if (auto s = writeStream(inst, index, inst.dst); !s) return s;

    unitFree_[inst.unit] = isa::unitFreeAt(spec_, inst);
    const Cycle busy = isa::busyPerIssue(spec_, inst) * inst.repeat;
    stats_.unitBusy[inst.unit] += busy;
    stats_.kindBusy[static_cast<int>(unit.kind)] += busy;
    addToTimeline(timeline_, options_, static_cast<int>(unit.kind), inst.issue,
                  inst.issue + Cycle{inst.repeat - 1} * inst.interval + isa::busyPerIssue(spec_, inst), busy);
    lastCompletion_ = std::max(lastCompletion_, isa::completion(spec_, inst));
    ++stats_.instructions;
    if (options_.observer) options_.observer->instructionExecuted(id_, index, inst.issue, unitFree_[inst.unit]);
    return {};
  }

  Status send(const Instruction& inst, std::int64_t index) {
    const PortBinding& port = ports_[inst.port];
    const Cycle serialization = static_cast<Cycle>(std::ceil(spec_.vectorBytes / port.bytesPerCycle - 1e-9));
    if (inst.issue < linkFree_[inst.port])
      return hazard(inst, index, inst.issue,
                    fmt::format("C2C send on link {}, busy until cycle {}", port.link, linkFree_[inst.port]));
    if (inst.repeat > 1 && inst.interval < serialization)
      return hazard(inst, index, inst.issue,
                    fmt::format("C2C send every {} cycles, faster than link {} carries a vector ({} cycles)",
                                inst.interval, port.link, serialization));
    linkFree_[inst.port] = inst.issue + Cycle{inst.repeat - 1} * inst.interval + serialization;
    C2CBurst burst;
    burst.srcChip = id_;
    burst.srcPort = inst.port;
    burst.dstChip = port.peerChip;
    burst.dstPort = port.peerPort;
    burst.link = port.link;
    burst.sendCycle = inst.issue;
    burst.firstArrive = inst.issue + spec_.c2cSendCycles + port.latencyCycles;
    burst.vectors = inst.repeat;
    burst.interval = inst.interval;
    burst.bytes = Bytes{inst.repeat} * spec_.vectorBytes;
    outgoing_.push_back(burst);
    stats_.bytesSent += burst.bytes;
    for (auto& use : stats_.links)
      if (use.link == port.link && use.aToB == port.aToB) {
        use.bytes += burst.bytes;
        use.busyCycles += Cycle{inst.repeat} * serialization;
      }
    return {};
  }

  // Takes inst.repeat vectors from the port, in arrival order; vector j is read at issue + j*interval.
  Status receive(const Instruction& inst, std::int64_t index) {
    auto& queue = inbound_[inst.port];
    std::int64_t needed = inst.repeat, j = 0;
    while (needed > 0) {
      if (queue.empty())
        return hazard(inst, index, inst.issue + j * inst.interval,
                      fmt::format("C2C receive on port {} before the data has arrived (no vector in flight)",
                                  inst.port));
      C2CBurst& burst = queue.front();
      const std::int64_t take = std::min<std::int64_t>(needed, burst.vectors - consumed_[inst.port]);
      // Both sequences are arithmetic: checking the first and last vector of the segment suffices.
      for (std::int64_t k : {std::int64_t{0}, take - 1}) {
        const Cycle arrive = burst.firstArrive + (consumed_[inst.port] + k) * burst.interval;
        const Cycle read = inst.issue + (j + k) * inst.interval;
        if (arrive > read)
          return hazard(inst, index, read,
                        fmt::format("C2C receive on port {} reads a vector before it arrives (cycle {})", inst.port,
                                    arrive));
      }
      consumed_[inst.port] += take;
      needed -= take;
      j += take;
      if (consumed_[inst.port] == burst.vectors) {
        queue.erase(queue.begin());
        consumed_[inst.port] = 0;
      }
    }
    return {};
  }

  void finish() {
    finished_ = true;
    stats_.cycles = stats_.instructions > 0 ? lastCompletion_ + spec_.rippleCycles : 0;
    for (int a : maxAddress_)
      if (a >= 0) stats_.sramPeakBytes += Bytes{a + 1} * spec_.vectorBytes;
    int counts[topology::kUnitKindCount];
    for (int k = 0; k < topology::kUnitKindCount; ++k) counts[k] = spec_.unitCount(static_cast<UnitKind>(k));
    stats_.utilization = normalizeTimeline(timeline_, options_, counts);
  }

  int id_;
  const topology::ChipSpec& spec_;
  std::vector<topology::UnitInfo> units_;
  std::shared_ptr<const isa::Program> program_;
  std::vector<PortBinding> ports_;
  SimOptions options_;
  size_t next_ = 0;
  bool finished_ = false;
  std::vector<Cycle> unitFree_;
  std::vector<Cycle> linkFree_;
  std::vector<Cycle> planeReady_;
  std::vector<std::int64_t> maxAddress_;
  std::map<std::pair<int, int>, std::deque<StreamRun>> streams_;
  std::vector<std::vector<C2CBurst>> inbound_;
  std::map<int, std::int64_t> consumed_;
  std::vector<C2CBurst> outgoing_;
  std::vector<double> timeline_;
  Cycle lastCompletion_ = 0;
  ChipStats stats_;
};

}  // namespace

std::unique_ptr<Chip> makeTspChip(int chipId, const topology::ChipSpec& spec,
                                  std::shared_ptr<const isa::Program> program, std::vector<PortBinding> ports,
                                  const SimOptions& options) {
  return std::make_unique<TspChip>(chipId, spec, std::move(program), std::move(ports), options);
}

}  // namespace tsp::sim
