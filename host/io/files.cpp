// files.cpp — the file writing and checksums of files.h.
#include "host/io/files.h"

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

}  // namespace carousel
