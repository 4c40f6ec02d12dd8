// test_nccl.cpp — the NCCL communicator on the GPUs this machine has (label gpu): the same
// exact checks as the local and MPI communicators (tests/support/collective_checks.h), on as many
// ranks as there are GPUs (one per GPU, as NCCL requires). Skips, naming why, without a GPU.
#include <gtest/gtest.h>

#include <functional>

#include "collectives/local_communicator.h"
#include "collectives/nccl_communicator.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_info.h"
#include "tests/support/collective_checks.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

// Runs body(rank, ranks, backend, communicator) on every GPU of this machine, one NCCL rank per
// GPU (threads of this process); skips the calling test, naming why, without a GPU.
void on_every_gpu(const std::function<void(int, int, Backend&, Communicator&)>& body) {
  const CudaDevices gpus = list_cuda_devices();
  if (gpus.devices.empty()) GTEST_SKIP() << "no GPU to test NCCL on: " << gpus.why_none;
  const int n = int(gpus.devices.size());
  NcclWorld world(n, 60.0);
  run_ranks(n, [&](int r) {
    auto be = make_cuda_backend(r);
    auto comm = world.communicator(r);
    body(r, n, *be, *comm);
  });
}

TEST(Nccl, CollectivesAndRingAreExactOnEveryGpu) {
  on_every_gpu([](int r, int n, Backend& be, Communicator& comm) {
    for (std::int64_t count : {1, 7, 1000}) {
      for (bool in_place : {false, true})
        testing::check_collectives_exact(comm, be, count, in_place);
    }
    if (n > 1) testing::check_grouped_rings(comm, be);
    auto sub = comm.split(0, -r);
    ASSERT_TRUE(sub);
    EXPECT_EQ(sub->rank(), n - 1 - r);
  });
}

TEST(Nccl, OperationsWaitForTheComputeStream) {
  // The rank's compute stream is kept busy (large GEMMs), then writes x; the all-reduce and
  // all-gather of x are issued at once, with no host synchronisation in between. They must see
  // the written values: the NCCL stream waits for the compute stream's work (an all-reduce that
  // ran at once would read the zeros from before the GEMMs).
  on_every_gpu([](int r, int n, Backend& be, Communicator& comm) {
    const std::int64_t count = 1 << 20, side = 4096;
    Tensor x = be.zeros({count}), sum = be.empty({count}), gathered = be.empty({n * count});
    Tensor a = be.zeros({side, side}), b = be.zeros({side, side}), c = be.empty({side, side});
    be.synchronize();
    for (int i = 0; i < 4; ++i) be.gemm(false, false, 1.0, a, b, 0.0, c);  // ~0.5 TFLOP
    be.fill(x, double(r + 1));
    Event reduced = comm.all_reduce(x, sum, ReduceOp::Sum);
    Event gathered_done = comm.all_gather(x, gathered);
    reduced.wait();
    gathered_done.wait();
    const std::vector<float> got_sum = be.to_host<float>(sum);
    const std::vector<float> got_all = be.to_host<float>(gathered);
    const float want_sum = float(n * (n + 1) / 2);
    for (std::int64_t i = 0; i < count; i += 4099) {
      ASSERT_EQ(got_sum[i], want_sum) << "all-reduce element " << i << " on rank " << r;
    }
    for (int peer = 0; peer < n; ++peer) {
      ASSERT_EQ(got_all[peer * count + count - 1], float(peer + 1))
          << "all-gather of rank " << peer;
    }
  });
}

TEST(Nccl, OperationsDoNotOverwriteWhatTheComputeStreamStillReads) {
  // The other direction: large GEMMs queued on the compute stream read `a` (all ones), then an
  // all-gather into `a` (zeros) is issued at once. Every product must have read the ones: the
  // NCCL stream waits for the compute stream's queued work before it writes (as a weight slot
  // refilled by the Buffer Sliding Window while the previous repeat's kernels still read it).
  on_every_gpu([](int r, int n, Backend& be, Communicator& comm) {
    const std::int64_t side = 4096;
    Tensor a = be.empty({side * side}), b = be.empty({side, side}), c = be.empty({side, side});
    const std::int64_t count = side * side / n;  // each rank's share of a (all of it on 1 GPU)
    Tensor zeros = be.zeros({count});
    be.fill(a, 1.0);
    be.fill(b, 1.0);
    be.synchronize();
    for (int i = 0; i < 4; ++i) be.gemm(false, false, 1.0, a.reshape({side, side}), b, 0.0, c);
    comm.all_gather(zeros, a.view(0, {n * count})).wait();
    const std::vector<float> products = be.to_host<float>(c);
    for (std::int64_t i = 0; i < side * side; i += 4099) {
      ASSERT_EQ(products[i], float(side)) << "element " << i << " on rank " << r;
    }
  });
}

TEST(Nccl, ConsumersWaitOnTheDeviceNotTheHost) {
  // Event::order_before on an NCCL operation: the compute stream waits for the gather's CUDA
  // event, the host does not (the gather is still queued behind large GEMMs when it returns),
  // and the kernel queued next on the compute stream reads the gathered values.
  on_every_gpu([](int r, int n, Backend& be, Communicator& comm) {
    const std::int64_t count = 1 << 20, side = 4096;
    Tensor x = be.zeros({count}), gathered = be.zeros({n * count}), doubled = be.empty({n * count});
    Tensor a = be.zeros({side, side}), b = be.zeros({side, side}), c = be.empty({side, side});
    comm.all_gather(x, gathered).wait();  // NCCL connects on first use: not within the GEMMs
    be.synchronize();
    for (int i = 0; i < 4; ++i) be.gemm(false, false, 1.0, a, b, 0.0, c);  // ~0.5 TFLOP
    be.fill(x, double(r + 1));
    const Event done = comm.all_gather(x, gathered);
    done.order_before(be.allocator().work_queue());
    EXPECT_FALSE(done.ready()) << "the host waited for the gather on rank " << r;
    be.add(gathered, gathered, doubled);  // queued on the compute stream after the wait
    const std::vector<float> got = be.to_host<float>(doubled);
    done.wait();
    for (int peer = 0; peer < n; ++peer) {
      ASSERT_EQ(got[peer * count + count - 1], float(2 * (peer + 1))) << "gathered from " << peer;
    }
  });
}

TEST(Nccl, MoreRanksThanGpusIsAClearError) {
  const CudaDevices gpus = list_cuda_devices();
  const std::string msg = testing::error_of([&] { NcclWorld world(int(gpus.devices.size()) + 1); });
  EXPECT_NE(msg.find("NCCL communicator: "), std::string::npos) << msg;
}

}  // namespace
}  // namespace carousel
