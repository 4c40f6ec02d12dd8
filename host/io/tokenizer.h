// tokenizer.h — what carousel reads of a Hugging Face tokenizer (tokenizer_path): its vocabulary
// size (checked against vocab_size), its bos/eos token ids (written to a checkpoint's
// config.json), and the files that travel into every checkpoint so the checkpoint directory is
// a complete Hugging Face model directory (AutoTokenizer loads from it). carousel never
// tokenizes itself: scripts/prepare_data.py does, with the `tokenizers` package.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace carousel {

struct TokenizerInfo {
  std::string path;             // tokenizer.json
  std::int64_t vocab_size = 0;  // 1 + the largest id of model.vocab and added_tokens
  std::optional<std::int64_t> bos_id, eos_id;
  std::optional<std::string> bos_token, eos_token;
  // tokenizer_config.json / special_tokens_map.json beside tokenizer.json, when there.
  std::vector<std::filesystem::path> companions;
};

// Reads a tokenizer.json. bos/eos: the tokens tokenizer_config.json beside it names
// ("bos_token"/"eos_token", as a string or {"content": ...}); without one, the first special
// added token among the usual names (<|begin_of_text|>, <s>, <|endoftext|> for bos;
// <|end_of_text|>, </s>, <|endoftext|> for eos — GPT-2-style tokenizers, as prepare_data.py
// trains, use <|endoftext|> for both). Errors name the file and what is wrong.
TokenizerInfo read_tokenizer(const std::string& path);

// Copies tokenizer.json and its companions into `dir`; without a tokenizer_config.json, writes
// one (PreTrainedTokenizerFast with the bos/eos tokens and model_max_length) so transformers can
// load the directory. Returns the file names written.
std::vector<std::string> copy_tokenizer_files(const TokenizerInfo& tokenizer,
                                              const std::filesystem::path& dir,
                                              std::int64_t model_max_length);

}  // namespace carousel
