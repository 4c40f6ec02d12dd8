// packing.h — packed documents (config `packing`): sequences cut from a stream of documents that
// end with the eos token keep attention inside each document and restart RoPE positions at each
// (MaxText's packing, Megatron's reset_attention_mask and reset_position_ids).
//
// A token's document starts after the last eos before it in its sequence (or at the sequence's
// start); the eos itself ends its document. The ops take the document starts and a RoPE table
// row per token (compute/backend.h RopeTables).
#pragma once

#include <cstdint>
#include <vector>

#include "compute/backend.h"

namespace carousel {

// doc_start of every token of `inputs` ([sequences, seq_len] ids): the position in its sequence
// of the first token of its document.
std::vector<std::int32_t> document_starts(const std::vector<std::int32_t>& inputs,
                                          std::int64_t seq_len, std::int64_t eos_id);

// Fills `packed` (allocating its tensors on first use, then reusing them: a captured step reads
// the same addresses) with the doc_start [b, t] and RoPE rows [b*t, D/2] of a microbatch's
// tokens held here: each token's row of the whole tables at its position in its document.
// `doc_start` holds them for the whole sequences of `seq_len` tokens; `mine` picks this rank's
// t tokens of each (their positions in the sequence, in order: context parallelism; empty: all).
// `cos`, `sin`: the whole tables' values [seq_len, D/2] on the host.
void upload_packed_rope(Backend& be, const std::vector<float>& cos, const std::vector<float>& sin,
                        std::int64_t half, const std::vector<std::int32_t>& doc_start,
                        std::int64_t seq_len, RopeTables& packed,
                        const std::vector<std::int64_t>& mine = {});

}  // namespace carousel
