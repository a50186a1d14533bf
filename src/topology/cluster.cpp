// Cluster: construction, generators, per-generator exact routing and summary figures.
#include "topology/cluster.h"

#include <algorithm>
#include <cassert>
#include <deque>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace tsp::topology {

const char* linkTierName(LinkTier tier) {
  switch (tier) {
    case LinkTier::kDirect: return "direct";
    case LinkTier::kNode: return "node";
    case LinkTier::kRack: return "rack";
    case LinkTier::kSystem: return "system";
  }
  return "?";
}

namespace {

// (neighbour chip, link id) per chip, sorted so that the first entry for a neighbour is its lowest link.
using NeighbourTable = std::vector<std::vector<std::pair<int, int>>>;

NeighbourTable neighbourTable(int chips, const std::vector<Link>& links) {
  NeighbourTable table(chips);
  for (const auto& link : links) {
    table[link.a].push_back({link.b, link.id});
    table[link.b].push_back({link.a, link.id});
  }
  for (auto& row : table) std::sort(row.begin(), row.end());
  return table;
}

// Breadth-first hop counts from src (-1 for unreachable chips).
std::vector<int> breadthFirst(const NeighbourTable& table, int src) {
  std::vector<int> hops(table.size(), -1);
  std::vector<int> frontier{src}, next;
  hops[src] = 0;
  for (int depth = 1; !frontier.empty(); ++depth) {
    next.clear();
    for (int u : frontier)
      for (const auto& [v, link] : table[u])
        if (hops[v] < 0) {
          hops[v] = depth;
          next.push_back(v);
        }
    frontier.swap(next);
  }
  return hops;
}

// The lowest link joining at to chip `to` (they must be neighbours).
int linkBetween(const NeighbourTable& table, int at, int to) {
  const auto& row = table[at];
  const auto found = std::lower_bound(row.begin(), row.end(), std::pair{to, std::numeric_limits<int>::min()});
  assert(found != row.end() && found->first == to && "next hop is not a neighbour");
  return found->second;
}

// Among at's neighbours one hop closer to dst, the lowest chip id (and its lowest link).
template <typename Distance>
int greedyNextLink(const NeighbourTable& table, int at, int dst, Distance distance) {
  const int here = distance(at, dst);
  assert(here > 0 && "no route: same chip or unreachable");
  for (const auto& [v, link] : table[at])  // sorted by chip id, then link id
    if (distance(v, dst) == here - 1) return link;
  assert(false && "no neighbour is closer to the destination");
  return -1;
}

// Ring, mesh and torus: chip ids are row-major coordinates (dimension 0 varies slowest).
// Dimension-order routing: correct dimension 0 first, then 1, then 2; on a wrapped dimension the
// shorter way round, and when both ways are equally long the neighbour with the lower chip id.
class GridRouter final : public Router {
 public:
  GridRouter(NeighbourTable table, std::vector<int> dims, std::vector<bool> wrap)
      : table_(std::move(table)), dims_(std::move(dims)), wrap_(std::move(wrap)) {
    stride_.assign(dims_.size(), 1);
    for (int d = static_cast<int>(dims_.size()) - 2; d >= 0; --d) stride_[d] = stride_[d + 1] * dims_[d + 1];
  }
  int distance(int src, int dst) const override {
    int total = 0;
    for (size_t d = 0; d < dims_.size(); ++d) total += axisDistance(d, coordinate(src, d), coordinate(dst, d));
    return total;
  }
  int nextLink(int at, int dst) const override {
    for (size_t d = 0; d < dims_.size(); ++d) {
      const int c = coordinate(at, d), t = coordinate(dst, d), k = dims_[d];
      if (c == t) continue;
      int step = t > c ? 1 : -1;
      if (wrap_[d]) {
        const int forward = ((t - c) % k + k) % k, backward = k - forward;
        if (forward != backward) {
          step = forward < backward ? 1 : -1;
        } else {  // both ways equally long: the neighbour with the lower chip id
          const int up = at + ((c + 1) % k - c) * stride_[d], down = at + ((c - 1 + k) % k - c) * stride_[d];
          step = up < down ? 1 : -1;
        }
      }
      const int next = at + (((c + step) % k + k) % k - c) * stride_[d];
      return linkBetween(table_, at, next);
    }
    assert(false && "nextLink called with at == dst");
    return -1;
  }
  bool compact() const override { return true; }

 private:
  int coordinate(int chip, size_t d) const { return chip / stride_[d] % dims_[d]; }
  int axisDistance(size_t d, int a, int b) const {
    const int delta = std::abs(a - b);
    return wrap_[d] ? std::min(delta, dims_[d] - delta) : delta;
  }

  NeighbourTable table_;
  std::vector<int> dims_, stride_;
  std::vector<bool> wrap_;
};

// Fully connected: every other chip is one hop away.
class CompleteRouter final : public Router {
 public:
  explicit CompleteRouter(NeighbourTable table) : table_(std::move(table)) {}
  int distance(int src, int dst) const override { return src == dst ? 0 : 1; }
  int nextLink(int at, int dst) const override { return linkBetween(table_, at, dst); }
  bool compact() const override { return true; }

 private:
  NeighbourTable table_;
};

// Dragonfly: the generator wires every rack alike and the system links as a circulant (rack r's
// port for rack offset d joins rack r + d), so shifting every chip by one rack maps the cluster
// onto itself. Hop counts from the chips of rack 0 (one breadth-first search per chip of a rack)
// are then exact for every pair: d((r, c), (s, e)) = d((0, c), (s - r, e)). Routes are minimal:
// at each chip the next hop is the neighbour one hop closer with the lowest chip id.
class DragonflyRouter final : public Router {
 public:
  DragonflyRouter(NeighbourTable table, int perRack, int racks)
      : table_(std::move(table)), perRack_(perRack), racks_(racks), chips_(perRack * racks) {
    hopsFromRack0_.resize(static_cast<size_t>(perRack_) * chips_);
    for (int c = 0; c < perRack_; ++c) {
      const auto hops = breadthFirst(table_, c);
      for (int v = 0; v < chips_; ++v)
        hopsFromRack0_[static_cast<size_t>(c) * chips_ + v] = static_cast<std::uint8_t>(hops[v] < 0 ? 255 : hops[v]);
    }
  }
  int distance(int src, int dst) const override {
    const int shift = ((dst / perRack_ - src / perRack_) % racks_ + racks_) % racks_;
    const int h = hopsFromRack0_[static_cast<size_t>(src % perRack_) * chips_ + shift * perRack_ + dst % perRack_];
    return h == 255 ? -1 : h;
  }
  int nextLink(int at, int dst) const override {
    return greedyNextLink(table_, at, dst, [this](int a, int b) { return distance(a, b); });
  }
  bool compact() const override { return true; }
  /// Hop counts from chip c of rack 0 to every chip (the compact form of the hop matrix).
  const std::uint8_t* fromRack0(int c) const { return &hopsFromRack0_[static_cast<size_t>(c) * chips_]; }

 private:
  NeighbourTable table_;
  int perRack_, racks_, chips_;
  std::vector<std::uint8_t> hopsFromRack0_;
};

// Explicit links: a dense hop table up to kDenseChips chips, else a breadth-first search per query.
class SearchRouter final : public Router {
 public:
  static constexpr int kDenseChips = 2048;

  explicit SearchRouter(NeighbourTable table) : table_(std::move(table)) {
    const int n = static_cast<int>(table_.size());
    if (n > kDenseChips) return;
    dense_.resize(static_cast<size_t>(n) * n);
    for (int s = 0; s < n; ++s) {
      const auto hops = breadthFirst(table_, s);
      for (int v = 0; v < n; ++v) dense_[static_cast<size_t>(s) * n + v] = static_cast<std::int16_t>(hops[v]);
    }
  }
  int distance(int src, int dst) const override {
    if (!dense_.empty()) return dense_[static_cast<size_t>(src) * table_.size() + dst];
    return breadthFirst(table_, src)[dst];
  }
  int nextLink(int at, int dst) const override {
    if (!dense_.empty()) return greedyNextLink(table_, at, dst, [this](int a, int b) { return distance(a, b); });
    const auto towards = breadthFirst(table_, dst);  // hop counts are symmetric
    return greedyNextLink(table_, at, dst, [&towards](int a, int) { return towards[a]; });
  }
  bool compact() const override { return !dense_.empty(); }

 private:
  NeighbourTable table_;
  std::vector<std::int16_t> dense_;
};

std::shared_ptr<const Router> makeRouter(const TopologyDescription& d, int chips, const std::vector<Link>& links) {
  NeighbourTable table = neighbourTable(chips, links);
  if (d.kind == "ring") return std::make_shared<GridRouter>(std::move(table), std::vector<int>{chips}, std::vector<bool>{chips > 2});
  if (d.kind == "mesh" || d.kind == "torus") {
    std::vector<bool> wrap;
    for (int k : d.dims) wrap.push_back(d.kind == "torus" && k > 2);
    return std::make_shared<GridRouter>(std::move(table), d.dims, wrap);
  }
  if (d.kind == "fully-connected") return std::make_shared<CompleteRouter>(std::move(table));
  if (d.kind == "dragonfly")
    return std::make_shared<DragonflyRouter>(std::move(table), d.chipsPerNode * d.nodesPerRack, d.racks);
  return std::make_shared<SearchRouter>(std::move(table));
}

}  // namespace

Cluster::Cluster(ChipSpec chip, TopologyDescription description, int chipCount, std::vector<Link> links)
    : chip_(std::move(chip)), description_(std::move(description)), chipCount_(chipCount), links_(std::move(links)) {
  adjacency_.resize(chipCount_);
  for (const auto& link : links_) {
    adjacency_[link.a].push_back({link.portA, link.id});
    adjacency_[link.b].push_back({link.portB, link.id});
  }
  for (auto& ports : adjacency_) std::sort(ports.begin(), ports.end());
  router_ = makeRouter(description_, chipCount_, links_);
}

int Cluster::linkAt(int chip, int port) const {
  for (const auto& [p, link] : adjacency_[chip])
    if (p == port) return link;
  return -1;
}

std::vector<int> Cluster::hopsFrom(int src) const {
  std::vector<int> hops(chipCount_, -1);
  std::deque<int> frontier{src};
  hops[src] = 0;
  while (!frontier.empty()) {
    const int u = frontier.front();
    frontier.pop_front();
    for (const auto& [port, linkId] : adjacency_[u]) {
      const int v = links_[linkId].other(u);
      if (hops[v] < 0) {
        hops[v] = hops[u] + 1;
        frontier.push_back(v);
      }
    }
  }
  return hops;
}

std::vector<Hop> Cluster::route(int src, int dst) const {
  std::vector<Hop> hops;
  if (src == dst) return hops;
  assert(router_->distance(src, dst) > 0 && "route between disconnected chips");
  for (int u = src; u != dst;) {
    const int linkId = router_->nextLink(u, dst);
    hops.push_back({u, linkId});
    u = links_[linkId].other(u);
  }
  return hops;
}

Cycle Cluster::routeLatency(const std::vector<Hop>& route) const {
  Cycle total = 0;
  for (size_t i = 0; i < route.size(); ++i) {
    total += links_[route[i].link].latencyCycles;
    if (i > 0) total += chip_.c2cForwardCycles;
  }
  return total;
}

std::vector<std::vector<int>> Cluster::hopMatrix(int maxChips) const {
  std::vector<std::vector<int>> matrix;
  if (chipCount_ > maxChips) return matrix;
  matrix.assign(chipCount_, std::vector<int>(chipCount_, 0));
  for (int s = 0; s < chipCount_; ++s)
    for (int d = 0; d < chipCount_; ++d) matrix[s][d] = hops(s, d);
  return matrix;
}

std::vector<std::vector<Cycle>> Cluster::latencyMatrix(int maxChips) const {
  std::vector<std::vector<Cycle>> matrix;
  if (chipCount_ > maxChips) return matrix;
  matrix.assign(chipCount_, std::vector<Cycle>(chipCount_, 0));
  for (int s = 0; s < chipCount_; ++s)
    for (int d = 0; d < chipCount_; ++d) matrix[s][d] = s == d ? 0 : routeLatency(s, d);
  return matrix;
}

Cycle Cluster::minLinkLatency() const {
  Cycle best = std::numeric_limits<Cycle>::max();
  for (const auto& link : links_) best = std::min(best, link.latencyCycles);
  return links_.empty() ? 0 : best;
}

bool Cluster::connected() const {
  if (chipCount_ <= 1) return true;
  const auto hops = hopsFrom(0);
  return std::none_of(hops.begin(), hops.end(), [](int h) { return h < 0; });
}

void resolveLinkTiming(const ChipSpec& chip, std::vector<Link>& links) {
  for (auto& link : links) {
    link.latencyCycles = nsToCycles(link.latencyNs, chip.clockMhz);
    const double bytesPerSecond = link.lanes * link.gbpsPerLane * 1e9 / 8.0 * (1.0 - chip.c2cFramingOverhead);
    link.bytesPerCycle = bytesPerSecond / (chip.clockMhz * 1e6);
  }
}

namespace {

// Adds links in creation order, giving each chip its ports in that order.
class LinkBuilder {
 public:
  LinkBuilder(int chips, const LinkDefaults& defaults) : nextPort_(chips, 0), defaults_(defaults) {}
  void add(int a, int b) { add(a, b, defaults_, LinkTier::kDirect); }
  void add(int a, int b, const LinkDefaults& fields, LinkTier tier) {
    Link link;
    link.id = static_cast<int>(links_.size());
    link.a = a;
    link.b = b;
    link.portA = nextPort_[a]++;
    link.portB = nextPort_[b]++;
    link.lanes = fields.lanes;
    link.gbpsPerLane = fields.gbpsPerLane;
    link.latencyNs = fields.latencyNs;
    link.tier = tier;
    links_.push_back(link);
  }
  std::vector<Link> take() { return std::move(links_); }

 private:
  std::vector<int> nextPort_;
  LinkDefaults defaults_;
  std::vector<Link> links_;
};

// Coordinates of chip id in a row-major grid of dims.
std::vector<int> coordinates(int id, const std::vector<int>& dims) {
  std::vector<int> c(dims.size());
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    c[d] = id % dims[d];
    id /= dims[d];
  }
  return c;
}

int chipId(const std::vector<int>& c, const std::vector<int>& dims) {
  int id = 0;
  for (size_t d = 0; d < dims.size(); ++d) id = id * dims[d] + c[d];
  return id;
}

// Which chip of a rack holds the system port for each (rack offset, copy); the same in every rack.
// Offsets are dealt in rounds (1, R-1, 2, R-2, ...) so that every pair of racks gets the same
// number of links, give or take one. A complete round's ports for offsets d and R-d go to one chip
// (the link from rack r to r + d and the one from r to r - d share it); the last, partial round's
// ports go to chips one by one. Both in chip-id order, round-robin over chips with free ports.
std::vector<std::vector<int>> systemPortChips(int racks, int perRack, int portsPerChip) {
  std::vector<std::vector<int>> chipOf(racks);  // [offset][copy]
  if (racks < 2 || portsPerChip <= 0) return chipOf;
  const int total = perRack * portsPerChip;
  const int perRound = racks - 1;
  const int rounds = total / perRound;
  std::vector<int> freePorts(perRack, portsPerChip);
  auto nextChip = [&](int& cursor, int need) {
    for (int i = 0; i < perRack; ++i) {
      const int c = (cursor + i) % perRack;
      if (freePorts[c] >= need) {
        freePorts[c] -= need;
        cursor = c + 1;
        return c;
      }
    }
    return -1;
  };
  int pairCursor = 0, singleCursor = 0;
  std::vector<std::pair<int, int>> singles;  // (offset, copy) dealt one port at a time
  for (int round = 0; round < rounds; ++round)
    for (int d = 1; 2 * d <= racks; ++d) {
      if (2 * d == racks) {
        singles.push_back({d, round});
        continue;
      }
      const int c = nextChip(pairCursor, 2);
      if (c < 0) {
        singles.push_back({d, round});
        singles.push_back({racks - d, round});
        continue;
      }
      chipOf[d].push_back(c);
      chipOf[racks - d].push_back(c);
    }
  int left = total - rounds * perRound;
  for (int d = 1; 2 * d <= racks; ++d) {
    const int need = 2 * d == racks ? 1 : 2;
    if (left < need) break;
    left -= need;
    singles.push_back({d, rounds});
    if (2 * d != racks) singles.push_back({racks - d, rounds});
  }
  // Singles are dealt in offset order within each round so that copies line up on both ends.
  std::stable_sort(singles.begin(), singles.end(), [](auto x, auto y) { return x.second < y.second; });
  for (const auto& [d, copy] : singles) {
    const int c = nextChip(singleCursor, 1);
    assert(c >= 0 && "more system slots than ports");
    assert(static_cast<int>(chipOf[d].size()) == copy && "system copies out of order");
    (void)copy;
    chipOf[d].push_back(c);
  }
  return chipOf;
}

}  // namespace

Expected<std::vector<Link>> generateLinks(const TopologyDescription& d, const LinkDefaults& defaults,
                                          int& chipCount) {
  if (d.kind == "ring") {
    chipCount = d.chips;
    LinkBuilder builder(chipCount, defaults);
    if (chipCount == 2) builder.add(0, 1);
    if (chipCount > 2)
      for (int i = 0; i < chipCount; ++i) builder.add(std::min(i, (i + 1) % chipCount), std::max(i, (i + 1) % chipCount));
    return builder.take();
  }
  if (d.kind == "fully-connected") {
    chipCount = d.chips;
    LinkBuilder builder(chipCount, defaults);
    for (int a = 0; a < chipCount; ++a)
      for (int b = a + 1; b < chipCount; ++b) builder.add(a, b);
    return builder.take();
  }
  if (d.kind == "mesh" || d.kind == "torus") {
    chipCount = std::accumulate(d.dims.begin(), d.dims.end(), 1, std::multiplies<>());
    LinkBuilder builder(chipCount, defaults);
    const bool wrap = d.kind == "torus";
    for (int id = 0; id < chipCount; ++id) {
      const auto c = coordinates(id, d.dims);
      for (size_t dim = 0; dim < d.dims.size(); ++dim) {
        auto n = c;
        if (c[dim] + 1 < d.dims[dim]) {
          n[dim] = c[dim] + 1;
          builder.add(id, chipId(n, d.dims));
        } else if (wrap && d.dims[dim] > 2) {
          n[dim] = 0;
          builder.add(chipId(n, d.dims), id);
        }
      }
    }
    return builder.take();
  }
  if (d.kind == "dragonfly") {
    // docs/config.md, "Generators and their wiring": fully connected nodes; every pair of nodes in
    // a rack joined by the same number of links, a node's rack ports dealt over its chips in
    // chip-id order; the remaining ports joined to the other racks as a circulant (systemPortChips).
    const int perNode = d.chipsPerNode, perRack = d.chipsPerNode * d.nodesPerRack;
    if (d.nodesPerRack > 1 && (d.globalLinksPerChip * perNode) % (d.nodesPerRack - 1) != 0)
      return makeError(ExitCode::kConfig,
                       fmt::format("dragonfly: global_links_per_chip x chips_per_node ({} x {}) must be a multiple "
                                   "of nodes_per_rack - 1 ({}), so that every pair of nodes gets as many links",
                                   d.globalLinksPerChip, perNode, d.nodesPerRack - 1));
    chipCount = perRack * d.racks;
    LinkBuilder builder(chipCount, defaults);
    for (int node = 0; node < d.nodesPerRack * d.racks; ++node)
      for (int i = 0; i < perNode; ++i)
        for (int j = i + 1; j < perNode; ++j)
          builder.add(node * perNode + i, node * perNode + j, d.nodeLink, LinkTier::kNode);
    const int perPair = d.linksPerNodePair();
    for (int rack = 0; rack < d.racks; ++rack) {
      std::vector<int> nextRackPort(d.nodesPerRack, 0);
      const int base = rack * perRack;
      auto takePort = [&](int node) { return base + node * perNode + nextRackPort[node]++ % perNode; };
      for (int i = 0; i < d.nodesPerRack; ++i)
        for (int j = i + 1; j < d.nodesPerRack; ++j)
          for (int k = 0; k < perPair; ++k) {
            const int a = takePort(i);
            builder.add(a, takePort(j), d.rackLink, LinkTier::kRack);
          }
    }
    const auto chipOf = systemPortChips(d.racks, perRack, std::max(0, d.systemPortsPerChip()));
    for (int offset = 1; 2 * offset <= d.racks; ++offset)
      for (size_t copy = 0; copy < chipOf[offset].size(); ++copy)
        for (int r = 0; r < d.racks; ++r) {
          const int s = (r + offset) % d.racks;
          if (2 * offset == d.racks && r > s) continue;  // opposite racks: each pair once
          builder.add(r * perRack + chipOf[offset][copy], s * perRack + chipOf[d.racks - offset][copy], d.systemLink,
                      LinkTier::kSystem);
        }
    return builder.take();
  }
  return makeError(ExitCode::kConfig, fmt::format("unknown topology kind '{}'", d.kind));
}

namespace {

std::int64_t cutLinks(const Cluster& cluster, const std::vector<char>& side) {
  std::int64_t cut = 0;
  for (const auto& link : cluster.links()) cut += side[link.a] != side[link.b];
  return cut;
}

// Minimum balanced cut by enumerating every bisection (only for small clusters).
std::int64_t exactBisection(const Cluster& cluster) {
  const int n = cluster.chipCount();
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  std::vector<char> side(n, 0);
  // Chip 0 is always on side 0, which halves the enumeration.
  for (std::uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
    if (__builtin_popcount(mask) != n / 2) continue;
    for (int i = 1; i < n; ++i) side[i] = (mask >> (i - 1)) & 1;
    best = std::min(best, cutLinks(cluster, side));
  }
  return best;
}

// Hop figures of a ring, mesh or torus in closed form. Per dimension of size k, the sum of
// distances over ordered coordinate pairs is (k^3 - k) / 3 on a line and k * floor(k^2 / 4) on a
// wrapped ring; each such pair stands for (n / k)^2 chip pairs.
void gridHops(const std::vector<int>& dims, const std::vector<bool>& wrap, TopologySummary& s) {
  const double n = s.chips;
  double total = 0;
  s.diameterHops = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    const double k = dims[d];
    s.diameterHops += wrap[d] ? dims[d] / 2 : dims[d] - 1;
    const double perAxis = wrap[d] ? k * std::floor(k * k / 4) : (k * k * k - k) / 3;
    total += perAxis * (n / k) * (n / k);
  }
  s.averageHops = n > 1 ? total / (n * (n - 1)) : 0.0;
}

// The cut between two halves of one dragonfly rack, keeping every node but one whole: the smallest
// over every choice of whole nodes for one side, the split node's chips sorted by how many of their
// rack links lead to that side. Returns the side of each chip of rack 0 (1 = the chosen half).
std::vector<char> rackHalves(const Cluster& cluster) {
  const auto& d = cluster.description();
  const int perNode = d.chipsPerNode, nodes = d.nodesPerRack, perRack = perNode * nodes, half = perRack / 2;
  const int whole = half / perNode, rest = half % perNode;
  std::vector<char> best;
  std::int64_t bestCut = std::numeric_limits<std::int64_t>::max();
  auto internalCut = [&](const std::vector<char>& side) {
    std::int64_t cut = 0;
    for (int c = 0; c < perRack; ++c)
      for (const auto& [port, id] : cluster.linksOf(c)) {
        const Link& link = cluster.links()[id];
        const int o = link.other(c);
        if (o < perRack && c < o && side[c] != side[o]) ++cut;
      }
    return cut;
  };
  std::vector<int> chosen(whole);
  std::iota(chosen.begin(), chosen.end(), 0);
  int budget = 2000;  // subsets of nodes tried, counted in steps
  while (budget-- > 0) {
    std::vector<char> side(perRack, 0);
    for (int node : chosen)
      for (int i = 0; i < perNode; ++i) side[node * perNode + i] = 1;
    for (int split = 0; split < nodes && rest > 0; ++split) {
      if (std::find(chosen.begin(), chosen.end(), split) != chosen.end()) continue;
      std::vector<std::pair<int, int>> score;  // (-links to side 1, chip)
      for (int i = 0; i < perNode; ++i) {
        const int c = split * perNode + i;
        int toSide = 0;
        for (const auto& [port, id] : cluster.linksOf(c)) {
          const int o = cluster.links()[id].other(c);
          if (o < perRack && o / perNode != split) toSide += side[o];
        }
        score.push_back({-toSide, c});
      }
      std::sort(score.begin(), score.end());
      auto trial = side;
      for (int i = 0; i < rest; ++i) trial[score[i].second] = 1;
      const auto cut = internalCut(trial);
      if (cut < bestCut) bestCut = cut, best = trial;
    }
    if (rest == 0) {
      const auto cut = internalCut(side);
      if (cut < bestCut) bestCut = cut, best = side;
    }
    // Next subset of `whole` nodes in lexicographic order.
    int i = whole - 1;
    while (i >= 0 && chosen[i] == nodes - whole + i) --i;
    if (i < 0) break;
    ++chosen[i];
    for (int j = i + 1; j < whole; ++j) chosen[j] = chosen[j - 1] + 1;
  }
  return best;
}

}  // namespace

TopologySummary summarize(const Cluster& cluster) {
  TopologySummary s;
  s.chips = cluster.chipCount();
  s.links = static_cast<int>(cluster.links().size());
  s.minDegree = std::numeric_limits<int>::max();
  const double hz = cluster.chip().clockMhz * 1e6;
  for (int c = 0; c < s.chips; ++c) {
    const int degree = static_cast<int>(cluster.linksOf(c).size());
    s.minDegree = std::min(s.minDegree, degree);
    s.maxDegree = std::max(s.maxDegree, degree);
    for (const auto& [port, linkId] : cluster.linksOf(c))
      s.injectionBytesPerSecond += cluster.links()[linkId].bytesPerCycle * hz;
  }
  s.minLatencyCycles = cluster.minLinkLatency();
  for (const auto& link : cluster.links()) s.maxLatencyCycles = std::max(s.maxLatencyCycles, link.latencyCycles);

  const auto& d = cluster.description();
  const int n = s.chips;
  // Hop figures: closed forms for the regular generators, the rack-0 table for the dragonfly,
  // every source for other clusters up to 4096 chips, else an evenly spaced sample of sources.
  if (d.kind == "ring" || d.kind == "mesh" || d.kind == "torus") {
    const std::vector<int> dims = d.kind == "ring" ? std::vector<int>{n} : d.dims;
    std::vector<bool> wrap;
    for (int k : dims) wrap.push_back((d.kind != "mesh") && k > 2);
    gridHops(dims, wrap, s);
  } else if (d.kind == "fully-connected") {
    s.diameterHops = n > 1 ? 1 : 0;
    s.averageHops = n > 1 ? 1.0 : 0.0;
  } else if (d.kind == "dragonfly") {
    const auto& router = static_cast<const DragonflyRouter&>(cluster.router());
    const int perRack = d.chipsPerNode * d.nodesPerRack;
    double sum = 0;
    for (int c = 0; c < perRack; ++c) {
      const std::uint8_t* row = router.fromRack0(c);
      for (int v = 0; v < n; ++v) {
        s.diameterHops = std::max<int>(s.diameterHops, row[v]);
        sum += row[v];
      }
    }
    s.averageHops = n > 1 ? sum / (static_cast<double>(perRack) * (n - 1)) : 0.0;
  } else {
    const int stride = n <= 4096 ? 1 : n / 256;
    s.hopsExact = stride == 1;
    double sum = 0;
    std::int64_t pairs = 0;
    for (int src = 0; src < n; src += stride)
      for (int h : cluster.hopsFrom(src)) {
        s.diameterHops = std::max(s.diameterHops, h);
        if (h > 0) sum += h, ++pairs;
      }
    s.averageHops = pairs ? sum / static_cast<double>(pairs) : 0.0;
  }

  const int longest = d.dims.empty() ? 0 : *std::max_element(d.dims.begin(), d.dims.end());
  if (n < 2) {
    s.bisectionLinks = 0;
  } else if (d.kind == "ring") {
    s.bisectionLinks = n == 2 ? 1 : 2;
  } else if (d.kind == "fully-connected") {
    s.bisectionLinks = std::int64_t{n / 2} * (n - n / 2);
  } else if ((d.kind == "mesh" || d.kind == "torus") && longest % 2 == 0) {
    // Cut across the longest dimension, which is even; the torus wraps, so the cut crosses twice.
    const std::int64_t across = n / longest;
    s.bisectionLinks = (d.kind == "torus" && longest > 2) ? 2 * across : across;
  } else if (n <= 24) {
    s.bisectionLinks = exactBisection(cluster);
  } else {
    std::vector<char> side(n, 0);
    for (int c = n / 2; c < n; ++c) side[c] = 1;
    s.bisectionLinks = cutLinks(cluster, side);
    s.bisectionExact = false;
  }

  if (d.kind == "dragonfly" && d.chipsPerNode * d.nodesPerRack >= 2) {
    // Two halves of rack 0: the links between them inside the rack, plus every system link of the
    // half that holds chip 0's complement (traffic between the halves may cross other racks, so
    // the smallest cut puts every other rack on one side and cuts the other half's system links).
    const auto side = rackHalves(cluster);
    const int perRack = static_cast<int>(side.size());
    std::int64_t inside = 0, systemOfHalf[2] = {0, 0};
    double insideBytes = 0, systemBytes[2] = {0, 0};
    for (int c = 0; c < perRack; ++c)
      for (const auto& [port, id] : cluster.linksOf(c)) {
        const Link& link = cluster.links()[id];
        const int o = link.other(c);
        if (o >= perRack) {
          ++systemOfHalf[static_cast<int>(side[c])];
          systemBytes[static_cast<int>(side[c])] += link.bytesPerCycle * hz;
        } else if (c < o && side[c] != side[o]) {
          ++inside;
          insideBytes += link.bytesPerCycle * hz;
        }
      }
    const int lighter = systemBytes[0] <= systemBytes[1] ? 0 : 1;
    s.rackBisectionLinks = inside + systemOfHalf[lighter];
    s.rackBisectionBytesPerSecond = insideBytes + systemBytes[lighter];
  }
  return s;
}

}  // namespace tsp::topology
