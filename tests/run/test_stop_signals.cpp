// test_stop_signals.cpp — the stop signals' rules that a whole run does not show
// (host/reliability/stop_signals.h): SIGUSR1 as a warning that never ends the process at once,
// a signal held blocked from start-up handled once unblocked, and a failing process that does
// not announce a stop. The runs themselves: tests/end_to_end/signals/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "host/reliability/stop_signals.h"

namespace carousel {
namespace {

void say(const char* text) {
  [[maybe_unused]] const auto n = write(STDERR_FILENO, text, std::strlen(text));
}

// Slurm's SIGUSR1 at the warning time, repeated, then its SIGTERM at the time limit: neither the
// repeat nor that SIGTERM ends the process (the save the warning asked for may still be running);
// a second SIGTERM more than a second after the first one does, with 128 + 15. Before, SIGUSR1's
// default action ended the process at once (exit by signal 10, no checkpoint).
TEST(StopSignals, SigusrOneIsAWarningThatNeverEndsTheProcessAtOnce) {
  EXPECT_EXIT(
      {
        StopSignals signals;
        std::raise(SIGUSR1);
        if (StopSignals::received() == SIGUSR1) say("flag set by SIGUSR1\n");
        std::this_thread::sleep_for(std::chrono::milliseconds(1100));
        std::raise(SIGUSR1);
        say("alive after a second SIGUSR1\n");
        std::raise(SIGTERM);
        say("alive after the first SIGTERM\n");
        std::this_thread::sleep_for(std::chrono::milliseconds(1100));
        std::raise(SIGTERM);
        say("not reached\n");
        _exit(0);
      },
      testing::ExitedWithCode(128 + SIGTERM),
      "SIGUSR1 \\(the scheduler's warning.*flag set by SIGUSR1.*alive after a second SIGUSR1.*"
      "stop requested after the SIGUSR1 warning.*alive after the first SIGTERM.*second signal; "
      "exiting now");
}

TEST(StopSignals, SigusrOneIsNamed) { EXPECT_STREQ(signal_name(SIGUSR1), "SIGUSR1"); }

// What the carousel binary does from its first instruction to main()'s handlers: the signals
// blocked, a SIGTERM arriving meanwhile held pending, then delivered to the handler once they are
// unblocked — a stop request, not the default action (which would end this test binary).
TEST(StopSignals, ASignalHeldBlockedFromStartUpIsHandledOnceUnblocked) {
  block_stop_signals();
  std::raise(SIGTERM);
  std::raise(SIGHUP);
  StopSignals signals;
  EXPECT_EQ(StopSignals::received(), 0);  // still pending
  unblock_stop_signals();
  EXPECT_NE(StopSignals::received(), 0);  // delivered; which of the two came first is the kernel's
}

// A process that is failing (under mpirun, Open MPI's SIGTERM follows another process's
// MPI_Abort) says nothing of a stop and a checkpoint; a process that is not says it.
TEST(StopSignals, AFailingProcessDoesNotAnnounceAStop) {
  {
    StopSignals signals;
    testing::internal::CaptureStderr();
    std::raise(SIGTERM);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("carousel: stop requested"),
              std::string::npos);
  }
  {
    StopSignals signals;
    StopSignals::note_failing();
    testing::internal::CaptureStderr();
    std::raise(SIGTERM);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
    EXPECT_EQ(StopSignals::received(), SIGTERM);
  }
}

}  // namespace
}  // namespace carousel
