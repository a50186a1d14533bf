// The training-step cluster scheduler: every chip follows its pipeline stage's order of forward and backward
// passes, activations and their gradients cross between stages over C2C, the gradient all-reduce runs in buckets.
#pragma once

#include <vector>

#include "compile/ir/graph.h"
#include "compile/schedule/cluster_schedule.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::schedule {

/// One pass of a stage's order: a microbatch's forward or backward pass through one of its chunks.
struct TrainingPass {
  int microbatch = 0;
  bool backward = false;
  int chunk = 0;  ///< the stage's virtual stage; the model stage is chunk * stages + stage
};

/// A training step of a pipelined, tensor- and data-parallel plan: one microbatch's training graph
/// per TP rank (SPMD: one op sequence, collectives naming TP ranks in `devices`) split into model
/// stages, the chips of every replica's stages and TP ranks, and each stage's order of passes.
struct TrainingWorkload {
  std::vector<const ir::Graph*> graphs;  ///< per TP rank: one microbatch's training graph
  int stages = 1, chunks = 1, microbatches = 1;
  /// Per model stage (chunk * stages + stage), in topological order: its forward ops (the loss on the
  /// last), its backward ops (recomputation included) and its optimizer update.
  std::vector<std::vector<ir::OpId>> forward, backward, update;
  /// The gradient tensors each model stage's backward pass completes (what the data-parallel all-reduce sums).
  std::vector<std::vector<ir::TensorId>> gradients;
  std::vector<std::vector<std::vector<int>>> chips;  ///< [replica][stage][TP rank]: the chip
  std::vector<std::vector<TrainingPass>> order;    ///< per stage, in execution order
  Bytes bucketBytes = Bytes{25} << 20;             ///< gradient all-reduce bucket
  /// Optimizer state sharded over the replicas (ZeRO stage 1): the buckets are reduce-scattered,
  /// and after the update the parameters are all-gathered in buckets of the same size.
  bool shardOptimizer = false;
  /// A pass's outputs reach the next stage when the whole pass has ended (Megatron's exchange
  /// between passes), not as their tiles arrive: a backward pass's input gradient then waits for its
  /// weight gradients, as the bubble formula's atomic passes do.
  bool sendAfterPass = false;
};

/// A scheduled training step and the figures of its pipeline.
struct TrainingStepSchedule {
  ClusterSchedule cluster;
  Cycle pipelineCycles = 0;  ///< end of the last backward pass on any chip (its last instruction's completion)
  Cycle allReduceCycles = 0; ///< end of the last gradient all-reduce (0 without data parallelism)
  int buckets = 0;           ///< all-reduce buckets scheduled (per replica group)
  int microbatches = 1;
  /// Per [stage][chunk]: the cycles of one microbatch's forward and backward pass (the longest span
  /// from its start to its end, collectives included), what the ideal pipeline time is made of.
  std::vector<std::vector<Cycle>> forwardCycles, backwardCycles;
  /// The busiest stage's work: m x the sum over its chunks of forward + backward.
  double idealCycles() const;
  /// Megatron's convention: (pipeline time - ideal) / ideal.
  double bubbleFraction() const;
};

/// Schedules the step: passes run in each stage's order as soon as their inputs are on the chip
/// (tensors from another chip arrive whole before the pass starts: sent during the producing pass
/// over a direct link, or as a message on the route); a pass's collectives (TP all-reduces, forward
/// and backward) run over its TP group's chips between its compute runs; each model stage's gradients are all-reduced
/// over its replicas in buckets as soon as that stage's last backward pass ends, while other stages
/// are still in their backward passes; then every chip runs its optimizer update. Identical passes
/// are compiled once and relocated: a pass's new compute runs over its TP ranks are compiled as one
/// batch by `batchCompiler` (empty: compileShards, here), which every MPI rank calls in the same order.
/// Errors name the op; an order that cannot finish is internal.
Expected<TrainingStepSchedule> scheduleTrainingStep(const TrainingWorkload& workload, const topology::Cluster& cluster,
                                                    const Options& options = {},
                                                    const ShardBatchCompiler& batchCompiler = {});

}  // namespace tsp::schedule
