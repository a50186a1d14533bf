// The `training:` section: what a training step is made of, for the search's cost model.
#pragma once

#include "compile/ir/autodiff.h"
#include "partition/pipeline_schedule.h"
#include "support/expected.h"
#include "support/units.h"

namespace YAML { class Node; }
namespace tsp::topology { class YamlReader; }

namespace tsp::partition {

/// A training step: schedule, optimizer, recomputation, optimizer sharding (docs/config.md, training).
struct TrainingConfig {
  bool enabled = false;  ///< false: the model runs inference (an empty or absent `training:` section)
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  ir::Optimizer optimizer = ir::Optimizer::kAdam;
  ir::Recompute recompute = ir::Recompute::kNone;
  bool shardOptimizer = false;      ///< optimizer state split across the data-parallel replicas (ZeRO stage 1)
  int microbatches = 0;             ///< 0: the search chooses; else every plan uses this many
  Bytes bucketBytes = Bytes{25} << 20;  ///< gradient all-reduce bucket
  /// The first stage also computes the gradient of the model's float inputs, so that every stage of
  /// a uniform chain does the same backward work (what the bubble formula assumes).
  bool inputGradients = false;
  /// Stage-to-stage tensors released at the end of the pass that made them (schedule::TrainingWorkload).
  bool sendAfterPass = false;
};

/// Reads the `training:` section; errors at file:line:col.
Expected<TrainingConfig> loadTraining(const topology::YamlReader& reader, const YAML::Node& node);

}  // namespace tsp::partition
