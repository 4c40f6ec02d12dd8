// run_lock.h — one run per run directory. `carousel train` holds an OS file lock (flock) on
// <run directory>/.carousel.lock from before its logs open until the process ends: a second run
// on the same directory is refused at once, naming the first's pid, host and start time, instead
// of interleaving metrics and logs and meeting the other's checkpoints. The kernel releases the
// lock when the process dies however it dies (kill -9 included): never a stale lock, and nothing
// to clean up. A resumed run starts after the previous one ended, so it takes the lock freely.
// Under mpirun the job's world rank 0 holds it (the other processes write only their own logs).
#pragma once

#include <string>

namespace carousel {

class RunLock {
 public:
  // Creates the run directory if needed and takes its lock; throws carousel::Error naming the
  // holder when another process has it. A file system without locks (some network mounts) is a
  // warning naming the reason, and the run goes on unlocked.
  static RunLock acquire(const std::string& run_directory);
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&&) = delete;
  RunLock(const RunLock&) = delete;
  ~RunLock();

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;  // -1: not locked (no lock on this file system)
};

}  // namespace carousel
