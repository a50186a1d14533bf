// Plans: how a model is split over chips (dp x tp x pp, microbatches), the stages and their placement.
#pragma once

#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "compile/schedule/cluster_schedule.h"
#include "partition/cost_model.h"
#include "support/expected.h"
#include "support/progress.h"
#include "topology/cluster.h"

namespace YAML { class Node; }
namespace tsp::topology { class YamlReader; }

namespace tsp::partition {

/// The `parallelism:` section.
struct ParallelismConfig {
  std::string plan = "auto";  ///< auto (search), fixed ({dp, tp, pp, ...} in the config) or file
  int pp = 0;                 ///< 0: one stage per chip (at most one per layer)
  int dp = 1, tp = 1, microbatches = 1, interleave = 1;  ///< a fixed plan's other factors
  TensorSplit split = TensorSplit::kNone;                ///< a fixed plan's tensor split (tp > 1)
  std::string planFile;       ///< plan: FILE (relative to the config file's directory)
  SourceLocation planWhere;   ///< where `plan` sits in the config, for errors about the plan
  std::string objective = "throughput";
  std::int64_t searchBudget = 20000;  ///< candidates the search may evaluate
  int maxTp = 64;                     ///< largest tensor-parallel group the search tries
};

/// Reads the `parallelism:` section.
Expected<ParallelismConfig> loadParallelism(const topology::YamlReader& reader, const YAML::Node& node);

/// A parallel plan: dp x tp x pp (x microbatches, x interleave), its stages and placement.
struct Plan {
  int dp = 1, tp = 1, pp = 1, microbatches = 1, interleave = 1;
  TensorSplit split = TensorSplit::kNone;  ///< how a TP group splits each layer
  std::vector<int> stageFirstLayer;  ///< first layer of each stage; stage s ends before stage s+1's
  std::vector<int> stageChip;        ///< chip of each stage (replica 0, TP rank 0)
  /// What each stage's chip is busy with in one iteration as the cost model prices the plan (its
  /// chunks' compute, tensor-parallel collectives and sends over the microbatches; evaluatePlan);
  /// informational in a plan file.
  std::vector<Cycle> stageCycles;
  std::vector<int> layerChunk;       ///< chunk of each layer (chip = chunk % pp) for DAG or interleaved plans; else empty
  std::vector<int> placement;        ///< chip of every rank (d pp + s) tp + t; empty for a pure pipeline

  /// Where a plan read from a file gives its entries (empty for a planned one): errors point there.
  struct Source {
    SourceLocation file;
    std::vector<SourceLocation> stageFirstLayer, stageChip, layerChunk, placement;
  };
  Source source;

  /// True when dp = tp = 1, one chunk per stage and one microbatch: what this build can execute.
  bool purePipeline() const { return dp == 1 && tp == 1 && interleave == 1 && microbatches == 1; }
  /// The chunk of each of `layers` layers: layerChunk, or the stage whose first layer precedes it.
  std::vector<int> layerChunks(int layers) const;
  /// The search's candidate this plan realises.
  Candidate candidate() const { return {split, dp, tp, pp, microbatches, interleave}; }

  /// The plan as YAML (the plan-file layout: dp, tp, pp, microbatches, interleave, stages).
  std::string toYaml() const;
  /// One-line canonical form, e.g. "dp1-tp1-pp4-m1-v1" (see Candidate::canonical).
  std::string canonical() const;
};

/// Reads a plan file (the layout Plan::toYaml writes); errors name file:line:col.
Expected<Plan> loadPlanFile(const std::string& path);

/// Checks a plan against a model of `layers` layers and a cluster: stage count, layer order, chips.
Status checkPlan(const Plan& plan, int layers, const topology::Cluster& cluster, const std::string& file);

/// Refuses a model whose graph input alone holds more bytes than the SRAM of every chip of the
/// cluster together (a batch or a declared dimension far too large): no plan could hold it, and
/// planning or compiling it would take as long as its size.
Status checkInputsFitCluster(const ir::Graph& graph, const topology::Cluster& cluster);

/// Splits a chain of layer costs into `stages` contiguous groups minimising the largest group:
/// the seed's DP[i][p] = min over j of max(DP[j][p-1], sum(cost[j..i))). Returns first layers.
std::vector<int> partitionChain(const std::vector<Cycle>& layerCycles, int stages);

/// Chips for a pipeline of `stages`, consecutive stages on directly linked chips (a simple path
/// through the topology starting at chip 0, preferring lowest ids); an error when none is found.
Expected<std::vector<int>> placePipeline(const topology::Cluster& cluster, int stages);

/// A pipeline plan over the cluster: layer costs from the compiler, DP stage partition, placement.
/// progress is told after each layer the compiler estimates.
Expected<Plan> planPipeline(const ir::Graph& graph, const topology::Cluster& cluster, const ParallelismConfig& config,
                            const support::ProgressFn& progress = {});

/// The stages of a plan as op lists for the cluster scheduler.
std::vector<schedule::PipelineStage> stagesOf(const ir::Graph& graph, const Plan& plan);

}  // namespace tsp::partition
