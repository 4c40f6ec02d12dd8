// flight_recorder.cpp — recording and formatting a rank's last actions, and reading the state of
// a rank's thread from /proc.
#include "host/reliability/flight_recorder.h"

#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

namespace carousel {

namespace {

int this_thread_id() {
  static thread_local const int id = int(::syscall(SYS_gettid));
  return id;
}

// One look at thread `id` of this process: its scheduler state and, when blocked, the system
// call it waits in (/proc/self/task/ID/stat and .../syscall).
ThreadState sample_thread(int id) {
  const std::string dir = fmt::format("/proc/self/task/{}/", id);
  std::ifstream stat(dir + "stat");
  std::string text;
  if (!std::getline(stat, text)) return ThreadState::Unknown;
  const auto paren = text.rfind(')');  // the name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= text.size()) return ThreadState::Unknown;
  const char state = text[paren + 2];
  if (state == 'R') return ThreadState::Running;
  if (state == 'D') return ThreadState::InIo;
  long call = -1;
  std::ifstream(dir + "syscall") >> call;
  if (call == SYS_futex) return ThreadState::Waiting;
  if (call == SYS_nanosleep || call == SYS_clock_nanosleep) return ThreadState::Sleeping;
  return state == 'S' ? ThreadState::Waiting : ThreadState::Unknown;
}

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

const char* describe(ThreadState state) {
  switch (state) {
    case ThreadState::Running:
      return "running on a CPU (a computation)";
    case ThreadState::Waiting:
      return "blocked waiting for another thread, using no CPU (a communication that has not "
             "completed, or a lock)";
    case ThreadState::Sleeping:
      return "sleeping (a timed sleep)";
    case ThreadState::InIo:
      return "in uninterruptible I/O (the file system)";
    case ThreadState::Unknown:
      break;
  }
  return "in an unknown state";
}

ThreadState FlightRecorder::thread_state(double seconds) const {
  const int id = std::atomic_ref<int>(const_cast<int&>(thread_)).load(std::memory_order_relaxed);
  if (id == 0) return ThreadState::Unknown;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  ThreadState seen = ThreadState::Unknown;
  do {
    const ThreadState now = sample_thread(id);
    if (now == ThreadState::Running) return now;
    if (now != ThreadState::Unknown) seen = now;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < end);
  return seen;
}

void FlightRecorder::start(std::int64_t step, std::int64_t index, const schedule::Action& action) {
  std::atomic_ref<int>(thread_).store(this_thread_id(), std::memory_order_relaxed);
  current_ = {step, index, schedule::to_string(action), std::chrono::steady_clock::now(), {}};
  in_progress_ = true;
}

void FlightRecorder::complete() {
  current_.ended = std::chrono::steady_clock::now();
  done_[completed_ % kKept] = current_;
  ++completed_;
  in_progress_ = false;
}

void FlightRecorder::note(std::int64_t step, const std::string& what) {
  std::atomic_ref<int>(thread_).store(this_thread_id(), std::memory_order_relaxed);
  current_ = {step, -1, what, std::chrono::steady_clock::now(), {}};
  in_progress_ = true;
}

std::string FlightRecorder::report(int last) const {
  const auto now = std::chrono::steady_clock::now();
  auto describe = [](const Entry& e) {
    return e.index >= 0 ? fmt::format("step {} action {} ({})", e.step, e.index, e.what)
                        : fmt::format("step {} {}", e.step, e.what);
  };
  std::string out = in_progress_ ? fmt::format("in {} for {:.3f} s", describe(current_),
                                               seconds_between(current_.started, now))
                                 : std::string("between actions");
  const std::int64_t first = std::max<std::int64_t>(0, completed_ - last);
  if (completed_ == 0) out += "; nothing completed yet";
  for (std::int64_t k = completed_ - 1; k >= first; --k) {
    const Entry& e = done_[k % kKept];
    out += fmt::format("{} {} ({:.3f} s)", k == completed_ - 1 ? "; completed:" : ",", describe(e),
                       seconds_between(e.started, e.ended));
  }
  return out;
}

}  // namespace carousel
