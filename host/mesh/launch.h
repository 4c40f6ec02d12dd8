// launch.h — how this process takes part in a run: alone, with every device a thread of it (the
// default), or as one rank of a job that mpirun started, one device per process.
//
//   carousel train cfg.yml                 D x E x S x F x T x C threads
//   mpirun -np 4 carousel train cfg.yml    4 processes, one rank each (D x E x S x F x T x C = 4)
//
// In a job, errors on any rank end every process (MPI_Abort) instead of leaving the others
// waiting for a rank that is gone.
#pragma once

#include <memory>

#include "collectives/communicator.h"

namespace carousel {

class ProcessGroup {
 public:
  // Joins the mpirun job this process belongs to (MPI_Init, the world communicator), or forms a
  // group of one when no launcher started it. Started by mpirun in a build without MPI: an error
  // that says how to fix it.
  static std::unique_ptr<ProcessGroup> join(double timeout_seconds);
  ~ProcessGroup();

  int rank() const;
  int size() const;
  // Every process of the job; nullptr when this process is alone.
  Communicator* world() const;
  // Ends every process of the job with `code` (returns normally when alone).
  void abort(int code) const;

 private:
  ProcessGroup();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace carousel
