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
#include <vector>

#include "collectives/communicator.h"

namespace carousel {

namespace detail {
struct LocalGroup;
}

// The shared state of `size` simulated ranks; hand communicator(r) to the thread of rank r.
// `link_bytes_per_second` > 0 simulates a link between the ranks: a group of sends and receives
// completes max(bytes sent, bytes received) / that speed after it matched (the rank's worker is
// busy meanwhile, its compute is not), so communication costs time against compute as between
// GPUs; collectives keep memory speed. 0: memory speed.
class LocalWorld {
 public:
  explicit LocalWorld(int size, double timeout_seconds = 300.0, double link_bytes_per_second = 0);
  int size() const;
  std::unique_ptr<Communicator> communicator(int rank) const;
  // A rank failed: operations waiting for ranks to arrive, now and later, fail at once with
  // `reason` ("rank 2 failed: ...") instead of waiting for the timeout. The first reason stays.
  void abort(const std::string& reason) const;

 private:
  std::shared_ptr<detail::LocalGroup> world_;
};

// What run_ranks does when a rank failed and others do not finish: a rank thread stuck inside
// a computation (not in a communicator wait, which the world's abort ends) cannot be stopped.
struct StuckRanks {
  double grace_seconds = 0;  // how long to wait for the others after the first failure; 0: forever
  // Called when the grace period ends with ranks still running (their numbers, the first
  // failure's message); the process then exits with status 2, since the stuck threads can be
  // neither joined nor destroyed. Report what is known here.
  std::function<void(const std::vector<int>& stuck, const std::string& failure)> report;
};

// Runs fn(rank) for rank = 0..size-1 on one thread each, joins them all, then rethrows the
// first exception (in time) if any rank threw. With `world`, a rank's failure aborts it, so the
// other ranks stop waiting for the failed one. A thread that cannot be started is an Error
// (the ranks already started are aborted and joined first).
void run_ranks(int size, const std::function<void(int rank)>& fn, const LocalWorld* world = nullptr,
               const StuckRanks& stuck = {});

}  // namespace carousel
