// files.h — writing a whole text file, with one error wording for every file carousel writes
// (checkpoint metadata, traces, measured costs, tokenizer configs, `carousel schedule`'s files,
// benchmark reports), the CRC32 that checkpoint manifests and `carousel inspect` use, and the
// read-only file that token shards and safetensors files are read from with pread (no shared
// cursor: safe from several threads; no mapping: a file changed underneath is an error, not a
// SIGBUS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace carousel {

// Writes `text` to `path`, replacing the file. Throws carousel::Error naming the path and the
// system's reason when the file cannot be created or written (a full disk).
void write_text_file(const std::filesystem::path& path, const std::string& text);

// zlib's CRC32 of `bytes` bytes at `data` (any size), continuing from `crc` (0 to start).
std::uint32_t crc32_of(const void* data, std::uint64_t bytes, std::uint32_t crc = 0);
// The CRC32 of a file's contents, read in blocks (of the bytes read: 0 for a file that cannot
// be opened).
std::uint32_t file_crc32(const std::filesystem::path& path);

// A file open for reading (closed on destruction; movable, not copyable).
class ReadOnlyFile {
 public:
  // Errors: "<key>: cannot open <what> '<path>': <reason>" (no "<key>: " when key is empty).
  ReadOnlyFile(const std::string& key, const std::string& path, const char* what);
  ~ReadOnlyFile();
  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(ReadOnlyFile&&) = delete;
  std::uint64_t size() const { return size_; }
  // Reads exactly `n` bytes at `offset`, or returns false (the file is shorter now, or EIO).
  bool read_at(std::uint64_t offset, std::size_t n, void* out) const;

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;  // when opened
};

}  // namespace carousel
