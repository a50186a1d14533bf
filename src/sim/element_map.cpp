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

std::int64_t product(const std::vector<std::int64_t>& dims) {
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
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
  const std::int64_t outElements = product(map.outDims);
  const std::int64_t indexCols = map.indexDims.empty() ? 1 : map.indexDims.back();
  // Element (row, col) of a placement stored rows x cols, as its bytes.
  auto element = [&](const isa::TensorPlacement& t, std::int64_t flat, std::int64_t cols) {
    const int tb = bytesOf(t), tl = vectorBytes_ / tb;
    const std::int64_t r = flat / cols, c = flat % cols;
    const auto [unit, address] = vectorOf(t, 0, static_cast<int>(c / tl), r);
    return vectorAt(sliceOf(unit), address) + (c % tl) * tb;
  };
  auto out = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(count) * vectorBytes_, 0);
  for (std::int64_t j = 0; j < count; ++j)
    for (int l = 0; l < lanes; ++l) {
      const std::int64_t c = std::int64_t{operand.tile} * lanes + l;
      const std::int64_t f = (operand.row0 + j) * outCols + c;
      if (c >= outCols || f >= outElements) continue;  // lanes past the values stay zero
      std::int64_t index = 0;
      if (indices) {  // the table row: the indices' value at the output's index coordinates
        const std::int64_t at = isa::indexElementOf(map, f);
        std::memcpy(&index, element(*indices, at, indexCols), static_cast<std::size_t>(bytesOf(*indices)));
        if (bytesOf(*indices) == 4) index = static_cast<std::int32_t>(index);
        const std::int64_t n = map.sourceDims[static_cast<size_t>(map.indexAxis)];
        if (index < 0) index += n;
        if (index < 0 || index >= n)
          return makeError(ExitCode::kModel, fmt::format("Gather index {} of '{}' (element {}) is out of range [0, {}) of '{}'",
                                                         index, map.indices, at, n, map.sources[0]));
      }
      const auto [k, flat] = isa::sourceElementOf(map, f, index);
      std::memcpy(out->data() + static_cast<std::size_t>(j) * vectorBytes_ + static_cast<std::size_t>(l) * eb,
                  element(*sources[k], flat, std::max<std::int64_t>(1, map.sourceCols[k])), static_cast<std::size_t>(eb));
    }
  return VectorRun(out);
}

}  // namespace tsp::sim
