// The tsp-sim run: config -> model -> plan -> programs -> simulation -> trace -> summary.
#pragma once

#include <csignal>
#include <optional>
#include <string>

#include <mpi.h>

#include "support/expected.h"

namespace tsp::runtime {

/// Command-line choices of one run (`tsp-sim --help`, docs/getting-started.md).
struct RunOptions {
  std::string configPath;
  std::optional<std::string> model;  ///< --model override
  std::optional<std::string> out;    ///< --out override
  std::optional<std::string> describe;
  std::optional<std::int64_t> seed;
  std::optional<std::string> effort;  ///< --effort override of compile.effort
  std::optional<std::string> traceLevel;  ///< --trace-level override of output.level
  bool json = false;
  bool quiet = false;
  std::optional<std::string> emitPrograms;
  bool compileOnly = false;
  std::optional<std::string> programs;  ///< --programs DIR: simulate programs emitted earlier
  std::optional<std::string> passes;       ///< --passes: comma-separated pass pipeline
  std::optional<std::string> dumpIrAfter;  ///< --dump-ir-after: "import" or a pass of the pipeline
  std::optional<std::string> overrides;    ///< --override k=v[,k=v...]: symbolic dimension values
  std::optional<std::string> planFile;     ///< --plan FILE (or "auto"): a plan instead of the config's
  bool searchOnly = false;                 ///< --search-only: rank plans, write the best, simulate nothing
  bool functional = false;                 ///< --functional: compute values, compare with the reference interpreter
  std::optional<std::string> inputsDir;    ///< --inputs DIR: input_N.pb values of the graph inputs (functional)
  std::optional<std::string> expectDir;    ///< --expect DIR: output_N.pb values the outputs must match (functional)
};

/// Result of a run: the exit code and whether this rank should print the diagnostic.
struct RunResult {
  ExitCode code = ExitCode::kSuccess;
  std::optional<Diagnostic> error;
  bool reportHere = false;
};

/// Runs tsp-sim on every rank of comm. Output (tables, JSON) is printed by rank 0.
RunResult runTspSim(const RunOptions& options, MPI_Comm comm, const volatile std::sig_atomic_t* interrupt);

/// The version string printed by --version and stored in traces.
const char* toolVersion();

}  // namespace tsp::runtime
