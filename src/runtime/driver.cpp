// The tsp-sim run, stage by stage; every stage either succeeds on all ranks or fails on all.
#include "runtime/driver.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compile/frontend/builtin_models.h"
#include "compile/frontend/onnx_importer.h"
#include "compile/passes/passes.h"
#include "compile/schedule/cluster_schedule.h"
#include "partition/plan.h"
#include "runtime/pdes.h"
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

void describeModel(const frontend::ModelSpec& spec, const ir::Graph& graph, bool json) {
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
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("model: {}\n  nodes: {}  layers: {}  parameters: {}  flops: {} (matmul {})\n", spec.describe(),
             graph.ops().size(), graph.layerCount(), graph.parameters(), graph.flops(), graph.macFlops());
  fmt::print("  weight bytes: {}  KV-cache bytes: {}  peak activation bytes: {}\n  nodes by op:\n",
             graph.weightBytes(), graph.stateBytes(), live.peakLiveBytes);
  for (const auto& [op, count] : byOp) fmt::print("    {:<20} {}\n", op, count);
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
Expected<ir::Graph> buildModel(const frontend::ModelSpec& spec, const RunOptions& options, bool root) {
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
    import.loadWeights = false;  // timing runs need shapes only
    return frontend::importOnnx(spec.onnxPath, import);
  }();
  if (!graph) return graph.error();
  auto dump = [&](const std::string& pass, const ir::Graph& g) {
    if (root && options.dumpIrAfter && *options.dumpIrAfter == pass) fmt::print("// IR after {}\n{}", pass, g.print());
  };
  dump("import", *graph);
  return passes::runPipeline(std::move(*graph), *pipeline, dump);
}

void describePlan(const partition::Plan& plan, bool json) {
  if (json) {
    nlohmann::json stages = nlohmann::json::array();
    for (size_t s = 0; s < plan.stageChip.size(); ++s)
      stages.push_back({{"first_layer", plan.stageFirstLayer[s]}, {"chip", plan.stageChip[s]},
                        {"estimated_cycles", plan.stageCycles[s]}});
    nlohmann::json j = {{"plan", plan.canonical()}, {"dp", plan.dp}, {"tp", plan.tp}, {"pp", plan.pp},
                        {"microbatches", plan.microbatches}, {"interleave", plan.interleave}, {"stages", stages}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("{}\n", plan.toYaml());
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
    const std::string report = fmt::format("report_chip{}.json", chip);
    if (chip < reports.size()) {
      std::ofstream out(std::filesystem::path(dir) / report);
      out << schedule::reportJson(reports[chip]) << "\n";
      if (!out) return makeError(ExitCode::kConfig, fmt::format("{}: cannot write {}", dir, report));
    }
    chips.push_back({{"chip", chip}, {"program", it->second}, {"report", report}});
  }
  std::ofstream out(std::filesystem::path(dir) / "manifest.json");
  out << manifest.dump(2) << "\n";
  if (!out) return makeError(ExitCode::kConfig, fmt::format("{}: cannot write manifest.json", dir));
  return {};
}

// Rank-0 progress line on stderr: simulated cycles, windows, events/s, ETA (at most once a second).
class ProgressLine {
 public:
  ProgressLine(bool enabled, Cycle expected) : enabled_(enabled), expected_(expected), start_(Clock::now()) {}
  void update(Cycle cycle, std::int64_t windows, std::int64_t events) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double fraction = expected_ > 0 ? std::min(1.0, static_cast<double>(cycle) / static_cast<double>(expected_)) : 0;
    const double eta = fraction > 0 ? seconds * (1 - fraction) / fraction : 0;
    fmt::print(stderr, "tsp-sim: cycle {} of ~{} ({:.0f}%), {} windows, {:.3g} events/s on rank 0, ETA {:.0f} s\n",
               cycle, expected_, 100 * fraction, windows, events / std::max(seconds, 1e-9), eta);
  }

 private:
  bool enabled_;
  Cycle expected_;
  Clock::time_point start_, last_ = Clock::now();
};

}  // namespace

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

  if (options.describe == "topology") {
    if (root) describeTopology(cluster, options.json);
    return {};
  }
  if (options.overrides) {
    auto overrides = parseOverrides(*options.overrides);
    if (!overrides) return failure(overrides.error(), root);
    for (const auto& [k, v] : *overrides) config.model.overrides[k] = v;
  }
  auto graph = buildModel(config.model, options, root);
  if (!graph) return failure(graph.error(), root);
  if (options.dumpIrAfter && !options.describe) return {};
  if (options.describe == "model") {
    if (root) describeModel(config.model, *graph, options.json);
    return {};
  }
  auto plan = partition::planPipeline(*graph, cluster, config.parallelism);
  if (!plan) return failure(plan.error(), root);
  if (options.describe == "plan") {
    if (root) describePlan(*plan, options.json);
    return {};
  }
  schedule::Options compileOptions;
  compileOptions.seed = static_cast<std::uint64_t>(config.simulation.seed);
  compileOptions.annealMoves = 256;
  auto schedule = schedule::scheduleCluster(*graph, partition::stagesOf(*graph, *plan), cluster, compileOptions);
  if (!schedule) return failure(schedule.error(), root);
  if (options.emitPrograms) {
    Status s;
    if (root) s = emitPrograms(*options.emitPrograms, schedule->programs, schedule->reports, cluster.chip());
    int ok = s.ok();
    MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
    if (!ok) return failure(root ? s.error() : makeError(ExitCode::kConfig, "cannot emit programs"), root);
  }
  if (options.compileOnly) {
    if (root && !options.quiet) fmt::print("compiled {} programs into {}\n", schedule->programs.size(), *options.emitPrograms);
    return {};
  }

  // Identical programs are shared: a chip instance is (program reference, port bindings).
  std::map<std::uint64_t, std::shared_ptr<const isa::Program>> unique;
  std::vector<std::shared_ptr<const isa::Program>> programs;
  Cycle predictedMakespan = 0;
  for (const auto& p : schedule->programs) {
    auto& shared = unique[p.contentHash()];
    if (!shared) shared = std::make_shared<const isa::Program>(p);
    programs.push_back(shared);
    predictedMakespan = std::max(predictedMakespan, p.predictedCycles);
  }

  // The trace file is created before simulating so that a bad path fails in seconds, not hours.
  if (root) {
    std::error_code ec;
    const auto parent = std::filesystem::path(config.output.trace).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  }
  MPI_Barrier(comm);
  auto writer = TraceWriter::create(config.output.trace, comm);
  if (!writer) return failure(writer.error(), root);

  sim::KernelRuntime kernels;
  sim::SimOptions simOptions;
  simOptions.bins = 64;
  simOptions.binCycles = std::max<Cycle>(1, ceilDiv(std::max<Cycle>(predictedMakespan, 1), simOptions.bins));
  ParallelSimulation simulation(comm, cluster, programs, blockMapping(cluster.chipCount(), ranks, rank), simOptions);
  ProgressLine progress(root && !options.quiet && !options.json, predictedMakespan);
  bool reportHere = false;
  auto outcome = simulation.run(
      interrupt, [&](Cycle c, std::int64_t w, std::int64_t e) { progress.update(c, w, e); }, reportHere);
  if (!outcome) {
    writer->discard();
    return failure(outcome.error(), reportHere);
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

  if (!root) return {};
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
    nlohmann::json j = {{"tool", toolVersion()},
                        {"model", config.model.describe()},
                        {"plan", plan->canonical()},
                        {"chips", chips},
                        {"makespan_cycles", run.makespanCycles},
                        {"makespan_seconds", run.makespanSeconds},
                        {"throughput_per_second", run.throughputPerSecond},
                        {"samples", run.samples},
                        {"chips_used", run.chips},
                        {"windows", outcome->windows},
                        {"trace", tracePath}};
    fmt::print("{}\n", j.dump(2));
    return {};
  }
  fmt::print("{}: {} on {} ({}), plan {}\n\n", toolVersion(), config.model.describe(), topologyName(cluster),
             spec.preset, plan->canonical());
  fmt::print("{:>5} {:>12} {:>12} {:>12} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10}\n", "chip", "predicted", "simulated",
             "lower bnd", "instr", "MEM %", "MXM %", "VXM %", "sent KiB", "SRAM KiB");
  double cycleSum = 0;
  Cycle cycleMax = 0;
  double kindBusy[topology::kUnitKindCount] = {}, kindCapacity[topology::kUnitKindCount] = {};
  for (const auto& row : allRows) {
    if (row.instructions == 0) continue;
    const double c = static_cast<double>(std::max<Cycle>(row.cycles, 1));
    auto pct = [&](std::int64_t busy, topology::UnitKind kind) {
      return 100.0 * static_cast<double>(busy) / (c * spec.unitCount(kind));
    };
    fmt::print("{:>5} {:>12} {:>12} {:>12} {:>8} {:>8.2f} {:>8.2f} {:>8.2f} {:>10.1f} {:>10.1f}\n", row.chip,
               row.predictedCycles, row.cycles, row.lowerBoundCycles, row.instructions,
               pct(row.busyMem, topology::UnitKind::kMem), pct(row.busyMxm, topology::UnitKind::kMxm),
               pct(row.busyVxm, topology::UnitKind::kVxm), row.bytesSent / 1024.0, row.sramPeakBytes / 1024.0);
    cycleSum += static_cast<double>(row.cycles);
    cycleMax = std::max(cycleMax, row.cycles);
    const std::int64_t busy[] = {row.busyMem, row.busyVxm, row.busyMxm, row.busySxm, row.busyC2c};
    for (int k = 0; k < topology::kUnitKindCount; ++k) {
      kindBusy[k] += static_cast<double>(busy[k]);
      kindCapacity[k] += c * spec.unitCount(static_cast<topology::UnitKind>(k));
    }
  }
  fmt::print("\nmakespan:    {} cycles = {:.3f} us at {} MHz\n", run.makespanCycles, run.makespanSeconds * 1e6,
             spec.clockMhz);
  fmt::print("throughput:  {:.1f} samples/s ({} samples per iteration)\n", run.throughputPerSecond, run.samples);
  fmt::print("utilisation:");
  for (int k = 0; k < topology::kUnitKindCount; ++k)
    fmt::print(" {} {:.2f}%", topology::unitKindName(static_cast<topology::UnitKind>(k)),
               kindCapacity[k] > 0 ? 100 * kindBusy[k] / kindCapacity[k] : 0.0);
  fmt::print("  (busy cycles over chips used)\n");
  if (run.chips > 0)
    fmt::print("imbalance:   busiest chip {:.2f}x the mean\n",
               static_cast<double>(cycleMax) / (cycleSum / static_cast<double>(run.chips)));
  std::vector<LinkRow> busiest = linkRows;
  std::sort(busiest.begin(), busiest.end(), [](const LinkRow& a, const LinkRow& b) {
    const auto ba = std::max(a.busyCyclesAb, a.busyCyclesBa), bb = std::max(b.busyCyclesAb, b.busyCyclesBa);
    return ba != bb ? ba > bb : a.link < b.link;
  });
  for (size_t i = 0; i < std::min<size_t>(3, busiest.size()); ++i) {
    const auto& l = busiest[i];
    if (l.bytesAb + l.bytesBa == 0) break;
    fmt::print("busy link:   {} (chip {} - {}): {} KiB, {:.2f}% of the makespan\n", l.link, l.a, l.b,
               (l.bytesAb + l.bytesBa) / 1024, 100.0 * std::max(l.busyCyclesAb, l.busyCyclesBa) / std::max<double>(1, run.makespanCycles));
  }
  fmt::print("trace:       {}\n", tracePath);
  return {};
}

}  // namespace tsp::runtime
