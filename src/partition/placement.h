// Placement of a plan's ranks on chips: TP groups tight, PP neighbours close, DP replicas on the rest.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "partition/cost_model.h"
#include "support/expected.h"
#include "topology/cluster.h"

namespace tsp::partition {

/// The cluster's chips in an order where consecutive chips are close: chip-id order for the
/// dragonfly (ids go node by node, rack by rack), otherwise METIS nested bisection of the link
/// graph (clusters up to 4096 chips; id order beyond).
Expected<std::vector<int>> localityOrder(const topology::Cluster& cluster);

/// The chip of every plan rank r = (d pp + s) tp + t (replica d, stage s, TP rank t): consecutive
/// slices of `order`, so TP groups take the closest chips, stages the next, replicas the rest.
/// A pure pipeline (dp = tp = 1) takes a path of directly linked chips when one exists.
Expected<std::vector<int>> placePlan(const topology::Cluster& cluster, const std::vector<int>& order, int dp, int tp,
                                     int pp);

/// Alpha-beta figures of the TP rings and the stage-to-stage sends of a placement. With allGroups,
/// contention counts the messages of every group that run at once; otherwise those of the first
/// TP group and the first pipeline only (cheap screening of large clusters).
/// With grid, a TP group of q x q ranks communicates along the rows and columns of its grid (2D split).
/// With sharedLinks (a training step), CandidateLinks::shared routes every kind of message at once.
/// `fits`, when given, keeps each TP group's all-reduce fit (LinkFigures::fitPoints) by its chips
/// across calls on the same cluster (the stages of many candidates share their groups).
using GroupFits = std::map<std::vector<int>, std::vector<std::pair<double, double>>>;
CandidateLinks linkFigures(const topology::Cluster& cluster, const std::vector<int>& placement, int dp, int tp,
                           int pp, int interleave, bool allGroups, bool grid = false, bool sharedLinks = false,
                           GroupFits* fits = nullptr);

/// The all-reduce of a group the scheduler runs hierarchically (whole dragonfly nodes) or as a
/// multi-ring (every chip of a ring, torus or mesh) as the scheduler times it at a few sizes per chip
/// (LinkFigures::fitPoints); empty for any other group. Kept in `fits` by the group's chips.
std::vector<std::pair<double, double>> groupFit(const topology::Cluster& cluster, const std::vector<int>& chips,
                                                GroupFits* fits = nullptr);

/// The (rank, rank) pairs of one TP group that exchange messages: its ring (t, t + 1 mod tp), or
/// with grid (tp = q x q) the rings of every row and column of the grid; a ring of two lists both directions.
std::vector<std::pair<int, int>> tpNeighbours(int tp, bool grid);

/// Hops and link load of a placement for one iteration of a plan.
struct PlacementReport {
  double tpAverageHops = 0;  ///< over the ring edges of every TP group
  int tpMaxHops = 0;
  double ppAverageHops = 0;  ///< over every stage-to-stage route
  int ppMaxHops = 0;
  Bytes busiestLinkBytes = 0;  ///< bytes per iteration on the busiest link direction
  int busiestLink = -1;
  int linksUsed = 0;           ///< links carrying any traffic
  double traffic = 0;          ///< bytes x hops per iteration, over the communication graph
  std::string method;          ///< how the ranks were placed: "locality order", "metis (communication graph)", "pipeline path"
};

/// The communication graph of a plan: a vertex per rank (d pp + s) tp + t, an edge between TP ring
/// neighbours (tpEdgeBytes) and between a rank and its next stage's (ppEdgeBytes[s]), bytes per iteration.
struct CommunicationGraph {
  int ranks = 0;
  std::vector<std::map<int, Bytes>> edges;  ///< per rank: neighbour -> bytes (symmetric)
};
CommunicationGraph communicationGraph(int dp, int tp, int pp, Bytes tpEdgeBytes, const std::vector<Bytes>& ppEdgeBytes,
                                      bool grid = false);

/// Bytes x hops of a placement's communication graph on the cluster's routes (what placement minimises).
double placementTraffic(const topology::Cluster& cluster, const std::vector<int>& placement,
                        const CommunicationGraph& graph);

/// Maps the communication graph onto `chips` (dp tp pp of them, in locality order) by dual recursive
/// bisection: METIS splits the ranks in two halves of the sizes the chip slice splits into (its
/// halves are compact: the locality order is a nested bisection of the links), cutting the least
/// traffic; each half is placed on its half of the chips in turn. Returns the chip of every rank.
Expected<std::vector<int>> mapCommunicationGraph(const CommunicationGraph& graph, const std::vector<int>& chips);

/// Routes every TP ring edge (tpEdgeBytes each) and every stage-to-stage send (ppEdgeBytes[s]
/// from stage s to s + 1 of each pipeline) on real routes and reports hops and link load.
PlacementReport reportPlacement(const topology::Cluster& cluster, const std::vector<int>& placement, int dp, int tp,
                                int pp, Bytes tpEdgeBytes, const std::vector<Bytes>& ppEdgeBytes, bool grid = false);

}  // namespace tsp::partition
