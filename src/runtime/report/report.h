// What tsp-sim prints on stdout: descriptions, the search table, and the run summary, as text or --json.
#pragma once

#include <cstdint>
#include <string>

#include "compile/frontend/builtin_models.h"
#include "compile/ir/graph.h"
#include "compile/schedule/collectives.h"
#include "partition/placement.h"
#include "partition/plan.h"
#include "runtime/attribution.h"
#include "runtime/run_state.h"
#include "topology/cluster.h"

namespace tsp::runtime::report {

/// nccl-tests figures of a collective run: time, algbw = bytes / time, busbw = algbw x the op's factor.
struct CollectiveFigures {
  std::string op, algorithm;
  int chips = 0;
  std::int64_t bytes = 0;
  double timeUs = 0, algbwGbps = 0, busbwGbps = 0;
  Cycle predictedCycles = 0;
};
CollectiveFigures collectiveFigures(const schedule::CollectiveSchedule& c, const ir::Graph& graph, double seconds);

/// Busy cycles a kind of unit can give per cycle: a MEM slice has a read and a write port, as in
/// the simulator's utilisation timeline; every other unit one.
int issueSlots(const topology::ChipSpec& spec, topology::UnitKind kind);

/// The work tables of a run (tsp-sim's summary): one row per layer, then the `topOps` ops with the
/// most busy unit-cycles. Utilisation is busy cycles over the layer's spans x the kind's issue slots.
void printAttributionText(const Attribution& attribution, const topology::ChipSpec& spec, int topOps = 10);

/// A work row's busy cycles of unit kind k over its active chip-cycles x the kind's issue slots.
double workUtilisation(const WorkRow& row, const topology::ChipSpec& spec, int k);
/// A work row's busy unit-cycles over all layers' busy unit-cycles.
double workShare(const WorkRow& row, const Attribution& attribution);

/// Copies of the run's plan the cluster holds, as the search counts throughput (at least 1).
int planCopies(const RunState& state);

/// "ring of 4 chips": the topology's kind and size.
std::string topologyName(const topology::Cluster& cluster);

/// --describe topology.
void printTopologyText(const topology::Cluster& cluster);
void printTopologyJson(const topology::Cluster& cluster);

/// --describe model; training: the training step's graph when the config has a `training:` section.
void printModelText(const frontend::ModelSpec& spec, const ir::Graph& graph, const ir::Graph* training);
void printModelJson(const frontend::ModelSpec& spec, const ir::Graph& graph, const ir::Graph* training);

/// --describe plan: the plan as YAML and its placement report; a collective's steps instead of a plan.
void printPlanText(const partition::Plan& plan, const partition::PlacementReport& placement);
void printPlanJson(const partition::Plan& plan, const partition::PlacementReport& placement);
void printCollectivePlanText(const schedule::CollectiveSchedule& collective);

/// --search-only: the ranked plans, the placement report and where the best plan was written.
void printSearchText(const PlanChoice& choice, const std::string& yamlPath);
void printSearchJson(const PlanChoice& choice, const std::string& yamlPath);

/// The summary of a simulated run (rank 0, after the trace is written).
void printSummaryText(const RunState& state);
void printSummaryJson(const RunState& state);

/// The placement line(s) shared by the plan description, the search table and the summary.
void printPlacementText(const partition::PlacementReport& p);

}  // namespace tsp::runtime::report
