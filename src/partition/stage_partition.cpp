// Stage partition: chain DP (plan.cpp's partitionChain) or METIS on the layer graph with a forward fix-up.
#include "partition/stage_partition.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "partition/plan.h"

namespace tsp::partition {

Expected<StageAssignment> assignStages(const ModelProfile& profile, int chunks) {
  const int layers = static_cast<int>(profile.layers.size());
  if (chunks < 1 || chunks > layers)
    return makeError(ExitCode::kConfig, fmt::format("{} pipeline chunks for a model of {} layers", chunks, layers));
  if (!profile.chain) return partitionDagStages(profile, chunks);
  std::vector<Cycle> cost;
  for (const auto& layer : profile.layers) cost.push_back(layer.cycles);
  const auto first = partitionChain(cost, chunks);
  StageAssignment stages;
  stages.chunks = chunks;
  stages.layerChunk.assign(layers, 0);
  for (int k = 0; k < chunks; ++k) {
    const int end = k + 1 < chunks ? first[k + 1] : layers;
    for (int l = first[k]; l < end; ++l) stages.layerChunk[l] = k;
  }
  return stages;
}

Expected<StageAssignment> partitionDagStages(const ModelProfile& profile, int chunks) {
  const int layers = static_cast<int>(profile.layers.size());
  StageAssignment stages;
  stages.chunks = chunks;
  stages.layerChunk.assign(layers, 0);
  if (chunks == 1) return stages;
  // METIS takes int weights: scale cycles and bytes into range, keeping every weight >= 1.
  Cycle total = 0;
  Bytes totalBytes = 0;
  for (const auto& layer : profile.layers) total += layer.cycles;
  for (const auto& e : profile.edges) totalBytes += e.bytes;
  const Cycle cycleScale = std::max<Cycle>(1, total / 100'000'000);
  const Bytes byteScale = std::max<Bytes>(1, totalBytes / 100'000'000);
  std::vector<std::map<int, Bytes>> adjacency(layers);
  for (const auto& e : profile.edges) {
    adjacency[e.from][e.to] += e.bytes;
    adjacency[e.to][e.from] += e.bytes;
  }
  std::vector<int> xadj{0}, adjncy, edgeWeights, vertexWeights;
  for (int l = 0; l < layers; ++l) {
    vertexWeights.push_back(static_cast<int>(std::max<Cycle>(1, profile.layers[l].cycles / cycleScale)));
    for (const auto& [v, bytes] : adjacency[l]) {
      adjncy.push_back(v);
      edgeWeights.push_back(static_cast<int>(std::max<Bytes>(1, bytes / byteScale)));
    }
    xadj.push_back(static_cast<int>(adjncy.size()));
  }
  auto parts = partitionGraphKway(xadj, adjncy, vertexWeights, edgeWeights, chunks);
  if (!parts) return parts.error();
  // Parts in the order of their mean layer index (ties by part id): the pipeline order.
  std::vector<double> sum(chunks, 0), count(chunks, 0);
  for (int l = 0; l < layers; ++l) {
    sum[(*parts)[l]] += l;
    count[(*parts)[l]] += 1;
  }
  std::vector<int> byMean(chunks);
  for (int k = 0; k < chunks; ++k) byMean[k] = k;
  auto mean = [&](int k) { return count[k] > 0 ? sum[k] / count[k] : 1e300; };
  std::stable_sort(byMean.begin(), byMean.end(), [&](int a, int b) { return mean(a) < mean(b); });
  std::vector<int> position(chunks);
  for (int k = 0; k < chunks; ++k) position[byMean[k]] = k;
  // Layers are numbered in topological order; a layer never runs before a producer's chunk.
  std::vector<std::vector<int>> producers(layers);
  for (const auto& e : profile.edges) producers[e.to].push_back(e.from);
  for (int l = 0; l < layers; ++l) {
    int chunk = position[(*parts)[l]];
    for (int p : producers[l]) chunk = std::max(chunk, stages.layerChunk[p]);
    stages.layerChunk[l] = chunk;
  }
  return stages;
}

}  // namespace tsp::partition
