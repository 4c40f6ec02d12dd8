// common.h — what every Communicator implementation shares.
//
// - Rank-order reductions on host memory (host_reduction.cpp): out = ((in_0 op in_1) op in_2)
//   op ..., then / size for avg. The local and MPI communicators both reduce this way, so their
//   results are bitwise equal to each other on every rank and every run.
// - Worker: a thread that runs tasks in the order they were enqueued — the host-side stand-in
//   for a communication stream.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"

namespace carousel::comm {

// What every rank must agree on for its k-th collective.
struct Signature {
  Signature(std::string o, std::int64_t c, DType d, int r = -1, std::string red = {})
      : op(std::move(o)), count(c), dtype(d), root(r), reduce(std::move(red)) {}
  std::string op;
  std::int64_t count;
  DType dtype;
  int root;
  std::string reduce;
  bool operator==(const Signature&) const = default;
  std::string str() const;  // "all_reduce(count=8, int32, sum)"
};

// out[i] = ((inputs[0][i] op inputs[1][i]) op inputs[2][i]) op ..., in rank order, then / the
// rank count for avg (integers: truncated toward zero, as NCCL); n elements of dtype each.
// 16-bit floats combine in float32 and round back to nearest even after every rank; integers
// wrap around. The only host reduction loop: the local and MPI communicators both call it.
// `out` may be inputs[0], not a later input.
void reduce_in_rank_order(DType dtype, ReduceOp op, const std::vector<const void*>& inputs,
                          void* out, std::int64_t n);

class Worker {
 public:
  Worker();
  ~Worker();  // finishes the queued tasks, then joins
  // Runs body on the worker thread, destroys it (and so the tensors it holds: their owner may
  // free its allocator as soon as it sees the operation done), then completes every event in
  // `done` with body's exception, if it threw.
  void enqueue(std::function<void()> body, std::vector<Event> done);

 private:
  struct Task {
    std::function<void()> body;
    std::vector<Event> done;
  };
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::queue<Task> tasks_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace carousel::comm
