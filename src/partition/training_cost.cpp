// The training step's cost model: forward, backward and recomputed passes per chunk, the pipeline
// formula the event simulation validates, the overlapped gradient all-reduce, and training memory.
#include "partition/training_cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "compile/lower/lowering.h"
#include "partition/plan_shards.h"
#include "partition/tensor_split.h"
#include "partition/training_step.h"

namespace tsp::partition {

namespace {

// The batch is split into at most this many blocks for the compiled pass ratios.
constexpr int kCalibrationBlocks = 8;
// The Megatron widths whose training figures the compiler measures (LayerProfile::trainingAt): the
// profile's measured widths up to this; wider ones keep the whole layer's ratios.
constexpr int kMeasuredTrainingWidth = 8;

// TP rank 0's training graph of the batch block at width tp, as the training step builds it, with
// each layer's forward and backward compute (runs between collectives compiled alone, summed) over
// `whole` (the layer's forward on the whole block), and its backward collectives.
void measureWidth(ModelProfile& profile, const ir::Graph& block, const TrainingConfig& training, int tp, int parts,
                  const std::vector<double>& whole, const topology::ChipSpec& chip,
                  std::map<std::string, double>& runCycles) {
  Plan plan;
  plan.tp = tp;
  plan.split = TensorSplit::kMegatron;
  auto group = tensorParallelGraphs(block, plan);
  if (!group || group->graphs.empty()) return;
  const ir::Graph& device = group->graphs.front();
  ir::TrainingOptions options;
  options.optimizer = ir::Optimizer::kNone;
  options.recompute = training.recompute;
  options.partialGradients = partialGradients(device, block, tp);
  auto trained = ir::buildTrainingGraph(device, options);
  if (!trained) return;
  const ir::Graph& g = trained->graph;
  const int layers = static_cast<int>(profile.layers.size());
  const size_t lossOp = device.ops().size();
  // Per layer and pass: its runs of compute ops between collectives.
  std::vector<std::array<std::vector<std::vector<ir::OpId>>, 2>> runs(layers);
  std::vector<LayerProfile::TrainingWidth> figures(layers);
  for (size_t i = 0; i < g.ops().size(); ++i) {
    if (i == lossOp) continue;  // the loss: the last layer's forwardScale
    const ir::Op& op = g.op(static_cast<ir::OpId>(i));
    const int layer = std::clamp(op.layer, 0, layers - 1);
    auto& pass = runs[layer][i < lossOp ? 0 : 1];
    const bool reduce = op.kind == ir::OpKind::kAllReduce;
    if (reduce || op.kind == ir::OpKind::kAllGather || op.kind == ir::OpKind::kReduceScatter) {
      if (i > lossOp) {
        const ir::Tensor& t = g.tensor(op.kind == ir::OpKind::kAllGather ? op.outputs.front() : op.inputs.front());
        const auto [rows, tiles] = lower::vectorShape(chip, t);
        const Bytes bytes = Bytes{rows} * tiles * chip.vectorBytes * parts;
        (reduce ? figures[layer].allReduces : figures[layer].allGathers) += 1;
        (reduce ? figures[layer].allReduceBytes : figures[layer].allGatherBytes) += bytes;
      }
      if (!pass.empty() && !pass.back().empty()) pass.emplace_back();
      continue;
    }
    if (op.kind == ir::OpKind::kSend || op.kind == ir::OpKind::kRecv) continue;
    if (pass.empty()) pass.emplace_back();
    pass.back().push_back(static_cast<ir::OpId>(i));
  }
  auto passCycles = [&](const std::vector<std::vector<ir::OpId>>& pass) -> double {
    double total = 0;
    for (const auto& run : pass) {
      if (run.empty()) continue;
      const std::string key = layerSignature(g, run);
      auto found = runCycles.find(key);
      if (found == runCycles.end()) {
        double c = -1;
        if (auto sub = layerGraph(g, run))
          if (auto compiled = compiledCycles(*sub, chip)) c = static_cast<double>(*compiled);
        found = runCycles.emplace(key, c).first;
      }
      if (found->second <= 0) return -1;
      total += found->second;
    }
    return total;
  };
  for (int l = 0; l < layers; ++l) {
    if (whole[l] <= 0 || runs[l][0].empty() || runs[l][1].empty()) continue;
    const double forward = passCycles(runs[l][0]), backward = passCycles(runs[l][1]);
    if (forward <= 0 || backward <= 0) continue;
    figures[l].forward = forward / whole[l];
    figures[l].backward = backward / whole[l];
    profile.layers[l].trainingAt[tp] = figures[l];
  }
}

// The compiler's forward (without and with the loss) and backward cycles of each distinct layer of
// the training graph of one batch block, as ratios to the forward. A layer the compiler cannot
// lower keeps the FLOP ratios.
void measurePassRatios(ModelProfile& profile, const ir::Graph& forward, const TrainingConfig& training,
                       const topology::ChipSpec& chip) {
  int parts = 1;
  while (parts < kCalibrationBlocks && profile.samples % (2 * parts) == 0) parts *= 2;
  auto block = batchBlockGraph(forward, parts);
  if (!block) return;
  ir::TrainingOptions options;
  options.optimizer = ir::Optimizer::kNone;
  options.recompute = training.recompute;
  auto trained = ir::buildTrainingGraph(*block, options);
  if (!trained) return;
  const ir::Graph& g = trained->graph;
  const int layers = static_cast<int>(profile.layers.size());
  const size_t lossOp = block->ops().size();  // the model's ops, then the loss, then the backward
  std::vector<std::vector<ir::OpId>> plain(layers), withLoss(layers), backward(layers);
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const int layer = std::clamp(g.op(static_cast<ir::OpId>(i)).layer, 0, layers - 1);
    const auto id = static_cast<ir::OpId>(i);
    if (i < lossOp) plain[layer].push_back(id);
    if (i <= lossOp) withLoss[layer].push_back(id);
    else backward[layer].push_back(id);
  }
  std::map<std::string, std::array<double, 3>> measured;  // by signature: (backward, forward scale, forward)
  std::vector<double> whole(layers, -1);                   // the layer's forward cycles on the block
  auto cycles = [&](const std::vector<ir::OpId>& ops) -> double {
    if (ops.empty()) return 0;
    auto sub = layerGraph(g, ops);
    if (!sub) return -1;
    auto c = compiledCycles(*sub, chip);
    return c ? static_cast<double>(*c) : -1;
  };
  for (int l = 0; l < layers; ++l) {
    if (plain[l].empty() || backward[l].empty()) continue;
    const std::string key = layerSignature(g, plain[l]) + "|" + layerSignature(g, withLoss[l]) + "|" +
                            layerSignature(g, backward[l]);
    auto found = measured.find(key);
    if (found == measured.end()) {
      const double f = cycles(plain[l]);
      const double fl = withLoss[l].size() == plain[l].size() ? f : cycles(withLoss[l]);
      const double b = cycles(backward[l]);
      const bool ok = f > 0 && fl > 0 && b > 0;
      found = measured.emplace(key, ok ? std::array{b / f, fl / f, f} : std::array{-1.0, -1.0, -1.0}).first;
    }
    profile.layers[l].backwardRatio = found->second[0];
    profile.layers[l].forwardScale = found->second[1];
    whole[l] = found->second[2];
  }
  std::map<std::string, double> runCycles;  // by signature: a run's compiled cycles (-1: not lowered)
  for (const auto& [split, tp] : profile.measuredWidths)
    if (split == TensorSplit::kMegatron && tp <= kMeasuredTrainingWidth)
      measureWidth(profile, *block, training, tp, parts, whole, chip, runCycles);
}

}  // namespace

Status applyTraining(ModelProfile& profile, const ir::Graph& forward, const TrainingConfig& training,
                     const topology::ChipSpec* chip) {
  profile.training = training;
  if (!training.enabled) return {};
  // The stash is what the training graph's backward ops read from the forward pass (activations
  // and inputs; with recomputation only the layers' inputs), counted in the layer that reads it.
  ir::TrainingOptions options;
  options.optimizer = ir::Optimizer::kNone;
  options.recompute = training.recompute;
  auto trained = ir::buildTrainingGraph(forward, options);
  if (!trained) return trained.error();
  const ir::Graph& g = trained->graph;
  const int layers = static_cast<int>(profile.layers.size());
  const size_t forwardOps = forward.ops().size() + 1;  // the model's ops and the loss
  std::vector<std::set<ir::TensorId>> weightsOf(layers), stashOf(layers);
  std::map<ir::TensorId, std::set<int>> readers;  // float weights: the layers whose forward ops read them
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const ir::Op& op = g.op(static_cast<ir::OpId>(i));
    const int layer = std::min(op.layer, layers - 1);
    for (ir::TensorId t : op.inputs) {
      const ir::Tensor& tensor = g.tensor(t);
      if (i < forwardOps) {
        if (tensor.role == ir::TensorRole::kWeight && ir::isFloat(tensor.dtype)) {
          weightsOf[layer].insert(t);
          readers[t].insert(layer);
        }
        continue;
      }
      const bool fromForward = tensor.role == ir::TensorRole::kInput ||
                               (tensor.producer >= 0 && static_cast<size_t>(tensor.producer) < forwardOps);
      if (fromForward) stashOf[layer].insert(t);
    }
  }
  for (int l = 0; l < layers; ++l) {
    LayerProfile& layer = profile.layers[l];
    layer.parameters = 0;
    layer.trainableBytes = 0;
    layer.stashBytes = 0;
    for (ir::TensorId w : weightsOf[l]) {
      layer.parameters += g.tensor(w).elements();
      layer.trainableBytes += g.tensor(w).bytes();
    }
    for (ir::TensorId t : stashOf[l]) layer.stashBytes += g.tensor(t).bytes();
  }
  profile.sharedWeights.clear();
  for (const auto& [w, by] : readers)
    if (by.size() > 1) profile.sharedWeights.push_back({{by.begin(), by.end()}, g.tensor(w).bytes()});
  if (chip) measurePassRatios(profile, forward, training, *chip);
  return {};
}

int peakStashCount(PipelineSchedule schedule, int stages, int microbatches, int chunks, int stage) {
  switch (schedule) {
    case PipelineSchedule::kGPipe: return microbatches * chunks;
    case PipelineSchedule::k1F1B: return std::min(stages - stage, microbatches);
    case PipelineSchedule::kInterleaved:
      if (chunks == 1) return std::min(stages - stage, microbatches);
      if (microbatches == stages) return microbatches * chunks;
      return std::min(2 * (stages - stage - 1) + (chunks - 1) * stages + 1, microbatches * chunks);
  }
  return microbatches * chunks;
}

double optimizerBytesPerParameter(ir::Optimizer optimizer, int weightBytes) {
  const double master = weightBytes < 4 ? 4.0 : 0.0;
  switch (optimizer) {
    case ir::Optimizer::kNone: return 0;
    case ir::Optimizer::kSgd: return master;
    case ir::Optimizer::kAdam: return 8.0 + master;
  }
  return 0;
}

namespace {

int bytesPerParameter(const LayerProfile& layer) {
  return layer.parameters > 0 ? static_cast<int>(layer.trainableBytes / layer.parameters) : 2;
}

// The share of a layer's weights one chip of a TP group holds: convolution weights whole (every
// tensor split replicates them; docs/partitioning.md), the rest split tp ways.
double weightShare(const LayerProfile& layer, const Candidate& c) {
  if (layer.trainableBytes == 0) return 1.0 / c.tp;
  const double replicated = c.tp > 1 ? std::min(static_cast<double>(layer.convWeightBytes),
                                                static_cast<double>(layer.trainableBytes)) : 0.0;
  const double all = static_cast<double>(layer.trainableBytes);
  return (replicated + (all - replicated) / c.tp) / all;
}

// Ring all-reduce of `bytes` over `group` members on `links`, in `buckets` messages.
double ringAllReduce(double bytes, int group, double buckets, const LinkFigures& links) {
  if (group <= 1 || bytes <= 0) return 0;
  const double d = group;
  return buckets * 2 * (d - 1) * static_cast<double>(links.alpha) +
         2 * (d - 1) / d * bytes * links.cyclesPerByte * links.contention;
}

// The gradient all-reduce of `bytes` over `group` replicas in buckets of `bucketBytes`, as the
// scheduler runs each bucket: over a group it all-reduces as a multi-ring (every chip of a ring,
// torus or mesh: both directions at once) or hierarchically, the fit of its own figures
// (LinkFigures::fitPoints); else the one-direction ring.
double gradientAllReduce(double bytes, int group, double bucketBytes, const LinkFigures& links) {
  const double buckets = std::ceil(bytes / bucketBytes);
  if (group <= 1 || bytes <= 0 || links.fitPoints.size() < 2) return ringAllReduce(bytes, group, buckets, links);
  const double whole = std::floor(bytes / bucketBytes), last = bytes - whole * bucketBytes;
  return whole * allReduceCycles(group, bucketBytes, links) + (last > 0 ? allReduceCycles(group, last, links) : 0.0);
}

// A schedule a candidate cannot run (interleaving needs its schedule and m divisible by p).
bool scheduleRuns(const TrainingConfig& training, const Candidate& c) {
  if (c.interleave == 1) return true;
  return training.schedule == PipelineSchedule::kInterleaved && c.microbatches % c.pp == 0;
}

}  // namespace

std::vector<double> trainingBytesPerChip(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages) {
  const TrainingConfig& training = profile.training;
  const double frac = 1.0 / (static_cast<double>(c.dp) * c.microbatches);
  std::vector<double> bytes(c.pp, 0), chunkStash(stages.chunks, 0), peak(c.pp, 0);
  for (size_t l = 0; l < profile.layers.size(); ++l) {
    const LayerProfile& layer = profile.layers[l];
    const int chunk = stages.layerChunk[l], chip = chunk % c.pp;
    const double shard = training.shardOptimizer ? c.dp : 1;
    const double share = weightShare(layer, c);
    bytes[chip] += static_cast<double>(layer.trainableBytes) * share;  // gradients
    bytes[chip] += static_cast<double>(layer.parameters) * share *
                   optimizerBytesPerParameter(training.optimizer, bytesPerParameter(layer)) / shard;
    chunkStash[chunk] += static_cast<double>(layer.stashBytes) * frac / c.tp;
    // The backward pass of an op holds the gradients of its inputs beside the forward working set.
    peak[chip] = std::max(peak[chip], static_cast<double>(rankMemory(layer, c).peakBytes) * frac);
  }
  for (int s = 0; s < c.pp; ++s) {
    double largest = 0;
    for (int k = s; k < stages.chunks; k += c.pp) largest = std::max(largest, chunkStash[k]);
    bytes[s] += peakStashCount(training.schedule, c.pp, c.microbatches, c.interleave, s) * largest + peak[s];
  }
  return bytes;
}

TrainingChunks trainingChunks(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages,
                              const CandidateLinks& links, int vectorBytes) {
  const TrainingConfig& training = profile.training;
  TrainingChunks out;
  out.forward.assign(stages.chunks, 0);
  out.backward.assign(stages.chunks, 0);
  out.comm.assign(stages.chunks, 0);
  out.gradients.assign(c.pp, 0);
  out.parameters.assign(c.pp, 0);
  out.groupGradients.assign(c.pp, 0);
  const int last = static_cast<int>(profile.layers.size()) - 1;
  const double frac = 1.0 / (static_cast<double>(c.dp) * c.microbatches);  // share of the batch per microbatch
  std::vector<double> weightGradients(stages.chunks, 0);
  // Forward, then backward (dX and dW: twice the forward's compute, and the conjugate of every
  // forward TP collective), plus the forward again when the layer is recomputed.
  for (int l = 0; l <= last; ++l) {
    const LayerProfile& layer = profile.layers[l];
    const LayerShare share = layerShare(layer, c, links);
    const int k = stages.layerChunk[l];
    const double again = training.recompute == ir::Recompute::kFull && l < last ? 1.0 : 0.0;
    // The compiled ratios where measured (a first layer computes no input gradient, the last adds
    // the loss and its gradient), else the FLOP ratios.
    const double forwardScale = layer.forwardScale > 0 ? layer.forwardScale : 1.0;
    double forwardCompute = forwardScale * share.compute;
    double backwardCompute = (layer.backwardRatio > 0 ? layer.backwardRatio : 2 + again) * share.compute;
    double backwardComm = (1 + again) * share.comm;
    // Where the compiler measured TP rank 0's training graph at this width: its passes' compute
    // (the replicated work, such as a LayerNorm's backward, does not shrink with the width) and the
    // collectives its backward pass runs (the all-reduce of each partial input gradient).
    const auto at = layer.trainingAt.find(c.tp);
    if (c.split == TensorSplit::kMegatron && c.tp > 1 && at != layer.trainingAt.end()) {
      const double scaled = layerCyclesAt(layer, frac);
      const LayerProfile::TrainingWidth& w = at->second;
      forwardCompute = forwardScale * w.forward * scaled;
      backwardCompute = w.backward * scaled;
      backwardComm =
          w.allReduces * allReduceCycles(c.tp, static_cast<double>(w.allReduceBytes) * frac / std::max(1, w.allReduces),
                                         links.tp) +
          w.allGathers * allGatherCycles(c.tp, static_cast<double>(w.allGatherBytes) * frac / std::max(1, w.allGathers),
                                         links.tp);
    }
    out.forward[k] += forwardCompute + share.comm;
    out.backward[k] += backwardCompute + backwardComm;
    // The weight gradients: half the backward's matmul work, computed after the input gradients.
    if (layer.trainableBytes > 0) weightGradients[k] += backwardCompute / 2;
    out.comm[k] += share.comm + backwardComm;
    out.gradients[k % c.pp] += static_cast<Bytes>(static_cast<double>(layer.trainableBytes) * weightShare(layer, c));
    out.parameters[k % c.pp] += static_cast<double>(layer.parameters) * weightShare(layer, c);
    // A spatial split computes each convolution's weight gradient in parts: summed over the group.
    if (c.split == TensorSplit::kSpatial && c.tp > 1)
      out.groupGradients[k % c.pp] += std::min(layer.convWeightBytes, layer.trainableBytes);
  }
  // Activations go forward and their gradients come back over the same stage-to-stage routes.
  // Over a direct link a pass sends while it runs: the forward pass its output at its end, the
  // backward pass the gradients of what it received while it computes its weight gradients (the
  // compiler puts the input gradients first). The receiving pass reads a tensor that arrived from
  // its port at one vector a cycle. A message of a multi-hop route goes when every chip of the
  // route is between passes: both of a boundary's messages are counted once, on the sending chunk.
  const std::vector<double> sends = chunkSendCycles(profile, c, stages, links);
  const std::vector<double> returns = chunkSendCycles(profile, c, stages, links, SendDirection::kBackward);
  const std::vector<double> received = chunkSendBytes(profile, c, stages, SendDirection::kBackward);
  const std::vector<double> receivedBack = chunkSendBytes(profile, c, stages, SendDirection::kForward);
  const bool messages = links.pp.maxHops > 1;
  for (int k = 0; k < stages.chunks; ++k) {
    double forward = sends[k];
    double backward = messages ? sends[k] : std::max(0.0, returns[k] - weightGradients[k]);
    if (vectorBytes > 0) {
      forward += received[k] / vectorBytes;
      backward += receivedBack[k] / vectorBytes;
    }
    out.forward[k] += forward;
    out.backward[k] += backward;
    out.comm[k] += forward + backward;
  }
  // A shared weight's partial gradient (the tied embedding's, from the head) goes back to the chunk
  // of its first reader in the backward pass that makes it: each TP rank its share. The first
  // reader's backward pass receives it from its port into SRAM at one vector a cycle.
  for (const SharedWeight& w : profile.sharedWeights) {
    const int first = stages.layerChunk[w.layers.front()];
    std::set<int> senders;
    for (int l : w.layers)
      if (stages.layerChunk[l] != first) senders.insert(stages.layerChunk[l]);
    if (vectorBytes > 0) {
      const double receive = static_cast<double>(senders.size()) * static_cast<double>(w.bytes) / c.tp / vectorBytes;
      out.backward[first] += receive;
      out.comm[first] += receive;
    }
    for (int k : senders) {
      // The most of these messages on one link direction (the stage sends' contention without the figure).
      LinkFigures route = links.pp;
      const SharedLinks& shared = links.shared;
      if (shared.stages == c.pp && first % c.pp == 0 && k % c.pp == c.pp - 1 && c.pp > 1 && !shared.contention.empty())
        route.contention = shared.contention[shared.index(SharedLinks::kToFirstStage, k % c.pp)];
      const double send = route.transfer(static_cast<double>(w.bytes) / c.tp);
      out.backward[k] += send;
      out.comm[k] += send;
    }
  }
  return out;
}

std::vector<double> trainingMessageBytes(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages,
                                         const SharedLinks& shared) {
  std::vector<double> bytes(shared.kinds(), 0);
  if (shared.stages != c.pp) return bytes;
  const int last = static_cast<int>(profile.layers.size()) - 1;
  // Each forward collective runs again as its backward conjugate, and a third time when recomputed;
  // where the layer's training graph was measured at this width, its backward pass's own collectives.
  const double frac = 1.0 / (static_cast<double>(c.dp) * c.microbatches), t = c.tp;
  for (int l = 0; l <= last; ++l) {
    const LayerProfile& layer = profile.layers[l];
    const double again = profile.training.recompute == ir::Recompute::kFull && l < last ? 1.0 : 0.0;
    const double forward = tpEdgeBytes(layer, c);
    double backward = (1 + again) * forward;
    if (const auto at = layer.trainingAt.find(c.tp); c.split == TensorSplit::kMegatron && at != layer.trainingAt.end())
      backward = (2 * (t - 1) / t * static_cast<double>(at->second.allReduceBytes) +
                  (t - 1) / t * static_cast<double>(at->second.allGatherBytes)) * frac;
    bytes[shared.index(SharedLinks::kTpRing, stages.layerChunk[l] % c.pp)] += forward + backward;
  }
  const std::vector<double> sends = chunkSendBytes(profile, c, stages);
  for (int k = 0; k < stages.chunks; ++k) {
    bytes[shared.index(SharedLinks::kSendForward, k % c.pp)] += sends[k];
    bytes[shared.index(SharedLinks::kSendBackward, k % c.pp)] += sends[k];
  }
  // A shared weight's partial gradients, each TP rank's share, to its first reader on stage 0.
  for (const SharedWeight& w : profile.sharedWeights) {
    const int first = stages.layerChunk[w.layers.front()];
    if (first % c.pp != 0) continue;
    std::set<int> senders;
    for (int l : w.layers)
      if (stages.layerChunk[l] % c.pp != 0) senders.insert(stages.layerChunk[l]);
    for (int k : senders) bytes[shared.index(SharedLinks::kToFirstStage, k % c.pp)] += static_cast<double>(w.bytes) / c.tp;
  }
  return bytes;
}

double sharedLinkPeriod(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages,
                        const CandidateLinks& links, const TrainingChunks& chunks) {
  if (links.shared.stages != c.pp || (links.shared.directions.empty() && links.shared.transits.empty())) return 0;
  const LinkFloor floor = sharedLinkFloor(links.shared, trainingMessageBytes(profile, c, stages, links.shared));
  std::vector<double> own(c.pp, 0);
  for (int k = 0; k < stages.chunks; ++k) own[k % c.pp] += chunks.forward[k] + chunks.backward[k];
  // A transit chip forwards a message when every chip of its route is between passes: besides its
  // own passes it waits out the passes of the stages it is coupled with (the longest of them).
  std::vector<double> transit(c.pp, 0);
  for (const auto& chip : floor.transitChips) {
    double others = 0;
    for (int s : *chip.coupled) others = std::max(others, own[s]);
    transit[chip.stage] = std::max(transit[chip.stage], chip.cycles + others);
  }
  double period = 0;
  for (int s = 0; s < c.pp; ++s) period = std::max({period, own[s] + transit[s], floor.link[s]});
  return period;
}

PipelineCosts trainingPipelineCosts(const TrainingChunks& chunks, const Candidate& c) {
  PipelineCosts costs;
  costs.forward.assign(c.pp, std::vector<double>(c.interleave, 0));
  costs.backward = costs.forward;
  for (size_t k = 0; k < chunks.forward.size(); ++k) {
    costs.forward[k % c.pp][k / c.pp] = chunks.forward[k];
    costs.backward[k % c.pp][k / c.pp] = chunks.backward[k];
  }
  return costs;
}

PlanCost evaluateTrainingCandidate(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages,
                                   const CandidateLinks& links, const topology::ChipSpec& chip, int clusterChips,
                                   std::vector<double>* stageCycles) {
  const TrainingConfig& training = profile.training;
  PlanCost cost;
  cost.fits = c.chips() <= clusterChips && scheduleRuns(training, c) &&
              (training.microbatches == 0 || training.microbatches == c.microbatches);
  const TrainingChunks chunks = trainingChunks(profile, c, stages, links, chip.vectorBytes);
  const std::vector<double>& backward = chunks.backward;
  const std::vector<Bytes>& gradients = chunks.gradients;
  const std::vector<double>& parameters = chunks.parameters;
  std::vector<double> chunk(stages.chunks, 0), chipBackward(c.pp, 0);
  for (int k = 0; k < stages.chunks; ++k) {
    chunk[k] = chunks.forward[k] + backward[k];
    chipBackward[k % c.pp] += backward[k];
  }
  // The pipeline with t = forward + backward of a chunk: for equal stages GPipe's and 1F1B's
  // (m + p - 1) t and the interleaved (m v + p - 1) t / v, which simulatePipeline reproduces
  // (tests/partition/training_cost_test.cpp).
  PipelineTime time = pipelineTime(chunk, chunks.comm, c);
  // Unequal stages (the embedding and head stages against the blocks): the closed form charges a
  // short stage's idle time at t_max, so the plan's own order runs through the event simulation
  // when it has at most kEventSimulatedPasses passes (a step count), and that makespan is the pipeline time.
  if (scheduleRuns(training, c) &&
      static_cast<std::int64_t>(2) * c.pp * c.microbatches * c.interleave <= kEventSimulatedPasses) {
    const PipelineSchedule schedule = c.interleave > 1 ? PipelineSchedule::kInterleaved
                                      : training.schedule == PipelineSchedule::kGPipe ? PipelineSchedule::kGPipe
                                                                                       : PipelineSchedule::k1F1B;
    auto order = buildPipelineOrder(schedule, c.pp, c.microbatches, c.interleave);
    if (order.ok())
      if (auto timing = simulatePipeline(*order, trainingPipelineCosts(chunks, c)); timing.ok())
        time.iteration = timing->makespan;
  }
  // The links and transit chips that every microbatch's messages share serve m microbatches in
  // no less than m times their busiest per-microbatch time.
  cost.sharedLinkCycles = sharedLinkPeriod(profile, c, stages, links, chunks);
  time.iteration = std::max(time.iteration, cost.sharedLinkCycles * c.microbatches);
  // After the pipeline: the gradient all-reduce over dp (and, for a spatial split, of the convolution
  // gradients over the TP group) in buckets, started as the last microbatch's backward pass
  // completes each bucket (so all but the last bucket can hide behind that pass), then the optimizer
  // step on the chip's (or with sharding, the replica's share of the) parameters.
  double tail = 0, exposedComm = 0;
  const double vectorRate = static_cast<double>(chip.vectorBytes) / 4.0 * chip.vxmAluGroups;  // FP32 elements/cycle
  const double flopsPerParameter = training.optimizer == ir::Optimizer::kAdam ? 10.0 : 2.0;
  for (int s = 0; s < c.pp; ++s) {
    double exposed = 0;
    const double bucket = static_cast<double>(training.bucketBytes);
    const double dpBuckets = std::ceil(static_cast<double>(gradients[s]) / bucket);
    const double tpBuckets = std::ceil(static_cast<double>(chunks.groupGradients[s]) / bucket);
    // With the optimizer state sharded the replicas reduce-scatter (and later all-gather) instead.
    const double dpCycles =
        training.shardOptimizer
            ? ringAllReduce(static_cast<double>(gradients[s]), c.dp, dpBuckets, links.dp)
            : gradientAllReduce(static_cast<double>(gradients[s]), c.dp, bucket, links.dp);
    const double total = dpCycles +
                         ringAllReduce(static_cast<double>(chunks.groupGradients[s]), c.tp, tpBuckets, links.tp);
    if (total > 0) exposed = std::max(total / (dpBuckets + tpBuckets), total - chipBackward[s]);
    const double step = training.optimizer == ir::Optimizer::kNone
                            ? 0.0
                            : parameters[s] / (training.shardOptimizer ? c.dp : 1) * flopsPerParameter / vectorRate;
    if (exposed + step > tail) {
      tail = exposed + step;
      exposedComm = exposed;
    }
  }
  cost.chunkCycles = time.chunkMax;
  cost.pipelineCycles = time.iteration;
  if (stageCycles) *stageCycles = time.chipBusy;
  cost.iterationCycles = time.iteration + tail;
  cost.bubbleFraction = cost.iterationCycles > 0 ? std::max(0.0, 1.0 - time.busy / c.pp / cost.iterationCycles) : 0;
  cost.commShare = time.busy > 0 ? (time.comm + exposedComm * c.pp) / (time.busy + exposedComm * c.pp) : 0;
  cost.copies = 1;  // spare chips would train other models: a training step's samples/s is its own
  const double seconds = cost.iterationCycles / (chip.clockMhz * 1e6);
  cost.latencySeconds = seconds;
  cost.throughput = seconds > 0 ? static_cast<double>(profile.samples) * cost.copies / seconds : 0;
  return cost;
}

}  // namespace tsp::partition
