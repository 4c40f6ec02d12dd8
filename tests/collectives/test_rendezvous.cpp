// test_rendezvous.cpp — the torchrun-style rendezvous that hands the NCCL id to other processes:
// a payload from rank 0 reaches every rank over loopback TCP; bad environments and an absent
// master are clear, bounded errors.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "collectives/local_communicator.h"
#include "collectives/rendezvous.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

int free_port() {  // ask the kernel for a free loopback port
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(Rendezvous, RankZerosPayloadReachesEveryRank) {
  const int port = free_port(), n = 4;
  std::vector<std::vector<char>> got(n);
  run_ranks(n, [&](int r) {
    RendezvousConfig cfg{r, n, "127.0.0.1", port, 10.0};
    std::vector<char> payload;
    if (r == 0) payload = {'n', 'c', 'c', 'l', '\0', 'i', 'd'};
    got[r] = rendezvous_broadcast(cfg, payload);
  });
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(got[r], (std::vector<char>{'n', 'c', 'c', 'l', '\0', 'i', 'd'}));
}

TEST(Rendezvous, AbsentMasterTimesOutNamingTheAddress) {
  RendezvousConfig cfg{1, 2, "127.0.0.1", free_port(), 0.3};
  const std::string msg = testing::error_of([&] { rendezvous_broadcast(cfg, {}); });
  EXPECT_NE(msg.find("rank 1 could not reach the master at 127.0.0.1:"), std::string::npos) << msg;
}

TEST(Rendezvous, EnvironmentErrorsNameTheVariable) {
  ::unsetenv("RANK");
  ::setenv("WORLD_SIZE", "4", 1);
  EXPECT_NE(testing::error_of([] { rendezvous_from_env(); }).find("RANK is not set"),
            std::string::npos);
  ::setenv("RANK", "4", 1);
  EXPECT_NE(testing::error_of([] {
              rendezvous_from_env();
            }).find("RANK='4' is not valid; it must be an integer in [0, 3]"),
            std::string::npos);
  ::setenv("RANK", "1", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "http", 1);
  EXPECT_NE(testing::error_of([] { rendezvous_from_env(); }).find("MASTER_PORT='http'"),
            std::string::npos);
  ::setenv("MASTER_PORT", "29511", 1);
  const RendezvousConfig cfg = rendezvous_from_env();
  EXPECT_EQ(cfg.rank, 1);
  EXPECT_EQ(cfg.world_size, 4);
  EXPECT_EQ(cfg.master_port, 29511);
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
}

}  // namespace
}  // namespace carousel
