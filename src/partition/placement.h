// Placement of a plan's ranks on chips: TP groups tight, PP neighbours close, DP replicas on the rest.
#pragma once

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
CandidateLinks linkFigures(const topology::Cluster& cluster, const std::vector<int>& placement, int dp, int tp,
                           int pp, int interleave, bool allGroups);

/// Hops and link load of a placement for one iteration of a plan.
struct PlacementReport {
  double tpAverageHops = 0;  ///< over the ring edges of every TP group
  int tpMaxHops = 0;
  double ppAverageHops = 0;  ///< over every stage-to-stage route
  int ppMaxHops = 0;
  Bytes busiestLinkBytes = 0;  ///< bytes per iteration on the busiest link direction
  int busiestLink = -1;
  int linksUsed = 0;           ///< links carrying any traffic
};

/// Routes every TP ring edge (tpEdgeBytes each) and every stage-to-stage send (ppEdgeBytes[s]
/// from stage s to s + 1 of each pipeline) on real routes and reports hops and link load.
PlacementReport reportPlacement(const topology::Cluster& cluster, const std::vector<int>& placement, int dp, int tp,
                                int pp, Bytes tpEdgeBytes, const std::vector<Bytes>& ppEdgeBytes);

}  // namespace tsp::partition
