// Benchmarks of the compiler and the chip simulator: program entries per second, simulated
// chip-cycles per wall-second, and memory per simulated chip.
#include <benchmark/benchmark.h>

#include <malloc.h>

#include <map>

#include "compile/frontend/builtin_models.h"
#include "compile/schedule/cluster_schedule.h"
#include "compile/schedule/list_scheduler.h"
#include "compile/schedule/shard_compiler.h"
#include "runtime/functional_run.h"
#include "sim/chip.h"

namespace {

using namespace tsp;

ir::Graph mlp(int layers, int hidden, int batch) {
  frontend::ModelSpec spec;
  spec.builtin = "mlp";
  spec.params = {{"layers", std::to_string(layers)}, {"hidden", std::to_string(hidden)},
                 {"batch", std::to_string(batch)}};
  return *frontend::buildBuiltinModel(spec);
}

// The matmul work of BERT-base encoder layers (hidden 768, FFN 3072, sequence 128, FP16): per layer
// the fused QKV projection, the attention output projection, FFN up with GELU and FFN down with the
// residual Add. The attention scores (2 x 128 x 128 x 768 MACs, 2 % of a layer) are left out: the
// IR has no batched matmul yet. Three layers are one chip's shard of a 4-stage pipeline.
ir::Graph bertShard(int layers) {
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  ir::TensorId x = g.addInput("x", {128, 768}, dt);
  for (int l = 0; l < layers; ++l) {
    std::string p = "l";
    p += std::to_string(l);
    p += '.';
    auto n = [&p](const char* what) {
      std::string name = p;
      name += what;
      return name;
    };
    auto qkv = *g.addOp(ir::OpKind::kMatMul, n("qkv"), {x, g.addWeight(n("wqkv"), {768, 2304}, dt)}, l);
    g.markOutput(qkv);
    auto attn = *g.addOp(ir::OpKind::kMatMul, n("attn_out"), {x, g.addWeight(n("wo"), {768, 768}, dt)}, l);
    auto h = *g.addOp(ir::OpKind::kAdd, n("residual1"), {attn, x}, l);
    auto up = *g.addOp(ir::OpKind::kMatMul, n("ffn_up"), {h, g.addWeight(n("w1"), {768, 3072}, dt)}, l);
    up = *g.addOp(ir::OpKind::kAdd, n("ffn_bias"), {up, g.addWeight(n("b1"), {3072}, dt)}, l);
    up = *g.addOp(ir::OpKind::kGelu, n("gelu"), {up}, l);
    auto down = *g.addOp(ir::OpKind::kMatMul, n("ffn_down"), {up, g.addWeight(n("w2"), {3072, 768}, dt)}, l);
    x = *g.addOp(ir::OpKind::kAdd, n("residual2"), {down, h}, l);
  }
  g.markOutput(x);
  return g;
}

// The whole graph as one pipeline stage on a one-chip cluster, through the cluster scheduler: the
// compiler's entry point the runtime uses.
isa::Program compile(const topology::ChipSpec& chip, const ir::Graph& g) {
  topology::TopologyDescription single;
  single.kind = "explicit";
  single.chips = 1;
  const topology::Cluster cluster(chip, single, 1, {});
  schedule::PipelineStage stage;
  for (size_t i = 0; i < g.ops().size(); ++i) stage.ops.push_back(static_cast<ir::OpId>(i));
  return std::move(schedule::scheduleCluster(g, {stage}, cluster)->programs.front());
}

void BM_CompileMlpLayer(benchmark::State& state) {
  topology::ChipSpec chip;
  const ir::Graph g = mlp(1, static_cast<int>(state.range(0)), 64);
  std::int64_t entries = 0;
  for (auto _ : state) {
    auto p = compile(chip, g);
    entries += static_cast<std::int64_t>(p.instructions.size());
    benchmark::DoNotOptimize(p);
  }
  state.counters["entries/s"] = benchmark::Counter(static_cast<double>(entries), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CompileMlpLayer)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

// Timing mode on one core: program entries and simulated chip-cycles per CPU-second (the chip runs
// 900 M cycles/s, so sim_cycles/s above 900 M is faster than the chip). `follower`: every iteration
// is another chip running a program a chip already ran (it shares that chip's program-only checks,
// sim::SimOptions::shareChecks); else every iteration runs every check, as the first chip of a program does.
void simulate(benchmark::State& state, const isa::Program& compiled, bool follower = false) {
  sim::KernelRuntime kernels;
  topology::ChipSpec chip;
  const auto program = std::make_shared<const isa::Program>(compiled);
  sim::SimOptions options;
  options.shareChecks = follower;
  // The timeline as a run has it: 64 bins over the predicted cycles.
  options.binCycles = std::max<Cycle>(1, (compiled.predictedCycles + options.bins - 1) / options.bins);
  if (follower) {
    auto leader = sim::makeTspChip(0, chip, program, std::vector<sim::PortBinding>(chip.c2cPorts), options);
    if (!leader->advanceTo(sim::kNever).ok()) state.SkipWithError("hazard");
  }
  std::int64_t entries = 0, cycles = 0;
  for (auto _ : state) {
    auto sim = sim::makeTspChip(0, chip, program, std::vector<sim::PortBinding>(chip.c2cPorts), options);
    if (!sim->advanceTo(sim::kNever).ok()) state.SkipWithError("hazard");
    entries += sim->stats().instructions;
    cycles += sim->stats().cycles;
  }
  state.counters["entries/s"] = benchmark::Counter(static_cast<double>(entries), benchmark::Counter::kIsRate);
  state.counters["sim_cycles/s"] = benchmark::Counter(static_cast<double>(cycles), benchmark::Counter::kIsRate);
  state.counters["x_chip_speed"] =
      benchmark::Counter(static_cast<double>(cycles) / (chip.clockMhz * 1e6), benchmark::Counter::kIsRate);
  state.counters["entries"] = static_cast<double>(compiled.instructions.size());
  state.counters["cycles"] = static_cast<double>(cycles / std::max<std::int64_t>(1, state.iterations()));
}

void BM_SimulateMlp(benchmark::State& state) {
  topology::ChipSpec chip;
  simulate(state, compile(chip, mlp(2, static_cast<int>(state.range(0)), 64)));
}
BENCHMARK(BM_SimulateMlp)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

// Functional mode on one core: the same MLP programs computing on seeded values (MXM, VXM and MEM
// vectors in the Kokkos kernels), and the check against the reference interpreter's outputs.
void BM_SimulateMlpFunctional(benchmark::State& state) {
  sim::KernelRuntime kernels;
  topology::ChipSpec chip;
  const ir::Graph g = mlp(2, static_cast<int>(state.range(0)), 64);
  const auto program = std::make_shared<const isa::Program>(compile(chip, g));
  auto setup = runtime::prepareFunctional(g, {program}, {0, std::nullopt, std::nullopt});
  if (!setup) {
    state.SkipWithError("functional setup");
    return;
  }
  sim::SimOptions options;
  options.functional = setup->options;
  std::int64_t entries = 0, macs = 0;
  for (auto _ : state) {
    auto sim = sim::makeTspChip(0, chip, program, std::vector<sim::PortBinding>(chip.c2cPorts), options);
    if (!sim->advanceTo(sim::kNever).ok()) state.SkipWithError("functional run");
    if (!runtime::checkFunctionalOutputs(*setup, {program}, [&](int) { return sim.get(); }).ok())
      state.SkipWithError("mismatch");
    entries += sim->stats().instructions;
    macs += 2 * 64 * state.range(0) * state.range(0);
  }
  state.counters["entries/s"] = benchmark::Counter(static_cast<double>(entries), benchmark::Counter::kIsRate);
  state.counters["model_MAC/s"] = benchmark::Counter(static_cast<double>(macs), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SimulateMlpFunctional)->Arg(1024)->Unit(benchmark::kMillisecond);

void BM_SimulateBertShard(benchmark::State& state) {
  topology::ChipSpec chip;
  simulate(state, compile(chip, bertShard(static_cast<int>(state.range(0)))));
}
BENCHMARK(BM_SimulateBertShard)->Arg(1)->Arg(3)->Unit(benchmark::kMillisecond);

// Whole models compiled for one chip (all ops in one shard, effort fast: the program differs from
// the default effort's, not its kind), every check run: 0 the built-in ResNet-50 at batch 1, 1 the
// built-in BERT-base at batch 8 (both INT8). Compiled once per process.
void BM_SimulateWholeModel(benchmark::State& state) {
  static std::map<std::int64_t, isa::Program> compiled;
  topology::ChipSpec chip;
  if (!compiled.count(state.range(0))) {
    frontend::ModelSpec spec;
    spec.builtin = state.range(0) == 0 ? "resnet50" : "bert";
    spec.params = {{"batch", state.range(0) == 0 ? "1" : "8"}};
    spec.precision.weights = spec.precision.activations = ir::DType::kI8;
    spec.precision.accumulate = ir::DType::kI32;
    const ir::Graph g = *frontend::buildBuiltinModel(spec);
    std::vector<ir::OpId> ops;
    for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
    auto c = schedule::compileShard(chip, g, ops, {}, schedule::effortOptions(schedule::Effort::kFast));
    if (!c) {
      state.SkipWithError(c.error().message.c_str());
      return;
    }
    compiled.emplace(state.range(0), std::move(c->program));
  }
  simulate(state, compiled.at(state.range(0)));
}
BENCHMARK(BM_SimulateWholeModel)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Another chip running the BERT-base shard after a first one did (a data-parallel replica).
void BM_SimulateFollowerBertShard(benchmark::State& state) {
  topology::ChipSpec chip;
  simulate(state, compile(chip, bertShard(static_cast<int>(state.range(0)))), true);
}
BENCHMARK(BM_SimulateFollowerBertShard)->Arg(1)->Arg(3)->Unit(benchmark::kMillisecond);

// Heap bytes per simulated chip instance of a BERT-base shard in timing mode, after it ran to the
// end: chips share the program, so this is the chip's own state (queues, streams, statistics). Every
// chip runs every check (a chip sharing another's checks holds no stream runs).
void BM_MemoryPerChipBertShard(benchmark::State& state) {
  sim::KernelRuntime kernels;
  topology::ChipSpec chip;
  const auto program = std::make_shared<const isa::Program>(compile(chip, bertShard(3)));
  const int chips = static_cast<int>(state.range(0));
  sim::SimOptions options;
  options.shareChecks = false;
  double perChip = 0;
  for (auto _ : state) {
    const auto before = mallinfo2().uordblks;
    std::vector<std::unique_ptr<sim::Chip>> instances;
    for (int c = 0; c < chips; ++c) {
      instances.push_back(sim::makeTspChip(c, chip, program, std::vector<sim::PortBinding>(chip.c2cPorts), options));
      if (!instances.back()->advanceTo(sim::kNever).ok()) state.SkipWithError("hazard");
    }
    perChip = static_cast<double>(mallinfo2().uordblks - before) / chips;
    benchmark::DoNotOptimize(instances);
  }
  state.counters["bytes_per_chip"] = perChip;
  state.counters["program_bytes"] =
      static_cast<double>(program->instructions.size() * sizeof(isa::Instruction));
}
BENCHMARK(BM_MemoryPerChipBertShard)->Arg(64)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
