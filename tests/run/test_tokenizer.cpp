// test_tokenizer.cpp — what carousel reads of a Hugging Face tokenizer (vocabulary size, bos/eos
// ids, the ids as the tokenizers library gives them or one clear refusal) and that a run with
// tokenizer_path carries the tokenizer into each checkpoint, with the bos/eos ids in config.json.
// The JSON files here are written by hand, so the ids are known.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compute/cpu_backend.h"
#include "compute/error.h"
#include "host/config/config.h"
#include "host/io/checkpoint.h"
#include "host/io/tokenizer.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "carousel_tokenizer_tests" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A WordLevel tokenizer: words 0..2, then the added tokens given as (id, content, special).
std::string tokenizer_json(const std::vector<std::tuple<int, std::string, bool>>& added) {
  nlohmann::json j;
  j["model"] = {
      {"type", "WordLevel"}, {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}}}, {"unk_token", "a"}};
  j["added_tokens"] = nlohmann::json::array();
  for (const auto& [id, content, special] : added) {
    j["added_tokens"].push_back({{"id", id}, {"content", content}, {"special", special}});
  }
  return j.dump();
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

TEST(Tokenizer, BosAndEosFromTheUsualSpecialTokens) {
  const fs::path dir = fresh_dir("names");
  std::ofstream(dir / "tokenizer.json") << tokenizer_json({{3, "<s>", true}, {4, "</s>", true}});
  TokenizerInfo tok = read_tokenizer((dir / "tokenizer.json").string());
  EXPECT_EQ(tok.vocab_size, 5);
  EXPECT_EQ(tok.bos_id, 3);
  EXPECT_EQ(tok.eos_id, 4);
  EXPECT_TRUE(tok.companions.empty());

  // GPT-2 style (prepare_data.py's trained tokenizers): one token is both.
  std::ofstream(dir / "tokenizer.json") << tokenizer_json({{3, "<|endoftext|>", true}});
  tok = read_tokenizer((dir / "tokenizer.json").string());
  EXPECT_EQ(tok.bos_id, 3);
  EXPECT_EQ(tok.eos_id, 3);

  // A token that is not special does not count; none found: no ids.
  std::ofstream(dir / "tokenizer.json") << tokenizer_json({{3, "</s>", false}});
  tok = read_tokenizer((dir / "tokenizer.json").string());
  EXPECT_FALSE(tok.bos_id.has_value());
  EXPECT_FALSE(tok.eos_id.has_value());
}

TEST(Tokenizer, TokenizerConfigBesideItDecides) {
  const fs::path dir = fresh_dir("config");
  std::ofstream(dir / "tokenizer.json") << tokenizer_json({{3, "<s>", true}, {4, "</s>", true}});
  // Swapped on purpose: the config's choice wins over the usual names; a vocab word may be one.
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": {"content": "</s>", "lstrip": false}, "eos_token": "c"})";
  const TokenizerInfo tok = read_tokenizer((dir / "tokenizer.json").string());
  EXPECT_EQ(tok.bos_id, 4);
  EXPECT_EQ(tok.eos_id, 2);
  ASSERT_EQ(tok.companions.size(), 1u);
  EXPECT_EQ(tok.companions[0].filename(), "tokenizer_config.json");

  std::ofstream(dir / "tokenizer_config.json") << "{not json";
  EXPECT_NE(testing::error_of([&] {
              read_tokenizer((dir / "tokenizer.json").string());
            }).find("tokenizer_config.json' is not valid JSON"),
            std::string::npos);
  std::ofstream(dir / "tokenizer.json") << "{not json";
  const std::string msg =
      testing::error_of([&] { read_tokenizer((dir / "tokenizer.json").string()); });
  EXPECT_EQ(msg.rfind("tokenizer_path: '", 0), 0u) << msg;
  EXPECT_NE(msg.find("tokenizer.json' is not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("; expected a Hugging Face tokenizer.json"), std::string::npos) << msg;
}

// The refusal of `text` as tokenizer.json, or "" when it reads. Any exception other than
// carousel::Error escapes (a JSON library exception was one).
std::string refusal_of(const fs::path& dir, const std::string& text) {
  std::ofstream(dir / "tokenizer.json", std::ios::trunc) << text;
  try {
    read_tokenizer((dir / "tokenizer.json").string());
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// Ids are read as the tokenizers library gives them (prepare_data.py tokenizes with it, and
// scripts/tokenizer_json.py makes these checks in the same words): an added token's written id
// must be the library's, ids are integers below 2^24, and a malformed added token is one clear
// error. tests/end_to_end/script_inputs_test.py holds carousel and the script to one reading.
TEST(Tokenizer, IdsAreTheTokenizersLibrarys) {
  const fs::path dir = fresh_dir("ids");
  const auto refused = [&](const std::string& text, const std::string& words) {
    const std::string msg = refusal_of(dir, text);
    EXPECT_NE(msg.find(words), std::string::npos) << text << "\n" << msg;
    EXPECT_EQ(msg.rfind("tokenizer_path='" + (dir / "tokenizer.json").string() + "'", 0), 0u)
        << msg;
  };
  // The library renumbers an added token past the vocabulary to the vocabulary's size (3): it
  // is refused, not read as a vocabulary of 5001 tokens the data never uses.
  refused(tokenizer_json({{5000, "<|endoftext|>", true}}),
          ": added token \"<|endoftext|>\" (added_tokens[0]) has id 5000, but the tokenizers "
          "library, which tokenizes the data (prepare_data.py, transformers), gives it id 3");
  refused(tokenizer_json({{3, "X", true}, {3, "Y", true}}), "(added_tokens[1]) has id 3");
  refused(tokenizer_json({{0, "b", true}}), "\"b\" (added_tokens[0]) has id 0, but");
  // Ids beyond carousel's vocabulary, negative or of another type (id + 1 overflowed before).
  const std::string a = R"({"model": {"vocab": {"a": 0}}, "added_tokens": [)";
  refused(a + R"({"id": 9223372036854775807, "content": "X"}]})",
          ": the tokenizer's largest token id is 9223372036854775807; carousel's vocab_size is "
          "at most 16777216, so ids must be below it");
  refused(R"({"model": {"vocab": {"a": 0, "b": 9223372036854775807}}})",
          "largest token id is 9223372036854775807");
  refused(R"({"model": {"vocab": {"a": 0, "b": 18446744073709551616}}})",
          ": model.vocab id of token \"b\" is a number, not a non-negative integer");
  refused(a + R"({"id": -1, "content": "X"}]})",
          ": added_tokens[0] (\"X\"): id is -1, not a non-negative integer");
  // Fields of the wrong type (the JSON library's type_error escaped before).
  refused(a + R"({"id": 1, "content": 5}]})",
          ": added_tokens[0]: content is 5, not a token (a non-empty string)");
  refused(a + R"({"id": 1, "content": "X", "special": "yes"}]})",
          ": added_tokens[0] (\"X\"): special is a string, not true or false");
  refused(a + R"(7]})", ": added_tokens[0] is 7, not an object");
  refused(R"({"model": {"vocab": {"a": 0}}, "added_tokens": {}})",
          ": added_tokens is an object, not a list");
  refused(R"({"model": {"vocab": {}}})", " has an empty vocabulary");
  // A vocabulary with gaps: the library's versions number the next added token differently.
  refused(R"({"model": {"vocab": {"a": 0, "b": 5}}, "added_tokens": [{"id": 5, "content": "b"},
          {"id": 2, "content": "X"}]})",
          "gives it id 2 (versions 0.22.2 and later) or 6 (earlier versions)");

  // What reads: tokens of the vocabulary keep their ids, new ones follow it; a Unigram piece's
  // id is its index, also for the eos token tokenizer_config.json names.
  EXPECT_EQ(refusal_of(dir, tokenizer_json({{1, "b", true}, {3, "X", true}, {3, "X", false}})), "");
  EXPECT_EQ(read_tokenizer((dir / "tokenizer.json").string()).vocab_size, 4);
  EXPECT_EQ(refusal_of(dir, R"({"model": {"vocab": {"a": 0, "b": 5}}, "added_tokens": [
      {"id": 2, "content": "X"}]})"),
            "");
  EXPECT_EQ(read_tokenizer((dir / "tokenizer.json").string()).vocab_size, 6);
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "b"})";
  EXPECT_EQ(refusal_of(dir, R"({"model": {"type": "Unigram", "vocab": [["a", 0], ["b", -1]]}})"),
            "");
  EXPECT_EQ(read_tokenizer((dir / "tokenizer.json").string()).eos_id, 1);
}

Config run_with_tokenizer(const fs::path& base, const fs::path& tokenizer) {
  init_logging({.rank = 0, .level = "error", .file_dir = {}});
  Config c = load_config("", {"max_target_length=16", "steps=1", "dataset_type=text",
                              "dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt",
                              "run_name=tok", "base_output_directory=" + base.string(),
                              "tokenizer_path=" + tokenizer.string()})
                 .config;
  return c;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The checkpoint holds the tokenizer byte for byte, a tokenizer_config.json naming bos/eos (the
// user had none), config.json's bos/eos ids, and its manifest covers them (verified on load).
TEST(Tokenizer, CheckpointsCarryTheTokenizer) {
  const fs::path dir = fresh_dir("run");
  const fs::path tokenizer = dir / "tok" / "tokenizer.json";
  fs::create_directories(tokenizer.parent_path());
  std::ofstream(tokenizer) << tokenizer_json({{3, "<s>", true}, {4, "</s>", true}});
  const Config c = run_with_tokenizer(dir / "out", tokenizer);
  const TrainResult r = train(c);
  const fs::path ckpt = fs::path(r.run_directory) / "checkpoints" / "1";
  EXPECT_EQ(bytes_of(ckpt / "tokenizer.json"), bytes_of(tokenizer));
  const auto config = read_json(ckpt / "config.json");
  EXPECT_EQ(config.at("bos_token_id"), 3);
  EXPECT_EQ(config.at("eos_token_id"), 4);
  const auto tok_config = read_json(ckpt / "tokenizer_config.json");
  EXPECT_EQ(tok_config.at("bos_token"), "<s>");
  EXPECT_EQ(tok_config.at("eos_token"), "</s>");
  EXPECT_EQ(tok_config.at("model_max_length"), 16);
  const auto manifest = read_json(ckpt / "manifest.json");
  EXPECT_TRUE(manifest.at("files").contains("tokenizer.json"));
  EXPECT_TRUE(manifest.at("files").contains("tokenizer_config.json"));
  EXPECT_EQ(latest_checkpoint(c), ckpt.string());  // the manifest verifies

  // The tokenizer gone before the resumed run (text data: it only travels into checkpoints):
  // a warning, and its checkpoints are still written, without it.
  Config more = c;
  more.steps = 2;
  fs::remove(tokenizer);
  const TrainResult resumed = train(more);
  EXPECT_EQ(resumed.start_step, 1);
  const fs::path second = fs::path(r.run_directory) / "checkpoints" / "2";
  EXPECT_TRUE(fs::is_regular_file(second / "model.safetensors"));
  EXPECT_FALSE(fs::exists(second / "tokenizer.json"));
  EXPECT_FALSE(read_json(second / "config.json").contains("eos_token_id"));
}

// The run reads its tokenizer once; one that vanished before a save costs the checkpoint its
// copy (and config.json its bos/eos ids), not the checkpoint.
TEST(Tokenizer, ASaveOutlivesAVanishedTokenizer) {
  const fs::path dir = fresh_dir("vanished");
  const fs::path tokenizer = dir / "tok" / "tokenizer.json";
  fs::create_directories(tokenizer.parent_path());
  std::ofstream(tokenizer) << tokenizer_json({{3, "<s>", true}, {4, "</s>", true}});
  const TokenizerInfo tok = read_tokenizer(tokenizer.string());
  fs::remove(tokenizer);
  const Config c = run_with_tokenizer(dir / "out", tokenizer);
  CpuBackend be;
  const auto specs = param_table(c.model);
  const ParamSet params = ParamSet::over(specs, be.zeros({ParamSet::total_numel(specs)}));
  const fs::path ckpt = save_checkpoint(be, c, {&params, nullptr, nullptr}, {1}, &tok);
  EXPECT_TRUE(fs::is_regular_file(ckpt / "model.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt / "tokenizer.json"));
  EXPECT_FALSE(read_json(ckpt / "config.json").contains("bos_token_id"));
  EXPECT_NO_THROW(verify_checkpoint(ckpt.string()));
}

}  // namespace
}  // namespace carousel
