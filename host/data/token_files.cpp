// token_files.cpp — memory-mapped llm.c shards and text files, their checks at open, and the
// shard writer.
#include "host/data/token_files.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

// Checks every id of `tf` against `vocab` by reading the file in chunks: an id past the
// vocabulary would index past the embedding table.
void check_ids(const TokenFile& tf, std::int64_t vocab) {
  if (tf.token_bytes == 1 && vocab >= 256) return;
  if (tf.token_bytes == 2 && vocab >= 65536) return;
  std::ifstream in(tf.path, std::ios::binary);
  in.seekg(std::streamoff(tf.header_bytes));
  CAROUSEL_CHECK(in.good(), "token shard '{}': cannot reopen it to check its ids", tf.path);
  constexpr std::int64_t kChunk = 1 << 20;
  std::vector<unsigned char> buf(kChunk);
  for (std::int64_t first = 0; first < tf.count;) {
    const std::int64_t n = std::min<std::int64_t>(kChunk / tf.token_bytes, tf.count - first);
    in.read(reinterpret_cast<char*>(buf.data()), std::streamsize(n * tf.token_bytes));
    CAROUSEL_CHECK(in.good(), "token shard '{}': read failed at token {}", tf.path, first);
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint32_t id = 0;
      std::memcpy(&id, buf.data() + i * tf.token_bytes, std::size_t(tf.token_bytes));
      CAROUSEL_CHECK(std::int64_t(id) < vocab,
                     "token shard '{}': token {} at position {} is >= vocab_size={} (data made "
                     "for another tokenizer?)",
                     tf.path, id, first + i, vocab);
    }
    first += n;
  }
}

TokenFile open_shard(const char* key, const std::string& path) {
  check_regular(key, path, "token shard");
  MappedFile file(key, path, "token shard");
  CAROUSEL_CHECK(file.size() >= kHeaderBytes,
                 "token shard '{}' is {} bytes, shorter than its 1024-byte header (truncated or "
                 "not an llm.c shard)",
                 path, file.size());
  std::int32_t header[3];
  std::memcpy(header, file.data(), sizeof(header));
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
  return TokenFile{path, std::move(file), kHeaderBytes, format->token_bytes, count};
}

}  // namespace

MappedFile::MappedFile(const std::string& key, const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CAROUSEL_CHECK(fd >= 0, "{}: cannot open {} '{}': {}", key, what, path, std::strerror(errno));
  struct stat st{};
  const int stat_rc = ::fstat(fd, &st);
  const int stat_err = errno;
  if (stat_rc != 0) ::close(fd);
  CAROUSEL_CHECK(stat_rc == 0, "{}: cannot stat {} '{}': {}", key, what, path,
                 std::strerror(stat_err));
  size_ = std::uint64_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file
    CAROUSEL_CHECK(p != MAP_FAILED, "{}: cannot map {} '{}' ({} bytes): {}", key, what, path,
                   size_, std::strerror(err));
    data_ = static_cast<const unsigned char*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

std::int32_t TokenFile::at(std::int64_t i) const {
  const unsigned char* p = file.data() + header_bytes + std::uint64_t(i) * token_bytes;
  switch (token_bytes) {
    case 1:
      return *p;
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    default: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      return std::int32_t(v);  // < vocab_size <= 2^24: checked at open
    }
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
    MappedFile file(key, pattern, "text file");
    const auto bytes = std::int64_t(file.size());
    s.files_.push_back(TokenFile{pattern, std::move(file), 0, 1, bytes});
    s.what_ = fmt::format("text {}", pattern);
  }
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
  auto f = std::size_t(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin() -
                       1);
  std::int64_t i = offset - starts_[f];
  for (std::int64_t t = 0; t < n; ++t) {
    while (i >= files_[f].count) {  // next file, wrapping to the first after the last
      f = (f + 1) % files_.size();
      i = 0;
    }
    out[t] = files_[f].at(i++);
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
