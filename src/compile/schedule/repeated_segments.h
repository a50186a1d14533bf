// A shard's repeated layers: its tasks cut at layer boundaries, and the
// segments that repeat one another.
#pragma once

#include <string>
#include <vector>

#include "compile/lower/lowering.h"

namespace tsp::schedule {

/// The tasks of a lowered shard cut into segments: runs of consecutive tasks
/// whose ops are in one graph layer (isa::OpOrigin::layer; a task without an op
/// joins the run it is in).
struct ShardSegments {
  std::vector<int> begin; ///< segment s holds tasks [begin[s], begin[s + 1]);
                          ///< begin.back() = tasks
  std::vector<int> representative; ///< per segment: the first segment with its
                                   ///< key (itself when it is the first)
  int count() const { return static_cast<int>(representative.size()); }
  /// Segments that are their own representative: the ones a search runs on.
  int distinct() const;
  /// Do segments a and b repeat one another?
  bool same(int a, int b) const {
    return representative[a] == representative[b];
  }
};

/// What the scheduler searches of tasks [begin, end) of a problem, task and
/// step indices relative to `begin`: every step's opcode, function, repeat,
/// interval, stride and producers, its unit's kind (an MXM unit's role: install
/// or compute), the tasks' releases and deadlines, and the MXM plane runs
/// (first install, first and last compute). Left out: which MEM slice, address,
/// MXM plane, SXM hemisphere or ALU group each step uses, and the dependences
/// through SRAM: that is where the lowering placed the layer in the whole shard
/// (a repeated layer's tensors sit elsewhere, and with them the time of flight
/// of its steps and the space it reuses); the schedule of the whole shard
/// honours them.
std::string
segmentTaskKey(const Problem &problem,
               const std::vector<std::vector<lower::PlaneRun>> &planeRuns,
               int begin, int end);

/// The shard's segments and which repeat one another (equal segmentTaskKey).
ShardSegments shardSegments(const lower::LoweredShard &shard);

/// Tasks [begin, end) of a lowered shard as a shard of their own: the
/// dependences inside the range, the plane runs in it (each plane's in the
/// shard's order), the busiest plane's computes. Its allocator is a fresh one:
/// the segment is scheduled, never spilled.
std::unique_ptr<lower::LoweredShard>
segmentShard(const lower::LoweredShard &shard, int begin, int end);

} // namespace tsp::schedule
