// k-way graph partitioning through METIS (the only place METIS is called).
#include "partition/metis_partition.h"

#include <mutex>

#include <fmt/format.h>
#include <metis.h>

namespace tsp::partition {

Expected<std::vector<int>> partitionGraphKway(const std::vector<int>& xadj, const std::vector<int>& adjncy,
                                              const std::vector<int>& vertexWeights,
                                              const std::vector<int>& edgeWeights, int parts) {
  idx_t n = static_cast<idx_t>(xadj.size()) - 1;
  if (n <= 0) return std::vector<int>{};
  if (parts <= 1) return std::vector<int>(n, 0);
  if (parts > n) return makeError(ExitCode::kInternal, fmt::format("cannot split {} vertices into {} parts", n, parts));
  std::vector<idx_t> x(xadj.begin(), xadj.end()), a(adjncy.begin(), adjncy.end());
  std::vector<idx_t> vw(vertexWeights.begin(), vertexWeights.end()), ew(edgeWeights.begin(), edgeWeights.end());
  idx_t constraints = 1, nparts = parts, objective = 0;
  std::vector<idx_t> part(n, 0);
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_SEED] = 1;  // deterministic across runs and ranks
  options[METIS_OPTION_CONTIG] = 0;
  // METIS keeps global state (GKlib's memory core): calls from threads of one process take turns.
  static std::mutex metisMutex;
  std::lock_guard<std::mutex> lock(metisMutex);
  const int status = METIS_PartGraphKway(&n, &constraints, x.data(), a.data(), vw.empty() ? nullptr : vw.data(),
                                         nullptr, ew.empty() ? nullptr : ew.data(), &nparts, nullptr, nullptr, options,
                                         &objective, part.data());
  if (status != METIS_OK) return makeError(ExitCode::kInternal, fmt::format("METIS failed with status {}", status));
  return std::vector<int>(part.begin(), part.end());
}

}  // namespace tsp::partition
