// Conservative PDES: cross-rank lookahead windows, exact sub-windows inside a rank, neighbour exchange.
#include "runtime/pdes.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

namespace tsp::runtime {

namespace {

static_assert(sizeof(long) == sizeof(Cycle), "MPI_LONG_INT carries cycles");

// The MPI_LONG_INT pair: MPI_MINLOC keeps the smallest value and, among equals, the smallest index.
struct LongInt {
  long value;
  int index;
};

Cycle saturatingAdd(Cycle a, Cycle b) { return a > sim::kNever - b ? sim::kNever : a + b; }

constexpr int kCodeSlots = 8;  // failure index = who * kCodeSlots + exit code

}  // namespace

std::vector<Cycle> readDeadlines(const std::vector<LinkUse>& sends, const std::vector<LinkUse>& reads) {
  std::vector<Cycle> readFrom(sends.size(), sim::kNever);
  // Walk both sequences in FIFO order: reads[r] still takes `left` vectors.
  size_t r = 0;
  std::int64_t left = reads.empty() ? 0 : reads[0].vectors;
  auto nextRead = [&] {
    ++r;
    left = r < reads.size() ? reads[r].vectors : 0;
  };
  for (size_t k = 0; k < sends.size(); ++k) {
    while (r < reads.size() && left <= 0) nextRead();
    if (r >= reads.size()) break;  // the rest is never read: no deadline
    readFrom[k] = reads[r].issue;
    for (std::int64_t need = sends[k].vectors; need > 0 && r < reads.size();) {
      const std::int64_t take = std::min(need, left);
      need -= take;
      left -= take;
      if (left <= 0) nextRead();
    }
  }
  // A window starting before burst k must end by the first read of burst k or of any later one.
  for (size_t k = readFrom.size(); k-- > 1;) readFrom[k - 1] = std::min(readFrom[k - 1], readFrom[k]);
  return readFrom;
}

Status checkChipStateFits(const topology::Cluster& cluster, const sim::SimOptions& options, MPI_Comm comm,
                          const std::string& configFile) {
  int ranks = 1, nodeRanks = 1;
  MPI_Comm_size(comm, &ranks);
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &nodeRanks);
  MPI_Comm_free(&node);
  const long pages = ::sysconf(_SC_PHYS_PAGES), pageBytes = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || pageBytes <= 0) return {};  // memory unknown: nothing to check against
  double memory = static_cast<double>(pages) * static_cast<double>(pageBytes);
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    memory = std::min(memory, static_cast<double>(limit.rlim_cur) * nodeRanks);
  const double perRank = memory / nodeRanks;
  const std::int64_t chipsPerRank = (cluster.chipCount() + ranks - 1) / ranks;
  const double need = static_cast<double>(chipsPerRank) *
                      static_cast<double>(sim::chipStateBytes(cluster.chip(), cluster.chip().c2cPorts, options));
  if (need <= perRank / 2) return {};
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return configError({configFile, 0, 0, ""},
                     fmt::format("the cluster's {} chips need {:.1f} GiB of simulation state on each of {} rank(s) "
                                 "({} chips each), more than half of the {:.1f} GiB of memory each rank has: run on "
                                 "more ranks or nodes, or simulate a smaller cluster",
                                 cluster.chipCount(), need / kGiB, ranks, chipsPerRank, perRank / kGiB));
}

ParallelSimulation::ParallelSimulation(MPI_Comm comm, const topology::Cluster& cluster,
                                       const std::vector<std::shared_ptr<const isa::Program>>& programs,
                                       RankMapping mapping, const sim::SimOptions& options)
    : comm_(comm), chipCount_(cluster.chipCount()), mapping_(std::move(mapping)) {
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
  next_.resize(chips_.size());
  for (size_t i = 0; i < chips_.size(); ++i) nextLocal_ = std::min(nextLocal_, next_[i] = chips_[i]->nextEventCycle());
  crossSends_.resize(chips_.size());

  // A burst issued at cycle t arrives no earlier than t + send latency + link latency: that is
  // how far a chip may run ahead of the chips that can send to it.
  Cycle cross = sim::kNever, inner = sim::kNever;
  std::vector<char> isNeighbour(ranks_, 0);
  for (const auto& link : cluster.links()) {
    // A burst leaves a send after c2c.send_cycles and a transit chip's forward after c2c.forward_cycles.
    const Cycle burst = std::min(spec.c2cSendCycles, spec.c2cForwardCycles) + std::max<Cycle>(1, link.latencyCycles);
    const int ra = mapping_.owner[link.a], rb = mapping_.owner[link.b];
    if (ra != rb) cross = std::min(cross, burst);
    if (ra == rank_ && rb == rank_) inner = std::min(inner, burst);
    if (ra == rank_ && rb != rank_) isNeighbour[rb] = 1;
    if (rb == rank_ && ra != rank_) isNeighbour[ra] = 1;
  }
  window_ = std::max<Cycle>(1, std::min(cross, kMaxWindowCycles));
  inner_ = std::max<Cycle>(1, std::min(inner, window_));
  neighbourIndex_.assign(ranks_, -1);
  for (int r = 0; r < ranks_; ++r)
    if (isNeighbour[r]) {
      neighbourIndex_[r] = static_cast<int>(neighbours_.size());
      neighbours_.push_back(r);
    }
  toNeighbour_.resize(neighbours_.size());
  // The schedule is static: the issue cycles of the sends that will cross ranks are known now.
  for (size_t i = 0; i < chips_.size(); ++i) {
    const int chip = mapping_.localChips[i];
    const isa::InstructionSequence list(*programs[chip]);
    for (size_t k = 0; k < list.size(); ++k) {
      const isa::Instruction inst = list[k];
      if (inst.op != isa::Opcode::kC2cSend && inst.op != isa::Opcode::kC2cForward) continue;
      const int linkId = inst.port >= 0 ? cluster.linkAt(chip, inst.port) : -1;
      if (linkId >= 0 && mapping_.owner[cluster.links()[linkId].other(chip)] != rank_)
        crossSends_[i].push_back(inst.issue);
    }
    std::sort(crossSends_[i].begin(), crossSends_[i].end());
  }
  exactDeadlines_ = !options.faults.enabled();
  if (exactDeadlines_) buildInboundLinks(cluster, programs);
  if (ranks_ > 1) {
    // Links are symmetric, so the neighbour lists are: sources and destinations are the same ranks.
    const int n = static_cast<int>(neighbours_.size());
    MPI_Dist_graph_create_adjacent(comm_, n, neighbours_.data(), MPI_UNWEIGHTED, n, neighbours_.data(),
                                   MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &neighbourComm_);
  }
}

ParallelSimulation::~ParallelSimulation() {
  if (neighbourComm_ != MPI_COMM_NULL) MPI_Comm_free(&neighbourComm_);
}

Cycle ParallelSimulation::nextCrossSend(Cycle from) const {
  Cycle next = sim::kNever;
  for (const auto& issues : crossSends_) {
    auto it = std::lower_bound(issues.begin(), issues.end(), from);
    if (it != issues.end()) next = std::min(next, *it);
  }
  return next;
}

void ParallelSimulation::buildInboundLinks(const topology::Cluster& cluster,
                                           const std::vector<std::shared_ptr<const isa::Program>>& programs) {
  const auto units = cluster.chip().units();
  for (int chip : mapping_.localChips)
    for (const auto& [port, linkId] : cluster.linksOf(chip)) {
      const auto& link = cluster.links()[linkId];
      const int peer = link.other(chip), peerPort = link.portOn(peer);
      if (mapping_.owner[peer] == rank_) continue;
      // Bursts leave the peer's port one after another (a link carries one at a time) and arrive in
      // that order; this chip reads them in order by its receives and forwards on `port`.
      std::vector<LinkUse> sends, reads;
      const isa::InstructionSequence peerList(*programs[peer]), list(*programs[chip]);
      for (size_t k = 0; k < peerList.size(); ++k)
        if (const isa::Instruction inst = peerList[k];
            (inst.op == isa::Opcode::kC2cSend || inst.op == isa::Opcode::kC2cForward) && inst.port == peerPort)
          sends.push_back({inst.issue, inst.repeat});
      for (size_t k = 0; k < list.size(); ++k) {
        const isa::Instruction inst = list[k];
        const bool forwardFrom = inst.op == isa::Opcode::kC2cForward && inst.unit >= 0 &&
                                 inst.unit < static_cast<int>(units.size()) && units[inst.unit].indexInKind == port;
        if ((inst.op == isa::Opcode::kC2cReceive && inst.port == port) || forwardFrom)
          reads.push_back({inst.issue, inst.repeat});
      }
      if (sends.empty()) continue;
      auto byIssue = [](const LinkUse& a, const LinkUse& b) { return a.issue < b.issue; };
      std::stable_sort(sends.begin(), sends.end(), byIssue);
      std::stable_sort(reads.begin(), reads.end(), byIssue);
      InboundLink in;
      for (const auto& send : sends) in.sendIssue.push_back(send.issue);
      in.readFrom = readDeadlines(sends, reads);
      inboundLinks_.push_back(std::move(in));
    }
}

Cycle ParallelSimulation::crossDeadline(Cycle from) const {
  if (!exactDeadlines_) return saturatingAdd(nextCrossSend(from), window_);
  Cycle deadline = sim::kNever;
  for (const auto& in : inboundLinks_) {
    auto it = std::lower_bound(in.sendIssue.begin(), in.sendIssue.end(), from);
    if (it != in.sendIssue.end()) deadline = std::min(deadline, in.readFrom[it - in.sendIssue.begin()]);
  }
  return deadline;
}

Cycle ParallelSimulation::windowEnd(Cycle start, Cycle deadline) const {
  // Nothing sent to another rank from `start` on is read before `deadline`; the window still ends
  // within kMaxWindowCycles (unless the latency is longer) so that signals are seen in time.
  return std::max(saturatingAdd(start, window_), std::min(deadline, saturatingAdd(start, kMaxWindowCycles)));
}

Cycle ParallelSimulation::nextLocalEvent() const { return nextLocal_; }

void ParallelSimulation::advanceLocal(Cycle windowStart, Cycle windowEnd, const WindowHooks& hooks,
                                      std::int64_t& events) {
  std::vector<sim::C2CBurst> local;
  Cycle start = std::max(windowStart, nextLocal_);
  while (start < windowEnd) {
    const Cycle end = std::min(windowEnd, saturatingAdd(start, inner_));
    // Only the chips with an event before `end` run, in chip order; the next events are cached.
    Cycle earliest = sim::kNever;
    for (size_t i = 0; i < chips_.size(); ++i) {
      if (next_[i] >= end) {
        earliest = std::min(earliest, next_[i]);
        continue;
      }
      const std::int64_t before = chips_[i]->instructionsExecuted();
      if (auto s = chips_[i]->advanceTo(end); !s) {
        // Chips keep running to the window's end so that the first failure in (cycle, chip)
        // order is found whatever the mapping; a failed chip stops where it failed.
        const Cycle issue = chips_[i]->nextEventCycle();
        const int chip = mapping_.localChips[i];
        if (!failure_ || std::pair(issue, chip) < std::pair(failure_->issue, failure_->who))
          failure_ = Failure{issue, chip, s.error()};
        next_[i] = sim::kNever;
      } else {
        next_[i] = chips_[i]->nextEventCycle();  // it moves only when the chip runs, not on a delivery
      }
      earliest = std::min(earliest, next_[i]);
      events += chips_[i]->instructionsExecuted() - before;
      auto sent = chips_[i]->takeOutgoing();
      if (sent.empty()) continue;
      if (hooks.sent) hooks.sent(sent);
      for (const auto& burst : sent) {
        if (localIndex_[burst.dstChip] >= 0) local.push_back(burst);
        else toNeighbour_[neighbourIndex_[mapping_.owner[burst.dstChip]]].push_back(burst);
      }
    }
    std::sort(local.begin(), local.end());  // (arrive, src chip, link, send cycle): rank-independent
    for (const auto& burst : local) chips_[localIndex_[burst.dstChip]]->deliver(burst);
    local.clear();
    nextLocal_ = earliest;
    start = std::max(end, earliest);
  }
}

namespace {

// A burst as it crosses ranks: the timing fields, then payloadBytes bytes of vectors (functional mode).
struct WireBurst {
  int srcChip, srcPort, dstChip, dstPort, link, vectors, interval;
  Cycle sendCycle, firstArrive;
  double spacing;
  std::int64_t streamFrom;
  Bytes bytes;
  std::uint64_t tensor;
  std::int64_t payloadBytes;
};

void packBurst(const sim::C2CBurst& b, std::vector<char>& out) {
  const WireBurst w{b.srcChip, b.srcPort,   b.dstChip, b.dstPort, b.link, b.vectors, b.interval,
                    b.sendCycle, b.firstArrive, b.spacing, b.streamFrom, b.bytes, b.tensor,
                    b.payload ? static_cast<std::int64_t>(b.payload->size()) : std::int64_t{-1}};
  const char* head = reinterpret_cast<const char*>(&w);
  out.insert(out.end(), head, head + sizeof w);
  if (b.payload) out.insert(out.end(), b.payload->begin(), b.payload->end());
}

// Reads the bursts packed in [data, data + size).
void unpackBursts(const char* data, size_t size, std::vector<sim::C2CBurst>& out) {
  size_t at = 0;
  while (at + sizeof(WireBurst) <= size) {
    WireBurst w;
    std::memcpy(&w, data + at, sizeof w);
    at += sizeof w;
    sim::C2CBurst b;
    b.srcChip = w.srcChip;
    b.srcPort = w.srcPort;
    b.dstChip = w.dstChip;
    b.dstPort = w.dstPort;
    b.link = w.link;
    b.vectors = w.vectors;
    b.interval = w.interval;
    b.sendCycle = w.sendCycle;
    b.firstArrive = w.firstArrive;
    b.spacing = w.spacing;
    b.streamFrom = w.streamFrom;
    b.bytes = w.bytes;
    b.tensor = w.tensor;
    if (w.payloadBytes >= 0) {
      b.payload = std::make_shared<const std::vector<std::uint8_t>>(data + at, data + at + w.payloadBytes);
      at += static_cast<size_t>(w.payloadBytes);
    }
    out.push_back(std::move(b));
  }
}

}  // namespace

void ParallelSimulation::exchange(std::vector<sim::C2CBurst>& arrived) {
  if (neighbourComm_ == MPI_COMM_NULL) return;
  const size_t n = neighbours_.size();
  // Neighbourhood collectives: byte counts, then the packed bursts, with the linked ranks only.
  std::vector<int> sendCounts(n + 1, 0), recvCounts(n + 1, 0), sendOffsets(n + 1, 0), recvOffsets(n + 1, 0);
  std::vector<char> outgoing;
  for (size_t i = 0; i < n; ++i) {
    sendOffsets[i] = static_cast<int>(outgoing.size());
    for (const auto& burst : toNeighbour_[i]) packBurst(burst, outgoing);
    sendCounts[i] = static_cast<int>(outgoing.size()) - sendOffsets[i];
    toNeighbour_[i].clear();
  }
  MPI_Neighbor_alltoall(sendCounts.data(), 1, MPI_INT, recvCounts.data(), 1, MPI_INT, neighbourComm_);
  int total = 0;
  for (size_t i = 0; i < n; ++i) {
    recvOffsets[i] = total;
    total += recvCounts[i];
  }
  std::vector<char> incoming(static_cast<size_t>(total) + 1);
  outgoing.resize(outgoing.size() + 1);  // never an empty buffer
  MPI_Neighbor_alltoallv(outgoing.data(), sendCounts.data(), sendOffsets.data(), MPI_BYTE, incoming.data(),
                         recvCounts.data(), recvOffsets.data(), MPI_BYTE, neighbourComm_);
  for (size_t i = 0; i < n; ++i) unpackBursts(incoming.data() + recvOffsets[i], static_cast<size_t>(recvCounts[i]), arrived);
}

Expected<SimulationOutcome> ParallelSimulation::run(const volatile std::sig_atomic_t* interrupt,
                                                    const WindowHooks& hooks, bool& reportHere) {
  SimulationOutcome outcome;
  long first[2] = {nextLocalEvent(), crossDeadline(0)};
  MPI_Allreduce(MPI_IN_PLACE, first, 2, MPI_LONG, MPI_MIN, comm_);
  Cycle windowStart = first[0] == sim::kNever ? 0 : first[0];
  Cycle deadline = first[1];
  bool done = first[0] == sim::kNever;
  std::vector<sim::C2CBurst> arrived;
  while (!done) {
    const Cycle windowEnd = this->windowEnd(windowStart, deadline);
    advanceLocal(windowStart, windowEnd, hooks, outcome.events);
    const bool sending = std::any_of(toNeighbour_.begin(), toNeighbour_.end(), [](const auto& v) { return !v.empty(); });

    // The one agreement of the window: next event (deliveries cannot change it: it is the next
    // instruction's issue), first failure, stop, flush, progress, and whether any burst crosses ranks.
    LongInt agreed[7] = {
        {nextLocalEvent(), 0},
        failure_ ? LongInt{failure_->issue, failure_->who * kCodeSlots + static_cast<int>(failure_->diagnostic.code)}
                 : LongInt{sim::kNever, INT_MAX},
        {*interrupt ? 0 : 1, 0},
        {hooks.wantsFlush && hooks.wantsFlush() ? 0 : 1, 0},
        {rank_ == 0 && hooks.progressDue && hooks.progressDue() ? 0 : 1, 0},
        {sending ? 0 : 1, 0},
        {crossDeadline(windowEnd), 0}};
    const LongInt mine = agreed[1];
    MPI_Allreduce(MPI_IN_PLACE, agreed, 7, MPI_LONG_INT, MPI_MINLOC, comm_);
    deadline = agreed[6].value;
    ++outcome.windows;
    outcome.reachedCycle = windowEnd;
    if (agreed[1].index != INT_MAX) {
      reportHere = failure_ && mine.value == agreed[1].value && mine.index == agreed[1].index;
      if (reportHere) return failure_->diagnostic;
      return makeError(static_cast<ExitCode>(agreed[1].index % kCodeSlots), "failed on another rank");
    }
    if (agreed[5].value == 0) {
      // Most windows of a sparse run send nothing between ranks: they skip the exchange.
      exchange(arrived);
      std::sort(arrived.begin(), arrived.end());
      for (const auto& burst : arrived) chips_[localIndex_[burst.dstChip]]->deliver(burst);
      arrived.clear();
    }
    if (agreed[3].value == 0 && hooks.flush) {
      // A failed write (a full disk) may leave other ranks inside HDF5's collectives: no agreement
      // can follow it. The rank that saw it reports, and its exit 5 aborts the job.
      if (const Status flushed = hooks.flush(); !flushed) {
        reportHere = true;
        return flushed.error();
      }
    }
    if (agreed[2].value == 0) {
      outcome.interrupted = true;
      return outcome;
    }
    if (agreed[4].value == 0) {
      long long events = outcome.events, total = 0;
      MPI_Reduce(&events, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, comm_);
      if (rank_ == 0 && hooks.progress) hooks.progress({windowEnd, outcome.windows, total});
    }
    if (agreed[0].value == sim::kNever) break;
    windowStart = std::max(windowEnd, static_cast<Cycle>(agreed[0].value));
  }
  // Chips without a program never ran their finish step: advancing past the end does it.
  for (auto& chip : chips_) (void)chip->advanceTo(sim::kNever);
  outcome.reachedCycle = sim::kNever;
  return outcome;
}

}  // namespace tsp::runtime
