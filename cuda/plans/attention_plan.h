// attention_plan.h — what the cuDNN flash-attention path decides without a GPU: which shapes it
// takes, the key its graphs are cached under, and the strides of carousel's [B, T, H, D] tensors
// in cuDNN's [b, h, s, d] dimension order (no copies: the layout is expressed by strides).
// Plain C++ so CPU tests check it; cuda/cudnn_attention.cpp builds and runs the graphs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <tuple>

#include "compute/dtype.h"

namespace carousel::gpu {

struct AttentionKey {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::BF16;
  bool backward = false;
  // Keys' length when longer than the queries' (a context-parallel chunk against its key
  // prefix: causal from the bottom right); 0 = seq.
  std::int64_t kv_seq = 0;
  std::int64_t keys() const { return kv_seq ? kv_seq : seq; }
  bool operator<(const AttentionKey& o) const {
    return std::tie(batch, seq, heads, kv_heads, head_dim, dtype, backward, kv_seq) <
           std::tie(o.batch, o.seq, o.heads, o.kv_heads, o.head_dim, o.dtype, o.backward,
                    o.kv_seq);
  }
};

// Empty when cuDNN's fused attention (as carousel calls it: causal, GQA, bfloat16, statistics
// saved) takes this shape; otherwise the reason, naming the limit — the caller's error says
// which setting to change (head_dim, or gpu_kernels=reference for the reference kernels).
// Rules: bfloat16 inputs; head_dim a multiple of 8 and at most 128 (the limit of the Hopper
// forward and backward kernels in cuDNN 9 for training); heads a multiple of kv_heads; keys at
// least as many as queries.
std::string cudnn_attention_unsupported(const AttentionKey& key);

// Dims and strides, in cuDNN's order [b, h, s, d], of a [B, T, H, D] row-major tensor.
struct DimsStrides {
  std::array<std::int64_t, 4> dims, strides;
};
DimsStrides bthd_as_bhsd(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d);
// The softmax statistics [B, H, T] (float32, carousel's lse) as cuDNN's [b, h, s, 1].
DimsStrides stats_as_bhs1(std::int64_t b, std::int64_t h, std::int64_t t);

}  // namespace carousel::gpu
