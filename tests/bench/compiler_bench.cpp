// Benchmarks of the one-chip compiler: scheduled instructions per second, and schedule quality
// (makespan over lower bound, MXM utilisation) reported as counters.
#include <cstdlib>
#include <fstream>
#include <limits>
#include <tuple>

#include <benchmark/benchmark.h>

#include "compile/frontend/builtin_models.h"
#include "compile/schedule/annealer.h"
#include "compile/schedule/plane_order.h"
#include "compile/schedule/shard_compiler.h"

namespace {

using namespace tsp;

ir::Graph builtin(const std::string& name, std::map<std::string, std::string> params, const char* dtype = "fp16") {
  frontend::ModelSpec spec;
  spec.builtin = name;
  spec.params = std::move(params);
  spec.precision.weights = spec.precision.activations = *ir::parseDType(dtype);
  if (std::string(dtype) == "int8") spec.precision.accumulate = ir::DType::kI32;
  return *frontend::buildBuiltinModel(spec);
}

ir::Graph matmul(std::int64_t m, std::int64_t k, std::int64_t n) {
  ir::Graph g;
  const auto x = g.addInput("x", {m, k}, ir::DType::kI8);
  const auto w = g.addWeight("w", {k, n}, ir::DType::kI8);
  g.markOutput(*g.addOp(ir::OpKind::kMatMul, "mm", {x, w}, 0));
  return g;
}

// The ops of one layer, with the tensors it reads from other layers resident.
std::pair<std::vector<ir::OpId>, lower::ShardInterface> layerShard(const ir::Graph& g, int layer) {
  std::vector<ir::OpId> ops;
  std::set<ir::TensorId> resident;
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (g.op(static_cast<ir::OpId>(i)).layer == layer) ops.push_back(static_cast<ir::OpId>(i));
  for (ir::OpId op : ops)
    for (ir::TensorId in : g.op(op).inputs)
      if (g.tensor(in).producer >= 0 && g.op(g.tensor(in).producer).layer != layer) resident.insert(in);
  lower::ShardInterface interface;
  interface.resident.assign(resident.begin(), resident.end());
  return {ops, interface};
}

// TSP_DUMP=FILE writes the readable program of the last compile (to look at a schedule).
void dumpProgram(const isa::Program& program, const topology::ChipSpec& chip) {
  if (const char* path = std::getenv("TSP_DUMP")) std::ofstream(path) << isa::toText(program, chip);
}

void report(benchmark::State& state, const schedule::CompileReport& r) {
  state.counters["cycles"] = static_cast<double>(r.cycles);
  state.counters["list_cycles"] = static_cast<double>(r.listCycles);
  state.counters["lower_bound"] = static_cast<double>(r.lowerBound);
  state.counters["critical_path"] = static_cast<double>(r.criticalPath);
  state.counters["chosen_order_cp"] = static_cast<double>(r.chosenOrderCriticalPath);
  state.counters["busiest"] = static_cast<double>(r.busiestResource);
  state.counters["plane_sequence"] = static_cast<double>(r.planeSequence);
  state.counters["window_bound"] = static_cast<double>(r.resourceWindowBound);
  state.counters["ratio"] = static_cast<double>(r.cycles) / static_cast<double>(std::max<Cycle>(1, r.lowerBound));
  state.counters["mxm_util"] = r.mxmMacUtilisation;
  state.counters["bank_conflicts"] = r.bankConflictRate();
  state.counters["mem_delays"] = r.memDelayRate();
  state.counters["instructions"] = static_cast<double>(r.instructions);
  state.counters["tasks"] = static_cast<double>(r.tasks);
  state.counters["anneal_accepted"] = static_cast<double>(r.annealAccepted);
  state.counters["spills"] = static_cast<double>(r.spills);
  state.counters["segments"] = static_cast<double>(r.segments);
  state.counters["distinct_segments"] = static_cast<double>(r.distinctSegments);
}

// List scheduling alone on a BERT-base-sized FFN stack: the speed target (>= 1 M instructions/s).
void BM_ListScheduleInstructionsPerSecond(benchmark::State& state) {
  topology::ChipSpec chip;
  const ir::Graph g = builtin("mlp", {{"layers", std::to_string(state.range(0))}, {"hidden", "3072"},
                                      {"input", "768"}, {"batch", "512"}});
  std::vector<ir::OpId> ops;
  for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  auto lowered = lower::lowerShard(chip, g, ops, {});
  if (!lowered.ok() || !(*lowered)->problem.check().ok()) {
    state.SkipWithError("lowering failed");
    return;
  }
  const auto& problem = (*lowered)->problem;
  std::int64_t scheduled = 0;
  for (auto _ : state) {
    auto s = schedule::scheduleList(problem, {});
    benchmark::DoNotOptimize(s);
    scheduled += problem.instructionCount();
  }
  state.counters["instructions/s"] = benchmark::Counter(static_cast<double>(scheduled), benchmark::Counter::kIsRate);
  state.counters["instructions"] = static_cast<double>(problem.instructionCount());
  state.counters["dependences"] = static_cast<double>(problem.dependences().size());
}
BENCHMARK(BM_ListScheduleInstructionsPerSecond)->Arg(4)->Arg(8)->Unit(benchmark::kMillisecond);

// The whole pipeline (lower, schedule, 256 annealing moves, colour, verify, emit).
void BM_CompileShard(benchmark::State& state) {
  topology::ChipSpec chip;
  const ir::Graph g = builtin("mlp", {{"layers", "4"}, {"hidden", "3072"}, {"input", "768"}, {"batch", "512"}});
  std::vector<ir::OpId> ops;
  for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  schedule::Options o;
  o.annealMoves = state.range(0);
  std::int64_t scheduled = 0;
  schedule::CompileReport last;
  for (auto _ : state) {
    auto c = schedule::compileShard(chip, g, ops, {}, o);
    if (!c.ok()) {
      state.SkipWithError(c.error().message.c_str());
      return;
    }
    scheduled += c->report.instructions;
    last = c->report;
  }
  report(state, last);
  state.counters["instructions/s"] = benchmark::Counter(static_cast<double>(scheduled), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CompileShard)->Arg(0)->Arg(256)->Unit(benchmark::kMillisecond);

// Quality: the published >= 80 % MXM utilisation on [2304x4096]x[4096xN] INT8.
void BM_QualityInt8MatMul(benchmark::State& state) {
  topology::ChipSpec chip;
  const ir::Graph g = matmul(2304, 4096, state.range(0));
  schedule::CompileReport last;
  for (auto _ : state) {
    auto c = schedule::compileShard(chip, g, {0}, {}, {});
    if (!c.ok()) {
      state.SkipWithError(c.error().message.c_str());
      return;
    }
    last = c->report;
  }
  report(state, last);
}
BENCHMARK(BM_QualityInt8MatMul)->Arg(1280)->Arg(2560)->Arg(4096)->Unit(benchmark::kMillisecond);

// Compiles ops of g (with annealing: 256 moves, or TSP_MOVES; TSP_PLANE_MOVES plane-order moves
// instead of 640) once per iteration and reports the last compile's quality.
void compileForQuality(benchmark::State& state, const topology::ChipSpec& chip, const ir::Graph& g,
                       const std::vector<ir::OpId>& ops, const lower::ShardInterface& interface) {
  schedule::Options o;
  o.annealMoves = 256;
  if (const char* moves = std::getenv("TSP_MOVES")) o.annealMoves = std::atoi(moves);
  if (const char* moves = std::getenv("TSP_PLANE_MOVES")) {  // uncapped by planeOrderWork
    o.planeOrderMoves = std::atoi(moves);
    o.planeOrderWork = std::numeric_limits<std::int64_t>::max();
  }
  schedule::CompileReport last;
  for (auto _ : state) {
    auto c = schedule::compileShard(chip, g, ops, interface, o);
    if (!c.ok()) {
      state.SkipWithError(c.error().message.c_str());
      return;
    }
    last = c->report;
    dumpProgram(c->program, chip);
  }
  report(state, last);
}

// Quality: one built-in transformer layer (BERT-base shapes, layer 1: attention + FFN) alone on a chip.
void BM_QualityTransformerLayer(benchmark::State& state) {
  topology::ChipSpec chip;
  const ir::Graph g = builtin("bert", {{"layers", "1"}, {"hidden", "768"}, {"heads", "12"}, {"ffn", "3072"},
                                       {"seq", "128"}, {"batch", std::to_string(state.range(0))}});
  const auto [ops, interface] = layerShard(g, 1);
  compileForQuality(state, chip, g, ops, interface);
}
BENCHMARK(BM_QualityTransformerLayer)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond);

// Quality: one ResNet-50 layer (0: the stem, then one per bottleneck block, 17: the classifier) alone
// on a chip, INT8, batch 1 (or TSP_BATCH); -1 is the whole network.
void BM_QualityResnet50(benchmark::State& state) {
  topology::ChipSpec chip;
  const char* batch = std::getenv("TSP_BATCH");
  const ir::Graph g = builtin("resnet50", {{"batch", batch ? batch : "1"}}, "int8");
  std::vector<ir::OpId> ops;
  lower::ShardInterface interface;
  if (state.range(0) < 0) {
    for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  } else {
    std::tie(ops, interface) = layerShard(g, static_cast<int>(state.range(0)));
  }
  compileForQuality(state, chip, g, ops, interface);
}
BENCHMARK(BM_QualityResnet50)->DenseRange(0, 17)->Arg(-1)->Unit(benchmark::kMillisecond);

// The order-free lower bound alone on the lowered Quality shards (first argument: 0, 1 the BERT-base
// layer at batch 1, 4; 2 + L ResNet-50 layer L, -1 the whole network), with `rounds` rounds of
// resource-raised heads and tails (second argument; 0: from the data alone). CPU per bound.
void BM_LowerBound(benchmark::State& state) {
  topology::ChipSpec chip;
  const int shard = static_cast<int>(state.range(0));
  const bool bert = shard == 0 || shard == 1;
  const ir::Graph g = bert ? builtin("bert", {{"layers", "1"}, {"hidden", "768"}, {"heads", "12"}, {"ffn", "3072"},
                                                   {"seq", "128"}, {"batch", shard == 0 ? "1" : "4"}})
                                : builtin("resnet50", {{"batch", "1"}}, "int8");
  std::vector<ir::OpId> ops;
  lower::ShardInterface interface;
  if (shard < 0) {
    for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  } else {
    std::tie(ops, interface) = layerShard(g, bert ? 1 : shard - 2);
  }
  auto lowered = lower::lowerShard(chip, g, ops, interface);
  if (!lowered || !(*lowered)->problem.check()) {
    state.SkipWithError("lowering failed");
    return;
  }
  const auto& problem = (*lowered)->problem;
  const auto chains = schedule::planeChains(problem, (*lowered)->planeRuns);
  const auto segments = schedule::planeSegments(problem, (*lowered)->planeRuns);
  schedule::LowerBound b;
  for (auto _ : state) b = schedule::lowerBound(problem, chains, segments, static_cast<int>(state.range(1)));
  state.counters["lower_bound"] = static_cast<double>(b.value());
  state.counters["critical_path"] = static_cast<double>(b.criticalPath);
  state.counters["busiest"] = static_cast<double>(b.busiestResource);
  state.counters["plane_sequence"] = static_cast<double>(b.serialSegments);
  state.counters["window_bound"] = static_cast<double>(b.resourceWindow);
  state.counters["tasks"] = static_cast<double>(problem.tasks().size());
}
BENCHMARK(BM_LowerBound)->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 10, 16, 18, -1}, {0, 1, 2, 4}})->Unit(benchmark::kMillisecond);

// Bank mapping policies (0 linear, 1 prime-modulo, 2 xor) on whole shards: the compile report's
// bank-conflict rate (accesses delayed because the other port's run shared a bank). Second argument:
// 0 the BERT-base layer (batch 4), 1 ResNet-50 (INT8, batch 1), 2 the MLP 2 x 2048 (batch 512).
void BM_BankMapping(benchmark::State& state) {
  topology::ChipSpec chip;
  chip.bankMapping = static_cast<topology::BankMapping>(state.range(0));
  const int model = static_cast<int>(state.range(1));
  const ir::Graph g = model == 0   ? builtin("bert", {{"layers", "1"}, {"hidden", "768"}, {"heads", "12"}, {"ffn", "3072"},
                                                      {"seq", "128"}, {"batch", "4"}})
                      : model == 1 ? builtin("resnet50", {{"batch", "1"}}, "int8")
                                   : builtin("mlp", {{"layers", "2"}, {"hidden", "2048"}, {"batch", "512"}});
  std::vector<ir::OpId> ops;
  lower::ShardInterface interface;
  if (model == 0) {
    std::tie(ops, interface) = layerShard(g, 1);
  } else {
    for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  }
  schedule::Options o;
  o.annealMoves = 0;
  schedule::CompileReport last;
  for (auto _ : state) {
    auto c = schedule::compileShard(chip, g, ops, interface, o);
    if (!c.ok()) {
      state.SkipWithError(c.error().message.c_str());
      return;
    }
    last = c->report;
  }
  report(state, last);
}
BENCHMARK(BM_BankMapping)->ArgsProduct({{0, 1, 2}, {0, 1, 2}})->Unit(benchmark::kMillisecond);

// Compiles all of g's ops as one shard for each iteration and reports the last compile's figures.
void compileWholeGraph(benchmark::State& state, const topology::ChipSpec& chip, const ir::Graph& g,
                       const schedule::Options& o) {
  std::vector<ir::OpId> ops;
  for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  schedule::CompileReport last;
  for (auto _ : state) {
    auto c = schedule::compileShard(chip, g, ops, {}, o);
    if (!c.ok()) {
      state.SkipWithError(c.error().message.c_str());
      return;
    }
    last = c->report;
  }
  report(state, last);
}

// Quality: an MLP shard (the quickstart's layers) with annealing.
void BM_QualityMlp(benchmark::State& state) {
  topology::ChipSpec chip;
  const ir::Graph g = builtin("mlp", {{"layers", "2"}, {"hidden", "2048"}, {"batch", std::to_string(state.range(0))}});
  schedule::Options o;
  o.annealMoves = 256;
  compileWholeGraph(state, chip, g, o);
}
BENCHMARK(BM_QualityMlp)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);

// Whole models compiled for one chip as `tsp-sim` compiles a one-stage plan (all ops in one shard,
// seed 0) at an effort level (second argument: 0 fast, 1 default, 2 max). First argument: 0 the
// built-in BERT-base at batch 8 (INT8, seq 128), 1 the built-in ResNet-50 at batch 1 (INT8). Wall
// time per compile, and the compile report's makespan over its lower bound (`ratio`).
void BM_WholeModelCompile(benchmark::State& state) {
  topology::ChipSpec chip;
  const ir::Graph g = state.range(0) == 0 ? builtin("bert", {{"batch", "8"}}, "int8")
                                          : builtin("resnet50", {{"batch", "1"}}, "int8");
  compileWholeGraph(state, chip, g, schedule::effortOptions(static_cast<schedule::Effort>(state.range(1))));
}
BENCHMARK(BM_WholeModelCompile)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
