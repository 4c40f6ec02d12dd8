// stop_signals.cpp — async-signal-safe handlers: an atomic flag, and write + _exit on a second.
#include "host/reliability/stop_signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace carousel {

namespace {

std::atomic<int> first_signal{0};
struct sigaction previous_term, previous_int;

void on_signal(int signal) {
  int expected = 0;
  if (first_signal.compare_exchange_strong(expected, signal)) {
    static const char message[] =
        "carousel: stop requested; finishing the step and saving a checkpoint (signal again "
        "to exit at once)\n";
    [[maybe_unused]] const auto n = write(STDERR_FILENO, message, sizeof(message) - 1);
    return;
  }
  static const char message[] = "carousel: second signal; exiting now\n";
  [[maybe_unused]] const auto n = write(STDERR_FILENO, message, sizeof(message) - 1);
  _exit(128 + signal);
}

}  // namespace

StopSignals::StopSignals() {
  first_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, &previous_term);
  sigaction(SIGINT, &action, &previous_int);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &previous_term, nullptr);
  sigaction(SIGINT, &previous_int, nullptr);
}

int StopSignals::received() { return first_signal.load(); }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "a signal";
  }
}

}  // namespace carousel
