// Loading and validating the `cluster:` section.
#include "topology/cluster_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "topology/yaml_reader.h"

namespace tsp::topology {

namespace {

Expected<LinkDefaults> readLinkFields(const YamlReader& reader, const YAML::Node& node, LinkDefaults base) {
  auto lanes = reader.integer(node, "lanes", base.lanes, 1, 64);
  if (!lanes) return lanes.error();
  auto gbps = reader.number(node, "gbps_per_lane", base.gbpsPerLane, 1e-3, 1e4);
  if (!gbps) return gbps.error();
  auto latency = reader.number(node, "latency_ns", base.latencyNs, 0, 1e9);
  if (!latency) return latency.error();
  return LinkDefaults{static_cast<int>(*lanes), *gbps, *latency};
}

const std::vector<std::string> kLinkKeys = {"lanes", "gbps_per_lane", "latency_ns"};

}  // namespace

Expected<Cluster> loadCluster(const YamlReader& reader, const YAML::Node& node) {
  if (!node || node.IsNull()) return configError({reader.file(), 0, 0, ""}, "missing 'cluster' section");
  if (auto s = reader.checkKeys(node, {"chip", "topology", "link"}, "cluster"); !s) return s.error();

  auto chip = loadChipSpec(reader, reader.child(node, "chip"));
  if (!chip) return chip.error();

  const YAML::Node linkNode = reader.child(node, "link");
  if (auto s = reader.checkKeys(linkNode, kLinkKeys, "cluster.link"); !s) return s.error();
  // The chip's serdes figures are the defaults of every link.
  auto defaults = readLinkFields(reader, linkNode, LinkDefaults{chip->c2cLanesPerLink, chip->c2cGbpsPerLane, 250.0});
  if (!defaults) return defaults.error();

  const YAML::Node topo = reader.child(node, "topology");
  if (!topo || !topo.IsMap()) return reader.error(reader.either(topo, node), "'cluster.topology' must be a mapping with a 'kind'");
  if (auto s = reader.checkKeys(topo, {"kind", "chips", "dims", "chips_per_node", "nodes_per_rack", "racks",
                                       "global_links_per_chip", "node_link", "rack_link", "system_link", "links"},
                                "cluster.topology");
      !s)
    return s.error();
  TopologyDescription description;
  auto kind = reader.text(topo, "kind", "", {"ring", "mesh", "torus", "fully-connected", "dragonfly", "explicit"});
  if (!kind) return kind.error();
  if (kind->empty()) return reader.error(topo, "'cluster.topology' needs a 'kind'");
  description.kind = *kind;
  description.portsPerChip = chip->c2cPorts;

  constexpr std::int64_t kMaxChips = 1 << 20;
  int chipCount = 0;
  std::vector<Link> links;
  if (*kind == "ring" || *kind == "fully-connected" || *kind == "explicit") {
    if (!reader.has(topo, "chips")) return reader.error(topo, fmt::format("a '{}' topology needs 'chips'", *kind));
    auto chips = reader.integer(topo, "chips", 0, 1, kMaxChips);
    if (!chips) return chips.error();
    description.chips = static_cast<int>(*chips);
  }
  if (*kind == "mesh" || *kind == "torus") {
    auto dims = reader.integerList(topo, "dims", 1, 1 << 16);
    if (!dims) return dims.error();
    if (dims->empty() || dims->size() > 3)
      return reader.error(reader.either(reader.child(topo, "dims"), topo), "'dims' must list 1 to 3 sizes");
    for (auto k : *dims) description.dims.push_back(static_cast<int>(k));
  }
  if (*kind == "dragonfly") {
    auto perNode = reader.integer(topo, "chips_per_node", 8, 1, 1024);
    if (!perNode) return perNode.error();
    auto perRack = reader.integer(topo, "nodes_per_rack", 9, 1, 1024);
    if (!perRack) return perRack.error();
    auto racks = reader.integer(topo, "racks", 1, 1, 4096);
    if (!racks) return racks.error();
    auto global = reader.integer(topo, "global_links_per_chip", 4, 0, 1024);
    if (!global) return global.error();
    description.chipsPerNode = static_cast<int>(*perNode);
    description.nodesPerRack = static_cast<int>(*perRack);
    description.racks = static_cast<int>(*racks);
    description.globalLinksPerChip = static_cast<int>(*global);
    // Node-local links are on the board; rack and system links are cabled, at the cabled lane rate.
    LinkDefaults cabled = *defaults;
    if (const YAML::Node given = reader.child(linkNode, "gbps_per_lane"); !given || given.IsNull())
      cabled.gbpsPerLane = chip->c2cCabledGbpsPerLane;
    const std::pair<const char*, LinkDefaults> tiers[] = {{"node_link", *defaults}, {"rack_link", cabled}, {"system_link", cabled}};
    LinkDefaults* targets[] = {&description.nodeLink, &description.rackLink, &description.systemLink};
    for (int t = 0; t < 3; ++t) {
      const YAML::Node tierNode = reader.child(topo, tiers[t].first);
      if (auto s = reader.checkKeys(tierNode, kLinkKeys, fmt::format("cluster.topology.{}", tiers[t].first)); !s)
        return s.error();
      auto fields = readLinkFields(reader, tierNode, tiers[t].second);
      if (!fields) return fields.error();
      *targets[t] = *fields;
    }
  }
  // Size limits: chip ids are ints, and the dragonfly's hop table holds one byte per (chip of a rack, chip).
  std::int64_t total = description.chips;
  if (*kind == "mesh" || *kind == "torus") {
    total = 1;
    for (int k : description.dims) total *= k;
  }
  std::int64_t limit = kMaxChips;
  if (*kind == "dragonfly") {
    const std::int64_t perRack = std::int64_t{description.chipsPerNode} * description.nodesPerRack;
    total = perRack * description.racks;
    limit = std::min<std::int64_t>(kMaxChips, (std::int64_t{1} << 28) / perRack);
  }
  if (total > limit)
    return reader.error(topo, fmt::format("the '{}' topology has {} chips, more than the {} this build supports", *kind,
                                          total, limit));
  if (*kind == "explicit") {
    chipCount = description.chips;
    const YAML::Node list = reader.child(topo, "links");
    if (list && !list.IsNull() && !list.IsSequence()) return reader.error(list, "'links' must be a list of {a, b} entries");
    std::vector<int> nextPort(chipCount, 0);
    for (const auto& entry : list) {
      if (auto s = reader.checkKeys(entry, {"a", "b", "lanes", "gbps_per_lane", "latency_ns"},
                                    "cluster.topology.links[]");
          !s)
        return s.error();
      if (!reader.has(entry, "a") || !reader.has(entry, "b")) return reader.error(entry, "a link needs both 'a' and 'b'");
      auto a = reader.integer(entry, "a", 0, 0, kMaxChips);
      if (!a) return a.error();
      auto b = reader.integer(entry, "b", 0, 0, kMaxChips);
      if (!b) return b.error();
      for (auto [key, value] : {std::pair{"a", *a}, std::pair{"b", *b}})
        if (value >= chipCount)
          return reader.error(reader.child(entry, key), fmt::format("link endpoint '{}' is chip {}, but the cluster has chips 0 to {}",
                                                      key, value, chipCount - 1));
      if (*a == *b) return reader.error(entry, fmt::format("link joins chip {} to itself", *a));
      auto fields = readLinkFields(reader, entry, *defaults);
      if (!fields) return fields.error();
      Link link;
      link.id = static_cast<int>(links.size());
      link.a = static_cast<int>(*a);
      link.b = static_cast<int>(*b);
      link.portA = nextPort[link.a]++;
      link.portB = nextPort[link.b]++;
      link.lanes = fields->lanes;
      link.gbpsPerLane = fields->gbpsPerLane;
      link.latencyNs = fields->latencyNs;
      links.push_back(link);
      for (int endpoint : {link.a, link.b})
        if (nextPort[endpoint] > chip->c2cPorts)
          return reader.error(entry, fmt::format("chip {} has more links than its {} C2C ports", endpoint,
                                                 chip->c2cPorts));
    }
  } else {
    auto generated = generateLinks(description, *defaults, chipCount);
    if (!generated) return reader.error(topo, generated.error().message);
    links = std::move(*generated);
    std::vector<int> degree(chipCount, 0);
    for (const auto& link : links) {
      ++degree[link.a];
      ++degree[link.b];
    }
    for (int c = 0; c < chipCount; ++c)
      if (degree[c] > chip->c2cPorts)
        return reader.error(topo, fmt::format("the '{}' topology gives chip {} {} links, more than its {} C2C ports",
                                              *kind, c, degree[c], chip->c2cPorts));
  }
  resolveLinkTiming(*chip, links);
  for (const auto& link : links)
    if (link.latencyNs * chip->clockMhz / 1000.0 < 1.0)
      return reader.error(reader.either(linkNode, topo),
                          fmt::format("link {} ({} - {}) is shorter than one cycle ({} ns at {} MHz)", link.id, link.a,
                                      link.b, link.latencyNs, chip->clockMhz));

  Cluster cluster(std::move(*chip), description, chipCount, std::move(links));
  if (!cluster.connected()) return reader.error(topo, "the cluster is not connected: some chips cannot reach others");
  return cluster;
}

}  // namespace tsp::topology
