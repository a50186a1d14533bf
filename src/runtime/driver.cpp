// The tsp-sim run, stage by stage; every stage either succeeds on all ranks or fails on all.
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
#include <sstream>
#include <map>
#include <numeric>
#include <memory>
#include <optional>
#include <type_traits>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compile/frontend/builtin_models.h"
#include "compile/frontend/onnx_importer.h"
#include "compile/passes/passes.h"
#include "compile/schedule/cluster_schedule.h"
#include "compile/schedule/collectives.h"
#include "partition/plan.h"
#include "partition/plan_shards.h"
#include "partition/search.h"
#include "compile/ir/autodiff.h"
#include "partition/training_cost.h"
#include "partition/training_step.h"
#include "runtime/event_buffer.h"
#include "runtime/functional_run.h"
#include "runtime/pdes.h"
#include "runtime/rank_mapping.h"
#include "runtime/run_config.h"
#include "runtime/trace_writer.h"
#include "sim/chip.h"

namespace tsp::runtime {

const char* toolVersion() { return "tsp-sim 0.1.0"; }

namespace {

using Clock = std::chrono::steady_clock;

RunResult failure(const Diagnostic& d, bool reportHere) { return {d.code, d, reportHere}; }

std::string partialPath(const std::string& path) {
  const std::string suffix = ".h5";
  if (path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0)
    return path.substr(0, path.size() - suffix.size()) + ".partial.h5";
  return path + ".partial.h5";
}

std::string isoNow() {
  char buffer[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

std::string topologyName(const topology::Cluster& cluster) {
  const auto& d = cluster.description();
  return fmt::format("{} of {} chips", d.kind, cluster.chipCount());
}

void describeTopology(const topology::Cluster& cluster, bool json) {
  const auto s = topology::summarize(cluster);
  if (json) {
    nlohmann::json j = {{"kind", cluster.description().kind},
                        {"chips", s.chips},
                        {"links", s.links},
                        {"min_degree", s.minDegree},
                        {"max_degree", s.maxDegree},
                        {"diameter_hops", s.diameterHops},
                        {"average_hops", s.averageHops},
                        {"hops_exact", s.hopsExact},
                        {"bisection_links", s.bisectionLinks},
                        {"bisection_exact", s.bisectionExact},
                        {"min_link_latency_cycles", s.minLatencyCycles},
                        {"max_link_latency_cycles", s.maxLatencyCycles},
                        {"injection_bytes_per_second", s.injectionBytesPerSecond}};
    if (cluster.description().kind == "dragonfly") {
      j["rack_bisection_links"] = s.rackBisectionLinks;
      j["rack_bisection_bytes_per_second"] = s.rackBisectionBytesPerSecond;
    }
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("topology: {} ({} links)\n", topologyName(cluster), s.links);
  fmt::print("  degree:            {} to {}\n", s.minDegree, s.maxDegree);
  fmt::print("  diameter:          {} hops{}\n", s.diameterHops, s.hopsExact ? "" : " (sampled sources)");
  fmt::print("  average hops:      {:.3f}{}\n", s.averageHops, s.hopsExact ? "" : " (sampled sources)");
  fmt::print("  bisection:         {} links{}\n", s.bisectionLinks, s.bisectionExact ? "" : " (upper bound)");
  fmt::print("  link latency:      {} to {} cycles\n", s.minLatencyCycles, s.maxLatencyCycles);
  fmt::print("  injection bandwidth: {:.1f} GB/s\n", s.injectionBytesPerSecond / 1e9);
  if (cluster.description().kind == "dragonfly")
    fmt::print("  rack bisection:    {} links, {:.2f} TB/s per direction\n", s.rackBisectionLinks,
               s.rackBisectionBytesPerSecond / 1e12);
}

// training: the training step's graph (autodiff and optimizer) when the config has a `training:` section.
void describeModel(const frontend::ModelSpec& spec, const ir::Graph& graph, const ir::Graph* training, bool json) {
  std::map<std::string, std::int64_t> byOp;
  for (const auto& op : graph.ops()) ++byOp[ir::opKindName(op.kind)];
  const auto live = passes::analyzeLiveness(graph);
  if (json) {
    nlohmann::json j = {{"model", spec.describe()},
                        {"nodes", graph.ops().size()},
                        {"nodes_by_op", byOp},
                        {"layers", graph.layerCount()},
                        {"parameters", graph.parameters()},
                        {"flops", graph.flops()},
                        {"matmul_flops", graph.macFlops()},
                        {"weight_bytes", graph.weightBytes()},
                        {"kv_cache_bytes", graph.stateBytes()},
                        {"peak_activation_bytes", live.peakLiveBytes}};
    if (training) {
      j["training_nodes"] = training->ops().size();
      j["training_flops"] = training->flops();
      j["training_matmul_flops"] = training->macFlops();
    }
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("model: {}\n  nodes: {}  layers: {}  parameters: {}  flops: {} (matmul {})\n", spec.describe(),
             graph.ops().size(), graph.layerCount(), graph.parameters(), graph.flops(), graph.macFlops());
  fmt::print("  weight bytes: {}  KV-cache bytes: {}  peak activation bytes: {}\n  nodes by op:\n",
             graph.weightBytes(), graph.stateBytes(), live.peakLiveBytes);
  for (const auto& [op, count] : byOp) fmt::print("    {:<20} {}\n", op, count);
  if (training)
    fmt::print("  training step: nodes: {}  flops: {} (matmul {})\n", training->ops().size(), training->flops(),
               training->macFlops());
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

// The model's graph: imported or generated, then run through the pass pipeline.
Expected<ir::Graph> buildModel(const frontend::ModelSpec& spec, const RunOptions& options, bool root,
                               bool loadWeights) {
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
  return passes::runPipeline(std::move(*graph), *pipeline, dump);
}

// The placement report: how ranks were placed, hops of TP ring and stage-to-stage routes, link load.
nlohmann::json placementJson(const partition::PlacementReport& p) {
  return {{"method", p.method},           {"tp_average_hops", p.tpAverageHops}, {"tp_max_hops", p.tpMaxHops},
          {"pp_average_hops", p.ppAverageHops}, {"pp_max_hops", p.ppMaxHops},   {"busiest_link", p.busiestLink},
          {"busiest_link_bytes", p.busiestLinkBytes}, {"links_used", p.linksUsed}, {"byte_hops", p.traffic}};
}

void printPlacement(const partition::PlacementReport& p) {
  fmt::print("placement:   {}: TP ring hops {:.2f} avg, {} max; PP hops {:.2f} avg, {} max; {} links used, "
             "{:.1f} KiB x hops per iteration\n",
             p.method, p.tpAverageHops, p.tpMaxHops, p.ppAverageHops, p.ppMaxHops, p.linksUsed, p.traffic / 1024);
  if (p.busiestLink >= 0)
    fmt::print("busiest link: {} with {:.1f} KiB per iteration (predicted)\n", p.busiestLink,
               static_cast<double>(p.busiestLinkBytes) / 1024);
}

void describePlan(const partition::Plan& plan, const partition::PlacementReport& placement, bool json) {
  if (json) {
    nlohmann::json stages = nlohmann::json::array();
    for (size_t s = 0; s < plan.stageChip.size(); ++s)
      stages.push_back({{"first_layer", plan.stageFirstLayer[s]}, {"chip", plan.stageChip[s]},
                        {"estimated_cycles", plan.stageCycles[s]}});
    nlohmann::json j = {{"plan", plan.canonical()}, {"dp", plan.dp}, {"tp", plan.tp}, {"pp", plan.pp},
                        {"microbatches", plan.microbatches}, {"interleave", plan.interleave}, {"stages", stages},
                        {"placement", plan.placement}, {"placement_report", placementJson(placement)}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("{}\n", plan.toYaml());
  printPlacement(placement);
}

// Writes each distinct program (JSON, binary .tspp, readable .txt), a compile report per chip, and a manifest.
Status emitPrograms(const std::string& dir, const std::vector<isa::Program>& programs,
                    const std::vector<schedule::CompileReport>& reports, const topology::ChipSpec& spec) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return makeError(ExitCode::kConfig, fmt::format("{}: cannot create directory: {}", dir, ec.message()));
  nlohmann::json manifest = {{"format", "tsp-programs"}, {"version", isa::kProgramVersion}};
  auto& chips = manifest["chips"] = nlohmann::json::array();
  std::map<std::uint64_t, std::string> written;
  for (size_t chip = 0; chip < programs.size(); ++chip) {
    const std::uint64_t hash = programs[chip].contentHash();
    auto [it, fresh] = written.emplace(hash, fmt::format("program_{:016x}.json", hash));
    if (fresh) {
      std::ofstream out(std::filesystem::path(dir) / it->second);
      out << isa::serialize(programs[chip]);
      const std::string stem = it->second.substr(0, it->second.size() - 5);
      std::ofstream binary(std::filesystem::path(dir) / (stem + ".tspp"), std::ios::binary);
      binary << isa::serializeBinary(programs[chip]);
      std::ofstream text(std::filesystem::path(dir) / (stem + ".txt"));
      text << isa::toText(programs[chip], spec);
      if (!out || !binary || !text) return makeError(ExitCode::kConfig, fmt::format("{}: cannot write {}", dir, it->second));
    }
    nlohmann::json entry = {{"chip", chip}, {"program", it->second}};
    if (chip < reports.size()) {  // programs read back with --programs have no report
      const std::string report = fmt::format("report_chip{}.json", chip);
      std::ofstream out(std::filesystem::path(dir) / report);
      out << schedule::reportJson(reports[chip]) << "\n";
      if (!out) return makeError(ExitCode::kConfig, fmt::format("{}: cannot write {}", dir, report));
      entry["report"] = report;
    }
    chips.push_back(entry);
  }
  std::ofstream out(std::filesystem::path(dir) / "manifest.json");
  out << manifest.dump(2) << "\n";
  if (!out) return makeError(ExitCode::kConfig, fmt::format("{}: cannot write manifest.json", dir));
  return {};
}

// Reads the programs written by --emit-programs: the manifest names one program file per chip.
Expected<std::vector<isa::Program>> loadPrograms(const std::string& dir, const topology::Cluster& cluster) {
  const std::string manifestPath = (std::filesystem::path(dir) / "manifest.json").string();
  std::ifstream in(manifestPath);
  if (!in) return makeError(ExitCode::kConfig, fmt::format("{}: cannot open the program manifest", manifestPath));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json manifest = nlohmann::json::parse(text.str(), nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object() || manifest.value("format", "") != "tsp-programs" ||
      !manifest.contains("chips") || !manifest["chips"].is_array())
    return makeError(ExitCode::kConfig, fmt::format("{}: not a tsp-sim program manifest", manifestPath));
  const auto& chips = manifest["chips"];
  if (static_cast<int>(chips.size()) != cluster.chipCount())
    return makeError(ExitCode::kConfig, fmt::format("{}: lists {} chips, the cluster has {}", manifestPath,
                                                    chips.size(), cluster.chipCount()));
  std::vector<isa::Program> programs(cluster.chipCount());
  std::map<std::string, isa::Program> read;  // shared program files are read once
  for (const auto& entry : chips) {
    const int chip = entry.value("chip", -1);
    const std::string file = entry.value("program", "");
    if (chip < 0 || chip >= cluster.chipCount() || file.empty())
      return makeError(ExitCode::kConfig, fmt::format("{}: an entry needs a chip in [0, {}) and a program file",
                                                      manifestPath, cluster.chipCount()));
    auto found = read.find(file);
    if (found == read.end()) {
      const std::string path = (std::filesystem::path(dir) / file).string();
      std::ifstream programIn(path);
      if (!programIn) return makeError(ExitCode::kConfig, fmt::format("{}: cannot open the program file", path));
      std::stringstream programText;
      programText << programIn.rdbuf();
      auto program = isa::deserialize(programText.str(), cluster.chip(), path);
      if (!program) return program.error();
      found = read.emplace(file, std::move(*program)).first;
    }
    programs[chip] = found->second;
  }
  return programs;
}

// Rank-0 progress line on stderr: simulated cycles, windows, events/s over all ranks, ETA. The
// first comes after the first window (the user sees the simulation start), then one a second.
class ProgressLine {
 public:
  ProgressLine(bool enabled, Cycle expected) : enabled_(enabled), expected_(expected), start_(Clock::now()), last_(start_) {}
  bool due() const { return enabled_ && (!printed_ || Clock::now() - last_ >= std::chrono::seconds(1)); }
  void print(const ProgressReport& report) {
    printed_ = true;
    last_ = Clock::now();
    const double seconds = std::chrono::duration<double>(last_ - start_).count();
    const double fraction =
        expected_ > 0 ? std::min(1.0, static_cast<double>(report.cycle) / static_cast<double>(expected_)) : 0;
    const double eta = fraction > 0 ? seconds * (1 - fraction) / fraction : 0;
    fmt::print(stderr, "tsp-sim: progress: cycle {} of ~{} ({:.0f}%), {} windows, {:.3g} events/s, ETA {:.0f} s\n",
               std::min(report.cycle, expected_), expected_, 100 * fraction, report.windows,
               static_cast<double>(report.events) / std::max(seconds, 1e-9), eta);
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  bool printed_ = false;
  Cycle expected_;
  Clock::time_point start_, last_;
};

// nccl-tests figures of a collective run: time, algbw = bytes / time, busbw = algbw x the op's factor.
nlohmann::json collectiveFigures(const schedule::CollectiveSchedule& c, const ir::Graph& graph, double seconds) {
  const auto bytes = graph.op(0).intAttr("bytes", 0);
  const int chips = static_cast<int>(c.plan.group.size());
  const double algbw = seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
  return {{"op", schedule::collectiveOpName(c.plan.op)},
          {"algorithm", schedule::collectiveAlgorithmName(c.plan.algorithm)},
          {"chips", chips},
          {"bytes", bytes},
          {"time_us", seconds * 1e6},
          {"algbw_gbps", algbw},
          {"busbw_gbps", algbw * schedule::busBandwidthFactor(c.plan.op, chips)},
          {"predicted_cycles", c.cycles}};
}

// All ranks learn whether a step that each rank ran locally succeeded everywhere; the lowest
// failing rank reports, so that no rank starts collective I/O that others skip.
// What --json reports of a functional run that passed: the element type and, per output, what it
// was compared with and the tolerance.
nlohmann::json functionalSummary(const FunctionalSetup& setup) {
  nlohmann::json j;
  j["element"] = setup.options.element == sim::ElementType::kFp16 ? "fp16" : "int8";
  j["outputs"] = nlohmann::json::array();
  for (const auto& check : setup.outputs)
    j["outputs"].push_back({{"name", check.name},
                            {"elements", check.reference.size()},
                            {"against", check.against},
                            {"atol", check.tolerance.atol},
                            {"rtol", check.tolerance.rtol}});
  return j;
}


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

long long peakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<long long>(usage.ru_maxrss) * 1024;
}

// What the planning stage decided: the plan to run, and the search or the given plan's prediction.
struct PlanChoice {
  partition::Plan plan;
  std::optional<partition::SearchResult> search;
  std::optional<partition::RankedPlan> given;  ///< the prediction for a fixed or file plan
  std::string planFile;                        ///< the file the plan came from, if any
  std::optional<partition::RankedPlan> runPrediction;  ///< the cost model's figures for the plan that runs
  partition::TrainingConfig training;                  ///< what the figures cost: a training step when enabled
  partition::PlacementReport placement;                 ///< hops and link load of the plan's placement
  std::shared_ptr<const partition::ModelProfile> profile;  ///< what the plans were costed on
  std::vector<std::string> skipped;                    ///< searched plans that did not compile, with why
};

// Every rank's evaluated candidates, gathered on every rank (the search itself has no MPI).
std::vector<partition::EvaluatedCandidate> gatherCandidates(MPI_Comm comm,
                                                            const std::vector<partition::EvaluatedCandidate>& mine) {
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  static_assert(std::is_trivially_copyable_v<partition::EvaluatedCandidate>, "gathered as bytes");
  const int bytes = static_cast<int>(mine.size() * sizeof(partition::EvaluatedCandidate));
  std::vector<int> counts(ranks), offsets(ranks, 0);
  MPI_Allgather(&bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  for (int r = 1; r < ranks; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<partition::EvaluatedCandidate> all((offsets.back() + counts.back()) / sizeof(partition::EvaluatedCandidate));
  MPI_Allgatherv(mine.data(), bytes, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, comm);
  return all;
}

// The plan: from --plan FILE or the config's plan file, a fixed plan, or the search (plan: auto).
Expected<PlanChoice> choosePlan(const RunConfig& config, const RunOptions& options, const ir::Graph& graph,
                                MPI_Comm comm) {
  const topology::Cluster& cluster = *config.cluster;
  const auto& parallelism = config.parallelism;
  PlanChoice choice;
  auto profile = partition::profileModel(graph, cluster.chip(), frontend::samplesPerIteration(config.model, graph));
  if (!profile) return profile.error();
  if (auto s = partition::applyTraining(*profile, graph, config.training, &cluster.chip()); !s) return s.error();
  choice.training = config.training;
  choice.planFile = options.planFile && *options.planFile != "auto" ? *options.planFile : "";
  if (choice.planFile.empty() && !options.planFile) choice.planFile = parallelism.planFile;
  if (!choice.planFile.empty()) {
    auto plan = partition::loadPlanFile(choice.planFile);
    if (!plan) return plan.error();
    if (auto s = partition::checkPlan(*plan, static_cast<int>(profile->layers.size()), cluster, choice.planFile); !s)
      return s.error();
    choice.plan = *plan;
  } else if (parallelism.plan != "fixed" && !options.planFile && config.simulation.mode == "functional" &&
             !options.searchOnly && !graph.ops().empty()) {
    // Functional mode executes pure pipelines only: plan auto is the pipeline over the chips.
    auto plan = partition::planPipeline(graph, cluster, parallelism);
    if (!plan) return plan.error();
    choice.plan = *plan;
  } else if (parallelism.plan == "fixed" && !options.planFile) {
    const partition::Candidate c{parallelism.split, parallelism.dp, parallelism.tp,
                                 parallelism.pp > 0 ? parallelism.pp : 1, parallelism.microbatches,
                                 parallelism.interleave};
    if (c.dp == 1 && c.tp == 1 && c.microbatches == 1 && c.interleave == 1) {
      auto plan = partition::planPipeline(graph, cluster, parallelism);
      if (!plan) return plan.error();
      choice.plan = *plan;
    } else {
      auto order = partition::localityOrder(cluster);
      if (!order) return order.error();
      auto plan = partition::buildPlan(cluster, *profile, c, *order);
      if (!plan) return plan.error();
      choice.plan = *plan;
      auto placement = partition::refinePlacement(cluster, *profile, choice.plan, *order);
      if (!placement) return placement.error();
      choice.placement = *placement;
    }
  } else {
    partition::SearchOptions search;
    search.objective = parallelism.objective;
    search.budget = parallelism.searchBudget;
    search.maxTp = parallelism.maxTp;
    partition::SearchParallel parallel;
    MPI_Comm_rank(comm, &parallel.rank);
    MPI_Comm_size(comm, &parallel.size);
    if (parallel.size > 1)
      parallel.gather = [comm](const std::vector<partition::EvaluatedCandidate>& mine) {
        return gatherCandidates(comm, mine);
      };
    auto result = partition::searchPlans(cluster, *profile, search, parallel);
    if (!result) return result.error();
    choice.search = std::move(*result);
    choice.plan = choice.search->best;
  }
  if (choice.search) choice.placement = choice.search->placement;
  else if (choice.placement.method.empty()) choice.placement = partition::reportPlanPlacement(cluster, *profile, choice.plan);
  if (!choice.search) {
    auto given = partition::evaluatePlan(cluster, *profile, choice.plan);
    if (!given) return given.error();
    choice.given = *given;
  }
  if (auto predicted = partition::evaluatePlan(cluster, *profile, choice.plan); predicted)
    choice.runPrediction = *predicted;
  choice.profile = std::make_shared<const partition::ModelProfile>(std::move(*profile));
  return choice;
}

// A searched plan whose shards do not compile (the cost model's memory check passed, the SRAM
// allocator did not) is replaced by the next ranked plan that does, at most this many times.
constexpr int kMaxPlanFallbacks = 16;

// The next ranked plan after `current` that has a Plan (stages and placement), or an error.
Expected<partition::Plan> nextRankedPlan(const topology::Cluster& cluster, PlanChoice& choice, size_t& next) {
  auto order = partition::localityOrder(cluster);
  if (!order) return order.error();
  const auto& ranked = choice.search->ranked;
  for (; next < ranked.size(); ++next) {
    auto plan = partition::buildPlan(cluster, *choice.profile, ranked[next].candidate, *order);
    if (!plan || plan->canonical() == choice.plan.canonical()) continue;
    auto placement = partition::refinePlacement(cluster, *choice.profile, *plan, *order);
    if (!placement) return placement.error();
    choice.placement = *placement;
    choice.runPrediction = ranked[next];
    ++next;
    return *plan;
  }
  return makeError(ExitCode::kDoesNotFit, "no further ranked plan");
}

std::string planYamlPath(const std::string& trace) {
  const std::string suffix = ".h5";
  if (trace.size() > suffix.size() && trace.compare(trace.size() - suffix.size(), suffix.size(), suffix) == 0)
    return trace.substr(0, trace.size() - suffix.size()) + ".plan.yaml";
  return trace + ".plan.yaml";
}

std::vector<SearchPlanRow> searchRows(const std::vector<partition::RankedPlan>& ranked) {
  std::vector<SearchPlanRow> rows;
  for (size_t i = 0; i < ranked.size(); ++i) {
    const auto& r = ranked[i];
    SearchPlanRow row{};
    row.rank = static_cast<std::int32_t>(i);
    std::snprintf(row.plan, sizeof row.plan, "%s", r.candidate.canonical().c_str());
    std::snprintf(row.split, sizeof row.split, "%s", partition::tensorSplitName(r.candidate.split));
    row.dp = r.candidate.dp;
    row.tp = r.candidate.tp;
    row.pp = r.candidate.pp;
    row.microbatches = r.candidate.microbatches;
    row.interleave = r.candidate.interleave;
    row.chips = r.candidate.chips();
    row.iterationCycles = r.cost.iterationCycles;
    row.throughputPerSecond = r.cost.throughput;
    row.latencySeconds = r.cost.latencySeconds;
    row.memoryBytes = r.cost.memoryPerChip;
    row.bubbleFraction = r.cost.bubbleFraction;
    row.commShare = r.cost.commShare;
    row.feasible = r.cost.fits ? 1 : 0;
    row.exact = r.exact ? 1 : 0;
    rows.push_back(row);
  }
  return rows;
}

nlohmann::json rankedJson(const partition::RankedPlan& r) {
  return {{"plan", r.candidate.canonical()},
          {"split", partition::tensorSplitName(r.candidate.split)},
          {"chips", r.candidate.chips()},
          {"iteration_cycles", r.cost.iterationCycles},
          {"throughput_per_second", r.cost.throughput},
          {"latency_seconds", r.cost.latencySeconds},
          {"memory_bytes_per_chip", r.cost.memoryPerChip},
          {"bubble_fraction", r.cost.bubbleFraction},
          {"comm_share", r.cost.commShare},
          {"copies", r.cost.copies},
          {"exact", r.exact}};
}

// --search-only output: the ranked table (or JSON), the placement report, the fallback flag.
void printSearch(const PlanChoice& choice, const std::string& yamlPath, bool json) {
  std::vector<partition::RankedPlan> ranked;
  if (choice.search) ranked = choice.search->ranked;
  else if (choice.given) ranked = {*choice.given};
  if (json) {
    nlohmann::json plans = nlohmann::json::array();
    for (const auto& r : ranked) plans.push_back(rankedJson(r));
    nlohmann::json j = {{"best", choice.plan.canonical()}, {"plans", plans}, {"plan_file", yamlPath}};
    if (choice.training.enabled)
      j["training"] = {{"schedule", partition::pipelineScheduleName(choice.training.schedule)},
                       {"optimizer", ir::optimizerName(choice.training.optimizer)},
                       {"recompute", ir::recomputeName(choice.training.recompute)},
                       {"shard_optimizer", choice.training.shardOptimizer}};
    if (choice.search) {
      const auto& s = *choice.search;
      j["method"] = s.method;
      j["space"] = s.spaceSize;
      j["pruned"] = s.pruned;
      j["evaluated"] = s.evaluated;
      j["fallback_layers"] = s.fallbackLayers;
    }
    j["placement"] = placementJson(choice.placement);
    fmt::print("{}\n", j.dump(2));
    return;
  }
  if (choice.training.enabled)
    fmt::print("training step: schedule {}, optimizer {}{}, recompute {}; samples/s of one step\n",
               partition::pipelineScheduleName(choice.training.schedule), ir::optimizerName(choice.training.optimizer),
               choice.training.shardOptimizer ? " (sharded over dp)" : "", ir::recomputeName(choice.training.recompute));
  if (choice.search) {
    const auto& s = *choice.search;
    fmt::print("search: {} over {} candidates ({} pruned on memory), {} evaluated\n", s.method, s.spaceSize, s.pruned,
               s.evaluated);
    if (s.fallbackLayers > 0)
      fmt::print("note: {} layers costed by the FLOP-based estimate (the compiler cannot lower them yet: {})\n",
                 s.fallbackLayers, s.fallbackReason);
  }
  fmt::print("\n{:>4} {:<28} {:>6} {:>14} {:>12} {:>10} {:>8} {:>8}\n", "rank", "plan", "chips", "samples/s",
             "latency us", "MiB/chip", "bubble", "comm");
  const size_t shown = std::min<size_t>(ranked.size(), 20);
  for (size_t i = 0; i < shown; ++i) {
    const auto& r = ranked[i];
    fmt::print("{:>4} {:<28} {:>6} {:>14.1f} {:>12.3f} {:>10.1f} {:>8.3f} {:>8.3f}{}\n", i, r.candidate.canonical(),
               r.candidate.chips(), r.cost.throughput, r.cost.latencySeconds * 1e6,
               static_cast<double>(r.cost.memoryPerChip) / (1 << 20), r.cost.bubbleFraction, r.cost.commShare,
               r.exact ? "" : " *");
  }
  if (shown < ranked.size()) fmt::print("  ... {} more in /search/plans\n", ranked.size() - shown);
  if (choice.search) fmt::print("\n(* screening figures: contention of the first group only)\n");
  printPlacement(choice.placement);
  fmt::print("best plan:   {} written to {}\n", choice.plan.canonical(), yamlPath);
}

}  // namespace

// A sharded plan: its per-device graphs, scheduled on the cluster as one problem.
Expected<schedule::ClusterSchedule> scheduleShardedPlan(const ir::Graph& graph, const partition::Plan& plan,
                                                        const topology::Cluster& cluster,
                                                        const schedule::Options& options) {
  auto workload = partition::shardPlan(graph, plan);
  if (!workload) return workload.error();
  return schedule::scheduleCluster(*workload, cluster, options);
}

// What a simulated training step's pipeline did: the scheduler's figures next to Megatron's formula.
struct TrainingFigures {
  int stages = 1, microbatches = 1, chunks = 1, buckets = 0;
  Cycle pipelineCycles = 0, allReduceCycles = 0;
  double idealCycles = 0, bubble = 0;
  int compiledPasses = 0, sharedPasses = 0;
  std::vector<std::vector<Cycle>> forwardCycles, backwardCycles;  ///< [stage][chunk], one microbatch
  bool pipelineOnly = false;  ///< no all-reduce and no update: the programs end with the pipeline
};

// A training step of the plan through the training cluster scheduler; its pipeline figures go to `figures`.
Expected<schedule::ClusterSchedule> scheduleTrainingPlan(const ir::Graph& graph, const partition::Plan& plan,
                                                         const partition::TrainingConfig& training,
                                                         const topology::Cluster& cluster,
                                                         const schedule::Options& options,
                                                         std::optional<TrainingFigures>& figures) {
  auto step = partition::buildTrainingStep(graph, plan, training);
  if (!step) return step.error();
  auto scheduled = schedule::scheduleTrainingStep((*step)->workload, cluster, options);
  if (!scheduled) return scheduled.error();
  figures = TrainingFigures{plan.pp, plan.microbatches, plan.interleave, scheduled->buckets,
                            scheduled->pipelineCycles, scheduled->allReduceCycles, scheduled->idealCycles(),
                            scheduled->bubbleFraction(), scheduled->cluster.compiledShards,
                            scheduled->cluster.sharedShards, scheduled->forwardCycles, scheduled->backwardCycles,
                            scheduled->allReduceCycles == 0 && training.optimizer == ir::Optimizer::kNone};
  return std::move(scheduled->cluster);
}

nlohmann::json trainingJson(const TrainingFigures& t, const partition::TrainingConfig& training) {
  const double formula = static_cast<double>(t.stages - 1) / t.microbatches;
  return {{"schedule", partition::pipelineScheduleName(training.schedule)},
          {"optimizer", ir::optimizerName(training.optimizer)},
          {"recompute", ir::recomputeName(training.recompute)},
          {"pipeline_cycles", t.pipelineCycles},
          {"ideal_cycles", t.idealCycles},
          {"bubble_fraction", t.bubble},
          {"bubble_formula", formula / t.chunks},  // (p-1)/m, and (1/v)(p-1)/m interleaved
          {"all_reduce_end_cycles", t.allReduceCycles},
          {"all_reduce_buckets", t.buckets},
          {"forward_cycles", t.forwardCycles},
          {"backward_cycles", t.backwardCycles},
          {"passes_compiled", t.compiledPasses},
          {"passes_shared", t.sharedPasses}};
}

RunResult runTspSim(const RunOptions& options, MPI_Comm comm, const volatile std::sig_atomic_t* interrupt) {
  const auto wallStart = Clock::now();
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const bool root = rank == 0;

  // Stages up to the simulation are deterministic and run on every rank, so they fail on all alike.
  auto loaded = loadRunConfig(options.configPath);
  if (!loaded) return failure(loaded.error(), root);
  RunConfig config = std::move(*loaded);
  const topology::Cluster& cluster = *config.cluster;
  if (options.model) {
    auto spec = frontend::parseModelArgument(*options.model, config.model);
    if (!spec) return failure(spec.error(), root);
    config.model = *spec;
  }
  if (options.out) config.output.trace = *options.out;
  if (options.seed) config.simulation.seed = *options.seed;
  if (options.functional) config.simulation.mode = "functional";
  const bool functional = config.simulation.mode == "functional";
  if ((options.inputsDir || options.expectDir) && !functional)
    return failure(makeError(ExitCode::kConfig, "--inputs and --expect need functional mode (--functional or "
                                                "simulation.mode: functional)"),
                   root);
  if (options.functional && config.simulation.faults.enabled())
    return failure(makeError(ExitCode::kConfig, "--functional: functional mode runs without injected faults "
                                                "(simulation.faults)"),
                   root);
  if (options.traceLevel) config.output.level = *options.traceLevel;

  if (options.describe == "topology") {
    if (root) describeTopology(cluster, options.json);
    return {};
  }
  if (options.overrides) {
    auto overrides = parseOverrides(*options.overrides);
    if (!overrides) return failure(overrides.error(), root);
    for (const auto& [k, v] : *overrides) config.model.overrides[k] = v;
  }
  auto graph = buildModel(config.model, options, root, functional);
  if (!graph) return failure(graph.error(), root);
  if (options.dumpIrAfter && !options.describe) return {};
  if (options.describe == "model") {
    std::optional<ir::TrainingGraph> training;
    if (config.training.enabled) {
      ir::TrainingOptions trainingOptions;
      trainingOptions.optimizer = config.training.optimizer;
      trainingOptions.recompute = config.training.recompute;
      auto built = ir::buildTrainingGraph(*graph, trainingOptions);
      if (!built) return failure(built.error(), root);
      training = std::move(*built);
    }
    if (root) describeModel(config.model, *graph, training ? &training->graph : nullptr, options.json);
    return {};
  }
  // builtin:collective is one collective over the chips: no plan search, the collective scheduler compiles it.
  if (options.searchOnly && schedule::isCollectiveBenchmark(*graph))
    return failure(makeError(ExitCode::kConfig, "--search-only: builtin:collective is one collective over every chip, "
                                                "with no plan to search"),
                   root);
  if (functional && schedule::isCollectiveBenchmark(*graph))
    return failure(makeError(ExitCode::kConfig, "functional mode: builtin:collective moves bytes that stand for no "
                                                "tensor values; functional mode runs compiled graphs"),
                   root);
  std::optional<schedule::CollectiveSchedule> collective;
  if (schedule::isCollectiveBenchmark(*graph)) {
    auto c = schedule::compileCollectiveBenchmark(*graph, cluster);
    if (!c) return failure(c.error(), root);
    collective = std::move(*c);
  }
  auto choice = collective ? Expected<PlanChoice>(PlanChoice{}) : choosePlan(config, options, *graph, comm);
  if (!choice) return failure(choice.error(), root);
  const partition::Plan* plan = &choice->plan;
  if (options.describe == "plan") {
    if (root && collective)
      fmt::print("collective: {} {} over {} chips, {} steps, {} transfers, {} cycles predicted\n",
                 schedule::collectiveAlgorithmName(collective->plan.algorithm),
                 schedule::collectiveOpName(collective->plan.op), collective->plan.group.size(),
                 collective->plan.steps.size(), collective->transfers.size(), collective->cycles);
    else if (root) describePlan(*plan, choice->placement, options.json);
    return {};
  }
  if (options.searchOnly) {
    const std::string yamlPath = planYamlPath(config.output.trace);
    Status written;
    if (root) {
      std::error_code ec;
      const auto parent = std::filesystem::path(yamlPath).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent, ec);
      std::ofstream out(yamlPath);
      out << plan->toYaml() << "\n";
      if (!out) written = makeError(ExitCode::kConfig, fmt::format("{}: cannot write the plan file", yamlPath));
    }
    int ok = written.ok();
    MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
    if (!ok) return failure(root ? written.error() : makeError(ExitCode::kConfig, "cannot write the plan file"), root);
    auto writer = TraceWriter::create(config.output.trace, comm);
    if (!writer) return failure(writer.error(), root);
    TraceMeta meta;
    meta.toolVersion = toolVersion();
    meta.configYaml = config.resolvedYaml;
    meta.planYaml = plan->toYaml();
    meta.traceLevel = config.output.level;
    meta.rankMapping = config.simulation.rankMapping;
    meta.clockMhz = cluster.chip().clockMhz;
    meta.chipCount = cluster.chipCount();
    meta.linkCount = static_cast<std::int64_t>(cluster.links().size());
    meta.seed = config.simulation.seed;
    meta.ranks = ranks;
    meta.created = "";
    Status s = writer->writeMeta(meta);
    if (s) s = writer->writeSearchPlans(searchRows(choice->search ? choice->search->ranked
                                                                   : std::vector<partition::RankedPlan>{*choice->given}));
    if (!s) {
      writer->discard();
      return failure(s.error(), root);
    }
    if (auto c = writer->commit(config.output.trace); !c) return failure(c.error(), root);
    if (root) printSearch(*choice, yamlPath, options.json);
    return {};
  }
  if (config.training.enabled && functional)
    return failure(makeError(ExitCode::kConfig, "training: functional mode runs inference steps, training steps "
                                                "run in timing mode"),
                   root);
  // A training step's passes are compiled one at a time, each placing only its own tensors: the
  // whole chip (weights, gradients, optimizer state and stash at once) is checked by the cost
  // model's memory figure for a given plan (the search prunes its candidates on the same figure).
  if (config.training.enabled && choice->given && choice->given->cost.memoryPerChip > cluster.chip().sramBytes()) {
    Diagnostic d = configError(!choice->planFile.empty() ? SourceLocation{choice->planFile, 0, 0, ""}
                                                         : config.parallelism.planWhere,
                               fmt::format("plan {}: the training step needs {} MiB on its fullest chip (weights, "
                                           "gradients, optimizer state and stash), more than its {} MiB of SRAM",
                                           plan->canonical(), choice->given->cost.memoryPerChip >> 20,
                                           cluster.chip().sramBytes() >> 20));
    d.code = ExitCode::kDoesNotFit;
    return failure(d, root);
  }
  if (!plan->purePipeline() && config.simulation.mode == "functional") {
    const SourceLocation where = !choice->planFile.empty() ? SourceLocation{choice->planFile, 0, 0, ""}
                                                           : config.parallelism.planWhere;
    return failure(configError(where, fmt::format("plan {}: functional mode runs pure pipeline plans; sharded "
                                                  "plans (dp, tp, microbatches or interleave > 1) run in timing mode",
                                                  plan->canonical())),
                   root);
  }
  // Programs come from the compiler, or from a directory written earlier by --emit-programs.
  std::vector<isa::Program> compiled;
  std::vector<schedule::CompileReport> reports;
  int compiledSegments = 0, sharedSegments = 0;  // a sharded plan's compute segments: compiled, reused
  std::optional<TrainingFigures> trainingFigures;  // a training step's pipeline
  if (options.programs) {
    auto loaded = loadPrograms(*options.programs, cluster);
    if (!loaded) return failure(loaded.error(), root);
    compiled = std::move(*loaded);
  } else if (collective) {
    compiled = collective->cluster.programs;
  } else {
    schedule::Options compileOptions;
    compileOptions.seed = static_cast<std::uint64_t>(config.simulation.seed);
    compileOptions.annealMoves = 256;
    auto compilePlan = [&](const partition::Plan& p) {
      if (config.training.enabled)
        return scheduleTrainingPlan(*graph, p, config.training, cluster, compileOptions, trainingFigures);
      return p.purePipeline() ? schedule::scheduleCluster(*graph, partition::stagesOf(*graph, p), cluster, compileOptions)
                              : scheduleShardedPlan(*graph, p, cluster, compileOptions);
    };
    auto schedule = compilePlan(*plan);
    // The search ranked the plan by a memory estimate; when the allocator cannot place it, run the
    // best ranked plan that compiles (the same on every rank: compiling is deterministic).
    size_t next = 0;
    while (!schedule &&
           schedule.error().code == ExitCode::kDoesNotFit &&
           choice->search && choice->planFile.empty() &&
           static_cast<int>(choice->skipped.size()) < kMaxPlanFallbacks) {
      choice->skipped.push_back(fmt::format("{} ({})", plan->canonical(), schedule.error().message));
      auto alternative = nextRankedPlan(cluster, *choice, next);
      if (!alternative) break;
      choice->plan = std::move(*alternative);
      plan = &choice->plan;
      schedule = compilePlan(*plan);
    }
    if (!schedule && schedule.error().code == ExitCode::kConfig && schedule.error().where.file.empty()) {
      // A plan the build cannot execute: the error points at where the plan came from.
      const SourceLocation where = !choice->planFile.empty() ? SourceLocation{choice->planFile, 0, 0, ""}
                                                             : config.parallelism.planWhere;
      return failure(configError(where, fmt::format("plan {}: {}", plan->canonical(), schedule.error().message)), root);
    }
    if (!schedule) return failure(schedule.error(), root);
    compiled = std::move(schedule->programs);
    reports = std::move(schedule->reports);
    compiledSegments = schedule->compiledShards;
    sharedSegments = schedule->sharedShards;
  }
  if (options.emitPrograms) {
    Status s;
    if (root) s = emitPrograms(*options.emitPrograms, compiled, reports, cluster.chip());
    int ok = s.ok();
    MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
    if (!ok) return failure(root ? s.error() : makeError(ExitCode::kConfig, "cannot emit programs"), root);
  }
  if (options.compileOnly) {
    if (root && !options.quiet) fmt::print("compiled {} programs into {}\n", compiled.size(), *options.emitPrograms);
    return {};
  }

  // Identical programs are shared: a chip instance is (program reference, port bindings).
  std::map<std::uint64_t, std::shared_ptr<const isa::Program>> unique;
  std::vector<std::shared_ptr<const isa::Program>> programs;
  Cycle predictedMakespan = 0;
  for (auto& p : compiled) {
    predictedMakespan = std::max(predictedMakespan, p.predictedCycles);
    auto& shared = unique[p.contentHash()];
    if (!shared) shared = std::make_shared<const isa::Program>(std::move(p));
    programs.push_back(shared);
  }
  compiled.clear();

  // Chips go to ranks before anything is written, so that too many ranks fail in seconds.
  std::vector<std::int64_t> chipWeights;
  for (const auto& p : programs) chipWeights.push_back(p->instructionCount());
  auto mapping = mapChipsToRanks(config.simulation.rankMapping, cluster, chipWeights, ranks, rank);
  if (!mapping) return failure(mapping.error(), root);
  const std::int64_t cut = cutLinks(cluster, *mapping);

  // The trace file is created before simulating so that a bad path fails in seconds, not hours.
  if (root) {
    std::error_code ec;
    const auto parent = std::filesystem::path(config.output.trace).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  }
  MPI_Barrier(comm);
  auto writer = TraceWriter::create(config.output.trace, comm);
  if (!writer) return failure(writer.error(), root);

  // Event tables are sized before the run: every row's place in the file is known.
  EventSelection selection;
  selection.c2c = config.output.level != "summary";
  selection.instructions = config.output.level == "instructions";
  selection.instructionChips = config.output.instructionChips;
  EventBuffer events(cluster.chip(), programs, selection, config.output.eventBufferRows);
  if (auto s = selection.c2c ? events.check() : Status{}; !s) {
    writer->discard();
    return failure(s.error(), root);
  }
  {
    Status s;
    if (selection.c2c) s = writer->createC2cEvents(events.c2cRowCount());
    if (s && selection.instructions) s = writer->createInstructionEvents(events.instructionRowCount(), opcodeNames());
    bool reportHere = root;
    if (auto agreed = agreeAll(s, comm, reportHere); !agreed) {
      writer->discard();
      return failure(agreed.error(), reportHere);
    }
  }

  sim::KernelRuntime kernels;
  sim::SimOptions simOptions;
  simOptions.bins = 64;
  simOptions.binCycles = std::max<Cycle>(1, ceilDiv(std::max<Cycle>(predictedMakespan, 1), simOptions.bins));
  simOptions.observer = selection.instructions ? &events : nullptr;
  simOptions.faults = config.simulation.faults;
  std::optional<FunctionalSetup> functionalSetup;
  if (functional) {
    auto setup = prepareFunctional(*graph, programs,
                                   {static_cast<std::uint64_t>(config.simulation.seed), options.inputsDir, options.expectDir,
                                    &cluster.chip()});
    if (!setup) {
      writer->discard();
      return failure(setup.error(), root);
    }
    functionalSetup = std::move(*setup);
    simOptions.functional = functionalSetup->options;
  }
  ParallelSimulation simulation(comm, cluster, programs, std::move(*mapping), simOptions);
  ProgressLine progress(root && !options.quiet && !options.json, predictedMakespan);
  WindowHooks hooks;
  if (selection.c2c) {
    hooks.sent = [&](const std::vector<sim::C2CBurst>& bursts) { events.recordBursts(bursts); };
    hooks.wantsFlush = [&] { return events.wantsFlush(); };
    hooks.flush = [&] { return events.flush(*writer); };
  }
  hooks.progressDue = [&] { return progress.due(); };
  hooks.progress = [&](const ProgressReport& report) { progress.print(report); };
  bool reportHere = false;
  auto outcome = simulation.run(interrupt, hooks, reportHere);
  if (!outcome) {
    writer->discard();
    return failure(outcome.error(), reportHere);
  }
  if (functionalSetup && !outcome->interrupted) {
    // Outputs are read back from SRAM on the rank that simulated their chip.
    reportHere = root;
    const auto& localChips = simulation.mapping().localChips;
    const Status checked = checkFunctionalOutputs(*functionalSetup, programs, [&](int chip) -> const sim::Chip* {
      const auto at = std::find(localChips.begin(), localChips.end(), chip);
      return at == localChips.end() ? nullptr : &simulation.chip(static_cast<size_t>(at - localChips.begin()));
    });
    if (auto agreed = agreeAll(checked, comm, reportHere); !agreed) {
      writer->discard();
      return failure(agreed.error(), reportHere);
    }
  }
  if (selection.c2c) {
    reportHere = root;
    const Status flushed = events.flush(*writer);
    if (auto agreed = agreeAll(flushed, comm, reportHere); !agreed) {
      writer->discard();
      return failure(agreed.error(), reportHere);
    }
  }

  // Gather what the chips did.
  const auto& spec = cluster.chip();
  const int unitCount = static_cast<int>(spec.units().size());
  const auto& local = simulation.mapping().localChips;
  std::vector<ChipRow> chipRows;
  std::vector<std::int64_t> unitBusy;
  std::vector<float> timeline;
  std::vector<long long> linkTotals(cluster.links().size() * 4, 0);
  for (size_t i = 0; i < local.size(); ++i) {
    const auto& st = simulation.stats(i);
    const auto& program = *programs[local[i]];
    chipRows.push_back({local[i], st.cycles, program.predictedCycles, program.lowerBoundCycles, st.instructions,
                        st.kindBusy[0], st.kindBusy[1], st.kindBusy[2], st.kindBusy[3], st.kindBusy[4], st.bytesSent,
                        st.bytesReceived, st.sramPeakBytes});
    unitBusy.insert(unitBusy.end(), st.unitBusy.begin(), st.unitBusy.end());
    std::vector<float> chipTimeline = st.utilization;
    chipTimeline.resize(static_cast<size_t>(topology::kUnitKindCount) * simOptions.bins, 0.0f);
    timeline.insert(timeline.end(), chipTimeline.begin(), chipTimeline.end());
    for (const auto& use : st.links) {
      linkTotals[use.link * 4 + (use.aToB ? 0 : 1)] += use.bytes;
      linkTotals[use.link * 4 + (use.aToB ? 2 : 3)] += use.busyCycles;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, linkTotals.data(), static_cast<int>(linkTotals.size()), MPI_LONG_LONG, MPI_SUM, comm);
  // Simulator statistics beyond the trace rows: counted hazards (faults on), SRAM accesses, energy.
  // Energy is summed in whole picojoules so that the total does not depend on how chips are spread over ranks.
  std::vector<long long> simTotals(sim::kHazardKindCount + 5, 0);
  for (size_t i = 0; i < local.size(); ++i) {
    const auto& st = simulation.stats(i);
    for (int k = 0; k < sim::kHazardKindCount; ++k) simTotals[k] += st.hazards[k];
    simTotals[sim::kHazardKindCount] += st.bankConflicts;
    simTotals[sim::kHazardKindCount + 1] += st.sramReads + st.sramWrites;
    simTotals[sim::kHazardKindCount + 2] += st.bytesSent;
    for (Cycle stall : st.unitStall) simTotals[sim::kHazardKindCount + 3] += stall;
    simTotals[sim::kHazardKindCount + 4] += std::llround(st.energy.totalJ() * 1e12);
  }
  MPI_Allreduce(MPI_IN_PLACE, simTotals.data(), static_cast<int>(simTotals.size()), MPI_LONG_LONG, MPI_SUM, comm);
  const double energyJoules = static_cast<double>(simTotals[sim::kHazardKindCount + 4]) * 1e-12;
  const long long hazardsCounted = std::accumulate(simTotals.begin(), simTotals.begin() + sim::kHazardKindCount, 0LL);
  const double bankConflictRate = simTotals[sim::kHazardKindCount + 1] > 0
                                      ? static_cast<double>(simTotals[sim::kHazardKindCount]) /
                                            static_cast<double>(simTotals[sim::kHazardKindCount + 1])
                                      : 0.0;
  std::vector<ChipRow> allRows(cluster.chipCount());
  {
    std::vector<int> counts(ranks), offsets(ranks);
    const int mine = static_cast<int>(chipRows.size() * sizeof(ChipRow));
    MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
    for (int r = 1; r < ranks; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
    MPI_Allgatherv(chipRows.data(), mine, MPI_BYTE, allRows.data(), counts.data(), offsets.data(), MPI_BYTE, comm);
  }
  RunRow run{};
  for (const auto& row : allRows) {
    run.makespanCycles = std::max(run.makespanCycles, row.cycles);
    run.chips += row.instructions > 0;
  }
  run.iterations = config.simulation.iterations;
  run.samples = frontend::samplesPerIteration(config.model, *graph) * run.iterations;
  run.makespanSeconds = static_cast<double>(run.makespanCycles) / (spec.clockMhz * 1e6);
  run.throughputPerSecond = run.makespanSeconds > 0 ? static_cast<double>(run.samples) / run.makespanSeconds : 0;

  std::vector<LinkRow> linkRows;
  for (const auto& link : cluster.links())
    linkRows.push_back({link.id, link.a, link.b, linkTotals[link.id * 4], linkTotals[link.id * 4 + 1],
                        linkTotals[link.id * 4 + 2], linkTotals[link.id * 4 + 3], link.latencyCycles,
                        link.bytesPerCycle});
  std::vector<UnitRow> unitRows;
  const auto units = spec.units();
  for (int u = 0; u < unitCount; ++u) {
    UnitRow row{u, {}, units[u].slice};
    std::snprintf(row.kind, sizeof row.kind, "%s", topology::unitKindName(units[u].kind));
    unitRows.push_back(row);
  }

  TraceMeta meta;
  meta.toolVersion = toolVersion();
  meta.configYaml = config.resolvedYaml;
  meta.planYaml = plan->toYaml();
  meta.traceLevel = config.output.level;
  meta.rankMapping = config.simulation.rankMapping;
  meta.clockMhz = spec.clockMhz;
  meta.chipCount = cluster.chipCount();
  meta.linkCount = static_cast<std::int64_t>(cluster.links().size());
  meta.seed = config.simulation.seed;
  meta.ranks = ranks;
  meta.partial = outcome->interrupted;
  meta.reachedCycle = outcome->reachedCycle;
  // Every rank writes the same attribute values: rank 0's clock decides.
  double wall = std::chrono::duration<double>(Clock::now() - wallStart).count();
  MPI_Bcast(&wall, 1, MPI_DOUBLE, 0, comm);
  meta.wallSeconds = wall;
  char created[32] = {};
  if (root) std::snprintf(created, sizeof created, "%s", isoNow().c_str());
  MPI_Bcast(created, sizeof created, MPI_CHAR, 0, comm);
  meta.created = created;

  Status s;
  if ((s = writer->writeMeta(meta)) && (s = writer->writeChips(chipRows, cluster.chipCount())) &&
      (s = writer->writeUnitBusy(local, unitBusy, unitCount, cluster.chipCount())) && (s = writer->writeUnits(unitRows)) &&
      (s = writer->writeLinks(linkRows)) && (s = writer->writeRun(run)) &&
      (s = writer->writeTimeline(local, timeline, topology::kUnitKindCount, simOptions.bins, simOptions.binCycles,
                                 cluster.chipCount()))) {
  }
  if (s && choice->search) s = writer->writeSearchPlans(searchRows(choice->search->ranked));
  if (!s) {
    writer->discard();
    return failure(s.error(), root);
  }
  const std::string tracePath = outcome->interrupted ? partialPath(config.output.trace) : config.output.trace;
  if (auto c = writer->commit(tracePath); !c) return failure(c.error(), root);
  if (outcome->interrupted)
    return failure(makeError(ExitCode::kInterrupted,
                             fmt::format("interrupted at cycle {}; partial trace written to {}", outcome->reachedCycle,
                                         tracePath)),
                   root);

  // Memory per rank, for the summary (peak resident set of each rank).
  const long long mine[2] = {peakRssBytes(), events.peakBuffered()};
  long long maxima[2] = {0, 0}, rssSum = 0;
  MPI_Reduce(mine, maxima, 2, MPI_LONG_LONG, MPI_MAX, 0, comm);
  MPI_Reduce(&mine[0], &rssSum, 1, MPI_LONG_LONG, MPI_SUM, 0, comm);
  const long long rss[2] = {maxima[0], rssSum}, bufferPeak = maxima[1];
  if (!root) return {};

  // Imbalance between the chips the plan uses: busy cycles summed over all units of a chip.
  std::int64_t busiestChip = -1, busiestBusy = 0;
  double busySum = 0;
  for (const auto& row : allRows) {
    if (row.instructions == 0) continue;
    const std::int64_t busy = row.busyMem + row.busyVxm + row.busyMxm + row.busySxm + row.busyC2c;
    busySum += static_cast<double>(busy);
    if (busiestChip < 0 || busy > busiestBusy) {
      busiestChip = row.chip;
      busiestBusy = busy;
    }
  }
  const double imbalance =
      run.chips > 0 && busySum > 0 ? static_cast<double>(busiestBusy) / (busySum / static_cast<double>(run.chips)) : 1.0;
  // Utilisation of each kind of unit over the makespan, across the chips the plan uses.
  double kindBusy[topology::kUnitKindCount] = {};
  for (const auto& row : allRows) {
    const std::int64_t busy[] = {row.busyMem, row.busyVxm, row.busyMxm, row.busySxm, row.busyC2c};
    for (int k = 0; k < topology::kUnitKindCount; ++k) kindBusy[k] += static_cast<double>(busy[k]);
  }
  // Busy cycles a kind of unit can give per cycle: a MEM slice has a read and a write port, as in
  // the simulator's utilisation timeline; every other unit one.
  auto issueSlots = [&](topology::UnitKind kind) {
    return spec.unitCount(kind) * (kind == topology::UnitKind::kMem ? 2 : 1);
  };
  auto kindUtilisation = [&](int k) {
    const double capacity = static_cast<double>(std::max<Cycle>(run.makespanCycles, 1)) * std::max(run.chips, 1) *
                            issueSlots(static_cast<topology::UnitKind>(k));
    return capacity > 0 ? kindBusy[k] / capacity : 0.0;
  };
  std::vector<LinkRow> busiest = linkRows;
  std::sort(busiest.begin(), busiest.end(), [](const LinkRow& a, const LinkRow& b) {
    const auto ba = std::max(a.busyCyclesAb, a.busyCyclesBa), bb = std::max(b.busyCyclesAb, b.busyCyclesBa);
    return ba != bb ? ba > bb : a.link < b.link;
  });
  while (!busiest.empty() && busiest.back().bytesAb + busiest.back().bytesBa == 0) busiest.pop_back();
  busiest.resize(std::min<size_t>(busiest.size(), 5));
  auto linkUtilisation = [&](const LinkRow& l) {
    return static_cast<double>(std::max(l.busyCyclesAb, l.busyCyclesBa)) / std::max<double>(1, run.makespanCycles);
  };

  if (options.json) {
    nlohmann::json chips = nlohmann::json::array();
    for (const auto& row : allRows)
      chips.push_back({{"chip", row.chip},
                       {"predicted_cycles", row.predictedCycles},
                       {"simulated_cycles", row.cycles},
                       {"lower_bound_cycles", row.lowerBoundCycles},
                       {"instructions", row.instructions},
                       {"bytes_sent", row.bytesSent},
                       {"bytes_received", row.bytesReceived},
                       {"sram_peak_bytes", row.sramPeakBytes}});
    nlohmann::json utilisation;
    for (int k = 0; k < topology::kUnitKindCount; ++k)
      utilisation[topology::unitKindName(static_cast<topology::UnitKind>(k))] = kindUtilisation(k);
    nlohmann::json links = nlohmann::json::array();
    for (const auto& l : busiest)
      links.push_back({{"link", l.link}, {"a", l.a}, {"b", l.b}, {"bytes", l.bytesAb + l.bytesBa},
                       {"utilisation", linkUtilisation(l)}});
    nlohmann::json j = {{"tool", toolVersion()},
                        {"model", config.model.describe()},
                        {"plan", plan->canonical()},
                        {"chips", chips},
                        {"makespan_cycles", run.makespanCycles},
                        {"makespan_seconds", run.makespanSeconds},
                        {"throughput_per_second", run.throughputPerSecond},
                        {"samples", run.samples},
                        {"chips_used", run.chips},
                        {"utilisation", utilisation},
                        {"busiest_links", links},
                        {"imbalance", imbalance},
                        {"ranks", ranks},
                        {"rank_mapping", config.simulation.rankMapping},
                        {"cut_links", cut},
                        {"window_cycles", simulation.lookahead()},
                        {"windows", outcome->windows},
                        {"searched_plan", choice->search ? choice->search->best.canonical() : plan->canonical()},
                        {"predicted_iteration_cycles",
                         choice->runPrediction ? choice->runPrediction->cost.iterationCycles : 0.0},
                        {"event_buffer_peak_rows", bufferPeak},
                        {"peak_rss_bytes_max_rank", rss[0]},
                        {"peak_rss_bytes_all_ranks", rss[1]},
                        {"wall_seconds", wall},
                        {"energy_joules", energyJoules},
                        {"bank_conflict_rate", bankConflictRate},
                        {"c2c_bytes", simTotals[sim::kHazardKindCount + 2]},
                        {"sram_accesses", simTotals[sim::kHazardKindCount + 1]},
                        {"stall_cycles", simTotals[sim::kHazardKindCount + 3]},
                        {"faults_injected", simOptions.faults.enabled()},
                        {"hazards_counted", hazardsCounted},
                        {"trace", tracePath}};
    for (int k = 0; k < sim::kHazardKindCount; ++k)
      j["hazards_by_kind"][sim::hazardKindName(static_cast<sim::HazardKind>(k))] = simTotals[k];
    if (collective) j["collective"] = collectiveFigures(*collective, *graph, run.makespanSeconds);
    if (functionalSetup) j["functional"] = functionalSummary(*functionalSetup);
    if (!choice->placement.method.empty()) j["placement"] = placementJson(choice->placement);
    if (compiledSegments > 0) j["segments"] = {{"compiled", compiledSegments}, {"shared", sharedSegments}};
    if (trainingFigures) {
      j["training"] = trainingJson(*trainingFigures, config.training);
      // The step ends with its pipeline: the simulated makespan is the pipeline's time.
      if (trainingFigures->pipelineOnly && trainingFigures->idealCycles > 0)
        j["training"]["simulated_bubble_fraction"] =
            (static_cast<double>(run.makespanCycles) - trainingFigures->idealCycles) / trainingFigures->idealCycles;
      if (choice->runPrediction)  // the cost model's pipeline part, beside the scheduled one
        j["training"]["predicted_pipeline_cycles"] = choice->runPrediction->cost.pipelineCycles;
    }
    if (!choice->skipped.empty()) j["skipped_plans"] = choice->skipped;
    fmt::print("{}\n", j.dump(2));
    return {};
  }
  fmt::print("{}: {} on {} ({}), plan {}\n\n", toolVersion(), config.model.describe(), topologyName(cluster),
             spec.preset, plan->canonical());
  fmt::print("{:>5} {:>12} {:>12} {:>12} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>10} {:>10}\n", "chip", "predicted",
             "simulated", "lower bnd", "instr", "MEM %", "VXM %", "MXM %", "SXM %", "C2C %", "sent KiB", "SRAM KiB");
  // Large clusters: the first chips and the slowest ones; the trace has every row.
  constexpr size_t kTableHead = 16, kTableSlowest = 8;
  std::vector<const ChipRow*> shown;
  for (const auto& row : allRows)
    if (row.instructions > 0) shown.push_back(&row);
  const size_t working = shown.size();
  if (working > kTableHead + kTableSlowest) {
    std::vector<const ChipRow*> slowest(shown.begin() + kTableHead, shown.end());
    std::partial_sort(slowest.begin(), slowest.begin() + kTableSlowest, slowest.end(),
                      [](const ChipRow* a, const ChipRow* b) { return a->cycles != b->cycles ? a->cycles > b->cycles : a->chip < b->chip; });
    slowest.resize(kTableSlowest);
    std::sort(slowest.begin(), slowest.end(), [](const ChipRow* a, const ChipRow* b) { return a->chip < b->chip; });
    shown.resize(kTableHead);
    shown.insert(shown.end(), slowest.begin(), slowest.end());
  }
  for (const ChipRow* rowPtr : shown) {
    const auto& row = *rowPtr;
    // A chip's utilisation is over its own cycles: how busy it was while it had work.
    const double c = static_cast<double>(std::max<Cycle>(row.cycles, 1));
    auto pct = [&](std::int64_t busy, topology::UnitKind kind) {
      return 100.0 * static_cast<double>(busy) / (c * issueSlots(kind));
    };
    fmt::print("{:>5} {:>12} {:>12} {:>12} {:>8} {:>7.2f} {:>7.2f} {:>7.2f} {:>7.2f} {:>7.2f} {:>10.1f} {:>10.1f}\n",
               row.chip, row.predictedCycles, row.cycles, row.lowerBoundCycles, row.instructions,
               pct(row.busyMem, topology::UnitKind::kMem), pct(row.busyVxm, topology::UnitKind::kVxm),
               pct(row.busyMxm, topology::UnitKind::kMxm), pct(row.busySxm, topology::UnitKind::kSxm),
               pct(row.busyC2c, topology::UnitKind::kC2c), row.bytesSent / 1024.0, row.sramPeakBytes / 1024.0);
  }
  if (working > shown.size())
    fmt::print("  ({} chips with work: the first {} and the {} slowest shown; `tsp-trace summary {}` lists all)\n",
               working, kTableHead, kTableSlowest, tracePath);
  fmt::print("\nmakespan:    {} cycles = {:.3f} us at {} MHz\n", run.makespanCycles, run.makespanSeconds * 1e6,
             spec.clockMhz);
  fmt::print("throughput:  {:.1f} samples/s ({} samples per iteration)\n", run.throughputPerSecond, run.samples);
  if (choice->runPrediction)
    fmt::print("predicted:   {:.0f} cycles by the search's cost model ({:+.1f}% from the simulation)\n",
               choice->runPrediction->cost.iterationCycles,
               100.0 * (choice->runPrediction->cost.iterationCycles - static_cast<double>(run.makespanCycles)) /
                   std::max<double>(1, static_cast<double>(run.makespanCycles)));
  for (const auto& why : choice->skipped)
    fmt::print("skipped:     searched plan {}\n", why);
  if (trainingFigures)
    fmt::print("training:    {} step, pipeline {} cycles, bubble {:.4f} (formula {:.4f}), {} all-reduce buckets, "
               "{} passes compiled, {} shared\n",
               partition::pipelineScheduleName(config.training.schedule), trainingFigures->pipelineCycles,
               trainingFigures->bubble,
               static_cast<double>(trainingFigures->stages - 1) / trainingFigures->microbatches / trainingFigures->chunks,
               trainingFigures->buckets, trainingFigures->compiledPasses, trainingFigures->sharedPasses);
  fmt::print("utilisation:");
  for (int k = 0; k < topology::kUnitKindCount; ++k)
    fmt::print(" {} {:.2f}%", topology::unitKindName(static_cast<topology::UnitKind>(k)), 100 * kindUtilisation(k));
  fmt::print("  (busy unit-cycles over makespan x units of the {} chips used)\n", run.chips);
  if (run.chips > 0)
    fmt::print("imbalance:   busiest chip {} has {:.2f}x the mean busy cycles\n", busiestChip, imbalance);
  for (const auto& l : busiest)
    fmt::print("busy link:   {} (chip {} - {}): {} KiB, busy {:.2f}% of the makespan\n", l.link, l.a, l.b,
               (l.bytesAb + l.bytesBa) / 1024, 100.0 * linkUtilisation(l));
  if (!choice->placement.method.empty()) printPlacement(choice->placement);
  fmt::print("simulation:  {} ranks, {} mapping ({} links cut), {} windows of up to {} cycles, {:.2f} s\n", ranks,
             config.simulation.rankMapping, cut, outcome->windows, simulation.lookahead(), wall);
  fmt::print("memory:      peak RSS {:.1f} MiB on the largest rank, {:.1f} KiB per simulated chip over all ranks\n",
             static_cast<double>(rss[0]) / (1 << 20), static_cast<double>(rss[1]) / 1024.0 / cluster.chipCount());
  if (collective) {
    const auto f = collectiveFigures(*collective, *graph, run.makespanSeconds);
    fmt::print("collective:  {} {} over {} chips, {} bytes: {:.3f} us, algbw {:.3f} GB/s, busbw {:.3f} GB/s\n",
               f["algorithm"].get<std::string>(), f["op"].get<std::string>(), f["chips"].get<int>(),
               f["bytes"].get<std::int64_t>(), f["time_us"].get<double>(), f["algbw_gbps"].get<double>(),
               f["busbw_gbps"].get<double>());
  }
  fmt::print("energy:      {:.3f} mJ estimated (per-op energies of the chip spec)\n", energyJoules * 1e3);
  if (simOptions.faults.enabled())
    fmt::print("faults:      {} hazards counted, bank-conflict rate {:.4f}\n", hazardsCounted, bankConflictRate);
  if (functionalSetup)
    fmt::print("functional:  {} output(s) match {} within |sim - ref| <= atol + rtol*|ref|\n",
               functionalSetup->outputs.size(), functionalSetup->outputs.empty() ? "" : functionalSetup->outputs.front().against);
  fmt::print("trace:       {}\n", tracePath);
  return {};
}

}  // namespace tsp::runtime
