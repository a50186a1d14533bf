// Attribution: which model op and layer each instruction serves, and the work of each op and layer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include <mpi.h>

#include "compile/isa/program.h"
#include "support/units.h"
#include "topology/chip_spec.h"

namespace tsp::runtime {

/// The work of one op (or one layer) over every chip, from the programs alone: every instruction's
/// busy cycles follow from the chip spec, and the simulator runs them as scheduled.
struct WorkRow {
  std::int32_t id = -1;  ///< op id (a row of /names/ops) or layer
  std::int64_t instructions = 0;
  std::array<std::int64_t, topology::kUnitKindCount> busy{};  ///< busy cycles per unit kind
  std::int64_t memBytes = 0;    ///< bytes read from and written to SRAM by MEM instructions
  std::int64_t c2cBytes = 0;    ///< bytes sent on chip-to-chip links (sends and forwards)
  std::int64_t sramBytes = 0;   ///< SRAM it writes: the distinct vector addresses of its MEM writes, over the chips
  std::int64_t firstCycle = -1; ///< first issue on any chip
  std::int64_t lastCycle = -1;  ///< last unit-busy cycle + 1 on any chip
  std::int64_t cycles = 0;      ///< active cycles (some unit busy with it) on the chip where they are most
  std::int64_t chipCycles = 0;  ///< active cycles summed over the chips it ran on
  std::int32_t chips = 0;       ///< chips it ran on
  /// Busy fraction of its busiest C2C queue (one link direction of a port): the cycles that queue is
  /// occupied with the row's sends or receives, over the row's active cycles on that queue's chip.
  double linkBusy = 0;
  std::int64_t busyTotal() const;
};

/// The names table of a run and each instruction's place in it.
struct Attribution {
  std::vector<isa::OpOrigin> names;            ///< /names/ops, in first-seen order over the chips
  std::vector<std::vector<std::int32_t>> idOf; ///< per chip: Program::origins index -> names index
  std::vector<WorkRow> ops;                    ///< per names row, in id order
  std::vector<WorkRow> layers;                 ///< per layer with work, in layer order (-1 first: no layer)
  /// Op id of a chip's program origin index (-1: none).
  std::int32_t opOf(int chip, std::int32_t origin) const {
    return origin >= 0 && static_cast<size_t>(origin) < idOf[chip].size() ? idOf[chip][origin] : -1;
  }
};

/// How one chip spent the run's makespan, from its program (which the simulator runs as scheduled):
/// - compute: some MEM, VXM, MXM or SXM unit busy with an op that does not move data between chips;
/// - communication: otherwise an op that moves data (a C2C send, receive or forward, and the reductions
///   and copies of a collective's ops) in progress, or the chip idle until a collective's next
///   transfer (waiting for its peers);
/// - bubble: idle before its first instruction, until the next pipeline transfer arrives (an op's
///   Send/Receive between stages), and after its last cycle until the makespan;
/// - other: idle until its next compute instruction (result latencies, dependence chains).
/// The four add up to the makespan.
struct TimeSplit {
  Cycle compute = 0, communication = 0, bubble = 0, other = 0;
};
TimeSplit timeSplit(const topology::ChipSpec& spec, const isa::Program& program, Cycle chipCycles, Cycle makespan);

/// The attribution of the chips' programs, all read here.
Attribution attribute(const topology::ChipSpec& spec, const std::vector<std::shared_ptr<const isa::Program>>& programs);

/// The same attribution on every rank of `comm`, each rank reading the programs of its `chips` for the
/// work rows (every chip on exactly one rank); the names and ids come from every program's origins.
Attribution attribute(const topology::ChipSpec& spec, const std::vector<std::shared_ptr<const isa::Program>>& programs,
                      const std::vector<int>& chips, MPI_Comm comm);

}  // namespace tsp::runtime
