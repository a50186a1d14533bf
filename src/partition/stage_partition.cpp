// Stage partition: chain DP (plan.cpp's partitionChain) or METIS on the layer graph with a forward fix-up.
#include "partition/stage_partition.h"

#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "partition/metis_partition.h"

namespace tsp::partition {

namespace {
constexpr Cycle kInfinite = std::numeric_limits<Cycle>::max();
}  // namespace

ChainStages::ChainStages(std::vector<Cycle> cost) : cost_(std::move(cost)) {
  const int n = static_cast<int>(cost_.size());
  prefix_.assign(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix_[i + 1] = prefix_[i] + cost_[i];
  best_.push_back(std::vector<Cycle>(n + 1, kInfinite));
  best_[0][0] = 0;
  cut_.push_back(std::vector<int>(n + 1, 0));
}

void ChainStages::extendTo(int chunks) {
  const int n = static_cast<int>(cost_.size());
  while (static_cast<int>(best_.size()) <= chunks) {
    const int p = static_cast<int>(best_.size());
    const auto& prev = best_[p - 1];
    std::vector<Cycle> row(n + 1, kInfinite);
    std::vector<int> cut(n + 1, 0);
    for (int i = p; i <= n; ++i) {
      // j in [p-1, i-1]: prev[j] (finite there) grows with j, the last chunk prefix[i] - prefix[j] shrinks.
      auto rising = [&](int j) { return prev[j]; };
      auto falling = [&](int j) { return prefix_[i] - prefix_[j]; };
      int lo = p - 1, hi = i;  // first j with rising >= falling, or i when none
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (rising(mid) >= falling(mid)) hi = mid;
        else lo = mid + 1;
      }
      const int k = lo;
      const Cycle atK = k <= i - 1 ? rising(k) : kInfinite;
      const Cycle beforeK = k > p - 1 ? falling(k - 1) : kInfinite;
      if (beforeK <= atK) {
        // The earliest j < k whose last chunk is as small as at k - 1 (falling is non-increasing).
        int a = p - 1, b = k - 1;
        while (a < b) {
          const int mid = (a + b) / 2;
          if (falling(mid) <= beforeK) b = mid;
          else a = mid + 1;
        }
        row[i] = beforeK;
        cut[i] = a;
      } else {
        row[i] = atK;
        cut[i] = k;
      }
    }
    best_.push_back(std::move(row));
    cut_.push_back(std::move(cut));
  }
}

std::vector<int> ChainStages::firstLayers(int chunks) {
  const int n = static_cast<int>(cost_.size());
  chunks = std::clamp(chunks, 1, std::max(1, n));
  extendTo(chunks);
  std::vector<int> first(chunks);
  for (int p = chunks, i = n; p >= 1; --p) {
    first[p - 1] = cut_[p][i];
    i = cut_[p][i];
  }
  return first;
}

StageAssignment ChainStages::assign(int chunks) {
  const int layers = static_cast<int>(cost_.size());
  const auto first = firstLayers(chunks);
  StageAssignment stages;
  stages.chunks = static_cast<int>(first.size());
  stages.layerChunk.assign(layers, 0);
  for (int k = 0; k < stages.chunks; ++k) {
    const int end = k + 1 < stages.chunks ? first[k + 1] : layers;
    for (int l = first[k]; l < end; ++l) stages.layerChunk[l] = k;
  }
  return stages;
}

Expected<StageAssignment> assignStages(const ModelProfile& profile, int chunks) {
  const int layers = static_cast<int>(profile.layers.size());
  if (chunks < 1 || chunks > layers)
    return makeError(ExitCode::kConfig, fmt::format("{} pipeline chunks for a model of {} layers", chunks, layers));
  if (!profile.chain) {
    auto dag = partitionDagStages(profile, chunks);
    if (!dag) return dag.error();
    // METIS may leave a part empty, and moving layers after their producers may empty one more: a
    // pipeline of fewer stages than asked for. The contiguous split below never does, and its
    // chunks are acyclic too (layers are numbered in topological order).
    std::vector<bool> used(chunks, false);
    for (int chunk : dag->layerChunk) used[chunk] = true;
    if (std::find(used.begin(), used.end(), false) == used.end()) return dag;
  }
  std::vector<Cycle> cost;
  // A training step balances forward + backward compute (the layers' compiled ratios), else the forward.
  for (const auto& layer : profile.layers)
    cost.push_back(static_cast<Cycle>(std::llround(static_cast<double>(layer.cycles) * layer.trainingWeight())));
  return ChainStages(std::move(cost)).assign(chunks);
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
