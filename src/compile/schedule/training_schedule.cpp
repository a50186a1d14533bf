// The training-step cluster scheduler: pipeline orders of forward and backward passes, stage-to-stage tensors, bucketed gradient all-reduce, optimizer update.
#include "compile/schedule/training_schedule.h"

#include <algorithm>
#include <map>
#include <set>

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

class TrainingScheduler {
 public:
  TrainingScheduler(const TrainingWorkload& work, const topology::Cluster& cluster, const Options& options)
      : work_(work), graph_(*work.graph), cluster_(cluster), options_(options),
        timelines_(cluster.chip(), cluster.chipCount()), calendar_(cluster.links().size()) {}

  Expected<TrainingStepSchedule> run() {
    if (auto s = check(); !s) return s.error();
    const int p = work_.stages;
    data_.assign(work_.chips.size(), std::vector<MicrobatchData>(work_.microbatches));
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
        const Cycle start = startOf(0, pass.microbatch, seg);
        if (best < 0 || start < bestStart) best = s, bestStart = start;
      }
      if (best < 0)
        return makeError(ExitCode::kInternal, "training step: the pipeline orders cannot finish (a pass waits for "
                                              "one that never runs)");
      const TrainingPass pass = work_.order[best][next[best]];
      const SegmentId seg{pass.backward ? Phase::kBackward : Phase::kForward, pass.chunk * p + best};
      for (size_t r = 0; r < work_.chips.size(); ++r)
        if (auto s = runSegment(static_cast<int>(r), pass.microbatch, seg); !s) return s.error();
      done.insert({pass.microbatch, static_cast<int>(seg.phase), seg.stage});
      if (pass.backward) {
        for (size_t r = 0; r < work_.chips.size(); ++r)
          result_.pipelineCycles = std::max(result_.pipelineCycles, timelines_.freeAt(work_.chips[r][best]));
        if (lastBackward[best][pass.chunk] == next[best])
          if (auto s = allReduce(best, seg.stage); !s) return s.error();
      }
      ++next[best];
      --remaining;
    }
    for (int s = 0; s < p; ++s)
      for (int c = 0; c < work_.chunks; ++c)
        for (size_t r = 0; r < work_.chips.size(); ++r)
          if (auto st = runSegment(static_cast<int>(r), -1, {Phase::kUpdate, c * p + s}); !st) return st.error();
    result_.cluster.programs = timelines_.finish();
    result_.cluster.reports.resize(cluster_.chipCount());
    for (int c = 0; c < cluster_.chipCount(); ++c) {
      auto& report = result_.cluster.reports[c];
      report = reports_[c];
      report.cycles = result_.cluster.programs[c].predictedCycles;
      report.lowerBound = result_.cluster.programs[c].lowerBoundCycles;
      report.instructions = static_cast<std::int64_t>(result_.cluster.programs[c].instructions.size());
    }
    return std::move(result_);
  }

 private:
  // Where a microbatch's tensors are on one replica: chips holding them, and those sent over a link.
  struct MicrobatchData {
    std::map<ir::TensorId, std::set<int>> on;
    std::map<std::pair<ir::TensorId, int>, detail::InFlight> inFlight;
  };

  Status check() {
    const int p = work_.stages, v = work_.chunks;
    const size_t stages = static_cast<size_t>(p) * v;
    if (!work_.graph || work_.forward.size() != stages || work_.backward.size() != stages ||
        work_.update.size() != stages || work_.order.size() != static_cast<size_t>(p) || work_.chips.empty())
      return makeError(ExitCode::kInternal, "training step: the workload's stages do not match its plan");
    for (const auto& replica : work_.chips) {
      if (replica.size() != static_cast<size_t>(p))
        return makeError(ExitCode::kInternal, "training step: a replica without a chip for every stage");
      for (int c : replica)
        if (c < 0 || c >= cluster_.chipCount())
          return makeError(ExitCode::kConfig, fmt::format("training step: stage placed on chip {}, not in the cluster "
                                                          "of {} chips", c, cluster_.chipCount()));
    }
    // Which segment each op is in, and which segments' outputs each forward or backward segment reads.
    for (size_t k = 0; k < stages; ++k) {
      for (ir::OpId op : work_.forward[k]) segmentOf_[op] = {Phase::kForward, static_cast<int>(k)};
      for (ir::OpId op : work_.backward[k]) segmentOf_[op] = {Phase::kBackward, static_cast<int>(k)};
      for (ir::OpId op : work_.update[k]) segmentOf_[op] = {Phase::kUpdate, static_cast<int>(k)};
    }
    for (const auto& [op, seg] : segmentOf_) {
      if (seg.phase == Phase::kUpdate) continue;
      for (ir::TensorId in : graph_.op(op).inputs) {
        const ir::OpId producer = graph_.tensor(in).producer;
        if (producer < 0) continue;
        auto from = segmentOf_.find(producer);
        if (from == segmentOf_.end())
          return modelError(graph_.op(op).name, fmt::format("training step: its input '{}' is made by an op of no "
                                                            "stage", graph_.tensor(in).name));
        if (from->second == seg) continue;
        if (from->second.phase == Phase::kUpdate)
          return modelError(graph_.op(op).name, "training step: a forward or backward op reads the optimizer's output");
        producers_[seg].insert(from->second);
        consumers_[from->second].insert(seg);
      }
    }
    return {};
  }

  const std::vector<ir::OpId>& opsOf(const SegmentId& seg) const {
    return seg.phase == Phase::kForward ? work_.forward[seg.stage]
           : seg.phase == Phase::kBackward ? work_.backward[seg.stage]
                                           : work_.update[seg.stage];
  }
  int chipOf(int replica, const SegmentId& seg) const { return work_.chips[replica][seg.stage % work_.stages]; }

  // Tensors of the segment made by another segment.
  std::vector<ir::TensorId> crossInputs(const SegmentId& seg) const {
    std::set<ir::TensorId> ins;
    for (ir::OpId op : opsOf(seg))
      for (ir::TensorId in : graph_.op(op).inputs) {
        const ir::OpId producer = graph_.tensor(in).producer;
        if (producer >= 0 && !(segmentOf_.at(producer) == seg)) ins.insert(in);
      }
    return {ins.begin(), ins.end()};
  }

  // The first cycle the segment can start on replica r's chip: the chip is free and every input
  // sent to it has arrived whole.
  Cycle startOf(int r, int microbatch, const SegmentId& seg) const {
    const int chip = chipOf(r, seg);
    Cycle start = timelines_.freeAt(chip);
    if (microbatch < 0) return start;
    const MicrobatchData& data = data_[r][microbatch];
    for (ir::TensorId in : crossInputs(seg)) {
      auto on = data.on.find(in);
      if (on != data.on.end() && on->second.count(chip)) continue;
      auto flight = data.inFlight.find({in, chip});
      if (flight != data.inFlight.end()) start = std::max(start, flight->second.lastVector + 1);
    }
    return start;
  }

  // Compiles (or reuses) the segment with its interface, places it on the chip's timeline, sends
  // its outputs to the chips whose passes read them.
  Status runSegment(int r, int microbatch, const SegmentId& seg) {
    const std::vector<ir::OpId>& ops = opsOf(seg);
    if (ops.empty()) return {};
    const topology::ChipSpec& spec = cluster_.chip();
    const int chip = chipOf(r, seg);
    const Cycle offset = startOf(r, microbatch, seg);
    lower::ShardInterface interface;
    std::string key = detail::segmentKey(graph_, ops);
    std::vector<ir::TensorId> received;
    if (microbatch >= 0) {
      MicrobatchData& data = data_[r][microbatch];
      for (ir::TensorId in : crossInputs(seg)) {
        auto on = data.on.find(in);
        if (on != data.on.end() && on->second.count(chip)) {
          interface.resident.push_back(in);
          continue;
        }
        auto flight = data.inFlight.find({in, chip});
        if (flight == data.inFlight.end())
          return makeError(ExitCode::kInternal, fmt::format("training step: tensor '{}' of microbatch {} was never "
                                                            "sent to chip {}", graph_.tensor(in).name, microbatch, chip));
        // Wholly arrived before the pass starts: read from the port at one vector a cycle.
        lower::ReceivePlan plan;
        plan.tensor = in;
        plan.port = flight->second.port;
        plan.interval = 1;
        plan.arrivals.assign(flight->second.arrivals.size(), 0);
        key += fmt::format(" recv {}:{}", interface.receives.size(), plan.port);
        interface.receives.push_back(std::move(plan));
        received.push_back(in);
      }
    } else {
      // The update reads the accumulated gradients and the weights: all on the chip.
      std::set<ir::TensorId> resident;
      for (ir::OpId op : ops)
        for (ir::TensorId in : graph_.op(op).inputs)
          if (graph_.tensor(in).producer >= 0 && !(segmentOf_.at(graph_.tensor(in).producer) == seg))
            resident.insert(in);
      interface.resident.assign(resident.begin(), resident.end());
    }
    // Outputs read by passes on other chips: sent during the pass over a direct link, else after it.
    std::vector<int> links;
    std::vector<std::int64_t> rows;
    std::vector<std::pair<ir::TensorId, int>> sendTo, messageTo;  // (tensor, link or chip)
    if (microbatch >= 0) {
      std::map<ir::TensorId, int> localOf;
      int n = 0;
      for (ir::OpId op : ops)
        for (ir::TensorId out : graph_.op(op).outputs) localOf[out] = n++;
      for (ir::OpId op : ops)
        for (ir::TensorId out : graph_.op(op).outputs) {
          std::set<int> chips;
          for (ir::OpId user : graph_.tensor(out).users) {
            const SegmentId& to = segmentOf_.at(user);
            if (to == seg || to.phase == Phase::kUpdate) continue;
            if (const int c = chipOf(r, to); c != chip) chips.insert(c);
          }
          for (int to : chips) {
            const auto route = cluster_.route(chip, to);
            if (route.size() != 1) {
              messageTo.push_back({out, to});
              continue;
            }
            const auto& link = cluster_.links()[route.front().link];
            lower::SendPlan plan;
            plan.tensor = out;
            plan.port = link.portOn(chip);
            plan.interval = linkVectorInterval(spec, link);
            plan.linkBusy = plan.interval;
            key += fmt::format(" send %{}:{}/{}", localOf[out], plan.port, plan.interval);
            interface.sends.push_back(plan);
            sendTo.push_back({out, link.id});
            links.push_back(link.id);
            rows.push_back(lower::vectorShape(spec, graph_.tensor(out)).first);
          }
        }
    }
    auto it = compiled_.find(key);
    if (it == compiled_.end()) {
      Options shardOptions = options_;
      shardOptions.seed = options_.seed * 1000003ULL + std::hash<std::string>{}(key);
      auto shard = compileShard(spec, graph_, ops, interface, shardOptions);
      if (!shard) return shard.error();
      it = compiled_.emplace(key, std::move(*shard)).first;
      ++result_.cluster.compiledShards;
    } else {
      ++result_.cluster.sharedShards;
    }
    const CompiledShard& shard = it->second;
    timelines_.append(chip, shard.program, offset);
    detail::accumulateReport(reports_[chip], shard.report);
    if (seg.phase != Phase::kUpdate) {
      auto& cycles = seg.phase == Phase::kForward ? result_.forwardCycles : result_.backwardCycles;
      Cycle& slot = cycles[seg.stage % work_.stages][seg.stage / work_.stages];
      slot = std::max(slot, shard.program.predictedCycles);
    }
    if (microbatch < 0) return {};
    MicrobatchData& data = data_[r][microbatch];
    for (ir::OpId op : ops)
      for (ir::TensorId out : graph_.op(op).outputs) data.on[out].insert(chip);
    for (ir::TensorId in : received) {
      data.on[in].insert(chip);
      data.inFlight.erase({in, chip});
    }
    auto flights = detail::bookSegmentSends(cluster_, calendar_, chip, offset, interface, links, rows, shard,
                                            result_.cluster);
    if (!flights) return flights.error();
    for (size_t i = 0; i < sendTo.size(); ++i)
      data.inFlight[{sendTo[i].first, cluster_.links()[sendTo[i].second].other(chip)}] = std::move((*flights)[i]);
    if (!messageTo.empty()) {
      // Multi-hop: one step of messages on the routes once the pass is done.
      CollectivePlan plan;
      plan.steps.emplace_back();
      for (const auto& [tensor, to] : messageTo) {
        const auto [vectorRows, tiles] = lower::vectorShape(spec, graph_.tensor(tensor));
        plan.steps.front().push_back({chip, to, vectorRows * tiles, false});
        data.on[tensor].insert(to);
      }
      if (auto s = detail::appendCollective(plan, cluster_, timelines_, calendar_, result_.cluster); !s) return s;
    }
    return {};
  }

  // The gradients of model stage `stage` summed over the replicas of pipeline stage s, in buckets.
  Status allReduce(int s, int stage) {
    if (work_.chips.size() < 2 || static_cast<size_t>(stage) >= work_.gradients.size()) return {};
    Bytes bytes = 0;
    for (ir::TensorId g : work_.gradients[stage]) bytes += graph_.tensor(g).bytes();
    if (bytes <= 0) return {};
    std::vector<int> group;
    for (const auto& replica : work_.chips) group.push_back(replica[s]);
    const Bytes bucket = std::max<Bytes>(cluster_.chip().vectorBytes, work_.bucketBytes);
    const std::int64_t buckets = ceilDiv(bytes, bucket);
    for (std::int64_t b = 0; b < buckets; ++b) {
      const Bytes size = std::min(bucket, bytes - b * bucket);
      auto plan = planCollective(CollectiveOp::kAllReduce,
                                 chooseAlgorithm(CollectiveOp::kAllReduce, group, size, cluster_), group, size, cluster_);
      if (!plan) return plan.error();
      if (auto st = detail::appendCollective(*plan, cluster_, timelines_, calendar_, result_.cluster); !st) return st;
      ++result_.cluster.collectives;
      ++result_.buckets;
    }
    for (int c : group) result_.allReduceCycles = std::max(result_.allReduceCycles, timelines_.freeAt(c));
    return {};
  }

  const TrainingWorkload& work_;
  const ir::Graph& graph_;
  const topology::Cluster& cluster_;
  Options options_;
  detail::ChipTimelines timelines_;
  LinkCalendar calendar_;
  std::map<ir::OpId, SegmentId> segmentOf_;
  std::map<SegmentId, std::set<SegmentId>> producers_, consumers_;
  std::vector<std::vector<MicrobatchData>> data_;  // [replica][microbatch]
  std::map<std::string, CompiledShard> compiled_;
  std::map<int, CompileReport> reports_;
  TrainingStepSchedule result_;
};

}  // namespace

Expected<TrainingStepSchedule> scheduleTrainingStep(const TrainingWorkload& workload, const topology::Cluster& cluster,
                                                    const Options& options) {
  return TrainingScheduler(workload, cluster, options).run();
}

}  // namespace tsp::schedule
