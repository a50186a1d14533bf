// The ONNX backend node tests (libonnx-testdata): the case directories, and the one-chip cluster they compile for.
#pragma once

#include <algorithm>
#include <filesystem>
#include <vector>

#include "topology/cluster.h"

namespace tsp::sim {

/// Where Debian's libonnx-testdata puts the node tests.
inline constexpr const char* kNodeTests = "/usr/share/libonnx-testdata/data/node";

/// Every case directory, sorted by name (empty when the package is missing).
inline std::vector<std::filesystem::path> nodeTestCases() {
  std::vector<std::filesystem::path> cases;
  if (!std::filesystem::exists(kNodeTests)) return cases;
  for (const auto& entry : std::filesystem::directory_iterator(kNodeTests)) cases.push_back(entry.path());
  std::sort(cases.begin(), cases.end());
  return cases;
}

/// One chip of `spec` with no links: a node test is one pipeline stage.
inline topology::Cluster oneChipCluster(const topology::ChipSpec& spec) {
  topology::TopologyDescription single;
  single.kind = "explicit";
  single.chips = 1;
  return topology::Cluster(spec, single, 1, {});
}

}  // namespace tsp::sim
