// The cost of a plan: alpha-beta communication on its placement, pipeline time, memory per chip.
#include "partition/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>



namespace tsp::partition {

std::string Candidate::canonical() const {
  std::string text = fmt::format("dp{}-tp{}-pp{}-m{}-v{}", dp, tp, pp, microbatches, interleave);
  if (split == TensorSplit::k2d || split == TensorSplit::kSpatial) text += std::string("-") + tensorSplitName(split);
  return text;
}

namespace {

// The devices on one mesh axis of a candidate's tensor split: tp, or q on a 2D q x q grid.
double meshAxisSize(const Candidate& c) { return c.split == TensorSplit::k2d ? std::round(std::sqrt(c.tp)) : c.tp; }

}  // namespace

double allReduceCycles(double chips, double bytes, const LinkFigures& links) {
  if (chips < 2) return 0;
  const double alpha = static_cast<double>(links.alpha), beta = links.cyclesPerByte * links.contention;
  const double ring = 2 * (chips - 1) * alpha + 2 * (chips - 1) / chips * bytes * beta;
  const double tree = 2 * std::ceil(std::log2(chips)) * (alpha + bytes * beta);
  if (const auto& points = links.fitPoints; points.size() >= 2) {
    size_t i = 1;
    while (i + 1 < points.size() && points[i].first < bytes) ++i;
    const auto [b0, c0] = points[i - 1];
    const auto [b1, c1] = points[i];
    return std::max(c0 * std::min(1.0, bytes / b0), c0 + (c1 - c0) * (bytes - b0) / (b1 - b0));
  }
  if (links.direct) {
    const double twoShot = 2 * (alpha + bytes / chips * links.cyclesPerByte), oneShot = alpha + bytes * links.cyclesPerByte;
    return std::min({ring, tree, twoShot, oneShot});
  }
  if (bytes >= kTreeAllReduceBelowBytes) return ring;
  return std::min(ring, tree);
}

double allGatherCycles(double chips, double bytes, const LinkFigures& links) {
  if (chips < 2) return 0;
  const double alpha = static_cast<double>(links.alpha);
  const double ring = (chips - 1) * alpha + (chips - 1) / chips * bytes * links.cyclesPerByte * links.contention;
  return links.direct ? std::min(ring, alpha + bytes / chips * links.cyclesPerByte) : ring;
}

double layerCyclesAt(const LayerProfile& layer, double share) {
  const auto& points = layer.batchCycles;
  if (points.size() < 2) {
    const double install = static_cast<double>(layer.installCycles);
    return (static_cast<double>(layer.cycles) - install) * share + install;
  }
  size_t i = 1;
  while (i + 1 < points.size() && points[i].first < share) ++i;
  const auto [f0, c0] = points[i - 1];
  const auto [f1, c1] = points[i];
  const double at = static_cast<double>(c0) + (static_cast<double>(c1 - c0)) * (share - f0) / (f1 - f0);
  return std::max(1.0, at);
}

namespace {

// A layer's cycles at `scaled` (its cycles at the microbatch's share) on one rank that does `share`
// of its work: the cycles that shrink with the rows (the compiler's line through the smallest
// shares of the batch) also shrink with the split, as do the weight installs, split with the
// weights; the rest of the fixed part (pipeline fill and drain, op latencies) stays whole.
double splitCycles(const LayerProfile& layer, double scaled, double share) {
  if (layer.batchCycles.size() < 2) return scaled * share;
  const double fixed = std::min(scaled, layerCyclesAt(layer, 0.0));
  const double latency = std::max(0.0, fixed - static_cast<double>(layer.weightInstallCycles));
  return latency + (scaled - latency) * share;
}

// One rank's compute at a tensor split: its compiled layer (scaled with the batch as the whole
// layer is) when the layer was too large for one chip, else the split of the layer's cycles.
double rankCompute(const LayerProfile& layer, double scaled, const LayerProfile::WidthFigures* at,
                   double defaultShare) {
  if (at && at->rankCycles > 0 && layer.cycles > 0)
    return static_cast<double>(at->rankCycles) * scaled / static_cast<double>(layer.cycles);
  return splitCycles(layer, scaled, at ? at->computeShare : defaultShare);
}

}  // namespace

LayerShare layerShare(const LayerProfile& layer, const Candidate& c, const CandidateLinks& links, int stage) {
  const double frac = 1.0 / (static_cast<double>(c.dp) * c.microbatches);  // share of the batch per microbatch
  const double scaled = layerCyclesAt(layer, frac);
  LayerShare share;
  const double t = c.tp;
  // The convolution share of the layer: split by a spatial split only.
  const double conv = static_cast<double>(layer.convCycles) / std::max<double>(1, static_cast<double>(layer.cycles));
  switch (c.split) {
    case TensorSplit::kNone: share.compute = scaled; break;
    case TensorSplit::kMegatron: {
      // At the candidate's width as the sharding splits it (figuresAt); without those figures the
      // matmuls, attention heads and the elementwise work between them split, convolutions do not.
      const auto* at = layer.figuresAt(c.split, c.tp);
      share.compute = rankCompute(layer, scaled, at, conv + (1 - conv) / t);
      const int allReduces = at ? at->allReduces : layer.allReduces;
      const int allGathers = at ? at->allGathers : layer.allGathers;
      const double reduced = static_cast<double>(at ? at->allReduceBytes : layer.allReduceBytes);
      const double gathered = static_cast<double>(at ? at->allGatherBytes : layer.allGatherBytes);
      // All-reduce and all-gather as the scheduler runs them (allReduceCycles, allGatherCycles).
      const LinkFigures& ring = links.tpOf(stage);
      share.comm = allReduces * allReduceCycles(t, reduced * frac / std::max(1, allReduces), ring) +
                   allGathers * allGatherCycles(t, gathered * frac / std::max(1, allGathers), ring);
      break;
    }
    case TensorSplit::k2d: {
      // q x q grid: each weight matmul holds 1/q^2 of its weight (K split over one axis, N over
      // the other) and all-reduces its partial output, 1/q of it per chip, over the q chips of one
      // axis.
      const double q = std::round(std::sqrt(t));
      const auto* at = layer.figuresAt(c.split, c.tp);
      share.compute = rankCompute(layer, scaled, at, conv + (1 - conv) / t);
      const auto& g = at ? at->grid : layer.grid;
      if (g[0].allReduces + g[0].allGathers + g[1].allReduces + g[1].allGathers == 0) {
        share.comm = layer.weightMatmuls *
                     allReduceCycles(q, static_cast<double>(layer.matmulOutBytes) / q * frac /
                                            std::max(1, layer.weightMatmuls), links.tp);
        break;
      }
      // The collectives the sharding makes, each on its axis's rings: a tensor split over the other
      // axis moves 1/q of itself.
      for (int a = 0; a < 2; ++a) {
        const LinkFigures& f = links.grid[a].alpha > 0 ? links.grid[a] : links.tp;
        const double reduced =
            (static_cast<double>(g[a].allReduceBytes[0]) + static_cast<double>(g[a].allReduceBytes[1]) / q) * frac;
        const double gathered =
            (static_cast<double>(g[a].allGatherBytes[0]) + static_cast<double>(g[a].allGatherBytes[1]) / q) * frac;
        share.comm += g[a].allReduces * allReduceCycles(q, reduced / std::max(1, g[a].allReduces), f) +
                      g[a].allGathers * allGatherCycles(q, gathered / std::max(1, g[a].allGathers), f);
      }
      break;
    }
    case TensorSplit::kSpatial: {
      share.compute = scaled * (conv / t + (1 - conv));
      share.comm = layer.halos * static_cast<double>(links.tp.alpha) +
                   static_cast<double>(layer.haloBytes) * frac * links.tp.cyclesPerByte * links.tp.contention;
      break;
    }
  }
  return share;
}

double tpEdgeBytes(const LayerProfile& layer, const Candidate& c) {
  if (c.tp < 2) return 0;
  const double frac = 1.0 / (static_cast<double>(c.dp) * c.microbatches);
  const double t = c.tp;
  switch (c.split) {
    case TensorSplit::kNone: return 0;
    case TensorSplit::kMegatron: {
      const auto* at = layer.figuresAt(c.split, c.tp);
      const double reduced = static_cast<double>(at ? at->allReduceBytes : layer.allReduceBytes);
      const double gathered = static_cast<double>(at ? at->allGatherBytes : layer.allGatherBytes);
      return (2 * (t - 1) / t * reduced + (t - 1) / t * gathered) * frac;
    }
    case TensorSplit::k2d: {
      // An edge belongs to one axis's rings: the busier axis's bytes.
      const double q = std::round(std::sqrt(t));
      const auto* at = layer.figuresAt(c.split, c.tp);
      const auto& g = at ? at->grid : layer.grid;
      double edge = (g[0].allReduces + g[0].allGathers + g[1].allReduces + g[1].allGathers == 0)
                        ? 2 * (q - 1) / q * static_cast<double>(layer.matmulOutBytes) / q
                        : 0.0;
      for (int a = 0; a < 2; ++a) {
        const double reduced = static_cast<double>(g[a].allReduceBytes[0]) + static_cast<double>(g[a].allReduceBytes[1]) / q;
        const double gathered = static_cast<double>(g[a].allGatherBytes[0]) + static_cast<double>(g[a].allGatherBytes[1]) / q;
        edge = std::max(edge, 2 * (q - 1) / q * reduced + (q - 1) / q * gathered);
      }
      return edge * frac;
    }
    case TensorSplit::kSpatial: return static_cast<double>(layer.haloBytes) * frac;
  }
  return 0;
}

Bytes allocatableSramBytes(const topology::ChipSpec& chip) {
  return static_cast<Bytes>(static_cast<double>(chip.sramBytes()) * kAllocatableSramShare);
}

LayerMemory rankMemory(const LayerProfile& layer, const Candidate& c) {
  if (const auto* at = layer.figuresAt(c.split, c.tp)) return at->rank;
  // Without the sharding's figures (tp = 1, a spatial split): convolution weights whole on every
  // chip of the group (a spatial split cuts the image), the rest split tp ways.
  const Bytes replicated = c.tp > 1 ? layer.convWeightBytes : 0;
  return LayerMemory{replicated + (layer.weightBytes - replicated) / c.tp, layer.stateBytes / c.tp,
                     layer.peakBytes / c.tp};
}

std::vector<LayerEdge> crossingEdges(const ModelProfile& profile, const std::vector<int>& layerChunk) {
  std::vector<LayerEdge> crossing;
  std::set<std::pair<std::int64_t, int>> received;  // (tensor, reading chunk)
  for (const auto& e : profile.edges) {
    if (layerChunk[e.from] == layerChunk[e.to]) continue;
    if (e.tensor >= 0 && !received.insert({e.tensor, layerChunk[e.to]}).second) continue;
    crossing.push_back(e);
  }
  return crossing;
}

std::vector<double> inferenceBytesPerChip(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages) {
  const double frac = 1.0 / (static_cast<double>(c.dp) * c.microbatches);
  std::vector<double> weights(c.pp, 0), state(c.pp, 0), peak(c.pp, 0), stash(c.pp, 0);
  std::vector<Bytes> inbound(stages.chunks, 0);
  for (const auto& e : crossingEdges(profile, stages.layerChunk)) inbound[stages.layerChunk[e.to]] += e.bytes;
  inbound[0] += profile.inputBytes;
  for (size_t l = 0; l < profile.layers.size(); ++l) {
    const LayerProfile& layer = profile.layers[l];
    const int chip = stages.layerChunk[l] % c.pp;
    const LayerMemory rank = rankMemory(layer, c);
    weights[chip] += static_cast<double>(rank.weightBytes);
    state[chip] += static_cast<double>(rank.stateBytes) / c.dp;
    peak[chip] = std::max(peak[chip], static_cast<double>(rank.peakBytes) * frac);
  }
  // A weight or constant read by several layers of one chip is held there once.
  for (const SharedLeaf& leaf : profile.sharedLeaves) {
    std::map<int, int> readersOnChip;
    for (int l : leaf.layers) ++readersOnChip[stages.layerChunk[l] % c.pp];
    const auto at = leaf.rankBytesAt.find({static_cast<int>(c.split), c.tp});
    const double held = static_cast<double>(at == leaf.rankBytesAt.end() ? leaf.bytes / c.tp : at->second);
    for (const auto& [chip, n] : readersOnChip) weights[chip] -= (n - 1) * held;
  }
  // Pipeline stash: each chunk double-buffers its inbound activations (one microbatch arriving
  // while the previous one is computed).
  for (int k = 0; k < stages.chunks; ++k) stash[k % c.pp] += 2.0 * static_cast<double>(inbound[k]) * frac / c.tp;
  for (int s = 0; s < c.pp; ++s) weights[s] += state[s] + peak[s] + stash[s];
  return weights;
}

std::vector<double> chunkSendBytes(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages,
                                   SendDirection direction) {
  std::vector<double> outbound(stages.chunks, 0);
  if (stages.chunks == 1) return outbound;
  const double frac = 1.0 / (static_cast<double>(c.dp) * c.microbatches);
  // Each TP rank sends the activations it holds: all of them when they are replicated over the TP
  // group (after a Megatron all-reduce), its 1/tp share when they are split.
  for (const auto& e : crossingEdges(profile, stages.layerChunk)) {
    // 2D: an activation is split over one grid axis and replicated over the other.
    const bool replicated = c.split == TensorSplit::kMegatron && !profile.layers[e.from].outputSplitAt(c.tp);
    const double holds = replicated ? 1 : meshAxisSize(c);
    const int sender = direction == SendDirection::kForward ? stages.layerChunk[e.from] : stages.layerChunk[e.to];
    outbound[sender] += static_cast<double>(e.bytes) / holds * frac;
  }
  return outbound;
}

std::vector<double> chunkSendCycles(const ModelProfile& profile, const Candidate& c, const StageAssignment& stages,
                                    const CandidateLinks& links, SendDirection direction) {
  std::vector<double> sends = chunkSendBytes(profile, c, stages, direction);
  for (double& bytes : sends)
    if (bytes > 0) bytes = links.pp.transfer(bytes);
  return sends;
}

LinkFloor sharedLinkFloor(const SharedLinks& links, const std::vector<double>& bytes) {
  LinkFloor floor;
  floor.link.assign(links.stages, 0);
  floor.transit.assign(links.stages, 0);
  std::vector<int> touched;
  auto add = [&](const SharedLinks::Crossing& crossing) {
    double busy = 0;
    touched.clear();
    for (const auto& [kind, cyclesPerByte] : crossing.messages) {
      const double b = kind < static_cast<int>(bytes.size()) ? bytes[kind] : 0;
      if (b <= 0) continue;
      busy += b * cyclesPerByte;
      // A send (and its gradient coming back) joins stage s and the next; a send to stage 0, s and 0.
      const int stage = kind % links.stages, kindOf = kind / links.stages;
      touched.push_back(stage);
      if (kindOf == SharedLinks::kSendForward || kindOf == SharedLinks::kSendBackward)
        touched.push_back((stage + 1) % links.stages);
      if (kindOf == SharedLinks::kToFirstStage) touched.push_back(0);
    }
    floor.busiest = std::max(floor.busiest, busy);
    if (crossing.stage >= 0 && busy > 0) {
      floor.transit[crossing.stage] = std::max(floor.transit[crossing.stage], busy);
      floor.transitChips.push_back({crossing.stage, busy, &crossing.coupled});
    }
    for (int s : touched)
      if (s != crossing.stage) floor.link[s] = std::max(floor.link[s], busy);
  };
  for (const auto& direction : links.directions) add(direction);
  for (const auto& transit : links.transits) add(transit);
  return floor;
}

PipelineTime pipelineTime(const std::vector<double>& chunk, const std::vector<double>& chunkComm, const Candidate& c) {
  PipelineTime time;
  const int chunks = static_cast<int>(chunk.size());
  double passSum = 0;
  std::vector<double> chipLongest(c.pp, 0);
  time.chipBusy.assign(c.pp, 0);
  for (int k = 0; k < chunks; ++k) {
    time.chunkMax = std::max(time.chunkMax, chunk[k]);
    chipLongest[k % c.pp] = std::max(chipLongest[k % c.pp], chunk[k]);
    time.busy += chunk[k] * c.microbatches;
    time.chipBusy[k % c.pp] += chunk[k] * c.microbatches;
    time.comm += chunkComm[k] * c.microbatches;
  }
  for (int s = 0; s < c.pp; ++s) passSum += chipLongest[s] * (chunks / c.pp);
  // (m v - 1) t_max + one pass through every chunk: (m + p - 1) t for v = 1 and equal stages,
  // (m v + p - 1) t/v interleaved (Megatron's bubble (p - 1)/(m v) of the ideal time).
  const double mv = static_cast<double>(c.microbatches) * c.interleave;
  time.iteration = (mv - 1) * time.chunkMax + passSum / c.interleave;
  // Megatron's interleaved form assumes a steady state (m >= p); with fewer microbatches a
  // microbatch still passes through every chunk in turn, and the rest follow at the slowest chunk.
  double pass = 0;
  for (double t : chunk) pass += t;
  time.iteration = std::max(time.iteration, pass + (static_cast<double>(c.microbatches) - 1) * time.chunkMax);
  return time;
}

}  // namespace tsp::partition
