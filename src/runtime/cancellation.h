// Stopping a run on a signal: a signal caught by any rank reaches every rank within milliseconds,
// and the ranks agree to stop at the same point, so that none waits in a collective the others left.
#pragma once

#include <csignal>
#include <vector>

#include <mpi.h>

namespace tsp::runtime {

/// One run's view of the stop signal. A rank that sees the signal sends a note to every other rank
/// (non-blocking, on a communicator of its own); poll() looks at the signal and the notes without
/// blocking. Long loops stop early on poll() (support::cancelRequested), but every rank still
/// reaches the next agree(): code between two agree() calls must make the same collectives on every
/// rank whether or not it stopped early, and a choice that changes the collectives reads agree().
class CancelWatch {
 public:
  /// Collective over comm.
  CancelWatch(MPI_Comm comm, const volatile std::sig_atomic_t* signal);
  CancelWatch(const CancelWatch&) = delete;
  CancelWatch& operator=(const CancelWatch&) = delete;
  ~CancelWatch();

  /// Local and non-blocking: a signal here, a note from another rank, or an earlier agreement.
  bool poll();
  /// Collective: whether any rank wants to stop. Once true it stays true without communicating.
  bool agree();
  /// Collective, once, before MPI_Finalize: receives the notes still in flight, completes the sends.
  void finish();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  const volatile std::sig_atomic_t* signal_;
  int rank_ = 0, ranks_ = 1;
  int note_ = 1, incomingNote_ = 0;
  MPI_Request incoming_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> sends_;
  bool sent_ = false, received_ = false, agreed_ = false;
};

}  // namespace tsp::runtime
