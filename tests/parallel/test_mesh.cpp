// test_mesh.cpp — the decisions of host/parallel/mesh.h that the GPU path follows, checked on CPUs:
// rank placement, and which transport (in-process, MPI, NCCL) a run uses and why, agreed by the
// processes of an mpirun job.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "compute/cpu_backend.h"
#include "host/config/config.h"
#include "host/parallel/mesh.h"
#include "host/run/device_peak.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

Config with_device(const std::string& device) {
  Config c;
  c.device = device;
  return c;
}

TEST(Mesh, RankPlacementIsFsdpFastest) {
  const MeshShape mesh{2, 3, 2};  // D, S, F
  for (int rank = 0; rank < mesh.ranks(); ++rank) {
    const RankPlace p = RankPlace::of(rank, mesh);
    EXPECT_EQ(p.rank(), rank);
    EXPECT_EQ(p.fsdp_rank, rank % 2);
    EXPECT_EQ(p.stage_rank, rank / 2 % 3);
    EXPECT_EQ(p.data_rank, rank / 6);
    EXPECT_EQ(p.batch_part(), p.data_rank * 2 + p.fsdp_rank);
  }
}

// Tensor ranks are the fastest axis (a tensor group on neighbouring devices of a node), context
// ranks the next; both share their batch part, and context ranks count as replicas.
TEST(Mesh, RankPlacementIsTensorThenContextFastest) {
  const MeshShape mesh{2, 3, 2, 4, 2};  // D, S, F, T, C
  ASSERT_EQ(mesh.ranks(), 96);
  ASSERT_EQ(mesh.replicas(), 4);
  for (int rank = 0; rank < mesh.ranks(); ++rank) {
    const RankPlace p = RankPlace::of(rank, mesh);
    EXPECT_EQ(p.rank(), rank);
    EXPECT_EQ(p.tensor_rank, rank % 4);
    EXPECT_EQ(p.context_rank, rank / 4 % 2);
    EXPECT_EQ(p.fsdp_rank, rank / 8 % 2);
    EXPECT_EQ(p.stage_rank, rank / 16 % 3);
    EXPECT_EQ(p.data_rank, rank / 48);
    EXPECT_EQ(p.batch_part(), p.data_rank * 2 + p.fsdp_rank);
    EXPECT_EQ(p.replica_rank(), p.data_rank * 2 + p.context_rank);
  }
}

struct TransportCase {
  std::string device;
  int ranks;
  MachineView machine;
  Transport expected;
  std::string reason_words;
};

TEST(Mesh, TransportFollowsDevicesGpusAndLaunch) {
  const TransportCase cases[] = {
      {"cpu", 1, {0, false, 1, 1}, Transport::Local, "one CPU device"},
      {"cpu", 4, {8, true, 1, 1}, Transport::Local, "threads of this process on CPU"},
      {"cpu", 4, {0, false, 4, 4}, Transport::Mpi, "mpirun processes on CPU"},
      {"auto", 4, {0, true, 1, 1}, Transport::Local, "CPU devices"},     // auto without a GPU
      {"cuda", 1, {1, true, 1, 1}, Transport::Local, "one GPU device"},  // one GPU: no NCCL
      {"cuda", 2, {2, true, 1, 1}, Transport::Nccl, "2 rank(s) on 2 visible GPU(s)"},
      {"cuda", 8, {8, true, 1, 1}, Transport::Nccl, "one GPU each"},
      {"auto", 4, {1, true, 1, 1}, Transport::Local, "4 ranks on 1 visible GPU(s)"},
      {"cuda", 2, {2, false, 1, 1}, Transport::Local, "this build has no NCCL"},
      {"cuda", 16, {8, true, 16, 8}, Transport::Nccl, "bootstrapped over MPI"},
  };
  for (const auto& c : cases) {
    const TransportChoice choice = choose_transport(with_device(c.device), c.ranks, c.machine);
    EXPECT_EQ(choice.transport, c.expected) << c.device << " x" << c.ranks << ": " << choice.reason;
    EXPECT_NE(choice.reason.find(c.reason_words), std::string::npos) << choice.reason;
  }
}

TEST(Mesh, TransportRefusesWhatCannotRun) {
  auto message = [](const std::string& device, int ranks, MachineView machine) {
    try {
      choose_transport(with_device(device), ranks, machine);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("cuda", 1, {0, true, 1, 1}).find("no GPU is visible"), std::string::npos);
  EXPECT_NE(message("cuda", 4, {4, false, 4, 4}).find("needs the NCCL communicator"),
            std::string::npos);
  // A tensor group must not span nodes: 6 processes on this node cannot hold groups of 4.
  Config tensor4 = with_device("cpu");
  tensor4.ici_tensor_parallelism = 4;
  const std::string spans = testing::error_of([&] {
    choose_transport(tensor4, 12, {0, false, 12, 6});
  });
  EXPECT_NE(spans.find("ici_tensor_parallelism=4 but this node runs 6 of the job's 12 processes"),
            std::string::npos)
      << spans;
  EXPECT_EQ(choose_transport(tensor4, 16, {0, false, 16, 8}).transport, Transport::Mpi);
  EXPECT_EQ(choose_transport(tensor4, 4, {0, false, 1, 1}).transport, Transport::Local);
  const std::string too_many = message("cuda", 16, {8, true, 16, 16});
  EXPECT_NE(too_many.find("16 processes on this node but it has 8 visible GPU(s)"),
            std::string::npos)
      << too_many;
}

// Under mpirun the processes exchange their choices first: a job whose nodes differ fails on
// every process with one message (4 processes as threads over the in-process communicator).
TEST(Mesh, ProcessesThatChooseDifferentlyAllFail) {
  auto outcome = [](const std::string& device, const std::vector<int>& gpus_per_process) {
    const int n = int(gpus_per_process.size());
    LocalWorld world(n);
    std::vector<std::string> messages(std::size_t(n), "no error");
    run_ranks(n, [&](int p) {
      const auto processes = world.communicator(p);
      const MachineView machine{gpus_per_process[std::size_t(p)], true, n, 1};
      try {
        const TransportChoice agreed =
            agree_on_transport(with_device(device), n, machine, *processes);
        messages[std::size_t(p)] = "agreed on " + std::string(transport_name(agreed.transport));
      } catch (const Error& e) {
        messages[std::size_t(p)] = e.what();
      }
    });
    return messages;
  };
  // GPUs on the first two nodes only, device=auto: the same error everywhere.
  const std::vector<std::string> mixed = outcome("auto", {1, 1, 0, 0});
  for (const std::string& m : mixed) {
    EXPECT_EQ(m, mixed[0]);
    EXPECT_NE(m.find("NCCL on GPUs on process(es) 0, 1; MPI on CPUs on process(es) 2, 3"),
              std::string::npos)
        << m;
  }
  // device=cuda and process 3 sees no GPU: its own reason there, the others name it.
  const std::vector<std::string> missing = outcome("cuda", {1, 1, 1, 0});
  EXPECT_NE(missing[3].find("no GPU is visible"), std::string::npos) << missing[3];
  for (int p = 0; p < 3; ++p) {
    EXPECT_NE(missing[std::size_t(p)].find("process(es) 3 of this mpirun job cannot run with "
                                           "device=cuda"),
              std::string::npos)
        << missing[std::size_t(p)];
  }
  // Agreement: every process goes on with the common choice.
  for (const std::string& m : outcome("auto", {0, 0, 0})) EXPECT_EQ(m, "agreed on MPI on CPUs");
  for (const std::string& m : outcome("cuda", {1, 1})) EXPECT_EQ(m, "agreed on NCCL on GPUs");
}

}  // namespace
}  // namespace carousel

namespace carousel {
namespace {

// Ranks share the cores; OMP_NUM_THREADS may ask for fewer threads, never for more than the
// share (ranks x threads <= cores).
TEST(Mesh, ThreadsPerRankNeverOversubscribe) {
  const char* saved = std::getenv("OMP_NUM_THREADS");
  const std::string before = saved ? saved : "";
  const int cores = omp_get_num_procs();
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(threads_per_rank(1), cores);
  EXPECT_EQ(threads_per_rank(2 * cores), 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  EXPECT_EQ(threads_per_rank(1), 1);
  setenv("OMP_NUM_THREADS", "100000", 1);
  EXPECT_EQ(threads_per_rank(1), cores);
  setenv("OMP_NUM_THREADS", "4,2", 1);  // a nested list: not a count, the share stands
  EXPECT_EQ(threads_per_rank(1), cores);
  if (saved) {
    setenv("OMP_NUM_THREADS", before.c_str(), 1);
  } else {
    unsetenv("OMP_NUM_THREADS");
  }
}

TEST(DevicePeak, ConfiguredMeasuredAndSharedCores) {
  CpuBackend be;
  Config c;
  c.peak_flops = 2e12;
  EXPECT_EQ(run_peak_flops(c, be, 4, true, 1), 8e12);  // a given peak counts every device
  c.peak_flops = 0;
  const double one = device_peak_flops(c, be);  // a measured GEMM: positive, below 10 TFLOP/s
  EXPECT_GT(one, 1e8);
  EXPECT_LT(one, 1e13);
  // Threads of one process share its cores: never more devices at once than cores / threads.
  const int threads = omp_get_max_threads();
  const double many = run_peak_flops(c, be, 1000, true, 1);
  EXPECT_LE(many, one * 1.5 * omp_get_num_procs());
  EXPECT_EQ(omp_get_max_threads(), threads);  // measured with 1 thread, the count restored
}

}  // namespace
}  // namespace carousel
