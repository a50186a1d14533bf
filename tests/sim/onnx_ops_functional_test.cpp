// The imported op forms of tests/compile/make_op_models.py end to end: import (FP16 storage), compile
// for one chip, simulate on the cases' inputs in exactly the predicted cycles, and compare the outputs
// read back from SRAM with the reference interpreter and with numpy's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "compile/frontend/onnx_importer.h"
#include "compile/schedule/cluster_schedule.h"
#include "runtime/functional_run.h"
#include "sim/chip.h"
#include "sim/kokkos_environment.h"
#include "sim/onnx_node_cases.h"

namespace tsp::sim {
namespace {

namespace fs = std::filesystem;
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new KokkosEnvironment);

// Runs case `dir` (compile, simulate, check against the interpreter, then against output_N.pb).
Status runCase(const fs::path& dir, bool againstData) {
  frontend::ImportOptions options;
  options.precision = frontend::Precision{};  // FP16 storage
  auto graph = frontend::importOnnx((dir / "model.onnx").string(), options);
  if (!graph) return graph.error();
  const topology::ChipSpec spec;
  const topology::Cluster cluster = oneChipCluster(spec);
  schedule::PipelineStage stage;
  for (size_t i = 0; i < graph->ops().size(); ++i) stage.ops.push_back(static_cast<ir::OpId>(i));
  auto schedule = schedule::scheduleCluster(*graph, {stage}, cluster);
  if (!schedule) return schedule.error();
  const auto program = std::make_shared<const isa::Program>(schedule->programs.front());
  const std::string data = (dir / "test_data_set_0").string();
  auto setup = runtime::prepareFunctional(*graph, {program}, {0, data, againstData ? std::optional(data) : std::nullopt});
  if (!setup) return setup.error();
  SimOptions simOptions;
  simOptions.functional = setup->options;
  auto chip = makeTspChip(0, spec, program, std::vector<PortBinding>(spec.c2cPorts), simOptions);
  if (auto s = chip->advanceTo(kNever); !s) return s;
  if (chip->stats().cycles != program->predictedCycles)
    return makeError(ExitCode::kInternal, fmt::format("simulated {} cycles, predicted {}", chip->stats().cycles,
                                                      program->predictedCycles));
  return runtime::checkFunctionalOutputs(*setup, {program}, [&](int) { return chip.get(); });
}

TEST(OnnxOpsFunctional, EveryImportedOpFormComputesOnTheChip) {
  KernelRuntime kernels;
  const std::string dir = std::string(TSP_BINARY_DIR) + "/tests/sim/onnx_op_models";
  const std::string command = std::string(TSP_PYTHON) + " " + TSP_SOURCE_DIR + "/tests/compile/make_op_models.py " + dir;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(dir))
    if (!fs::exists(entry.path() / "refused")) cases.push_back(entry.path());  // the cases the importer refuses
  std::sort(cases.begin(), cases.end());
  ASSERT_GE(cases.size(), 19u);
  for (const auto& c : cases) {
    const std::string name = c.filename().string();
    const Status interpreter = runCase(c, false);
    EXPECT_TRUE(interpreter.ok()) << name << ": " << (interpreter.ok() ? "" : interpreter.error().format());
    if (!interpreter.ok()) continue;
    const Status numpy = runCase(c, true);
    EXPECT_TRUE(numpy.ok()) << name << " against numpy: " << (numpy.ok() ? "" : numpy.error().format());
  }
}

}  // namespace
}  // namespace tsp::sim
