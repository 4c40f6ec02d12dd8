// stop_signals.h — preemption: SIGTERM or SIGINT asks a run to stop cleanly.
//
// The first signal only sets a flag: the training loop finishes the step in progress, all ranks
// agree to stop (a signal may reach the processes of a job at different steps), a checkpoint is
// saved, and every rank exits 0, so the run resumes where it stopped. A second signal ends the
// process at once (exit code 128 + signal); the newest complete checkpoint is still intact,
// since checkpoints are written to a temporary directory and renamed into place.
#pragma once

namespace carousel {

// Installs the handlers for the lifetime of the object, restoring the previous ones after.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  static int received();  // the first signal received, 0 if none
};

const char* signal_name(int signal);

}  // namespace carousel
