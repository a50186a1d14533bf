// The cycle-accurate TSP chip: executes a Program as events of known length and checks every hazard.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "sim/chip.h"
#include "sim/event_program.h"
#include "sim/functional_state.h"
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
  Cycle first = 0;
  Cycle tauFirst = 0, tauEnd = 0;  // tau0 and tauLast on the run's stream, set by place()
  // The largest tauEnd of this run and of every run put on the stream before it (retired ones
  // included: a bound): a read or a run whose moving-frame points all come after it meets none of them.
  Cycle tauEndSoFar = 0;
  std::int64_t programIndex = 0;
  std::int32_t interval = 1;
  std::int32_t count = 1;
  std::int32_t slice = 0;
  std::int32_t reach = 0;
  // Pads a run to 64 bytes: a stream's run count and a run's place are then a shift, not a division
  // by 56 (and the allocation keeps the default alignment, which alignas(64) would not).
  std::int64_t padding = 0;

  Cycle tau0(Direction dir) const { return dir == Direction::kEast ? first - slice : first + slice; }
  Cycle tauLast(Direction dir) const { return tau0(dir) + Cycle{count - 1} * interval; }
  // Keeps the moving-frame span on a stream of direction dir, which the collision checks read.
  void place(Direction dir) {
    tauFirst = tau0(dir);
    tauEnd = tauLast(dir);
  }
  int lowSlice(Direction dir) const { return dir == Direction::kEast ? slice : slice - reach; }
  int highSlice(Direction dir) const { return dir == Direction::kEast ? slice + reach : slice; }
  // Stream hops of its values: count x reach.
  std::int64_t hops() const { return std::int64_t{count} * reach; }
};

// The live runs of one stream, oldest first. A vector with a moving head instead of a deque: an
// unused stream then costs no allocation, which keeps a chip instance small.
class StreamQueue {
 public:
  bool empty() const { return head_ == runs_.size(); }
  size_t size() const { return runs_.size() - head_; }
  StreamRun& operator[](size_t i) { return runs_[head_ + i]; }
  const StreamRun& operator[](size_t i) const { return runs_[head_ + i]; }
  StreamRun& front() { return runs_[head_]; }
  // Appends a placed run, setting its tauEndSoFar.
  void push_back(StreamRun run) {
    run.tauEndSoFar = runs_.empty() ? run.tauEnd : std::max(run.tauEnd, runs_.back().tauEndSoFar);
    runs_.push_back(run);
  }
  void pop_front() {
    if (++head_ * 2 >= runs_.size()) {  // compact once half the storage is dead
      runs_.erase(runs_.begin(), runs_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  // The first live run that may reach moving-frame point tau or later (tauEndSoFar >= tau): the
  // runs before it end earlier. tauEndSoFar grows with the index: a search from the newest run.
  size_t firstReaching(Cycle tau) const {
    size_t i = size();
    while (i > 0 && (*this)[i - 1].tauEndSoFar >= tau) --i;
    return i;
  }
  auto begin() const { return runs_.begin() + static_cast<std::ptrdiff_t>(head_); }
  auto end() const { return runs_.end(); }

 private:
  std::vector<StreamRun> runs_;
  size_t head_ = 0;
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
  if (da == 1 && db == 1) return lo;  // two runs of consecutive points (most runs): the overlap's start
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

// SplitMix64: a well-mixed hash of (seed, chip, link, cycle) for fault draws that do not depend on
// the order in which events run, or on how chips are spread over ranks.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Accesses of one MEM instruction to one port of its slice: access j in cycle first + j*interval
// at address + j*stride.
struct PortRun {
  Cycle first = 0;
  Cycle interval = 1;
  std::int64_t count = 0;
  std::int64_t address = 0;
  std::int64_t stride = 0;
  std::int64_t programIndex = -1;
  Cycle last() const { return first + (count - 1) * interval; }
};

enum Port { kReadPort = 0, kWritePort = 1 };

class TspChip final : public Chip {
 public:
  TspChip(int chipId, const topology::ChipSpec& spec, std::shared_ptr<const isa::Program> program,
          std::vector<PortBinding> ports, const SimOptions& options)
      : id_(chipId), spec_(spec), events_(EventProgram::of(program, spec)), units_(events_->units()),
        banks_(events_->banks()),
        program_(std::move(program)), ports_(std::move(ports)), options_(options),
        countHazards_(options.faults.enabled()), horizonSlices_(spec.sliceCount() + 1), timeline_(options) {
    unitFree_.assign(units_.size(), 0);
    stats_.unitBusy.assign(units_.size(), 0);
    stats_.unitStall.assign(units_.size(), 0);
    linkFree_.assign(ports_.size(), 0);
    streamVectors_.assign(ports_.size(), 0);
    streamSpacing_.assign(ports_.size(), 0.0);
    inbound_.resize(ports_.size());
    consumed_.assign(ports_.size(), 0);
    planeReady_.assign(spec_.mxmPlanes, -1);
    installsDone_.assign(spec_.mxmPlanes, 0);
    maxAddress_.assign(spec_.memSlices, -1);
    tensorWritten_.assign(events_->readTensors(), 0);
    firstEarlyRead_.assign(events_->readTensors(), -1);
    for (auto& p : portFree_) p.assign(spec_.memSlices, 0);
    for (auto& p : lastRun_) p.assign(spec_.memSlices, PortRun{});
    streams_.resize(2 * static_cast<size_t>(spec_.streamsPerDirection));
    for (size_t p = 0; p < ports_.size(); ++p)
      if (ports_[p].link >= 0) stats_.links.push_back({ports_[p].link, ports_[p].aToB, 0, 0});
    const auto& f = options_.faults;
    stallOn_ = f.stallUnit >= 0 && f.stallCycles > 0 && (f.stallChip < 0 || f.stallChip == id_);
    // Events run in (cycle, unit, program index) order. A canonical program is in that order
    // already; one that is not (made by hand, or by another tool), or a stall that moves one
    // queue's instructions later, gets an explicit order rather than the list's.
    const EventProgram& list = *events_;
    reordered_ = stallOn_ || !list.canonical();
    if (reordered_) {
      order_.resize(list.size());
      std::iota(order_.begin(), order_.end(), size_t{0});
      std::vector<Cycle> at(list.size());
      std::vector<std::int32_t> unitOf(list.size());
      for (size_t i = 0; i < list.size(); ++i) {
        const Event e = list.at(i);
        at[i] = e.issue + stallDelay(e);
        unitOf[i] = e.unit;
      }
      std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
        if (at[a] != at[b]) return at[a] < at[b];
        if (unitOf[a] != unitOf[b]) return unitOf[a] < unitOf[b];
        return a < b;
      });
    }
    cursor_ = list.begin();
    replayCursor_ = cursor_;
    // Timing mode without faults, in program order: the checks that depend on the program alone are
    // shared with the other chips running it (SharedChecks).
    if (options_.shareChecks && !options_.functional.enabled && !options_.faults.enabled() && !reordered_) {
      shared_ = list.sharedChecks(options_.bins, options_.binCycles);
      if (shared_->leading || shared_->complete.load(std::memory_order_acquire)) following_ = true;
      else leading_ = shared_->leading = true;
    }
    if (options_.functional.enabled) startFunctional();
    if (stallOn_) {
      // Out of program order, a compute could meet a stale or a later install: each compute
      // records how many installs of its plane precede it in the program.
      const int mxmFirst = spec_.firstUnit(UnitKind::kMxm), mxmEnd = mxmFirst + spec_.unitCount(UnitKind::kMxm);
      std::vector<std::int32_t> installsSoFar(spec_.mxmPlanes, 0);
      expectedInstalls_.assign(list.size(), 0);
      for (size_t i = 0; i < list.size(); ++i) {
        const Event e = list.at(i);
        if (e.unit < mxmFirst || e.unit >= mxmEnd) continue;
        const int plane = (e.unit - mxmFirst) / 2;
        if (e.op == Opcode::kMxmInstall) ++installsSoFar[plane];
        expectedInstalls_[i] = installsSoFar[plane];
      }
    }
  }

  ~TspChip() override {
    if (leading_) shared_->leading = false;
  }

  Status advanceTo(Cycle end) override {
    if (failure_) return *failure_;
    const EventProgram& list = *events_;
    const size_t count = list.size();
    if (!following_ && !reordered_ && !stallOn_) {
      if (!runInOrder(end)) return *failure_;
      if (next_ == count && !finished_) finish();
      return {};
    }
    Event moved;
    while (next_ < count) {
      if (following_ && !options_.observer && skipFollowed(end) && next_ == count) break;
      const size_t index = reordered_ ? order_[next_] : next_;
      // The event in place when its piece has no offset and no stall moves it; else a moved copy.
      const Event* inst;
      if (reordered_) {
        moved = list.at(index);
        inst = &moved;
      } else {
        inst = &eventAt(cursor_, moved);
      }
      if (stallOn_) {
        const Cycle delay = stallDelay(*inst);
        if (inst->issue + delay >= end) break;
        if (delay > 0 && inst->unit >= 0 && inst->unit < static_cast<int>(units_.size())) stats_.unitStall[inst->unit] = delay;
        if (inst != &moved) moved = *inst;
        moved.issue += delay;
        inst = &moved;
      } else if (inst->issue >= end) {
        break;
      }
      if (following_ && next_ < shared_->passed.load(std::memory_order_acquire)) {
        // A leader passed this event's program-only checks: only its C2C part is this chip's own.
        if (!follow(*inst, static_cast<std::int64_t>(index))) return *failure_;
      } else {
        if (following_) catchUp();
        if (!execute(*inst, static_cast<std::int64_t>(index))) return *failure_;
        if (following_) replayed_ = next_ + 1;
        if (leading_ && next_ + 1 > shared_->passed.load(std::memory_order_relaxed))
          shared_->passed.store(next_ + 1, std::memory_order_release);
      }
      ++next_;
      if (!reordered_) {
        list.step(cursor_);
        if (following_ && replayed_ == next_) copyCursor(replayCursor_, cursor_);
      }
    }
    if (next_ == count && !finished_) finish();
    return {};
  }

  // advanceTo of a chip that runs every check of its events in program order (no stall moves them):
  // the loop without the cases of a follower, a reordered program or a stall.
  bool runInOrder(Cycle end) {
    const EventProgram& list = *events_;
    const size_t count = list.size();
    Event moved;
    while (next_ < count) {
      const Event& inst = eventAt(cursor_, moved);
      if (inst.issue >= end) break;
      if (!execute(inst, static_cast<std::int64_t>(next_))) return false;
      ++next_;
      if (leading_ && next_ > shared_->passed.load(std::memory_order_relaxed))
        shared_->passed.store(next_, std::memory_order_release);
      list.step(cursor_);
    }
    return true;
  }

  void deliver(const C2CBurst& burst) override {
    auto& queue = inbound_.at(burst.dstPort);
    queue.insert(std::upper_bound(queue.begin(), queue.end(), burst), burst);
    stats_.bytesReceived += burst.bytes;
  }

  std::vector<C2CBurst> takeOutgoing() override { return std::exchange(outgoing_, {}); }

  Cycle nextEventCycle() const override {
    const EventProgram& list = *events_;
    if (next_ >= list.size()) return kNever;
    const Event inst = reordered_ ? list.at(order_[next_]) : list.at(cursor_);
    return inst.issue + (stallOn_ ? stallDelay(inst) : 0);
  }

  const ChipStats& stats() const override {
    // A follower's program-only statistics are brought up to date when asked for (rarely before the end).
    if (following_ && !finished_ && (replayed_ < next_ || c2cFailure_)) const_cast<TspChip*>(this)->catchUp();
    return stats_;
  }

  std::int64_t instructionsExecuted() const override { return stats_.instructions; }

  std::vector<double> readTensor(const isa::TensorPlacement& tensor, std::int64_t cols) const override {
    return values_ ? values_->read(tensor, cols) : std::vector<double>{};
  }

 private:
  // SRAM gets the resident tensors' values (inputs, weights) before the first instruction.
  void startFunctional() {
    values_ = std::make_unique<FunctionalState>(spec_, options_.functional.element);
    values_->reserve(*program_);
    for (const auto& tensor : program_->tensors) {
      if (!tensor.resident) continue;
      auto* known = options_.functional.resident.get();
      auto it = known ? known->find(tensor.name) : decltype(known->end()){};
      if (!known || it == known->end()) {
        failure_ = makeError(ExitCode::kInternal,
                             fmt::format("functional mode: chip {} has no values for its resident tensor '{}'", id_,
                                         tensor.name));
        return;
      }
      // The last placement the process makes of values nothing else holds: written as they are given back.
      const bool last = it->second.placements == 1;
      if (auto s = values_->place(tensor, it->second, last && it->second.data.use_count() == 1); !s) {
        failure_ = s.error();
        return;
      }
      // SRAM holds the values now.
      if (it->second.placements > 0 && --it->second.placements == 0) {
        it->second.data.reset();
        it->second.source = nullptr;
        it->second.map = nullptr;
      }
    }
    options_.functional.resident.reset();  // SRAM holds them now; the run's map can be let go
  }

  // An instruction functional mode cannot compute: the run ends (exit 2), naming it.
  bool notComputable(const Instruction& inst, std::int64_t index, const std::string& why) {
    const auto& unit = units_[inst.unit];
    failure_ = makeError(ExitCode::kModel,
                         fmt::format("functional mode cannot compute instruction #{} ({}{}) on chip {}, unit {} ({} {}): {}",
                                     index, isa::opcodeName(inst.op),
                                     inst.func != isa::VxmFunc::kNone ? fmt::format(" {}", isa::vxmFuncName(inst.func)) : std::string(),
                                     id_, inst.unit, topology::unitKindName(unit.kind), unit.indexInKind, why));
    return false;
  }

  // The vectors a consumer reads from a matched run: value first + j*step for j < repeat.
  struct ReadMatch {
    VectorRun values;
    std::int64_t first = 0, step = 1;
    std::int64_t producer = -1;  // program index of the instruction that put the values on the stream
  };

  // The tensors whose SRAM the producers of a's and b's values read ("'x', 'y'"), to name the op.
  std::string operandNames(const ReadMatch& a, const ReadMatch& b) const {
    std::vector<std::string> names;
    for (const ReadMatch* m : {&a, &b}) {
      if (m->producer < 0) continue;
      const Instruction p = instruction(m->producer);
      if (p.op != Opcode::kMemRead) continue;
      for (const auto& t : program_->tensors) {
        // Entries copy x tile x segment, each of at most segmentRows rows (scratch is in no entry).
        const std::int64_t segRows = t.segmentRows > 0 ? t.segmentRows : t.rows;
        for (size_t k = 0; k < t.memUnit.size(); ++k)
          if (t.memUnit[k] == p.unit && p.address >= t.address[k] && p.address < t.address[k] + segRows &&
              std::find(names.begin(), names.end(), fmt::format("'{}'", t.name)) == names.end())
            names.push_back(fmt::format("'{}'", t.name));
      }
    }
    return names.empty() ? std::string() : fmt::format(", on {}", fmt::join(names, ", "));
  }

  std::shared_ptr<std::vector<std::uint8_t>> gather(const Instruction& inst, const ReadMatch& match) const {
    const std::size_t vb = static_cast<std::size_t>(spec_.vectorBytes);
    auto out = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(inst.repeat) * vb);
    for (std::int32_t j = 0; j < inst.repeat; ++j)
      std::memcpy(out->data() + j * vb, match.values->data() + static_cast<std::size_t>(match.first + j * match.step) * vb, vb);
    return out;
  }

  // Functional mode: what inst computes from its stream operands; the result (or null) goes on dst.
  [[gnu::noinline]] bool computeValues(const Instruction& inst, std::int64_t index) {
    const ReadMatch& a = readA_;
    const ReadMatch& b = readB_;
    VectorRun& result = result_;
    result.reset();
    if (inst.timingOnly)
      return notComputable(inst, index, fmt::format("the lowering gives only its timing (it stands in for an op it does not "
                                                    "compute{})", operandNames(a, b)));
    std::shared_ptr<std::vector<std::uint8_t>> in, in2;
    if (inst.src.valid()) {
      if (!a.values) return notComputable(inst, index, "its source stream carries no values");
      in = gather(inst, a);
    }
    if (inst.src2.valid()) {
      if (!b.values) return notComputable(inst, index, "its second source stream carries no values");
      in2 = gather(inst, b);
    }
    // One tap of a window read: the stream's vectors realigned to the instruction's output pixels
    // (src's window, and src2's when an ALU step folds two taps).
    const isa::WindowRead* window = nullptr;
    for (const bool second : {false, true}) {
      auto tapWindow = FunctionalState::windowOf(inst, *program_, second);
      if (!tapWindow) return malformed(inst, index, tapWindow.error().message);
      if (!second) window = *tapWindow;
      auto& vectors = second ? in2 : in;
      if (!*tapWindow || !vectors) continue;
      auto tap = values_->windowTap(**tapWindow, *vectors, inst.repeat);
      if (!tap) return notComputable(inst, index, tap.error().message);
      vectors = std::make_shared<std::vector<std::uint8_t>>(std::move(*tap));
    }
    const auto& unit = units_[inst.unit];
    switch (inst.op) {
      case Opcode::kMemRead: result = values_->memRead(inst); return true;
      case Opcode::kMemWrite:
        if (!in) return notComputable(inst, index, "a write with no source stream");
        values_->memWrite(inst, *in);
        return true;
      case Opcode::kVxmUnary: case Opcode::kVxmBinary: {
        if ((!in && inst.func != isa::VxmFunc::kEmit) || (inst.op == Opcode::kVxmBinary && !in2))
          return notComputable(inst, index, "an ALU op without its operands");
        auto out = values_->vxm(inst, *program_, in.get(), inst.op == Opcode::kVxmBinary ? in2.get() : nullptr);
        if (!out) {
          if (out.error().code != ExitCode::kModel) return malformed(inst, index, out.error().message);
          return notComputable(inst, index, out.error().message);
        }
        result = *out;
        return true;
      }
      case Opcode::kMxmInstall:
        if (inst.weightUnit < spec_.firstUnit(UnitKind::kMem) || inst.weightUnit >= spec_.firstUnit(UnitKind::kMem) + spec_.memSlices)
          return notComputable(inst, index, "the install does not say which MEM slice holds its weights");
        if (auto s = values_->install(unit.indexInKind / 2, inst,
                                      inst.operand >= 0 && program_->operands[static_cast<size_t>(inst.operand)].transposed);
            !s)
          return notComputable(inst, index, s.error().message);
        return true;
      case Opcode::kMxmCompute: {
        if (!in) return notComputable(inst, index, "a compute with no activation stream");
        auto out = values_->compute(unit.indexInKind / 2, inst, *in);
        if (!out) return notComputable(inst, index, out.error().message);
        result = *out;
        return true;
      }
      case Opcode::kSxmShift:
        if (inst.sxm == isa::SxmFunc::kWindow && !window)
          return malformed(inst, index, "an SXM window shift without its window");
        if (inst.sxm == isa::SxmFunc::kLanes) {
          if (inst.operand < 0) return malformed(inst, index, "an SXM lane shift without its operand");
          result = values_->shiftLanes(program_->operands[static_cast<size_t>(inst.operand)], *in);
          return true;
        }
        if (inst.sxm == isa::SxmFunc::kPermute) {
          if (inst.operand < 0) return malformed(inst, index, "an SXM permute without its operand");
          auto out = values_->permute(*program_, program_->operands[static_cast<size_t>(inst.operand)], inst.repeat);
          if (!out) {
            if (out.error().code != ExitCode::kModel) return malformed(inst, index, out.error().message);
            return notComputable(inst, index, out.error().message);
          }
          result = *out;
          return true;
        }
        if (inst.sxm == isa::SxmFunc::kUnspecified)
          return notComputable(inst, index, fmt::format("the lowering does not say which permutation it applies{}",
                                                        operandNames(a, b)));
        result = in;
        return true;
      case Opcode::kC2cSend: pendingPayload_ = in; return true;
      default: return true;  // receives and forwards take their values in receive(); a NOP has none
    }
  }

  // The event at a cursor in program order: in place when its piece has no offset, else a moved copy.
  const Event& eventAt(const EventProgram::Cursor& c, Event& moved) const {
    const Cycle shift = events_->offset(c);
    if (shift == 0) return events_->body(c);
    moved = events_->body(c);
    moved.issue += shift;
    return moved;
  }

  // to = from, without touching the decoding's reference count while both are in one piece.
  static void copyCursor(EventProgram::Cursor& to, const EventProgram::Cursor& from) {
    if (to.hold != from.hold) to.hold = from.hold;
    to.segment = from.segment;
    to.at = from.at;
    to.count = from.count;
    to.offset = from.offset;
    to.events = from.events;
    to.c2c = from.c2c;
  }

  static bool isC2c(Opcode op) { return op == Opcode::kC2cSend || op == Opcode::kC2cReceive || op == Opcode::kC2cForward; }

  // A follower's event whose program-only checks a leader passed: its C2C part, its count and the
  // observer; the rest waits for catchUp().
  bool follow(const Event& inst, std::int64_t index) {
    if (isC2c(inst.op) && !c2c(inst, index, false)) {
      c2cFailure_ = true;
      return false;
    }
    ++stats_.instructions;
    if (options_.observer) options_.observer->instructionExecuted(id_, index, inst.issue, inst.unitFreeAt());
    return true;
  }

  // A follower with no observer passes over the events before `end` that a leader passed and that
  // have no C2C part, a piece at a time: it only counts them. Returns whether it moved.
  bool skipFollowed(Cycle end) {
    const size_t passed = shared_->passed.load(std::memory_order_acquire);
    const size_t from = next_;
    while (next_ < passed) {
      const size_t n = events_->plainBefore(cursor_, end, passed - next_, c2cMark_);
      if (n == 0) break;
      events_->skip(cursor_, n);
      next_ += n;
    }
    stats_.instructions += static_cast<std::int64_t>(next_ - from);
    return next_ > from;
  }

  // A follower does the program-only part of the events it followed, [replayed_, next_): its state
  // is then a full chip's. They pass (a leader passed them). A run that ended in the C2C part of
  // event next_ gets the part of that event a full chip did before it (its stream reads).
  void catchUp() {
    Event moved;
    while (replayed_ < next_) {
      (void)execute(eventAt(replayCursor_, moved), static_cast<std::int64_t>(replayed_), true);
      ++replayed_;
      events_->step(replayCursor_);
    }
    if (c2cFailure_) {
      c2cFailure_ = false;
      const Event& inst = eventAt(replayCursor_, moved);
      const auto index = static_cast<std::int64_t>(replayed_);
      const std::optional<Diagnostic> failure = std::move(failure_);
      if (inst.src.valid()) (void)checkRead(inst, index, inst.src);
      if (inst.src2.valid()) (void)checkRead(inst, index, inst.src2);
      failure_ = failure;
    }
  }

  // Instruction `index` of the program as written (its issue not moved by a stall).
  Instruction instruction(std::int64_t index) const {
    return events_->instruction(static_cast<size_t>(index), lookup_);
  }

  Cycle stallDelay(const Event& inst) const {
    if (!stallOn_) return 0;
    const auto& f = options_.faults;
    return inst.unit == f.stallUnit && inst.issue >= f.stallCycle ? f.stallCycles : 0;
  }

  template <typename Inst>
  Diagnostic describe(const Inst& inst, std::int64_t index, Cycle cycle, const std::string& what) const {
    const auto& unit = units_[inst.unit];
    return makeError(ExitCode::kHazard,
                     fmt::format("hazard at cycle {}, chip {}, unit {} ({} {} at slice {}), instruction #{} ({}): {}",
                                 cycle, id_, inst.unit, topology::unitKindName(unit.kind), unit.indexInKind,
                                 unit.slice, index, isa::opcodeName(inst.op), what));
  }

  // A hazard of the machine's timing: ends the run, or with faults injected is counted and the run goes on.
  // Returns whether the run goes on; the failure is kept for advanceTo.
  bool hazard(HazardKind kind, const Event& inst, std::int64_t index, Cycle cycle, const std::string& what) {
    Diagnostic d = describe(inst, index, cycle, what);
    if (!countHazards_) {
      failure_ = std::move(d);
      return false;
    }
    if (stats_.hazardCount() == 0) stats_.firstHazard = d.message;
    ++stats_.hazards[static_cast<int>(kind)];
    return true;
  }

  // hazard() with its message formatted when the hazard happens: out of line and cold, so that the
  // checks' hot code holds no formatting.
  template <typename... Args>
  [[gnu::cold, gnu::noinline]] bool hazardf(HazardKind kind, const Event& inst, std::int64_t index, Cycle cycle,
                                            fmt::format_string<Args...> format, Args&&... args) {
    return hazard(kind, inst, index, cycle, fmt::format(format, std::forward<Args>(args)...));
  }

  // A malformed program (a compiler bug, not a timing fault): always ends the run.
  template <typename Inst>
  bool malformed(const Inst& inst, std::int64_t index, const std::string& what) {
    failure_ = describe(inst, index, inst.issue, what);
    return false;
  }

  size_t streamIndex(isa::StreamRef ref) const {
    return static_cast<size_t>(ref.dir) * streamsPerDirection_ + ref.id;
  }
  StreamQueue& runsOf(isa::StreamRef ref) { return streams_[streamIndex(ref)]; }

  // Two runs on one stream collide when a value of each occupies the same (slice, cycle).
  std::optional<Cycle> collision(const StreamRun& a, const StreamRun& b, Direction dir) const {
    // Apart in the moving frame (most pairs: the older run has passed), or apart along the stream.
    if (a.tauEnd < b.tauFirst || b.tauEnd < a.tauFirst) return std::nullopt;
    if (a.highSlice(dir) < b.lowSlice(dir) || b.highSlice(dir) < a.lowSlice(dir)) return std::nullopt;
    const auto tau = firstCommon(a.tauFirst, a.interval, a.count, b.tauFirst, b.interval, b.count);
    if (!tau) return std::nullopt;
    const int slice = std::max(a.lowSlice(dir), b.lowSlice(dir));
    return dir == Direction::kEast ? *tau + slice : *tau - slice;
  }

  bool checkCollisions(StreamQueue& runs, size_t changed, Direction dir, const Event& inst,
                         std::int64_t index, isa::StreamRef ref) {
    const size_t live = runs.size();
    // Runs that end in the moving frame before the changed one starts cannot meet it.
    for (size_t r = runs.firstReaching(runs[changed].tauFirst); r < live; ++r) {
      if (r == changed) continue;
      if (auto cycle = collision(runs[r], runs[changed], dir))
        if (!hazardf(HazardKind::kStreamCollision, inst, index, *cycle,
                     "two values on stream {} {} at once (instructions #{} and #{})", ref.id,
                     dir == Direction::kEast ? "east" : "west", runs[r].programIndex, runs[changed].programIndex))
          return false;
    }
    return true;
  }

  // Reads of inst from stream ref: value j must pass the unit's slice exactly at issue + j*interval,
  // and exactly one run may be able to put a value there (two would share the stream cell).
  bool checkRead(const Event& inst, std::int64_t index, isa::StreamRef ref, ReadMatch* read = nullptr) {
    auto& runs = runsOf(ref);
    const int slice = inst.slice;
    const Cycle firstRead = inst.issue;
    std::optional<size_t> match;
    int matchDistance = 0;
    // Value 0 of the read in the moving frame: a run whose values all come before it holds none of
    // the read's values, nor do the runs before it when its tauEndSoFar does.
    const Cycle tauRead = ref.dir == Direction::kEast ? firstRead - slice : firstRead + slice;
    for (size_t r = runs.size(); r-- > 0;) {
      const StreamRun& run = runs[r];
      if (run.tauEndSoFar < tauRead) break;
      const int distance = ref.dir == Direction::kEast ? slice - run.slice : run.slice - slice;
      if (distance < 0) continue;
      const Cycle emitted = firstRead - distance;  // when value 0 of this read left the producer
      if (emitted < run.first) continue;
      std::int64_t i0 = emitted - run.first;  // most runs issue every cycle: no division then
      if (run.interval != 1) {
        if (i0 % run.interval != 0) continue;
        i0 /= run.interval;
      }
      if (i0 >= run.count) continue;
      if (inst.repeat > 1) {
        std::int64_t step = inst.interval;  // values of the run per read (no division for most runs)
        if (run.interval != 1) {
          if (inst.interval % run.interval != 0) continue;
          step /= run.interval;
        }
        const std::int64_t last = i0 + std::int64_t{inst.repeat - 1} * step;
        if (last >= run.count) continue;
      }
      if (match)
        return hazardf(HazardKind::kStreamCollision, inst, index, firstRead,
                       "two values on stream {} {} at once at slice {} (instructions #{} and #{})", ref.id,
                       ref.dir == Direction::kEast ? "east" : "west", slice, runs[*match].programIndex,
                       run.programIndex);
      match = r;
      matchDistance = distance;
    }
    if (!match)
      return hazardf(HazardKind::kTimeOfFlight, inst, index, firstRead,
                     "reads stream {} {} at slice {} but no value is passing there then (time of flight)", ref.id,
                     ref.dir == Direction::kEast ? "east" : "west", slice);
    if (read) {
      const StreamRun& run = runs[*match];
      const int distance = matchDistance;
      if (auto v = streamValues_.find(run.programIndex); v != streamValues_.end()) read->values = v->second;
      read->first = (firstRead - distance - run.first) / run.interval;
      read->step = inst.interval / run.interval;
      read->producer = run.programIndex;
    }
    if (matchDistance > runs[*match].reach) {
      runs[*match].reach = matchDistance;
      if (!checkCollisions(runs, *match, ref.dir, inst, index, ref)) return false;
    }
    return true;
  }

  bool writeStream(const Event& inst, std::int64_t index, isa::StreamRef ref) {
    auto& runs = runsOf(ref);
    // A later read or run has moving-frame point >= issue - sliceCount, so older runs are done.
    const Cycle horizon = inst.issue - horizonSlices_;
    while (!runs.empty() && runs.front().tauEnd < horizon) {
      stats_.streamHops += runs.front().hops();
      if (values_) streamValues_.erase(runs.front().programIndex);
      runs.pop_front();
    }
    StreamRun run;
    run.slice = inst.slice;
    run.first = inst.issue + inst.resultLatency;
    run.interval = inst.interval;
    run.count = inst.repeat;
    run.programIndex = index;
    run.place(ref.dir);
    if (values_ && result_) streamValues_[index] = std::move(result_);
    runs.push_back(run);
    return checkCollisions(runs, runs.size() - 1, ref.dir, inst, index, ref);
  }

  // ChipSpec::bankOf, from the decoded program's table.
  int bankOf(std::int64_t address) const {
    return address >= 0 && address < static_cast<std::int64_t>(banks_.size()) ? banks_[static_cast<size_t>(address)]
                                                                            : spec_.bankOf(static_cast<int>(address));
  }

  // Cycles in which a read run and a write run of one slice hit the same bank (the two ports
  // share a bank's single array). Stops at the first unless every one is to be counted.
  std::int64_t bankConflicts(const PortRun& a, const PortRun& b, bool all, Cycle& firstCycle) const {
    const auto common = firstCommon(a.first, a.interval, a.count, b.first, b.interval, b.count);
    if (!common) return 0;
    const Cycle da = a.count == 1 ? 1 : a.interval, db = b.count == 1 ? 1 : b.interval;
    const Cycle period = std::lcm(da, db);
    const Cycle hi = std::min(a.last(), b.last());
    std::int64_t found = 0;
    // From one common cycle to the next, each run's address moves by a fixed step (a run of one
    // access has no next common cycle).
    std::int64_t addressA = a.address + (*common - a.first) / a.interval * a.stride;
    std::int64_t addressB = b.address + (*common - b.first) / b.interval * b.stride;
    const std::int64_t stepA = a.count > 1 ? period / a.interval * a.stride : 0;
    const std::int64_t stepB = b.count > 1 ? period / b.interval * b.stride : 0;
    for (Cycle x = *common; x <= hi; x += period, addressA += stepA, addressB += stepB) {
      if (bankOf(addressA) != bankOf(addressB)) continue;
      if (found++ == 0) firstCycle = x;
      if (!all) break;
    }
    return found;
  }

  [[gnu::cold, gnu::noinline]] bool badBankField(const Event& inst, std::int64_t index) {
    return malformed(inst, index,
                     fmt::format("bank field {} disagrees with the chip's bank mapping (address {} is in bank {})",
                                 inst.bank, inst.address, spec_.bankOf(inst.address)));
  }

  // MEM: one read and one write port per slice; a read and a write in one cycle must use different banks.
  bool memAccess(const Event& inst, std::int64_t index) {
    const int slice = inst.indexInKind;
    const Port port = inst.op == Opcode::kMemRead ? kReadPort : kWritePort;
    const std::int64_t last = inst.address + std::int64_t{inst.stride} * (inst.repeat - 1);
    if (inst.checks & kBankField) return badBankField(inst, index);
    if (inst.address < 0 || inst.address >= spec_.addressesPerSlice || last < 0 || last >= spec_.addressesPerSlice)
      return hazardf(HazardKind::kSramRange, inst, index, inst.issue, "SRAM address {}..{} out of range [0, {})",
                     inst.address, last, spec_.addressesPerSlice);
    if (inst.issue < portFree_[port][slice])
      if (!hazardf(HazardKind::kUnitBusy, inst, index, inst.issue,
                   "issued while the MEM {} port is busy until cycle {} (instruction #{})",
                   port == kReadPort ? "read" : "write", portFree_[port][slice], lastRun_[port][slice].programIndex))
        return false;
    maxAddress_[slice] = std::max<std::int64_t>(maxAddress_[slice], std::max<std::int64_t>(inst.address, last));
    PortRun run{inst.issue, inst.interval, inst.repeat, inst.address, inst.stride, index};
    const PortRun& other = lastRun_[1 - port][slice];
    if (other.count > 0 && other.last() >= run.first) {
      Cycle at = 0;
      const std::int64_t conflicts = bankConflicts(run, other, countHazards_, at);
      if (conflicts > 0) {
        stats_.bankConflicts += conflicts;
        const int bank = spec_.bankOf(static_cast<int>(run.address + (at - run.first) / run.interval * run.stride));
        if (!hazardf(HazardKind::kBankConflict, inst, index, at,
                     "bank port conflict on MEM slice {} bank {}: a read and a write in one cycle "
                     "(instructions #{} and #{})",
                     slice, bank, other.programIndex, index))
          return false;
      }
    }
    lastRun_[port][slice] = run;
    portFree_[port][slice] = inst.unitFreeAt();
    (port == kReadPort ? stats_.sramReads : stats_.sramWrites) += inst.repeat;
    return tensorWritten_.empty() || checkDataFlow(inst, index);
  }

  // Ends the run on an event whose checks say it is malformed, naming what is wrong.
  [[gnu::cold, gnu::noinline]] bool malformedEvent(const Event& inst, std::int64_t index) {
    if (inst.unit < 0 || inst.unit >= static_cast<int>(units_.size())) {
      failure_ = makeError(ExitCode::kHazard, fmt::format("chip {}: instruction #{} names unit {}, which does not exist",
                                                          id_, index, inst.unit));
      return false;
    }
    return malformed(inst, index, malformation(instruction(index), spec_, units_).value_or("malformed"));
  }

  // Executes one event; `replay`: only its program-only part (a follower catching up), which passes.
  [[gnu::always_inline]] bool execute(const Event& inst, std::int64_t index, bool replay = false) {
    if (inst.checks & kMalformed) return malformedEvent(inst, index);
    if (inst.issue < unitFree_[inst.unit])
      if (!hazardf(HazardKind::kUnitBusy, inst, index, inst.issue, "issued while the unit is busy until cycle {}",
                   unitFree_[inst.unit]))
        return false;

    const bool memAccessOp = inst.op == Opcode::kMemRead || inst.op == Opcode::kMemWrite;
    if (memAccessOp)
      if (!memAccess(inst, index)) return false;
    const bool functional = values_ != nullptr;
    if (functional) readA_ = readB_ = ReadMatch{};
    if (inst.src.valid())
      if (!checkRead(inst, index, inst.src, functional ? &readA_ : nullptr)) return false;
    if (inst.src2.valid())
      if (!checkRead(inst, index, inst.src2, functional ? &readB_ : nullptr)) return false;
    if (functional) {
      Instruction full = instruction(index);
      full.issue = inst.issue;
      if (!computeValues(full, index)) return false;
    }

    switch (inst.op) {
      case Opcode::kMxmInstall:
        // The weight rows it loads count in the SRAM footprint like MEM reads.
        if (const int slice = inst.weightUnit - spec_.firstUnit(UnitKind::kMem);
            slice >= 0 && slice < spec_.memSlices && inst.address >= 0)
          maxAddress_[slice] = std::max<std::int64_t>(maxAddress_[slice], inst.address + std::max(1, inst.weightRows) - 1);
        planeReady_[inst.indexInKind / 2] = inst.completion();
        ++installsDone_[inst.indexInKind / 2];
        installs_ += inst.repeat;
        break;
      case Opcode::kMxmCompute: {
        const int plane = inst.indexInKind / 2;
        const Cycle ready = planeReady_[plane];
        if (!expectedInstalls_.empty() && installsDone_[plane] != expectedInstalls_[index]) {
          if (!hazardf(HazardKind::kWeightsMissing, inst, index, inst.issue, "{}",
                       installsDone_[plane] < expectedInstalls_[index]
                           ? "MXM compute before its weights are installed"
                           : "MXM compute after its weights were replaced by a later install"))
            return false;
        } else if (ready < 0 || ready > inst.issue)
          if (!hazardf(HazardKind::kWeightsMissing, inst, index, inst.issue,
                       "MXM compute before its weights are installed"))
            return false;
        mxmVectors_ += inst.repeat;
        break;
      }
      case Opcode::kVxmUnary: case Opcode::kVxmBinary: vxmVectors_ += inst.repeat; break;
      case Opcode::kSxmShift: sxmVectors_ += inst.repeat; break;
      case Opcode::kC2cSend: case Opcode::kC2cReceive: case Opcode::kC2cForward:
        if (!replay && !c2c(inst, index, functional)) return false;
        break;
      default: break;
    }
    if (inst.dst.valid())
      if (!writeStream(inst, index, inst.dst)) return false;

    // A MEM queue dispatches one instruction per cycle; its repeats then run on the port (memAccess).
    const Cycle freeAt = inst.unitFreeAt();
    unitFree_[inst.unit] = memAccessOp ? inst.issue + 1 : freeAt;
    stats_.unitBusy[inst.unit] += inst.busy;
    stats_.kindBusy[static_cast<int>(inst.kind)] += inst.busy;
    timeline_.add(static_cast<int>(inst.kind), inst.issue, freeAt, inst.busy, inst.repeat, inst.interval, inst.busyPerIssue);
    lastCompletion_ = std::max(lastCompletion_, inst.completion());
    if (replay) return true;
    ++stats_.instructions;
    // The instruction's own end (for MEM, its port's), not the queue's next dispatch cycle.
    if (options_.observer) options_.observer->instructionExecuted(id_, index, inst.issue, freeAt);
    return true;
  }

  // The C2C part of a send, receive or forward: its ports, its link and the bursts it sends and takes.
  bool c2c(const Event& inst, std::int64_t index, bool functional) {
    if (inst.port < 0 || inst.port >= static_cast<int>(ports_.size()) || ports_[inst.port].link < 0)
      return malformed(inst, index, fmt::format("C2C port {} is not connected", inst.port));
    // A forward runs on the queue of the port its vectors arrive on.
    const int inPort = inst.indexInKind;
    if (inst.op == Opcode::kC2cForward && (inPort >= static_cast<int>(ports_.size()) || ports_[inPort].link < 0))
      return malformed(inst, index, fmt::format("C2C forward from port {}, which is not connected", inPort));
    const std::uint64_t tensor = tensorOf(index);
    if (inst.op == Opcode::kC2cSend) return send(inst, index, inst.issue + spec_.c2cSendCycles, 0, tensor);
    std::uint64_t took = 0;
    if (inst.op == Opcode::kC2cReceive)
      return receive(inst, index, inst.port, inst.interval, tensor, took, functional ? &result_ : nullptr);
    // A forward passes vectors on as they arrive: at the pace of the arriving burst, the
    // outgoing link's or its own interval, whichever is slowest.
    const auto& in = inbound_[inPort];
    const double spacing = std::max({in.empty() ? 0.0 : in.front().spacing, vectorCycles(inst.port),
                                     static_cast<double>(inst.interval)});
    if (!receive(inst, index, inPort, spacing, tensor, took, functional ? &pendingPayload_ : nullptr)) return false;
    return send(inst, index, inst.issue + spec_.c2cForwardCycles, spacing, tensor ? tensor : took);
  }

  // Instruction `index`'s entry in the program's origins, or -1.
  std::int32_t originIndex(std::int64_t index) const {
    // The event at a cursor (the one running, or a follower's replay) without a search.
    const auto i = static_cast<size_t>(index);
    const EventProgram::Cursor* at = reordered_        ? nullptr
                                     : i == next_      ? &cursor_
                                     : following_ && i == replayed_ ? &replayCursor_
                                                                     : nullptr;
    return at ? events_->originAt(*at) : events_->originOf(i, lookup_);
  }

  // C2CBurst::tensor of what instruction `index` moves: its origin's tensor; 0: not known.
  std::uint64_t tensorOf(std::int64_t index) const {
    const auto& tensors = events_->originTensors();
    if (tensors.empty()) return 0;
    const std::int32_t origin = originIndex(index);
    return origin >= 0 && static_cast<size_t>(origin) < tensors.size() ? tensors[origin] : 0;
  }

  // A MEM read of its origin's input (OpOrigin::input, one instance: name, producer, microbatch) must
  // follow the chip's first write of that instance, when the chip writes it at all (a tensor it never
  // writes is resident, or an alias of another's SRAM). A read before any write is kept; the first
  // write of the instance then reports it, naming itself as the producer.
  bool checkDataFlow(const Event& inst, std::int64_t index) {
    const std::int32_t origin = originIndex(index);
    if (origin < 0 || static_cast<size_t>(origin) >= events_->originReads().size()) return true;
    if (inst.op == Opcode::kMemRead) {
      const std::int32_t input = events_->originReads()[origin];
      if (input >= 0 && !tensorWritten_[input] && firstEarlyRead_[input] < 0) {
        firstEarlyRead_[input] = static_cast<std::int32_t>(earlyReads_.size());
        earlyReads_.push_back({inst, index, origin});
      }
      return true;
    }
    const std::int32_t tensor = events_->originWrites()[origin];
    if (tensor < 0 || tensorWritten_[tensor]) return true;
    tensorWritten_[tensor] = 1;
    if (firstEarlyRead_[tensor] < 0) return true;
    return readBeforeWrite(inst, index, origin, firstEarlyRead_[tensor]);
  }

  // The hazard of early read `early` (checkDataFlow's), reported by the first write (inst) of what it read.
  [[gnu::cold, gnu::noinline]] bool readBeforeWrite(const Event& inst, std::int64_t index, std::int32_t origin,
                                                    std::int32_t early) {
    const EarlyRead& read = earlyReads_[early];
    const auto& from = program_->origins[read.origin];
    const auto& by = program_->origins[origin];
    return hazard(HazardKind::kReadBeforeWrite, read.event, read.index, read.event.issue,
                  fmt::format("reads SRAM address {} on MEM slice {} for '{}'{} ({} '{}'), which the chip first "
                              "writes later: instruction #{} (MemWrite, {} '{}', MEM slice {} address {}) at cycle {}",
                              read.event.address, read.event.indexInKind, from.input,
                              from.instance < 0 ? std::string() : fmt::format(" of instance {}", from.instance),
                              from.kind, from.op, index, by.kind, by.op, inst.indexInKind, inst.address, inst.issue));
  }

  // Cycles one vector takes on the link of port at its exact rate.
  double vectorCycles(int port) const { return spec_.vectorBytes / ports_[port].bytesPerCycle; }

  // Puts inst.repeat vectors on the link of inst.port, the first entering the link at `onLink`
  // (a send's issue + c2c.send_cycles, a forward's issue + c2c.forward_cycles). The link carries
  // them at its exact rate (or the instruction's interval, or `pace`, when slower): vectors handed
  // over faster wait in the port's serdes buffer, and the fractions of a cycle accumulate. A send
  // whose `stride` is m > 0 continues a stream of m vectors (its vectors are in the port's buffer as
  // the link frees): the fractions accumulate across the bursts (topology::streamCycles). It must
  // enter the link the cycle that stream's last burst leaves it, at the same spacing; a send with
  // stride 0 (and a forward) starts a stream of its own.
  bool send(const Event& inst, std::int64_t index, Cycle onLink, double pace, std::uint64_t tensor) {
    const PortBinding& port = ports_[inst.port];
    const double spacing = std::max({vectorCycles(inst.port), static_cast<double>(inst.interval), pace});
    const std::int64_t from = inst.op == Opcode::kC2cSend ? inst.stride : 0;
    if (from < 0)
      return malformed(inst, index, fmt::format("C2C send continuing a stream of {} vectors", from));
    const Cycle serialization = topology::streamCycles(from, inst.repeat, spacing, inst.interval);
    if (onLink < linkFree_[inst.port]) {
      if (!hazardf(HazardKind::kLinkBusy, inst, index, inst.issue, "C2C send on link {}, busy until cycle {}",
                   port.link, linkFree_[inst.port]))
        return false;
    } else if (from > 0 && (onLink != linkFree_[inst.port] || spacing != streamSpacing_[inst.port] ||
                            streamVectors_[inst.port] != from)) {
      if (!hazardf(HazardKind::kLinkBusy, inst, index, inst.issue,
                   "C2C send on link {} continues a stream of {} vectors at {:.4f} cycles each from cycle {}, but "
                   "the link's stream has {} vectors at {:.4f} and ends at cycle {}",
                   port.link, from, spacing, onLink, streamVectors_[inst.port], streamSpacing_[inst.port],
                   linkFree_[inst.port]))
        return false;
    }
    linkFree_[inst.port] = onLink + serialization;
    streamVectors_[inst.port] = from + inst.repeat;
    streamSpacing_[inst.port] = spacing;
    C2CBurst burst;
    burst.srcChip = id_;
    burst.srcPort = inst.port;
    burst.dstChip = port.peerChip;
    burst.dstPort = port.peerPort;
    burst.link = port.link;
    burst.sendCycle = inst.issue;
    burst.firstArrive = onLink + port.latencyCycles;
    if (const Cycle jitter = options_.faults.linkJitterCycles; jitter > 0) {
      const std::uint64_t draw = mix(mix(mix(options_.faults.seed ^ static_cast<std::uint64_t>(id_)) ^
                                         static_cast<std::uint64_t>(port.link)) ^
                                     static_cast<std::uint64_t>(inst.issue));
      burst.firstArrive += static_cast<Cycle>(draw % static_cast<std::uint64_t>(jitter + 1));
    }
    burst.vectors = inst.repeat;
    burst.interval = inst.interval;
    burst.spacing = spacing;
    burst.streamFrom = from;
    burst.bytes = Bytes{inst.repeat} * spec_.vectorBytes;
    burst.payload = std::move(pendingPayload_);
    burst.tensor = tensor;
    outgoing_.push_back(std::move(burst));
    stats_.bytesSent += burst.bytes;
    for (auto& use : stats_.links)
      if (use.link == port.link && use.aToB == port.aToB) {
        use.bytes += burst.bytes;
        use.busyCycles += serialization;
      }
    return true;
  }

  // Takes inst.repeat vectors from port `from`, in arrival order; vector j is read at issue +
  // serializationCycles(j, pace) (j x interval for a receive). A burst of another tensor than
  // `tensor` (both known) is taken all the same, as the port hands it over, and is a hazard: the
  // vectors are not the ones the instruction was placed for. `took` gets the first burst's tensor.
  // In functional mode their bytes go to *values.
  template <typename Run>
  bool receive(const Event& inst, std::int64_t index, int from, double pace, std::uint64_t tensor,
               std::uint64_t& took, Run* values) {
    bool mismatched = false;
    auto& queue = inbound_[from];
    std::int64_t needed = inst.repeat, j = 0;
    const std::size_t vb = static_cast<std::size_t>(spec_.vectorBytes);
    std::shared_ptr<std::vector<std::uint8_t>> collected;
    if (values) collected = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(inst.repeat) * vb);
    while (needed > 0) {
      if (queue.empty())
        return hazard(HazardKind::kReceiveEarly, inst, index, inst.issue + topology::serializationCycles(j, pace),
                      fmt::format("C2C receive on port {} before the data has arrived (no vector in flight)",
                                  from));
      C2CBurst& burst = queue.front();
      std::int64_t& consumed = consumed_[from];
      const std::int64_t take = std::min<std::int64_t>(needed, burst.vectors - consumed);
      if (j == 0) took = burst.tensor;
      if (tensor && burst.tensor && burst.tensor != tensor && !mismatched) {
        mismatched = true;
        const std::int32_t origin = events_->originOf(static_cast<size_t>(index), lookup_);
        if (!hazard(HazardKind::kReceiveMismatch, inst, index, inst.issue + topology::serializationCycles(j, pace),
                    fmt::format("C2C {} on port {} takes vectors of another tensor than '{}' (the burst chip {} "
                                "sent at cycle {})",
                                inst.op == Opcode::kC2cForward ? "forward" : "receive", from,
                                program_->origins[origin].tensor, burst.srcChip, burst.sendCycle)))
          return false;
      }
      // Arrivals are a ceil(j x spacing) sequence; reads are arithmetic (a receive) or at the burst's
      // pace or slower (a forward): the first and last vector of the segment are the tightest.
      for (std::int64_t k : {std::int64_t{0}, take - 1}) {
        const Cycle arrive = burst.arrival(consumed + k);
        const Cycle read = inst.issue + topology::serializationCycles(j + k, pace);
        if (arrive > read) {
          if (!hazard(
                  HazardKind::kReceiveEarly, inst, index, read,
                  fmt::format("C2C receive on port {} reads a vector before it arrives (cycle {})", from, arrive)))
            return false;
          break;
        }
      }
      if (collected) {
        if (!burst.payload || burst.payload->size() < static_cast<std::size_t>(consumed + take) * vb)
          return notComputable(instruction(index), index, fmt::format("a C2C burst on port {} arrived without its values", from));
        std::memcpy(collected->data() + static_cast<std::size_t>(j) * vb,
                    burst.payload->data() + static_cast<std::size_t>(consumed) * vb, static_cast<std::size_t>(take) * vb);
      }
      consumed += take;
      needed -= take;
      j += take;
      if (consumed == burst.vectors) {
        queue.erase(queue.begin());
        consumed = 0;
      }
    }
    if (values) *values = std::move(collected);
    return true;
  }

  void finish() {
    finished_ = true;
    if (following_ && replayed_ == 0 && shared_->complete.load(std::memory_order_acquire)) {
      // Followed from the first event to the last: the leader's program-only statistics are this chip's.
      const ChipStats& leader = shared_->stats;
      stats_.cycles = leader.cycles;
      stats_.unitBusy = leader.unitBusy;
      std::copy(std::begin(leader.kindBusy), std::end(leader.kindBusy), std::begin(stats_.kindBusy));
      stats_.sramPeakBytes = leader.sramPeakBytes;
      stats_.utilization = leader.utilization;
      stats_.unitStall = leader.unitStall;
      stats_.sramReads = leader.sramReads;
      stats_.sramWrites = leader.sramWrites;
      stats_.bankConflicts = leader.bankConflicts;
      stats_.streamHops = leader.streamHops;
      vxmVectors_ = shared_->vxmVectors;
      mxmVectors_ = shared_->mxmVectors;
      sxmVectors_ = shared_->sxmVectors;
      installs_ = shared_->installs;
      estimateEnergy();
      return;
    }
    if (following_) catchUp();
    stats_.cycles = stats_.instructions > 0 ? lastCompletion_ + spec_.rippleCycles : 0;
    for (std::int64_t a : maxAddress_)
      if (a >= 0) stats_.sramPeakBytes += Bytes{a + 1} * spec_.vectorBytes;
    for (const auto& runs : streams_)
      for (const auto& run : runs) stats_.streamHops += run.hops();
    int counts[topology::kUnitKindCount];
    for (int k = 0; k < topology::kUnitKindCount; ++k) counts[k] = spec_.unitCount(static_cast<UnitKind>(k));
    counts[static_cast<int>(UnitKind::kMem)] *= 2;  // a read and a write port per slice
    stats_.utilization = timeline_.normalize(counts);
    estimateEnergy();
    if (leading_) {
      shared_->stats = stats_;
      shared_->vxmVectors = vxmVectors_;
      shared_->mxmVectors = mxmVectors_;
      shared_->sxmVectors = sxmVectors_;
      shared_->installs = installs_;
      shared_->complete.store(true, std::memory_order_release);
      shared_->leading = leading_ = false;
    }
  }

  void estimateEnergy() {
    const auto& e = spec_.energy;
    constexpr double kPj = 1e-12;
    auto& out = stats_.energy;
    out.memJ = (static_cast<double>(stats_.sramReads) * e.memReadPj +
                static_cast<double>(stats_.sramWrites) * e.memWritePj) * kPj;
    out.streamJ = static_cast<double>(stats_.streamHops) * e.streamHopPj * kPj;
    out.vxmJ = static_cast<double>(vxmVectors_) * e.vxmOpPj * kPj;
    out.mxmJ = (static_cast<double>(mxmVectors_) * e.mxmVectorPj + static_cast<double>(installs_) * e.mxmInstallPj) * kPj;
    out.sxmJ = static_cast<double>(sxmVectors_) * e.sxmOpPj * kPj;
    out.c2cJ = static_cast<double>(stats_.bytesSent) * e.c2cPjPerByte * kPj;
    out.staticJ = e.staticWatts * static_cast<double>(stats_.cycles) / (spec_.clockMhz * 1e6);
  }

  int id_;
  const topology::ChipSpec& spec_;
  std::shared_ptr<const EventProgram> events_;  // the program decoded, shared by the chips running it
  const std::vector<topology::UnitInfo>& units_;  // the spec's unit table, held by events_
  const std::vector<std::uint8_t>& banks_;         // the spec's bank of each address (EventProgram::banks)
  std::shared_ptr<const isa::Program> program_;
  EventProgram::Cursor cursor_;  // the event next_ in program order
  mutable size_t lookup_ = 0;     // the segment of the last instruction or origin looked up by index
  std::vector<PortBinding> ports_;
  SimOptions options_;
  bool countHazards_ = false;
  Cycle horizonSlices_;  // a stream run older than this many cycles before an issue can meet no later run
  std::optional<Diagnostic> failure_;  // the hazard or malformed instruction that ended the run
  bool stallOn_ = false;
  bool reordered_ = false;
  std::vector<size_t> order_;  // event order when the list is not in it (or under a stall); else empty
  size_t next_ = 0;
  bool finished_ = false;
  std::vector<Cycle> unitFree_;
  std::vector<Cycle> linkFree_;
  std::vector<std::int64_t> streamVectors_;  // per port: vectors of the stream its link carries (send())
  std::vector<double> streamSpacing_;        // per port: that stream's spacing
  std::vector<Cycle> planeReady_;
  std::vector<std::int32_t> installsDone_;       // per plane
  std::vector<std::int32_t> expectedInstalls_;   // per instruction, under a stall fault only
  std::vector<std::int64_t> maxAddress_;
  std::vector<Cycle> portFree_[2];     // per MEM slice: the read and the write port
  std::vector<PortRun> lastRun_[2];    // per MEM slice and port: the latest run (runs on a port never overlap)
  std::vector<StreamQueue> streams_;  // [direction][stream id]
  const size_t streamsPerDirection_ = static_cast<size_t>(spec_.streamsPerDirection);
  // The data-flow check (checkDataFlow), per tensor instance some origin reads (EventProgram::readTensors): whether
  // a MEM write of the chip has stored it, and its first read before that (an index into earlyReads_, -1: none).
  struct EarlyRead {
    Event event;
    std::int64_t index = 0;
    std::int32_t origin = -1;
  };
  std::vector<std::uint8_t> tensorWritten_;
  std::vector<std::int32_t> firstEarlyRead_;
  std::vector<EarlyRead> earlyReads_;
  std::vector<std::vector<C2CBurst>> inbound_;
  std::vector<std::int64_t> consumed_;
  std::vector<C2CBurst> outgoing_;
  std::shared_ptr<SharedChecks> shared_;  // the checks shared with the chips running the program; null: none
  bool leading_ = false;    // this chip runs every check and records how far they passed
  bool following_ = false;  // this chip runs only the C2C part of the events a leader passed
  bool c2cFailure_ = false;  // a follower's run ended in the C2C part of event next_
  size_t replayed_ = 0;     // follower: the program-only part of events [0, replayed_) is done
  EventProgram::Cursor replayCursor_;  // follower: the event replayed_
  EventProgram::C2cMark c2cMark_;      // follower: the next C2C event of the cursor's piece
  std::unique_ptr<FunctionalState> values_;  // functional mode only
  VectorRun pendingPayload_;                 // the vectors of the send or forward being executed
  // Functional mode: the vectors of each live stream run, by the program index of its producer (an
  // instruction writes one stream), kept beside the runs so that timing mode's runs stay plain data.
  std::unordered_map<std::int64_t, VectorRun> streamValues_;
  ReadMatch readA_, readB_;  // the operands of the instruction being executed
  VectorRun result_;         // its result, for its destination stream
  Timeline timeline_;
  Cycle lastCompletion_ = 0;
  std::int64_t vxmVectors_ = 0, mxmVectors_ = 0, sxmVectors_ = 0, installs_ = 0;
  ChipStats stats_;
};

}  // namespace

std::uint64_t burstTensor(const std::string& name) { return std::hash<std::string>{}(name) | 1; }

const char* hazardKindName(HazardKind kind) {
  switch (kind) {
    case HazardKind::kUnitBusy: return "unit_busy";
    case HazardKind::kStreamCollision: return "stream_collision";
    case HazardKind::kTimeOfFlight: return "time_of_flight";
    case HazardKind::kBankConflict: return "bank_conflict";
    case HazardKind::kLinkBusy: return "link_busy";
    case HazardKind::kReceiveEarly: return "receive_early";
    case HazardKind::kSramRange: return "sram_range";
    case HazardKind::kWeightsMissing: return "weights_missing";
    case HazardKind::kReceiveMismatch: return "receive_mismatch";
    case HazardKind::kReadBeforeWrite: return "read_before_write";
  }
  return "?";
}

std::int64_t ChipStats::hazardCount() const { return std::accumulate(hazards.begin(), hazards.end(), std::int64_t{0}); }

double ChipStats::bankConflictRate() const {
  const std::int64_t accesses = sramReads + sramWrites;
  return accesses > 0 ? static_cast<double>(bankConflicts) / static_cast<double>(accesses) : 0.0;
}

double unitUtilization(const topology::ChipSpec& spec, const ChipStats& stats, int unit) {
  if (stats.cycles <= 0 || unit < 0 || unit >= static_cast<int>(stats.unitBusy.size())) return 0.0;
  const int ports = unit < spec.firstUnit(UnitKind::kMem) + spec.memSlices && unit >= spec.firstUnit(UnitKind::kMem) ? 2 : 1;
  return static_cast<double>(stats.unitBusy[unit]) / (static_cast<double>(ports) * static_cast<double>(stats.cycles));
}

Bytes chipStateBytes(const topology::ChipSpec& spec, int ports, const SimOptions& options) {
  const Bytes units = static_cast<Bytes>(spec.units().size());
  const Bytes perUnit = 3 * sizeof(Cycle) + sizeof(topology::UnitInfo);  // free, busy, stall; its description
  const Bytes perPort = sizeof(PortBinding) + sizeof(Cycle) + sizeof(std::vector<C2CBurst>) + sizeof(std::int64_t) +
                        sizeof(LinkUse);
  const Bytes perPlane = sizeof(Cycle) + sizeof(std::int32_t);
  const Bytes perSlice = sizeof(std::int64_t) + 2 * (sizeof(Cycle) + sizeof(PortRun));
  const Bytes perStream = sizeof(StreamQueue);
  Bytes total = sizeof(TspChip) + units * perUnit + Bytes{ports} * perPort + Bytes{spec.mxmPlanes} * perPlane +
                Bytes{spec.memSlices} * perSlice + 2 * Bytes{spec.streamsPerDirection} * perStream +
                Timeline::bytes(options);
  // Functional mode keeps the SRAM's bytes (up to all of them) and each MXM plane's weights.
  if (options.functional.enabled) {
    const Bytes lanes = spec.vectorBytes;
    total += spec.sramBytes() + Bytes{spec.mxmPlanes} * lanes * lanes;
  }
  return total;
}

std::unique_ptr<Chip> makeTspChip(int chipId, const topology::ChipSpec& spec,
                                  std::shared_ptr<const isa::Program> program, std::vector<PortBinding> ports,
                                  const SimOptions& options) {
  return std::make_unique<TspChip>(chipId, spec, std::move(program), std::move(ports), options);
}

}  // namespace tsp::sim
