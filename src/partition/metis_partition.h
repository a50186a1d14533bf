// k-way graph partitioning with METIS: the pipeline's DAG stages, placement bisections and rank mapping.
#pragma once

#include <vector>

#include "support/expected.h"

namespace tsp::partition {

/// k-way partition of a weighted graph with METIS (CSR adjacency); returns the part of each vertex.
/// Deterministic for a given input (METIS is seeded).
Expected<std::vector<int>> partitionGraphKway(const std::vector<int>& xadj, const std::vector<int>& adjncy,
                                              const std::vector<int>& vertexWeights,
                                              const std::vector<int>& edgeWeights, int parts);

}  // namespace tsp::partition
