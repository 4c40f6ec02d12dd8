// nccl_communicator.h — the Communicator on NCCL: ranks are threads of this process, one GPU
// each (rank r on GPU r % visible GPUs), tensors in that GPU's memory (a CudaBackend's).
//
// Every operation is enqueued on the communicator's own CUDA stream, after a wait for the work
// queued so far on its tensors' device streams (the rank's compute stream: what wrote them, or
// still reads them), and returns an Event that completes when the stream reaches it
// (cudaLaunchHostFunc); the executor waits for that Event before computing on what arrived and
// keeps sent buffers alive until it. A watchdog thread polls
// ncclCommGetAsyncError and the timeout; on either it aborts the communicator (ncclCommAbort)
// and fails every pending Event with a message naming the rank, the operation and its sequence
// number — a hang becomes an error. Built only with CUDA and NCCL (CAROUSEL_NCCL).
#pragma once

#include <memory>

#include "collectives/communicator.h"
#include "collectives/rendezvous.h"

namespace carousel {

// The GPU of a process that is rank `rank` of a multi-process job: LOCAL_RANK when set, else
// rank % visible GPUs. Throws when no GPU is visible or LOCAL_RANK is not one.
int process_gpu(int rank);

class NcclWorld {
 public:
  // Creates the NCCL unique id shared by the `size` ranks of this process.
  NcclWorld(int size, double timeout_seconds = 300.0);
  ~NcclWorld();
  int size() const;
  // Called by every rank's thread at the same time (ncclCommInitRank is collective).
  std::unique_ptr<Communicator> communicator(int rank) const;

  // Multi-process: this process is rank cfg.rank of cfg.world_size (launched with RANK,
  // WORLD_SIZE, MASTER_ADDR, MASTER_PORT; see rendezvous.h). Rank 0 creates the NCCL id and
  // sends it to the others over TCP. The GPU is LOCAL_RANK when set, else rank % visible GPUs.
  static std::unique_ptr<Communicator> connect(const RendezvousConfig& cfg);
  // Multi-process under mpirun: the NCCL id travels over `processes` (the MPI communicator,
  // host memory) from its rank 0; this process's NCCL rank is its rank there.
  static std::unique_ptr<Communicator> connect(Communicator& processes, double timeout_seconds);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace carousel
