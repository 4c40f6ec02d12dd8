// stop_signals.h — what a run does with each signal an operator, a scheduler or the terminal
// sends (docs/reliability.md has the table).
//
// SIGTERM, SIGINT and SIGHUP (a closed terminal or ssh session) ask a run to stop cleanly (SIGINT
// and SIGHUP only when the launcher did not set them to be ignored, as `nohup` does): the
// first only sets a flag; the training loop finishes the step in progress, all ranks agree to
// stop (a signal may reach the processes of a job at different steps), a checkpoint is saved,
// and every rank exits 0, so the run resumes where it stopped. A repeat within a second of the
// first counts as the same request (a wrapper that forwards Ctrl-C twice, a process group
// signalled twice); a later one ends the process at once (exit code 128 + signal): the newest
// complete checkpoint is still intact, since checkpoints are written to a temporary directory
// and renamed into place. SIGPIPE is ignored (a vanished reader of the console — `| head`, a
// log shipper that exits — costs the console lines, not the run: the log file and metrics go
// on), and SIGXFSZ too (a file-size limit makes the write fail with EFBIG, which the writer
// reports as an error naming the file, instead of killing the process).
#pragma once

namespace carousel {

// Installs the handlers for the lifetime of the object, restoring the previous ones after.
// Nested objects share the outermost one's handlers and flag (`carousel train` installs them
// first thing in main(), and train() again for callers that are not main()).
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  static int received();  // the first stop signal received, 0 if none
};

const char* signal_name(int signal);  // "SIGTERM", "SIGINT", "SIGHUP"

}  // namespace carousel
