// Tests of the training pipeline schedules: orders, stash, and simulated bubbles against Megatron's formulas.
#include "partition/pipeline_schedule.h"

#include <cmath>

#include <gtest/gtest.h>

namespace tsp::partition {
namespace {

// Simulated bubble (bubble time over ideal time) of a schedule with backward = 2 x forward, a small
// stage-to-stage transfer, and the chunk costs split v ways.
double simulatedBubble(PipelineSchedule schedule, int p, int m, int v, double transfer) {
  auto order = buildPipelineOrder(schedule, p, m, v);
  EXPECT_TRUE(order.ok()) << order.error().message;
  const double forward = 1000.0 / v;
  auto timing = simulatePipeline(*order, PipelineCosts::uniform(p, v, forward, 2 * forward, transfer));
  EXPECT_TRUE(timing.ok()) << timing.error().message;
  return timing->bubbleFraction();
}

TEST(PipelineSchedule, GPipeAnd1F1BBubbleIsPMinusOneOverM) {
  for (auto schedule : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B})
    for (int p : {2, 4, 8})
      for (int m : {8, 16, 64}) {
        const double formula = static_cast<double>(p - 1) / m;
        EXPECT_NEAR(simulatedBubble(schedule, p, m, 1, 0.0), formula, 1e-12) << pipelineScheduleName(schedule);
        // A transfer of 0.01 % of a forward pass keeps the bubble within 1 % of the formula (which has
        // no communication; 1F1B pays the transfer on every steady-state round trip).
        EXPECT_LE(std::abs(simulatedBubble(schedule, p, m, 1, 0.1) / formula - 1), 0.01)
            << pipelineScheduleName(schedule) << " p" << p << " m" << m;
      }
}

TEST(PipelineSchedule, InterleavedBubbleIsOneOverVOfIt) {
  for (int p : {2, 4, 8})
    for (int v : {2, 4})
      for (int m : {8, 16, 64}) {
        const double formula = static_cast<double>(p - 1) / (v * m);
        EXPECT_NEAR(simulatedBubble(PipelineSchedule::kInterleaved, p, m, v, 0.0), formula, 1e-12)
            << "p" << p << " v" << v << " m" << m;
        EXPECT_LE(std::abs(simulatedBubble(PipelineSchedule::kInterleaved, p, m, v, 0.25) / formula - 1), 0.01)
            << "p" << p << " v" << v << " m" << m;
      }
}

TEST(PipelineSchedule, StashPerStage) {
  const int p = 4, m = 16;
  auto gpipe = buildPipelineOrder(PipelineSchedule::kGPipe, p, m, 1);
  auto oneF = buildPipelineOrder(PipelineSchedule::k1F1B, p, m, 1);
  auto inter = buildPipelineOrder(PipelineSchedule::kInterleaved, p, m, 2);
  ASSERT_TRUE(gpipe.ok() && oneF.ok() && inter.ok());
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(gpipe->peakStash(s), m);
    EXPECT_EQ(oneF->peakStash(s), p - s);
    // Megatron's warm-up: 2 (p - s - 1) + (v - 1) p chunk forwards, then one more before the first backward.
    EXPECT_EQ(inter->peakStash(s), 2 * (p - s - 1) + p + 1);
  }
}

// The seed's 1F1B formula: with unit forward and backward passes, stage s runs the forward of
// microbatch t - s at step t during the fill, and the first backward reaches it at step 2p - s - 1.
TEST(PipelineSchedule, OneFOneBFollowsTheSeedFormula) {
  const int p = 4, m = 8;
  auto order = buildPipelineOrder(PipelineSchedule::k1F1B, p, m, 1);
  ASSERT_TRUE(order.ok());
  auto timing = simulatePipeline(*order, PipelineCosts::uniform(p, 1, 1.0, 1.0));
  ASSERT_TRUE(timing.ok());
  for (int s = 0; s < p; ++s) {
    const auto& tasks = order->tasks[s];
    int firstBackward = -1;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (tasks[i].backward) {
        firstBackward = static_cast<int>(i);
        break;
      }
      EXPECT_EQ(timing->start[s][i], tasks[i].microbatch + s) << "stage " << s;  // t = microbatch + s
    }
    ASSERT_GE(firstBackward, 0);
    EXPECT_EQ(tasks[firstBackward].microbatch, 0);
    EXPECT_EQ(timing->start[s][firstBackward], 2 * p - s - 1);  // microbatch = t - 2p + s + 1 = 0
  }
}

TEST(PipelineSchedule, BadShapesAreConfigErrors) {
  auto inter = buildPipelineOrder(PipelineSchedule::kInterleaved, 4, 6, 2);
  ASSERT_FALSE(inter.ok());
  EXPECT_EQ(inter.error().code, ExitCode::kConfig);
  EXPECT_NE(inter.error().message.find("the interleaved schedule needs microbatches (6) divisible by the pipeline "
                                       "stages (4)"), std::string::npos);
  auto chunks = buildPipelineOrder(PipelineSchedule::k1F1B, 4, 8, 2);
  ASSERT_FALSE(chunks.ok());
  EXPECT_NE(chunks.error().message.find("schedule 1f1b runs one chunk per stage, not 2"), std::string::npos);
  auto zero = buildPipelineOrder(PipelineSchedule::kGPipe, 0, 8, 1);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("needs stages, microbatches and chunks >= 1"), std::string::npos);
}

TEST(PipelineSchedule, VerifyAndDeadlockAreCaught) {
  PipelineOrder order{PipelineSchedule::k1F1B, 2, 2, 1, {}};
  // Stage 1 insists on microbatch 1 first; stage 0 only sends it after the backward of microbatch 0.
  order.tasks = {{{0, false, 0}, {0, true, 0}, {1, false, 0}, {1, true, 0}},
                 {{1, false, 0}, {0, false, 0}, {0, true, 0}, {1, true, 0}}};
  ASSERT_TRUE(order.verify().ok());
  auto timing = simulatePipeline(order, PipelineCosts::uniform(2, 1, 1, 2));
  ASSERT_FALSE(timing.ok());
  EXPECT_NE(timing.error().message.find("deadlocks"), std::string::npos);
  order.tasks[0] = {{0, true, 0}, {0, false, 0}, {1, false, 0}, {1, true, 0}};
  EXPECT_FALSE(order.verify().ok());
}

}  // namespace
}  // namespace tsp::partition
