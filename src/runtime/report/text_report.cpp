// tsp-sim's text output: descriptions, the search table and the run summary, for a person reading a terminal.
#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compile/ir/autodiff.h"
#include "compile/passes/passes.h"
#include "partition/training_cost.h"
#include "runtime/event_buffer.h"
#include "runtime/report/report.h"

namespace tsp::runtime::report {

void printPlacementText(const partition::PlacementReport& p) {
  fmt::print("placement:   {}: TP ring hops {:.2f} avg, {} max; PP hops {:.2f} avg, {} max; {} links used, "
             "{:.1f} KiB x hops per iteration\n",
             p.method, p.tpAverageHops, p.tpMaxHops, p.ppAverageHops, p.ppMaxHops, p.linksUsed, p.traffic / 1024);
  if (p.busiestLink >= 0)
    fmt::print("busiest link: {} with {:.1f} KiB per iteration (predicted)\n", p.busiestLink,
               static_cast<double>(p.busiestLinkBytes) / 1024);
}

void printTopologyText(const topology::Cluster& cluster) {
  const auto s = topology::summarize(cluster);
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

void printModelText(const frontend::ModelSpec& spec, const ir::Graph& graph, const ir::Graph* training) {
  std::map<std::string, std::int64_t> byOp;
  for (const auto& op : graph.ops()) ++byOp[ir::opKindName(op.kind)];
  const auto live = passes::analyzeLiveness(graph);
  fmt::print("model: {}\n  nodes: {}  layers: {}  parameters: {}  flops: {} (matmul {})\n", spec.describe(),
             graph.ops().size(), graph.layerCount(), graph.parameters(), graph.flops(), graph.macFlops());
  fmt::print("  weight bytes: {}  KV-cache bytes: {}  peak activation bytes: {}\n  nodes by op:\n",
             graph.weightBytes(), graph.stateBytes(), live.peakLiveBytes);
  for (const auto& [op, count] : byOp) fmt::print("    {:<20} {}\n", op, count);
  if (training)
    fmt::print("  training step: nodes: {}  flops: {} (matmul {})\n", training->ops().size(), training->flops(),
               training->macFlops());
}

void printPlanText(const partition::Plan& plan, const partition::PlacementReport& placement) {
  fmt::print("{}\n", plan.toYaml());
  printPlacementText(placement);
}

void printCollectivePlanText(const schedule::CollectiveSchedule& collective) {
  fmt::print("collective: {} {} over {} chips, {} steps, {} transfers, {} cycles predicted\n",
             schedule::collectiveAlgorithmName(collective.plan.algorithm), schedule::collectiveOpName(collective.plan.op),
             collective.plan.group.size(), collective.plan.steps.size(), collective.transferCount, collective.cycles);
}

void printSearchText(const PlanChoice& choice, const std::string& yamlPath) {
  std::vector<partition::RankedPlan> ranked;
  if (choice.search) ranked = choice.search->ranked;
  else if (choice.given) ranked = {*choice.given};
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
  if (!ranked.empty())
    fmt::print("(samples/s: with as many copies of each plan as the cluster's chips hold; the run's summary gives both)\n");
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
  printPlacementText(choice.placement);
  fmt::print("best plan:   {} written to {}\n", choice.plan.canonical(), yamlPath);
}

namespace {

// The per-chip table. Large clusters: the first chips and the slowest ones; the trace has every row.
void printChipTable(const RunState& state) {
  const auto& spec = state.config.cluster->chip();
  fmt::print("{:>5} {:>12} {:>12} {:>12} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>10} {:>10} {:>7} {:>7} {:>7}\n", "chip",
             "predicted", "simulated", "lower bnd", "instr", "MEM %", "VXM %", "MXM %", "SXM %", "link %", "sent KiB",
             "SRAM KiB", "comp %", "comm %", "bubl %");
  // A chip's link figure is its busiest outgoing link direction (the C2C queues' mean would hide a saturated link).
  std::map<int, std::int64_t> linkBusy;
  for (const auto& l : state.statistics.linkRows) {
    linkBusy[l.a] = std::max(linkBusy[l.a], l.busyCyclesAb);
    linkBusy[l.b] = std::max(linkBusy[l.b], l.busyCyclesBa);
  }
  constexpr size_t kTableHead = 16, kTableSlowest = 8;
  std::vector<const ChipRow*> shown;
  for (const auto& row : state.statistics.allRows)
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
      return 100.0 * static_cast<double>(busy) / (c * issueSlots(spec, kind));
    };
    // The time split is over the makespan: how the chip spent the whole run.
    const double m = static_cast<double>(std::max<Cycle>(state.statistics.run.makespanCycles, 1));
    fmt::print("{:>5} {:>12} {:>12} {:>12} {:>8} {:>7.2f} {:>7.2f} {:>7.2f} {:>7.2f} {:>7.2f} {:>10.1f} {:>10.1f} {:>7.2f} "
               "{:>7.2f} {:>7.2f}\n",
               row.chip, row.predictedCycles, row.cycles, row.lowerBoundCycles, row.instructions,
               pct(row.busyMem, topology::UnitKind::kMem), pct(row.busyVxm, topology::UnitKind::kVxm),
               pct(row.busyMxm, topology::UnitKind::kMxm), pct(row.busySxm, topology::UnitKind::kSxm),
               100.0 * static_cast<double>(linkBusy[row.chip]) / c, row.bytesSent / 1024.0, row.sramPeakBytes / 1024.0,
               100.0 * static_cast<double>(row.computeCycles) / m, 100.0 * static_cast<double>(row.commCycles) / m,
               100.0 * static_cast<double>(row.bubbleCycles) / m);
  }
  fmt::print("  (lower bnd: no schedule of the chip's own work is shorter; for a compiled stage the largest of its critical\n"
             "   path, busiest unit or link and per-unit windows, with other chips' data arriving when they send it; for\n"
             "   sharded and collective programs its busiest unit only, leaving out the links' time;\n"
             "   unit and link %: busy cycles over the chip's cycles, link % on its busiest outgoing link direction;\n"
             "   comp/comm/bubl %: the makespan spent computing, communicating or waiting for a collective's peers, and\n"
             "   in pipeline bubbles (idle before its first work, waiting for a pipeline stage's data, after its\n"
             "   end); the rest is idle waiting on its own results)\n");
  if (working > shown.size())
    fmt::print("  ({} chips with work: the first {} and the {} slowest shown; `tsp-trace summary {}` lists all)\n",
               working, kTableHead, kTableSlowest, state.tracePath);
}

}  // namespace

void printSummaryText(const RunState& state) {
  const RunConfig& config = state.config;
  const topology::Cluster& cluster = *config.cluster;
  const auto& spec = cluster.chip();
  const PlanChoice& choice = state.choice;
  const RunStatistics& stats = state.statistics;
  const RunRow& run = stats.run;
  fmt::print("{}: {} on {} ({}), plan {}\n\n", toolVersion(), config.model.describe(), topologyName(cluster),
             spec.preset, choice.plan.canonical());
  printChipTable(state);
  printAttributionText(state.events->attribution(), spec);
  fmt::print("\nmakespan:    {} cycles = {:.3f} us at {} MHz\n", run.makespanCycles, run.makespanSeconds * 1e6,
             spec.clockMhz);
  if (!state.collective) {
    fmt::print("throughput:  {:.1f} samples/s on the plan's {} chips ({} samples per iteration)\n",
               run.throughputPerSecond, choice.plan.candidate().chips(), run.samples);
    if (const int copies = planCopies(state); copies > 1)
      fmt::print("             {:.1f} samples/s with {} copies of the plan on the cluster's {} chips (as the search "
                 "counts)\n",
                 run.throughputPerSecond * copies, copies, cluster.chipCount());
  }
  if (choice.runPrediction)
    fmt::print("predicted:   {:.0f} cycles by the search's cost model ({:+.1f}% from the simulation)\n",
               choice.runPrediction->cost.iterationCycles,
               100.0 * (choice.runPrediction->cost.iterationCycles - static_cast<double>(run.makespanCycles)) /
                   std::max<double>(1, static_cast<double>(run.makespanCycles)));
  for (const auto& why : choice.skipped)
    fmt::print("skipped:     searched plan {}\n", why);
  if (state.trainingFigures) {
    const TrainingFigures& t = *state.trainingFigures;
    fmt::print("training:    {} step, pipeline {} cycles, bubble {:.4f} (formula {:.4f}), {} all-reduce buckets, "
               "{} passes compiled, {} shared\n",
               partition::pipelineScheduleName(config.training.schedule), t.pipelineCycles, t.bubble,
               static_cast<double>(t.stages - 1) / t.microbatches / t.chunks, t.buckets, t.compiledPasses,
               t.sharedPasses);
  }
  fmt::print("utilisation:");
  for (int k = 0; k < topology::kUnitKindCount; ++k)
    fmt::print(" {} {:.2f}%", topology::unitKindName(static_cast<topology::UnitKind>(k)), 100 * stats.kindUtilisation[k]);
  fmt::print("  (busy unit-cycles over makespan x units of the {} chips used)\n", run.chips);
  if (run.chips > 0)
    fmt::print("imbalance:   busiest chip {} has {:.2f}x the mean busy cycles\n", stats.busiestChip, stats.imbalance);
  for (const auto& busy : stats.busiestLinks) {
    const LinkRow& l = busy.row;
    fmt::print("busy link:   {} (chip {} - {}): {} KiB, busy {:.2f}% of the makespan\n", l.link, l.a, l.b,
               (l.bytesAb + l.bytesBa) / 1024, 100.0 * busy.utilisation);
  }
  if (!choice.placement.method.empty()) printPlacementText(choice.placement);
  if (state.compiledSegments > 0)
    fmt::print("compile:     effort {}, {} distinct segments compiled for {} in all\n", config.compile.effort,
               state.compiledSegments, state.compiledSegments + state.sharedSegments);
  fmt::print("simulation:  {} ranks, {} mapping ({} links cut), {} windows of up to {} cycles, {:.2f} s\n", state.ranks,
             config.simulation.rankMapping, state.cutLinks, state.outcome.windows, state.simulation->lookahead(),
             state.wallSeconds);
  std::vector<std::string> phases;
  for (int p = 0; p < kPhaseCount; ++p)
    if (const auto& seconds = state.phases.seconds[p]; seconds && static_cast<Phase>(p) != Phase::kReport)
      phases.push_back(fmt::format("{} {:.2f} s", phaseName(static_cast<Phase>(p)), *seconds));
  fmt::print("phases:      {} (wall time)\n", fmt::join(phases, ", "));
  fmt::print("memory:      peak RSS {:.1f} MiB on the largest rank, {:.1f} KiB per simulated chip over all ranks\n",
             static_cast<double>(state.peakRssMaxRank) / (1 << 20),
             static_cast<double>(state.peakRssAllRanks) / 1024.0 / cluster.chipCount());
  if (state.collective) {
    const auto f = collectiveFigures(*state.collective, *state.graph, run.makespanSeconds);
    fmt::print("collective:  {} {} over {} chips, {} bytes: {:.3f} us, algbw {:.3f} GB/s, busbw {:.3f} GB/s\n",
               f.algorithm, f.op, f.chips, f.bytes, f.timeUs, f.algbwGbps, f.busbwGbps);
  }
  fmt::print("energy:      {:.3f} mJ estimated (per-op energies of the chip spec)\n", stats.energyJoules * 1e3);
  if (state.simOptions.faults.enabled())
    fmt::print("faults:      {} hazards counted, bank-conflict rate {:.4f}\n", stats.hazardsCounted,
               stats.bankConflictRate);
  if (state.functionalSetup)
    fmt::print("functional:  {} output(s) match {} within |sim - ref| <= atol + rtol*|ref|\n",
               state.functionalSetup->outputs.size(),
               state.functionalSetup->outputs.empty() ? "" : state.functionalSetup->outputs.front().against);
  fmt::print("trace:       {}\n", state.tracePath);
}

}  // namespace tsp::runtime::report
