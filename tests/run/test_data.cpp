// test_data.cpp — data order of docs/model.md#data-order, the three loaders, bad data files, the
// eval split's loader and the tokenizer_path vocabulary check.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "compute/error.h"
#include "host/data/data.h"
#include "tests/support/log_capture.h"
#include "tests/support/test_util.h"

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

// llm.c's Llama 3 shards (magic 20240801, version 7, uint32 tokens) carry ids past uint16, as a
// 128 256-token vocabulary needs; they mix with GPT-2 shards in one glob, in name order.
TEST(Data, Uint32ShardsCarryIdsPastUint16) {
  std::vector<std::uint32_t> wide = {70000, 128255, 5, 65536, 65535};
  std::vector<std::uint16_t> narrow = {7, 8, 9};
  write_token_shard(temp("carousel_wide_000.bin").string(), wide);
  write_token_shard(temp("carousel_wide_001.bin").string(), narrow);
  Config c = config_for("tokens", temp("carousel_wide_*.bin").string(), 2);
  c.model.vocab_size = 128256;
  const auto loader = make_data_loader(c);
  const TokenBatch batch = loader->batch(0, 1, 0, 1);
  EXPECT_EQ(batch.inputs, (std::vector<std::int32_t>{70000, 128255}));
  EXPECT_EQ(batch.targets, (std::vector<std::int32_t>{128255, 5}));
  EXPECT_EQ(loader->stream_tokens(), 8);
  c.model.vocab_size = 100000;  // 128255 does not fit: named with its position
  EXPECT_NE(testing::error_of([&] { make_data_loader(c); })
                .find("token 128255 at position 1 is >= vocab_size=100000"),
            std::string::npos);
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
            }).find("says 100 tokens (1224 bytes with its GPT-2, uint16 tokens) but the file is "
                    "1174 bytes"),
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

TEST(Data, EvalSplitHasItsOwnOrderAndPassLength) {
  // Training shard: tokens 0..499; eval shard: 700..819 (n = 120).
  std::vector<std::uint16_t> train(500), val(120);
  for (int i = 0; i < 500; ++i) train[i] = std::uint16_t(i);
  for (int i = 0; i < 120; ++i) val[i] = std::uint16_t(700 + i);
  write_token_shard(temp("carousel_evtrain_000.bin").string(), train);
  write_token_shard(temp("carousel_evval_000.bin").string(), val);
  const std::int64_t T = 8, B = 2;
  Config c = config_for("tokens", temp("carousel_evtrain_*.bin").string(), T);
  c.eval_dataset_path = temp("carousel_evval_*.bin").string();
  c.per_device_batch_size = double(B);
  const auto eval = make_eval_data_loader(c);
  EXPECT_EQ(eval->stream_tokens(), 120);
  for (std::int64_t i : {0, 1, 7}) {  // eval batch i, sequence j starts at ((i*B + j)*T) mod 120
    const TokenBatch b = eval->batch(i, B, 0, B);
    for (std::int64_t j = 0; j < B; ++j) {
      const std::int64_t offset = (i * B + j) * T;
      for (std::int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(b.inputs[j * T + t], 700 + (offset + t) % 120) << i << " " << j << " " << t;
        EXPECT_EQ(b.targets[j * T + t], 700 + (offset + t + 1) % 120);
      }
    }
  }
  // -1: one pass, floor((120 - 1) / (B*T = 16)) = 7 batches; an explicit eval_steps wins.
  EXPECT_EQ(eval_batches(c, *eval), 7);
  c.eval_steps = 3;
  EXPECT_EQ(eval_batches(c, *eval), 3);
  // Eval tokens are checked against vocab_size like training tokens.
  c.model.vocab_size = 800;
  EXPECT_NE(testing::error_of([&] {
              make_eval_data_loader(c);
            }).find("token 800 at position 100 is >= vocab_size=800"),
            std::string::npos);
  c.eval_dataset_path = temp("carousel_nothing_*.bin").string();
  EXPECT_NE(testing::error_of([&] {
              make_eval_data_loader(c);
            }).find("eval_dataset_path='" + c.eval_dataset_path + "' matches no file"),
            std::string::npos);
}

TEST(Data, SyntheticEvalSequencesAreNotTrainingSequences) {
  Config c = config_for("synthetic", "", 8);
  const auto train = make_data_loader(c);
  const auto eval = make_eval_data_loader(c);
  EXPECT_NE(eval->batch(0, 4, 0, 4).inputs, train->batch(0, 4, 0, 4).inputs);
  EXPECT_EQ(eval->batch(0, 4, 0, 4).inputs, eval->batch(0, 4, 0, 4).inputs);
  EXPECT_EQ(eval_batches(c, *eval), 1);
  c.eval_dataset_path = "val.bin";
  EXPECT_NE(testing::error_of([&] { make_eval_data_loader(c); }).find("dataset_type=synthetic"),
            std::string::npos);
}

TEST(Data, TokenizerVocabularyMustFitVocabSize) {
  const std::string bpe = temp("carousel_tokenizer_bpe.json").string();
  // The largest id, 1203, is a vocabulary entry's (an added token's id must be the one the
  // tokenizers library gives it: tests/run/test_tokenizer.cpp).
  std::ofstream(bpe) << R"({"added_tokens": [{"id": 3, "content": "<eos>"}],
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 1203}, "merges": []}})";
  EXPECT_EQ(read_tokenizer(bpe).vocab_size, 1204);
  const std::string unigram = temp("carousel_tokenizer_unigram.json").string();
  std::ofstream(unigram) << R"({"model": {"type": "Unigram", "vocab": [["a", -1], ["b", -2]]}})";
  EXPECT_EQ(read_tokenizer(unigram).vocab_size, 2);

  Config c = config_for("tokens", "unused.bin", 4);  // vocab 1000
  EXPECT_FALSE(read_run_tokenizer(c).has_value());   // no tokenizer_path
  c.tokenizer_path = unigram;
  EXPECT_EQ(read_run_tokenizer(c)->vocab_size, 2);
  c.tokenizer_path = bpe;
  const std::string msg = testing::error_of([&] { read_run_tokenizer(c); });
  EXPECT_NE(msg.find("has a vocabulary of 1204 tokens but vocab_size=1000; set vocab_size=1204"),
            std::string::npos)
      << msg;
  c.dataset_type = "text";  // bytes, not the tokenizer's ids: no bound, and no error without one
  EXPECT_EQ(read_run_tokenizer(c)->vocab_size, 1204);
  c.tokenizer_path = temp("carousel_no_such_tokenizer.json").string();
  EXPECT_FALSE(read_run_tokenizer(c).has_value());
  c.tokenizer_path = bpe;
  c.dataset_type = "tokens";
  c.model.vocab_size = 1204;
  EXPECT_EQ(read_run_tokenizer(c)->vocab_size, 1204);

  const std::string not_tok = temp("carousel_tokenizer_config.json").string();
  std::ofstream(not_tok) << R"({"model_max_length": 2048})";
  c.tokenizer_path = not_tok;
  EXPECT_NE(testing::error_of([&] { read_run_tokenizer(c); }).find("has no model.vocab"),
            std::string::npos);
  c.tokenizer_path = temp("carousel_no_such_tokenizer.json").string();
  EXPECT_NE(testing::error_of([&] { read_run_tokenizer(c); }).find("does not exist"),
            std::string::npos);
}

}  // namespace
}  // namespace carousel

namespace carousel {
namespace {

// A relative path that does not resolve says where it was looked for; an absolute one needs not.
TEST(Paths, RelativePathErrorsNameTheWorkingDirectory) {
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_EQ(relative_to_note("data/x.bin"), " (relative to the working directory '" + cwd + "')");
  EXPECT_EQ(relative_to_note("/data/x.bin"), "");
  Config c;
  c.dataset_type = "tokens";
  c.dataset_path = "no_such_dir/train_*.bin";
  EXPECT_NE(testing::error_of([&] { make_data_loader(c); })
                .find("dataset_path='no_such_dir/train_*.bin' matches no file (relative to the "
                      "working directory '" +
                      cwd + "')"),
            std::string::npos);
}

}  // namespace
}  // namespace carousel

namespace carousel {
namespace {

// packing=true reads its separators in the first batches: counted over the same windows the
// documented order gives (sequence g's inputs are bytes [g T, g T + T) of the text), and none is
// a warning naming the eos id (before: packing was silently a no-op).
TEST(Data, PackingCountsItsSeparatorsAndWarnsWhenThereAreNone) {
  const std::string corpus = CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt";
  std::ifstream in(corpus, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto run = [&](int eos) {
    const Config cfg = load_config("", {"dataset_type=text", "dataset_path=" + corpus,
                                        "max_target_length=32", "per_device_batch_size=4",
                                        "packing=true", "eos_id=" + std::to_string(eos)})
                           .config;
    return check_packing_separators(cfg, *make_data_loader(cfg));
  };
  // B = 4 sequences of T = 32 per step, 4 steps checked: bytes [0, 512).
  const auto newlines = std::count(bytes.begin(), bytes.begin() + 512, '\n');
  ASSERT_GT(newlines, 0);
  testing::LogCapture log;
  EXPECT_EQ(run('\n'), newlines);
  EXPECT_EQ(log.text.str().find("occurs nowhere"), std::string::npos);
  ASSERT_EQ(bytes.find('\0'), std::string::npos);
  EXPECT_EQ(run(0), 0);
  EXPECT_NE(log.text.str().find("packing=true: the eos id 0 occurs nowhere in the first 4 "
                                "batch(es)"),
            std::string::npos)
      << log.text.str();
}

}  // namespace
}  // namespace carousel
