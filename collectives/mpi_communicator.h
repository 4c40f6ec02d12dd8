// mpi_communicator.h — the Communicator for ranks that are separate processes (mpirun), moving
// CPU memory with MPI.
//
// Semantics are the local communicator's: each communicator has a worker thread that runs its
// operations in issue order (nonblocking MPI calls, polled with a bounded wait), collectives of
// every rank are checked to have the same signature before they run (a mismatch names the
// ranks, the sequence number and both signatures), reductions add in rank order (all-to-all,
// then a local sum), so results are bitwise equal to the threaded run. Built only with MPI
// (CAROUSEL_MPI); MPI must provide MPI_THREAD_MULTIPLE (Open MPI does).
#pragma once

#include <memory>

#include "collectives/communicator.h"

namespace carousel {

// MPI's lifetime in this process: MPI_Init_thread in the constructor, MPI_Finalize in the
// destructor. Create it once, before any MPI communicator, and destroy those first.
class MpiRuntime {
 public:
  MpiRuntime();
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int rank() const;
  int size() const;
  // Every process of the job (a private duplicate of MPI_COMM_WORLD).
  std::unique_ptr<Communicator> world(double timeout_seconds = 300.0) const;
  // Ends the whole job: after a fatal error on one rank the others would otherwise wait for it.
  [[noreturn]] static void abort(int code);
};

}  // namespace carousel
