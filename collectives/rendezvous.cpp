// rendezvous.cpp — a TCP broadcast of a small payload from rank 0 to every other process.
#include "collectives/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "compute/error.h"

namespace carousel {

namespace {

int env_int(const char* name, int lo, int hi, const char* meaning) {
  const char* v = std::getenv(name);
  CAROUSEL_CHECK(v && *v,
                 "launch: environment variable {} is not set ({}); set RANK, "
                 "WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun does",
                 name, meaning);
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  CAROUSEL_CHECK(end && *end == 0 && x >= lo && x <= hi,
                 "launch: {}='{}' is not valid; it must be an integer in [{}, {}] ({})", name, v,
                 lo, hi, meaning);
  return int(x);
}

// Closes the socket when it goes out of scope.
struct Socket {
  int fd = -1;
  explicit Socket(int f) : fd(f) {}
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

using Clock = std::chrono::steady_clock;

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

// Waits until fd is readable (or writable); false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  const int ms = int(std::max(0.0, seconds_left(deadline)) * 1000);
  return ::poll(&p, 1, ms) > 0;
}

void send_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    CAROUSEL_CHECK(k > 0, "rendezvous: sending to a peer failed ({})", std::strerror(errno));
    data += k;
    n -= std::size_t(k);
  }
}

void recv_all(int fd, char* data, std::size_t n, Clock::time_point deadline, int rank) {
  while (n > 0) {
    CAROUSEL_CHECK(wait_fd(fd, POLLIN, deadline),
                   "rendezvous: rank {} timed out waiting for data from the master", rank);
    const ssize_t k = ::recv(fd, data, n, 0);
    CAROUSEL_CHECK(k > 0, "rendezvous: rank {} lost the connection to the master", rank);
    data += k;
    n -= std::size_t(k);
  }
}

sockaddr_in address(const RendezvousConfig& cfg) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  CAROUSEL_CHECK(::getaddrinfo(cfg.master_addr.c_str(), nullptr, &hints, &res) == 0 && res,
                 "launch: MASTER_ADDR='{}' does not resolve to an IPv4 address", cfg.master_addr);
  sockaddr_in a = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  a.sin_port = htons(std::uint16_t(cfg.master_port));
  return a;
}

}  // namespace

int env_process_count(const char* name) {
  constexpr long kMaxProcesses = 1 << 20;  // as WORLD_SIZE is bounded above
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  CAROUSEL_CHECK(errno == 0 && end != v && *end == 0 && n >= 1 && n <= kMaxProcesses,
                 "environment variable {}='{}' is not a number of processes (a whole number in "
                 "[1, {}], as a launcher sets it); unset it, or start the job through its launcher",
                 name, v, kMaxProcesses);
  return int(n);
}

int mpi_launch_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const int n = env_process_count(name); n > 0) return n;
  }
  return 0;
}

RendezvousConfig rendezvous_from_env(double timeout_seconds) {
  RendezvousConfig cfg;
  cfg.world_size = env_int("WORLD_SIZE", 1, 1 << 20, "the number of processes");
  cfg.rank = env_int("RANK", 0, cfg.world_size - 1, "this process's rank, below WORLD_SIZE");
  const char* addr = std::getenv("MASTER_ADDR");
  CAROUSEL_CHECK(addr && *addr,
                 "launch: environment variable MASTER_ADDR is not set (the host "
                 "of rank 0, e.g. 127.0.0.1)");
  cfg.master_addr = addr;
  cfg.master_port = env_int("MASTER_PORT", 1, 65535, "the TCP port rank 0 listens on");
  cfg.timeout_seconds = timeout_seconds;
  return cfg;
}

std::vector<char> rendezvous_broadcast(const RendezvousConfig& cfg, std::vector<char> payload) {
  if (cfg.world_size == 1) return payload;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(cfg.timeout_seconds));
  const sockaddr_in addr = address(cfg);
  if (cfg.rank == 0) {
    Socket server(::socket(AF_INET, SOCK_STREAM, 0));
    const int one = 1;
    ::setsockopt(server.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    CAROUSEL_CHECK(::bind(server.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0,
                   "rendezvous: rank 0 cannot listen on {}:{} ({}); choose a free MASTER_PORT",
                   cfg.master_addr, cfg.master_port, std::strerror(errno));
    CAROUSEL_CHECK(::listen(server.fd, cfg.world_size) == 0, "rendezvous: listen failed ({})",
                   std::strerror(errno));
    const std::uint32_t size = htonl(std::uint32_t(payload.size()));
    for (int served = 1; served < cfg.world_size; ++served) {
      CAROUSEL_CHECK(wait_fd(server.fd, POLLIN, deadline),
                     "rendezvous: rank 0 timed out after {} s on {}:{}: {} of {} ranks connected",
                     cfg.timeout_seconds, cfg.master_addr, cfg.master_port, served - 1,
                     cfg.world_size - 1);
      Socket peer(::accept(server.fd, nullptr, nullptr));
      CAROUSEL_CHECK(peer.fd >= 0, "rendezvous: accept failed ({})", std::strerror(errno));
      send_all(peer.fd, reinterpret_cast<const char*>(&size), sizeof(size));
      send_all(peer.fd, payload.data(), payload.size());
    }
    return payload;
  }
  for (;;) {  // the master may not be listening yet: retry until the deadline
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      std::uint32_t size = 0;
      recv_all(s.fd, reinterpret_cast<char*>(&size), sizeof(size), deadline, cfg.rank);
      std::vector<char> out(ntohl(size));
      recv_all(s.fd, out.data(), out.size(), deadline, cfg.rank);
      return out;
    }
    CAROUSEL_CHECK(seconds_left(deadline) > 0,
                   "rendezvous: rank {} could not reach the master at {}:{} within {} s (is rank "
                   "0 running with the same MASTER_ADDR and MASTER_PORT?)",
                   cfg.rank, cfg.master_addr, cfg.master_port, cfg.timeout_seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace carousel
