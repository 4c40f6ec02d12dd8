// perf.cpp — the benchmark driver: flags, buffers, timing, checking and the nccl-tests table.
#include "benchmarks/collectives/perf.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <vector>

#include "collectives/local_communicator.h"
#include "collectives/rendezvous.h"
#include "compute/cpu_backend.h"
#include "compute/cuda_backend.h"
#ifdef CAROUSEL_HAVE_NCCL
#include "collectives/nccl_communicator.h"
#endif
#ifdef CAROUSEL_HAVE_MPI
#include "collectives/mpi_communicator.h"
#endif

namespace carousel::perf {

namespace {

// "32M", "4K", "1G", "1024", "1.5M": bytes; nullopt for anything else (no negative sizes, one
// optional suffix, nothing after it).
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

// The types of -d; "all" is every one, as in nccl-tests.
std::optional<std::vector<std::pair<DType, std::string>>> parse_dtypes(const std::string& s) {
  const std::vector<std::pair<DType, std::string>> all = {
      {DType::F32, "float"}, {DType::F64, "double"}, {DType::I32, "int32"}};
  if (s == "all") return all;
  for (const auto& d : all) {
    if (d.second == s) return std::vector{d};
  }
  return std::nullopt;
}

// Integer-valued inputs keep every sum exact in float32 (below 2^24).
double input_value(int rank, std::int64_t j) { return double((rank + 1) + (j % 7)); }

void fill(Backend& be, const Tensor& t, int rank) {
  std::vector<double> v(t.numel());
  for (std::int64_t j = 0; j < t.numel(); ++j) v[j] = input_value(rank, j);
  if (t.dtype() == DType::F64)
    be.upload(v.data(), t);
  else if (t.dtype() == DType::F32)
    be.upload(std::vector<float>(v.begin(), v.end()).data(), t);
  else
    be.upload(std::vector<std::int32_t>(v.begin(), v.end()).data(), t);
}

std::vector<double> values(Backend& be, const Tensor& t) {
  if (t.dtype() == DType::F64) return be.to_host<double>(t);
  if (t.dtype() == DType::F32) {
    auto f = be.to_host<float>(t);
    return {f.begin(), f.end()};
  }
  auto i = be.to_host<std::int32_t>(t);
  return {i.begin(), i.end()};
}

struct Row {
  std::string type;
  std::int64_t bytes = 0, count = 0;
  double time_us[2] = {0, 0}, algbw[2] = {0, 0}, busbw[2] = {0, 0};
  std::int64_t wrong[2] = {0, 0};
};

// Best of a few large memcpys, one thread: the reference the local backend is compared with.
double memcpy_gbps(std::int64_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return double(bytes) / best / 1e9;
}

}  // namespace

double reduce_over_ranks(int ranks, std::int64_t j, ReduceOp op, const Input& input) {
  double sum = 0;
  for (int q = 0; q < ranks; ++q) sum += input(q, j);
  return op == ReduceOp::Avg ? sum / ranks : sum;
}

// Processes fill only their own rank's entries; a sum over the ranks gives everyone all of them
// (on the rank's own device and communicator: host memory for MPI, the GPU's for NCCL).
void share_with_every_rank(Communicator& comm, Backend& be,
                           std::vector<std::array<double, 2>>& time,
                           std::vector<std::array<double, 2>>& wrong) {
  for (auto* v : {&time, &wrong}) {
    std::vector<double> flat;
    for (const auto& a : *v) flat.insert(flat.end(), a.begin(), a.end());
    Tensor t = be.from_host(flat, {std::int64_t(flat.size())});
    comm.all_reduce(t, t, ReduceOp::Sum).wait();
    flat = be.to_host<double>(t);
    for (std::size_t r = 0; r < v->size(); ++r) (*v)[r] = {flat[2 * r], flat[2 * r + 1]};
  }
}

int run_perf(const CollectiveTest& test, int argc, char** argv) {
  CLI::App app{test.name + "_perf — nccl-tests-style benchmark of carousel's communicator"};
  std::string min_bytes = "32M", max_bytes = "32M", dtype_name_ = "float", op_name = "sum";
  std::string json_file, backend = "local";
  double factor = 2, timeout = 300;
  int ranks = 2, iters = 20, warmup = 5, check = 1, root = 0;
  app.add_option("-b,--minbytes", min_bytes, "smallest size (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", max_bytes, "largest size");
  app.add_option("-f,--stepfactor", factor, "multiplicative size step")
      ->check(CLI::Range(1.01, 1e9));
  auto* ranks_option = app.add_option("-g,--ngpus", ranks, "ranks (simulated CPU devices)")
                           ->check(CLI::Range(1, 1024));
  app.add_option("-n,--iters", iters, "timed iterations")->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup_iters", warmup, "warm-up iterations")->check(CLI::Range(0, 1000000));
  app.add_option("-c,--check", check, "check results: 1 yes, 0 no")->check(CLI::Range(0, 1));
  app.add_option("-d,--datatype", dtype_name_, "float | double | int32 | all");
  app.add_option("-o,--op", op_name, "sum | avg")->check(CLI::IsMember({"sum", "avg"}));
  app.add_option("-r,--root", root, "root rank of rooted collectives");
  app.add_option("-T,--timeout", timeout, "fail an operation waiting longer than this (s)");
  app.add_option("-J,--output_file", json_file, "also write results as JSON");
  app.add_option("--backend", backend,
                 "local (CPU threads); mpi (one rank per process, under mpirun); nccl (GPUs)")
      ->check(CLI::IsMember({"local", "mpi", "nccl"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    fmt::print(stderr, "error: {} (see --help)\n", e.what());
    return 2;
  }
  // Every flag is checked before anything runs: one line on stderr naming the flag, the value
  // and what is valid; exit status 2.
  const auto dtypes = parse_dtypes(dtype_name_);
  if (!dtypes) {
    fmt::print(stderr,
               "error: -d/--datatype '{}' is not supported; valid: float, double, int32, all "
               "(the host communicators reduce no 16-bit types: no half or bfloat16)\n",
               dtype_name_);
    return 2;
  }
  const auto lo_size = parse_size(min_bytes), hi_size = parse_size(max_bytes);
  for (const auto& [flag, text, size] : {std::tuple{"-b/--minbytes", min_bytes, lo_size},
                                         std::tuple{"-e/--maxbytes", max_bytes, hi_size}}) {
    if (!size) {
      fmt::print(stderr,
                 "error: {} '{}' is not a size; valid: bytes as a number with an optional K, M "
                 "or G suffix, up to 1P (e.g. 8, 4K, 32M)\n",
                 flag, text);
      return 2;
    }
  }
  const std::int64_t lo = *lo_size, hi = *hi_size;
  if (lo > hi) {
    fmt::print(stderr,
               "error: -b/--minbytes {} ({} bytes) is larger than -e/--maxbytes {} ({} bytes); "
               "valid: -b <= -e\n",
               min_bytes, lo, max_bytes, hi);
    return 2;
  }
  std::ofstream json_out;
  if (!json_file.empty()) {
    json_out.open(json_file, std::ios::trunc);
    if (!json_out.good()) {
      fmt::print(stderr, "error: -J/--output_file '{}' cannot be written: {}\n", json_file,
                 std::strerror(errno));
      return 2;
    }
  }
  (void)ranks_option;
  int my_rank = -1;  // this process's rank under mpirun; -1: every rank is a thread here
#ifndef CAROUSEL_HAVE_MPI
  if (backend == "mpi") {
    fmt::print(stderr,
               "error: --backend mpi: this build has no MPI communicator (install "
               "libopenmpi-dev and rebuild); use --backend local\n");
    return 2;
  }
#else
  // Under mpirun (--backend mpi, or nccl started by mpirun) each process is one rank: -g counts
  // ranks per process and must be 1. Only rank 0 prints (as nccl-tests does); the others'
  // stdout goes nowhere.
  std::unique_ptr<MpiRuntime> mpi;
  std::unique_ptr<Communicator> mpi_world;  // NCCL under mpirun: carries the NCCL id
  if (backend == "mpi" || (backend == "nccl" && mpi_launch_size() > 1)) {
    if (ranks_option->count() > 0 && ranks != 1) {
      fmt::print(stderr,
                 "error: under mpirun each process is one rank; start N processes with "
                 "mpirun -np N and leave -g at 1\n");
      return 2;
    }
    mpi = std::make_unique<MpiRuntime>();
    ranks = mpi->size();
    my_rank = mpi->rank();
    if (my_rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 2;
  }
#endif
  // NCCL launched torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no mpirun): one
  // rank per process, the NCCL id sent over TCP by rank 0.
  std::optional<RendezvousConfig> rendezvous;
  if (backend == "nccl" && my_rank < 0 && std::getenv("WORLD_SIZE") &&
      std::atoi(std::getenv("WORLD_SIZE")) > 1) {
    try {
      rendezvous = rendezvous_from_env(timeout);
    } catch (const Error& e) {
      fmt::print(stderr, "error: {}\n", e.what());
      return 2;
    }
    ranks = rendezvous->world_size;
    my_rank = rendezvous->rank;
    if (my_rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 2;
  }
#ifndef CAROUSEL_HAVE_NCCL
  if (backend == "nccl") {
    fmt::print(stderr,
               "error: --backend nccl: this build has no NCCL communicator (needs CUDA "
               "and NCCL at configure time); use --backend local\n");
    return 2;
  }
#endif
  const ReduceOp op = op_name == "avg" ? ReduceOp::Avg : ReduceOp::Sum;
  if (root < 0 || root >= ranks) {
    fmt::print(stderr, "error: -r/--root {} is not a rank; valid: 0 to {}\n", root, ranks - 1);
    return 2;
  }
  // The (type, size) rows of the table: sizes from lo, times factor, up to hi, for which the
  // collective moves at least one element. int32 has no average (skipped by -d all).
  std::vector<std::pair<std::pair<DType, std::string>, std::int64_t>> sweep;
  for (const auto& type : *dtypes) {
    if (op == ReduceOp::Avg && type.first == DType::I32 && test.reduces) {
      if (dtypes->size() > 1) continue;
      fmt::print(stderr,
                 "error: -o/--op avg with -d/--datatype int32: valid: -d float or double\n");
      return 2;
    }
    const std::int64_t elt = std::int64_t(dtype_size(type.first));
    for (std::int64_t size = std::max(lo, elt); size <= hi;
         size = std::max(size + 1, std::int64_t(double(size) * factor))) {
      std::int64_t send_n, recv_n, count;
      test.counts(size / elt, ranks, send_n, recv_n, count);
      if (count > 0) sweep.push_back({type, size});
    }
  }
  if (sweep.empty()) {
    fmt::print(stderr,
               "error: -b/--minbytes {} to -e/--maxbytes {}: no size in this range gives {} "
               "with {} ranks one element of type {}; valid: a larger -e\n",
               min_bytes, max_bytes, test.name, ranks, dtype_name_);
    return 2;
  }

  fmt::print("# carousel {}_perf: backend {}, {} ranks ({})\n", test.name, backend, ranks,
             backend == "mpi" ? "one process each" : "threads of this process");
  fmt::print(
      "#  minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} "
      "validation: {}\n#\n# Using devices\n",
      lo, hi, factor, warmup, iters, check);
  for (int r = 0; r < ranks; ++r) {
    if (backend == "nccl")
      fmt::print("#  Rank {:2} on cuda:{}\n", r, r);
    else if (backend == "mpi")
      fmt::print("#  Rank {:2} on cpu:{} (process {})\n", r, r, r);
    else
      fmt::print("#  Rank {:2} on cpu:{} (simulated device)\n", r, r);
  }
  const double memcpy_bw = memcpy_gbps(std::max<std::int64_t>(hi, 1 << 20));
  fmt::print("#  memcpy bandwidth, one thread, {} bytes: {:.2f} GB/s\n#\n",
             std::max<std::int64_t>(hi, 1 << 20), memcpy_bw);
  fmt::print("#{:>55}{:>33}{:>33}\n", "", "out-of-place", "in-place");
  fmt::print("#{:>11} {:>12} {:>8} {:>6} {:>6} {:>9} {:>7} {:>7} {:>6} {:>9} {:>7} {:>7} {:>6}\n",
             "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
             "algbw", "busbw", "#wrong");
  fmt::print("#{:>11} {:>12} {:>8} {:>6} {:>6} {:>9} {:>7} {:>7} {:>6} {:>9} {:>7} {:>7} {:>6}\n",
             "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
             "(GB/s)", "");

  // One device and one communicator per rank, made once by the ranks' own threads (NCCL's
  // communicator creation is collective).
  std::vector<std::unique_ptr<Backend>> devices(ranks);
  std::vector<std::unique_ptr<Communicator>> comms(ranks);
  // Runs fn(rank) for every rank this process hosts: one under MPI, all (as threads) otherwise.
  auto for_local_ranks = [&](const std::function<void(int)>& fn) {
    if (my_rank >= 0) return fn(my_rank);
    run_ranks(ranks, fn);
  };
  try {
    std::unique_ptr<LocalWorld> local;
#ifdef CAROUSEL_HAVE_NCCL
    std::unique_ptr<NcclWorld> nccl;
    if (backend == "nccl" && my_rank < 0) nccl = std::make_unique<NcclWorld>(ranks, timeout);
#endif
    if (backend == "local") local = std::make_unique<LocalWorld>(ranks, timeout);
    for_local_ranks([&](int r) {
#if defined(CAROUSEL_HAVE_NCCL) && defined(CAROUSEL_HAVE_MPI)
      if (backend == "nccl" && mpi) {
        mpi_world = mpi->world(timeout);
        devices[r] = make_cuda_backend(process_gpu(r));
        comms[r] = NcclWorld::connect(*mpi_world, timeout);
        return;
      }
#endif
#ifdef CAROUSEL_HAVE_NCCL
      if (rendezvous) {
        devices[r] = make_cuda_backend(process_gpu(r));
        comms[r] = NcclWorld::connect(*rendezvous);
        return;
      }
      if (nccl) {
        devices[r] = make_cuda_backend(r);
        comms[r] = nccl->communicator(r);
        return;
      }
#endif
      devices[r] = std::make_unique<CpuBackend>(r);
#ifdef CAROUSEL_HAVE_MPI
      if (mpi) {
        comms[r] = mpi->world(timeout);
        return;
      }
#endif
      comms[r] = local->communicator(r);
    });
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  std::vector<Row> rows;
  std::int64_t total_wrong = 0;
  for (const auto& [type, size] : sweep) {
    const auto& [dtype, type_name] = type;
    const std::size_t elt = dtype_size(dtype);
    std::int64_t send_n, recv_n, count;
    test.counts(size / std::int64_t(elt), ranks, send_n, recv_n, count);
    Row row;
    row.type = type_name;
    row.bytes = std::max(send_n, recv_n) * std::int64_t(elt);
    row.count = count;
    std::vector<std::array<double, 2>> rank_time(ranks);
    std::vector<std::array<double, 2>> rank_wrong(ranks);
    for_local_ranks([&](int r) {
      Backend& be = *devices[r];
      Communicator* comm = comms[r].get();
      for (int mode = 0; mode < 2; ++mode) {
        const bool in_place = mode == 1;
        if (in_place && !test.has_in_place) continue;
        Tensor send, recv;
        if (in_place) {
          std::tie(send, recv) =
              test.in_place_views(be.zeros({std::max(send_n, recv_n)}, dtype), r, count);
        } else {
          send = be.zeros({send_n}, dtype);
          recv = be.zeros({recv_n}, dtype);
        }
        fill(be, send, r);
        for (int i = 0; i < warmup; ++i) test.run(*comm, send, recv, root, op).wait();
        comm->barrier().wait();
        const auto t0 = std::chrono::steady_clock::now();
        Event last;
        for (int i = 0; i < iters; ++i) last = test.run(*comm, send, recv, root, op);
        last.wait();
        rank_time[r][mode] =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count() /
            iters;
        if (check) {  // after timing, on fresh inputs
          if (!in_place) be.upload(std::vector<char>(recv.nbytes(), 0).data(), recv);
          fill(be, send, r);
          comm->barrier().wait();
          test.run(*comm, send, recv, root, op).wait();
          const auto got = values(be, recv);
          std::int64_t wrong = 0;
          for (std::int64_t i = 0; i < std::int64_t(got.size()); ++i) {
            const double e = test.expected(r, ranks, i, count, root, op, input_value);
            if (std::abs(got[i] - e) > 1e-6 * std::abs(e)) ++wrong;
          }
          rank_wrong[r][mode] = wrong;
        }
        comm->barrier().wait();
      }
#ifdef CAROUSEL_HAVE_MPI
      if (my_rank >= 0) share_with_every_rank(*comm, be, rank_time, rank_wrong);
#endif
    });
    for (int mode = 0; mode < 2; ++mode) {
      double t = 0;
      for (int r = 0; r < ranks; ++r) t += rank_time[r][mode] / ranks;  // average over ranks
      row.time_us[mode] = t;
      row.algbw[mode] = t > 0 ? double(row.bytes) / t / 1e3 : 0;
      row.busbw[mode] = row.algbw[mode] * test.busbw_factor(ranks);
      for (int r = 0; r < ranks; ++r) row.wrong[mode] += std::int64_t(rank_wrong[r][mode]);
      total_wrong += row.wrong[mode];
    }
    auto wrong_text = [&](int mode) {
      return !check || (mode == 1 && !test.has_in_place) ? std::string("N/A")
                                                         : std::to_string(row.wrong[mode]);
    };
    fmt::print(" {:>11} {:>12} {:>8} {:>6} {:>6} {:>9.1f} {:>7.2f} {:>7.2f} {:>6} ", row.bytes,
               row.count, row.type, test.reduces ? op_name : "none", test.rooted ? root : -1,
               row.time_us[0], row.algbw[0], row.busbw[0], wrong_text(0));
    if (test.has_in_place) {
      fmt::print("{:>9.1f} {:>7.2f} {:>7.2f} {:>6}\n", row.time_us[1], row.algbw[1], row.busbw[1],
                 wrong_text(1));
    } else {
      fmt::print("{:>9} {:>7} {:>7} {:>6}\n", "N/A", "N/A", "N/A", "N/A");
    }
    rows.push_back(row);
  }
  double avg_bus = 0;
  int n_bus = 0;
  for (const auto& r : rows)
    for (int mode = 0; mode < (test.has_in_place ? 2 : 1); ++mode)
      avg_bus += r.busbw[mode], ++n_bus;
  avg_bus = n_bus ? avg_bus / n_bus : 0;
  fmt::print("# Out of bounds values : {} {}\n", total_wrong, total_wrong ? "FAILED" : "OK");
  fmt::print("# Avg bus bandwidth    : {:.3f}\n", avg_bus);
  if (!rows.empty()) {
    fmt::print("# Largest size: out-of-place busbw {:.2f} GB/s = {:.0f}% of memcpy {:.2f} GB/s\n",
               rows.back().busbw[0], 100 * rows.back().busbw[0] / memcpy_bw, memcpy_bw);
  }
  if (ranks == 1) fmt::print("# note: with 1 rank the busbw factor is 0, so busbw is 0\n");
  fmt::print("#\n# Collective test concluded: {}_perf\n", test.name);
  if (!json_file.empty()) {
    nlohmann::json j = {
        {"test", test.name + "_perf"}, {"backend", backend},       {"ranks", ranks},
        {"datatype", dtype_name_},     {"memcpy_gbps", memcpy_bw}, {"avg_bus_bandwidth", avg_bus},
        {"wrong", total_wrong}};
    for (const auto& r : rows) {
      j["results"].push_back({{"type", r.type},
                              {"size", r.bytes},
                              {"count", r.count},
                              {"out_of_place",
                               {{"time_us", r.time_us[0]},
                                {"alg_bw", r.algbw[0]},
                                {"bus_bw", r.busbw[0]},
                                {"nwrong", r.wrong[0]}}},
                              {"in_place",
                               {{"time_us", r.time_us[1]},
                                {"alg_bw", r.algbw[1]},
                                {"bus_bw", r.busbw[1]},
                                {"nwrong", r.wrong[1]}}}});
    }
    json_out << j.dump(2) << "\n";
    json_out.flush();
    if (!json_out.good()) {
      fmt::print(stderr, "error: writing -J/--output_file '{}' failed: {}\n", json_file,
                 std::strerror(errno));
      return 2;
    }
  }
  return total_wrong ? 1 : 0;
}

}  // namespace carousel::perf
