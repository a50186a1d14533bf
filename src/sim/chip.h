// The chip interface the runtime drives, and the cycle-accurate TSP chip that implements it.
#pragma once

#include <limits>
#include <memory>
#include <vector>

#include "compile/isa/program.h"
#include "support/expected.h"
#include "topology/chip_spec.h"

namespace tsp::sim {

/// "No further event".
inline constexpr Cycle kNever = std::numeric_limits<Cycle>::max();

/// A burst of C2C vectors on one link: vector j leaves at firstSend + j*interval and arrives at
/// firstArrive + j*interval. Deliveries are ordered by (firstArrive, srcChip, link, sendCycle).
struct C2CBurst {
  int srcChip = 0, srcPort = 0;
  int dstChip = 0, dstPort = 0;
  int link = 0;
  Cycle sendCycle = 0;    ///< issue of the send instruction
  Cycle firstArrive = 0;  ///< arrival of vector 0 at the destination
  int vectors = 0;
  int interval = 1;
  Bytes bytes = 0;

  friend bool operator<(const C2CBurst& a, const C2CBurst& b) {
    if (a.firstArrive != b.firstArrive) return a.firstArrive < b.firstArrive;
    if (a.srcChip != b.srcChip) return a.srcChip < b.srcChip;
    if (a.link != b.link) return a.link < b.link;
    return a.sendCycle < b.sendCycle;
  }
};

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

/// What one chip did: the /summary/chips row, the unit busy cycles and the utilisation timeline.
struct ChipStats {
  Cycle cycles = 0;  ///< last completion + ripple; 0 for an idle chip
  std::int64_t instructions = 0;
  std::vector<Cycle> unitBusy;            ///< per ICU queue
  Cycle kindBusy[topology::kUnitKindCount] = {};
  Bytes bytesSent = 0, bytesReceived = 0;
  Bytes sramPeakBytes = 0;
  std::vector<LinkUse> links;
  std::vector<float> utilization;         ///< [kind][bin], busy fraction
};

/// Told of every instruction a chip executes (trace level `instructions`). Called in program
/// order per chip; C2C bursts need no observer: the runtime sees them in takeOutgoing().
class ChipObserver {
 public:
  virtual ~ChipObserver() = default;
  /// Instruction `programIndex` of chip's program ran on its unit from `start` until `end` (exclusive).
  virtual void instructionExecuted(int chip, std::int64_t programIndex, Cycle start, Cycle end) = 0;
};

/// Options of a simulation run.
struct SimOptions {
  Cycle binCycles = 1;  ///< width of a utilisation-timeline bin
  int bins = 64;
  ChipObserver* observer = nullptr;  ///< not owned; null: nobody listens
};

/// The chip interface (version 1): the runtime advances chips in windows, moves C2C bursts
/// between them, and asks when the next event is so that idle windows can be skipped.
class Chip {
 public:
  static constexpr int kInterfaceVersion = 1;
  virtual ~Chip() = default;

  /// Executes every event with cycle < end; a hazard ends the run with a diagnostic (exit 4).
  virtual Status advanceTo(Cycle end) = 0;
  /// Hands the chip a burst arriving on one of its ports.
  virtual void deliver(const C2CBurst& burst) = 0;
  /// Bursts sent since the last call.
  virtual std::vector<C2CBurst> takeOutgoing() = 0;
  /// Cycle of the next event, or kNever.
  virtual Cycle nextEventCycle() const = 0;
  /// Statistics so far (complete once nextEventCycle() is kNever).
  virtual const ChipStats& stats() const = 0;
};

/// A cycle-accurate TSP executing a shared program: one chip instance is (program, port bindings).
std::unique_ptr<Chip> makeTspChip(int chipId, const topology::ChipSpec& spec,
                                  std::shared_ptr<const isa::Program> program, std::vector<PortBinding> ports,
                                  const SimOptions& options);

/// Initialises the kernel back end (Kokkos) for the process lifetime of the object.
class KernelRuntime {
 public:
  KernelRuntime();
  ~KernelRuntime();
  KernelRuntime(const KernelRuntime&) = delete;
  KernelRuntime& operator=(const KernelRuntime&) = delete;
};

}  // namespace tsp::sim
