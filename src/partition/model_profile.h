// The model profile the search costs plans on: per-layer compute from the compiler, bytes, TP figures.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compile/ir/graph.h"
#include "partition/tensor_split.h"
#include "partition/training.h"
#include "support/expected.h"
#include "support/progress.h"
#include "topology/chip_spec.h"

namespace tsp::partition {

/// What a layer's ops hold on a chip, for the whole batch: their weights and constants and their
/// KV cache (each tensor once per layer), and the largest live set of one op (its activation
/// inputs and outputs).
struct LayerMemory {
  Bytes weightBytes = 0;  ///< weights and constants
  Bytes stateBytes = 0;   ///< KV cache, proportional to the batch
  Bytes peakBytes = 0;    ///< the largest live activation set of one op of the layer (inputs + outputs)
};
/// The memory of each of a graph's layers (ops of a layer past the last counted in the last):
/// the one count of the whole graph's layers and of every sharded rank's graph.
std::vector<LayerMemory> layerMemory(const ir::Graph& graph, int layerCount);

/// What the cost model knows of one layer, for the whole batch on one chip.
struct LayerProfile {
  Cycle cycles = 0;          ///< compute cycles of the layer alone on one chip (compiler estimate)
  Cycle installCycles = 0;   ///< the part of cycles spent installing matmul weights: paid per microbatch
  /// The MXM's weight-bound cycles: every 320 x 320 tile of its weight matmuls' and convolutions'
  /// weights one install per pass (2-byte types 4 passes), over the planes: the part of the fixed
  /// cycles a tensor split divides.
  Cycle weightInstallCycles = 0;
  bool fallback = false;     ///< true when cycles is the FLOP-based estimate, not the compiler's
  /// The compiler's cycles at shares of the batch (1, 1/2, 1/4, ...; ascending share); empty: not measured.
  std::vector<std::pair<double, Cycle>> batchCycles;
  /// Cycles of sends to the next stage that the layer's compute hides, per share of the batch; < 0: not measured.
  double sendHiddenPerShare = -1;
  /// Cycles by which the layer overlaps the one before it when both run on one chip in one program
  /// (the compiler's cycles of the two alone, less those of the pair compiled together: the second's
  /// weight installation and other independent work scheduled under the first's); 0: not measured.
  Cycle overlapWithPrevious = 0;
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
    /// The share of the layer's compute one rank does: its graph's ops (padded blocks included)
    /// against the whole layer's, both by the FLOP-based rates.
    double computeShare = 1;
    /// For a layer too large for one chip (estimated piecewise, no batch curve to split): rank 0's
    /// layer at this width compiled alone, for the whole batch, once it fits one chip; 0 otherwise.
    Cycle rankCycles = 0;
    /// What one rank's graph holds for the layer (layerMemory of the sharded graph at this width,
    /// padded blocks included), for the whole batch.
    LayerMemory rank;
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
  /// Training at a Megatron width, from the compiler on TP rank 0's training graph of the same batch
  /// block (the training step's: every partial input gradient all-reduced over the group): the
  /// layer's forward and backward compute (the runs between its collectives, each compiled alone,
  /// summed) over the whole layer's forward, and the collectives of its backward pass (recomputation
  /// included), bytes for the whole batch.
  struct TrainingWidth {
    double forward = -1, backward = -1;
    int allReduces = 0, allGathers = 0;
    Bytes allReduceBytes = 0, allGatherBytes = 0;
  };
  std::map<int, TrainingWidth> trainingAt;  ///< by tp (Megatron); a width missing: the ratios above
  /// The layer's compute in a training step relative to `cycles` (forward + backward), 1 for inference.
  double trainingWeight() const { return backwardRatio > 0 ? std::max(forwardScale, 1.0) + backwardRatio : 1.0; }
};

/// An activation edge between two layers of a DAG model (from < to).
/// One per tensor and reading layer: a tensor read by several later layers has an edge to each,
/// and a chunk receives it once however many of its layers read it.
struct LayerEdge {
  int from = 0, to = 0;
  Bytes bytes = 0;
  /// The tensor the edge carries (its id in the graph), shared by the edges to its other readers;
  /// -1: a tensor of its own.
  std::int64_t tensor = -1;
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
  /// The bytes one rank holds of it (its block, padded where the width does not divide it), by
  /// (split, tp); missing: bytes / tp.
  std::map<std::pair<int, int>, Bytes> rankBytesAt;
};

/// The widest tensor split the profile carries figures for (powers of two; 2D on q x q grids).
constexpr int kWidestSplit = 4096;

/// The tensor splits a run costs plans at. The sharding figures (collectives, memory, FLOP share)
/// are computed at tp 2, 2 x 2 and every width up to `upTo`; what the compiler measures at a width
/// (a rank's layer, WidthFigures::rankCycles; the training figures, LayerProfile::trainingAt) only
/// at the (split, tp) pairs of `measured`, the ones the run's plans are costed at.
struct CostedWidths {
  int upTo = kWidestSplit;
  std::set<std::pair<TensorSplit, int>> measured;
  bool measures(TensorSplit split, int tp) const { return measured.count({split, tp}) > 0; }
};
/// What a search with TP groups up to `cap` costs: Megatron at every power of two up to it, 2D on
/// every q x q grid up to it.
CostedWidths searchedWidths(int cap);
/// What a given plan costs: its own split and width only (none when tp < 2); figures up to `upTo`.
CostedWidths planWidths(TensorSplit split, int tp, int upTo);

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
  /// The sharding figures (LayerProfile::megatronAt, gridAt) are at tp 2, 2 x 2 and every width up
  /// to this; widenProfile adds the wider ones.
  int figuresUpTo = kWidestSplit;
  /// The (split, tp) pairs the compiler measured (CostedWidths::measured): applyTraining measures
  /// the training figures at the Megatron ones.
  std::set<std::pair<TensorSplit, int>> measuredWidths;
};

/// One compile the profile asks of the compiler: a layer's graph (a share of its batch, or two
/// consecutive layers) alone on one chip; with linkCycles > 0 its outbound tensors leave over a link
/// that carries one vector in `linkCycles` cycles, at that exact rate (compiledCycles).
struct LayerCompile {
  const ir::Graph* graph = nullptr;
  double linkCycles = 0;
  /// Non-empty: these ops of graph compiled as one shard of a plan of many, nothing sent (a chip-sized
  /// piece of an op split for a layer too large for one chip); linkCycles is then unused.
  std::vector<ir::OpId> shardOps;
};
/// Compiles a batch of layer graphs: element i is compiledCycles of job i; progress is told
/// (done, share) after each compile. profileModel hands the same batch to it on every MPI rank, so
/// an implementation may deal the jobs over the ranks.
using LayerCompileBatch = std::function<std::vector<Expected<Cycle>>(
    const topology::ChipSpec&, const std::vector<LayerCompile>&, const support::ProgressFn&)>;
/// One job of a batch compiled here: its cycles.
Expected<Cycle> compileLayer(const topology::ChipSpec& chip, const LayerCompile& job);
/// The batch compiled here, job after job.
std::vector<Expected<Cycle>> compileLayers(const topology::ChipSpec& chip, const std::vector<LayerCompile>& jobs,
                                           const support::ProgressFn& progress = {});

/// Builds the profile: compute cycles from schedule::estimateLayerCycles on each distinct layer;
/// where the compiler cannot lower a layer yet, the FLOP-based estimate of docs/partitioning.md.
/// The compiles of distinct layers, their batch shares and consecutive pairs go to `compile` as one
/// batch (compileLayers when empty), then those of the layers too large for one chip (their pieces),
/// then their rank layers at each width; progress is told (compiles done, compiles) as it reports.
/// costed: the widths the run's plans are costed at. The sharding figures are computed at the
/// widths up to costed.upTo only (ModelProfile::figuresUpTo), and a layer too large for one chip has
/// its rank's layer compiled (WidthFigures::rankCycles) at the widths costed.measured only.
Expected<ModelProfile> profileModel(const ir::Graph& graph, const topology::ChipSpec& chip, std::int64_t samples,
                                    const support::ProgressFn& progress = {},
                                    const CostedWidths& costed = searchedWidths(kWidestSplit),
                                    const LayerCompileBatch& compile = {});
/// Adds the sharding figures at the widths above ModelProfile::figuresUpTo, up to kWidestSplit:
/// their collectives, memory and FLOP share, no rank layer compiled (what the smallest fit needs).
void widenProfile(const ir::Graph& graph, const topology::ChipSpec& chip, ModelProfile& profile);

/// A text equal for op lists the compiler lowers identically (kinds, shapes, dtypes, roles).
std::string layerSignature(const ir::Graph& graph, const std::vector<ir::OpId>& ops);
/// The ops as a graph of their own (inputs from other ops become graph inputs).
Expected<ir::Graph> layerGraph(const ir::Graph& graph, const std::vector<ir::OpId>& ops);
/// The compiler's cycles of a one-layer graph alone on one chip (inputs resident; with linkCycles > 0
/// its outbound tensors sent as a stage's are, over a link of one vector per `linkCycles` cycles at
/// that exact rate (schedule::linkPace), else nothing sent).
Expected<Cycle> compiledCycles(const ir::Graph& layer, const topology::ChipSpec& chip, double linkCycles = 0);

/// FLOP-based compute estimate of a set of ops: MACs at the MXM peak rate plus other FLOPs at the
/// VXM rate (docs/partitioning.md); used only when the compiler cannot lower the layer.
Cycle flopEstimateCycles(const ir::Graph& graph, const std::vector<ir::OpId>& ops, const topology::ChipSpec& chip);

}  // namespace tsp::partition
