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

namespace {

const char* kind_of(const fs::file_status& status) {
  return fs::is_directory(status)        ? "a directory"
         : fs::is_fifo(status)           ? "a FIFO (named pipe)"
         : fs::is_character_file(status) ? "a character device"
         : fs::is_block_file(status)     ? "a block device"
         : fs::is_socket(status)         ? "a socket"
                                         : "not a regular file";
}

}  // namespace

// Refuses what is not a regular file before opening it: opening a FIFO blocks until a writer
// appears, a directory or device has no size.
void check_regular(const std::string& key, const std::string& path, const char* what) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  CAROUSEL_CHECK(fs::exists(status), "{}: {} '{}' does not exist{}", key, what, path,
                 relative_to_note(path));
  CAROUSEL_CHECK(fs::is_regular_file(status),
                 "{}: {} '{}' is {}; carousel reads regular files only", key, what, path,
                 kind_of(status));
}

// An output that exists must be a regular file (appended to) or a character device such as
// /dev/null: opening a FIFO for writing blocks until a reader appears (a run that never starts),
// and a directory, socket or block device cannot hold a log.
void check_output_file(const std::string& key, const std::string& path, const char* what) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) return;
  CAROUSEL_CHECK(fs::is_regular_file(status) || fs::is_character_file(status),
                 "{}: {} '{}' is {}; carousel writes regular files (or a character device such "
                 "as /dev/null): remove it or choose another path",
                 key, what, path, kind_of(status));
}

}  // namespace carousel
