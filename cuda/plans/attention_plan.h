// attention_plan.h — what the cuDNN flash-attention path decides without a GPU: which shapes it
// takes, the key its graphs are cached under, the memory of which keys cuDNN built or refused
// (one per GPU, shared by every backend on it), and the strides of carousel's [B, T, H, D]
// tensors in cuDNN's [b, h, s, d] dimension order (no copies: the layout is expressed by strides).
// Plain C++ so CPU tests check it; cuda/fast/cudnn_attention.cpp builds and runs the graphs.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
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
           std::tie(o.batch, o.seq, o.heads, o.kv_heads, o.head_dim, o.dtype, o.backward, o.kv_seq);
  }
};

// "forward B=4 T=2048 H=16 Hkv=16 D=128" (" Tk=…" for a key prefix): how logs name a key.
std::string describe(const AttentionKey& key);

// Empty when cuDNN's fused attention (as carousel calls it: causal, GQA, bfloat16, statistics
// saved) takes this shape; otherwise the reason, naming the limit: the fast tier then runs the
// reference attention for that shape, and says so once with this reason.
// Rules: bfloat16 inputs; head_dim a multiple of 8 and at most 128 (the limit of the Hopper
// forward and backward kernels in cuDNN 9 for training); heads a multiple of kv_heads; keys at
// least as many as queries.
std::string cudnn_attention_unsupported(const AttentionKey& key);

// The frontend declares every SDPA operand (Q, K, V, O and their gradients) 16-byte aligned —
// its Tensor_attributes::default_alignment — because the Hopper kernels move them with 16-byte
// vector loads and TMA, and it refuses a misaligned pointer at execute. Whether all of
// `addresses` meet that: a misaligned view runs the reference kernel for that call instead.
constexpr std::uintptr_t kSdpaAlignment = 16;
bool sdpa_aligned(std::initializer_list<std::uintptr_t> addresses);

// Dims and strides, in cuDNN's order [b, h, s, d], of a [B, T, H, D] row-major tensor.
struct DimsStrides {
  std::array<std::int64_t, 4> dims, strides;
};
DimsStrides bthd_as_bhsd(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d);
// The softmax statistics [B, H, T] (float32, carousel's lse) as cuDNN's [b, h, s, 1].
DimsStrides stats_as_bhs1(std::int64_t b, std::int64_t h, std::int64_t t);

// What one graph build answered: a graph, or cuDNN's refusal in its own words.
template <class Graph>
struct AttentionBuild {
  std::shared_ptr<Graph> graph;  // null: refused
  std::string refusal;           // cuDNN's (or the frontend's) words when refused
};

// The graphs of one GPU by key: each key is built once, on first asking, and then either reused
// or remembered as refused, so a refused shape costs one failed build and one log line, not one
// per call. Not locked: its owner (one per GPU, cudnn_attention.cpp) holds that GPU's mutex
// around lookups and executes alike.
template <class Graph>
class AttentionGraphMemo {
 public:
  struct Entry {
    std::shared_ptr<Graph> graph;  // null: refused
    std::string refusal;
    double build_seconds = 0;  // wall time of the build (or of the failed attempt)
  };
  struct Found {
    const Entry* entry = nullptr;  // stays valid while the memo lives
    bool first = false;  // this call built it (or was refused): the caller says so, once per key
  };

  // The entry for `key`; `build()` (returning AttentionBuild<Graph>) runs only on first asking. A
  // build that throws is a refusal with the exception's words: a frontend that cannot find a
  // symbol or library throws rather than returning an error, and either way the shape degrades
  // to the reference kernel rather than stopping the run.
  template <class Build>
  Found find(const AttentionKey& key, Build&& build) {
    if (auto it = entries_.find(key); it != entries_.end()) {
      ++hits_;
      return {&it->second, false};
    }
    const auto start = std::chrono::steady_clock::now();
    Entry entry;
    try {
      AttentionBuild<Graph> built = build();
      entry.graph = std::move(built.graph);
      entry.refusal = std::move(built.refusal);
      if (!entry.graph && entry.refusal.empty()) entry.refusal = "no graph and no reason given";
    } catch (const std::exception& e) {
      entry.graph = nullptr;
      entry.refusal = e.what();
    }
    entry.build_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++(entry.graph ? builds_ : refusals_);
    return {&entries_.emplace(key, std::move(entry)).first->second, true};
  }

  int builds() const { return builds_; }
  int refusals() const { return refusals_; }
  int hits() const { return hits_; }
  std::size_t size() const { return entries_.size(); }

 private:
  std::map<AttentionKey, Entry> entries_;  // node-based: entry pointers stay valid
  int builds_ = 0, refusals_ = 0, hits_ = 0;
};

// One T per GPU index, made on first asking and kept for the life of the PerGpu (so references
// stay valid while other threads add GPUs). Thread-safe.
template <class T>
class PerGpu {
 public:
  T& at(int gpu) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unique_ptr<T>& slot = items_[gpu];
    if (!slot) slot = std::make_unique<T>();
    return *slot;
  }
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::map<int, std::unique_ptr<T>> items_;
};

}  // namespace carousel::gpu
