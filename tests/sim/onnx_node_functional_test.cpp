// The ONNX backend node tests end to end in functional mode: import, compile, simulate on values, and
// compare the outputs read back from SRAM with the reference interpreter and with output_N.pb.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "compile/frontend/onnx_importer.h"
#include "compile/schedule/cluster_schedule.h"
#include "runtime/functional_run.h"
#include "sim/chip.h"
#include "sim/onnx_node_cases.h"

namespace tsp::sim {
namespace {

namespace fs = std::filesystem;

// Simulates the program on the setup's values and checks the outputs.
Status simulateAndCheck(const topology::ChipSpec& spec, const std::shared_ptr<const isa::Program>& program,
                        const runtime::FunctionalSetup& setup) {
  SimOptions options;
  options.functional = setup.options;
  auto chip = makeTspChip(0, spec, program, std::vector<PortBinding>(spec.c2cPorts), options);
  if (auto s = chip->advanceTo(kNever); !s) return s;
  if (chip->stats().cycles != program->predictedCycles)
    return makeError(ExitCode::kInternal, "simulated cycles differ from the prediction");
  return runtime::checkFunctionalOutputs(setup, {program}, [&](int) { return chip.get(); });
}

TEST(OnnxNodeFunctional, LoweredCasesMatchTheInterpreterAndTheTestData) {
  if (!fs::exists(kNodeTests)) GTEST_SKIP() << kNodeTests << " is missing (install libonnx-testdata)";
  KernelRuntime kernels;
  topology::ChipSpec spec;
  const topology::Cluster cluster = oneChipCluster(spec);
  const std::vector<fs::path> cases = nodeTestCases();

  int compiled = 0, runs = 0, matchInterpreter = 0, matchData = 0, inexactInputs = 0;
  std::vector<std::string> passed, inexactNames;
  std::map<std::string, int> refused;  // cases refused at compile time, by reason
  std::vector<std::string> refusedNames;
  for (const auto& dir : cases) {
    const std::string name = dir.filename().string();
    frontend::ImportOptions options;
    options.precision = frontend::Precision{};  // FP16 storage
    auto inputNames = frontend::onnxInputNames((dir / "model.onnx").string());
    if (!inputNames) continue;
    bool floatInputs = true;  // input_N.pb feeds graph input N only when no input is bound as a constant
    bool exactInFp16 = true;  // every input value is a binary16 value (else the chip stores it rounded)
    for (size_t i = 0; i < inputNames->size() && floatInputs; ++i) {
      auto v = frontend::readTensorProtoFile((dir / "test_data_set_0" / fmt::format("input_{}.pb", i)).string());
      floatInputs = v && (ir::isFloat(v->dtype) || v->dtype == ir::DType::kI32 || v->dtype == ir::DType::kI64 ||
                         v->dtype == ir::DType::kBool);
      if (v)
        for (double x : v->data) exactInFp16 = exactInFp16 && static_cast<double>(halfToFloat(floatToHalf(static_cast<float>(x)))) == x;
    }
    if (!floatInputs) continue;
    auto graph = frontend::importOnnx((dir / "model.onnx").string(), options);
    if (!graph || graph->inputs().size() != inputNames->size()) continue;
    schedule::PipelineStage stage;
    for (size_t i = 0; i < graph->ops().size(); ++i) stage.ops.push_back(static_cast<ir::OpId>(i));
    auto schedule = schedule::scheduleCluster(*graph, {stage}, cluster);
    if (!schedule || schedule->programs.front().instructions.empty()) continue;
    ++compiled;
    const auto program = std::make_shared<const isa::Program>(schedule->programs.front());
    const std::string data = (dir / "test_data_set_0").string();
    auto againstInterpreter = runtime::prepareFunctional(*graph, {program}, {0, data, std::nullopt});
    if (!againstInterpreter) {
      // Refused before it runs: the lowering only times an op (named with the reason), exit 2.
      ASSERT_EQ(againstInterpreter.error().code, ExitCode::kModel) << name << ": " << againstInterpreter.error().format();
      const std::string& why = againstInterpreter.error().message;
      ++refused[why.substr(why.find(": ") + 2, why.find("; ") - why.find(": ") - 2)];
      refusedNames.push_back(name);
      continue;
    }
    ++runs;
    // What compiles for functional mode computes: a refusal during the simulation is a failure too.
    const Status s = simulateAndCheck(spec, program, *againstInterpreter);
    EXPECT_TRUE(s.ok()) << name << ": " << (s.ok() ? "" : s.error().format());
    if (!s.ok()) continue;
    ++matchInterpreter;
    auto againstData = runtime::prepareFunctional(*graph, {program}, {0, data, data});
    ASSERT_TRUE(againstData.ok()) << name << ": " << (againstData.ok() ? "" : againstData.error().format());
    const Status d = simulateAndCheck(spec, program, *againstData);
    // Inputs the chip stores rounded to FP16 may move an output further than the tolerance of its
    // FP16 result (test_softmax_large_number: 10000..10003 are all 10000 in FP16); the run matched
    // the interpreter on the stored values, and such a case is counted apart.
    if (!d.ok() && !exactInFp16) {
      ++inexactInputs;
      inexactNames.push_back(name);
      continue;
    }
    EXPECT_TRUE(d.ok()) << name << ": " << (d.ok() ? "" : d.error().format());
    if (!d.ok()) continue;
    ++matchData;
    passed.push_back(name);
  }
  std::string why;
  for (const auto& [reason, n] : refused) why += fmt::format("\n    {:>4}  {}", n, reason);
  fmt::print("ONNX node tests in functional mode: {} compiled, {} refused before they run (an op the program only "
             "times, exit 2):{}\n  {} run: {} match the reference interpreter and {} match output_N.pb within "
             "|sim - ref| <= atol + rtol*|ref| ({} more match the interpreter, with inputs that are not FP16 values: {})\n"
             "  passed: {}\n  refused: {}\n",
             compiled, compiled - runs, why, runs, matchInterpreter, matchData, inexactInputs, fmt::join(inexactNames, " "),
             fmt::join(passed, " "), fmt::join(refusedNames, " "));
  // add, div, pow, sigmoid, sqrt, erf, the reductions, softmax, Gemm's alpha/beta/transB, Split and
  // Concat off tile boundaries, INT32 Equal and Pow, BF16 casts, LayerNormalization's statistics outputs
  // among them, Where (test_where_example, test_where_long_example: bool conditions), and And/Or
  // with a 4-D broadcast operand (test_and_bcast4v4d, test_or_bcast4v4d: SXM element maps).
  EXPECT_GE(matchData, 343);
}

}  // namespace
}  // namespace tsp::sim
