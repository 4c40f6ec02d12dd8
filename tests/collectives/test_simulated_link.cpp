// test_simulated_link.cpp — LocalWorld's simulated link (cpu_link_gigabytes_per_second): the data
// arrive as over memory, no sooner than their bytes over the link's speed.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "collectives/local_communicator.h"
#include "compute/cpu_backend.h"
#include "compute/error.h"

namespace carousel {
namespace {

// A simulated link (LocalWorld's link_bytes_per_second) delivers the data as memory would, and
// a group completes no sooner than its larger direction's bytes over the speed after it matched:
// 40 kB each way at 1 MB/s is at least 40 ms (a lower bound only: the machine may be slower).
TEST(SendRecv, ASimulatedLinkTakesBytesOverItsSpeed) {
  LocalWorld world(2, 300.0, 1e6);
  std::vector<double> seconds(2);
  run_ranks(2, [&](int r) {
    CpuBackend be(r);
    auto comm = world.communicator(r);
    std::vector<float> mine(10000, float(r + 1));
    const Tensor out = be.from_host(mine, {10000}), in = be.zeros({10000}, DType::F32);
    comm->barrier().wait();
    const auto start = std::chrono::steady_clock::now();
    comm->group_start();
    comm->send(out, 1 - r);
    comm->recv(in, 1 - r);
    comm->group_end().wait();
    seconds[std::size_t(r)] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(be.to_host<float>(in), std::vector<float>(10000, float(2 - r)));
  });
  for (const double s : seconds) EXPECT_GE(s, 0.04);
  EXPECT_THROW(LocalWorld(2, 300.0, -1.0), Error);
}

}  // namespace
}  // namespace carousel
