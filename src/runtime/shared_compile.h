// Compiles shared over the MPI ranks: a batch's jobs dealt over the ranks by size, each compiled on
// one rank, every result broadcast to all.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <mpi.h>

#include "compile/schedule/shard_compiler.h"
#include "partition/model_profile.h"

namespace tsp::runtime {

/// The rank that runs each job: the heaviest job first, each to the rank with the least weight
/// dealt so far (the lower rank on a tie). The same on every rank.
std::vector<int> dealJobs(const std::vector<std::int64_t>& weights, int ranks);

/// Runs the jobs dealt to this rank (dealJobs), waits for every rank without spinning, then gives
/// every job's bytes to all ranks: element i is run(i) as its rank made it. progress is told
/// (done, this rank's share) after each job run here. Collective: every rank passes the same weights.
std::vector<std::string> runShared(MPI_Comm comm, const std::vector<std::int64_t>& weights,
                                   const std::function<std::string(size_t)>& run,
                                   const support::ProgressFn& progress = {});

/// A batch compiler (schedule::ShardBatchCompiler) over the ranks of comm: each job compiled on one
/// rank (dealJobs by its op count), so that every rank returns the same result as compileShards
/// would. Every rank must call it with the same batch.
schedule::ShardBatchCompiler sharedCompiler(MPI_Comm comm);

/// The profile's layer compiles (partition::LayerCompileBatch) shared over the ranks of comm the same
/// way: every rank returns what partition::compileLayers would.
partition::LayerCompileBatch sharedLayerCompiler(MPI_Comm comm);

}  // namespace tsp::runtime
