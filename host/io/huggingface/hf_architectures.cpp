// hf_architectures.cpp — the rows of hf_architectures.h.
#include "host/io/huggingface/hf_architectures.h"

#include <fmt/format.h>

#include <cmath>
#include <regex>

#include "compute/error.h"

namespace carousel {

namespace {

// A field stored in one ModelConfig member.
template <class T>
HfField member(const char* hf_key, const char* key, T ModelConfig::*m, nlohmann::json absent) {
  return {hf_key, key, std::move(absent),
          [m](const ModelConfig& c) { return nlohmann::json(c.*m); },
          [m](ModelConfig& c, const nlohmann::json& v) { c.*m = v.get<T>(); }};
}

std::string same_name(const std::string& name) { return name; }
std::vector<std::string> nothing(const nlohmann::json&) { return {}; }

// A field other than `fine` (absent or null is fine), as "field=value (why)".
std::vector<std::string> unless(const nlohmann::json& config, const char* field,
                                const nlohmann::json& fine, const char* why) {
  if (!config.contains(field) || config[field].is_null() || same_hf_value(config[field], fine))
    return {};
  return {fmt::format("{}={} ({})", field, config[field].dump(), why)};
}

// Mixtral's files: model.layers.i.block_sparse_moe.{gate, experts.j.w1 (gate), w3 (up), w2
// (down)}.
std::string mixtral_name(const std::string& name) {
  static const std::regex expert(
      R"(^(model\.layers\.\d+\.)mlp\.experts\.(\d+)\.(\w+)_proj\.weight$)");
  static const std::regex router(R"(^(model\.layers\.\d+\.)mlp\.gate\.weight$)");
  std::smatch m;
  if (std::regex_match(name, m, expert)) {
    const std::string w = m[3] == "gate" ? "w1" : m[3] == "up" ? "w3" : "w2";
    return fmt::format("{}block_sparse_moe.experts.{}.{}.weight", m[1].str(), m[2].str(), w);
  }
  if (std::regex_match(name, m, router)) return m[1].str() + "block_sparse_moe.gate.weight";
  return name;
}

const std::vector<HfArchitecture>& rows() {
  static const std::vector<HfArchitecture> table = {
      {"llama", "LlamaForCausalLM", {}, {}, same_name, nothing},
      {"deepseek",
       "DeepseekForCausalLM",
       {member("n_routed_experts", "num_experts", &ModelConfig::num_experts, nullptr),
        member("num_experts_per_tok", "num_experts_per_tok", &ModelConfig::num_experts_per_tok,
               nullptr),
        {"moe_intermediate_size", "base_moe_mlp_dim", nullptr,
         [](const ModelConfig& c) { return nlohmann::json(c.expert_mlp_dim()); },
         [](ModelConfig& c, const nlohmann::json& v) { c.moe_mlp_dim = v.get<std::int64_t>(); }},
        member("n_shared_experts", "shared_experts", &ModelConfig::shared_experts, 0),
        member("first_k_dense_replace", "first_num_dense_layers",
               &ModelConfig::first_num_dense_layers, 0),
        member("norm_topk_prob", "norm_topk_prob", &ModelConfig::norm_topk_prob, false),
        member("scoring_func", "routed_score_func", &ModelConfig::routed_score_func, "softmax"),
        member("routed_scaling_factor", "routed_scaling_factor",
               &ModelConfig::routed_scaling_factor, 1.0)},
       {},
       same_name,
       [](const nlohmann::json& c) {
         auto out =
             unless(c, "moe_layer_freq", 1, "carousel's layers after the first k are all MoE");
         const auto per_batch = unless(c, "seq_aux", true, "carousel balances per sequence");
         out.insert(out.end(), per_batch.begin(), per_batch.end());
         // Compared as JSON values: value<T>() throws the JSON library's own error when the
         // file holds another type ("norm_topk_prob": 1).
         if (c.contains("norm_topk_prob") && c["norm_topk_prob"] == true &&
             c.contains("num_experts_per_tok") && c["num_experts_per_tok"] == 1)
           out.push_back(
               "norm_topk_prob=true with num_experts_per_tok=1 (DeepSeekMoE leaves a "
               "single weight as its score, carousel normalises it to 1)");
         return out;
       }},
      {"mixtral",
       "MixtralForCausalLM",
       {member("num_local_experts", "num_experts", &ModelConfig::num_experts, 8),
        member("num_experts_per_tok", "num_experts_per_tok", &ModelConfig::num_experts_per_tok, 2),
        {"intermediate_size", "base_moe_mlp_dim", nullptr,
         [](const ModelConfig& c) { return nlohmann::json(c.expert_mlp_dim()); },
         [](ModelConfig& c, const nlohmann::json& v) { c.moe_mlp_dim = v.get<std::int64_t>(); }}},
       {member("", "norm_topk_prob", &ModelConfig::norm_topk_prob, true),
        member("", "routed_score_func", &ModelConfig::routed_score_func, "softmax"),
        member("", "shared_experts", &ModelConfig::shared_experts, 0),
        member("", "first_num_dense_layers", &ModelConfig::first_num_dense_layers, 0),
        member("", "routed_scaling_factor", &ModelConfig::routed_scaling_factor, 1.0)},
       mixtral_name,
       [](const nlohmann::json& c) {
         return unless(c, "sliding_window", nullptr, "carousel's attention is full causal");
       }},
  };
  return table;
}

}  // namespace

const HfArchitecture& hf_architecture(const std::string& model_type) {
  for (const auto& row : rows()) {
    if (row.model_type == model_type) return row;
  }
  static const std::pair<const char*, const char*> kRefused[] = {
      {"qwen2_moe", "a shared expert behind its own sigmoid gate, and q/k/v projection biases"},
      {"qwen3_moe", "RMSNorm of queries and keys (q_norm, k_norm)"},
      {"deepseek_v2", "multi-head latent attention (kv_lora_rank, q_lora_rank)"},
      {"deepseek_v3", "multi-head latent attention (kv_lora_rank, q_lora_rank)"},
      {"qwen2", "q/k/v projection biases"},
      {"mistral", "sliding-window attention"},
  };
  for (const auto& [type, what] : kRefused) {
    CAROUSEL_CHECK(model_type != type, "model_type=\"{}\": carousel does not implement {}", type,
                   what);
  }
  fail(
      "model_type=\"{}\" is not an architecture carousel reads; it reads llama, deepseek "
      "(DeepSeekMoE) and mixtral",
      model_type);
}

const HfArchitecture& hf_architecture_of(const ModelConfig& model) {
  return hf_architecture(model.is_moe() ? "deepseek" : "llama");
}

std::string hf_export_caveats(const ModelConfig& model) {
  if (!model.is_moe()) return "";
  std::vector<std::string> what;
  if (model.routed_score_func != "softmax") what.push_back("sigmoid scores");
  if (model.routed_scaling_factor != 1.0) what.push_back("routed_scaling_factor != 1");
  if (model.routed_bias) what.push_back("the loss-free bias (kept in state.json only)");
  if (model.norm_topk_prob && model.num_experts_per_tok == 1)
    what.push_back("norm_topk_prob with top-1");
  if (what.empty()) return "";
  std::string list;
  for (const auto& w : what) list += (list.empty() ? "" : ", ") + w;
  return fmt::format(
      "checkpoints describe this model as DeepSeekMoE (config.json), whose reference routing "
      "has no {}: carousel reads them back exactly, other tools would route differently",
      list);
}

bool same_hf_value(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::abs(x - y) <= 1e-9 * std::max(std::abs(x), std::abs(y));
  }
  return a == b;
}

}  // namespace carousel
