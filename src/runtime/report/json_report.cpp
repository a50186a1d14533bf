// tsp-sim --json: descriptions, the search and the run summary as one JSON document on stdout.
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compile/ir/autodiff.h"
#include "compile/passes/passes.h"
#include "partition/training_cost.h"
#include "runtime/program_files.h"
#include "runtime/report/report.h"

namespace tsp::runtime::report {

namespace {

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

nlohmann::json collectiveJson(const CollectiveFigures& f) {
  return {{"op", f.op},
          {"algorithm", f.algorithm},
          {"chips", f.chips},
          {"bytes", f.bytes},
          {"time_us", f.timeUs},
          {"algbw_gbps", f.algbwGbps},
          {"busbw_gbps", f.busbwGbps},
          {"predicted_cycles", f.predictedCycles}};
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

// What --json reports of a functional run that passed: the element type and, per output, what it
// was compared with and the tolerance.
nlohmann::json functionalJson(const FunctionalSetup& setup) {
  nlohmann::json j;
  j["element"] = setup.options.element == sim::ElementType::kFp16 ? "fp16" : "int8";
  j["outputs"] = nlohmann::json::array();
  for (const auto& check : setup.outputs)
    j["outputs"].push_back({{"name", check.name},
                            {"elements", check.elements()},
                            {"against", check.against},
                            {"atol", check.tolerance.atol},
                            {"rtol", check.tolerance.rtol}});
  return j;
}

void print(const nlohmann::json& j) { fmt::print("{}\n", j.dump(2)); }

}  // namespace

void printTopologyJson(const topology::Cluster& cluster) {
  const auto s = topology::summarize(cluster);
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
  print(j);
}

void printModelJson(const frontend::ModelSpec& spec, const ir::Graph& graph, const ir::Graph* training) {
  std::map<std::string, std::int64_t> byOp;
  for (const auto& op : graph.ops()) ++byOp[ir::opKindName(op.kind)];
  const auto live = passes::analyzeLiveness(graph);
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
  print(j);
}

void printPlanJson(const partition::Plan& plan, const partition::PlacementReport& placement) {
  nlohmann::json stages = nlohmann::json::array();
  for (size_t s = 0; s < plan.stageChip.size(); ++s)
    stages.push_back({{"first_layer", plan.stageFirstLayer[s]}, {"chip", plan.stageChip[s]},
                      {"estimated_cycles", plan.stageCycles[s]}});
  nlohmann::json j = {{"plan", plan.canonical()}, {"dp", plan.dp}, {"tp", plan.tp}, {"pp", plan.pp},
                      {"microbatches", plan.microbatches}, {"interleave", plan.interleave}, {"stages", stages},
                      {"placement", plan.placement}, {"placement_report", placementJson(placement)}};
  print(j);
}

void printSearchJson(const PlanChoice& choice, const std::string& yamlPath) {
  std::vector<partition::RankedPlan> ranked;
  if (choice.search) ranked = choice.search->ranked;
  else if (choice.given) ranked = {*choice.given};
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
  print(j);
}

void printSummaryJson(const RunState& state) {
  const RunStatistics& stats = state.statistics;
  const RunRow& run = stats.run;
  const PlanChoice& choice = state.choice;
  const partition::Plan& plan = choice.plan;
  const RunConfig& config = state.config;
  nlohmann::json chips = nlohmann::json::array();
  for (const auto& row : stats.allRows)
    chips.push_back({{"chip", row.chip},
                     {"predicted_cycles", row.predictedCycles},
                     {"simulated_cycles", row.cycles},
                     {"lower_bound_cycles", row.lowerBoundCycles},
                     {"instructions", row.instructions},
                     {"bytes_sent", row.bytesSent},
                     {"bytes_received", row.bytesReceived},
                     {"sram_peak_bytes", row.sramPeakBytes},
                     {"compute_cycles", row.computeCycles},
                     {"comm_cycles", row.commCycles},
                     {"bubble_cycles", row.bubbleCycles},
                     {"other_cycles", row.otherCycles}});
  nlohmann::json utilisation;
  for (int k = 0; k < topology::kUnitKindCount; ++k)
    utilisation[topology::unitKindName(static_cast<topology::UnitKind>(k))] = stats.kindUtilisation[k];
  nlohmann::json links = nlohmann::json::array();
  for (const auto& busy : stats.busiestLinks) {
    const LinkRow& l = busy.row;
    links.push_back({{"link", l.link}, {"a", l.a}, {"b", l.b}, {"bytes", l.bytesAb + l.bytesBa},
                     {"utilisation", busy.utilisation}});
  }
  nlohmann::json j = {{"tool", toolVersion()},
                      {"model", config.model.describe()},
                      {"plan", plan.canonical()},
                      {"chips", chips},
                      {"makespan_cycles", run.makespanCycles},
                      {"makespan_seconds", run.makespanSeconds},
                      {"throughput_per_second", run.throughputPerSecond},
                      {"samples", run.samples},
                      {"plan_copies", planCopies(state)},
                      {"cluster_throughput_per_second", run.throughputPerSecond * planCopies(state)},
                      {"chips_used", run.chips},
                      {"utilisation", utilisation},
                      {"busiest_links", links},
                      {"imbalance", stats.imbalance},
                      {"ranks", state.ranks},
                      {"rank_mapping", config.simulation.rankMapping},
                      {"cut_links", state.cutLinks},
                      {"window_cycles", state.simulation->lookahead()},
                      {"windows", state.outcome.windows},
                      {"searched_plan", choice.search ? choice.search->best.canonical() : plan.canonical()},
                      {"predicted_iteration_cycles",
                       choice.runPrediction ? choice.runPrediction->cost.iterationCycles : 0.0},
                      {"event_buffer_peak_rows", state.eventBufferPeakRows},
                      {"peak_rss_bytes_max_rank", state.peakRssMaxRank},
                      {"peak_rss_bytes_all_ranks", state.peakRssAllRanks},
                      {"wall_seconds", state.wallSeconds},
                      {"energy_joules", stats.energyJoules},
                      {"bank_conflict_rate", stats.bankConflictRate},
                      {"c2c_bytes", stats.totals.c2cBytes},
                      {"sram_accesses", stats.totals.sramAccesses},
                      {"stall_cycles", stats.totals.stallCycles},
                      {"faults_injected", state.simOptions.faults.enabled()},
                      {"hazards_counted", stats.hazardsCounted},
                      {"trace", state.tracePath}};
  j["phase_seconds"] = nlohmann::json::object();
  for (int p = 0; p < kPhaseCount; ++p)
    if (const auto& seconds = state.phases.seconds[p]; seconds && static_cast<Phase>(p) != Phase::kReport)
      j["phase_seconds"][phaseKey(static_cast<Phase>(p))] = *seconds;
  for (int k = 0; k < sim::kHazardKindCount; ++k)
    j["hazards_by_kind"][sim::hazardKindName(static_cast<sim::HazardKind>(k))] = stats.totals.hazards[k];
  if (state.collective)
    j["collective"] = collectiveJson(collectiveFigures(*state.collective, *state.graph, run.makespanSeconds));
  if (state.functionalSetup) j["functional"] = functionalJson(*state.functionalSetup);
  if (!choice.placement.method.empty()) j["placement"] = placementJson(choice.placement);
  if (state.compiledSegments > 0) j["compile"] = state.compileRecord();
  if (state.trainingFigures) {
    const TrainingFigures& t = *state.trainingFigures;
    j["training"] = trainingJson(t, config.training);
    // The step ends with its pipeline: the simulated makespan is the pipeline's time.
    if (t.pipelineOnly && t.idealCycles > 0)
      j["training"]["simulated_bubble_fraction"] = (static_cast<double>(run.makespanCycles) - t.idealCycles) / t.idealCycles;
    if (choice.runPrediction)  // the cost model's pipeline part, beside the scheduled one
      j["training"]["predicted_pipeline_cycles"] = choice.runPrediction->cost.pipelineCycles;
  }
  if (!choice.skipped.empty()) j["skipped_plans"] = choice.skipped;
  const auto& spec = config.cluster->chip();
  const Attribution& attribution = state.events->attribution();
  auto work = [&](const WorkRow& row) {
    nlohmann::json utilisation;
    for (int k = 0; k < topology::kUnitKindCount; ++k)
      utilisation[topology::unitKindName(static_cast<topology::UnitKind>(k))] = workUtilisation(row, spec, k);
    return nlohmann::json{{"cycles", row.cycles},          {"chip_cycles", row.chipCycles},
                          {"chips", row.chips},            {"instructions", row.instructions},
                          {"busy_cycles", row.busyTotal()}, {"share", workShare(row, attribution)},
                          {"utilisation", utilisation},    {"mem_bytes", row.memBytes},
                          {"c2c_bytes", row.c2cBytes},     {"sram_bytes", row.sramBytes},
                          {"first_cycle", row.firstCycle}, {"last_cycle", row.lastCycle},
                          {"link_busy", row.linkBusy}};
  };
  j["layers"] = nlohmann::json::array();
  for (const auto& row : attribution.layers) {
    auto entry = work(row);
    entry["layer"] = row.id;
    j["layers"].push_back(entry);
  }
  j["ops"] = nlohmann::json::array();
  for (const auto& row : attribution.ops) {
    if (row.instructions == 0) continue;
    const isa::OpOrigin& name = attribution.names[row.id];
    auto entry = work(row);
    entry["op"] = name.op;
    entry["kind"] = name.kind;
    entry["layer"] = name.layer;
    entry["tensor"] = name.tensor;
    j["ops"].push_back(entry);
  }
  print(j);
}

}  // namespace tsp::runtime::report
