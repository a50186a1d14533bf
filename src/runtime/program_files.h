// Programs on disk: --emit-programs writes them (with compile reports and a manifest), --programs reads them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compile/frontend/model_config.h"
#include "compile/isa/program.h"
#include "compile/schedule/shard_compiler.h"
#include "partition/placement.h"
#include "partition/plan.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::runtime {

/// What programs are compiled for: the model (with its overrides), its inputs' names and shapes, the
/// chip count. The manifest records it, and loadPrograms refuses programs compiled for another run.
nlohmann::json programsRunRecord(const frontend::ModelSpec& spec, const ir::Graph& graph, int chips);

/// The placement report as JSON (--json's `placement`, the manifest's `plan.placement`): how ranks
/// were placed, hops of TP rings and stage-to-stage routes, link load.
nlohmann::json placementJson(const partition::PlacementReport& p);
/// The placement report from placementJson's object; false when a field is missing or of another type.
bool placementFromJson(const nlohmann::json& j, partition::PlacementReport& p);

/// The plan programs were compiled for (plan.yaml beside the manifest, in the plan-file layout) and
/// the cost model's figures for it (its prediction and placement report), when the run had them.
struct ProgramsPlan {
  partition::Plan plan;
  std::string file;  ///< where the plan was read from (loadPrograms)
  std::optional<double> predictedIterationCycles, predictedPipelineCycles;
  partition::PlacementReport placement;  ///< method empty: none
};

/// Writes each distinct program (JSON, binary .tspp, readable .txt), a compile report per chip, and a
/// manifest holding `run` (programsRunRecord), `compile` (how they were compiled: effort, segments)
/// and, when `plan` is given, `plan` (plan.yaml and the cost model's figures).
Status emitPrograms(const std::string& dir, const std::vector<isa::Program>& programs,
                    const std::vector<schedule::CompileReport>& reports, const topology::ChipSpec& spec,
                    const nlohmann::json& run, const nlohmann::json& compile = nlohmann::json::object(),
                    const ProgramsPlan* plan = nullptr);

/// What --programs reads: a program per chip and, when asked for, the plan they were compiled for.
struct LoadedPrograms {
  std::vector<isa::Program> programs;
  std::optional<ProgramsPlan> plan;
};

/// Reads the programs written by --emit-programs: the manifest names one program file per chip, each
/// chip once, and its run record must equal `run`; with `needPlan`, it names the plan file too. Every
/// mistake is a located error (exit 1).
Expected<LoadedPrograms> loadPrograms(const std::string& dir, const topology::Cluster& cluster,
                                      const nlohmann::json& run, bool needPlan);

}  // namespace tsp::runtime
