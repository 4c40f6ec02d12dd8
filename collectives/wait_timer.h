// wait_timer.h — how long a rank has waited for its peers, not counting stretches in which this
// process did not run at all.
//
// A collective timeout is meant to catch a peer that fell behind or died. When a whole job is
// paused — Ctrl-Z on mpirun, SIGSTOP / SIGCONT from a scheduler, a VM paused by its host — every
// process stops and resumes together: the wall clock jumps by the pause, yet no peer is behind,
// and a wait measured by wall time alone would fail the moment the job resumes. A waiting thread
// polls often (the MPI communicator every 200 us at most, the NCCL watchdog every 50 ms), so a
// gap of more than kPauseGap between two of its polls means this process was not running: that
// gap is left out. A peer stopped alone still times out at the others, whose polls go on.
#pragma once

#include <chrono>

namespace carousel {

class WaitTimer {
 public:
  using Clock = std::chrono::steady_clock;
  // Far longer than any poll interval or scheduling delay of a running process.
  static constexpr std::chrono::milliseconds kPauseGap{1000};

  explicit WaitTimer(Clock::time_point start = Clock::now()) : start_(start), last_(start) {}

  // Seconds waited up to `now`; call it at every poll.
  double waited(Clock::time_point now = Clock::now()) {
    if (now - last_ > kPauseGap) paused_ += now - last_;
    last_ = now;
    return std::chrono::duration<double>(now - start_ - paused_).count();
  }
  // The length of the pause that ended at `now`, if the last poll was before it (zero
  // otherwise); for callers that keep their own start times (the NCCL watchdog).
  Clock::duration pause_before(Clock::time_point now = Clock::now()) {
    const Clock::duration gap = now - last_;
    last_ = now;
    return gap > kPauseGap ? gap : Clock::duration::zero();
  }

 private:
  Clock::time_point start_, last_;
  Clock::duration paused_{};
};

}  // namespace carousel
