// Cluster: chips, chip-to-chip links, topology generators and deterministic minimal routing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "topology/chip_spec.h"

namespace tsp::topology {

/// Which level of a hierarchical topology a link belongs to (kDirect for flat topologies).
enum class LinkTier : std::uint8_t { kDirect, kNode, kRack, kSystem };

/// "direct", "node", "rack" or "system".
const char* linkTierName(LinkTier tier);

/// One bidirectional C2C link between port portA of chip a and port portB of chip b.
struct Link {
  int id = 0;
  int a = 0, b = 0;
  int portA = 0, portB = 0;
  int lanes = 4;
  double gbpsPerLane = 30.0;
  double latencyNs = 250.0;
  LinkTier tier = LinkTier::kDirect;
  Cycle latencyCycles = 0;     ///< latencyNs at the chip clock, rounded up.
  double bytesPerCycle = 0.0;  ///< payload bandwidth per direction after framing.

  /// Cycles one vector of `vectorBytes` takes on the link at its exact payload rate (a fraction).
  double vectorCycles(int vectorBytes) const { return vectorBytes / bytesPerCycle; }

  /// The chip at the other end from chip.
  int other(int chip) const { return chip == a ? b : a; }
  /// The port this link uses on chip.
  int portOn(int chip) const { return chip == a ? portA : portB; }
  /// The key of the direction that leaves chip: 2 x id, plus 1 leaving from b. Link calendars,
  /// loads and contention counts are kept per direction under this key.
  int directionFrom(int chip) const { return id * 2 + (chip == a ? 0 : 1); }
};

/// Cycles a link needs for `vectors` vectors leaving `spacing` cycles apart: the fractions accumulate
/// over the stream, so k vectors take ceil(k x spacing), not k x ceil(spacing). Vector j of a burst
/// enters the link at serializationCycles(j, spacing) after vector 0. Compiler and simulator share it.
inline Cycle serializationCycles(std::int64_t vectors, double spacing) {
  const double exact = static_cast<double>(vectors) * spacing;
  const auto whole = static_cast<Cycle>(exact);
  return exact - static_cast<double>(whole) > 1e-9 ? whole + 1 : whole;
}

/// serializationCycles of a paced stream: the sender issues a vector every `interval` cycles and the
/// link needs `spacing` cycles per vector, so the vectors leave at the slower of the two.
inline Cycle pacedSerializationCycles(std::int64_t vectors, double spacing, Cycle interval) {
  return serializationCycles(vectors, std::max(spacing, static_cast<double>(interval)));
}

/// Cycles vectors [from, from + vectors) of one stream hold the link: a burst that continues a
/// stream (a tile's later MEM-slice segment: a C2C send whose `stride` says so) goes on from where
/// the stream's fraction of a cycle stands, so a stream of k vectors in bursts takes
/// ceil(k x spacing) however it is cut. Vector j of such a burst enters the
/// link streamCycles(from, j, ...) after its first.
inline Cycle streamCycles(std::int64_t from, std::int64_t vectors, double spacing, Cycle interval) {
  return pacedSerializationCycles(from + vectors, spacing, interval) - pacedSerializationCycles(from, spacing, interval);
}

/// One hop of a route: leave `chip` on `link`.
struct Hop {
  int chip;
  int link;
};

/// Default link parameters applied to every generated link (and to explicit links that omit them).
struct LinkDefaults {
  int lanes = 4;
  double gbpsPerLane = 30.0;
  double latencyNs = 250.0;
};

/// The generator and its parameters, as given in the config.
struct TopologyDescription {
  std::string kind = "ring";  ///< ring | mesh | torus | fully-connected | dragonfly | explicit
  std::vector<int> dims;      ///< mesh / torus
  int chips = 0;              ///< ring, fully-connected, explicit
  /// Dragonfly: chips per node, nodes per rack, racks, and rack (global) ports per chip.
  int chipsPerNode = 8, nodesPerRack = 9, racks = 1, globalLinksPerChip = 4;
  int portsPerChip = 16;  ///< C2C ports of the chip, the budget the dragonfly wiring spreads
  /// Dragonfly: link parameters of each tier (node-local, rack, system).
  LinkDefaults nodeLink, rackLink, systemLink;

  /// Dragonfly: links joining every pair of nodes of a rack.
  int linksPerNodePair() const {
    return nodesPerRack > 1 ? globalLinksPerChip * chipsPerNode / (nodesPerRack - 1) : 0;
  }
  /// Dragonfly: ports per chip left for links to other racks.
  int systemPortsPerChip() const { return portsPerChip - (chipsPerNode - 1) - globalLinksPerChip; }
};

/// Exact hop distances and next hops of one cluster; one implementation per generator.
class Router {
 public:
  virtual ~Router() = default;
  /// Minimal hop count from src to dst (-1 when unreachable).
  virtual int distance(int src, int dst) const = 0;
  /// The link a route from chip at (not dst) towards dst leaves on.
  virtual int nextLink(int at, int dst) const = 0;
  /// True when distance() holds for every pair without a breadth-first search per query.
  virtual bool compact() const = 0;
};

/// A whole cluster: one chip spec, the links and the routes between chips. Immutable once built.
class Cluster {
 public:
  Cluster(ChipSpec chip, TopologyDescription description, int chipCount, std::vector<Link> links);

  /// The chip spec shared by every chip.
  const ChipSpec& chip() const { return chip_; }
  /// The generator and parameters the cluster came from.
  const TopologyDescription& description() const { return description_; }
  /// Number of chips; chip ids are 0 to chipCount() - 1.
  int chipCount() const { return chipCount_; }
  /// Every link, indexed by link id.
  const std::vector<Link>& links() const { return links_; }
  /// The key of the link direction a hop leaves on (Link::directionFrom).
  int direction(const Hop& hop) const { return links_[hop.link].directionFrom(hop.chip); }
  /// The links of chip, as (port, link id), sorted by port.
  const std::vector<std::pair<int, int>>& linksOf(int chip) const { return adjacency_[chip]; }
  /// The link on port of chip, or -1 when the port is unconnected.
  int linkAt(int chip, int port) const;

  /// Minimal route from src to dst (empty when src == dst): dimension order on mesh and torus,
  /// otherwise at each chip the minimal next hop towards the lowest chip id.
  std::vector<Hop> route(int src, int dst) const;
  /// Minimal hop count between two chips, exact and without all-pairs tables.
  int hops(int src, int dst) const { return router_->distance(src, dst); }
  /// Hop counts from src to every chip (breadth-first, minimal).
  std::vector<int> hopsFrom(int src) const;
  /// Cycles for one vector to travel a route: link latencies plus forwarding at transit chips.
  Cycle routeLatency(const std::vector<Hop>& route) const;
  /// Cycles of the route from src to dst.
  Cycle routeLatency(int src, int dst) const { return routeLatency(route(src, dst)); }
  /// Dense hop matrix (row src, column dst); for clusters up to maxChips chips, else empty.
  std::vector<std::vector<int>> hopMatrix(int maxChips = 4096) const;
  /// Dense route-latency matrix in cycles; for clusters up to maxChips chips, else empty.
  std::vector<std::vector<Cycle>> latencyMatrix(int maxChips = 4096) const;
  /// Smallest link latency in cycles.
  Cycle minLinkLatency() const;
  /// True when every chip can reach every other.
  bool connected() const;
  /// The routing engine (exact distances, next hops).
  const Router& router() const { return *router_; }

 private:
  ChipSpec chip_;
  TopologyDescription description_;
  int chipCount_;
  std::vector<Link> links_;
  std::vector<std::vector<std::pair<int, int>>> adjacency_;
  std::shared_ptr<const Router> router_;  // immutable, shared by copies of the cluster
};

/// The link list of a generator (no explicit links): ring, mesh, torus, fully-connected, dragonfly.
Expected<std::vector<Link>> generateLinks(const TopologyDescription& description, const LinkDefaults& defaults,
                                          int& chipCount);

/// Fills latencyCycles and bytesPerCycle of every link from the chip clock.
void resolveLinkTiming(const ChipSpec& chip, std::vector<Link>& links);

/// Figures that describe a topology (for --describe topology).
struct TopologySummary {
  int chips = 0;
  int links = 0;
  int minDegree = 0, maxDegree = 0;
  int diameterHops = 0;
  double averageHops = 0.0;    ///< over ordered pairs of distinct chips
  bool hopsExact = true;       ///< false when hop figures were sampled from a subset of sources
  std::int64_t bisectionLinks = 0;
  bool bisectionExact = true;  ///< false when bisection is a heuristic upper bound
  Cycle minLatencyCycles = 0, maxLatencyCycles = 0;
  double injectionBytesPerSecond = 0.0;  ///< sum over chips of their links' outgoing bandwidth
  /// Dragonfly only: the cut between two halves of one rack inside the system (local, rack and
  /// system links of one half), in links and in payload bytes per second in one direction.
  std::int64_t rackBisectionLinks = 0;
  double rackBisectionBytesPerSecond = 0.0;
};

/// Computes the summary figures of a cluster.
TopologySummary summarize(const Cluster& cluster);

}  // namespace tsp::topology
