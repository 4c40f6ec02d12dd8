// overlapped_pair.h — DualPipe's F&B pair on one rank: two compute actions of different
// microbatches take turns on the rank's compute, so that each one's expert exchanges (the MoE
// rows' all-to-alls, models/parallel/expert_parallel.h) are in flight while the other computes.
//
// The halves run on two threads, only one at a time (a baton): the calling thread runs the
// first (the F), the executor's pair thread (PairThread) the second (the B or I). A half computes
// until it has posted an exchange, then hands the compute to the other half; when its turn comes
// back it waits for what is left of its exchange and goes on. A half that finishes hands over for
// good. Where the halves switch is fixed by the program (at their exchanges, the same on every rank
// of an expert group), so every communicator sees the same order of operations on every rank and
// the numbers are bitwise those of running the halves one after the other. One action alone (no
// pair) runs the same way on the calling thread, waiting for each exchange at once. The cost model
// takes the same turns (host/schedule/simulate.h); schedule::takes_turns says which pairs do.
//
// The second half runs on the executor's PairThread, started at its first pair and kept (a
// thread, and its OpenMP pool, made once).
//
// Traced (a profiled step): each half's compute parts (split at its exchanges), the waits for
// its exchanges' unfinished rest, each exchange from posting to completion, and each hand-over
// from the half that passed the turn to the other's waking up (a thread switch; the cost model
// charges its calibrated mean at every turn: Costs::turn).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "host/report/step_trace.h"
#include "models/parallel/expert_parallel.h"

namespace carousel {

// The thread that runs a pair's second half, kept for the executor's lifetime (a thread, and its
// OpenMP pool, started once rather than per pair).
class PairThread {
 public:
  PairThread();
  ~PairThread();
  PairThread(const PairThread&) = delete;
  PairThread& operator=(const PairThread&) = delete;
  void run(std::function<void()> job);  // starts `job` (which must not throw) on the thread
  void wait();                          // until it has returned

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> job_;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts once the members above exist
};

struct TurnHalf {
  schedule::Action action;                       // the compute action, for the trace
  std::function<void(ExchangeWaiter&)> compute;  // runs it, waiting for exchanges through this
};

// Runs one or two halves as above and returns when all have finished; rethrows the first error
// (a half that fails stops its partner at the partner's next exchange, before it posts another).
// `trace`: nullptr, or the profiled step's; `synchronize` then makes the device finish its
// queued work before each time is taken.
// `second`: the thread that runs a second half (unused, may be nullptr, for one half).
void take_turns(const std::vector<TurnHalf>& halves, StepTrace* trace,
                const std::function<void()>& synchronize, PairThread* second);

}  // namespace carousel
