// model_config.h — the hyper-parameters of a model, and the named shapes (presets).
//
// Field names follow MaxText's config keys (host/config/config.h maps keys to these fields).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace carousel {

// Size limits (docs/reliability.md#config-and-launch-errors). Every size key has an upper bound
// so that products of sizes stay far inside int64; these two bound what a run may allocate.
inline constexpr std::int64_t kMaxParameters = 1'000'000'000'000;          // 1e12 parameters
inline constexpr std::int64_t kMaxTensorElements = std::int64_t(1) << 40;  // one activation

// a x b x ... or nullopt when the product does not fit in int64 (__builtin_mul_overflow).
std::optional<std::int64_t> checked_product(std::initializer_list<std::int64_t> factors);
// Throws "key=v is not valid; it must be in [lo, hi]<note>" unless lo <= v <= hi.
void check_range(std::string_view key, std::int64_t v, std::int64_t lo, std::int64_t hi,
                 std::string_view note = {});

struct ModelConfig {
  std::string decoder_block = "llama";  // llama | simple (MaxText's pipeline test layer)
  std::int64_t vocab_size = 256;        // V
  std::int64_t emb_dim = 64;            // E
  std::int64_t num_layers = 8;          // N
  std::int64_t num_query_heads = 4;     // H
  std::int64_t num_kv_heads = 2;        // Hkv (H % Hkv == 0: grouped-query attention)
  std::int64_t mlp_dim = 172;           // Fm
  std::int64_t max_target_length = 64;  // T
  double rope_max_timescale = 10000.0;  // RoPE theta
  double norm_eps = 1e-5;
  bool logits_via_embedding = false;  // tie lm_head to the embedding table

  std::int64_t head_dim() const { return emb_dim / num_query_heads; }
  bool is_llama() const { return decoder_block == "llama"; }
  // Throws carousel::Error naming the first inconsistent key: each key's own range first, then
  // divisibility, then the parameter count (at most kMaxParameters).
  void validate() const;
};

// Named shapes (docs/model.md#named-shapes): tiny, llama2-7b, llama2-13b, llama3-8b, llama3-70b.
// Throws on an unknown name, listing the known ones.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Parameter count and the FLOPs of one training step per token (forward + backward, no remat),
// counting attention's causal half: 6 * matmul params + 6 * N * T * E (PaLM appendix B, causal).
std::int64_t parameter_count(const ModelConfig& cfg);
double train_flops_per_token(const ModelConfig& cfg);

}  // namespace carousel
