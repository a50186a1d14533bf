// Loading and validating the `cluster:` section of a config into an immutable Cluster.
#pragma once

#include "support/expected.h"
#include "topology/cluster.h"

namespace YAML { class Node; }

namespace tsp::topology {

class YamlReader;

/// Reads `cluster:` (chip, topology, link), generates or reads the links and validates the result:
/// endpoints exist, no chip has more links than C2C ports, every link lasts at least one cycle,
/// and the cluster is connected.
Expected<Cluster> loadCluster(const YamlReader& reader, const YAML::Node& node);

}  // namespace tsp::topology
