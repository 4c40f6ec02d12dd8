// stop_signals.cpp — async-signal-safe handlers: an atomic flag, a clock read, and write + _exit
// on a second request.
#include "host/reliability/stop_signals.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>

namespace carousel {

namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};
constexpr int kIgnoredSignals[] = {SIGPIPE, SIGXFSZ};
constexpr std::int64_t kRepeatWindowNs = 1'000'000'000;  // a repeat within 1 s is the same request

std::atomic<int> first_signal{0};
std::atomic<std::int64_t> first_signal_ns{0};
int installed = 0;  // nesting depth of StopSignals objects (train() runs on one thread)
struct sigaction previous[std::size(kStopSignals) + std::size(kIgnoredSignals)];

std::int64_t now_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void say(const char* text, std::size_t size) {
  [[maybe_unused]] const auto n = write(STDERR_FILENO, text, size);
}

void on_signal(int signal) {
  const int saved_errno = errno;  // write() below must not change what an interrupted call saw
  const std::int64_t now = now_ns();
  int expected = 0;
  if (first_signal.compare_exchange_strong(expected, signal)) {
    first_signal_ns = now;
    static const char message[] =
        "carousel: stop requested; finishing the step and saving a checkpoint (signal again "
        "after a second to exit at once)\n";
    say(message, sizeof(message) - 1);
    errno = saved_errno;
    return;
  }
  // 0: the first request's handler has not stored its time yet (it runs on another thread, or
  // this one interrupted it): the same request.
  const std::int64_t first = first_signal_ns.load();
  if (first == 0 || now - first < kRepeatWindowNs) {
    errno = saved_errno;
    return;
  }
  static const char message[] = "carousel: second signal; exiting now\n";
  say(message, sizeof(message) - 1);
  _exit(128 + signal);
}

}  // namespace

StopSignals::StopSignals() {
  if (installed++ > 0) return;
  first_signal = 0;
  first_signal_ns = 0;
  struct sigaction stop {};
  stop.sa_handler = on_signal;
  sigemptyset(&stop.sa_mask);
  for (const int s : kStopSignals) sigaddset(&stop.sa_mask, s);  // one handler at a time
  stop.sa_flags = SA_RESTART;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  std::size_t i = 0;
  for (const int s : kStopSignals) {
    // A signal the launcher set to be ignored stays ignored: `nohup` (SIGHUP) and background
    // jobs of a non-interactive shell (SIGINT) mean "do not stop on this".
    sigaction(s, nullptr, &previous[i]);
    if (s == SIGTERM || previous[i].sa_handler != SIG_IGN) sigaction(s, &stop, nullptr);
    ++i;
  }
  for (const int s : kIgnoredSignals) sigaction(s, &ignore, &previous[i++]);
}

StopSignals::~StopSignals() {
  if (--installed > 0) return;
  std::size_t i = 0;
  for (const int s : kStopSignals) sigaction(s, &previous[i++], nullptr);
  for (const int s : kIgnoredSignals) sigaction(s, &previous[i++], nullptr);
}

int StopSignals::received() { return first_signal.load(); }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

}  // namespace carousel
