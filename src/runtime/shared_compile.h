// Compiles shared over the MPI ranks: a batch's jobs dealt round-robin, each compiled on one rank, every
// compiled shard broadcast to all.
#pragma once

#include <mpi.h>

#include "compile/schedule/shard_compiler.h"

namespace tsp::runtime {

/// A batch compiler (schedule::ShardBatchCompiler) over the ranks of comm: job i is compiled on rank
/// i mod ranks, and its shard (or error) is broadcast from there, so that every rank returns the same
/// result as compileShards would. Every rank must call it with the same batch.
schedule::ShardBatchCompiler sharedCompiler(MPI_Comm comm);

}  // namespace tsp::runtime
