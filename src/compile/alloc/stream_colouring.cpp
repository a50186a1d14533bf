// Chaitin-Briggs colouring of stream registers over the moving-frame interference graph.
#include "compile/alloc/stream_colouring.h"

#include <algorithm>

namespace tsp::alloc {

InterferenceGraph buildInterference(const schedule::Problem& problem, const schedule::Schedule& schedule) {
  const auto& edges = problem.streamEdges();
  InterferenceGraph g;
  g.neighbours.resize(edges.size());
  std::vector<int> order(edges.size());
  for (size_t e = 0; e < edges.size(); ++e) order[e] = static_cast<int>(e);
  auto begin = [&](int e) { return schedule.start[edges[e].task] + edges[e].tauFirst(); };
  auto end = [&](int e) { return schedule.start[edges[e].task] + edges[e].tauLast(); };
  std::sort(order.begin(), order.end(), [&](int a, int b) { return begin(a) != begin(b) ? begin(a) < begin(b) : a < b; });
  for (size_t i = 0; i < order.size(); ++i)
    for (size_t j = i + 1; j < order.size() && begin(order[j]) <= end(order[i]); ++j) {
      const int a = order[i], b = order[j];
      if (schedule::streamEdgesConflict(edges[a], schedule.start[edges[a].task], edges[b], schedule.start[edges[b].task])) {
        g.neighbours[a].push_back(b);
        g.neighbours[b].push_back(a);
      }
    }
  for (auto& n : g.neighbours) std::sort(n.begin(), n.end());
  return g;
}

StreamColouring colourGraph(const InterferenceGraph& graph, const std::vector<double>& freq, int registers) {
  const int n = static_cast<int>(graph.neighbours.size());
  std::vector<int> degree(n);
  std::vector<char> removed(n, 0);
  // The node of least (degree, index) first: a heap of (degree, node) with stale entries skipped
  // (an entry is current while its node is in the graph with that degree).
  std::vector<std::pair<int, int>> heap;
  heap.reserve(static_cast<size_t>(n) * 2);
  const auto later = [](const std::pair<int, int>& a, const std::pair<int, int>& b) { return a > b; };
  for (int v = 0; v < n; ++v) {
    degree[v] = static_cast<int>(graph.neighbours[v].size());
    heap.push_back({degree[v], v});
  }
  std::make_heap(heap.begin(), heap.end(), later);
  std::vector<int> stack;
  stack.reserve(n);
  auto remove = [&](int v) {
    removed[v] = 1;
    stack.push_back(v);
    for (int w : graph.neighbours[v])
      if (!removed[w]) {
        --degree[w];
        heap.push_back({degree[w], w});
        std::push_heap(heap.begin(), heap.end(), later);
      }
  };
  int left = n;
  while (left > 0) {
    const auto [d, v] = heap.front();
    std::pop_heap(heap.begin(), heap.end(), later);
    heap.pop_back();
    if (removed[v] || degree[v] != d) continue;  // stale
    --left;
    if (d < registers) {
      remove(v);  // simplify: v is colourable whatever its neighbours get
      continue;
    }
    // Every node has degree >= K: push the cheapest spill candidate, optimistically (Briggs); ties
    // go to the least (degree, index).
    heap.push_back({d, v});  // v stays unless it is the pick
    std::push_heap(heap.begin(), heap.end(), later);
    int pick = -1;
    double pickCost = 0;
    for (int w = 0; w < n; ++w) {
      if (removed[w]) continue;
      const double cost = 2.0 * freq[w] / static_cast<double>(degree[w]);  // one store + one load per vector
      if (pick < 0 || cost < pickCost || (cost == pickCost && degree[w] < degree[pick])) pick = w, pickCost = cost;
    }
    remove(pick);
  }
  StreamColouring result;
  result.streamId.assign(n, -1);
  std::vector<char> taken(registers, 0);
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
    const int v = *it;
    std::fill(taken.begin(), taken.end(), 0);
    for (int w : graph.neighbours[v])
      if (result.streamId[w] >= 0) taken[result.streamId[w]] = 1;
    for (int c = 0; c < registers; ++c)
      if (!taken[c]) {
        result.streamId[v] = c;
        break;
      }
    if (result.streamId[v] < 0) result.spilled.push_back(v);
  }
  std::sort(result.spilled.begin(), result.spilled.end());
  return result;
}

StreamColouring colourStreams(const schedule::Problem& problem, const schedule::Schedule& schedule) {
  const auto& edges = problem.streamEdges();
  const InterferenceGraph g = buildInterference(problem, schedule);
  // Directions never interfere with each other, so one graph holds both; each has its own K registers.
  std::vector<double> freq(edges.size());
  for (size_t e = 0; e < edges.size(); ++e)
    freq[e] = problem.tasks()[edges[e].task].steps[edges[e].step].inst.repeat;
  StreamColouring result = colourGraph(g, freq, problem.chip().streamsPerDirection);
  for (size_t e = 0; e < edges.size(); ++e)
    if (result.streamId[e] >= 0)
      result.registersUsed[static_cast<int>(edges[e].dir)] =
          std::max(result.registersUsed[static_cast<int>(edges[e].dir)], result.streamId[e] + 1);
  return result;
}

}  // namespace tsp::alloc
