// paths.cpp — the user-path checks of paths.h.
#include "host/config/paths.h"

#include <fmt/format.h>

#include <filesystem>
#include <regex>

#include "compute/error.h"

namespace carousel {
namespace fs = std::filesystem;

std::string relative_to_note(const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return "";
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  return ec ? " (relative to the working directory)"
            : fmt::format(" (relative to the working directory '{}')", cwd.string());
}

void check_local_path(const std::string& key, const std::string& value) {
  static const std::regex url(R"(^([A-Za-z][A-Za-z0-9+.\-]*)://)");
  std::smatch m;
  CAROUSEL_CHECK(!std::regex_search(value, m, url),
                 "{}='{}' is a remote URL ({}://); carousel reads and writes local paths only: "
                 "mount the storage (gcsfuse, s3fs, ...) or copy the files and give a local path",
                 key, value, m[1].str());
}

// Refuses what is not a regular file before opening it: opening a FIFO blocks until a writer
// appears, a directory or device has no size.
void check_regular(const std::string& key, const std::string& path, const char* what) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  CAROUSEL_CHECK(fs::exists(status), "{}: {} '{}' does not exist{}", key, what, path,
                 relative_to_note(path));
  const char* kind = fs::is_directory(status)        ? "a directory"
                     : fs::is_fifo(status)           ? "a FIFO (named pipe)"
                     : fs::is_character_file(status) ? "a character device"
                     : fs::is_block_file(status)     ? "a block device"
                     : fs::is_socket(status)         ? "a socket"
                                                     : "not a regular file";
  CAROUSEL_CHECK(fs::is_regular_file(status),
                 "{}: {} '{}' is {}; carousel reads regular files only", key, what, path, kind);
}

}  // namespace carousel
