// Cluster: chips, chip-to-chip links, topology generators and deterministic minimal routing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "topology/chip_spec.h"

namespace tsp::topology {

/// One bidirectional C2C link between port portA of chip a and port portB of chip b.
struct Link {
  int id = 0;
  int a = 0, b = 0;
  int portA = 0, portB = 0;
  int lanes = 4;
  double gbpsPerLane = 30.0;
  double latencyNs = 250.0;
  Cycle latencyCycles = 0;     ///< latencyNs at the chip clock, rounded up.
  double bytesPerCycle = 0.0;  ///< payload bandwidth per direction after framing.

  /// The chip at the other end from chip.
  int other(int chip) const { return chip == a ? b : a; }
  /// The port this link uses on chip.
  int portOn(int chip) const { return chip == a ? portA : portB; }
};

/// One hop of a route: leave `chip` on `link`.
struct Hop {
  int chip;
  int link;
};

/// The generator and its parameters, as given in the config.
struct TopologyDescription {
  std::string kind = "ring";  ///< ring | mesh | torus | fully-connected | dragonfly | explicit
  std::vector<int> dims;      ///< mesh / torus
  int chips = 0;              ///< ring, fully-connected, explicit
  int chipsPerNode = 8, nodesPerRack = 9, racks = 1, globalLinksPerChip = 4;  ///< dragonfly
  int portsPerChip = 16;      ///< C2C ports of the chip, the budget the dragonfly wiring spreads
};

/// A whole cluster: one chip spec, the links and the routes between chips. Immutable once built.
class Cluster {
 public:
  Cluster(ChipSpec chip, TopologyDescription description, int chipCount, std::vector<Link> links);

  const ChipSpec& chip() const { return chip_; }
  const TopologyDescription& description() const { return description_; }
  int chipCount() const { return chipCount_; }
  const std::vector<Link>& links() const { return links_; }
  /// The links of chip, as (port, link id), sorted by port.
  const std::vector<std::pair<int, int>>& linksOf(int chip) const { return adjacency_[chip]; }
  /// The link on port of chip, or -1 when the port is unconnected.
  int linkAt(int chip, int port) const;

  /// Minimal route from src to dst (empty when src == dst); ties broken by lowest chip id.
  std::vector<Hop> route(int src, int dst) const;
  /// Hop counts from src to every chip (breadth-first, minimal).
  std::vector<int> hopsFrom(int src) const;
  /// Cycles for one vector to travel a route: link latencies plus forwarding at transit chips.
  Cycle routeLatency(const std::vector<Hop>& route) const;
  /// Smallest link latency in cycles.
  Cycle minLinkLatency() const;
  /// True when every chip can reach every other.
  bool connected() const;

 private:
  const std::vector<int>& parentsTowards(int dst) const;

  ChipSpec chip_;
  TopologyDescription description_;
  int chipCount_;
  std::vector<Link> links_;
  std::vector<std::vector<std::pair<int, int>>> adjacency_;
  // Breadth-first trees towards each destination, built on first use (routing is cheap to ask
  // for a few destinations and must not cost all-pairs memory on a 10,440-chip system).
  mutable std::map<int, std::vector<int>> parentLinkTowards_;
};

/// Default link parameters applied to every generated link.
struct LinkDefaults {
  int lanes = 4;
  double gbpsPerLane = 30.0;
  double latencyNs = 250.0;
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
  double averageHops = 0.0;
  bool hopsExact = true;       ///< false when hop figures were sampled from a subset of sources
  std::int64_t bisectionLinks = 0;
  bool bisectionExact = true;  ///< false when bisection is a heuristic upper bound
  Cycle minLatencyCycles = 0, maxLatencyCycles = 0;
  double injectionBytesPerSecond = 0.0;  ///< sum over chips of their links' outgoing bandwidth
};

/// Computes the summary figures of a cluster.
TopologySummary summarize(const Cluster& cluster);

}  // namespace tsp::topology
