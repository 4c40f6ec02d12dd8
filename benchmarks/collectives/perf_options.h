// perf_options.h — the command line of the collective benchmarks: nccl-tests 2.19's flags, what
// each means on carousel's backends (docs/collectives.md has the table), and their checks.
//
// Every flag is checked before anything runs: a bad value is one line on stderr naming the flag,
// the value and what is valid, and exit status 2 (--help: the usage, status 0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/collectives/perf_types.h"

namespace carousel::perf {

struct Options {
  // nccl-tests' sweep: from -b to -e, times -f when it is above 1, else plus -i (so -b 1M -e 4M
  // gives 1M, 2M, 3M, 4M by default; -f is an integer, as nccl-tests reads it).
  std::int64_t min_bytes = 32 << 20, max_bytes = 32 << 20;
  std::int64_t step_bytes = 1 << 20;
  std::int64_t step_factor = 1;
  int threads = 1, gpus = 1;       // -t, -g: ranks = threads x gpus on the in-process backends
  bool ranks_flags_given = false;  // -t or -g on the command line (refused under mpirun)
  int iters = 20, warmup = 1, agg_iters = 1;
  int run_cycles = 1;  // -N: 0 = forever (until interrupted)
  int check = 1;       // -c: checked repetitions per row (fresh inputs each), 0 = none
  int average = 1;  // -a: 0 rank 0's time, 1 mean over ranks, 2 min, 3 max
  int parallel_init = 0, blocking = 0, cuda_graphs = 0, report_cputime = 0;
  int report_timestamps = 0, memory_report = 0;  // -S, -M
  int per_iter_timing = 0, per_iter_skip = 0;    // -I, -K: per-iteration times and statistics
  std::int64_t unalign = 0;                      // -u: buffers start this many elements late
  // NCCL features carousel does not use, accepted at their defaults only (check_device_flags):
  int stream_null = 0, local_register = 0, cta_policy = -1, device_implementation = 0,
      device_cta_count = 16;
  std::vector<ElementType> types;
  std::vector<ReduceChoice> ops;
  int root = 0;
  bool all_roots = false;  // -r -1 (nccl-tests), or -r all
  double timeout = 300;
  std::string json_file, backend = "auto";               // auto: resolved by choose_backend
  std::string min_text, max_text, type_text, root_text;  // as typed, for messages
  std::vector<std::string> args;                         // the command line, for the JSON

  int ranks() const { return threads * gpus; }
};

// The options, or nullopt after printing the usage (exit_code 0) or one error line (2).
std::optional<Options> parse_options(const std::string& program, int argc, char** argv,
                                     int& exit_code);

// --backend auto as nccl-tests users expect: under mpirun with several processes, NCCL between
// the processes' GPUs when there are GPUs and NCCL, else MPI; without mpirun, NCCL over this
// process's GPUs, else threads on CPU devices ("local"). An explicit backend is kept, except
// local under mpirun with several processes, which would run one independent benchmark per
// process and exit 0 as if it had measured the job. The backend, or nullopt after printing the
// error line (exit status 2).
struct LaunchFacts {
  int mpi_processes = 0;  // mpirun's world size; 0: not started by mpirun
  bool mpi_built = false, nccl_built = false;
  int gpus = 0;  // visible CUDA devices
};
std::optional<std::string> choose_backend(const std::string& asked, const LaunchFacts& facts);

// After choose_backend: the flags of GPU features carousel's communicators do not have (-G, -y,
// -R, -x, -D, -V) are refused at anything but their defaults, naming the backend. False after
// printing the error line.
bool check_device_flags(const Options& o);

// The checks that need the rank count (known after mpirun or the rendezvous): -r. False after
// printing the error line.
bool check_root(const Options& o, int ranks);

// "32M", "4K", "1G", "1024", "1.5M": bytes; nullopt for anything else (no negative sizes, one
// optional suffix, nothing after it, at most 1 PiB).
std::optional<std::int64_t> parse_size(const std::string& text);

}  // namespace carousel::perf
