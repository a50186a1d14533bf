// The config loader: parse, hand each section to its layer, validate, hand out.
#include "runtime/run_config.h"


#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "topology/cluster_config.h"
#include "topology/yaml_reader.h"

namespace tsp::runtime {

namespace {

// simulation.faults: link jitter and a stalled unit, validated against the cluster's chips and queues.
Status loadFaults(const topology::YamlReader& reader, const YAML::Node& node, const topology::Cluster& cluster,
                  sim::FaultOptions& out) {
  if (auto s = reader.checkKeys(node, {"link_jitter_cycles", "stall_chip", "stall_unit", "stall_cycle", "stall_cycles"},
                                "simulation.faults");
      !s)
    return s;
  constexpr std::int64_t kMaxCycle = std::int64_t{1} << 48;
  auto jitter = reader.integer(node, "link_jitter_cycles", 0, 0, 1 << 20);
  if (!jitter) return jitter.error();
  auto chip = reader.integer(node, "stall_chip", -1, -1, cluster.chipCount() - 1);
  if (!chip) return chip.error();
  auto unit = reader.integer(node, "stall_unit", -1, -1, cluster.chip().icuQueues - 1);
  if (!unit) return unit.error();
  auto cycle = reader.integer(node, "stall_cycle", 0, 0, kMaxCycle);
  if (!cycle) return cycle.error();
  auto cycles = reader.integer(node, "stall_cycles", 0, 0, kMaxCycle);
  if (!cycles) return cycles.error();
  out.linkJitterCycles = *jitter;
  out.stallChip = static_cast<int>(*chip);
  out.stallUnit = static_cast<int>(*unit);
  out.stallCycle = *cycle;
  out.stallCycles = *cycles;
  return {};
}

Status loadSimulation(const topology::YamlReader& reader, const YAML::Node& node, const topology::Cluster& cluster,
                      SimulationConfig& out) {
  if (auto s = reader.checkKeys(node, {"mode", "iterations", "seed", "rank_mapping", "faults"}, "simulation"); !s)
    return s;
  auto mode = reader.text(node, "mode", "timing", {"timing", "functional"});
  if (!mode) return mode.error();
  auto iterations = reader.integer(node, "iterations", 1, 1, 1);
  if (!iterations) return iterations.error();
  auto seed = reader.integer(node, "seed", 0, 0, std::numeric_limits<std::int64_t>::max());
  if (!seed) return seed.error();
  auto mapping = reader.text(node, "rank_mapping", "block", {"block", "metis"});
  if (!mapping) return mapping.error();
  out = {*mode, static_cast<int>(*iterations), *seed, *mapping, {}};
  if (auto s = loadFaults(reader, reader.child(node, "faults"), cluster, out.faults); !s) return s;
  out.faults.seed = static_cast<std::uint64_t>(*seed);
  // A fault moves values off the cycles their consumers read them in: there is nothing to compare.
  if (out.mode == "functional" && out.faults.enabled())
    return reader.error(reader.child(node, "faults"), "simulation.faults: functional mode runs without injected faults");
  return {};
}

Status loadCompile(const topology::YamlReader& reader, const YAML::Node& node, CompileConfig& out) {
  if (auto s = reader.checkKeys(node, {"effort"}, "compile"); !s) return s;
  auto effort = reader.text(node, "effort", out.effort, {"fast", "default", "max"});
  if (!effort) return effort.error();
  out.effort = *effort;
  return {};
}

Status loadOutput(const topology::YamlReader& reader, const YAML::Node& node, int chips, OutputConfig& out) {
  if (auto s = reader.checkKeys(node, {"trace", "level", "instruction_chips", "event_buffer_rows"}, "output"); !s)
    return s;
  auto trace = reader.text(node, "trace", out.trace);
  if (!trace) return trace.error();
  auto level = reader.text(node, "level", "summary", {"summary", "links", "instructions"});
  if (!level) return level.error();
  auto bufferRows = reader.integer(node, "event_buffer_rows", out.eventBufferRows, 1, std::int64_t{1} << 32);
  if (!bufferRows) return bufferRows.error();
  out.trace = *trace;
  out.level = *level;
  out.eventBufferRows = *bufferRows;
  const YAML::Node list = reader.child(node, "instruction_chips");
  if (list && !(list.IsScalar() && list.as<std::string>() == "all")) {
    auto chipsList = reader.integerList(node, "instruction_chips", 0, chips - 1);
    if (!chipsList) return chipsList.error();
    for (auto c : *chipsList) out.instructionChips.push_back(static_cast<int>(c));
  }
  return {};
}

}  // namespace

Expected<RunConfig> loadRunConfig(const std::string& path) {
  auto loaded = topology::loadYamlFile(path, "config");
  if (!loaded) return loaded.error();
  const YAML::Node root = *loaded;
  topology::YamlReader reader(path);
  if (!root.IsMap()) return configError({path, 1, 1, ""}, "the config must be a mapping with a 'cluster' section");
  if (auto s = reader.checkKeys(root, {"cluster", "model", "parallelism", "simulation", "training", "compile", "output"}, "config");
      !s)
    return s.error();

  RunConfig config;
  config.file = path;
  auto cluster = topology::loadCluster(reader, reader.child(root, "cluster"));
  if (!cluster) return cluster.error();
  config.cluster.emplace(std::move(*cluster));
  auto model = frontend::loadModelSpec(reader, reader.child(root, "model"));
  if (!model) return model.error();
  config.model = std::move(*model);
  auto parallelism = partition::loadParallelism(reader, reader.child(root, "parallelism"));
  if (!parallelism) return parallelism.error();
  config.parallelism = *parallelism;
  if (auto s = loadSimulation(reader, reader.child(root, "simulation"), *config.cluster, config.simulation); !s) return s.error();
  auto training = partition::loadTraining(reader, reader.child(root, "training"));
  if (!training) return training.error();
  config.training = *training;
  if (auto s = loadCompile(reader, reader.child(root, "compile"), config.compile); !s) return s.error();
  if (auto s = loadOutput(reader, reader.child(root, "output"), config.cluster->chipCount(), config.output); !s) return s.error();

  YAML::Node stored = YAML::Clone(root);
  stored.remove("output");
  // How chips are spread over ranks does not change what is simulated (/meta rank_mapping says it).
  if (stored["simulation"] && stored["simulation"].IsMap()) stored["simulation"].remove("rank_mapping");
  YAML::Emitter emitter;
  emitter << stored;
  config.resolvedYaml = emitter.c_str();
  return config;
}

}  // namespace tsp::runtime
