// files.cpp — the file writing of files.h.
#include "host/files.h"

#include <cerrno>
#include <cstring>
#include <fstream>

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

}  // namespace carousel
