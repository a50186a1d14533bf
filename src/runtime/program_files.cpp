// Programs on disk: each distinct program once (JSON, .tspp, .txt), per-chip compile reports, a manifest.
#include "runtime/program_files.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "support/files.h"

namespace tsp::runtime {

nlohmann::json programsRunRecord(const frontend::ModelSpec& spec, const ir::Graph& graph, int chips) {
  nlohmann::json inputs = nlohmann::json::array();
  for (ir::TensorId id : graph.inputs()) inputs.push_back({graph.tensor(id).name, graph.tensor(id).shape});
  std::string model = spec.describe();
  for (const auto& [name, value] : spec.overrides) model += fmt::format(" {}={}", name, value);
  return {{"model", model}, {"inputs", inputs}, {"chips", chips}};
}

nlohmann::json placementJson(const partition::PlacementReport& p) {
  return {{"method", p.method},           {"tp_average_hops", p.tpAverageHops}, {"tp_max_hops", p.tpMaxHops},
          {"pp_average_hops", p.ppAverageHops}, {"pp_max_hops", p.ppMaxHops},   {"busiest_link", p.busiestLink},
          {"busiest_link_bytes", p.busiestLinkBytes}, {"links_used", p.linksUsed}, {"byte_hops", p.traffic}};
}

bool placementFromJson(const nlohmann::json& j, partition::PlacementReport& p) {
  try {
    p = {j.at("tp_average_hops").get<double>(), j.at("tp_max_hops").get<int>(), j.at("pp_average_hops").get<double>(),
         j.at("pp_max_hops").get<int>(), j.at("busiest_link_bytes").get<Bytes>(), j.at("busiest_link").get<int>(),
         j.at("links_used").get<int>(), j.at("byte_hops").get<double>(), j.at("method").get<std::string>()};
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

namespace {

// The first difference between the run a manifest records and this one, or "".
std::string runRecordDifference(const nlohmann::json& recorded, const nlohmann::json& run) {
  if (!recorded.is_object()) return "it does not record the run its programs were compiled for";
  if (recorded.value("model", nlohmann::json()) != run["model"])
    return fmt::format("its programs were compiled for model {}, this run's model is {}",
                       recorded.value("model", nlohmann::json()).dump(), run["model"].dump());
  if (recorded.value("chips", nlohmann::json()) != run["chips"])
    return fmt::format("its programs were compiled for {} chips, this run's cluster has {}",
                       recorded.value("chips", nlohmann::json()).dump(), run["chips"].dump());
  if (recorded.value("inputs", nlohmann::json()) != run["inputs"])
    return fmt::format("its programs were compiled for the inputs {}, this run's are {}",
                       recorded.value("inputs", nlohmann::json()).dump(), run["inputs"].dump());
  return "";
}

}  // namespace

Status emitPrograms(const std::string& dir, const std::vector<isa::Program>& programs,
                    const std::vector<schedule::CompileReport>& reports, const topology::ChipSpec& spec,
                    const nlohmann::json& run, const nlohmann::json& compile, const ProgramsPlan* plan) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return makeError(ExitCode::kConfig, fmt::format("{}: cannot create directory: {}", dir, ec.message()));
  nlohmann::json manifest = {{"format", "tsp-programs"}, {"version", isa::kProgramVersion}, {"run", run}};
  if (!compile.empty()) manifest["compile"] = compile;
  if (plan) {
    const std::string planFile = "plan.yaml";
    std::ofstream out(std::filesystem::path(dir) / planFile);
    out << plan->plan.toYaml() << "\n";
    if (!out) return makeError(ExitCode::kConfig, fmt::format("{}: cannot write {}", dir, planFile));
    nlohmann::json& record = manifest["plan"] = {{"file", planFile}};
    if (plan->predictedIterationCycles) record["predicted_iteration_cycles"] = *plan->predictedIterationCycles;
    if (plan->predictedPipelineCycles) record["predicted_pipeline_cycles"] = *plan->predictedPipelineCycles;
    if (!plan->placement.method.empty()) record["placement"] = placementJson(plan->placement);
  }
  auto& chips = manifest["chips"] = nlohmann::json::array();
  std::map<std::uint64_t, std::string> written;
  for (size_t chip = 0; chip < programs.size(); ++chip) {
    const std::uint64_t hash = programs[chip].contentHash();
    auto [it, fresh] = written.emplace(hash, fmt::format("program_{:016x}.json", hash));
    if (fresh) {
      std::ofstream out(std::filesystem::path(dir) / it->second);
      out << isa::serialize(programs[chip]);
      const std::string stem = it->second.substr(0, it->second.size() - 5);
      std::ofstream binary(std::filesystem::path(dir) / (stem + ".tspp"), std::ios::binary);
      binary << isa::serializeBinary(programs[chip]);
      std::ofstream text(std::filesystem::path(dir) / (stem + ".txt"));
      text << isa::toText(programs[chip], spec);
      if (!out || !binary || !text) return makeError(ExitCode::kConfig, fmt::format("{}: cannot write {}", dir, it->second));
    }
    nlohmann::json entry = {{"chip", chip}, {"program", it->second}};
    if (chip < reports.size()) {  // programs read back with --programs have no report
      const std::string report = fmt::format("report_chip{}.json", chip);
      std::ofstream out(std::filesystem::path(dir) / report);
      out << schedule::reportJson(reports[chip]) << "\n";
      if (!out) return makeError(ExitCode::kConfig, fmt::format("{}: cannot write {}", dir, report));
      entry["report"] = report;
    }
    chips.push_back(entry);
  }
  std::ofstream out(std::filesystem::path(dir) / "manifest.json");
  out << manifest.dump(2) << "\n";
  if (!out) return makeError(ExitCode::kConfig, fmt::format("{}: cannot write manifest.json", dir));
  return {};
}

Expected<LoadedPrograms> loadPrograms(const std::string& dir, const topology::Cluster& cluster,
                                      const nlohmann::json& run, bool needPlan) {
  const std::string manifestPath = (std::filesystem::path(dir) / "manifest.json").string();
  if (existsButNotRegular(manifestPath))
    return makeError(ExitCode::kConfig, fmt::format("{}: the program manifest is not a regular file", manifestPath));
  std::ifstream in(manifestPath);
  if (!in) return makeError(ExitCode::kConfig, fmt::format("{}: cannot open the program manifest", manifestPath));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json manifest = nlohmann::json::parse(text.str(), nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object() || !manifest.contains("format") ||
      manifest["format"] != "tsp-programs" || !manifest.contains("chips") || !manifest["chips"].is_array())
    return makeError(ExitCode::kConfig, fmt::format("{}: not a tsp-sim program manifest", manifestPath));
  const auto& chips = manifest["chips"];
  if (const std::string difference = runRecordDifference(manifest.value("run", nlohmann::json()), run); !difference.empty())
    return makeError(ExitCode::kConfig, fmt::format("{}: {}; compile them for this run with --emit-programs",
                                                    manifestPath, difference));
  if (static_cast<int>(chips.size()) != cluster.chipCount())
    return makeError(ExitCode::kConfig, fmt::format("{}: lists {} chips, the cluster has {}", manifestPath,
                                                    chips.size(), cluster.chipCount()));
  // Every entry is checked before any program is read: the chip list is the manifest's to get right.
  std::vector<std::string> fileOf(cluster.chipCount());
  for (const auto& entry : chips) {
    // Values of the wrong JSON type are refused here, not thrown by the JSON library.
    const bool wellTyped = entry.is_object() && entry.contains("chip") && entry["chip"].is_number_integer() &&
                           entry.contains("program") && entry["program"].is_string();
    const std::int64_t chip = wellTyped ? entry["chip"].get<std::int64_t>() : -1;
    const std::string file = wellTyped ? entry["program"].get<std::string>() : "";
    if (chip < 0 || chip >= cluster.chipCount() || file.empty())
      return makeError(ExitCode::kConfig, fmt::format("{}: an entry needs a chip in [0, {}) and a program file",
                                                      manifestPath, cluster.chipCount()));
    if (!fileOf[chip].empty()) return makeError(ExitCode::kConfig, fmt::format("{}: lists chip {} twice", manifestPath, chip));
    fileOf[chip] = file;
  }
  std::vector<isa::Program> programs(cluster.chipCount());
  std::map<std::string, isa::Program> read;  // shared program files are read once
  for (int chip = 0; chip < cluster.chipCount(); ++chip) {
    const std::string& file = fileOf[chip];
    auto found = read.find(file);
    if (found == read.end()) {
      const std::string path = (std::filesystem::path(dir) / file).string();
      if (existsButNotRegular(path))
        return makeError(ExitCode::kConfig, fmt::format("{}: the program file is not a regular file", path));
      std::ifstream programIn(path);
      if (!programIn) return makeError(ExitCode::kConfig, fmt::format("{}: cannot open the program file", path));
      std::stringstream programText;
      programText << programIn.rdbuf();
      auto program = isa::deserialize(programText.str(), cluster.chip(), path);
      if (!program) return program.error();
      found = read.emplace(file, std::move(*program)).first;
    }
    programs[chip] = found->second;
  }
  LoadedPrograms loaded{std::move(programs), std::nullopt};
  if (!needPlan) return loaded;
  // The plan: a file beside the manifest, and the cost model's figures for it when the search had them.
  const nlohmann::json record = manifest.value("plan", nlohmann::json());
  if (!record.is_object())
    return makeError(ExitCode::kConfig, fmt::format("{}: it does not record the plan its programs were compiled for; "
                                                    "compile them for this run with --emit-programs",
                                                    manifestPath));
  auto figure = [&](const char* key) -> Expected<std::optional<double>> {
    if (!record.contains(key)) return std::optional<double>();
    if (!record[key].is_number() || record[key].get<double>() < 0)
      return makeError(ExitCode::kConfig, fmt::format("{}: plan.{} must be a number of cycles", manifestPath, key));
    return std::optional<double>(record[key].get<double>());
  };
  if (!record.contains("file") || !record["file"].is_string() || record["file"].get<std::string>().empty())
    return makeError(ExitCode::kConfig, fmt::format("{}: plan.file must name the plan file", manifestPath));
  ProgramsPlan plan;
  plan.file = (std::filesystem::path(dir) / record["file"].get<std::string>()).string();
  auto planRead = partition::loadPlanFile(plan.file);
  if (!planRead) return planRead.error();
  plan.plan = std::move(*planRead);
  auto iteration = figure("predicted_iteration_cycles");
  if (!iteration) return iteration.error();
  auto pipeline = figure("predicted_pipeline_cycles");
  if (!pipeline) return pipeline.error();
  plan.predictedIterationCycles = *iteration;
  plan.predictedPipelineCycles = *pipeline;
  if (record.contains("placement") && !placementFromJson(record["placement"], plan.placement))
    return makeError(ExitCode::kConfig, fmt::format("{}: plan.placement is not a placement report", manifestPath));
  loaded.plan = std::move(plan);
  return loaded;
}

}  // namespace tsp::runtime
