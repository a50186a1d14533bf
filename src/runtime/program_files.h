// Programs on disk: --emit-programs writes them (with compile reports and a manifest), --programs reads them.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compile/frontend/model_config.h"
#include "compile/isa/program.h"
#include "compile/schedule/shard_compiler.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::runtime {

/// What programs are compiled for: the model (with its overrides), its inputs' names and shapes, the
/// chip count. The manifest records it, and loadPrograms refuses programs compiled for another run.
nlohmann::json programsRunRecord(const frontend::ModelSpec& spec, const ir::Graph& graph, int chips);

/// Writes each distinct program (JSON, binary .tspp, readable .txt), a compile report per chip, and a
/// manifest holding `run` (programsRunRecord) and `compile` (how they were compiled: effort, segments).
Status emitPrograms(const std::string& dir, const std::vector<isa::Program>& programs,
                    const std::vector<schedule::CompileReport>& reports, const topology::ChipSpec& spec,
                    const nlohmann::json& run, const nlohmann::json& compile = nlohmann::json::object());

/// Reads the programs written by --emit-programs: the manifest names one program file per chip, each
/// chip once, and its run record must equal `run`; every mistake is a located error (exit 1).
Expected<std::vector<isa::Program>> loadPrograms(const std::string& dir, const topology::Cluster& cluster,
                                                 const nlohmann::json& run);

}  // namespace tsp::runtime
