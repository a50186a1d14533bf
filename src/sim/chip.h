// The chip interface the runtime drives, and the cycle-accurate TSP chip that implements it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compile/isa/program.h"
#include "support/expected.h"
#include "support/tensor_data.h"
#include "topology/chip_spec.h"
#include "topology/cluster.h"

namespace tsp::sim {

/// "No further event".
inline constexpr Cycle kNever = std::numeric_limits<Cycle>::max();

/// A burst of C2C vectors on one link: vector j leaves streamCycles(streamFrom, j, spacing) after
/// the first and arrives as long after firstArrive. Deliveries are ordered by (firstArrive, srcChip, link, sendCycle).
struct C2CBurst {
  int srcChip = 0, srcPort = 0;
  int dstChip = 0, dstPort = 0;
  int link = 0;
  Cycle sendCycle = 0;    ///< issue of the send instruction
  Cycle firstArrive = 0;  ///< arrival of vector 0 at the destination
  int vectors = 0;
  int interval = 1;       ///< cycles between the vectors the sending instruction hands over
  /// Cycles between vectors on the link, a fraction at the link's exact rate (at least interval):
  /// vector j arrives at firstArrive + serializationCycles(j, spacing). 0: interval.
  double spacing = 0;
  /// The vectors of the link's stream before this burst's (topology::streamCycles): a send that
  /// enters the link the cycle the previous burst leaves it goes on from the stream's fraction of a
  /// cycle. 0: the burst starts a stream.
  std::int64_t streamFrom = 0;
  Bytes bytes = 0;
  /// Functional mode: the vectors' bytes (vectors x vector_bytes); null in timing mode.
  std::shared_ptr<const std::vector<std::uint8_t>> payload;
  /// The tensor the vectors belong to: burstTensor of the name the sending instruction's origin
  /// gives (isa::OpOrigin::tensor; a forward without one passes on the one it took); 0: not known.
  std::uint64_t tensor = 0;

  /// Arrival of vector j at the destination.
  Cycle arrival(std::int64_t j) const {
    return firstArrive + topology::streamCycles(streamFrom, j, spacing, interval);
  }

  friend bool operator<(const C2CBurst& a, const C2CBurst& b) {
    if (a.firstArrive != b.firstArrive) return a.firstArrive < b.firstArrive;
    if (a.srcChip != b.srcChip) return a.srcChip < b.srcChip;
    if (a.link != b.link) return a.link < b.link;
    return a.sendCycle < b.sendCycle;
  }
};

/// C2CBurst::tensor of a tensor name (isa::OpOrigin::tensor): never 0 (0 is "not known").
std::uint64_t burstTensor(const std::string& name);

/// What a C2C port of a chip instance is wired to.
struct PortBinding {
  int link = -1;       ///< -1: unconnected
  int peerChip = -1;
  int peerPort = -1;
  bool aToB = true;    ///< this chip is the link's `a` end
  Cycle latencyCycles = 0;
  double bytesPerCycle = 0.0;
};

/// Per-link, per-direction use seen by the sending chip.
struct LinkUse {
  int link = 0;
  bool aToB = true;
  Bytes bytes = 0;
  Cycle busyCycles = 0;
};

/// The kinds of hazard the simulator finds (docs/machine-model.md, "Hazards and the event engine").
enum class HazardKind : std::uint8_t {
  kUnitBusy,         ///< an issue while the unit (or the MEM port it needs) is busy
  kStreamCollision,  ///< two values in one stream cell
  kTimeOfFlight,     ///< a consumer reading a value that is not passing its slice then
  kBankConflict,     ///< a read and a write on one MEM slice and bank in one cycle
  kLinkBusy,         ///< a C2C send on a busy link, or faster than the link
  kReceiveEarly,     ///< a C2C receive before the vector arrived
  kSramRange,        ///< an SRAM address out of range
  kWeightsMissing,   ///< an MXM compute before its plane's weights are installed
  kReceiveMismatch,  ///< a C2C receive or forward taking vectors of another tensor than its origin names
  kReadBeforeWrite,  ///< a MEM read of a tensor (its origin's input) before the chip's first write of it
};
inline constexpr int kHazardKindCount = 10;

/// Short name of a hazard kind ("unit_busy", ...), as reported in statistics.
const char* hazardKindName(HazardKind kind);

/// Per-operation energy totals of one chip, in joules (per-op figures from ChipSpec::energy).
struct EnergyEstimate {
  double memJ = 0, streamJ = 0, vxmJ = 0, mxmJ = 0, sxmJ = 0, c2cJ = 0, staticJ = 0;
  /// Sum of every part.
  double totalJ() const { return memJ + streamJ + vxmJ + mxmJ + sxmJ + c2cJ + staticJ; }
};

/// What one chip did: the /summary/chips row, the unit busy cycles and the utilisation timeline.
struct ChipStats {
  Cycle cycles = 0;  ///< last completion + ripple; 0 for an idle chip
  std::int64_t instructions = 0;
  std::vector<Cycle> unitBusy;            ///< per ICU queue (a MEM queue adds its read and write port cycles)
  Cycle kindBusy[topology::kUnitKindCount] = {};
  Bytes bytesSent = 0, bytesReceived = 0;
  Bytes sramPeakBytes = 0;
  std::vector<LinkUse> links;
  std::vector<float> utilization;         ///< [kind][bin], busy fraction
  std::vector<Cycle> unitStall;           ///< per ICU queue: cycles its issue was held back by an injected stall
  std::int64_t sramReads = 0, sramWrites = 0;  ///< vector accesses
  std::int64_t bankConflicts = 0;         ///< cycles a read and a write met on one slice and bank (faults on)
  std::int64_t streamHops = 0;            ///< vector-slice moves on the stream registers
  std::array<std::int64_t, kHazardKindCount> hazards = {};  ///< counted hazards (faults on), by kind
  std::string firstHazard;                ///< message of the first counted hazard
  EnergyEstimate energy;

  /// Counted hazards of every kind.
  std::int64_t hazardCount() const;
  /// Bank conflicts per SRAM access (0 with no access).
  double bankConflictRate() const;
};

/// Busy fraction of one ICU queue over the chip's cycles: busy / (ports x cycles), a MEM slice
/// having a read and a write port.
double unitUtilization(const topology::ChipSpec& spec, const ChipStats& stats, int unit);

/// Fault injection for robustness studies (`simulation.faults`); everything off by default.
/// With any fault on, hazards are counted in ChipStats instead of ending the run.
struct FaultOptions {
  Cycle linkJitterCycles = 0;  ///< each C2C burst arrives 0..J cycles late, drawn from (seed, chip, link, send)
  int stallChip = -1;          ///< chip whose unit stalls; -1: every chip
  int stallUnit = -1;          ///< ICU queue that stalls; -1: none
  Cycle stallCycle = 0;        ///< first cycle of the stall
  Cycle stallCycles = 0;       ///< length: the queue's instructions from stallCycle on issue this much later
  std::uint64_t seed = 0;

  /// True when some fault is injected.
  bool enabled() const { return linkJitterCycles > 0 || (stallUnit >= 0 && stallCycles > 0); }
};

/// Told of every instruction a chip executes (trace level `instructions`). Called in event order
/// per chip, (cycle, unit, program index): the program's order unless a stall fault moves a queue's
/// instructions; C2C bursts need no observer: the runtime sees them in takeOutgoing().
class ChipObserver {
 public:
  virtual ~ChipObserver() = default;
  /// Instruction `programIndex` of chip's program ran on its unit from `start` until `end` (exclusive).
  virtual void instructionExecuted(int chip, std::int64_t programIndex, Cycle start, Cycle end) = 0;
};

/// How functional mode reads the lanes of a 320-byte vector: 160 binary16 values (FP32 arithmetic,
/// FP32 accumulation in the MXM) or 320 INT8 values (INT32 arithmetic and accumulation).
enum class ElementType : std::uint8_t { kFp16, kInt8 };

/// Bytes of one element of a type.
int elementBytes(ElementType type);

/// A tensor's values as its placement stores them: rows x cols, row-major (shared, not copied, by
/// the chips that hold the tensor and the reference).
struct TensorValues {
  std::int64_t cols = 0;
  SharedTensorData data;  ///< the values as the graph holds them (compact, shared)
  /// When set: the values in the chip's order, read from data without a copy (a Conv's tap-major
  /// weights, a channels-last map): position i holds data[source(i)], or 0 where source(i) < 0.
  std::function<std::int64_t(std::int64_t)> source;
  std::int64_t stored = 0;  ///< positions of the chip's order when source is set

  /// Placements of it the process's chips have yet to make: the chip that makes the last one drops
  /// data, source and map, so that SRAM alone holds the values from then on (0: kept for the run).
  int placements = 0;
  /// When set: element i of data is placed as map(i, data[i]) (a BatchNormalization folded into a
  /// Conv's weights, isa::WeightFold), computed as the chip writes it: no folded copy is held.
  std::function<double(std::int64_t, double)> map = nullptr;
};

/// Functional mode (`simulation.mode: functional`): values in SRAM and on the streams.
struct FunctionalOptions {
  bool enabled = false;
  ElementType element = ElementType::kFp16;
  /// Values of the tensors the programs hold in SRAM at start (inputs, weights), by name; every
  /// resident tensor of a program must be here. Shared by all chips of the run, which drop each
  /// tensor's values once placed (TensorValues::placements).
  std::shared_ptr<std::map<std::string, TensorValues>> resident;
};

/// Options of a simulation run.
struct SimOptions {
  Cycle binCycles = 1;  ///< width of a utilisation-timeline bin
  int bins = 64;
  ChipObserver* observer = nullptr;  ///< not owned; null: nobody listens
  FaultOptions faults;
  FunctionalOptions functional;
  /// Chips that run a program another chip of the process runs (or ran) with the same timeline take
  /// its checks and statistics that depend on the program alone, and run only their C2C part
  /// (timing mode without faults; results are the same). Off: every chip runs every check.
  bool shareChecks = true;
};

/// The chip interface (version 2: adds readTensor): the runtime advances chips in windows, moves C2C
/// bursts between them, and asks when the next event is so that idle windows can be skipped.
class Chip {
 public:
  static constexpr int kInterfaceVersion = 2;
  virtual ~Chip() = default;

  /// Executes every event with cycle < end; a hazard ends the run with a diagnostic (exit 4),
  /// unless faults are injected: then it is counted in stats() and the run goes on.
  virtual Status advanceTo(Cycle end) = 0;
  /// Hands the chip a burst arriving on one of its ports.
  virtual void deliver(const C2CBurst& burst) = 0;
  /// Bursts sent since the last call.
  virtual std::vector<C2CBurst> takeOutgoing() = 0;
  /// Cycle of the next event, or kNever.
  virtual Cycle nextEventCycle() const = 0;
  /// Statistics so far (complete once nextEventCycle() is kNever).
  virtual const ChipStats& stats() const = 0;
  /// Instructions executed so far (stats().instructions, which a chip may know without the rest).
  virtual std::int64_t instructionsExecuted() const { return stats().instructions; }
  /// Functional mode: the values of a tensor of the program's placement table as SRAM holds them
  /// now (rows x cols, row-major); empty in timing mode.
  virtual std::vector<double> readTensor(const isa::TensorPlacement& tensor, std::int64_t cols) const = 0;
};

/// A cycle-accurate TSP executing a shared program: one chip instance is (program, port bindings).
std::unique_ptr<Chip> makeTspChip(int chipId, const topology::ChipSpec& spec,
                                  std::shared_ptr<const isa::Program> program, std::vector<PortBinding> ports,
                                  const SimOptions& options);

/// The memory one chip instance of makeTspChip holds before it runs (its tables per unit, port,
/// plane, slice and stream, its timeline, and in functional mode the SRAM's values): what the
/// runtime adds up before building a rank's chips, so that a cluster too large is refused.
Bytes chipStateBytes(const topology::ChipSpec& spec, int ports, const SimOptions& options);

/// Initialises the kernel back end (Kokkos) for the process lifetime of the object.
class KernelRuntime {
 public:
  KernelRuntime();
  ~KernelRuntime();
  KernelRuntime(const KernelRuntime&) = delete;
  KernelRuntime& operator=(const KernelRuntime&) = delete;
};

}  // namespace tsp::sim
