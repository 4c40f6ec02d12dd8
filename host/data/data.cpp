// data.cpp — the synthetic loader and the file loader (token streams, mixed and shuffled).
#include "host/data/data.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "compute/error.h"
#include "host/data/data_order.h"
#include "host/data/token_files.h"

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
    const std::uint64_t h = splitmix64(std::uint64_t(g + first_));
    const std::int64_t start = std::int64_t(h % std::uint64_t(vocab_));
    const std::int64_t stride = 1 + std::int64_t((h >> 32) % 7);
    for (std::int64_t t = 0; t <= seq_len_; ++t)
      out[t] = std::int32_t((start + stride * t) % vocab_);
  }

 private:
  std::int64_t vocab_, first_;
};

// File data: one token stream, or several mixed by weight; read in order (sequence k of a
// stream starts at token (k*T) mod n, wrapping) or shuffled (windows [w*T, w*T + T + 1), each
// once per epoch, in a permutation of the epoch's key).
class FileLoader final : public DataLoader {
 public:
  FileLoader(std::int64_t seq_len, std::vector<TokenStream> streams,
             const std::vector<DatasetEntry>& entries, bool shuffle, std::int64_t seed)
      : DataLoader(seq_len),
        streams_(std::move(streams)),
        mixture_(weights_of(entries)),
        shuffle_(shuffle),
        seed_(seed) {
    warn_rounded_weights(entries);
  }
  std::string describe() const override {
    std::string what;
    for (std::size_t d = 0; d < streams_.size(); ++d) {
      what += fmt::format("{}{} ({} tokens){}", d ? "; " : "", streams_[d].describe(),
                          streams_[d].size(),
                          streams_.size() > 1
                              ? fmt::format(": {} of every {} sequences", mixture_.counts()[d],
                                            mixture_.cycle())
                              : std::string());
    }
    if (streams_.size() > 1) what = "a mixture of " + what;
    return shuffle_ ? fmt::format("{}, shuffled (seed {})", what, seed_) : what;
  }
  std::int64_t stream_tokens() const override {
    std::int64_t n = 0;
    for (const TokenStream& s : streams_) n += s.size();
    return n;
  }

 protected:
  void sequence(std::int64_t g, std::int32_t* out) const override {
    const DataMixture::Pick pick = mixture_.pick(g);
    const TokenStream& s = streams_[std::size_t(pick.dataset)];
    const std::int64_t n = s.size(), k = pick.sequence;
    if (!shuffle_) {
      __extension__ using Wide = unsigned __int128;  // k*T may pass 2^63 (long run, large data)
      s.read(std::int64_t(Wide(k) * Wide(seq_len_) % Wide(n)), seq_len_ + 1, out);
      return;
    }
    const std::int64_t windows = (n - 1) / seq_len_;  // >= 1: n > T is checked at open
    const std::int64_t w =
        permute(k % windows, windows, shuffle_key(seed_, pick.dataset, k / windows));
    s.read(w * seq_len_, seq_len_ + 1, out);
  }

 private:
  static std::vector<double> weights_of(const std::vector<DatasetEntry>& entries) {
    std::vector<double> w;
    for (const DatasetEntry& e : entries) w.push_back(e.weight);
    return w;
  }
  // Non-integer weights are applied in units of 1/10000: say so where that moves a share.
  void warn_rounded_weights(const std::vector<DatasetEntry>& entries) const {
    double total = 0;
    for (const DatasetEntry& e : entries) total += e.weight / entries.front().weight;
    for (std::size_t d = 0; d < entries.size(); ++d) {
      const double asked = entries[d].weight / entries.front().weight / total;
      const double got = mixture_.share(int(d));
      if (std::abs(got - asked) > 0.01 * asked) {
        spdlog::warn(
            "dataset_path: '{}' gets {:.4g} % of the sequences for its weight {} ({:.4g} % "
            "asked): non-integer weights are applied in units of 1/10000 of their sum",
            entries[d].path, 100 * got, entries[d].weight, 100 * asked);
      }
    }
  }
  std::vector<TokenStream> streams_;
  DataMixture mixture_;
  bool shuffle_;
  std::int64_t seed_;
};

// File data (dataset_type tokens or text) from config key `key`'s entries.
std::unique_ptr<DataLoader> open_files(const Config& cfg, const char* key,
                                       const std::vector<DatasetEntry>& entries, bool shuffle) {
  const std::int64_t T = cfg.model.max_target_length;
  std::vector<TokenStream> streams;
  for (const DatasetEntry& e : entries) {
    streams.push_back(TokenStream::open(cfg.dataset_type, key, e.path, cfg.model.vocab_size));
    CAROUSEL_CHECK(streams.back().size() > T,
                   "{} '{}' has {} tokens; at least max_target_length + 1 = {} are needed", key,
                   e.path, streams.back().size(), T + 1);
  }
  return std::make_unique<FileLoader>(T, std::move(streams), entries, shuffle,
                                      cfg.data_shuffle_seed);
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
    if (cfg.enable_data_shuffling) {
      spdlog::warn("enable_data_shuffling has no effect with dataset_type=synthetic (each "
                   "synthetic sequence is already drawn from its number)");
    }
    return std::make_unique<SyntheticLoader>(cfg.model.max_target_length, cfg.model.vocab_size);
  }
  return open_files(cfg, "dataset_path", parse_dataset_entries("dataset_path", cfg.dataset_path),
                    cfg.enable_data_shuffling);
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
  const auto entries = parse_dataset_entries("eval_dataset_path", cfg.eval_dataset_path);
  CAROUSEL_CHECK(entries.size() == 1 && entries[0].path == cfg.eval_dataset_path,
                 "eval_dataset_path='{}' names several datasets or a weight; the held-out split "
                 "is one file or glob without weight (mix training data in dataset_path)",
                 cfg.eval_dataset_path);
  return open_files(cfg, "eval_dataset_path", entries, false);
}

std::int64_t check_packing_separators(const Config& cfg, const DataLoader& data) {
  if (!cfg.packing) return 0;
  const std::int64_t B = cfg.global_batch(), T = cfg.model.max_target_length;
  const std::int64_t steps =
      std::clamp<std::int64_t>(kPackingCheckTokens / (B * T), 1, kPackingCheckSteps);
  std::int64_t separators = 0;
  for (std::int64_t step = 0; step < steps; ++step) {
    const std::int64_t count = std::min(B, std::max<std::int64_t>(1, kPackingCheckTokens / T));
    const TokenBatch batch = data.batch(step, B, 0, count);
    separators += std::count(batch.inputs.begin(), batch.inputs.end(), std::int32_t(cfg.eos_id));
  }
  if (separators == 0) {
    spdlog::warn(
        "packing=true: the eos id {}{} occurs nowhere in the first {} batch(es) of {}: every "
        "sequence would be one document, as without packing; check eos_id, or that the data "
        "has document separators (scripts/prepare_data.py --add-eos writes them)",
        cfg.eos_id,
        cfg.tokenizer_path.empty() ? std::string()
                                   : fmt::format(" (tokenizer_path='{}')", cfg.tokenizer_path),
        steps, data.describe());
  }
  return separators;
}

void resolve_eos_id(Config& cfg) {
  if (!cfg.packing || cfg.eos_id >= 0) return;
  CAROUSEL_CHECK(!cfg.tokenizer_path.empty(),
                 "packing=true needs the token that ends a document: set eos_id=N, or "
                 "tokenizer_path=tokenizer.json whose eos token carousel reads");
  const TokenizerInfo tokenizer = read_tokenizer(cfg.tokenizer_path);
  CAROUSEL_CHECK(tokenizer.eos_id.has_value(),
                 "packing=true: tokenizer_path='{}' names no eos token (tokenizer_config.json's "
                 "eos_token, or an added <|endoftext|>, </s> or <|end_of_text|>); set eos_id=N",
                 cfg.tokenizer_path);
  CAROUSEL_CHECK(*tokenizer.eos_id < cfg.model.vocab_size,
                 "packing=true: the eos token of tokenizer_path='{}' is {}, not below "
                 "vocab_size={}",
                 cfg.tokenizer_path, *tokenizer.eos_id, cfg.model.vocab_size);
  cfg.eos_id = *tokenizer.eos_id;
  spdlog::info("packing: documents end with the tokenizer's eos token, id {}", cfg.eos_id);
}

std::int64_t eval_batches(const Config& cfg, const DataLoader& eval) {
  if (cfg.eval_steps > 0) return cfg.eval_steps;
  const std::int64_t n = eval.stream_tokens();
  if (n == 0) return 1;
  const std::int64_t per_batch = cfg.global_batch() * cfg.model.max_target_length;
  return std::max<std::int64_t>(1, (n - 1) / per_batch);
}

}  // namespace carousel
