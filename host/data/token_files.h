// token_files.h — token streams read from llm.c shards and text files as sequences are needed.
//
// A stream is one file or the files of a glob in sorted name order, concatenated. Each sequence
// is read with pread() from files kept open: the bytes come from the kernel's page cache, one
// copy for every process on a node, and a process holds only the sequence it reads — never the
// dataset as 32-bit integers in each process. Not a memory map: a shard truncated or rewritten
// in place during a run would kill a mapping process with SIGBUS and no message; pread makes it
// an error naming the file. Every id is checked against the vocabulary when the stream opens
// (the files read in 1 MiB chunks) and again as each sequence is read (a shard edited since).
//
// Written by hand: llm.c's format is a 1 KiB header and raw ids; a dataset library (Arrow,
// Grain) would add a dependency to read a flat array.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/io/files.h"

namespace carousel {

// Tokens of one file: `count` ids of `token_bytes` (1: text bytes; 2 or 4: llm.c shards) after
// `header_bytes` in `file`.
struct TokenFile {
  std::string key, path;  // key: the config key that named the file (for errors)
  ReadOnlyFile file;
  std::uint64_t header_bytes = 0;
  int token_bytes = 1;
  std::int64_t count = 0;
  // Ids [first, first + n) (within the file) into out, each checked against `vocab`.
  void read(std::int64_t first, std::int64_t n, std::int64_t vocab, std::int32_t* out) const;
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
  std::int64_t vocab_ = 0;
  std::vector<std::int64_t> starts_;  // starts_[f]: stream offset of files_[f]'s first token
  std::int64_t total_ = 0;
  std::string what_;
};

// Writes an llm.c token shard (tests and `carousel` tools that prepare data): GPT-2's format
// (magic 20240520, version 1, uint16 ids) and Llama 3's (magic 20240801, version 7, uint32 ids).
void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);
void write_token_shard(const std::string& path, const std::vector<std::uint32_t>& tokens);

}  // namespace carousel
