// config.cpp — the config's derived values, and looking keys up (typos, old names, MaxText keys
// carousel does not implement). The key table is config_keys.cpp, loading config_load.cpp,
// validation config_validate.cpp.
#include "host/config/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "compute/error.h"

namespace carousel {

std::int64_t Config::global_batch() const {
  return std::llround(per_device_batch_size * double(num_devices()));
}

std::int64_t Config::microbatches() const {
  if (num_pipeline_microbatches > 0) return num_pipeline_microbatches;
  return ici_pipeline_parallelism * (pipeline_delay_activation_forwarding ? 2 : 1);
}

std::int64_t Config::repeats() const {
  if (num_pipeline_repeats > 0) return num_pipeline_repeats;
  const std::int64_t S = std::max<std::int64_t>(ici_pipeline_parallelism, 1);
  // A list of S x R counts gives R; Megatron's first/last keys describe one chunk per rank.
  if (!pipeline_stage_layers.empty())
    return std::max<std::int64_t>(1, std::int64_t(pipeline_stage_layers.size()) / S);
  if (uneven_stages()) return 1;
  return pipelined_layers() / (S * std::max<std::int64_t>(num_layers_per_pipeline_stage, 1));
}

std::int64_t Config::pipelined_layers() const {
  return pipeline_parallel_layers == -1 ? model.num_layers : pipeline_parallel_layers;
}

bool Config::uneven_stages() const {
  return !pipeline_stage_layers.empty() || decoder_first_pipeline_num_layers != -1 ||
         decoder_last_pipeline_num_layers != -1;
}

std::vector<int> Config::stage_layer_counts() const {
  const std::int64_t V = ici_pipeline_parallelism * repeats();
  if (!pipeline_stage_layers.empty())
    return {pipeline_stage_layers.begin(), pipeline_stage_layers.end()};
  if (!uneven_stages()) return std::vector<int>(std::size_t(V), int(num_layers_per_pipeline_stage));
  // Megatron: the set ends fixed, the other stages share the remaining layers evenly
  // (validate_pipeline checks that they divide).
  const bool first = decoder_first_pipeline_num_layers != -1;
  const bool last = decoder_last_pipeline_num_layers != -1;
  const std::int64_t fixed = (first ? decoder_first_pipeline_num_layers : 0) +
                             (last ? decoder_last_pipeline_num_layers : 0);
  const std::int64_t others = V - first - last;
  const int each = others > 0 ? int((pipelined_layers() - fixed) / others) : 0;
  std::vector<int> counts(std::size_t(V), each);
  if (first) counts.front() = int(decoder_first_pipeline_num_layers);
  if (last) counts.back() = int(decoder_last_pipeline_num_layers);
  return counts;
}

int Config::weight_slots() const {
  if (pipeline_fsdp_ag_per_repeat) return 2;
  if (pipeline_fsdp_ag_once) return -1;
  return 0;
}

std::string Config::run_directory() const {
  CAROUSEL_ASSERT(!run_name.empty(), "run directory of an unnamed run (resolve_run_name names it)");
  return (std::filesystem::path(base_output_directory) / run_name).string();
}

std::string closest_key(const std::string& name) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      }
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  std::size_t best_d = ~std::size_t(0);
  std::string lower = name;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& k : config_keys()) {
    const std::size_t d = distance(lower, k.name);
    if (d < best_d) {
      best_d = d;
      best = k.name;
    }
  }
  // A hint only for a plausible typo: at most one edit per three characters of the name.
  return 3 * best_d <= lower.size() ? best : std::string();
}

const std::vector<ConfigAlias>& config_aliases() {
  static const std::vector<ConfigAlias> aliases = {
      {"cosine_learning_rate_final_fraction", "learning_rate_final_fraction"},
  };
  return aliases;
}

std::string maxtext_equivalent(const std::string& name) {
  static const std::map<std::string, std::string> equivalents = {
      {"gradient_accumulation_steps",
       "num_pipeline_microbatches (each step's batch is split into that many microbatches whose "
       "gradients are summed)"},
      {"profiler", "profiler_steps=N (N profiled steps written as a Chrome trace)"},
      {"hardware", "device (hardware=gpu is device=cuda, hardware=cpu device=cpu)"},
      {"ici_sequence_parallelism", "ici_context_parallelism (the sequence split over ranks)"},
      {"dcn_sequence_parallelism", "dcn_context_parallelism"},
      {"eval_per_device_batch_size", "per_device_batch_size (evaluation uses the training batch)"},
      {"add_eos", "scripts/prepare_data.py --add-eos (separators are written into the data)"},
      {"mlp_activations",
       "nothing: carousel's llama MLP is SwiGLU, MaxText's [\"silu\", \"linear\"]; remove it"},
  };
  const auto it = equivalents.find(name);
  return it == equivalents.end() ? std::string() : it->second;
}

bool is_unsupported_maxtext_key(const std::string& name) {
  // Common MaxText keys (MaxText's base.yml) with no meaning in carousel. Every other mesh axis
  // (ici_*_parallelism, dcn_*_parallelism) is matched by its pattern below.
  static const std::set<std::string> keys = {
      "attention",
      "attention_type",
      "quantize_kvcache",
      "scan_layers",
      "param_scan_axis",
      "tokenizer_type",
      "eval_per_device_batch_size",
      "hardware",
      "num_slices",
      "global_parameter_scale",
      "gradient_accumulation_steps",
      "opt_type",
      "mlp_activations",
      "enable_dropout",
      "dropout_rate",
      "z_loss_multiplier",
      "sparse_matmul",
      "megablox",
      "sliding_window_size",
      "fused_qkv",
      "fused_mlp",
      "logits_dot_in_fp32",
      "float32_qk_product",
      "float32_logits",
      "cast_logits_to_fp32",
      "use_iota_embed",
      "checkpoint_storage_use_ocdbt",
      "checkpoint_storage_use_zarr3",
      "load_full_state_path",
      "hf_path",
      "hf_train_files",
      "hf_eval_split",
      "train_split",
      "dataset_name",
      "eval_dataset_name",
      "grain_train_files",
      "add_bos",
      "add_eos",
      "enable_goodput_recording",
      "monitor_goodput",
      "profiler",
      "jax_cache_dir",
      "compile_topology",
      "compile_topology_num_slices",
      "max_prefill_predict_length",
      "prefill_cache_axis_order",
      "decode_sampling_strategy",
      "allow_split_physical_axes",
      "shardy",
      "data_sharding",
      "logical_axis_rules",
      "mesh_axes",
  };
  auto ends_with = [&](const char* suffix) {
    const std::string s = suffix;
    return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if ((name.rfind("ici_", 0) == 0 || name.rfind("dcn_", 0) == 0) && ends_with("_parallelism")) {
    for (const auto& k : config_keys()) {
      if (k.name == name) return false;
    }
    return true;
  }
  return keys.count(name) > 0;
}

}  // namespace carousel
