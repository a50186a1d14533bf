// A plan's training step as the training cluster scheduler's workload: one microbatch's training graph split
// into model stages, the chips of every replica and each stage's order from pipeline_schedule.
#pragma once

#include <memory>

#include "compile/ir/autodiff.h"
#include "compile/schedule/training_schedule.h"
#include "partition/plan.h"
#include "partition/training.h"
#include "support/expected.h"

namespace tsp::partition {

/// The training graph of one microbatch and the workload over it (which points into the graph).
struct TrainingStep {
  ir::TrainingGraph training;
  schedule::TrainingWorkload workload;
};

/// Builds the step of a dp x pp (x m, x v) plan: the forward graph's batch block (dp x m blocks), its
/// training graph (with the loss: buildTrainingGraph; without: differentiate, the output's gradient
/// an input), its ops split by the plan's layer chunks into forward, backward and update, the chips
/// of every replica's stages and each stage's order. A plan with tp > 1 is a config error (this
/// build executes training steps of pipeline and data parallelism); errors name the numbers.
Expected<std::unique_ptr<TrainingStep>> buildTrainingStep(const ir::Graph& forward, const Plan& plan,
                                                          const TrainingConfig& config, bool withLoss = true);

}  // namespace tsp::partition
