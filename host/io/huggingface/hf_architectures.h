// hf_architectures.h — the Hugging Face architectures carousel reads and writes, one row each
// (docs/training.md#starting-from-a-hugging-face-model, docs/moe.md#hugging-face).
//
// A row owns everything about its architecture: its config.json `model_type` and class, the
// mixture-of-experts fields of that config and the carousel keys they are (the Llama fields every
// row shares are read in hf_import.cpp), what the architecture implies for keys its config does
// not name (Mixtral always renormalises its top-k), and the names its tensors have in its files.
//   llama     LlamaForCausalLM: carousel's dense model, names as carousel's.
//   deepseek  DeepseekForCausalLM (DeepSeekMoE): routed + shared experts, the first layers
//             dense, the balancing loss per sequence (seq_aux); names as carousel's. Checkpoints
//             of MoE models are written as this.
//   mixtral   MixtralForCausalLM: routed experts in every layer, block_sparse_moe.* names.
// Other model_types are refused naming what carousel does not implement of them.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model_config.h"

namespace carousel {

// One config.json field and the model key it is.
struct HfField {
  std::string hf_key;     // in config.json
  std::string key;        // carousel's config key
  nlohmann::json absent;  // the value transformers assumes when the field is missing
  std::function<nlohmann::json(const ModelConfig&)> get;
  std::function<void(ModelConfig&, const nlohmann::json&)> set;
};

struct HfArchitecture {
  std::string model_type, class_name;
  std::vector<HfField> fields;   // beyond the Llama fields
  std::vector<HfField> implied;  // fixed by the architecture: `absent` is the value
  // The name a tensor of carousel's table has in this architecture's files.
  std::function<std::string(const std::string&)> file_name;
  // What a config of this architecture may ask that carousel does not implement, one line each.
  std::function<std::vector<std::string>(const nlohmann::json&)> unsupported;
};

// The row of `model_type`; throws naming what carousel does not implement of a known
// architecture (Qwen-MoE's, DeepSeek-V2/V3's, ...) or listing the ones it reads.
const HfArchitecture& hf_architecture(const std::string& model_type);

// The row a checkpoint of `model` is written as: llama, or deepseek for experts.
const HfArchitecture& hf_architecture_of(const ModelConfig& model);
// What of `model` its checkpoints' config.json cannot say to other tools ("" when nothing):
// DeepSeekMoE's reference routing is softmax, unscaled, without the loss-free bias.
std::string hf_export_caveats(const ModelConfig& model);

// Whether two config values agree (numbers within 1e-9 relative).
bool same_hf_value(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace carousel
