// perf_options.cpp — parsing and checking the collective benchmarks' command line (CLI11).
#include "benchmarks/collectives/perf_options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>

namespace carousel::perf {

std::optional<std::int64_t> parse_size(const std::string& text) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (!(v >= 0) || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  double mult = 1;
  if (pos < text.size()) {
    if (pos + 1 != text.size()) return std::nullopt;
    switch (std::toupper(static_cast<unsigned char>(text[pos]))) {
      case 'K':
        mult = 0x1p10;
        break;
      case 'M':
        mult = 0x1p20;
        break;
      case 'G':
        mult = 0x1p30;
        break;
      default:
        return std::nullopt;
    }
  }
  if (v * mult > 0x1p50) return std::nullopt;  // 1 PiB: no buffer of that size
  return std::int64_t(v * mult);
}

namespace {

// One error line on stderr; the caller returns exit status 2.
template <class... Args>
std::nullopt_t error(int& exit_code, fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "error: {}\n", fmt::format(format, std::forward<Args>(args)...));
  exit_code = 2;
  return std::nullopt;
}

const char* size_rule =
    "valid: bytes as a number with an optional K, M or G suffix, up to 1P (e.g. 8, 4K, 32M)";

}  // namespace

std::optional<Options> parse_options(const std::string& program, int argc, char** argv,
                                     int& exit_code) {
  Options o;
  for (int i = 0; i < argc; ++i) o.args.emplace_back(argv[i]);
  CLI::App app{program + " — nccl-tests-style benchmark of carousel's communicator"};
  std::string min_text = "32M", max_text = "32M", step_text, factor_text, op_text = "sum";
  o.type_text = "float";
  o.root_text = "0";
  app.add_option("-t,--nthreads", o.threads,
                 "threads per process; ranks = t x g on the in-process backends")
      ->check(CLI::Range(1, 1024));
  app.add_option("-g,--ngpus", o.gpus, "devices per thread (simulated CPU devices on local)")
      ->check(CLI::Range(1, 1024));
  app.add_option("-b,--minbytes", min_text, "smallest size (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", max_text, "largest size");
  auto* step_bytes =
      app.add_option("-i,--stepbytes", step_text, "linear size step (default 1M), when -f <= 1");
  auto* step_factor = app.add_option("-f,--stepfactor", factor_text,
                                     "multiplicative size step, an integer (default 1: use -i)");
  app.add_option("-o,--op", op_text, "sum | prod | max | min | avg | all");
  app.add_option("-d,--datatype", o.type_text,
                 "int8 | uint8 | int32 | int64 | half | float | double | bfloat16 | all");
  app.add_option("-r,--root", o.root_text, "root rank of rooted collectives; -1 or all: every rank");
  app.add_option("-n,--iters", o.iters, "timed iterations")->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup_iters", o.warmup, "warm-up iterations (default 1)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("-m,--agg_iters", o.agg_iters, "operations per timed iteration")
      ->check(CLI::Range(1, 1000000));
  app.add_option("-N,--run_cycles", o.run_cycles,
                 "run each sweep this many times; 0: forever (until interrupted)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("-p,--parallel_init", o.parallel_init,
                 "0/1; ranks always create their communicators in parallel here")
      ->check(CLI::Range(0, 1));
  app.add_option("-c,--check", o.check,
                 "check each row's results this many times (fresh inputs each), 0: no check")
      ->check(CLI::Range(0, 1000000));
  app.add_option("-z,--blocking", o.blocking, "1: wait and barrier after each operation")
      ->check(CLI::Range(0, 1));
  app.add_option("-G,--cudagraph", o.cuda_graphs, "CUDA graph launches: 0 (no graphs here)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("-y,--stream_null", o.stream_null, "0: the backend's own stream (only)")
      ->check(CLI::Range(0, 1));
  app.add_option("-R,--local_register", o.local_register,
                 "NCCL buffer registration: 0 (carousel registers none)")
      ->check(CLI::Range(0, 2));
  app.add_option("-x,--cta_policy", o.cta_policy, "NCCL CTA policy: not set here")
      ->check(CLI::Range(-1, 2));
  app.add_option("-D,--device_implementation", o.device_implementation,
                 "NCCL device API implementation: 0 (NCCL's host API) only")
      ->check(CLI::Range(0, 1000));
  app.add_option("-V,--device_cta_count", o.device_cta_count, "with -D > 0 only")
      ->check(CLI::Range(1, 128));
  app.add_option("-S,--report_timestamps", o.report_timestamps,
                 "1: end each row with the time it was measured (local time)")
      ->check(CLI::Range(0, 1));
  app.add_option("-M,--memory_report", o.memory_report,
                 "1: report the buffer memory each rank allocated")
      ->check(CLI::Range(0, 1));
  app.add_option("-I,--per_iter_timing", o.per_iter_timing,
                 "1: time every iteration (waiting for it) and add i_min, i_max, i_p99, i_cv% "
                 "columns")
      ->check(CLI::Range(0, 1));
  app.add_option("-K,--per_iter_skip", o.per_iter_skip,
                 "leave out the first iterations from the -I statistics (the JSON keeps them)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("-u,--unalign", o.unalign,
                 "start the send and receive buffers this many elements past an aligned address")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("-C,--report_cputime", o.report_cputime,
                 "1: label the time column cputime (the same host clock here)")
      ->check(CLI::Range(0, 1));
  app.add_option("-a,--average", o.average, "time over ranks: 0 rank 0, 1 mean, 2 min, 3 max")
      ->check(CLI::Range(0, 3));
  app.add_option("-T,--timeout", o.timeout, "fail an operation waiting longer than this (s)");
  app.add_option("-J,--output_file", o.json_file, "also write results as JSON");
  app.add_option("--backend", o.backend,
                 "auto (default: under mpirun nccl with GPUs else mpi; otherwise nccl with GPUs "
                 "else local); local (CPU threads); mpi (one rank per process, under mpirun); "
                 "nccl (GPUs)")
      ->check(CLI::IsMember({"auto", "local", "mpi", "nccl"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help
      exit_code = app.exit(e);
      return std::nullopt;
    }
    return error(exit_code, "{} (see --help)", e.what());
  }
  o.ranks_flags_given = app.count("-t") > 0 || app.count("-g") > 0;
  if (o.per_iter_skip > 0 && !o.per_iter_timing) {
    return error(exit_code,
                 "-K/--per_iter_skip {} leaves iterations out of -I's statistics, but -I is 0; "
                 "valid: -I 1 -K {}, or no -K",
                 o.per_iter_skip, o.per_iter_skip);
  }
  if (o.per_iter_skip >= o.iters) {
    return error(exit_code,
                 "-K/--per_iter_skip {} leaves no iteration of -n/--iters {} for the statistics; "
                 "valid: 0 to {}",
                 o.per_iter_skip, o.iters, o.iters - 1);
  }
  if (o.ranks() > 1024) {
    return error(exit_code, "-t/--nthreads {} x -g/--ngpus {} = {} ranks; valid: at most 1024",
                 o.threads, o.gpus, o.ranks());
  }
  const auto types = parse_types(o.type_text);
  if (!types) {
    return error(exit_code, "-d/--datatype '{}' is not supported; valid: {}", o.type_text,
                 type_names());
  }
  o.types = *types;
  const auto ops = parse_ops(op_text);
  if (!ops)
    return error(exit_code, "-o/--op '{}' is not supported; valid: {}", op_text, op_names());
  o.ops = *ops;
  const auto lo = parse_size(min_text), hi = parse_size(max_text);
  for (const auto& [flag, text, size] :
       {std::tuple{"-b/--minbytes", min_text, lo}, std::tuple{"-e/--maxbytes", max_text, hi}}) {
    if (!size) return error(exit_code, "{} '{}' is not a size; {}", flag, text, size_rule);
  }
  o.min_bytes = *lo;
  o.max_bytes = *hi;
  o.min_text = min_text;
  o.max_text = max_text;
  if (o.min_bytes == 0) {  // with -f, 0 x factor stays 0: the sweep would start nowhere
    return error(exit_code,
                 "-b/--minbytes {} is 0 bytes; the smallest size is one element per rank; valid: "
                 "-b >= 1 (a size below one element per rank rounds up to it)",
                 min_text);
  }
  if (o.min_bytes > o.max_bytes) {
    return error(exit_code,
                 "-b/--minbytes {} ({} bytes) is larger than -e/--maxbytes {} ({} bytes); valid: "
                 "-b <= -e",
                 min_text, o.min_bytes, max_text, o.max_bytes);
  }
  if (step_factor->count() > 0) {
    // nccl-tests reads -f with strtol: the integer it starts with ("1.5" is 1). Said, not
    // silent; text that starts with no number is refused (nccl-tests would read it as 0).
    char* end = nullptr;
    errno = 0;
    const long long factor = std::strtoll(factor_text.c_str(), &end, 0);
    if (end == factor_text.c_str() || errno != 0 || factor < 0 || factor > (1LL << 30)) {
      return error(exit_code,
                   "-f/--stepfactor '{}' is not a whole factor; valid: an integer, 2 or more to "
                   "multiply the size, 0 or 1 to add -i/--stepbytes",
                   factor_text);
    }
    if (*end != '\0') {
      fmt::print(stderr, "note: -f/--stepfactor '{}' is read as {}, as nccl-tests reads it\n",
                 factor_text, factor);
    }
    o.step_factor = factor;
  }
  if (step_bytes->count() > 0) {
    const auto step = parse_size(step_text);
    if (!step) return error(exit_code, "-i/--stepbytes '{}' is not a size; {}", step_text, size_rule);
    o.step_bytes = *step;
  }
  if (o.step_factor <= 1 && o.step_bytes == 0 && o.min_bytes < o.max_bytes) {
    return error(exit_code,
                 "-i/--stepbytes 0 with -f/--stepfactor {} never moves from -b to -e (nccl-tests "
                 "would loop forever); valid: -i above 0, or -f 2 or more",
                 o.step_factor);
  }
  // nccl-tests reads -r with strtol; -1 is every root. `all` (which nccl-tests would read as
  // root 0) means every root too: what anyone typing it wants.
  if (o.root_text == "all") {
    o.all_roots = true;
  } else {
    char* end = nullptr;
    errno = 0;
    const long long root = std::strtoll(o.root_text.c_str(), &end, 0);
    if (end == o.root_text.c_str() || *end != '\0' || errno != 0 || root < -1 ||
        root > (1LL << 30)) {
      return error(exit_code,
                   "-r/--root '{}' is not a rank; valid: a rank number, or -1 (or all) for "
                   "every rank",
                   o.root_text);
    }
    o.all_roots = root == -1;
    o.root = root == -1 ? 0 : int(root);
  }
  if (!o.json_file.empty()) {
    // Checked now, written at the end: a run must not end in a lost report.
    std::FILE* f = std::fopen(o.json_file.c_str(), "w");
    if (!f) {
      return error(exit_code, "-J/--output_file '{}' cannot be written: {}", o.json_file,
                   std::strerror(errno));
    }
    std::fclose(f);
  }
  return o;
}

std::optional<std::string> choose_backend(const std::string& asked, const LaunchFacts& f) {
  const bool several = f.mpi_processes > 1;
  const bool gpus = f.gpus > 0 && f.nccl_built;
  if (asked == "local" && several) {
    fmt::print(stderr,
               "error: --backend local under mpirun -np {}: each process would run its own "
               "benchmark of threads and the job would measure nothing together; use --backend "
               "{} (or leave --backend at auto), or run one process\n",
               f.mpi_processes, gpus ? "nccl" : "mpi");
    return std::nullopt;
  }
  if (asked != "auto") return asked;
  if (several && !gpus && !f.mpi_built) {
    fmt::print(stderr,
               "error: started by mpirun with {} processes, but this build has no MPI "
               "communicator (install libopenmpi-dev and rebuild) and no GPUs for NCCL\n",
               f.mpi_processes);
    return std::nullopt;
  }
  if (gpus) return std::string("nccl");
  return std::string(several ? "mpi" : "local");
}

bool check_device_flags(const Options& o) {
  const auto refuse = [](const std::string& message) {
    fmt::print(stderr, "error: {}\n", message);
    return false;
  };
  const std::string where =
      o.backend == "nccl"
          ? "carousel's NCCL communicator"
          : fmt::format("--backend {} (CPU threads or processes, no GPU)", o.backend);
  if (o.cuda_graphs != 0) {
    return refuse(o.backend == "nccl"
                      ? fmt::format("-G/--cudagraph {}: carousel's NCCL communicator launches "
                                    "every operation on its stream and does not capture CUDA "
                                    "graphs; valid: -G 0",
                                    o.cuda_graphs)
                      : fmt::format("-G/--cudagraph {}: CUDA graph launches need GPUs, and "
                                    "--backend {} runs on CPU threads or processes, where there "
                                    "is no graph to capture; valid: -G 0",
                                    o.cuda_graphs, o.backend));
  }
  if (o.stream_null != 0) {
    return refuse(fmt::format("-y/--stream_null {}: {} {}; valid: -y 0", o.stream_null, where,
                              o.backend == "nccl"
                                  ? "runs every operation on a stream of its own, never the "
                                    "default stream"
                                  : "has no CUDA stream to choose"));
  }
  if (o.local_register != 0) {
    return refuse(
        fmt::format("-R/--local_register {}: {} registers no buffers with NCCL "
                    "(ncclCommRegister is not used); valid: -R 0",
                    o.local_register, where));
  }
  if (o.cta_policy != -1) {
    return refuse(
        fmt::format("-x/--cta_policy {}: {} leaves NCCL's CTA policy at its default; "
                    "valid: leave -x out",
                    o.cta_policy, where));
  }
  if (o.device_implementation != 0 || o.device_cta_count != 16) {
    return refuse(
        fmt::format("-D/--device_implementation {} / -V/--device_cta_count {}: {} "
                    "uses NCCL's host API only; valid: leave -D and -V out",
                    o.device_implementation, o.device_cta_count, where));
  }
  return true;
}

bool check_root(const Options& o, int ranks) {
  if (o.all_roots || (o.root >= 0 && o.root < ranks)) return true;
  fmt::print(stderr, "error: -r/--root {} is not a rank; valid: 0 to {}, or -1 (or all) for every rank\n", o.root,
             ranks - 1);
  return false;
}

}  // namespace carousel::perf
