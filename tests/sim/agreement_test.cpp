// Agreement: with no fault injected, every chip's simulated cycles equal the compiler's prediction, in
// timing mode and in functional mode, whose outputs also match the reference interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <yaml-cpp/yaml.h>

#include "compile/frontend/builtin_models.h"
#include "compile/schedule/cluster_schedule.h"
#include "partition/plan.h"
#include "runtime/functional_run.h"
#include "sim/chip.h"
#include "sim/kokkos_environment.h"
#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::sim {
namespace {

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new KokkosEnvironment);

topology::Cluster ring(int chips) {
  const topology::YamlReader reader("ring.yaml");
  const std::string text = "topology: {kind: ring, chips: " + std::to_string(chips) + "}\n";
  auto cluster = topology::loadCluster(reader, YAML::Load(text));
  EXPECT_TRUE(cluster.ok());
  return std::move(*cluster);
}

// The chips of a cluster run in windows no longer than the shortest send-to-arrival time, bursts
// delivered between windows: the runtime's conservative scheme, in one process.
struct ClusterRun {
  std::vector<std::unique_ptr<Chip>> chips;
  Status status;
};

ClusterRun simulate(const topology::Cluster& cluster, const std::vector<isa::Program>& programs,
                    const SimOptions& options = {}) {
  const auto& spec = cluster.chip();
  ClusterRun out;
  for (int c = 0; c < cluster.chipCount(); ++c) {
    std::vector<PortBinding> ports(spec.c2cPorts);
    for (const auto& [port, linkId] : cluster.linksOf(c)) {
      const auto& link = cluster.links()[linkId];
      ports[port] = {linkId, link.other(c), link.portOn(link.other(c)), link.a == c, link.latencyCycles,
                     link.bytesPerCycle};
    }
    out.chips.push_back(makeTspChip(c, spec, std::make_shared<isa::Program>(programs[c]), ports, options));
  }
  const Cycle lookahead = spec.c2cSendCycles + std::max<Cycle>(1, cluster.minLinkLatency());
  Cycle start = 0;
  while (true) {
    std::vector<C2CBurst> bursts;
    for (auto& chip : out.chips) {
      if (auto s = chip->advanceTo(start + lookahead); !s) {
        out.status = s;
        return out;
      }
      for (auto& b : chip->takeOutgoing()) bursts.push_back(b);
    }
    std::sort(bursts.begin(), bursts.end());
    for (const auto& b : bursts) out.chips[b.dstChip]->deliver(b);
    Cycle next = kNever;
    for (auto& chip : out.chips) next = std::min(next, chip->nextEventCycle());
    if (next == kNever) break;
    start = std::max(start + lookahead, next);
  }
  return out;
}

struct Case {
  int chips;
  int layers, hidden, batch;
  ir::DType dtype;
};

class Agreement : public ::testing::TestWithParam<Case> {};

ir::Graph mlpOf(const Case& c) {
  frontend::ModelSpec model;
  model.builtin = "mlp";
  model.params = {{"layers", std::to_string(c.layers)}, {"hidden", std::to_string(c.hidden)},
                  {"batch", std::to_string(c.batch)}};
  model.precision.weights = model.precision.activations = c.dtype;
  model.precision.accumulate = c.dtype == ir::DType::kI8 ? ir::DType::kI32 : ir::DType::kF32;
  return *frontend::buildBuiltinModel(model);
}

// The graph as a pipeline over the cluster, one program per chip (empty when it does not compile).
std::vector<isa::Program> pipelineOf(const ir::Graph& graph, const topology::Cluster& cluster) {
  static const partition::ParallelismConfig kDefaults;  // a static: GCC 12 misreads the temporary's strings
  auto plan = partition::planPipeline(graph, cluster, kDefaults);
  EXPECT_TRUE(plan.ok()) << plan.error().format();
  if (!plan) return {};
  auto schedule = schedule::scheduleCluster(graph, partition::stagesOf(graph, *plan), cluster);
  EXPECT_TRUE(schedule.ok()) << schedule.error().format();
  return schedule ? std::move(schedule->programs) : std::vector<isa::Program>{};
}

TEST_P(Agreement, SimulatedCyclesEqualThePrediction) {
  const Case c = GetParam();
  const topology::Cluster cluster = ring(c.chips);
  const ir::Graph graph = mlpOf(c);
  const std::vector<isa::Program> compiled = pipelineOf(graph, cluster);
  ASSERT_EQ(compiled.size(), static_cast<size_t>(c.chips));
  ClusterRun run = simulate(cluster, compiled);
  ASSERT_TRUE(run.status.ok()) << run.status.error().format();
  std::int64_t instructions = 0;
  Bytes sent = 0;
  for (int chip = 0; chip < c.chips; ++chip) {
    EXPECT_EQ(run.chips[chip]->stats().cycles, compiled[chip].predictedCycles) << "chip " << chip;
    EXPECT_EQ(run.chips[chip]->stats().hazardCount(), 0);
    instructions += run.chips[chip]->stats().instructions;
    sent += run.chips[chip]->stats().bytesSent;
  }
  EXPECT_GT(instructions, 0);
  if (c.chips > 1) {
    EXPECT_GT(sent, 0);  // the pipeline's activations crossed links
  }
}

// Functional mode runs the same programs on seeded values: the cycles still agree, the activations
// cross the links as bytes, and the outputs read back from SRAM match the reference interpreter.
TEST_P(Agreement, FunctionalOutputsMatchTheInterpreter) {
  const Case c = GetParam();
  const topology::Cluster cluster = ring(c.chips);
  const ir::Graph graph = mlpOf(c);
  const std::vector<isa::Program> compiled = pipelineOf(graph, cluster);
  ASSERT_EQ(compiled.size(), static_cast<size_t>(c.chips));
  std::vector<std::shared_ptr<const isa::Program>> programs;
  for (const auto& p : compiled) programs.push_back(std::make_shared<const isa::Program>(p));
  auto setup = runtime::prepareFunctional(graph, programs, {7, std::nullopt, std::nullopt});
  ASSERT_TRUE(setup.ok()) << setup.error().format();
  SimOptions options;
  options.functional = setup->options;
  ClusterRun run = simulate(cluster, compiled, options);
  ASSERT_TRUE(run.status.ok()) << run.status.error().format();
  for (int chip = 0; chip < c.chips; ++chip)
    EXPECT_EQ(run.chips[chip]->stats().cycles, compiled[chip].predictedCycles) << "chip " << chip;
  const Status checked =
      runtime::checkFunctionalOutputs(*setup, programs, [&](int chip) { return run.chips[chip].get(); });
  EXPECT_TRUE(checked.ok()) << checked.error().format();
  // The check can fail: a wrong reference is found.
  auto wrong = *setup;
  wrong.outputs.front().reference.front() += 1.0;
  EXPECT_EQ(runtime::checkFunctionalOutputs(wrong, programs, [&](int chip) { return run.chips[chip].get(); }).error().code,
            ExitCode::kFunctionalMismatch);
}

// A two-chip pipeline over a link of 4 lanes x 30 Gb/s less 2.5 % framing, 19.69 cycles a vector:
// the activations cross at that exact rate. The sender's link is busy at most ceil(k x 19.69) cycles
// for each burst of k vectors (not k x 20; less where bursts leave back to back), the first receive on the second chip reads its last vector
// as it arrives, and the simulated cycles equal the prediction on both chips.
TEST(PointToPoint, APipelineSendsAtTheLinksExactRate) {
  const topology::Cluster cluster = ring(2);
  const ir::Graph graph = mlpOf(Case{2, 2, 1024, 8, ir::DType::kI8});
  static const partition::ParallelismConfig kDefaults;
  auto plan = partition::planPipeline(graph, cluster, kDefaults);
  ASSERT_TRUE(plan.ok()) << plan.error().format();
  auto schedule = schedule::scheduleCluster(graph, partition::stagesOf(graph, *plan), cluster);
  ASSERT_TRUE(schedule.ok()) << schedule.error().format();
  const double t = cluster.links()[0].vectorCycles(cluster.chip().vectorBytes);
  ASSERT_NEAR(t, 320 / 16.25, 1e-9);
  ASSERT_FALSE(schedule->transfers.empty());
  const schedule::C2CTransfer* first = &schedule->transfers.front();
  Cycle exact = 0, rounded = 0;
  std::int64_t vectors = 0;
  for (const auto& x : schedule->transfers) {
    EXPECT_DOUBLE_EQ(x.spacing, t);
    EXPECT_EQ(x.srcChip, first->srcChip);
    exact += topology::serializationCycles(x.vectors, t);
    rounded += Cycle{x.vectors} * 20;
    vectors += x.vectors;
    if (x.arriveCycle < first->arriveCycle) first = &x;
  }
  ClusterRun run = simulate(cluster, schedule->programs);
  ASSERT_TRUE(run.status.ok()) << run.status.error().format();
  for (int chip = 0; chip < 2; ++chip) {
    EXPECT_EQ(run.chips[chip]->stats().cycles, schedule->programs[chip].predictedCycles) << "chip " << chip;
    EXPECT_EQ(run.chips[chip]->stats().hazardCount(), 0);
  }
  Cycle busy = 0;
  for (const auto& use : run.chips[first->srcChip]->stats().links) busy += use.busyCycles;
  // Bursts that leave back to back continue one stream (topology::streamCycles): at most the
  // bursts' own ceil(k x 19.69) each, at least the whole stream's.
  EXPECT_LE(busy, exact);
  EXPECT_GE(busy, topology::serializationCycles(vectors, t));
  EXPECT_LT(busy, rounded);
  const isa::Instruction* receive = nullptr;
  for (const auto& i : schedule->programs[first->dstChip].instructions)
    if (i.op == isa::Opcode::kC2cReceive && (!receive || i.issue < receive->issue)) receive = &i;
  ASSERT_NE(receive, nullptr);
  ASSERT_EQ(receive->repeat, first->vectors);
  EXPECT_EQ(receive->issue + Cycle{receive->repeat - 1} * receive->interval,
            first->arriveCycle + topology::serializationCycles(first->vectors - 1, t));
}

// The matmul work of small transformer encoder layers (as the simulator benchmark's BERT shard):
// QKV and output projections, a residual Add of two activations, FFN up with bias and a fused GELU,
// FFN down and the second residual; two layers pipelined over two chips, FP16.
TEST(FunctionalAgreement, EncoderLayerMatmulsMatchTheInterpreter) {
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  ir::TensorId x = g.addInput("x", {48, 320}, dt);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "l" + std::to_string(l) + ".";
    auto qkv = *g.addOp(ir::OpKind::kMatMul, p + "qkv", {x, g.addWeight(p + "wqkv", {320, 960}, dt)}, l);
    g.markOutput(qkv);
    auto attn = *g.addOp(ir::OpKind::kMatMul, p + "attn_out", {x, g.addWeight(p + "wo", {320, 320}, dt)}, l);
    auto h = *g.addOp(ir::OpKind::kAdd, p + "residual1", {attn, x}, l);
    auto up = *g.addOp(ir::OpKind::kMatMul, p + "ffn_up", {h, g.addWeight(p + "w1", {320, 1280}, dt)}, l);
    up = *g.addOp(ir::OpKind::kAdd, p + "ffn_bias", {up, g.addWeight(p + "b1", {1280}, dt)}, l);
    up = *g.addOp(ir::OpKind::kGelu, p + "gelu", {up}, l);
    auto down = *g.addOp(ir::OpKind::kMatMul, p + "ffn_down", {up, g.addWeight(p + "w2", {1280, 320}, dt)}, l);
    x = *g.addOp(ir::OpKind::kAdd, p + "residual2", {down, h}, l);
  }
  g.markOutput(x);
  const topology::Cluster cluster = ring(2);
  const std::vector<isa::Program> compiled = pipelineOf(g, cluster);
  ASSERT_EQ(compiled.size(), 2u);
  std::vector<std::shared_ptr<const isa::Program>> programs;
  for (const auto& p : compiled) programs.push_back(std::make_shared<const isa::Program>(p));
  auto setup = runtime::prepareFunctional(g, programs, {11, std::nullopt, std::nullopt});
  ASSERT_TRUE(setup.ok()) << setup.error().format();
  ASSERT_EQ(setup->outputs.size(), 3u);  // both layers' QKV and the last residual
  SimOptions options;
  options.functional = setup->options;
  ClusterRun run = simulate(cluster, compiled, options);
  ASSERT_TRUE(run.status.ok()) << run.status.error().format();
  for (int chip = 0; chip < 2; ++chip) EXPECT_EQ(run.chips[chip]->stats().cycles, compiled[chip].predictedCycles);
  const Status checked =
      runtime::checkFunctionalOutputs(*setup, programs, [&](int chip) { return run.chips[chip].get(); });
  EXPECT_TRUE(checked.ok()) << checked.error().format();
}

// A small conv graph on one chip in functional mode: its 4-D maps are stored channels-last, the Conv
// weights tap-major and a gathered Conv input im2col. Returns the run's status after the output check.
Status runConvGraph(const ir::Graph& g) {
  const topology::Cluster cluster = ring(1);
  const std::vector<isa::Program> compiled = pipelineOf(g, cluster);
  if (compiled.size() != 1) return makeError(ExitCode::kInternal, "the graph did not compile");
  std::vector<std::shared_ptr<const isa::Program>> programs{std::make_shared<const isa::Program>(compiled[0])};
  auto setup = runtime::prepareFunctional(g, programs, {5, std::nullopt, std::nullopt});
  if (!setup) return setup.error();
  SimOptions options;
  options.functional = setup->options;
  ClusterRun run = simulate(cluster, compiled, options);
  if (!run.status) return run.status;
  EXPECT_EQ(run.chips[0]->stats().cycles, compiled[0].predictedCycles);
  return runtime::checkFunctionalOutputs(*setup, programs, [&](int) { return run.chips[0].get(); });
}

TEST(FunctionalAgreement, ConvWithoutPaddingMatchesTheInterpreter) {
  // Implicit GEMM (one K tile per tap) with the bias and ReLU epilogue, on a feature map made on chip.
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  auto x = *g.addOp(ir::OpKind::kRelu, "relu_in", {g.addInput("x", {1, 160, 8, 8}, dt)}, 0);
  auto y = *g.addOp(ir::OpKind::kConv, "conv", {x, g.addWeight("w", {32, 160, 3, 3}, dt), g.addWeight("b", {32}, dt)},
                    {{"kernel_shape", std::vector<std::int64_t>{3, 3}}}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kRelu, "relu_out", {y}, 0));
  const Status s = runConvGraph(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalAgreement, WindowGatheredConvMatchesTheInterpreter) {
  // A graph input read only by a Conv whose window fits a vector arrives im2col (zero where padded).
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  auto y = *g.addOp(ir::OpKind::kConv, "conv", {g.addInput("x", {1, 3, 9, 9}, dt), g.addWeight("w", {8, 3, 3, 3}, dt)},
                    {{"kernel_shape", std::vector<std::int64_t>{3, 3}}, {"strides", std::vector<std::int64_t>{2, 2}},
                     {"pads", std::vector<std::int64_t>{1, 1, 1, 1}}},
                    0);
  g.markOutput(*g.addOp(ir::OpKind::kAdd, "add", {y, y}, 0));
  const Status s = runConvGraph(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalAgreement, PaddedImplicitConvMatchesTheInterpreter) {
  // Padding taps read the nearest rows in the timing model; each compute's window operand realigns
  // the stream to the output pixels and zeroes the padding.
  ir::Graph g;
  const auto dt = ir::DType::kF16;
  auto x = *g.addOp(ir::OpKind::kRelu, "relu_in", {g.addInput("x", {1, 160, 8, 8}, dt)}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kConv, "conv", {x, g.addWeight("w", {16, 160, 3, 3}, dt)},
                        {{"kernel_shape", std::vector<std::int64_t>{3, 3}}, {"pads", std::vector<std::int64_t>{1, 1, 1, 1}}},
                        0));
  const Status s = runConvGraph(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

TEST(FunctionalAgreement, MaxPoolOverTwoCopiesMatchesTheInterpreter) {
  // The Conv's map, read nine times per pixel by the pool, is written twice by one stream; each pool
  // pass folds two taps (one from each copy, each realigned through its window: src and src2).
  ir::Graph g;
  using Ints = std::vector<std::int64_t>;
  const auto dt = ir::DType::kI8;
  auto y = *g.addOp(ir::OpKind::kConv, "conv", {g.addInput("x", {1, 3, 32, 32}, dt), g.addWeight("w", {64, 3, 7, 7}, dt)},
                    {{"strides", Ints{2, 2}}, {"pads", Ints{3, 3, 3, 3}}}, 0);
  y = *g.addOp(ir::OpKind::kRelu, "relu", {y}, 0);
  g.markOutput(*g.addOp(ir::OpKind::kMaxPool, "pool", {y},
                        {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}, 0));
  const std::vector<isa::Program> compiled = pipelineOf(g, ring(1));
  ASSERT_EQ(compiled.size(), 1u);
  int copies = 0, twoWindows = 0;
  for (const auto& t : compiled[0].tensors)
    if (t.name == g.tensor(y).name) copies = t.replicas;
  for (const auto& i : compiled[0].instructions)
    if (i.operand >= 0 && compiled[0].operands[static_cast<size_t>(i.operand)].window2 >= 0) ++twoWindows;
  EXPECT_EQ(copies, 2);
  EXPECT_GT(twoWindows, 0);
  const Status s = runConvGraph(g);
  EXPECT_TRUE(s.ok()) << s.error().format();
}

INSTANTIATE_TEST_SUITE_P(Mlps, Agreement,
                         ::testing::Values(Case{1, 1, 320, 1, ir::DType::kI8}, Case{1, 3, 640, 24, ir::DType::kF16},
                                           Case{2, 2, 1024, 8, ir::DType::kI8}, Case{4, 4, 2048, 64, ir::DType::kF16},
                                           Case{4, 8, 512, 16, ir::DType::kI8}, Case{3, 3, 4096, 4, ir::DType::kF16},
                                           Case{8, 8, 1280, 32, ir::DType::kI8},
                                           // 512 rows: activations cut into segments over several MEM slices
                                           Case{2, 2, 640, 512, ir::DType::kF16},
                                           // 10,000 rows: a tile longer than a slice crosses the link in
                                           // two segments, which must leave back to back
                                           Case{2, 2, 320, 10000, ir::DType::kI8}));

}  // namespace
}  // namespace tsp::sim
