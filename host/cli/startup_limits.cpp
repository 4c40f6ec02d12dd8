// startup_limits.cpp — resource limits met before anything else in the process runs.
//
// Shared libraries initialise before main(): OpenBLAS reserves 128 MiB buffers (retrying forever
// when an mmap fails) and starts its threads, whose stacks glibc sizes from the stack limit. So
// under `ulimit -v 1000000` carousel hung before printing anything, and under `ulimit -s 64` its
// threads overflowed their 64 KiB stacks (a segfault). A function in the executable's
// .preinit_array runs before any library's initialiser, where it can still act:
//   * an address-space or data limit (ulimit -v / -d) below what start-up needs: one error line,
//     exit 2 (the run's own need is checked later against the same limits, host/run/run_plan.cpp);
//   * a stack limit below 8 MiB that the hard limit lets us raise: raised for this process, said
//     on stderr, and the process re-executes itself so glibc sizes every thread from the new
//     limit (a soft limit raised later changes no thread that glibc has already sized).
// Only system calls here (getrlimit, setrlimit, write, execv, _exit): nothing else is set up yet.
// main() then caps glibc's malloc arenas under such a limit (cap_malloc_arenas_under_limits).
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "host/cli/commands.h"

namespace {

constexpr rlim_t kStartupAddressSpace = rlim_t(2) << 30;  // measured: 1 GB hangs, 2 GB starts
constexpr rlim_t kThreadStack = rlim_t(8) << 20;          // glibc's usual default
constexpr int kArenasUnderALimit = 2;

void say(const char* text) { (void)!write(STDERR_FILENO, text, std::strlen(text)); }

void check_limits_before_libraries(int /*argc*/, char** argv, char** /*envp*/) {
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
  rlimit stack{};
  if (getrlimit(RLIMIT_STACK, &stack) != 0 || stack.rlim_cur == RLIM_INFINITY ||
      stack.rlim_cur >= kThreadStack) {
    return;
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
  if (setrlimit(RLIMIT_STACK, &stack) != 0) return;  // unchanged: the threads may still fail
  execv("/proc/self/exe", argv);                     // only returns on failure: go on as is
}

}  // namespace

namespace carousel {

// glibc gives each thread that allocates its own malloc arena, reserving 64 MiB of address space
// apiece, up to 8 per core: most of what a run maps beyond its buffers (measured: 4 ranks on 2
// cores peaked at 2.7 GiB of address space against an estimate of 2.1 GiB, and the OpenBLAS
// buffer that no longer fit was retried forever). Under an address-space or data limit the
// arenas are capped at 2, before any rank or worker thread starts, so the run's estimate
// (host/run/run_plan.cpp) holds; without a limit, nothing changes.
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
