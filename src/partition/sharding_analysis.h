// Dependence analysis over iteration spaces: which dims of an op are parallel, reductions or windows.
#pragma once

#include <cstdint>
#include <vector>

#include "compile/ir/iteration_space.h"

namespace tsp::partition {

/// What splitting one iteration dim over chips costs (the seed's dependence-distance rule).
enum class DimClass : std::uint8_t {
  kParallel,   ///< every dependence distance is 0 in this dim: split freely
  kReduction,  ///< iterations accumulate into one element: a split leaves partial sums (a collective)
  kWindowed,   ///< parallel, but neighbouring iterations read overlapping input: a split needs a halo
};

/// "parallel", "reduction" or "windowed".
const char* dimClassName(DimClass c);

/// The classification of one iteration dim.
struct DimInfo {
  DimClass kind = DimClass::kParallel;
  bool splittable = true;  ///< false: opaque, a non-decomposable reduction, or an inner window term
  /// kWindowed: input elements a block of this dim reads beyond its own block, before and after,
  /// per operand access (the halo rows), from the leading-term rule of docs/partitioning.md.
  std::int64_t haloBefore = 0, haloAfter = 0;
};

/// Dependences of one op: distance vectors between iterations that write the same output element
/// (accumulation), reuse vectors between iterations that read the same input element, and the class of each dim.
struct DependenceInfo {
  std::vector<std::vector<std::int64_t>> distances;  ///< one per accumulation dependence
  std::vector<std::vector<std::int64_t>> reuse;      ///< realisable input-reuse vectors
  std::vector<DimInfo> dims;
};

/// Classifies every dim of space: a dim whose distances are all zero is parallel, else a reduction;
/// a parallel dim coupled by a realisable reuse vector to another dim is windowed.
DependenceInfo analyzeDependences(const ir::IterationSpace& space);

/// Halo of a block split of expr's leading dim: input elements a block reads beyond its own
/// block in total (before + after): sum over the other terms of coeff*(extent-1), less (leading coeff - 1).
std::int64_t haloWidth(const ir::IterationSpace& space, const ir::AffineExpr& expr);

}  // namespace tsp::partition
