// omp_wait_policy.h — how the carousel binary makes OpenMP threads share the CPU well.
//
// libgomp spins idle threads (GOMP_SPINCOUNT, 300 000 spins by default) and reads
// OMP_WAIT_POLICY / GOMP_SPINCOUNT once, when it is loaded, before main() runs; a setenv in
// main() is too late. So a program that wants another policy by default must re-execute itself
// with the variable set: reexec_with_bounded_omp_spin(argv) as the first statement of main().
// carousel's default is a bounded spin, GOMP_SPINCOUNT=1000: measured (train_bench tiny, 2
// cores) 42 ms quiet / 85 ms beside a busy process, against 38 / 151 ms for libgomp's default
// spin and 70 / 64 ms for passive waiting. The user's own setting always wins (either variable
// set: no re-exec), and the re-executed process sees GOMP_SPINCOUNT set, so it never loops.
// Policy and measurements: docs/backend.md ("Threads on a shared machine").
#pragma once

#include <unistd.h>

#include <cstdlib>

namespace carousel::cpu {

// True when neither variable is set: the user left the choice to carousel.
inline bool should_set_omp_wait(const char* omp_wait_policy, const char* gomp_spincount) {
  return omp_wait_policy == nullptr && gomp_spincount == nullptr;
}

// Re-executes /proc/self/exe with GOMP_SPINCOUNT=1000 unless the user chose a policy. Returns
// only when nothing was to be done or the exec failed (the run then spins, as before).
inline void reexec_with_bounded_omp_spin(char** argv) {
  if (!should_set_omp_wait(std::getenv("OMP_WAIT_POLICY"), std::getenv("GOMP_SPINCOUNT"))) return;
  if (setenv("GOMP_SPINCOUNT", "1000", 1) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace carousel::cpu
