// A graph compiled for one chip and simulated in functional mode, its outputs checked against the reference interpreter.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "compile/schedule/cluster_schedule.h"
#include "runtime/functional_run.h"
#include "sim/chip.h"
#include "sim/onnx_node_cases.h"

namespace tsp::sim {

/// Compiles the whole graph for one chip, simulates it in functional mode on seeded values and
/// checks its outputs against the reference interpreter (and the cycles against the prediction).
inline Status runOnOneChip(const ir::Graph& g, std::uint64_t seed = 3, const topology::ChipSpec& spec = {}) {
  const topology::Cluster cluster = oneChipCluster(spec);
  schedule::PipelineStage stage;
  for (size_t i = 0; i < g.ops().size(); ++i) stage.ops.push_back(static_cast<ir::OpId>(i));
  auto schedule = schedule::scheduleCluster(g, {stage}, cluster);
  if (!schedule) return schedule.error();
  const auto program = std::make_shared<const isa::Program>(schedule->programs.front());
  auto setup = runtime::prepareFunctional(g, {program}, {seed, std::nullopt, std::nullopt});
  if (!setup) return setup.error();
  SimOptions options;
  options.functional = setup->options;
  auto chip = makeTspChip(0, spec, program, std::vector<PortBinding>(spec.c2cPorts), options);
  if (auto s = chip->advanceTo(kNever); !s) return s;
  EXPECT_EQ(chip->stats().cycles, program->predictedCycles);
  return runtime::checkFunctionalOutputs(*setup, {program}, [&](int) { return chip.get(); });
}

}  // namespace tsp::sim
