// local_communicator.h — N ranks as threads of one process, exchanging CPU memory.
//
// Behaves like NCCL where it matters for correctness: collectives on a communicator match in
// issue order across ranks, sends and receives between two ranks match in issue order, every
// operation runs on the rank's own communication worker (asynchronously, in issue order), and
// reductions add in rank order (so results are bitwise identical on every rank and every run).
// Unlike NCCL it checks: the k-th operation of every rank must have the same signature (op,
// count, dtype, root, reduction) and a send the same size as its receive; a mismatch is an error
// naming the ranks, the sequence number and both signatures. Any wait longer than the timeout
// fails with the rank, the operation, its sequence number and the ranks that have not arrived.
// Tensors may live in any device's memory: memory the CPU cannot touch (a GPU's) moves through
// host copies (DeviceAllocator::copy_to_host / copy_from_host), so several logical devices on
// one GPU can run the multi-device code — correct, not fast (NCCL is the fast path).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "collectives/communicator.h"

namespace carousel {

namespace detail {
struct LocalGroup;
}

// The shared state of `size` simulated ranks; hand communicator(r) to the thread of rank r.
class LocalWorld {
 public:
  explicit LocalWorld(int size, double timeout_seconds = 300.0);
  int size() const;
  std::unique_ptr<Communicator> communicator(int rank) const;
  // A rank failed: operations waiting for ranks to arrive, now and later, fail at once with
  // `reason` ("rank 2 failed: ...") instead of waiting for the timeout. The first reason stays.
  void abort(const std::string& reason) const;

 private:
  std::shared_ptr<detail::LocalGroup> world_;
};

// Runs fn(rank) for rank = 0..size-1 on one thread each, joins them all, then rethrows the
// first exception (in time) if any rank threw. With `world`, a rank's failure aborts it, so the
// other ranks stop waiting for the failed one.
void run_ranks(int size, const std::function<void(int rank)>& fn,
               const LocalWorld* world = nullptr);

}  // namespace carousel
