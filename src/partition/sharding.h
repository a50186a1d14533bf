// Sharding: device meshes, tensor sharding specs, GSPMD-style propagation and resharding collectives.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "compile/ir/iteration_space.h"
#include "partition/sharding_analysis.h"
#include "support/expected.h"

namespace tsp::partition {

/// A logical device mesh: named axes with sizes; device ids are mixed-radix, the last axis fastest.
struct Mesh {
  std::vector<std::string> axisNames;
  std::vector<int> axisSizes;

  int devices() const;
  /// The axis called name, or -1.
  int axis(const std::string& name) const;
  /// The coordinate of device on every axis.
  std::vector<int> coords(int device) const;
  int device(const std::vector<int>& coords) const;
  /// The devices that differ from device only on axis, in coordinate order.
  std::vector<int> group(int device, int axis) const;
};

/// A tensor's sharding: for each tensor dim the mesh axis it is split over (block split) or -1,
/// and the mesh axes over which it holds partial sums still to be added. A split dim may be cut
/// into equal parts first (a fused weight's q, k and v): each part is then block-split on its own,
/// and a device holds its block of every part, in part order.
struct TensorSharding {
  std::vector<int> dimAxis;
  std::vector<int> partialAxes;  ///< sorted
  std::vector<std::int64_t> dimParts = {};  ///< parts per dim; empty when every split dim is one part
  /// Per dim, the unit a ceil-sized block is counted in (a head's elements when the axis does not
  /// divide the heads); empty when every dim's unit is one element.
  std::vector<std::int64_t> dimGranule = {};

  /// Fully replicated sharding of a rank-`rank` tensor.
  static TensorSharding replicated(size_t rank) { return {std::vector<int>(rank, -1), {}, {}}; }
  /// The parts dim d is cut into before its block split (1: a plain block split).
  std::int64_t parts(size_t d) const { return d < dimParts.size() ? dimParts[d] : 1; }
  /// Sets dim d's parts, keeping dimParts empty while every dim is one part.
  void setParts(size_t d, std::int64_t parts);
  /// The unit dim d's blocks are counted in (1: elements).
  std::int64_t granule(size_t d) const { return d < dimGranule.size() ? dimGranule[d] : 1; }
  /// Sets dim d's unit, keeping dimGranule empty while every unit is one element.
  void setGranule(size_t d, std::int64_t granule);
  /// The (mesh axis -> tensor dim) list.
  std::vector<std::pair<int, int>> entries() const;
  bool isReplicated() const;
  /// "[tp,-] partial(dp)" with mesh axis names; a dim in parts reads "3xtp", one in units of 64
  /// elements "tp/64".
  std::string text(const Mesh& mesh) const;
  friend bool operator==(const TensorSharding&, const TensorSharding&) = default;
};

/// Resharding step kinds, each one collective (or local slice) over one mesh axis.
enum class ReshardKind : std::uint8_t {
  kAllReduce,      ///< partial -> replicated
  kReduceScatter,  ///< partial -> split on a dim
  kAllGather,      ///< split on a dim -> replicated
  kAllToAll,       ///< split on one dim -> split on another
  kSlice,          ///< replicated -> split (local, no communication)
  kHalo,           ///< split -> split with the neighbours' edge elements (Send/Recv to neighbours)
};

/// "AllReduce", "ReduceScatter", "AllGather", "AllToAll", "Slice" or "Halo".
const char* reshardKindName(ReshardKind kind);

/// One resharding step on one mesh axis.
struct ReshardStep {
  ReshardKind kind;
  int axis = -1;
  int dim = -1;       ///< the tensor dim gathered, scattered, sliced, or haloed (AllToAll: the new split dim)
  int fromDim = -1;   ///< AllToAll: the old split dim
  std::int64_t haloBefore = 0, haloAfter = 0;  ///< kHalo: elements from the previous and next device
  std::int64_t parts = 1;      ///< parts of `dim` in the result (scatter, slice, AllToAll)
  std::int64_t fromParts = 1;  ///< parts of the gathered dim (AllGather: `dim`, AllToAll: `fromDim`)
  std::int64_t granule = 1, fromGranule = 1;  ///< the units of those dims' blocks
  friend bool operator==(const ReshardStep&, const ReshardStep&) = default;
};

/// Where specs disagree: the operand `operand` of op `op` (op == -1: graph output `operand`) moves
/// from `from` to `to` through `steps`, in order. Later operands that need the same tensor moved the
/// same way read its result (`alsoFeeds`): a tensor is reduced or gathered once, not once per consumer.
struct Reshard {
  ir::OpId op = -1;
  int operand = 0;
  ir::TensorId tensor = -1;
  TensorSharding from, to;
  std::vector<ReshardStep> steps;
  std::vector<std::pair<ir::OpId, int>> alsoFeeds;  ///< further (op, operand) reading the moved value
};

/// The result of propagation: every tensor's sharding, every op's split of its iteration dims
/// (mesh axis or -1 per dim), and the resharding between them.
struct ShardingPlan {
  Mesh mesh;
  std::vector<TensorSharding> tensors;
  std::vector<std::vector<int>> opDimAxis;
  std::vector<std::vector<std::int64_t>> opDimParts;  ///< per op and iteration dim: parts of a split dim
  std::vector<std::vector<std::int64_t>> opDimGranule;  ///< per op and iteration dim: the unit of its blocks
  std::vector<Reshard> reshards;

  /// Reshards of one kind (any axis).
  int count(ReshardKind kind) const;
};

/// Propagates annotations (tensor -> sharding; unannotated graph inputs are replicated, unannotated
/// states, weights and constants take the layout their first consumer wants) through the graph in
/// topological order, GSPMD style, and records a reshard wherever an op's operand spec disagrees.
/// Graph outputs end without partial sums. Errors name the tensor or op.
Expected<ShardingPlan> propagateShardings(const ir::Graph& graph, const Mesh& mesh,
                                          const std::map<ir::TensorId, TensorSharding>& annotations);

/// Chooses annotations during propagation: called before each op with the plan so far (every
/// earlier op propagated); it may annotate the op's operands that no earlier op has read (weights
/// and constants), as if they had been annotated from the start. Returns false to give up (the
/// propagation then ends with an error).
using AnnotateBeforeOp = std::function<bool(ir::OpId op, const ShardingPlan& sofar,
                                            std::map<ir::TensorId, TensorSharding>& annotations)>;

/// propagateShardings with annotations chosen on the way; `annotations` ends with every one chosen.
Expected<ShardingPlan> propagateShardings(const ir::Graph& graph, const Mesh& mesh,
                                          std::map<ir::TensorId, TensorSharding>& annotations,
                                          const AnnotateBeforeOp& before);

/// The reshard steps from `from` to `to` (halo steps are added by propagation, not here).
std::vector<ReshardStep> reshardSteps(const TensorSharding& from, const TensorSharding& to);

/// Per tensor and dim, the equal parts that later ops cut the dim into (Split, Slice, Concat, a
/// Gather of constant indices), carried back through every op's index maps, a Reshape's factors
/// included: a fused QKV weight's output dim has 3 parts. 1 where nothing cuts the dim.
std::vector<std::vector<std::int64_t>> consumerParts(const ir::Graph& graph);

/// Per tensor and dim, the unit that later ops keep whole: a Reshape that factors the dim into
/// [.., heads, hd] keeps hd elements together (into [.., kv_heads, group, hd] a KV head's group of
/// query heads; the factors of the dim's parts come first), carried back through every op's index
/// maps. A split the axis does not divide then gives each device whole heads. 1 where nothing
/// factors it.
std::vector<std::vector<std::int64_t>> consumerGranules(const ir::Graph& graph);

/// Elements of one part of a dim of `extent` in `parts` parts that a device of `size` holds: the
/// ceil-sized block of whole units of `granule` elements (the last devices' blocks are padded when
/// size does not divide the part's units).
std::int64_t blockOf(std::int64_t extent, std::int64_t parts, int size, std::int64_t granule = 1);

/// The unit a split of a dim keeps: `granule` when the block split in units differs from the one in
/// elements (the axis does not divide the units), else 1 (the layouts coincide).
std::int64_t effectiveGranule(std::int64_t extent, std::int64_t parts, int size, std::int64_t granule);

/// The global index of local index `local` of a dim of `extent` split over `size` devices in
/// `parts` parts, on the device at position `pos` along the axis; -1 for a padding element.
std::int64_t globalIndex(std::int64_t local, std::int64_t extent, std::int64_t parts, int size, int pos,
                         std::int64_t granule = 1);

/// The local shape of a tensor of `shape` under sharding on mesh: a split dim holds parts x the
/// ceil-sized block of each part (padded where the axis does not divide it).
std::vector<std::int64_t> localShape(const std::vector<std::int64_t>& shape, const TensorSharding& sharding,
                                     const Mesh& mesh);

/// The bytes of a tensor's local block under sharding on mesh (localShape).
std::int64_t localBytes(const ir::Tensor& tensor, const TensorSharding& sharding, const Mesh& mesh);

}  // namespace tsp::partition
