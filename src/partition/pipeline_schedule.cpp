// Training pipeline schedules: per-stage task orders (GPipe, 1F1B, Megatron's interleaved 1F1B), their
// stash, and an as-soon-as-possible event simulation of their timing.
#include "partition/pipeline_schedule.h"

#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace tsp::partition {

const char* pipelineScheduleName(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kGPipe: return "gpipe";
    case PipelineSchedule::k1F1B: return "1f1b";
    case PipelineSchedule::kInterleaved: return "interleaved";
  }
  return "?";
}

bool parsePipelineSchedule(const std::string& text, PipelineSchedule& schedule) {
  for (PipelineSchedule s : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved})
    if (text == pipelineScheduleName(s)) {
      schedule = s;
      return true;
    }
  return false;
}

Status PipelineOrder::verify() const {
  if (static_cast<int>(tasks.size()) != stages)
    return makeError(ExitCode::kInternal, fmt::format("pipeline order has {} stages, expected {}", tasks.size(), stages));
  for (int s = 0; s < stages; ++s) {
    std::set<std::tuple<int, bool, int>> seen;
    for (const PipelineTask& t : tasks[s]) {
      if (t.microbatch < 0 || t.microbatch >= microbatches || t.chunk < 0 || t.chunk >= chunks)
        return makeError(ExitCode::kInternal, fmt::format("stage {}: task out of range", s));
      if (t.backward && !seen.count({t.microbatch, false, t.chunk}))
        return makeError(ExitCode::kInternal, fmt::format("stage {}: backward of microbatch {} chunk {} before its "
                                                          "forward", s, t.microbatch, t.chunk));
      if (!seen.insert({t.microbatch, t.backward, t.chunk}).second)
        return makeError(ExitCode::kInternal, fmt::format("stage {}: microbatch {} chunk {} runs twice", s, t.microbatch,
                                                          t.chunk));
    }
    if (static_cast<int>(seen.size()) != 2 * microbatches * chunks)
      return makeError(ExitCode::kInternal, fmt::format("stage {}: {} tasks, expected {}", s, seen.size(),
                                                        2 * microbatches * chunks));
  }
  return {};
}

int PipelineOrder::peakStash(int stage) const {
  int live = 0, peak = 0;
  for (const PipelineTask& t : tasks[stage]) {
    live += t.backward ? -1 : 1;
    peak = std::max(peak, live);
  }
  return peak;
}

Expected<PipelineOrder> buildPipelineOrder(PipelineSchedule schedule, int stages, int microbatches, int chunks) {
  if (stages < 1 || microbatches < 1 || chunks < 1)
    return makeError(ExitCode::kConfig, fmt::format("pipeline schedule needs stages, microbatches and chunks >= 1 "
                                                    "(got {}, {}, {})", stages, microbatches, chunks));
  if (schedule != PipelineSchedule::kInterleaved && chunks != 1)
    return makeError(ExitCode::kConfig, fmt::format("schedule {} runs one chunk per stage, not {} (interleave needs "
                                                    "schedule: interleaved)", pipelineScheduleName(schedule), chunks));
  if (schedule == PipelineSchedule::kInterleaved && chunks > 1 && microbatches % stages != 0)
    return makeError(ExitCode::kConfig, fmt::format("the interleaved schedule needs microbatches ({}) divisible by the "
                                                    "pipeline stages ({})", microbatches, stages));
  PipelineOrder order{schedule, stages, microbatches, chunks, std::vector<std::vector<PipelineTask>>(stages)};
  const int total = microbatches * chunks;
  // The k-th forward (backward) task of a stage: Megatron's grouping of p microbatches per chunk,
  // chunks in reverse order for the backward pass. With one chunk it is simply microbatch k.
  auto task = [&](int k, bool backward) {
    const int inGroup = k % (stages * chunks);
    int chunk = inGroup / stages;
    if (backward) chunk = chunks - 1 - chunk;
    return PipelineTask{(k / (stages * chunks)) * stages + k % stages, backward, chunk};
  };
  for (int s = 0; s < stages; ++s) {
    int warmup = 0;
    switch (schedule) {
      case PipelineSchedule::kGPipe: warmup = total; break;
      case PipelineSchedule::k1F1B: warmup = std::min(stages - s - 1, total); break;
      case PipelineSchedule::kInterleaved:
        // One chunk per stage is plain 1F1B; Megatron's warm-up applies from two chunks on.
        if (chunks == 1) {
          warmup = std::min(stages - s - 1, total);
          break;
        }
        warmup = microbatches == stages ? total : std::min((stages - s - 1) * 2 + (chunks - 1) * stages, total);
        break;
    }
    auto& list = order.tasks[s];
    for (int k = 0; k < warmup; ++k) list.push_back(task(k, false));
    for (int k = 0; k < total - warmup; ++k) {
      list.push_back(task(warmup + k, false));
      list.push_back(task(k, true));
    }
    for (int k = total - warmup; k < total; ++k) list.push_back(task(k, true));
  }
  if (auto s = order.verify(); !s) return s.error();
  return order;
}

std::vector<std::vector<PipelineTask>> forwardOrder(int stages, int microbatches, int chunks) {
  std::vector<std::vector<PipelineTask>> order(stages);
  for (auto& list : order)
    for (int first = 0; first < microbatches; first += stages)
      for (int chunk = 0; chunk < chunks; ++chunk)
        for (int i = first; i < std::min(first + stages, microbatches); ++i) list.push_back({i, false, chunk});
  return order;
}

PipelineCosts PipelineCosts::uniform(int stages, int chunks, double forwardCycles, double backwardCycles,
                                     double transfer) {
  PipelineCosts costs;
  costs.forward.assign(stages, std::vector<double>(chunks, forwardCycles));
  costs.backward.assign(stages, std::vector<double>(chunks, backwardCycles));
  costs.transfer = transfer;
  return costs;
}

Expected<PipelineTiming> simulatePipeline(const PipelineOrder& order, const PipelineCosts& costs) {
  const int p = order.stages, v = order.chunks, m = order.microbatches, global = p * v;
  if (static_cast<int>(costs.forward.size()) != p || static_cast<int>(costs.backward.size()) != p)
    return makeError(ExitCode::kInternal, "pipeline costs do not match the stages");
  // End times of every (microbatch, model stage) pass; negative while it has not run.
  std::vector<std::vector<double>> forwardEnd(m, std::vector<double>(global, -1)), backwardEnd = forwardEnd;
  PipelineTiming timing;
  timing.start.resize(p);
  std::vector<size_t> next(p, 0);
  std::vector<double> free(p, 0);
  size_t remaining = 0;
  for (const auto& list : order.tasks) remaining += list.size();
  bool progress = true;
  while (remaining > 0 && progress) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < order.tasks[s].size()) {
        const PipelineTask& t = order.tasks[s][next[s]];
        const int g = t.chunk * p + s;
        // The pass this one waits for, and whether its value crosses to another stage.
        double ready = 0;
        bool crosses = false;
        if (!t.backward && g > 0) {
          ready = forwardEnd[t.microbatch][g - 1];
          crosses = p > 1;
        } else if (t.backward && g < global - 1) {
          ready = backwardEnd[t.microbatch][g + 1];
          crosses = p > 1;
        } else if (t.backward) {
          ready = forwardEnd[t.microbatch][g];
        }
        if (ready < 0) break;
        const double start = std::max(free[s], ready + (crosses ? costs.transfer : 0.0));
        const double cost = (t.backward ? costs.backward : costs.forward)[s][t.chunk];
        free[s] = start + cost;
        (t.backward ? backwardEnd : forwardEnd)[t.microbatch][g] = free[s];
        timing.start[s].push_back(start);
        timing.makespan = std::max(timing.makespan, free[s]);
        ++next[s];
        --remaining;
        progress = true;
      }
    }
  }
  if (remaining > 0)
    return makeError(ExitCode::kInternal, fmt::format("{} pipeline order deadlocks with {} tasks left",
                                                      pipelineScheduleName(order.schedule), remaining));
  for (int s = 0; s < p; ++s) {
    double work = 0;
    for (int c = 0; c < v; ++c) work += m * (costs.forward[s][c] + costs.backward[s][c]);
    timing.idealCycles = std::max(timing.idealCycles, work);
  }
  return timing;
}

}  // namespace tsp::partition
