// Benchmarks of the compiler and the chip simulator: program entries per second.
#include <benchmark/benchmark.h>

#include "compile/frontend/builtin_models.h"
#include "compile/schedule/shard_compiler.h"
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

isa::Program compile(const topology::ChipSpec& chip, const ir::Graph& g) {
  std::vector<ir::OpId> ops;
  for (size_t i = 0; i < g.ops().size(); ++i) ops.push_back(static_cast<ir::OpId>(i));
  return schedule::compileShard(chip, g, ops, {}, {})->program;
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

void BM_SimulateMlp(benchmark::State& state) {
  sim::KernelRuntime kernels;
  topology::ChipSpec chip;
  const auto program = std::make_shared<const isa::Program>(compile(chip, mlp(2, static_cast<int>(state.range(0)), 64)));
  std::int64_t entries = 0, cycles = 0;
  for (auto _ : state) {
    auto sim = sim::makeTspChip(0, chip, program, std::vector<sim::PortBinding>(chip.c2cPorts), sim::SimOptions{});
    if (!sim->advanceTo(sim::kNever).ok()) state.SkipWithError("hazard");
    entries += sim->stats().instructions;
    cycles += sim->stats().cycles;
  }
  state.counters["entries/s"] = benchmark::Counter(static_cast<double>(entries), benchmark::Counter::kIsRate);
  state.counters["sim_cycles/s"] = benchmark::Counter(static_cast<double>(cycles), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SimulateMlp)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

}  // namespace
