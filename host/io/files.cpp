// files.cpp — the file writing, checksums and read-only files of files.h.
#include "host/io/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include "compute/error.h"

namespace carousel {

namespace {

namespace fs = std::filesystem;

std::string kind_of(const struct stat& st, const fs::path& path) {
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(path, ec);
    return ec ? "a symlink" : fmt::format("a symlink (to '{}')", target.string());
  }
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return S_ISREG(st.st_mode) ? "" : "not a regular file";
}

[[noreturn]] void refuse(const std::string& what, const fs::path& path, const std::string& kind) {
  fail("{} '{}' is {}: carousel writes only regular files in the run directory; remove it", what,
       path.string(), kind);
}

// The kind of `name` in the directory `dirfd`, unfollowed ("" for a regular file or nothing).
std::string kind_at(int dirfd, const char* name, const fs::path& path) {
  struct stat st {};
  if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return "";
  return kind_of(st, path);
}

// `path` relative to `within` when it lies below it (lexically), else empty.
fs::path below(const fs::path& path, const fs::path& within) {
  if (within.empty()) return {};
  const fs::path rel = path.lexically_normal().lexically_relative(within.lexically_normal());
  if (rel.empty() || *rel.begin() == ".." || *rel.begin() == "." || rel.is_absolute()) return {};
  return rel;
}

// The directory that holds `path`'s last component, open (O_PATH suffices for openat), with
// every directory from `within` down opened without following symlinks; AT_FDCWD when `path`
// is not below `within`. The caller closes a descriptor >= 0.
int open_parent(const fs::path& path, const fs::path& within, const std::string& what) {
  const fs::path rel = below(path, within);
  if (rel.empty()) return AT_FDCWD;
  int dirfd = ::open(within.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  CAROUSEL_CHECK(dirfd >= 0, "cannot create {} '{}': cannot open the directory '{}': {}", what,
                 path.string(), within.string(), std::strerror(errno));
  fs::path walked = within;
  for (auto it = rel.begin(); std::next(it) != rel.end(); ++it) {
    walked /= *it;
    const int next = ::openat(dirfd, it->c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    if (next < 0) {
      const std::string kind = kind_at(dirfd, it->c_str(), walked);
      ::close(dirfd);
      if (!kind.empty()) {
        fail(
            "{} '{}': '{}' is {}: carousel writes only into real directories in the run "
            "directory; remove it",
            what, path.string(), walked.string(), kind);
      }
      fail("cannot create {} '{}': {}", what, path.string(), std::strerror(err));
    }
    ::close(dirfd);
    dirfd = next;
  }
  return dirfd;
}

}  // namespace

OutputFile::OutputFile(const fs::path& path, std::string what, OutputMode mode,
                       const fs::path& within)
    : path_(path.string()), what_(std::move(what)) {
  const int dirfd = open_parent(path, within, what_);
  const fs::path name = dirfd == AT_FDCWD ? path : path.filename();
  // O_NONBLOCK: opening a FIFO for writing would wait for a reader (ENXIO instead); O_NOFOLLOW:
  // a symlink as the last component is ELOOP. No O_TRUNC: a file is emptied only once it is
  // known to be a regular one.
  int flags = O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  flags |= mode == OutputMode::Update ? O_RDWR : O_WRONLY;
  if (mode == OutputMode::Append) flags |= O_APPEND;
  fd_ = ::openat(dirfd, name.c_str(), flags, 0644);
  const int err = errno;
  std::string kind;
  if (fd_ < 0) {
    kind = kind_at(dirfd, name.c_str(), path);
  } else {
    struct stat st {};
    if (::fstat(fd_, &st) == 0) {
      kind = kind_of(st, path);
      id_ = {std::uint64_t(st.st_dev), std::uint64_t(st.st_ino)};
    }
  }
  if (dirfd != AT_FDCWD) ::close(dirfd);
  if (!kind.empty()) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    refuse(what_, path, kind);
  }
  if (fd_ < 0) {
    if (mode == OutputMode::Append) {
      fail("{} '{}' cannot be opened for appending: {}", what_, path_, std::strerror(err));
    }
    fail("cannot create {} '{}': {}", what_, path_, std::strerror(err));
  }
  // A regular file: blocking writes from here on (O_NONBLOCK means nothing for one, but a write
  // should never see EAGAIN), emptied when it is being replaced.
  const int fl = ::fcntl(fd_, F_GETFL);
  const bool ok = fl >= 0 && ::fcntl(fd_, F_SETFL, fl & ~O_NONBLOCK) == 0 &&
                  (mode != OutputMode::Replace || ::ftruncate(fd_, 0) == 0);
  if (!ok) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    fail("cannot create {} '{}': {}", what_, path_, std::strerror(e));
  }
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), what_(std::move(other.what_)), id_(other.id_) {
  other.fd_ = -1;
}

void OutputFile::write(const void* data, std::size_t n, const std::string& when) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t wrote = ::write(fd_, p, std::min<std::size_t>(n, 1u << 30));
    if (wrote < 0 && errno == EINTR) continue;
    CAROUSEL_CHECK(wrote > 0, "writing {} '{}' failed{}: {} (disk full?)", what_, path_, when,
                   wrote < 0 ? std::strerror(errno) : "nothing was written");
    p += wrote;
    n -= std::size_t(wrote);
  }
}

void OutputFile::sync() {
  CAROUSEL_CHECK(::fsync(fd_) == 0, "fsync of {} '{}' failed: {} (disk full or read-only?)", what_,
                 path_, std::strerror(errno));
}

int OutputFile::release() { return std::exchange(fd_, -1); }

std::string output_kind(const fs::path& path) { return kind_at(AT_FDCWD, path.c_str(), path); }

void check_output_path(const fs::path& path, const std::string& what) {
  const std::string kind = output_kind(path);
  if (!kind.empty()) refuse(what, path, kind);
}

void check_output_directory(const fs::path& path, const std::string& what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) return;
  fail(
      "{} '{}' is {}: carousel writes only into real directories in the run directory; remove "
      "it",
      what, path.string(), S_ISREG(st.st_mode) ? "a regular file" : kind_of(st, path));
}

void write_text_file(const fs::path& path, const std::string& text, const std::string& what,
                     const fs::path& within) {
  OutputFile(path, what, OutputMode::Replace, within).write(text);
}

std::uint32_t crc32_of(const void* data, std::uint64_t bytes, std::uint32_t crc) {
  uLong sum = crc;
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes at most 4 GiB per call
    const auto n = uInt(std::min<std::uint64_t>(bytes, 1u << 30));
    sum = crc32(sum, p, n);
    p += n;
    bytes -= n;
  }
  return std::uint32_t(sum);
}

std::uint32_t file_crc32(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  std::uint32_t crc = 0;
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    crc = crc32_of(buf.data(), std::uint64_t(in.gcount()), crc);
  }
  return crc;
}

ReadOnlyFile::ReadOnlyFile(const std::string& key, const std::string& path, const char* what) {
  const std::string prefix = key.empty() ? "" : key + ": ";
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CAROUSEL_CHECK(fd_ >= 0, "{}cannot open {} '{}': {}", prefix, what, path, std::strerror(errno));
  struct stat st {};
  const int stat_rc = ::fstat(fd_, &st);
  const int stat_err = errno;
  if (stat_rc != 0) ::close(fd_);
  CAROUSEL_CHECK(stat_rc == 0, "{}cannot stat {} '{}': {}", prefix, what, path,
                 std::strerror(stat_err));
  size_ = std::uint64_t(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept : fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

bool ReadOnlyFile::read_at(std::uint64_t offset, std::size_t n, void* out) const {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;  // error (errno set) or end of file: the file shrank
    p += got;
    offset += std::uint64_t(got);
    n -= std::size_t(got);
  }
  return true;
}

}  // namespace carousel
