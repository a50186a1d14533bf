// Plans: how a model is split over chips (dp x tp x pp, microbatches), the stages and their placement.
#pragma once

#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "compile/schedule/cluster_schedule.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace YAML { class Node; }
namespace tsp::topology { class YamlReader; }

namespace tsp::partition {

/// The `parallelism:` section.
struct ParallelismConfig {
  std::string plan = "auto";  ///< auto, or a fixed pipeline given as {pp: N}
  int pp = 0;                 ///< 0: one stage per chip (at most one per layer)
  std::string objective = "throughput";
};

/// Reads the `parallelism:` section.
Expected<ParallelismConfig> loadParallelism(const topology::YamlReader& reader, const YAML::Node& node);

/// A parallel plan. This version builds pipeline plans (dp = tp = 1).
struct Plan {
  int dp = 1, tp = 1, pp = 1, microbatches = 1, interleave = 1;
  std::vector<int> stageFirstLayer;  ///< first layer of each stage; stage s ends before stage s+1's
  std::vector<int> stageChip;        ///< chip of each stage
  std::vector<Cycle> stageCycles;    ///< estimated cycles of each stage

  /// The plan as YAML (the plan-file layout: dp, tp, pp, microbatches, interleave, stages).
  std::string toYaml() const;
  /// One-line canonical form, e.g. "dp1-tp1-pp4-m1".
  std::string canonical() const;
};

/// Splits a chain of layer costs into `stages` contiguous groups minimising the largest group:
/// the seed's DP[i][p] = min over j of max(DP[j][p-1], sum(cost[j..i))). Returns first layers.
std::vector<int> partitionChain(const std::vector<Cycle>& layerCycles, int stages);

/// Chips for a pipeline of `stages`, consecutive stages on directly linked chips (a simple path
/// through the topology starting at chip 0, preferring lowest ids); an error when none is found.
Expected<std::vector<int>> placePipeline(const topology::Cluster& cluster, int stages);

/// A pipeline plan over the cluster: layer costs from the compiler, DP stage partition, placement.
Expected<Plan> planPipeline(const ir::Graph& graph, const topology::Cluster& cluster, const ParallelismConfig& config);

/// The stages of a plan as op lists for the cluster scheduler.
std::vector<schedule::PipelineStage> stagesOf(const ir::Graph& graph, const Plan& plan);

/// k-way partition of a weighted graph with METIS (CSR adjacency); returns the part of each vertex.
/// Deterministic for a given input (METIS is seeded).
Expected<std::vector<int>> partitionGraphKway(const std::vector<int>& xadj, const std::vector<int>& adjncy,
                                              const std::vector<int>& vertexWeights,
                                              const std::vector<int>& edgeWeights, int parts);

}  // namespace tsp::partition
