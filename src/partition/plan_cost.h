// The cost of a plan: its memory per chip and its time, an inference pass or a training step
// (partition/training_cost.h), from the cost model's parts (partition/cost_model.h).
#pragma once

#include "partition/cost_model.h"
#include "partition/model_profile.h"
#include "topology/chip_spec.h"

namespace tsp::partition {

/// Bytes the fullest chip needs for a candidate (weights, KV cache, activations, pipeline stash;
/// training: gradients, optimizer state and the schedule's stash).
Bytes memoryPerChip(const ModelProfile& profile, const Candidate& candidate, const StageAssignment& stages);

/// Predicts the cost of a candidate with the given stages and link figures on chips of `chip`
/// (clusterChips bounds the copies for the throughput figure). With `stageCycles`, also what each
/// pipeline stage's chip is busy with in one iteration: its chunks' times (compute, tensor-parallel
/// collectives and sends as costed; training: forward and backward passes) over the microbatches.
PlanCost evaluateCandidate(const ModelProfile& profile, const Candidate& candidate, const StageAssignment& stages,
                           const CandidateLinks& links, const topology::ChipSpec& chip, int clusterChips,
                           std::vector<double>* stageCycles = nullptr);

}  // namespace tsp::partition
