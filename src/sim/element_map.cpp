// Functional SXM permutes: output vectors re-formed element by element from their sources' SRAM image (isa::ElementMap).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "sim/functional_state.h"

namespace tsp::sim {

namespace {

// The placement that holds a tensor (the first entry of that name), or null.
const isa::TensorPlacement* placementOf(const isa::Program& program, const std::string& name) {
  auto it = std::find_if(program.tensors.begin(), program.tensors.end(),
                         [&](const isa::TensorPlacement& t) { return t.name == name; });
  return it == program.tensors.end() ? nullptr : &*it;
}

std::int64_t product(const std::int64_t* dims, size_t rank) {
  std::int64_t n = 1;
  for (size_t d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

}  // namespace

Expected<VectorRun> FunctionalState::permute(const isa::Program& program, const isa::FunctionalOperand& operand,
                                             std::int64_t count) const {
  if (operand.map < 0 || operand.map >= static_cast<std::int32_t>(program.maps.size()))
    return makeError(ExitCode::kInternal, "an SXM permute without its element map");
  const isa::ElementMap& map = program.maps[static_cast<size_t>(operand.map)];
  const size_t rank = map.from.size();
  if (map.sources.empty() || map.sourceDims.size() != rank * map.sources.size() || map.starts.size() != rank ||
      map.steps.size() != rank || map.sourceCols.size() != map.sources.size() || map.outCols <= 0 ||
      (map.concatAxis >= 0 && map.offsets.size() != map.sources.size()))
    return makeError(ExitCode::kInternal, "a malformed SXM element map");
  std::vector<const isa::TensorPlacement*> sources;
  for (const auto& name : map.sources) {
    sources.push_back(placementOf(program, name));
    if (!sources.back()) return makeError(ExitCode::kModel, fmt::format("no placement holds the permute's source '{}'", name));
  }
  const isa::TensorPlacement* indices = map.indices.empty() ? nullptr : placementOf(program, map.indices);
  if (!map.indices.empty() && !indices)
    return makeError(ExitCode::kModel, fmt::format("no placement holds the Gather's indices '{}'", map.indices));
  const int eb = bytesOf(*sources[0]);
  const int lanes = vectorBytes_ / eb;
  const std::int64_t outCols = map.outCols;
  const std::int64_t outElements = product(map.outDims.data(), map.outDims.size());
  const std::int64_t indexCols = map.indexDims.empty() ? 1 : map.indexDims.back();
  // Element (row, col) of a placement stored rows x cols, as its bytes.
  auto element = [&](const isa::TensorPlacement& t, std::int64_t flat, std::int64_t cols) {
    const int tb = bytesOf(t), tl = vectorBytes_ / tb;
    const std::int64_t r = flat / cols, c = flat % cols;
    const auto [unit, address] = vectorOf(t, 0, static_cast<int>(c / tl), r);
    return vectorAt(sliceOf(unit), address) + (c % tl) * tb;
  };
  auto out = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(count) * vectorBytes_, 0);
  std::vector<std::int64_t> coord(map.outDims.size()), src(rank);
  for (std::int64_t j = 0; j < count; ++j)
    for (int l = 0; l < lanes; ++l) {
      const std::int64_t c = std::int64_t{operand.tile} * lanes + l;
      const std::int64_t f = (operand.row0 + j) * outCols + c;
      if (c >= outCols || f >= outElements) continue;  // lanes past the values stay zero
      std::int64_t rest = f;
      for (size_t d = map.outDims.size(); d-- > 0;) {
        coord[d] = rest % map.outDims[d];
        rest /= map.outDims[d];
      }
      for (size_t s = 0; s < rank; ++s) {
        if (static_cast<std::int32_t>(s) == map.indexAxis && indices) {
          std::int64_t at = 0;  // the indices' element at the output coordinates [indexAxis, +indexDims)
          for (size_t d = 0; d < map.indexDims.size(); ++d) at = at * map.indexDims[d] + coord[s + d];
          std::int64_t k = 0;
          std::memcpy(&k, element(*indices, at, indexCols), static_cast<std::size_t>(bytesOf(*indices)));
          if (bytesOf(*indices) == 4) k = static_cast<std::int32_t>(k);
          const std::int64_t n = map.sourceDims[s];
          if (k < 0) k += n;
          if (k < 0 || k >= n)
            return makeError(ExitCode::kModel, fmt::format("Gather index {} of '{}' (element {}) is out of range [0, {}) of '{}'",
                                                           k, map.indices, at, n, map.sources[0]));
          src[s] = k;
        } else {
          src[s] = map.starts[s] + map.steps[s] * coord[static_cast<size_t>(map.from[s])];
        }
      }
      size_t k = 0;
      if (map.concatAxis >= 0) {
        const auto axis = static_cast<size_t>(map.concatAxis);
        while (k + 1 < map.offsets.size() && src[axis] >= map.offsets[k + 1]) ++k;
        src[axis] -= map.offsets[k];
      }
      const std::int64_t* dims = map.sourceDims.data() + k * rank;
      std::int64_t flat = 0;
      for (size_t s = 0; s < rank; ++s) flat = flat * dims[s] + src[s];
      const std::int64_t cols = std::max<std::int64_t>(1, map.sourceCols[k]);
      std::memcpy(out->data() + static_cast<std::size_t>(j) * vectorBytes_ + static_cast<std::size_t>(l) * eb,
                  element(*sources[k], flat, cols), static_cast<std::size_t>(eb));
    }
  return VectorRun(out);
}

}  // namespace tsp::sim
