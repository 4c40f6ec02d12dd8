// test_data.cpp — data order of docs/model.md#data-order, the three loaders, and bad data files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compute/error.h"
#include "host/data.h"
#include "tests/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

fs::path temp(const std::string& name) { return fs::temp_directory_path() / name; }

Config config_for(const std::string& type, const std::string& path, std::int64_t T) {
  Config c;
  c.dataset_type = type;
  c.dataset_path = path;
  c.model.max_target_length = T;
  c.model.vocab_size = 1000;
  return c;
}

TEST(Data, TokenShardsFollowTheDocumentedOrder) {
  // Two shards: tokens 0..299 and 300..499, concatenated in name order (n = 500).
  std::vector<std::uint16_t> a(300), b(200);
  for (int i = 0; i < 300; ++i) a[i] = std::uint16_t(i);
  for (int i = 0; i < 200; ++i) b[i] = std::uint16_t(300 + i);
  write_token_shard(temp("carousel_shard_000.bin").string(), a);
  write_token_shard(temp("carousel_shard_001.bin").string(), b);
  const std::int64_t T = 16, B = 4;
  const auto loader =
      make_data_loader(config_for("tokens", temp("carousel_shard_*.bin").string(), T));
  for (std::int64_t step : {0, 3, 9}) {
    const TokenBatch batch = loader->batch(step, B, 0, B);
    for (std::int64_t j = 0; j < B; ++j) {
      const std::int64_t offset = (step * B + j) * T;  // docs/model.md: (i*B + j) * T, wrapping
      for (std::int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(batch.inputs[j * T + t], (offset + t) % 500) << step << " " << j << " " << t;
        EXPECT_EQ(batch.targets[j * T + t], (offset + t + 1) % 500);
      }
    }
  }
}

TEST(Data, MicrobatchesAreSlicesOfTheGlobalBatch) {
  const auto loader = make_data_loader(config_for("synthetic", "", 8));
  const TokenBatch full = loader->batch(7, 6, 0, 6);
  const TokenBatch part = loader->batch(7, 6, 2, 3);
  EXPECT_EQ(std::vector<std::int32_t>(full.inputs.begin() + 16, full.inputs.begin() + 40),
            part.inputs);
  // Synthetic sequences are arithmetic progressions: targets continue the inputs.
  for (std::size_t i = 0; i + 1 < 8; ++i) EXPECT_EQ(full.targets[i], full.inputs[i + 1]);
  EXPECT_EQ(loader->batch(7, 6, 0, 6).inputs, full.inputs);  // deterministic
  EXPECT_NE(loader->batch(8, 6, 0, 6).inputs, full.inputs);
}

TEST(Data, TextBytesAreTokens) {
  std::ofstream(temp("carousel_text.txt"), std::ios::binary) << "abcdefghij";
  Config c = config_for("text", temp("carousel_text.txt").string(), 4);
  c.model.vocab_size = 256;
  const TokenBatch batch = make_data_loader(c)->batch(1, 2, 0, 2);
  // step 1, B 2: sequences 2 and 3 start at offsets 8 and 12 mod 10 = 8, 2.
  EXPECT_EQ(batch.inputs, (std::vector<std::int32_t>{'i', 'j', 'a', 'b', 'c', 'd', 'e', 'f'}));
  EXPECT_EQ(batch.targets[0], 'j');
}

TEST(Data, BadShardsAreClearErrors) {
  const std::string bad_magic = temp("carousel_bad_magic.bin").string();
  {
    std::ofstream out(bad_magic, std::ios::binary);
    std::vector<std::int32_t> header(256, 0);
    header[0] = 1234;
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  EXPECT_NE(testing::error_of([&] {
              make_data_loader(config_for("tokens", bad_magic, 4));
            }).find("has magic 1234 but llm.c shards start with 20240520"),
            std::string::npos);

  const std::string truncated = temp("carousel_truncated.bin").string();
  write_token_shard(truncated, std::vector<std::uint16_t>(100, 1));
  fs::resize_file(truncated, 1024 + 150);
  EXPECT_NE(testing::error_of([&] {
              make_data_loader(config_for("tokens", truncated, 4));
            }).find("says 100 tokens (1224 bytes) but the file is 1174 bytes"),
            std::string::npos);

  const std::string big = temp("carousel_big_token.bin").string();
  std::vector<std::uint16_t> tokens(50, 3);
  tokens[17] = 1000;
  write_token_shard(big, tokens);
  EXPECT_NE(testing::error_of([&] {
              make_data_loader(config_for("tokens", big, 4));
            }).find("token 1000 at position 17 is >= vocab_size=1000"),
            std::string::npos);

  EXPECT_NE(testing::error_of([&] {
              make_data_loader(config_for("tokens", "/nonexistent/*.bin", 4));
            }).find("matches no file"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              make_data_loader(config_for("text", "/nonexistent.txt", 4));
            }).find("text file '/nonexistent.txt' does not exist"),
            std::string::npos);
}

}  // namespace
}  // namespace carousel
