// config.cpp — the key table, value parsing, YAML + key=value loading, validation.
#include "host/config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <utility>

#include "cuda/error.h"
#include "host/schedule/registry.h"
#include "host/schedule_config.h"

namespace carousel {

namespace {

std::int64_t parse_int(const std::string& key, const std::string& text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  CAROUSEL_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
                 "config key '{}' expects an integer, got '{}'", key, text);
  return v;
}

double parse_float(const std::string& key, const std::string& text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  CAROUSEL_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
                 "config key '{}' expects a number, got '{}'", key, text);
  return v;
}

bool parse_bool(const std::string& key, const std::string& text) {
  if (text == "true" || text == "True" || text == "1") return true;
  if (text == "false" || text == "False" || text == "0") return false;
  fail("config key '{}' expects true or false, got '{}'", key, text);
}

std::string to_text(std::int64_t v) { return std::to_string(v); }
std::string to_text(double v) { return fmt::format("{}", v); }
std::string to_text(bool v) { return v ? "true" : "false"; }
std::string to_text(const std::string& v) { return v; }

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, std::int64_t>) return "int";
  if constexpr (std::is_same_v<T, double>) return "float";
  if constexpr (std::is_same_v<T, bool>) return "bool";
  return "string";
}

template <class T>
T parse(const std::string& key, const std::string& text) {
  if constexpr (std::is_same_v<T, std::int64_t>) return parse_int(key, text);
  if constexpr (std::is_same_v<T, double>) return parse_float(key, text);
  if constexpr (std::is_same_v<T, bool>) return parse_bool(key, text);
  if constexpr (std::is_same_v<T, std::string>) return text;
}

// A key stored in Config.
template <class T>
ConfigKey key(const char* name, T Config::*member, std::string help) {
  return {name,
          type_name<T>(),
          std::move(help),
          false,
          [member](const Config& c) { return to_text(c.*member); },
          [member, name](Config& c, const std::string& v) { c.*member = parse<T>(name, v); }};
}

// A key stored in Config::model (a model shape key, set by presets).
template <class T>
ConfigKey model_key(const char* name, T ModelConfig::*member, const char* help) {
  return {name,
          type_name<T>(),
          help,
          true,
          [member](const Config& c) { return to_text(c.model.*member); },
          [member, name](Config& c, const std::string& v) { c.model.*member = parse<T>(name, v); }};
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = {
      key("model_name", &Config::model_name,
          "named model shape (tiny, llama2-7b, llama2-13b, llama3-8b); sets the model keys below"),
      model_key("decoder_block", &ModelConfig::decoder_block, "llama | simple"),
      model_key("vocab_size", &ModelConfig::vocab_size, "V"),
      model_key("base_emb_dim", &ModelConfig::emb_dim, "E, model width"),
      model_key("base_num_decoder_layers", &ModelConfig::num_layers, "N, decoder layers"),
      model_key("base_num_query_heads", &ModelConfig::num_query_heads, "H; head_dim = E/H"),
      model_key("base_num_kv_heads", &ModelConfig::num_kv_heads, "Hkv (grouped-query attention)"),
      model_key("base_mlp_dim", &ModelConfig::mlp_dim, "Fm, MLP hidden width"),
      model_key("max_target_length", &ModelConfig::max_target_length, "T, sequence length"),
      model_key("rope_max_timescale", &ModelConfig::rope_max_timescale, "RoPE theta"),
      model_key("normalization_layer_epsilon", &ModelConfig::norm_eps, "RMSNorm epsilon"),
      model_key("logits_via_embedding", &ModelConfig::logits_via_embedding,
                "tie lm_head to the embedding"),
      key("run_name", &Config::run_name, "run directory name under base_output_directory"),
      key("base_output_directory", &Config::base_output_directory,
          "where runs write checkpoints and metrics"),
      key("steps", &Config::steps, "training steps"),
      key("log_period", &Config::log_period, "print a step line every this many steps"),
      key("metrics_file", &Config::metrics_file,
          "JSON-lines metrics (default <run directory>/metrics.jsonl)"),
      key("log_level", &Config::log_level, "trace | debug | info | warn | error | off"),
      key("ici_pipeline_parallelism", &Config::ici_pipeline_parallelism,
          "S: pipeline stages, one device group each"),
      key("num_pipeline_microbatches", &Config::num_pipeline_microbatches,
          "M: microbatches per step (-1 = S, or 2S with the forwarding delay); B must divide"),
      key("num_pipeline_repeats", &Config::num_pipeline_repeats,
          "R: circular repeats (-1 = layers / (S x L))"),
      key("num_layers_per_pipeline_stage", &Config::num_layers_per_pipeline_stage,
          "L: consecutive layers a stage runs per visit"),
      key("pipeline_schedule", &Config::pipeline_schedule, schedule::schedule_names(" | ")),
      key("pipeline_delay_activation_forwarding", &Config::pipeline_delay_activation_forwarding,
          "circular: forward stage outputs one iteration later (MaxText's d = 2)"),
      key("pipeline_microbatch_group_size", &Config::pipeline_microbatch_group_size,
          "interleaved_1f1b group g (S = depth-first .. M = breadth-first; 0 = S)"),
      key("ici_fsdp_parallelism", &Config::ici_fsdp_parallelism,
          "F: FSDP degree inside a stage (weights gathered before use)"),
      key("ici_data_parallelism", &Config::ici_data_parallelism,
          "D: data-parallel replicas of the whole pipeline (gradients all-reduced)"),
      key("shard_optimizer_over_data", &Config::shard_optimizer_over_data,
          "ZeRO-1: AdamW state and update sharded over the D data replicas (gradients "
          "reduce-scattered, updated weights all-gathered)"),
      key("pipeline_fsdp_ag_per_repeat", &Config::pipeline_fsdp_ag_per_repeat,
          "Buffer Sliding Window: 2 weight slots, next repeat prefetched during the current"),
      key("pipeline_fsdp_ag_once", &Config::pipeline_fsdp_ag_once,
          "gather every local stage's weights once per step (R slots)"),
      key("pipeline_prefetch_lookahead", &Config::pipeline_prefetch_lookahead,
          "issue a weight gather at most this many compute actions before use (0 = as soon as "
          "a slot is free)"),
      key("collective_timeout_seconds", &Config::collective_timeout_seconds,
          "a communication waiting longer than this fails, naming the rank and operation"),
      key("schedule_cost_f", &Config::schedule_cost_f, "schedule cost model: forward, per layer"),
      key("schedule_cost_b", &Config::schedule_cost_b, "full backward, per layer"),
      key("schedule_cost_w", &Config::schedule_cost_w,
          "weight-gradient part of the backward (zb_h1's W), per layer"),
      key("schedule_cost_p2p", &Config::schedule_cost_p2p, "activation hand-off latency"),
      key("schedule_cost_all_gather", &Config::schedule_cost_all_gather,
          "all-gather of one layer's weights"),
      key("schedule_cost_reduce_scatter", &Config::schedule_cost_reduce_scatter,
          "reduce-scatter of one layer's gradients"),
      key("per_device_batch_size", &Config::per_device_batch_size,
          "sequences per device per step; global batch B = this x devices"),
      key("dtype", &Config::dtype,
          "compute dtype: float32 | bfloat16 (bf16 weight copies and activations, float32 sums; "
          "the CPU emulates it)"),
      key("weight_dtype", &Config::weight_dtype,
          "master weights, gradients, optimizer state: float32"),
      key("device", &Config::device,
          "cpu | cuda | auto (cuda when a GPU is visible); with several devices on cuda, device "
          "d is a logical device on GPU d % visible GPUs"),
      key("remat_policy", &Config::remat_policy,
          "full (keep stage inputs, recompute in backward) | none"),
      key("init_weights_seed", &Config::init_weights_seed, "parameter initialisation seed"),
      key("learning_rate", &Config::learning_rate, "peak learning rate"),
      key("adam_b1", &Config::adam_b1, "AdamW beta1"),
      key("adam_b2", &Config::adam_b2, "AdamW beta2"),
      key("adam_eps", &Config::adam_eps, "AdamW epsilon"),
      key("adam_weight_decay", &Config::adam_weight_decay, "decoupled weight decay (matrices)"),
      key("gradient_clipping_threshold", &Config::gradient_clipping_threshold,
          "clip the global gradient L2 norm to this (0 = off)"),
      key("skip_step_on_nonfinite", &Config::skip_step_on_nonfinite,
          "a step whose loss or gradient norm is NaN or infinite is skipped on every rank (no "
          "update; counted and logged) instead of stopping the run"),
      key("warmup_steps_fraction", &Config::warmup_steps_fraction,
          "linear warmup over this fraction of the schedule"),
      key("cosine_learning_rate_final_fraction", &Config::cosine_learning_rate_final_fraction,
          "cosine decay ends at this fraction of learning_rate"),
      key("learning_rate_schedule_steps", &Config::learning_rate_schedule_steps,
          "length of warmup + cosine (-1 = steps); learning rate 0 after it"),
      key("dataset_type", &Config::dataset_type, "synthetic | tokens (llm.c shards) | text"),
      key("dataset_path", &Config::dataset_path,
          "tokens: shard file or glob; text: a text file (bytes are tokens)"),
      key("enable_checkpointing", &Config::enable_checkpointing,
          "write checkpoints (and resume from the run's latest)"),
      key("checkpoint_period", &Config::checkpoint_period,
          "save every this many steps (0 = only at the end)"),
      key("load_parameters_path", &Config::load_parameters_path,
          "start from the parameters of this checkpoint step directory"),
  };
  return keys;
}

std::int64_t Config::global_batch() const {
  return std::llround(per_device_batch_size * double(num_devices()));
}

std::int64_t Config::microbatches() const {
  if (num_pipeline_microbatches > 0) return num_pipeline_microbatches;
  return ici_pipeline_parallelism * (pipeline_delay_activation_forwarding ? 2 : 1);
}

std::int64_t Config::repeats() const {
  if (num_pipeline_repeats > 0) return num_pipeline_repeats;
  return model.num_layers / (ici_pipeline_parallelism * num_layers_per_pipeline_stage);
}

int Config::weight_slots() const {
  if (pipeline_fsdp_ag_per_repeat) return 2;
  if (pipeline_fsdp_ag_once) return -1;
  return 0;
}

std::string Config::run_directory() const {
  return (std::filesystem::path(base_output_directory) / run_name).string();
}

void Config::validate() const {
  model.validate();
  CAROUSEL_CHECK(steps > 0, "steps={} is not valid; it must be > 0", steps);
  CAROUSEL_CHECK(log_period > 0, "log_period={} is not valid; it must be > 0", log_period);
  const double batch = per_device_batch_size * double(num_devices());
  CAROUSEL_CHECK(batch >= 1 - 1e-9 && std::abs(batch - double(global_batch())) < 1e-9,
                 "per_device_batch_size={} x {} device(s) = {} sequences is not a positive whole "
                 "number",
                 per_device_batch_size, num_devices(), batch);
  validate_pipeline();
  CAROUSEL_CHECK(global_batch() % microbatches() == 0,
                 "num_pipeline_microbatches={} must divide the global batch {}", microbatches(),
                 global_batch());
  CAROUSEL_CHECK(dtype == "float32" || dtype == "bfloat16",
                 "dtype='{}' is not valid; use float32 or bfloat16 (activations and weights for "
                 "compute in bfloat16, sums in float32)",
                 dtype);
  CAROUSEL_CHECK(weight_dtype == "float32",
                 "weight_dtype='{}' is not valid; master weights, gradients and optimizer "
                 "state are float32 (use dtype=bfloat16 for bfloat16 compute)",
                 weight_dtype);
  CAROUSEL_CHECK(device == "cpu" || device == "cuda" || device == "auto",
                 "device='{}' is not valid; use cpu, cuda or auto", device);
  CAROUSEL_CHECK(remat_policy == "full" || remat_policy == "none",
                 "remat_policy='{}' is not valid; use full or none", remat_policy);
  CAROUSEL_CHECK(learning_rate >= 0, "learning_rate={} must be >= 0", learning_rate);
  CAROUSEL_CHECK(adam_b1 >= 0 && adam_b1 < 1, "adam_b1={} must be in [0, 1)", adam_b1);
  CAROUSEL_CHECK(adam_b2 >= 0 && adam_b2 < 1, "adam_b2={} must be in [0, 1)", adam_b2);
  CAROUSEL_CHECK(adam_eps > 0, "adam_eps={} must be > 0", adam_eps);
  CAROUSEL_CHECK(adam_weight_decay >= 0, "adam_weight_decay={} must be >= 0", adam_weight_decay);
  CAROUSEL_CHECK(gradient_clipping_threshold >= 0,
                 "gradient_clipping_threshold={} must be >= 0 (0 = off)",
                 gradient_clipping_threshold);
  CAROUSEL_CHECK(warmup_steps_fraction >= 0 && warmup_steps_fraction <= 1,
                 "warmup_steps_fraction={} must be in [0, 1]", warmup_steps_fraction);
  CAROUSEL_CHECK(
      cosine_learning_rate_final_fraction >= 0 && cosine_learning_rate_final_fraction <= 1,
      "cosine_learning_rate_final_fraction={} must be in [0, 1]",
      cosine_learning_rate_final_fraction);
  CAROUSEL_CHECK(dataset_type == "synthetic" || dataset_type == "tokens" || dataset_type == "text",
                 "dataset_type='{}' is not valid; use synthetic, tokens or text", dataset_type);
  CAROUSEL_CHECK(dataset_type == "synthetic" || !dataset_path.empty(),
                 "dataset_type={} needs dataset_path=FILE", dataset_type);
  CAROUSEL_CHECK(dataset_type != "text" || model.vocab_size >= 256,
                 "dataset_type=text uses bytes as tokens and needs vocab_size >= 256, got {}",
                 model.vocab_size);
  CAROUSEL_CHECK(checkpoint_period >= 0, "checkpoint_period={} must be >= 0", checkpoint_period);
  CAROUSEL_CHECK(std::isfinite(collective_timeout_seconds) && collective_timeout_seconds > 0 &&
                     collective_timeout_seconds <= kMaxCollectiveTimeoutSeconds,
                 "collective_timeout_seconds={} is not valid; it must be a number of seconds in "
                 "(0, {}] (30 days)",
                 collective_timeout_seconds, kMaxCollectiveTimeoutSeconds);
  CAROUSEL_CHECK(!run_name.empty() && run_name.find('/') == std::string::npos,
                 "run_name='{}' must be a non-empty name without '/'", run_name);
}

void Config::validate_pipeline() const {
  const std::int64_t S = ici_pipeline_parallelism, L = num_layers_per_pipeline_stage;
  const std::int64_t N = model.num_layers;
  CAROUSEL_CHECK(S >= 1, "ici_pipeline_parallelism={} must be >= 1", S);
  CAROUSEL_CHECK(L >= 1, "num_layers_per_pipeline_stage={} must be >= 1", L);
  CAROUSEL_CHECK(num_pipeline_microbatches == -1 || num_pipeline_microbatches >= 1,
                 "num_pipeline_microbatches={} must be >= 1 (or -1 for S)",
                 num_pipeline_microbatches);
  CAROUSEL_CHECK(num_pipeline_repeats != -1 || N % (S * L) == 0,
                 "base_num_decoder_layers={} is not divisible by ici_pipeline_parallelism x "
                 "num_layers_per_pipeline_stage = {} x {}; choose S and L so that S x L divides "
                 "the layers",
                 N, S, L);
  CAROUSEL_CHECK(S * repeats() * L == N,
                 "ici_pipeline_parallelism x num_pipeline_repeats x "
                 "num_layers_per_pipeline_stage = {} x {} x {} must equal "
                 "base_num_decoder_layers={}",
                 S, repeats(), L, N);
  // The schedule, by the registry's checks (generate()'s messages). A run on one device generates
  // no schedule (trainer.cpp), so only the name and its knobs are checked there.
  const schedule::ScheduleSpec spec = schedule_spec(*this);
  if (num_devices() > 1) {
    schedule::check_schedule(spec);
  } else {
    schedule::check_schedule_knobs(spec);
  }
  CAROUSEL_CHECK(!(pipeline_fsdp_ag_per_repeat && pipeline_fsdp_ag_once),
                 "pipeline_fsdp_ag_per_repeat and pipeline_fsdp_ag_once are exclusive; choose one");
  CAROUSEL_CHECK(ici_fsdp_parallelism >= 1, "ici_fsdp_parallelism={} must be >= 1",
                 ici_fsdp_parallelism);
  CAROUSEL_CHECK(ici_data_parallelism >= 1, "ici_data_parallelism={} must be >= 1",
                 ici_data_parallelism);
  CAROUSEL_CHECK(pipeline_prefetch_lookahead >= 0,
                 "pipeline_prefetch_lookahead={} must be >= 0 (0 = as early as a slot is free)",
                 pipeline_prefetch_lookahead);
  CAROUSEL_CHECK(pipeline_microbatch_group_size >= 0,
                 "pipeline_microbatch_group_size={} must be >= 0 (0 = S)",
                 pipeline_microbatch_group_size);
  CAROUSEL_CHECK(schedule_cost_w <= schedule_cost_b,
                 "schedule_cost_w={} is part of the backward and cannot exceed schedule_cost_b={}",
                 schedule_cost_w, schedule_cost_b);
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
  for (const auto& k : config_keys()) {
    const std::size_t d = distance(name, k.name);
    if (d < best_d) {
      best_d = d;
      best = k.name;
    }
  }
  return best;
}

namespace {
const ConfigKey& find_key(const std::string& name, const std::string& where) {
  for (const auto& k : config_keys()) {
    if (k.name == name) return k;
  }
  fail("unknown config key '{}' ({}); did you mean '{}'? (`carousel train --help-keys` lists all)",
       name, where, closest_key(name));
}

struct Assignment {
  std::string key, value, source;
};

std::vector<Assignment> read_yaml(const std::string& path) {
  CAROUSEL_CHECK(std::filesystem::is_regular_file(path), "config file '{}' does not exist", path);
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    fail("config file '{}' is not valid YAML: {}", path, e.what());
  }
  std::vector<Assignment> out;
  if (root.IsNull()) return out;
  CAROUSEL_CHECK(root.IsMap(), "config file '{}' must be a map of `key: value` lines", path);
  for (const auto& item : root) {
    const std::string k = item.first.as<std::string>();
    CAROUSEL_CHECK(item.second.IsScalar() || item.second.IsNull(),
                   "config file '{}': key '{}' must have a single value, not a list or map", path,
                   k);
    out.push_back({k, item.second.IsNull() ? "" : item.second.as<std::string>(), "file " + path});
  }
  return out;
}
}  // namespace

LoadedConfig load_config(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  std::vector<Assignment> assignments;
  if (!yaml_path.empty()) assignments = read_yaml(yaml_path);
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    CAROUSEL_CHECK(eq != std::string::npos && eq > 0,
                   "command-line argument '{}' is not key=value (e.g. steps=100)", o);
    assignments.push_back({o.substr(0, eq), o.substr(eq + 1), "command line"});
  }
  for (const auto& a : assignments) find_key(a.key, a.source);  // unknown keys first

  LoadedConfig out;
  Config& cfg = out.config;
  std::map<std::string, std::string> source;
  // The model preset first, so explicit model keys override it.
  for (const auto& a : assignments) {
    if (a.key == "model_name") {
      cfg.model_name = a.value;
      source["model_name"] = a.source;
    }
  }
  cfg.model = model_preset(cfg.model_name);
  if (cfg.model_name != "tiny") {
    for (const auto& k : config_keys()) {
      if (k.model_key) source[k.name] = "preset " + cfg.model_name;
    }
  }
  for (const auto& a : assignments) {
    if (a.key == "model_name") continue;
    find_key(a.key, a.source).set(cfg, a.value);
    source[a.key] = a.source;
  }
  for (const auto& k : config_keys()) {
    out.table.push_back({k.name, k.get(cfg), source.count(k.name) ? source[k.name] : "default"});
  }
  cfg.validate();
  return out;
}

}  // namespace carousel
