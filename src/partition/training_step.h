// A plan's training step as the training cluster scheduler's workload: one microbatch's training graph split
// into model stages, the chips of every replica and each stage's order from pipeline_schedule.
#pragma once

#include <map>
#include <memory>

#include "compile/ir/autodiff.h"
#include "compile/schedule/training_schedule.h"
#include "partition/plan.h"
#include "partition/training.h"
#include "support/expected.h"

namespace tsp::partition {

/// The training graph of one microbatch and the workload over it (which points into it).
struct TrainingStep {
  std::vector<ir::TrainingGraph> training;  ///< one: TP rank 0's, which every TP rank runs
  schedule::TrainingWorkload workload;
};

/// Tensors of a TP rank's device graph whose gradient is a partial sum over the group of `tp`: every
/// user is a MatMul reading it as its activation against a column-split weight (narrower than the
/// batch block's weight of the same name), so each rank's dX covers its columns only. As
/// ir::TrainingOptions::partialGradients: the attributes of the all-reduce of each such gradient.
std::map<ir::TensorId, ir::Attrs> partialGradients(const ir::Graph& device, const ir::Graph& block, int tp);

/// Builds the step of a dp x tp x pp (x m, x v) plan: the forward graph's batch block (dp x m
/// blocks), with tp > 1 TP rank 0's device graph (Megatron's split, planAnnotations) for every
/// rank (the ranks differ only in which block their Slices take: the same shapes and costs), its
/// training graph (with the loss: buildTrainingGraph; without: differentiate, the output's gradient
/// an input), the gradient of every replicated activation that only column-parallel matmuls read
/// all-reduced over the TP group, the ops split by the plan's layer chunks into forward, backward
/// and update, the chips of every replica's stages and TP ranks, and each stage's order. The 2D
/// split is a config error; errors name the numbers.
Expected<std::unique_ptr<TrainingStep>> buildTrainingStep(const ir::Graph& forward, const Plan& plan,
                                                          const TrainingConfig& config, bool withLoss = true);

}  // namespace tsp::partition
