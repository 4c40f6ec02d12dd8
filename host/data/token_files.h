// token_files.h — token streams read through memory maps: llm.c shards and text files.
//
// A stream is one file or the files of a glob in sorted name order, concatenated. Its pages are
// mapped read-only and shared (MAP_SHARED of a read-only file): a process holds only the pages
// its sequences touch, and the kernel's page cache is one copy for every process on a node —
// never the dataset as 32-bit integers in each process. Every id is checked against the
// vocabulary when the stream opens, by reading the files in 1 MiB chunks (not through the map,
// so the check leaves nothing resident in the process).
//
// Written by hand: llm.c's format is a 1 KiB header and raw ids; a dataset library (Arrow,
// Grain) would add a dependency to read a flat array.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace carousel {

// One read-only mapping of a file (unmapped on destruction; not copyable).
class MappedFile {
 public:
  MappedFile(const std::string& key, const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile& operator=(MappedFile&&) = delete;
  const unsigned char* data() const { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  std::uint64_t size_ = 0;
};

// Tokens of one file: `count` ids of `token_bytes` (1: text bytes; 2 or 4: llm.c shards) from
// `first` on in `file`.
struct TokenFile {
  std::string path;
  MappedFile file;
  std::uint64_t header_bytes = 0;
  int token_bytes = 1;
  std::int64_t count = 0;
  std::int32_t at(std::int64_t i) const;
};

class TokenStream {
 public:
  // dataset_type tokens (llm.c shards: `pattern` is a file or a glob) or text (one file, its
  // bytes are the tokens); `key` names the config key in errors. Every id must be < vocab.
  static TokenStream open(const std::string& type, const char* key, const std::string& pattern,
                          std::int64_t vocab);
  std::int64_t size() const { return total_; }
  const std::string& describe() const { return what_; }
  // Tokens [offset, offset + n) of the stream, wrapping at its end.
  void read(std::int64_t offset, std::int64_t n, std::int32_t* out) const;

 private:
  std::vector<TokenFile> files_;
  std::vector<std::int64_t> starts_;  // starts_[f]: stream offset of files_[f]'s first token
  std::int64_t total_ = 0;
  std::string what_;
};

// Writes an llm.c token shard (tests and `carousel` tools that prepare data): GPT-2's format
// (magic 20240520, version 1, uint16 ids) and Llama 3's (magic 20240801, version 7, uint32 ids).
void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);
void write_token_shard(const std::string& path, const std::vector<std::uint32_t>& tokens);

}  // namespace carousel
