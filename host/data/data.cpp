// data.cpp — synthetic, llm.c-shard and text data loaders.
#include "host/io/data.h"

#include <glob.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "compute/error.h"
#include "host/io/checkpoint.h"

namespace carousel {

TokenBatch DataLoader::batch(std::int64_t step, std::int64_t global_batch, std::int64_t first,
                             std::int64_t count) const {
  TokenBatch b;
  b.sequences = count;
  b.seq_len = seq_len_;
  b.inputs.resize(count * seq_len_);
  b.targets.resize(count * seq_len_);
  std::vector<std::int32_t> buf(seq_len_ + 1);
  for (std::int64_t j = 0; j < count; ++j) {
    sequence(step * global_batch + first + j, buf.data());
    std::copy(buf.begin(), buf.end() - 1, b.inputs.begin() + j * seq_len_);
    std::copy(buf.begin() + 1, buf.end(), b.targets.begin() + j * seq_len_);
  }
  return b;
}

namespace {

std::uint64_t mix(std::uint64_t x) {  // SplitMix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class SyntheticLoader final : public DataLoader {
 public:
  // `first` offsets every sequence number (the eval stream starts far beyond the training one).
  SyntheticLoader(std::int64_t seq_len, std::int64_t vocab, std::int64_t first = 0)
      : DataLoader(seq_len), vocab_(vocab), first_(first) {}
  std::string describe() const override {
    return fmt::format("synthetic arithmetic progressions mod {}{}", vocab_,
                       first_ ? fmt::format(" from sequence {}", first_) : std::string());
  }

 protected:
  void sequence(std::int64_t g, std::int32_t* out) const override {
    const std::uint64_t h = mix(std::uint64_t(g + first_));
    const std::int64_t start = std::int64_t(h % std::uint64_t(vocab_));
    const std::int64_t stride = 1 + std::int64_t((h >> 32) % 7);
    for (std::int64_t t = 0; t <= seq_len_; ++t)
      out[t] = std::int32_t((start + stride * t) % vocab_);
  }

 private:
  std::int64_t vocab_, first_;
};

// A token stream held in memory, read with wrap-around.
class StreamLoader final : public DataLoader {
 public:
  StreamLoader(std::int64_t seq_len, std::vector<std::int32_t> tokens, std::string what)
      : DataLoader(seq_len), tokens_(std::move(tokens)), what_(std::move(what)) {}
  std::string describe() const override {
    return fmt::format("{} ({} tokens)", what_, tokens_.size());
  }
  std::int64_t stream_tokens() const override { return std::int64_t(tokens_.size()); }

 protected:
  void sequence(std::int64_t g, std::int32_t* out) const override {
    const std::int64_t n = std::int64_t(tokens_.size());
    const std::int64_t offset = (g % n) * (seq_len_ % n) % n;  // (g*T) mod n without overflow
    for (std::int64_t t = 0; t <= seq_len_; ++t) out[t] = tokens_[(offset + t) % n];
  }

 private:
  std::vector<std::int32_t> tokens_;
  std::string what_;
};

// llm.c's two shard formats (its dev/data scripts): GPT-2's uint16 tokens and Llama 3's uint32.
struct ShardFormat {
  std::int32_t magic, version, token_bytes;
  const char* name;
};
constexpr ShardFormat kShardFormats[] = {{20240520, 1, 2, "GPT-2, uint16 tokens"},
                                         {20240801, 7, 4, "Llama 3, uint32 tokens"}};
constexpr std::size_t kHeaderInts = 256;

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

void read_shard(const std::string& key, const std::string& path, std::int64_t vocab,
                std::vector<std::int32_t>& out) {
  check_regular(key, path, "token shard");
  std::ifstream in(path, std::ios::binary);
  CAROUSEL_CHECK(in.good(), "{}: cannot open token shard '{}'", key, path);
  const auto size = std::filesystem::file_size(path);
  std::int32_t header[kHeaderInts] = {};
  CAROUSEL_CHECK(size >= sizeof(header),
                 "token shard '{}' is {} bytes, shorter than its 1024-byte header (truncated or "
                 "not an llm.c shard)",
                 path, size);
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  CAROUSEL_CHECK(in.good(), "token shard '{}': reading its header failed", path);
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
  const std::uint64_t expected = sizeof(header) + std::uint64_t(format->token_bytes) * count;
  CAROUSEL_CHECK(size == expected,
                 "token shard '{}' says {} tokens ({} bytes with its {}) but the file is {} bytes "
                 "(truncated or corrupt)",
                 path, count, expected, format->name, size);
  const auto append = [&](auto tag) {
    using Id = decltype(tag);
    std::vector<Id> raw(count);
    in.read(reinterpret_cast<char*>(raw.data()), std::streamsize(sizeof(Id) * count));
    CAROUSEL_CHECK(in.good(), "token shard '{}': read failed", path);
    for (std::int64_t i = 0; i < count; ++i) {
      CAROUSEL_CHECK(std::int64_t(raw[i]) < vocab,
                     "token shard '{}': token {} at position {} is >= vocab_size={} (data made "
                     "for another tokenizer?)",
                     path, raw[i], i, vocab);
      out.push_back(std::int32_t(raw[i]));
    }
  };
  if (format->token_bytes == 2) {
    append(std::uint16_t{});
  } else {
    append(std::uint32_t{});
  }
}

// File data (dataset_type tokens or text) from `path`, the value of config key `key`.
std::unique_ptr<DataLoader> open_stream(const Config& cfg, const char* key,
                                        const std::string& path) {
  const std::int64_t T = cfg.model.max_target_length, V = cfg.model.vocab_size;
  std::vector<std::int32_t> tokens;
  std::string what;
  check_local_path(key, path);
  if (cfg.dataset_type == "tokens") {
    const auto files = expand_glob(path);
    CAROUSEL_CHECK(!files.empty(), "{}='{}' matches no file{}", key, path, relative_to_note(path));
    for (const auto& f : files) read_shard(key, f, V, tokens);
    what = fmt::format("{} llm.c shard(s) {}", files.size(), path);
  } else {
    check_regular(key, path, "text file");
    std::ifstream in(path, std::ios::binary);
    CAROUSEL_CHECK(in.good(), "{}='{}': cannot open text file: {}", key, path,
                   std::strerror(errno));
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    for (unsigned char c : bytes) tokens.push_back(c);
    what = fmt::format("text {}", path);
  }
  CAROUSEL_CHECK(std::int64_t(tokens.size()) > T,
                 "{} '{}' has {} tokens; at least max_target_length + 1 = {} are needed", key, path,
                 tokens.size(), T + 1);
  return std::make_unique<StreamLoader>(T, std::move(tokens), what);
}

}  // namespace

std::optional<TokenizerInfo> read_run_tokenizer(const Config& cfg) {
  if (cfg.tokenizer_path.empty()) return std::nullopt;
  if (cfg.dataset_type != "tokens") {  // only carried into checkpoints
    try {
      return read_tokenizer(cfg.tokenizer_path);
    } catch (const Error& e) {
      spdlog::warn("checkpoints are saved without the tokenizer: {}", e.what());
      return std::nullopt;
    }
  }
  TokenizerInfo tokenizer = read_tokenizer(cfg.tokenizer_path);
  const std::int64_t V = cfg.model.vocab_size;
  CAROUSEL_CHECK(tokenizer.vocab_size <= V,
                 "tokenizer_path='{}' has a vocabulary of {} tokens but vocab_size={}; set "
                 "vocab_size={} (or more) so that every token id has an embedding",
                 cfg.tokenizer_path, tokenizer.vocab_size, V, tokenizer.vocab_size);
  return tokenizer;
}

std::unique_ptr<DataLoader> make_data_loader(const Config& cfg) {
  if (cfg.dataset_type == "synthetic") {
    return std::make_unique<SyntheticLoader>(cfg.model.max_target_length, cfg.model.vocab_size);
  }
  return open_stream(cfg, "dataset_path", cfg.dataset_path);
}

std::unique_ptr<DataLoader> make_eval_data_loader(const Config& cfg) {
  if (cfg.dataset_type == "synthetic" && cfg.eval_dataset_path.empty()) {
    return std::make_unique<SyntheticLoader>(cfg.model.max_target_length, cfg.model.vocab_size,
                                             std::int64_t(1) << 40);
  }
  CAROUSEL_CHECK(cfg.dataset_type != "synthetic",
                 "eval_dataset_path='{}' is set but dataset_type=synthetic has no files; use "
                 "dataset_type=tokens or text (synthetic evaluation needs no eval_dataset_path)",
                 cfg.eval_dataset_path);
  CAROUSEL_CHECK(!cfg.eval_dataset_path.empty(),
                 "evaluation needs eval_dataset_path=FILE_OR_GLOB (the held-out split)");
  return open_stream(cfg, "eval_dataset_path", cfg.eval_dataset_path);
}

std::int64_t eval_batches(const Config& cfg, const DataLoader& eval) {
  if (cfg.eval_steps > 0) return cfg.eval_steps;
  const std::int64_t n = eval.stream_tokens();
  if (n == 0) return 1;
  const std::int64_t per_batch = cfg.global_batch() * cfg.model.max_target_length;
  return std::max<std::int64_t>(1, (n - 1) / per_batch);
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
