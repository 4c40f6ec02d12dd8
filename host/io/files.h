// files.h — writing a whole text file, with one error wording for every file carousel writes
// (checkpoint metadata, traces, measured costs, tokenizer configs, `carousel schedule`'s files,
// benchmark reports), and the CRC32 that checkpoint manifests and `carousel inspect` use.
#pragma once

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

}  // namespace carousel
