// Benchmarks of the MPI runtime: PDES speed on a 64-chip ring (run under mpirun -np 1 and 2 for
// parallel efficiency) and memory per simulated chip.
#include <benchmark/benchmark.h>
#include <mpi.h>
#include <yaml-cpp/yaml.h>

#include <csignal>
#include <fstream>
#include <unistd.h>

#include <fmt/format.h>

#include "compile/schedule/shard_compiler.h"
#include "compile/schedule/cluster_schedule.h"
#include "runtime/pdes.h"
#include "support/allocator.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace {

using namespace tsp;

topology::Cluster ring(int chips) {
  topology::YamlReader reader("bench.yaml");
  return std::move(*topology::loadCluster(reader, YAML::Load(fmt::format("{{topology: {{kind: ring, chips: {}}}}}", chips))));
}

// A ring in steady state, every chip busy at once: in each of `steps` steps a chip runs one MLP
// layer (MatMul + bias + ReLU) on the activation it holds, sends the result to its right
// neighbour and receives the next activation from its left one, as the stages of a full
// pipeline do. Every chip runs the same schedule, so a chip's receives are its own sends'
// cycles + the link; programs differ only in which port faces which neighbour.
struct RingWorkload {
  ir::Graph graph;
  std::vector<std::shared_ptr<const isa::Program>> programs;
};

Expected<RingWorkload> ringWorkload(const topology::Cluster& cluster, int steps, int hidden, int batch) {
  RingWorkload w;
  const auto& chip = cluster.chip();
  std::vector<ir::TensorId> inputs;
  std::vector<std::vector<ir::OpId>> layerOps(steps);
  std::vector<ir::TensorId> outputs;
  for (int s = 0; s < steps; ++s) {
    // Step s's input is the left neighbour's step s - 1 output and carries its name: a receive checks
    // that the burst it takes is of the tensor it expects.
    const std::string inputName = s == 0 ? std::string("x0") : fmt::format("relu{}.out", s - 1);
    inputs.push_back(w.graph.addInput(inputName, {batch, hidden}, ir::DType::kI8));
    const auto weight = w.graph.addWeight(fmt::format("w{}", s), {hidden, hidden}, ir::DType::kI8);
    const auto bias = w.graph.addWeight(fmt::format("b{}", s), {hidden}, ir::DType::kI8);
    auto y = w.graph.addOp(ir::OpKind::kMatMul, fmt::format("fc{}", s), {inputs.back(), weight}, s);
    if (!y) return y.error();
    auto z = w.graph.addOp(ir::OpKind::kAdd, fmt::format("bias{}", s), {*y, bias}, s);
    if (!z) return z.error();
    auto r = w.graph.addOp(ir::OpKind::kRelu, fmt::format("relu{}", s), {*z}, s);
    if (!r) return r.error();
    for (size_t op = w.graph.ops().size() - 3; op < w.graph.ops().size(); ++op)
      layerOps[s].push_back(static_cast<ir::OpId>(op));
    outputs.push_back(*r);
  }
  std::map<std::pair<int, int>, std::shared_ptr<const isa::Program>> byPorts;
  for (int c = 0; c < cluster.chipCount(); ++c) {
    const int right = (c + 1) % cluster.chipCount(), left = (c + cluster.chipCount() - 1) % cluster.chipCount();
    int sendLink = -1, recvLink = -1;
    for (const auto& [port, linkId] : cluster.linksOf(c)) {
      if (cluster.links()[linkId].other(c) == right) sendLink = linkId;
      if (cluster.links()[linkId].other(c) == left) recvLink = linkId;
    }
    const auto& out = cluster.links()[sendLink];
    const auto& in = cluster.links()[recvLink];
    const std::pair<int, int> ports{out.portOn(c), in.portOn(c)};
    auto& program = byPorts[ports];
    if (!program) {
      // One shard for all steps: step s+1's input arrives from the left neighbour, which runs the
      // same program, so its arrival is this chip's own send of step s + the link.
      const int interval = schedule::linkVectorInterval(chip, out);
      std::vector<ir::OpId> ops;
      lower::ShardInterface interface;
      for (int s = 0; s < steps; ++s) {
        ops.insert(ops.end(), layerOps[s].begin(), layerOps[s].end());
        if (s + 1 == steps) break;
        lower::SendPlan send;
        send.tensor = outputs[s];
        send.port = ports.first;
        send.interval = interval;
        send.spacing = interval;
        interface.sends.push_back(send);
        lower::ReceivePlan receive;
        receive.tensor = inputs[s + 1];
        receive.port = ports.second;
        receive.interval = interval;
        receive.mirrorsSend = s;
        receive.sendToArrival = chip.c2cSendCycles + in.latencyCycles;
        interface.receives.push_back(receive);
      }
      auto compiled = schedule::compileShard(chip, w.graph, ops, interface, {});
      if (!compiled) return compiled.error();
      program = std::make_shared<const isa::Program>(compiled->program);
    }
    w.programs.push_back(program);
  }
  return w;
}

// Current resident set in bytes (Linux).
long long residentBytes() {
  std::ifstream statm("/proc/self/statm");
  long long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// The whole window loop on MPI_COMM_WORLD's ranks: chips spread in blocks, every instruction
// simulated (`share`: off, every chip runs every check; on, the chips running one program share its
// program-only checks, sim::SimOptions::shareChecks). Run it under mpirun -np 1 and -np 2: efficiency
// = time(1) / (2 * time(2)).
void ringRun(benchmark::State& state, bool share) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  sim::KernelRuntime kernels;
  const auto cluster = ring(64);
  const auto workload = ringWorkload(cluster, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 256);
  if (!workload) {
    state.SkipWithError(workload.error().format().c_str());
    return;
  }
  volatile std::sig_atomic_t never = 0;
  std::int64_t events = 0, windows = 0, chipCycles = 0;
  for (auto _ : state) {
    // Timed: the window loop only (chip instances and the neighbour communicator are set-up).
    state.PauseTiming();
    sim::SimOptions options;
    options.shareChecks = share;
    runtime::ParallelSimulation simulation(MPI_COMM_WORLD, cluster, workload->programs,
                                           runtime::blockMapping(64, ranks, rank), options);
    MPI_Barrier(MPI_COMM_WORLD);
    state.ResumeTiming();
    bool reportHere = false;
    auto outcome = simulation.run(&never, {}, reportHere);
    if (!outcome) {
      state.SkipWithError(outcome.error().format().c_str());
      break;
    }
    long long mine[2] = {outcome->events, 0}, all[2] = {0, 0};
    for (size_t i = 0; i < simulation.mapping().localChips.size(); ++i) mine[1] += simulation.stats(i).cycles;
    MPI_Allreduce(mine, all, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    events += all[0];
    chipCycles += all[1];
    windows += outcome->windows;
  }
  state.counters["ranks"] = ranks;
  state.counters["windows/run"] = static_cast<double>(windows) / static_cast<double>(state.iterations());
  state.counters["events/run"] = static_cast<double>(events) / static_cast<double>(state.iterations());
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  // Simulated chip-cycles (of all 64 chips) per wall-second, against the chip's 900 M cycles/s.
  state.counters["x_chip_speed"] = benchmark::Counter(
      static_cast<double>(chipCycles) / (cluster.chip().clockMhz * 1e6), benchmark::Counter::kIsRate);
}
void BM_PdesRing64(benchmark::State& state) { ringRun(state, false); }
BENCHMARK(BM_PdesRing64)->Args({24, 2048})->Args({64, 1280})->Args({6, 3072})->Iterations(10)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same 64-chip ring with the chips that run one program sharing its program-only checks.
void BM_SharedChecksRing64(benchmark::State& state) { ringRun(state, true); }
BENCHMARK(BM_SharedChecksRing64)->Args({24, 2048})->Args({64, 1280})->Args({6, 3072})->Iterations(10)->Unit(benchmark::kMillisecond)->UseRealTime();

// Resident memory a simulated chip adds: N chips on one rank share one program, so the growth is
// the chip instances (units, streams, ports, statistics, timeline) and their run-time state.
void BM_MemoryPerChip(benchmark::State& state) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  sim::KernelRuntime kernels;
  const int chips = static_cast<int>(state.range(0));
  const auto cluster = ring(chips);
  const auto workload = ringWorkload(cluster, 4, 1024, 64);
  if (!workload) {
    state.SkipWithError(workload.error().format().c_str());
    return;
  }
  volatile std::sig_atomic_t never = 0;
  double perChip = 0;
  for (auto _ : state) {
    const long long before = residentBytes();
    MPI_Comm self;
    MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &self);  // one rank holds every chip
    {
      runtime::ParallelSimulation simulation(self, cluster, workload->programs, runtime::blockMapping(chips, 1, 0),
                                             sim::SimOptions{});
      bool reportHere = false;
      auto outcome = simulation.run(&never, {}, reportHere);
      if (!outcome) state.SkipWithError(outcome.error().format().c_str());
      perChip = static_cast<double>(residentBytes() - before) / chips;
    }
    MPI_Comm_free(&self);
  }
  state.counters["bytes/chip"] = perChip;
}
BENCHMARK(BM_MemoryPerChip)->Arg(1024)->Arg(4096)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

// MPI lives for the whole benchmark process; ranks other than 0 run the same benchmarks (the
// collectives need them) but do not print.
int main(int argc, char** argv) {
  tsp::support::keepFreedMemory();  // first, as in tsp-sim's main
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  MPI_Finalize();
  return 0;
}
