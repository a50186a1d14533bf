// Dependence analysis: distance vectors from the index maps, then the class of every iteration dim.
#include "partition/sharding_analysis.h"

#include <numeric>

namespace tsp::partition {

const char* dimClassName(DimClass c) {
  switch (c) {
    case DimClass::kParallel: return "parallel";
    case DimClass::kReduction: return "reduction";
    case DimClass::kWindowed: return "windowed";
  }
  return "?";
}

std::int64_t haloWidth(const ir::IterationSpace& space, const ir::AffineExpr& expr) {
  if (expr.terms.empty()) return 0;
  std::int64_t reach = 0;
  for (size_t t = 1; t < expr.terms.size(); ++t) reach += expr.terms[t].coeff * (space.extents[expr.terms[t].dim] - 1);
  return std::max<std::int64_t>(0, reach - (expr.terms.front().coeff - 1));
}

DependenceInfo analyzeDependences(const ir::IterationSpace& space) {
  const size_t rank = space.extents.size();
  DependenceInfo info;
  info.dims.resize(rank);

  // Accumulation: two iterations write one output element iff they differ only in dims no write
  // index uses, so each such dim contributes the distance vector e_d (a dependence, d_k != 0).
  std::vector<bool> written(rank, false);
  for (const auto& w : space.writes)
    for (const auto& e : w.index)
      for (const auto& t : e.terms) written[t.dim] = true;
  for (size_t d = 0; d < rank; ++d)
    if (!written[d] && space.extents[d] > 1) {
      std::vector<std::int64_t> v(rank, 0);
      v[d] = 1;
      info.distances.push_back(v);
    }

  // Input reuse: in c0*i0 + c1*i1, the iterations (i0, i1) and (i0 + c1/g, i1 - c0/g) read the same
  // element; the vector is realisable when the step fits in both extents.
  for (const auto& r : space.reads)
    for (const auto& e : r.index)
      for (size_t a = 0; a < e.terms.size(); ++a)
        for (size_t b = a + 1; b < e.terms.size(); ++b) {
          const auto& ta = e.terms[a];
          const auto& tb = e.terms[b];
          if (ta.dim == tb.dim) continue;
          const std::int64_t g = std::gcd(ta.coeff, tb.coeff);
          const std::int64_t da = tb.coeff / g, db = ta.coeff / g;
          if (da >= space.extents[ta.dim] || db >= space.extents[tb.dim]) continue;
          std::vector<std::int64_t> v(rank, 0);
          v[ta.dim] = da;
          v[tb.dim] = -db;
          info.reuse.push_back(v);
        }

  for (size_t d = 0; d < rank; ++d) {
    DimInfo& dim = info.dims[d];
    bool zero = true;
    for (const auto& v : info.distances) zero &= v[d] == 0;
    dim.kind = zero ? DimClass::kParallel : DimClass::kReduction;
    dim.splittable = !space.opaque[d];
    if (dim.kind == DimClass::kReduction && space.combiner == ir::Combiner::kNone) dim.splittable = false;
  }
  // A dim that is an inner term of a multi-term index is never split (a window offset, a reshape's
  // inner factor); the leading dim of such an index is windowed when the index reaches past its block.
  for (const auto& r : space.reads)
    for (const auto& e : r.index) {
      if (e.terms.size() < 2) continue;
      for (size_t t = 1; t < e.terms.size(); ++t) info.dims[e.terms[t].dim].splittable = false;
      const int lead = e.terms.front().dim;
      const std::int64_t halo = haloWidth(space, e);
      if (halo > 0 && info.dims[lead].kind == DimClass::kParallel) {
        DimInfo& dim = info.dims[lead];
        dim.kind = DimClass::kWindowed;
        const std::int64_t before = std::max<std::int64_t>(0, -e.offset);
        dim.haloBefore = std::max(dim.haloBefore, before);
        dim.haloAfter = std::max(dim.haloAfter, halo - before);
      }
    }
  // Dims that share a tensor dim with a dim that cannot split (Softmax's j with its statistics' r)
  // cannot split either: the operand would need two layouts at once.
  bool changed = true;
  while (changed) {
    changed = false;
    for (const auto& r : space.reads) {
      for (size_t t = 0; t < r.index.size(); ++t) {
        bool anyBlocked = false;
        for (const auto& other : space.reads)
          if (other.operand == r.operand && t < other.index.size() && !other.index[t].terms.empty() &&
              !info.dims[other.index[t].terms.front().dim].splittable &&
              (r.index[t].terms.empty() || other.index[t].terms.front().dim != r.index[t].terms.front().dim))
            anyBlocked = true;
        if (anyBlocked && !r.index[t].terms.empty() && info.dims[r.index[t].terms.front().dim].splittable) {
          info.dims[r.index[t].terms.front().dim].splittable = false;
          changed = true;
        }
      }
    }
  }
  return info;
}

}  // namespace tsp::partition
