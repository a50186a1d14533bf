// The whole config file: parsed once, each section handed to its layer, then immutable.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compile/frontend/model_config.h"
#include "partition/plan.h"
#include "sim/chip.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::runtime {

/// The `simulation:` section.
struct SimulationConfig {
  std::string mode = "timing";
  int iterations = 1;
  std::int64_t seed = 0;
  std::string rankMapping = "block";  ///< block | metis
  sim::FaultOptions faults;            ///< `faults:`, off by default; seeded from `seed`
};

/// The `compile:` section.
struct CompileConfig {
  std::string effort = "default";  ///< fast | default | max (schedule::Effort; `--effort` overrides)
};

/// The `output:` section (left out of the stored config: it does not change results).
struct OutputConfig {
  std::string trace = "out/trace.h5";
  std::string level = "summary";
  std::vector<int> instructionChips;  ///< empty: all
  std::int64_t eventBufferRows = 65536;  ///< event rows a rank buffers before the ranks flush together
};

/// A loaded, validated config.
struct RunConfig {
  std::string file;
  std::string resolvedYaml;  ///< the config as read, without `output` and `simulation.rank_mapping`
  std::optional<topology::Cluster> cluster;
  frontend::ModelSpec model;
  partition::ParallelismConfig parallelism;
  partition::TrainingConfig training;  ///< the `training:` section (enabled: the search costs a training step)
  SimulationConfig simulation;
  CompileConfig compile;
  OutputConfig output;
};

/// Reads and validates path; every mistake is a diagnostic with file:line:col.
Expected<RunConfig> loadRunConfig(const std::string& path);

}  // namespace tsp::runtime
