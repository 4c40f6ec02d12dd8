// test_fuzz_readers.cpp — bounded, deterministic fuzzing of the file readers (safetensors and
// llm.c token shards): a few thousand mutations of valid files (byte flips, truncations,
// appended bytes, header length changes, JSON edits) with a fixed seed. Each must load
// consistently or throw carousel::Error (tests/fuzz/reader_harness.h); under
// scripts/test.sh --sanitize the same cases are checked for memory errors and UB. Long runs:
// the libFuzzer targets in tests/fuzz/ (docs/reliability.md#fuzzing).
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "tests/fuzz/reader_harness.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;
using fuzz::load_safetensors_bytes;
using fuzz::load_token_shard_bytes;

constexpr std::uint64_t kSeed = 20240520;
constexpr int kCases = 3000;

// A per-process directory: ctest runs the cases of this file in parallel processes.
struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("carousel_fuzz_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::uint64_t header_length(const std::string& bytes) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(std::uint8_t(bytes[i])) << (8 * i);
  return n;
}

std::string with_header_length(std::string bytes, std::uint64_t n) {
  for (int i = 0; i < 8; ++i) bytes[i] = char(n >> (8 * i));
  return bytes;
}

// A valid safetensors file with every dtype, a scalar, an empty tensor and metadata.
std::string valid_safetensors(const std::string& path) {
  const std::vector<float> f(6, 1.5f);
  const std::vector<double> d(2, -2.0);
  const std::vector<std::uint16_t> bf(4, 0x3f80);
  const std::vector<std::int32_t> i(1, 7);
  write_safetensors(path,
                    {{"w", DType::F32, {2, 3}, f.data()},
                     {"b", DType::BF16, {4}, bf.data()},
                     {"d", DType::F64, {1, 2}, d.data()},
                     {"step", DType::I32, {}, i.data()},
                     {"empty", DType::F32, {0, 3}, f.data()}},
                    {{"format", "pt"}, {"step", "12"}});
  return read_bytes(path);
}

// Mutates a safetensors file; the JSON edits work on the header text and then keep the old
// header length or set the new one.
std::string mutate_safetensors(const std::string& valid, std::mt19937_64& rng) {
  static const std::array<const char*, 20> kFragments = {
      "[",
      "]",
      "{",
      "}",
      ",",
      ":",
      "null",
      "\"x\"",
      "-1",
      "1.5",
      "1e3",
      "18446744073709551615",
      "18446744073709551616",
      "281474976710657",
      "\"F16\"",
      "\"__metadata__\"",
      "\\u0000",
      "\xff\xfe",
      "[[[[[[[[",
      "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"};
  std::string b = valid;
  const auto pick = [&](std::size_t n) { return n == 0 ? 0 : std::size_t(rng() % n); };
  switch (rng() % 6) {
    case 0:  // byte flips anywhere
      for (int k = 1 + int(rng() % 4); k > 0; --k) b[pick(b.size())] ^= char(1 + rng() % 255);
      break;
    case 1:  // truncation
      b.resize(pick(b.size()));
      break;
    case 2:  // trailing bytes
      b.append(1 + pick(16), char(rng()));
      break;
    case 3: {  // header length changes
      const std::uint64_t n = header_length(b);
      const std::array<std::uint64_t, 9> lengths = {
          0, 1, n - 1, n + 1, n + 8, b.size() - 8, b.size() - 7, ~0ULL, 1ULL << 63};
      b = with_header_length(b, lengths[pick(lengths.size())]);
      break;
    }
    default: {  // JSON edits: insert, delete or replace a span of the header text
      const std::uint64_t n = header_length(b);
      std::string text = b.substr(8, n);
      const std::string data = b.substr(8 + n);
      const std::size_t at = pick(text.size());
      const std::size_t len = std::min<std::size_t>(pick(8), text.size() - at);
      const std::string fragment = rng() % 4 == 0 ? "" : kFragments[pick(kFragments.size())];
      text.replace(at, rng() % 3 == 0 ? 0 : len, fragment);
      const std::uint64_t new_n = rng() % 4 == 0 ? n : text.size();
      b = with_header_length(std::string(8, '\0') + text + data, new_n);
      break;
    }
  }
  return b;
}

TEST(FuzzReaders, MutatedSafetensorsLoadOrThrowCarouselError) {
  TempDir tmp;
  const std::string valid = valid_safetensors(tmp.file("valid.safetensors"));
  ASSERT_TRUE(load_safetensors_bytes(valid, tmp.file("case.safetensors")));
  std::mt19937_64 rng(kSeed);
  int loaded = 0, refused = 0;
  for (int c = 0; c < kCases; ++c) {
    const std::string bytes = mutate_safetensors(valid, rng);
    try {
      (load_safetensors_bytes(bytes, tmp.file("case.safetensors")) ? loaded : refused)++;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "case " << c << " (seed " << kSeed << "): " << e.what();
    }
  }
  // Both outcomes occur: the mutations reach the checks and do not only break the framing.
  EXPECT_GT(refused, kCases / 2);
  EXPECT_GT(loaded, 0);
}

// json::dump() recurses once per nesting level; error messages quoting a value must not.
TEST(FuzzReaders, DeeplyNestedHeaderValuesAreErrors) {
  TempDir tmp;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& entry :
       {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":" + deep + "}}",
        "{\"t\":{\"dtype\":" + deep + ",\"shape\":[1],\"data_offsets\":[0,4]}}",
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[" + deep + "],\"data_offsets\":[0,4]}}",
        "{\"__metadata__\":{\"k\":" + deep + "}}", deep}) {
    const std::string bytes =
        with_header_length(std::string(8, '\0') + entry + "abcd", entry.size());
    EXPECT_FALSE(load_safetensors_bytes(bytes, tmp.file("deep.safetensors")))
        << entry.substr(0, 60);
  }
}

// A valid shard of 64 tokens below vocab 1000.
std::string valid_shard(const std::string& path) {
  std::vector<std::uint16_t> tokens(64);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = std::uint16_t(i * 13 % 1000);
  write_token_shard(path, tokens);
  return read_bytes(path);
}

std::string mutate_shard(const std::string& valid, std::mt19937_64& rng) {
  std::string b = valid;
  const auto pick = [&](std::size_t n) { return n == 0 ? 0 : std::size_t(rng() % n); };
  const auto set_int = [&](std::size_t index, std::int32_t v) {
    if (b.size() >= 4 * index + 4) std::memcpy(&b[4 * index], &v, 4);
  };
  switch (rng() % 5) {
    case 0:  // byte flips, mostly in the first three header ints and the tokens
      for (int k = 1 + int(rng() % 4); k > 0; --k) {
        const std::size_t at = rng() % 2 ? pick(12) : 1024 + pick(b.size() - 1024);
        b[at] ^= char(1 + rng() % 255);
      }
      break;
    case 1:  // truncation
      b.resize(pick(b.size()));
      break;
    case 2:  // trailing bytes
      b.append(1 + pick(16), char(rng()));
      break;
    case 3: {  // token count changes
      const std::array<std::int32_t, 8> counts = {0, -1, 1, 63, 65, 32, INT32_MAX, INT32_MIN};
      set_int(2, counts[pick(counts.size())]);
      break;
    }
    default: {  // magic / version changes, with the file otherwise valid
      const std::array<std::int32_t, 5> values = {0, 1, 2, 20240520, -20240520};
      set_int(pick(2), values[pick(values.size())]);
      break;
    }
  }
  return b;
}

TEST(FuzzReaders, MutatedTokenShardsLoadOrThrowCarouselError) {
  TempDir tmp;
  const std::string valid = valid_shard(tmp.file("valid.bin"));
  ASSERT_TRUE(load_token_shard_bytes(valid, tmp.file("case.bin"), 8, 1000));
  std::mt19937_64 rng(kSeed);
  int loaded = 0, refused = 0;
  for (int c = 0; c < kCases; ++c) {
    const std::string bytes = mutate_shard(valid, rng);
    // Sequence lengths around the token count: shorter, equal (refused: T + 1 needed), longer.
    const std::int64_t seq_len = std::array<std::int64_t, 4>{1, 8, 63, 64}[rng() % 4];
    const std::int64_t vocab = rng() % 8 == 0 ? 256 : 1000;
    try {
      (load_token_shard_bytes(bytes, tmp.file("case.bin"), seq_len, vocab) ? loaded : refused)++;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "case " << c << " (seed " << kSeed << "): " << e.what();
    }
  }
  EXPECT_GT(refused, kCases / 2);
  EXPECT_GT(loaded, 0);
}

}  // namespace
}  // namespace carousel
