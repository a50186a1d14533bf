#include "runtime/cancellation.h"

namespace tsp::runtime {

namespace {
constexpr int kNoteTag = 7;
}

CancelWatch::CancelWatch(MPI_Comm comm, const volatile std::sig_atomic_t* signal) : signal_(signal) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &ranks_);
  if (ranks_ > 1) MPI_Irecv(&incomingNote_, 1, MPI_INT, MPI_ANY_SOURCE, kNoteTag, comm_, &incoming_);
}

CancelWatch::~CancelWatch() {
  // finish() was not reached (the job is aborting): nothing here may block.
  if (comm_ != MPI_COMM_NULL && incoming_ != MPI_REQUEST_NULL) MPI_Request_free(&incoming_);
}

bool CancelWatch::poll() {
  const bool signalled = signal_ && *signal_;
  if (signalled && !sent_) {
    sent_ = true;
    for (int r = 0; r < ranks_; ++r)
      if (r != rank_) {
        sends_.emplace_back();
        MPI_Isend(&note_, 1, MPI_INT, r, kNoteTag, comm_, &sends_.back());
      }
  }
  if (!received_ && incoming_ != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_Test(&incoming_, &done, MPI_STATUS_IGNORE);
    received_ = done != 0;
  }
  return signalled || received_ || agreed_;
}

bool CancelWatch::agree() {
  if (agreed_) return true;
  int mine = poll() ? 1 : 0, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm_);
  agreed_ = any != 0;
  return agreed_;
}

void CancelWatch::finish() {
  if (comm_ == MPI_COMM_NULL) return;
  // Every rank that sent a note sent one to each other rank: receive exactly those still in flight.
  int sent = sent_ ? 1 : 0, senders = 0;
  MPI_Allreduce(&sent, &senders, 1, MPI_INT, MPI_SUM, comm_);
  int expected = senders - sent;
  if (received_) --expected;
  if (incoming_ != MPI_REQUEST_NULL) {
    if (expected > 0) {
      MPI_Wait(&incoming_, MPI_STATUS_IGNORE);
      --expected;
    } else {
      MPI_Cancel(&incoming_);
      MPI_Wait(&incoming_, MPI_STATUS_IGNORE);
    }
  }
  for (; expected > 0; --expected)
    MPI_Recv(&incomingNote_, 1, MPI_INT, MPI_ANY_SOURCE, kNoteTag, comm_, MPI_STATUS_IGNORE);
  MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE);
  sends_.clear();
  MPI_Comm_free(&comm_);
}

}  // namespace tsp::runtime
