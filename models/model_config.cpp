// model_config.cpp — presets, validation and size/FLOP formulas of ModelConfig.
#include "models/model_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cuda/error.h"
#include "models/params.h"

namespace carousel {

void ModelConfig::validate() const {
  CAROUSEL_CHECK(decoder_block == "llama" || decoder_block == "simple",
                 "decoder_block='{}' is not valid; use llama or simple", decoder_block);
  auto positive = [](const char* key, std::int64_t v) {
    CAROUSEL_CHECK(v > 0, "{}={} is not valid; it must be > 0", key, v);
  };
  positive("base_emb_dim", emb_dim);
  positive("base_num_decoder_layers", num_layers);
  positive("max_target_length", max_target_length);
  if (!is_llama()) return;
  positive("vocab_size", vocab_size);
  positive("base_num_query_heads", num_query_heads);
  positive("base_num_kv_heads", num_kv_heads);
  positive("base_mlp_dim", mlp_dim);
  CAROUSEL_CHECK(emb_dim % num_query_heads == 0,
                 "base_emb_dim={} must be divisible by base_num_query_heads={} (head_dim = E/H)",
                 emb_dim, num_query_heads);
  CAROUSEL_CHECK(head_dim() % 2 == 0, "head_dim = base_emb_dim/base_num_query_heads = {} must be "
                 "even for RoPE", head_dim());
  CAROUSEL_CHECK(num_query_heads % num_kv_heads == 0,
                 "base_num_query_heads={} must be a multiple of base_num_kv_heads={}",
                 num_query_heads, num_kv_heads);
  CAROUSEL_CHECK(rope_max_timescale > 0, "rope_max_timescale={} must be > 0", rope_max_timescale);
  CAROUSEL_CHECK(norm_eps > 0, "normalization_layer_epsilon={} must be > 0", norm_eps);
}

namespace {
struct Preset {
  const char* name;
  ModelConfig cfg;
};
ModelConfig llama(std::int64_t V, std::int64_t E, std::int64_t N, std::int64_t H,
                  std::int64_t Hkv, std::int64_t Fm, std::int64_t T, double theta) {
  ModelConfig c;
  c.vocab_size = V;
  c.emb_dim = E;
  c.num_layers = N;
  c.num_query_heads = H;
  c.num_kv_heads = Hkv;
  c.mlp_dim = Fm;
  c.max_target_length = T;
  c.rope_max_timescale = theta;
  return c;
}
const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {"tiny", llama(256, 64, 8, 4, 2, 172, 64, 10000.0)},
      {"llama2-7b", llama(32000, 4096, 32, 32, 32, 11008, 4096, 10000.0)},
      {"llama2-13b", llama(32000, 5120, 40, 40, 40, 13824, 4096, 10000.0)},
      {"llama3-8b", llama(128256, 4096, 32, 32, 8, 14336, 8192, 500000.0)},
  };
  return table;
}
}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

ModelConfig model_preset(const std::string& name) {
  for (const auto& p : presets()) {
    if (name == p.name) return p.cfg;
  }
  fail("model_name='{}' is not a known model; use one of: {}", name,
       fmt::join(model_preset_names(), ", "));
}

std::int64_t parameter_count(const ModelConfig& cfg) {
  std::int64_t n = 0;
  for (const auto& spec : param_table(cfg)) n += numel(spec.shape);
  return n;
}

double train_flops_per_token(const ModelConfig& cfg) {
  double matmul_params = 0;
  for (const auto& spec : param_table(cfg)) {
    if (spec.shape.size() == 2 && spec.role != ParamRole::Embedding) {
      matmul_params += double(numel(spec.shape));
    }
  }
  if (cfg.is_llama() && cfg.logits_via_embedding) {
    matmul_params += double(cfg.vocab_size * cfg.emb_dim);  // the tied head is still a matmul
  }
  const double attention =
      cfg.is_llama() ? 6.0 * cfg.num_layers * cfg.max_target_length * cfg.emb_dim : 0.0;
  return 6.0 * matmul_params + attention;
}

}  // namespace carousel
