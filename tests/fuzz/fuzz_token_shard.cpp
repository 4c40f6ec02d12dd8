// fuzz_token_shard.cpp — libFuzzer target: any bytes as an llm.c token shard
// (dataset_type=tokens) must load with every token below vocab_size or throw carousel::Error
// (tests/fuzz/reader_harness.h). The first input byte picks the sequence length and vocab size,
// the rest is the file. Run: docs/reliability.md#fuzzing.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "tests/fuzz/fuzz_util.h"  // and reader_harness.h

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const std::string path =
      (carousel::fuzz::scratch_dir("token_shard") / "shard.bin").string();  // removed at exit
  const std::int64_t seq_len = 1 + (data[0] & 0x3f);                        // 1..64
  const std::int64_t vocab = (data[0] & 0x40) ? 256 : 50257;                // GPT-2's vocab
  carousel::fuzz::load_token_shard_bytes(
      std::string(reinterpret_cast<const char*>(data + 1), size - 1), path, seq_len, vocab);
  return 0;
}
