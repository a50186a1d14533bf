// The search's cost model: per-layer profiles of a model and the predicted cost of a hybrid plan.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compile/ir/graph.h"
#include "partition/training.h"
#include "support/expected.h"
#include "support/progress.h"
#include "topology/chip_spec.h"

namespace tsp::partition {

/// How a tensor-parallel group of tp chips splits each layer (the splits the sharding mechanism offers).
enum class TensorSplit : std::uint8_t {
  kNone,      ///< tp = 1
  kMegatron,  ///< column- then row-parallel matmuls, attention heads split: all-reduces
  k2d,        ///< 2D matmul decomposition on a q x q grid (tp = q^2): all-gather + reduce-scatter over q
  kSpatial,   ///< convolutions split along the image height: halo exchange with two neighbours
};

/// "none", "megatron", "2d" or "spatial".
const char* tensorSplitName(TensorSplit split);
/// The split named by text, or an error message in `error`.
bool parseTensorSplit(const std::string& text, TensorSplit& split);

/// What the cost model knows of one layer, for the whole batch on one chip.
struct LayerProfile {
  Cycle cycles = 0;          ///< compute cycles of the layer alone on one chip (compiler estimate)
  Cycle installCycles = 0;   ///< the part of cycles spent installing matmul weights: paid per microbatch
  bool fallback = false;     ///< true when cycles is the FLOP-based estimate, not the compiler's
  /// The compiler's cycles at shares of the batch (1, 1/2, 1/4, ...; ascending share); empty: not measured.
  std::vector<std::pair<double, Cycle>> batchCycles;
  /// Cycles of sends to the next stage that the layer's compute hides, per share of the batch; < 0: not measured.
  double sendHiddenPerShare = -1;
  Bytes weightBytes = 0;     ///< weights and constants
  Bytes convWeightBytes = 0; ///< weights of convolutions (replicated by a spatial split)
  Bytes stateBytes = 0;      ///< KV cache, proportional to the batch
  Bytes outBytes = 0;        ///< activations this layer sends to later layers
  Bytes peakBytes = 0;       ///< the largest live activation set of one op of the layer (inputs + outputs)
  Bytes allReduceBytes = 0;  ///< Megatron: outputs of row-parallel matmuls (each one all-reduce)
  int allReduces = 0;        ///< Megatron: number of those all-reduces
  Bytes allGatherBytes = 0;  ///< Megatron: a column-parallel output with no row-parallel partner
  int allGathers = 0;        ///< Megatron: number of those all-gathers
  Bytes matmulOutBytes = 0;  ///< 2D: outputs of the weight matmuls (each reduced over one grid axis)
  /// 2D, from the runtime's sharding: the collectives over one grid axis and their whole tensors'
  /// bytes, [0] of tensors whole on the other axis, [1] of tensors split over it (1/q per chip).
  struct GridCollectives {
    int allReduces = 0, allGathers = 0;
    Bytes allReduceBytes[2] = {0, 0}, allGatherBytes[2] = {0, 0};
  };
  GridCollectives grid[2];  ///< over axis r (the grid's columns), over axis c (its rows)
  /// A Megatron or 2D split at one width, from the runtime's sharding at that width: the layer's
  /// collectives, whether its output leaves split, and the share of its compute one rank does
  /// (1/tp where every op splits; more where some op stays whole, such as attention whose heads
  /// the width does not divide, or a normalisation after an all-reduce).
  struct WidthFigures {
    int allReduces = 0, allGathers = 0;
    Bytes allReduceBytes = 0, allGatherBytes = 0;
    GridCollectives grid[2];
    bool outputSplit = false;
    /// The layer's compute (FLOP-based, as a share of the whole) and its weights' and constants'
    /// bytes that the sharding splits over no, one and two mesh axes.
    double computeOverAxes[3] = {1, 0, 0};
    double weightBytesOverAxes[3] = {0, 0, 0};
    /// The share of the layer's compute one rank does on mesh axes of `axis` devices each.
    double computeShare(double axis) const {
      return computeOverAxes[0] + computeOverAxes[1] / axis + computeOverAxes[2] / (axis * axis);
    }
    /// The bytes of the layer's weights and constants one rank holds.
    double rankWeightBytes(double axis) const {
      return weightBytesOverAxes[0] + weightBytesOverAxes[1] / axis + weightBytesOverAxes[2] / (axis * axis);
    }
  };
  std::map<int, WidthFigures> megatronAt;  ///< by tp; a width missing: the fields above (tp = 2)
  std::map<int, WidthFigures> gridAt;      ///< 2D, by tp = q x q; a width missing: the fields above (2 x 2)
  /// The figures of `split` at width tp, or null (then the tp = 2 / 2 x 2 fields above).
  const WidthFigures* figuresAt(TensorSplit split, int tp) const;
  /// Megatron at width tp: whether the layer's output leaves split.
  bool outputSplitAt(int tp) const {
    const auto* at = figuresAt(TensorSplit::kMegatron, tp);
    return at ? at->outputSplit : outputSplit;
  }
  int weightMatmuls = 0;     ///< matmuls with a weight operand
  Bytes haloBytes = 0;       ///< spatial: bytes one cut exchanges over the layer's k>1 convolutions
  int halos = 0;             ///< spatial: convolutions with a kernel larger than 1
  Cycle convCycles = 0;      ///< spatial: the part of cycles in convolutions (split; the rest is not)
  bool hasConv = false;
  bool outputSplit = false;  ///< Megatron: the layer ends on a column-parallel matmul, its output leaves split tp ways
  std::int64_t parameters = 0;  ///< training: elements of the layer's weights (gradients and optimizer state)
  Bytes trainableBytes = 0;     ///< training: bytes of those weights (the layer's gradients)
  Bytes stashBytes = 0;         ///< training: activations kept from the forward to the backward pass
  /// Training, from the compiler on a batch block of the training graph (-1: not measured): the
  /// backward pass's compute over the forward's (recomputation included; 2 or 3 by FLOPs), and the
  /// forward pass with the loss over the forward without it (the last layer).
  double backwardRatio = -1, forwardScale = -1;
  /// The layer's compute in a training step relative to `cycles` (forward + backward), 1 for inference.
  double trainingWeight() const { return backwardRatio > 0 ? std::max(forwardScale, 1.0) + backwardRatio : 1.0; }
};

/// An activation edge between two layers of a DAG model (from < to).
struct LayerEdge {
  int from = 0, to = 0;
  Bytes bytes = 0;
};

/// Training: a weight read by several layers (a tied embedding): each later layer's partial
/// gradient goes to the first one's chunk when they are on different chips.
struct SharedWeight {
  std::vector<int> layers;  ///< ascending
  Bytes bytes = 0;          ///< of the gradient
};

/// A weight or constant several layers read (a causal mask, a tied embedding): each layer's
/// figures count it, and a chip holding several of those layers holds it once.
struct SharedLeaf {
  Bytes bytes = 0;
  std::vector<int> layers;  ///< ascending
  /// The mesh axes (0 to 2) the sharding splits it over, by (split, tp); missing: split tp ways.
  std::map<std::pair<int, int>, int> axesAt;
};

/// Per-layer profile of a model: computed once per search (the compiler is asked once per distinct layer).
struct ModelProfile {
  std::vector<LayerProfile> layers;
  std::vector<LayerEdge> edges;  ///< every cross-layer activation edge
  std::int64_t samples = 1;      ///< samples one iteration processes (the batch)
  Bytes inputBytes = 0;          ///< graph inputs, fed to the first stage
  bool chain = true;             ///< every cross-layer edge joins layer i to layer i + 1
  bool hasWeightMatmul = false;
  bool hasConv = false;
  int fallbackLayers = 0;        ///< layers whose cycles are the FLOP-based estimate
  int piecewiseLayers = 0;       ///< layers larger than one chip, costed op by op in chip-sized pieces
  std::string fallbackReason;    ///< the compiler's message for the first such layer
  TrainingConfig training;       ///< enabled: the iteration is a training step (partition/training_cost.h)
  std::vector<SharedWeight> sharedWeights;  ///< training: weights several layers read
  std::vector<SharedLeaf> sharedLeaves;     ///< weights and constants several layers read
};

/// Builds the profile: compute cycles from schedule::estimateLayerCycles on each distinct layer;
/// where the compiler cannot lower a layer yet, the FLOP-based estimate of docs/partitioning.md.
/// progress is told after each distinct layer is estimated (distinct layers done, distinct layers).
Expected<ModelProfile> profileModel(const ir::Graph& graph, const topology::ChipSpec& chip, std::int64_t samples,
                                    const support::ProgressFn& progress = {});

/// A text equal for op lists the compiler lowers identically (kinds, shapes, dtypes, roles).
std::string layerSignature(const ir::Graph& graph, const std::vector<ir::OpId>& ops);
/// The ops as a graph of their own (inputs from other ops become graph inputs).
Expected<ir::Graph> layerGraph(const ir::Graph& graph, const std::vector<ir::OpId>& ops);
/// The compiler's cycles of a one-layer graph alone on one chip (inputs resident, nothing sent).
Expected<Cycle> compiledCycles(const ir::Graph& layer, const topology::ChipSpec& chip);

/// FLOP-based compute estimate of a set of ops: MACs at the MXM peak rate plus other FLOPs at the
/// VXM rate (docs/partitioning.md); used only when the compiler cannot lower the layer.
Cycle flopEstimateCycles(const ir::Graph& graph, const std::vector<ir::OpId>& ops, const topology::ChipSpec& chip);

/// Alpha-beta figures of one kind of communication on a placement (ring or point to point).
struct LinkFigures {
  Cycle alpha = 0;            ///< per message: the slowest route's latency plus send and receive
  double cyclesPerByte = 0;   ///< 1 / the narrowest link bandwidth on the routes
  int contention = 1;         ///< the most messages of this kind sharing one link direction at once
  int maxHops = 0;            ///< the longest route
  /// Every two chips of each group joined by a direct link: the scheduler's direct exchange runs
  /// over all of them at once (a tensor-parallel group inside a node).
  bool direct = false;
  /// Cycles to move `bytes` once: alpha + bytes * beta * contention.
  double transfer(double bytes) const { return static_cast<double>(alpha) + bytes * cyclesPerByte * contention; }
};

/// One candidate of the search space.
struct Candidate {
  TensorSplit split = TensorSplit::kNone;
  int dp = 1, tp = 1, pp = 1, microbatches = 1, interleave = 1;

  int chips() const { return dp * tp * pp; }
  /// "dp2-tp8-pp4-m16-v1" (+ "-2d" / "-spatial" for those splits): the tie-breaking key.
  std::string canonical() const;
};

/// Stage assignment of the layers: chunk of each layer (chunks = pp x interleave; chip = chunk % pp).
struct StageAssignment {
  std::vector<int> layerChunk;
  int chunks = 1;
};

/// Predicted figures of one plan.
struct PlanCost {
  bool fits = false;
  double iterationCycles = 0;   ///< one iteration: (m v - 1) t_max + sum over chips of their longest chunk
  double chunkCycles = 0;       ///< the longest chunk time per microbatch (t_max)
  /// Training: the pipeline part of iterationCycles (before the gradient all-reduce and optimizer
  /// tail): the event simulation of the plan's order, or the closed form for long orders.
  double pipelineCycles = 0;
  /// Training: the busiest shared link or transit chip per microbatch (sharedLinkPeriod; 0: none).
  double sharedLinkCycles = 0;
  double throughput = 0;        ///< samples per second of the whole cluster (copies of the plan on spare chips)
  double latencySeconds = 0;    ///< one iteration's batch, first input to last output
  Bytes memoryPerChip = 0;      ///< the fullest chip
  double bubbleFraction = 0;    ///< idle share of the iteration, averaged over pipeline chips
  double commShare = 0;         ///< communication share of the busy time
  int copies = 1;               ///< copies of the plan the cluster holds
};

/// The link directions and transit chips that the messages of one microbatch cross on a
/// placement, every kind of message together (linkFigures): what sharedLinkFloor is made of.
struct SharedLinks {
  /// Kinds of message, one of each per pipeline stage s: the edges of stage s's TP rings, its
  /// sends to the next stage (interleaved: the last stage's to the first), the gradients of those
  /// sends coming back on the reverse routes, and sends from the last stage to stage 0 (the
  /// gradient of a weight both read, a tied embedding's; routed for s = pp - 1 only).
  enum Kind : std::uint8_t { kTpRing, kSendForward, kSendBackward, kToFirstStage, kKinds };
  int stages = 0;
  /// A link direction, or a chip that forwards messages of multi-hop routes (out of its next link):
  /// the messages of each kind crossing it, as (kind index, their cycles per byte summed).
  struct Crossing {
    int stage = -1;  ///< a transit chip's own pipeline stage (-1: a link, or a chip outside the plan)
    std::vector<std::pair<int, double>> messages;
    std::vector<int> coupled;  ///< a transit chip: the other stages whose chips are on the routes it forwards
  };
  std::vector<Crossing> directions, transits;
  std::vector<int> contention;  ///< per kind index: the most messages of it on one link direction
  /// The index of kind k of stage s into the bytes vector of sharedLinkFloor.
  int index(Kind k, int stage) const { return static_cast<int>(k) * stages + stage; }
  int kinds() const { return static_cast<int>(kKinds) * stages; }
};

/// Communication figures the cost model needs for one candidate on its placement.
struct CandidateLinks {
  LinkFigures tp;  ///< ring of a tensor-parallel group
  LinkFigures grid[2];  ///< 2D: the rings along grid axis r (columns) and along axis c (rows)
  LinkFigures pp;  ///< stage-to-stage sends
  LinkFigures dp;  ///< ring of the data-parallel replicas of one chip (training: gradient all-reduce)
  SharedLinks shared;  ///< every per-microbatch message on its links (the groups linkFigures routes)
};

/// What the messages of one microbatch keep the links and transit chips busy, from `bytes` per
/// message of each kind (SharedLinks::index). Per stage: `link`, the busiest link direction or
/// transit chip outside the stage that any message of the stage crosses (its TP rings, its sends
/// and the gradients coming back to it, its sends to stage 0), in cycles of all the messages there;
/// `transit`, the most cycles one of the stage's own chips spends forwarding others' messages.
struct LinkFloor {
  double busiest = 0;
  std::vector<double> link, transit;
  /// Every transit chip of the plan that forwards anything: its stage, cycles and coupled stages.
  struct Transit {
    int stage = 0;
    double cycles = 0;
    const std::vector<int>* coupled = nullptr;
  };
  std::vector<Transit> transitChips;
};
LinkFloor sharedLinkFloor(const SharedLinks& links, const std::vector<double>& bytes);

/// Per-microbatch forward figures of one layer under a candidate: compute and TP collectives.
struct LayerShare {
  double compute = 0, comm = 0;
};
/// Bytes one TP ring edge carries per microbatch for a layer's forward collectives under the
/// candidate (a ring all-reduce of n bytes per chip moves 2 (t-1)/t n over each edge, an all-gather
/// (t-1)/t n; a spatial halo its bytes; 2D the busier grid axis's rings).
double tpEdgeBytes(const LayerProfile& layer, const Candidate& candidate);
/// Below this many bytes per chip the scheduler takes a binomial tree for an all-reduce when its
/// alpha-beta time beats the ring's (collectives' chooseAlgorithm: latency-bound messages).
constexpr double kTreeAllReduceBelowBytes = 64 << 10;
/// Cycles of an all-reduce of `bytes` per chip over `chips` chips as the scheduler picks it: the
/// ring 2(t-1) alpha + 2 (t-1)/t n beta c, or under kTreeAllReduceBelowBytes the tree
/// 2 ceil(log2 t)(alpha + n beta c) when that is shorter; on a direct group the least of those, the
/// two-shot exchange 2 (alpha + n/t beta) and the one-shot alpha + n beta.
double allReduceCycles(double chips, double bytes, const LinkFigures& links);
/// Cycles of an all-gather of `bytes` (the gathered size) over `chips`: the ring (t-1) alpha +
/// (t-1)/t n beta c, on a direct group the exchange alpha + n/t beta.
double allGatherCycles(double chips, double bytes, const LinkFigures& links);

/// Compute cycles of a layer on `share` of the batch, one chip: interpolated between the compiler's
/// measured shares, extrapolated below the smallest along the line through the two smallest.
double layerCyclesAt(const LayerProfile& layer, double share);
/// The forward share of a layer for one microbatch on one chip of the candidate.
LayerShare layerShare(const LayerProfile& layer, const Candidate& candidate, const CandidateLinks& links);

/// Predicts the cost of a candidate with the given stages and link figures on chips of `chip`
/// (clusterChips bounds the copies for the throughput figure).
PlanCost evaluateCandidate(const ModelProfile& profile, const Candidate& candidate, const StageAssignment& stages,
                           const CandidateLinks& links, const topology::ChipSpec& chip, int clusterChips);

/// Per-microbatch bytes each TP rank of a chunk sends to the next stage (its 1/tp share of a split activation).
std::vector<double> chunkSendBytes(const ModelProfile& profile, const Candidate& candidate,
                                   const StageAssignment& stages);
/// Per-microbatch cycles of each chunk's send to the next stage (each TP rank sends its 1/tp share).
std::vector<double> chunkSendCycles(const ModelProfile& profile, const Candidate& candidate,
                                    const StageAssignment& stages, const CandidateLinks& links);

/// A pipeline's figures from per-microbatch chunk times (chunk k on chip k mod pp).
struct PipelineTime {
  double chunkMax = 0;   ///< t_max
  double iteration = 0;  ///< (m v - 1) t_max + the sum over chips of their longest chunk
  double busy = 0;       ///< busy cycles summed over the chips
  double comm = 0;       ///< the communication part of busy
};
/// The pipeline formula of docs/partitioning.md over chunk times and their communication parts.
PipelineTime pipelineTime(const std::vector<double>& chunk, const std::vector<double>& chunkComm,
                          const Candidate& candidate);

/// The share of a chip's SRAM the compiler's allocator fills in practice: every tile takes a run of
/// consecutive rows on one slice, and near a full chip no slice has a long enough run left (BERT
/// shards placed at 93.3 % of the SRAM by the allocator's own count, failed from 93.6 %).
constexpr double kAllocatableSramShare = 0.93;
/// What the memory check lets a plan use of one chip: kAllocatableSramShare of its SRAM.
Bytes allocatableSramBytes(const topology::ChipSpec& chip);

/// Bytes the fullest chip needs for a candidate (weights, KV cache, activations, pipeline stash).
Bytes memoryPerChip(const ModelProfile& profile, const Candidate& candidate, const StageAssignment& stages);

}  // namespace tsp::partition
