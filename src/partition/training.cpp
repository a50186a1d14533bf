// Loading the `training:` section of the config.
#include "partition/training.h"

#include <yaml-cpp/yaml.h>

#include "topology/yaml_reader.h"

namespace tsp::partition {

Expected<TrainingConfig> loadTraining(const topology::YamlReader& reader, const YAML::Node& node) {
  TrainingConfig config;
  if (!node || node.IsNull() || (node.IsMap() && node.size() == 0)) return config;
  if (auto s = reader.expectMap(node, "training"); !s) return s.error();
  if (auto s = reader.checkKeys(node, {"schedule", "optimizer", "recompute", "shard_optimizer", "microbatches",
                                       "bucket_mib", "input_gradients", "send_after_pass"},
                                "training");
      !s)
    return s.error();
  config.enabled = true;
  auto schedule = reader.text(node, "schedule", "1f1b", {"gpipe", "1f1b", "interleaved"});
  if (!schedule) return schedule.error();
  parsePipelineSchedule(*schedule, config.schedule);
  auto optimizer = reader.text(node, "optimizer", "adam", {"none", "sgd", "adam"});
  if (!optimizer) return optimizer.error();
  ir::parseOptimizer(*optimizer, config.optimizer);
  auto recompute = reader.text(node, "recompute", "none", {"none", "full"});
  if (!recompute) return recompute.error();
  ir::parseRecompute(*recompute, config.recompute);
  auto shard = reader.boolean(node, "shard_optimizer", false);
  if (!shard) return shard.error();
  config.shardOptimizer = *shard;
  auto microbatches = reader.integer(node, "microbatches", 0, 0, 1 << 20);
  if (!microbatches) return microbatches.error();
  config.microbatches = static_cast<int>(*microbatches);
  auto bucket = reader.integer(node, "bucket_mib", 25, 1, 1 << 16);
  if (!bucket) return bucket.error();
  config.bucketBytes = Bytes{*bucket} << 20;
  auto inputGradients = reader.boolean(node, "input_gradients", false);
  if (!inputGradients) return inputGradients.error();
  config.inputGradients = *inputGradients;
  auto sendAfterPass = reader.boolean(node, "send_after_pass", false);
  if (!sendAfterPass) return sendAfterPass.error();
  config.sendAfterPass = *sendAfterPass;
  return config;
}

}  // namespace tsp::partition
