// reader_harness.h — one file's bytes through carousel's file readers, shared by the bounded fuzz
// tests (tests/bad_inputs/test_fuzz_readers.cpp, in CI) and the libFuzzer targets (tests/fuzz/,
// long runs).
//
// The contract checked: a reader either loads the file or throws carousel::Error. A file that
// loads must also be consistent (every tensor inside the file and the right size; every token
// below vocab_size); a loaded-but-inconsistent file throws HarnessFailure, which is not a
// carousel::Error, so the gtest cases fail on it and libFuzzer reports it as a crash. Memory
// errors on the way are the sanitizers' to catch (scripts/test.sh --sanitize).
#pragma once

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>

#include "compute/error.h"
#include "host/data/data.h"
#include "host/io/safetensors.h"

namespace carousel::fuzz {

struct HarnessFailure : std::logic_error {
  using std::logic_error::logic_error;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.flush();
  if (!out.good()) throw HarnessFailure("cannot write " + path);
}

// Writes `bytes` to `path` and opens it as a safetensors file. true: it loaded (and is
// consistent); false: it was refused with carousel::Error.
inline bool load_safetensors_bytes(const std::string& bytes, const std::string& path) {
  write_bytes(path, bytes);
  try {
    const SafetensorsFile file(path);
    std::uint64_t header = 0;
    for (int i = 0; i < 8; ++i) header |= std::uint64_t(std::uint8_t(bytes[i])) << (8 * i);
    const std::uint64_t data_size = bytes.size() - 8 - header;
    std::uint64_t covered = 0;
    unsigned sum = 0;
    for (const auto& [name, e] : file.entries()) {
      const std::uint64_t size = e.end - e.begin;
      if (size != std::uint64_t(numel(e.shape)) * e.element_size || e.end > data_size) {
        throw HarnessFailure("tensor '" + name + "' loaded with inconsistent offsets");
      }
      // Every byte is read: its size must be the entry's.
      const std::vector<char> data = file.read(name);
      if (data.size() != size) throw HarnessFailure("tensor '" + name + "' read a wrong size");
      for (const char c : data) sum += static_cast<unsigned char>(c);
      covered += size;
    }
    if (covered != data_size) throw HarnessFailure("tensors do not cover the data section");
    volatile unsigned sink = sum;
    (void)sink;
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Writes `bytes` to `path` and opens it as an llm.c token shard (dataset_type=tokens) with
// sequence length `seq_len` and `vocab` tokens. true: it loaded and its batches hold tokens
// below vocab, targets shifted by one; false: refused with carousel::Error.
inline bool load_token_shard_bytes(const std::string& bytes, const std::string& path,
                                   std::int64_t seq_len, std::int64_t vocab) {
  write_bytes(path, bytes);
  Config cfg;
  cfg.dataset_type = "tokens";
  cfg.dataset_path = path;
  cfg.model.max_target_length = seq_len;
  cfg.model.vocab_size = vocab;
  try {
    const auto loader = make_data_loader(cfg);
    for (std::int64_t step : {0, 1, 7, 1000003}) {
      const TokenBatch b = loader->batch(step, 3, 0, 3);
      if (b.inputs.size() != std::size_t(3 * seq_len) || b.targets.size() != b.inputs.size()) {
        throw HarnessFailure("batch has the wrong size");
      }
      for (std::size_t i = 0; i < b.inputs.size(); ++i) {
        if (b.inputs[i] < 0 || b.inputs[i] >= vocab || b.targets[i] < 0 || b.targets[i] >= vocab)
          throw HarnessFailure("token outside [0, vocab_size) loaded");
        if ((i + 1) % seq_len != 0 && b.targets[i] != b.inputs[i + 1])
          throw HarnessFailure("targets are not the inputs shifted by one");
      }
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace carousel::fuzz
