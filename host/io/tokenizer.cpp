// tokenizer.cpp — reading a Hugging Face tokenizer.json and carrying it into checkpoints (see
// tokenizer.h).
#include "host/io/tokenizer.h"

#include <nlohmann/json.hpp>

#include "compute/error.h"
#include "host/config/paths.h"
#include "host/io/files.h"
#include "host/io/json_fields.h"

namespace carousel {
namespace fs = std::filesystem;

namespace {

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

std::optional<std::int64_t> id_of(const nlohmann::json& tok, const std::string& text) {
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
    for (const auto& t : tok["added_tokens"]) {
      if (t.is_object() && t.value("content", "") == text && t.contains("id") &&
          t["id"].is_number_integer()) {
        return t["id"].get<std::int64_t>();
      }
    }
  }
  const auto& vocab = tok["model"]["vocab"];
  if (vocab.is_object() && vocab.contains(text)) return vocab[text].get<std::int64_t>();
  return std::nullopt;
}

std::optional<std::string> first_special(const nlohmann::json& tok,
                                         std::initializer_list<const char*> names) {
  if (!tok.contains("added_tokens") || !tok["added_tokens"].is_array()) return std::nullopt;
  for (const char* name : names) {
    for (const auto& t : tok["added_tokens"]) {
      if (t.is_object() && t.value("content", "") == name && t.value("special", false)) {
        return std::string(name);
      }
    }
  }
  return std::nullopt;
}

std::int64_t vocab_size_of(const nlohmann::json& j, const std::string& path) {
  std::int64_t size = 0;
  const auto& vocab = j["model"]["vocab"];
  if (vocab.is_object()) {  // BPE, WordPiece, WordLevel: {token: id}
    for (const auto& [token, id] : vocab.items()) {
      CAROUSEL_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0,
                     "tokenizer_path='{}': model.vocab id of token '{}' is not a non-negative "
                     "integer",
                     path, token);
      size = std::max(size, id.get<std::int64_t>() + 1);
    }
  } else if (vocab.is_array()) {  // Unigram: [[piece, score], ...], the id is the index
    size = std::int64_t(vocab.size());
  } else {
    fail("tokenizer_path='{}': model.vocab is neither an object nor an array", path);
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"]) {
      if (t.is_object() && t.contains("id") && t["id"].is_number_integer()) {
        size = std::max(size, t["id"].get<std::int64_t>() + 1);
      }
    }
  }
  CAROUSEL_CHECK(size > 0, "tokenizer_path='{}' has an empty vocabulary", path);
  return size;
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
