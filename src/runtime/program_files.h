// Programs on disk: --emit-programs writes them (with compile reports and a manifest), --programs reads them.
#pragma once

#include <string>
#include <vector>

#include "compile/isa/program.h"
#include "compile/schedule/shard_compiler.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::runtime {

/// Writes each distinct program (JSON, binary .tspp, readable .txt), a compile report per chip, and a manifest.
Status emitPrograms(const std::string& dir, const std::vector<isa::Program>& programs,
                    const std::vector<schedule::CompileReport>& reports, const topology::ChipSpec& spec);

/// Reads the programs written by --emit-programs: the manifest names one program file per chip.
Expected<std::vector<isa::Program>> loadPrograms(const std::string& dir, const topology::Cluster& cluster);

}  // namespace tsp::runtime
