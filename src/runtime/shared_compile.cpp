// Compiles shared over the MPI ranks.
#include "runtime/shared_compile.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <optional>
#include <thread>

namespace tsp::runtime {

namespace {

void appendWord(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

// A diagnostic as bytes after a leading 1 (code, location, message), and back from `at` on.
std::string encodeError(const Diagnostic& d) {
  std::string out(1, '\1');
  auto text = [&](const std::string& t) {
    appendWord(out, static_cast<std::int64_t>(t.size()));
    out += t;
  };
  appendWord(out, static_cast<std::int64_t>(d.code));
  appendWord(out, d.where.line);
  appendWord(out, d.where.column);
  text(d.where.file);
  text(d.where.node);
  text(d.message);
  return out;
}

Diagnostic decodeError(const std::string& bytes, size_t at) {
  auto word = [&]() {
    std::int64_t v = 0;
    if (at <= bytes.size() && bytes.size() - at >= sizeof v) std::memcpy(&v, bytes.data() + at, sizeof v);
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

// A job's outcome as bytes: 0 and the compiled shard, or 1 and the error.
std::string encode(const Expected<schedule::CompiledShard>& shard) {
  if (!shard) return encodeError(shard.error());
  std::string out = schedule::serializeCompiledShard(*shard);
  out.insert(out.begin(), '\0');
  return out;
}

Expected<schedule::CompiledShard> decode(const std::string& bytes, const topology::ChipSpec& chip) {
  if (bytes.empty()) return makeError(ExitCode::kInternal, "an empty compiled shard was broadcast");
  if (bytes[0] == '\0') return schedule::deserializeCompiledShard(bytes.substr(1), chip);
  return decodeError(bytes, 1);
}

// A layer compile's outcome as bytes: 0 and the cycles, or 1 and the error.
std::string encodeCycles(const Expected<Cycle>& cycles) {
  if (!cycles) return encodeError(cycles.error());
  std::string out(1, '\0');
  appendWord(out, *cycles);
  return out;
}

Expected<Cycle> decodeCycles(const std::string& bytes) {
  if (bytes.size() == 1 + sizeof(std::int64_t) && bytes[0] == '\0') {
    std::int64_t v = 0;
    std::memcpy(&v, bytes.data() + 1, sizeof v);
    return Cycle{v};
  }
  if (bytes.empty() || bytes[0] != '\1') return makeError(ExitCode::kInternal, "a malformed layer compile was broadcast");
  return decodeError(bytes, 1);
}

// Waits until every rank of comm has arrived, sleeping between polls: Open MPI's blocking
// collectives busy-poll a core for as long as a rank waits, which the ranks still at work (or other
// jobs on the machine) would otherwise lose.
void awaitRanks(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm, &request);
  int done = 0;
  MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  while (!done) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  }
}

}  // namespace

std::vector<int> dealJobs(const std::vector<std::int64_t>& weights, int ranks) {
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weights[a] > weights[b]; });
  std::vector<std::int64_t> load(static_cast<size_t>(std::max(1, ranks)), 0);
  std::vector<int> owner(weights.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = static_cast<int>(least);
    load[static_cast<size_t>(least)] += std::max<std::int64_t>(1, weights[i]);
  }
  return owner;
}

std::vector<std::string> runShared(MPI_Comm comm, const std::vector<std::int64_t>& weights,
                                   const std::function<std::string(size_t)>& run, const support::ProgressFn& progress) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const std::vector<int> owner = dealJobs(weights, ranks);
  const auto share = static_cast<std::int64_t>(std::count(owner.begin(), owner.end(), rank));
  std::vector<std::string> bytes(weights.size());
  std::int64_t done = 0;
  for (size_t i = 0; i < weights.size(); ++i)
    if (owner[i] == rank) {
      bytes[i] = run(i);
      if (progress) progress(++done, share);
    }
  if (ranks == 1) return bytes;
  awaitRanks(comm);
  for (size_t i = 0; i < weights.size(); ++i) {
    std::uint64_t size = bytes[i].size();
    MPI_Bcast(&size, 1, MPI_UINT64_T, owner[i], comm);
    bytes[i].resize(size);
    for (std::uint64_t at = 0; at < size;) {  // in pieces a count of int can hold
      const int piece = static_cast<int>(std::min<std::uint64_t>(size - at, 1u << 30));
      MPI_Bcast(bytes[i].data() + at, piece, MPI_CHAR, owner[i], comm);
      at += static_cast<std::uint64_t>(piece);
    }
  }
  return bytes;
}

schedule::ShardBatchCompiler sharedCompiler(MPI_Comm comm) {
  return [comm](const topology::ChipSpec& chip,
                const std::vector<schedule::ShardJob>& jobs) -> Expected<std::vector<schedule::CompiledShard>> {
    int ranks = 1;
    MPI_Comm_size(comm, &ranks);
    if (ranks == 1) return schedule::compileShards(chip, jobs);
    std::vector<std::int64_t> weights;
    for (const auto& job : jobs) weights.push_back(static_cast<std::int64_t>(job.ops.size()));
    auto bytes = runShared(comm, weights, [&](size_t i) {
      const auto& job = jobs[i];
      return encode(schedule::compileShard(chip, *job.graph, job.ops, job.interface, job.options));
    });
    std::vector<schedule::CompiledShard> shards;
    shards.reserve(jobs.size());
    std::optional<Diagnostic> firstError;
    for (auto& b : bytes) {
      auto shard = decode(b, chip);
      std::string().swap(b);
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

partition::LayerCompileBatch sharedLayerCompiler(MPI_Comm comm) {
  return [comm](const topology::ChipSpec& chip, const std::vector<partition::LayerCompile>& jobs,
                const support::ProgressFn& progress) {
    int ranks = 1;
    MPI_Comm_size(comm, &ranks);
    if (ranks == 1) return partition::compileLayers(chip, jobs, progress);
    std::vector<std::int64_t> weights;
    for (const auto& job : jobs) weights.push_back(static_cast<std::int64_t>(job.graph->ops().size()));
    const auto bytes = runShared(
        comm, weights, [&](size_t i) { return encodeCycles(partition::compileLayer(chip, jobs[i])); },
        progress);
    std::vector<Expected<Cycle>> out;
    out.reserve(bytes.size());
    for (const auto& b : bytes) out.push_back(decodeCycles(b));
    return out;
  };
}

}  // namespace tsp::runtime
