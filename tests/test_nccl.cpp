// test_nccl.cpp — the NCCL communicator on the GPUs this machine has (label gpu): the same
// exact checks as the local and MPI communicators (tests/collective_checks.h), on as many
// ranks as there are GPUs (one per GPU, as NCCL requires). Skips, naming why, without a GPU.
#include <gtest/gtest.h>

#include "collectives/local_communicator.h"
#include "collectives/nccl_communicator.h"
#include "compute/cuda_backend.h"
#include "compute/device_info.h"
#include "tests/collective_checks.h"
#include "tests/test_util.h"

namespace carousel {
namespace {

TEST(Nccl, CollectivesAndRingAreExactOnEveryGpu) {
  const CudaDevices gpus = list_cuda_devices();
  if (gpus.devices.empty()) GTEST_SKIP() << "no GPU to test NCCL on: " << gpus.why_none;
  const int n = int(gpus.devices.size());
  NcclWorld world(n, 60.0);
  run_ranks(n, [&](int r) {
    auto be = make_cuda_backend(r);
    auto comm = world.communicator(r);
    for (std::int64_t count : {1, 7, 1000}) {
      for (bool in_place : {false, true})
        testing::check_collectives_exact(*comm, *be, count, in_place);
    }
    if (n > 1) testing::check_grouped_rings(*comm, *be);
    auto sub = comm->split(0, -r);
    ASSERT_TRUE(sub);
    EXPECT_EQ(sub->rank(), n - 1 - r);
  });
}

TEST(Nccl, MoreRanksThanGpusIsAClearError) {
  const CudaDevices gpus = list_cuda_devices();
  const std::string msg = testing::error_of([&] { NcclWorld world(int(gpus.devices.size()) + 1); });
  EXPECT_NE(msg.find("NCCL communicator: "), std::string::npos) << msg;
}

}  // namespace
}  // namespace carousel
