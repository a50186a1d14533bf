// Placement: locality order (METIS nested bisection), rank-to-chip slices, route-based link figures.
#include "partition/placement.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "compile/schedule/collectives.h"
#include "partition/metis_partition.h"
#include "partition/plan.h"

namespace tsp::partition {

namespace {

constexpr int kMetisOrderMaxChips = 4096;

// Orders `chips` by recursive METIS bisection of the link graph they induce: each half is a
// tightly connected block, so consecutive slices of the order are close on the topology.
Status bisect(const topology::Cluster& cluster, std::vector<int> chips, std::vector<int>& order) {
  if (chips.size() <= 2) {
    std::sort(chips.begin(), chips.end());
    order.insert(order.end(), chips.begin(), chips.end());
    return {};
  }
  std::map<int, int> local;
  for (size_t i = 0; i < chips.size(); ++i) local[chips[i]] = static_cast<int>(i);
  std::vector<int> xadj{0}, adjncy, weights;
  for (int chip : chips) {
    std::map<int, int> neighbours;  // multi-links become one weighted edge
    for (const auto& [port, linkId] : cluster.linksOf(chip)) {
      (void)port;
      const int other = cluster.links()[linkId].other(chip);
      if (auto found = local.find(other); found != local.end()) ++neighbours[found->second];
    }
    for (const auto& [v, w] : neighbours) {
      adjncy.push_back(v);
      weights.push_back(w);
    }
    xadj.push_back(static_cast<int>(adjncy.size()));
  }
  auto parts = partitionGraphKway(xadj, adjncy, {}, weights, 2);
  if (!parts) return parts.error();
  std::vector<int> halves[2];
  for (size_t i = 0; i < chips.size(); ++i) halves[(*parts)[i] == 0 ? 0 : 1].push_back(chips[i]);
  if (halves[0].empty() || halves[1].empty()) {  // a disconnected induced graph: split by id
    std::sort(chips.begin(), chips.end());
    halves[0].assign(chips.begin(), chips.begin() + static_cast<std::ptrdiff_t>(chips.size() / 2));
    halves[1].assign(chips.begin() + static_cast<std::ptrdiff_t>(chips.size() / 2), chips.end());
  }
  // The half holding the lowest chip id goes first, so that the order starts at chip 0's block.
  const int first = *std::min_element(halves[0].begin(), halves[0].end()) <
                            *std::min_element(halves[1].begin(), halves[1].end())
                        ? 0
                        : 1;
  if (auto s = bisect(cluster, halves[first], order); !s) return s;
  return bisect(cluster, halves[1 - first], order);
}

// One message of a collective or pipeline: its route's cost and the link directions it uses.
struct RouteUse {
  Cycle latency = 0;
  double cyclesPerByte = 0;
  int hops = 0;
};

// What linkFigures gathers of every kind of message, one entry per hop: (link direction key
// Link::directionFrom, kind, cycles per byte), (transit chip, kind, cycles per byte of its next
// link), and (transit chip, stage of a chip on its route) pairs.
struct SharedRoutes {
  std::vector<std::tuple<int, int, double>> directions, transits;
  std::vector<std::pair<int, int>> coupled;
  const std::vector<int>* stageOf = nullptr;  // per chip: its stage in the plan, or -1
};

// With `shared`, each link direction of the route counts one message of `kind` there, and each
// transit chip one message it forwards out of its next link.
RouteUse routeUse(const topology::Cluster& cluster, int src, int dst, std::map<int, int>* load,
                  SharedRoutes* shared = nullptr, int kind = -1) {
  RouteUse use;
  if (src == dst) return use;
  const auto route = cluster.route(src, dst);
  use.hops = static_cast<int>(route.size());
  // Route latency plus the on-chip turnaround of one step as the cluster scheduler places it: MEM
  // read -> C2C send at the source, C2C receive -> MEM write at the destination.
  use.latency = cluster.routeLatency(route) + schedule::ringTurnaroundCycles(cluster.chip(), false);
  double narrowest = 0;
  for (const auto& hop : route) {
    const auto& link = cluster.links()[hop.link];
    narrowest = narrowest == 0 ? link.bytesPerCycle : std::min(narrowest, link.bytesPerCycle);
    const int direction = link.directionFrom(hop.chip);
    if (load) ++(*load)[direction];
    if (shared) {
      const double cyclesPerByte = link.bytesPerCycle > 0 ? 1.0 / link.bytesPerCycle : 0;
      shared->directions.emplace_back(direction, kind, cyclesPerByte);
      if (hop.chip != src) shared->transits.emplace_back(hop.chip, kind, cyclesPerByte);
    }
  }
  if (shared && route.size() > 1) {
    const std::vector<int>& stageOf = *shared->stageOf;
    std::vector<int> stages;
    for (const auto& hop : route)
      if (stageOf[hop.chip] >= 0) stages.push_back(stageOf[hop.chip]);
    if (stageOf[dst] >= 0) stages.push_back(stageOf[dst]);
    std::sort(stages.begin(), stages.end());
    stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
    for (size_t i = 1; i < route.size(); ++i)
      for (int stage : stages) shared->coupled.emplace_back(route[i].chip, stage);
  }
  use.cyclesPerByte = narrowest > 0 ? 1.0 / narrowest : 0;
  return use;
}

int rankOf(int d, int s, int t, int tp, int pp) { return (d * pp + s) * tp + t; }

}  // namespace

Expected<std::vector<int>> localityOrder(const topology::Cluster& cluster) {
  std::vector<int> ids(cluster.chipCount());
  std::iota(ids.begin(), ids.end(), 0);
  if (cluster.description().kind == "dragonfly" || cluster.chipCount() > kMetisOrderMaxChips) return ids;
  std::vector<int> order;
  order.reserve(ids.size());
  if (auto s = bisect(cluster, ids, order); !s) return s.error();
  return order;
}

Expected<std::vector<int>> placePlan(const topology::Cluster& cluster, const std::vector<int>& order, int dp, int tp,
                                     int pp) {
  const std::int64_t chips = std::int64_t{dp} * tp * pp;
  if (chips > cluster.chipCount())
    return makeError(ExitCode::kDoesNotFit, fmt::format("the plan needs {} chips; the cluster has {}", chips,
                                                        cluster.chipCount()));
  if (dp == 1 && tp == 1 && pp > 1) {
    // The pipeline scheduler sends between directly linked chips: prefer such a path.
    if (auto path = placePipeline(cluster, pp); path) return *path;
  }
  return std::vector<int>(order.begin(), order.begin() + chips);
}

std::vector<std::pair<int, int>> tpNeighbours(int tp, bool grid) {
  std::vector<std::pair<int, int>> pairs;
  const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(tp))));
  if (grid && q >= 2 && q * q == tp) {
    for (int r = 0; r < q; ++r)
      for (int c = 0; c < q; ++c) {
        pairs.push_back({r * q + c, r * q + (c + 1) % q});
        pairs.push_back({r * q + c, ((r + 1) % q) * q + c});
      }
    return pairs;
  }
  for (int t = 0; t < tp && tp > 1; ++t) pairs.push_back({t, (t + 1) % tp});
  return pairs;
}

std::vector<std::pair<double, double>> groupFit(const topology::Cluster& cluster, const std::vector<int>& chips,
                                                GroupFits* fits) {
  if (chips.size() < 2) return {};
  if (fits)
    if (auto found = fits->find(chips); found != fits->end()) return found->second;
  // A group the scheduler all-reduces hierarchically, or as a multi-ring (a whole ring, torus or
  // mesh: both directions at once, half the data each, which the closed-form ring does not charge).
  // The sizes: 1, 2, 4, ... 256 vectors (latency-bound: the tree or the hierarchy, whichever the
  // scheduler's estimate prefers; the cost rises in steps as the pieces per chip grow), then two
  // bandwidth-bound sizes. Up to 1 MiB they are scheduled (cheap at those sizes, and exact: the
  // estimate leaves out the chains' on-chip turnarounds that dominate there), the others estimated.
  const std::int64_t vector = cluster.chip().vectorBytes;
  std::vector<std::int64_t> sizes;
  for (std::int64_t v = 1; v <= 256; v *= 2) sizes.push_back(v * vector);
  sizes.push_back(std::int64_t{1} << 20);
  sizes.push_back(std::int64_t{16} << 20);
  const auto op = schedule::CollectiveOp::kAllReduce;
  std::vector<std::pair<double, double>> points;
  const auto large = schedule::chooseAlgorithm(op, chips, sizes.back(), cluster);
  if (large == schedule::CollectiveAlgorithm::kHierarchical || large == schedule::CollectiveAlgorithm::kMultiRing)
    for (std::int64_t bytes : sizes) {
      const auto algorithm = schedule::chooseAlgorithm(op, chips, bytes, cluster);
      auto plan = schedule::planCollective(
          op, algorithm, algorithm == schedule::CollectiveAlgorithm::kRing ? schedule::groupRing(cluster, chips) : chips,
          bytes, cluster);
      if (!plan) return {};
      double cycles = 0;
      if (bytes < sizes.back()) {
        auto scheduled = schedule::scheduleCollective(*plan, cluster, false);
        if (!scheduled) return {};
        cycles = static_cast<double>(scheduled->cycles);
      } else {
        cycles = schedule::estimateCollectiveCycles(*plan, cluster);
      }
      points.push_back({static_cast<double>(bytes), cycles});
    }
  if (fits) (*fits)[chips] = points;
  return points;
}

CandidateLinks linkFigures(const topology::Cluster& cluster, const std::vector<int>& placement, int dp, int tp,
                           int pp, int interleave, bool allGroups, bool grid, bool sharedLinks, GroupFits* fits) {
  CandidateLinks figures;
  figures.shared.stages = pp;
  // Per link direction and transit chip: the per-microbatch messages of every kind (SharedLinks).
  std::vector<int> stageOf(cluster.chipCount(), -1);
  for (int d = 0; d < dp; ++d)
    for (int s = 0; s < pp; ++s)
      for (int t = 0; t < tp; ++t) stageOf[placement[rankOf(d, s, t, tp, pp)]] = s;
  SharedRoutes routes;
  routes.stageOf = &stageOf;
  auto measure = [&](const std::vector<std::pair<int, int>>& messages, const std::vector<int>& kinds) {
    LinkFigures f;
    std::map<int, int> load;
    for (size_t i = 0; i < messages.size(); ++i) {
      const auto [src, dst] = messages[i];
      const RouteUse use = routeUse(cluster, src, dst, &load, kinds.empty() || !sharedLinks ? nullptr : &routes,
                                    kinds.empty() ? -1 : kinds[i]);
      f.alpha = std::max(f.alpha, use.latency);
      f.cyclesPerByte = std::max(f.cyclesPerByte, use.cyclesPerByte);
      f.maxHops = std::max(f.maxHops, use.hops);
    }
    for (const auto& [key, count] : load) f.contention = std::max(f.contention, count);
    return f;
  };
  SharedLinks& shared = figures.shared;
  std::vector<std::pair<int, int>> ring, sends, gradients, toFirst;
  std::vector<int> ringKinds, sendKinds, gradientKinds, toFirstKinds;
  // Each ring as the scheduler runs it (groupRing: rank order unless a shorter ring exists).
  auto addRing = [&](std::vector<std::pair<int, int>>& messages, const std::vector<int>& chips) {
    const auto order = schedule::groupRing(cluster, chips);
    for (size_t i = 0; i < order.size() && order.size() > 1; ++i)
      messages.push_back({order[i], order[(i + 1) % order.size()]});
  };
  // True while every group seen so far has every two chips joined by a direct link.
  auto adjacent = [&](const std::vector<int>& chips) {
    for (int a : chips)
      for (int b : chips)
        if (a != b && cluster.hops(a, b) != 1) return false;
    return true;
  };
  bool tpDirect = tp > 1, gridDirect[2] = {true, true};
  const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(tp))));
  const bool isGrid = grid && q >= 2 && q * q == tp;
  for (int d = 0; d < (allGroups ? dp : 1); ++d)
    for (int s = 0; s < (allGroups ? pp : 1); ++s) {
      if (isGrid) {
        for (const auto& [a, b] : tpNeighbours(tp, grid))
          ring.push_back({placement[rankOf(d, s, a, tp, pp)], placement[rankOf(d, s, b, tp, pp)]});
      } else {
        std::vector<int> chips;
        for (int t = 0; t < tp && tp > 1; ++t) chips.push_back(placement[rankOf(d, s, t, tp, pp)]);
        addRing(ring, chips);
        tpDirect = tpDirect && adjacent(chips);
      }
      ringKinds.resize(ring.size(), shared.index(SharedLinks::kTpRing, s));
    }
  if (pp > 1)
    for (int d = 0; d < (allGroups ? dp : 1); ++d)
      for (int t = 0; t < (allGroups ? tp : 1); ++t)
        for (int s = 0; s < pp; ++s) {
          const int from = placement[rankOf(d, s, t, tp, pp)];
          if (s + 1 == pp) {  // a weight the last and the first stage read (a tied embedding): its gradient
            toFirst.push_back({from, placement[rankOf(d, 0, t, tp, pp)]});
            toFirstKinds.push_back(shared.index(SharedLinks::kToFirstStage, s));
          }
          if (s + 1 == pp && interleave == 1) continue;  // interleaved chunks wrap from the last chip to the first
          const int to = placement[rankOf(d, (s + 1) % pp, t, tp, pp)];
          sends.push_back({from, to});
          sendKinds.push_back(shared.index(SharedLinks::kSendForward, s));
          gradients.push_back({to, from});
          gradientKinds.push_back(shared.index(SharedLinks::kSendBackward, s));
        }
  figures.tp = measure(ring, ringKinds);
  figures.tp.direct = tpDirect && !isGrid;
  if (tp > 1 && !isGrid) {
    // A TP group the scheduler all-reduces hierarchically or as a multi-ring: the fit of its own
    // estimate (groupFit). Screening lets the first group stand for all; with every group measured,
    // each stage gets its own group's fit (replica 0's), and `tp` the first stage's.
    auto fit = [&](int stage, LinkFigures& f) {
      std::vector<int> chips;
      for (int t = 0; t < tp; ++t) chips.push_back(placement[rankOf(0, stage, t, tp, pp)]);
      f.fitPoints = groupFit(cluster, chips, fits);
    };
    fit(0, figures.tp);
    if (allGroups && pp > 1 && !figures.tp.fitPoints.empty()) {
      figures.tpStage.assign(pp, figures.tp);
      for (int s = 1; s < pp; ++s) fit(s, figures.tpStage[s]);
    }
  }
  if (isGrid)
    for (int axis = 0; axis < 2; ++axis) {
      // Axis r joins the ranks of one grid column (same c), axis c those of one row.
      std::vector<std::pair<int, int>> rings;
      for (int d = 0; d < (allGroups ? dp : 1); ++d)
        for (int s = 0; s < (allGroups ? pp : 1); ++s)
          for (int i = 0; i < q; ++i) {
            std::vector<int> chips;
            for (int j = 0; j < q; ++j) chips.push_back(placement[rankOf(d, s, axis == 0 ? j * q + i : i * q + j, tp, pp)]);
            addRing(rings, chips);
            gridDirect[axis] = gridDirect[axis] && adjacent(chips);
          }
      figures.grid[axis] = measure(rings, {});
      figures.grid[axis].direct = gridDirect[axis];
      std::vector<int> first;  // replica 0, stage 0, the axis's first ring
      for (int j = 0; j < q; ++j) first.push_back(placement[rankOf(0, 0, axis == 0 ? j * q : j, tp, pp)]);
      figures.grid[axis].fitPoints = groupFit(cluster, first, fits);
    }
  figures.pp = measure(sends, sendKinds);
  if (sharedLinks) {
    measure(gradients, gradientKinds);
    measure(toFirst, toFirstKinds);
  }
  std::vector<std::pair<int, int>> replicas;
  if (dp > 1)
    for (int s = 0; s < (allGroups ? pp : 1); ++s)
      for (int t = 0; t < (allGroups ? tp : 1); ++t)
        for (int d = 0; d < dp; ++d)
          replicas.push_back({placement[rankOf(d, s, t, tp, pp)], placement[rankOf((d + 1) % dp, s, t, tp, pp)]});
  figures.dp = measure(replicas, {});
  if (dp > 1) {  // the gradient all-reduce of the replicas of rank 0 of stage 0
    std::vector<int> replicaChips;
    for (int d = 0; d < dp; ++d) replicaChips.push_back(placement[rankOf(d, 0, 0, tp, pp)]);
    figures.dp.fitPoints = groupFit(cluster, replicaChips, fits);
  }
  if (!sharedLinks) return figures;
  // Every kind's contention, and the crossings as SharedLinks holds them.
  shared.contention.assign(shared.kinds(), 1);
  std::sort(routes.coupled.begin(), routes.coupled.end());
  routes.coupled.erase(std::unique(routes.coupled.begin(), routes.coupled.end()), routes.coupled.end());
  // Sorted by (key, kind), each key's messages summed per kind.
  auto collect = [&](std::vector<std::tuple<int, int, double>>& from, std::vector<SharedLinks::Crossing>& to,
                     bool chips) {
    std::sort(from.begin(), from.end());
    for (size_t i = 0; i < from.size();) {
      const int key = std::get<0>(from[i]);
      SharedLinks::Crossing c;
      for (; i < from.size() && std::get<0>(from[i]) == key; ++i) {
        const auto [k, kind, cyclesPerByte] = from[i];
        if (c.messages.empty() || c.messages.back().first != kind) c.messages.push_back({kind, 0.0});
        c.messages.back().second += cyclesPerByte;
      }
      if (chips) {
        c.stage = stageOf[key];
        auto it = std::lower_bound(routes.coupled.begin(), routes.coupled.end(), std::pair<int, int>{key, -1});
        for (; it != routes.coupled.end() && it->first == key; ++it)
          if (it->second != c.stage) c.coupled.push_back(it->second);
      } else {
        const double rate = cluster.links()[key / 2].bytesPerCycle;
        for (const auto& [kind, cyclesPerByte] : c.messages)
          shared.contention[kind] =
              std::max(shared.contention[kind], static_cast<int>(std::lround(cyclesPerByte * rate)));
      }
      to.push_back(std::move(c));
    }
  };
  collect(routes.directions, shared.directions, false);
  collect(routes.transits, shared.transits, true);
  return figures;
}

PlacementReport reportPlacement(const topology::Cluster& cluster, const std::vector<int>& placement, int dp, int tp,
                                int pp, Bytes tpEdgeBytes, const std::vector<Bytes>& ppEdgeBytes, bool grid) {
  PlacementReport report;
  std::map<int, Bytes> bytes;
  auto carry = [&](int src, int dst, Bytes amount) {
    if (src == dst) return 0;
    const auto route = cluster.route(src, dst);
    for (const auto& hop : route) bytes[cluster.direction(hop)] += amount;
    return static_cast<int>(route.size());
  };
  std::int64_t tpEdges = 0, tpHops = 0, ppEdges = 0, ppHops = 0;
  const auto neighbours = tpNeighbours(tp, grid);
  for (int d = 0; d < dp; ++d)
    for (int s = 0; s < pp; ++s)
      for (const auto& [a, b] : neighbours) {
        const int h = carry(placement[rankOf(d, s, a, tp, pp)], placement[rankOf(d, s, b, tp, pp)], tpEdgeBytes);
        report.tpMaxHops = std::max(report.tpMaxHops, h);
        tpHops += h;
        ++tpEdges;
      }
  for (int d = 0; d < dp; ++d)
    for (int t = 0; t < tp; ++t)
      for (int s = 0; s + 1 < pp; ++s) {
        const Bytes amount = s < static_cast<int>(ppEdgeBytes.size()) ? ppEdgeBytes[s] : 0;
        const int h = carry(placement[rankOf(d, s, t, tp, pp)], placement[rankOf(d, s + 1, t, tp, pp)], amount);
        report.ppMaxHops = std::max(report.ppMaxHops, h);
        ppHops += h;
        ++ppEdges;
      }
  report.tpAverageHops = tpEdges ? static_cast<double>(tpHops) / static_cast<double>(tpEdges) : 0;
  report.ppAverageHops = ppEdges ? static_cast<double>(ppHops) / static_cast<double>(ppEdges) : 0;
  std::map<int, bool> used;
  for (const auto& [key, amount] : bytes) {
    if (amount > report.busiestLinkBytes) {
      report.busiestLinkBytes = amount;
      report.busiestLink = key / 2;
    }
    used[key / 2] = true;
  }
  report.linksUsed = static_cast<int>(used.size());
  return report;
}

CommunicationGraph communicationGraph(int dp, int tp, int pp, Bytes tpEdgeBytes, const std::vector<Bytes>& ppEdgeBytes,
                                      bool grid) {
  CommunicationGraph g;
  g.ranks = dp * tp * pp;
  g.edges.resize(g.ranks);
  auto add = [&](int a, int b, Bytes bytes) {
    if (a == b || bytes <= 0) return;
    g.edges[a][b] += bytes;
    g.edges[b][a] += bytes;
  };
  for (int d = 0; d < dp; ++d)
    for (int s = 0; s < pp; ++s) {
      // A ring of two lists both directions: its one edge carries twice the bytes.
      for (const auto& [a, b] : tpNeighbours(tp, grid)) add(rankOf(d, s, a, tp, pp), rankOf(d, s, b, tp, pp), tpEdgeBytes);
      for (int t = 0; t < tp && s + 1 < pp; ++t)
        add(rankOf(d, s, t, tp, pp), rankOf(d, s + 1, t, tp, pp), s < static_cast<int>(ppEdgeBytes.size()) ? ppEdgeBytes[s] : 0);
    }
  return g;
}

double placementTraffic(const topology::Cluster& cluster, const std::vector<int>& placement,
                        const CommunicationGraph& graph) {
  double traffic = 0;
  for (int a = 0; a < graph.ranks; ++a)
    for (const auto& [b, bytes] : graph.edges[a])
      if (a < b && placement[a] != placement[b])
        traffic += static_cast<double>(bytes) * static_cast<double>(cluster.route(placement[a], placement[b]).size());
  return traffic;
}

namespace {

// Splits `ranks` into a first part of exactly `firstSize` and the rest, cutting the least traffic:
// METIS bisection, then greedy moves of the vertex that gains most until the sizes are exact.
Expected<std::pair<std::vector<int>, std::vector<int>>> bisectRanks(const CommunicationGraph& graph,
                                                                    const std::vector<int>& ranks, size_t firstSize) {
  const size_t n = ranks.size();
  std::map<int, int> index;
  for (size_t i = 0; i < n; ++i) index[ranks[i]] = static_cast<int>(i);
  Bytes heaviest = 1;
  for (int r : ranks)
    for (const auto& [b, bytes] : graph.edges[r])
      if (index.count(b)) heaviest = std::max(heaviest, bytes);
  std::vector<int> xadj{0}, adjncy, weights;
  for (int r : ranks) {
    for (const auto& [b, bytes] : graph.edges[r])
      if (auto it = index.find(b); it != index.end()) {
        adjncy.push_back(it->second);
        weights.push_back(static_cast<int>(std::max<Bytes>(1, bytes * 1'000'000 / heaviest)));
      }
    xadj.push_back(static_cast<int>(adjncy.size()));
  }
  std::vector<int> part(n, 0);
  if (!adjncy.empty() && n > 2) {
    auto metis = partitionGraphKway(xadj, adjncy, std::vector<int>(n, 1), weights, 2);
    if (!metis) return metis.error();
    part = *metis;
  } else {
    for (size_t i = firstSize; i < n; ++i) part[i] = 1;
  }
  auto gain = [&](size_t v) {  // traffic cut saved by moving v to the other part
    std::int64_t g = 0;
    for (int e = xadj[v]; e < xadj[v + 1]; ++e) g += part[adjncy[e]] == part[v] ? -weights[e] : weights[e];
    return g;
  };
  for (;;) {
    const size_t first = static_cast<size_t>(std::count(part.begin(), part.end(), 0));
    if (first == firstSize) break;
    const int from = first > firstSize ? 0 : 1;
    size_t best = n;
    for (size_t v = 0; v < n; ++v)
      if (part[v] == from && (best == n || gain(v) > gain(best))) best = v;
    part[best] = 1 - from;
  }
  std::pair<std::vector<int>, std::vector<int>> halves;
  for (size_t i = 0; i < n; ++i) (part[i] == 0 ? halves.first : halves.second).push_back(ranks[i]);
  return halves;
}

Status mapRecursively(const CommunicationGraph& graph, const std::vector<int>& ranks, const std::vector<int>& chips,
                      size_t chipBegin, std::vector<int>& placement) {
  if (ranks.size() == 1) {
    placement[ranks.front()] = chips[chipBegin];
    return {};
  }
  const size_t firstSize = ranks.size() / 2;
  auto halves = bisectRanks(graph, ranks, firstSize);
  if (!halves) return halves.error();
  if (auto s = mapRecursively(graph, halves->first, chips, chipBegin, placement); !s) return s;
  return mapRecursively(graph, halves->second, chips, chipBegin + firstSize, placement);
}

}  // namespace

Expected<std::vector<int>> mapCommunicationGraph(const CommunicationGraph& graph, const std::vector<int>& chips) {
  if (static_cast<int>(chips.size()) != graph.ranks)
    return makeError(ExitCode::kInternal, fmt::format("{} ranks for {} chips", graph.ranks, chips.size()));
  std::vector<int> placement(graph.ranks, -1), ranks(graph.ranks);
  std::iota(ranks.begin(), ranks.end(), 0);
  if (graph.ranks == 0) return placement;
  if (auto s = mapRecursively(graph, ranks, chips, 0, placement); !s) return s.error();
  return placement;
}

}  // namespace tsp::partition
