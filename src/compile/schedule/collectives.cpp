// Collectives: algorithms unrolled into steps, then scheduled on routes and lowered to C2C chains.
#include "compile/schedule/collectives.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>

namespace tsp::schedule {

using isa::Direction;
using isa::Instruction;
using isa::Opcode;
using topology::UnitKind;

const char* collectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "allreduce";
    case CollectiveOp::kAllGather: return "allgather";
    case CollectiveOp::kReduceScatter: return "reducescatter";
    case CollectiveOp::kAllToAll: return "alltoall";
    case CollectiveOp::kBroadcast: return "broadcast";
  }
  return "?";
}

const char* collectiveAlgorithmName(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::kAuto: return "auto";
    case CollectiveAlgorithm::kRing: return "ring";
    case CollectiveAlgorithm::kTree: return "tree";
    case CollectiveAlgorithm::kHalvingDoubling: return "halving-doubling";
    case CollectiveAlgorithm::kHierarchical: return "hierarchical";
  }
  return "?";
}

Expected<CollectiveOp> parseCollectiveOp(const std::string& text) {
  for (auto op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter,
                  CollectiveOp::kAllToAll, CollectiveOp::kBroadcast})
    if (text == collectiveOpName(op)) return op;
  return makeError(ExitCode::kModel, fmt::format("unknown collective '{}'", text));
}

double busBandwidthFactor(CollectiveOp op, int n) {
  const double p = n;
  switch (op) {
    case CollectiveOp::kAllReduce: return 2 * (p - 1) / p;
    case CollectiveOp::kAllGather: case CollectiveOp::kReduceScatter: case CollectiveOp::kAllToAll: return (p - 1) / p;
    case CollectiveOp::kBroadcast: return 1;
  }
  return 1;
}

double alphaBetaCycles(CollectiveOp op, int p, double bytes, double alpha, double beta) {
  const double steps = p - 1, share = (p - 1.0) / p;
  if (op == CollectiveOp::kAllReduce) return 2 * steps * alpha + 2 * share * bytes * beta;
  return steps * alpha + share * bytes * beta;
}

Cycle ringTurnaroundCycles(const topology::ChipSpec& chip, bool reduce) {
  // Send: MEM read -> C2C send; receive: C2C receive -> (VXM add) -> MEM write; the next step's
  // read waits for the write. Slice distances are those of the nearest free MEM slices to the port.
  Cycle t = chip.memReadCycles + chip.c2cSendCycles + chip.c2cReceiveCycles + chip.memWriteCycles;
  if (reduce) t += chip.vxmCycles;
  return t;
}

namespace {

bool isPowerOfTwo(size_t n) { return n > 0 && (n & (n - 1)) == 0; }

// Messages of p-1 ring steps run on every ring of `rings` at once.
void addRingSteps(std::vector<std::vector<CollectiveMessage>>& steps, const std::vector<std::vector<int>>& rings,
                  std::int64_t vectors, bool reduce, bool shrinking = false) {
  size_t longest = 0;
  for (const auto& r : rings) longest = std::max(longest, r.size());
  for (size_t s = 1; s < longest; ++s) {
    std::vector<CollectiveMessage> step;
    for (const auto& ring : rings) {
      const size_t p = ring.size();
      if (s >= p) continue;
      for (size_t i = 0; i < p; ++i)
        step.push_back({ring[i], ring[(i + 1) % p], shrinking ? vectors * static_cast<std::int64_t>(p - s) : vectors, reduce});
    }
    steps.push_back(std::move(step));
  }
}

// Binomial tree on every group at once: reduce `vectors` to group[0] (when `reduce`), then broadcast them.
void addTreeSteps(std::vector<std::vector<CollectiveMessage>>& steps, const std::vector<std::vector<int>>& groups,
                  std::int64_t vectors, bool reduce) {
  const std::int64_t p = static_cast<std::int64_t>(groups.front().size());
  int levels = 0;
  while ((std::int64_t{1} << levels) < p) ++levels;
  for (int k = 0; reduce && k < levels; ++k) {
    std::vector<CollectiveMessage> step;
    const std::int64_t span = std::int64_t{1} << k;
    for (const auto& g : groups)
      for (std::int64_t i = span; i < p; i += 2 * span) step.push_back({g[i], g[i - span], vectors, true});
    steps.push_back(std::move(step));
  }
  for (int k = levels; k-- > 0;) {
    std::vector<CollectiveMessage> step;
    const std::int64_t span = std::int64_t{1} << k;
    for (const auto& g : groups)
      for (std::int64_t i = span; i < p; i += 2 * span) step.push_back({g[i - span], g[i], vectors, false});
    steps.push_back(std::move(step));
  }
}

// The top level of a hierarchical all-reduce spans groups of racks whose ring steps cross multi-hop
// routes that every group uses at once, so a ring step costs far more than its alpha-beta time: on the
// 10,440-chip system a tree beats the ring up to a few vectors per ring step and loses from about 20
// (docs/validation.md). Below this chunk the top level runs a binomial tree.
constexpr std::int64_t kTopRingMinChunkVectors = 8;

bool topLevelPrefersTree(std::int64_t groupSize, std::int64_t share) {
  return groupSize >= 4 && ceilDiv(share, groupSize) < kTopRingMinChunkVectors;
}

}  // namespace

// Groups up to this size get their ring shortened by 2-opt moves (n^3 hop sums per pass).
constexpr size_t kRingOrderMaxChips = 64;
// Groups up to this size get the shortest ring (2^n n^2 steps).
constexpr size_t kRingOrderExactChips = 12;

std::vector<int> ringOrder(const topology::Cluster& cluster, std::vector<int> chips) {
  std::sort(chips.begin(), chips.end());
  const auto& d = cluster.description();
  if ((d.kind == "torus" || d.kind == "mesh") && d.dims.size() == 2 &&
      static_cast<int>(chips.size()) == cluster.chipCount() && d.dims[0] % 2 == 0) {
    // Snake order: rows alternate direction, so consecutive chips are neighbours and the last row ends beside the first.
    std::vector<int> order;
    const int rows = d.dims[0], cols = d.dims[1];
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) order.push_back(r * cols + (r % 2 == 0 ? c : cols - 1 - c));
    if (d.kind == "torus" || cols == 1) return order;
    // On a mesh the snake's end is not beside its start: go down column 0 instead.
    order.clear();
    for (int r = 0; r < rows; ++r) order.push_back(r * cols);
    for (int r = rows; r-- > 0;)
      for (int c = 1; c < cols; ++c) order.push_back(r * cols + ((rows - 1 - r) % 2 == 0 ? c : cols - c));
    return order;
  }
  // Elsewhere (a group inside a larger cluster, a dragonfly's nodes): chip order, then 2-opt moves
  // while one shortens the ring's hops, so that a ring over two nodes crosses on direct links.
  const size_t n = chips.size();
  if (n < 4 || n > kRingOrderMaxChips) return chips;
  std::vector<std::vector<int>> hops(n, std::vector<int>(n, 0));
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b)
      if (a != b) hops[a][b] = static_cast<int>(cluster.route(chips[a], chips[b]).size());
  std::vector<size_t> ring(n);
  for (size_t i = 0; i < n; ++i) ring[i] = i;
  if (n <= kRingOrderExactChips) {
    // Small groups: the shortest ring exactly (Held-Karp over subsets, paths from chip 0; ties to
    // the lower index), which 2-opt can miss (two nodes' crossings need two moves at once).
    const size_t full = (size_t{1} << n) - 1;
    constexpr int kFar = 1 << 29;
    std::vector<std::vector<int>> cost(full + 1, std::vector<int>(n, kFar));
    std::vector<std::vector<int>> from(full + 1, std::vector<int>(n, -1));
    cost[1][0] = 0;
    for (size_t mask = 1; mask <= full; mask += 2)
      for (size_t last = 0; last < n; ++last) {
        if (cost[mask][last] >= kFar) continue;
        for (size_t next = 1; next < n; ++next) {
          if (mask >> next & 1) continue;
          const size_t to = mask | size_t{1} << next;
          const int c = cost[mask][last] + hops[last][next];
          if (c < cost[to][next]) {
            cost[to][next] = c;
            from[to][next] = static_cast<int>(last);
          }
        }
      }
    size_t last = 1;
    for (size_t l = 1; l < n; ++l)
      if (cost[full][l] + hops[l][0] < cost[full][last] + hops[last][0]) last = l;
    int inOrder = 0;  // chip order is kept unless a ring is strictly shorter
    for (size_t i = 0; i < n; ++i) inOrder += hops[i][(i + 1) % n];
    for (size_t mask = full, at = last, i = n; inOrder > cost[full][last] + hops[last][0] && i-- > 0;) {
      ring[i] = at;
      const int prev = from[mask][at];
      mask &= ~(size_t{1} << at);
      at = prev < 0 ? 0 : static_cast<size_t>(prev);
    }
  }
  auto length = [&](const std::vector<size_t>& r) {
    int total = 0;
    for (size_t i = 0; i < n; ++i) total += hops[r[i]][r[(i + 1) % n]];
    return total;
  };
  for (int best = length(ring), improved = 1; improved;) {
    improved = 0;
    for (size_t i = 1; i + 1 < n && !improved; ++i)
      for (size_t j = i + 1; j < n && !improved; ++j) {
        std::vector<size_t> moved = ring;
        std::reverse(moved.begin() + static_cast<std::ptrdiff_t>(i), moved.begin() + static_cast<std::ptrdiff_t>(j) + 1);
        if (const int l = length(moved); l < best) {
          best = l;
          ring = std::move(moved);
          improved = 1;
        }
      }
  }
  std::vector<int> order;
  for (size_t i : ring) order.push_back(chips[i]);
  return order;
}

std::vector<int> groupRing(const topology::Cluster& cluster, const std::vector<int>& chips) {
  auto hops = [&](const std::vector<int>& ring) {
    std::size_t total = 0;
    for (size_t i = 0; i < ring.size(); ++i) total += cluster.route(ring[i], ring[(i + 1) % ring.size()]).size();
    return total;
  };
  auto shortest = ringOrder(cluster, chips);
  return hops(chips) <= hops(shortest) ? chips : shortest;
}

CollectiveAlgorithm chooseAlgorithm(CollectiveOp op, const std::vector<int>& group, std::int64_t bytes,
                                    const topology::Cluster& cluster) {
  const auto& d = cluster.description();
  const bool reduceLike = op == CollectiveOp::kAllReduce || op == CollectiveOp::kBroadcast;
  if (bytes < (64 << 10) && reduceLike && group.size() > 2) {
    if (d.kind == "fully-connected" && isPowerOfTwo(group.size()) && op == CollectiveOp::kAllReduce)
      return CollectiveAlgorithm::kHalvingDoubling;
    return CollectiveAlgorithm::kTree;
  }
  if (d.kind == "dragonfly" && static_cast<int>(group.size()) > d.chipsPerNode &&
      static_cast<int>(group.size()) % d.chipsPerNode == 0 && op != CollectiveOp::kAllToAll &&
      op != CollectiveOp::kBroadcast)
    return CollectiveAlgorithm::kHierarchical;
  return CollectiveAlgorithm::kRing;
}

Expected<CollectivePlan> planCollective(CollectiveOp op, CollectiveAlgorithm algorithm, const std::vector<int>& group,
                                        std::int64_t bytes, const topology::Cluster& cluster, bool keepOrder) {
  if (group.empty()) return makeError(ExitCode::kConfig, "a collective needs at least one chip");
  for (int c : group)
    if (c < 0 || c >= cluster.chipCount())
      return makeError(ExitCode::kConfig, fmt::format("collective chip {} is not in the cluster of {} chips", c,
                                                      cluster.chipCount()));
  if (bytes < 1) return makeError(ExitCode::kModel, "a collective needs at least one byte");
  CollectivePlan plan;
  plan.op = op;
  plan.algorithm = algorithm == CollectiveAlgorithm::kAuto ? chooseAlgorithm(op, group, bytes, cluster) : algorithm;
  const auto p = static_cast<std::int64_t>(group.size());
  const std::int64_t vb = cluster.chip().vectorBytes;
  const std::int64_t chunk = ceilDiv(ceilDiv(bytes, vb), p);  // vectors of one n/p chunk
  // Rings and halving-doubling move n/p chunks, so n is rounded up to p whole chunks; a tree moves n
  // whole and a hierarchical algorithm rounds at each level (p = 10,440 would otherwise triple 1 MiB).
  const bool whole = plan.algorithm == CollectiveAlgorithm::kTree || plan.algorithm == CollectiveAlgorithm::kHierarchical;
  plan.vectorsPerChip = whole ? ceilDiv(bytes, vb) : chunk * p;
  plan.group = plan.algorithm == CollectiveAlgorithm::kRing && !keepOrder ? ringOrder(cluster, group) : group;
  if (plan.algorithm == CollectiveAlgorithm::kHalvingDoubling && !isPowerOfTwo(group.size()))
    return makeError(ExitCode::kConfig, fmt::format("halving-doubling needs a power-of-two group, not {}", p));
  if (plan.algorithm == CollectiveAlgorithm::kHierarchical &&
      (cluster.description().kind != "dragonfly" || p % cluster.description().chipsPerNode != 0))
    return makeError(ExitCode::kConfig, "the hierarchical algorithm needs whole dragonfly nodes");
  if (p == 1) return plan;
  const auto& g = plan.group;
  auto& steps = plan.steps;
  const std::int64_t all = plan.vectorsPerChip;

  switch (plan.algorithm) {
    case CollectiveAlgorithm::kAuto:
    case CollectiveAlgorithm::kRing:
      switch (op) {
        case CollectiveOp::kAllReduce:
          addRingSteps(steps, {g}, chunk, true);
          addRingSteps(steps, {g}, chunk, false);
          break;
        case CollectiveOp::kReduceScatter: addRingSteps(steps, {g}, chunk, true); break;
        case CollectiveOp::kAllGather: addRingSteps(steps, {g}, chunk, false); break;
        case CollectiveOp::kAllToAll: addRingSteps(steps, {g}, chunk, false, true); break;
        case CollectiveOp::kBroadcast:
          // Pipelined chain from g[0]: chunk c leaves position i at step c + i.
          for (std::int64_t s = 0; s < 2 * p - 2; ++s) {
            std::vector<CollectiveMessage> step;
            for (std::int64_t i = 0; i + 1 < p; ++i)
              if (s - i >= 0 && s - i < p) step.push_back({g[i], g[i + 1], chunk, false});
            steps.push_back(std::move(step));
          }
          break;
      }
      break;
    case CollectiveAlgorithm::kTree:
      // Binomial tree rooted at g[0]: reduce up (all-reduce only), then broadcast down.
      if (op != CollectiveOp::kAllReduce && op != CollectiveOp::kBroadcast)
        return makeError(ExitCode::kConfig, fmt::format("the tree algorithm runs all-reduce and broadcast, not {}",
                                                        collectiveOpName(op)));
      addTreeSteps(steps, {g}, all, op == CollectiveOp::kAllReduce);
      break;
    case CollectiveAlgorithm::kHalvingDoubling: {
      if (op != CollectiveOp::kAllReduce && op != CollectiveOp::kReduceScatter && op != CollectiveOp::kAllGather)
        return makeError(ExitCode::kConfig, "halving-doubling runs all-reduce, reduce-scatter and all-gather");
      std::vector<std::int64_t> sizes;
      for (std::int64_t half = p / 2, v = all / 2; half >= 1; half /= 2, v /= 2) sizes.push_back(v);
      auto exchange = [&](std::int64_t distance, std::int64_t vectors, bool reduce) {
        std::vector<CollectiveMessage> step;
        for (std::int64_t i = 0; i < p; ++i) step.push_back({g[i], g[i ^ distance], vectors, reduce});
        steps.push_back(std::move(step));
      };
      if (op != CollectiveOp::kAllGather)
        for (std::int64_t d = p / 2, k = 0; d >= 1; d /= 2, ++k) exchange(d, sizes[k], true);
      if (op != CollectiveOp::kReduceScatter)
        for (std::int64_t d = 1, k = static_cast<std::int64_t>(sizes.size()) - 1; d < p; d *= 2, --k) exchange(d, sizes[k], false);
      break;
    }
    case CollectiveAlgorithm::kHierarchical: {
      // Node, rack and system levels: reduce-scatter up the levels, one ring at the top, gather down.
      const auto& d = cluster.description();
      std::vector<std::int64_t> levels = {d.chipsPerNode};
      const std::int64_t nodes = p / d.chipsPerNode;
      if (nodes > d.nodesPerRack && nodes % d.nodesPerRack == 0) levels.push_back(d.nodesPerRack);
      std::int64_t rest = p;
      for (auto l : levels) rest /= l;
      if (rest > 1) levels.push_back(rest);
      // Rings of level k: chips that differ only in the level-k digit of their position.
      auto ringsOf = [&](size_t k) {
        std::int64_t stride = 1;
        for (size_t j = 0; j < k; ++j) stride *= levels[j];
        std::vector<std::vector<int>> rings;
        for (std::int64_t base = 0; base < p; ++base) {
          if ((base / stride) % levels[k] != 0) continue;
          std::vector<int> ring;
          for (std::int64_t i = 0; i < levels[k]; ++i) ring.push_back(g[base + i * stride]);
          rings.push_back(ring);
        }
        return rings;
      };
      std::int64_t share = all;
      std::vector<std::int64_t> chunkAt;
      const bool reduces = op != CollectiveOp::kAllGather;
      const bool gathers = op != CollectiveOp::kReduceScatter;
      for (size_t k = 0; k + 1 < levels.size(); ++k) {
        const std::int64_t c = ceilDiv(share, levels[k]);
        chunkAt.push_back(c);
        if (reduces) addRingSteps(steps, ringsOf(k), c, true);
        share = c;
      }
      const std::int64_t top = ceilDiv(share, levels.back());
      const auto topGroups = ringsOf(levels.size() - 1);
      if (op == CollectiveOp::kAllReduce && topLevelPrefersTree(levels.back(), share)) {
        // Few vectors over many groups: a binomial tree's 2 log2(P) steps beat the ring's 2(P-1) alphas.
        addTreeSteps(steps, topGroups, share, true);
      } else {
        if (reduces) addRingSteps(steps, topGroups, top, true);
        if (gathers) addRingSteps(steps, topGroups, top, false);
      }
      for (size_t k = levels.size() - 1; k-- > 0;)
        if (gathers) addRingSteps(steps, ringsOf(k), chunkAt[k], false);
      break;
    }
  }
  return plan;
}

namespace {

constexpr std::int64_t kMaxBurstVectors = 4096;

// One chip's units, streams, ports and SRAM as the collective's chains are placed on it.
class ChipChains {
 public:
  /// Every unit, stream and port of the chip is free from `start` on (what it ran before has completed);
  /// `specHash` is chip.hash(), computed once by the caller.
  ChipChains(const topology::ChipSpec& chip, std::uint64_t specHash, Cycle start)
      : chip_(chip), units_(chip.units()), unitFree_(units_.size(), start), linkFree_(chip.c2cPorts, start),
        nextAddress_(chip.memSlices, 0) {
    for (auto& s : streamFree_) s.assign(chip.streamsPerDirection, start);
    program_.chipSpecHash = specHash;
  }

  /// Places MEM read -> C2C send at the earliest cycle >= earliest; returns the send's issue.
  Cycle send(int port, std::int64_t vectors, int interval, Cycle earliest, bool commit) {
    const int c2c = chip_.firstUnit(UnitKind::kC2c) + port;
    Cycle best = -1;
    int bestMem = -1;
    // The earliest free stream of each direction, the same for every slice that reads in it.
    const Cycle streamFree[2] = {freeStream(Direction::kEast).second, freeStream(Direction::kWest).second};
    const int memFirst = chip_.firstUnit(UnitKind::kMem);
    for (int m = 0; m < chip_.memSlices; ++m) {
      const int mem = memFirst + m;
      const Cycle delta = chip_.memReadCycles + distance(mem, c2c);
      const Direction dir = direction(mem, c2c);
      Cycle read = std::max({earliest, unitFree_[mem], unitFree_[c2c] - delta, linkFree_[port] - delta,
                             streamFree[static_cast<int>(dir)] - chip_.memReadCycles});
      if (best < 0 || read + delta < best) {
        best = read + delta;
        bestMem = mem;
      }
    }
    if (!commit) return best;
    const Cycle delta = chip_.memReadCycles + distance(bestMem, c2c);
    const Cycle readIssue = best - delta;
    const auto [stream, free] = freeStream(direction(bestMem, c2c));
    (void)free;
    Instruction read = make(bestMem, Opcode::kMemRead, readIssue, vectors, interval);
    read.address = allocate(bestMem, vectors);
    read.bank = chip_.bankOf(read.address);
    read.stride = 1;
    read.dst = {static_cast<std::int16_t>(stream), direction(bestMem, c2c)};
    Instruction out = make(c2c, Opcode::kC2cSend, best, vectors, interval);
    out.port = port;
    out.src = read.dst;
    occupyStream(read, distance(bestMem, c2c));
    linkFree_[port] = best + Cycle{vectors - 1} * interval + interval;
    push(read);
    push(out);
    return best;
  }

  /// Places C2C receive -> (VXM add with a MEM read) -> MEM write for vectors arriving from
  /// `arrive`; returns the completion of the write.
  Cycle receive(int port, std::int64_t vectors, int interval, Cycle arrive, bool reduce) {
    const int c2c = chip_.firstUnit(UnitKind::kC2c) + port;
    const int memFirst = chip_.firstUnit(UnitKind::kMem);
    // The two least busy MEM slices (lowest index on ties) for the write and the operand read.
    int write = -1, operand = -1;
    for (int u = memFirst; u < memFirst + chip_.memSlices; ++u) {
      if (write < 0 || unitFree_[u] < unitFree_[write]) {
        operand = write;
        write = u;
      } else if (operand < 0 || unitFree_[u] < unitFree_[operand]) {
        operand = u;
      }
    }
    const int vxmFirst = chip_.firstUnit(UnitKind::kVxm);
    int vxm = vxmFirst;
    for (int u = vxmFirst; u < vxmFirst + chip_.vxmAluGroups; ++u)
      if (unitFree_[u] < unitFree_[vxm]) vxm = u;
    const int target = reduce ? vxm : write;
    const Cycle toTarget = chip_.c2cReceiveCycles + distance(c2c, target);
    const auto [s1, f1] = freeStream(direction(c2c, target));
    Cycle start = std::max({arrive, unitFree_[c2c], f1 - chip_.c2cReceiveCycles});
    if (!reduce) {
      start = std::max(start, unitFree_[write] - toTarget);
    } else {
      const Cycle opDelta = chip_.memReadCycles + distance(operand, vxm);
      const Cycle wrDelta = chip_.vxmCycles + distance(vxm, write);
      const auto [s2, f2] = freeStream(direction(operand, vxm), s1, direction(c2c, vxm));
      const auto [s3, f3] = freeStream(direction(vxm, write), s1, direction(c2c, vxm), s2, direction(operand, vxm));
      start = std::max({start, unitFree_[vxm] - toTarget, unitFree_[operand] - (toTarget - opDelta),
                        f2 - (toTarget - opDelta) - chip_.memReadCycles, unitFree_[write] - toTarget - wrDelta,
                        f3 - toTarget - chip_.vxmCycles});
      // The operand read must not issue before cycle 0.
      start = std::max(start, opDelta - toTarget);
      Instruction in = make(c2c, Opcode::kC2cReceive, start, vectors, interval);
      in.port = port;
      in.dst = {static_cast<std::int16_t>(s1), direction(c2c, vxm)};
      Instruction rd = make(operand, Opcode::kMemRead, start + toTarget - opDelta, vectors, interval);
      rd.address = allocate(operand, vectors);
      rd.bank = chip_.bankOf(rd.address);
      rd.stride = 1;
      rd.dst = {static_cast<std::int16_t>(s2), direction(operand, vxm)};
      Instruction add = make(vxm, Opcode::kVxmBinary, start + toTarget, vectors, interval);
      add.func = isa::VxmFunc::kAdd;
      add.src = in.dst;
      add.src2 = rd.dst;
      add.dst = {static_cast<std::int16_t>(s3), direction(vxm, write)};
      Instruction wr = make(write, Opcode::kMemWrite, start + toTarget + wrDelta, vectors, interval);
      wr.address = allocate(write, vectors);
      wr.bank = chip_.bankOf(wr.address);
      wr.stride = 1;
      wr.src = add.dst;
      occupyStream(in, distance(c2c, vxm));
      occupyStream(rd, distance(operand, vxm));
      occupyStream(add, distance(vxm, write));
      for (const auto& i : {in, rd, add, wr}) push(i);
      return isa::completion(chip_, wr);
    }
    Instruction in = make(c2c, Opcode::kC2cReceive, start, vectors, interval);
    in.port = port;
    in.dst = {static_cast<std::int16_t>(s1), direction(c2c, write)};
    Instruction wr = make(write, Opcode::kMemWrite, start + toTarget, vectors, interval);
    wr.address = allocate(write, vectors);
    wr.bank = chip_.bankOf(wr.address);
    wr.stride = 1;
    wr.src = in.dst;
    occupyStream(in, distance(c2c, write));
    push(in);
    push(wr);
    return isa::completion(chip_, wr);
  }

  /// First cycle the queue of `port` may issue again.
  Cycle portQueueFree(int port) const { return unitFree_[chip_.firstUnit(UnitKind::kC2c) + port]; }

  /// A transit hop: vectors arriving on inPort leave on outPort, issued at the first arrival.
  void forward(int inPort, int outPort, std::int64_t vectors, int interval, Cycle issue) {
    Instruction f = make(chip_.firstUnit(UnitKind::kC2c) + inPort, Opcode::kC2cForward, issue, vectors, interval);
    f.port = outPort;
    linkFree_[outPort] = std::max(linkFree_[outPort], issue + chip_.c2cForwardCycles + Cycle{vectors} * interval);
    push(f);
  }

  isa::Program finish() {
    isa::canonicalize(program_);
    Cycle last = 0;
    std::vector<Cycle> busy(units_.size(), 0);
    for (const auto& inst : program_.instructions) {
      last = std::max(last, isa::completion(chip_, inst));
      busy[inst.unit] += isa::busyPerIssue(chip_, inst) * inst.repeat;
    }
    const bool empty = program_.instructions.empty();
    program_.predictedCycles = empty ? 0 : last + chip_.rippleCycles;
    program_.lowerBoundCycles = empty ? 0 : *std::max_element(busy.begin(), busy.end()) + chip_.rippleCycles;
    for (int a : highWater_) program_.sramBytes += Bytes{a} * chip_.vectorBytes;
    return program_;
  }

 private:
  int distance(int a, int b) const { return std::abs(units_[a].slice - units_[b].slice); }
  Direction direction(int from, int to) const {
    return units_[to].slice >= units_[from].slice ? Direction::kEast : Direction::kWest;
  }
  // The stream of dir free earliest (lowest id on ties), other than the ones named.
  std::pair<int, Cycle> freeStream(Direction dir, int skip1 = -1, Direction dir1 = Direction::kEast, int skip2 = -1,
                                   Direction dir2 = Direction::kEast) const {
    const auto& free = streamFree_[static_cast<int>(dir)];
    int best = -1;
    for (int id = 0; id < static_cast<int>(free.size()); ++id) {
      if ((id == skip1 && dir == dir1) || (id == skip2 && dir == dir2)) continue;
      if (best < 0 || free[id] < free[best]) best = id;
    }
    return {best, free[best]};
  }
  void occupyStream(const Instruction& producer, int reach) {
    const Cycle lastValue = producer.issue + isa::resultLatency(chip_, producer) + Cycle{producer.repeat - 1} * producer.interval;
    streamFree_[static_cast<int>(producer.dst.dir)][producer.dst.id] = lastValue + reach + 1;
  }
  // Timing programs: each burst gets its own addresses, wrapping when a slice is full.
  int allocate(int mem, std::int64_t vectors) {
    const int slice = units_[mem].indexInKind;
    if (nextAddress_[slice] + vectors > chip_.addressesPerSlice) nextAddress_[slice] = 0;
    const int address = nextAddress_[slice];
    nextAddress_[slice] += static_cast<int>(vectors);
    if (static_cast<int>(highWater_.size()) <= slice) highWater_.resize(slice + 1, 0);
    highWater_[slice] = std::max(highWater_[slice], nextAddress_[slice]);
    return address;
  }
  Instruction make(int unit, Opcode op, Cycle issue, std::int64_t repeat, int interval) const {
    Instruction inst;
    inst.unit = unit;
    inst.op = op;
    inst.issue = issue;
    inst.repeat = static_cast<std::int32_t>(repeat);
    inst.interval = interval;
    return inst;
  }
  void push(const Instruction& inst) {
    unitFree_[inst.unit] = isa::unitFreeAt(chip_, inst);
    program_.instructions.push_back(inst);
  }

  const topology::ChipSpec& chip_;
  std::vector<topology::UnitInfo> units_;
  std::vector<Cycle> unitFree_;
  std::vector<Cycle> linkFree_;
  std::vector<Cycle> streamFree_[2];
  std::vector<int> nextAddress_;
  std::vector<int> highWater_;
  isa::Program program_;
};

}  // namespace

LinkCalendar::LinkCalendar(size_t links) : busy_(links * 2) {}

Cycle LinkCalendar::firstFit(const std::vector<std::pair<int, Cycle>>& hops, Cycle start, Cycle length) const {
  // Each link direction's windows are disjoint and sorted (reserve() books only windows firstFit
  // found free), so their ends are sorted too: the first window that can overlap is found by a
  // binary search, and a hop that moves the start is searched again from there.
  bool moved = true;
  while (moved) {
    moved = false;
    for (const auto& [key, offset] : hops) {
      const auto& windows = busy_[key];
      auto it = std::upper_bound(windows.begin(), windows.end(), start + offset,
                                 [](Cycle at, const std::pair<Cycle, Cycle>& w) { return at < w.second; });
      for (; it != windows.end() && it->first < start + offset + length; ++it) {
        start = it->second - offset;
        moved = true;
      }
    }
  }
  return start;
}

void LinkCalendar::reserve(const std::vector<std::pair<int, Cycle>>& hops, Cycle start, Cycle length) {
  for (const auto& [key, offset] : hops) {
    auto& windows = busy_[key];
    const std::pair<Cycle, Cycle> w{start + offset, start + offset + length};
    windows.insert(std::upper_bound(windows.begin(), windows.end(), w), w);
  }
}

Expected<CollectiveSchedule> scheduleCollective(const CollectivePlan& plan, const topology::Cluster& cluster) {
  LinkCalendar calendar(cluster.links().size());
  return scheduleCollective(plan, cluster, std::vector<Cycle>(cluster.chipCount(), 0), calendar);
}

Expected<CollectiveSchedule> scheduleCollective(const CollectivePlan& plan, const topology::Cluster& cluster,
                                                const std::vector<Cycle>& start, LinkCalendar& calendar) {
  const auto& chip = cluster.chip();
  const std::uint64_t specHash = chip.hash();
  CollectiveSchedule out;
  out.plan = plan;
  // Chains only for the chips the messages touch (senders, receivers, transit chips).
  std::map<int, ChipChains> chainOf;
  auto chains = [&](int c) -> ChipChains& {
    auto it = chainOf.find(c);
    if (it == chainOf.end()) it = chainOf.emplace(c, ChipChains(chip, specHash, start[c])).first;
    return it->second;
  };
  std::vector<Cycle> ready = start;

  for (const auto& stepMessages : plan.steps) {
    auto messages = stepMessages;
    std::stable_sort(messages.begin(), messages.end(), [](const CollectiveMessage& a, const CollectiveMessage& b) {
      return a.src != b.src ? a.src < b.src : a.dst < b.dst;
    });
    std::vector<Cycle> next = ready;
    // Sends of a step are placed before its receives, so every chip's sends see the same free units
    // whatever the chip id: symmetric chips get identical (shared) programs.
    struct PendingReceive { int chip, port; std::int64_t vectors; int interval; Cycle arrive; bool reduce; };
    std::vector<PendingReceive> receives;
    for (const auto& m : messages) {
      const auto route = cluster.route(m.src, m.dst);
      if (route.empty()) continue;
      const auto& first = cluster.links()[route.front().link];
      const auto& last = cluster.links()[route.back().link];
      int interval = 1;
      for (const auto& hop : route) interval = std::max(interval, linkVectorInterval(chip, cluster.links()[hop.link]));
      // Hop h's window starts (relative to the send issue) after the send, the earlier hops and forwards.
      std::vector<std::pair<int, Cycle>> hops;
      Cycle offset = chip.c2cSendCycles;
      for (size_t h = 0; h < route.size(); ++h) {
        const auto& link = cluster.links()[route[h].link];
        hops.push_back({route[h].link * 2 + (route[h].chip == link.a ? 0 : 1), offset});
        offset += link.latencyCycles + chip.c2cForwardCycles;
      }
      // Transit hop h (h >= 1) forwards on the queue of the port the vectors arrive on, issued at
      // the first arrival: send issue + hops[h].second - c2c.forward_cycles.
      struct Transit { int chip, inPort, outPort; Cycle offset; };
      std::vector<Transit> transits;
      for (size_t h = 1; h < route.size(); ++h) {
        const int at = route[h].chip;
        transits.push_back({at, cluster.links()[route[h - 1].link].portOn(at), cluster.links()[route[h].link].portOn(at),
                            hops[h].second - chip.c2cForwardCycles});
      }
      auto transitsFree = [&](Cycle issue) {
        for (const auto& t : transits) issue = std::max(issue, chains(t.chip).portQueueFree(t.inPort) - t.offset);
        return issue;
      };
      const Cycle flight = offset - chip.c2cForwardCycles;  // send issue to first arrival
      Cycle earliest = ready[m.src];
      for (std::int64_t done = 0; done < m.vectors;) {
        const std::int64_t v = std::min(kMaxBurstVectors, m.vectors - done);
        const Cycle length = Cycle{v} * interval;
        // The send's chain starts no earlier than `from`; the calendar may push it later.
        Cycle from = earliest;
        Cycle issue = chains(m.src).send(first.portOn(m.src), v, interval, from, false);
        for (Cycle fit = calendar.firstFit(hops, transitsFree(issue), length); fit != issue;
             fit = calendar.firstFit(hops, transitsFree(issue), length)) {
          from += fit - issue;
          issue = chains(m.src).send(first.portOn(m.src), v, interval, from, false);
        }
        chains(m.src).send(first.portOn(m.src), v, interval, from, true);
        calendar.reserve(hops, issue, length);
        for (const auto& t : transits) chains(t.chip).forward(t.inPort, t.outPort, v, interval, issue + t.offset);
        const Cycle arrive = issue + flight;
        receives.push_back({m.dst, last.portOn(m.dst), v, interval, arrive, m.reduce});
        RoutedTransfer t{m.src, m.dst, {}, issue, arrive, v, interval};
        for (const auto& hop : route) t.links.push_back(hop.link);
        out.transfers.push_back(t);
        C2CTransfer c2c{m.src, m.dst, route.front().link, issue, arrive, static_cast<int>(v), interval,
                        Bytes{v} * chip.vectorBytes, {}};
        out.cluster.transfers.push_back(c2c);
        done += v;
        earliest = from;
      }
    }
    for (const auto& r : receives)
      next[r.chip] = std::max(next[r.chip], chains(r.chip).receive(r.port, r.vectors, r.interval, r.arrive, r.reduce));
    ready = next;
  }
  out.cluster.programs.resize(cluster.chipCount());
  for (auto& p : out.cluster.programs) p.chipSpecHash = specHash;
  for (auto& [c, chain] : chainOf) {
    out.cluster.programs[c] = chain.finish();
    out.cycles = std::max(out.cycles, out.cluster.programs[c].predictedCycles);
  }
  return out;
}

bool isCollectiveBenchmark(const ir::Graph& graph) {
  return graph.ops().size() == 1 && graph.op(0).hasAttr("collective");
}

Expected<CollectiveSchedule> compileCollectiveBenchmark(const ir::Graph& graph, const topology::Cluster& cluster) {
  if (!isCollectiveBenchmark(graph)) return makeError(ExitCode::kInternal, "not a collective benchmark graph");
  const ir::Op& op = graph.op(0);
  auto kind = parseCollectiveOp(op.stringAttr("collective", ""));
  if (!kind) return kind.error();
  const std::int64_t chips = op.intAttr("chips", 0);
  if (chips > cluster.chipCount())
    return modelError("builtin:collective", fmt::format("parameter 'chips' is {}, the cluster has {} chips", chips,
                                                        cluster.chipCount()));
  std::vector<int> group(chips > 0 ? chips : cluster.chipCount());
  std::iota(group.begin(), group.end(), 0);
  const std::string name = op.stringAttr("algorithm", "auto");
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kAuto;
  for (auto a : {CollectiveAlgorithm::kRing, CollectiveAlgorithm::kTree, CollectiveAlgorithm::kHalvingDoubling,
                 CollectiveAlgorithm::kHierarchical})
    if (name == collectiveAlgorithmName(a)) algorithm = a;
  auto plan = planCollective(*kind, algorithm, group, op.intAttr("bytes", 0), cluster);
  if (!plan) return plan.error();
  auto scheduled = scheduleCollective(*plan, cluster);
  if (scheduled)
    for (auto& program : scheduled->cluster.programs)
      if (!program.instructions.empty()) isa::attributeAll(program, {op.name, collectiveOpName(*kind), op.layer, ""});
  return scheduled;
}

}  // namespace tsp::schedule
