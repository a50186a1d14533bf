// The cluster scheduler for sharded plans: compute segments, collectives and cross-chip tensors on one timeline per chip.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "compile/schedule/cluster_schedule.h"
#include "compile/schedule/collectives.h"
#include "compile/schedule/sharded_schedule_internal.h"

namespace tsp::schedule {

namespace {

using detail::collectiveOpOf;
using detail::isCollective;

bool isPointToPoint(ir::OpKind kind) { return kind == ir::OpKind::kSend || kind == ir::OpKind::kRecv; }

std::string attrText(const ir::AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) return v;
        else if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>) return fmt::format("{}", v);
        else return fmt::format("[{}]", fmt::join(v, ","));
      },
      value);
}

}  // namespace

namespace detail {

// What compileShard sees of a segment, tensor ids renumbered: identical keys compile to one program.
std::string segmentKey(const ir::Graph& graph, const std::vector<ir::OpId>& ops) {
  std::map<ir::TensorId, int> local;
  const std::set<ir::OpId> inSegment(ops.begin(), ops.end());
  std::string key;
  // A constant's values are in the key only where the lowering reads them: TP ranks' segments that
  // differ in their constants' values alone (a vocabulary slice's row map) share one program.
  auto tensorText = [&](ir::TensorId id, bool values) {
    const auto& t = graph.tensor(id);
    std::string text = fmt::format("{}:{}[{}]", static_cast<int>(t.role), static_cast<int>(t.dtype), fmt::join(t.shape, "x"));
    if (values && t.role == ir::TensorRole::kConstant && t.data)
      text += fmt::format("#{}:{:x}", static_cast<int>(t.data->encoding()),
                          std::hash<std::string_view>{}(
                              std::string_view(reinterpret_cast<const char*>(t.data->raw()), t.data->bytes())));
    return text;
  };
  for (ir::OpId id : ops) {
    const auto& op = graph.op(id);
    key += ir::opKindName(op.kind);
    for (const auto& [name, value] : op.attrs) key += fmt::format(" {}={}", name, attrText(value));
    key += " (";
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      auto it = local.find(op.inputs[i]);
      key += it != local.end() ? fmt::format("%{} ", it->second)
                               : tensorText(op.inputs[i], lower::readsInputValues(op, i)) + " ";
    }
    key += ") ->";
    for (ir::TensorId out : op.outputs) {
      const int n = static_cast<int>(local.size());
      local[out] = n;
      bool leaves = std::find(graph.outputs().begin(), graph.outputs().end(), out) != graph.outputs().end();
      for (ir::OpId user : graph.tensor(out).users) leaves |= !inSegment.count(user);
      key += fmt::format(" %{}={}{}", n, tensorText(out, false), leaves ? "!" : "");
    }
    key += ";";
  }
  return key;
}

std::string residentSegmentKey(const ir::Graph& graph, const std::vector<ir::OpId>& ops,
                               const std::vector<ir::TensorId>& resident) {
  std::string key = segmentKey(graph, ops) + " resident";
  for (ir::TensorId t : resident) {
    std::string at = "?";
    for (size_t i = 0; i < ops.size() && at == "?"; ++i) {
      const auto& ins = graph.op(ops[i]).inputs;
      if (const auto it = std::find(ins.begin(), ins.end(), t); it != ins.end())
        at = fmt::format("{}.{}", i, it - ins.begin());
    }
    key += " " + at;
  }
  // A value that replaces a resident leaf (a KV cache's update) lowers differently.
  for (size_t i = 0; i < ops.size(); ++i)
    for (size_t o = 0; o < graph.op(ops[i]).outputs.size(); ++o)
      if (graph.overwrites(graph.op(ops[i]).outputs[o]) >= 0) key += fmt::format(" over {}.{}", i, o);
  return key;
}

}  // namespace detail

namespace {

using detail::ChipTimelines;
using detail::InFlight;
using detail::segmentKey;

class ShardedScheduler {
 public:
  ShardedScheduler(const ShardedWorkload& work, const topology::Cluster& cluster, const Options& options,
                   ShardBatchCompiler batchCompiler, int compileRanks)
      : work_(work), cluster_(cluster), options_(options), batchCompiler_(std::move(batchCompiler)),
        compileRanks_(std::max(1, compileRanks)),
        timelines_(cluster.chip(), cluster.chipCount()), stored_(cluster.chip()),
        calendar_(cluster.links().size(), true), placedOn_(work.graphs.size()),
        inFlight_(work.graphs.size()), waveOf_(work.graphs.size(), -1) {
    for (size_t w = 0; w < work.waves.size(); ++w)
      for (int d : work.waves[w])
        if (d >= 0 && static_cast<size_t>(d) < waveOf_.size()) waveOf_[d] = static_cast<std::int32_t>(w);
  }

  Expected<ClusterSchedule> run() {
    if (auto s = check(); !s) return s.error();
    const int ops = static_cast<int>(work_.graphs.front().ops().size());
    if (compileRanks_ > 1) planColdSegments();
    if (work_.lanes.empty()) {
      for (const auto& wave : work_.waves)
        if (auto s = walk(wave, 0, ops); !s) return s.error();
    } else if (auto s = runLanes(); !s) {
      return s.error();
    }
    result_.programs = timelines_.finish();
    result_.reports.resize(cluster_.chipCount());
    for (int c = 0; c < cluster_.chipCount(); ++c) {
      auto& report = reports_[c];
      report.cycles = result_.programs[c].predictedCycles;
      report.lowerBound = result_.programs[c].lowerBoundCycles;
      report.instructions = static_cast<std::int64_t>(result_.programs[c].instructions.size());
      result_.reports[c] = report;
    }
    return std::move(result_);
  }

 private:
  Status check() const {
    if (work_.graphs.empty() || work_.waves.empty()) return makeError(ExitCode::kInternal, "a sharded plan without devices");
    const auto& lead = work_.graphs.front();
    for (size_t d = 0; d < work_.graphs.size(); ++d) {
      const auto& g = work_.graphs[d];
      if (g.ops().size() != lead.ops().size() || work_.opChip[d].size() != g.ops().size())
        return makeError(ExitCode::kInternal, fmt::format("device {}'s graph is not SPMD with device 0's", d));
      for (size_t j = 0; j < g.ops().size(); ++j) {
        if (g.op(j).kind != lead.op(j).kind)
          return modelError(g.op(j).name, fmt::format("device {} runs {} where device 0 runs {}", d,
                                                      ir::opKindName(g.op(j).kind), ir::opKindName(lead.op(j).kind)));
        const int c = work_.opChip[d][j];
        if (c < 0 || c >= cluster_.chipCount())
          return makeError(ExitCode::kConfig, fmt::format("op '{}' of device {} is placed on chip {}, not in the "
                                                          "cluster of {} chips", g.op(j).name, d, c,
                                                          cluster_.chipCount()));
      }
    }
    return {};
  }

  // The end of the step of the wave's walk that starts at op j (before `end`): one collective, a
  // run of Send/Recv ops, or a run of compute ops on one chip per device.
  int stepEnd(const std::vector<int>& wave, int j, int end) const {
    const ir::Graph& lead = work_.graphs[wave.front()];
    const ir::OpKind kind = lead.op(j).kind;
    int k = j + 1;
    if (isCollective(kind)) return k;
    if (isPointToPoint(kind)) {
      while (k < end && isPointToPoint(lead.op(k).kind)) ++k;
      return k;
    }
    while (k < end && !isCollective(lead.op(k).kind) && !isPointToPoint(lead.op(k).kind) && sameChipRun(wave, j, k)) ++k;
    return k;
  }

  bool isComputeStep(const std::vector<int>& wave, int j) const {
    const ir::OpKind kind = work_.graphs[wave.front()].op(j).kind;
    return !isCollective(kind) && !isPointToPoint(kind);
  }

  // Ops [first, end) of every device of the wave: compute segments, collectives, Send/Recv steps in turn.
  Status walk(const std::vector<int>& wave, int first, int end) {
    for (int j = first; j < end;) {
      const int k = stepEnd(wave, j, end);
      const ir::OpKind kind = work_.graphs[wave.front()].op(j).kind;
      if (isCollective(kind)) {
        if (auto s = collective(wave, j); !s) return s;
      } else if (isPointToPoint(kind)) {
        if (auto s = pointToPoint(wave, j, k); !s) return s;
      } else if (auto s = compute(wave, j, k); !s) {
        return s;
      }
      j = k;
    }
    return {};
  }

  // Segments likely compiled soon, to fill a batch of fewer new keys than compileRanks_ (fill): each
  // compute step's segments as a chip that holds its inputs and ran nothing before would see them
  // (the key of a segment after a collective's fence, or of a chip's first), in walk order.
  void planColdSegments() {
    const int ops = static_cast<int>(work_.graphs.front().ops().size());
    std::set<std::string> keys;
    for (const auto& wave : work_.waves)
      for (int j = 0; j < ops;) {
        const int k = stepEnd(wave, j, ops);
        if (isComputeStep(wave, j))
          for (int d : wave) {
            SegmentUse use = segmentUse(d, j, k, 0);
            if (keys.insert(use.key).second) cold_.push_back(std::move(use));
          }
        j = k;
      }
  }

  // The lanes' wave chunks, list-scheduled: of the lanes whose next chunk has its previous chunk
  // (same wave) done, the one whose chips and input are ready first goes next (ties: the later
  // chunk, so that a tensor a collective made reaches the next stage before its chips move on to
  // the next microbatch; then the lower lane).
  // Each chip thus runs its chunks in its lane's order, and the placement order follows time.
  Status runLanes() {
    const int ops = static_cast<int>(work_.graphs.front().ops().size());
    int chunks = 1;
    for (int c : work_.opChunk) chunks = std::max(chunks, c + 1);
    for (const auto& lane : work_.lanes)
      for (const WaveChunk& t : lane) chunks = std::max(chunks, t.chunk + 1);
    auto chunkOf = [&](int op) { return work_.opChunk.empty() ? 0 : work_.opChunk[op]; };
    // Runs of consecutive ops of each chunk, in op order.
    std::vector<std::vector<std::pair<int, int>>> runs(chunks);
    for (int j = 0; j < ops;) {
      int k = j + 1;
      while (k < ops && chunkOf(k) == chunkOf(j)) ++k;
      runs[chunkOf(j)].push_back({j, k});
      j = k;
    }
    const int waves = static_cast<int>(work_.waves.size());
    std::vector<Cycle> doneAt(static_cast<size_t>(waves) * chunks, -1);
    std::vector<int> seen(doneAt.size(), 0);
    for (const auto& lane : work_.lanes)
      for (const WaveChunk& t : lane) {
        if (t.wave < 0 || t.wave >= waves || t.chunk < 0 || t.chunk >= chunks || seen[t.wave * chunks + t.chunk]++)
          return makeError(ExitCode::kInternal, fmt::format("lane task (wave {}, chunk {}) is out of range or repeated",
                                                            t.wave, t.chunk));
      }
    // Chunks without ops (none of a wave's ops lie in them) count as done at once.
    for (int c = 0; c < chunks; ++c)
      if (runs[c].empty())
        for (int w = 0; w < waves; ++w) doneAt[w * chunks + c] = 0;
    for (size_t i = 0; i < seen.size(); ++i)
      if (!seen[i] && doneAt[i] < 0)
        return makeError(ExitCode::kInternal, fmt::format("wave {} chunk {} is in no lane", i / chunks, i % chunks));
    std::vector<std::vector<int>> chipsOfTask(doneAt.size());  // filled on first use
    auto chipsOf = [&](const WaveChunk& t) -> const std::vector<int>& {
      auto& chips = chipsOfTask[t.wave * chunks + t.chunk];
      if (chips.empty()) {
        std::set<int> on;
        for (const auto& [a, b] : runs[t.chunk])
          for (int d : work_.waves[t.wave])
            for (int j = a; j < b; ++j) on.insert(work_.opChip[d][j]);
        chips.assign(on.begin(), on.end());
      }
      return chips;
    };
    std::vector<size_t> next(work_.lanes.size(), 0);
    for (size_t left = seen.size() - std::count(seen.begin(), seen.end(), 0); left > 0; --left) {
      int best = -1, bestChunk = 0;
      Cycle bestReady = 0;
      for (size_t l = 0; l < work_.lanes.size(); ++l) {
        if (next[l] >= work_.lanes[l].size()) continue;
        const WaveChunk& t = work_.lanes[l][next[l]];
        if (t.chunk > 0 && doneAt[t.wave * chunks + t.chunk - 1] < 0) continue;
        Cycle ready = t.chunk > 0 ? doneAt[t.wave * chunks + t.chunk - 1] : 0;
        for (int c : chipsOf(t)) ready = std::max(ready, timelines_.freeAt(c));
        if (best < 0 || ready < bestReady || (ready == bestReady && t.chunk > bestChunk)) {
          best = static_cast<int>(l);
          bestReady = ready;
          bestChunk = t.chunk;
        }
      }
      if (best < 0) return makeError(ExitCode::kInternal, "the pipeline lanes' chunk orders deadlock");
      // The other lanes' next ready chunks: their first segments are the likeliest next compiles.
      lookahead_.clear();
      for (size_t l = 0; l < work_.lanes.size() && compileRanks_ > 1; ++l) {
        if (static_cast<int>(l) == best || next[l] >= work_.lanes[l].size()) continue;
        const WaveChunk& u = work_.lanes[l][next[l]];
        if ((u.chunk > 0 && doneAt[u.wave * chunks + u.chunk - 1] < 0) || runs[u.chunk].empty()) continue;
        const auto& wave = work_.waves[u.wave];
        const int a = runs[u.chunk].front().first;
        if (isComputeStep(wave, a)) lookahead_.push_back({u.wave, a, stepEnd(wave, a, runs[u.chunk].front().second)});
      }
      const WaveChunk t = work_.lanes[best][next[best]++];
      for (const auto& [a, b] : runs[t.chunk])
        if (auto s = walk(work_.waves[t.wave], a, b); !s) return s;
      Cycle done = 0;
      for (int c : chipsOf(t)) done = std::max(done, timelines_.freeAt(c));
      doneAt[t.wave * chunks + t.chunk] = done;
    }
    return {};
  }

  // Ops j and k - 1 run on one chip on every device of the wave.
  bool sameChipRun(const std::vector<int>& wave, int j, int k) const {
    for (int d : wave)
      if (work_.opChip[d][k] != work_.opChip[d][j]) return false;
    return true;
  }

  // Schedules messages (one step) at the earliest cycle their chips and links allow, and appends
  // every touched chip's chains to its timeline.
  // Segment bursts waiting on the ports its messages arrive on are received first (receiveWaiting).
  Status schedule(CollectivePlan plan) {
    std::vector<detail::InFlightMap*> flights;
    for (auto& device : inFlight_) flights.push_back(&device);
    receiveWaiting(detail::messagePorts(plan, cluster_));
    return detail::appendCollective(plan, cluster_, timelines_, calendar_, result_);
  }

  // Receives the segment bursts waiting on the ports (chip, port) before their cycles (receiveWaiting).
  void receiveWaiting(const std::map<std::pair<int, int>, Cycle>& ports) {
    if (ports.empty()) return;
    std::vector<detail::InFlightMap*> flights;
    for (auto& device : inFlight_) flights.push_back(&device);
    const auto origin = [&](size_t d, ir::TensorId tensor) {
      return lower::movedOrigin(work_.graphs[d], tensor, "Receive", waveOf_[d]);
    };
    for (const auto& taken : detail::receiveWaiting(ports, cluster_, timelines_, flights, origin))
      placedOn_[taken.map][taken.tensor].insert(taken.chip);
  }

  // Bursts that arrived on a port before the first of those the segments of ops [j, k) receive
  // there would be handed to them first: they are received before (receiveWaiting).
  void receiveEarlier(const std::vector<int>& wave, int j, int k) {
    std::map<std::pair<int, int>, Cycle> ports;
    for (int d : wave) {
      const int chip = work_.opChip[d][j];
      for (int s = j; s < k; ++s)
        for (ir::TensorId in : work_.graphs[d].op(s).inputs) {
          const auto flight = inFlight_[d].find({in, chip});
          if (flight == inFlight_[d].end() || placedOn_[d][in].count(chip)) continue;
          auto [it, added] = ports.try_emplace({chip, flight->second.port}, flight->second.arrivals.front());
          if (!added) it->second = std::min(it->second, flight->second.arrivals.front());
        }
    }
    receiveWaiting(ports);
  }

  // A collective reads its input from SRAM: one still in flight to its chip (a segment burst that a
  // compute op there reads too, so bring left it on its way) is received once it has arrived whole,
  // whatever port it arrives on, and the collective follows.
  void receiveInputs(const std::vector<int>& wave, int j) {
    std::map<std::pair<int, int>, Cycle> ports;
    for (int d : wave) {
      const int chip = work_.opChip[d][j];
      const ir::TensorId in = work_.graphs[d].op(j).inputs.front();
      const auto flight = inFlight_[d].find({in, chip});
      if (flight == inFlight_[d].end() || placedOn_[d][in].count(chip)) continue;
      const Cycle whole = std::max(flight->second.lastVector + 1, flight->second.released);
      auto [it, added] = ports.try_emplace({chip, flight->second.port}, whole);
      if (!added) it->second = std::max(it->second, whole);
    }
    receiveWaiting(ports);
  }

  Status collective(const std::vector<int>& wave, int j) {
    // A collective's input made on another chip (a stage boundary just before it) travels first.
    std::vector<Needed> needed;
    for (int d : wave) needed.push_back({d, work_.graphs[d].op(j).inputs.front(), work_.opChip[d][j]});
    if (auto s = bring(needed); !s) return s;
    receiveInputs(wave, j);
    // One instance per distinct member list among the wave's devices.
    std::set<std::vector<std::int64_t>> done;
    for (int d : wave) {
      const ir::Op& op = work_.graphs[d].op(j);
      const auto devices = op.intsAttr("devices");
      if (!done.insert(devices).second) continue;
      std::vector<int> chips, members;
      for (std::int64_t position : devices) {
        if (position < 0 || position >= static_cast<std::int64_t>(wave.size()))
          return modelError(op.name, fmt::format("{} joins position {} of a wave of {} devices", ir::opKindName(op.kind),
                                                 position, wave.size()));
        members.push_back(wave[position]);
        chips.push_back(work_.opChip[members.back()][j]);
      }
      if (std::set<int>(chips.begin(), chips.end()).size() != chips.size())
        return modelError(op.name, "two devices of one collective group are placed on the same chip");
      const ir::Graph& g = work_.graphs[d];
      const ir::TensorId full = op.kind == ir::OpKind::kAllGather ? op.outputs.front() : op.inputs.front();
      const std::int64_t bytes = stored_.vectors(g, full) * cluster_.chip().vectorBytes;
      const CollectiveAlgorithm algorithm = chooseTreeOrRing(collectiveOpOf(op.kind), chips, bytes, cluster_);
      auto plan = planCollective(collectiveOpOf(op.kind), algorithm,
                                 algorithm == CollectiveAlgorithm::kRing ? groupRing(cluster_, chips) : chips, bytes,
                                 cluster_, true);
      if (!plan) {
        Diagnostic e = plan.error();
        e.message = fmt::format("{}: {}", op.name, e.message);
        return e;
      }
      plan->origin = lower::opOrigin(g, op, full);
      plan->origin.instance = waveOf_[d];
      if (auto s = schedule(*plan); !s) return s;
      ++result_.collectives;
      for (int member : members) placedOn_[member][op.outputs.front()].insert(work_.opChip[member][j]);
    }
    return {};
  }

  // Send/Recv ops [j, k): each Send's tensor goes to the peer device's matching Recv (same tag).
  Status pointToPoint(const std::vector<int>& wave, int j, int k) {
    CollectivePlan plan;
    plan.steps.emplace_back();
    for (size_t position = 0; position < wave.size(); ++position)
      for (int s = j; s < k; ++s) {
        const int d = wave[position];
        const ir::Op& send = work_.graphs[d].op(s);
        if (send.kind != ir::OpKind::kSend) continue;
        const std::int64_t to = send.intAttr("peer", -1), tag = send.intAttr("tag", -1);
        if (to < 0 || to >= static_cast<std::int64_t>(wave.size()))
          return modelError(send.name, fmt::format("sends to position {} of a wave of {} devices", to, wave.size()));
        const int peer = wave[to];
        int recv = -1;
        for (int r = j; r < k && recv < 0; ++r) {
          const ir::Op& op = work_.graphs[peer].op(r);
          if (op.kind == ir::OpKind::kRecv && op.intAttr("peer", -1) == static_cast<std::int64_t>(position) &&
              op.intAttr("tag", -1) == tag)
            recv = r;
        }
        if (recv < 0) return modelError(send.name, fmt::format("no matching Recv on device {} (tag {})", peer, tag));
        const int src = work_.opChip[d][s], dst = work_.opChip[peer][recv];
        if (src != dst) {
          plan.steps.front().push_back({src, dst, stored_.vectors(work_.graphs[d], send.inputs.front()), false});
          if (plan.origin.op.empty())  // a step of several messages is named by its first
            plan.origin = {send.name, ir::opKindName(send.kind), send.layer,
                           work_.graphs[d].tensor(send.inputs.front()).name, "", ""};
        }
        placedOn_[peer][work_.graphs[peer].op(recv).outputs.front()].insert(dst);
      }
    if (!plan.steps.front().empty()) return schedule(plan);
    return {};
  }

  // A tensor of device `device` that must be on `chip` before an op there runs.
  struct Needed {
    int device;
    ir::TensorId tensor;
    int chip;
  };


  // Moves every needed tensor that is not on its chip yet (and is not in flight to it) as one
  // step of messages: send and receive chains at the earliest cycle chips and links allow.
  Status bring(const std::vector<Needed>& needed) {
    CollectivePlan plan;
    plan.steps.emplace_back();
    std::vector<Needed> moved;
    for (const auto& n : needed) {
      const ir::Graph& g = work_.graphs[n.device];
      const ir::OpId producer = g.tensor(n.tensor).producer;
      if (producer < 0) continue;  // graph inputs, weights, constants: each chip holds its slice
      auto& on = placedOn_[n.device][n.tensor];
      if (on.empty()) on.insert(work_.opChip[n.device][producer]);
      if (on.count(n.chip) || inFlight_[n.device].count({n.tensor, n.chip})) continue;
      if (std::any_of(moved.begin(), moved.end(),
                      [&](const Needed& m) { return m.device == n.device && m.tensor == n.tensor && m.chip == n.chip; }))
        continue;
      plan.steps.front().push_back({*on.begin(), n.chip, stored_.vectors(g, n.tensor), false});
      if (plan.origin.op.empty())  // a step of several messages is named by its first
        plan.origin = lower::movedOrigin(g, n.tensor, "Send", waveOf_[n.device]);
      moved.push_back(n);
    }
    if (!plan.steps.front().empty())
      if (auto s = schedule(plan); !s) return s;
    for (const auto& n : moved) placedOn_[n.device][n.tensor].insert(n.chip);
    return {};
  }

  // The direct link from chip a to chip b, or -1.
  int directLink(int a, int b) const {
    const auto route = cluster_.route(a, b);
    return route.size() == 1 ? route.front().link : -1;
  }

  // One device's segment of a wave: where and when it runs, what it receives and sends, its key.
  struct SegmentUse {
    int device = 0;
    int chip = 0;
    Cycle offset = 0;
    std::vector<ir::OpId> ops;
    lower::ShardInterface interface;
    std::string key;
    std::vector<std::pair<int, Cycle>> release;  // units the chip's earlier programs still use (Options::unitRelease)
    std::string shape;  // the key without release and arrival times: programs of one shape may stand in for each other
    isa::Program program;  // the compiled program, its stream registers renamed for the chip (earliestOffset)
    ChipTimelines::Footprint footprint;  // program's (ChipTimelines::footprint), from its compile's
    Cycle drain = 0;                     // program's ChipTimelines::streamDrain (renaming keeps it)
    std::vector<std::pair<ir::TensorId, int>> sendTo;  // (tensor, link)
    std::set<ir::TensorId> received;
  };

  // Compute ops [j, k) of every device of the wave. Inputs from other chips arrive first (as
  // messages) or during the segment (release times of its receives, when the producer sent them
  // over a direct link); outputs used by compute ops on directly linked chips leave during it. The
  // devices' segments on distinct chips are independent: their distinct new keys are compiled as
  // one batch (options' batch compiler), then placed device after device.
  Status compute(const std::vector<int>& wave, int j, int k) {
    std::vector<Needed> needed;
    for (int d : wave)
      for (int s = j; s < k; ++s)
        for (ir::TensorId in : work_.graphs[d].op(s).inputs) {
          const ir::OpId producer = work_.graphs[d].tensor(in).producer;
          if (producer >= 0 && producer < j) needed.push_back({d, in, work_.opChip[d][j]});
        }
    if (auto s = bring(needed); !s) return s;
    receiveEarlier(wave, j, k);

    std::vector<SegmentUse> batch;
    std::set<int> batchChips;
    for (int d : wave) {
      if (batchChips.count(work_.opChip[d][j]))  // this chip's next free cycle waits for the batch
        if (auto s = place(batch); !s) return s;
      if (batch.empty()) batchChips.clear();
      batch.push_back(firstTry(d, j, k));
      batchChips.insert(batch.back().chip);
    }
    return place(batch);
  }

  // The segment of device d for ops [j, k) at its first offset to try: once the chip's previous
  // program left its first unit, the others released as it leaves them.
  SegmentUse firstTry(int d, int j, int k) { return segmentUse(d, j, k, timelines_.firstFreeAt(work_.opChip[d][j])); }

  static constexpr Cycle kReleaseGranule = 256;
  static Cycle roundUp(Cycle at) { return at <= 0 ? 0 : (at + kReleaseGranule - 1) / kReleaseGranule * kReleaseGranule; }

  // The segment of device d for ops [j, k) starting at `offset`, as the chip's state now has it.
  SegmentUse segmentUse(int d, int j, int k, Cycle offset) {
    const topology::ChipSpec& spec = cluster_.chip();
    const ir::Graph& g = work_.graphs[d];
    SegmentUse use;
    use.device = d;
    use.chip = work_.opChip[d][j];
    const int chip = use.chip;
    for (int s = j; s < k; ++s) use.ops.push_back(s);
    const auto& ops = use.ops;
    use.offset = offset;
    lower::ShardInterface& interface = use.interface;
    std::string& key = use.key;
    key = segmentKey(g, ops);
    use.shape = key;
    use.release = timelines_.releases(chip, offset);
    for (auto& [unit, at] : use.release) at = roundUp(at);
    for (const auto& [unit, at] : use.release) key += fmt::format(" free {}@{}", unit, at);
    const int memFirst = spec.firstUnit(topology::UnitKind::kMem);
    for (const auto& [unit, at] : use.release)
      if (unit >= memFirst && unit < memFirst + spec.memSlices) {
        interface.sliceFree.resize(spec.memSlices, 0);
        interface.sliceFree[unit - memFirst] = at;
      }
    std::map<ir::TensorId, int> localOf;
    {
      int n = 0;
      for (ir::OpId op : ops)
        for (ir::TensorId out : g.op(op).outputs) localOf[out] = n++;
    }
    // Receives: tensors in flight to this chip; release times relative to the segment's start.
    std::set<ir::TensorId> resident;
    std::set<ir::TensorId>& received = use.received;
    std::vector<std::vector<Cycle>> absolute;  // per receive: its bursts' arrivals
    for (ir::OpId op : ops)
      for (ir::TensorId in : g.op(op).inputs) {
        const ir::OpId producer = g.tensor(in).producer;
        if (producer < 0 || producer >= j) continue;
        auto flight = inFlight_[d].find({in, chip});
        if (placedOn_[d][in].count(chip) || flight == inFlight_[d].end()) {
          resident.insert(in);
          continue;
        }
        if (!received.insert(in).second) continue;
        lower::ReceivePlan plan;
        plan.tensor = in;
        plan.port = flight->second.port;
        plan.interval = flight->second.interval;
        plan.spacing = flight->second.spacing;
        // What has arrived by the time the receive can issue (the segment's start, or later when the
        // chip's earlier programs still use the port's queue for their sends) waits on the port and is
        // read at one vector a cycle instead of at the link's rate. When the port's queue holds the
        // receive back past its first burst's arrival and the rest is still on its way, the tensor is
        // read so once its last burst is in; a receive the port does not hold back keeps the link's
        // rate (its consumers start on the first tiles).
        const std::int64_t rows = stored_(g, in).first;
        const InFlight& inflight = flight->second;
        Cycle portFree = offset;
        const int portUnit = spec.firstUnit(topology::UnitKind::kC2c) + plan.port;
        for (const auto& [unit, at] : use.release)
          if (unit == portUnit) portFree = std::max(portFree, offset + at);
        const Cycle burstTail = inflight.tail();
        const bool whole = inflight.arrivals.back() + burstTail < portFree;
        const bool waits = portFree > offset && inflight.arrivals.front() + burstTail < portFree;
        if (whole || waits) plan.interval = 1;
        // Past the chip's fence, release times are rounded up to kReleaseGranule (later is safe) so
        // that microbatches in a steady state share their program. The lowering releases each read
        // of the port by its last vector's arrival (ReceivePlan::readLag): the release is what is
        // rounded, and a tile in before the start is released at it.
        const Cycle lag = plan.readLag(0, rows);
        for (Cycle a : inflight.arrivals) {
          const Cycle release = (waits && !whole ? inflight.arrivals.back() : a) + lag - offset;
          plan.arrivals.push_back((use.release.empty() ? std::max<Cycle>(0, release) : roundUp(release)) - lag);
        }
        use.shape += fmt::format(" recv {}:{}", static_cast<int>(interface.receives.size()), plan.port);
        interface.receives.push_back(std::move(plan));
        absolute.push_back(flight->second.arrivals);
      }
    detail::orderArrivals(interface.receives, absolute);
    for (size_t r = 0; r < interface.receives.size(); ++r) {
      const auto& plan = interface.receives[r];
      key += fmt::format(" recv {}:{}/{}@{}", r, plan.port, detail::paceKey(plan.interval, plan.spacing),
                         fmt::join(plan.arrivals, ","));
    }
    for (ir::TensorId in : received) resident.erase(in);
    interface.resident.assign(resident.begin(), resident.end());
    // Sends: outputs that compute ops on directly linked chips read later.
    for (ir::OpId op : ops)
      for (ir::TensorId out : g.op(op).outputs) {
        std::set<int> chips;
        for (ir::OpId user : g.tensor(out).users) {
          const int to = work_.opChip[d][user];
          if (user < k || to == chip || isCollective(g.op(user).kind) || isPointToPoint(g.op(user).kind)) continue;
          chips.insert(to);
        }
        for (int to : chips)
          if (const int link = directLink(chip, to); link >= 0) {
            lower::SendPlan plan;
            plan.tensor = out;
            plan.port = cluster_.links()[link].portOn(chip);
            const LinkPace pace = linkPace(spec, cluster_.links()[link]);
            plan.interval = pace.interval;
            plan.spacing = pace.spacing;
            const std::string paced = detail::paceKey(plan.interval, plan.spacing);
            key += fmt::format(" send %{}:{}/{}", localOf[out], plan.port, paced);
            use.shape += fmt::format(" send %{}:{}/{}", localOf[out], plan.port, paced);
            interface.sends.push_back(plan);
            use.sendTo.push_back({out, link});
          }
      }
    return use;
  }

  // The earliest offset at which the segment's program (compiled for `use`'s receives) may start on
  // its chip: its resources free of the chip's earlier programs (ChipTimelines::earliestStart) and
  // every burst it sends finding its link free.
  // With `placed`, its program, footprint and drain: the compiled program's, its stream registers
  // renamed for the chip.
  Cycle earliestOffset(const SegmentUse& use, const CompiledShard& shard, SegmentUse* placed = nullptr,
                       Cycle from = 0) {
    auto footprint = footprints_.find(&shard);
    if (footprint == footprints_.end())
      footprint = footprints_.emplace(&shard, timelines_.footprint(shard.program.instructions)).first;
    const auto renaming = timelines_.streamRenaming(use.chip, footprint->second);
    auto renamed = timelines_.renamedFootprint(footprint->second, renaming);
    if (placed) {
      placed->program = shard.program;
      placed->program.instructions = timelines_.renamed(shard.program.instructions, renaming);
      auto drain = drains_.find(&shard);
      if (drain == drains_.end()) drain = drains_.emplace(&shard, timelines_.streamDrain(shard.program.instructions)).first;
      placed->drain = drain->second;
    }
    const topology::ChipSpec& spec = cluster_.chip();
    Cycle at = from;
    for (bool moved = true; moved;) {
      // The units' gaps and the links' calendar both hold at the offset returned: a send moved later
      // may put the program's unit intervals over the chip's, so the units are checked again.
      moved = false;
      at = timelines_.earliestStart(use.chip, renamed, at);
      for (size_t i = 0; i < use.sendTo.size(); ++i) {
        const auto& link = cluster_.links()[use.sendTo[i].second];
        const std::vector<std::pair<int, Cycle>> hops = {
            {link.directionFrom(use.chip), spec.c2cSendCycles}};
        const lower::SendPlan& send = use.interface.sends[i];
        const Cycle length = topology::pacedSerializationCycles(
            stored_(work_.graphs[use.device], use.sendTo[i].first).first, send.spacing,
            send.interval);
        for (Cycle issue : shard.sendIssues.at(i))
          if (const Cycle fit = calendar_.firstFit(hops, at + issue, length); fit != at + issue) {
            at += fit - (at + issue);
            moved = true;
          }
      }
    }
    if (placed) placed->footprint = std::move(renamed);
    return at;
  }

  // Compiles the batch's new keys (once each, in order of first use, every MPI rank the same jobs),
  // settles each segment's offset, then places its segments in order; empties the batch.
  // A segment starts as soon as its program fits after the chip's earlier programs (the previous
  // microbatch's tail overlapping its head, software-pipelined): its receives' release times
  // depend on its offset, so a program that needs a later start is compiled again for that start,
  // up to kOffsetTries times, and then for the chip's drained cycle, where every program fits.
  Status place(std::vector<SegmentUse>& batch) {
    constexpr int kOffsetTries = 4;
    std::vector<int> tries(batch.size(), 0);
    std::vector<bool> settled(batch.size(), false);
    for (size_t i = 0; i < batch.size(); ++i) settled[i] = reuse(batch[i]);
    while (std::find(settled.begin(), settled.end(), false) != settled.end()) {
      if (auto s = compileNew(batch); !s) return s;
      for (size_t i = 0; i < batch.size(); ++i) {
        if (settled[i]) continue;
        SegmentUse& use = batch[i];
        // Fitting at an earlier offset does not make the compiled one fit: the units' gaps are
        // checked at the offset the program was compiled for.
        const Cycle at = earliestOffset(use, compiled_.at(use.key), &use, use.offset);
        if (at <= use.offset) {
          settled[i] = true;
          continue;
        }
        const Cycle drained = timelines_.freeAt(use.chip);
        if (tries[i] == kOffsetTries + 1 || use.offset >= drained)
          return makeError(ExitCode::kInternal,
                           fmt::format("segment of device {} on chip {} fits at no offset (cycle {} needs {})",
                                       use.device, use.chip, use.offset, at));
        const int first = use.ops.front(), end = use.ops.back() + 1;
        use = segmentUse(use.device, first, end, ++tries[i] > kOffsetTries ? drained : std::min(at, drained));
      }
    }
    for (const SegmentUse& use : batch) {
      const int d = use.device, chip = use.chip;
      const ir::Graph& g = work_.graphs[d];
      if (placedKeys_.insert(use.key).second) ++result_.compiledShards;  // trial compiles not placed do not count
      else ++result_.sharedShards;
      const CompiledShard& shard = compiled_.at(use.key);
      auto& ofShape = byShape_[use.shape];
      if (std::none_of(ofShape.begin(), ofShape.end(), [&](const Candidate& c) { return c.key == use.key; }))
        ofShape.push_back({use.key, use.interface.receives});
      // This segment's ops (the program may be another's), reading and writing its wave's copies.
      const auto names = lower::originsOf(g, use.ops, use.interface, waveOf_[d]);
      timelines_.append(chip, use.program, use.offset, use.drain, use.footprint, &names);
      if (auto s = bookSends(d, chip, use.offset, use.interface, use.sendTo, shard); !s) return s;
      detail::accumulateReport(reports_[chip], shard.report);
      for (ir::OpId op : use.ops)
        for (ir::TensorId out : g.op(op).outputs) placedOn_[d][out].insert(chip);
      for (ir::TensorId in : use.received) {
        placedOn_[d][in].insert(chip);
        inFlight_[d].erase({in, chip});
      }
    }
    batch.clear();
    return {};
  }

  // Once kProgramsPerShape programs of the segment's shape were placed, the segment takes one of
  // them instead of a new compile for its own release times: the one a copy of which could start
  // soonest after it (its offset and its period, ChipTimelines::followsAt), so that the chip's
  // steady state repeats the program of the shortest period; a program fits where its resources
  // are free and each receive reads no vector before it arrives (it was compiled for arrivals no
  // earlier than these at that offset). Returns whether it did.
  bool reuse(SegmentUse& use) {
    constexpr size_t kProgramsPerShape = 8;
    const auto candidates = byShape_.find(use.shape);
    if (use.release.empty() || candidates == byShape_.end() || candidates->second.size() < kProgramsPerShape)
      return false;
    const ir::Graph& g = work_.graphs[use.device];
    std::optional<Cycle> best;
    Cycle bestNext = 0;
    const Candidate* chosen = nullptr;
    for (const Candidate& c : candidates->second) {
      Cycle from = 0;
      for (size_t r = 0; r < c.receives.size() && r < use.interface.receives.size(); ++r) {
        const lower::ReceivePlan& plan = c.receives[r];
        const ir::TensorId tensor = use.interface.receives[r].tensor;
        const InFlight& flight = inFlight_[use.device].at({tensor, use.chip});
        const Cycle rows = stored_(g, tensor).first;
        // The program reads vector j of tile t at offset + arrivals[t] + readLag + j x interval; it
        // arrives at the flight's arrival + serializationCycles(j): the first and last are the tightest.
        const Cycle lag = plan.readLag(0, rows);
        for (size_t t = 0; t < plan.arrivals.size() && t < flight.arrivals.size(); ++t)
          from = std::max({from, flight.arrivals[t] - plan.arrivals[t] - lag,
                           flight.arrivals[t] + flight.tail() - plan.arrivals[t] - lag - (rows - 1) * plan.interval});
      }
      const CompiledShard& shard = compiled_.at(c.key);
      const Cycle at = earliestOffset(use, shard, nullptr, from);
      auto period = periods_.find(&shard);
      if (period == periods_.end())
        period = periods_.emplace(&shard, ChipTimelines::followsAt(cluster_.chip(), shard.program)).first;
      if (!best || at + period->second < bestNext) best = at, bestNext = at + period->second, chosen = &c;
    }
    use.key = chosen->key;
    use.offset = earliestOffset(use, compiled_.at(use.key), &use, *best);
    return true;
  }

  // Compiles the batch's keys not compiled yet, once each, in order of first use. A batch of fewer
  // keys than compileRanks_ is filled with likely next keys (fill), compiled on ranks that would
  // wait otherwise: a key compiles to the same program whenever it is compiled, so what was filled
  // in changes no result.
  Status compileNew(const std::vector<SegmentUse>& batch) {
    std::vector<ShardJob> jobs;
    std::vector<std::string> keys;
    const auto add = [&](const SegmentUse& use) {
      if (compiled_.count(use.key) || std::find(keys.begin(), keys.end(), use.key) != keys.end()) return;
      ShardJob job{&work_.graphs[use.device], use.ops, use.interface, options_.asShardOfMany()};
      job.options.seed = options_.seed * 1000003ULL + std::hash<std::string>{}(use.key);  // one stream per segment
      job.options.progress = nullptr;
      job.options.unitRelease = use.release;
      jobs.push_back(std::move(job));
      keys.push_back(use.key);
    };
    for (const SegmentUse& use : batch) add(use);
    if (jobs.empty()) return {};
    const size_t needed = jobs.size();
    fill(add, jobs);
    auto shards = batchCompiler_ ? batchCompiler_(cluster_.chip(), jobs) : compileShards(cluster_.chip(), jobs);
    if (!shards && jobs.size() > needed) {  // a filled-in key failed, or a needed one: the needed ones alone
      jobs.resize(needed);
      keys.resize(needed);
      shards = batchCompiler_ ? batchCompiler_(cluster_.chip(), jobs) : compileShards(cluster_.chip(), jobs);
    }
    if (!shards) return shards.error();
    for (size_t i = 0; i < keys.size(); ++i) compiled_.emplace(keys[i], std::move((*shards)[i]));
    if (options_.progress) options_.progress(static_cast<std::int64_t>(compiled_.size()), 0);
    return {};
  }

  // Adds likely next keys until the batch holds compileRanks_ jobs: the segments the lanes' next
  // ready chunks start with, as the chips are now (lookahead_), then the cold segments (cold_).
  template <typename Add>
  void fill(const Add& add, const std::vector<ShardJob>& jobs) {
    const auto room = [&] { return static_cast<int>(jobs.size()) < compileRanks_; };
    for (const auto& [wave, j, k] : lookahead_)
      for (int d : work_.waves[wave])
        if (room()) add(segmentUse(d, j, k, timelines_.firstFreeAt(work_.opChip[d][j])));
    while (room() && coldNext_ < cold_.size()) add(cold_[coldNext_++]);
  }

  // Books the bursts a segment sent in the link calendar and records their arrivals for the receiver.
  Status bookSends(int d, int chip, Cycle offset, const lower::ShardInterface& interface,
                   const std::vector<std::pair<ir::TensorId, int>>& sendTo, const CompiledShard& shard) {
    std::vector<int> links;
    std::vector<std::int64_t> rows;
    for (const auto& [tensor, link] : sendTo) {
      links.push_back(link);
      rows.push_back(stored_(work_.graphs[d], tensor).first);
    }
    auto flights = detail::bookSegmentSends(cluster_, calendar_, chip, offset, interface, links, rows, shard, result_);
    if (!flights) return flights.error();
    for (size_t i = 0; i < sendTo.size(); ++i)
      inFlight_[d][{sendTo[i].first, cluster_.links()[sendTo[i].second].other(chip)}] = std::move((*flights)[i]);
    return {};
  }

  const ShardedWorkload& work_;
  const topology::Cluster& cluster_;
  Options options_;
  ShardBatchCompiler batchCompiler_;  ///< empty: compileShards
  int compileRanks_ = 1;              ///< compiles batchCompiler_ runs at once
  std::vector<SegmentUse> cold_;      ///< planColdSegments
  size_t coldNext_ = 0;               ///< cold_ before it were filled in (or compiled)
  struct Step {
    int wave, first, end;
  };
  std::vector<Step> lookahead_;  ///< compute steps the lanes' next ready chunks start with
  ChipTimelines timelines_;
  detail::StoredShapes stored_;  ///< what segments send and receive and messages carry, per tensor
  LinkCalendar calendar_;
  std::vector<std::map<ir::TensorId, std::set<int>>> placedOn_;  ///< per device: chips holding each tensor
  std::vector<std::map<std::pair<ir::TensorId, int>, InFlight>> inFlight_;  ///< per device: (tensor, chip) sent
  /// Per device, its wave (one microbatch of one replica): the copy its tensors are (OpOrigin::instance).
  std::vector<std::int32_t> waveOf_;
  std::map<std::string, CompiledShard> compiled_;
  struct Candidate {
    std::string key;                             // in compiled_
    std::vector<lower::ReceivePlan> receives;    // what it was compiled for
  };
  std::map<std::string, std::vector<Candidate>> byShape_;  ///< per SegmentUse::shape, the programs placed
  std::set<std::string> placedKeys_;                        ///< keys of compiled_ placed at least once
  std::map<const CompiledShard*, ChipTimelines::Footprint> footprints_;
  std::map<const CompiledShard*, Cycle> drains_;   ///< ChipTimelines::streamDrain of each program placed
  std::map<const CompiledShard*, Cycle> periods_;  ///< ChipTimelines::followsAt of each program reuse considered
  std::map<int, CompileReport> reports_;
  ClusterSchedule result_;
};

}  // namespace

namespace detail {

void accumulateReport(CompileReport& report, const CompileReport& part) {
  report.listCycles += part.listCycles;
  report.criticalPath += part.criticalPath;
  report.chosenOrderCriticalPath += part.chosenOrderCriticalPath;
  report.busiestResource += part.busiestResource;
  report.planeSequence += part.planeSequence;
  report.resourceWindowBound += part.resourceWindowBound;
  report.sramPeakBytes = std::max(report.sramPeakBytes, part.sramPeakBytes);
  report.sramFootprintBytes = std::max(report.sramFootprintBytes, part.sramFootprintBytes);
  report.sramCapacityBytes = part.sramCapacityBytes;
  report.spills += part.spills;
  report.memAccesses += part.memAccesses;
  report.delayedMemAccesses += part.delayedMemAccesses;
  report.bankDelayedMemAccesses += part.bankDelayedMemAccesses;
  for (int d = 0; d < 2; ++d) report.streamRegisters[d] = std::max(report.streamRegisters[d], part.streamRegisters[d]);
  report.tasks += part.tasks;
  report.annealMoves += part.annealMoves;
  report.annealAccepted += part.annealAccepted;
}

Status appendCollective(const CollectivePlan& plan, const topology::Cluster& cluster, ChipTimelines& timelines,
                        LinkCalendar& calendar, ClusterSchedule& result) {
  auto scheduled = scheduleCollective(plan, cluster, timelines.free(), calendar, true);
  if (!scheduled) return scheduled.error();
  for (int c = 0; c < cluster.chipCount(); ++c) {
    isa::Program& program = scheduled->cluster.programs[c];
    if (!plan.origin.op.empty()) isa::attributeAll(program, plan.origin);  // the chains move the plan's tensor
    timelines.append(c, program, 0);
    // A later segment's sends expect the chip's links free once the chip is; it starts after the chains.
    timelines.holdUntil(c, scheduled->linksDrained[c]);
    if (!program.instructions.empty() || !program.pieces.empty()) timelines.fence(c);
  }
  for (size_t i = 0; i < scheduled->transfers.size(); ++i) {
    C2CTransfer t = scheduled->cluster.transfers[i];
    if (scheduled->transfers[i].links.size() > 1) t.route = scheduled->transfers[i].links;
    result.transfers.push_back(t);
  }
  return {};
}

void orderArrivals(std::vector<lower::ReceivePlan>& receives, const std::vector<std::vector<Cycle>>& absolute) {
  std::vector<std::tuple<int, Cycle, size_t, size_t>> bursts;  // (port, absolute arrival, receive, tile)
  for (size_t r = 0; r < receives.size(); ++r)
    for (size_t t = 0; t < receives[r].arrivals.size() && t < absolute[r].size(); ++t)
      bursts.emplace_back(receives[r].port, absolute[r][t], r, t);
  std::sort(bursts.begin(), bursts.end());
  for (size_t k = 1; k < bursts.size(); ++k) {
    const auto& [port, at, r, t] = bursts[k];
    const auto& [prevPort, prevAt, pr, pt] = bursts[k - 1];
    (void)at, (void)prevAt;
    if (port == prevPort) receives[r].arrivals[t] = std::max(receives[r].arrivals[t], receives[pr].arrivals[pt] + 1);
  }
}

namespace {

// Receives the bursts of `flight` waiting on its port of `chip` into SRAM, one vector a cycle once
// each burst is in, after everything the chip ran before; the instructions are named by `origin`.
void receiveFlight(const topology::Cluster& cluster, ChipTimelines& timelines, int chip, const InFlight& flight,
                   const isa::OpOrigin& origin) {
  const topology::ChipSpec& spec = cluster.chip();
  const auto units = spec.units();
  const int c2c = spec.firstUnit(topology::UnitKind::kC2c) + flight.port;
  const int memFirst = spec.firstUnit(topology::UnitKind::kMem);
  int mem = memFirst;  // the MEM slice nearest the port
  for (int m = memFirst; m < memFirst + spec.memSlices; ++m)
    if (std::abs(units[m].slice - units[c2c].slice) < std::abs(units[mem].slice - units[c2c].slice)) mem = m;
  const auto dir = units[mem].slice >= units[c2c].slice ? isa::Direction::kEast : isa::Direction::kWest;
  const Cycle toMem = spec.c2cReceiveCycles + std::abs(units[mem].slice - units[c2c].slice);
  const std::int64_t depth = std::max(1, spec.addressesPerSlice);
  // Cycles relative to the first cycle the receive can start (the first burst's arrival, or later
  // when the chip is busy): vector j of a burst arrives j x interval after its first, and what has
  // arrived by then waits on the port, read at one vector a cycle.
  const Cycle base = std::max({flight.arrivals.front(), timelines.freeAt(chip), flight.released});
  isa::Program program;
  program.chipSpecHash = spec.hash();
  program.origins = {origin};
  Cycle next = 0;
  for (Cycle arrive : flight.arrivals) {
    next = std::max(next, arrive - base + flight.tail() - (flight.rows - 1));
    for (std::int64_t r0 = 0; r0 < flight.rows; r0 += depth) {
      const auto n = static_cast<std::int32_t>(std::min(depth, flight.rows - r0));
      isa::Instruction rx;
      rx.unit = c2c;
      rx.op = isa::Opcode::kC2cReceive;
      rx.issue = next;
      rx.port = flight.port;
      rx.repeat = n;
      rx.dst = {0, dir};
      isa::Instruction wr;
      wr.unit = mem;
      wr.op = isa::Opcode::kMemWrite;
      wr.issue = next + toMem;
      wr.repeat = n;
      wr.address = 0;
      wr.bank = spec.bankOf(0);
      wr.stride = 1;
      wr.src = rx.dst;
      for (const auto& inst : {rx, wr}) program.instructions.push_back(inst);
      next += n;
    }
  }
  program.originOf.assign(program.instructions.size(), 0);
  isa::canonicalize(program);
  for (const auto& inst : program.instructions)
    program.predictedCycles = std::max(program.predictedCycles, isa::completion(spec, inst));
  const Cycle at = timelines.earliestStart(chip, timelines.footprint(program.instructions), base);
  timelines.append(chip, program, at);
}

}  // namespace

std::map<std::pair<int, int>, Cycle> messagePorts(const CollectivePlan& plan, const topology::Cluster& cluster) {
  std::map<std::pair<int, int>, Cycle> ports;
  for (const auto& step : plan.steps)
    for (const auto& m : step)
      for (const auto& hop : messageRoute(cluster, m)) {
        const auto& link = cluster.links()[hop.link];
        const int to = link.other(hop.chip);
        ports[{to, link.portOn(to)}] = std::numeric_limits<Cycle>::max();
      }
  return ports;
}

std::vector<TakenFlight> receiveWaiting(const std::map<std::pair<int, int>, Cycle>& ports,
                                        const topology::Cluster& cluster, ChipTimelines& timelines,
                                        const std::vector<InFlightMap*>& flights,
                                        const std::function<isa::OpOrigin(size_t, ir::TensorId)>& originOf) {
  // (first arrival, map, key) of the bursts waiting there, in arrival order.
  std::vector<std::tuple<Cycle, size_t, std::pair<ir::TensorId, int>>> waiting;
  for (size_t i = 0; i < flights.size(); ++i)
    for (const auto& [key, flight] : *flights[i])
      if (const auto port = ports.find({key.second, flight.port});
          port != ports.end() && flight.arrivals.front() < port->second)
        waiting.push_back({flight.arrivals.front(), i, key});
  std::sort(waiting.begin(), waiting.end());
  std::vector<TakenFlight> taken;
  for (const auto& [first, i, key] : waiting) {
    (void)first;
    auto it = flights[i]->find(key);
    receiveFlight(cluster, timelines, key.second, it->second, originOf(i, key.first));
    flights[i]->erase(it);
    taken.push_back({i, key.first, key.second});
  }
  return taken;
}

Expected<std::vector<InFlight>> bookSegmentSends(const topology::Cluster& cluster, LinkCalendar& calendar, int chip,
                                                 Cycle offset, const lower::ShardInterface& interface,
                                                 const std::vector<int>& links, const std::vector<std::int64_t>& rows,
                                                 const CompiledShard& shard, ClusterSchedule& result) {
  const topology::ChipSpec& spec = cluster.chip();
  std::vector<InFlight> flights;
  for (size_t i = 0; i < links.size(); ++i) {
    const auto& link = cluster.links()[links[i]];
    const int to = link.other(chip);
    InFlight flight;
    flight.port = link.portOn(to);
    flight.interval = interface.sends[i].interval;
    flight.spacing = interface.sends[i].spacing;
    flight.rows = rows[i];
    const std::vector<std::pair<int, Cycle>> hops = {{link.directionFrom(chip), spec.c2cSendCycles}};
    for (Cycle issue : shard.sendIssues.at(i)) {
      const Cycle at = offset + issue;
      const Cycle length = topology::pacedSerializationCycles(rows[i], flight.spacing, flight.interval);
      // Everything booked on this link direction before was sent (or forwarded) by this chip
      // before the segment started, so the window is free; the calendar checks it.
      if (const Cycle fit = calendar.firstFit(hops, at, length); fit != at)
        return makeError(ExitCode::kInternal, fmt::format("a send of chip {} at cycle {} collides on link {} (free "
                                                          "from cycle {})",
                                                          chip, at, link.id, fit));
      calendar.reserve(hops, at, length);
      const Cycle arrive = at + spec.c2cSendCycles + link.latencyCycles;
      flight.arrivals.push_back(arrive);
      flight.lastVector = std::max(flight.lastVector, arrive + flight.tail());
      result.transfers.push_back({chip, to, link.id, at, arrive, static_cast<int>(rows[i]), flight.interval, flight.spacing,
                                  Bytes{rows[i]} * spec.vectorBytes, {}});
    }
    flights.push_back(std::move(flight));
  }
  return flights;
}

}  // namespace detail

Expected<ClusterSchedule> scheduleCluster(const ShardedWorkload& workload, const topology::Cluster& cluster,
                                          const Options& options, const ShardBatchCompiler& batchCompiler,
                                          int compileRanks) {
  return ShardedScheduler(workload, cluster, options, batchCompiler, compileRanks).run();
}

}  // namespace tsp::schedule
