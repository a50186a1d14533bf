// The tsp-sim command: command line, MPI lifetime, signals, and the one place errors become exit codes.
#include <csignal>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>

#include "runtime/driver.h"
#include "support/allocator.h"

namespace {

volatile std::sig_atomic_t gInterrupted = 0;

extern "C" void onSignal(int) { gInterrupted = 1; }

void catchStopSignals() {
  std::signal(SIGTERM, onSignal);
  std::signal(SIGUSR1, onSignal);
  std::signal(SIGINT, onSignal);
}

}  // namespace

int main(int argc, char** argv) {
  // Before MPI_Init, which can take seconds under a batch launcher: a time-limit signal that arrives
  // then must not end the process by default; again after it, in case the MPI library set its own.
  catchStopSignals();
  tsp::support::keepFreedMemory();
  MPI_Init(&argc, &argv);
  catchStopSignals();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  tsp::runtime::RunOptions options;
  CLI::App app{"tsp-sim: partition a model over a cluster of Tensor Streaming Processors and simulate it cycle by cycle",
               "tsp-sim"};
  app.add_option("--config", options.configPath, "cluster and model config (YAML)")->required();
  app.add_option("--model", options.model, "FILE.onnx or builtin:NAME[,key=value...]; overrides the config's model");
  app.add_option("--out", options.out, "trace path (HDF5)");
  app.add_option("--describe", options.describe, "print a description and exit")
      ->check(CLI::IsMember({"topology", "model", "plan", "shards"}));
  app.add_option("--trace-level", options.traceLevel, "summary, links (adds C2C events) or instructions")
      ->check(CLI::IsMember({"summary", "links", "instructions"}));
  app.add_option("--plan", options.planFile, "auto (search) or a plan file (YAML, as --search-only writes)");
  app.add_flag("--search-only", options.searchOnly,
               "rank plans, print the table, write the best plan as YAML and the ranking to the trace; simulate nothing");
  app.add_option("--seed", options.seed, "seed of annealing and search (default 0)")->check(CLI::NonNegativeNumber);
  app.add_option("--effort", options.effort,
                 "compile effort: fast (list scheduling only), default, or max (full plane-order search and "
                 "annealing); overrides compile.effort")
      ->check(CLI::IsMember({"fast", "default", "max"}));
  app.add_flag("--json", options.json, "machine-readable output on stdout");
  app.add_flag("--quiet", options.quiet, "no progress line");
  app.add_option("--emit-programs", options.emitPrograms, "also write each chip's program into DIR");
  app.add_option("--programs", options.programs, "simulate the programs in DIR (written by --emit-programs) instead of compiling");
  app.add_flag("--compile-only", options.compileOnly, "stop after compiling (with --emit-programs)");
  app.add_option("--override", options.overrides, "bind symbolic ONNX dimensions: k=v[,k=v...] (as model.overrides)");
  app.add_option("--passes", options.passes, "graph pass pipeline, e.g. fold,cse,dce,layout,fuse (default fold,cse,dce)");
  app.add_option("--dump-ir-after", options.dumpIrAfter, "print the IR after this pass (or 'import') to stdout");
  app.add_flag("--functional", options.functional, "compute values and compare the outputs with the reference interpreter");
  app.add_option("--inputs", options.inputsDir, "functional: feed the graph inputs from DIR/input_N.pb (ONNX TensorProto)");
  app.add_option("--expect", options.expectDir, "functional: compare the outputs with DIR/output_N.pb");
  app.set_version_flag("--version", tsp::runtime::toolVersion());
  app.footer(
      "Exit codes: 0 success; 1 usage or config error; 2 model error; 3 does not fit; 4 hazard;\n"
      "5 internal or MPI failure; 6 functional mismatch; 7 interrupted (partial trace .partial.h5).");

  int code = 0;
  try {
    app.parse(argc, argv);
    if (options.compileOnly && !options.emitPrograms) throw CLI::ValidationError("--compile-only", "needs --emit-programs DIR");
  } catch (const CLI::CallForHelp&) {
    if (rank == 0) fmt::print("{}", app.help());
    MPI_Finalize();
    return 0;
  } catch (const CLI::CallForVersion&) {
    if (rank == 0) fmt::print("{}\n", tsp::runtime::toolVersion());
    MPI_Finalize();
    return 0;
  } catch (const CLI::ParseError& e) {
    if (rank == 0) fmt::print(stderr, "tsp-sim: error: {}\n", e.what());
    MPI_Finalize();
    return 1;
  }

  const auto result = tsp::runtime::runTspSim(options, MPI_COMM_WORLD, &gInterrupted);
  code = static_cast<int>(result.code);
  if (result.error && result.reportHere) fmt::print(stderr, "tsp-sim: error: {}\n", result.error->format());
  std::fflush(stdout);
  std::fflush(stderr);
  if (result.code == tsp::ExitCode::kInternal) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  return code;
}
