// perf.cpp — the benchmark run: ranks, devices and communicators for the chosen backend, then
// the sweep (type x op x root x cycle x size), each row timed out of place and in place and
// checked (perf.h lists the files of the driver).
#include "benchmarks/collectives/perf.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>
#include <tuple>
#include <vector>

#include "benchmarks/collectives/perf_options.h"
#include "benchmarks/collectives/perf_report.h"
#include "benchmarks/collectives/perf_types.h"
#include "collectives/local_communicator.h"
#include "collectives/rendezvous.h"
#include "compute/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_info.h"
#ifdef CAROUSEL_HAVE_NCCL
#include "collectives/nccl_communicator.h"
#endif
#ifdef CAROUSEL_HAVE_MPI
#include "collectives/mpi_communicator.h"
#endif

namespace carousel::perf {

namespace {

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

// Under mpirun each process fills only its own rank's entries; a sum over the ranks gives
// everyone all of them (on the rank's own device and communicator).
void share_with_every_rank(Communicator& comm, Backend& be, std::vector<double>& values) {
  Tensor t = be.from_host(values, {std::int64_t(values.size())});
  comm.all_reduce(t, t, ReduceOp::Sum).wait();
  values = be.to_host<double>(t);
}

// The sizes of the sweep for one element type, as nccl-tests steps them: from -b, times -f when
// it is above 1, else plus -i, up to -e. A size that gives the collective no element on a rank
// is left out (nccl-tests prints it as a row of zero bytes; carousel's communicators take no
// empty buffers).
std::vector<std::int64_t> sweep_sizes(const CollectiveTest& test, const Options& o, int ranks,
                                      DType dtype) {
  std::vector<std::int64_t> sizes;
  const std::int64_t elt = std::int64_t(dtype_size(dtype));
  for (std::int64_t size = std::max(o.min_bytes, elt); size <= o.max_bytes;) {
    std::int64_t send_n, recv_n, count;
    test.counts(size / elt, elt, ranks, send_n, recv_n, count);
    if (count > 0) sizes.push_back(size);
    const std::int64_t room = o.max_bytes - size;  // no overflow past -e
    if (o.step_factor > 1 ? size > o.max_bytes / o.step_factor : room < o.step_bytes) break;
    size = o.step_factor > 1 ? size * o.step_factor : size + o.step_bytes;
  }
  return sizes;
}

}  // namespace

namespace {
int run_perf_unguarded(const CollectiveTest& test, int argc, char** argv);
}  // namespace

// Every failure the measurement meets is one "error:" line and exit status 2: an allocation the
// machine cannot give (a large -e with many ranks), or a carousel error from a rank.
int run_perf(const CollectiveTest& test, int argc, char** argv) {
  try {
    return run_perf_unguarded(test, argc, argv);
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "error: {}_perf: out of memory allocating the buffers (the largest size, "
               "-e/--maxbytes, on every rank needs more than this machine has); use a smaller "
               "-e or fewer ranks\n",
               test.name);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
  }
  return 2;
}

namespace {
int run_perf_unguarded(const CollectiveTest& test, int argc, char** argv) {
  const std::string program = test.name + "_perf";
  const std::string start_time = now_string();
  int exit_code = 0;
  auto parsed = parse_options(program, argc, argv, exit_code);
  if (!parsed) return exit_code;
  LaunchFacts facts{.mpi_processes = mpi_launch_size()};
#ifdef CAROUSEL_HAVE_MPI
  facts.mpi_built = true;
#endif
#ifdef CAROUSEL_HAVE_NCCL
  facts.nccl_built = true;
  facts.gpus = int(list_cuda_devices().devices.size());
#endif
  const auto backend = choose_backend(parsed->backend, facts);
  if (!backend) return 2;
  parsed->backend = *backend;
  if (!check_device_flags(*parsed)) return 2;
  const Options& o = *parsed;
  int ranks = o.ranks();
  int my_rank = -1;  // this process's rank under mpirun or torchrun; -1: every rank is a thread
#ifndef CAROUSEL_HAVE_MPI
  if (o.backend == "mpi") {
    fmt::print(stderr,
               "error: --backend mpi: this build has no MPI communicator (install "
               "libopenmpi-dev and rebuild); use --backend local\n");
    return 2;
  }
#else
  // Under mpirun (--backend mpi, or nccl started by mpirun) each process is one rank: -t and -g
  // must stay 1. Only rank 0 prints (as nccl-tests does); the others' stdout goes nowhere.
  std::unique_ptr<MpiRuntime> mpi;
  std::unique_ptr<Communicator> mpi_world;  // NCCL under mpirun: carries the NCCL id
  if (o.backend == "mpi" && mpi_launch_size() == 0) {
    fmt::print(stderr,
               "error: --backend mpi: this process was not started by mpirun (no "
               "OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_SIZE), so it would measure one rank "
               "alone; start N processes with mpirun -np N, or use --backend local for ranks "
               "as threads\n");
    return 2;
  }
  if (o.backend == "mpi" || (o.backend == "nccl" && mpi_launch_size() > 1)) {
    if (o.ranks_flags_given && o.ranks() != 1) {
      fmt::print(stderr,
                 "error: under mpirun each process is one rank; start N processes with "
                 "mpirun -np N and leave -t and -g at 1\n");
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
  if (o.backend == "nccl" && my_rank < 0 && std::getenv("WORLD_SIZE") &&
      std::atoi(std::getenv("WORLD_SIZE")) > 1) {
    try {
      rendezvous = rendezvous_from_env(o.timeout);
    } catch (const Error& e) {
      fmt::print(stderr, "error: {}\n", e.what());
      return 2;
    }
    ranks = rendezvous->world_size;
    my_rank = rendezvous->rank;
    if (my_rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 2;
  }
#ifndef CAROUSEL_HAVE_NCCL
  if (o.backend == "nccl") {
    fmt::print(stderr,
               "error: --backend nccl: this build has no NCCL communicator (needs CUDA "
               "and NCCL at configure time); use --backend local\n");
    return 2;
  }
#endif
  if (!check_root(o, ranks)) return 2;
  bool any_size = false;
  for (const auto& type : o.types) any_size |= !sweep_sizes(test, o, ranks, type.dtype).empty();
  if (!any_size) {
    fmt::print(stderr,
               "error: -b/--minbytes {} to -e/--maxbytes {}: no size in this range gives {} "
               "with {} ranks one element of type {}; valid: a larger -e\n",
               o.min_text, o.max_text, test.name, ranks, o.type_text);
    return 2;
  }

  // One device and one communicator per rank, made once by the ranks' own threads (NCCL's
  // communicator creation is collective, so it is always "parallel init").
  std::vector<std::unique_ptr<Backend>> devices(ranks);
  std::vector<std::unique_ptr<Communicator>> comms(ranks);
  auto for_local_ranks = [&](const std::function<void(int)>& fn) {
    if (my_rank >= 0) return fn(my_rank);
    run_ranks(ranks, fn);
  };
  // Destroying NCCL communicators is collective within a node: each rank's thread destroys its
  // own, all at once, however this function returns (the main thread destroying them one after
  // another would wait forever in the first for the second).
  struct InRankThreads {
    std::function<void()> run;
    ~InRankThreads() {
      try {
        run();
      } catch (const std::exception& e) {  // a destructor must not throw (terminate)
        fmt::print(stderr, "error: destroying the communicators: {}\n", e.what());
      }
    }
  } destroy_communicators{[&] { for_local_ranks([&](int r) { comms[r].reset(); }); }};
  std::vector<double> pids(ranks, 0);
  try {
    std::unique_ptr<LocalWorld> local;
#ifdef CAROUSEL_HAVE_NCCL
    std::unique_ptr<NcclWorld> nccl;
    if (o.backend == "nccl" && my_rank < 0) nccl = std::make_unique<NcclWorld>(ranks, o.timeout);
#endif
    if (o.backend == "local") local = std::make_unique<LocalWorld>(ranks, o.timeout);
    for_local_ranks([&](int r) {
      [&] {
#if defined(CAROUSEL_HAVE_NCCL) && defined(CAROUSEL_HAVE_MPI)
        if (o.backend == "nccl" && mpi) {
          mpi_world = mpi->world(o.timeout);
          devices[r] = make_cuda_backend(process_gpu(r));
          comms[r] = NcclWorld::connect(*mpi_world, o.timeout);
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
          comms[r] = mpi->world(o.timeout);
          return;
        }
#endif
        comms[r] = local->communicator(r);
      }();
      pids[r] = double(getpid());
      if (my_rank >= 0) share_with_every_rank(*comms[r], *devices[r], pids);
    });
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }

  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  std::vector<Device> device_lines;
  for (int r = 0; r < ranks; ++r) {
    Device d{r, int(pids[r]), r, host, "", ""};
    if (o.backend == "nccl") {
      d.id = fmt::format("cuda:{}", r);
      d.info = devices[r] ? devices[r]->name() : "GPU of another process";
    } else {
      d.id = fmt::format("cpu:{}", r);
      d.info = o.backend == "mpi" ? "carousel CPU device (one process per rank)"
                                  : "carousel simulated CPU device (a thread of this process)";
    }
    device_lines.push_back(d);
  }
  const std::int64_t memcpy_bytes = std::max<std::int64_t>(o.max_bytes, 1 << 20);
  const double memcpy_bw = memcpy_gbps(memcpy_bytes);
  print_preamble(
      o, program, ranks, device_lines,
      fmt::format("carousel {}: nccl-tests 2.19 format; backend {}, {} ranks ({})", program,
                  o.backend, ranks, my_rank >= 0 ? "one process each" : "threads of this process"));
  fmt::print("#  memcpy bandwidth, one thread, {} bytes: {:.2f} GB/s\n", memcpy_bytes, memcpy_bw);
  print_table_header(o);

  // The (op, root) pairs: every -o op of a reducing collective ("none" otherwise), every root of
  // a rooted one with -r all (-1 otherwise).
  std::vector<ReduceChoice> ops = o.ops;
  if (!test.reduces) ops = {{ReduceOp::Sum, "none"}};  // inputs as for sum; nothing reduces
  std::vector<int> roots = {test.rooted ? o.root : -1};
  if (test.rooted && o.all_roots) {
    roots.clear();
    for (int r = 0; r < ranks; ++r) roots.push_back(r);
  }
  std::vector<Row> rows;
  std::int64_t buffer_bytes = 0;  // per rank, the largest size's send + receive buffers (-M)
  for (const ElementType& type : o.types) {
    const std::int64_t elt = std::int64_t(dtype_size(type.dtype));
    for (const ReduceChoice& op : ops) {
      for (int root : roots) {
        for (int cycle = 0; o.run_cycles == 0 || cycle < o.run_cycles; ++cycle) {  // 0: forever
          for (std::int64_t size : sweep_sizes(test, o, ranks, type.dtype)) {
            std::int64_t send_n, recv_n, count;
            test.counts(size / elt, elt, ranks, send_n, recv_n, count);
            Row row;
            row.type = type.name;
            row.redop = op.name;
            row.root = root;
            row.bytes = std::max(send_n, recv_n) * elt;
            buffer_bytes = std::max(buffer_bytes, (send_n + recv_n) * elt);
            row.count = count;
            // Per rank: [time out, time in, wrong out, wrong in, timed ops], then with -I the
            // time of every iteration out of place and in place (shared under MPI).
            const std::size_t stride = 5 + (o.per_iter_timing ? 2 * std::size_t(o.iters) : 0);
            std::vector<double> stats(std::size_t(ranks) * stride, 0.0);
            for_local_ranks([&](int r) {
              Backend& be = *devices[r];
              Communicator& comm = *comms[r];
              double* mine = &stats[std::size_t(r) * stride];
              for (int mode = 0; mode < 2; ++mode) {
                const bool in_place = mode == 1;
                if (in_place && !test.has_in_place) continue;
                // -u: each buffer starts `unalign` elements into its allocation.
                const auto buffer = [&](std::int64_t n) {
                  return be.zeros({n + o.unalign}, type.dtype).view(o.unalign, {n});
                };
                Tensor send, recv;
                if (in_place) {
                  std::tie(send, recv) =
                      test.in_place_views(buffer(std::max(send_n, recv_n)), r, count);
                } else {
                  send = buffer(send_n);
                  recv = buffer(recv_n);
                }
                fill_inputs(be, send, op.op, r, ranks);
                for (int i = 0; i < o.warmup; ++i) test.run(comm, send, recv, root, op.op).wait();
                comm.barrier().wait();
                std::int64_t issued = 0;
                const auto t0 = std::chrono::steady_clock::now();
                Event last;
                for (int i = 0; i < o.iters; ++i) {
                  const auto start = std::chrono::steady_clock::now();
                  for (int a = 0; a < o.agg_iters; ++a) {
                    last = test.run(comm, send, recv, root, op.op);
                    ++issued;
                    if (o.blocking) {  // -z 1: wait and barrier after each operation
                      last.wait();
                      comm.barrier().wait();
                    }
                  }
                  if (o.per_iter_timing) {  // -I: the iteration ends when its operations have
                    last.wait();
                    mine[5 + std::size_t(mode * o.iters + i)] =
                        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                                  start)
                            .count();
                  }
                }
                last.wait();
                mine[mode] =
                    std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count() /
                    double(issued);
                if (mode == 0) mine[4] = double(issued);
                for (int c = 0; c < o.check; ++c) {  // -c N: after timing, on fresh inputs
                  if (!in_place) be.upload(std::vector<char>(recv.nbytes(), 0).data(), recv);
                  fill_inputs(be, send, op.op, r, ranks);
                  comm.barrier().wait();
                  test.run(comm, send, recv, root, op.op).wait();
                  mine[2 + mode] += double(count_wrong(be, recv, op.op, ranks, [&](std::int64_t i) {
                    return test.source(r, ranks, i, count, root);
                  }));
                }
                comm.barrier().wait();
              }
              if (my_rank >= 0) share_with_every_rank(comm, be, stats);
            });
            for (int mode = 0; mode < 2; ++mode) {
              Measurement& m = row.placement[mode];
              m.present = mode == 0 || test.has_in_place;
              if (!m.present) continue;
              std::vector<double> times(ranks);
              for (int r = 0; r < ranks; ++r) {
                times[r] = stats[std::size_t(r) * stride + mode];
                m.wrong += std::int64_t(stats[std::size_t(r) * stride + 2 + mode]);
              }
              if (o.per_iter_timing) {  // an iteration takes as long as its slowest rank
                m.iteration_us.assign(std::size_t(o.iters), 0.0);
                for (int r = 0; r < ranks; ++r) {
                  for (int i = 0; i < o.iters; ++i) {
                    double& t = m.iteration_us[std::size_t(i)];
                    t = std::max(
                        t, stats[std::size_t(r) * stride + 5 + std::size_t(mode * o.iters + i)]);
                  }
                }
              }
              m.time_us = time_over_ranks(times, o.average);
              m.algbw = m.time_us > 0 ? double(row.bytes) / m.time_us / 1e3 : 0;
              m.busbw = m.algbw * test.busbw_factor(ranks);
            }
            row.iterations = o.iters;
            row.operations_per_rank = std::int64_t(stats[4]);
            print_row(o, row);
            std::fflush(stdout);
            rows.push_back(row);
          }
        }
      }
    }
  }
  const Summary summary = summarize(rows);
  print_footer(summary, program);
  if (!rows.empty()) {
    fmt::print("# carousel: largest size out-of-place busbw {:.2f} GB/s = {:.0f}% of memcpy\n",
               rows.back().placement[0].busbw, 100 * rows.back().placement[0].busbw / memcpy_bw);
  }
  if (ranks == 1) fmt::print("# carousel: with 1 rank the busbw factor is 0, so busbw is 0\n");
  if (o.memory_report) {
    fmt::print(
        "# Memory: {} bytes of send and receive buffers per rank at the largest size (allocated "
        "per size and placement, freed after it)\n",
        buffer_bytes);
  }
  if (!o.json_file.empty() && my_rank <= 0 &&
      !write_json(o, program, ranks, device_lines, memcpy_bw, rows, summary, start_time)) {
    return 2;
  }
  return summary.out_of_bounds ? 1 : 0;
}
}  // namespace

}  // namespace carousel::perf
