// StageBuilder: lowers one chip's share of a graph into a cycle-stamped Program.
//
// This is the first, in-order scheduler: ops are lowered in graph order into chains of
// stream-connected instructions (MEM read -> MXM/VXM -> MEM write, or C2C send/receive),
// each chain placed at the earliest cycle its units, streams and links allow. Within a chain
// every consumer issues exactly at its producer's issue + d_func + |delta slice|, the stream
// time-of-flight rule the simulator checks.
#pragma once

#include <map>
#include <vector>

#include "compile/ir/graph.h"
#include "compile/isa/program.h"
#include "support/expected.h"
#include "topology/chip_spec.h"

namespace tsp::lower {

/// Where a tensor's vectors sit in SRAM (the Program's placement table entry).
using TensorPlacement = isa::TensorPlacement;

/// A burst of vectors that leaves this chip on a port: what the cluster scheduler hands to the
/// receiving chip (its arrival times follow from the send timing and the link).
struct OutboundBurst {
  int port = -1;
  Cycle issue = 0;     ///< issue cycle of the C2C send
  int vectors = 0;
  int interval = 1;
};

/// Lowers ops of a graph onto one chip, tracking units, streams, links and SRAM.
class StageBuilder {
 public:
  StageBuilder(const topology::ChipSpec& chip, const ir::Graph& graph);

  /// Makes tensor resident in SRAM before the program starts (a graph input or a weight).
  Status placeResident(ir::TensorId tensor);
  /// Receives tensor on port: one burst per tile, the first vector of burst i arriving at arrivals[i],
  /// each link vector taking `interval` cycles; the data lands in SRAM.
  Status receive(ir::TensorId tensor, int port, const std::vector<Cycle>& arrivals, int interval);
  /// Lowers op (MatMul with an optional fused bias Add and activation, or an elementwise op).
  /// Returns the number of graph ops consumed (fusion may take the following ones).
  Expected<int> lowerOp(ir::OpId op, const std::vector<ir::OpId>& stageOps, size_t position);
  /// Sends tensor out of port, tile by tile, `interval` cycles per vector.
  Expected<std::vector<OutboundBurst>> send(ir::TensorId tensor, int port, int interval);

  /// Finishes: canonical order, predicted and lower-bound cycles, SRAM use.
  isa::Program finish();

  bool placed(ir::TensorId tensor) const { return placements_.count(tensor) > 0; }

 private:
  struct Step {
    isa::Instruction inst;
    int producer = -1;   ///< step feeding src, or -1
    int producer2 = -1;  ///< step feeding src2, or -1
    Cycle offset = 0;
  };
  // Places a chain of steps at the earliest cycle >= earliest; returns the steps' issue cycles.
  std::vector<Cycle> placeChain(std::vector<Step>& steps, Cycle earliest);
  Expected<TensorPlacement> allocate(ir::TensorId tensor, std::int64_t rows, int tiles, const std::string& what);
  int sliceOf(int unit) const { return units_[unit].slice; }
  Cycle readyAt(ir::TensorId tensor) const;

  const topology::ChipSpec& chip_;
  const ir::Graph& graph_;
  std::vector<topology::UnitInfo> units_;
  std::vector<Cycle> unitFree_;
  std::vector<Cycle> linkFree_;                 // per C2C port: the link's last vector has left
  std::vector<Cycle> streamFree_[2];            // per direction and stream id
  std::vector<int> memNextAddress_;             // bump allocator per MEM slice
  int nextMemSlice_ = 0;
  std::map<ir::TensorId, TensorPlacement> placements_;
  std::map<ir::TensorId, Cycle> ready_;         // cycle a tensor is complete in SRAM
  isa::Program program_;
};

/// Vector geometry of a tensor at a dtype: rows (all dims but the last) and 320-byte tiles per row.
std::pair<std::int64_t, int> vectorShape(const topology::ChipSpec& chip, const ir::Tensor& tensor);

}  // namespace tsp::lower
