// Compiles shared over the MPI ranks.
#include "runtime/shared_compile.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace tsp::runtime {

namespace {

// A job's outcome as bytes: 0 and the compiled shard, or 1 and the error (code, location, message).
std::string encode(const Expected<schedule::CompiledShard>& shard) {
  if (shard) {
    std::string out = schedule::serializeCompiledShard(*shard);
    out.insert(out.begin(), '\0');
    return out;
  }
  const Diagnostic& d = shard.error();
  std::string out(1, '\1');
  auto word = [&](std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  auto text = [&](const std::string& t) {
    word(static_cast<std::int64_t>(t.size()));
    out += t;
  };
  word(static_cast<std::int64_t>(d.code));
  word(d.where.line);
  word(d.where.column);
  text(d.where.file);
  text(d.where.node);
  text(d.message);
  return out;
}

Expected<schedule::CompiledShard> decode(const std::string& bytes, const topology::ChipSpec& chip) {
  if (bytes.empty()) return makeError(ExitCode::kInternal, "an empty compiled shard was broadcast");
  if (bytes[0] == '\0') return schedule::deserializeCompiledShard(bytes.substr(1), chip);
  size_t at = 1;
  auto word = [&]() {
    std::int64_t v = 0;
    if (bytes.size() - at >= sizeof v) std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  };
  auto text = [&]() {
    const auto n = static_cast<size_t>(word());
    std::string t = at <= bytes.size() ? bytes.substr(at, n) : std::string();
    at += n;
    return t;
  };
  Diagnostic d;
  d.code = static_cast<ExitCode>(word());
  d.where.line = static_cast<int>(word());
  d.where.column = static_cast<int>(word());
  d.where.file = text();
  d.where.node = text();
  d.message = text();
  return d;
}

}  // namespace

schedule::ShardBatchCompiler sharedCompiler(MPI_Comm comm) {
  return [comm](const topology::ChipSpec& chip,
                const std::vector<schedule::ShardJob>& jobs) -> Expected<std::vector<schedule::CompiledShard>> {
    int rank = 0, ranks = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    if (ranks == 1 || jobs.size() < 2) return schedule::compileShards(chip, jobs);
    std::vector<std::string> bytes(jobs.size());
    for (size_t i = static_cast<size_t>(rank); i < jobs.size(); i += static_cast<size_t>(ranks)) {
      const auto& job = jobs[i];
      bytes[i] = encode(schedule::compileShard(chip, *job.graph, job.ops, job.interface, job.options));
    }
    std::vector<schedule::CompiledShard> shards;
    shards.reserve(jobs.size());
    std::optional<Diagnostic> firstError;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const int root = static_cast<int>(i % static_cast<size_t>(ranks));
      std::uint64_t size = bytes[i].size();
      MPI_Bcast(&size, 1, MPI_UINT64_T, root, comm);
      bytes[i].resize(size);
      for (std::uint64_t done = 0; done < size;) {  // in pieces a count of int can hold
        const int piece = static_cast<int>(std::min<std::uint64_t>(size - done, 1u << 30));
        MPI_Bcast(bytes[i].data() + done, piece, MPI_CHAR, root, comm);
        done += static_cast<std::uint64_t>(piece);
      }
      auto shard = decode(bytes[i], chip);
      std::string().swap(bytes[i]);
      if (!shard) {
        if (!firstError) firstError = shard.error();
        continue;
      }
      shards.push_back(std::move(*shard));
    }
    if (firstError) return *firstError;
    return shards;
  };
}

}  // namespace tsp::runtime
