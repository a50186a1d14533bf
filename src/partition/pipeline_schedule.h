// Training pipeline schedules (GPipe, 1F1B, interleaved 1F1B) as explicit per-stage task orders, with
// their activation stash and a small event simulation of their timing from per-stage costs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/expected.h"
#include "support/units.h"

namespace tsp::partition {

/// How microbatches' forward and backward passes are ordered on each pipeline stage.
enum class PipelineSchedule : std::uint8_t {
  kGPipe,        ///< all forwards, then all backwards (stash: every microbatch)
  k1F1B,         ///< PipeDream-flush: p - s - 1 warm-up forwards, then one forward one backward
  kInterleaved,  ///< Megatron's interleaved 1F1B: v model chunks per stage, microbatches in groups of p
};

/// "gpipe", "1f1b", "interleaved".
const char* pipelineScheduleName(PipelineSchedule schedule);
/// The schedule named by text; false when text names none.
bool parsePipelineSchedule(const std::string& text, PipelineSchedule& schedule);

/// One unit of work on a stage: a microbatch's forward or backward pass through one model chunk.
struct PipelineTask {
  int microbatch = 0;
  bool backward = false;
  int chunk = 0;  ///< the stage's virtual stage (0..v-1); global model stage = chunk * p + stage

  bool operator==(const PipelineTask&) const = default;
};

/// The order of tasks on every stage of a p-stage pipeline with m microbatches and v chunks per stage.
struct PipelineOrder {
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int stages = 1, microbatches = 1, chunks = 1;
  std::vector<std::vector<PipelineTask>> tasks;  ///< per stage, in execution order

  /// Checks that every (microbatch, pass, chunk) occurs once per stage and that each forward precedes
  /// its backward on its stage.
  Status verify() const;
  /// Most microbatch-chunks whose forward ran and whose backward has not yet, on `stage`: the stash.
  int peakStash(int stage) const;
};

/// Builds the order of a schedule. Interleaved needs m divisible by p (Megatron's condition) and v >= 2;
/// errors are config errors naming the numbers.
Expected<PipelineOrder> buildPipelineOrder(PipelineSchedule schedule, int stages, int microbatches, int chunks);

/// An inference pipeline's order (forward passes only) on every stage, for any m: Megatron's
/// interleaved grouping, p microbatches (fewer in a last partial group) through one chunk, then the
/// same group through the stage's next chunk. With one chunk it is microbatch order.
std::vector<std::vector<PipelineTask>> forwardOrder(int stages, int microbatches, int chunks);

/// Costs of one microbatch's pass through each chunk of each stage, and the stage-to-stage transfer.
struct PipelineCosts {
  std::vector<std::vector<double>> forward;   ///< [stage][chunk] cycles
  std::vector<std::vector<double>> backward;  ///< [stage][chunk] cycles
  double transfer = 0;                        ///< cycles from a task's end to its successor on the next stage

  /// Every stage and chunk with the same costs.
  static PipelineCosts uniform(int stages, int chunks, double forwardCycles, double backwardCycles, double transfer = 0);
};

/// When each task ran, and what that means for the pipeline.
struct PipelineTiming {
  std::vector<std::vector<double>> start;  ///< [stage][position in the order]
  double makespan = 0;                      ///< first start to last end
  double idealCycles = 0;                   ///< the busiest stage's work: m x its chunks' forward + backward
  /// Megatron's convention: bubble time over ideal time, (makespan - ideal) / ideal.
  double bubbleFraction() const { return idealCycles > 0 ? (makespan - idealCycles) / idealCycles : 0; }
};

/// The most passes (stages x microbatches x chunks, forward and backward each one) a plan's cost
/// runs through simulatePipeline; a longer order keeps the closed form of pipelineTime.
constexpr std::int64_t kEventSimulatedPasses = 4096;

/// Runs the order as soon as dependences allow: a forward needs the previous model stage's forward of
/// its microbatch, a backward the next model stage's backward (or, on the last, its own forward).
/// Deterministic; an order that cannot finish is an internal error.
Expected<PipelineTiming> simulatePipeline(const PipelineOrder& order, const PipelineCosts& costs);

}  // namespace tsp::partition
