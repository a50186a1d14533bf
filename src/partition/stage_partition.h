// Pipeline stage partition: the seed's dynamic programme for chain models, METIS k-way for DAGs.
#pragma once

#include "partition/cost_model.h"
#include "support/expected.h"

namespace tsp::partition {

/// The seed's dynamic programme DP[i][p] = min over j of max(DP[j][p-1], sum of cost[j..i)), for
/// every chunk count at once: row p is built from row p-1 on first use, each entry by a binary
/// search (DP[j][p-1] grows and the last chunk's cost shrinks with j), so all counts up to P on n
/// layers cost O(P n log n). Ties keep the earliest cut.
class ChainStages {
 public:
  explicit ChainStages(std::vector<Cycle> cost);
  /// First layer of each of `chunks` contiguous chunks minimising the largest chunk.
  std::vector<int> firstLayers(int chunks);
  /// The same split as a chunk per layer.
  StageAssignment assign(int chunks);

 private:
  void extendTo(int chunks);
  std::vector<Cycle> cost_, prefix_;
  std::vector<std::vector<Cycle>> best_;  // best_[p][i]: layers [0, i) in p chunks
  std::vector<std::vector<int>> cut_;
};

/// Splits the layers into `chunks` pipeline chunks: DP[i][p] over layer cycles when the model is a
/// chain of layers, else METIS k-way on the layer graph (vertex weight = cycles, edge weight =
/// bytes), made acyclic by moving each layer no earlier than its producers; when that leaves a
/// chunk without layers, the DP split of the layers in their (topological) order. No chunk is empty.
Expected<StageAssignment> assignStages(const ModelProfile& profile, int chunks);

/// The DAG case of assignStages (public for tests): METIS parts ordered by mean layer index, then
/// every layer moved to at least the chunk of each producer, so that edges only go forward.
Expected<StageAssignment> partitionDagStages(const ModelProfile& profile, int chunks);

}  // namespace tsp::partition
