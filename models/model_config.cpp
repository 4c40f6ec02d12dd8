// model_config.cpp — presets, validation (ranges, divisibility, size limits) and size/FLOP
// formulas of ModelConfig.
#include "models/model_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "compute/error.h"
#include "models/params.h"

namespace carousel {

std::optional<std::int64_t> checked_product(std::initializer_list<std::int64_t> factors) {
  std::int64_t p = 1;
  for (const std::int64_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) return std::nullopt;
  }
  return p;
}

void check_range(std::string_view key, std::int64_t v, std::int64_t lo, std::int64_t hi,
                 std::string_view note) {
  CAROUSEL_CHECK(v >= lo && v <= hi, "{}={} is not valid; it must be in [{}, {}]{}", key, v, lo, hi,
                 note);
}

namespace {

// Each size key's range. The upper bounds are far above any Llama (llama3-405b: E 16384,
// Fm 53248, V 128256, N 126) and keep every product (V x E, B x H x T x T, ...) inside int64.
constexpr std::int64_t kMaxVocab = std::int64_t(1) << 24, kMaxEmbDim = std::int64_t(1) << 16,
                       kMaxLayers = 4096, kMaxHeads = 4096, kMaxMlpDim = std::int64_t(1) << 20,
                       kMaxLength = std::int64_t(1) << 20, kMaxExperts = 4096,
                       kMaxSharedExperts = 64;

// The most parameters those ranges allow (param_table): per layer q, k, v and o (each at most
// E x E: the kv heads divide the query heads, H x head_dim = E), gate, up and down (E x Fm each)
// and two norms; then the embedding, an untied head and the final norm. About 2^49.7: summing
// a valid model's parameters cannot overflow int64, so validate() only compares the count.
constexpr std::int64_t kLargestParameterCount =
    kMaxLayers * (4 * kMaxEmbDim * kMaxEmbDim + 3 * kMaxEmbDim * kMaxMlpDim + 2 * kMaxEmbDim) +
    2 * kMaxVocab * kMaxEmbDim + kMaxEmbDim;
static_assert(kLargestParameterCount < std::numeric_limits<std::int64_t>::max() / 1024,
              "the size ranges must keep the parameter count far inside int64");

}  // namespace

void ModelConfig::validate() const {
  CAROUSEL_CHECK(decoder_block == "llama" || decoder_block == "simple",
                 "decoder_block='{}' is not valid; use llama or simple", decoder_block);
  // Each key's own range first, so a message never blames a product of several keys.
  check_range("vocab_size", vocab_size, 1, kMaxVocab);
  check_range("base_emb_dim", emb_dim, 1, kMaxEmbDim);
  check_range("base_num_decoder_layers", num_layers, 1, kMaxLayers);
  check_range("base_num_query_heads", num_query_heads, 1, kMaxHeads);
  check_range("base_num_kv_heads", num_kv_heads, 1, kMaxHeads);
  check_range("base_mlp_dim", mlp_dim, 1, kMaxMlpDim);
  check_range("max_target_length", max_target_length, 1, kMaxLength);
  CAROUSEL_CHECK(std::isfinite(rope_max_timescale) && rope_max_timescale > 0,
                 "rope_max_timescale={} is not valid; it must be a finite number > 0",
                 rope_max_timescale);
  CAROUSEL_CHECK(std::isfinite(norm_eps) && norm_eps > 0 && norm_eps < 1,
                 "normalization_layer_epsilon={} is not valid; it must be in (0, 1)", norm_eps);
  if (is_llama()) {
    CAROUSEL_CHECK(emb_dim % num_query_heads == 0,
                   "base_emb_dim={} must be divisible by base_num_query_heads={} (head_dim = E/H)",
                   emb_dim, num_query_heads);
    CAROUSEL_CHECK(head_dim() % 2 == 0,
                   "head_dim = base_emb_dim/base_num_query_heads = {} must be even for RoPE",
                   head_dim());
    CAROUSEL_CHECK(num_query_heads % num_kv_heads == 0,
                   "base_num_query_heads={} must be a multiple of base_num_kv_heads={}",
                   num_query_heads, num_kv_heads);
  }
  validate_experts();
  CAROUSEL_CHECK(quantization.empty() || quantization == "fp8",
                 "quantization='{}' is not valid; use fp8 (float8 projections, docs/float8.md) or "
                 "leave it empty (none)",
                 quantization);
  CAROUSEL_CHECK(fp8_recipe == "tensorwise",
                 "fp8_recipe='{}' is not valid; the one recipe built is tensorwise (a scale per "
                 "tensor from its amax now); delayed and blockwise are not built yet",
                 fp8_recipe);
  // The parameter count before anything is allocated (at most kLargestParameterCount here, plus
  // the experts' parameters, which validate_experts bounds by kMaxParameters).
  const std::int64_t params = parameter_count(*this);
  CAROUSEL_CHECK(params <= kMaxParameters,
                 "the model has {} parameters (vocab_size={}, base_emb_dim={}, base_mlp_dim={}, "
                 "base_num_decoder_layers={}); at most {} are supported",
                 params, vocab_size, emb_dim, mlp_dim, num_layers, kMaxParameters);
}

void ModelConfig::validate_experts() const {
  check_range("num_experts", num_experts, 1, kMaxExperts, " (1: a dense model)");
  if (!is_moe()) return;
  CAROUSEL_CHECK(is_llama(),
                 "num_experts={} needs decoder_block=llama (the simple block has no MLP)",
                 num_experts);
  check_range("num_experts_per_tok", num_experts_per_tok, 1, num_experts,
              " (each token goes to k of the num_experts experts)");
  CAROUSEL_CHECK(moe_mlp_dim == -1 || (moe_mlp_dim >= 1 && moe_mlp_dim <= kMaxMlpDim),
                 "base_moe_mlp_dim={} is not valid; it must be -1 (base_mlp_dim) or in [1, {}]",
                 moe_mlp_dim, kMaxMlpDim);
  check_range("shared_experts", shared_experts, 0, kMaxSharedExperts);
  check_range("first_num_dense_layers", first_num_dense_layers, 0, num_layers,
              " (the leading layers that keep a dense MLP)");
  CAROUSEL_CHECK(routed_score_func == "softmax" || routed_score_func == "sigmoid",
                 "routed_score_func='{}' is not valid; use softmax (Mixtral, Qwen-MoE) or sigmoid "
                 "(DeepSeek-V3)",
                 routed_score_func);
  CAROUSEL_CHECK(std::isfinite(routed_scaling_factor) && routed_scaling_factor > 0,
                 "routed_scaling_factor={} is not valid; it must be a finite number > 0",
                 routed_scaling_factor);
  CAROUSEL_CHECK(std::isfinite(load_balance_loss_weight) && load_balance_loss_weight >= 0,
                 "load_balance_loss_weight={} is not valid; it must be a finite number >= 0 "
                 "(0: no balancing loss)",
                 load_balance_loss_weight);
  CAROUSEL_CHECK(capacity_factor <= 0,
                 "capacity_factor={} would drop the tokens beyond {} x the balanced load of an "
                 "expert; carousel's experts are dropless (every token reaches its k experts): use "
                 "capacity_factor=-1",
                 capacity_factor, capacity_factor);
  CAROUSEL_CHECK(std::isfinite(routed_bias_update_rate) && routed_bias_update_rate >= 0,
                 "routed_bias_update_rate={} is not valid; it must be a finite number >= 0",
                 routed_bias_update_rate);
  const auto experts =
      checked_product({num_experts + shared_experts, 3, emb_dim, expert_mlp_dim(), num_layers});
  CAROUSEL_CHECK(experts && *experts <= kMaxParameters,
                 "the experts have more than {} parameters ((num_experts={} + shared_experts={}) x "
                 "3 x base_emb_dim={} x base_moe_mlp_dim={} x base_num_decoder_layers={})",
                 kMaxParameters, num_experts, shared_experts, emb_dim, expert_mlp_dim(),
                 num_layers);
}

RouterConfig ModelConfig::router() const {
  return {.experts = int(num_experts),
          .top_k = int(num_experts_per_tok),
          .score = routed_score_func == "sigmoid" ? RouterScore::Sigmoid : RouterScore::Softmax,
          .normalize_top_k = norm_topk_prob,
          .routed_scaling_factor = routed_scaling_factor,
          .aux_loss_weight = load_balance_loss_weight};
}

namespace {
struct Preset {
  const char* name;
  ModelConfig cfg;
};
ModelConfig llama(std::int64_t V, std::int64_t E, std::int64_t N, std::int64_t H, std::int64_t Hkv,
                  std::int64_t Fm, std::int64_t T, double theta) {
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
      {"llama3-70b", llama(128256, 8192, 80, 64, 8, 28672, 8192, 500000.0)},
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
      // A token passes through k of the X routed experts.
      const double active = spec.expert.sharded()
                                ? double(cfg.num_experts_per_tok) / double(cfg.num_experts)
                                : 1.0;
      matmul_params += active * double(numel(spec.shape));
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
