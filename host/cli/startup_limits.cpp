// startup_limits.cpp — what the process settles before anything else in it runs.
//
// Shared libraries initialise before main(): OpenBLAS reserves 128 MiB buffers (retrying forever
// when an mmap fails) and starts its threads, whose stacks glibc sizes from the stack limit;
// libgomp reads its spin policy from the environment. So under `ulimit -v 1000000` carousel hung
// before printing anything, and under `ulimit -s 64` its threads overflowed their 64 KiB stacks
// (a segfault). A function in the executable's .preinit_array runs before any library's
// initialiser, where it can still act:
//   * the stop signals (SIGTERM, SIGINT, SIGHUP, SIGUSR1) blocked, first: a scheduler's or an
//     operator's signal during start-up stays pending — across the re-execution below, which
//     keeps the mask and the pending set — until main() has installed the handlers and unblocks
//     them (host/reliability/stop_signals.h); before, each start-up (0.1 to 0.3 s, libraries
//     initialised twice) was a window where such a signal killed with the default action;
//   * an address-space or data limit (ulimit -v / -d) below what start-up needs: one error line,
//     exit 2 (the run's own need is checked later against the same limits, host/run/run_setup.cpp);
//   * a stack limit below 8 MiB that the hard limit lets us raise: raised for this process, said
//     on stderr (a soft limit raised later changes no thread that glibc has already sized);
//   * neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set: GOMP_SPINCOUNT=1000 added to the
//     environment (compute/cpu/omp_wait_policy.h has the policy and its measurements);
//   then, when either changed, the process re-executes itself once, here, before any library has
//   initialised: the new image's libraries see the new stack limit and environment, and the old
//   image's were never started (before, the spin policy's re-exec ran in main(), after every
//   library had initialised once already).
// Only system calls here (sigprocmask, getrlimit, setrlimit, write, mmap, execve, _exit), string
// functions and the arguments' environment (no getenv, setenv or malloc): libc is not fully set
// up yet.
// main() then caps glibc's malloc arenas under such a limit (cap_malloc_arenas_under_limits).
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "compute/cpu/omp_wait_policy.h"
#include "host/cli/commands.h"
#include "host/reliability/stop_signals.h"

namespace {

constexpr rlim_t kStartupAddressSpace = rlim_t(2) << 30;  // measured: 1 GB hangs, 2 GB starts
constexpr rlim_t kThreadStack = rlim_t(8) << 20;          // glibc's usual default
constexpr int kArenasUnderALimit = 2;
constexpr char kBoundedSpin[] = "GOMP_SPINCOUNT=1000";

void say(const char* text) { (void)!write(STDERR_FILENO, text, std::strlen(text)); }

// The value of `name` in `envp`, or nullptr (getenv may not see the environment yet).
const char* find_env(char** envp, const char* name) {
  const std::size_t length = std::strlen(name);
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, name, length) == 0 && (*e)[length] == '=') return *e + length + 1;
  }
  return nullptr;
}

// `envp` with GOMP_SPINCOUNT=1000 added, in memory of its own (malloc is not ours to call yet);
// nullptr when that cannot be had.
char** with_bounded_spin(char** envp) {
  std::size_t n = 0;
  while (envp != nullptr && envp[n] != nullptr) ++n;
  void* memory = mmap(nullptr, (n + 2) * sizeof(char*), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  auto** env = static_cast<char**>(memory);
  for (std::size_t i = 0; i < n; ++i) env[i] = envp[i];
  env[n] = const_cast<char*>(kBoundedSpin);
  env[n + 1] = nullptr;
  return env;
}

// A stack limit below what carousel's threads need, raised when the hard limit allows (said on
// stderr). Returns whether it was raised; exits 2 when it cannot be.
bool raise_stack_limit() {
  rlimit stack{};
  if (getrlimit(RLIMIT_STACK, &stack) != 0 || stack.rlim_cur == RLIM_INFINITY ||
      stack.rlim_cur >= kThreadStack) {
    return false;
  }
  const rlim_t raised = stack.rlim_max == RLIM_INFINITY || stack.rlim_max >= kThreadStack
                            ? kThreadStack
                            : stack.rlim_max;
  char line[300];
  if (raised <= stack.rlim_cur) {
    std::snprintf(line, sizeof(line),
                  "error: the stack limit (ulimit -s) is %llu KiB and its hard limit forbids "
                  "more; carousel's threads need about 8192 KiB; raise it (ulimit -s 8192)\n",
                  static_cast<unsigned long long>(stack.rlim_cur >> 10));
    say(line);
    _exit(2);
  }
  std::snprintf(line, sizeof(line),
                "carousel: the stack limit (ulimit -s) was %llu KiB; raised to %llu KiB for this "
                "process, whose threads need it\n",
                static_cast<unsigned long long>(stack.rlim_cur >> 10),
                static_cast<unsigned long long>(raised >> 10));
  say(line);
  stack.rlim_cur = raised;
  return setrlimit(RLIMIT_STACK, &stack) == 0;  // unchanged: the threads may still fail
}

void check_limits_before_libraries(int /*argc*/, char** argv, char** envp) {
  // First of all: from here on a stop signal waits for main()'s handlers (see the top).
  carousel::block_stop_signals();
  for (const auto& [resource, flag] : {std::pair{RLIMIT_AS, "-v"}, std::pair{RLIMIT_DATA, "-d"}}) {
    rlimit lim{};
    if (getrlimit(resource, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) continue;
    if (lim.rlim_cur >= kStartupAddressSpace) continue;
    char line[400];
    std::snprintf(line, sizeof(line),
                  "error: the %s limit (ulimit %s) is %llu KiB; carousel needs at least %llu KiB "
                  "to start (its libraries reserve their buffers as they load) and more to "
                  "train; raise it (ulimit %s unlimited)\n",
                  resource == RLIMIT_AS ? "address-space" : "data-segment", flag,
                  static_cast<unsigned long long>(lim.rlim_cur >> 10),
                  static_cast<unsigned long long>(kStartupAddressSpace >> 10), flag);
    say(line);
    _exit(2);
  }
  const bool stack_raised = raise_stack_limit();
  // The re-executed image finds GOMP_SPINCOUNT set and the stack raised: it never loops.
  const bool bounded_spin = carousel::cpu::should_set_omp_wait(find_env(envp, "OMP_WAIT_POLICY"),
                                                               find_env(envp, "GOMP_SPINCOUNT"));
  char** env = bounded_spin ? with_bounded_spin(envp) : envp;
  if (env == nullptr) env = envp;  // no memory for it: the stack alone, if raised
  if (!stack_raised && env == envp) return;
  execve("/proc/self/exe", argv, env);  // only returns on failure: go on as is (spinning)
}

}  // namespace

namespace carousel {

// glibc gives each thread that allocates its own malloc arena, reserving 64 MiB of address space
// apiece, up to 8 per core: most of what a run maps beyond its buffers (measured: 4 ranks on 2
// cores peaked at 2.7 GiB of address space against an estimate of 2.1 GiB, and the OpenBLAS
// buffer that no longer fit was retried forever). Under an address-space or data limit the
// arenas are capped at 2, before any rank or worker thread starts, so the run's estimate
// (host/run/run_setup.cpp) holds; without a limit, nothing changes.
void cap_malloc_arenas_under_limits() {
  for (const int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit lim{};
    if (getrlimit(resource, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
      mallopt(M_ARENA_MAX, kArenasUnderALimit);
      return;
    }
  }
}

}  // namespace carousel

// Run by the dynamic loader before the initialisers of every shared library.
__attribute__((section(".preinit_array"), used)) static void (*const carousel_preinit)(
    int, char**, char**) = &check_limits_before_libraries;
