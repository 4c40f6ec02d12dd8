// attention_plan.cpp — cuDNN attention shape rules, key names, alignment and layouts (see
// attention_plan.h; the graph memo and PerGpu are templates there).
#include "cuda/plans/attention_plan.h"

#include <fmt/format.h>

namespace carousel::gpu {

std::string describe(const AttentionKey& k) {
  return fmt::format("{} B={} T={}{} H={} Hkv={} D={}", k.backward ? "backward" : "forward",
                     k.batch, k.seq, k.kv_seq ? fmt::format(" Tk={}", k.kv_seq) : "", k.heads,
                     k.kv_heads, k.head_dim);
}

std::string cudnn_attention_unsupported(const AttentionKey& k) {
  if (k.dtype != DType::BF16)
    return fmt::format("cuDNN's fused attention takes bfloat16, not {}", dtype_name(k.dtype));
  if (k.head_dim % 8 != 0 || k.head_dim > 128 || k.head_dim <= 0)
    return fmt::format("head_dim {} (cuDNN's fused attention takes a multiple of 8 up to 128)",
                       k.head_dim);
  if (k.kv_heads <= 0 || k.heads % k.kv_heads != 0)
    return fmt::format("{} query heads are not a multiple of {} kv heads", k.heads, k.kv_heads);
  if (k.batch <= 0 || k.seq <= 0) return fmt::format("empty batch {} x seq {}", k.batch, k.seq);
  if (k.keys() < k.seq)
    return fmt::format("{} keys for {} queries (causal attention needs at least as many)", k.keys(),
                       k.seq);
  return "";
}

bool sdpa_aligned(std::initializer_list<std::uintptr_t> addresses) {
  for (std::uintptr_t a : addresses)
    if (a % kSdpaAlignment != 0) return false;
  return true;
}

DimsStrides bthd_as_bhsd(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) {
  return {{b, h, t, d}, {t * h * d, d, h * d, 1}};
}

DimsStrides stats_as_bhs1(std::int64_t b, std::int64_t h, std::int64_t t) {
  return {{b, h, t, 1}, {h * t, t, 1, 1}};
}

}  // namespace carousel::gpu
