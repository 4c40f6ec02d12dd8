// run_lock.h — one run per run directory. `carousel train` holds an OS file lock (flock) on the
// run directory itself (its descriptor) from before its logs open until the process ends: a
// second run on the same directory is refused at once, naming the first's pid, host and start
// time (recorded in <run directory>/.carousel.lock), instead of interleaving metrics and logs and
// meeting the other's checkpoints. The lock is on the directory, not on the dotfile: deleting
// .carousel.lock (a cleanup job, an operator tidying up) cannot admit a second run, where a lock
// on the file would have moved with the file. The dotfile is locked too, for carousel versions
// that lock only it. The kernel releases the locks when the process dies however it dies (kill
// -9 included): never a stale lock, and nothing to clean up. A resumed run starts after the
// previous one ended, so it takes the lock freely. Under mpirun the job's world rank 0 holds it
// (the other processes write only their own logs).
#pragma once

#include <string>
#include <utility>

namespace carousel {

class RunLock {
 public:
  // Creates the run directory if needed and takes its lock; throws carousel::Error naming the
  // holder when another process has it. A file system without locks on directories (some
  // network mounts) falls back to the dotfile's lock, re-checked by check_held; one without any
  // lock is a warning naming the reason, and the run goes on unlocked.
  static RunLock acquire(const std::string& run_directory);
  // At each checkpoint save: where this process holds `run_directory` by its dotfile alone and
  // the dotfile was removed or replaced, the lock is taken again on a new dotfile (an error
  // naming the other run when one has it); the holder record is written again when it went
  // missing. Nothing for a directory this process does not lock.
  static void check_held(const std::string& run_directory);
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&&) = delete;
  RunLock(const RunLock&) = delete;
  ~RunLock();

 private:
  static RunLock take(const std::string& run_directory, int attempt);
  RunLock(std::string directory, int dir_fd, int file_fd);  // registered for check_held
  std::string directory_;
  int dir_fd_ = -1;   // the run directory, locked (-1: no directory locks here)
  int file_fd_ = -1;  // .carousel.lock, locked when the file system allows (-1: not)
};

}  // namespace carousel
