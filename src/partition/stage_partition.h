// Pipeline stage partition: the seed's dynamic programme for chain models, METIS k-way for DAGs.
#pragma once

#include "partition/cost_model.h"
#include "support/expected.h"

namespace tsp::partition {

/// Splits the layers into `chunks` pipeline chunks: DP[i][p] over layer cycles when the model is a
/// chain of layers, else METIS k-way on the layer graph (vertex weight = cycles, edge weight =
/// bytes), made acyclic by moving each layer no earlier than its producers.
Expected<StageAssignment> assignStages(const ModelProfile& profile, int chunks);

/// The DAG case of assignStages (public for tests): METIS parts ordered by mean layer index, then
/// every layer moved to at least the chunk of each producer, so that edges only go forward.
Expected<StageAssignment> partitionDagStages(const ModelProfile& profile, int chunks);

}  // namespace tsp::partition
