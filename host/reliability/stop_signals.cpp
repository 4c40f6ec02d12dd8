// stop_signals.cpp — async-signal-safe handlers: atomic flags, a clock read, and write + _exit
// on a second request.
#include "host/reliability/stop_signals.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace carousel {

namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
constexpr int kIgnoredSignals[] = {SIGPIPE, SIGXFSZ};
constexpr std::int64_t kRepeatWindowNs = 1'000'000'000;  // a repeat within 1 s is the same request

std::atomic<int> first_signal{0};
// When the first SIGTERM, SIGINT or SIGHUP came (0: none yet); SIGUSR1 never sets it, so the
// second-signal rule counts from the first signal that is more than a warning.
std::atomic<std::int64_t> first_order_ns{0};
std::atomic<bool> failing{false};
// The process's parent when it is Open MPI's launcher (mpirun, or orted on another node), else
// 0. Open MPI sends SIGTERM itself only to end the job — after a process called MPI_Abort, or when
// mpirun was signalled — and SIGKILL after a grace period; such a SIGTERM is said as what it is.
pid_t mpirun_parent = 0;
int installed = 0;  // nesting depth of StopSignals objects (train() runs on one thread)
struct sigaction previous[std::size(kStopSignals) + std::size(kIgnoredSignals)];

std::int64_t now_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

template <std::size_t N>
void say(const char (&text)[N]) {
  if (failing.load()) return;  // the error that ends the process says what happens instead
  [[maybe_unused]] const auto n = write(STDERR_FILENO, text, N - 1);
}

void on_signal(int signal, siginfo_t* info, void* /*context*/) {
  const int saved_errno = errno;  // write() below must not change what an interrupted call saw
  const std::int64_t now = now_ns();
  int expected = 0;
  const bool first = first_signal.compare_exchange_strong(expected, signal);
  if (signal == SIGUSR1) {  // a warning: said once, never an exit at once
    if (first) {
      say("carousel: SIGUSR1 (the scheduler's warning that the time limit is near): finishing "
          "the step, saving a checkpoint and exiting 0\n");
    }
    errno = saved_errno;
    return;
  }
  // `expected` holds the first signal when this is not it.
  const bool after_warning = !first && expected == SIGUSR1;
  std::int64_t order = 0;
  if (first_order_ns.compare_exchange_strong(order, now)) {
    if (after_warning) {
      say("carousel: stop requested after the SIGUSR1 warning; still finishing the step and "
          "saving a checkpoint (signal again after a second to exit at once)\n");
    } else if (signal == SIGTERM && mpirun_parent > 0 && info != nullptr &&
               info->si_code == SI_USER && info->si_pid == mpirun_parent) {
      say("carousel: SIGTERM from mpirun, which is ending the job (a process failed, or mpirun "
          "was signalled); finishing the step and saving a checkpoint if mpirun waits that long "
          "(--mca odls_base_sigkill_timeout)\n");
    } else {
      say("carousel: stop requested; finishing the step and saving a checkpoint (signal again "
          "after a second to exit at once)\n");
    }
    errno = saved_errno;
    return;
  }
  // `order` holds the first order's time: a repeat within the window is the same request (a
  // wrapper forwarding Ctrl-C twice, or two threads of this process taking one signal each).
  if (now - order < kRepeatWindowNs) {
    errno = saved_errno;
    return;
  }
  static const char message[] = "carousel: second signal; exiting now\n";
  [[maybe_unused]] const auto n = write(STDERR_FILENO, message, sizeof(message) - 1);
  _exit(128 + signal);
}

// Read once, when the handlers are installed (the handler may not open files).
pid_t parent_if_mpirun() {
  const pid_t parent = getppid();
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/comm", int(parent));
  std::FILE* file = std::fopen(path, "r");
  if (file == nullptr) return 0;
  char name[32] = {};
  const bool read = std::fgets(name, sizeof(name), file) != nullptr;
  std::fclose(file);
  if (!read) return 0;
  name[std::strcspn(name, "\n")] = '\0';
  for (const char* launcher : {"mpirun", "mpiexec", "orterun", "orted", "prterun", "prted"}) {
    if (std::strcmp(name, launcher) == 0) return parent;
  }
  return 0;
}

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (const int s : kStopSignals) sigaddset(&set, s);
  return set;
}

}  // namespace

StopSignals::StopSignals() {
  if (installed++ > 0) return;
  first_signal = 0;
  first_order_ns = 0;
  failing = false;
  mpirun_parent = parent_if_mpirun();
  struct sigaction stop {};
  stop.sa_sigaction = on_signal;
  stop.sa_mask = stop_signal_set();  // one handler at a time
  stop.sa_flags = SA_RESTART | SA_SIGINFO;
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

void StopSignals::note_failing() { failing = true; }

void block_stop_signals() {
  const sigset_t set = stop_signal_set();
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

void unblock_stop_signals() {
  const sigset_t set = stop_signal_set();
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
}

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}

}  // namespace carousel
