// Collectives: ring, tree, recursive halving/doubling and hierarchical algorithms, scheduled as C2C
// transfers on the cluster's routes (links occupied cycle by cycle) and lowered to per-chip programs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compile/isa/program.h"
#include "compile/schedule/cluster_schedule.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::schedule {

/// The collectives of nccl-tests.
enum class CollectiveOp : std::uint8_t { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast };
/// Algorithms; kAuto chooses by message size and topology (chooseAlgorithm). kDirect: every chip
/// exchanges its n/p chunks with every other at once (reduce-scatter, all-gather, both for an
/// all-reduce: two-shot; all-to-all; broadcast as scatter + all-gather); kOneShot: every chip sends
/// its whole data to every other (all-reduce, broadcast); kMultiRing: on a whole ring (a torus of
/// one dimension: a ring each way, half the data each), torus or mesh, 2D
/// shares of the data each reduce-scatter and all-gather dimension by dimension, every dimension in
/// both directions at once; on a whole mesh with a ring of single links through all its chips (a
/// mesh with an even side), that ring in both directions, half the data each.
enum class CollectiveAlgorithm : std::uint8_t {
  kAuto, kRing, kTree, kHalvingDoubling, kHierarchical, kDirect, kOneShot, kMultiRing
};
/// Every algorithm but kAuto, in the order chooseAlgorithm breaks ties.
inline constexpr CollectiveAlgorithm kCollectiveAlgorithms[] = {
    CollectiveAlgorithm::kRing,    CollectiveAlgorithm::kMultiRing, CollectiveAlgorithm::kDirect,
    CollectiveAlgorithm::kOneShot, CollectiveAlgorithm::kHalvingDoubling, CollectiveAlgorithm::kTree,
    CollectiveAlgorithm::kHierarchical};

const char* collectiveOpName(CollectiveOp op);
const char* collectiveAlgorithmName(CollectiveAlgorithm algorithm);
/// The op named "allreduce", "allgather", "reducescatter", "alltoall" or "broadcast".
Expected<CollectiveOp> parseCollectiveOp(const std::string& text);

/// One message of an algorithm step: `vectors` 320-byte vectors from src to dst; reduce: the
/// receiver adds them into its data (VXM) instead of storing them. `link` >= 0: the route crosses
/// that link (the cluster's route to its nearer end, the link, the cluster's route on to dst), so
/// that an algorithm spreads its messages over parallel links; -1: the cluster's route.
struct CollectiveMessage {
  int src = 0, dst = 0;
  std::int64_t vectors = 0;
  bool reduce = false;
  int link = -1;
};

/// The route of a message: the cluster's, or through the message's link.
std::vector<topology::Hop> messageRoute(const topology::Cluster& cluster, const CollectiveMessage& message);

/// An algorithm unrolled: steps of messages; a chip starts step s+1 once its step-s messages are in.
struct CollectivePlan {
  CollectiveOp op = CollectiveOp::kAllReduce;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  std::vector<int> group;        ///< chips, in algorithm order (ring order for rings)
  std::int64_t vectorsPerChip = 0;
  std::vector<std::vector<CollectiveMessage>> steps;
  isa::OpOrigin origin;  ///< the op its instructions are attributed to (empty: none)
};

/// The algorithm for op over group: on dragonflies spanning several whole nodes, hierarchical from
/// 64 KiB per chip, and below it hierarchical or a tree by estimateCollectiveCycles; elsewhere, for groups up to
/// kChooseByEstimateChips, the one of least estimateCollectiveCycles among those the group allows;
/// larger groups a tree below 64 KiB per chip (all-reduce, broadcast), else a ring.
CollectiveAlgorithm chooseAlgorithm(CollectiveOp op, const std::vector<int>& group, std::int64_t bytes,
                                    const topology::Cluster& cluster);
/// The alpha-beta figures of a group's all-reduce: alpha the slowest route between two of its chips
/// plus a reducing step's turnaround (cycles), beta the slowest link on those routes at its exact
/// rate (cycles per byte), the rate the collectives are scheduled at.
std::pair<double, double> groupAlphaBeta(const std::vector<int>& group, const topology::Cluster& cluster);
/// chooseAlgorithm's pick, except that a tree all-reduce gives way to a ring where the alpha-beta
/// times of groupAlphaBeta say the ring is faster (a tree moves the whole message 2 log2(p) times).
CollectiveAlgorithm chooseTreeOrRing(CollectiveOp op, const std::vector<int>& group, std::int64_t bytes,
                                     const topology::Cluster& cluster);
/// Groups up to this size get their algorithm by estimated cycles (the plans are built to estimate them).
inline constexpr size_t kChooseByEstimateChips = 64;

/// The alpha-beta time of a plan with contention: per step, the slowest route's latency plus the
/// on-chip turnaround (alpha), plus the busiest directed link's vectors at its exact rate (every
/// message of the step that crosses it, in turn). The figures the scheduler books links with.
double estimateCollectiveCycles(const CollectivePlan& plan, const topology::Cluster& cluster);

/// A ring order of the chips: consecutive chips adjacent where the topology allows (on whole 2-D
/// tori with an even number of rows and whole meshes with an even side, every step one link, the
/// last back to the first included; elsewhere chip order shortened by 2-opt moves, up to 64 chips).
std::vector<int> ringOrder(const topology::Cluster& cluster, std::vector<int> chips);

/// The ring a group of placed chips runs: in the group's order (the order the placement laid it
/// out for) unless ringOrder's ring has fewer hops.
std::vector<int> groupRing(const topology::Cluster& cluster, const std::vector<int>& chips);

/// Unrolls op over group (bytes per chip, rounded up to whole vectors per chunk) into steps. A ring
/// runs in ringOrder, or in the group's own order when keepOrder (a placement made for that ring).
Expected<CollectivePlan> planCollective(CollectiveOp op, CollectiveAlgorithm algorithm, const std::vector<int>& group,
                                        std::int64_t bytes, const topology::Cluster& cluster, bool keepOrder = false);

/// One scheduled message on its route.
struct RoutedTransfer {
  int srcChip = 0, dstChip = 0;
  std::vector<int> links;  ///< per hop
  Cycle sendCycle = 0;     ///< issue of the send
  Cycle arriveCycle = 0;   ///< first vector at the destination
  std::int64_t vectors = 0;
  double spacing = 1;  ///< cycles between vectors on the route's links (the slowest link's exact rate)
};

/// The schedule of a collective: every message with its route and cycles, the program of every chip
/// (C2C forwards on the transit chips of multi-hop routes), and the time.
struct CollectiveSchedule {
  CollectivePlan plan;
  std::vector<RoutedTransfer> transfers;  ///< empty when the schedule was made without recording them
  std::int64_t transferCount = 0;         ///< bursts scheduled
  /// Chips whose chains were placed burst by burst: 1 when every chip does the same (a ring), whose
  /// first chip's program is then every chip's, ports renamed.
  int chainsScheduled = 0;
  ClusterSchedule cluster;       ///< programs (transit chips forward multi-hop messages) and the C2C transfers
  Cycle cycles = 0;              ///< predicted completion of the last chip (ripple included)
  /// Per chip, the cycle its outgoing links have carried every vector it sent or forwarded: its
  /// serdes may still drain after its last instruction (0 for chips the collective does not touch).
  std::vector<Cycle> linksDrained;
};

/// Schedules plan on the cluster: messages in (step, src, dst) order at the earliest cycle their
/// sender's data, units, streams and every link of the route allow; a transit chip adds
/// c2c.forward_cycles and uses no streams. No link ever carries two vectors at once. Without
/// recordTransfers, `transfers` and `cluster.transfers` stay empty (a benchmark run needs the programs
/// alone; on 1,024 chips the two lists would hold 2 million bursts each). Stops with
/// support::interrupted() when support::cancelRequested() says so.
Expected<CollectiveSchedule> scheduleCollective(const CollectivePlan& plan, const topology::Cluster& cluster,
                                                bool recordTransfers = true);

/// Busy windows of every directed link (keyed by Link::directionFrom), shared by all the messages of one
/// cluster schedule so that no link carries two vectors at once. A direction's windows are
/// disjoint (every reservation is a first fit) and kept sorted, so a fit is a binary search.
class LinkCalendar {
 public:
  /// With `inOrder` a window never goes before one booked earlier on its link direction: a port hands
  /// bursts over in arrival order, so a schedule built call after call (a sharded plan, a training
  /// step) keeps each port's arrivals in the order their receives are placed.
  explicit LinkCalendar(size_t links, bool inOrder = false);
  /// The first start >= start at which every hop's window (start + offset, length long) is free.
  Cycle firstFit(const std::vector<std::pair<int, Cycle>>& hops, Cycle start, Cycle length) const;
  void reserve(const std::vector<std::pair<int, Cycle>>& hops, Cycle start, Cycle length);

 private:
  std::vector<std::vector<std::pair<Cycle, Cycle>>> busy_;
  bool inOrder_ = false;
};

/// scheduleCollective inside a larger schedule: chip c's units, streams and ports are free from
/// start[c] on (absolute cycles), links are booked in `calendar`; the programs hold absolute
/// issue cycles and only the chips the messages touch have instructions. With `wholeBursts` (a
/// collective alone) a receive takes its burst one vector a cycle once the last vector is in, at the
/// link's exact rate; without (a sharded plan, whose other work books bursts on the same ports),
/// it reads each vector as it arrives, one every ceil(t_vec) cycles. With `shareBodies` the programs
/// are pieces (isa::ProgramPiece) of instruction bodies held once for every chip that places the same
/// instructions in the same span (a ring's members), attributed to plan.origin; without, plain lists.
Expected<CollectiveSchedule> scheduleCollective(const CollectivePlan& plan, const topology::Cluster& cluster,
                                                const std::vector<Cycle>& start, LinkCalendar& calendar,
                                                bool wholeBursts = false, bool recordTransfers = true,
                                                bool shareBodies = false);

/// The alpha-beta time of REFERENCES.md for op on p chips of n bytes with per-message alpha and
/// per-byte beta (cycles): ring all-reduce 2(p-1)alpha + 2((p-1)/p) n beta, all-gather and
/// reduce-scatter (p-1)alpha + ((p-1)/p) n beta.
double alphaBetaCycles(CollectiveOp op, int p, double bytes, double alpha, double beta);

/// The on-chip turnaround of one ring step (cycles besides link latency and serialisation), from the chip spec.
Cycle ringTurnaroundCycles(const topology::ChipSpec& chip, bool reduce);

/// True for the graph of builtin:collective: a single op carrying a `collective` attribute.
bool isCollectiveBenchmark(const ir::Graph& graph);

/// Steps of a collective's plan scheduled so far, of all its steps.
using CollectiveProgress = std::function<void(std::int64_t done, std::int64_t total)>;

/// Plans and schedules the collective of a builtin:collective graph over the cluster (all chips, or
/// chips 0..K-1 with chips=K); errors name the parameter. `progress` hears each step scheduled. Stops
/// with support::interrupted() when support::cancelRequested() says so.
Expected<CollectiveSchedule> compileCollectiveBenchmark(const ir::Graph& graph, const topology::Cluster& cluster,
                                                        const CollectiveProgress& progress = {});

/// nccl-tests' bus-bandwidth factor: 2(n-1)/n all-reduce, (n-1)/n all-gather, reduce-scatter and all-to-all, 1 broadcast.
double busBandwidthFactor(CollectiveOp op, int n);

}  // namespace tsp::schedule
