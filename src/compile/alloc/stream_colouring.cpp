// Chaitin-Briggs colouring of stream registers over the moving-frame interference graph.
#include "compile/alloc/stream_colouring.h"

#include <algorithm>
#include <tuple>

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
  for (int v = 0; v < n; ++v) degree[v] = static_cast<int>(graph.neighbours[v].size());
  // The nodes still in the graph in a binary heap by least (degree, index), each at slot[v]: a
  // degree that drops moves its node up in place.
  std::vector<int> heap(n), slot(n);
  for (int v = 0; v < n; ++v) heap[v] = slot[v] = v;
  const auto before = [&](int a, int b) { return degree[a] != degree[b] ? degree[a] < degree[b] : a < b; };
  const auto place = [&](int i, int v) {
    heap[i] = v;
    slot[v] = i;
  };
  const auto siftUp = [&](int i) {
    const int v = heap[i];
    for (; i > 0 && before(v, heap[(i - 1) / 2]); i = (i - 1) / 2) place(i, heap[(i - 1) / 2]);
    place(i, v);
  };
  int size = n;
  const auto siftDown = [&](int i) {
    const int v = heap[i];
    for (;;) {
      int c = 2 * i + 1;
      if (c >= size) break;
      if (c + 1 < size && before(heap[c + 1], heap[c])) ++c;
      if (!before(heap[c], v)) break;
      place(i, heap[c]);
      i = c;
    }
    place(i, v);
  };
  const auto erase = [&](int v) {
    const int i = slot[v];
    const int last = heap[--size];
    if (i == size) return;
    place(i, last);
    siftUp(i);
    siftDown(slot[last]);
  };
  for (int i = n / 2 - 1; i >= 0; --i) siftDown(i);  // heapify from index order
  // Spill candidates by least (cost, degree, index), built when simplification first blocks, with
  // stale entries skipped (an entry is current while its node is in the graph with that degree); a
  // node's cost (one store and one load per vector over its degree) changes with its degree.
  using Candidate = std::tuple<double, int, int>;
  std::vector<Candidate> spillHeap;
  bool spilling = false;
  const auto costlier = [](const Candidate& a, const Candidate& b) { return a > b; };
  auto pushCandidate = [&](int v) {
    spillHeap.push_back({2.0 * freq[v] / static_cast<double>(degree[v]), degree[v], v});
    std::push_heap(spillHeap.begin(), spillHeap.end(), costlier);
  };
  std::vector<int> stack;
  stack.reserve(n);
  auto remove = [&](int v) {
    removed[v] = 1;
    stack.push_back(v);
    erase(v);
    for (int w : graph.neighbours[v])
      if (!removed[w]) {
        --degree[w];
        siftUp(slot[w]);
        if (spilling) pushCandidate(w);
      }
  };
  while (size > 0) {
    const int v = heap[0];
    if (degree[v] < registers) {
      remove(v);  // simplify: v is colourable whatever its neighbours get
      continue;
    }
    // Every node has degree >= K: push the cheapest spill candidate, optimistically (Briggs).
    if (!spilling) {
      spilling = true;
      for (int i = 0; i < size; ++i) pushCandidate(heap[i]);
    }
    int pick = -1;
    while (pick < 0) {
      const auto [cost, deg, w] = spillHeap.front();
      std::pop_heap(spillHeap.begin(), spillHeap.end(), costlier);
      spillHeap.pop_back();
      if (!removed[w] && degree[w] == deg) pick = w;
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
