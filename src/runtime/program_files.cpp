// Programs on disk: each distinct program once (JSON, .tspp, .txt), per-chip compile reports, a manifest.
#include "runtime/program_files.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tsp::runtime {

Status emitPrograms(const std::string& dir, const std::vector<isa::Program>& programs,
                    const std::vector<schedule::CompileReport>& reports, const topology::ChipSpec& spec) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return makeError(ExitCode::kConfig, fmt::format("{}: cannot create directory: {}", dir, ec.message()));
  nlohmann::json manifest = {{"format", "tsp-programs"}, {"version", isa::kProgramVersion}};
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

Expected<std::vector<isa::Program>> loadPrograms(const std::string& dir, const topology::Cluster& cluster) {
  const std::string manifestPath = (std::filesystem::path(dir) / "manifest.json").string();
  std::ifstream in(manifestPath);
  if (!in) return makeError(ExitCode::kConfig, fmt::format("{}: cannot open the program manifest", manifestPath));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json manifest = nlohmann::json::parse(text.str(), nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object() || manifest.value("format", "") != "tsp-programs" ||
      !manifest.contains("chips") || !manifest["chips"].is_array())
    return makeError(ExitCode::kConfig, fmt::format("{}: not a tsp-sim program manifest", manifestPath));
  const auto& chips = manifest["chips"];
  if (static_cast<int>(chips.size()) != cluster.chipCount())
    return makeError(ExitCode::kConfig, fmt::format("{}: lists {} chips, the cluster has {}", manifestPath,
                                                    chips.size(), cluster.chipCount()));
  std::vector<isa::Program> programs(cluster.chipCount());
  std::map<std::string, isa::Program> read;  // shared program files are read once
  for (const auto& entry : chips) {
    const int chip = entry.value("chip", -1);
    const std::string file = entry.value("program", "");
    if (chip < 0 || chip >= cluster.chipCount() || file.empty())
      return makeError(ExitCode::kConfig, fmt::format("{}: an entry needs a chip in [0, {}) and a program file",
                                                      manifestPath, cluster.chipCount()));
    auto found = read.find(file);
    if (found == read.end()) {
      const std::string path = (std::filesystem::path(dir) / file).string();
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
  return programs;
}

}  // namespace tsp::runtime
