// stop_signals.h — what a run does with each signal an operator, a scheduler or the terminal
// sends (docs/reliability.md has the table).
//
// SIGTERM, SIGINT, SIGHUP (a closed terminal or ssh session) and SIGUSR1 (Slurm's "time limit
// soon", `#SBATCH --signal=USR1@120`) ask a run to stop cleanly (SIGINT, SIGHUP and SIGUSR1 only
// when the launcher did not set them to be ignored, as `nohup` does): the first only sets a flag;
// the training loop finishes the step in progress, all ranks agree to stop (a signal may reach
// the processes of a job at different steps), a checkpoint is saved, and every rank exits 0, so
// the run resumes where it stopped. A repeat within a second of the first counts as the same
// request (a wrapper that forwards Ctrl-C twice, a process group signalled twice); a later one
// ends the process at once (exit code 128 + signal): the newest complete checkpoint is still
// intact, since checkpoints are written to a temporary directory and renamed into place.
// SIGUSR1 is a warning, never an order to exit at once: repeats of it count as the first, and
// the SIGTERM a scheduler sends at the time limit after it starts the one-second rule afresh
// (the save it warned about may still be running). SIGPIPE is ignored (a vanished reader of the
// console — `| head`, a log shipper that exits — costs the console lines, not the run: the log
// file and metrics go on), and SIGXFSZ too (a file-size limit makes the write fail with EFBIG,
// which the writer reports as an error naming the file, instead of killing the process).
//
// What a stop signal says at once: a stop with a checkpoint; a SIGTERM from the mpirun (or orted)
// that started this process is said as Open MPI ending the job (it sends one only for that, after
// a process called MPI_Abort or mpirun was signalled, and SIGKILL after a grace period); a process
// that is already failing (StopSignals::note_failing) says nothing: its error says why it ends.
//
// From the first instant: the carousel binary blocks the stop signals before any library
// initialises (host/cli/startup_limits.cpp) and keeps them blocked across its re-execution, so a
// signal sent during start-up waits, pending, until main() has installed the handlers and
// unblocks them; it is then handled like one sent later.
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

  // This process is ending with an error. Under mpirun, Open MPI sends SIGTERM to every process
  // of a job once one of them calls MPI_Abort: from now on a stop signal is not announced as a
  // stop with a checkpoint, which will not come (the error says why the run ends).
  static void note_failing();
};

// SIGTERM, SIGINT, SIGHUP and SIGUSR1 blocked (held pending) on the calling thread, or unblocked.
// Only system calls: block_stop_signals() runs before the process's libraries initialise.
void block_stop_signals();
void unblock_stop_signals();

const char* signal_name(int signal);  // "SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1"

}  // namespace carousel
