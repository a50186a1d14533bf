// Conservative PDES: fixed-lookahead windows, C2C bursts exchanged between windows, idle windows skipped.
#include "runtime/pdes.h"

#include <algorithm>
#include <climits>
#include <optional>

#include <fmt/format.h>

namespace tsp::runtime {

RankMapping blockMapping(int chips, int ranks, int rank) {
  RankMapping mapping;
  mapping.owner.resize(chips);
  const int base = chips / ranks, extra = chips % ranks;
  int chip = 0;
  for (int r = 0; r < ranks; ++r) {
    const int count = base + (r < extra ? 1 : 0);
    for (int i = 0; i < count; ++i, ++chip) {
      mapping.owner[chip] = r;
      if (r == rank) mapping.localChips.push_back(chip);
    }
  }
  return mapping;
}

ParallelSimulation::ParallelSimulation(MPI_Comm comm, const topology::Cluster& cluster,
                                       const std::vector<std::shared_ptr<const isa::Program>>& programs,
                                       RankMapping mapping, const sim::SimOptions& options)
    : comm_(comm), mapping_(std::move(mapping)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &ranks_);
  const auto& spec = cluster.chip();
  localIndex_.assign(cluster.chipCount(), -1);
  for (int chip : mapping_.localChips) {
    std::vector<sim::PortBinding> ports(spec.c2cPorts);
    for (const auto& [port, linkId] : cluster.linksOf(chip)) {
      const auto& link = cluster.links()[linkId];
      ports[port] = {linkId, link.other(chip), link.portOn(link.other(chip)), link.a == chip, link.latencyCycles,
                     link.bytesPerCycle};
    }
    localIndex_[chip] = static_cast<int>(chips_.size());
    chips_.push_back(sim::makeTspChip(chip, spec, programs[chip], std::move(ports), options));
  }
  // Every burst takes at least the send latency plus one link latency from issue to arrival,
  // so a window of that length never needs a vector from the same window. The same window on
  // every rank count keeps results identical however the chips are spread.
  lookahead_ = std::max<Cycle>(1, spec.c2cSendCycles + std::max<Cycle>(1, cluster.minLinkLatency()));
}

Expected<SimulationOutcome> ParallelSimulation::run(const volatile std::sig_atomic_t* interrupt,
                                                    const ProgressCallback& progress, bool& reportHere) {
  SimulationOutcome outcome;
  std::optional<Diagnostic> failure;
  std::int64_t events = 0;
  Cycle start = sim::kNever;
  for (const auto& chip : chips_) start = std::min(start, chip->nextEventCycle());
  {
    long long local = start, global = 0;
    MPI_Allreduce(&local, &global, 1, MPI_LONG_LONG, MPI_MIN, comm_);
    start = global;
  }
  Cycle windowStart = start == sim::kNever ? 0 : start;
  bool done = start == sim::kNever;
  std::vector<std::vector<sim::C2CBurst>> toRank(ranks_);
  std::vector<int> sendCounts(ranks_), recvCounts(ranks_), sendOffsets(ranks_), recvOffsets(ranks_);
  while (!done) {
    const Cycle windowEnd = windowStart + lookahead_;
    std::vector<sim::C2CBurst> arrived;
    for (size_t i = 0; i < chips_.size() && !failure; ++i) {
      const std::int64_t before = chips_[i]->stats().instructions;
      if (auto s = chips_[i]->advanceTo(windowEnd); !s) failure = s.error();
      events += chips_[i]->stats().instructions - before;
      for (auto& burst : chips_[i]->takeOutgoing()) {
        if (localIndex_[burst.dstChip] >= 0) arrived.push_back(burst);
        else toRank[mapping_.owner[burst.dstChip]].push_back(burst);
      }
    }
    // Exchange the bursts that cross ranks (sizes first, then the bursts as bytes).
    std::vector<sim::C2CBurst> outgoing;
    for (int r = 0; r < ranks_; ++r) {
      sendOffsets[r] = static_cast<int>(outgoing.size() * sizeof(sim::C2CBurst));
      sendCounts[r] = static_cast<int>(toRank[r].size() * sizeof(sim::C2CBurst));
      outgoing.insert(outgoing.end(), toRank[r].begin(), toRank[r].end());
      toRank[r].clear();
    }
    MPI_Alltoall(sendCounts.data(), 1, MPI_INT, recvCounts.data(), 1, MPI_INT, comm_);
    int total = 0;
    for (int r = 0; r < ranks_; ++r) {
      recvOffsets[r] = total;
      total += recvCounts[r];
    }
    std::vector<sim::C2CBurst> incoming(total / sizeof(sim::C2CBurst));
    MPI_Alltoallv(outgoing.data(), sendCounts.data(), sendOffsets.data(), MPI_BYTE, incoming.data(),
                  recvCounts.data(), recvOffsets.data(), MPI_BYTE, comm_);
    arrived.insert(arrived.end(), incoming.begin(), incoming.end());
    std::sort(arrived.begin(), arrived.end());  // (arrive, src chip, link, send cycle): rank-independent
    for (const auto& burst : arrived) chips_[localIndex_[burst.dstChip]]->deliver(burst);

    // One agreement per window: the next event anywhere, and continue / stop / fail.
    Cycle next = sim::kNever;
    for (const auto& chip : chips_) next = std::min(next, chip->nextEventCycle());
    const long long code = failure ? static_cast<long long>(failure->code) : (*interrupt ? -1 : 0);
    long long local[3] = {next, -std::max(code, 0LL), code < 0 ? 1 : 0}, global[3];
    long long localMin[2] = {local[0], local[1]};
    long long globalMin[2];
    MPI_Allreduce(localMin, globalMin, 2, MPI_LONG_LONG, MPI_MIN, comm_);
    MPI_Allreduce(&local[2], &global[2], 1, MPI_LONG_LONG, MPI_MAX, comm_);
    ++outcome.windows;
    outcome.reachedCycle = windowEnd;
    if (globalMin[1] < 0) {
      // Some rank failed: the lowest failing rank reports.
      const int mine = failure ? rank_ : INT_MAX;
      int lowest = INT_MAX;
      MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, comm_);
      reportHere = lowest == rank_;
      if (failure) return *failure;
      return makeError(static_cast<ExitCode>(-globalMin[1]), "failed on another rank");
    }
    if (global[2] > 0) {
      outcome.interrupted = true;
      return outcome;
    }
    if (progress) progress(windowEnd, outcome.windows, events);
    if (globalMin[0] == sim::kNever) break;
    windowStart = std::max(windowEnd, static_cast<Cycle>(globalMin[0]));
  }
  // Chips without a program never ran their finish step: advancing past the end does it.
  for (auto& chip : chips_) (void)chip->advanceTo(sim::kNever);
  outcome.reachedCycle = sim::kNever;
  return outcome;
}

}  // namespace tsp::runtime
