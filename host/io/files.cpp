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
#include <vector>

#include "compute/error.h"

namespace carousel {

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  CAROUSEL_CHECK(out.good(), "cannot create '{}': {}", path.string(), std::strerror(errno));
  out << text;
  out.flush();
  CAROUSEL_CHECK(out.good(), "writing '{}' failed: {} (disk full?)", path.string(),
                 std::strerror(errno));
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
