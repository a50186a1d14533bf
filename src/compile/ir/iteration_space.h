// Iteration spaces of IR ops: the loop nest each op runs and the affine index maps of its operands (linalg style).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "support/expected.h"

namespace tsp::ir {

/// One term coeff * i_dim of an affine index expression.
struct AffineTerm {
  int dim = 0;
  std::int64_t coeff = 1;
  friend bool operator==(const AffineTerm&, const AffineTerm&) = default;
};

/// sum(coeff * i_dim) + offset over the iteration dims; no terms means a constant (a broadcast dim).
struct AffineExpr {
  std::vector<AffineTerm> terms;  ///< sorted by coefficient, largest first (the leading term)
  std::int64_t offset = 0;
  friend bool operator==(const AffineExpr&, const AffineExpr&) = default;
};

/// How one operand is indexed: one expression per tensor dim.
struct OperandAccess {
  int operand = 0;  ///< input index (reads) or output index (writes)
  std::vector<AffineExpr> index;
};

/// How a value is combined over the iteration dims that no write indexes (the reduction dims).
enum class Combiner : std::uint8_t {
  kNone,  ///< no decomposable combiner (normalisation statistics, means): a split needs the whole dim
  kSum,   ///< partial results add up: a split reduction needs a partial-sum collective
  kMax,   ///< partial results combine by max
};

/// The loop nest of an op: named dims with extents, the operands' index maps, the reduction combiner.
/// Read accesses may name one input more than once (Softmax reads X[i,j] and X[i,r]).
struct IterationSpace {
  std::vector<std::string> dimNames;
  std::vector<std::int64_t> extents;
  std::vector<OperandAccess> reads;
  std::vector<OperandAccess> writes;
  Combiner combiner = Combiner::kNone;
  /// Per dim: the op's indices are not an affine function of it (data-dependent, an element
  /// reorder without a common factorisation, a concat axis): the dim cannot be split.
  std::vector<bool> opaque;
  /// Per read access: the index is selected by data (Gather's table row), so the read is one-hot.
  std::vector<bool> selected;

  /// The linalg-style text: "Y[i,j] += MatMul(A[i,k], B[k,j])".
  std::string text(const Graph& graph, const Op& op) const;
};

/// The iteration space of op in graph; a model error naming the op for kinds it cannot describe.
Expected<IterationSpace> iterationSpace(const Graph& graph, const Op& op);

/// The text of one affine expression over the space's dim names ("h*2+r-1").
std::string exprText(const IterationSpace& space, const AffineExpr& expr);

}  // namespace tsp::ir
