// Collectives: algorithms unrolled into steps, then scheduled on routes and lowered to C2C chains.
#include "compile/schedule/collectives.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "support/cancel.h"

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
    case CollectiveAlgorithm::kDirect: return "direct";
    case CollectiveAlgorithm::kOneShot: return "one-shot";
    case CollectiveAlgorithm::kMultiRing: return "multi-ring";
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

std::vector<topology::Hop> messageRoute(const topology::Cluster& cluster, const CollectiveMessage& message) {
  if (message.link < 0) return cluster.route(message.src, message.dst);
  const auto& link = cluster.links()[message.link];
  const bool fromA = cluster.hops(message.src, link.a) + cluster.hops(link.b, message.dst) <=
                     cluster.hops(message.src, link.b) + cluster.hops(link.a, message.dst);
  const int near = fromA ? link.a : link.b;
  auto route = cluster.route(message.src, near);
  route.push_back({near, message.link});
  const auto rest = cluster.route(link.other(near), message.dst);
  route.insert(route.end(), rest.begin(), rest.end());
  return route;
}

namespace {

bool isPowerOfTwo(size_t n) { return n > 0 && (n & (n - 1)) == 0; }

// One ring of a multi-ring step and the vectors each of its chips sends per step.
struct RingShare {
  std::vector<int> ring;
  std::int64_t vectors;
};

// Messages of p-1 ring steps run on every ring of `rings` at once.
void addRingSteps(std::vector<std::vector<CollectiveMessage>>& steps, const std::vector<RingShare>& rings, bool reduce,
                  bool shrinking = false) {
  size_t longest = 0;
  for (const auto& r : rings) longest = std::max(longest, r.ring.size());
  for (size_t s = 1; s < longest; ++s) {
    std::vector<CollectiveMessage> step;
    for (const auto& [ring, vectors] : rings) {
      const size_t p = ring.size();
      if (s >= p) continue;
      for (size_t i = 0; i < p; ++i)
        step.push_back({ring[i], ring[(i + 1) % p], shrinking ? vectors * static_cast<std::int64_t>(p - s) : vectors, reduce});
    }
    steps.push_back(std::move(step));
  }
}

void addRingSteps(std::vector<std::vector<CollectiveMessage>>& steps, const std::vector<std::vector<int>>& rings,
                  std::int64_t vectors, bool reduce, bool shrinking = false) {
  std::vector<RingShare> shares;
  for (const auto& r : rings) shares.push_back({r, vectors});
  addRingSteps(steps, shares, reduce, shrinking);
}

// One step in which every chip of each group sends to every other of its group: `vectors` each
// (reduced by the receiver when `reduce`); from the groups' first chip only when `fromFirst`.
// Shift-major: for k = 1 .. p-1, every chip i's message to chip i + k.
void addExchangeStep(std::vector<std::vector<CollectiveMessage>>& steps, const std::vector<std::vector<int>>& groups,
                     std::int64_t vectors, bool reduce, bool fromFirst = false) {
  std::vector<CollectiveMessage> step;
  size_t longest = 0;
  for (const auto& g : groups) longest = std::max(longest, g.size());
  for (size_t k = 1; k < longest; ++k)
    for (const auto& g : groups)
      for (size_t i = 0; i < (fromFirst ? 1 : g.size()) && k < g.size(); ++i)
        step.push_back({g[i], g[(i + k) % g.size()], vectors, reduce});
  steps.push_back(std::move(step));
}

// The lines of a torus or mesh along dimension k (chip ids row-major, dimension 0 slowest), each in
// ascending coordinate order or reversed.
std::vector<std::vector<int>> linesAlong(const std::vector<int>& dims, size_t k, bool reversed) {
  std::int64_t stride = 1, chips = 1;
  for (size_t j = 0; j < dims.size(); ++j) {
    chips *= dims[j];
    if (j > k) stride *= dims[j];
  }
  std::vector<std::vector<int>> lines;
  for (std::int64_t c = 0; c < chips; ++c) {
    if ((c / stride) % dims[k] != 0) continue;
    std::vector<int> line;
    for (int i = 0; i < dims[k]; ++i) line.push_back(static_cast<int>(c + i * stride));
    if (reversed) std::reverse(line.begin(), line.end());
    lines.push_back(std::move(line));
  }
  return lines;
}

// True when every message of the plan travels over one link.
bool singleHop(const CollectivePlan& plan, const topology::Cluster& cluster) {
  for (const auto& step : plan.steps)
    for (const auto& m : step)
      if ((m.link < 0 ? static_cast<size_t>(cluster.hops(m.src, m.dst)) : messageRoute(cluster, m).size()) > 1) return false;
  return true;
}

// The dimensions of a ring, mesh or torus (a ring is a torus of one dimension); empty otherwise.
std::vector<int> gridDims(const topology::Cluster& cluster) {
  const auto& d = cluster.description();
  if (d.kind == "ring") return {cluster.chipCount()};
  return d.kind == "torus" || d.kind == "mesh" ? d.dims : std::vector<int>{};
}

// True when the group is a whole ring, torus or mesh in chip order (what the multi-ring runs on).
bool wholeGrid(const topology::Cluster& cluster, const std::vector<int>& group) {
  if (gridDims(cluster).empty() || static_cast<int>(group.size()) != cluster.chipCount()) return false;
  for (size_t i = 0; i < group.size(); ++i)
    if (group[i] != static_cast<int>(i)) return false;
  return true;
}

// The group in chip order when it holds every chip of a ring, torus or mesh once, whatever its own
// order; else the group as given. Every member of an all-reduce ends with the same sum, so the
// multi-ring may run it in chip order (a placement in locality order, [0, 3, 1, 2] on a ring of 4,
// would otherwise fall back to a one-direction ring).
std::vector<int> gridOrder(const topology::Cluster& cluster, const std::vector<int>& group) {
  if (gridDims(cluster).empty() || static_cast<int>(group.size()) != cluster.chipCount()) return group;
  std::vector<int> sorted = group;
  std::sort(sorted.begin(), sorted.end());
  return wholeGrid(cluster, sorted) ? sorted : group;
}

// On a whole mesh, a ring through every chip whose steps (the last back to the first included) are
// single links, in ringOrder's order; empty when ringOrder finds none (no even side).
std::vector<int> embeddedRing(const topology::Cluster& cluster, const std::vector<int>& group) {
  if (cluster.description().kind != "mesh" || group.size() < 3) return {};
  std::vector<int> ring = ringOrder(cluster, group);
  for (size_t i = 0; i < ring.size(); ++i)
    if (cluster.hops(ring[i], ring[(i + 1) % ring.size()]) != 1) return {};
  return ring;
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

// Sub-pieces from which a hierarchical all-reduce with levels above the rack halves them to overlap
// its node and rack levels (at 20 cycles a vector, half of them outweigh the extra step's latency).
constexpr std::int64_t kHalvesMinPieceVectors = 128;

// Hierarchical levels over multi-hop routes exchange only in groups up to this size (an exchange
// makes p(p-1) messages per group).
constexpr size_t kExchangeMaxGroup = 16;

// The level above the node when its nodes are joined pairwise by links (the nodes of a dragonfly
// rack): the data is cut into one sub-piece per chip of the level group, and node i sends node j's
// sub-pieces over the links joining them, each link the sub-pieces of about
// chipsPerNode / links chips, a sub-piece whose owner is the link's far end preferred, the others
// spread so that the far ends forward to as many different owners as they can.
struct LinkedLevel {
  /// Per level group, the messages of its reduce-scatter: a sub-piece (vectors = 1) from the chip
  /// that holds it after the node level, over one joining link, to the chip that owns it.
  std::vector<CollectiveMessage> scatter;
  /// Per position of the group: the sub-pieces its chip holds after the node level (its own and
  /// those its links carry).
  std::vector<std::int64_t> holdings;
};

// The linked level of group g (positions: nodes of perNode chips, level groups of nodesPerGroup
// nodes), or nothing when two nodes of a level group share no link.
std::optional<LinkedLevel> linkedLevel(const topology::Cluster& cluster, const std::vector<int>& g, std::int64_t perNode,
                                       std::int64_t nodesPerGroup) {
  const auto p = static_cast<std::int64_t>(g.size());
  const std::int64_t perGroup = perNode * nodesPerGroup;
  if (nodesPerGroup < 2 || p % perGroup != 0) return std::nullopt;
  std::vector<std::int64_t> position(cluster.chipCount(), -1);
  for (std::int64_t i = 0; i < p; ++i) position[g[i]] = i;
  LinkedLevel level;
  level.holdings.assign(p, 1);
  struct Joining { int link; std::int64_t x, y; };  // positions of the link's ends in node i and node j
  for (std::int64_t base = 0; base < p; base += perGroup) {
    std::map<std::pair<std::int64_t, std::int64_t>, int> forwarded;  // (far end, owner) -> sub-pieces
    for (std::int64_t i = 0; i < nodesPerGroup; ++i)
      for (std::int64_t j = 0; j < nodesPerGroup; ++j) {
        if (i == j) continue;
        const std::int64_t nodeI = base + i * perNode, nodeJ = base + j * perNode;
        std::vector<Joining> links;
        for (std::int64_t x = nodeI; x < nodeI + perNode; ++x)
          for (const auto& [port, id] : cluster.linksOf(g[x])) {
            const std::int64_t y = position[cluster.links()[id].other(g[x])];
            if (y >= nodeJ && y < nodeJ + perNode) links.push_back({id, x, y});
          }
        if (links.empty()) return std::nullopt;
        std::vector<int> carried(links.size(), 0);
        std::vector<std::int64_t> owners;  // owners that are a link's far end first
        for (int pass = 0; pass < 2; ++pass)
          for (std::int64_t o = nodeJ; o < nodeJ + perNode; ++o) {
            const bool end = std::any_of(links.begin(), links.end(), [&](const Joining& l) { return l.y == o; });
            if (end == (pass == 0)) owners.push_back(o);
          }
        for (std::int64_t o : owners) {
          size_t best = 0;
          auto key = [&](size_t k) {
            return std::tuple(carried[k], links[k].y == o ? 0 : 1, links[k].y == o ? 0 : forwarded[{links[k].y, o}]);
          };
          for (size_t k = 1; k < links.size(); ++k)
            if (key(k) < key(best)) best = k;
          ++carried[best];
          if (links[best].y != o) ++forwarded[{links[best].y, o}];
          ++level.holdings[links[best].x];
          level.scatter.push_back({g[links[best].x], g[o], 1, true, links[best].link});
        }
      }
  }
  // Forwarded sub-pieces first, in every group: a far end's port queue forwards them while it is
  // free, before the sends and receives of the direct sub-pieces take it.
  std::stable_partition(level.scatter.begin(), level.scatter.end(),
                        [&](const CollectiveMessage& m) { return cluster.hops(m.src, m.dst) > 1; });
  return level;
}

// A ring whose step from chips[i] to chips[i + 1] crosses links[i] (-1: the cluster's route), `vectors` a message.
struct LinkedRing {
  std::vector<int> chips;
  std::vector<int> links;
  std::int64_t vectors = 0;
};

// The links joining each pair of racks of a dragonfly, and the choice of one for a message between
// two racks, counting the messages of one step that each directed link carries.
class RackLinks {
 public:
  explicit RackLinks(const topology::Cluster& cluster)
      : cluster_(cluster),
        perRack_(cluster.description().chipsPerNode * cluster.description().nodesPerRack),
        racks_(cluster.description().racks),
        used_(cluster.links().size() * 2, 0) {
    for (const auto& link : cluster.links()) {
      const int ra = link.a / perRack_, rb = link.b / perRack_;
      if (ra != rb) joining_[pairKey(ra, rb)].push_back(link.id);
    }
  }
  struct Choice {
    int link = -1, load = 0, hops = 0;
    double cycles = 0;      ///< the route's latency and its busiest link's messages of `vectors`
    std::vector<int> keys;  ///< the directed links of the route (Link::directionFrom)
  };
  /// The link a message of `vectors` from chip a to chip b should cross: the one of least time by the
  /// estimate's terms (the route's latency plus `vectors` for each message its busiest directed link
  /// carries, this one included), then the shortest (link -1 when they share a rack or no link joins
  /// their racks).
  Choice choose(int a, int b, std::int64_t vectors) const {
    Choice best;
    const int ra = a / perRack_, rb = b / perRack_;
    if (ra == rb) return best;
    const auto it = joining_.find(pairKey(ra, rb));
    if (it == joining_.end()) return best;
    for (int id : it->second) {
      Choice c;
      c.link = id;
      const auto route = messageRoute(cluster_, {a, b, 1, false, id});
      double spacing = 1;
      for (const auto& hop : route) {
        c.keys.push_back(cluster_.direction(hop));
        c.load = std::max(c.load, used_[c.keys.back()]);
        spacing = std::max(spacing, cluster_.links()[hop.link].vectorCycles(cluster_.chip().vectorBytes));
      }
      c.hops = static_cast<int>(c.keys.size());
      c.cycles = static_cast<double>(cluster_.routeLatency(route)) + static_cast<double>((c.load + 1) * vectors) * spacing;
      if (best.link < 0 || std::tie(c.cycles, c.hops) < std::tie(best.cycles, best.hops)) best = std::move(c);
    }
    return best;
  }
  void use(const Choice& c) {
    for (int key : c.keys) ++used_[key];
  }
  /// Every message of a step between racks crosses its chosen link, each choice counted for the next.
  void spread(std::vector<CollectiveMessage>& step) {
    for (auto& m : step) {
      const Choice c = choose(m.src, m.dst, m.vectors);
      m.link = c.link;
      use(c);
    }
  }
  void clear() { std::fill(used_.begin(), used_.end(), 0); }

 private:
  std::int64_t pairKey(int ra, int rb) const { return std::int64_t{std::min(ra, rb)} * racks_ + std::max(ra, rb); }
  const topology::Cluster& cluster_;
  int perRack_, racks_;
  std::unordered_map<std::int64_t, std::vector<int>> joining_;  // rack pair (lower, higher) -> links
  std::vector<int> used_;  // directed link -> messages crossing it
};

// The top level of a hierarchical collective over one group of chips in different racks (the racks'
// chips at one rack position), as a grid: rows ring on links of the group's own where it has them,
// then columns ring across the rows (a reduce-scatter; an all-gather the other way round), so that a
// ring of p racks takes about 2 sqrt(p) steps, not p.
struct RackGrid {
  std::vector<int> order;  ///< the group's chips, row after row
  std::vector<LinkedRing> rows, columns;
  std::vector<int> back;  ///< a ring run both ways: the link its step from order[i + 1] to order[i] crosses
};

// The rows' length b of a grid of p racks: b x a = p with b + a least, b >= a (p itself when prime).
int rowLength(int p) {
  int b = p;
  for (int d = 2; d < p; ++d)
    if (p % d == 0 && d >= p / d && d + p / d < b + p / b) b = d;
  return b;
}

// The grid of every group (`share` vectors per chip): the minimal routes between two racks all cross
// the few links joining them, so every group's ring would queue on the same links. Instead each group
// visits its racks at a stride, every step over one of the links joining the two racks (RackLinks):
// per group the stride whose slowest step, then all steps, take the least time with the links the
// groups before it use. Rings (`grid` false): strides prime to p, one cycle. Grids: rows of
// rowLength(p) racks, a stride's cycles of that length or its single cycle cut into rows, each closed
// over a link of its own, so that every group's steps are alike. On a whole dragonfly system
// (circulant rack links) each rack position has links to the racks at some offset, so its ring runs
// one hop a step on its own links. With `bothWays` (rings only) each ring also runs the other way,
// its links chosen with the stride's.
std::vector<RackGrid> spreadRackGrids(const topology::Cluster& cluster, const std::vector<std::vector<int>>& groups,
                                      std::int64_t share, bool grid, bool bothWays = false) {
  RackLinks rackLinks(cluster);
  std::vector<RackGrid> grids;
  for (const auto& g : groups) {
    const int p = static_cast<int>(g.size());
    RackGrid best;
    std::pair<double, double> bestCost{0, 0};  // the slowest step's time, then all steps'
    std::vector<RackLinks::Choice> bestChoices;
    const int b = grid ? rowLength(p) : p;
    const std::int64_t rowChunk = ceilDiv(share, static_cast<std::int64_t>(b));
    for (int stride = 1; stride < std::max(p, 2); ++stride) {
      const int cycles = std::gcd(stride, p), length = p / cycles;
      if (cycles > 1 && length != b) continue;  // every group's rows equally long: its steps alike
      RackGrid candidate;
      std::vector<RackLinks::Choice> choices;
      std::pair<double, double> cost{0, 0};
      bool oneHopUnused = true, slower = false;
      for (int k = 0; k < cycles && !slower; ++k) {
        LinkedRing row;
        for (int j = 0; j < length; ++j) row.chips.push_back(g[(k + static_cast<size_t>(j) * stride) % p]);
        for (int j = 0; j < length && length > 1 && !slower; ++j) {
          for (bool back : {false, true}) {
            if (back && !bothWays) break;
            const int from = row.chips[back ? (j + 1) % length : j], to = row.chips[back ? j : (j + 1) % length];
            const auto& c = choices.emplace_back(rackLinks.choose(from, to, rowChunk));
            (back ? candidate.back : row.links).push_back(c.link);
            cost = {std::max(cost.first, c.cycles), cost.second + c.cycles};
            oneHopUnused = oneHopUnused && c.hops == 1 && c.load == 0;
          }
          slower = !best.rows.empty() && cost.first > bestCost.first;  // no better than the best: dropped
        }
        candidate.order.insert(candidate.order.end(), row.chips.begin(), row.chips.end());
        candidate.rows.push_back(std::move(row));
      }
      if (!slower && (best.rows.empty() || cost < bestCost)) {
        best = std::move(candidate);
        bestCost = cost;
        bestChoices = std::move(choices);
      }
      if (oneHopUnused) break;  // unused links, one hop a step
    }
    for (const auto& c : bestChoices) rackLinks.use(c);
    grids.push_back(std::move(best));
  }
  // A single cycle cut into rows, each closed over the least used link from its last rack to its first.
  for (auto& g : grids) {
    const int p = static_cast<int>(g.order.size());
    const int b = grid ? rowLength(p) : p;
    if (g.rows.size() != 1 || b == p) continue;
    const LinkedRing cycle = std::move(g.rows.front());
    g.rows.clear();
    for (int k = 0; k < p / b; ++k) {
      LinkedRing row;
      row.chips.assign(cycle.chips.begin() + k * b, cycle.chips.begin() + (k + 1) * b);
      row.links.assign(cycle.links.begin() + k * b, cycle.links.begin() + (k + 1) * b - 1);
      const auto c = rackLinks.choose(row.chips.back(), row.chips.front(), ceilDiv(share, static_cast<std::int64_t>(b)));
      rackLinks.use(c);
      row.links.push_back(c.link);
      g.rows.push_back(std::move(row));
    }
  }
  // Columns: the j-th chip of every row, over the links least used by the columns (they run after the rows).
  rackLinks.clear();
  for (auto& g : grids) {
    const size_t a = g.rows.size(), b = g.rows.front().chips.size();
    if (a < 2) continue;
    for (size_t j = 0; j < b; ++j) {
      LinkedRing column;
      for (size_t k = 0; k < a; ++k) column.chips.push_back(g.rows[k].chips[j]);
      for (size_t k = 0; k < a; ++k) {
        const auto c = rackLinks.choose(column.chips[k], column.chips[(k + 1) % a],
                                        ceilDiv(ceilDiv(share, static_cast<std::int64_t>(b)), static_cast<std::int64_t>(a)));
        rackLinks.use(c);
        column.links.push_back(c.link);
      }
      g.columns.push_back(std::move(column));
    }
  }
  return grids;
}

// Messages of the ring steps of every linked ring at once (p-1 steps for a ring of p).
void addLinkedRingSteps(std::vector<std::vector<CollectiveMessage>>& steps, const std::vector<LinkedRing>& rings,
                        bool reduce) {
  size_t longest = 0;
  for (const auto& r : rings) longest = std::max(longest, r.chips.size());
  for (size_t s = 1; s < longest; ++s) {
    std::vector<CollectiveMessage> step;
    for (const auto& [ring, links, vectors] : rings)
      for (size_t i = 0; s < ring.size() && i < ring.size(); ++i)
        step.push_back({ring[i], ring[(i + 1) % ring.size()], vectors, reduce, links[i]});
    steps.push_back(std::move(step));
  }
}

// The steps of the grids' reduce-scatter (rows, then columns) or all-gather (columns, then rows) of
// `share` vectors per chip.
std::vector<std::vector<CollectiveMessage>> gridSteps(const std::vector<RackGrid>& grids, std::int64_t share, bool reduce) {
  std::vector<LinkedRing> rows, columns;
  for (const auto& grid : grids) {
    const std::int64_t rowChunk = ceilDiv(share, static_cast<std::int64_t>(grid.rows.front().chips.size()));
    for (const auto& row : grid.rows) rows.push_back({row.chips, row.links, rowChunk});
    for (const auto& column : grid.columns)
      columns.push_back({column.chips, column.links, ceilDiv(rowChunk, static_cast<std::int64_t>(column.chips.size()))});
  }
  std::vector<std::vector<CollectiveMessage>> steps;
  addLinkedRingSteps(steps, reduce ? rows : columns, reduce);
  addLinkedRingSteps(steps, reduce ? columns : rows, reduce);
  return steps;
}

// The rings of `grids` (spreadRackGrids' rings both ways) run both ways at once, `share` vectors per
// chip: the chunk a chip owns gathers its reduction from the p / 2 chips before it and the (p - 1) / 2
// after it at once (an all-gather sends it back the same ways), so a ring of p takes p / 2 steps, not
// p - 1, each chip sending a chunk each way a step.
std::vector<std::vector<CollectiveMessage>> bothWaysSteps(const std::vector<RackGrid>& grids, std::int64_t share,
                                                          bool reduce) {
  std::vector<LinkedRing> forward, back;
  size_t longest = 0;
  for (const auto& grid : grids) {
    if (grid.rows.size() != 1 || grid.back.size() != grid.order.size()) return {};
    const auto& row = grid.rows.front();
    const size_t p = row.chips.size();
    const std::int64_t chunk = ceilDiv(share, static_cast<std::int64_t>(p));
    LinkedRing way{{row.chips.rbegin(), row.chips.rend()}, {grid.back.rbegin(), grid.back.rend()}, chunk};
    // way.chips[i] = row.chips[p-1-i]; its step to way.chips[i+1] = row.chips[p-2-i] crosses back[p-2-i].
    std::rotate(way.links.begin(), way.links.begin() + 1, way.links.end());
    forward.push_back({row.chips, row.links, chunk});
    back.push_back(std::move(way));
    longest = std::max(longest, p);
  }
  // Reduce-scatter step t (1..p/2): forward every step, back from step p/2 - (p-1)/2 + 1 on; the
  // all-gather the reverse (back every step, forward in the first (p-1)/2).
  std::vector<std::vector<CollectiveMessage>> steps;
  for (size_t t = 1; t <= longest / 2; ++t) {
    std::vector<CollectiveMessage> step;
    for (const auto* rings : {&forward, &back})
      for (const auto& [ring, links, vectors] : *rings) {
        const size_t p = ring.size(), before = p / 2, after = (p - 1) / 2;
        if (t > before) continue;
        // The way a reduce-scatter's partial sums or an all-gather's chunks cover `before` chips runs every step.
        const bool everyStep = (rings == &forward) == reduce;
        if (!everyStep && (reduce ? t <= before - after : t > after)) continue;
        for (size_t i = 0; i < p; ++i) step.push_back({ring[i], ring[(i + 1) % p], vectors, reduce, links[i]});
      }
    steps.push_back(std::move(step));
  }
  return steps;
}

// The most groups (groupOf: chip -> group) whose messages of `step` cross one directed link.
int busiestLinkGroups(const topology::Cluster& cluster, const std::vector<CollectiveMessage>& step,
                      const std::vector<int>& groupOf) {
  std::set<std::pair<int, int>> crossing;  // (directed link, group)
  std::unordered_map<int, int> groups;     // directed link -> groups crossing it
  int busiest = 0;
  for (const auto& m : step)
    for (const auto& hop : messageRoute(cluster, m)) {
      const int key = cluster.direction(hop);
      if (crossing.insert({key, groupOf[m.src]}).second) busiest = std::max(busiest, ++groups[key]);
    }
  return busiest;
}

bool topLevelPrefersTree(std::int64_t groupSize, std::int64_t share) {
  return groupSize >= 4 && ceilDiv(share, groupSize) < kTopRingMinChunkVectors;
}

}  // namespace

namespace {

// A ring through every chip of a mesh whose steps, the last back to the first included, are single
// links; empty when the mesh has no even side or only one side longer than 1. With k the first even
// dimension and the others walked as a snake (each next position one link away): down the positions
// of dimension k at snake position 0, then back over the other positions, snaking along the path.
std::vector<int> meshRing(const std::vector<int>& dims) {
  const size_t D = dims.size();
  size_t k = D;
  for (size_t j = 0; j < D && k == D; ++j)
    if (dims[j] % 2 == 0) k = j;
  std::int64_t rest = 1;
  for (size_t j = 0; j < D; ++j)
    if (j != k) rest *= dims[j];
  if (k == D || rest < 2) return {};
  std::vector<std::int64_t> stride(D, 1);
  for (size_t j = D - 1; j-- > 0;) stride[j] = stride[j + 1] * dims[j + 1];
  // Chip at position i of dimension k and position p of the snake over the other dimensions
  // (outermost first; a digit's inner positions run backwards when the digit is odd).
  auto id = [&](int i, std::int64_t p) {
    std::int64_t chip = i * stride[k], inner = rest;
    for (size_t j = 0; j < D; ++j) {
      if (j == k) continue;
      inner /= dims[j];
      const std::int64_t digit = p / inner;
      p %= inner;
      if (digit % 2 == 1) p = inner - 1 - p;
      chip += digit * stride[j];
    }
    return static_cast<int>(chip);
  };
  const int n = dims[k];
  std::vector<int> order;
  for (int i = 0; i < n; ++i) order.push_back(id(i, 0));
  for (int i = n; i-- > 0;)
    for (std::int64_t q = 1; q < rest; ++q) order.push_back(id(i, (n - 1 - i) % 2 == 0 ? q : rest - q));
  return order;
}

}  // namespace

// Groups up to this size get their ring shortened by 2-opt moves (n^3 hop sums per pass).
constexpr size_t kRingOrderMaxChips = 64;
// Groups up to this size get the shortest ring (2^n n^2 steps).
constexpr size_t kRingOrderExactChips = 12;

std::vector<int> ringOrder(const topology::Cluster& cluster, std::vector<int> chips) {
  std::sort(chips.begin(), chips.end());
  const auto& d = cluster.description();
  const bool whole = d.dims.size() == 2 && static_cast<int>(chips.size()) == cluster.chipCount();
  if (whole && d.kind == "torus" && d.dims[0] % 2 == 0) {
    // Snake order: rows alternate direction, so consecutive chips are neighbours and the last row ends beside the first.
    std::vector<int> order;
    const int rows = d.dims[0], cols = d.dims[1];
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) order.push_back(r * cols + (r % 2 == 0 ? c : cols - 1 - c));
    return order;
  }
  if (d.kind == "mesh" && static_cast<int>(chips.size()) == cluster.chipCount())
    if (auto order = meshRing(d.dims); !order.empty()) return order;
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
  const bool latencyBound = bytes < (64 << 10) && reduceLike && group.size() > 2;
  if (d.kind == "dragonfly" && static_cast<int>(group.size()) > d.chipsPerNode &&
      static_cast<int>(group.size()) % d.chipsPerNode == 0 && op != CollectiveOp::kAllToAll &&
      op != CollectiveOp::kBroadcast) {
    if (!latencyBound) return CollectiveAlgorithm::kHierarchical;
    // Small messages: the tree's 2 log2(p) steps or the hierarchical levels' few, by their estimates.
    auto hierarchical = planCollective(op, CollectiveAlgorithm::kHierarchical, group, bytes, cluster);
    auto tree = planCollective(op, CollectiveAlgorithm::kTree, group, bytes, cluster);
    if (!hierarchical || !tree) return tree ? CollectiveAlgorithm::kTree : CollectiveAlgorithm::kHierarchical;
    return estimateCollectiveCycles(*tree, cluster) < estimateCollectiveCycles(*hierarchical, cluster)
               ? CollectiveAlgorithm::kTree
               : CollectiveAlgorithm::kHierarchical;
  }
  if (group.size() > kChooseByEstimateChips) return latencyBound ? CollectiveAlgorithm::kTree : CollectiveAlgorithm::kRing;
  CollectiveAlgorithm best = CollectiveAlgorithm::kRing;
  double bestCycles = -1;
  for (auto a : kCollectiveAlgorithms) {
    if (a == CollectiveAlgorithm::kHierarchical) continue;
    auto plan = planCollective(op, a, group, bytes, cluster);
    if (!plan) continue;
    // Exchanges and multi-rings over multi-hop routes pack their link windows loosely (1.4 to 2 times
    // the busiest link's load), which the estimate does not see: they are chosen on direct links only.
    const bool allLinks = a == CollectiveAlgorithm::kDirect || a == CollectiveAlgorithm::kOneShot ||
                          a == CollectiveAlgorithm::kMultiRing;
    if (allLinks && !singleHop(*plan, cluster)) continue;
    const double cycles = estimateCollectiveCycles(*plan, cluster);
    if (bestCycles < 0 || cycles < bestCycles) {
      best = a;
      bestCycles = cycles;
    }
  }
  return best;
}

std::pair<double, double> groupAlphaBeta(const std::vector<int>& group, const topology::Cluster& cluster) {
  const topology::ChipSpec& spec = cluster.chip();
  double alpha = 0, beta = 0;
  for (int a : group)
    for (int b : group)
      if (a != b) {
        const auto route = cluster.route(a, b);
        alpha = std::max(alpha, static_cast<double>(cluster.routeLatency(route) + ringTurnaroundCycles(spec, true)));
        for (const auto& hop : route)
          beta = std::max(beta, cluster.links()[hop.link].vectorCycles(spec.vectorBytes) /
                                    static_cast<double>(spec.vectorBytes));
      }
  return {alpha, beta};
}

CollectiveAlgorithm chooseTreeOrRing(CollectiveOp op, const std::vector<int>& group, std::int64_t bytes,
                                     const topology::Cluster& cluster) {
  const CollectiveAlgorithm chosen = chooseAlgorithm(op, group, bytes, cluster);
  if (chosen != CollectiveAlgorithm::kTree || op != CollectiveOp::kAllReduce) return chosen;
  const auto [alpha, beta] = groupAlphaBeta(group, cluster);
  const double p = static_cast<double>(group.size()), levels = std::ceil(std::log2(p));
  const double tree = 2 * levels * (alpha + static_cast<double>(bytes) * beta);
  return alphaBetaCycles(op, static_cast<int>(p), static_cast<double>(bytes), alpha, beta) < tree
             ? CollectiveAlgorithm::kRing
             : chosen;
}

double estimateCollectiveCycles(const CollectivePlan& plan, const topology::Cluster& cluster) {
  const auto& chip = cluster.chip();
  auto same = [](const std::vector<CollectiveMessage>& a, const std::vector<CollectiveMessage>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const CollectiveMessage& x, const CollectiveMessage& y) {
      return x.src == y.src && x.dst == y.dst && x.vectors == y.vectors && x.reduce == y.reduce && x.link == y.link;
    });
  };
  double total = 0, stepCycles = 0;
  const std::vector<CollectiveMessage>* previous = nullptr;
  std::map<int, double> load;  // directed link -> cycles of the step's vectors on it
  for (const auto& step : plan.steps) {
    if (previous == nullptr || !same(*previous, step)) {  // ring steps repeat: estimated once
      load.clear();
      double alpha = 0;
      for (const auto& m : step) {
        const auto route = messageRoute(cluster, m);
        if (route.empty()) continue;
        double spacing = 1;
        for (const auto& hop : route) spacing = std::max(spacing, cluster.links()[hop.link].vectorCycles(chip.vectorBytes));
        for (const auto& hop : route)
          load[cluster.direction(hop)] += static_cast<double>(m.vectors) * spacing;
        alpha = std::max(alpha, static_cast<double>(cluster.routeLatency(route) + ringTurnaroundCycles(chip, m.reduce)));
      }
      double busiest = 0;
      for (const auto& [key, cycles] : load) busiest = std::max(busiest, cycles);
      stepCycles = alpha + busiest;
      previous = &step;
    }
    total += stepCycles;
  }
  return total;
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
  const bool whole = plan.algorithm == CollectiveAlgorithm::kTree || plan.algorithm == CollectiveAlgorithm::kHierarchical ||
                     plan.algorithm == CollectiveAlgorithm::kOneShot || plan.algorithm == CollectiveAlgorithm::kMultiRing;
  plan.vectorsPerChip = whole ? ceilDiv(bytes, vb) : chunk * p;
  plan.group = plan.algorithm == CollectiveAlgorithm::kRing && !keepOrder ? ringOrder(cluster, group) : group;
  if (plan.algorithm == CollectiveAlgorithm::kMultiRing && op == CollectiveOp::kAllReduce && !keepOrder)
    plan.group = gridOrder(cluster, group);
  if (plan.algorithm == CollectiveAlgorithm::kHalvingDoubling && !isPowerOfTwo(group.size()))
    return makeError(ExitCode::kConfig, fmt::format("halving-doubling needs a power-of-two group, not {}", p));
  if (plan.algorithm == CollectiveAlgorithm::kHierarchical &&
      (cluster.description().kind != "dragonfly" || p % cluster.description().chipsPerNode != 0))
    return makeError(ExitCode::kConfig, "the hierarchical algorithm needs whole dragonfly nodes");
  if (plan.algorithm == CollectiveAlgorithm::kMultiRing && !wholeGrid(cluster, plan.group))
    return makeError(ExitCode::kConfig, "the multi-ring algorithm needs every chip of a ring, torus or mesh, in chip order "
                                        "(an all-reduce: in any order)");
  if (plan.algorithm == CollectiveAlgorithm::kMultiRing && op != CollectiveOp::kAllReduce &&
      op != CollectiveOp::kReduceScatter && op != CollectiveOp::kAllGather)
    return makeError(ExitCode::kConfig, "multi-ring runs all-reduce, reduce-scatter and all-gather");
  if (plan.algorithm == CollectiveAlgorithm::kOneShot && op != CollectiveOp::kAllReduce && op != CollectiveOp::kBroadcast)
    return makeError(ExitCode::kConfig, fmt::format("one-shot runs all-reduce and broadcast, not {}", collectiveOpName(op)));
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
    case CollectiveAlgorithm::kDirect:
      // Every chip sends chunk j to chip j over its own route (all links of a fully-connected group at once).
      switch (op) {
        case CollectiveOp::kAllReduce:
          addExchangeStep(steps, {g}, chunk, true);
          addExchangeStep(steps, {g}, chunk, false);
          break;
        case CollectiveOp::kReduceScatter: addExchangeStep(steps, {g}, chunk, true); break;
        case CollectiveOp::kAllGather: case CollectiveOp::kAllToAll: addExchangeStep(steps, {g}, chunk, false); break;
        case CollectiveOp::kBroadcast: {
          // Scatter from g[0], then every other chip sends its chunk to the chips that lack it.
          addExchangeStep(steps, {g}, chunk, false, true);
          std::vector<CollectiveMessage> gather;
          for (std::int64_t i = 1; i < p; ++i)
            for (std::int64_t j = 1; j < p; ++j)
              if (i != j) gather.push_back({g[i], g[j], chunk, false});
          steps.push_back(std::move(gather));
          break;
        }
      }
      break;
    case CollectiveAlgorithm::kOneShot:
      addExchangeStep(steps, {g}, all, op == CollectiveOp::kAllReduce, op == CollectiveOp::kBroadcast);
      break;
    case CollectiveAlgorithm::kMultiRing: {
      // A mesh with a ring of one-hop steps through all its chips (a mesh with an even side) runs
      // that ring both ways, half the data each: its corner chips have two links, which bound any
      // all-reduce on it to two links' rate, and the two rings keep both busy. Lines of a mesh have
      // no wrap-around, so per-dimension rings would send every ring's last step back along its line.
      if (const auto cycle = embeddedRing(cluster, g); !cycle.empty()) {
        const std::int64_t half = ceilDiv(ceilDiv(all, 2), p);
        const std::vector<RingShare> rings = {{cycle, half}, {{cycle.rbegin(), cycle.rend()}, half}};
        if (op != CollectiveOp::kAllGather) addRingSteps(steps, rings, true);
        if (op != CollectiveOp::kReduceScatter) addRingSteps(steps, rings, false);
        break;
      }
      // 2D shares (dimension order rotated by r, each direction): share (r, dir) reduce-scatters along
      // dimension r, r+1, ... over the lines of the grid, then all-gathers back in reverse order.
      // At every phase the 2D shares use every dimension in both directions at once.
      const auto dims = gridDims(cluster);
      const size_t D = dims.size();
      const std::int64_t share = ceilDiv(all, static_cast<std::int64_t>(2 * D));
      struct Share { size_t rotation; bool reversed; std::vector<std::int64_t> chunks; };
      std::vector<Share> shares;
      for (size_t r = 0; r < D; ++r)
        for (bool reversed : {false, true}) {
          Share sh{r, reversed, {}};
          std::int64_t c = share;
          for (size_t k = 0; k < D; ++k) sh.chunks.push_back(c = ceilDiv(c, dims[(r + k) % D]));
          shares.push_back(std::move(sh));
        }
      auto phase = [&](size_t k, bool reduce) {
        std::vector<RingShare> rings;
        for (const auto& sh : shares)
          for (auto& line : linesAlong(dims, (sh.rotation + k) % D, sh.reversed)) rings.push_back({std::move(line), sh.chunks[k]});
        addRingSteps(steps, rings, reduce);
      };
      if (op != CollectiveOp::kAllGather)
        for (size_t k = 0; k < D; ++k) phase(k, true);
      if (op != CollectiveOp::kReduceScatter)
        for (size_t k = D; k-- > 0;) phase(k, false);
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
      // A level whose groups are fully connected (a node) exchanges over all its links at once; a
      // level of small groups over multi-hop routes (a rack) exchanges when the estimate says so
      // (its routes' contention included), and rings otherwise.
      // A level of groups over racks may also run grids spread over the links joining the racks
      // (`spread`, spreadRackGrids), when the estimate says so: on a few racks of a larger system the cluster's routes,
      // some through third racks, cross more links than join the racks directly.
      auto levelSteps = [&](const std::vector<std::vector<int>>& groups, std::int64_t c, bool reduce,
                            const std::vector<std::vector<std::vector<CollectiveMessage>>>& spread = {}) {
        bool adjacent = true;
        for (const auto& group : groups)
          for (size_t a = 0; adjacent && a < group.size(); ++a)
            for (size_t b = 0; adjacent && b < group.size(); ++b)
              adjacent = a == b || cluster.hops(group[a], group[b]) == 1;
        if (adjacent) {
          addExchangeStep(steps, groups, c, reduce);
          return;
        }
        std::vector<CollectivePlan> candidates(2 + spread.size());
        addRingSteps(candidates[0].steps, groups, c, reduce);
        if (groups.front().size() <= kExchangeMaxGroup) addExchangeStep(candidates[1].steps, groups, c, reduce);
        for (size_t k = 0; k < spread.size(); ++k) candidates[2 + k].steps = spread[k];
        CollectivePlan* best = &candidates[0];
        double bestCycles = estimateCollectiveCycles(*best, cluster);
        for (auto& candidate : candidates) {
          CollectivePlan* other = &candidate;
          if (other == best || other->steps.empty()) continue;
          const double cycles = estimateCollectiveCycles(*other, cluster);
          if (cycles < bestCycles) {
            best = other;
            bestCycles = cycles;
          }
        }
        steps.insert(steps.end(), std::make_move_iterator(best->steps.begin()), std::make_move_iterator(best->steps.end()));
      };
      // Nodes pairwise linked at level 1 (a rack): the node level reduce-scatters to each chip the
      // sub-pieces its links carry, which then cross on every joining link at once; levels 0 and 1
      // are done, in reverse after the levels above for the gather.
      std::optional<LinkedLevel> linked;
      if (levels.size() >= 2) linked = linkedLevel(cluster, g, levels[0], levels[1]);
      const size_t firstRingLevel = linked ? 2 : 0;
      const std::int64_t piece = linked ? ceilDiv(share, levels[0] * levels[1]) : 0;
      // Every chip sends every other chip of its node what that one holds, `part` vectors per sub-piece.
      auto nodeMessages = [&](bool reduce, std::int64_t part) {
        std::vector<CollectiveMessage> step;
        for (std::int64_t k = 1; k < levels[0]; ++k)
          for (std::int64_t base = 0; base < p; base += levels[0])
            for (std::int64_t i = 0; i < levels[0]; ++i) {
              const std::int64_t to = base + (i + k) % levels[0], holder = reduce ? to : base + i;
              step.push_back({g[base + i], g[to], linked->holdings[holder] * part, reduce});
            }
        return step;
      };
      auto rackMessages = [&](bool reduce, std::int64_t part) {  // every sub-piece between its holder and its owner
        std::vector<CollectiveMessage> step;
        for (const auto& m : linked->scatter)
          step.push_back(reduce ? CollectiveMessage{m.src, m.dst, part, true, m.link}
                                : CollectiveMessage{m.dst, m.src, part, false, m.link});
        return step;
      };
      auto nodeStep = [&](bool reduce) { steps.push_back(nodeMessages(reduce, piece)); };
      auto rackStep = [&](bool reduce) { steps.push_back(rackMessages(reduce, piece)); };
      // An all-reduce overlaps its node and rack levels: two halves of every sub-piece, the second
      // half's node level running while the first half crosses the rack links. With no level above,
      // the first half's gather also crosses the rack links while the second half's reduce does.
      // Below levels above the rack, only for sub-pieces of kHalvesMinPieceVectors: the halves add a
      // step (about a thousand cycles of latency) and save about half a sub-piece's time on a rack link.
      const bool above = firstRingLevel < levels.size();
      const bool halves = linked && op == CollectiveOp::kAllReduce && piece >= (above ? kHalvesMinPieceVectors : 2);
      const std::int64_t first = ceilDiv(piece, 2), second = piece - first;
      auto together = [&](std::vector<CollectiveMessage> a, const std::vector<CollectiveMessage>& b) {
        a.insert(a.end(), b.begin(), b.end());
        steps.push_back(std::move(a));
      };
      // Above the rack the sub-pieces go in 2, 3 or 4 parts, as many as the estimate of the reduce-scatter
      // side finds fastest (each part's rack level runs under the next part's node level, and adds a
      // step): part i + 1's node level while part i crosses the rack links, the gather the other way.
      // More than 2 only while every part keeps kHalvesMinPieceVectors: the programs grow with the
      // parts (at 8 MiB on 10,440 chips, more parts would save 0.3 % of the time for 40 % more memory).
      std::vector<std::int64_t> parts = {first, second};
      auto rackSide = [&](const std::vector<std::int64_t>& sizes, bool reduce) {
        std::vector<std::vector<CollectiveMessage>> side;
        for (size_t i = 0; i <= sizes.size(); ++i) {
          std::vector<CollectiveMessage> step;
          if (reduce ? i > 0 : i < sizes.size()) step = rackMessages(reduce, sizes[reduce ? i - 1 : i]);
          if (reduce ? i < sizes.size() : i > 0) {
            const auto node = nodeMessages(reduce, sizes[reduce ? i : i - 1]);
            step.insert(step.end(), node.begin(), node.end());
          }
          side.push_back(std::move(step));
        }
        return side;
      };
      if (halves && above) {
        double fastest = -1;
        for (std::int64_t k = 2; k <= 4 && (k == 2 || piece / k >= kHalvesMinPieceVectors); ++k) {
          std::vector<std::int64_t> sizes;
          for (std::int64_t i = 0, left = piece; i < k; left -= sizes.back(), ++i) sizes.push_back(ceilDiv(left, k - i));
          CollectivePlan candidate;
          candidate.steps = rackSide(sizes, true);
          const double cycles = estimateCollectiveCycles(candidate, cluster);
          if (fastest < 0 || cycles < fastest) {
            fastest = cycles;
            parts = std::move(sizes);
          }
        }
      }
      if (halves && above) {
        for (auto& step : rackSide(parts, true)) steps.push_back(std::move(step));
      } else if (halves) {
        steps.push_back(nodeMessages(true, first));
        together(rackMessages(true, first), nodeMessages(true, second));
        together(rackMessages(false, first), rackMessages(true, second));
        together(rackMessages(false, second), nodeMessages(false, first));
        steps.push_back(nodeMessages(false, second));
        break;
      } else if (linked && reduces) {
        nodeStep(true);
        rackStep(true);
      }
      if (linked) {
        chunkAt = {piece, piece};
        share = piece;
      }
      for (size_t k = firstRingLevel; k + 1 < levels.size(); ++k) {
        const std::int64_t c = ceilDiv(share, levels[k]);
        chunkAt.push_back(c);
        if (reduces) levelSteps(ringsOf(k), c, true);
        share = c;
      }
      if (firstRingLevel < levels.size()) {
        const std::int64_t top = ceilDiv(share, levels.back());
        const auto topGroups = ringsOf(levels.size() - 1);
        if (op == CollectiveOp::kAllReduce && topLevelPrefersTree(levels.back(), share)) {
          // Few vectors over many groups: a binomial tree's 2 log2(P) steps beat the ring's 2(P-1) alphas.
          // Above whole racks, each group's tree may run in its spread ring's order, every message over
          // the least used link joining its racks (the estimate decides).
          std::vector<CollectivePlan> trees(1);
          addTreeSteps(trees[0].steps, topGroups, share, true);
          for (bool grid : {false, true}) {
            if (!linked || cluster.description().racks < 2) break;
            std::vector<std::vector<int>> orders;
            for (auto& g : spreadRackGrids(cluster, topGroups, share, grid)) orders.push_back(std::move(g.order));
            addTreeSteps(trees.emplace_back().steps, orders, share, true);
            RackLinks rackLinks(cluster);
            for (auto& step : trees.back().steps) {
              rackLinks.clear();
              rackLinks.spread(step);
            }
          }
          std::vector<double> cycles;
          for (const auto& t : trees) cycles.push_back(estimateCollectiveCycles(t, cluster));
          auto& tree = trees[std::min_element(cycles.begin(), cycles.end()) - cycles.begin()];
          steps.insert(steps.end(), std::make_move_iterator(tree.steps.begin()), std::make_move_iterator(tree.steps.end()));
        } else {
          // Above whole racks, grids may spread over the links joining the racks (spreadRackGrids).
          std::vector<std::vector<RackGrid>> layouts;  // rings, and grids
          std::vector<RackGrid> bothWays;              // rings run both ways
          if (linked && cluster.description().racks > 1) {
            for (bool grid : {false, true}) layouts.push_back(spreadRackGrids(cluster, topGroups, share, grid));
            bothWays = spreadRackGrids(cluster, topGroups, share, false, true);
          }
          for (bool reduce : {true, false}) {
            if (!(reduce ? reduces : gathers)) continue;
            std::vector<std::vector<std::vector<CollectiveMessage>>> spread;
            for (const auto& grids : layouts) spread.push_back(gridSteps(grids, share, reduce));
            // Both ways only where no link carries more groups' messages than one way: rings of
            // different groups that share a link drift out of step and queue behind each other, which
            // the estimate (step by step, in lockstep) does not see, and both ways would double that.
            if (!bothWays.empty()) {
              auto both = bothWaysSteps(bothWays, share, reduce);
              std::vector<int> groupOf(cluster.chipCount(), -1);
              for (size_t k = 0; k < topGroups.size(); ++k)
                for (int c : topGroups[k]) groupOf[c] = static_cast<int>(k);
              if (!both.empty() && !spread.front().empty() &&
                  std::max(busiestLinkGroups(cluster, both.front(), groupOf),
                           busiestLinkGroups(cluster, both.back(), groupOf)) <=
                      busiestLinkGroups(cluster, spread.front().front(), groupOf))
                spread.push_back(std::move(both));
            }
            levelSteps(topGroups, top, reduce, spread);
          }
        }
      }
      for (size_t k = levels.size() - 1; k-- > firstRingLevel;)
        if (gathers) levelSteps(ringsOf(k), chunkAt[k], false);
      if (halves) {
        for (auto& step : rackSide(parts, false)) steps.push_back(std::move(step));
      } else if (linked && gathers) {
        rackStep(false);
        nodeStep(false);
      }
      break;
    }
  }
  return plan;
}

namespace {

constexpr std::int64_t kMaxBurstVectors = 4096;

// Instruction bodies shared by the chips whose chains place the same instructions in the same span
// (a ring's members differ only by their neighbours, which their programs do not name): each body is
// held once, found by a hash of its instructions and compared in full.
class BodyPool {
 public:
  /// Every body's instructions name origin `attributed ? 0 : none` of their piece's originMap.
  explicit BodyPool(bool attributed)
      : originMap_(attributed ? std::make_shared<const std::vector<std::int32_t>>(1, 0) : nullptr) {}

  /// The piece placing [first, last) (absolute issues) at `offset`: its body's issues are relative to it.
  isa::ProgramPiece piece(std::vector<Instruction>::const_iterator first, std::vector<Instruction>::const_iterator last,
                          Cycle offset) {
    std::uint64_t key = 0x9e3779b97f4a7c15ULL;
    for (auto i = first; i != last; ++i)
      for (std::int64_t v : {std::int64_t{i->unit}, i->issue - offset, std::int64_t{static_cast<int>(i->op)},
                             std::int64_t{i->address}, std::int64_t{i->port}, std::int64_t{i->repeat}, std::int64_t{i->dst.id}})
        key = (key ^ static_cast<std::uint64_t>(v)) * 0x100000001b3ULL;
    const auto same = [&](const Instruction& a, const Instruction& b) {
      Instruction relative = a;
      relative.issue -= offset;
      return relative == b;
    };
    auto [match, end] = bodies_.equal_range(key);
    for (; match != end; ++match) {
      const auto& held = match->second->instructions;
      if (std::equal(first, last, held.begin(), held.end(), same)) return {match->second, offset, originMap_};
    }
    std::vector<Instruction> instructions(first, last);
    for (Instruction& i : instructions) i.issue -= offset;
    std::vector<std::int32_t> origins(originMap_ ? instructions.size() : 0, 0);
    auto body = isa::makeBody(std::move(instructions), std::move(origins));
    bodies_.emplace(key, body);
    return {body, offset, originMap_};
  }

 private:
  std::unordered_multimap<std::uint64_t, std::shared_ptr<const isa::InstructionBody>> bodies_;
  std::shared_ptr<const std::vector<std::int32_t>> originMap_;
};

// One chip's units, streams, ports and SRAM as the collective's chains are placed on it.
class ChipChains {
 public:
  /// Every unit, stream and port of the chip is free from `start` on (what it ran before has completed);
  /// `specHash` is chip.hash() and `units` chip.units(), computed once by the caller for every chip.
  /// With a pool, the chains' instructions go into pieces of shared bodies as flush() finalises them.
  ChipChains(const topology::ChipSpec& chip, std::uint64_t specHash, const std::vector<topology::UnitInfo>& units,
             Cycle start, BodyPool* pool = nullptr)
      : chip_(chip), units_(units), unitFree_(units_.size(), start), linkFree_(chip.c2cPorts, start),
        nextAddress_(chip.memSlices, 0), pool_(pool) {
    for (auto& s : streamFree_) s.assign(chip.streamsPerDirection, start);
    program_.chipSpecHash = specHash;
  }

  /// Places MEM read -> C2C send at the earliest cycle >= earliest; returns the send's issue. The
  /// send hands its vectors over one a cycle; the link carries them `spacing` cycles apart.
  Cycle send(int port, std::int64_t vectors, double spacing, Cycle earliest, bool commit) {
    constexpr int interval = 1;
    const int c2c = chip_.firstUnit(UnitKind::kC2c) + port;
    Cycle best = -1;
    int bestMem = -1;
    if (probe_.valid && probe_.port == port && probe_.earliest == earliest) {
      // The same question since the last placement: the same answer (a commit after its probe).
      best = probe_.best;
      bestMem = probe_.mem;
    } else {
      // The earliest free stream of each direction, the same for every slice that reads in it.
      // Per slice: its read's issue + delta (the send's issue); the first slice of the least.
      const Cycle streamFree[2] = {freeStream(Direction::kEast).second, freeStream(Direction::kWest).second};
      const int memFirst = chip_.firstUnit(UnitKind::kMem);
      const Cycle* free = unitFree_.data() + memFirst;
      const Cycle atPort = std::max(unitFree_[c2c], linkFree_[port]);
      const int portSlice = units_[c2c].slice;
      best = std::numeric_limits<Cycle>::max();
      for (int m = 0; m < chip_.memSlices; ++m) {
        const Cycle delta = chip_.memReadCycles + std::abs(memSlice_[m] - portSlice);
        const Cycle stream = streamFree[portSlice >= memSlice_[m] ? 0 : 1] - chip_.memReadCycles;
        const Cycle issue = std::max(std::max(earliest, free[m]), stream) + delta;
        best = std::min(best, std::max(issue, atPort));
      }
      for (int m = 0; m < chip_.memSlices && bestMem < 0; ++m) {
        const Cycle delta = chip_.memReadCycles + std::abs(memSlice_[m] - portSlice);
        const Cycle stream = streamFree[portSlice >= memSlice_[m] ? 0 : 1] - chip_.memReadCycles;
        if (std::max(std::max(std::max(earliest, free[m]), stream) + delta, atPort) == best) bestMem = memFirst + m;
      }
      probe_ = {true, port, earliest, best, bestMem};
    }
    if (!commit) return best;
    probe_.valid = false;
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
    linkFree_[port] = best + topology::serializationCycles(vectors, spacing);
    push(read);
    push(out);
    return best;
  }

  /// Places C2C receive -> (VXM add with a MEM read) -> MEM write for vectors arriving from
  /// `arrive`, `spacing` cycles apart; returns the completion of the write. With `wholeBursts` the
  /// receive takes the burst one vector a cycle from the port's buffer once its last vector is in;
  /// otherwise it reads one vector every ceil(spacing) cycles from the first arrival.
  Cycle receive(int port, std::int64_t vectors, double spacing, Cycle arrive, bool reduce, bool wholeBursts) {
    const int interval = wholeBursts ? 1 : static_cast<int>(std::ceil(spacing - 1e-9));
    const int c2c = chip_.firstUnit(UnitKind::kC2c) + port;
    const int vxmFirst = chip_.firstUnit(UnitKind::kVxm);
    int vxm = vxmFirst;
    for (int u = vxmFirst; u < vxmFirst + chip_.vxmAluGroups; ++u)
      if (unitFree_[u] < unitFree_[vxm]) vxm = u;
    // The two least busy MEM slices for the write and the operand read; on ties the nearest to the
    // VXM (a reduce) or to the port, lowest index then: the vectors' path across the chip is short.
    const int near = reduce ? vxm : c2c;
    const Cycle lastLag = topology::serializationCycles(vectors - 1, spacing) - Cycle{vectors - 1} * interval;
    // No slice is needed before the receive can take its first vector: the ones free by then count as free.
    const auto [write, operand] = twoLeastBusyMem(near, arrive + std::max<Cycle>(0, lastLag));
    const int target = reduce ? vxm : write;
    const Cycle toTarget = chip_.c2cReceiveCycles + distance(c2c, target);
    const auto [s1, f1] = freeStream(direction(c2c, target));
    Cycle start = std::max({arrive + std::max<Cycle>(0, lastLag), unitFree_[c2c], f1 - chip_.c2cReceiveCycles});
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

  /// The two MEM slices free first, a slice free by `by` counting as free at `by`, by (free cycle,
  /// distance to `near`, index): passes over the slices with few branches (the smallest free cycle,
  /// its nearest two slices, and the next free cycle's nearest if only one slice has the smallest).
  std::pair<int, int> twoLeastBusyMem(int near, Cycle by) const {
    const Cycle* busy = unitFree_.data() + chip_.firstUnit(UnitKind::kMem);
    const int n = chip_.memSlices;
    const int nearSlice = units_[near].slice;
    const int* slice = memSlice_.data();
    auto freeAt = [&](int m) { return std::max(busy[m], by); };
    Cycle f1 = freeAt(0);
    for (int m = 1; m < n; ++m) f1 = std::min(f1, freeAt(m));
    // The slice free at f nearest to `near` (lowest index on ties), other than `skip`; -1: none.
    auto nearestFreeAt = [&](Cycle f, int skip) {
      int best = -1, bestDistance = 0;
      for (int m = 0; m < n; ++m) {
        if (freeAt(m) != f || m == skip) continue;
        const int d = std::abs(slice[m] - nearSlice);
        if (best < 0 || d < bestDistance) {
          best = m;
          bestDistance = d;
        }
      }
      return best;
    };
    const int first = nearestFreeAt(f1, -1);
    int second = nearestFreeAt(f1, first);
    if (second < 0 && n > 1) {
      Cycle f2 = std::numeric_limits<Cycle>::max();
      for (int m = 0; m < n; ++m) f2 = std::min(f2, freeAt(m) > f1 ? freeAt(m) : std::numeric_limits<Cycle>::max());
      second = nearestFreeAt(f2, -1);
    }
    const int memFirst = chip_.firstUnit(UnitKind::kMem);
    return {memFirst + first, second < 0 ? -1 : memFirst + second};
  }

  /// The cycle every link this chip sends or forwards on has carried its last vector.
  Cycle linksDrained() const {
    Cycle drained = 0;
    for (Cycle free : linkFree_) drained = std::max(drained, free + chip_.c2cSendCycles);
    return drained;
  }
  /// First cycle the queue of `port` may issue again.
  Cycle portQueueFree(int port) const { return unitFree_[chip_.firstUnit(UnitKind::kC2c) + port]; }
  /// The first arrival of the latest burst routed into `port` (-1: none): the port hands bursts to
  /// its receives and forwards in arrival order, so a later burst must arrive after it.
  Cycle lastArrival(int port) const { return lastArrival_[port]; }
  void admit(int port, Cycle arrival) { lastArrival_[port] = std::max(lastArrival_[port], arrival); }

  /// A transit hop: vectors arriving on inPort leave on outPort as they arrive (`spacing` apart),
  /// issued at the first arrival.
  void forward(int inPort, int outPort, std::int64_t vectors, double spacing, Cycle issue) {
    Instruction f = make(chip_.firstUnit(UnitKind::kC2c) + inPort, Opcode::kC2cForward, issue, vectors, 1);
    f.port = outPort;
    linkFree_[outPort] =
        std::max(linkFree_[outPort], issue + chip_.c2cForwardCycles + topology::serializationCycles(vectors, spacing));
    push(f);
  }

  /// Instructions pushed since the last flush.
  size_t unflushed() const { return program_.instructions.size() - sorted_; }

  /// With a pool: the instructions issued before `before` (no later placement issues before it) go
  /// into one piece, its body shared with every chip that placed the same ones (relative to their
  /// first issue); the rest stay, sorted.
  void flush(Cycle before) {
    auto& list = program_.instructions;
    const auto order = [](const Instruction& a, const Instruction& b) {
      return a.issue != b.issue ? a.issue < b.issue : a.unit < b.unit;
    };
    if (!std::is_sorted(list.begin(), list.end(), order)) {
      std::sort(list.begin() + static_cast<std::ptrdiff_t>(sorted_), list.end(), order);
      std::inplace_merge(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(sorted_), list.end(), order);
    }
    const auto end = std::partition_point(list.begin(), list.end(), [&](const Instruction& i) { return i.issue < before; });
    if (end != list.begin()) {
      for (auto i = list.begin(); i != end; ++i) account(*i);
      program_.pieces.push_back(pool_->piece(list.begin(), end, list.front().issue));
      list.erase(list.begin(), end);
    }
    sorted_ = list.size();
  }

  isa::Program finish() {
    if (pool_) {
      flush(std::numeric_limits<Cycle>::max());
      program_.instructions.shrink_to_fit();  // all in pieces: the list's buffer would outlive the schedule
    } else {
      isa::canonicalize(program_);
      for (const auto& inst : program_.instructions) account(inst);
    }
    const bool empty = program_.instructions.empty() && program_.pieces.empty();
    program_.predictedCycles = empty ? 0 : last_ + chip_.rippleCycles;
    program_.lowerBoundCycles = empty ? 0 : *std::max_element(busy_.begin(), busy_.end()) + chip_.rippleCycles;
    for (int a : highWater_) program_.sramBytes += Bytes{a} * chip_.vectorBytes;
    return std::move(program_);
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
  // The figures finish() reports: the last completion and every unit's busy cycles.
  void account(const Instruction& inst) {
    last_ = std::max(last_, isa::completion(chip_, inst));
    busy_[inst.unit] += isa::busyPerIssue(chip_, inst) * inst.repeat;
  }
  void push(const Instruction& inst) {
    probe_.valid = false;
    unitFree_[inst.unit] = isa::unitFreeAt(chip_, inst);
    program_.instructions.push_back(inst);
  }

  const topology::ChipSpec& chip_;
  const std::vector<topology::UnitInfo>& units_;
  std::vector<int> memSlice_ = [this] {  // each MEM slice's position
    std::vector<int> at(chip_.memSlices);
    for (int m = 0; m < chip_.memSlices; ++m) at[m] = units_[chip_.firstUnit(UnitKind::kMem) + m].slice;
    return at;
  }();
  std::vector<Cycle> unitFree_;
  std::vector<Cycle> linkFree_;
  std::vector<Cycle> lastArrival_ = std::vector<Cycle>(chip_.c2cPorts, -1);
  std::vector<Cycle> streamFree_[2];
  std::vector<int> nextAddress_;
  std::vector<int> highWater_;
  isa::Program program_;
  BodyPool* pool_;
  size_t sorted_ = 0;  // program_.instructions[0, sorted_) are in (issue, unit) order (with a pool)
  Cycle last_ = 0;
  std::vector<Cycle> busy_ = std::vector<Cycle>(units_.size(), 0);
  // The last send placement asked for and its answer, until anything is placed on the chip.
  struct Probe { bool valid; int port; Cycle earliest, best; int mem; };
  Probe probe_ = {false, 0, 0, 0, 0};
};

}  // namespace

LinkCalendar::LinkCalendar(size_t links, bool inOrder) : busy_(links * 2), inOrder_(inOrder) {}

Cycle LinkCalendar::firstFit(const std::vector<std::pair<int, Cycle>>& hops, Cycle start, Cycle length) const {
  // Each link direction's windows are disjoint and sorted (reserve() books only windows firstFit
  // found free), so their ends are sorted too: the first window that can overlap is found by a
  // binary search, and a hop that moves the start is searched again from there.
  bool moved = true;
  while (moved) {
    moved = false;
    for (const auto& [key, offset] : hops) {
      const auto& windows = busy_[key];
      if (windows.empty() || windows.back().second <= start + offset) continue;  // after every window: free
      if (inOrder_) {
        start = windows.back().second - offset;
        moved = true;
        continue;
      }
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
    if (windows.empty() || windows.back() < w) windows.push_back(w);  // the usual case: after the others
    else windows.insert(std::upper_bound(windows.begin(), windows.end(), w), w);
  }
}

Expected<CollectiveSchedule> scheduleCollective(const CollectivePlan& plan, const topology::Cluster& cluster,
                                                bool recordTransfers) {
  LinkCalendar calendar(cluster.links().size());
  return scheduleCollective(plan, cluster, std::vector<Cycle>(cluster.chipCount(), 0), calendar, true, recordTransfers);
}

namespace {

// scheduleCollective without copying the plan into `out`; with shareBodies the programs are pieces
// of bodies shared among the chips (every instruction attributed to plan.origin, if any). False when
// support::cancelRequested() stopped it (polled every step and every few thousand bursts); `progress`
// (if any) hears the steps done after each step.
bool schedulePlan(const CollectivePlan& plan, const topology::Cluster& cluster, const std::vector<Cycle>& start,
                  LinkCalendar& calendar, bool wholeBursts, bool recordTransfers, bool shareBodies,
                  CollectiveSchedule& out, const CollectiveProgress& progress = {}) {
  const auto& chip = cluster.chip();
  const std::uint64_t specHash = chip.hash();
  // Chains only for the chips the messages touch (senders, receivers, transit chips).
  const auto units = chip.units();
  std::optional<BodyPool> pool;
  if (shareBodies) pool.emplace(!plan.origin.op.empty());
  std::vector<std::unique_ptr<ChipChains>> chainOf(cluster.chipCount());
  int chainCount = 0;
  auto chains = [&](int c) -> ChipChains& {
    if (!chainOf[c]) {
      chainOf[c] = std::make_unique<ChipChains>(chip, specHash, units, start[c], pool ? &*pool : nullptr);
      ++chainCount;
    }
    return *chainOf[c];
  };
  std::vector<Cycle> ready = start;
  // Shared bodies: after step s, no later instruction issues before the earliest cycle a chip that
  // still sends may start (every send, forward and receive of a later step follows one), less the
  // most a receive's operand read may precede its receive. The chains flush up to there together,
  // once they hold about kFlushInstructions each, so that symmetric chips cut identical pieces.
  constexpr size_t kFlushInstructions = 512;
  std::vector<size_t> lastSendStep(shareBodies ? cluster.chipCount() : 0, 0);
  Cycle readAhead = chip.memReadCycles;
  if (shareBodies) {
    for (size_t s = 0; s < plan.steps.size(); ++s)
      for (const auto& m : plan.steps[s]) lastSendStep[m.src] = s + 1;
    for (const auto& u : units) readAhead = std::max<Cycle>(readAhead, chip.memReadCycles + u.slice);
  }
  auto flushChains = [&](size_t stepsDone) {
    size_t unflushed = 0;
    for (const auto& c : chainOf)
      if (c) unflushed += c->unflushed();
    if (unflushed < kFlushInstructions * static_cast<size_t>(chainCount)) return;
    Cycle before = std::numeric_limits<Cycle>::max();
    for (int c = 0; c < cluster.chipCount(); ++c)
      if (lastSendStep[c] > stepsDone) before = std::min(before, ready[c]);
    if (before != std::numeric_limits<Cycle>::max()) before -= readAhead;
    for (auto& c : chainOf)
      if (c) c->flush(before);
  };

  // A route: the link windows of a burst relative to its send's issue and the transit chips that
  // forward it; built once per (src, dst, link), since algorithms repeat their messages step after step.
  struct Transit { int chip, inPort, outPort; Cycle offset; };
  struct RouteInfo {
    std::vector<topology::Hop> route;
    int srcPort = 0, dstPort = 0;
    double spacing = 1;
    std::vector<std::pair<int, Cycle>> hops;
    std::vector<Transit> transits;
    Cycle flight = 0;
  };
  std::unordered_map<std::uint64_t, RouteInfo> routes;
  auto routeOf = [&](const CollectiveMessage& m) -> const RouteInfo& {
    const std::uint64_t key = (static_cast<std::uint64_t>(m.src) << 42) | (static_cast<std::uint64_t>(m.dst) << 21) |
                              static_cast<std::uint64_t>(m.link + 1);
    auto [it, fresh] = routes.try_emplace(key);
    RouteInfo& r = it->second;
    if (!fresh) return r;
    r.route = messageRoute(cluster, m);
    if (r.route.empty()) return r;
    r.srcPort = cluster.links()[r.route.front().link].portOn(m.src);
    r.dstPort = cluster.links()[r.route.back().link].portOn(m.dst);
    // The vectors leave at the pace of the slowest link so far (a transit chip passes them on as
    // they arrive) and reach dst at the slowest link's exact rate; every hop is booked for that.
    for (const auto& hop : r.route) r.spacing = std::max(r.spacing, cluster.links()[hop.link].vectorCycles(chip.vectorBytes));
    // Hop h's window starts (relative to the send issue) after the send, the earlier hops and forwards.
    Cycle offset = chip.c2cSendCycles;
    for (const auto& hop : r.route) {
      const auto& link = cluster.links()[hop.link];
      r.hops.push_back({link.directionFrom(hop.chip), offset});
      offset += link.latencyCycles + chip.c2cForwardCycles;
    }
    // Transit hop h (h >= 1) forwards on the queue of the port the vectors arrive on, issued at
    // the first arrival: send issue + hops[h].second - c2c.forward_cycles.
    for (size_t h = 1; h < r.route.size(); ++h) {
      const int at = r.route[h].chip;
      r.transits.push_back({at, cluster.links()[r.route[h - 1].link].portOn(at),
                            cluster.links()[r.route[h].link].portOn(at), r.hops[h].second - chip.c2cForwardCycles});
    }
    r.flight = offset - chip.c2cForwardCycles;  // send issue to first arrival
    return r;
  };
  // A message on its route and how far its bursts have got.
  struct RoutedMessage {
    CollectiveMessage message;
    const RouteInfo* at = nullptr;
    Cycle earliest = 0;
    std::int64_t done = 0;
  };
  // Every chip of the group doing the same thing: in each step each chip sends one message and
  // receives one, all of one size over one-hop routes of equal latency and rate, and each chip's
  // ports correspond to the first chip's (one-to-one over the whole plan, at the same slices), its
  // start the same. Then no two messages of a step share a chip's units or a link direction, so a
  // step's placements do not depend on each other, and every chip's chains stay the first chip's
  // with its ports renamed: the first chip's chain is scheduled alone and its program is every
  // chip's, ports renamed (a ring's all-reduce places 1 burst per step instead of p).
  bool cancelled = false;
  auto scheduleSymmetric = [&]() -> bool {
    const auto& group = plan.group;
    if (!shareBodies || !wholeBursts || recordTransfers || group.size() < 2) return false;
    const int rep = group.front();
    const int c2cFirst = chip.firstUnit(UnitKind::kC2c);
    for (int c : group)
      if (start[c] != start[rep]) return false;
    struct Step { const RouteInfo* out = nullptr; int inPort = 0; std::int64_t vectors = 0; bool reduce = false; };
    std::vector<Step> steps(plan.steps.size());
    // rename[c][rep's port] = c's port, and its inverse.
    std::vector<std::vector<int>> rename(cluster.chipCount()), renamedFrom(cluster.chipCount());
    std::vector<int> sends(cluster.chipCount(), -1), receives(cluster.chipCount(), -1), inPortOf(cluster.chipCount());
    std::vector<char> inGroup(cluster.chipCount(), 0);
    for (int c : group) inGroup[c] = 1;
    auto correspond = [&](int c, int repPort, int port) {
      auto& to = rename[c];
      auto& from = renamedFrom[c];
      if (to.empty()) to.assign(chip.c2cPorts, -1), from.assign(chip.c2cPorts, -1);
      if (to[repPort] < 0 && from[port] < 0) {
        if (units[c2cFirst + repPort].slice != units[c2cFirst + port].slice) return false;
        to[repPort] = port;
        from[port] = repPort;
      }
      return to[repPort] == port;
    };
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      const auto& messages = plan.steps[s];
      if (messages.empty()) continue;
      if (messages.size() != group.size()) return false;
      if (support::cancelRequested()) return cancelled = true;
      const Step first{&routeOf(messages.front()), 0, messages.front().vectors, messages.front().reduce};
      for (const auto& m : messages) {
        if (!inGroup[m.src] || !inGroup[m.dst] || sends[m.src] == static_cast<int>(s) ||
            receives[m.dst] == static_cast<int>(s) || m.vectors != first.vectors || m.reduce != first.reduce)
          return false;
        sends[m.src] = receives[m.dst] = static_cast<int>(s);
        const RouteInfo& r = routeOf(m);
        if (r.route.size() != 1 || r.flight != first.out->flight || r.spacing != first.out->spacing) return false;
        inPortOf[m.dst] = r.dstPort;
        if (m.src == rep) steps[s] = {&r, 0, m.vectors, m.reduce};
      }
      steps[s].inPort = inPortOf[rep];
      for (const auto& m : messages) {
        const RouteInfo& r = routeOf(m);
        if (!correspond(m.src, steps[s].out->srcPort, r.srcPort) || !correspond(m.dst, steps[s].inPort, r.dstPort))
          return false;
      }
    }
    ChipChains& chains0 = chains(rep);
    Cycle ready0 = start[rep];
    for (const Step& st : steps) {
      if (!st.out) continue;
      if (support::cancelRequested()) return cancelled = true;
      const RouteInfo& r = *st.out;
      Cycle next0 = ready0, earliest = ready0;
      for (std::int64_t done = 0; done < st.vectors;) {
        const std::int64_t v = std::min(kMaxBurstVectors, st.vectors - done);
        const Cycle length = topology::serializationCycles(v, r.spacing);
        // As scheduleCollective's rounds: the receiver's port (the first chip's in-port) hands
        // bursts in arrival order.
        auto arrivalsFree = [&](Cycle issue) { return std::max(issue, chains0.lastArrival(st.inPort) + 1 - r.flight); };
        Cycle from = earliest;
        Cycle issue = chains0.send(r.srcPort, v, r.spacing, from, false);
        for (Cycle fit = calendar.firstFit(r.hops, arrivalsFree(issue), length); fit != issue;
             fit = calendar.firstFit(r.hops, arrivalsFree(issue), length)) {
          from += fit - issue;
          issue = chains0.send(r.srcPort, v, r.spacing, from, false);
        }
        chains0.send(r.srcPort, v, r.spacing, from, true);
        calendar.reserve(r.hops, issue, length);
        const Cycle arrive = issue + r.flight;
        chains0.admit(st.inPort, arrive);
        next0 = std::max(next0, chains0.receive(st.inPort, v, r.spacing, arrive, st.reduce, wholeBursts));
        out.transferCount += static_cast<std::int64_t>(group.size());
        done += v;
        earliest = from;
      }
      ready0 = next0;
      for (int c : group) ready[c] = ready0;
      flushChains(static_cast<size_t>(&st - steps.data()) + 1);
      if (progress) progress(&st - steps.data() + 1, static_cast<std::int64_t>(steps.size()));
    }
    out.chainsScheduled = 1;
    out.cluster.programs.resize(cluster.chipCount());
    out.linksDrained.assign(cluster.chipCount(), 0);
    for (auto& p : out.cluster.programs) p.chipSpecHash = specHash;
    const Cycle drained = chains0.linksDrained();
    isa::Program program = chains0.finish();
    if (!plan.origin.op.empty()) program.origins = {plan.origin};
    out.cycles = program.predictedCycles;
    // A chip whose ports are renamed runs the program with its C2C instructions on its own ports
    // (each body renamed once per renaming; re-sorted, since units change).
    std::map<std::pair<const isa::InstructionBody*, std::vector<int>>, std::shared_ptr<const isa::InstructionBody>> renamed;
    for (int c : group) {
      out.linksDrained[c] = drained;
      std::vector<int> map = rename[c];
      bool identity = true;
      for (int p = 0; p < static_cast<int>(map.size()); ++p) identity = identity && (map[p] < 0 || map[p] == p);
      out.cluster.programs[c] = program;
      if (identity) continue;
      for (auto& piece : out.cluster.programs[c].pieces) {
        auto& body = renamed[{piece.body.get(), map}];
        if (!body) {
          std::vector<Instruction> list = piece.body->instructions;
          for (Instruction& i : list) {
            if (units[i.unit].kind != UnitKind::kC2c) continue;
            i.unit = c2cFirst + map[i.unit - c2cFirst];
            if (i.op == Opcode::kC2cSend || i.op == Opcode::kC2cReceive) i.port = map[i.port];
          }
          std::vector<std::int32_t> origins = piece.body->originOf;
          std::vector<size_t> order(list.size());
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return list[a].issue != list[b].issue ? list[a].issue < list[b].issue : list[a].unit < list[b].unit;
          });
          std::vector<Instruction> sorted;
          std::vector<std::int32_t> sortedOrigins;
          for (size_t k : order) {
            sorted.push_back(list[k]);
            if (!origins.empty()) sortedOrigins.push_back(origins[k]);
          }
          body = isa::makeBody(std::move(sorted), std::move(sortedOrigins));
        }
        piece.body = body;
      }
    }
    return true;
  };
  if (scheduleSymmetric()) return !cancelled;

  const bool exchange = plan.algorithm == CollectiveAlgorithm::kDirect || plan.algorithm == CollectiveAlgorithm::kOneShot;
  // Receives not yet placed, per chip (and the chips that have some): a chip's receives are placed
  // in (arrival, push) order, the order its units see them in whatever the other chips do.
  struct PendingReceive { int port; std::int64_t vectors; double spacing; Cycle arrive; bool reduce; };
  std::vector<std::vector<PendingReceive>> pending(cluster.chipCount());
  std::vector<int> pendingChips;
  constexpr std::int64_t kPollBursts = 4096;
  for (const auto& stepMessages : plan.steps) {
    if (support::cancelRequested()) return false;
    auto messages = stepMessages;
    // Chip order, except that an exchange keeps its shift-major order (every chip's message to the
    // chip k places on, for k = 1, 2, ...), which packs the multi-hop routes' windows densely, and
    // messages routed through chosen links keep the order their algorithm gave them.
    if (!exchange && std::none_of(messages.begin(), messages.end(), [](const CollectiveMessage& m) { return m.link >= 0; }))
      std::stable_sort(messages.begin(), messages.end(), [](const CollectiveMessage& a, const CollectiveMessage& b) {
        return a.src != b.src ? a.src < b.src : a.dst < b.dst;
      });
    std::vector<RoutedMessage> routed;
    routed.reserve(messages.size());
    for (const auto& m : messages) {
      const RouteInfo& info = routeOf(m);
      if (info.route.empty()) continue;
      routed.push_back({m, &info, ready[m.src], 0});
    }
    std::vector<Cycle> next = ready;
    // Round b places burst b of every message: the sends of a round before its receives, so every
    // chip's sends see the same free units whatever the chip id (symmetric chips get identical,
    // shared programs), and the units a chip's receives need are not yet claimed by later bursts.
    // A port hands its bursts to its receives and forwards in arrival order: every burst arrives at
    // each port it reaches after the bursts admitted there before it, a round's receives are placed
    // in arrival order, and a forward's queue first places the receives still pending on it.
    auto placeReceives = [&](int onChip, int onPort) {  // onPort < 0: every pending receive of the chip
      auto& receives = pending[onChip];
      std::stable_sort(receives.begin(), receives.end(),
                       [](const PendingReceive& a, const PendingReceive& b) { return a.arrive < b.arrive; });
      size_t kept = 0;
      for (const auto& rc : receives) {
        if (onPort >= 0 && rc.port != onPort) {
          receives[kept++] = rc;
          continue;
        }
        next[onChip] = std::max(next[onChip], chains(onChip).receive(rc.port, rc.vectors, rc.spacing, rc.arrive, rc.reduce, wholeBursts));
      }
      receives.resize(kept);
    };
    for (bool more = true; more;) {
      more = false;
      for (auto& rm : routed) {
        const auto& m = rm.message;
        const RouteInfo& r = *rm.at;
        if (rm.done >= m.vectors) continue;
        for (const auto& t : r.transits)
          if (!pending[t.chip].empty()) placeReceives(t.chip, t.inPort);
        auto transitsFree = [&](Cycle issue) {
          for (const auto& t : r.transits) {
            const auto& at = chains(t.chip);
            issue = std::max({issue, at.portQueueFree(t.inPort) - t.offset, at.lastArrival(t.inPort) + 1 - t.offset});
          }
          return std::max(issue, chains(m.dst).lastArrival(r.dstPort) + 1 - r.flight);
        };
        const std::int64_t v = std::min(kMaxBurstVectors, m.vectors - rm.done);
        const Cycle length = topology::serializationCycles(v, r.spacing);
        // The send's chain starts no earlier than `from`; the calendar may push it later.
        Cycle from = rm.earliest;
        Cycle issue = chains(m.src).send(r.srcPort, v, r.spacing, from, false);
        for (Cycle fit = calendar.firstFit(r.hops, transitsFree(issue), length); fit != issue;
             fit = calendar.firstFit(r.hops, transitsFree(issue), length)) {
          from += fit - issue;
          issue = chains(m.src).send(r.srcPort, v, r.spacing, from, false);
        }
        chains(m.src).send(r.srcPort, v, r.spacing, from, true);
        calendar.reserve(r.hops, issue, length);
        for (const auto& t : r.transits) {
          chains(t.chip).forward(t.inPort, t.outPort, v, r.spacing, issue + t.offset);
          chains(t.chip).admit(t.inPort, issue + t.offset);
        }
        const Cycle arrive = issue + r.flight;
        chains(m.dst).admit(r.dstPort, arrive);
        if (pending[m.dst].empty()) pendingChips.push_back(m.dst);
        pending[m.dst].push_back({r.dstPort, v, r.spacing, arrive, m.reduce});
        if (++out.transferCount % kPollBursts == 0 && support::cancelRequested()) return false;
        if (recordTransfers) {
          RoutedTransfer t{m.src, m.dst, {}, issue, arrive, v, r.spacing};
          for (const auto& hop : r.route) t.links.push_back(hop.link);
          out.transfers.push_back(std::move(t));
          out.cluster.transfers.push_back({m.src, m.dst, r.route.front().link, issue, arrive, static_cast<int>(v), 1,
                                           r.spacing, Bytes{v} * chip.vectorBytes, {}});
        }
        rm.done += v;
        rm.earliest = from;
        more = more || rm.done < m.vectors;
      }
      for (int c : pendingChips) placeReceives(c, -1);
      pendingChips.clear();
    }
    ready = next;
    if (pool) flushChains(static_cast<size_t>(&stepMessages - plan.steps.data()) + 1);
    if (progress) progress(&stepMessages - plan.steps.data() + 1, static_cast<std::int64_t>(plan.steps.size()));
  }
  out.chainsScheduled = chainCount;
  out.cluster.programs.resize(cluster.chipCount());
  out.linksDrained.assign(cluster.chipCount(), 0);
  for (auto& p : out.cluster.programs) p.chipSpecHash = specHash;
  for (int c = 0; c < cluster.chipCount(); ++c) {
    if (!chainOf[c]) continue;
    out.linksDrained[c] = chainOf[c]->linksDrained();
    out.cluster.programs[c] = chainOf[c]->finish();
    chainOf[c].reset();
    if (pool && !plan.origin.op.empty()) out.cluster.programs[c].origins = {plan.origin};
    out.cycles = std::max(out.cycles, out.cluster.programs[c].predictedCycles);
  }
  return true;
}

}  // namespace

Expected<CollectiveSchedule> scheduleCollective(const CollectivePlan& plan, const topology::Cluster& cluster,
                                                const std::vector<Cycle>& start, LinkCalendar& calendar,
                                                bool wholeBursts, bool recordTransfers, bool shareBodies) {
  CollectiveSchedule out;
  out.plan = plan;
  if (!schedulePlan(plan, cluster, start, calendar, wholeBursts, recordTransfers, shareBodies, out))
    return support::interrupted();
  return out;
}

bool isCollectiveBenchmark(const ir::Graph& graph) {
  return graph.ops().size() == 1 && graph.op(0).hasAttr("collective");
}

Expected<CollectiveSchedule> compileCollectiveBenchmark(const ir::Graph& graph, const topology::Cluster& cluster,
                                                        const CollectiveProgress& progress) {
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
  for (auto a : kCollectiveAlgorithms)
    if (name == collectiveAlgorithmName(a)) algorithm = a;
  auto plan = planCollective(*kind, algorithm, group, op.intAttr("bytes", 0), cluster);
  if (!plan) return plan.error();
  plan->origin = {op.name, collectiveOpName(*kind), op.layer, "", "", ""};
  // The programs as pieces of shared bodies (a ring's chips hold one copy of their instructions);
  // the plan moved into the result, not copied (on 2,048 chips its messages take 200 MB).
  CollectiveSchedule scheduled;
  LinkCalendar calendar(cluster.links().size());
  if (!schedulePlan(*plan, cluster, std::vector<Cycle>(cluster.chipCount(), 0), calendar, true, false, true, scheduled,
                    progress))
    return support::interrupted();
  scheduled.plan = std::move(*plan);
  return scheduled;
}

}  // namespace tsp::schedule
