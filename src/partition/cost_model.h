// The cost model's parts: alpha-beta figures of communication on a placement, a layer's share of a
// candidate, stage sends, the pipeline formula and memory by stage (plan_cost.h puts them together).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compile/ir/graph.h"
#include "partition/model_profile.h"
#include "partition/training.h"
#include "support/expected.h"
#include "topology/chip_spec.h"

namespace tsp::partition {

/// Alpha-beta figures of one kind of communication on a placement (ring or point to point).
struct LinkFigures {
  Cycle alpha = 0;            ///< per message: the slowest route's latency plus send and receive
  double cyclesPerByte = 0;   ///< 1 / the narrowest link bandwidth on the routes
  int contention = 1;         ///< the most messages of this kind sharing one link direction at once
  int maxHops = 0;            ///< the longest route
  /// Every two chips of each group joined by a direct link: the scheduler's direct exchange runs
  /// over all of them at once (a tensor-parallel group inside a node).
  bool direct = false;
  /// When the scheduler runs the group's all-reduce hierarchically (whole dragonfly nodes) or as a
  /// multi-ring (the group is a whole ring, torus or mesh): its
  /// estimate (schedule::estimateCollectiveCycles) of the algorithm it picks at each of a few sizes
  /// per chip (bytes, cycles; ascending), the cost between them linear, beyond the last along the
  /// last segment; empty: none.
  std::vector<std::pair<double, double>> fitPoints;
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
  /// Per pipeline stage (all groups measured): `tp` with the hierarchical fit of that stage's own
  /// group, which differs from the first group's where a group spans racks; empty: `tp` for all.
  std::vector<LinkFigures> tpStage;
  const LinkFigures& tpOf(int stage) const {
    return stage >= 0 && stage < static_cast<int>(tpStage.size()) ? tpStage[stage] : tp;
  }
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
/// The forward share of a layer for one microbatch on one chip of the candidate, its tensor-parallel
/// collectives on the group of pipeline stage `stage` (CandidateLinks::tpOf; -1: the first group's).
LayerShare layerShare(const LayerProfile& layer, const Candidate& candidate, const CandidateLinks& links,
                      int stage = -1);

/// The edges of `profile` between layers of different chunks (layerChunk: each layer's chunk),
/// a tensor once per chunk that reads it (the edge to its first reader there): what the chunks send.
std::vector<LayerEdge> crossingEdges(const ModelProfile& profile, const std::vector<int>& layerChunk);

/// Which way the activations between chunks travel: forward, sent by the chunk that makes them,
/// or backward, their gradients sent by the chunk that reads them.
enum class SendDirection : std::uint8_t { kForward, kBackward };
/// Per-microbatch bytes each TP rank of a chunk sends to other chunks (its 1/tp share of a split
/// activation): the activations it makes, or backward the gradients of those it reads.
std::vector<double> chunkSendBytes(const ModelProfile& profile, const Candidate& candidate,
                                   const StageAssignment& stages, SendDirection direction = SendDirection::kForward);
/// Per-microbatch cycles of each chunk's sends (chunkSendBytes; each TP rank its 1/tp share).
std::vector<double> chunkSendCycles(const ModelProfile& profile, const Candidate& candidate,
                                    const StageAssignment& stages, const CandidateLinks& links,
                                    SendDirection direction = SendDirection::kForward);

/// A pipeline's figures from per-microbatch chunk times (chunk k on chip k mod pp).
struct PipelineTime {
  double chunkMax = 0;   ///< t_max
  double iteration = 0;  ///< (m v - 1) t_max + the sum over chips of their longest chunk
  double busy = 0;       ///< busy cycles summed over the chips
  double comm = 0;       ///< the communication part of busy
  std::vector<double> chipBusy;  ///< per pipeline chip: its chunks' cycles over the iteration's microbatches
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

/// What one rank of the candidate's TP group holds of a layer, for the whole batch: the
/// sharding's own figures at the candidate's split and width (LayerProfile::WidthFigures::rank).
LayerMemory rankMemory(const LayerProfile& layer, const Candidate& candidate);

/// What each pipeline chip of a candidate holds for an inference pass, in bytes per pipeline
/// stage: its layers' weights (a weight several of them read once), KV cache, the largest working
/// set of one op and the double-buffered activations it receives (plan_cost.h adds training's).
std::vector<double> inferenceBytesPerChip(const ModelProfile& profile, const Candidate& candidate,
                                          const StageAssignment& stages);

}  // namespace tsp::partition
