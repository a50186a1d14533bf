// Stream-register allocation: Chaitin-Briggs colouring of the 32+32 stream registers, per direction.
#pragma once

#include <vector>

#include "compile/problem/problem.h"

namespace tsp::alloc {

/// The interference graph of one schedule's stream edges: two edges interfere when they are in
/// the same direction and their moving-frame ranges overlap (schedule::streamEdgesConflict).
struct InterferenceGraph {
  std::vector<std::vector<int>> neighbours;  ///< per stream edge, sorted
};

/// Builds the interference graph of the edges of a scheduled problem.
InterferenceGraph buildInterference(const schedule::Problem& problem, const schedule::Schedule& schedule);

/// The result of colouring: a register per edge (-1 for spilled edges) and the spilled edges.
struct StreamColouring {
  std::vector<int> streamId;   ///< per stream edge
  std::vector<int> spilled;    ///< edges that got no register, in index order
  int registersUsed[2] = {0, 0};  ///< per direction (east, west)
};

/// Chaitin-Briggs: simplify nodes of degree < K, else push the one of least spill cost
/// (load+store)*freq/degree optimistically; select colours in reverse; a node left without a
/// colour is spilled. `freq` is the edge's vector count. Deterministic: ties go to the lowest index.
StreamColouring colourGraph(const InterferenceGraph& graph, const std::vector<double>& freq, int registers);

/// Colours the edges of a scheduled problem with the chip's streamsPerDirection registers.
StreamColouring colourStreams(const schedule::Problem& problem, const schedule::Schedule& schedule);

}  // namespace tsp::alloc
