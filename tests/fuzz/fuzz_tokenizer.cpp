// fuzz_tokenizer.cpp — libFuzzer target over carousel's reading of a Hugging Face tokenizer.json
// (host/io/tokenizer.cpp; docs/reliability.md#fuzzing). The input up to its first NUL byte is
// tokenizer.json; what follows a NUL, when there is one, is the tokenizer_config.json beside it
// (which names the bos and eos tokens). read_tokenizer returns or throws carousel::Error, and a
// tokenizer it returns has 1 to 2^24 token ids and bos/eos ids inside them. Seeds:
// tests/fuzz/corpus/tokenizer (the tests' tokenizers).
#include <cstring>

#include "host/io/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace carousel;
  using namespace carousel::fuzz;
  static const fs::path dir = scratch_dir("tokenizer");
  const std::string input = bytes_of(data, size);
  const std::size_t nul = input.find('\0');
  write_file(dir / "tokenizer.json", input.substr(0, nul));
  if (nul == std::string::npos) {
    fs::remove(dir / "tokenizer_config.json");
  } else {
    write_file(dir / "tokenizer_config.json", input.substr(nul + 1));
  }
  try {
    const TokenizerInfo tok = read_tokenizer((dir / "tokenizer.json").string());
    if (tok.vocab_size < 1 || tok.vocab_size > (std::int64_t(1) << 24)) {
      throw HarnessFailure("vocab_size " + std::to_string(tok.vocab_size) + " accepted");
    }
    for (const auto& id : {tok.bos_id, tok.eos_id}) {
      if (id && (*id < 0 || *id >= tok.vocab_size)) {
        throw HarnessFailure("bos/eos id " + std::to_string(*id) + " outside the vocabulary");
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
