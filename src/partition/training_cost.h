// The cost model of a training step: backward and recomputed compute, TP collectives of the backward
// pass, the bucketed data-parallel gradient all-reduce, optimizer step, and memory with gradients,
// optimizer state and the schedule's activation stash.
#pragma once

#include "compile/ir/graph.h"
#include "support/expected.h"
#include "partition/cost_model.h"

namespace tsp::partition {

/// Marks the profile as a training step and fills each layer's parameters, their bytes and its stash
/// bytes (what the backward pass of ir::buildTrainingGraph reads from the forward pass, for the
/// whole batch). A model autodiff cannot differentiate is a model error naming the op.
/// With `chip`, each distinct layer's backward/forward ratio (and the loss's share of the last
/// layer's forward) is measured by the compiler on a batch block of the training graph
/// (LayerProfile::backwardRatio); without it the FLOP ratios 2 (3 with recomputation) stand.
Status applyTraining(ModelProfile& profile, const ir::Graph& forward, const TrainingConfig& training,
                     const topology::ChipSpec* chip = nullptr);

/// Most microbatch-chunks whose activations a stage holds at once under a schedule (the closed forms
/// of PipelineOrder::peakStash): GPipe m, 1F1B min(p - s, m), interleaved min(2(p - s - 1) + (v - 1) p + 1, m v).
int peakStashCount(PipelineSchedule schedule, int stages, int microbatches, int chunks, int stage);

/// Bytes per parameter of optimizer state: Adam's m and v in FP32, plus an FP32 master copy when
/// the weights are stored in 16 bits (SGD keeps only that copy).
double optimizerBytesPerParameter(ir::Optimizer optimizer, int weightBytes);

/// What a training step adds to each pipeline chip's memory (memoryPerChip adds it to the weights,
/// working set and inbound buffers): gradients, optimizer state (/dp when sharded), the stash.
std::vector<double> trainingBytesPerChip(const ModelProfile& profile, const Candidate& candidate,
                                         const StageAssignment& stages);

/// Per-microbatch figures of every chunk of a training step (chunk k on pipeline chip k mod pp),
/// stage sends included, and the gradients and parameters of each pipeline chip.
struct TrainingChunks {
  std::vector<double> forward, backward, comm;  ///< per chunk, cycles
  std::vector<Bytes> gradients;                 ///< per pipeline chip, bytes (its share of one TP group)
  std::vector<double> parameters;               ///< per pipeline chip
  std::vector<Bytes> groupGradients;            ///< per pipeline chip: spatial split's convolution gradients
};
/// The chunk figures evaluateTrainingCandidate prices; with the chip's vectorBytes, each pass also
/// reads what it received from its port at one vector a cycle (0: not counted).
TrainingChunks trainingChunks(const ModelProfile& profile, const Candidate& candidate, const StageAssignment& stages,
                              const CandidateLinks& links, int vectorBytes = 0);
/// Per-microbatch bytes of one message of each kind of SharedLinks (forward, backward and
/// recomputed TP collectives per ring edge, stage sends both ways, shared weights' gradients to stage 0).
std::vector<double> trainingMessageBytes(const ModelProfile& profile, const Candidate& candidate,
                                         const StageAssignment& stages, const SharedLinks& shared);
/// The per-microbatch time of the busiest resource that every microbatch's messages share: per
/// stage, the busiest link direction or outside transit chip its messages cross (sharedLinkFloor,
/// every kind of message there), and the stage's passes plus what its busiest chip forwards for
/// other messages, with the passes of the stages on those routes (a message waits until every
/// chip of its route is between passes). The pipeline takes at least m times this.
double sharedLinkPeriod(const ModelProfile& profile, const Candidate& candidate, const StageAssignment& stages,
                        const CandidateLinks& links, const TrainingChunks& chunks);
/// Those chunk times as the event simulation's costs ([stage][chunk]; sends already in the times).
PipelineCosts trainingPipelineCosts(const TrainingChunks& chunks, const Candidate& candidate);

/// evaluateCandidate's figures for a training profile but the memory (plan_cost.h adds it and its check).
PlanCost evaluateTrainingCandidate(const ModelProfile& profile, const Candidate& candidate,
                                   const StageAssignment& stages, const CandidateLinks& links,
                                   const topology::ChipSpec& chip, int clusterChips,
                                   std::vector<double>* stageCycles = nullptr);

}  // namespace tsp::partition
