// The tsp-sim run as a list of named stages over one RunState; every stage succeeds on all ranks or fails on all.
#include "runtime/driver.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <sys/resource.h>

#include <fmt/format.h>

#include "compile/frontend/builtin_models.h"
#include "compile/frontend/onnx_importer.h"
#include "compile/ir/autodiff.h"
#include "compile/passes/passes.h"
#include "compile/schedule/cluster_schedule.h"
#include "compile/schedule/collectives.h"
#include "partition/plan.h"
#include "partition/plan_shards.h"
#include "partition/shard_report.h"
#include "partition/training_cost.h"
#include "partition/training_step.h"
#include "runtime/attribution.h"
#include "runtime/cancellation.h"
#include "runtime/plan_choice.h"
#include "runtime/progress.h"
#include "runtime/program_files.h"
#include "runtime/rank_mapping.h"
#include "runtime/report/report.h"
#include "runtime/run_state.h"
#include "runtime/shared_compile.h"
#include "support/cancel.h"

namespace tsp::runtime {

const char* toolVersion() { return "tsp-sim 0.1.0"; }

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// What a stage tells the loop: nothing (go on with the next stage), or the run's result (stop here).
using StageEnd = std::optional<RunResult>;

StageEnd failure(const Diagnostic& d, bool reportHere) { return RunResult{d.code, d, reportHere}; }

// A stage that ends the run successfully (an early exit such as --describe).
StageEnd finished() { return RunResult{}; }

std::string withSuffix(const std::string& trace, const std::string& replacement) {
  const std::string suffix = ".h5";
  if (trace.size() > suffix.size() && trace.compare(trace.size() - suffix.size(), suffix.size(), suffix) == 0)
    return trace.substr(0, trace.size() - suffix.size()) + replacement;
  return trace + replacement;
}

std::string partialPath(const std::string& trace) { return withSuffix(trace, ".partial.h5"); }
std::string planYamlPath(const std::string& trace) { return withSuffix(trace, ".plan.yaml"); }

std::string isoNow() {
  char buffer[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

long long peakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<long long>(usage.ru_maxrss) * 1024;
}

// All ranks learn whether a step that each rank ran locally succeeded everywhere; the lowest
// failing rank reports, so that no rank starts collective I/O that others skip.
Status agreeAll(const Status& local, MPI_Comm comm, bool& reportHere) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int failing = local.ok() ? INT_MAX : rank;
  MPI_Allreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_MIN, comm);
  if (failing == INT_MAX) return {};
  reportHere = failing == rank;
  // Every rank exits with the failing rank's code (only exit 5 aborts the job).
  int code = local.ok() ? 0 : static_cast<int>(local.error().code);
  MPI_Bcast(&code, 1, MPI_INT, failing, comm);
  return local.ok() ? makeError(static_cast<ExitCode>(code), "failed on another rank") : local;
}

// A step every rank runs locally (agreeAll); on failure the run stops with the reporting rank's error.
// `discard` is the trace writer to abandon, if one is open.
StageEnd agreedOrStop(const Status& local, const RunState& s, TraceWriter* discard = nullptr) {
  bool reportHere = s.root;
  if (auto agreed = agreeAll(local, s.comm, reportHere); !agreed) {
    if (discard) discard->discard();
    return failure(agreed.error(), reportHere);
  }
  return std::nullopt;
}

// A trace write that failed (a full disk): other ranks may wait inside HDF5's collectives, so no
// agreement follows. The file goes, the rank that saw the failure reports, and exit 5 aborts the job.
StageEnd writeFailed(const Status& w, TraceWriter& trace) {
  trace.abandon();
  return failure(w.error(), true);
}

// A file rank 0 alone writes (the plan YAML, the programs): every rank learns whether it was written.
StageEnd writeOnRoot(const RunState& s, const std::function<Status()>& write) {
  return agreedOrStop(s.root ? write() : Status{}, s);
}

// The /meta attributes of every trace this run writes; the simulation's trace adds its outcome.
TraceMeta traceMeta(const RunState& s) {
  const topology::Cluster& cluster = *s.config.cluster;
  TraceMeta meta;
  meta.toolVersion = toolVersion();
  meta.configYaml = s.config.resolvedYaml;
  meta.planYaml = s.choice.plan.toYaml();
  meta.traceLevel = s.config.output.level;
  meta.rankMapping = s.config.simulation.rankMapping;
  meta.clockMhz = cluster.chip().clockMhz;
  meta.chipCount = cluster.chipCount();
  meta.linkCount = static_cast<std::int64_t>(cluster.links().size());
  meta.seed = s.config.simulation.seed;
  meta.ranks = s.ranks;
  return meta;
}

// The trace's wall time and creation time: every rank writes the same attribute values, rank 0's clock decides.
void stampMeta(RunState& s, TraceMeta& meta) {
  double wall = secondsSince(s.wallStart);
  MPI_Bcast(&wall, 1, MPI_DOUBLE, 0, s.comm);
  s.wallSeconds = meta.wallSeconds = wall;
  char created[32] = {};
  if (s.root) std::snprintf(created, sizeof created, "%s", isoNow().c_str());
  MPI_Bcast(created, sizeof created, MPI_CHAR, 0, s.comm);
  meta.created = created;
}

// /summary/units: the chip's instruction queues (every chip of a cluster has the same).
std::vector<UnitRow> unitRowsOf(const topology::ChipSpec& spec) {
  std::vector<UnitRow> rows;
  const auto units = spec.units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    UnitRow row{u, {}, units[u].slice};
    std::snprintf(row.kind, sizeof row.kind, "%s", topology::unitKindName(units[u].kind));
    rows.push_back(row);
  }
  return rows;
}

// /compile/reports: the compiler's report on each chip's program.
std::vector<CompileReportRow> compileReportRows(const std::vector<schedule::CompileReport>& reports) {
  std::vector<CompileReportRow> rows;
  for (size_t chip = 0; chip < reports.size(); ++chip) {
    const auto& r = reports[chip];
    rows.push_back({static_cast<std::int32_t>(chip), r.cycles, r.listCycles, r.lowerBound, r.criticalPath,
                    r.busiestResource, r.sramPeakBytes, r.sramFootprintBytes, r.sramCapacityBytes, r.spills,
                    r.memAccesses, r.delayedMemAccesses, r.tasks});
  }
  return rows;
}

// The trace's temporary file, its directory made first (by rank 0, before any rank opens it).
Expected<TraceWriter> createTrace(const RunState& s) {
  if (s.root) {
    std::error_code ec;
    const auto parent = std::filesystem::path(s.config.output.trace).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  }
  MPI_Barrier(s.comm);
  return TraceWriter::create(s.config.output.trace, s.comm);
}

// The plan's diagnostic location: the plan file it came from, or the config's parallelism.plan.
SourceLocation planWhere(const RunState& s) {
  return !s.choice.planFile.empty() ? SourceLocation{s.choice.planFile, 0, 0, ""} : s.config.parallelism.planWhere;
}

// "k=v[,k=v...]" of --override into integer bindings.
Expected<std::map<std::string, std::int64_t>> parseOverrides(const std::string& text) {
  std::map<std::string, std::int64_t> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = item.find('=');
    std::int64_t value = 0;
    const char* first = eq == std::string::npos ? nullptr : item.data() + eq + 1;
    auto [end, ec] = first ? std::from_chars(first, item.data() + item.size(), value)
                           : std::from_chars_result{nullptr, std::errc::invalid_argument};
    if (eq == std::string::npos || eq == 0 || ec != std::errc() || end != item.data() + item.size() || value < 1)
      return makeError(ExitCode::kConfig, fmt::format("--override: '{}' is not name=positive-integer", item));
    out[item.substr(0, eq)] = value;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// The model's graph: imported or generated (phase "import"), then run through the pass pipeline
// (phase "passes").
Expected<ir::Graph> importAndRunPasses(const frontend::ModelSpec& spec, const RunOptions& options, bool root,
                                       bool loadWeights, PhaseTimes& phases) {
  const auto start = Clock::now();
  auto pipeline = passes::parsePipeline(options.passes.value_or(passes::defaultPipeline()));
  if (!pipeline) return pipeline.error();
  if (options.dumpIrAfter && *options.dumpIrAfter != "import" &&
      std::none_of(pipeline->begin(), pipeline->end(), [&](const passes::Pass* p) { return p->name == *options.dumpIrAfter; }))
    return makeError(ExitCode::kConfig, fmt::format("--dump-ir-after: '{}' is not 'import' or a pass of the pipeline '{}'",
                                                    *options.dumpIrAfter, options.passes.value_or(passes::defaultPipeline())));
  Expected<ir::Graph> graph = [&]() -> Expected<ir::Graph> {
    if (spec.onnxPath.empty()) return frontend::buildBuiltinModel(spec);
    frontend::ImportOptions import;
    import.overrides = spec.overrides;
    import.precision = spec.precision;
    import.loadWeights = loadWeights;  // timing runs need shapes only; functional runs the initializers
    return frontend::importOnnx(spec.onnxPath, import);
  }();
  if (!graph) return graph.error();
  auto dump = [&](const std::string& pass, const ir::Graph& g) {
    if (root && options.dumpIrAfter && *options.dumpIrAfter == pass) fmt::print("// IR after {}\n{}", pass, g.print());
  };
  dump("import", *graph);
  phases.add(Phase::kImport, secondsSince(start));
  const auto passesStart = Clock::now();
  auto result = passes::runPipeline(std::move(*graph), *pipeline, dump);
  phases.add(Phase::kPasses, secondsSince(passesStart));
  return result;
}

// A phase's progress line, printed by rank 0 unless --quiet or --json.
PhaseProgress phaseProgress(const RunState& s, const char* phase) {
  return PhaseProgress(phase, s.root && !s.options.quiet && !s.options.json, stderrIsTerminal());
}

// A sharded plan: its per-device graphs, scheduled on the cluster as one problem.
// Its segments' compiles are shared over the ranks of comm.
Expected<schedule::ClusterSchedule> scheduleShardedPlan(const ir::Graph& graph, const partition::Plan& plan,
                                                        const topology::Cluster& cluster,
                                                        const schedule::Options& options, MPI_Comm comm) {
  auto workload = partition::shardPlan(graph, plan);
  if (!workload) return workload.error();
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  return schedule::scheduleCluster(*workload, cluster, options, sharedCompiler(comm), ranks);
}

// A training step of the plan through the training cluster scheduler; its pipeline figures go to `figures`.
Expected<schedule::ClusterSchedule> scheduleTrainingPlan(const ir::Graph& graph, const partition::Plan& plan,
                                                         const partition::TrainingConfig& training,
                                                         const topology::Cluster& cluster,
                                                         const schedule::Options& options,
                                                         std::optional<TrainingFigures>& figures, MPI_Comm comm) {
  auto step = partition::buildTrainingStep(graph, plan, training);
  if (!step) return step.error();
  auto scheduled = schedule::scheduleTrainingStep((*step)->workload, cluster, options, sharedCompiler(comm));
  if (!scheduled) return scheduled.error();
  figures = TrainingFigures{plan.pp, plan.microbatches, plan.interleave, scheduled->buckets,
                            scheduled->pipelineCycles, scheduled->allReduceCycles, scheduled->idealCycles(),
                            scheduled->bubbleFraction(), scheduled->cluster.compiledShards,
                            scheduled->cluster.sharedShards, scheduled->forwardCycles, scheduled->backwardCycles,
                            scheduled->allReduceCycles == 0 && training.optimizer == ir::Optimizer::kNone};
  return std::move(scheduled->cluster);
}

// ---- The stages, in the order they run. ----

// The config, with the command line's overrides and the mode checks. Stages up to the simulation
// are deterministic and run on every rank, so they fail on all alike.
StageEnd configure(RunState& s) {
  const RunOptions& options = s.options;
  auto loaded = loadRunConfig(options.configPath);
  if (!loaded) return failure(loaded.error(), s.root);
  s.config = std::move(*loaded);
  RunConfig& config = s.config;
  if (options.model) {
    auto spec = frontend::parseModelArgument(*options.model, config.model);
    if (!spec) return failure(spec.error(), s.root);
    config.model = *spec;
  }
  if (options.out) config.output.trace = *options.out;
  if (options.seed) config.simulation.seed = *options.seed;
  if (options.effort) config.compile.effort = *options.effort;
  if (options.functional) config.simulation.mode = "functional";
  s.functional = config.simulation.mode == "functional";
  if ((options.inputsDir || options.expectDir) && !s.functional)
    return failure(makeError(ExitCode::kConfig, "--inputs and --expect need functional mode (--functional or "
                                                "simulation.mode: functional)"),
                   s.root);
  if (options.functional && config.simulation.faults.enabled())
    return failure(makeError(ExitCode::kConfig, "--functional: functional mode runs without injected faults "
                                                "(simulation.faults)"),
                   s.root);
  if (options.traceLevel) config.output.level = *options.traceLevel;
  // Before any work: the trace can be written, and the chips' simulation state fits in memory.
  if (!options.describe && !options.compileOnly && !options.dumpIrAfter) {
    bool reportHere = s.root;
    if (auto t = agreeAll(s.root ? checkTraceTarget(config.output.trace) : Status{}, s.comm, reportHere); !t)
      return failure(t.error(), reportHere);
  }
  if (!options.describe && !options.compileOnly && !options.dumpIrAfter && !options.searchOnly) {
    sim::SimOptions stateOptions;
    stateOptions.functional.enabled = s.functional;
    if (auto t = checkChipStateFits(*config.cluster, stateOptions, s.comm, config.file); !t)
      return failure(t.error(), s.root);
  }
  s.configured = true;
  return std::nullopt;
}

// The model's graph: --override bindings, import or generation, the pass pipeline.
StageEnd buildModel(RunState& s) {
  if (s.options.overrides) {
    auto overrides = parseOverrides(*s.options.overrides);
    if (!overrides) return failure(overrides.error(), s.root);
    for (const auto& [k, v] : *overrides) s.config.model.overrides[k] = v;
  }
  auto graph = importAndRunPasses(s.config.model, s.options, s.root, s.functional, s.phases);
  if (!graph) return failure(graph.error(), s.root);
  s.graph = std::move(*graph);
  return std::nullopt;
}

// What every run checks before its plan: the model's inputs fit the cluster, and builtin:collective
// (one collective over the chips, compiled here without a plan) is run in a mode that can run it.
StageEnd checkModelAndCompileCollective(RunState& s) {
  const ir::Graph& graph = *s.graph;
  if (auto t = partition::checkInputsFitCluster(graph, *s.config.cluster); !t) return failure(t.error(), s.root);
  if (!schedule::isCollectiveBenchmark(graph)) return std::nullopt;
  if (s.options.searchOnly)
    return failure(makeError(ExitCode::kConfig, "--search-only: builtin:collective is one collective over every chip, "
                                                "with no plan to search"),
                   s.root);
  if (s.functional)
    return failure(makeError(ExitCode::kConfig, "functional mode: builtin:collective moves bytes that stand for no "
                                                "tensor values; functional mode runs compiled graphs"),
                   s.root);
  PhaseProgress progress = phaseProgress(s, "search");
  auto c = schedule::compileCollectiveBenchmark(
      graph, *s.config.cluster, [&](std::int64_t done, std::int64_t total) { progress.update(done, total, "steps"); });
  if (!c) return failure(c.error(), s.root);
  s.collective = std::move(*c);
  s.planChosen = true;
  return std::nullopt;
}

// The plan: a collective benchmark is compiled without one; otherwise a plan file, a fixed plan or the search.
StageEnd choosePlanStage(RunState& s) {
  if (auto stop = checkModelAndCompileCollective(s)) return stop;
  if (s.collective) return std::nullopt;
  PhaseProgress progress = phaseProgress(s, "search");
  auto choice = choosePlan(s.config, s.options, *s.graph, s.comm, *s.cancel, progress);
  if (!choice) return failure(choice.error(), s.root);
  s.choice = std::move(*choice);
  s.planChosen = true;
  return std::nullopt;
}

// The plan against the mode: what functional mode and training steps can run.
StageEnd checkPlanForMode(const RunState& s) {
  const RunConfig& config = s.config;
  const PlanChoice& choice = s.choice;
  if (config.training.enabled && s.functional)
    return failure(makeError(ExitCode::kConfig, "training: functional mode runs inference steps, training steps "
                                                "run in timing mode"),
                   s.root);
  // A training step's passes are compiled one at a time, each placing only its own tensors: the
  // whole chip (weights, gradients, optimizer state and stash at once) is checked by the cost
  // model's memory figure for a given plan (the search prunes its candidates on the same figure).
  if (config.training.enabled && choice.given && choice.given->cost.memoryPerChip > config.cluster->chip().sramBytes()) {
    Diagnostic d = configError(planWhere(s),
                               fmt::format("plan {}: the training step needs {} MiB on its fullest chip (weights, "
                                           "gradients, optimizer state and stash), more than its {} MiB of SRAM",
                                           choice.plan.canonical(), choice.given->cost.memoryPerChip >> 20,
                                           config.cluster->chip().sramBytes() >> 20));
    d.code = ExitCode::kDoesNotFit;
    return failure(d, s.root);
  }
  if (!s.collective && !choice.plan.purePipeline() && s.functional)
    return failure(configError(planWhere(s), fmt::format("plan {}: functional mode runs pure pipeline plans; sharded "
                                                         "plans (dp, tp, microbatches or interleave > 1) run in timing mode",
                                                         choice.plan.canonical())),
                   s.root);
  return std::nullopt;
}

// --emit-programs: the programs, their compile reports and the plan they were compiled for, written by rank 0.
StageEnd emitProgramsIfAsked(RunState& s) {
  if (!s.options.emitPrograms) return std::nullopt;
  ProgramsPlan plan{s.choice.plan, "", std::nullopt, std::nullopt, s.choice.placement};
  if (s.choice.runPrediction) {
    plan.predictedIterationCycles = s.choice.runPrediction->cost.iterationCycles;
    if (s.config.training.enabled) plan.predictedPipelineCycles = s.choice.runPrediction->cost.pipelineCycles;
  }
  const topology::Cluster& cluster = *s.config.cluster;
  return writeOnRoot(s, [&] {
    return emitPrograms(*s.options.emitPrograms, s.compiled, s.reports, cluster.chip(),
                        programsRunRecord(s.config.model, *s.graph, cluster.chipCount()),
                        s.compiledSegments > 0 ? s.compileRecord() : nlohmann::json::object(),
                        s.collective ? nullptr : &plan);
  });
}

// The programs from the compiler (with the fallback to the next ranked plan when a searched plan
// does not fit).
StageEnd compile(RunState& s) {
  const RunConfig& config = s.config;
  const topology::Cluster& cluster = *config.cluster;
  PlanChoice& choice = s.choice;
  if (auto stop = checkPlanForMode(s)) return stop;
  if (s.collective) {
    s.compiled = std::move(s.collective->cluster.programs);  // the report needs the plan and counts only
  } else {
    schedule::Options compileOptions = schedule::effortOptions(*schedule::parseEffort(config.compile.effort));
    compileOptions.seed = static_cast<std::uint64_t>(config.simulation.seed);
    PhaseProgress progress = phaseProgress(s, "compile");
    compileOptions.progress = [&](std::int64_t done, std::int64_t total) { progress.update(done, total, "segments"); };
    const ir::Graph& graph = *s.graph;
    auto compilePlan = [&](const partition::Plan& p) {
      if (config.training.enabled)
        return scheduleTrainingPlan(graph, p, config.training, cluster, compileOptions, s.trainingFigures, s.comm);
      return p.purePipeline() ? schedule::scheduleCluster(graph, partition::stagesOf(graph, p), cluster, compileOptions)
                              : scheduleShardedPlan(graph, p, cluster, compileOptions, s.comm);
    };
    auto schedule = compilePlan(choice.plan);
    // The search ranked the plan by a memory estimate; when the allocator cannot place it, run the
    // best ranked plan that compiles (the same on every rank: compiling is deterministic).
    // A TP width and split whose shard did not fit is not tried again at other pipeline depths,
    // microbatches or replicas: a layer's shard is the same in all of them.
    size_t next = 0;
    std::set<std::pair<int, int>> unfit;
    while (!schedule && schedule.error().code == ExitCode::kDoesNotFit && choice.search && choice.planFile.empty() &&
           static_cast<int>(choice.skipped.size()) < kMaxPlanFallbacks) {
      choice.skipped.push_back(fmt::format("{} ({})", choice.plan.canonical(), schedule.error().message));
      if (choice.plan.tp > 1) unfit.insert({choice.plan.tp, static_cast<int>(choice.plan.split)});
      auto alternative = nextRankedPlan(cluster, choice, next, [&](const partition::Candidate& c) {
        return c.tp > 1 && unfit.count({c.tp, static_cast<int>(c.split)}) > 0;
      });
      if (!alternative) break;
      choice.plan = std::move(*alternative);
      schedule = compilePlan(choice.plan);
    }
    if (!schedule && schedule.error().code == ExitCode::kConfig && schedule.error().where.file.empty())
      // A plan the build cannot execute: the error points at where the plan came from.
      return failure(configError(planWhere(s), fmt::format("plan {}: {}", choice.plan.canonical(), schedule.error().message)),
                     s.root);
    if (!schedule) return failure(schedule.error(), s.root);
    s.compiled = std::move(schedule->programs);
    s.reports = std::move(schedule->reports);
    s.compiledSegments = schedule->compiledShards;
    s.sharedSegments = schedule->sharedShards;
  }
  // Compiling stops early on a signal here or on another rank: agree before writing anything.
  if (s.cancel->agree()) return failure(support::interrupted(), s.root);
  return emitProgramsIfAsked(s);
}

// --programs DIR: the programs and the plan they were compiled for, read from the directory in place
// of the plan stage and the compile stage: nothing is profiled, searched or compiled. A plan the run
// asks for (a plan file, a fixed plan) must be the programs' plan.
StageEnd loadProgramsStage(RunState& s) {
  const RunConfig& config = s.config;
  const topology::Cluster& cluster = *config.cluster;
  const std::string& dir = *s.options.programs;
  if (auto stop = checkModelAndCompileCollective(s)) return stop;
  auto loaded = loadPrograms(dir, cluster, programsRunRecord(config.model, *s.graph, cluster.chipCount()),
                             /*needPlan=*/!s.collective);
  if (!loaded) return failure(loaded.error(), s.root);
  if (loaded->plan) {
    const ProgramsPlan& plan = *loaded->plan;
    const int layers = std::max(1, s.graph->layerCount());
    if (auto t = partition::checkPlan(plan.plan, layers, cluster, plan.file); !t) return failure(t.error(), s.root);
    if (auto t = checkProgramsPlan(config, s.options, plan.plan, dir, layers); !t) return failure(t.error(), s.root);
    s.choice.plan = plan.plan;
    s.choice.planFile = plan.file;
    s.choice.placement = plan.placement;
    s.choice.training = config.training;
    if (plan.predictedIterationCycles) {
      partition::RankedPlan prediction{plan.plan.candidate(), {}, false};
      prediction.cost.iterationCycles = *plan.predictedIterationCycles;
      prediction.cost.pipelineCycles = plan.predictedPipelineCycles.value_or(0);
      s.choice.runPrediction = prediction;
    }
    s.planChosen = true;
  }
  if (auto stop = checkPlanForMode(s)) return stop;
  s.compiled = std::move(loaded->programs);
  return emitProgramsIfAsked(s);
}

// Identical programs shared (a chip instance is a program reference and port bindings), then chips
// dealt to ranks, before anything is written, so that too many ranks fail in seconds.
StageEnd mapRanks(RunState& s) {
  // A hash reads the whole program: each rank hashes every ranks-th one, and the hashes are shared.
  std::vector<std::uint64_t> hashes(s.compiled.size(), 0);
  for (size_t chip = static_cast<size_t>(s.rank); chip < hashes.size(); chip += static_cast<size_t>(s.ranks))
    hashes[chip] = s.compiled[chip].contentHash();
  MPI_Allreduce(MPI_IN_PLACE, hashes.data(), static_cast<int>(hashes.size()), MPI_UINT64_T, MPI_BOR, s.comm);
  std::map<std::uint64_t, std::shared_ptr<const isa::Program>> unique;
  for (size_t chip = 0; chip < hashes.size(); ++chip) {
    isa::Program& p = s.compiled[chip];
    s.predictedMakespan = std::max(s.predictedMakespan, p.predictedCycles);
    auto& shared = unique[hashes[chip]];
    if (!shared) shared = std::make_shared<const isa::Program>(std::move(p));
    s.programs.push_back(shared);
  }
  s.compiled.clear();
  std::vector<std::int64_t> chipWeights;
  for (const auto& p : s.programs) chipWeights.push_back(p->instructionCount());
  auto mapping = mapChipsToRanks(s.config.simulation.rankMapping, *s.config.cluster, chipWeights, s.ranks, s.rank);
  if (!mapping) return failure(mapping.error(), s.root);
  s.cutLinks = cutLinks(*s.config.cluster, *mapping);
  s.mapping = std::move(*mapping);
  return std::nullopt;
}

// The trace file (created first, so that a bad path fails in seconds, not hours), the event tables,
// then the window loop over the ranks, and the functional outputs' check.
StageEnd simulate(RunState& s) {
  const RunConfig& config = s.config;
  const topology::Cluster& cluster = *config.cluster;
  auto writer = createTrace(s);
  if (!writer) return failure(writer.error(), s.root);
  s.writer.emplace(std::move(*writer));
  TraceWriter& trace = *s.writer;

  // Event tables are sized before the run: every row's place in the file is known.
  s.selection.c2c = config.output.level != "summary";
  s.selection.instructions = config.output.level == "instructions";
  s.selection.instructionChips = config.output.instructionChips;
  // Each rank reads its own chips' programs for the op and layer rows.
  s.events = std::make_unique<EventBuffer>(cluster.chip(), s.programs,
                                           attribute(cluster.chip(), s.programs, s.mapping->localChips, s.comm),
                                           s.selection, config.output.eventBufferRows);
  EventBuffer& events = *s.events;
  if (auto checked = s.selection.c2c ? events.check() : Status{}; !checked) {
    trace.discard();
    return failure(checked.error(), s.root);
  }
  {
    Status created;
    if (s.selection.c2c) created = trace.createC2cEvents(events.c2cRowCount());
    if (created && s.selection.instructions)
      created = trace.createInstructionEvents(events.instructionRowCount(), opcodeNames());
    if (!created) return writeFailed(created, trace);
  }

  s.kernels = std::make_unique<sim::KernelRuntime>();
  s.simOptions.bins = 64;
  s.simOptions.binCycles = std::max<Cycle>(1, ceilDiv(std::max<Cycle>(s.predictedMakespan, 1), s.simOptions.bins));
  s.simOptions.observer = s.selection.instructions ? &events : nullptr;
  s.simOptions.faults = config.simulation.faults;
  if (s.functional) {
    auto setup = prepareFunctional(*s.graph, s.programs,
                                   {static_cast<std::uint64_t>(config.simulation.seed), s.options.inputsDir,
                                    s.options.expectDir, &cluster.chip(), s.mapping->localChips});
    if (!setup) {
      trace.discard();
      return failure(setup.error(), s.root);
    }
    s.functionalSetup = std::move(*setup);
    s.simOptions.functional = s.functionalSetup->options;
    s.functionalSetup->options.resident.reset();
    // The setup holds the weights now, and each chip drops one once the process placed it for the last time.
    releaseGraphWeights(*s.graph);
  }
  s.simulation = std::make_unique<ParallelSimulation>(s.comm, cluster, s.programs, std::move(*s.mapping), s.simOptions);
  // The chips placed their resident tensors when made: from here SRAM alone holds the weights.
  s.simOptions.functional.resident.reset();
  ParallelSimulation& simulation = *s.simulation;
  PhaseProgress progress = phaseProgress(s, "simulate");
  std::int64_t instructions = 0;  // what the chips execute in all: the simulation's done/total
  for (const auto& p : s.programs) instructions += p->instructionCount();
  WindowHooks hooks;
  if (s.selection.c2c) {
    hooks.sent = [&](const std::vector<sim::C2CBurst>& bursts) { events.recordBursts(bursts); };
    hooks.wantsFlush = [&] { return events.wantsFlush(); };
    hooks.flush = [&] { return events.flush(trace); };
  }
  hooks.progressDue = [&] { return progress.due(); };
  hooks.progress = [&](const ProgressReport& report) {
    progress.update(report.events, instructions, "instructions",
                    fmt::format("cycle {} of ~{}, {} windows", std::min(report.cycle, s.predictedMakespan),
                                s.predictedMakespan, report.windows));
  };
  bool reportHere = false;
  auto outcome = simulation.run(s.interrupt, hooks, reportHere);
  if (!outcome) {
    // Exit 5 (a failed write of buffered events) aborts the job: no collective close.
    outcome.error().code == ExitCode::kInternal ? trace.abandon() : trace.discard();
    return failure(outcome.error(), reportHere);
  }
  s.outcome = *outcome;
  if (s.functionalSetup && !s.outcome.interrupted) {
    // Outputs are read back from SRAM on the rank that simulated their chip.
    const auto& localChips = simulation.mapping().localChips;
    const Status checked = checkFunctionalOutputs(*s.functionalSetup, s.programs, [&](int chip) -> const sim::Chip* {
      const auto at = std::find(localChips.begin(), localChips.end(), chip);
      return at == localChips.end() ? nullptr : &simulation.chip(static_cast<size_t>(at - localChips.begin()));
    });
    if (auto stop = agreedOrStop(checked, s, &trace)) return stop;
  }
  if (s.selection.c2c)
    if (auto flushed = events.flush(trace); !flushed) return writeFailed(flushed, trace);
  return std::nullopt;
}

// Counters summed over this rank's chips, then over all ranks.
SimulatorTotals sumSimulatorTotals(const ParallelSimulation& simulation, size_t localChips, MPI_Comm comm) {
  SimulatorTotals t;
  for (size_t i = 0; i < localChips; ++i) {
    const auto& st = simulation.stats(i);
    for (int k = 0; k < sim::kHazardKindCount; ++k) t.hazards[k] += st.hazards[k];
    t.bankConflicts += st.bankConflicts;
    t.sramAccesses += st.sramReads + st.sramWrites;
    t.c2cBytes += st.bytesSent;
    for (Cycle stall : st.unitStall) t.stallCycles += stall;
    t.energyPicojoules += std::llround(st.energy.totalJ() * 1e12);
  }
  static_assert(sizeof(SimulatorTotals) == (sim::kHazardKindCount + 5) * sizeof(long long),
                "reduced as an array of long long");
  MPI_Allreduce(MPI_IN_PLACE, &t, static_cast<int>(sizeof t / sizeof(long long)), MPI_LONG_LONG, MPI_SUM, comm);
  return t;
}

// What the chips did: this rank's rows for the trace, every chip's row, link totals and the
// simulator's counters over all ranks, and the figures the summaries give.
StageEnd gatherStatistics(RunState& s) {
  const RunConfig& config = s.config;
  const topology::Cluster& cluster = *config.cluster;
  const auto& spec = cluster.chip();
  const ParallelSimulation& simulation = *s.simulation;
  RunStatistics& stats = s.statistics;
  const auto& local = simulation.mapping().localChips;
  std::vector<long long> linkTotals(cluster.links().size() * 4, 0);
  std::map<std::pair<const isa::Program*, Cycle>, TimeSplit> splits;  // chips sharing a program and an end
  for (size_t i = 0; i < local.size(); ++i) {
    const auto& st = simulation.stats(i);
    const auto& program = *s.programs[local[i]];
    // A chip a signal stopped before its end has run up to the cycle every rank reached.
    const Cycle cycles = s.outcome.interrupted && st.cycles == 0 && st.instructions > 0 ? s.outcome.reachedCycle : st.cycles;
    // The split up to the chip's own end; the bubble after it, up to the makespan, is added below.
    auto known = splits.find({&program, cycles});
    if (known == splits.end()) known = splits.emplace(std::make_pair(&program, cycles), timeSplit(spec, program, cycles, cycles)).first;
    const TimeSplit split = known->second;
    stats.localRows.push_back({local[i], cycles, program.predictedCycles, program.lowerBoundCycles, st.instructions,
                               st.kindBusy[0], st.kindBusy[1], st.kindBusy[2], st.kindBusy[3], st.kindBusy[4],
                               st.bytesSent, st.bytesReceived, st.sramPeakBytes, split.compute, split.communication,
                               split.bubble, split.other});
    stats.unitBusy.insert(stats.unitBusy.end(), st.unitBusy.begin(), st.unitBusy.end());
    std::vector<float> chipTimeline = st.utilization;
    chipTimeline.resize(static_cast<size_t>(topology::kUnitKindCount) * s.simOptions.bins, 0.0f);
    stats.timeline.insert(stats.timeline.end(), chipTimeline.begin(), chipTimeline.end());
    for (const auto& use : st.links) {
      linkTotals[use.link * 4 + (use.aToB ? 0 : 1)] += use.bytes;
      linkTotals[use.link * 4 + (use.aToB ? 2 : 3)] += use.busyCycles;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, linkTotals.data(), static_cast<int>(linkTotals.size()), MPI_LONG_LONG, MPI_SUM, s.comm);
  stats.totals = sumSimulatorTotals(simulation, local.size(), s.comm);
  const SimulatorTotals& totals = stats.totals;
  stats.energyJoules = static_cast<double>(totals.energyPicojoules) * 1e-12;
  stats.hazardsCounted = std::accumulate(totals.hazards.begin(), totals.hazards.end(), 0LL);
  stats.bankConflictRate = totals.sramAccesses > 0
                               ? static_cast<double>(totals.bankConflicts) / static_cast<double>(totals.sramAccesses)
                               : 0.0;
  stats.allRows.resize(cluster.chipCount());
  {
    std::vector<int> counts(s.ranks), offsets(s.ranks);
    const int mine = static_cast<int>(stats.localRows.size() * sizeof(ChipRow));
    MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, s.comm);
    for (int r = 1; r < s.ranks; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
    MPI_Allgatherv(stats.localRows.data(), mine, MPI_BYTE, stats.allRows.data(), counts.data(), offsets.data(), MPI_BYTE,
                   s.comm);
  }
  RunRow& run = stats.run;
  for (const auto& row : stats.allRows) {
    run.makespanCycles = std::max(run.makespanCycles, row.cycles);
    run.chips += row.instructions > 0;
  }
  for (auto* rows : {&stats.localRows, &stats.allRows})
    for (auto& row : *rows) row.bubbleCycles += run.makespanCycles - row.cycles;
  run.iterations = config.simulation.iterations;
  // A partial run finished no iteration it can vouch for: no samples, no throughput.
  run.samples = s.outcome.interrupted ? 0 : frontend::samplesPerIteration(config.model, *s.graph) * run.iterations;
  run.makespanSeconds = static_cast<double>(run.makespanCycles) / (spec.clockMhz * 1e6);
  run.throughputPerSecond = run.makespanSeconds > 0 ? static_cast<double>(run.samples) / run.makespanSeconds : 0;

  for (const auto& link : cluster.links())
    stats.linkRows.push_back({link.id, link.a, link.b, linkTotals[link.id * 4], linkTotals[link.id * 4 + 1],
                              linkTotals[link.id * 4 + 2], linkTotals[link.id * 4 + 3], link.latencyCycles,
                              link.bytesPerCycle});
  stats.unitRows = unitRowsOf(spec);

  // Imbalance between the chips the plan uses: busy cycles summed over all units of a chip.
  std::int64_t busiestBusy = 0;
  double busySum = 0;
  for (const auto& row : stats.allRows) {
    if (row.instructions == 0) continue;
    const std::int64_t busy = row.busyMem + row.busyVxm + row.busyMxm + row.busySxm + row.busyC2c;
    busySum += static_cast<double>(busy);
    if (stats.busiestChip < 0 || busy > busiestBusy) {
      stats.busiestChip = row.chip;
      busiestBusy = busy;
    }
  }
  stats.imbalance =
      run.chips > 0 && busySum > 0 ? static_cast<double>(busiestBusy) / (busySum / static_cast<double>(run.chips)) : 1.0;
  // Utilisation of each kind of unit over the makespan, across the chips the plan uses.
  double kindBusy[topology::kUnitKindCount] = {};
  for (const auto& row : stats.allRows) {
    const std::int64_t busy[] = {row.busyMem, row.busyVxm, row.busyMxm, row.busySxm, row.busyC2c};
    for (int k = 0; k < topology::kUnitKindCount; ++k) kindBusy[k] += static_cast<double>(busy[k]);
  }
  for (int k = 0; k < topology::kUnitKindCount; ++k) {
    const double capacity = static_cast<double>(std::max<Cycle>(run.makespanCycles, 1)) * std::max(run.chips, 1) *
                            report::issueSlots(spec, static_cast<topology::UnitKind>(k));
    stats.kindUtilisation[k] = capacity > 0 ? kindBusy[k] / capacity : 0.0;
  }
  std::vector<LinkRow> busiest = stats.linkRows;
  std::sort(busiest.begin(), busiest.end(), [](const LinkRow& a, const LinkRow& b) {
    const auto ba = std::max(a.busyCyclesAb, a.busyCyclesBa), bb = std::max(b.busyCyclesAb, b.busyCyclesBa);
    return ba != bb ? ba > bb : a.link < b.link;
  });
  while (!busiest.empty() && busiest.back().bytesAb + busiest.back().bytesBa == 0) busiest.pop_back();
  busiest.resize(std::min<size_t>(busiest.size(), 5));
  for (const auto& l : busiest)
    stats.busiestLinks.push_back(
        {l, static_cast<double>(std::max(l.busyCyclesAb, l.busyCyclesBa)) / std::max<double>(1, run.makespanCycles)});
  return std::nullopt;
}

// The trace: /meta, the rows, the search's ranking; a run stopped by a signal leaves a .partial.h5 and exit 7.
StageEnd writeTrace(RunState& s) {
  const RunConfig& config = s.config;
  const topology::Cluster& cluster = *config.cluster;
  TraceWriter& trace = *s.writer;
  // A signal that came after the simulation's last window, before the writing: a partial trace of
  // the whole run, which claims no samples as every partial trace.
  if (!s.outcome.interrupted && s.cancel->agree()) {
    s.outcome.interrupted = true;
    s.outcome.reachedCycle = s.statistics.run.makespanCycles;
    s.statistics.run.samples = 0;
    s.statistics.run.throughputPerSecond = 0;
  }
  const RunStatistics& stats = s.statistics;
  const auto& local = s.simulation->mapping().localChips;
  TraceMeta meta = traceMeta(s);
  meta.partial = s.outcome.interrupted;
  meta.reachedCycle = s.outcome.reachedCycle;
  stampMeta(s, meta);

  Status w;
  if ((w = trace.writeMeta(meta)) && (w = trace.writeChips(stats.localRows, cluster.chipCount())) &&
      (w = trace.writeUnitBusy(local, stats.unitBusy, static_cast<int>(stats.unitRows.size()), cluster.chipCount())) &&
      (w = trace.writeUnits(stats.unitRows)) && (w = trace.writeLinks(stats.linkRows)) &&
      (w = trace.writeAttribution(s.events->attribution())) &&
      (w = trace.writeTimeline(local, stats.timeline, topology::kUnitKindCount, s.simOptions.bins,
                               s.simOptions.binCycles, cluster.chipCount()))) {
  }
  if (w && s.choice.search) w = trace.writeSearchPlans(searchRows(s.choice.search->ranked));
  if (w && !s.reports.empty()) w = trace.writeCompileReports(compileReportRows(s.reports));
  if (!w) return writeFailed(w, trace);
  // A signal that came after the simulation's last window: the trace is whole but the run stops (exit 7).
  const bool late = !meta.partial && s.cancel->agree();
  if (late)
    if (auto marked = trace.markPartial(stats.run.makespanCycles); !marked) return writeFailed(marked, trace);
  const bool partial = meta.partial || late;
  // /summary/run last, once the run is known to be whole or partial: a partial run claims no samples.
  if (partial) {
    s.statistics.run.samples = 0;
    s.statistics.run.throughputPerSecond = 0;
  }
  if (auto written = trace.writeRun(stats.run); !written) return writeFailed(written, trace);
  s.tracePath = partial ? partialPath(config.output.trace) : config.output.trace;
  if (auto c = trace.commit(s.tracePath); !c) return failure(c.error(), trace.failedHere());
  if (partial)
    return failure(makeError(ExitCode::kInterrupted, fmt::format("interrupted at cycle {}; partial trace written to {}",
                                                                 late ? stats.run.makespanCycles : s.outcome.reachedCycle,
                                                                 s.tracePath)),
                   s.root);
  return std::nullopt;
}

// The run's summary on rank 0, after the memory figures of every rank are gathered.
StageEnd report(RunState& s) {
  const long long mine[2] = {peakRssBytes(), s.events->peakBuffered()};
  long long maxima[2] = {0, 0}, rssSum = 0;
  MPI_Reduce(mine, maxima, 2, MPI_LONG_LONG, MPI_MAX, 0, s.comm);
  MPI_Reduce(&mine[0], &rssSum, 1, MPI_LONG_LONG, MPI_SUM, 0, s.comm);
  s.peakRssMaxRank = maxima[0];
  s.peakRssAllRanks = rssSum;
  s.eventBufferPeakRows = maxima[1];
  if (!s.root) return finished();
  if (s.options.json) report::printSummaryJson(s);
  else report::printSummaryText(s);
  return finished();
}

// ---- Early exits: the last stage of a run that stops before the simulation. ----

StageEnd describeTopology(RunState& s) {
  if (s.root) s.options.json ? report::printTopologyJson(*s.config.cluster) : report::printTopologyText(*s.config.cluster);
  return finished();
}

StageEnd describeModel(RunState& s) {
  std::optional<ir::TrainingGraph> training;
  if (s.config.training.enabled) {
    ir::TrainingOptions trainingOptions;
    trainingOptions.optimizer = s.config.training.optimizer;
    trainingOptions.recompute = s.config.training.recompute;
    auto built = ir::buildTrainingGraph(*s.graph, trainingOptions);
    if (!built) return failure(built.error(), s.root);
    training = std::move(*built);
  }
  if (s.root) {
    const ir::Graph* trainingGraph = training ? &training->graph : nullptr;
    s.options.json ? report::printModelJson(s.config.model, *s.graph, trainingGraph)
                   : report::printModelText(s.config.model, *s.graph, trainingGraph);
  }
  return finished();
}

StageEnd describePlan(RunState& s) {
  if (s.root && s.collective) report::printCollectivePlanText(*s.collective);
  else if (s.root)
    s.options.json ? report::printPlanJson(s.choice.plan, s.choice.placement)
                   : report::printPlanText(s.choice.plan, s.choice.placement);
  return finished();
}

StageEnd describeShards(RunState& s) {
  if (s.collective) return failure(makeError(ExitCode::kConfig, "--describe shards: builtin:collective has no sharding"), s.root);
  auto chips = partition::describeShards(*s.graph, s.choice.plan);
  if (!chips) return failure(chips.error(), s.root);
  if (s.root) fmt::print("{}\n", s.options.json ? partition::shardsJson(*chips) : partition::shardsText(*chips));
  return finished();
}

// --search-only: the best plan as YAML beside the trace, the ranking in the trace, the table on stdout.
StageEnd writeSearch(RunState& s) {
  const RunConfig& config = s.config;
  const std::string yamlPath = planYamlPath(config.output.trace);
  if (auto stop = writeOnRoot(s, [&]() -> Status {
        std::error_code ec;
        const auto parent = std::filesystem::path(yamlPath).parent_path();
        if (!parent.empty()) std::filesystem::create_directories(parent, ec);
        std::ofstream out(yamlPath);
        out << s.choice.plan.toYaml() << "\n";
        if (!out) return makeError(ExitCode::kConfig, fmt::format("{}: cannot write the plan file", yamlPath));
        return {};
      }))
    return stop;
  auto writer = TraceWriter::create(config.output.trace, s.comm);
  if (!writer) return failure(writer.error(), s.root);
  Status w = writer->writeMeta(traceMeta(s));
  if (w)
    w = writer->writeSearchPlans(searchRows(s.choice.search ? s.choice.search->ranked
                                                            : std::vector<partition::RankedPlan>{*s.choice.given}));
  if (!w) return writeFailed(w, *writer);
  if (auto c = writer->commit(config.output.trace); !c) return failure(c.error(), writer->failedHere());
  if (s.root) s.options.json ? report::printSearchJson(s.choice, yamlPath) : report::printSearchText(s.choice, yamlPath);
  return finished();
}

StageEnd reportCompiled(RunState& s) {
  if (s.root && !s.options.quiet)
    fmt::print("compiled {} programs into {}\n", s.compiled.size(), *s.options.emitPrograms);
  return finished();
}

// ---- A signal before the simulation. ----

// The partial trace of a run stopped before its simulation: what is known (the config, the plan, the
// search's ranking, the compile reports and the compiler's predictions), every counter and the
// makespan zero, reached_cycle 0.
Status writeUnsimulatedTrace(RunState& s, const std::string& path, bool& reportHere) {
  const RunConfig& config = s.config;
  const topology::Cluster& cluster = *config.cluster;
  auto writer = createTrace(s);
  if (!writer) return writer.error();
  TraceMeta meta = traceMeta(s);
  if (!s.planChosen || s.collective) meta.planYaml.clear();
  meta.partial = true;
  meta.reachedCycle = 0;
  stampMeta(s, meta);
  // The chips' rows in blocks over the ranks; a chip's predictions come from its program, once compiled.
  const std::int64_t chips = cluster.chipCount();
  const auto units = unitRowsOf(cluster.chip());
  constexpr int kBins = 64;
  std::vector<int> local;
  std::vector<ChipRow> rows;
  for (std::int64_t c = chips * s.rank / s.ranks; c < chips * (s.rank + 1) / s.ranks; ++c) {
    ChipRow row{};
    row.chip = static_cast<std::int32_t>(c);
    if (c < static_cast<std::int64_t>(s.programs.size())) {
      row.predictedCycles = s.programs[c]->predictedCycles;
      row.lowerBoundCycles = s.programs[c]->lowerBoundCycles;
    } else if (c < static_cast<std::int64_t>(s.compiled.size())) {
      row.predictedCycles = s.compiled[c].predictedCycles;
      row.lowerBoundCycles = s.compiled[c].lowerBoundCycles;
    }
    local.push_back(row.chip);
    rows.push_back(row);
  }
  std::vector<LinkRow> links;
  for (const auto& link : cluster.links())
    links.push_back({link.id, link.a, link.b, 0, 0, 0, 0, link.latencyCycles, link.bytesPerCycle});
  RunRow run{};
  TraceWriter& trace = *writer;
  Status w;
  if ((w = trace.writeMeta(meta)) && (w = trace.writeChips(rows, chips)) &&
      (w = trace.writeUnitBusy(local, std::vector<std::int64_t>(local.size() * units.size(), 0),
                               static_cast<int>(units.size()), chips)) &&
      (w = trace.writeUnits(units)) && (w = trace.writeLinks(links)) && (w = trace.writeRun(run)) &&
      (w = trace.writeAttribution(Attribution{})) &&
      (w = trace.writeTimeline(local, std::vector<float>(local.size() * topology::kUnitKindCount * kBins, 0.0f),
                               topology::kUnitKindCount, kBins, 1, chips))) {
  }
  if (w && s.choice.search) w = trace.writeSearchPlans(searchRows(s.choice.search->ranked));
  if (w && !s.reports.empty()) w = trace.writeCompileReports(compileReportRows(s.reports));
  if (!w) {
    trace.abandon();
    reportHere = true;
    return w;
  }
  w = trace.commit(path);
  if (!w) reportHere = trace.failedHere();
  return w;
}

// Every rank agreed to stop after `stage` (the plan search when inSearch), before simulating: exit 7,
// with a partial trace when the run writes one.
RunResult stopBeforeSimulation(RunState& s, const char* stage, bool inSearch) {
  const bool writesTrace = s.configured && !s.options.describe && !s.options.compileOnly && !s.options.dumpIrAfter;
  if (!writesTrace)
    return *failure(makeError(ExitCode::kInterrupted, fmt::format("interrupted during {}; no trace written", stage)),
                    s.root);
  // The trace's writes are collective: it holds only what every rank knows alike. A search the signal
  // stopped holds no plan: it ended interrupted on every rank, or (the signal came after its last
  // gather) ended on some ranks only; a compile stopped early may have ended on some ranks only.
  if (inSearch) s.planChosen = false;
  int known[2] = {s.planChosen ? 1 : 0, s.reports.empty() ? 0 : 1};
  MPI_Allreduce(MPI_IN_PLACE, known, 2, MPI_INT, MPI_MIN, s.comm);
  if (!known[0]) {
    s.planChosen = false;
    s.choice.search.reset();
  }
  if (!known[1]) s.reports.clear();
  s.tracePath = partialPath(s.config.output.trace);
  bool reportHere = s.root;
  if (auto w = writeUnsimulatedTrace(s, s.tracePath, reportHere); !w) return *failure(w.error(), reportHere);
  return *failure(makeError(ExitCode::kInterrupted, fmt::format("interrupted during {}, before the simulation; "
                                                                "partial trace written to {}",
                                                                stage, s.tracePath)),
                  s.root);
}

// ---- The stage list. ----

/// A named step of the run; `phase` is the wall-time phase it is counted in (none: it counts its own).
/// After a stage before the simulation, the ranks agree whether a signal stops the run.
struct Stage {
  const char* name;
  std::optional<Phase> phase;
  StageEnd (*run)(RunState&);
  bool beforeSimulation = false;
};

constexpr Stage kConfigure{"configure", Phase::kLoad, configure, true};
constexpr Stage kBuildModel{"build model", std::nullopt, buildModel, true};  // phases import and passes
constexpr Stage kChoosePlan{"choose plan", Phase::kSearch, choosePlanStage, true};
constexpr Stage kCompile{"compile", Phase::kCompile, compile, true};
constexpr Stage kLoadPrograms{"load programs", Phase::kCompile, loadProgramsStage, true};
constexpr Stage kMapRanks{"map ranks", Phase::kSimulate, mapRanks, true};
constexpr Stage kSimulate{"simulate", Phase::kSimulate, simulate};
constexpr Stage kGatherStatistics{"gather statistics", Phase::kSimulate, gatherStatistics};
constexpr Stage kWriteTrace{"write trace", Phase::kWriteTrace, writeTrace};
constexpr Stage kReport{"report", Phase::kReport, report};
constexpr Stage kDescribeTopology{"describe topology", Phase::kReport, describeTopology};
constexpr Stage kDescribeModel{"describe model", Phase::kReport, describeModel};
constexpr Stage kDescribePlan{"describe plan", Phase::kReport, describePlan};
constexpr Stage kDescribeShards{"describe shards", Phase::kReport, describeShards};
constexpr Stage kWriteSearch{"write search", Phase::kWriteTrace, writeSearch};
constexpr Stage kReportCompiled{"report compiled", Phase::kReport, reportCompiled};

/// The stages of a run: the whole list, or the list up to the early exit the options ask for.
std::vector<Stage> stagesFor(const RunOptions& o) {
  if (o.describe == "topology") return {kConfigure, kDescribeTopology};
  if (o.dumpIrAfter && !o.describe) return {kConfigure, kBuildModel};
  if (o.describe == "model") return {kConfigure, kBuildModel, kDescribeModel};
  if (o.describe == "plan") return {kConfigure, kBuildModel, kChoosePlan, kDescribePlan};
  if (o.describe == "shards") return {kConfigure, kBuildModel, kChoosePlan, kDescribeShards};
  if (o.searchOnly) return {kConfigure, kBuildModel, kChoosePlan, kWriteSearch};
  if (o.compileOnly && o.programs) return {kConfigure, kBuildModel, kLoadPrograms, kReportCompiled};
  if (o.compileOnly) return {kConfigure, kBuildModel, kChoosePlan, kCompile, kReportCompiled};
  if (o.programs)
    return {kConfigure, kBuildModel, kLoadPrograms, kMapRanks, kSimulate, kGatherStatistics, kWriteTrace, kReport};
  return {kConfigure, kBuildModel, kChoosePlan, kCompile, kMapRanks, kSimulate, kGatherStatistics, kWriteTrace, kReport};
}

}  // namespace

const char* phaseName(Phase phase) {
  static constexpr const char* kNames[kPhaseCount] = {"load",     "import",      "passes",      "search",
                                                      "compile",  "simulate",    "write trace", "report"};
  return kNames[static_cast<int>(phase)];
}

const char* phaseKey(Phase phase) {
  static constexpr const char* kKeys[kPhaseCount] = {"load",     "import",      "passes",      "search",
                                                     "compile",  "simulate",    "write_trace", "report"};
  return kKeys[static_cast<int>(phase)];
}

RunState::RunState(const RunOptions& o, MPI_Comm c, const volatile std::sig_atomic_t* i)
    : options(o), comm(c), interrupt(i), wallStart(Clock::now()) {
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  root = rank == 0;
}

RunResult runTspSim(const RunOptions& options, MPI_Comm comm, const volatile std::sig_atomic_t* interrupt) {
  RunState state(options, comm, interrupt);
  CancelWatch cancel(comm, interrupt);
  state.cancel = &cancel;
  // Searching and compiling look at the signal (here or on another rank) at every step.
  support::setCancelPoll([&cancel] { return cancel.poll(); });
  const RunResult result = [&]() -> RunResult {
    for (const Stage& stage : stagesFor(options)) {
      const auto start = Clock::now();
      StageEnd end = stage.run(state);
      if (stage.phase) state.phases.add(*stage.phase, secondsSince(start));
      // A stage stopped early by the signal may have failed for that reason alone: the signal wins.
      if (stage.beforeSimulation && cancel.agree()) return stopBeforeSimulation(state, stage.name, stage.phase == Phase::kSearch);
      if (end) return *end;
    }
    return {};
  }();
  support::setCancelPoll(nullptr);
  if (result.code != ExitCode::kInternal) cancel.finish();  // exit 5 aborts the job
  return result;
}

}  // namespace tsp::runtime
