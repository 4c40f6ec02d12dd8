// flight_recorder.h — the last actions of one rank, for the report when a run fails.
//
// The executor notes each action of its program as it starts and as it completes. When a rank
// stalls or fails, the report shows for every rank of this process the action it was in (and
// for how long) and the last ones it completed, so the stuck edge (rank a waits in RECV_F from
// rank b, which is still in its F) can be read off directly. Kept small and lock-free: each
// rank writes only its own recorder, and reports are made after the rank threads have joined,
// or, for a rank that does not come back, with its thread's state read from /proc.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

#include "host/schedule/ir.h"

namespace carousel {

// What the thread of a rank that does not come back is doing, read from Linux (/proc): a rank
// inside a communicator wait is blocked on another thread (a futex) and uses no CPU, one inside
// a computation runs. A slow simulated link's transfer holds a rank in such a wait, and was
// reported as "stuck in a computation".
enum class ThreadState {
  Unknown,   // no thread noted yet, or /proc unreadable
  Running,   // on a CPU: a computation
  Waiting,   // blocked on another thread (futex): a communication's completion, a lock
  Sleeping,  // a timed sleep (an injected stall)
  InIo,      // uninterruptible I/O (a file system)
};
const char* describe(ThreadState state);

class FlightRecorder {
 public:
  static constexpr int kKept = 256;  // completed actions remembered

  void start(std::int64_t step, std::int64_t index, const schedule::Action& action);
  void complete();
  void note(std::int64_t step, const std::string& what);  // e.g. "optimizer", "checkpoint"
  // A few lines: the action in progress (with seconds so far) and the last `last` completed.
  std::string report(int last = 5) const;
  // The state of the thread that noted the last action, sampled over `seconds` (Running as soon
  // as one sample runs: a computing thread blocks for moments, on a page or a worker).
  ThreadState thread_state(double seconds = 0.2) const;

 private:
  struct Entry {
    std::int64_t step = -1, index = -1;
    std::string what;
    std::chrono::steady_clock::time_point started, ended;
  };
  std::array<Entry, kKept> done_;
  std::int64_t completed_ = 0;  // entries ever completed
  Entry current_;
  bool in_progress_ = false;
  int thread_ = 0;  // Linux thread id of the rank's thread (std::atomic_ref: read by the monitor)
};

}  // namespace carousel
