// run_lock.cpp — the run-directory lock (see run_lock.h).
#include "host/io/run_lock.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compute/error.h"

namespace carousel {

namespace {

std::string this_process() {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[32] = "?";
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  return fmt::format("pid {} on host {}, started {}", getpid(), host, when);
}

}  // namespace

RunLock RunLock::acquire(const std::string& run_directory) {
  std::error_code ec;
  std::filesystem::create_directories(run_directory, ec);
  CAROUSEL_CHECK(!ec, "cannot create the run directory '{}': {}", run_directory, ec.message());
  const std::string path = (std::filesystem::path(run_directory) / ".carousel.lock").string();
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  CAROUSEL_CHECK(fd >= 0, "cannot open the run directory's lock file '{}': {}", path,
                 std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      std::stringstream holder;
      holder << std::ifstream(path).rdbuf();
      close(fd);
      std::string who = holder.str();
      while (!who.empty() && (who.back() == '\n' || who.back() == '\r')) who.pop_back();
      fail("run directory '{}' is in use by another run ({}); wait for it to end, or choose "
           "another run_name or base_output_directory",
           run_directory, who.empty() ? "its process has not written its name yet" : who);
    }
    close(fd);
    spdlog::warn("run directory '{}': no lock on this file system ({}): a second run on the same "
                 "directory would not be refused",
                 run_directory, std::strerror(err));
    return RunLock(-1);
  }
  // Who holds it, for the message a second run prints.
  const std::string me = this_process() + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
    spdlog::warn("run directory lock '{}': cannot record this process in it: {}", path,
                 std::strerror(errno));
  }
  return RunLock(fd);
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

RunLock::~RunLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock; the file stays (harmless, reused)
}

}  // namespace carousel
