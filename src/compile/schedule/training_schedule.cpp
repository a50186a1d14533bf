// The training-step cluster scheduler: pipeline orders of forward and backward passes, stage-to-stage tensors, bucketed gradient all-reduce, optimizer update.
#include "compile/schedule/training_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "compile/schedule/sharded_schedule_internal.h"

namespace tsp::schedule {

double TrainingStepSchedule::idealCycles() const {
  double busiest = 0;
  for (size_t s = 0; s < forwardCycles.size(); ++s) {
    double stage = 0;
    for (size_t c = 0; c < forwardCycles[s].size(); ++c)
      stage += static_cast<double>(forwardCycles[s][c] + backwardCycles[s][c]);
    busiest = std::max(busiest, stage);
  }
  return busiest * microbatches;
}

double TrainingStepSchedule::bubbleFraction() const {
  const double ideal = idealCycles();
  return ideal > 0 ? (static_cast<double>(pipelineCycles) - ideal) / ideal : 0.0;
}

namespace {

enum class Phase : std::uint8_t { kForward, kBackward, kUpdate };

// Where one segment (a model stage's forward, backward or update ops) sits.
struct SegmentId {
  Phase phase = Phase::kForward;
  int stage = 0;  // model stage: chunk * stages + pipeline stage
  bool operator<(const SegmentId& o) const { return std::tie(phase, stage) < std::tie(o.phase, o.stage); }
  bool operator==(const SegmentId& o) const = default;
};

using detail::collectiveOpOf;
using detail::isCollective;

class TrainingScheduler {
 public:
  TrainingScheduler(const TrainingWorkload& work, const topology::Cluster& cluster, const Options& options,
                    ShardBatchCompiler batchCompiler)
      : work_(work), cluster_(cluster), options_(options), batchCompiler_(std::move(batchCompiler)),
        timelines_(cluster.chip(), cluster.chipCount(), true), stored_(cluster.chip()),
        calendar_(cluster.links().size(), true) {}

  Expected<TrainingStepSchedule> run() {
    if (auto s = check(); !s) return s.error();
    const int p = work_.stages;
    data_.assign(work_.chips.size(), std::vector<std::vector<MicrobatchData>>(
                                         ranks(), std::vector<MicrobatchData>(work_.microbatches)));
    result_.microbatches = work_.microbatches;
    result_.forwardCycles.assign(p, std::vector<Cycle>(work_.chunks, 0));
    result_.backwardCycles = result_.forwardCycles;
    // Each stage's passes in its order, the next one chosen as the pass that can start first
    // (lowest stage on ties): a pass is ready once the passes that make its inputs have run.
    std::vector<size_t> next(p, 0);
    std::set<std::tuple<int, int, int>> done;  // (microbatch, phase, model stage)
    std::vector<std::map<int, size_t>> lastBackward(p);  // per stage: chunk -> position of its last backward
    for (int s = 0; s < p; ++s)
      for (size_t i = 0; i < work_.order[s].size(); ++i)
        if (work_.order[s][i].backward) lastBackward[s][work_.order[s][i].chunk] = i;
    size_t remaining = 0;
    for (const auto& o : work_.order) remaining += o.size();
    while (remaining > 0) {
      int best = -1;
      Cycle bestStart = 0;
      for (int s = 0; s < p; ++s) {
        if (next[s] >= work_.order[s].size()) continue;
        const TrainingPass& pass = work_.order[s][next[s]];
        const SegmentId seg{pass.backward ? Phase::kBackward : Phase::kForward, pass.chunk * p + s};
        bool ready = true;
        for (const SegmentId& from : producers_[seg])
          ready = ready && done.count({pass.microbatch, static_cast<int>(from.phase), from.stage});
        if (!ready) continue;
        const Cycle start = startOf(0, 0, pass.microbatch, seg, opsOf(seg));
        if (best < 0 || start < bestStart) best = s, bestStart = start;
      }
      if (best < 0)
        return makeError(ExitCode::kInternal, "training step: the pipeline orders cannot finish (a pass waits for "
                                              "one that never runs)");
      const TrainingPass pass = work_.order[best][next[best]];
      const SegmentId seg{pass.backward ? Phase::kBackward : Phase::kForward, pass.chunk * p + best};
      for (size_t r = 0; r < work_.chips.size(); ++r)
        if (auto s = runPass(static_cast<int>(r), pass.microbatch, seg); !s) return s.error();
      done.insert({pass.microbatch, static_cast<int>(seg.phase), seg.stage});
      if (pass.backward) {
        for (const auto& replica : work_.chips)
          for (int c : replica[best])
            result_.pipelineCycles = std::max(result_.pipelineCycles, timelines_.endAt(c));
        if (lastBackward[best][pass.chunk] == next[best])
          if (auto s = allReduce(best, seg.stage); !s) return s.error();
      }
      ++next[best];
      --remaining;
    }
    for (int s = 0; s < p; ++s)
      for (int c = 0; c < work_.chunks; ++c)
        for (size_t r = 0; r < work_.chips.size(); ++r)
          if (auto st = runPass(static_cast<int>(r), -1, {Phase::kUpdate, c * p + s}); !st) return st.error();
    if (work_.shardOptimizer)
      for (int s = 0; s < p; ++s)
        for (int c = 0; c < work_.chunks; ++c)
          if (auto st = allReduce(s, c * p + s, CollectiveOp::kAllGather); !st) return st.error();
    result_.cluster.programs = timelines_.finish();
    result_.cluster.reports.resize(cluster_.chipCount());
    for (int c = 0; c < cluster_.chipCount(); ++c) {
      auto& report = result_.cluster.reports[c];
      report = reports_[c];
      report.cycles = result_.cluster.programs[c].predictedCycles;
      report.lowerBound = result_.cluster.programs[c].lowerBoundCycles;
      report.instructions = result_.cluster.programs[c].instructionCount();
    }
    return std::move(result_);
  }

 private:
  // Where a microbatch's tensors are on one replica and TP rank: chips holding them, and those sent over a link.
  struct MicrobatchData {
    std::map<ir::TensorId, std::set<int>> on;
    std::map<std::pair<ir::TensorId, int>, detail::InFlight> inFlight;
  };

  int ranks() const { return static_cast<int>(work_.graphs.size()); }
  const ir::Graph& graph(int t) const { return *work_.graphs[t]; }

  Status check() {
    const int p = work_.stages, v = work_.chunks;
    const size_t stages = static_cast<size_t>(p) * v;
    if (work_.graphs.empty() || work_.forward.size() != stages || work_.backward.size() != stages ||
        work_.update.size() != stages || work_.order.size() != static_cast<size_t>(p) || work_.chips.empty())
      return makeError(ExitCode::kInternal, "training step: the workload's stages do not match its plan");
    for (size_t t = 0; t < work_.graphs.size(); ++t) {
      const ir::Graph* g = work_.graphs[t];
      const ir::Graph& lead = *work_.graphs.front();
      if (!g) return makeError(ExitCode::kInternal, "training step: a TP rank without a graph");
      for (size_t j = 0; j < std::max(g->ops().size(), lead.ops().size()); ++j)
        if (j >= g->ops().size() || j >= lead.ops().size() || g->op(j).kind != lead.op(j).kind)
          return makeError(ExitCode::kInternal,
                           fmt::format("training step: TP rank {}'s graph is not SPMD with rank 0's at op {} ('{}')", t,
                                       j, j < g->ops().size() ? g->op(j).name : lead.op(j).name));
    }
    for (const auto& replica : work_.chips) {
      if (replica.size() != static_cast<size_t>(p))
        return makeError(ExitCode::kInternal, "training step: a replica without a chip for every stage");
      for (const auto& group : replica) {
        if (group.size() != work_.graphs.size())
          return makeError(ExitCode::kInternal, "training step: a stage without a chip for every TP rank");
        for (int c : group)
          if (c < 0 || c >= cluster_.chipCount())
            return makeError(ExitCode::kConfig, fmt::format("training step: stage placed on chip {}, not in the "
                                                            "cluster of {} chips", c, cluster_.chipCount()));
      }
    }
    // Which segment each op is in, and which segments' outputs each forward or backward segment reads.
    const ir::Graph& g = graph(0);
    for (size_t k = 0; k < stages; ++k) {
      for (ir::OpId op : work_.forward[k]) segmentOf_[op] = {Phase::kForward, static_cast<int>(k)};
      for (ir::OpId op : work_.backward[k]) segmentOf_[op] = {Phase::kBackward, static_cast<int>(k)};
      for (ir::OpId op : work_.update[k]) segmentOf_[op] = {Phase::kUpdate, static_cast<int>(k)};
    }
    for (const auto& [op, seg] : segmentOf_) {
      if (seg.phase == Phase::kUpdate) continue;
      for (ir::TensorId in : g.op(op).inputs) {
        const ir::OpId producer = g.tensor(in).producer;
        if (producer < 0) continue;
        auto from = segmentOf_.find(producer);
        if (from == segmentOf_.end())
          return modelError(g.op(op).name, fmt::format("training step: its input '{}' is made by an op of no stage",
                                                       g.tensor(in).name));
        if (from->second == seg) continue;
        if (from->second.phase == Phase::kUpdate)
          return modelError(g.op(op).name, "training step: a forward or backward op reads the optimizer's output");
        producers_[seg].insert(from->second);
      }
    }
    return {};
  }

  const std::vector<ir::OpId>& opsOf(const SegmentId& seg) const {
    return seg.phase == Phase::kForward ? work_.forward[seg.stage]
           : seg.phase == Phase::kBackward ? work_.backward[seg.stage]
                                           : work_.update[seg.stage];
  }
  int chipOf(int replica, int rank, const SegmentId& seg) const {
    return work_.chips[replica][seg.stage % work_.stages][rank];
  }

  // Tensors that ops read and none of them makes.
  std::vector<ir::TensorId> outsideInputs(int t, const std::vector<ir::OpId>& ops) const {
    const std::set<ir::OpId> inRun(ops.begin(), ops.end());
    std::set<ir::TensorId> ins;
    for (ir::OpId op : ops)
      for (ir::TensorId in : graph(t).op(op).inputs) {
        const ir::OpId producer = graph(t).tensor(in).producer;
        if (producer >= 0 && !inRun.count(producer)) ins.insert(in);
      }
    return {ins.begin(), ins.end()};
  }

  // The first cycle ops can start on the chip of replica r and TP rank t: the chip is free and
  // every input sent to it has arrived whole.
  Cycle startOf(int r, int t, int microbatch, const SegmentId& seg, const std::vector<ir::OpId>& ops) const {
    const int chip = chipOf(r, t, seg);
    Cycle start = timelines_.freeAt(chip);
    if (microbatch < 0) return start;
    const MicrobatchData& data = data_[r][t][microbatch];
    for (ir::TensorId in : outsideInputs(t, ops)) {
      auto on = data.on.find(in);
      if (on != data.on.end() && on->second.count(chip)) continue;
      auto flight = data.inFlight.find({in, chip});
      if (flight != data.inFlight.end())
        start = std::max({start, flight->second.lastVector + 1, flight->second.released});
    }
    return start;
  }

  // A pass of replica r: its compute runs on every TP rank's chip, its collectives over the TP group.
  Status runPass(int r, int microbatch, const SegmentId& seg) {
    const std::vector<ir::OpId>& ops = opsOf(seg);
    if (ops.empty()) return {};
    const ir::Graph& lead = graph(0);
    const Cycle start = startOf(r, 0, microbatch, seg, ops);
    for (size_t j = 0; j < ops.size();) {
      size_t k = j + 1;
      if (isCollective(lead.op(ops[j]).kind)) {
        if (auto s = runCollective(r, microbatch, seg, ops[j]); !s) return s;
      } else {
        while (k < ops.size() && !isCollective(lead.op(ops[k]).kind)) ++k;
        const std::vector<ir::OpId> run(ops.begin() + static_cast<std::ptrdiff_t>(j),
                                        ops.begin() + static_cast<std::ptrdiff_t>(k));
        if (auto s = runComputes(r, microbatch, seg, run); !s) return s;
      }
      j = k;
    }
    if (work_.sendAfterPass && microbatch >= 0) releaseAtPassEnd(r, microbatch, seg);
    if (seg.phase != Phase::kUpdate && r == 0) {
      // The pass's span on replica 0's TP rank 0, its collectives included and the drain after it
      // not: what the ideal is made of.
      auto& cycles = seg.phase == Phase::kForward ? result_.forwardCycles : result_.backwardCycles;
      Cycle& slot = cycles[seg.stage % work_.stages][seg.stage / work_.stages];
      slot = std::max(slot, timelines_.endAt(chipOf(0, 0, seg)) - start);
    }
    return {};
  }

  // Megatron's exchange between passes: the tensors this pass sent over direct links are released to
  // their consumers when the pass has ended on the sender's chip (its weight gradients included),
  // not when their last vector arrives.
  void releaseAtPassEnd(int r, int microbatch, const SegmentId& seg) {
    std::set<ir::OpId> inPass(opsOf(seg).begin(), opsOf(seg).end());
    for (int t = 0; t < ranks(); ++t) {
      const Cycle end = timelines_.endAt(chipOf(r, t, seg));
      for (auto& [key, flight] : data_[r][t][microbatch].inFlight)
        if (inPass.count(graph(t).tensor(key.first).producer)) flight.released = std::max(flight.released, end);
    }
  }

  // One collective of a pass over the chips of its TP group (the ranks its `devices` name).
  Status runCollective(int r, int microbatch, const SegmentId& seg, ir::OpId id) {
    const ir::Op& op = graph(0).op(id);
    std::vector<int> chips;
    for (std::int64_t rank : op.intsAttr("devices")) {
      if (rank < 0 || rank >= ranks())
        return modelError(op.name, fmt::format("{} joins TP rank {} of {}", ir::opKindName(op.kind), rank, ranks()));
      chips.push_back(chipOf(r, static_cast<int>(rank), seg));
    }
    if (microbatch >= 0) receiveInputs(r, microbatch, seg, op);
    const ir::TensorId full = op.kind == ir::OpKind::kAllGather ? op.outputs.front() : op.inputs.front();
    const std::int64_t bytes = stored_.vectors(graph(0), full) * cluster_.chip().vectorBytes;
    if (chips.size() > 1) {
      auto plan = planCollective(collectiveOpOf(op.kind),
                                 chooseAlgorithm(collectiveOpOf(op.kind), chips, bytes, cluster_), chips, bytes, cluster_);
      if (!plan) {
        Diagnostic e = plan.error();
        e.message = fmt::format("{}: {}", op.name, e.message);
        return e;
      }
      plan->origin = lower::opOrigin(graph(0), op, full);
      plan->origin.instance = microbatch;  // the copies of the microbatch it reads and writes
      if (auto s = appendSettled(*plan); !s) return s;
      ++result_.cluster.collectives;
    }
    if (microbatch < 0) return {};
    for (int t = 0; t < ranks(); ++t) {
      const int chip = chipOf(r, t, seg);
      data_[r][t][microbatch].on[op.outputs.front()].insert(chip);
      std::vector<std::pair<ir::TensorId, int>> messageTo;
      for (int to : readersElsewhere(r, t, seg, op.outputs.front(), chip)) messageTo.push_back({op.outputs.front(), to});
      if (auto s = sendMessages(r, t, microbatch, chip, messageTo); !s) return s;
    }
    return {};
  }

  // A collective reads its input from SRAM: one sent from another chip (the partial gradient the
  // next stage's backward pass makes) is received on every TP rank's chip once it has arrived whole,
  // and the collective starts after that.
  void receiveInputs(int r, int microbatch, const SegmentId& seg, const ir::Op& op) {
    std::map<std::pair<int, int>, Cycle> ports;
    for (int t = 0; t < ranks(); ++t) {
      const int chip = chipOf(r, t, seg);
      const MicrobatchData& data = data_[r][t][microbatch];
      for (ir::TensorId in : op.inputs) {
        if (const auto on = data.on.find(in); on != data.on.end() && on->second.count(chip)) continue;
        const auto flight = data.inFlight.find({in, chip});
        if (flight == data.inFlight.end()) continue;
        const Cycle whole = std::max(flight->second.lastVector + 1, flight->second.released);
        auto [it, added] = ports.try_emplace({chip, flight->second.port}, whole);
        if (!added) it->second = std::max(it->second, whole);
      }
    }
    receiveWaiting(ports);
  }

  // The chips other than `chip` whose forward or backward passes read tensor `out` of rank t's graph.
  std::set<int> readersElsewhere(int r, int t, const SegmentId& seg, ir::TensorId out, int chip) const {
    std::set<int> chips;
    for (ir::OpId user : graph(t).tensor(out).users) {
      const SegmentId& to = segmentOf_.at(user);
      if (to == seg || to.phase == Phase::kUpdate) continue;
      if (const int c = chipOf(r, t, to); c != chip) chips.insert(c);
    }
    return chips;
  }

  // Tensors to chips that no direct link joins: one step of messages on the routes, now.
  Status sendMessages(int r, int t, int microbatch, int chip, const std::vector<std::pair<ir::TensorId, int>>& to) {
    if (to.empty()) return {};
    CollectivePlan plan;
    plan.steps.emplace_back();
    MicrobatchData& data = data_[r][t][microbatch];
    for (const auto& [tensor, dst] : to) {
      plan.steps.front().push_back({chip, dst, stored_.vectors(graph(t), tensor), false});
      data.on[tensor].insert(dst);
      if (plan.origin.op.empty()) plan.origin = lower::movedOrigin(graph(t), tensor, "Send", microbatch);  // named by its first
    }
    return appendSettled(plan);
  }

  // One TP rank's compute run of a pass: its chip, interface and key, and where its outputs go.
  struct ComputeRun {
    int t = 0;
    int chip = 0;
    lower::ShardInterface interface;
    std::string key;
    std::vector<ir::TensorId> received;
    std::vector<int> links;
    std::vector<std::int64_t> rows;
    std::vector<std::pair<ir::TensorId, int>> sendTo, messageTo;  // (tensor, link or chip)
  };

  // The compute run [ops] of a pass on every TP rank: each rank's run depends on its own tensors
  // alone, so the runs' new keys are compiled as one batch (the batch compiler, shared over the MPI
  // ranks), then each run is placed in rank order.
  Status runComputes(int r, int microbatch, const SegmentId& seg, const std::vector<ir::OpId>& ops) {
    if (ops.empty()) return {};
    receiveEarlier(r, microbatch, seg, ops);
    std::vector<ComputeRun> runs;
    Status planned;
    for (int t = 0; t < ranks() && planned; ++t) {
      auto run = planCompute(r, t, microbatch, seg, ops);
      if (run) runs.push_back(std::move(*run));
      else planned = run.error();
    }
    std::vector<ShardJob> jobs;
    std::vector<std::string> keys;
    for (const ComputeRun& run : runs) {
      if (compiled_.count(run.key) || std::find(keys.begin(), keys.end(), run.key) != keys.end()) continue;
      ShardJob job{&graph(run.t), ops, run.interface, options_.asShardOfMany()};
      job.options.seed = options_.seed * 1000003ULL + std::hash<std::string>{}(run.key);
      job.options.progress = nullptr;
      jobs.push_back(std::move(job));
      keys.push_back(run.key);
    }
    if (!jobs.empty()) {
      auto shards = batchCompiler_ ? batchCompiler_(cluster_.chip(), jobs) : compileShards(cluster_.chip(), jobs);
      if (!shards) return shards.error();
      for (size_t i = 0; i < keys.size(); ++i) {
        auto it = compiled_.emplace(keys[i], std::move((*shards)[i])).first;
        bodies_[keys[i]] = isa::makeBody(it->second.program.instructions, it->second.program.originOf);
        ++result_.cluster.compiledShards;
        if (options_.progress) options_.progress(result_.cluster.compiledShards, 0);
      }
    }
    if (!planned) return planned;  // after the runs before it compiled, as one rank after another would
    for (const ComputeRun& run : runs) {
      if (const auto first = std::find(keys.begin(), keys.end(), run.key); first != keys.end()) keys.erase(first);
      else ++result_.cluster.sharedShards;
      if (auto s = placeCompute(r, microbatch, seg, ops, run); !s) return s;
    }
    return {};
  }

  // The interface and key of TP rank t's compute run [ops] as its tensors now stand.
  Expected<ComputeRun> planCompute(int r, int t, int microbatch, const SegmentId& seg, const std::vector<ir::OpId>& ops) {
    const ir::Graph& g = graph(t);
    const topology::ChipSpec& spec = cluster_.chip();
    ComputeRun run;
    run.t = t;
    run.chip = chipOf(r, t, seg);
    const int chip = run.chip;
    lower::ShardInterface& interface = run.interface;
    std::string& key = run.key;
    key = detail::segmentKey(g, ops);
    std::vector<ir::TensorId>& received = run.received;
    if (microbatch >= 0) {
      MicrobatchData& data = data_[r][t][microbatch];
      std::vector<std::vector<Cycle>> absolute;  // per receive: its bursts' arrivals
      for (ir::TensorId in : outsideInputs(t, ops)) {
        auto on = data.on.find(in);
        if (on != data.on.end() && on->second.count(chip)) {
          interface.resident.push_back(in);
          continue;
        }
        auto flight = data.inFlight.find({in, chip});
        if (flight == data.inFlight.end())
          return makeError(ExitCode::kInternal, fmt::format("training step: tensor '{}' of microbatch {} was never "
                                                            "sent to chip {}", g.tensor(in).name, microbatch, chip));
        // Wholly arrived before the run starts: read from the port at one vector a cycle.
        lower::ReceivePlan plan;
        plan.tensor = in;
        plan.port = flight->second.port;
        plan.interval = 1;
        plan.arrivals.assign(flight->second.arrivals.size(), 0);
        interface.receives.push_back(std::move(plan));
        absolute.push_back(flight->second.arrivals);
        received.push_back(in);
      }
      // The microbatch's model inputs are in SRAM from the start, as the activations a later stage
      // keeps are: both are resident and placed first, in tensor order, so that stage 0's pass is
      // placed as the equal passes of the other stages are (placed at its first read, a model input
      // would take the never-used space left once the pass has reused the rest, and shift the
      // round-robin over the slices of everything placed after it).
      std::set<ir::TensorId> inputs;
      for (ir::OpId op : ops)
        for (ir::TensorId in : g.op(op).inputs)
          if (g.tensor(in).role == ir::TensorRole::kInput) inputs.insert(in);
      if (!inputs.empty()) {
        inputs.insert(interface.resident.begin(), interface.resident.end());
        interface.resident.assign(inputs.begin(), inputs.end());
      }
      detail::orderArrivals(interface.receives, absolute);
      for (size_t i = 0; i < interface.receives.size(); ++i)
        key += fmt::format(" recv {}:{}@{}", i, interface.receives[i].port, fmt::join(interface.receives[i].arrivals, ","));
    } else {
      // The update reads the accumulated gradients and the weights: all on the chip.
      interface.resident = outsideInputs(t, ops);
    }
    // Outputs read by passes on other chips: sent during the run over a direct link, else after it.
    std::vector<int>& links = run.links;
    std::vector<std::int64_t>& rows = run.rows;
    std::vector<std::pair<ir::TensorId, int>>& sendTo = run.sendTo;
    std::vector<std::pair<ir::TensorId, int>>& messageTo = run.messageTo;
    if (microbatch >= 0) {
      std::map<ir::TensorId, int> localOf;
      int n = 0;
      for (ir::OpId op : ops)
        for (ir::TensorId out : g.op(op).outputs) localOf[out] = n++;
      for (ir::OpId op : ops)
        for (ir::TensorId out : g.op(op).outputs)
          for (int to : readersElsewhere(r, t, seg, out, chip)) {
            const auto route = cluster_.route(chip, to);
            if (route.size() != 1) {
              messageTo.push_back({out, to});
              continue;
            }
            const auto& link = cluster_.links()[route.front().link];
            lower::SendPlan plan;
            plan.tensor = out;
            plan.port = link.portOn(chip);
            const LinkPace pace = linkPace(spec, link);
            plan.interval = pace.interval;
            plan.spacing = pace.spacing;
            plan.atProgramEnd = work_.sendAfterPass;  // released to its consumer at the pass's end
            key += fmt::format(" send %{}:{}/{}", localOf[out], plan.port, detail::paceKey(plan.interval, plan.spacing));
            interface.sends.push_back(plan);
            sendTo.push_back({out, link.id});
            links.push_back(link.id);
            rows.push_back(stored_(g, out).first);
          }
    }
    return run;
  }

  // Places TP rank run.t's compiled run on its chip's timeline (after its inputs), sends its outputs
  // to the chips whose passes read them.
  Status placeCompute(int r, int microbatch, const SegmentId& seg, const std::vector<ir::OpId>& ops,
                      const ComputeRun& run) {
    const int t = run.t, chip = run.chip;
    const ir::Graph& g = graph(t);
    const lower::ShardInterface& interface = run.interface;
    const std::string& key = run.key;
    const Cycle offset = startOf(r, t, microbatch, seg, ops);
    const auto it = compiled_.find(key);
    const CompiledShard& shard = it->second;
    // This segment's ops (the program may be another's), reading and writing the microbatch's copies.
    const auto names = lower::originsOf(g, ops, interface, microbatch);
    timelines_.append(chip, bodies_.at(key), shard.program, offset, &names);  // free once its streams have drained
    detail::accumulateReport(reports_[chip], shard.report);
    if (microbatch < 0) return {};
    MicrobatchData& data = data_[r][t][microbatch];
    for (ir::OpId op : ops)
      for (ir::TensorId out : g.op(op).outputs) data.on[out].insert(chip);
    for (ir::TensorId in : run.received) {
      data.on[in].insert(chip);
      data.inFlight.erase({in, chip});
    }
    auto flights = detail::bookSegmentSends(cluster_, calendar_, chip, offset, interface, run.links, run.rows, shard,
                                            result_.cluster);
    if (!flights) return flights.error();
    for (size_t i = 0; i < run.sendTo.size(); ++i)
      data.inFlight[{run.sendTo[i].first, cluster_.links()[run.sendTo[i].second].other(chip)}] = std::move((*flights)[i]);
    return sendMessages(r, t, microbatch, chip, run.messageTo);  // multi-hop: once the run is done
  }

  // A collective (or a step of messages) appended; each chip it touched is free again once the
  // streams of its part have drained (ChipTimelines::append).
  // Segment bursts waiting on the ports its messages arrive on are received first (receiveWaiting).
  Status appendSettled(const CollectivePlan& plan) {
    receiveWaiting(detail::messagePorts(plan, cluster_));
    return detail::appendCollective(plan, cluster_, timelines_, calendar_, result_.cluster);
  }

  // Receives the segment bursts waiting on the ports (chip, port) before their cycles (receiveWaiting).
  void receiveWaiting(const std::map<std::pair<int, int>, Cycle>& ports) {
    if (ports.empty()) return;
    std::vector<detail::InFlightMap*> flights;
    // Per map: its microbatch's data, its TP rank, the microbatch.
    std::vector<std::tuple<MicrobatchData*, int, std::int32_t>> of;
    for (auto& replica : data_)
      for (size_t t = 0; t < replica.size(); ++t)
        for (size_t m = 0; m < replica[t].size(); ++m) {
          flights.push_back(&replica[t][m].inFlight);
          of.push_back({&replica[t][m], static_cast<int>(t), static_cast<std::int32_t>(m)});
        }
    const auto origin = [&](size_t i, ir::TensorId tensor) {
      return lower::movedOrigin(graph(std::get<1>(of[i])), tensor, "Receive", std::get<2>(of[i]));
    };
    for (const auto& taken : detail::receiveWaiting(ports, cluster_, timelines_, flights, origin))
      std::get<0>(of[taken.map])->on[taken.tensor].insert(taken.chip);
  }

  // Bursts that arrived on a port before the first of those the compute run [ops] of replica r
  // receives there (on any TP rank) would be handed to it first: they are received before.
  void receiveEarlier(int r, int microbatch, const SegmentId& seg, const std::vector<ir::OpId>& ops) {
    if (microbatch < 0) return;
    std::map<std::pair<int, int>, Cycle> ports;
    for (int t = 0; t < ranks(); ++t) {
      const int chip = chipOf(r, t, seg);
      const MicrobatchData& data = data_[r][t][microbatch];
      for (ir::TensorId in : outsideInputs(t, ops)) {
        const auto flight = data.inFlight.find({in, chip});
        if (flight == data.inFlight.end()) continue;
        if (const auto on = data.on.find(in); on != data.on.end() && on->second.count(chip)) continue;
        auto [it, added] = ports.try_emplace({chip, flight->second.port}, flight->second.arrivals.front());
        if (!added) it->second = std::min(it->second, flight->second.arrivals.front());
      }
    }
    receiveWaiting(ports);
  }

  // The gradients of model stage `stage` summed over the replicas of pipeline stage s (each TP rank
  // with the same rank of the other replicas), in buckets: all-reduced, or with the optimizer state
  // sharded reduce-scattered (and, once updated, the parameters all-gathered: op kAllGather).
  Status allReduce(int s, int stage, CollectiveOp op = CollectiveOp::kAllReduce) {
    if (work_.chips.size() < 2 || static_cast<size_t>(stage) >= work_.gradients.size()) return {};
    if (op == CollectiveOp::kAllReduce && work_.shardOptimizer) op = CollectiveOp::kReduceScatter;
    for (int t = 0; t < ranks(); ++t) {
      Bytes bytes = 0;
      for (ir::TensorId g : work_.gradients[stage]) bytes += graph(t).tensor(g).bytes();
      if (bytes <= 0) continue;
      std::vector<int> group;
      for (const auto& replica : work_.chips) group.push_back(replica[s][t]);
      const Bytes bucket = std::max<Bytes>(cluster_.chip().vectorBytes, work_.bucketBytes);
      const std::int64_t buckets = ceilDiv(bytes, bucket);
      for (std::int64_t b = 0; b < buckets; ++b) {
        const Bytes size = std::min(bucket, bytes - b * bucket);
        auto plan = planCollective(op, chooseAlgorithm(op, group, size, cluster_), group, size, cluster_);
        if (!plan) return plan.error();
        // The buckets move the stage's gradients (the tensor named, so that a port handing a
        // receive another tensor's vectors is a hazard the simulator reports).
        const std::string name = fmt::format("gradients of stage {}", stage);
        plan->origin = {name, collectiveOpName(op), -1, name, "", ""};
        if (auto st = appendSettled(*plan); !st) return st;
        ++result_.cluster.collectives;
        if (t == 0 && op != CollectiveOp::kAllGather) ++result_.buckets;
      }
      if (op != CollectiveOp::kAllGather)
        for (int c : group)
          result_.allReduceCycles = std::max(result_.allReduceCycles, timelines_.endAt(c));
    }
    return {};
  }

  const TrainingWorkload& work_;
  const topology::Cluster& cluster_;
  Options options_;
  ShardBatchCompiler batchCompiler_;  ///< empty: compileShards
  detail::ChipTimelines timelines_;
  detail::StoredShapes stored_;  ///< what passes send and messages carry, per tensor
  LinkCalendar calendar_;
  std::map<ir::OpId, SegmentId> segmentOf_;
  std::map<SegmentId, std::set<SegmentId>> producers_;
  std::vector<std::vector<std::vector<MicrobatchData>>> data_;  // [replica][TP rank][microbatch]
  std::map<std::string, CompiledShard> compiled_;
  std::map<std::string, std::shared_ptr<const isa::InstructionBody>> bodies_;  // per compiled pass: its instructions, shared
  std::map<int, CompileReport> reports_;
  TrainingStepSchedule result_;
};

}  // namespace

Expected<TrainingStepSchedule> scheduleTrainingStep(const TrainingWorkload& workload, const topology::Cluster& cluster,
                                                    const Options& options, const ShardBatchCompiler& batchCompiler) {
  return TrainingScheduler(workload, cluster, options, batchCompiler).run();
}

}  // namespace tsp::schedule
