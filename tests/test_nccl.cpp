// test_nccl.cpp — the NCCL communicator on the GPUs this machine has (label gpu): every
// collective and grouped send/recv with rank-dependent integers, checked exactly, on as many
// ranks as there are GPUs (one per GPU, as NCCL requires). Skips, naming why, without a GPU.
#include <gtest/gtest.h>

#include "collectives/local_communicator.h"
#include "collectives/nccl_communicator.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_info.h"
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
    const std::int64_t count = 1000;
    std::vector<std::int32_t> mine(count);
    for (std::int64_t i = 0; i < count; ++i) mine[i] = std::int32_t(1000 * r + i % 997);
    Tensor send = be->from_host(mine, {count}), gathered = be->zeros({count * n}, DType::I32);
    comm->all_gather(send, gathered).wait();
    const auto g = be->to_host<std::int32_t>(gathered);
    for (int q = 0; q < n; ++q) EXPECT_EQ(g[q * count + 5], 1000 * q + 5);
    Tensor sum = be->zeros({count}, DType::I32);
    comm->all_reduce(send, sum, ReduceOp::Sum).wait();
    EXPECT_EQ(be->to_host<std::int32_t>(sum)[7], 1000 * n * (n - 1) / 2 + 7 * n);
    Tensor rs = be->zeros({count / n > 0 ? count / n : 1}, DType::I32);
    if (count % n == 0) {
      comm->reduce_scatter(be->from_host(std::vector<std::int32_t>(count, r + 1), {count}), rs,
                           ReduceOp::Sum).wait();
      EXPECT_EQ(be->to_host<std::int32_t>(rs)[0], n * (n + 1) / 2);
    }
    comm->barrier().wait();
    if (n > 1) {
      Tensor from_prev = be->zeros({count}, DType::I32);
      comm->group_start();
      comm->send(send, (r + 1) % n);
      comm->recv(from_prev, (r + n - 1) % n);
      comm->group_end().wait();
      EXPECT_EQ(be->to_host<std::int32_t>(from_prev)[3], 1000 * ((r + n - 1) % n) + 3);
    }
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
