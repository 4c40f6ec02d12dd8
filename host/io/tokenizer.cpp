// tokenizer.cpp — reading a Hugging Face tokenizer.json and carrying it into checkpoints (see
// tokenizer.h).
#include "host/io/tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "compute/error.h"
#include "host/config/paths.h"
#include "host/io/files.h"
#include "host/io/json_fields.h"

namespace carousel {
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kMaxVocab = std::int64_t(1) << 24;  // carousel's largest vocab_size

// A JSON file of the tokenizer (read_json_file), its errors prefixed with the config key and
// followed by `hint`.
nlohmann::json read_tokenizer_json(const fs::path& path, const char* hint = "") {
  try {
    return read_json_file(path);
  } catch (const Error& e) {
    fail("tokenizer_path: {}{}", e.what(), hint);
  }
}

// "bos_token": "<s>" or {"content": "<s>", ...}; nullopt when absent or null.
std::optional<std::string> token_text(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

// The id of `text`: an added token's, else model.vocab's (a Unigram vocabulary's: the index of
// its piece; the last of equal pieces, as the tokenizers library's lookup keeps).
std::optional<std::int64_t> id_of(const nlohmann::json& tok, const std::string& text) {
  if (tok.contains("added_tokens")) {  // checked by vocab_size_of: objects with string content
    for (const auto& t : tok["added_tokens"]) {
      if (t["content"] == text) return t["id"].get<std::int64_t>();
    }
  }
  const auto& vocab = tok["model"]["vocab"];
  if (vocab.is_object() && vocab.contains(text)) return vocab[text].get<std::int64_t>();
  std::optional<std::int64_t> id;
  if (vocab.is_array()) {
    for (std::size_t i = 0; i < vocab.size(); ++i) {
      const auto& e = vocab[i];
      if (e.is_array() && !e.empty() && e[0] == text) id = std::int64_t(i);
    }
  }
  return id;
}

std::optional<std::string> first_special(const nlohmann::json& tok,
                                         std::initializer_list<const char*> names) {
  if (!tok.contains("added_tokens")) return std::nullopt;
  for (const char* name : names) {
    for (const auto& t : tok["added_tokens"]) {
      if (t["content"] == name && t.value("special", false)) return std::string(name);
    }
  }
  return std::nullopt;
}

// What a JSON value is, in the words of scripts/prepare_data.py's error messages (which words
// its checks the same way): an integer as itself, anything else by its kind.
std::string json_kind(const nlohmann::json& v) {
  if (v.is_number_integer()) return v.dump();
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  return v.is_array() ? "an array" : "an object";
}

// A token as JSON text (quoted and escaped: one line whatever it holds).
std::string quoted(const std::string& token) { return nlohmann::json(token).dump(); }

bool is_id(const nlohmann::json& v) { return v.is_number_unsigned(); }  // >= 0, < 2^64

// 1 + the largest id, after the checks that scripts/prepare_data.py makes in the same order and
// words (scripts/tokenizer_json.py; tests/end_to_end/script_inputs_test.py holds the two to it),
// so that a tokenizer.json both read gives the same ids and vocab_size, or the same refusal.
// Added tokens are numbered as the tokenizers library numbers them when it loads the file
// (prepare_data.py and transformers tokenize with it), ignoring the ids written there: a token of
// model.vocab keeps its id; any other takes the next id from the vocabulary's size (its number
// of entries). A written id that differs is refused: carousel and the data would disagree on the
// token (the library only logs a warning and renumbers).
std::int64_t vocab_size_of(const nlohmann::json& j, const std::string& path) {
  const auto bad = [&](const std::string& why) { fail("tokenizer_path='{}'{}", path, why); };
  const auto& vocab = j["model"]["vocab"];
  std::uint64_t largest = 0;
  bool any = false;
  const auto saw = [&](std::uint64_t id) {
    largest = any ? std::max(largest, id) : id;
    any = true;
  };
  std::unordered_map<std::string, std::uint64_t> pieces;  // a Unigram vocabulary's ids
  if (vocab.is_object()) {  // BPE, WordPiece, WordLevel: {token: id}, checked in key order
    for (const auto& [token, id] : vocab.items()) {
      if (!is_id(id)) {
        bad(fmt::format(": model.vocab id of token {} is {}, not a non-negative integer",
                        quoted(token), json_kind(id)));
      }
      saw(id.get<std::uint64_t>());
    }
  } else if (vocab.is_array()) {  // Unigram: [[piece, score], ...], the id is the index
    for (std::size_t i = 0; i < vocab.size(); ++i) {
      const auto& e = vocab[i];
      if (e.is_array() && !e.empty() && e[0].is_string()) pieces[e[0].get<std::string>()] = i;
      saw(i);
    }
  } else {
    bad(
        fmt::format(": model.vocab is {}, neither an object (BPE, WordPiece, WordLevel) nor a "
                    "list (Unigram)",
                    json_kind(vocab)));
  }
  static const nlohmann::json kEmpty = nlohmann::json::array();
  const auto& added = j.contains("added_tokens") ? j["added_tokens"] : kEmpty;
  if (!added.is_array()) bad(fmt::format(": added_tokens is {}, not a list", json_kind(added)));
  for (std::size_t k = 0; k < added.size(); ++k) {
    const auto& t = added[k];
    if (!t.is_object()) {
      bad(fmt::format(": added_tokens[{}] is {}, not an object", k, json_kind(t)));
    }
    if (!t.contains("content") || !t["content"].is_string() || t["content"] == "") {
      bad(fmt::format(": added_tokens[{}]: content is {}, not a token (a non-empty string)", k,
                      !t.contains("content")     ? std::string("missing")
                      : t["content"].is_string() ? std::string("empty")
                                                 : json_kind(t["content"])));
    }
    const std::string where = fmt::format("added_tokens[{}] ({})", k, quoted(t["content"]));
    if (!t.contains("id") || !is_id(t["id"])) {
      bad(fmt::format(": {}: id is {}, not a non-negative integer", where,
                      t.contains("id") ? json_kind(t["id"]) : "missing"));
    }
    if (t.contains("special") && !t["special"].is_boolean()) {
      bad(fmt::format(": {}: special is {}, not true or false", where, json_kind(t["special"])));
    }
    saw(t["id"].get<std::uint64_t>());
  }
  if (any && largest >= std::uint64_t(kMaxVocab)) {
    bad(
        fmt::format(": the tokenizer's largest token id is {}; carousel's vocab_size is at most "
                    "{}, so ids must be below it",
                    largest, kMaxVocab));
  }
  // The library's numbering (tokenizers' AddedVocabulary::add_tokens), as versions 0.22.2 and
  // later number (`newer`: a new token takes the next id from the vocabulary's size) and as
  // earlier ones did (`older`: the next id after the largest added one when that is at least
  // the size, also when that token is one of model.vocab's). They differ only when model.vocab
  // has gaps; a written id must be what both give.
  const std::uint64_t model_size = vocab.size();
  std::unordered_map<std::string, std::uint64_t> newer, older;
  std::uint64_t next = model_size, top = 0;  // top: the largest id `older` gave so far
  for (std::size_t k = 0; k < added.size(); ++k) {
    const std::string content = added[k]["content"].get<std::string>();
    std::optional<std::uint64_t> in_model;
    if (vocab.is_object() && vocab.contains(content))
      in_model = vocab[content].get<std::uint64_t>();
    if (const auto p = pieces.find(content); p != pieces.end()) in_model = p->second;
    const auto a_it = newer.find(content);
    const std::uint64_t a = a_it != newer.end() ? a_it->second : in_model ? *in_model : next++;
    newer.emplace(content, a);
    std::uint64_t b = model_size;
    if (const auto b_it = older.find(content); b_it != older.end()) {
      b = b_it->second;
    } else if (in_model) {
      b = *in_model;
    } else if (!older.empty() && (top >= model_size || model_size == 0)) {
      b = top + 1;
    }
    older.emplace(content, b);
    top = older.size() == 1 ? b : std::max(top, b);
    const std::uint64_t written = added[k]["id"].get<std::uint64_t>();
    if (written == a && written == b) continue;
    const std::string token = fmt::format(": added token {} (added_tokens[{}]) has id {}, but ",
                                          quoted(content), k, written);
    if (a == b) {
      bad(token +
          fmt::format("the tokenizers library, which tokenizes the data (prepare_data.py, "
                      "transformers), gives it id {}: an added token keeps the id of the same "
                      "token in model.vocab, else takes the next id after the vocabulary ({} "
                      "entries) and the added tokens before it; write that id",
                      a, model_size));
    }
    bad(token +
        fmt::format("the tokenizers library gives it id {} (versions 0.22.2 and later) or {} "
                    "(earlier versions), as model.vocab has gaps: which ids the data holds "
                    "depends on the version that tokenized it; give model.vocab the ids 0 to {}",
                    a, b, model_size - 1));
  }
  if (!any) bad(" has an empty vocabulary");
  return std::int64_t(largest) + 1;
}

}  // namespace

TokenizerInfo read_tokenizer(const std::string& path) {
  check_local_path("tokenizer_path", path);
  check_regular("tokenizer_path", path, "tokenizer file");
  const nlohmann::json j = read_tokenizer_json(path, "; expected a Hugging Face tokenizer.json");
  CAROUSEL_CHECK(j.is_object() && j.contains("model") && j["model"].is_object() &&
                     j["model"].contains("vocab"),
                 "tokenizer_path='{}' has no model.vocab; expected a Hugging Face tokenizer.json "
                 "(the file `tokenizers` saves, not tokenizer_config.json or a vocab.txt)",
                 path);
  TokenizerInfo info;
  info.path = path;
  info.vocab_size = vocab_size_of(j, path);
  const fs::path dir = fs::path(path).parent_path();
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    if (fs::is_regular_file(dir / name)) info.companions.push_back(dir / name);
  }
  if (fs::is_regular_file(dir / "tokenizer_config.json")) {
    const auto config = read_tokenizer_json(dir / "tokenizer_config.json");
    info.bos_token = token_text(config, "bos_token");
    info.eos_token = token_text(config, "eos_token");
  } else {
    info.bos_token = first_special(j, {"<|begin_of_text|>", "<s>", "<|endoftext|>"});
    info.eos_token = first_special(j, {"<|end_of_text|>", "</s>", "<|endoftext|>"});
  }
  if (info.bos_token) info.bos_id = id_of(j, *info.bos_token);
  if (info.eos_token) info.eos_id = id_of(j, *info.eos_token);
  return info;
}

std::vector<std::string> copy_tokenizer_files(const TokenizerInfo& tokenizer, const fs::path& dir,
                                              std::int64_t model_max_length) {
  std::vector<std::string> written = {"tokenizer.json"};
  fs::copy_file(tokenizer.path, dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  for (const auto& companion : tokenizer.companions) {
    fs::copy_file(companion, dir / companion.filename(), fs::copy_options::overwrite_existing);
    written.push_back(companion.filename().string());
  }
  if (!fs::exists(dir / "tokenizer_config.json")) {
    nlohmann::ordered_json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                     {"model_max_length", model_max_length}};
    if (tokenizer.bos_token) config["bos_token"] = *tokenizer.bos_token;
    if (tokenizer.eos_token) config["eos_token"] = *tokenizer.eos_token;
    write_text_file(dir / "tokenizer_config.json", config.dump(2) + '\n');
    written.push_back("tokenizer_config.json");
  }
  return written;
}

}  // namespace carousel
