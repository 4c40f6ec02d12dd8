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

#include "models/moe_router.h"

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
  // Mixture of experts (docs/moe.md): with num_experts > 1 the layers from first_num_dense_layers
  // on replace the dense MLP by routed experts (and shared ones), MaxText's keys.
  std::int64_t num_experts = 1;               // X (1: a dense model)
  std::int64_t num_experts_per_tok = 1;       // k, experts each token is routed to
  std::int64_t moe_mlp_dim = -1;              // Fe, each expert's width (-1: mlp_dim)
  std::int64_t shared_experts = 0;            // experts every token goes through, width Fe each
  std::int64_t first_num_dense_layers = 0;    // leading layers that keep the dense MLP
  std::string routed_score_func = "softmax";  // softmax | sigmoid
  bool norm_topk_prob = false;                // weights / sum of the chosen scores
  double routed_scaling_factor = 1.0;         // c, times every combine weight
  double load_balance_loss_weight = 0.0;      // alpha of the per-sequence balancing loss
  double capacity_factor = -1.0;              // <= 0: dropless (the only mode implemented)
  bool routed_bias = false;                   // auxiliary-loss-free balancing's bias
  double routed_bias_update_rate = 0.0;       // its step: bias += rate * sign(mean - load)
  // Float8 training (docs/float8.md), MaxText's key: "" (none) | fp8. The recipe: tensorwise
  // (delayed and blockwise are named by the issue, not built yet).
  std::string quantization;
  std::string fp8_recipe = "tensorwise";

  std::int64_t head_dim() const { return emb_dim / num_query_heads; }
  bool is_llama() const { return decoder_block == "llama"; }
  bool is_moe() const { return num_experts > 1; }
  bool is_moe_layer(std::int64_t layer) const {
    return is_moe() && layer >= first_num_dense_layers;
  }
  std::int64_t expert_mlp_dim() const { return moe_mlp_dim > 0 ? moe_mlp_dim : mlp_dim; }
  // Whether the attention and MLP projections run in float8 (models/parallel/float8_gemm.h).
  bool float8() const { return quantization == "fp8"; }
  RouterConfig router() const;
  // Throws carousel::Error naming the first inconsistent key: each key's own range first, then
  // divisibility, then the parameter count (at most kMaxParameters).
  void validate() const;
  void validate_experts() const;  // the MoE keys (part of validate)
};

// Named shapes (docs/model.md#named-shapes): tiny, llama2-7b, llama2-13b, llama3-8b, llama3-70b.
// Throws on an unknown name, listing the known ones.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Parameter count and the FLOPs of one training step per token (forward + backward, no remat),
// counting attention's causal half: 6 * matmul params + 6 * N * T * E (PaLM appendix B, causal).
// With experts the FLOPs count the active parameters: k of the X routed experts.
std::int64_t parameter_count(const ModelConfig& cfg);
double train_flops_per_token(const ModelConfig& cfg);

}  // namespace carousel
