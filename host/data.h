// data.h — training data in a deterministic order (docs/model.md#data-order).
//
// Sequence j of step i is global sequence g = i*B + j. For file data it starts at token offset
// g*T of the concatenated stream (wrapping at the end): inputs = tokens[o, o+T), targets =
// tokens[o+1, o+T+1). Synthetic data is a function of g alone. So the data position of a run is
// its step number, and a resumed run reads exactly what the uninterrupted run would have read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host/config.h"

namespace carousel {

struct TokenBatch {
  std::int64_t sequences = 0, seq_len = 0;
  std::vector<std::int32_t> inputs, targets;  // [sequences, seq_len] each
};

class DataLoader {
 public:
  virtual ~DataLoader() = default;
  // Sequences [first, first + count) of step `step` with global batch `global_batch`.
  TokenBatch batch(std::int64_t step, std::int64_t global_batch, std::int64_t first,
                   std::int64_t count) const;
  virtual std::string describe() const = 0;

 protected:
  explicit DataLoader(std::int64_t seq_len) : seq_len_(seq_len) {}
  // Writes seq_len + 1 tokens of global sequence g.
  virtual void sequence(std::int64_t g, std::int32_t* out) const = 0;
  std::int64_t seq_len_;
};

// synthetic: sequence g is an arithmetic progression mod V with a start and a stride drawn
// from g (learnable: the next token follows from the two before it).
// tokens: llm.c shards (256 int32 header: magic 20240520, version 1, token count; then uint16
// tokens), one file or a glob of several, concatenated in sorted name order.
// text: the bytes of a file.
// Every token is checked against vocab_size when the data is opened. dataset_path must name
// regular files (a FIFO would block forever) and be local (check_local_path).
std::unique_ptr<DataLoader> make_data_loader(const Config& cfg);

// Writes an llm.c token shard (used by tests and by `carousel` tools that prepare data).
void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);

}  // namespace carousel
