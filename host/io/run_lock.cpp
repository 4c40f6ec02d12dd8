// run_lock.cpp — the run-directory lock (see run_lock.h).
#include "host/io/run_lock.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "compute/error.h"
#include "host/io/files.h"

namespace carousel {

namespace {

namespace fs = std::filesystem;

constexpr const char* kLockFile = ".carousel.lock";
constexpr const char* kWhat = "the run directory's lock file";

std::string this_process() {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[32] = "?";
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  return fmt::format("pid {} on host {}, started {}", getpid(), host, when);
}

std::string lock_path(const std::string& run_directory) {
  return (fs::path(run_directory) / kLockFile).string();
}

// Who holds the lock, from the dotfile: read without following a symlink or waiting on a FIFO.
std::string holder(const std::string& run_directory) {
  const std::string path = lock_path(run_directory);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fmt::format("its process is not named: '{}' is missing", path);
  struct stat st {};
  char buf[512] = {};
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  ::close(fd);
  std::string who(buf, std::size_t(std::max<ssize_t>(n, 0)));
  while (!who.empty() && (who.back() == '\n' || who.back() == '\r')) who.pop_back();
  return who.empty() ? "its process has not written its name yet" : who;
}

[[noreturn]] void fail_in_use(const std::string& run_directory) {
  fail(
      "run directory '{}' is in use by another run ({}); wait for it to end, or choose another "
      "run_name or base_output_directory",
      run_directory, holder(run_directory));
}

// Records this process in the locked dotfile, for the message a second run prints.
void write_holder(int fd, const std::string& path) {
  const std::string me = this_process() + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
    spdlog::warn("run directory lock '{}': cannot record this process in it: {}", path,
                 std::strerror(errno));
  }
}

// Whether `path` names the file open as `fd`.
bool names(const std::string& path, int fd) {
  struct stat at {
  }, open{};
  return ::lstat(path.c_str(), &at) == 0 && ::fstat(fd, &open) == 0 && at.st_dev == open.st_dev &&
         at.st_ino == open.st_ino;
}

// The locks this process holds, by directory, for check_held.
std::mutex registry_mutex;
std::map<std::string, RunLock*>& registry() {
  static std::map<std::string, RunLock*> locks;
  return locks;
}
std::string key_of(const std::string& run_directory) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(run_directory, ec);
  return (ec ? fs::path(run_directory) : absolute).lexically_normal().string();
}

}  // namespace

RunLock RunLock::acquire(const std::string& run_directory) { return take(run_directory, 0); }

RunLock RunLock::take(const std::string& run_directory, int attempt) {
  std::error_code ec;
  fs::create_directories(run_directory, ec);
  CAROUSEL_CHECK(!ec, "cannot create the run directory '{}': {}", run_directory, ec.message());
  // The directory itself: removing the dotfile cannot release this lock.
  int dir_fd = ::open(run_directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CAROUSEL_CHECK(dir_fd >= 0, "cannot open the run directory '{}': {}", run_directory,
                 std::strerror(errno));
  std::string no_dir_lock;
  if (flock(dir_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(dir_fd);
    dir_fd = -1;
    if (err == EWOULDBLOCK) fail_in_use(run_directory);
    no_dir_lock = std::strerror(err);  // NFS locks only files open for writing (EBADF)
  }
  // The dotfile: the holder's record, and the lock of carousel versions that lock only it (or of
  // this one where directories cannot be locked). Opened as every output is: never a symlink's
  // target, never a FIFO.
  const std::string path = lock_path(run_directory);
  int file_fd = -1;
  try {
    file_fd = OutputFile(path, kWhat, OutputMode::Update, run_directory).release();
  } catch (...) {
    if (dir_fd >= 0) ::close(dir_fd);
    throw;
  }
  const bool file_locked = flock(file_fd, LOCK_EX | LOCK_NB) == 0;
  const int err = errno;
  if (!file_locked && err == EWOULDBLOCK) {
    ::close(file_fd);
    if (dir_fd >= 0) ::close(dir_fd);
    fail_in_use(run_directory);
  }
  if (dir_fd < 0 && !file_locked) {
    ::close(file_fd);
    spdlog::warn(
        "run directory '{}': no lock on this file system ({}; {}): a second run on the "
        "same directory would not be refused",
        run_directory, no_dir_lock, std::strerror(err));
    return RunLock(run_directory, -1, -1);
  }
  if (dir_fd < 0 && !names(path, file_fd) && attempt < 3) {
    // Locked by the file alone, and the file was removed between open and lock (the previous
    // holder's cleanup, or a deletion): a lock on a file nobody can find again admits anyone.
    ::close(file_fd);
    return take(run_directory, attempt + 1);
  }
  write_holder(file_fd, path);
  return RunLock(run_directory, dir_fd, file_fd);
}

void RunLock::check_held(const std::string& run_directory) {
  std::lock_guard<std::mutex> guard(registry_mutex);
  const auto it = registry().find(key_of(run_directory));
  if (it == registry().end()) return;
  RunLock& held = *it->second;
  if (held.dir_fd_ < 0 && held.file_fd_ < 0) return;  // no locks on this file system
  const std::string path = lock_path(run_directory);
  if (held.file_fd_ >= 0 && names(path, held.file_fd_)) return;
  // The dotfile was removed or replaced during the run. Under the directory's lock nobody else
  // can hold the run directory: only the record is rewritten. Under the file's lock alone it is
  // taken again on the new file, or the run stops where another run took it meanwhile.
  int fd = -1;
  try {
    fd = OutputFile(path, kWhat, OutputMode::Update, run_directory).release();
  } catch (const Error& e) {
    if (held.dir_fd_ >= 0) {
      spdlog::warn("run directory '{}': cannot record this run in its lock file again: {}",
                   run_directory, e.what());
      return;
    }
    throw;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 && (held.dir_fd_ < 0 || errno == EWOULDBLOCK)) {
    const std::string who = holder(run_directory);
    ::close(fd);
    fail(
        "run directory '{}': its lock file '{}' was removed during this run and another run ({}) "
        "has taken it since: the two would mix their checkpoints and metrics; this run stops "
        "(its checkpoints so far are kept)",
        run_directory, path, who);
  }
  spdlog::warn(
      "run directory '{}': its lock file '{}' was removed or replaced during the run; "
      "written again{}",
      run_directory, path, held.dir_fd_ >= 0 ? "" : " and locked");
  write_holder(fd, path);
  if (held.file_fd_ >= 0) ::close(held.file_fd_);
  held.file_fd_ = fd;
}

RunLock::RunLock(std::string directory, int dir_fd, int file_fd)
    : directory_(std::move(directory)), dir_fd_(dir_fd), file_fd_(file_fd) {
  std::lock_guard<std::mutex> guard(registry_mutex);
  registry()[key_of(directory_)] = this;
}

RunLock::RunLock(RunLock&& other) noexcept
    : directory_(other.directory_), dir_fd_(other.dir_fd_), file_fd_(other.file_fd_) {
  other.dir_fd_ = other.file_fd_ = -1;
  std::lock_guard<std::mutex> guard(registry_mutex);
  auto& locks = registry();
  const auto it = locks.find(key_of(directory_));
  if (it != locks.end() && it->second == &other) it->second = this;
}

RunLock::~RunLock() {
  {
    std::lock_guard<std::mutex> guard(registry_mutex);
    auto& locks = registry();
    const auto it = locks.find(key_of(directory_));
    if (it != locks.end() && it->second == this) locks.erase(it);
  }
  // Closing releases the locks; the dotfile stays (harmless, reused).
  if (file_fd_ >= 0) close(file_fd_);
  if (dir_fd_ >= 0) close(dir_fd_);
}

}  // namespace carousel
