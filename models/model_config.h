// model_config.h — the hyper-parameters of a model, and the named shapes (presets).
//
// Field names follow MaxText's config keys (host/config.h maps keys to these fields).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace carousel {

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
  // Throws carousel::Error naming the first inconsistent key.
  void validate() const;
};

// Named shapes (docs/model.md#named-shapes): tiny, llama2-7b, llama2-13b, llama3-8b. Throws on
// an unknown name, listing the known ones.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Parameter count and the FLOPs of one training step per token (forward + backward, no remat),
// counting attention's causal half: 6 * matmul params + 6 * N * T * E (PaLM appendix B, causal).
std::int64_t parameter_count(const ModelConfig& cfg);
double train_flops_per_token(const ModelConfig& cfg);

}  // namespace carousel
