// data.h — training data in a deterministic order (docs/model.md#data-order).
//
// Sequence j of step i is global sequence g = i*B + j. For file data it starts at token offset
// g*T of the concatenated stream (wrapping at the end): inputs = tokens[o, o+T), targets =
// tokens[o+1, o+T+1); with several datasets or enable_data_shuffling the dataset and window of g
// come from host/data/data_order.h. Synthetic data is a function of g alone. So the data
// position of a run is its step number, and a resumed run reads exactly what the uninterrupted
// run would have read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/config/config.h"
#include "host/config/paths.h"
#include "host/data/token_files.h"
#include "host/io/tokenizer.h"

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
  // Tokens in the stream (file data), 0 for synthetic data (unbounded).
  virtual std::int64_t stream_tokens() const { return 0; }

 protected:
  explicit DataLoader(std::int64_t seq_len) : seq_len_(seq_len) {}
  // Writes seq_len + 1 tokens of global sequence g.
  virtual void sequence(std::int64_t g, std::int32_t* out) const = 0;
  std::int64_t seq_len_;
};

// synthetic: sequence g is an arithmetic progression mod V with a start and a stride drawn
// from g (learnable: the next token follows from the two before it).
// tokens: llm.c shards (256 int32 header: magic, version, token count; then the tokens: magic
// 20240520 version 1 uint16 as its GPT-2 scripts write, magic 20240801 version 7 uint32 as its
// Llama 3 scripts write), one file or a glob of several, concatenated in sorted name order.
// text: the bytes of a file. Both are memory-mapped (host/data/token_files.h).
// dataset_path may name several datasets, `PATH[,WEIGHT]` entries separated by ';', mixed by
// weight; enable_data_shuffling reads each dataset's windows in a permutation per epoch
// (data_shuffle_seed). Every token is checked against vocab_size when the data is opened.
// dataset_path must name regular files (a FIFO would block forever) and be local.
std::unique_ptr<DataLoader> make_data_loader(const Config& cfg);

// tokenizer_path's tokenizer (nullopt when unset), read once per run: its files and bos/eos ids
// travel into every checkpoint (save_checkpoint). With dataset_type=tokens it must be readable
// and its vocabulary fit vocab_size, so that every token id it made has an embedding; with other
// data a tokenizer that cannot be read is a warning (nullopt: checkpoints are saved without it).
std::optional<TokenizerInfo> read_run_tokenizer(const Config& cfg);

// The held-out split (docs/training.md#bring-your-data): eval_dataset_path read as dataset_type
// says, checked like the training data, in its own deterministic order starting at its first
// token. batch(i, B, first, count) is sequences [first, first + count) of eval batch i: global
// eval sequence g = i*B + j starts at token (g*T) mod n of the eval stream, independent of the
// training step. Evaluation k reads batches 0 .. eval_batches(cfg, loader) - 1, the same tokens
// each time, so successive eval losses are comparable. dataset_type=synthetic without
// eval_dataset_path: sequences g + 2^40 of the synthetic stream (never reached by training).
std::unique_ptr<DataLoader> make_eval_data_loader(const Config& cfg);

// packing with eos_id=-1: the eos id of tokenizer_path's tokenizer, set in `cfg`; an error when
// there is none (the documents' end must be known). Nothing otherwise.
void resolve_eos_id(Config& cfg);

// packing=true: counts eos_id in the inputs of the first kPackingCheckSteps global batches
// (at most kPackingCheckTokens tokens). None: a warning naming the eos id and where it came from
// — every sequence would be one document, exactly as without packing (before: silently). A
// warning, not an error: data of long documents (books) may have no separator in its first
// batches. Returns the count.
inline constexpr std::int64_t kPackingCheckSteps = 4;
inline constexpr std::int64_t kPackingCheckTokens = std::int64_t(1) << 22;
std::int64_t check_packing_separators(const Config& cfg, const DataLoader& data);

// Batches per evaluation: eval_steps, or for -1 one pass over the eval split,
// max(1, floor((n - 1) / (B*T))) batches of the global batch B (1 for synthetic data).
std::int64_t eval_batches(const Config& cfg, const DataLoader& eval);

}  // namespace carousel
