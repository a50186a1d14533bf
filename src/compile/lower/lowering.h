// Lowering: one chip's share of a graph into a scheduling problem of stream-connected instruction tasks.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "compile/alloc/sram_allocator.h"
#include "compile/ir/graph.h"
#include "compile/isa/program.h"
#include "compile/problem/problem.h"
#include "support/expected.h"
#include "topology/chip_spec.h"

namespace tsp::lower {

/// Vector geometry of a tensor: rows (all dims but the last) and 320-byte tiles per row.
std::pair<std::int64_t, int> vectorShape(const topology::ChipSpec& chip, const ir::Tensor& tensor);

/// The groups of a grouped Conv stored as a dense one (group > 1, not depthwise): its weight
/// [Cout, Cin / group, kh, kw] is stored block-diagonal, kh*kw*Cin rows of Cout, zero off its
/// group's channels; 1 for any other Conv.
std::int64_t blockDiagonalGroups(const ir::Graph& graph, const ir::Op& conv);
/// Does the graph have convolutions or pooling? Its 4-D feature maps are then stored channels-last.
bool spatialGraph(const ir::Graph& graph);
/// Per tensor: is it a channels-last map? In a graph with convolutions or pooling, the 4-D tensors
/// that a window op or BatchNormalization reads or writes, or that share an elementwise op or a
/// copy with one of them, are stored channels-last; a 4-D tensor that only matmuls and last-axis
/// normalisations read or write (with its elementwise kin: ConvNeXt's MLP on [N, H, W, C], Swin's
/// attention) is stored row-major, as every tensor of other ranks. Transpose and Reshape re-form
/// a map between the two layouts (element maps).
std::vector<bool> channelsLastTensors(const ir::Graph& graph);
/// Rows x tiles of a tensor as the lowering stores it. A channels-last feature map
/// [N, C, H, W] is N*H*W rows of C (channels along the vector: the MXM reduces over them), a Conv's
/// weight [Cout, Cin, kh, kw] is kh*kw*Cin rows of Cout (blockDiagonalGroups), and a graph input read only by one Conv
/// arrives window-gathered from the host (N*Ho*Wo rows of kh*kw*Cin); otherwise vectorShape().
std::pair<std::int64_t, int> storageGeometry(const topology::ChipSpec& chip, const ir::Graph& graph, ir::TensorId id,
                                             bool channelsLast);
/// The Conv that reads graph input `id` window-gathered (its sole user, whose whole window kh*kw*Cin
/// fits one vector: the host lays the input out im2col, one packed vector per output pixel), else null.
const ir::Op* gatheringConv(const topology::ChipSpec& chip, const ir::Graph& graph, ir::TensorId id);
/// storageGeometry() with the tensor's layout from channelsLastTensors(graph).
std::pair<std::int64_t, int> tensorGeometry(const topology::ChipSpec& chip, const ir::Graph& graph, ir::TensorId id);

/// The matmul tiling the seed's cost model picks: T_m rows per stream, T_k x T_n weights per plane.
struct MatMulTiling {
  int tm = 0, tk = 0, tn = 0;  ///< elements
  Cycle cycles = 0;            ///< the cost model's estimate for one plane doing all tiles
};
/// Minimises (M N K / (T_m T_n T_k)) * t_tile + overhead subject to
/// T_m*T_k + T_k*T_n + T_m*T_n <= sramBudget elements (seed, loop tiling); T_k and T_n are the
/// plane's shape at the dtype (320 INT8, 160 FP16), T_m is bounded by a MEM slice's addresses.
MatMulTiling chooseMatMulTiling(const topology::ChipSpec& chip, std::int64_t m, std::int64_t k, std::int64_t n,
                                int elementBytes, std::int64_t sramBudgetElements);

/// A tensor arriving on a C2C port: one burst per tile, burst t's first vector arriving at arrivals[t].
struct ReceivePlan {
  ir::TensorId tensor = -1;
  int port = 0;
  std::vector<Cycle> arrivals;
  int interval = 1;  ///< cycles between the vectors the receive reads
  /// Cycles between the vectors' arrivals, the link's exact rate (0: interval): vector j of a tile
  /// (its segments' bursts one stream) arrives serializationCycles(j, spacing) after its first.
  double spacing = 0;
  /// Steady state of identical chips in a ring: when >= 0, burst t arrives `sendToArrival` cycles
  /// after this chip's own send of tile t of interface.sends[mirrorsSend] (a dependence, not a
  /// fixed time); `arrivals` is then ignored.
  int mirrorsSend = -1;
  Cycle sendToArrival = 0;

  /// Cycles from a burst's first arrival to the earliest read of rows [r0, r0 + n) of it at
  /// `interval`: the read of its last row meets that row's arrival.
  Cycle readLag(std::int64_t r0, std::int64_t n) const {
    return topology::pacedSerializationCycles(r0 + n - 1, spacing, interval) -
           (n - 1) * interval;
  }
};

/// A tensor leaving on a C2C port, tile by tile.
struct SendPlan {
  ir::TensorId tensor = -1;
  int port = 0;
  int interval = 1;    ///< cycles between the vectors the send hands over
  /// Cycles between the vectors on the link, its exact rate (a fraction; 0: interval). A tile's
  /// segments continue one stream on the link (Step::linkFrom).
  double spacing = 0;
  Cycle deadline = -1; ///< latest start of the first burst (set by the cluster scheduler), -1: none
  /// The consumer takes the tensor when the whole program has run, not as it arrives (a training
  /// step's send_after_pass): when the send goes within the program does not matter.
  bool atProgramEnd = false;
};

/// What crosses the shard's boundary.
struct ShardInterface {
  std::vector<ReceivePlan> receives;
  std::vector<SendPlan> sends;
  /// Tensors made elsewhere that are already in SRAM when the program starts.
  std::vector<ir::TensorId> resident;
  /// Per MEM slice, cycles from the program's start until the chip's earlier programs leave it
  /// (empty: every slice free): a received tensor goes on slices free by its first arrival when
  /// there are such, so that its receives are not held back.
  std::vector<Cycle> sliceFree;
};

/// A lowered shard: the problem, where every tensor sits, and the tasks that send.
/// One run of an MXM plane: every weight install of one (output tile, row group) of a matmul or Conv
/// with the computes under them; its partial sums are emitted by its last compute, so the plane's
/// accumulators are free between runs and the runs of a plane may go in any order.
struct PlaneRun {
  int firstInstall = -1;  ///< task of the run's first install
  int firstCompute = -1;  ///< task of the run's first compute
  int lastCompute = -1;   ///< task of the run's last compute (it emits the sums)
  friend bool operator==(const PlaneRun&, const PlaneRun&) = default;
};

struct LoweredShard {
  explicit LoweredShard(const topology::ChipSpec& chip, alloc::Reuse reuse = alloc::Reuse::kFreshFirst)
      : problem(chip), sram(chip, reuse) {}
  schedule::Problem problem;
  alloc::SramAllocator sram;                  ///< its state after lowering: spill slots come from here
  std::vector<isa::TensorPlacement> tensors;  ///< in tensor-id order
  std::vector<std::vector<int>> sendTasks;    ///< per SendPlan, one task per tile; step 1 is the send
  Cycle matmulLowerBound = 0;                 ///< cycles the busiest MXM plane computes (for reports)
  std::int64_t macs = 0;                      ///< matmul MACs, at the INT8 rate (FP16 counts fp16_rate_divisor each)
  std::vector<isa::FunctionalOperand> operands;   ///< Instruction::operand indexes these (Program::operands)
  std::vector<isa::Accumulator> accumulators; ///< FunctionalOperand::accumulator indexes these (Program::accumulators)
  std::vector<isa::WindowRead> windows;       ///< FunctionalOperand::window indexes these (Program::windows)
  std::vector<isa::WeightFold> folds;         ///< folded resident tensors (Program::folds)
  std::vector<isa::ElementMap> maps;          ///< FunctionalOperand::map indexes these (Program::maps)
  std::vector<std::string> refusals;          ///< ops timed without their values (Program::refusals)
  std::vector<isa::OpOrigin> origins;         ///< Task::origin indexes these: originsOf(graph, ops, interface)
  /// Per MXM plane, its runs in the chained order: run j+1's first install and first compute depend
  /// on run j's last compute (schedule/plane_order.h may reorder them).
  std::vector<std::vector<PlaneRun>> planeRuns;
};

/// The origins of a shard's tasks, by position, so that a program compiled once can be named for
/// every segment of the same shape: op i of `ops` is origin i, send j (its tensor, named by its
/// producer) ops.size() + j, receive k ops.size() + sends + k, then the reads of inputReads in order;
/// each of copy `instance` (OpOrigin::instance; -1: none).
std::vector<isa::OpOrigin> originsOf(const ir::Graph& graph, const std::vector<ir::OpId>& ops,
                                     const ShardInterface& interface, std::int32_t instance = -1);

/// Does lowering `op` read the values of its input `input`, not only its shape (a Slice's starts,
/// ends, axes and steps given as inputs, a reduction's axes)? Other inputs' values reach the chip
/// at run time, by name: a program compiled for one constant's values serves any other's.
bool readsInputValues(const ir::Op& op, size_t input);

/// The inputs an op makes of each op of `ops` with several inputs, as (position in `ops`, input): each
/// has an origin of its own after the receives' (originsOf), which the MEM reads of it name.
std::vector<std::pair<size_t, ir::TensorId>> inputReads(const ir::Graph& graph, const std::vector<ir::OpId>& ops);

/// The input of `op` when it is its only one and an op makes it (OpOrigin::input); else -1.
ir::TensorId madeInput(const ir::Graph& graph, const ir::Op& op);

/// The name of the op that makes `tensor`, a graph input's own name (OpOrigin::inputProducer).
std::string producerName(const ir::Graph& graph, ir::TensorId tensor);

/// The origin of `op` writing `tensor` (-1: none), reading its madeInput with that input's producer.
isa::OpOrigin opOrigin(const ir::Graph& graph, const ir::Op& op, ir::TensorId tensor);

/// The origin of a tensor a shard moves (`kind` "Send" or "Receive") in microbatch `instance`: named
/// by the op that produced it (a graph input by itself).
isa::OpOrigin movedOrigin(const ir::Graph& graph, ir::TensorId tensor, const char* kind, std::int32_t instance = -1);

/// Lowers `ops` (topological order) with their SRAM placement; a shard whose live tensors exceed
/// the SRAM is an error (exit 3) stating the bytes needed and available. The allocator takes
/// never-used space first, then the space accessed last earliest (alloc::Reuse::kFreshFirst), and
/// first fit when the shard fits only so.
Expected<std::unique_ptr<LoweredShard>> lowerShard(const topology::ChipSpec& chip, const ir::Graph& graph,
                                                   const std::vector<ir::OpId>& ops, const ShardInterface& interface);

}  // namespace tsp::lower
