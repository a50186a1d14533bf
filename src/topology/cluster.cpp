// Cluster: construction, generators, routing and summary figures.
#include "topology/cluster.h"

#include <algorithm>
#include <cassert>
#include <deque>
#include <limits>
#include <numeric>
#include <optional>

#include <fmt/format.h>

namespace tsp::topology {

Cluster::Cluster(ChipSpec chip, TopologyDescription description, int chipCount, std::vector<Link> links)
    : chip_(std::move(chip)), description_(std::move(description)), chipCount_(chipCount), links_(std::move(links)) {
  adjacency_.resize(chipCount_);
  for (const auto& link : links_) {
    adjacency_[link.a].push_back({link.portA, link.id});
    adjacency_[link.b].push_back({link.portB, link.id});
  }
  for (auto& ports : adjacency_) std::sort(ports.begin(), ports.end());
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

const std::vector<int>& Cluster::parentsTowards(int dst) const {
  auto found = parentLinkTowards_.find(dst);
  if (found != parentLinkTowards_.end()) return found->second;
  const std::vector<int> hops = hopsFrom(dst);
  std::vector<int> next(chipCount_, -1);
  for (int u = 0; u < chipCount_; ++u) {
    if (u == dst || hops[u] < 0) continue;
    int bestChip = std::numeric_limits<int>::max(), bestLink = -1;
    for (const auto& [port, linkId] : adjacency_[u]) {
      const int v = links_[linkId].other(u);
      if (hops[v] != hops[u] - 1) continue;
      if (v < bestChip || (v == bestChip && linkId < bestLink)) {
        bestChip = v;
        bestLink = linkId;
      }
    }
    next[u] = bestLink;
  }
  return parentLinkTowards_.emplace(dst, std::move(next)).first->second;
}

std::vector<Hop> Cluster::route(int src, int dst) const {
  std::vector<Hop> hops;
  if (src == dst) return hops;
  const auto& next = parentsTowards(dst);
  for (int u = src; u != dst;) {
    const int linkId = next[u];
    assert(linkId >= 0 && "route between disconnected chips");
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
  void add(int a, int b, std::optional<double> gbpsPerLane = std::nullopt) {
    Link link;
    link.id = static_cast<int>(links_.size());
    link.a = a;
    link.b = b;
    link.portA = nextPort_[a]++;
    link.portB = nextPort_[b]++;
    link.lanes = defaults_.lanes;
    link.gbpsPerLane = gbpsPerLane.value_or(defaults_.gbpsPerLane);
    link.latencyNs = defaults_.latencyNs;
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

// Cabled links between nodes and racks run at 28 Gb/s per lane (REFERENCES.md).
constexpr double kCabledGbpsPerLane = 28.0;

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
    // DESIGN.md section 3: fully connected nodes; every pair of nodes in a rack joined by
    // globalLinksPerChip links (rack ports assigned in chip-id order); the remaining ports spread
    // round-robin over the other racks.
    const int perNode = d.chipsPerNode, perRack = d.chipsPerNode * d.nodesPerRack;
    chipCount = perRack * d.racks;
    LinkBuilder builder(chipCount, defaults);
    for (int node = 0; node < d.nodesPerRack * d.racks; ++node)
      for (int i = 0; i < perNode; ++i)
        for (int j = i + 1; j < perNode; ++j) builder.add(node * perNode + i, node * perNode + j);
    for (int rack = 0; rack < d.racks; ++rack) {
      std::vector<int> nextRackPort(d.nodesPerRack, 0);
      const int base = rack * perRack;
      auto takePort = [&](int node) { return base + node * perNode + (nextRackPort[node]++ / d.globalLinksPerChip) % perNode; };
      for (int i = 0; i < d.nodesPerRack; ++i)
        for (int j = i + 1; j < d.nodesPerRack; ++j)
          for (int k = 0; k < d.globalLinksPerChip; ++k) builder.add(takePort(i), takePort(j), kCabledGbpsPerLane);
    }
    if (d.racks > 1) {
      const int systemPortsPerChip = d.portsPerChip - (perNode - 1) - d.globalLinksPerChip;
      const int portsPerRack = std::max(0, systemPortsPerChip) * perRack;
      std::vector<int> used(d.racks, 0);
      auto chipFor = [&](int rack) { return rack * perRack + (used[rack]++ % perRack); };
      bool added = true;
      while (added) {
        added = false;
        for (int distance = 1; distance <= d.racks / 2; ++distance)
          for (int r = 0; r < d.racks; ++r) {
            const int s = (r + distance) % d.racks;
            if (2 * distance == d.racks && r >= s) continue;  // each opposite pair once
            if (used[r] >= portsPerRack || used[s] >= portsPerRack) continue;
            builder.add(chipFor(r), chipFor(s), kCabledGbpsPerLane);
            added = true;
          }
      }
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

}  // namespace

TopologySummary summarize(const Cluster& cluster) {
  TopologySummary s;
  s.chips = cluster.chipCount();
  s.links = static_cast<int>(cluster.links().size());
  s.minDegree = std::numeric_limits<int>::max();
  for (int c = 0; c < s.chips; ++c) {
    const int degree = static_cast<int>(cluster.linksOf(c).size());
    s.minDegree = std::min(s.minDegree, degree);
    s.maxDegree = std::max(s.maxDegree, degree);
    for (const auto& [port, linkId] : cluster.linksOf(c))
      s.injectionBytesPerSecond += cluster.links()[linkId].bytesPerCycle * cluster.chip().clockMhz * 1e6;
  }
  s.minLatencyCycles = cluster.minLinkLatency();
  for (const auto& link : cluster.links()) s.maxLatencyCycles = std::max(s.maxLatencyCycles, link.latencyCycles);

  // Hop figures: every source for clusters up to 2048 chips, else an evenly spaced sample of sources.
  const int stride = s.chips <= 2048 ? 1 : s.chips / 256;
  s.hopsExact = stride == 1;
  double sum = 0;
  std::int64_t pairs = 0;
  for (int src = 0; src < s.chips; src += stride) {
    for (int h : cluster.hopsFrom(src)) {
      s.diameterHops = std::max(s.diameterHops, h);
      if (h > 0) {
        sum += h;
        ++pairs;
      }
    }
  }
  s.averageHops = pairs ? sum / static_cast<double>(pairs) : 0.0;

  const auto& d = cluster.description();
  const int n = s.chips;
  if (n < 2) {
    s.bisectionLinks = 0;
  } else if (d.kind == "ring") {
    s.bisectionLinks = n == 2 ? 1 : 2;
  } else if (d.kind == "fully-connected") {
    s.bisectionLinks = std::int64_t{n / 2} * (n - n / 2);
  } else if ((d.kind == "mesh" || d.kind == "torus") &&
             std::all_of(d.dims.begin(), d.dims.end(), [](int k) { return k % 2 == 0 || k == 1; })) {
    // Cut across the longest dimension; the torus wraps, so the cut crosses twice.
    const int longest = *std::max_element(d.dims.begin(), d.dims.end());
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
  return s;
}

}  // namespace tsp::topology
