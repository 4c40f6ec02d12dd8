// token_files.cpp — llm.c shards and text files read by pread, their checks at open and on
// every read, and the shard writer.
#include "host/data/token_files.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "compute/error.h"
#include "host/config/paths.h"

namespace carousel {

namespace {

// llm.c's two shard formats (its dev/data scripts): GPT-2's uint16 tokens and Llama 3's uint32.
struct ShardFormat {
  std::int32_t magic, version, token_bytes;
  const char* name;
};
constexpr ShardFormat kShardFormats[] = {{20240520, 1, 2, "GPT-2, uint16 tokens"},
                                         {20240801, 7, 4, "Llama 3, uint32 tokens"}};
constexpr std::size_t kHeaderInts = 256;
constexpr std::uint64_t kHeaderBytes = kHeaderInts * sizeof(std::int32_t);

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> files;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  std::sort(files.begin(), files.end());
  return files;
}

// Checks every id of `tf` against `vocab` when the stream opens, so that bad data is an error
// before step 1 rather than partway through the run (an id past the vocabulary would index past
// the embedding table).
void check_ids(const TokenFile& tf, std::int64_t vocab) {
  if (tf.token_bytes == 1 && vocab >= 256) return;
  if (tf.token_bytes == 2 && vocab >= 65536) return;
  constexpr std::int64_t kChunk = (1 << 20) / 4;
  std::vector<std::int32_t> buf(kChunk);
  for (std::int64_t first = 0; first < tf.count; first += kChunk) {
    tf.read(first, std::min(kChunk, tf.count - first), vocab, buf.data());
  }
}

TokenFile open_shard(const char* key, const std::string& path) {
  check_regular(key, path, "token shard");
  ReadOnlyFile file(key, path, "token shard");
  CAROUSEL_CHECK(file.size() >= kHeaderBytes,
                 "token shard '{}' is {} bytes, shorter than its 1024-byte header (truncated or "
                 "not an llm.c shard)",
                 path, file.size());
  std::int32_t header[3];
  CAROUSEL_CHECK(file.read_at(0, sizeof(header), header),
                 "token shard '{}': reading its header "
                 "failed: {}",
                 path, std::strerror(errno));
  const ShardFormat* format = nullptr;
  for (const ShardFormat& f : kShardFormats) {
    if (header[0] == f.magic) format = &f;
  }
  CAROUSEL_CHECK(format,
                 "token shard '{}' has magic {} but llm.c shards start with 20240520 (GPT-2, "
                 "uint16 tokens) or 20240801 (Llama 3, uint32 tokens) (is it a token file? for "
                 "plain text use dataset_type=text)",
                 path, header[0]);
  CAROUSEL_CHECK(header[1] == format->version,
                 "token shard '{}' has magic {} and version {}; with that magic llm.c writes "
                 "version {} ({})",
                 path, header[0], header[1], format->version, format->name);
  const std::int64_t count = header[2];
  CAROUSEL_CHECK(count > 0,
                 "token shard '{}' says it holds {} tokens; a shard holds at least 1 (header "
                 "int 2 is the token count)",
                 path, count);
  const std::uint64_t expected = kHeaderBytes + std::uint64_t(format->token_bytes) * count;
  CAROUSEL_CHECK(file.size() == expected,
                 "token shard '{}' says {} tokens ({} bytes with its {}) but the file is {} bytes "
                 "(truncated or corrupt)",
                 path, count, expected, format->name, file.size());
  return TokenFile{key, path, std::move(file), kHeaderBytes, format->token_bytes, count};
}

}  // namespace

void TokenFile::read(std::int64_t first, std::int64_t n, std::int64_t vocab,
                     std::int32_t* out) const {
  // The raw ids land in the tail of `out` (each is at most 4 bytes, so widening them front to
  // back never overwrites one not yet read).
  auto* raw = reinterpret_cast<unsigned char*>(out + n) - n * token_bytes;
  errno = 0;
  CAROUSEL_CHECK(
      file.read_at(header_bytes + std::uint64_t(first) * token_bytes, std::size_t(n * token_bytes),
                   raw),
      "{}: reading tokens {}..{} of '{}' failed: {} (was the file truncated or rewritten since "
      "the run opened it? replace data files by writing a new file and renaming it over the old)",
      key, first, first + n - 1, path, errno ? std::strerror(errno) : "the file is shorter now");
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t id = 0;
    std::memcpy(&id, raw + i * token_bytes, std::size_t(token_bytes));
    CAROUSEL_CHECK(std::int64_t(id) < vocab,
                   "token shard '{}': token {} at position {} is >= vocab_size={} (data made for "
                   "another tokenizer? if the run had started on this file, it changed since: "
                   "replace data files by writing a new file and renaming it over the old)",
                   path, id, first + i, vocab);
    out[i] = std::int32_t(id);
  }
}

TokenStream TokenStream::open(const std::string& type, const char* key, const std::string& pattern,
                              std::int64_t vocab) {
  TokenStream s;
  check_local_path(key, pattern);
  if (type == "tokens") {
    const auto paths = expand_glob(pattern);
    CAROUSEL_CHECK(!paths.empty(), "{}='{}' matches no file{}", key, pattern,
                   relative_to_note(pattern));
    for (const auto& p : paths) s.files_.push_back(open_shard(key, p));
    s.what_ = fmt::format("{} llm.c shard(s) {}", paths.size(), pattern);
  } else {
    check_regular(key, pattern, "text file");
    ReadOnlyFile file(key, pattern, "text file");
    const auto bytes = std::int64_t(file.size());
    s.files_.push_back(TokenFile{key, pattern, std::move(file), 0, 1, bytes});
    s.what_ = fmt::format("text {}", pattern);
  }
  s.vocab_ = vocab;
  for (const TokenFile& f : s.files_) {
    check_ids(f, vocab);
    s.starts_.push_back(s.total_);
    s.total_ += f.count;
  }
  return s;
}

void TokenStream::read(std::int64_t offset, std::int64_t n, std::int32_t* out) const {
  offset %= total_;
  // The file holding `offset`: the last whose start is <= offset.
  auto f =
      std::size_t(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin() - 1);
  std::int64_t i = offset - starts_[f];
  while (n > 0) {  // the part in file f, then the next file, wrapping after the last
    const std::int64_t part = std::min(n, files_[f].count - i);
    if (part > 0) files_[f].read(i, part, vocab_, out);
    out += part;
    n -= part;
    f = (f + 1) % files_.size();
    i = 0;
  }
}

namespace {
template <class Id>
void write_shard(const std::string& path, const ShardFormat& format, const std::vector<Id>& ids) {
  CAROUSEL_CHECK(ids.size() <= std::size_t(std::numeric_limits<std::int32_t>::max()),
                 "token shard '{}': {} tokens do not fit the header's int32 count; write several "
                 "shards",
                 path, ids.size());
  std::int32_t header[kHeaderInts] = {};
  header[0] = format.magic;
  header[1] = format.version;
  header[2] = std::int32_t(ids.size());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  out.write(reinterpret_cast<const char*>(ids.data()), std::streamsize(sizeof(Id) * ids.size()));
  out.flush();
  CAROUSEL_CHECK(out.good(), "cannot write token shard '{}': {}", path, std::strerror(errno));
}
}  // namespace

void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  write_shard(path, kShardFormats[0], tokens);
}

void write_token_shard(const std::string& path, const std::vector<std::uint32_t>& tokens) {
  write_shard(path, kShardFormats[1], tokens);
}

}  // namespace carousel
