// The cost of a plan: its memory per chip and its time, an inference pass or a training step.
#include "partition/plan_cost.h"

#include <algorithm>
#include <cmath>

#include "partition/pipeline_schedule.h"
#include "partition/training_cost.h"

namespace tsp::partition {

namespace {

// evaluateCandidate's figures of an inference pass but its memory.
PlanCost inferenceCost(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages,
                       const CandidateLinks& links, const topology::ChipSpec& chip, int clusterChips,
                       std::vector<double>* stageCycles) {
  PlanCost cost;
  cost.fits = c.chips() <= clusterChips;
  std::vector<double> chunk(stages.chunks, 0), chunkComm(stages.chunks, 0), lastCompute(stages.chunks, 0);
  const double frac = 1.0 / (static_cast<double>(c.dp) * c.microbatches);
  for (size_t l = 0; l < profile.layers.size(); ++l) {
    const LayerProfile& layer = profile.layers[l];
    const LayerShare share = layerShare(layer, c, links, stages.layerChunk[l] % c.pp);
    chunk[stages.layerChunk[l]] += share.compute + share.comm;
    // Consecutive layers of one chunk with no collective between them are one program (the cluster
    // schedule compiles each run of compute ops between collectives as one segment): the layer
    // overlaps the one before it as the compiler measured for the pair, in proportion to what one
    // rank computes of it at its share of the batch. A layer with a collective is fenced by it.
    if (l > 0 && stages.layerChunk[l] == stages.layerChunk[l - 1] && layer.overlapWithPrevious > 0 &&
        share.comm == 0)
      chunk[stages.layerChunk[l]] -=
          static_cast<double>(layer.overlapWithPrevious) * share.compute / static_cast<double>(layer.cycles);
    chunkComm[stages.layerChunk[l]] += share.comm;
    // What of the chunk's last layer so far can hide its sends: as the compiler measured it (a layer
    // ending in a row-wise normalisation makes its output at the end), else all of its compute.
    const double splitShare = share.compute / std::max(1.0, layerCyclesAt(layer, frac));
    lastCompute[stages.layerChunk[l]] =
        layer.sendHiddenPerShare >= 0 ? std::min(share.compute, layer.sendHiddenPerShare * frac * splitShare)
                                      : share.compute;
  }
  // The compiler sends tiles as they are computed: a chunk's sends overlap the part of its last
  // layer's compute that follows the first outbound tile, so the chunk takes the rest of its time,
  // the longer of that part and the serialisation, and one route latency.
  const std::vector<double> sends = chunkSendCycles(profile, c, stages, links);
  for (int k = 0; k < stages.chunks; ++k)
    if (sends[k] > 0) {
      const double serialise = sends[k] - static_cast<double>(links.pp.alpha);
      chunk[k] += std::max(0.0, serialise - lastCompute[k]) + static_cast<double>(links.pp.alpha);
      chunkComm[k] += sends[k];
    }
  PipelineTime time = pipelineTime(chunk, chunkComm, c);
  // Interleaved: each chip runs its own chunks in the runtime's forward order (forwardOrder: p
  // microbatches through one chunk, then through the chip's next), where the closed form charges
  // every chunk slot at the slowest chunk of any chip; unequal chunks (a first or last chunk with
  // the embedding or head, a last chunk with nothing to send) run through the event simulation of
  // that order, and its makespan is the pipeline time.
  if (c.interleave > 1 && std::int64_t{c.pp} * c.microbatches * c.interleave <= kEventSimulatedPasses) {
    PipelineOrder order;
    order.schedule = PipelineSchedule::kInterleaved;
    order.stages = c.pp;
    order.microbatches = c.microbatches;
    order.chunks = c.interleave;
    order.tasks = forwardOrder(c.pp, c.microbatches, c.interleave);
    PipelineCosts costs;
    costs.forward.assign(c.pp, std::vector<double>(c.interleave, 0));
    costs.backward = costs.forward;
    for (int k = 0; k < stages.chunks; ++k) costs.forward[k % c.pp][k / c.pp] = chunk[k];
    if (auto timing = simulatePipeline(order, costs); timing.ok()) time.iteration = timing->makespan;
  }
  cost.chunkCycles = time.chunkMax;
  cost.iterationCycles = time.iteration;
  if (stageCycles) *stageCycles = time.chipBusy;
  cost.bubbleFraction = cost.iterationCycles > 0 ? std::max(0.0, 1.0 - time.busy / c.pp / cost.iterationCycles) : 0;
  cost.commShare = time.busy > 0 ? time.comm / time.busy : 0;
  cost.copies = std::max(1, clusterChips / std::max(1, c.chips()));
  const double seconds = cost.iterationCycles / (chip.clockMhz * 1e6);
  cost.latencySeconds = seconds;
  cost.throughput = seconds > 0 ? static_cast<double>(profile.samples) * cost.copies / seconds : 0;
  return cost;
}

}  // namespace

Bytes memoryPerChip(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages) {
  const std::vector<double> inference = inferenceBytesPerChip(profile, c, stages);
  const std::vector<double> training =
      profile.training.enabled ? trainingBytesPerChip(profile, c, stages) : std::vector<double>(c.pp, 0.0);
  double worst = 0;
  for (int s = 0; s < c.pp; ++s) worst = std::max(worst, inference[s] + training[s]);
  return static_cast<Bytes>(std::ceil(worst));
}

PlanCost evaluateCandidate(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages,
                           const CandidateLinks& links, const topology::ChipSpec& chip, int clusterChips,
                           std::vector<double>* stageCycles) {
  PlanCost cost = profile.training.enabled
                      ? evaluateTrainingCandidate(profile, c, stages, links, chip, clusterChips, stageCycles)
                      : inferenceCost(profile, c, stages, links, chip, clusterChips, stageCycles);
  cost.memoryPerChip = memoryPerChip(profile, c, stages);
  cost.fits = cost.fits && cost.memoryPerChip <= allocatableSramBytes(chip);
  return cost;
}

}  // namespace tsp::partition
