// context_parallel.h — context parallelism: each sequence split over C ranks, with causal load
// balance, and the attention that sees every earlier key (docs/parallelism.md#context-parallelism).
//
// A sequence of S tokens is cut into 2C chunks of c = S / 2C; context rank i holds chunks i and
// 2C - 1 - i (an early and a late chunk: every rank attends to about the same number of keys).
// Everything but attention is per token, so a rank's layers run on its [b, 2c] tokens alone
// (RoPE at their true positions). Attention all-gathers the keys and values of the C ranks
// (Llama 3's choice: with grouped-query attention K and V are a fraction of the activations, and
// a gather needs no ring of partial softmaxes), then each of the rank's two chunks attends to
// the key prefix up to its end (Backend::attention_forward with a longer key prefix). The key
// and value gradients of every prefix are reduce-scattered back to the ranks that own them.
// With C = 1 each piece is the plain op.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/communicator.h"
#include "compute/backend.h"

namespace carousel {

struct ContextGroup {
  Communicator* comm = nullptr;  // the context group; nullptr: one rank

  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  // Chunk index (of 2C) of this rank's half h (0: early, 1: late).
  std::int64_t chunk(int half) const { return half == 0 ? rank() : 2 * size() - 1 - rank(); }
  // The positions of this rank's tokens of a sequence of `seq` tokens, in its order.
  std::vector<std::int64_t> positions(std::int64_t seq) const;
  // This rank's tokens of `sequences` whole sequences of `seq` tokens each (row-major); with
  // one rank `whole` itself (moved, not copied).
  template <class T>
  std::vector<T> my_tokens(std::vector<T> whole, std::int64_t sequences, std::int64_t seq) const {
    if (size() == 1) return whole;
    std::vector<T> out;
    const auto pos = positions(seq);
    for (std::int64_t b = 0; b < sequences; ++b) {
      for (const std::int64_t p : pos) out.push_back(whole[std::size_t(b * seq + p)]);
    }
    return out;
  }
};

// RoPE tables [S / C, head_dim / 2] for this rank's tokens, cut from the whole sequence's
// tables [S, head_dim / 2] (the same tables with one rank).
RopeTables context_rope(Backend& be, const RopeTables& whole, const ContextGroup& context);

// What the context attention keeps for its backward: every rank's keys and values in sequence
// order, [b, S, Hkv, hd] each (undefined with one rank).
struct ContextSaved {
  Tensor k_all, v_all;
};

// Backend::attention_forward / attention_backward on this rank's tokens: q, out [b, 2c, H, hd],
// k, v [b, 2c, Hkv, hd], lse [b, H, 2c]; each chunk attends every key up to its end.
void context_attention_forward(Backend& be, const ContextGroup& context, const Tensor& q,
                               const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& lse, ContextSaved& saved,
                               const Tensor& doc_start = Tensor());  // [b, 2c]: sequence positions
void context_attention_backward(Backend& be, const ContextGroup& context, const Tensor& dout,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const ContextSaved& saved,
                                const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Tensor& doc_start = Tensor());

}  // namespace carousel
