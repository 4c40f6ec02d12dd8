// hf_import.h — starting a run from a Hugging Face model directory
// (docs/training.md#starting-from-a-hugging-face-model).
//
// `load_parameters_path` accepts what transformers' save_pretrained writes for a
// LlamaForCausalLM, or a DeepSeekMoE or Mixtral model (hf_architectures.h): config.json plus
// either model.safetensors or model.safetensors.index.json with its shards
// (model-0000i-of-0000n.safetensors), tensors in F32, BF16 or F16. No manifest.json is needed. The
// HF config is checked against the run's model keys (every difference in one error naming the
// carousel key to set); the tensors are looked up by their Hugging Face names (carousel's own
// names, models/params.h), shapes checked, widened to float32 exactly (bf16 and f16 are subsets of
// float32), and tensors the model does not use (rotary_emb.inv_freq, a tied lm_head.weight) ignored
// with a debug line. Every file goes through the validating reader of host/io/safetensors.h, so a
// corrupt file is a clear error.
#pragma once

#include <string>

#include "compute/backend.h"
#include "host/io/tensor_files.h"
#include "models/model_config.h"
#include "models/params.h"

namespace carousel {

// True when `directory` holds config.json and no carousel checkpoint files (manifest.json,
// state.json): a Hugging Face model directory rather than one of our checkpoints.
bool is_hf_model_directory(const std::string& directory);

// Checks `<directory>/config.json` against `model`: throws one error listing every key that
// differs (the HF key and value, the carousel key, its value and `key=value` to set), plus any
// architecture carousel does not implement (model_type, hidden_act, biases, rope scaling).
// HF defaults apply to absent keys (LlamaConfig's: num_key_value_heads = num_attention_heads,
// rms_norm_eps 1e-6, rope_theta 10000, tie_word_embeddings false). max_position_embeddings
// smaller than max_target_length is a warning only.
void check_hf_config(const std::string& directory, const ModelConfig& model);

// The model a Hugging Face config.json describes (`path`: the file or its directory), refused
// with check_hf_config's message when carousel does not implement its architecture.
// max_target_length is max_position_embeddings (2048 when absent).
ModelConfig model_from_hf_config(const std::string& path);

// check_hf_config, then the directory's safetensors file or shards opened (headers only): every
// tensor of `model`'s table present, in the file the index names, with its shape. Tensors are
// read one at a time from the result (BF16 / F16 widened to float32).
TensorFiles open_hf_tensors(const std::string& directory, const ModelConfig& model);

// open_hf_tensors, then fills `params` (float32, the table of `model`) from the directory's
// safetensors file or shards. One tensor is in memory at a time.
void load_hf_model(Backend& be, const std::string& directory, const ModelConfig& model,
                   const ParamSet& params);

}  // namespace carousel
