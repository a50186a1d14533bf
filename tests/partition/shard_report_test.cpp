// Tests of the per-chip sharding description: collectives and bytes agree with the materialised graphs.
#include "partition/shard_report.h"

#include <gtest/gtest.h>

#include "compile/frontend/builtin_models.h"
#include "partition/plan_shards.h"
#include "partition/sharding_spmd.h"

namespace tsp::partition {
namespace {

// Megatron GPT at tp 2 and 4: every chip lists every op, its all-reduces (two per block, one per
// lookup) with their readers and layouts, sends what the materialised graphs send, and holds the
// local weights its graph holds.
TEST(ShardReport, CollectivesBytesAndWeightsMatchTheShardedGraphs) {
  frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"layers", "2"}, {"hidden", "32"}, {"heads", "4"}, {"seq", "8"}, {"batch", "2"}, {"vocab", "16"}};
  auto g = frontend::buildBuiltinModel(spec);
  ASSERT_TRUE(g.ok()) << g.error().format();
  for (int tp : {2, 4}) {
    SCOPED_TRACE(tp);
    Plan plan;
    plan.tp = tp;
    plan.split = TensorSplit::kMegatron;
    plan.stageFirstLayer = {0};
    plan.stageChip = {0};
    for (int t = 0; t < tp; ++t) plan.placement.push_back(t);
    auto chips = describeShards(*g, plan);
    ASSERT_TRUE(chips.ok()) << chips.error().format();
    ASSERT_EQ(chips->size(), static_cast<size_t>(tp));
    auto devices = tensorParallelGraphs(*g, plan);
    ASSERT_TRUE(devices.ok()) << devices.error().format();
    for (int t = 0; t < tp; ++t) {
      const ChipShards& chip = (*chips)[t];
      EXPECT_EQ(chip.chip, t);
      EXPECT_EQ(chip.ops.size(), g->ops().size());
      EXPECT_EQ(chip.collectives.size(), 2u * 2 + 2);
      for (const auto& c : chip.collectives) {
        EXPECT_EQ(c.kind, "AllReduce");
        EXPECT_EQ(c.group.size(), static_cast<size_t>(tp));
        EXPECT_NE(c.why.find("partial(tp) -> "), std::string::npos) << c.why;
      }
      EXPECT_EQ(chip.sentBytes, devices->collectiveBytes[t]);
      std::int64_t weights = 0;
      for (const auto& list : {devices->graphs[t].weights(), devices->graphs[t].constants()})
        for (ir::TensorId w : list) weights += devices->graphs[t].tensor(w).bytes();
      EXPECT_EQ(chip.weightBytes, weights);
      EXPECT_GT(chip.activationBytes, 0);
    }
    EXPECT_NE(shardsText(*chips).find("AllReduce of"), std::string::npos);
    EXPECT_NE(shardsJson(*chips).find("\"sent_bytes\""), std::string::npos);
  }
}

}  // namespace
}  // namespace tsp::partition
