// The splits a plan applies to a graph, independent of any plan: the batch blocks of data
// parallelism and microbatches, and how a tensor-parallel group splits each layer (its mesh and the
// annotations the sharding propagates).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "compile/ir/graph.h"
#include "partition/sharding.h"
#include "support/expected.h"

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

/// The mesh of one TP group: axis "tp" of tp devices (one when tp = 1); for the 2D split the
/// q x q grid {r, c} (device r q + c is TP rank r q + c).
Mesh tensorMesh(TensorSplit split, int tp);

/// One batch block of the graph: its inputs split on their leading (batch) dim into `blocks`
/// (dp x microbatches) by the sharding mechanism, block 0's graph (every block has its shapes and
/// weights). Errors name the input whose batch does not divide, or the op that would need
/// communication between blocks.
Expected<ir::Graph> batchBlockGraph(const ir::Graph& graph, int blocks);

/// The weight of a weight matmul (MatMul, Gemm) and the weight dim that indexes the op's output. The
/// weight may be either operand, transposed by Gemm's transA/transB or by a Transpose between the
/// initializer and the op, and a weight of more dims may be reshaped into the op's matrix (an Einsum
/// contraction "bsh,hnd->bsnd" imports as a Reshape of its [h, n, d] weight into [h, n d]): the
/// output dim is then the first weight dim of the run the matrix dim merges, and so is the
/// contracted dim.
struct WeightOperand {
  int operand;          ///< the op's input (0 or 1) the weight reaches
  ir::TensorId weight;  ///< the initializer
  int outDim, contractedDim;
  bool direct;  ///< the op reads the weight itself (no Transpose or Reshape between)
};
/// The op's weight operand, or nullopt when the op is not a MatMul or Gemm on a weight.
std::optional<WeightOperand> weightOperand(const ir::Graph& graph, const ir::Op& op);

/// Annotations that realise a tensor split over the devices of `mesh` (tensorMesh of the split and
/// its width): Megatron by column-splitting the weight of every weight MatMul whose activation is
/// not split over tp (propagation then makes its partner row-parallel, splits attention heads and
/// inserts the all-reduces); spatial by splitting 4-D inputs on their height; 2D by splitting every
/// weight matmul's weight over both grid axes (K over the axis its activation's last dim is split
/// on, N over the other), so that each chip holds 1/tp of it (tp not a square: kConfig).
/// Errors name the tensor.
Expected<std::map<ir::TensorId, TensorSharding>> planAnnotations(const ir::Graph& graph, TensorSplit split,
                                                                 const Mesh& mesh);

}  // namespace tsp::partition
